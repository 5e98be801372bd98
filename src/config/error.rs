//! `ConfigError` (one problem, naming the file, the line and the key) and `ConfigErrors` (every
//! problem of a file, with its warnings).

use std::path::PathBuf;

/// A configuration error that names the file, the line and the key at fault. It never quotes
/// a configured value that could be a secret, so it can be printed before any scrubber runs.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl ConfigError {
    fn render(&self) -> String {
        let mut text = self.file.display().to_string();
        if let Some(line) = self.line {
            text.push_str(&format!(":{line}"));
        }
        text.push_str(": ");
        if let Some(key) = &self.key {
            text.push_str(&format!("{key}: "));
        }
        text.push_str(&self.message);
        text
    }
}

/// Every problem that keeps a configuration file from being used, in the file's order by
/// table (`[daemon]`, each server, `[http]`, `[search]`, then the paths it names).
#[derive(Debug, thiserror::Error)]
#[error("{}", self.errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct ConfigErrors {
    pub errors: Vec<ConfigError>,
    /// The warnings found alongside, for `check` to print too.
    pub warnings: Vec<ConfigError>,
}
