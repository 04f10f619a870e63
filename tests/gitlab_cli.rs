//! The registration command line against the GitLab simulator: register → list → verify →
//! unregister on a fresh config, comments kept, reset-token, verify --delete, --version,
//! unknown commands, and the systemd unit `install` writes.

mod test_certs;

use std::path::Path;
use std::process::Output;

use gitlab_sim::Sim;

const GLRT: &str = "glrt-t1_CliRunnerToken00001";

async fn drover(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_drover"));
    cmd.args(args)
        .env_remove("CI_SERVER_URL")
        .env_remove("CI_SERVER_TOKEN")
        .env_remove("REGISTRATION_TOKEN")
        .env_remove("CONFIG_FILE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.expect("run drover")
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_list_verify_unregister_on_a_fresh_config() {
    let sim = Sim::start().await.unwrap();
    sim.add_runner(GLRT);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    let cfg_s = cfg.to_str().unwrap();
    let out = drover(
        &[
            "register",
            "-c",
            cfg_s,
            "--non-interactive",
            "--url",
            sim.url(),
            "--token",
            GLRT,
            "--name",
            "box-1",
            "--executor",
            "docker",
            "--docker-image",
            "alpine:3",
            "--docker-volumes",
            "/certs",
            "--limit",
            "4",
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Runner registered successfully"),
        "{}",
        text(&out)
    );
    let file = read(&cfg);
    let loaded = drover::config::load_file(&cfg).expect("the written config loads");
    let r = &loaded.config.runners[0];
    assert_eq!(
        (r.name.as_str(), r.token.as_str(), r.executor.as_str()),
        ("box-1", GLRT, "docker")
    );
    assert!(r.id > 0);
    assert_eq!(r.limit, 4);
    assert!(r.token_obtained_at.is_some());
    let docker = r.docker.as_ref().unwrap();
    assert_eq!(docker.image, "alpine:3");
    assert_eq!(docker.volumes, ["/certs", "/cache"]);
    assert!(
        file.contains("concurrent = 1"),
        "a new file starts with the globals:\n{file}"
    );
    let sid = std::fs::read_to_string(dir.path().join(".runner_system_id")).unwrap();
    assert!(drover::gitlab::system_id::is_valid(sid.trim()));
    assert_eq!(
        sim.managers(GLRT),
        [sid.trim()],
        "verify created this manager"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cfg).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let out = drover(&["list", "-c", cfg_s], &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("box-1") && stderr.contains("Executor=docker"),
        "{}",
        text(&out)
    );
    assert!(
        stderr.contains("Token=CliRunner") && !stderr.contains(GLRT),
        "only the short token: {}",
        text(&out)
    );

    let out = drover(&["verify", "-c", cfg_s], &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is valid"),
        "{}",
        text(&out)
    );

    let out = drover(&["unregister", "-c", cfg_s, "--name", "box-1"], &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        sim.managers(GLRT).is_empty(),
        "only this manager is deleted"
    );
    assert_eq!(
        sim.runner_tokens(),
        [GLRT],
        "the runner itself stays in GitLab"
    );
    assert!(drover::config::load_file(&cfg)
        .unwrap()
        .config
        .runners
        .is_empty());
    let all = text(&out);
    assert!(!all.contains(GLRT), "{all}");
}

const EXISTING: &str = r#"# fleet config, hand-written
concurrent = 4 # four at once
check_interval = 3

[[runners]]
  # the old one
  name = "old"
  url = "https://gitlab.invalid"
  token = "glrt-oldoldoldoldold"
  executor = "docker"
  [runners.docker]
    image = "debian:12" # keep me
  [runners.kubernetes]
    namespace = "kept-verbatim"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_registration_keeps_the_file_and_its_comments() {
    let sim = Sim::start().await.unwrap();
    sim.add_registration_token("GR1348941legacyreg");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, EXISTING).unwrap();
    let out = drover(
        &[
            "register",
            "-c",
            cfg.to_str().unwrap(),
            "-n",
            "--url",
            sim.url(),
            "--executor",
            "docker+machine",
            "--docker-image",
            "alpine:3",
            "--name",
            "fleet",
            "--tag-list",
            "a, b",
            "--locked=false",
            "--machine-machine-driver",
            "google",
            "--machine-machine-name",
            "auto-%s",
            "--machine-idle-nodes",
            "2",
            "--machine-machine-options",
            "google-project=p",
            "--docker-disable-cache",
        ],
        &[("REGISTRATION_TOKEN", "GR1348941legacyreg")],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let file = read(&cfg);
    assert!(
        file.starts_with(EXISTING),
        "the old text is untouched:\n{file}"
    );
    let loaded = drover::config::load_file(&cfg).unwrap().config;
    assert_eq!(loaded.runners.len(), 2);
    let new = &loaded.runners[1];
    assert_eq!(new.name, "fleet");
    let (_, description, tags) = sim
        .runner_details(&new.token)
        .expect("registered in GitLab");
    assert_eq!(description, "fleet");
    assert_eq!(tags, ["a", "b"]);
    let body = sim.requests_to("POST", "/api/v4/runners")[0].json();
    assert_eq!(body["locked"], false);
    assert_eq!(body["run_untagged"], false);
    let m = new.machine.as_ref().unwrap();
    assert_eq!(m.machine_driver, "google");
    assert_eq!(m.idle_count, 2);
    assert_eq!(
        new.docker.as_ref().unwrap().volumes,
        Vec::<String>::new(),
        "no /cache with the cache disabled"
    );

    // A glrt token with server-side attributes is refused before GitLab is called, and the
    // file is not touched.
    let before = read(&cfg);
    let out = drover(
        &[
            "register",
            "-c",
            cfg.to_str().unwrap(),
            "-n",
            "--url",
            sim.url(),
            "--token",
            GLRT,
            "--executor",
            "docker",
            "--docker-image",
            "alpine:3",
            "--locked=false",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--locked=false"),
        "{}",
        text(&out)
    );
    assert_eq!(read(&cfg), before);

    // Missing docker image: a clear error.
    let out = drover(
        &[
            "register",
            "-c",
            cfg.to_str().unwrap(),
            "-n",
            "--url",
            sim.url(),
            "--token",
            GLRT,
            "--executor",
            "docker",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--docker-image"),
        "{}",
        text(&out)
    );
    assert_eq!(read(&cfg), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_delete_and_reset_token_edit_the_file() {
    let sim = Sim::start().await.unwrap();
    let live = "glrt-t1_LiveRunner00000000";
    sim.add_runner(live);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    let text_cfg = format!(
        "concurrent = 2\n\n# live\n[[runners]]\n  name = \"live\"\n  url = \"{0}\"\n  id = 1\n  token = \"{live}\"\n  executor = \"docker\"\n  [runners.docker]\n    image = \"alpine\"\n\n# gone\n[[runners]]\n  name = \"gone\"\n  url = \"{0}\"\n  token = \"glrt-goneGONEgone\"\n  executor = \"docker\"\n  [runners.docker]\n    image = \"alpine\"\n",
        sim.url()
    );
    std::fs::write(&cfg, &text_cfg).unwrap();
    let c = cfg.to_str().unwrap();

    let out = drover(&["verify", "-c", c], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "a removed runner without --delete fails: {}",
        text(&out)
    );
    assert_eq!(read(&cfg), text_cfg);

    let out = drover(&["verify", "-c", c, "--delete"], &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    let after = read(&cfg);
    assert!(
        !after.contains("glrt-goneGONEgone") && after.contains("# live"),
        "{after}"
    );
    assert_eq!(
        drover::config::load_file(&cfg)
            .unwrap()
            .config
            .runners
            .len(),
        1
    );

    let out = drover(&["reset-token", "-c", c, "--name", "live"], &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    let now = drover::config::load_file(&cfg).unwrap().config;
    let new = &now.runners[0].token;
    assert!(new.starts_with("glrt-") && new != live);
    assert_eq!(sim.runner_tokens(), std::slice::from_ref(new));
    assert!(read(&cfg).contains("# live"));
    assert!(!text(&out).contains(new.as_str()), "{}", text(&out));

    let out = drover(&["unregister", "-c", c], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "unregister needs a selection: {}",
        text(&out)
    );
}

#[tokio::test]
async fn version_and_unknown_commands() {
    let out = drover(&["--version"], &[]).await;
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let labels: Vec<&str> = stdout
        .lines()
        .map(|l| l.split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(
        labels,
        [
            "Version",
            "Git revision",
            "Git branch",
            "GO version",
            "Built",
            "OS/Arch"
        ],
        "{stdout}"
    );
    assert!(stdout.starts_with("Version:      19.4.0\n"), "{stdout}");
    let short = drover(&["-v"], &[]).await;
    assert_eq!(short.stdout, out.stdout);
    let debug_first = drover(&["--debug", "--version"], &[]).await;
    assert_eq!(debug_first.stdout, out.stdout);

    let out = drover(&["exec", "docker", "job"], &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Command exec not found") && stderr.contains("register"),
        "{stderr}"
    );
}

#[tokio::test]
async fn install_writes_the_unit_and_uninstall_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let units = dir.path().join("units");
    let cfg = dir.path().join("etc/config.toml");
    let out = drover(
        &[
            "install",
            "--service",
            "drover-test",
            "--working-directory",
            "/home/gitlab-runner",
            "--config",
            cfg.to_str().unwrap(),
            "--user",
            "gitlab-runner",
        ],
        &[("DROVER_SYSTEMD_UNIT_DIR", units.to_str().unwrap())],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let unit = read(&units.join("drover-test.service"));
    let exec = unit
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .unwrap_or("");
    let expected = format!(
        "ExecStart=\"{}\" \"run\" \"--config\" \"{}\" \"--working-directory\" \"/home/gitlab-runner\" \"--service\" \"drover-test\" \"--user\" \"gitlab-runner\"",
        env!("CARGO_BIN_EXE_drover"),
        cfg.display()
    );
    assert_eq!(exec, expected, "{unit}");
    for line in [
        "After=network.target",
        "Restart=always",
        "WantedBy=multi-user.target",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing:\n{unit}");
    }
    assert!(!unit.contains("--syslog"));
    assert!(
        drover::config::load_file(&cfg).is_ok(),
        "install creates an empty config"
    );

    let out = drover(
        &["uninstall", "--service", "drover-test"],
        &[("DROVER_SYSTEMD_UNIT_DIR", units.to_str().unwrap())],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(!units.join("drover-test.service").exists());
    let out = drover(
        &["uninstall", "--service", "drover-test"],
        &[("DROVER_SYSTEMD_UNIT_DIR", units.to_str().unwrap())],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
}

/// `verify` as upstream: a runner GitLab cannot be asked about (unreachable, 5xx) is kept and
/// the command exits 0; only runners GitLab no longer knows fail it. Runners are selected by
/// name, or by token with `*`/empty URLs as wildcards, URLs compared as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_exits_0_when_gitlab_cannot_answer_and_selects_as_upstream() {
    let sim = Sim::start().await.unwrap();
    let live = "glrt-t1_VerifyLive0000000";
    sim.add_runner(live);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    let runner = |name: &str, url: &str, token: &str| {
        format!("[[runners]]\n  name = \"{name}\"\n  url = \"{url}\"\n  token = \"{token}\"\n  executor = \"docker\"\n  [runners.docker]\n    image = \"alpine\"\n")
    };
    let body = format!(
        "concurrent = 1\n{}{}",
        runner("live", sim.url(), live),
        runner("unreachable", &down, "glrt-t1_Unreachable000000"),
    );
    std::fs::write(&cfg, &body).unwrap();
    let c = cfg.to_str().unwrap();

    let out = drover(&["verify", "-c", c], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("failed"), "{}", text(&out));
    assert_eq!(read(&cfg), body, "nothing removed");

    // Selection: the token with a wildcard URL, the token with the URL written differently.
    let out = drover(&["verify", "-c", c, "--url", "*", "--token", live], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("runner_name=live"), "{}", text(&out));
    assert!(
        !text(&out).contains("runner_name=unreachable"),
        "{}",
        text(&out)
    );
    let slash = format!("{}/", sim.url());
    let out = drover(&["verify", "-c", c, "--url", &slash, "--token", live], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "a URL with a trailing slash is another URL: {}",
        text(&out)
    );
    // A name selects whatever the token says.
    let out = drover(
        &["verify", "-c", c, "--name", "live", "--token", "other"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("runner_name=live"), "{}", text(&out));
}

/// `--docker-pull-policy` (and `DOCKER_PULL_POLICY`) take comma-separated lists, as upstream's
/// flag does: `"if-not-present, always"` writes two policies, not one invalid entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_splits_pull_policy_lists() {
    for (flag, env) in [
        (Some(" if-not-present , always "), None),
        (None, Some("if-not-present,always")),
    ] {
        let sim = Sim::start().await.unwrap();
        sim.add_runner(GLRT);
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config.toml");
        let mut args = vec![
            "register",
            "-c",
            cfg.to_str().unwrap(),
            "--non-interactive",
            "--url",
            sim.url(),
            "--token",
            GLRT,
            "--executor",
            "docker",
            "--docker-image",
            "alpine:3",
        ];
        if let Some(f) = flag {
            args.extend(["--docker-pull-policy", f]);
        }
        let env: Vec<(&str, &str)> = env.map(|v| ("DOCKER_PULL_POLICY", v)).into_iter().collect();
        let out = drover(&args, &env).await;
        assert!(out.status.success(), "{}", text(&out));
        let loaded = drover::config::load_file(&cfg).unwrap().config;
        let docker = loaded.runners[0].docker.as_deref().expect("docker section");
        assert_eq!(
            docker.pull_policy,
            ["if-not-present", "always"],
            "{}",
            read(&cfg)
        );
    }
}

/// The TLS fallbacks are looked up in gitlab-runner's certificates directory, not beside the
/// `-c` file: a CA in `<dir of -c>/certs/` is not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_beside_the_config_file_are_not_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = test_certs::localhost_server(dir.path());
    let sim = Sim::start_tls(gitlab_sim::TlsFiles { cert, key })
        .await
        .unwrap();
    let live = "glrt-t1_CertsDirRunner0000";
    sim.add_runner(live);
    let url = sim.url().replace("127.0.0.1", "localhost");
    let conf_dir = dir.path().join("srv");
    std::fs::create_dir_all(conf_dir.join("certs")).unwrap();
    std::fs::copy(
        dir.path().join("ca.pem"),
        conf_dir.join("certs/localhost.crt"),
    )
    .unwrap();
    let cfg = conf_dir.join("config.toml");
    std::fs::write(
        &cfg,
        format!("[[runners]]\n  name = \"r\"\n  url = \"{url}\"\n  token = \"{live}\"\n  executor = \"docker\"\n"),
    )
    .unwrap();
    let out = drover(
        &["verify", "-c", cfg.to_str().unwrap()],
        &[("HOME", "/nonexistent")],
    )
    .await;
    let t = text(&out);
    assert!(t.contains("Verifying runner... failed"), "{t}");
    // With the CA named explicitly, the same runner verifies.
    let ca = dir.path().join("ca.pem");
    std::fs::write(
        &cfg,
        format!(
            "[[runners]]\n  name = \"r\"\n  url = \"{url}\"\n  token = \"{live}\"\n  tls-ca-file = \"{}\"\n  executor = \"docker\"\n",
            ca.display()
        ),
    )
    .unwrap();
    let out = drover(&["verify", "-c", cfg.to_str().unwrap()], &[]).await;
    assert!(text(&out).contains("is valid"), "{}", text(&out));
}
