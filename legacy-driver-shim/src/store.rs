//! The docker-machine store on disk: where it is, which machines it holds, what their
//! `config.json` says.
//!
//! Listing scans `<store>/machines/` (every non-hidden directory is a machine) and inspect
//! parses `config.json`; neither runs a process, exactly as GitLab Runner does. The store root
//! is resolved as docker-machine resolves it: an explicit path, else `$MACHINE_STORAGE_PATH`,
//! else `$HOME/.docker/machine`. This module never writes to the store (the SSH host-key pin
//! is written by `ssh.rs`).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use drover_protocol::InspectResult;

/// The google driver's `config.json` `Driver` fields reported as metric labels, with the
/// label names they get.
pub const GOOGLE_LABELS: [(&str, &str); 9] = [
    ("Zone", "zone"),
    ("MachineType", "machine_type"),
    ("Project", "project"),
    ("ResolvedZone", "resolved_zone"),
    ("ResolvedMachineType", "resolved_machine_type"),
    ("InstanceGroupManager", "instance_group_manager"),
    (
        "RegionInstanceGroupManager",
        "region_instance_group_manager",
    ),
    ("BulkInsert", "bulk_insert"),
    ("Region", "region"),
];

/// A docker-machine store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    root: PathBuf,
}

/// Why a store read failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The machine directory does not exist.
    #[error("machine {0:?} does not exist in the docker-machine store")]
    NotFound(String),
    /// Reading failed.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// `config.json` is not valid JSON.
    #[error("{} is not a valid machine record: {message}", .path.display())]
    Parse {
        /// The path.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// `machines` exists but is not a directory.
    #[error("{} is not a directory; fix the docker-machine store", .0.display())]
    NotADirectory(PathBuf),
}

impl Store {
    /// The store at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Store { root: root.into() }
    }

    /// Resolves the store root: `explicit`, else `machine_storage_path`, else
    /// `home/.docker/machine`. Empty values count as unset.
    pub fn resolve(
        explicit: Option<&Path>,
        machine_storage_path: Option<&str>,
        home: Option<&str>,
    ) -> Option<Self> {
        // A relative store is made absolute (as docker-machine does), so `cert_dir` and every
        // path the shim reports stay valid wherever drover runs.
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        if let Some(p) = explicit.filter(|p| !p.as_os_str().is_empty()) {
            return Some(Store::new(absolute(p)));
        }
        if let Some(p) = machine_storage_path.filter(|p| !p.is_empty()) {
            return Some(Store::new(absolute(Path::new(p))));
        }
        home.filter(|h| !h.is_empty())
            .map(|h| Store::new(Path::new(h).join(".docker").join("machine")))
    }

    /// Whether `certs/` holds the four files docker-machine's certificate bootstrap writes
    /// (`ca.pem`, `ca-key.pem`, `cert.pem`, `key.pem`), each non-empty.
    pub fn certs_complete(&self) -> bool {
        let certs = self.root.join("certs");
        ["ca.pem", "ca-key.pem", "cert.pem", "key.pem"]
            .iter()
            .all(|f| std::fs::metadata(certs.join(f)).is_ok_and(|m| m.is_file() && m.len() > 0))
    }

    /// Takes the exclusive `flock` on the store's `certs/` directory (creating it), without
    /// waiting: `Ok(None)` when another process holds it. Every shim bootstraps the store's
    /// certificates under this lock, so two shim processes on one store (two drover instances,
    /// two `MachineDriver`s) never race docker-machine's unlocked first-create bootstrap; a lock
    /// on the directory itself is the one docker-machine would take if it took one.
    pub fn try_lock_certs(&self) -> std::io::Result<Option<CertsLock>> {
        use std::os::fd::AsRawFd;
        let dir = self.root.join("certs");
        std::fs::create_dir_all(&dir)?;
        let file = std::fs::File::open(&dir)?;
        // SAFETY: flock on a descriptor we own; it is released when `file` closes.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(Some(CertsLock(file)));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        }
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<store>/machines/NAME`.
    pub fn machine_dir(&self, name: &str) -> PathBuf {
        self.root.join("machines").join(name)
    }

    /// Whether `<store>/machines/NAME` exists.
    pub fn has_dir(&self, name: &str) -> bool {
        self.machine_dir(name).is_dir()
    }

    /// Whether `<store>/machines/NAME/config.json` exists (upstream's pre-check of `Exist`).
    pub fn has_config(&self, name: &str) -> bool {
        self.machine_dir(name).join("config.json").is_file()
    }

    /// Every machine name: non-hidden directories under `machines/`, sorted. A missing
    /// `machines/` is an empty store.
    pub fn list(&self) -> Result<Vec<String>, StoreError> {
        let dir = self.root.join("machines");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) if dir.exists() && !dir.is_dir() => {
                let _ = e;
                return Err(StoreError::NotADirectory(dir));
            }
            Err(source) => return Err(StoreError::Io { path: dir, source }),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| StoreError::Io {
                path: dir.clone(),
                source,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if entry.path().is_dir() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Driver name and metric labels from `config.json`, without running docker-machine.
    pub fn inspect(&self, name: &str) -> Result<InspectResult, StoreError> {
        let v = self.config(name)?;
        let driver = v
            .get("DriverName")
            .and_then(|d| d.as_str())
            .unwrap_or_default()
            .to_string();
        let mut labels = BTreeMap::new();
        if driver == "google" {
            if let Some(d) = v.get("Driver") {
                for (field, label) in GOOGLE_LABELS {
                    let value = match d.get(field) {
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(serde_json::Value::Null) | None => continue,
                        Some(other) => other.to_string(),
                    };
                    labels.insert(label.to_string(), value);
                }
            }
        }
        Ok(InspectResult { driver, labels })
    }

    /// How to log in to the machine: `Driver.IPAddress`, `.SSHPort` (22 when absent),
    /// `.SSHUser` (`root` when absent) and `.SSHKeyPath` from `config.json`.
    pub fn ssh_login(&self, name: &str) -> Result<SshLogin, StoreError> {
        let v = self.config(name)?;
        let path = self.machine_dir(name).join("config.json");
        let d = v.get("Driver");
        let text = |k: &str| {
            d.and_then(|d| d.get(k))
                .and_then(|x| x.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let missing = |field: &str| StoreError::Parse {
            path: path.clone(),
            message: format!("Driver.{field} is empty; the machine cannot be reached over SSH"),
        };
        let ip = text("IPAddress");
        if ip.is_empty() {
            return Err(missing("IPAddress"));
        }
        let key_path = text("SSHKeyPath");
        if key_path.is_empty() {
            return Err(missing("SSHKeyPath"));
        }
        let port = match d.and_then(|d| d.get("SSHPort")).and_then(|p| p.as_u64()) {
            None | Some(0) => 22,
            Some(p) => u16::try_from(p).map_err(|_| StoreError::Parse {
                path: path.clone(),
                message: format!("Driver.SSHPort {p} is not a port"),
            })?,
        };
        let user = Some(text("SSHUser"))
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "root".to_string());
        Ok(SshLogin {
            ip,
            port,
            user,
            key_path: PathBuf::from(key_path),
        })
    }

    fn config(&self, name: &str) -> Result<serde_json::Value, StoreError> {
        if !self.has_dir(name) {
            return Err(StoreError::NotFound(name.to_string()));
        }
        let path = self.machine_dir(name).join("config.json");
        let text = drover_protocol::bounded::read_file_string(
            &path,
            drover_protocol::bounded::MAX_SMALL_FILE,
        )
        .map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| StoreError::Parse {
            path: path.clone(),
            message: e.to_string(),
        })
    }
}

/// A machine's SSH login details from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshLogin {
    /// `Driver.IPAddress`.
    pub ip: String,
    /// `Driver.SSHPort`.
    pub port: u16,
    /// `Driver.SSHUser`.
    pub user: String,
    /// `Driver.SSHKeyPath`.
    pub key_path: PathBuf,
}

impl SshLogin {
    /// `ip:port` (`[v6]:port`).
    pub fn address(&self) -> String {
        if self.ip.contains(':') {
            format!("[{}]:{}", self.ip, self.port)
        } else {
            format!("{}:{}", self.ip, self.port)
        }
    }
}

/// Whether `name` is a valid docker-machine host name (`[a-zA-Z0-9][a-zA-Z0-9.-]*`). Names are
/// path components in the store, so anything else is refused before touching the disk.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_resolution_order() {
        let s = Store::resolve(None, Some("/srv/dm"), Some("/home/u")).unwrap();
        assert_eq!(s.root(), Path::new("/srv/dm"));
        let s = Store::resolve(None, Some(""), Some("/home/u")).unwrap();
        assert_eq!(s.root(), Path::new("/home/u/.docker/machine"));
        let s = Store::resolve(Some(Path::new("/x")), Some("/srv/dm"), None).unwrap();
        assert_eq!(s.root(), Path::new("/x"));
        assert!(Store::resolve(None, None, None).is_none());
    }

    /// The shim itself reports store paths (`rm` names the directory left behind, and
    /// docker-machine gets the root as MACHINE_STORAGE_PATH), so a relative store given by flag
    /// or environment is made absolute against the shim's working directory at start.
    #[test]
    fn a_relative_store_is_made_absolute() {
        let cwd = std::env::current_dir().unwrap();
        let s = Store::resolve(Some(Path::new("store")), None, None).unwrap();
        assert_eq!(s.root(), cwd.join("store"));
        assert_eq!(
            s.machine_dir("m"),
            cwd.join("store").join("machines").join("m")
        );
        let s = Store::resolve(None, Some("dm/store"), Some("/home/u")).unwrap();
        assert_eq!(s.root(), cwd.join("dm").join("store"));
    }

    #[test]
    fn names_are_hostnames() {
        assert!(valid_name("runner-abc-auto-1-0a0b0c0d"));
        assert!(valid_name("a.b-c"));
        for bad in ["", "-x", ".x", "..", "a/b", "a b", "a;rm", "é"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}

/// The held `flock` of [`Store::try_lock_certs`]; dropping it releases the lock.
#[derive(Debug)]
pub struct CertsLock(#[allow(dead_code)] std::fs::File);
