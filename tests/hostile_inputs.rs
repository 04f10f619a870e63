//! Fuzz-style: random and hostile config text and provider plugin output go through the real
//! parsers (the config loader, the plugin client with a real child process) and must never
//! panic, hang or grow memory without bound. Failures print the input that caused them.

use std::io::Write;
use std::time::{Duration, Instant};

use drover::config::load_str;
use drover::provider::plugin::{Plugin, PluginCommand};
use drover::provider::{Call, Provider};
use proptest::prelude::*;

/// Resident memory of this process, in KiB (Linux).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Pieces of config text, well-formed and not: headers, keys of every kind, hostile values.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("[[runners]]\n".to_string()),
        Just("[runners.docker]\n".to_string()),
        Just("[runners.machine]\n".to_string()),
        Just("[[runners.machine.autoscaling]]\n".to_string()),
        Just("[[[[[[".to_string()),
        Just("]]]\n".to_string()),
        Just("executor = \"docker+machine\"\n".to_string()),
        Just("MachineName = \"x\\n%s\"\n".to_string()),
        Just("MachineName = \"auto-%s\"\n".to_string()),
        Just("memory = \"1e400g\"\n".to_string()),
        Just("cpus = \"NaN\"\n".to_string()),
        Just("cpuset_cpus = \"99999999999-0\"\n".to_string()),
        Just("IdleCount = 9223372036854775807\n".to_string()),
        Just("IdleCount = -9223372036854775808\n".to_string()),
        Just("IdleTime = 1e308\n".to_string()),
        Just("check_interval = \"9999999999h\"\n".to_string()),
        Just("Periods = [\"* * * * * * *\", \"99 99 99 99 99 99 99\"]\n".to_string()),
        Just("Timezone = \"../../../../dev/zero\"\n".to_string()),
        Just("log_level = \"\\u0000\"\n".to_string()),
        Just("a.b.c.d.e.f = { x = [ [ [ [ 1 ] ] ] ] }\n".to_string()),
        Just("\"\\uD800\" = 1\n".to_string()),
        Just("k = \"\"\"\n".to_string()),
        Just("\u{feff}\u{202e}\u{0}\r\n".to_string()),
        "[a-zA-Z_]{1,12} = [0-9]{1,25}\n",
        "[a-zA-Z_]{1,12} = \"[^\"\\\\]{0,40}\"\n",
        "[ -~]{0,60}\n",
        (1usize..200_000).prop_map(|n| format!("name = \"{}\"\n", "x".repeat(n))),
        (1usize..2_000).prop_map(|n| format!("v = {}{}\n", "[".repeat(n), "]".repeat(n))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The loader answers every text with a config or located errors: no panic, in bounded
    /// time, and errors carry a position inside the text.
    #[test]
    fn hostile_config_text_never_panics(parts in proptest::collection::vec(fragment(), 0..40)) {
        let text: String = parts.concat();
        let lines = text.lines().count().max(1);
        let start = Instant::now();
        let result = load_str(&text, "fuzz.toml");
        prop_assert!(start.elapsed() < Duration::from_secs(20), "took {:?}", start.elapsed());
        if let Err(e) = result {
            let _ = e.to_string();
            for d in e.errors() {
                prop_assert!(d.line <= lines + 1, "line {} of {}: {}", d.line, lines, d.message);
            }
        }
    }

    /// Raw bytes (not even UTF-8) are refused or loaded, never a panic.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = load_str(&bytes, "bytes.toml");
    }
}

/// One plugin process that answers the handshake properly (or not), then writes `payload` to
/// stdout in answer to the next request and exits; `ENDLESS` writes one line without end.
fn hostile_plugin(dir: &std::path::Path, payload: &[u8], handshake_ok: bool) -> PluginCommand {
    let data = dir.join("payload");
    std::fs::write(&data, payload).expect("write payload");
    let script = dir.join("plugin.py");
    let mut f = std::fs::File::create(&script).expect("script");
    write!(
        f,
        r#"import json, sys
handshake_ok = {hs}
payload = open({data:?}, "rb").read()
line = sys.stdin.readline()
req = json.loads(line)
if handshake_ok:
    print(json.dumps({{"id": req["id"], "ok": True, "result": {{"protocol_version": 1, "name": "hostile", "version": "0"}}}}), flush=True)
    sys.stdin.readline()
if payload == b"ENDLESS":
    import time
    # One line that never ends, at about 64 MB/s.
    while True:
        sys.stdout.buffer.write(b"y" * (1 << 20))
        sys.stdout.flush()
        time.sleep(0.015)
sys.stdout.buffer.write(payload)
sys.stdout.flush()
"#,
        hs = if handshake_ok { "True" } else { "False" },
        data = data.display().to_string(),
    )
    .expect("write script");
    PluginCommand::new("python3", vec![script.display().to_string()])
}

/// Hostile plugin output: random bytes, endless and near-limit lines, wrong ids and types,
/// invalid UTF-8 and JSON nested deeper than any parser should follow.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2048),
        Just(vec![b'{'; 3 << 20]),
        Just(vec![b'y'; (1 << 20) + 1]),
        Just([vec![b' '; (1 << 20) - 10], b"\n".to_vec()].concat()),
        Just(b"{\"id\": 2, \"ok\": true, \"result\": null}\n".to_vec()),
        Just(b"{\"id\": 2, \"ok\": true, \"result\": {\"exists\": \"yes\"}}\n".to_vec()),
        Just(b"{\"id\": 18446744073709551615, \"ok\": true}\n".to_vec()),
        Just(b"{\"id\": 2, \"ok\": false}\n".to_vec()),
        Just(
            b"{\"id\": 2, \"ok\": false, \"error\": {\"kind\": \"\xff\xfe\", \"message\": 5}}\n"
                .to_vec()
        ),
        Just([b"[".repeat(100_000), b"\n".to_vec()].concat()),
        Just(b"\xff\xfe\xfd\n\n\n".to_vec()),
        Just(b"ENDLESS".to_vec()),
        Just(b"ENDLESS".to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever a plugin writes, a call ends with an answer or an error, within its deadline
    /// plus grace, and drover's memory does not follow the plugin's output.
    #[test]
    fn hostile_plugin_output_never_panics_or_hangs(payload in payload(), handshake_ok in any::<bool>()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let before = rss_kib();
        let start = Instant::now();
        let plugin = Plugin::new(hostile_plugin(dir.path(), &payload, handshake_ok));
        let answer = rt.block_on(async {
            let r = plugin.exists("m", &Call::with_timeout(Duration::from_secs(1))).await;
            plugin.shutdown(Duration::from_millis(100)).await;
            r
        });
        let took = start.elapsed();
        // The plugin exits after its payload: every call ends long before any deadline.
        prop_assert!(took < Duration::from_secs(20), "took {took:?}: {answer:?}");
        let grown = rss_kib().saturating_sub(before);
        prop_assert!(grown < 64 * 1024, "memory grew by {grown} KiB");
    }
}
