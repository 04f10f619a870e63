//! Parsing: what cronexpr accepts, what it rejects, and that every rejection is a short,
//! actionable message (never a panic).

use drover::config::cron::{CronError, CronExpr, Field};
use drover::config::periods::{lint_periods, PeriodError, TimePeriod};

const ACCEPTED: &[&str] = &[
    "* * * * *",
    "* * * * * *",
    "* * * * * * *",
    "* * 9-17 * * mon-fri * ignored extra fields",
    "*\t*\t9-17\n*\r* mon-fri *",
    "  * * * * * * *  ",
    "@daily",
    "@hourly",
    "@weekly",
    "@monthly",
    "@yearly",
    "@annually",
    "? ? ? ? ? ? ?",
    "0 0 0 L * * *",
    "0 0 0 LW * * *",
    "0 0 0 15W * * *",
    "0 0 0 lw * * *",
    "0 0 0 * * 5L *",
    "0 0 0 * * 5#3 *",
    "0 0 0 * * FRI#3 *",
    "0 0 0 * * sunL *",
    "0 0 0 * * sunday#1 *",
    "05 09 01 01 01 01 2026",
    "0 0 0 * JANUARY-March,Dec * *",
    "0 0 0 * * 0-7 *",
    "0 0 0 * * 07 *",
    "*/59 */59 */23 */31 */12 */6 */2099",
    "* * * * * * 1970-2099",
    "0-59/30 0/15 1-23/2 2/3 * * *",
    // cronexpr stops at the first wildcard of a generic field: later entries are unchecked.
    "*,junk * * * * * *",
    // Descending ranges are accepted where some value remains or the field may be empty.
    "* * 22-6,12 * * * *",
    "* * * * * sat-sun *",
    "* * * 25-5 * * *",
    "* * * * * * 2030-2025",
];

#[test]
fn accepted_forms() {
    for e in ACCEPTED {
        if let Err(err) = CronExpr::parse(e) {
            panic!("{e:?} should parse, got: {err}");
        }
    }
}

/// (expression, text the message must contain)
const REJECTED: &[(&str, &[&str])] = &[
    ("", &["missing field(s)", "0 field(s)"]),
    (
        "* * * *",
        &["missing field(s)", "4 field(s)", "* * 9-17 * * mon-fri *"],
    ),
    ("@Daily", &["missing field(s)"]),
    ("@reboot", &["missing field(s)"]),
    ("* * 24 * * * *", &["hour", "`24`", "out of range", "0-23"]),
    ("* * * * 13 * *", &["month", "`13`", "1-12"]),
    ("* * * * * 8 *", &["day-of-week", "`8`", "0-7"]),
    ("* * * 32 * * *", &["day-of-month", "`32`", "1-31"]),
    ("* * * 0 * * *", &["day-of-month", "`0`"]),
    ("* * * * * * 1969", &["year", "1969", "1970-2099"]),
    ("* * * * * * 2100", &["year", "2100"]),
    ("60 * * * * * *", &["second", "`60`", "0-59"]),
    ("005 * * * * * *", &["second", "`005`", "leading zero"]),
    (
        "*/0 * * * * * *",
        &["invalid interval", "`*/0`", "between 1 and 59"],
    ),
    ("*/60 * * * * * *", &["invalid interval", "`*/60`"]),
    (
        "* * */24 * * * *",
        &["invalid interval", "hour", "between 1 and 23"],
    ),
    (
        "* * * * * */7 *",
        &["invalid interval", "day-of-week", "between 1 and 6"],
    ),
    ("* * * * * * */100", &["invalid interval", "year"]),
    ("* 5/0 * * * * *", &["invalid interval", "`5/0`"]),
    ("* 1-5/0 * * * * *", &["invalid interval"]),
    // A bad step is reported even after a wildcard.
    ("*,*/0 * * * * * *", &["invalid interval"]),
    ("junk,* * * * * * *", &["second", "`junk`"]),
    ("* * * * foo * *", &["month", "`foo`", "jan"]),
    ("* * * * * xyz *", &["day-of-week", "`xyz`", "sun"]),
    ("* * * * * mon-xyz *", &["day-of-week", "`mon-xyz`"]),
    ("* , * * * * *", &["minute", "missing directive"]),
    ("* * * L5 * * *", &["day-of-month", "`L5`"]),
    ("* * * 32W * * *", &["day-of-month", "`32W`"]),
    ("* * * * * 5#6 *", &["day-of-week", "`5#6`"]),
    ("* * * * * 8L *", &["day-of-week", "`8L`"]),
    ("* * * * * L *", &["day-of-week", "`L`"]),
    ("* * * * * * 2026#1", &["year"]),
    ("* * 1.5 * * * *", &["hour", "`1.5`"]),
    ("* * -1 * * * *", &["hour", "`-1`"]),
    // Descending ranges that leave a field empty crash gitlab-runner; drover refuses them.
    (
        "* * 22-6 * * mon-fri *",
        &["hour", "`22-6`", "descending", "`22-23,0-6`"],
    ),
    ("* * 22-6/2 * * * *", &["`22-6/2`", "`22,0-6/2`"]),
    ("50-10 * * * * * *", &["second", "`50-59,0-10`"]),
    ("* 45-15 * * * * *", &["minute", "`45-59,0-15`"]),
    ("* * * * nov-feb * *", &["month", "`nov-dec,jan-feb`"]),
    ("* * * * 11-2 * *", &["month", "`11-12,1-2`"]),
];

#[test]
fn rejected_forms_have_actionable_messages() {
    let mut failures = Vec::new();
    for (e, needles) in REJECTED {
        match CronExpr::parse(e) {
            Ok(_) => failures.push(format!("{e:?} should be rejected")),
            Err(err) => {
                let msg = err.to_string();
                for n in *needles {
                    if !msg.contains(n) {
                        failures.push(format!("{e:?}: message lacks {n:?}: {msg}"));
                    }
                }
                if msg.len() > 400 || msg.contains('\n') {
                    failures.push(format!("{e:?}: message is not one short line: {msg}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn descending_error_variant() {
    let err = CronExpr::parse("* * 22-6 * * * *").err();
    assert_eq!(
        err,
        Some(CronError::DescendingRange {
            field: Field::Hour,
            entry: "22-6".into(),
            fix: "22-23,0-6".into()
        })
    );
}

#[test]
fn period_errors_name_the_entry_and_zone() {
    let list = vec![
        "* * 9-17 * * mon-fri *".to_string(),
        "* * 25 * * * *".to_string(),
    ];
    let err = TimePeriod::compile(&list, "UTC")
        .err()
        .map(|e| e.to_string());
    let msg = err.unwrap_or_default();
    assert!(
        msg.starts_with("Periods[1] = \"* * 25 * * * *\": "),
        "{msg}"
    );
    assert!(msg.contains("0-23"), "{msg}");

    let ok = vec!["* * * * * * *".to_string()];
    match TimePeriod::compile(&ok, "Europe/Berln") {
        Err(PeriodError::UnknownZone { name, hint }) => {
            assert_eq!(name, "Europe/Berln");
            assert!(hint.contains("did you mean \"Europe/Berlin\""), "{hint}");
        }
        other => panic!("expected unknown zone, got {other:?}"),
    }
    let msg = TimePeriod::compile(&ok, "europe/berlin")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(msg.contains("\"Europe/Berlin\""), "{msg}");
    let msg = TimePeriod::compile(&ok, "Mars/Olympus")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(msg.contains("IANA"), "{msg}");

    for zone in [
        "",
        "Local",
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Sydney",
        "US/Eastern",
        "EST5EDT",
    ] {
        assert!(TimePeriod::compile(&ok, zone).is_ok(), "{zone}");
    }
    let p = TimePeriod::compile(&ok, "Australia/Sydney").ok();
    assert_eq!(p.as_ref().map(|p| p.zone_name()), Some("Australia/Sydney"));
}

#[test]
fn lint_findings_show_fixes() {
    let cases: &[(&str, &[&str])] = &[
        (
            "* * * * * sat-sun *",
            &["`sat-sun`", "matches nothing", "`sat,sun`"],
        ),
        ("* * * * * 5-7 *", &["`5-7`", "`5-6,0`"]),
        ("* * * * * fri-mon *", &["`fri-sat,sun-mon`"]),
        ("* * * * * 0-7 *", &["`0-7`", "only Sunday"]),
        ("* * 22-6,12 * * * *", &["`22-6`", "`22-23,0-6`"]),
        ("* * * 25-5 * * *", &["`25-5`", "`25-31,1-5`"]),
        ("* * * * * * 2030-2025", &["`2030-2025`", "`2025-2030`"]),
        (
            "* 9-17 * * mon-fri",
            &["5-field", "`* * 9-17 * * mon-fri *`"],
        ),
        (
            "* 9-17 * * mon-fri 2026",
            &["6-field", "`* * 9-17 * * mon-fri 2026`"],
        ),
        ("@daily", &["`@daily`", "~1 s"]),
        ("*/2 * * * * * *", &["seconds field `*/2`", "write `*`"]),
        ("* * * 1-7 * mon *", &["EITHER", "`mon#1`"]),
        ("* * * 30 feb * *", &["never active"]),
    ];
    for (e, needles) in cases {
        let findings = lint_periods(&[e.to_string()]);
        let all = findings.join("\n");
        for n in *needles {
            assert!(all.contains(n), "{e:?}: findings lack {n:?}:\n{all}");
        }
    }
    assert!(lint_periods(&["* * 9-17 * * mon-fri *".to_string()]).is_empty());
    assert!(lint_periods(&["* * * * * sat,sun *".to_string()]).is_empty());
    assert_eq!(lint_periods(&[]).len(), 1);
}

#[test]
fn long_input_gives_short_message() {
    let long = format!("{} * * *", "1,".repeat(500));
    let err = TimePeriod::compile(std::slice::from_ref(&long), "UTC")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        !err.is_empty() && err.len() < 400,
        "{} chars: {err}",
        err.len()
    );
    let junk = "x".repeat(10_000);
    let err = CronExpr::parse(&format!("{junk} * * * *"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(!err.is_empty() && err.len() < 400, "{} chars", err.len());
    let zone = TimePeriod::compile(&["* * * * * * *".to_string()], &junk)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(!zone.is_empty() && zone.len() < 400, "{} chars", zone.len());
    let spaced = TimePeriod::compile(&["* * * * * * *".to_string()], " Europe/Berlin")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(spaced.contains("surrounding spaces"), "{spaced}");
}
