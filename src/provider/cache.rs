//! The credentials cache: a decorator that makes a warm machine's credentials free.
//!
//! A machine's Docker endpoint and certificates do not change during its life, so the first
//! successful `credentials` answer is kept per machine name and served from memory afterwards.
//! The entry is dropped whenever something suggests it may be stale: a failed `credentials`
//! or `can_connect`, a negative `can_connect`, any `create`, `stop`, `remove` or
//! `force_remove` of that name, and [`CredentialCache::invalidate`] (the manager calls it when
//! connecting with cached credentials fails). Every other call passes straight through.

use std::collections::HashMap;
use std::sync::Mutex;

use super::protocol::CreateParams;
use super::{Call, Endpoint, InspectResult, MachineEntry, Provider, ProviderError, RemoveResult};

/// Wraps a provider and caches credentials per machine.
#[derive(Debug)]
pub struct CredentialCache<P> {
    inner: P,
    entries: Mutex<HashMap<String, Endpoint>>,
}

impl<P> CredentialCache<P> {
    /// Wraps `inner`.
    pub fn new(inner: P) -> Self {
        CredentialCache {
            inner,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Forgets `name`'s credentials (e.g. after connecting with them failed).
    pub fn invalidate(&self, name: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    fn get(&self, name: &str) -> Option<Endpoint> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    fn put(&self, name: &str, e: Endpoint) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), e);
    }
}

impl<P: Provider> Provider for CredentialCache<P> {
    async fn create(&self, params: &CreateParams, call: &Call) -> Result<(), ProviderError> {
        self.invalidate(&params.name);
        self.inner.create(params, call).await
    }
    async fn list(&self, call: &Call) -> Result<Vec<MachineEntry>, ProviderError> {
        self.inner.list(call).await
    }
    async fn exists(&self, name: &str, call: &Call) -> Result<bool, ProviderError> {
        self.inner.exists(name, call).await
    }
    async fn can_connect(&self, name: &str, call: &Call) -> Result<bool, ProviderError> {
        let r = self.inner.can_connect(name, call).await;
        if !matches!(r, Ok(true)) {
            self.invalidate(name);
        }
        r
    }
    async fn credentials(&self, name: &str, call: &Call) -> Result<Endpoint, ProviderError> {
        if let Some(e) = self.get(name) {
            return Ok(e);
        }
        match self.inner.credentials(name, call).await {
            Ok(e) => {
                self.put(name, e.clone());
                Ok(e)
            }
            Err(err) => {
                self.invalidate(name);
                Err(err)
            }
        }
    }
    async fn stop(&self, name: &str, call: &Call) -> Result<(), ProviderError> {
        self.invalidate(name);
        self.inner.stop(name, call).await
    }
    async fn remove(&self, name: &str, call: &Call) -> Result<RemoveResult, ProviderError> {
        self.invalidate(name);
        self.inner.remove(name, call).await
    }
    async fn force_remove(&self, name: &str, call: &Call) -> Result<RemoveResult, ProviderError> {
        self.invalidate(name);
        self.inner.force_remove(name, call).await
    }
    async fn inspect(&self, name: &str, call: &Call) -> Result<InspectResult, ProviderError> {
        self.inner.inspect(name, call).await
    }
}
