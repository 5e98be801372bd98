//! The queries behind templated reads and the CLI's counts: which template's server answers a
//! URI, one server's own snapshot with the winner of each entry, and the merged catalog's size.

use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;
use crate::store::uri_template::{MatchBudget, UriTemplate, MAX_TEMPLATE_BYTES_CEILING};

/// The server a read of a templated URI goes to: the first of the templates it matches,
/// by server priority (lowest first), then server name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateTarget {
    pub server: String,
    pub uri_template: String,
    /// The server's content cache size in bytes; `None` when its cache is off.
    pub read_cache_bytes: Option<u64>,
}

/// One entry of one server's own snapshot, and the server that wins its URI when it is
/// another one.
#[derive(Debug, Clone)]
pub struct SnapshotRow {
    pub uri: String,
    pub raw: String,
    pub won_by: Option<String>,
}

/// The first template matching `uri`, by server priority then name. Only templates whose
/// literal prefix `uri` starts with are read (SQLite checks that), none longer than
/// `MAX_TEMPLATE_BYTES_CEILING`; each server's templates share one `MatchBudget`, so a server
/// listing costly templates spends only its own budget and the next server's are still tried.
pub fn template_target(
    connection: &Connection,
    uri: &str,
) -> Result<Option<TemplateTarget>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT s.name, t.uri_template, s.read_cache_bytes
         FROM resource_templates t JOIN servers s ON s.id = t.server_id
         WHERE length(CAST(t.uri_template AS BLOB)) <= ?2
           AND substr(?1, 1, instr(t.uri_template || '{', '{') - 1)
               = substr(t.uri_template, 1, instr(t.uri_template || '{', '{') - 1)
         ORDER BY s.priority, s.name, t.uri_template",
    )?;
    let mut rows = statement.query(params![uri, MAX_TEMPLATE_BYTES_CEILING as i64])?;
    let mut budget_of: Option<(String, MatchBudget)> = None;
    while let Some(row) = rows.next()? {
        let server: String = row.get(0)?;
        let budget = match &mut budget_of {
            Some((owner, budget)) if *owner == server => budget,
            _ => &mut budget_of.insert((server, MatchBudget::default())).1,
        };
        if budget.is_spent() {
            continue;
        }
        let uri_template: String = row.get(1)?;
        // Parsing is paid for too. A template that does not parse is the server's mistake; it
        // routes nothing.
        if !budget.pay(uri_template.len()) {
            continue;
        }
        let Ok(template) = UriTemplate::parse(&uri_template) else {
            continue;
        };
        if template.matches_within(uri, budget) {
            return Ok(Some(TemplateTarget {
                server: row.get(0)?,
                uri_template,
                read_cache_bytes: row
                    .get::<_, Option<i64>>(2)?
                    .map(|bytes| bytes.max(0) as u64),
            }));
        }
    }
    Ok(None)
}

/// Whether a server of that name is configured (recorded in the database).
pub fn server_exists(connection: &Connection, server: &str) -> Result<bool, StoreError> {
    let mut statement = connection.prepare_cached("SELECT 1 FROM servers WHERE name = ?1")?;
    Ok(statement
        .query_row([server], |_| Ok(()))
        .optional()?
        .is_some())
}

/// A page of `server`'s own snapshot after `after_uri`, keyed by URI; each entry names the
/// server that wins its URI when that is not `server`.
pub fn server_snapshot(
    connection: &Connection,
    server: &str,
    after_uri: Option<&str>,
    limit: usize,
) -> Result<(Vec<SnapshotRow>, bool), StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT r.uri, r.raw,
                (SELECT s2.name FROM resources r2 JOIN servers s2 ON s2.id = r2.server_id
                 WHERE r2.uri = r.uri AND r2.server_id != r.server_id
                   AND (s2.priority < s.priority OR (s2.priority = s.priority AND s2.name < s.name))
                 ORDER BY s2.priority, s2.name LIMIT 1)
         FROM resources r JOIN servers s ON s.id = r.server_id
         WHERE s.name = ?1 AND r.uri > ?2
         ORDER BY r.uri LIMIT ?3",
    )?;
    let rows = statement.query_map(
        params![server, after_uri.unwrap_or(""), (limit + 1) as i64],
        |row| {
            Ok(SnapshotRow {
                uri: row.get(0)?,
                raw: row.get(1)?,
                won_by: row.get(2)?,
            })
        },
    )?;
    let mut page: Vec<SnapshotRow> = rows.collect::<Result<_, _>>()?;
    let more = page.len() > limit;
    page.truncate(limit);
    Ok((page, more))
}

/// The URIs of the merged catalog: each counted once, however many servers list it. While a
/// first load is pending its rows are left out, which costs a look at each row's server.
pub fn merged_resource_count(connection: &Connection) -> Result<u64, StoreError> {
    let count: i64 = connection.query_row(
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM pending_loads)
             THEN (SELECT COUNT(DISTINCT uri) FROM resources
                   WHERE server_id IN (SELECT id FROM servers))
             ELSE (SELECT COUNT(DISTINCT uri) FROM resources) END",
        [],
        |row| row.get(0),
    )?;
    Ok(count.max(0) as u64)
}

/// Every configured server's name, in name order.
pub fn server_names(connection: &Connection) -> Result<Vec<String>, StoreError> {
    let mut statement = connection.prepare_cached("SELECT name FROM servers ORDER BY name")?;
    let names = statement
        .query_map([], |row| row.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(names)
}

/// The server that wins each of `keys` (URIs of resources, or URI templates) among the servers
/// `sees` lets in: the lowest priority, then the lowest name, as the merged catalog chooses
/// among every server. A key none of them lists is left out. Tools and prompts are one
/// server's each and have no winner to choose: none.
pub fn winners_among(
    connection: &Connection,
    kind: crate::protocol::Kind,
    keys: &[&str],
    sees: &dyn Fn(&str) -> bool,
) -> Result<std::collections::HashMap<String, String>, StoreError> {
    use crate::protocol::Kind;
    let sql = match kind {
        Kind::Resource => {
            "SELECT s.name FROM resources r CROSS JOIN servers s ON s.id = r.server_id
             WHERE r.uri = ?1 ORDER BY s.priority, s.name"
        }
        Kind::Template => {
            "SELECT s.name FROM resource_templates t CROSS JOIN servers s
             ON s.id = t.server_id WHERE t.uri_template = ?1 ORDER BY s.priority, s.name"
        }
        Kind::Tool | Kind::Prompt => return Ok(Default::default()),
    };
    let mut listings = connection.prepare_cached(sql)?;
    let mut winners = std::collections::HashMap::new();
    for key in keys {
        // A key has a listing per server listing it: a few rows at most.
        let mut rows = listings.query([key])?;
        while let Some(row) = rows.next()? {
            let server: String = row.get(0)?;
            if sees(&server) {
                winners.insert(key.to_string(), server);
                break;
            }
        }
    }
    Ok(winners)
}
