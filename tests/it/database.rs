//! The database file deleted or replaced under a running daemon: it says so and exits with a failure, for systemd to restart it.

use std::time::Duration;

use crate::support::{stdio_server, wait_for, Daemon, Scratch};

/// Waits for the daemon to exit by itself; returns its exit status and log.
fn wait_for_exit(daemon: &mut Daemon) -> (std::process::ExitStatus, String) {
    let status = wait_for("the daemon to exit", Duration::from_secs(30), || {
        daemon.child.try_wait().ok().flatten()
    });
    (status, daemon.log_text())
}

#[test]
fn a_deleted_database_stops_the_daemon_with_a_failure_and_an_error_in_the_log() {
    let scratch = Scratch::new();
    let server = stdio_server("docs", &["--name", "docs", "--generate", "40"]);
    let mut daemon = Daemon::start(&scratch, &scratch.config(&server));
    daemon.wait_for_walks("docs", 1);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", daemon.database.display()));
    }
    let (status, log) = wait_for_exit(&mut daemon);
    assert!(!status.success(), "exit status {status}: {log}");
    assert_ne!(
        status.code(),
        Some(2),
        "2 tells systemd not to restart: {log}"
    );
    assert!(log.contains("ERROR"), "{log}");
    assert!(
        log.contains("was deleted while the daemon had it open"),
        "{log}"
    );
}

#[test]
fn a_replaced_database_is_noticed_too_and_a_restart_serves_the_file_at_the_path() {
    let scratch = Scratch::new();
    let server = stdio_server("docs", &["--name", "docs", "--generate", "40"]);
    let config = scratch.config(&server);
    let mut daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("docs", 1);
    // A restore from a backup: another file renamed over the path.
    let restored = scratch.path("restored.db");
    std::fs::copy(&daemon.database, &restored).expect("copy the database");
    std::fs::rename(&restored, &daemon.database).expect("rename over the database");
    let (status, log) = wait_for_exit(&mut daemon);
    assert!(!status.success(), "exit status {status}: {log}");
    assert!(log.contains("was replaced by another file"), "{log}");
    drop(daemon);
    // What systemd would do next: a new daemon on the file at the path, which works.
    let daemon = Daemon::start(&scratch, &config);
    let status = daemon.wait_for_walks("docs", 1);
    assert_eq!(status["resources"], 40, "{status}");
}

#[test]
fn rows_without_a_hash_are_compared_by_text_once_then_hashed() {
    let scratch = Scratch::new();
    let server = stdio_server("docs", &["--name", "docs", "--generate", "40"]);
    let config = scratch.config(&server);
    let mut daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("docs", 1);
    daemon.stop();
    // Rows as migration 0003 leaves those of an older mcp-mirror: no hash yet (0).
    let connection = rusqlite::Connection::open(&daemon.database).expect("open");
    connection
        .execute("UPDATE resources SET hash = 0", [])
        .expect("forget the hashes");
    drop(connection);
    drop(daemon);
    let daemon = Daemon::start(&scratch, &config);
    let status = daemon.wait_for_walks("docs", 2);
    // Unchanged rows are not reported changed because they had no hash yet.
    assert_eq!(status["lastWalk"]["changed"], 0, "{status}");
    assert_eq!(status["lastWalk"]["added"], 0, "{status}");
    assert_eq!(status["resources"], 40, "{status}");
    let unhashed: i64 = crate::support::open_database(&daemon.database)
        .query_row("SELECT count(*) FROM resources WHERE hash = 0", [], |row| {
            row.get(0)
        })
        .expect("count");
    assert_eq!(unhashed, 0, "every row has its hash after one swap");
}

#[test]
fn rows_hashed_by_another_version_are_compared_as_json_once_then_rehashed() {
    let scratch = Scratch::new();
    let server = stdio_server("docs", &["--name", "docs", "--generate", "40"]);
    let config = scratch.config(&server);
    let mut daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("docs", 1);
    daemon.stop();
    // Hashes of another text of the same entries (an older version hashed its own
    // serialization), and one row whose stored JSON really differs from what is listed.
    let connection = rusqlite::Connection::open(&daemon.database).expect("open");
    connection
        .execute("UPDATE resources SET hash = 7", [])
        .expect("older hashes");
    connection
        .execute(
            "UPDATE resources SET raw = json_set(raw, '$.description', 'stale')
             WHERE id = (SELECT min(id) FROM resources)",
            [],
        )
        .expect("one stale row");
    drop(connection);
    drop(daemon);
    let daemon = Daemon::start(&scratch, &config);
    let status = daemon.wait_for_walks("docs", 2);
    assert_eq!(status["lastWalk"]["changed"], 1, "{status}");
    assert_eq!(status["lastWalk"]["added"], 0, "{status}");
    assert_eq!(status["lastWalk"]["removed"], 0, "{status}");
    assert_eq!(status["resources"], 40, "{status}");
    let old_hashes: i64 = crate::support::open_database(&daemon.database)
        .query_row("SELECT count(*) FROM resources WHERE hash = 7", [], |row| {
            row.get(0)
        })
        .expect("count");
    assert_eq!(
        old_hashes, 0,
        "every row has the hash of its listed text after one swap"
    );
}
