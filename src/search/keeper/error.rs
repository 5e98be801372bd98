//! How a keeper pass fails (`KeepError`): the store's error or the index's.

use crate::store::StoreError;

/// A keeper pass's failure: reading the catalog, or writing the index.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] crate::search::SearchError),
}
