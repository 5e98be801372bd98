//! The hash-compared swap of a staged walk: computing the diff and applying it in one transaction.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use rusqlite::{params, Connection};

use super::entry_swap::OVERSIZED_ENTRIES;
use super::full_text::{
    defer_full_text, full_text_backlog, reindex_full_text, FullText, BULK_INDEX_MIN_ROWS, INDEXED,
};
use super::history::{self, VersionKey};
use super::staged::{StagedCounts, WalkToCommit};
use super::{
    advance_generation, execute, prune_changes, query_one, record_truncated, server_id,
    CHANGES_PER_SWAP,
};
use crate::protocol::{ChangeKind, Kind};
use crate::store::entry::same_entry;
use crate::store::{now_ms, StoreError, SwapOutcome, WalkReport};

/// A diff that touches at least this many resources, and at least half as many as the
/// snapshot will hold, is swapped in as a reload. The same number as the most keys a follower
/// fetches as a delta (`walk::follow`'s `MAX_DELTA_KEYS`): a swap that big is followed by a
/// walk anyway, so its feed names no key (one `truncated` row) and loses a follower nothing.
pub(super) const RELOAD_MIN_ROWS: u64 = 50_000;

/// Whether a walk's diff is swapped in as a reload rather than applied in place. Not a first
/// load (promoted as it is), nor a server whose resources keep their history (its versions are
/// recorded from the diff applied in place).
pub(super) fn reloads(diff: &SnapshotDiff, history_kept: bool) -> bool {
    let touched = diff.added + diff.removed + diff.changed;
    !diff.first_load
        && !history_kept
        && touched >= RELOAD_MIN_ROWS
        && touched.saturating_mul(2) >= diff.resources().max(0) as u64
}

/// What committing a staged walk came to: swapped in, or left to a reload (`reload.rs`), whose
/// diff this is (read before any write; nothing is written).
pub(super) enum Committed {
    Swapped(SwapOutcome, i64),
    Reload(SnapshotDiff),
}

/// Kinds in `swap_ids` (added rows are found by id instead: they are the ids above the
/// highest one before the swap).
pub(super) const REMOVED: i64 = 0;
pub(super) const CHANGED: i64 = 1;

/// Applies the staged walk as a diff against the server's snapshot, all in one transaction (a
/// first load, staged straight into `resources`, is promoted instead: `pending::promote`).
/// Returns what changed and the change feed's newest sequence number. `counts` says what the
/// walk staged.
///
/// The transaction is deferred on purpose: computing the diff only reads the snapshot and
/// writes temp tables, so the write lock is taken by the first write to the snapshot and held
/// only while the diff is applied (the swap budget is on that hold time). This writer thread
/// is the only writer, so the snapshot cannot change in between; if it ever did, SQLite would
/// refuse the upgrade (SQLITE_BUSY_SNAPSHOT) and the walk would fail, not apply a stale diff.
/// The only other holder of the write lock, the checkpointer's `RESTART`, is kept off it
/// meanwhile by the caller (`WalWatch::restart_gate`): SQLite refuses an upgrade while
/// another connection holds the lock, without waiting.
pub(super) fn swap(
    connection: &mut Connection,
    commit: &WalkToCommit<'_>,
) -> Result<Committed, StoreError> {
    let server = commit.server;
    let swap_started = std::time::Instant::now();
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)?;
    // 1. The diff, read-only as far as the snapshot goes.
    let diff = compute_diff(&transaction, commit.walk_id as i64, commit.counts, server)?;
    if reloads(
        &diff,
        history::resources_kept(&transaction, diff.server_id)?,
    ) {
        // Rolled back: only temp tables were written.
        return Ok(Committed::Reload(diff));
    }
    // 2. Applying it: the write lock is held from here to the commit.
    let hold_started = std::time::Instant::now();
    let now = now_ms();
    // Templates first: their feed rows are in before `apply_diff` reads the newest seq.
    let (templates, templates_touched) = replace_templates(&transaction, &diff, server, now)?;
    let applied = apply_diff(&transaction, &diff, server, now)?;
    record_walk(&transaction, &diff, commit.report, now, templates)?;
    clear_swap_tables(&transaction)?;
    if diff.touched() + templates_touched > 0 {
        advance_generation(&transaction)?;
    }
    if diff.full_text != FullText::Inline {
        // Raised before the commit and lowered after each batch's: a search may say the
        // index is behind a moment too long, never miss rows without saying so.
        commit
            .full_text_behind
            .store(full_text_backlog(&transaction)?, Ordering::Release);
    }
    transaction.commit()?;
    crate::metrics::observe_swap_hold(hold_started.elapsed());
    log_swap(server, &diff, hold_started, swap_started);
    Ok(Committed::Swapped(
        diff.outcome(templates, templates_touched),
        applied.latest_seq,
    ))
}

/// Empties the swap's temp tables (`SnapshotDiff`) before a diff is noted in them, and after
/// it is applied.
pub(super) fn clear_swap_tables(transaction: &rusqlite::Transaction<'_>) -> Result<(), StoreError> {
    execute(transaction, "DELETE FROM temp.swap_ids", [])?;
    execute(transaction, "DELETE FROM temp.swap_added", [])?;
    Ok(())
}

/// The snapshot rows staging found changed (`staging_changed`) into the diff; how many.
pub(super) fn note_staged_changes(
    transaction: &rusqlite::Transaction<'_>,
    walk: i64,
) -> Result<u64, StoreError> {
    Ok(execute(
        transaction,
        "INSERT INTO temp.swap_ids (id, kind, uri)
         SELECT id, ?2, uri FROM temp.staging_changed WHERE walk_id = ?1",
        params![walk, CHANGED],
    )? as u64)
}

/// The URIs staging found added (`staging_added`) into the diff; how many.
pub(super) fn note_staged_added(
    transaction: &rusqlite::Transaction<'_>,
    walk: i64,
) -> Result<u64, StoreError> {
    Ok(execute(
        transaction,
        "INSERT INTO temp.swap_added (uri) SELECT uri FROM temp.staging_added WHERE walk_id = ?1",
        [walk],
    )? as u64)
}

/// What a staged walk changes in its server's snapshot. The rows themselves are in temp
/// tables: `swap_ids` holds the removed and changed snapshot rows (with their URIs, when the
/// diff was read from staging or from the pass over the snapshot), `swap_added` the URIs of
/// new ones (left empty on a first load, when every staged row is new).
pub(super) struct SnapshotDiff {
    pub(super) server_id: i64,
    pub(super) walk: i64,
    /// Resources in the snapshot before the swap.
    pub(super) before: i64,
    pub(super) added: u64,
    pub(super) removed: u64,
    pub(super) changed: u64,
    pub(super) first_load: bool,
    /// How the full-text index learns of the diff (`BULK_INDEX_MIN_ROWS`).
    pub(super) full_text: FullText,
}

impl SnapshotDiff {
    /// Resources in the snapshot after the swap.
    pub(super) fn resources(&self) -> i64 {
        self.before - self.removed as i64 + self.added as i64
    }

    /// What the swap of this diff tells its walk, with the templates it swapped.
    pub(super) fn outcome(&self, templates: u64, templates_touched: u64) -> SwapOutcome {
        SwapOutcome {
            added: self.added,
            removed: self.removed,
            changed: self.changed,
            resources: self.resources() as u64,
            templates,
            templates_touched,
        }
    }

    pub(super) fn touched(&self) -> u64 {
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
    clear_swap_tables(transaction)?;
    let before: i64 = query_one(
        transaction,
        "SELECT count(*) FROM resources WHERE server_id = ?1",
        [server_id],
    )?;
    let first_load = before == 0;
    let saw_every_row = counts.snapshot == Some(server_id) && counts.matched == before as u64;
    let (removed, changed, added) = if first_load || saw_every_row {
        let changed = note_staged_changes(transaction, walk)?;
        let added = staged.saturating_sub(counts.matched);
        if added > 0 && !first_load {
            note_staged_added(transaction, walk)?;
        }
        (0, changed, added)
    } else {
        diff_by_pass(transaction, server_id, walk, staged, before)?
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

/// The diff of a walk that did not see every snapshot row: one pass over the snapshot finds
/// the removed rows (no staged row) and the changed ones; the staged rows left over are the
/// added ones. Returns (removed, changed, added).
fn diff_by_pass(
    transaction: &rusqlite::Transaction<'_>,
    server_id: i64,
    walk: i64,
    staged: u64,
    before: i64,
) -> Result<(u64, u64, u64), StoreError> {
    // One pass over the snapshot finds the removed rows (no staged row) and the changed ones.
    execute(
        transaction,
        "INSERT INTO temp.swap_ids (id, kind, uri)
         SELECT r.id, CASE WHEN s.uri IS NULL THEN ?3 ELSE ?4 END, r.uri
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
    Ok((removed, changed, added))
}

/// What applying a diff left in the change feed.
pub(super) struct AppliedDiff {
    pub(super) latest_seq: i64,
}

/// Applies the diff to the resources, their full-text index, the read cache and the change
/// feed, in the order each step needs: the feed and the index learn of old rows before they
/// change, and the index of new rows after they exist.
pub(super) fn apply_diff(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
    server: &str,
    now: i64,
) -> Result<AppliedDiff, StoreError> {
    let kept = history::resources_kept(transaction, diff.server_id)?;
    if kept {
        history::resources_before(transaction, diff.server_id, now, REMOVED)?;
    }
    let recorded_before = record_removed_and_changed(transaction, server, now)?;
    retire_old_rows(transaction, diff)?;
    update_changed_rows(transaction, diff)?;
    hash_unhashed_rows(transaction, diff)?;
    rehash_same_rows(transaction, diff)?;
    let highest_old_id = insert_added_rows(transaction, diff)?;
    if kept {
        history::resources_after(transaction, diff.server_id, now, CHANGED, highest_old_id)?;
    }
    // Versions recorded: the kept server's added and changed resources (a seed adds one more
    // for a changed entry's first change, left to the next swaps).
    let recorded = if kept { diff.added + diff.changed } else { 0 };
    history::prune_batch(transaction, now, recorded)?;
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
        return reindex_full_text(transaction);
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
pub(super) fn replace_templates(
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
            // Another key order or spacing of one template is not a change.
            Some((_, new_raw)) if !same_entry(raw, new_raw) => {
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
    for (change, uri_template, _) in &changes {
        let version = VersionKey::new(diff.server_id, Kind::Template, uri_template);
        match (change, after.get(*uri_template), before.get(*uri_template)) {
            (ChangeKind::Removed, _, _) => history::close_version(transaction, version, now)?,
            (_, Some((_, body)), previous) => {
                if let Some((_, previous_body)) = previous {
                    history::seed_version(transaction, version, previous_body, now)?;
                }
                history::record_version(transaction, version, body, now)?
            }
            _ => {}
        }
    }
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

/// The server's row: fresh, and the numbers of this walk. It turns `synced` when the whole
/// walk is in (`ServerUpdate::Synced`): the walk's tools and prompts come after its resources.
pub(super) fn record_walk(
    transaction: &rusqlite::Transaction<'_>,
    diff: &SnapshotDiff,
    report: &WalkReport,
    now: i64,
    templates: u64,
) -> Result<(), StoreError> {
    execute(
        transaction,
        &format!(
            "UPDATE servers SET stale = 0, last_error = NULL, last_error_at = NULL,
             snapshot_at = ?2, resource_count = ?3, template_count = ?4,
             last_walk_at = ?5, last_walk_ms = ?6, last_walk_pages = ?7, last_walk_added = ?8,
             last_walk_removed = ?9, last_walk_changed = ?10, last_walk_duplicates = ?11,
             last_walk_skipped = ?12,
             oversized_entries = {OVERSIZED_ENTRIES}
         WHERE id = ?1"
        ),
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
            report.skipped as i64
        ],
    )?;
    Ok(())
}

/// hold_ms is the write lock's hold time; swap_ms adds computing the diff before it.
pub(super) fn log_swap(
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
