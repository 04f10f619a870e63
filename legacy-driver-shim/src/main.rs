//! `legacy-driver-shim`: parse the flags, then serve the provider protocol on stdio.

use clap::Parser;

fn main() -> std::process::ExitCode {
    legacy_driver_shim::main(legacy_driver_shim::settings::Args::parse())
}
