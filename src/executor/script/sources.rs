//! The `get_sources` stage body (helper container): git clone or fetch at the job's sha with
//! the job token kept out of `.git/config` (an `insteadOf` rewrite in an external config under
//! `<BuildDir>.tmp`), checkout, clean, LFS, submodules and the pre/post hooks. Pure.

use super::user::write_exports;
use super::variables::VarList;
use super::{quote, ScriptBody};
use crate::executor::build_settings::{BuildSettings, GitStrategy, SubmoduleStrategy};
use crate::executor::paths::{url_base, url_without_credentials, JobPaths};
use crate::job::JobPayload;

/// What `get_sources` needs besides the payload.
#[derive(Debug, Clone, Copy)]
pub struct SourcesInputs<'a> {
    /// Expanded variables.
    pub vars: &'a VarList,
    /// Paths.
    pub paths: &'a JobPaths,
    /// Job-controlled settings.
    pub settings: &'a BuildSettings,
    /// Runner `pre_get_sources_script`.
    pub pre_get_sources: Option<&'a str>,
    /// Runner `post_get_sources_script`.
    pub post_get_sources: Option<&'a str>,
    /// `http.userAgent` for git.
    pub user_agent: &'a str,
    /// `[[runners]] clean_git_config` (`None`: upstream's default).
    pub clean_git_config: Option<bool>,
    /// Where git's job-token rewrites point (the GitLab host, `clone_url`, ssh forms).
    pub auth: &'a GitAuth<'a>,
}

/// What the job-token `insteadOf` rewrites are made from: git fetches the repository and its
/// submodules by their plain URLs and git adds the token, so a submodule on the same GitLab
/// (`../other.git`, or an ssh URL with `GIT_SUBMODULE_FORCE_HTTPS`) authenticates too, and no
/// token is written into `.git/config`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GitAuth<'a> {
    /// `[[runners]] clone_url` (used instead of the runner `url` when it has a scheme).
    pub clone_url: &'a str,
    /// `[[runners]] url`.
    pub credentials_url: &'a str,
    /// `git_info.repo_url` (with GitLab's credentials).
    pub repo_url: &'a str,
    /// The job token.
    pub token: &'a str,
    /// `GIT_SUBMODULE_FORCE_HTTPS`: ssh URLs of the GitLab host go over HTTPS with the token.
    pub force_https: bool,
    /// `CI_SERVER_SHELL_SSH_HOST`, else `CI_SERVER_HOST`.
    pub ssh_host: &'a str,
    /// `CI_SERVER_SHELL_SSH_PORT`.
    pub ssh_port: &'a str,
    /// `CI_PROJECT_PATH` (for `clone_url`).
    pub project_path: &'a str,
    /// `FF_GIT_URLS_WITHOUT_TOKENS`: no URL carries the token; git gets it from a credential
    /// helper reading `CI_JOB_TOKEN` (only the ssh forms are still rewritten, to plain HTTPS).
    pub tokenless: bool,
}

/// `scheme`, the authority without user info, and the rest (path, query) of a URL.
fn split_url(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.is_empty() {
        return None;
    }
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    Some((scheme, host, path))
}

fn is_http(scheme: &str) -> bool {
    scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
}

/// Percent-encodes a password for a URL's user info (Go's rules for what stays as is).
fn userinfo_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl GitAuth<'_> {
    /// The URL with the job token as its user info (without, when [`Self::tokenless`]).
    fn with_token(&self, scheme: &str, host: &str, path: &str) -> String {
        if self.tokenless {
            return format!("{scheme}://{host}{path}");
        }
        format!(
            "{scheme}://gitlab-ci-token:{}@{host}{path}",
            userinfo_escape(self.token)
        )
    }

    fn clone_base(&self) -> Option<(&str, &str, &str)> {
        split_url(self.clone_url)
    }

    /// The URL git fetches from, with the token: `clone_url` + `/<project path>.git` when
    /// `clone_url` is set, else the payload's repository URL.
    pub fn remote_url(&self) -> String {
        match self.clone_base() {
            Some((scheme, host, path)) => {
                let path = format!(
                    "{}/{}.git",
                    path.trim_end_matches('/'),
                    self.project_path.trim_matches('/')
                );
                self.with_token(scheme, host, &path)
            }
            None if self.tokenless => url_without_credentials(self.repo_url),
            None => self.repo_url.to_string(),
        }
    }

    fn ssh_rewrites(&self, to: &str) -> Vec<(String, String)> {
        if !self.force_https || self.ssh_host.is_empty() {
            return Vec::new();
        }
        let host = self.ssh_host;
        match self.ssh_port {
            "" | "22" => vec![
                (format!("{to}/"), format!("git@{host}:")),
                (to.to_string(), format!("ssh://git@{host}")),
            ],
            port => vec![(to.to_string(), format!("ssh://git@{host}:{port}"))],
        }
    }

    /// The `insteadOf` rewrites as `(with token, plain)`, de-duplicated, in upstream's order:
    /// the remote URL; the GitLab base (`clone_url` or the runner `url`); its ssh forms
    /// (`GIT_SUBMODULE_FORCE_HTTPS`); the repository's host. Token-less: only the ssh forms, to
    /// the plain base.
    pub fn instead_ofs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.tokenless {
            let base = self
                .clone_base()
                .or_else(|| split_url(self.credentials_url));
            if let Some((scheme, host, path)) = base.filter(|(s, _, _)| is_http(s)) {
                out.extend(
                    self.ssh_rewrites(&format!("{scheme}://{host}{}", path.trim_end_matches('/'))),
                );
            }
            return out;
        }
        let remote = self.remote_url();
        let plain = crate::executor::paths::url_without_credentials(&remote);
        if remote != plain {
            out.push((remote, plain));
        }
        let base = self
            .clone_base()
            .or_else(|| split_url(self.credentials_url));
        if let Some((scheme, host, path)) = base.filter(|(s, _, _)| is_http(s)) {
            let path = path.trim_end_matches('/');
            let authed = self.with_token(scheme, host, path);
            out.push((authed.clone(), format!("{scheme}://{host}{path}")));
            out.extend(self.ssh_rewrites(&authed));
        }
        // The repository's host: with an HTTP(S) GitLab base, as upstream, and also without any
        // (`drover exec-job` without a config has no runner url), so a private submodule on the
        // same host still authenticates there.
        if base.is_none_or(|(s, _, _)| is_http(s)) {
            if let Some((scheme, host, _)) = split_url(self.repo_url).filter(|(s, _, _)| is_http(s))
            {
                out.push((
                    self.with_token(scheme, host, ""),
                    format!("{scheme}://{host}"),
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|r| seen.insert(r.clone()));
        out
    }
}

/// The git clean-up that runs before fetching and again in the clean-up stage: stale lock
/// files (a job killed during a git command leaves them), and the configs and hooks a job
/// could have planted for the next job on a reused builds volume — the main `.git`, the
/// template dir and, with submodules, every `.git/modules/**`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GitCleanup {
    /// A submodule strategy is set: `.git/modules` is cleaned too.
    pub submodules: bool,
    /// Configs and hooks are removed (`clean_git_config`, default: unless `GIT_STRATEGY=none`).
    pub configs: bool,
}

impl GitCleanup {
    /// The clean-up for these settings and `[[runners]] clean_git_config`.
    pub fn new(s: &BuildSettings, clean_git_config: Option<bool>) -> Self {
        GitCleanup {
            submodules: matches!(
                s.submodule_strategy,
                SubmoduleStrategy::Normal | SubmoduleStrategy::Recursive
            ),
            configs: clean_git_config.unwrap_or(s.git_strategy != GitStrategy::None),
        }
    }

    /// Writes the clean-up commands (each one tolerates missing files).
    pub fn write(&self, b: &mut ScriptBody, paths: &JobPaths) {
        let git = format!("{}/.git", paths.build_dir);
        let modules = format!("{git}/modules");
        let find = |b: &mut ScriptBody, dir: &str, name: &str, kind: &str| {
            let remove = if kind == "d" { "rm -rf --" } else { "rm -f" };
            let depth = if kind == "d" { " -depth" } else { "" };
            b.line(format!(
                "if [ -d {d} ]; then find {d} -name {n} -type {kind}{depth} -exec {remove} {{}} + ; fi",
                d = quote(dir),
                n = quote(name),
            ));
        };
        for f in [
            "index.lock",
            "shallow.lock",
            "HEAD.lock",
            "hooks/post-checkout",
            "config.lock",
        ] {
            b.line(format!("rm -f {}", quote(&format!("{git}/{f}"))));
            if self.submodules {
                let base = f.rsplit('/').next().unwrap_or(f);
                find(b, &modules, base, "f");
            }
        }
        find(b, &format!("{git}/refs"), "*.lock", "f");
        if !self.configs {
            return;
        }
        for dir in [format!("{}/git-template", paths.tmp_dir), git.clone()] {
            b.line(format!("rm -f {}", quote(&format!("{dir}/config"))));
            b.line(format!("rm -rf {}", quote(&format!("{dir}/hooks"))));
        }
        if self.submodules {
            find(b, &modules, "config", "f");
            find(b, &modules, "hooks", "d");
        }
    }
}

fn hook<'a>(payload: &'a JobPayload, name: &str) -> &'a [String] {
    payload
        .hooks
        .iter()
        .find(|h| h.name == name)
        .map(|h| h.script.as_slice())
        .unwrap_or_default()
}

/// The credential helper of token-less git URLs: it answers `get` with the job token.
const CREDENTIAL_HELPER: &str =
    r#"!f(){ if [ "$1" = "get" ] ; then echo "password=${CI_JOB_TOKEN}" ; fi ; } ; f"#;

/// The file `GIT_CONFIG_GLOBAL` names with `FF_GIT_URLS_WITHOUT_TOKENS`, under the temporary dir.
pub const GLOBAL_GIT_CONFIG_SEED: &str = ".glr.gconf";

/// The external git config (insteadOf rewrites, credential helper), under the temporary dir.
const EXTERNAL_GIT_CONFIG: &str = ".gitlab-runner.ext.conf";

/// Points git at the job token for the remote's host through [`CREDENTIAL_HELPER`] (user
/// `gitlab-ci-token`), in the config file `file`.
fn write_credential_helper(b: &mut ScriptBody, file: &str, remote: &str) {
    let Some(host) = url_base(remote) else {
        return;
    };
    let f = quote(file);
    let helper = quote(&format!("credential.{host}.helper"));
    b.line(format!(
        "git config -f {f} --replace-all {helper} \"\" && git config -f {f} --add {helper} {} && git config -f {f} {} gitlab-ci-token",
        quote(CREDENTIAL_HELPER),
        quote(&format!("credential.{host}.username")),
    ));
}

/// `FF_GIT_URLS_WITHOUT_TOKENS`: the seed of `GIT_CONFIG_GLOBAL` includes the user's global
/// configs (when readable) and the external config, so the credential helper reaches every git
/// command of the job; with `GIT_STRATEGY` none or empty (no fetch writes the external config)
/// the external config gets the credential helper alone.
fn write_tokenless_git_config(b: &mut ScriptBody, i: &SourcesInputs<'_>) {
    let tmp = &i.paths.tmp_dir;
    let seed = format!("{tmp}/{GLOBAL_GIT_CONFIG_SEED}");
    let ext = format!("{tmp}/{EXTERNAL_GIT_CONFIG}");
    let sq = quote(&seed);
    b.line(format!("rm -f {sq}"));
    // `$HOME` is the container's, read when the line runs.
    for user in ["$HOME/.gitconfig", "$HOME/.config/git/config"] {
        b.line(format!(
            "if [ -r \"{user}\" ]; then git config --file {sq} --add include.path \"{user}\"; fi"
        ));
    }
    b.line(format!(
        "git config --file {sq} --add include.path {}",
        quote(&ext)
    ));
    if matches!(
        i.settings.git_strategy,
        GitStrategy::None | GitStrategy::Empty
    ) {
        b.line(format!("rm -f {}", quote(&ext)));
        write_credential_helper(b, &ext, &i.auth.remote_url());
    }
}

/// Builds the `get_sources` body.
pub fn get_sources(payload: &JobPayload, i: &SourcesInputs<'_>) -> ScriptBody {
    let mut b = ScriptBody::with_script_sections(super::user::script_sections(payload, i.vars));
    let s = i.settings;
    let dir = quote(&i.paths.build_dir);
    write_exports(&mut b, i.vars, true);
    b.line("export GIT_TERMINAL_PROMPT=0");
    b.line("export GCM_INTERACTIVE=Never");
    if i.auth.tokenless {
        write_tokenless_git_config(&mut b, i);
    }
    write_git_ssl_config(&mut b, i);
    let fetches = matches!(s.git_strategy, GitStrategy::Clone | GitStrategy::Fetch);
    if fetches {
        if let Some(pre) = i.pre_get_sources.filter(|p| !p.trim().is_empty()) {
            b.user_commands("pre_get_sources_script", &[pre.to_string()]);
        }
        b.user_commands(
            "pre_get_sources_script",
            hook(payload, "pre_get_sources_script"),
        );
    }
    if !s.lfs_skip_smudge_set {
        b.line("export GIT_LFS_SKIP_SMUDGE=1");
    }
    match s.git_strategy {
        GitStrategy::None => {
            b.notice("Skipping Git repository setup");
            b.line(format!("mkdir -p {dir}"));
            b.notice("Skipping Git checkout");
            b.notice("Skipping Git submodules setup");
        }
        GitStrategy::Empty => {
            b.notice("Skipping Git repository setup and creating an empty build directory");
            b.line(format!("rm -rf {dir}"));
            b.line(format!("mkdir -p {dir}"));
            b.notice("Skipping Git checkout");
            b.notice("Skipping Git submodules setup");
        }
        GitStrategy::Clone | GitStrategy::Fetch => {
            write_fetch(&mut b, payload, i);
            write_checkout(&mut b, payload, i);
            write_submodules(&mut b, payload, i);
        }
    }
    if fetches {
        b.user_commands(
            "post_get_sources_script",
            hook(payload, "post_get_sources_script"),
        );
        if let Some(post) = i.post_get_sources.filter(|p| !p.trim().is_empty()) {
            b.user_commands("post_get_sources_script", &[post.to_string()]);
        }
    }
    let remote = i.auth.remote_url();
    let remote = if remote.is_empty() {
        payload.git_info.repo_url.clone()
    } else {
        remote
    };
    write_credential_reject(&mut b, &remote);
    b
}

/// Makes git's credential helpers forget the job token for the repository's host, when git
/// could have asked for one there: `http`, `https` and `ssh` URLs with a host (no local paths,
/// `file://` or `git://`). Best effort.
pub fn write_credential_reject(b: &mut ScriptBody, repo_url: &str) {
    let Some(base) = url_base(repo_url) else {
        return;
    };
    let Some((scheme, host)) = base.split_once("://") else {
        return;
    };
    if !matches!(scheme, "http" | "https" | "ssh") {
        return;
    }
    b.line(format!(
        "printf 'protocol=%s\\nhost=%s\\nusername=gitlab-ci-token\\n\\n' {} {} | git credential reject >/dev/null 2>&1 || true",
        quote(scheme),
        quote(host)
    ));
}

fn write_fetch(b: &mut ScriptBody, payload: &JobPayload, i: &SourcesInputs<'_>) {
    let s = i.settings;
    let git = &payload.git_info;
    let build_dir = &i.paths.build_dir;
    let dir = quote(build_dir);
    let template = format!("{}/git-template", i.paths.tmp_dir);
    let tq = quote(&template);
    let tconf = quote(&format!("{template}/config"));
    let ext = format!("{}/{EXTERNAL_GIT_CONFIG}", i.paths.tmp_dir);
    let eq = quote(&ext);
    // a. Clean-up of stale locks and (clean_git_config) of the old configs and hooks.
    GitCleanup::new(s, i.clean_git_config).write(b, i.paths);
    // b. Template dir and safe.directory.
    b.line(format!("rm -rf {tq}"));
    b.line(format!("mkdir -p {tq}"));
    b.line(format!("git config --global --add safe.directory {dir}"));
    b.line(format!("git config -f {tconf} init.defaultBranch none"));
    b.line(format!(
        "git config -f {tconf} fetch.recurseSubmodules false"
    ));
    b.line(format!(
        "git config -f {tconf} credential.interactive never"
    ));
    b.line(format!("git config -f {tconf} gc.autoDetach false"));
    // c. External config: credentials only through insteadOf, never in .git/config.
    b.line(format!("rm -f {eq}"));
    b.line(format!("touch {eq}"));
    // Gitaly ties git's requests to the job request (GitLab's correlation ID for it).
    let correlation = &payload.request_correlation_id;
    if i.vars.flag("FF_USE_GITALY_CORRELATION_ID") && !correlation.is_empty() {
        b.line(format!(
            "git config -f {eq} http.extraHeader {}",
            quote(&format!("X-Gitaly-Correlation-ID: {correlation}"))
        ));
        b.notice(&format!("Gitaly correlation ID: {correlation}"));
    }
    if i.vars.flag("FF_USE_GIT_BUNDLE_URIS") {
        b.line(format!("git config -f {eq} transfer.bundleURI true"));
    }
    for (with_token, plain) in i.auth.instead_ofs() {
        b.line(format!(
            "git config -f {eq} --replace-all {} {} {}",
            quote(&format!("url.{with_token}.insteadOf")),
            quote(&plain),
            quote(&format!("^{}$", regex_quote(&plain)))
        ));
    }
    if i.auth.tokenless {
        write_credential_helper(b, &ext, &i.auth.remote_url());
    }
    let without = url_without_credentials(&i.auth.remote_url());
    b.line(format!("git config -f {tconf} include.path {eq}"));
    b.line(format!("export GLR_EXT_GIT_CONFIG_PATH={eq}"));
    // d. clone: start from an empty project dir.
    if s.git_strategy == GitStrategy::Clone {
        b.line(format!("rm -rf {dir}"));
    }
    // e. Fetch.
    if git.depth > 0 {
        b.notice(&format!(
            "Fetching changes with git depth set to {}...",
            git.depth
        ));
    } else {
        b.notice("Fetching changes...");
    }
    let object_format = match git.repo_object_format.as_str() {
        "" | "sha1" => String::new(),
        f => format!(" --object-format {}", quote(f)),
    };
    b.line(format!("git init {dir} --template {tq}{object_format}"));
    b.line(format!("cd {dir}"));
    let remote = quote(&without);
    b.line(format!(
        "if git remote add origin {remote} >/dev/null 2>&1; then\n  echo {}\nelse\n  git remote set-url origin {remote}\n  git config include.path {eq}\nfi",
        quote(&format!("{}Created fresh repository.", crate::executor::trace::ansi::RESET))
    ));
    let auth = proactive_auth(b, i)
        .map(|a| format!(" -c {}", quote(&a)))
        .unwrap_or_default();
    let mut fetch = format!(
        "git -c {}{auth} fetch origin --no-recurse-submodules",
        quote(&format!("http.userAgent={}", i.user_agent))
    );
    // GitLab's refspecs as sent (none: git's configured ones, as upstream).
    for r in &git.refspecs {
        fetch.push(' ');
        fetch.push_str(&quote(r));
    }
    if git.depth > 0 {
        fetch.push_str(&format!(" --depth {}", git.depth));
    }
    for f in &s.git_fetch_extra_flags {
        fetch.push(' ');
        fetch.push_str(&quote(f));
    }
    if git.depth <= 0 {
        b.line(format!(
            "if [ -f .git/shallow ]; then {fetch} --unshallow; else {fetch}; fi"
        ));
    } else {
        b.line(fetch);
    }
}

/// The first percent sign of `url` that does not start an escape (`%ZZ`), as Go's URL parser
/// refuses it.
fn invalid_escape(url: &str) -> Option<&str> {
    let bytes = url.as_bytes();
    bytes.iter().enumerate().find_map(|(at, b)| {
        let hex = |k: usize| bytes.get(at + k).is_some_and(u8::is_ascii_hexdigit);
        (*b == b'%' && !(hex(1) && hex(2)))
            .then(|| url.get(at..(at + 3).min(url.len())).unwrap_or("%"))
    })
}

/// `FF_USE_GIT_PROACTIVE_AUTH`: git sends the job's credentials with its first request (so
/// Gitaly learns the user on public projects), scoped to the remote's host so bundle-URI fetches
/// from other hosts are not affected; unscoped, with a warning, when the host cannot be told.
/// `None` with the flag off.
fn proactive_auth(b: &mut ScriptBody, i: &SourcesInputs<'_>) -> Option<String> {
    if !i.vars.flag("FF_USE_GIT_PROACTIVE_AUTH") {
        return None;
    }
    let unscoped = "http.proactiveAuth=basic".to_string();
    let remote = i.auth.remote_url();
    if let Some(bad) = invalid_escape(&remote) {
        b.warning(&format!(
            "proactive auth: can't get repository host, using unscoped config. invalid URL escape {bad:?}"
        ));
        return Some(unscoped);
    }
    match url_base(&remote) {
        Some(host) => Some(format!("http.{host}.proactiveAuth=basic")),
        None => {
            b.warning("proactive auth: repository host is empty, using unscoped config");
            Some(unscoped)
        }
    }
}

/// git trusts what the runner trusts for GitLab: `http.<scheme://host>.sslCAInfo`, `sslCert` and
/// `sslKey` (global config of the helper container) point at the `CI_SERVER_TLS_*` files.
fn write_git_ssl_config(b: &mut ScriptBody, i: &SourcesInputs<'_>) {
    let remote = url_without_credentials(&i.auth.remote_url());
    let Some((scheme, host, _)) = split_url(&remote) else {
        return;
    };
    for (var, key) in [
        ("CI_SERVER_TLS_CA_FILE", "sslCAInfo"),
        ("CI_SERVER_TLS_CERT_FILE", "sslCert"),
        ("CI_SERVER_TLS_KEY_FILE", "sslKey"),
    ] {
        if i.vars.get(var).is_some() {
            b.line(format!(
                "git config --global {} \"${var}\"",
                quote(&format!("http.{scheme}://{host}.{key}"))
            ));
        }
    }
}

/// Escapes a string for a POSIX extended regular expression (git's value patterns).
fn regex_quote(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn write_checkout(b: &mut ScriptBody, payload: &JobPayload, i: &SourcesInputs<'_>) {
    let s = i.settings;
    let git = &payload.git_info;
    if !s.git_checkout {
        b.notice("Skipping Git checkout");
        return;
    }
    let short: String = git.sha.chars().take(8).collect();
    b.notice(&format!(
        "Checking out {short} as detached HEAD (ref is {})...",
        git.r#ref
    ));
    let auth = proactive_auth(b, i)
        .map(|a| format!(" -c {}", quote(&a)))
        .unwrap_or_default();
    b.line(format!(
        "git -c submodule.recurse=false{auth} checkout -f -q {}",
        quote(&git.sha)
    ));
    if !s.git_clean_flags.is_empty() {
        let flags: Vec<String> = s.git_clean_flags.iter().map(|f| quote(f)).collect();
        b.line(format!("git clean {}", flags.join(" ")));
    }
    if !s.lfs_skip_smudge_set {
        b.line("if git lfs version >/dev/null 2>&1; then git lfs pull; fi");
    }
}

fn write_submodules(b: &mut ScriptBody, payload: &JobPayload, i: &SourcesInputs<'_>) {
    let s = i.settings;
    let recursive = match s.submodule_strategy {
        SubmoduleStrategy::None => {
            b.notice("Skipping Git submodules setup");
            return;
        }
        SubmoduleStrategy::Normal => false,
        SubmoduleStrategy::Recursive => true,
        SubmoduleStrategy::Invalid => {
            b.error(
                "unknown GIT_SUBMODULE_STRATEGY: set it to none, normal or recursive \
                 (or remove it) in the job's variables",
            );
            b.line("exit 1");
            return;
        }
    };
    let depth = s.submodule_depth.unwrap_or(payload.git_info.depth);
    let mut notice = String::from("Updating/initializing submodules");
    if recursive {
        notice.push_str(" recursively");
    }
    if depth > 0 {
        notice.push_str(&format!(" with git depth set to {depth}"));
    }
    notice.push_str("...");
    b.notice(&notice);
    let rec = if recursive { " --recursive" } else { "" };
    let pathspec = match s.submodule_pathspec() {
        Ok(p) => p,
        Err(e) => {
            b.error(&e);
            b.line("exit 1");
            return;
        }
    };
    let paths = if pathspec.is_empty() {
        String::new()
    } else {
        let p: Vec<String> = pathspec.iter().map(|p| quote(p)).collect();
        format!(" -- {}", p.join(" "))
    };
    let depth_arg = if depth > 0 {
        format!(" --depth {depth}")
    } else {
        String::new()
    };
    let flags: String = s
        .submodule_update_flags
        .iter()
        .map(|f| format!(" {}", quote(f)))
        .collect();
    // Submodules are always cleaned: `GIT_CLEAN_FLAGS=none` means `-ffdx` here, as upstream.
    let clean_flags: Vec<String> = if s.git_clean_flags.is_empty() {
        vec!["-ffdx".to_string()]
    } else {
        s.git_clean_flags.iter().map(|f| quote(f)).collect()
    };
    // foreach gets the command as separate words: git runs it without a shell, so flags are
    // passed as written. Errors stop the stage, as upstream's.
    let foreach = format!("git submodule foreach{rec}");
    let clean = format!("{foreach} git clean {}", clean_flags.join(" "));
    let reset = format!("{foreach} git reset --hard");
    let creds = "git -c include.path=\"$GLR_EXT_GIT_CONFIG_PATH\"";
    let sync = format!("git submodule sync{rec}{paths}");
    let update = format!("{creds} submodule update --init{rec}{depth_arg}{flags}{paths}");
    b.line("git submodule init");
    b.line(&sync);
    b.line(&clean);
    b.line(&reset);
    b.line(format!("if {update}; then"));
    b.notice("Updated submodules");
    b.line(&sync);
    b.line("else");
    b.warning("Updating submodules failed. Retrying...");
    if s.submodule_update_flags
        .iter()
        .any(|f| f.eq_ignore_ascii_case("--remote"))
    {
        // A `branch` of .gitmodules that is not the default one needs the remote heads.
        b.line(format!(
            "{creds} submodule foreach{rec} git fetch origin {}",
            quote("+refs/heads/*:refs/remotes/origin/*")
        ));
    }
    b.line(&sync);
    b.line(&update);
    b.line(&reset);
    b.line("fi");
    b.line(&clean);
    // Every submodule, recursive or not, includes the parent's credentials config.
    b.notice("Configuring submodules to use parent git credentials...");
    b.line(
        "git submodule foreach --recursive git config --replace-all include.path \"$GLR_EXT_GIT_CONFIG_PATH\"",
    );
    if !s.lfs_skip_smudge_set {
        b.line("if git lfs version >/dev/null 2>&1; then");
        b.notice("Pulling LFS files...");
        b.line(format!("{creds} submodule foreach{rec} git lfs pull"));
        b.line("fi");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::script::variables::VarList;

    /// A variable list from `(key, value)` pairs.
    fn var_list(vars: &[(&str, &str)], tmp_dir: &str) -> VarList {
        VarList {
            vars: vars
                .iter()
                .map(|(k, v)| crate::executor::script::variables::Var {
                    key: k.to_string(),
                    value: v.to_string(),
                    ..Default::default()
                })
                .collect(),
            tmp_dir: tmp_dir.into(),
        }
    }

    fn test_paths() -> JobPaths {
        JobPaths {
            root_dir: "/b".into(),
            build_dir: "/b/p".into(),
            tmp_dir: "/b/p.tmp".into(),
            cache_dir: "/c".into(),
        }
    }

    fn cleanup_text(vars: &[(&str, &str)], clean_git_config: Option<bool>) -> String {
        let (settings, _) = BuildSettings::from_variables(&var_list(vars, "/b/p.tmp"), true);
        let mut b = ScriptBody::new();
        GitCleanup::new(&settings, clean_git_config).write(&mut b, &test_paths());
        b.as_str().to_string()
    }

    #[test]
    fn git_cleanup_as_upstream() {
        let modules = "find /b/p/.git/modules";
        // Submodules: locks, configs and hooks under .git/modules too.
        let t = cleanup_text(&[("GIT_SUBMODULE_STRATEGY", "recursive")], None);
        for (file, lock) in [
            ("index.lock", "index.lock"),
            ("shallow.lock", "shallow.lock"),
            ("HEAD.lock", "HEAD.lock"),
            ("hooks/post-checkout", "post-checkout"),
            ("config.lock", "config.lock"),
        ] {
            assert!(
                t.contains(&format!("rm -f /b/p/.git/{file}\n")),
                "{file}:\n{t}"
            );
            assert!(
                t.contains(&format!("{modules} -name {lock} -type f -exec rm -f")),
                "{lock}:\n{t}"
            );
        }
        assert!(
            t.contains(&format!("{modules} -name config -type f -exec rm -f")),
            "{t}"
        );
        assert!(
            t.contains(&format!(
                "{modules} -name hooks -type d -depth -exec rm -rf --"
            )),
            "{t}"
        );
        assert!(
            t.contains("rm -f /b/p.tmp/git-template/config\nrm -rf /b/p.tmp/git-template/hooks"),
            "{t}"
        );
        assert!(
            t.contains("rm -f /b/p/.git/config\nrm -rf /b/p/.git/hooks"),
            "{t}"
        );
        assert!(
            t.contains("find /b/p/.git/refs -name $'*.lock' -type f"),
            "{t}"
        );
        // No submodules: .git/modules is left alone.
        let t = cleanup_text(&[], None);
        assert!(!t.contains("modules"), "{t}");
        assert!(t.contains("rm -f /b/p/.git/config"), "{t}");
        // clean_git_config = false: locks only.
        let t = cleanup_text(&[("GIT_SUBMODULE_STRATEGY", "normal")], Some(false));
        assert!(t.contains(&format!("{modules} -name index.lock")), "{t}");
        assert!(
            !t.contains("/config\n") && !t.contains("hooks\n") && !t.contains("-type d"),
            "{t}"
        );
        // GIT_STRATEGY=none: no config clean-up unless clean_git_config says so.
        let t = cleanup_text(&[("GIT_STRATEGY", "none")], None);
        assert!(!t.contains(".git/config\n"), "{t}");
        let t = cleanup_text(&[("GIT_STRATEGY", "none")], Some(true));
        assert!(t.contains("rm -f /b/p/.git/config\n"), "{t}");
    }

    #[test]
    fn job_token_rewrites_as_upstream() {
        // (name, force https, ssh port, expected rewrites) — upstream's GetInsteadOfs table,
        // with the runner url https://test.local, token job-token, ssh host test.local and
        // no repository URL.
        type Rewrites<'a> = &'a [(&'a str, &'a str)];
        let cases: [(&str, bool, &str, Rewrites); 3] = [
            (
                "authenticated basic rewrite",
                false,
                "",
                &[(
                    "https://gitlab-ci-token:job-token@test.local",
                    "https://test.local",
                )],
            ),
            (
                "authenticated with force HTTPS",
                true,
                "",
                &[
                    (
                        "https://gitlab-ci-token:job-token@test.local",
                        "https://test.local",
                    ),
                    (
                        "https://gitlab-ci-token:job-token@test.local/",
                        "git@test.local:",
                    ),
                    (
                        "https://gitlab-ci-token:job-token@test.local",
                        "ssh://git@test.local",
                    ),
                ],
            ),
            (
                "server port wiring",
                true,
                "8022",
                &[
                    (
                        "https://gitlab-ci-token:job-token@test.local",
                        "https://test.local",
                    ),
                    (
                        "https://gitlab-ci-token:job-token@test.local",
                        "ssh://git@test.local:8022",
                    ),
                ],
            ),
        ];
        for (name, force_https, ssh_port, want) in cases {
            let auth = GitAuth {
                credentials_url: "https://test.local",
                token: "job-token",
                force_https,
                ssh_host: "test.local",
                ssh_port,
                ..Default::default()
            };
            let got = auth.instead_ofs();
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
        // A repository on another host (or port) of the same GitLab: its base is rewritten
        // too, so `../other.git` submodules authenticate.
        let auth = GitAuth {
            credentials_url: "https://gitlab.example.com/",
            repo_url: "http://gitlab-ci-token:tok@10.0.0.5:8080/g/p.git",
            token: "tok",
            ..Default::default()
        };
        assert_eq!(
            auth.instead_ofs(),
            vec![
                (
                    "http://gitlab-ci-token:tok@10.0.0.5:8080/g/p.git".to_string(),
                    "http://10.0.0.5:8080/g/p.git".to_string()
                ),
                (
                    "https://gitlab-ci-token:tok@gitlab.example.com".to_string(),
                    "https://gitlab.example.com".to_string()
                ),
                (
                    "http://gitlab-ci-token:tok@10.0.0.5:8080".to_string(),
                    "http://10.0.0.5:8080".to_string()
                ),
            ]
        );
        // clone_url: the remote is <clone_url>/<project path>.git, and its base is rewritten.
        let auth = GitAuth {
            clone_url: "https://clone.example.com/gl/",
            credentials_url: "https://gitlab.example.com",
            repo_url: "https://gitlab-ci-token:tok@gitlab.example.com/g/p.git",
            token: "tok",
            project_path: "g/p",
            ..Default::default()
        };
        assert_eq!(
            auth.remote_url(),
            "https://gitlab-ci-token:tok@clone.example.com/gl/g/p.git"
        );
        let got = auth.instead_ofs();
        assert!(
            got.contains(&(
                "https://gitlab-ci-token:tok@clone.example.com/gl".to_string(),
                "https://clone.example.com/gl".to_string()
            )),
            "{got:?}"
        );
        // A token with URL-special characters is escaped.
        let auth = GitAuth {
            credentials_url: "https://h",
            token: "a@b/c",
            ..Default::default()
        };
        assert_eq!(
            auth.instead_ofs()[0].0,
            "https://gitlab-ci-token:a%40b%2Fc@h"
        );
    }

    /// The `get_sources` text for `vars` (settings read from them) with no hooks.
    fn sources_text(
        payload: &JobPayload,
        vars: &[(&str, &str)],
        paths: &JobPaths,
        auth: &GitAuth<'_>,
    ) -> String {
        let vars = var_list(vars, &paths.tmp_dir);
        let (settings, _) = BuildSettings::from_variables(&vars, false);
        get_sources(
            payload,
            &SourcesInputs {
                vars: &vars,
                paths,
                settings: &settings,
                pre_get_sources: None,
                post_get_sources: None,
                user_agent: "drover",
                clean_git_config: None,
                auth,
            },
        )
        .as_str()
        .to_string()
    }

    #[test]
    fn none_and_empty_say_what_they_skip() {
        let payload = JobPayload::from_json(r#"{"id": 1}"#).unwrap();
        let paths = test_paths();
        for strategy in ["none", "empty"] {
            let t = sources_text(
                &payload,
                &[("GIT_STRATEGY", strategy)],
                &paths,
                &GitAuth::default(),
            );
            let setup = t.find("Skipping Git repository setup").expect(strategy);
            let checkout = t.find("Skipping Git checkout").expect(strategy);
            let submodules = t.find("Skipping Git submodules setup").expect(strategy);
            assert!(setup < checkout && checkout < submodules, "{t}");
        }
    }

    #[test]
    fn submodules_are_cleaned_even_with_git_clean_flags_none() {
        let payload = JobPayload::from_json(
            r#"{"id": 1, "git_info": {"repo_url": "https://h/g/p.git", "sha": "0123456789", "ref": "main"}}"#,
        )
        .unwrap();
        let paths = test_paths();
        let vars = [
            ("GIT_CLEAN_FLAGS", "none"),
            ("GIT_SUBMODULE_STRATEGY", "normal"),
        ];
        let t = sources_text(&payload, &vars, &paths, &GitAuth::default());
        // An unknown submodule strategy fails get_sources, as upstream.
        let f = sources_text(
            &payload,
            &[
                ("GIT_CLEAN_FLAGS", "none"),
                ("GIT_SUBMODULE_STRATEGY", "bogus"),
            ],
            &paths,
            &GitAuth::default(),
        );
        let at = f
            .find("unknown GIT_SUBMODULE_STRATEGY")
            .expect("error line");
        assert!(f[at..].contains("\nexit 1\n"), "{f}");
        assert!(!f.contains("submodule update"), "{f}");
        // No clean of the main checkout, but submodules are still cleaned.
        assert!(!t.contains("\ngit clean"), "{t}");
        assert!(
            t.contains("\ngit submodule foreach git clean -ffdx\n"),
            "{t}"
        );
    }

    #[test]
    fn token_stays_out_of_git_config() {
        let payload = JobPayload::from_json(
            r#"{"git_info": {"repo_url": "https://gitlab-ci-token:SECRET@h.example/g/p.git",
                "sha": "0123456789abcdef", "ref": "main", "depth": 5,
                "refspecs": ["+refs/heads/main:refs/remotes/origin/main"]}}"#,
        )
        .unwrap();
        let paths = JobPaths {
            root_dir: "/builds".into(),
            build_dir: "/builds/g/p".into(),
            tmp_dir: "/builds/g/p.tmp".into(),
            cache_dir: "/cache/g/p".into(),
        };
        let (settings, _) = BuildSettings::from_variables(&VarList::default(), false);
        let vars = VarList::default();
        let body = get_sources(
            &payload,
            &SourcesInputs {
                vars: &vars,
                paths: &paths,
                settings: &settings,
                pre_get_sources: None,
                post_get_sources: None,
                user_agent: "drover",
                clean_git_config: None,
                auth: &GitAuth {
                    repo_url: &payload.git_info.repo_url,
                    token: "SECRET",
                    ..Default::default()
                },
            },
        );
        let t = body.as_str();
        assert!(!t.contains("sslCAInfo"), "{t}");
        let auth = GitAuth {
            repo_url: &payload.git_info.repo_url,
            token: "SECRET",
            ..Default::default()
        };
        let tls = sources_text(&payload, &[("CI_SERVER_TLS_CA_FILE", "PEM")], &paths, &auth);
        assert!(
            tls.contains(
                "git config --global $'http.https://h.example.sslCAInfo' \"$CI_SERVER_TLS_CA_FILE\""
            ),
            "{tls}"
        );
        assert!(t.contains("git remote add origin $'https://h.example/g/p.git'"));
        assert!(t.contains("insteadOf' $'https://h.example/g/p.git'"));
        assert!(!t.contains("remote add origin $'https://gitlab-ci-token"));
        assert!(t.contains("--depth 5 --prune --quiet"));
        assert!(t.contains("checkout -f -q 0123456789abcdef"));
        assert!(t.contains("Checking out 01234567 as detached HEAD (ref is main)..."));
        assert!(t.contains("rm -rf /builds/g/p\n"));
    }
}
