//! The derived search index beside the database: SQLite stays the truth, this answers `catalog/search` fast.
//!
//! It holds every kind: resources, templates, tools and prompts, one document per listing,
//! with the kind as an index filter term. The index lives in its own directory (`catalog.db` -> `catalog.search/`) and records in each
//! commit the store generation it reflects and the server priorities it used. It is kept up to
//! date from each swap's diff ([`SearchIndex::apply`]), or rebuilt from every stored entry
//! ([`SearchIndex::rebuild`]); [`SearchIndex::repair_needed`] says which one an index opened
//! at start needs. A deleted, corrupt or older-schema index directory is replaced by an empty
//! one that needs a rebuild.
//!
//! The merged view (one hit per URI or URI template, the winning server's entry) is a
//! per-document flag: each listing carries `wins` (it is the entry the merged catalog shows)
//! and `shared` (another server lists the same URI). Every diff recomputes both for the
//! groups it touches, from the listings of that group in the index (a term lookup, usually one
//! document); a change of priorities recomputes them for the shared groups only. A tool or
//! prompt is a group of its own (each server's `search` tool is another tool), so it always
//! wins. Queries without `server` filter on
//! `wins`, as an index term, so the filter takes part in top-k pruning like a word does.

mod directory;
mod error;
mod files;
pub(crate) mod gate;
mod index;
pub mod keeper;
pub mod prebuild;
mod query;
mod schema;
mod slots;
#[cfg(test)]
mod tests;
mod write;

pub use crate::protocol::{IndexPhase as Phase, IndexStatus, MatchMode};
pub use crate::store::IndexEntry as Entry;
pub use error::SearchError;
pub use index::{
    directory_for, Commit, Opened, Pin, Priorities, Repair, SearchIndex, ServerDiff,
    DEFAULT_TIME_LIMIT,
};
pub use query::{Page, MAX_MARKER_BYTES};
