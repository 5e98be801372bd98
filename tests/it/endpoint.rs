//! The mirror as one MCP server on the socket: the merged catalog, paging across swaps, reads
//! through the origin server (and its cache), notifications and the change feed, many clients.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{stdio_server, wait_for, Daemon, HttpFixture, Scratch, SocketClient, MIRROR};

/// The bytes 0..=255 as base64: what the fixture serves for a URI ending in `.bin`.
pub const ALL_BYTES_BASE64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy8/T19vf4+fr7/P3+/w==";

fn resource(uri: &str, name: &str) -> Value {
    json!({"uri": uri, "name": name})
}

fn origin(resource: &Value) -> &str {
    resource["_meta"]["io.mcp-mirror/server"]
        .as_str()
        .unwrap_or_else(|| panic!("no origin in {resource}"))
}

/// Reads messages until one satisfies `wanted`; the client's read timeout bounds each wait.
fn read_until(client: &mut SocketClient, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    loop {
        let message = client
            .read_message()
            .unwrap_or_else(|| panic!("the connection closed while waiting for {what}"));
        if wanted(&message) {
            return message;
        }
    }
}

#[test]
fn overlapping_servers_merge_by_priority_then_by_name() {
    let scratch = Scratch::new();
    let scenario = |name: &str, resources: Value| {
        let path = scratch.write_scenario(name, &json!({ "resources": resources }));
        path.display().to_string()
    };
    let alpha = scenario(
        "alpha.json",
        json!([
            resource("shared://one", "one from alpha"),
            resource("shared://two", "two from alpha"),
            resource("alpha://own", "alpha's own")
        ]),
    );
    let beta = scenario(
        "beta.json",
        json!([
            resource("shared://one", "one from beta"),
            resource("beta://own", "beta's own")
        ]),
    );
    let gamma = scenario(
        "gamma.json",
        json!([
            resource("shared://one", "one from gamma"),
            resource("shared://two", "two from gamma")
        ]),
    );
    let servers = format!(
        "{}priority = 20\n\n{}priority = 10\n\n{}priority = 10\n\n",
        stdio_server("alpha", &["--scenario", &alpha]),
        stdio_server("beta", &["--scenario", &beta]),
        stdio_server("gamma", &["--scenario", &gamma]),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    for server in ["alpha", "beta", "gamma"] {
        daemon.wait_for_walks(server, 1);
    }

    // Lowest priority wins; between equal priorities, the lower name.
    let merged: Vec<(String, String, String)> = daemon
        .list_all()
        .iter()
        .map(|resource| {
            (
                resource["uri"].as_str().expect("uri").to_string(),
                resource["name"].as_str().expect("name").to_string(),
                origin(resource).to_string(),
            )
        })
        .collect();
    let expected = [
        ("alpha://own", "alpha's own", "alpha"),
        ("beta://own", "beta's own", "beta"),
        ("shared://one", "one from beta", "beta"),
        ("shared://two", "two from gamma", "gamma"),
    ];
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(uri, name, server)| (uri.to_string(), name.to_string(), server.to_string()))
        .collect();
    assert_eq!(merged, expected);

    let details = daemon.call("catalog/resource", json!({"uri": "shared://one"}));
    let listed_by: Vec<&str> = details["listedBy"]
        .as_array()
        .expect("listedBy")
        .iter()
        .map(|listing| listing["server"].as_str().expect("server"))
        .collect();
    assert_eq!(listed_by, ["beta", "gamma", "alpha"], "{details}");
    assert_eq!(details["resource"]["name"], "one from beta", "{details}");

    // Search sees the merged catalog unless asked about one server.
    let found = daemon.call("catalog/search", json!({"query": "one"}));
    let results = found["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{found}");
    assert_eq!(results[0]["server"], "beta", "{found}");
    let found = daemon.call("catalog/search", json!({"query": "one", "server": "alpha"}));
    assert_eq!(found["results"][0]["name"], "one from alpha", "{found}");

    // A read goes to the winning server.
    let read = daemon.call("resources/read", json!({"uri": "shared://two"}));
    assert_eq!(read["_meta"]["io.mcp-mirror/server"], "gamma", "{read}");
    assert_eq!(read["contents"][0]["text"], "contents of shared://two");
}

#[test]
fn paging_the_merged_list_while_swaps_happen_yields_every_uri_exactly_once() {
    let scratch = Scratch::new();
    const GENERATED: usize = 3000;
    // Each version changes every generated resource (the prefix lands in title and
    // description) and swaps a set of extra URIs spread over the whole key space.
    let version = |number: usize| {
        let extras: Vec<Value> = (0..8)
            .map(|slot| {
                let uri = format!("fixture://docs/docs/{:06}x{number}.md", slot * 375 + 100);
                resource(&uri, &format!("extra {number}"))
            })
            .collect();
        json!({"generate": GENERATED, "prefix": format!("v{number}"), "page_size": 500, "resources": extras})
    };
    let scenario = scratch.write_scenario("docs.json", &version(0));
    let daemon = Daemon::with_scenario(&scratch, "docs", &scenario);
    daemon.wait_for_walks("docs", 1);

    let mut client = daemon.connect();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut cursor: Option<String> = None;
    let mut swaps = 0;
    loop {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let page = client.request("resources/list", params);
        for resource in page["result"]["resources"].as_array().expect("page") {
            *seen
                .entry(resource["uri"].as_str().expect("uri").to_string())
                .or_default() += 1;
        }
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
        // Between two pages, a swap that changes, removes and adds entries on both sides of
        // the cursor; wait until it is committed.
        swaps += 1;
        scratch.write_scenario("docs.json", &version(swaps));
        let marker = format!("fixture://docs/docs/{:06}x{swaps}.md", 100);
        wait_for("the next swap", Duration::from_secs(30), || {
            let found = daemon
                .connect()
                .request("catalog/resource", json!({ "uri": marker }));
            found.get("result").map(|_| ())
        });
    }
    assert!(swaps >= 5, "expected at least 6 pages, got {}", swaps + 1);
    let repeated: Vec<_> = seen.iter().filter(|(_, count)| **count > 1).collect();
    assert!(repeated.is_empty(), "URIs listed twice: {repeated:?}");
    for index in 0..GENERATED {
        let uri = format!("fixture://docs/docs/{index:06}.md");
        assert_eq!(seen.get(&uri), Some(&1), "{uri} was skipped");
    }
}

#[test]
fn reads_return_text_and_blob_byte_for_byte_serve_the_cache_offline_and_name_a_server_that_is_down()
{
    let scratch = Scratch::new();
    let scenario = |name: &str| {
        scratch.write_scenario(
            &format!("{name}.json"),
            &json!({"resources": [
                resource(&format!("fixture://{name}/a.txt"), "text"),
                resource(&format!("fixture://{name}/b.bin"), "blob"),
                resource(&format!("fixture://{name}/never.txt"), "never read"),
            ]}),
        )
    };
    let plain_fixture =
        HttpFixture::start(&["--scenario", &scenario("plain").display().to_string()]);
    let cached_fixture =
        HttpFixture::start(&["--scenario", &scenario("cached").display().to_string()]);
    let config = scratch.config(&format!(
        "[servers.plain]\nurl = \"{}\"\n\n[servers.cached]\nurl = \"{}\"\nread_cache = \"1MiB\"\n",
        plain_fixture.url, cached_fixture.url
    ));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("plain", 1);
    daemon.wait_for_walks("cached", 1);

    for server in ["plain", "cached"] {
        let text_uri = format!("fixture://{server}/a.txt");
        let text = daemon.call("resources/read", json!({ "uri": text_uri }));
        assert_eq!(
            text["contents"],
            json!([{"uri": text_uri, "mimeType": "text/plain", "text": format!("contents of {text_uri}")}]),
            "{text}"
        );
        let blob_uri = format!("fixture://{server}/b.bin");
        let blob = daemon.call("resources/read", json!({ "uri": blob_uri }));
        assert_eq!(blob["contents"][0]["blob"], ALL_BYTES_BASE64, "{blob}");
        assert_eq!(blob["_meta"]["io.mcp-mirror/server"], server);
    }
    // The CLI decodes the blob byte for byte, and prints text as it is.
    let output = scratch.path("b.bin");
    let read = Command::new(MIRROR)
        .args(["read", "fixture://plain/b.bin", "--output"])
        .arg(&output)
        .arg("--socket")
        .arg(&daemon.socket)
        .output()
        .expect("run");
    assert!(read.status.success(), "{read:?}");
    let bytes: Vec<u8> = (0..=255).collect();
    assert_eq!(std::fs::read(&output).expect("output"), bytes);
    let read = cli(&daemon.socket, &["read", "fixture://plain/a.txt"]);
    assert_eq!(read.stdout, b"contents of fixture://plain/a.txt");

    let unknown = daemon.connect().request(
        "resources/read",
        json!({"uri": "fixture://nobody/lists.this"}),
    );
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");
    assert_eq!(
        cli(&daemon.socket, &["read", "fixture://nobody/lists.this"])
            .status
            .code(),
        Some(4)
    );

    // The cache writes go through the store's writer in order, so once a later walk has
    // committed, they have too.
    daemon.call("catalog/refresh", json!({"server": "cached", "wait": true}));
    drop(plain_fixture);
    drop(cached_fixture);

    let down = daemon
        .connect()
        .request("resources/read", json!({"uri": "fixture://plain/a.txt"}));
    let message = down["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("server plain"), "{down}");
    assert_eq!(down["error"]["data"]["server"], "plain", "{down}");

    let cached = daemon.call("resources/read", json!({"uri": "fixture://cached/b.bin"}));
    assert_eq!(cached["contents"][0]["blob"], ALL_BYTES_BASE64, "{cached}");
    let note = &cached["_meta"]["io.mcp-mirror/cache"];
    assert!(note["storedAtMs"].as_i64().is_some(), "{cached}");
    let cached = daemon.call("resources/read", json!({"uri": "fixture://cached/a.txt"}));
    assert_eq!(
        cached["contents"][0]["text"],
        "contents of fixture://cached/a.txt"
    );
    let read = cli(&daemon.socket, &["read", "fixture://cached/a.txt"]);
    assert_eq!(read.stdout, b"contents of fixture://cached/a.txt");
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("content cache"),
        "{read:?}"
    );

    let never = daemon.connect().request(
        "resources/read",
        json!({"uri": "fixture://cached/never.txt"}),
    );
    let message = never["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("server cached"), "{never}");
    let status = daemon.call("catalog/status", json!({}));
    assert!(
        status["daemon"]["readCacheBytes"].as_u64().unwrap_or(0) > 0,
        "{status}"
    );
}

use crate::support::run_cli as cli;

#[test]
fn swaps_notify_mcp_clients_and_watchers_and_the_change_feed_is_bounded_per_swap() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario("docs.json", &json!({"generate": 5}));
    let daemon = Daemon::with_scenario(&scratch, "docs", &scenario);
    daemon.wait_for_walks("docs", 1);

    let mut mcp = daemon.connect();
    let hello = mcp.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert_eq!(hello["result"]["protocolVersion"], "2025-06-18", "{hello}");
    mcp.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    let mut watcher = daemon.connect();
    let watching = watcher.request("catalog/watch", json!({}));
    let since = watching["result"]["latestSeq"].as_i64().expect("latestSeq");
    let mut plain = daemon.connect();
    assert_eq!(plain.request("ping", json!({}))["result"], json!({}));

    scratch.write_scenario("docs.json", &json!({"generate": 7}));
    read_until(&mut mcp, "list_changed", |message| {
        message["method"] == "notifications/resources/list_changed"
    });
    let mut watched = Vec::new();
    while watched.len() < 2 {
        let notification = read_until(&mut watcher, "catalog changes", |message| {
            message["method"] == "notifications/catalog/changed"
        });
        watched.extend(
            notification["params"]["changes"]
                .as_array()
                .expect("changes")
                .iter()
                .cloned(),
        );
    }
    let described: Vec<(String, String, String)> = watched
        .iter()
        .map(|change| {
            assert!(change["seq"].as_i64().expect("seq") > since, "{change}");
            (
                change["server"].as_str().expect("server").to_string(),
                change["kind"].as_str().expect("kind").to_string(),
                change["uri"].as_str().expect("uri").to_string(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            (
                "docs".into(),
                "added".into(),
                "fixture://docs/docs/000005.md".into()
            ),
            (
                "docs".into(),
                "added".into(),
                "fixture://docs/docs/000006.md".into()
            ),
        ]
    );
    // A client that never sent initialize or catalog/watch gets no unasked-for lines.
    plain.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n");
    assert_eq!(plain.read_message().expect("answer")["id"], 7);

    let feed = daemon.call("catalog/changes", json!({ "since": since }));
    assert_eq!(
        feed["changes"].as_array().expect("changes").len(),
        2,
        "{feed}"
    );
    assert_eq!(feed["latestSeq"], watched[1]["seq"], "{feed}");
    assert_eq!(feed["truncated"], false);

    // `mcp-mirror watch` replays from a sequence number, then follows.
    let (lines, watch_output) = mpsc::channel();
    let mut watch = Command::new(MIRROR)
        .args(["watch", "--json", "--since", &since.to_string(), "--socket"])
        .arg(&daemon.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mcp-mirror watch");
    let stdout = watch.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let next_line = || -> Value {
        let line = watch_output
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from mcp-mirror watch");
        serde_json::from_str(&line).expect("a JSON line")
    };
    assert_eq!(next_line()["uri"], "fixture://docs/docs/000005.md");
    assert_eq!(next_line()["uri"], "fixture://docs/docs/000006.md");

    // A big swap records every key it touched (a follower fetches exactly those).
    let before = feed["latestSeq"].as_i64().expect("seq");
    scratch.write_scenario("docs.json", &json!({"generate": 1507}));
    let walked = wait_for("the big swap", Duration::from_secs(60), || {
        let status = daemon.server_status("docs");
        (status["resources"] == 1507).then_some(status)
    });
    assert_eq!(walked["lastWalk"]["added"], 1500, "{walked}");
    let big = daemon.call("catalog/changes", json!({"since": before, "limit": 5000}));
    let changes = big["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 1500, "{}", changes.len());
    assert!(changes.iter().all(|change| change["kind"] == "added"));
    assert_eq!(big["instance"].as_str().map(str::len), Some(32), "{big}");
    // The watcher follows live and the MCP client is told once more.
    let first_live = next_line();
    assert!(
        first_live["seq"].as_i64().expect("seq") > before,
        "{first_live}"
    );
    read_until(&mut mcp, "a second list_changed", |message| {
        message["method"] == "notifications/resources/list_changed"
    });
    let _ = watch.kill();
    let _ = watch.wait();

    let paged = daemon.call("catalog/changes", json!({"since": before, "limit": 10}));
    assert_eq!(paged["more"], true, "{paged}");
    let bad = daemon
        .connect()
        .request("catalog/changes", json!({"since": "yesterday"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[test]
fn garbage_oversized_lines_stuck_clients_and_500_concurrent_clients_leave_the_daemon_serving() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario("docs.json", &json!({"generate": 600}));
    let daemon = Daemon::with_scenario(&scratch, "docs", &scenario);
    daemon.wait_for_walks("docs", 1);

    // A client stuck half way through a line, and an MCP client that floods requests and
    // never reads: each only ever holds up its own connection.
    let mut stuck = UnixStream::connect(&daemon.socket).expect("connect");
    stuck
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"meth")
        .expect("write");
    let mut flooder = UnixStream::connect(&daemon.socket).expect("connect");
    flooder
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{}}\n")
        .expect("write");
    flooder
        .set_write_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let request = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/list\"}\n";
    // Until both socket buffers are full and the daemon's task for it waits on the write.
    let mut flooded = 0usize;
    while flooder.write_all(request).is_ok() && flooded < 1_000_000 {
        flooded += 1;
    }
    let mut oversized = daemon.connect();
    let mut big = vec![b'x'; 3 << 20];
    big.push(b'\n');
    oversized.send_raw_lossy(&big);
    assert_eq!(
        oversized.read_message().expect("an error")["error"]["code"],
        -32600
    );

    let mut clients: Vec<SocketClient> = (0..500).map(|_| daemon.connect()).collect();
    for (index, client) in clients.iter_mut().enumerate() {
        if index % 5 == 0 {
            client.send_raw(b"garbage that is not JSON\n");
        }
        let method = if index % 10 == 0 {
            "resources/list"
        } else {
            "ping"
        };
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{index},\"method\":\"{method}\"}}\n");
        client.send_raw(line.as_bytes());
    }
    for (index, client) in clients.iter_mut().enumerate() {
        if index % 5 == 0 {
            let error = client.read_message().expect("a parse error");
            assert_eq!(error["error"]["code"], -32700, "{error}");
        }
        let answer = client.read_message().expect("an answer");
        assert_eq!(answer["id"], index, "{answer}");
        if index % 10 == 0 {
            assert_eq!(
                answer["result"]["resources"]
                    .as_array()
                    .map(Vec::len)
                    .unwrap_or(0),
                500
            );
        }
    }
    let status = daemon.call("catalog/status", json!({}));
    assert!(
        status["daemon"]["clients"].as_u64().unwrap_or(0) >= 500,
        "{status}"
    );

    // The writer keeps committing and notifying while the flooder reads nothing.
    scratch.write_scenario("docs.json", &json!({"generate": 650}));
    wait_for(
        "the swap past the stuck clients",
        Duration::from_secs(30),
        || (daemon.server_status("docs")["resources"] == 650).then_some(()),
    );
    let refreshed = daemon.call("catalog/refresh", json!({"server": "docs", "wait": true}));
    assert_eq!(refreshed["servers"]["docs"]["ok"], true, "{refreshed}");
    for client in clients.iter_mut().step_by(50) {
        assert_eq!(client.request("ping", json!({}))["result"], json!({}));
    }
    drop(clients);
    drop(stuck);
    drop(flooder);
    wait_for("the connections to close", Duration::from_secs(30), || {
        let status = daemon.call("catalog/status", json!({}));
        (status["daemon"]["clients"].as_u64().unwrap_or(u64::MAX) <= 2).then_some(())
    });
    assert_eq!(daemon.uris().len(), 650);
}
