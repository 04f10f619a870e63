//! The schema walk: parsed TOML with spans in, canonical checked values out.
//!
//! Each key is mapped to its schema field (exactly, else ignoring case, as upstream's decoder
//! does), each value is checked and converted with upstream's rules (an integer is accepted for
//! a float when it converts exactly; durations are Go strings or integer nanoseconds;
//! `StringOrArray` takes either form), and every finding becomes a [`Diagnostic`] that names
//! the runner (index and name) and the key, at the key's or value's `line:column`. The walk
//! never stops at the first error so an operator sees them all. It keeps the parsed tree (the
//! whole file's, or one runner's when the file is loaded a section at a time), so the later
//! validation step finds the span of a canonical path (`runners[0].machine.Periods`)
//! with [`Walker::span_of`] when it has something to report (no per-key record: a file of
//! 100,000 runners would build a map of 1.5 million paths for nothing). Likewise the canonical
//! path of the key being walked lives in one buffer that grows and shrinks as the walk goes
//! (no string per key), and the result is a [`Node`] tree that serde reads into the model.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use toml::Spanned;

use super::diagnostic::{Diagnostic, LineIndex};
use super::duration::parse_go_duration;
use super::node::{self, Node};
use super::schema::{Field, Kind, Schema, AUTOSCALING, ROOT, RUNNER};
use super::values::{float_value, found, int_value, quote_hint, toml_datetime_to_utc};

/// Where a key and its value are in the text.
#[derive(Debug, Clone)]
pub(crate) struct Spans {
    pub key: Range<usize>,
    pub value: Range<usize>,
}

/// Walk state: the text (for positions), the parsed tree (for spans), findings.
pub(crate) struct Walker<'t> {
    pub text: &'t str,
    /// Line starts of `text`, so positions cost a lookup and not a rescan.
    lines: &'t LineIndex,
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
    /// The parsed tree, to find the span of a canonical path when a diagnostic needs one
    /// (rarely: looking it up on demand beats recording a span per key of a huge file).
    tree: Tree<'t>,
    /// While inside a runner: the length of its path (`runners[0]`), a prefix of `path`,
    /// and its label (`runners[0] "name"`).
    runner_label: Option<(usize, String)>,
    /// The canonical path of what is being walked (`runners[0].machine.IdleCount`).
    path: String,
}

/// The parsed tree a walker looks spans up in.
#[derive(Clone, Copy)]
pub(crate) enum Tree<'t> {
    /// The whole file, or the head of a file loaded a section at a time: spans are the file's.
    Whole(&'t DeTable<'t>),
    /// Runner `index` of a file loaded a section at a time, parsed with the sections from
    /// byte `offset` on: spans inside are relative to it.
    Runner {
        index: usize,
        offset: usize,
        item: &'t Value<'t>,
    },
}

type Value<'i> = Spanned<DeValue<'i>>;

impl<'t> Walker<'t> {
    /// A walker over `text`, whose lines `lines` indexes, looking spans up in `tree`.
    pub(crate) fn new(text: &'t str, lines: &'t LineIndex, tree: Tree<'t>) -> Self {
        Walker {
            text,
            lines,
            errors: Vec::new(),
            warnings: Vec::new(),
            tree,
            runner_label: None,
            path: String::with_capacity(64),
        }
    }

    /// Walks the whole file (or the head of a file loaded a section at a time).
    pub(crate) fn root(&mut self) -> Vec<(&'static str, Node)> {
        let Tree::Whole(table) = self.tree else {
            return Vec::new();
        };
        self.path.clear();
        self.table(table, &ROOT)
    }

    /// Walks the runner of a section parsed alone: what the walk of the whole file gives for
    /// `runners[index]`, an exactly spelled key (no warnings of its own).
    pub(crate) fn runner(&mut self) -> Option<Node> {
        let Tree::Runner { index, item, .. } = self.tree else {
            return None;
        };
        self.path.clear();
        self.enter("runners");
        let node = self.table_list_item(item, &RUNNER, index);
        self.path.clear();
        node
    }

    /// `span` of the tree being walked, as a range of the text.
    fn at(&self, span: Range<usize>) -> Range<usize> {
        let base = match self.tree {
            Tree::Whole(_) => 0,
            Tree::Runner { offset, .. } => offset,
        };
        span.start + base..span.end + base
    }

    /// Where the key and value at canonical `path` (`runners[0].machine.Periods[1]`) are in
    /// the text, if the tree has them. Keys match as the walk matched them: exactly first,
    /// else ignoring case (the last such key, the one the walk kept). An array element's key
    /// span is its value's.
    pub(crate) fn span_of(&self, path: &str) -> Option<Spans> {
        let (index, offset, item) = match self.tree {
            Tree::Whole(table) => return span_in(table, path),
            Tree::Runner {
                index,
                offset,
                item,
            } => (index, offset, item),
        };
        // Only `runners[index]…` is in this section.
        let rest = path.strip_prefix("runners[")?;
        let (at, rest) = rest.split_once(']')?;
        if at.parse::<usize>().ok()? != index {
            return None;
        }
        let found = match rest.strip_prefix('.') {
            None if rest.is_empty() => Spans {
                key: item.span(),
                value: item.span(),
            },
            None => return None,
            Some(rest) => {
                let DeValue::Table(t) = item.get_ref() else {
                    return None;
                };
                span_in(t, rest)?
            }
        };
        let shift = |r: Range<usize>| r.start + offset..r.end + offset;
        Some(Spans {
            key: shift(found.key),
            value: shift(found.value),
        })
    }

    /// `runners[0] "name", key machine.IdleCount` (or `key concurrent` at the top level).
    pub(crate) fn describe(&self, path: &str) -> String {
        match &self.runner_label {
            Some((prefix, label)) => {
                let rel = path
                    .strip_prefix(&self.path[..*prefix])
                    .map(|r| r.trim_start_matches('.'))
                    .unwrap_or(path);
                if rel.is_empty() {
                    label.clone()
                } else {
                    format!("{label}, key {rel}")
                }
            }
            None => format!("key {path}"),
        }
    }

    /// The label of runner `index` whose name is `name`: `runners[0] "my-runner"`.
    pub(crate) fn runner_label(index: usize, name: Option<&str>) -> String {
        match name {
            Some(n) if !n.is_empty() => format!("runners[{index}] {n:?}"),
            _ => format!("runners[{index}] (no name)"),
        }
    }

    pub(crate) fn error(&mut self, span: Range<usize>, message: String, hint: Option<String>) {
        let d = Diagnostic::at_indexed(self.lines, self.text, span, message);
        self.errors.push(match hint {
            Some(h) => d.with_hint(h),
            None => d,
        });
    }

    pub(crate) fn warn(&mut self, span: Range<usize>, message: String, hint: Option<String>) {
        let d = Diagnostic::at_indexed(self.lines, self.text, span, message);
        self.warnings.push(match hint {
            Some(h) => d.with_hint(h),
            None => d,
        });
    }

    /// Appends `key` to the current path (`runners[0].machine` → `runners[0].machine.IdleCount`)
    /// and returns the length to truncate back to.
    fn enter(&mut self, key: &str) -> usize {
        let mark = self.path.len();
        if mark > 0 {
            self.path.push('.');
        }
        self.path.push_str(key);
        mark
    }

    /// Appends `[index]` to the current path and returns the length to truncate back to.
    fn enter_index(&mut self, index: usize) -> usize {
        use std::fmt::Write as _;
        let mark = self.path.len();
        // Writing to a String cannot fail.
        let _ = write!(self.path, "[{index}]");
        mark
    }

    /// [`Self::describe`] of the current path.
    fn here(&self) -> String {
        self.describe(&self.path)
    }

    /// Walks table `t` at the current path.
    fn table(&mut self, t: &DeTable<'_>, schema: &'static Schema) -> Vec<(&'static str, Node)> {
        let mut out = Vec::with_capacity(t.len());
        // (canonical name, was the match exact, byte offset of the key): a schema table has
        // a bounded number of fields, so a short list beats a hash map built per table.
        let mut seen: Vec<(&'static str, bool, usize)> = Vec::with_capacity(t.len());
        for (k, v) in t.iter() {
            let key: &str = k.get_ref();
            let key_span = self.at(k.span());
            let Some((field, exact)) = schema.lookup(key) else {
                let mark = self.enter(key);
                self.unknown_key(schema, key, key_span);
                self.path.truncate(mark);
                continue;
            };
            let mark = self.enter(field.name);
            if self.key(field, exact, key, key_span, &mut seen) {
                if let Some(value) = self.convert(v, field) {
                    node::set(&mut out, field.name, value);
                }
            }
            self.path.truncate(mark);
        }
        out
    }

    /// The warnings about key `key` (matched to `field`) at the current path; false when an
    /// earlier key for the same field wins and this one is skipped.
    fn key(
        &mut self,
        field: &'static Field,
        exact: bool,
        key: &str,
        key_span: Range<usize>,
        seen: &mut Vec<(&'static str, bool, usize)>,
    ) -> bool {
        let previous = seen
            .iter()
            .position(|(name, _, _)| std::ptr::eq(*name, field.name) || *name == field.name);
        if let Some(at) = previous {
            let (_, prev_exact, prev_offset) = seen[at];
            let prev_line = self.lines.position(self.text, prev_offset).line;
            let kept = if prev_exact && !exact {
                format!("the key on line {prev_line}")
            } else {
                "this one".to_string()
            };
            self.warn(
                key_span.clone(),
                format!(
                    "{}: `{key}` sets the same setting as the key on line {prev_line} (keys match ignoring case); gitlab-runner picks either, drover uses {kept}",
                    self.here(),
                ),
                Some(format!("keep only one `{}` key", field.name)),
            );
            if prev_exact && !exact {
                return false;
            }
        }
        match previous {
            Some(at) => seen[at] = (field.name, exact, key_span.start),
            None => seen.push((field.name, exact, key_span.start)),
        }
        if !exact {
            self.warn(
                key_span.clone(),
                format!(
                    "{}: `{key}` is read as `{}` because keys match ignoring case",
                    self.here(),
                    field.name
                ),
                Some(format!("spell it `{}`", field.name)),
            );
        }
        if let Some(why) = field.unused {
            self.warn(key_span, format!("{}: {why}", self.here()), None);
        }
        true
    }

    /// Warns about unknown or removed key `key`, the current path.
    fn unknown_key(&mut self, schema: &'static Schema, key: &str, span: Range<usize>) {
        let what = self.here();
        if let Some(hint) = schema.removed_hint(key) {
            self.warn(
                span,
                format!("{what}: key is ignored"),
                Some(hint.to_string()),
            );
            return;
        }
        let hint = match schema.suggest(key) {
            Some(s) => format!("did you mean `{s}`? Unknown keys are ignored"),
            None => "gitlab-runner ignores keys it does not know, and so does drover".to_string(),
        };
        self.warn(
            span,
            format!("{what}: unknown key in {}", schema.title),
            Some(hint),
        );
    }

    /// Checks and converts the value of `field` at the current path.
    fn convert(&mut self, v: &Value<'_>, field: &'static Field) -> Option<Node> {
        let span = self.at(v.span());
        let val = v.get_ref();
        match field.kind {
            Kind::Str => match val {
                DeValue::String(s) => Some(Node::Str(s.to_string())),
                _ => self.mismatch(v, "a string", quote_hint(val)),
            },
            Kind::Int => match val {
                DeValue::Integer(_) => self.int(v).map(Node::Int),
                DeValue::String(s) if s.trim().parse::<i64>().is_ok() => {
                    let hint = format!("remove the quotes: {} = {}", leaf(&self.path), s.trim());
                    self.mismatch(v, "an integer", Some(hint))
                }
                DeValue::Float(_) => {
                    self.mismatch(v, "an integer", Some("write a whole number".into()))
                }
                _ => self.mismatch(v, "an integer", None),
            },
            Kind::Float => match val {
                DeValue::Float(fl) => match float_value(fl.as_str()) {
                    Some(x) => Some(Node::Float(x)),
                    None => {
                        let msg = format!("{}: float {} is out of range", self.here(), fl.as_str());
                        self.error(span, msg, None);
                        None
                    }
                },
                DeValue::Integer(_) => {
                    let n = self.int(v)?;
                    // Go refuses integers a float64 cannot hold exactly.
                    if n.unsigned_abs() > (1u64 << 53) {
                        let msg = format!(
                            "{}: integer {n} cannot be represented exactly as a float",
                            self.here()
                        );
                        self.error(span, msg, Some("write it as a float, e.g. 1.5".into()));
                        return None;
                    }
                    Some(Node::Float(n as f64))
                }
                DeValue::String(s) if s.trim().parse::<f64>().is_ok() => {
                    let hint = format!("remove the quotes: {} = {}", leaf(&self.path), s.trim());
                    self.mismatch(v, "a number", Some(hint))
                }
                _ => self.mismatch(v, "a number", None),
            },
            Kind::Bool => match val {
                DeValue::Boolean(b) => Some(Node::Bool(*b)),
                DeValue::String(s) if s == "true" || s == "false" => {
                    let hint = format!("remove the quotes: {} = {s}", leaf(&self.path));
                    self.mismatch(v, "a boolean (true or false)", Some(hint))
                }
                _ => self.mismatch(v, "a boolean (true or false)", None),
            },
            Kind::Duration => match val {
                DeValue::String(s) => match parse_go_duration(s) {
                    Ok(d) => Some(Node::Int(d.as_nanos())),
                    Err(e) => {
                        let msg = format!("{}: {e}", self.here());
                        self.error(span, msg, None);
                        None
                    }
                },
                DeValue::Integer(_) => self.int(v).map(Node::Int),
                _ => self.mismatch(
                    v,
                    "a duration (a string such as \"15m\", or an integer of nanoseconds)",
                    None,
                ),
            },
            Kind::Datetime => self.datetime(v).map(Node::Str),
            Kind::StrList => self.str_list(v, false).map(Node::List),
            Kind::StrOrList => self.str_list(v, true).map(Node::List),
            Kind::StrMap | Kind::BoolMap | Kind::StrListMap => self.map(v, field.kind),
            Kind::Table(schema) => match val {
                DeValue::Table(t) => Some(Node::Table(self.table(t, schema))),
                _ => self.mismatch(v, "a table", None),
            },
            Kind::TableList(schema) => match val {
                DeValue::Array(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        out.extend(self.table_list_item(item, schema, i));
                    }
                    Some(Node::List(out))
                }
                DeValue::Table(_) => self.mismatch(
                    v,
                    "an array of tables",
                    Some(format!(
                        "write each entry as {} (double brackets)",
                        schema.title
                    )),
                ),
                _ => self.mismatch(v, "an array of tables", None),
            },
            Kind::Raw => match val {
                DeValue::Table(_) => self.raw(v).map(Node::Raw),
                _ => self.mismatch(v, "a table", None),
            },
        }
    }

    /// Entry `index` of the array of tables at the current path.
    fn table_list_item(
        &mut self,
        item: &Value<'_>,
        schema: &'static Schema,
        index: usize,
    ) -> Option<Node> {
        let mark = self.enter_index(index);
        let out = match item.get_ref() {
            DeValue::Table(t) => Some(Node::Table(self.table_entry(t, schema, index))),
            _ => self.mismatch(item, "a table", None),
        };
        self.path.truncate(mark);
        out
    }

    /// One entry of an array of tables at the current path; runners set the label used in
    /// messages.
    fn table_entry(
        &mut self,
        t: &DeTable<'_>,
        schema: &'static Schema,
        index: usize,
    ) -> Vec<(&'static str, Node)> {
        if std::ptr::eq(schema, &AUTOSCALING) {
            let out = self.table(t, schema);
            let path = self.path.clone();
            super::schedule::check_section(self, &out, &path);
            return out;
        }
        if !std::ptr::eq(schema, &RUNNER) {
            return self.table(t, schema);
        }
        let name = t
            .iter()
            .find(|(k, _)| super::schema::equal_fold(k.get_ref(), "name"))
            .and_then(|(_, v)| v.get_ref().as_str());
        let label = Self::runner_label(index, name);
        let saved = self.runner_label.replace((self.path.len(), label));
        let out = self.table(t, schema);
        self.runner_label = saved;
        out
    }

    /// Reports that the value at the current path is not `expected`.
    fn mismatch(&mut self, v: &Value<'_>, expected: &str, hint: Option<String>) -> Option<Node> {
        let msg = format!(
            "{}: expected {expected}, found {}",
            self.here(),
            found(v.get_ref())
        );
        self.error(self.at(v.span()), msg, hint);
        None
    }

    /// The integer at the current path, if it fits an i64.
    fn int(&mut self, v: &Value<'_>) -> Option<i64> {
        let DeValue::Integer(i) = v.get_ref() else {
            return None;
        };
        match int_value(i.as_str(), i.radix()) {
            Some(n) => Some(n),
            None => {
                let msg = format!(
                    "{}: integer {i} is out of range (it must fit a signed 64-bit integer, as Go's int)",
                    self.here()
                );
                self.error(self.at(v.span()), msg, None);
                None
            }
        }
    }

    fn str_list(&mut self, v: &Value<'_>, single_ok: bool) -> Option<Vec<Node>> {
        match v.get_ref() {
            DeValue::String(s) if single_ok => Some(vec![Node::Str(s.to_string())]),
            DeValue::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    match item.get_ref() {
                        DeValue::String(s) => out.push(Node::Str(s.to_string())),
                        _ => {
                            ok = false;
                            let mark = self.enter_index(i);
                            self.mismatch(item, "a string", quote_hint(item.get_ref()));
                            self.path.truncate(mark);
                        }
                    }
                }
                ok.then_some(out)
            }
            DeValue::String(s) => {
                let hint = format!("write it as a list: {} = [{s:?}]", leaf(&self.path));
                self.mismatch(v, "an array of strings", Some(hint));
                None
            }
            _ => {
                let expected = if single_ok {
                    "a string or an array of strings"
                } else {
                    "an array of strings"
                };
                self.mismatch(v, expected, None);
                None
            }
        }
    }

    fn map(&mut self, v: &Value<'_>, kind: Kind) -> Option<Node> {
        let DeValue::Table(t) = v.get_ref() else {
            return self.mismatch(v, "a table", None);
        };
        let mut out = Vec::with_capacity(t.len());
        let mut ok = true;
        for (k, item) in t.iter() {
            let mark = self.enter(k.get_ref());
            let converted = match (kind, item.get_ref()) {
                (Kind::StrMap, DeValue::String(s)) => Some(Node::Str(s.to_string())),
                (Kind::BoolMap, DeValue::Boolean(b)) => Some(Node::Bool(*b)),
                (Kind::StrListMap, _) => self.str_list(item, false).map(Node::List),
                (Kind::BoolMap, _) => self.mismatch(
                    item,
                    "a boolean (true or false)",
                    quote_hint(item.get_ref()),
                ),
                _ => self.mismatch(item, "a string", quote_hint(item.get_ref())),
            };
            self.path.truncate(mark);
            match converted {
                Some(c) => out.push((k.get_ref().to_string(), c)),
                None => ok = false,
            }
        }
        ok.then_some(Node::Map(out))
    }

    fn datetime(&mut self, v: &Value<'_>) -> Option<String> {
        use chrono::{DateTime, Utc};
        let parsed: Option<DateTime<Utc>> = match v.get_ref() {
            DeValue::String(s) => DateTime::parse_from_rfc3339(s)
                .ok()
                .map(|d| d.with_timezone(&Utc)),
            DeValue::Datetime(dt) => toml_datetime_to_utc(dt),
            _ => {
                self.mismatch(v, "a datetime (e.g. 2024-01-31T12:00:00Z)", None);
                return None;
            }
        };
        match parsed {
            Some(d) => Some(d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
            None => {
                let msg = format!(
                    "{}: {} is not a valid RFC 3339 datetime",
                    self.here(),
                    found(v.get_ref())
                );
                self.error(
                    self.at(v.span()),
                    msg,
                    Some("write e.g. 2024-01-31T12:00:00Z".into()),
                );
                None
            }
        }
    }

    /// Copies a section drover does not interpret, still refusing out-of-range numbers.
    fn raw(&mut self, v: &Value<'_>) -> Option<toml::Value> {
        Some(match v.get_ref() {
            DeValue::String(s) => toml::Value::String(s.to_string()),
            DeValue::Integer(_) => toml::Value::Integer(self.int(v)?),
            DeValue::Float(fl) => match float_value(fl.as_str()) {
                Some(x) => toml::Value::Float(x),
                None => {
                    let msg = format!("{}: float {} is out of range", self.here(), fl.as_str());
                    self.error(self.at(v.span()), msg, None);
                    return None;
                }
            },
            DeValue::Boolean(b) => toml::Value::Boolean(*b),
            DeValue::Datetime(dt) => toml::Value::Datetime(*dt),
            DeValue::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let mark = self.enter_index(i);
                    let value = self.raw(item);
                    self.path.truncate(mark);
                    out.push(value?);
                }
                toml::Value::Array(out)
            }
            DeValue::Table(t) => {
                let mut out = toml::Table::new();
                for (k, item) in t.iter() {
                    let mark = self.enter(k.get_ref());
                    let value = self.raw(item);
                    self.path.truncate(mark);
                    out.insert(k.get_ref().to_string(), value?);
                }
                toml::Value::Table(out)
            }
        })
    }
}

/// [`Walker::span_of`] within `table`, with spans as `table` has them.
fn span_in<'a>(table: &'a DeTable<'a>, path: &str) -> Option<Spans> {
    let mut table = table;
    let mut found: Option<(Spans, &'a Value<'a>)> = None;
    for segment in path.split('.') {
        if let Some((_, value)) = found {
            let DeValue::Table(t) = value.get_ref() else {
                return None;
            };
            table = t;
        }
        let (name, indices) = segment.split_once('[').unwrap_or((segment, ""));
        let mut exact = None;
        let mut folded = None;
        for (k, v) in table.iter() {
            if k.get_ref() == name {
                exact = Some((k, v));
                break;
            }
            if super::schema::equal_fold(k.get_ref(), name) {
                folded = Some((k, v));
            }
        }
        let (k, mut v) = exact.or(folded)?;
        let mut spans = Spans {
            key: k.span(),
            value: v.span(),
        };
        for index in indices.split('[').filter(|s| !s.is_empty()) {
            let i: usize = index.strip_suffix(']')?.parse().ok()?;
            let DeValue::Array(items) = v.get_ref() else {
                return None;
            };
            v = items.get(i)?;
            spans = Spans {
                key: v.span(),
                value: v.span(),
            };
        }
        found = Some((spans, v));
    }
    found.map(|(spans, _)| spans)
}

fn leaf(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}
