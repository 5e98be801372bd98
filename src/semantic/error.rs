//! The semantic index's error: a model file that cannot be read or does not fit.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SemanticError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("semantic model: {0}")]
    Model(String),
}
