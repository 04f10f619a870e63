//! Bash script generation for the job's stages: quoting, the script skeleton, echo helpers and
//! the stage bodies (`prepare_script`, `get_sources`, `step_script`, `after_script`,
//! `cleanup_file_variables`).
//!
//! Every function here is pure: it turns the job and its settings into text that the stage
//! runner feeds to a container's shell on stdin. Nothing here talks to Docker or reads the
//! clock, so the scripts are unit-tested as strings.

pub mod artifacts;
pub mod cache;
pub mod sources;
pub mod user;
pub mod variables;

use crate::executor::trace::ansi;

/// Quotes a value for bash: bare when it is made only of `[A-Za-z0-9,-./@_]`, otherwise ANSI-C
/// quoted (`$'…'`) with control and non-ASCII bytes escaped.
pub fn quote(s: &str) -> String {
    let bare = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b",-./@_".contains(&b));
    if bare {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("$'");
    for b in s.bytes() {
        match b {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('\'');
    out
}

/// Builds the body of one stage script, line by line.
#[derive(Debug, Default, Clone)]
pub struct ScriptBody {
    text: String,
    script_sections: bool,
}

impl ScriptBody {
    /// An empty body.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty body whose multi-line user commands are each shown in a collapsed section
    /// when `on` (`FF_SCRIPT_SECTIONS` with `features.trace_sections`).
    pub fn with_script_sections(on: bool) -> Self {
        ScriptBody {
            text: String::new(),
            script_sections: on,
        }
    }

    /// Appends a raw shell line.
    pub fn line(&mut self, cmd: impl AsRef<str>) -> &mut Self {
        self.text.push_str(cmd.as_ref());
        self.text.push('\n');
        self
    }

    /// Prints a message in bold green.
    pub fn notice(&mut self, msg: &str) -> &mut Self {
        self.echo_coloured(ansi::BOLD_GREEN, msg)
    }

    /// Prints a warning in yellow.
    pub fn warning(&mut self, msg: &str) -> &mut Self {
        self.echo_coloured(ansi::YELLOW, msg)
    }

    /// Prints an error in bold red.
    pub fn error(&mut self, msg: &str) -> &mut Self {
        self.echo_coloured(ansi::BOLD_RED, msg)
    }

    /// Prints a plain message (prefixed with a reset).
    pub fn print(&mut self, msg: &str) -> &mut Self {
        self.line(format!("echo {}", quote(&format!("{}{msg}", ansi::RESET))))
    }

    fn echo_coloured(&mut self, colour: &str, msg: &str) -> &mut Self {
        self.line(format!(
            "echo {}",
            quote(&format!("{colour}{msg}{}", ansi::RESET))
        ))
    }

    /// Writes user commands as upstream does: each entry trimmed, echoed as `$ cmd` in bold
    /// green, then run. A multi-line entry is echoed as `$ first line # collapsed multi-line
    /// command`, or, with script sections, whole inside a collapsed section
    /// `section_<prefix>_<index>` that the shell opens and closes before the command runs.
    pub fn user_commands(&mut self, prefix: &str, commands: &[String]) -> &mut Self {
        for (i, c) in commands.iter().enumerate() {
            let c = c.trim();
            if c.is_empty() {
                self.line("echo");
                continue;
            }
            match c.split_once('\n') {
                None => {
                    self.notice(&format!("$ {c}"));
                }
                Some(_) if self.script_sections => {
                    let name = format!("section_{prefix}_{i}");
                    let now = "$(awk 'BEGIN{srand(); print srand()}')";
                    self.line(format!(
                        "printf '%b\\n' section_start:{now}:{name}[hide_duration=true,collapsed=true]\r{}{}",
                        ansi::CLEAR_LINE,
                        quote(&format!("{}$ {c}{}", ansi::BOLD_GREEN, ansi::RESET))
                    ));
                    self.line(format!(
                        "printf '%b\\n' section_end:{now}:{name}\r{}",
                        ansi::CLEAR_LINE
                    ));
                }
                Some((first, _)) => {
                    self.notice(&format!("$ {first} # collapsed multi-line command"));
                }
            }
            self.line(c);
        }
        self
    }

    /// The body text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Wraps the body in upstream's skeleton: a `TERM` trap that exits 1 (in the script and
    /// again in the subshell, where traps are reset), optional xtrace, `pipefail` when
    /// the shell has it, `errexit`, no `noclobber`, then the body run through `eval` in a
    /// subshell with stdin from `/dev/null` (user commands never read the script), `exit 0`.
    pub fn finish(&self, debug_trace: bool) -> String {
        let mut s = String::from("#!/usr/bin/env bash\n\ntrap 'exit 1' TERM\n\n");
        if debug_trace {
            s.push_str("set -o xtrace\n");
        }
        s.push_str("case \"$(set -o)\" in *pipefail*) set -o pipefail ;; esac\n");
        s.push_str("set -o errexit\nset +o noclobber\n");
        s.push_str("( trap 'exit 1' TERM\neval ");
        s.push_str(&quote(&self.text));
        s.push_str("\n) </dev/null\nexit 0\n");
        s
    }
}

/// The build container's command: `sh -c` with a script that execs the first shell found
/// (bash preferred), or prints "shell not found" and exits 1.
pub fn detect_shell_command() -> Vec<String> {
    let shells = [
        "/usr/local/bin/bash",
        "/usr/bin/bash",
        "/bin/bash",
        "/usr/local/bin/sh",
        "/usr/bin/sh",
        "/bin/sh",
        "/busybox/sh",
    ];
    let mut script = String::new();
    for (i, sh) in shells.iter().enumerate() {
        let kw = if i == 0 { "if" } else { "elif" };
        script.push_str(&format!("{kw} [ -x {sh} ]; then\n  exec {sh}\n"));
    }
    script.push_str("else\n  echo shell not found\n  exit 1\nfi\n");
    vec!["sh".into(), "-c".into(), script]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("abc/def-1.2@x,y_z"), "abc/def-1.2@x,y_z");
        assert_eq!(quote(""), "$''");
        assert_eq!(quote("a b"), "$'a b'");
        assert_eq!(quote("it's\n"), "$'it\\'s\\n'");
        assert_eq!(quote("\x1b[0m"), "$'\\x1b[0m'");
        assert_eq!(quote("é"), "$'\\xc3\\xa9'");
        assert_eq!(quote("$HOME"), "$'$HOME'");
    }

    #[test]
    fn user_commands_echo_then_run() {
        let mut b = ScriptBody::new();
        b.user_commands(
            "script_step",
            &["  echo hi ".into(), "".into(), "a\nb".into()],
        );
        let t = b.as_str();
        assert!(t.contains("echo $'\\x1b[32;1m$ echo hi\\x1b[0;m'\necho hi\n"));
        assert!(t.contains("\necho\n"));
        assert!(t.contains("$ a # collapsed multi-line command"));
        assert!(t.contains("\na\nb\n"));
    }

    #[test]
    fn script_sections_wrap_multi_line_commands() {
        let mut b = ScriptBody::with_script_sections(true);
        b.user_commands("script_step", &["echo one".into(), "a\nb".into()]);
        let t = b.as_str();
        assert!(
            t.contains("echo $'\\x1b[32;1m$ echo one\\x1b[0;m'\necho one\n"),
            "{t}"
        );
        assert!(
            t.contains(
                ":section_script_step_1[hide_duration=true,collapsed=true]\r\x1b[0K$'\\x1b[32;1m$ a\\nb\\x1b[0;m'\n"
            ),
            "{t}"
        );
        assert!(t.contains(":section_script_step_1\r\x1b[0K\na\nb\n"), "{t}");
        assert!(!t.contains("collapsed multi-line command"), "{t}");
    }

    #[test]
    fn skeleton_runs_in_bash() {
        let mut b = ScriptBody::new();
        b.line("x='it works'")
            .line("echo \"$x\"")
            .line("false")
            .line("echo unreachable");
        let script = b.finish(false);
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "it works\n");
        assert_eq!(out.status.code(), Some(1));
    }
}
