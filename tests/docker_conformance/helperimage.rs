//! helpers/container/helperimage/linux_info_test.go Test_linuxInfo_create: the helper image's
//! name, tag and prebuilt archive name per Engine architecture and flavor, for the `sh` and
//! `bash` shells (the `pwsh` variants are out of scope; the helper command, `Cmd`, is drover's
//! script layer's and not part of this table here).

use drover::executor::image::{self, HelperImageInfo};

use super::Tally;

const FILE: &str = "helpers/container/helperimage/linux_info_test.go Test_linuxInfo_create";

/// Go's name for the machine's architecture, as upstream's helper uses it.
fn runtime_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x86_64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub fn helperimage_tables(t: &mut Tally) {
    // (case, Engine architecture, flavor, expected architecture)
    let rows: &[(&str, &str, &str, &str)] = &[
        (
            "When dockerArch not specified we fallback to runtime arch",
            "",
            "",
            runtime_arch(),
        ),
        ("Docker runs on armv6l", "armv6l", "", "arm"),
        ("Docker runs on amd64", "amd64", "", "x86_64"),
        ("Docker runs on arm64", "aarch64", "", "arm64"),
        ("Docker runs on s390x", "s390x", "", "s390x"),
        ("Docker runs on ppc64le", "ppc64le", "", "ppc64le"),
        ("Docker runs on riscv64", "riscv64", "", "riscv64"),
        (
            "Configured architecture is unknown",
            "some-random-arch",
            "",
            "some-random-arch",
        ),
        (
            "Flavor configured default registry",
            "amd64",
            "ubuntu",
            "x86_64",
        ),
    ];
    for shell in ["sh", "bash"] {
        for (case, docker_arch, flavor, arch) in rows {
            let want = HelperImageInfo {
                architecture: arch.to_string(),
                name: "registry.gitlab.com/gitlab-org/gitlab-runner/gitlab-runner-helper".into(),
                tag: match *flavor {
                    "" => format!("{arch}-2923a43"),
                    f => format!("{f}-{arch}-2923a43"),
                },
                prebuilt: format!(
                    "prebuilt-{}-{arch}",
                    if flavor.is_empty() { "alpine" } else { flavor }
                ),
            };
            let flavor = Some(*flavor).filter(|f| !f.is_empty());
            let got = image::helper_image_info(docker_arch, flavor, "2923a43");
            t.check(FILE, &format!("{shell}/{case}"), got == want, || {
                format!("got {got:?}, want {want:?}")
            });
        }
    }
}
