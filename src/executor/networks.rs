//! The job's network, as upstream's networks manager keeps it: with `FF_NETWORK_PER_BUILD` and
//! no `network_mode`, a bridge network of the job's own is created (labelled, `network_mtu`,
//! `enable_ipv6`), inspected once created, and removed at cleanup together with any container
//! still attached to it; otherwise the configured `network_mode` (or the default bridge) is
//! used as it is and nothing is created or removed.
//!
//! [`NetworkManager`] talks to the Engine through [`NetworkEngine`]: [`DockerNetworks`] is the
//! real one; the conformance suite runs upstream's manager table on a scripted one.

use std::collections::HashMap;
use std::future::Future;

use bollard::models::NetworkCreateRequest;
use bollard::Docker;

use crate::executor::containers::force_remove;
use crate::executor::error::{not_found, SystemError};
use crate::executor::labels::LabelFacts;
use crate::executor::settings::DockerSettings;

/// The Engine option that sets a bridge network's MTU.
pub const MTU_OPTION: &str = "com.docker.network.driver.mtu";

/// A network as the Engine describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkFacts {
    /// The network's ID.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Whether IPv6 is enabled on it.
    pub enable_ipv6: bool,
    /// The IDs of the containers attached to it.
    pub containers: Vec<String>,
}

/// A network to create.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkSpec {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: HashMap<String, String>,
    /// Driver options (`com.docker.network.driver.mtu` when `network_mtu` is set).
    pub options: HashMap<String, String>,
    /// Whether IPv6 is enabled on it.
    pub enable_ipv6: bool,
}

/// The network calls the manager makes; errors are the Engine's text.
pub trait NetworkEngine: Sync {
    /// Creates a bridge network; answers its ID.
    fn create(&self, spec: &NetworkSpec) -> impl Future<Output = Result<String, String>> + Send;
    /// Inspects the network `id`: `Ok(None)` when there is none.
    fn inspect(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<NetworkFacts>, String>> + Send;
    /// Removes the network `id` (gone already is fine).
    fn remove(&self, id: &str) -> impl Future<Output = Result<(), String>> + Send;
    /// Force-removes the container `id` with its anonymous volumes (gone already is fine).
    fn remove_container(&self, id: &str) -> impl Future<Output = Result<(), String>> + Send;
}

impl<T: NetworkEngine> NetworkEngine for &T {
    fn create(&self, spec: &NetworkSpec) -> impl Future<Output = Result<String, String>> + Send {
        (**self).create(spec)
    }

    fn inspect(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<NetworkFacts>, String>> + Send {
        (**self).inspect(id)
    }

    fn remove(&self, id: &str) -> impl Future<Output = Result<(), String>> + Send {
        (**self).remove(id)
    }

    fn remove_container(&self, id: &str) -> impl Future<Output = Result<(), String>> + Send {
        (**self).remove_container(id)
    }
}

/// [`NetworkEngine`] on a Docker Engine.
#[derive(Clone)]
pub struct DockerNetworks {
    docker: Docker,
}

impl DockerNetworks {
    /// The network calls on `docker`.
    pub fn new(docker: Docker) -> Self {
        DockerNetworks { docker }
    }
}

impl NetworkEngine for DockerNetworks {
    async fn create(&self, spec: &NetworkSpec) -> Result<String, String> {
        let request = NetworkCreateRequest {
            name: spec.name.clone(),
            driver: Some("bridge".into()),
            enable_ipv6: Some(spec.enable_ipv6),
            options: Some(spec.options.clone()),
            labels: Some(spec.labels.clone()),
            ..Default::default()
        };
        let created = self
            .docker
            .create_network(request)
            .await
            .map_err(|e| e.to_string())?;
        if created.id.is_empty() {
            return Err(format!(
                "the Engine created network {} without answering its ID",
                spec.name
            ));
        }
        Ok(created.id)
    }

    async fn inspect(&self, id: &str) -> Result<Option<NetworkFacts>, String> {
        match self
            .docker
            .inspect_network(id, None::<bollard::query_parameters::InspectNetworkOptions>)
            .await
        {
            Ok(net) => Ok(Some(NetworkFacts {
                id: net.id.unwrap_or_default(),
                name: net.name.unwrap_or_default(),
                enable_ipv6: net.enable_ipv6.unwrap_or(false),
                containers: net.containers.unwrap_or_default().into_keys().collect(),
            })),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn remove(&self, id: &str) -> Result<(), String> {
        match self.docker.remove_network(id).await {
            Err(e) if !not_found(&e) => Err(e.to_string()),
            _ => Ok(()),
        }
    }

    async fn remove_container(&self, id: &str) -> Result<(), String> {
        force_remove(&self.docker, id)
            .await
            .map_err(|e| e.to_string())
    }
}

/// What decides the job's network.
#[derive(Debug, Clone, Default)]
pub struct NetworkRequest {
    /// `network_mode` (`None` when unset or empty).
    pub network_mode: Option<String>,
    /// The per-build network's name when `FF_NETWORK_PER_BUILD` is on, else `None`.
    pub per_build_name: Option<String>,
    /// The per-build network's labels.
    pub labels: HashMap<String, String>,
    /// `network_mtu` (0: the Engine's default).
    pub mtu: i64,
    /// `enable_ipv6`.
    pub enable_ipv6: bool,
}

impl NetworkRequest {
    /// The request for a job: `network_mode`, `network_mtu` and `enable_ipv6` from `settings`,
    /// the per-build network's name (when `FF_NETWORK_PER_BUILD` is on) and the job's default
    /// labels (no `type`), as upstream labels the network.
    pub fn for_job(
        settings: &DockerSettings,
        per_build_name: Option<String>,
        facts: &LabelFacts,
    ) -> Self {
        NetworkRequest {
            network_mode: settings.network_mode.clone(),
            per_build_name,
            labels: facts.labels("", &[]),
            mtu: settings.services.network_mtu,
            enable_ipv6: settings.services.enable_ipv6,
        }
    }
}

/// Why the job's network could not be set up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NetworkError {
    /// This job's per-build network exists already (a second create).
    #[error("the per-build network {0} of this job was already created")]
    AlreadyCreated(String),
    /// The Engine refused a call.
    #[error("{action} network {name}: {message}")]
    Engine {
        /// `create`, `inspect`.
        action: &'static str,
        /// The network's name.
        name: String,
        /// The Engine's answer.
        message: String,
    },
}

impl From<NetworkError> for SystemError {
    fn from(e: NetworkError) -> Self {
        SystemError::Engine(e.to_string())
    }
}

/// The job's network: what [`NetworkManager::create`] decided, and the per-build network it
/// made, for [`NetworkManager::cleanup`].
pub struct NetworkManager<E> {
    engine: E,
    /// The network mode the containers use (`None`: the default bridge).
    mode: Option<String>,
    /// The per-build network, once created and inspected.
    build_network: Option<NetworkFacts>,
    /// The per-build network's name and ID once created, even when the inspect that followed
    /// failed, so cleanup still removes it.
    created: Option<(String, String)>,
}

impl<E: NetworkEngine> NetworkManager<E> {
    /// A manager with no network decided yet.
    pub fn new(engine: E) -> Self {
        NetworkManager {
            engine,
            mode: None,
            build_network: None,
            created: None,
        }
    }

    /// Decides the job's network mode, as upstream's `Create`: a configured `network_mode` is
    /// used as it is; without it and without `FF_NETWORK_PER_BUILD`, the default bridge
    /// (`None`); else the per-build network is created, inspected, and its name is the mode.
    pub async fn create(
        &mut self,
        request: &NetworkRequest,
    ) -> Result<Option<String>, NetworkError> {
        self.mode = request.network_mode.clone();
        if request.network_mode.is_some() {
            return Ok(self.mode.clone());
        }
        let Some(name) = request.per_build_name.clone() else {
            return Ok(None);
        };
        if let Some((existing, _)) = &self.created {
            return Err(NetworkError::AlreadyCreated(existing.clone()));
        }
        tracing::debug!(network = %name, "creating the job's build network");
        let mut options = HashMap::new();
        if request.mtu != 0 {
            options.insert(MTU_OPTION.to_string(), request.mtu.to_string());
        }
        let spec = NetworkSpec {
            name: name.clone(),
            labels: request.labels.clone(),
            options,
            enable_ipv6: request.enable_ipv6,
        };
        let engine_error = |action, message| NetworkError::Engine {
            action,
            name: name.clone(),
            message,
        };
        let id = self
            .engine
            .create(&spec)
            .await
            .map_err(|m| engine_error("create", m))?;
        self.created = Some((name.clone(), id.clone()));
        let facts = self
            .engine
            .inspect(&id)
            .await
            .map_err(|m| engine_error("inspect", m))?
            .ok_or_else(|| {
                engine_error(
                    "inspect",
                    format!("network {id} was not found right after it was created"),
                )
            })?;
        self.build_network = Some(facts);
        self.mode = Some(name);
        Ok(self.mode.clone())
    }

    /// The network mode decided by [`Self::create`] (`None`: the default bridge).
    pub fn mode(&self) -> Option<&str> {
        self.mode.as_deref()
    }

    /// Whether the job runs on a per-build network this manager created.
    pub fn per_build(&self) -> bool {
        self.build_network.is_some()
    }

    /// The per-build network as the Engine describes it now; `Ok(None)` without one (or when
    /// it is gone), as upstream's `Inspect`.
    pub async fn inspect(&self) -> Result<Option<NetworkFacts>, String> {
        match &self.build_network {
            Some(net) => self.engine.inspect(&net.id).await,
            None => Ok(None),
        }
    }

    /// Removes the per-build network (nothing without one), as upstream's `Cleanup`.
    pub async fn cleanup(&mut self) -> Result<(), String> {
        let Some((name, id)) = self.created.take() else {
            return Ok(());
        };
        self.build_network = None;
        self.engine
            .remove(&id)
            .await
            .map_err(|e| format!("removing network {name} ({id}): {e}"))
    }

    /// The job's cleanup of its network: the containers still attached to the per-build
    /// network are force-removed, then the network. Answers what went wrong.
    pub async fn teardown(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        let Some((name, id)) = self.created.clone() else {
            return problems;
        };
        match self.engine.inspect(&id).await {
            Ok(Some(net)) => {
                for container in &net.containers {
                    if let Err(e) = self.engine.remove_container(container).await {
                        problems.push(format!(
                            "removing container {container} from network {name}: {e}"
                        ));
                    }
                }
            }
            // Gone already: nothing to remove.
            Ok(None) => {
                self.created = None;
                self.build_network = None;
                return problems;
            }
            Err(e) => problems.push(format!("inspecting network {name}: {e}")),
        }
        if let Err(e) = self.cleanup().await {
            problems.push(e);
        }
        problems
    }
}
