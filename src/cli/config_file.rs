//! Editing `config.toml` for `register`, `unregister`, `verify --delete` and `reset-token`:
//! the file is edited as a TOML document (toml_edit), so comments, key order and sections
//! drover does not model are kept; every write is checked by loading the result the way
//! `drover run` would, then replaces the file atomically with its permissions kept (0600 for a
//! new file, as it holds tokens).

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table};

use crate::config::{self, Config};

/// What a new config file starts with (as gitlab-runner writes it).
pub const NEW_FILE: &str = "concurrent = 1\ncheck_interval = 0\nshutdown_timeout = 0\n\n[session_server]\n  session_timeout = 1800\n";

/// A config file open for editing.
pub struct ConfigFile {
    /// Where it lives.
    pub path: PathBuf,
    /// The document, as written (comments included).
    pub doc: DocumentMut,
    /// The loaded config (environment variables in `url`/`token` expanded), runner `i` of which
    /// is `doc`'s `[[runners]]` entry `i`.
    pub config: Config,
    /// Whether the file did not exist.
    pub created: bool,
}

/// Why the file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file does not load.
    #[error("{0}")]
    Load(Box<config::ConfigError>),
    /// The file is not TOML drover can edit.
    #[error("{path}: cannot edit it as TOML: {message}")]
    Edit {
        /// The file.
        path: String,
        /// What was wrong.
        message: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ConfigFileError + '_ {
    move |source| ConfigFileError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl ConfigFile {
    /// Opens `path`; a missing file is an error unless `create`, when it starts as
    /// [`NEW_FILE`] (written only on [`ConfigFile::save`]).
    pub fn open(path: &Path, create: bool) -> Result<ConfigFile, ConfigFileError> {
        let (text, created) = match std::fs::read_to_string(path) {
            Ok(t) => (t, false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                (NEW_FILE.to_owned(), true)
            }
            Err(e) => return Err(io(path)(e)),
        };
        let loaded = config::load_str(&text, &path.display().to_string())
            .map_err(|e| ConfigFileError::Load(Box::new(e)))?;
        let doc: DocumentMut =
            text.parse()
                .map_err(|e: toml_edit::TomlError| ConfigFileError::Edit {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
        Ok(ConfigFile {
            path: path.to_owned(),
            doc,
            config: loaded.config,
            created,
        })
    }

    /// The `[[runners]]` array, created when missing.
    pub fn runners_mut(&mut self) -> Result<&mut ArrayOfTables, ConfigFileError> {
        let path = self.path.display().to_string();
        let item = self
            .doc
            .entry("runners")
            .or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()));
        item.as_array_of_tables_mut().ok_or(ConfigFileError::Edit {
            path,
            message: "runners is not an array of [[runners]] tables".into(),
        })
    }

    /// Runner entry `i`'s table.
    pub fn runner_mut(&mut self, i: usize) -> Result<&mut Table, ConfigFileError> {
        let path = self.path.display().to_string();
        self.runners_mut()?.get_mut(i).ok_or(ConfigFileError::Edit {
            path,
            message: format!("runner entry {i} is missing"),
        })
    }

    /// Removes runner entries by index (the loaded config is updated on save).
    pub fn remove_runners(&mut self, mut indexes: Vec<usize>) -> Result<(), ConfigFileError> {
        indexes.sort_unstable();
        indexes.dedup();
        let runners = self.runners_mut()?;
        for i in indexes.into_iter().rev() {
            if i < runners.len() {
                runners.remove(i);
            }
        }
        Ok(())
    }

    /// Checks that the edited document loads, then writes it atomically.
    pub fn save(&mut self) -> Result<(), ConfigFileError> {
        let text = self.doc.to_string();
        let loaded = config::load_str(&text, &self.path.display().to_string())
            .map_err(|e| ConfigFileError::Load(Box::new(e)))?;
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mode = std::fs::metadata(&self.path)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o600);
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "config.toml".into());
        let tmp = dir.join(format!(".{name}.drover-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
            std::fs::rename(&tmp, &self.path)
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&self.path)(e));
        }
        self.config = loaded.config;
        self.created = false;
        Ok(())
    }
}

/// Which runners a command acts on, as gitlab-runner selects them.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// `--name`.
    pub name: Option<String>,
    /// `--url`.
    pub url: Option<String>,
    /// `--token`.
    pub token: Option<String>,
    /// `--id` (reset-token).
    pub id: Option<i64>,
    /// `--all-runners`.
    pub all: bool,
}

impl Selection {
    /// The indexes of the selected runners (all of them when nothing narrows the choice and
    /// `all_by_default`).
    pub fn pick(&self, config: &Config, all_by_default: bool) -> Vec<usize> {
        let narrowing =
            self.name.is_some() || self.token.is_some() || self.url.is_some() || self.id.is_some();
        if self.all || (!narrowing && all_by_default) {
            return (0..config.runners.len()).collect();
        }
        config
            .runners
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                self.name.as_ref().is_none_or(|n| &r.name == n)
                    && self.token.as_ref().is_none_or(|t| &r.token == t)
                    && self.id.is_none_or(|id| r.id == id)
                    && self
                        .url
                        .as_ref()
                        .is_none_or(|u| r.url.trim_end_matches('/') == u.trim_end_matches('/'))
            })
            .map(|(i, _)| i)
            .collect()
    }
}
