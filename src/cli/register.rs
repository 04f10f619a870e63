//! `drover register`: registers a runner with GitLab (or verifies a `glrt-` authentication
//! token) and appends it to `config.toml` as `[[runners]]`, keeping the rest of the file,
//! comments included. Non-interactive: every value comes from flags or their environment
//! variables, as `gitlab-runner register --non-interactive`; a missing required value is an
//! error naming the flag (drover never prompts).
//!
//! Token handling (spec §3.11, §8): `--token glrt-…` verifies the token (server-side
//! attributes such as `--locked` or `--tag-list` are then an error); any other `--token` is
//! verified and saved; otherwise `--registration-token` registers through `POST /runners`
//! (a `glrt-` value there is verified instead, with those attributes ignored and warned about).
//! When a later step fails, a runner registered by this command is unregistered again unless
//! `--leave-runner`.

use crate::cli::output::errln;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use clap::Args;
use toml_edit::{value, Array, Item, Table};

use super::config_file::ConfigFile;
use super::gitlab_util::{block_on, client_for, fail, flag_bool};
use crate::gitlab::{self, token, Client, Info, RegisterParams, RunnerCredentials};

/// Arguments of `drover register`.
#[derive(Debug, Args, Default)]
#[command(about = "Register a runner with GitLab and add it to config.toml")]
pub struct RegisterArgs {
    /// Config file
    #[arg(short = 'c', long = "config", env = "CONFIG_FILE", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Run without prompts (drover never prompts; accepted for compatibility)
    #[arg(short = 'n', long = "non-interactive", env = "REGISTER_NON_INTERACTIVE", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub non_interactive: Option<bool>,
    /// Keep the runner registered in GitLab when a later step fails
    #[arg(long = "leave-runner", env = "REGISTER_LEAVE_RUNNER", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub leave_runner: Option<bool>,
    /// GitLab instance URL
    #[arg(short = 'u', long = "url", env = "CI_SERVER_URL")]
    pub url: Option<String>,
    /// Runner authentication token (glrt-…)
    #[arg(short = 't', long = "token", env = "CI_SERVER_TOKEN")]
    pub token: Option<String>,
    /// Registration token (deprecated by GitLab)
    #[arg(short = 'r', long = "registration-token", env = "REGISTRATION_TOKEN")]
    pub registration_token: Option<String>,
    /// Runner name (default: the host name)
    #[arg(long = "name", alias = "description", env = "RUNNER_NAME")]
    pub name: Option<String>,
    /// Executor: docker or docker+machine
    #[arg(long = "executor", env = "RUNNER_EXECUTOR")]
    pub executor: Option<String>,
    /// A TOML file with one [[runners]] entry whose settings the new runner starts from
    #[arg(long = "template-config", env = "TEMPLATE_CONFIG_FILE")]
    pub template_config: Option<PathBuf>,

    /// Tags, comma-separated (legacy registration only)
    #[arg(long = "tag-list", env = "RUNNER_TAG_LIST")]
    pub tag_list: Option<String>,
    /// Run jobs without tags (legacy registration only; default: true when no tags)
    #[arg(long = "run-untagged", env = "REGISTER_RUN_UNTAGGED", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub run_untagged: Option<bool>,
    /// Lock the runner to its projects (legacy registration only; default true)
    #[arg(long = "locked", env = "REGISTER_LOCKED", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub locked: Option<bool>,
    /// not_protected or ref_protected (legacy registration only)
    #[arg(long = "access-level", env = "REGISTER_ACCESS_LEVEL")]
    pub access_level: Option<String>,
    /// Maximum job timeout in seconds (legacy registration only)
    #[arg(long = "maximum-timeout", env = "REGISTER_MAXIMUM_TIMEOUT")]
    pub maximum_timeout: Option<i64>,
    /// Register the runner paused (legacy registration only)
    #[arg(long = "paused", env = "REGISTER_PAUSED", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub paused: Option<bool>,
    /// Maintenance note (legacy registration only)
    #[arg(long = "maintenance-note", env = "REGISTER_MAINTENANCE_NOTE")]
    pub maintenance_note: Option<String>,

    /// Jobs this runner handles at once (0: no limit)
    #[arg(long = "limit", env = "RUNNER_LIMIT")]
    pub limit: Option<i64>,
    /// Maximum log size in KiB
    #[arg(long = "output-limit", env = "RUNNER_OUTPUT_LIMIT")]
    pub output_limit: Option<i64>,
    /// Concurrent job requests
    #[arg(long = "request-concurrency", env = "RUNNER_REQUEST_CONCURRENCY")]
    pub request_concurrency: Option<i64>,
    /// Shell
    #[arg(long = "shell", env = "RUNNER_SHELL")]
    pub shell: Option<String>,
    /// Builds directory
    #[arg(long = "builds-dir", env = "RUNNER_BUILDS_DIR")]
    pub builds_dir: Option<String>,
    /// Cache directory
    #[arg(long = "cache-dir", env = "RUNNER_CACHE_DIR")]
    pub cache_dir: Option<String>,
    /// Clone URL overriding the project's
    #[arg(long = "clone-url", env = "CLONE_URL")]
    pub clone_url: Option<String>,
    /// KEY=value added to every job (repeatable)
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// CA certificates of GitLab (PEM)
    #[arg(long = "tls-ca-file", env = "CI_SERVER_TLS_CA_FILE")]
    pub tls_ca_file: Option<String>,
    /// Client certificate for GitLab (PEM)
    #[arg(long = "tls-cert-file", env = "CI_SERVER_TLS_CERT_FILE")]
    pub tls_cert_file: Option<String>,
    /// Client key for GitLab (PEM)
    #[arg(long = "tls-key-file", env = "CI_SERVER_TLS_KEY_FILE")]
    pub tls_key_file: Option<String>,

    /// [runners.docker] image (required for docker executors)
    #[arg(long = "docker-image", env = "DOCKER_IMAGE")]
    pub docker_image: Option<String>,
    /// [runners.docker] host
    #[arg(long = "docker-host", env = "DOCKER_HOST")]
    pub docker_host: Option<String>,
    /// [runners.docker] privileged
    #[arg(long = "docker-privileged", env = "DOCKER_PRIVILEGED", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub docker_privileged: Option<bool>,
    /// [runners.docker] volumes (repeatable)
    #[arg(long = "docker-volumes")]
    pub docker_volumes: Vec<String>,
    /// [runners.docker] pull_policy (repeatable; each value may list several, comma-separated)
    #[arg(long = "docker-pull-policy", env = "DOCKER_PULL_POLICY")]
    pub docker_pull_policy: Vec<String>,
    /// [runners.docker] gpus
    #[arg(long = "docker-gpus", env = "DOCKER_GPUS")]
    pub docker_gpus: Option<String>,
    /// [runners.docker] disable_cache (also keeps /cache out of the volumes)
    #[arg(long = "docker-disable-cache", env = "DOCKER_DISABLE_CACHE", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub docker_disable_cache: Option<bool>,
    /// [runners.docker] network_mode
    #[arg(long = "docker-network-mode", env = "DOCKER_NETWORK_MODE")]
    pub docker_network_mode: Option<String>,
    /// [runners.docker] helper_image
    #[arg(long = "docker-helper-image", env = "DOCKER_HELPER_IMAGE")]
    pub docker_helper_image: Option<String>,

    /// [runners.machine] MachineDriver
    #[arg(long = "machine-machine-driver", env = "MACHINE_DRIVER")]
    pub machine_driver: Option<String>,
    /// [runners.machine] MachineName (must contain %s)
    #[arg(long = "machine-machine-name", env = "MACHINE_NAME")]
    pub machine_name: Option<String>,
    /// [runners.machine] MachineOptions (repeatable)
    #[arg(long = "machine-machine-options")]
    pub machine_options: Vec<String>,
    /// [runners.machine] IdleCount
    #[arg(long = "machine-idle-nodes", env = "MACHINE_IDLE_COUNT")]
    pub machine_idle_count: Option<i64>,
    /// [runners.machine] IdleTime (seconds)
    #[arg(long = "machine-idle-time", env = "MACHINE_IDLE_TIME")]
    pub machine_idle_time: Option<i64>,
    /// [runners.machine] MaxBuilds
    #[arg(long = "machine-max-builds", env = "MACHINE_MAX_BUILDS")]
    pub machine_max_builds: Option<i64>,
    /// [runners.machine] IdleCountMin
    #[arg(long = "machine-idle-count-min", env = "MACHINE_IDLE_COUNT_MIN")]
    pub machine_idle_count_min: Option<i64>,
    /// [runners.machine] IdleScaleFactor
    #[arg(long = "machine-idle-scale-factor", env = "MACHINE_IDLE_SCALE_FACTOR")]
    pub machine_idle_scale_factor: Option<f64>,
    /// [runners.machine] MaxGrowthRate
    #[arg(long = "machine-max-growth-rate", env = "MACHINE_MAX_GROWTH_RATE")]
    pub machine_max_growth_rate: Option<i64>,

    /// [runners.cache] Type (s3, gcs, azure)
    #[arg(long = "cache-type", env = "CACHE_TYPE")]
    pub cache_type: Option<String>,
    /// [runners.cache] Path
    #[arg(long = "cache-path", env = "CACHE_PATH")]
    pub cache_path: Option<String>,
    /// [runners.cache] Shared
    #[arg(long = "cache-shared", env = "CACHE_SHARED", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub cache_shared: Option<bool>,
    /// [runners.cache.s3] ServerAddress
    #[arg(long = "cache-s3-server-address", env = "CACHE_S3_SERVER_ADDRESS")]
    pub cache_s3_server_address: Option<String>,
    /// [runners.cache.s3] AccessKey
    #[arg(long = "cache-s3-access-key", env = "CACHE_S3_ACCESS_KEY")]
    pub cache_s3_access_key: Option<String>,
    /// [runners.cache.s3] SecretKey
    #[arg(long = "cache-s3-secret-key", env = "CACHE_S3_SECRET_KEY")]
    pub cache_s3_secret_key: Option<String>,
    /// [runners.cache.s3] BucketName
    #[arg(long = "cache-s3-bucket-name", env = "CACHE_S3_BUCKET_NAME")]
    pub cache_s3_bucket_name: Option<String>,
    /// [runners.cache.s3] BucketLocation
    #[arg(long = "cache-s3-bucket-location", env = "CACHE_S3_BUCKET_LOCATION")]
    pub cache_s3_bucket_location: Option<String>,
    /// [runners.cache.s3] Insecure
    #[arg(long = "cache-s3-insecure", env = "CACHE_S3_INSECURE", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub cache_s3_insecure: Option<bool>,
}

/// How the runner got its credentials, for the rollback.
enum Registered {
    /// Through `POST /runners`: undo with `DELETE /runners`.
    Legacy,
    /// A verified token: undo with `DELETE /runners/managers` (glrt) or nothing (legacy).
    Verified,
}

impl RegisterArgs {
    /// Server-side attributes given on the command line (an error with a glrt token).
    fn legacy_attributes(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        if self.locked == Some(false) {
            given.push("--locked=false");
        }
        for (set, name) in [
            (self.access_level.is_some(), "--access-level"),
            (self.run_untagged.is_some(), "--run-untagged"),
            (self.maximum_timeout.is_some(), "--maximum-timeout"),
            (self.paused.is_some(), "--paused"),
            (self.tag_list.is_some(), "--tag-list"),
            (self.maintenance_note.is_some(), "--maintenance-note"),
        ] {
            if set {
                given.push(name);
            }
        }
        given
    }

    fn tags(&self) -> Vec<String> {
        self.tag_list
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "drover".into())
}

fn set_str(t: &mut Table, key: &str, v: &Option<String>) {
    if let Some(v) = v {
        t[key] = value(v.as_str());
    }
}

fn set_int(t: &mut Table, key: &str, v: Option<i64>) {
    if let Some(v) = v {
        t[key] = value(v);
    }
}

fn set_bool(t: &mut Table, key: &str, v: Option<bool>) {
    if let Some(v) = v {
        t[key] = value(v);
    }
}

fn set_list(t: &mut Table, key: &str, v: &[String]) {
    if !v.is_empty() {
        t[key] = value(v.iter().map(String::as_str).collect::<Array>());
    }
}

/// A list flag as upstream reads one: each value split on `,`, every item trimmed; an empty
/// value adds nothing (`"  if-not-present , always "` is `if-not-present`, `always`).
pub fn comma_list(values: &[String]) -> Vec<String> {
    values
        .iter()
        .filter(|v| !v.is_empty())
        .flat_map(|v| v.split(',').map(|item| item.trim().to_owned()))
        .collect()
}

fn sub_table<'t>(t: &'t mut Table, key: &str) -> &'t mut Table {
    if !t.get(key).is_some_and(Item::is_table) {
        let mut new = Table::new();
        new.set_implicit(false);
        t[key] = Item::Table(new);
    }
    t[key].as_table_mut().expect("just made a table")
}

fn datetime(at: chrono::DateTime<chrono::Utc>) -> toml_edit::Value {
    let text = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    match toml_edit::Datetime::from_str(&text) {
        Ok(d) => toml_edit::Value::from(d),
        Err(_) => toml_edit::Value::from(text),
    }
}

/// Writes the credentials into a runner table (register and reset-token).
pub fn write_credentials(
    t: &mut Table,
    creds: &RunnerCredentials,
    obtained_at: chrono::DateTime<chrono::Utc>,
) {
    if creds.id != 0 {
        t["id"] = value(creds.id);
    }
    t["token"] = value(creds.token.as_str());
    t["token_obtained_at"] = Item::Value(datetime(obtained_at));
    let never = chrono::DateTime::<chrono::Utc>::from_timestamp(-62135596800, 0)
        .unwrap_or(chrono::DateTime::UNIX_EPOCH);
    t["token_expires_at"] = Item::Value(datetime(creds.token_expires_at.unwrap_or(never)));
}

/// The new `[[runners]]` entry.
fn runner_table(
    args: &RegisterArgs,
    template: Option<Table>,
    url: &str,
    executor: &str,
    creds: &RunnerCredentials,
) -> Table {
    let mut t = template.unwrap_or_default();
    t.set_implicit(false);
    t["name"] = value(args.name.clone().unwrap_or_else(hostname));
    t["url"] = value(url);
    write_credentials(&mut t, creds, chrono::Utc::now());
    if let Some(ca) = &args.tls_ca_file {
        t["tls-ca-file"] = value(ca.as_str());
    }
    set_str(&mut t, "tls-cert-file", &args.tls_cert_file);
    set_str(&mut t, "tls-key-file", &args.tls_key_file);
    t["executor"] = value(executor);
    set_int(&mut t, "limit", args.limit);
    set_int(&mut t, "output_limit", args.output_limit);
    set_int(&mut t, "request_concurrency", args.request_concurrency);
    set_str(&mut t, "shell", &args.shell);
    set_str(&mut t, "builds_dir", &args.builds_dir);
    set_str(&mut t, "cache_dir", &args.cache_dir);
    set_str(&mut t, "clone_url", &args.clone_url);
    set_list(&mut t, "environment", &args.env);
    if args.cache_type.is_some()
        || args.cache_path.is_some()
        || args.cache_shared.is_some()
        || args.cache_s3_server_address.is_some()
        || args.cache_s3_bucket_name.is_some()
    {
        let cache = sub_table(&mut t, "cache");
        set_str(cache, "Type", &args.cache_type);
        set_str(cache, "Path", &args.cache_path);
        set_bool(cache, "Shared", args.cache_shared);
        if args.cache_s3_server_address.is_some() || args.cache_s3_bucket_name.is_some() {
            let s3 = sub_table(cache, "s3");
            set_str(s3, "ServerAddress", &args.cache_s3_server_address);
            set_str(s3, "AccessKey", &args.cache_s3_access_key);
            set_str(s3, "SecretKey", &args.cache_s3_secret_key);
            set_str(s3, "BucketName", &args.cache_s3_bucket_name);
            set_str(s3, "BucketLocation", &args.cache_s3_bucket_location);
            set_bool(s3, "Insecure", args.cache_s3_insecure);
        }
    }
    if executor.starts_with("docker") {
        let docker = sub_table(&mut t, "docker");
        set_str(docker, "host", &args.docker_host);
        set_str(docker, "image", &args.docker_image);
        set_bool(docker, "privileged", args.docker_privileged);
        set_bool(docker, "disable_cache", args.docker_disable_cache);
        let mut volumes = args.docker_volumes.clone();
        if args.docker_disable_cache != Some(true) && !volumes.iter().any(|v| v == "/cache") {
            volumes.push("/cache".into());
        }
        if !docker.contains_key("volumes") || !args.docker_volumes.is_empty() {
            set_list(docker, "volumes", &volumes);
        }
        set_list(docker, "pull_policy", &comma_list(&args.docker_pull_policy));
        set_str(docker, "gpus", &args.docker_gpus);
        set_str(docker, "network_mode", &args.docker_network_mode);
        set_str(docker, "helper_image", &args.docker_helper_image);
    }
    if executor == "docker+machine" {
        let machine = sub_table(&mut t, "machine");
        set_str(machine, "MachineDriver", &args.machine_driver);
        set_str(machine, "MachineName", &args.machine_name);
        set_list(machine, "MachineOptions", &args.machine_options);
        set_int(machine, "IdleCount", args.machine_idle_count);
        set_int(machine, "IdleTime", args.machine_idle_time);
        set_int(machine, "MaxBuilds", args.machine_max_builds);
        set_int(machine, "IdleCountMin", args.machine_idle_count_min);
        if let Some(f) = args.machine_idle_scale_factor {
            machine["IdleScaleFactor"] = value(f);
        }
        set_int(machine, "MaxGrowthRate", args.machine_max_growth_rate);
    }
    t
}

fn template_runner(path: &std::path::Path) -> Result<Table, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--template-config {}: {e}", path.display()))?;
    let doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("--template-config {}: {e}", path.display()))?;
    let runners = doc
        .get("runners")
        .and_then(Item::as_array_of_tables)
        .ok_or_else(|| format!("--template-config {}: no [[runners]] entry", path.display()))?;
    match runners.len() {
        1 => Ok(runners.get(0).cloned().unwrap_or_default()),
        n => Err(format!(
            "--template-config {}: expected one [[runners]] entry, found {n}",
            path.display()
        )),
    }
}

/// Runs `drover register`.
pub fn run(args: &RegisterArgs) -> ExitCode {
    super::logging::user_mode_warning(true);
    match register(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(&message),
    }
}

fn register(args: &RegisterArgs) -> Result<(), String> {
    let config_path = args
        .config
        .clone()
        .unwrap_or_else(crate::config::default_config_path);
    let url = args
        .url
        .clone()
        .filter(|u| !u.trim().is_empty())
        .ok_or("--url (or CI_SERVER_URL) is required: the GitLab instance to register with")?;
    let executor = args
        .executor
        .clone()
        .filter(|e| !e.trim().is_empty())
        .ok_or("--executor (or RUNNER_EXECUTOR) is required: docker or docker+machine")?;
    if !matches!(executor.as_str(), "docker" | "docker+machine") {
        tracing::warn!(executor = %executor, "drover runs only the docker and docker+machine executors; the runner is registered, but `drover run` will not serve it");
    }
    let template = args
        .template_config
        .as_deref()
        .map(template_runner)
        .transpose()?;
    let template_image = template
        .as_ref()
        .and_then(|t| t.get("docker"))
        .and_then(|d| d.get("image"))
        .and_then(Item::as_str)
        .is_some_and(|s| !s.is_empty());
    if executor.starts_with("docker") && args.docker_image.is_none() && !template_image {
        return Err("--docker-image (or DOCKER_IMAGE) is required for the docker executors".into());
    }
    // Open (or start) the config first, so a broken file fails before GitLab is touched.
    let mut file = ConfigFile::open(&config_path, true).map_err(|e| e.to_string())?;
    let system_id = gitlab::system_id::load_or_create(&config_path);
    let tls = crate::config::RunnerConfig {
        url: url.clone(),
        tls_ca_file: args.tls_ca_file.clone().unwrap_or_default(),
        tls_cert_file: args.tls_cert_file.clone().unwrap_or_default(),
        tls_key_file: args.tls_key_file.clone().unwrap_or_default(),
        ..Default::default()
    };
    let settings = gitlab::ClientSettings::for_runner(
        &tls,
        Some(&crate::config::default_certificate_directory()),
    );
    let client = client_for(&settings)?;

    let (creds, how) = block_on(obtain(args, &client, &executor, &system_id))??;
    let mut entry = runner_table(args, template, &url, &executor, &creds);
    let short = crate::engine::naming::short_token(&creds.token);
    let saved = file
        .runners_mut()
        .map(|runners| runners.push(std::mem::take(&mut entry)))
        .and_then(|()| file.save());
    if let Err(e) = saved {
        let leave = args.leave_runner == Some(true);
        if !leave {
            let undo = block_on(async {
                match how {
                    Registered::Legacy => client.unregister_runner(&creds.token).await,
                    Registered::Verified if token::is_authentication_token(&creds.token) => {
                        client.unregister_manager(&creds.token, &system_id).await
                    }
                    Registered::Verified => Ok(()),
                }
            });
            if let Ok(Err(undo)) = undo {
                tracing::error!(runner = %short, error = %undo, "could not unregister the runner again");
            }
        }
        return Err(format!(
            "the runner was {} but {} could not be written: {e}",
            if leave {
                "left registered"
            } else {
                "unregistered again"
            },
            config_path.display()
        ));
    }
    errln!("Runner registered successfully. Feel free to start it, but if it's running already the config should be automatically reloaded!");
    errln!(
        "Configuration (with the authentication token) was saved in {:?}",
        config_path.display().to_string()
    );
    tracing::info!(runner = %short, "registered");
    Ok(())
}

async fn obtain(
    args: &RegisterArgs,
    client: &Client,
    executor: &str,
    system_id: &str,
) -> Result<(RunnerCredentials, Registered), String> {
    let info = {
        let runner = crate::config::RunnerConfig {
            executor: executor.to_owned(),
            shell: args.shell.clone().unwrap_or_default(),
            ..Default::default()
        };
        Info::for_runner(&runner, &Default::default())
    };
    let verify = |token: String| async move {
        let creds = client
            .verify_runner(&token, &info, system_id)
            .await
            .map_err(|e| format!("verifying the runner token: {e}"))?;
        if token::is_authentication_token(&token) && creds.id == 0 {
            return Err("GitLab verified the token but sent no runner ID; it may be too old for glrt- tokens".to_owned());
        }
        Ok::<_, String>(RunnerCredentials {
            token: if creds.token.is_empty() {
                token
            } else {
                creds.token
            },
            ..creds
        })
    };
    if let Some(t) = args.token.clone().filter(|t| !t.is_empty()) {
        let given = args.legacy_attributes();
        if token::is_authentication_token(&t) && !given.is_empty() {
            return Err(format!(
                "{} cannot be used with an authentication token (glrt-): these are set when the runner is created in GitLab",
                given.join(", ")
            ));
        }
        return Ok((verify(t).await?, Registered::Verified));
    }
    let reg = args
        .registration_token
        .clone()
        .filter(|t| !t.is_empty())
        .ok_or("--token (a glrt- authentication token) or --registration-token is required")?;
    if token::is_authentication_token(&reg) {
        let given = args.legacy_attributes();
        if !given.is_empty() {
            tracing::warn!(flags = %given.join(", "), "ignored with an authentication token: these are set when the runner is created in GitLab");
        }
        return Ok((verify(reg).await?, Registered::Verified));
    }
    let tags = args.tags();
    let params = RegisterParams {
        registration_token: reg,
        description: args.name.clone().unwrap_or_else(hostname),
        maintenance_note: args.maintenance_note.clone().unwrap_or_default(),
        run_untagged: args.run_untagged.unwrap_or(tags.is_empty()),
        tag_list: tags,
        locked: args.locked.unwrap_or(true),
        paused: args.paused.unwrap_or(false),
        access_level: args.access_level.clone().unwrap_or_default(),
        maximum_timeout: args.maximum_timeout.unwrap_or(0),
    };
    let creds = client
        .register_runner(&params)
        .await
        .map_err(|e| format!("registering the runner: {e}"))?;
    Ok((creds, Registered::Legacy))
}
