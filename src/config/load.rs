//! Reading `config.toml`: bytes → text → TOML with positions → checked, canonical values →
//! [`Config`], plus warnings.
//!
//! How it works: the text is parsed into a tree that keeps the byte span of every key and
//! value (`toml::de::DeTable`). The schema walk (`walk.rs`) then visits the tree against the schema,
//! mapping each key to its canonical spelling (exact match first, then ignoring case, as
//! gitlab-runner's decoder does), converting values (integers where floats are expected, Go
//! duration strings to nanoseconds, datetimes) and reporting unknown, removed and ignored keys
//! as warnings with their line. Only values that passed go into a small tree of checked values
//! (`node.rs`), which serde turns into the model; that step cannot meet a wrong type. Finally `url`/`token` get
//! their environment variables expanded and [`validate`](super::validate) runs upstream's
//! load-time checks and compiles the autoscaling periods.
//!
//! A file whose runners are `[[runners]]` sections one after another (nearly every file) goes
//! through these steps a few sections at a time: the head (what comes before the first
//! runner) first, then each batch of sections is parsed, walked, read into its runners and
//! checked, and its trees freed before the next (`document.rs` says when that gives the same
//! result as the whole file in one piece, and any doubt falls back to that). From
//! 4,096 sections on, one thread per core takes a contiguous run of them and
//! writes its runners straight into their places in the final list. Findings are put
//! together in the order a load in one piece makes them, so both ways give the same result.
//!
//! This module does no scaling and keeps no state; it reads the file it is given and nothing
//! else (apart from environment variables in `url` and `token`).

use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::diagnostic::{ConfigError, Diagnostic, LineIndex};
use super::document::Sections;
use super::expand::expand_env;
use super::model::{Config, RunnerConfig};
use super::node::Node;
use super::walk::{Tree, Walker};

/// A loaded config and what the loader noticed on the way.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The config, with periods compiled and validation passed.
    pub config: Config,
    /// Deprecated, ignored and unknown keys and other non-fatal findings, in file order.
    pub warnings: Vec<Diagnostic>,
}

/// gitlab-runner's configuration directory: `/etc/gitlab-runner` for root, else
/// `$HOME/.gitlab-runner` (the working directory without `HOME`).
pub fn default_config_directory() -> PathBuf {
    let is_root = std::fs::metadata("/proc/self")
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() == 0
        })
        .unwrap_or(false);
    if is_root {
        return PathBuf::from("/etc/gitlab-runner");
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home).join(".gitlab-runner"),
        None => PathBuf::from("."),
    }
}

/// The config path gitlab-runner uses when `-c` is not given: `/etc/gitlab-runner/config.toml`
/// for root, `~/.gitlab-runner/config.toml` for anyone else.
pub fn default_config_path() -> PathBuf {
    default_config_directory().join("config.toml")
}

/// Where the TLS fallbacks for GitLab (`<host>.crt`, `<host>.auth.crt`, `<host>.auth.key`)
/// are looked up: `certs/` in [`default_config_directory`], whatever `-c` names, as upstream.
pub fn default_certificate_directory() -> PathBuf {
    default_config_directory().join("certs")
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

/// [`load_str`], a `[[runners]]` section at a time when `in_parts` and that gives the same
/// result (see `document.rs`), else in one piece.
pub(crate) fn load_text(text: &[u8], origin: &str, in_parts: bool) -> Result<Loaded, ConfigError> {
    let text = decode(text, origin)?;
    if in_parts {
        if let Some(sections) = Sections::cut(text) {
            if let Some(loaded) = load_sections(text, origin, &sections) {
                return loaded;
            }
        }
    }
    load_whole(text, origin)
}

/// Loads `text` parsed in one piece.
fn load_whole(text: &str, origin: &str) -> Result<Loaded, ConfigError> {
    let parsed = DeTable::parse(text).map_err(|e| syntax_error(&e, text, origin))?;
    let lines = LineIndex::new(text);
    let mut walker = Walker::new(text, &lines, Tree::Whole(parsed.get_ref()));
    let root = Node::Table(walker.root());
    if !walker.errors.is_empty() {
        return Err(invalid(origin, walker.errors, walker.warnings));
    }
    let mut config = match into_model(root) {
        Ok(config) => config,
        Err(e) => {
            walker.errors.push(internal_error(&e));
            return Err(invalid(origin, walker.errors, walker.warnings));
        }
    };
    for runner in &mut config.runners {
        expand_credentials(runner);
    }
    super::validate::validate(&mut config, &mut walker);
    if !walker.errors.is_empty() {
        return Err(invalid(origin, walker.errors, walker.warnings));
    }
    let mut warnings = walker.warnings;
    sort_by_position(&mut warnings);
    Ok(Loaded { config, warnings })
}

/// The error for a checked config that does not fit the model: the walker checked every
/// type, so this means schema and model disagree.
fn internal_error(e: &serde::de::value::Error) -> Diagnostic {
    Diagnostic::whole_file(format!(
        "internal error: the checked config does not fit drover's model: {e}"
    ))
}

/// Expands environment variables in `url` and `token` (text without `$` is kept as it is).
fn expand_credentials(runner: &mut RunnerConfig) {
    if runner.url.contains('$') {
        runner.url = expand_env(&runner.url);
    }
    if runner.token.contains('$') {
        runner.token = expand_env(&runner.token);
    }
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

/// Findings, in the order they were made.
#[derive(Default)]
struct Findings {
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

impl Findings {
    /// Moves the walker's findings to the end of these.
    fn take_from(&mut self, walker: &mut Walker<'_>) {
        self.errors.append(&mut walker.errors);
        self.warnings.append(&mut walker.warnings);
    }

    /// Moves `other`'s findings to the end of these.
    fn append(&mut self, mut other: Findings) {
        self.errors.append(&mut other.errors);
        self.warnings.append(&mut other.warnings);
    }
}

/// What loading a run of sections gave.
struct Run<'a> {
    /// Their runners, in their places in the file's list, while every section before walked
    /// without an error.
    runners: Slots<'a, RunnerConfig>,
    /// What the walk found.
    walk: Findings,
    /// What the checks after it found.
    checks: Findings,
    /// The first runner that did not fit the model, if one did not.
    internal: Option<serde::de::value::Error>,
}

/// Sections from which they are loaded on several threads.
pub(crate) const PARALLEL_SECTIONS: usize = 4096;

/// Loads a file cut into sections: the head is walked and read into the model, then each
/// batch of sections is parsed apart from the rest, and each of its runners walked, read into
/// the model and checked, the batch's tree freed before the next; from [`PARALLEL_SECTIONS`]
/// sections on, one thread per core takes a contiguous run of them. The findings are put
/// together in the order a load in one piece makes them (the walk's, then the checks'), so
/// the result is the same. `None` when a batch does not parse apart or holds anything but one
/// runner per section: the caller then loads the file in one piece.
fn load_sections(
    text: &str,
    origin: &str,
    sections: &Sections<'_>,
) -> Option<Result<Loaded, ConfigError>> {
    let lines = LineIndex::new(text);
    let mut walk = Findings::default();
    let mut checks = Findings::default();
    let mut head = Walker::new(text, &lines, Tree::Whole(sections.head.get_ref()));
    let root = Node::Table(head.root());
    walk.take_from(&mut head);
    let mut internal = None;
    let mut config = None;
    if walk.errors.is_empty() {
        match Config::deserialize(root) {
            Ok(c) => config = Some(c),
            Err(e) => internal = Some(e),
        }
    }
    if let Some(c) = &config {
        super::validate::validate_global(c, &mut head);
        checks.take_from(&mut head);
    }
    // Without a model of the head, the sections are only walked, for their findings.
    let labels = config.as_ref().map(|c| &c.labels);

    let count = sections.len();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runs = if count >= PARALLEL_SECTIONS && threads > 1 {
        threads.min(count / (PARALLEL_SECTIONS / 2))
    } else {
        1
    };
    let per = count.div_ceil(runs);
    // The runners go straight to their places in the file's list: a run fills its own part of
    // it, so no runner (a few kilobytes each) is copied again to join the runs.
    let mut list: Vec<RunnerConfig> = Vec::with_capacity(count);
    let mut rest = &mut list.spare_capacity_mut()[..count];
    let mut work = Vec::with_capacity(runs);
    for r in 0..runs {
        let range = r * per..((r + 1) * per).min(count);
        let (room, tail) = std::mem::take(&mut rest).split_at_mut(range.len());
        rest = tail;
        work.push((range, Slots::new(room)));
    }
    let loaded: Vec<Option<Run<'_>>> = std::thread::scope(|scope| {
        let lines = &lines;
        let mut work = work.into_iter();
        let first = work.next();
        let handles: Vec<_> = work
            .map(|(range, room)| {
                scope.spawn(move || load_run(text, lines, sections, range, room, labels))
            })
            .collect();
        let mut loaded = Vec::with_capacity(runs);
        loaded.push(
            first.and_then(|(range, room)| load_run(text, lines, sections, range, room, labels)),
        );
        loaded.extend(handles.into_iter().map(|h| h.join().ok().flatten()));
        loaded
    });
    let mut parts = Vec::with_capacity(loaded.len());
    for run in loaded {
        parts.push(run?);
    }

    let mut filled = Vec::with_capacity(parts.len());
    for run in parts {
        walk.append(run.walk);
        checks.append(run.checks);
        internal = internal.or(run.internal);
        filled.push(run.runners);
    }
    if !walk.errors.is_empty() {
        return Some(Err(invalid(origin, walk.errors, walk.warnings)));
    }
    let (Some(mut config), None) = (config, internal.as_ref()) else {
        let e = internal.map_or_else(
            || Diagnostic::whole_file("internal error: the global settings were not read"),
            |e| internal_error(&e),
        );
        return Some(Err(invalid(origin, vec![e], walk.warnings)));
    };
    if !filled.iter().all(Slots::is_full) {
        // Every section walked cleanly and fit the model, so every runner is there.
        let e = Diagnostic::whole_file("internal error: a runner was not read");
        return Some(Err(invalid(origin, vec![e], walk.warnings)));
    }
    for slots in filled {
        slots.keep();
    }
    // SAFETY: the runs' slots are `list`'s first `count` places, cut in order; each run was
    // full (checked just above) and kept its runners, so all `count` places hold one.
    unsafe { list.set_len(count) };
    config.runners = list;
    let mut warnings = walk.warnings;
    warnings.append(&mut checks.warnings);
    if !checks.errors.is_empty() {
        return Some(Err(invalid(origin, checks.errors, warnings)));
    }
    sort_by_position(&mut warnings);
    Some(Ok(Loaded { config, warnings }))
}

/// Loads sections `range` a batch at a time into `room`, runner `i` from section `i`.
/// `labels` are the global labels, `None` when the head did not walk cleanly (the sections
/// are then only walked). `None` when a batch does not parse apart or holds anything but one
/// runner per section.
fn load_run<'a>(
    text: &str,
    lines: &LineIndex,
    sections: &Sections<'_>,
    range: Range<usize>,
    room: Slots<'a, RunnerConfig>,
    labels: Option<&BTreeMap<String, String>>,
) -> Option<Run<'a>> {
    let mut run = Run {
        runners: room,
        walk: Findings::default(),
        checks: Findings::default(),
        internal: None,
    };
    let mut batch_start = range.start;
    while batch_start < range.end {
        let batch = batch_start..(batch_start + BATCH).min(range.end);
        batch_start = batch.end;
        let (offset, items) = sections.parse(batch.clone())?;
        for (index, item) in batch.zip(&items) {
            if load_runner(text, lines, index, offset, item, labels, &mut run).is_err() {
                return None;
            }
        }
    }
    Some(run)
}

/// Sections parsed together (see [`Sections::parse`]).
const BATCH: usize = 16;

/// Walks runner `index`, parsed from the text at `offset`, reads it into the model and checks
/// it, into `run`; an error when `run` has no room left for it.
fn load_runner(
    text: &str,
    lines: &LineIndex,
    index: usize,
    offset: usize,
    item: &Spanned<DeValue<'_>>,
    labels: Option<&BTreeMap<String, String>>,
    run: &mut Run<'_>,
) -> Result<(), ()> {
    let mut walker = Walker::new(
        text,
        lines,
        Tree::Runner {
            index,
            offset,
            item,
        },
    );
    let node = walker.runner();
    run.walk.take_from(&mut walker);
    // After a walk error or a misfit anywhere the load fails: only the walk's findings count.
    if !run.walk.errors.is_empty() || run.internal.is_some() {
        return Ok(());
    }
    let (Some(labels), Some(node)) = (labels, node) else {
        return Ok(());
    };
    match RunnerConfig::deserialize(node) {
        Ok(mut runner) => {
            expand_credentials(&mut runner);
            super::validate::validate_runner(index, &mut runner, labels, &mut walker);
            run.checks.take_from(&mut walker);
            run.runners.push(runner).map_err(|_| ())?;
        }
        Err(e) => run.internal = Some(e),
    }
    Ok(())
}

/// Places filled from the front, a value each; the values are dropped with it unless
/// [`Slots::keep`] hands them over.
struct Slots<'a, T> {
    places: &'a mut [MaybeUninit<T>],
    /// How many places from the front hold a value.
    filled: usize,
}

impl<'a, T> Slots<'a, T> {
    fn new(places: &'a mut [MaybeUninit<T>]) -> Self {
        Slots { places, filled: 0 }
    }

    /// Puts `value` in the next place; gives it back when every place is taken.
    fn push(&mut self, value: T) -> Result<(), T> {
        match self.places.get_mut(self.filled) {
            Some(place) => {
                place.write(value);
                self.filled += 1;
                Ok(())
            }
            None => Err(value),
        }
    }

    fn is_full(&self) -> bool {
        self.filled == self.places.len()
    }

    /// Leaves the values where they are, for the owner of the places to take.
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl<T> Drop for Slots<'_, T> {
    fn drop(&mut self) {
        for place in &mut self.places[..self.filled] {
            // SAFETY: the first `filled` places were written by `push` and not yet dropped.
            unsafe { place.assume_init_drop() };
        }
    }
}

fn invalid(
    origin: &str,
    mut errors: Vec<Diagnostic>,
    mut warnings: Vec<Diagnostic>,
) -> ConfigError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// What a run put in its places is dropped with it unless kept, and kept values are
    /// there for the list that owns the places.
    #[test]
    fn slots_drop_what_they_hold_unless_kept() {
        let value = Rc::new(());
        let mut list: Vec<Rc<()>> = Vec::with_capacity(3);
        {
            let mut slots = Slots::new(&mut list.spare_capacity_mut()[..3]);
            assert!(slots.push(value.clone()).is_ok());
            assert!(slots.push(value.clone()).is_ok());
            assert!(!slots.is_full());
            assert_eq!(Rc::strong_count(&value), 3);
        }
        assert_eq!(
            Rc::strong_count(&value),
            1,
            "an abandoned run drops its values"
        );

        let mut slots = Slots::new(&mut list.spare_capacity_mut()[..2]);
        assert!(slots.push(value.clone()).is_ok());
        assert!(slots.push(value.clone()).is_ok());
        assert!(slots.push(value.clone()).is_err(), "no third place");
        assert!(slots.is_full());
        slots.keep();
        assert_eq!(Rc::strong_count(&value), 3, "kept values stay");
        // SAFETY: the two places were filled and kept just above.
        unsafe { list.set_len(2) };
        drop(list);
        assert_eq!(Rc::strong_count(&value), 1);
    }
}
