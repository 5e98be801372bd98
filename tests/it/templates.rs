//! Templated reads (issue 9 item 7): a URI that no server lists but that matches a mirrored
//! template is read from that template's server, by priority, on the socket, the CLI and the
//! bridge; `templates` lists them and `show` shows one, online and offline.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{stdio_server, Daemon, Scratch, MIRROR};

fn run(daemon: &Daemon, args: &[&str]) -> Output {
    Command::new(MIRROR)
        .args(args)
        .arg("--socket")
        .arg(&daemon.socket)
        // The database through the environment: only the commands that read it take it.
        .env("MCP_MIRROR_DATABASE", &daemon.database)
        .output()
        .expect("run mcp-mirror")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `docs` (priority 100) serves the fixture's default templates; `early` (priority 50) also
/// lists `fixture://docs/topics/{topic}`, so it wins that one; `shadow` (priority 200) lists
/// docs' `docs/{id}.md` template too (docs wins it) and its own `{+path}` template.
fn start(scratch: &Scratch) -> Daemon {
    let template =
        |uri_template: &str, name: &str| json!({"uriTemplate": uri_template, "name": name});
    let early = scratch.write_scenario(
        "early.json",
        &json!({"templates": [template("fixture://docs/topics/{topic}", "early-topics")]}),
    );
    let shadow = scratch.write_scenario(
        "shadow.json",
        &json!({"templates": [
            template("fixture://docs/docs/{id}.md", "shadowed"),
            template("shadow://items/{+path}", "items"),
        ]}),
    );
    let servers = format!(
        "{}{}priority = 50\n\n{}priority = 200\n\n",
        stdio_server("docs", &["--name", "docs", "--generate", "3"]),
        stdio_server(
            "early",
            &[
                "--name",
                "early",
                "--scenario",
                &early.display().to_string()
            ]
        ),
        stdio_server(
            "shadow",
            &[
                "--name",
                "shadow",
                "--scenario",
                &shadow.display().to_string()
            ]
        ),
    );
    let daemon = Daemon::start(scratch, &scratch.config(&servers));
    for server in ["docs", "early", "shadow"] {
        daemon.wait_for_walks(server, 1);
    }
    daemon
}

fn read(daemon: &Daemon, uri: &str) -> Value {
    daemon
        .connect()
        .request("resources/read", json!({ "uri": uri }))
}

#[test]
fn templated_uris_are_read_from_the_winning_templates_server() {
    let scratch = Scratch::new();
    let daemon = start(&scratch);

    // (uri, the server that must answer, the template it matched)
    let cases = [
        (
            "fixture://docs/docs/999999.md",
            "docs",
            "fixture://docs/docs/{id}.md",
        ),
        (
            "fixture://docs/topics/rust",
            "early",
            "fixture://docs/topics/{topic}",
        ),
        (
            "fixture://docs/search?limit=2&q=x",
            "docs",
            "fixture://docs/search{?q,limit}",
        ),
        (
            "fixture://docs/search",
            "docs",
            "fixture://docs/search{?q,limit}",
        ),
        (
            "shadow://items/a/b/c.txt",
            "shadow",
            "shadow://items/{+path}",
        ),
    ];
    for (uri, server, template) in cases {
        let answer = read(&daemon, uri);
        let result = &answer["result"];
        assert_eq!(
            result["_meta"]["io.mcp-mirror/server"], server,
            "{uri}: {answer}"
        );
        assert_eq!(
            result["contents"][0]["text"],
            format!("contents of {uri} from template {template}"),
            "{uri}: {answer}"
        );
    }
    // A listed URI still goes by the merged catalog, not by templates.
    let listed = read(&daemon, "fixture://docs/docs/000001.md");
    assert_eq!(
        listed["result"]["contents"][0]["text"], "contents of fixture://docs/docs/000001.md",
        "{listed}"
    );
    // No template matches: not found, as before.
    for uri in [
        "fixture://docs/elsewhere/1",
        "fixture://docs/docs/a/b.md",
        "fixture://docs/search?other=1",
    ] {
        let answer = read(&daemon, uri);
        assert_eq!(answer["error"]["code"], -32002, "{uri}: {answer}");
    }

    // The CLI reads the same way.
    let output = run(&daemon, &["read", "fixture://docs/topics/rust"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        text(&output.stdout),
        "contents of fixture://docs/topics/rust from template fixture://docs/topics/{topic}"
    );
    assert_eq!(
        run(&daemon, &["read", "fixture://docs/elsewhere/1"])
            .status
            .code(),
        Some(4)
    );

    // And so does the stdio bridge.
    let mut bridge = Command::new(MIRROR)
        .arg("mcp")
        .arg("--socket")
        .arg(&daemon.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the bridge");
    let mut stdin = bridge.stdin.take().expect("stdin");
    let stdout = bridge.stdout.take().expect("stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
            "params": {"uri": "shadow://items/x/y"}}),
    ];
    for message in messages {
        writeln!(stdin, "{message}").expect("write to the bridge");
    }
    stdin.flush().expect("flush");
    let answer = loop {
        let line = received
            .recv_timeout(Duration::from_secs(20))
            .expect("the bridge's answer to the read");
        let message: Value = serde_json::from_str(&line).expect("json line");
        if message["id"] == 2 {
            break message;
        }
    };
    assert_eq!(
        answer["result"]["contents"][0]["text"],
        "contents of shadow://items/x/y from template shadow://items/{+path}",
        "{answer}"
    );
    drop(stdin);
    let _ = bridge.wait();
}

#[test]
fn templates_lists_the_merged_templates_and_show_shows_one_online_and_offline() {
    let scratch = Scratch::new();
    let mut daemon = start(&scratch);

    let check = |daemon: &Daemon| {
        let listed = run(daemon, &["templates"]);
        assert!(listed.status.success(), "{listed:?}");
        let table = text(&listed.stdout);
        assert!(table.starts_with("URI TEMPLATE"), "{table}");
        let row = |template: &str| {
            table
                .lines()
                .find(|line| line.starts_with(template))
                .unwrap_or_else(|| panic!("no row for {template} in\n{table}"))
                .to_string()
        };
        assert!(
            row("fixture://docs/docs/{id}.md").contains("docs"),
            "{table}"
        );
        assert!(
            row("fixture://docs/topics/{topic}").contains("early"),
            "{table}"
        );
        assert!(row("shadow://items/{+path}").contains("shadow"), "{table}");

        let json = run(daemon, &["templates", "--json"]);
        let all: Vec<Value> = serde_json::from_slice(&json.stdout).expect("json");
        // docs' three, early's one (it wins the topics template), shadow's own one.
        assert_eq!(all.len(), 4, "{all:?}");
        let doc = all
            .iter()
            .find(|template| template["uriTemplate"] == "fixture://docs/docs/{id}.md")
            .expect("docs template");
        assert_eq!(doc["name"], "doc-by-id");
        assert_eq!(doc["_meta"]["io.mcp-mirror/server"], "docs");

        let shown = run(daemon, &["show", "fixture://docs/search{?q,limit}"]);
        assert!(shown.status.success(), "{shown:?}");
        let shown = text(&shown.stdout);
        assert!(
            shown.contains("Search documents") && shown.contains("server:"),
            "{shown}"
        );
        let shown = run(daemon, &["show", "--json", "fixture://docs/topics/{topic}"]);
        let template: Value = serde_json::from_slice(&shown.stdout).expect("json");
        assert_eq!(template["name"], "early-topics");
        assert_eq!(
            run(daemon, &["show", "fixture://docs/none/{x}"])
                .status
                .code(),
            Some(4)
        );
    };
    check(&daemon);
    daemon.stop();
    check(&daemon);
}

/// The peak resident set (`VmHWM`) of a process, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kilobytes: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kilobytes * 1024
}

/// The start of a long text, for assertion messages.
fn short(text: &str) -> &str {
    &text[..text.len().min(300)]
}

/// Reads of unlisted URIs (the ones every stored template is tried on) leave the daemon up,
/// and good servers' templates still route.
fn read_unlisted_uris(daemon: &mut Daemon) {
    let long = "a".repeat(4000);
    let slashes = "a/".repeat(2000);
    for round in 0..3 {
        for uri in [long.as_str(), slashes.as_str(), "x://unlisted", "aaaa?"] {
            let answer = read(daemon, uri);
            assert_eq!(
                answer["error"]["code"],
                -32002,
                "round {round}, {}: {}",
                short(uri),
                short(&answer.to_string())
            );
        }
        let answer = read(daemon, "fixture://docs/docs/999999.md");
        assert_eq!(
            answer["result"]["_meta"]["io.mcp-mirror/server"],
            "docs",
            "{}",
            short(&answer.to_string())
        );
        assert!(
            daemon.child.try_wait().expect("wait").is_none(),
            "the daemon died: {}",
            daemon.log_text()
        );
    }
}

/// Issue 21 items 1 and 2: a server listing 15,000 adjacent `{a}` (45 KB) and `{a}/` x
/// 200,000 (781 KB). Both are over the bounds and skipped at the walk, the server's other
/// templates kept; templates a database already holds (an older version stored them) cost a
/// bounded match on every read of an unlisted URI, after a restart too, and RSS stays small.
#[test]
fn hostile_templates_are_bounded_and_never_crash_the_daemon() {
    let scratch = Scratch::new();
    let adjacent = "{a}".repeat(15_000);
    let slashes = "{a}/".repeat(200_000);
    let costly = format!("{}!", "{a}".repeat(64));
    let hostile = scratch.write_scenario(
        "hostile.json",
        &json!({"templates": [
            {"uriTemplate": adjacent, "name": "adjacent"},
            {"uriTemplate": slashes, "name": "slashes"},
            {"uriTemplate": costly, "name": "costly"},
            {"uriTemplate": "hostile://ok/{id}", "name": "ok"},
        ]}),
    );
    let docs = stdio_server("docs", &["--name", "docs", "--generate", "3"]);
    let servers = format!(
        "{}{}priority = 10\n\n",
        docs,
        stdio_server(
            "hostile",
            &[
                "--name",
                "hostile",
                "--scenario",
                &hostile.display().to_string()
            ]
        ),
    );
    let mut daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("docs", 1);
    let status = daemon.wait_for_walks("hostile", 1);
    assert_eq!(status["lastWalk"]["skipped"], 2, "{status}");
    let log = daemon.log_text();
    assert!(
        log.contains("skipped 2 URI template(s) over the bounds")
            && log.contains("(max_template_bytes)"),
        "{log}"
    );
    let templates = daemon.call("resources/templates/list", json!({}));
    let listed: Vec<&str> = templates["resourceTemplates"]
        .as_array()
        .expect("templates")
        .iter()
        .filter_map(|template| template["uriTemplate"].as_str())
        .collect();
    assert!(listed.contains(&"hostile://ok/{id}") && listed.contains(&costly.as_str()));
    assert!(!listed.iter().any(|template| template.len() > 4096));
    read_unlisted_uris(&mut daemon);
    let answer = read(&daemon, "hostile://ok/7");
    assert_eq!(
        answer["result"]["_meta"]["io.mcp-mirror/server"],
        "hostile",
        "{}",
        short(&answer.to_string())
    );
    let peak = peak_rss(daemon.child.id());
    eprintln!("peak RSS of the daemon: {} MiB", peak >> 20);
    assert!(peak < 400 << 20, "peak RSS {peak} bytes");
    daemon.stop();

    // A database an older version wrote holds them; the server cannot be reached now, so its
    // snapshot (with them) is what reads see after the restart.
    let database = rusqlite::Connection::open(&daemon.database).expect("open the database");
    let hostile_id: i64 = database
        .query_row("SELECT id FROM servers WHERE name = 'hostile'", [], |row| {
            row.get(0)
        })
        .expect("hostile's row");
    let many = format!("{}!", "{a}".repeat(1000));
    for (index, template) in [adjacent.as_str(), slashes.as_str(), many.as_str()]
        .iter()
        .enumerate()
    {
        database
            .execute(
                "INSERT INTO resource_templates (server_id, uri_template, name, raw)
                 VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![
                    hostile_id,
                    template,
                    format!("stored-{index}"),
                    json!({"uriTemplate": template, "name": format!("stored-{index}")}).to_string()
                ],
            )
            .expect("store a hostile template");
    }
    drop(database);
    let servers = format!("{docs}[servers.hostile]\ncommand = \"/bin/false\"\npriority = 10\n\n");
    let mut daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("docs", 1);
    read_unlisted_uris(&mut daemon);
    // Its own template still routes to it (offline now).
    let answer = read(&daemon, "hostile://ok/7");
    assert_eq!(
        answer["error"]["data"]["server"],
        "hostile",
        "{}",
        short(&answer.to_string())
    );
    let peak = peak_rss(daemon.child.id());
    eprintln!(
        "peak RSS of the daemon after the restart: {} MiB",
        peak >> 20
    );
    assert!(peak < 400 << 20, "peak RSS after the restart {peak} bytes");
}
