//! `[runners.docker]`: how job containers are made on a machine's Docker Engine.
//!
//! Data only, with upstream's TOML key names. The executor reads it; nothing here talks to
//! Docker. For docker+machine, `host`, `tls_cert_path` and `tls_verify` are replaced by the
//! machine's own credentials at job time, as upstream does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[runners.docker]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerConfig {
    /// `host`: Docker endpoint (ignored for docker+machine).
    pub host: String,
    /// `tls_cert_path` (ignored for docker+machine).
    pub tls_cert_path: String,
    /// `tls_verify` (ignored for docker+machine).
    pub tls_verify: bool,
    /// `hostname`: custom container hostname.
    pub hostname: String,
    /// `image`: default job image.
    pub image: String,
    /// `runtime`.
    pub runtime: String,
    /// `memory`, e.g. `"2g"`.
    pub memory: String,
    /// `memory_swap`.
    pub memory_swap: String,
    /// `memory_reservation`.
    pub memory_reservation: String,
    /// `cgroup_parent`.
    pub cgroup_parent: String,
    /// `cpuset_cpus`.
    pub cpuset_cpus: String,
    /// `cpuset_mems`.
    pub cpuset_mems: String,
    /// `cpus`, a decimal number of CPUs as a string.
    pub cpus: String,
    /// `cpu_shares`.
    pub cpu_shares: i64,
    /// `dns`.
    pub dns: Vec<String>,
    /// `dns_search`.
    pub dns_search: Vec<String>,
    /// `privileged`.
    pub privileged: bool,
    /// `services_privileged` (defaults to `privileged`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services_privileged: Option<bool>,
    /// `disable_entrypoint_overwrite`.
    pub disable_entrypoint_overwrite: bool,
    /// `user`.
    pub user: String,
    /// `allowed_users`.
    pub allowed_users: Vec<String>,
    /// `group_add`.
    pub group_add: Vec<String>,
    /// `userns_mode`.
    pub userns_mode: String,
    /// `cap_add`.
    pub cap_add: Vec<String>,
    /// `cap_drop`.
    pub cap_drop: Vec<String>,
    /// `oom_kill_disable`.
    pub oom_kill_disable: bool,
    /// `oom_score_adjust`.
    pub oom_score_adjust: i64,
    /// `security_opt`.
    pub security_opt: Vec<String>,
    /// `services_security_opt`.
    pub services_security_opt: Vec<String>,
    /// `devices`.
    pub devices: Vec<String>,
    /// `device_cgroup_rules`.
    pub device_cgroup_rules: Vec<String>,
    /// `gpus`.
    pub gpus: String,
    /// `services_devices`: image pattern → devices.
    pub services_devices: BTreeMap<String, Vec<String>>,
    /// `disable_cache`.
    pub disable_cache: bool,
    /// `volumes`.
    pub volumes: Vec<String>,
    /// `volume_driver`.
    pub volume_driver: String,
    /// `volume_driver_ops`.
    pub volume_driver_ops: BTreeMap<String, String>,
    /// `cache_dir`.
    pub cache_dir: String,
    /// `extra_hosts`.
    pub extra_hosts: Vec<String>,
    /// `volumes_from`.
    pub volumes_from: Vec<String>,
    /// `network_mode`.
    pub network_mode: String,
    /// `ipcmode`.
    pub ipcmode: String,
    /// `mac_address`.
    pub mac_address: String,
    /// `links`.
    pub links: Vec<String>,
    /// `[[runners.docker.services]]`.
    pub services: Vec<DockerService>,
    /// `services_limit` (unset means no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services_limit: Option<i64>,
    /// `service_memory`.
    pub service_memory: String,
    /// `service_memory_swap`.
    pub service_memory_swap: String,
    /// `service_memory_reservation`.
    pub service_memory_reservation: String,
    /// `service_cgroup_parent`.
    pub service_cgroup_parent: String,
    /// `service_slot_cgroup_template`.
    pub service_slot_cgroup_template: String,
    /// `service_cpuset_cpus`.
    pub service_cpuset_cpus: String,
    /// `service_cpus`.
    pub service_cpus: String,
    /// `service_cpu_shares`.
    pub service_cpu_shares: i64,
    /// `service_gpus`.
    pub service_gpus: String,
    /// `wait_for_services_timeout` in seconds (0 means upstream's default, 30).
    pub wait_for_services_timeout: i64,
    /// `allowed_images`.
    pub allowed_images: Vec<String>,
    /// `allowed_privileged_images`.
    pub allowed_privileged_images: Vec<String>,
    /// `allowed_privileged_services`.
    pub allowed_privileged_services: Vec<String>,
    /// `allowed_pull_policies`.
    pub allowed_pull_policies: Vec<String>,
    /// `allowed_services`.
    pub allowed_services: Vec<String>,
    /// `pull_policy`: a string or a list of strings upstream; always a list here.
    pub pull_policy: Vec<String>,
    /// `isolation` (Windows only).
    pub isolation: String,
    /// `shm_size` in bytes.
    pub shm_size: i64,
    /// `tmpfs`: path → mount options for the build container.
    pub tmpfs: BTreeMap<String, String>,
    /// `services_tmpfs`.
    pub services_tmpfs: BTreeMap<String, String>,
    /// `sysctls`.
    pub sysctls: BTreeMap<String, String>,
    /// `helper_image`.
    pub helper_image: String,
    /// `helper_image_flavor`.
    pub helper_image_flavor: String,
    /// `container_labels`.
    pub container_labels: BTreeMap<String, String>,
    /// `enable_ipv6`.
    pub enable_ipv6: bool,
    /// `ulimit`: name → `soft[:hard]`.
    pub ulimit: BTreeMap<String, String>,
    /// `network_mtu`.
    pub network_mtu: i64,
    /// `log_options`.
    pub log_options: BTreeMap<String, String>,
    /// `pid_mode` (build container only).
    pub pid_mode: String,
    /// `volume_keep`: keep anonymous volumes when containers are removed.
    pub volume_keep: bool,
}

/// One `[[runners.docker.services]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerService {
    /// `name`: the service image.
    pub name: String,
    /// `alias`: space- or comma-separated aliases.
    pub alias: String,
    /// `command`.
    pub command: Vec<String>,
    /// `entrypoint`.
    pub entrypoint: Vec<String>,
    /// `environment`: `KEY=value` entries.
    pub environment: Vec<String>,
    /// `suspend_data_path`: read, not used (drover does not suspend services).
    pub suspend_data_path: String,
}

impl DockerService {
    /// The aliases, split on spaces and commas.
    pub fn aliases(&self) -> Vec<&str> {
        self.alias
            .split([' ', ','])
            .filter(|s| !s.is_empty())
            .collect()
    }
}

/// Parses a Docker memory size as the Docker CLI does (`RAMInBytes`): a decimal number, an
/// optional space, and an optional binary unit `k`, `m`, `g`, `t` or `p` (any case, optionally
/// followed by `i` and/or `b`): `512m`, `1.5g`, `1024`, `2 GiB`. Anything else, and any value
/// beyond `i64::MAX` bytes, is an error saying why: `"1e400g"`, `"-5m"` and `"NaN"` must never
/// silently mean "no limit".
pub fn parse_docker_size(value: &str) -> Result<i64, String> {
    let s = value.as_bytes();
    let digits_end = s
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'.'))
        .unwrap_or(s.len());
    let number = &value[..digits_end];
    let number_ok = !number.is_empty()
        && number.split('.').all(|part| !part.is_empty())
        && number.starts_with(|c: char| c.is_ascii_digit());
    let unit = value[digits_end..]
        .strip_prefix(' ')
        .unwrap_or(&value[digits_end..]);
    let unit = unit.to_ascii_lowercase();
    let (letter, rest) = match unit.as_bytes().first() {
        Some(b @ (b'k' | b'm' | b'g' | b't' | b'p')) => (Some(*b), &unit[1..]),
        _ => (None, unit.as_str()),
    };
    let rest = rest.strip_prefix('i').unwrap_or(rest);
    let rest = rest.strip_prefix('b').unwrap_or(rest);
    let bad = || {
        format!(
            "{value:?} is not a Docker size: write a whole or decimal number with an optional unit k, m, g, t or p (e.g. \"512m\", \"1.5g\")"
        )
    };
    if !number_ok || !rest.is_empty() {
        return Err(bad());
    }
    let n: f64 = number.parse().map_err(|_| bad())?;
    let factor = match letter {
        None => 1.0,
        Some(b'k') => 1024f64,
        Some(b'm') => 1024f64.powi(2),
        Some(b'g') => 1024f64.powi(3),
        Some(b't') => 1024f64.powi(4),
        _ => 1024f64.powi(5),
    };
    let bytes = n * factor;
    if !bytes.is_finite() || bytes >= i64::MAX as f64 {
        return Err(format!(
            "{value:?} is more bytes than Docker can hold (at most {} bytes)",
            i64::MAX
        ));
    }
    Ok(bytes as i64)
}

/// Parses a Docker `cpus` value into billionths of a CPU (`NanoCPUs`): a positive decimal number
/// of CPUs with at most 9 decimal places (`"1.5"`, `"0.25"`, `"2"`), or, as upstream reads it
/// (a rational number), a fraction of two whole numbers (`"1/3"` is 333333333, rounded down).
/// An exponent, a sign, `"NaN"` or too much precision is an error.
pub fn parse_docker_cpus(value: &str) -> Result<i64, String> {
    if let Some((num, den)) = value.split_once('/') {
        let whole = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let bad = || {
            format!("{value:?} is not a number of CPUs: write a fraction of two whole numbers such as \"1/3\", or a decimal such as \"1.5\"")
        };
        if !whole(num) || !whole(den) {
            return Err(bad());
        }
        let too_many = || format!("{value:?} is more CPUs than Docker can count");
        let num: i128 = num.parse().map_err(|_| too_many())?;
        let den: i128 = den.parse().map_err(|_| bad())?;
        if den == 0 {
            return Err(format!("{value:?} divides by zero"));
        }
        let nanos = num
            .checked_mul(1_000_000_000)
            .map(|n| n / den)
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(too_many)?;
        if nanos == 0 {
            return Err(format!(
                "{value:?} CPUs is less than a billionth of a CPU: leave cpus unset for no limit"
            ));
        }
        return Ok(nanos);
    }
    let bad = || {
        format!(
            "{value:?} is not a number of CPUs: write a decimal number such as \"1.5\" or \"2\""
        )
    };
    let (whole, frac) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits(whole)
        || !digits(frac)
        || (value.contains('.') && frac.is_empty())
    {
        return Err(bad());
    }
    if frac.len() > 9 {
        return Err(format!(
            "{value:?} is too precise: Docker counts CPUs in billionths (at most 9 decimal places)"
        ));
    }
    let too_many = || format!("{value:?} is more CPUs than Docker can count");
    let whole: i64 = whole.parse().map_err(|_| too_many())?;
    let frac_nanos: i64 = format!("{frac:0<9}").parse().map_err(|_| bad())?;
    let nanos = whole
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(frac_nanos))
        .ok_or_else(too_many)?;
    if nanos == 0 {
        return Err(format!(
            "{value:?} CPUs is no CPU at all: leave cpus unset for no limit"
        ));
    }
    Ok(nanos)
}

/// Checks a Docker cpuset (`cpuset_cpus`, `cpuset_mems`): comma-separated CPU numbers or
/// ranges `a-b` with `a <= b`, as the Engine parses them (`"0-3,5"`).
pub fn check_docker_cpuset(value: &str) -> Result<(), String> {
    let bad = |why: &str| {
        format!("{value:?} is not a cpuset ({why}): write numbers and ranges such as \"0-3,5\"")
    };
    for part in value.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| -> Result<u32, String> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(&format!("{part:?} is not a number or range")));
            }
            s.parse().map_err(|_| bad(&format!("{s} is too large")))
        };
        if num(a)? > num(b)? {
            return Err(bad(&format!("range {part:?} runs backwards")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_docker_reads_them() {
        assert_eq!(parse_docker_size("512m"), Ok(512 << 20));
        assert_eq!(parse_docker_size("1.5g"), Ok(1536 << 20));
        assert_eq!(parse_docker_size("1024"), Ok(1024));
        assert_eq!(parse_docker_size("2 GiB"), Ok(2 << 30));
        assert_eq!(parse_docker_size("64KB"), Ok(64 << 10));
        for bad in [
            "1e400g",
            "-5m",
            "NaN",
            "inf",
            "",
            " 5m",
            "5mm",
            "5x",
            ".5m",
            "5.m",
            "1..2m",
            "99999999999p",
            "+5m",
            "0x10",
        ] {
            assert!(parse_docker_size(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn cpus_as_docker_reads_them() {
        assert_eq!(parse_docker_cpus("1.5"), Ok(1_500_000_000));
        assert_eq!(parse_docker_cpus("2"), Ok(2_000_000_000));
        assert_eq!(parse_docker_cpus("0.000000001"), Ok(1));
        assert_eq!(parse_docker_cpus("1/3"), Ok(333_333_333));
        assert_eq!(parse_docker_cpus("3/2"), Ok(1_500_000_000));
        for bad in [
            "NaN",
            "-1",
            "1e3",
            "1/0",
            "1.5/2",
            "-1/3",
            "/3",
            "0/3",
            "",
            "1.",
            ".5",
            "0",
            "0.0",
            "1.0000000001",
            "inf",
            "99999999999999999999",
        ] {
            assert!(parse_docker_cpus(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn cpusets() {
        assert!(check_docker_cpuset("0-3,5").is_ok());
        assert!(check_docker_cpuset("0").is_ok());
        for bad in ["", "3-1", "a", "1,,2", "-1", "0-"] {
            assert!(check_docker_cpuset(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
