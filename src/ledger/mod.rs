//! The crash-safe machine ledger (issue 13): what drover knows about each docker+machine machine
//! (state, jobs run, last use, removal attempts), kept in a JSON file beside `config.toml` so a
//! restart resumes from it instead of guessing.
//!
//! Writes are atomic: a temporary file in the same directory, fsync, rename over the ledger,
//! fsync of the directory. A crash leaves either the old ledger or the new one, never a mix.
//! A ledger that does not parse (truncated by a full disk, edited by hand, from a newer drover)
//! is renamed aside with a `.corrupt-<time>` suffix and reported; loading then goes on with no
//! records, which is exactly gitlab-runner's behaviour (machines found on disk are adopted).
//! Nothing here is ever fatal to the caller.
//!
//! Removals that gave up and are retried in the background (orphans, see
//! [`crate::engine::Engine::set_orphan_retry`]) are kept too, so a restart goes on retrying them
//! instead of forgetting the VMs. A ledger written before orphans were kept has no `orphans`
//! field and loads with none: the format version stays 1.
//!
//! The ledger knows files and records; the engine turns records back into machines
//! ([`crate::engine::Engine::restore`]), and the manager decides when to save.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::engine::{MachineState, OrphanEntry, Reason, RestoredMachine, RunnerId};

/// The ledger's file name, in the config file's directory.
pub const FILE_NAME: &str = ".drover-machines.json";

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// A ledger larger than this is not read (set aside): 10,000 machines take about 2 MiB.
pub const MAX_BYTES: u64 = 64 * 1024 * 1024;

/// One machine as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineRecord {
    /// The machine name (`runner-<short token>-<MachineName>`).
    pub name: String,
    /// The owning runner's short token, when known (to find its `[[runners]]` after a reload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    /// Its state when saved.
    pub state: MachineState,
    /// Jobs started on it.
    pub used_count: i64,
    /// Its last use (or creation).
    pub last_used: DateTime<Utc>,
    /// Removal attempts made so far (towards `MaxRemovalAttempts`).
    #[serde(default)]
    pub removal_attempts: i64,
    /// Failed removal attempts in the current removal (3 or more: stuck on removing).
    #[serde(default)]
    pub retry_count: u32,
    /// Why it was being removed (Removing only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

impl MachineRecord {
    /// The record of an engine machine ([`crate::engine::Engine::snapshot`]), owned by the
    /// runner with short token `runner`.
    pub fn from_restored(m: &RestoredMachine, runner: Option<String>) -> MachineRecord {
        MachineRecord {
            name: m.name.clone(),
            runner,
            state: m.state,
            used_count: m.used_count,
            last_used: m.used,
            removal_attempts: m.removal_attempts,
            retry_count: m.retry_count,
            reason: m.reason,
        }
    }

    /// The engine's input for this record, owned by `runner` (the manager matches
    /// [`MachineRecord::runner`] against the config's runners).
    pub fn to_restored(&self, runner: Option<RunnerId>) -> RestoredMachine {
        RestoredMachine {
            name: self.name.clone(),
            runner,
            state: self.state,
            used_count: self.used_count,
            used: self.last_used,
            removal_attempts: self.removal_attempts,
            retry_count: self.retry_count,
            reason: self.reason,
        }
    }
}

/// A machine whose removal gave up and that is retried in the background.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrphanRecord {
    /// The machine name.
    pub name: String,
    /// Why it was being removed.
    pub reason: Reason,
    /// Failed background retries so far.
    #[serde(default)]
    pub failures: u32,
    /// When the next retry is due.
    pub next_retry: DateTime<Utc>,
}

impl From<&OrphanEntry> for OrphanRecord {
    fn from(e: &OrphanEntry) -> OrphanRecord {
        OrphanRecord {
            name: e.name.clone(),
            reason: e.reason,
            failures: e.failures,
            next_retry: e.next_retry,
        }
    }
}

impl From<&OrphanRecord> for OrphanEntry {
    fn from(r: &OrphanRecord) -> OrphanEntry {
        OrphanEntry {
            name: r.name.clone(),
            reason: r.reason,
            failures: r.failures,
            next_retry: r.next_retry,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct FileFormat {
    version: u32,
    machines: Vec<MachineRecord>,
    /// Absent from ledgers written before orphans were kept.
    #[serde(default)]
    orphans: Vec<OrphanRecord>,
}

/// A ledger file that could not be used and was moved out of the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// Why it could not be used.
    pub reason: String,
    /// Where it is now; `None` if renaming failed too (it is then left where it was and will
    /// be overwritten by the next save).
    pub moved_to: Option<PathBuf>,
}

/// What loading found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The records (empty without a usable ledger).
    pub records: Vec<MachineRecord>,
    /// The orphans being retried (empty without a usable ledger).
    pub orphans: Vec<OrphanRecord>,
    /// Whether a ledger file existed at all (false on the first start after migrating).
    pub existed: bool,
    /// Set when the file was unusable and moved aside.
    pub set_aside: Option<SetAside>,
}

/// Why a save failed. The ledger on disk is then the previous one, unchanged.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Writing, syncing or renaming failed.
    #[error("machine ledger {path}: {action}: {source}; drover keeps running on its in-memory state, fix the directory's permissions or free space")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// Encoding failed (never expected).
    #[error("machine ledger {path}: cannot encode: {source}")]
    Encode {
        /// The ledger.
        path: PathBuf,
        /// The encoder's error.
        source: serde_json::Error,
    },
}

/// The ledger file of one config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerFile {
    path: PathBuf,
}

impl LedgerFile {
    /// The ledger beside `config` (`/etc/gitlab-runner/config.toml` →
    /// `/etc/gitlab-runner/.drover-machines.json`).
    pub fn beside(config: &Path) -> LedgerFile {
        let dir = config
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        LedgerFile {
            path: dir.join(FILE_NAME),
        }
    }

    /// A ledger at exactly `path`.
    pub fn at(path: impl Into<PathBuf>) -> LedgerFile {
        LedgerFile { path: path.into() }
    }

    /// The ledger's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the ledger. A missing file gives no records; an unreadable, oversized or
    /// unparsable one is set aside and gives no records. Never an error.
    pub fn load(&self) -> Loaded {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::default(),
            Err(e) => return self.set_aside(format!("cannot open it: {e}")),
        };
        let mut bytes = Vec::new();
        if let Err(e) = file.take(MAX_BYTES + 1).read_to_end(&mut bytes) {
            return self.set_aside(format!("cannot read it: {e}"));
        }
        if bytes.len() as u64 > MAX_BYTES {
            return self.set_aside(format!("it is larger than {MAX_BYTES} bytes"));
        }
        let parsed: FileFormat = match serde_json::from_slice(&bytes) {
            Ok(p) => p,
            Err(e) => return self.set_aside(format!("it does not parse ({e})")),
        };
        if parsed.version != FORMAT_VERSION {
            return self.set_aside(format!(
                "its format version {} is not {FORMAT_VERSION} (written by another drover release)",
                parsed.version
            ));
        }
        Loaded {
            records: parsed.machines,
            orphans: parsed.orphans,
            existed: true,
            set_aside: None,
        }
    }

    fn set_aside(&self, reason: String) -> Loaded {
        let stamp = Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
        let mut target = self.path.clone().into_os_string();
        target.push(format!(".corrupt-{stamp}"));
        let target = PathBuf::from(target);
        let moved_to = fs::rename(&self.path, &target).ok().map(|()| target);
        Loaded {
            records: Vec::new(),
            orphans: Vec::new(),
            existed: true,
            set_aside: Some(SetAside { reason, moved_to }),
        }
    }

    /// Replaces the ledger with `records` and `orphans`, atomically and durably.
    pub fn save(
        &self,
        records: &[MachineRecord],
        orphans: &[OrphanRecord],
    ) -> Result<(), LedgerError> {
        let body = serde_json::to_vec_pretty(&FileFormat {
            version: FORMAT_VERSION,
            machines: records.to_vec(),
            orphans: orphans.to_vec(),
        })
        .map_err(|source| LedgerError::Encode {
            path: self.path.clone(),
            source,
        })?;
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut tmp_name = self.path.clone().into_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = PathBuf::from(tmp_name);
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| LedgerError::Io {
                path,
                action,
                source,
            }
        };
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)
                .map_err(io("create the temporary file", &tmp))?;
            f.write_all(&body)
                .map_err(io("write the temporary file", &tmp))?;
            f.sync_all().map_err(io("fsync the temporary file", &tmp))?;
            fs::rename(&tmp, &self.path).map_err(io("rename over the ledger", &self.path))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
            return written;
        }
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("fsync the directory", dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn record(name: &str, state: MachineState, used: i64) -> MachineRecord {
        MachineRecord {
            name: name.into(),
            runner: Some("abcdefghi".into()),
            state,
            used_count: used,
            last_used: Utc.with_ymd_and_hms(2026, 11, 20, 10, 0, 0).unwrap(),
            removal_attempts: 2,
            retry_count: 1,
            reason: (state == MachineState::Removing).then_some(Reason::TooManyIdleMachines),
        }
    }

    #[test]
    fn it_lives_beside_the_config() {
        assert_eq!(
            LedgerFile::beside(Path::new("/etc/gitlab-runner/config.toml")).path(),
            Path::new("/etc/gitlab-runner/.drover-machines.json")
        );
        assert_eq!(
            LedgerFile::beside(Path::new("config.toml")).path(),
            Path::new("./.drover-machines.json")
        );
    }

    #[test]
    fn saved_records_load_back_and_saves_replace_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let l = LedgerFile::at(dir.path().join(FILE_NAME));
        assert_eq!(
            l.load(),
            Loaded::default(),
            "no file: nothing, not set aside"
        );
        let a = vec![
            record("m1", MachineState::Idle, 3),
            record("m2", MachineState::Removing, 1),
        ];
        l.save(&a, &[]).unwrap();
        let got = l.load();
        assert_eq!((got.records, got.existed, got.set_aside), (a, true, None));
        let b = vec![record("m3", MachineState::Used, 7)];
        l.save(&b, &[]).unwrap();
        assert_eq!(l.load().records, b);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![FILE_NAME.to_string()], "no temporary file left");
    }

    fn orphan(name: &str, failures: u32) -> OrphanRecord {
        OrphanRecord {
            name: name.into(),
            reason: Reason::TooManyBuilds,
            failures,
            next_retry: Utc.with_ymd_and_hms(2026, 11, 20, 10, 5, 0).unwrap(),
        }
    }

    #[test]
    fn orphans_are_saved_and_load_back_with_their_backoff() {
        let dir = tempfile::tempdir().unwrap();
        let l = LedgerFile::at(dir.path().join(FILE_NAME));
        let machines = vec![record("m1", MachineState::Idle, 3)];
        let orphans = vec![orphan("gone-1", 0), orphan("gone-2", 4)];
        l.save(&machines, &orphans).unwrap();
        let got = l.load();
        assert_eq!(got.set_aside, None);
        assert_eq!((got.records, got.orphans), (machines.clone(), orphans));
        l.save(&machines, &[]).unwrap();
        assert_eq!(
            l.load().orphans,
            vec![],
            "a resolved orphan leaves the file"
        );
        let e = OrphanEntry::from(&orphan("gone-3", 2));
        assert_eq!(e.failures, 2);
        assert_eq!(OrphanRecord::from(&e), orphan("gone-3", 2));
    }

    #[test]
    fn a_ledger_written_before_orphans_were_kept_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let l = LedgerFile::at(dir.path().join(FILE_NAME));
        fs::write(
            l.path(),
            br#"{"version":1,"machines":[{"name":"m1","runner":"abcdefghi","state":"idle","used_count":3,"last_used":"2026-11-20T10:00:00Z","removal_attempts":2,"retry_count":1}]}"#,
        )
        .unwrap();
        let got = l.load();
        assert_eq!(got.set_aside, None, "not set aside");
        assert_eq!(got.records, vec![record("m1", MachineState::Idle, 3)]);
        assert!(got.orphans.is_empty());
    }

    #[test]
    fn records_and_engine_inputs_convert_both_ways() {
        let r = record("m9", MachineState::Removing, 4);
        let restored = r.to_restored(Some(RunnerId(2)));
        assert_eq!(restored.runner, Some(RunnerId(2)));
        assert_eq!(MachineRecord::from_restored(&restored, r.runner.clone()), r);
    }

    #[test]
    fn a_crash_mid_write_leaves_the_previous_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let l = LedgerFile::at(dir.path().join(FILE_NAME));
        let a = vec![record("m1", MachineState::Idle, 3)];
        l.save(&a, &[]).unwrap();
        // What a crash between write and rename leaves: a partial temporary file.
        fs::write(dir.path().join(format!("{FILE_NAME}.tmp-999")), b"{\"vers").unwrap();
        assert_eq!(l.load().records, a);
        l.save(&[], &[]).unwrap();
        assert_eq!(l.load().records, vec![]);
    }

    #[test]
    fn a_corrupt_or_truncated_ledger_is_set_aside_with_its_bytes_and_reported() {
        for (what, bytes) in [
            ("truncated", &b"{\"version\":1,\"machines\":[{\"name\":\"m1\",\"st"[..]),
            ("garbage", &b"\x00\x01not json"[..]),
            ("bad state", &br#"{"version":1,"machines":[{"name":"m","state":"flying","used_count":1,"last_used":"2026-11-20T10:00:00Z"}]}"#[..]),
            ("newer", &br#"{"version":2,"machines":[]}"#[..]),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let l = LedgerFile::at(dir.path().join(FILE_NAME));
            fs::write(l.path(), bytes).unwrap();
            let got = l.load();
            assert!(got.records.is_empty(), "{what}");
            assert!(got.existed, "{what}");
            let aside = got.set_aside.unwrap_or_else(|| panic!("{what}: not set aside"));
            let moved = aside.moved_to.unwrap_or_else(|| panic!("{what}: not moved"));
            assert!(
                moved.file_name().unwrap().to_str().unwrap().starts_with(".drover-machines.json.corrupt-"),
                "{what}: {moved:?}"
            );
            assert_eq!(fs::read(&moved).unwrap(), bytes, "{what}: bytes kept for a post-mortem");
            assert!(!l.path().exists(), "{what}: the ledger path is free");
            assert_eq!(l.load(), Loaded::default(), "{what}: the next start begins fresh");
            if what == "newer" {
                assert!(aside.reason.contains("version 2"), "{}", aside.reason);
            }
        }
    }

    #[test]
    fn a_failed_save_says_where_and_keeps_the_old_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let l = LedgerFile::at(dir.path().join("missing-dir").join(FILE_NAME));
        let e = l
            .save(&[record("m1", MachineState::Idle, 1)], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing-dir"), "{e}");
        assert!(e.contains("temporary file"), "{e}");
    }
}
