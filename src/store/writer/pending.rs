//! A first load staged straight into `resources` under a pending id, its discard, and its promotion to the server's id.

use std::sync::atomic::Ordering;

use rusqlite::{params, Connection, Transaction};

use super::full_text::{
    defer_full_text, full_text_backlog, FullText, BULK_INDEX_MIN_ROWS, INDEXED,
};
use super::sql::{insert_resource, RESOURCE_COLUMNS};
use super::staged::{PendingLoad, StagedCounts, WalkToCommit};
use super::swap::{clear_swap_tables, log_swap, record_walk, replace_templates, SnapshotDiff};
use super::{
    advance_generation, execute, prune_changes, query_one, record_truncated, server_id,
    CHANGES_PER_FIRST_LOAD,
};
use crate::protocol::ChangeKind;
use crate::store::{now_ms, ResourceRow, StoreError, SwapOutcome};

/// Runs `write` with foreign keys off: pending rows name a server id no `servers` row has
/// until `promote` gives it to the server. (The pragma is a no-op inside a transaction, so
/// `write` opens its own.)
pub(super) fn without_foreign_keys<T>(
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
pub(super) fn stage_pending(
    connection: &mut Connection,
    counts: &mut StagedCounts,
    rows: &[ResourceRow],
) -> Result<(), StoreError> {
    let Some(pending) = counts.pending.as_mut() else {
        return Ok(());
    };
    let pending_id = pending.id;
    // A savepoint in the writer's open batch, which has foreign keys off (`wal.rs`).
    let (inserted, range) = {
        let transaction = connection.savepoint()?;
        let mut inserted = 0u64;
        let mut range: Option<(i64, i64)> = None;
        {
            let mut insert = transaction.prepare_cached(&format!(
                "INSERT OR IGNORE INTO resources (server_id, {RESOURCE_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
            ))?;
            for row in rows {
                let added = insert_resource(&mut insert, pending_id, row)?;
                if added > 0 {
                    inserted += 1;
                    let id = transaction.last_insert_rowid();
                    range = Some(range.map_or((id, id), |(first, _)| (first, id)));
                }
            }
        }
        transaction.commit()?;
        (inserted, range)
    };
    counts.staged += inserted;
    if let Some((first, last)) = range {
        match pending.ranges.last_mut() {
            Some(previous) if previous.1 + 1 == first => previous.1 = last,
            _ => pending.ranges.push((first, last)),
        }
    }
    Ok(())
}

/// The most rows one batch deletes (`discard_batch`).
const DISCARD_BATCH_ROWS: i64 = 5_000;

/// The row-less snapshots a crash or a stop left, to delete (`discard_batch`): first loads
/// never promoted (their pending ids) and snapshots a reload replaced (`retired_snapshots`).
pub(super) fn leftover_snapshots(connection: &Connection) -> Result<Vec<i64>, StoreError> {
    let mut statement = connection.prepare(
        "SELECT -id FROM pending_loads UNION ALL SELECT server_id FROM retired_snapshots",
    )?;
    let ids = statement.query_map([], |row| row.get::<_, i64>(0))?;
    Ok(ids.collect::<Result<_, _>>()?)
}

/// Deletes up to `DISCARD_BATCH_ROWS` rows of a snapshot no server has: a failed, superseded
/// or interrupted first load (pending rows, never in the full-text index: its batches skip
/// rows of no server), or the snapshot a reload replaced (its rows leave the full-text index
/// first, when they are in it). Its `pending_loads` or `retired_snapshots` row goes once no
/// row is left; returns whether it is gone.
pub(super) fn discard_batch(connection: &mut Connection, id: i64) -> Result<bool, StoreError> {
    without_foreign_keys(connection, |connection| {
        let transaction = connection.transaction()?;
        // Never a server's rows: had the load been promoted, its pending row would be gone.
        let promoted: bool = transaction.query_row(
            "SELECT EXISTS (SELECT 1 FROM servers WHERE id = ?1)",
            [id],
            |row| row.get(0),
        )?;
        let retired: bool = transaction.query_row(
            "SELECT EXISTS (SELECT 1 FROM retired_snapshots WHERE server_id = ?1)",
            [id],
            |row| row.get(0),
        )?;
        let deleted = if promoted {
            0
        } else {
            clear_swap_tables(&transaction)?;
            execute(
                &transaction,
                "INSERT INTO temp.swap_ids (id, kind)
                 SELECT id, 0 FROM resources WHERE server_id = ?1 LIMIT ?2",
                params![id, DISCARD_BATCH_ROWS],
            )?;
            if retired {
                execute(
                    &transaction,
                    &format!(
                        "INSERT INTO resources_fts (resources_fts, rowid, uri, name, title, description)
                         SELECT 'delete', r.id, r.uri, r.name, r.title, r.description
                         FROM temp.swap_ids x CROSS JOIN resources r ON r.id = x.id WHERE {INDEXED}"
                    ),
                    [],
                )?;
            }
            let deleted = execute(
                &transaction,
                "DELETE FROM resources WHERE id IN (SELECT id FROM temp.swap_ids)",
                [],
            )?;
            clear_swap_tables(&transaction)?;
            deleted
        };
        if deleted == 0 {
            execute(
                &transaction,
                "DELETE FROM pending_loads WHERE id = ?1",
                [-id],
            )?;
            execute(
                &transaction,
                "DELETE FROM retired_snapshots WHERE server_id = ?1",
                [id],
            )?;
        }
        transaction.commit()?;
        Ok(deleted == 0)
    })
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
    // Only its tools', prompts' and templates' versions (bounded per key): a server with no
    // resources has recorded none of theirs.
    "history_versions",
];

/// The swap of a first load (`PendingLoad`): its rows are already in `resources` under the
/// pending id, so one small transaction gives the server's row that id (the name, status and
/// the few rows keyed by the server move with it), replaces the templates, feeds the change
/// feed and the full-text backlog, and records the walk. Its commit makes the whole load
/// visible at once. A server recorded anew, or given resources, since the load began fails it.
pub(super) fn promote(
    connection: &mut Connection,
    commit: &WalkToCommit<'_>,
    pending: &PendingLoad,
) -> Result<(SwapOutcome, i64), StoreError> {
    let server = commit.server;
    let hold_started = std::time::Instant::now();
    let (diff, templates, templates_touched, latest_seq) =
        without_foreign_keys(connection, |connection| {
            let transaction =
                connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            take_server_id(&transaction, commit, pending)?;
            let added = commit.counts.staged;
            let diff = SnapshotDiff {
                server_id: pending.id,
                walk: commit.walk_id as i64,
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
            clear_swap_tables(&transaction)?;
            let (templates, templates_touched) =
                replace_templates(&transaction, &diff, server, now)?;
            index_first_load(&transaction, &diff, pending)?;
            let recorded = record_first_load_changes(&transaction, server, pending, now)?;
            record_truncated(&transaction, now, server, added, recorded)?;
            let latest_seq = prune_changes(&transaction)?;
            record_walk(&transaction, &diff, commit.report, now, templates)?;
            advance_generation(&transaction)?;
            execute(
                &transaction,
                "DELETE FROM pending_loads WHERE id = ?1",
                [-pending.id],
            )?;
            if diff.full_text != FullText::Inline {
                commit
                    .full_text_behind
                    .store(full_text_backlog(&transaction)?, Ordering::Release);
            }
            transaction.commit()?;
            Ok((diff, templates, templates_touched, latest_seq))
        })?;
    crate::metrics::observe_swap_hold(hold_started.elapsed());
    log_swap(server, &diff, hold_started, hold_started);
    Ok((diff.outcome(templates, templates_touched), latest_seq))
}

/// Gives the server the load's pending id, with the few rows keyed by its old one; a server
/// recorded anew, or given resources, since the load began fails the load.
fn take_server_id(
    transaction: &Transaction<'_>,
    commit: &WalkToCommit<'_>,
    pending: &PendingLoad,
) -> Result<(), StoreError> {
    let server = commit.server;
    let old_id = server_id(transaction, server)?
        .ok_or_else(|| StoreError::Walk(format!("server {server} is not in the database")))?;
    if commit.counts.snapshot != Some(old_id) {
        return Err(StoreError::Walk(format!(
            "server {server} was recorded anew while it was walked; the walk is discarded"
        )));
    }
    if query_one::<bool, _>(
        transaction,
        "SELECT EXISTS (SELECT 1 FROM resources WHERE server_id = ?1)",
        [old_id],
    )? {
        return Err(StoreError::Walk(format!(
            "server {server} gained resources while its first load was walked; the walk is discarded"
        )));
    }
    move_server_rows(transaction, old_id, pending.id)
}

/// Gives the server's row id `new_id`, with the rows keyed by its old id (`SERVER_TABLES`);
/// its resources stay where they are.
pub(super) fn move_server_rows(
    transaction: &Transaction<'_>,
    old_id: i64,
    new_id: i64,
) -> Result<(), StoreError> {
    execute(
        transaction,
        "UPDATE servers SET id = ?2 WHERE id = ?1",
        params![old_id, new_id],
    )?;
    for table in SERVER_TABLES {
        execute(
            transaction,
            &format!("UPDATE {table} SET server_id = ?2 WHERE server_id = ?1"),
            params![old_id, new_id],
        )?;
    }
    Ok(())
}

/// The load's rows into FTS5: inline when few, else as backlog ranges for the writer's
/// batches between operations.
fn index_first_load(
    transaction: &Transaction<'_>,
    diff: &SnapshotDiff,
    pending: &PendingLoad,
) -> Result<(), StoreError> {
    if diff.full_text == FullText::DeferAdded {
        for &(first, last) in &pending.ranges {
            defer_full_text(transaction, first, last)?;
        }
        return Ok(());
    }
    // Rows a backlog range holds (ids it lists were freed and handed out again) are left to
    // its batch.
    execute(
        transaction,
        &format!(
            "INSERT INTO resources_fts (rowid, uri, name, title, description)
             SELECT r.id, r.uri, r.name, r.title, r.description
             FROM resources r WHERE r.server_id = ?1 AND {INDEXED}"
        ),
        [pending.id],
    )?;
    Ok(())
}

/// A first load's feed rows of one range of ids. `+r.server_id`: the id range drives it, not
/// the server's index (which visits every row the server has, then sorts them).
pub(super) const FIRST_LOAD_FEED_SQL: &str = "INSERT INTO changes (at, server, kind, uri)
     SELECT ?1, ?2, ?6, r.uri FROM resources r
     WHERE r.id BETWEEN ?3 AND ?4 AND +r.server_id = ?5 ORDER BY r.id LIMIT ?7";

/// The feed's rows of a first load: its first `CHANGES_PER_FIRST_LOAD` URIs in id order; how
/// many were recorded (the caller adds the `truncated` row past them).
fn record_first_load_changes(
    transaction: &Transaction<'_>,
    server: &str,
    pending: &PendingLoad,
    now: i64,
) -> Result<u64, StoreError> {
    let mut recorded = 0;
    for &(first, last) in &pending.ranges {
        if recorded >= CHANGES_PER_FIRST_LOAD {
            break;
        }
        recorded += execute(
            transaction,
            FIRST_LOAD_FEED_SQL,
            params![
                now,
                server,
                first,
                last,
                pending.id,
                ChangeKind::Added,
                (CHANGES_PER_FIRST_LOAD - recorded) as i64
            ],
        )? as u64;
    }
    Ok(recorded)
}
