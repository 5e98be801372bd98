//! SIGKILL in the middle of a large walk leaves a sound database with the last complete snapshot.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{generated_uris, open_database, stdio_server, wait_for, Daemon, Scratch};

#[test]
fn sigkill_mid_walk_keeps_the_last_complete_snapshot() {
    let scratch = Scratch::new();
    let scenario =
        scratch.write_scenario("scenario.json", &json!({"generate": 500, "page_size": 50}));
    let stats = scratch.path("stats.json");
    let server = stdio_server(
        "big",
        &[
            "--name",
            "big",
            "--scenario",
            scenario.to_str().expect("utf-8"),
            "--stats",
            stats.to_str().expect("utf-8"),
        ],
    );
    let config = scratch.config(&server);
    let mut daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("big", 1);

    // A much larger catalog, served slowly, so the next walk is long.
    scratch.write_scenario(
        "scenario.json",
        &json!({"generate": 20000, "page_size": 100, "faults": {"page_delay_ms": 40}}),
    );
    wait_for(
        "the large walk to be well under way",
        Duration::from_secs(30),
        || {
            let stats: Value = serde_json::from_str(&std::fs::read_to_string(&stats).ok()?).ok()?;
            (stats["catalog_version"].as_u64()? >= 2 && stats["pages"].as_u64()? >= 11 + 20)
                .then_some(())
        },
    );
    daemon.child.kill().expect("SIGKILL");
    daemon.child.wait().expect("reap");

    let database = open_database(&daemon.database);
    let integrity: String = database
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("check");
    assert_eq!(integrity, "ok");
    let count: i64 = database
        .query_row("SELECT count(*) FROM resources", [], |row| row.get(0))
        .expect("count");
    assert_eq!(count, 500, "only the last complete snapshot is on disk");
    drop(database);

    let daemon = Daemon::start(&scratch, &config);
    assert_eq!(
        daemon.uris(),
        generated_uris("big", 500),
        "served at once, before the new walk ends"
    );
}
