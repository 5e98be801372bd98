//! Tools and prompts: walked, swapped, fed, drift-checked and searched like resources, against the fixture and server-everything.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::install::{python_sdk, repository, server_everything};
use crate::support::{run_cli, stdio_server, wait_for, Daemon, Scratch, MIRROR};

fn tool(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "title": format!("The {name} tool"),
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "Which city to look at"}},
            "required": ["city"]
        },
        "outputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": true},
        "icons": [{"src": "https://example.com/icon.png"}],
        "_meta": {"vendor/x": 1}
    })
}

fn scenario(weather_description: &str) -> Value {
    json!({
        "tools": [
            tool("alpha", "First tool"),
            tool("beta", "Second tool"),
            tool("gamma", "Third tool"),
            tool("delta", "Fourth tool"),
            tool("weather", weather_description),
        ],
        "tools_page_size": 2,
        "prompts": [{
            "name": "summarize",
            "title": "Summarize",
            "description": "Summarizes a text",
            "arguments": [{"name": "text", "description": "What to summarize", "required": true}]
        }]
    })
}

/// Every entry of `catalog/tools` (or `/prompts`), following cursors.
fn list_all(daemon: &Daemon, method: &str, key: &str) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let page = daemon.call(method, params);
        entries.extend(page[key].as_array().expect("array").iter().cloned());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return entries,
        }
    }
}

fn call_tool(daemon: &Daemon, name: &str, arguments: Value) -> Value {
    daemon.call("tools/call", json!({"name": name, "arguments": arguments}))
}

#[test]
fn fixture_tools_are_mirrored_fed_drift_checked_and_searchable() {
    let scratch = Scratch::new();
    let path = scratch.write_scenario("scenario.json", &scenario("Forecasts the weather"));
    let daemon = Daemon::with_scenario(&scratch, "fx", &path);

    // Five tools over three pages of tools/list, every field kept, the origin in `_meta`.
    let tools = wait_for("the tools", Duration::from_secs(30), || {
        let tools = list_all(&daemon, "catalog/tools", "tools");
        (tools.len() == 5).then_some(tools)
    });
    for listed in &tools {
        assert_eq!(listed["_meta"]["io.mcp-mirror/server"], "fx", "{listed}");
        assert_eq!(listed["_meta"]["vendor/x"], 1, "{listed}");
    }
    let weather = daemon.call("catalog/tool", json!({"server": "fx", "name": "weather"}));
    assert_eq!(
        weather["definition"],
        tool("weather", "Forecasts the weather")
    );
    // Prompts are walked and swapped after the tools: wait for them too.
    let prompts = wait_for("the prompts", Duration::from_secs(30), || {
        let prompts = list_all(&daemon, "catalog/prompts", "prompts");
        (!prompts.is_empty()).then_some(prompts)
    });
    assert_eq!(prompts.len(), 1);
    let prompt = daemon.call(
        "catalog/prompt",
        json!({"server": "fx", "name": "summarize"}),
    );
    assert_eq!(prompt["definition"]["arguments"][0]["name"], "text");
    let missing = daemon
        .connect()
        .request("catalog/tool", json!({"server": "fx", "name": "nope"}));
    assert!(missing.get("error").is_some(), "{missing}");

    let status = daemon.server_status("fx");
    assert_eq!(status["kinds"]["tool"]["count"], 5, "{status}");
    assert_eq!(status["kinds"]["prompt"]["count"], 1, "{status}");
    assert!(status["kinds"]["tool"].get("drift").is_none(), "{status}");

    // Accept, then the server changes one description and sends tools/list_changed.
    let accepted = daemon.call("catalog/accept", json!({"server": "fx"}));
    assert_eq!(accepted["accepted"], 6);
    let status = daemon.server_status("fx");
    assert_eq!(
        status["kinds"]["tool"]["drift"],
        json!({"added": 0, "removed": 0, "changed": 0})
    );
    let since = daemon.call("catalog/changes", json!({}))["latestSeq"].clone();
    let resources_walked_at = daemon.server_status("fx")["lastWalk"]["atMs"].clone();
    scratch.write_scenario("scenario.json", &scenario("Predicts the zephyr and rain"));

    let change = wait_for("the feed entry", Duration::from_secs(10), || {
        let page = daemon.call("catalog/changes", json!({"since": since}));
        page["changes"]
            .as_array()
            .and_then(|changes| {
                changes
                    .iter()
                    .find(|change| change["entryKind"] == "tool" && change["name"] == "weather")
            })
            .cloned()
    });
    assert_eq!(change["kind"], "changed", "{change}");
    assert_eq!(change["fields"], json!(["description"]), "{change}");
    assert_eq!(change["server"], "fx");
    // tools/list_changed re-walked the tools only: the resource walk is the one from before.
    assert_eq!(
        daemon.server_status("fx")["lastWalk"]["atMs"],
        resources_walked_at
    );

    let drift = daemon.call("catalog/drift", json!({"server": "fx"}));
    let entries = drift["drift"].as_array().expect("drift");
    assert_eq!(entries.len(), 1, "{drift}");
    assert_eq!(entries[0]["kind"], "tool");
    assert_eq!(entries[0]["name"], "weather");
    assert_eq!(entries[0]["change"], "changed");
    assert_eq!(
        entries[0]["fields"]["description"],
        json!({"accepted": "Forecasts the weather", "current": "Predicts the zephyr and rain"})
    );
    // Drift is a diff against the accepted version: catalog/diff's own, between the history's
    // accepted and current versions.
    let (accepted, current) = (
        entries[0]["acceptedVersion"]
            .as_i64()
            .expect("the accepted version"),
        entries[0]["currentVersion"]
            .as_i64()
            .expect("the current version"),
    );
    assert!(accepted < current, "{drift}");
    let diff = daemon.call(
        "catalog/diff",
        json!({"kind": "tool", "server": "fx", "key": "weather", "from": accepted, "to": current}),
    );
    for part in ["added", "removed", "changed", "toolChanges"] {
        assert_eq!(
            entries[0]["diff"][part], diff[part],
            "{part}: {drift} {diff}"
        );
    }
    assert_eq!(
        entries[0]["diff"]["changed"],
        json!([{"path": "/description", "from": "Forecasts the weather", "to": "Predicts the zephyr and rain"}])
    );
    assert_eq!(
        entries[0]["diff"]["toolChanges"][0]["change"],
        "descriptionChanged"
    );
    let status = daemon.server_status("fx");
    assert_eq!(status["kinds"]["tool"]["drift"]["changed"], 1, "{status}");

    // The MCP face: declared tools, search by a word of the new description, describe.
    let mut client = daemon.connect();
    let initialize = client.request("initialize", json!({"protocolVersion": "2025-11-25"}));
    assert!(
        initialize["result"]["capabilities"]["tools"].is_object(),
        "{initialize}"
    );
    let listed = client.request("tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(names, ["search_catalog", "describe_entry", "tool_changes"]);

    let found = call_tool(&daemon, "search_catalog", json!({"query": "zephyr"}));
    assert_eq!(found["isError"], false, "{found}");
    let hits = found["structuredContent"]["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["kind"], "tool");
    assert_eq!(hits[0]["server"], "fx");
    assert_eq!(hits[0]["name"], "weather");
    assert_eq!(hits[0]["description"], "Predicts the zephyr and rain");
    assert!(found["content"][0]["text"]
        .as_str()
        .expect("text")
        .contains("tool fx/weather"));
    // Input property descriptions are indexed too; `kinds` filters.
    let by_input = call_tool(
        &daemon,
        "search_catalog",
        json!({"query": "city", "kinds": ["tool"], "limit": 3}),
    );
    assert_eq!(
        by_input["structuredContent"]["hits"]
            .as_array()
            .expect("hits")
            .len(),
        3
    );
    let prompts_only = call_tool(
        &daemon,
        "search_catalog",
        json!({"query": "summarize", "kinds": ["prompt"]}),
    );
    assert_eq!(
        prompts_only["structuredContent"]["hits"][0]["name"],
        "summarize"
    );

    let described = call_tool(
        &daemon,
        "describe_entry",
        json!({"kind": "tool", "server": "fx", "name": "weather"}),
    );
    assert_eq!(
        described["structuredContent"]["description"],
        "Predicts the zephyr and rain"
    );
    assert_eq!(
        described["structuredContent"]["inputSchema"]["required"],
        json!(["city"])
    );
    let unknown = daemon
        .connect()
        .request("tools/call", json!({"name": "weather", "arguments": {}}));
    assert!(unknown.get("error").is_some(), "{unknown}");

    // The same through the CLI.
    let cli = |args: &[&str]| {
        let output = run_cli(&daemon.socket, args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).expect("utf-8")
    };
    let listed: Value =
        serde_json::from_str(&cli(&["tools", "--server", "fx", "--json"])).expect("json");
    assert_eq!(listed.as_array().expect("array").len(), 5);
    assert!(cli(&["prompts"]).contains("summarize"));
    let shown = cli(&["show", "tool", "fx/weather"]);
    assert!(shown.contains("Predicts the zephyr and rain"), "{shown}");
    assert!(shown.contains("inputSchema:"), "{shown}");
    let drifted = cli(&["drift", "--server", "fx"]);
    assert!(
        drifted.starts_with("drift: each tool and prompt diffed against its accepted version"),
        "{drifted}"
    );
    assert!(
        drifted.contains(&format!(
            "changed tool fx/weather (accepted version {accepted}, current version {current})"
        )),
        "{drifted}"
    );
    assert!(
        drifted.contains("  * description changed")
            && drifted.contains(
                "  ~ /description: \"Forecasts the weather\" -> \"Predicts the zephyr and rain\""
            ),
        "{drifted}"
    );
    let accepted: Value =
        serde_json::from_str(&cli(&["accept", "--server", "fx", "--json"])).expect("json");
    assert_eq!(accepted["accepted"], 6);
    assert!(cli(&["drift"]).contains("no drift"));
    let drift_json: Value = serde_json::from_str(&cli(&["drift", "--json"])).expect("json");
    assert_eq!(drift_json["drift"], json!([]));
    // An unknown server is "not found" (exit 4), as for every other command, not "no drift".
    for command in ["drift", "accept"] {
        let output = run_cli(&daemon.socket, &[command, "--server", "nosuch"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(4), "{command}: {output:?}");
        assert!(
            stderr.contains("no server named nosuch"),
            "{command}: {stderr}"
        );
    }
}

/// Runs server-everything over stdio and returns what its own `tools/list` and `prompts/list`
/// answer (all pages).
fn ask_server_everything(entry: &std::path::Path) -> (Vec<Value>, Vec<Value>) {
    let mut child = Command::new("node")
        .arg(entry)
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server-everything");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut next_id = 0;
    let tools_changed = std::cell::Cell::new(false);
    let mut send = |message: Value| writeln!(stdin, "{message}").expect("write");
    let mut request = |method: &str, params: Value, send: &mut dyn FnMut(Value)| -> Value {
        next_id += 1;
        send(json!({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).expect("read") > 0, "eof");
            let Ok(reply) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if reply["method"] == "notifications/tools/list_changed" {
                tools_changed.set(true);
            }
            if reply["id"] == next_id && reply.get("method").is_none() {
                return reply["result"].clone();
            }
        }
    };
    request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        &mut send,
    );
    // After `initialized` it registers one more tool and says so with tools/list_changed:
    // ping until that notification arrived (or a few seconds passed), as the mirror sees it.
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        request("ping", json!({}), &mut send);
        if tools_changed.get() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut all = |method: &str, key: &str| {
        let mut items = Vec::new();
        let mut cursor: Option<Value> = None;
        loop {
            let params = cursor
                .take()
                .map(|cursor| json!({"cursor": cursor}))
                .unwrap_or_else(|| json!({}));
            let page = request(method, params, &mut send);
            items.extend(page[key].as_array().expect("list").iter().cloned());
            match page.get("nextCursor") {
                Some(next) if next.is_string() => cursor = Some(next.clone()),
                _ => return items,
            }
        }
    };
    let tools = all("tools/list", "tools");
    let prompts = all("prompts/list", "prompts");
    let _ = child.kill();
    let _ = child.wait();
    (tools, prompts)
}

/// Waits until the mirror holds as many tools and prompts of `everything` as its own lists
/// answer, then checks each definition field for field.
fn assert_mirrors_every_tool_and_prompt(daemon: &Daemon, tools: Vec<Value>, prompts: Vec<Value>) {
    for (kind, expected) in [("tool", tools), ("prompt", prompts)] {
        let expected: BTreeMap<String, Value> = expected
            .into_iter()
            .map(|item| (item["name"].as_str().expect("name").to_string(), item))
            .collect();
        wait_for(
            &format!("every {kind} of server-everything"),
            Duration::from_secs(30),
            || {
                let status = daemon.server_status("everything");
                (status["kinds"][kind]["count"].as_u64() == Some(expected.len() as u64))
                    .then_some(())
            },
        );
        for (name, definition) in &expected {
            let mirrored = daemon.call(
                &format!("catalog/{kind}"),
                json!({"server": "everything", "name": name}),
            );
            assert_eq!(&mirrored["definition"], definition, "{kind} {name}");
        }
    }
    let log = daemon.log_text();
    assert!(!log.contains("ERROR"), "{log}");
}

#[test]
fn server_everything_2026_8_31_tools_and_prompts_are_mirrored_field_for_field() {
    let entry = server_everything("2026.8.31");
    let (tools, prompts) = ask_server_everything(&entry);
    assert!(!tools.is_empty() && !prompts.is_empty());
    let scratch = Scratch::new();
    let config = scratch.config(&format!(
        "[servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
        entry.display().to_string()
    ));
    let daemon = Daemon::start(&scratch, &config);
    assert_mirrors_every_tool_and_prompt(&daemon, tools, prompts);
}

/// Over Streamable HTTP too: every tool and prompt, field for field, including the tool it
/// registers after `initialized` and announces with `notifications/tools/list_changed`, which
/// re-walks tools (the first tools walk may come before it).
#[test]
fn server_everything_2026_8_31_over_streamable_http_mirrors_tools_and_prompts() {
    let entry = server_everything("2026.8.31");
    let (tools, prompts) = ask_server_everything(&entry);
    let server = crate::interop::NodeServer::start(&entry, "streamableHttp");
    let scratch = Scratch::new();
    let config = scratch.config(&format!(
        "[servers.everything]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
        server.port
    ));
    let daemon = Daemon::start(&scratch, &config);
    let status = daemon.wait_for_walks("everything", 1);
    assert_eq!(status["live"]["transport"], "streamable-http", "{status}");
    assert_mirrors_every_tool_and_prompt(&daemon, tools, prompts);
}

#[test]
fn the_python_sdk_client_searches_and_describes_through_the_bridge() {
    let scratch = Scratch::new();
    let path = scratch.write_scenario("scenario.json", &scenario("Forecasts the weather"));
    let daemon = Daemon::with_scenario(&scratch, "fx", &path);
    wait_for("the tools", Duration::from_secs(30), || {
        let status = daemon.server_status("fx");
        (status["kinds"]["tool"]["count"] == 5).then_some(())
    });
    let output = Command::new(python_sdk())
        .arg(repository().join("tests/interop/catalog_tools_client.py"))
        .arg(MIRROR)
        .arg(&daemon.socket)
        .arg("forecasts")
        .output()
        .expect("run the Python client");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).expect("the client's JSON");
    assert_eq!(seen["toolsCapability"], true, "{seen}");
    assert_eq!(
        seen["tools"],
        json!(["search_catalog", "describe_entry", "tool_changes"])
    );
    let hits = &seen["search"]["structuredContent"]["hits"];
    assert_eq!(hits.as_array().map(Vec::len), Some(1), "{seen}");
    assert_eq!(hits[0]["name"], "weather");
    assert_eq!(hits[0]["kind"], "tool");
    assert_eq!(
        seen["describe"]["structuredContent"]["description"], "Forecasts the weather",
        "{seen}"
    );
}

#[test]
fn a_failed_tools_walk_keeps_the_last_complete_snapshot() {
    let scratch = Scratch::new();
    let two = json!({"tools": [tool("alpha", "First tool"), tool("beta", "Second tool")]});
    let path = scratch.write_scenario("scenario.json", &two);
    let scenario = path.display().to_string();
    let server = stdio_server("fx", &["--name", "fx", "--scenario", &scenario]);
    let daemon = Daemon::start(
        &scratch,
        &scratch.config(&format!("{server}max_items = 3\n")),
    );
    wait_for("the two tools", Duration::from_secs(30), || {
        (daemon.server_status("fx")["kinds"]["tool"]["count"] == 2).then_some(())
    });

    // Five tools are more than max_items: the walk fails and the two stay, marked stale.
    let names = ["alpha", "beta", "gamma", "delta", "epsilon"];
    let five: Vec<Value> = names.iter().map(|name| tool(name, "changed")).collect();
    scratch.write_scenario("scenario.json", &json!({"tools": five}));
    let status = wait_for("the failed walk", Duration::from_secs(10), || {
        let status = daemon.server_status("fx");
        let error = status["lastError"].as_str().unwrap_or("");
        error.contains("max_items").then_some(status)
    });
    assert_eq!(status["state"], "failed", "{status}");
    assert_eq!(status["stale"], true, "{status}");
    assert_eq!(status["kinds"]["tool"]["count"], 2, "{status}");
    let tools = list_all(&daemon, "catalog/tools", "tools");
    let kept: Vec<&str> = tools
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(kept, ["alpha", "beta"]);
    assert_eq!(tools[0]["description"], "First tool");
}

#[test]
fn a_server_is_synced_only_once_its_tools_are_in_too() {
    // The resources are swapped in at once; each page of tools takes 700 ms more.
    let scratch = Scratch::new();
    let mut slow = scenario("Forecasts the weather");
    slow["generate"] = json!(10);
    slow["faults"] = json!({"tools_page_delay_ms": 700});
    let path = scratch.write_scenario("scenario.json", &slow);
    let daemon = Daemon::with_scenario(&scratch, "fx", &path);

    // The resources are in and the tools are not: neither `synced` nor a walk yet.
    let status = wait_for("the resources", Duration::from_secs(30), || {
        let status = daemon.server_status("fx");
        (status["resources"] == 10).then_some(status)
    });
    assert_eq!(
        status["kinds"]["tool"]["count"].as_u64().unwrap_or(0),
        0,
        "{status}"
    );
    assert_eq!(status["state"], "walking", "{status}");
    assert_eq!(status["walksOk"], 0, "{status}");

    // Whoever waits for `synced` finds the walk's tools and prompts there.
    let status = wait_for("synced", Duration::from_secs(30), || {
        let status = daemon.server_status("fx");
        (status["state"] == "synced").then_some(status)
    });
    assert_eq!(status["walksOk"], 1, "{status}");
    assert_eq!(list_all(&daemon, "catalog/tools", "tools").len(), 5);
    assert_eq!(list_all(&daemon, "catalog/prompts", "prompts").len(), 1);
}

/// The scenario of `scenario` with one resource whose text shares a word with a tool's.
fn scenario_with_resource() -> Value {
    let mut scenario = scenario("Forecasts the weather");
    scenario["resources"] = json!([{
        "uri": "file:///notes/weather.md",
        "name": "weather-notes",
        "description": "Notes about the weather"
    }]);
    scenario
}

fn hit_kinds(page: &Value) -> Vec<(String, String)> {
    page["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|hit| {
            let key = hit.get("uri").unwrap_or(&hit["name"]);
            (
                hit["kind"].as_str().expect("kind").to_string(),
                key.as_str().expect("key").to_string(),
            )
        })
        .collect()
}

#[test]
fn search_changes_and_status_by_kind_online_and_offline() {
    let scratch = Scratch::new();
    let path = scratch.write_scenario("scenario.json", &scenario_with_resource());
    let mut daemon = Daemon::with_scenario(&scratch, "fx", &path);
    wait_for(
        "the tools and the resource",
        Duration::from_secs(30),
        || {
            let status = daemon.server_status("fx");
            (status["kinds"]["tool"]["count"] == 5 && status["resources"] == 1).then_some(())
        },
    );

    // Every kind by default: the resource and the tool, each hit with its kind; tools have
    // no URI, resources keep theirs.
    let all = daemon.call("catalog/search", json!({"query": "weather"}));
    let mut found = hit_kinds(&all);
    found.sort();
    assert_eq!(
        found,
        [
            (
                "resource".to_string(),
                "file:///notes/weather.md".to_string()
            ),
            ("tool".to_string(), "weather".to_string()),
        ],
        "{all}"
    );
    let tool_hit = all["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|hit| hit["kind"] == "tool")
        .expect("the tool hit");
    assert!(tool_hit.get("uri").is_none(), "{tool_hit}");
    assert_eq!(tool_hit["server"], "fx");
    assert_eq!(tool_hit["description"], "Forecasts the weather");
    // `kinds` narrows; a MIME type filter means resources only.
    let tools = daemon.call(
        "catalog/search",
        json!({"query": "weather", "kinds": ["tool"]}),
    );
    assert_eq!(hit_kinds(&tools), [("tool".into(), "weather".into())]);
    let resources = daemon.call(
        "catalog/search",
        json!({"query": "weather", "kinds": ["resource"]}),
    );
    assert_eq!(
        hit_kinds(&resources),
        [("resource".into(), "file:///notes/weather.md".into())]
    );
    // Templates are not indexed: asking for them alone finds nothing, not resources.
    let templates = daemon.call(
        "catalog/search",
        json!({"query": "weather", "kinds": ["template"]}),
    );
    assert_eq!(templates["results"], json!([]), "{templates}");
    let by_type = daemon.call(
        "catalog/search",
        json!({"query": "weather", "kinds": ["tool"], "mimeType": "text/markdown"}),
    );
    assert_eq!(by_type["results"], json!([]), "{by_type}");
    let prompts = daemon.call(
        "catalog/search",
        json!({"query": "summarizes", "kinds": ["prompt"]}),
    );
    assert_eq!(hit_kinds(&prompts), [("prompt".into(), "summarize".into())]);

    // Pages of one hit walk the merged ranking once each, with no hit twice or lost: the
    // five tools (their input property "city") and nothing else.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = json!({"query": "city", "limit": 2});
        if let Some(cursor) = &cursor {
            params["cursor"] = json!(cursor);
        }
        let page = daemon.call("catalog/search", params);
        paged.extend(hit_kinds(&page));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
        assert!(paged.len() <= 5, "{paged:?}");
    }
    paged.sort();
    let names: Vec<&str> = paged.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "delta", "gamma", "weather"]);
    let bad = daemon.connect().request(
        "catalog/search",
        json!({"query": "city", "cursor": "m1.x.y"}),
    );
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    // `status` before any accept: counts per kind, no drift yet.
    let cli = |args: &[&str]| {
        let output = run_cli(&daemon.socket, args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).expect("utf-8")
    };
    let status = cli(&["status"]);
    assert!(
        status.contains("TOOLS") && status.contains("DRIFT"),
        "{status}"
    );
    let row = status
        .lines()
        .find(|line| line.starts_with("fx "))
        .unwrap_or_else(|| panic!("{status}"));
    let header = status
        .lines()
        .find(|line| line.starts_with("SERVER"))
        .unwrap_or_else(|| panic!("{status}"));
    // The table's columns are aligned: a cell starts where its header word does.
    let column = |name: &str| {
        let at = header.find(name).expect(name);
        row[at..]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(column("TOOLS"), "5", "{status}");
    assert_eq!(column("PROMPTS"), "1", "{status}");
    assert_eq!(column("DRIFT"), "-", "{status}");
    daemon.call("catalog/accept", json!({"server": "fx"}));

    // The feed by entry kind: a tool change and a resource change, each under its kind.
    let since = daemon.call("catalog/changes", json!({}))["latestSeq"].clone();
    let mut changed = scenario_with_resource();
    changed["tools"][4]["description"] = json!("Predicts the zephyr");
    changed["resources"][0]["description"] = json!("Notes about the zephyr");
    scratch.write_scenario("scenario.json", &changed);
    let kinds_of = |kinds: Value| {
        let page = daemon.call("catalog/changes", json!({"since": since, "kinds": kinds}));
        page["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .map(|change| change["entryKind"].as_str().expect("entryKind").to_string())
            .collect::<Vec<_>>()
    };
    wait_for("both changes in the feed", Duration::from_secs(10), || {
        let mut all = kinds_of(json!(["tool", "prompt", "resource"]));
        all.sort();
        (all == ["resource", "tool"]).then_some(())
    });
    assert_eq!(kinds_of(json!(["tool"])), ["tool"]);
    assert_eq!(kinds_of(json!(["resource"])), ["resource"]);
    assert!(kinds_of(json!(["prompt"])).is_empty());
    let status = cli(&["status"]);
    let row = status
        .lines()
        .find(|line| line.starts_with("fx "))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(row.contains("1 changed"), "{status}");
    let json_status: Value = serde_json::from_str(&cli(&["status", "--json"])).expect("json");
    assert_eq!(
        json_status["servers"][0]["kinds"]["tool"]["drift"],
        json!({"added": 0, "removed": 0, "changed": 1}),
        "{json_status}"
    );

    // The CLI: `search --kind tool`, online and offline (the database read directly).
    for online in [true, false] {
        if !online {
            daemon.stop();
        }
        let output = run_cli(
            &daemon.socket,
            &["search", "zephyr", "--kind", "tool", "--json"],
        );
        assert!(output.status.success(), "{output:?}");
        let page: Value = serde_json::from_slice(&output.stdout).expect("json");
        assert_eq!(
            hit_kinds(&page),
            [("tool".into(), "weather".into())],
            "online: {online}"
        );
        let output = run_cli(&daemon.socket, &["search", "zephyr"]);
        assert!(output.status.success(), "{output:?}");
        let table = String::from_utf8(output.stdout).expect("utf-8");
        assert!(table.contains("tool"), "{table}");
        assert!(table.contains("file:///notes/weather.md"), "{table}");
        // `tools`, `prompts` and `show tool` read the database like `ls` and `show` do.
        let output = run_cli(&daemon.socket, &["tools", "--server", "fx", "--json"]);
        assert!(output.status.success(), "online: {online}: {output:?}");
        let tools: Value = serde_json::from_slice(&output.stdout).expect("json");
        assert_eq!(tools.as_array().map(Vec::len), Some(5), "{tools}");
        assert_eq!(tools[4]["_meta"]["io.mcp-mirror/server"], "fx");
        let output = run_cli(&daemon.socket, &["prompts"]);
        assert!(output.status.success(), "online: {online}: {output:?}");
        assert!(String::from_utf8_lossy(&output.stdout).contains("summarize"));
        let output = run_cli(&daemon.socket, &["show", "tool", "fx/weather"]);
        assert!(output.status.success(), "online: {online}: {output:?}");
        let shown = String::from_utf8(output.stdout).expect("utf-8");
        assert!(shown.contains("Predicts the zephyr"), "{shown}");
        assert!(shown.contains("inputSchema:"), "{shown}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.contains("reading the database"), !online, "{stderr}");
        let missing = run_cli(&daemon.socket, &["show", "tool", "fx/nope"]);
        assert!(!missing.status.success(), "online: {online}");
        let unknown = run_cli(&daemon.socket, &["tools", "--server", "nope"]);
        assert_eq!(
            unknown.status.code(),
            Some(4),
            "online: {online}: {unknown:?}"
        );
    }
}

/// Every page of `catalog/drift` at `limit`, following cursors.
fn drift_pages(daemon: &Daemon, limit: u64) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut params = json!({"server": "fx", "limit": limit});
    loop {
        let page = daemon.call("catalog/drift", params.clone());
        pages.push(page["drift"].as_array().expect("drift").clone());
        match page["nextCursor"].as_str() {
            Some(next) => params["cursor"] = json!(next),
            None => return pages,
        }
    }
}

#[test]
fn drift_is_paged_in_server_kind_name_order_and_pages_never_repeat() {
    let scratch = Scratch::new();
    let path = scratch.write_scenario("scenario.json", &scenario("Forecasts the weather"));
    let daemon = Daemon::with_scenario(&scratch, "fx", &path);
    wait_for("the tools and prompts", Duration::from_secs(30), || {
        let counts = (
            list_all(&daemon, "catalog/tools", "tools").len(),
            list_all(&daemon, "catalog/prompts", "prompts").len(),
        );
        (counts == (5, 1)).then_some(())
    });
    daemon.call("catalog/accept", json!({"server": "fx"}));

    // Two tools changed, one removed, one added, the prompt changed: five entries of drift.
    let mut changed = scenario("Predicts the zephyr");
    let tools = changed["tools"].as_array_mut().expect("tools");
    tools[0]["description"] = json!("The first, changed");
    tools.remove(2);
    tools.push(tool("epsilon", "A new tool"));
    changed["prompts"][0]["description"] = json!("Summarizes a text, changed");
    scratch.write_scenario("scenario.json", &changed);
    let whole = wait_for("the drift", Duration::from_secs(30), || {
        let pages = drift_pages(&daemon, 500);
        (pages.len() == 1 && pages[0].len() == 5).then(|| pages[0].clone())
    });
    let keys: Vec<(String, String, String)> = whole
        .iter()
        .map(|entry| {
            let text = |field: &str| entry[field].as_str().expect(field).to_string();
            (text("kind"), text("name"), text("change"))
        })
        .collect();
    let expected = [
        ("prompt", "summarize", "changed"),
        ("tool", "alpha", "changed"),
        ("tool", "epsilon", "added"),
        ("tool", "gamma", "removed"),
        ("tool", "weather", "changed"),
    ]
    .map(|(kind, name, change)| (kind.into(), name.into(), change.into()));
    assert_eq!(keys, expected);

    for limit in [1, 2, 3] {
        let pages = drift_pages(&daemon, limit);
        assert!(
            pages.iter().all(|page| page.len() as u64 <= limit),
            "limit {limit}: {pages:?}"
        );
        let joined: Vec<Value> = pages.into_iter().flatten().collect();
        assert_eq!(joined, whole, "pages of {limit} differ from one page");
    }
    let zero = daemon
        .connect()
        .request("catalog/drift", json!({"limit": 0}));
    assert_eq!(zero["error"]["code"], -32602, "{zero}");
    let bad = daemon
        .connect()
        .request("catalog/drift", json!({"cursor": "nonsense"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    // The CLI follows every page.
    let printed = run_cli(&daemon.socket, &["drift", "--json"]);
    let printed: Value = serde_json::from_slice(&printed.stdout).expect("json");
    assert_eq!(printed["drift"].as_array().expect("drift"), &whole);
}
