//! The migration harness: a deterministic discrete-event simulator that replays a workload
//! through the autoscaling engine in virtual time, and the reports built from its runs.
//!
//! Sub-concerns, one file each: [`workload`] (the job list and its CSV format), [`import`]
//! (GitLab jobs exports), [`queue`] (virtual time), [`provider`] (simulated creation and removal
//! latencies and failures), [`trace`] (what a run records), [`report`], [`plot`] and
//! [`compare`] (what is shown from it). The simulator never decides scaling itself: it drives
//! the same engine the manager drives.

pub mod compare;
pub mod csv;
pub mod examples;
pub mod import;
pub mod plot;
pub mod provider;
pub mod queue;
pub mod report;
pub mod run;
pub mod scenario;
pub mod store;
pub mod trace;
mod workers;
pub mod workload;

pub use run::{simulate, Simulation};
pub use scenario::{Scenario, ScenarioError};
