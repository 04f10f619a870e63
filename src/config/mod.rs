//! Machine shape: gitlab-runner's `config.toml`, read unchanged.

pub mod cron;
pub mod periods;
