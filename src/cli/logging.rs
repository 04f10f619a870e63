//! Log output for every command: gitlab-runner's global `--debug`, `--log-level` and
//! `--log-format` flags (and their environment variables) select a `tracing` subscriber that
//! writes to stderr, so command results on stdout stay machine-readable. A command that loads
//! `config.toml` then applies its `log_level` and `log_format` ([`apply_config`]) where no flag
//! or environment variable chose them, as gitlab-runner does.
//!
//! Lines are written in gitlab-runner's own formats ([`crate::upstream_log::format`]):
//! `runner` (the default), `text` and `json`, so log pipelines built on gitlab-runner's
//! messages keep working and `drover workload import` / `drover compare --upstream-log` read
//! drover's log as they read upstream's. Colours (and logrus' terminal form of `text`) only
//! when stderr is a terminal. A field's value is typed by its upstream key: an integer under
//! a `time.Duration` key ([`DURATION_KEYS`]) is nanoseconds, an integer under a `time.Time`
//! key ([`TIME_KEYS`]) is Unix nanoseconds, written with the process's ` m=+…` reading.
//!
//! Nothing secret reaches this log at any level: every line passes through
//! [`crate::secrets::redact`] on its way out, and dependencies that print request bodies or
//! headers at debug/trace level (bollard, hyper, reqwest, rustls, …) are held at `info` even
//! with `--debug` ([`DEPENDENCY_TARGETS`]): a secret that is only encoded there (base64 in
//! `X-Registry-Auth`) cannot be recognised, so those lines are never produced.

use std::io::{self, Write};
use std::sync::{Mutex, OnceLock};

use chrono::{DateTime, Utc};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::Layered;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::registry::Registry;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::upstream_log::format::{self, Format, Level, Style, Value};

/// What the global flags asked for, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    /// The most verbose level written.
    pub level: LevelFilter,
    /// The line format (`runner`, `text` or `json`).
    pub format: Format,
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
    let parsed = match format {
        None => Format::Runner,
        Some(f) => parse_format(f, "--log-format")?,
    };
    Ok(LogSettings {
        level,
        format: parsed,
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

fn parse_format(f: &str, source: &str) -> Result<Format, String> {
    match f.to_ascii_lowercase().as_str() {
        "runner" => Ok(Format::Runner),
        "text" => Ok(Format::Text),
        "json" => Ok(Format::Json),
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

fn output_layer<S>(format: Format) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    Box::new(UpstreamLines {
        format,
        terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    })
}

/// Keys under which upstream logs a `time.Duration`: an integer there is nanoseconds.
pub const DURATION_KEYS: &[&str] = &[
    "duration",
    "lifetime",
    "used",
    "time",
    "shutdown-timeout",
    "current_timeout",
    "recommended_minimum",
    "update-interval",
    "unhealthy_interval",
];

/// Keys under which upstream logs a `time.Time`: an integer there is Unix nanoseconds.
pub const TIME_KEYS: &[&str] = &["now", "created"];

/// When this process started logging: the origin of the ` m=+…` readings and of the text
/// format's `[0012]` seconds on a terminal.
fn process_start() -> DateTime<Utc> {
    static START: OnceLock<DateTime<Utc>> = OnceLock::new();
    *START.get_or_init(Utc::now)
}

pub use crate::upstream_log::format::{duration_field, time_field};

/// The event's message and fields, typed.
#[derive(Default)]
struct Fields {
    msg: String,
    fields: Vec<(&'static str, Value)>,
}

impl Fields {
    fn push(&mut self, key: &'static str, v: Value) {
        if self.fields.len() < 64 {
            self.fields.push((key, v));
        }
    }

    fn int(&mut self, key: &'static str, v: i128) {
        let v = if DURATION_KEYS.contains(&key) {
            Value::Duration(i64::try_from(v).unwrap_or(i64::MAX))
        } else if TIME_KEYS.contains(&key) {
            let t = DateTime::<Utc>::from_timestamp_nanos(i64::try_from(v).unwrap_or(i64::MAX));
            let mono = (t - process_start())
                .num_nanoseconds()
                .map(|n| n as f64 / 1e9);
            Value::Time(t.fixed_offset(), mono)
        } else if let Ok(i) = i64::try_from(v) {
            Value::Int(i)
        } else {
            Value::Uint(u64::try_from(v).unwrap_or(u64::MAX))
        };
        self.push(key, v);
    }
}

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.msg = text;
        } else {
            self.push(field.name(), Value::Str(text));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.msg = value.to_string();
        } else {
            self.push(field.name(), Value::Str(value.to_string()));
        }
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.int(field.name(), i128::from(value));
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.int(field.name(), i128::from(value));
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.push(field.name(), Value::Float(value));
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.push(field.name(), Value::Bool(value));
    }

    fn record_error(
        &mut self,
        field: &tracing::field::Field,
        value: &(dyn std::error::Error + 'static),
    ) {
        self.push(field.name(), Value::Str(value.to_string()));
    }
}

/// The level of a `tracing` event as logrus names it (trace is written as debug).
fn level_of(l: &tracing::Level) -> Level {
    match *l {
        tracing::Level::ERROR => Level::Error,
        tracing::Level::WARN => Level::Warning,
        tracing::Level::INFO => Level::Info,
        _ => Level::Debug,
    }
}

/// Formats one event as a gitlab-runner line, redacted, onto `out` (no I/O).
fn render(
    format: Format,
    terminal: bool,
    now: DateTime<Utc>,
    event: &tracing::Event<'_>,
) -> String {
    let mut f = Fields::default();
    event.record(&mut f);
    // Secrets are masked in each value before quoting and escaping could change their bytes,
    // and once more in the finished line.
    let msg = crate::secrets::redact(&f.msg);
    for (_, v) in &mut f.fields {
        if let Value::Str(s) = v {
            *s = crate::secrets::redact(s);
        }
    }
    let style = Style {
        format,
        terminal,
        started: process_start().fixed_offset(),
    };
    let line = format::line(
        &style,
        &format::Record {
            time: now.fixed_offset(),
            level: level_of(event.metadata().level()),
            msg: &msg,
            fields: &f.fields,
        },
    );
    crate::secrets::redact(&line)
}

/// The output layer: each event as one gitlab-runner line on stderr.
struct UpstreamLines {
    format: Format,
    terminal: bool,
}

impl<S: tracing::Subscriber> Layer<S> for UpstreamLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let line = render(self.format, self.terminal, Utc::now(), event);
        // A log line that cannot be written has nowhere else to go.
        let _ = io::stderr().lock().write_all(line.as_bytes());
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
    let _ = process_start();
    let extra: Option<Extra> = extra.map(|l| Box::new(l) as Extra);
    let (filter, filter_handle) = reload::Layer::new(filter(s.level, dependencies_too()));
    let (output, output_handle) = reload::Layer::new(output_layer(s.format));
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
        let format = parse_format(f, "log_format in config.toml")?;
        if format != installed.settings.format {
            installed.settings.format = format;
            installed
                .output
                .reload(output_layer(format))
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

/// The lines gitlab-runner writes about the mode it runs in (`commands/user_mode_warning.go`),
/// for an `os` (Rust's name) and a real user id: `Running in system-mode.` as root, otherwise
/// `Running in user-mode.` and how to get the system mode; `with_run` (register, verify,
/// reset-token) adds how to start processing where no user service exists; an empty info line
/// ends them. Nothing on Windows.
pub fn user_mode_lines(os: &str, uid: u32, with_run: bool) -> Vec<(tracing::Level, &'static str)> {
    use tracing::Level as L;
    if os == "windows" {
        return Vec::new();
    }
    let system = uid == 0;
    let mut out = vec![if system {
        (L::INFO, "Running in system-mode.")
    } else {
        (L::WARN, "Running in user-mode.")
    }];
    if with_run {
        let no_services = os != "linux" && os != "macos";
        if no_services {
            out.push((L::WARN, "You need to manually start builds processing:"));
            out.push((L::WARN, "$ gitlab-runner run"));
        } else if !system && os == "linux" {
            out.push((
                L::WARN,
                "The user-mode requires you to manually start builds processing:",
            ));
            out.push((L::WARN, "$ gitlab-runner run"));
        }
    }
    if !system {
        out.push((L::WARN, "Use sudo for system-mode:"));
        out.push((L::WARN, "$ sudo gitlab-runner..."));
    }
    out.push((L::INFO, ""));
    out
}

/// Logs [`user_mode_lines`] for this process, after the debug line `Checking runtime mode`
/// (`GOOS`, `uid`), as gitlab-runner does at the start of `run`, `register`, `verify`,
/// `unregister` and `reset-token`.
pub fn user_mode_warning(with_run: bool) {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    log_user_mode(std::env::consts::OS, uid, with_run);
}

fn log_user_mode(os: &str, uid: u32, with_run: bool) {
    let goos = if os == "macos" { "darwin" } else { os };
    tracing::debug!(GOOS = goos, uid, "Checking runtime mode");
    for (level, msg) in user_mode_lines(os, uid, with_run) {
        match level {
            tracing::Level::INFO => tracing::info!("{msg}"),
            _ => tracing::warn!("{msg}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Collects the lines [`render`] makes for the events of `f`.
    struct Capture {
        format: Format,
        terminal: bool,
        lines: Arc<Mutex<Vec<String>>>,
    }

    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            let line = render(self.format, self.terminal, Utc::now(), e);
            self.lines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(line);
        }
    }

    fn capture(format: Format, terminal: bool, f: impl FnOnce()) -> Vec<String> {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let layer = Capture {
            format,
            terminal,
            lines: lines.clone(),
        };
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), f);
        let out = lines.lock().unwrap_or_else(|p| p.into_inner()).clone();
        out
    }

    /// gitlab-runner's runtime-mode lines, per OS, user and command.
    #[test]
    fn user_mode_lines_as_upstream() {
        use tracing::Level as L;
        let msgs = |os: &str, uid: u32, with_run: bool| -> Vec<String> {
            user_mode_lines(os, uid, with_run)
                .into_iter()
                .map(|(l, m)| format!("{}:{m}", if l == L::INFO { "info" } else { "warn" }))
                .collect()
        };
        assert_eq!(
            msgs("linux", 0, false),
            ["info:Running in system-mode.", "info:"]
        );
        assert_eq!(
            msgs("linux", 0, true),
            ["info:Running in system-mode.", "info:"]
        );
        assert_eq!(
            msgs("linux", 1000, false),
            [
                "warn:Running in user-mode.",
                "warn:Use sudo for system-mode:",
                "warn:$ sudo gitlab-runner...",
                "info:"
            ]
        );
        assert_eq!(
            msgs("linux", 1000, true),
            [
                "warn:Running in user-mode.",
                "warn:The user-mode requires you to manually start builds processing:",
                "warn:$ gitlab-runner run",
                "warn:Use sudo for system-mode:",
                "warn:$ sudo gitlab-runner...",
                "info:"
            ]
        );
        assert_eq!(
            msgs("macos", 501, true),
            [
                "warn:Running in user-mode.",
                "warn:Use sudo for system-mode:",
                "warn:$ sudo gitlab-runner...",
                "info:"
            ]
        );
        assert_eq!(
            msgs("freebsd", 0, true),
            [
                "info:Running in system-mode.",
                "warn:You need to manually start builds processing:",
                "warn:$ gitlab-runner run",
                "info:"
            ]
        );
        assert!(msgs("windows", 0, true).is_empty());
    }

    /// The runtime-mode lines, in every format, are known to the log readers (`workload
    /// import`, `compare --upstream-log`): none is an unknown line.
    #[test]
    fn user_mode_lines_are_known_to_the_log_readers() {
        // logrus' terminal form of `text` is only written to a terminal, never to a file
        // the readers take.
        for (format, terminal) in ALL.into_iter().filter(|f| *f != (Format::Text, true)) {
            let lines = capture(format, terminal, || {
                for os in ["linux", "freebsd"] {
                    for uid in [0, 1000] {
                        log_user_mode(os, uid, true);
                    }
                }
            });
            let utc = chrono::FixedOffset::east_opt(0).expect("UTC");
            let mut p = crate::upstream_log::events::Parser::new(2026, utc);
            for l in &lines {
                p.push_line(l.trim_end_matches('\n'));
            }
            p.finish();
            assert!(lines.len() >= 16, "{format:?}: {lines:?}");
            assert_eq!(
                p.stats.unknown_lines, 0,
                "{format:?} terminal={terminal}: {:?}",
                p.stats.unknown_messages
            );
        }
    }

    /// The system-mode line in each format, as gitlab-runner writes it.
    #[test]
    fn system_mode_line_in_each_format() {
        let line = |format| {
            capture(format, false, || {
                tracing::info!("{}", "Running in system-mode.")
            })
            .concat()
        };
        // Padded to 50 columns, then a space (no fields, no colours off a terminal).
        assert_eq!(
            line(Format::Runner),
            format!("{:<50} \n", "Running in system-mode.")
        );
        let text = line(Format::Text);
        assert!(
            text.ends_with(" level=info msg=\"Running in system-mode.\"\n"),
            "{text:?}"
        );
        let json = line(Format::Json);
        assert!(
            json.starts_with("{\"level\":\"info\",\"msg\":\"Running in system-mode.\","),
            "{json:?}"
        );
    }

    const ALL: [(Format, bool); 6] = [
        (Format::Runner, false),
        (Format::Runner, true),
        (Format::Text, false),
        (Format::Text, true),
        (Format::Json, false),
        (Format::Json, true),
    ];

    /// Issue 27: GitLab's error message goes into the log; newlines, carriage returns and
    /// escape sequences in it must not forge a line or reach the terminal raw.
    #[test]
    fn a_hostile_message_forges_no_line_and_no_escape_sequence() {
        let hostile = "403 Forbidden\nERROR: Job succeeded\r\x1b[2J\x1b]0;pwned\x07 done";
        for (format, terminal) in ALL {
            let lines = capture(format, terminal, || {
                tracing::warn!(runner = "abcdefgh", error = %hostile, "Checking for jobs... failed: {hostile}");
                tracing::error!(status = hostile, "{hostile}");
            });
            assert_eq!(lines.len(), 2, "{format:?}");
            for l in &lines {
                let body = l.strip_suffix('\n').unwrap_or_else(|| panic!("{l:?}"));
                assert!(
                    !body.contains('\n'),
                    "{format:?} terminal={terminal}: {l:?}"
                );
                assert!(
                    !body.contains('\r'),
                    "{format:?} terminal={terminal}: {l:?}"
                );
                assert!(
                    !body.contains('\x07'),
                    "{format:?} terminal={terminal}: {l:?}"
                );
                assert!(
                    !body.contains("\x1b[2J"),
                    "{format:?} terminal={terminal}: {l:?}"
                );
                assert!(
                    !body.contains("\x1b]"),
                    "{format:?} terminal={terminal}: {l:?}"
                );
                if !terminal {
                    assert!(!body.contains('\x1b'), "{format:?}: {l:?}");
                }
            }
            // Quoted text and JSON read back as the message that was logged.
            if !terminal && format != Format::Runner {
                let rec = crate::upstream_log::line::parse_line(&lines[0]).unwrap();
                assert_eq!(rec.msg, format!("Checking for jobs... failed: {hostile}"));
                assert_eq!(rec.field("error"), Some(hostile));
            }
        }
    }

    #[test]
    fn secrets_are_masked_in_every_format_and_field() {
        let secret = "glrt-s3cr3t\"quoted&<tok>".to_string();
        let _reg = crate::secrets::register([secret.clone()]);
        for (format, terminal) in ALL {
            let lines = capture(format, terminal, || {
                tracing::info!(token = %secret, "Registering with {secret}");
                tracing::debug!(url = format!("https://x/?t={secret}"), "retry");
            });
            for l in lines {
                assert!(!l.contains("s3cr3t"), "{format:?} terminal={terminal}: {l}");
            }
        }
    }

    #[test]
    fn upstream_typed_keys_render_as_go_values() {
        let t = DateTime::<Utc>::from_timestamp(1_757_322_307, 500_000_000).unwrap();
        let lines = capture(Format::Json, false, || {
            tracing::info!(
                duration = duration_field(std::time::Duration::from_millis(1500)),
                now = time_field(t),
                retries = 0,
                name = "m1",
                "Machine created"
            );
        });
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["duration"], 1_500_000_000u64);
        assert_eq!(v["now"], "2025-09-08T09:05:07.5Z");
        assert_eq!(v["level"], "info");
        let lines = capture(Format::Runner, false, || {
            tracing::info!(
                duration = duration_field(std::time::Duration::from_millis(1500)),
                now = time_field(t),
                "Machine created"
            );
        });
        assert!(
            lines[0].starts_with("Machine created                                     duration=1.5s now=2025-09-08 09:05:07.5 +0000 UTC m="),
            "{}",
            lines[0]
        );
    }

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
        for (flag, format) in [
            ("json", Format::Json),
            ("runner", Format::Runner),
            ("TEXT", Format::Text),
        ] {
            let s = settings(false, None, Some(flag), LevelFilter::WARN).unwrap();
            assert_eq!(s.format, format);
        }
        assert_eq!(
            settings(false, None, None, LevelFilter::WARN)
                .unwrap()
                .format,
            Format::Runner
        );
        let e = settings(false, Some("loud"), None, LevelFilter::WARN).unwrap_err();
        assert!(e.contains("--log-level"), "{e}");
        let e = settings(false, None, Some("xml"), LevelFilter::WARN).unwrap_err();
        assert!(e.contains("runner, text or json"), "{e}");
    }
}
