//! The shim binary as drover starts it: the handshake and an unknown operation answered on
//! stdout, one JSON line each, and a clean exit when stdin closes.
//!
//! Besides what it checks, this test makes `cargo test --workspace` build the shim's binary
//! with the workspace's features, so drover's end-to-end tests find it built and fresh instead
//! of building it (and a second copy of its dependencies) while they run.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_protocol::{Response, PROTOCOL_VERSION};

#[test]
fn handshake_unknown_operation_and_exit_on_eof() {
    let dir = tempfile_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_legacy-driver-shim"))
        // An empty store: nothing here runs docker-machine.
        .env("MACHINE_STORAGE_PATH", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the shim");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut ask = |line: String| -> Response {
        writeln!(stdin, "{line}").expect("write a request");
        stdin.flush().expect("flush");
        let answer = lines.next().expect("an answer line").expect("read");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("not a response: {answer}: {e}"))
    };

    let hello = ask(format!(
        r#"{{"id": 1, "op": "handshake", "protocol_version": {PROTOCOL_VERSION}, "drover_version": "test", "name_prefix": "runner-"}}"#
    ));
    assert_eq!(hello.id, 1);
    assert!(hello.ok, "{hello:?}");
    let result = hello.result.expect("a handshake result");
    assert_eq!(result["protocol_version"], PROTOCOL_VERSION, "{result}");
    assert_eq!(result["name"], "legacy-driver-shim", "{result}");

    let odd = ask(r#"{"id": 2, "op": "no_such_operation"}"#.to_string());
    assert_eq!(odd.id, 2);
    assert!(!odd.ok, "{odd:?}");
    assert_eq!(
        odd.error.expect("an error").kind.as_str(),
        "unsupported",
        "an unknown operation is answered as unsupported"
    );

    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after stdin closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(0),
        "exit after stdin closed: {status:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "legacy-driver-shim-stdio-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
