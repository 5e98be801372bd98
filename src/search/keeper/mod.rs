//! Keeps the search index up to date with the store: repair at start, then each committed swap's diff (every kind), off the writer's path.
//!
//! The store writer announces every commit that changed the catalog (`Store::subscribe`, sent
//! after the commit, never waiting for anyone). On each announcement, and every few seconds
//! for priority changes that no swap announces, the keeper reads what the index missed from
//! the change feed in one read transaction, looks up the current entries the feed names
//! (URIs of resources, URI templates, names of tools and prompts), and applies them per
//! server and kind. The same pass is the repair at start: an index behind
//! the database catches up the same way, and one that is missing, reset, ahead of the
//! database or further behind than the feed reaches is rebuilt from every stored entry.
//! Until the first pass ends the index is not `ready`, and `catalog/search` answers from
//! SQLite's full-text index.

mod batches;
mod error;
mod keep_up;
#[cfg(test)]
mod tests;

pub use batches::{CATCH_UP_BATCH_BYTES, CATCH_UP_BATCH_ENTRIES};
pub use error::KeepError;
pub use keep_up::{keep_up, spawn};
