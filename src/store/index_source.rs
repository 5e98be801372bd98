//! What the derived search index reads from the store: snapshots of the generation, the priorities, the change feed and the entries.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use super::{schema, StoreError};
use crate::search::Entry;

/// The kind every stored resource has in the search index.
const RESOURCE_KIND: &str = "resource";

/// A read-only connection of the search index's own, so a rebuild that streams every entry
/// never holds one of the query connections.
pub struct IndexSource {
    connection: Connection,
}

/// What one server's listings did since some generation, as the change feed tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedDiff {
    /// These URIs were added, changed or removed: look each up again.
    Uris(Vec<String>),
    /// The feed left some changes out (a swap with more of them than it records one by one):
    /// every listing of the server is to be read again.
    Everything,
}

/// One read transaction: everything read through it is from one committed state.
pub struct SourceSnapshot<'a> {
    transaction: rusqlite::Transaction<'a>,
}

impl IndexSource {
    pub fn open(path: &Path) -> Result<IndexSource, StoreError> {
        Ok(IndexSource {
            connection: schema::open_reader(path)?,
        })
    }

    /// Starts a read transaction and pins its snapshot with a first read.
    pub fn snapshot(&mut self) -> Result<SourceSnapshot<'_>, StoreError> {
        let transaction = self.connection.transaction()?;
        transaction.query_row("SELECT count(*) FROM servers", [], |_| Ok(()))?;
        Ok(SourceSnapshot { transaction })
    }
}

impl SourceSnapshot<'_> {
    /// The store generation: the change feed's newest sequence number, which every swap that
    /// changed something and every dropped server moves on.
    pub fn generation(&self) -> Result<u64, StoreError> {
        let seq: i64 =
            self.transaction
                .query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |row| {
                    row.get(0)
                })?;
        Ok(seq.max(0) as u64)
    }

    pub fn priorities(&self) -> Result<BTreeMap<String, i64>, StoreError> {
        let mut statement = self
            .transaction
            .prepare_cached("SELECT name, priority FROM servers")?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn entry_count(&self) -> Result<u64, StoreError> {
        let count: i64 =
            self.transaction
                .query_row("SELECT count(*) FROM resources", [], |row| row.get(0))?;
        Ok(count.max(0) as u64)
    }

    /// Hands `use_them` every stored entry ordered by URI (then server), or only those of
    /// `server`, as an iterator that streams them from the database.
    pub fn with_entries<R>(
        &self,
        server: Option<&str>,
        use_them: impl FnOnce(&mut dyn Iterator<Item = Entry>) -> R,
    ) -> Result<R, StoreError> {
        let mut statement = match server {
            None => self.transaction.prepare(
                "SELECT s.name, r.uri, r.name, r.title, r.description, r.mime_type
                 FROM resources r JOIN servers s ON s.id = r.server_id ORDER BY r.uri, s.name",
            )?,
            Some(_) => self.transaction.prepare(
                "SELECT s.name, r.uri, r.name, r.title, r.description, r.mime_type
                 FROM resources r JOIN servers s ON s.id = r.server_id WHERE s.name = ?1",
            )?,
        };
        let rows = match server {
            None => statement.query_map([], entry)?,
            Some(server) => statement.query_map([server], entry)?,
        };
        // The first error ends the stream; it is returned once the consumer is done.
        let mut failure = None;
        let mut entries = rows.map_while(|row| match row {
            Ok(entry) => Some(entry),
            Err(error) => {
                failure = Some(error);
                None
            }
        });
        let outcome = use_them(&mut entries);
        drop(entries);
        match failure {
            Some(error) => Err(error.into()),
            None => Ok(outcome),
        }
    }

    /// The entry `server` lists under `uri`, if it still does.
    pub fn entry(&self, server: &str, uri: &str) -> Result<Option<Entry>, StoreError> {
        let mut statement = self.transaction.prepare_cached(
            "SELECT s.name, r.uri, r.name, r.title, r.description, r.mime_type
             FROM resources r JOIN servers s ON s.id = r.server_id WHERE s.name = ?1 AND r.uri = ?2",
        )?;
        Ok(statement
            .query_row(params![server, uri], entry)
            .optional()?)
    }

    /// Per server, what changed after generation `after`; `None` when the feed no longer
    /// reaches back that far (its oldest entries were pruned).
    pub fn changes_after(
        &self,
        after: u64,
    ) -> Result<Option<BTreeMap<String, FeedDiff>>, StoreError> {
        let after = after.min(i64::MAX as u64) as i64;
        let oldest: Option<i64> =
            self.transaction
                .query_row("SELECT min(seq) FROM changes", [], |row| row.get(0))?;
        if oldest.is_some_and(|oldest| oldest > after + 1) {
            return Ok(None);
        }
        let mut statement = self
            .transaction
            .prepare("SELECT server, kind, uri FROM changes WHERE seq > ?1 AND entry_kind = 'resource' ORDER BY seq")?;
        let mut rows = statement.query([after])?;
        let mut diffs: BTreeMap<String, FeedDiff> = BTreeMap::new();
        while let Some(row) = rows.next()? {
            let server: String = row.get(0)?;
            let kind: String = row.get(1)?;
            let uri: Option<String> = row.get(2)?;
            let diff = diffs
                .entry(server)
                .or_insert_with(|| FeedDiff::Uris(Vec::new()));
            match (kind.as_str(), uri, &mut *diff) {
                (_, _, FeedDiff::Everything) => {}
                ("truncated", _, _) | (_, None, _) => *diff = FeedDiff::Everything,
                (_, Some(uri), FeedDiff::Uris(uris)) => uris.push(uri),
            }
        }
        for diff in diffs.values_mut() {
            if let FeedDiff::Uris(uris) = diff {
                uris.sort();
                uris.dedup();
            }
        }
        Ok(Some(diffs))
    }
}

/// The sequence number of the newest resource row in the change feed (0 when none).
pub fn resource_generation(connection: &Connection) -> Result<u64, StoreError> {
    let seq: Option<i64> = connection
        .prepare_cached(
            "SELECT seq FROM changes WHERE entry_kind = 'resource' ORDER BY seq DESC LIMIT 1",
        )?
        .query_row([], |row| row.get(0))
        .optional()?;
    Ok(seq.unwrap_or(0).max(0) as u64)
}

fn entry(row: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    Ok(Entry {
        server: row.get(0)?,
        uri: row.get(1)?,
        name: row.get(2)?,
        title: row.get(3)?,
        description: row.get(4)?,
        mime_type: row.get(5)?,
        kind: RESOURCE_KIND.to_string(),
    })
}
