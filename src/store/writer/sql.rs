//! The writer's statement helpers: `execute` and `query_one` (each counting its statement's
//! full-scan steps for the tests' guard, `full_scans`) and a server's id by name.

use rusqlite::{Connection, OptionalExtension};

use crate::store::StoreError;

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
