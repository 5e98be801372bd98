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

/// Resources of no server (a first load's pending rows) and pending loads in the database.
fn pending_rows(database: &rusqlite::Connection) -> i64 {
    database
        .query_row(
            "SELECT (SELECT count(*) FROM resources WHERE server_id NOT IN (SELECT id FROM servers))
                    + (SELECT count(*) FROM pending_loads)",
            [],
            |row| row.get(0),
        )
        .expect("count pending rows")
}

/// A first load writes its pages into the database as it walks, under a pending id: a kill
/// mid-load leaves nothing any reader sees, and the next start discards them and loads anew.
#[test]
fn sigkill_mid_first_load_leaves_nothing_visible_and_the_next_walk_loads_exactly() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario(
        "scenario.json",
        &json!({"generate": 10000, "page_size": 100, "faults": {"page_delay_ms": 40}}),
    );
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
    wait_for(
        "the first load to be well under way",
        Duration::from_secs(30),
        || {
            let stats: Value = serde_json::from_str(&std::fs::read_to_string(&stats).ok()?).ok()?;
            (stats["pages"].as_u64()? >= 30).then_some(())
        },
    );
    let database = open_database(&daemon.database);
    wait_for(
        "pages of the first load in the database",
        Duration::from_secs(30),
        || (pending_rows(&database) > 1).then_some(()),
    );
    drop(database);
    assert_eq!(daemon.server_status("big")["resources"], 0);
    assert!(daemon.uris().is_empty(), "a reader saw a pending row");
    daemon.child.kill().expect("SIGKILL");
    daemon.child.wait().expect("reap");

    let database = open_database(&daemon.database);
    let integrity: String = database
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("check");
    assert_eq!(integrity, "ok");
    let visible: i64 = database
        .query_row(
            "SELECT count(*) FROM resources r JOIN servers s ON s.id = r.server_id",
            [],
            |row| row.get(0),
        )
        .expect("count");
    assert_eq!(visible, 0, "no generation of the server was complete");
    drop(database);

    let daemon = Daemon::start(&scratch, &config);
    wait_for("the first load", Duration::from_secs(60), || {
        (daemon.server_status("big")["walksOk"].as_u64()? >= 1).then_some(())
    });
    assert_eq!(daemon.uris(), generated_uris("big", 10000));
    assert_eq!(daemon.server_status("big")["resources"], 10000);
    let database = open_database(&daemon.database);
    wait_for(
        "the killed load's rows to be discarded",
        Duration::from_secs(60),
        || (pending_rows(&database) == 0).then_some(()),
    );
}

/// A first load that fails part way leaves no rows behind, and its server's state failed.
#[test]
fn a_first_load_failing_mid_way_leaves_no_rows() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario(
        "scenario.json",
        &json!({"generate": 5000, "page_size": 100, "faults": {"fail_at_page": 40}}),
    );
    let servers = format!(
        "{}\n{}",
        stdio_server(
            "big",
            &[
                "--name",
                "big",
                "--scenario",
                scenario.to_str().expect("utf-8")
            ]
        ),
        stdio_server("good", &["--name", "good", "--generate", "20"]),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("good", 1);
    let database = open_database(&daemon.database);
    let status = wait_for(
        "the failed first load, its rows discarded",
        Duration::from_secs(60),
        || {
            let status = daemon.server_status("big");
            (status["walksFailed"].as_u64()? >= 1
                && status["state"] == "failed"
                && pending_rows(&database) == 0)
                .then_some(status)
        },
    );
    assert_eq!(status["resources"], 0, "{status}");
    assert_eq!(daemon.uris(), generated_uris("good", 20));
}
