//! The one writer thread: stages walks (a first load straight into `resources`, pending) and swaps each complete walk in one transaction.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::{params, Connection};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{broadcast, mpsc, oneshot, OwnedSemaphorePermit};

use super::{
    now_ms, CatalogChanged, EntryRow, RemovedServers, ResourceRow, ServerSync, ServerUpdate,
    StoreError, SwapOutcome, TemplateRow, WalkReport,
};
use crate::protocol::{ChangeKind, Kind, ServerState};

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub enum WriteOp {
    SyncServers {
        sync: ServerSync,
        reply: Reply<()>,
    },
    Ping {
        reply: Reply<()>,
    },
    UpdateServer {
        server: String,
        update: ServerUpdate,
        reply: Reply<()>,
    },
    Stage {
        walk_id: u64,
        server: String,
        batch: Batch,
        permit: OwnedSemaphorePermit,
        /// The walk's room for this page on its way to the search index: it goes with a first
        /// load's page to the index (which gives it back once the page is written there);
        /// `None` once the walk no longer waits for the index (`FIRST_LOAD_INDEX_HOLD`).
        index_permit: Option<OwnedSemaphorePermit>,
    },
    /// Swaps a staged walk in.
    Commit {
        walk_id: u64,
        server: String,
        report: WalkReport,
        reply: Reply<SwapOutcome>,
    },
    /// Applies the staged rows as a followed upstream's delta (`delta.rs`): the rest of the
    /// snapshot stays; its tools and prompts (staged by walks of their own) and its cursor go
    /// in the same transaction.
    CommitDelta {
        walk_id: u64,
        server: String,
        delta: Delta,
        reply: Reply<super::DeltaOutcome>,
    },
    Abort {
        walk_id: u64,
    },
    /// Moves or forgets a followed server's cursor after a full walk (`delta.rs`).
    SetFollowCursor {
        server: String,
        cursor: Option<super::FollowCursor>,
        reply: Reply<()>,
    },
    /// Swaps a staged walk of tools or prompts in as the server's snapshot of `kind`
    /// (`entry_swap.rs`).
    CommitEntries {
        walk_id: u64,
        server: String,
        kind: Kind,
        reply: Reply<super::EntrySwap>,
    },
    /// Records the scopes of a server's kinds (`scopes.rs`).
    RecordScopes {
        server: String,
        scopes: Vec<(Kind, crate::protocol::CacheScope)>,
        update: super::ScopeUpdate,
        reply: Reply<()>,
    },
    /// Records the current tools and prompts as accepted (`kinds.rs`).
    Accept {
        server: Option<String>,
        reply: Reply<u64>,
    },
    CacheContents {
        server: String,
        uri: String,
        contents: String,
        limit_bytes: u64,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// What a followed upstream's delta removes, and the cursor it moves to.
pub struct Delta {
    pub removed: Vec<String>,
    /// The URI templates the delta touched, when it touched any: the staged ones are their
    /// new text, the rest of them are gone; every other template stays.
    pub templates: Option<Vec<String>>,
    /// The tools and prompts the delta touched, a kind per entry.
    pub entries: Vec<EntryDelta>,
    pub cursor: super::FollowCursor,
}

/// The keys of one kind of tools or prompts a delta touched, staged by the walk `walk_id`:
/// the staged ones are their new text, the others of them are gone; every other entry stays.
pub struct EntryDelta {
    pub kind: Kind,
    pub walk_id: u64,
    pub touched: Vec<String>,
}

/// One page of a walk on its way to staging.
pub enum Batch {
    Resources(Vec<ResourceRow>),
    Templates(Vec<TemplateRow>),
    /// Tools or prompts, compared with the snapshot of their kind as they are staged.
    Entries(Kind, Vec<EntryRow>),
}

impl Batch {
    /// The entries' text, which the writer's batches are bounded by (`wal.rs`).
    fn bytes(&self) -> usize {
        match self {
            Batch::Resources(rows) => rows.iter().map(|row| row.raw.len()).sum(),
            Batch::Templates(rows) => rows.iter().map(|row| row.raw.len()).sum(),
            Batch::Entries(_, rows) => rows.iter().map(|row| row.raw.len()).sum(),
        }
    }
}

mod delta;
mod entry_swap;
mod feed;
pub(super) mod full_text;
mod history;
mod pending;
mod servers;
mod sql;
mod staged;
mod staging;
mod swap;
mod wal;

use entry_swap::swap_entries;
use feed::prune_changes;
use feed::{announce, record_truncated};
#[cfg(test)]
use full_text::full_text_backlog;
use full_text::{index_full_text_batch, INDEXED};
use pending::{discard_pending_batch, pending_loads, promote};
use servers::{sync_servers, update_server};
#[cfg(test)]
use sql::full_scans;
use sql::{execute, query_one, server_id};
use staged::StagedCounts;
use staging::{discard_staging, stage_entries, stage_resources, stage_templates, STAGING_SCHEMA};
use swap::swap;

pub use wal::WalWatch;
use wal::{WriteAheadLog, WAL_LIMIT_BYTES};

/// The most per-key rows one swap adds to the change feed (every key of any real swap, so a
/// follower fetches only what changed); past it, one 'truncated' row with a count, and a
/// follower lists again, which is then the cheaper way anyway.
pub const CHANGES_PER_SWAP: u64 = 1_000_000;
/// A first load (a server with no entries yet) records its first keys and one 'truncated'
/// row for the rest: a follower lists a new server whole, and a million rows stay cheap.
pub const CHANGES_PER_FIRST_LOAD: u64 = 1_000;
/// The change feed keeps this many newest entries, none older than `CHANGES_MAX_AGE_MS`;
/// a follower whose cursor is older lists again.
pub const CHANGES_KEPT: i64 = 1_000_000;
pub const CHANGES_MAX_AGE_MS: i64 = 7 * 24 * 3600 * 1000;

/// Runs the writer until `Close`. Between operations, when none is waiting, it indexes the
/// full-text backlog a batch at a time (`index_full_text_batch`), so a large swap's indexing
/// never holds up another operation for more than one batch; `full_text_behind` is how many
/// ids the backlog still lists (the answer notes of SQLite searches read it).
pub fn run(
    mut connection: Connection,
    mut operations: mpsc::UnboundedReceiver<WriteOp>,
    changes: broadcast::Sender<CatalogChanged>,
    catalog_version: Arc<AtomicU64>,
    full_text_behind: Arc<AtomicU64>,
    load_feed: Arc<std::sync::OnceLock<crate::store::LoadFeed>>,
    wal_watch: Arc<WalWatch>,
) {
    if let Err(error) = connection.execute_batch(STAGING_SCHEMA) {
        tracing::error!(%error, "cannot create staging tables; the store cannot accept walks");
    }
    // Walks whose staging failed, with the first error; their commit reports it.
    let mut failed_walks: HashMap<u64, String> = HashMap::new();
    // What each walk has staged so far, and against which snapshot.
    let mut staged_walks: HashMap<u64, StagedCounts> = HashMap::new();
    // A backlog left by the last run (a crash, or a stop before it was done) resumes now.
    let mut indexing = full_text_behind.load(Ordering::Acquire) > 0;
    if indexing {
        tracing::info!(
            ids = full_text_behind.load(Ordering::Acquire),
            "resuming the full-text indexing of a large swap's rows"
        );
    }
    // First loads to discard (their pending ids), a batch at a time between operations:
    // those a crash or a stop left first.
    let mut discarding: VecDeque<i64> = pending_loads(&connection)
        .unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot list the pending loads left by the last run");
            Vec::new()
        })
        .into();
    if !discarding.is_empty() {
        tracing::info!(
            loads = discarding.len(),
            "discarding the rows of first loads the last run left unfinished"
        );
    }
    let mut wal = WriteAheadLog::watched(&connection, WAL_LIMIT_BYTES, wal_watch);
    loop {
        let operation = if indexing || !discarding.is_empty() {
            match operations.try_recv() {
                Ok(operation) => operation,
                Err(TryRecvError::Empty) => {
                    commit_batch(&mut wal, &connection, &mut failed_walks);
                    if let Some(&pending_id) = discarding.front() {
                        match discard_pending_batch(&mut connection, pending_id) {
                            Ok(false) => {}
                            Ok(true) => {
                                discarding.pop_front();
                            }
                            Err(error) => {
                                // The next start tries again.
                                tracing::warn!(%error, "discarding a pending load failed");
                                discarding.pop_front();
                            }
                        }
                    } else {
                        indexing = index_full_text_batch(&mut connection, &full_text_behind);
                    }
                    wal.after_write(&connection, loading(&staged_walks));
                    continue;
                }
                Err(TryRecvError::Disconnected) => return,
            }
        } else {
            match operations.blocking_recv() {
                Some(operation) => operation,
                None => return,
            }
        };
        // Pages of one walk share a transaction; anything else (a page of a walk that failed
        // too: its pages are skipped) commits it first.
        let same_walk = matches!(&operation, WriteOp::Stage { walk_id, .. }
            if Some(*walk_id) == wal.batch_walk() && !failed_walks.contains_key(walk_id));
        if !same_walk {
            commit_batch(&mut wal, &connection, &mut failed_walks);
        }
        match operation {
            WriteOp::SyncServers { sync, reply } => {
                let outcome = sync_servers(&mut connection, &sync);
                // Priorities may have changed which listing of a URI a search shows.
                catalog_version.fetch_add(1, Ordering::Release);
                if let Ok(dropped) = &outcome {
                    for event in dropped {
                        // Nobody listening is fine: the feed in the database has it all.
                        let _ = changes.send(event.clone());
                    }
                }
                let _ = reply.send(outcome.map(|_| ()));
            }
            WriteOp::Ping { reply } => {
                let _ = reply.send(Ok(()));
            }
            WriteOp::UpdateServer {
                server,
                update,
                reply,
            } => {
                let _ = reply.send(update_server(&connection, &server, &update));
            }
            WriteOp::Stage {
                walk_id,
                server,
                batch,
                permit,
                index_permit,
            } => {
                // After one failed page the walk cannot commit, so later pages are skipped.
                if let Entry::Vacant(slot) = failed_walks.entry(walk_id) {
                    // A walk's counts, and a first load's pending id, are taken outside any
                    // batch: the id's `pending_loads` row must outlive a batch rolled back, or
                    // the id could be handed out again while this walk still holds it.
                    let counts = match &batch {
                        Batch::Resources(_) => match staged_walks.entry(walk_id) {
                            Entry::Occupied(known) => Ok(Some(known.into_mut())),
                            Entry::Vacant(fresh) => wal
                                .commit_batch(&connection)
                                .and_then(|()| StagedCounts::against(&connection, &server))
                                .map(|counts| Some(fresh.insert(counts))),
                        },
                        Batch::Templates(_) | Batch::Entries(..) => Ok(None),
                    };
                    // A first load's page goes to the search index too, once staged: the ids
                    // its rows took (consecutive, the last of the load's ranges).
                    let mut pending_page = None;
                    let staged = counts.and_then(|counts| {
                        wal.stage_page(&connection, walk_id, batch.bytes())?;
                        match (&batch, counts) {
                            (Batch::Resources(rows), Some(counts)) => {
                                counts.progress.note(rows.len());
                                let before = counts.staged;
                                stage_resources(&mut connection, walk_id, counts, rows)?;
                                let inserted = (counts.staged - before) as i64;
                                if let Some(pending) = counts.pending.as_mut() {
                                    let last = pending.ranges.last().map_or(0, |range| range.1);
                                    let ids = (last - inserted + 1, last);
                                    if index_permit.is_none() && load_feed.get().is_some() {
                                        if pending.unsent_pages == 0 {
                                            tracing::info!(server, held_s = crate::store::FIRST_LOAD_INDEX_HOLD.as_secs(), "the search index cannot keep up with this first load and the walk waited for it as long as it may (FIRST_LOAD_INDEX_HOLD); the index reads the pages it had no room for from the database after the commit");
                                        }
                                        pending.unsent_pages += 1;
                                    }
                                    pending_page = (inserted > 0).then_some((pending.id, ids));
                                }
                                Ok(())
                            }
                            (Batch::Templates(rows), _) => {
                                stage_templates(&mut connection, walk_id, rows)
                            }
                            (Batch::Entries(kind, rows), _) => {
                                stage_entries(&mut connection, walk_id, &server, *kind, rows)
                            }
                            (Batch::Resources(_), None) => Ok(()),
                        }
                    });
                    match (staged, pending_page, &batch, load_feed.get(), index_permit) {
                        (Err(error), ..) => {
                            tracing::warn!(server, walk_id, %error, "staging a page failed");
                            slot.insert(error.to_string());
                        }
                        (
                            Ok(()),
                            Some((id, ids)),
                            Batch::Resources(rows),
                            Some(feed),
                            Some(room),
                        ) => {
                            let entries = rows
                                .iter()
                                .map(|row| crate::store::IndexEntry::of_resource(&server, row))
                                .collect();
                            // Never waits: the channel holds at most the walk's room.
                            let _ = feed.send(crate::store::LoadEvent::Page {
                                id,
                                server: server.clone(),
                                ids,
                                entries,
                                room,
                            });
                        }
                        (Ok(()), ..) => {}
                    }
                }
                drop(permit);
            }
            WriteOp::Commit {
                walk_id,
                server,
                report,
                reply,
            } => {
                let counts = staged_walks.remove(&walk_id).unwrap_or_default();
                let outcome = match failed_walks.remove(&walk_id) {
                    Some(error) => Err(StoreError::Walk(format!("staging failed: {error}"))),
                    None => commit_walk(
                        &mut connection,
                        walk_id,
                        &counts,
                        &server,
                        &report,
                        &full_text_behind,
                    ),
                };
                if let (Err(_), Some(pending)) = (&outcome, &counts.pending) {
                    discarding.push_back(pending.id);
                }
                if let (Some(pending), Some(feed)) = (&counts.pending, load_feed.get()) {
                    // Before the announcement, so the index's next pass finds the load's end.
                    let _ = feed.send(match &outcome {
                        Ok(_) => crate::store::LoadEvent::Promoted {
                            id: pending.id,
                            resources: counts.staged,
                            ranges: pending.ranges.clone(),
                        },
                        Err(_) => crate::store::LoadEvent::Dropped { id: pending.id },
                    });
                }
                // A swap that left rows to the backlog starts (or extends) the indexing.
                indexing |= full_text_behind.load(Ordering::Acquire) > 0;
                // Subscribers and the caller hear first: dropping a million staged rows takes
                // a while, and the snapshot is already committed (or the walk already failed).
                let outcome = outcome.map(|(swap, latest_seq)| {
                    announce(&changes, &catalog_version, &server, &swap, latest_seq);
                    swap
                });
                let _ = reply.send(outcome);
                discard_staging(&connection, walk_id);
            }
            WriteOp::CommitDelta {
                walk_id,
                server,
                delta,
                reply,
            } => {
                let counts = staged_walks.remove(&walk_id).unwrap_or_default();
                let walk_ids: Vec<u64> = std::iter::once(walk_id)
                    .chain(delta.entries.iter().map(|entries| entries.walk_id))
                    .collect();
                let failed: Vec<String> = walk_ids
                    .iter()
                    .filter_map(|id| failed_walks.remove(id))
                    .collect();
                let outcome = match failed.into_iter().next() {
                    Some(error) => Err(StoreError::Walk(format!("staging failed: {error}"))),
                    None => delta::apply_delta(
                        &mut connection,
                        walk_id,
                        &counts,
                        &server,
                        &delta,
                        &full_text_behind,
                    ),
                };
                indexing |= full_text_behind.load(Ordering::Acquire) > 0;
                let outcome = outcome.map(|(outcome, latest_seq)| {
                    announce(
                        &changes,
                        &catalog_version,
                        &server,
                        &outcome.swap,
                        latest_seq,
                    );
                    let touched = outcome
                        .entries
                        .iter()
                        .filter(|(_, swap)| swap.touched() > 0);
                    for (kind, entry_swap) in touched {
                        let _ = changes.send(CatalogChanged {
                            server: server.clone(),
                            kind: *kind,
                            added: entry_swap.added,
                            removed: entry_swap.removed,
                            changed: entry_swap.changed,
                            latest_seq,
                        });
                    }
                    outcome
                });
                let _ = reply.send(outcome);
                for id in walk_ids {
                    discard_staging(&connection, id);
                }
            }
            WriteOp::SetFollowCursor {
                server,
                cursor,
                reply,
            } => {
                let _ = reply.send(delta::set_follow_cursor(
                    &connection,
                    &server,
                    cursor.as_ref(),
                ));
            }
            WriteOp::Abort { walk_id } => {
                failed_walks.remove(&walk_id);
                if let Some(pending) = staged_walks.remove(&walk_id).and_then(|c| c.pending) {
                    discarding.push_back(pending.id);
                }
                discard_staging(&connection, walk_id);
            }
            WriteOp::CommitEntries {
                walk_id,
                server,
                kind,
                reply,
            } => {
                let outcome = match failed_walks.remove(&walk_id) {
                    Some(error) => Err(StoreError::Walk(format!("staging failed: {error}"))),
                    None => swap_entries(&mut connection, walk_id, &server, kind),
                };
                let outcome = outcome.map(|(swap, latest_seq)| {
                    if swap.touched() > 0 {
                        let _ = changes.send(CatalogChanged {
                            server: server.clone(),
                            kind,
                            added: swap.added,
                            removed: swap.removed,
                            changed: swap.changed,
                            latest_seq,
                        });
                    }
                    swap
                });
                let _ = reply.send(outcome);
                discard_staging(&connection, walk_id);
            }
            WriteOp::RecordScopes {
                server,
                scopes,
                update,
                reply,
            } => {
                let _ = reply.send(super::scopes::record_scopes(
                    &mut connection,
                    &server,
                    &scopes,
                    update,
                ));
            }
            WriteOp::Accept { server, reply } => {
                let _ = reply.send(super::kinds::accept(&mut connection, server.as_deref()));
            }
            WriteOp::CacheContents {
                server,
                uri,
                contents,
                limit_bytes,
            } => {
                if let Err(error) =
                    cache_contents(&mut connection, &server, &uri, &contents, limit_bytes)
                {
                    tracing::warn!(server, %error, "cannot cache read contents");
                }
            }
            WriteOp::Close { reply } => {
                if let Err(error) = connection.execute_batch("PRAGMA optimize;") {
                    tracing::debug!(%error, "PRAGMA optimize failed at close");
                }
                wal.close(&connection);
                drop(connection);
                let _ = reply.send(());
                return;
            }
        }
        wal.after_write(&connection, loading(&staged_walks));
    }
}

/// Commits a staged walk: a first load, staged straight into `resources`, is promoted; any
/// other walk is swapped in by its diff.
fn commit_walk(
    connection: &mut Connection,
    walk_id: u64,
    counts: &StagedCounts,
    server: &str,
    report: &WalkReport,
    full_text_behind: &AtomicU64,
) -> Result<(SwapOutcome, i64), StoreError> {
    match &counts.pending {
        Some(pending) => promote(
            connection,
            walk_id,
            counts,
            pending,
            server,
            report,
            full_text_behind,
        ),
        None => swap(
            connection,
            walk_id,
            counts,
            server,
            report,
            full_text_behind,
        ),
    }
}

/// Whether a first load is in flight and making progress: the log is not checkpointed
/// meanwhile (`wal.rs`). One that stalls, or runs past `FIRST_LOAD_DEFER_MAX`, does not count:
/// whatever a server does, the log is checkpointed within `FIRST_LOAD_IDLE` of a stall.
fn loading(staged_walks: &HashMap<u64, StagedCounts>) -> bool {
    let now = std::time::Instant::now();
    staged_walks
        .values()
        .any(|counts| counts.pending.is_some() && counts.progress.recent(now))
}

/// Commits the writer's open batch of pages; when that fails, their walk fails with it.
fn commit_batch(
    wal: &mut WriteAheadLog,
    connection: &Connection,
    failed_walks: &mut HashMap<u64, String>,
) {
    let walk = wal.batch_walk();
    if let (Err(error), Some(walk_id)) = (wal.commit_batch(connection), walk) {
        tracing::warn!(walk_id, %error, "committing staged pages failed");
        failed_walks
            .entry(walk_id)
            .or_insert_with(|| error.to_string());
    }
}

/// Stores one read result and evicts the server's oldest entries beyond `limit_bytes`.
fn cache_contents(
    connection: &mut Connection,
    server: &str,
    uri: &str,
    contents: &str,
    limit_bytes: u64,
) -> Result<(), StoreError> {
    let bytes = contents.len() as u64;
    let transaction = connection.transaction()?;
    if bytes > limit_bytes {
        // Too big to keep: an older, smaller version would be stale, so drop it too.
        transaction.execute(
            "DELETE FROM read_cache WHERE uri = ?2
                 AND server_id = (SELECT id FROM servers WHERE name = ?1)",
            params![server, uri],
        )?;
    } else {
        // REPLACE gives the entry a new rowid, which keeps "newest" well defined for eviction.
        transaction.execute(
            "INSERT OR REPLACE INTO read_cache (server_id, uri, contents, bytes, stored_at)
             SELECT id, ?2, ?3, ?4, ?5 FROM servers WHERE name = ?1",
            params![server, uri, contents, bytes as i64, now_ms()],
        )?;
        transaction.execute(
            "DELETE FROM read_cache WHERE rowid IN (
                 SELECT entry FROM (
                     SELECT c.rowid AS entry,
                            sum(c.bytes) OVER (ORDER BY c.stored_at DESC, c.rowid DESC) AS kept
                     FROM read_cache c WHERE c.server_id = (SELECT id FROM servers WHERE name = ?1))
                 WHERE kept > ?2)",
            params![server, limit_bytes.min(i64::MAX as u64) as i64],
        )?;
    }
    transaction.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests;
