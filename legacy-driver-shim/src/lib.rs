//! `legacy-driver-shim`: a drover provider plugin that drives the archived `docker-machine`
//! executable exactly as GitLab Runner's docker+machine executor does.
//!
//! This crate owns one concern: machine lifecycle through docker-machine. It never decides how
//! many machines there should be (that is drover's autoscaling engine) and never runs a shell:
//! every option travels as its own argv element, so nothing in a config can inject a command.

#![warn(missing_docs)]

pub mod argv;
pub mod cache;
pub mod exec;
pub mod ops;
pub mod serve;
pub mod settings;
pub mod ssh;
pub mod store;

use std::process::ExitCode;
use std::sync::Arc;

/// Logs to stderr, then serves the protocol on stdin/stdout until EOF.
pub fn main(args: settings::Args) -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SHIM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let settings = match args.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("legacy-driver-shim: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("legacy-driver-shim: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let shim = Arc::new(ops::Shim::new(settings));
    rt.block_on(serve::serve(
        shim,
        tokio::io::BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
    ));
    ExitCode::SUCCESS
}
