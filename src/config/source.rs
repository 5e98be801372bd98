//! The configuration file being read: turns a value's place in it into a line for errors, and
//! anchors relative paths at the file's directory.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::ConfigError;

/// The path and the text of one `daemon.toml`.
pub(super) struct SourceFile<'a> {
    pub path: &'a Path,
    pub text: &'a str,
}

impl SourceFile<'_> {
    /// The 1-based line on which `span` starts.
    pub fn line_of(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text[..end].matches('\n').count() + 1
    }

    /// An error at `span`, about `key`.
    pub fn error(&self, span: &Range<usize>, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.path.to_path_buf(),
            line: Some(self.line_of(span)),
            key: Some(key.to_string()),
            message: message.into(),
        }
    }

    /// A path from the file, resolved relative to the directory the file is in.
    pub fn resolve(&self, value: &str) -> PathBuf {
        let candidate = PathBuf::from(value);
        if candidate.is_absolute() {
            return candidate;
        }
        match self.path.parent() {
            Some(base) if !base.as_os_str().is_empty() => base.join(candidate),
            _ => Path::new(".").join(candidate),
        }
    }
}

/// Expands `%d` and `$CREDENTIALS_DIRECTORY` to systemd's credentials directory.
pub(super) fn expand_credentials(
    value: &str,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> String {
    match lookup_env("CREDENTIALS_DIRECTORY") {
        Some(directory) => value
            .replace("%d", &directory)
            .replace("$CREDENTIALS_DIRECTORY", &directory),
        None => value.to_string(),
    }
}
