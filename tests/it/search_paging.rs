//! Paging is a total order: for every engine and match mode, the hits of pages of k,
//! concatenated, are the hits of one page of n·k, and no hit comes twice.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{stdio_server, wait_for, Daemon, Scratch};

/// The one big page; the smaller page sizes divide it.
const WHOLE: usize = 12;
const PAGE_SIZES: [usize; 3] = [1, 3, 4];

type Key = (String, String, String);

fn tool(name: &str, description: &str, parameter: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {"value": {"type": "string", "description": parameter}}
        }
    })
}

/// Tools with overlapping words (many equal scores among the generated ones), beside 600
/// synthetic resources whose texts differ only in numbers (many more equal scores).
fn catalog() -> Value {
    let mut tools = vec![
        tool(
            "get_current_stock_price",
            "Get the current stock price of a symbol",
            "Stock symbol",
        ),
        tool(
            "get_price_history",
            "Price history of a stock over a period",
            "Stock symbol",
        ),
        tool(
            "getWeatherForecast",
            "Weather forecast for a city",
            "City name",
        ),
        tool("current_weather", "The weather now in a city", "City name"),
        tool(
            "read_file",
            "Read the complete contents of a file",
            "Path of the file",
        ),
        tool(
            "write_file",
            "Create or overwrite a file with new content",
            "Path of the file",
        ),
        tool(
            "search_files",
            "Find files whose names match a pattern",
            "Glob pattern",
        ),
        tool(
            "convert_to_pdf",
            "Convert a document to PDF",
            "Document path",
        ),
        tool(
            "generate_word_cloud_chart",
            "Generate a word cloud chart",
            "Words and weights",
        ),
        tool(
            "exchange_rate",
            "The exchange rate between two currencies",
            "Currency code",
        ),
    ];
    for index in 0..40 {
        tools.push(tool(
            &format!("document_tool_{index:02}"),
            "A tool about a synthetic document",
            "Document",
        ));
    }
    json!({ "tools": tools })
}

fn key(hit: &Value) -> Key {
    (
        hit["kind"].as_str().expect("kind").to_string(),
        hit["server"].as_str().expect("server").to_string(),
        hit["uri"]
            .as_str()
            .or(hit["name"].as_str())
            .expect("uri or name")
            .to_string(),
    )
}

/// The first `pages` pages of `size` hits, following cursors; the engine of every page.
fn pages(daemon: &Daemon, params: &Value, size: usize, pages: usize) -> (Vec<Key>, Vec<String>) {
    let mut client = daemon.connect();
    let mut params = params.clone();
    params["limit"] = json!(size);
    let (mut keys, mut engines) = (Vec::new(), Vec::new());
    for _ in 0..pages {
        let response = client.request("catalog/search", params.clone());
        let result = &response["result"];
        assert!(result.is_object(), "{params}: {response}");
        engines.push(result["engine"].as_str().unwrap_or("").to_string());
        keys.extend(
            result["results"]
                .as_array()
                .expect("results")
                .iter()
                .map(key),
        );
        match result["nextCursor"].as_str() {
            Some(cursor) => params["cursor"] = json!(cursor),
            None => break,
        }
    }
    (keys, engines)
}

fn assert_total_order(daemon: &Daemon, params: &Value, engine: &str) -> usize {
    let (whole, engines) = pages(daemon, params, WHOLE, 1);
    assert_eq!(engines, [engine], "{params}");
    let distinct: HashSet<&Key> = whole.iter().collect();
    assert_eq!(
        distinct.len(),
        whole.len(),
        "a hit came twice: {params}: {whole:?}"
    );
    for size in PAGE_SIZES {
        let (paged, engines) = pages(daemon, params, size, WHOLE / size);
        assert!(
            engines.iter().all(|each| each == engine),
            "{params}: {engines:?}"
        );
        assert_eq!(
            paged,
            whole,
            "{params}: {} pages of {size} differ from one page of {WHOLE}",
            WHOLE / size
        );
    }
    whole.len()
}

#[test]
fn pages_of_every_size_are_slices_of_one_order() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario("tools.json", &catalog());
    let servers = format!(
        "{}{}",
        stdio_server("alpha", &["--generate", "600", "--name", "alpha"]),
        stdio_server(
            "tools",
            &[
                "--name",
                "tools",
                "--scenario",
                &scenario.display().to_string()
            ]
        ),
    );
    let config = scratch.config(&servers);
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("alpha", 1);
    daemon.wait_for_walks("tools", 1);
    // 600 resources, each server's 3 templates, 50 tools.
    let mut last = Value::Null;
    wait_for(
        "the search index to be ready",
        Duration::from_secs(60),
        || {
            last = daemon.call("catalog/status", json!({}))["daemon"]["searchIndex"].clone();
            (last["state"] == "ready" && last["documents"] == 656).then_some(())
        },
    );
    crate::support::wait_for_full_text(&daemon);

    let queries = [
        // Every word (many equal scores), a prefix, a typo.
        "document",
        "synthetic document",
        "topic-3 doc",
        "doc",
        "syntetic",
        "documnet 12",
        // Questions: no entry has every word, so any word ranks.
        "How do I get the current price of a stock and its history?",
        "what is the weather forecast for a city tomorrow",
        "read a file then convert the document to pdf and make a word cloud chart",
        "synthetic zzzzqq document",
        "exchange rate of the euro please",
        "the a of",
        "getWeatherForecast",
        "alpha resource number 7 topic",
    ];
    let mut modes = HashSet::new();
    let mut checked = 0;
    for query in queries {
        for filter in [
            json!({}),
            json!({"kinds": ["tool"]}),
            json!({"kinds": ["resource", "tool"]}),
            json!({"server": "alpha"}),
        ] {
            let mut params = filter.clone();
            params["query"] = json!(query);
            let answer = daemon.call("catalog/search", params.clone());
            if let Some(mode) = answer["match"].as_str() {
                modes.insert(mode.to_string());
            }
            if assert_total_order(&daemon, &params, "index") > 0 {
                checked += 1;
            }
        }
    }
    for mode in ["all", "typo", "any"] {
        assert!(
            modes.contains(mode),
            "no query matched in mode {mode}: {modes:?}"
        );
    }
    assert!(checked >= 30, "only {checked} searches found anything");

    // A question carrying an 18 KB base64 blob: answered, from its first 4 KiB, saying which
    // words were left out.
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut state: u64 = 7;
    let blob: String = (0..18_000)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from(alphabet[(state >> 58) as usize])
        })
        .collect();
    let question = format!("convert this stock price file to pdf: {blob}");
    let answer = daemon.call(
        "catalog/search",
        json!({"query": question, "kinds": ["tool"]}),
    );
    let note = answer["note"].as_str().unwrap_or("");
    assert!(note.contains("words were not searched"), "{answer:.500}");
    let names: Vec<&str> = answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|hit| hit["name"].as_str())
        .collect();
    assert!(names.contains(&"convert_to_pdf"), "{names:?}");

    // SQLite's full-text index (raw queries): the same property.
    for query in [
        "document",
        "synthetic document",
        "doc*",
        "topic OR synthetic",
        "alpha",
    ] {
        let params = json!({"query": query, "raw": true});
        assert!(
            assert_total_order(&daemon, &params, "sqlite") > 0,
            "{query}"
        );
    }
}
