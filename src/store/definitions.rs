//! Tools and prompts (every kind but resources): accepted definitions and drift, and their queries.
//!
//! Their walk is staged and swapped by the writer like a resource walk (`writer/staging.rs`,
//! `writer/entry_swap.rs`): a page at a time, compared by content hash.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::full_text_search::{self, FullTextQuery};
use super::{now_ms, SearchHit, SearchRequest, StoreError};
use crate::protocol::{ChangeKind, Kind};

/// One tool or prompt as the store keeps it; built from the server's JSON by the walk.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryRow {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// What search indexes beside name, title and description: the names and descriptions of
    /// a tool's input properties or a prompt's arguments.
    pub inputs: String,
    pub raw: String,
    /// The content hash of the entry as listed (`entry::fit_entry`): the swap compares these.
    pub hash: i64,
    /// The entry was over `max_entry_bytes` and is stored without some of its fields.
    pub oversized: bool,
}

/// What one (server, kind) swap changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntrySwap {
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
    /// Entries of the kind in the server's snapshot after the swap.
    pub entries: u64,
}

impl EntrySwap {
    pub fn touched(&self) -> u64 {
        self.added + self.removed + self.changed
    }
}

/// One stored tool or prompt with its server.
#[derive(Debug, Clone)]
pub struct EntryListing {
    pub server: String,
    pub kind: Kind,
    pub name: String,
    pub raw: String,
    pub snapshot_at_ms: Option<i64>,
    pub stale: bool,
}

/// Per server and kind: how many entries, and how many differ from the accepted ones.
#[derive(Debug, Clone, Default)]
pub struct KindCounts {
    pub entries: u64,
    pub snapshot_at_ms: Option<i64>,
    /// `None` until the server's definitions were accepted once.
    pub drift: Option<DriftCounts>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriftCounts {
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
}

/// One entry that differs from what was accepted.
#[derive(Debug, Clone)]
pub struct DriftRow {
    pub server: String,
    pub kind: Kind,
    pub name: String,
    pub change: ChangeKind,
    pub accepted: Option<Value>,
    pub current: Option<Value>,
    /// The top-level fields that differ (for `changed`).
    pub fields: Vec<String>,
    /// The kept history's version of the accepted definition (the newest with its body) and
    /// of the current one, when the history holds them.
    pub accepted_version: Option<i64>,
    pub current_version: Option<i64>,
}

/// The kept version whose body is the accepted definition `x.raw` (the newest, after a
/// flip-flop), of the accepted entry `x`: drift is a diff against this version.
const ACCEPTED_VERSION: &str = "(SELECT v.id FROM history_versions v
        JOIN history_bodies b ON b.id = v.body_id
        WHERE v.server_id = x.server_id AND v.kind = x.kind AND v.key = x.name AND b.body = x.raw
        ORDER BY v.id DESC LIMIT 1)";

/// The top-level fields whose values differ between two stored objects, sorted.
pub fn changed_fields(before: &str, after: &str) -> Vec<String> {
    let parse = |text: &str| match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => object,
        _ => serde_json::Map::new(),
    };
    let (before, after) = (parse(before), parse(after));
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|key| before.get(*key) != after.get(*key))
        .cloned()
        .collect()
}

fn server_id(connection: &Connection, server: &str) -> Result<i64, StoreError> {
    connection
        .query_row("SELECT id FROM servers WHERE name = ?1", [server], |row| {
            row.get(0)
        })
        .optional()?
        .ok_or_else(|| StoreError::Walk(format!("server {server} is not in the database")))
}

/// Records the current tools and prompts of one server (or all) as accepted; returns how many.
pub(super) fn accept(connection: &mut Connection, server: Option<&str>) -> Result<u64, StoreError> {
    let transaction = connection.transaction()?;
    let servers: Vec<i64> = match server {
        Some(server) => vec![server_id(&transaction, server)?],
        None => {
            let mut statement = transaction.prepare("SELECT id FROM servers")?;
            let ids = statement.query_map([], |row| row.get(0))?;
            ids.collect::<Result<_, _>>()?
        }
    };
    let now = now_ms();
    let mut accepted = 0;
    for id in servers {
        transaction.execute("DELETE FROM accepted_entries WHERE server_id = ?1", [id])?;
        accepted += transaction.execute(
            "INSERT INTO accepted_entries (server_id, kind, name, raw, accepted_at)
             SELECT server_id, kind, name, raw, ?2 FROM entries WHERE server_id = ?1",
            params![id, now],
        )? as u64;
        transaction.execute(
            "INSERT OR REPLACE INTO accepted_servers (server_id, accepted_at) VALUES (?1, ?2)",
            params![id, now],
        )?;
    }
    transaction.commit()?;
    Ok(accepted)
}

/// The tools or prompts of every server (or one) after `after` (server, name), in order: at
/// most `limit`, and no more once the page holds `MAX_LIST_PAGE_BYTES` of definitions (a page
/// always has one). The flag says whether more follow.
pub fn list_entries(
    connection: &Connection,
    kind: Kind,
    server: Option<&str>,
    after: Option<(&str, &str)>,
    limit: usize,
) -> Result<(Vec<EntryListing>, bool), StoreError> {
    let (after_server, after_name) = after.unwrap_or(("", ""));
    let mut statement = connection.prepare_cached(
        "SELECT s.name, e.name, e.raw, n.snapshot_at, s.stale
         FROM entries e JOIN servers s ON s.id = e.server_id
         LEFT JOIN entry_snapshots n ON n.server_id = e.server_id AND n.kind = e.kind
         WHERE e.kind = ?1 AND (?2 IS NULL OR s.name = ?2)
           AND (s.name > ?3 OR (s.name = ?3 AND e.name > ?4))
         ORDER BY s.name, e.name LIMIT ?5",
    )?;
    let mut rows = statement.query(params![
        kind,
        server,
        after_server,
        after_name,
        (limit + 1) as i64
    ])?;
    let (mut entries, mut page_bytes, mut more) = (Vec::new(), 0, false);
    while let Some(row) = rows.next()? {
        if entries.len() >= limit || page_bytes >= super::queries::MAX_LIST_PAGE_BYTES {
            more = true;
            break;
        }
        let listing = EntryListing {
            server: row.get(0)?,
            kind,
            name: row.get(1)?,
            raw: row.get(2)?,
            snapshot_at_ms: row.get(3)?,
            stale: row.get::<_, i64>(4)? != 0,
        };
        page_bytes += listing.raw.len();
        entries.push(listing);
    }
    Ok((entries, more))
}

/// One tool or prompt of one server.
pub fn entry(
    connection: &Connection,
    kind: Kind,
    server: &str,
    name: &str,
) -> Result<Option<EntryListing>, StoreError> {
    Ok(connection
        .query_row(
            "SELECT s.name, e.name, e.raw, n.snapshot_at, s.stale
             FROM entries e JOIN servers s ON s.id = e.server_id
             LEFT JOIN entry_snapshots n ON n.server_id = e.server_id AND n.kind = e.kind
             WHERE e.kind = ?1 AND s.name = ?2 AND e.name = ?3",
            params![kind, server, name],
            |row| {
                Ok(EntryListing {
                    server: row.get(0)?,
                    kind,
                    name: row.get(1)?,
                    raw: row.get(2)?,
                    snapshot_at_ms: row.get(3)?,
                    stale: row.get::<_, i64>(4)? != 0,
                })
            },
        )
        .optional()?)
}

/// Per server, per kind: the entry count and the drift from the accepted definitions.
pub fn kind_counts(
    connection: &Connection,
) -> Result<BTreeMap<String, BTreeMap<Kind, KindCounts>>, StoreError> {
    let mut counts: BTreeMap<String, BTreeMap<Kind, KindCounts>> = BTreeMap::new();
    let mut statement = connection.prepare_cached(
        "SELECT s.name, n.kind, n.count, n.snapshot_at
         FROM entry_snapshots n JOIN servers s ON s.id = n.server_id",
    )?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, Kind>(1)?,
            row.get::<_, i64>(2)?,
            row.get::<_, i64>(3)?,
        ))
    })?;
    for row in rows {
        let (server, kind, entries, snapshot_at) = row?;
        let slot = counts.entry(server).or_default().entry(kind).or_default();
        slot.entries = entries.max(0) as u64;
        slot.snapshot_at_ms = Some(snapshot_at);
    }
    // Counted in SQL: status never holds the definitions it compares.
    let mut drift = connection.prepare_cached(
        "SELECT s.name, e.kind, 0, count(*) FROM entries e
         JOIN accepted_servers a ON a.server_id = e.server_id JOIN servers s ON s.id = e.server_id
         WHERE NOT EXISTS (SELECT 1 FROM accepted_entries x
                           WHERE x.server_id = e.server_id AND x.kind = e.kind AND x.name = e.name)
         GROUP BY s.name, e.kind
         UNION ALL
         SELECT s.name, x.kind, 1, count(*) FROM accepted_entries x
         JOIN servers s ON s.id = x.server_id
         WHERE NOT EXISTS (SELECT 1 FROM entries e
                           WHERE e.server_id = x.server_id AND e.kind = x.kind AND e.name = x.name)
         GROUP BY s.name, x.kind
         UNION ALL
         SELECT s.name, e.kind, 2, count(*) FROM entries e
         JOIN accepted_entries x ON x.server_id = e.server_id AND x.kind = e.kind AND x.name = e.name
         JOIN servers s ON s.id = e.server_id
         WHERE x.raw != e.raw
         GROUP BY s.name, e.kind",
    )?;
    let rows = drift.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, Kind>(1)?,
            row.get::<_, i64>(2)?,
            row.get::<_, i64>(3)?,
        ))
    })?;
    for row in rows {
        let (server, kind, change, count) = row?;
        let slot = counts.entry(server).or_default().entry(kind).or_default();
        let tally = slot.drift.get_or_insert_with(DriftCounts::default);
        let count = count.max(0) as u64;
        match change {
            0 => tally.added += count,
            1 => tally.removed += count,
            _ => tally.changed += count,
        }
    }
    // An accepted server with no drift shows zeros rather than "never accepted".
    let mut accepted = connection.prepare_cached(
        "SELECT s.name FROM accepted_servers a JOIN servers s ON s.id = a.server_id",
    )?;
    let names = accepted.query_map([], |row| row.get::<_, String>(0))?;
    for name in names {
        let kinds = counts.entry(name?).or_default();
        for kind in Kind::ENTRY_KINDS {
            kinds
                .entry(*kind)
                .or_default()
                .drift
                .get_or_insert_with(DriftCounts::default);
        }
    }
    Ok(counts)
}

/// The tools and prompts that differ from what was accepted, of accepted servers only, in
/// (server, kind, name) order after `after`: at most `limit` rows, and no more once the page
/// holds `MAX_LIST_PAGE_BYTES` of definitions. Read row by row, so memory is one page whatever
/// the servers list; `true` when more follow.
pub fn drift(
    connection: &Connection,
    server: Option<&str>,
    after: Option<(&str, Kind, &str)>,
    limit: usize,
) -> Result<(Vec<DriftRow>, bool), StoreError> {
    let (after_server, after_kind, after_name) = match after {
        Some((server, kind, name)) => (server, Some(kind), name),
        None => ("", None, ""),
    };
    let mut statement = connection.prepare_cached(&format!(
        "SELECT server, kind, name, current, accepted, accepted_version, current_version FROM (
             SELECT s.name AS server, e.kind AS kind, e.name AS name, e.raw AS current,
                    x.raw AS accepted, {ACCEPTED_VERSION} AS accepted_version,
                    (SELECT c.id FROM history_versions c
                     WHERE c.last_seen IS NULL AND c.id = (
                         SELECT max(v.id) FROM history_versions v
                         WHERE v.server_id = e.server_id AND v.kind = e.kind
                           AND v.key = e.name)) AS current_version
             FROM entries e
             JOIN servers s ON s.id = e.server_id
             JOIN accepted_servers a ON a.server_id = e.server_id
             LEFT JOIN accepted_entries x
               ON x.server_id = e.server_id AND x.kind = e.kind AND x.name = e.name
             WHERE x.raw IS NULL OR x.raw != e.raw
             UNION ALL
             SELECT s.name, x.kind, x.name, NULL, x.raw, {ACCEPTED_VERSION}, NULL
             FROM accepted_entries x
             JOIN servers s ON s.id = x.server_id
             WHERE NOT EXISTS (SELECT 1 FROM entries e
                               WHERE e.server_id = x.server_id AND e.kind = x.kind
                                 AND e.name = x.name))
         WHERE (?1 IS NULL OR server = ?1)
           AND (?3 IS NULL OR (server, kind, name) > (?2, ?3, ?4))
         ORDER BY server, kind, name LIMIT ?5"
    ))?;
    let mut found = statement.query(params![
        server,
        after_server,
        after_kind,
        after_name,
        (limit + 1) as i64
    ])?;
    let parse = |text: &Option<String>| {
        text.as_deref()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
    };
    let (mut rows, mut page_bytes, mut more) = (Vec::new(), 0, false);
    while let Some(row) = found.next()? {
        if rows.len() >= limit || page_bytes >= super::queries::MAX_LIST_PAGE_BYTES {
            more = true;
            break;
        }
        let current: Option<String> = row.get(3)?;
        let accepted: Option<String> = row.get(4)?;
        page_bytes +=
            current.as_ref().map_or(0, String::len) + accepted.as_ref().map_or(0, String::len);
        let (change, fields) = match (&accepted, &current) {
            (None, _) => (ChangeKind::Added, Vec::new()),
            (Some(_), None) => (ChangeKind::Removed, Vec::new()),
            (Some(before), Some(after)) => (ChangeKind::Changed, changed_fields(before, after)),
        };
        rows.push(DriftRow {
            server: row.get(0)?,
            kind: row.get(1)?,
            name: row.get(2)?,
            change,
            accepted: parse(&accepted),
            current: parse(&current),
            fields,
            accepted_version: row.get(5)?,
            current_version: row.get(6)?,
        });
    }
    Ok((rows, more))
}

/// Ranked tools and prompts matching `query` (plain words, the last one a prefix; or FTS5
/// syntax with `raw`), through the one FTS5 search of every kind (`full_text_search`): at most
/// `limit` from `offset`, of the kinds asked among tools and prompts. Neither has a MIME type,
/// so a search with a `mime_type` filter finds none.
pub fn search_entries(
    connection: &Connection,
    search: &SearchRequest,
) -> Result<Vec<SearchHit>, StoreError> {
    let wants = |kind: Kind| search.kinds.is_empty() || search.kinds.contains(&kind);
    let (tools, prompts) = (wants(Kind::Tool), wants(Kind::Prompt));
    if !tools && !prompts || search.mime_type.is_some() {
        return Ok(Vec::new());
    }
    let query = FullTextQuery {
        text: &search.query,
        raw: search.raw,
        deadline: search.deadline,
    };
    let hits = full_text_search::search(connection, query, |query, blame| {
        // Tools' and prompts' statement: `entries_fts`, the kinds as data (the `kind` column),
        // ties by server, name and kind. Texts are read cut, like resource hits: the entry
        // itself (`catalog/tool`) is whole.
        let mut statement = connection
            .prepare_cached(
                "SELECT s.name, e.kind, e.name, substr(e.title, 1, ?7), substr(e.description, 1, ?7),
                        f.rank
                 FROM entries_fts f JOIN entries e ON e.id = f.rowid
                 JOIN servers s ON s.id = e.server_id
                 WHERE entries_fts MATCH ?1 AND (?2 IS NULL OR s.name = ?2)
                   AND (?2 IS NOT NULL OR ?8 IS NULL
                        OR s.name IN (SELECT value FROM json_each(?8)))
                   AND ((?3 AND e.kind = 'tool') OR (?4 AND e.kind = 'prompt'))
                 ORDER BY f.rank, s.name, e.name, e.kind LIMIT ?5 OFFSET ?6",
            )
            .map_err(blame)?;
        let rows = statement
            .query_map(
                params![
                    query,
                    search.server,
                    tools,
                    prompts,
                    search.limit as i64,
                    search.offset as i64,
                    super::resource_search::MAX_HIT_TEXT_BYTES as i64,
                    super::resource_search::servers_json(search)
                ],
                |row| {
                    // One hit type for every kind: a tool or prompt has no URI or MIME type.
                    Ok(SearchHit {
                        server: row.get(0)?,
                        kind: row.get(1)?,
                        uri: String::new(),
                        name: row.get(2)?,
                        title: row.get(3)?,
                        mime_type: None,
                        description: row.get(4)?,
                        score: full_text_search::score(row.get(5)?),
                        snippet: None,
                    })
                },
            )
            .map_err(blame)?;
        rows.collect::<Result<_, _>>().map_err(blame)
    })?;
    Ok(hits.unwrap_or_default())
}

/// The change feed after `since`, only entries of `kinds` (`entry_kind`), oldest first, at most
/// `limit`; `truncated` and `latest_seq` describe the whole feed, as for the unfiltered page.
pub fn changes_of_kinds(
    connection: &Connection,
    since: Option<i64>,
    limit: usize,
    kinds: &[Kind],
) -> Result<super::ChangePage, StoreError> {
    let (oldest, latest): (Option<i64>, i64) = connection.query_row(
        "SELECT min(seq), coalesce(max(seq), 0) FROM changes",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let truncated =
        since.is_some_and(|since| oldest.is_some_and(|oldest| oldest > since.saturating_add(1)));
    let kinds =
        serde_json::to_string(kinds).map_err(|error| StoreError::Walk(error.to_string()))?;
    let mut statement = connection.prepare_cached(
        "SELECT seq, at, server, kind, uri, count, entry_kind, name, fields FROM changes
         WHERE seq > ?1 AND entry_kind IN (SELECT value FROM json_each(?2))
         ORDER BY seq LIMIT ?3",
    )?;
    let rows = statement.query_map(
        params![since.unwrap_or(0), kinds, (limit + 1) as i64],
        |row| {
            Ok(super::queries::ChangeEntry {
                seq: row.get(0)?,
                at_ms: row.get(1)?,
                server: row.get(2)?,
                kind: row.get(3)?,
                uri: row.get(4)?,
                count: row.get(5)?,
                entry_kind: row.get(6)?,
                name: row.get(7)?,
                fields: row
                    .get::<_, Option<String>>(8)?
                    .and_then(|fields| serde_json::from_str(&fields).ok()),
            })
        },
    )?;
    let mut changes = rows.collect::<Result<Vec<_>, _>>()?;
    let more = changes.len() > limit;
    changes.truncate(limit);
    Ok(super::ChangePage {
        changes,
        latest_seq: latest,
        truncated,
        more,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_fields_name_every_top_level_difference() {
        let before = r#"{"name":"a","description":"old","inputSchema":{"type":"object"}}"#;
        let after =
            r#"{"name":"a","description":"new","inputSchema":{"type":"object"},"title":"A"}"#;
        assert_eq!(changed_fields(before, after), vec!["description", "title"]);
        assert!(changed_fields(before, before).is_empty());
    }
}
