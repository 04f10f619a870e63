//! Conformance of the job's environment with gitlab-runner's own unit-test tables (variables,
//! feature flags, the protected ref, build settings, git credentials rewrites, service
//! variables, the protected cache fallback guard, the build dir rules, cache keys and the cache
//! stages with `FF_HASH_CACHE_KEYS` on and off, the cache helper's alternate names (against a
//! local HTTP server), submodules, checkout, fetch, hooks, git clean-up, stage skipping, the
//! bash writer).
//! Every case is a row of our own: its inputs and the outcome upstream's table expects, checked
//! against drover's pure functions; where upstream compares writer calls, the generated script
//! is checked for the same commands, arguments and messages in the same order, or run in bash
//! against a scratch dir. Prints `env conformance: N cases, A agree, K deliberate differences` and fails on
//! any disagreement that is not listed in [`DELIBERATE`].

use drover::executor::build_settings::BuildSettings;
use drover::executor::plan::{plan_job, ref_protected};
use drover::executor::script::cache::{self, CacheInputs, LocalOnly};
use drover::executor::script::sources::{GitAuth, GitCleanup};
use drover::executor::script::variables::{loose_bool, Var, VarList};
use drover::executor::script::{quote, ScriptBody};
use drover::executor::services;
use drover::executor::settings::ServiceSettings;
use drover::executor::{RunnerSettings, Slot};
use drover::job::JobPayload;
use serde_json::{json, Value};

/// Upstream cases drover handles differently on purpose: (table, case, reason). Each reason
/// is in README.md "What differs" and CHANGELOG.md.
const DELIBERATE: &[(&str, &str, &str)] = &[
    (
        "shells/abstract_test.go",
        "SetupExternalConfigFile/FF_GIT_URLS_WITHOUT_TOKENS:false/default",
        "without a runner url (only `drover exec-job` without a config) the repository's host \
         still gets the job-token rewrite, so a private submodule on it authenticates",
    ),
    (
        "shells/abstract_test.go",
        "handleGetSourcesStrategy/clone strategy without native/FF_GIT_URLS_WITHOUT_TOKENS:false",
        "without a runner url (only `drover exec-job` without a config) the repository's host \
         still gets the job-token rewrite, so a private submodule on it authenticates",
    ),
];

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

    // GetInsteadOfs, with and without FF_GIT_URLS_WITHOUT_TOKENS.
    let rewrite_as = |tokenless: bool, force_https: bool, port: &'static str| {
        GitAuth {
            credentials_url: "https://test.local",
            token: "job-token",
            force_https,
            ssh_host: "test.local",
            ssh_port: port,
            tokenless,
            ..Default::default()
        }
        .instead_ofs()
    };
    let rewrite = |force_https: bool, port: &'static str| rewrite_as(false, force_https, port);
    check(
        cases,
        T,
        "GetInsteadOfs/unauthenticated no rewrites without force HTTPS",
        || eq("rewrites", rewrite_as(true, false, ""), vec![]),
    );
    check(
        cases,
        T,
        "GetInsteadOfs/unauthenticated with force HTTPS",
        || {
            eq(
                "rewrites",
                rewrite_as(true, true, ""),
                vec![
                    ("https://test.local/".into(), "git@test.local:".into()),
                    ("https://test.local".into(), "ssh://git@test.local".into()),
                ],
            )
        },
    );
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
    // The other StartBuild rows, with upstream's repository (`test-namespace/test-repo`).
    let dirs = |builds_dir: &str, enabled: Option<bool>, clone_path: &str| {
        let mut r = runner();
        r.builds_dir = Some(builds_dir.into());
        r.cache_dir = Some("/cache".into());
        r.custom_build_dir_enabled = enabled;
        let vars: Vec<(&str, &str)> = if clone_path.is_empty() {
            vec![]
        } else {
            vec![("GIT_CLONE_PATH", clone_path)]
        };
        let p = payload(json!({
            "variables": job_vars(&vars),
            "git_info": {"repo_url": "https://gitlab.com/test-namespace/test-repo.git",
                         "sha": "0123456789abcdef", "ref": "main"},
        }));
        plan_job(&p, &r, Slot::default())
            .map(|plan| (plan.paths.build_dir, plan.paths.cache_dir))
            .map_err(|e| e.message)
    };
    check(
        cases,
        T,
        "StartBuild/no job specific build dir with no shared dir",
        || {
            eq(
                "dirs",
                dirs("/build", Some(true), ""),
                Ok((
                    "/build/test-namespace/test-repo".into(),
                    "/cache/test-namespace/test-repo".into(),
                )),
            )
        },
    );
    check(
        cases,
        T,
        "StartBuild/valid GIT_CLONE_PATH using CI_BUILDS_DIR was specified",
        || {
            eq(
                "dirs",
                dirs(
                    "/builds",
                    Some(true),
                    "$CI_BUILDS_DIR/go/src/gitlab.com/test-namespace/test-repo",
                ),
                Ok((
                    "/builds/go/src/gitlab.com/test-namespace/test-repo".into(),
                    "/cache/test-namespace/test-repo".into(),
                )),
            )
        },
    );
    check(cases, T, "StartBuild/safeDirectoryCheckout enabled", || {
        eq(
            "dirs",
            dirs("/builds", Some(false), ""),
            Ok((
                "/builds/test-namespace/test-repo".into(),
                "/cache/test-namespace/test-repo".into(),
            )),
        )?;
        // The docker executor always checks out with the project dir a safe directory.
        let body = SourcesJob {
            vars: vec![var("GIT_STRATEGY", "fetch")],
            ..Default::default()
        }
        .body();
        in_order(
            &body,
            &[Step::Cmd(words(&[
                "git",
                "config",
                "--global",
                "--add",
                "safe.directory",
                "/builds/g/p",
            ]))],
        )
    });
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

/// `cache/cachekey` Sanitize: (input, key upstream gives; `None`: refused).
const SANITIZE: &[(&str, Option<&str>)] = &[
    ("", Some("")),
    ("fallback_key", Some("fallback_key")),
    ("some-job/some-ref", Some("some-job/some-ref")),
    (".../....", Some(".../....")),
    ("...", Some("...")),
    ("fallback_key/", Some("fallback_key")),
    ("fallback_key ", Some("fallback_key")),
    ("fallback_key\\", Some("fallback_key")),
    ("fallback_key/ \\", Some("fallback_key")),
    ("fallback_key/ / \\  \\", Some("fallback_key")),
    ("fallback_key/o", Some("fallback_key/o")),
    ("fallback_key / \\o", Some("fallback_key / /o")),
    ("\t foo bar \t\r", Some("\t foo bar")),
    (" foo / bar ", Some(" foo / bar")),
    ("foo\r", Some("foo")),
    ("foo\t", Some("foo")),
    ("foo \t \r ", Some("foo")),
    ("\\", None),
    ("\\.", None),
    ("/", None),
    (" ", None),
    (".", None),
    ("..", None),
    (" / ", None),
    ("//", None),
    ("//\\", None),
    ("../.", None),
    ("foo\\bar\\..\\..", None),
    ("foo/bar/../..", None),
    (" \t\r\n", None),
    ("something %2F something", Some("something / something")),
    ("something %2f something", Some("something / something")),
    ("some%2f../job/some/ref/.", Some("job/some/ref")),
    ("%2E", None),
    ("%2E%2E", None),
    ("%2E%2E%2E", Some("...")),
    ("%2e", None),
    ("%2e%2E", None),
    (".%2E", None),
    ("%2e.", None),
    ("%2E%2e%2E", Some("...")),
    ("%5C", Some("%5C")),
    ("%5c", Some("%5c")),
    ("foo/./bar", Some("foo/bar")),
    ("foo/blipp/../bar", Some("foo/bar")),
    ("/foo/bar", Some("foo/bar")),
    ("//foo/bar", Some("foo/bar")),
    ("./foo/bar", Some("foo/bar")),
    ("../foo/bar", Some("foo/bar")),
    (".../foo/bar", Some(".../foo/bar")),
    ("foo/bar/..", Some("foo")),
    ("foo/bar/../../../.././blerp", Some("blerp")),
    ("a/b/c/../../d", Some("a/d")),
    ("job\\name/git\\ref", Some("job/name/git/ref")),
    ("foo\\.\\bar", Some("foo/bar")),
    ("foo\\blipp\\..\\bar", Some("foo/bar")),
    ("\\foo\\bar", Some("foo/bar")),
    ("\\\\foo\\bar", Some("foo/bar")),
    (".\\foo\\bar", Some("foo/bar")),
    ("..\\foo\\bar", Some("foo/bar")),
    ("...\\foo\\bar", Some(".../foo/bar")),
    ("foo\\bar\\..", Some("foo")),
    ("foo\\bar\\..\\..\\..\\..\\.\\blerp", Some("blerp")),
    ("foo/ /bar", Some("foo/ /bar")),
    ("foo/ /", Some("foo")),
    ("foo/ / /", Some("foo")),
];

fn cache_key_tables(cases: &mut Vec<Case>) {
    const T: &str = "cache/cachekey/cachekey_test.go";
    for (raw, want) in SANITIZE {
        check(cases, T, format!("Sanitize/{raw:?}"), || {
            match (cache::sanitize_key(raw), want) {
                (Ok(got), Some(w)) => eq("key", got.as_str(), *w),
                (Err(e), None) => eq(
                    "error",
                    e,
                    format!("cache key {raw:?} could not be sanitized"),
                ),
                (got, _) => Err(format!("got {got:?}, want {want:?}")),
            }
        });
    }
    for raw in [
        "a",
        "a/b",
        "../a",
        "a/../b",
        "a/./b",
        "a\\b",
        "a\\..\\\\b",
        "/a/b/",
        " a ",
        "...",
        "%2e%2e/%2f",
        "a/b/c/../../d/e",
    ] {
        check(cases, T, format!("SanitizeInvariants/{raw:?}"), || {
            let Ok(key) = cache::sanitize_key(raw) else {
                return Ok(());
            };
            let segments: Vec<&str> = key.split('/').collect();
            let broken = [
                ("starts with /", key.starts_with('/')),
                ("starts with ..", key == ".." || key.starts_with("../")),
                ("has a backslash", key.contains('\\')),
                ("ends with a space", key.ends_with(' ')),
                ("ends with /", key.ends_with('/')),
                (
                    "has a . or .. segment",
                    segments.contains(&".") || segments.contains(&".."),
                ),
            ];
            match broken.iter().find(|(_, b)| *b) {
                Some((what, _)) => Err(format!("{key:?} {what}")),
                None => Ok(()),
            }
        });
    }
    for raw in [
        "fallback_key",
        "some-job/some-ref",
        "a/b/c",
        "...",
        ".../foo/bar",
    ] {
        check(cases, T, format!("SanitizeIdempotent/{raw:?}"), || {
            let first = cache::sanitize_key(raw)?;
            eq("second pass", cache::sanitize_key(&first)?, first)
        });
    }
}

/// upstream's `test` cache adapter, as a fake: URLs under `test://…/project/1000/<object>`,
/// none for an object whose name leaves `project/1000/` (upstream's adapter check).
struct TestRemote;

/// Whether upstream names an object `object` of project 1000 (joined as a path, it stays
/// below `project/1000/`).
fn inside_project(object: &str) -> bool {
    resolve("/project/1000", object).starts_with("/project/1000/")
}

impl cache::Remote for TestRemote {
    fn download(&self, object: &str) -> Option<cache::Download> {
        inside_project(object).then(|| cache::Download {
            url: format!("test://download/project/1000/{object}"),
            head_url: Some(format!("test://head/project/1000/{object}")),
        })
    }
    fn upload(&self, object: &str, key: &str) -> Option<cache::Upload> {
        inside_project(object).then(|| cache::Upload {
            url: format!("test://upload/project/1000/{object}"),
            headers: vec![
                "Header-1: a value".into(),
                format!("X-Fakecloud-Meta-Cachekey: {key}"),
            ],
            check_url: Some(format!("test://head/project/1000/{object}")),
        })
    }
}

/// upstream's test hasher: the hex SHA-256 of a key (computed here, not with drover's).
fn sha_hex(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A key's (primary, alternate) names and objects with `FF_HASH_CACHE_KEYS` on or off:
/// the hashed name is stored under its first two characters.
struct Named {
    primary: String,
    primary_object: String,
    alternate: String,
    alternate_object: String,
}

fn named(key: &str, hashed: bool) -> Named {
    let hash = sha_hex(key);
    let sharded = format!("{}/{hash}", &hash[..2]);
    if hashed {
        Named {
            primary: hash,
            primary_object: sharded,
            alternate: key.to_string(),
            alternate_object: key.to_string(),
        }
    } else {
        Named {
            primary: key.to_string(),
            primary_object: key.to_string(),
            alternate: hash,
            alternate_object: sharded,
        }
    }
}

/// The `echo` lines of a body, sorted: what the trace shows, whatever the order of the ifs.
fn echoes(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .lines()
        .filter(|l| l.starts_with("echo "))
        .map(String::from)
        .collect();
    v.sort();
    v
}

/// The echo lines `f` writes, sorted.
fn expected_echoes(f: impl FnOnce(&mut ScriptBody)) -> Vec<String> {
    let mut b = ScriptBody::new();
    f(&mut b);
    echoes(b.as_str())
}

/// One cache stage of upstream's fixtures: job `some-job-name` on `some-ref-name`, builds in
/// `/builds`, cache in `/cache`, one entry with two paths.
struct CacheJob<'a> {
    /// `FF_HASH_CACHE_KEYS`.
    hashed: bool,
    /// No distributed cache (else upstream's `test` adapter).
    local: bool,
    key: &'a str,
    policy: &'a str,
    fallback_keys: &'a [&'a str],
    vars: Vec<Var>,
    job: &'a str,
    git_ref: &'a str,
    build_dir: &'a str,
    cache_dir: &'a str,
}

impl Default for CacheJob<'_> {
    fn default() -> Self {
        CacheJob {
            hashed: false,
            local: false,
            key: "",
            policy: "pull-push",
            fallback_keys: &[],
            vars: vec![],
            job: "some-job-name",
            git_ref: "some-ref-name",
            build_dir: "/builds",
            cache_dir: "/cache",
        }
    }
}

impl CacheJob<'_> {
    /// The stage's body: restore, or archive of a successful job (`when: always`).
    fn body(&self, restore: bool) -> Result<String, String> {
        let p = payload(json!({
            "job_info": {"project_id": 1000, "name": self.job},
            "git_info": {"repo_url": "https://h/g/p.git", "sha": "0", "ref": self.git_ref},
            "cache": [{"key": self.key, "policy": self.policy, "when": "always",
                       "paths": ["path1", "path2"], "fallback_keys": self.fallback_keys}],
        }));
        let mut vars = self.vars.clone();
        if self.hashed {
            vars.insert(0, var("FF_HASH_CACHE_KEYS", "true"));
        }
        let vars = list(vars, "/t").expanded();
        let paths = drover::executor::paths::JobPaths {
            root_dir: self.build_dir.into(),
            build_dir: self.build_dir.into(),
            tmp_dir: format!("{}.tmp", self.build_dir),
            cache_dir: self.cache_dir.into(),
        };
        let inputs = CacheInputs {
            payload: &p,
            vars: &vars,
            paths: &paths,
            remote: if self.local { &LocalOnly } else { &TestRemote },
            timeout_minutes: 10,
        };
        let body = if restore {
            cache::restore(&inputs)
        } else {
            cache::archive(&inputs, true)
        };
        body.map(|b| b.as_str().to_string())
            .ok_or_else(|| "no stage".into())
    }
}

/// What a restore must show for `keys` (tried in turn), plus `extra` messages.
fn restore_echoes(keys: &[&str], extra: impl FnOnce(&mut ScriptBody)) -> Vec<String> {
    expected_echoes(|b| {
        for k in keys {
            b.notice(&format!("Checking cache for {k}..."));
            b.notice("Successfully extracted cache");
            b.warning("Failed to extract cache");
        }
        b.warning("Missing gitlab-runner-helper. Extracting cache is disabled.");
        extra(b);
    })
}

/// The restore of `job` tries exactly `keys` with upstream's extractor arguments and shows
/// exactly the expected messages.
fn restore_agrees(
    job: &CacheJob<'_>,
    keys: &[&str],
    extra: impl FnOnce(&mut ScriptBody),
) -> Result<(), String> {
    let s = job.body(true)?;
    for k in keys {
        let n = named(k, job.hashed);
        let mut want = format!(
            "cache-extractor --file {} --timeout 10 --url {} --head-url {}",
            quote(&format!("../cache/{}/cache.zip", n.primary)),
            quote(&format!(
                "test://download/project/1000/{}",
                n.primary_object
            )),
            quote(&format!("test://head/project/1000/{}", n.primary_object)),
        );
        // The other scheme's object, when upstream's adapter names one.
        if inside_project(&n.alternate_object) {
            want.push_str(&format!(
                " --alternate-url {} --alternate-head-url {}",
                quote(&format!(
                    "test://download/project/1000/{}",
                    n.alternate_object
                )),
                quote(&format!("test://head/project/1000/{}", n.alternate_object)),
            ));
        }
        want.push_str("; then");
        if !s.contains(&want) {
            return Err(format!("{want:?} missing:\n{s}"));
        }
    }
    eq("messages", echoes(&s), restore_echoes(keys, extra))
}

fn cache_stage_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    let fallback = |v: &str| vec![var("CACHE_FALLBACK_KEY", v)];
    let not_allowed =
        |k: &str| format!("CACHE_FALLBACK_KEY {k:?} not allowed to end in \"-protected\"");
    let skipped = |b: &mut ScriptBody| {
        b.notice("Skipping cache extraction due to empty cache key");
    };
    // extractCacheWithDefaultFallbackKey, the unhashed rows of the `test` adapter.
    type Extra = Box<dyn Fn(&mut ScriptBody)>;
    let none: fn() -> Extra = || Box::new(|_: &mut ScriptBody| {});
    let warn = |w: String| -> Extra {
        Box::new(move |b: &mut ScriptBody| {
            b.warning(&w);
        })
    };
    let unsanitisable = |k: &'static str| -> Extra {
        Box::new(move |b: &mut ScriptBody| {
            b.warning(&format!("cache key {k:?} could not be sanitized"));
            skipped(b);
        })
    };
    let rows: Vec<(&str, &str, &str, Vec<&str>, Extra)> = vec![
        ("using allowed key value", "test-cache-key", "test-fallback-cache-key",
         vec!["test-cache-key", "test-fallback-cache-key"], none()),
        ("using sanitized fallback key", "test-cache-key", "hello.%2e..there  ",
         vec!["test-cache-key", "hello....there"],
         warn("cache key \"hello.%2e..there  \" sanitized to \"hello....there\"".into())),
        ("using something that looks like a windows path", "test-cache-key",
         "looks\\like\\a\\win\\path", vec!["test-cache-key", "looks/like/a/win/path"],
         warn("cache key \"looks\\\\like\\\\a\\\\win\\\\path\" sanitized to \"looks/like/a/win/path\"".into())),
        ("using path-like fallback cache key", "test-cache-key", "foo/bar/baz",
         vec!["test-cache-key", "foo/bar/baz"], none()),
        ("using invalid fallback cache key", "test-cache-key", "..",
         vec!["test-cache-key"], unsanitisable("..")),
        ("using reserved suffix", "test-cache-key", "main-protected",
         vec!["test-cache-key"], warn(not_allowed("main-protected"))),
        ("using trailing dot suffix", "test-cache-key", "main-protected.",
         vec!["test-cache-key"], warn(not_allowed("main-protected."))),
        ("empty cache key", "", "", vec!["some-job-name/some-ref-name"], none()),
        ("empty cache key, with fallback", "", "some-fallback",
         vec!["some-job-name/some-ref-name", "some-fallback"], none()),
        ("empty cache key, with invalid fallback", "", ".",
         vec!["some-job-name/some-ref-name"], unsanitisable(".")),
        ("cache:key:files", "0_project/dependencies-7ab1ff8ddd4179468d07100f16b6f19f91b645a8-non_protected", "",
         vec!["0_project/dependencies-7ab1ff8ddd4179468d07100f16b6f19f91b645a8-non_protected"], none()),
        ("cache:key:files sanitized", "0_project/foo/../dependencies-7ab1ff8ddd4179468d07100f16b6f19f91b645a8-non_protected", "",
         vec!["0_project/dependencies-7ab1ff8ddd4179468d07100f16b6f19f91b645a8-non_protected"],
         warn("cache key \"0_project/foo/../dependencies-7ab1ff8ddd4179468d07100f16b6f19f91b645a8-non_protected\" sanitized to \"0_project/dependencies-7ab1ff8ddd4179468d07100f16b6f19f91b645a8-non_protected\"".into())),
    ];
    for (name, key, fb, keys, extra) in rows {
        check(
            cases,
            T,
            format!("extractCacheWithDefaultFallbackKey/{name}"),
            || {
                let job = CacheJob {
                    key,
                    vars: fallback(fb),
                    ..Default::default()
                };
                restore_agrees(&job, &keys, extra)
            },
        );
    }
    // The same table with FF_HASH_CACHE_KEYS: keys are not sanitised (only hashed), the
    // protected guard still applies.
    let files_key = "0_project/dependencies-7ab1ff8ddd4179468d07100f16b6f19f91b645a8-non_protected";
    let files_raw =
        "0_project/foo/../dependencies-7ab1ff8ddd4179468d07100f16b6f19f91b645a8-non_protected";
    let rows: Vec<(&str, &str, &str, Vec<&str>, Extra)> = vec![
        (
            "using allowed key value",
            "test-cache-key",
            "test-fallback-cache-key",
            vec!["test-cache-key", "test-fallback-cache-key"],
            none(),
        ),
        (
            "using sanitized fallback key",
            "test-cache-key",
            "hello.%2e..there  ",
            vec!["test-cache-key", "hello.%2e..there  "],
            none(),
        ),
        (
            "using something that looks like a windows path",
            "test-cache-key",
            "looks\\like\\a\\win\\path",
            vec!["test-cache-key", "looks\\like\\a\\win\\path"],
            none(),
        ),
        (
            "using path-like fallback cache key",
            "test-cache-key",
            "foo/bar/baz",
            vec!["test-cache-key", "foo/bar/baz"],
            none(),
        ),
        (
            "using invalid fallback cache key",
            "test-cache-key",
            "..",
            vec!["test-cache-key", ".."],
            none(),
        ),
        (
            "using reserved suffix",
            "test-cache-key",
            "main-protected",
            vec!["test-cache-key"],
            warn(not_allowed("main-protected")),
        ),
        (
            "using trailing dot suffix",
            "test-cache-key",
            "main-protected.",
            vec!["test-cache-key"],
            warn(not_allowed("main-protected.")),
        ),
        (
            "empty cache key",
            "",
            "",
            vec!["some-job-name/some-ref-name"],
            none(),
        ),
        (
            "empty cache key, with fallback",
            "",
            "some-fallback",
            vec!["some-job-name/some-ref-name", "some-fallback"],
            none(),
        ),
        (
            "empty cache key, with invalid fallback",
            "",
            ".",
            vec!["some-job-name/some-ref-name", "."],
            none(),
        ),
        ("cache:key:files", files_key, "", vec![files_key], none()),
        (
            "cache:key:files sanitized",
            files_raw,
            "",
            vec![files_raw],
            none(),
        ),
    ];
    for (name, key, fb, keys, extra) in rows {
        check(
            cases,
            T,
            format!("extractCacheWithDefaultFallbackKey/FF_HASH_CACHE_KEYS:true/{name}"),
            || {
                let job = CacheJob {
                    hashed: true,
                    key,
                    vars: fallback(fb),
                    ..Default::default()
                };
                restore_agrees(&job, &keys, extra)
            },
        );
    }
    // extractCacheWithMultipleFallbackKeys, unhashed.
    let chain = [
        "test-cache-key",
        "test-fallback-cache-key-1",
        "test-fallback-cache-key-2",
    ];
    // (name, key, CACHE_FALLBACK_KEY, fallback_keys, more variables, keys tried, messages)
    type Row<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a [&'a str],
        Vec<Var>,
        Vec<&'a str>,
        Extra,
    );
    // Each row with FF_HASH_CACHE_KEYS off (the names kept from before) and on: the same
    // keys and messages.
    let rows_for = |hashed: bool| -> Vec<(bool, Row<'_>)> {
        let rows: Vec<Row<'_>> = vec![
            (
                "multiple fallback keys",
                "test-cache-key",
                "test-var-fallback-cache-key",
                &["test-fallback-cache-key-1", "test-fallback-cache-key-2"],
                vec![],
                [&chain[..], &["test-var-fallback-cache-key"]].concat(),
                none(),
            ),
            (
                "fallback keys with variables",
                "test-cache-key",
                "test-var-fallback-cache-key",
                &[
                    "test-fallback-cache-$CACHE_FALLBACK_1",
                    "test-fallback-cache-$CACHE_FALLBACK_2",
                ],
                vec![
                    var("CACHE_FALLBACK_1", "key-1"),
                    var("CACHE_FALLBACK_2", "key-2"),
                ],
                [&chain[..], &["test-var-fallback-cache-key"]].concat(),
                none(),
            ),
            (
                "protected fallback keys",
                "test-cache-key",
                "test-var-fallback-cache-key",
                &["test-fallback-protected-1", "test-fallback-protected-2"],
                vec![],
                vec![
                    "test-cache-key",
                    "test-fallback-protected-1",
                    "test-fallback-protected-2",
                    "test-var-fallback-cache-key",
                ],
                none(),
            ),
            (
                "invalid global protected fallback key",
                "test-cache-key",
                "test-var-fallback-key-protected",
                &["test-fallback-cache-key-1", "test-fallback-cache-key-2"],
                vec![],
                chain.to_vec(),
                warn(not_allowed("test-var-fallback-key-protected")),
            ),
            (
                "empty cache key",
                "",
                "",
                &[],
                vec![],
                vec!["some-job-name/some-ref-name"],
                none(),
            ),
        ];
        rows.into_iter().map(|r| (hashed, r)).collect()
    };
    let rows: Vec<(bool, Row<'_>)> = [rows_for(false), rows_for(true)]
        .into_iter()
        .flatten()
        .collect();
    for (hashed, (name, key, fb, fallback_keys, more, keys, extra)) in rows {
        let name = if hashed {
            format!("FF_HASH_CACHE_KEYS:true/{name}")
        } else {
            name.to_string()
        };
        check(
            cases,
            T,
            format!("extractCacheWithMultipleFallbackKeys/{name}"),
            || {
                let mut vars = fallback(fb);
                vars.extend(more);
                let job = CacheJob {
                    hashed,
                    key,
                    fallback_keys,
                    vars,
                    ..Default::default()
                };
                restore_agrees(&job, &keys, extra)
            },
        );
    }
    // extractCacheWithMultipleFallbackKeysWithCleanup: the same rows with
    // FF_CLEAN_UP_FAILED_CACHE_EXTRACT: after each failed try, "Removing <path>" and the
    // path removed (made writable first), before the next key.
    let rows: Vec<(bool, Row<'_>)> = [rows_for(false), rows_for(true)]
        .into_iter()
        .flatten()
        .collect();
    for (hashed, (name, key, fb, fallback_keys, more, keys, extra)) in rows {
        let name = if hashed {
            format!("FF_HASH_CACHE_KEYS:true/{name}")
        } else {
            name.to_string()
        };
        check(
            cases,
            T,
            format!("extractCacheWithMultipleFallbackKeysWithCleanup/{name}"),
            || {
                let mut vars = fallback(fb);
                vars.extend(more);
                vars.push(var("FF_CLEAN_UP_FAILED_CACHE_EXTRACT", "true"));
                let job = CacheJob {
                    hashed,
                    key,
                    fallback_keys,
                    vars,
                    ..Default::default()
                };
                let tries = keys.len();
                restore_agrees(&job, &keys, |b: &mut ScriptBody| {
                    extra(b);
                    for _ in 0..tries {
                        b.print("Removing path1");
                        b.print("Removing path2");
                    }
                })?;
                let s = job.body(true)?;
                for p in ["path1", "path2"] {
                    let removal = format!(
                        "if [ -d \"{p}\" ]; then chmod -R u+rwX \"{p}\"; fi\nrm -r -f \"{p}\"\n"
                    );
                    eq(&format!("{p} removed"), s.matches(&removal).count(), tries)?;
                }
                // Each removal sits in the failure branch, before the next key is tried (only
                // the cache part runs: no exports, no cd).
                let dir = temp_dir()?;
                std::fs::create_dir_all(dir.path().join("path1/sub"))
                    .map_err(|e| format!("making path1: {e}"))?;
                let stub = "gitlab-runner-helper() { [ \"$1\" = --version ]; }\n";
                let (code, out) = run_bash(
                    &format!(
                        "{stub}{}",
                        s.split_once("cd /builds\n").map_or("", |(_, cache)| cache)
                    ),
                    dir.path(),
                )?;
                eq("exit", code, Some(0))?;
                eq("path1 left", dir.path().join("path1").exists(), false)?;
                eq(
                    "removals printed",
                    out.matches("Removing path1").count(),
                    tries,
                )
            },
        );
    }
    // cachePolicy: both stages; a job with no name and no ref.
    for (name, key, policy, vars, err) in [
        ("using pull policy", "test-cache-key", "pull", vec![], None),
        ("using push policy", "test-cache-key", "push", vec![], None),
        (
            "using pull-push policy",
            "test-cache-key",
            "pull-push",
            vec![],
            None,
        ),
        (
            "using variable with pull-push value",
            "test-cache-key",
            "$CACHE_POLICY",
            vec![var("CACHE_POLICY", "pull-push")],
            None,
        ),
        (
            "using variable with invalid value",
            "test-cache-key",
            "$CACHE_POLICY",
            vec![var("CACHE_POLICY", "blah")],
            Some("unknown cache policy blah for test-cache-key"),
        ),
        (
            "using hardcoded value matching variable name",
            "test-cache-key",
            "CACHE_POLICY",
            vec![var("CACHE_POLICY", "pull")],
            Some("unknown cache policy CACHE_POLICY for test-cache-key"),
        ),
        ("empty key", "", "", vec![], None),
    ] {
        for (stage, restore) in [("cacheExtractor", true), ("cacheArchiver", false)] {
            let vars = vars.clone();
            check(cases, T, format!("cachePolicy/{stage}-{name}"), || {
                let job = CacheJob {
                    key,
                    policy,
                    vars,
                    job: "",
                    git_ref: "",
                    ..Default::default()
                };
                let s = job.body(restore)?;
                let failed = s.lines().any(|l| l == "exit 1");
                eq("stage fails", failed, err.is_some())?;
                match err {
                    // Upstream's text (drover adds a hint after it).
                    Some(e) => eq("message shown", s.contains(e), true),
                    None => Ok(()),
                }
            });
        }
    }
    // archiveCache_keySanitation, with FF_HASH_CACHE_KEYS off (the names kept from before)
    // and on (nothing sanitised), no distributed cache: (name, key, job, ref, key used,
    // warning) per setting.
    type Sanitation<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
    );
    let off: Vec<Sanitation<'_>> = vec![
        ("defaulted cache key", "", "some-job-name", "some-git-ref",
         Some("some-job-name/some-git-ref"), None),
        ("defaulted cache key sanitized", "", "some\\job\\name", "some/git/ref",
         Some("some/job/name/some/git/ref"),
         Some("cache key \"some\\\\job\\\\name/some/git/ref\" sanitized to \"some/job/name/some/git/ref\"")),
        ("cache key", "hola", "", "", Some("hola"), None),
        ("cache key sanitized", "this/../key/will/be\\sanitized\\  ", "", "",
         Some("key/will/be/sanitized"),
         Some("cache key \"this/../key/will/be\\\\sanitized\\\\  \" sanitized to \"key/will/be/sanitized\"")),
        ("cannot be sanitized", "/", "", "", None, Some("cache key \"/\" could not be sanitized")),
    ];
    let on: Vec<Sanitation<'_>> = vec![
        (
            "defaulted cache key",
            "",
            "some-job-name",
            "some-git-ref",
            Some("some-job-name/some-git-ref"),
            None,
        ),
        (
            "defaulted cache key sanitized",
            "",
            "some\\job\\name",
            "some/git/ref",
            Some("some\\job\\name/some/git/ref"),
            None,
        ),
        ("cache key", "hola", "", "", Some("hola"), None),
        (
            "cache key sanitized",
            "this/../key/will/be\\sanitized\\  ",
            "",
            "",
            Some("this/../key/will/be\\sanitized\\  "),
            None,
        ),
        ("cannot be sanitized", "/", "", "", Some("/"), None),
    ];
    let rows = off
        .into_iter()
        .map(|r| (false, r))
        .chain(on.into_iter().map(|r| (true, r)));
    for (hashed, (name, key, job, git_ref, want, extra)) in rows {
        let name = if hashed {
            format!("FF_HASH_CACHE_KEYS:true/{name}")
        } else {
            name.to_string()
        };
        check(
            cases,
            T,
            format!("archiveCache_keySanitation/{name}"),
            || {
                let job = CacheJob {
                    hashed,
                    local: true,
                    key,
                    job,
                    git_ref,
                    build_dir: "/some/buildDir",
                    cache_dir: "/some/cacheDir",
                    ..Default::default()
                };
                let s = job.body(false)?;
                let want_echoes = expected_echoes(|b| {
                    if let Some(w) = extra {
                        b.warning(w);
                    }
                    match want {
                        Some(k) => {
                            b.notice(&format!("Creating cache {k}..."));
                            b.notice("Created cache");
                            b.warning("Failed to create cache");
                            b.warning("Missing gitlab-runner-helper. Creating cache is disabled.");
                        }
                        None => {
                            b.notice("Skipping cache archiving due to empty cache key");
                        }
                    }
                });
                eq("messages", echoes(&s), want_echoes)?;
                if let Some(k) = want {
                    // upstream: --file ../cacheDir/<name>/cache.zip --alternate-file
                    // ../cacheDir/<other name>/cache.zip (joined and cleaned); the same files
                    // from the build dir.
                    let n = named(k, hashed);
                    let argv = archiver_calls(&s)?;
                    let [call] = &argv[..] else {
                        return Err(format!("one archiver call expected:\n{s}"));
                    };
                    let files = archiver_files(call, "/some/buildDir")?;
                    eq(
                        "files",
                        files,
                        (
                            resolve("/some/cacheDir", &format!("{}/cache.zip", n.primary)),
                            Some(resolve(
                                "/some/cacheDir",
                                &format!("{}/cache.zip", n.alternate),
                            )),
                        ),
                    )?;
                    eq(
                        "the rest",
                        &call[5..],
                        &strings(&[
                            "--timeout",
                            "10",
                            "--path",
                            "path1",
                            "--path",
                            "path2",
                            "--env-file",
                            "/some/buildDir.tmp/gitlab_runner_cache_env",
                        ])[..],
                    )?;
                    let metadata = format!("CACHE_METADATA={}", json!({ "cachekey": k }));
                    eq("metadata", s.contains(&quote(&metadata)), true)?;
                }
                Ok(())
            },
        );
    }
    write_archive_cache_rows(cases);
    // NewCacheConfig, unhashed rows: the key, the warning and the archive file.
    for (name, key, vars, want, warning) in [
        ("empty cache key", "", vec![], None, None),
        (
            "unhashed",
            "some/user/key",
            vec![],
            Some("some/user/key"),
            None,
        ),
        (
            "unhashed, and key sanitized",
            "some%2fuser%2Fkey",
            vec![],
            Some("some/user/key"),
            Some("cache key \"some%2fuser%2Fkey\" sanitized to \"some/user/key\""),
        ),
        (
            "unhashed, and sanitizing failure",
            "/",
            vec![],
            None,
            Some("cache key \"/\" could not be sanitized"),
        ),
        (
            "unhashed, user key is expanded",
            "${foo}/${bar}/baz",
            vec![var("foo", "someFoo"), var("bar", "someBar")],
            Some("someFoo/someBar/baz"),
            None,
        ),
    ] {
        check(cases, T, format!("NewCacheConfig/{name}"), || {
            let job = CacheJob {
                key,
                vars,
                job: "",
                git_ref: "",
                build_dir: "/some/build/dir",
                cache_dir: "/some/cache/dir",
                ..Default::default()
            };
            let s = job.body(true)?;
            let keys: Vec<&str> = want.into_iter().collect();
            let got = echoes(&s);
            let want_echoes = restore_echoes(&keys, |b| {
                if let Some(w) = warning {
                    b.warning(w);
                }
                if want.is_none() {
                    b.notice("Skipping cache extraction due to empty cache key");
                }
            });
            // Without a key there is no helper call and no "Missing" line.
            let want_echoes: Vec<String> = if want.is_none() {
                let missing = expected_echoes(|b| {
                    b.warning("Missing gitlab-runner-helper. Extracting cache is disabled.");
                });
                want_echoes
                    .into_iter()
                    .filter(|e| !missing.contains(e))
                    .collect()
            } else {
                want_echoes
            };
            eq("messages", got, want_echoes)?;
            if let Some(k) = want {
                // upstream: ../../cache/dir/<key>/cache.zip; the same file from the build dir.
                let file = drover::executor::script::cache::archive_file(
                    &drover::executor::paths::JobPaths {
                        root_dir: "/some/build/dir".into(),
                        build_dir: "/some/build/dir".into(),
                        tmp_dir: "/t".into(),
                        cache_dir: "/some/cache/dir".into(),
                    },
                    k,
                );
                eq(
                    "archive",
                    resolve("/some/build/dir", &file),
                    format!("/some/cache/dir/{k}/cache.zip"),
                )?;
                eq("used", s.contains(&quote(&file)), true)?;
            }
            Ok(())
        });
    }
    // NewCacheConfig, the hashed rows (not the PowerShell one): (name, key, job, ref, hashed,
    // shown key, archive file, alternate file), upstream's values.
    let d03 = "d03a852ba491ba611e907b1ef60ad5c4516a05b8f3aae6abb77f42bc60325aed";
    let f7 = "7f6da050858a8c8767cddbfdf331cbe3a0269abba1fc11fd3fa381b8851b7917";
    for (name, key, job, git_ref, hashed, shown, file, alternate) in [
        (
            "hashed, key from job",
            "",
            "some-job",
            "some-ref",
            true,
            "some-job/some-ref",
            format!("../../cache/dir/{d03}/cache.zip"),
            "../../cache/dir/some-job/some-ref/cache.zip".to_string(),
        ),
        (
            "hashed, key from user",
            "some/user/key",
            "",
            "",
            true,
            "some/user/key",
            format!("../../cache/dir/{f7}/cache.zip"),
            "../../cache/dir/some/user/key/cache.zip".to_string(),
        ),
    ] {
        check(cases, T, format!("NewCacheConfig/{name}"), || {
            let job = CacheJob {
                hashed,
                local: true,
                key,
                job,
                git_ref,
                build_dir: "/some/build/dir",
                cache_dir: "/some/cache/dir",
                ..Default::default()
            };
            let s = job.body(false)?;
            eq(
                "shown",
                s.contains(&format!("Creating cache {shown}...")),
                true,
            )?;
            let calls = archiver_calls(&s)?;
            let call = calls
                .first()
                .ok_or_else(|| format!("no archiver call:\n{s}"))?;
            eq(
                "files",
                archiver_files(call, "/some/build/dir")?,
                (
                    resolve("/some/build/dir", &file),
                    Some(resolve("/some/build/dir", &alternate)),
                ),
            )
        });
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The argument lists of the `cache-archiver` calls in a body, in order, as bash reads them.
fn archiver_calls(s: &str) -> Result<Vec<Vec<String>>, String> {
    let mut calls = Vec::new();
    for line in s.lines() {
        let Some(args) = line
            .strip_prefix("if gitlab-runner-helper cache-archiver ")
            .and_then(|l| l.strip_suffix("; then"))
        else {
            continue;
        };
        let dir = temp_dir()?;
        let (code, out) = run_bash(&format!("printf '%s\\0' cache-archiver {args}"), dir.path())?;
        eq("printing the arguments", code, Some(0))?;
        let mut argv: Vec<String> = out.split('\0').map(String::from).collect();
        argv.pop();
        calls.push(argv);
    }
    Ok(calls)
}

/// `--file` and `--alternate-file` of an archiver call (its first arguments, as upstream
/// orders them), resolved against the build dir.
fn archiver_files(call: &[String], build_dir: &str) -> Result<(String, Option<String>), String> {
    match call {
        [_, f, file, a, alternate, ..] if f == "--file" && a == "--alternate-file" => Ok((
            resolve(build_dir, file),
            Some(resolve(build_dir, alternate)),
        )),
        [_, f, file, ..] if f == "--file" => Ok((resolve(build_dir, file), None)),
        _ => Err(format!("no --file first: {call:?}")),
    }
}

/// WriteWritingArchiveCache: upstream's job with five caches (two on success, one on
/// failure, one always, one with the default key), archived after success and after failure,
/// without and with a presigned cache: every archiver call names both files, the cache's own
/// arguments, the upload (URL, the signed headers, the HEAD URL to check) and the env file.
fn write_archive_cache_rows(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    let p = payload(json!({
        "id": 1000, "token": "token",
        "job_info": {"project_id": 1000, "name": "some-job-name"},
        "git_info": {"repo_url": "https://h/g/p.git", "sha": "0", "ref": "some-git-ref"},
        "cache": [
            {"key": "cache-key1", "untracked": true, "policy": "push", "paths": ["vendor/"], "when": "on_success"},
            {"key": "cache-key1", "policy": "push", "paths": ["some/path1", "other/path2"], "when": "on_success"},
            {"key": "cache-key1", "untracked": true, "policy": "push", "paths": ["when-on-failure"], "when": "on_failure"},
            {"key": "cache-key1", "policy": "push", "paths": ["when-always"], "when": "always"},
            {"key": "", "paths": ["unset-cache-key"], "when": "always"},
        ],
    }));
    let on_success: Vec<Vec<&str>> = vec![
        vec!["--path", "vendor/", "--untracked"],
        vec!["--path", "some/path1", "--path", "other/path2"],
        vec!["--path", "when-always"],
        vec!["--path", "unset-cache-key"],
    ];
    let on_failure: Vec<Vec<&str>> = vec![
        vec!["--path", "when-on-failure", "--untracked"],
        vec!["--path", "when-always"],
        vec!["--path", "unset-cache-key"],
    ];
    for (stage, succeeded, per_cache) in [
        ("archive_cache", true, on_success),
        ("archive_cache_on_failure", false, on_failure),
    ] {
        for (kind, presigned) in [("no cache upload", false), ("pre-signed URL cache", true)] {
            let per_cache = per_cache.clone();
            check(
                cases,
                T,
                format!("WriteWritingArchiveCache/{stage}/{kind}"),
                || {
                    let vars = list(vec![], "/t").expanded();
                    let paths = drover::executor::paths::JobPaths {
                        root_dir: "/builds".into(),
                        build_dir: "/builds/p".into(),
                        tmp_dir: "/builds/p.tmp".into(),
                        cache_dir: "/cache_dir".into(),
                    };
                    let inputs = CacheInputs {
                        payload: &p,
                        vars: &vars,
                        paths: &paths,
                        remote: if presigned { &TestRemote } else { &LocalOnly },
                        timeout_minutes: 10,
                    };
                    let s = cache::archive(&inputs, succeeded)
                        .map(|b| b.as_str().to_string())
                        .ok_or("no stage")?;
                    let calls = archiver_calls(&s)?;
                    eq("archiver calls", calls.len(), per_cache.len())?;
                    let header = |h: &str| {
                        h == "Header-1: a value"
                            || h == "X-Fakecloud-Meta-Cachekey: cache-key1"
                            || h == "X-Fakecloud-Meta-Cachekey: some-job-name/some-git-ref"
                    };
                    for (call, own) in calls.iter().zip(&per_cache) {
                        let (file, alternate) = archiver_files(call, "/builds/p")?;
                        let in_cache =
                            |f: &str| f.starts_with("/cache_dir/") && f.ends_with("/cache.zip");
                        eq("--file in the cache dir", in_cache(&file), true)?;
                        eq(
                            "--alternate-file in the cache dir",
                            alternate.as_deref().is_some_and(in_cache),
                            true,
                        )?;
                        let rest = &call[5..];
                        eq(
                            "--timeout",
                            rest.get(..2),
                            Some(&strings(&["--timeout", "10"])[..]),
                        )?;
                        let rest = &rest[2..];
                        eq(
                            "the cache's own",
                            rest.get(..own.len()),
                            Some(&strings(own)[..]),
                        )?;
                        let rest = &rest[own.len()..];
                        let upload: &[String] = &rest[..rest.len().saturating_sub(2)];
                        eq(
                            "--env-file last",
                            rest.get(rest.len().saturating_sub(2)).map(String::as_str),
                            Some("--env-file"),
                        )?;
                        if !presigned {
                            eq("upload arguments", upload, &[][..])?;
                            continue;
                        }
                        match upload {
                            [u, _, h1, v1, h2, v2, c, check_url]
                                if u == "--url"
                                    && h1 == "--header"
                                    && h2 == "--header"
                                    && c == "--check-url"
                                    && header(v1)
                                    && header(v2)
                                    && check_url.starts_with("test://head/") => {}
                            _ => return Err(format!("upload arguments: {upload:?}")),
                        }
                    }
                    Ok(())
                },
            );
        }
    }
}

/// A local HTTP server for the helper rows: a request for `/<status>/<age>/<name>` is
/// answered with that status and, with 200, `Last-Modified` now (`new`) or an hour earlier
/// (`old`). Every request is recorded as `METHOD path`.
struct Fixture {
    base: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Fixture {
    fn start() -> Result<Fixture, String> {
        use std::io::{BufRead, Read, Write};
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("binding: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("local address: {e}"))?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let now = std::time::SystemTime::now();
        let date = |t: std::time::SystemTime| {
            chrono::DateTime::<chrono::Utc>::from(t)
                .format("%a, %d %b %Y %H:%M:%S GMT")
                .to_string()
        };
        let (new, old) = (date(now), date(now - std::time::Duration::from_secs(3600)));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = std::io::BufReader::new(&stream);
                let mut request = String::new();
                if reader.read_line(&mut request).is_err() {
                    continue;
                }
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        if k.eq_ignore_ascii_case("content-length") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0u8; length.min(1 << 20)];
                let _ = reader.read_exact(&mut body);
                let mut words = request.split_whitespace();
                let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                if let Ok(mut seen) = record.lock() {
                    seen.push(format!("{method} {path}"));
                }
                let mut parts = path.trim_start_matches('/').split('/');
                let status: u16 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(500);
                let modified = match parts.next() {
                    Some("old") => &old,
                    _ => &new,
                };
                let mut response =
                    format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n");
                if status == 200 {
                    response.push_str(&format!("Last-Modified: {modified}\r\n"));
                }
                response.push_str("\r\n");
                let _ = (&stream).write_all(response.as_bytes());
            }
        });
        Ok(Fixture {
            base: format!("http://{addr}"),
            seen,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| rt.block_on(f))
        .map_err(|e| format!("runtime: {e}"))
}

/// The helper's side of `FF_HASH_CACHE_KEYS` (upstream's `commands/helpers` tables).
fn helper_cache_tables(cases: &mut Vec<Case>) {
    use drover::helper::cache::{self as helper, ArchiverOptions, ExtractorOptions};
    const A: &str = "commands/helpers/cache_archiver_test.go";
    const E: &str = "commands/helpers/cache_extractor_test.go";
    // TryRenameAlternateFile: (name, alternate given, alternate is the primary, primary
    // exists, alternate exists, primary in a folder not made yet, renamed).
    for (name, given, same, primary, alternate, subdir, renamed) in [
        (
            "no alternate file set",
            false,
            false,
            false,
            false,
            false,
            false,
        ),
        (
            "alternate same as primary",
            true,
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "primary exists, alternate exists",
            true,
            false,
            true,
            true,
            false,
            false,
        ),
        (
            "primary missing, alternate missing",
            true,
            false,
            false,
            false,
            false,
            false,
        ),
        (
            "primary missing, alternate exists",
            true,
            false,
            false,
            true,
            false,
            true,
        ),
        (
            "primary missing, alternate exists, primary dir missing",
            true,
            false,
            false,
            true,
            true,
            true,
        ),
    ] {
        check(cases, A, format!("TryRenameAlternateFile/{name}"), || {
            let dir = temp_dir()?;
            let file = if subdir {
                dir.path().join("newsubdir/cache.zip")
            } else {
                dir.path().join("cache.zip")
            };
            let other = if same {
                file.clone()
            } else {
                dir.path().join("old-cache.zip")
            };
            let write = |p: &std::path::Path, what: &str| {
                std::fs::write(p, what).map_err(|e| format!("writing {}: {e}", p.display()))
            };
            if primary {
                write(&file, "primary")?;
            }
            if alternate {
                write(&other, "alternate")?;
            }
            let mut log = Vec::new();
            // `--alternate-file ""` when not given, as upstream's row.
            let given_path = if given {
                other.clone()
            } else {
                Default::default()
            };
            helper::rename_alternate(dir.path(), &file, Some(&given_path), &mut log);
            let read = |p: &std::path::Path| std::fs::read_to_string(p).ok();
            if renamed {
                eq("primary", read(&file).as_deref(), Some("alternate"))?;
                eq("alternate left", other.exists(), false)
            } else {
                if primary {
                    eq("primary", read(&file).as_deref(), Some("primary"))?;
                }
                if alternate && !same {
                    eq("alternate", read(&other).as_deref(), Some("alternate"))?;
                }
                eq("primary made", file.exists(), primary)
            }
        });
    }
    // UploadExistingArchiveIfNeeded: (name, archive exists, HEAD status to check, uploaded).
    for (name, exists, check_status, uploaded) in [
        ("local file missing", false, None, false),
        ("file exists, remote exists", true, Some(200), false),
        ("file exists, remote missing", true, Some(404), true),
        ("file exists, no check URL", true, None, true),
    ] {
        check(
            cases,
            A,
            format!("UploadExistingArchiveIfNeeded/{name}"),
            || {
                let server = Fixture::start()?;
                let dir = temp_dir()?;
                let file = dir.path().join("cache.zip");
                if exists {
                    std::fs::write(&file, "cache content").map_err(|e| format!("writing: {e}"))?;
                }
                let o = ArchiverOptions {
                    file: file.clone(),
                    url: Some(server.url("/200/new/upload")),
                    check_url: check_status.map(|s| server.url(&format!("/{s}/new/check"))),
                    ..Default::default()
                };
                let mut log = Vec::new();
                block_on(helper::upload_existing(&o, &file, &mut log))?
                    .map_err(|e| e.to_string())?;
                let puts = server
                    .seen()
                    .iter()
                    .filter(|r| r.starts_with("PUT "))
                    .count();
                eq("uploaded", puts == 1, uploaded)
            },
        );
    }
    // SelectPresignedURL: (name, primary GET, primary HEAD, alternate GET, alternate HEAD,
    // the GET chosen); paths are `/<status>/<age>/…`.
    for (name, url, head, alt, alt_head, want) in [
        (
            "no alternate URL, uses primary",
            "/200/new/p",
            None,
            None,
            None,
            "/200/new/p",
        ),
        (
            "primary newer, uses primary",
            "/200/new/p",
            None,
            Some("/200/old/a"),
            None,
            "/200/new/p",
        ),
        (
            "alternate newer, uses alternate",
            "/200/old/p",
            None,
            Some("/200/new/a"),
            None,
            "/200/new/a",
        ),
        (
            "primary not found, uses alternate",
            "/404/new/p",
            None,
            Some("/200/new/a"),
            None,
            "/200/new/a",
        ),
        (
            "alternate not found, uses primary",
            "/200/new/p",
            None,
            Some("/404/new/a"),
            None,
            "/200/new/p",
        ),
        (
            "both not found, uses primary",
            "/404/new/p",
            None,
            Some("/404/new/a"),
            None,
            "/404/new/p",
        ),
        (
            "primary returns unexpected status, uses alternate",
            "/403/new/p",
            None,
            Some("/200/new/a"),
            None,
            "/200/new/a",
        ),
        (
            "both return unexpected status, uses primary",
            "/403/new/p",
            None,
            Some("/403/new/a"),
            None,
            "/403/new/p",
        ),
        (
            "uses HeadURL when set, even if URL would fail HEAD",
            "/403/new/p",
            Some("/200/new/ph"),
            Some("/200/old/a"),
            None,
            "/403/new/p",
        ),
        (
            "uses AlternateHeadURL when set, even if AlternateURL would fail HEAD",
            "/200/old/p",
            None,
            Some("/403/new/a"),
            Some("/200/new/ah"),
            "/403/new/a",
        ),
    ] {
        check(cases, E, format!("SelectPresignedURL/{name}"), || {
            let server = Fixture::start()?;
            let o = ExtractorOptions {
                url: Some(server.url(url)),
                head_url: head.map(|h| server.url(h)),
                alternate_url: alt.map(|a| server.url(a)),
                alternate_head_url: alt_head.map(|a| server.url(a)),
                timeout_minutes: 1,
                ..Default::default()
            };
            let primary = server.url(url);
            let mut log = Vec::new();
            let (chosen, _) = block_on(helper::select_source(&o, &primary, &mut log))?;
            eq("chosen", chosen.to_string(), server.url(want))
        });
    }
}

/// `rel` resolved against the absolute dir `base`.
fn resolve(base: &str, rel: &str) -> String {
    drover::executor::paths::normalize(&format!("{base}/{rel}"))
}

/// Runs `script` with bash in `dir`; (exit code, stdout).
fn run_bash(script: &str, dir: &std::path::Path) -> Result<(Option<i32>, String), String> {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("running bash: {e}"))?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

fn temp_dir() -> Result<tempfile::TempDir, String> {
    tempfile::tempdir().map_err(|e| format!("temporary dir: {e}"))
}

fn bash_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/bash_test.go";
    // CommandShellEscapes and IfCmdShellEscapes: one argument, quoted as one word.
    for (name, arg, want) in [
        ("CommandShellEscapes/x&(y)", "x&(y)", "$'x&(y)'"),
        (
            "CommandShellEscapes/c:\\windows",
            "c:\\windows",
            "$'c:\\\\windows'",
        ),
        ("CommandShellEscapes/'$HOME'", "'$HOME'", "$'\\'$HOME\\''"),
        ("IfCmdShellEscapes", "x&(y)", "$'x&(y)'"),
    ] {
        check(cases, T, name, || {
            eq("quoted", quote(arg).as_str(), want)?;
            let dir = temp_dir()?;
            let (_, out) = run_bash(&format!("printf '%s' {}", quote(arg)), dir.path())?;
            eq("as bash reads it", out.as_str(), arg)
        });
    }
    // CheckForErrors, disabled: the command is written as it is, and errexit stops the
    // script at the first failing command.
    check(cases, T, "CheckForErrors/disabled", || {
        let mut b = ScriptBody::new();
        b.line("echo 'hello world'")
            .line("false")
            .line("echo after");
        eq(
            "body",
            b.as_str(),
            "echo 'hello world'\nfalse\necho after\n",
        )?;
        let dir = temp_dir()?;
        let got = run_bash(&b.finish(false), dir.path())?;
        eq("run", got, (Some(1), "hello world\n".to_string()))
    });
    // Finish_EvalForm, default: the body is eval'ed in a subshell that traps TERM with
    // `exit 1`, stdin from /dev/null.
    check(cases, T, "Finish_EvalForm/default", || {
        let mut b = ScriptBody::new();
        b.line("echo hi");
        let s = b.finish(false);
        eq("no pipeline form", s.contains(": | eval"), false)?;
        eq(
            "subshell",
            s.contains("( trap 'exit 1' TERM\neval $'echo hi\\n'\n) </dev/null"),
            true,
        )?;
        let mut killed = ScriptBody::new();
        killed.line("kill -TERM $BASHPID").line("echo after");
        let dir = temp_dir()?;
        eq(
            "TERM",
            run_bash(&killed.finish(false), dir.path())?,
            (Some(1), String::new()),
        )?;
        let mut stdin = ScriptBody::new();
        stdin.line("cat");
        let (code, out) = run_bash(
            &format!("echo from-stdin | bash -c {}", quote(&stdin.finish(false))),
            dir.path(),
        )?;
        eq("stdin", (code, out), (Some(0), String::new()))
    });
    // GetConfiguration `bash` and EntrypointCommand "normal shell/no probe": a normal shell,
    // the first of upstream's shells that exists.
    let shells = [
        "/usr/local/bin/bash",
        "/usr/bin/bash",
        "/bin/bash",
        "/usr/local/bin/sh",
        "/usr/bin/sh",
        "/bin/sh",
        "/busybox/sh",
    ];
    for name in [
        "GetConfiguration/bash",
        "EntrypointCommand/normal shell/no probe",
    ] {
        check(cases, T, name, || {
            let cmd = drover::executor::script::detect_shell_command();
            let (argv, script) = cmd.split_at(2);
            eq("argv", argv, &["sh".to_string(), "-c".to_string()][..])?;
            let script = script.first().ok_or("no script")?;
            let tried: Vec<(String, String)> = script
                .lines()
                .filter_map(|l| {
                    let l = l.trim();
                    l.strip_prefix("exec ").map(|e| e.trim().to_string())
                })
                .zip(script.lines().filter_map(|l| {
                    l.split_once("[ -x ")
                        .and_then(|(_, r)| r.split_once(" ]"))
                        .map(|(p, _)| p.to_string())
                }))
                .map(|(e, t)| (t, e))
                .collect();
            let want: Vec<(String, String)> = shells
                .iter()
                .map(|s| (s.to_string(), s.to_string()))
                .collect();
            eq("shells", tried, want)?;
            eq(
                "none found",
                script.contains("echo shell not found") && script.contains("exit 1"),
                true,
            )
        });
    }
    // Variable: exports as bash sees them; a file variable's content in a file under the
    // temporary dir, exported as its path.
    for (name, v, want_value, want_file) in [
        (
            "file var, absolute path",
            {
                let mut f = var("KEY", "the secret");
                f.file = true;
                f
            },
            "<tmp>/KEY",
            Some("the secret"),
        ),
        (
            "tmp file var, absolute path",
            var("KEY", "<tmp>/KEY2"),
            "<tmp>/KEY2",
            None,
        ),
        ("regular var", var("KEY", "VALUE"), "VALUE", None),
    ] {
        check(cases, T, format!("Variable/{name}"), || {
            let dir = temp_dir()?;
            let tmp = dir.path().join("foo/bar").display().to_string();
            let mut v = v;
            v.value = v.value.replace("<tmp>", &tmp);
            let mut b = ScriptBody::new();
            drover::executor::script::user::write_exports(&mut b, &list(vec![v], &tmp), true);
            b.line("printf '%s\\n' \"$KEY\"");
            b.line("if [ -f \"$KEY\" ]; then cat \"$KEY\"; fi");
            let (code, out) = run_bash(&b.finish(false), dir.path())?;
            let mut want = format!("{}\n", want_value.replace("<tmp>", &tmp));
            want.push_str(want_file.unwrap_or_default());
            eq("run", (code, out), (Some(0), want))
        });
    }
    // RmFile: a file variable's file is deleted at cleanup, wherever the temporary dir is.
    for (name, sub) in [
        ("simple path", "path/to"),
        ("path with spaces", "path/with spaces"),
        ("path with special characters", "path/to-dir_123"),
    ] {
        check(cases, T, format!("RmFile/{name}"), || {
            let dir = temp_dir()?;
            let tmp = dir.path().join(sub);
            std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
            let file = tmp.join("FILE");
            std::fs::write(&file, "x").map_err(|e| e.to_string())?;
            let mut v = var("FILE", "x");
            v.file = true;
            let tmp_s = tmp.display().to_string();
            let paths = drover::executor::paths::JobPaths {
                root_dir: dir.path().display().to_string(),
                build_dir: dir.path().join("p").display().to_string(),
                tmp_dir: tmp_s.clone(),
                cache_dir: "/cache".into(),
            };
            let git = GitCleanup::new(
                &BuildSettings::from_variables(&VarList::default(), false).0,
                Some(false),
            );
            let b = drover::executor::script::user::cleanup_file_variables(
                &list(vec![v], &tmp_s),
                &paths,
                None,
                git,
            );
            let (code, _) = run_bash(&b.finish(false), dir.path())?;
            eq("run", code, Some(0))?;
            eq("file left", file.exists(), false)
        });
    }
    // RmDir: hooks dirs are deleted, wherever the project dir is.
    for (name, sub) in [
        ("simple path", "path/to/dir"),
        ("path with spaces", "path/with spaces/dir"),
    ] {
        check(cases, T, format!("RmDir/{name}"), || {
            let dir = temp_dir()?;
            let build = dir.path().join(sub);
            let hooks = build.join(".git/hooks/sub");
            std::fs::create_dir_all(&hooks).map_err(|e| e.to_string())?;
            std::fs::write(hooks.join("pre-commit"), "x").map_err(|e| e.to_string())?;
            let paths = drover::executor::paths::JobPaths {
                root_dir: dir.path().display().to_string(),
                build_dir: build.display().to_string(),
                tmp_dir: format!("{}.tmp", build.display()),
                cache_dir: "/cache".into(),
            };
            let git = GitCleanup::new(
                &BuildSettings::from_variables(&VarList::default(), false).0,
                Some(true),
            );
            let mut b = ScriptBody::new();
            git.write(&mut b, &paths);
            let (code, _) = run_bash(&b.finish(false), dir.path())?;
            eq("run", code, Some(0))?;
            eq("hooks left", build.join(".git/hooks").exists(), false)
        });
    }
}

fn shell_writer_tables(cases: &mut Vec<Case>) {
    check(
        cases,
        "shells/shell_writer_test.go",
        "Bash/ends with a newline",
        || {
            let mut b = ScriptBody::new();
            b.line("echo hi");
            eq("last char", b.finish(false).ends_with('\n'), true)
        },
    );
}

/// The `get_sources` body of a job with these variables (settings read from them), on
/// upstream's fixture paths.
struct SourcesJob<'a> {
    vars: Vec<Var>,
    git_info: Value,
    hooks: Value,
    pre: Option<&'a str>,
    post: Option<&'a str>,
    clean_git_config: Option<bool>,
    /// The builds dir; the project is `<root>/g/p`.
    root: &'a str,
    /// The git credentials (default: the runner url `https://test.remote`, token `job-token`).
    auth: Option<GitAuth<'a>>,
    /// The correlation ID of the job request.
    correlation: &'a str,
}

impl Default for SourcesJob<'_> {
    fn default() -> Self {
        SourcesJob {
            vars: vec![],
            git_info: json!({"repo_url": "https://gitlab-ci-token:job-token@test.remote/g/p.git",
                             "sha": "0123456789abcdef", "ref": "main",
                             "refspecs": ["+refs/heads/*:refs/origin/heads/*"]}),
            hooks: json!([]),
            pre: None,
            post: None,
            clean_git_config: None,
            root: "/builds",
            auth: None,
            correlation: "",
        }
    }
}

impl SourcesJob<'_> {
    fn body(&self) -> String {
        let mut p = payload(json!({"git_info": self.git_info, "hooks": self.hooks}));
        p.request_correlation_id = self.correlation.into();
        let root = self.root;
        let vars = list(self.vars.clone(), &format!("{root}/g/p.tmp")).expanded();
        let (settings, _) = BuildSettings::from_variables(&vars, true);
        let paths = drover::executor::paths::JobPaths {
            root_dir: root.into(),
            build_dir: format!("{root}/g/p"),
            tmp_dir: format!("{root}/g/p.tmp"),
            cache_dir: "/cache/g/p".into(),
        };
        let repo_url = self.git_info["repo_url"].as_str().unwrap_or_default();
        let auth = self.auth.unwrap_or(GitAuth {
            credentials_url: "https://test.remote",
            repo_url,
            token: "job-token",
            ..Default::default()
        });
        drover::executor::script::sources::get_sources(
            &p,
            &drover::executor::script::sources::SourcesInputs {
                vars: &vars,
                paths: &paths,
                settings: &settings,
                pre_get_sources: self.pre,
                post_get_sources: self.post,
                user_agent: &drover::version::git_user_agent(),
                clean_git_config: self.clean_git_config,
                auth: &auth,
            },
        )
        .as_str()
        .to_string()
    }
}

/// What upstream writes, step by step, as drover's script shows it.
enum Step<'a> {
    Notice(&'a str),
    Warning(&'a str),
    /// A command: its words, each quoted (`"$GLR_EXT_GIT_CONFIG_PATH"` references stay).
    Cmd(Vec<String>),
    /// A user's command line, as written.
    Line(&'a str),
}

/// `git init` of the project dir with the template dir, then `cd` into it.
fn init_steps() -> [Step<'static>; 2] {
    [
        Step::Cmd(words(&[
            "git",
            "init",
            "/builds/g/p",
            "--template",
            "/builds/g/p.tmp/git-template",
        ])),
        Step::Cmd(words(&["cd", "/builds/g/p"])),
    ]
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

impl Step<'_> {
    fn render(&self) -> String {
        match self {
            Step::Notice(m) => ScriptBody::new().notice(m).as_str().trim_end().to_string(),
            Step::Warning(m) => ScriptBody::new().warning(m).as_str().trim_end().to_string(),
            Step::Line(l) => l.to_string(),
            Step::Cmd(w) => w
                .iter()
                .map(|a| match a.as_str() {
                    "include.path=$GLR_EXT_GIT_CONFIG_PATH" => {
                        "include.path=\"$GLR_EXT_GIT_CONFIG_PATH\"".to_string()
                    }
                    "$GLR_EXT_GIT_CONFIG_PATH" => "\"$GLR_EXT_GIT_CONFIG_PATH\"".to_string(),
                    // Words bash reads as they are need no quotes.
                    other
                        if !other.is_empty()
                            && other
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || ",-./@_=+".contains(c)) =>
                    {
                        other.to_string()
                    }
                    other => quote(other),
                })
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// `steps` appear in `s` in this order, each as a whole line (a command may be an `if`'s
/// condition).
fn in_order(s: &str, steps: &[Step<'_>]) -> Result<(), String> {
    let lines: Vec<&str> = s.lines().map(str::trim).collect();
    let mut at = 0;
    for step in steps {
        let want = step.render();
        let found = lines[at..].iter().position(|l| {
            *l == want
                || l.strip_prefix("if ").and_then(|r| r.strip_suffix("; then")) == Some(&want)
        });
        match found {
            Some(i) => at += i + 1,
            None => return Err(format!("{want:?} missing (in this order) in:\n{s}")),
        }
    }
    Ok(())
}

/// upstream's submodule steps for one table row.
fn submodule_steps<'a>(
    notice: &'a str,
    recursive: bool,
    update_flags: &[&str],
    clean_flags: &[&str],
    paths: &[&str],
) -> Vec<Step<'a>> {
    let rec: &[&str] = if recursive { &["--recursive"] } else { &[] };
    let dashed: Vec<&str> = if paths.is_empty() {
        vec![]
    } else {
        [&["--"][..], paths].concat()
    };
    let creds = ["git", "-c", "include.path=$GLR_EXT_GIT_CONFIG_PATH"];
    let foreach = |tail: &[&str]| {
        Step::Cmd(words(
            &[&["git", "submodule", "foreach"], rec, tail].concat(),
        ))
    };
    let sync = || {
        Step::Cmd(words(
            &[&["git", "submodule", "sync"], rec, &dashed].concat(),
        ))
    };
    let update = || {
        Step::Cmd(words(
            &[
                &creds[..],
                &["submodule", "update", "--init"],
                rec,
                update_flags,
                &dashed,
            ]
            .concat(),
        ))
    };
    let clean = [&["git", "clean"], clean_flags].concat();
    let mut steps = vec![
        Step::Notice(notice),
        Step::Cmd(words(&["git", "submodule", "init"])),
        sync(),
        foreach(&clean),
        foreach(&["git", "reset", "--hard"]),
        update(),
        Step::Notice("Updated submodules"),
        sync(),
        Step::Warning("Updating submodules failed. Retrying..."),
    ];
    if update_flags.contains(&"--remote") {
        steps.push(Step::Cmd(words(
            &[
                &creds[..],
                &["submodule", "foreach"],
                rec,
                &[
                    "git",
                    "fetch",
                    "origin",
                    "+refs/heads/*:refs/remotes/origin/*",
                ],
            ]
            .concat(),
        )));
    }
    steps.extend([
        sync(),
        update(),
        foreach(&["git", "reset", "--hard"]),
        foreach(&clean),
        Step::Notice("Configuring submodules to use parent git credentials..."),
        Step::Cmd(words(&[
            "git",
            "submodule",
            "foreach",
            "--recursive",
            "git",
            "config",
            "--replace-all",
            "include.path",
            "$GLR_EXT_GIT_CONFIG_PATH",
        ])),
        Step::Notice("Pulling LFS files..."),
        Step::Cmd(words(
            &[
                &creds[..],
                &["submodule", "foreach"],
                rec,
                &["git", "lfs", "pull"],
            ]
            .concat(),
        )),
    ]);
    steps
}

fn submodule_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    for (name, recursive, depth, clean, update, notice, update_flags, clean_flags) in [
        (
            "no recursion, no depth limit",
            false,
            0,
            "",
            "",
            "Updating/initializing submodules...",
            vec![],
            vec!["-ffdx"],
        ),
        (
            "no recursion, depth limit 10",
            false,
            10,
            "",
            "",
            "Updating/initializing submodules with git depth set to 10...",
            vec!["--depth", "10"],
            vec!["-ffdx"],
        ),
        (
            "with recursion, no depth limit",
            true,
            0,
            "",
            "",
            "Updating/initializing submodules recursively...",
            vec![],
            vec!["-ffdx"],
        ),
        (
            "with recursion, depth limit 1",
            true,
            1,
            "",
            "",
            "Updating/initializing submodules recursively with git depth set to 1...",
            vec!["--depth", "1"],
            vec!["-ffdx"],
        ),
        (
            "with custom git clean flags",
            false,
            0,
            "custom-flags",
            "",
            "Updating/initializing submodules...",
            vec![],
            vec!["custom-flags"],
        ),
        (
            "with recursion, no depth limit, and update flags",
            true,
            0,
            "",
            " --remote  --progress  ",
            "Updating/initializing submodules recursively...",
            vec!["--remote", "--progress"],
            vec!["-ffdx"],
        ),
        (
            "with git clean flags containing shell metacharacters",
            false,
            0,
            "-ffdx a;b c&&d $(e) `f` |g",
            "",
            "Updating/initializing submodules...",
            vec![],
            vec!["-ffdx", "a;b", "c&&d", "$(e)", "`f`", "|g"],
        ),
    ] {
        check(cases, T, format!("writeSubmoduleUpdateCmd/{name}"), || {
            let mut vars = vec![
                var(
                    "GIT_SUBMODULE_STRATEGY",
                    if recursive { "recursive" } else { "normal" },
                ),
                var("GIT_SUBMODULE_UPDATE_FLAGS", update),
                var("GIT_CLEAN_FLAGS", clean),
            ];
            vars.iter_mut().for_each(|v| v.raw = true);
            let job = SourcesJob {
                vars,
                git_info: json!({"repo_url": "https://test.remote/g/p.git", "sha": "0123456789",
                                 "ref": "main", "depth": depth,
                                 "refspecs": ["+refs/heads/*:refs/origin/heads/*"]}),
                ..Default::default()
            };
            in_order(
                &job.body(),
                &submodule_steps(notice, recursive, &update_flags, &clean_flags, &[]),
            )
        });
    }
    for (name, paths) in [
        ("single path", "submoduleA"),
        ("multiple paths", "submoduleA submoduleB submoduleC"),
        ("exclude paths", ":(exclude)submoduleA :(exclude)submoduleB"),
        ("paths with dash", "-submoduleA :(exclude)-submoduleB"),
        (
            "invalid paths",
            "submoduleA : (exclude)submoduleB submoduleC :::1(exclude) submoduleD",
        ),
        (
            "extra spaces",
            "submoduleA :   (exclude)submoduleB    submoduleC :::1(exclude)   submoduleD",
        ),
        ("empty paths", ""),
        ("spaces", "        "),
    ] {
        check(
            cases,
            T,
            format!("writeSubmoduleUpdateCmdPath/{name}"),
            || {
                let job = SourcesJob {
                    vars: vec![
                        var("GIT_SUBMODULE_STRATEGY", "normal"),
                        var("GIT_SUBMODULE_PATHS", paths),
                    ],
                    ..Default::default()
                };
                let fields: Vec<&str> = paths.split_whitespace().collect();
                in_order(
                    &job.body(),
                    &submodule_steps(
                        "Updating/initializing submodules...",
                        false,
                        &[],
                        &["-ffdx"],
                        &fields,
                    ),
                )
            },
        );
    }
}

/// The git `http.userAgent` upstream sets on this machine.
fn upstream_git_user_agent() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("gitlab-runner 19.4.0 {}/{arch}", std::env::consts::OS)
}

fn sources_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    // writeClearGitCredentials: (repo URL, the remote whose credentials are rejected).
    for (name, url, want) in [
        (
            "https URL",
            "https://gitlab-ci-token:xxx@example.com:3443/project/repo.git",
            Some(("https", "example.com:3443")),
        ),
        (
            "http URL",
            "http://example.com/project/repo.git",
            Some(("http", "example.com")),
        ),
        (
            "windows path parses as a scheme without a host",
            "C:/builds/group/project",
            None,
        ),
        (
            "windows path with backslashes",
            "C:\\builds\\group\\project",
            None,
        ),
        (
            "unix path parses as neither scheme nor host",
            "/builds/group/project",
            None,
        ),
        ("file URL has no host", "file:///builds/group/project", None),
        (
            "git URL has a host but an unhandled scheme",
            "git://example.com/group/project.git",
            None,
        ),
        (
            "ssh URL",
            "ssh://git@example.com/group/project.git",
            Some(("ssh", "example.com")),
        ),
        ("no URL", "", None),
    ] {
        check(cases, T, format!("writeClearGitCredentials/{name}"), || {
            let mut b = ScriptBody::new();
            drover::executor::script::sources::write_credential_reject(&mut b, url);
            let got = b.as_str();
            match want {
                None => eq("lines", got, ""),
                Some((scheme, host)) => {
                    let dir = temp_dir()?;
                    // What git credential reject reads: replace git by a printer.
                    let script = got.replace("| git credential reject", "| cat");
                    let (code, out) =
                        run_bash(&script.replace(">/dev/null 2>&1 ", ""), dir.path())?;
                    eq("exit", code, Some(0))?;
                    eq(
                        "stdin of git credential reject",
                        out,
                        format!("protocol={scheme}\nhost={host}\nusername=gitlab-ci-token\n\n"),
                    )?;
                    eq(
                        "runs git credential reject",
                        got.contains("| git credential reject"),
                        true,
                    )
                }
            }
        });
    }
    let checkout_job = |vars: Vec<Var>| SourcesJob {
        vars: [vec![var("GIT_STRATEGY", "fetch")], vars].concat(),
        git_info: json!({"repo_url": "https://test.remote/g/p.git", "sha": "01234567abcdef",
                         "ref": "main"}),
        ..Default::default()
    };
    // GitCleanFlags.
    for (name, value, flags) in [
        ("empty clean flags", "", Some(vec!["-ffdx"])),
        (
            "use custom flags",
            "custom-flags",
            Some(vec!["custom-flags"]),
        ),
        (
            "use custom flags with multiple arguments",
            "-ffdx -e cache/",
            Some(vec!["-ffdx", "-e", "cache/"]),
        ),
        ("disabled", "none", None),
    ] {
        check(cases, T, format!("GitCleanFlags/{name}"), || {
            let s = checkout_job(vec![var("GIT_CLEAN_FLAGS", value)]).body();
            let mut steps = vec![
                Step::Notice("Checking out 01234567 as detached HEAD (ref is main)..."),
                Step::Cmd(words(&[
                    "git",
                    "-c",
                    "submodule.recurse=false",
                    "checkout",
                    "-f",
                    "-q",
                    "01234567abcdef",
                ])),
            ];
            let cleans = s
                .lines()
                .filter(|l| l.trim_start().starts_with("git clean"))
                .count();
            match flags {
                Some(f) => {
                    steps.push(Step::Cmd(words(&[&["git", "clean"], &f[..]].concat())));
                    eq("git clean lines", cleans, 1)?;
                }
                None => eq("git clean lines", cleans, 0)?,
            }
            in_order(&s, &steps)
        });
    }
    // GitFetchFlags (no refspecs in the payload, as upstream's table).
    for (name, value, depth, format, flags) in [
        ("empty fetch flags", "", 0, "", vec!["--prune", "--quiet"]),
        ("use custom flags", "--prune", 0, "", vec!["--prune"]),
        (
            "depth non zero",
            "--quiet",
            1,
            "",
            vec!["--depth", "1", "--quiet"],
        ),
        (
            "object format SHA256",
            "",
            0,
            "sha256",
            vec!["--prune", "--quiet"],
        ),
        ("disabled", "none", 0, "", vec![]),
    ] {
        check(cases, T, format!("GitFetchFlags/{name}"), || {
            let job = SourcesJob {
                vars: vec![var("GIT_FETCH_EXTRA_FLAGS", value)],
                git_info: json!({"repo_url": "https://test.remote/g/p.git", "sha": "01234567abcdef",
                                 "ref": "main", "depth": depth, "repo_object_format": format}),
                ..Default::default()
            };
            let s = job.body();
            let notice = if depth > 0 {
                format!("Fetching changes with git depth set to {depth}...")
            } else {
                "Fetching changes...".into()
            };
            let mut init = words(&[
                "git",
                "init",
                "/builds/g/p",
                "--template",
                "/builds/g/p.tmp/git-template",
            ]);
            if !format.is_empty() {
                init.extend(words(&["--object-format", format]));
            }
            let ua = format!("http.userAgent={}", upstream_git_user_agent());
            let fetch = Step::Cmd(words(
                &[
                    &[
                        "git",
                        "-c",
                        ua.as_str(),
                        "fetch",
                        "origin",
                        "--no-recurse-submodules",
                    ],
                    &flags[..],
                ]
                .concat(),
            ))
            .render();
            in_order(
                &s,
                &[
                    Step::Notice(&notice),
                    Step::Cmd(init),
                    Step::Notice("Created fresh repository."),
                ],
            )
            .or_else(|_| {
                // drover prints "Created fresh repository." inside the `if` of `git remote add`.
                let created = format!("echo {}", quote("\u{1b}[0;mCreated fresh repository."));
                eq("created", s.contains(&created), true)
            })?;
            let want = if depth > 0 {
                fetch
            } else {
                format!("if [ -f .git/shallow ]; then {fetch} --unshallow; else {fetch}; fi")
            };
            eq("fetch", s.lines().any(|l| l == want), true)
                .map_err(|e| format!("{e}: {want:?} in\n{s}"))
        });
    }
    // guardGetSourcesScriptHooks.
    for (name, strategy, script, written) in [
        ("no scripts", "", vec![], false),
        ("git strategy none", "none", vec!["test"], false),
        ("git strategy empty", "empty", vec!["test"], false),
        ("writes command", "", vec!["test"], true),
    ] {
        check(
            cases,
            T,
            format!("guardGetSourcesScriptHooks/{name}"),
            || {
                let job = SourcesJob {
                    vars: vec![var("GIT_STRATEGY", strategy), var("GIT_CHECKOUT", "false")],
                    hooks: json!([{"name": "pre_get_sources_script", "script": script}]),
                    ..Default::default()
                };
                let s = job.body();
                let shown = Step::Notice("$ test").render();
                let lines: Vec<&str> = s.lines().collect();
                let at = lines.iter().position(|l| *l == shown);
                eq("hook shown", at.is_some(), written)?;
                eq(
                    "hook run after it",
                    at.and_then(|i| lines.get(i + 1)).copied(),
                    written.then_some("test"),
                )?;
                eq("user commands", s.contains("\\x1b[32;1m$ "), written)
            },
        );
    }
    // writeGetSourcesScript (bash): hooks from the config and the job around the git steps.
    for (strategy, steps) in [
        (
            "none",
            vec![
                Step::Notice("Skipping Git repository setup"),
                Step::Cmd(words(&["mkdir", "-p", "/builds/g/p"])),
                Step::Notice("Skipping Git checkout"),
                Step::Notice("Skipping Git submodules setup"),
            ],
        ),
        (
            "empty",
            vec![
                Step::Notice("Skipping Git repository setup and creating an empty build directory"),
                Step::Cmd(words(&["rm", "-rf", "/builds/g/p"])),
                Step::Cmd(words(&["mkdir", "-p", "/builds/g/p"])),
                Step::Notice("Skipping Git checkout"),
                Step::Notice("Skipping Git submodules setup"),
            ],
        ),
        ("clone", vec![]),
        ("fetch", vec![]),
    ] {
        check(
            cases,
            T,
            format!("writeGetSourcesScript/strategy {strategy}"),
            || {
                let job = SourcesJob {
                    vars: vec![var("GIT_STRATEGY", strategy), var("GIT_CHECKOUT", "false")],
                    git_info: json!({"repo_url": "https://repo-url/some/repo", "sha": "0123456789",
                                 "ref": "main"}),
                    hooks: json!([
                        {"name": "pre_get_sources_script", "script": ["job payload", "pre_get_sources"]},
                        {"name": "post_get_sources_script", "script": ["job payload", "post_get_sources"]},
                    ]),
                    pre: Some("config pre_get_sources"),
                    post: Some("config post_get_sources"),
                    ..Default::default()
                };
                let s = job.body();
                let shown: Vec<String> = [
                    "config pre_get_sources",
                    "job payload",
                    "pre_get_sources",
                    "post_get_sources",
                    "config post_get_sources",
                ]
                .iter()
                .map(|c| format!("$ {c}"))
                .collect();
                let hook = |c: &'static str| {
                    let notice = shown
                        .iter()
                        .find(|n| n.strip_prefix("$ ") == Some(c))
                        .map(String::as_str)
                        .unwrap_or_default();
                    [Step::Notice(notice), Step::Line(c)]
                };
                let mut want: Vec<Step<'_>> = vec![];
                let fetches = strategy == "clone" || strategy == "fetch";
                if fetches {
                    want.extend(hook("config pre_get_sources"));
                    want.extend(hook("job payload"));
                    want.extend(hook("pre_get_sources"));
                    want.push(Step::Notice("Fetching changes..."));
                    if strategy == "clone" {
                        // The project dir is emptied before the fetch.
                        let rm = Step::Cmd(words(&["rm", "-rf", "/builds/g/p"])).render();
                        let init = s.find("\ngit init ").ok_or("no git init")?;
                        eq(
                            "clone empties the dir first",
                            s[..init].lines().any(|l| l == rm),
                            true,
                        )?;
                    }
                    want.extend(init_steps());
                    want.push(Step::Notice("Skipping Git checkout"));
                    want.push(Step::Notice("Skipping Git submodules setup"));
                    want.extend(hook("job payload"));
                    want.extend(hook("post_get_sources"));
                    want.extend(hook("config post_get_sources"));
                } else {
                    want.extend(steps);
                    eq("hooks skipped", s.contains("pre_get_sources"), false)?;
                }
                in_order(&s, &want)?;
                // Lastly the job token is dropped from git's credential helpers.
                let last = s.lines().last().unwrap_or_default();
                eq(
                "credential reject",
                last.starts_with("printf 'protocol=%s\\nhost=%s\\nusername=gitlab-ci-token\\n\\n' https repo-url | git credential reject"),
                true,
            )
            },
        );
    }
    // writeClearWorktreeScript: tracked and untracked files go, .git stays.
    check(cases, T, "writeClearWorktreeScript", || {
        let dir = temp_dir()?;
        let build = dir.path().join("p");
        let paths = drover::executor::paths::JobPaths {
            root_dir: dir.path().display().to_string(),
            build_dir: build.display().to_string(),
            tmp_dir: format!("{}.tmp", build.display()),
            cache_dir: "/cache".into(),
        };
        let setup = format!(
            "set -e; mkdir -p {b}; cd {b}; git init -q .; echo a > tracked; git add tracked; \
             git -c user.email=a@b -c user.name=a commit -q -m x; echo b > untracked; mkdir d; echo c > d/ignored",
            b = quote(&paths.build_dir)
        );
        eq("setup", run_bash(&setup, dir.path())?.0, Some(0))?;
        let body = drover::executor::script::user::clear_worktree(&paths);
        eq(
            "notice",
            body.as_str().lines().next().map(String::from),
            Some(Step::Notice("Deleting tracked and untracked files...").render()),
        )?;
        let (code, _) = run_bash(&body.finish(false), dir.path())?;
        eq("exit", code, Some(0))?;
        let mut left: Vec<String> = std::fs::read_dir(&build)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        left.sort();
        eq("left", left, vec![".git".to_string()])
    });
}

/// The files a job can leave in git's dirs, relative to the project dir (`T/` is the template
/// dir under `<project>.tmp`).
const GIT_LEFTOVERS: &[&str] = &[
    ".git/index.lock",
    ".git/shallow.lock",
    ".git/HEAD.lock",
    ".git/hooks/post-checkout",
    ".git/config.lock",
    ".git/refs/heads/main.lock",
    ".git/config",
    ".git/hooks/pre-commit",
    ".git/modules/m/index.lock",
    ".git/modules/m/shallow.lock",
    ".git/modules/m/HEAD.lock",
    ".git/modules/m/hooks/post-checkout",
    ".git/modules/m/config.lock",
    ".git/modules/m/config",
    ".git/modules/m/hooks/pre-commit",
    "T/config",
    "T/hooks/pre-commit",
];

/// Which of [`GIT_LEFTOVERS`] upstream removes: locks always, `.git/modules` locks with a
/// submodule strategy, configs and hooks with `clean_git_config`, and in `.git/modules` with both.
fn upstream_removes(file: &str, submodules: bool, configs: bool) -> bool {
    let in_modules = file.starts_with(".git/modules/");
    let lock = file.ends_with(".lock") || file.ends_with("hooks/post-checkout");
    match (lock, in_modules) {
        (true, false) => true,
        (true, true) => submodules,
        (false, false) => configs,
        (false, true) => configs && submodules,
    }
}

/// Runs the git clean-up lines of `body` (from the first `.git/index.lock` line up to `until`)
/// against a project dir holding every [`GIT_LEFTOVERS`] file; the files left.
fn run_git_cleanup(body: &str, root: &std::path::Path, until: &str) -> Result<Vec<String>, String> {
    let project = root.join("g/p");
    let template = root.join("g/p.tmp/git-template");
    for f in GIT_LEFTOVERS {
        let path = match f.strip_prefix("T/") {
            Some(rest) => template.join(rest),
            None => project.join(f),
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&path, "x").map_err(|e| e.to_string())?;
    }
    let start = body
        .find(&format!(
            "rm -f {}",
            quote(&format!("{}/.git/index.lock", project.display()))
        ))
        .ok_or_else(|| format!("no git clean-up in:\n{body}"))?;
    let end = body[start..]
        .find(until)
        .map(|i| start + i)
        .ok_or_else(|| format!("{until:?} missing"))?;
    let (code, _) = run_bash(&format!("set -e\n{}", &body[start..end]), root)?;
    eq("clean-up exit", code, Some(0))?;
    Ok(GIT_LEFTOVERS
        .iter()
        .filter(|f| match f.strip_prefix("T/") {
            Some(rest) => template.join(rest).exists(),
            None => project.join(f).exists(),
        })
        .map(|f| f.to_string())
        .collect())
}

fn git_cleanup_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    for (config_name, config, configs) in [
        ("<nil>", None, true),
        ("enabled", Some(true), true),
        ("disabled", Some(false), false),
    ] {
        for (strategy, submodules) in [
            ("none", false),
            ("normal", true),
            ("recursive", true),
            ("invalid", false),
        ] {
            let want = || -> Vec<String> {
                GIT_LEFTOVERS
                    .iter()
                    .filter(|f| !upstream_removes(f, submodules, configs))
                    .map(|f| f.to_string())
                    .collect()
            };
            check(
                cases,
                T,
                format!("writeGitCleanup/cleanGitConfig:{config_name}/submoduleStrategy:{strategy}/handleGetSourcesStrategy"),
                || {
                    let dir = temp_dir()?;
                    let root = dir.path().display().to_string();
                    let job = SourcesJob {
                        vars: vec![var("GIT_STRATEGY", "fetch"), var("GIT_SUBMODULE_STRATEGY", strategy)],
                        clean_git_config: config,
                        root: &root,
                        ..Default::default()
                    };
                    let s = job.body();
                    // Before the template dir is set up.
                    let until = format!("rm -rf {}", quote(&format!("{root}/g/p.tmp/git-template")));
                    eq("left", run_git_cleanup(&s, dir.path(), &format!("{until}\n"))?, want())
                },
            );
            check(
                cases,
                T,
                format!("writeGitCleanup/cleanGitConfig:{config_name}/submoduleStrategy:{strategy}/writeCleanupScript"),
                || {
                    let dir = temp_dir()?;
                    let root = dir.path().display().to_string();
                    let vars = list(
                        vec![var("GIT_STRATEGY", "fetch"), var("GIT_SUBMODULE_STRATEGY", strategy)],
                        &format!("{root}/g/p.tmp"),
                    );
                    let (settings, _) = BuildSettings::from_variables(&vars, true);
                    let paths = drover::executor::paths::JobPaths {
                        root_dir: root.clone(),
                        build_dir: format!("{root}/g/p"),
                        tmp_dir: format!("{root}/g/p.tmp"),
                        cache_dir: "/cache".into(),
                    };
                    let s = drover::executor::script::user::cleanup_file_variables(
                        &vars,
                        &paths,
                        Some("https://repo-url"),
                        GitCleanup::new(&settings, config),
                    )
                    .as_str()
                    .to_string();
                    let tmp = format!("{root}/g/p.tmp");
                    for f in ["masking.db", ".gitlab-runner.ext.conf", "gitlab_runner_env"] {
                        eq(f, s.contains(&quote(&format!("{tmp}/{f}"))), true)?;
                    }
                    eq(
                        "credential reject",
                        s.contains("https repo-url | git credential reject"),
                        true,
                    )?;
                    let uid = format!("rm -f {} || true", quote(&format!("{root}/.gitlab-build-uid-gid")));
                    eq("left", run_git_cleanup(&s, dir.path(), &uid)?, want())
                },
            );
        }
    }
}

/// Which stage bodies a job gets: (restore, download, archive on success, archive on failure,
/// upload on success, upload on failure); `false`: the stage is skipped.
fn stages_of(job: Value, url: &str) -> [bool; 6] {
    let p = payload(job);
    let vars = VarList::default();
    let paths = drover::executor::paths::JobPaths {
        root_dir: "/builds".into(),
        build_dir: "/builds/g/p".into(),
        tmp_dir: "/builds/g/p.tmp".into(),
        cache_dir: "/cache/g/p".into(),
    };
    let c = CacheInputs {
        payload: &p,
        vars: &vars,
        paths: &paths,
        remote: &LocalOnly,
        timeout_minutes: 10,
    };
    let a = drover::executor::script::artifacts::ArtifactInputs {
        payload: &p,
        vars: &vars,
        paths: &paths,
        url,
    };
    use drover::executor::script::artifacts;
    [
        cache::restore(&c).is_some(),
        artifacts::download(&a).is_some(),
        cache::archive(&c, true).is_some(),
        cache::archive(&c, false).is_some(),
        artifacts::upload(&a, true).is_some(),
        artifacts::upload(&a, false).is_some(),
    ]
}

fn skip_stage_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    let url = "https://example.com";
    for (stage, at, name, job, runner_url) in [
        (
            "restore_cache",
            0,
            "don't skip if cache has paths",
            json!({"cache": [{"paths": ["default"]}]}),
            "",
        ),
        (
            "restore_cache",
            0,
            "don't skip if cache uses untracked files",
            json!({"cache": [{"untracked": true}]}),
            "",
        ),
        (
            "download_artifacts",
            1,
            "don't skip if job has any dependencies",
            json!({"dependencies": [{"id": 1, "artifacts_file": {"filename": "dependency.txt"}}]}),
            "",
        ),
        (
            "archive_cache",
            2,
            "don't skip if cache has paths",
            json!({"cache": [{"paths": ["default"], "when": "on_success"}]}),
            "",
        ),
        (
            "archive_cache",
            2,
            "don't skip if cache uses untracked files",
            json!({"cache": [{"untracked": true, "when": "on_success"}]}),
            "",
        ),
        (
            "archive_cache_on_failure",
            3,
            "don't skip if cache has paths",
            json!({"cache": [{"paths": ["default"], "when": "on_failure"}]}),
            "",
        ),
        (
            "archive_cache_on_failure",
            3,
            "don't skip if cache uses untracked files",
            json!({"cache": [{"untracked": true, "when": "on_failure"}]}),
            "",
        ),
        (
            "upload_artifacts_on_success",
            4,
            "don't skip if artifact has paths and URL defined",
            json!({"artifacts": [{"paths": ["default"], "when": "on_success"}]}),
            url,
        ),
        (
            "upload_artifacts_on_success",
            4,
            "don't skip if artifact uses untracked files and URL defined",
            json!({"artifacts": [{"untracked": true, "when": "on_success"}]}),
            url,
        ),
        (
            "upload_artifacts_on_failure",
            5,
            "don't skip if artifact has paths and URL defined",
            json!({"artifacts": [{"paths": ["default"], "when": "on_failure"}]}),
            url,
        ),
        (
            "upload_artifacts_on_failure",
            5,
            "don't skip if artifact uses untracked files and URL defined",
            json!({"artifacts": [{"untracked": true, "when": "on_failure"}]}),
            url,
        ),
    ] {
        check(cases, T, format!("SkipBuildStage/{stage}/{name}"), || {
            eq("empty job runs it", stages_of(json!({}), "")[at], false)?;
            eq("this job runs it", stages_of(job, runner_url)[at], true)
        });
    }
}

fn build_settings_tables(cases: &mut Vec<Case>) {
    const T: &str = "common/build_test.go";
    let settings = |key: &str, value: &str| {
        BuildSettings::from_variables(&list(vec![var(key, value)], "/t").expanded(), false).0
    };
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for (name, value, want) in [
        ("empty clean flags", "", vec!["-ffdx"]),
        ("use custom flags", "custom-flags", vec!["custom-flags"]),
        (
            "use custom flags with multiple arguments",
            "-ffdx -e cache/",
            vec!["-ffdx", "-e", "cache/"],
        ),
        ("disabled", "none", vec![]),
    ] {
        check(cases, T, format!("GitCleanFlags/{name}"), || {
            eq(
                "flags",
                settings("GIT_CLEAN_FLAGS", value).git_clean_flags,
                owned(&want),
            )
        });
    }
    for (name, value, want) in [
        ("empty fetch flags", "", vec!["--prune", "--quiet"]),
        ("use custom flags", "custom-flags", vec!["custom-flags"]),
        (
            "use custom flags with multiple arguments",
            "--prune --tags --quiet",
            vec!["--prune", "--tags", "--quiet"],
        ),
        ("disabled", "none", vec![]),
    ] {
        check(cases, T, format!("GitFetchFlags/{name}"), || {
            eq(
                "flags",
                settings("GIT_FETCH_EXTRA_FLAGS", value).git_fetch_extra_flags,
                owned(&want),
            )
        });
    }
    for (name, value, want) in [
        ("empty update flags", "", vec![]),
        (
            "use custom update flags",
            "custom-flags",
            vec!["custom-flags"],
        ),
        (
            "use custom update flags with multiple arguments",
            "--remote --jobs 4",
            vec!["--remote", "--jobs", "4"],
        ),
    ] {
        check(cases, T, format!("GitSubmoduleUpdateFlags/{name}"), || {
            eq(
                "flags",
                settings("GIT_SUBMODULE_UPDATE_FLAGS", value).submodule_update_flags,
                owned(&want),
            )
        });
    }
    // GetRepositoryObjectFormat: sha1 is git's default (no flag to git init).
    for (name, value, want) in [
        ("empty value", "", None),
        ("sha1", "sha1", None),
        ("sha256", "sha256", Some("sha256")),
    ] {
        check(
            cases,
            T,
            format!("GetRepositoryObjectFormat/{name}"),
            || {
                let job = SourcesJob {
                    vars: vec![var("GIT_STRATEGY", "fetch")],
                    git_info: json!({"repo_url": "https://test.remote/g/p.git", "sha": "0123456789",
                                 "ref": "main", "repo_object_format": value}),
                    ..Default::default()
                };
                let s = job.body();
                let init = s
                    .lines()
                    .find(|l| l.starts_with("git init "))
                    .ok_or("no git init")?;
                eq(
                    "object format",
                    init.split_once(" --object-format ")
                        .map(|(_, f)| f.to_string()),
                    want.map(String::from),
                )
            },
        );
    }
    // DefaultVariables.
    for (name, vars, key, want) in [
        (
            "get default CI_SERVER value",
            vec![],
            "CI_SERVER",
            Some("yes"),
        ),
        (
            "get default CI_PROJECT_DIR value",
            vec![],
            "CI_PROJECT_DIR",
            Some("/builds/test-namespace/test-repo"),
        ),
        (
            "get overwritten CI_PROJECT_DIR value",
            vec![(
                "GIT_CLONE_PATH",
                "/builds/go/src/gitlab.com/gitlab-org/gitlab-runner",
            )],
            "CI_PROJECT_DIR",
            Some("/builds/go/src/gitlab.com/gitlab-org/gitlab-runner"),
        ),
        (
            "CI_BUILD_NETWORK_NAME added when FF_NETWORK_PER_BUILD is enabled",
            vec![("FF_NETWORK_PER_BUILD", "true")],
            "CI_BUILD_NETWORK_NAME",
            Some("runner-1234-0-0-0"),
        ),
        (
            "CI_BUILD_NETWORK_NAME not added when FF_NETWORK_PER_BUILD is disabled",
            vec![("FF_NETWORK_PER_BUILD", "false")],
            "CI_BUILD_NETWORK_NAME",
            None,
        ),
        (
            "CI_BUILD_NETWORK_NAME cannot be overridden by job variables",
            vec![
                ("FF_NETWORK_PER_BUILD", "true"),
                ("CI_BUILD_NETWORK_NAME", "user-override"),
            ],
            "CI_BUILD_NETWORK_NAME",
            Some("runner-1234-0-0-0"),
        ),
    ] {
        check(cases, T, format!("DefaultVariables/{name}"), || {
            let p = payload(json!({
                "id": 0,
                "job_info": {"project_id": 0, "name": "job"},
                "git_info": {"repo_url": "https://gitlab.com/test-namespace/test-repo.git",
                             "sha": "0", "ref": "main"},
                "variables": job_vars(&vars),
            }));
            let mut r = runner();
            r.token = "1234".into();
            // With network_mode set too, the name is still exported (upstream).
            for network_mode in [None, Some("host".to_string())] {
                r.docker.network_mode = network_mode;
                let l = planned(&p, &r)?;
                eq(key, l.value(key).as_deref(), want)?;
            }
            Ok(())
        });
    }
}

fn build_vars_tables(cases: &mut Vec<Case>) {
    const T: &str = "common/build_test.go";
    for root in ["/root/dir1", "/root/dir2"] {
        check(cases, T, format!("BuildPredefinedVariables/{root}"), || {
            let mut r = runner();
            r.builds_dir = Some(root.into());
            let dir = planned(&payload(json!({})), &r)?
                .value("CI_PROJECT_DIR")
                .unwrap_or_default();
            eq("under the root", dir.starts_with(&format!("{root}/")), true)
        });
    }
    for (name, timeout, want) in [
        ("no timeout specified", 0, "7200"),
        ("timeout with arbitrary value", 180, "180"),
    ] {
        check(cases, T, format!("BuildTimeoutExposed/{name}"), || {
            let p = payload(json!({"runner_info": {"timeout": timeout}}));
            eq(
                "CI_JOB_TIMEOUT",
                planned(&p, &runner())?.value("CI_JOB_TIMEOUT"),
                Some(want.into()),
            )
        });
    }
    for (name, image, vars, want) in [
        (
            "normal image exposed",
            "alpine:3.14",
            vec![],
            Some("alpine:3.14"),
        ),
        (
            "image with variable expansion",
            "${IMAGE}:3.14",
            vec![("IMAGE", "alpine")],
            Some("alpine:3.14"),
        ),
        ("no image specified", "", vec![], None),
    ] {
        check(cases, T, format!("JobImageExposed/{name}"), || {
            let p = payload(json!({"image": {"name": image}, "variables": job_vars(&vars)}));
            let l = planned(&p, &runner())?;
            eq(
                "CI_JOB_IMAGE",
                l.get("CI_JOB_IMAGE").map(|v| v.value.clone()),
                want.map(String::from),
            )
        });
    }
    for (name, clone_path, want) in [
        (
            "test default build dir",
            None,
            "/builds/test-namespace/test-repo.tmp",
        ),
        (
            "test custom build dir with double trailing slashes",
            Some("/builds/go/src/gitlab.com/test-namespace/test-repo//"),
            "/builds/go/src/gitlab.com/test-namespace/test-repo.tmp",
        ),
    ] {
        check(cases, T, format!("TmpProjectDir/{name}"), || {
            let vars: Vec<(&str, &str)> = clone_path
                .map(|c| vec![("GIT_CLONE_PATH", c)])
                .unwrap_or_default();
            let p = payload(json!({
                "git_info": {"repo_url": "https://gitlab.com/test-namespace/test-repo.git",
                             "sha": "0", "ref": "main"},
                "variables": job_vars(&vars),
            }));
            let mut r = runner();
            r.custom_build_dir_enabled = Some(true);
            let plan = plan_job(&p, &r, Slot::default()).map_err(|e| e.message)?;
            eq("tmp dir", plan.paths.tmp_dir.as_str(), want)?;
            eq(
                "exported",
                plan.vars.value("RUNNER_TEMP_PROJECT_DIR"),
                Some(want.into()),
            )
        });
    }
}

fn artifact_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    let multiple = json!({
        "id": 1000, "token": "token",
        "artifacts": [
            {"paths": ["default"]},
            {"paths": ["on-success"], "when": "on_success"},
            {"paths": ["on-failure"], "when": "on_failure"},
            {"paths": ["always"], "when": "always"},
            {"paths": ["zip-archive"], "when": "always", "artifact_format": "zip", "artifact_type": "archive"},
            {"paths": ["gzip-junit"], "when": "always", "artifact_format": "gzip", "artifact_type": "junit"},
        ],
    });
    let uploader = |url: &str, id: &str, tail: &[&str]| {
        Step::Cmd(words(
            &[
                &[
                    "gitlab-runner-helper",
                    "artifacts-uploader",
                    "--url",
                    url,
                    "--token",
                    "token",
                    "--id",
                    id,
                    "--timeout",
                    "1h0m0s",
                    "--response-header-timeout",
                    "10m0s",
                ][..],
                tail,
            ]
            .concat(),
        ))
    };
    let upload_agrees_with = |vars: VarList,
                              job: Value,
                              url: &str,
                              succeeded: bool,
                              want: Vec<Step<'_>>|
     -> Result<(), String> {
        let p = payload(job);
        let paths = drover::executor::paths::JobPaths {
            root_dir: "/builds".into(),
            build_dir: "/builds/g/p".into(),
            tmp_dir: "/builds/g/p.tmp".into(),
            cache_dir: "/cache/g/p".into(),
        };
        let s = drover::executor::script::artifacts::upload(
            &drover::executor::script::artifacts::ArtifactInputs {
                payload: &p,
                vars: &vars,
                paths: &paths,
                url,
            },
            succeeded,
        )
        .ok_or("no upload stage")?
        .as_str()
        .to_string();
        let calls = s
            .lines()
            .filter(|l| l.contains(" artifacts-uploader "))
            .count();
        eq("uploader calls", calls, want.len())?;
        for w in &want {
            let line = w.render();
            if !s.lines().any(|l| l.trim() == line) {
                return Err(format!("{line:?} missing in:\n{s}"));
            }
        }
        Ok(())
    };
    let upload_agrees = |job: Value, url: &str, succeeded: bool, want: Vec<Step<'_>>| {
        upload_agrees_with(VarList::default(), job, url, succeeded, want)
    };
    // WriteUploadArtifactIncludesGenerateArtifactsMetadataArgs: with metadata asked for, the
    // formats other than zip (whose SLSA metadata drover does not make) upload as usual.
    for (format, tail) in [
        (
            "gzip",
            &["--path", "testpath", "--artifact-format", "gzip"][..],
        ),
        (
            "raw",
            &["--path", "testpath", "--artifact-format", "raw"][..],
        ),
        ("", &["--path", "testpath"][..]),
    ] {
        check(
            cases,
            T,
            format!("WriteUploadArtifactIncludesGenerateArtifactsMetadataArgs/{format}"),
            || {
                upload_agrees_with(
                    list(
                        vec![var("RUNNER_GENERATE_ARTIFACTS_METADATA", "true")],
                        "/builds/g/p.tmp",
                    ),
                    json!({"id": 1000, "token": "token",
                           "artifacts": [{"paths": ["testpath"], "artifact_format": format}]}),
                    "testurl",
                    true,
                    vec![uploader("testurl", "1000", tail)],
                )
            },
        );
    }
    let url = "https://example.com:3443";
    check(cases, T, "WriteWritingArtifactsOnSuccess", || {
        upload_agrees(
            multiple.clone(),
            url,
            true,
            vec![
                uploader(url, "1000", &["--path", "default"]),
                uploader(url, "1000", &["--path", "on-success"]),
                uploader(url, "1000", &["--path", "always"]),
                uploader(
                    url,
                    "1000",
                    &[
                        "--path",
                        "zip-archive",
                        "--artifact-format",
                        "zip",
                        "--artifact-type",
                        "archive",
                    ],
                ),
                uploader(
                    url,
                    "1000",
                    &[
                        "--path",
                        "gzip-junit",
                        "--artifact-format",
                        "gzip",
                        "--artifact-type",
                        "junit",
                    ],
                ),
            ],
        )
    });
    check(cases, T, "WriteWritingArtifactsOnFailure", || {
        upload_agrees(
            multiple.clone(),
            url,
            false,
            vec![
                uploader(url, "1000", &["--path", "on-failure"]),
                uploader(url, "1000", &["--path", "always"]),
                uploader(
                    url,
                    "1000",
                    &[
                        "--path",
                        "zip-archive",
                        "--artifact-format",
                        "zip",
                        "--artifact-type",
                        "archive",
                    ],
                ),
                uploader(
                    url,
                    "1000",
                    &[
                        "--path",
                        "gzip-junit",
                        "--artifact-format",
                        "gzip",
                        "--artifact-type",
                        "junit",
                    ],
                ),
            ],
        )
    });
    check(cases, T, "WriteWritingArtifactsWithExcludedPaths", || {
        let job = json!({
            "id": 1001, "token": "token",
            "artifacts": [{"paths": ["include/**"], "exclude": ["include/exclude/*"], "when": "always",
                           "artifact_format": "zip", "artifact_type": "archive"}],
        });
        let url = "https://gitlab.example.com";
        upload_agrees(
            job,
            url,
            true,
            vec![uploader(
                url,
                "1001",
                &[
                    "--path",
                    "include/**",
                    "--exclude",
                    "include/exclude/*",
                    "--artifact-format",
                    "zip",
                    "--artifact-type",
                    "archive",
                ],
            )],
        )
    });
}

fn variables_list_tables(cases: &mut Vec<Case>) {
    const T: &str = "common/spec/variables_test.go";
    check(cases, T, "VariablesJSON", || {
        let p = payload(json!({"variables": [
            {"key": "FOO", "value": "bar", "public": true, "internal": true, "file": true,
             "masked": true, "raw": true}
        ]}));
        let l = planned(&p, &runner())?;
        let v = l.get("FOO").ok_or("FOO missing")?;
        eq("value", v.value.as_str(), "bar")?;
        eq(
            "file, masked, raw",
            (v.file, v.masked, v.raw),
            (true, true, true),
        )?;
        // Public, and `internal` from the network is ignored: it reaches services as public.
        eq("hidden", v.hidden, false)
    });
    check(cases, T, "VariableString", || {
        eq(
            "entry",
            list(vec![var("key", "value")], "/t").env(),
            vec!["key=value".to_string()],
        )
    });
    check(cases, T, "PublicAndInternalVariables", || {
        // A payload variable GitLab did not mark public; a public one; one the runner adds.
        let p = payload(json!({"variables": [
            {"key": "key", "value": "value"},
            {"key": "public", "value": "value", "public": true},
        ]}));
        let l = planned(&p, &runner())?.public_or_internal();
        eq("key", l.get("key").is_some(), false)?;
        eq("public", l.get("public").is_some(), true)?;
        eq(
            "internal (CI_PROJECT_DIR)",
            l.get("CI_PROJECT_DIR").is_some(),
            true,
        )
    });
    check(cases, T, "MaskedVariables", || {
        let p = payload(json!({"variables": [
            {"key": "key", "value": "key_value"},
            {"key": "masked", "value": "masked_value", "masked": true},
        ]}));
        let phrases = drover::executor::mask_phrases(&p, &runner(), Slot::default());
        eq(
            "key_value",
            phrases.contains(&"key_value".to_string()),
            false,
        )?;
        eq(
            "masked_value",
            phrases.contains(&"masked_value".to_string()),
            true,
        )
    });
    check(cases, T, "ListVariables", || {
        let mut file = var("fileKey", "fileValue");
        file.file = true;
        let l = list(
            vec![
                var("key", "value"),
                file,
                var("RUNNER_TEMP_PROJECT_DIR", "/foo/bar"),
            ],
            "/foo/bar",
        );
        eq(
            "entries",
            l.env(),
            vec![
                "key=value".to_string(),
                "fileKey=/foo/bar/fileKey".to_string(),
                "RUNNER_TEMP_PROJECT_DIR=/foo/bar".to_string(),
            ],
        )
    });
    check(cases, T, "GetVariable", || {
        let l = list(
            vec![
                var("key", "key_value"),
                var("public", "public_value"),
                var("private", "private_value"),
            ],
            "/t",
        );
        eq("public", l.value("public"), Some("public_value".into()))?;
        eq("other", l.value("other").unwrap_or_default(), String::new())
    });
}

fn cleanup_script_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    for (name, clean_git_config, strategy, clone_url, configs, reject) in [
        ("no clean-git-config set", None, "", "", true, false),
        (
            "no clean-git-config set, but git strategy is none",
            None,
            "none",
            "",
            false,
            false,
        ),
        (
            "clean-git-config explicitly enabled",
            Some(true),
            "none",
            "",
            true,
            false,
        ),
        (
            "clean-git-config explicitly disabled",
            Some(false),
            "",
            "",
            false,
            false,
        ),
        (
            "with clone URL",
            None,
            "",
            "https://test-hostname",
            true,
            true,
        ),
    ] {
        check(
            cases,
            T,
            format!("writeCleanupScript/executor:not-shell/{name}"),
            || {
                // The job's variables (two file variables) and GIT_STRATEGY from the runner's
                // environment; no repository URL in the payload.
                let p = payload(json!({
                    "git_info": {"repo_url": "", "sha": "0", "ref": "main"},
                    "variables": [
                        {"key": "VAR_1", "value": "test", "file": true},
                        {"key": "VAR_2", "value": "test"},
                        {"key": "VAR_3", "value": "test", "file": true},
                        {"key": "VAR_4", "value": "test"},
                    ],
                }));
                let mut r = runner();
                r.environment = vec![format!("GIT_STRATEGY={strategy}")];
                r.clone_url = clone_url.into();
                let plan = plan_job(&p, &r, Slot::default()).map_err(|e| e.message)?;
                let project_path = plan.vars.value("CI_PROJECT_PATH").unwrap_or_default();
                let remote = GitAuth {
                    clone_url,
                    repo_url: "",
                    project_path: &project_path,
                    ..Default::default()
                }
                .remote_url();
                let s = drover::executor::script::user::cleanup_file_variables(
                    &plan.vars,
                    &plan.paths,
                    Some(&remote),
                    GitCleanup::new(&plan.settings, clean_git_config),
                )
                .as_str()
                .to_string();
                eq(
                    "credential reject",
                    s.contains("https test-hostname | git credential reject"),
                    reject,
                )?;
                let tmp = &plan.paths.tmp_dir;
                let removed = |f: &str| {
                    s.lines().any(|l| {
                        l.starts_with("rm -f ")
                            && l.split(' ').any(|w| w == quote(&format!("{tmp}/{f}")))
                    })
                };
                for (f, want) in [
                    ("VAR_1", true),
                    ("VAR_2", false),
                    ("VAR_3", true),
                    ("VAR_4", false),
                    ("gitlab_runner_env", true),
                    ("masking.db", true),
                    (".gitlab-runner.ext.conf", true),
                ] {
                    eq(f, removed(f), want)?;
                }
                let git_config = format!(
                    "rm -f {}",
                    quote(&format!("{}/.git/config", plan.paths.build_dir))
                );
                eq(
                    "git configs cleaned",
                    s.lines().any(|l| l == git_config),
                    configs,
                )?;
                let lock = format!(
                    "rm -f {}",
                    quote(&format!("{}/.git/index.lock", plan.paths.build_dir))
                );
                eq("locks removed", s.lines().any(|l| l == lock), true)
            },
        );
    }
}

fn remote_and_flag_tables(cases: &mut Vec<Case>) {
    const T: &str = "common/build_test.go";
    let repo = "http://gitlab-ci-token:job-token@test.remote/my/project.git";
    for (name, clone_url, tokenless, want) in [
        (
            "authenticated with CloneURL",
            "https://test.local/",
            false,
            "https://gitlab-ci-token:job-token@test.local/my/project.git",
        ),
        (
            "unauthenticated with CloneURL",
            "https://test.local/",
            true,
            "https://test.local/my/project.git",
        ),
        (
            "authenticated falls back to RepoURL preserving credentials",
            "",
            false,
            repo,
        ),
        (
            "unauthenticated falls back to RepoURL stripping credentials",
            "",
            true,
            "http://test.remote/my/project.git",
        ),
    ] {
        check(cases, T, format!("GetRemoteURL/{name}"), || {
            let auth = GitAuth {
                clone_url,
                repo_url: repo,
                token: "job-token",
                project_path: "my/project",
                tokenless,
                ..Default::default()
            };
            eq("remote", auth.remote_url(), want.to_string())
        });
    }
    let ff = "FF_USE_FASTZIP";
    for (name, config, job) in [
        (
            "TOML feature flag appears in GetAllVariables",
            Some(true),
            None,
        ),
        (
            "TOML overrides job variable in GetAllVariables",
            Some(true),
            Some("false"),
        ),
        (
            "job variable appears when no TOML setting",
            None,
            Some("true"),
        ),
    ] {
        check(
            cases,
            T,
            format!("GetAllVariables_FeatureFlagResolution/{name}"),
            || {
                let mut r = runner();
                if let Some(c) = config {
                    r.feature_flags.insert(ff.into(), c);
                }
                let vars: Vec<(&str, &str)> = job.map(|v| vec![(ff, v)]).unwrap_or_default();
                let l = planned(&payload(json!({"variables": job_vars(&vars)})), &r)?;
                eq("exported", l.value(ff), Some("true".into()))?;
                // One definition: the job's value does not also reach the job.
                eq(
                    "definitions",
                    l.vars.iter().filter(|v| v.key == ff).count(),
                    1,
                )
            },
        );
    }
}

/// The variables only GitLab sets (upstream's `TestPredefinedServerVariables` list).
const SERVER_ONLY_VARIABLES: &[&str] = &[
    "CHAT_CHANNEL",
    "CHAT_INPUT",
    "CI",
    "CI_API_V4_URL",
    "CI_COMMIT_BEFORE_SHA",
    "CI_COMMIT_DESCRIPTION",
    "CI_COMMIT_MESSAGE",
    "CI_COMMIT_REF_NAME",
    "CI_COMMIT_REF_PROTECTED",
    "CI_COMMIT_REF_SLUG",
    "CI_COMMIT_SHA",
    "CI_COMMIT_SHORT_SHA",
    "CI_COMMIT_BRANCH",
    "CI_COMMIT_TAG",
    "CI_COMMIT_TITLE",
    "CI_COMMIT_TIMESTAMP",
    "CI_CONFIG_PATH",
    "CI_DEBUG_TRACE",
    "CI_DEFAULT_BRANCH",
    "CI_DEPLOY_FREEZE",
    "CI_DEPLOY_PASSWORD",
    "CI_DEPLOY_USER",
    "CI_ENVIRONMENT_NAME",
    "CI_ENVIRONMENT_SLUG",
    "CI_ENVIRONMENT_URL",
    "CI_EXTERNAL_PULL_REQUEST_IID",
    "CI_EXTERNAL_PULL_REQUEST_SOURCE_REPOSITORY",
    "CI_EXTERNAL_PULL_REQUEST_TARGET_REPOSITORY",
    "CI_EXTERNAL_PULL_REQUEST_SOURCE_BRANCH_NAME",
    "CI_EXTERNAL_PULL_REQUEST_SOURCE_BRANCH_SHA",
    "CI_EXTERNAL_PULL_REQUEST_TARGET_BRANCH_NAME",
    "CI_EXTERNAL_PULL_REQUEST_TARGET_BRANCH_SHA",
    "CI_HAS_OPEN_REQUIREMENTS",
    "CI_JOB_ID",
    "CI_JOB_IMAGE",
    "CI_JOB_MANUAL",
    "CI_JOB_NAME",
    "CI_JOB_STAGE",
    "CI_JOB_TOKEN",
    "CI_JOB_JWT",
    "CI_JOB_URL",
    "CI_KUBERNETES_ACTIVE",
    "CI_MERGE_REQUEST_ASSIGNEES",
    "CI_MERGE_REQUEST_ID",
    "CI_MERGE_REQUEST_IID",
    "CI_MERGE_REQUEST_LABELS",
    "CI_MERGE_REQUEST_MILESTONE",
    "CI_MERGE_REQUEST_PROJECT_ID",
    "CI_MERGE_REQUEST_PROJECT_PATH",
    "CI_MERGE_REQUEST_PROJECT_URL",
    "CI_MERGE_REQUEST_REF_PATH",
    "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME",
    "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA",
    "CI_MERGE_REQUEST_SOURCE_PROJECT_ID",
    "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH",
    "CI_MERGE_REQUEST_SOURCE_PROJECT_URL",
    "CI_MERGE_REQUEST_TARGET_BRANCH_NAME",
    "CI_MERGE_REQUEST_TARGET_BRANCH_SHA",
    "CI_MERGE_REQUEST_TITLE",
    "CI_MERGE_REQUEST_EVENT_TYPE",
    "CI_NODE_INDEX",
    "CI_NODE_TOTAL",
    "CI_PAGES_DOMAIN",
    "CI_PAGES_URL",
    "CI_PIPELINE_ID",
    "CI_PIPELINE_IID",
    "CI_PIPELINE_SOURCE",
    "CI_PIPELINE_TRIGGERED",
    "CI_PIPELINE_URL",
    "CI_PROJECT_ID",
    "CI_PROJECT_NAME",
    "CI_PROJECT_NAMESPACE",
    "CI_PROJECT_ROOT_NAMESPACE",
    "CI_PROJECT_PATH",
    "CI_PROJECT_PATH_SLUG",
    "CI_PROJECT_REPOSITORY_LANGUAGES",
    "CI_PROJECT_TITLE",
    "CI_PROJECT_URL",
    "CI_PROJECT_VISIBILITY",
    "CI_REGISTRY",
    "CI_REGISTRY_IMAGE",
    "CI_REGISTRY_PASSWORD",
    "CI_REGISTRY_USER",
    "CI_REPOSITORY_URL",
    "CI_RUNNER_DESCRIPTION",
    "CI_RUNNER_ID",
    "CI_RUNNER_SHORT_TOKEN",
    "CI_RUNNER_TAGS",
    "CI_SERVER_URL",
    "CI_SERVER_HOST",
    "CI_SERVER_PORT",
    "CI_SERVER_PROTOCOL",
    "CI_SERVER_NAME",
    "CI_SERVER_REVISION",
    "CI_SERVER_VERSION",
    "CI_SERVER_VERSION_MAJOR",
    "CI_SERVER_VERSION_MINOR",
];

/// What the runner itself adds to every job (`DefaultEnvVariables`, `SharedEnvVariables`,
/// `PredefinedServerVariables`) and how service variables expand against the job's
/// (`VariablesExpansionWithSource`).
fn runner_variable_tables(cases: &mut Vec<Case>) {
    use drover::executor::script::variables::{job_variables, VarInputs};
    let runner_vars = |build_dir: &str| {
        let paths = drover::executor::paths::JobPaths {
            root_dir: "/builds".into(),
            build_dir: build_dir.into(),
            tmp_dir: format!("{build_dir}.tmp"),
            cache_dir: "/cache".into(),
        };
        let p = payload(json!({"git_info": {}, "token": ""}));
        let extra = VarInputs {
            job_image: None,
            short_token: "",
            network_name: None,
            slot: Slot::default(),
        };
        job_variables(&p, &runner(), &paths, &extra).expanded()
    };
    let has = |l: &VarList, entry: &str| -> Result<(), String> {
        let (k, v) = entry.split_once('=').ok_or("entry")?;
        eq(entry, l.value(k), Some(v.to_string()))
    };
    const B: &str = "common/build_test.go";
    for (name, dir) in [
        ("UNIX-style BuildDir", "/tmp/test-build/dir"),
        (
            "Windows-style BuildDir in MSYS bash executor and drive letter)",
            "/c/tmp/test-build/dir",
        ),
    ] {
        check(cases, B, format!("DefaultEnvVariables/{name}"), || {
            let l = runner_vars(dir);
            has(&l, &format!("CI_PROJECT_DIR={dir}"))?;
            has(&l, "CI_SERVER=yes")
        });
    }
    // The docker executor is not a shared environment.
    check(cases, B, "SharedEnvVariables/Value:false", || {
        let l = runner_vars("/builds/g/p");
        has(&l, "CI_DISPOSABLE_ENVIRONMENT=true")?;
        eq(
            "CI_SHARED_ENVIRONMENT",
            l.value("CI_SHARED_ENVIRONMENT"),
            None,
        )
    });
    // Upstream's case builds without a runner; a runner adds CI_RUNNER_SHORT_TOKEN (upstream's
    // runner config does too), so only that name is left out here.
    check(cases, B, "PredefinedServerVariables", || {
        let l = runner_vars("/builds/g/p");
        let set: Vec<&str> = SERVER_ONLY_VARIABLES
            .iter()
            .copied()
            .filter(|k| *k != "CI_RUNNER_SHORT_TOKEN" && l.get(k).is_some())
            .collect();
        eq("server-only variables the runner set", set, vec![])
    });
    check(
        cases,
        "common/spec/variables_test.go",
        "VariablesExpansionWithSource",
        || {
            let p = payload(json!({
                "variables": [
                    {"key": "public", "value": "public_value", "public": true},
                    {"key": "private", "value": "private_value", "public": false},
                ],
                "services": [{"name": "postgres:16", "variables": [
                    {"key": "a", "value": "$public"},
                    {"key": "b", "value": "${private}"},
                    {"key": "c", "value": "$undefined"},
                    {"key": "d", "value": "$private", "raw": true},
                ]}],
            }));
            let vars = planned(&p, &runner())?;
            let defs = services::definitions(&ServiceSettings::default(), &p.services, &vars)
                .map_err(|e| e.message)?;
            let def = defs.first().ok_or("no service")?;
            let env = services::service_env(&vars, def);
            let own: Vec<&str> = env
                .iter()
                .map(String::as_str)
                .filter(|e| ["a=", "b=", "c=", "d="].iter().any(|k| e.starts_with(k)))
                .collect();
            eq(
                "service variables",
                own,
                vec!["a=public_value", "b=private_value", "c=", "d=$private"],
            )
        },
    );
}

/// `writeUserScript` and the user-script rows of `SkipBuildStage`: which steps run, and what a
/// step's stage shows and runs (pre_build_script, the step's lines, post_build_script).
fn user_script_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    use drover::executor::script::user;
    let paths = drover::executor::paths::JobPaths {
        root_dir: "/builds".into(),
        build_dir: "/builds/g/p".into(),
        tmp_dir: "/builds/g/p.tmp".into(),
        cache_dir: "/cache/g/p".into(),
    };
    let vars = VarList::default();
    // The body of the stage `step_<stage>`, or None when no step makes that stage.
    let stage_body = |steps: Value, stage: &str, pre: Option<&str>, post: Option<&str>| {
        let p = payload(json!({ "steps": steps }));
        let step = user::script_steps(&p)
            .into_iter()
            .find(|s| s.name == stage)
            .cloned()?;
        Some(
            user::step_script(
                &vars,
                &paths,
                pre,
                &user::step_lines(&vars, &step),
                post,
                false,
            )
            .as_str()
            .to_string(),
        )
    };
    check(
        cases,
        T,
        "WriteUserScript/no build steps, after script",
        || {
            let p = payload(json!({ "steps": [] }));
            eq(
                "after_script runs",
                user::after_script_lines(&p).is_some(),
                false,
            )?;
            eq("script stages", user::script_steps(&p).len(), 0)
        },
    );
    check(cases, T, "WriteUserScript/single script step", || {
        let body = stage_body(
            json!([{"name": "script", "script": ["echo hello"]}]),
            "script",
            None,
            None,
        )
        .ok_or("no step_script stage")?;
        in_order(
            &body,
            &[Step::Notice("$ echo hello"), Step::Line("echo hello")],
        )?;
        eq("lines shown", body.matches("$ echo").count(), 1)
    });
    check(
        cases,
        T,
        "WriteUserScript/prebuild, multiple steps postBuild",
        || {
            let steps = json!([
                {"name": "script", "script": ["echo script"]},
                {"name": "release", "script": ["echo release"]},
                {"name": "a11y", "script": ["echo a11y"]},
            ]);
            let body = stage_body(
                steps,
                "release",
                Some("echo prebuild"),
                Some("echo postbuild"),
            )
            .ok_or("no step_release stage")?;
            in_order(
                &body,
                &[
                    Step::Notice("$ echo prebuild"),
                    Step::Line("echo prebuild"),
                    Step::Notice("$ echo release"),
                    Step::Line("echo release"),
                    Step::Notice("$ echo postbuild"),
                    Step::Line("echo postbuild"),
                ],
            )?;
            eq(
                "other steps",
                body.contains("echo script") || body.contains("a11y"),
                false,
            )
        },
    );
    // ScriptSections: multi-line commands become collapsed sections showing the whole command
    // only with FF_SCRIPT_SECTIONS and GitLab's trace_sections; single lines are always shown
    // as `$ <line>`.
    let multi = [
        "Multi line\n\t\t\t\t\tscript 1",
        "Multi line\n\t\t\t\t\tscript 2",
        "Multi line\n\t\t\t\t\tscript 3",
    ];
    let single = ["script 1", "script 2", "script 3"];
    for (ff, sections, lines) in [
        (true, true, &multi),
        (true, true, &single),
        (false, false, &single),
        (true, false, &single),
        (false, true, &single),
    ] {
        let name = format!(
            "ScriptSections/feature flag {ff}, trace sections {sections}{}",
            if lines[0].contains('\n') {
                ", multi-line"
            } else {
                ""
            }
        );
        check(cases, T, name, || {
            let p = payload(json!({
                "steps": [{"name": "script", "script": lines}],
                "features": {"trace_sections": sections},
            }));
            let vars = list(
                vec![var("FF_SCRIPT_SECTIONS", &ff.to_string())],
                "/builds/g/p.tmp",
            );
            let on = user::script_sections(&p, &vars);
            let step = user::script_steps(&p)
                .first()
                .copied()
                .cloned()
                .ok_or("no step")?;
            let body = user::step_script(
                &vars,
                &paths,
                Some("echo prebuild"),
                &user::step_lines(&vars, &step),
                Some("echo postbuild"),
                on,
            );
            let body = body.as_str();
            let mut steps = vec![Step::Notice("$ echo prebuild"), Step::Line("echo prebuild")];
            let shown: Vec<String> = lines.iter().map(|l| format!("$ {l}")).collect();
            let sectioned: Vec<String> = shown
                .iter()
                .map(|s| quote(&format!("\x1b[32;1m{s}\x1b[0;m")))
                .collect();
            for (i, l) in lines.iter().enumerate() {
                if l.contains('\n') {
                    // A collapsed section whose header is the whole command, then the command.
                    let start = body
                        .lines()
                        .find(|b| {
                            b.starts_with("printf ")
                                && b.contains(&format!(
                                    ":section_script_step_{i}[hide_duration=true,collapsed=true]"
                                ))
                        })
                        .ok_or(format!("no section for command {i}:\n{body}"))?;
                    eq("section header", start.ends_with(&sectioned[i]), true)?;
                    eq(
                        "section ended",
                        body.contains(&format!(":section_script_step_{i}\r")),
                        true,
                    )?;
                    eq("command run", body.contains(&format!("\n{l}\n")), true)?;
                } else {
                    steps.push(Step::Notice(&shown[i]));
                    steps.push(Step::Line(l));
                }
            }
            steps.push(Step::Notice("$ echo postbuild"));
            steps.push(Step::Line("echo postbuild"));
            in_order(body, &steps)?;
            eq(
                "collapsed notices",
                body.contains("collapsed multi-line command"),
                false,
            )
        });
    }
    check(
        cases,
        T,
        "SkipBuildStage/step_script/don't skip if user script is defined",
        || {
            let p =
                payload(json!({"steps": [{"name": "script", "script": ["echo 'hello world'"]}]}));
            let names: Vec<&str> = user::script_steps(&p)
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            eq("stages", names, vec!["script"])
        },
    );
    check(
        cases,
        T,
        "SkipBuildStage/after_script/don't skip if an after script is defined and has content",
        || {
            let p = payload(
                json!({"steps": [{"name": "after_script", "script": ["echo 'hello world'"]}]}),
            );
            eq(
                "after_script lines",
                user::after_script_lines(&p).map(<[String]>::to_vec),
                Some(vec!["echo 'hello world'".to_string()]),
            )
        },
    );
}

/// The lines of `body` that write the config file `file` (`rm -f`, `git config -f`), run in bash
/// with `file` at `at`; then `git config --list` of it.
fn config_written(body: &str, file: &str, at: &std::path::Path) -> Result<Vec<String>, String> {
    let q = quote(file);
    let lines: Vec<String> = body
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with(&format!("git config -f {q} "))
                || l.starts_with(&format!("git config --file {q} "))
        })
        .map(|l| l.replace(&q, &quote(&at.display().to_string())))
        .collect();
    let dir = at.parent().ok_or("no parent dir")?;
    let (code, out) = run_bash(
        &format!(
            "set -e\n{}\ngit config -f {} --list",
            lines.join("\n"),
            quote(&at.display().to_string())
        ),
        dir,
    )?;
    eq("exit", code, Some(0))?;
    Ok(out.lines().map(str::to_string).collect())
}

/// `FF_GIT_URLS_WITHOUT_TOKENS`: the external git config (`SetupExternalConfigFile`, both flag
/// values), the `GIT_CONFIG_GLOBAL` seed and its export in every stage.
fn tokenless_tables(cases: &mut Vec<Case>) {
    const T: &str = "shells/abstract_test.go";
    type Rewrites = &'static [(&'static str, &'static str)];
    // The job-token rewrites the rows share.
    const CLONE_REMOTE: (&str, &str) = (
        "https://gitlab-ci-token:some-token@some.clone.url/project/repo.git",
        "https://some.clone.url/project/repo.git",
    );
    const CLONE_BASE: (&str, &str) = (
        "https://gitlab-ci-token:some-token@some.clone.url",
        "https://some.clone.url",
    );
    const GITLAB_COM: (&str, &str) = (
        "https://gitlab-ci-token:some-token@some.gitlab.com",
        "https://some.gitlab.com",
    );
    const CLONE_SCP: (&str, &str) = (
        "https://gitlab-ci-token:some-token@some.clone.url/",
        "git@some.server.host:",
    );
    const CLONE_SSH: (&str, &str) = (
        "https://gitlab-ci-token:some-token@some.clone.url",
        "ssh://git@some.server.host",
    );

    struct Row {
        name: &'static str,
        clone_url: &'static str,
        credentials_url: &'static str,
        repo_url: &'static str,
        force_https: bool,
        server_host: &'static str,
        ssh_host: &'static str,
        ssh_port: &'static str,
        remote: &'static str,
        with_tokens: Rewrites,
        without_tokens: Rewrites,
    }
    let base = Row {
        name: "",
        clone_url: "",
        credentials_url: "",
        repo_url: "",
        force_https: false,
        server_host: "",
        ssh_host: "",
        ssh_port: "",
        remote: "",
        with_tokens: &[],
        without_tokens: &[],
    };
    let rows = [
        Row {
            name: "default",
            repo_url: "https://some.gitlab.url/project/repo.git",
            remote: "https://some.gitlab.url/project/repo.git",
            ..base
        },
        Row {
            name: "with clone URL",
            repo_url: "https://some.gitlab.com/project/repo",
            clone_url: "https://some.clone.url",
            remote: "https://some.clone.url/project/repo.git",
            with_tokens: &[CLONE_REMOTE, CLONE_BASE, GITLAB_COM],
            ..base
        },
        Row {
            name: "with cred URL",
            repo_url: "https://some.gitlab.url/project/repo.git",
            credentials_url: "https://some.cred.url",
            force_https: true,
            server_host: "some.server.host",
            remote: "https://some.gitlab.url/project/repo.git",
            with_tokens: &[
                (
                    "https://gitlab-ci-token:some-token@some.cred.url",
                    "https://some.cred.url",
                ),
                (
                    "https://gitlab-ci-token:some-token@some.cred.url/",
                    "git@some.server.host:",
                ),
                (
                    "https://gitlab-ci-token:some-token@some.cred.url",
                    "ssh://git@some.server.host",
                ),
                (
                    "https://gitlab-ci-token:some-token@some.gitlab.url",
                    "https://some.gitlab.url",
                ),
            ],
            without_tokens: &[
                ("https://some.cred.url/", "git@some.server.host:"),
                ("https://some.cred.url", "ssh://git@some.server.host"),
            ],
            ..base
        },
        Row {
            name: "with clone URL and force HTTPS",
            repo_url: "https://some.gitlab.com/project/repo",
            clone_url: "https://some.clone.url",
            force_https: true,
            server_host: "some.server.host",
            remote: "https://some.clone.url/project/repo.git",
            with_tokens: &[CLONE_REMOTE, CLONE_BASE, CLONE_SCP, CLONE_SSH, GITLAB_COM],
            without_tokens: &[
                ("https://some.clone.url/", "git@some.server.host:"),
                ("https://some.clone.url", "ssh://git@some.server.host"),
            ],
            ..base
        },
        Row {
            name: "with clone URL, force HTTPS, and ssh host&port",
            repo_url: "https://some.gitlab.com/project/repo",
            clone_url: "https://some.clone.url",
            force_https: true,
            ssh_host: "some.ssh.server",
            ssh_port: "4444",
            remote: "https://some.clone.url/project/repo.git",
            with_tokens: &[
                CLONE_REMOTE,
                CLONE_BASE,
                (
                    "https://gitlab-ci-token:some-token@some.clone.url",
                    "ssh://git@some.ssh.server:4444",
                ),
                GITLAB_COM,
            ],
            without_tokens: &[("https://some.clone.url", "ssh://git@some.ssh.server:4444")],
            ..base
        },
    ];
    // "with bad repo URL": no external config is written and the job fails (upstream: a
    // system failure naming the parse error); drover refuses it when planning the job.
    for tokenless in [true, false] {
        let name = format!(
            "SetupExternalConfigFile/FF_GIT_URLS_WITHOUT_TOKENS:{tokenless}/with bad repo URL"
        );
        check(cases, T, name, || {
            let p = payload(json!({
                "git_info": {"repo_url": "https://[invalid/", "sha": "0123456789abcdef", "ref": "main"},
                "variables": job_vars(&[
                    ("GIT_STRATEGY", "fetch"),
                    ("FF_GIT_URLS_WITHOUT_TOKENS", if tokenless { "true" } else { "false" }),
                ]),
            }));
            match plan_job(&p, &runner(), Slot::default()) {
                Ok(_) => Err("the job was planned".into()),
                Err(e) => {
                    eq(
                        "reason",
                        e.reason,
                        drover::executor::error::FailureReason::RunnerSystemFailure,
                    )?;
                    eq(
                        "message names the URL's setting",
                        e.message.contains("git_info.repo_url") && !e.message.contains("[invalid"),
                        true,
                    )
                }
            }
        });
    }
    let helper = r#"!f(){ if [ "$1" = "get" ] ; then echo "password=${CI_JOB_TOKEN}" ; fi ; } ; f"#;
    for tokenless in [true, false] {
        for row in &rows {
            let name = format!(
                "SetupExternalConfigFile/FF_GIT_URLS_WITHOUT_TOKENS:{tokenless}/{}",
                row.name
            );
            check(cases, T, name, || {
                let project_path = row
                    .repo_url
                    .splitn(4, '/')
                    .nth(3)
                    .map(|p| format!("/{}", p.trim_end_matches(".git")))
                    .unwrap_or_default();
                let project_path = project_path.trim_start_matches('/');
                let auth = GitAuth {
                    clone_url: row.clone_url,
                    credentials_url: row.credentials_url,
                    repo_url: row.repo_url,
                    token: "some-token",
                    force_https: row.force_https,
                    ssh_host: if row.ssh_host.is_empty() {
                        row.server_host
                    } else {
                        row.ssh_host
                    },
                    ssh_port: row.ssh_port,
                    project_path,
                    tokenless,
                };
                eq(
                    "remote",
                    drover::executor::paths::url_without_credentials(&auth.remote_url()),
                    row.remote.to_string(),
                )?;
                let job = SourcesJob {
                    vars: vec![var("GIT_STRATEGY", "fetch")],
                    git_info: json!({"repo_url": row.repo_url, "sha": "0123456789abcdef",
                                     "ref": "main"}),
                    auth: Some(auth),
                    ..Default::default()
                };
                let dir = temp_dir()?;
                // git groups a key's values in the file; upstream may also set
                // `transfer.bundleURI` (FF_USE_GIT_BUNDLE_URIS).
                let mut got: Vec<String> = config_written(
                    &job.body(),
                    "/builds/g/p.tmp/.gitlab-runner.ext.conf",
                    &dir.path().join("ext.conf"),
                )?
                .into_iter()
                .filter(|l| l != "transfer.bundleuri=true")
                .collect();
                got.sort();
                let rewrites = if tokenless {
                    row.without_tokens
                } else {
                    row.with_tokens
                };
                let mut want: Vec<String> = rewrites
                    .iter()
                    .map(|(with, plain)| format!("url.{with}.insteadof={plain}"))
                    .collect();
                if tokenless {
                    let host = drover::executor::paths::url_base(row.remote).ok_or("host")?;
                    want.push(format!("credential.{host}.helper="));
                    want.push(format!("credential.{host}.helper={helper}"));
                    want.push(format!("credential.{host}.username=gitlab-ci-token"));
                }
                want.sort();
                eq("external git config", got, want)
            });
        }
    }
    for (name, on, id, want) in [
        (
            "FF on (default) + corrID set forwards",
            true,
            "abc-corr-id",
            Some("abc-corr-id"),
        ),
        ("FF off + corrID set drops", false, "abc-corr-id", None),
        ("FF on + empty corrID stays empty", true, "", None),
    ] {
        check(
            cases,
            "common/build_step_dispatch_test.go",
            format!("GitalyCorrelationID_GatedOnFeatureFlag/{name}"),
            || {
                let mut vars = vec![var("GIT_STRATEGY", "fetch")];
                if !on {
                    vars.push(var("FF_USE_GITALY_CORRELATION_ID", "false"));
                }
                let body = SourcesJob {
                    vars,
                    correlation: id,
                    ..Default::default()
                }
                .body();
                let dir = temp_dir()?;
                let headers: Vec<String> = config_written(
                    &body,
                    "/builds/g/p.tmp/.gitlab-runner.ext.conf",
                    &dir.path().join("ext.conf"),
                )?
                .into_iter()
                .filter(|l| l.starts_with("http.extraheader="))
                .collect();
                let notice =
                    |id: &str| Step::Notice(&format!("Gitaly correlation ID: {id}")).render();
                match want {
                    Some(id) => {
                        eq(
                            "headers",
                            headers,
                            vec![format!("http.extraheader=X-Gitaly-Correlation-ID: {id}")],
                        )?;
                        // Said before fetching, as upstream.
                        in_order(
                            &body,
                            &[Step::Line(&notice(id)), Step::Notice("Fetching changes...")],
                        )
                    }
                    None => {
                        eq("headers", headers, vec![])?;
                        eq("notice", body.contains("Gitaly correlation ID"), false)
                    }
                }
            },
        );
    }
    // handleGetSourcesStrategy, the clone without native clone, with and without tokens in URLs:
    // runner url unset, so the only rewrite is the remote's (none without tokens, where the
    // credential helper of the repository host answers).
    for tokenless in [true, false] {
        check(
            cases,
            T,
            format!("handleGetSourcesStrategy/clone strategy without native/FF_GIT_URLS_WITHOUT_TOKENS:{tokenless}"),
            || {
                let repo = "https://gitlab-ci-token:pass@example.com/project/repo.git";
                let clean = "https://example.com/project/repo.git";
                let body = SourcesJob {
                    vars: vec![
                        var("GIT_STRATEGY", "clone"),
                        var("FF_GIT_URLS_WITHOUT_TOKENS", &tokenless.to_string()),
                    ],
                    git_info: json!({"repo_url": repo, "sha": "0123456789abcdef", "ref": "main"}),
                    auth: Some(GitAuth {
                        repo_url: repo,
                        token: "pass",
                        tokenless,
                        ..Default::default()
                    }),
                    correlation: "foobar",
                    ..Default::default()
                }
                .body();
                let dir = temp_dir()?;
                let mut got: Vec<String> = config_written(
                    &body,
                    "/builds/g/p.tmp/.gitlab-runner.ext.conf",
                    &dir.path().join("ext.conf"),
                )?
                .into_iter()
                .filter(|l| {
                    l != "transfer.bundleuri=true"
                        && l != "http.extraheader=X-Gitaly-Correlation-ID: foobar"
                })
                .collect();
                got.sort();
                let want = if tokenless {
                    let h = "credential.https://example.com";
                    vec![
                        format!("{h}.helper="),
                        format!("{h}.helper={}", r#"!f(){ if [ "$1" = "get" ] ; then echo "password=${CI_JOB_TOKEN}" ; fi ; } ; f"#),
                        format!("{h}.username=gitlab-ci-token"),
                    ]
                } else {
                    vec![format!("url.{repo}.insteadof={clean}")]
                };
                eq("external git config", got, want)?;
                let rm = Step::Cmd(words(&["rm", "-rf", "/builds/g/p"])).render();
                let init = body.find("\ngit init ").ok_or("no git init")?;
                eq("the old clone goes first", body[..init].lines().any(|l| l == rm), true)?;
                let ua = format!("http.userAgent={}", upstream_git_user_agent());
                let fetch = Step::Cmd(words(&[
                    "git",
                    "-c",
                    &ua,
                    "fetch",
                    "origin",
                    "--no-recurse-submodules",
                    "--prune",
                    "--quiet",
                ]))
                .render();
                let [init, cd] = init_steps();
                in_order(
                    &body,
                    &[
                        Step::Notice("Fetching changes..."),
                        init,
                        cd,
                        Step::Line(&format!(
                            "if git remote add origin {} >/dev/null 2>&1; then",
                            quote(clean)
                        )),
                        Step::Line(&format!("git remote set-url origin {}", quote(clean))),
                        Step::Line(&format!(
                            "if [ -f .git/shallow ]; then {fetch} --unshallow; else {fetch}; fi"
                        )),
                    ],
                )
            },
        );
    }
    // FF_USE_GIT_PROACTIVE_AUTH: `-c http.<host>.proactiveAuth=basic` on the fetch and the
    // checkout, unscoped with a warning when the host cannot be told.
    let proactive = |on: bool, repo: &str| {
        SourcesJob {
            vars: vec![
                var("GIT_STRATEGY", "fetch"),
                var("FF_USE_GIT_PROACTIVE_AUTH", &on.to_string()),
            ],
            git_info: json!({"repo_url": repo, "sha": "01234567abcdef", "ref": "main"}),
            auth: Some(GitAuth {
                repo_url: repo,
                token: "job-token",
                ..Default::default()
            }),
            ..Default::default()
        }
        .body()
    };
    let ua = format!("http.userAgent={}", upstream_git_user_agent());
    for (name, on, repo, arg, warning) in [
        (
            "disabled returns nil",
            false,
            "https://gitlab.com/my/repo.git",
            None,
            None,
        ),
        (
            "enabled with valid URL returns scoped config",
            true,
            "https://gitlab.com/my/repo.git",
            Some("http.https://gitlab.com.proactiveAuth=basic"),
            None,
        ),
        (
            "enabled with URL including port returns scoped config",
            true,
            "https://gitlab.example.com:8443/my/repo.git",
            Some("http.https://gitlab.example.com:8443.proactiveAuth=basic"),
            None,
        ),
        (
            "enabled with invalid URL falls back to unscoped config and warns",
            true,
            "https://gitlab.com/%ZZ",
            Some("http.proactiveAuth=basic"),
            Some("proactive auth: can't get repository host, using unscoped config. "),
        ),
        (
            "enabled with empty URL falls back to unscoped config and warns",
            true,
            "",
            Some("http.proactiveAuth=basic"),
            Some("proactive auth: repository host is empty, using unscoped config"),
        ),
    ] {
        check(cases, T, format!("ProactiveAuthArgs/{name}"), || {
            let body = proactive(on, repo);
            let fetch = format!(
                "git -c {} {}fetch origin --no-recurse-submodules ",
                quote(&ua),
                arg.map(|a| format!("-c {} ", quote(a))).unwrap_or_default()
            );
            if !body.contains(&fetch) {
                return Err(format!("{fetch:?} missing in:\n{body}"));
            }
            if !on {
                eq("proactiveAuth", body.contains("proactiveAuth"), false)?;
            }
            match warning {
                Some(w) => {
                    // The warning line up to the end of the (fixed) message.
                    let shown = Step::Warning(w).render();
                    let prefix = shown.strip_suffix("\\x1b[0;m'").unwrap_or(&shown);
                    eq("warned", body.lines().any(|l| l.starts_with(prefix)), true)
                }
                None => eq("warned", body.contains("proactive auth:"), false),
            }
        });
    }
    for (name, on) in [
        ("proactive auth enabled on checkout", true),
        ("proactive auth disabled on checkout", false),
    ] {
        check(cases, T, format!("GitProactiveAuthCheckout/{name}"), || {
            let body = proactive(on, "https://gitlab.com/my/repo.git");
            let mut args = vec!["git", "-c", "submodule.recurse=false"];
            if on {
                args.extend(["-c", "http.https://gitlab.com.proactiveAuth=basic"]);
            }
            args.extend(["checkout", "-f", "-q", "01234567abcdef"]);
            in_order(
                &body,
                &[
                    Step::Notice("Checking out 01234567 as detached HEAD (ref is main)..."),
                    Step::Cmd(words(&args)),
                    Step::Cmd(words(&["git", "clean", "-ffdx"])),
                ],
            )
        });
    }
    check(cases, T, "SetupGlobalGitConfigSeed", || {
        let job = SourcesJob {
            vars: vec![
                var("GIT_STRATEGY", "fetch"),
                var("FF_GIT_URLS_WITHOUT_TOKENS", "true"),
            ],
            auth: Some(GitAuth {
                credentials_url: "https://test.remote",
                repo_url: "https://test.remote/g/p.git",
                token: "job-token",
                tokenless: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let body = job.body();
        let dir = temp_dir()?;
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".config/git")).map_err(|e| e.to_string())?;
        let seed = dir.path().join("seed");
        // An earlier seed is replaced, not added to.
        std::fs::write(&seed, "[include]\n\tpath = stale\n").map_err(|e| e.to_string())?;
        let q = quote("/builds/g/p.tmp/.glr.gconf");
        let lines: Vec<String> = body
            .lines()
            .map(str::trim)
            .filter(|l| l.contains(&q))
            .map(|l| l.replace(&q, &quote(&seed.display().to_string())))
            .collect();
        let run = |readable: bool| -> Result<Vec<String>, String> {
            for f in [".gitconfig", ".config/git/config"] {
                let p = home.join(f);
                if readable {
                    std::fs::write(&p, "").map_err(|e| e.to_string())?;
                } else {
                    let _ = std::fs::remove_file(&p);
                }
            }
            let (code, out) = run_bash(
                &format!(
                    "export HOME={}\n{}\ngit config -f {} --get-all include.path",
                    quote(&home.display().to_string()),
                    lines.join("\n"),
                    quote(&seed.display().to_string())
                ),
                dir.path(),
            )?;
            eq("exit", code, Some(0))?;
            Ok(out.lines().map(str::to_string).collect())
        };
        let h = home.display().to_string();
        eq(
            "includes",
            run(true)?,
            vec![
                format!("{h}/.gitconfig"),
                format!("{h}/.config/git/config"),
                "/builds/g/p.tmp/.gitlab-runner.ext.conf".to_string(),
            ],
        )?;
        eq(
            "includes without user configs",
            run(false)?,
            vec!["/builds/g/p.tmp/.gitlab-runner.ext.conf".to_string()],
        )
    });
    for on in [true, false] {
        check(
            cases,
            T,
            format!("writeExports_GitConfigGlobal/FF_GIT_URLS_WITHOUT_TOKENS={on}"),
            || {
                let vars = list(
                    vec![var("FF_GIT_URLS_WITHOUT_TOKENS", &on.to_string())],
                    "/builds/g/p.tmp",
                );
                let mut b = ScriptBody::new();
                drover::executor::script::user::write_exports(&mut b, &vars, true);
                let lines: Vec<&str> = b.as_str().lines().collect();
                let export = lines
                    .iter()
                    .position(|l| *l == "export GIT_CONFIG_GLOBAL=/builds/g/p.tmp/.glr.gconf");
                let dotenv = lines.iter().position(|l| l.contains("< \"$GITLAB_ENV\""));
                match (on, export, dotenv) {
                    (true, Some(e), Some(d)) => eq("exported after the dotenv lines", e > d, true),
                    (false, None, _) => eq(
                        "no GIT_CONFIG_GLOBAL",
                        b.as_str().contains("GIT_CONFIG_GLOBAL"),
                        false,
                    ),
                    _ => Err(format!("GIT_CONFIG_GLOBAL export wrong:\n{}", b.as_str())),
                }
            },
        );
    }
}

#[test]
fn env_conformance() {
    let mut cases = Vec::new();
    variables_tables(&mut cases);
    build_tables(&mut cases);
    cache_fallback_guard(&mut cases);
    cache_key_tables(&mut cases);
    cache_stage_tables(&mut cases);
    helper_cache_tables(&mut cases);
    bash_tables(&mut cases);
    shell_writer_tables(&mut cases);
    submodule_tables(&mut cases);
    sources_tables(&mut cases);
    git_cleanup_tables(&mut cases);
    skip_stage_tables(&mut cases);
    build_settings_tables(&mut cases);
    build_vars_tables(&mut cases);
    artifact_tables(&mut cases);
    variables_list_tables(&mut cases);
    cleanup_script_tables(&mut cases);
    remote_and_flag_tables(&mut cases);
    tokenless_tables(&mut cases);
    user_script_tables(&mut cases);
    runner_variable_tables(&mut cases);
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
