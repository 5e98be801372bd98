//! A catch-up's commits: a whole (server, kind) read again, or a bounded batch of one server's changed entries, each applied once the next is known so the last commits at the target generation.

use std::collections::{BTreeMap, HashSet};

use super::error::KeepError;
use crate::protocol::Kind;
use crate::search::{Commit, Entry, Phase, Pin, SearchIndex, ServerDiff};
use crate::store::SourceSnapshot;

/// How long the keeper waits for the segments of a first load built during its walk to be
/// finished (the builder is at most a channel's pages behind the writer).
const BUILT_LOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The most changed entries (and feed rows read at once) the keeper holds and applies in one
/// commit. A re-walk that changes a million entries is applied in batches of this many, so
/// the keeper's memory follows the batch, not the swap (with one vector of every changed
/// entry, four such re-walks left the daemon at 4 GB).
pub const CATCH_UP_BATCH_ENTRIES: usize = 5_000;
/// The most bytes of entry text (URIs, names, titles, descriptions, inputs) one batch holds:
/// entries may be up to `max_entry_bytes` each, so the count alone does not bound a batch.
pub const CATCH_UP_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// One commit of a catch-up.
pub(super) enum Work {
    /// Every entry of `kind` of `server`, read again and streamed into one commit; a first
    /// load's index built during its walk is taken instead when it is `built_current` (no
    /// swap of the server came after that load).
    Everything {
        server: String,
        kind: Kind,
        built_current: bool,
    },
    /// The changed entries of one server's kinds. `cut` when the batch bound split the
    /// server's changes (more of them follow in the next commit).
    Keys {
        diffs: Vec<ServerDiff<Vec<Entry>>>,
        cut: bool,
    },
}

/// The changed entries of one server read so far, by kind, within the batch bounds.
#[derive(Default)]
pub(super) struct KeyBatch {
    server: Option<String>,
    by_kind: BTreeMap<Kind, (Vec<String>, Vec<Entry>)>,
    seen: HashSet<(Kind, String)>,
    entries: usize,
    bytes: usize,
}

impl KeyBatch {
    pub(super) fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub(super) fn is_full(&self) -> bool {
        self.entries >= CATCH_UP_BATCH_ENTRIES || self.bytes >= CATCH_UP_BATCH_BYTES
    }

    /// Looks up what `server` lists under `identity` now: a listing to write again, or one
    /// gone. A key the batch holds already is not read twice.
    pub(super) fn add(
        &mut self,
        snapshot: &SourceSnapshot<'_>,
        server: String,
        kind: Kind,
        identity: String,
    ) -> Result<(), KeepError> {
        if !self.seen.insert((kind, identity.clone())) {
            return Ok(());
        }
        let (removed, upserted) = self.by_kind.entry(kind).or_default();
        match snapshot.entry(&server, kind, &identity)? {
            Some(entry) => {
                self.bytes += entry_bytes(&entry);
                upserted.push(entry);
            }
            None => {
                self.bytes += identity.len();
                removed.push(identity);
            }
        }
        self.bytes += identity_overhead(&server);
        self.entries += 1;
        self.server = Some(server);
        Ok(())
    }

    /// The batch as one commit's work (its generation is set when it is applied), leaving
    /// this batch empty.
    pub(super) fn take(&mut self, cut: bool) -> Work {
        let batch = std::mem::take(self);
        let server = batch.server.unwrap_or_default();
        let diffs = batch
            .by_kind
            .into_iter()
            .map(|(kind, (removed, upserted))| ServerDiff {
                generation: 0,
                server: server.clone(),
                kind,
                replace: false,
                removed,
                upserted,
            })
            .collect();
        Work::Keys { diffs, cut }
    }
}

/// The bytes an entry's texts take (what a batch holds of it).
fn entry_bytes(entry: &Entry) -> usize {
    let optional = |text: &Option<String>| text.as_ref().map_or(0, String::len);
    entry.server.len()
        + entry.uri.len()
        + entry.name.len()
        + optional(&entry.title)
        + optional(&entry.description)
        + optional(&entry.mime_type)
        + optional(&entry.inputs)
}

/// What a key costs besides its texts: the batch's set of keys seen, the struct around it.
fn identity_overhead(server: &str) -> usize {
    server.len() + 64
}

/// Applies a catch-up's work in order: each piece once the next is known, so the last one
/// commits at the target generation and every earlier one at the old generation.
pub(super) struct Commits<'index, 'snapshot> {
    index: &'index SearchIndex,
    snapshot: &'snapshot SourceSnapshot<'snapshot>,
    from: u64,
    target: u64,
    serving: bool,
    pending: Option<Work>,
    split: bool,
    /// While serving: the index's commit before this pass (the catalog at `from`, whole),
    /// pinned for searches once a swap is split over commits.
    before: Option<Commit>,
    /// Searches answer from `before` while this is held; dropped with the pass, however it
    /// ends (`finish` hands it to the caller, to drop once the index says it is ready).
    pin: Option<Pin<'index>>,
}

impl<'index, 'snapshot> Commits<'index, 'snapshot> {
    pub(super) fn new(
        index: &'index SearchIndex,
        snapshot: &'snapshot SourceSnapshot<'snapshot>,
        from: u64,
        target: u64,
        serving: bool,
    ) -> Self {
        Commits {
            index,
            snapshot,
            from,
            target,
            serving,
            pending: None,
            split: false,
            // Taken before this pass commits anything: a commit of another server's whole
            // changes or list earlier in the pass would make a later pin hold a catalog that
            // never was (one swap in, an earlier one not).
            before: serving.then(|| index.last_commit()).flatten(),
            pin: None,
        }
    }

    pub(super) fn push(&mut self, work: Work) -> Result<(), KeepError> {
        if let Some(previous) = self.pending.replace(work) {
            self.apply(previous, self.from)?;
            // The feed is read up to the pass's target; the entries from the newest state,
            // so the pass pins no snapshot for its whole length (`SourceSnapshot`).
            self.snapshot.renew()?;
        }
        Ok(())
    }

    /// Applies the last piece at the target generation (or only moves the generation when
    /// nothing changed an entry); what a split catch-up's batches took goes back to the kernel
    /// by the allocator's decay (`heap`). Returns the pin of the commit searches
    /// answered from meanwhile, if any: the caller drops it once the index says it is ready,
    /// so no search finds the index neither ready nor pinned in between.
    pub(super) fn finish(mut self) -> Result<Option<Pin<'index>>, KeepError> {
        match self.pending.take() {
            Some(last) => self.apply(last, self.target)?,
            None => self.index.advance(self.target)?,
        }
        Ok(self.pin.take())
    }

    fn apply(&mut self, work: Work, generation: u64) -> Result<(), KeepError> {
        match work {
            Work::Keys { mut diffs, cut } => {
                if cut && !self.split {
                    self.split = true;
                    if self.serving {
                        // Part of a swap is about to be committed: the index's last commit
                        // answers for no catalog until the rest is. The commit before this
                        // pass (the catalog at `from`, whole) is pinned first, so searches
                        // answer from it, saying so, once SQLite has had its share.
                        self.pin = self.before.take().map(|commit| self.index.pin(commit));
                        self.index.set_phase(Phase::CatchingUp);
                        tracing::info!(
                            from = self.from,
                            to = self.target,
                            batch = CATCH_UP_BATCH_ENTRIES,
                            pinned = self.pin.is_some(),
                            "the search index applies a large change in batches; searches try SQLite first, then the index's commit before it, until it is done"
                        );
                    }
                }
                let entries: usize = diffs
                    .iter()
                    .map(|diff| diff.removed.len() + diff.upserted.len())
                    .sum();
                self.index.note_catch_up_batch(entries as u64);
                for diff in &mut diffs {
                    diff.generation = generation;
                }
                self.index.apply_kinds(diffs)?;
                Ok(())
            }
            Work::Everything {
                server,
                kind,
                built_current,
            } => self.apply_everything(&server, kind, built_current, generation),
        }
    }

    /// Every entry of `kind` of `server`, streamed into one commit (searches may answer from
    /// the last commit meanwhile, saying so: at a million entries this takes seconds).
    fn apply_everything(
        &mut self,
        server: &str,
        kind: Kind,
        built_current: bool,
        generation: u64,
    ) -> Result<(), KeepError> {
        let index = self.index;
        index.set_replacing(self.serving && !self.split);
        // A first load built during its walk: its segments, in one commit.
        let built = match kind {
            Kind::Resource => {
                self.snapshot
                    .server_resources(server)?
                    .and_then(|(id, resources)| {
                        index
                            .prebuilder
                            .take(server, id, resources, BUILT_LOAD_WAIT)
                    })
            }
            _ => None,
        };
        if built.is_some() && !built_current {
            // Taken (and dropped) all the same: the builder's segments are not kept for it.
            tracing::info!(server, "the first load's index built during its walk is older than the catalog (the server swapped again before the index took it); indexing it again");
        }
        if let Some(load) = built.filter(|_| built_current) {
            let documents = load.documents;
            let adopted = index.adopt_load(load, generation);
            if matches!(adopted, Ok(true)) {
                index.set_replacing(false);
                tracing::info!(
                    server,
                    documents,
                    "the first load's index, built during its walk, is in"
                );
                return Ok(());
            }
            if let Err(error) = adopted {
                index.set_replacing(false);
                return Err(error.into());
            }
            tracing::info!(server, "the first load's index built during its walk cannot be taken as it is (another server lists its URIs); indexing it again");
        }
        let applied = self.snapshot.with_entries(Some((server, kind)), |entries| {
            index.apply(ServerDiff {
                generation,
                server: server.to_string(),
                kind,
                replace: true,
                removed: Vec::new(),
                upserted: entries,
            })
        });
        index.set_replacing(false);
        applied??;
        Ok(())
    }
}
