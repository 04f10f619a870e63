//! `[runners.docker]` options that need work before they reach the Engine, resolved once per
//! job as upstream does when it builds a host config: `seccomp=<file>` security options are
//! read and sent inline, `log_options` are checked (`env` and `labels` only), `dns` entries
//! must be IP addresses, `isolation` must be the default on Linux, `mac_address` must be a MAC
//! address, and `gpus` / `service_gpus` are parsed with the Docker CLI's `--gpus` syntax into
//! device requests. A bad value fails the job as a configuration error naming the option.

use std::collections::HashMap;

use bollard::models::DeviceRequest;

use crate::executor::error::{FailureReason, JobFailure};
use crate::executor::settings::DockerSettings;

/// The largest seccomp profile read from a file.
const SECCOMP_LIMIT: u64 = 4 << 20;

fn config_error(msg: String) -> JobFailure {
    JobFailure::new(FailureReason::RunnerConfigurationError, msg)
}

/// `seccomp=<path>` entries read and inlined (`seccomp=<json>`); inline profiles,
/// `unconfined`, `builtin` and other options pass through.
pub fn inline_seccomp(options: &[String], key: &str) -> Result<Vec<String>, JobFailure> {
    options
        .iter()
        .map(|opt| {
            let Some(("seccomp", value)) = opt.split_once('=') else {
                return Ok(opt.clone());
            };
            if value.starts_with('{') || value == "unconfined" || value == "builtin" {
                return Ok(opt.clone());
            }
            let read = || -> Result<String, String> {
                use std::io::Read;
                let file = std::fs::File::open(value).map_err(|e| e.to_string())?;
                let mut text = String::new();
                file.take(SECCOMP_LIMIT + 1)
                    .read_to_string(&mut text)
                    .map_err(|e| e.to_string())?;
                if text.len() as u64 > SECCOMP_LIMIT {
                    return Err(format!("larger than {SECCOMP_LIMIT} bytes"));
                }
                serde_json::from_str::<serde_json::Value>(&text)
                    .map_err(|e| format!("not valid JSON: {e}"))?;
                Ok(text)
            };
            read().map(|json| format!("seccomp={json}")).map_err(|why| {
                config_error(format!(
                    "{key}: failed to read the seccomp profile {value:?} on the runner's host: {why}"
                ))
            })
        })
        .collect()
}

/// Whether `s` is a MAC address as Go's `net.ParseMAC` reads it (6, 8 or 20 octets, `:` or
/// `-` separated, or dotted groups of four hex digits).
pub fn is_mac_address(s: &str) -> bool {
    let hex = |g: &str, n: usize| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit());
    let octets = |sep: char| {
        let parts: Vec<&str> = s.split(sep).collect();
        matches!(parts.len(), 6 | 8 | 20) && parts.iter().all(|p| hex(p, 2))
    };
    let dotted = || {
        let parts: Vec<&str> = s.split('.').collect();
        matches!(parts.len(), 3 | 4 | 10) && parts.iter().all(|p| hex(p, 4))
    };
    octets(':') || octets('-') || dotted()
}

/// Splits one CSV record (double quotes group, `""` is a quote).
fn csv_fields(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', false) if field.is_empty() => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            (',', false) => out.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err("unclosed quote".into());
    }
    out.push(field);
    Ok(out)
}

/// Parses the Docker CLI's `--gpus` value (`all`, a count, or `count=`, `device=`, `driver=`,
/// `capabilities=`, `options=` fields) into a device request.
pub fn parse_gpus(value: &str) -> Result<DeviceRequest, String> {
    let count = |s: &str| -> Result<i64, String> {
        if s == "all" {
            return Ok(-1);
        }
        s.parse::<i64>()
            .map_err(|_| format!("invalid count ({s:?}): use \"all\" or a number"))
    };
    let mut req = DeviceRequest::default();
    let mut seen: Vec<String> = Vec::new();
    for field in csv_fields(value)? {
        let (key, val) = match field.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (field.clone(), None),
        };
        if seen.contains(&key) {
            return Err(format!("gpu request key {key:?} can be given only once"));
        }
        seen.push(key.clone());
        let Some(val) = val else {
            seen.push("count".into());
            req.count = Some(count(&key)?);
            continue;
        };
        match key.as_str() {
            "driver" => req.driver = Some(val),
            "count" => req.count = Some(count(&val)?),
            "device" => req.device_ids = Some(val.split(',').map(str::to_string).collect()),
            "capabilities" => {
                let mut caps: Vec<String> = val.split(',').map(str::to_string).collect();
                caps.push("gpu".into());
                req.capabilities = Some(vec![caps]);
            }
            "options" => {
                let mut options = HashMap::new();
                for kv in csv_fields(&val)? {
                    let (k, v) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
                    options.insert(k.to_string(), v.to_string());
                }
                req.options = Some(options);
            }
            other => return Err(format!("unexpected key '{other}' in '{field}'")),
        }
    }
    if !seen.iter().any(|k| k == "count") && req.device_ids.is_none() {
        req.count = Some(1);
    }
    req.options.get_or_insert_with(HashMap::new);
    req.capabilities
        .get_or_insert_with(|| vec![vec!["gpu".to_string()]]);
    Ok(req)
}

/// The settings a job runs with: `ds` with its seccomp files inlined, after checking the
/// options upstream refuses at container creation.
pub fn resolve(ds: &DockerSettings) -> Result<DockerSettings, JobFailure> {
    let mut out = ds.clone();
    out.security_opt = inline_seccomp(&ds.security_opt, "security_opt")?;
    out.services.security_opt = inline_seccomp(&ds.services.security_opt, "services_security_opt")?;
    let bad_keys: Vec<&str> = ds
        .log_options
        .keys()
        .map(String::as_str)
        .filter(|k| !matches!(*k, "env" | "labels"))
        .collect();
    if !bad_keys.is_empty() {
        // Upstream's text (Go's quoting of the two key lists), then where to fix it.
        let quoted: Vec<String> = bad_keys.iter().map(|k| format!("{k:?}")).collect();
        return Err(config_error(format!(
            "invalid log options: only [\"env\" \"labels\"] are allowed, but found: [{}]; fix \
             log_options in [runners.docker]",
            quoted.join(" ")
        )));
    }
    for dns in &ds.dns {
        if dns.parse::<std::net::IpAddr>().is_err() {
            return Err(config_error(format!(
                "invalid DNS server address {dns:?} in [runners.docker] dns: write an IP address"
            )));
        }
    }
    if let Some(iso) = ds.isolation.as_deref().filter(|i| *i != "default") {
        return Err(config_error(format!(
            "the isolation value {iso:?} is not valid. the valid values on Linux are: 'default' \
             and an empty string; fix isolation in [runners.docker]"
        )));
    }
    if let Some(mac) = ds.mac_address.as_deref().filter(|m| !is_mac_address(m)) {
        return Err(config_error(format!(
            "invalid MAC address {mac:?} in [runners.docker] mac_address"
        )));
    }
    for (name, value) in &ds.ulimit {
        let (soft, hard) = value.split_once(':').unwrap_or((value, value));
        if soft.trim().parse::<i64>().is_err() || hard.trim().parse::<i64>().is_err() {
            return Err(config_error(format!(
                "invalid ulimit {name} = {value:?} in [runners.docker] ulimit: write \
                 \"soft[:hard]\" with whole numbers"
            )));
        }
    }
    let device_lists = std::iter::once(("devices", &ds.devices)).chain(
        ds.services
            .devices
            .values()
            .map(|v| ("services_devices", v)),
    );
    for (key, list) in device_lists {
        if let Some(bad) = list.iter().find(|d| d.split(':').count() > 3) {
            return Err(config_error(format!(
                "failed to parse device string {bad:?}: too many colons; write \
                 host[:container[:permissions]] in [runners.docker] {key}"
            )));
        }
    }
    if let Some(bad) = ds
        .services
        .devices
        .keys()
        .find(|p| !crate::executor::glob::is_valid(p))
    {
        return Err(config_error(format!(
            "invalid service device image pattern: {bad} in [runners.docker] services_devices"
        )));
    }
    for (key, value) in [("gpus", &ds.gpus), ("service_gpus", &ds.services.gpus)] {
        if let Some(v) = value {
            parse_gpus(v)
                .map_err(|why| config_error(format!("parsing {key} string {v:?}: {why}")))?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_as_the_docker_cli() {
        let all = parse_gpus("all").unwrap();
        assert_eq!(all.count, Some(-1));
        assert_eq!(all.capabilities, Some(vec![vec!["gpu".to_string()]]));
        let two = parse_gpus("\"device=0,1\",driver=nvidia").unwrap();
        assert_eq!(two.device_ids, Some(vec!["0".into(), "1".into()]));
        assert_eq!(two.count, None);
        assert_eq!(two.driver.as_deref(), Some("nvidia"));
        assert_eq!(parse_gpus("driver=x").unwrap().count, Some(1));
        assert!(parse_gpus("count=2,count=3").is_err());
        assert!(parse_gpus("bogus=1").is_err());
        assert!(parse_gpus("many").is_err());
    }

    #[test]
    fn mac_addresses() {
        assert!(is_mac_address("92:d0:c6:0a:29:33"));
        assert!(is_mac_address("92-d0-c6-0a-29-33"));
        assert!(is_mac_address("0000.5e00.5301"));
        assert!(!is_mac_address("92:d0:c6:0a:29"));
        assert!(!is_mac_address("zz:d0:c6:0a:29:33"));
    }

    #[test]
    fn seccomp_files_are_inlined() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.json");
        std::fs::write(&file, r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#).unwrap();
        let opts = vec![
            format!("seccomp={}", file.display()),
            "seccomp=unconfined".to_string(),
            "no-new-privileges".to_string(),
        ];
        let out = inline_seccomp(&opts, "security_opt").unwrap();
        assert_eq!(out[0], r#"seccomp={"defaultAction":"SCMP_ACT_ALLOW"}"#);
        assert_eq!(out[1..], opts[1..]);
        std::fs::write(&file, "not json").unwrap();
        assert!(inline_seccomp(&opts, "security_opt").is_err());
        let missing = vec!["seccomp=/nonexistent/profile.json".to_string()];
        assert!(inline_seccomp(&missing, "security_opt").is_err());
    }
}
