//! How the store fails (`StoreError`): SQLite's errors, a walk the writer refused, a closed writer.

use std::path::PathBuf;

/// Every way the store fails.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("cannot create the directory {path}: {source}")]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the database file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the database {path} has schema version {found}, newer than this mcp-mirror knows ({known}); use a newer mcp-mirror or another database"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("database error: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("the store's writer has stopped")]
    WriterGone,
    #[error("{0}")]
    Walk(String),
    #[error("invalid full-text query: {0}")]
    InvalidQuery(String),
    #[error("the search ran out of time and was cancelled (search_timeout); narrow the query")]
    SearchTimedOut,
}

impl StoreError {
    /// True when SQLite stopped the statement on request (a progress handler or interrupt).
    pub(crate) fn is_interrupted(&self) -> bool {
        matches!(self, StoreError::Sql(error)
            if error.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted))
    }
}
