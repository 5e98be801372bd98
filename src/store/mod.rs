//! The SQLite store: migrations, one writer thread that swaps snapshots, read-only query connections.

mod change_window;
mod clock;
mod definitions;
pub(crate) mod entry;
mod error;
mod follow;
mod full_text_search;
mod handle;
mod history;
mod index_source;
mod queries;
mod reader;
mod resource_search;
mod rows;
mod schema;
mod scopes;
pub(crate) mod snippet;
mod sql_text;
mod staged_walk;
pub(crate) mod uri_template;
mod views;
mod writer;

pub use change_window::{FeedPosition, WindowCount};
pub use definitions::{EntryListing, EntryRow, EntrySwap, KindCounts};
pub use follow::{FollowCursor, KeyedEntries};
pub use history::VersionRow;
pub use index_source::{
    Entry as IndexEntry, FeedGroups, IndexSource, LoadEvent, LoadFeed, ReadBackWatch,
    SourceSnapshot,
};
pub use queries::ChangePage;
pub use reader::Reader;
pub use resource_search::SearchRequest;
pub use rows::{
    drain_changes, CatalogChanged, CatalogRow, FullTextPage, ListingRow, RemovedServers,
    ResourceRow, SearchHit, ServerEntry, ServerSync, ServerUpdate, SwapOutcome, TemplateRow,
    WalkReport,
};
pub use scopes::ScopeUpdate;

pub use clock::now_ms;
pub use error::StoreError;
pub(crate) use handle::full_text_note;
pub use handle::Store;
pub use staged_walk::{StagedWalk, FIRST_LOAD_INDEX_HOLD, FIRST_LOAD_INDEX_LAG_ROWS};
pub use writer::DeltaOutcome;
