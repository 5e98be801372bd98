//! The SQLite store: migrations, one writer thread that swaps snapshots, read-only query connections.

pub(crate) mod entry;
mod follow;
mod index_source;
mod kinds;
mod queries;
mod reader;
mod schema;
mod scopes;
mod sql_text;
pub(crate) mod uri_template;
mod views;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, Semaphore};

pub use follow::{FollowCursor, KeyedEntries};
pub use index_source::{Entry as IndexEntry, FeedDiff, IndexSource, LoadEvent, LoadFeed};
pub use kinds::{EntryHit, EntryListing, EntryRow, EntrySearch, EntrySwap, KindCounts};
pub use queries::{ChangePage, SearchRequest};
pub use reader::Reader;
pub use scopes::ScopeUpdate;

use crate::protocol::{Kind, ServerState, TransportKind};
use writer::{Batch, WriteOp};

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

impl CatalogChanged {
    /// Whether this change alters the merged resource catalog (what `resources/list` pages).
    pub fn changes_resources(&self) -> bool {
        matches!(self.kind, Kind::Resource | Kind::Template)
    }
}

/// What a subscriber's burst of queued catalog changes comes to, drained at once so a burst
/// of swaps is one notification. Only changes `relevant` to the subscriber count as resource
/// changes (a lag counts: what was missed is unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeBurst {
    /// Anything changed (or changes were missed while the subscriber lagged).
    pub changed: bool,
    /// The merged resource catalog changed, or may have: a lagging subscriber cannot know.
    pub resources: bool,
    /// The broadcast closed: no change comes after this burst.
    pub closed: bool,
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
        Ok(change) => burst.resources = change.changes_resources() && relevant(&change),
        Err(RecvError::Lagged(_)) => burst.resources = true,
        Err(RecvError::Closed) => {
            burst.closed = true;
            return burst;
        }
    }
    burst.changed = true;
    loop {
        match receiver.try_recv() {
            Ok(change) => burst.resources |= change.changes_resources() && relevant(&change),
            Err(TryRecvError::Lagged(_)) => burst.resources = true,
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
    /// The walk failed; the last complete snapshot stays and is marked stale.
    WalkFailed {
        error: String,
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

/// One server's row as the database records it.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    pub name: String,
    pub priority: i64,
    pub transport: TransportKind,
    pub state: ServerState,
    pub protocol_version: Option<String>,
    pub server_info: Option<Value>,
    pub resources: u64,
    pub templates: u64,
    pub stale: bool,
    pub snapshot_at_ms: Option<i64>,
    pub connected_at_ms: Option<i64>,
    pub retry_at_ms: Option<i64>,
    pub last_walk: Option<LastWalk>,
    pub walks_ok: u64,
    pub walks_failed: u64,
    /// Deltas of a followed upstream's change feed applied instead of walks.
    pub deltas_applied: u64,
    pub last_error: Option<String>,
    pub last_error_at_ms: Option<i64>,
    /// Entries of the snapshot stored trimmed because they were over `max_entry_bytes`.
    pub oversized_entries: u64,
}

#[derive(Debug, Clone)]
pub struct LastWalk {
    pub at_ms: i64,
    pub duration_ms: i64,
    pub pages: u64,
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
    pub duplicates: u64,
    pub skipped: u64,
}

/// One page of a search SQLite's FTS5 answered, and the note its answer carries when the
/// full-text index lacked rows of a large swap in the snapshot it searched.
#[derive(Debug, Clone)]
pub struct FullTextPage {
    pub hits: Vec<SearchHit>,
    pub next: Option<usize>,
    pub note: Option<String>,
}

/// One search result.
#[derive(Debug, Clone)]
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

/// Device and inode of the file at `path`.
fn file_identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)?;
    Ok((metadata.dev(), metadata.ino()))
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// How many pages of one walk may wait for the writer before the walk waits too.
const PAGES_IN_FLIGHT: usize = 4;
/// Read-only connections open at once (each holds descriptors for the database and its WAL);
/// more concurrent reads wait for one, so the daemon's descriptor reserve covers them.
pub const MAX_READERS: usize = 64;
/// Catalog-change events buffered per subscriber; one that falls further behind is told it
/// lagged, and the writer never waits for it.
const CHANGE_EVENTS_BUFFERED: usize = 256;

/// The handle everything else uses; cheap to clone.
#[derive(Clone)]
pub struct Store {
    path: PathBuf,
    /// Device and inode of the database file we opened: the path must keep naming it.
    opened_file: Option<(u64, u64)>,
    /// Set once the path no longer names the file we opened; shown in status.
    database_error: Arc<Mutex<Option<String>>>,
    writer: mpsc::UnboundedSender<WriteOp>,
    readers: Arc<Mutex<Vec<Reader>>>,
    reader_slots: Arc<Semaphore>,
    next_walk_id: Arc<AtomicU64>,
    changes: broadcast::Sender<CatalogChanged>,
    catalog_version: Arc<AtomicU64>,
    /// Ids the full-text backlog lists (the writer keeps it; `full_text_note` reads it).
    full_text_behind: Arc<AtomicU64>,
    /// Where the writer sends the pages of large first loads (`feed_first_loads`).
    load_feed: Arc<std::sync::OnceLock<LoadFeed>>,
    /// This database's id (`mirror_identity`), named in answers to followers.
    instance: String,
    merged_count_memo: Arc<follow::CountMemo>,
}

/// What an answer from SQLite's full-text search says while the index lacks rows of a large
/// swap (`ids` is how many the backlog lists).
pub(crate) fn full_text_note(ids: u64) -> Option<String> {
    (ids > 0).then(|| {
        format!(
            "the full-text index is still indexing up to {ids} resources of a large swap; \
             some matches may be missing until it is done"
        )
    })
}

impl Store {
    /// Opens (creating and migrating as needed) the database and starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(parent) = path.parent() {
            crate::paths::create_private_directory(parent).map_err(|source| {
                StoreError::Directory {
                    path: parent.to_path_buf(),
                    source,
                }
            })?;
        }
        crate::paths::create_private_file(path).map_err(|source| StoreError::File {
            path: path.to_path_buf(),
            source,
        })?;
        let connection = schema::open_writer(path)?;
        let instance = follow::instance_id(&connection)?;
        crate::protocol::set_mirror_id(&instance);
        // A backlog left by the last run shows in answers from the start; the writer resumes it.
        let full_text_behind = Arc::new(AtomicU64::new(writer::full_text_backlog(&connection)?));
        let writer_behind = full_text_behind.clone();
        let opened_file = file_identity(path).ok();
        let (sender, receiver) = mpsc::unbounded_channel();
        let (changes, _) = broadcast::channel(CHANGE_EVENTS_BUFFERED);
        let writer_changes = changes.clone();
        let catalog_version = Arc::new(AtomicU64::new(0));
        let writer_version = catalog_version.clone();
        let load_feed: Arc<std::sync::OnceLock<LoadFeed>> = Arc::default();
        let writer_load_feed = load_feed.clone();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                writer::run(
                    connection,
                    receiver,
                    writer_changes,
                    writer_version,
                    writer_behind,
                    writer_load_feed,
                )
            })
            .map_err(|error| {
                StoreError::Walk(format!("cannot start the writer thread: {error}"))
            })?;
        Ok(Store {
            path: path.to_path_buf(),
            opened_file,
            database_error: Arc::new(Mutex::new(None)),
            writer: sender,
            readers: Arc::new(Mutex::new(Vec::new())),
            reader_slots: Arc::new(Semaphore::new(MAX_READERS)),
            next_walk_id: Arc::new(AtomicU64::new(1)),
            changes,
            catalog_version,
            full_text_behind,
            load_feed,
            instance,
            merged_count_memo: Arc::default(),
        })
    }

    /// Sends the staged pages of first loads, and their ends, to `feed` from now on (the
    /// search index builds a large one during its walk); the first feed set stays.
    pub fn feed_first_loads(&self, feed: LoadFeed) {
        let _ = self.load_feed.set(feed);
    }

    /// The full-text note as of now (the writer indexes a large swap's rows between other
    /// work); a search's own note (`FullTextPage`) is read in the snapshot it searched.
    pub fn full_text_note(&self) -> Option<String> {
        full_text_note(self.full_text_behind.load(Ordering::Acquire))
    }

    /// Events after every commit that changed the catalog, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<CatalogChanged> {
        self.changes.subscribe()
    }

    /// Counts the commits that changed what a search may find (swaps that changed something,
    /// server records); bumped before the commit's caller hears back. In memory only: the
    /// search index uses it to know whether it has seen everything a caller may have seen.
    pub fn catalog_version(&self) -> u64 {
        self.catalog_version.load(Ordering::Acquire)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that the database path still names the file we opened; says what happened when
    /// it does not (deleted, or replaced by another file). Once found, the answer stays: every
    /// commit since went to a file nobody can open again. A stat per call, nothing more.
    pub fn check_database_file(&self) -> Option<String> {
        let mut recorded = self
            .database_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if recorded.is_some() {
            return recorded.clone();
        }
        let opened = self.opened_file?;
        let problem = match file_identity(&self.path) {
            Ok(identity) if identity == opened => return None,
            Ok(_) => format!(
                "the database file {} was replaced by another file while the daemon had it open;                  commits since went to the old, unlinked file",
                self.path.display()
            ),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => format!(
                "the database file {} was deleted while the daemon had it open; commits since                  went to an unlinked file",
                self.path.display()
            ),
            Err(error) => format!(
                "cannot check the database file {}: {error}",
                self.path.display()
            ),
        };
        *recorded = Some(problem.clone());
        Some(problem)
    }

    /// What `check_database_file` found, if it found anything, for status.
    pub fn database_error(&self) -> Option<String> {
        self.database_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> WriteOp,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(make(reply))
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Records a (re)loaded configuration's servers, as `sync` says.
    pub async fn apply_servers(&self, sync: ServerSync) -> Result<(), StoreError> {
        self.call(|reply| WriteOp::SyncServers { sync, reply })
            .await
    }

    /// A round trip through the writer thread: it answers only when it is not stuck.
    pub async fn ping_writer(&self) -> Result<(), StoreError> {
        self.call(|reply| WriteOp::Ping { reply }).await
    }

    pub async fn update_server(
        &self,
        server: &str,
        update: ServerUpdate,
    ) -> Result<(), StoreError> {
        let server = server.to_string();
        // What a server says about itself may echo a credential (our token, its API key from
        // `env`), and its errors may be of any length: no secret and no unbounded text is stored.
        let update = match update {
            ServerUpdate::WalkFailed { error } => ServerUpdate::WalkFailed {
                error: crate::redact::scrub_server_text(&error),
            },
            ServerUpdate::BackingOff { error, retry_at_ms } => ServerUpdate::BackingOff {
                error: crate::redact::scrub_server_text(&error),
                retry_at_ms,
            },
            ServerUpdate::Reconnecting { error } => ServerUpdate::Reconnecting {
                error: crate::redact::scrub_server_text(&error),
            },
            ServerUpdate::Connected {
                protocol_version,
                mut capabilities,
                mut server_info,
            } => {
                crate::redact::scrub_server_json(&mut capabilities);
                crate::redact::scrub_server_json(&mut server_info);
                ServerUpdate::Connected {
                    protocol_version,
                    capabilities,
                    server_info,
                }
            }
            // Listed, not `_`: a new variant that carries server text must be handled above.
            update @ (ServerUpdate::Connecting
            | ServerUpdate::NoResources
            | ServerUpdate::Walking
            | ServerUpdate::Stopped) => update,
        };
        self.call(|reply| WriteOp::UpdateServer {
            server,
            update,
            reply,
        })
        .await
    }

    /// Records the `cacheScope` of kinds of `server`'s snapshot (`ScopeUpdate` says how).
    pub async fn record_scopes(
        &self,
        server: &str,
        scopes: Vec<(Kind, crate::protocol::CacheScope)>,
        update: ScopeUpdate,
    ) -> Result<(), StoreError> {
        if scopes.is_empty() {
            return Ok(());
        }
        let server = server.to_string();
        self.call(|reply| WriteOp::RecordScopes {
            server,
            scopes,
            update,
            reply,
        })
        .await
    }

    /// Starts staging a new walk of `server`; nothing is visible until `commit`.
    pub fn begin_walk(&self, server: &str) -> StagedWalk {
        StagedWalk {
            id: self.next_walk_id.fetch_add(1, Ordering::Relaxed),
            server: server.to_string(),
            writer: self.writer.clone(),
            in_flight: Arc::new(Semaphore::new(PAGES_IN_FLIGHT)),
            finished: false,
        }
    }

    /// Runs `query` with a `Reader` from the pool (a read-only connection), off the async
    /// threads: every read of the daemon goes through here.
    pub async fn read<T: Send + 'static>(
        &self,
        query: impl FnOnce(&Reader) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let readers = self.readers.clone();
        let path = self.path.clone();
        // Never closed; held until the blocking query is done with its connection.
        let slot = self
            .reader_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Walk("the store is closed".into()))?;
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let pooled = readers
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .pop();
            let reader = match pooled {
                Some(reader) => reader,
                None => Reader::open(&path)?,
            };
            let outcome = query(&reader);
            readers
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(reader);
            outcome
        })
        .await
        .map_err(|error| StoreError::Walk(format!("query task failed: {error}")))?
    }

    /// Keeps a `resources/read` result for offline reads, evicting the oldest entries of the
    /// server past `limit_bytes`. Does not wait for the writer: a cache is never worth a delay.
    pub fn cache_contents(&self, server: &str, uri: &str, contents: String, limit_bytes: u64) {
        let _ = self.writer.send(WriteOp::CacheContents {
            server: server.to_string(),
            uri: uri.to_string(),
            contents,
            limit_bytes,
        });
    }

    /// Replaces the server's snapshot of one kind of entries (tools or prompts) with `rows`,
    /// atomically, as one walk of one page (a walk stages its pages through `begin_walk`);
    /// the previous snapshot stays if this fails.
    pub async fn swap_entries(
        &self,
        server: &str,
        kind: Kind,
        rows: Vec<EntryRow>,
    ) -> Result<EntrySwap, StoreError> {
        let staged = self.begin_walk(server);
        staged.add_entries(kind, rows).await?;
        staged.commit_entries(kind).await
    }

    /// Records the current tools and prompts of `server` (or every server) as accepted.
    pub async fn accept(&self, server: Option<String>) -> Result<u64, StoreError> {
        self.call(|reply| WriteOp::Accept { server, reply }).await
    }

    /// Stops the writer after the operations already queued; returns when it has closed the database.
    pub async fn close(&self) {
        let (reply, done) = oneshot::channel();
        if self.writer.send(WriteOp::Close { reply }).is_ok() {
            let _ = done.await;
        }
        self.readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }
}

/// A walk being staged; dropping it without `commit` discards what it staged.
pub struct StagedWalk {
    id: u64,
    server: String,
    writer: mpsc::UnboundedSender<WriteOp>,
    in_flight: Arc<Semaphore>,
    finished: bool,
}

impl StagedWalk {
    /// Queues a page of resources for staging; waits only when the writer is behind.
    pub async fn add_resources(&self, rows: Vec<ResourceRow>) -> Result<(), StoreError> {
        self.stage(Batch::Resources(rows)).await
    }

    pub async fn add_templates(&self, rows: Vec<TemplateRow>) -> Result<(), StoreError> {
        self.stage(Batch::Templates(rows)).await
    }

    /// Queues a page of tools or prompts (`kind`) for staging.
    pub async fn add_entries(&self, kind: Kind, rows: Vec<EntryRow>) -> Result<(), StoreError> {
        self.stage(Batch::Entries(kind, rows)).await
    }

    async fn stage(&self, batch: Batch) -> Result<(), StoreError> {
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::WriterGone)?;
        let operation = WriteOp::Stage {
            walk_id: self.id,
            server: self.server.clone(),
            batch,
            permit,
        };
        self.writer
            .send(operation)
            .map_err(|_| StoreError::WriterGone)
    }

    /// Swaps the staged walk in as the server's snapshot, in one transaction.
    pub async fn commit(self, report: WalkReport) -> Result<SwapOutcome, StoreError> {
        self.finish(report, None).await
    }

    async fn finish(
        mut self,
        report: WalkReport,
        delta: Option<writer::Delta>,
    ) -> Result<SwapOutcome, StoreError> {
        self.finished = true;
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteOp::Commit {
                walk_id: self.id,
                server: self.server.clone(),
                report,
                delta,
                reply,
            })
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Swaps the staged walk of tools or prompts in as the server's snapshot of `kind`, in
    /// one transaction.
    pub async fn commit_entries(mut self, kind: Kind) -> Result<EntrySwap, StoreError> {
        self.finished = true;
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteOp::CommitEntries {
                walk_id: self.id,
                server: self.server.clone(),
                kind,
                reply,
            })
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}

impl StagedWalk {
    /// Applies the staged rows as a delta of a followed upstream: they are added or changed,
    /// `removed` go, the rest of the snapshot stays; of the URI templates in `templates` (when
    /// any changed), the staged ones are their new text and the others go. The cursor moves in
    /// the same transaction.
    pub async fn commit_delta(
        self,
        removed: Vec<String>,
        templates: Option<Vec<String>>,
        cursor: FollowCursor,
    ) -> Result<SwapOutcome, StoreError> {
        let delta = writer::Delta {
            removed,
            templates,
            cursor,
        };
        self.finish(WalkReport::default(), Some(delta)).await
    }
}

impl Store {
    /// Moves (or forgets) a followed server's cursor, after a full walk of it committed.
    pub async fn set_follow_cursor(
        &self,
        server: &str,
        cursor: Option<FollowCursor>,
    ) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteOp::SetFollowCursor {
                server: server.to_string(),
                cursor,
                reply,
            })
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}

impl Drop for StagedWalk {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.writer.send(WriteOp::Abort { walk_id: self.id });
        }
    }
}
