//! drover: a drop-in replacement for GitLab Runner's `docker+machine` autoscaling executor.
//!
//! The crate is split by concern, each on one side of its boundary:
//!
//! | module | concern | driven by |
//! |---|---|---|
//! | [`config`] | machine shape: `config.toml` model, loader, schedules | everything reads it |
//! | [`engine`] | autoscaling, sans-IO: docker+machine's decisions as a pure state machine | the manager, the simulator, `drover autoscale decide` |
//! | [`cli`] | the `drover` command line: parsing, output, exit codes | `main.rs` |
//!
//! Further concerns (the provider plugin boundary, the sans-IO autoscaling engine, the job
//! manager, the Docker executor, the GitLab API client and the simulator) each get their own
//! module as they land; see `docs/architecture.md`.

#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod engine;
pub mod executor;
pub mod gitlab;
pub mod provider;
pub mod sim;
