//! `drover helper …` (hidden): drover acting as `gitlab-runner-helper` for the helper commands
//! the executor emits, so a locally built helper image (drover plus bash and git) works
//! without GitLab's registry. The image's `/usr/bin/gitlab-runner-helper` runs
//! `drover helper "$@"`. The commands live in `crate::helper`; this is their
//! command line, with upstream's names and flags. Failures print `FATAL: <message>` on stderr
//! and exit 1, as upstream's helper does.

use crate::cli::output::{errln, outln};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::executor::script::variables::parse_go_duration;
use crate::helper::{artifacts, cache, health_check};

/// Arguments of `drover helper`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, disable_version_flag = true)]
pub struct HelperArgs {
    /// Print the version (the scripts check that the helper works with `--version`)
    #[arg(long = "version", short = 'v')]
    pub show_version: bool,
    /// The helper command
    #[command(subcommand)]
    pub command: Option<HelperCommand>,
}

/// Flags shared by the cache commands that drover accepts for upstream compatibility.
#[derive(Debug, Args, Default)]
pub struct CacheCommon {
    /// The local archive, relative to the working directory
    #[arg(long)]
    pub file: PathBuf,
    /// Minutes to allow for the transfer (default 10)
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// GoCloud URL (Azure, S3 with RoleARN): not implemented by drover's helper
    #[arg(long = "gocloud-url")]
    pub gocloud_url: Option<String>,
    /// Environment file written by the script (`KEY=VALUE` lines, e.g. CACHE_METADATA)
    #[arg(long = "env-file")]
    pub env_file: Option<PathBuf>,
}

/// The files a cache or artifact archive holds.
#[derive(Debug, Args)]
pub struct FileSelection {
    /// A path or glob to pack (repeatable)
    #[arg(long = "path")]
    pub path: Vec<String>,
    /// A path or glob to leave out (repeatable)
    #[arg(long = "exclude")]
    pub exclude: Vec<String>,
    /// Add git's untracked files
    #[arg(long)]
    pub untracked: bool,
}

/// GitLab's URL and the job the artifact commands act for.
#[derive(Debug, Args)]
pub struct JobApi {
    /// GitLab's URL
    #[arg(long)]
    pub url: String,
    /// The job token
    #[arg(long)]
    pub token: String,
    /// The job ID
    #[arg(long)]
    pub id: i64,
}

/// Helper commands.
#[derive(Debug, Subcommand)]
pub enum HelperCommand {
    /// Make a fresh volume writable for any user (chmod 0777), as upstream's `cache-init`
    #[command(name = "cache-init")]
    CacheInit {
        /// The directory to open up
        dir: PathBuf,
    },
    /// Wait until a service accepts a TCP connection (address and ports from the
    /// environment: `*_TCP_ADDR`, `*_TCP_PORT`), as upstream's `health-check`
    #[command(name = "health-check")]
    HealthCheck {
        /// Service port (replaces the ports from the environment)
        #[arg(short = 'p', long = "port")]
        port: Vec<String>,
    },
    /// Archive paths into the cache file and optionally upload it, as upstream's
    /// `cache-archiver`
    #[command(name = "cache-archiver")]
    CacheArchiver {
        /// The flags both cache commands share
        #[command(flatten)]
        common: CacheCommon,
        /// What to pack
        #[command(flatten)]
        files: FileSelection,
        /// Presigned URL to PUT the archive to
        #[arg(long)]
        url: Option<String>,
        /// A header for the upload, `Key: Value` (repeatable)
        #[arg(long = "header")]
        header: Vec<String>,
        /// Presigned HEAD URL of the object: an unchanged archive is uploaded only when it
        /// does not exist
        #[arg(long = "check-url")]
        check_url: Option<String>,
        /// The archive under the other FF_HASH_CACHE_KEYS name, renamed to --file when only
        /// it exists
        #[arg(long = "alternate-file")]
        alternate_file: Option<PathBuf>,
        /// Refuse to upload an archive bigger than this many bytes (0: no limit)
        #[arg(long = "max-uploaded-archive-size", default_value_t = 0)]
        max_uploaded_archive_size: u64,
    },
    /// Pack paths and upload them as the job's artifacts, as upstream's `artifacts-uploader`
    #[command(name = "artifacts-uploader")]
    ArtifactsUploader {
        /// GitLab and the job
        #[command(flatten)]
        job: JobApi,
        /// What to pack
        #[command(flatten)]
        files: FileSelection,
        /// The archive's name (default `artifacts`)
        #[arg(long, default_value = "")]
        name: String,
        /// How long GitLab keeps the artifacts
        #[arg(long = "expire-in", default_value = "")]
        expire_in: String,
        /// zip (default), gzip or raw
        #[arg(long = "artifact-format", default_value = "")]
        artifact_format: String,
        /// The artifact type (archive, junit, …)
        #[arg(long = "artifact-type", default_value = "")]
        artifact_type: String,
        /// Overall timeout of one upload (Go duration)
        #[arg(long, default_value = "1h0m0s")]
        timeout: String,
        /// Time to wait for GitLab's response headers (Go duration; accepted for compatibility)
        #[arg(long = "response-header-timeout", default_value = "10m0s")]
        response_header_timeout: String,
    },
    /// Download a job's artifacts and extract them, as upstream's `artifacts-downloader`
    #[command(name = "artifacts-downloader")]
    ArtifactsDownloader {
        /// GitLab and the job (the dependency's token and ID)
        #[command(flatten)]
        job: JobApi,
        /// Ask for a direct download from object storage first (default: FF_USE_DIRECT_DOWNLOAD)
        #[arg(long = "direct-download")]
        direct_download: Option<bool>,
    },
    /// Download (optionally) and extract the cache file, as upstream's `cache-extractor`
    #[command(name = "cache-extractor")]
    CacheExtractor {
        /// The flags both cache commands share
        #[command(flatten)]
        common: CacheCommon,
        /// Presigned URL to GET the archive from
        #[arg(long)]
        url: Option<String>,
        /// Presigned HEAD URL to compare the remote archive's age with the local file
        #[arg(long = "head-url")]
        head_url: Option<String>,
        /// Presigned URL of the object under the other FF_HASH_CACHE_KEYS name, used when the
        /// primary is not available or older
        #[arg(long = "alternate-url")]
        alternate_url: Option<String>,
        /// Presigned HEAD URL of that object
        #[arg(long = "alternate-head-url")]
        alternate_head_url: Option<String>,
    },
}

fn fatal(message: impl std::fmt::Display) -> ExitCode {
    errln!("FATAL: {message}");
    ExitCode::from(1)
}

fn runtime() -> Result<tokio::runtime::Runtime, std::io::Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Runs a helper command.
pub fn run(args: HelperArgs) -> ExitCode {
    let Some(command) = args.command else {
        if args.show_version {
            outln!(
                "drover helper {} (gitlab-runner-helper {} compatible)",
                env!("CARGO_PKG_VERSION"),
                crate::executor::image::PINNED_HELPER_VERSION
            );
            return ExitCode::SUCCESS;
        }
        return fatal("no helper command given; see `drover helper --help`");
    };
    match command {
        HelperCommand::CacheInit { dir } => match cache_init(&dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fatal(format!("cache-init {}: {e}", dir.display())),
        },
        HelperCommand::HealthCheck { port } => {
            match health_check::target_from_env(std::env::vars(), &port) {
                Ok(target) => {
                    health_check::wait(&target, &mut std::io::stdout());
                    ExitCode::SUCCESS
                }
                Err(e) => fatal(e),
            }
        }
        HelperCommand::CacheArchiver {
            common,
            files,
            url,
            header,
            check_url,
            alternate_file,
            max_uploaded_archive_size,
        } => {
            let options = cache::ArchiverOptions {
                file: common.file,
                paths: expand_all(files.path),
                excludes: expand_all(files.exclude),
                untracked: files.untracked,
                url,
                headers: header,
                timeout_minutes: common.timeout,
                max_upload: max_uploaded_archive_size,
                gocloud_url: common.gocloud_url,
                alternate_file,
                check_url,
            };
            in_workdir(|rt, dir| rt.block_on(cache::archive(&options, dir, &mut std::io::stdout())))
        }
        HelperCommand::ArtifactsUploader {
            job,
            files,
            name,
            expire_in,
            artifact_format,
            artifact_type,
            timeout,
            ..
        } => {
            let Some(timeout) = parse_go_duration(&timeout) else {
                return fatal(format!(
                    "--timeout {timeout:?}: not a duration such as 1h0m0s"
                ));
            };
            let options = artifacts::UploadOptions {
                url: job.url,
                token: job.token,
                id: job.id,
                paths: expand_all(files.path),
                excludes: expand_all(files.exclude),
                untracked: files.untracked,
                name: expand_env(name),
                expire_in,
                format: artifact_format,
                artifact_type,
                timeout,
            };
            in_workdir(|rt, dir| {
                rt.block_on(artifacts::upload(&options, dir, &mut std::io::stdout()))
            })
        }
        HelperCommand::ArtifactsDownloader {
            job,
            direct_download,
        } => {
            let from_env = std::env::var("FF_USE_DIRECT_DOWNLOAD")
                .ok()
                .and_then(|v| crate::executor::script::variables::parse_bool(&v))
                .unwrap_or(false);
            let options = artifacts::DownloadOptions {
                url: job.url,
                token: job.token,
                id: job.id,
                direct_download: direct_download.unwrap_or(from_env),
                timeout: std::time::Duration::from_secs(3600),
            };
            in_workdir(|rt, dir| {
                rt.block_on(artifacts::download(&options, dir, &mut std::io::stdout()))
            })
        }
        HelperCommand::CacheExtractor {
            common,
            url,
            head_url,
            alternate_url,
            alternate_head_url,
        } => {
            let options = cache::ExtractorOptions {
                file: common.file,
                url,
                head_url,
                timeout_minutes: common.timeout,
                gocloud_url: common.gocloud_url,
                alternate_url,
                alternate_head_url,
            };
            in_workdir(|rt, dir| rt.block_on(cache::extract(&options, dir, &mut std::io::stdout())))
        }
    }
}

/// Runs `f` on a runtime in the current directory; an error is fatal.
fn in_workdir<E: std::fmt::Display>(
    f: impl FnOnce(&tokio::runtime::Runtime, &std::path::Path) -> Result<(), E>,
) -> ExitCode {
    let dir = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return fatal(format!("reading the working directory: {e}")),
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fatal(format!("starting the runtime: {e}")),
    };
    match f(&rt, &dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fatal(e),
    }
}

fn cache_init(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
}

/// An argument with `$VAR`/`${VAR:-x}` expanded from this process's environment (the stage's
/// variables and `GITLAB_ENV` values), as upstream's helpers do; kept as given, with a warning,
/// when it cannot be expanded.
fn expand_env(arg: String) -> String {
    let lookup = |k: &str| std::env::var(k).ok();
    match crate::executor::script::variables::shell_expand(&arg, &lookup) {
        Ok(v) => v,
        Err(e) => {
            errln!("WARNING: invalid path {arg:?}: {e}");
            arg
        }
    }
}

fn expand_all(args: Vec<String>) -> Vec<String> {
    args.into_iter().map(expand_env).collect()
}
