//! Cutting `config.toml` into its head and its `[[runners]]` sections, parsed apart from the
//! rest of the file when that gives the same tree as the whole file.
//!
//! A large file is mostly `[[runners]]` sections. Parsed in one piece, `toml` lexes the whole
//! file into token and event lists first and the loader keeps the whole tree while it works (for
//! 100,000 runners, hundreds of megabytes). Cut into sections, a few sections at a time are
//! parsed, checked and turned into their runners, and their tree freed, so the work runs on
//! small lists that stay in the cache and on every core (`load.rs`). The file is cut before
//! each line that is `[[runners]]` (spaces or tabs around it and a trailing comment aside): the
//! part before the first such line (the head) and each run of sections are parsed apart. This
//! gives the whole file's tree when every part parses, the head has no key that could be
//! `runners`, and each run defines exactly one `runners` entry per section and nothing else;
//! otherwise (a cut inside a multi-line string leaves a part that does not parse or holds fewer
//! runners than cuts, a `[session_server]` after the runners, a header spelled `[[ runners ]]`,
//! any syntax error) the loader parses the file in one piece, so every tree and every syntax
//! error is the one `toml` gives for the whole file. Spans in a run of sections are relative
//! to its start.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// A file cut into its head and its `[[runners]]` sections.
pub(crate) struct Sections<'t> {
    text: &'t str,
    /// What comes before the first `[[runners]]`, parsed.
    pub head: Spanned<DeTable<'t>>,
    /// Where each section starts, in file order; section `i` holds runner `i`.
    cuts: Vec<usize>,
}

impl<'t> Sections<'t> {
    /// Cuts `text` into sections, or `None` when it has no `[[runners]]` line or its head does
    /// not parse alone or could hold runners.
    pub(crate) fn cut(text: &'t str) -> Option<Self> {
        let cuts = runner_headers(text);
        let first = *cuts.first()?;
        let head = DeTable::parse(&text[..first]).ok()?;
        if head
            .get_ref()
            .keys()
            .any(|k| super::schema::equal_fold(k.get_ref(), "runners"))
        {
            return None;
        }
        Some(Sections { text, head, cuts })
    }

    /// How many sections (and so runners) there are.
    pub(crate) fn len(&self) -> usize {
        self.cuts.len()
    }

    /// Where sections `sections` are in the text, together.
    fn range(&self, sections: Range<usize>) -> Range<usize> {
        let start = self
            .cuts
            .get(sections.start)
            .copied()
            .unwrap_or(self.text.len());
        let end = self
            .cuts
            .get(sections.end)
            .copied()
            .unwrap_or(self.text.len());
        start..end
    }

    /// Parses sections `sections` together, apart from the rest of the file: where they start
    /// (spans inside are relative to it) and their runners' tables, runner `i` of them from
    /// section `sections.start + i`. `None` when they do not parse apart or define anything but
    /// exactly one `runners` entry each, a table (the caller then parses the whole file).
    ///
    /// A few sections at a time rather than one: `toml` allocates its token and event lists
    /// per parse, and a few kilobytes of text still stay in the cache.
    pub(crate) fn parse(
        &self,
        sections: Range<usize>,
    ) -> Option<(usize, Vec<Spanned<DeValue<'t>>>)> {
        let range = self.range(sections.clone());
        let start = range.start;
        let table = DeTable::parse(self.text.get(range)?).ok()?.into_inner();
        let mut entries = table.into_iter();
        let (key, value) = entries.next()?;
        if entries.next().is_some() || key.get_ref() != "runners" {
            return None;
        }
        let DeValue::Array(items) = value.into_inner() else {
            return None;
        };
        // As many runners as cuts: a cut inside a multi-line string, or a header spelled
        // `[[ runners ]]`, would make them differ.
        if items.len() != sections.len()
            || items
                .iter()
                .any(|item| !matches!(item.get_ref(), DeValue::Table(_)))
        {
            return None;
        }
        Some((start, items.into_iter().collect()))
    }
}

/// Byte offsets of the lines that are `[[runners]]`, with spaces or tabs around it and a
/// comment after it allowed.
fn runner_headers(text: &str) -> Vec<usize> {
    const HEADER: &[u8] = b"[[runners]]";
    let bytes = text.as_bytes();
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    memchr::memmem::find_iter(bytes, HEADER)
        .filter_map(|at| {
            let before = &bytes[..at];
            let line_start = memchr::memrchr(b'\n', before).map_or(0, |nl| nl + 1);
            if !before[line_start..].iter().all(blank) {
                return None;
            }
            let after = &bytes[at + HEADER.len()..];
            let rest = after.iter().find(|b| !blank(b));
            matches!(rest, None | Some(b'\n' | b'\r' | b'#')).then_some(line_start)
        })
        .collect()
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
[[runners]] # a comment after the header: still a cut
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
    fn sections_give_the_whole_files_tree_and_spans() {
        let sections = Sections::cut(MIXED).expect("cut");
        // `[[runners]] # third` is a cut too.
        assert_eq!(sections.len(), 4);
        let whole = DeTable::parse(MIXED).expect("parses");
        let all = whole.get_ref();
        let head_keys: Vec<String> = sections
            .head
            .get_ref()
            .keys()
            .map(|k| k.get_ref().to_string())
            .collect();
        let mut keys = all.keys().map(|k| k.get_ref().to_string());
        assert_eq!(
            keys.by_ref().take(head_keys.len()).collect::<Vec<_>>(),
            head_keys
        );
        assert_eq!(keys.collect::<Vec<_>>(), ["runners"]);
        let Some(DeValue::Array(runners)) = all.get("runners").map(Spanned::get_ref) else {
            panic!("runners is an array");
        };
        assert_eq!(runners.len(), sections.len());
        for (i, runner) in runners.iter().enumerate() {
            let (offset, alone) = sections.parse(i..i + 1).expect("the section parses alone");
            compare(runner, &alone[0], offset, &format!("runners[{i}]"));
        }
    }

    /// Whether `text` is loaded a section at a time.
    fn in_sections(text: &str) -> bool {
        Sections::cut(text).is_some_and(|s| (0..s.len()).all(|i| s.parse(i..i + 1).is_some()))
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
        // A section holding two runners: headers spelled otherwise are no cuts.
        "[[runners]]\nname = \"a\"\n[[ runners ]]\nname = \"b\"\n[[runners]]\nname = \"c\"\n",
        "[[runners]]\nname = \"a\"\n[[\"runners\"]]\nname = \"b\"\n",
        // No runners at all.
        "concurrent = 2\n",
    ];

    #[test]
    fn loads_in_parts_exactly_as_in_one_piece() {
        let mut texts: Vec<(String, String)> = vec![
            ("mixed".into(), MIXED.into()),
            ("mixed-crlf".into(), MIXED.replace('\n', "\r\n")),
            ("checked".into(), CHECKED.into()),
            // A walk error in the head: the sections are only walked.
            (
                "head-error".into(),
                CHECKED.replace("concurrent = 4", "concurrent = \"4\""),
            ),
            // An error of the checks in the head, with the runners' own.
            (
                "head-check".into(),
                CHECKED.replace("concurrent = 4", "concurrent = 4\nlabels = { a = \"b\" }"),
            ),
        ];
        for (i, t) in WHOLE_ONLY.iter().enumerate() {
            assert!(!in_sections(t), "case {i} must be parsed in one piece");
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
            if in_sections(text) {
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
        use crate::config::load::PARALLEL_SECTIONS;
        // Walk errors, errors of the checks after the walk, and a file that loads with
        // warnings (case-folded keys, an executor drover does not run).
        let clean = CHECKED
            .replace("\"name=nope\"", "\"again=%s\"")
            .replace("IdleCount = 2", "idlecount = 2\n    IdleCount = 3");
        for (name, text) in [("mixed", MIXED), ("checked", CHECKED), ("clean", &clean)] {
            let at = text.find("[[runners]]").expect("the text has runners");
            let (head, runners) = text.split_at(at);
            let per_copy = runner_headers(runners).len();
            let copies = PARALLEL_SECTIONS / per_copy + 3;
            let text = format!("{head}{}", runners.repeat(copies));
            assert!(in_sections(&text), "{name} is loaded a section at a time");
            let sections = Sections::cut(&text).expect("cut");
            assert_eq!(sections.len(), per_copy * copies);
            assert!(sections.len() >= PARALLEL_SECTIONS);
            let a = load_text(text.as_bytes(), "t.toml", true);
            if name == "clean" {
                let Ok(loaded) = a.as_ref() else {
                    panic!("the clean text does not load");
                };
                assert_eq!(loaded.config.runners.len(), sections.len());
                assert!(loaded.warnings.len() > sections.len(), "{name}: warnings");
            }
            let a = format!("{a:?}");
            let b = format!("{:?}", load_text(text.as_bytes(), "t.toml", false));
            assert!(a == b, "{name} loads differently on threads");
        }
    }
}
