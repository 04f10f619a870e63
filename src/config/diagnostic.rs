//! Findings about a config file and how they are shown: warnings, errors and [`ConfigError`].
//!
//! A [`Diagnostic`] says what is wrong, where (`line:column`, 1-based, columns in characters)
//! and, when there is one, what to do. [`ConfigError`]'s `Display` is the whole message an
//! operator sees: `file:line:col: message`, the offending source line with a caret under the
//! spot, and a hint, for at most a screenful of errors. Nothing here reads files or decides
//! validity; the loader produces diagnostics and this module renders them.

use std::fmt;

use serde::Serialize;

/// Errors shown in full by [`ConfigError`]'s `Display` before the rest are summarised.
const MAX_SHOWN: usize = 5;

/// One finding about the file: a warning or an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// What is wrong, naming the runner (index and name) and the key when there is one.
    pub message: String,
    /// 1-based line, or 0 when the finding is about the file as a whole.
    pub line: usize,
    /// 1-based column in characters, or 0 when `line` is 0.
    pub column: usize,
    /// What to do about it, when there is something specific to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The table the finding is in, as written in its header (`[runners.machine]`), when
    /// known (syntax errors, which come before any typed path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// The key path of the finding (`runners[1].machine.IdleTime`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The text of line `line`, for display.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_line: Option<String>,
    /// How many characters the caret under `source_line` spans.
    #[serde(skip)]
    pub width: usize,
}

impl Diagnostic {
    /// A finding about the whole file (no position).
    pub fn whole_file(message: impl Into<String>) -> Self {
        Diagnostic {
            message: message.into(),
            line: 0,
            column: 0,
            hint: None,
            section: None,
            key: None,
            source_line: None,
            width: 0,
        }
    }

    /// A finding at byte range `span` of `text`. Scans `text` once to find the line; to report
    /// many findings in one text, build a [`LineIndex`] and use [`Diagnostic::at_indexed`].
    pub fn at(text: &str, span: std::ops::Range<usize>, message: impl Into<String>) -> Self {
        Self::at_indexed(&LineIndex::new(text), text, span, message)
    }

    /// A finding at byte range `span` of `text`, whose lines `index` knows: costs a binary
    /// search and the length of one line, not a scan of the text.
    pub(crate) fn at_indexed(
        index: &LineIndex,
        text: &str,
        span: std::ops::Range<usize>,
        message: impl Into<String>,
    ) -> Self {
        let pos = index.position(text, span.start);
        let line_text = text[pos.line_start..pos.line_end].trim_end_matches('\r');
        let start = index.clamp(text, span.start);
        let end = span.end.min(pos.line_end);
        let width = text
            .get(start.min(end)..end)
            .map_or(1, |s| s.chars().count())
            .max(1);
        Diagnostic {
            message: message.into(),
            line: pos.line,
            column: pos.column,
            hint: None,
            section: None,
            key: None,
            source_line: Some(line_text.to_string()),
            width,
        }
    }

    /// The same finding with a hint attached.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Renders `origin:line:col: <severity>: message`, the source line, caret and hint.
    pub fn render(&self, origin: &str, severity: &str) -> String {
        let mut out = if self.line == 0 {
            format!("{origin}: {severity}: {}", self.message)
        } else {
            format!(
                "{origin}:{}:{}: {severity}: {}",
                self.line, self.column, self.message
            )
        };
        if let Some(src) = &self.source_line {
            let gutter = self.line.to_string();
            let pad = " ".repeat(gutter.len());
            let shown: String = src.chars().take(160).collect();
            let caret_col = self.column.saturating_sub(1).min(160);
            // Keep tabs so the caret lines up under them.
            let lead: String = shown
                .chars()
                .take(caret_col)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            let carets = "^".repeat(self.width.clamp(1, 80));
            out.push_str(&format!(
                "\n{pad} |\n{gutter} | {shown}\n{pad} | {lead}{carets}"
            ));
        }
        match (&self.section, &self.key) {
            (Some(section), Some(key)) => {
                out.push_str(&format!("\n  = in: {section}, key {key}"));
            }
            (Some(section), None) => out.push_str(&format!("\n  = in: {section}")),
            (None, Some(key)) => out.push_str(&format!("\n  = in: key {key}")),
            (None, None) => {}
        }
        if let Some(hint) = &self.hint {
            out.push_str(&format!("\n  = hint: {hint}"));
        }
        out
    }
}

/// A 1-based line and character column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    pub line: usize,
    pub column: usize,
    /// Byte offset of the start of this line.
    pub line_start: usize,
    /// Byte offset of the end of this line (before its newline).
    pub line_end: usize,
}

impl Position {
    /// The position of byte `offset` in `text` (clamped to the text). Scans the text: for
    /// more than one lookup, use a [`LineIndex`].
    #[cfg(test)]
    pub(crate) fn of(text: &str, offset: usize) -> Position {
        LineIndex::new(text).position(text, offset)
    }
}

/// Where each line of a text starts, so that a byte offset maps to `line:column` in
/// logarithmic time. Built once per file: looking positions up by rescanning the text from the
/// start made loading a config quadratic in its size.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    /// Byte offset of the first byte of each line; `starts[0]` is 0.
    starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes the lines of `text`.
    pub(crate) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1));
        LineIndex { starts }
    }

    /// `offset` clamped to `text` and moved back to a character boundary.
    fn clamp(&self, text: &str, offset: usize) -> usize {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        offset
    }

    /// The position of byte `offset` of `text` (the text this index was built from).
    pub(crate) fn position(&self, text: &str, offset: usize) -> Position {
        let offset = self.clamp(text, offset);
        // The last line start at or before `offset`.
        let line_index = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let line_start = self
            .starts
            .get(line_index)
            .copied()
            .unwrap_or(0)
            .min(offset);
        let line_end = self
            .starts
            .get(line_index + 1)
            .map_or(text.len(), |&next| next - 1)
            .max(offset);
        let column = text
            .get(line_start..offset)
            .map_or(0, |s| s.chars().count())
            + 1;
        Position {
            line: line_index + 1,
            column,
            line_start,
            line_end,
        }
    }
}

/// Why a config file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read the config file: {source}\n  = hint: check the path, or pass another one with -c PATH")]
    Io {
        /// The path as given.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not UTF-8 text (UTF-16, or invalid UTF-8).
    #[error("{}", .diagnostic.render(.origin, "error"))]
    Encoding {
        /// The file name or other origin shown in messages.
        origin: String,
        /// Where the first offending byte is.
        diagnostic: Box<Diagnostic>,
    },
    /// The text is not valid TOML.
    #[error("{}", .diagnostic.render(.origin, "error"))]
    Syntax {
        /// The file name or other origin shown in messages.
        origin: String,
        /// Where parsing stopped.
        diagnostic: Box<Diagnostic>,
    },
    /// The TOML is well-formed but does not fit the config (wrong types, out-of-range integers,
    /// invalid periods, failed validation).
    #[error("{}", render_invalid(.origin, .errors))]
    Invalid {
        /// The file name or other origin shown in messages.
        origin: String,
        /// Every error found, in file order.
        errors: Vec<Diagnostic>,
        /// Warnings found before loading failed.
        warnings: Vec<Diagnostic>,
    },
}

impl ConfigError {
    /// The errors as diagnostics (one for I/O and encoding problems, possibly several otherwise).
    pub fn errors(&self) -> Vec<Diagnostic> {
        match self {
            ConfigError::Io { path, source } => vec![Diagnostic::whole_file(format!(
                "cannot read {path}: {source}"
            ))],
            ConfigError::Encoding { diagnostic, .. } | ConfigError::Syntax { diagnostic, .. } => {
                vec![(**diagnostic).clone()]
            }
            ConfigError::Invalid { errors, .. } => errors.clone(),
        }
    }

    /// Warnings collected before the load failed (only for [`ConfigError::Invalid`]).
    pub fn warnings(&self) -> &[Diagnostic] {
        match self {
            ConfigError::Invalid { warnings, .. } => warnings,
            _ => &[],
        }
    }
}

fn render_invalid(origin: &str, errors: &[Diagnostic]) -> String {
    let mut parts: Vec<String> = errors
        .iter()
        .take(MAX_SHOWN)
        .map(|d| d.render(origin, "error"))
        .collect();
    if errors.len() > MAX_SHOWN {
        parts.push(format!(
            "… and {} more errors (run `drover check-config -c {origin}` to list them all)",
            errors.len() - MAX_SHOWN
        ));
    }
    if parts.is_empty() {
        parts.push(format!("{origin}: error: invalid config"));
    }
    parts.join("\n")
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "{}:{}: {}", self.line, self.column, self.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_chars() {
        let text = "a = 1\nbé = \"x\"\n";
        let p = Position::of(text, text.find('=').unwrap_or(0));
        assert_eq!((p.line, p.column), (1, 3));
        let second = text.rfind('=').unwrap_or(0);
        let p = Position::of(text, second);
        assert_eq!((p.line, p.column), (2, 4));
        let p = Position::of(text, 10_000);
        assert_eq!(p.line, 3);
    }

    #[test]
    fn renders_source_line_and_caret() {
        let text = "[runners.machine]\n  IdleCount = \"5\"\n";
        let start = text.find("\"5\"").unwrap_or(0);
        let d = Diagnostic::at(text, start..start + 3, "IdleCount: expected an integer")
            .with_hint("write IdleCount = 5");
        let r = d.render("config.toml", "error");
        assert!(r.starts_with("config.toml:2:15: error: IdleCount"), "{r}");
        assert!(r.contains("2 |   IdleCount = \"5\""), "{r}");
        assert!(r.contains("  |               ^^^"), "{r}");
        assert!(r.ends_with("= hint: write IdleCount = 5"), "{r}");
    }
}
