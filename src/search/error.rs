//! How the search index fails (`SearchError`), and `lock`: a mutex taken whatever a panicking
//! holder left in it.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("search index error: {0}")]
    Index(#[from] tantivy::TantivyError),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not empty and is not a search index made by mcp-mirror; refusing to touch it"
    )]
    NotOurs { path: PathBuf },
    #[error("rebuild entries must come ordered by kind and URI or name ({later:?} came after {earlier:?})")]
    Unordered { earlier: String, later: String },
    #[error("the search took longer than its limit of {0:?}")]
    TimedOut(Duration),
    #[error("too many searches are running; try again")]
    Busy,
    #[error("{0}")]
    InvalidQuery(String),
    #[error("the search index is shutting down")]
    Cancelled,
    #[error("building a first load's index during its walk: {0}")]
    Source(String),
}

/// The guard of `mutex`, poisoned or not: every holder leaves its state whole between steps.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
