//! Conformance of the Docker executor's options with upstream's own unit-test tables: every
//! case of the tables below (inputs and expected outputs taken from gitlab-runner 19.4.0's
//! tests, and from the `doublestar` v4 table its allow-lists rely on) run through drover's own
//! functions. Prints `docker conformance: N cases, N agree, K deliberate differences` and fails
//! on any disagreement that is not a listed deliberate difference (or on a listed one that
//! agrees after all). Each deliberate difference is explained in README.md ("What differs").

#[path = "docker_conformance/doublestar.rs"]
mod doublestar;
#[path = "docker_conformance/helperimage.rs"]
mod helperimage;
#[path = "docker_conformance/host_settings.rs"]
mod host_settings;
#[path = "docker_conformance/labels.rs"]
mod labels_table;
#[path = "docker_conformance/networks.rs"]
mod networks;
#[path = "docker_conformance/pull.rs"]
mod pull;
#[path = "docker_conformance/script.rs"]
mod script;
#[path = "docker_conformance/service_definitions.rs"]
mod service_definitions;
#[path = "docker_conformance/user.rs"]
mod user;

use drover::executor::containers;
use drover::executor::docker_options;
use drover::executor::glob;
use drover::executor::image::auth::{self, AuthSources, Helpers, RegistryAuth};
use drover::executor::image::{self, AllowList};
use drover::executor::services;
use drover::executor::settings::DockerSettings;
use drover::executor::volumes::{self, VolumeSpec};
use drover::job::Credentials;

/// Cases that differ on purpose: (table, case, why).
const DELIBERATE: &[(&str, &str, &str)] = &[(
    "executors/docker/docker_test.go TestDockerCreateNetwork",
    "network inspect failed",
    "the per-build network is removed even when inspecting it for attached containers fails; \
     upstream skips the removal and leaves the network on the machine",
)];

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
    (
        "my.registry.tld/group/subgroup/ruby",
        &["my.registry.tld/**/*"],
        &[],
        true,
    ),
    (
        "my.registry.tld/group/subgroup/ruby",
        &["my.registry.tld/*/*"],
        &[],
        false,
    ),
    (
        "my.registry.tld/group/subgroup/ruby",
        &["my.registry.tld/*/*/*"],
        &[],
        true,
    ),
    (
        "my.registry.tld/group/subgroup/ruby:2.1",
        &["*"],
        &[],
        false,
    ),
    (
        "my.registry.tld/group/subgroup/ruby:2.1",
        &["my.registry.tld/**/*:*"],
        &[],
        true,
    ),
    (
        "my.registry.tld/group/subgroup/ruby:2.1",
        &["my.registry.tld/*/*/*:*"],
        &[],
        true,
    ),
    (
        "my.registry.tld/group/subgroup/ruby:2.1",
        &["my.registry.tld/*/*:*"],
        &[],
        false,
    ),
    ("my.registry.tld/library/ruby", &["*"], &[], false),
    (
        "my.registry.tld/library/ruby",
        &["my.registry.tld/**/*"],
        &[],
        true,
    ),
    (
        "my.registry.tld/library/ruby",
        &["my.registry.tld/*/*"],
        &[],
        true,
    ),
    ("my.registry.tld/library/ruby:2.1", &["*"], &[], false),
    (
        "my.registry.tld/library/ruby:2.1",
        &["my.registry.tld/**/*:*"],
        &[],
        true,
    ),
    (
        "my.registry.tld/library/ruby:2.1",
        &["my.registry.tld/*/*:*"],
        &[],
        true,
    ),
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

/// A refusal's message starts with the line upstream's job log shows.
fn allowed_images_table(t: &mut Tally) {
    for (i, (img, rules, internal, want)) in ALLOWED_IMAGES.iter().enumerate() {
        let result = image::check_allowed(
            img,
            &strings(rules),
            internal.first().copied(),
            AllowList::Images,
        );
        let got = result.is_ok();
        let line = format!("The {img:?} image is not present on list of allowed images:");
        let message_ok = result
            .as_ref()
            .err()
            .is_none_or(|e| e.message.starts_with(&line));
        t.check(
            "common/allowed_images_test.go TestVerifyAllowedImage",
            &format!("#{i} {img} {rules:?}"),
            got == *want && message_ok,
            || format!("allowed = {got}, want {want}; {:?}", result.err()),
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
    (
        true,
        "my.registry.tld/library/ruby",
        &["my.registry.tld/*/*"],
    ),
    (
        true,
        "my.registry.tld/library/ruby:3.3",
        &["my.registry.tld/*/*:*"],
    ),
    (
        true,
        "my.registry.tld/group/subgroup/ruby",
        &["my.registry.tld/*/*/*"],
    ),
    (
        true,
        "my.registry.tld/group/subgroup/ruby:3.3",
        &["my.registry.tld/*/*/*:*"],
    ),
    (true, "ruby", &["**/*"]),
    (true, "ruby:3.3", &["**/*"]),
    (true, "ruby:latest", &["**/*"]),
    (true, "library/ruby", &["**/*"]),
    (true, "library/ruby:3.3", &["**/*"]),
    (true, "library/ruby:3.3", &["**/*:*"]),
    (
        true,
        "my.registry.tld/library/ruby",
        &["my.registry.tld/**/*"],
    ),
    (
        true,
        "my.registry.tld/library/ruby:3.3",
        &["my.registry.tld/**/*:*"],
    ),
    (
        true,
        "my.registry.tld/group/subgroup/ruby",
        &["my.registry.tld/**/*"],
    ),
    (
        true,
        "my.registry.tld/group/subgroup/ruby:3.3",
        &["my.registry.tld/**/*:*"],
    ),
    (false, "library/ruby", &["*"]),
    (false, "library/ruby:3.3", &["*"]),
    (false, "my.registry.tld/ruby", &["*"]),
    (false, "my.registry.tld/ruby:3.3", &["*"]),
    (false, "my.registry.tld/library/ruby", &["*"]),
    (false, "my.registry.tld/library/ruby:3.3", &["*"]),
    (false, "my.registry.tld/group/subgroup/ruby", &["*"]),
    (false, "my.registry.tld/group/subgroup/ruby:3.3", &["*"]),
    (false, "library/ruby", &["*/*:*"]),
    (
        false,
        "my.registry.tld/group/subgroup/ruby",
        &["my.registry.tld/*/*"],
    ),
    (
        false,
        "my.registry.tld/group/subgroup/ruby:3.3",
        &["my.registry.tld/*/*:*"],
    ),
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
            (
                "services_privileged over privileged=true",
                true,
                Some(*privileged),
            ),
            (
                "services_privileged over privileged=false",
                false,
                Some(*privileged),
            ),
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
type Parts = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// internal/volumes/parser/linux_parser_test.go TestLinuxParser_ParseVolume: (name, spec,
/// parts, or None for an invalid specification).
const LINUX_PARSER: &[(&str, &str, Option<Parts>)] = &[
    ("empty", "", None),
    (
        "destination only",
        "/destination",
        Some(("", "/destination", "", "", "")),
    ),
    (
        "source and destination",
        "/source:/destination",
        Some(("/source", "/destination", "", "", "")),
    ),
    (
        "destination and mode",
        "/destination:rw",
        Some(("", "/destination", "rw", "", "")),
    ),
    (
        "all values",
        "/source:/destination:rw",
        Some(("/source", "/destination", "rw", "", "")),
    ),
    (
        "read only",
        "/source:/destination:ro",
        Some(("/source", "/destination", "ro", "", "")),
    ),
    (
        "SELinux label and read only is shared",
        "/source:/destination:ro,z",
        Some(("/source", "/destination", "ro", "z", "")),
    ),
    (
        "SELinux label and read only is private",
        "/source:/destination:ro,Z",
        Some(("/source", "/destination", "ro", "Z", "")),
    ),
    (
        "volume case sensitive",
        "/Source:/Destination:rw",
        Some(("/Source", "/Destination", "rw", "", "")),
    ),
    (
        "overlay mount",
        "/source:/destination:O",
        Some(("/source", "/destination", "O", "", "")),
    ),
    (
        "overlay mount with SELinux label shared",
        "/source:/destination:O,z",
        Some(("/source", "/destination", "O", "z", "")),
    ),
    (
        "overlay mount with SELinux label private",
        "/source:/destination:O,Z",
        Some(("/source", "/destination", "O", "Z", "")),
    ),
    (
        "SELinux label shared",
        "/source:/destination:z",
        Some(("/source", "/destination", "", "z", "")),
    ),
    (
        "SELinux label private",
        "/source:/destination:Z",
        Some(("/source", "/destination", "", "Z", "")),
    ),
    ("unsupported mode", "/source:/destination:T", None),
    ("too much colons", "/source:/destination:rw:something", None),
    ("invalid source", ":/destination", None),
    (
        "source with spaces",
        "/source with spaces:/destination",
        Some(("/source with spaces", "/destination", "", "", "")),
    ),
    (
        "destination with spaces",
        "/source:/destination with spaces",
        Some(("/source", "/destination with spaces", "", "", "")),
    ),
    (
        "both paths with spaces and mode",
        "/my host path:/container path:rw",
        Some(("/my host path", "/container path", "rw", "", "")),
    ),
    (
        "multi-level source with spaces",
        "/path/with spaces/in the/middle:/dest",
        Some(("/path/with spaces/in the/middle", "/dest", "", "", "")),
    ),
    (
        "named source",
        "volume_name:/destination",
        Some(("volume_name", "/destination", "", "", "")),
    ),
    (
        "bind propagation",
        "/source:/destination:rslave",
        Some(("/source", "/destination", "", "", "rslave")),
    ),
    (
        "mode with bind propagation",
        "/source:/destination:ro,rslave",
        Some(("/source", "/destination", "ro", "", "rslave")),
    ),
    (
        "unsupported bind propagation",
        "/source:/destination:unknown",
        None,
    ),
    (
        "unsupported bind propagation with mode",
        "/source:/destination:ro,unknown",
        None,
    ),
    (
        "malformed bind propagation",
        "/source:/destination:,rslave",
        None,
    ),
    (
        "too much colons for bind propagation",
        "/source:/destination:rw:rslave",
        Some(("/source", "/destination", "rw", "", "rslave")),
    ),
    (
        "destination not starting with / is not allowed",
        "/source:blipp",
        None,
    ),
    (
        "$VAR in destination is allowed",
        "/source:/some/$VAR/blipp",
        Some(("/source", "/some/$VAR/blipp", "", "", "")),
    ),
    (
        "$VAR at start of destination is not allowed",
        "/source:$VAR/blipp",
        None,
    ),
    (
        "${VAR} in destination is allowed",
        "/source:/some/${VAR}/blipp",
        Some(("/source", "/some/${VAR}/blipp", "", "", "")),
    ),
    (
        "${VAR} at start of destination is not allowed",
        "/source:${VAR}/blipp",
        None,
    ),
    (
        "multiple different var refs in destination are allowed",
        "/source:/${root}/$sub-test/dir",
        Some(("/source", "/${root}/$sub-test/dir", "", "", "")),
    ),
    (
        "invalid var refs in destination are allowed",
        "/source:/${r/$$-test/dir",
        Some(("/source", "/${r/$$-test/dir", "", "", "")),
    ),
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
        let want = want.map(|(a, b, c, d, e)| (a.into(), b.into(), c.into(), d.into(), e.into()));
        t.check(
            "internal/volumes/parser/linux_parser_test.go TestLinuxParser_ParseVolume",
            name,
            got == want,
            || format!("{spec:?}: got {got:?}, want {want:?}"),
        );
    }
    // TestLinuxParser_DestinationVarExpansion: "foo" → "REPLACED(bar)", "blipp" →
    // "REPLACED(zark)", in the destination only.
    let fake = |s: &str| {
        s.replace("foo", "REPLACED(bar)")
            .replace("blipp", "REPLACED(zark)")
    };
    let cases: &[(&str, Parts)] = &[
        (
            "/source:/foo:ro",
            ("/source", "/REPLACED(bar)", "ro", "", ""),
        ),
        (
            "/foo:/foo/some-blipp-ref/blapp",
            (
                "/foo",
                "/REPLACED(bar)/some-REPLACED(zark)-ref/blapp",
                "",
                "",
                "",
            ),
        ),
    ];
    for (spec, (a, b, c, d, e)) in cases {
        let got = volumes::parse_volume(spec, &fake).ok().map(|v| parts(&v));
        let want = Some((
            a.to_string(),
            b.to_string(),
            c.to_string(),
            d.to_string(),
            e.to_string(),
        ));
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

/// helpers/docker/auth/auth_test.go TestConvertToRegistryPath.
const REGISTRY_PATHS: &[(&str, &str)] = &[
    ("my.hostname", "my.hostname"),
    ("my.hostname/with/path", "my.hostname/with/path"),
    ("my.HOSTNAME/With/Path/CASE", "my.hostname/With/Path/CASE"),
    (
        "my.hostname/with/tag/image:latest",
        "my.hostname/with/tag/image",
    ),
    (
        "my.hostname:5000/with/tag/image:latest",
        "my.hostname:5000/with/tag/image",
    ),
    ("http://index.docker.io/v1/", "docker.io"),
    ("https://index.docker.io/v1/", "docker.io"),
    ("HTTP://INDEX.DOCKER.IO/V1/", "docker.io"),
    ("HTTPS://INDEX.DOCKER.IO/V1/", "docker.io"),
    ("HTTPS://INDEX.DOCKER.IO/V1/blibb", "docker.io"),
    ("https://my.hostname/v1/something", "my.hostname"),
];

/// helpers/docker/auth/auth_test.go TestDockerImagePathNormalization.
const IMAGE_PATHS: &[(&str, &str)] = &[
    ("tutum.co/user/ubuntu", "tutum.co/user/ubuntu"),
    ("tutum.co/user/ubuntu:latest", "tutum.co/user/ubuntu"),
    (
        "cr.internal:5000/user/ubuntu",
        "cr.internal:5000/user/ubuntu",
    ),
    ("user/ubuntu", "docker.io/user/ubuntu"),
    ("index.docker.io/user/ubuntu", "docker.io/user/ubuntu"),
    ("docker.io/user/ubuntu", "docker.io/user/ubuntu"),
    ("foo.bar:123/asdf/baz:latest", "foo.bar:123/asdf/baz"),
    ("foo.bar/asdf/baz:latest", "foo.bar/asdf/baz"),
    ("foo.bar/asdf/baz", "foo.bar/asdf/baz"),
    ("registry.local/ns/image", "registry.local/ns/image"),
    ("foo.bar:123/asdf/baz", "foo.bar:123/asdf/baz"),
    ("FOO.BAR:123/With/Case", "foo.bar:123/With/Case"),
    ("DOCKER.io/user/ubuntu", "docker.io/user/ubuntu"),
    ("index.DOCKER.io/user/ubuntu", "docker.io/user/ubuntu"),
    ("InDex.DOCKER.io/user/ubuntu", "docker.io/user/ubuntu"),
    ("localhost/test:xxx", "localhost/test"),
    ("LOCALHOST/test:xxx", "localhost/test"),
    ("notLocalhost/test", "docker.io/notLocalhost/test"),
    ("localhost:1234/test", "localhost:1234/test"),
];

/// A docker config with `auths` entries (registry, user, password).
fn docker_config(entries: &[(&str, &str, &str)]) -> String {
    use base64::Engine as _;
    let auths: serde_json::Map<String, serde_json::Value> = entries
        .iter()
        .map(|(r, u, p)| {
            let auth = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            (r.to_string(), serde_json::json!({ "auth": auth }))
        })
        .collect();
    serde_json::json!({ "auths": auths }).to_string()
}

fn registry_creds(url: &str, user: &str, pass: &str) -> Credentials {
    Credentials {
        r#type: "registry".into(),
        url: url.into(),
        username: user.into(),
        password: pass.into(),
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A directory with the test credential helper `docker-credential-bin.sh`: `get` answers
/// script_user_1 / script_password_1, `list` names https://registry2.domain.tld:5005/v1/.
fn helper_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("docker-credential-bin.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         if [ \"$1\" = get ]; then\n\
           printf '{\"username\":\"script_user_1\",\"secret\":\"script_password_1\"}'\n\
         elif [ \"$1\" = list ]; then\n\
           printf '{\"https://registry2.domain.tld:5005/v1/\":\"script_user_1\"}'\n\
         else echo \"unknown action $1\" >&2; exit 1; fi\n",
    )
    .expect("write helper");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// What one resolution gave: Ok(Some((path, source, user, password, server))) / Ok(None) /
/// Err(()), and how many warnings.
type Resolved = (
    Result<Option<(String, String, String, String, String)>, ()>,
    Vec<String>,
);

fn resolve(sources: &AuthSources, image: &str) -> Resolved {
    let mut warnings = Vec::new();
    let got = block_on(sources.for_image(image, &mut warnings));
    let got = got
        .map(|o| {
            o.map(|a: RegistryAuth| (a.path, a.source, a.username, a.password, a.server_address))
        })
        .map_err(|_| ());
    (got, warnings)
}

fn auth_tables(t: &mut Tally) {
    for (input, want) in REGISTRY_PATHS {
        let got = auth::registry_path(input);
        t.check(
            "helpers/docker/auth/auth_test.go TestConvertToRegistryPath",
            input,
            got == *want,
            || format!("{got:?}, want {want:?}"),
        );
    }
    for (input, want) in IMAGE_PATHS {
        let got = auth::image_path(input);
        t.check(
            "helpers/docker/auth/auth_test.go TestDockerImagePathNormalization",
            input,
            got == *want,
            || format!("{got:?}, want {want:?}"),
        );
    }

    // TestCredsForImagesWithDifferentPaths.
    let paths_config = docker_config(&[
        ("registry.local", "test_user_1", "test_password_1"),
        ("registry.local/ns", "test_user_2", "test_password_2"),
        (
            "registry.local/ns/some/image",
            "test_user_3",
            "test_password_3",
        ),
    ]);
    type PathCase<'a> = (
        &'a str,
        Option<Credentials>,
        Option<(&'a str, &'a str, &'a str)>,
    );
    let cases: &[PathCase] = &[
        (
            "registry.local/foo/image:3",
            None,
            Some(("$DOCKER_AUTH_CONFIG", "test_user_1", "test_password_1")),
        ),
        (
            "registry.local/ns/image:5",
            None,
            Some(("$DOCKER_AUTH_CONFIG", "test_user_2", "test_password_2")),
        ),
        (
            "registry.local/ns/some/image:l",
            None,
            Some(("$DOCKER_AUTH_CONFIG", "test_user_3", "test_password_3")),
        ),
        ("no_auth_configured/image:l", None, None),
        (
            "registry.local/ns/blipp/image:foo",
            Some(registry_creds(
                "registry.local/ns",
                "job-cred-user",
                "job-cred-pass",
            )),
            Some(("$DOCKER_AUTH_CONFIG", "test_user_2", "test_password_2")),
        ),
        (
            "registry.local/ns/blipp/image:bar",
            Some(registry_creds(
                "registry.local/ns/blipp",
                "job-cred-user",
                "job-cred-pass",
            )),
            Some((
                "job payload (GitLab Registry)",
                "job-cred-user",
                "job-cred-pass",
            )),
        ),
    ];
    for (image, job, want) in cases {
        let sources = AuthSources {
            docker_auth_config: Some(paths_config.clone()),
            home: None,
            payload: job.iter().cloned().collect(),
            helpers: Helpers::default(),
        };
        let (got, _) = resolve(&sources, image);
        let got = got.map(|o| o.map(|(_, src, u, p, _)| (src, u, p)));
        let want = Ok(want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())));
        t.check(
            "helpers/docker/auth/auth_test.go TestCredsForImagesWithDifferentPaths",
            image,
            got == want,
            || format!("{got:?}, want {want:?}"),
        );
    }

    // TestGetConfigForImage: a home dir with `.dockercfg`, DOCKER_AUTH_CONFIG, the payload,
    // and the test helper on the search path.
    let helpers = helper_dir();
    let search = std::env::join_paths(std::iter::once(helpers.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let file_config = docker_config(&[
        (
            "https://registry.domain.tld:5005/v1/",
            "test_user_1",
            "test_password_1",
        ),
        (
            "registry2.domain.tld:5005",
            "test_user_2",
            "test_password_2",
        ),
    ]);
    let auth_config = docker_config(&[(
        "https://registry.domain.tld:5005/v1/",
        "test_user_1",
        "test_password_1",
    )]);
    let traversal = "../../../../../../usr/bin/sudo";
    let with_traversal = |extra: &str| {
        format!(
            "{{\"auths\":{{\"https://registry.domain.tld:5005/v1/\":{{\"auth\":\"dGVzdF91c2VyXzE6dGVzdF9wYXNzd29yZF8x\"}},\
             \"registry2.domain.tld:5005\":{{\"auth\":\"dGVzdF91c2VyXzI6dGVzdF9wYXNzd29yZF8y\"}}}},{extra}}}"
        )
    };
    let gitlab = vec![registry_creds(
        "registry.gitlab.tld:1234",
        "test_user_3",
        "test_password_3",
    )];
    let img1 = "registry.domain.tld:5005/image/name:version";
    let img2 = "registry2.domain.tld:5005/image/name:version";
    let img_gitlab = "registry.gitlab.tld:1234/image/name:version";
    /// path, source, user, password, server.
    type Expected = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        String,
    );
    struct Case {
        name: &'static str,
        file: Option<String>,
        variable: Option<String>,
        payload: Vec<Credentials>,
        image: &'static str,
        /// Ok(Some((path, source ("FILE" for the home file), user, password, server))),
        /// Ok(None), or Err (the pull is refused).
        want: Result<Option<Expected>, ()>,
        /// Expected warnings naming this text (one warning), if any.
        warning: Option<&'static str>,
    }
    let cases = vec![
        Case {
            name: "registry1 from file only",
            file: Some(file_config.clone()),
            variable: None,
            payload: vec![],
            image: img1,
            want: Ok(Some(("registry.domain.tld:5005", "FILE", "test_user_1", "test_password_1", "https://registry.domain.tld:5005/v1/".into()))),
            warning: None,
        },
        Case {
            name: "registry2 from file only",
            file: Some(file_config.clone()),
            variable: None,
            payload: vec![],
            image: img2,
            want: Ok(Some(("registry2.domain.tld:5005", "FILE", "test_user_2", "test_password_2", "registry2.domain.tld:5005".into()))),
            warning: None,
        },
        Case {
            name: "registry2 from file only overrides credential store with path traversal attempt",
            file: Some(with_traversal(&format!("\"credsStore\" : \"{traversal}\""))),
            variable: None,
            payload: vec![],
            image: img2,
            want: Err(()),
            warning: None,
        },
        Case {
            name: "registry2 from file only overrides credential helper with path traversal attempt",
            file: Some(with_traversal(&format!("\"credHelpers\" : {{\"{img2}\" : \"{traversal}\"}}"))),
            variable: None,
            payload: vec![],
            image: img2,
            want: Err(()),
            warning: None,
        },
        Case {
            name: "missing credentials, file only",
            file: Some(file_config.clone()),
            variable: None,
            payload: vec![],
            image: img_gitlab,
            want: Ok(None),
            warning: None,
        },
        Case {
            name: "no file and gitlab credentials, image in gitlab credentials",
            file: None,
            variable: None,
            payload: gitlab.clone(),
            image: img_gitlab,
            want: Ok(Some(("registry.gitlab.tld:1234", "job payload (GitLab Registry)", "test_user_3", "test_password_3", "registry.gitlab.tld:1234".into()))),
            warning: None,
        },
        Case {
            name: "both file and gitlab credentials, image in gitlab credentials",
            file: Some(file_config.clone()),
            variable: None,
            payload: gitlab.clone(),
            image: img_gitlab,
            want: Ok(Some(("registry.gitlab.tld:1234", "job payload (GitLab Registry)", "test_user_3", "test_password_3", "registry.gitlab.tld:1234".into()))),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG only",
            file: None,
            variable: Some(auth_config.clone()),
            payload: vec![],
            image: img1,
            want: Ok(Some(("registry.domain.tld:5005", "$DOCKER_AUTH_CONFIG", "test_user_1", "test_password_1", "https://registry.domain.tld:5005/v1/".into()))),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG overrides home dir",
            file: Some(file_config.clone()),
            variable: Some(auth_config.clone()),
            payload: vec![],
            image: img1,
            want: Ok(Some(("registry.domain.tld:5005", "$DOCKER_AUTH_CONFIG", "test_user_1", "test_password_1", "https://registry.domain.tld:5005/v1/".into()))),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG overrides credential store",
            file: None,
            variable: Some("{\"credsStore\" : \"bin.sh\"}".into()),
            payload: vec![],
            image: img2,
            want: Ok(Some(("registry2.domain.tld:5005", "$DOCKER_AUTH_CONFIG", "script_user_1", "script_password_1", "https://registry2.domain.tld:5005/v1/".into()))),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG overrides credential helper path",
            file: None,
            variable: Some(format!("{{\"credHelpers\" : {{\"{img2}\" : \"bin.sh\"}}}}")),
            payload: vec![],
            image: img2,
            want: Ok(Some(("registry2.domain.tld:5005/image/name", "$DOCKER_AUTH_CONFIG", "script_user_1", "script_password_1", img2.to_string()))),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG overrides credential store with path traversal",
            file: None,
            variable: Some(format!("{{\"credsStore\" : \"{traversal}\"}}")),
            payload: vec![],
            image: img2,
            want: Err(()),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG overrides credentials helper with path traversal entry",
            file: None,
            variable: Some(format!("{{\"credHelpers\" : {{\"registry2.domain.tld:5005\" : \"{traversal}\"}}}}")),
            payload: vec![],
            image: img2,
            want: Err(()),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG overrides credentials helper with path traversal entry and falls back to config file",
            file: Some(file_config.clone()),
            variable: Some(format!("{{\"credHelpers\" : {{\"registry.domain.tld:5005\" : \"{traversal}\"}}}}")),
            payload: vec![],
            image: img1,
            want: Err(()),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG overrides credentials helper with path traversal entry and another valid entry",
            file: None,
            variable: Some(format!(
                "{{\"credHelpers\" : {{\"registry.domain.tld:5006\" : \"{traversal}\", \"registry2.domain.tld:5005\" : \"bin.sh\"}}}}"
            )),
            payload: vec![],
            image: img2,
            want: Err(()),
            warning: None,
        },
        Case {
            name: "DOCKER_AUTH_CONFIG with missing credsStore binary logs warning and continues",
            file: None,
            variable: Some("{\"credsStore\": \"nonexistent-helper\"}".into()),
            payload: vec![],
            image: img1,
            want: Ok(None),
            warning: Some("nonexistent-helper"),
        },
        Case {
            name: "DOCKER_AUTH_CONFIG with missing credHelpers binary logs warning and continues",
            file: None,
            variable: Some("{\"credHelpers\": {\"https://registry.domain.tld:5005/v1/\": \"nonexistent-helper\"}}".into()),
            payload: vec![],
            image: img1,
            want: Ok(None),
            warning: Some("nonexistent-helper"),
        },
    ];
    for case in cases {
        let home = tempfile::tempdir().expect("home");
        let file = home.path().join(".dockercfg");
        if let Some(text) = &case.file {
            std::fs::write(&file, text).expect("write .dockercfg");
        }
        let sources = AuthSources {
            docker_auth_config: case.variable.clone(),
            home: Some(home.path().to_path_buf()),
            payload: case.payload.clone(),
            helpers: Helpers {
                path: Some(search.clone()),
                ..Helpers::default()
            },
        };
        let (got, warnings) = resolve(&sources, case.image);
        let file_name = file.display().to_string();
        let want = case.want.clone().map(|o| {
            o.map(|(p, src, u, pw, server)| {
                let src = if src == "FILE" {
                    file_name.clone()
                } else {
                    src.to_string()
                };
                (p.to_string(), src, u.to_string(), pw.to_string(), server)
            })
        });
        let warned = match case.warning {
            None => warnings.is_empty(),
            Some(text) => {
                warnings.len() == 1
                    && warnings[0].contains(text)
                    && warnings[0].contains("$DOCKER_AUTH_CONFIG")
            }
        };
        t.check(
            "helpers/docker/auth/auth_test.go TestGetConfigForImage",
            case.name,
            got == want && warned,
            || format!("{got:?} (warnings {warnings:?}), want {want:?}"),
        );
    }

    // TestResolver_AllConfigs and TestGetConfigs_DuplicatedRegistryCredentials.
    let home = tempfile::tempdir().expect("home");
    let file = home.path().join(".dockercfg");
    std::fs::write(&file, &file_config).expect("write .dockercfg");
    let f = file.display().to_string();
    let all = |variable: Option<String>, payload: Vec<Credentials>| {
        let sources = AuthSources {
            docker_auth_config: variable,
            home: Some(home.path().to_path_buf()),
            payload,
            helpers: Helpers::default(),
        };
        let mut w = Vec::new();
        block_on(sources.all(&mut w)).map(|list| {
            list.into_iter()
                .map(|a| (a.path, a.source, a.username, a.password, a.server_address))
                .collect::<Vec<_>>()
        })
    };
    let row = |p: &str, s: &str, u: &str, pw: &str, server: &str| {
        (
            p.to_string(),
            s.to_string(),
            u.to_string(),
            pw.to_string(),
            server.to_string(),
        )
    };
    let got = all(Some(auth_config.clone()), gitlab.clone());
    let want = Ok(vec![
        row(
            "registry.domain.tld:5005",
            "$DOCKER_AUTH_CONFIG",
            "test_user_1",
            "test_password_1",
            "https://registry.domain.tld:5005/v1/",
        ),
        row(
            "registry2.domain.tld:5005",
            &f,
            "test_user_2",
            "test_password_2",
            "registry2.domain.tld:5005",
        ),
        row(
            "registry.gitlab.tld:1234",
            "job payload (GitLab Registry)",
            "test_user_3",
            "test_password_3",
            "registry.gitlab.tld:1234",
        ),
    ]);
    t.check(
        "helpers/docker/auth/auth_test.go TestResolver_AllConfigs",
        "all sources",
        got == want,
        || format!("{got:?}, want {want:?}"),
    );
    let got = all(
        None,
        vec![registry_creds(
            "registry.domain.tld:5005",
            "test_user_1",
            "test_password_1",
        )],
    );
    let want = Ok(vec![
        row(
            "registry.domain.tld:5005",
            &f,
            "test_user_1",
            "test_password_1",
            "https://registry.domain.tld:5005/v1/",
        ),
        row(
            "registry2.domain.tld:5005",
            &f,
            "test_user_2",
            "test_password_2",
            "registry2.domain.tld:5005",
        ),
    ]);
    t.check(
        "helpers/docker/auth/auth_test.go TestGetConfigs_DuplicatedRegistryCredentials",
        "payload duplicate ignored",
        got == want,
        || format!("{got:?}, want {want:?}"),
    );
}

fn inputs() -> containers::ContainerInputs {
    containers::ContainerInputs {
        random_name: "runner-x-project-1-concurrent-0-0123456789abcdef".into(),
        hostname: "h".into(),
        env: vec![],
        binds: vec![],
        labels: Default::default(),
        helper_image: "sha256:helper".into(),
        build_image: "sha256:build".into(),
        build_image_name: "alpine".into(),
        build_entrypoint: None,
        build_user: None,
        build_platform: None,
        build_cmd: vec!["sh".into()],
        service_links: vec![],
        network: Default::default(),
        use_init: false,
    }
}

/// executors/docker/docker_test.go TestDockerPIDMode, TestDockerCPUSSetting,
/// TestBindDeviceRequests, TestDockerConfigGetLogConfig, TestParseMACAddress,
/// TestDNSServerAddrs, TestProcessSecurityOpt and the services' cpus cases of
/// TestDockerServiceSettings.
fn host_config_tables(t: &mut Tally) {
    use containers::{container_body, Role};
    let pid_cases = [
        ("unset", "", false),
        ("host", "host", false),
        (
            "container reference",
            "container:some-other-container",
            false,
        ),
        ("host with privileged", "host", true),
        (
            "container ref with privileged",
            "container:some-other-container",
            true,
        ),
        ("unset with privileged", "", true),
    ];
    for (name, pid, privileged) in pid_cases {
        let s = DockerSettings {
            pid_mode: (!pid.is_empty()).then(|| pid.to_string()),
            privileged,
            ..Default::default()
        };
        let want_pid = (!pid.is_empty()).then(|| pid.to_string());
        for (role, want) in [(Role::Build, want_pid.clone()), (Role::Helper, None)] {
            let hc = container_body(role, &inputs(), &s)
                .host_config
                .unwrap_or_default();
            let ok = hc.pid_mode == want && hc.privileged == Some(privileged);
            t.check(
                "executors/docker/docker_test.go TestDockerPIDMode",
                &format!("{name} ({})", role.kind()),
                ok,
                || format!("pid_mode {:?} privileged {:?}", hc.pid_mode, hc.privileged),
            );
        }
        let hc = services::host_config(&s, "alpine", &[], None);
        t.check(
            "executors/docker/docker_test.go TestDockerPIDMode",
            &format!("{name} (service)"),
            hc.pid_mode.is_none() && hc.privileged == Some(privileged),
            || format!("pid_mode {:?} privileged {:?}", hc.pid_mode, hc.privileged),
        );
    }
    for (cpus, nanos) in [
        ("0.5", 500000000),
        ("0.25", 250000000),
        ("1/3", 333333333),
        ("1/8", 125000000),
        ("0.0001", 100000),
    ] {
        let s = DockerSettings {
            cpus: Some(cpus.into()),
            ..Default::default()
        };
        let got = containers::host_config(&s, &[], "alpine").nano_cpus;
        t.check(
            "executors/docker/docker_test.go TestDockerCPUSSetting",
            cpus,
            got == Some(nanos),
            || format!("{got:?}, want {nanos}"),
        );
        let mut s = DockerSettings::default();
        s.services.cpus = Some(cpus.into());
        let got = services::host_config(&s, "alpine", &[], None).nano_cpus;
        t.check(
            "executors/docker/docker_test.go TestDockerServiceSettings (service_cpus)",
            cpus,
            got == Some(nanos),
            || format!("{got:?}, want {nanos}"),
        );
    }
    // TestBindDeviceRequests.
    let all = docker_options::parse_gpus("all");
    let ok = all.as_ref().is_ok_and(|r| {
        r.count == Some(-1)
            && r.driver.is_none()
            && r.device_ids.is_none()
            && r.capabilities == Some(vec![vec!["gpu".to_string()]])
            && r.options.as_ref().is_some_and(|o| o.is_empty())
    });
    t.check(
        "executors/docker/docker_test.go TestBindDeviceRequests",
        "all",
        ok,
        || format!("{all:?}"),
    );
    let none = containers::host_config(&DockerSettings::default(), &[], "alpine").device_requests;
    t.check(
        "executors/docker/docker_test.go TestBindDeviceRequests",
        "(empty)",
        none.is_none(),
        || format!("{none:?}"),
    );
    let bad = docker_options::resolve(&DockerSettings {
        gpus: Some("somestring=thatshouldtriggeranerror".into()),
        ..Default::default()
    });
    t.check(
        "executors/docker/docker_test.go TestBindDeviceRequests",
        "somestring=thatshouldtriggeranerror",
        bad.is_err(),
        || "accepted".into(),
    );
    // TestDockerConfigGetLogConfig.
    type LogCase<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
    let log_cases: &[LogCase] = &[
        ("empty log options", &[], true),
        (
            "with env option",
            &[("env", "CI_JOB_ID,CI_JOB_NAME,CI_PROJECT_ID")],
            true,
        ),
        (
            "with labels and env options",
            &[
                (
                    "labels",
                    "com.gitlab.gitlab-runner.job.id,com.gitlab.gitlab-runner.project.id",
                ),
                ("env", "CI_JOB_ID,CI_JOB_NAME,CI_PROJECT_ID"),
            ],
            true,
        ),
        ("invalid key", &[("foo", "bar")], false),
    ];
    for (name, options, valid) in log_cases {
        let s = DockerSettings {
            log_options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        let resolved = docker_options::resolve(&s);
        let ok = match (resolved, valid) {
            (Ok(s), true) => {
                let want: std::collections::HashMap<String, String> = options
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let build = containers::host_config(&s, &[], "alpine").log_config;
                let svc = services::host_config(&s, "alpine", &[], None).log_config;
                [build, svc].iter().all(|l| {
                    l.as_ref().is_some_and(|l| {
                        l.typ.as_deref() == Some("json-file") && l.config.as_ref() == Some(&want)
                    })
                })
            }
            (Err(e), false) => e.reason
                == drover::executor::FailureReason::RunnerConfigurationError
                && e.message.contains(
                    r#"invalid log options: only ["env" "labels"] are allowed, but found: ["foo"]"#,
                ),
            _ => false,
        };
        t.check(
            "executors/docker/docker_test.go TestDockerConfigGetLogConfig",
            name,
            ok,
            || "differs".into(),
        );
    }
    // TestParseMACAddress and TestDNSServerAddrs, through the job's option check.
    let mac = |m: &str| {
        docker_options::resolve(&DockerSettings {
            mac_address: (!m.is_empty()).then(|| m.to_string()),
            ..Default::default()
        })
        .is_ok()
    };
    for (name, value, valid) in [
        ("valid", "92:d0:c6:0a:29:33", true),
        ("empty", "", true),
        ("invalid", "not-a-mac", false),
    ] {
        t.check(
            "executors/docker/docker_test.go TestParseMACAddress",
            name,
            mac(value) == valid,
            || format!("{value:?}"),
        );
    }
    let dns = |d: &[&str]| {
        docker_options::resolve(&DockerSettings {
            dns: strings(d),
            ..Default::default()
        })
        .is_ok()
    };
    for (name, value, valid) in [
        ("valid", &["2001:db8::1", "192.0.2.1"][..], true),
        ("empty", &[][..], true),
        ("invalid", &["192.0.2.1", "not-an-ip"][..], false),
    ] {
        t.check(
            "executors/docker/docker_test.go TestDNSServerAddrs",
            name,
            dns(value) == valid,
            || format!("{value:?}"),
        );
    }
    // TestProcessSecurityOpt.
    let dir = tempfile::tempdir().expect("tempdir");
    let profile = r#"{"defaultAction":"SCMP_ACT_ERRNO"}"#;
    let path = dir.path().join("seccomp-profile.json");
    std::fs::write(&path, profile).expect("write profile");
    let p = path.display().to_string();
    type SeccompCase<'a> = (&'a str, Vec<String>, Option<Vec<String>>);
    let cases: Vec<SeccompCase> = vec![
        ("empty security opts", vec![], Some(vec![])),
        (
            "non-seccomp options pass through",
            strings(&["apparmor=unconfined", "no-new-privileges"]),
            Some(strings(&["apparmor=unconfined", "no-new-privileges"])),
        ),
        (
            "seccomp=unconfined passes through",
            strings(&["seccomp=unconfined"]),
            Some(strings(&["seccomp=unconfined"])),
        ),
        (
            "seccomp=builtin passes through",
            strings(&["seccomp=builtin"]),
            Some(strings(&["seccomp=builtin"])),
        ),
        (
            "bare seccomp without value passes through",
            strings(&["seccomp"]),
            Some(strings(&["seccomp"])),
        ),
        (
            "inline seccomp JSON passes through",
            vec![format!("seccomp={profile}")],
            Some(vec![format!("seccomp={profile}")]),
        ),
        (
            "seccomp profile path is loaded",
            vec![format!("seccomp={p}")],
            Some(vec![format!("seccomp={profile}")]),
        ),
        (
            "mixed security options",
            vec![
                "apparmor=unconfined".into(),
                format!("seccomp={p}"),
                "no-new-privileges".into(),
            ],
            Some(vec![
                "apparmor=unconfined".into(),
                format!("seccomp={profile}"),
                "no-new-privileges".into(),
            ]),
        ),
        (
            "non-existent file returns error",
            strings(&["seccomp=/nonexistent/profile.json"]),
            None,
        ),
    ];
    for (name, input, want) in cases {
        let got = docker_options::inline_seccomp(&input, "security_opt").ok();
        t.check(
            "executors/docker/docker_test.go TestProcessSecurityOpt",
            name,
            got == want,
            || format!("{got:?}, want {want:?}"),
        );
    }
}

/// executors/docker/docker_test.go TestDockerGetServicesDevices: (name, image, patterns →
/// devices, expected host paths or None for an error).
fn services_devices_table(t: &mut Tally) {
    type Devices = &'static [(&'static str, &'static [&'static str])];
    let cases: &[(&str, &str, Devices, Option<&[&str]>)] = &[
        (
            "matching image",
            "alpine:latest",
            &[("alpine:*", &["/dev/null"])],
            Some(&["/dev/null"]),
        ),
        (
            "one matching image",
            "alpine:latest",
            &[("alpine:*", &["/dev/null"]), ("fedora:*", &["/dev/usb"])],
            Some(&["/dev/null"]),
        ),
        (
            "multiple matching images",
            "alpine:latest",
            &[
                ("alpine:*", &["/dev/null"]),
                ("alpine:latest", &["/dev/usb"]),
            ],
            Some(&["/dev/null", "/dev/usb"]),
        ),
        (
            "no devices",
            "alpine:latest",
            &[("alpine:*", &[])],
            Some(&[]),
        ),
        (
            "no matching image",
            "alpine:latest",
            &[("ubuntu:*", &["/dev/null"])],
            Some(&[]),
        ),
        ("devices is nil", "alpine:latest", &[], Some(&[])),
        (
            "multiple devices",
            "private.registry:5000/emulator/OSv7:26",
            &[(
                "private.registry:5000/emulator/*",
                &["/dev/kvm", "/dev/dri"],
            )],
            Some(&["/dev/kvm", "/dev/dri"]),
        ),
        (
            "parseDeviceString error",
            "alpine:latest",
            &[("alpine:*", &["/dev/null::::"])],
            None,
        ),
        (
            "bad glob pattern",
            "alpine:latest",
            &[("alpin[e:*", &["/dev/usb:/dev/usb:ro"])],
            None,
        ),
    ];
    for (name, image, devices, want) in cases {
        let mut s = DockerSettings::default();
        s.services.devices = devices
            .iter()
            .map(|(p, d)| (p.to_string(), strings(d)))
            .collect();
        let got: Option<Vec<(String, String, String)>> = docker_options::resolve(&s)
            .ok()
            .map(|s| host_settings::devices_of(&services::host_config(&s, image, &[], None)));
        let want: Option<Vec<(String, String, String)>> = want.map(|w| {
            w.iter()
                .map(|p| (p.to_string(), p.to_string(), "rwm".to_string()))
                .collect()
        });
        let sorted = |v: Option<Vec<(String, String, String)>>| {
            v.map(|mut v| {
                v.sort();
                v
            })
        };
        let (got, want) = (sorted(got), sorted(want));
        // A refusal carries upstream's text.
        let upstream_text = match *name {
            "parseDeviceString error" => Some("too many colons"),
            "bad glob pattern" => Some("invalid service device image pattern: alpin[e"),
            _ => None,
        };
        let message = docker_options::resolve(&s).err().map(|e| e.message);
        let text_ok = match (upstream_text, &message) {
            (Some(text), Some(m)) => m.contains(text),
            (None, _) => true,
            (Some(_), None) => false,
        };
        t.check(
            "executors/docker/docker_test.go TestDockerGetServicesDevices",
            name,
            got == want && text_ok,
            || format!("{got:?}, want {want:?}; error {message:?}"),
        );
    }
}

/// helpers/container/services/test/test.go `Services` (TestSplitNameAndVersion) and
/// TestSplitNameAndVersionEmpty: (description, image, service, version, alias, alternative).
fn split_name_and_version_table(t: &mut Tally) {
    let d = "@sha256:123456789012345678901234567890123456789012345678901234567890abcd";
    let rows: Vec<(String, String, String, String, String, String)> = [
        (
            "service",
            "service:latest",
            "service",
            "latest",
            "service",
            "",
        ),
        (
            "service",
            "service:latest",
            "service",
            "latest",
            "service",
            "",
        ),
        (
            "service:version",
            "service:version",
            "service",
            "version",
            "service",
            "",
        ),
        (
            "namespace/service",
            "namespace/service:latest",
            "namespace/service",
            "latest",
            "namespace__service",
            "namespace-service",
        ),
        (
            "namespace/service:version",
            "namespace/service:version",
            "namespace/service",
            "version",
            "namespace__service",
            "namespace-service",
        ),
        (
            "domain.tld/service",
            "domain.tld/service:latest",
            "domain.tld/service",
            "latest",
            "domain.tld__service",
            "domain.tld-service",
        ),
        (
            "domain.tld/service:version",
            "domain.tld/service:version",
            "domain.tld/service",
            "version",
            "domain.tld__service",
            "domain.tld-service",
        ),
        (
            "domain.tld/namespace/service",
            "domain.tld/namespace/service:latest",
            "domain.tld/namespace/service",
            "latest",
            "domain.tld__namespace__service",
            "domain.tld-namespace-service",
        ),
        (
            "domain.tld/namespace/service:version",
            "domain.tld/namespace/service:version",
            "domain.tld/namespace/service",
            "version",
            "domain.tld__namespace__service",
            "domain.tld-namespace-service",
        ),
        (
            "domain.tld:8080/service",
            "domain.tld:8080/service:latest",
            "domain.tld/service",
            "latest",
            "domain.tld__service",
            "domain.tld-service",
        ),
        (
            "domain.tld:8080/service:version",
            "domain.tld:8080/service:version",
            "domain.tld/service",
            "version",
            "domain.tld__service",
            "domain.tld-service",
        ),
        (
            "domain.tld:8080/namespace/service",
            "domain.tld:8080/namespace/service:latest",
            "domain.tld/namespace/service",
            "latest",
            "domain.tld__namespace__service",
            "domain.tld-namespace-service",
        ),
        (
            "domain.tld:8080/namespace/service:version",
            "domain.tld:8080/namespace/service:version",
            "domain.tld/namespace/service",
            "version",
            "domain.tld__namespace__service",
            "domain.tld-namespace-service",
        ),
        (
            "subdomain.domain.tld:8080/service",
            "subdomain.domain.tld:8080/service:latest",
            "subdomain.domain.tld/service",
            "latest",
            "subdomain.domain.tld__service",
            "subdomain.domain.tld-service",
        ),
        (
            "subdomain.domain.tld:8080/service:version",
            "subdomain.domain.tld:8080/service:version",
            "subdomain.domain.tld/service",
            "version",
            "subdomain.domain.tld__service",
            "subdomain.domain.tld-service",
        ),
        (
            "subdomain.domain.tld:8080/namespace/service",
            "subdomain.domain.tld:8080/namespace/service:latest",
            "subdomain.domain.tld/namespace/service",
            "latest",
            "subdomain.domain.tld__namespace__service",
            "subdomain.domain.tld-namespace-service",
        ),
        (
            "subdomain.domain.tld:8080/namespace/service:version",
            "subdomain.domain.tld:8080/namespace/service:version",
            "subdomain.domain.tld/namespace/service",
            "version",
            "subdomain.domain.tld__namespace__service",
            "subdomain.domain.tld-namespace-service",
        ),
    ]
    .iter()
    .map(|(a, b, c, v, e, f)| {
        (
            a.to_string(),
            b.to_string(),
            c.to_string(),
            v.to_string(),
            e.to_string(),
            f.to_string(),
        )
    })
    .chain(
        [
            ("service", "service", "service", ""),
            (
                "namespace/service",
                "namespace/service",
                "namespace__service",
                "namespace-service",
            ),
            (
                "domain.tld/service",
                "domain.tld/service",
                "domain.tld__service",
                "domain.tld-service",
            ),
            (
                "domain.tld/namespace/service",
                "domain.tld/namespace/service",
                "domain.tld__namespace__service",
                "domain.tld-namespace-service",
            ),
            (
                "domain.tld:8080/service",
                "domain.tld/service",
                "domain.tld__service",
                "domain.tld-service",
            ),
            (
                "domain.tld:8080/namespace/service",
                "domain.tld/namespace/service",
                "domain.tld__namespace__service",
                "domain.tld-namespace-service",
            ),
            (
                "subdomain.domain.tld:8080/service",
                "subdomain.domain.tld/service",
                "subdomain.domain.tld__service",
                "subdomain.domain.tld-service",
            ),
        ]
        .iter()
        .map(|(name, svc, alias, alt)| {
            let desc = format!("{name}{d}");
            (
                desc.clone(),
                desc,
                svc.to_string(),
                d.to_string(),
                alias.to_string(),
                alt.to_string(),
            )
        }),
    )
    .collect();
    for (i, (desc, image, service, version, alias, alt)) in rows.iter().enumerate() {
        let n = services::parse_name(desc);
        let mut want_aliases = vec![alias.clone()];
        if !alt.is_empty() {
            want_aliases.push(alt.clone());
        }
        let ok = &n.image == image
            && &n.service == service
            && &n.version == version
            && n.default_aliases() == want_aliases;
        t.check(
            "helpers/container/services/services_test.go TestSplitNameAndVersion",
            &format!("#{i} {desc}"),
            ok,
            || format!("{n:?}"),
        );
    }
    let n = services::parse_name("");
    t.check(
        "helpers/container/services/services_test.go TestSplitNameAndVersionEmpty",
        "empty",
        n.version == "latest" && n.image.is_empty(),
        || format!("{n:?}"),
    );
}

/// common/classify_image_pull_failure_test.go TestClassifyImagePullFailure: (name, message,
/// reason).
fn classify_pull_failure_table(t: &mut Tally) {
    use drover::executor::FailureReason;
    const EXT: FailureReason = FailureReason::RunnerExternalDependencyFailure;
    const CFG: FailureReason = FailureReason::RunnerConfigurationError;
    const PULL: FailureReason = FailureReason::ImagePullFailure;
    let cases: &[(&str, &str, FailureReason)] = &[
        (
            "dial tcp - no such host",
            r#"Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host"#,
            EXT,
        ),
        (
            "dial tcp - connection refused",
            r#"Get "https://registry.example.com/v2/": dial tcp 1.2.3.4:443: connect: connection refused"#,
            EXT,
        ),
        (
            "no such host",
            r#"dial tcp: lookup private.registry.local: no such host"#,
            EXT,
        ),
        (
            "i/o timeout",
            r#"Get "https://registry.example.com/v2/": i/o timeout"#,
            EXT,
        ),
        (
            "tls handshake timeout",
            r#"Get "https://registry.example.com/v2/": tls handshake timeout"#,
            EXT,
        ),
        (
            "http client timeout awaiting headers",
            r#"Get "https://gitlab.com/jwt/auth?...": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"#,
            EXT,
        ),
        (
            "bare context deadline exceeded is not transient",
            r#"Head "https://registry.gitlab.com/v2/...": context deadline exceeded"#,
            PULL,
        ),
        (
            "request canceled while waiting for connection",
            r#"Get "https://registry.example.com/v2/": net/http: request canceled while waiting for connection"#,
            EXT,
        ),
        (
            "connection reset by peer while reading response",
            r#"failed to authorize: failed to fetch anonymous token: Get "https://auth.docker.io/token?scope=repository%3Alibrary%2Falpine%3Apull&service=registry.docker.io": read tcp 172.17.0.2:33222->172.64.144.78:443: read: connection reset by peer"#,
            EXT,
        ),
        (
            "connection reset by peer while writing request",
            r#"Get "https://registry.example.com/v2/": write tcp 10.0.0.1:5000->1.2.3.4:443: write: connection reset by peer"#,
            EXT,
        ),
        (
            "manifest not found",
            r#"manifest for nginx:nonexistent not found: manifest unknown: manifest unknown"#,
            CFG,
        ),
        (
            "manifest unknown",
            r#"manifest unknown: manifest unknown"#,
            CFG,
        ),
        (
            "pull access denied",
            r#"pull access denied for private/image, repository does not exist or may require 'docker login'"#,
            CFG,
        ),
        (
            "daemon pull access denied with denied suffix",
            r#"Error response from daemon: pull access denied for appvance/nike, repository does not exist or may require 'docker login': denied: requested access to the resource is denied"#,
            CFG,
        ),
        (
            "gitlab registry pull access denied",
            r#"failed to pull image "registry.gitlab.com/group/project/image:latest" with specified policies [always]: Error response from daemon: pull access denied for registry.gitlab.com/group/project/image, repository does not exist or may require 'docker login': denied: requested access to the resource is denied"#,
            CFG,
        ),
        (
            "no basic auth credentials",
            r#"Get "https://registry.example.com/v2/": no basic auth credentials"#,
            CFG,
        ),
        (
            "pull access denied only",
            r#"pull access denied for some/image"#,
            CFG,
        ),
        (
            "access to the resource is denied only",
            r#"denied: requested access to the resource is denied"#,
            CFG,
        ),
        (
            "repository does not exist or may require only",
            r#"repository does not exist or may require authorization"#,
            CFG,
        ),
        (
            "unauthorized authentication required",
            r#"Error response from daemon: unauthorized: authentication required"#,
            CFG,
        ),
        (
            "unauthorized only",
            r#"Get "https://registry.example.com/v2/": 401 unauthorized"#,
            CFG,
        ),
        (
            "authentication required only",
            r#"registry returned: authentication required to access this resource"#,
            CFG,
        ),
        ("generic error", r#"this is a test"#, PULL),
    ];
    for (name, message, want) in cases {
        let got = image::classify_pull_failure(message);
        t.check(
            "common/classify_image_pull_failure_test.go TestClassifyImagePullFailure",
            name,
            got == *want,
            || format!("{got:?}, want {want:?}"),
        );
    }
}

/// A volume entry as upstream's tests hand it to the manager (already parsed).
fn spec(source: &str, destination: &str, mode: &str) -> VolumeSpec {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
    VolumeSpec {
        source: some(source),
        destination: destination.to_string(),
        mode: some(mode),
        label: None,
        propagation: None,
    }
}

/// How the manager makes cache volumes in a table.
#[derive(Clone, Copy)]
enum CacheKind {
    /// `disable_cache`: temporary volumes named after `name`.
    Disabled,
    /// `cache_dir = "/cache"`: host directories under `/cache/<name>/`.
    HostBased,
    /// Reusable volumes named after `name`.
    VolumeBased,
}

/// The binds the manager gives for the existing `/host:/duplicated` bind plus `extra`, without
/// the builds volume; Err with the message when the plan is refused.
fn manager_binds(
    extra: Option<VolumeSpec>,
    kind: CacheKind,
    base: &str,
    name: &str,
    protected: bool,
) -> Result<Vec<String>, String> {
    let mut specs = vec![spec("/host", "/duplicated", "")];
    specs.extend(extra);
    let plan = volumes::plan(&volumes::PlanInputs {
        volumes: &specs,
        build_dir: base,
        root_dir: "/zz-builds-root",
        random_name: name,
        real_unique_name: name,
        disable_cache: matches!(kind, CacheKind::Disabled),
        host_cache_dir: matches!(kind, CacheKind::HostBased).then_some("/cache"),
        protected,
        reusable_builds: false,
    })
    .map_err(|e| e.message)?;
    Ok(plan
        .binds()
        .into_iter()
        .filter(|b| !b.ends_with(":/zz-builds-root"))
        .collect())
}

/// internal/volumes/manager_test.go (host volumes, and cache volumes disabled, host-based and
/// volume-based), utils_test.go TestIsHostMountedVolume_Linux and TestManagedList_Add.
/// Whether `got` is `want` (any refusal for `Err(())`); a refused duplicate must say
/// upstream's `volume for container path "/duplicated" is already defined`.
fn same_binds(
    name: &str,
    got: &Result<Vec<String>, String>,
    want: &Result<Vec<String>, ()>,
) -> bool {
    let text_ok = !name.starts_with("duplicated")
        || got.as_ref().err().is_some_and(|e| {
            e.starts_with(r#"volume for container path "/duplicated" is already defined"#)
        });
    got.as_ref().map_err(|_| &()) == want.as_ref() && text_ok
}

fn volume_manager_tables(t: &mut Tally) {
    let existing = "/host:/duplicated".to_string();
    let with = |b: &[&str]| {
        let mut v = vec![existing.clone()];
        v.extend(b.iter().map(|s| s.to_string()));
        Ok(v)
    };
    // (name, entry, base, expected binds after the existing one, or Err)
    type HostCase<'a> = (
        &'a str,
        Option<VolumeSpec>,
        &'a str,
        Result<Vec<String>, ()>,
    );
    let host: Vec<HostCase> = vec![
        ("no volumes specified", None, "", with(&[])),
        (
            "volume with absolute path",
            Some(spec("/host", "/volume", "")),
            "",
            with(&["/host:/volume"]),
        ),
        (
            "volume with absolute path and with basePath specified",
            Some(spec("/host", "/volume", "")),
            "/builds",
            with(&["/host:/volume"]),
        ),
        (
            "volume without absolute path and without basePath specified",
            Some(spec("/host", "volume", "")),
            "",
            with(&["/host:volume"]),
        ),
        (
            "volume without absolute path and with basePath specified",
            Some(spec("/host", "volume", "")),
            "/builds/project",
            with(&["/host:/builds/project/volume"]),
        ),
        (
            "duplicated volume specification",
            Some(spec("/host/new", "/duplicated", "")),
            "",
            Err(()),
        ),
        (
            "volume with mode specified",
            Some(spec("/host/new", "/my/path", "ro")),
            "",
            with(&["/host/new:/my/path:ro"]),
        ),
        (
            "root volume specified",
            Some(spec("/host/new", "/", "ro")),
            "",
            Err(()),
        ),
    ];
    for (name, extra, base, want) in host {
        let got = manager_binds(extra, CacheKind::VolumeBased, base, "uniq", false);
        t.check(
            "internal/volumes/manager_test.go TestDefaultManager_CreateUserVolumes_HostVolume",
            name,
            same_binds(name, &got, &want),
            || format!("{got:?}, want {want:?}"),
        );
    }
    // (table, name, destination, base, name, protected, expected binds after the existing one)
    type CacheCase<'a> = (
        CacheKind,
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        bool,
        Result<Vec<String>, ()>,
    );
    let cache: Vec<CacheCase> = vec![
        (CacheKind::Disabled, "volume with absolute path, without basePath and with disableCache", "/volume", "", "temporary", false,
            with(&["temporary-cache-14331bf18c8e434c4b3f48a8c5cc79aa:/volume"])),
        (CacheKind::Disabled, "volume with absolute path, with basePath and with disableCache", "/volume", "/builds/project", "temporary", false,
            with(&["temporary-cache-14331bf18c8e434c4b3f48a8c5cc79aa:/volume"])),
        (CacheKind::Disabled, "volume without absolute path, without basePath and with disableCache", "volume", "", "temporary", false,
            with(&["temporary-cache-210ab9e731c9c36c2c38db15c28a8d1c:volume"])),
        (CacheKind::Disabled, "volume without absolute path, with basePath and with disableCache", "volume", "/builds/project", "temporary", false,
            with(&["temporary-cache-f69aef9fb01e88e6213362a04877452d:/builds/project/volume"])),
        (CacheKind::Disabled, "duplicated volume definition", "/duplicated", "", "temporary", false, Err(())),
        (CacheKind::Disabled, "volume is root", "/", "", "temporary", false, Err(())),
        (CacheKind::Disabled, "protected", "some-volume", "/some/base/path", "some-temporary", true,
            with(&["some-temporary-cache-804b0f6b0d757899a37145f9d7f3848e-protected:/some/base/path/some-volume"])),
        (CacheKind::HostBased, "volume with absolute path, without basePath", "/volume", "", "uniq", false,
            with(&["/cache/uniq/14331bf18c8e434c4b3f48a8c5cc79aa:/volume"])),
        (CacheKind::HostBased, "volume with absolute path, with basePath", "/volume", "/builds/project", "uniq", false,
            with(&["/cache/uniq/14331bf18c8e434c4b3f48a8c5cc79aa:/volume"])),
        (CacheKind::HostBased, "volume without absolute path, without basePath", "volume", "", "uniq", false,
            with(&["/cache/uniq/210ab9e731c9c36c2c38db15c28a8d1c:volume"])),
        (CacheKind::HostBased, "volume without absolute path, with basePath", "volume", "/builds/project", "uniq", false,
            with(&["/cache/uniq/f69aef9fb01e88e6213362a04877452d:/builds/project/volume"])),
        (CacheKind::HostBased, "duplicated volume definition", "/duplicated", "", "uniq", false, Err(())),
        (CacheKind::HostBased, "volume is root", "/", "", "uniq", false, Err(())),
        (CacheKind::HostBased, "protected", "some-volume", "/some/base/path", "some-unique-name", true,
            with(&["/cache/some-unique-name/804b0f6b0d757899a37145f9d7f3848e-protected:/some/base/path/some-volume"])),
        (CacheKind::VolumeBased, "volume with absolute path, without basePath and with existing volume", "/volume", "", "uniq", false,
            with(&["uniq-cache-14331bf18c8e434c4b3f48a8c5cc79aa:/volume"])),
        (CacheKind::VolumeBased, "volume without absolute path, with basePath", "volume", "/builds/project", "uniq", false,
            with(&["uniq-cache-f69aef9fb01e88e6213362a04877452d:/builds/project/volume"])),
        (CacheKind::VolumeBased, "volume is root", "/", "", "uniq", false, Err(())),
        (CacheKind::VolumeBased, "duplicated volume definition", "/duplicated", "", "uniq", false, Err(())),
        (CacheKind::VolumeBased, "protected", "some/volume", "/some/base/path", "some-unique-name", true,
            with(&["some-unique-name-cache-7ee4ee58453a23f50e3e88641d9e4690-protected:/some/base/path/some/volume"])),
    ];
    for (kind, name, dst, base, vname, protected, want) in cache {
        let table = match kind {
            CacheKind::Disabled => "internal/volumes/manager_test.go TestDefaultManager_CreateUserVolumes_CacheVolume_Disabled",
            CacheKind::HostBased => "internal/volumes/manager_test.go TestDefaultManager_CreateUserVolumes_CacheVolume_HostBased",
            CacheKind::VolumeBased => "internal/volumes/manager_test.go TestDefaultManager_CreateUserVolumes_CacheVolume_VolumeBased",
        };
        let got = manager_binds(Some(spec("", dst, "")), kind, base, vname, protected);
        t.check(table, name, same_binds(name, &got, &want), || {
            format!("{got:?}, want {want:?}")
        });
    }
    // TestErrVolumeAlreadyDefined: the text for the container path `test-path`, reached as a
    // job reaches it (two binds to it).
    let twice = [spec("/h1", "test-path", ""), spec("/h2", "test-path", "")];
    let got = volumes::plan(&volumes::PlanInputs {
        volumes: &twice,
        build_dir: "",
        root_dir: "/zz-builds-root",
        random_name: "uniq",
        real_unique_name: "uniq",
        disable_cache: false,
        host_cache_dir: None,
        protected: false,
        reusable_builds: false,
    })
    .err()
    .map(|e| e.message);
    t.check(
        "internal/volumes/manager_test.go TestErrVolumeAlreadyDefined",
        "",
        got.as_deref().is_some_and(|m| {
            m.starts_with(r#"volume for container path "test-path" is already defined"#)
        }),
        || format!("{got:?}"),
    );
    // TestIsHostMountedVolume_Linux: (name, dir, volumes, Some(result) or None for an error).
    let mounted: &[(&str, &str, &[&str], Option<bool>)] = &[
        ("empty volumes", "/test/to/checked/dir", &[], Some(false)),
        (
            "no host volumes",
            "/test/to/checked/dir",
            &["/tests/to"],
            Some(false),
        ),
        (
            "dir not within volumes",
            "/test/to/checked/dir",
            &["/host:/root"],
            Some(false),
        ),
        (
            "dir within volumes",
            "/test/to/checked/dir",
            &["/host:/test/to"],
            Some(true),
        ),
        ("error on parsing", "/test/to/checked/dir", &[""], None),
    ];
    let same = |s: &str| s.to_string();
    for (name, dir, vols, want) in mounted {
        let got = volumes::parse_volumes(&strings(vols), &same)
            .ok()
            .map(|specs| volumes::builds_dir_host_mounted(&specs, dir));
        t.check(
            "internal/volumes/utils_test.go TestIsHostMountedVolume_Linux",
            name,
            got == *want,
            || format!("{got:?}, want {want:?}"),
        );
    }
    // TestManagedList_Add: "/duplicate" is taken, then the path is added.
    for (name, path, ok) in [
        ("add non-duplicated path", "/new/path", true),
        ("add duplicated path", "/duplicate", false),
        ("add non-normalized duplicated path", "/duplicate/", false),
        ("add child path", "/duplicate/child", true),
    ] {
        let specs = vec![spec("/a", "/duplicate", ""), spec("/b", path, "")];
        let got = volumes::plan(&volumes::PlanInputs {
            volumes: &specs,
            build_dir: "/builds/g/p",
            root_dir: "/builds",
            random_name: "r",
            real_unique_name: "u",
            disable_cache: false,
            host_cache_dir: None,
            protected: false,
            reusable_builds: false,
        })
        .is_ok();
        t.check(
            "internal/volumes/utils_test.go TestManagedList_Add",
            name,
            got == ok,
            || format!("accepted = {got}"),
        );
    }
}

/// Job 1 of project 1 with one `true` step.
fn one_step_payload() -> drover::job::JobPayload {
    drover::job::JobPayload::from_json(
        &serde_json::json!({
            "id": 1, "token": "t", "job_info": {"project_id": 1},
            "git_info": {"repo_url": "http://gitlab.example.com/g/p.git"},
            "steps": [{"name": "script", "script": ["true"]}]
        })
        .to_string(),
    )
    .expect("payload")
}

/// executors/docker/docker_test.go TestPrepareBuildsDir (the parser-creation case is Go
/// internals): (name, builds_dir, volumes, Some(shared) or None for an error).
fn prepare_builds_dir_table(t: &mut Tally) {
    let cases: &[(&str, &str, &[&str], Option<bool>)] = &[
        (
            "rootDir mounted as host based volume",
            "/build",
            &["/build:/build"],
            Some(true),
        ),
        (
            "rootDir mounted as container based volume",
            "/build",
            &["/build"],
            Some(false),
        ),
        (
            "rootDir not mounted as volume",
            "/build",
            &["/folder:/folder"],
            Some(false),
        ),
        (
            "rootDir's parent mounted as volume",
            "/build/other/directory",
            &["/build/:/build"],
            Some(true),
        ),
        ("rootDir is not an absolute path", "builds", &[], None),
        ("rootDir is /", "/", &[], None),
        ("error on volume parsing", "/build", &[""], None),
    ];
    let payload = one_step_payload();
    for (name, root, vols, want) in cases {
        let mut runner = drover::executor::RunnerSettings {
            token: "glrt-conformance".into(),
            builds_dir: Some(root.to_string()),
            ..Default::default()
        };
        runner.docker.image = "alpine".into();
        runner.docker.volumes = strings(vols);
        let got = drover::executor::plan::plan_job(&payload, &runner, Default::default())
            .ok()
            .map(|p| p.paths.build_dir.contains(&format!("/{}/0/", p.short)));
        t.check(
            "executors/docker/docker_test.go TestPrepareBuildsDir",
            name,
            got == *want,
            || format!("shared = {got:?}, want {want:?}"),
        );
    }
}

/// executors/docker/docker_test.go: the misconfigurations refused when a host config or the
/// networking config is made, with upstream's texts (TestDocker(Service)IsolationWith*,
/// TestDockerCreateHostConfig(ForService)WithInvalidDNS, TestDockerNetworkConfigWithInvalidMAC),
/// and TestNetworkConfigLegacyMacAddressWarning.
fn misconfiguration_tables(t: &mut Tally) {
    use bollard::models::HostConfigIsolationEnum as Iso;
    let file = "executors/docker/docker_test.go";
    for (test, service) in [
        ("TestDockerIsolationWithCorrectValues", false),
        ("TestDockerServiceIsolationWithCorrectValues", true),
    ] {
        for (value, want) in [("default", Some(Iso::DEFAULT)), ("", None)] {
            let s = DockerSettings {
                isolation: (!value.is_empty()).then(|| value.to_string()),
                ..Default::default()
            };
            let got = docker_options::resolve(&s).map(|s| {
                if service {
                    services::host_config(&s, "alpine", &[], None).isolation
                } else {
                    containers::host_config(&s, &[], "alpine").isolation
                }
            });
            let agrees =
                matches!(&got, Ok(i) if *i == want || (value.is_empty() && *i == Some(Iso::EMPTY)));
            t.check(
                &format!("{file} {test}"),
                &format!("{value:?}"),
                agrees,
                || format!("isolation {got:?}, want {want:?}"),
            );
        }
    }
    // (test, settings, upstream's text in the error).
    let bad = |f: fn(&mut DockerSettings)| {
        let mut s = DockerSettings::default();
        f(&mut s);
        s
    };
    let refused: [(&str, DockerSettings, &str); 5] = [
        (
            "TestDockerIsolationWithIncorrectValue",
            bad(|s| s.isolation = Some("someIncorrectValue".into())),
            "the isolation value \"someIncorrectValue\" is not valid",
        ),
        (
            "TestDockerServiceIsolationWithIncorrectValue",
            bad(|s| s.isolation = Some("someIncorrectValue".into())),
            "the isolation value \"someIncorrectValue\" is not valid",
        ),
        (
            "TestDockerCreateHostConfigWithInvalidDNS",
            bad(|s| s.dns = vec!["not-an-ip".into()]),
            "invalid DNS server address",
        ),
        (
            "TestDockerCreateHostConfigForServiceWithInvalidDNS",
            bad(|s| s.dns = vec!["not-an-ip".into()]),
            "invalid DNS server address",
        ),
        (
            "TestDockerNetworkConfigWithInvalidMAC",
            bad(|s| s.mac_address = Some("not-a-mac".into())),
            "invalid MAC address",
        ),
    ];
    for (test, s, text) in refused {
        let got = docker_options::resolve(&s).err();
        let agrees = got.as_ref().is_some_and(|e| {
            e.reason == drover::executor::FailureReason::RunnerConfigurationError
                && e.message.contains(text)
        });
        t.check(&format!("{file} {test}"), text, agrees, || {
            format!("{got:?}")
        });
    }
    let cases = [
        (
            "pre-1.44 with mac_address configured warns",
            "1.43",
            Some("92:d0:c6:0a:29:33"),
            true,
        ),
        (
            "pre-1.44 without mac_address does not warn",
            "1.43",
            None,
            false,
        ),
        (
            "1.44 and later with mac_address does not warn since it is applied",
            "1.44",
            Some("92:d0:c6:0a:29:33"),
            false,
        ),
    ];
    for (case, api, mac, warns) in cases {
        let network = services::JobNetwork {
            mac_address: mac.map(str::to_string),
            legacy_api: services::legacy_endpoint_api(api),
            ..Default::default()
        };
        let got = network.legacy_mac_warning();
        let agrees = match got {
            Some(w) => warns && w.contains("mac_address is configured"),
            None => !warns,
        };
        t.check(
            &format!("{file} TestNetworkConfigLegacyMacAddressWarning"),
            case,
            agrees,
            || format!("warning {got:?}"),
        );
    }
}

/// executors/docker/docker_test.go TestClassifyContainerCreateError: the Engine refusing a
/// container's settings (400, "invalid argument") is a configuration error keeping the
/// Engine's text; a 5xx and any other error stay failures of the system.
fn create_error_table(t: &mut Tally) {
    use drover::executor::containers::JobOrSystem;
    let cases = [
        (
            "invalid argument (daemon 400) becomes ConfigurationError",
            bollard::errors::Error::DockerResponseServerError {
                status_code: 400,
                message: "invalid environment variable: =/builds/gold-trial1/test.tmp".into(),
            },
            true,
        ),
        (
            "daemon internal error (5xx) is left unchanged",
            bollard::errors::Error::DockerResponseServerError {
                status_code: 500,
                message: "something broke on the daemon".into(),
            },
            false,
        ),
        (
            "generic error is left unchanged",
            bollard::errors::Error::IOError {
                err: std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "dial unix /var/run/docker.sock: connect: connection refused",
                ),
            },
            false,
        ),
    ];
    for (case, err, configuration) in cases {
        let text = match &err {
            bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
            e => e.to_string(),
        };
        let got = containers::create_error("container build", err);
        let agrees = match &got {
            JobOrSystem::Job(f) => {
                configuration
                    && f.reason == drover::executor::FailureReason::RunnerConfigurationError
                    && f.message.contains(&text)
            }
            JobOrSystem::System(e) => !configuration && e.to_string().contains(&text),
        };
        t.check(
            "executors/docker/docker_test.go TestClassifyContainerCreateError",
            case,
            agrees,
            || format!("{got:?}"),
        );
    }
}

/// executors/docker/docker_test.go TestPrepareMissingDockerConfig: a docker runner without
/// `[runners.docker]` fails in preparation as a configuration error, before any Engine call
/// (the endpoint here does not exist).
fn missing_docker_config_case(t: &mut Tally) {
    let runner = drover::config::RunnerConfig {
        executor: "docker".into(),
        ..Default::default()
    };
    let settings = drover::executor::RunnerSettings::from_config(&runner, "");
    let payload = one_step_payload();
    let endpoint = drover::executor::DockerEndpoint {
        host: Some("unix:///nonexistent/drover-conformance/docker.sock".into()),
        tls_cert_path: None,
        tls_verify: false,
        ssh: None,
    };
    let req = drover::executor::JobRequest {
        payload: &payload,
        runner: &settings,
        endpoint: &endpoint,
        machine_name: None,
        slot: Default::default(),
    };
    let mut sink = drover::executor::MemorySink::default();
    let control = drover::executor::JobControl {
        cancel: Default::default(),
        abort: Default::default(),
    };
    let got = block_on(drover::executor::run_job(req, &mut sink, control));
    let agrees = matches!(&got, Err(drover::executor::JobError::Failed(f))
        if f.reason == drover::executor::FailureReason::RunnerConfigurationError
            && f.message.starts_with("missing docker configuration"));
    t.check(
        "executors/docker/docker_test.go TestPrepareMissingDockerConfig",
        "",
        agrees,
        || format!("{got:?}"),
    );
}

/// executors/docker/config_updater_test.go TestDockerConfigUpdate: `[runners.docker] gpus` as
/// reported to GitLab (`config.gpus`), trimmed.
fn config_updater_table(t: &mut Tally) {
    for (case, gpus) in [
        ("gpus set to all", "all"),
        ("gpus with trailing space", " "),
    ] {
        let runner = drover::config::RunnerConfig {
            docker: Some(Box::new(drover::config::DockerConfig {
                gpus: gpus.to_string(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let got = drover::gitlab::Info::for_runner(&runner, &Default::default())
            .config
            .gpus;
        let want = gpus.trim();
        t.check(
            "executors/docker/config_updater_test.go TestDockerConfigUpdate",
            case,
            got == want,
            || format!("config.gpus = {got:?}, want {want:?}"),
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
    auth_tables(&mut t);
    host_config_tables(&mut t);
    services_devices_table(&mut t);
    split_name_and_version_table(&mut t);
    classify_pull_failure_table(&mut t);
    volume_manager_tables(&mut t);
    prepare_builds_dir_table(&mut t);
    pull::pull_manager_tables(&mut t);
    labels_table::labels_tables(&mut t);
    helperimage::helperimage_tables(&mut t);
    user::user_tables(&mut t);
    networks::networks_tables(&mut t);
    service_definitions::service_definitions_table(&mut t);
    config_updater_table(&mut t);
    misconfiguration_tables(&mut t);
    host_settings::host_settings_tables(&mut t);
    service_definitions::alias_collision_case(&mut t);
    service_definitions::service_pull_policy_table(&mut t);
    create_error_table(&mut t);
    missing_docker_config_case(&mut t);
    for (table, cases, agree) in &t.tables {
        println!("  {table}: {cases} cases, {agree} agree");
    }
    println!(
        "  not applicable: {} network cases (see tests/docker_conformance/networks.rs)",
        networks::NOT_APPLICABLE
    );
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
