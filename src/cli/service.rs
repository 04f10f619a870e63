//! `drover install`, `uninstall`, `start`, `stop`, `restart` and `status`: the systemd service
//! commands gitlab-runner's deb/rpm scripts call. `install` writes a unit that runs
//! `drover run --config … --working-directory … --service … [--syslog] [--user …]`, creating an
//! empty config when there is none; the others are thin wrappers over `systemctl`.
//!
//! `--unit-dir` (env `DROVER_SYSTEMD_UNIT_DIR`) writes the unit into another directory and then
//! leaves systemctl alone: for building images and packages, where no systemd runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::config_file::NEW_FILE;
use super::gitlab_util::fail;

fn flag_bool(s: &str) -> Result<bool, String> {
    match s {
        "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
        "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
        other => Err(format!("{other:?} is not true or false")),
    }
}

/// The options every service command takes.
#[derive(Debug, Args, Clone)]
pub struct ServiceArgs {
    /// Service name
    #[arg(short = 'n', long = "service", default_value = "gitlab-runner")]
    pub service: String,
    /// A systemd user unit instead of a system one
    #[arg(long = "user-service", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub user_service: Option<bool>,
    /// Write and remove the unit here and do not call systemctl (images, packages)
    #[arg(long = "unit-dir", env = "DROVER_SYSTEMD_UNIT_DIR", hide = true)]
    pub unit_dir: Option<PathBuf>,
}

/// Arguments of `drover install`.
#[derive(Debug, Args)]
#[command(about = "Install drover as a systemd service (gitlab-runner's `install`)")]
pub struct InstallArgs {
    /// Service name and kind.
    #[command(flatten)]
    pub service: ServiceArgs,
    /// Working directory of the service (default: the current one)
    #[arg(short = 'd', long = "working-directory")]
    pub working_directory: Option<PathBuf>,
    /// Config file
    #[arg(short = 'c', long = "config", env = "CONFIG_FILE", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Log to the system log
    #[arg(long = "syslog", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub syslog: Option<bool>,
    /// User to run jobs as (passed to `drover run --user`)
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// User the service itself runs as
    #[arg(short = 'i', long = "init-user")]
    pub init_user: Option<String>,
}

impl ServiceArgs {
    fn user_service(&self) -> bool {
        self.user_service == Some(true)
    }

    fn unit_dir(&self) -> PathBuf {
        if let Some(d) = &self.unit_dir {
            return d.clone();
        }
        if self.user_service() {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            return home.join(".config/systemd/user");
        }
        PathBuf::from("/etc/systemd/system")
    }

    fn unit_path(&self) -> PathBuf {
        self.unit_dir().join(format!("{}.service", self.service))
    }

    /// `systemctl [--user] ARGS`; skipped with `--unit-dir`. Returns its stdout, or an error
    /// text as upstream prints it (`executable file not found` when systemctl is missing).
    fn systemctl(&self, args: &[&str]) -> Result<std::process::Output, String> {
        let mut cmd = std::process::Command::new("systemctl");
        if self.user_service() {
            cmd.arg("--user");
        }
        cmd.args(args).output().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                "exec: \"systemctl\": executable file not found in $PATH".to_owned()
            } else {
                format!("systemctl: {e}")
            }
        })
    }

    fn control(&self, action: &str) -> Result<(), String> {
        if self.unit_dir.is_some() {
            return Ok(());
        }
        let out = self.systemctl(&[action, &format!("{}.service", self.service)])?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "systemctl {action} {}: {}",
                self.service,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

fn quote(arg: &str) -> String {
    format!("\"{}\"", arg.replace('\\', "\\\\").replace('"', "\\\""))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// What goes into the unit file.
#[derive(Debug, Clone)]
pub struct Unit<'a> {
    /// The drover binary.
    pub exe: &'a Path,
    /// `--config`.
    pub config: &'a Path,
    /// `--working-directory`.
    pub working_directory: &'a Path,
    /// `--service`.
    pub service: &'a str,
    /// `--syslog`.
    pub syslog: bool,
    /// `--user` (jobs' user).
    pub user: Option<&'a str>,
    /// `User=` (the service's user).
    pub init_user: Option<&'a str>,
    /// A user unit (wanted by `default.target`).
    pub user_service: bool,
}

impl Unit<'_> {
    /// The unit file text.
    pub fn render(&self) -> String {
        let mut args = vec![
            quote(&self.exe.display().to_string()),
            quote("run"),
            quote("--config"),
            quote(&self.config.display().to_string()),
            quote("--working-directory"),
            quote(&self.working_directory.display().to_string()),
            quote("--service"),
            quote(self.service),
        ];
        if self.syslog {
            args.push(quote("--syslog"));
        }
        if let Some(u) = self.user {
            args.push(quote("--user"));
            args.push(quote(u));
        }
        let mut unit = format!(
            "[Unit]\nDescription=GitLab Runner (drover)\nConditionFileIsExecutable={}\nAfter=network.target\n\n[Service]\nStartLimitInterval=5\nStartLimitBurst=10\nExecStart={}\nRestart=always\nRestartSec=120\nEnvironmentFile=-/etc/sysconfig/{}\n",
            self.exe.display(),
            args.join(" "),
            self.service
        );
        if let Some(u) = self.init_user {
            unit.push_str(&format!("User={u}\n"));
        }
        unit.push_str(&format!(
            "\n[Install]\nWantedBy={}\n",
            if self.user_service {
                "default.target"
            } else {
                "multi-user.target"
            }
        ));
        unit
    }
}

/// Runs `drover install`.
pub fn install(args: &InstallArgs) -> ExitCode {
    match install_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn install_inner(args: &InstallArgs) -> Result<(), String> {
    let svc = &args.service;
    if is_root() && !svc.user_service() && args.user.is_none() && args.init_user.is_none() {
        return Err("as root, install needs --user (the user jobs run as) or --init-user (the user the service runs as)".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find drover's own path: {e}"))?;
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let wd = args.working_directory.clone().unwrap_or(cwd.clone());
    let wd = if wd.is_absolute() { wd } else { cwd.join(wd) };
    let config = args
        .config
        .clone()
        .unwrap_or_else(crate::config::default_config_path);
    let config = if config.is_absolute() {
        config
    } else {
        cwd.join(config)
    };
    if !config.exists() {
        if let Some(dir) = config.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&config)
            .map_err(|e| format!("{}: {e}", config.display()))?;
        std::io::Write::write_all(&mut f, NEW_FILE.as_bytes())
            .map_err(|e| format!("{}: {e}", config.display()))?;
    }
    let unit = Unit {
        exe: &exe,
        config: &config,
        working_directory: &wd,
        service: &svc.service,
        syslog: args.syslog == Some(true),
        user: args.user.as_deref(),
        init_user: args.init_user.as_deref(),
        user_service: svc.user_service(),
    }
    .render();
    let path = svc.unit_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&path, unit).map_err(|e| format!("{}: {e}", path.display()))?;
    if svc.unit_dir.is_none() {
        svc.systemctl(&["daemon-reload"])?;
        svc.control("enable")?;
    }
    Ok(())
}

/// Runs `drover uninstall`: disables the service and removes its unit.
pub fn uninstall(args: &ServiceArgs) -> ExitCode {
    let path = args.unit_path();
    if !path.exists() {
        return fail(&format!(
            "{}: the service is not installed ({} does not exist)",
            args.service,
            path.display()
        ));
    }
    if args.unit_dir.is_none() {
        let _ = args.control("stop");
        if let Err(e) = args.control("disable") {
            return fail(&e);
        }
    }
    if let Err(e) = std::fs::remove_file(&path) {
        return fail(&format!("{}: {e}", path.display()));
    }
    if args.unit_dir.is_none() {
        let _ = args.systemctl(&["daemon-reload"]);
    }
    ExitCode::SUCCESS
}

/// Runs `drover start`, `stop` or `restart`.
pub fn control(args: &ServiceArgs, action: &str) -> ExitCode {
    match args.control(action) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Runs `drover status`: `<service>: Service is running` on stdout and 0, else the reason on
/// stderr and 1.
pub fn status(args: &ServiceArgs) -> ExitCode {
    if args.unit_dir.is_some() {
        eprintln!(
            "{}: status needs systemd; --unit-dir only writes unit files",
            args.service
        );
        return ExitCode::FAILURE;
    }
    match args.systemctl(&["is-active", &format!("{}.service", args.service)]) {
        Ok(out) if out.status.success() => {
            println!("{}: Service is running", args.service);
            ExitCode::SUCCESS
        }
        Ok(_) => {
            eprintln!("{}: Service has stopped", args.service);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{}: {e}", args.service);
            ExitCode::FAILURE
        }
    }
}
