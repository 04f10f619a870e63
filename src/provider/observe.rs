//! The observing decorator: reports every provider call's operation, machine, outcome and
//! duration to an [`Observer`], Karpenter-style (its metrics cloud provider wraps any
//! provider the same way).
//!
//! The manager plugs in an observer that feeds upstream's histograms (creation, failed
//! creation, stopping and removal durations) and logs; tests plug in a recorder. The
//! decorator changes no result and makes no decision.

use std::time::{Duration, Instant};

use super::protocol::CreateParams;
use super::{
    Call, Endpoint, ErrorKind, InspectResult, MachineEntry, Provider, ProviderError, RemoveResult,
};

/// One finished provider call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation<'a> {
    /// The operation (`create`, `remove`, …).
    pub op: &'static str,
    /// The machine, for operations on one.
    pub machine: Option<&'a str>,
    /// `None` on success, else the error's kind.
    pub error: Option<ErrorKind>,
    /// How long the call took.
    pub elapsed: Duration,
}

/// Receives observations. Must be cheap and must not block.
pub trait Observer: Send + Sync {
    /// Called once per finished call.
    fn observe(&self, o: &Observation<'_>);
}

/// Wraps a provider and reports each call to an observer.
#[derive(Debug)]
pub struct Observed<P, O> {
    inner: P,
    observer: O,
}

impl<P, O> Observed<P, O> {
    /// Wraps `inner`, reporting to `observer`.
    pub fn new(inner: P, observer: O) -> Self {
        Observed { inner, observer }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The observer.
    pub fn observer(&self) -> &O {
        &self.observer
    }
}

impl<P: Provider, O: Observer> Observed<P, O> {
    async fn timed<T>(
        &self,
        op: &'static str,
        machine: Option<&str>,
        f: impl std::future::Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        let start = Instant::now();
        let r = f.await;
        self.observer.observe(&Observation {
            op,
            machine,
            error: r.as_ref().err().map(ProviderError::kind),
            elapsed: start.elapsed(),
        });
        r
    }
}

impl<P: Provider, O: Observer> Provider for Observed<P, O> {
    async fn create(&self, params: &CreateParams, call: &Call) -> Result<(), ProviderError> {
        self.timed(
            "create",
            Some(&params.name),
            self.inner.create(params, call),
        )
        .await
    }
    async fn list(&self, call: &Call) -> Result<Vec<MachineEntry>, ProviderError> {
        self.timed("list", None, self.inner.list(call)).await
    }
    async fn exists(&self, name: &str, call: &Call) -> Result<bool, ProviderError> {
        self.timed("exists", Some(name), self.inner.exists(name, call))
            .await
    }
    async fn can_connect(&self, name: &str, call: &Call) -> Result<bool, ProviderError> {
        self.timed(
            "can_connect",
            Some(name),
            self.inner.can_connect(name, call),
        )
        .await
    }
    async fn credentials(&self, name: &str, call: &Call) -> Result<Endpoint, ProviderError> {
        self.timed(
            "credentials",
            Some(name),
            self.inner.credentials(name, call),
        )
        .await
    }
    async fn stop(&self, name: &str, call: &Call) -> Result<(), ProviderError> {
        self.timed("stop", Some(name), self.inner.stop(name, call))
            .await
    }
    async fn remove(&self, name: &str, call: &Call) -> Result<RemoveResult, ProviderError> {
        self.timed("remove", Some(name), self.inner.remove(name, call))
            .await
    }
    async fn force_remove(&self, name: &str, call: &Call) -> Result<RemoveResult, ProviderError> {
        self.timed(
            "force_remove",
            Some(name),
            self.inner.force_remove(name, call),
        )
        .await
    }
    async fn inspect(&self, name: &str, call: &Call) -> Result<InspectResult, ProviderError> {
        self.timed("inspect", Some(name), self.inner.inspect(name, call))
            .await
    }
}
