//! What the simulator benches share: one run of a workload through `drover simulate`'s own
//! path ([`drover::cli::simulate::RunArgs::run_owned`] with the command line's defaults: the
//! default provider model, the whole workload, the workload dropped once laid out in virtual
//! time), timed.

use std::time::Instant;

use clap::Parser;
use drover::cli::simulate::RunArgs;
use drover::config::Config;
use drover::sim::trace::Trace;
use drover::sim::workload::Workload;

/// `drover simulate`'s run options, parsed from an empty command line (its defaults).
#[derive(Parser)]
struct Defaults {
    #[command(flatten)]
    run: RunArgs,
}

/// Simulates `workload` on `config` and returns the trace and the seconds it took; a scenario
/// the simulator refuses ends the bench with its message.
pub fn run_timed(config: &Config, workload: Workload) -> (Trace, f64) {
    let args = match Defaults::try_parse_from(["bench"]) {
        Ok(d) => d.run,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let started = Instant::now();
    match args.run_owned(config, workload) {
        Ok(trace) => (trace, started.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("{e:#}");
            std::process::exit(1);
        }
    }
}
