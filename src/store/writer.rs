//! The one writer thread: stages walks in temp tables and swaps each complete walk in one transaction.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
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

/// Kinds in `swap_ids`.
const REMOVED: i64 = 0;
const CHANGED: i64 = 1;
const ADDED: i64 = 2;

/// The most per-URI rows one swap adds to the change feed; the rest become one
/// 'truncated' row with a count, so a first load of a million resources costs little.
pub const CHANGES_PER_SWAP: u64 = 1_000;
/// The change feed keeps this many newest entries and forgets older ones.
pub const CHANGES_KEPT: i64 = 100_000;

pub fn run(
    mut connection: Connection,
    mut operations: mpsc::UnboundedReceiver<WriteOp>,
    changes: broadcast::Sender<CatalogChanged>,
    catalog_version: Arc<AtomicU64>,
) {
    if let Err(error) = connection.execute_batch(STAGING_SCHEMA) {
        tracing::error!(%error, "cannot create staging tables; the store cannot accept walks");
    }
    // Walks whose staging failed, with the first error; their commit reports it.
    let mut failed_walks: HashMap<u64, String> = HashMap::new();
    // What each walk has staged so far, and against which snapshot.
    let mut staged_walks: HashMap<u64, StagedCounts> = HashMap::new();
    while let Some(operation) = operations.blocking_recv() {
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
                let outcome = match failed_walks.remove(&walk_id) {
                    Some(error) => Err(StoreError::Walk(format!("staging failed: {error}"))),
                    None => {
                        let counts = staged_walks.remove(&walk_id).unwrap_or_default();
                        swap(&mut connection, walk_id, &counts, &server, &report)
                    }
                };
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
                staged_walks.remove(&walk_id);
                discard_staging(&connection, walk_id);
            }
            WriteOp::Abort { walk_id } => {
                failed_walks.remove(&walk_id);
                staged_walks.remove(&walk_id);
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
                "INSERT INTO resources_fts (resources_fts, rowid, uri, name, title, description)
                 SELECT 'delete', id, uri, name, title, description FROM resources WHERE server_id = ?1",
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

/// Adds the 'truncated' row for the changes of one swap that were not recorded one by one.
fn record_truncated(
    transaction: &rusqlite::Transaction<'_>,
    now: i64,
    server: &str,
    total: u64,
    recorded: u64,
) -> Result<(), StoreError> {
    if total > recorded {
        transaction.execute(
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
    let latest: i64 =
        transaction.query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |row| {
            row.get(0)
        })?;
    transaction.execute(
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

/// What one walk has staged, and the snapshot it was compared with.
#[derive(Debug, Default, Clone, Copy)]
struct StagedCounts {
    /// The server's id when staging began: light rows stand for "as in this snapshot".
    snapshot: Option<i64>,
    /// The snapshot had no resources then (a first load): nothing to look up.
    snapshot_empty: bool,
    /// Distinct resources staged.
    staged: u64,
    /// Staged resources the snapshot holds (unchanged or changed).
    matched: u64,
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
        Ok(StagedCounts {
            snapshot,
            snapshot_empty,
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

/// A diff that touches at least this many rows, and at least a third of the whole catalog,
/// rebuilds the full-text index in bulk instead of row by row: FTS5's `rebuild` is about 3x
/// faster per row than incremental maintenance (DESIGN.md, "Storage facts measured").
const BULK_INDEX_MIN_ROWS: u64 = 10_000;

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
) -> Result<(SwapOutcome, i64), StoreError> {
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
    transaction.execute("DELETE FROM temp.swap_ids", [])?;
    transaction.execute("DELETE FROM temp.swap_added", [])?;
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
    /// Rebuild the full-text index at once instead of row by row (`BULK_INDEX_MIN_ROWS`).
    bulk_index: bool,
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
    transaction.execute("DELETE FROM temp.swap_ids", [])?;
    transaction.execute("DELETE FROM temp.swap_added", [])?;
    let before: i64 = transaction.query_row(
        "SELECT count(*) FROM resources WHERE server_id = ?1",
        [server_id],
        |row| row.get(0),
    )?;
    let first_load = before == 0;
    let saw_every_row = counts.snapshot == Some(server_id) && counts.matched == before as u64;
    let (removed, changed, added) = if first_load || saw_every_row {
        let changed = transaction.execute(
            "INSERT INTO temp.swap_ids (id, kind)
             SELECT id, ?2 FROM temp.staging_changed WHERE walk_id = ?1",
            params![walk, CHANGED],
        )? as u64;
        let added = staged.saturating_sub(counts.matched);
        if added > 0 && !first_load {
            transaction.execute(
                "INSERT INTO temp.swap_added (uri)
                 SELECT uri FROM temp.staging_added WHERE walk_id = ?1",
                [walk],
            )?;
        }
        (0, changed, added)
    } else {
        // One pass over the snapshot finds the removed rows (no staged row) and the changed ones.
        transaction.execute(
            "INSERT INTO temp.swap_ids (id, kind)
             SELECT r.id, CASE WHEN s.uri IS NULL THEN ?3 ELSE ?4 END
             FROM resources r
             LEFT JOIN temp.staging_resources s ON s.walk_id = ?2 AND s.uri = r.uri
             WHERE r.server_id = ?1
               AND (s.uri IS NULL OR (s.hash != r.hash AND (r.hash != 0 OR s.raw IS NOT r.raw)))",
            params![server_id, walk, REMOVED, CHANGED],
        )?;
        let count_kind = |kind: i64| {
            transaction.query_row(
                "SELECT count(*) FROM temp.swap_ids WHERE kind = ?1",
                [kind],
                |row| row.get::<_, i64>(0),
            )
        };
        let removed = count_kind(REMOVED)? as u64;
        let changed = count_kind(CHANGED)? as u64;
        // Every snapshot row that was not removed matched one staged row; the staged rows left
        // over are the added ones, so a walk that added nothing needs no pass to find them.
        let added = staged.saturating_sub(before as u64 - removed);
        if added > 0 {
            transaction.execute(
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
        bulk_index: false,
    };
    diff.bulk_index = diff.touched() >= BULK_INDEX_MIN_ROWS && {
        let catalog_rows: i64 =
            transaction.query_row("SELECT count(*) FROM resources", [], |row| row.get(0))?;
        diff.touched() as i64 * 3 >= catalog_rows - removed as i64 + added as i64
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
    insert_added_rows(transaction, diff)?;
    index_new_text(transaction, diff)?;
    let recorded_added = record_added(transaction, server, now, recorded_before)?;
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
    Ok(transaction.execute(
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
    transaction.execute(
        "DELETE FROM read_cache WHERE server_id = ?1 AND uri IN
             (SELECT r.uri FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id WHERE x.kind = ?2)",
        params![diff.server_id, REMOVED],
    )?;
    if !diff.bulk_index {
        transaction.execute(
            "INSERT INTO resources_fts (resources_fts, rowid, uri, name, title, description)
             SELECT 'delete', r.id, r.uri, r.name, r.title, r.description
             FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id",
            [],
        )?;
    }
    transaction.execute(
        "DELETE FROM resources WHERE id IN (SELECT id FROM temp.swap_ids WHERE kind = ?1)",
        [REMOVED],
    )?;
    // Removed ids are done with, and must go: when the highest ids were removed, SQLite hands
    // them out again to the rows added below, which would collide in `swap_ids`.
    transaction.execute("DELETE FROM temp.swap_ids WHERE kind = ?1", [REMOVED])?;
    Ok(())
}

fn update_changed_rows(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
) -> Result<(), StoreError> {
    // Driven by the (few) changed ids, in this join order: letting the planner start from
    // staging made this statement visit every staged row (1.2 s for 100,000 rows).
    transaction.execute(
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
    transaction.execute(
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
    transaction.execute(
        "UPDATE resources AS r SET hash = x.hash
         FROM temp.staging_rehash x WHERE x.walk_id = ?1 AND r.id = x.id",
        [diff.walk],
    )?;
    Ok(())
}

/// Inserts the added rows and lists their ids in `swap_ids`; refuses a count that differs
/// from the diff's.
fn insert_added_rows(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
) -> Result<(), StoreError> {
    // New rows get ids above the current maximum, which is how we find them for the index.
    let highest_id: i64 =
        transaction.query_row("SELECT coalesce(max(id), 0) FROM resources", [], |row| {
            row.get(0)
        })?;
    let inserted = if diff.first_load {
        transaction.execute(
            "INSERT INTO resources (server_id, uri, name, title, description, mime_type, size, annotations, icons, meta, raw, hash, oversized)
             SELECT ?1, s.uri, s.name, s.title, s.description, s.mime_type, s.size, s.annotations, s.icons, s.meta, s.raw, s.hash, s.oversized
             FROM temp.staging_resources s WHERE s.walk_id = ?2",
            params![diff.server_id, diff.walk],
        )?
    } else {
        transaction.execute(
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
    transaction.execute(
        "INSERT INTO temp.swap_ids (id, kind) SELECT id, ?2 FROM resources WHERE id > ?1",
        params![highest_id, ADDED],
    )?;
    Ok(())
}

/// Indexes the text of changed and added rows, or rebuilds the whole index for a large diff.
fn index_new_text(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
) -> Result<(), StoreError> {
    if diff.bulk_index {
        transaction.execute(
            "INSERT INTO resources_fts (resources_fts) VALUES ('rebuild')",
            [],
        )?;
    } else {
        transaction.execute(
            "INSERT INTO resources_fts (rowid, uri, name, title, description)
             SELECT r.id, r.uri, r.name, r.title, r.description
             FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id WHERE x.kind IN (?1, ?2)",
            params![CHANGED, ADDED],
        )?;
    }
    Ok(())
}

/// The feed names added URIs, up to what `CHANGES_PER_SWAP` leaves after the removed and
/// changed ones; returns how many it recorded.
fn record_added(
    transaction: &rusqlite::Transaction<'_>,
    server: &str,
    now: i64,
    recorded_before: u64,
) -> Result<u64, StoreError> {
    Ok(transaction.execute(
        "INSERT INTO changes (at, server, kind, uri)
         SELECT ?1, ?2, ?5, r.uri FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id
         WHERE x.kind = ?3 LIMIT ?4",
        params![
            now,
            server,
            ADDED,
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
        transaction.execute(
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
    transaction.execute(
        "DELETE FROM resource_templates WHERE server_id = ?1",
        [diff.server_id],
    )?;
    let count = transaction.execute(
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
    transaction.execute(
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
    let (bulk_index, resources) = (diff.bulk_index, diff.resources());
    // A swap that changed nothing (a routine poll) stays out of the INFO log.
    if diff.touched() == 0 {
        tracing::debug!(
            server,
            hold_ms,
            swap_ms,
            bulk_index,
            resources,
            "snapshot swapped; nothing changed"
        );
    } else {
        tracing::info!(
            server,
            hold_ms,
            swap_ms,
            bulk_index,
            added = diff.added,
            removed = diff.removed,
            changed = diff.changed,
            resources,
            "snapshot swapped"
        );
    }
}
