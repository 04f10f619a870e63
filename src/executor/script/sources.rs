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
}

fn hook<'a>(payload: &'a JobPayload, name: &str) -> &'a [String] {
    payload
        .hooks
        .iter()
        .find(|h| h.name == name)
        .map(|h| h.script.as_slice())
        .unwrap_or_default()
}

/// Builds the `get_sources` body.
pub fn get_sources(payload: &JobPayload, i: &SourcesInputs<'_>) -> ScriptBody {
    let mut b = ScriptBody::with_script_sections(
        payload.features.trace_sections && i.vars.bool("FF_SCRIPT_SECTIONS").unwrap_or(false),
    );
    let s = i.settings;
    let dir = quote(&i.paths.build_dir);
    write_exports(&mut b, i.vars, true);
    b.line("export GIT_TERMINAL_PROMPT=0");
    b.line("export GCM_INTERACTIVE=Never");
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
        }
        GitStrategy::Empty => {
            b.notice("Skipping Git repository setup and creating an empty build directory");
            b.line(format!("rm -rf {dir}"));
            b.line(format!("mkdir -p {dir}"));
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
    if let Some(base) = url_base(&payload.git_info.repo_url) {
        let (scheme, host) = base.split_once("://").unwrap_or(("https", base.as_str()));
        b.line(format!(
            "printf 'protocol=%s\\nhost=%s\\nusername=gitlab-ci-token\\n\\n' {} {} | git credential reject >/dev/null 2>&1 || true",
            quote(scheme),
            quote(host)
        ));
    }
    b
}

fn write_fetch(b: &mut ScriptBody, payload: &JobPayload, i: &SourcesInputs<'_>) {
    let s = i.settings;
    let git = &payload.git_info;
    let build_dir = &i.paths.build_dir;
    let dir = quote(build_dir);
    let template = format!("{}/git-template", i.paths.tmp_dir);
    let tq = quote(&template);
    let tconf = quote(&format!("{template}/config"));
    let ext = format!("{}/.gitlab-runner.ext.conf", i.paths.tmp_dir);
    let eq = quote(&ext);
    // a. Clean-up of stale locks and (clean_git_config) of the old config and hooks.
    for lock in [
        "index.lock",
        "shallow.lock",
        "HEAD.lock",
        "config.lock",
        "hooks/post-checkout",
    ] {
        b.line(format!(
            "rm -f {}",
            quote(&format!("{build_dir}/.git/{lock}"))
        ));
    }
    b.line(format!(
        "if [ -d {r} ]; then find {r} -type f -name '*.lock' -exec rm -f {{}} + ; fi",
        r = quote(&format!("{build_dir}/.git/refs"))
    ));
    b.line(format!(
        "rm -rf {} {}",
        quote(&format!("{build_dir}/.git/config")),
        quote(&format!("{build_dir}/.git/hooks"))
    ));
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
    if i.vars.bool("FF_USE_GIT_BUNDLE_URIS").unwrap_or(true) {
        b.line(format!("git config -f {eq} transfer.bundleURI true"));
    }
    let with_creds = &git.repo_url;
    let without = url_without_credentials(with_creds);
    if with_creds != &without {
        b.line(format!(
            "git config -f {eq} --replace-all {} {}",
            quote(&format!("url.{with_creds}.insteadOf")),
            quote(&without)
        ));
    }
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
    let mut fetch = format!(
        "git -c http.userAgent={} fetch origin --no-recurse-submodules",
        quote(i.user_agent)
    );
    let refspecs: Vec<String> = if git.refspecs.is_empty() {
        vec![
            "+refs/heads/*:refs/remotes/origin/*".into(),
            "+refs/tags/*:refs/tags/*".into(),
        ]
    } else {
        git.refspecs.clone()
    };
    for r in &refspecs {
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
    b.line(format!(
        "git -c submodule.recurse=false checkout -f -q {}",
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
    };
    b.notice(if recursive {
        "Updating/initializing submodules recursively..."
    } else {
        "Updating/initializing submodules..."
    });
    let rec = if recursive { " --recursive" } else { "" };
    let paths = if s.submodule_paths.is_empty() {
        String::new()
    } else {
        let p: Vec<String> = s.submodule_paths.iter().map(|p| quote(p)).collect();
        format!(" -- {}", p.join(" "))
    };
    let depth = s.submodule_depth.unwrap_or(payload.git_info.depth);
    let depth = if depth > 0 {
        format!(" --depth {depth}")
    } else {
        String::new()
    };
    let flags: String = s
        .submodule_update_flags
        .iter()
        .map(|f| format!(" {}", quote(f)))
        .collect();
    let clean_flags: Vec<String> = s.git_clean_flags.iter().map(|f| quote(f)).collect();
    let foreach_clean = if clean_flags.is_empty() {
        "git reset --hard".to_string()
    } else {
        format!("git clean {} && git reset --hard", clean_flags.join(" "))
    };
    let update = format!(
        "git -c include.path=\"$GLR_EXT_GIT_CONFIG_PATH\" submodule update --init{rec}{depth}{flags}{paths}"
    );
    let foreach = format!("git submodule foreach{rec} {}", quote(&foreach_clean));
    b.line("git submodule init");
    b.line(format!("git submodule sync{rec}{paths}"));
    b.line(format!("{foreach} || true"));
    b.line(format!(
        "if ! {update}; then\n  echo {}\n  git submodule sync{rec}{paths}\n  {update}\n  {foreach}\nfi",
        quote("Updating submodules failed. Retrying...")
    ));
    b.line(format!("{foreach} || true"));
    b.line(format!(
        "git submodule foreach{rec} {} || true",
        quote("git config include.path \"$GLR_EXT_GIT_CONFIG_PATH\"")
    ));
    if !s.lfs_skip_smudge_set {
        b.line(format!(
            "if git lfs version >/dev/null 2>&1; then git submodule foreach{rec} {}; fi",
            quote("git lfs pull")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::script::variables::VarList;

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
            },
        );
        let t = body.as_str();
        assert!(t.contains("git remote add origin $'https://h.example/g/p.git'"));
        assert!(t.contains("insteadOf' $'https://h.example/g/p.git'"));
        assert!(!t.contains("remote add origin $'https://gitlab-ci-token"));
        assert!(t.contains("--depth 5 --prune --quiet"));
        assert!(t.contains("checkout -f -q 0123456789abcdef"));
        assert!(t.contains("Checking out 01234567 as detached HEAD (ref is main)..."));
        assert!(t.contains("rm -rf /builds/g/p\n"));
    }
}
