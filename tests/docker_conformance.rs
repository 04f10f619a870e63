//! Conformance of the Docker executor's options with upstream's own unit-test tables: every
//! case of the tables below (inputs and expected outputs taken from gitlab-runner 19.4.0's
//! tests, and from the `doublestar` v4 table its allow-lists rely on) run through drover's own
//! functions. Prints `docker conformance: N cases, N agree, K deliberate differences` and fails
//! on any disagreement that is not a listed deliberate difference (or on a listed one that
//! agrees after all). Each deliberate difference is explained in README.md ("What differs").

#[path = "docker_conformance/doublestar.rs"]
mod doublestar;

use drover::executor::containers;
use drover::executor::glob;
use drover::executor::image::{self, AllowList};
use drover::executor::services;
use drover::executor::settings::DockerSettings;
use drover::executor::volumes::{self, VolumeSpec};

/// Cases that differ on purpose: (table, case, why).
const DELIBERATE: &[(&str, &str, &str)] = &[];

#[derive(Default)]
struct Tally {
    cases: usize,
    agree: usize,
    deliberate: usize,
    tables: Vec<(String, usize, usize)>,
    failures: Vec<String>,
}

impl Tally {
    fn check(&mut self, table: &str, case: &str, agrees: bool, detail: impl FnOnce() -> String) {
        self.cases += 1;
        match self.tables.iter_mut().find(|(t, _, _)| t == table) {
            Some(t) => {
                t.1 += 1;
                t.2 += usize::from(agrees);
            }
            None => self
                .tables
                .push((table.to_string(), 1, usize::from(agrees))),
        }
        let listed = DELIBERATE.iter().any(|(t, c, _)| *t == table && *c == case);
        match (agrees, listed) {
            (true, false) => self.agree += 1,
            (false, true) => self.deliberate += 1,
            (true, true) => self.failures.push(format!(
                "{table} / {case}: listed as a deliberate difference but agrees"
            )),
            (false, false) => self
                .failures
                .push(format!("{table} / {case}: {}", detail())),
        }
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn doublestar_table(t: &mut Tally) {
    for (pattern, name, want) in doublestar::MATCH {
        let got = glob::matches(pattern, name);
        t.check(
            "doublestar Match",
            &format!("{pattern:?} {name:?}"),
            got == *want,
            || format!("matches({pattern:?}, {name:?}) = {got}, want {want}"),
        );
    }
}

/// common/allowed_images_test.go: (image, allowed, internal, allowed?).
const ALLOWED_IMAGES: &[(&str, &[&str], &[&str], bool)] = &[
    ("alpine", &["alpine"], &[], true),
    ("alpine", &["ubuntu"], &[], false),
    ("library/ruby", &["*"], &[], false),
    ("library/ruby", &["**/*"], &[], true),
    ("library/ruby", &["**/*:*"], &[], false),
    ("library/ruby", &["*/*"], &[], true),
    ("library/ruby", &["*/*:*"], &[], false),
    ("library/ruby:2.1", &["*"], &[], false),
    ("library/ruby:2.1", &["**/*"], &[], true),
    ("library/ruby:2.1", &["**/*:*"], &[], true),
    ("library/ruby:2.1", &["*/*"], &[], true),
    ("library/ruby:2.1", &["*/*:*"], &[], true),
    ("my.registry.tld/group/subgroup/ruby", &["*"], &[], false),
    ("my.registry.tld/group/subgroup/ruby", &["my.registry.tld/**/*"], &[], true),
    ("my.registry.tld/group/subgroup/ruby", &["my.registry.tld/*/*"], &[], false),
    ("my.registry.tld/group/subgroup/ruby", &["my.registry.tld/*/*/*"], &[], true),
    ("my.registry.tld/group/subgroup/ruby:2.1", &["*"], &[], false),
    ("my.registry.tld/group/subgroup/ruby:2.1", &["my.registry.tld/**/*:*"], &[], true),
    ("my.registry.tld/group/subgroup/ruby:2.1", &["my.registry.tld/*/*/*:*"], &[], true),
    ("my.registry.tld/group/subgroup/ruby:2.1", &["my.registry.tld/*/*:*"], &[], false),
    ("my.registry.tld/library/ruby", &["*"], &[], false),
    ("my.registry.tld/library/ruby", &["my.registry.tld/**/*"], &[], true),
    ("my.registry.tld/library/ruby", &["my.registry.tld/*/*"], &[], true),
    ("my.registry.tld/library/ruby:2.1", &["*"], &[], false),
    ("my.registry.tld/library/ruby:2.1", &["my.registry.tld/**/*:*"], &[], true),
    ("my.registry.tld/library/ruby:2.1", &["my.registry.tld/*/*:*"], &[], true),
    ("my.registry.tld/ruby", &["*"], &[], false),
    ("my.registry.tld/ruby:2.1", &["*"], &[], false),
    ("ruby", &["*"], &[], true),
    ("ruby", &["**/*"], &[], true),
    ("ruby:2.1", &["*"], &[], true),
    ("ruby:2.1", &["**/*"], &[], true),
    ("ruby:latest", &["*"], &[], true),
    ("ruby:latest", &["**/*"], &[], true),
    (
        "gitlab/gitlab-runner-helper",
        &["alpine"],
        &["gitlab/gitlab-runner-helper"],
        true,
    ),
    ("alpine", &[], &[], true),
];

fn allowed_images_table(t: &mut Tally) {
    for (i, (img, rules, internal, want)) in ALLOWED_IMAGES.iter().enumerate() {
        let got = image::check_allowed(
            img,
            &strings(rules),
            internal.first().copied(),
            AllowList::Images,
        )
        .is_ok();
        t.check(
            "common/allowed_images_test.go TestVerifyAllowedImage",
            &format!("#{i} {img} {rules:?}"),
            got == *want,
            || format!("allowed = {got}, want {want}"),
        );
    }
}

/// executors/docker/docker_test.go `testAllowedImages`: (allowed?, image, rules), used by both
/// TestVerifyAllowedImage and TestIsInAllowedPrivilegedImages.
const DOCKER_ALLOWED: &[(bool, &str, &[&str])] = &[
    (true, "ruby", &["*"]),
    (true, "ruby:3.3", &["*"]),
    (true, "ruby:latest", &["*"]),
    (true, "library/ruby", &["*/*"]),
    (true, "library/ruby:3.3", &["*/*"]),
    (true, "library/ruby:3.3", &["*/*:*"]),
    (true, "my.registry.tld/library/ruby", &["my.registry.tld/*/*"]),
    (true, "my.registry.tld/library/ruby:3.3", &["my.registry.tld/*/*:*"]),
    (true, "my.registry.tld/group/subgroup/ruby", &["my.registry.tld/*/*/*"]),
    (true, "my.registry.tld/group/subgroup/ruby:3.3", &["my.registry.tld/*/*/*:*"]),
    (true, "ruby", &["**/*"]),
    (true, "ruby:3.3", &["**/*"]),
    (true, "ruby:latest", &["**/*"]),
    (true, "library/ruby", &["**/*"]),
    (true, "library/ruby:3.3", &["**/*"]),
    (true, "library/ruby:3.3", &["**/*:*"]),
    (true, "my.registry.tld/library/ruby", &["my.registry.tld/**/*"]),
    (true, "my.registry.tld/library/ruby:3.3", &["my.registry.tld/**/*:*"]),
    (true, "my.registry.tld/group/subgroup/ruby", &["my.registry.tld/**/*"]),
    (true, "my.registry.tld/group/subgroup/ruby:3.3", &["my.registry.tld/**/*:*"]),
    (false, "library/ruby", &["*"]),
    (false, "library/ruby:3.3", &["*"]),
    (false, "my.registry.tld/ruby", &["*"]),
    (false, "my.registry.tld/ruby:3.3", &["*"]),
    (false, "my.registry.tld/library/ruby", &["*"]),
    (false, "my.registry.tld/library/ruby:3.3", &["*"]),
    (false, "my.registry.tld/group/subgroup/ruby", &["*"]),
    (false, "my.registry.tld/group/subgroup/ruby:3.3", &["*"]),
    (false, "library/ruby", &["*/*:*"]),
    (false, "my.registry.tld/group/subgroup/ruby", &["my.registry.tld/*/*"]),
    (false, "my.registry.tld/group/subgroup/ruby:3.3", &["my.registry.tld/*/*:*"]),
    (false, "library/ruby", &["**/*:*"]),
];

fn docker_allowed_tables(t: &mut Tally) {
    for (i, (want, img, rules)) in DOCKER_ALLOWED.iter().enumerate() {
        let got = image::check_allowed(img, &strings(rules), None, AllowList::Images).is_ok();
        t.check(
            "executors/docker/docker_test.go TestVerifyAllowedImage",
            &format!("#{i} {img} {rules:?}"),
            got == *want,
            || format!("allowed = {got}, want {want}"),
        );
        let s = DockerSettings {
            privileged: true,
            allowed_privileged_images: strings(rules),
            ..Default::default()
        };
        let got = containers::host_config(&s, &[], img).privileged == Some(true);
        t.check(
            "executors/docker/docker_test.go TestIsInAllowedPrivilegedImages",
            &format!("#{i} {img} {rules:?}"),
            got == *want,
            || format!("privileged = {got}, want {want}"),
        );
    }
}

/// executors/docker/services_test.go `testAllowedPrivilegedService` for the service `alpine`:
/// (expected privileged, privileged, allowed_privileged_services); each case is checked with
/// `privileged` alone, with `services_privileged` over `privileged = true`, and over
/// `privileged = false`.
const PRIVILEGED_SERVICES: &[(bool, bool, &[&str])] = &[
    (true, true, &[]),
    (true, true, &["*"]),
    (false, true, &["*:*"]),
    (false, true, &["*/*"]),
    (false, true, &["*/*:*"]),
    (true, true, &["**/*"]),
    (false, true, &["**/*:*"]),
    (true, true, &["alpine"]),
    (false, true, &["debian"]),
    (true, true, &["alpi*"]),
    (true, true, &["*alpi*"]),
    (true, true, &["*alpi*"]),
    (true, true, &["debian", "alpine"]),
    (true, true, &["debian", "*"]),
    (false, false, &[]),
    (false, false, &["*"]),
    (false, false, &["*:*"]),
    (false, false, &["*/*"]),
    (false, false, &["*/*:*"]),
    (false, false, &["**/*"]),
    (false, false, &["**/*:*"]),
    (false, false, &["alpine"]),
    (false, false, &["debian"]),
    (false, false, &["alpi*"]),
    (false, false, &["*alpi*"]),
    (false, false, &["*alpi*"]),
    (false, false, &["debian", "alpine"]),
    (false, false, &["debian", "*"]),
];

fn privileged_services_table(t: &mut Tally) {
    for (i, (want, privileged, rules)) in PRIVILEGED_SERVICES.iter().enumerate() {
        let variants = [
            ("privileged only", *privileged, None),
            ("services_privileged over privileged=true", true, Some(*privileged)),
            ("services_privileged over privileged=false", false, Some(*privileged)),
        ];
        for (variant, base, services_privileged) in variants {
            let mut s = DockerSettings {
                privileged: base,
                ..Default::default()
            };
            s.services.privileged = services_privileged;
            s.services.allowed_privileged = strings(rules);
            let got = services::host_config(&s, "alpine", &[], None).privileged == Some(true);
            t.check(
                "executors/docker/services_test.go TestDockerServicePrivilegedSetting",
                &format!("#{i} {variant} {rules:?}"),
                got == *want,
                || format!("privileged = {got}, want {want}"),
            );
        }
    }
}

/// The expected parts of a parsed volume: source, destination, mode, label, propagation.
type Parts = (&'static str, &'static str, &'static str, &'static str, &'static str);

/// internal/volumes/parser/linux_parser_test.go TestLinuxParser_ParseVolume: (name, spec,
/// parts, or None for an invalid specification).
const LINUX_PARSER: &[(&str, &str, Option<Parts>)] = &[
    ("empty", "", None),
    ("destination only", "/destination", Some(("", "/destination", "", "", ""))),
    ("source and destination", "/source:/destination", Some(("/source", "/destination", "", "", ""))),
    ("destination and mode", "/destination:rw", Some(("", "/destination", "rw", "", ""))),
    ("all values", "/source:/destination:rw", Some(("/source", "/destination", "rw", "", ""))),
    ("read only", "/source:/destination:ro", Some(("/source", "/destination", "ro", "", ""))),
    ("SELinux label and read only is shared", "/source:/destination:ro,z", Some(("/source", "/destination", "ro", "z", ""))),
    ("SELinux label and read only is private", "/source:/destination:ro,Z", Some(("/source", "/destination", "ro", "Z", ""))),
    ("volume case sensitive", "/Source:/Destination:rw", Some(("/Source", "/Destination", "rw", "", ""))),
    ("overlay mount", "/source:/destination:O", Some(("/source", "/destination", "O", "", ""))),
    ("overlay mount with SELinux label shared", "/source:/destination:O,z", Some(("/source", "/destination", "O", "z", ""))),
    ("overlay mount with SELinux label private", "/source:/destination:O,Z", Some(("/source", "/destination", "O", "Z", ""))),
    ("SELinux label shared", "/source:/destination:z", Some(("/source", "/destination", "", "z", ""))),
    ("SELinux label private", "/source:/destination:Z", Some(("/source", "/destination", "", "Z", ""))),
    ("unsupported mode", "/source:/destination:T", None),
    ("too much colons", "/source:/destination:rw:something", None),
    ("invalid source", ":/destination", None),
    ("source with spaces", "/source with spaces:/destination", Some(("/source with spaces", "/destination", "", "", ""))),
    ("destination with spaces", "/source:/destination with spaces", Some(("/source", "/destination with spaces", "", "", ""))),
    ("both paths with spaces and mode", "/my host path:/container path:rw", Some(("/my host path", "/container path", "rw", "", ""))),
    ("multi-level source with spaces", "/path/with spaces/in the/middle:/dest", Some(("/path/with spaces/in the/middle", "/dest", "", "", ""))),
    ("named source", "volume_name:/destination", Some(("volume_name", "/destination", "", "", ""))),
    ("bind propagation", "/source:/destination:rslave", Some(("/source", "/destination", "", "", "rslave"))),
    ("mode with bind propagation", "/source:/destination:ro,rslave", Some(("/source", "/destination", "ro", "", "rslave"))),
    ("unsupported bind propagation", "/source:/destination:unknown", None),
    ("unsupported bind propagation with mode", "/source:/destination:ro,unknown", None),
    ("malformed bind propagation", "/source:/destination:,rslave", None),
    ("too much colons for bind propagation", "/source:/destination:rw:rslave", Some(("/source", "/destination", "rw", "", "rslave"))),
    ("destination not starting with / is not allowed", "/source:blipp", None),
    ("$VAR in destination is allowed", "/source:/some/$VAR/blipp", Some(("/source", "/some/$VAR/blipp", "", "", ""))),
    ("$VAR at start of destination is not allowed", "/source:$VAR/blipp", None),
    ("${VAR} in destination is allowed", "/source:/some/${VAR}/blipp", Some(("/source", "/some/${VAR}/blipp", "", "", ""))),
    ("${VAR} at start of destination is not allowed", "/source:${VAR}/blipp", None),
    ("multiple different var refs in destination are allowed", "/source:/${root}/$sub-test/dir", Some(("/source", "/${root}/$sub-test/dir", "", "", ""))),
    ("invalid var refs in destination are allowed", "/source:/${r/$$-test/dir", Some(("/source", "/${r/$$-test/dir", "", "", ""))),
];

fn parts(v: &VolumeSpec) -> (String, String, String, String, String) {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    (
        s(&v.source),
        v.destination.clone(),
        s(&v.mode),
        s(&v.label),
        s(&v.propagation),
    )
}

fn linux_parser_tables(t: &mut Tally) {
    let same = |s: &str| s.to_string();
    for (name, spec, want) in LINUX_PARSER {
        let got = volumes::parse_volume(spec, &same).ok().map(|v| parts(&v));
        let want = want.map(|(a, b, c, d, e)| {
            (a.into(), b.into(), c.into(), d.into(), e.into())
        });
        t.check(
            "internal/volumes/parser/linux_parser_test.go TestLinuxParser_ParseVolume",
            name,
            got == want,
            || format!("{spec:?}: got {got:?}, want {want:?}"),
        );
    }
    // TestLinuxParser_DestinationVarExpansion: "foo" → "REPLACED(bar)", "blipp" →
    // "REPLACED(zark)", in the destination only.
    let fake = |s: &str| s.replace("foo", "REPLACED(bar)").replace("blipp", "REPLACED(zark)");
    let cases: &[(&str, Parts)] = &[
        ("/source:/foo:ro", ("/source", "/REPLACED(bar)", "ro", "", "")),
        (
            "/foo:/foo/some-blipp-ref/blapp",
            ("/foo", "/REPLACED(bar)/some-REPLACED(zark)-ref/blapp", "", "", ""),
        ),
    ];
    for (spec, (a, b, c, d, e)) in cases {
        let got = volumes::parse_volume(spec, &fake).ok().map(|v| parts(&v));
        let want = Some((a.to_string(), b.to_string(), c.to_string(), d.to_string(), e.to_string()));
        t.check(
            "internal/volumes/parser/linux_parser_test.go TestLinuxParser_DestinationVarExpansion",
            spec,
            got == want,
            || format!("got {got:?}, want {want:?}"),
        );
    }
}

/// executors/docker/docker_test.go TestExpandingVolumeDestination: the binds made from four
/// entries with the job variables JOB_VAR_1=1, JOB_VAR_2=2, COMBINED_VAR=${JOB_VAR_1}-${JOB_VAR_2}-3.
fn expanding_volume_destination(t: &mut Tally) {
    let expand = |s: &str| s.replace("${COMBINED_VAR}", "1-2-3");
    let entries = [
        "/host/${COMBINED_VAR}:/tmp/${COMBINED_VAR}",
        "/new/cache/vol-${COMBINED_VAR}-foo",
        "/${:/tmp",
        "/host:/tmp/foo/$",
    ];
    let specs: Vec<VolumeSpec> = entries
        .iter()
        .filter_map(|e| volumes::parse_volume(e, &expand).ok())
        .collect();
    let plan = volumes::plan(&volumes::PlanInputs {
        volumes: &specs,
        build_dir: "/builds/g/p",
        root_dir: "/builds",
        random_name: "runner-x-project-1234-concurrent-5678-0123456789abcdef",
        real_unique_name: "runner-cb27ac1df55ad5c5857ef343b03639cf",
        disable_cache: false,
        host_cache_dir: None,
        protected: false,
        reusable_builds: true,
    });
    let binds = plan.map(|p| p.binds()).unwrap_or_default();
    let want = [
        "/host/${COMBINED_VAR}:/tmp/1-2-3",
        // upstream's expected name for the cache volume of "/new/cache/vol-1-2-3-foo"
        "runner-cb27ac1df55ad5c5857ef343b03639cf-cache-bffb7fe32becf1f1e4d6c9604d09f9d7:/new/cache/vol-1-2-3-foo",
        "/${:/tmp",
        "/host:/tmp/foo/$",
    ];
    for w in want {
        t.check(
            "executors/docker/docker_test.go TestExpandingVolumeDestination",
            w,
            binds.iter().any(|b| b == w),
            || format!("binds {binds:?} lack {w:?}"),
        );
    }
}

#[test]
fn docker_conformance() {
    let mut t = Tally::default();
    doublestar_table(&mut t);
    allowed_images_table(&mut t);
    docker_allowed_tables(&mut t);
    privileged_services_table(&mut t);
    linux_parser_tables(&mut t);
    expanding_volume_destination(&mut t);
    for (table, cases, agree) in &t.tables {
        println!("  {table}: {cases} cases, {agree} agree");
    }
    println!(
        "docker conformance: {} cases, {} agree, {} deliberate differences",
        t.cases, t.agree, t.deliberate
    );
    assert!(
        t.failures.is_empty(),
        "{} disagreements:\n{}",
        t.failures.len(),
        t.failures.join("\n")
    );
}
