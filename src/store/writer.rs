//! The one writer thread: stages walks (a first load straight into `resources`, pending) and swaps each complete walk in one transaction.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{broadcast, mpsc, oneshot, OwnedSemaphorePermit};

use super::{
    now_ms, CatalogChanged, RemovedServers, ResourceRow, ServerSync, ServerUpdate, StoreError,
    SwapOutcome, TemplateRow, WalkReport,
};
use crate::entry::same_entry;
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
    },
    Commit {
        walk_id: u64,
        server: String,
        report: WalkReport,
        reply: Reply<SwapOutcome>,
    },
    Abort {
        walk_id: u64,
    },
    /// Replaces one (server, kind) snapshot of tools or prompts (`entries.rs`).
    SwapEntries {
        server: String,
        kind: Kind,
        rows: Vec<super::EntryRow>,
        reply: Reply<super::EntrySwap>,
    },
    /// Records the current tools and prompts as accepted (`entries.rs`).
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

/// One page of a walk on its way to staging.
pub enum Batch {
    Resources(Vec<ResourceRow>),
    Templates(Vec<TemplateRow>),
}

/// Staged resources live in a rowid table whose index holds (walk_id, uri, hash): the diff
/// compares hashes inside the two indexes and reads a staged row only to copy it into the
/// snapshot. (A `WITHOUT ROWID` table keyed by (walk_id, uri) made every lookup read the whole
/// row, 120 MB once per snapshot row for one huge entry.) A row the snapshot already holds with
/// the same hash is staged "light": its key and hash only, the rest NULL. While staging, the
/// snapshot rows a walk changed (`staging_changed`), the URIs it added (`staging_added`) and
/// the rows whose text differs only in form (`staging_rehash`: another key order, a hash from
/// an older version) are noted, so a walk that saw every snapshot row needs no pass over the
/// snapshot to swap.
const STAGING_SCHEMA: &str = "
CREATE TEMP TABLE IF NOT EXISTS staging_resources (
    walk_id INTEGER NOT NULL, uri TEXT NOT NULL, hash INTEGER NOT NULL, oversized INTEGER NOT NULL,
    name TEXT, title TEXT, description TEXT, mime_type TEXT, size INTEGER, annotations TEXT,
    icons TEXT, meta TEXT, raw TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS temp.staging_resources_key
    ON staging_resources (walk_id, uri, hash);
CREATE TEMP TABLE IF NOT EXISTS staging_templates (
    walk_id INTEGER NOT NULL, uri_template TEXT NOT NULL, name TEXT NOT NULL, title TEXT,
    description TEXT, mime_type TEXT, raw TEXT NOT NULL, oversized INTEGER NOT NULL,
    PRIMARY KEY (walk_id, uri_template)
) WITHOUT ROWID;
CREATE TEMP TABLE IF NOT EXISTS staging_changed (walk_id INTEGER NOT NULL, id INTEGER NOT NULL);
CREATE TEMP TABLE IF NOT EXISTS staging_added (walk_id INTEGER NOT NULL, uri TEXT NOT NULL);
CREATE TEMP TABLE IF NOT EXISTS staging_rehash (
    walk_id INTEGER NOT NULL, id INTEGER NOT NULL, hash INTEGER NOT NULL
);
CREATE TEMP TABLE IF NOT EXISTS swap_ids (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL);
CREATE TEMP TABLE IF NOT EXISTS swap_added (uri TEXT NOT NULL);
";

/// Kinds in `swap_ids` (added rows are found by id instead: they are the ids above the
/// highest one before the swap).
const REMOVED: i64 = 0;
const CHANGED: i64 = 1;

/// The most per-URI rows one swap adds to the change feed; the rest become one
/// 'truncated' row with a count, so a first load of a million resources costs little.
pub const CHANGES_PER_SWAP: u64 = 1_000;
/// The change feed keeps this many newest entries and forgets older ones.
pub const CHANGES_KEPT: i64 = 100_000;

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
    loop {
        let operation = if indexing || !discarding.is_empty() {
            match operations.try_recv() {
                Ok(operation) => operation,
                Err(TryRecvError::Empty) => {
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
            } => {
                // After one failed page the walk cannot commit, so later pages are skipped.
                if let Entry::Vacant(slot) = failed_walks.entry(walk_id) {
                    let staged = match &batch {
                        Batch::Resources(rows) => {
                            let counts = match staged_walks.entry(walk_id) {
                                Entry::Occupied(known) => Ok(known.into_mut()),
                                Entry::Vacant(slot) => StagedCounts::against(&connection, &server)
                                    .map(|counts| slot.insert(counts)),
                            };
                            counts.and_then(|counts| {
                                stage_resources(&mut connection, walk_id, counts, rows)
                            })
                        }
                        Batch::Templates(rows) => stage_templates(&mut connection, walk_id, rows),
                    };
                    if let Err(error) = staged {
                        tracing::warn!(server, walk_id, %error, "staging a page failed");
                        slot.insert(error.to_string());
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
                    None => swap(
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
                // A swap that left rows to the backlog starts (or extends) the indexing.
                indexing |= full_text_behind.load(Ordering::Acquire) > 0;
                // Subscribers and the caller hear first: dropping a million staged rows takes
                // a while, and the snapshot is already committed (or the walk already failed).
                let outcome = outcome.map(|(swap, latest_seq)| {
                    if swap.added + swap.removed + swap.changed + swap.templates_touched > 0 {
                        catalog_version.fetch_add(1, Ordering::Release);
                        // A broadcast never blocks: a slow subscriber lags, the writer goes on.
                        let _ = changes.send(CatalogChanged {
                            server: server.clone(),
                            kind: Kind::Resource,
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
            WriteOp::Abort { walk_id } => {
                failed_walks.remove(&walk_id);
                if let Some(pending) = staged_walks.remove(&walk_id).and_then(|c| c.pending) {
                    discarding.push_back(pending.id);
                }
                discard_staging(&connection, walk_id);
            }
            WriteOp::SwapEntries {
                server,
                kind,
                rows,
                reply,
            } => {
                let outcome = super::entries::swap_entries(&mut connection, &server, kind, rows);
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
            }
            WriteOp::Accept { server, reply } => {
                let _ = reply.send(super::entries::accept(&mut connection, server.as_deref()));
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
                drop(connection);
                let _ = reply.send(());
                return;
            }
        }
    }
}

/// Records the configured servers; returns one event per dropped server that had resources.
fn sync_servers(
    connection: &mut Connection,
    sync: &ServerSync,
) -> Result<Vec<CatalogChanged>, StoreError> {
    let servers = &sync.configured;
    let mut dropped = Vec::new();
    let transaction = connection.transaction()?;
    {
        let mut upsert = transaction.prepare_cached(
            "INSERT INTO servers (name, priority, transport, state, read_cache_bytes)
             VALUES (?1, ?2, ?3, ?5, ?4)
             ON CONFLICT (name) DO UPDATE SET priority = excluded.priority, transport = excluded.transport,
                 state = excluded.state, retry_at = NULL, read_cache_bytes = excluded.read_cache_bytes",
        )?;
        // An untouched server's session carries on, so its row keeps the state it reported.
        let mut touch_up = transaction.prepare_cached(
            "UPDATE servers SET priority = ?2, transport = ?3, read_cache_bytes = ?4 WHERE name = ?1",
        )?;
        for server in servers {
            let read_cache_bytes = server
                .read_cache_bytes
                .map(|bytes| bytes.min(i64::MAX as u64) as i64);
            let arguments = params![
                server.name,
                server.priority,
                server.transport,
                read_cache_bytes
            ];
            if sync.untouched.contains(&server.name) {
                touch_up.execute(arguments)?;
            } else {
                let starting = params![
                    server.name,
                    server.priority,
                    server.transport,
                    read_cache_bytes,
                    ServerState::Starting
                ];
                upsert.execute(starting)?;
            }
        }
        // A cache turned off in the configuration frees its space.
        transaction.execute(
            "DELETE FROM read_cache WHERE server_id IN
                 (SELECT id FROM servers WHERE read_cache_bytes IS NULL)",
            [],
        )?;
        let configured: Vec<&str> = servers.iter().map(|server| server.name.as_str()).collect();
        let mut known = transaction.prepare("SELECT id, name FROM servers")?;
        let stale: Vec<(i64, String)> = known
            .query_map([], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })?
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter(|(_, name)| !configured.contains(&name.as_str()))
            .collect();
        for (id, name) in stale {
            if sync.removed == RemovedServers::KeepOffline {
                let updated = transaction.execute(
                    "UPDATE servers SET state = ?2, stale = 1, retry_at = NULL
                     WHERE id = ?1 AND state != ?2",
                    params![id, ServerState::Offline],
                )?;
                if updated > 0 {
                    tracing::info!(server = %name, "kept the snapshot of a server no longer configured, marked offline");
                }
                continue;
            }
            let now = now_ms();
            let removed: i64 = transaction.query_row(
                "SELECT count(*) FROM resources WHERE server_id = ?1",
                [id],
                |row| row.get(0),
            )?;
            let recorded = transaction.execute(
                "INSERT INTO changes (at, server, kind, uri)
                 SELECT ?1, ?2, ?5, uri FROM resources WHERE server_id = ?3 LIMIT ?4",
                params![now, name, id, CHANGES_PER_SWAP as i64, ChangeKind::Removed],
            )? as u64;
            record_truncated(&transaction, now, &name, removed as u64, recorded)?;
            transaction.execute(
                &format!(
                    "INSERT INTO resources_fts (resources_fts, rowid, uri, name, title, description)
                     SELECT 'delete', r.id, r.uri, r.name, r.title, r.description FROM resources r
                     WHERE r.server_id = ?1 AND {INDEXED}"
                ),
                [id],
            )?;
            // Tools and prompts go with the server (a cascade); their index rows must too.
            transaction.execute(
                "DELETE FROM entries_fts WHERE rowid IN (SELECT id FROM entries WHERE server_id = ?1)",
                [id],
            )?;
            transaction.execute("DELETE FROM servers WHERE id = ?1", [id])?;
            tracing::info!(server = %name, "dropped the snapshot of a server no longer configured");
            if removed > 0 {
                dropped.push(CatalogChanged {
                    server: name,
                    kind: Kind::Resource,
                    added: 0,
                    removed: removed as u64,
                    changed: 0,
                    latest_seq: 0,
                });
            }
        }
        if !dropped.is_empty() {
            let latest_seq = prune_changes(&transaction)?;
            for event in &mut dropped {
                event.latest_seq = latest_seq;
            }
        }
    }
    transaction.commit()?;
    Ok(dropped)
}

/// Runs one statement of a swap or of a server record. In the crate's tests it also counts
/// the statement's full-scan steps (`full_scans`), so a test can show that a small swap beside
/// a large snapshot never walks a whole table.
fn execute<P: rusqlite::Params>(
    connection: &Connection,
    sql: &str,
    params: P,
) -> Result<usize, StoreError> {
    let mut statement = connection.prepare(sql)?;
    let changed = statement.execute(params)?;
    full_scans::note(&statement);
    Ok(changed)
}

/// The one value a one-row query returns, counted like `execute`.
fn query_one<T: rusqlite::types::FromSql, P: rusqlite::Params>(
    connection: &Connection,
    sql: &str,
    params: P,
) -> Result<T, StoreError> {
    let mut statement = connection.prepare(sql)?;
    let value = statement.query_row(params, |row| row.get(0))?;
    full_scans::note(&statement);
    Ok(value)
}

/// Full-scan steps of the writer's statements on this thread, for the tests' guard.
#[cfg(test)]
mod full_scans {
    use std::cell::Cell;

    thread_local! {
        static STEPS: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn note(statement: &rusqlite::Statement<'_>) {
        let steps = statement.reset_status(rusqlite::StatementStatus::FullscanStep);
        STEPS.with(|counted| counted.set(counted.get() + steps.max(0) as u64));
    }

    /// The steps counted since the last call.
    pub(super) fn take() -> u64 {
        STEPS.with(|counted| counted.replace(0))
    }
}

#[cfg(not(test))]
mod full_scans {
    pub(super) fn note(_statement: &rusqlite::Statement<'_>) {}
}

/// Adds the 'truncated' row for the changes of one swap that were not recorded one by one.
fn record_truncated(
    transaction: &rusqlite::Transaction<'_>,
    now: i64,
    server: &str,
    total: u64,
    recorded: u64,
) -> Result<(), StoreError> {
    if total > recorded {
        execute(
            transaction,
            "INSERT INTO changes (at, server, kind, uri, count) VALUES (?1, ?2, ?4, NULL, ?3)",
            params![
                now,
                server,
                (total - recorded) as i64,
                ChangeKind::Truncated
            ],
        )?;
    }
    Ok(())
}

/// Forgets the oldest change feed entries past `CHANGES_KEPT`; returns the newest seq.
pub(super) fn prune_changes(transaction: &rusqlite::Transaction<'_>) -> Result<i64, StoreError> {
    let latest: i64 = query_one(transaction, "SELECT coalesce(max(seq), 0) FROM changes", [])?;
    execute(
        transaction,
        "DELETE FROM changes WHERE seq <= ?1",
        [latest - CHANGES_KEPT],
    )?;
    Ok(latest)
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

fn update_server(
    connection: &Connection,
    server: &str,
    update: &ServerUpdate,
) -> Result<(), StoreError> {
    let now = now_ms();
    match update {
        ServerUpdate::Connecting => connection.execute(
            "UPDATE servers SET state = ?2, retry_at = NULL WHERE name = ?1",
            params![server, ServerState::Connecting],
        )?,
        ServerUpdate::Connected {
            protocol_version,
            capabilities,
            server_info,
        } => connection.execute(
            "UPDATE servers SET state = ?6, protocol_version = ?2, capabilities = ?3,
                 server_info = ?4, connected_at = ?5, retry_at = NULL WHERE name = ?1",
            params![
                server,
                protocol_version,
                capabilities.to_string(),
                server_info.to_string(),
                now,
                ServerState::Connected
            ],
        )?,
        ServerUpdate::NoResources => connection.execute(
            "UPDATE servers SET state = ?2, stale = 0, last_error = NULL WHERE name = ?1",
            params![server, ServerState::NoResources],
        )?,
        ServerUpdate::Walking => connection.execute(
            "UPDATE servers SET state = ?2 WHERE name = ?1",
            params![server, ServerState::Walking],
        )?,
        ServerUpdate::WalkFailed { error } => connection.execute(
            "UPDATE servers SET state = ?4, stale = 1, last_error = ?2, last_error_at = ?3,
                 walks_failed = walks_failed + 1 WHERE name = ?1",
            params![server, error, now, ServerState::Failed],
        )?,
        ServerUpdate::Reconnecting { error } => connection.execute(
            "UPDATE servers SET state = ?4, stale = 1, last_error = ?2, last_error_at = ?3
                 WHERE name = ?1",
            params![server, error, now, ServerState::Reconnecting],
        )?,
        ServerUpdate::BackingOff { error, retry_at_ms } => connection.execute(
            "UPDATE servers SET state = ?5, stale = 1, last_error = ?2, last_error_at = ?3,
                 retry_at = ?4 WHERE name = ?1",
            params![server, error, now, retry_at_ms, ServerState::BackingOff],
        )?,
        ServerUpdate::Stopped => connection.execute(
            "UPDATE servers SET state = ?2, retry_at = NULL WHERE name = ?1",
            params![server, ServerState::Stopped],
        )?,
    };
    Ok(())
}

/// The id of `server`'s row; `None` when it has none (yet).
fn server_id(connection: &Connection, server: &str) -> Result<Option<i64>, StoreError> {
    Ok(connection
        .query_row("SELECT id FROM servers WHERE name = ?1", [server], |row| {
            row.get(0)
        })
        .optional()?)
}

/// A first load in flight: its rows are in `resources` under `id`, a negative id no `servers`
/// row has (`pending_loads`), so no reader sees them until `promote` gives the server that id.
#[derive(Debug, Default, Clone)]
struct PendingLoad {
    id: i64,
    /// The ids its rows took, in order, as ranges (both ends included): each page's rows take
    /// consecutive ids, and pages that follow each other without another swap between them
    /// make one range.
    ranges: Vec<(i64, i64)>,
}

/// What one walk has staged, and the snapshot it was compared with.
#[derive(Debug, Default, Clone)]
struct StagedCounts {
    /// The server's id when staging began: light rows stand for "as in this snapshot".
    snapshot: Option<i64>,
    /// The snapshot had no resources then (a first load): nothing to look up.
    snapshot_empty: bool,
    /// Distinct resources staged.
    staged: u64,
    /// Staged resources the snapshot holds (unchanged or changed).
    matched: u64,
    /// A first load of a recorded server stages straight into `resources`, as a pending load.
    pending: Option<PendingLoad>,
}

impl StagedCounts {
    fn against(connection: &Connection, server: &str) -> Result<Self, StoreError> {
        let snapshot = server_id(connection, server)?;
        let snapshot_empty = match snapshot {
            Some(server_id) => !connection.query_row(
                "SELECT EXISTS (SELECT 1 FROM resources WHERE server_id = ?1)",
                [server_id],
                |row| row.get::<_, bool>(0),
            )?,
            None => true,
        };
        let pending = match snapshot {
            Some(_) if snapshot_empty => {
                connection.execute("INSERT INTO pending_loads (server) VALUES (?1)", [server])?;
                Some(PendingLoad {
                    id: -connection.last_insert_rowid(),
                    ranges: Vec::new(),
                })
            }
            _ => None,
        };
        Ok(StagedCounts {
            snapshot,
            snapshot_empty,
            pending,
            ..StagedCounts::default()
        })
    }
}

/// Stages one page. A row whose URI the snapshot already holds with the same hash, or with a
/// text that holds the same JSON (`entry::same_entry`), is staged light, its key and the
/// stored hash only: a re-walk that changes nothing writes almost nothing. Changed rows and
/// added URIs are noted for the swap (`STAGING_SCHEMA`).
fn stage_resources(
    connection: &mut Connection,
    walk_id: u64,
    counts: &mut StagedCounts,
    rows: &[ResourceRow],
) -> Result<(), StoreError> {
    if counts.pending.is_some() {
        return stage_pending(connection, counts, rows);
    }
    let walk = walk_id as i64;
    let snapshot = counts.snapshot.filter(|_| !counts.snapshot_empty);
    let transaction = connection.transaction()?;
    {
        let mut stored_row = transaction
            .prepare_cached("SELECT id, hash FROM resources WHERE server_id = ?1 AND uri = ?2")?;
        let mut stored_text =
            transaction.prepare_cached("SELECT raw, oversized FROM resources WHERE id = ?1")?;
        // The walk never sends a URI twice; the index refuses an exact repeat all the same.
        let mut insert = transaction.prepare_cached(
            "INSERT OR IGNORE INTO temp.staging_resources
                 (walk_id, uri, hash, oversized, name, title, description, mime_type, size,
                  annotations, icons, meta, raw)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?;
        let mut insert_light = transaction.prepare_cached(
            "INSERT OR IGNORE INTO temp.staging_resources (walk_id, uri, hash, oversized)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        let mut note_changed = transaction
            .prepare_cached("INSERT INTO temp.staging_changed (walk_id, id) VALUES (?1, ?2)")?;
        let mut note_added = transaction
            .prepare_cached("INSERT INTO temp.staging_added (walk_id, uri) VALUES (?1, ?2)")?;
        let mut note_rehash = transaction.prepare_cached(
            "INSERT INTO temp.staging_rehash (walk_id, id, hash) VALUES (?1, ?2, ?3)",
        )?;
        for row in rows {
            let stored = match snapshot {
                Some(server_id) => stored_row
                    .query_row(params![server_id, row.uri], |found| {
                        Ok((found.get::<_, i64>(0)?, found.get::<_, i64>(1)?))
                    })
                    .optional()?,
                None => None,
            };
            // The hash the light row carries, and the listed hash to store, when unchanged.
            let unchanged = match stored {
                Some((_, hash)) if hash == row.hash => Some((hash, None)),
                Some((id, hash)) => {
                    let (text, oversized) = stored_text.query_row([id], |found| {
                        Ok((found.get::<_, String>(0)?, found.get::<_, bool>(1)?))
                    })?;
                    // A trimmed entry is compared by hash only: its text lacks what changed.
                    let same = (hash == 0 && text == row.raw)
                        || (!oversized && !row.oversized && same_entry(&text, &row.raw));
                    same.then_some((hash, Some(row.hash)))
                }
                None => None,
            };
            let inserted = match unchanged {
                Some((hash, _)) => {
                    insert_light.execute(params![walk, row.uri, hash, row.oversized])?
                }
                None => insert.execute(params![
                    walk,
                    row.uri,
                    row.hash,
                    row.oversized,
                    row.name,
                    row.title,
                    row.description,
                    row.mime_type,
                    row.size,
                    row.annotations,
                    row.icons,
                    row.meta,
                    row.raw
                ])?,
            } > 0;
            if !inserted {
                continue;
            }
            counts.staged += 1;
            match (stored, unchanged) {
                (Some(_), Some((_, None))) => counts.matched += 1,
                (Some((id, _)), Some((_, Some(listed_hash)))) => {
                    counts.matched += 1;
                    note_rehash.execute(params![walk, id, listed_hash])?;
                }
                (Some((id, _)), None) => {
                    counts.matched += 1;
                    note_changed.execute(params![walk, id])?;
                }
                (None, _) if snapshot.is_some() => {
                    note_added.execute(params![walk, row.uri])?;
                }
                (None, _) => {}
            }
        }
    }
    transaction.commit()?;
    Ok(())
}

/// Runs `write` with foreign keys off: pending rows name a server id no `servers` row has
/// until `promote` gives it to the server. (The pragma is a no-op inside a transaction, so
/// `write` opens its own.)
fn without_foreign_keys<T>(
    connection: &mut Connection,
    write: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    connection.pragma_update(None, "foreign_keys", false)?;
    let outcome = write(connection);
    let restored = connection.pragma_update(None, "foreign_keys", true);
    let outcome = outcome?;
    restored?;
    Ok(outcome)
}

/// Stages one page of a first load: its rows go straight into `resources` under the pending
/// id, so the swap has nothing left to insert. The walk never sends a URI twice; the unique
/// (server, uri) index refuses an exact repeat all the same.
fn stage_pending(
    connection: &mut Connection,
    counts: &mut StagedCounts,
    rows: &[ResourceRow],
) -> Result<(), StoreError> {
    let Some(pending) = counts.pending.as_mut() else {
        return Ok(());
    };
    let pending_id = pending.id;
    let (inserted, range) = without_foreign_keys(connection, |connection| {
        let transaction = connection.transaction()?;
        let mut inserted = 0u64;
        let mut range: Option<(i64, i64)> = None;
        {
            let mut insert = transaction.prepare_cached(
                "INSERT OR IGNORE INTO resources (server_id, uri, name, title, description,
                     mime_type, size, annotations, icons, meta, raw, hash, oversized)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )?;
            for row in rows {
                let added = insert.execute(params![
                    pending_id,
                    row.uri,
                    row.name,
                    row.title,
                    row.description,
                    row.mime_type,
                    row.size,
                    row.annotations,
                    row.icons,
                    row.meta,
                    row.raw,
                    row.hash,
                    row.oversized
                ])?;
                if added > 0 {
                    inserted += 1;
                    let id = transaction.last_insert_rowid();
                    range = Some(range.map_or((id, id), |(first, _)| (first, id)));
                }
            }
        }
        transaction.commit()?;
        Ok((inserted, range))
    })?;
    counts.staged += inserted;
    if let Some((first, last)) = range {
        match pending.ranges.last_mut() {
            Some(previous) if previous.1 + 1 == first => previous.1 = last,
            _ => pending.ranges.push((first, last)),
        }
    }
    Ok(())
}

/// The most pending rows one batch deletes (`discard_pending_batch`).
const DISCARD_BATCH_ROWS: i64 = 5_000;

/// The pending loads a crash or a stop left, to discard (`discard_pending_batch`).
fn pending_loads(connection: &Connection) -> Result<Vec<i64>, StoreError> {
    let mut statement = connection.prepare("SELECT id FROM pending_loads ORDER BY id")?;
    let ids = statement.query_map([], |row| row.get::<_, i64>(0))?;
    Ok(ids.map(|id| id.map(|id| -id)).collect::<Result<_, _>>()?)
}

/// Deletes up to `DISCARD_BATCH_ROWS` rows of a failed, superseded or interrupted first load,
/// and its `pending_loads` row once none is left; returns whether it is gone. Pending rows
/// are never in the full-text index (its batches skip rows of no server), so nothing else
/// needs them gone.
fn discard_pending_batch(connection: &mut Connection, pending_id: i64) -> Result<bool, StoreError> {
    without_foreign_keys(connection, |connection| {
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Never a server's rows: had the load been promoted, its pending row would be gone.
        let promoted: bool = transaction.query_row(
            "SELECT EXISTS (SELECT 1 FROM servers WHERE id = ?1)",
            [pending_id],
            |row| row.get(0),
        )?;
        let deleted = if promoted {
            0
        } else {
            transaction.execute(
                "DELETE FROM resources WHERE id IN
                     (SELECT id FROM resources WHERE server_id = ?1 LIMIT ?2)",
                params![pending_id, DISCARD_BATCH_ROWS],
            )?
        };
        if deleted == 0 {
            transaction.execute("DELETE FROM pending_loads WHERE id = ?1", [-pending_id])?;
        }
        transaction.commit()?;
        Ok(deleted == 0)
    })
}

fn stage_templates(
    connection: &mut Connection,
    walk_id: u64,
    rows: &[TemplateRow],
) -> Result<(), StoreError> {
    let transaction = connection.transaction()?;
    {
        let mut insert = transaction.prepare_cached(
            "INSERT OR IGNORE INTO temp.staging_templates
                 (walk_id, uri_template, name, title, description, mime_type, raw, oversized)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for row in rows {
            insert.execute(params![
                walk_id as i64,
                row.uri_template,
                row.name,
                row.title,
                row.description,
                row.mime_type,
                row.raw,
                row.oversized
            ])?;
        }
    }
    transaction.commit()?;
    Ok(())
}

fn discard_staging(connection: &Connection, walk_id: u64) {
    // With no other walk staged, an unqualified DELETE lets SQLite drop the tables' pages at
    // once (its truncate optimization) instead of deleting row by row.
    let others_staged = |table: &str| {
        connection
            .query_row(
                &format!(
                    "SELECT EXISTS (SELECT 1 FROM temp.{table} WHERE walk_id < ?1 OR walk_id > ?1)"
                ),
                [walk_id as i64],
                |row| row.get::<_, bool>(0),
            )
            .unwrap_or(true)
    };
    let outcome = [
        "staging_resources",
        "staging_templates",
        "staging_changed",
        "staging_added",
        "staging_rehash",
    ]
    .into_iter()
    .try_for_each(|table| {
        if others_staged(table) {
            connection.execute(
                &format!("DELETE FROM temp.{table} WHERE walk_id = ?1"),
                [walk_id as i64],
            )
        } else {
            connection.execute(&format!("DELETE FROM temp.{table}"), [])
        }
        .map(|_| ())
    });
    if let Err(error) = outcome {
        tracing::warn!(walk_id, %error, "cannot discard staged rows");
    }
}

/// A swap that adds at least this many rows leaves their full-text indexing to the backlog
/// (`FullText::DeferAdded`); one that removes or changes this many, and at least a third of
/// the catalog, empties the index and lists every row (`FullText::Reindex`). Either way the
/// swap's transaction holds no full-text work for them (a first load of 1,000,000 resources
/// spent about half its hold rebuilding the index).
const BULK_INDEX_MIN_ROWS: u64 = 10_000;

/// The most ids one batch of the full-text backlog indexes: about 15 ms of a release build's
/// time per batch, so an operation that arrives meanwhile waits little, and a million rows
/// take 200 commits.
const FULL_TEXT_BATCH_IDS: i64 = 5_000;

/// SQL that is true when resource `r` is in the full-text index, i.e. in no range of the
/// backlog. The ranges never overlap, so the one that starts last at or before `r.id` is the
/// only one that can hold it: one seek, whatever the number of ranges.
const INDEXED: &str = "r.id > coalesce((SELECT b.last_id FROM full_text_backlog b
     WHERE b.first_id <= r.id ORDER BY b.first_id DESC LIMIT 1), 0)";

/// How a swap keeps the full-text index true (`BULK_INDEX_MIN_ROWS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FullText {
    /// Row by row inside the swap: old text out, new text in.
    Inline,
    /// Removed and changed rows inline; the added rows' ids go to the backlog.
    DeferAdded,
    /// The index is emptied and every row goes to the backlog.
    Reindex,
}

impl FullText {
    fn label(self) -> &'static str {
        match self {
            FullText::Inline => "inline",
            FullText::DeferAdded => "deferred",
            FullText::Reindex => "reindex",
        }
    }
}

/// Applies the staged walk as a diff against the server's snapshot, all in one transaction.
/// Returns what changed and the change feed's newest sequence number. `counts` says what the
/// walk staged.
///
/// The transaction is deferred on purpose: computing the diff only reads the snapshot and
/// writes temp tables, so the write lock is taken by the first write to the snapshot and held
/// only while the diff is applied (the swap budget is on that hold time). This writer thread
/// is the only writer, so the snapshot cannot change in between; if it ever did, SQLite would
/// refuse the upgrade (SQLITE_BUSY_SNAPSHOT) and the walk would fail, not apply a stale diff.
fn swap(
    connection: &mut Connection,
    walk_id: u64,
    counts: &StagedCounts,
    server: &str,
    report: &WalkReport,
    full_text_behind: &AtomicU64,
) -> Result<(SwapOutcome, i64), StoreError> {
    if let Some(pending) = &counts.pending {
        return promote(
            connection,
            walk_id,
            counts,
            pending,
            server,
            report,
            full_text_behind,
        );
    }
    let swap_started = std::time::Instant::now();
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)?;
    // 1. The diff, read-only as far as the snapshot goes.
    let diff = compute_diff(&transaction, walk_id as i64, counts, server)?;
    // 2. Applying it: the write lock is held from here to the commit.
    let hold_started = std::time::Instant::now();
    let now = now_ms();
    // Templates first: their feed rows are in before `apply_diff` reads the newest seq.
    let (templates, templates_touched) = replace_templates(&transaction, &diff, server, now)?;
    let applied = apply_diff(&transaction, &diff, server, now)?;
    record_walk(&transaction, &diff, report, now, templates)?;
    execute(&transaction, "DELETE FROM temp.swap_ids", [])?;
    execute(&transaction, "DELETE FROM temp.swap_added", [])?;
    if diff.full_text != FullText::Inline {
        // Raised before the commit and lowered after each batch's: a search may say the
        // index is behind a moment too long, never miss rows without saying so.
        full_text_behind.store(full_text_backlog(&transaction)?, Ordering::Release);
    }
    transaction.commit()?;
    crate::metrics::observe_swap_hold(hold_started.elapsed());
    log_swap(server, &diff, hold_started, swap_started);
    Ok((
        SwapOutcome {
            added: diff.added,
            removed: diff.removed,
            changed: diff.changed,
            resources: diff.resources() as u64,
            templates,
            templates_touched,
        },
        applied.latest_seq,
    ))
}

/// The tables whose rows belong to a server by `server_id` (besides `resources`): `promote`
/// moves them to the server's new id.
const SERVER_TABLES: &[&str] = &[
    "resource_templates",
    "read_cache",
    "entries",
    "entry_snapshots",
    "accepted_entries",
    "accepted_servers",
];

/// The swap of a first load (`PendingLoad`): its rows are already in `resources` under the
/// pending id, so one small transaction gives the server's row that id (the name, status and
/// the few rows keyed by the server move with it), replaces the templates, feeds the change
/// feed and the full-text backlog, and records the walk. Its commit makes the whole load
/// visible at once. A server recorded anew, or given resources, since the load began fails it.
fn promote(
    connection: &mut Connection,
    walk_id: u64,
    counts: &StagedCounts,
    pending: &PendingLoad,
    server: &str,
    report: &WalkReport,
    full_text_behind: &AtomicU64,
) -> Result<(SwapOutcome, i64), StoreError> {
    let hold_started = std::time::Instant::now();
    let (diff, templates, templates_touched, latest_seq) = without_foreign_keys(
        connection,
        |connection| {
            let transaction =
                connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let old_id = server_id(&transaction, server)?.ok_or_else(|| {
                StoreError::Walk(format!("server {server} is not in the database"))
            })?;
            if counts.snapshot != Some(old_id) {
                return Err(StoreError::Walk(format!(
                    "server {server} was recorded anew while it was walked; the walk is discarded"
                )));
            }
            if query_one::<bool, _>(
                &transaction,
                "SELECT EXISTS (SELECT 1 FROM resources WHERE server_id = ?1)",
                [old_id],
            )? {
                return Err(StoreError::Walk(format!(
                    "server {server} gained resources while its first load was walked; the walk is discarded"
                )));
            }
            execute(
                &transaction,
                "UPDATE servers SET id = ?2 WHERE id = ?1",
                params![old_id, pending.id],
            )?;
            for table in SERVER_TABLES {
                execute(
                    &transaction,
                    &format!("UPDATE {table} SET server_id = ?2 WHERE server_id = ?1"),
                    params![old_id, pending.id],
                )?;
            }
            let added = counts.staged;
            let diff = SnapshotDiff {
                server_id: pending.id,
                walk: walk_id as i64,
                before: 0,
                added,
                removed: 0,
                changed: 0,
                first_load: true,
                full_text: if added >= BULK_INDEX_MIN_ROWS {
                    FullText::DeferAdded
                } else {
                    FullText::Inline
                },
            };
            let now = now_ms();
            execute(&transaction, "DELETE FROM temp.swap_ids", [])?;
            execute(&transaction, "DELETE FROM temp.swap_added", [])?;
            let (templates, templates_touched) =
                replace_templates(&transaction, &diff, server, now)?;
            if diff.full_text == FullText::DeferAdded {
                for &(first, last) in &pending.ranges {
                    defer_full_text(&transaction, first, last)?;
                }
            } else {
                // Rows a backlog range holds (ids it lists were freed and handed out again)
                // are left to its batch.
                execute(
                    &transaction,
                    &format!(
                        "INSERT INTO resources_fts (rowid, uri, name, title, description)
                         SELECT r.id, r.uri, r.name, r.title, r.description
                         FROM resources r WHERE r.server_id = ?1 AND {INDEXED}"
                    ),
                    [pending.id],
                )?;
            }
            let mut recorded = 0;
            for &(first, last) in &pending.ranges {
                if recorded >= CHANGES_PER_SWAP {
                    break;
                }
                recorded += execute(
                    &transaction,
                    "INSERT INTO changes (at, server, kind, uri)
                     SELECT ?1, ?2, ?6, r.uri FROM resources r
                     WHERE r.id BETWEEN ?3 AND ?4 AND r.server_id = ?5 ORDER BY r.id LIMIT ?7",
                    params![
                        now,
                        server,
                        first,
                        last,
                        pending.id,
                        ChangeKind::Added,
                        (CHANGES_PER_SWAP - recorded) as i64
                    ],
                )? as u64;
            }
            record_truncated(&transaction, now, server, added, recorded)?;
            let latest_seq = prune_changes(&transaction)?;
            record_walk(&transaction, &diff, report, now, templates)?;
            execute(
                &transaction,
                "DELETE FROM pending_loads WHERE id = ?1",
                [-pending.id],
            )?;
            if diff.full_text != FullText::Inline {
                full_text_behind.store(full_text_backlog(&transaction)?, Ordering::Release);
            }
            transaction.commit()?;
            Ok((diff, templates, templates_touched, latest_seq))
        },
    )?;
    crate::metrics::observe_swap_hold(hold_started.elapsed());
    log_swap(server, &diff, hold_started, hold_started);
    Ok((
        SwapOutcome {
            added: diff.added,
            removed: 0,
            changed: 0,
            resources: diff.resources() as u64,
            templates,
            templates_touched,
        },
        latest_seq,
    ))
}

/// What a staged walk changes in its server's snapshot. The rows themselves are in temp
/// tables: `swap_ids` holds the removed and changed snapshot rows, `swap_added` the URIs of
/// new ones (left empty on a first load, when every staged row is new).
struct SnapshotDiff {
    server_id: i64,
    walk: i64,
    /// Resources in the snapshot before the swap.
    before: i64,
    added: u64,
    removed: u64,
    changed: u64,
    first_load: bool,
    /// How the full-text index learns of the diff (`BULK_INDEX_MIN_ROWS`).
    full_text: FullText,
}

impl SnapshotDiff {
    /// Resources in the snapshot after the swap.
    fn resources(&self) -> i64 {
        self.before - self.removed as i64 + self.added as i64
    }

    fn touched(&self) -> u64 {
        self.added + self.removed + self.changed
    }
}

/// Compares the staged walk with the snapshot, reading it and writing only temp tables.
/// When the walk saw every snapshot row (its staged rows matched as many as the snapshot
/// holds), nothing was removed and what staging noted is the whole diff. Otherwise one pass
/// over the snapshot compares hashes inside the indexes that hold (server, uri, hash) and
/// (walk, uri, hash); only a snapshot row from before hashes existed (hash 0) is compared by
/// text.
fn compute_diff(
    transaction: &rusqlite::Transaction<'_>,
    walk: i64,
    counts: &StagedCounts,
    server: &str,
) -> Result<SnapshotDiff, StoreError> {
    let server_id: i64 = server_id(transaction, server)?
        .ok_or_else(|| StoreError::Walk(format!("server {server} is not in the database")))?;
    let staged = counts.staged;
    // Light rows stand for "as in the snapshot we compared with": only that snapshot may take them.
    if counts
        .snapshot
        .is_some_and(|staged_id| staged_id != server_id)
    {
        return Err(StoreError::Walk(format!(
            "server {server} was recorded anew while it was walked; the walk is discarded"
        )));
    }
    execute(transaction, "DELETE FROM temp.swap_ids", [])?;
    execute(transaction, "DELETE FROM temp.swap_added", [])?;
    let before: i64 = query_one(
        transaction,
        "SELECT count(*) FROM resources WHERE server_id = ?1",
        [server_id],
    )?;
    let first_load = before == 0;
    let saw_every_row = counts.snapshot == Some(server_id) && counts.matched == before as u64;
    let (removed, changed, added) = if first_load || saw_every_row {
        let changed = execute(
            transaction,
            "INSERT INTO temp.swap_ids (id, kind)
             SELECT id, ?2 FROM temp.staging_changed WHERE walk_id = ?1",
            params![walk, CHANGED],
        )? as u64;
        let added = staged.saturating_sub(counts.matched);
        if added > 0 && !first_load {
            execute(
                transaction,
                "INSERT INTO temp.swap_added (uri)
                 SELECT uri FROM temp.staging_added WHERE walk_id = ?1",
                [walk],
            )?;
        }
        (0, changed, added)
    } else {
        // One pass over the snapshot finds the removed rows (no staged row) and the changed ones.
        execute(
            transaction,
            "INSERT INTO temp.swap_ids (id, kind)
             SELECT r.id, CASE WHEN s.uri IS NULL THEN ?3 ELSE ?4 END
             FROM resources r
             LEFT JOIN temp.staging_resources s ON s.walk_id = ?2 AND s.uri = r.uri
             WHERE r.server_id = ?1
               AND (s.uri IS NULL OR (s.hash != r.hash AND (r.hash != 0 OR s.raw IS NOT r.raw)))",
            params![server_id, walk, REMOVED, CHANGED],
        )?;
        let count_kind = |kind: i64| -> Result<i64, StoreError> {
            query_one(
                transaction,
                "SELECT count(*) FROM temp.swap_ids WHERE kind = ?1",
                [kind],
            )
        };
        let removed = count_kind(REMOVED)? as u64;
        let changed = count_kind(CHANGED)? as u64;
        // Every snapshot row that was not removed matched one staged row; the staged rows left
        // over are the added ones, so a walk that added nothing needs no pass to find them.
        let added = staged.saturating_sub(before as u64 - removed);
        if added > 0 {
            execute(
        transaction,
                "INSERT INTO temp.swap_added (uri)
                 SELECT s.uri FROM temp.staging_resources s
                 WHERE s.walk_id = ?2
                   AND NOT EXISTS (SELECT 1 FROM resources r WHERE r.server_id = ?1 AND r.uri = s.uri)",
                params![server_id, walk],
            )?;
        }
        (removed, changed, added)
    };
    let mut diff = SnapshotDiff {
        server_id,
        walk,
        before,
        added,
        removed,
        changed,
        first_load,
        full_text: FullText::Inline,
    };
    let retired = removed + changed;
    // The catalog is counted only for a diff large enough to need it.
    let reindex = retired >= BULK_INDEX_MIN_ROWS && {
        let catalog_rows: i64 = query_one(transaction, "SELECT count(*) FROM resources", [])?;
        retired as i64 * 3 >= catalog_rows
    };
    diff.full_text = if reindex {
        FullText::Reindex
    } else if added >= BULK_INDEX_MIN_ROWS {
        FullText::DeferAdded
    } else {
        FullText::Inline
    };
    Ok(diff)
}

/// What applying a diff left in the change feed.
struct AppliedDiff {
    latest_seq: i64,
}

/// Applies the diff to the resources, their full-text index, the read cache and the change
/// feed, in the order each step needs: the feed and the index learn of old rows before they
/// change, and the index of new rows after they exist.
fn apply_diff(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
    server: &str,
    now: i64,
) -> Result<AppliedDiff, StoreError> {
    let recorded_before = record_removed_and_changed(transaction, server, now)?;
    retire_old_rows(transaction, diff)?;
    update_changed_rows(transaction, diff)?;
    hash_unhashed_rows(transaction, diff)?;
    rehash_same_rows(transaction, diff)?;
    let highest_old_id = insert_added_rows(transaction, diff)?;
    index_new_text(transaction, diff, highest_old_id)?;
    let recorded_added = record_added(transaction, server, now, recorded_before, highest_old_id)?;
    record_truncated(
        transaction,
        now,
        server,
        diff.touched(),
        recorded_before + recorded_added,
    )?;
    Ok(AppliedDiff {
        latest_seq: prune_changes(transaction)?,
    })
}

/// The feed names removed and changed URIs now, while the old rows still exist; returns how
/// many it recorded (at most `CHANGES_PER_SWAP`).
fn record_removed_and_changed(
    transaction: &rusqlite::Transaction<'_>,
    server: &str,
    now: i64,
) -> Result<u64, StoreError> {
    Ok(execute(
        transaction,
        "INSERT INTO changes (at, server, kind, uri)
         SELECT ?1, ?2, CASE x.kind WHEN ?3 THEN ?5 ELSE ?6 END, r.uri
         FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id LIMIT ?4",
        params![
            now,
            server,
            REMOVED,
            CHANGES_PER_SWAP as i64,
            ChangeKind::Removed,
            ChangeKind::Changed
        ],
    )? as u64)
}

/// Deletes the removed rows, and makes the index forget the old text of removed and changed
/// rows before the rows change.
fn retire_old_rows(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
) -> Result<(), StoreError> {
    // Cached contents of a URI the server no longer lists can never be served again.
    execute(
        transaction,
        "DELETE FROM read_cache WHERE server_id = ?1 AND uri IN
             (SELECT r.uri FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id WHERE x.kind = ?2)",
        params![diff.server_id, REMOVED],
    )?;
    // A reindex empties the index afterwards; a row still in the backlog is not in it.
    if diff.full_text != FullText::Reindex {
        execute(
            transaction,
            &format!(
                "INSERT INTO resources_fts (resources_fts, rowid, uri, name, title, description)
                 SELECT 'delete', r.id, r.uri, r.name, r.title, r.description
                 FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id WHERE {INDEXED}"
            ),
            [],
        )?;
    }
    execute(
        transaction,
        "DELETE FROM resources WHERE id IN (SELECT id FROM temp.swap_ids WHERE kind = ?1)",
        [REMOVED],
    )?;
    // Removed ids are done with, and must go: when the highest ids were removed, SQLite hands
    // them out again to the rows added below, which would collide in `swap_ids`.
    execute(
        transaction,
        "DELETE FROM temp.swap_ids WHERE kind = ?1",
        [REMOVED],
    )?;
    Ok(())
}

fn update_changed_rows(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
) -> Result<(), StoreError> {
    // Driven by the (few) changed ids, in this join order: letting the planner start from
    // staging made this statement visit every staged row (1.2 s for 100,000 rows).
    execute(
        transaction,
        "UPDATE resources AS r SET name = c.name, title = c.title, description = c.description,
             mime_type = c.mime_type, size = c.size, annotations = c.annotations, icons = c.icons,
             meta = c.meta, raw = c.raw, hash = c.hash, oversized = c.oversized
         FROM (SELECT x.id AS id, s.name, s.title, s.description, s.mime_type, s.size,
                      s.annotations, s.icons, s.meta, s.raw, s.hash, s.oversized
               FROM temp.swap_ids x
               CROSS JOIN resources old ON old.id = x.id
               CROSS JOIN temp.staging_resources s ON s.walk_id = ?1 AND s.uri = old.uri
               WHERE x.kind = ?2) AS c
         WHERE r.id = c.id",
        params![diff.walk, CHANGED],
    )?;
    Ok(())
}

/// Gives the unchanged rows stored before hashes existed the hash of their staged twin, so
/// their server's next swap compares them by hash too (the partial index finds them at once).
fn hash_unhashed_rows(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
) -> Result<(), StoreError> {
    execute(
        transaction,
        "UPDATE resources AS r SET hash = u.hash
         FROM (SELECT old.id AS id, s.hash AS hash
               FROM resources old INDEXED BY resources_unhashed
               CROSS JOIN temp.staging_resources s ON s.walk_id = ?2 AND s.uri = old.uri
               WHERE old.server_id = ?1 AND old.hash = 0) AS u
         WHERE r.id = u.id",
        params![diff.server_id, diff.walk],
    )?;
    Ok(())
}

/// Gives the rows staging found the same in another form (`staging_rehash`) the hash they
/// are listed with now, so the next walk finds them unchanged by hash alone.
fn rehash_same_rows(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
) -> Result<(), StoreError> {
    execute(
        transaction,
        "UPDATE resources AS r SET hash = x.hash
         FROM temp.staging_rehash x WHERE x.walk_id = ?1 AND r.id = x.id",
        [diff.walk],
    )?;
    Ok(())
}

/// Inserts the added rows; returns the highest id before them (they are the ids above it),
/// and refuses a count that differs from the diff's.
fn insert_added_rows(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
) -> Result<i64, StoreError> {
    // New rows get ids above the current maximum, which is how the index and feed find them.
    let highest_id: i64 = query_one(
        transaction,
        "SELECT coalesce(max(id), 0) FROM resources",
        [],
    )?;
    let inserted = if diff.first_load {
        execute(
        transaction,
            "INSERT INTO resources (server_id, uri, name, title, description, mime_type, size, annotations, icons, meta, raw, hash, oversized)
             SELECT ?1, s.uri, s.name, s.title, s.description, s.mime_type, s.size, s.annotations, s.icons, s.meta, s.raw, s.hash, s.oversized
             FROM temp.staging_resources s WHERE s.walk_id = ?2",
            params![diff.server_id, diff.walk],
        )?
    } else {
        execute(
        transaction,
            "INSERT INTO resources (server_id, uri, name, title, description, mime_type, size, annotations, icons, meta, raw, hash, oversized)
             SELECT ?1, s.uri, s.name, s.title, s.description, s.mime_type, s.size, s.annotations, s.icons, s.meta, s.raw, s.hash, s.oversized
             FROM temp.swap_added a CROSS JOIN temp.staging_resources s ON s.walk_id = ?2 AND s.uri = a.uri",
            params![diff.server_id, diff.walk],
        )?
    } as u64;
    if inserted != diff.added {
        // Only possible if the staged count disagrees with the table; refuse, do not guess.
        return Err(StoreError::Walk(format!(
            "swap found {inserted} new resources where it expected {}",
            diff.added
        )));
    }
    Ok(highest_id)
}

/// Indexes the text of changed and added rows, or leaves it to the backlog (`FullText`).
/// Rows already in the backlog are skipped: their batch indexes the text they have then.
fn index_new_text(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
    highest_old_id: i64,
) -> Result<(), StoreError> {
    let highest_id = || -> Result<i64, StoreError> {
        query_one(
            transaction,
            "SELECT coalesce(max(id), 0) FROM resources",
            [],
        )
    };
    if diff.full_text == FullText::Reindex {
        execute(
            transaction,
            "INSERT INTO resources_fts (resources_fts) VALUES ('delete-all')",
            [],
        )?;
        execute(transaction, "DELETE FROM full_text_backlog", [])?;
        return defer_full_text(transaction, 1, highest_id()?);
    }
    execute(
        transaction,
        &format!(
            "INSERT INTO resources_fts (rowid, uri, name, title, description)
             SELECT r.id, r.uri, r.name, r.title, r.description
             FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id
             WHERE x.kind = ?1 AND {INDEXED}"
        ),
        [CHANGED],
    )?;
    if diff.added == 0 {
        return Ok(());
    }
    if diff.full_text == FullText::DeferAdded {
        return defer_full_text(transaction, highest_old_id + 1, highest_id()?);
    }
    execute(
        transaction,
        &format!(
            "INSERT INTO resources_fts (rowid, uri, name, title, description)
             SELECT r.id, r.uri, r.name, r.title, r.description
             FROM resources r WHERE r.id > ?1 AND {INDEXED}"
        ),
        [highest_old_id],
    )?;
    Ok(())
}

/// Lists ids `first..=last` in the full-text backlog, merged with the ranges they overlap or
/// touch (ids freed by removed rows are handed out again, so a new range can meet an old one),
/// which keeps the ranges apart as `INDEXED` needs.
fn defer_full_text(connection: &Connection, first: i64, last: i64) -> Result<(), StoreError> {
    if first > last {
        return Ok(());
    }
    let (met_first, met_last): (Option<i64>, Option<i64>) = connection.query_row(
        "SELECT min(first_id), max(last_id) FROM full_text_backlog
         WHERE first_id <= ?2 + 1 AND last_id >= ?1 - 1",
        params![first, last],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    execute(
        connection,
        "DELETE FROM full_text_backlog WHERE first_id <= ?2 + 1 AND last_id >= ?1 - 1",
        params![first, last],
    )?;
    execute(
        connection,
        "INSERT INTO full_text_backlog (first_id, last_id) VALUES (?1, ?2)",
        params![
            met_first.map_or(first, |met| met.min(first)),
            met_last.map_or(last, |met| met.max(last))
        ],
    )?;
    Ok(())
}

/// How many ids the full-text backlog lists: an upper bound of the resources the index lacks
/// (ids of rows removed since count too).
pub(super) fn full_text_backlog(connection: &Connection) -> Result<u64, StoreError> {
    let ids: i64 = connection.query_row(
        "SELECT coalesce(sum(last_id - first_id + 1), 0) FROM full_text_backlog",
        [],
        |row| row.get(0),
    )?;
    Ok(ids.max(0) as u64)
}

/// Indexes the backlog's lowest `FULL_TEXT_BATCH_IDS` ids in one transaction, with the text
/// the rows have now; returns how many ids the backlog still lists.
fn index_backlog_batch(connection: &mut Connection) -> Result<u64, StoreError> {
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let next: Option<(i64, i64)> = transaction
        .query_row(
            "SELECT first_id, last_id FROM full_text_backlog ORDER BY first_id LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    let Some((first, last)) = next else {
        return Ok(0);
    };
    let upto = last.min(first.saturating_add(FULL_TEXT_BATCH_IDS - 1));
    transaction.execute(
        "INSERT INTO resources_fts (rowid, uri, name, title, description)
         SELECT id, uri, name, title, description FROM resources
         WHERE id BETWEEN ?1 AND ?2 AND server_id IN (SELECT id FROM servers)",
        params![first, upto],
    )?;
    if upto == last {
        transaction.execute("DELETE FROM full_text_backlog WHERE first_id = ?1", [first])?;
    } else {
        transaction.execute(
            "UPDATE full_text_backlog SET first_id = ?2 WHERE first_id = ?1",
            params![first, upto + 1],
        )?;
    }
    let left = full_text_backlog(&transaction)?;
    transaction.commit()?;
    Ok(left)
}

/// One batch of the backlog (`index_backlog_batch`); publishes what is left. Returns whether
/// more batches should follow: not after a failure, which the next swap retries.
fn index_full_text_batch(connection: &mut Connection, full_text_behind: &AtomicU64) -> bool {
    match index_backlog_batch(connection) {
        Ok(left) => {
            full_text_behind.store(left, Ordering::Release);
            if left == 0 {
                tracing::info!("the full-text index holds every resource again");
            }
            left > 0
        }
        Err(error) => {
            tracing::warn!(%error, "indexing the full-text backlog failed; the next swap retries");
            false
        }
    }
}

/// The feed names added URIs, up to what `CHANGES_PER_SWAP` leaves after the removed and
/// changed ones; returns how many it recorded.
fn record_added(
    transaction: &rusqlite::Transaction<'_>,
    server: &str,
    now: i64,
    recorded_before: u64,
    highest_old_id: i64,
) -> Result<u64, StoreError> {
    Ok(execute(
        transaction,
        "INSERT INTO changes (at, server, kind, uri)
         SELECT ?1, ?2, ?5, r.uri FROM resources r WHERE r.id > ?3 ORDER BY r.id LIMIT ?4",
        params![
            now,
            server,
            highest_old_id,
            CHANGES_PER_SWAP.saturating_sub(recorded_before) as i64,
            ChangeKind::Added
        ],
    )? as u64)
}

/// Templates are few: the staged ones replace the snapshot's whole, and the change feed
/// records which were added, removed or changed (`entry_kind` template, the URI template in
/// `uri`), so the search index and feed readers learn of them as of resources. Compared by
/// their stored text: templates have no hash column, and there are few of them, each bounded
/// by `max_entry_bytes`. Returns how many there are and how many changed.
fn replace_templates(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
    server: &str,
    now: i64,
) -> Result<(u64, u64), StoreError> {
    type Templates = HashMap<String, (String, String)>;
    let read = |sql: &str, id: i64| -> Result<Templates, StoreError> {
        let mut statement = transaction.prepare_cached(sql)?;
        let rows = statement.query_map([id], |row| {
            Ok((row.get::<_, String>(0)?, (row.get(1)?, row.get(2)?)))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    };
    let before = read(
        "SELECT uri_template, name, raw FROM resource_templates WHERE server_id = ?1",
        diff.server_id,
    )?;
    let after = read(
        "SELECT uri_template, name, raw FROM temp.staging_templates WHERE walk_id = ?1",
        diff.walk,
    )?;
    let mut changes: Vec<(ChangeKind, &str, &str)> = Vec::new();
    for (uri_template, (name, raw)) in &before {
        match after.get(uri_template) {
            None => changes.push((ChangeKind::Removed, uri_template, name)),
            Some((_, new_raw)) if new_raw != raw => {
                changes.push((ChangeKind::Changed, uri_template, name))
            }
            Some(_) => {}
        }
    }
    for (uri_template, (name, _)) in &after {
        if !before.contains_key(uri_template) {
            changes.push((ChangeKind::Added, uri_template, name));
        }
    }
    changes.sort_by(|a, b| a.1.cmp(b.1));
    {
        let mut feed = transaction.prepare_cached(
            "INSERT INTO changes (at, server, kind, entry_kind, uri, name) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (change, uri_template, name) in changes.iter().take(CHANGES_PER_SWAP as usize) {
            feed.execute(params![
                now,
                server,
                change,
                Kind::Template,
                uri_template,
                name
            ])?;
        }
    }
    let touched = changes.len() as u64;
    if touched > CHANGES_PER_SWAP {
        execute(
        transaction,
            "INSERT INTO changes (at, server, kind, entry_kind, uri, count) VALUES (?1, ?2, ?3, ?4, NULL, ?5)",
            params![
                now,
                server,
                ChangeKind::Truncated,
                Kind::Template,
                (touched - CHANGES_PER_SWAP) as i64
            ],
        )?;
    }
    execute(
        transaction,
        "DELETE FROM resource_templates WHERE server_id = ?1",
        [diff.server_id],
    )?;
    let count = execute(
        transaction,
        "INSERT INTO resource_templates (server_id, uri_template, name, title, description, mime_type, raw, oversized)
         SELECT ?1, uri_template, name, title, description, mime_type, raw, oversized
         FROM temp.staging_templates WHERE walk_id = ?2",
        params![diff.server_id, diff.walk],
    )? as u64;
    Ok((count, touched))
}

/// The server's row: synced, fresh, and the numbers of this walk.
fn record_walk(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
    report: &WalkReport,
    now: i64,
    templates: u64,
) -> Result<(), StoreError> {
    execute(
        transaction,
        "UPDATE servers SET state = ?13, stale = 0, last_error = NULL, last_error_at = NULL,
             snapshot_at = ?2, resource_count = ?3, template_count = ?4,
             last_walk_at = ?5, last_walk_ms = ?6, last_walk_pages = ?7, last_walk_added = ?8,
             last_walk_removed = ?9, last_walk_changed = ?10, last_walk_duplicates = ?11,
             last_walk_skipped = ?12, walks_ok = walks_ok + 1,
             oversized_entries =
                 (SELECT count(*) FROM resources INDEXED BY resources_oversized
                  WHERE server_id = ?1 AND oversized != 0)
                 + (SELECT count(*) FROM resource_templates WHERE server_id = ?1 AND oversized != 0)
         WHERE id = ?1",
        params![
            diff.server_id,
            now,
            diff.resources(),
            templates as i64,
            report.started_at_ms,
            report.duration_ms,
            report.pages as i64,
            diff.added as i64,
            diff.removed as i64,
            diff.changed as i64,
            report.duplicates as i64,
            report.skipped as i64,
            ServerState::Synced
        ],
    )?;
    Ok(())
}

/// hold_ms is the write lock's hold time; swap_ms adds computing the diff before it.
fn log_swap(
    server: &str,
    diff: &SnapshotDiff,
    hold_started: std::time::Instant,
    swap_started: std::time::Instant,
) {
    let hold_ms = format!("{:.3}", hold_started.elapsed().as_secs_f64() * 1000.0);
    let swap_ms = format!("{:.3}", swap_started.elapsed().as_secs_f64() * 1000.0);
    let (full_text, resources) = (diff.full_text.label(), diff.resources());
    // A swap that changed nothing (a routine poll) stays out of the INFO log.
    if diff.touched() == 0 {
        tracing::debug!(
            server,
            hold_ms,
            swap_ms,
            full_text,
            resources,
            "snapshot swapped; nothing changed"
        );
    } else {
        tracing::info!(
            server,
            hold_ms,
            swap_ms,
            full_text,
            added = diff.added,
            removed = diff.removed,
            changed = diff.changed,
            resources,
            "snapshot swapped"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::ops::AsyncFnMut;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::protocol::TransportKind;
    use crate::store::{schema, SearchRequest, ServerEntry, Store};

    fn configured(names: &[&str]) -> ServerSync {
        ServerSync {
            configured: names
                .iter()
                .map(|name| ServerEntry {
                    name: name.to_string(),
                    priority: 0,
                    transport: TransportKind::Stdio,
                    read_cache_bytes: None,
                })
                .collect(),
            untouched: Vec::new(),
            removed: RemovedServers::Drop,
        }
    }

    /// Resource `index` of `server`, its description naming `word`.
    fn resource(server: &str, index: usize, word: &str) -> ResourceRow {
        let uri = format!("test://{server}/{index:06}");
        let name = format!("{server}-{index}");
        let description = format!("{word} document number {index}");
        let raw =
            serde_json::json!({"uri": uri, "name": name, "description": description}).to_string();
        ResourceRow {
            hash: crate::entry::content_hash(raw.as_bytes()),
            uri,
            name,
            title: None,
            description: Some(description),
            mime_type: None,
            size: None,
            annotations: None,
            icons: None,
            meta: None,
            raw,
            oversized: false,
        }
    }

    fn resources(server: &str, indexes: std::ops::Range<usize>, word: &str) -> Vec<ResourceRow> {
        indexes.map(|index| resource(server, index, word)).collect()
    }

    /// A writer connection on a real database file, with the servers recorded.
    fn writer_connection(path: &std::path::Path, servers: &[&str]) -> Connection {
        let mut connection = schema::open_writer(path).expect("open the database");
        connection.execute_batch(STAGING_SCHEMA).expect("staging");
        sync_servers(&mut connection, &configured(servers)).expect("record the servers");
        connection
    }

    /// Stages `rows` as one walk of `server` and swaps it in, as the writer thread does.
    fn walk(
        connection: &mut Connection,
        walk_id: u64,
        server: &str,
        rows: &[ResourceRow],
        behind: &AtomicU64,
    ) -> SwapOutcome {
        let mut counts = StagedCounts::against(connection, server).expect("counts");
        for page in rows.chunks(1_000) {
            stage_resources(connection, walk_id, &mut counts, page).expect("stage");
        }
        let report = WalkReport::default();
        let (outcome, _) =
            swap(connection, walk_id, &counts, server, &report, behind).expect("swap");
        discard_staging(connection, walk_id);
        outcome
    }

    fn full_text_matches(connection: &Connection, query: &str) -> i64 {
        connection
            .query_row(
                "SELECT count(*) FROM resources_fts WHERE resources_fts MATCH ?1",
                [query],
                |row| row.get(0),
            )
            .expect("match")
    }

    /// FTS5's own check that the index holds exactly the text of the content table's rows.
    fn assert_full_text_is_exact(connection: &Connection) {
        connection
            .execute(
                "INSERT INTO resources_fts (resources_fts, rank) VALUES ('integrity-check', 1)",
                [],
            )
            .expect("the full-text index matches the resources exactly");
    }

    #[test]
    fn a_small_rewalk_beside_a_large_snapshot_never_full_scans() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        let mut connection = writer_connection(&path, &["large", "small"]);
        let behind = AtomicU64::new(0);
        let large = resources("large", 0..20_000, "alpha");
        walk(&mut connection, 1, "large", &large, &behind);
        let small = resources("small", 0..100, "beta");
        walk(&mut connection, 2, "small", &small, &behind);

        // The counter sees a full scan when there is one.
        full_scans::take();
        let _: i64 = query_one(
            &connection,
            "SELECT count(*) FROM resources WHERE name LIKE '%large%'",
            [],
        )
        .expect("scan");
        assert!(
            full_scans::take() >= 20_000,
            "the counter missed a full scan"
        );

        // A re-walk that changes nothing, then one that adds, removes and changes a few rows:
        // neither swap steps through more rows than the small server has.
        let outcome = walk(&mut connection, 3, "small", &small, &behind);
        assert_eq!(outcome.added + outcome.removed + outcome.changed, 0);
        let steps = full_scans::take();
        assert!(
            steps < 1_000,
            "a no-change swap took {steps} full-scan steps"
        );
        let mut changed = small[10..].to_vec();
        changed[0] = resource("small", 10, "gamma");
        changed.push(resource("small", 100, "gamma"));
        let outcome = walk(&mut connection, 4, "small", &changed, &behind);
        assert_eq!(
            (outcome.added, outcome.removed, outcome.changed),
            (1, 10, 1)
        );
        let steps = full_scans::take();
        assert!(steps < 1_000, "a small swap took {steps} full-scan steps");
    }

    #[test]
    fn a_large_swap_leaves_its_full_text_to_the_backlog_and_rows_changed_meanwhile_stay_exact() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        let mut connection = writer_connection(&path, &["large", "other"]);
        let behind = AtomicU64::new(0);
        walk(
            &mut connection,
            1,
            "other",
            &resources("other", 0..50, "alpha"),
            &behind,
        );
        assert_eq!(
            behind.load(Ordering::Acquire),
            0,
            "a small load is indexed inline"
        );
        assert_eq!(full_text_matches(&connection, "alpha"), 50);

        let large = resources("large", 0..20_000, "alpha");
        let outcome = walk(&mut connection, 2, "large", &large, &behind);
        assert_eq!(outcome.added, 20_000);
        assert_eq!(behind.load(Ordering::Acquire), 20_000);
        assert_eq!(full_text_backlog(&connection).expect("backlog"), 20_000);
        // Committed and visible, but not in the full-text index yet; the note says so.
        assert_eq!(full_text_matches(&connection, "alpha"), 50);
        let reader = crate::store::ReadOnlyCatalog::open(&path).expect("reader");
        let note = reader.full_text_note().expect("a note while behind");
        assert!(note.contains("20000 resources"), "{note}");
        let (hits, _) = reader
            .search(&SearchRequest {
                raw: true,
                server: Some("large".into()),
                ..SearchRequest::new("alpha", 10)
            })
            .expect("search");
        assert!(hits.is_empty(), "{hits:?}");

        // Before a batch ran: a row changes, one goes, one comes (a small, inline swap). The
        // index must not be told to forget text it never had.
        let mut next = large.clone();
        next[5] = resource("large", 5, "omega");
        next.remove(6);
        next.push(resource("large", 20_000, "omega"));
        let outcome = walk(&mut connection, 3, "large", &next, &behind);
        assert_eq!((outcome.added, outcome.removed, outcome.changed), (1, 1, 1));

        let mut batches = 0;
        while index_full_text_batch(&mut connection, &behind) {
            batches += 1;
            assert!(batches < 100, "the backlog does not shrink");
        }
        assert!(batches >= 3, "20,000 ids took {batches} batches");
        assert_eq!(behind.load(Ordering::Acquire), 0);
        assert_eq!(reader.full_text_note(), None);
        assert_full_text_is_exact(&connection);
        assert_eq!(full_text_matches(&connection, "omega"), 2);
        assert_eq!(full_text_matches(&connection, "alpha"), 50 + 19_998);

        // A swap that replaces most of the catalog empties the index and lists every row.
        let replaced = resources("large", 0..20_000, "delta");
        let outcome = walk(&mut connection, 4, "large", &replaced, &behind);
        assert!(outcome.changed >= BULK_INDEX_MIN_ROWS, "{outcome:?}");
        assert!(behind.load(Ordering::Acquire) >= 20_050);
        assert_eq!(full_text_matches(&connection, "alpha"), 0);
        while index_full_text_batch(&mut connection, &behind) {}
        assert_full_text_is_exact(&connection);
        assert_eq!(full_text_matches(&connection, "delta"), 20_000);
        assert_eq!(full_text_matches(&connection, "alpha"), 50);
    }

    /// Polls `ready` until it holds, failing after `limit`.
    async fn wait_until(what: &str, limit: Duration, mut ready: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !ready().await {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_backlog_left_by_a_crash_is_resumed_at_start() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        {
            // The swap commits and the process dies before any batch: the backlog is on disk.
            let mut connection = writer_connection(&path, &["large"]);
            let behind = AtomicU64::new(0);
            let large = resources("large", 0..15_000, "alpha");
            walk(&mut connection, 1, "large", &large, &behind);
            assert_eq!(behind.load(Ordering::Acquire), 15_000);
        }
        let store = Store::open(&path).expect("reopen");
        let raw = SearchRequest {
            raw: true,
            ..SearchRequest::new("\"number 14999\"", 10)
        };
        wait_until(
            "the backlog to be indexed",
            Duration::from_secs(120),
            async || {
                let found = store.search(raw.clone()).await.expect("search");
                if found.0.is_empty() {
                    // Not found yet: only while the note says the index is behind.
                    assert!(store.full_text_note().is_some(), "a silent miss");
                    return false;
                }
                store.full_text_note().is_none()
            },
        )
        .await;
        store.close().await;
        let connection = schema::open_writer(&path).expect("open");
        assert_eq!(full_text_backlog(&connection).expect("backlog"), 0);
        assert_full_text_is_exact(&connection);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_servers_swap_commits_while_a_large_first_load_is_indexed() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        let store = Store::open(&path).expect("open");
        store
            .apply_servers(configured(&["large", "small"]))
            .await
            .expect("servers");
        let walk = store.begin_walk("large");
        for page in resources("large", 0..100_000, "alpha").chunks(1_000) {
            walk.add_resources(page.to_vec()).await.expect("stage");
        }
        let outcome = walk.commit(WalkReport::default()).await.expect("commit");
        assert_eq!(outcome.added, 100_000);
        assert!(
            store.full_text_note().is_some(),
            "the load's text is left to the backlog"
        );

        // The other server's walk and swap go through the writer between two batches of the
        // backlog: its commit is answered while most of the load is still being indexed.
        let walk = store.begin_walk("small");
        walk.add_resources(resources("small", 0..10, "beta"))
            .await
            .expect("stage");
        let outcome = walk.commit(WalkReport::default()).await.expect("commit");
        assert_eq!(outcome.added, 10);
        let behind = store.full_text_behind.load(Ordering::Acquire);
        assert!(
            behind > 50_000,
            "the small swap waited for the load's indexing: {behind} ids left"
        );
        let small = SearchRequest {
            raw: true,
            ..SearchRequest::new("beta", 20)
        };
        let (hits, _) = store.search(small).await.expect("search");
        assert_eq!(hits.len(), 10, "a small swap is indexed in its own commit");

        wait_until(
            "the backlog to be indexed",
            Duration::from_secs(300),
            async || store.full_text_note().is_none(),
        )
        .await;
        store.close().await;
    }

    /// Resources whose server id no server has: a first load's pending rows.
    fn pending_rows(path: &std::path::Path) -> i64 {
        let connection = schema::open_reader(path).expect("reader");
        connection
            .query_row(
                "SELECT (SELECT count(*) FROM resources WHERE server_id NOT IN (SELECT id FROM servers))
                        + (SELECT count(*) FROM pending_loads)",
                [],
                |row| row.get(0),
            )
            .expect("count pending rows")
    }

    fn foreign_key_violations(path: &std::path::Path) -> i64 {
        let connection = schema::open_reader(path).expect("reader");
        let mut statement = connection
            .prepare("PRAGMA foreign_key_check")
            .expect("check");
        let rows = statement.query_map([], |_| Ok(())).expect("rows");
        rows.count() as i64
    }

    async fn resources_of(store: &Store, server: &str) -> u64 {
        let status = store.status().await.expect("status");
        status
            .iter()
            .find(|row| row.name == server)
            .map_or(0, |row| row.resources)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_first_load_in_flight_is_seen_by_no_reader_and_holds_up_no_other_commit() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        let store = Store::open(&path).expect("open");
        store
            .apply_servers(configured(&["large", "small"]))
            .await
            .expect("servers");
        let large = resources("large", 0..100_000, "alpha");
        let walk = store.begin_walk("large");
        for page in large[..50_000].chunks(1_000) {
            walk.add_resources(page.to_vec()).await.expect("stage");
        }

        // The other server's walk is queued after half the load's pages and commits before
        // the load does; when it is answered, those pages are in `resources`, pending.
        let small = store.begin_walk("small");
        small
            .add_resources(resources("small", 0..10, "beta"))
            .await
            .expect("stage");
        let outcome = small.commit(WalkReport::default()).await.expect("commit");
        assert_eq!(outcome.added, 10);
        assert_eq!(
            pending_rows(&path),
            50_001,
            "the load's pages and its pending row"
        );

        // No reader sees any of them.
        assert_eq!(resources_of(&store, "large").await, 0);
        assert_eq!(resources_of(&store, "small").await, 10);
        let (listed, more) = store.list_resources(None, 1_000).await.expect("list");
        assert!(!more);
        assert_eq!(listed.len(), 10);
        assert!(listed.iter().all(|row| row.server == "small"));
        assert_eq!(store.merged_resource_count().await.expect("count"), 10);
        let alpha = SearchRequest {
            raw: true,
            ..SearchRequest::new("alpha", 20)
        };
        let (hits, _) = store.search(alpha.clone()).await.expect("search");
        assert!(hits.is_empty(), "a search found a pending row");
        assert!(store
            .read_target(&large[0].uri)
            .await
            .expect("read target")
            .is_none());

        // The server's tools, swapped mid-load under its old id, move with it at the swap.
        let tool = crate::store::EntryRow {
            name: "lookup".to_string(),
            title: None,
            description: Some("finds things".to_string()),
            inputs: String::new(),
            raw: serde_json::json!({"name": "lookup", "inputSchema": {"type": "object"}})
                .to_string(),
        };
        store
            .swap_entries("large", Kind::Tool, vec![tool])
            .await
            .expect("swap tools");

        // The rest of the pages, then the swap: everything at once, nothing left pending.
        for page in large[50_000..].chunks(1_000) {
            walk.add_resources(page.to_vec()).await.expect("stage");
        }
        let outcome = walk.commit(WalkReport::default()).await.expect("commit");
        assert_eq!(outcome.added, 100_000);
        assert_eq!(outcome.resources, 100_000);
        assert_eq!(pending_rows(&path), 0);
        assert_eq!(foreign_key_violations(&path), 0);
        assert_eq!(resources_of(&store, "large").await, 100_000);
        assert_eq!(store.merged_resource_count().await.expect("count"), 100_010);
        let (listed, _) = store.list_resources(None, 20).await.expect("list");
        assert!(listed.iter().all(|row| row.server == "large"));
        let (tools, _) = store
            .list_entries(Kind::Tool, Some("large".to_string()), None, 10)
            .await
            .expect("tools");
        assert_eq!(tools.len(), 1, "the server's tools were lost at the swap");
        assert_eq!(tools[0].name, "lookup");
        wait_until(
            "the backlog to be indexed",
            Duration::from_secs(300),
            async || store.full_text_note().is_none(),
        )
        .await;
        let (hits, _) = store.search(alpha).await.expect("search");
        assert_eq!(hits.len(), 20);
        store.close().await;
        let connection = schema::open_writer(&path).expect("writer");
        assert_full_text_is_exact(&connection);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_first_load_that_fails_or_is_dropped_leaves_no_rows() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        let store = Store::open(&path).expect("open");
        store
            .apply_servers(configured(&["large"]))
            .await
            .expect("servers");
        // A walk dropped mid-load (failed or superseded: the session drops it).
        let walk = store.begin_walk("large");
        for page in resources("large", 0..20_000, "alpha").chunks(1_000) {
            walk.add_resources(page.to_vec()).await.expect("stage");
        }
        drop(walk);
        // A walk whose server a reload removed mid-load: its commit fails.
        let walk = store.begin_walk("large");
        for page in resources("large", 0..5_000, "alpha").chunks(1_000) {
            walk.add_resources(page.to_vec()).await.expect("stage");
        }
        store
            .apply_servers(configured(&[]))
            .await
            .expect("drop the server");
        let failed = walk.commit(WalkReport::default()).await;
        assert!(
            failed.is_err(),
            "a load of a server removed meanwhile committed"
        );
        store
            .apply_servers(configured(&["large"]))
            .await
            .expect("record it again");
        wait_until(
            "the pending rows to be discarded",
            Duration::from_secs(120),
            async || pending_rows(&path) == 0,
        )
        .await;
        assert_eq!(resources_of(&store, "large").await, 0);
        assert_eq!(store.merged_resource_count().await.expect("count"), 0);

        // The next walk loads everything, exactly.
        let walk = store.begin_walk("large");
        for page in resources("large", 0..3_000, "alpha").chunks(1_000) {
            walk.add_resources(page.to_vec()).await.expect("stage");
        }
        let outcome = walk.commit(WalkReport::default()).await.expect("commit");
        assert_eq!(outcome.added, 3_000);
        assert_eq!(resources_of(&store, "large").await, 3_000);
        assert_eq!(foreign_key_violations(&path), 0);
        store.close().await;
        let connection = schema::open_writer(&path).expect("writer");
        assert_full_text_is_exact(&connection);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pending_rows_left_by_a_crash_are_discarded_at_start_and_the_walk_repeats() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        {
            // Half a first load is staged, then the process dies: the pages are on disk.
            let mut connection = writer_connection(&path, &["large", "small"]);
            walk(
                &mut connection,
                1,
                "small",
                &resources("small", 0..10, "beta"),
                &AtomicU64::new(0),
            );
            let mut counts = StagedCounts::against(&connection, "large").expect("counts");
            for page in resources("large", 0..12_000, "alpha").chunks(1_000) {
                stage_resources(&mut connection, 2, &mut counts, page).expect("stage");
            }
        }
        assert_eq!(pending_rows(&path), 12_001);
        let store = Store::open(&path).expect("open");
        assert_eq!(resources_of(&store, "large").await, 0);
        assert_eq!(store.merged_resource_count().await.expect("count"), 10);
        wait_until(
            "the pending rows to be discarded",
            Duration::from_secs(120),
            async || pending_rows(&path) == 0,
        )
        .await;
        let walk = store.begin_walk("large");
        for page in resources("large", 0..12_000, "alpha").chunks(1_000) {
            walk.add_resources(page.to_vec()).await.expect("stage");
        }
        let outcome = walk.commit(WalkReport::default()).await.expect("commit");
        assert_eq!(outcome.added, 12_000);
        assert_eq!(resources_of(&store, "large").await, 12_000);
        assert_eq!(store.merged_resource_count().await.expect("count"), 12_010);
        assert_eq!(foreign_key_violations(&path), 0);
        wait_until(
            "the backlog to be indexed",
            Duration::from_secs(300),
            async || store.full_text_note().is_none(),
        )
        .await;
        store.close().await;
        let connection = schema::open_writer(&path).expect("writer");
        assert_full_text_is_exact(&connection);
    }
}
