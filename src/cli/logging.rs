//! Log output for every command: gitlab-runner's global `--debug`, `--log-level` and
//! `--log-format` flags (and their environment variables) select a `tracing` subscriber that
//! writes to stderr, so command results on stdout stay machine-readable.

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, Registry};

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
    install_with(s, None::<tracing_subscriber::layer::Identity>);
}

/// Installs the subscriber with one more layer beside the stderr writer, e.g.
/// `drover::metrics::Metrics::errors_layer()` for `drover run`, so that warnings and errors are
/// counted in `gitlab_runner_errors_total`. The level filter applies to both: what is not
/// written is not counted. A second call does nothing.
pub fn install_with<L>(s: LogSettings, extra: Option<L>)
where
    L: Layer<Registry> + Send + Sync + 'static,
{
    let (text, json) = if s.json {
        let layer = fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_target(false);
        (None, Some(layer))
    } else {
        let layer = fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        (Some(layer), None)
    };
    let _ = tracing_subscriber::registry()
        .with(extra)
        .with(text)
        .with(json)
        .with(s.level)
        .try_init();
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
