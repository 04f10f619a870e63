//! Stage bodies other than `get_sources`: the variable exports shared by most stages,
//! `prepare_script`, `step_script`, `after_script` and `cleanup_file_variables`. Pure.

use super::variables::{valid_name, VarList};
use super::{quote, ScriptBody};
use crate::executor::paths::JobPaths;
use crate::job::{JobPayload, Step};

/// Whether multi-line commands are shown as collapsed sections with their whole text:
/// `FF_SCRIPT_SECTIONS` on and GitLab's `trace_sections` feature, as upstream.
pub fn script_sections(payload: &JobPayload, vars: &VarList) -> bool {
    payload.features.trace_sections && vars.bool("FF_SCRIPT_SECTIONS").unwrap_or(false)
}

/// The steps that run as `step_<name>` stages, in order: every named step but after_script
/// (normally just `script`; GitLab renders `release:` as a `release` step).
pub fn script_steps(payload: &JobPayload) -> Vec<&Step> {
    payload
        .steps
        .iter()
        .filter(|s| s.name != "after_script" && !s.name.is_empty())
        .collect()
}

/// The lines a script step runs: those of a `release` step expanded against the job variables
/// first (GitLab writes the `release:` keyword's values into them unexpanded), as upstream.
pub fn step_lines(vars: &VarList, step: &Step) -> Vec<String> {
    if step.name == "release" {
        step.script.iter().map(|l| vars.expand(l)).collect()
    } else {
        step.script.clone()
    }
}

/// after_script's lines; `None` when its stage is skipped (no such step, or no lines: blank
/// lines still run it, as upstream).
pub fn after_script_lines(payload: &JobPayload) -> Option<&[String]> {
    payload
        .steps
        .iter()
        .find(|s| s.name == "after_script")
        .map(|s| s.script.as_slice())
        .filter(|lines| !lines.is_empty())
}

/// Writes the exports at the top of a stage: every variable (file variables written under the
/// temporary dir and exported as their path), then `GITLAB_ENV` and the dotenv lines it holds,
/// read as upstream reads them: each line `export`ed with its surrounding blanks trimmed, a last
/// line without a newline ignored, and a line `export` refuses (empty, `1ABC=x`) failing the
/// stage.
/// With `write_files` false (cleanup), file variables are exported as paths only.
pub fn write_exports(b: &mut ScriptBody, vars: &VarList, write_files: bool) {
    let tmp = quote(&vars.tmp_dir);
    b.line(format!("mkdir -p {tmp}"));
    for v in vars.unique() {
        if !valid_name(&v.key) {
            continue;
        }
        if v.file {
            let Some(path) = vars.file_path(&v.key) else {
                continue;
            };
            let path = quote(&path);
            if write_files {
                b.line(format!("printf '%s' {} > {path}", quote(&v.value)));
            }
            b.line(format!("export {}={path}", v.key));
        } else {
            b.line(format!("export {}={}", v.key, quote(&v.value)));
        }
    }
    b.line(format!(
        "export GITLAB_ENV={}",
        quote(&format!("{}/gitlab_runner_env", vars.tmp_dir))
    ));
    b.line("touch \"$GITLAB_ENV\"");
    b.line(
        "while read -r __drover_env_line; do export \"$__drover_env_line\"; done < \"$GITLAB_ENV\"",
    );
    // After the dotenv lines, so a job cannot point git elsewhere.
    if vars.flag("FF_GIT_URLS_WITHOUT_TOKENS") {
        b.line(format!(
            "export GIT_CONFIG_GLOBAL={}",
            quote(&format!(
                "{}/{}",
                vars.tmp_dir,
                super::sources::GLOBAL_GIT_CONFIG_SEED
            ))
        ));
    }
}

/// The exit code of `prepare_script` when a deferred permission fix failed. Nothing else in
/// that stage exits with it: its other lines are `echo` and `rm -f`.
pub const PERMISSION_FIX_FAILED: i32 = 75;

/// `prepare_script` (helper container): first the deferred permission fix of fresh volumes
/// (`gitlab-runner-helper cache-init` on each volume root, silent unless it fails), then says
/// where the job runs and clears the dotenv and masking files of an earlier job.
pub fn prepare_script(
    paths: &JobPaths,
    machine: Option<&str>,
    permission_fix: &[String],
) -> ScriptBody {
    let mut b = ScriptBody::new();
    for dir in permission_fix {
        let dir = quote(dir);
        b.line(format!(
            "__drover_out=$(gitlab-runner-helper cache-init {dir} 2>&1) || {{ __drover_rc=$?; printf '%s\\n' \"$__drover_out\"; printf 'setting permissions on %s failed: cache-init exited with %s\\n' {dir} \"$__drover_rc\"; exit {PERMISSION_FIX_FAILED}; }}"
        ));
    }
    let via = match machine.filter(|m| !m.is_empty()) {
        Some(m) => format!(" via {}", quote(m)),
        None => String::new(),
    };
    b.line(format!(
        "echo \"Running on $(hostname 2>/dev/null || cat /etc/hostname){via}...\""
    ));
    b.line(format!(
        "rm -f {} {}",
        quote(&format!("{}/gitlab_runner_env", paths.tmp_dir)),
        quote(&format!("{}/masking.db", paths.tmp_dir))
    ));
    b
}

/// `clear_worktree` (helper container), before the second `get_sources` attempt: removes
/// every tracked and untracked file of the project dir. Errors are ignored.
pub fn clear_worktree(paths: &JobPaths) -> ScriptBody {
    let mut b = ScriptBody::new();
    let dir = quote(&paths.build_dir);
    b.notice("Deleting tracked and untracked files...");
    b.line(format!(
        "if [ -d {dir}/.git ]; then cd {dir} && {{ git rm -rf -q --ignore-unmatch . || true; git clean -ffdx -q || true; }}; fi"
    ));
    b
}

/// `step_script` (build container): exports, `cd`, `pre_build_script`, the job's
/// before_script + script lines, `post_build_script`.
pub fn step_script(
    vars: &VarList,
    paths: &JobPaths,
    pre_build: Option<&str>,
    script: &[String],
    post_build: Option<&str>,
    script_sections: bool,
) -> ScriptBody {
    let mut b = ScriptBody::with_script_sections(script_sections);
    write_exports(&mut b, vars, true);
    b.line(format!("cd {}", quote(&paths.build_dir)));
    if let Some(pre) = pre_build.filter(|s| !s.trim().is_empty()) {
        b.user_commands("pre_build_script", &[pre.to_string()]);
    }
    b.user_commands("script_step", script);
    if let Some(post) = post_build.filter(|s| !s.trim().is_empty()) {
        b.user_commands("post_build_script", &[post.to_string()]);
    }
    b
}

/// `after_script` (build container): exports (with `CI_JOB_STATUS` already overwritten by
/// the caller), `cd`, "Running after script...", the lines.
pub fn after_script(
    vars: &VarList,
    paths: &JobPaths,
    script: &[String],
    script_sections: bool,
) -> ScriptBody {
    let mut b = ScriptBody::with_script_sections(script_sections);
    write_exports(&mut b, vars, true);
    b.line(format!("cd {}", quote(&paths.build_dir)));
    b.notice("Running after script...");
    b.user_commands("after_script_step", script);
    b
}

/// `cleanup_file_variables` (helper container): drops the job token from credential stores
/// (for `remote`, the URL git fetched from) and deletes the dotenv file, the masking db, the external git config and every file
/// variable's file, then repeats the git clean-up of `get_sources` (locks, and configs and
/// hooks a job may have planted). Errors are ignored.
pub fn cleanup_file_variables(
    vars: &VarList,
    paths: &JobPaths,
    remote: Option<&str>,
    git: super::sources::GitCleanup,
) -> ScriptBody {
    let mut b = ScriptBody::new();
    write_exports(&mut b, vars, false);
    if let Some(base) = remote {
        super::sources::write_credential_reject(&mut b, base);
    }
    let tmp = &paths.tmp_dir;
    let mut files = vec![
        format!("{tmp}/gitlab_runner_env"),
        format!("{tmp}/masking.db"),
        format!("{tmp}/.gitlab-runner.ext.conf"),
        format!("{tmp}/{}", super::sources::GLOBAL_GIT_CONFIG_SEED),
    ];
    files.extend(
        vars.unique()
            .into_iter()
            .filter(|v| v.file)
            .filter_map(|v| vars.file_path(&v.key)),
    );
    let quoted: Vec<String> = files.iter().map(|f| quote(f)).collect();
    b.line(format!("rm -f {} || true", quoted.join(" ")));
    git.write(&mut b, paths);
    b.line(format!(
        "rm -f {} || true",
        quote(&format!("{}/.gitlab-build-uid-gid", paths.root_dir))
    ));
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::script::variables::Var;

    fn paths() -> JobPaths {
        JobPaths {
            root_dir: "/builds".into(),
            build_dir: "/builds/g/p".into(),
            tmp_dir: "/builds/g/p.tmp".into(),
            cache_dir: "/cache/g/p".into(),
        }
    }

    #[test]
    fn exports_and_file_variables_run_in_bash() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("p.tmp").display().to_string();
        let vars = VarList {
            vars: vec![
                Var {
                    key: "GREETING".into(),
                    value: "hello 'world'\nline2".into(),
                    ..Default::default()
                },
                Var {
                    key: "CONF".into(),
                    value: "a=1\nb=$2".into(),
                    file: true,
                    ..Default::default()
                },
                Var {
                    key: "bad-name".into(),
                    value: "x".into(),
                    ..Default::default()
                },
            ],
            tmp_dir: tmp.clone(),
        };
        let mut b = ScriptBody::new();
        write_exports(&mut b, &vars, true);
        b.line("echo \"$GREETING\"; cat \"$CONF\"; echo; echo \"$CONF\"");
        b.line("echo FROM_DOTENV=yes >> \"$GITLAB_ENV\"");
        let script = b.finish(false);
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text,
            format!("hello 'world'\nline2\na=1\nb=$2\n{tmp}/CONF\n"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut b = ScriptBody::new();
        write_exports(&mut b, &vars, false);
        b.line("echo \"$FROM_DOTENV\"");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(b.finish(false))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "yes\n");
    }

    /// The dotenv file as upstream's stages read it: blanks around a line trimmed, a last line
    /// without a newline left out, an empty line or an invalid name failing the stage.
    #[test]
    fn only_the_release_step_is_expanded_by_the_runner() {
        let vars = VarList {
            vars: vec![Var {
                key: "TAG".into(),
                value: "v1.2".into(),
                ..Default::default()
            }],
            tmp_dir: "/t".into(),
        };
        let step = |name: &str| Step {
            name: name.into(),
            script: vec!["release-cli create --tag-name $TAG --name \"${TAG} $$x\"".into()],
            ..Default::default()
        };
        assert_eq!(
            step_lines(&vars, &step("release")),
            ["release-cli create --tag-name v1.2 --name \"v1.2 $x\""]
        );
        assert_eq!(step_lines(&vars, &step("script")), step("script").script);
    }

    #[test]
    fn gitlab_env_is_read_as_upstream_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().display().to_string();
        let vars = VarList {
            vars: vec![],
            tmp_dir: tmp.clone(),
        };
        let run = |dotenv: &str| {
            std::fs::write(dir.path().join("gitlab_runner_env"), dotenv).unwrap();
            let mut b = ScriptBody::new();
            write_exports(&mut b, &vars, false);
            b.line("echo \"A=[$A] B=[$B] C=[${C-unset}]\"");
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(b.finish(false))
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        assert_eq!(
            run("A=1  \n  B=2 x\nC=3"),
            (Some(0), "A=[1] B=[2 x] C=[unset]\n".into())
        );
        assert_eq!(run("A=1\n\nB=2\n").0, Some(1));
        assert_eq!(run("1ABC=x\nA=1\n").0, Some(1));
    }

    /// Runs `prepare_script` in bash with a fake `gitlab-runner-helper` on PATH that records
    /// its arguments and fails for a dir named `bad`.
    fn run_prepare(fix: &[String]) -> (Option<i32>, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let log = dir.path().join("calls");
        let fake = bin.join("gitlab-runner-helper");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$2\" in */bad) echo 'chmod: denied' >&2; exit 4;; esac\n",
                log.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut p = paths();
        p.tmp_dir = dir.path().join("p.tmp").display().to_string();
        let script = prepare_script(&p, Some("machine-1"), fix).finish(false);
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            calls,
        )
    }

    #[test]
    fn prepare_script_fixes_permissions_first_and_silently() {
        let (code, out, calls) = run_prepare(&["/builds".into(), "/my cache".into()]);
        assert_eq!(code, Some(0));
        assert!(out.starts_with("Running on "), "{out}");
        assert!(out.trim_end().ends_with(" via machine-1..."), "{out}");
        assert_eq!(calls, "cache-init /builds\ncache-init /my cache\n");
        let (code, _, calls) = run_prepare(&[]);
        assert_eq!(code, Some(0));
        assert_eq!(calls, "");
    }

    #[test]
    fn a_failed_permission_fix_stops_prepare_script_with_its_code() {
        let (code, out, calls) =
            run_prepare(&["/builds".into(), "/srv/bad".into(), "/cache".into()]);
        assert_eq!(code, Some(PERMISSION_FIX_FAILED));
        assert_eq!(calls, "cache-init /builds\ncache-init /srv/bad\n");
        assert_eq!(
            out,
            "chmod: denied\nsetting permissions on /srv/bad failed: cache-init exited with 4\n"
        );
    }

    #[test]
    fn step_script_order() {
        let vars = VarList::default();
        let b = step_script(
            &vars,
            &paths(),
            Some("echo pre"),
            &["echo main".into()],
            Some("echo post"),
            false,
        );
        let t = b.as_str();
        let (pre, main, post) = (
            t.find("\necho pre\n").unwrap(),
            t.find("\necho main\n").unwrap(),
            t.find("\necho post\n").unwrap(),
        );
        assert!(t.contains("cd /builds/g/p\n"));
        assert!(pre < main && main < post);
    }
}

#[cfg(test)]
mod containment_tests {
    use super::*;
    use crate::executor::script::variables::Var;

    /// Every stage that touches file variables (write, export, clean-up) runs in bash with a
    /// hostile key pointing at a file outside the temporary dir; that file must survive and
    /// nothing may be written next to it.
    #[test]
    fn a_file_variable_key_never_reaches_outside_the_temporary_dir() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("builds");
        let tmp = root.join("g/p.tmp");
        let victim_dir = dir.path().join("cache");
        std::fs::create_dir_all(&victim_dir).unwrap();
        let victim = victim_dir.join("x");
        std::fs::write(&victim, "keep me").unwrap();
        let hostile = [
            "../../../cache/x",
            "../../../cache/y",
            "/etc/../../cache/x",
            "..",
            ".",
            "a/../../../../cache/x",
        ];
        let mut vars: Vec<Var> = hostile
            .iter()
            .map(|k| Var {
                key: k.to_string(),
                value: "overwritten".into(),
                file: true,
                ..Default::default()
            })
            .collect();
        vars.push(Var {
            key: "GOOD".into(),
            value: "fine".into(),
            file: true,
            ..Default::default()
        });
        let vars = VarList {
            vars,
            tmp_dir: tmp.display().to_string(),
        };
        for k in hostile {
            assert_eq!(vars.file_path(k), None, "{k}");
            assert_eq!(vars.value(k), None, "{k}");
        }
        let paths = JobPaths {
            root_dir: root.display().to_string(),
            build_dir: root.join("g/p").display().to_string(),
            tmp_dir: tmp.display().to_string(),
            cache_dir: victim_dir.display().to_string(),
        };
        let run = |script: String| {
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(script)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        let step = step_script(&vars, &paths, None, &["cat \"$GOOD\"".into()], None, false);
        std::fs::create_dir_all(&paths.build_dir).unwrap();
        let err = run(step.finish(false));
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "keep me",
            "{err}"
        );
        assert!(!victim_dir.join("y").exists());
        assert!(tmp.join("GOOD").exists());
        let cleanup = cleanup_file_variables(
            &vars,
            &paths,
            None,
            crate::executor::script::sources::GitCleanup {
                submodules: true,
                configs: true,
            },
        );
        let err = run(cleanup.finish(false));
        assert!(
            victim.exists(),
            "clean-up deleted a file outside the tmp dir: {err}"
        );
        assert!(!tmp.join("GOOD").exists(), "{err}");
        for env in vars.env() {
            assert!(!env.contains("cache/"), "{env}");
        }
    }
}
