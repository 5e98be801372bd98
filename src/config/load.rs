//! `load`: reads and validates `daemon.toml` into a `Loaded` config with its warnings (and
//! `parse`, the same on text, for the tests).

use std::path::Path;

use super::source::SourceFile;
use super::{environment, raw, validate};
use super::{Config, ConfigError, ConfigErrors};

/// A configuration file that validated, with what the daemon survives but should be told.
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    /// Problems that leave the daemon running with less (a model that cannot load, a token
    /// file others may read), each naming the file, the line and the key like an error.
    pub warnings: Vec<ConfigError>,
}

/// Reads and validates the configuration file at `path`: the one validation `serve`, `reload`
/// and `check` run, so they say the same words. Nothing is created, opened for writing or
/// started.
pub fn load(path: &Path) -> Result<Loaded, ConfigErrors> {
    let lookup_env = |name: &str| std::env::var(name).ok();
    let refused = |errors| ConfigErrors {
        errors,
        warnings: Vec::new(),
    };
    let text = std::fs::read_to_string(path).map_err(|error| {
        refused(vec![ConfigError {
            file: path.to_path_buf(),
            line: None,
            key: None,
            message: format!("cannot read the configuration file: {error}"),
        }])
    })?;
    let source = SourceFile { path, text: &text };
    let raw = raw::parse(&source).map_err(|error| refused(vec![error]))?;
    let config = validate::validate(&source, &raw, &lookup_env).map_err(refused)?;
    let findings = environment::check(&source, &raw, &config, &lookup_env);
    if findings.errors.is_empty() {
        Ok(Loaded {
            config,
            warnings: findings.warnings,
        })
    } else {
        Err(ConfigErrors {
            errors: findings.errors,
            warnings: findings.warnings,
        })
    }
}

/// Parses configuration text; `path` names the file in errors and anchors relative paths.
/// `lookup_env` reads the environment (`bearer_token_env`, `$CREDENTIALS_DIRECTORY`). The
/// first problem is the error; the paths the file names are not looked at (`load` does).
#[cfg(test)]
pub(crate) fn parse(
    path: &Path,
    text: &str,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let source = SourceFile { path, text };
    let raw = raw::parse(&source)?;
    validate::validate(&source, &raw, lookup_env).map_err(|mut errors| errors.remove(0))
}
