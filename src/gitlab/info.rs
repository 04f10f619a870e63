//! The `info` object sent with job requests, verify, registration and job updates (spec §4).

use std::collections::BTreeMap;

use serde::Serialize;

use super::version;
use crate::config::RunnerConfig;

/// `info.features`: every key is always sent, false ones included, in upstream's order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[allow(missing_docs)]
pub struct Features {
    pub variables: bool,
    pub image: bool,
    pub services: bool,
    pub artifacts: bool,
    pub cache: bool,
    pub fallback_cache_keys: bool,
    pub shared: bool,
    pub upload_multiple_artifacts: bool,
    pub upload_raw_artifacts: bool,
    pub session: bool,
    pub terminal: bool,
    pub refspecs: bool,
    pub masking: bool,
    pub proxy: bool,
    pub raw_variables: bool,
    pub artifacts_exclude: bool,
    pub multi_build_steps: bool,
    pub trace_reset: bool,
    pub trace_checksum: bool,
    pub trace_size: bool,
    pub vault_secrets: bool,
    pub cancelable: bool,
    pub return_exit_code: bool,
    pub service_variables: bool,
    pub service_multiple_aliases: bool,
    pub image_executor_opts: bool,
    pub service_executor_opts: bool,
    pub cancel_gracefully: bool,
    pub native_steps_integration: bool,
    pub two_phase_job_commit: bool,
    pub job_inputs: bool,
}

impl Features {
    /// The network layer's features, always advertised (and all that registration sends).
    pub fn network() -> Features {
        Features {
            trace_reset: true,
            trace_checksum: true,
            trace_size: true,
            cancelable: true,
            cancel_gracefully: true,
            two_phase_job_commit: true,
            job_inputs: true,
            ..Features::default()
        }
    }

    /// The features of the docker and docker+machine executors with a script shell.
    pub fn docker() -> Features {
        Features {
            // Docker executor.
            image: true,
            image_executor_opts: true,
            native_steps_integration: true,
            service_executor_opts: true,
            service_multiple_aliases: true,
            service_variables: true,
            services: true,
            session: true,
            terminal: true,
            variables: true,
            // Script shell.
            artifacts: true,
            upload_multiple_artifacts: true,
            upload_raw_artifacts: true,
            cache: true,
            fallback_cache_keys: true,
            refspecs: true,
            masking: true,
            raw_variables: true,
            artifacts_exclude: true,
            multi_build_steps: true,
            vault_secrets: true,
            return_exit_code: true,
            ..Features::network()
        }
    }

    /// The features for an executor name: docker's for `docker`/`docker+machine`, the network
    /// layer's alone for anything drover does not run.
    pub fn for_executor(executor: &str) -> Features {
        match executor {
            "docker" | "docker+machine" | "docker-autoscaler" => Features::docker(),
            _ => Features::network(),
        }
    }
}

/// `info.config`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InfoConfig {
    /// `[runners.docker] gpus`, trimmed; always present.
    pub gpus: String,
}

/// The `info` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Info {
    /// `gitlab-runner`.
    pub name: String,
    /// The upstream version drover follows.
    pub version: String,
    /// The build revision.
    pub revision: String,
    /// GOOS.
    pub platform: String,
    /// GOARCH.
    pub architecture: String,
    /// The configured executor (empty at registration).
    pub executor: String,
    /// The configured shell, else the executor's default (empty at registration).
    pub shell: String,
    /// Advertised features.
    pub features: Features,
    /// Executor settings GitLab wants to know.
    pub config: InfoConfig,
    /// Global and runner labels merged, only when any are configured.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Info {
    /// Info with no executor: what registration sends (network features only).
    pub fn registration() -> Info {
        Info {
            name: "gitlab-runner".into(),
            version: version::UPSTREAM_VERSION.into(),
            revision: version::revision().into(),
            platform: version::platform().into(),
            architecture: version::architecture().into(),
            executor: String::new(),
            shell: String::new(),
            features: Features::network(),
            config: InfoConfig::default(),
            labels: BTreeMap::new(),
        }
    }

    /// Info for a configured runner; `global_labels` are `config.toml`'s top-level `labels`,
    /// overridden by the runner's own.
    pub fn for_runner(runner: &RunnerConfig, global_labels: &BTreeMap<String, String>) -> Info {
        let shell = if runner.shell.trim().is_empty() {
            match runner.executor.as_str() {
                "docker" | "docker+machine" | "docker-autoscaler" => "bash".to_owned(),
                _ => String::new(),
            }
        } else {
            runner.shell.clone()
        };
        let mut labels = global_labels.clone();
        labels.extend(runner.labels.clone());
        Info {
            executor: runner.executor.clone(),
            shell,
            features: Features::for_executor(&runner.executor),
            config: InfoConfig {
                gpus: runner
                    .docker
                    .as_ref()
                    .map(|d| d.gpus.trim().to_owned())
                    .unwrap_or_default(),
            },
            labels,
            ..Info::registration()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_features_match_the_spec_table() {
        let v = serde_json::to_value(Features::docker()).unwrap();
        let map = v.as_object().unwrap();
        assert_eq!(map.len(), 31);
        let falses: Vec<_> = map
            .iter()
            .filter(|(_, v)| *v == false)
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(falses, ["proxy", "shared"]);
    }

    #[test]
    fn registration_sends_network_features_only() {
        let v = serde_json::to_value(Info::registration()).unwrap();
        let trues: Vec<_> = v["features"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| **v == true)
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            trues,
            [
                "trace_reset",
                "trace_checksum",
                "trace_size",
                "cancelable",
                "cancel_gracefully",
                "two_phase_job_commit",
                "job_inputs"
            ]
        );
        assert_eq!(v["config"]["gpus"], "");
        assert!(v.get("labels").is_none());
    }
}
