//! The keeper's task: `spawn` / `keep_up` follow the store's changes and apply them to the index.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::batches;
use super::batches::CATCH_UP_BATCH_ENTRIES;
use super::batches::{Commits, KeyBatch};
use super::error::KeepError;
use crate::search::{Phase, Repair, SearchIndex};
use crate::store::{CatalogChanged, FeedGroups, IndexSource, Store};

/// How often the keeper looks for priority changes when no swap happens.
const QUIET_CHECK: Duration = Duration::from_secs(2);
/// How long the keeper waits before trying again after a failed pass.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// A keeper pass that panicked, or whose thread could not start.
struct Panicked;

/// What one keeper pass is asked: whether it is the first, the catalog version read before it,
/// and where its outcome goes.
type PassRequest = (
    bool,
    u64,
    tokio::sync::oneshot::Sender<Result<Result<(), KeepError>, Panicked>>,
);

/// The keeper's passes run on one thread of lowered priority (`background::BACKGROUND_NICE`): the
/// index's commits start tantivy's indexing threads from the committing thread, so they
/// inherit it, and searches come first on a busy host. A pass that panics is reported and the
/// thread goes on.
fn pass_thread(
    index: Arc<SearchIndex>,
    database: PathBuf,
) -> Option<std::sync::mpsc::Sender<PassRequest>> {
    let (requests, passes) = std::sync::mpsc::channel::<PassRequest>();
    let started = std::thread::Builder::new()
        .name("search-keeper".into())
        .spawn(move || {
            crate::background::lower_this_threads_priority(crate::background::BACKGROUND_NICE);
            // One connection for every pass: opening one parses the schema and registers
            // SQLite's functions, and its cached statements are prepared once (about 15 % of a
            // downstream's CPU per followed one-entry change went to that, by a helper's perf
            // profile). Opened again at a first pass and after a pass that failed or panicked.
            let mut source: Option<IndexSource> = None;
            for (first, version, reply) in passes {
                if first {
                    source = None;
                }
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let source = match &mut source {
                        Some(source) => source,
                        None => source.insert(IndexSource::open(&database)?),
                    };
                    keep_up_with(&index, source, first).map(|()| index.mark_caught_up(version))
                }))
                .map_err(|_| Panicked);
                if !matches!(outcome, Ok(Ok(()))) {
                    source = None;
                }
                let _ = reply.send(outcome);
            }
        });
    match started {
        Ok(_) => Some(requests),
        Err(error) => {
            tracing::warn!(%error, "cannot start the search index keeper's thread");
            None
        }
    }
}

/// Starts keeping `index` up to date with `store` until `stopping` says so.
pub fn spawn(
    index: Arc<SearchIndex>,
    store: Store,
    mut stopping: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let mut changes: broadcast::Receiver<CatalogChanged> = store.subscribe();
    // The pages of large first loads, to build their index during the walk.
    let (feed, pages) = std::sync::mpsc::channel();
    store.feed_first_loads(feed);
    let builder = {
        let index = index.clone();
        let database = store.path().to_path_buf();
        std::thread::Builder::new()
            .name("search-prebuild".into())
            // At the priority of the walk it follows and of the store's writer
            // (`BACKGROUND_NICE`), not above them: the walk goes on without the index for up
            // to `FIRST_LOAD_INDEX_LAG_ROWS` rows, so until then the index is not what makes a
            // first load visible, and at the daemon's priority it took a core from the walk,
            // the writer and the server they wait for (BENCHMARKS.md, the first sync of
            // 1,000,000: visible sooner, searchable about half a second later). Its read-back
            // after the commit runs here too, and searches come before it (with the read-back
            // at the daemon's priority, one client's searches in the 10 s after a 1,000,000
            // first load had a p99 of 4.3-6.1 ms).
            .spawn(move || {
                crate::background::lower_this_threads_priority(crate::background::BACKGROUND_NICE);
                index.prebuilder.clone().run(index, pages, &database)
            })
    };
    if let Err(error) = builder {
        tracing::warn!(%error, "cannot start the thread that indexes first loads during their walk");
    }
    let passes = pass_thread(index.clone(), store.path().to_path_buf());
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let pass = {
                // Read before the pass: whatever the pass sees is at least this new.
                let version = store.catalog_version();
                let (reply, answer) = tokio::sync::oneshot::channel();
                match passes
                    .as_ref()
                    .map(|passes| passes.send((first, version, reply)))
                {
                    Some(Ok(())) => answer.await.unwrap_or(Err(Panicked)),
                    _ => Err(Panicked),
                }
            };
            let pause = match pass {
                Ok(Ok(())) => {
                    first = false;
                    QUIET_CHECK
                }
                Ok(Err(KeepError::Index(crate::search::SearchError::Cancelled))) => return,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "the search index could not catch up; searches use SQLite meanwhile");
                    index.set_phase(Phase::Failed);
                    RETRY_AFTER_FAILURE
                }
                Err(Panicked) => {
                    tracing::error!("the search index keeper panicked (or could not start its thread); searches use SQLite");
                    index.set_phase(Phase::Failed);
                    RETRY_AFTER_FAILURE
                }
            };
            tokio::select! {
                received = changes.recv() => {
                    // A lagging receiver loses nothing: the next pass reads the feed.
                    if let Err(broadcast::error::RecvError::Closed) = received {
                        return;
                    }
                }
                () = tokio::time::sleep(pause) => {}
                _ = stopping.changed() => return,
            }
            if *stopping.borrow() {
                return;
            }
        }
    })
}

/// One pass: brings the index to the database's current generation.
pub fn keep_up(index: &SearchIndex, database: &Path, first: bool) -> Result<(), KeepError> {
    keep_up_with(index, &mut IndexSource::open(database)?, first)
}

/// One pass through an open `source` (the keeper's thread keeps one between passes).
fn keep_up_with(
    index: &SearchIndex,
    source: &mut IndexSource,
    first: bool,
) -> Result<(), KeepError> {
    let snapshot = source.snapshot()?;
    let target = snapshot.generation()?;
    let priorities = snapshot.priorities()?;
    let mut repair = index.repair_needed(target);
    // The same generation in another database (one replaced under the index) shows in the
    // counts; checked once, at start.
    if first {
        if let Some(reason) = index.damage() {
            repair = Repair::Rebuild { reason };
        }
    }
    if first && repair == Repair::Nothing {
        let stored = snapshot.entry_count()?;
        let indexed = index.status().documents;
        if stored != indexed {
            repair = Repair::Rebuild {
                reason: format!("the index holds {indexed} entries, the database {stored}"),
            };
        }
    }
    // A pass while serving keeps the index serving: it is behind by one swap at most, which
    // is what a reader who asked a moment earlier would have seen.
    let serving = index.is_ready();
    let diffs = match &repair {
        Repair::Nothing => None,
        Repair::CatchUp { from } => match snapshot.changed_groups(*from)? {
            Some(diffs) => Some((*from, diffs)),
            None => {
                repair = Repair::Rebuild {
                    reason: format!("the change feed no longer reaches back to generation {from}"),
                };
                None
            }
        },
        Repair::Rebuild { .. } => None,
    };
    if priorities != index.priorities() && !matches!(repair, Repair::Rebuild { .. }) {
        index.set_priorities(&priorities)?;
    }
    // Held until the index says it is ready (`Commits::finish`).
    let mut pinned = None;
    match (repair, diffs) {
        (Repair::Rebuild { reason }, _) => {
            tracing::info!(%reason, generation = target, "rebuilding the search index");
            let started = std::time::Instant::now();
            let total = snapshot.entry_count()?;
            snapshot.with_entries(None, |entries| {
                index.rebuild(&priorities, target, total, entries)
            })??;
            tracing::info!(
                generation = target,
                entries = total,
                seconds = started.elapsed().as_secs_f64(),
                "search index rebuilt"
            );
        }
        (Repair::CatchUp { from }, Some((_, groups))) => {
            if !serving {
                // Nothing is pinned here: after a crash or a failed pass, the last commit may
                // hold part of a split change (its batches commit at the old generation), so
                // it is no catalog to answer from; SQLite answers until the pass is done.
                index.set_phase(Phase::CatchingUp);
                tracing::info!(
                    from,
                    to = target,
                    servers = groups.len(),
                    "the search index is catching up"
                );
            }
            pinned = catch_up(index, &snapshot, from, target, serving, &groups)?;
        }
        _ => {}
    }
    index.prebuilder.forget_unclaimed();
    index.set_phase(Phase::Ready);
    drop(pinned);
    Ok(())
}

/// Applies what changed from generation `from` to `target`: each (server, kind) the feed
/// left changes out of is read again whole, in a commit of its own (streamed); the keys the
/// feed names are read a bounded page at a time and applied in batches of at most
/// `CATCH_UP_BATCH_ENTRIES` entries and about `CATCH_UP_BATCH_BYTES` of their text, each
/// batch one server's, so a re-walk that changed a million entries never has more than a
/// batch of them in memory. Every commit but the last is at the old generation `from`: a
/// crash between two of them leaves an index that still says it needs this catch-up (the
/// batches applied again change nothing), and no search takes the index for current
/// meanwhile. Once a swap's keys are split over commits, the index's last commit holds part
/// of a swap and answers for no catalog that ever was: it says it is catching up, and a pass
/// that was serving pins its commit from before the pass (`SearchIndex::pin`), so searches
/// try SQLite first and then answer from that whole earlier catalog, saying so, until the last
/// batch commits. The pin is returned, to be dropped once the index says it is ready.
fn catch_up<'index>(
    index: &'index SearchIndex,
    snapshot: &crate::store::SourceSnapshot<'_>,
    from: u64,
    target: u64,
    serving: bool,
    groups: &FeedGroups,
) -> Result<Option<crate::search::Pin<'index>>, KeepError> {
    let mut commits = Commits::new(index, snapshot, from, target, serving);
    for ((server, kind), group) in groups {
        if group.everything {
            commits.push(batches::Work::Everything {
                server: server.clone(),
                kind: *kind,
                built_current: !group.changed_after_everything,
            })?;
        }
    }
    let keyed = groups
        .values()
        .filter(|group| !group.everything)
        .any(|group| group.keys > 0);
    let mut batch = KeyBatch::default();
    let mut cursor = from;
    let mut more = keyed;
    while more {
        let (rows, last) = snapshot.changes_page(cursor, target, CATCH_UP_BATCH_ENTRIES)?;
        let Some(last) = last else {
            more = false;
            continue;
        };
        cursor = last;
        for row in rows {
            let Some(identity) = row.identity else {
                continue;
            };
            let group = groups.get(&(row.server.clone(), row.kind));
            if group.map_or(true, |group| group.everything) {
                continue;
            }
            if batch.is_full() || batch.server().is_some_and(|server| server != row.server) {
                let cut = batch.is_full();
                commits.push(batch.take(cut))?;
            }
            batch.add(snapshot, row.server, row.kind, identity)?;
        }
    }
    if !batch.is_empty() {
        commits.push(batch.take(false))?;
    }
    commits.finish()
}
