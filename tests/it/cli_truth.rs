//! The CLI tells the truth (issue 9 items 6, 8–10, 12): refresh outcomes told apart, the
//! offline fallback reads only the database of the socket asked for, an unknown server is
//! exit 4, counts say what they count, `ls --server` lists the server's own snapshot, and a
//! polled server says why in words a user acts on; and every flag and subcommand has help
//! (item 11).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::support::{stdio_server, wait_for, Daemon, Scratch, MIRROR};

/// The CLI with the socket chosen; `database` is passed only when given.
fn run(socket: &Path, database: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(MIRROR);
    command
        .args(args)
        .arg("--socket")
        .arg(socket)
        .env_remove("MCP_MIRROR_DATABASE")
        .env_remove("MCP_MIRROR_SOCKET");
    if let Some(database) = database {
        // Through the environment: only the commands that read it take it.
        command.env("MCP_MIRROR_DATABASE", database);
    }
    command.output().expect("run mcp-mirror")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn refresh_wait_reports_a_server_without_resources_as_such_and_exits_0() {
    let scratch = Scratch::new();
    let tools = scratch.write_scenario(
        "tools.json",
        &serde_json::json!({"capabilities_resources": false}),
    );
    let servers = format!(
        "{}{}",
        stdio_server("docs", &["--name", "docs", "--generate", "3"]),
        stdio_server(
            "tools",
            &[
                "--name",
                "tools",
                "--scenario",
                &tools.display().to_string()
            ]
        ),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("docs", 1);
    wait_for("tools to settle", Duration::from_secs(30), || {
        (daemon.server_status("tools")["state"] == "no_resources").then_some(())
    });

    let refreshed = run(&daemon.socket, None, &["refresh", "--wait"]);
    assert_eq!(refreshed.status.code(), Some(0), "{refreshed:?}");
    let lines = text(&refreshed.stdout);
    assert!(lines.contains("tools: no resources"), "{lines}");
    assert!(lines.contains("docs: 3 resources"), "{lines}");
    assert!(!lines.contains("failed"), "{lines}");

    let refreshed = run(&daemon.socket, None, &["refresh", "--wait", "--json"]);
    assert_eq!(refreshed.status.code(), Some(0), "{refreshed:?}");
    let answer: Value = serde_json::from_slice(&refreshed.stdout).expect("json");
    assert_eq!(
        answer["servers"]["tools"]["state"], "no_resources",
        "{answer}"
    );
    assert_eq!(answer["servers"]["tools"]["ok"], true, "{answer}");
    assert_eq!(answer["servers"]["docs"]["state"], "synced", "{answer}");
    let one = run(&daemon.socket, None, &["refresh", "tools", "--wait"]);
    assert_eq!(one.status.code(), Some(0), "{one:?}");
}

#[test]
fn a_chosen_socket_falls_back_only_to_the_database_its_daemon_recorded() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch,
        &scratch.config(&stdio_server(
            "docs",
            &["--name", "docs", "--generate", "3"],
        )),
    );
    daemon.wait_for_walks("docs", 1);
    let record_path = scratch.path("mirror.sock.json");
    let record: Value =
        serde_json::from_slice(&std::fs::read(&record_path).expect("the socket's record"))
            .expect("record json");
    assert_eq!(
        Path::new(record["database"].as_str().expect("database")),
        daemon.database
    );
    let mode = std::fs::metadata(&record_path)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only");
    daemon.stop();

    // The daemon is gone: `--socket` alone reads the database it recorded.
    let offline = run(&daemon.socket, None, &["ls"]);
    assert!(offline.status.success(), "{offline:?}");
    assert!(
        text(&offline.stderr).contains(&daemon.database.display().to_string()),
        "{offline:?}"
    );
    assert_eq!(
        text(&offline.stdout)
            .lines()
            .filter(|line| line.starts_with("fixture://docs/"))
            .count(),
        3
    );
    // A socket without a record: the CLI cannot know and says so, exit 3, reading nothing.
    let unknown = run(&scratch.path("other.sock"), None, &["ls"]);
    assert_eq!(unknown.status.code(), Some(3), "{unknown:?}");
    let said = text(&unknown.stderr);
    assert!(
        said.contains("cannot tell which database") && said.contains("--database"),
        "{said}"
    );
    assert!(unknown.stdout.is_empty(), "{unknown:?}");
    // An explicit --database is always used.
    let given = run(
        &scratch.path("other.sock"),
        Some(&daemon.database),
        &["search", "doc-000001", "--json"],
    );
    assert!(given.status.success(), "{given:?}");
}

#[test]
fn counts_agree_ls_server_lists_its_own_snapshot_and_unknown_servers_exit_4() {
    let scratch = Scratch::new();
    // `first` and `second` list the same four URIs; `first` (priority 10) wins them all.
    // `quiet` speaks the stateless era without listen, so the mirror polls it.
    let servers = format!(
        "{}priority = 10\n\n{}priority = 20\n\n{}",
        stdio_server("first", &["--name", "shared", "--generate", "4"]),
        stdio_server("second", &["--name", "shared", "--generate", "4"]),
        stdio_server(
            "quiet",
            &[
                "--name",
                "quiet",
                "--generate",
                "1",
                "--era",
                "modern",
                "--no-listen"
            ]
        ),
    );
    let mut daemon = Daemon::start(&scratch, &scratch.config(&servers));
    for server in ["first", "second", "quiet"] {
        daemon.wait_for_walks(server, 1);
    }
    wait_for("quiet to be polled", Duration::from_secs(30), || {
        let status = daemon.server_status("quiet");
        status["live"]["push"]
            .as_str()
            .is_some_and(|push| push.starts_with("polling"))
            .then_some(())
    });
    let (socket, database) = (daemon.socket.clone(), daemon.database.clone());

    let status = run(&socket, None, &["status"]);
    assert!(status.status.success(), "{status:?}");
    let shown = text(&status.stdout);
    assert!(
        shown.contains("5 resources (9 listed by 3 servers)"),
        "{shown}"
    );
    let quiet = shown
        .lines()
        .find(|line| line.starts_with("quiet"))
        .unwrap_or_else(|| panic!("no quiet row in\n{shown}"));
    assert!(
        quiet.contains("polling every") && quiet.contains("try era = \"legacy\""),
        "{quiet}"
    );
    let status = run(&socket, None, &["status", "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(status["daemon"]["mergedResources"], 5, "{status}");
    assert_eq!(status["daemon"]["resources"], 9, "{status}");

    let check = |database: Option<&Path>| {
        let merged = run(&socket, database, &["ls"]);
        let rows = |output: &Output| {
            text(&output.stdout)
                .lines()
                .filter(|line| line.starts_with("fixture://shared/"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(rows(&merged).len(), 4, "{merged:?}");
        let second = run(&socket, database, &["ls", "--server", "second"]);
        assert!(second.status.success(), "{second:?}");
        let second_rows = rows(&second);
        assert_eq!(second_rows.len(), 4, "{second:?}");
        assert!(
            second_rows.iter().all(|row| row.contains("first wins")),
            "{second_rows:?}"
        );
        let first = run(&socket, database, &["ls", "--server", "first"]);
        let first_rows = rows(&first);
        assert_eq!(first_rows.len(), 4, "{first:?}");
        assert!(
            first_rows.iter().all(|row| !row.contains("wins")),
            "{first_rows:?}"
        );
        let json = run(&socket, database, &["ls", "--server", "second", "--json"]);
        let entries: Vec<Value> = serde_json::from_slice(&json.stdout).expect("json");
        assert_eq!(entries.len(), 4);
        assert!(
            entries.iter().all(|entry| entry["wonBy"] == "first"),
            "{entries:?}"
        );
        assert!(entries
            .iter()
            .all(|entry| entry["resource"]["_meta"]["io.mcp-mirror/server"] == "second"));

        for args in [
            &["ls", "--server", "nosuch"][..],
            &["search", "doc", "--server", "nosuch"][..],
        ] {
            let output = run(&socket, database, args);
            assert_eq!(output.status.code(), Some(4), "{args:?}: {output:?}");
            assert!(text(&output.stderr).contains("nosuch"), "{output:?}");
        }
        let known = run(&socket, database, &["search", "doc", "--server", "second"]);
        assert!(known.status.success(), "{known:?}");
    };
    check(None);
    daemon.stop();
    check(Some(&database));
}

/// The entries of a help text's `Commands:`, `Arguments:` and `Options:` sections, one line
/// each (clap does not wrap when its output is not a terminal).
fn help_entries(help: &str) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut section = None;
    for line in help.lines() {
        if line.is_empty() {
            section = None;
        } else if let Some(name) = line.strip_suffix(':').filter(|name| !name.starts_with(' ')) {
            section = Some(name.to_string());
        } else if let Some(section) = &section {
            entries.push((section.clone(), line.trim().to_string()));
        }
    }
    entries
}

#[test]
fn every_subcommand_and_flag_has_help_text() {
    let help = |args: &[&str]| {
        let output = Command::new(MIRROR)
            .args(args)
            .arg("--help")
            .output()
            .expect("run mcp-mirror --help");
        assert!(output.status.success(), "{args:?}: {output:?}");
        text(&output.stdout)
    };
    let top = help(&[]);
    let entries = help_entries(&top);
    let commands: Vec<String> = entries
        .iter()
        .filter(|(section, _)| section == "Commands")
        .filter_map(|(_, entry)| entry.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect();
    // The walk sees the subcommands, so a missing one would fail it.
    for expected in [
        "serve",
        "status",
        "ls",
        "templates",
        "search",
        "show",
        "read",
        "refresh",
    ] {
        assert!(commands.iter().any(|name| name == expected), "{top}");
    }
    let mut missing = Vec::new();
    let mut seen = 0;
    for (command, text) in std::iter::once((String::new(), top.clone())).chain(
        commands
            .iter()
            .map(|command| (command.clone(), help(&[command.as_str()]))),
    ) {
        for (section, entry) in help_entries(&text) {
            seen += 1;
            // A spec and its help are two columns, at least two spaces apart.
            if !entry.contains("  ") {
                missing.push(format!("mcp-mirror {command} ({section}): {entry}"));
            }
        }
    }
    assert!(seen > 40, "only {seen} entries parsed");
    assert!(missing.is_empty(), "no help text: {missing:#?}");
}
