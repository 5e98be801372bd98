//! The hash-compared swap of a staged walk of tools or prompts: one (server, kind) snapshot replaced in one transaction.
//!
//! The walk staged its pages as `stage_entries` did (`staging.rs`): unchanged entries as their
//! name and hash only. The swap reads the staged rows one at a time, so neither the walk nor
//! the swap holds a kind's entries in memory: a no-change re-walk of 10,000 large tools costs
//! the pages in flight, not the catalog.

use rusqlite::types::FromSql;
use rusqlite::{params, CachedStatement, Transaction};

use super::history::{self, VersionKey};
use super::{advance_generation, execute, prune_changes, query_one, server_id, CHANGES_PER_SWAP};
use crate::protocol::{ChangeKind, Kind};
use crate::store::definitions::changed_fields;
use crate::store::{now_ms, EntrySwap, StoreError};

/// Removes an entry's row from the full-text index.
const UNINDEX_ENTRY: &str = "DELETE FROM entries_fts WHERE rowid = ?1";

/// The count behind `oversizedEntries`: the server's trimmed entries of every kind.
pub(super) const OVERSIZED_ENTRIES: &str =
    "(SELECT count(*) FROM resources INDEXED BY resources_oversized
                  WHERE server_id = ?1 AND oversized != 0)
                 + (SELECT count(*) FROM resource_templates WHERE server_id = ?1 AND oversized != 0)
                 + (SELECT count(*) FROM entries WHERE server_id = ?1 AND oversized != 0)";

/// Applies the staged walk `walk_id` of `kind` as the server's snapshot of that kind, in one
/// transaction: the entries, their full-text index, the change feed (with the fields that
/// changed) and the server's row. Returns what changed and the feed's newest seq.
pub(super) fn swap_entries(
    connection: &mut rusqlite::Connection,
    walk_id: u64,
    server: &str,
    kind: Kind,
) -> Result<(EntrySwap, i64), StoreError> {
    let transaction = connection.transaction()?;
    let server_id = server_id(&transaction, server)?
        .ok_or_else(|| StoreError::Walk(format!("server {server} is not in the database")))?;
    let swap = swap_entries_in(&transaction, walk_id, server_id, server, kind)?;
    if swap.touched() > 0 {
        advance_generation(&transaction)?;
    }
    let latest_seq = prune_changes(&transaction)?;
    transaction.commit()?;
    if swap.touched() > 0 {
        tracing::info!(
            server,
            kind = %kind,
            added = swap.added,
            removed = swap.removed,
            changed = swap.changed,
            entries = swap.entries,
            "entries swapped"
        );
    }
    Ok((swap, latest_seq))
}

/// The swap of `swap_entries` inside the caller's transaction (a followed upstream's delta
/// applies each kind it touched so, with its resources and its cursor).
pub(super) fn swap_entries_in(
    transaction: &Transaction<'_>,
    walk_id: u64,
    server_id: i64,
    server: &str,
    kind: Kind,
) -> Result<EntrySwap, StoreError> {
    let run = KindSwap {
        transaction,
        walk: walk_id as i64,
        server_id,
        kind,
        now: now_ms(),
    };
    run.refuse_lost_rows()?;
    let mut swap = EntrySwap {
        entries: query_one::<i64, _>(
            transaction,
            "SELECT count(*) FROM temp.staging_entries WHERE walk_id = ?1",
            [run.walk],
        )? as u64,
        ..EntrySwap::default()
    };
    let mut feed = EntryFeed {
        statement: transaction.prepare_cached(
            "INSERT INTO changes (at, server, kind, entry_kind, name, fields)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?,
        server,
        kind,
        now: run.now,
        recorded: 0,
    };
    run.apply_listed(&mut feed, &mut swap)?;
    run.apply_removed(&mut feed, &mut swap)?;
    let recorded = feed.recorded;
    drop(feed);
    run.finish(server, &swap, recorded)?;
    Ok(swap)
}

/// One swap of a (server, kind) snapshot of tools or prompts, inside its caller's transaction.
struct KindSwap<'a> {
    transaction: &'a Transaction<'a>,
    walk: i64,
    server_id: i64,
    kind: Kind,
    /// The swap's time: its feed rows', versions' and snapshot's.
    now: i64,
}

/// The feed rows of one swap: the first `CHANGES_PER_SWAP` changes, each its row; the rest are
/// counted in one `truncated` row (`KindSwap::finish`).
struct EntryFeed<'a> {
    statement: CachedStatement<'a>,
    server: &'a str,
    kind: Kind,
    now: i64,
    recorded: u64,
}

impl EntryFeed<'_> {
    fn record(
        &mut self,
        change: ChangeKind,
        name: &str,
        fields: Option<String>,
    ) -> Result<(), StoreError> {
        if self.recorded >= CHANGES_PER_SWAP {
            return Ok(());
        }
        self.recorded += 1;
        self.statement.execute(params![
            self.now,
            self.server,
            change,
            self.kind,
            name,
            fields
        ])?;
        Ok(())
    }
}

impl KindSwap<'_> {
    /// A light row stands for "as in the snapshot": one whose entry is gone means another swap
    /// came in between, and this walk is refused rather than applied to the wrong snapshot.
    fn refuse_lost_rows(&self) -> Result<(), StoreError> {
        let lost: i64 = query_one(
            self.transaction,
            "SELECT count(*) FROM temp.staging_entries s
             WHERE s.walk_id = ?1 AND s.raw IS NULL AND NOT EXISTS
                 (SELECT 1 FROM entries e WHERE e.server_id = ?2 AND e.kind = ?3 AND e.name = s.name)",
            params![self.walk, self.server_id, self.kind],
        )?;
        if lost > 0 {
            return Err(StoreError::Walk(format!(
                "the {} snapshot changed while the walk was staged; walk again",
                self.kind
            )));
        }
        Ok(())
    }

    /// The two columns of every row of `sql`, a query of the walk (`?1`), the server (`?2`) and
    /// the kind (`?3`).
    fn pairs<A: FromSql, B: FromSql>(&self, sql: &str) -> Result<Vec<(A, B)>, StoreError> {
        let mut statement = self.transaction.prepare_cached(sql)?;
        let rows = statement.query_map(params![self.walk, self.server_id, self.kind], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The staged rows in full: added or changed entries. Only their ids are held here, and
    /// each is read, compared and written on its own.
    fn apply_listed(
        &self,
        feed: &mut EntryFeed<'_>,
        swap: &mut EntrySwap,
    ) -> Result<(), StoreError> {
        let staged: Vec<(i64, Option<i64>)> = self.pairs(
            "SELECT s.rowid, e.id FROM temp.staging_entries s
             LEFT JOIN entries e ON e.server_id = ?2 AND e.kind = ?3 AND e.name = s.name
             WHERE s.walk_id = ?1 AND s.raw IS NOT NULL ORDER BY s.rowid",
        )?;
        let mut unindex = self.transaction.prepare_cached(UNINDEX_ENTRY)?;
        let mut index = self.transaction.prepare_cached(
            "INSERT INTO entries_fts (rowid, name, title, description, inputs)
             SELECT id, name, title, description, ?2 FROM entries WHERE id = ?1",
        )?;
        let mut read_staged = self.transaction.prepare_cached(
            "SELECT name, inputs, raw FROM temp.staging_entries WHERE rowid = ?1",
        )?;
        let mut insert = self.transaction.prepare_cached(
            "INSERT INTO entries (server_id, kind, name, title, description, raw, hash, oversized)
             SELECT ?2, ?3, name, title, description, raw, hash, oversized
             FROM temp.staging_entries WHERE rowid = ?1",
        )?;
        let mut read_stored = self
            .transaction
            .prepare_cached("SELECT raw FROM entries WHERE id = ?1")?;
        let mut update = self.transaction.prepare_cached(
            "UPDATE entries AS e SET title = s.title, description = s.description, raw = s.raw,
                 hash = s.hash, oversized = s.oversized
             FROM temp.staging_entries s WHERE s.rowid = ?1 AND e.id = ?2",
        )?;
        for (staged_row, stored_id) in staged {
            let (name, inputs, raw) = read_staged.query_row([staged_row], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, Option<String>>(1)?,
                    row.get::<_, String>(2)?,
                ))
            })?;
            let version = VersionKey::new(self.server_id, self.kind, &name);
            match stored_id {
                None => {
                    insert.execute(params![staged_row, self.server_id, self.kind])?;
                    index.execute(params![self.transaction.last_insert_rowid(), inputs])?;
                    swap.added += 1;
                    history::record_version(self.transaction, version, &raw, self.now)?;
                    feed.record(ChangeKind::Added, &name, None)?;
                }
                Some(id) => {
                    let before: String = read_stored.query_row([id], |row| row.get(0))?;
                    update.execute(params![staged_row, id])?;
                    unindex.execute([id])?;
                    index.execute(params![id, inputs])?;
                    swap.changed += 1;
                    history::seed_version(self.transaction, version, &before, self.now)?;
                    history::record_version(self.transaction, version, &raw, self.now)?;
                    let fields = serde_json::to_string(&changed_fields(&before, &raw))
                        .unwrap_or_else(|_| "[]".into());
                    feed.record(ChangeKind::Changed, &name, Some(fields))?;
                }
            }
        }
        Ok(())
    }

    /// The snapshot's entries the walk did not list: removed.
    fn apply_removed(
        &self,
        feed: &mut EntryFeed<'_>,
        swap: &mut EntrySwap,
    ) -> Result<(), StoreError> {
        let removed: Vec<(String, i64)> = self.pairs(
            "SELECT e.name, e.id FROM entries e
             WHERE e.server_id = ?2 AND e.kind = ?3 AND NOT EXISTS
                 (SELECT 1 FROM temp.staging_entries s WHERE s.walk_id = ?1 AND s.name = e.name)
             ORDER BY e.name",
        )?;
        let mut unindex = self.transaction.prepare_cached(UNINDEX_ENTRY)?;
        let mut delete = self
            .transaction
            .prepare_cached("DELETE FROM entries WHERE id = ?1")?;
        for (name, id) in removed {
            let version = VersionKey::new(self.server_id, self.kind, &name);
            delete.execute([id])?;
            unindex.execute([id])?;
            swap.removed += 1;
            history::close_version(self.transaction, version, self.now)?;
            feed.record(ChangeKind::Removed, &name, None)?;
        }
        Ok(())
    }

    /// After the entries: the rehashed rows take the listed hash, the feed's `truncated` row,
    /// a batch of history pruning, the kind's snapshot time and the server's row.
    fn finish(&self, server: &str, swap: &EntrySwap, recorded: u64) -> Result<(), StoreError> {
        // Entries found the same in another form keep their text and take the listed hash, so the
        // next walk finds them unchanged by hash alone.
        execute(
            self.transaction,
            "UPDATE entries AS e SET hash = s.hash FROM temp.staging_entries s
             WHERE s.walk_id = ?1 AND s.rehash != 0
               AND e.server_id = ?2 AND e.kind = ?3 AND e.name = s.name",
            params![self.walk, self.server_id, self.kind],
        )?;
        if swap.touched() > recorded {
            self.transaction.execute(
                "INSERT INTO changes (at, server, kind, entry_kind, uri, count)
                 VALUES (?1, ?2, ?3, ?4, NULL, ?5)",
                params![
                    self.now,
                    server,
                    ChangeKind::Truncated,
                    self.kind,
                    (swap.touched() - recorded) as i64
                ],
            )?;
        }
        history::prune_batch(self.transaction, self.now, swap.added + swap.changed)?;
        self.transaction.execute(
            "INSERT INTO entry_snapshots (server_id, kind, snapshot_at, count) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (server_id, kind) DO UPDATE SET snapshot_at = excluded.snapshot_at, count = excluded.count",
            params![self.server_id, self.kind, self.now, swap.entries as i64],
        )?;
        // The walk of this kind completed. The server turns `synced` when the whole walk is in
        // (`ServerUpdate::Synced`), not here: its other kinds may still be on their way.
        self.transaction.execute(
            &format!(
                "UPDATE servers SET stale = 0, last_error = NULL, last_error_at = NULL,
                     snapshot_at = ?2, oversized_entries = {OVERSIZED_ENTRIES}
                 WHERE id = ?1"
            ),
            params![self.server_id, self.now],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::protocol::Kind;
    use crate::store::entry::fit_entry;
    use crate::store::EntryRow;

    fn tool(text: &str) -> EntryRow {
        let fitted = fit_entry(text, Kind::Tool, 1 << 20).expect("a tool");
        EntryRow {
            name: fitted.object["name"].as_str().expect("name").to_string(),
            title: None,
            description: fitted
                .object
                .get("description")
                .and_then(|text| text.as_str())
                .map(str::to_string),
            inputs: String::new(),
            raw: fitted.raw,
            hash: fitted.hash,
            oversized: fitted.oversized,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_staged_walk_of_tools_is_swapped_by_hash_and_another_key_order_is_no_change() {
        let directory = tempfile::tempdir().expect("tempdir");
        let store =
            super::super::tests::support::open_store(&directory.path().join("c.db"), &["fx"]).await;
        let a = r#"{"name":"a","description":"one","inputSchema":{"type":"object"}}"#;
        let b = r#"{"name":"b","description":"two","inputSchema":{"type":"object"}}"#;
        let swap = |rows: Vec<EntryRow>| store.swap_entries("fx", Kind::Tool, rows);
        let first = swap(vec![tool(a), tool(b)]).await.expect("first");
        assert_eq!((first.added, first.entries), (2, 2));
        // Pages of one walk: `a` unchanged, `b` changed, `c` added.
        let walk = store.begin_walk("fx");
        walk.add_entries(Kind::Tool, vec![tool(a)])
            .await
            .expect("page");
        let b2 = r#"{"name":"b","description":"three","inputSchema":{"type":"object"}}"#;
        let c = json!({"name": "c", "inputSchema": {"type": "object"}}).to_string();
        walk.add_entries(Kind::Tool, vec![tool(b2), tool(&c)])
            .await
            .expect("page");
        let second = walk.commit_entries(Kind::Tool).await.expect("second");
        assert_eq!(
            (second.added, second.changed, second.removed, second.entries),
            (1, 1, 0, 3)
        );
        // The same tool in another key order: the same entry, not a change, and after it
        // the listed form's hash is the stored one.
        let reordered = r#"{"inputSchema":{"type":"object"},"description":"one","name":"a"}"#;
        for _ in 0..2 {
            let again = swap(vec![tool(reordered), tool(b2), tool(&c)])
                .await
                .expect("again");
            assert_eq!(again.touched(), 0);
        }
        let (listed, _) = store
            .read(|reader| reader.list_entries(Kind::Tool, None, None, 10))
            .await
            .expect("list");
        assert_eq!(listed[0].raw, a, "the stored text is kept");
        let last = swap(vec![tool(&c)]).await.expect("last");
        assert_eq!((last.removed, last.entries), (2, 1));
        store.close().await;
    }
}
