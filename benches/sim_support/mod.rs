//! What the simulator benches share: one run of a workload through `drover simulate`'s path,
//! timed, with the default provider model.

use std::time::Instant;

use drover::config::Config;
use drover::sim::provider::ProviderModel;
use drover::sim::trace::Trace;
use drover::sim::workload::Workload;
use drover::sim::{simulate, Scenario};

/// Simulates `workload` on `config` and returns the trace and the seconds it took; a scenario
/// the simulator refuses ends the bench with its message.
pub fn run_timed(config: &Config, workload: &Workload) -> (Trace, f64) {
    let scenario = Scenario {
        config,
        workload,
        from: None,
        until: None,
        model: ProviderModel::default(),
        any_runner: false,
    };
    let started = Instant::now();
    match simulate(&scenario) {
        Ok(t) => (t, started.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
