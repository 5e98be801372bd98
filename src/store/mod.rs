//! The SQLite store: migrations, one writer thread that swaps snapshots, read-only query connections.

mod change_window;
mod clock;
mod definitions;
pub(crate) mod entry;
mod error;
mod follow;
mod full_text_search;
mod history;
mod index_source;
#[cfg(test)]
mod merged_page_tests;
mod queries;
mod reader;
mod resource_search;
mod rows;
mod schema;
mod scopes;
pub(crate) mod snippet;
mod sql_text;
pub(crate) mod uri_template;
mod views;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

pub use change_window::{FeedPosition, WindowCount};
pub use definitions::{EntryListing, EntryRow, EntrySwap, KindCounts};
pub use follow::{FollowCursor, KeyedEntries};
pub use history::VersionRow;
pub use index_source::{
    Entry as IndexEntry, FeedGroups, IndexSource, LoadEvent, LoadFeed, SourceSnapshot,
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

use crate::protocol::Kind;
pub use clock::now_ms;
pub use error::StoreError;
use writer::{Batch, WriteOp};

/// Device and inode of the file at `path`.
fn file_identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)?;
    Ok((metadata.dev(), metadata.ino()))
}

/// How many pages of one walk may wait for the writer before the walk waits too.
const PAGES_IN_FLIGHT: usize = 4;
/// How many pages of one walk's resources may wait for the writer and then for the search
/// index (which builds a large first load from its pages during the walk) before the walk
/// waits too: the index sees every page of a first load, and holds only that walk back.
const INDEX_PAGES_IN_FLIGHT: usize = 4;
/// The longest one walk waits for the search index in all (`INDEX_PAGES_IN_FLIGHT`). Past
/// it the walk no longer waits: the index takes the pages it has room for and reads the
/// others from the database after the commit (the search index's `prebuild`).
pub const FIRST_LOAD_INDEX_HOLD: std::time::Duration = std::time::Duration::from_secs(30);
/// A walk waits for the search index only once it has left this many rows without room
/// there: until then a page the index has no room for goes on without it, and the index reads
/// it from the database after the commit. So a first load is visible at the walk's own pace
/// and searchable by the index soon after: reading back and indexing costs about 9 µs a row
/// on one core (measured at 1,000,000 on an Intel Xeon), so this many is 4-5 s after the
/// commit, while waiting for the index from the first page held a 1,000,000 walk to the
/// index's pace (visible after 10.2 s against 6.4 s).
pub const FIRST_LOAD_INDEX_LAG_ROWS: u64 = 500_000;
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
    /// The write-ahead log's checkpoints (the writer's and its checkpointer's).
    wal: Arc<writer::WalWatch>,
    /// How long a walk may wait for the search index in all (`FIRST_LOAD_INDEX_HOLD`, or
    /// `[search] first_load_index_hold`), in milliseconds.
    index_hold_ms: Arc<AtomicU64>,
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
        let full_text_behind = Arc::new(AtomicU64::new(writer::full_text::full_text_backlog(
            &connection,
        )?));
        let writer_behind = full_text_behind.clone();
        let opened_file = file_identity(path).ok();
        let (sender, receiver) = mpsc::unbounded_channel();
        let (changes, _) = broadcast::channel(CHANGE_EVENTS_BUFFERED);
        let writer_changes = changes.clone();
        let catalog_version = Arc::new(AtomicU64::new(0));
        let writer_version = catalog_version.clone();
        let load_feed: Arc<std::sync::OnceLock<LoadFeed>> = Arc::default();
        let writer_load_feed = load_feed.clone();
        let wal = Arc::new(writer::WalWatch::default());
        let writer_wal = wal.clone();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                let channels = writer::Channels {
                    operations: receiver,
                    changes: writer_changes,
                    catalog_version: writer_version,
                    full_text_behind: writer_behind,
                    load_feed: writer_load_feed,
                    wal_watch: writer_wal,
                };
                writer::Writer::new(connection, channels).run();
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
            wal,
            index_hold_ms: Arc::new(AtomicU64::new(FIRST_LOAD_INDEX_HOLD.as_millis() as u64)),
        })
    }

    /// Walks begun from now on wait at most `hold` in all for the search index (instead of
    /// `FIRST_LOAD_INDEX_HOLD`; `[search] first_load_index_hold`).
    pub fn set_first_load_index_hold(&self, hold: std::time::Duration) {
        self.index_hold_ms
            .store(hold.as_millis() as u64, Ordering::Relaxed);
    }

    /// Sends the staged pages of first loads, and their ends, to `feed` from now on (the
    /// search index builds a large one during its walk); the first feed set stays.
    pub fn feed_first_loads(&self, feed: LoadFeed) {
        let _ = self.load_feed.set(feed);
    }

    /// The write-ahead log's size and last checkpoint (`catalog/status`).
    pub fn wal_status(&self) -> crate::protocol::WalStatus {
        let mut log = self.path.clone().into_os_string();
        log.push("-wal");
        self.wal.status(std::path::Path::new(&log))
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
            // The reason names the upstream's servers: text from the server.
            ServerUpdate::Held { reason } => ServerUpdate::Held {
                reason: crate::redact::scrub_server_text(&reason),
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
            index_room: Arc::new(Semaphore::new(INDEX_PAGES_IN_FLIGHT)),
            index_held: std::sync::Mutex::new(IndexHeld::default()),
            index_hold: std::time::Duration::from_millis(
                self.index_hold_ms.load(Ordering::Relaxed),
            ),
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
        let merged_count = self.merged_count_memo.clone();
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
                None => Reader::open(&path, merged_count)?,
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
    /// Room for the walk's resource pages on their way to the search index.
    index_room: Arc<Semaphore>,
    /// What the walk has left without the index, and waited for it, so far.
    index_held: std::sync::Mutex<IndexHeld>,
    /// How long it may (`FIRST_LOAD_INDEX_HOLD`).
    index_hold: std::time::Duration,
    finished: bool,
}

/// A walk's account with the search index: rows it staged without room there (the index
/// reads them after the commit), and how long it waited for room.
#[derive(Default)]
struct IndexHeld {
    rows_left: u64,
    waited: std::time::Duration,
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
        let index_permit = match &batch {
            Batch::Resources(rows) => self.index_room(rows.len() as u64).await,
            Batch::Templates(_) | Batch::Entries(..) => None,
        };
        let operation = WriteOp::Stage {
            walk_id: self.id,
            server: self.server.clone(),
            batch,
            permit,
            index_permit,
        };
        self.writer
            .send(operation)
            .map_err(|_| StoreError::WriterGone)
    }

    /// Room for one more page (of `rows` rows) on its way to the search index: at once when
    /// there is some; else `None` while the walk has left fewer than
    /// `FIRST_LOAD_INDEX_LAG_ROWS` rows without the index (the page is staged all the same,
    /// and the index reads it after the commit); else after a wait, until the walk has waited
    /// `FIRST_LOAD_INDEX_HOLD` in all, and `None` past that.
    async fn index_room(&self, rows: u64) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.index_room.clone().try_acquire_owned() {
            return Some(permit);
        }
        let left = {
            let mut held = self
                .index_held
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if held.rows_left + rows <= FIRST_LOAD_INDEX_LAG_ROWS {
                held.rows_left += rows;
                return None;
            }
            self.index_hold.saturating_sub(held.waited)
        };
        if left.is_zero() {
            return None;
        }
        let started = std::time::Instant::now();
        let permit = tokio::time::timeout(left, self.index_room.clone().acquire_owned()).await;
        self.index_held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .waited += started.elapsed();
        permit.ok().and_then(Result::ok)
    }

    /// Swaps the staged walk in as the server's snapshot, in one transaction.
    pub async fn commit(self, report: WalkReport) -> Result<SwapOutcome, StoreError> {
        self.finish(report).await
    }

    async fn finish(mut self, report: WalkReport) -> Result<SwapOutcome, StoreError> {
        self.finished = true;
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteOp::Commit {
                walk_id: self.id,
                server: self.server.clone(),
                report,
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
        mut self,
        removed: Vec<String>,
        templates: Option<Vec<String>>,
        entries: Vec<(Kind, StagedWalk, Vec<String>)>,
        cursor: FollowCursor,
    ) -> Result<DeltaOutcome, StoreError> {
        self.finished = true;
        let entries = entries
            .into_iter()
            .map(|(kind, mut walk, touched)| {
                // The delta's commit discards their staging.
                walk.finished = true;
                writer::EntryDelta {
                    kind,
                    walk_id: walk.id,
                    touched,
                }
            })
            .collect();
        let delta = writer::Delta {
            removed,
            templates,
            entries,
            cursor,
        };
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(WriteOp::CommitDelta {
                walk_id: self.id,
                server: self.server.clone(),
                delta,
                reply,
            })
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}

/// What a followed upstream's delta changed: its resources and templates, and each kind of
/// tools or prompts it touched.
#[derive(Debug, Clone, Default)]
pub struct DeltaOutcome {
    pub swap: SwapOutcome,
    pub entries: Vec<(Kind, EntrySwap)>,
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
