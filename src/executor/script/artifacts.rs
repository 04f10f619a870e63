//! The artifact stages: `download_artifacts` (the dependencies' artifacts, before the user
//! steps; a failure fails the job) and `upload_artifacts_on_success` /
//! `upload_artifacts_on_failure` (one `artifacts-uploader` call per payload entry whose `when`
//! matches; a failure fails the job unless it already failed). The helper talks to GitLab from
//! the helper container with the job token (or the dependency's token). Pure.

use super::user::write_exports;
use super::variables::VarList;
use super::{quote, ScriptBody};
use crate::executor::paths::JobPaths;
use crate::job::JobPayload;

const HELPER: &str = "gitlab-runner-helper";

/// What the artifact stages need.
pub struct ArtifactInputs<'a> {
    /// The job payload.
    pub payload: &'a JobPayload,
    /// The job's variables, expanded.
    pub vars: &'a VarList,
    /// The job's paths.
    pub paths: &'a JobPaths,
    /// The runner's GitLab URL (`[[runners]] url`).
    pub url: &'a str,
}

fn stage_body(i: &ArtifactInputs<'_>) -> ScriptBody {
    let mut b = ScriptBody::new();
    write_exports(&mut b, i.vars, true);
    b.line(format!("cd {}", quote(&i.paths.build_dir)));
    b
}

/// The `download_artifacts` body, or `None` when no dependency has an artifacts file.
pub fn download(i: &ArtifactInputs<'_>) -> Option<ScriptBody> {
    let deps: Vec<_> = i
        .payload
        .dependencies
        .iter()
        .filter(|d| {
            d.artifacts_file
                .as_ref()
                .is_some_and(|f| !f.filename.is_empty())
        })
        .collect();
    if deps.is_empty() {
        return None;
    }
    let mut b = stage_body(i);
    for d in deps {
        b.line(format!("if {HELPER} --version >/dev/null 2>&1; then"));
        b.notice(&format!(
            "Downloading artifacts for {} ({})...",
            d.name, d.id
        ));
        b.line(format!(
            "{HELPER} artifacts-downloader --url {} --token {} --id {}",
            quote(i.url),
            quote(&d.token),
            d.id
        ));
        b.line("else");
        b.warning(&format!(
            "Missing {HELPER}. Artifacts downloading is disabled."
        ));
        b.line("fi");
    }
    Some(b)
}

/// The `upload_artifacts_on_success` (job succeeded) or `upload_artifacts_on_failure` body, or
/// `None` when the runner has no URL or no entry applies.
pub fn upload(i: &ArtifactInputs<'_>, job_succeeded: bool) -> Option<ScriptBody> {
    if i.url.is_empty() {
        return None;
    }
    let entries: Vec<_> = i
        .payload
        .artifacts
        .iter()
        .filter(|a| match a.when.as_str() {
            "always" => true,
            "on_failure" => !job_succeeded,
            _ => job_succeeded,
        })
        .filter(|a| !a.paths.is_empty() || !a.exclude.is_empty() || a.untracked)
        .collect();
    if entries.is_empty() {
        return None;
    }
    let mut b = stage_body(i);
    for a in entries {
        let mut cmd = format!(
            "{HELPER} artifacts-uploader --url {} --token {} --id {} --timeout 1h0m0s --response-header-timeout 10m0s",
            quote(i.url),
            quote(&i.payload.token),
            i.payload.id
        );
        // Paths, excludes and the name go as written: the helper expands them with the
        // stage's environment (GITLAB_ENV values, `${VAR:-x}`), as upstream's does.
        for p in &a.paths {
            cmd.push_str(&format!(" --path {}", quote(p)));
        }
        for p in &a.exclude {
            cmd.push_str(&format!(" --exclude {}", quote(p)));
        }
        if a.untracked {
            cmd.push_str(" --untracked");
        }
        for (flag, value) in [
            ("--name", a.name.clone()),
            ("--expire-in", a.expire_in.clone()),
            ("--artifact-format", a.artifact_format.clone()),
            ("--artifact-type", a.artifact_type.clone()),
        ] {
            if !value.is_empty() {
                cmd.push_str(&format!(" {flag} {}", quote(&value)));
            }
        }
        b.line(format!("if {HELPER} --version >/dev/null 2>&1; then"));
        b.notice("Uploading artifacts...");
        b.line(cmd);
        b.line("else");
        b.warning(&format!(
            "Missing {HELPER}. Uploading artifacts is disabled."
        ));
        b.line("fi");
    }
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> JobPaths {
        JobPaths {
            root_dir: "/builds".into(),
            build_dir: "/builds/g/p".into(),
            tmp_dir: "/builds/g/p.tmp".into(),
            cache_dir: "/cache/g/p".into(),
        }
    }

    fn payload() -> JobPayload {
        JobPayload::from_json(
            &serde_json::json!({
                "id": 7, "token": "glcbt-jobtoken",
                "artifacts": [
                    {"name": "bin", "paths": ["out/"], "exclude": ["out/*.log"], "when": "on_success",
                     "expire_in": "1 week", "artifact_type": "archive", "artifact_format": "zip"},
                    {"paths": ["report.xml"], "when": "always", "artifact_type": "junit", "artifact_format": "gzip"},
                    {"paths": ["debug/"], "when": "on_failure"},
                    {"paths": [], "when": "always"}
                ],
                "dependencies": [
                    {"id": 5, "name": "build", "token": "glcbt-dep", "artifacts_file": {"filename": "artifacts.zip", "size": 3}},
                    {"id": 6, "name": "lint", "token": "glcbt-dep2", "artifacts_file": null}
                ]
            })
            .to_string(),
        )
        .unwrap()
    }

    fn inputs<'a>(p: &'a JobPayload, vars: &'a VarList, paths: &'a JobPaths) -> ArtifactInputs<'a> {
        ArtifactInputs {
            payload: p,
            vars,
            paths,
            url: "http://gitlab",
        }
    }

    #[test]
    fn uploads_per_entry_by_when() {
        let (p, vars, paths) = (payload(), VarList::default(), paths());
        let i = inputs(&p, &vars, &paths);
        let ok = upload(&i, true).unwrap();
        let s = ok.as_str();
        assert!(s.contains("artifacts-uploader --url $'http://gitlab' --token glcbt-jobtoken --id 7 --timeout 1h0m0s --response-header-timeout 10m0s --path out/ --exclude $'out/*.log' --name bin --expire-in $'1 week' --artifact-format zip --artifact-type archive"), "{s}");
        assert!(
            s.contains("--path report.xml --artifact-format gzip --artifact-type junit"),
            "{s}"
        );
        assert!(!s.contains("debug/"), "{s}");
        let failed = upload(&i, false).unwrap();
        assert!(failed.as_str().contains("--path debug/"));
        assert!(!failed.as_str().contains("--path out/"));
        let no_url = ArtifactInputs { url: "", ..i };
        assert!(upload(&no_url, true).is_none());
    }

    #[test]
    fn downloads_only_dependencies_with_files() {
        let (p, vars, paths) = (payload(), VarList::default(), paths());
        let i = inputs(&p, &vars, &paths);
        let s = download(&i).unwrap();
        assert!(s
            .as_str()
            .contains("Downloading artifacts for build (5)..."));
        assert!(s
            .as_str()
            .contains("artifacts-downloader --url $'http://gitlab' --token glcbt-dep --id 5\n"));
        assert!(!s.as_str().contains("lint"));
    }
}
