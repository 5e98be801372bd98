//! Following another mirror's change feed: this database's id, the entries of given keys as
//! the merged catalog shows them (what an upstream answers a follower), and each followed
//! server's cursor (what a downstream keeps).

use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};

use super::{CatalogRow, Store, StoreError};
use crate::protocol::Kind;

/// Where a downstream stands in an upstream's change feed: the upstream database's id and the
/// newest seq its snapshot reflects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowCursor {
    pub instance: String,
    pub seq: i64,
}

/// The merged entries of some keys, read in one snapshot of the catalog.
#[derive(Debug, Clone)]
pub struct KeyedEntries {
    pub seq: i64,
    /// Keys of the kind in the merged catalog at `seq`.
    pub total: u64,
    pub found: Vec<CatalogRow>,
    pub missing: Vec<String>,
}

/// The merged resource count at a feed seq: counting 100,000 distinct URIs costs about as
/// much as answering a follower, and every follower of one change asks at the same seq.
#[derive(Debug, Default)]
pub(super) struct CountMemo(Mutex<Option<(i64, u64)>>);

/// This database's id (migration 0007 makes it once).
pub(super) fn instance_id(connection: &Connection) -> Result<String, StoreError> {
    Ok(
        connection.query_row("SELECT id FROM mirror_identity LIMIT 1", [], |row| {
            row.get(0)
        })?,
    )
}

/// The winner of each key in the merged catalog (lowest priority, then lowest server name),
/// the keys nobody lists, the feed's newest seq and the merged count, in one read transaction.
pub(super) fn keyed_entries(
    connection: &Connection,
    kind: Kind,
    keys: &[String],
    memo: &CountMemo,
) -> Result<KeyedEntries, StoreError> {
    let transaction = connection.unchecked_transaction()?;
    let seq: i64 =
        transaction.query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |row| {
            row.get(0)
        })?;
    let (winner_sql, count_sql) = match kind {
        Kind::Template => (
            "SELECT s.name, t.raw FROM resource_templates t CROSS JOIN servers s
             ON s.id = t.server_id WHERE t.uri_template = ?1
             ORDER BY s.priority, s.name LIMIT 1",
            "SELECT COUNT(DISTINCT t.uri_template) FROM resource_templates t
             WHERE t.server_id IN (SELECT id FROM servers)",
        ),
        _ => (
            "SELECT s.name, r.raw FROM resources r CROSS JOIN servers s
             ON s.id = r.server_id WHERE r.uri = ?1
             ORDER BY s.priority, s.name LIMIT 1",
            "",
        ),
    };
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    {
        let mut winner = transaction.prepare_cached(winner_sql)?;
        for key in keys {
            let row = winner
                .query_row([key], |row| Ok((row.get::<_, String>(0)?, row.get(1)?)))
                .optional()?;
            match row {
                Some((server, raw)) => found.push(CatalogRow {
                    server,
                    key: key.clone(),
                    raw,
                }),
                None => missing.push(key.clone()),
            }
        }
    }
    let total = match kind {
        Kind::Template => transaction
            .query_row(count_sql, [], |row| row.get::<_, i64>(0))?
            .max(0) as u64,
        _ => {
            let known = *memo
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match known {
                Some((at, count)) if at == seq => count,
                _ => {
                    let count = super::views::merged_resource_count(&transaction)?;
                    *memo
                        .0
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((seq, count));
                    count
                }
            }
        }
    };
    Ok(KeyedEntries {
        seq,
        total,
        found,
        missing,
    })
}

pub(super) fn follow_cursor(
    connection: &Connection,
    server: &str,
) -> Result<Option<FollowCursor>, StoreError> {
    Ok(connection
        .query_row(
            "SELECT follow_instance, follow_seq FROM servers
             WHERE name = ?1 AND follow_instance IS NOT NULL AND follow_seq IS NOT NULL
               AND resource_count > 0",
            params![server],
            |row| {
                Ok(FollowCursor {
                    instance: row.get(0)?,
                    seq: row.get(1)?,
                })
            },
        )
        .optional()?)
}

impl Store {
    /// This database's id, as `catalog/changes` and `catalog/entries` name it.
    pub fn instance(&self) -> &str {
        &self.instance
    }
}
