//! `drover provider …`: tools for provider plugin authors.
//!
//! `drover provider test PATH [-- ARGS]` runs the conformance suite against a plugin
//! executable, printing one line per check and exiting non-zero when any check fails. It only
//! reports; it never touches drover's own machines (the suite creates and removes one machine
//! named with `--name-prefix`).

use crate::cli::output::{errln, outln};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::provider::conformance::{self, SuiteConfig};
use crate::provider::plugin::PluginCommand;

/// `drover provider`.
#[derive(Debug, Args)]
pub struct ProviderArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ProviderCommand,
}

/// The `provider` subcommands.
#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Run the conformance suite against a provider plugin executable
    Test(TestArgs),
}

/// `drover provider test PATH [-- ARGS]`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The plugin executable
    pub path: PathBuf,
    /// Arguments passed to the plugin (after `--`)
    #[arg(last = true)]
    pub args: Vec<String>,
    /// MachineDriver for the test machine
    #[arg(long, default_value = "")]
    pub driver: String,
    /// A MachineOptions entry (key=value or key) for the test machine; repeatable
    #[arg(long = "machine-option", value_name = "OPTION")]
    pub machine_options: Vec<String>,
    /// A MachineOptionsWithName template (with %s) for the test machine; repeatable
    #[arg(long = "machine-option-with-name", value_name = "TEMPLATE")]
    pub machine_options_with_name: Vec<String>,
    /// Name prefix sent at the handshake and used for the test machine
    #[arg(long, default_value = "drover-conformance-", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub name_prefix: String,
    /// Deadline for each call, in seconds (1 to 86400)
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Show the plugin's stderr (its log lines) and drover's protocol warnings on stderr
    #[arg(short, long)]
    pub verbose: bool,
}

impl ProviderArgs {
    /// Whether the command asked for the plugin's log lines (`-v`).
    pub fn verbose(&self) -> bool {
        match &self.command {
            ProviderCommand::Test(t) => t.verbose,
        }
    }
}

/// Runs `drover provider …`.
pub fn run(args: ProviderArgs) -> ExitCode {
    match args.command {
        ProviderCommand::Test(t) => test(t),
    }
}

fn test(t: TestArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("drover: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cfg = SuiteConfig {
        driver: t.driver,
        options: t.machine_options,
        options_with_name: t.machine_options_with_name,
        name_prefix: t.name_prefix,
        timeout: Duration::from_secs(t.timeout),
    };
    let cmd = PluginCommand::new(t.path.clone(), t.args);
    let results = rt.block_on(conformance::run(cmd, &cfg, |r| outln!("{}", r.line())));
    let failed = results.iter().filter(|r| !r.passed()).count();
    outln!(
        "{} checks, {} passed, {failed} failed",
        results.len(),
        results.len() - failed
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        errln!(
            "drover: provider plugin {} failed {failed} conformance check(s); see the FAIL lines above and docs/provider-plugins.md",
            t.path.display()
        );
        ExitCode::FAILURE
    }
}
