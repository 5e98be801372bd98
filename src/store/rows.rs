//! The rows and records that cross the store's edge: what a walk gives it (`ResourceRow`,
//! `TemplateRow`, `WalkReport`), what a swap reports (`SwapOutcome`, `CatalogChanged`), the
//! servers' configuration and state updates, and what its read queries answer.

use serde_json::Value;
use tokio::sync::broadcast;

use crate::protocol::{Kind, TransportKind};

/// One resource as the store keeps it; built from the server's JSON by the walk.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceRow {
    pub uri: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub size: Option<i64>,
    pub annotations: Option<String>,
    pub icons: Option<String>,
    pub meta: Option<String>,
    pub raw: String,
    /// The content hash of the entry as listed (`entry::fit_entry`): the swap compares these.
    pub hash: i64,
    /// The entry was over `max_entry_bytes` and is stored without some of its fields.
    pub oversized: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TemplateRow {
    pub uri_template: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub raw: String,
    pub oversized: bool,
}

/// A configured server as the store records it.
#[derive(Debug, Clone)]
pub struct ServerEntry {
    pub name: String,
    pub priority: i64,
    pub transport: TransportKind,
    /// The size cap of the server's `resources/read` content cache; `None` turns it off.
    pub read_cache_bytes: Option<u64>,
    /// `history = true`: the server's resources keep a history of their versions.
    pub history: bool,
}

/// Sent to every subscriber after a committed change to the catalog; carries no URIs (the
/// change feed has them), so a subscriber that lags loses nothing it cannot query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogChanged {
    pub server: String,
    /// Which kind changed: `Resource` for a resource swap (resources and templates together,
    /// or a dropped server's snapshot), `Tool` or `Prompt` for an entry swap.
    pub kind: Kind,
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
    /// The change feed's newest sequence number after this change.
    pub latest_seq: i64,
}

/// What a subscriber's burst of queued catalog changes comes to, drained at once so a burst
/// of swaps is one notification per kind. Only changes `relevant` to the subscriber count
/// (a lag counts for every kind: what was missed is unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeBurst {
    /// Anything changed (or changes were missed while the subscriber lagged).
    pub changed: bool,
    /// The merged resource catalog changed, or may have: a lagging subscriber cannot know.
    pub resources: bool,
    /// The catalog's tools changed, or may have.
    pub tools: bool,
    /// The catalog's prompts changed, or may have.
    pub prompts: bool,
    /// The broadcast closed: no change comes after this burst.
    pub closed: bool,
}

impl ChangeBurst {
    fn note(&mut self, change: &CatalogChanged, relevant: &impl Fn(&CatalogChanged) -> bool) {
        if !relevant(change) {
            return;
        }
        match change.kind {
            Kind::Resource | Kind::Template => self.resources = true,
            Kind::Tool => self.tools = true,
            Kind::Prompt => self.prompts = true,
        }
    }

    fn lagged(&mut self) {
        (self.resources, self.tools, self.prompts) = (true, true, true);
    }
}

/// Drains every change queued behind `first` (what `recv` returned) into one `ChangeBurst`.
pub fn drain_changes(
    first: Result<CatalogChanged, broadcast::error::RecvError>,
    receiver: &mut broadcast::Receiver<CatalogChanged>,
    relevant: impl Fn(&CatalogChanged) -> bool,
) -> ChangeBurst {
    use broadcast::error::{RecvError, TryRecvError};
    let mut burst = ChangeBurst::default();
    match first {
        Ok(change) => burst.note(&change, &relevant),
        Err(RecvError::Lagged(_)) => burst.lagged(),
        Err(RecvError::Closed) => {
            burst.closed = true;
            return burst;
        }
    }
    burst.changed = true;
    loop {
        match receiver.try_recv() {
            Ok(change) => burst.note(&change, &relevant),
            Err(TryRecvError::Lagged(_)) => burst.lagged(),
            Err(TryRecvError::Empty) => return burst,
            Err(TryRecvError::Closed) => {
                burst.closed = true;
                return burst;
            }
        }
    }
}

/// What to do with the rows of servers that are no longer configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedServers {
    /// Delete the server and its snapshot.
    Drop,
    /// Keep the snapshot, served as before, with the server marked `offline`.
    KeepOffline,
}

/// The configured servers to record, and which of them carry on untouched (a reload that did
/// not change them keeps their state; every other one starts over).
#[derive(Debug, Clone)]
pub struct ServerSync {
    pub configured: Vec<ServerEntry>,
    pub untouched: Vec<String>,
    pub removed: RemovedServers,
    /// The bounds of every kept definition history (`[daemon] history_*`).
    pub history_bounds: crate::config::HistoryBounds,
}

/// What a session reports about its server; each variant is one state transition.
#[derive(Debug, Clone)]
pub enum ServerUpdate {
    Connecting,
    Connected {
        protocol_version: String,
        capabilities: Value,
        server_info: Value,
    },
    /// Connected, but the server declared no `resources` capability: nothing to mirror.
    NoResources,
    Walking,
    /// The snapshot is whole again: the server turns `synced` here, not at one kind's swap
    /// (a client that sees `synced` sees the walk's tools and prompts too), and its stale mark
    /// and last error go. `walked`: a walk's (or a bucket's load's) every list is swapped in,
    /// counted in `walks_ok`; otherwise a bucket follower resumed from its stored revision.
    Synced {
        walked: bool,
    },
    /// The walk failed; the last complete snapshot stays and is marked stale.
    WalkFailed {
        error: String,
    },
    /// The walk swapped nothing on purpose (an upstream mirror still loading): the snapshot
    /// stays, marked stale, with the reason.
    Held {
        reason: String,
    },
    /// Connected, but the push stream cannot be reopened; the snapshot stays, marked stale.
    Reconnecting {
        error: String,
    },
    /// The connection failed or dropped; a retry is scheduled.
    BackingOff {
        error: String,
        retry_at_ms: i64,
    },
    Stopped,
}

/// Numbers a walk reports with its commit.
#[derive(Debug, Clone, Copy, Default)]
pub struct WalkReport {
    pub started_at_ms: i64,
    pub duration_ms: i64,
    pub pages: u64,
    pub duplicates: u64,
    pub skipped: u64,
}

/// What a swap changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwapOutcome {
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
    pub resources: u64,
    pub templates: u64,
    /// Templates added, removed or changed (the feed has them, like resources).
    pub templates_touched: u64,
}

/// One page of a search SQLite's FTS5 answered, and the note its answer carries when the
/// full-text index lacked rows of a large swap in the snapshot it searched.
#[derive(Debug, Clone)]
pub struct FullTextPage {
    pub hits: Vec<SearchHit>,
    pub next: Option<usize>,
    pub note: Option<String>,
}

/// One search result, from any engine.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// A resource, unless the search index found another kind.
    pub kind: crate::protocol::Kind,
    pub server: String,
    /// A resource's URI or a template's URI template; empty for tools and prompts.
    pub uri: String,
    pub name: String,
    pub title: Option<String>,
    pub mime_type: Option<String>,
    pub description: Option<String>,
    pub score: f64,
    /// The best matching stretch of text with the matched words between highlight markers.
    pub snippet: Option<String>,
}

/// One entry of the merged catalog (a resource or a template): the server's object as
/// stored, its key (URI or URI template), and the server that wins it.
#[derive(Debug, Clone)]
pub struct CatalogRow {
    pub server: String,
    pub key: String,
    pub raw: String,
}

/// One server's listing of a URI.
#[derive(Debug, Clone)]
pub struct ListingRow {
    pub server: String,
    pub priority: i64,
    /// The resource as this server lists it.
    pub raw: String,
    pub stale: bool,
    pub snapshot_at_ms: Option<i64>,
}
