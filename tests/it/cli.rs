//! The CLI against a running daemon, and its message when no daemon runs.

use std::process::Output;

use serde_json::Value;

use crate::support::{stdio_server, Daemon, Scratch};

use crate::support::run_cli as run;

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn status_ls_and_search_show_the_mirrored_catalog() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(
        &scratch,
        &scratch.config(&stdio_server(
            "docs",
            &["--generate", "12", "--name", "docs"],
        )),
    );
    daemon.wait_for_walks("docs", 1);

    let status = stdout(&run(&daemon.socket, &["status"]));
    let row = status
        .lines()
        .find(|line| line.starts_with("docs "))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        row.contains("synced") && row.contains("12") && row.contains("2026-07-28"),
        "{status}"
    );

    let listing = stdout(&run(&daemon.socket, &["ls"]));
    assert_eq!(
        listing
            .lines()
            .filter(|line| line.starts_with("fixture://docs/"))
            .count(),
        12,
        "{listing}"
    );

    let found = stdout(&run(&daemon.socket, &["search", "doc-000003"]));
    assert!(
        found
            .lines()
            .nth(1)
            .is_some_and(|line| line.contains("fixture://docs/docs/000003.md")),
        "{found}"
    );

    let json: Value = serde_json::from_str(&stdout(&run(
        &daemon.socket,
        &["search", "doc-000003", "--json"],
    )))
    .expect("json");
    assert_eq!(json["results"][0]["uri"], "fixture://docs/docs/000003.md");
    let json: Value =
        serde_json::from_str(&stdout(&run(&daemon.socket, &["status", "--json"]))).expect("json");
    assert_eq!(json["servers"][0]["resources"], 12);

    let refreshed = stdout(&run(&daemon.socket, &["refresh", "docs", "--wait"]));
    assert!(refreshed.contains("docs: 12 resources"), "{refreshed}");
}

#[test]
fn without_a_daemon_the_cli_says_how_to_start_one() {
    let scratch = Scratch::new();
    let output = run(&scratch.path("absent.sock"), &["status"]);
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach the daemon") && stderr.contains("mcp-mirror serve"),
        "{stderr}"
    );
}
