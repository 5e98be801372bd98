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
pub(crate) mod gate;
pub mod keeper;
pub mod prebuild;
mod query;
mod schema;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::protocol::Kind;
use tantivy::collector::DocSetCollector;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument};
use tokio::sync::watch;

pub use crate::protocol::{IndexPhase as Phase, IndexStatus, MatchMode};
pub use crate::store::IndexEntry as Entry;
pub use query::{Hit, Page, SearchQuery, MAX_MARKER_BYTES};
use schema::{Fields, Flags, SCHEMA_VERSION};

/// A file that marks a directory as ours, so a reset never empties a directory it did not make.
const MARKER_FILE: &str = "MCP-MIRROR-SEARCH-INDEX";
/// Written at a clean close, removed at open: without it the files' checksums are checked.
const CLEAN_FILE: &str = "CLOSED-CLEANLY";
/// The index writer's memory budget: tantivy flushes a segment when it is used up.
const WRITER_HEAP_BYTES: usize = 16 * 1024 * 1024;
/// Segments with this many documents are not merged further.
const MAX_DOCS_BEFORE_MERGE: usize = 200_000;
/// How often a rebuild reports its progress, in entries.
const PROGRESS_EVERY: u64 = 10_000;
/// The priority of a server the caller did not name: it loses to every named one.
const UNKNOWN_PRIORITY: i64 = i64::MAX;

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("search index error: {0}")]
    Index(#[from] tantivy::TantivyError),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not empty and is not a search index made by mcp-mirror; refusing to touch it"
    )]
    NotOurs { path: PathBuf },
    #[error("rebuild entries must come ordered by kind and URI or name ({later:?} came after {earlier:?})")]
    Unordered { earlier: String, later: String },
    #[error("the search took longer than its limit of {0:?}")]
    TimedOut(Duration),
    #[error("too many searches are running; try again")]
    Busy,
    #[error("{0}")]
    InvalidQuery(String),
    #[error("the search index is shutting down")]
    Cancelled,
    #[error("cannot read a first load's rows from the database: {0}")]
    Source(String),
}

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
struct Payload {
    schema: u32,
    generation: Option<u64>,
    servers: Priorities,
}

/// The derived index. Searches run from any thread; changes are meant for one thread at a
/// time (the index thread) and are serialized by the writer lock.
pub struct SearchIndex {
    directory: PathBuf,
    fields: Fields,
    index: Index,
    /// The last run did not close the index cleanly: check its files before trusting them.
    unclean: bool,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    committed: Mutex<Payload>,
    status: watch::Sender<IndexStatus>,
    slots: SearcherSlots,
    /// Set at shutdown: a long rebuild or diff stops and leaves the last commit in place.
    cancelled: AtomicBool,
    /// First loads indexed during their walk, for the keeper to adopt.
    prebuilder: std::sync::Arc<prebuild::Prebuilder>,
}

/// The directory the index of database `database` lives in: `catalog.db` -> `catalog.search`.
pub fn directory_for(database: &Path) -> PathBuf {
    database.with_extension("search")
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let writer: IndexWriter = index.writer_with_num_threads(1, WRITER_HEAP_BYTES)?;
        writer.set_merge_policy(merge_policy());
        let (status, _) = watch::channel(IndexStatus {
            phase: Phase::Opening,
            generation: payload.generation,
            documents: 0,
            bytes: 0,
            caught_up: 0,
            replacing: false,
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

    fn check_cancelled(&self, done: u64) -> Result<(), SearchError> {
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

    /// True when queries should go to the index.
    pub fn is_ready(&self) -> bool {
        self.status.borrow().phase == Phase::Ready
    }

    fn publish(&self, phase: Option<Phase>) {
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

    /// Applies one swap's diff and commits it with its generation.
    pub fn apply<I: IntoIterator<Item = Entry>>(
        &self,
        diff: ServerDiff<I>,
    ) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        let outcome = self.apply_locked(&writer, diff);
        self.finish(&mut writer, outcome)
    }

    /// Applies the diffs of one server's kinds in one commit, at the last one's generation.
    /// Only one server's: the merged view of each is computed from the committed listings,
    /// and one server's kinds never share a group (a resource's URI and a template's URI
    /// template are groups of their own kinds).
    pub fn apply_kinds(&self, diffs: Vec<ServerDiff<Vec<Entry>>>) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        let mut outcome = Ok(lock(&self.committed).clone());
        for diff in diffs {
            outcome = outcome.and_then(|_| self.apply_locked(&writer, diff));
        }
        self.finish(&mut writer, outcome)
    }

    fn apply_locked<I: IntoIterator<Item = Entry>>(
        &self,
        writer: &IndexWriter,
        diff: ServerDiff<I>,
    ) -> Result<Payload, SearchError> {
        let fields = &self.fields;
        let searcher = self.reader.searcher();
        let mut payload = lock(&self.committed).clone();
        let servers = payload.servers.clone();
        let empty = searcher.num_docs() == 0;
        let server = diff.server.as_str();
        let kind = diff.kind;
        // Identities whose other listings may need new flags once this server's is gone.
        let mut orphaned: HashSet<String> = HashSet::new();
        if diff.replace {
            if !empty {
                for (entry, _) in self.server_shared_listings(&searcher, server, kind)? {
                    orphaned.insert(entry.identity().to_string());
                }
            }
            writer.delete_query(Box::new(self.server_kind_query(server, kind)))?;
        } else {
            for identity in &diff.removed {
                writer.delete_term(fields.key_term(kind, server, identity));
                if !empty && self.others_may_list(&searcher, kind, server, identity)? {
                    orphaned.insert(identity.clone());
                }
            }
        }
        for (done, entry) in diff.upserted.into_iter().enumerate() {
            self.check_cancelled(done as u64)?;
            if entry.kind != kind {
                continue;
            }
            let identity = entry.identity();
            orphaned.remove(identity);
            let others = if empty || !self.others_may_list(&searcher, kind, server, identity)? {
                Vec::new()
            } else {
                self.listings(&searcher, kind, server, identity)?
                    .into_iter()
                    .filter(|(other, _)| other.server != entry.server)
                    .collect()
            };
            // A replaced server's listings are all deleted already; a delete per entry would
            // sit in tantivy's delete queue until the commit (some 250 bytes each).
            if !diff.replace {
                writer.delete_term(fields.key_term(kind, &entry.server, identity));
            }
            self.write_listings(writer, &servers, others, Some(entry))?;
        }
        for identity in orphaned {
            let others = self
                .listings(&searcher, kind, server, &identity)?
                .into_iter()
                .filter(|(other, _)| other.server != server)
                .collect();
            self.write_listings(writer, &servers, others, None)?;
        }
        payload.generation = Some(diff.generation);
        Ok(payload)
    }

    /// Computes the flags of every listing of one URI (the committed `others` and this diff's
    /// `new` entry) and writes the new entry and every other whose flags changed.
    fn write_listings(
        &self,
        writer: &IndexWriter,
        servers: &Priorities,
        others: Vec<(Entry, Flags)>,
        new: Option<Entry>,
    ) -> Result<(), SearchError> {
        let rank = |server: &str| {
            (
                servers.get(server).copied().unwrap_or(UNKNOWN_PRIORITY),
                server.to_string(),
            )
        };
        let listed_by = others.len() + usize::from(new.is_some());
        let winner = others
            .iter()
            .map(|(entry, _)| entry.server.as_str())
            .chain(new.iter().map(|entry| entry.server.as_str()))
            .min_by_key(|server| rank(server))
            .map(str::to_string);
        let flags_of = |entry: &Entry| Flags {
            wins: winner.as_deref() == Some(entry.server.as_str()),
            shared: listed_by > 1,
        };
        for (entry, old_flags) in others {
            let flags = flags_of(&entry);
            if flags != old_flags {
                writer.delete_term(self.fields.key_term(
                    entry.kind,
                    &entry.server,
                    entry.identity(),
                ));
                writer.add_document(self.fields.document(&entry, flags))?;
            }
        }
        if let Some(entry) = new {
            let flags = flags_of(&entry);
            writer.add_document(self.fields.document(&entry, flags))?;
        }
        Ok(())
    }

    /// False when no other server's listing in the group of `identity` was ever indexed in
    /// the live segments: then the stored listings need not be read. Two term lookups; counts
    /// include deleted documents, so a "true" may be wrong, which costs a look and changes
    /// nothing.
    fn others_may_list(
        &self,
        searcher: &Searcher,
        kind: Kind,
        server: &str,
        identity: &str,
    ) -> Result<bool, SearchError> {
        let listings = searcher.doc_freq(&self.fields.group_term(kind, server, identity))?;
        if listings == 0 {
            return Ok(false);
        }
        Ok(listings > searcher.doc_freq(&self.fields.key_term(kind, server, identity))?)
    }

    /// Every live listing in the group of `identity` in the committed index, with its flags.
    fn listings(
        &self,
        searcher: &Searcher,
        kind: Kind,
        server: &str,
        identity: &str,
    ) -> Result<Vec<(Entry, Flags)>, SearchError> {
        let query = TermQuery::new(
            self.fields.group_term(kind, server, identity),
            IndexRecordOption::Basic,
        );
        self.stored(searcher, &query)
    }

    /// Every listing of `server` of `kind`.
    fn server_kind_query(&self, server: &str, kind: Kind) -> BooleanQuery {
        BooleanQuery::new(vec![
            (
                Occur::Must,
                Box::new(TermQuery::new(
                    tantivy::Term::from_field_text(self.fields.server, server),
                    IndexRecordOption::Basic,
                )) as Box<dyn Query>,
            ),
            (
                Occur::Must,
                Box::new(TermQuery::new(
                    self.fields.kind_term(kind),
                    IndexRecordOption::Basic,
                )),
            ),
        ])
    }

    /// The listings of `server` of `kind` whose URI another server lists too.
    fn server_shared_listings(
        &self,
        searcher: &Searcher,
        server: &str,
        kind: Kind,
    ) -> Result<Vec<(Entry, Flags)>, SearchError> {
        let query = BooleanQuery::new(vec![
            (
                Occur::Must,
                Box::new(self.server_kind_query(server, kind)) as Box<dyn Query>,
            ),
            (
                Occur::Must,
                Box::new(TermQuery::new(
                    self.fields.flag_term(self.fields.shared),
                    IndexRecordOption::Basic,
                )),
            ),
        ]);
        self.stored(searcher, &query)
    }

    fn stored(
        &self,
        searcher: &Searcher,
        query: &dyn Query,
    ) -> Result<Vec<(Entry, Flags)>, SearchError> {
        let addresses = searcher.search(query, &DocSetCollector)?;
        let mut listings = Vec::with_capacity(addresses.len());
        for address in addresses {
            let document: TantivyDocument = searcher.doc(address)?;
            listings.push(self.fields.entry(&document));
        }
        Ok(listings)
    }

    /// Makes the segments of a first load built during its walk (`prebuild`) the server's
    /// resources, in one commit at `generation`. False, and nothing changed, when they cannot
    /// be taken as they are: another server's resources may share one of their URIs (they were
    /// built with the flags of URIs no one else lists); or the index still holds resources of
    /// the server (deleting them in this commit would delete the added segments' too: tantivy
    /// applies to a segment added this way every delete its queue has not handed on yet, so
    /// the writer starts afresh, with an empty queue, before adding them).
    pub fn adopt_load(
        &self,
        load: prebuild::BuiltLoad,
        generation: u64,
    ) -> Result<bool, SearchError> {
        let mut writer = lock(&self.writer);
        let searcher = self.reader.searcher();
        if searcher.search(
            &self.server_kind_query(&load.server, Kind::Resource),
            &tantivy::collector::Count,
        )? > 0
            || self.others_may_share(&searcher, &load)?
        {
            return Ok(false);
        }
        // Nothing is staged since the last commit: this only gives the writer a new queue.
        writer.rollback()?;
        writer.set_merge_policy(merge_policy());
        let outcome = (|| {
            let mut payload = lock(&self.committed).clone();
            for segment in load.segments {
                writer.add_segment(segment)?;
            }
            payload.generation = Some(generation);
            Ok(payload)
        })();
        self.finish(&mut writer, outcome)?;
        Ok(true)
    }

    /// Whether a resource URI of another server in the committed index may be one of the
    /// built load's: none is there (the usual case for a large first load), or each of their
    /// group terms is looked up in the built segments. Terms of deleted documents count, so a
    /// "true" may be wrong; it only costs the load its early build.
    fn others_may_share(
        &self,
        searcher: &Searcher,
        load: &prebuild::BuiltLoad,
    ) -> Result<bool, SearchError> {
        let resources = TermQuery::new(
            self.fields.kind_term(Kind::Resource),
            IndexRecordOption::Basic,
        );
        let others = BooleanQuery::new(vec![
            (Occur::Must, Box::new(resources) as Box<dyn Query>),
            (
                Occur::MustNot,
                Box::new(TermQuery::new(
                    tantivy::Term::from_field_text(self.fields.server, &load.server),
                    IndexRecordOption::Basic,
                )),
            ),
        ]);
        if searcher.search(&others, &tantivy::collector::Count)? == 0 {
            return Ok(false);
        }
        let built = load
            .segments
            .iter()
            .map(|meta| tantivy::SegmentReader::open(&self.index.segment(meta.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let built_terms = built
            .iter()
            .map(|reader| reader.inverted_index(self.fields.group))
            .collect::<Result<Vec<_>, _>>()?;
        let (first, after) = schema::group_prefix_range(Kind::Resource);
        for segment in searcher.segment_readers() {
            let terms = segment.inverted_index(self.fields.group)?;
            let mut stream = terms
                .terms()
                .range()
                .ge(&first)
                .lt(&after)
                .into_stream()
                .map_err(tantivy::TantivyError::from)?;
            while stream.advance() {
                for built in &built_terms {
                    let found = built
                        .terms()
                        .get(stream.key())
                        .map_err(tantivy::TantivyError::from)?;
                    if found.is_some() {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Records that the index reflects `generation` when a diff changed nothing it holds.
    pub fn advance(&self, generation: u64) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        let mut payload = lock(&self.committed).clone();
        payload.generation = Some(generation);
        self.finish(&mut writer, Ok(payload))
    }

    /// Records new server priorities: recomputes the merged view's winners of every shared
    /// URI and drops the listings of servers no longer named. Commits at the same generation.
    pub fn set_priorities(&self, servers: &Priorities) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        let outcome = self.set_priorities_locked(&writer, servers);
        self.finish(&mut writer, outcome)
    }

    fn set_priorities_locked(
        &self,
        writer: &IndexWriter,
        servers: &Priorities,
    ) -> Result<Payload, SearchError> {
        let mut payload = lock(&self.committed).clone();
        let searcher = self.reader.searcher();
        let dropped: Vec<String> = payload
            .servers
            .keys()
            .filter(|server| !servers.contains_key(*server))
            .cloned()
            .collect();
        let query = TermQuery::new(
            self.fields.flag_term(self.fields.shared),
            IndexRecordOption::Basic,
        );
        let mut by_uri: HashMap<(Kind, String), Vec<(Entry, Flags)>> = HashMap::new();
        for (entry, flags) in self.stored(&searcher, &query)? {
            by_uri
                .entry((entry.kind, entry.identity().to_string()))
                .or_default()
                .push((entry, flags));
        }
        for server in &dropped {
            writer.delete_term(tantivy::Term::from_field_text(self.fields.server, server));
        }
        for (_, listings) in by_uri {
            let kept = listings
                .into_iter()
                .filter(|(entry, _)| !dropped.contains(&entry.server))
                .collect();
            self.write_listings(writer, servers, kept, None)?;
        }
        payload.servers = servers.clone();
        Ok(payload)
    }

    /// Replaces the whole index with `entries` (every stored entry, in `Entry::rebuild_order`;
    /// `total` of them, for progress) at `generation`, computing the merged view as it goes.
    pub fn rebuild<I: IntoIterator<Item = Entry>>(
        &self,
        servers: &Priorities,
        generation: u64,
        total: u64,
        entries: I,
    ) -> Result<(), SearchError> {
        let mut writer = lock(&self.writer);
        self.set_phase(Phase::Rebuilding { percent: 0 });
        let outcome = self.rebuild_locked(&writer, servers, generation, total, entries);
        self.finish(&mut writer, outcome)
    }

    fn rebuild_locked<I: IntoIterator<Item = Entry>>(
        &self,
        writer: &IndexWriter,
        servers: &Priorities,
        generation: u64,
        total: u64,
        entries: I,
    ) -> Result<Payload, SearchError> {
        writer.delete_all_documents()?;
        let mut group: Vec<Entry> = Vec::new();
        let mut done = 0u64;
        let mut last_percent = 0u8;
        for entry in entries {
            if let Some(previous) = group.last() {
                match previous.rebuild_order(&entry) {
                    std::cmp::Ordering::Less => {
                        self.write_group(writer, servers, std::mem::take(&mut group))?
                    }
                    std::cmp::Ordering::Equal => {}
                    std::cmp::Ordering::Greater => {
                        return Err(SearchError::Unordered {
                            earlier: format!("{} {}", previous.kind, previous.identity()),
                            later: format!("{} {}", entry.kind, entry.identity()),
                        })
                    }
                }
            }
            group.push(entry);
            done += 1;
            self.check_cancelled(done)?;
            if done % PROGRESS_EVERY == 0 && total > 0 {
                let percent = (done.saturating_mul(100) / total).min(99) as u8;
                if percent != last_percent {
                    last_percent = percent;
                    self.status
                        .send_modify(|status| status.phase = Phase::Rebuilding { percent });
                }
            }
        }
        self.write_group(writer, servers, group)?;
        Ok(Payload {
            schema: SCHEMA_VERSION,
            generation: Some(generation),
            servers: servers.clone(),
        })
    }

    fn write_group(
        &self,
        writer: &IndexWriter,
        servers: &Priorities,
        group: Vec<Entry>,
    ) -> Result<(), SearchError> {
        if group.is_empty() {
            return Ok(());
        }
        let winner = group
            .iter()
            .map(|entry| {
                (
                    servers
                        .get(&entry.server)
                        .copied()
                        .unwrap_or(UNKNOWN_PRIORITY),
                    entry.server.as_str(),
                )
            })
            .min()
            .map(|(_, server)| server.to_string());
        let shared = group.len() > 1;
        for entry in group {
            let flags = Flags {
                wins: winner.as_deref() == Some(entry.server.as_str()),
                shared,
            };
            writer.add_document(self.fields.document(&entry, flags))?;
        }
        Ok(())
    }

    /// Commits what `outcome` staged with its payload, or discards it all on error.
    fn finish(
        &self,
        writer: &mut IndexWriter,
        outcome: Result<Payload, SearchError>,
    ) -> Result<(), SearchError> {
        let committed = outcome.and_then(|mut payload| {
            payload.schema = SCHEMA_VERSION;
            let text = serde_json::to_string(&payload).unwrap_or_default();
            let mut commit = writer.prepare_commit()?;
            commit.set_payload(&text);
            commit.commit()?;
            self.reader.reload()?;
            Ok(payload)
        });
        match committed {
            Ok(payload) => {
                *lock(&self.committed) = payload;
                self.publish(None);
                Ok(())
            }
            Err(error) => {
                match writer.rollback() {
                    Ok(_) => writer.set_merge_policy(merge_policy()),
                    Err(rollback) => {
                        tracing::warn!(%rollback, "cannot roll back the search index writer")
                    }
                }
                self.publish(None);
                Err(error)
            }
        }
    }

    /// One page of hits for `query`; waits for a free search slot until its time limit.
    pub fn search(&self, query: &SearchQuery) -> Result<Page, SearchError> {
        let deadline = Instant::now() + query.time_limit;
        let _slot = self.slots.enter(deadline)?;
        let searcher = self.reader.searcher();
        let generation = lock(&self.committed).generation.unwrap_or(0);
        query::run(&searcher, &self.fields, query, deadline, generation)
    }
}

/// Merging segments costs memory in proportion to their size; segments this large are left
/// alone, which bounds it (a million entries stay in a handful of segments).
fn merge_policy() -> Box<tantivy::merge_policy::LogMergePolicy> {
    let mut merges = tantivy::merge_policy::LogMergePolicy::default();
    merges.set_max_docs_before_merge(MAX_DOCS_BEFORE_MERGE);
    Box::new(merges)
}

fn open_existing(directory: &Path, fields: &Fields) -> Result<Option<Index>, String> {
    if !directory.join("meta.json").exists() {
        return Ok(None);
    }
    let index = directory::UnsyncedDirectory::open(directory)
        .and_then(Index::open)
        .map_err(|error| format!("cannot open it: {error}"))?;
    if index.schema() != fields.schema {
        return Err("its fields are from another version".into());
    }
    match read_payload(&index) {
        Some(payload) if payload.schema == SCHEMA_VERSION => {}
        Some(payload) => {
            return Err(format!(
                "its schema version is {}, this mcp-mirror uses {SCHEMA_VERSION}",
                payload.schema
            ))
        }
        None if index.load_metas().map(|meta| meta.opstamp).unwrap_or(0) == 0 => {}
        None => return Err("its commit records no generation".into()),
    }
    Fields::register_analyzer(&index);
    // Open every segment now: a corrupt file shows here rather than in the first search.
    let reader = index
        .reader()
        .map_err(|error| format!("cannot read it: {error}"))?;
    let searcher = reader.searcher();
    for segment in searcher.segment_readers() {
        segment
            .inverted_index(fields.all)
            .map_err(|error| format!("a segment is unreadable: {error}"))?;
    }
    Ok(Some(index))
}

fn create(directory: &Path, fields: &Fields) -> Result<Index, SearchError> {
    std::fs::create_dir_all(directory).map_err(|source| SearchError::Io {
        action: "create the directory",
        path: directory.to_path_buf(),
        source,
    })?;
    let marker = directory.join(MARKER_FILE);
    let is_empty = std::fs::read_dir(directory)
        .map(|mut entries| entries.next().is_none())
        .unwrap_or(false);
    if !is_empty && !marker.exists() {
        return Err(SearchError::NotOurs {
            path: directory.to_path_buf(),
        });
    }
    std::fs::write(
        &marker,
        "The search index of mcp-mirror, derived from the database beside it; safe to delete.\n",
    )
    .map_err(|source| SearchError::Io {
        action: "write",
        path: marker.clone(),
        source,
    })?;
    let index = Index::create(
        directory::UnsyncedDirectory::open(directory)?,
        fields.schema.clone(),
        tantivy::IndexSettings::default(),
    )?;
    Fields::register_analyzer(&index);
    Ok(index)
}

/// Empties an index directory of ours so a new index can be made there.
fn reset(directory: &Path) -> Result<(), SearchError> {
    if !directory.join(MARKER_FILE).exists() {
        return Err(SearchError::NotOurs {
            path: directory.to_path_buf(),
        });
    }
    std::fs::remove_dir_all(directory).map_err(|source| SearchError::Io {
        action: "remove",
        path: directory.to_path_buf(),
        source,
    })
}

fn read_payload(index: &Index) -> Option<Payload> {
    let meta = index.load_metas().ok()?;
    serde_json::from_str(meta.payload.as_deref()?).ok()
}

fn directory_bytes(directory: &Path) -> u64 {
    std::fs::read_dir(directory)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.metadata().ok())
                .filter(|metadata| metadata.is_file())
                .map(|metadata| metadata.len())
                .sum()
        })
        .unwrap_or(0)
}

/// At most a fixed number of searches of the index at once, the others waiting until their
/// deadline: a bound of the index itself, below the daemon's search gate (`search::gate`).
struct SearcherSlots {
    running: Mutex<usize>,
    freed: Condvar,
    limit: usize,
}

struct SearcherSlot<'a>(&'a SearcherSlots);

impl SearcherSlots {
    fn new(limit: usize) -> SearcherSlots {
        SearcherSlots {
            running: Mutex::new(0),
            freed: Condvar::new(),
            limit: limit.max(1),
        }
    }

    fn enter(&self, deadline: Instant) -> Result<SearcherSlot<'_>, SearchError> {
        let mut running = lock(&self.running);
        while *running >= self.limit {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SearchError::Busy);
            }
            running = self
                .freed
                .wait_timeout(running, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        *running += 1;
        Ok(SearcherSlot(self))
    }
}

impl Drop for SearcherSlot<'_> {
    fn drop(&mut self) {
        *lock(&self.0.running) -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests;
