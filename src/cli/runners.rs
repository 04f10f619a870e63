//! `drover list`, `verify`, `unregister` and `reset-token`: the commands that act on the
//! `[[runners]]` already in `config.toml`, as gitlab-runner's. They edit the file in place
//! (comments kept) and only after GitLab said yes.

use crate::cli::output::errln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::config_file::{ConfigFile, Selection};
use super::gitlab_util::{block_on, client_for, fail, flag_bool};
use super::register::write_credentials;
use crate::config::RunnerConfig;
use crate::engine::naming::short_token;
use crate::gitlab::{self, ClientSettings, Info};

fn config_path(config: &Option<PathBuf>) -> PathBuf {
    config
        .clone()
        .unwrap_or_else(crate::config::default_config_path)
}

fn settings(runner: &RunnerConfig) -> ClientSettings {
    ClientSettings::for_runner(
        runner,
        Some(&crate::config::default_certificate_directory()),
    )
}

/// Arguments of `drover list`.
#[derive(Debug, Args)]
#[command(about = "List the runners in config.toml")]
pub struct ListArgs {
    /// Config file
    #[arg(short = 'c', long = "config", env = "CONFIG_FILE", value_name = "PATH")]
    pub config: Option<PathBuf>,
}

/// Runs `drover list`: one line per runner on stderr, as upstream's log lines (with the short
/// token, never the token).
pub fn list(args: &ListArgs) -> ExitCode {
    let path = config_path(&args.config);
    let file = match ConfigFile::open(&path, false) {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string()),
    };
    errln!(
        "Listing configured runners                          ConfigFile={}",
        path.display()
    );
    for r in &file.config.runners {
        errln!(
            "{:<40} Executor={} Token={} URL={}",
            r.name,
            r.executor,
            short_token(&r.token),
            r.url
        );
    }
    ExitCode::SUCCESS
}

/// Arguments of `drover verify`.
#[derive(Debug, Args)]
#[command(about = "Check the runners in config.toml against GitLab")]
pub struct VerifyArgs {
    /// Config file
    #[arg(short = 'c', long = "config", env = "CONFIG_FILE", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Only the runner with this name
    #[arg(short = 'n', long = "name")]
    pub name: Option<String>,
    /// Only runners with this URL
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    /// Only the runner with this token
    #[arg(short = 't', long = "token")]
    pub token: Option<String>,
    /// Remove runners GitLab no longer knows (403) from config.toml
    #[arg(long = "delete", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub delete: Option<bool>,
}

/// Runs `drover verify`.
pub fn verify(args: &VerifyArgs) -> ExitCode {
    super::logging::user_mode_warning(true);
    let path = config_path(&args.config);
    let mut file = match ConfigFile::open(&path, false) {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string()),
    };
    let picked = verify_selection(
        &file.config,
        args.name.as_deref(),
        args.url.as_deref(),
        args.token.as_deref(),
    );
    if picked.is_empty() {
        return fail("no runner matches the filtering parameters (--name, --url, --token)");
    }
    let system_id = gitlab::system_id::load_or_create(&path);
    let mut gone = Vec::new();
    for i in picked {
        let runner = file.config.runners[i].clone();
        let short = short_token(&runner.token);
        let info = Info::for_runner(&runner, &file.config.labels);
        let result = client_for(&settings(&runner)).and_then(|client| {
            block_on(async { client.verify_runner(&runner.token, &info, &system_id).await })
        });
        let failed = |e: &str| {
            errln!("Verifying runner... failed                         runner={short} runner_name={} error={e}", runner.name);
        };
        match result {
            Ok(Ok(_)) => {
                let state = if gitlab::token::is_authentication_token(&runner.token) {
                    "is valid"
                } else {
                    "is alive"
                };
                errln!("Verifying runner... {state}                        runner={short} runner_name={}", runner.name);
            }
            Ok(Err(e)) if e.status() == 403 => {
                errln!("Verifying runner... is removed                     runner={short} runner_name={}", runner.name);
                gone.push(i);
            }
            Ok(Err(e)) => failed(&e.to_string()),
            Err(e) => failed(&e),
        }
    }
    if args.delete == Some(true) {
        if !gone.is_empty() {
            let removed = gone.len();
            if let Err(e) = file.remove_runners(gone).and_then(|()| file.save()) {
                return fail(&e.to_string());
            }
            errln!("Updated {} (removed {removed} runner(s))", path.display());
        }
        return ExitCode::SUCCESS;
    }
    // As upstream, only runners GitLab no longer knows fail the command: a runner that could
    // not be checked (GitLab unreachable, 5xx, 400) is kept and logged, and the exit is 0.
    if !gone.is_empty() {
        return fail("Failed to verify runners: GitLab no longer knows some of them; `drover verify --delete` removes them from the config");
    }
    ExitCode::SUCCESS
}

/// The runners `verify` checks, as upstream selects them: all of them without `--name`,
/// `--url` or `--token`; else those whose name is `--name` (an unset `--name` matches an
/// unnamed runner, as upstream) or whose credentials are the same as `--url`/`--token`
/// ([`same_credentials`]).
pub fn verify_selection(
    config: &crate::config::Config,
    name: Option<&str>,
    url: Option<&str>,
    token: Option<&str>,
) -> Vec<usize> {
    let any = name.is_some() || url.is_some() || token.is_some();
    let (name, url, token) = (name.unwrap_or(""), url.unwrap_or(""), token.unwrap_or(""));
    config
        .runners
        .iter()
        .enumerate()
        .filter(|(_, r)| !any || r.name == name || same_credentials(&r.url, &r.token, url, token))
        .map(|(i, _)| i)
        .collect()
}

/// Upstream's credential match: the same token, and the same URL unless either URL is a
/// wildcard (`""` or `"*"`); URLs compare as written (a trailing `/` differs).
pub fn same_credentials(url: &str, token: &str, other_url: &str, other_token: &str) -> bool {
    let wildcard = |u: &str| u.is_empty() || u == "*";
    token == other_token && (wildcard(url) || wildcard(other_url) || url == other_url)
}

/// Arguments of `drover unregister`.
#[derive(Debug, Args)]
#[command(about = "Unregister runners from GitLab and remove them from config.toml")]
pub struct UnregisterArgs {
    /// Config file
    #[arg(short = 'c', long = "config", env = "CONFIG_FILE", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The runner with this name
    #[arg(short = 'n', long = "name")]
    pub name: Option<String>,
    /// The runner with this URL (with --token)
    #[arg(short = 'u', long = "url", env = "CI_SERVER_URL")]
    pub url: Option<String>,
    /// The runner with this token
    #[arg(short = 't', long = "token", env = "CI_SERVER_TOKEN")]
    pub token: Option<String>,
    /// Every runner in the file
    #[arg(long = "all-runners", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub all_runners: Option<bool>,
}

/// Runs `drover unregister`: `DELETE /runners/managers` for glrt- tokens (this manager only),
/// `DELETE /runners` for legacy tokens; each runner leaves the file only when GitLab agreed.
pub fn unregister(args: &UnregisterArgs) -> ExitCode {
    super::logging::user_mode_warning(false);
    let path = config_path(&args.config);
    let mut file = match ConfigFile::open(&path, false) {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string()),
    };
    let all = args.all_runners == Some(true);
    if !all && args.name.is_none() && args.token.is_none() {
        return fail(
            "say which runner to unregister: --name, --url with --token, --token, or --all-runners",
        );
    }
    let selection = Selection {
        name: args.name.clone(),
        url: args.url.clone().filter(|_| args.token.is_some()),
        token: args.token.clone(),
        id: None,
        all,
    };
    let picked = selection.pick(&file.config, false);
    if picked.is_empty() {
        return fail("no runner in the config matches the selection");
    }
    let system_id = gitlab::system_id::load_or_create(&path);
    let mut done = Vec::new();
    let mut errors = Vec::new();
    for i in picked {
        let runner = file.config.runners[i].clone();
        let short = short_token(&runner.token);
        let result = client_for(&settings(&runner)).and_then(|client| {
            block_on(async {
                if gitlab::token::is_authentication_token(&runner.token) {
                    client.unregister_manager(&runner.token, &system_id).await
                } else {
                    client.unregister_runner(&runner.token).await
                }
            })
        });
        match result {
            Ok(Ok(())) => {
                errln!("Unregistering runner from GitLab succeeded        runner={short} runner_name={}", runner.name);
                done.push(i);
            }
            Ok(Err(e)) => errors.push(format!("{} ({short}): {e}", runner.name)),
            Err(e) => errors.push(format!("{} ({short}): {e}", runner.name)),
        }
    }
    if !done.is_empty() {
        if let Err(e) = file.remove_runners(done).and_then(|()| file.save()) {
            return fail(&e.to_string());
        }
        errln!("Updated {}", path.display());
    }
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        fail(&format!("unregistering failed for {}", errors.join("; ")))
    }
}

/// Arguments of `drover reset-token`.
#[derive(Debug, Args)]
#[command(about = "Reset runner authentication tokens and save the new ones in config.toml")]
pub struct ResetTokenArgs {
    /// Config file
    #[arg(short = 'c', long = "config", env = "CONFIG_FILE", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The runner with this name
    #[arg(short = 'n', long = "name")]
    pub name: Option<String>,
    /// The runner with this URL (with --id)
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    /// The runner with this ID (with --url)
    #[arg(short = 'i', long = "id")]
    pub id: Option<i64>,
    /// Reset with this personal access token instead of the current runner token
    #[arg(long = "pat")]
    pub pat: Option<String>,
    /// Every runner in the file
    #[arg(long = "all-runners", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flag_bool)]
    pub all_runners: Option<bool>,
}

/// Runs `drover reset-token`.
pub fn reset_token(args: &ResetTokenArgs) -> ExitCode {
    super::logging::user_mode_warning(true);
    let path = config_path(&args.config);
    let mut file = match ConfigFile::open(&path, false) {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string()),
    };
    let all = args.all_runners == Some(true);
    if !all && args.name.is_none() && (args.url.is_none() || args.id.is_none()) {
        return fail("say which runner: --name, --url with --id, or --all-runners");
    }
    let selection = Selection {
        name: args.name.clone(),
        url: args.url.clone(),
        token: None,
        id: args.id,
        all,
    };
    let picked = selection.pick(&file.config, false);
    if picked.is_empty() {
        return fail("no runner in the config matches the selection");
    }
    let mut errors = Vec::new();
    let mut changed = false;
    for i in picked {
        let runner = file.config.runners[i].clone();
        let short = short_token(&runner.token);
        let result = client_for(&settings(&runner)).and_then(|client| {
            block_on(async {
                match &args.pat {
                    Some(pat) => client.reset_token_with_pat(runner.id, pat).await,
                    None => client.reset_token(&runner.token).await,
                }
            })
        });
        match result {
            Ok(Ok(creds)) if !creds.token.is_empty() => {
                let creds = gitlab::RunnerCredentials {
                    id: runner.id,
                    ..creds
                };
                match file.runner_mut(i) {
                    Ok(t) => {
                        write_credentials(t, &creds, chrono::Utc::now());
                        changed = true;
                        errln!("Resetting runner token... succeeded               runner={short} runner_name={}", runner.name);
                    }
                    Err(e) => errors.push(e.to_string()),
                }
            }
            Ok(Ok(_)) => errors.push(format!(
                "{} ({short}): GitLab sent no new token",
                runner.name
            )),
            Ok(Err(e)) => errors.push(format!("{} ({short}): {e}", runner.name)),
            Err(e) => errors.push(format!("{} ({short}): {e}", runner.name)),
        }
    }
    if changed {
        if let Err(e) = file.save() {
            return fail(&format!(
                "the new token(s) could not be saved, the old ones no longer work: {e}"
            ));
        }
    }
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        fail(&format!(
            "resetting the token failed for {}",
            errors.join("; ")
        ))
    }
}
