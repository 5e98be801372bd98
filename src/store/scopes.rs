//! The stored `cacheScope` of each (server, kind) snapshot (written around each swap, read by
//! the HTTP face's view of the catalog).

use rusqlite::{params, Connection};

use super::StoreError;
use crate::protocol::{CacheScope, Kind};

/// How a walk's scopes are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeUpdate {
    /// Before a swap: the more private of the stored and the new scope, so that neither the old
    /// snapshot nor the new one is ever served under a scope wider than its own.
    Tighten,
    /// After the swap committed: the new snapshot's scope.
    Set,
}

pub(super) fn record_scopes(
    connection: &mut Connection,
    server: &str,
    scopes: &[(Kind, CacheScope)],
    update: ScopeUpdate,
) -> Result<(), StoreError> {
    let transaction = connection.transaction()?;
    {
        let mut write = transaction.prepare_cached(match update {
            // A scope that stays as stored is not written again: a followed change whose
            // scope did not move costs these statements no page of the log.
            ScopeUpdate::Tighten => {
                "INSERT INTO scopes (server, kind, scope) VALUES (?1, ?2, ?3)
                 ON CONFLICT (server, kind) DO UPDATE SET scope = 'private'
                 WHERE scope != 'private' AND excluded.scope = 'private'"
            }
            ScopeUpdate::Set => {
                "INSERT INTO scopes (server, kind, scope) VALUES (?1, ?2, ?3)
                 ON CONFLICT (server, kind) DO UPDATE SET scope = excluded.scope
                 WHERE scope != excluded.scope"
            }
        })?;
        let mut written = 0;
        for (kind, scope) in scopes {
            written += write.execute(params![server, kind, scope])?;
        }
        // A scope decides what a token client's lists hold, as an entry does.
        if written > 0 {
            super::writer::advance_generation(&transaction)?;
        }
    }
    transaction.commit()?;
    Ok(())
}

/// Forgets the scopes of a server whose row is dropped.
pub(super) fn forget_scopes(connection: &Connection, server: &str) -> Result<(), StoreError> {
    connection.execute("DELETE FROM scopes WHERE server = ?1", [server])?;
    Ok(())
}

/// Every recorded (server, kind, scope).
pub(super) fn scopes(
    connection: &Connection,
) -> Result<Vec<(String, Kind, CacheScope)>, StoreError> {
    let mut statement = connection.prepare_cached("SELECT server, kind, scope FROM scopes")?;
    let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database() -> Connection {
        let mut connection = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(std::path::Path::new(":memory:"), &mut connection).unwrap();
        connection
    }

    #[test]
    fn tighten_keeps_the_more_private_scope_and_set_replaces_it() {
        let mut connection = database();
        let public = [(Kind::Tool, CacheScope::Public)];
        let private = [(Kind::Tool, CacheScope::Private)];
        record_scopes(&mut connection, "docs", &private, ScopeUpdate::Set).unwrap();
        record_scopes(&mut connection, "docs", &public, ScopeUpdate::Tighten).unwrap();
        assert_eq!(
            scopes(&connection).unwrap(),
            [("docs".to_string(), Kind::Tool, CacheScope::Private)]
        );
        record_scopes(&mut connection, "docs", &public, ScopeUpdate::Set).unwrap();
        assert_eq!(
            scopes(&connection).unwrap(),
            [("docs".to_string(), Kind::Tool, CacheScope::Public)]
        );
        record_scopes(&mut connection, "docs", &private, ScopeUpdate::Tighten).unwrap();
        assert_eq!(scopes(&connection).unwrap()[0].2, CacheScope::Private);
        forget_scopes(&connection, "docs").unwrap();
        assert!(scopes(&connection).unwrap().is_empty());
    }
}
