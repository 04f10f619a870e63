//! Machine lifecycle through provider plugins: the boundary between drover and a cloud.
//!
//! A provider plugin is an executable speaking a small versioned JSON-lines protocol on stdio
//! ([`protocol`], specified in `docs/provider-plugins.md`). [`plugin::Plugin`] spawns and talks
//! to one; [`Provider`] is the typed face the manager uses; [`cache::CredentialCache`] wraps any
//! provider so that a warm machine costs no provider call for its credentials;
//! [`observe::Observed`] reports every call's outcome and duration (for metrics);
//! [`conformance`] is the black-box suite every plugin must pass (`drover provider test`).
//! Nothing here decides how many machines there should be: the autoscaling engine emits
//! commands, the manager executes them through this module.

pub mod cache;
pub mod conformance;
pub mod error;
pub mod observe;
pub mod plugin;
/// The provider protocol's wire types: the `drover-protocol` crate, shared with the plugins.
pub use drover_protocol as protocol;

use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub use error::ProviderError;
pub use protocol::{Endpoint, ErrorKind, InspectResult, MachineEntry, RemoveResult};

use protocol::{
    CanConnectResult, CreateParams, CredentialsResult, ExistsResult, ListResult, NameParams,
    Operation,
};

/// Upstream's deadline for every docker-machine command but `stop`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
/// Upstream's deadline for `stop`.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Per-call settings: a deadline and a cancellation token.
#[derive(Debug, Clone, Default)]
pub struct Call {
    /// The deadline; `None` uses the operation's default ([`default_timeout`]).
    pub timeout: Option<Duration>,
    /// Cancelling it abandons the call (the plugin is told, or killed).
    pub cancel: CancellationToken,
}

impl Call {
    /// A call with the default deadline and a fresh token.
    pub fn new() -> Self {
        Call::default()
    }

    /// A call with the given deadline.
    pub fn with_timeout(timeout: Duration) -> Self {
        Call {
            timeout: Some(timeout),
            cancel: CancellationToken::new(),
        }
    }
}

/// Upstream's deadline for an operation name: `stop` 1 min, everything else 1 h.
pub fn default_timeout(op: &str) -> Duration {
    if op == "stop" {
        STOP_TIMEOUT
    } else {
        DEFAULT_TIMEOUT
    }
}

/// The provider operations, typed. Implemented by [`plugin::Plugin`] and by decorators.
pub trait Provider: Send + Sync {
    /// Creates machine `params.name`.
    fn create(
        &self,
        params: &CreateParams,
        call: &Call,
    ) -> impl Future<Output = Result<(), ProviderError>> + Send;
    /// Every machine the plugin can see.
    fn list(
        &self,
        call: &Call,
    ) -> impl Future<Output = Result<Vec<MachineEntry>, ProviderError>> + Send;
    /// Whether `name` exists.
    fn exists(
        &self,
        name: &str,
        call: &Call,
    ) -> impl Future<Output = Result<bool, ProviderError>> + Send;
    /// Whether `name`'s Docker endpoint can be reached (positives may be cached by the plugin).
    fn can_connect(
        &self,
        name: &str,
        call: &Call,
    ) -> impl Future<Output = Result<bool, ProviderError>> + Send;
    /// How to reach `name`'s Docker endpoint.
    fn credentials(
        &self,
        name: &str,
        call: &Call,
    ) -> impl Future<Output = Result<Endpoint, ProviderError>> + Send;
    /// Stops `name`.
    fn stop(
        &self,
        name: &str,
        call: &Call,
    ) -> impl Future<Output = Result<(), ProviderError>> + Send;
    /// Removes `name` (idempotent).
    fn remove(
        &self,
        name: &str,
        call: &Call,
    ) -> impl Future<Output = Result<RemoveResult, ProviderError>> + Send;
    /// Removes `name`'s record even if the cloud side fails.
    fn force_remove(
        &self,
        name: &str,
        call: &Call,
    ) -> impl Future<Output = Result<RemoveResult, ProviderError>> + Send;
    /// Driver name and metric labels of `name`.
    fn inspect(
        &self,
        name: &str,
        call: &Call,
    ) -> impl Future<Output = Result<InspectResult, ProviderError>> + Send;
}

impl plugin::Plugin {
    async fn typed<T: DeserializeOwned>(
        &self,
        op: Operation,
        call: &Call,
    ) -> Result<T, ProviderError> {
        let name = op.name();
        let timeout = call.timeout.unwrap_or_else(|| default_timeout(name));
        let v = self.call(op, timeout, &call.cancel).await?;
        serde_json::from_value(v).map_err(|e| ProviderError::Protocol {
            op: name,
            message: format!("bad result: {e}"),
        })
    }
}

fn named(name: &str) -> NameParams {
    NameParams {
        name: name.to_string(),
    }
}

#[derive(serde::Deserialize)]
struct Empty {}

impl Provider for plugin::Plugin {
    async fn create(&self, params: &CreateParams, call: &Call) -> Result<(), ProviderError> {
        self.typed::<Empty>(Operation::Create(params.clone()), call)
            .await
            .map(|_| ())
    }
    async fn list(&self, call: &Call) -> Result<Vec<MachineEntry>, ProviderError> {
        Ok(self
            .typed::<ListResult>(Operation::List, call)
            .await?
            .machines)
    }
    async fn exists(&self, name: &str, call: &Call) -> Result<bool, ProviderError> {
        let r: ExistsResult = self.typed(Operation::Exists(named(name)), call).await?;
        Ok(r.exists)
    }
    async fn can_connect(&self, name: &str, call: &Call) -> Result<bool, ProviderError> {
        let r: CanConnectResult = self.typed(Operation::CanConnect(named(name)), call).await?;
        Ok(r.can_connect)
    }
    async fn credentials(&self, name: &str, call: &Call) -> Result<Endpoint, ProviderError> {
        let r: CredentialsResult = self
            .typed(Operation::Credentials(named(name)), call)
            .await?;
        Ok(r.endpoint)
    }
    async fn stop(&self, name: &str, call: &Call) -> Result<(), ProviderError> {
        self.typed::<Empty>(Operation::Stop(named(name)), call)
            .await
            .map(|_| ())
    }
    async fn remove(&self, name: &str, call: &Call) -> Result<RemoveResult, ProviderError> {
        self.typed(Operation::Remove(named(name)), call).await
    }
    async fn force_remove(&self, name: &str, call: &Call) -> Result<RemoveResult, ProviderError> {
        self.typed(Operation::ForceRemove(named(name)), call).await
    }
    async fn inspect(&self, name: &str, call: &Call) -> Result<InspectResult, ProviderError> {
        self.typed(Operation::Inspect(named(name)), call).await
    }
}
