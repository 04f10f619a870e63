//! Malformed config files give a one-screen error with `file:line:col`, the offending line and,
//! where there is one, a hint; never a panic. Fixtures live in fixtures/configs/malformed.

use std::path::PathBuf;

use drover::config::{load_file, load_str, ConfigError};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/configs/malformed")
        .join(name)
}

/// Loads a fixture that must fail; checks the first error's line, column and message, and
/// that the rendered message is one screen with the position and the source line.
fn expect_error(name: &str, line: usize, column: usize, fragment: &str) -> ConfigError {
    let path = fixture(name);
    let err = match load_file(&path) {
        Ok(_) => panic!("{name} must not load"),
        Err(e) => e,
    };
    let errors = err.errors();
    let first = errors
        .first()
        .unwrap_or_else(|| panic!("{name}: no diagnostics"));
    assert!(
        first.message.contains(fragment),
        "{name}: message {:?} lacks {fragment:?}",
        first.message
    );
    assert_eq!(
        (first.line, first.column),
        (line, column),
        "{name}: position of {:?}",
        first.message
    );
    let shown = err.to_string();
    let origin = path.display().to_string();
    assert!(
        shown.starts_with(&format!("{origin}:{line}:{column}: error: ")),
        "{name}: display starts with file:line:col, got:\n{shown}"
    );
    assert!(
        shown.lines().count() <= 40,
        "{name}: more than one screen:\n{shown}"
    );
    err
}

#[test]
fn unclosed_string() {
    let e = expect_error("syntax_unclosed_string.toml", 4, 17, "invalid TOML");
    assert!(matches!(e, ConfigError::Syntax { .. }));
    assert!(
        e.to_string().contains("name = \"broken"),
        "shows the source line"
    );
}

#[test]
fn missing_value() {
    let e = expect_error("syntax_missing_value.toml", 1, 13, "invalid TOML");
    assert!(e.to_string().contains("hint:"));
}

#[test]
fn duplicate_key() {
    expect_error("syntax_duplicate_key.toml", 2, 1, "duplicate key");
}

#[test]
fn unquoted_string() {
    expect_error("syntax_bare_string.toml", 2, 14, "quoted");
}

#[test]
fn idle_count_as_string() {
    let e = expect_error(
        "type_idlecount_string.toml",
        9,
        17,
        "runners[0] \"first\", key machine.IdleCount: expected an integer, found string \"2\"",
    );
    assert!(e
        .to_string()
        .contains("hint: remove the quotes: IdleCount = 2"));
}

#[test]
fn periods_as_string() {
    let e = expect_error(
        "type_periods_string.toml",
        14,
        17,
        "machine.autoscaling[0].Periods: expected an array of strings",
    );
    assert!(
        e.to_string()
            .contains("Periods = [\"* * 9-17 * * mon-fri *\"]"),
        "hint shows the list form"
    );
}

#[test]
fn autoscaling_with_single_brackets() {
    let e = expect_error(
        "type_autoscaling_single_brackets.toml",
        13,
        5,
        "expected an array of tables",
    );
    assert!(e.to_string().contains("double brackets"));
}

#[test]
fn float_where_integer_expected() {
    expect_error(
        "type_concurrent_float.toml",
        1,
        14,
        "key concurrent: expected an integer, found float 2.5",
    );
}

#[test]
fn bool_as_string() {
    expect_error(
        "type_bool_string.toml",
        14,
        18,
        "docker.privileged: expected a boolean",
    );
}

#[test]
fn bad_cron_points_at_the_entry() {
    expect_error("bad_cron.toml", 14, 44, "Periods[1] = \"* * 25 * * * *\"");
}

#[test]
fn cron_with_too_few_fields() {
    let e = expect_error(
        "bad_cron_missing_fields.toml",
        14,
        18,
        "invalid autoscaling period",
    );
    assert!(e.to_string().contains("7 fields"));
}

#[test]
fn unknown_time_zone() {
    expect_error("unknown_timezone.toml", 15, 18, "key machine.autoscaling[0].Timezone: invalid autoscaling period: unknown time zone \"Europe/Amsterdan\"");
}

#[test]
fn machine_option_with_name_needs_percent_s() {
    expect_error("missing_percent_s.toml", 13, 49, "runners[0] \"first\", key machine.MachineOptionsWithName[1]: machine option with name \"google-disk-name=disk\" must contain %s, where the machine name goes");
}

#[test]
fn integer_out_of_range() {
    expect_error(
        "int_out_of_range.toml",
        10,
        16,
        "integer 9223372036854775808 is out of range",
    );
}

#[test]
fn integer_too_big_for_a_float() {
    expect_error(
        "int_too_big_for_float.toml",
        10,
        23,
        "cannot be represented exactly as a float",
    );
}

#[test]
fn bad_duration() {
    expect_error(
        "bad_duration.toml",
        1,
        22,
        "key connection_max_age: unknown unit",
    );
}

#[test]
fn bad_datetime() {
    expect_error("bad_datetime.toml", 7, 23, "token_obtained_at");
}

#[test]
fn error_in_second_runner_names_it() {
    expect_error(
        "second_runner_error.toml",
        19,
        11,
        "runners[1] \"second\", key limit: expected an integer",
    );
}

#[test]
fn all_errors_are_collected_but_display_fits_a_screen() {
    let e = expect_error("many_errors.toml", 1, 14, "key concurrent");
    assert_eq!(e.errors().len(), 7);
    let lines: Vec<_> = e.errors().iter().map(|d| d.line).collect();
    assert_eq!(lines, [1, 2, 3, 4, 5, 6, 7]);
    assert!(e.to_string().contains("and 2 more errors"));
}

#[test]
fn latin1_bytes() {
    let e = expect_error(
        "non_utf8_latin1.toml",
        3,
        14,
        "invalid UTF-8: byte 0xE9 at byte offset 40",
    );
    assert!(matches!(e, ConfigError::Encoding { .. }));
    assert!(e.to_string().contains("save the file as UTF-8"));
}

#[test]
fn utf16_files() {
    for name in ["utf16le_bom.toml", "utf16be_bom.toml", "utf16le_nobom.toml"] {
        let e = expect_error(name, 1, 1, "UTF-16");
        assert!(e.to_string().contains("save the file as UTF-8"));
    }
}

#[test]
fn missing_file_is_an_io_error() {
    let e = match load_file(&fixture("does-not-exist.toml")) {
        Ok(_) => panic!("must fail"),
        Err(e) => e,
    };
    assert!(matches!(e, ConfigError::Io { .. }));
    assert!(e.to_string().contains("-c PATH"));
}

#[test]
fn truncated_inputs_never_panic() {
    // Every prefix of every fixture (and of a large valid file) either loads or errors.
    let mut texts: Vec<Vec<u8>> = std::fs::read_dir(fixture(""))
        .expect("fixtures")
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path()).ok())
        .collect();
    texts.push(include_bytes!("../config.toml.example").to_vec());
    for text in texts {
        for end in 0..=text.len() {
            let _ = load_str(&text[..end], "prefix.toml");
        }
    }
}

#[test]
fn a_seven_field_period_error_gets_no_field_layout_hint() {
    let text = "[[runners]]\nname = \"m\"\nexecutor = \"docker+machine\"\n[runners.machine]\nMachineName = \"a-%s\"\n[[runners.machine.autoscaling]]\nPeriods = [\"* * 22-6 * * * *\"]\n";
    let e = drover::config::load_str(text, "inline.toml").unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("write `22-23,0-6`"), "{shown}");
    assert!(!shown.contains("periods use 7 fields"), "{shown}");
}

/// A runner whose `[runners.docker]` sets `key = value` and whose MachineName is `name`.
fn runner_with(key: &str, value: &str, name: &str) -> String {
    let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
    let (value, name) = (quote(value), quote(name));
    format!(
        "[[runners]]\nname = \"r\"\nurl = \"https://gitlab.example.com/\"\ntoken = \"glrt-x\"\n\
         executor = \"docker+machine\"\n[runners.docker]\nimage = \"alpine\"\n{key} = {value}\n\
         [runners.machine]\nMachineDriver = \"none\"\nMachineName = {name}\n"
    )
}

/// The first error of a text that must not load, with its position.
fn first_error(text: &str) -> (usize, usize, String) {
    match load_str(text, "t.toml") {
        Ok(_) => panic!("must not load:\n{text}"),
        Err(e) => {
            let d = e.errors().into_iter().next().expect("one error");
            (d.line, d.column, d.message)
        }
    }
}

#[test]
fn machine_names_no_machine_can_hold_are_refused_at_their_line() {
    for name in [
        "x\n%s",
        "x\r%s",
        "x\t%s",
        "a\u{0}%s",
        "a\u{7f}%s",
        "auto_%s",
        "auto %s",
        "a/%s",
        "auto-%d",
        "é-%s",
    ] {
        let (line, column, message) = first_error(&runner_with("memory", "1g", name));
        assert_eq!((line, column), (11, 15), "{name:?}: {message}");
        assert!(
            message.contains("MachineName") && message.contains("cannot name a machine"),
            "{name:?}: {message}"
        );
    }
    for ok in ["auto-%s", "runner.%s.example", "Auto-%v", "x-%s-100%%"] {
        let text = runner_with("memory", "1g", ok);
        if ok.contains("%%") {
            // `%%` is a literal `%`, which no machine name may hold.
            assert!(load_str(&text, "t.toml").is_err(), "{ok:?}");
        } else {
            assert!(load_str(&text, "t.toml").is_ok(), "{ok:?} must load");
        }
    }
}

#[test]
fn docker_sizes_and_cpus_that_mean_nothing_are_load_errors() {
    for (key, value) in [
        ("memory", "1e400g"),
        ("memory", "-5m"),
        ("memory", "NaN"),
        ("memory", "lots"),
        ("memory_swap", "-2"),
        ("memory_reservation", "5x"),
        ("service_memory", "inf"),
        ("cpus", "NaN"),
        ("cpus", "-1"),
        ("cpus", "1e400"),
        ("cpus", "0"),
        ("service_cpus", "1.0000000001"),
        ("cpuset_cpus", "3-1"),
        ("cpuset_mems", "a"),
    ] {
        let (line, column, message) = first_error(&runner_with(key, value, "auto-%s"));
        assert_eq!(line, 8, "{key} = {value:?}: {message}");
        assert_eq!(
            column,
            key.chars().count() + 4,
            "{key} = {value:?}: {message}"
        );
        assert!(
            message.contains(&format!("key docker.{key}")) && message.contains(value),
            "{key} = {value:?}: {message}"
        );
    }
    for (key, value) in [
        ("memory", "512m"),
        ("memory", "1.5g"),
        ("memory_swap", "-1"),
        ("memory", "2 GiB"),
        ("cpus", "1.5"),
        ("cpuset_cpus", "0-3,5"),
    ] {
        let text = runner_with(key, value, "auto-%s");
        assert!(
            load_str(&text, "t.toml").is_ok(),
            "{key} = {value:?} must load"
        );
    }
}
