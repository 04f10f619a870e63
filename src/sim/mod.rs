//! The migration harness: a deterministic discrete-event simulator that replays a workload
//! through the autoscaling engine in virtual time, and the reports built from its runs.
//!
//! Sub-concerns, one file each:
//!
//! * inputs: [`workload`] (the job list and its CSV format, with [`csv`]), [`import`] (GitLab
//!   jobs exports), [`scenario`] (config + workload + period, laid out in virtual time),
//!   [`provider`] (simulated creation and removal latencies and failures), [`examples`] (the
//!   bundled config and workloads);
//! * the run: [`queue`] (virtual time), [`run`] (the driver of the engine and the provider
//!   model), [`route`] and `workers` (the driver of the job router: gitlab-runner's run loop), [`store`] (the
//!   simulated `docker-machine` listing);
//! * outputs: [`trace`] (what a run records), [`report`], [`plot`] and [`compare`];
//! * against upstream: [`decide`] (one Acquire pass explained from a state file, what
//!   `drover autoscale decide` prints) and [`upstream`] (a gitlab-runner log replayed decision by
//!   decision through [`decide`], and as a whole through the simulator: `drover compare
//!   --upstream-log`).
//!
//! The simulator never decides scaling itself: every Acquire pass, `Use` session and release
//! goes to the same [`crate::engine::Engine`] the manager drives, and nothing here reads a
//! clock. Entry point: [`simulate`].

pub mod compare;
pub mod csv;
pub mod decide;
pub mod examples;
pub mod import;
pub mod plot;
pub mod provider;
pub mod queue;
pub mod report;
pub mod route;
pub mod run;
pub mod scenario;
pub mod store;
pub mod trace;
pub mod upstream;
mod workers;
pub mod workload;

pub use run::{simulate, Simulation};
pub use scenario::{Scenario, ScenarioError};
