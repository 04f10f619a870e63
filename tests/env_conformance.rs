//! Conformance of the job's environment with gitlab-runner's own unit-test tables (variables,
//! feature flags, the protected ref, build settings, git credentials rewrites, service
//! variables, the protected cache fallback guard, the build dir rules). Every case is a row of
//! our own: its inputs and the outcome upstream's table expects, checked against drover's pure
//! functions. Prints `env conformance: N cases, A agree, K deliberate differences` and fails on
//! any disagreement that is not listed in [`DELIBERATE`].

use drover::executor::build_settings::BuildSettings;
use drover::executor::plan::{plan_job, ref_protected};
use drover::executor::script::cache::{self, CacheInputs, LocalOnly};
use drover::executor::script::sources::GitAuth;
use drover::executor::script::variables::{loose_bool, Var, VarList};
use drover::executor::services;
use drover::executor::settings::ServiceSettings;
use drover::executor::{RunnerSettings, Slot};
use drover::job::JobPayload;
use serde_json::{json, Value};

/// Upstream cases drover handles differently on purpose: (table, case, reason). Each reason
/// is in README.md "What differs" and CHANGELOG.md.
const DELIBERATE: &[(&str, &str, &str)] = &[];

/// One case: which upstream table, which row, and whether drover agrees (`Err`: how not).
struct Case {
    table: &'static str,
    name: String,
    outcome: Result<(), String>,
}

fn check(
    cases: &mut Vec<Case>,
    table: &'static str,
    name: impl Into<String>,
    f: impl FnOnce() -> Result<(), String>,
) {
    cases.push(Case {
        table,
        name: name.into(),
        outcome: f(),
    });
}

fn eq<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

fn var(key: &str, value: &str) -> Var {
    Var {
        key: key.into(),
        value: value.into(),
        ..Default::default()
    }
}

fn list(vars: Vec<Var>, tmp: &str) -> VarList {
    VarList {
        vars,
        tmp_dir: tmp.into(),
    }
}

fn payload(v: Value) -> JobPayload {
    let mut base = json!({
        "id": 1234, "token": "job-token",
        "job_info": {"project_id": 1234, "name": "job"},
        "git_info": {"repo_url": "https://gitlab-ci-token:job-token@gitlab.example.com/g/p.git",
                     "sha": "0123456789abcdef", "ref": "main"},
        "runner_info": {"timeout": 3600},
    });
    if let (Some(b), Some(extra)) = (base.as_object_mut(), v.as_object()) {
        for (k, v) in extra {
            b.insert(k.clone(), v.clone());
        }
    }
    JobPayload::from_json(&base.to_string()).expect("payload")
}

fn job_vars(vars: &[(&str, &str)]) -> Value {
    Value::Array(
        vars.iter()
            .map(|(k, v)| json!({"key": k, "value": v, "public": true}))
            .collect(),
    )
}

fn runner() -> RunnerSettings {
    let mut r = RunnerSettings {
        token: "glrt-conformance01".into(),
        executor: "docker".into(),
        url: "https://gitlab.example.com".into(),
        ..Default::default()
    };
    r.docker.image = "alpine:3".into();
    r
}

/// The resolved job variables of a payload on a runner.
fn planned(p: &JobPayload, r: &RunnerSettings) -> Result<VarList, String> {
    plan_job(p, r, Slot::default())
        .map(|plan| plan.vars)
        .map_err(|e| e.message)
}

fn variables_tables(cases: &mut Vec<Case>) {
    const T: &str = "common/spec/variables_test.go";
    check(cases, T, "VariablesExpansion", || {
        let l = list(
            vec![
                var("key", "value_of_$public"),
                var("public", "some_value"),
                var("private", "value_of_${public}"),
                var("public", "value_of_$undefined"),
            ],
            "/t",
        )
        .expanded();
        eq(
            "key",
            l.value("key"),
            Some("value_of_value_of_$undefined".into()),
        )?;
        eq("public", l.value("public"), Some("value_of_".into()))?;
        eq(
            "private",
            l.value("private"),
            Some("value_of_value_of_$undefined".into()),
        )?;
        eq(
            "expand",
            l.expand("${public} ${private}"),
            "value_of_ value_of_value_of_$undefined".into(),
        )
    });
    check(cases, T, "FileVariablesExpansion", || {
        let mut file = var("a_file_var", "some top secret stuff");
        file.file = true;
        let all = list(
            vec![
                file,
                var("ref_file_var", "${a_file_var}.txt"),
                var("regular_var", "bla bla bla"),
                var("ref_regular_var", "bla bla bla"),
            ],
            "/foo/bar",
        );
        for l in [all.expanded(), all.expanded().expanded()] {
            eq(
                "path",
                l.value("a_file_var"),
                Some("/foo/bar/a_file_var".into()),
            )?;
            eq(
                "content",
                l.get("a_file_var").map(|v| v.value.clone()),
                Some("some top secret stuff".into()),
            )?;
            eq(
                "ref",
                l.value("ref_file_var"),
                Some("/foo/bar/a_file_var.txt".into()),
            )?;
            eq(
                "expand ref",
                l.expand("${ref_file_var}.blammo"),
                "/foo/bar/a_file_var.txt.blammo".into(),
            )?;
            eq(
                "expand file",
                l.expand("${a_file_var}.blammo"),
                "/foo/bar/a_file_var.blammo".into(),
            )?;
            eq(
                "regular",
                l.value("ref_regular_var"),
                Some("bla bla bla".into()),
            )?;
        }
        Ok(())
    });
    check(cases, T, "SpecialVariablesExpansion", || {
        let l = list(
            vec![
                var("key", "$$"),
                var("key2", "$/dsa"),
                var("key3", "aa$@bb"),
                var("key4", "aa${@}bb"),
            ],
            "/t",
        )
        .expanded();
        eq("$$", l.value("key"), Some("$".into()))?;
        eq("$/", l.value("key2"), Some("$/dsa".into()))?;
        eq("$@", l.value("key3"), Some("aabb".into()))?;
        eq("${@}", l.value("key4"), Some("aabb".into()))
    });
    for (name, values, want) in [
        ("defined at job level", vec!["from-job"], "from-job"),
        (
            "defined at default and job level",
            vec!["from-default", "from-job"],
            "from-job",
        ),
        (
            "defined at config, default and job level",
            vec!["from-config", "from-default", "from-job"],
            "from-job",
        ),
        (
            "defined at config and default level",
            vec!["from-config", "from-default"],
            "from-default",
        ),
        (
            "defined at config level",
            vec!["from-config"],
            "from-config",
        ),
    ] {
        check(cases, T, format!("MultipleUsageOfAKey/{name}"), || {
            let l = list(values.iter().map(|v| var("key", v)).collect(), "/t");
            eq("key", l.value("key"), Some(want.into()))
        });
    }
    for (raw, want) in [(true, "value_of_${base}"), (false, "value_of_base_value")] {
        check(cases, T, format!("RawVariableExpansion/raw-{raw}"), || {
            let mut related = var("related", "value_of_${base}");
            related.raw = raw;
            let l = list(vec![var("base", "base_value"), related], "/t").expanded();
            eq("related", l.value("related"), Some(want.into()))
        });
    }
    for (value, want) in [
        ("true", true),
        ("TRUE", true),
        ("tRuE", true),
        ("false", false),
        ("FALSE", false),
        ("fAlsE", false),
        ("1", true),
        ("-1", false),
        ("0", false),
        ("100", false),
        ("", false),
        ("something else", false),
    ] {
        check(cases, T, format!("BoolVariables/{value:?}"), || {
            eq(value, loose_bool(value), want)
        });
    }
    let dedup = || {
        list(
            vec![
                var("foo-key", "foo"),
                var("some-key", "this is the original"),
                var("bar-key", "bar"),
                var("some-key", "this is unused"),
                var("baz-key", "baz"),
                var("some-key", "this is overridden"),
                var("blerp-key", "blerp"),
            ],
            "/t",
        )
    };
    check(cases, T, "JobVariables_Dedup/keep overridden", || {
        let l = dedup();
        let mut got: Vec<(String, String)> = l
            .unique()
            .into_iter()
            .map(|v| (v.key.clone(), v.value.clone()))
            .collect();
        got.sort();
        eq(
            "dedup",
            got,
            [
                ("bar-key", "bar"),
                ("baz-key", "baz"),
                ("blerp-key", "blerp"),
                ("foo-key", "foo"),
                ("some-key", "this is overridden"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        )
    });
    check(cases, T, "JobVariables_Dedup/keep original", || {
        eq(
            "first",
            dedup().first("some-key").map(|v| v.value.clone()),
            Some("this is the original".into()),
        )
    });
}

fn build_tables(cases: &mut Vec<Case>) {
    const T: &str = "common/build_test.go";
    let protected = "CI_COMMIT_REF_PROTECTED";
    for (name, git_info, vars, want) in [
        ("no config", None, vec![], false),
        (
            "non-protected via GitInfo",
            Some(false),
            vec![(protected, "true")],
            false,
        ),
        (
            "protected via GitInfo",
            Some(true),
            vec![(protected, "false")],
            true,
        ),
        (
            "non-protected via JobVariables",
            None,
            vec![(protected, "false")],
            false,
        ),
        (
            "protected via JobVariables",
            None,
            vec![(protected, "true")],
            true,
        ),
        (
            "non-protected via JobVariables, multiple vars",
            None,
            vec![(protected, "false"), (protected, "true")],
            false,
        ),
        (
            "protected via JobVariables, multiple vars",
            None,
            vec![(protected, "true"), (protected, "false")],
            true,
        ),
    ] {
        check(cases, T, format!("BuildIsProtected/{name}"), || {
            let p = payload(json!({
                "git_info": {"repo_url": "https://h/g/p.git", "sha": "0", "ref": "main",
                             "protected": git_info},
                "variables": job_vars(&vars),
            }));
            let vars = planned(&p, &runner())?;
            eq("protected", ref_protected(&p, &vars), want)
        });
    }

    // Feature flags, with FF_TEST_FEATURE (default false) as upstream's tables use.
    let ff = "FF_TEST_FEATURE";
    let flag = |config: Option<bool>, environment: &[&str], job: Option<&str>| {
        let mut r = runner();
        if let Some(c) = config {
            r.feature_flags.insert(ff.into(), c);
        }
        r.environment = environment.iter().map(|e| e.to_string()).collect();
        let vars: Vec<(&str, &str)> = job.map(|v| vec![(ff, v)]).unwrap_or_default();
        let p = payload(json!({"variables": job_vars(&vars)}));
        planned(&p, &r).map(|l| l.flag(ff))
    };
    for (name, value, config, want) in [
        ("no value", "", None, false),
        ("true", "true", None, true),
        ("1", "1", None, true),
        ("false", "false", None, false),
        ("0", "0", None, false),
        ("invalid value", "test", None, false),
        (
            "feature flag set inside config.toml take precedence",
            "false",
            Some(true),
            true,
        ),
    ] {
        check(cases, T, format!("IsFeatureFlagOn/{name}"), || {
            eq(name, flag(config, &[], Some(value))?, want)
        });
    }
    for (name, env, want) in [
        ("it has default value of FF", "", false),
        ("it enables FF", "FF_NETWORK_PER_BUILD=true", true),
        ("it disable FF", "FF_NETWORK_PER_BUILD=false", false),
    ] {
        check(
            cases,
            T,
            format!("IsFeatureFlagOn_SetWithRunnerVariables/{name}"),
            || {
                let mut r = runner();
                r.environment = vec![env.to_string()];
                let l = planned(&payload(json!({})), &r)?;
                eq(name, l.flag("FF_NETWORK_PER_BUILD"), want)
            },
        );
    }
    check(
        cases,
        T,
        "IsFeatureFlagOn_Precedence/config over job variable",
        || eq("flag", flag(Some(true), &[], Some("false"))?, true),
    );
    check(
        cases,
        T,
        "IsFeatureFlagOn_Precedence/config over environment",
        || {
            eq(
                "flag",
                flag(Some(true), &["FF_TEST_FEATURE=false"], None)?,
                true,
            )
        },
    );
    check(
        cases,
        T,
        "IsFeatureFlagOn_Precedence/job variable over environment",
        || {
            eq(
                "flag",
                flag(None, &["FF_TEST_FEATURE=false"], Some("true"))?,
                true,
            )
        },
    );

    for (value, want) in [("", 1), ("3", 3), ("0", 1), ("99", 10)] {
        check(
            cases,
            T,
            format!("Build_GetExecutorJobSectionAttempts/{value:?}"),
            || {
                let l = list(vec![var("EXECUTOR_JOB_SECTION_ATTEMPTS", value)], "/t");
                let (s, _) = BuildSettings::from_variables(&l, false);
                eq("attempts", s.section_attempts, want)
            },
        );
    }

    for (name, value, want) in [
        ("variable not set", None, false),
        ("variable empty", Some(""), false),
        ("variable set to true", Some("true"), true),
        ("variable set to false", Some("false"), false),
        ("variable set to 1", Some("1"), true),
        ("variable set to 0", Some("0"), false),
    ] {
        check(
            cases,
            T,
            format!("Build_IsLFSSmudgeDisabled/{name}"),
            || {
                let vars = value
                    .map(|v| vec![var("GIT_LFS_SKIP_SMUDGE", v)])
                    .unwrap_or_default();
                let (s, _) = BuildSettings::from_variables(&list(vars, "/t"), false);
                eq("disabled", s.lfs_skip_smudge_set, want)
            },
        );
    }

    for (name, value, disabled, want, log) in [
        ("variable not set", None, false, false, None),
        ("variable set to false", Some("false"), false, false, None),
        ("variable set to true", Some("true"), false, true, None),
        (
            "variable set to a non-bool value",
            Some("xyz"),
            false,
            false,
            None,
        ),
        (
            "variable set to true and feature disabled from configuration",
            Some("true"),
            true,
            false,
            Some("CI_DEBUG_TRACE: usage is disabled on this Runner"),
        ),
    ] {
        check(cases, T, format!("DebugTrace/{name}"), || {
            let mut r = runner();
            r.debug_trace_disabled = disabled;
            let vars: Vec<(&str, &str)> = value
                .map(|v| vec![("CI_DEBUG_TRACE", v)])
                .unwrap_or_default();
            let plan = plan_job(
                &payload(json!({"variables": job_vars(&vars)})),
                &r,
                Slot::default(),
            )
            .map_err(|e| e.message)?;
            eq("enabled", plan.settings.debug_trace, want)?;
            match log {
                Some(l) if !plan.warnings.iter().any(|w| w == l) => {
                    Err(format!("{l:?} not among {:?}", plan.warnings))
                }
                _ => Ok(()),
            }
        });
    }

    for (name, value, want) in [
        ("not defined", None, Some(vec![])),
        ("empty", Some(""), Some(vec![])),
        (
            "select submodule 1",
            Some("submodule1"),
            Some(vec!["submodule1"]),
        ),
        (
            "select submodule 1 and 2",
            Some("submodule1 submodule2"),
            Some(vec!["submodule1", "submodule2"]),
        ),
        (
            "select submodule 1 and exclude 2",
            Some("submodule1 :(exclude)submodule2"),
            Some(vec!["submodule1", ":(exclude)submodule2"]),
        ),
        (
            "exclude submodule 1",
            Some(" :(exclude)submodule1"),
            Some(vec![":(exclude)submodule1"]),
        ),
        (
            "exclude submodule 1 and 2",
            Some(" :(exclude)submodule1 :(exclude)submodule2 "),
            Some(vec![":(exclude)submodule1", ":(exclude)submodule2"]),
        ),
        (
            "exclude submodule with single space",
            Some(":(exclude) gitlab-grack"),
            None,
        ),
        (
            "exclude submodule with multiple spaces",
            Some(":(exclude)  gitlab-grack"),
            None,
        ),
    ] {
        check(cases, T, format!("GitSubmodulePaths/{name}"), || {
            let vars = value
                .map(|v| vec![var("GIT_SUBMODULE_PATHS", v)])
                .unwrap_or_default();
            let (s, _) = BuildSettings::from_variables(&list(vars, "/t"), false);
            let got = s.submodule_pathspec().ok().map(|p| p.to_vec());
            let want = want.map(|w| w.iter().map(|p| p.to_string()).collect::<Vec<_>>());
            eq("pathspec", got, want)
        });
    }

    // GetInsteadOfs, the authenticated rows (FF_GIT_URLS_WITHOUT_TOKENS is not implemented:
    // its two rows are not applicable).
    let rewrite = |force_https: bool, port: &'static str| {
        GitAuth {
            credentials_url: "https://test.local",
            token: "job-token",
            force_https,
            ssh_host: "test.local",
            ssh_port: port,
            ..Default::default()
        }
        .instead_ofs()
    };
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let authed = "https://gitlab-ci-token:job-token@test.local";
    check(
        cases,
        T,
        "GetInsteadOfs/authenticated basic rewrite",
        || {
            eq(
                "rewrites",
                rewrite(false, ""),
                pairs(&[(authed, "https://test.local")]),
            )
        },
    );
    check(
        cases,
        T,
        "GetInsteadOfs/authenticated with force HTTPS",
        || {
            eq(
                "rewrites",
                rewrite(true, ""),
                pairs(&[
                    (authed, "https://test.local"),
                    (&format!("{authed}/"), "git@test.local:"),
                    (authed, "ssh://git@test.local"),
                ]),
            )
        },
    );
    check(
        cases,
        T,
        "GetInsteadOfs/feature flag controls server port wiring",
        || {
            eq(
                "rewrites",
                rewrite(true, "8022"),
                pairs(&[
                    (authed, "https://test.local"),
                    (authed, "ssh://git@test.local:8022"),
                ]),
            )
        },
    );

    // GetServiceVariables and its chain test.
    let service_env = |job: Value, service: Value| -> Result<Vec<String>, String> {
        let p = payload(json!({"variables": job, "services": [service]}));
        let vars = planned(&p, &runner())?;
        let defs = services::definitions(&ServiceSettings::default(), &p.services, &vars)
            .map_err(|e| e.message)?;
        let def = defs.first().ok_or("no service")?;
        Ok(services::service_env(&vars, def))
    };
    let svc = |vars: Value| json!({"name": "postgres:16", "variables": vars});
    let keys = |env: &[String]| -> Vec<String> {
        env.iter()
            .filter_map(|e| e.split_once('=').map(|(k, _)| k.to_string()))
            .collect()
    };
    let has = |env: &[String], entry: &str| -> Result<(), String> {
        if env.iter().any(|e| e == entry) {
            Ok(())
        } else {
            Err(format!("{entry} missing"))
        }
    };
    check(
        cases,
        T,
        "GetServiceVariables/public job variables are passed to the service",
        || {
            let env = service_env(
                json!([{"key": "PUBLIC", "value": "public-value", "public": true}]),
                svc(json!([])),
            )?;
            has(&env, "PUBLIC=public-value")
        },
    );
    check(
        cases,
        T,
        "GetServiceVariables/non-public job variables are not passed to the service",
        || {
            let env = service_env(
                json!([{"key": "SECRET", "value": "secret-value"}]),
                svc(json!([])),
            )?;
            eq(
                "SECRET present",
                keys(&env).contains(&"SECRET".into()),
                false,
            )
        },
    );
    check(
        cases,
        T,
        "GetServiceVariables/service variables referencing public job variables are expanded",
        || {
            let env = service_env(
                json!([{"key": "GLOBAL", "value": "from-global", "public": true}]),
                svc(json!([{"key": "SERV_GLOBAL", "value": "$GLOBAL"}])),
            )?;
            has(&env, "SERV_GLOBAL=from-global")
        },
    );
    check(
        cases,
        T,
        "GetServiceVariables/service variables referencing non-public job variables are expanded",
        || {
            let env = service_env(
                json!([{"key": "DOTENV", "value": "from-dotenv"}]),
                svc(json!([{"key": "SERV_DOTENV", "value": "$DOTENV"}])),
            )?;
            has(&env, "SERV_DOTENV=from-dotenv")?;
            eq(
                "DOTENV present",
                keys(&env).contains(&"DOTENV".into()),
                false,
            )
        },
    );
    check(
        cases,
        T,
        "GetServiceVariables/raw service variables are not expanded",
        || {
            let env = service_env(
                json!([{"key": "DOTENV", "value": "from-dotenv"}]),
                svc(json!([{"key": "SERV_RAW", "value": "$DOTENV", "raw": true}])),
            )?;
            has(&env, "SERV_RAW=$DOTENV")
        },
    );
    check(
        cases,
        T,
        "GetServiceVariablesDoesNotExposeNonPublicViaChain",
        || {
            let job = json!([
                {"key": "DB_PASSWORD", "value": "secret", "masked": true},
                {"key": "DB_URL", "value": "postgres://user:$DB_PASSWORD@host/db"},
                {"key": "CONN", "value": "$DB_URL", "public": true}
            ]);
            let env = service_env(job.clone(), svc(json!([])))?;
            let conn = env
                .iter()
                .find_map(|e| e.strip_prefix("CONN="))
                .ok_or("CONN missing")?
                .to_string();
            eq("secret in CONN", conn.contains("secret"), false)?;
            let p = payload(json!({"variables": job}));
            eq(
                "same as job",
                planned(&p, &runner())?.value("CONN"),
                Some(conn),
            )
        },
    );

    // StartBuild / getCustomBuildDir: GIT_CLONE_PATH rules.
    let build_dir = |enabled: Option<bool>, clone_path: &str| {
        let mut r = runner();
        r.custom_build_dir_enabled = enabled;
        let p = payload(json!({"variables": job_vars(&[("GIT_CLONE_PATH", clone_path)])}));
        plan_job(&p, &r, Slot::default())
            .map(|plan| plan.paths.build_dir)
            .map_err(|e| e.message)
    };
    check(
        cases,
        T,
        "StartBuild/custom build dir disabled, no clone path",
        || eq("dir", build_dir(Some(false), ""), Ok("/builds/g/p".into())),
    );
    check(
        cases,
        T,
        "StartBuild/custom build dir disabled, GIT_CLONE_PATH set",
        || match build_dir(
            Some(false),
            "/builds/go/src/gitlab.com/test-namespace/test-repo",
        ) {
            Err(e) if e.contains("setting GIT_CLONE_PATH is not allowed") => Ok(()),
            other => Err(format!("want the custom_build_dir error, got {other:?}")),
        },
    );
    check(
        cases,
        T,
        "StartBuild/GIT_CLONE_PATH inside builds_dir",
        || {
            eq(
                "dir",
                build_dir(None, "/builds/go/src/gitlab.com/test-namespace/test-repo"),
                Ok("/builds/go/src/gitlab.com/test-namespace/test-repo".into()),
            )
        },
    );
    check(
        cases,
        T,
        "StartBuild/GIT_CLONE_PATH outside builds_dir",
        || match build_dir(None, "/go/src/gitlab.com/test-namespace/test-repo") {
            Err(e) if e.contains("has to be within") => Ok(()),
            other => Err(format!("want the within-builds_dir error, got {other:?}")),
        },
    );
    check(
        cases,
        T,
        "StartBuild/GIT_CLONE_PATH with .. escaping builds_dir",
        || match build_dir(
            None,
            "/builds/../go/src/gitlab.com/test-namespace/test-repo",
        ) {
            Err(e) if e.contains("has to be within") => Ok(()),
            other => Err(format!("want the within-builds_dir error, got {other:?}")),
        },
    );
}

fn cache_fallback_guard(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract.go newCacheConfig keyChecks (CACHE_FALLBACK_KEY)";
    for (raw, blocked) in [
        ("main-protected", true),
        ("main-protected/", true),
        ("main-protected\\", true),
        ("main-protected%2f", true),
        ("main-protected/.", true),
        ("main-protected.", true),
        ("main-protected ", true),
        ("main-protected-x", false),
        ("main-non_protected", false),
    ] {
        check(cases, T, format!("CACHE_FALLBACK_KEY {raw:?}"), || {
            let p = payload(json!({"cache": [{"key": "k", "paths": ["a"]}]}));
            let vars = list(vec![var("CACHE_FALLBACK_KEY", raw)], "/t");
            let paths = drover::executor::paths::JobPaths {
                root_dir: "/builds".into(),
                build_dir: "/builds/g/p".into(),
                tmp_dir: "/builds/g/p.tmp".into(),
                cache_dir: "/cache/g/p".into(),
            };
            let body = cache::restore(&CacheInputs {
                payload: &p,
                vars: &vars,
                paths: &paths,
                remote: &LocalOnly,
                timeout_minutes: 10,
            })
            .ok_or("no restore stage")?;
            let s = body.as_str();
            let tried = s
                .lines()
                .filter(|l| l.contains("Checking cache for main-"))
                .count();
            eq("fallback restored", tried > 0, !blocked)?;
            eq("warned", s.contains("not allowed to end in"), blocked)
        });
    }
}

#[test]
fn env_conformance() {
    let mut cases = Vec::new();
    variables_tables(&mut cases);
    build_tables(&mut cases);
    cache_fallback_guard(&mut cases);
    let mut agree = 0;
    let mut deliberate = 0;
    let mut failures = Vec::new();
    for c in &cases {
        match &c.outcome {
            Ok(()) => agree += 1,
            Err(why) => {
                if DELIBERATE
                    .iter()
                    .any(|(t, n, _)| *t == c.table && *n == c.name)
                {
                    deliberate += 1;
                } else {
                    failures.push(format!("{} / {}: {why}", c.table, c.name));
                }
            }
        }
    }
    println!(
        "env conformance: {} cases, {agree} agree, {deliberate} deliberate differences",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "cases that disagree with upstream:\n{}",
        failures.join("\n")
    );
    // A listed difference that now agrees must be taken off the list.
    for (t, n, _) in DELIBERATE {
        assert!(
            cases
                .iter()
                .any(|c| c.table == *t && c.name == *n && c.outcome.is_err()),
            "{t} / {n} is listed as a deliberate difference but agrees (or is gone)"
        );
    }
}
