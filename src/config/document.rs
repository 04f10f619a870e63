//! Parsing `config.toml` into a tree with spans, one `[[runners]]` section at a time when that
//! gives the same tree.
//!
//! A large file is mostly `[[runners]]` sections. Parsed in one piece, `toml` lexes the whole
//! file into token and event lists first (for 100,000 runners, hundreds of megabytes); parsed
//! section by section, the same work runs on small lists that stay in the cache, about a fifth
//! faster and with a fraction of the memory. The file is cut before each line that is exactly
//! `[[runners]]`: the part before the first such line (the head) and each section are parsed
//! alone. The result is the whole file's tree when every part parses, the head has no key that
//! could be `runners`, and each section defines nothing but `runners` entries; otherwise (a cut
//! inside a multi-line string leaves a part that does not parse, a `[session_server]` after the
//! runners, any syntax error) the file is parsed in one piece, so every tree and every syntax
//! error is the one `toml` gives for the whole file. Spans in a section are relative to its
//! start; [`Part::offset`] turns them into positions in the file. From 4,096 sections on, the
//! sections are parsed on one thread per core, each taking a contiguous run of them; the parts
//! are joined in file order, so the result does not depend on the number of threads.

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The parsed file.
pub(crate) struct Document<'t> {
    /// The whole file, or only what comes before the first `[[runners]]` when `parts` is not
    /// empty.
    pub head: Spanned<DeTable<'t>>,
    /// The `[[runners]]` sections, in file order, when the file was parsed in parts.
    pub parts: Vec<Part<'t>>,
}

/// One `[[runners]]` section parsed alone.
pub(crate) struct Part<'t> {
    /// Where the section starts in the file: add it to every span inside.
    pub offset: usize,
    /// The index in the whole file of the section's first runner.
    pub first: usize,
    /// The section's `runners` entries (usually one).
    pub runners: Vec<Spanned<DeValue<'t>>>,
}

impl<'t> Document<'t> {
    /// Parses `text` in parts when that gives the whole file's tree, else in one piece.
    pub(crate) fn parse(text: &'t str) -> Result<Self, toml::de::Error> {
        if let Some(doc) = Self::parse_in_parts(text) {
            return Ok(doc);
        }
        Self::parse_whole(text)
    }

    /// Parses `text` in one piece.
    pub(crate) fn parse_whole(text: &'t str) -> Result<Self, toml::de::Error> {
        Ok(Document {
            head: DeTable::parse(text)?,
            parts: Vec::new(),
        })
    }

    fn parse_in_parts(text: &'t str) -> Option<Self> {
        let cuts = runner_headers(text);
        let (&first_cut, _) = cuts.split_first()?;
        let head = DeTable::parse(&text[..first_cut]).ok()?;
        if head
            .get_ref()
            .keys()
            .any(|k| super::schema::equal_fold(k.get_ref(), "runners"))
        {
            return None;
        }
        // The sections parse independently: on a large file, one thread per core parses a
        // contiguous run of them (a few thousand sections is where threads start to pay).
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let runs = if cuts.len() >= PARALLEL_SECTIONS && threads > 1 {
            threads.min(cuts.len() / (PARALLEL_SECTIONS / 2))
        } else {
            1
        };
        let per = cuts.len().div_ceil(runs);
        let parsed: Vec<Option<Sections<'t>>> = if runs == 1 {
            vec![parse_sections(text, &cuts, 0, cuts.len())]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..runs)
                    .map(|r| {
                        let cuts = &cuts;
                        let (from, to) = (r * per, ((r + 1) * per).min(cuts.len()));
                        scope.spawn(move || parse_sections(text, cuts, from, to))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().ok().flatten())
                    .collect()
            })
        };
        let mut parts = Vec::with_capacity(cuts.len());
        let mut first = 0;
        for run in parsed {
            for (offset, runners) in run? {
                let count = runners.len();
                parts.push(Part {
                    offset,
                    first,
                    runners,
                });
                first += count;
            }
        }
        Some(Document { head, parts })
    }

    /// The part holding runner `index`, and the runner's index within it.
    pub(crate) fn runner(&self, index: usize) -> Option<(&Part<'t>, usize)> {
        let at = self
            .parts
            .partition_point(|p| p.first <= index)
            .checked_sub(1)?;
        let part = self.parts.get(at)?;
        let within = index - part.first;
        (within < part.runners.len()).then_some((part, within))
    }
}

/// Parsed sections: each one's offset in the file and its `runners` entries.
type Sections<'t> = Vec<(usize, Vec<Spanned<DeValue<'t>>>)>;

/// Sections from which parsing them is spread over threads.
const PARALLEL_SECTIONS: usize = 4096;

/// Parses sections `from..to` of `cuts` alone; `None` when one of them does not parse or
/// defines anything but `runners` entries (the caller then parses the whole file).
fn parse_sections<'t>(
    text: &'t str,
    cuts: &[usize],
    from: usize,
    to: usize,
) -> Option<Sections<'t>> {
    let mut out = Vec::with_capacity(to - from);
    for i in from..to {
        let start = cuts[i];
        let end = cuts.get(i + 1).copied().unwrap_or(text.len());
        let table = DeTable::parse(&text[start..end]).ok()?.into_inner();
        let mut entries = table.into_iter();
        let (key, value) = entries.next()?;
        if entries.next().is_some() || key.get_ref() != "runners" {
            return None;
        }
        let DeValue::Array(items) = value.into_inner() else {
            return None;
        };
        let runners: Vec<_> = items.into_iter().collect();
        if runners.is_empty()
            || runners
                .iter()
                .any(|r| !matches!(r.get_ref(), DeValue::Table(_)))
        {
            return None;
        }
        out.push((start, runners));
    }
    Some(out)
}

/// Byte offsets of the lines that are exactly `[[runners]]` (surrounding whitespace aside).
fn runner_headers(text: &str) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim() == "[[runners]]" {
            cuts.push(offset);
        }
        offset += line.len();
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::load_text;

    /// Runners with findings of every kind spread over several sections: type errors, unknown,
    /// removed and case-folded keys, a bad period, a validation error and warnings.
    const MIXED: &str = r#"concurrent = 4
check_interval = 3
[session_server]
  listen_address = "[::]:8093"

[[runners]]
  name = "first"
  url = "https://gitlab.example.com/"
  token = "t1"
  executor = "docker+machine"
  [runners.docker]
    image = "alpine"
  [runners.machine]
    IdleCount = 1
    MachineName = "m-%s"
    MachineOptionsWithName = ["name=nope"]
    [[runners.machine.autoscaling]]
      Periods = ["* * 9-17 * * mon-fri *"]
      Timezone = "UTC"

  [[runners]]
  name = "second"
  limit = "4"
  pre_clone_script = "x"
  Executor = "docker+machine"
  Url = "https://gitlab.example.com/"
  [runners.machine]
    idletime = 10
    IdleTme = 3
    [[runners.machine.autoscaling]]
      Periods = ["* * 25 * * * *"]
[[runners]] # third
  name = "third"
  executor = "shell"
  labels = { a = "b" }
  runners.extra = 1
  [runners.cache]
    Type = "s3"
    [runners.cache.s3]
      BucketName = 5
[[runners]]
  name = "fourth"
"#;

    /// Findings that only the checks after the walk make (they find positions by path):
    /// a `MachineOptionsWithName` without `%s` in a later section, a runner without
    /// `MachineName`, an executor drover does not run.
    const CHECKED: &str = r#"concurrent = 4
[[runners]]
  name = "first"
  executor = "docker+machine"
  [runners.machine]
    MachineName = "m-%s"
    [[runners.machine.autoscaling]]
      Periods = ["* * 9-17 * * mon-fri *"]
      Timezone = "UTC"
[[runners]] # not a cut: the first part holds two runners
  name = "second"
  executor = "docker+machine"
  [runners.machine]
    IdleCount = 2
[[runners]]
  name = "third"
  executor = "kubernetes"
[[runners]]
  name = "fourth"
  executor = "docker+machine"
  [runners.machine]
    MachineName = "m-%s"
    MachineOptionsWithName = ["ok=%s", "name=nope"]
"#;

    fn compare(a: &Spanned<DeValue<'_>>, b: &Spanned<DeValue<'_>>, offset: usize, at: &str) {
        let shifted = b.span().start + offset..b.span().end + offset;
        assert_eq!(a.span(), shifted, "value span of {at}");
        match (a.get_ref(), b.get_ref()) {
            (DeValue::Table(x), DeValue::Table(y)) => {
                assert_eq!(x.len(), y.len(), "keys of {at}");
                for ((ka, va), (kb, vb)) in x.iter().zip(y.iter()) {
                    let sub = format!("{at}.{}", ka.get_ref());
                    assert_eq!(ka.get_ref(), kb.get_ref(), "key order in {at}");
                    let kb_span = kb.span().start + offset..kb.span().end + offset;
                    assert_eq!(ka.span(), kb_span, "key span of {sub}");
                    compare(va, vb, offset, &sub);
                }
            }
            (DeValue::Array(x), DeValue::Array(y)) => {
                assert_eq!(x.len(), y.len(), "items of {at}");
                for (i, (va, vb)) in x.iter().zip(y.iter()).enumerate() {
                    compare(va, vb, offset, &format!("{at}[{i}]"));
                }
            }
            (x, y) => assert_eq!(format!("{x:?}"), format!("{y:?}"), "value of {at}"),
        }
    }

    #[test]
    fn parts_give_the_whole_files_tree_and_spans() {
        let parts = Document::parse(MIXED).expect("parses");
        let whole = Document::parse_whole(MIXED).expect("parses");
        // `[[runners]] # third` is no cut, so the second part holds two runners.
        let sizes: Vec<usize> = parts.parts.iter().map(|p| p.runners.len()).collect();
        assert_eq!(sizes, [1, 2, 1], "parsed in parts");
        let all = whole.head.get_ref();
        let mut keys = all.keys().map(|k| k.get_ref().to_string());
        let head_keys: Vec<String> = parts
            .head
            .get_ref()
            .keys()
            .map(|k| k.get_ref().to_string())
            .collect();
        assert_eq!(
            keys.by_ref().take(head_keys.len()).collect::<Vec<_>>(),
            head_keys
        );
        assert_eq!(keys.collect::<Vec<_>>(), ["runners"]);
        let Some(DeValue::Array(runners)) = all.get("runners").map(Spanned::get_ref) else {
            panic!("runners is an array");
        };
        for (i, runner) in runners.iter().enumerate() {
            let (part, within) = parts.runner(i).expect("runner is in a part");
            compare(
                runner,
                &part.runners[within],
                part.offset,
                &format!("runners[{i}]"),
            );
        }
        assert!(parts.runner(runners.len()).is_none());
    }

    /// Texts the parts cannot parse alone, or where they would not give the whole file's tree.
    const WHOLE_ONLY: &[&str] = &[
        // A cut inside a multi-line string.
        "[[runners]]\nname = \"a\"\npre_build_script = '''\n[[runners]]\n'''\n",
        // A table after the runners.
        "[[runners]]\nname = \"a\"\n[session_server]\nsession_timeout = 5\n",
        // `runners` in the head, in any spelling.
        "[runners.docker]\nimage = \"x\"\n[[runners]]\nname = \"a\"\n",
        "Runners = 1\n[[runners]]\nname = \"a\"\n",
        // A syntax error in a later section.
        "[[runners]]\nname = \"a\"\n[[runners]]\nname = \"b\nlimit = 2\n",
        // A duplicate key within a section, and a section redefining a table.
        "[[runners]]\nname = \"a\"\nname = \"b\"\n",
        "[[runners]]\n[runners.docker]\n[runners.docker]\n",
    ];

    #[test]
    fn loads_in_parts_exactly_as_in_one_piece() {
        let mut texts: Vec<(String, String)> = vec![
            ("mixed".into(), MIXED.into()),
            ("mixed-crlf".into(), MIXED.replace('\n', "\r\n")),
            ("checked".into(), CHECKED.into()),
        ];
        for (i, t) in WHOLE_ONLY.iter().enumerate() {
            assert!(
                Document::parse_in_parts(t).is_none(),
                "case {i} must be parsed in one piece"
            );
            texts.push((format!("whole-only {i}"), t.to_string()));
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dirs = [
            root.join("fixtures/configs/valid"),
            root.join("fixtures/configs/malformed"),
            std::path::PathBuf::from("/work/shared/corpus/configs/real"),
            root.join("../shared/corpus/configs/real"),
            root.join("../../shared/corpus/configs/real"),
        ];
        for dir in dirs.iter().filter(|d| d.is_dir()) {
            for entry in std::fs::read_dir(dir).expect("fixture dir reads") {
                let path = entry.expect("dir entry").path();
                let bytes = std::fs::read(&path).expect("fixture reads");
                texts.push((
                    path.display().to_string(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                ));
            }
        }
        let checked = format!("{:?}", load_text(CHECKED.as_bytes(), "t.toml", true));
        assert!(
            checked.contains("MachineOptionsWithName[1]") && checked.contains("line: 23"),
            "the checks report the fourth runner's option at its line: {checked}"
        );
        assert!(texts.len() > 40, "the fixtures were found: {}", texts.len());
        let mut in_parts = 0;
        for (name, text) in &texts {
            if Document::parse_in_parts(text).is_some() {
                in_parts += 1;
            }
            let a = format!("{:?}", load_text(text.as_bytes(), "t.toml", true));
            let b = format!("{:?}", load_text(text.as_bytes(), "t.toml", false));
            assert_eq!(a, b, "{name} loads differently in parts");
        }
        assert!(in_parts > 20, "only {in_parts} texts were parsed in parts");
    }

    /// A file large enough to be parsed on several threads loads as in one piece, runner
    /// indexes, positions and findings included.
    #[test]
    fn sections_parsed_on_several_threads_load_as_in_one_piece() {
        let at = MIXED.find("[[runners]]").expect("MIXED has runners");
        let (head, runners) = MIXED.split_at(at);
        let per_copy = runner_headers(runners).len();
        let copies = PARALLEL_SECTIONS / per_copy + 3;
        let text = format!("{head}{}", runners.repeat(copies));
        let doc = Document::parse_in_parts(&text).expect("parsed in parts");
        assert_eq!(doc.parts.len(), per_copy * copies);
        assert!(doc.parts.len() >= PARALLEL_SECTIONS);
        let offsets: Vec<usize> = doc.parts.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, runner_headers(&text), "sections in file order");
        let a = format!("{:?}", load_text(text.as_bytes(), "t.toml", true));
        let b = format!("{:?}", load_text(text.as_bytes(), "t.toml", false));
        assert!(a == b, "loads differently on threads");
    }
}
