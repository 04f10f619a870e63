//! Log output for every command: gitlab-runner's global `--debug`, `--log-level` and
//! `--log-format` flags (and their environment variables) select a `tracing` subscriber that
//! writes to stderr, so command results on stdout stay machine-readable.
//!
//! Nothing secret reaches this log at any level: every line passes through
//! [`crate::secrets::redact`] on its way out, and dependencies that print request bodies or
//! headers at debug/trace level (bollard, hyper, reqwest, rustls, …) are held at `info` even
//! with `--debug` ([`DEPENDENCY_TARGETS`]): a secret that is only encoded there (base64 in
//! `X-Registry-Auth`) cannot be recognised, so those lines are never produced.

use std::io::{self, Write};

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

/// Dependencies whose debug and trace output carries request bodies, headers or TLS secrets;
/// they log at `info` at most.
pub const DEPENDENCY_TARGETS: &[&str] = &[
    "bollard",
    "hyper",
    "hyper_util",
    "h2",
    "reqwest",
    "rustls",
    "tokio_rustls",
    "tower",
    "tower_http",
    "axum",
    "rusty_s3",
    "want",
    "mio",
];

/// Set (non-empty) to let [`DEPENDENCY_TARGETS`] log at the chosen level too, when an
/// Engine or TLS problem needs their request-level detail. Redaction still applies.
pub const DEPENDENCY_DEBUG_ENV: &str = "DROVER_DEBUG_DEPENDENCIES";

/// The filter for `level`: drover at `level`, [`DEPENDENCY_TARGETS`] at most at `info`
/// (unless `dependencies_too`).
pub fn filter(level: LevelFilter, dependencies_too: bool) -> EnvFilter {
    let cap = if dependencies_too {
        level
    } else {
        level.min(LevelFilter::INFO)
    };
    let mut directives = vec![level.to_string().to_lowercase()];
    directives.extend(
        DEPENDENCY_TARGETS
            .iter()
            .map(|t| format!("{t}={}", cap.to_string().to_lowercase())),
    );
    EnvFilter::builder().parse_lossy(directives.join(","))
}

/// stderr, with every line redacted.
struct RedactingStderr;

impl Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = crate::secrets::redact(&String::from_utf8_lossy(buf));
        io::stderr().lock().write_all(text.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().lock().flush()
    }
}

/// What the global flags asked for, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    /// The most verbose level written.
    pub level: LevelFilter,
    /// One JSON object per line instead of text.
    pub json: bool,
}

/// Checks the global flags. `default` applies when neither `--debug` nor `--log-level` is given.
pub fn settings(
    debug: bool,
    level: Option<&str>,
    format: Option<&str>,
    default: LevelFilter,
) -> Result<LogSettings, String> {
    let level = match (debug, level) {
        (true, _) => LevelFilter::DEBUG,
        (false, None) => default,
        (false, Some(l)) => match l.to_ascii_lowercase().as_str() {
            "trace" => LevelFilter::TRACE,
            "debug" => LevelFilter::DEBUG,
            "info" => LevelFilter::INFO,
            "warn" | "warning" => LevelFilter::WARN,
            // gitlab-runner's logrus levels above error have no tracing counterpart.
            "error" | "fatal" | "panic" => LevelFilter::ERROR,
            other => {
                return Err(format!(
                    "unknown log level {other:?} in --log-level: use debug, info, warn, error, fatal or panic"
                ))
            }
        },
    };
    let json = match format.map(str::to_ascii_lowercase).as_deref() {
        None | Some("runner") | Some("text") => false,
        Some("json") => true,
        Some(other) => {
            return Err(format!(
                "unknown log format {other:?} in --log-format: use runner, text or json"
            ))
        }
    };
    Ok(LogSettings { level, json })
}

/// Installs the subscriber for the whole process (a second call does nothing).
pub fn install(s: LogSettings) {
    let builder = tracing_subscriber::fmt()
        .with_writer(|| RedactingStderr)
        .with_env_filter(filter(
            s.level,
            std::env::var_os(DEPENDENCY_DEBUG_ENV).is_some_and(|v| !v.is_empty()),
        ))
        .with_target(false);
    let _ = if s.json {
        builder.json().try_init()
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_wins_then_the_level_then_the_default() {
        let d = LevelFilter::WARN;
        assert_eq!(
            settings(true, Some("error"), None, d).unwrap().level,
            LevelFilter::DEBUG
        );
        assert_eq!(
            settings(false, Some("Info"), None, d).unwrap().level,
            LevelFilter::INFO
        );
        assert_eq!(
            settings(false, Some("panic"), None, d).unwrap().level,
            LevelFilter::ERROR
        );
        assert_eq!(settings(false, None, None, d).unwrap().level, d);
    }

    #[test]
    fn formats_and_bad_values() {
        assert!(
            settings(false, None, Some("json"), LevelFilter::WARN)
                .unwrap()
                .json
        );
        assert!(
            !settings(false, None, Some("runner"), LevelFilter::WARN)
                .unwrap()
                .json
        );
        let e = settings(false, Some("loud"), None, LevelFilter::WARN).unwrap_err();
        assert!(e.contains("--log-level"), "{e}");
        let e = settings(false, None, Some("xml"), LevelFilter::WARN).unwrap_err();
        assert!(e.contains("runner, text or json"), "{e}");
    }
}
