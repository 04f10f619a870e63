//! drover's side of the protocol against deliberately awkward plugins: deadlines, a plugin
//! that cannot cancel (killed and restarted), a plugin that dies, out-of-order answers, and
//! the credentials cache's invalidation rules.

mod provider_support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use drover::provider::cache::CredentialCache;
use drover::provider::plugin::{Plugin, PluginCommand};
use drover::provider::{Call, Endpoint, ErrorKind, Provider, ProviderError};

/// A sequential Python plugin: `exists` of a name starting with "slow" never answers,
/// `exists` of "die" exits, `credentials` answers with a counter, `can_connect` says false
/// for names starting with "down".
const AWKWARD: &str = r#"#!/usr/bin/env python3
import json, sys, time
count = 0
for line in sys.stdin:
    req = json.loads(line)
    if "id" not in req:
        continue
    op, name, rid = req["op"], req.get("name", ""), req["id"]
    def ok(r): print(json.dumps({"id": rid, "ok": True, "result": r}), flush=True)
    if op == "handshake":
        ok({"protocol_version": 1, "name": "awkward", "version": "0", "capabilities": CAPS})
    elif op == "exists" and name.startswith("slow"):
        time.sleep(3600)
    elif op == "exists" and name == "endless":
        while True:
            sys.stdout.write("y" * 65536)
    elif op == "exists" and name == "die":
        sys.exit(1)
    elif op == "exists":
        ok({"exists": True})
    elif op == "credentials":
        count += 1
        ok({"endpoint": {"type": "tcp", "host": "tcp://h:%d" % count}})
    elif op == "can_connect":
        ok({"can_connect": not name.startswith("down")})
    else:
        print(json.dumps({"id": rid, "ok": False, "error": {"kind": "unsupported", "message": op}}), flush=True)
"#;

fn plugin(dir: &std::path::Path, caps: &str) -> PluginCommand {
    let p: PathBuf = dir.join("awkward");
    std::fs::write(&p, AWKWARD.replace("CAPS", caps)).expect("write");
    // Run through the interpreter: exec'ing a file other threads just wrote races (ETXTBSY).
    PluginCommand::new("python3", vec![p.display().to_string()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_without_cancel_is_killed_on_timeout_and_restarted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = Plugin::new(plugin(dir.path(), "[]"));
    let start = Instant::now();
    // drover waits timeout + 5 s grace.
    let e = p
        .exists("slow", &Call::with_timeout(Duration::from_millis(100)))
        .await
        .expect_err("times out");
    assert!(matches!(e, ProviderError::Timeout { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(start.elapsed() < Duration::from_secs(8));
    // The stuck process was killed; the next call starts a fresh one.
    assert!(p.exists("m", &Call::new()).await.expect("exists"));
    assert_eq!(p.spawn_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_abandons_the_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = Plugin::new(plugin(dir.path(), "[]"));
    p.start().await.expect("start");
    let call = Call::new();
    let token = call.cancel.clone();
    let (r, _) = tokio::join!(p.exists("slow", &call), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        token.cancel();
    });
    assert_eq!(r.expect_err("cancelled").kind(), ErrorKind::Cancelled);
    assert!(p.exists("m", &Call::new()).await.expect("exists"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_stdout_line_is_cut_and_the_plugin_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = Plugin::new(plugin(dir.path(), "[]"));
    let start = Instant::now();
    let e = p
        .exists("endless", &Call::with_timeout(Duration::from_secs(60)))
        .await
        .expect_err("an endless line is no answer");
    // Refused as soon as the line passes the limit, not after the deadline.
    assert!(start.elapsed() < Duration::from_secs(30), "{e}");
    assert!(matches!(e, ProviderError::Protocol { .. }), "{e}");
    let message = e.to_string();
    assert!(
        message.contains("python3") && message.contains("1048576 bytes"),
        "the error names the plugin and the limit: {message}"
    );
    // The plugin was stopped; the next call starts a fresh one.
    assert!(p.exists("m", &Call::new()).await.expect("exists"));
    assert_eq!(p.spawn_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dying_plugin_is_reported_and_restarted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = Plugin::new(plugin(dir.path(), "[]"));
    let e = p.exists("die", &Call::new()).await.expect_err("died");
    assert!(matches!(e, ProviderError::Exited { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::Transient);
    assert!(p.exists("m", &Call::new()).await.expect("exists"));
    assert_eq!(p.spawn_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_plugins_get_requests_in_parallel() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Claims to be concurrent but is not: the second request waits behind the slow one, so
    // it times out too; with serialisation by drover it would never have been sent.
    let p = Plugin::new(plugin(dir.path(), r#"["concurrent"]"#));
    let t = Call::with_timeout(Duration::from_millis(200));
    let (a, b) = tokio::join!(p.exists("slow", &t), p.exists("m", &t));
    assert_eq!(a.expect_err("slow").kind(), ErrorKind::Timeout);
    assert_eq!(b.expect_err("blocked behind").kind(), ErrorKind::Timeout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credentials_cache_serves_and_invalidates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = CredentialCache::new(Plugin::new(plugin(dir.path(), "[]")));
    let host = |e: Endpoint| match e {
        Endpoint::Tcp { host } => host,
        other => panic!("{other:?}"),
    };
    let get = |n: &'static str| {
        let c = &c;
        async move { host(c.credentials(n, &Call::new()).await.expect("credentials")) }
    };
    assert_eq!(get("m").await, "tcp://h:1");
    assert_eq!(get("m").await, "tcp://h:1", "cached");
    c.invalidate("m");
    assert_eq!(get("m").await, "tcp://h:2");
    assert!(c.can_connect("m", &Call::new()).await.expect("cc"));
    assert_eq!(
        get("m").await,
        "tcp://h:2",
        "a positive probe keeps the entry"
    );
    assert_eq!(get("down-1").await, "tcp://h:3");
    assert!(!c.can_connect("down-1", &Call::new()).await.expect("cc"));
    assert_eq!(
        get("down-1").await,
        "tcp://h:4",
        "a negative probe drops it"
    );
    let _ = c.stop("m", &Call::new()).await;
    assert_eq!(get("m").await, "tcp://h:5", "stop drops it");
}

type Seen = (String, Option<String>, Option<ErrorKind>);

#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<Seen>>);

impl drover::provider::observe::Observer for Recorder {
    fn observe(&self, o: &drover::provider::observe::Observation<'_>) {
        self.0.lock().expect("lock").push((
            o.op.to_string(),
            o.machine.map(str::to_string),
            o.error,
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observer_sees_every_call_and_its_outcome() {
    use drover::provider::observe::Observed;
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Observed::new(Plugin::new(plugin(dir.path(), "[]")), Recorder::default());
    assert!(o.exists("m", &Call::new()).await.expect("exists"));
    assert_eq!(
        o.stop("m", &Call::new())
            .await
            .expect_err("unsupported")
            .kind(),
        ErrorKind::Unsupported
    );
    let seen = o.observer().0.lock().expect("lock").clone();
    assert_eq!(
        seen,
        [
            ("exists".into(), Some("m".into()), None),
            (
                "stop".into(),
                Some("m".into()),
                Some(ErrorKind::Unsupported)
            ),
        ]
    );
}
