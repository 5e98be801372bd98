//! A delta from a followed upstream: the changed entries staged like a walk's pages, the
//! removed keys named, applied through the swap's own `apply_diff` with the cursor moved in
//! the same transaction, so a reader sees the old snapshot or the new one and a crash leaves
//! the old one with its old cursor. Templates the delta touched go through the swap's own
//! `replace_templates`, with the untouched ones carried over; tools and prompts likewise
//! through the entry swap (`swap_entries_in`), their untouched entries carried over as light
//! rows.

use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{params, Connection, Transaction};

use super::entry_swap::swap_entries_in;
use super::full_text::{full_text_backlog, FullText, BULK_INDEX_MIN_ROWS};
use super::staged::StagedCounts;
use super::swap::{
    apply_diff, clear_swap_tables, log_swap, note_staged_added, note_staged_changes,
    replace_templates, SnapshotDiff, REMOVED,
};
use super::{advance_generation, execute, prune_changes, query_one, server_id, Delta};
use crate::protocol::{Kind, ServerState};
use crate::store::{now_ms, DeltaOutcome, EntrySwap, FollowCursor, StoreError, SwapOutcome};

/// Applies the staged rows of `walk_id` (added or changed entries) and removes the delta's
/// `removed` keys from `server`'s snapshot, swaps the tools and prompts it touched; moves its
/// cursor to the delta's `cursor`. Returns what changed and the change feed's newest seq.
pub(super) fn apply_delta(
    connection: &mut Connection,
    walk_id: u64,
    counts: &StagedCounts,
    server: &str,
    delta: &Delta,
    full_text_behind: &AtomicU64,
) -> Result<(DeltaOutcome, i64), StoreError> {
    let cursor = &delta.cursor;
    let started = std::time::Instant::now();
    let walk = walk_id as i64;
    let transaction = connection.transaction()?;
    let server_id = server_id(&transaction, server)?
        .ok_or_else(|| StoreError::Walk(format!("server {server} is not in the database")))?;
    // A delta is never staged as a first load (`StagedCounts::against`); its light rows stand
    // for the snapshot of the server's id when staging began, which must still be this one.
    if counts.pending.is_some() || counts.snapshot.is_some_and(|staged| staged != server_id) {
        return Err(StoreError::Walk(format!(
            "server {server} was removed and added again while a delta to it was staged; the \
             next walk or follow stages it afresh"
        )));
    }
    let diff = delta_diff(&transaction, walk, server_id, &delta.removed)?;
    let hold_started = std::time::Instant::now();
    let now = now_ms();
    let applied = apply_diff(&transaction, &diff, server, now)?;
    let templates = match &delta.templates {
        Some(touched) => Some(delta_templates(&transaction, &diff, server, touched, now)?),
        None => None,
    };
    let entries = delta_entries(&transaction, server_id, server, delta)?;
    execute(
        &transaction,
        "UPDATE servers SET state = ?2, stale = 0, last_error = NULL, last_error_at = NULL,
             snapshot_at = ?3, resource_count = ?4, follow_instance = ?5, follow_seq = ?6,
             deltas_applied = deltas_applied + 1, template_count = coalesce(?7, template_count)
         WHERE id = ?1",
        params![
            server_id,
            ServerState::Synced,
            now,
            diff.resources(),
            cursor.instance,
            cursor.seq,
            templates.map(|(count, _)| count as i64)
        ],
    )?;
    clear_swap_tables(&transaction)?;
    if diff.full_text != FullText::Inline {
        full_text_behind.store(full_text_backlog(&transaction)?, Ordering::Release);
    }
    let template_count: i64 = query_one(
        &transaction,
        "SELECT template_count FROM servers WHERE id = ?1",
        [server_id],
    )?;
    let entries_touched: u64 = entries.iter().map(|(_, swap)| swap.touched()).sum();
    let templates_touched = templates.map_or(0, |(_, touched)| touched);
    if diff.added + diff.removed + diff.changed + templates_touched + entries_touched > 0 {
        advance_generation(&transaction)?;
    }
    // The entries' feed rows came after the resources'.
    let latest_seq = match delta.entries.is_empty() {
        true => applied.latest_seq,
        false => prune_changes(&transaction)?,
    };
    transaction.commit()?;
    crate::metrics::observe_swap_hold(hold_started.elapsed());
    log_swap(server, &diff, hold_started, started);
    Ok((
        DeltaOutcome {
            swap: SwapOutcome {
                added: diff.added,
                removed: diff.removed,
                changed: diff.changed,
                resources: diff.resources() as u64,
                templates: template_count.max(0) as u64,
                templates_touched,
            },
            entries,
        },
        latest_seq,
    ))
}

/// The delta's diff against the snapshot, in the swap's temp tables: the staged changed rows,
/// the removed keys the snapshot holds and the staged added URIs.
fn delta_diff(
    transaction: &Transaction<'_>,
    walk: i64,
    server_id: i64,
    removed: &[String],
) -> Result<SnapshotDiff, StoreError> {
    clear_swap_tables(transaction)?;
    // The server's row keeps its count with each swap and delta (in their transactions):
    // counting a 100,000-entry snapshot again would cost every one-entry delta milliseconds.
    let before: i64 = query_one(
        transaction,
        "SELECT resource_count FROM servers WHERE id = ?1",
        [server_id],
    )?;
    let changed = note_staged_changes(transaction, walk)?;
    let mut gone = 0u64;
    {
        let mut remove = transaction.prepare_cached(
            "INSERT OR IGNORE INTO temp.swap_ids (id, kind)
             SELECT id, ?3 FROM resources WHERE server_id = ?1 AND uri = ?2",
        )?;
        for uri in removed {
            gone += remove.execute(params![server_id, uri, REMOVED])? as u64;
        }
    }
    let added = note_staged_added(transaction, walk)?;
    Ok(SnapshotDiff {
        server_id,
        walk,
        before,
        added,
        removed: gone,
        changed,
        first_load: false,
        full_text: match added >= BULK_INDEX_MIN_ROWS {
            true => FullText::DeferAdded,
            false => FullText::Inline,
        },
    })
}

/// The delta's templates: the staged templates are the touched ones still listed; the
/// untouched ones are carried over, so the swap's own comparison sees the whole new set.
/// Returns the templates' count and how many changed.
fn delta_templates(
    transaction: &Transaction<'_>,
    diff: &SnapshotDiff,
    server: &str,
    touched: &[String],
    now: i64,
) -> Result<(u64, u64), StoreError> {
    let touched = serde_json::to_string(touched)
        .map_err(|error| StoreError::Walk(format!("the delta's templates: {error}")))?;
    execute(
        transaction,
        "INSERT OR IGNORE INTO temp.staging_templates
             (walk_id, uri_template, name, title, description, mime_type, raw, oversized)
         SELECT ?2, uri_template, name, title, description, mime_type, raw, oversized
         FROM resource_templates
         WHERE server_id = ?1 AND uri_template NOT IN (SELECT value FROM json_each(?3))",
        params![diff.server_id, diff.walk, touched],
    )?;
    replace_templates(transaction, diff, server, now)
}

/// The tools and prompts the delta touched, each kind swapped: the staged entries are the
/// touched ones still listed; the untouched ones are carried over as light rows (as a walk
/// stages an unchanged entry).
fn delta_entries(
    transaction: &Transaction<'_>,
    server_id: i64,
    server: &str,
    delta: &Delta,
) -> Result<Vec<(Kind, EntrySwap)>, StoreError> {
    let mut entries = Vec::new();
    for touched in &delta.entries {
        let keys = serde_json::to_string(&touched.touched)
            .map_err(|error| StoreError::Walk(format!("the delta's keys: {error}")))?;
        execute(
            transaction,
            "INSERT OR IGNORE INTO temp.staging_entries (walk_id, name, hash, oversized, rehash)
             SELECT ?2, name, hash, oversized, 0 FROM entries
             WHERE server_id = ?1 AND kind = ?3
               AND name NOT IN (SELECT value FROM json_each(?4))",
            params![server_id, touched.walk_id as i64, touched.kind, keys],
        )?;
        let swap = swap_entries_in(
            transaction,
            touched.walk_id,
            server_id,
            server,
            touched.kind,
        )?;
        entries.push((touched.kind, swap));
    }
    Ok(entries)
}

/// Moves (or forgets) a followed server's cursor, after a full walk committed.
pub(super) fn set_follow_cursor(
    connection: &Connection,
    server: &str,
    cursor: Option<&FollowCursor>,
) -> Result<(), StoreError> {
    execute(
        connection,
        "UPDATE servers SET follow_instance = ?2, follow_seq = ?3 WHERE name = ?1",
        params![
            server,
            cursor.map(|cursor| cursor.instance.as_str()),
            cursor.map(|cursor| cursor.seq)
        ],
    )?;
    Ok(())
}
