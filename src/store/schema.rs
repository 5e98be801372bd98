//! Opening connections: per-connection pragmas, and migrations tracked by `PRAGMA user_version`.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::StoreError;

/// Every migration, in order; migration N brings the schema to `user_version` N.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_initial.sql"),
    include_str!("../../migrations/0002_changes.sql"),
    include_str!("../../migrations/0003_hashes.sql"),
    include_str!("../../migrations/0004_entries.sql"),
    include_str!("../../migrations/0005_full_text_backlog.sql"),
    include_str!("../../migrations/0006_pending_loads.sql"),
    include_str!("../../migrations/0007_follow.sql"),
    include_str!("../../migrations/0008_scopes.sql"),
    include_str!("../../migrations/0009_entry_hashes.sql"),
    include_str!("../../migrations/0010_catalog_generation.sql"),
    include_str!("../../migrations/0011_history.sql"),
    include_str!("../../migrations/0012_history_bodies_by_key.sql"),
    include_str!("../../migrations/0013_retired_snapshots.sql"),
    include_str!("../../migrations/0014_history_index_without_last_seen.sql"),
    include_str!("../../migrations/0015_full_text_merges_when_idle.sql"),
];

pub fn open_writer(path: &Path) -> Result<Connection, StoreError> {
    let open_error = |source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    };
    let mut connection = Connection::open(path).map_err(open_error)?;
    connection
        .busy_timeout(Duration::from_secs(5))
        .map_err(open_error)?;
    connection
        .pragma_update(None, "journal_mode", "WAL")
        .map_err(open_error)?;
    // Every transaction of the writer takes the write lock at its start, so a lock held by the
    // checkpointer's `RESTART` is waited for (the busy timeout): a deferred transaction's upgrade
    // from a read would be refused at once. The swap is deferred on purpose and guarded instead
    // (`WalWatch::restart_gate`).
    connection.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
    connection
        .pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_error)?;
    connection
        .pragma_update(None, "foreign_keys", "ON")
        .map_err(open_error)?;
    // Staging lives in temp tables: a crash leaves nothing behind in the database, and
    // SQLite spills them to an unlinked temp file, so a million-row walk does not sit in RAM.
    connection
        .pragma_update(None, "temp_store", "FILE")
        .map_err(open_error)?;
    migrate(path, &mut connection)?;
    Ok(connection)
}

pub(super) fn migrate(path: &Path, connection: &mut Connection) -> Result<(), StoreError> {
    let known = MIGRATIONS.len() as i64;
    let found: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > known {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            known,
        });
    }
    if found == known {
        return Ok(());
    }
    let transaction = connection.transaction()?;
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        transaction.execute_batch(migration)?;
        tracing::info!(version = index + 1, "applied database migration");
    }
    transaction.pragma_update(None, "user_version", known)?;
    transaction.commit()?;
    Ok(())
}

pub fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let open_error = |source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let connection = Connection::open_with_flags(path, flags).map_err(open_error)?;
    connection
        .busy_timeout(Duration::from_secs(5))
        .map_err(open_error)?;
    let version: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > MIGRATIONS.len() as i64 {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found: version,
            known: MIGRATIONS.len() as i64,
        });
    }
    Ok(connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer's transaction that reads before it writes, begun while another connection
    /// (the checkpointer's `RESTART`) holds the write lock, waits for the lock: a deferred one
    /// would have its upgrade refused at once with "database is locked".
    #[test]
    fn a_writer_transaction_waits_for_a_write_lock_held_elsewhere() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        let mut writer = open_writer(&path).expect("writer");
        let other = Connection::open(&path).expect("other");
        other.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            other.execute_batch("COMMIT").expect("unlock");
        });
        let transaction = writer.transaction().expect("begin");
        let servers: i64 = transaction
            .query_row("SELECT count(*) FROM servers", [], |row| row.get(0))
            .expect("read");
        transaction
            .execute(
                "INSERT INTO servers (name) VALUES (?1)",
                [format!("s{servers}")],
            )
            .expect("the write waits for the lock");
        transaction.commit().expect("commit");
        release.join().expect("released");
    }

    /// SQLite is built with a page cache per connection (.cargo/config.toml takes
    /// SQLITE_ENABLE_MEMORY_MANAGEMENT out of rusqlite's bundled build). With one pool for all
    /// of the process's connections, the writer's cache lost its pages: after a swap that kept
    /// history, a re-walk that changed nothing read the file about 5 times per staged row
    /// (580,000 reads for 100,000 rows against 25,000 now) and took twice the writer's CPU.
    #[test]
    fn sqlite_keeps_a_page_cache_per_connection() {
        let connection = Connection::open_in_memory().expect("open");
        let options: Vec<String> = connection
            .prepare("PRAGMA compile_options")
            .expect("prepare")
            .query_map([], |row| row.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("options");
        assert!(
            !options
                .iter()
                .any(|option| option == "ENABLE_MEMORY_MANAGEMENT"),
            "SQLite was built with one page cache for every connection \
             (build from the repository root, where .cargo/config.toml sets LIBSQLITE3_FLAGS): {options:?}"
        );
    }

    /// A database at migration 13 with a history migrates to 14 as it was: the bodies' total
    /// kept (now added by the writer, the insert trigger gone; a removal still subtracts),
    /// `history_by_key` without `last_seen`, the versions and their open one unchanged.
    #[test]
    fn a_history_migrates_to_an_index_without_last_seen_and_keeps_its_byte_total() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.db");
        {
            let connection = Connection::open(&path).expect("open");
            for migration in &MIGRATIONS[..13] {
                connection.execute_batch(migration).expect("migration");
            }
            connection
                .execute_batch(
                    "PRAGMA user_version = 13;
                     INSERT INTO servers (id, name) VALUES (1, 's');
                     INSERT INTO history_bodies (id, digest, body, bytes)
                         VALUES (1, 'a', 'alpha', 5), (2, 'b', 'bravo!', 6);
                     INSERT INTO history_versions
                             (id, server_id, kind, key, digest, body_id, first_seen, last_seen)
                         VALUES (1, 1, 'resource', 'k', 'a', 1, 10, 20),
                                (2, 1, 'resource', 'k', 'b', 2, 20, NULL);",
                )
                .expect("a history");
        }
        let connection = open_writer(&path).expect("migrated");
        let total = |connection: &Connection| -> i64 {
            connection
                .query_row("SELECT total_bytes FROM history_settings", [], |row| {
                    row.get(0)
                })
                .expect("total")
        };
        assert_eq!(total(&connection), 11);
        let columns: Vec<String> = connection
            .prepare("SELECT name FROM pragma_index_info('history_by_key') ORDER BY seqno")
            .expect("prepare")
            .query_map([], |row| row.get(0))
            .expect("columns")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(
            columns,
            ["server_id", "kind", "key", "id", "digest", "body_id"]
        );
        let open: Vec<(i64, Option<i64>)> = connection
            .prepare("SELECT id, last_seen FROM history_versions ORDER BY id")
            .expect("prepare")
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("versions")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(open, [(1, Some(20)), (2, None)]);
        connection
            .execute(
                "INSERT INTO history_bodies VALUES (3, 'c', 'charlie', 7)",
                [],
            )
            .expect("a body");
        assert_eq!(
            total(&connection),
            11,
            "a body's bytes are the writer's to add"
        );
        connection
            .execute("DELETE FROM history_versions WHERE id = 1", [])
            .expect("a prune");
        assert_eq!(total(&connection), 6, "a removed body subtracts its bytes");
    }
}
