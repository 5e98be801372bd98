//! `SearchIndex`: the tantivy index on disk, opened or rebuilt, searched, and replaced per server and kind; its errors and phases.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Searcher};
use tokio::sync::watch;

use super::error::{lock, SearchError};
use super::files::{create, directory_bytes, open_existing, read_payload, reset};
use super::prebuild;
use super::query;
use super::query::Page;
use super::schema::Fields;
use super::slots::SearcherSlots;
use crate::protocol::IndexPhase as Phase;
use crate::protocol::IndexStatus;
use crate::protocol::Kind;
use crate::store::SearchRequest;

/// A file that marks a directory as ours, so a reset never empties a directory it did not make.
pub(super) const MARKER_FILE: &str = "MCP-MIRROR-SEARCH-INDEX";
/// Written at a clean close, removed at open: without it the files' checksums are checked.
const CLEAN_FILE: &str = "CLOSED-CLEANLY";
/// The index writer's memory budget: tantivy flushes a segment when it is used up.
const WRITER_HEAP_BYTES: usize = 16 * 1024 * 1024;
/// Segments with this many documents are not merged further.
const MAX_DOCS_BEFORE_MERGE: usize = 200_000;
/// How often a rebuild reports its progress, in entries.
pub(super) const PROGRESS_EVERY: u64 = 10_000;
/// How long a search of a request without a deadline may take, waiting for a slot included.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(2);

/// One swap's effect on one server's listings of one kind, as the writer committed it.
pub struct ServerDiff<I> {
    /// The store generation after this swap.
    pub generation: u64,
    pub server: String,
    pub kind: Kind,
    /// When true, every listing of the server of this kind is replaced by `upserted` (and
    /// `removed` is not needed): a server's first load, a re-walk that changed much.
    pub replace: bool,
    /// The identities (URIs, URI templates, names) the server no longer lists.
    pub removed: Vec<String>,
    /// Entries of this kind the server added or changed; each at most once.
    pub upserted: I,
}

/// Server priorities: for a URI listed by several servers, the lowest priority wins, then the
/// lowest server name.
pub type Priorities = BTreeMap<String, i64>;

/// What an index needs before it agrees with a store at some generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    Nothing,
    /// Apply the diffs after `from`.
    CatchUp {
        from: u64,
    },
    /// Start over from every stored entry.
    Rebuild {
        reason: String,
    },
}

/// What opening found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// No index was there; an empty one was made.
    Created,
    /// An index from an earlier run, at the generation its payload records.
    Existing,
    /// The index there was unusable (the reason says why) and was replaced by an empty one.
    Reset { reason: String },
}

/// What each commit records beside the segments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Payload {
    pub(super) schema: u32,
    pub(super) generation: Option<u64>,
    pub(super) servers: Priorities,
}

/// The derived index. Searches run from any thread; changes are meant for one thread at a
/// time (the index thread) and are serialized by the writer lock.
pub struct SearchIndex {
    directory: PathBuf,
    pub(super) fields: Fields,
    pub(super) index: Index,
    /// The last run did not close the index cleanly: check its files before trusting them.
    unclean: bool,
    pub(super) reader: IndexReader,
    pub(super) writer: Mutex<IndexWriter>,
    pub(super) committed: Mutex<Payload>,
    pub(super) status: watch::Sender<IndexStatus>,
    pub(super) slots: SearcherSlots,
    /// Set at shutdown: a long rebuild or diff stops and leaves the last commit in place.
    cancelled: AtomicBool,
    /// First loads indexed during their walk, for the keeper to adopt.
    pub(super) prebuilder: std::sync::Arc<prebuild::Prebuilder>,
    /// The commit searches answer from while a catch-up is split over commits (`pin`).
    pub(super) pinned: Mutex<Option<Commit>>,
}

/// One commit as searches see it: a searcher of its segments and the generation its payload
/// records. A held searcher keeps its segments' files mapped, so later commits and merges
/// that delete those files leave it readable (on Linux, an unlinked file stays readable
/// through its mappings; the disk space is freed when the last mapping goes).
#[derive(Clone)]
pub struct Commit {
    pub(super) searcher: Searcher,
    generation: u64,
}

impl Commit {
    /// The generation the commit reflects.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// Holds a pinned commit (`SearchIndex::pin`): while it lives and the index is not ready,
/// searches answer from that commit; dropped (the catch-up done, failed or cancelled), the
/// pin goes and searches answer from the index's last commit again.
#[must_use = "the pin is released when this is dropped"]
pub struct Pin<'index> {
    index: &'index SearchIndex,
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        *lock(&self.index.pinned) = None;
        self.index
            .status
            .send_modify(|status| status.pinned_generation = None);
    }
}

/// The directory the index of database `database` lives in: `catalog.db` -> `catalog.search`.
pub fn directory_for(database: &Path) -> PathBuf {
    database.with_extension("search")
}

impl SearchIndex {
    /// Opens the index in `directory`, making or resetting it when missing or unusable.
    /// `max_searches` bounds how many searches run at once.
    pub fn open(
        directory: &Path,
        max_searches: usize,
    ) -> Result<(SearchIndex, Opened), SearchError> {
        let fields = Fields::new();
        let (index, opened) = match open_existing(directory, &fields) {
            Ok(Some(index)) => (index, Opened::Existing),
            Ok(None) => (create(directory, &fields)?, Opened::Created),
            Err(reason) => {
                tracing::warn!(directory = %directory.display(), %reason, "resetting the search index");
                reset(directory)?;
                (create(directory, &fields)?, Opened::Reset { reason })
            }
        };
        let payload = read_payload(&index).unwrap_or_default();
        let clean = directory.join(CLEAN_FILE);
        let unclean = !clean.exists() && opened == Opened::Existing;
        if clean.exists() {
            std::fs::remove_file(&clean).map_err(|source| SearchError::Io {
                action: "remove",
                path: clean.clone(),
                source,
            })?;
        }
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        // Made on a thread of lowered priority, so tantivy's indexing, merge and docstore
        // threads (started now, and by them later) inherit it: searches come first.
        let writer: IndexWriter = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    crate::background::lower_this_threads_priority(
                        crate::background::BACKGROUND_NICE,
                    );
                    index.writer_with_num_threads(1, WRITER_HEAP_BYTES)
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        writer.set_merge_policy(merge_policy());
        let (status, _) = watch::channel(IndexStatus {
            phase: Phase::Opening,
            generation: payload.generation,
            documents: 0,
            bytes: 0,
            caught_up: 0,
            replacing: false,
            largest_catch_up_batch: 0,
            pinned_generation: None,
        });
        let search_index = SearchIndex {
            directory: directory.to_path_buf(),
            fields,
            index,
            unclean,
            reader,
            writer: Mutex::new(writer),
            committed: Mutex::new(payload),
            status,
            slots: SearcherSlots::new(max_searches),
            cancelled: AtomicBool::new(false),
            prebuilder: std::sync::Arc::default(),
            pinned: Mutex::new(None),
        };
        search_index.publish(None);
        Ok((search_index, opened))
    }

    /// After a start that did not follow a clean close: the names of files whose checksum
    /// fails (a machine crash can leave them), as the reason to rebuild.
    pub fn damage(&self) -> Option<String> {
        if !self.unclean {
            return None;
        }
        match self.index.validate_checksum() {
            Ok(damaged) if damaged.is_empty() => None,
            Ok(damaged) => Some(format!("damaged files after an unclean stop: {damaged:?}")),
            Err(error) => Some(format!(
                "cannot check the files after an unclean stop: {error}"
            )),
        }
    }

    /// Marks a clean close: the next open trusts the files without reading them all.
    pub fn close(&self) {
        let clean = self.directory.join(CLEAN_FILE);
        if let Err(error) = std::fs::write(&clean, b"") {
            tracing::warn!(path = %clean.display(), %error, "cannot mark the search index closed");
        }
    }

    /// Makes a running rebuild or diff stop soon, uncommitted; later ones stop at once.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    pub(super) fn check_cancelled(&self, done: u64) -> Result<(), SearchError> {
        if done % PROGRESS_EVERY == 0 && self.cancelled.load(Ordering::Relaxed) {
            return Err(SearchError::Cancelled);
        }
        Ok(())
    }

    /// What this index needs to agree with a store whose latest generation is `store_generation`.
    pub fn repair_needed(&self, store_generation: u64) -> Repair {
        match lock(&self.committed).generation {
            None => Repair::Rebuild {
                reason: "the index has never been built".into(),
            },
            Some(generation) if generation == store_generation => Repair::Nothing,
            Some(generation) if generation < store_generation => {
                Repair::CatchUp { from: generation }
            }
            Some(generation) => Repair::Rebuild {
                reason: format!(
                    "the index is at generation {generation}, ahead of the database's {store_generation}"
                ),
            },
        }
    }

    /// The store generation the index reflects, `None` before its first commit.
    pub fn generation(&self) -> Option<u64> {
        lock(&self.committed).generation
    }

    /// The server priorities the index's merged view was computed with.
    pub fn priorities(&self) -> Priorities {
        lock(&self.committed).servers.clone()
    }

    pub fn set_phase(&self, phase: Phase) {
        self.publish(Some(phase));
    }

    pub fn status(&self) -> IndexStatus {
        self.status.borrow().clone()
    }

    /// Status changes, for observers.
    pub fn watch(&self) -> watch::Receiver<IndexStatus> {
        self.status.subscribe()
    }

    /// Records that the index reflects the catalog at in-memory `version` and is ready.
    pub fn mark_caught_up(&self, version: u64) {
        self.status.send_modify(|status| {
            status.phase = Phase::Ready;
            status.caught_up = status.caught_up.max(version);
        });
    }

    /// Says whether the keeper is writing a diff that replaces a whole kind of one server.
    pub fn set_replacing(&self, replacing: bool) {
        self.status
            .send_modify(|status| status.replacing = replacing);
    }

    /// Records the size of a batch of changed entries the keeper applied in one commit.
    pub fn note_catch_up_batch(&self, entries: u64) {
        self.status.send_if_modified(|status| {
            let larger = entries > status.largest_catch_up_batch;
            status.largest_catch_up_batch = status.largest_catch_up_batch.max(entries);
            larger
        });
    }

    /// The index's last commit, to pin (`pin`) before a change is applied in several
    /// commits; `None` before the first commit. Called by the thread that changes the index
    /// (the keeper's): each commit reloads the reader and then records its payload, so between
    /// its commits the searcher and the generation are of the same commit.
    pub fn last_commit(&self) -> Option<Commit> {
        let generation = lock(&self.committed).generation?;
        Some(Commit {
            searcher: self.reader.searcher(),
            generation,
        })
    }

    /// Makes searches answer from `commit` while the index is not ready, until the returned
    /// pin is dropped: a catch-up that commits a change in parts keeps the last complete
    /// commit answering, never one that holds part of a change. The commit's segments stay on
    /// disk (unlinked once later commits drop them) until the pin goes.
    pub fn pin(&self, commit: Commit) -> Pin<'_> {
        let generation = commit.generation;
        *lock(&self.pinned) = Some(commit);
        self.status
            .send_modify(|status| status.pinned_generation = Some(generation));
        Pin { index: self }
    }

    /// The commit searches answer from: the pinned one while a pin is held and the index is
    /// not ready, else the last.
    fn answering_commit(&self) -> Commit {
        if !self.is_ready() {
            if let Some(pinned) = lock(&self.pinned).as_ref() {
                return pinned.clone();
            }
        }
        Commit {
            searcher: self.reader.searcher(),
            generation: lock(&self.committed).generation.unwrap_or(0),
        }
    }

    /// True when queries should go to the index.
    pub fn is_ready(&self) -> bool {
        self.status.borrow().phase == Phase::Ready
    }

    pub(super) fn publish(&self, phase: Option<Phase>) {
        let generation = lock(&self.committed).generation;
        let documents = self.reader.searcher().num_docs();
        let bytes = directory_bytes(&self.directory);
        self.status.send_modify(|status| {
            if let Some(phase) = phase {
                status.phase = phase;
            }
            status.generation = generation;
            status.documents = documents;
            status.bytes = bytes;
        });
    }

    /// One page of hits for `request`, from the pinned commit while one is held (`pin`); waits
    /// for a free search slot until its deadline (`DEFAULT_TIME_LIMIT` from now when it has none).
    pub fn search(&self, request: &SearchRequest) -> Result<Page, SearchError> {
        let started = Instant::now();
        let deadline = request.deadline.unwrap_or(started + DEFAULT_TIME_LIMIT);
        let _slot = self.slots.enter(deadline)?;
        self.search_in_slot(request, started, deadline)
    }

    /// `search` if a search slot is free now, else `SearchError::Busy` at once: for a caller
    /// that must not wait (an answering thread).
    pub fn search_now(&self, request: &SearchRequest) -> Result<Page, SearchError> {
        let _slot = self.slots.try_enter().ok_or(SearchError::Busy)?;
        let started = Instant::now();
        let deadline = request.deadline.unwrap_or(started + DEFAULT_TIME_LIMIT);
        self.search_in_slot(request, started, deadline)
    }

    fn search_in_slot(
        &self,
        request: &SearchRequest,
        started: Instant,
        deadline: Instant,
    ) -> Result<Page, SearchError> {
        let time_limit = deadline.saturating_duration_since(started);
        let Commit {
            searcher,
            generation,
        } = self.answering_commit();
        query::run(
            &searcher,
            &self.fields,
            request,
            deadline,
            time_limit,
            generation,
        )
    }
}

/// Merging segments costs memory in proportion to their size; segments this large are left
/// alone, which bounds it (a million entries stay in a handful of segments).
pub(super) fn merge_policy() -> Box<tantivy::merge_policy::LogMergePolicy> {
    let mut merges = tantivy::merge_policy::LogMergePolicy::default();
    merges.set_max_docs_before_merge(MAX_DOCS_BEFORE_MERGE);
    Box::new(merges)
}
