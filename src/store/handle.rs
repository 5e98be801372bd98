//! The `Store` handle everything else uses: it opens the database, starts the writer thread,
//! sends it each write operation and lends a pooled read-only `Reader` to each read.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc, oneshot, Semaphore};

use super::definitions::{EntryRow, EntrySwap};
use super::error::StoreError;
use super::follow::{self, FollowCursor};
use super::index_source::LoadFeed;
use super::reader::Reader;
use super::rows::{CatalogChanged, ServerSync, ServerUpdate};
use super::schema;
use super::scopes::ScopeUpdate;
use super::staged_walk::{StagedWalk, FIRST_LOAD_INDEX_HOLD};
use super::writer::{self, WriteOp};
use crate::protocol::Kind;

/// Device and inode of the file at `path`.
fn file_identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)?;
    Ok((metadata.dev(), metadata.ino()))
}

/// Read-only connections open at once (each holds descriptors for the database and its WAL);
/// more concurrent reads wait for one, so the daemon's descriptor reserve covers them.
pub(super) const MAX_READERS: usize = 64;
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
    pub(super) full_text_behind: Arc<AtomicU64>,
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
        let read_back = Arc::new(super::ReadBackWatch::default());
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                // Swaps and staging are background work: answers read on their own connections.
                crate::background::lower_this_threads_priority(crate::background::BACKGROUND_NICE);
                let channels = writer::Channels {
                    operations: receiver,
                    changes: writer_changes,
                    catalog_version: writer_version,
                    full_text_behind: writer_behind,
                    load_feed: writer_load_feed,
                    wal_watch: writer_wal,
                    read_back,
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

    /// This database's id, as `catalog/changes` and `catalog/entries` name it.
    pub fn instance(&self) -> &str {
        &self.instance
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
            | ServerUpdate::Synced { .. }
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
        self.begin_staging(server, false)
    }

    /// Starts staging a followed upstream's delta to `server`'s snapshot, committed by
    /// `commit_delta`: never a first load, even onto an empty snapshot.
    pub fn begin_delta(&self, server: &str) -> StagedWalk {
        self.begin_staging(server, true)
    }

    fn begin_staging(&self, server: &str, delta: bool) -> StagedWalk {
        StagedWalk::begin(
            self.next_walk_id.fetch_add(1, Ordering::Relaxed),
            server,
            self.writer.clone(),
            std::time::Duration::from_millis(self.index_hold_ms.load(Ordering::Relaxed)),
            delta,
        )
    }

    /// Runs `query` with a `Reader` from the pool (a read-only connection), off the async
    /// threads: every read of the daemon goes through here (or `read_now`).
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

    /// Runs `query` on the calling thread with a pooled reader, if one is free now: for a read
    /// quick enough to answer where it arrives (a quick client's search of the index,
    /// `answer::search::index`), saving the hand-off to a blocking thread and back. `None`
    /// (nothing run) when every reader is taken or none is open yet: this never waits and never
    /// opens a connection (`read` does both).
    pub fn read_now<T>(
        &self,
        query: impl FnOnce(&Reader) -> Result<T, StoreError>,
    ) -> Option<Result<T, StoreError>> {
        let _slot = self.reader_slots.try_acquire().ok()?;
        let reader = self
            .readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop()?;
        let outcome = query(&reader);
        self.readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(reader);
        Some(outcome)
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
