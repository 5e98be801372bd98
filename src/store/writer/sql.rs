//! The writer's statement helpers: `execute` and `query_one` (each counting its statement's
//! full-scan steps for the tests' guard, `full_scans`), a server's id by name, and a resource
//! row's one insert.

use rusqlite::{params, CachedStatement, Connection, OptionalExtension};

use crate::store::{ResourceRow, StoreError};

/// Runs one statement of a swap or of a server record. In the crate's tests it also counts
/// the statement's full-scan steps (`full_scans`), so a test can show that a small swap beside
/// a large snapshot never walks a whole table.
pub(super) fn execute<P: rusqlite::Params>(
    connection: &Connection,
    sql: &str,
    params: P,
) -> Result<usize, StoreError> {
    let mut statement = connection.prepare(sql)?;
    let changed = statement.execute(params)?;
    full_scans::note(&statement);
    Ok(changed)
}

/// The one value a one-row query returns, counted like `execute`.
pub(super) fn query_one<T: rusqlite::types::FromSql, P: rusqlite::Params>(
    connection: &Connection,
    sql: &str,
    params: P,
) -> Result<T, StoreError> {
    let mut statement = connection.prepare(sql)?;
    let value = statement.query_row(params, |row| row.get(0))?;
    full_scans::note(&statement);
    Ok(value)
}

/// The id of `server`'s row; `None` when it has none (yet).
pub(super) fn server_id(connection: &Connection, server: &str) -> Result<Option<i64>, StoreError> {
    Ok(connection
        .query_row("SELECT id FROM servers WHERE name = ?1", [server], |row| {
            row.get(0)
        })
        .optional()?)
}

/// The columns of a whole resource row after its owner (a server's id or a walk's), in the
/// order `insert_resource` binds them: the snapshot's `resources` and the walk's
/// `staging_resources` are written through the one binding.
pub(super) const RESOURCE_COLUMNS: &str =
    "uri, name, title, description, mime_type, size, annotations, icons, meta, raw, hash, oversized";

/// Inserts one whole resource row through `statement`, an `INSERT` of the owner's column and
/// then `RESOURCE_COLUMNS`; the number of rows inserted (0 when an `OR IGNORE` refused it).
pub(super) fn insert_resource(
    statement: &mut CachedStatement<'_>,
    owner: i64,
    row: &ResourceRow,
) -> rusqlite::Result<usize> {
    statement.execute(params![
        owner,
        row.uri,
        row.name,
        row.title,
        row.description,
        row.mime_type,
        row.size,
        row.annotations,
        row.icons,
        row.meta,
        row.raw,
        row.hash,
        row.oversized
    ])
}

/// Full-scan steps of the writer's statements on this thread, for the tests' guard.
#[cfg(test)]
pub(super) mod full_scans {
    use std::cell::Cell;

    thread_local! {
        static STEPS: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn note(statement: &rusqlite::Statement<'_>) {
        let steps = statement.reset_status(rusqlite::StatementStatus::FullscanStep);
        STEPS.with(|counted| counted.set(counted.get() + steps.max(0) as u64));
    }

    /// The steps counted since the last call.
    pub fn take() -> u64 {
        STEPS.with(|counted| counted.replace(0))
    }
}

#[cfg(not(test))]
pub(super) mod full_scans {
    pub(super) fn note(_statement: &rusqlite::Statement<'_>) {}
}
