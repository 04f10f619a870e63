//! Machine shape: gitlab-runner's `config.toml`, read unchanged.

pub mod cache;
pub mod docker;
pub mod duration;
pub mod machine;
pub mod model;

pub use duration::GoDuration;
pub use model::{
    AutoscalingConfig, CacheAzureConfig, CacheConfig, CacheGcsConfig, CacheS3Config, Config,
    CustomBuildDir, CustomExecutorConfig, DockerConfig, DockerService, EffectiveIdle,
    GlobalMachine, MachineConfig, RunnerConfig, SessionServerConfig, ShutdownDrainConfig,
    SshConfig,
};
