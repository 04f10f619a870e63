//! The shape of `config.toml` as upstream's structs define it: every table, its keys in
//! upstream's canonical spelling, and each key's type.
//!
//! The loader walks the parsed TOML against these tables to map keys (exactly, then ignoring
//! case, as gitlab-runner's decoder does), to check and convert types with positions, and to
//! spot unknown keys. The serde model in [`crate::config::model`] uses the same names; a test
//! checks that the two agree key for key. Nothing here parses text or holds values.

/// What a key holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A string.
    Str,
    /// A 64-bit integer (Go `int`/`int64`).
    Int,
    /// A float; an integer is accepted when it converts exactly.
    Float,
    /// A boolean.
    Bool,
    /// A Go duration: a duration string or an integer of nanoseconds.
    Duration,
    /// A Go `time.Time`: a TOML datetime or an RFC 3339 string.
    Datetime,
    /// An array of strings.
    StrList,
    /// A string or an array of strings (upstream's `StringOrArray`).
    StrOrList,
    /// A table of strings (keys kept as written).
    StrMap,
    /// A table of booleans (keys kept as written).
    BoolMap,
    /// A table of arrays of strings (keys kept as written).
    StrListMap,
    /// A sub-table.
    Table(&'static Schema),
    /// An array of tables (`[[...]]`).
    TableList(&'static Schema),
    /// A table drover keeps verbatim without checking it.
    Raw,
}

/// One key of a table.
#[derive(Debug)]
pub(crate) struct Field {
    /// The canonical key, as upstream spells it.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// When set, the key is loaded but drover does not use it; the text says why.
    pub unused: Option<&'static str>,
}

/// One table.
#[derive(Debug)]
pub(crate) struct Schema {
    /// The table's name as operators write it, e.g. `[runners.machine]`.
    pub title: &'static str,
    /// Its keys in upstream's struct order (which decides case-insensitive ties).
    pub fields: &'static [Field],
    /// Keys that upstream once had here, lower-cased, with what to do instead.
    pub removed: &'static [(&'static str, &'static str)],
}

const fn f(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        unused: None,
    }
}

const fn unused(name: &'static str, kind: Kind, why: &'static str) -> Field {
    Field {
        name,
        kind,
        unused: Some(why),
    }
}

use Kind::*;

const OTHER_EXECUTOR: &str = "it configures another executor; drover loads it and ignores it";

/// The top level of the file.
pub(crate) static ROOT: Schema = Schema {
    title: "the top level",
    fields: &[
        f("listen_address", Str),
        f("session_server", Table(&SESSION_SERVER)),
        f("labels", StrMap),
        f("concurrent", Int),
        f("check_interval", Int),
        f("log_level", Str),
        f("log_format", Str),
        f("user", Str),
        f("runners", TableList(&RUNNER)),
        f("sentry_dsn", Str),
        f("connection_max_age", Duration),
        unused("experimental", Raw, "drover has no experimental settings"),
        f("shutdown_timeout", Int),
        f("machine", Table(&GLOBAL_MACHINE)),
    ],
    removed: &[(
        "metrics_server",
        "`metrics_server` was renamed `listen_address` (gitlab-runner 12.0): rename the key",
    )],
};

static SESSION_SERVER: Schema = Schema {
    title: "[session_server]",
    fields: &[
        f("listen_address", Str),
        f("advertise_address", Str),
        f("session_timeout", Int),
    ],
    removed: &[],
};

static GLOBAL_MACHINE: Schema = Schema {
    title: "[machine]",
    fields: &[f("shutdown_drain", Table(&SHUTDOWN_DRAIN))],
    removed: &[],
};

static SHUTDOWN_DRAIN: Schema = Schema {
    title: "[machine.shutdown_drain]",
    fields: &[
        f("enabled", Bool),
        f("concurrency", Int),
        f("max_retries", Int),
        f("retry_backoff", Duration),
    ],
    removed: &[],
};

/// One `[[runners]]` entry (upstream's RunnerConfig with its embedded credentials and settings).
pub(crate) static RUNNER: Schema = Schema {
    title: "[[runners]]",
    fields: &[
        f("name", Str),
        f("limit", Int),
        f("output_limit", Int),
        f("request_concurrency", Int),
        f("strict_check_interval", Bool),
        f("unhealthy_requests_limit", Int),
        f("unhealthy_interval", Duration),
        f("job_status_final_update_retry_limit", Int),
        f("url", Str),
        f("id", Int),
        f("token", Str),
        f("token_obtained_at", Datetime),
        f("token_expires_at", Datetime),
        f("tls-ca-file", Str),
        f("tls-cert-file", Str),
        f("tls-key-file", Str),
        f("labels", StrMap),
        f("executor", Str),
        f("builds_dir", Str),
        f("cache_dir", Str),
        f("clone_url", Str),
        f("environment", StrList),
        f("proxy_exec", Bool),
        f("pre_get_sources_script", Str),
        f("post_get_sources_script", Str),
        f("pre_build_script", Str),
        f("post_build_script", Str),
        f("debug_trace_disabled", Bool),
        f("safe_directory_checkout", Bool),
        f("clean_git_config", Bool),
        f("shell", Str),
        f("custom_build_dir", Table(&CUSTOM_BUILD_DIR)),
        unused("referees", Raw, "drover does not run metrics referees"),
        f("cache", Table(&CACHE)),
        f("feature_flags", BoolMap),
        unused("monitoring", Raw, "drover does not implement per-runner monitoring"),
        f("use_slot_cgroups", Bool),
        f("slot_cgroup_template", Str),
        unused("instance", Raw, OTHER_EXECUTOR),
        unused("ssh", Table(&SSH), OTHER_EXECUTOR),
        f("docker", Table(&DOCKER)),
        unused("parallels", Raw, OTHER_EXECUTOR),
        unused("virtualbox", Raw, OTHER_EXECUTOR),
        f("machine", Table(&MACHINE)),
        unused("kubernetes", Raw, OTHER_EXECUTOR),
        unused("custom", Table(&CUSTOM), OTHER_EXECUTOR),
        unused("autoscaler", Raw, OTHER_EXECUTOR),
        f("step_runner_image", Str),
        f("prepare_timeout", Duration),
        f("get_sources_timeout", Duration),
        unused(
            "artifact",
            Raw,
            "drover's artifact transfers use their own timeouts; [runners.artifact] is ignored",
        ),
    ],
    removed: &[
        ("pre_clone_script", "`pre_clone_script` was removed in gitlab-runner 17.0 and is ignored: rename it to `pre_get_sources_script`"),
        ("post_clone_script", "`post_clone_script` was removed in gitlab-runner 17.0 and is ignored: rename it to `post_get_sources_script`"),
        ("tags", "tags are set in GitLab when the runner is registered; this key is ignored"),
        ("tls-skip-verify", "`tls-skip-verify` is no longer supported and is ignored: give the server's CA with `tls-ca-file`"),
        ("network_mode", "`network_mode` belongs in [runners.docker]; here it is ignored"),
        ("image", "`image` belongs in [runners.docker]; here it is ignored"),
        ("privileged", "`privileged` belongs in [runners.docker]; here it is ignored"),
        ("volumes", "`volumes` belongs in [runners.docker]; here it is ignored"),
    ],
};

static CUSTOM_BUILD_DIR: Schema = Schema {
    title: "[runners.custom_build_dir]",
    fields: &[f("enabled", Bool)],
    removed: &[],
};

static SSH: Schema = Schema {
    title: "[runners.ssh]",
    fields: &[
        f("user", Str),
        f("password", Str),
        f("host", Str),
        f("port", Str),
        f("identity_file", Str),
        f("disable_strict_host_key_checking", Bool),
        f("known_hosts_file", Str),
    ],
    removed: &[],
};

static CUSTOM: Schema = Schema {
    title: "[runners.custom]",
    fields: &[
        f("config_exec", Str),
        f("config_args", StrList),
        f("config_exec_timeout", Int),
        f("prepare_exec", Str),
        f("prepare_args", StrList),
        f("prepare_exec_timeout", Int),
        f("run_exec", Str),
        f("run_args", StrList),
        f("cleanup_exec", Str),
        f("cleanup_args", StrList),
        f("cleanup_exec_timeout", Int),
        f("graceful_kill_timeout", Int),
        f("force_kill_timeout", Int),
    ],
    removed: &[],
};

static CACHE: Schema = Schema {
    title: "[runners.cache]",
    fields: &[
        f("Type", Str),
        f("Path", Str),
        f("Shared", Bool),
        f("MaxUploadedArchiveSize", Int),
        f("s3", Table(&CACHE_S3)),
        f("gcs", Table(&CACHE_GCS)),
        f("azure", Table(&CACHE_AZURE)),
    ],
    removed: &[
        ("serveraddress", FLAT_S3),
        ("accesskey", FLAT_S3),
        ("secretkey", FLAT_S3),
        ("bucketname", FLAT_S3),
        ("bucketlocation", FLAT_S3),
        ("insecure", FLAT_S3),
    ],
};

const FLAT_S3: &str = "S3 settings directly under [runners.cache] were removed in gitlab-runner 12.0 and are ignored: move them into [runners.cache.s3]";

static CACHE_S3: Schema = Schema {
    title: "[runners.cache.s3]",
    fields: &[
        f("ServerAddress", Str),
        f("AccessKey", Str),
        f("SecretKey", Str),
        f("SessionToken", Str),
        f("BucketName", Str),
        f("BucketLocation", Str),
        f("Insecure", Bool),
        f("AuthenticationType", Str),
        f("ServerSideEncryption", Str),
        f("ServerSideEncryptionKeyID", Str),
        f("DualStack", Bool),
        f("PathStyle", Bool),
        f("Accelerate", Bool),
        f("RoleARN", Str),
        f("UploadRoleARN", Str),
        f("AssumeRoleMaxConcurrency", Int),
        f("DisableAssumeRoleCredentialsCaching", Bool),
    ],
    removed: &[],
};

static CACHE_GCS: Schema = Schema {
    title: "[runners.cache.gcs]",
    fields: &[
        f("AccessID", Str),
        f("PrivateKey", Str),
        f("CredentialsFile", Str),
        f("BucketName", Str),
        f("UniverseDomain", Str),
    ],
    removed: &[],
};

static CACHE_AZURE: Schema = Schema {
    title: "[runners.cache.azure]",
    fields: &[
        f("AccountName", Str),
        f("AccountKey", Str),
        f("ContainerName", Str),
        f("StorageDomain", Str),
    ],
    removed: &[],
};

static MACHINE: Schema = Schema {
    title: "[runners.machine]",
    fields: &[
        f("MaxGrowthRate", Int),
        f("IdleCount", Int),
        f("IdleScaleFactor", Float),
        f("IdleCountMin", Int),
        f("IdleTime", Int),
        f("MaxBuilds", Int),
        f("MachineDriver", Str),
        f("MachineName", Str),
        f("MachineOptions", StrList),
        f("MachineOptionsWithName", StrList),
        f("MaxRemovalAttempts", Int),
        f("OffPeakPeriods", StrList),
        f("OffPeakTimezone", Str),
        f("OffPeakIdleCount", Int),
        f("OffPeakIdleTime", Int),
        f("autoscaling", TableList(&AUTOSCALING)),
    ],
    removed: &[],
};

pub(crate) static AUTOSCALING: Schema = Schema {
    title: "[[runners.machine.autoscaling]]",
    fields: &[
        f("Periods", StrList),
        f("Timezone", Str),
        f("IdleCount", Int),
        f("IdleScaleFactor", Float),
        f("IdleCountMin", Int),
        f("IdleTime", Int),
    ],
    removed: &[],
};

static DOCKER_SERVICE: Schema = Schema {
    title: "[[runners.docker.services]]",
    fields: &[
        f("name", Str),
        f("alias", Str),
        f("command", StrList),
        f("entrypoint", StrList),
        f("environment", StrList),
        unused(
            "suspend_data_path",
            Str,
            "drover does not suspend and resume services",
        ),
    ],
    removed: &[],
};

static DOCKER: Schema = Schema {
    title: "[runners.docker]",
    fields: &[
        f("host", Str),
        f("tls_cert_path", Str),
        f("tls_verify", Bool),
        f("hostname", Str),
        f("image", Str),
        f("runtime", Str),
        f("memory", Str),
        f("memory_swap", Str),
        f("memory_reservation", Str),
        f("cgroup_parent", Str),
        f("cpuset_cpus", Str),
        f("cpuset_mems", Str),
        f("cpus", Str),
        f("cpu_shares", Int),
        f("dns", StrList),
        f("dns_search", StrList),
        f("privileged", Bool),
        f("services_privileged", Bool),
        f("disable_entrypoint_overwrite", Bool),
        f("user", Str),
        f("allowed_users", StrList),
        f("group_add", StrList),
        f("userns_mode", Str),
        f("cap_add", StrList),
        f("cap_drop", StrList),
        f("oom_kill_disable", Bool),
        f("oom_score_adjust", Int),
        f("security_opt", StrList),
        f("services_security_opt", StrList),
        f("devices", StrList),
        f("device_cgroup_rules", StrList),
        f("gpus", Str),
        f("services_devices", StrListMap),
        f("disable_cache", Bool),
        f("volumes", StrList),
        f("volume_driver", Str),
        f("volume_driver_ops", StrMap),
        f("cache_dir", Str),
        f("extra_hosts", StrList),
        f("volumes_from", StrList),
        f("network_mode", Str),
        f("ipcmode", Str),
        f("mac_address", Str),
        f("links", StrList),
        f("services", TableList(&DOCKER_SERVICE)),
        f("services_limit", Int),
        f("service_memory", Str),
        f("service_memory_swap", Str),
        f("service_memory_reservation", Str),
        f("service_cgroup_parent", Str),
        f("service_slot_cgroup_template", Str),
        f("service_cpuset_cpus", Str),
        f("service_cpus", Str),
        f("service_cpu_shares", Int),
        f("service_gpus", Str),
        f("wait_for_services_timeout", Int),
        f("allowed_images", StrList),
        f("allowed_privileged_images", StrList),
        f("allowed_privileged_services", StrList),
        f("allowed_pull_policies", StrList),
        f("allowed_services", StrList),
        f("pull_policy", StrOrList),
        f("isolation", Str),
        f("shm_size", Int),
        f("tmpfs", StrMap),
        f("services_tmpfs", StrMap),
        f("sysctls", StrMap),
        f("helper_image", Str),
        f("helper_image_flavor", Str),
        f("container_labels", StrMap),
        f("enable_ipv6", Bool),
        f("ulimit", StrMap),
        f("network_mtu", Int),
        f("log_options", StrMap),
        f("pid_mode", Str),
        f("volume_keep", Bool),
    ],
    removed: &[],
};

impl Schema {
    /// The field for `key`: an exact match first, otherwise the first field whose name equals
    /// it ignoring case (upstream's fallback). The flag says whether the match was exact.
    pub(crate) fn lookup(&self, key: &str) -> Option<(&'static Field, bool)>
    where
        Self: 'static,
    {
        let fields: &'static [Field] = self.fields;
        if let Some(field) = fields.iter().find(|fd| fd.name == key) {
            return Some((field, true));
        }
        fields
            .iter()
            .find(|fd| equal_fold(fd.name, key))
            .map(|fd| (fd, false))
    }

    /// What to say about a removed key, if `key` is one.
    pub(crate) fn removed_hint(&self, key: &str) -> Option<&'static str> {
        let lower = key.to_lowercase();
        self.removed
            .iter()
            .find(|(k, _)| *k == lower)
            .map(|(_, hint)| *hint)
    }

    /// The known key closest to `key` (for "did you mean"), if one is close.
    pub(crate) fn suggest(&self, key: &str) -> Option<&'static str> {
        let lower = key.to_lowercase();
        let fields: &'static [Field] = self.fields;
        fields
            .iter()
            .map(|fd| (edit_distance(&fd.name.to_lowercase(), &lower), fd.name))
            .filter(|(d, _)| *d <= 2 && *d < lower.chars().count())
            .min_by_key(|(d, _)| *d)
            .map(|(_, name)| name)
    }
}

/// Unicode case-insensitive equality, char by char (as Go's `strings.EqualFold`, using
/// lower-casing where Go uses simple folding).
pub(crate) fn equal_fold(a: &str, b: &str) -> bool {
    let mut ai = a.chars();
    let mut bi = b.chars();
    loop {
        match (ai.next(), bi.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) => {
                if x != y && !x.to_lowercase().eq(y.to_lowercase()) {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_match_beats_fold() {
        let (fd, exact) = CACHE.lookup("s3").expect("s3");
        assert_eq!((fd.name, exact), ("s3", true));
        let (fd, exact) = CACHE.lookup("S3").expect("S3");
        assert_eq!((fd.name, exact), ("s3", false));
        let (fd, exact) = CACHE_S3.lookup("bucketName").expect("bucketName");
        assert_eq!((fd.name, exact), ("BucketName", false));
        assert!(MACHINE.lookup("Idle_Count").is_none());
    }

    #[test]
    fn suggestions_and_removed_keys() {
        assert_eq!(MACHINE.suggest("IdleTme"), Some("IdleTime"));
        assert_eq!(MACHINE.suggest("zzzzzzzz"), None);
        assert!(RUNNER.removed_hint("pre_clone_script").is_some());
        assert!(CACHE.removed_hint("ServerAddress").is_some());
    }
}
