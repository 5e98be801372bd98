//! Staging a walk's pages: the temp tables, what a walk staged, and discarding them.

use rusqlite::{params, CachedStatement, Connection, OptionalExtension};

use super::pending::stage_pending;
use super::server_id;
use super::sql::{insert_resource, RESOURCE_COLUMNS};
use super::staged::StagedCounts;
use crate::protocol::Kind;
use crate::store::entry::same_entry;
use crate::store::{EntryRow, ResourceRow, StoreError, TemplateRow};

/// Staged resources live in a rowid table whose index holds (walk_id, uri, hash): the diff
/// compares hashes inside the two indexes and reads a staged row only to copy it into the
/// snapshot. (A `WITHOUT ROWID` table keyed by (walk_id, uri) made every lookup read the whole
/// row, 120 MB once per snapshot row for one huge entry.) A row the snapshot already holds with
/// the same hash is staged "light": its key and hash only, the rest NULL. While staging, the
/// snapshot rows a walk changed (`staging_changed`), the URIs it added (`staging_added`) and
/// the rows whose text differs only in form (`staging_rehash`: another key order, a hash from
/// an older version) are noted, so a walk that saw every snapshot row needs no pass over the
/// snapshot to swap.
pub(super) const STAGING_SCHEMA: &str = "
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
CREATE TEMP TABLE IF NOT EXISTS staging_changed (
    walk_id INTEGER NOT NULL, id INTEGER NOT NULL, uri TEXT NOT NULL
);
CREATE TEMP TABLE IF NOT EXISTS staging_added (walk_id INTEGER NOT NULL, uri TEXT NOT NULL);
CREATE TEMP TABLE IF NOT EXISTS staging_rehash (
    walk_id INTEGER NOT NULL, id INTEGER NOT NULL, hash INTEGER NOT NULL
);
CREATE TEMP TABLE IF NOT EXISTS staging_entries (
    walk_id INTEGER NOT NULL, name TEXT NOT NULL, hash INTEGER NOT NULL, oversized INTEGER NOT NULL,
    rehash INTEGER NOT NULL, title TEXT, description TEXT, inputs TEXT, raw TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS temp.staging_entries_key ON staging_entries (walk_id, name);
CREATE TEMP TABLE IF NOT EXISTS swap_ids (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, uri TEXT);
CREATE TEMP TABLE IF NOT EXISTS swap_added (uri TEXT NOT NULL);
CREATE TEMP TABLE IF NOT EXISTS history_pending (
    seq INTEGER PRIMARY KEY, resource_id INTEGER NOT NULL, key TEXT NOT NULL,
    digest TEXT NOT NULL, kept INTEGER, newest INTEGER, body_id INTEGER
);
";

/// Stages one page of tools or prompts (`kind`) as `stage_resources` stages resources: a row
/// whose name the snapshot holds with the same hash, or with a text that holds the same JSON,
/// is staged light (name and hash only; `rehash` when the stored hash is to become the listed
/// one), so a re-walk that changes nothing writes almost nothing and holds no entry in memory
/// past its page. The swap (`entry_swap.rs`) diffs the staged names against the snapshot.
pub(super) fn stage_entries(
    connection: &mut Connection,
    walk_id: u64,
    server: &str,
    kind: Kind,
    rows: &[EntryRow],
) -> Result<(), StoreError> {
    let snapshot = server_id(connection, server)?;
    // A savepoint: the page is one step of the writer's open batch (`wal.rs`).
    let transaction = connection.savepoint()?;
    {
        let mut stored_row = transaction.prepare_cached(
            "SELECT id, hash FROM entries WHERE server_id = ?1 AND kind = ?2 AND name = ?3",
        )?;
        let mut stored_text =
            transaction.prepare_cached("SELECT raw, oversized FROM entries WHERE id = ?1")?;
        let mut insert = transaction.prepare_cached(
            "INSERT OR IGNORE INTO temp.staging_entries
                 (walk_id, name, hash, oversized, rehash, title, description, inputs, raw)
             VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, ?8)",
        )?;
        let mut insert_light = transaction.prepare_cached(
            "INSERT OR IGNORE INTO temp.staging_entries (walk_id, name, hash, oversized, rehash)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for row in rows {
            let stored = match snapshot {
                Some(server_id) => stored_row
                    .query_row(params![server_id, kind, row.name], |found| {
                        Ok((found.get::<_, i64>(0)?, found.get::<_, i64>(1)?))
                    })
                    .optional()?,
                None => None,
            };
            let unchanged =
                stored_unchanged(&mut stored_text, stored, &row.raw, row.hash, row.oversized)?
                    .map(|(_, rehash)| rehash);
            match unchanged {
                Some(rehash) => insert_light.execute(params![
                    walk_id as i64,
                    row.name,
                    row.hash,
                    row.oversized,
                    rehash
                ])?,
                None => insert.execute(params![
                    walk_id as i64,
                    row.name,
                    row.hash,
                    row.oversized,
                    row.title,
                    row.description,
                    row.inputs,
                    row.raw
                ])?,
            };
        }
    }
    transaction.commit()?;
    Ok(())
}

/// Stages one page. A row whose URI the snapshot already holds with the same hash, or with a
/// text that holds the same JSON (`entry::same_entry`), is staged light, its key and the
/// stored hash only: a re-walk that changes nothing writes almost nothing. Changed rows and
/// added URIs are noted for the swap (`STAGING_SCHEMA`).
pub(super) fn stage_resources(
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
    // A savepoint: the page is one step of the writer's open batch (`wal.rs`).
    let transaction = connection.savepoint()?;
    {
        let mut stored_row = transaction
            .prepare_cached("SELECT id, hash FROM resources WHERE server_id = ?1 AND uri = ?2")?;
        let mut stored_text =
            transaction.prepare_cached("SELECT raw, oversized FROM resources WHERE id = ?1")?;
        // The walk never sends a URI twice; the index refuses an exact repeat all the same.
        let mut insert = transaction.prepare_cached(&format!(
            "INSERT OR IGNORE INTO temp.staging_resources (walk_id, {RESOURCE_COLUMNS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        ))?;
        let mut insert_light = transaction.prepare_cached(
            "INSERT OR IGNORE INTO temp.staging_resources (walk_id, uri, hash, oversized)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        let mut note_changed = transaction.prepare_cached(
            "INSERT INTO temp.staging_changed (walk_id, id, uri) VALUES (?1, ?2, ?3)",
        )?;
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
            let unchanged =
                stored_unchanged(&mut stored_text, stored, &row.raw, row.hash, row.oversized)?
                    .map(|(hash, rehash)| (hash, rehash.then_some(row.hash)));
            let inserted = match unchanged {
                Some((hash, _)) => {
                    insert_light.execute(params![walk, row.uri, hash, row.oversized])?
                }
                None => insert_resource(&mut insert, walk, row)?,
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
                    note_changed.execute(params![walk, id, row.uri])?;
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

/// Whether a listed row is unchanged against the snapshot's row `stored` (its id and hash):
/// the stored hash, and whether that hash is to become the listed one (the text holds the same
/// JSON in another form); `None` when the row is new or changed.
fn stored_unchanged(
    stored_text: &mut CachedStatement<'_>,
    stored: Option<(i64, i64)>,
    listed_raw: &str,
    listed_hash: i64,
    listed_oversized: bool,
) -> Result<Option<(i64, bool)>, StoreError> {
    match stored {
        Some((_, hash)) if hash == listed_hash => Ok(Some((hash, false))),
        Some((id, hash)) => {
            let (text, oversized) = stored_text.query_row([id], |found| {
                Ok((found.get::<_, String>(0)?, found.get::<_, bool>(1)?))
            })?;
            // A trimmed entry is compared by hash only: its text lacks what changed.
            let same = (hash == 0 && text == listed_raw)
                || (!oversized && !listed_oversized && same_entry(&text, listed_raw));
            Ok(same.then_some((hash, true)))
        }
        None => Ok(None),
    }
}

pub(super) fn stage_templates(
    connection: &mut Connection,
    walk_id: u64,
    rows: &[TemplateRow],
) -> Result<(), StoreError> {
    // A savepoint: the page is one step of the writer's open batch (`wal.rs`).
    let transaction = connection.savepoint()?;
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

pub(super) fn discard_staging(connection: &Connection, walk_id: u64) {
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
        "staging_entries",
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
