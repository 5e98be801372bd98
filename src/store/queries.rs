//! Read-only queries: server status, the merged catalog in keyset pages, reads' targets and
//! listings, the content cache, and the change feed (FTS5 search: `resource_search`).

use rusqlite::{params, Connection, OptionalExtension, StatementStatus};
use serde_json::Value;

use super::{CatalogRow, ListingRow, StoreError};
use crate::protocol::{ChangeKind, LastWalk, ServerStatus};

/// A page of a list of any kind (`resources/list`, `catalog/tools`, ...) stops growing once
/// its entries hold this many bytes; the cursor continues after its last entry. Each entry is
/// within `max_entry_bytes`, so a page holds at most this plus one entry.
pub const MAX_LIST_PAGE_BYTES: usize = 4 << 20;

fn parse_json(text: Option<String>) -> Option<Value> {
    text.and_then(|text| serde_json::from_str(&text).ok())
}

/// Every server's row, as `catalog/status` reports it: the wire's own type, its `live` and
/// `kinds` left for the answer to fill (what the sessions know, the tools and prompts counts).
pub fn server_status(connection: &Connection) -> Result<Vec<ServerStatus>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT name, priority, transport, state, protocol_version, server_info, resource_count,
                template_count, stale, snapshot_at, connected_at, retry_at, last_walk_at, last_walk_ms,
                last_walk_pages, last_walk_added, last_walk_removed, last_walk_changed,
                last_walk_duplicates, last_walk_skipped, walks_ok, walks_failed, last_error, last_error_at,
                oversized_entries, deltas_applied, follow_seq
         FROM servers ORDER BY name",
    )?;
    let rows = statement.query_map([], |row| {
        let last_walk_at: Option<i64> = row.get(12)?;
        let last_walk = match last_walk_at {
            Some(at_ms) => Some(LastWalk {
                at_ms,
                duration_ms: row.get::<_, Option<i64>>(13)?.unwrap_or(0),
                pages: row.get::<_, Option<i64>>(14)?.unwrap_or(0) as u64,
                added: row.get::<_, Option<i64>>(15)?.unwrap_or(0) as u64,
                removed: row.get::<_, Option<i64>>(16)?.unwrap_or(0) as u64,
                changed: row.get::<_, Option<i64>>(17)?.unwrap_or(0) as u64,
                duplicates: row.get::<_, Option<i64>>(18)?.unwrap_or(0) as u64,
                skipped: row.get::<_, Option<i64>>(19)?.unwrap_or(0) as u64,
            }),
            None => None,
        };
        Ok(ServerStatus {
            name: row.get(0)?,
            priority: row.get(1)?,
            transport: row.get(2)?,
            state: row.get(3)?,
            protocol_version: row.get(4)?,
            server_info: parse_json(row.get(5)?),
            resources: row.get::<_, i64>(6)? as u64,
            templates: row.get::<_, i64>(7)? as u64,
            stale: row.get::<_, i64>(8)? != 0,
            snapshot_at_ms: row.get(9)?,
            connected_at_ms: row.get(10)?,
            retry_at_ms: row.get(11)?,
            last_walk,
            walks_ok: row.get::<_, i64>(20)? as u64,
            walks_failed: row.get::<_, i64>(21)? as u64,
            last_error: row.get(22)?,
            last_error_at_ms: row.get(23)?,
            oversized_entries: row.get::<_, i64>(24)? as u64,
            deltas_applied: row.get::<_, i64>(25)? as u64,
            follow_seq: row.get(26)?,
            live: None,
            kinds: Default::default(),
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// One page of the merged catalog as a view sees it: for a URI listed by several servers the
/// view sees (`sees`), the lowest priority wins, then the lowest server name; a URI none of
/// them lists is not in it. Keyed by URI, so a swap between pages skips nothing. With the
/// rows, the URI to continue after when more follow (the last read: a page reads `limit`
/// URIs, seen or not, so a narrow view's page costs what any page costs).
pub fn merged_resources(
    connection: &Connection,
    after_uri: Option<&str>,
    limit: usize,
    sees: &dyn Fn(&str) -> bool,
) -> Result<(Vec<CatalogRow>, Option<String>), StoreError> {
    let page = merged_page(connection, MERGED_RESOURCES, after_uri, limit, sees)?;
    tracing::trace!(
        vm_steps = page.vm_steps,
        sorts = page.sorts,
        rows = page.rows.len(),
        "a page of the merged catalog"
    );
    Ok((page.rows, page.more.then_some(page.last_key).flatten()))
}

pub fn merged_templates(
    connection: &Connection,
    after: Option<&str>,
    limit: usize,
    sees: &dyn Fn(&str) -> bool,
) -> Result<(Vec<CatalogRow>, Option<String>), StoreError> {
    let page = merged_page(connection, MERGED_TEMPLATES, after, limit, sees)?;
    Ok((page.rows, page.more.then_some(page.last_key).flatten()))
}

/// Every listing after the cursor in key order, with its server's rank: one walk of the
/// `resources_by_uri` index from the cursor, each row's server looked up by id. The winner of
/// a key listed by several servers is picked in `merged_page`, from its listings side by
/// side: a correlated subquery per row (the plan before) cost 5 µs a row even when one
/// server lists the URI, as it almost always is. `CROSS JOIN` keeps the resources outermost,
/// so the index delivers the order and no page sorts. A plain range (the first page starts
/// after "", which sorts before every URI) lets the index start at the cursor.
pub(super) const MERGED_RESOURCES: &str = "SELECT s.priority, s.name, r.uri, r.raw
     FROM resources r CROSS JOIN servers s ON s.id = r.server_id
     WHERE r.uri > ?1 ORDER BY r.uri";

const MERGED_TEMPLATES: &str = "SELECT s.priority, s.name, t.uri_template, t.raw
     FROM resource_templates t CROSS JOIN servers s ON s.id = t.server_id
     WHERE t.uri_template > ?1 ORDER BY t.uri_template";

/// A page of a merged catalog and what reading it cost SQLite (for the plan's tests).
pub(crate) struct MergedPage {
    pub rows: Vec<CatalogRow>,
    pub more: bool,
    /// The last key read (its winner in `rows`, or none the view sees).
    pub last_key: Option<String>,
    /// Virtual machine steps of the page's statement.
    pub vm_steps: i32,
    /// Sorts the statement did (a plan that cannot walk an index in key order sorts).
    pub sorts: i32,
}

/// Reads listings in key order after `after` until `limit` keys (or `MAX_LIST_PAGE_BYTES` of
/// them) are complete and the next key shows that more follow; each key's listings are
/// adjacent, and of those of servers the view sees (`sees`) the one of the lowest
/// (priority, server name) wins, compared as SQLite compares them (bytes). The view is part
/// of the merge: a listing it does not see never wins, so a key listed by a seen and an
/// unseen server shows the seen one's.
pub(crate) fn merged_page(
    connection: &Connection,
    sql: &str,
    after: Option<&str>,
    limit: usize,
    sees: &dyn Fn(&str) -> bool,
) -> Result<MergedPage, StoreError> {
    let mut statement = connection.prepare_cached(sql)?;
    for counter in [StatementStatus::VmStep, StatementStatus::Sort] {
        statement.reset_status(counter);
    }
    let mut page: Vec<CatalogRow> = Vec::with_capacity(limit.min(crate::protocol::PAGE_SIZE));
    let (mut more, mut page_bytes, mut keys_read) = (false, 0, 0);
    let mut last_key: Option<String> = None;
    {
        let mut rows = statement.query([after.unwrap_or("")])?;
        // The key being read (one buffer for the page: a key is copied into it, not allocated),
        // and its winner so far among the seen listings with its priority.
        let mut reading = String::new();
        let mut reading_any = false;
        let mut winner: Option<(i64, CatalogRow)> = None;
        while let Some(row) = rows.next()? {
            let key = text(row, 2)?;
            if !reading_any || reading != key {
                // A new key: the one before is complete.
                if reading_any {
                    keys_read += 1;
                    if let Some((_, won)) = winner.take() {
                        page_bytes += won.raw.len();
                        page.push(won);
                    }
                }
                if keys_read >= limit || page_bytes >= MAX_LIST_PAGE_BYTES {
                    more = true;
                    break;
                }
                reading.clear();
                reading.push_str(key);
                reading_any = true;
            }
            let server = text(row, 1)?;
            if !sees(server) {
                continue;
            }
            let priority: i64 = row.get(0)?;
            match &mut winner {
                Some((best, won)) => {
                    if (priority, server) < (*best, won.server.as_str()) {
                        *best = priority;
                        won.server.clear();
                        won.server.push_str(server);
                        won.raw.clear();
                        won.raw.push_str(text(row, 3)?);
                    }
                }
                None => {
                    winner = Some((
                        priority,
                        CatalogRow {
                            server: server.to_owned(),
                            key: key.to_owned(),
                            raw: text(row, 3)?.to_owned(),
                        },
                    ))
                }
            }
        }
        // The last key read is complete: the page stopped at the next one, or the keys ran out.
        if reading_any {
            if let Some((_, won)) = winner.take() {
                page.push(won);
            }
            last_key = Some(reading);
        }
    }
    Ok(MergedPage {
        rows: page,
        more,
        last_key,
        vm_steps: statement.get_status(StatementStatus::VmStep),
        sorts: statement.get_status(StatementStatus::Sort),
    })
}

/// Column `index` as text borrowed from the row (no copy until the caller keeps it).
fn text<'row>(row: &'row rusqlite::Row<'_>, index: usize) -> rusqlite::Result<&'row str> {
    row.get_ref(index)?.as_str().map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            Box::new(error),
        )
    })
}

/// Where `resources/read` of `uri` goes: the server that wins it in the merged catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadTarget {
    pub server: String,
    /// The server's content cache size in bytes; `None` when its cache is off.
    pub read_cache_bytes: Option<u64>,
}

pub fn read_target(connection: &Connection, uri: &str) -> Result<Option<ReadTarget>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT s.name, s.read_cache_bytes FROM resources r JOIN servers s ON s.id = r.server_id
         WHERE r.uri = ?1 ORDER BY s.priority, s.name LIMIT 1",
    )?;
    Ok(statement
        .query_row([uri], |row| {
            Ok(ReadTarget {
                server: row.get(0)?,
                read_cache_bytes: row
                    .get::<_, Option<i64>>(1)?
                    .map(|bytes| bytes.max(0) as u64),
            })
        })
        .optional()?)
}

/// Every server that lists `uri`, the winner first (lowest priority, then lowest name);
/// empty when no server lists it.
pub fn listings(connection: &Connection, uri: &str) -> Result<Vec<ListingRow>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT s.name, s.priority, r.raw, s.stale, s.snapshot_at
         FROM resources r JOIN servers s ON s.id = r.server_id
         WHERE r.uri = ?1 ORDER BY s.priority, s.name",
    )?;
    let rows = statement.query_map([uri], |row| {
        Ok(ListingRow {
            server: row.get(0)?,
            priority: row.get(1)?,
            raw: row.get(2)?,
            stale: row.get::<_, i64>(3)? != 0,
            snapshot_at_ms: row.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// The cached `resources/read` result of `uri` from `server` and when it was stored.
pub fn cached_contents(
    connection: &Connection,
    server: &str,
    uri: &str,
) -> Result<Option<(String, i64)>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT c.contents, c.stored_at FROM read_cache c JOIN servers s ON s.id = c.server_id
         WHERE s.name = ?1 AND c.uri = ?2",
    )?;
    Ok(statement
        .query_row([server, uri], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })
        .optional()?)
}

/// One entry of the change feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeEntry {
    pub seq: i64,
    pub at_ms: i64,
    pub server: String,
    /// For `Truncated`, `uri` is absent and `count` says how many changes of that swap were
    /// not recorded one by one.
    pub kind: ChangeKind,
    pub uri: Option<String>,
    pub count: i64,
    /// What kind of entry changed; a tool's or prompt's `name` stands where a resource's `uri` does.
    pub entry_kind: crate::protocol::Kind,
    pub name: Option<String>,
    /// For a changed tool or prompt: the top-level fields that changed.
    pub fields: Option<Vec<String>>,
}

/// A page of the change feed.
#[derive(Debug, Clone)]
pub struct ChangePage {
    pub changes: Vec<ChangeEntry>,
    /// The newest sequence number in the feed.
    pub latest_seq: i64,
    /// True when entries after `since` were pruned from the bounded history.
    pub truncated: bool,
    /// True when more entries follow this page.
    pub more: bool,
}

/// The catalog's generation (`catalog_generation`, moved by every commit a list answer shows).
pub fn catalog_generation(connection: &Connection) -> Result<u64, StoreError> {
    // Read with every page of a list (and again to check a page read ahead): prepared once.
    let generation: i64 = connection
        .prepare_cached("SELECT generation FROM catalog_generation")?
        .query_row([], |row| row.get(0))?;
    Ok(generation.max(0) as u64)
}

pub fn latest_change_seq(connection: &Connection) -> Result<i64, StoreError> {
    Ok(
        connection.query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |row| {
            row.get(0)
        })?,
    )
}

/// Entries after `since` (all kept entries when `None`), oldest first, at most `limit`.
pub fn changes_since(
    connection: &Connection,
    since: Option<i64>,
    limit: usize,
) -> Result<ChangePage, StoreError> {
    let (oldest, latest): (Option<i64>, i64) = connection.query_row(
        "SELECT min(seq), coalesce(max(seq), 0) FROM changes",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let after = since.unwrap_or(0);
    let truncated =
        since.is_some_and(|since| oldest.is_some_and(|oldest| oldest > since.saturating_add(1)));
    let mut statement = connection.prepare_cached(
        "SELECT seq, at, server, kind, uri, count, entry_kind, name, fields FROM changes
         WHERE seq > ?1 ORDER BY seq LIMIT ?2",
    )?;
    let rows = statement.query_map(params![after, (limit + 1) as i64], |row| {
        Ok(ChangeEntry {
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
    })?;
    let mut changes = rows.collect::<Result<Vec<_>, _>>()?;
    let more = changes.len() > limit;
    changes.truncate(limit);
    Ok(ChangePage {
        changes,
        latest_seq: latest,
        truncated,
        more,
    })
}

/// The bytes the content caches hold, over all servers.
pub fn read_cache_bytes(connection: &Connection) -> Result<u64, StoreError> {
    let bytes: i64 = connection.query_row(
        "SELECT coalesce(sum(bytes), 0) FROM read_cache",
        [],
        |row| row.get(0),
    )?;
    Ok(bytes.max(0) as u64)
}

/// Tests of the merged catalog's pages: the winners are the merged view's, the cursor pages
/// through everything, and a page costs SQLite a bounded number of steps wherever it starts.
#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::{merged_page, MERGED_RESOURCES};

    const LISTINGS: usize = 3000;
    const LIMIT: usize = 100;

    /// Servers `a` and `b` at priority 100 and `c` at 50: `a` lists every URI, `b` every 10th (it
    /// loses them to `a`, the lower name), `c` every 100th (it wins them, the lower priority) and
    /// some of its own, between the others.
    fn catalog() -> Connection {
        let mut connection = Connection::open_in_memory().expect("open");
        crate::store::schema::migrate(std::path::Path::new(":memory:"), &mut connection)
            .expect("migrate");
        connection
            .execute_batch(&format!(
                "INSERT INTO servers (id, name, priority) VALUES (1, 'b', 100), (2, 'a', 100), (3, 'c', 50);
                 WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last})
                 INSERT INTO resources (server_id, uri, name, raw)
                 SELECT 2, printf('file:///%05d', i), 'a', '{{\"from\":\"a\"}}' FROM n
                 UNION ALL SELECT 1, printf('file:///%05d', i), 'b', '{{\"from\":\"b\"}}' FROM n WHERE i % 10 = 0
                 UNION ALL SELECT 3, printf('file:///%05d', i), 'c', '{{\"from\":\"c\"}}' FROM n WHERE i % 100 = 0
                 UNION ALL SELECT 3, printf('file:///%05d-own', i), 'c', '{{\"from\":\"c\"}}' FROM n WHERE i % 7 = 0;
                 ANALYZE;",
                last = LISTINGS - 1
            ))
            .expect("fill");
        connection
    }

    /// The merged view as the rules state it, one correlated subquery per listing (slow, plain).
    fn expected(connection: &Connection) -> Vec<(String, String)> {
        let mut statement = connection
            .prepare(
                "SELECT r.uri, s.name FROM resources r JOIN servers s ON s.id = r.server_id
                 WHERE NOT EXISTS (
                     SELECT 1 FROM resources r2 JOIN servers s2 ON s2.id = r2.server_id
                     WHERE r2.uri = r.uri AND r2.server_id != r.server_id
                       AND (s2.priority < s.priority OR (s2.priority = s.priority AND s2.name < s.name)))
                 ORDER BY r.uri",
            )
            .expect("prepare");
        let rows = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("query");
        rows.collect::<Result<_, _>>().expect("rows")
    }

    #[test]
    fn pages_show_each_uri_once_from_its_winner() {
        let connection = catalog();
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = merged_page(
                &connection,
                MERGED_RESOURCES,
                after.as_deref(),
                LIMIT,
                &|_| true,
            )
            .expect("page");
            for row in &page.rows {
                assert_eq!(row.raw, format!("{{\"from\":\"{}\"}}", row.server));
                seen.push((row.key.clone(), row.server.clone()));
            }
            if !page.more {
                break;
            }
            assert_eq!(page.rows.len(), LIMIT);
            after = page.rows.last().map(|row| row.key.clone());
        }
        let expected = expected(&connection);
        assert!(
            expected.len() > LISTINGS,
            "the catalog has c's own URIs too"
        );
        assert_eq!(seen, expected);
        // A page that ends exactly at the last URI says nothing more follows.
        let all = merged_page(&connection, MERGED_RESOURCES, None, expected.len(), &|_| {
            true
        })
        .expect("page");
        assert_eq!((all.rows.len(), all.more), (expected.len(), false));
        let short = merged_page(
            &connection,
            MERGED_RESOURCES,
            None,
            expected.len() - 1,
            &|_| true,
        )
        .expect("page");
        assert_eq!((short.rows.len(), short.more), (expected.len() - 1, true));
    }

    /// The plan: the URI index walked from the cursor, no sort, a bounded number of virtual
    /// machine steps per listing read (about 8 today; a correlated subquery per row adds more), the same near the end of the catalog as at its start. A
    /// plan that sorts, scans from the start, or runs a subquery per row fails this.
    #[test]
    fn a_page_costs_the_same_bounded_steps_wherever_it_starts() {
        let connection = catalog();
        let starts = ["", "file:///01500", "file:///02800"];
        let mut steps = Vec::new();
        for start in starts {
            let page = merged_page(&connection, MERGED_RESOURCES, Some(start), LIMIT, &|_| true)
                .expect("page");
            assert_eq!(page.rows.len(), LIMIT);
            assert_eq!(page.sorts, 0, "a page must not sort");
            // Listings read: the page's, the URIs listed twice or three times, and the next URI.
            let read = LIMIT + 30;
            assert!(
                page.vm_steps as usize <= 12 * read,
                "{} steps for a page after {start:?}",
                page.vm_steps
            );
            steps.push(page.vm_steps);
        }
        let (least, most) = (
            steps.iter().min().copied().unwrap_or(0),
            steps.iter().max().copied().unwrap_or(0),
        );
        assert!(
            most as f64 <= least as f64 * 1.5,
            "a page's cost must not grow with its position: {steps:?}"
        );
    }
}
