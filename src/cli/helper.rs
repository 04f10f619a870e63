//! `drover helper …` (hidden): drover acting as `gitlab-runner-helper` for the helper commands
//! the executor emits, so a locally built helper image (drover plus bash and git) works
//! without GitLab's registry. The image's `/usr/bin/gitlab-runner-helper` runs
//! `drover helper "$@"`. The commands live in `crate::helper`; this is their
//! command line, with upstream's names and flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::helper::health_check;

/// Arguments of `drover helper`.
#[derive(Debug, Args)]
pub struct HelperArgs {
    /// The helper command
    #[command(subcommand)]
    pub command: HelperCommand,
}

/// Helper commands.
#[derive(Debug, Subcommand)]
pub enum HelperCommand {
    /// Make a fresh volume writable for any user (chmod 0777), as upstream's `cache-init`
    #[command(name = "cache-init")]
    CacheInit {
        /// The directory to open up
        dir: PathBuf,
    },
    /// Wait until a service accepts a TCP connection (address and ports from the
    /// environment: `*_TCP_ADDR`, `*_TCP_PORT`), as upstream's `health-check`
    #[command(name = "health-check")]
    HealthCheck {
        /// Service port (replaces the ports from the environment)
        #[arg(short = 'p', long = "port")]
        port: Vec<String>,
    },
}

/// Runs a helper command.
pub fn run(args: HelperArgs) -> ExitCode {
    match args.command {
        HelperCommand::CacheInit { dir } => match cache_init(&dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("drover: cache-init {}: {e}", dir.display());
                ExitCode::from(1)
            }
        },
        HelperCommand::HealthCheck { port } => {
            match health_check::target_from_env(std::env::vars(), &port) {
                Ok(target) => {
                    health_check::wait(&target, &mut std::io::stdout());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("FATAL: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

fn cache_init(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
}
