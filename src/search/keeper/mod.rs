//! Keeps the search index up to date with the store: repair at start, then each committed swap's diff (every kind), off the writer's path.
//!
//! The store writer announces every commit that changed the catalog (`Store::subscribe`, sent
//! after the commit, never waiting for anyone). On each announcement, and every few seconds
//! for priority changes that no swap announces, the keeper reads what the index missed from
//! the change feed in one read transaction, looks up the current entries the feed names
//! (URIs of resources, URI templates, names of tools and prompts), and applies them per
//! server and kind. The same pass is the repair at start: an index behind
//! the database catches up the same way, and one that is missing, reset, ahead of the
//! database or further behind than the feed reaches is rebuilt from every stored entry.
//! Until the first pass ends the index is not `ready`, and `catalog/search` answers from
//! SQLite's full-text index.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::{Entry, Phase, Repair, SearchIndex, ServerDiff};
use crate::protocol::Kind;
use crate::store::{CatalogChanged, FeedDiff, IndexSource, Store, StoreError};

/// How often the keeper looks for priority changes when no swap happens.
const QUIET_CHECK: Duration = Duration::from_secs(2);
/// How long the keeper waits for the segments of a first load built during its walk to be
/// finished (the builder is at most a channel's pages behind the writer).
const BUILT_LOAD_WAIT: Duration = Duration::from_secs(10);
/// How long the keeper waits before trying again after a failed pass.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] super::SearchError),
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
            .spawn(move || index.prebuilder.clone().run(index, pages, &database))
    };
    if let Err(error) = builder {
        tracing::warn!(%error, "cannot start the thread that indexes first loads during their walk");
    }
    let database: PathBuf = store.path().to_path_buf();
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let pass = {
                let index = index.clone();
                let database = database.clone();
                // Read before the pass: whatever the pass sees is at least this new.
                let version = store.catalog_version();
                tokio::task::spawn_blocking(move || {
                    keep_up(&index, &database, first).map(|()| index.mark_caught_up(version))
                })
                .await
            };
            let pause = match pass {
                Ok(Ok(())) => {
                    first = false;
                    QUIET_CHECK
                }
                Ok(Err(KeepError::Index(super::SearchError::Cancelled))) => return,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "the search index could not catch up; searches use SQLite meanwhile");
                    index.set_phase(Phase::Failed);
                    RETRY_AFTER_FAILURE
                }
                Err(error) => {
                    tracing::error!(%error, "the search index keeper panicked; searches use SQLite");
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

/// One commit of a catch-up: a server, and either the kind all of whose entries are read
/// again or the diffs of the changed entries of its kinds.
type Commit = (String, Option<Kind>, Vec<ServerDiff<Vec<Entry>>>);

/// One pass: brings the index to the database's current generation.
pub fn keep_up(index: &SearchIndex, database: &Path, first: bool) -> Result<(), KeepError> {
    let mut source = IndexSource::open(database)?;
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
        Repair::CatchUp { from } => match snapshot.changes_after(*from)? {
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
        (Repair::CatchUp { from }, Some((_, diffs))) => {
            if !serving {
                index.set_phase(Phase::CatchingUp);
                tracing::info!(
                    from,
                    to = target,
                    servers = diffs.len(),
                    "the search index is catching up"
                );
            }
            // Per server: a diff that re-reads every entry of a kind streams them in a commit
            // of its own; the few changed entries of its other kinds go in one commit.
            let mut commits: Vec<Commit> = Vec::new();
            for ((server, kind), diff) in diffs {
                match diff {
                    FeedDiff::Everything => commits.push((server, Some(kind), Vec::new())),
                    FeedDiff::Keys(keys) => {
                        let mut removed = Vec::new();
                        let mut upserted = Vec::new();
                        for key in keys {
                            match snapshot.entry(&server, kind, &key)? {
                                Some(entry) => upserted.push(entry),
                                None => removed.push(key),
                            }
                        }
                        let diff = ServerDiff {
                            generation: from,
                            server: server.clone(),
                            kind,
                            replace: false,
                            removed,
                            upserted,
                        };
                        match commits
                            .iter_mut()
                            .find(|(name, everything, _)| *name == server && everything.is_none())
                        {
                            Some((_, _, diffs)) => diffs.push(diff),
                            None => commits.push((server, None, vec![diff])),
                        }
                    }
                }
            }
            let count = commits.len();
            // Every commit but the last is at the old generation: a crash between two of them
            // leaves an index that still says it needs this catch-up.
            for (position, (server, everything, mut diffs)) in commits.into_iter().enumerate() {
                let generation = if position + 1 == count { target } else { from };
                match everything {
                    Some(kind) => {
                        // Searches may answer from the last commit meanwhile (saying so):
                        // at a million entries this diff takes seconds.
                        index.set_replacing(serving);
                        // A first load built during its walk: its segments, in one commit.
                        let built =
                            match kind {
                                Kind::Resource => snapshot.server_resources(&server)?.and_then(
                                    |(id, resources)| {
                                        index.prebuilder.take(
                                            &server,
                                            id,
                                            resources,
                                            BUILT_LOAD_WAIT,
                                        )
                                    },
                                ),
                                _ => None,
                            };
                        if let Some(load) = built {
                            let documents = load.documents;
                            let adopted = index.adopt_load(load, generation);
                            if matches!(adopted, Ok(true)) {
                                index.set_replacing(false);
                                tracing::info!(
                                    server,
                                    documents,
                                    "the first load's index, built during its walk, is in"
                                );
                                continue;
                            }
                            if let Err(error) = adopted {
                                index.set_replacing(false);
                                return Err(error.into());
                            }
                            tracing::info!(server, "the first load's index built during its walk cannot be taken as it is (another server lists its URIs); indexing it again");
                        }
                        let applied = snapshot.with_entries(Some((&server, kind)), |entries| {
                            index.apply(ServerDiff {
                                generation,
                                server: server.clone(),
                                kind,
                                replace: true,
                                removed: Vec::new(),
                                upserted: entries,
                            })
                        });
                        index.set_replacing(false);
                        applied??;
                    }
                    None => {
                        for diff in &mut diffs {
                            diff.generation = generation;
                        }
                        index.apply_kinds(diffs)?;
                    }
                }
            }
            if count == 0 {
                index.advance(target)?;
            }
        }
        _ => {}
    }
    index.prebuilder.forget_unclaimed();
    index.set_phase(Phase::Ready);
    Ok(())
}

#[cfg(test)]
mod tests;
