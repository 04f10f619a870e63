//! Reading `config.toml`: bytes → text → TOML with positions → checked, canonical values →
//! [`Config`], plus warnings.
//!
//! How it works: the text is parsed into a tree that keeps the byte span of every key and
//! value (`toml::de::DeTable`), a `[[runners]]` section at a time when possible
//! (`document.rs`). The schema walk (`walk.rs`) then visits the tree against the schema,
//! mapping each key to its canonical spelling (exact match first, then ignoring case, as
//! gitlab-runner's decoder does), converting values (integers where floats are expected, Go
//! duration strings to nanoseconds, datetimes) and reporting unknown, removed and ignored keys
//! as warnings with their line. Only values that passed go into a small tree of checked values
//! (`node.rs`), which serde turns into the model; that step cannot meet a wrong type. Finally `url`/`token` get
//! their environment variables expanded and [`validate`](super::validate) runs upstream's
//! load-time checks and compiles the autoscaling periods.
//!
//! This module does no scaling and keeps no state; it reads the file it is given and nothing
//! else (apart from environment variables in `url` and `token`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::diagnostic::{ConfigError, Diagnostic};
use super::document::Document;
use super::expand::expand_env;
use super::model::{Config, RunnerConfig};
use super::node::Node;
use super::walk::Walker;

/// A loaded config and what the loader noticed on the way.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The config, with periods compiled and validation passed.
    pub config: Config,
    /// Deprecated, ignored and unknown keys and other non-fatal findings, in file order.
    pub warnings: Vec<Diagnostic>,
}

/// The config path gitlab-runner uses when `-c` is not given: `/etc/gitlab-runner/config.toml`
/// for root, `~/.gitlab-runner/config.toml` for anyone else.
pub fn default_config_path() -> PathBuf {
    let is_root = std::fs::metadata("/proc/self")
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() == 0
        })
        .unwrap_or(false);
    if is_root {
        return PathBuf::from("/etc/gitlab-runner/config.toml");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".gitlab-runner").join("config.toml")
}

/// Reads and loads the config file at `path`.
pub fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
    let origin = path.display().to_string();
    let bytes =
        crate::bounded::read_file(path, crate::bounded::MAX_DATA_FILE).map_err(|source| {
            ConfigError::Io {
                path: origin.clone(),
                source,
            }
        })?;
    load_str(bytes, &origin)
}

/// Loads a config from `text` (bytes or a string); `origin` names it in messages.
pub fn load_str(text: impl AsRef<[u8]>, origin: &str) -> Result<Loaded, ConfigError> {
    load_text(text.as_ref(), origin, true)
}

/// [`load_str`], parsing the file one `[[runners]]` section at a time when `in_parts` and that
/// gives the same tree (see `document.rs`), else in one piece.
pub(crate) fn load_text(text: &[u8], origin: &str, in_parts: bool) -> Result<Loaded, ConfigError> {
    let text = decode(text, origin)?;
    let parsed = if in_parts {
        Document::parse(text)
    } else {
        Document::parse_whole(text)
    }
    .map_err(|e| syntax_error(&e, text, origin))?;

    let mut walker = Walker::new(text);
    let root = walker.root(&parsed);
    if !walker.errors.is_empty() {
        return Err(invalid(origin, walker));
    }
    let mut config = match into_model(root) {
        Ok(config) => config,
        Err(e) => {
            // The walker checked every type, so this means schema and model disagree.
            walker.errors.push(Diagnostic::whole_file(format!(
                "internal error: the checked config does not fit drover's model: {e}"
            )));
            return Err(invalid(origin, walker));
        }
    };
    // Text without `$` expands to itself: skip the copy.
    for runner in &mut config.runners {
        if runner.url.contains('$') {
            runner.url = expand_env(&runner.url);
        }
        if runner.token.contains('$') {
            runner.token = expand_env(&runner.token);
        }
    }
    super::validate::validate(&mut config, &mut walker);
    if !walker.errors.is_empty() {
        return Err(invalid(origin, walker));
    }
    let mut warnings = walker.warnings;
    sort_by_position(&mut warnings);
    Ok(Loaded { config, warnings })
}

/// Reads the checked values into the model. The runners are read one by one into a list of
/// the right size: serde would grow it step by step, copying every runner (a few kilobytes
/// each) again at each step.
fn into_model(mut root: Node) -> Result<Config, serde::de::value::Error> {
    let runners = root.take("runners");
    let mut config = Config::deserialize(root)?;
    if let Some(node) = runners {
        let items = match node {
            Node::List(items) => items,
            _ => return Err(serde::de::Error::custom("runners is not a list")),
        };
        let mut list = Vec::with_capacity(items.len());
        for item in items {
            list.push(RunnerConfig::deserialize(item)?);
        }
        config.runners = list;
    }
    Ok(config)
}

fn invalid(origin: &str, walker: Walker<'_>) -> ConfigError {
    let mut errors = walker.errors;
    let mut warnings = walker.warnings;
    sort_by_position(&mut errors);
    sort_by_position(&mut warnings);
    ConfigError::Invalid {
        origin: origin.to_string(),
        errors,
        warnings,
    }
}

fn sort_by_position(list: &mut [Diagnostic]) {
    list.sort_by_key(|d| (d.line, d.column));
}

fn syntax_error(e: &toml::de::Error, text: &str, origin: &str) -> ConfigError {
    let message = e.message().trim().to_string();
    let diagnostic = match e.span() {
        Some(span) => Diagnostic::at(text, span, format!("invalid TOML: {message}")),
        None => Diagnostic::whole_file(format!("invalid TOML: {message}")),
    };
    let hint = syntax_hint(&message);
    let mut diagnostic = diagnostic;
    if diagnostic.line > 0 {
        let (section, key) = locate(text, diagnostic.line);
        diagnostic.section = section;
        diagnostic.key = key;
    }
    ConfigError::Syntax {
        origin: origin.to_string(),
        diagnostic: Box::new(match hint {
            Some(h) => diagnostic.with_hint(h),
            None => diagnostic,
        }),
    }
}

/// Where line `line` (1-based) of a file that does not parse sits, read from the text as far
/// as it goes: the last table header above it, as written (`[runners.machine]`), and the key
/// path of the `key =` the line starts with, if any (`runners[1].machine.IdleTime`). Array
/// tables are numbered by counting their headers, as the parser would have.
fn locate(text: &str, line: usize) -> (Option<String>, Option<String>) {
    let mut section: Option<String> = None;
    let mut path = String::new();
    // Headers `[[a.b]]` seen so far, with their counts, to number array tables.
    let mut arrays: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut error_line = None;
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if i + 1 == line {
            error_line = Some(l);
            break;
        }
        let (array, inner) = if let Some(rest) = l.strip_prefix("[[") {
            (true, rest.split("]]").next())
        } else if let Some(rest) = l.strip_prefix('[') {
            (false, rest.split(']').next())
        } else {
            continue;
        };
        let Some(inner) = inner else { continue };
        let name: Vec<&str> = inner
            .split('.')
            .map(|p| p.trim().trim_matches('"'))
            .collect();
        let dotted = name.join(".");
        if array {
            let n = arrays.entry(dotted.clone()).or_insert(0);
            *n += 1;
        }
        // Number every array-table prefix: [runners.machine] under the 2nd [[runners]] is
        // runners[1].machine.
        let mut numbered = Vec::new();
        for k in 1..=name.len() {
            let prefix = name[..k].join(".");
            let part = name[k - 1];
            match arrays.get(&prefix) {
                Some(&count) if count > 0 => numbered.push(format!("{part}[{}]", count - 1)),
                _ => numbered.push(part.to_string()),
            }
        }
        path = numbered.join(".");
        section = Some(if array {
            format!("[[{dotted}]]")
        } else {
            format!("[{dotted}]")
        });
    }
    let key = error_line.and_then(|l| {
        let (k, _) = l.split_once('=')?;
        let k = k.trim().trim_matches('"');
        if k.is_empty() || k.starts_with('[') || k.starts_with('#') {
            return None;
        }
        Some(if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        })
    });
    (section, key)
}

fn syntax_hint(message: &str) -> Option<&'static str> {
    let m = message.to_lowercase();
    if m.contains("duplicate key") {
        Some("each key may appear once per table; remove or merge the repeated one")
    } else if m.contains("basic string") || m.contains("unterminated") {
        Some("close the string on the same line, or use \"\"\" for text spanning lines")
    } else if m.contains("must be quoted") {
        Some("every key needs a value, and text values need double quotes: key = \"value\"")
    } else if m.contains("newline") || m.contains("expected `=`") {
        Some("write one `key = value` per line; strings need double quotes")
    } else {
        None
    }
}

/// Turns raw bytes into text: strips a UTF-8 byte-order mark, refuses UTF-16 and invalid
/// UTF-8 with the position of the problem.
fn decode<'a>(bytes: &'a [u8], origin: &str) -> Result<&'a str, ConfigError> {
    let utf16 = |which: &str| ConfigError::Encoding {
        origin: origin.to_string(),
        diagnostic: Box::new(Diagnostic {
            message: format!(
                "the file is UTF-16 ({which}); drover, like gitlab-runner, reads UTF-8"
            ),
            line: 1,
            column: 1,
            hint: Some("save the file as UTF-8 (for example `iconv -f UTF-16 -t UTF-8`)".into()),
            section: None,
            key: None,
            source_line: None,
            width: 1,
        }),
    };
    match bytes {
        [0xFF, 0xFE, ..] => return Err(utf16("little-endian byte-order mark FF FE")),
        [0xFE, 0xFF, ..] => return Err(utf16("big-endian byte-order mark FE FF")),
        [a, 0, b, 0, ..] if *a != 0 && *b != 0 => {
            return Err(utf16("little-endian, no byte-order mark"))
        }
        [0, a, 0, b, ..] if *a != 0 && *b != 0 => {
            return Err(utf16("big-endian, no byte-order mark"))
        }
        _ => {}
    }
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    std::str::from_utf8(body).map_err(|e| {
        let good = e.valid_up_to();
        let prefix = std::str::from_utf8(&body[..good]).unwrap_or("");
        let bad = body.get(good).copied().unwrap_or(0);
        let mut diagnostic = Diagnostic::at(
            prefix,
            good..good,
            format!(
                "invalid UTF-8: byte 0x{bad:02X} at byte offset {}",
                good + (bytes.len() - body.len())
            ),
        );
        diagnostic.width = 1;
        ConfigError::Encoding {
            origin: origin.to_string(),
            diagnostic: Box::new(diagnostic.with_hint(
                "save the file as UTF-8 (it looks like Latin-1 or another legacy encoding)",
            )),
        }
    })
}
