//! drover: a drop-in replacement for GitLab Runner's `docker+machine` autoscaling executor.
//!
//! The crate is split by concern, each on one side of its boundary:
//!
//! | module | concern | driven by |
//! |---|---|---|
//! | [`config`] | machine shape: `config.toml` model, loader, schedules | everything reads it |
//! | [`provider`] | machine lifecycle: the plugin client, credentials cache, conformance suite; the protocol's wire types are the `drover-protocol` crate | the manager, `drover provider test` |
//! | [`engine`] | autoscaling and job routing, sans-IO: the `drover-engine` crate (no runtime, I/O or clock in its dependency tree), re-exported with the policies and the router's settings built from the config; its `router` is gitlab-runner's run loop (feeder, workers, gates, health, re-queue, releases) | the manager, the simulator, `drover autoscale decide` |
//! | [`bounded`] | bounded reads of outside input (the `drover-protocol` crate's) | every reader of files and plugin output |
//! | [`manager`] | `drover run`: the driver of the job router, the per-provider pool that drives the engine, GitLab links, lifecycle, reload | `drover run`, `drover run-single` |
//! | [`executor`] | in-machine execution: one job on a Docker Engine, trace and result out | the manager, `drover exec-job` |
//! | [`job`] | the job model: the payload GitLab sends, shared by the GitLab client and the executor | both |
//! | [`gitlab`] | GitLab I/O (the API client comes with `drover run`) | the manager |
//! | [`ledger`] | the crash-safe machine ledger beside `config.toml` (issue 13) | the manager |
//! | [`metrics`] | gitlab-runner's Prometheus metrics and the `listen_address` HTTP server | the manager |
//! | [`version`] | what drover reports about itself (version, revision, platform) | GitLab I/O, metrics, jobs' variables, `--version` |
//! | [`sim`] | the discrete-event simulator that drives [`engine`] and its job router in virtual time | `drover simulate`, `drover compare` |
//! | [`mask`] | streaming secret masking (phrases, URL parameters, token prefixes), a leaf | the job log, [`secrets`] |
//! | [`secrets`] | the secrets the process knows, redacted from its own log | the executor, the log writer |
//! | [`cli`] | the `drover` command line: parsing, output, exit codes | `main.rs` |
//!
//! The workspace's other crates: `drover-engine` (`engine/`), `drover-protocol`
//! (`provider-protocol/`), `legacy-driver-shim` (links only the protocol) and `gitlab-sim`
//! (the tests' GitLab). See `docs/architecture.md`.

#![warn(missing_docs)]

/// Bounded reads of outside input (files, plugin and command output lines): drover-protocol's,
/// shared with the provider plugins.
pub use drover_protocol::bounded;
pub mod cache;
pub mod cli;
pub mod config;
pub mod engine;
pub mod executor;
pub mod gitlab;
pub mod helper;
pub mod job;
pub mod ledger;
pub mod manager;
pub mod mask;
pub mod metrics;
pub mod output;
pub mod provider;
pub mod secrets;
pub mod signals;
pub mod sim;
pub mod upstream_log;
pub mod version;
