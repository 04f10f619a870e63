//! What the simulator benches share: one run of a workload through `drover simulate`'s path
//! ([`drover::cli::simulate::RunArgs::run_owned`]: the workload is dropped once laid out in
//! virtual time), timed, with the default provider model.

use std::time::Instant;

use drover::config::Config;
use drover::sim::provider::ProviderModel;
use drover::sim::trace::Trace;
use drover::sim::workload::Workload;
use drover::sim::{Scenario, Simulation};

/// Simulates `workload` on `config` and returns the trace and the seconds it took; a scenario
/// the simulator refuses ends the bench with its message.
pub fn run_timed(config: &Config, workload: Workload) -> (Trace, f64) {
    let started = Instant::now();
    let scenario = Scenario {
        config,
        workload: &workload,
        from: None,
        until: None,
        model: ProviderModel::default(),
        any_runner: false,
    };
    let simulation = match Simulation::new(&scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    drop(workload);
    let trace = simulation.run();
    (trace, started.elapsed().as_secs_f64())
}
