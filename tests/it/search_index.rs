//! The derived search index behind `catalog/search`: the same answers as SQLite's full-text
//! index, repaired after deletion, an older generation and a kill -9, with SQLite answering
//! (and saying so) meanwhile.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{stdio_server, wait_for, Daemon, Scratch, FULL_TEXT_BEHIND};

fn with_priority(table: String, priority: i64) -> String {
    format!("{}\npriority = {priority}\n\n", table.trim_end())
}

/// The index holds every kind: each fixture server lists 3 templates beside its resources.
const TEMPLATES: u64 = 6;

fn index_status(daemon: &Daemon) -> Value {
    daemon.call("catalog/status", json!({}))["daemon"]["searchIndex"].clone()
}

/// Waits until the index is ready with `documents` entries; returns its status.
fn wait_for_ready_index(daemon: &Daemon, documents: u64, limit: Duration) -> Value {
    wait_for("the search index to be ready", limit, || {
        let status = index_status(daemon);
        (status["state"] == "ready" && status["documents"] == documents).then_some(status)
    })
}

/// Every (server, uri) a search finds, following cursors; asserts which engine answered.
fn every_hit(daemon: &Daemon, params: Value, engine: &str) -> BTreeSet<(String, String)> {
    let mut client = daemon.connect();
    let mut found = BTreeSet::new();
    let mut params = params;
    params["limit"] = json!(500);
    loop {
        let response = client.request("catalog/search", params.clone());
        let result = &response["result"];
        assert_eq!(result["engine"], engine, "{params}: {response}");
        for hit in result["results"].as_array().expect("results") {
            let key = (
                hit["server"].as_str().expect("server").to_string(),
                hit["uri"].as_str().expect("uri").to_string(),
            );
            assert!(found.insert(key), "a hit came twice: {hit}");
        }
        match result["nextCursor"].as_str() {
            Some(cursor) => params["cursor"] = json!(cursor),
            None => return found,
        }
    }
}

/// The words of `text` as an FTS5 query of the same meaning: all of them, the last a prefix.
fn fts5_and_of_words(text: &str) -> String {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(|word| format!("\"{word}\""))
        .collect();
    format!("{}*", words.join(" "))
}

fn assert_same_as_fts5(daemon: &Daemon, queries: &[&str]) {
    // A large first load's rows reach FTS5 after its commit.
    crate::support::wait_for_full_text(daemon);
    for query in queries {
        for server in [None, Some("alpha")] {
            // SQLite's resource index answers raw queries: the index's resources, to compare.
            let mut plain = json!({ "query": query, "kinds": ["resource"] });
            let mut raw = json!({ "query": fts5_and_of_words(query), "raw": true });
            if let Some(server) = server {
                plain["server"] = json!(server);
                raw["server"] = json!(server);
            }
            let from_index = every_hit(daemon, plain, "index");
            let from_sqlite = every_hit(daemon, raw, "sqlite");
            if server.is_none() {
                assert!(!from_index.is_empty(), "{query} found nothing");
            }
            assert_eq!(from_index, from_sqlite, "{query} on {server:?}");
        }
    }
}

/// Two servers; beta lists 40 of alpha's URIs with its own text and wins them.
fn two_servers(scratch: &Scratch, alpha_count: usize) -> std::path::PathBuf {
    let shared: Vec<Value> = (0..40)
        .map(|index| {
            json!({
                "uri": format!("fixture://alpha/docs/{index:06}.md"),
                "name": format!("beta-{index}"),
                "title": format!("Beta copy {index}"),
                "description": format!("Synthetic document kept by beta, topic-{}", index % 7),
            })
        })
        .collect();
    let scenario = scratch.write_scenario("beta.json", &json!({ "resources": shared }));
    let count = alpha_count.to_string();
    let servers = format!(
        "{}{}",
        with_priority(
            stdio_server("alpha", &["--generate", &count, "--name", "alpha"]),
            50
        ),
        with_priority(
            stdio_server(
                "beta",
                &[
                    "--name",
                    "beta",
                    "--scenario",
                    &scenario.display().to_string()
                ]
            ),
            10
        ),
    );
    scratch.config(&servers)
}

const QUERIES: [&str; 9] = [
    "document",
    "topic-3 doc",
    "synthetic document",
    "doc-00012",
    "000",
    "beta copy",
    "fixture alpha",
    "synth",
    "kept by",
];

#[test]
fn index_answers_equal_fts5_for_all_words_and_the_merged_view() {
    let scratch = Scratch::new();
    let config = two_servers(&scratch, 600);
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("alpha", 1);
    daemon.wait_for_walks("beta", 1);
    let status = wait_for_ready_index(&daemon, 640 + TEMPLATES, Duration::from_secs(30));
    assert!(status["bytes"].as_u64().unwrap_or(0) > 0, "{status}");
    assert_same_as_fts5(&daemon, &QUERIES);
    // The merged view: beta's copy is the one found for a shared URI.
    let hits = every_hit(&daemon, json!({"query": "doc-000012"}), "index");
    let alpha_copy = (
        "alpha".to_string(),
        "fixture://alpha/docs/000012.md".to_string(),
    );
    assert!(
        !hits.contains(&alpha_copy),
        "alpha's entry for a URI beta wins: {hits:?}"
    );
    let answer = daemon.call("catalog/search", json!({"query": "beta-12"}));
    assert_eq!(answer["results"][0]["server"], "beta");
    assert_eq!(
        answer["results"][0]["uri"],
        "fixture://alpha/docs/000012.md"
    );
    assert_eq!(
        answer["results"][0]["_meta"]["io.mcp-mirror/server"],
        "beta"
    );
    // No word in common: any word, said so; a typo, said so.
    let answer = daemon.call("catalog/search", json!({"query": "beta zzzzqqq"}));
    assert_eq!(answer["match"], "any", "{answer}");
    assert!(!answer["results"].as_array().expect("results").is_empty());
    let answer = daemon.call("catalog/search", json!({"query": "syntetic"}));
    assert_eq!(answer["match"], "typo", "{answer}");
    // Raw FTS5 syntax stays with SQLite.
    let answer = daemon.call(
        "catalog/search",
        json!({"query": "beta NOT copy", "raw": true}),
    );
    assert_eq!(answer["engine"], "sqlite");
    searches_of_an_established_client_are_answered_in_place(&daemon);
}

fn searches_in_place(daemon: &Daemon) -> u64 {
    let status = daemon.call("catalog/status", json!({}));
    status["daemon"]["socketLimits"]["searchesInPlace"]
        .as_u64()
        .unwrap_or_else(|| panic!("no searchesInPlace: {status}"))
}

/// A connection's first search runs on a blocking thread (nothing says it is quick yet), the
/// next ones where they arrive, with the same answers.
fn searches_of_an_established_client_are_answered_in_place(daemon: &Daemon) {
    let before = searches_in_place(daemon);
    let mut client = daemon.connect();
    let mut pages = Vec::new();
    for _ in 0..10 {
        // One page, so no next page is read ahead (a search of its own).
        let response = client.request(
            "catalog/search",
            json!({"query": "topic-3 doc", "limit": 500}),
        );
        assert_eq!(response["result"]["engine"], "index", "{response}");
        assert!(response["result"].get("nextCursor").is_none(), "{response}");
        pages.push(response["result"]["results"].clone());
    }
    assert!(pages.windows(2).all(|pair| pair[0] == pair[1]), "{pages:?}");
    let in_place = searches_in_place(daemon) - before;
    // Any may also be given up past its budget on a loaded host, but not all nine.
    assert!(
        (1..=9).contains(&in_place),
        "{in_place} of 10 searches in place"
    );
}

#[test]
fn a_deleted_index_and_an_index_from_an_older_generation_come_back_consistent() {
    let scratch = Scratch::new();
    let config = two_servers(&scratch, 300);
    let index_directory = scratch.path("catalog.search");
    let mut daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("alpha", 1);
    daemon.wait_for_walks("beta", 1);
    let older = wait_for_ready_index(&daemon, 340 + TEMPLATES, Duration::from_secs(30));
    daemon.stop();
    let saved = scratch.path("saved.search");
    copy_directory(&index_directory, &saved);

    // Deleted: rebuilt at start.
    std::fs::remove_dir_all(&index_directory).expect("remove the index");
    let mut daemon = Daemon::start(&scratch, &config);
    wait_for_ready_index(&daemon, 340 + TEMPLATES, Duration::from_secs(30));
    assert_same_as_fts5(&daemon, &QUERIES[..3]);

    // The catalog moves on, then the index is put back to the older generation.
    let scenario = scratch.path("beta.json");
    let grown: Vec<Value> = (0..60)
        .map(
            |index| json!({"uri": format!("beta://new/{index}"), "name": format!("fresh-{index}")}),
        )
        .collect();
    scratch.write_scenario("beta.json", &json!({ "resources": grown }));
    assert_eq!(scenario, scratch.path("beta.json"));
    daemon.call("catalog/refresh", json!({"server": "beta", "wait": true}));
    wait_for_ready_index(&daemon, 360 + TEMPLATES, Duration::from_secs(30));
    daemon.stop();
    std::fs::remove_dir_all(&index_directory).expect("remove the index");
    copy_directory(&saved, &index_directory);
    let daemon = Daemon::start(&scratch, &config);
    let status = wait_for_ready_index(&daemon, 360 + TEMPLATES, Duration::from_secs(30));
    assert!(
        status["generation"].as_u64() > older["generation"].as_u64(),
        "{status} after {older}"
    );
    assert!(
        daemon.log_text().contains("catching up"),
        "{}",
        daemon.log_text()
    );
    assert_same_as_fts5(&daemon, &["fresh", "document", "topic-2 doc"]);
    // Beta's old entries are gone: no entry has both words any more.
    let answer = daemon.call("catalog/search", json!({"query": "beta copy"}));
    assert_eq!(
        (answer["engine"].as_str(), answer["match"].as_str()),
        (Some("index"), Some("any")),
        "{answer}"
    );
}

#[test]
fn kill_9_while_the_index_repairs_recovers_and_queries_meanwhile_fall_back() {
    let scratch = Scratch::new();
    let entries: u64 = 20_000;
    let config = two_servers(&scratch, entries as usize);
    let index_directory = scratch.path("catalog.search");
    let mut daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("beta", 1);
    wait_for("alpha's first walk", Duration::from_secs(120), || {
        (daemon.server_status("alpha")["walksOk"]
            .as_u64()
            .unwrap_or(0)
            >= 1)
            .then_some(())
    });
    wait_for_ready_index(&daemon, entries + 40 + TEMPLATES, Duration::from_secs(120));
    daemon.stop();

    // The index goes; the next start rebuilds it, and is killed while it does.
    std::fs::remove_dir_all(&index_directory).expect("remove the index");
    let mut daemon = Daemon::start(&scratch, &config);
    let status = wait_for("the rebuild to start", Duration::from_secs(30), || {
        let status = index_status(&daemon);
        (status["state"] == "rebuilding").then_some(status)
    });
    // Queries during the repair are answered by SQLite, which says why.
    let answer = daemon.call("catalog/search", json!({"query": "doc-000123"}));
    if index_status(&daemon)["state"] == "rebuilding" {
        assert_eq!(answer["engine"], "sqlite", "{answer}");
        assert!(
            answer["note"]
                .as_str()
                .unwrap_or("")
                .contains("search index"),
            "{answer}"
        );
    }
    assert_eq!(
        answer["results"][0]["uri"], "fixture://alpha/docs/000123.md",
        "{status}"
    );
    daemon.child.kill().expect("SIGKILL");
    daemon.child.wait().expect("reap");

    let daemon = Daemon::start(&scratch, &config);
    wait_for_ready_index(&daemon, entries + 40 + TEMPLATES, Duration::from_secs(180));
    let answer = daemon.call("catalog/search", json!({"query": "doc-000123"}));
    assert_eq!(answer["engine"], "index");
    assert_eq!(
        answer["results"][0]["uri"],
        "fixture://alpha/docs/000123.md"
    );
    assert_same_as_fts5(&daemon, &["doc-00012", "beta copy"]);
}

fn copy_directory(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
        }
    }
}

fn fixture_tool(name: &str, description: &str, region: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {"region": {"type": "string", "description": region}}
        }
    })
}

/// 40 resources that say "forecast" in name, title and description, a template, two tools
/// and a prompt; `region` is the description of `get_forecast`'s one input property.
fn every_kind(region: &str) -> Value {
    let resources: Vec<Value> = (0..40)
        .map(|index| {
            json!({
                "uri": format!("file:///forecast/{index:02}"),
                "name": format!("forecast-{index:02}"),
                "title": "Forecast archive",
                "description": "An old forecast",
            })
        })
        .collect();
    json!({
        "resources": resources,
        "templates": [{
            "uriTemplate": "weather://stations/{station}/history",
            "name": "station-history",
            "title": "Station history",
            "description": "Past readings of a station",
        }],
        "tools": [
            fixture_tool("get_forecast", "Forecast for a region", region),
            fixture_tool("alerts", "Severe weather alerts", "The region to watch"),
        ],
        "prompts": [{
            "name": "brief",
            "description": "A forecast briefing",
            "arguments": [{"name": "audience", "description": "Who reads the briefing"}],
        }],
    })
}

const EVERY_KIND_DOCUMENTS: u64 = 40 + 1 + 2 + 1;

/// Every hit of a search as (kind, server, uri or name), following cursors; asserts that
/// the index answered every page.
fn every_kind_hit(daemon: &Daemon, params: Value) -> Vec<(String, String, String)> {
    let mut params = params;
    let mut found = Vec::new();
    loop {
        let result = daemon.call("catalog/search", params.clone());
        assert_eq!(result["engine"], "index", "{params}: {result}");
        for hit in result["results"].as_array().expect("results") {
            let key = hit["uri"].as_str().or(hit["name"].as_str()).expect("key");
            found.push((
                hit["kind"].as_str().expect("kind").to_string(),
                hit["server"].as_str().expect("server").to_string(),
                key.to_string(),
            ));
        }
        match result["nextCursor"].as_str() {
            Some(cursor) => params["cursor"] = json!(cursor),
            None => return found,
        }
    }
}

#[test]
fn tools_prompts_and_templates_are_searched_in_the_index_with_kinds_as_a_filter() {
    let scratch = Scratch::new();
    let path = scratch.write_scenario(
        "scenario.json",
        &every_kind("Which meteorological region to forecast"),
    );
    let mut daemon = Daemon::with_scenario(&scratch, "fx", &path);
    wait_for_ready_index(&daemon, EVERY_KIND_DOCUMENTS, Duration::from_secs(30));

    // A word only the description of a tool's input property has, answered by the index.
    let answer = daemon.call("catalog/search", json!({"query": "meteorological"}));
    assert_eq!(answer["engine"], "index", "{answer}");
    assert!(answer.get("note").is_none(), "{answer}");
    let hits = answer["results"].as_array().expect("results");
    assert_eq!(hits.len(), 1, "{answer}");
    assert_eq!(
        (&hits[0]["kind"], &hits[0]["name"], &hits[0]["server"]),
        (&json!("tool"), &json!("get_forecast"), &json!("fx"))
    );
    assert!(hits[0].get("uri").is_none(), "{answer}");
    assert_eq!(hits[0]["_meta"]["io.mcp-mirror/server"], "fx");

    // 40 resources match "forecast" better than the tool does; a search of tools, with a
    // limit below them, finds the tool and never a resource: the kind is an index filter.
    let tools = daemon.call(
        "catalog/search",
        json!({"query": "forecast", "kinds": ["tool"], "limit": 2}),
    );
    assert_eq!(tools["engine"], "index", "{tools}");
    let names: Vec<(&str, &str)> = tools["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|hit| {
            (
                hit["kind"].as_str().unwrap_or(""),
                hit["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(names, [("tool", "get_forecast")], "{tools}");
    assert!(tools.get("nextCursor").is_none(), "{tools}");
    let two_kinds = every_kind_hit(
        &daemon,
        json!({"query": "forecast", "kinds": ["tool", "prompt"], "limit": 1}),
    );
    let mut kinds: Vec<&str> = two_kinds.iter().map(|(kind, _, _)| kind.as_str()).collect();
    kinds.sort();
    assert_eq!(kinds, ["prompt", "tool"], "{two_kinds:?}");

    // Every kind in one ranking, one cursor, each hit once.
    let all = every_kind_hit(&daemon, json!({"query": "forecast", "limit": 7}));
    let unique: BTreeSet<&(String, String, String)> = all.iter().collect();
    assert_eq!((all.len(), unique.len()), (42, 42), "{all:?}");
    assert_eq!(
        all.iter().filter(|(kind, _, _)| kind == "resource").count(),
        40
    );

    // A template by its URI template (exact, first) and by its name.
    let templates = daemon.call(
        "catalog/search",
        json!({"query": "weather://stations/{station}/history"}),
    );
    assert_eq!(templates["results"][0]["kind"], "template", "{templates}");
    assert_eq!(
        templates["results"][0]["uri"],
        "weather://stations/{station}/history"
    );
    let by_name = every_kind_hit(
        &daemon,
        json!({"query": "station-history", "kinds": ["template"]}),
    );
    assert_eq!(
        by_name,
        [(
            "template".to_string(),
            "fx".to_string(),
            "weather://stations/{station}/history".to_string()
        )]
    );

    // The MCP face's search goes the same way.
    let called = daemon.call(
        "tools/call",
        json!({"name": "search_catalog", "arguments": {"query": "meteorological", "kinds": ["tool"]}}),
    );
    assert_eq!(
        called["structuredContent"]["hits"][0]["name"], "get_forecast",
        "{called}"
    );

    // The server changes the property's description and sends tools/list_changed: the
    // index catches up from the feed.
    scratch.write_scenario("scenario.json", &every_kind("Which climatological zone"));
    let found = wait_for(
        "the changed tool in the index",
        Duration::from_secs(20),
        || {
            let answer = daemon.call("catalog/search", json!({"query": "climatological"}));
            (answer["engine"] == "index" && answer["results"][0]["name"] == "get_forecast")
                .then_some(answer)
        },
    );
    assert_eq!(
        found["results"].as_array().map(Vec::len),
        Some(1),
        "{found}"
    );
    let gone = daemon.call("catalog/search", json!({"query": "meteorological"}));
    assert_eq!(gone["engine"], "index", "{gone}");
    assert_eq!(gone["results"], json!([]), "{gone}");
    assert!(
        !daemon.log_text().contains("rebuilding the search index")
            || daemon
                .log_text()
                .matches("rebuilding the search index")
                .count()
                == 1,
        "a catch-up, not another rebuild"
    );
    daemon.stop();

    // An index written by an older version of its schema is rebuilt at start.
    let meta_path = scratch.path("catalog.search").join("meta.json");
    let meta = std::fs::read_to_string(&meta_path).expect("meta.json");
    let marker = "\\\"schema\\\":";
    let version: u32 = meta
        .split_once(marker)
        .map(|(_, rest)| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no schema version in {meta}"));
    let older = meta.replace(
        &format!("{marker}{version}"),
        &format!("{marker}{}", version - 1),
    );
    std::fs::write(&meta_path, older).expect("write meta.json");
    let daemon = Daemon::with_scenario(&scratch, "fx", &path);
    wait_for_ready_index(&daemon, EVERY_KIND_DOCUMENTS, Duration::from_secs(30));
    let log = daemon.log_text();
    assert!(
        log.contains(&format!("its schema version is {}", version - 1)),
        "{log}"
    );
    let answer = daemon.call("catalog/search", json!({"query": "climatological"}));
    assert_eq!(answer["engine"], "index", "{answer}");
    assert_eq!(answer["results"][0]["name"], "get_forecast", "{answer}");
}

/// Swaps of 100 changes in a 100,000-resource snapshot with the index on: each reaches the
/// index (a search the index answers finds every changed entry's new text), and each logs how
/// long it held the writer. The swap budget itself (under 100 ms, BENCHMARKS.md) is measured by
/// `bench/run swap`, not here: a loaded 2-core machine stretches any duration.
#[test]
fn swaps_of_100_changes_in_100000_reach_the_index_and_log_the_writer_hold() {
    let scratch = Scratch::new();
    let changing = |version: usize| {
        let resources: Vec<Value> = (0..100)
            .map(|index| {
                json!({
                    "uri": format!("churn://doc/{index:03}"),
                    "name": format!("churn-{index:03}"),
                    "description": format!("Changing resource {index} at revision r{version}"),
                })
            })
            .collect();
        json!({"generate": 99_900, "page_size": 5000, "resources": resources})
    };
    let scenario = scratch.write_scenario("big.json", &changing(0));
    let daemon = Daemon::with_scenario(&scratch, "big", &scenario);
    wait_for("the first walk", Duration::from_secs(300), || {
        (daemon.server_status("big")["walksOk"].as_u64() >= Some(1)).then_some(())
    });
    // Its 100,000 resources and 3 templates (the index commits each kind apart, so a status
    // between the two commits showed 100,000 documents, ready).
    wait_for_ready_index(&daemon, 100_003, Duration::from_secs(300));
    for version in 1..=3 {
        // The fixture notices the new scenario and sends list_changed; the walk follows.
        scratch.write_scenario("big.json", &changing(version));
        // The index has the new text: a search finds it, answered by the index.
        let answer = wait_for(
            "the index to show the swap",
            Duration::from_secs(300),
            || {
                let answer = daemon.call(
                    "catalog/search",
                    json!({"query": format!("revision r{version}"), "limit": 100}),
                );
                (answer["engine"] == "index"
                    && answer["match"] == "all"
                    && answer["results"].as_array().map(Vec::len) == Some(100))
                .then_some(answer)
            },
        );
        let results = answer["results"].as_array().expect("results");
        assert!(
            results.iter().all(|hit| hit["description"]
                .as_str()
                .is_some_and(|text| text.ends_with(&format!("revision r{version}")))),
            "{answer:.300}"
        );
    }
    let holds: Vec<f64> = daemon
        .log_text()
        .lines()
        .filter(|line| line.contains("snapshot swapped") && line.contains("changed=100"))
        .filter_map(|line| {
            line.split("hold_ms=\"")
                .nth(1)?
                .split('"')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    eprintln!("swap hold times with the index on: {holds:?} ms");
    assert!(holds.len() >= 3, "{}", daemon.log_text());
}

/// While the index writes a large first load (a whole server's list in one diff) and SQLite's
/// full-text index is behind the same load, searches answer from the index's previous commit,
/// saying so, instead of going to SQLite (whose answer would lack the load too, and be slow
/// for common words); once the load is indexed they find it, without a note.
#[test]
fn searches_answer_from_the_index_while_it_writes_a_large_first_load() {
    let scratch = Scratch::new();
    let big = scratch.write_scenario("big.json", &json!({ "resources": [] }));
    let servers = format!(
        "{}{}",
        stdio_server("small", &["--generate", "20", "--name", "small"]),
        stdio_server(
            "big",
            &[
                "--name",
                "big",
                "--page-size",
                "5000",
                "--scenario",
                &big.display().to_string()
            ]
        ),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("small", 1);
    daemon.wait_for_walks("big", 1);
    wait_for_ready_index(&daemon, 20 + TEMPLATES, Duration::from_secs(30));
    // The big server's first resources: 30,000 in one swap.
    scratch.write_scenario("big.json", &json!({ "generate": 30000 }));
    let (mut stale, mut answers) = (0, 0);
    let mut client = daemon.connect();
    wait_for(
        "the first load in the index",
        Duration::from_secs(180),
        || {
            // Only the big server's resources hold the word `big` (its name, in their URIs).
            let response = client.request(
                "catalog/search",
                json!({"query": "big", "kinds": ["resource"], "limit": 5}),
            );
            let result = &response["result"];
            answers += 1;
            let note = result["note"].as_str().unwrap_or("");
            if result["engine"] == "sqlite" {
                // SQLite answers only once its own full-text index has the load.
                assert!(!note.contains(FULL_TEXT_BEHIND), "{response}");
                return None;
            }
            assert_eq!(result["engine"], "index", "{response}");
            let servers: Vec<&str> = result["results"]
                .as_array()
                .expect("results")
                .iter()
                .map(|hit| hit["server"].as_str().unwrap_or(""))
                .collect();
            match result["note"].as_str() {
                Some(note) => {
                    assert!(note.contains("previous state"), "{response}");
                    assert!(!servers.contains(&"big"), "{response}");
                    stale += 1;
                    None
                }
                None => servers.contains(&"big").then_some(()),
            }
        },
    );
    eprintln!("{stale} of {answers} searches answered from the index's previous state");
}

/// A daemon with `small` walked and `big` walked empty, the index ready; and its config.
fn first_load_with_searches(scratch: &Scratch) -> (Daemon, std::path::PathBuf) {
    let config = big_and_small(scratch);
    let daemon = Daemon::start(scratch, &config);
    daemon.wait_for_walks("small", 1);
    daemon.wait_for_walks("big", 1);
    wait_for_ready_index(&daemon, 20 + TEMPLATES, Duration::from_secs(30));
    (daemon, config)
}

/// A config of `small` (20 resources) and `big`, whose resources `big.json` sets (none yet),
/// served in pages of 1,000.
fn big_and_small(scratch: &Scratch) -> std::path::PathBuf {
    let big = scratch.write_scenario("big.json", &json!({ "resources": [] }));
    let servers = format!(
        "{}{}",
        stdio_server("small", &["--generate", "20", "--name", "small"]),
        stdio_server(
            "big",
            &[
                "--name",
                "big",
                "--page-size",
                "1000",
                "--scenario",
                &big.display().to_string()
            ]
        ),
    );
    scratch.config(&servers)
}

/// One search of the continuous client; returns whether it saw the whole load, answered by
/// the index as the catalog stands.
fn search_during_the_load(client: &mut crate::support::SocketClient, round: usize) -> bool {
    let params = match round % 3 {
        0 => json!({"query": "000100 029900", "server": "big", "kinds": ["resource"], "limit": 10}),
        1 => json!({"query": "document", "limit": 10}),
        _ => json!({"query": "big", "kinds": ["resource"], "limit": 5}),
    };
    let response = client.request("catalog/search", params.clone());
    let result = &response["result"];
    assert!(result.is_object(), "{params} failed: {response}");
    if round % 3 != 0 {
        return false;
    }
    let hits = result["results"].as_array().expect("results").len();
    assert!(
        hits == 0 || hits == 2,
        "an answer with part of the first load: {response}"
    );
    result["engine"] == "index" && result["note"].is_null() && hits == 2
}

/// `big`'s first load of 30,000 (pages of 1,000), indexed during its walk, and a client
/// searching without pause meanwhile: no search fails, and no answer holds part of the load
/// (the two entries a query finds, from its first and its last page, come together or not at
/// all).
#[test]
fn searches_never_fail_nor_see_half_a_first_load_indexed_during_its_walk() {
    let scratch = Scratch::new();
    let (daemon, _config) = first_load_with_searches(&scratch);
    scratch.write_scenario("big.json", &json!({ "generate": 30000 }));
    let mut client = daemon.connect();
    let mut round = 0;
    wait_for(
        "the whole first load in the index",
        Duration::from_secs(300),
        || {
            round += 1;
            search_during_the_load(&mut client, round).then_some(())
        },
    );
    eprintln!("{round} searches during the first load");
    let log = daemon.log_text();
    assert!(
        log.contains("indexing a large first load during its walk"),
        "the load was not indexed during its walk"
    );
    assert!(
        log.contains("built during its walk, is in"),
        "the load's segments were not adopted"
    );
    wait_for_ready_index(&daemon, 30020 + TEMPLATES, Duration::from_secs(60));
}

/// A kill -9 while a first load is indexed during its walk: the next run discards the pending
/// load, walks it again, and the index holds it once, as SQLite does.
#[test]
fn kill_9_while_a_first_load_is_indexed_during_its_walk_leaves_a_consistent_index() {
    let scratch = Scratch::new();
    let (mut daemon, config) = first_load_with_searches(&scratch);
    scratch.write_scenario("big.json", &json!({ "generate": 30000 }));
    wait_for(
        "the build during the walk",
        Duration::from_secs(120),
        || {
            daemon
                .log_text()
                .contains("indexing a large first load during its walk")
                .then_some(())
        },
    );
    daemon.child.kill().expect("SIGKILL");
    daemon.child.wait().expect("reap");
    let daemon = Daemon::start(&scratch, &config);
    wait_for("big's first load", Duration::from_secs(300), || {
        (daemon.server_status("big")["resources"] == 30000).then_some(())
    });
    wait_for_ready_index(&daemon, 30020 + TEMPLATES, Duration::from_secs(120));
    crate::support::wait_for_full_text(&daemon);
    for query in ["topic-5", "000100 029900"] {
        let from_index = every_hit(
            &daemon,
            json!({"query": query, "server": "big", "kinds": ["resource"]}),
            "index",
        );
        let raw = match query {
            "topic-5" => json!({"query": fts5_and_of_words(query), "raw": true, "server": "big"}),
            _ => json!({"query": "\"000100\" OR \"029900\"", "raw": true, "server": "big"}),
        };
        let from_sqlite = every_hit(&daemon, raw, "sqlite");
        assert!(!from_index.is_empty(), "{query} found nothing");
        assert_eq!(from_index, from_sqlite, "{query}");
    }
}

/// A re-walk that changes every one of 60,000 resources reaches the index in batches: the
/// keeper never holds more changed entries than its batch bound (`catalog/status` reports the
/// largest batch it applied), and the index then answers with every entry's new text.
#[test]
fn a_re_walk_changing_every_entry_reaches_the_index_in_bounded_batches() {
    const RESOURCES: u64 = 60_000;
    let scratch = Scratch::new();
    let version = |number: usize| json!({"generate": RESOURCES, "page_size": 5000, "prefix": (["quokka", "wombat"][number])});
    let scenario = scratch.write_scenario("big.json", &version(0));
    let daemon = Daemon::with_scenario(&scratch, "big", &scenario);
    wait_for_ready_index(&daemon, RESOURCES + 3, Duration::from_secs(300));
    scratch.write_scenario("big.json", &version(1));
    // Every entry had the old word: none left means every batch reached the index.
    let answer = wait_for(
        "the index to show the re-walk",
        Duration::from_secs(300),
        || {
            // SQLite answers meanwhile (the index says it is catching up), and may run past
            // the search timeout on a loaded machine: an error is only a later look.
            let search = |word: &str| {
                daemon
                    .connect()
                    .request("catalog/search", json!({"query": word, "limit": 1}))["result"]
                    .clone()
            };
            let (old, new) = (search("quokka"), search("wombat"));
            (old["engine"] == "index"
                && old["results"].as_array().map(Vec::len) == Some(0)
                && new["engine"] == "index"
                && new["match"] == "all"
                && new["results"].as_array().map(Vec::len) == Some(1))
            .then_some(new)
        },
    );
    wait_for_ready_index(&daemon, RESOURCES + 3, Duration::from_secs(60));
    let largest = index_status(&daemon)["largestCatchUpBatch"]
        .as_u64()
        .expect("the largest batch in catalog/status");
    assert!(
        largest > 0 && largest <= mcp_mirror::search::keeper::CATCH_UP_BATCH_ENTRIES as u64,
        "largest batch {largest}, {answer:.300}"
    );
}

/// The nice value of each of `pid`'s threads by name (field 19 of /proc/PID/task/TID/stat,
/// after the parenthesised name).
fn thread_nice_values(pid: u32) -> Vec<(String, i64)> {
    let mut threads = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let Some((_, after_name)) = stat.rsplit_once(')') else {
            continue;
        };
        // After the name: state is field 3, nice field 19.
        if let Some(nice) = after_name
            .split_whitespace()
            .nth(16)
            .and_then(|nice| nice.parse().ok())
        {
            threads.push((name.trim().to_string(), nice));
        }
    }
    threads
}

/// Background work (the sessions' walks on the `upstream` runtime, the store's writer and
/// checkpointer, the search index keeper's passes and its first-load builder, tantivy's indexing
/// and merge threads) runs at a lower CPU priority than the threads that answer, so a search
/// takes a busy core first; a stdio server the daemon starts inherits it.
#[cfg(target_os = "linux")]
#[test]
fn the_index_walk_and_writer_threads_run_at_a_lower_priority_than_the_answering_ones() {
    let scratch = Scratch::new();
    let server = stdio_server("fx", &["--name", "fx", "--generate", "50"]);
    let daemon = Daemon::start(&scratch, &scratch.config(&server));
    wait_for_ready_index(&daemon, 50 + TEMPLATES / 2, Duration::from_secs(30));
    // tantivy joins its indexing threads at each commit and starts new ones: a listing taken
    // in between has none, so the listing is taken again until it has one.
    let mut threads = thread_nice_values(daemon.child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !threads
        .iter()
        .any(|(name, _)| name.starts_with("thrd-tantivy"))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
        threads = thread_nice_values(daemon.child.id());
    }
    let nice_of = |prefix: &str| -> Vec<i64> {
        threads
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, nice)| *nice)
            .collect()
    };
    let answering = nice_of("tokio-rt-worker");
    assert!(!answering.is_empty(), "{threads:?}");
    let base = answering[0];
    assert!(answering.iter().all(|nice| *nice == base), "{threads:?}");
    for background in [
        "search-keeper",
        "search-prebuild",
        "merge_thread",
        "thrd-tantivy",
        "upstream",
        "store-writer",
        "store-checkpoin",
    ] {
        let values = nice_of(background);
        assert!(!values.is_empty(), "no {background} thread: {threads:?}");
        assert!(
            values.iter().all(|nice| *nice > base),
            "{background} runs at the answering threads' priority: {threads:?}"
        );
    }
    let children: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", daemon.child.id()))
        .expect("tasks")
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    assert_eq!(children.len(), 1, "the stdio server: {children:?}");
    let server = thread_nice_values(children[0]);
    assert!(
        !server.is_empty() && server.iter().all(|(_, nice)| *nice > base),
        "{server:?}"
    );
}
