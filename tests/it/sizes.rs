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

/// Every tool of `catalog/tools` for `server`, following cursors, and the largest page's size
/// as JSON text.
fn tools_of(daemon: &Daemon, server: &str) -> (Vec<Value>, usize, usize) {
    let mut client = daemon.connect();
    let (mut tools, mut largest_page, mut pages) = (Vec::new(), 0, 0);
    let mut cursor: Option<String> = None;
    loop {
        let mut params = json!({"server": server});
        if let Some(cursor) = &cursor {
            params["cursor"] = json!(cursor);
        }
        let answer = client.request("catalog/tools", params);
        let page = &answer["result"];
        largest_page = largest_page.max(page.to_string().len());
        pages += 1;
        tools.extend(page["tools"].as_array().expect("tools").iter().cloned());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return (tools, largest_page, pages),
        }
    }
}

fn tool_count(daemon: &Daemon, server: &str) -> u64 {
    daemon.server_status(server)["kinds"]["tool"]["count"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_fifty_megabyte_input_schema_is_stored_trimmed_and_pages_of_tools_are_bounded_in_bytes() {
    let scratch = Scratch::new();
    let small_tool = |name: &str| json!({"name": name, "description": "a small tool", "inputSchema": {"type": "object"}});
    // One tool of a 50 MB input schema among small ones, one per page.
    let hostile = scratch.write_scenario(
        "hostile.json",
        &json!({
            "tools": [small_tool("small_a"), small_tool("small_b")],
            "huge_tools": 1, "huge_tool_schema_bytes": 50_000_000, "tools_page_size": 1
        }),
    );
    // Twelve tools of 900 kB each: every one within `max_entry_bytes`, 10.8 MB in all.
    let big = scratch.write_scenario(
        "big.json",
        &json!({"huge_tools": 12, "huge_tool_schema_bytes": 900_000, "tools_page_size": 4}),
    );
    let neighbour =
        scratch.write_scenario("neighbour.json", &json!({"tools": [small_tool("one")]}));
    let server = |name: &str, scenario: &std::path::Path| {
        stdio_server(
            name,
            &[
                "--name",
                name,
                "--scenario",
                scenario.to_str().expect("utf-8"),
            ],
        )
    };
    let servers = format!(
        "{}request_timeout = \"120s\"\n\n{}\n{}",
        server("hostile", &hostile),
        server("big", &big),
        server("neighbour", &neighbour),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    wait_for(
        "the tools of every server",
        Duration::from_secs(120),
        || {
            (tool_count(&daemon, "hostile") == 3
                && tool_count(&daemon, "big") == 12
                && tool_count(&daemon, "neighbour") == 1)
                .then_some(())
        },
    );
    assert_eq!(daemon.server_status("hostile")["oversizedEntries"], 1);
    assert_eq!(daemon.server_status("big")["oversizedEntries"], 0);

    // The trimmed tool is still a valid Tool, says it was trimmed, and is small.
    let (tools, largest_page, _) = tools_of(&daemon, "hostile");
    let huge = tools
        .iter()
        .find(|tool| tool["name"] == "huge_0")
        .expect("the huge tool is listed");
    assert_eq!(huge["inputSchema"], json!({"type": "object"}), "{huge}");
    assert_eq!(huge["_meta"]["io.mcp-mirror/oversized"], true, "{huge}");
    assert_eq!(huge["_meta"]["io.mcp-mirror/server"], "hostile", "{huge}");
    assert!(largest_page < 64 << 10, "a page of {largest_page} bytes");
    let details = daemon.call(
        "catalog/tool",
        json!({"server": "hostile", "name": "huge_0"}),
    );
    assert_eq!(
        details["definition"]["inputSchema"],
        json!({"type": "object"})
    );
    let database = open_database(&daemon.database);
    let (oversized, largest): (i64, i64) = database
        .query_row(
            "SELECT sum(oversized), max(length(raw)) FROM entries",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("entries");
    assert_eq!(oversized, 1);
    assert!(largest <= 1 << 20, "a tool of {largest} bytes was stored");

    // Tools within the bound are kept whole, and their pages stop at the byte budget.
    let (tools, largest_page, pages) = tools_of(&daemon, "big");
    assert_eq!(tools.len(), 12);
    assert!(tools.iter().all(|tool| tool
        .get("_meta")
        .and_then(|meta| meta.get("io.mcp-mirror/oversized"))
        .is_none()));
    assert!(pages >= 3, "12 tools of 900 kB in {pages} pages");
    assert!(
        largest_page <= (4 << 20) + (1 << 20) + (64 << 10),
        "a page of {largest_page} bytes"
    );

    // While the hostile server is walked again, the neighbour's change commits; the re-walk
    // finds the huge tool unchanged (compared by hash) and changes nothing.
    let seq_before = daemon.call("catalog/changes", json!({}))["latestSeq"].clone();
    let snapshot_before = daemon.server_status("hostile")["kinds"]["tool"]["snapshotAtMs"].as_i64();
    daemon.call("catalog/refresh", json!({"server": "hostile"}));
    scratch.write_scenario(
        "neighbour.json",
        &json!({"tools": [small_tool("one"), small_tool("two")]}),
    );
    wait_for("the neighbour's change", Duration::from_secs(20), || {
        (tool_count(&daemon, "neighbour") == 2).then_some(())
    });
    let rewalked = wait_for(
        "the hostile server's re-walk",
        Duration::from_secs(120),
        || {
            let status = daemon.server_status("hostile");
            let snapshot = status["kinds"]["tool"]["snapshotAtMs"].as_i64();
            (snapshot > snapshot_before).then_some(status)
        },
    );
    assert_eq!(rewalked["kinds"]["tool"]["count"], 3, "{rewalked}");
    let changes = daemon.call("catalog/changes", json!({"since": seq_before}));
    let hostile_changes: Vec<&Value> = changes["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|change| change["server"] == "hostile")
        .collect();
    assert!(hostile_changes.is_empty(), "{hostile_changes:?}");
    assert_eq!(daemon.server_status("hostile")["oversizedEntries"], 1);

    // Reading a 50 MB message costs memory while it is read; nothing holds it afterwards.
    let peak = peak_rss_bytes(daemon.child.id());
    eprintln!("50 MB input schema: peak RSS {} MB", peak >> 20);
    assert!(peak < 400 << 20, "peak RSS {} MB", peak >> 20);
}

/// Keys are bounded (`MAX_KEY_BYTES`, 64 KiB) and list cursors follow that bound: every page
/// after a long URI or tool name can be asked for, on every list, and an entry whose key is past
/// the bound is left out (counted as skipped), never stored unreachable.
#[test]
fn lists_page_past_long_keys_and_keys_past_the_bound_are_left_out() {
    let scratch = Scratch::new();
    let long = "x".repeat(2_000);
    let mut resources: Vec<Value> = (0..520)
        .map(|index| json!({"uri": format!("fixture://long/{long}/{index:04}"), "name": format!("r{index}")}))
        .collect();
    resources
        .push(json!({"uri": format!("fixture://long/{}", "y".repeat(70_000)), "name": "past"}));
    let mut tools: Vec<Value> = (0..505)
        .map(|index| json!({"name": format!("t{index:04}{long}"), "inputSchema": {"type": "object"}}))
        .collect();
    tools.push(json!({"name": "z".repeat(70_000), "inputSchema": {"type": "object"}}));
    let scenario = scratch.write_scenario(
        "long.json",
        &json!({"resources": resources, "page_size": 100, "tools": tools, "tools_page_size": 100}),
    );
    let daemon = Daemon::with_scenario(&scratch, "long", &scenario);
    let status = daemon.wait_for_walks("long", 1);
    assert_eq!(status["lastWalk"]["skipped"], 1, "{status}");
    // Tools are walked after resources, each kind swapped on its own.
    wait_for("the tools' walk", Duration::from_secs(30), || {
        let tools = daemon.call("catalog/tools", json!({}));
        (!tools["tools"].as_array()?.is_empty()).then_some(())
    });

    // resources/list: cursors after 2 KB URIs (each over 4 KB of hex) are taken back.
    let listed = daemon.list_all();
    assert_eq!(listed.len(), 520);
    assert!(listed
        .iter()
        .all(|resource| resource["uri"].as_str().expect("uri").len() < 3_000));

    // catalog/list and catalog/tools page the same way.
    let mut client = daemon.connect();
    for (method, params, field) in [
        ("catalog/list", json!({"server": "long"}), "resources"),
        ("catalog/tools", json!({}), "tools"),
    ] {
        let mut params = params;
        let mut seen = 0;
        loop {
            let response = client.request(method, params.clone());
            let result = &response["result"];
            let page = result[field]
                .as_array()
                .unwrap_or_else(|| panic!("{method}: {response}"));
            seen += page.len();
            match result["nextCursor"].as_str() {
                Some(next) => params["cursor"] = json!(next),
                None => break,
            }
        }
        let expected = if field == "tools" { 505 } else { 520 };
        assert_eq!(seen, expected, "{method}");
    }
    // A tool with a 2 KB name is described by its name; a name past the bound was never stored.
    let name = format!("t0007{long}");
    let described = daemon.call("catalog/tool", json!({"server": "long", "name": name}));
    assert_eq!(described["name"], json!(name), "{described}");
    let response = client.request(
        "catalog/tool",
        json!({"server": "long", "name": "z".repeat(70_000)}),
    );
    assert_eq!(response["error"]["code"], -32602, "{response}");
    // A cursor past the list cursors' bound is refused, and the connection lives.
    let response = client.request("resources/list", json!({"cursor": "k".repeat(200_000)}));
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(client.request("ping", json!({})).get("result").is_some());
}
