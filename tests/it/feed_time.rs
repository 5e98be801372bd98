//! `catalog/changes` and `catalog/watch` from a time on, and the MCP face's `tool_changes` (issue 34): `since` as an RFC 3339 time or an age reads exactly the feed entries written from then on (changes with their summary per server and kind within the caller's view; a watch sends them at once, then what follows); a wrong `since` is `-32602` on a connection that lives on; `mcp-mirror changes --since` prints the summary, then the rows.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::http_face::{fast_daemon_settings, http_exchange_at, TOKEN};
use crate::support::{free_port, run_cli, stdio_server, wait_for, Daemon, Scratch};

const NARROW_TOKEN: &str = "tok-narrow-9c41d0";

/// A scenario of one `weather` tool with this description and these input properties.
fn weather(description: &str, properties: Value) -> Value {
    json!({"tools": [{
        "name": "weather",
        "description": description,
        "inputSchema": {"type": "object", "properties": properties}
    }]})
}

/// A daemon mirroring `pub` and `sec` (one `weather` tool each), behind an HTTP face with the
/// `fleet` token (everything) and `narrow` (server `pub` only).
pub(crate) struct TwoToolServers {
    pub(crate) daemon: Daemon,
    pub(crate) address: String,
    pub(crate) scratch: Scratch,
}

impl TwoToolServers {
    pub(crate) fn start() -> TwoToolServers {
        let scratch = Scratch::new();
        let mut servers = String::new();
        for name in ["pub", "sec"] {
            let city = json!({"city": {"type": "string"}});
            let scenario =
                scratch.write_scenario(&format!("{name}.json"), &weather("Forecasts", city));
            let scenario = scenario.display().to_string();
            servers.push_str(&stdio_server(
                name,
                &["--name", name, "--scenario", &scenario],
            ));
            servers.push('\n');
        }
        let fleet = scratch.write_private("fleet.token", &format!("{TOKEN}\n"));
        let narrow = scratch.write_private("narrow.token", &format!("{NARROW_TOKEN}\n"));
        let address = format!("127.0.0.1:{}", free_port());
        let config = scratch.config(&format!(
            "{servers}[http]\nlisten = \"{address}\"\n\
             tokens = {{ fleet = {:?}, narrow = {{ file = {:?}, servers = [\"pub\"] }} }}\n",
            fleet.display().to_string(),
            narrow.display().to_string(),
        ));
        fast_daemon_settings(&config);
        let daemon = Daemon::start(&scratch, &config);
        wait_for("the HTTP face", Duration::from_secs(20), || {
            std::net::TcpStream::connect(&address).ok().map(|_| ())
        });
        let mirror = TwoToolServers {
            daemon,
            address,
            scratch,
        };
        wait_for("both tools in the feed", Duration::from_secs(30), || {
            let servers = tool_rows(&mirror.feed())
                .iter()
                .map(|change| change["server"].as_str().unwrap_or_default().to_string())
                .collect::<std::collections::BTreeSet<_>>();
            (servers.len() == 2).then_some(())
        });
        mirror
    }

    /// `method` as `token` over the HTTP face: the whole answer.
    pub(crate) fn ask_as(&self, token: &str, method: &str, params: Value) -> Value {
        let bearer = format!("Bearer {token}");
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let answer = http_exchange_at(
            &self.address,
            "POST",
            "/mcp",
            &[("Authorization", &bearer)],
            &body.to_string(),
        );
        assert_eq!(answer.status, 200, "{method}: {}", answer.body);
        answer.json()
    }

    /// The whole kept feed, as the owner sees it.
    pub(crate) fn feed(&self) -> Vec<Value> {
        let answer = self
            .daemon
            .call("catalog/changes", json!({"since": 0, "limit": 10000}));
        answer["changes"].as_array().cloned().unwrap_or_default()
    }

    /// Rewrites `server`'s scenario and waits until the feed holds one more `changed` tool row.
    pub(crate) fn change_tool(&self, server: &str, scenario: &Value) {
        let changed = |feed: &[Value]| {
            tool_rows(feed)
                .iter()
                .filter(|change| change["server"] == server && change["kind"] == "changed")
                .count()
        };
        let before = changed(&self.feed());
        self.scratch
            .write_scenario(&format!("{server}.json"), scenario);
        wait_for(
            "the tool's change in the feed",
            Duration::from_secs(30),
            || (changed(&self.feed()) > before).then_some(()),
        );
    }
}

fn tool_rows(feed: &[Value]) -> Vec<Value> {
    feed.iter()
        .filter(|change| change["entryKind"] == "tool")
        .cloned()
        .collect()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

fn seqs(changes: &Value) -> Vec<i64> {
    changes
        .as_array()
        .expect("changes")
        .iter()
        .map(|change| change["seq"].as_i64().expect("seq"))
        .collect()
}

/// The summary a feed's rows make, counted here: (server, entry kind) -> [added, removed, changed].
fn counted(rows: &[Value]) -> Value {
    let mut servers: std::collections::BTreeMap<(String, String), [u64; 3]> = Default::default();
    for row in rows {
        let key = (
            row["server"].as_str().unwrap_or_default().to_string(),
            row["entryKind"].as_str().unwrap_or_default().to_string(),
        );
        let slot = match row["kind"].as_str() {
            Some("added") => 0,
            Some("removed") => 1,
            Some("changed") => 2,
            other => panic!("a row of kind {other:?}: {row}"),
        };
        servers.entry(key).or_default()[slot] += 1;
    }
    Value::Array(
        servers
            .into_iter()
            .map(|((server, kind), [added, removed, changed])| {
                json!({"server": server, "entryKind": kind, "added": added,
                       "removed": removed, "changed": changed, "unlisted": 0})
            })
            .collect(),
    )
}

#[test]
fn changes_since_a_time_are_exactly_the_newer_entries_summed_up_within_the_view() {
    let mirror = TwoToolServers::start();
    // A boundary between the first loads and the changes, on the millisecond clock both share.
    std::thread::sleep(Duration::from_millis(50));
    let boundary = now_ms();
    std::thread::sleep(Duration::from_millis(50));
    let days = json!({"city": {"type": "string"}, "days": {"type": "integer"}});
    mirror.change_tool("pub", &weather("Forecasts", days));
    let city = json!({"city": {"type": "string"}});
    mirror.change_tool("sec", &weather("Forecasts the rain", city));
    let feed = mirror.feed();
    let (older, newer): (Vec<Value>, Vec<Value>) = feed
        .iter()
        .cloned()
        .partition(|change| change["atMs"].as_i64().expect("atMs") < boundary);
    assert!(!older.is_empty() && !newer.is_empty(), "{feed:?}");

    // An RFC 3339 time: exactly the newer rows, and their summary.
    let since = jiff::Timestamp::from_millisecond(boundary)
        .expect("a time")
        .to_string();
    let answer = mirror
        .daemon
        .call("catalog/changes", json!({"since": since}));
    assert_eq!(
        seqs(&answer["changes"]),
        seqs(&Value::Array(newer.clone())),
        "{answer}"
    );
    let summary = &answer["summary"];
    assert_eq!(summary["servers"], counted(&newer), "{answer}");
    assert_eq!(
        summary["total"],
        json!({"added": 0, "removed": 0, "changed": 2, "unlisted": 0}),
        "{answer}"
    );
    assert_eq!(summary["sinceMs"], boundary);
    assert_eq!(
        summary["afterSeq"].as_i64().expect("afterSeq") + 1,
        newer[0]["seq"].as_i64().expect("seq")
    );
    assert_eq!(answer["truncated"], false);

    // Paged by one: the first page says where the next starts; the summary is the window's.
    let first = mirror
        .daemon
        .call("catalog/changes", json!({"since": since, "limit": 1}));
    assert_eq!(first["more"], true, "{first}");
    assert_eq!(first["nextSince"], newer[0]["seq"], "{first}");
    assert_eq!(first["summary"], answer["summary"], "{first}");
    let rest = mirror
        .daemon
        .call("catalog/changes", json!({"since": first["nextSince"]}));
    assert_eq!(
        seqs(&rest["changes"]),
        seqs(&Value::Array(newer[1..].to_vec()))
    );
    assert!(
        rest.get("summary").is_none(),
        "a sequence has no summary: {rest}"
    );

    // An age reaching before the first loads: the whole feed.
    let hour = mirror
        .daemon
        .call("catalog/changes", json!({"since": "1h"}));
    assert_eq!(seqs(&hour["changes"]), seqs(&Value::Array(feed.clone())));
    assert_eq!(hour["summary"]["servers"], counted(&feed), "{hour}");

    // A wrong `since`: -32602 naming the accepted forms, and the connection lives on.
    let mut connection = mirror.daemon.connect();
    for wrong in [
        json!("yesterday"),
        json!("3651d"),
        json!("1w"),
        json!(-3),
        json!(2.5),
    ] {
        let refused = connection.request("catalog/changes", json!({"since": wrong}));
        assert_eq!(refused["error"]["code"], -32602, "{wrong}: {refused}");
        let message = refused["error"]["message"].as_str().expect("message");
        assert!(
            message.contains("RFC 3339") && message.contains("30m"),
            "{wrong}: {message}"
        );
    }
    let still = connection.request("catalog/changes", json!({"since": "1h"}));
    assert_eq!(seqs(&still["result"]["changes"]), seqs(&hour["changes"]));

    // The narrow token sees `pub` only: neither `sec`'s rows nor its counts.
    let narrow = mirror.ask_as(NARROW_TOKEN, "catalog/changes", json!({"since": "1h"}));
    let narrow = &narrow["result"];
    let pub_rows: Vec<Value> = feed
        .iter()
        .filter(|change| change["server"] == "pub")
        .cloned()
        .collect();
    assert_eq!(
        seqs(&narrow["changes"]),
        seqs(&Value::Array(pub_rows.clone()))
    );
    assert_eq!(narrow["summary"]["servers"], counted(&pub_rows), "{narrow}");
    assert!(!narrow.to_string().contains("\"sec\""), "{narrow}");
    let narrow_total = &narrow["summary"]["total"];
    let pub_added = pub_rows.iter().filter(|row| row["kind"] == "added").count();
    assert_eq!(narrow_total["added"], pub_added as u64, "{narrow}");
    assert_eq!(narrow_total["changed"], 1, "{narrow}");
    let fleet = mirror.ask_as(TOKEN, "catalog/changes", json!({"since": "1h"}));
    for part in ["servers", "total"] {
        assert_eq!(
            fleet["result"]["summary"][part], hour["summary"][part],
            "{fleet}"
        );
    }

    // The CLI: the summary first (per server and kind), then the rows; --json the answer.
    let output = run_cli(&mirror.daemon.socket, &["changes", "--since", &since]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}{output:?}");
    assert!(
        text.starts_with("2 changes since ") && text.contains("0 added, 0 removed, 2 changed"),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|line| line.starts_with("SERVER") && line.contains("CHANGED"))
        .expect("the summary's table");
    assert!(
        lines[header + 1].starts_with("pub") && lines[header + 1].contains("tool"),
        "{text}"
    );
    assert!(lines[header + 2].starts_with("sec"), "{text}");
    assert!(text.contains("SEQ") && text.contains("weather"), "{text}");
    let output = run_cli(
        &mirror.daemon.socket,
        &["changes", "--since", "1h", "--json"],
    );
    let listed: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    for part in ["servers", "total"] {
        assert_eq!(listed["summary"][part], hour["summary"][part], "{listed}");
    }
    assert_eq!(seqs(&listed["changes"]), seqs(&hour["changes"]));
    // A sequence number: the rows after it, counted by the CLI the same way.
    let after = summary["afterSeq"].to_string();
    let output = run_cli(&mirror.daemon.socket, &["changes", "--since", &after]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.starts_with(&format!(
            "2 changes after change {after}: 0 added, 0 removed, 2 changed"
        )),
        "{text}"
    );
    let output = run_cli(
        &mirror.daemon.socket,
        &["changes", "--since", "last tuesday"],
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("RFC 3339"),
        "{output:?}"
    );

    // With no daemon, the same answer from the database file.
    let mut mirror = mirror;
    mirror.daemon.stop();
    let database = mirror.daemon.database.display().to_string();
    let output = run_cli(
        &mirror.daemon.socket,
        &[
            "changes",
            "--since",
            "1h",
            "--json",
            "--database",
            &database,
        ],
    );
    assert!(output.status.success(), "{output:?}");
    let offline: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(seqs(&offline["changes"]), seqs(&hour["changes"]));
    for part in ["servers", "total"] {
        assert_eq!(offline["summary"][part], hour["summary"][part], "{offline}");
    }
}

/// `tools/call` of `tool_changes` as `token` over the HTTP face: the call's result.
fn tool_changes(mirror: &TwoToolServers, token: &str, arguments: Value) -> Value {
    let answer = mirror.ask_as(
        token,
        "tools/call",
        json!({"name": "tool_changes", "arguments": arguments}),
    );
    answer
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("tool_changes {arguments}: {answer}"))
}

#[test]
fn tool_changes_tells_an_agent_what_changed_in_a_tool_it_used_within_its_view() {
    let mirror = TwoToolServers::start();
    let listed = mirror.ask_as(NARROW_TOKEN, "tools/list", json!({}));
    let tool = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|tool| tool["name"] == "tool_changes")
        .cloned()
        .unwrap_or_else(|| panic!("no tool_changes: {listed}"));
    assert_eq!(tool["inputSchema"]["required"], json!(["server", "name"]));
    assert_eq!(tool["inputSchema"]["properties"]["since"]["maxLength"], 64);

    // Before any change: one version, nothing changed.
    let unchanged = tool_changes(
        &mirror,
        NARROW_TOKEN,
        json!({"server": "pub", "name": "weather"}),
    );
    assert_eq!(unchanged["isError"], false, "{unchanged}");
    let structured = &unchanged["structuredContent"];
    assert_eq!(structured["versions"].as_array().map(Vec::len), Some(1));
    assert!(structured.get("diff").is_none(), "{unchanged}");

    std::thread::sleep(Duration::from_millis(50));
    let used_at = jiff::Timestamp::from_millisecond(now_ms())
        .expect("a time")
        .to_string();
    std::thread::sleep(Duration::from_millis(50));
    let days = json!({"city": {"type": "string"}, "days": {"type": "integer"}});
    mirror.change_tool("pub", &weather("Forecasts", days));

    // The last change, in a client's words and as paths; and the same since the time of use.
    for arguments in [
        json!({"server": "pub", "name": "weather"}),
        json!({"server": "pub", "name": "weather", "since": used_at}),
        json!({"server": "pub", "name": "weather", "since": "1h"}),
    ] {
        let answer = tool_changes(&mirror, NARROW_TOKEN, arguments.clone());
        assert_eq!(answer["isError"], false, "{answer}");
        let structured = &answer["structuredContent"];
        let versions = structured["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 2, "{arguments}: {answer}");
        assert_eq!(versions[0]["current"], true, "{answer}");
        let diff = &structured["diff"];
        assert_eq!(
            diff["toolChanges"],
            json!([{"change": "parameterAdded", "parameter": "days", "required": false}]),
            "{arguments}: {answer}"
        );
        assert_eq!(diff["to"]["version"], versions[0]["version"]);
        assert_eq!(diff["from"]["version"], versions[1]["version"]);
        assert_eq!(diff["added"][0]["path"], "/inputSchema/properties/days");
        let text = answer["content"][0]["text"].as_str().expect("text");
        assert!(
            text.contains("parameter `days` added (optional)")
                && text.contains("+ /inputSchema/properties/days"),
            "{text}"
        );
    }

    // Since after the change: nothing changed, only the current version listed.
    std::thread::sleep(Duration::from_millis(50));
    let later = jiff::Timestamp::from_millisecond(now_ms())
        .expect("a time")
        .to_string();
    let answer = tool_changes(
        &mirror,
        NARROW_TOKEN,
        json!({"server": "pub", "name": "weather", "since": later}),
    );
    assert!(
        answer["structuredContent"].get("diff").is_none(),
        "{answer}"
    );
    assert_eq!(
        answer["structuredContent"]["versions"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{answer}"
    );
    assert!(answer["content"][0]["text"]
        .as_str()
        .expect("text")
        .contains("no change since then"));

    // Outside the token's view a tool has no history (the owner's token sees it).
    let hidden = tool_changes(
        &mirror,
        NARROW_TOKEN,
        json!({"server": "sec", "name": "weather"}),
    );
    assert_eq!(hidden["isError"], true, "{hidden}");
    assert!(hidden.get("structuredContent").is_none(), "{hidden}");
    let seen = tool_changes(&mirror, TOKEN, json!({"server": "sec", "name": "weather"}));
    assert_eq!(seen["isError"], false, "{seen}");
    // A wrong `since` is the tool's error, naming the forms it takes.
    let wrong = tool_changes(
        &mirror,
        NARROW_TOKEN,
        json!({"server": "pub", "name": "weather", "since": "last week"}),
    );
    assert_eq!(wrong["isError"], true, "{wrong}");
    assert!(wrong["content"][0]["text"]
        .as_str()
        .expect("text")
        .contains("RFC 3339"));
}

/// Reads `catalog/changed` notifications until one reaches `latest`: their changes' seqs.
fn watched_seqs(client: &mut crate::support::SocketClient, latest: i64) -> Vec<i64> {
    let mut seen = Vec::new();
    while seen.last().copied().unwrap_or(i64::MIN) < latest {
        let message = client.read_message().expect("the watch stays open");
        if message["method"] == "notifications/catalog/changed" {
            seen.extend(seqs(&message["params"]["changes"]));
        }
    }
    seen
}

#[test]
fn watch_since_a_time_sends_exactly_the_changes_written_from_then_on() {
    let mirror = TwoToolServers::start();
    std::thread::sleep(Duration::from_millis(50));
    let boundary = now_ms();
    std::thread::sleep(Duration::from_millis(50));
    let days = json!({"city": {"type": "string"}, "days": {"type": "integer"}});
    mirror.change_tool("pub", &weather("Forecasts", days));
    let feed = mirror.feed();
    let newer: Vec<i64> = feed
        .iter()
        .filter(|change| change["atMs"].as_i64().expect("atMs") >= boundary)
        .map(|change| change["seq"].as_i64().expect("seq"))
        .collect();
    let everything = seqs(&Value::Array(feed.clone()));
    assert!(
        !newer.is_empty() && newer.len() < everything.len(),
        "{feed:?}"
    );

    // An RFC 3339 time: the watch starts before the first change written from then on, and
    // sends exactly those changes at once, without waiting for another swap.
    let since = jiff::Timestamp::from_millisecond(boundary)
        .expect("a time")
        .to_string();
    let mut watcher = mirror.daemon.connect();
    let answer = watcher.request("catalog/watch", json!({"since": since}));
    let latest = answer["result"]["latestSeq"].as_i64().expect("latestSeq");
    assert_eq!(
        answer["result"]["sinceSeq"].as_i64(),
        Some(newer[0] - 1),
        "{answer}"
    );
    assert_eq!(watched_seqs(&mut watcher, latest), newer);

    // An age reaching back past the first loads: every change kept.
    let mut watcher = mirror.daemon.connect();
    let answer = watcher.request("catalog/watch", json!({"since": "1h"}));
    assert_eq!(watched_seqs(&mut watcher, latest), everything, "{answer}");

    // A sequence number as before, and a wrong time refused on a connection that lives on.
    let mut watcher = mirror.daemon.connect();
    let answer = watcher.request("catalog/watch", json!({"since": newer[0] - 1}));
    assert_eq!(answer["result"]["sinceSeq"].as_i64(), Some(newer[0] - 1));
    assert_eq!(watched_seqs(&mut watcher, latest), newer);
    let mut watcher = mirror.daemon.connect();
    let refused = watcher.request("catalog/watch", json!({"since": "last tuesday"}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("RFC 3339")),
        "{refused}"
    );
    let still = watcher.request("catalog/watch", json!({}));
    assert_eq!(
        still["result"]["sinceSeq"].as_i64(),
        Some(latest),
        "{still}"
    );
}
