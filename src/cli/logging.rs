//! Log output for every command: gitlab-runner's global `--debug`, `--log-level` and
//! `--log-format` flags (and their environment variables) select a `tracing` subscriber that
//! writes to stderr, so command results on stdout stay machine-readable. A command that loads
//! `config.toml` then applies its `log_level` and `log_format` ([`apply_config`]) where no flag
//! or environment variable chose them, as gitlab-runner does.
//!
//! Nothing secret reaches this log at any level: every line passes through
//! [`crate::secrets::redact`] on its way out, and dependencies that print request bodies or
//! headers at debug/trace level (bollard, hyper, reqwest, rustls, …) are held at `info` even
//! with `--debug` ([`DEPENDENCY_TARGETS`]): a secret that is only encoded there (base64 in
//! `X-Registry-Auth`) cannot be recognised, so those lines are never produced.

use std::io::{self, Write};
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::Layered;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::registry::Registry;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// What the global flags asked for, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    /// The most verbose level written.
    pub level: LevelFilter,
    /// One JSON object per line instead of text.
    pub json: bool,
    /// A flag or environment variable chose the level (config `log_level` does not apply).
    pub level_set: bool,
    /// A flag or environment variable chose the format (config `log_format` does not apply).
    pub format_set: bool,
}

/// Checks the global flags. `default` applies when neither `--debug` nor `--log-level` is given.
pub fn settings(
    debug: bool,
    level: Option<&str>,
    format: Option<&str>,
    default: LevelFilter,
) -> Result<LogSettings, String> {
    let level_set = debug || level.is_some();
    let level = match (debug, level) {
        (true, _) => LevelFilter::DEBUG,
        (false, None) => default,
        (false, Some(l)) => parse_level(l, "--log-level")?,
    };
    let json = match format {
        None => false,
        Some(f) => parse_format(f, "--log-format")?,
    };
    Ok(LogSettings {
        level,
        json,
        level_set,
        format_set: format.is_some(),
    })
}

fn parse_level(l: &str, source: &str) -> Result<LevelFilter, String> {
    Ok(match l.to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::TRACE,
        "debug" => LevelFilter::DEBUG,
        "info" => LevelFilter::INFO,
        "warn" | "warning" => LevelFilter::WARN,
        // gitlab-runner's logrus levels above error have no tracing counterpart.
        "error" | "fatal" | "panic" => LevelFilter::ERROR,
        other => {
            return Err(format!(
            "unknown log level {other:?} in {source}: use debug, info, warn, error, fatal or panic"
        ))
        }
    })
}

fn parse_format(f: &str, source: &str) -> Result<bool, String> {
    match f.to_ascii_lowercase().as_str() {
        "runner" | "text" => Ok(false),
        "json" => Ok(true),
        other => Err(format!(
            "unknown log format {other:?} in {source}: use runner, text or json"
        )),
    }
}

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

/// Whether the dependency cap is lifted ([`DEPENDENCY_DEBUG_ENV`]).
fn dependencies_too() -> bool {
    std::env::var_os(DEPENDENCY_DEBUG_ENV).is_some_and(|v| !v.is_empty())
}

/// The caller's extra layer ([`install_with`]), below the filter and the writer.
type Extra = Box<dyn Layer<Registry> + Send + Sync>;
type Base = Layered<Option<Extra>, Registry>;
type Filtered = Layered<reload::Layer<EnvFilter, Base>, Base>;
type Filter = reload::Handle<EnvFilter, Base>;
type Output = reload::Handle<Box<dyn Layer<Filtered> + Send + Sync>, Filtered>;

/// The installed subscriber's settings and the handles that change them.
struct Installed {
    settings: LogSettings,
    filter: Filter,
    output: Output,
}

static INSTALLED: OnceLock<Mutex<Installed>> = OnceLock::new();

fn output_layer<S>(json: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(|| RedactingStderr)
        .with_target(false);
    if json {
        layer.json().boxed()
    } else {
        layer
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed()
    }
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
    let extra: Option<Extra> = extra.map(|l| Box::new(l) as Extra);
    let (filter, filter_handle) = reload::Layer::new(filter(s.level, dependencies_too()));
    let (output, output_handle) = reload::Layer::new(output_layer(s.json));
    if tracing_subscriber::registry()
        .with(extra)
        .with(filter)
        .with(output)
        .try_init()
        .is_ok()
    {
        let _ = INSTALLED.set(Mutex::new(Installed {
            settings: s,
            filter: filter_handle,
            output: output_handle,
        }));
    }
}

/// Applies a loaded config's `log_level` and `log_format` where no flag or environment
/// variable chose them (as gitlab-runner does). An unknown value is an error naming the key.
pub fn apply_config(level: Option<&str>, format: Option<&str>) -> Result<(), String> {
    let Some(installed) = INSTALLED.get() else {
        return Ok(());
    };
    let mut installed = installed.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(l) = level.filter(|_| !installed.settings.level_set) {
        let level = parse_level(l, "log_level in config.toml")?;
        if level != installed.settings.level {
            installed.settings.level = level;
            installed
                .filter
                .reload(filter(level, dependencies_too()))
                .map_err(|e| format!("cannot change the log level: {e}"))?;
        }
    }
    if let Some(f) = format.filter(|_| !installed.settings.format_set) {
        let json = parse_format(f, "log_format in config.toml")?;
        if json != installed.settings.json {
            installed.settings.json = json;
            installed
                .output
                .reload(output_layer(json))
                .map_err(|e| format!("cannot change the log format: {e}"))?;
        }
    }
    Ok(())
}

/// Applies `config`'s log settings (see [`apply_config`]), warning on stderr about a value it
/// cannot use, and logs at debug level that the file was loaded.
pub fn config_loaded(config: &crate::config::Config, origin: &str) {
    if let Err(e) = apply_config(config.log_level.as_deref(), config.log_format.as_deref()) {
        super::output::errln!("drover: warning: {e}");
    }
    tracing::debug!(config = %origin, runners = config.runners.len(), "loaded the config file");
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
