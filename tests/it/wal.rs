//! The write-ahead log stays bounded whatever a server does: a first load that stalls part
//! way defers checkpoints only while it makes progress.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{stdio_server, Daemon, Scratch};

fn file_bytes(path: &std::path::Path) -> u64 {
    std::fs::metadata(path)
        .map(|found| found.len())
        .unwrap_or(0)
}

fn wal_path(database: &std::path::Path) -> std::path::PathBuf {
    let mut path = database.as_os_str().to_owned();
    path.push("-wal");
    path.into()
}

/// A server's first load stalls after four pages (its next page is never answered) while
/// another server changes again and again: the log is copied back into the database and
/// restarts all the same, so it does not grow with every change.
#[test]
fn a_first_load_that_stalls_does_not_keep_the_log_from_being_checkpointed() {
    let scratch = Scratch::new();
    let stalls = scratch.write_scenario(
        "stalls.json",
        &json!({"generate": 3000, "page_size": 100, "faults": {"stall_at_page": 5}}),
    );
    let stats = scratch.path("stalls-stats.json");
    let changes =
        |version: u64| json!({"generate": 1500, "prefix": format!("v{version}"), "page_size": 500});
    let changing = scratch.write_scenario("changes.json", &changes(0));
    let servers = format!(
        "{}\nrequest_timeout = \"10m\"\n\n{}",
        stdio_server(
            "stalls",
            &[
                "--name",
                "stalls",
                "--scenario",
                stalls.to_str().expect("utf-8"),
                "--stats",
                stats.to_str().expect("utf-8"),
            ],
        )
        .trim_end(),
        stdio_server(
            "changes",
            &[
                "--name",
                "changes",
                "--scenario",
                changing.to_str().expect("utf-8")
            ],
        ),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("changes", 1);
    crate::support::wait_for(
        "the first load of stalls to stall at page 5",
        Duration::from_secs(30),
        || {
            let stats: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&stats).ok()?).ok()?;
            (stats["pages"].as_u64()? >= 5).then_some(())
        },
    );
    let log = wal_path(&daemon.database);
    let database_before = file_bytes(&daemon.database);
    let mut version = 0;
    let mut change = || {
        version += 1;
        scratch.write_scenario("changes.json", &changes(version));
        daemon.wait_for_walks("changes", version + 1);
    };
    // The database file grows only when a checkpoint copies the log back into it.
    let deadline = Instant::now() + Duration::from_secs(120);
    while file_bytes(&daemon.database) < database_before + (2 << 20) {
        assert!(
            Instant::now() < deadline,
            "no checkpoint in 120 s while a first load stalls: the log grew to {} bytes, the database stayed at {} bytes",
            file_bytes(&log),
            file_bytes(&daemon.database)
        );
        change();
    }
    let log_before = file_bytes(&log);
    for _ in 0..25 {
        change();
    }
    // The log restarts past `WAL_RESTART_BYTES` (16 MiB), so its file grows no more than a
    // change or two past that.
    let log_after = file_bytes(&log);
    assert!(
        log_after <= log_before.max(24 << 20),
        "the log grew from {log_before} to {log_after} bytes over 25 changes"
    );
    let stalled = daemon.server_status("stalls");
    assert_eq!(
        stalled["walksOk"], 0,
        "the first load is still stalled: {stalled}"
    );
    let status = daemon.call("catalog/status", json!({}));
    let wal = &status["daemon"]["wal"];
    assert_eq!(wal["deferredForFirstLoad"], false, "{wal}");
    assert!(wal["checkpoints"].as_u64().unwrap_or(0) > 0, "{wal}");
    assert!(
        wal["lastCheckpoint"]["logPages"].as_i64().is_some(),
        "{wal}"
    );
    assert!(wal["bytes"].as_u64().is_some(), "{wal}");
}
