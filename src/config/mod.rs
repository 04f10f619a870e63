//! Machine shape: gitlab-runner's `config.toml`, read unchanged.
