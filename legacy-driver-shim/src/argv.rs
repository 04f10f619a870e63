//! Command lines for `docker-machine`, built as argv vectors (never a shell string).
//!
//! Every invocation starts with the global `--bugsnag-api-token=<T>` flag, before the
//! subcommand; `<T>` is `$MACHINE_BUGSNAG_API_TOKEN` when set and non-empty, else `no-report`
//! (shared/spec/docker-machine-cli.md §1.1).

/// The bugsnag token used when `MACHINE_BUGSNAG_API_TOKEN` is unset or empty.
pub const NO_REPORT: &str = "no-report";

/// Builds docker-machine argv vectors (without the executable itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argv {
    bugsnag_token: String,
}

impl Argv {
    /// An argv builder using `token` for `--bugsnag-api-token`; `None` or an empty token
    /// gives `no-report`, as upstream does.
    pub fn new(token: Option<&str>) -> Self {
        let bugsnag_token = match token {
            Some(t) if !t.is_empty() => t.to_string(),
            _ => NO_REPORT.to_string(),
        };
        Argv { bugsnag_token }
    }

    fn with(&self, rest: &[&str]) -> Vec<String> {
        let mut v = Vec::with_capacity(rest.len() + 1);
        v.push(format!("--bugsnag-api-token={}", self.bugsnag_token));
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    }

    /// `create --driver D --<opt>… --<opt-with-name>… NAME`.
    ///
    /// Each `MachineOptions` entry `k=v` becomes `--k=v` (an entry without `=` a bare `--k`);
    /// each `MachineOptionsWithName` template has every `%s` replaced by `name` and follows the
    /// plain options.
    pub fn create(
        &self,
        driver: &str,
        name: &str,
        options: &[String],
        options_with_name: &[String],
    ) -> Vec<String> {
        let mut v = self.with(&["create", "--driver", driver]);
        v.extend(options.iter().map(|o| format!("--{o}")));
        v.extend(
            options_with_name
                .iter()
                .map(|o| format!("--{}", o.replace("%s", name))),
        );
        v.push(name.to_string());
        v
    }

    /// `rm -y NAME`: the ordinary removal.
    pub fn remove(&self, name: &str) -> Vec<String> {
        self.with(&["rm", "-y", name])
    }

    /// `rm -f NAME`: the forced removal after giving up, and shutdown drain's removal.
    pub fn force_remove(&self, name: &str) -> Vec<String> {
        self.with(&["rm", "-f", name])
    }

    /// `stop NAME`.
    pub fn stop(&self, name: &str) -> Vec<String> {
        self.with(&["stop", name])
    }

    /// `inspect NAME`: the existence check after `config.json` was found.
    pub fn inspect(&self, name: &str) -> Vec<String> {
        self.with(&["inspect", name])
    }

    /// `inspect NAME -f {{.HostOptions.AuthOptions.StorePath}}`: the TLS cert directory.
    pub fn store_path(&self, name: &str) -> Vec<String> {
        self.with(&[
            "inspect",
            name,
            "-f",
            "{{.HostOptions.AuthOptions.StorePath}}",
        ])
    }

    /// `config NAME`: the connectivity check.
    pub fn config(&self, name: &str) -> Vec<String> {
        self.with(&["config", name])
    }

    /// `url NAME`: the Docker host URL.
    pub fn url(&self, name: &str) -> Vec<String> {
        self.with(&["url", name])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_defaults_to_no_report() {
        assert_eq!(
            Argv::new(None).stop("m")[0],
            "--bugsnag-api-token=no-report"
        );
        assert_eq!(
            Argv::new(Some("")).stop("m")[0],
            "--bugsnag-api-token=no-report"
        );
        assert_eq!(
            Argv::new(Some("abc")).stop("m")[0],
            "--bugsnag-api-token=abc"
        );
    }

    #[test]
    fn create_orders_options_then_named_options_then_name() {
        let argv = Argv::new(None).create(
            "amazonec2",
            "runner-abc-auto-1-0a0b0c0d",
            &[
                "amazonec2-region=eu-west-1".into(),
                "amazonec2-use-private-address".into(),
            ],
            &["amazonec2-tags=name,%s".into()],
        );
        assert_eq!(
            argv,
            [
                "--bugsnag-api-token=no-report",
                "create",
                "--driver",
                "amazonec2",
                "--amazonec2-region=eu-west-1",
                "--amazonec2-use-private-address",
                "--amazonec2-tags=name,runner-abc-auto-1-0a0b0c0d",
                "runner-abc-auto-1-0a0b0c0d",
            ]
        );
    }

    #[test]
    fn removal_forms() {
        let a = Argv::new(None);
        assert_eq!(&a.remove("m")[1..], ["rm", "-y", "m"]);
        assert_eq!(&a.force_remove("m")[1..], ["rm", "-f", "m"]);
        assert_eq!(
            &a.store_path("m")[1..],
            [
                "inspect",
                "m",
                "-f",
                "{{.HostOptions.AuthOptions.StorePath}}"
            ]
        );
    }
}
