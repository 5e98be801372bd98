//! Reading definition history (`catalog/history`, `catalog/diff`): an entry's kept versions, newest first, and one version's body.

use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;
use crate::protocol::Kind;

/// One kept version of an entry as stored; `body` only when asked for.
#[derive(Debug, Clone)]
pub struct VersionRow {
    pub version: i64,
    pub digest: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: Option<i64>,
    pub bytes: u64,
    pub body: Option<String>,
}

const VERSION_COLUMNS: &str = "v.id, v.digest, v.first_seen, v.last_seen, b.bytes";

fn version_row(row: &rusqlite::Row<'_>, with_body: bool) -> rusqlite::Result<VersionRow> {
    Ok(VersionRow {
        version: row.get(0)?,
        digest: row.get(1)?,
        first_seen_ms: row.get(2)?,
        last_seen_ms: row.get(3)?,
        bytes: row.get::<_, i64>(4)?.max(0) as u64,
        body: if with_body { Some(row.get(5)?) } else { None },
    })
}

/// Up to `limit` versions of (server, kind, key) older than `before` (every one when `None`),
/// newest first; `true` when more follow.
pub(super) fn versions(
    connection: &Connection,
    kind: Kind,
    server: &str,
    key: &str,
    before: Option<i64>,
    limit: usize,
    with_bodies: bool,
) -> Result<(Vec<VersionRow>, bool), StoreError> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {VERSION_COLUMNS}, b.body FROM history_versions v
         JOIN servers s ON s.id = v.server_id
         JOIN history_bodies b ON b.id = v.body_id
         WHERE s.name = ?1 AND v.kind = ?2 AND v.key = ?3 AND v.id < ?4
         ORDER BY v.id DESC LIMIT ?5"
    ))?;
    let rows = statement.query_map(
        params![
            server,
            kind,
            key,
            before.unwrap_or(i64::MAX),
            limit as i64 + 1
        ],
        |row| version_row(row, with_bodies),
    )?;
    let mut rows = rows.collect::<Result<Vec<_>, _>>()?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    Ok((rows, more))
}

/// One version with its body: `version` itself, or with `None` the newest.
pub(super) fn version(
    connection: &Connection,
    kind: Kind,
    server: &str,
    key: &str,
    version: Option<i64>,
) -> Result<Option<VersionRow>, StoreError> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {VERSION_COLUMNS}, b.body FROM history_versions v
         JOIN servers s ON s.id = v.server_id
         JOIN history_bodies b ON b.id = v.body_id
         WHERE s.name = ?1 AND v.kind = ?2 AND v.key = ?3 AND v.id <= ?4
         ORDER BY v.id DESC LIMIT 1"
    ))?;
    let found = statement
        .query_row(
            params![server, kind, key, version.unwrap_or(i64::MAX)],
            |row| version_row(row, true),
        )
        .optional()?;
    // An exact number asked for must be that version, not an older one.
    Ok(found.filter(|row| version.map_or(true, |asked| asked == row.version)))
}
