//! Time zone names: IANA lookup for `Timezone`, and the host zone for `""`/`"Local"`.
//!
//! The host lookup follows Go's `time.Local` on Unix: `TZ` unset → `/etc/localtime`;
//! `TZ=""` → UTC; `TZ=":name"` or `TZ="name"` → that zone; `TZ="/path"` → that file. A zone
//! file is named by where it lives (a symlink into a `zoneinfo` directory), or failing that by
//! comparing its bytes with `/etc/timezone`'s zone and then with the files under the zoneinfo
//! directory. If nothing names a zone drover knows, the result is UTC with a note, as Go falls
//! back to UTC. [`detect_host_zone`] takes all inputs as arguments so it can be tested; only
//! `host_zone` (called by `TimePeriod::compile`) reads the real environment.

use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono_tz::Tz;

use super::PeriodError;
use crate::bounded::MAX_SMALL_FILE;

/// The host's zone as detected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostZone {
    /// The zone.
    pub tz: Tz,
    /// Its IANA name.
    pub name: String,
    /// Set when detection fell back to UTC, saying why.
    pub note: Option<String>,
}

impl HostZone {
    fn utc(note: Option<String>) -> HostZone {
        HostZone {
            tz: Tz::UTC,
            name: "UTC".to_string(),
            note,
        }
    }

    fn named(name: &str) -> Option<HostZone> {
        let tz = Tz::from_str(name).ok()?;
        Some(HostZone {
            tz,
            name: name.to_string(),
            note: None,
        })
    }
}

/// Parses a `Timezone` value (not `""`/`"Local"`) as an IANA name.
pub(super) fn parse_zone(name: &str) -> Result<Tz, PeriodError> {
    if let Ok(tz) = Tz::from_str(name) {
        return Ok(tz);
    }
    // Go reads `posix/Area/City` from the zoneinfo tree's `posix` copy: the same data.
    if let Some(tz) = name
        .strip_prefix("posix/")
        .and_then(|n| Tz::from_str(n).ok())
    {
        return Ok(tz);
    }
    let lower = name.to_ascii_lowercase();
    let close = chrono_tz::TZ_VARIANTS
        .iter()
        .find(|z| z.name().to_ascii_lowercase() == lower)
        .map(|z| z.name());
    let close = close.or_else(|| nearest_zone(name));
    let trimmed = name.trim();
    let hint = match close {
        _ if trimmed != name && Tz::from_str(trimmed).is_ok() => {
            format!("remove the surrounding spaces: \"{trimmed}\"")
        }
        Some(n) if n.eq_ignore_ascii_case(name) => {
            format!("names are case-sensitive; write \"{n}\"")
        }
        Some(n) => {
            format!("did you mean \"{n}\"? (IANA zone names, e.g. \"Europe/Berlin\", \"UTC\")")
        }
        None => "use an IANA zone name such as \"Europe/Berlin\" or \"UTC\", or leave it empty \
                 (or \"Local\") for the host's zone"
            .to_string(),
    };
    Err(PeriodError::UnknownZone {
        name: name.to_string(),
        hint,
    })
}

/// The zone name within edit distance 2 of `name`, if there is exactly one best candidate.
fn nearest_zone(name: &str) -> Option<&'static str> {
    if name.chars().count() > 64 {
        return None;
    }
    let target: Vec<char> = name.to_ascii_lowercase().chars().collect();
    let mut best: Option<(usize, &'static str)> = None;
    for z in chrono_tz::TZ_VARIANTS.iter() {
        let cand: Vec<char> = z.name().to_ascii_lowercase().chars().collect();
        if cand.len().abs_diff(target.len()) > 2 {
            continue;
        }
        let d = edit_distance(&target, &cand);
        if d <= 2 && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, z.name()));
        }
    }
    best.map(|(_, n)| n)
}

fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev.get(j).copied().unwrap_or(0) + usize::from(ca != cb);
            let del = prev.get(j + 1).copied().unwrap_or(0) + 1;
            let ins = cur.get(j).copied().unwrap_or(0) + 1;
            if let Some(slot) = cur.get_mut(j + 1) {
                *slot = sub.min(del).min(ins);
            }
        }
        prev = cur;
    }
    prev.last().copied().unwrap_or(0)
}

/// The zone name implied by a path inside a zoneinfo tree (`…/zoneinfo/Europe/Berlin`).
fn name_from_path(path: &Path) -> Option<String> {
    let s = path.to_str()?;
    let idx = s.rfind("zoneinfo/")?;
    let rest = &s[idx + "zoneinfo/".len()..];
    let rest = rest
        .strip_prefix("posix/")
        .or_else(|| rest.strip_prefix("right/"))
        .unwrap_or(rest);
    Tz::from_str(rest).ok().map(|_| rest.to_string())
}

/// Reads a zone file or `/etc/timezone`, at most [`MAX_SMALL_FILE`] bytes: a path such as
/// `TZ=:/dev/zero` never ends.
fn read_small(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match crate::bounded::read_file(path, MAX_SMALL_FILE) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => Err(e.to_string()),
        Err(_) => Ok(None),
    }
}

/// Finds a zone name for a TZif file: by its (resolved) path, then by content. An error when
/// the file, or `/etc/timezone`, is larger than any zone file.
fn name_for_file(
    file: &Path,
    zoneinfo: &Path,
    timezone_file: &Path,
) -> Result<Option<String>, String> {
    if let Some(n) = fs::canonicalize(file)
        .ok()
        .as_deref()
        .and_then(name_from_path)
    {
        return Ok(Some(n));
    }
    // A symlink whose target path names the zone even if the tree is elsewhere.
    if let Some(n) = fs::read_link(file).ok().as_deref().and_then(name_from_path) {
        return Ok(Some(n));
    }
    let Some(bytes) = read_small(file)? else {
        return Ok(None);
    };
    let named = read_small(timezone_file)?
        .and_then(|b| String::from_utf8(b).ok())
        .map(|s| s.trim().to_string())
        .filter(|n| Tz::from_str(n).is_ok());
    if let Some(named) = &named {
        if read_small(&zoneinfo.join(named)).ok().flatten().as_deref() == Some(&bytes[..]) {
            return Ok(Some(named.clone()));
        }
    }
    let mut stack: Vec<PathBuf> = vec![zoneinfo.to_path_buf()];
    let mut found: Vec<String> = Vec::new();
    while let Some(dir) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for ent in rd.flatten() {
            let p = ent.path();
            let Ok(ft) = ent.file_type() else { continue };
            if ft.is_dir() {
                let skip = matches!(
                    p.file_name().and_then(|n| n.to_str()),
                    Some("posix" | "right")
                );
                if !skip {
                    stack.push(p);
                }
            } else if ent.metadata().map(|m| m.len()).ok() == Some(bytes.len() as u64)
                && read_small(&p).ok().flatten().as_deref() == Some(&bytes[..])
            {
                if let Some(rel) = p.strip_prefix(zoneinfo).ok().and_then(|r| r.to_str()) {
                    if Tz::from_str(rel).is_ok() {
                        found.push(rel.to_string());
                    }
                }
            }
        }
    }
    // Zones with identical data behave identically; pick a stable name, preferring
    // region/city names over legacy aliases.
    found.sort_by_key(|n| (!n.contains('/'), n.starts_with("Etc/"), n.clone()));
    Ok(found.into_iter().next().or(named))
}

/// The host zone named by zone file `file`, or UTC with `unknown` (or why the file was
/// refused) as the note.
fn zone_of_file(file: &Path, zoneinfo: &Path, timezone_file: &Path, unknown: String) -> HostZone {
    match name_for_file(file, zoneinfo, timezone_file) {
        Ok(name) => name
            .and_then(|n| HostZone::named(&n))
            .unwrap_or_else(|| HostZone::utc(Some(unknown))),
        Err(refused) => HostZone::utc(Some(format!("{refused}; using UTC"))),
    }
}

/// Detects the host zone from its inputs: the value of `TZ` (`None` if unset), the path of
/// `/etc/localtime`, the zoneinfo directory and `/etc/timezone`.
pub fn detect_host_zone(
    tz_env: Option<&str>,
    localtime: &Path,
    zoneinfo: &Path,
    timezone_file: &Path,
) -> HostZone {
    let Some(tz) = tz_env else {
        if !localtime.exists() {
            return HostZone::utc(Some(format!(
                "TZ is unset and {} does not exist, so the host zone is UTC",
                localtime.display()
            )));
        }
        return zone_of_file(
            localtime,
            zoneinfo,
            timezone_file,
            format!(
                "could not tell which zone {} is; using UTC (set TZ=Area/City to choose)",
                localtime.display()
            ),
        );
    };
    let tz = tz.strip_prefix(':').unwrap_or(tz);
    if tz.is_empty() || tz == "UTC" {
        return HostZone::utc(None);
    }
    if tz.starts_with('/') {
        let path = Path::new(tz);
        return zone_of_file(
            path,
            zoneinfo,
            timezone_file,
            format!("TZ={tz} does not name a zone file drover can identify; using UTC"),
        );
    }
    HostZone::named(tz).unwrap_or_else(|| {
        HostZone::utc(Some(format!(
            "TZ={tz} is not an IANA zone name; using UTC (set TZ=Area/City, e.g. TZ=Europe/Berlin)"
        )))
    })
}

/// The real host zone (reads `TZ`, `/etc/localtime`, `/usr/share/zoneinfo`, `/etc/timezone`).
pub(super) fn host_zone() -> HostZone {
    let env = std::env::var_os("TZ");
    let env_str = env.as_ref().map(|v| v.to_str().unwrap_or("\u{fffd}"));
    detect_host_zone(
        env_str,
        Path::new("/etc/localtime"),
        Path::new("/usr/share/zoneinfo"),
        Path::new("/etc/timezone"),
    )
}
