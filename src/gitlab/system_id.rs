//! The runner manager's `system_id` (spec §2), kept in `.runner_system_id` beside the config.

use std::path::{Path, PathBuf};

use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// The file name, beside `config.toml`.
pub const FILE_NAME: &str = ".runner_system_id";

/// Whether `id` has the form GitLab accepts: `s_` or `r_` and 12 alphanumerics.
pub fn is_valid(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.len() == 14
        && (bytes[0] == b's' || bytes[0] == b'r')
        && bytes[1] == b'_'
        && bytes[2..].iter().all(u8::is_ascii_alphanumeric)
}

/// `s_` + the first 12 hex characters of HMAC-SHA256(key = machine-id, "gitlab-runner").
pub fn from_machine_id(machine_id: &str) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match hmac::Hmac::<Sha256>::new_from_slice(machine_id.trim().as_bytes()) {
        Ok(m) => m,
        Err(_) => return random(),
    };
    mac.update(b"gitlab-runner");
    let digest = hex::encode(mac.finalize().into_bytes());
    format!("s_{}", &digest[..12])
}

/// `r_` + 12 random alphanumerics: the fallback without a machine-id.
pub fn random() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    format!("r_{}", Alphanumeric.sample_string(&mut rand::rng(), 12))
}

/// The path of the ID file for a config file.
pub fn path_for(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(FILE_NAME)
}

fn machine_id() -> Option<String> {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .find(|s| !s.is_empty())
}

/// Reads the ID beside `config_path`, or creates one (from the machine-id, else random) and
/// tries to save it; a failed write is only a warning, as upstream.
pub fn load_or_create(config_path: &Path) -> String {
    let path = path_for(config_path);
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim();
        if is_valid(id) {
            return id.to_owned();
        }
        tracing::warn!(file = %path.display(), "the system ID file holds no valid ID; making a new one");
    }
    let id = machine_id().map_or_else(random, |m| from_machine_id(&m));
    if let Err(e) = std::fs::write(&path, &id) {
        tracing::warn!(file = %path.display(), error = %e, "could not save the system ID");
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let s = from_machine_id("0123456789abcdef0123456789abcdef");
        assert!(is_valid(&s), "{s}");
        assert!(s.starts_with("s_"));
        assert_eq!(s, from_machine_id("0123456789abcdef0123456789abcdef\n"));
        let r = random();
        assert!(is_valid(&r) && r.starts_with("r_"), "{r}");
        assert!(!is_valid("s_short"));
        assert!(!is_valid("x_0123456789ab"));
    }

    #[test]
    fn persisted_beside_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config.toml");
        let a = load_or_create(&cfg);
        assert!(is_valid(&a));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap(),
            a
        );
        assert_eq!(load_or_create(&cfg), a);
        std::fs::write(dir.path().join(FILE_NAME), "r_ABCDEFghijkl\n").unwrap();
        assert_eq!(load_or_create(&cfg), "r_ABCDEFghijkl");
    }
}
