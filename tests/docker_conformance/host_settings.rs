//! The `[runners.docker]` settings upstream checks one by one on the build container's host
//! config (executors/docker/docker_test.go `testDockerConfigurationWithJobContainer` cases,
//! TestParseDeviceString*, TestDockerUlimitSetting) and on a service container's
//! (executors/docker/services_test.go `testDockerConfigurationWithServiceContainer` cases).
//! Each row goes the way a `config.toml` does: `[runners.docker]` as loaded, the runner's
//! settings made from it, the options checked, then the container's host config.

use bollard::models::HostConfig;
use drover::config::{DockerConfig, RunnerConfig};
use drover::executor::script::variables::{Var, VarList};
use drover::executor::{containers, docker_options, services, RunnerSettings};

use super::{Tally, PRIVILEGED_SERVICES};

/// Build (`false`) or service (`true`) container.
type Row = (
    &'static str,
    &'static str,
    bool,
    fn(&mut DockerConfig),
    fn(&HostConfig) -> bool,
);

fn map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The devices a host config maps, as (host, container, permissions), sorted.
pub fn devices_of(h: &HostConfig) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = h
        .devices
        .iter()
        .flatten()
        .map(|d| {
            (
                d.path_on_host.clone().unwrap_or_default(),
                d.path_in_container.clone().unwrap_or_default(),
                d.cgroup_permissions.clone().unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The one device a host config maps.
fn device(h: &HostConfig) -> Option<(String, String, String)> {
    match devices_of(h).as_slice() {
        [d] => Some(d.clone()),
        _ => None,
    }
}

/// The ulimits of a host config, as (name, soft, hard).
fn ulimits(h: &HostConfig) -> Vec<(String, i64, i64)> {
    h.ulimits
        .iter()
        .flatten()
        .map(|u| {
            (
                u.name.clone().unwrap_or_default(),
                u.soft.unwrap_or_default(),
                u.hard.unwrap_or_default(),
            )
        })
        .collect()
}

/// A refused setting: (test, setting, upstream's text in the error).
type Refused = (&'static str, fn(&mut DockerConfig), &'static str);

const D: &str = "executors/docker/docker_test.go";
const S: &str = "executors/docker/services_test.go";

fn rows() -> Vec<Row> {
    vec![
        (
            D,
            "TestDockerMemorySetting",
            false,
            |d| d.memory = "42m".into(),
            |h| h.memory == Some(44040192),
        ),
        (
            D,
            "TestDockerMemorySwapSetting",
            false,
            |d| d.memory_swap = "2g".into(),
            |h| h.memory_swap == Some(2147483648),
        ),
        (
            D,
            "TestDockerMemoryReservationSetting",
            false,
            |d| d.memory_reservation = "64m".into(),
            |h| h.memory_reservation == Some(67108864),
        ),
        (
            D,
            "TestDockerCgroupParentSetting",
            false,
            |d| d.cgroup_parent = "test-docker-cgroup".into(),
            |h| h.cgroup_parent.as_deref() == Some("test-docker-cgroup"),
        ),
        (
            D,
            "TestDockerCPUSetCPUsSetting",
            false,
            |d| d.cpuset_cpus = "1-3,5".into(),
            |h| h.cpuset_cpus.as_deref() == Some("1-3,5"),
        ),
        (
            D,
            "TestDockerCPUSetMemsSetting",
            false,
            |d| d.cpuset_mems = "1-3,5".into(),
            |h| h.cpuset_mems.as_deref() == Some("1-3,5"),
        ),
        (
            D,
            "TestDockerTmpfsSetting",
            false,
            |d| d.tmpfs = map(&[("/tmpfs", "rw,noexec")]),
            |h| h.tmpfs.as_ref().is_some_and(|t| !t.is_empty()),
        ),
        (
            D,
            "TestDockerUserNSSetting (unset)",
            false,
            |_| {},
            |h| h.userns_mode.as_deref().unwrap_or_default().is_empty(),
        ),
        (
            D,
            "TestDockerUserNSSetting (host)",
            false,
            |d| d.userns_mode = "host".into(),
            |h| h.userns_mode.as_deref() == Some("host"),
        ),
        (
            D,
            "TestDockerRuntimeSetting",
            false,
            |d| d.runtime = "runc".into(),
            |h| h.runtime.as_deref() == Some("runc"),
        ),
        (
            D,
            "TestDockerSysctlsSetting",
            false,
            |d| d.sysctls = map(&[("net.ipv4.ip_forward", "1")]),
            |h| {
                h.sysctls
                    .as_ref()
                    .and_then(|s| s.get("net.ipv4.ip_forward"))
                    .map(String::as_str)
                    == Some("1")
            },
        ),
        (
            D,
            "TestDockerUlimitSetting / soft and hard values",
            false,
            |d| d.ulimit = map(&[("nofile", "1024:2048")]),
            |h| ulimits(h) == [("nofile".to_string(), 1024, 2048)],
        ),
        (
            D,
            "TestDockerUlimitSetting / single limit value",
            false,
            |d| d.ulimit = map(&[("nofile", "1024")]),
            |h| ulimits(h) == [("nofile".to_string(), 1024, 1024)],
        ),
        (
            D,
            "TestParseDeviceStringOne",
            false,
            |d| d.devices = strings(&["/dev/kvm"]),
            |h| device(h) == Some(("/dev/kvm".into(), "/dev/kvm".into(), "rwm".into())),
        ),
        (
            D,
            "TestParseDeviceStringTwo",
            false,
            |d| d.devices = strings(&["/dev/kvm:/devices/kvm"]),
            |h| device(h) == Some(("/dev/kvm".into(), "/devices/kvm".into(), "rwm".into())),
        ),
        (
            D,
            "TestParseDeviceStringThree",
            false,
            |d| d.devices = strings(&["/dev/kvm:/devices/kvm:r"]),
            |h| device(h) == Some(("/dev/kvm".into(), "/devices/kvm".into(), "r".into())),
        ),
        (
            S,
            "TestDockerServicesTmpfsSetting",
            true,
            |d| d.services_tmpfs = map(&[("/tmpfs", "rw,noexec")]),
            |h| h.tmpfs.as_ref().is_some_and(|t| !t.is_empty()),
        ),
        (
            S,
            "TestDockerServicesDNSSetting",
            true,
            |d| d.dns = strings(&["2001:db8::1", "192.0.2.1"]),
            |h| h.dns.as_deref() == Some(&strings(&["2001:db8::1", "192.0.2.1"])[..]),
        ),
        (
            S,
            "TestDockerServicesDNSSearchSetting",
            true,
            |d| d.dns_search = strings(&["mydomain.example"]),
            |h| h.dns_search.as_deref() == Some(&strings(&["mydomain.example"])[..]),
        ),
        (
            S,
            "TestDockerServicesExtraHostsSetting",
            true,
            |d| d.extra_hosts = strings(&["foo.example:2001:db8::1", "bar.example:192.0.2.1"]),
            |h| {
                h.extra_hosts.as_deref()
                    == Some(&strings(&["foo.example:2001:db8::1", "bar.example:192.0.2.1"])[..])
            },
        ),
        (
            S,
            "TestDockerServiceUserNSSetting (unset)",
            true,
            |_| {},
            |h| h.userns_mode.as_deref().unwrap_or_default().is_empty(),
        ),
        (
            S,
            "TestDockerServiceUserNSSetting (host)",
            true,
            |d| d.userns_mode = "host".into(),
            |h| h.userns_mode.as_deref() == Some("host"),
        ),
    ]
}

/// The settings made from `[runners.docker]` as changed by `set`, checked as a job checks them.
fn settings(set: fn(&mut DockerConfig)) -> Result<drover::executor::DockerSettings, String> {
    let mut docker = DockerConfig::default();
    set(&mut docker);
    resolved(docker)
}

/// The settings made from `docker` (image `alpine`), checked as a job checks them.
fn resolved(mut docker: DockerConfig) -> Result<drover::executor::DockerSettings, String> {
    docker.image = "alpine".into();
    let runner = RunnerConfig {
        executor: "docker".into(),
        docker: Some(Box::new(docker)),
        ..Default::default()
    };
    let s = RunnerSettings::from_config(&runner, "");
    docker_options::resolve(&s.docker).map_err(|e| e.message)
}

/// TestDockerPrivilegedJobSetting over docker_test.go `testAllowedPrivilegedJob` for the job
/// image `alpine`: its rows are the same as services_test.go `testAllowedPrivilegedService`
/// ([`PRIVILEGED_SERVICES`]: privileged expected, `privileged`, `allowed_privileged_images`).
fn privileged_job_table(t: &mut Tally) {
    for (i, (want, privileged, allowed)) in PRIVILEGED_SERVICES.iter().enumerate() {
        let got = resolved(DockerConfig {
            privileged: *privileged,
            allowed_privileged_images: strings(allowed),
            ..Default::default()
        })
        .map(|s| containers::host_config(&s, &[], "alpine").privileged);
        t.check(
            &format!("{D} TestDockerPrivilegedJobSetting"),
            &format!("#{i} privileged={privileged} {allowed:?}"),
            got == Ok(Some(*want)),
            || format!("privileged {got:?}, want {want}"),
        );
    }
}

/// docker_test.go TestDocker(Services)SecurityOptSetting: a `seccomp=<file>` entry is sent
/// with the file's JSON inline, other entries as written.
fn security_opt_table(t: &mut Tally) {
    let profile = r#"{"defaultAction":"SCMP_ACT_ERRNO"}"#;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("seccomp-profile.json");
    std::fs::write(&path, profile).expect("profile");
    let options = vec![
        format!("seccomp={}", path.display()),
        "apparmor=unconfined".to_string(),
    ];
    let want = vec![
        format!("seccomp={profile}"),
        "apparmor=unconfined".to_string(),
    ];
    for (test, service) in [
        ("TestDockerSecurityOptSetting", false),
        ("TestDockerServicesSecurityOptSetting", true),
    ] {
        let mut docker = DockerConfig::default();
        if service {
            docker.services_security_opt = options.clone();
        } else {
            docker.security_opt = options.clone();
        }
        let got = resolved(docker).map(|s| {
            if service {
                services::host_config(&s, "alpine:latest", &[], None).security_opt
            } else {
                containers::host_config(&s, &[], "alpine").security_opt
            }
        });
        t.check(
            &format!("{D} {test}"),
            "seccomp file and apparmor",
            got.as_ref() == Ok(&Some(want.clone())),
            || format!("security_opt {got:?}"),
        );
    }
}

/// TestDockerMacAddress: every endpoint of the build container carries `mac_address` (API 1.44
/// and later).
fn mac_address_case(t: &mut Tally) {
    let network = services::JobNetwork {
        mac_address: Some("92:d0:c6:0a:29:33".into()),
        legacy_api: services::legacy_endpoint_api("1.44"),
        ..Default::default()
    };
    let endpoints = network
        .endpoint(Vec::new())
        .and_then(|n| n.endpoints_config)
        .unwrap_or_default();
    let agrees = !endpoints.is_empty()
        && endpoints
            .values()
            .all(|e| e.mac_address.as_deref() == Some("92:d0:c6:0a:29:33"));
    t.check(&format!("{D} TestDockerMacAddress"), "", agrees, || {
        format!("endpoints {endpoints:?}")
    });
}

/// TestDockerImageWithUser: (case, runner `user`, job `docker: user`, allowed_users, the build
/// container's user, or None for a refusal naming upstream's text). `TTUSER` is set to the
/// expected user, as upstream's test sets it.
fn image_user_table(t: &mut Tally) {
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        &'static [&'static str],
        Option<&'static str>,
    );
    let cases: &[Case] = &[
        ("no allowed users, neither specified", "", "", &[], Some("")),
        (
            "no allowed users, runner user specified",
            "baba",
            "",
            &[],
            Some("baba"),
        ),
        (
            "no allowed users, job user specified",
            "",
            "baba",
            &[],
            Some("baba"),
        ),
        (
            "no allowed users, both specified",
            "baba",
            "yaga",
            &[],
            Some("baba"),
        ),
        (
            "ok allowed users, neither specified",
            "",
            "",
            &["baba"],
            Some(""),
        ),
        (
            "ok allowed users, runner user specified",
            "baba",
            "",
            &["baba"],
            Some("baba"),
        ),
        (
            "ok allowed users, job user specified",
            "",
            "baba",
            &["baba"],
            Some("baba"),
        ),
        (
            "ok allowed users, both specified",
            "baba",
            "yaga",
            &["baba"],
            Some("baba"),
        ),
        (
            "ok allowed users, job user as variable",
            "",
            "${TTUSER}",
            &["baba"],
            Some("baba"),
        ),
        (
            "bad allowed users, runner user specified",
            "baba",
            "",
            &["yaga"],
            None,
        ),
        (
            "bad allowed users, job user specified",
            "",
            "baba",
            &["yaga"],
            None,
        ),
        (
            "bad allowed users, both specified",
            "baba",
            "yaga",
            &["blammo"],
            None,
        ),
    ];
    for (case, runner_user, job_user, allowed, want) in cases {
        let vars = VarList {
            vars: vec![Var {
                key: "TTUSER".into(),
                value: want.unwrap_or_default().to_string(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let got = resolved(DockerConfig {
            user: runner_user.to_string(),
            allowed_users: strings(allowed),
            ..Default::default()
        })
        .and_then(|s| containers::build_user(&s, &vars.expand(job_user)).map_err(|e| e.message));
        let agrees = match (&got, want) {
            (Ok(user), Some(w)) => user.as_deref().unwrap_or_default() == *w,
            (Err(e), None) => e.contains("is not an allowed user"),
            _ => false,
        };
        t.check(
            &format!("{D} TestDockerImageWithUser"),
            case,
            agrees,
            || format!("user {got:?}, want {want:?}"),
        );
    }
}

/// A device request as (driver, count, device IDs, capabilities, options).
type Request = (
    String,
    i64,
    Vec<String>,
    Vec<Vec<String>>,
    std::collections::HashMap<String, String>,
);

/// TestDockerServicesDeviceRequestsSetting and TestDockerGetServicesDeviceRequests:
/// `service_gpus` as the service container's device requests, upstream's expected request
/// (count, device IDs; driver empty, capability `gpu`, no options), none for an empty value,
/// or a refusal with upstream's parse error.
fn service_gpus_table(t: &mut Tally) {
    type Case = (
        &'static str,
        &'static str,
        Result<Option<(i64, &'static [&'static str])>, &'static str>,
    );
    let cases: &[Case] = &[
        (
            "TestDockerServicesDeviceRequestsSetting request all GPUs",
            "all",
            Ok(Some((-1, &[]))),
        ),
        (
            "TestDockerServicesDeviceRequestsSetting gpus is empty string",
            "",
            Ok(None),
        ),
        (
            "TestDockerGetServicesDeviceRequests request all GPUs",
            "all",
            Ok(Some((-1, &[]))),
        ),
        (
            "TestDockerGetServicesDeviceRequests request GPUs by device ID",
            "\"device=1,2\"",
            Ok(Some((0, &["1", "2"]))),
        ),
        (
            "TestDockerGetServicesDeviceRequests request GPUs by count",
            "2",
            Ok(Some((2, &[]))),
        ),
        (
            "TestDockerGetServicesDeviceRequests gpus is empty string",
            "",
            Ok(None),
        ),
        (
            "TestDockerGetServicesDeviceRequests parse gpus string error",
            "somestring=thatshouldtriggeranerror",
            Err("unexpected key 'somestring' in 'somestring=thatshouldtriggeranerror'"),
        ),
    ];
    for (test, gpus, want) in cases {
        let got = resolved(DockerConfig {
            service_gpus: gpus.to_string(),
            ..Default::default()
        })
        .map(|s| {
            services::host_config(&s, "alpine:latest", &[], None)
                .device_requests
                .map(|rs| {
                    rs.into_iter()
                        .map(|r| -> Request {
                            (
                                r.driver.unwrap_or_default(),
                                r.count.unwrap_or_default(),
                                r.device_ids.unwrap_or_default(),
                                r.capabilities.unwrap_or_default(),
                                r.options.unwrap_or_default(),
                            )
                        })
                        .collect::<Vec<_>>()
                })
        });
        let agrees = match (&got, want) {
            (Ok(None), Ok(None)) => true,
            (Ok(Some(rs)), Ok(Some((count, ids)))) => {
                rs.as_slice()
                    == [(
                        String::new(),
                        *count,
                        strings(ids),
                        vec![vec!["gpu".to_string()]],
                        Default::default(),
                    )]
            }
            (Err(e), Err(text)) => e.contains(text),
            _ => false,
        };
        let (name, case) = test.split_once(' ').unwrap_or((test, ""));
        t.check(&format!("{D} {name}"), case, agrees, || format!("{got:?}"));
    }
}

/// TestDockerServicesDevicesSetting: `services_devices` patterns matching the service image
/// `alpine:latest` (not `nomatch`) give it their devices.
fn services_devices_setting_table(t: &mut Tally) {
    type Case = (
        &'static str,
        &'static [(&'static str, &'static [&'static str])],
        &'static [(&'static str, &'static str, &'static str)],
    );
    let cases: &[Case] = &[
        (
            "same host and container path",
            &[
                ("alpine:*", &["/dev/usb:/dev/usb:ro"]),
                ("alp*", &["/dev/kvm", "/dev/dri"]),
                ("nomatch", &["/dev/null"]),
            ],
            &[
                ("/dev/usb", "/dev/usb", "ro"),
                ("/dev/kvm", "/dev/kvm", "rwm"),
                ("/dev/dri", "/dev/dri", "rwm"),
            ],
        ),
        (
            "different host and container path",
            &[
                ("alpine:*", &["/dev/usb:/dev/xusb:ro"]),
                ("alp*", &["/dev/kvm:/dev/xkvm", "/dev/dri"]),
                ("nomatch", &["/dev/null"]),
            ],
            &[
                ("/dev/usb", "/dev/xusb", "ro"),
                ("/dev/kvm", "/dev/xkvm", "rwm"),
                ("/dev/dri", "/dev/dri", "rwm"),
            ],
        ),
    ];
    for (case, devices, want) in cases {
        let got = resolved(DockerConfig {
            services_devices: devices
                .iter()
                .map(|(p, d)| (p.to_string(), strings(d)))
                .collect(),
            ..Default::default()
        })
        .map(|s| devices_of(&services::host_config(&s, "alpine:latest", &[], None)));
        let mut want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        want.sort();
        t.check(
            &format!("{D} TestDockerServicesDevicesSetting"),
            case,
            got.as_ref() == Ok(&want),
            || format!("{got:?}"),
        );
    }
}

pub fn host_settings_tables(t: &mut Tally) {
    service_gpus_table(t);
    services_devices_setting_table(t);
    image_user_table(t);
    privileged_job_table(t);
    security_opt_table(t);
    mac_address_case(t);
    for (file, test, service, set, check) in rows() {
        let host = settings(set).map(|s| {
            if service {
                services::host_config(&s, "alpine:latest", &[], None)
            } else {
                containers::host_config(&s, &[], "alpine")
            }
        });
        let agrees = host.as_ref().is_ok_and(check);
        let (name, case) = test.split_once(' ').unwrap_or((test, ""));
        let case = case.trim_start_matches("/ ");
        t.check(&format!("{file} {name}"), case, agrees, || {
            format!("host config {host:?}")
        });
    }
    // Refused: the error names what upstream's error names.
    let refused: [Refused; 2] = [
        (
            "TestParseDeviceStringFour",
            |d| d.devices = strings(&["/dev/kvm:/devices/kvm:r:oops"]),
            "too many colons",
        ),
        (
            "TestDockerUlimitSetting / invalid limit value",
            |d| d.ulimit = map(&[("nofile", "a")]),
            "nofile",
        ),
    ];
    for (test, set, text) in refused {
        let got = settings(set);
        let (name, case) = test.split_once(' ').unwrap_or((test, ""));
        let case = case.trim_start_matches("/ ");
        t.check(
            &format!("{D} {name}"),
            case,
            got.as_ref().is_err_and(|e| e.contains(text)),
            || format!("{got:?}"),
        );
    }
}
