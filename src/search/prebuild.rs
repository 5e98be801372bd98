//! A large first load indexed during its walk: the writer's staged pages (`LoadEvent`) are
//! written into segments beside the index, in its directory but in no commit, so no reader
//! sees them; when the load's swap commits, the keeper adds those segments in the one commit
//! of the load's generation (`SearchIndex::adopt_load`) instead of reading a million entries
//! back from the database and indexing them then.
//!
//! Bounded: one load is built at a time, and a load is built only once it has staged
//! `BUILD_FROM` entries (smaller ones are quick to index after their commit); its segments are
//! cut at `SEGMENT_HEAP_BYTES` of indexing memory. A load the builder could not follow whole
//! (a page it had no room for, an error) is never adopted: the keeper then reads the load
//! from the database as it always did. Segments not adopted are dropped; their files are no
//! longer referenced and tantivy's garbage collection removes them, as it does after a crash.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tantivy::index::SegmentMeta;
use tantivy::indexer::{AddOperation, SegmentWriter};
use tantivy::Segment;

use super::{lock, Entry, SearchIndex};
use crate::store::LoadEvent;

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
/// The capacity of the writer's channel, in pages.
pub const FEED_PAGES: usize = 64;

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
    /// A page was missed or could not be written: never adopted.
    lost: bool,
    /// When the load committed and its last segment was finalized.
    finished: Option<Instant>,
}

#[derive(Default)]
struct State {
    loads: HashMap<i64, Load>,
    /// Loads whose pages are not kept (too many at once, or given up on).
    ignored: HashSet<i64>,
}

/// The builder's state, shared by its thread and the keeper.
#[derive(Default)]
pub struct Prebuilder {
    state: Mutex<State>,
    changed: Condvar,
}

impl Prebuilder {
    /// Builds from `events` until the writer goes away.
    pub fn run(self: Arc<Self>, index: Arc<SearchIndex>, events: Receiver<LoadEvent>) {
        for event in events {
            let mut state = lock(&self.state);
            match event {
                LoadEvent::Page {
                    id,
                    server,
                    entries,
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
                        if let Err(error) = load.add(&index, entries, someone_building) {
                            tracing::warn!(%error, "building a first load's index during its walk failed; it is indexed after its commit");
                            load.give_up();
                        }
                        if load.lost {
                            state.loads.remove(&id);
                            state.ignored.insert(id);
                        }
                    }
                }
                LoadEvent::Promoted { id, resources } => {
                    state.ignored.remove(&id);
                    let Some(load) = state.loads.get_mut(&id) else {
                        continue;
                    };
                    let finished = match load.documents > 0 && !load.lost {
                        true => load.finish(),
                        false => Ok(false),
                    };
                    match finished {
                        Ok(true) if load.documents == resources => {
                            load.finished = Some(Instant::now())
                        }
                        Ok(built) => {
                            if built {
                                tracing::info!(server = load.server, built = load.documents, committed = resources, "a first load's index built during its walk missed pages; it is indexed after its commit");
                            }
                            state.loads.remove(&id);
                        }
                        Err(error) => {
                            tracing::warn!(%error, "finishing a first load's index failed; it is indexed after its commit");
                            state.loads.remove(&id);
                        }
                    }
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
        let mut state = lock(&self.state);
        loop {
            let load = state.loads.get(&id)?;
            if load.finished.is_some() {
                let load = state.loads.remove(&id)?;
                return (load.server == server && load.documents == resources).then(|| BuiltLoad {
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
    /// Drops built loads no pass took for a while (the index was rebuilt meanwhile, say):
    /// their segments' files go with the next garbage collection.
    pub fn forget_unclaimed(&self) {
        lock(&self.state).loads.retain(|_, load| {
            !matches!(load.finished, Some(finished) if finished.elapsed() >= UNCLAIMED_FOR)
        });
    }
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
                super::Flags {
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
