//! The CLI against a running daemon, and its message when no daemon runs.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{stdio_server, wait_for, Daemon, Scratch, MIRROR};

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
    // The search index has its line: state, generation, documents and size. It holds the
    // 12 resources and the fixture's templates.
    let documents = wait_for(
        "the index of the 12 resources and the templates",
        Duration::from_secs(60),
        || {
            let status = daemon.call("catalog/status", json!({}));
            let index = &status["daemon"]["searchIndex"];
            let documents = index["documents"].as_u64()?;
            (index["state"] == "ready" && documents > 12).then_some(documents)
        },
    );
    let status = stdout(&run(&daemon.socket, &["status"]));
    let line = status
        .lines()
        .find(|line| line.starts_with("search index "))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        line.contains("ready")
            && line.contains("generation ")
            && line.contains(&format!("{documents} documents"))
            && [" B", " kB", " MB", " GB"]
                .iter()
                .any(|unit| line.ends_with(unit))
            && !line.ends_with(" 0.0 MB"),
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

/// What a hostile server may put in any text field: set the window title, ring, clear the screen.
const HOSTILE: &str = "\u{1b}]0;x\u{7}\u{1b}[2J";
const HOSTILE_SHOWN: &str = "\\u{1b}]0;x\\u{7}\\u{1b}[2J";

fn run_with_database(socket: &Path, database: &Path, args: &[&str]) -> Output {
    Command::new(MIRROR)
        .args(args)
        .arg("--socket")
        .arg(socket)
        // The database through the environment: only the commands that read it take it.
        .env("MCP_MIRROR_DATABASE", database)
        .output()
        .expect("run mcp-mirror")
}

/// Human output never carries a raw escape character; `--json` carries the text as it is.
fn human(output: &Output) -> String {
    let text = stdout(output);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "raw control characters in {text:?}"
    );
    text
}

/// Asserts that the table row holding `needle` is there and cut with an ellipsis.
fn assert_cut(text: &str, needle: &str) {
    let row = text
        .lines()
        .find(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("no row with {needle} in {}", &text[..text.len().min(2000)]));
    assert!(
        row.contains('\u{2026}'),
        "not cut: {}",
        &row[..row.len().min(2000)]
    );
    assert!(
        row.chars().count() < 1000,
        "a {}-character row",
        row.chars().count()
    );
}

#[test]
fn long_uris_are_cut_and_server_text_is_escaped_in_human_output_online_and_offline() {
    let scratch = Scratch::new();
    // Long, within the keys' bound (`MAX_KEY_BYTES`, 64 KiB).
    let long_uri = format!("file:///long/{}", "x".repeat(60_000));
    let resources = json!([
        {"uri": long_uri, "name": "long", "title": "Long one", "description": format!("long {HOSTILE} end")},
        {"uri": "file:///hostile", "name": "hostile", "title": format!("Hostile {HOSTILE} title"),
         "description": HOSTILE},
    ]);
    let scenario = scratch.write_scenario("docs.json", &json!({ "resources": resources }));
    // TOML's escapes for the same characters; the path does not exist, so starting it fails
    // and the error quotes it.
    let broken = "[servers.broken]\ncommand = \"/nonexistent/\\u001b]0;x\\u0007\\u001b[2J\"\n\n";
    let servers = format!(
        "{}{broken}",
        stdio_server("docs", &["--scenario", &scenario.display().to_string()])
    );
    let mut daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("docs", 1);
    wait_for(
        "broken to report its error",
        Duration::from_secs(30),
        || {
            daemon.server_status("broken")["lastError"]
                .as_str()
                .map(str::to_string)
        },
    );
    let (socket, database) = (daemon.socket.clone(), daemon.database.clone());
    let run = |args: &[&str]| run_with_database(&socket, &database, args);

    let status = human(&run(&["status"]));
    let row = status
        .lines()
        .find(|line| line.starts_with("broken "))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(row.contains(HOSTILE_SHOWN), "{status}");

    let shown = human(&run(&["show", "file:///hostile"]));
    assert!(
        shown.contains(&format!("Hostile {HOSTILE_SHOWN} title")),
        "{shown}"
    );
    assert!(shown.contains(HOSTILE_SHOWN), "{shown}");
    let json: Value =
        serde_json::from_str(&stdout(&run(&["show", "file:///hostile", "--json"]))).expect("json");
    assert_eq!(
        json["resource"]["description"], HOSTILE,
        "--json stays exact"
    );

    let found = human(&run(&["search", "hostile"]));
    assert!(found.contains(HOSTILE_SHOWN), "{found}");

    // The same with the daemon running and with it stopped (the database read directly).
    for online in [true, false] {
        if !online {
            daemon.stop();
        }
        let listing = human(&run(&["ls"]));
        assert_cut(&listing, "file:///long/xxx");
        assert!(
            listing
                .lines()
                .any(|line| line.starts_with("file:///long/xxx")),
            "{online}"
        );
        let found = human(&run(&["search", "long"]));
        assert_cut(&found, "file:///long/xxx");
        let json: Value =
            serde_json::from_str(&stdout(&run(&["search", "long", "--json"]))).expect("json");
        assert_eq!(
            json["results"][0]["uri"], long_uri,
            "--json has the whole URI"
        );
    }
}

/// A right-to-left override: what follows reads backwards.
const BIDI: &str = "\u{202e}";

/// Whether `text` holds a character no human output may carry raw.
fn has_unprintable(text: &str) -> bool {
    text.chars().any(|character| {
        character.is_control() && character != '\n'
            || matches!(character, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
    })
}

/// Issue 21 item 13: ESC, BEL and U+202E in a tool's name, a field name, an input property
/// and a description, and in an error text, are escaped in `tools`, `show tool`, `drift`,
/// `status` and the daemon's log; `--json` stays exact.
#[test]
fn hostile_names_field_names_descriptions_and_errors_are_escaped_for_humans() {
    let scratch = Scratch::new();
    let name = format!("evil{BIDI}{HOSTILE}");
    let key = format!("x{HOSTILE}{BIDI}");
    let tool = |version: u64| {
        let mut tool = json!({
            "name": name,
            "description": format!("desc {BIDI}{HOSTILE} end"),
            "inputSchema": {"type": "object", "properties": {format!("p{HOSTILE}{BIDI}"): {"type": "string"}}},
        });
        tool[key.as_str()] = json!(version);
        json!({ "tools": [tool] })
    };
    let scenario = scratch.write_scenario("fx.json", &tool(1));
    // TOML's escapes: the path does not exist, so starting it fails and the error quotes it.
    let broken = "[servers.broken]\ncommand = \"/nonexistent/\\u001b]0;x\\u0007\\u202e\"\n\n";
    let servers = format!(
        "{}{broken}",
        stdio_server(
            "fx",
            &[
                "--name",
                "fx",
                "--scenario",
                &scenario.display().to_string()
            ]
        )
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("fx", 1);
    wait_for(
        "broken to report its error",
        Duration::from_secs(30),
        || {
            daemon.server_status("broken")["lastError"]
                .as_str()
                .map(str::to_string)
        },
    );
    // walksOk counts the resource swap; the tools are swapped on their own just after it, so
    // the accept waits for the tool to be listed (or it would accept a server without tools).
    wait_for("the tool to be listed", Duration::from_secs(30), || {
        let tools = daemon.call("catalog/tools", json!({"server": "fx"}));
        (tools["tools"].as_array()?.len() == 1).then_some(())
    });
    let run = |args: &[&str]| run_with_database(&daemon.socket, &daemon.database, args);
    let accepted = run(&["accept", "--server", "fx", "--json"]);
    assert!(accepted.status.success(), "{accepted:?}");
    let accepted: Value = serde_json::from_str(&stdout(&accepted)).expect("json");
    assert_eq!(accepted["accepted"], 1, "{accepted}");
    scratch.write_scenario("fx.json", &tool(2));
    wait_for("the drift", Duration::from_secs(30), || {
        let drift = daemon.call("catalog/drift", json!({"server": "fx"}));
        (!drift["drift"].as_array()?.is_empty()).then_some(())
    });

    let humane = |args: &[&str]| {
        let output = run(args);
        let text = stdout(&output) + &String::from_utf8_lossy(&output.stderr);
        assert!(!has_unprintable(&text), "{args:?}: {text:?}");
        text
    };
    let tools = humane(&["tools"]);
    assert!(tools.contains("evil\\u{202e}\\u{1b}]0;x"), "{tools}");
    let shown = humane(&["show", "tool", &format!("fx/{name}")]);
    assert!(shown.contains("desc \\u{202e}\\u{1b}]0;x\\u{7}"), "{shown}");
    assert!(
        shown.contains(&format!("x{HOSTILE_SHOWN}\\u{{202e}}:")),
        "{shown}"
    );
    let drift = humane(&["drift"]);
    assert!(
        drift.contains(&format!("x{HOSTILE_SHOWN}\\u{{202e}}:")),
        "{drift}"
    );
    let status = humane(&["status"]);
    assert!(status.contains("\\u{7}\\u{202e}"), "{status}");
    // An unknown tool's error quotes the name the user typed, escaped too.
    let missing = run(&["show", "tool", &format!("fx/missing{BIDI}")]);
    let error = String::from_utf8_lossy(&missing.stderr);
    assert!(
        error.contains("missing\\u{202e}") && !has_unprintable(&error),
        "{error:?}"
    );
    let json: Value = serde_json::from_str(&stdout(&run(&[
        "show",
        "tool",
        &format!("fx/{name}"),
        "--json",
    ])))
    .expect("json");
    assert_eq!(json["definition"][key.as_str()], 2, "--json stays exact");

    let log = daemon.log_text();
    assert!(!has_unprintable(&log), "raw characters in the log");
    assert!(
        log.contains("\\u{7}\\u{202e}"),
        "the error is logged escaped"
    );
}
