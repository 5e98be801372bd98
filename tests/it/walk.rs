//! Whole catalogs arrive over stdio and Streamable HTTP, with every field intact.

use serde_json::json;

use crate::support::{generated_uris, stdio_server, Daemon, HttpFixture, Scratch};

#[test]
fn stdio_catalog_of_thousands_over_many_pages_arrives_whole() {
    let scratch = Scratch::new();
    let config = scratch.config(&stdio_server(
        "docs",
        &["--generate", "3000", "--page-size", "100", "--name", "docs"],
    ));
    let daemon = Daemon::start(&scratch, &config);
    let status = daemon.wait_for_walks("docs", 1);
    assert_eq!(status["resources"], 3000, "{status}");
    assert_eq!(status["lastWalk"]["pages"], 30, "{status}");
    assert_eq!(status["transport"], "stdio");
    // The fixture speaks both eras; the mirror prefers the stateless one.
    assert_eq!(status["protocolVersion"], "2026-07-28");
    assert_eq!(status["live"]["era"], "modern");
    assert_eq!(status["templates"], 3);
    assert_eq!(daemon.uris(), generated_uris("docs", 3000));

    // Every Resource field survives the trip, and the origin is named in _meta.
    let all = daemon.list_all();
    let first = all
        .iter()
        .find(|resource| resource["uri"] == "fixture://docs/docs/000007.md")
        .expect("resource 7");
    assert_eq!(first["name"], "doc-000007");
    assert_eq!(first["title"], "Document 7");
    assert_eq!(first["size"], 1007);
    assert!(first["annotations"]["audience"].is_array(), "{first}");
    assert_eq!(first["icons"][0]["mimeType"], "image/png");
    assert_eq!(first["_meta"]["fixture/index"], 7);
    assert_eq!(first["_meta"]["io.mcp-mirror/server"], "docs");
    let templates = daemon.call("resources/templates/list", json!({}));
    assert_eq!(
        templates["resourceTemplates"].as_array().map(Vec::len),
        Some(3),
        "{templates}"
    );
}

#[test]
fn http_catalog_arrives_whole_with_json_and_with_sse_responses() {
    for mode in [&[][..], &["--sse"][..]] {
        let mut args = vec!["--generate", "1234", "--page-size", "100", "--name", "web"];
        args.extend_from_slice(mode);
        let fixture = HttpFixture::start(&args);
        let scratch = Scratch::new();
        let config = scratch.config(&format!("[servers.web]\nurl = \"{}\"\n", fixture.url));
        let daemon = Daemon::start(&scratch, &config);
        let status = daemon.wait_for_walks("web", 1);
        assert_eq!(status["resources"], 1234, "{mode:?}: {status}");
        assert_eq!(status["transport"], "http");
        assert_eq!(daemon.uris(), generated_uris("web", 1234), "{mode:?}");
    }
}

#[test]
fn a_changed_catalog_file_is_mirrored_through_list_changed_over_stdio() {
    let scratch = Scratch::new();
    let scenario =
        scratch.write_scenario("scenario.json", &json!({"generate": 40, "page_size": 15}));
    let config = scratch.config(&stdio_server(
        "live",
        &[
            "--name",
            "live",
            "--scenario",
            scenario.to_str().expect("utf-8 path"),
        ],
    ));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("live", 1);
    assert_eq!(daemon.uris(), generated_uris("live", 40));
    scratch.write_scenario(
        "scenario.json",
        &json!({"generate": 55, "page_size": 15, "prefix": "v2"}),
    );
    let status = daemon.wait_for_walks("live", 2);
    assert_eq!(status["resources"], 55, "{status}");
    assert_eq!(status["lastWalk"]["added"], 15, "{status}");
    assert_eq!(status["lastWalk"]["changed"], 40, "{status}");
    assert_eq!(daemon.uris(), generated_uris("live", 55));
    let hits = daemon.call("catalog/search", json!({"query": "Document 54 v2"}));
    assert_eq!(
        hits["results"][0]["uri"], "fixture://live/docs/000054.md",
        "{hits}"
    );
}

#[test]
fn search_finds_by_words_and_survives_hostile_queries() {
    let scratch = Scratch::new();
    let config = scratch.config(&stdio_server(
        "docs",
        &["--generate", "200", "--name", "docs"],
    ));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("docs", 1);
    let hits = daemon.call("catalog/search", json!({"query": "doc-000123"}));
    assert_eq!(
        hits["results"][0]["uri"], "fixture://docs/docs/000123.md",
        "{hits}"
    );
    assert_eq!(hits["results"][0]["server"], "docs");
    // Prefix matching on the last word, and a limit.
    let hits = daemon.call("catalog/search", json!({"query": "topic-5", "limit": 3}));
    assert_eq!(hits["results"].as_array().map(Vec::len), Some(3), "{hits}");
    for hostile in [
        "\"",
        "a\"b",
        "-",
        ":",
        "*",
        "(",
        "NEAR(",
        "AND OR NOT",
        "",
        "ü€𝄞",
        &"x".repeat(5000),
    ] {
        let response = daemon
            .connect()
            .request("catalog/search", json!({"query": hostile}));
        assert!(
            response["result"]["results"].is_array(),
            "{hostile:?}: {response}"
        );
    }
}
