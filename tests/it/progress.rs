//! A walk in progress shows in `catalog/status` (`live.walkProgress`: pages, entries, rate, and
//! an estimate once a complete walk counted the server) and in `status`, during a slow walk
//! (the fixture's page delay).

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{run_cli, stdio_server, wait_for, Daemon, Scratch};

/// `live.walkProgress` once the walk has read at least `pages` pages.
fn progress_after(daemon: &Daemon, pages: u64) -> Value {
    wait_for("a walk in progress", Duration::from_secs(30), || {
        let progress = daemon.server_status("slow")["live"]["walkProgress"].clone();
        (progress["pages"].as_u64().unwrap_or(0) >= pages).then_some(progress)
    })
}

#[test]
fn a_slow_walk_shows_its_pages_entries_rate_and_estimate() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario(
        "slow.json",
        &json!({"generate": 600, "page_size": 20, "faults": {"page_delay_ms": 40}}),
    );
    let servers = stdio_server(
        "slow",
        &[
            "--name",
            "slow",
            "--scenario",
            &scenario.display().to_string(),
        ],
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));

    // The first walk: no count to estimate from yet.
    let first = progress_after(&daemon, 4);
    let (pages, entries) = (first["pages"].as_u64(), first["entries"].as_u64());
    // 600 resources in 30 pages, then 3 templates in one.
    assert!(entries >= Some(4 * 20) && entries <= Some(603), "{first}");
    assert!(pages >= Some(4) && pages <= Some(31), "{first}");
    assert!(first["perSecond"].as_u64() > Some(0), "{first}");
    assert!(first["startedAtMs"].as_i64() > Some(0), "{first}");
    assert!(
        first.get("expectedEntries").is_none() && first.get("etaMs").is_none(),
        "{first}"
    );
    let shown = run_cli(&daemon.socket, &["status"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(" pages, ") && shown.contains(" entries, "),
        "{shown}"
    );

    daemon.wait_for_walks("slow", 1);
    // The walk's end reaches the session a moment after its commit reaches the database.
    wait_for("the walk's progress to go", Duration::from_secs(10), || {
        let status = daemon.server_status("slow");
        status["live"].get("walkProgress").is_none().then_some(())
    });

    // The next walk estimates from the first one's count.
    daemon.call("catalog/refresh", json!({"server": "slow"}));
    let second = progress_after(&daemon, 4);
    let expected = second["expectedEntries"]
        .as_u64()
        .expect("an expected count");
    assert!(expected >= 600, "{second}");
    let eta_ms = second["etaMs"].as_u64().expect("an estimate");
    // 600 entries at 20 a page every 40 ms or more: some seconds, not minutes.
    assert!(eta_ms > 0 && eta_ms < 60_000, "{second}");
    let shown = run_cli(&daemon.socket, &["status"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("s left"), "{shown}");
    // `refresh --wait --json` prints its JSON and nothing else, even while a walk runs.
    let waited = run_cli(&daemon.socket, &["refresh", "slow", "--wait", "--json"]);
    assert!(waited.status.success());
    assert!(
        waited.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    serde_json::from_slice::<Value>(&waited.stdout).expect("JSON alone");
}
