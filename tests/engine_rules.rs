//! Table tests for the idle-strategy arithmetic (spec §4) and names/filters (spec §5).

use chrono::{TimeDelta, TimeZone, Utc};
use drover::engine::naming::{
    machine_filter, machine_name_warning, matches_filter, name_suffix, new_machine_name, rfc1123,
    short_token,
};
use drover::engine::policy::{
    can_create, composed, factor_target, idle_time_elapsed, should_remove, MachineFacts,
    RemoveVerdict,
};
use drover::engine::{zero_time, Counts, IdleSettings, Limits, MachineState};

fn c(idle: i64, creating: i64, acquired: i64, used: i64, removing: i64, stuck: i64) -> Counts {
    Counts {
        acquired,
        creating,
        idle,
        used,
        removing,
        stuck_on_removing: stuck,
    }
}

fn s(ic: i64, min: i64, f: f64, it: i64) -> IdleSettings {
    IdleSettings {
        idle_count: ic,
        idle_count_min: min,
        idle_scale_factor: f,
        idle_time: it,
        active_section: None,
    }
}

fn l(limit: i64, max_builds: i64, growth: i64) -> Limits {
    Limits {
        limit,
        max_builds,
        max_growth_rate: growth,
    }
}

#[test]
fn counters_available_in_use_total() {
    let k = c(1, 2, 3, 4, 5, 6);
    assert_eq!(k.available(), 6);
    assert_eq!(k.in_use(), 4);
    assert_eq!(k.total(), 21);
    let mut k = Counts::default();
    k.add(MachineState::Removing, 2);
    k.add(MachineState::Removing, 3);
    assert_eq!((k.removing, k.stuck_on_removing), (1, 1));
}

#[test]
fn can_create_table() {
    // (limits, idle, counts, on_demand, expected, why)
    let cases = [
        (
            l(0, 0, 0),
            s(2, 0, 0.0, 0),
            c(1, 0, 0, 0, 0, 0),
            false,
            true,
            "1 available < IdleCount 2",
        ),
        (
            l(0, 0, 0),
            s(2, 0, 0.0, 0),
            c(1, 1, 0, 0, 0, 0),
            false,
            false,
            "creating counts as available",
        ),
        (
            l(0, 0, 0),
            s(2, 0, 0.0, 0),
            c(0, 0, 2, 0, 0, 0),
            false,
            false,
            "acquired counts as available",
        ),
        (
            l(3, 0, 0),
            s(9, 0, 0.0, 0),
            c(0, 0, 0, 1, 1, 1),
            false,
            false,
            "removing and stuck use limit slots",
        ),
        (
            l(4, 0, 0),
            s(9, 0, 0.0, 0),
            c(0, 0, 0, 1, 1, 1),
            false,
            true,
            "below limit",
        ),
        (
            l(0, 0, 1),
            s(9, 0, 0.0, 0),
            c(0, 1, 0, 0, 0, 0),
            false,
            false,
            "growth exceeded",
        ),
        (
            l(0, 0, -1),
            s(9, 0, 0.0, 0),
            c(0, 5, 0, 0, 0, 0),
            false,
            true,
            "negative growth is unlimited for the strategy",
        ),
        (
            l(0, 0, 0),
            s(0, 0, 0.0, 0),
            c(0, 0, 0, 0, 0, 0),
            true,
            true,
            "on demand with IdleCount 0",
        ),
        (
            l(0, 0, 0),
            s(-1, 0, 0.0, 0),
            c(0, 0, 0, 0, 0, 0),
            true,
            true,
            "on demand with IdleCount < 0",
        ),
        (
            l(0, 0, 0),
            s(0, 0, 0.0, 0),
            c(0, 0, 0, 0, 0, 0),
            false,
            false,
            "IdleCount 0 never pre-creates",
        ),
        (
            l(0, 0, 1),
            s(0, 0, 0.0, 0),
            c(0, 1, 0, 0, 0, 0),
            true,
            false,
            "'MaxMachinesGrowth not reached' is still false: growth",
        ),
        (
            l(0, 0, 2),
            s(0, 0, 0.0, 0),
            c(0, 1, 0, 0, 0, 0),
            false,
            false,
            "IC 0 and one Creating: Available >= 0",
        ),
        (
            l(1, 0, 0),
            s(0, 0, 0.0, 0),
            c(0, 0, 0, 1, 0, 0),
            true,
            false,
            "on demand still respects limit",
        ),
        // Scale factor: IdleCount is a hard cap; IdleCountMin delays the factor.
        (
            l(0, 0, 0),
            s(10, 0, 0.5, 0),
            c(1, 0, 0, 4, 0, 0),
            false,
            true,
            "1 < min' 1? no: 1 >= 1, factor 2 > 1",
        ),
        (
            l(0, 0, 0),
            s(10, 0, 0.5, 0),
            c(2, 0, 0, 4, 0, 0),
            false,
            false,
            "2 >= trunc(4 x 0.5)",
        ),
        (
            l(0, 0, 0),
            s(10, 0, 0.5, 0),
            c(0, 0, 0, 0, 0, 0),
            false,
            true,
            "min forced to 1 with a factor",
        ),
        (
            l(0, 0, 0),
            s(10, 3, 0.5, 0),
            c(2, 0, 0, 0, 0, 0),
            false,
            true,
            "IdleCountMin 3 not fulfilled",
        ),
        (
            l(0, 0, 0),
            s(2, 5, 1.0, 0),
            c(2, 0, 0, 9, 0, 0),
            false,
            false,
            "IdleCount caps above IdleCountMin",
        ),
        (
            l(0, 0, 0),
            s(10, 0, 1.5, 0),
            c(4, 0, 0, 3, 0, 0),
            false,
            false,
            "3 x 1.5 = 4.5 truncates to 4",
        ),
        (
            l(0, 0, 0),
            s(10, 0, 1.5, 0),
            c(3, 0, 0, 3, 0, 0),
            false,
            true,
            "3 < 4",
        ),
    ];
    for (limits, idle, counts, on_demand, want, why) in cases {
        assert_eq!(
            can_create(&limits, &idle, &counts, on_demand),
            want,
            "{why}"
        );
    }
}

#[test]
fn factor_truncates_toward_zero() {
    assert_eq!(factor_target(&s(0, 0, 1.5, 0), &c(0, 0, 0, 3, 0, 0)), 4);
    assert_eq!(factor_target(&s(0, 0, 0.3, 0), &c(0, 0, 0, 3, 0, 0)), 0);
    assert!(composed(&s(5, 0, 0.3, 0), &c(1, 0, 0, 3, 0, 0)));
}

#[test]
fn should_remove_table() {
    let now = Utc.with_ymd_and_hms(2026, 11, 20, 10, 0, 0).unwrap();
    let ago = |secs: i64| now - TimeDelta::seconds(secs);
    let m = |state, used_count, used| MachineFacts {
        state,
        used_count,
        used,
    };
    use MachineState::*;
    use RemoveVerdict::*;
    let cases = [
        (
            m(Used, 9, ago(9999)),
            l(1, 1, 0),
            s(0, 0, 0.0, 0),
            c(5, 0, 0, 0, 0, 0),
            None,
            "not Idle: keep",
        ),
        (
            m(Acquired, 9, ago(9999)),
            l(1, 1, 0),
            s(0, 0, 0.0, 0),
            c(5, 0, 0, 0, 0, 0),
            None,
            "Acquired: keep",
        ),
        (
            m(Idle, 3, now),
            l(1, 3, 0),
            s(0, 0, 0.0, 0),
            c(5, 0, 0, 0, 0, 0),
            Some(TooManyBuilds),
            "MaxBuilds first",
        ),
        (
            m(Idle, 1, now),
            l(1, 3, 0),
            s(9, 0, 0.0, 9999),
            c(0, 0, 0, 1, 0, 0),
            Some(TooManyMachines),
            "limit ignores IdleTime",
        ),
        (
            m(Idle, 1, now),
            l(2, 0, 0),
            s(9, 0, 0.0, 9999),
            c(0, 0, 0, 1, 0, 0),
            None,
            "below limit",
        ),
        (
            m(Idle, 1, ago(61)),
            l(0, 0, 0),
            s(1, 0, 0.0, 60),
            c(1, 0, 0, 0, 0, 0),
            Some(TooManyIdleMachines),
            "past IdleTime, enough idle",
        ),
        (
            m(Idle, 1, ago(60)),
            l(0, 0, 0),
            s(1, 0, 0.0, 60),
            c(1, 0, 0, 0, 0, 0),
            None,
            "exactly IdleTime: keep",
        ),
        (
            m(Idle, 1, ago(61)),
            l(0, 0, 0),
            s(2, 0, 0.0, 60),
            c(1, 0, 0, 0, 0, 0),
            None,
            "not enough idle before it",
        ),
        (
            m(Idle, 1, ago(1)),
            l(0, 0, 0),
            s(0, 0, 0.0, 0),
            c(0, 0, 0, 0, 0, 0),
            Some(TooManyIdleMachines),
            "IdleTime 0: any elapsed time",
        ),
        (
            m(Idle, 1, now),
            l(0, 0, 0),
            s(0, 0, 0.0, 0),
            c(0, 0, 0, 0, 0, 0),
            None,
            "IdleTime 0, no time elapsed",
        ),
        (
            m(Idle, 0, zero_time()),
            l(0, 0, 0),
            s(0, 0, 0.0, 3600),
            c(0, 0, 0, 0, 0, 0),
            Some(TooManyIdleMachines),
            "never used: the zero time",
        ),
        (
            m(Idle, 1, ago(99)),
            l(0, 0, 0),
            s(5, 1, 1.0, 60),
            c(2, 0, 0, 2, 0, 0),
            Some(TooManyIdleMachines),
            "factor satisfied",
        ),
        (
            m(Idle, 1, ago(99)),
            l(0, 0, 0),
            s(5, 1, 1.0, 60),
            c(1, 0, 0, 2, 0, 0),
            None,
            "factor not satisfied",
        ),
    ];
    for (facts, limits, idle, counts, want, why) in cases {
        assert_eq!(
            should_remove(&facts, &limits, &idle, &counts, now),
            want,
            "{why}"
        );
    }
}

#[test]
fn idle_time_uses_go_duration_arithmetic() {
    let now = Utc.with_ymd_and_hms(2026, 11, 20, 10, 0, 0).unwrap();
    // Elapsed time from the zero time saturates at ~292 years, and IdleTime x 1 s wraps like
    // Go's Duration: 300 years wraps negative, so even no elapsed time is "past" it.
    assert!(idle_time_elapsed(now, zero_time(), 200 * 365 * 86400));
    assert!(!idle_time_elapsed(now, now, 200 * 365 * 86400));
    assert!(idle_time_elapsed(now, now, 300 * 365 * 86400));
    assert!(idle_time_elapsed(now, now, -1));
    assert!(idle_time_elapsed(now, zero_time(), 3600));
}

#[test]
fn short_token_table() {
    let cases = [
        ("glrt-t1_abcdefghijkl", "abcdefghi"),
        ("glrt-t2_abcdefghijkl", "abcdefghi"),
        ("glrt-abcdefghijkl", "abcdefghi"),
        ("t3_abcdefghijkl", "abcdefghi"),
        ("glrtr-abcdefghijkl", "abcdefghi"),
        ("glcbt-abcdefghijkl", "abcdefghi"),
        ("GR1348941abcdefghijkl", "abcdefghi"),
        ("GR134894zabcdefghijkl", "GR134894z"),
        ("xyz", "xyz"),
        ("", ""),
        ("glrt-t4_abcdefghijkl", "t4_abcdef"),
    ];
    for (token, want) in cases {
        assert_eq!(short_token(token), want, "{token}");
    }
}

/// Upstream's `ShortenToken` table (helpers/shorten_token_test.go), case for case, plus the
/// orders its three strips imply, with tokens of our own.
#[test]
fn short_token_conformance() {
    let cases = [
        // no prefix
        ("brief", "brief"),
        ("averyverylongtoken", "averyvery"),
        // a partition prefix alone: t1..t3 stripped, t4 kept
        ("t1_Xq7Wm-K2pLz9-rT", "Xq7Wm-K2p"),
        ("t2_Xq7Wm-K2pLz9-rT", "Xq7Wm-K2p"),
        ("t3_Xq7Wm-K2pLz9-rT", "Xq7Wm-K2p"),
        ("t4_Xq7Wm-K2pLz9-rT", "t4_Xq7Wm-"),
        // glrt-, with and without a partition
        ("glrt-Xq7Wm-K2pLz9-rT", "Xq7Wm-K2p"),
        ("glrt-t1_Xq7Wm-K2pLz9-rT", "Xq7Wm-K2p"),
        // glrtr-: its partition is not stripped
        ("glrtr-Xq7Wm-K2pLz9-rT", "Xq7Wm-K2p"),
        ("glrtr-t1_Xq7Wm-K2pLz9-rT", "t1_Xq7Wm-"),
        // glcbt-: its partition is not stripped
        ("glcbt-Xq7Wm-K2pLz9-rT", "Xq7Wm-K2p"),
        ("glcbt-t2_Xq7Wm-K2pLz9-rT", "t2_Xq7Wm-"),
        // old registration tokens: GR + 7 hex digits stripped, anything else kept
        ("GR1348941Pq83LmWz0kAa", "Pq83LmWz0"),
        ("GR134894-Pq83LmWz0kAa", "GR134894-"),
        // the strips run in order, one prefix each
        ("glrt-glcbt-Pq83LmWz0kAa", "Pq83LmWz0"),
        ("t1_GR1348941Pq83LmWz0kAa", "Pq83LmWz0"),
        ("glcbt-glrt-Pq83LmWz0kAa", "glrt-Pq83"),
        ("glrt-glrt-Pq83LmWz0kAa", "glrt-Pq83"),
    ];
    let agree = cases
        .iter()
        .filter(|(token, want)| short_token(token) == *want)
        .count();
    println!(
        "short-token conformance: {} cases, {agree} agree, 0 deliberate differences",
        cases.len()
    );
    for (token, want) in cases {
        assert_eq!(short_token(token), want, "{token}");
    }
}

#[test]
fn rfc1123_table() {
    let cases = [
        ("AbC_dEf", "abcdef"),
        ("--_a-b", "a-b"),
        ("a.b c", "abc"),
        ("___", ""),
        ("x-", "x-"),
    ];
    for (input, want) in cases {
        assert_eq!(rfc1123(input), want, "{input}");
    }
    assert_eq!(rfc1123(&"a".repeat(70)).len(), 63);
}

#[test]
fn filter_table() {
    assert_eq!(
        machine_filter("glrt-AB_CDEFGHIJK", "auto-%s"),
        "runner-abcdefgh-auto-%s"
    );
    // The 9-character cut happens before sanitising.
    assert_eq!(
        machine_filter("glrt-a_b_c_d_e_f", "x-%s"),
        "runner-abcde-x-%s"
    );
    assert_eq!(
        machine_filter("____", "%s"),
        "%s",
        "empty prefix: just MachineName"
    );
    assert_eq!(
        machine_filter("tok", "Auto-%s"),
        "runner-tok-Auto-%s",
        "not lower-cased"
    );
}

#[test]
fn match_table() {
    let cases = [
        (
            "runner-abc-auto-1700000000-0a1b2c3d",
            "runner-abc-auto-%s",
            true,
        ),
        ("runner-abc-auto-", "runner-abc-auto-%s", false),
        ("runner-abc-auto- ", "runner-abc-auto-%s", false),
        ("Runner-abc-auto-1", "runner-abc-auto-%s", false),
        ("auto-1-x", "auto-%s-suffix", true),
        ("auto-1", "auto-%s-suffix", true),
        ("anything", "%s", true),
        ("runner-abc-defgh-auto-1", "runner-abc-%s", true),
        ("runner-abc-auto-1", "runner-abc-auto", false),
        ("runner-abc-auto", "runner-abc-auto", false),
        ("100%-x", "100%%-%s", true),
        ("a b", "a %s", true),
        ("ab", "a %s", false),
        ("a", "a%d", false),
    ];
    for (name, filter, want) in cases {
        assert_eq!(matches_filter(name, filter), want, "{name} ~ {filter}");
        let prepared = drover::engine::naming::FilterMatcher::new(filter);
        assert_eq!(prepared.matches(name), want, "prepared: {name} ~ {filter}");
    }
}

#[test]
fn new_names_table() {
    let suffix = name_suffix(1_700_000_000, [0x0a, 0x1b, 0x2c, 0x3d]);
    assert_eq!(suffix, "1700000000-0a1b2c3d");
    // Every hex digit, both nibbles, and a time before 1970 (Go formats the sign).
    assert_eq!(
        name_suffix(1_700_000_000, [0xff, 0x00, 0x9e, 0x5f]),
        "1700000000-ff009e5f"
    );
    assert_eq!(name_suffix(-1, [0x12, 0x34, 0x56, 0x78]), "-1-12345678");
    assert_eq!(
        new_machine_name("runner-abc-auto-%s", &suffix),
        "runner-abc-auto-1700000000-0a1b2c3d"
    );
    assert_eq!(
        new_machine_name("auto", &suffix),
        "auto%!(EXTRA string=1700000000-0a1b2c3d)"
    );
    assert_eq!(new_machine_name("a-%s-%s", "x"), "a-x-%!s(MISSING)");
    assert_eq!(new_machine_name("100%%-%s", "x"), "100%-x");
}

#[test]
fn machine_name_warnings() {
    assert!(machine_name_warning("auto-%s").is_none());
    let w = machine_name_warning("auto").unwrap();
    assert!(w.contains("no %s"), "{w}");
    assert!(machine_name_warning("").is_some());
}
