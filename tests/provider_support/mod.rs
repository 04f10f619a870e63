//! Shared helpers of the provider tests: locating (and building) the shim, a fake
//! docker-machine environment with its store, fault file and call log, and plugin commands.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use drover::provider::plugin::PluginCommand;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fake docker-machine.
pub fn fake_dm() -> PathBuf {
    root().join("fixtures/fake-docker-machine/docker-machine")
}

/// The real archived docker-machine, when it is there: `$DROVER_REAL_DOCKER_MACHINE`, else
/// `../shared/tools/docker-machine/docker-machine` beside the checkout (CI's layout), else the
/// same two levels up (a worktree under `wt/`). `None` on a fresh clone without it: tests then
/// run against the fake only. Says on stderr which one runs.
pub fn real_dm() -> Option<PathBuf> {
    let found = std::env::var_os("DROVER_REAL_DOCKER_MACHINE")
        .map(PathBuf::from)
        .into_iter()
        .chain(["..", "../.."].iter().map(|up| {
            root()
                .join(up)
                .join("shared/tools/docker-machine/docker-machine")
        }))
        .find(|p| p.is_file());
    match &found {
        Some(p) => eprintln!(
            "also running against the real docker-machine at {}",
            p.display()
        ),
        None => eprintln!("the real docker-machine is not there: running against the fake only"),
    }
    found
}

/// The docker-machine executables a test runs against: the fake, then the real one if present.
pub fn docker_machines() -> Vec<PathBuf> {
    let mut all = vec![fake_dm()];
    all.extend(real_dm());
    all
}

/// The machines in a docker-machine store (the folders under `machines/`), sorted.
pub fn store_machines(store: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(store.join("machines"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The example plugin.
pub fn example_plugin() -> PathBuf {
    root().join("fixtures/plugins/example-plugin.sh")
}

/// The `legacy-driver-shim` binary, built (once per test process) into the same target dir
/// as this test's `drover` binary.
pub fn shim_bin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let drover = PathBuf::from(env!("CARGO_BIN_EXE_drover"));
            let dir = drover.parent().expect("target dir").to_path_buf();
            // `cargo test --workspace` builds it (the shim has an integration test) with the
            // workspace's features: use that one when it is newer than its sources. Building it
            // here instead would build a second copy of its dependencies (its own feature set)
            // while the tests run: minutes on a cold CI machine.
            let built = dir.join("legacy-driver-shim");
            if newer_than_sources(&built) {
                return built;
            }
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut build = Command::new(cargo);
            // The test's own CARGO_* variables would make build scripts (ring) rebuild.
            for (k, _) in std::env::vars_os() {
                let k = k.to_string_lossy().into_owned();
                if k.starts_with("CARGO_") && k != "CARGO_HOME" {
                    build.env_remove(&k);
                }
            }
            build.args([
                "build",
                "--quiet",
                "-p",
                "legacy-driver-shim",
                "--bin",
                "legacy-driver-shim",
            ]);
            // Build with the profile this test was built with (target/<profile>/).
            match dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") | None => {}
                Some("release") => {
                    build.arg("--release");
                }
                Some(other) => {
                    build.args(["--profile", other]);
                }
            }
            let status = build
                .current_dir(root())
                .env("CARGO_TARGET_DIR", dir.parent().expect("target root"))
                .status()
                .expect("run cargo build for the shim");
            assert!(status.success(), "building legacy-driver-shim failed");
            dir.join("legacy-driver-shim")
        })
        .clone()
}

/// Whether `bin` exists and is newer than every source of the shim and its protocol crate.
fn newer_than_sources(bin: &Path) -> bool {
    fn newest(path: &Path, acc: &mut Option<std::time::SystemTime>) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                newest(&entry.path(), acc);
            }
        } else if let Ok(m) = meta.modified() {
            *acc = Some(acc.map_or(m, |a| a.max(m)));
        }
    }
    let Some(built) = std::fs::metadata(bin).and_then(|m| m.modified()).ok() else {
        return false;
    };
    let mut sources = None;
    for p in [
        "legacy-driver-shim/src",
        "legacy-driver-shim/Cargo.toml",
        "provider-protocol/src",
        "provider-protocol/Cargo.toml",
        "Cargo.lock",
    ] {
        newest(&root().join(p), &mut sources);
    }
    sources.is_some_and(|s| s <= built)
}

/// A fake docker-machine world: a store, a fault file and a call log in a temp dir.
pub struct FakeWorld {
    pub dir: tempfile::TempDir,
}

impl FakeWorld {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("drover-test-provider-")
            .tempdir()
            .expect("tempdir");
        FakeWorld { dir }
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("calls.jsonl")
    }

    pub fn faults_path(&self) -> PathBuf {
        self.dir.path().join("faults.json")
    }

    /// Replaces the fault file (read by the fake on every invocation).
    pub fn set_faults(&self, faults: serde_json::Value) {
        std::fs::write(self.faults_path(), faults.to_string()).expect("write faults");
    }

    /// Environment for the fake (passed through the shim).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "MACHINE_STORAGE_PATH".into(),
                self.store().display().to_string(),
            ),
            (
                "FAKE_DM_CALL_LOG".into(),
                self.log_path().display().to_string(),
            ),
            (
                "FAKE_DM_FAULTS_FILE".into(),
                self.faults_path().display().to_string(),
            ),
            ("FAKE_DM_FAILURE_SLEEP".into(), "0".into()),
            ("SHIM_LOG".into(), "debug".into()),
        ]
    }

    /// The shim configured against this world (the fake docker-machine), with extra shim
    /// arguments.
    pub fn shim(&self, extra: &[&str]) -> PluginCommand {
        self.shim_with(&fake_dm(), extra)
    }

    /// The shim running docker-machine executable `dm` against this world's store.
    pub fn shim_with(&self, dm: &Path, extra: &[&str]) -> PluginCommand {
        let mut args = vec!["--docker-machine".to_string(), dm.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut cmd = PluginCommand::new(shim_bin(), args);
        cmd.env = self.env();
        cmd.name_prefix = Some("drover-test-provider-".into());
        cmd
    }

    /// Every docker-machine invocation so far: (pid, argv).
    pub fn calls(&self) -> Vec<(u32, Vec<String>)> {
        let Ok(text) = std::fs::read_to_string(self.log_path()) else {
            return Vec::new();
        };
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("call log line");
                let pid = v["pid"].as_u64().expect("pid") as u32;
                let argv = v["argv"]
                    .as_array()
                    .expect("argv")
                    .iter()
                    .map(|a| a.as_str().expect("arg").to_string())
                    .collect();
                (pid, argv)
            })
            .collect()
    }

    /// The subcommands invoked so far (argv[1], after the bugsnag flag).
    pub fn subcommands(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .map(|(_, a)| a.get(1).cloned().unwrap_or_default())
            .collect()
    }

    pub fn machine_dir(&self, name: &str) -> PathBuf {
        self.store().join("machines").join(name)
    }
}

/// Whether process `pid` is still alive (and not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.split_whitespace().nth(2).is_none_or(|st| st != "Z"),
        Err(_) => false,
    }
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}
