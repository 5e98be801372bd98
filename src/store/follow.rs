//! Following another mirror's change feed: this database's id, the entries of given keys as
//! the merged catalog shows them (what an upstream answers a follower), and each followed
//! server's cursor (what a downstream keeps).

use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};

use super::{CatalogRow, StoreError};
use crate::protocol::{Kind, ServerState};

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
    /// Servers that have not committed a first load of any kind yet (a server that declares
    /// nothing to mirror has nothing to load).
    pub loading: Vec<String>,
}

/// The merged resource count at a feed seq: counting 100,000 distinct URIs costs more than the
/// rest of answering a follower, and every follower of one change asks at the same seq (at
/// about the same time: the lock is held while one of them counts).
#[derive(Debug, Default)]
pub(super) struct CountMemo(Mutex<Option<(i64, u64)>>);

impl CountMemo {
    /// The merged resource count at feed seq `seq`, counted once per seq.
    pub(super) fn merged_resources(
        &self,
        transaction: &Connection,
        seq: i64,
    ) -> Result<u64, StoreError> {
        // Held while counting: the followers of one change ask at once, and all but the
        // first wait for its count instead of each counting the catalog again.
        let mut known = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match *known {
            Some((at, count)) if at == seq => Ok(count),
            _ => {
                let count = super::views::merged_resource_count(transaction)?;
                *known = Some((seq, count));
                Ok(count)
            }
        }
    }
}

/// This database's id (migration 0007 makes it once).
pub(super) fn instance_id(connection: &Connection) -> Result<String, StoreError> {
    Ok(
        connection.query_row("SELECT id FROM mirror_identity LIMIT 1", [], |row| {
            row.get(0)
        })?,
    )
}

/// The winner of each key in the merged catalog among the servers `sees` lets in (lowest
/// priority, then lowest server name; a tool or prompt is keyed `<server>/<name>`, so one
/// server's), the keys none of them lists, the feed's newest seq and the merged count, in one
/// read transaction.
pub(super) fn keyed_entries(
    connection: &Connection,
    kind: Kind,
    keys: &[String],
    memo: &CountMemo,
    sees: &dyn Fn(&str) -> bool,
) -> Result<KeyedEntries, StoreError> {
    let transaction = connection.unchecked_transaction()?;
    let seq: i64 =
        transaction.query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |row| {
            row.get(0)
        })?;
    let (found, missing) = winners_of_keys(&transaction, kind, keys, sees)?;
    let total = match kind {
        Kind::Tool | Kind::Prompt => transaction.query_row(
            "SELECT count(*) FROM entries WHERE kind = ?1
             AND server_id IN (SELECT id FROM servers)",
            [kind],
            |row| row.get::<_, i64>(0),
        )?,
        Kind::Template => transaction.query_row(
            "SELECT COUNT(DISTINCT t.uri_template) FROM resource_templates t
             WHERE t.server_id IN (SELECT id FROM servers)",
            [],
            |row| row.get::<_, i64>(0),
        )?,
        Kind::Resource => {
            i64::try_from(memo.merged_resources(&transaction, seq)?).unwrap_or(i64::MAX)
        }
    }
    .max(0) as u64;
    let loading = loading_servers(&transaction)?;
    Ok(KeyedEntries {
        seq,
        total,
        found,
        missing,
        loading,
    })
}

/// The keys' winners alone (`keyed_entries` without the seq, the merged count and the loading
/// servers), in one read transaction: what the NATS publisher puts. The merged count of
/// 100,000 resources reads every URI (about 9 ms of the upstream's CPU per change in a profile
/// of the fleet bench, 2026-12-05), and the publisher never used it.
pub(super) fn keyed_winners(
    connection: &Connection,
    kind: Kind,
    keys: &[String],
    sees: &dyn Fn(&str) -> bool,
) -> Result<(Vec<CatalogRow>, Vec<String>), StoreError> {
    let transaction = connection.unchecked_transaction()?;
    winners_of_keys(&transaction, kind, keys, sees)
}

/// Each key's winner among the servers `sees` lets in, and the keys none of them lists.
fn winners_of_keys(
    transaction: &Connection,
    kind: Kind,
    keys: &[String],
    sees: &dyn Fn(&str) -> bool,
) -> Result<(Vec<CatalogRow>, Vec<String>), StoreError> {
    Ok(match kind {
        Kind::Tool | Kind::Prompt => {
            // A tool's or prompt's key is `<server>/<name>`: server names hold no '/'.
            let mut entry = transaction.prepare_cached(
                "SELECT e.raw FROM entries e CROSS JOIN servers s ON s.id = e.server_id
                 WHERE s.name = ?1 AND e.kind = ?2 AND e.name = ?3",
            )?;
            keyed_rows(keys, |key| match key.split_once('/') {
                Some((server, name)) if sees(server) => Ok(entry
                    .query_row(params![server, kind, name], |row| row.get::<_, String>(0))
                    .optional()?
                    .map(|raw| (server.to_string(), raw))),
                _ => Ok(None),
            })?
        }
        Kind::Template => winners(transaction, TEMPLATE_LISTINGS, keys, sees)?,
        Kind::Resource => winners(transaction, RESOURCE_LISTINGS, keys, sees)?,
    })
}

/// The servers with no committed snapshot of any kind: their first load is still to come.
pub(super) fn loading_servers(transaction: &Connection) -> Result<Vec<String>, StoreError> {
    let mut statement = transaction.prepare_cached(
        "SELECT s.name FROM servers s
         WHERE s.snapshot_at IS NULL AND s.state != ?1
           AND NOT EXISTS (SELECT 1 FROM entry_snapshots n WHERE n.server_id = s.id)
         ORDER BY s.name",
    )?;
    let names = statement
        .query_map([ServerState::NoResources], |row| row.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(names)
}

/// Every listing of a template's URI template, the winner first.
const TEMPLATE_LISTINGS: &str =
    "SELECT s.name, t.raw FROM resource_templates t CROSS JOIN servers s
     ON s.id = t.server_id WHERE t.uri_template = ?1
     ORDER BY s.priority, s.name";

/// Every listing of a resource's URI, the winner first.
const RESOURCE_LISTINGS: &str = "SELECT s.name, r.raw FROM resources r CROSS JOIN servers s
     ON s.id = r.server_id WHERE r.uri = ?1
     ORDER BY s.priority, s.name";

/// The winner of each key: the first listing by `listings_sql` (every listing of the key,
/// the winner first) of a server `sees` lets in, as its server and text. A key has a listing
/// per server listing it, so this reads a few rows at most.
fn winners(
    transaction: &Connection,
    listings_sql: &str,
    keys: &[String],
    sees: &dyn Fn(&str) -> bool,
) -> Result<(Vec<CatalogRow>, Vec<String>), StoreError> {
    let mut listings = transaction.prepare_cached(listings_sql)?;
    keyed_rows(keys, |key| {
        let mut rows = listings.query([key])?;
        while let Some(row) = rows.next()? {
            let server: String = row.get(0)?;
            if sees(&server) {
                return Ok(Some((server, row.get::<_, String>(1)?)));
            }
        }
        Ok(None)
    })
}

/// Each key's row as `lookup` finds it (its server and text), or the key among the missing.
fn keyed_rows(
    keys: &[String],
    mut lookup: impl FnMut(&str) -> Result<Option<(String, String)>, StoreError>,
) -> Result<(Vec<CatalogRow>, Vec<String>), StoreError> {
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for key in keys {
        match lookup(key)? {
            Some((server, raw)) => found.push(CatalogRow {
                server,
                key: key.clone(),
                raw,
            }),
            None => missing.push(key.clone()),
        }
    }
    Ok((found, missing))
}

pub(super) fn follow_cursor(
    connection: &Connection,
    server: &str,
) -> Result<Option<FollowCursor>, StoreError> {
    Ok(connection
        .query_row(
            "SELECT follow_instance, follow_seq FROM servers
             WHERE name = ?1 AND follow_instance IS NOT NULL AND follow_seq IS NOT NULL",
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

pub(super) fn holds_entries(connection: &Connection, server: &str) -> Result<bool, StoreError> {
    Ok(connection
        .query_row(
            "SELECT s.resource_count > 0 OR s.template_count > 0
                 OR EXISTS (SELECT 1 FROM entries e WHERE e.server_id = s.id)
             FROM servers s WHERE s.name = ?1",
            params![server],
            |row| row.get(0),
        )
        .optional()?
        .unwrap_or(false))
}

/// Every key of `server`'s own snapshot, with its kind: resources by URI, templates by URI
/// template, tools and prompts by their stored name (a followed mirror's `<server>/<name>`).
/// A bucket follower keeps them to name the entry a delete marker removes.
pub(super) fn server_keys(
    connection: &Connection,
    server: &str,
) -> Result<Vec<(Kind, String)>, StoreError> {
    let mut keys = Vec::new();
    let statements = [
        (
            "SELECT r.uri, NULL FROM resources r JOIN servers s ON s.id = r.server_id
             WHERE s.name = ?1",
            Some(Kind::Resource),
        ),
        (
            "SELECT t.uri_template, NULL FROM resource_templates t
             JOIN servers s ON s.id = t.server_id WHERE s.name = ?1",
            Some(Kind::Template),
        ),
        (
            "SELECT e.name, e.kind FROM entries e JOIN servers s ON s.id = e.server_id
             WHERE s.name = ?1",
            None,
        ),
    ];
    for (sql, kind) in statements {
        let mut statement = connection.prepare_cached(sql)?;
        let mut rows = statement.query([server])?;
        while let Some(row) = rows.next()? {
            let entry_kind = match kind {
                Some(kind) => kind,
                None => row.get::<_, Kind>(1)?,
            };
            keys.push((entry_kind, row.get::<_, String>(0)?));
        }
    }
    Ok(keys)
}
