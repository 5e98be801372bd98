//! The CLI commands of issue 4: `show`, `search` with highlights, exit codes, and `ls`,
//! `show` and `search` reading the database directly while the daemon is stopped.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{stdio_server, Daemon, Scratch, MIRROR};

fn run(socket: &Path, database: &Path, args: &[&str]) -> Output {
    Command::new(MIRROR)
        .args(args)
        .arg("--socket")
        .arg(socket)
        // The database through the environment: only the commands that read it take it.
        .env("MCP_MIRROR_DATABASE", database)
        .output()
        .expect("run mcp-mirror")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn ls_show_and_search_work_with_the_daemon_stopped_and_exit_codes_tell_outcomes_apart() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch,
        &scratch.config(&stdio_server(
            "docs",
            &["--generate", "25", "--name", "docs"],
        )),
    );
    daemon.wait_for_walks("docs", 1);
    let (socket, database) = (daemon.socket.clone(), daemon.database.clone());

    let online = run(
        &socket,
        &database,
        &["show", "fixture://docs/docs/000004.md"],
    );
    assert!(online.status.success(), "{online:?}");
    let shown = text(&online.stdout);
    for expected in [
        "uri:",
        "fixture://docs/docs/000004.md",
        "doc-000004",
        "Document 4",
        "topic-4",
        "text/plain",
        "annotations:",
        "icons:",
        "listed by:",
        "docs (priority 100)",
    ] {
        assert!(shown.contains(expected), "{expected} missing from\n{shown}");
    }
    let online = run(&socket, &database, &["search", "doc-000007"]);
    let found = text(&online.stdout);
    let row = found.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("fixture://docs/docs/000007.md") && row.contains("\u{ab}doc-000007\u{bb}"),
        "{found}"
    );
    assert_eq!(
        run(&socket, &database, &["show", "fixture://nowhere"])
            .status
            .code(),
        Some(4)
    );
    assert_eq!(
        run(&socket, &database, &["refresh", "nosuchserver"])
            .status
            .code(),
        Some(4)
    );
    assert_eq!(
        run(&socket, &database, &["search", "NEAR(", "--raw"])
            .status
            .code(),
        Some(2)
    );

    daemon.stop();
    let offline = run(&socket, &database, &["ls"]);
    assert!(offline.status.success(), "{offline:?}");
    assert!(
        text(&offline.stderr).contains("reading the database"),
        "{offline:?}"
    );
    assert_eq!(
        text(&offline.stdout)
            .lines()
            .filter(|line| line.starts_with("fixture://docs/"))
            .count(),
        25
    );
    let offline = run(&socket, &database, &["search", "doc-000007", "--json"]);
    assert!(offline.status.success(), "{offline:?}");
    let json: Value = serde_json::from_slice(&offline.stdout).expect("json");
    assert_eq!(json["results"][0]["uri"], "fixture://docs/docs/000007.md");
    assert!(text(&offline.stderr).contains("reading the database"));
    let offline = run(
        &socket,
        &database,
        &["show", "fixture://docs/docs/000004.md", "--json"],
    );
    let json: Value = serde_json::from_slice(&offline.stdout).expect("json");
    assert_eq!(json["resource"]["name"], "doc-000004");
    assert_eq!(json["server"], "docs");
    assert_eq!(
        run(&socket, &database, &["show", "fixture://nowhere"])
            .status
            .code(),
        Some(4)
    );
    // Reads and status need the daemon: 3 says it is unreachable.
    assert_eq!(
        run(
            &socket,
            &database,
            &["read", "fixture://docs/docs/000004.md"]
        )
        .status
        .code(),
        Some(3)
    );
    let missing = run(&socket, &scratch.path("absent.db"), &["ls"]);
    assert_eq!(missing.status.code(), Some(3), "{missing:?}");
    assert!(
        text(&missing.stderr).contains("mcp-mirror serve"),
        "{missing:?}"
    );
    let bridge = run(&socket, &database, &["mcp"]);
    assert_eq!(bridge.status.code(), Some(3), "{bridge:?}");
    assert!(
        bridge.stdout.is_empty(),
        "stdout is for protocol messages only"
    );
}
