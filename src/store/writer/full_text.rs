//! The full-text backlog: when a swap defers its indexing, and the batches that work it off.

use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::sql::{execute, query_one};
use crate::store::StoreError;

/// A swap that adds at least this many rows leaves their full-text indexing to the backlog
/// (`FullText::DeferAdded`); one that removes or changes this many, and at least a third of
/// the catalog, empties the index and lists every row (`FullText::Reindex`). Either way the
/// swap's transaction holds no full-text work for them (a first load of 1,000,000 resources
/// spent about half its hold rebuilding the index).
pub(super) const BULK_INDEX_MIN_ROWS: u64 = 10_000;

/// The most ids one batch of the full-text backlog indexes: about 15 ms of a release build's
/// time per batch, so an operation that arrives meanwhile waits little, and a million rows
/// take 200 commits.
const FULL_TEXT_BATCH_IDS: i64 = 5_000;

/// One backlog batch: the rows of ids `?1..=?2` that belong to a server (a pending first load's
/// do not). `+server_id`: the id range drives it. Left to itself SQLite searched the servers'
/// index and visited every row of each server for every batch: 12.5 s of the writer's time
/// after a first load of 1,000,000 (3 s with the range).
pub(super) const BACKLOG_BATCH_SQL: &str =
    "INSERT INTO resources_fts (rowid, uri, name, title, description)
     SELECT id, uri, name, title, description FROM resources
     WHERE id BETWEEN ?1 AND ?2 AND +server_id IN (SELECT id FROM servers)";

/// SQL that is true when resource `r` is in the full-text index, i.e. in no range of the
/// backlog. The ranges never overlap, so the one that starts last at or before `r.id` is the
/// only one that can hold it: one seek, whatever the number of ranges.
pub(super) const INDEXED: &str = "r.id > coalesce((SELECT b.last_id FROM full_text_backlog b
     WHERE b.first_id <= r.id ORDER BY b.first_id DESC LIMIT 1), 0)";

/// How a swap keeps the full-text index true (`BULK_INDEX_MIN_ROWS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FullText {
    /// Row by row inside the swap: old text out, new text in.
    Inline,
    /// Removed and changed rows inline; the added rows' ids go to the backlog.
    DeferAdded,
    /// The index is emptied and every row goes to the backlog.
    Reindex,
}

impl FullText {
    pub(super) fn label(self) -> &'static str {
        match self {
            FullText::Inline => "inline",
            FullText::DeferAdded => "deferred",
            FullText::Reindex => "reindex",
        }
    }
}

/// Lists ids `first..=last` in the full-text backlog, merged with the ranges they overlap or
/// touch (ids freed by removed rows are handed out again, so a new range can meet an old one),
/// which keeps the ranges apart as `INDEXED` needs.
pub(super) fn defer_full_text(
    connection: &Connection,
    first: i64,
    last: i64,
) -> Result<(), StoreError> {
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
pub(in crate::store) fn full_text_backlog(connection: &Connection) -> Result<u64, StoreError> {
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
    transaction.execute(BACKLOG_BATCH_SQL, params![first, upto])?;
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
pub(super) fn index_full_text_batch(
    connection: &mut Connection,
    full_text_behind: &AtomicU64,
) -> bool {
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

/// Empties the full-text index and lists every row in its backlog, whose batches index the
/// rows that belong to a server then.
pub(super) fn reindex_full_text(transaction: &Transaction<'_>) -> Result<(), StoreError> {
    execute(
        transaction,
        "INSERT INTO resources_fts (resources_fts) VALUES ('delete-all')",
        [],
    )?;
    execute(transaction, "DELETE FROM full_text_backlog", [])?;
    let highest: i64 = query_one(
        transaction,
        "SELECT coalesce(max(id), 0) FROM resources",
        [],
    )?;
    defer_full_text(transaction, 1, highest)
}

/// The full-text indexes whose segments the writer merges when idle (their `automerge` is 0:
/// migration 0015).
const MERGED_INDEXES: [&str; 2] = ["resources_fts", "entries_fts"];

/// Leaf pages one merge step writes at most, per index, so an operation that arrives
/// meanwhile waits little: measured with FTS5 alone after a load of 1,000,000 rows, a step
/// took 7 ms at the median and 36-54 ms at most.
const MERGE_STEP_PAGES: i64 = 64;

/// One step of merging the full-text indexes' segments, as FTS5's automerge did inside each
/// writing transaction: a level of 4 segments or more is merged into one on the next level
/// (`merge` with a positive page count; FTS5's `usermerge`, 4 by default). Each index's step
/// is its own transaction. Returns whether more work is left: FTS5 tells none by changing
/// fewer than 2 rows (`sqlite3_total_changes`).
pub(super) fn merge_step(connection: &Connection) -> Result<bool, StoreError> {
    let mut more = false;
    for index in MERGED_INDEXES {
        let before = connection.total_changes();
        execute(
            connection,
            &format!("INSERT INTO {index} ({index}, rank) VALUES ('merge', ?1)"),
            [MERGE_STEP_PAGES],
        )?;
        more |= connection.total_changes() - before >= 2;
    }
    Ok(more)
}
