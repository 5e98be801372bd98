//! A re-walk that changes much of a big snapshot, swapped in as a reload: its new snapshot is
//! copied under a pending id a batch at a time between the writer's other operations, then
//! promoted in one small transaction as a first load is; the old rows are deleted afterwards.
//!
//! Applied in place, such a diff held the one write lock for as long as it took to rewrite
//! every changed row (8-41 s for 1,000,000 changed resources), and every other server's commit
//! waited behind it. Copied in batches, the lock is held a batch at a time (`RELOAD_BATCH_ROWS`)
//! and readers still see the old snapshot whole until the promotion's commit, the new one
//! whole after it.

use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{params, Connection, Transaction};

use super::full_text::{defer_full_text, full_text_backlog, reindex_full_text, FullText};
use super::history;
use super::ops::Reply;
use super::pending::{move_server_rows, without_foreign_keys};
use super::staged::PendingLoad;
use super::swap::{log_swap, record_walk, replace_templates, SnapshotDiff};
use super::{advance_generation, execute, prune_changes, query_one, record_truncated, server_id};
use crate::store::{now_ms, StoreError, SwapOutcome, WalkReport};

/// The most staged rows one batch copies: about as long a hold of the write lock as a batch of
/// the full-text backlog (`FULL_TEXT_BATCH_IDS`), so another server's commit waits little.
const RELOAD_BATCH_ROWS: i64 = 5_000;

/// A reload in flight: the walk it swaps in, its diff against the snapshot it replaces, and
/// how far the copy of its staged rows has come.
pub(super) struct Reload {
    pub(super) walk_id: u64,
    pub(super) server: String,
    report: WalkReport,
    pub(super) reply: Reply<SwapOutcome>,
    /// The diff against the snapshot it replaces (`server_id` is that snapshot's id).
    pub(super) diff: SnapshotDiff,
    /// Where the new snapshot goes: a pending id, and the ids its rows took.
    pub(super) pending: PendingLoad,
    /// Rows the walk staged, and how many are copied.
    staged: u64,
    copied: u64,
    /// The highest staging rowid copied.
    copied_to: i64,
}

impl Reload {
    /// Begins the reload of a staged walk whose diff `reloads`: takes its pending id (outside
    /// any batch: the `pending_loads` row must outlive a batch rolled back).
    pub(super) fn begin(
        connection: &Connection,
        walk_id: u64,
        server: &str,
        report: &WalkReport,
        reply: Reply<SwapOutcome>,
        diff: SnapshotDiff,
        staged: u64,
    ) -> Result<Reload, (StoreError, Reply<SwapOutcome>)> {
        let taken = execute(
            connection,
            "INSERT INTO pending_loads (server) VALUES (?1)",
            [server],
        );
        if let Err(error) = taken {
            return Err((error, reply));
        }
        Ok(Reload {
            walk_id,
            server: server.to_string(),
            report: *report,
            reply,
            diff,
            pending: PendingLoad {
                id: -connection.last_insert_rowid(),
                ..PendingLoad::default()
            },
            staged,
            copied: 0,
            copied_to: 0,
        })
    }

    /// Copies the next batch of staged rows into `resources` under the pending id, in one
    /// transaction: a whole staged row as it is, a light one (staged as unchanged) from the
    /// snapshot's row. Returns whether every staged row is copied.
    pub(super) fn copy_batch(&mut self, connection: &mut Connection) -> Result<bool, StoreError> {
        let walk = self.walk_id as i64;
        let (old_id, pending_id) = (self.diff.server_id, self.pending.id);
        let (from, to) = (self.copied_to, &mut self.copied_to);
        let (inserted, first) = without_foreign_keys(connection, |connection| {
            let transaction = connection.transaction()?;
            // The staging table's rowids drive the batch; `+walk_id` keeps SQLite off the
            // (walk, uri) index, which would sort the whole walk's rows for every batch.
            let last: Option<i64> = query_one(
                &transaction,
                "SELECT max(rowid) FROM (SELECT rowid FROM temp.staging_resources
                 WHERE rowid > ?1 AND +walk_id = ?2 ORDER BY rowid LIMIT ?3)",
                params![from, walk, RELOAD_BATCH_ROWS],
            )?;
            let Some(last) = last else {
                return Ok((0, 0));
            };
            let highest: i64 = query_one(
                &transaction,
                "SELECT coalesce(max(id), 0) FROM resources",
                [],
            )?;
            let inserted = execute(
                &transaction,
                &copy_sql(),
                params![pending_id, old_id, walk, from, last],
            )? as u64;
            transaction.commit()?;
            *to = last;
            Ok((inserted, highest + 1))
        })?;
        if inserted > 0 {
            // One statement on the one writer: its rows took the ids after the highest.
            let last = first + inserted as i64 - 1;
            match self.pending.ranges.last_mut() {
                Some(previous) if previous.1 + 1 == first => previous.1 = last,
                _ => self.pending.ranges.push((first, last)),
            }
        }
        self.copied += inserted;
        if inserted == 0 && self.copied != self.staged {
            return Err(StoreError::Walk(format!(
                "the reload of {} copied {} of {} staged resources",
                self.server, self.copied, self.staged
            )));
        }
        Ok(inserted == 0)
    }

    /// Promotes the copied snapshot in one small transaction: the server takes the pending id
    /// (the rows keyed by the server move with it), the old id's rows are left to retire, the
    /// templates are replaced, the change feed gets one `truncated` row, the full-text index
    /// learns of the new rows (and forgets the old ones whole when they were a third of the
    /// catalog), and the walk is recorded. A server recorded anew since the walk fails it.
    pub(super) fn promote(
        &self,
        connection: &mut Connection,
        full_text_behind: &AtomicU64,
    ) -> Result<(SwapOutcome, i64), StoreError> {
        let hold_started = std::time::Instant::now();
        let (old_id, new_id) = (self.diff.server_id, self.pending.id);
        let server = self.server.as_str();
        let (diff, templates, templates_touched, latest_seq) = without_foreign_keys(
            connection,
            |connection| {
                let transaction = connection.transaction()?;
                if server_id(&transaction, server)? != Some(old_id) {
                    return Err(StoreError::Walk(format!(
                        "server {server} was recorded anew while it was walked; the walk is discarded"
                    )));
                }
                keep_listed_hashes(&transaction, self.walk_id as i64, new_id)?;
                execute(
                    &transaction,
                    "DELETE FROM read_cache WHERE server_id = ?1 AND NOT EXISTS
                         (SELECT 1 FROM resources r WHERE r.server_id = ?2 AND r.uri = read_cache.uri)",
                    params![old_id, new_id],
                )?;
                move_server_rows(&transaction, old_id, new_id)?;
                execute(
                    &transaction,
                    "INSERT INTO retired_snapshots (server_id, server) VALUES (?1, ?2)",
                    params![old_id, server],
                )?;
                execute(
                    &transaction,
                    "DELETE FROM pending_loads WHERE id = ?1",
                    [-new_id],
                )?;
                let diff = SnapshotDiff {
                    server_id: new_id,
                    walk: self.walk_id as i64,
                    full_text: self.index_full_text(&transaction)?,
                    first_load: false,
                    ..self.diff
                };
                let now = now_ms();
                let (templates, templates_touched) =
                    replace_templates(&transaction, &diff, server, now)?;
                record_truncated(&transaction, now, server, diff.touched(), 0)?;
                history::prune_batch(&transaction, now, 0)?;
                let latest_seq = prune_changes(&transaction)?;
                record_walk(&transaction, &diff, &self.report, now, templates)?;
                advance_generation(&transaction)?;
                // Raised before the commit and lowered after each batch's (as a swap does).
                full_text_behind.store(full_text_backlog(&transaction)?, Ordering::Release);
                transaction.commit()?;
                Ok((diff, templates, templates_touched, latest_seq))
            },
        )?;
        crate::metrics::observe_swap_hold(hold_started.elapsed());
        log_swap(server, &diff, hold_started, hold_started);
        Ok((diff.outcome(templates, templates_touched), latest_seq))
    }

    /// The new rows go to the full-text backlog. When the old ones are a third of the catalog
    /// or more, the index is emptied and every row listed instead (as a swap's `Reindex`);
    /// otherwise the old rows leave the index as they are retired (`discard_batch`).
    fn index_full_text(&self, transaction: &Transaction<'_>) -> Result<FullText, StoreError> {
        let catalog_rows: i64 = query_one(transaction, "SELECT count(*) FROM resources", [])?;
        if self.diff.before * 3 >= catalog_rows - self.copied as i64 {
            reindex_full_text(transaction)?;
            return Ok(FullText::Reindex);
        }
        for &(first, last) in &self.pending.ranges {
            defer_full_text(transaction, first, last)?;
        }
        Ok(FullText::DeferAdded)
    }
}

/// The copy of one batch of staged rows (`?4 < rowid <= ?5` of walk `?3`) under the pending id
/// `?1`; a light row's columns come from the snapshot's row of its URI (server `?2`).
fn copy_sql() -> String {
    let columns = [
        "name",
        "title",
        "description",
        "mime_type",
        "size",
        "annotations",
        "icons",
        "meta",
        "raw",
    ];
    let values: Vec<String> = columns
        .iter()
        .map(|column| format!("CASE WHEN s.raw IS NULL THEN o.{column} ELSE s.{column} END"))
        .collect();
    format!(
        "INSERT INTO resources (server_id, uri, {columns}, hash, oversized)
         SELECT ?1, s.uri, {values}, s.hash, s.oversized
         FROM temp.staging_resources s
         LEFT JOIN resources o ON s.raw IS NULL AND o.server_id = ?2 AND o.uri = s.uri
         WHERE s.rowid > ?4 AND s.rowid <= ?5 AND +s.walk_id = ?3
         ORDER BY s.rowid",
        columns = columns.join(", "),
        values = values.join(", "),
    )
}

/// Rows staging found the same in another form (`staging_rehash`, by the old row's id) take
/// the hash they are listed with now, as a swap's `rehash_same_rows` gives it.
fn keep_listed_hashes(
    transaction: &Transaction<'_>,
    walk: i64,
    new_id: i64,
) -> Result<(), StoreError> {
    execute(
        transaction,
        "UPDATE resources AS r SET hash = x.hash
         FROM temp.staging_rehash x CROSS JOIN resources old ON old.id = x.id
         WHERE x.walk_id = ?1 AND r.server_id = ?2 AND r.uri = old.uri",
        params![walk, new_id],
    )?;
    Ok(())
}
