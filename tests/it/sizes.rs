//! Size bounds under a hostile server: one huge entry is stored trimmed and flagged, fast, while other servers keep committing.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{open_database, stdio_server, wait_for, Daemon, Scratch};

/// The daemon's peak resident set so far, in bytes (Linux `VmHWM`).
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .expect("VmHWM line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|number| number.parse().ok())
        .expect("VmHWM number");
    kib * 1024
}

fn resource_uris(daemon: &Daemon, server: &str) -> Vec<String> {
    daemon
        .list_all()
        .iter()
        .filter_map(|resource| resource["uri"].as_str())
        .filter(|uri| uri.starts_with(&format!("fixture://{server}/")))
        .map(str::to_string)
        .collect()
}

/// The longest swap of `server` the daemon's log reports, in milliseconds.
fn longest_swap_ms(daemon: &Daemon, server: &str) -> f64 {
    daemon
        .log_text()
        .lines()
        .filter(|line| {
            line.contains("snapshot swapped") && line.contains(&format!("server=\"{server}\""))
        })
        .filter_map(|line| {
            line.split("swap_ms=\"")
                .nth(1)?
                .split('"')
                .next()?
                .parse()
                .ok()
        })
        .fold(0.0, f64::max)
}

#[test]
fn a_sixty_megabyte_entry_is_stored_trimmed_and_flagged_without_stalling_other_servers() {
    let scratch = Scratch::new();
    let hostile_scenario = scratch.write_scenario(
        "hostile.json",
        &json!({"generate": 600, "page_size": 100, "huge_description_bytes": 60_000_000}),
    );
    let neighbour_scenario = scratch.write_scenario("neighbour.json", &json!({"generate": 10}));
    // Reading and parsing a 60 MB message takes a while in a debug build; the bound is on
    // what follows (the swap, the neighbour's commits), not on the transfer.
    let servers = format!(
        "{}request_timeout = \"120s\"\n\n{}",
        stdio_server(
            "hostile",
            &[
                "--name",
                "hostile",
                "--scenario",
                hostile_scenario.to_str().expect("utf-8")
            ],
        ),
        stdio_server(
            "neighbour",
            &[
                "--name",
                "neighbour",
                "--scenario",
                neighbour_scenario.to_str().expect("utf-8")
            ],
        ),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("neighbour", 1);
    let status = wait_for(
        "the hostile server's first walk",
        Duration::from_secs(120),
        || {
            let status = daemon.server_status("hostile");
            (status["walksOk"].as_u64() >= Some(1)).then_some(status)
        },
    );
    assert_eq!(status["resources"], 601, "{status}");
    assert_eq!(status["oversizedEntries"], 1, "{status}");

    // While the hostile server is walked again (its catalog grows by one), the neighbour's
    // change reaches the catalog within seconds.
    scratch.write_scenario(
        "hostile.json",
        &json!({"generate": 601, "page_size": 100, "huge_description_bytes": 60_000_000}),
    );
    let changed_at = Instant::now();
    scratch.write_scenario("neighbour.json", &json!({"generate": 11}));
    wait_for(
        "the neighbour's change to commit",
        Duration::from_secs(10),
        || (resource_uris(&daemon, "neighbour").len() == 11).then_some(()),
    );
    let neighbour_latency = changed_at.elapsed();
    let status = wait_for(
        "the hostile server's second walk",
        Duration::from_secs(120),
        || {
            let status = daemon.server_status("hostile");
            (status["walksOk"].as_u64() >= Some(2)).then_some(status)
        },
    );
    // The huge entry is compared by hash: unchanged, however large it was.
    assert_eq!(status["resources"], 602, "{status}");
    assert_eq!(status["lastWalk"]["added"], 1, "{status}");
    assert_eq!(status["lastWalk"]["changed"], 0, "{status}");
    assert_eq!(status["oversizedEntries"], 1, "{status}");
    let swap_ms = longest_swap_ms(&daemon, "hostile");
    assert!(
        swap_ms > 0.0 && swap_ms < 5_000.0,
        "a swap took {swap_ms} ms"
    );

    // The entry keeps its URI and name, loses its description, and the row is flagged.
    let listed: Vec<Value> = daemon
        .list_all()
        .into_iter()
        .filter(|resource| resource["uri"] == "fixture://hostile/huge")
        .collect();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["name"], "huge");
    assert!(listed[0].get("description").is_none(), "{}", listed[0]);
    let database = open_database(&daemon.database);
    let (oversized, raw_bytes): (i64, i64) = database
        .query_row(
            "SELECT oversized, length(raw) FROM resources WHERE uri = 'fixture://hostile/huge'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("the huge row");
    assert_eq!(oversized, 1);
    assert!(raw_bytes <= 1024 * 1024, "stored {raw_bytes} bytes");
    let largest: i64 = database
        .query_row("SELECT max(length(raw)) FROM resources", [], |row| {
            row.get(0)
        })
        .expect("largest row");
    assert!(
        largest <= 1024 * 1024,
        "a row of {largest} bytes was stored"
    );

    // A 60 MB message has to be read and parsed; what follows it stays bounded.
    let peak = peak_rss_bytes(daemon.child.id());
    assert!(
        peak < 400 * 1024 * 1024,
        "peak RSS {} MB",
        peak / (1024 * 1024)
    );
    eprintln!(
        "longest hostile swap {swap_ms} ms, neighbour's change in {neighbour_latency:?}, peak RSS {} MB",
        peak / (1024 * 1024)
    );
}

#[test]
fn max_entry_bytes_is_a_config_key_and_bounds_every_entry() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario(
        "bounded.json",
        &json!({"generate": 30, "huge_description_bytes": 5_000}),
    );
    let server = stdio_server(
        "bounded",
        &[
            "--name",
            "bounded",
            "--scenario",
            scenario.to_str().expect("utf-8"),
        ],
    );
    let config = scratch.config(&format!("{server}max_entry_bytes = 2000\n"));
    let daemon = Daemon::start(&scratch, &config);
    let status = daemon.wait_for_walks("bounded", 1);
    assert_eq!(status["resources"], 31, "{status}");
    assert_eq!(status["oversizedEntries"], 1, "{status}");
    let database = open_database(&daemon.database);
    let largest: i64 = database
        .query_row("SELECT max(length(raw)) FROM resources", [], |row| {
            row.get(0)
        })
        .expect("largest row");
    assert!(largest <= 2000, "a row of {largest} bytes was stored");
    // The bound changes nothing on a re-walk, and a changed entry is still seen as changed.
    scratch.write_scenario(
        "bounded.json",
        &json!({"generate": 30, "huge_description_bytes": 5_001}),
    );
    let status = wait_for("the changed huge entry", Duration::from_secs(30), || {
        let status = daemon.server_status("bounded");
        (status["lastWalk"]["changed"] == 1).then_some(status)
    });
    assert_eq!(status["lastWalk"]["added"], 0, "{status}");
    assert_eq!(status["oversizedEntries"], 1, "{status}");
}
