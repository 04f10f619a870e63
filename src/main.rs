//! The `drover` binary: parse the command line, run it, turn the outcome into an exit code.

fn main() -> std::process::ExitCode {
    drover::cli::main()
}
