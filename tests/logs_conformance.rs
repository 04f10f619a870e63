//! drover's log formatter against upstream's: the behaviour gitlab-runner's `runner` formatter
//! (`log/runner_formatter.go` and its tests: prefixes and colours per level, coloured keys,
//! key order) and logrus v1.9's text and JSON formatters (their tests: which values are
//! quoted, Go `%q` escaping, `time level msg` first, clashing keys renamed `fields.*`, the
//! terminal form, HTML escaping) show, as inputs and the lines upstream writes for them.
//!
//! Each case is one record and the exact line upstream writes (or a piece the line must or
//! must not contain, where upstream's test only checks that). A case marked deliberate is one
//! where drover writes something else on purpose (README "What differs"); the test checks
//! that it still differs, so a stale listing shows.

use chrono::{DateTime, FixedOffset, TimeZone, Utc};
use drover::upstream_log::format::{line, Format, Level, Record, Style, Value};

enum Expect {
    /// The whole line, without its newline.
    Line(&'static str),
    Contains(&'static str),
    Lacks(&'static str),
}

struct Case {
    name: &'static str,
    format: Format,
    terminal: bool,
    level: Level,
    msg: &'static str,
    fields: Vec<(&'static str, Value)>,
    expect: Vec<Expect>,
    /// Why drover differs, for the cases where it does on purpose.
    deliberate: Option<&'static str>,
}

fn t0() -> DateTime<FixedOffset> {
    Utc.with_ymd_and_hms(2026, 9, 8, 9, 5, 7)
        .single()
        .map(|t| t + chrono::TimeDelta::nanoseconds(981_330_000))
        .expect("time")
        .fixed_offset()
}

fn s(v: &str) -> Value {
    Value::Str(v.to_string())
}

fn case(
    name: &'static str,
    format: Format,
    terminal: bool,
    level: Level,
    msg: &'static str,
    fields: Vec<(&'static str, Value)>,
    expect: Vec<Expect>,
) -> Case {
    Case {
        name,
        format,
        terminal,
        level,
        msg,
        fields,
        expect,
        deliberate: None,
    }
}

const PAD: usize = 50;

fn pad(prefix: &str, msg: &str) -> String {
    format!("{prefix}{msg:<w$}", w = PAD - prefix.len())
}

fn runner_cases() -> Vec<Case> {
    use Expect::*;
    let mut out = Vec::new();
    // runner_formatter_test.go, ColorsAndPrefixes: every level, coloured and not; fatal is
    // skipped upstream only because logrus exits, its prefix comes from the same table.
    let levels = [
        (Level::Panic, "PANIC: ", "\x1b[31;1m"),
        (Level::Fatal, "FATAL: ", "\x1b[31;1m"),
        (Level::Error, "ERROR: ", "\x1b[31;1m"),
        (Level::Warning, "WARNING: ", "\x1b[0;33m"),
        (Level::Info, "", ""),
        (Level::Debug, "", "\x1b[37;1m"),
    ];
    for (level, prefix, colour) in levels {
        let coloured = format!(
            "{colour}{}\x1b[0;m  {colour}key\x1b[0;m=value",
            pad(prefix, "test message")
        );
        let plain = format!("{}  key=value", pad(prefix, "test message"));
        out.push(case(
            "runner: prefix and colour per level, coloured",
            Format::Runner,
            true,
            level,
            "test message",
            vec![("key", s("value"))],
            vec![Line(Box::leak(coloured.into_boxed_str()))],
        ));
        out.push(case(
            "runner: prefix per level, colours disabled",
            Format::Runner,
            false,
            level,
            "test message",
            vec![("key", s("value"))],
            vec![Line(Box::leak(plain.into_boxed_str()))],
        ));
    }
    out.push(case(
        "runner: keys sorted",
        Format::Runner,
        false,
        Level::Info,
        "test message",
        vec![
            ("aza", s("v")),
            ("zzz", s("v")),
            ("zaz", s("v")),
            ("aaa", s("v")),
        ],
        vec![Contains(" aaa=v aza=v zaz=v zzz=v")],
    ));
    out.push(case(
        "runner: keys sorted bytewise, upper case first",
        Format::Runner,
        false,
        Level::Warning,
        "Starting forceful shutdown",
        vec![
            ("shutdown-timeout", Value::Duration(30_000_000_000)),
            ("StopSignal", s("terminated")),
        ],
        vec![Line(
            "WARNING: Starting forceful shutdown                 StopSignal=terminated shutdown-timeout=30s",
        )],
    ));
    out.push(case(
        "runner: a message longer than the column gets no padding",
        Format::Runner,
        false,
        Level::Info,
        "IdleCount is set to 0 so the machine will be created on demand in job context",
        vec![("runner", s("abcdefgh"))],
        vec![Line(
            "IdleCount is set to 0 so the machine will be created on demand in job context  runner=abcdefgh",
        )],
    ));
    out.push(case(
        "runner: values unquoted, with spaces; Go renderings of durations, times, floats",
        Format::Runner,
        false,
        Level::Warning,
        "Requesting machine removal",
        vec![
            ("lifetime", Value::Duration(91_270_242_965)),
            ("name", s("runner-abc-1")),
            (
                "now",
                Value::Time(
                    Utc.with_ymd_and_hms(2021, 4, 12, 21, 7, 46)
                        .single()
                        .expect("time")
                        .fixed_offset()
                        + chrono::TimeDelta::nanoseconds(637_317_249),
                    Some(10_146_199.428_603_329),
                ),
            ),
            ("reason", s("too many idle machines")),
            ("used", Value::Duration(310_052_067)),
            ("usedCount", Value::Int(2)),
        ],
        vec![Line(
            "WARNING: Requesting machine removal                 lifetime=1m31.270242965s name=runner-abc-1 now=2021-04-12 21:07:46.637317249 +0000 UTC m=+10146199.428603329 reason=too many idle machines used=310.052067ms usedCount=2",
        )],
    ));
    out.push(case(
        "runner: float64 and more durations as Go prints them",
        Format::Runner,
        false,
        Level::Info,
        "Job succeeded",
        vec![
            ("a", Value::Float(144.960209393)),
            ("b", Value::Float(1e6)),
            ("c", Value::Float(3.0)),
            ("d", Value::Duration(40_240)),
            ("e", Value::Duration(9_552_887_956_193)),
            ("f", Value::Duration(0)),
            ("g", Value::Float(0.00001)),
            ("h", Value::Float(123456.5)),
        ],
        vec![Contains(
            "  a=144.960209393 b=1e+06 c=3 d=40.24µs e=2h39m12.887956193s f=0s g=1e-05 h=123456.5",
        )],
    ));
    out.push(case(
        "runner: the empty info line of the start-up",
        Format::Runner,
        false,
        Level::Info,
        "",
        vec![],
        vec![Line("                                                   ")],
    ));
    out.push(Case {
        deliberate: Some(
            "upstream writes the runner format's colours even when stderr is not a terminal \
             (DisableColors is never set); drover only on a terminal",
        ),
        ..case(
            "runner: colours when not a terminal",
            Format::Runner,
            false,
            Level::Warning,
            "Removing machine",
            vec![("name", s("m1"))],
            vec![Line(
                "\x1b[0;33mWARNING: Removing machine                           \x1b[0;m  \x1b[0;33mname\x1b[0;m=m1",
            )],
        )
    });
    out.push(Case {
        deliberate: Some(
            "upstream prints runner-format values raw with %v: a newline in a value (GitLab's \
             error message) starts a forged line; drover quotes such a value Go-style",
        ),
        ..case(
            "runner: a value with a newline",
            Format::Runner,
            false,
            Level::Warning,
            "Checking for jobs... failed",
            vec![("error", s("denied\nERROR: forged"))],
            vec![Line(
                "WARNING: Checking for jobs... failed                 error=denied\nERROR: forged",
            )],
        )
    });
    out.push(Case {
        deliberate: Some(
            "upstream prints the runner-format message raw: escape sequences reach the \
             terminal; drover escapes control characters in it",
        ),
        ..case(
            "runner: a message with an escape sequence",
            Format::Runner,
            false,
            Level::Info,
            "job \x1b[2Jdone",
            vec![],
            vec![Contains("job \x1b[2Jdone")],
        )
    });
    out
}

fn text_cases() -> Vec<Case> {
    use Expect::*;
    let mut out = Vec::new();
    out.push(case(
        "text: time level msg, then sorted fields; empty msg left out (TestFormatting)",
        Format::Text,
        false,
        Level::Panic,
        "",
        vec![("test", s("foo"))],
        vec![Line(
            "time=\"2026-09-08T09:05:07.98133Z\" level=panic test=foo",
        )],
    ));
    // TestQuoting: which strings logrus quotes.
    let plain = [
        "",
        "abcd",
        "v1.0",
        "1234567890",
        "/foobar",
        "foo_bar",
        "foo@bar",
        "foobar^",
        "+/-_^@f.oobar",
        "invalid",
    ];
    for v in plain {
        let want = format!(" test={v}");
        out.push(case(
            "text: safe characters unquoted (TestQuoting)",
            Format::Text,
            false,
            Level::Info,
            "",
            vec![("test", s(v))],
            vec![Contains(Box::leak(want.into_boxed_str())), Lacks("test=\"")],
        ));
    }
    let quoted = [
        ("foo\n\rbar", "test=\"foo\\n\\rbar\""),
        ("foobar$", "test=\"foobar$\""),
        ("&foobar", "test=\"&foobar\""),
        ("x y", "test=\"x y\""),
        ("x,y", "test=\"x,y\""),
        ("invalid argument", "test=\"invalid argument\""),
        // TestEscaping.
        ("ba\"r", "test=\"ba\\\"r\""),
        ("ba'r", "test=\"ba'r\""),
        (
            "error: something went wrong",
            "test=\"error: something went wrong\"",
        ),
        // Go %q: \x for other controls, \u for non-printing runes, printable runes kept.
        ("a\x1b[31mb", "test=\"a\\x1b[31mb\""),
        ("tab\there", "test=\"tab\\there\""),
        ("caf\u{e9}", "test=\"caf\u{e9}\""),
        ("nb\u{a0}sp", "test=\"nb\\u00a0sp\""),
        ("rlo\u{202e}x", "test=\"rlo\\u202ex\""),
        ("back\\slash", "test=\"back\\\\slash\""),
        ("del\x7f", "test=\"del\\x7f\""),
    ];
    for (v, want) in quoted {
        out.push(case(
            "text: other values quoted Go-style (TestQuoting, TestEscaping)",
            Format::Text,
            false,
            Level::Info,
            "",
            vec![("test", s(v))],
            vec![Contains(want)],
        ));
    }
    for (v, want) in [
        (Value::Bool(true), " test=true"),
        (Value::Bool(false), " test=false"),
        (Value::Int(0), " test=0"),
        (Value::Int(-123), " test=-123"),
        (Value::Uint(123), " test=123"),
        (Value::Float(2.5), " test=2.5"),
    ] {
        out.push(case(
            "text: numbers and bools unquoted (TestQuoting)",
            Format::Text,
            false,
            Level::Info,
            "",
            vec![("test", v)],
            vec![Contains(want)],
        ));
    }
    out.push(case(
        "text: a time value is its Go String(), quoted (TestEscaping)",
        Format::Text,
        false,
        Level::Info,
        "",
        vec![("test", Value::Time(t0(), None))],
        vec![Contains(" test=\"2026-09-08 09:05:07.98133 +0000 UTC\"")],
    ));
    out.push(case(
        "text: fields clashing with time/level/msg renamed fields.* (TestTextFormatterFieldMap)",
        Format::Text,
        false,
        Level::Warning,
        "oh hi",
        vec![
            ("field1", s("f1")),
            ("msg", s("messagefield")),
            ("level", s("levelfield")),
            ("time", s("timefield")),
        ],
        vec![Line(
            "time=\"2026-09-08T09:05:07.98133Z\" level=warning msg=\"oh hi\" field1=f1 fields.level=levelfield fields.msg=messagefield fields.time=timefield",
        )],
    ));
    out.push(case(
        "text: spec example line",
        Format::Text,
        false,
        Level::Info,
        "Checking for jobs... received",
        vec![
            ("runner", s("abcdefgh")),
            ("job", Value::Int(42)),
            ("correlation_id", s("01J9")),
        ],
        vec![Line(
            "time=\"2026-09-08T09:05:07.98133Z\" level=info msg=\"Checking for jobs... received\" correlation_id=01J9 job=42 runner=abcdefgh",
        )],
    ));
    out.push(case(
        "text: a whole-second time has no fraction (RFC3339Nano)",
        Format::Text,
        false,
        Level::Error,
        "x",
        vec![],
        vec![Contains("time=\"2026-09-08T09:05:07Z\" level=error msg=x")],
    ));
    // The terminal form (isColored): level cut to 4 letters, seconds since start, message
    // padded to 44, keys in the level's colour.
    for (level, colour, name) in [
        (Level::Info, 36, "INFO"),
        (Level::Warning, 33, "WARN"),
        (Level::Error, 31, "ERRO"),
        (Level::Debug, 37, "DEBU"),
        (Level::Panic, 31, "PANI"),
        (Level::Fatal, 31, "FATA"),
    ] {
        let want = format!(
            "\x1b[{colour}m{name}\x1b[0m[0012] {:<44}  \x1b[{colour}mkey\x1b[0m=\"a b\"",
            "test message"
        );
        out.push(case(
            "text on a terminal: INFO[0012] form (TestDisableLevelTruncation)",
            Format::Text,
            true,
            level,
            "test message",
            vec![("key", s("a b"))],
            vec![Line(Box::leak(want.into_boxed_str()))],
        ));
    }
    out.push(case(
        "text on a terminal: clashing fields renamed too (prefixFieldClashes before the form)",
        Format::Text,
        true,
        Level::Info,
        "m",
        vec![("msg", s("x")), ("a", s("y"))],
        vec![Contains(" \x1b[36ma\x1b[0m=y \x1b[36mfields.msg\x1b[0m=x")],
    ));
    out.push(case(
        "text on a terminal: one trailing newline of the message dropped (TestNewlineBehavior)",
        Format::Text,
        true,
        Level::Info,
        "test message\n",
        vec![],
        vec![Lacks("test message\n")],
    ));
    out.push(Case {
        deliberate: Some(
            "logrus' terminal form prints the message raw (only one trailing newline dropped): \
             drover escapes the control characters left in it",
        ),
        ..case(
            "text on a terminal: a second trailing newline stays (TestNewlineBehavior)",
            Format::Text,
            true,
            Level::Info,
            "test message\n\n",
            vec![],
            vec![Contains("test message\n")],
        )
    });
    out.push(Case {
        deliberate: Some(
            "Go's %q also escapes unassigned and private-use code points; drover, without \
             Unicode tables, escapes controls, non-ASCII spaces and format characters only",
        ),
        ..case(
            "text: a private-use rune",
            Format::Text,
            false,
            Level::Info,
            "",
            vec![("test", s("p\u{e000}"))],
            vec![Contains("test=\"p\\ue000\"")],
        )
    });
    out
}

fn json_cases() -> Vec<Case> {
    use Expect::*;
    vec![
        case(
            "json: keys sorted, time level msg among them",
            Format::Json,
            false,
            Level::Info,
            "test message",
            vec![("key", s("value")), ("aaa", Value::Int(1))],
            vec![Line(
                r#"{"aaa":1,"key":"value","level":"info","msg":"test message","time":"2026-09-08T09:05:07.98133Z"}"#,
            )],
        ),
        case(
            "json: level names (warning, not warn)",
            Format::Json,
            false,
            Level::Warning,
            "w",
            vec![],
            vec![Contains(r#""level":"warning""#)],
        ),
        case(
            "json: an error value is its text (TestErrorNotLost)",
            Format::Json,
            false,
            Level::Error,
            "",
            vec![("error", s("wild walrus")), ("omg", s("wild walrus"))],
            vec![
                Contains(r#""error":"wild walrus""#),
                Contains(r#""omg":"wild walrus""#),
            ],
        ),
        case(
            "json: clashing fields renamed (TestFieldClashWithTime/Msg/Level)",
            Format::Json,
            false,
            Level::Info,
            "",
            vec![
                ("time", s("right now!")),
                ("msg", s("something")),
                ("level", s("something")),
            ],
            vec![Line(
                r#"{"fields.level":"something","fields.msg":"something","fields.time":"right now!","level":"info","msg":"","time":"2026-09-08T09:05:07.98133Z"}"#,
            )],
        ),
        case(
            "json: HTML escaped (TestJSONEnableHTMLEscape)",
            Format::Json,
            false,
            Level::Info,
            "& < >",
            vec![],
            vec![Contains(r#""msg":"\u0026 \u003c \u003e""#)],
        ),
        case(
            "json: Duration as integer nanoseconds, Time as RFC3339Nano, floats shortest",
            Format::Json,
            false,
            Level::Info,
            "Machine created",
            vec![
                ("duration", Value::Duration(10_170_885_466)),
                ("now", Value::Time(t0(), Some(91.3))),
                ("duration_s", Value::Float(3.0)),
                ("big", Value::Float(1e21)),
                ("small", Value::Float(1e-7)),
                ("mid", Value::Float(1e20)),
            ],
            vec![Line(
                r#"{"big":1e+21,"duration":10170885466,"duration_s":3,"level":"info","mid":100000000000000000000,"msg":"Machine created","now":"2026-09-08T09:05:07.98133Z","small":1e-7,"time":"2026-09-08T09:05:07.98133Z"}"#,
            )],
        ),
        case(
            "json: control characters escaped",
            Format::Json,
            false,
            Level::Info,
            "a\nb\x1b[0m\u{2028}",
            vec![],
            vec![Contains(r#""msg":"a\nb\u001b[0m\u2028""#)],
        ),
        case(
            "json: colours never, even on a terminal",
            Format::Json,
            true,
            Level::Error,
            "e",
            vec![],
            vec![Lacks("\x1b")],
        ),
    ]
}

fn check(c: &Case, got: &str) -> Result<(), String> {
    let Some(body) = got.strip_suffix('\n') else {
        return Err(format!("{:?} does not end with a newline", got));
    };
    for e in &c.expect {
        match e {
            Expect::Line(want) if body != *want => {
                return Err(format!("want {want:?}\n got {body:?}"))
            }
            Expect::Contains(want) if !body.contains(want) => {
                return Err(format!("want it to contain {want:?}\n got {body:?}"))
            }
            Expect::Lacks(bad) if body.contains(bad) => {
                return Err(format!("want it without {bad:?}\n got {body:?}"))
            }
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn logs_conformance() {
    let cases: Vec<Case> = runner_cases()
        .into_iter()
        .chain(text_cases())
        .chain(json_cases())
        .collect();
    let started = t0() - chrono::TimeDelta::seconds(12);
    let (mut agree, mut deliberate, mut failures) = (0, 0, Vec::new());
    for c in &cases {
        let style = Style {
            format: c.format,
            terminal: c.terminal,
            started,
        };
        let time = if c.name.contains("whole-second") {
            Utc.with_ymd_and_hms(2026, 9, 8, 9, 5, 7)
                .single()
                .expect("time")
                .fixed_offset()
        } else {
            t0()
        };
        let got = line(
            &style,
            &Record {
                time,
                level: c.level,
                msg: c.msg,
                fields: &c.fields,
            },
        );
        match (check(c, &got), c.deliberate) {
            (Ok(()), None) => agree += 1,
            (Err(_), Some(_)) => deliberate += 1,
            (Err(e), None) => failures.push(format!("{}: {e}", c.name)),
            (Ok(()), Some(why)) => failures.push(format!(
                "{}: listed as a deliberate difference ({why}) but drover now agrees",
                c.name
            )),
        }
        assert!(
            got.matches('\n').count() == 1,
            "{}: not one line: {got:?}",
            c.name
        );
    }
    println!(
        "logs conformance: {} cases, {agree} agree, {deliberate} deliberate differences",
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
