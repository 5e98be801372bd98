//! Honest liveness: a dead server is not shown synced, quiet servers are polled quietly,
//! `refresh --wait` tells outcomes apart, and a server never reached says so.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{free_port, run_cli, stdio_server, wait_for, Daemon, HttpFixture, Scratch};

/// One fixture, driven by a scenario file and counting what it serves into a stats file.
struct Fixture {
    scratch: Scratch,
    scenario: PathBuf,
    stats: PathBuf,
}

impl Fixture {
    fn new(initial: &Value) -> Fixture {
        let scratch = Scratch::new();
        let scenario = scratch.write_scenario("scenario.json", initial);
        let stats = scratch.path("stats.json");
        Fixture {
            scratch,
            scenario,
            stats,
        }
    }

    fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--name",
            "live",
            "--scenario",
            self.scenario.to_str().expect("utf-8"),
            "--stats",
            self.stats.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        args
    }

    fn counter(&self, name: &str) -> u64 {
        counter(&self.stats, name)
    }

    /// A daemon mirroring the HTTP fixture at `url` as server `live`, with `settings` in its table.
    fn daemon(&self, url: &str, settings: &str) -> Daemon {
        let servers = format!("[servers.live]\nurl = \"{url}\"\n{settings}\n");
        Daemon::start(&self.scratch, &self.scratch.config(&servers))
    }
}

fn counter(stats: &Path, name: &str) -> u64 {
    std::fs::read_to_string(stats)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|stats| stats[name].as_u64())
        .unwrap_or(0)
}

/// Log lines of `daemon` that contain every one of `needles`.
fn log_lines(daemon: &Daemon, needles: &[&str]) -> usize {
    daemon
        .log_text()
        .lines()
        .filter(|line| needles.iter().all(|needle| line.contains(needle)))
        .count()
}

fn address_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string()
}

#[test]
fn a_push_stream_that_cannot_be_reopened_makes_the_server_reconnecting_with_one_warning() {
    let fixture = Fixture::new(&json!({"generate": 30, "page_size": 10}));
    let server = HttpFixture::start(&fixture.args(&["--era", "legacy"]));
    // No ping soon: only the GET stream can tell that the server is gone.
    let daemon = fixture.daemon(&server.url, "ping_interval = \"1h\"");
    daemon.wait_for_walks("live", 1);
    wait_for("the GET stream", Duration::from_secs(20), || {
        let status = daemon.server_status("live");
        (status["live"]["push"] == "GET stream").then_some(())
    });
    let address = address_of(&server.url);
    drop(server);

    let status = wait_for(
        "the server to be reconnecting",
        Duration::from_secs(20),
        || {
            let status = daemon.server_status("live");
            (status["state"] == "reconnecting").then_some(status)
        },
    );
    assert_eq!(status["stale"], true, "{status}");
    assert_eq!(status["resources"], 30, "{status}");
    let error = status["lastError"].as_str().unwrap_or("");
    assert!(
        error.contains("the GET stream cannot be reopened"),
        "{status}"
    );
    // The transport keeps retrying; the operator hears of it once.
    wait_for("three failed reopens", Duration::from_secs(30), || {
        (log_lines(&daemon, &["GET stream failed"]) >= 3).then_some(())
    });
    let warnings = log_lines(&daemon, &["WARN", "until the push stream is reopened"]);
    assert_eq!(warnings, 1, "{}", daemon.log_text());
    assert_eq!(daemon.server_status("live")["state"], "reconnecting");

    // The server comes back (without our session): the mirror reconnects and is in sync.
    fixture
        .scratch
        .write_scenario("scenario.json", &json!({"generate": 34, "page_size": 10}));
    let _restarted = HttpFixture::start_on(&address, &fixture.args(&["--era", "legacy"]));
    let status = wait_for("the mirror to sync again", Duration::from_secs(30), || {
        let status = daemon.server_status("live");
        let synced = status["state"] == "synced" && status["resources"] == 34;
        synced.then_some(status)
    });
    assert_eq!(status["stale"], false, "{status}");
    assert!(status["lastError"].is_null(), "{status}");
}

#[test]
fn a_server_that_cannot_push_is_polled_at_poll_interval_backing_off_quietly() {
    // The Python SDK 2.x default: `ttlMs: 0, cacheScope: "private"` on every list result.
    let fixture = Fixture::new(&json!({"generate": 30, "page_size": 10}));
    let server = HttpFixture::start(&fixture.args(&[
        "--era",
        "modern",
        "--no-listen",
        "--ttl-ms",
        "0",
        "--cache-scope",
        "private",
    ]));
    let daemon = fixture.daemon(&server.url, "poll_interval = \"200ms\"");
    daemon.wait_for_walks("live", 1);

    // Each poll that changes nothing doubles the interval, up to 8 times poll_interval.
    let status = wait_for(
        "the poll interval to back off",
        Duration::from_secs(30),
        || {
            let status = daemon.server_status("live");
            (status["live"]["pollIntervalMs"] == 1600).then_some(status)
        },
    );
    let live = &status["live"];
    let reason = live["pollIntervalReason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("poll_interval; the server's ttlMs (0 ms) does not shorten it"),
        "{status}"
    );
    assert!(reason.contains("changed nothing"), "{status}");
    assert_eq!(live["ttlMs"], 0, "{status}");
    assert_eq!(live["cacheScope"], "private", "{status}");
    assert!(
        live["push"].as_str().unwrap_or("").starts_with("polling"),
        "{status}"
    );
    // Two more polls at the capped interval take at least two intervals, not 2 x 200 ms.
    let (walks, since) = (fixture.counter("walks"), Instant::now());
    wait_for("two more polls", Duration::from_secs(30), || {
        (fixture.counter("walks") >= walks + 2).then_some(())
    });
    assert!(
        since.elapsed() >= Duration::from_millis(3000),
        "two polls in {:?}",
        since.elapsed()
    );
    // Only the first swap changed anything; the polls after it stay out of the INFO log.
    assert_eq!(log_lines(&daemon, &["INFO", "walk committed"]), 1);
    assert_eq!(log_lines(&daemon, &["INFO", "snapshot swapped"]), 1);
    assert!(log_lines(&daemon, &["DEBUG", "walk committed; nothing changed"]) >= 3);

    // A change is still found by the next poll.
    fixture
        .scratch
        .write_scenario("scenario.json", &json!({"generate": 33, "page_size": 10}));
    wait_for("the change to be polled", Duration::from_secs(30), || {
        (daemon.server_status("live")["resources"] == 33).then_some(())
    });
}

#[test]
fn refresh_wait_on_a_server_without_resources_is_not_a_failure() {
    let scratch = Scratch::new();
    let bare = scratch.write_scenario("bare.json", &json!({"capabilities_resources": false}));
    let servers = format!(
        "{}{}",
        stdio_server("bare", &["--scenario", bare.to_str().expect("utf-8")]),
        stdio_server("full", &["--name", "full", "--generate", "12"]),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    wait_for(
        "bare to report no resources",
        Duration::from_secs(20),
        || (daemon.server_status("bare")["state"] == "no_resources").then_some(()),
    );
    daemon.wait_for_walks("full", 1);

    let output = run_cli(&daemon.socket, &["refresh", "--wait"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!stdout.contains("failed"), "{stdout}");
    let answer = daemon.call("catalog/refresh", json!({"server": "bare", "wait": true}));
    assert_eq!(answer["servers"]["bare"]["ok"], true, "{answer}");
    assert_eq!(daemon.server_status("bare")["state"], "no_resources");
}

#[test]
fn refresh_wait_rides_through_one_reconnect() {
    let fixture = Fixture::new(&json!({"generate": 30, "page_size": 10}));
    // No GET stream and no pings: nothing but the refresh finds out the server restarted.
    let server = HttpFixture::start(&fixture.args(&["--era", "legacy", "--no-get-stream"]));
    let daemon = fixture.daemon(
        &server.url,
        "poll_interval = \"1h\"\nping_interval = \"1h\"",
    );
    daemon.wait_for_walks("live", 1);
    let address = address_of(&server.url);
    drop(server);
    fixture
        .scratch
        .write_scenario("scenario.json", &json!({"generate": 35, "page_size": 10}));
    let _restarted = HttpFixture::start_on(
        &address,
        &fixture.args(&["--era", "legacy", "--no-get-stream"]),
    );

    let output = run_cli(&daemon.socket, &["refresh", "live", "--wait", "--json"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_str(&stdout).expect("JSON answer");
    let outcome = &answer["servers"]["live"];
    assert_eq!(outcome["ok"], true, "{answer}");
    assert_eq!(outcome["swap"]["resources"], 35, "{answer}");
    // It did ride: the walk found the session gone, and a new connection walked.
    let status = daemon.server_status("live");
    assert_eq!(status["live"]["connections"], 2, "{status}");
    assert!(
        log_lines(&daemon, &["no longer knows our session"]) >= 1,
        "{}",
        daemon.log_text()
    );
}

#[test]
fn a_server_never_reached_says_cannot_connect() {
    // A loopback port nobody listens on.
    let port = free_port();
    let scratch = Scratch::new();
    let servers = format!("[servers.gone]\nurl = \"http://127.0.0.1:{port}/mcp\"\n");
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    let status = wait_for("gone to back off", Duration::from_secs(20), || {
        let status = daemon.server_status("gone");
        (status["state"] == "backing_off").then_some(status)
    });
    let error = status["lastError"].as_str().unwrap_or("");
    assert!(error.starts_with("cannot connect"), "{status}");
    wait_for("the warning", Duration::from_secs(20), || {
        (log_lines(&daemon, &["WARN", "cannot connect"]) >= 1).then_some(())
    });
    assert_eq!(
        log_lines(&daemon, &["connection lost"]),
        0,
        "{}",
        daemon.log_text()
    );
}
