//! The fake docker-machine itself against the spec's checklist
//! (shared/spec/docker-machine-cli.md §10): flags, output strings on the right stream, exit
//! codes, store layout, partial stores, `rm` forms, `config`, templates. The shim's tests
//! trust it, so it is tested on its own.

mod provider_support;

use std::process::{Command, Stdio};

use provider_support::*;
use serde_json::json;

struct Out {
    rc: i32,
    stdout: String,
    stderr: String,
}

fn dm(world: &FakeWorld, args: &[&str]) -> Out {
    let out = Command::new(fake_dm())
        .arg("--bugsnag-api-token=no-report")
        .args(args)
        .envs(world.env())
        .stdin(Stdio::null())
        .output()
        .expect("run fake");
    Out {
        rc: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn missing(name: &str) -> String {
    format!("Docker machine \"{name}\" does not exist. Use \"docker-machine ls\" to list machines. Use \"docker-machine create\" to add a new one.\n")
}

#[test]
fn create_inspect_url_and_the_store_layout() {
    let w = FakeWorld::new();
    let o = dm(
        &w,
        &[
            "create",
            "--driver",
            "none",
            "--url",
            "tcp://127.0.0.1:2376",
            "test1",
        ],
    );
    assert_eq!(o.rc, 0, "{}", o.stderr);
    let store = w.store().display().to_string();
    assert_eq!(
        o.stdout,
        format!("Creating CA: {store}/certs/ca.pem\nCreating client certificate: {store}/certs/cert.pem\nRunning pre-create checks...\nCreating machine...\nTo see how to connect your Docker Client to the Docker Engine running on this virtual machine, run: docker-machine env test1\n")
    );
    assert!(o.stderr.is_empty());
    for f in [
        "certs/ca.pem",
        "certs/ca-key.pem",
        "certs/cert.pem",
        "certs/key.pem",
        "machines/test1/config.json",
    ] {
        assert!(w.store().join(f).is_file(), "{f}");
    }
    let o = dm(
        &w,
        &[
            "inspect",
            "test1",
            "-f",
            "{{.HostOptions.AuthOptions.StorePath}}",
        ],
    );
    assert_eq!(
        (o.rc, o.stdout.as_str()),
        (0, format!("{store}/machines/test1\n").as_str())
    );
    let o = dm(&w, &["inspect", "test1"]);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("json");
    assert_eq!(v["Driver"]["URL"], "tcp://127.0.0.1:2376");
    assert_eq!(v["Driver"]["StorePath"], store);
    assert!(
        o.stdout.contains("\n    \"ConfigVersion\": 3,"),
        "4-space indent"
    );
    assert_eq!(
        dm(&w, &["inspect", "test1", "-f", "{{.Nope.Nothing}}"]).stdout,
        "<no value>\n"
    );
    let o = dm(&w, &["inspect", "test1", "-f", "{{.Name"]);
    assert_eq!(
        (o.rc, o.stderr.as_str()),
        (1, "template parsing error: template: :1: unclosed action\n")
    );
    assert_eq!(dm(&w, &["url", "test1"]).stdout, "tcp://127.0.0.1:2376\n");
    assert_eq!(dm(&w, &["ip", "test1"]).stdout, "127.0.0.1:2376\n");
    assert_eq!(dm(&w, &["status", "test1"]).stdout, "Running\n");
    // A second create does not bootstrap certs again.
    let o = dm(
        &w,
        &[
            "create",
            "--driver",
            "none",
            "--url",
            "tcp://127.0.0.1:2377",
            "test2",
        ],
    );
    assert!(
        o.stdout.starts_with("Running pre-create checks...\n"),
        "{}",
        o.stdout
    );
    assert_eq!(dm(&w, &["ls", "-q"]).stdout, "test1\ntest2\n");
}

#[test]
fn create_failures_leave_what_the_spec_says() {
    let w = FakeWorld::new();
    let base = ["create", "--driver", "none", "--url", "tcp://127.0.0.1:9"];
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        dm(&w, &a)
    };
    assert_eq!(run(&["ok1"]).rc, 0);
    let o = run(&["ok1"]);
    assert_eq!(
        (o.rc, o.stderr.as_str()),
        (1, "Docker machine \"ok1\" already exists\n")
    );
    let o = run(&["bad_name"]);
    assert_eq!(o.rc, 1);
    assert_eq!(o.stderr, "Error creating machine: Invalid hostname specified. Allowed hostname chars are: 0-9a-zA-Z . -\n");
    let o = dm(&w, &["create", "--driver", "none", "nourl"]);
    assert!(o.stderr.starts_with(
        "Error setting machine configuration from flags provided: --url option is required"
    ));
    let o = dm(&w, &["create", "--driver", "foo", "x"]);
    assert_eq!(o.stderr, "Driver \"foo\" not found. Do you have the plugin binary \"docker-machine-driver-foo\" accessible in your PATH?\n");
    let o = run(&["--bogus-flag=1", "x"]);
    assert_eq!(
        (o.rc, o.stderr.as_str()),
        (1, "flag provided but not defined: -bogus-flag\n")
    );
    assert!(o.stdout.starts_with("Incorrect Usage."));
    for n in ["bad_name", "nourl", "x"] {
        assert!(!w.machine_dir(n).exists(), "{n}");
    }
    w.set_faults(json!({"create_fail_names": ["pre"], "create_fail_stage": "precreate"}));
    let o = run(&["pre"]);
    assert_eq!(
        (o.rc, o.stdout.as_str()),
        (3, "Running pre-create checks...\n")
    );
    assert!(!w.machine_dir("pre").exists());
    w.set_faults(json!({"create_fail_names": ["drv"]}));
    let o = run(&["drv"]);
    assert_eq!(o.rc, 1);
    assert!(o
        .stderr
        .starts_with("Error creating machine: Error in driver during machine creation: "));
    assert!(
        w.machine_dir("drv").join("config.json").is_file(),
        "partial store"
    );
    assert_eq!(dm(&w, &["inspect", "drv"]).rc, 0, "removable");
}

#[test]
fn missing_machines_and_broken_records() {
    let w = FakeWorld::new();
    for cmd in ["inspect", "url", "config", "stop", "ip", "status"] {
        let o = dm(&w, &[cmd, "nope"]);
        assert_eq!((o.rc, o.stderr.clone()), (1, missing("nope")), "{cmd}");
    }
    std::fs::create_dir_all(w.machine_dir("noconf")).expect("mkdir");
    let o = dm(&w, &["inspect", "noconf"]);
    assert_eq!(o.rc, 1);
    assert!(o.stderr.contains("config.json: no such file or directory"));
    assert_eq!(
        dm(&w, &["ls", "-q"]).stdout,
        "",
        "unloadable dirs are omitted"
    );
    let o = dm(&w, &["frobnicate"]);
    assert_eq!(o.stderr, "docker-machine: 'frobnicate' is not a docker-machine command. See 'docker-machine --help'.\n");
    assert_eq!(
        dm(&w, &["--version"]).stdout,
        "docker-machine version dev, build b170508b\n"
    );
}

#[test]
fn rm_forms() {
    let w = FakeWorld::new();
    let mk = |n: &str| {
        dm(
            &w,
            &[
                "create",
                "--driver",
                "none",
                "--url",
                "tcp://127.0.0.1:9",
                n,
            ],
        )
    };
    assert_eq!(mk("a").rc, 0);
    // No -y and stdin at EOF: nothing removed, exit 0.
    let o = dm(&w, &["rm", "a"]);
    assert_eq!(o.rc, 0);
    assert!(o.stdout.ends_with("Are you sure? (y/n): "));
    assert!(w.machine_dir("a").is_dir());
    let head = "About to remove a\nWARNING: This action will delete both local reference and remote instance.\n";
    let o = dm(&w, &["rm", "-y", "a"]);
    assert_eq!(
        (o.rc, o.stdout.as_str()),
        (0, format!("{head}Successfully removed a\n").as_str())
    );
    let o = dm(&w, &["rm", "-y", "a"]);
    assert_eq!(
        (o.rc, o.stderr.clone()),
        (1, format!("Error removing host \"a\": {}", missing("a")))
    );
    let o = dm(&w, &["rm", "-f", "a"]);
    assert_eq!(o.rc, 0);
    assert!(o.stderr.ends_with("Can't remove \"a\"\n"), "{}", o.stderr);
    assert_eq!(mk("b").rc, 0);
    w.set_faults(json!({"rm_fail": true}));
    let o = dm(&w, &["rm", "-y", "b"]);
    assert_eq!(o.rc, 1);
    assert!(
        w.machine_dir("b").is_dir(),
        "rm -y keeps the record when the driver fails"
    );
    let o = dm(&w, &["rm", "-f", "b"]);
    assert_eq!(o.rc, 0);
    assert!(o.stdout.ends_with("Successfully removed b\n"));
    assert!(o.stderr.starts_with("Error removing host \"b\": "));
    assert!(!w.machine_dir("b").exists(), "rm -f deletes it anyway");
    assert!(
        w.store().join("certs/ca.pem").is_file(),
        "certs are never touched"
    );
}

#[test]
fn config_checks_tls_and_prints_the_flag_block() {
    let w = FakeWorld::new();
    assert_eq!(
        dm(
            &w,
            &[
                "create",
                "--driver",
                "none",
                "--url",
                "tcp://127.0.0.1:9",
                "c"
            ]
        )
        .rc,
        0
    );
    let o = dm(&w, &["config", "c"]);
    assert_eq!(o.rc, 1);
    assert!(o.stdout.is_empty());
    assert!(o.stderr.starts_with("Error running connection boilerplate: Error checking and/or regenerating the certs: There was an error validating certificates for host \"127.0.0.1:9\": "));
    assert!(
        o.stderr.ends_with("might stop running containers.\n\n"),
        "{:?}",
        o.stderr
    );
    w.set_faults(json!({"config": "ok"}));
    let o = dm(&w, &["config", "c"]);
    let d = w.machine_dir("c").display().to_string();
    assert_eq!(o.rc, 0);
    assert_eq!(
        o.stdout,
        format!("--tlsverify\n--tlscacert=\"{d}/ca.pem\"\n--tlscert=\"{d}/cert.pem\"\n--tlskey=\"{d}/key.pem\"\n-H=tcp://127.0.0.1:9\n")
    );
    w.set_faults(json!({"config": "hang", "config_timeout": 0.2}));
    let o = dm(&w, &["config", "c"]);
    assert_eq!(o.rc, 1);
    assert!(o.stderr.contains("context deadline exceeded"));
    w.set_faults(json!({"empty_output": ["url"]}));
    assert_eq!(dm(&w, &["url", "c"]).stdout, "\n");
    let o = dm(&w, &["stop", "c"]);
    assert_eq!(
        (o.rc, o.stdout.as_str(), o.stderr.as_str()),
        (
            1,
            "Stopping \"c\"...\n",
            "hosts without a driver cannot be stopped\n"
        )
    );
}

#[test]
fn the_store_follows_home_without_machine_storage_path() {
    let w = FakeWorld::new();
    let home = w.dir.path().join("home");
    let out = Command::new(fake_dm())
        .args([
            "create",
            "--driver",
            "none",
            "--url",
            "tcp://127.0.0.1:9",
            "h",
        ])
        .env_remove("MACHINE_STORAGE_PATH")
        .env("HOME", &home)
        .env("FAKE_DM_CALL_LOG", w.log_path())
        .output()
        .expect("run");
    assert!(out.status.success());
    assert!(home
        .join(".docker/machine/machines/h/config.json")
        .is_file());
    let log = w.calls();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].1[0], "create");
}

/// Runs `dm` (the fake or the real docker-machine) with the world's store.
fn run_dm(dm: &std::path::Path, world: &FakeWorld, args: &[&str]) -> Out {
    let out = Command::new(dm)
        .args(args)
        .envs(world.env())
        .stdin(Stdio::null())
        .output()
        .expect("run docker-machine");
    Out {
        rc: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn fake_and_real_agree_on_unknown_flags_and_missing_driver_plugins() {
    for dm in docker_machines() {
        let w = FakeWorld::new();
        // An unknown global flag prints usage and exits 0.
        let o = run_dm(&dm, &w, &["--no-such-flag", "ls"]);
        assert_eq!(o.rc, 0, "{}: {}", dm.display(), o.stderr);
        assert!(o.stdout.contains("Incorrect Usage."), "{}", o.stdout);
        assert!(
            o.stderr
                .contains("flag provided but not defined: -no-such-flag"),
            "{}",
            o.stderr
        );
        // `rm -y` of a machine whose driver plugin is missing fails and keeps it.
        let name = "plugin-gone";
        let o = run_dm(
            &dm,
            &w,
            &["create", "-d", "none", "--url", "tcp://127.0.0.1:9", name],
        );
        assert_eq!(o.rc, 0, "{}: {}", dm.display(), o.stderr);
        let config = w.machine_dir(name).join("config.json");
        let text = std::fs::read_to_string(&config).expect("config.json");
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
        v["DriverName"] = json!("drover-test-nonexistent");
        std::fs::write(&config, v.to_string()).expect("write config.json");
        let o = run_dm(&dm, &w, &["rm", "-y", name]);
        assert_eq!(o.rc, 1, "{}: {} {}", dm.display(), o.stdout, o.stderr);
        assert!(
            o.stderr.contains("drover-test-nonexistent"),
            "{}: {}",
            dm.display(),
            o.stderr
        );
        assert!(
            w.machine_dir(name).is_dir(),
            "{}: the record must stay",
            dm.display()
        );
    }
}

/// Which of 12 machines `rm -y` fails to remove with `rm_fail_rate` 0.5 and this seed, and
/// which of 12 creations fail with `create_fail_rate` 0.3.
fn seeded_outcomes(seed: &str) -> (Vec<bool>, Vec<bool>) {
    let w = FakeWorld::new();
    w.set_faults(json!({"seed": seed, "create_fail_rate": 0.3, "failure_sleep": 0}));
    let names: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
    let created: Vec<bool> = names
        .iter()
        .map(|n| {
            let o = dm(
                &w,
                &[
                    "create",
                    "--driver",
                    "none",
                    "--url",
                    "tcp://127.0.0.1:2376",
                    n,
                ],
            );
            o.rc == 0
        })
        .collect();
    w.set_faults(json!({"seed": seed, "rm_fail_rate": 0.5}));
    let rm_failed = names
        .iter()
        .map(|n| dm(&w, &["rm", "-y", n]).rc != 0 && w.machine_dir(n).is_dir())
        .collect();
    (created, rm_failed)
}

#[test]
fn seeded_fault_rates_are_reproducible_and_mixed() {
    let (created, rm_failed) = seeded_outcomes("soak-1");
    assert_eq!(
        (created.clone(), rm_failed.clone()),
        seeded_outcomes("soak-1"),
        "same seed, same faults"
    );
    let failed_creates = created.iter().filter(|c| !**c).count();
    assert!(
        (1..12).contains(&failed_creates),
        "30 %: some creations fail, not all: {created:?}"
    );
    let failed_rms = rm_failed.iter().filter(|f| **f).count();
    assert!(
        (1..12).contains(&failed_rms),
        "50 %: some removals fail and keep the machine, not all: {rm_failed:?}"
    );
}

#[test]
fn create_hang_rate_1_never_returns_and_leaves_the_record() {
    let w = FakeWorld::new();
    w.set_faults(json!({"seed": "hang", "create_hang_rate": 1.0}));
    let mut child = Command::new(fake_dm())
        .args([
            "create",
            "--driver",
            "none",
            "--url",
            "tcp://127.0.0.1:2376",
            "h1",
        ])
        .envs(w.env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run fake");
    // The record appears once the fake has started and written it (slow under load); the
    // create must still be running then, and a while after.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !w.machine_dir("h1").is_dir() && std::time::Instant::now() < deadline {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let recorded = w.machine_dir("h1").is_dir();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let still_running = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(still_running, "create returned despite create_hang_rate 1");
    assert!(recorded, "the hung create left no record");
}
