//! Conformance of the job trace with upstream's unit-test tables (gitlab-runner 19.3):
//! `common/buildlogger/internal/{masker,tokensanitizer,urlsanitizer,timestamper}`,
//! `helpers/trace/buffer_test.go` (output limit, UTF-8 fix-up; each case through both of
//! drover's logs: the executor's trace and the GitLab log buffer), `network/trace_test.go`
//! `TestJobOutputLimit`, `common/buildlogger/build_logger_test.go` (runner lines) and
//! `helpers/build_section_test.go` (section markers). The cases that need a job on the Engine
//! (`common/buildtest/job_output_limit.go`, `TestBuildScriptSections`) are in
//! `tests/trace_engine_conformance.rs`, with their own tally line.
//!
//! Each case is upstream's input and expected output, taken as facts; the harness is ours.
//! Where upstream's test splits its input on `|`, each part is a separate write. The test
//! prints `trace conformance: N cases, N agree, K deliberate differences` and fails on any
//! disagreement that is not a listed deliberate difference.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, TimeZone, Utc};
use drover::executor::trace::mask::{normalise, token_prefixes, Filters, Masker};
use drover::executor::trace::timestamp::{Clock, StreamId, Timestamper, HOLD};
use drover::executor::trace::{MemorySink, Trace};
use drover::gitlab::LogBuffer;

/// Upstream cases of the named files that test something drover does not have (file, test,
/// why). They are listed so that none is missing silently; they are not in the tally.
const NOT_APPLICABLE: &[(&str, &str, &str)] = &[
    ("buffer_test.go", "TestDelayedLimit", "the limit is fixed when drover makes the log; upstream's SetLimit after writes is internal API"),
    ("buffer_test.go", "TestTraceRace", "Go race-detector test of the buffer's locks; Rust rejects unsynchronised sharing at compile time"),
    ("buffer_test.go", "TestFlushOnError", "upstream's log is a temporary file that can fail to flush; drover's is in memory"),
    ("buffer_fd0_test.go", "TestBufferHandlingWithExceededFDIssue", "temporary log files and file-descriptor exhaustion; drover has none"),
    ("build_logger_test.go", "TestLogPrinters/null writer", "a nil logrus entry, an internal Go case"),
    ("build_logger_step_runner_test.go", "11 cases", "step-runner stream; drover has no step-runner or native steps"),
    ("innerstream_test.go", "6 cases", "step-runner inner stream; drover has no step-runner"),
    ("script_legacy/internal/trace_section_test.go", "12 cases", "only with FF_USE_SCRIPT_TO_STEP_MIGRATION or native steps"),
];

/// Cases that differ on purpose (table, case name), each explained in README "what differs".
const DELIBERATE: &[(&str, &str)] = &[
    // drover's own log redacts every URL parameter and registered secret; upstream's runner
    // log shows this URL unmasked.
    ("build_logger_test.go", "TestLogLineWithSecret (runner log)"),
];

struct Outcome {
    table: &'static str,
    name: String,
    got: String,
    expected: String,
}

fn writes(m: &mut Masker, input: &str) -> String {
    let mut out = Vec::new();
    for part in input.split('|') {
        m.write(part.as_bytes(), &mut |p| out.extend_from_slice(p));
    }
    m.close(&mut |p| out.extend_from_slice(p));
    String::from_utf8_lossy(&out).into_owned()
}

const ONLY_PHRASES: Filters = Filters {
    phrases: true,
    url: false,
    tokens: false,
};
const ONLY_URL: Filters = Filters {
    phrases: false,
    url: true,
    tokens: false,
};
const ONLY_TOKENS: Filters = Filters {
    phrases: false,
    url: false,
    tokens: true,
};

fn masker_cases(out: &mut Vec<Outcome>) {
    let big = "_".repeat(8000);
    let table: Vec<(String, Vec<&str>, String)> = vec![
        ("empty secrets have no affect".into(), vec![""], "empty secrets have no affect".into()),
        ("no escaping at all".into(), vec![], "no escaping at all".into()),
        ("secrets".into(), vec!["secrets"], "[MASKED]".into()),
        ("secret|s".into(), vec!["secrets"], "[MASKED]".into()),
        ("s|ecrets".into(), vec!["secrets"], "[MASKED]".into()),
        ("secretssecrets".into(), vec!["secrets"], "[MASKED][MASKED]".into()),
        ("ssecrets".into(), vec!["secrets"], "s[MASKED]".into()),
        ("s|secrets".into(), vec!["secrets"], "s[MASKED]".into()),
        ("at the start of the buffer".into(), vec!["at"], "[MASKED] the start of the buffer".into()),
        ("in the middle of the buffer".into(), vec!["middle"], "in the [MASKED] of the buffer".into()),
        ("at the end of the buffer".into(), vec!["buffer"], "at the end of the [MASKED]".into()),
        ("all values are masked".into(), vec!["all", "values", "are", "masked"], "[MASKED] [MASKED] [MASKED] [MASKED]".into()),
        (
            "prefixed and suffixed: xfoox ybary ffoo barr ffooo bbarr".into(),
            vec!["foo", "bar"],
            "prefixed and suffixed: x[MASKED]x y[MASKED]y f[MASKED] [MASKED]r f[MASKED]o b[MASKED]r".into(),
        ),
        (
            "prefix|ed, su|ffi|xed |and split|:| xfo|ox y|bary ffo|o ba|rr ffooo b|barr".into(),
            vec!["foo", "bar"],
            "prefixed, suffixed and split: x[MASKED]x y[MASKED]y f[MASKED] [MASKED]r f[MASKED]o b[MASKED]r".into(),
        ),
        (
            "sp|lit al|l val|ues ar|e |mask|ed".into(),
            vec!["split", "all", "values", "are", "masked"],
            "[MASKED] [MASKED] [MASKED] [MASKED] [MASKED]".into(),
        ),
        (
            "prefix_mask mask prefix_|mask prefix_ma|sk mas|k".into(),
            vec!["mask", "prefix_mask"],
            "[MASKED] [MASKED] [MASKED] [MASKED] [MASKED]".into(),
        ),
        (format!("large secret: {big}|{big}"), vec![], "large secret: [MASKED]".into()),
        (
            "overlap: this is the en| foobar".into(),
            vec!["this is the end", "en foobar", "en"],
            "overlap: this is the [MASKED]".into(),
        ),
    ];
    let large = "_".repeat(16000);
    for (input, values, expected) in table {
        let values: Vec<&str> = if input.starts_with("large secret") {
            vec![large.as_str()]
        } else {
            values
        };
        let mut m = Masker::from_parts(normalise(&values), Vec::new(), ONLY_PHRASES);
        let got = writes(&mut m, &input);
        out.push(Outcome {
            table: "masker_test.go",
            name: input.chars().take(60).collect(),
            got,
            expected,
        });
    }
}

fn token_cases(out: &mut Vec<Outcome>) {
    let table: &[(&str, &[&str], &str, &str)] = &[
        (
            "simple prefix masking",
            &[],
            "Lorem ipsum dolor sit amet, ex ea commodo glpat-imperdiet in voluptate velit esse",
            "Lorem ipsum dolor sit amet, ex ea commodo glpat-[MASKED] in voluptate velit esse",
        ),
        (
            "prefix at the end of the line",
            &[],
            "Lorem ipsum dolor sit amet, ex ea commodo in voluptate velit esseglpat-imperdiet",
            "Lorem ipsum dolor sit amet, ex ea commodo in voluptate velit esseglpat-[MASKED]",
        ),
        (
            "prefix at the beginning of the line",
            &[],
            "glpat-imperdiet Lorem ipsum dolor sit amet, ex ea commodo in voluptate velit esse",
            "glpat-[MASKED] Lorem ipsum dolor sit amet, ex ea commodo in voluptate velit esse",
        ),
        (
            "prefix inside of the line",
            &[],
            "esseglpat-imperdiet=_-. end Lorem ipsum dolor sit amet, ex ea commodo  in voluptate velit",
            "esseglpat-[MASKED] end Lorem ipsum dolor sit amet, ex ea commodo  in voluptate velit",
        ),
        (
            "two prefix concatenate",
            &[],
            "glpat-impglpat-erdiet Lorem ipsum dolor sit amet, ex ea commodo  in voluptate velit esse",
            "glpat-[MASKED] Lorem ipsum dolor sit amet, ex ea commodo  in voluptate velit esse",
        ),
        (
            "multiple packets pat masking",
            &[],
            "glpat|-imperdiet Lorem ipsum dolor sit amet, ex ea commodo gl|pat-imperdiet in voluptate velit esse",
            "glpat-[MASKED] Lorem ipsum dolor sit amet, ex ea commodo glpat-[MASKED] in voluptate velit esse",
        ),
        (
            "second multiple packets pat masking",
            &[],
            "glpat| -imperdiet Lorem ipsum dolor sit amet",
            "glpat -imperdiet Lorem ipsum dolor sit amet",
        ),
        (
            "long input",
            &[],
            "Lorglpat-ipsu dolor sit amglpat-t, consglpat-ctglpat-tur adipiscing glpat-lit, sglpat-d do glpat-iusmod tglpat-mpor incididunt ut laborglpat-=_ glpat-t dolorglpat-=_ magna aliqua.",
            "Lorglpat-[MASKED] dolor sit amglpat-[MASKED], consglpat-[MASKED] adipiscing glpat-[MASKED], sglpat-[MASKED] do glpat-[MASKED] tglpat-[MASKED] incididunt ut laborglpat-[MASKED] glpat-[MASKED] dolorglpat-[MASKED] magna aliqua.",
        ),
        (
            "multiple packets long input",
            &[],
            "Lorglpat-ipsu dolor sit amglp|at-t, consglpat-ctg|lpat-tur adipiscing glpat-lit, sglpat-|d do glpat-iusmod t|glpat-mpor incididunt ut |laborglpat-=_ glpat-t dolorglpat-=_ magna aliqua.",
            "Lorglpat-[MASKED] dolor sit amglpat-[MASKED], consglpat-[MASKED] adipiscing glpat-[MASKED], sglpat-[MASKED] do glpat-[MASKED] tglpat-[MASKED] incididunt ut laborglpat-[MASKED] glpat-[MASKED] dolorglpat-[MASKED] magna aliqua.",
        ),
        (
            "second long input",
            &[],
            "Lorglpat- ipsu dolor sit amglpat-t, consglpat-ctglpat-tur adipiscing glpat-lit, sglpat-d do glpat-iusmod tglpat-mpor incididunt ut laborglpat-=_ glpat-t dolorglpat-=_ magna aliqua.",
            "Lorglpat- ipsu dolor sit amglpat-[MASKED], consglpat-[MASKED] adipiscing glpat-[MASKED], sglpat-[MASKED] do glpat-[MASKED] tglpat-[MASKED] incididunt ut laborglpat-[MASKED] glpat-[MASKED] dolorglpat-[MASKED] magna aliqua.",
        ),
        (
            "custom prefix with default one at the beginning of the line",
            &["token-"],
            "token-imperdiet Lorem ipsum dolor sit amet, ex ea commodo in voluptate velit esse",
            "token-[MASKED] Lorem ipsum dolor sit amet, ex ea commodo in voluptate velit esse",
        ),
        (
            "custom prefix with default one multiple packets long input",
            &["tok-"],
            "Lortok-ipsu dolor sit amt|ok-t, cons-ctg|lpat-tur adipiscing tok-lit, stok-|d gltok-test do tok-iusmod t|tok-mpor incididunt ut |labortok-=_ tok-t dolortok-=_ magna aliqua. Tglpat-llus orci ac auctor auguglpat-eee mauris auguglpat-wEr_ lorem",
            "Lortok-[MASKED] dolor sit amtok-[MASKED], cons-ctglpat-[MASKED] adipiscing tok-[MASKED], stok-[MASKED] gltok-[MASKED] do tok-[MASKED] ttok-[MASKED] incididunt ut labortok-[MASKED] tok-[MASKED] dolortok-[MASKED] magna aliqua. Tglpat-[MASKED] orci ac auctor auguglpat-[MASKED] mauris auguglpat-[MASKED] lorem",
        ),
        (
            "ignored sixteenth prefix and more",
            &["mask1-", "mask2-", "mask3-", "mask4-", "mask5-", "mask6-", "mask7-", "mask8-", "mask9-", "mask10-", "mask11-"],
            "Lormask1-ipsu dolor sit amm|ask2-t, cons-ctg|lpat-tur adipiscing mask5-lit, smask11-|d do mask7-iusmod t|glpat-mpor incididunt ut |labormask10-=_ mask9-t",
            "Lormask1-[MASKED] dolor sit ammask2-[MASKED], cons-ctglpat-[MASKED] adipiscing mask5-[MASKED], smask11-d do mask7-iusmod tglpat-[MASKED] incididunt ut labormask10-=_ mask9-t",
        ),
    ];
    for (name, custom, input, expected) in table {
        let custom: Vec<String> = custom.iter().map(|s| s.to_string()).collect();
        let mut m = Masker::from_parts(Vec::new(), token_prefixes(&custom, true), ONLY_TOKENS);
        out.push(Outcome {
            table: "token_masker_test.go",
            name: name.to_string(),
            got: writes(&mut m, input),
            expected: expected.to_string(),
        });
    }
}

fn url_cases(out: &mut Vec<Outcome>) {
    let zeros = "0".repeat(8 * 1024);
    let table: Vec<(String, String)> = vec![
        ("no escaping at all http://example.org/?test=foobar".into(), "no escaping at all http://example.org/?test=foobar".into()),
        (
            "multiple: &private_token=hello &?x-amz-security-token=hello &?x-amz-security-token=hello ?x-amz-security?x-amz-security-token=hello".into(),
            "multiple: &private_token=[MASKED] &?x-amz-security-token=[MASKED] &?x-amz-security-token=[MASKED] ?x-amz-security?x-amz-security-token=[MASKED]".into(),
        ),
        (
            "above known key size: http://example.org/?this-is-a-really-really-long-key-name=foobar".into(),
            "above known key size: http://example.org/?this-is-a-really-really-long-key-name=foobar".into(),
        ),
        (
            "http://example.com/?private_token=deadbeef sensitive URL at the start".into(),
            "http://example.com/?private_token=[MASKED] sensitive URL at the start".into(),
        ),
        (
            "a sensitive URL at the end http://example.com/?authenticity_token=deadbeef".into(),
            "a sensitive URL at the end http://example.com/?authenticity_token=[MASKED]".into(),
        ),
        (
            "a sensitive URL http://example.com/?rss_token=deadbeef in the middle".into(),
            "a sensitive URL http://example.com/?rss_token=[MASKED] in the middle".into(),
        ),
        (
            "a sensitive URL http://example.com/?X-AMZ-sigNATure=deadbeef with mixed case".into(),
            "a sensitive URL http://example.com/?X-AMZ-sigNATure=[MASKED] with mixed case".into(),
        ),
        (
            "a sensitive URL http://example.com/?param=second&x-amz-credential=deadbeef second param".into(),
            "a sensitive URL http://example.com/?param=second&x-amz-credential=[MASKED] second param".into(),
        ),
        (
            "a sensitive URL http://example.com/?rss_token=hide&x-amz-credential=deadbeef both params".into(),
            "a sensitive URL http://example.com/?rss_token=[MASKED]&x-amz-credential=[MASKED] both params".into(),
        ),
        (
            "a long sensitive URL http://example.com/?x-amz-credential=abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789".into(),
            "a long sensitive URL http://example.com/?x-amz-credential=[MASKED]".into(),
        ),
        (
            format!("a really long sensitive URL http://example.com/?x-amz-credential={zeros} that is still scrubbed"),
            "a really long sensitive URL http://example.com/?x-amz-credential=[MASKED] that is still scrubbed".into(),
        ),
        (
            "spl|it sensit|ive UR|L http://example.com/?x-amz-cred|ential=abcdefghij|klmnopqrstuvwxyz01234567".into(),
            "split sensitive URL http://example.com/?x-amz-credential=[MASKED]".into(),
        ),
        (
            "newline: http://example.com/?x-amz-credential=abc\nhttp://example.com/?x-amz-credential=abc".into(),
            "newline: http://example.com/?x-amz-credential=[MASKED]\nhttp://example.com/?x-amz-credential=[MASKED]".into(),
        ),
        (
            "control character: http://example.com/?x-amz-credential=abc\u{8}http://example.com/?x-amz-credential=abc".into(),
            "control character: http://example.com/?x-amz-credential=[MASKED]\u{8}http://example.com/?x-amz-credential=[MASKED]".into(),
        ),
        (
            "rss_token=notmasked http://example.com/?rss_token=!@#$A&x-amz-credential=abc&test=test".into(),
            "rss_token=notmasked http://example.com/?rss_token=[MASKED]&x-amz-credential=[MASKED]&test=test".into(),
        ),
        (
            "query string with no value: http://example.com/?x-amz-credential=&private_token=gitlab".into(),
            "query string with no value: http://example.com/?x-amz-credential=[MASKED]&private_token=[MASKED]".into(),
        ),
        (
            "invalid URL with double &: http://example.com/?x-amz-credential=abc&&private_token=gitlab".into(),
            "invalid URL with double &: http://example.com/?x-amz-credential=[MASKED]&&private_token=[MASKED]".into(),
        ),
        (
            "invalid URL with double ?: http://example.com/?x-amz-credential=abc??private_token=gitlab".into(),
            "invalid URL with double ?: http://example.com/?x-amz-credential=[MASKED]??private_token=[MASKED]".into(),
        ),
        (
            "split on &: http://example.com/|&|x-amz-cre|dential=abc".into(),
            "split on &: http://example.com/&x-amz-credential=[MASKED]".into(),
        ),
        (
            "split on ?: http://example.com/|?|x-amz-cre|dential=abc".into(),
            "split on ?: http://example.com/?x-amz-credential=[MASKED]".into(),
        ),
        (
            "split after ?: http://example.com/|?||x-amz-cre|dential=abc".into(),
            "split after ?: http://example.com/?x-amz-credential=[MASKED]".into(),
        ),
        (
            "interweaved tokens: ?|one ?x-amz-credential=abc two=three ?|one=two &token &x-amz-credential=abc =token ?=".into(),
            "interweaved tokens: ?one ?x-amz-credential=[MASKED] two=three ?one=two &token &x-amz-credential=[MASKED] =token ?=".into(),
        ),
        ("terminated before mask: ?x".into(), "terminated before mask: ?x".into()),
        ("terminated before mask: ?x|-".into(), "terminated before mask: ?x-".into()),
        ("terminated before mask: ?x-|".into(), "terminated before mask: ?x-".into()),
        (
            "terminated before mask: ?x-amz-credential=".into(),
            "terminated before mask: ?x-amz-credential=[MASKED]".into(),
        ),
        (
            "terminated before mask: ?x-amz-credential=|".into(),
            "terminated before mask: ?x-amz-credential=[MASKED]".into(),
        ),
    ];
    for (input, expected) in table {
        let mut m = Masker::from_parts(Vec::new(), Vec::new(), ONLY_URL);
        out.push(Outcome {
            table: "urlsanitizer_test.go",
            name: input.chars().take(60).collect(),
            got: writes(&mut m, &input),
            expected,
        });
    }
}

/// Upstream's test clock: 2021-01-01T00:00:00.020010Z, one hour later at each reading.
fn hourly_clock() -> Clock {
    let mut t = Utc
        .with_ymd_and_hms(2021, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid date")
        + Duration::microseconds(20010);
    Box::new(move || {
        t += Duration::hours(1);
        t.into()
    })
}

fn stamp(stream: StreamId, with_time: bool, clock: &mut Clock, parts: &[&[u8]]) -> String {
    let mut ts = Timestamper::new(stream, with_time);
    let mut out = Vec::new();
    for p in parts {
        ts.write(p, clock, &mut out);
    }
    ts.close(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

const FF_E: StreamId = StreamId {
    number: 255,
    kind: b'E',
};

fn timestamper_cases(out: &mut Vec<Outcome>) {
    let mut lines: Vec<&[u8]> = vec![
        b"PREFIX This is the beginning of a new line\n",
        b"PREFIX This is a split ",
        b"up ",
        b"line\n",
        b"PREFIX Progress bar: ",
    ];
    lines.extend(std::iter::repeat_n(&b".\r"[..], 10));
    lines.extend([
        &b"Done.\r\n"[..],
        b"PREFIX Another windows new-line\r\n",
        b"PREFIX multiple\nnew\nlines\nin\none\n",
        b"\nstart",
        b"\nend\n",
        b"PREFIX Eat carriages\r\r\r\r\r\r\r\n",
        b"PREFIX This is across\ntwo lines\n",
        b"PREFIX The end",
    ]);
    let mut bodies = vec![
        " PREFIX This is the beginning of a new line\n".to_string(),
        " PREFIX This is a split up line\n".into(),
        " PREFIX Progress bar: .\r\n".into(),
    ];
    bodies.extend(std::iter::repeat_n("+.\r\n".to_string(), 9));
    bodies.extend(
        [
            "+Done.\r\n",
            " PREFIX Another windows new-line\r\n",
            " PREFIX multiple\n",
            " new\n",
            " lines\n",
            " in\n",
            " one\n",
            " \n",
            " start\n",
            " end\n",
            " PREFIX Eat carriages\r\r\r\r\r\r\r\n",
            " PREFIX This is across\n",
            " two lines\n",
            " PREFIX The end\n",
        ]
        .map(String::from),
    );
    let mut t = Utc
        .with_ymd_and_hms(2021, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid date")
        + Duration::microseconds(20010);
    let mut with_time = String::new();
    for b in &bodies {
        t += Duration::hours(1);
        with_time.push_str(&format!("{} ffE{b}", t.format("%Y-%m-%dT%H:%M:%S%.6fZ")));
    }
    // Upstream runs this under three local time zones: the prefix is UTC whatever the zone.
    // This test binary has a single test, so setting TZ races with nothing; chrono reads a
    // changed TZ at most once a second, hence the wait (a zone-dependent prefix would show).
    for tz in ["UTC", "Africa/Cairo", "US/Alaska"] {
        std::env::set_var("TZ", tz);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        out.push(Outcome {
            table: "timestamper_test.go",
            name: format!("TestWithTimestamps/{tz}"),
            got: stamp(FF_E, true, &mut hourly_clock(), &lines),
            expected: with_time.clone(),
        });
    }
    std::env::remove_var("TZ");
    out.push(Outcome {
        table: "timestamper_test.go",
        name: "TestWithoutTimestamp".into(),
        got: stamp(FF_E, false, &mut hourly_clock(), &lines),
        expected: bodies.iter().map(|b| format!("ffE{b}")).collect(),
    });

    let dots = vec![b'.'; HOLD];
    let more = vec![b'.'; HOLD + 1];
    let forced: Vec<&[u8]> = vec![
        b"PREFIX This is the beginning of a new line\n",
        b"We have no new line character in this write",
        b"... The line is now flushed.\n",
        b"large continuous write incoming",
        &dots,
        &more,
        b"ended\n",
    ];
    out.push(Outcome {
        table: "timestamper_test.go",
        name: "TestForcedFlush".into(),
        got: stamp(FF_E, true, &mut hourly_clock(), &forced),
        expected: format!(
            "2021-01-01T01:00:00.020010Z ffE PREFIX This is the beginning of a new line\n\
             2021-01-01T02:00:00.020010Z ffE We have no new line character in this write... The line is now flushed.\n\
             2021-01-01T03:00:00.020010Z ffE large continuous write incoming{}\n\
             2021-01-01T04:00:00.020010Z ffE+{}\n\
             2021-01-01T05:00:00.020010Z ffE+ended\n",
            ".".repeat(HOLD),
            ".".repeat(HOLD + 1)
        ),
    });
    out.push(Outcome {
        table: "timestamper_test.go",
        name: "TestCarriageReturnDoesNotSplitWrite".into(),
        got: stamp(
            StreamId {
                number: 1,
                kind: b'O',
            },
            true,
            &mut hourly_clock(),
            &[
                b"section_start:123:foo\r\x1b[0K",
                b"section_end:123:foo\r\x1b[0K",
            ],
        ),
        expected: "2021-01-01T01:00:00.020010Z 01O section_start:123:foo\r\x1b[0K\n\
                   2021-01-01T02:00:00.020010Z 01O+section_end:123:foo\r\x1b[0K\n"
            .into(),
    });

    let mut clock = hourly_clock();
    let mut ts = Timestamper::new(FF_E, true);
    let mut first = Vec::new();
    ts.write(b"no trailing newline", &mut clock, &mut first);
    ts.close(&mut first);
    let mut second = Vec::new();
    ts.close(&mut second);
    out.push(Outcome {
        table: "timestamper_test.go",
        name: "TestCloseIdempotent".into(),
        got: format!(
            "{}|{}",
            String::from_utf8_lossy(&first),
            String::from_utf8_lossy(&second)
        ),
        expected: "2021-01-01T01:00:00.020010Z ffE no trailing newline\n|".into(),
    });

    let base: DateTime<Utc> = Utc
        .with_ymd_and_hms(2021, 6, 15, 12, 34, 56)
        .single()
        .expect("a valid date");
    let offsets = [0i64, 1, 123, 1_000_000, 1_000_007];
    let mut i = 0;
    let mut clock: Clock = Box::new(move || {
        let t = base + Duration::microseconds(offsets[i.min(offsets.len() - 1)]);
        i += 1;
        t.into()
    });
    let five: Vec<&[u8]> = vec![b"line\n"; 5];
    out.push(Outcome {
        table: "timestamper_test.go",
        name: "TestTimestampSecondsCache".into(),
        got: stamp(
            StreamId {
                number: 1,
                kind: b'E',
            },
            true,
            &mut clock,
            &five,
        ),
        expected: "2021-06-15T12:34:56.000000Z 01E line\n\
                   2021-06-15T12:34:56.000001Z 01E line\n\
                   2021-06-15T12:34:56.000123Z 01E line\n\
                   2021-06-15T12:34:57.000000Z 01E line\n\
                   2021-06-15T12:34:57.000007Z 01E line\n"
            .into(),
    });
}

fn plain() -> Masker {
    Masker::from_parts(
        Vec::new(),
        Vec::new(),
        Filters {
            phrases: false,
            url: false,
            tokens: false,
        },
    )
}

/// Upstream's limit notice, as its tests spell it.
fn notice(n: usize) -> String {
    format!(
        "\n\x1b[33;1mJob's log exceeded limit of {n} bytes.\nJob execution will continue but no more output will be collected.\x1b[0;m\n"
    )
}

fn limit_cases(out: &mut Vec<Outcome>) {
    let table: &[(&str, &str, usize, String, &str)] = &[
        (
            "TestTraceLimit",
            "This is the long message",
            10,
            format!("This is th{}", notice(10)),
            "crc32:295921ca",
        ),
        (
            "1-byte UTF-8 characters (ASCII text)",
            "0123456789",
            10,
            format!("0123456789{}", notice(10)),
            "crc32:d4b99d81",
        ),
        (
            "2-byte UTF-8 characters",
            "ǲ",
            5,
            format!("ǲǲ{}", notice(5)),
            "crc32:318d2180",
        ),
        (
            "2-byte UTF-8 characters on even boundary",
            "ǲ",
            6,
            format!("ǲǲǲ{}", notice(6)),
            "crc32:8c2a1eda",
        ),
        (
            "3-byte UTF-8 characters",
            "─",
            20,
            format!("──────{}", notice(20)),
            "crc32:f187099c",
        ),
        (
            "3-byte UTF-8 characters with a limit of 1 byte",
            "─",
            1,
            notice(1),
            "crc32:9e261b5f",
        ),
        (
            "4-byte UTF-8 characters",
            "🐤",
            23,
            format!("🐤🐤🐤🐤🐤{}", notice(23)),
            "crc32:10e32ecd",
        ),
        (
            "4-byte UTF-8 characters on even boundary",
            "🐤",
            24,
            format!("🐤🐤🐤🐤🐤🐤{}", notice(24)),
            "crc32:26e43372",
        ),
    ];
    for (name, message, limit, content, checksum) in table {
        let repeated = vec![message.as_bytes(); 100];
        out.push(Outcome {
            table: "buffer_test.go",
            name: name.to_string(),
            got: both_logs(*limit, &repeated),
            expected: format!("{content}|size {}|{checksum}", content.len()),
        });
    }

    let mut gitlab = LogBuffer::new(1 << 20);
    gitlab.write(b"hello a\xfeb a\xffb\n");
    gitlab.close();
    out.push(Outcome {
        table: "buffer_test.go",
        name: "TestFixupInvalidUTF8".into(),
        got: String::from_utf8(gitlab.bytes().to_vec())
            .unwrap_or_else(|e| format!("invalid UTF-8: {e}")),
        expected: "hello a\u{fffd}b a\u{fffd}b\n".into(),
    });

    // Upstream also returns an offset error; drover's PATCH loop only needs "no bytes".
    let mut gitlab = LogBuffer::new(1 << 20);
    gitlab.write(b"test");
    out.push(Outcome {
        table: "buffer_test.go",
        name: "TestReferenceBiggerOffsetThanWritten (bytes)".into(),
        got: format!("{:?}", gitlab.chunk(8, 10124)),
        expected: "[]".into(),
    });

    // network/trace_test.go: 1 KiB limit, "abcde" written 1024 times, all sent in one PATCH.
    let mut gitlab = LogBuffer::new(1024);
    for _ in 0..1024 {
        gitlab.write(b"abcde");
    }
    gitlab.close();
    let sent =
        String::from_utf8_lossy(gitlab.chunk(0, drover::gitlab::trace::MAX_CHUNK)).into_owned();
    let notice = notice(1024);
    out.push(Outcome {
        table: "network/trace_test.go",
        name: "TestJobOutputLimit".into(),
        got: format!(
            "{}|{}|{}|{}",
            sent.contains("abcde"),
            sent.contains(&notice),
            sent.len(),
            gitlab.output().bytesize
        ),
        expected: format!("true|true|{0}|{0}", 1024 + notice.len()),
    });
}

/// The log `writes` leave, through both caps drover has: the executor's trace (its own
/// sink, `drover exec-job`) and the GitLab log buffer (`drover run`): content, size and
/// checksum, or both descriptions when they differ.
fn both_logs(limit: usize, writes: &[&[u8]]) -> String {
    let mut sink = MemorySink::default();
    let written = {
        let mut t = Trace::new(&mut sink, plain(), limit, false);
        for w in writes {
            t.write(w);
        }
        t.finish();
        t.written()
    };
    let bytes = sink.0.lock().map(|b| b.clone()).unwrap_or_default();
    let exec = format!(
        "{}|size {}|crc32:{:08x}",
        String::from_utf8_lossy(&bytes),
        written,
        crc32fast::hash(&bytes)
    );
    let mut gitlab = LogBuffer::new(limit);
    for w in writes {
        gitlab.write(w);
    }
    gitlab.close();
    let o = gitlab.output();
    let sent = format!(
        "{}|size {}|{}",
        String::from_utf8_lossy(gitlab.bytes()),
        o.bytesize,
        o.checksum
    );
    if exec == sent {
        exec
    } else {
        format!("exec-job: {exec} / GitLab: {sent}")
    }
}

/// Collects the messages of `tracing` events at each level.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Msg(String);
        impl tracing::field::Visit for Msg {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        let mut m = Msg(String::new());
        e.record(&mut m);
        if let Ok(mut v) = self.0.lock() {
            v.push((*e.metadata().level(), m.0));
        }
    }
}

fn build_logger_cases(out: &mut Vec<Outcome>) {
    use tracing_subscriber::layer::SubscriberExt;

    let run = |f: &dyn Fn(&mut Trace<'_>)| {
        let events = Events::default();
        let subscriber = tracing_subscriber::registry().with(events.clone());
        let mut sink = MemorySink::default();
        tracing::subscriber::with_default(subscriber, || {
            let mut t = Trace::new(&mut sink, Masker::new::<&str>(&[], &[]), 1 << 20, false);
            f(&mut t);
            t.finish();
        });
        let events = events.0.lock().map(|v| v.clone()).unwrap_or_default();
        (sink.text(), events)
    };

    let (log, events) = run(&|t| t.error("Fatal: Get http://localhost/?id=123"));
    let runner_log = events
        .iter()
        .any(|(l, m)| *l == tracing::Level::ERROR && m.contains("Get http://localhost/?id=123"));
    out.push(Outcome {
        table: "build_logger_test.go",
        name: "TestLogLineWithoutSecret".into(),
        got: format!(
            "{}|{runner_log}",
            log.contains("Get http://localhost/?id=123")
        ),
        expected: "true|true".into(),
    });

    let url = "Get http://localhost/?id=123&X-Amz-Signature=abcd1234&private_token=abcd1234";
    let (log, events) = run(&|t| t.error(url));
    out.push(Outcome {
        table: "build_logger_test.go",
        name: "TestLogLineWithSecret (job log)".into(),
        got: log
            .contains(
                "Get http://localhost/?id=123&X-Amz-Signature=[MASKED]&private_token=[MASKED]",
            )
            .to_string(),
        expected: "true".into(),
    });
    // What drover's own log prints: the event's message through its redaction layer.
    let printed: Vec<String> = events
        .iter()
        .map(|(_, m)| drover::secrets::redact(m))
        .collect();
    out.push(Outcome {
        table: "build_logger_test.go",
        name: "TestLogLineWithSecret (runner log)".into(),
        got: printed.iter().any(|m| m.contains(url)).to_string(),
        expected: "true".into(),
    });

    let (log, _) = run(&|t| {
        t.info("print");
        t.notice("info");
        t.warning("warning");
        t.error("softerror");
        t.error("error");
    });
    let want = [
        "print\x1b[0;m\n",
        "info\x1b[0;m\n",
        "WARNING: warning\x1b[0;m\n",
        "ERROR: softerror\x1b[0;m\n",
        "ERROR: error\x1b[0;m\n",
    ];
    out.push(Outcome {
        table: "build_logger_test.go",
        name: "TestLogPrinters/with entry".into(),
        got: want.iter().filter(|w| log.contains(*w)).count().to_string(),
        expected: want.len().to_string(),
    });
}

fn section_cases(out: &mut Vec<Outcome>) {
    for (name, sections, fails) in [
        ("Success", true, false),
        ("Failure", true, true),
        ("SkipMetricsSuccess", false, false),
        ("SkipMetricsFailure", false, true),
    ] {
        let mut sink = MemorySink::default();
        {
            let mut t = Trace::new(&mut sink, Masker::new::<&str>(&[], &[]), 1 << 20, sections);
            t.section_start(name, "running");
            if fails {
                t.error("failing test");
            }
            t.section_end(name);
            t.finish();
        }
        let log = sink.text();
        let found = ["section_start:", "section_end:", &format!(":{name}\r")]
            .iter()
            .filter(|s| log.contains(*s))
            .count();
        out.push(Outcome {
            table: "build_section_test.go",
            name: name.into(),
            got: found.to_string(),
            expected: if sections { "3" } else { "0" }.into(),
        });
    }
}

#[test]
fn trace_conformance() {
    let mut all = Vec::new();
    masker_cases(&mut all);
    token_cases(&mut all);
    url_cases(&mut all);
    timestamper_cases(&mut all);
    limit_cases(&mut all);
    build_logger_cases(&mut all);
    section_cases(&mut all);

    let mut agree = 0;
    let mut deliberate = 0;
    let mut failures = Vec::new();
    for o in &all {
        let listed = DELIBERATE
            .iter()
            .any(|(t, n)| *t == o.table && *n == o.name);
        if o.got == o.expected {
            agree += 1;
            if listed {
                failures.push(format!(
                    "{} / {}: listed as a deliberate difference but agrees; update DELIBERATE",
                    o.table, o.name
                ));
            }
        } else if listed {
            deliberate += 1;
        } else {
            failures.push(format!(
                "{} / {}:\n  expected {:?}\n  got      {:?}",
                o.table, o.name, o.expected, o.got
            ));
        }
    }
    println!(
        "trace conformance: {} cases, {agree} agree, {deliberate} deliberate differences",
        all.len()
    );
    let mut files: Vec<&str> = all.iter().map(|o| o.table).collect();
    files.dedup();
    for f in files {
        let of_file = all.iter().filter(|o| o.table == f);
        let agreeing = of_file.clone().filter(|o| o.got == o.expected).count();
        println!(
            "  {f}: {} cases, {agreeing} agree, {} deliberate",
            of_file.clone().count(),
            of_file.count() - agreeing
        );
    }
    for (file, test, why) in NOT_APPLICABLE {
        println!("  not applicable: {file} {test}: {why}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
