//! Machine shape: gitlab-runner's `config.toml`, read unchanged.

pub mod cron;
pub mod periods;

pub mod cache;
pub mod diagnostic;
pub mod docker;
mod document;
pub mod duration;
pub mod expand;
pub mod load;
pub mod machine;
pub mod model;
mod node;
mod schedule;
mod schema;
pub mod validate;
mod values;
mod walk;

#[cfg(test)]
mod agreement_tests;

pub use diagnostic::{ConfigError, Diagnostic};
pub use duration::GoDuration;
pub use load::{
    default_certificate_directory, default_config_directory, default_config_path, load_file,
    load_str, Loaded,
};
pub use model::{
    AutoscalingConfig, CacheAzureConfig, CacheConfig, CacheGcsConfig, CacheS3Config, Config,
    CustomBuildDir, CustomExecutorConfig, DockerConfig, DockerService, EffectiveIdle,
    GlobalMachine, MachineConfig, RunnerConfig, SessionServerConfig, ShutdownDrainConfig,
    SshConfig,
};
