//! Every real-world config.toml in shared/corpus/configs/real loads, and the values an operator
//! checks (runners, executors, machine and schedule settings, cache) come out as upstream reads
//! them. One test per file; see the corpus INDEX.md for where each file comes from.

use chrono::{DateTime, Utc};
use drover::config::{load_file, Loaded};

const CORPUS: &str = "/work/shared/corpus/configs/real";

fn corpus_dir() -> std::path::PathBuf {
    // CI clones the repo with shared/ beside it; locally the worktree sits in /work/wt.
    let candidates = [
        std::path::PathBuf::from(CORPUS),
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/configs/real"),
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/corpus/configs/real"),
    ];
    candidates
        .iter()
        .find(|p| p.is_dir())
        .cloned()
        .unwrap_or_else(|| panic!("corpus not found in any of {candidates:?}"))
}

fn load(name: &str) -> Loaded {
    let path = corpus_dir().join(name);
    match load_file(&path) {
        Ok(l) => l,
        Err(e) => panic!("{name} must load:\n{e}"),
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("valid instant")
        .with_timezone(&Utc)
}

/// Monday 2026-11-23 10:00 UTC.
fn monday_10() -> DateTime<Utc> {
    at("2026-11-23T10:00:00Z")
}

/// Saturday 2026-11-28 12:00 UTC.
fn saturday_12() -> DateTime<Utc> {
    at("2026-11-28T12:00:00Z")
}

fn warned(l: &Loaded, fragment: &str) -> bool {
    l.warnings.iter().any(|w| w.message.contains(fragment))
}

#[test]
fn every_corpus_file_loads() {
    let mut count = 0;
    let mut runners = 0;
    let mut machine_files = 0;
    let mut entries: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("corpus dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    entries.sort();
    for path in entries {
        let l = load_file(&path).unwrap_or_else(|e| panic!("{}:\n{e}", path.display()));
        count += 1;
        runners += l.config.runners.len();
        if l.config
            .runners
            .iter()
            .any(|r| r.executor == "docker+machine")
        {
            machine_files += 1;
        }
    }
    // INDEX.md: 25 files, 31 [[runners]] entries, docker+machine in 13 files.
    assert_eq!((count, runners, machine_files), (25, 31, 13));
}

#[test]
fn ackee_gcp_no_global_section_local_timezone() {
    let l = load("AckeeCZ__terraform-gcp-gitlab-runners__runner-config.toml");
    assert_eq!(
        l.config.concurrent, 1,
        "no global section: concurrent defaults to 1"
    );
    let r = &l.config.runners[0];
    assert_eq!(
        (r.name.as_str(), r.executor.as_str()),
        ("ackee-gcp-runner", "docker+machine")
    );
    let cache = r.cache.as_ref().expect("cache");
    assert_eq!(cache.cache_type, "gcs");
    assert!(cache.shared);
    let gcs = cache.gcs.as_ref().expect("gcs");
    assert_eq!(gcs.bucket_name, "ackee-gitlab-runner-cache-fake");
    assert!(
        cache.s3.is_some() && cache.azure.is_some(),
        "empty sub-tables load as empty sections"
    );
    let m = r.machine.as_ref().expect("machine");
    assert_eq!((m.idle_count, m.idle_time, m.max_builds), (0, 600, 10));
    assert_eq!(m.machine_driver, "google");
    assert_eq!(m.machine_name, "instance-%s");
    assert_eq!(m.autoscaling.len(), 1);
    assert_eq!(m.autoscaling[0].timezone(), "Local");
    assert_eq!(
        (m.autoscaling[0].idle_count, m.autoscaling[0].idle_time),
        (1, 1200)
    );
    // Saturday noon UTC is a weekend day in every host zone: the root values apply.
    let eff = m.effective_idle(saturday_12());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (None, 0, 600)
    );
    assert!(r
        .docker
        .as_ref()
        .is_some_and(|d| d.privileged && d.image == "alpine:latest"));
}

#[test]
fn deimos_google_two_sections_in_lagos() {
    let l = load("DeimosCloud__terraform-google-gitlab-ci-runner__runner-config.toml");
    assert_eq!(l.config.concurrent, 10);
    assert_eq!(l.config.listen_address, "127.0.0.1:9252");
    let r = &l.config.runners[0];
    assert_eq!(
        (r.limit, r.output_limit, r.request_concurrency),
        (10, 4096, 1)
    );
    let d = r.docker.as_ref().expect("docker");
    assert_eq!(d.volumes, ["/cache", "/certs/client"]);
    assert_eq!(
        d.pull_policy,
        ["always"],
        "a pull_policy string becomes a one-element list"
    );
    let m = r.machine.as_ref().expect("machine");
    assert_eq!(m.max_growth_rate, 0);
    assert_eq!(
        m.machine_options.len(),
        10,
        "odd commas and the trailing comma are fine"
    );
    assert_eq!(m.machine_options[9], "google-use-internal-ip");
    // 10:00 UTC Monday is 11:00 in Lagos: section 0.
    let eff = m.effective_idle(monday_10());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (Some(0), 2, 3600)
    );
    let eff = m.effective_idle(saturday_12());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (Some(1), 0, 300)
    );
    assert!(warned(&l, "pre_clone_script"));
}

#[test]
fn deimos_kubernetes_fragment_is_kept_not_used() {
    let l = load("DeimosCloud__terraform-kubernetes-gitlab-runner__config-tf.toml");
    let r = &l.config.runners[0];
    assert!(r.executor.is_empty() && r.name.is_empty() && r.url.is_empty());
    let gcs = r.cache.as_ref().and_then(|c| c.gcs.as_ref()).expect("gcs");
    assert_eq!(
        gcs.bucket_name, "fake-gitlab-runner-cache",
        "quoted keys are keys"
    );
    let k = r.kubernetes.as_ref().expect("kubernetes kept verbatim");
    assert_eq!(k.get("cpu_limit").and_then(|v| v.as_str()), Some("2"));
    assert!(warned(&l, "key kubernetes"));
}

#[test]
fn mlopes_shell_runner_with_removed_key() {
    let l = load("MLopesSousa__ci-docker-rancher-gitlab-runner__etc-gitlab-runner.toml");
    assert_eq!((l.config.concurrent, l.config.check_interval), (1, 0));
    let r = &l.config.runners[0];
    assert_eq!(
        (r.name.as_str(), r.executor.as_str()),
        ("cepro-poc", "shell")
    );
    assert_eq!(r.tls_ca_file, "");
    assert!(r.ssh.is_some() && r.parallels.is_some() && r.docker.is_some());
    assert!(warned(&l, "tls-skip-verify"));
    assert!(warned(&l, "executor \"shell\""));
}

#[test]
fn turgon37_two_runners_name_last() {
    let l = load("Turgon37__ansible-gitlab-runner__config-toml-j2.toml");
    assert_eq!(l.config.concurrent, 4);
    assert_eq!(l.config.log_level.as_deref(), Some("info"));
    let names: Vec<_> = l
        .config
        .runners
        .iter()
        .map(|r| (r.name.as_str(), r.executor.as_str()))
        .collect();
    assert_eq!(names, [("docker01", "docker"), ("shell01", "shell")]);
    let d = l.config.runners[0].docker.as_ref().expect("docker");
    assert_eq!(d.allowed_images, ["docker:latest"]);
    assert_eq!(d.allowed_services, ["username/docker-dind-pgis:latest"]);
    assert_eq!(d.pull_policy, ["always"]);
    assert_eq!(l.config.runners[0].environment.len(), 5);
    assert_eq!(
        l.config.runners[0].environment[3], "http_proxy=http://proxy.example.com:3128",
        "names keep their case"
    );
    assert!(l.config.runners[0].environment[0].starts_with("DOCKER_HOST=tcp://"));
}

#[test]
fn aleks_spot_trailing_commas_and_moscow() {
    let l = load("aleks-fofanov__terraform-gitlab-runner-aws-spot__runner-config.toml");
    assert_eq!(l.config.listen_address, ":9252");
    let r = &l.config.runners[0];
    assert_eq!(r.token, "", "no token line");
    assert_eq!((r.executor.as_str(), r.limit), ("docker+machine", 6));
    assert_eq!(
        r.docker.as_ref().expect("docker").volumes,
        ["/cache", "/certs/client"]
    );
    let s3 = r.cache.as_ref().and_then(|c| c.s3.as_ref()).expect("s3");
    assert_eq!(
        (s3.bucket_name.as_str(), s3.bucket_location.as_str()),
        ("example-gitlab-runner-cache", "us-east-1")
    );
    assert_eq!(s3.auth_type(), Some("iam"));
    let m = r.machine.as_ref().expect("machine");
    assert_eq!((m.idle_count, m.idle_time, m.max_builds), (1, 1800, 50));
    assert_eq!(m.machine_options.len(), 17);
    assert_eq!(m.autoscaling[0].periods(), ["* * 9-18 * * mon-fri *"]);
    // 10:00 UTC is 13:00 in Moscow.
    let eff = m.effective_idle(monday_10());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (Some(0), 2, 3600)
    );
    let eff = m.effective_idle(saturday_12());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (Some(1), 0, 600)
    );
}

#[test]
fn cattle_ops_current_module_integer_scale_factor() {
    let l = load("cattle-ops__terraform-aws-gitlab-runner__runner-config-tftpl.toml");
    let c = &l.config;
    assert_eq!((c.concurrent, c.check_interval), (10, 3));
    assert_eq!(c.log_format.as_deref(), Some("json"));
    assert_eq!(c.connection_max_age.map(|d| d.as_secs()), Some(900));
    assert_eq!(
        c.sentry_dsn.as_deref(),
        Some("__SENTRY_DSN_REPLACED_BY_USER_DATA__")
    );
    let r = &c.runners[0];
    let d = r.docker.as_ref().expect("docker");
    assert_eq!(d.pull_policy, ["always"]);
    assert_eq!(d.services.len(), 1);
    assert_eq!(d.services[0].name, "docker:24-dind");
    assert_eq!(d.services[0].entrypoint, ["dockerd-entrypoint.sh"]);
    assert_eq!(
        d.services[0].command,
        ["--registry-mirror", "https://mirror.gcr.io"]
    );
    let s3 = r.cache.as_ref().and_then(|c| c.s3.as_ref()).expect("s3");
    assert_eq!(s3.authentication_type, "iam");
    let m = r.machine.as_ref().expect("machine");
    assert_eq!((m.max_growth_rate, m.max_builds), (2, 20));
    assert_eq!(
        m.autoscaling[0].idle_scale_factor, 1.0,
        "IdleScaleFactor = 1 written as an integer"
    );
    // Monday 10:00 UTC = 11:00 Amsterdam: section 0 with all four values.
    let eff = m.effective_idle(monday_10());
    assert_eq!(eff.active_section, Some(0));
    assert_eq!(
        (
            eff.idle_count,
            eff.idle_count_min,
            eff.idle_scale_factor,
            eff.idle_time
        ),
        (5, 2, 1.0, 1800)
    );
    // Weekend section sets neither IdleCountMin nor IdleScaleFactor: they are 0, not inherited.
    let eff = m.effective_idle(saturday_12());
    assert_eq!(
        (
            eff.active_section,
            eff.idle_count,
            eff.idle_count_min,
            eff.idle_scale_factor
        ),
        (Some(1), 0, 0, 0.0)
    );
}

#[test]
fn cattle_ops_2020_offpeak_is_deprecated_and_ignored() {
    let l = load("cattle-ops__terraform-aws-gitlab-runner__runner-config-tpl-2020.toml");
    let m = l.config.runners[0].machine.as_ref().expect("machine");
    assert_eq!(m.off_peak_periods.len(), 2);
    assert_eq!(m.off_peak_timezone, "Europe/Amsterdam");
    assert!(m.autoscaling.is_empty());
    // OffPeak never changes the effective values.
    let eff = m.effective_idle(saturday_12());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (None, 0, 600)
    );
    assert!(warned(&l, "OffPeak settings are deprecated"));
    assert_eq!(l.config.runners[0].limit, 0);
}

#[test]
fn cmdlabs_offpeak_sydney() {
    let l = load("cmdlabs__terraform-aws-gitlab-runner-spot__runner-config.toml");
    let r = &l.config.runners[0];
    assert_eq!((r.executor.as_str(), r.limit), ("docker+machine", 4));
    let m = r.machine.as_ref().expect("machine");
    assert_eq!(
        (m.idle_time, m.max_builds, m.off_peak_idle_time),
        (300, 10, 1200)
    );
    assert_eq!(m.off_peak_timezone, "Australia/Sydney");
    assert_eq!(m.effective_idle(monday_10()).idle_time, 300);
    assert!(warned(&l, "OffPeak"));
}

#[test]
fn dmwm_minimal_misplaced_network_mode() {
    let l = load("dmwm__CRABServer__etc-gitlab-runner.toml");
    assert_eq!(l.config.concurrent, 1);
    let r = &l.config.runners[0];
    assert_eq!(r.executor, "docker");
    assert!(
        r.docker.is_none(),
        "network_mode at runner level does not reach [runners.docker]"
    );
    let w = l
        .warnings
        .iter()
        .find(|w| w.message.contains("network_mode"))
        .expect("warning");
    assert_eq!(w.line, 4);
}

#[test]
fn fullstack_kubernetes_with_tags_and_literal_string() {
    let l = load("fullstack-pw__infra__values-yaml-tpl.toml");
    let r = &l.config.runners[0];
    assert_eq!(
        (r.name.as_str(), r.executor.as_str()),
        ("k8s-runner", "kubernetes")
    );
    assert_eq!(
        r.environment,
        ["FF_USE_ADVANCED_POD_SPEC_CONFIGURATION=true"]
    );
    let k = r.kubernetes.as_ref().expect("kubernetes");
    let patch = k
        .get("pod_spec")
        .and_then(|v| v.as_array())
        .and_then(|a| a.first())
        .and_then(|t| t.get("patch"))
        .and_then(|v| v.as_str())
        .expect("pod_spec patch");
    assert!(patch.contains("secretName: kubeconfig"));
    assert!(warned(&l, "key tags"));
}

#[test]
fn fwiyh_custom_executor_datetimes() {
    let l = load("fwiyh__gitlab-incus-custom-executor__etc-gitlab-runner.toml");
    let c = &l.config;
    assert_eq!(
        c.connection_max_age.map(|d| d.as_secs()),
        Some(900),
        "\"15m0s\""
    );
    assert_eq!(c.log_level.as_deref(), Some("debug"));
    assert_eq!(c.session_server.session_timeout, 1800);
    let r = &c.runners[0];
    assert_eq!((r.id, r.executor.as_str()), (17, "custom"));
    assert_eq!(
        r.token_obtained_at.map(|t| t.to_rfc3339()),
        Some("2025-07-30T13:09:40+00:00".to_string())
    );
    assert_eq!(
        r.token_expires_at.map(|t| t.timestamp()),
        Some(-62135596800),
        "0001-01-01T00:00:00Z"
    );
    assert_eq!(
        r.tls_cert_file,
        "/etc/gitlab-runner/certs/gitlab.example.jp.crt"
    );
    let custom = r.custom.as_ref().expect("custom");
    assert_eq!(
        custom.run_exec, "/opt/incus-driver/run.sh",
        "trailing comments are not values"
    );
}

#[test]
fn upstream_config_toml_example() {
    let l = load("gitlabhq__gitlab-runner__config-toml-example.toml");
    let c = &l.config;
    assert_eq!(c.concurrent, 4);
    let got: Vec<_> = c
        .runners
        .iter()
        .map(|r| (r.name.as_str(), r.executor.as_str(), r.limit))
        .collect();
    assert_eq!(
        got,
        [
            ("shell", "shell", 2),
            ("ruby-3.1-docker", "docker", 0),
            ("production-server", "ssh", 0)
        ]
    );
    assert_eq!(
        c.runners[1].docker.as_ref().expect("docker").image,
        "ruby:3.1"
    );
    let ssh = c.runners[2].ssh.as_ref().expect("ssh");
    assert_eq!(
        (ssh.host.as_str(), ssh.port.as_str()),
        ("my-production-server", "22")
    );
}

#[test]
fn upstream_autoscale_aws_doc() {
    let l = load("gitlabhq__gitlab-runner__docs-autoscale-aws.toml");
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let r = &l.config.runners[0];
    assert_eq!((r.name.as_str(), r.limit), ("gitlab-aws-autoscaler", 20));
    let m = r.machine.as_ref().expect("machine");
    assert_eq!((m.idle_count, m.idle_time, m.max_builds), (1, 1800, 100));
    assert_eq!(m.machine_driver, "amazonec2");
    assert_eq!(m.machine_name, "gitlab-docker-machine-%s");
    assert_eq!(m.machine_options.len(), 9);
    let eff = m.effective_idle(monday_10());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (Some(0), 50, 3600)
    );
    // The period starts one second early and its last second is out (spec §3).
    assert_eq!(
        m.effective_idle(at("2026-11-23T08:59:59Z")).active_section,
        Some(0)
    );
    assert_eq!(
        m.effective_idle(at("2026-11-23T08:59:58Z")).active_section,
        None
    );
    assert_eq!(
        m.effective_idle(at("2026-11-23T17:59:58Z")).active_section,
        Some(0)
    );
    assert_eq!(
        m.effective_idle(at("2026-11-23T17:59:59Z")).active_section,
        None
    );
    let changes = m.idle_changes(at("2026-11-23T08:00:00Z"), 3, chrono::Duration::days(30));
    let instants: Vec<_> = changes
        .iter()
        .map(|(t, e)| (t.to_rfc3339(), e.active_section))
        .collect();
    assert_eq!(
        instants,
        [
            ("2026-11-23T08:59:59+00:00".to_string(), Some(0)),
            ("2026-11-23T17:59:59+00:00".to_string(), None),
            ("2026-11-24T08:59:59+00:00".to_string(), Some(0)),
        ]
    );
    let s3 = r.cache.as_ref().and_then(|c| c.s3.as_ref()).expect("s3");
    assert_eq!(s3.bucket_location, "us-west-2");
}

#[test]
fn upstream_autoscale_complete_doc() {
    let l = load("gitlabhq__gitlab-runner__docs-autoscale-complete.toml");
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    assert_eq!(l.config.concurrent, 50);
    let r = &l.config.runners[0];
    assert_eq!((r.name.as_str(), r.limit), ("autoscale-runner", 10));
    let m = r.machine.as_ref().expect("machine");
    assert_eq!((m.idle_count, m.idle_time, m.max_builds), (5, 600, 100));
    let eff = m.effective_idle(monday_10());
    assert_eq!(
        (
            eff.idle_count,
            eff.idle_count_min,
            eff.idle_scale_factor,
            eff.idle_time
        ),
        (50, 5, 1.5, 3600)
    );
    let eff = m.effective_idle(saturday_12());
    assert_eq!(
        (
            eff.active_section,
            eff.idle_count,
            eff.idle_count_min,
            eff.idle_scale_factor,
            eff.idle_time
        ),
        (Some(1), 5, 0, 0.0, 60)
    );
    let s3 = r.cache.as_ref().and_then(|c| c.s3.as_ref()).expect("s3");
    assert_eq!(s3.auth_type(), Some("access-key"));
}

#[test]
fn upstream_shutdown_drain_doc() {
    let l = load("gitlabhq__gitlab-runner__docs-shutdown-drain.toml");
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    assert_eq!(l.config.shutdown_timeout, 600);
    let drain = l
        .config
        .machine
        .as_ref()
        .and_then(|m| m.shutdown_drain.as_ref())
        .expect("drain");
    assert!(drain.enabled);
    assert_eq!((drain.concurrency, drain.max_retries), (5, 3));
    assert_eq!(drain.retry_backoff.map(|d| d.as_secs()), Some(5));
    let m = l.config.runners[0].machine.as_ref().expect("machine");
    assert_eq!((m.idle_count, m.idle_time), (5, 600));
}

#[test]
fn gitlab_saas_runner_last_section_wins() {
    let l = load("gitlabhq__gitlabhq__linux-saas-runner.toml");
    let c = &l.config;
    assert_eq!((c.concurrent, c.check_interval), (1000, 1));
    assert!(warned(&l, "metrics_server"));
    let r = &c.runners[0];
    assert_eq!((r.request_concurrency, r.limit), (16, 1000));
    let m = r.machine.as_ref().expect("machine");
    assert_eq!((m.idle_count, m.max_builds), (50, 1));
    assert_eq!(m.autoscaling[1].periods().len(), 2);
    // Saturday 03:45 UTC matches both sections: the last one wins.
    let eff = m.effective_idle(at("2026-11-28T03:45:00Z"));
    assert_eq!((eff.active_section, eff.idle_count), (Some(1), 700));
    let eff = m.effective_idle(saturday_12());
    assert_eq!((eff.active_section, eff.idle_count), (Some(0), 70));
    let eff = m.effective_idle(monday_10());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (None, 50, 3600)
    );
    let gcs = r.cache.as_ref().and_then(|c| c.gcs.as_ref()).expect("gcs");
    assert_eq!(gcs.bucket_name, "bucket-name");
}

#[test]
fn hifis_openstack_every_knob() {
    let l = load("hifis-net__ansible-role-gitlab-runner__config-toml-j2-openstack.toml");
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    assert_eq!(l.config.shutdown_timeout, 0);
    let m = l.config.runners[0].machine.as_ref().expect("machine");
    assert_eq!(
        (
            m.max_growth_rate,
            m.idle_count,
            m.idle_count_min,
            m.idle_time,
            m.max_builds
        ),
        (2, 2, 0, 3600, 5)
    );
    assert_eq!(m.idle_scale_factor, 0.0);
    assert_eq!(m.machine_driver, "openstack");
    assert!(m.machine_options[0].starts_with("openstack-auth-url="));
}

#[test]
fn metzenseifner_custom_executor_escapes() {
    let l = load("metzenseifner__gitlab-nspawn-runner__gitlab-runner.toml");
    let r = &l.config.runners[0];
    assert_eq!(r.token, "");
    assert_eq!(r.output_limit, 16384);
    assert!(
        r.builds_dir.contains("$CI_RUNNER_ID"),
        "builds_dir is not expanded at load"
    );
    let custom = r.custom.as_ref().expect("custom");
    assert_eq!(custom.config_exec_timeout, Some(1800));
    assert!(warned(&l, "custom.run_exec_timeout"));
    assert_eq!(l.config.log_format.as_deref(), Some("text"));
}

#[test]
fn mritd_docker_volumes_and_hosts() {
    let l = load("mritd__composes__gitlab-runner.toml");
    let r = &l.config.runners[0];
    assert_eq!(
        (r.builds_dir.as_str(), r.cache_dir.as_str()),
        ("/gitlab/runner-builds", "/gitlab/runner-cache")
    );
    let d = r.docker.as_ref().expect("docker");
    assert_eq!(d.extra_hosts, ["git.mritd.me:172.16.0.37"]);
    assert!(d.volumes.len() >= 4);
    assert!(r.cache.is_some());
}

#[test]
fn pepperize_case_insensitive_s3_and_underscored_integers() {
    let l = load("pepperize__cdk-autoscaling-gitlab-runner__snapshot-multi-runner.toml");
    assert_eq!(l.config.runners.len(), 2);
    let r = &l.config.runners[0];
    assert_eq!(r.output_limit, 52_428_800);
    let d = r.docker.as_ref().expect("docker");
    assert_eq!(
        (d.cap_add.as_slice(), d.wait_for_services_timeout),
        (&["CAP_SYS_ADMIN".to_string()][..], 300)
    );
    let s3 = r
        .cache
        .as_ref()
        .and_then(|c| c.s3.as_ref())
        .expect("[runners.cache.S3] reaches s3");
    assert_eq!(s3.server_address, "s3.amazonaws.com");
    assert_eq!(s3.bucket_name, "gitlab-runner-cache-bucket-test-us-east-1");
    assert_eq!(s3.bucket_location, "us-east-1");
    assert_eq!(s3.access_key, "AKIAFAKEFAKEFAKEFAKE");
    assert_eq!(s3.auth_type(), Some("access-key"));
    let m = r.machine.as_ref().expect("machine");
    assert_eq!(m.autoscaling[0].idle_time, 1800, "IdleTime = 1_800");
    assert_eq!(m.autoscaling[0].timezone(), "Etc/UTC");
    assert_eq!(m.effective_idle(monday_10()).idle_count, 1);
    let s3b = l.config.runners[1]
        .cache
        .as_ref()
        .and_then(|c| c.s3.as_ref())
        .expect("second runner s3");
    assert_eq!(
        s3b.bucket_name,
        "2gitlab-runner-cache-bucket-test-us-east-1"
    );
    assert!(warned(&l, "`bucketName` is read as `BucketName`"));
}

#[test]
fn redmic_env_token_and_flat_cache_keys() {
    let l = load("redmic-project__service-deployment__gitlab-runner.toml");
    assert_eq!(l.config.check_interval, 10);
    let r = &l.config.runners[0];
    assert_eq!(
        r.token,
        std::env::var("RUNNER_TOKEN").unwrap_or_default(),
        "token is ${{RUNNER_TOKEN}} expanded"
    );
    let d = r.docker.as_ref().expect("docker");
    assert_eq!(d.shm_size, 1_000_000_000);
    assert_eq!(
        (
            d.memory.as_str(),
            d.memory_swap.as_str(),
            d.cpuset_cpus.as_str()
        ),
        ("4g", "6g", "1,2")
    );
    let cache = r.cache.as_ref().expect("cache");
    assert_eq!(cache.cache_type, "s3");
    assert!(cache.shared);
    assert!(cache.s3.is_none(), "flat S3 keys are not an s3 section");
    assert!(warned(&l, "cache.ServerAddress"));
}

#[test]
fn riemers_autoscale_with_id_and_token_times() {
    let l = load("riemers__ansible-gitlab-runner__config-toml-j2-autoscale.toml");
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let r = &l.config.runners[0];
    assert_eq!(r.id, 12345);
    assert!(r.token_obtained_at.is_some());
    let m = r.machine.as_ref().expect("machine");
    assert_eq!(
        (m.machine_name.as_str(), m.machine_driver.as_str()),
        ("git-runner-%s", "amazonec2")
    );
    let eff = m.effective_idle(monday_10());
    assert_eq!(
        (eff.active_section, eff.idle_count, eff.idle_time),
        (Some(0), 3, 900)
    );
}

#[test]
fn riemers_molecule_feature_flags() {
    let l = load("riemers__ansible-gitlab-runner__molecule-initial.toml");
    let r = &l.config.runners[0];
    assert_eq!(r.feature_flag("FF_TIMESTAMPS"), Some(true));
    assert!(r.environment.is_empty());
    assert_eq!(
        r.docker.as_ref().expect("docker").pull_policy,
        ["if-not-present"]
    );
    assert!(r.cache.is_some());
    assert_eq!(l.config.concurrent, 8);
}

#[test]
fn webees_three_docker_runners() {
    let l = load("webees__devops__gitlab-runner.toml");
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let names: Vec<_> = l.config.runners.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["33f93d0b3bfa", "053b3fdb8bb6", "58c7544138b2"]);
    for r in &l.config.runners {
        assert_eq!(r.executor, "docker");
        assert_eq!(r.custom_build_dir.enabled, None);
        let d = r.docker.as_ref().expect("docker");
        assert_eq!(
            d.volumes,
            ["/var/run/docker.sock:/var/run/docker.sock", "/cache"]
        );
        assert_eq!(d.pull_policy, ["if-not-present"]);
    }
}
