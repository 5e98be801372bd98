//! A large first load indexed during its walk: the writer's staged pages (`LoadEvent`) are
//! written into segments beside the index, in its directory but in no commit, so no reader
//! sees them; when the load's swap commits, the keeper adds those segments in the one commit
//! of the load's generation (`SearchIndex::adopt_load`) instead of reading a million entries
//! back from the database and indexing them then.
//!
//! A page carries its walk's room for it, given back once the page is written here. A page
//! without room comes without the builder (up to `FIRST_LOAD_INDEX_LAG_ROWS` rows a walk, and
//! any page once the walk has waited `FIRST_LOAD_INDEX_HOLD` in all; between the two the
//! walk, that walk only, never the writer, waits for room): the builder reads those from the
//! database after the commit, by the ids their rows took (on two threads when there are many,
//! `READ_BACK_SHARED_FROM`), and adds them to the load's segments before the keeper takes them.
//!
//! Bounded: one load is built at a time, and a load is built only once it has staged
//! `BUILD_FROM` entries (smaller ones are quick to index after their commit); its segments are
//! cut at `SEGMENT_HEAP_BYTES` of indexing memory. A load the builder could not follow whole
//! (an error, a count that differs from the database's) is never adopted: the keeper then
//! reads the load from the database as it always did, and says so in the log. Segments not
//! adopted are dropped; their files are no longer referenced and tantivy's garbage
//! collection removes them, as it does after a crash.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tantivy::index::SegmentMeta;
use tantivy::indexer::{AddOperation, SegmentWriter};
use tantivy::Segment;

use super::error::lock;
use super::{Entry, SearchIndex};
use crate::store::{IndexSource, LoadEvent};

/// A first load is built during its walk once it has staged this many entries.
const BUILD_FROM: usize = 10_000;
/// The indexing memory of one segment being built; a segment is cut when it is used up.
const SEGMENT_HEAP_BYTES: usize = 32 * 1024 * 1024;
/// tantivy cuts its own segments this far below the budget.
const HEAP_MARGIN_BYTES: usize = 2 * 1024 * 1024;
/// At most this many loads are followed at once (one built, the others buffered until one of
/// them reaches `BUILD_FROM`); pages of any other load are not kept.
const LOADS_FOLLOWED: usize = 2;
/// A built load no pass took for this long is dropped.
const UNCLAIMED_FOR: Duration = Duration::from_secs(60);
/// The most a pass waits for the builder to read a committed load's missed pages from the
/// database (bounded by the pages themselves; reading the whole load again is more work).
const READ_BACK_WAIT: Duration = Duration::from_secs(600);
/// Missed pages are read from the database this many row ids at a time.
const READ_BACK_IDS: i64 = 5_000;
/// A read-back of at least this many rows (about 0.2 s of indexing) is shared by two threads
/// when the host has two cores: at 1,000,000 about half the load is read back, seconds of
/// indexing on one core.
const READ_BACK_SHARED_FROM: i64 = 20_000;

/// The segments of one first load, built and finalized.
pub struct BuiltLoad {
    pub server: String,
    pub documents: u64,
    pub segments: Vec<SegmentMeta>,
}

struct Load {
    server: String,
    /// Entries staged before the build began (fewer than `BUILD_FROM`).
    buffered: Vec<Entry>,
    building: Option<(SegmentWriter, Segment)>,
    segments: Vec<SegmentMeta>,
    documents: u64,
    opstamp: u64,
    /// The row ids of the pages taken, merged into ranges (both ends included).
    taken: Vec<(i64, i64)>,
    /// A page could not be written: never adopted.
    lost: bool,
    /// When the load committed and its last segment was finalized.
    finished: Option<Instant>,
}

#[derive(Default)]
struct State {
    loads: HashMap<i64, Load>,
    /// Loads whose pages are not kept (too many at once, or given up on).
    ignored: HashSet<i64>,
    /// Committed loads whose missed pages the builder is reading from the database.
    finishing: HashSet<i64>,
}

/// The builder's state, shared by its thread and the keeper.
#[derive(Default)]
pub struct Prebuilder {
    state: Mutex<State>,
    changed: Condvar,
    /// Rows of committed loads read back from the database so far (pages the walk staged
    /// without room for the index), and loads handed to the keeper whole.
    rows_read_back: std::sync::atomic::AtomicU64,
    loads_handed_out: std::sync::atomic::AtomicU64,
}

impl Prebuilder {
    /// Builds from `events` until the writer goes away; reads missed pages from `database`.
    pub fn run(
        self: Arc<Self>,
        index: Arc<SearchIndex>,
        events: Receiver<LoadEvent>,
        database: &Path,
    ) {
        for event in events {
            let mut state = lock(&self.state);
            match event {
                LoadEvent::Page {
                    id,
                    server,
                    ids,
                    entries,
                    room,
                } => {
                    if state.ignored.contains(&id) {
                        continue;
                    }
                    if !state.loads.contains_key(&id) {
                        if state.loads.len() >= LOADS_FOLLOWED {
                            state.ignored.insert(id);
                            continue;
                        }
                        state.loads.insert(id, Load::new(server));
                    }
                    let someone_building = state
                        .loads
                        .iter()
                        .any(|(other, load)| *other != id && load.documents > 0);
                    if let Some(load) = state.loads.get_mut(&id) {
                        load.note_taken(ids);
                        if let Err(error) = load.add(&index, entries, someone_building) {
                            tracing::warn!(%error, "building a first load's index during its walk failed; it is indexed after its commit");
                            load.give_up();
                        }
                        if load.lost {
                            state.loads.remove(&id);
                            state.ignored.insert(id);
                        }
                    }
                    // The walk may stage another page for the index now.
                    drop(room);
                }
                LoadEvent::Promoted {
                    id,
                    resources,
                    ranges,
                    read_back,
                } => {
                    state.ignored.remove(&id);
                    let Some(mut load) = state.loads.remove(&id) else {
                        continue;
                    };
                    // Read back and finished without the lock: a pass waits for it in `take`.
                    state.finishing.insert(id);
                    drop(state);
                    // A panic here must not leave a pass waiting for this load.
                    let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        match load.documents > 0 && !load.lost {
                            true => {
                                load.read_back(&index, database, id, &ranges)
                                    .and_then(|rows| {
                                        self.rows_read_back.fetch_add(rows, Ordering::Relaxed);
                                        load.finish()
                                    })
                            }
                            false => Ok(false),
                        }
                    }))
                    .unwrap_or_else(|_| {
                        Err(super::SearchError::Source(
                            "the builder panicked while finishing it".into(),
                        ))
                    });
                    let mut state = lock(&self.state);
                    state.finishing.remove(&id);
                    match finished {
                        Ok(true) if load.documents == resources => {
                            load.finished = Some(Instant::now());
                            state.loads.insert(id, load);
                        }
                        Ok(built) => {
                            if built {
                                tracing::info!(server = load.server, built = load.documents, committed = resources, "a first load's index built during its walk holds another count than the database; it is indexed after its commit");
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "finishing a first load's index failed; it is indexed after its commit");
                        }
                    }
                    // The full-text backlog and the checkpointer go on (they wait for it).
                    drop(read_back);
                    self.changed.notify_all();
                }
                LoadEvent::Dropped { id } => {
                    state.ignored.remove(&id);
                    state.loads.remove(&id);
                    self.changed.notify_all();
                }
            }
        }
    }

    /// The built segments of the load that gave `server` the id `id` with `resources`
    /// resources, when one was built whole; waits up to `wait` for the builder to finish it.
    pub fn take(&self, server: &str, id: i64, resources: u64, wait: Duration) -> Option<BuiltLoad> {
        let deadline = Instant::now() + wait;
        let read_back_deadline = Instant::now() + READ_BACK_WAIT;
        let mut state = lock(&self.state);
        loop {
            if state.finishing.contains(&id) && Instant::now() < read_back_deadline {
                // Reading the pages it missed: less work than reading the whole load.
                let left = read_back_deadline.saturating_duration_since(Instant::now());
                state = self
                    .changed
                    .wait_timeout(state, left)
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .0;
                continue;
            }
            let load = state.loads.get(&id)?;
            if load.finished.is_some() {
                let load = state.loads.remove(&id)?;
                let whole = load.server == server && load.documents == resources;
                if whole {
                    self.loads_handed_out.fetch_add(1, Ordering::Relaxed);
                }
                return whole.then(|| BuiltLoad {
                    server: load.server,
                    documents: load.documents,
                    segments: load.segments,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                state.loads.remove(&id);
                state.ignored.insert(id);
                return None;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }
}

impl Prebuilder {
    /// Rows read back from the database, and loads handed out whole, so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.rows_read_back.load(Ordering::Relaxed),
            self.loads_handed_out.load(Ordering::Relaxed),
        )
    }

    /// Drops built loads no pass took for a while (the index was rebuilt meanwhile, say):
    /// their segments' files go with the next garbage collection.
    pub fn forget_unclaimed(&self) {
        lock(&self.state).loads.retain(|_, load| {
            !matches!(load.finished, Some(finished) if finished.elapsed() >= UNCLAIMED_FOR)
        });
    }
}

/// Writes `entries` into segments of `index` as the builder writes a first load's pages, and
/// finalizes them, outside any commit (no pass adopts them; tantivy's garbage collection
/// removes their files): the cost of one document on the first load's path, which
/// `bench index` measures. The number of segments written.
pub fn write_detached(
    index: &SearchIndex,
    server: &str,
    entries: Vec<Entry>,
) -> Result<usize, super::SearchError> {
    let mut load = Load::new(server.to_string());
    load.write(index, entries)?;
    load.finish()?;
    Ok(load.segments.len())
}

impl Load {
    fn new(server: String) -> Load {
        Load {
            server,
            buffered: Vec::new(),
            building: None,
            segments: Vec::new(),
            documents: 0,
            opstamp: 0,
            taken: Vec::new(),
            lost: false,
            finished: None,
        }
    }

    fn give_up(&mut self) {
        self.lost = true;
        self.buffered = Vec::new();
        self.building = None;
        self.segments.clear();
    }

    /// Records that the page whose rows took `ids` was taken.
    fn note_taken(&mut self, ids: (i64, i64)) {
        match self.taken.last_mut() {
            Some(last) if last.1 + 1 == ids.0 => last.1 = ids.1,
            _ => self.taken.push(ids),
        }
    }

    /// Reads from the database, and writes, the rows of the committed load (now of the
    /// server whose id is `server_id`) whose ids are in `ranges` but in no page taken. A large
    /// read-back is shared with a second thread (`READ_BACK_SHARED_FROM`) writing segments of
    /// its own: the walk is over, so its core is free, and both threads run at the lowered
    /// priority this one has (a thread inherits its parent's), so searches still come first.
    fn read_back(
        &mut self,
        index: &SearchIndex,
        database: &Path,
        server_id: i64,
        ranges: &[(i64, i64)],
    ) -> Result<u64, super::SearchError> {
        let missed = missed_ranges(ranges, &self.taken);
        if missed.is_empty() {
            return Ok(0);
        }
        let started = Instant::now();
        let rows: i64 = missed.iter().map(|(first, last)| last - first + 1).sum();
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        let (mine, theirs) = match rows >= READ_BACK_SHARED_FROM && cores >= 2 {
            true => split_ranges(&missed, rows / 2),
            false => (missed, Vec::new()),
        };
        std::thread::scope(|scope| {
            let other = match theirs.is_empty() {
                true => None,
                false => {
                    let mut part = Load::new(self.server.clone());
                    // Opstamps apart from this thread's (each document has its own).
                    part.opstamp = self.opstamp + rows as u64;
                    let thread = std::thread::Builder::new()
                        .name("search-read-back".into())
                        .spawn_scoped(scope, move || {
                            part.read_ranges(index, database, server_id, &theirs)?;
                            part.cut()?;
                            Ok::<Load, super::SearchError>(part)
                        })
                        .map_err(|error| {
                            super::SearchError::Source(format!(
                                "cannot start a second read-back thread: {error}"
                            ))
                        })?;
                    Some(thread)
                }
            };
            let read_here = self.read_ranges(index, database, server_id, &mine);
            if let Some(thread) = other {
                let part = thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                self.segments.extend(part.segments);
                self.documents += part.documents;
            }
            read_here
        })?;
        tracing::info!(
            server = self.server,
            rows,
            seconds = started.elapsed().as_secs_f64(),
            "read the pages of a first load its index had no room for during the walk"
        );
        Ok(rows as u64)
    }

    /// Reads the rows whose ids are in `ranges` (all of the server whose id is `server_id`)
    /// from the database, `READ_BACK_IDS` at a time, and writes them.
    fn read_ranges(
        &mut self,
        index: &SearchIndex,
        database: &Path,
        server_id: i64,
        ranges: &[(i64, i64)],
    ) -> Result<(), super::SearchError> {
        let read = |error: crate::store::StoreError| {
            super::SearchError::Source(format!("cannot read its rows from the database: {error}"))
        };
        let mut source = IndexSource::open(database).map_err(read)?;
        let snapshot = source.snapshot().map_err(read)?;
        for &(first, last) in ranges {
            let mut from = first;
            while from <= last {
                let to = last.min(from + READ_BACK_IDS - 1);
                let entries = snapshot
                    .resources_with_ids(server_id, from, to)
                    .map_err(read)?;
                self.write(index, entries)?;
                // No snapshot pinned for the whole read-back (`SourceSnapshot`).
                snapshot.renew().map_err(read)?;
                from = to + 1;
            }
        }
        Ok(())
    }

    /// Takes one page: buffers it until the load is large enough, then writes it.
    fn add(
        &mut self,
        index: &SearchIndex,
        entries: Vec<Entry>,
        someone_building: bool,
    ) -> Result<(), super::SearchError> {
        if self.documents == 0 {
            self.buffered.extend(entries);
            if self.buffered.len() < BUILD_FROM {
                return Ok(());
            }
            if someone_building {
                self.give_up();
                return Ok(());
            }
            tracing::info!(
                server = self.server,
                "indexing a large first load during its walk"
            );
            let buffered = std::mem::take(&mut self.buffered);
            return self.write(index, buffered);
        }
        self.write(index, entries)
    }

    fn write(
        &mut self,
        index: &SearchIndex,
        entries: Vec<Entry>,
    ) -> Result<(), super::SearchError> {
        for entry in entries {
            if self.building.is_none() {
                let segment = index.index.new_segment();
                let writer = SegmentWriter::for_segment(SEGMENT_HEAP_BYTES, segment.clone())?;
                self.building = Some((writer, segment));
            }
            let Some((writer, _)) = self.building.as_mut() else {
                continue;
            };
            // The merged view's flags as for a URI no other server lists; `adopt_load` takes
            // the segments only when that holds.
            let document = index.fields.document(
                &entry,
                super::schema::Flags {
                    wins: true,
                    shared: false,
                },
            );
            writer.add_document(AddOperation {
                opstamp: self.opstamp,
                document,
            })?;
            self.opstamp += 1;
            self.documents += 1;
            if writer.mem_usage() >= SEGMENT_HEAP_BYTES - HEAP_MARGIN_BYTES {
                self.cut()?;
            }
        }
        Ok(())
    }

    /// Finalizes the segment being written, if any.
    fn cut(&mut self) -> Result<(), super::SearchError> {
        if let Some((writer, segment)) = self.building.take() {
            let documents = writer.max_doc();
            if documents == 0 {
                return Ok(());
            }
            writer.finalize()?;
            let meta = segment.with_max_doc(documents).meta().clone();
            meta.untrack_temp_docstore();
            self.segments.push(meta);
        }
        Ok(())
    }

    /// Finalizes the last segment; false when nothing was built.
    fn finish(&mut self) -> Result<bool, super::SearchError> {
        self.cut()?;
        Ok(!self.segments.is_empty())
    }
}

/// Ranges of row ids, both ends included.
type IdRanges = Vec<(i64, i64)>;

/// `ranges` (sorted, disjoint, both ends included) cut after their first `rows` ids: those,
/// and the rest.
fn split_ranges(ranges: &[(i64, i64)], rows: i64) -> (IdRanges, IdRanges) {
    let (mut first_part, mut rest) = (Vec::new(), Vec::new());
    let mut left = rows;
    for &(first, last) in ranges {
        let length = last - first + 1;
        if left >= length {
            first_part.push((first, last));
            left -= length;
        } else if left > 0 {
            first_part.push((first, first + left - 1));
            rest.push((first + left, last));
            left = 0;
        } else {
            rest.push((first, last));
        }
    }
    (first_part, rest)
}

/// The parts of `ranges` (sorted, disjoint, both ends included) that no range of `taken`
/// (sorted, disjoint) covers.
fn missed_ranges(ranges: &[(i64, i64)], taken: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut missed = Vec::new();
    for &(first, last) in ranges {
        let mut from = first;
        for &(taken_first, taken_last) in taken {
            if taken_last < from || taken_first > last {
                continue;
            }
            if taken_first > from {
                missed.push((from, taken_first - 1));
            }
            from = from.max(taken_last + 1);
        }
        if from <= last {
            missed.push((from, last));
        }
    }
    missed
}

#[cfg(test)]
mod tests {
    #[test]
    fn missed_ranges_are_what_no_page_taken_covers() {
        assert_eq!(super::missed_ranges(&[(1, 100)], &[(1, 100)]), vec![]);
        assert_eq!(
            super::missed_ranges(&[(1, 100), (200, 300)], &[(1, 40), (61, 100), (200, 250)]),
            vec![(41, 60), (251, 300)]
        );
        assert_eq!(super::missed_ranges(&[(1, 10)], &[]), vec![(1, 10)]);
    }

    #[test]
    fn split_ranges_cuts_after_so_many_ids() {
        let ranges = [(1, 10), (21, 30)];
        assert_eq!(
            super::split_ranges(&ranges, 10),
            (vec![(1, 10)], vec![(21, 30)])
        );
        assert_eq!(
            super::split_ranges(&ranges, 15),
            (vec![(1, 10), (21, 25)], vec![(26, 30)])
        );
        assert_eq!(
            super::split_ranges(&ranges, 3),
            (vec![(1, 3)], vec![(4, 10), (21, 30)])
        );
        assert_eq!(super::split_ranges(&ranges, 20), (ranges.to_vec(), vec![]));
    }
}
