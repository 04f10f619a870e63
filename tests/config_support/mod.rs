//! A generated `config.toml` with many runners, shared by the config load bench and the
//! load-work test.

/// A config of `runners` realistic `docker+machine` runners. Each has a key that repeats
/// another ignoring case (`idlecount` after `IdleCount`), so the loader also produces one
/// warning per runner.
pub fn many_runners(runners: usize) -> String {
    let mut text = String::from("concurrent = 10\ncheck_interval = 3\n");
    for i in 0..runners {
        text.push_str(&format!(
            r#"[[runners]]
  name = "runner-{i}"
  url = "https://gitlab.example.com/"
  token = "glrt-token{i}"
  executor = "docker+machine"
  limit = 10
  [runners.docker]
    image = "alpine:3"
    memory = "512m"
    cpus = "1.5"
  [runners.machine]
    IdleCount = 1
    idlecount = 1
    IdleTime = 600
    MachineDriver = "none"
    MachineName = "auto-{i}-%s"
"#
        ));
    }
    text
}
