//! The shim's command line: which docker-machine to run, where its store is, the name prefix
//! the can-connect cache lifetime and whether machines are reached over SSH. Parsed once by `main.rs`; turned into [`Settings`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::ops::Settings;
use crate::store::Store;

/// `legacy-driver-shim [OPTIONS]`: serve the drover provider protocol on stdio.
#[derive(Debug, Parser)]
#[command(name = "legacy-driver-shim", version, about)]
pub struct Args {
    /// The docker-machine executable (a bare name is looked up in PATH)
    #[arg(long, env = "DROVER_DOCKER_MACHINE", default_value = "docker-machine")]
    pub docker_machine: PathBuf,
    /// The docker-machine store (default: $MACHINE_STORAGE_PATH, else ~/.docker/machine);
    /// when given it is also passed to docker-machine as MACHINE_STORAGE_PATH
    #[arg(long)]
    pub storage_path: Option<PathBuf>,
    /// Refuse to stop or remove machines whose names lack this prefix (overrides the
    /// handshake's prefix)
    #[arg(long)]
    pub name_prefix: Option<String>,
    /// Seconds a positive can-connect result is trusted (upstream: 300; 0 disables)
    #[arg(long, default_value_t = 300)]
    pub can_connect_cache_ttl: u64,
    /// Hand machines out over SSH (the store's IP address, SSH port, user and key; host key
    /// pinned at first use) instead of Docker's TLS port 2376; can-connect checks over SSH
    #[arg(long, env = "DROVER_SHIM_SSH", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub ssh: bool,
}

impl Args {
    /// The settings, reading `MACHINE_STORAGE_PATH`, `HOME` and `MACHINE_BUGSNAG_API_TOKEN`.
    pub fn settings(self) -> Result<Settings, String> {
        let env = |k: &str| std::env::var(k).ok();
        let store = Store::resolve(
            self.storage_path.as_deref(),
            env("MACHINE_STORAGE_PATH").as_deref(),
            env("HOME").as_deref(),
        )
        .ok_or("cannot find the docker-machine store: set MACHINE_STORAGE_PATH or HOME, or pass --storage-path")?;
        let mut child_env = Vec::new();
        if self.storage_path.is_some() {
            child_env.push((
                "MACHINE_STORAGE_PATH".to_string(),
                store.root().display().to_string(),
            ));
        }
        Ok(Settings {
            docker_machine: self.docker_machine,
            store,
            env: child_env,
            bugsnag_token: env("MACHINE_BUGSNAG_API_TOKEN"),
            name_prefix: self.name_prefix.filter(|p| !p.is_empty()),
            can_connect_ttl: Duration::from_secs(self.can_connect_cache_ttl),
            ssh: self.ssh,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_is_off_by_default_and_on_with_the_flag_or_the_environment() {
        let parse = |args: &[&str]| Args::try_parse_from(args).map(|a| a.ssh);
        // SAFETY (of the test): no other test of this crate reads DROVER_SHIM_SSH.
        std::env::remove_var("DROVER_SHIM_SSH");
        assert_eq!(parse(&["shim"]).ok(), Some(false));
        assert_eq!(parse(&["shim", "--ssh"]).ok(), Some(true));
        std::env::set_var("DROVER_SHIM_SSH", "1");
        assert_eq!(parse(&["shim"]).ok(), Some(true));
        std::env::set_var("DROVER_SHIM_SSH", "false");
        assert_eq!(parse(&["shim"]).ok(), Some(false));
        std::env::remove_var("DROVER_SHIM_SSH");
    }
}
