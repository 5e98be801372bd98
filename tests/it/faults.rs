//! A misbehaving server marks only itself failed and keeps its last complete snapshot.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{generated_uris, stdio_server, wait_for, Daemon, Scratch};

/// Starts a daemon on one stdio fixture driven by a scenario file; waits for the first walk.
fn start_with_scenario(scratch: &Scratch, scenario: &Value, extra: &str) -> Daemon {
    let path = scratch.write_scenario("scenario.json", scenario);
    let server = stdio_server(
        "flaky",
        &[
            "--name",
            "flaky",
            "--scenario",
            path.to_str().expect("utf-8"),
        ],
    );
    let config = scratch.config(&format!("{server}{extra}"));
    Daemon::start(scratch, &config)
}

/// Waits until a walk of `server` failed with an error containing `needle`.
fn wait_for_failure(daemon: &Daemon, server: &str, needle: &str) -> Value {
    wait_for(
        &format!("{server} to fail with {needle:?}"),
        Duration::from_secs(30),
        || {
            let status = daemon.server_status(server);
            let error = status["lastError"].as_str().unwrap_or("");
            error.contains(needle).then_some(status)
        },
    )
}

#[test]
fn a_walk_that_fails_midway_keeps_the_previous_snapshot_and_marks_it_stale() {
    let scratch = Scratch::new();
    let steady = stdio_server("steady", &["--name", "steady", "--generate", "25"]);
    let daemon = start_with_scenario(
        &scratch,
        &json!({"generate": 120, "page_size": 20}),
        &format!("\n{steady}"),
    );
    daemon.wait_for_walks("flaky", 1);
    daemon.wait_for_walks("steady", 1);
    scratch.write_scenario(
        "scenario.json",
        &json!({"generate": 300, "page_size": 20, "faults": {"fail_at_page": 4}}),
    );
    let status = wait_for_failure(&daemon, "flaky", "injected failure");
    assert_eq!(status["stale"], true, "{status}");
    assert_eq!(status["resources"], 120, "{status}");
    let mut expected = generated_uris("flaky", 120);
    expected.extend(generated_uris("steady", 25));
    expected.sort();
    assert_eq!(daemon.uris(), expected);
    // The healthy neighbour is untouched by the other server's trouble.
    let steady = daemon.server_status("steady");
    assert_eq!(steady["state"], "synced", "{steady}");
    assert_eq!(steady["stale"], false, "{steady}");
}

#[test]
fn a_looping_cursor_trips_the_loop_guard() {
    let scratch = Scratch::new();
    let daemon = start_with_scenario(
        &scratch,
        &json!({"generate": 30, "page_size": 10, "faults": {"loop_cursor": true}}),
        "",
    );
    let status = wait_for_failure(&daemon, "flaky", "cursor loop");
    assert_eq!(status["resources"], 0, "{status}");
    assert!(daemon.uris().is_empty());
}

#[test]
fn page_and_item_caps_trip_with_clear_errors() {
    let scratch = Scratch::new();
    let daemon = start_with_scenario(
        &scratch,
        &json!({"generate": 100, "page_size": 10}),
        "max_pages = 5\n",
    );
    wait_for_failure(&daemon, "flaky", "page cap reached");
    drop(daemon);

    let scratch = Scratch::new();
    let daemon = start_with_scenario(
        &scratch,
        &json!({"generate": 100, "page_size": 10}),
        "max_items = 55\n",
    );
    let status = wait_for_failure(&daemon, "flaky", "item cap reached");
    assert_eq!(status["resources"], 0, "{status}");
}

#[test]
fn duplicates_are_kept_once_and_counted_and_empty_cursors_are_followed() {
    let scratch = Scratch::new();
    let daemon = start_with_scenario(
        &scratch,
        &json!({"generate": 100, "page_size": 10, "faults": {"duplicate_every": 10, "empty_string_cursor": true}}),
        "",
    );
    let status = daemon.wait_for_walks("flaky", 1);
    assert_eq!(status["resources"], 100, "{status}");
    assert_eq!(status["lastWalk"]["duplicates"], 10, "{status}");
    assert_eq!(daemon.uris(), generated_uris("flaky", 100));
}

#[test]
fn a_stale_cursor_restarts_the_walk_once() {
    let scratch = Scratch::new();
    let daemon = start_with_scenario(
        &scratch,
        &json!({"generate": 50, "page_size": 10, "faults": {"stale_cursor_once": true}}),
        "",
    );
    let status = daemon.wait_for_walks("flaky", 1);
    assert_eq!(status["resources"], 50, "{status}");
    assert_eq!(status["walksFailed"], 0, "{status}");
}

#[test]
fn a_slow_page_times_out_and_a_server_without_resources_is_not_an_error() {
    let scratch = Scratch::new();
    let slow = scratch.write_scenario(
        "slow.json",
        &json!({"generate": 30, "page_size": 10, "faults": {"page_delay_ms": 3000}}),
    );
    let bare = scratch.write_scenario("bare.json", &json!({"capabilities_resources": false}));
    let servers = format!(
        "{}request_timeout = \"500ms\"\n\n{}",
        stdio_server("slow", &["--scenario", slow.to_str().expect("utf-8")]),
        stdio_server("bare", &["--scenario", bare.to_str().expect("utf-8")]),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    wait_for_failure(&daemon, "slow", "timed out");
    let bare = wait_for(
        "bare to report no resources",
        Duration::from_secs(20),
        || {
            let status = daemon.server_status("bare");
            (status["state"] == "no_resources").then_some(status)
        },
    );
    assert!(bare["lastError"].is_null(), "{bare}");
}
