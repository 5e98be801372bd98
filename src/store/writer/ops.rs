//! The writer's operations (`WriteOp`) and what they carry: a walk's pages (`Batch`) and a followed upstream's delta (`Delta`).

use super::*;

pub(super) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub enum WriteOp {
    SyncServers {
        sync: ServerSync,
        reply: Reply<()>,
    },
    Ping {
        reply: Reply<()>,
    },
    UpdateServer {
        server: String,
        update: ServerUpdate,
        reply: Reply<()>,
    },
    Stage {
        walk_id: u64,
        server: String,
        batch: Batch,
        /// A followed upstream's delta: its resources are staged beside the snapshot they
        /// change, never as a first load, even onto an empty snapshot (`StagedCounts::against`).
        delta: bool,
        permit: OwnedSemaphorePermit,
        /// The walk's room for this page on its way to the search index: it goes with a first
        /// load's page to the index (which gives it back once the page is written there);
        /// `None` once the walk no longer waits for the index (`FIRST_LOAD_INDEX_HOLD`).
        index_permit: Option<OwnedSemaphorePermit>,
    },
    /// Swaps a staged walk in.
    Commit {
        walk_id: u64,
        server: String,
        report: WalkReport,
        reply: Reply<SwapOutcome>,
    },
    /// Applies the staged rows as a followed upstream's delta (`delta.rs`): the rest of the
    /// snapshot stays; its tools and prompts (staged by walks of their own) and its cursor go
    /// in the same transaction.
    CommitDelta {
        walk_id: u64,
        server: String,
        delta: Delta,
        reply: Reply<DeltaOutcome>,
    },
    Abort {
        walk_id: u64,
    },
    /// Moves or forgets a followed server's cursor after a full walk (`delta.rs`).
    SetFollowCursor {
        server: String,
        cursor: Option<crate::store::FollowCursor>,
        reply: Reply<()>,
    },
    /// Swaps a staged walk of tools or prompts in as the server's snapshot of `kind`
    /// (`entry_swap.rs`).
    CommitEntries {
        walk_id: u64,
        server: String,
        kind: Kind,
        reply: Reply<crate::store::EntrySwap>,
    },
    /// Records the scopes of a server's kinds (`scopes.rs`).
    RecordScopes {
        server: String,
        scopes: Vec<(Kind, crate::protocol::CacheScope)>,
        update: crate::store::ScopeUpdate,
        reply: Reply<()>,
    },
    /// Records the current tools and prompts as accepted (`kinds.rs`).
    Accept {
        server: Option<String>,
        reply: Reply<u64>,
    },
    CacheContents {
        server: String,
        uri: String,
        contents: String,
        limit_bytes: u64,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// What a followed upstream's delta removes, and the cursor it moves to.
pub struct Delta {
    pub removed: Vec<String>,
    /// The URI templates the delta touched, when it touched any: the staged ones are their
    /// new text, the rest of them are gone; every other template stays.
    pub templates: Option<Vec<String>>,
    /// The tools and prompts the delta touched, a kind per entry.
    pub entries: Vec<EntryDelta>,
    pub cursor: crate::store::FollowCursor,
}

/// The keys of one kind of tools or prompts a delta touched, staged by the walk `walk_id`:
/// the staged ones are their new text, the others of them are gone; every other entry stays.
pub struct EntryDelta {
    pub kind: Kind,
    pub walk_id: u64,
    pub touched: Vec<String>,
}

/// One page of a walk on its way to staging.
pub enum Batch {
    Resources(Vec<ResourceRow>),
    Templates(Vec<TemplateRow>),
    /// Tools or prompts, compared with the snapshot of their kind as they are staged.
    Entries(Kind, Vec<EntryRow>),
}

impl Batch {
    /// The entries' text, which the writer's batches are bounded by (`wal.rs`).
    pub(super) fn bytes(&self) -> usize {
        match self {
            Batch::Resources(rows) => rows.iter().map(|row| row.raw.len()).sum(),
            Batch::Templates(rows) => rows.iter().map(|row| row.raw.len()).sum(),
            Batch::Entries(_, rows) => rows.iter().map(|row| row.raw.len()).sum(),
        }
    }
}

/// What a followed upstream's delta changed: its resources and templates, and each kind of
/// tools or prompts it touched.
#[derive(Debug, Clone, Default)]
pub struct DeltaOutcome {
    pub swap: SwapOutcome,
    pub entries: Vec<(Kind, crate::store::EntrySwap)>,
}
