//! Every byte a command prints goes through here: results to stdout with [`out!`] and
//! [`outln!`], messages to stderr with [`errln!`]. `print!`/`println!` panic when stdout is full
//! or closed (`> /dev/full`, `| head -c1`); these never do.
//!
//! On the first stdout failure the error is recorded and later output is dropped; when the
//! command returns, [`exit_code`] turns the record into the process's exit: a broken pipe (the
//! reader went away, as with `| head`) ends quietly with the command's own exit code, as
//! ripgrep does; any other write error (`/dev/full`, EIO) is reported once on stderr and the
//! exit code is 2 (or the command's own failure code, if it already failed). Failures writing
//! to stderr are ignored: there is nowhere left to report them. Messages on stderr have every
//! known secret redacted, as the log has.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::Mutex;

static STDOUT_FAILURE: Mutex<Option<io::Error>> = Mutex::new(None);

fn failed() -> bool {
    STDOUT_FAILURE.lock().map(|g| g.is_some()).unwrap_or(true)
}

fn record(e: io::Error) {
    if let Ok(mut g) = STDOUT_FAILURE.lock() {
        if g.is_none() {
            *g = Some(e);
        }
    }
}

/// Writes to stdout and flushes; after a failure nothing more is written. Returns whether the
/// bytes were written.
pub fn write_out(args: fmt::Arguments<'_>) -> bool {
    if failed() {
        return false;
    }
    let mut out = io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => {
            record(e);
            false
        }
    }
}

/// Writes a message to stderr with every known secret redacted ([`crate::secrets`]),
/// ignoring failures.
pub fn write_err(args: fmt::Arguments<'_>) {
    let text = crate::secrets::redact(&args.to_string());
    let mut err = io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

/// An `io::Write` over stdout with the same rules (for streamed output such as the job log
/// of `exec-job`): the first failure is recorded and returned, later writes fail at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if failed() {
            return Err(io::Error::other("standard output failed earlier"));
        }
        io::stdout().lock().write(buf).inspect_err(|e| {
            record(io::Error::new(e.kind(), e.to_string()));
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        if failed() {
            return Err(io::Error::other("standard output failed earlier"));
        }
        io::stdout().lock().flush().inspect_err(|e| {
            record(io::Error::new(e.kind(), e.to_string()));
        })
    }
}

/// The process's exit code: the command's own `code`, unless stdout failed with something
/// other than a broken pipe (see the module docs).
pub fn exit_code(code: ExitCode) -> ExitCode {
    // Anything still buffered by the standard library goes out now, so its failure counts.
    if !failed() {
        if let Err(e) = io::stdout().lock().flush() {
            record(e);
        }
    }
    let failure = STDOUT_FAILURE.lock().ok().and_then(|mut g| g.take());
    match failure {
        None => code,
        Some(e) if e.kind() == io::ErrorKind::BrokenPipe => code,
        Some(e) => {
            write_err(format_args!(
                "drover: cannot write the results to standard output: {e}\n"
            ));
            if code == ExitCode::SUCCESS {
                ExitCode::from(2)
            } else {
                code
            }
        }
    }
}

/// `print!` that never panics (see the module docs).
macro_rules! out {
    ($($t:tt)*) => {
        { let _ = $crate::output::write_out(format_args!($($t)*)); }
    };
}

/// `println!` that never panics (see the module docs).
macro_rules! outln {
    ($($t:tt)*) => {
        { let _ = $crate::output::write_out(format_args!("{}\n", format_args!($($t)*))); }
    };
}

/// `eprintln!` that never panics.
macro_rules! errln {
    ($($t:tt)*) => {
        { let _ = $crate::output::write_err(format_args!("{}\n", format_args!($($t)*))); }
    };
}

pub(crate) use {errln, out, outln};

#[cfg(test)]
mod tests {
    /// The class guard: no command prints with the panicking std macros.
    #[test]
    fn no_command_prints_with_the_panicking_macros() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut offenders = Vec::new();
        let mut seen = 0;
        for entry in walkdir::WalkDir::new(&dir) {
            let entry = entry.unwrap();
            if entry.path().extension().is_none_or(|e| e != "rs") {
                continue;
            }
            seen += 1;
            let text = std::fs::read_to_string(entry.path()).unwrap();
            // Test modules may print; library and command code may not.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                let l = line.trim_start();
                if l.starts_with("//") {
                    continue;
                }
                for m in ["println!(", "print!(", "eprintln!(", "eprint!("] {
                    let hit = l.match_indices(m).any(|(i, _)| {
                        i == 0
                            || !l.as_bytes()[i - 1].is_ascii_alphanumeric()
                                && l.as_bytes()[i - 1] != b'_'
                    });
                    if hit {
                        offenders.push(format!("{}:{}: {l}", entry.path().display(), n + 1));
                    }
                }
            }
        }
        assert!(seen > 50, "walked only {seen} files");
        assert!(
            offenders.is_empty(),
            "use out!/outln!/errln! from src/output.rs:\n{}",
            offenders.join("\n")
        );
    }
}
