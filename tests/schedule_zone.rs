//! Host zone detection for `Timezone = ""`/`"Local"`, on a fake filesystem.

use std::fs;
use std::path::Path;

use chrono_tz::Tz;
use drover::config::periods::detect_host_zone;

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    /// A fake root with `usr/share/zoneinfo/{Europe/Berlin,America/New_York,Etc/UTC}`.
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        for (name, body) in [
            ("Europe/Berlin", "TZif-berlin"),
            ("America/New_York", "TZif-new-york"),
            ("Etc/UTC", "TZif-utc"),
        ] {
            let p = dir.path().join("usr/share/zoneinfo").join(name);
            fs::create_dir_all(p.parent().unwrap_or(dir.path())).unwrap_or_else(|e| panic!("{e}"));
            fs::write(&p, body).unwrap_or_else(|e| panic!("{e}"));
        }
        fs::create_dir_all(dir.path().join("etc")).unwrap_or_else(|e| panic!("{e}"));
        Host { dir }
    }
    fn p(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
    fn detect(&self, tz: Option<&str>) -> (Tz, Option<String>) {
        let z = detect_host_zone(
            tz,
            &self.p("etc/localtime"),
            &self.p("usr/share/zoneinfo"),
            &self.p("etc/timezone"),
        );
        (z.tz, z.note)
    }
}

fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap_or_else(|e| panic!("symlink: {e}"));
}

#[test]
fn tz_variable_wins() {
    let h = Host::new();
    symlink(
        &h.p("usr/share/zoneinfo/America/New_York"),
        &h.p("etc/localtime"),
    );
    assert_eq!(h.detect(Some("Europe/Berlin")).0, chrono_tz::Europe::Berlin);
    assert_eq!(
        h.detect(Some(":Europe/Berlin")).0,
        chrono_tz::Europe::Berlin
    );
    assert_eq!(
        h.detect(Some("Australia/Sydney")).0,
        chrono_tz::Australia::Sydney
    );
    // TZ set but empty means UTC (as Go does), without a note.
    assert_eq!(h.detect(Some("")), (Tz::UTC, None));
    assert_eq!(h.detect(Some("UTC")), (Tz::UTC, None));
    // TZ pointing to a file.
    let berlin = h.p("usr/share/zoneinfo/Europe/Berlin");
    let path = berlin.to_string_lossy().into_owned();
    assert_eq!(h.detect(Some(&path)).0, chrono_tz::Europe::Berlin);
    assert_eq!(
        h.detect(Some(&format!(":{path}"))).0,
        chrono_tz::Europe::Berlin
    );
    // Unknown names fall back to UTC with a note.
    let (tz, note) = h.detect(Some("Mars/Olympus"));
    assert_eq!(tz, Tz::UTC);
    assert!(note.is_some_and(|n| n.contains("Mars/Olympus")));
    let (tz, note) = h.detect(Some("/nonexistent/zone"));
    assert_eq!(tz, Tz::UTC);
    assert!(note.is_some());
}

#[test]
fn localtime_symlink_names_the_zone() {
    let h = Host::new();
    symlink(
        &h.p("usr/share/zoneinfo/America/New_York"),
        &h.p("etc/localtime"),
    );
    assert_eq!(h.detect(None), (chrono_tz::America::New_York, None));
    // A relative link works too.
    let h = Host::new();
    symlink(
        Path::new("../usr/share/zoneinfo/Europe/Berlin"),
        &h.p("etc/localtime"),
    );
    assert_eq!(h.detect(None), (chrono_tz::Europe::Berlin, None));
}

#[test]
fn localtime_copy_is_identified_by_content() {
    let h = Host::new();
    fs::write(h.p("etc/localtime"), "TZif-new-york").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(h.detect(None).0, chrono_tz::America::New_York);
    // /etc/timezone is preferred when its zone has the same bytes.
    fs::write(h.p("etc/timezone"), "Europe/Berlin\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(h.p("etc/localtime"), "TZif-berlin").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(h.detect(None).0, chrono_tz::Europe::Berlin);
}

#[test]
fn unknown_localtime_falls_back_to_timezone_file_then_utc() {
    let h = Host::new();
    fs::write(h.p("etc/localtime"), "TZif-something-else").unwrap_or_else(|e| panic!("{e}"));
    fs::write(h.p("etc/timezone"), "Australia/Sydney\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(h.detect(None).0, chrono_tz::Australia::Sydney);
    fs::write(h.p("etc/timezone"), "garbage\n").unwrap_or_else(|e| panic!("{e}"));
    let (tz, note) = h.detect(None);
    assert_eq!(tz, Tz::UTC);
    assert!(note.is_some_and(|n| n.contains("localtime")));
    // No /etc/localtime at all.
    let h = Host::new();
    let (tz, note) = h.detect(None);
    assert_eq!(tz, Tz::UTC);
    assert!(note.is_some());
}

#[test]
fn zone_files_that_never_end_are_refused_with_a_note() {
    let h = Host::new();
    // TZ naming a device: read at most a bounded prefix, then UTC with a note naming the limit.
    let (tz, note) = h.detect(Some(":/dev/zero"));
    assert_eq!(tz, Tz::UTC);
    assert!(
        note.as_deref()
            .is_some_and(|n| n.contains("/dev/zero") && n.contains("4194304 bytes")),
        "{note:?}"
    );
    // /etc/localtime pointing at one.
    symlink(Path::new("/dev/zero"), &h.p("etc/localtime"));
    let (tz, note) = h.detect(None);
    assert_eq!(tz, Tz::UTC);
    assert!(
        note.as_deref().is_some_and(|n| n.contains("/dev/zero")),
        "{note:?}"
    );
    // /etc/timezone pointing at one, beside a localtime no path names.
    fs::remove_file(h.p("etc/localtime")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(h.p("etc/localtime"), "TZif-elsewhere").unwrap_or_else(|e| panic!("{e}"));
    symlink(Path::new("/dev/zero"), &h.p("etc/timezone"));
    let (tz, note) = h.detect(None);
    assert_eq!(tz, Tz::UTC);
    assert!(note.is_some(), "{note:?}");
}
