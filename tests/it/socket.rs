//! The socket: bad input gets JSON-RPC errors and the connection lives; one daemon per socket.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::json;

use crate::support::{generated_uris, stdio_server, Daemon, Scratch, MIRROR};

#[test]
fn bad_requests_get_errors_and_the_connection_stays_usable() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(
        &scratch,
        &scratch.config(&stdio_server("docs", &["--generate", "5"])),
    );
    let mut client = daemon.connect();
    let cases: [(&[u8], i64); 5] = [
        (b"this is not json\n", -32700),
        (b"{\"jsonrpc\": \"2.0\", \"id\": 1}\n", -32600),
        (b"[1, 2, 3]\n", -32600),
        (b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"no/such/method\"}\n", -32601),
        (b"{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\": \"resources/list\", \"params\": {\"cursor\": \"garbage\"}}\n", -32602),
    ];
    for (line, code) in cases {
        client.send_raw(line);
        let response = client.read_message().expect("an error response");
        assert_eq!(
            response["error"]["code"],
            code,
            "{}: {response}",
            String::from_utf8_lossy(line)
        );
        let ping = client.request("ping", json!({}));
        assert_eq!(ping["result"], json!({}), "the connection must stay usable");
    }
    let search = client.request("catalog/search", json!({"limit": 5}));
    assert_eq!(search["error"]["code"], -32602, "{search}");
    // Params are typed: a missing field or a wrong type is -32602 naming the field.
    let named = |response: &serde_json::Value, field: &str| {
        response["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains(&format!("`{field}`")))
    };
    assert!(named(&search, "query"), "{search}");
    let wrong = client.request("catalog/search", json!({"query": "a", "limit": "ten"}));
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    assert!(named(&wrong, "limit"), "{wrong}");
    let wrong = client.request("resources/read", json!({"uri": 7}));
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    assert!(named(&wrong, "uri"), "{wrong}");
    let initialize = client.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
    assert_eq!(
        initialize["result"]["capabilities"]["resources"]["listChanged"], true,
        "{initialize}"
    );

    // An oversized line gets an error and the connection is closed; the daemon carries on.
    let mut big = vec![b'x'; 2 << 20];
    big.push(b'\n');
    let mut oversized = daemon.connect();
    // The daemon may close before it has read everything we send; that is the point.
    oversized.send_raw_lossy(&big);
    let response = oversized.read_message().expect("an error before closing");
    assert_eq!(response["error"]["code"], -32600, "{response}");
    assert!(
        oversized.read_message().is_none(),
        "the connection must be closed"
    );
    assert_eq!(
        daemon.connect().request("ping", json!({}))["result"],
        json!({})
    );
}

#[test]
fn the_socket_is_private_a_stale_file_is_replaced_and_a_live_daemon_is_not() {
    let scratch = Scratch::new();
    // A stale socket file, as a crashed daemon leaves it.
    let stale = std::os::unix::net::UnixListener::bind(scratch.path("mirror.sock")).expect("bind");
    drop(stale);
    let config = scratch.config("");
    let daemon = Daemon::start(&scratch, &config);
    let mode = std::fs::metadata(&daemon.socket)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);

    let second = Command::new(MIRROR)
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("run");
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("already serving"), "{stderr}");
    assert_eq!(
        daemon.call("ping", json!({})),
        json!({}),
        "the first daemon still serves"
    );
}

#[test]
fn the_last_snapshot_is_served_at_start_before_any_server_answers() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch,
        &scratch.config(&stdio_server(
            "docs",
            &["--generate", "42", "--name", "docs"],
        )),
    );
    daemon.wait_for_walks("docs", 1);
    daemon.stop();
    assert!(
        !daemon.socket.exists(),
        "a graceful stop removes the socket file"
    );
    // Now the server is unreachable: the catalog is still there, marked stale.
    let config = scratch.config("[servers.docs]\nurl = \"http://127.0.0.1:9/mcp\"\n");
    let daemon = Daemon::start(&scratch, &config);
    assert_eq!(daemon.uris().len(), 42);
    let hits = daemon.call("catalog/search", json!({"query": "doc-000041"}));
    assert_eq!(
        hits["results"][0]["uri"], "fixture://docs/docs/000041.md",
        "{hits}"
    );
}

/// A client paging on is answered with the catalog as it is when it asks: the page the daemon
/// read ahead for it before a change is not served after the change.
#[test]
fn a_page_read_ahead_before_a_change_is_not_served_after_it() {
    let scratch = Scratch::new();
    let scenario =
        scratch.write_scenario("scenario.json", &json!({"generate": 700, "page_size": 250}));
    let daemon = Daemon::with_scenario(&scratch, "live", &scenario);
    daemon.wait_for_walks("live", 1);
    let mut client = daemon.connect();
    let first = client.request("resources/list", json!({}));
    let cursor = first["result"]["nextCursor"]
        .as_str()
        .expect("a first page of 500 with more after it")
        .to_string();
    assert_eq!(
        first["result"]["resources"].as_array().map(Vec::len),
        Some(500)
    );
    // The daemon has read the next page ahead by now; the catalog changes under it.
    scratch.write_scenario(
        "scenario.json",
        &json!({"generate": 900, "page_size": 250, "prefix": "v2"}),
    );
    daemon.wait_for_walks("live", 2);
    let second = client.request("resources/list", json!({ "cursor": cursor }));
    let titles: Vec<&str> = second["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|resource| resource["title"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(titles.len(), 400, "the page after the first 500 of 900");
    assert_eq!(titles[0], "Document 500 v2");
    assert!(
        titles.iter().all(|title| title.ends_with(" v2")),
        "{titles:?}"
    );
    // A client paging the unchanging catalog gets its later pages from what was read ahead.
    assert_eq!(daemon.uris(), generated_uris("live", 900));
}
