//! Per-kind change notifications: a tool swap sends MCP clients of the socket and the HTTP face no `resources/list_changed` (watchers still get it), a resource swap does; the fixture's HTTP listen carries tool changes to the mirror by push.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{free_port, wait_for, Daemon, HttpFixture, Scratch};

const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";

fn scenario(tool_description: &str, resources: usize) -> Value {
    json!({
        "generate": resources,
        "tools": [{
            "name": "weather",
            "description": tool_description,
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}
        }],
    })
}

/// The mirrored description of the fixture's `weather` tool, once it is mirrored.
fn weather_description(daemon: &Daemon, server: &str) -> Option<String> {
    let answer = daemon
        .connect()
        .request("catalog/tool", json!({"server": server, "name": "weather"}));
    answer["result"]["definition"]["description"]
        .as_str()
        .map(str::to_string)
}

/// `Authorization: Bearer TOKEN` and its line end, or nothing.
fn bearer(token: Option<&str>) -> String {
    token.map_or(String::new(), |token| {
        format!("Authorization: Bearer {token}\r\n")
    })
}

/// A handshake-era session on the HTTP face: `initialize`, answered with its session id.
fn http_session(address: &str, token: Option<&str>) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "it", "version": "1"}}})
    .to_string();
    let mut stream = TcpStream::connect(address).expect("connect to the HTTP face");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        bearer(token),
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .expect("send initialize");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no session id in {answer}"))
}

/// An open GET stream of the HTTP face and what it has sent so far.
struct EventStream {
    stream: TcpStream,
    received: String,
}

impl EventStream {
    fn open(address: &str, session: &str, token: Option<&str>) -> EventStream {
        let mut stream = TcpStream::connect(address).expect("connect to the HTTP face");
        let request = format!(
            "GET /mcp HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n{}Mcp-Session-Id: {session}\r\n\r\n",
            bearer(token)
        );
        stream
            .write_all(request.as_bytes())
            .expect("open the stream");
        let mut events = EventStream {
            stream,
            received: String::new(),
        };
        assert!(
            events.read_until(Duration::from_secs(20), |text| text.contains("\r\n\r\n")),
            "no stream head: {}",
            events.received
        );
        assert!(
            events.received.starts_with("HTTP/1.1 200"),
            "{}",
            events.received
        );
        events
    }

    /// Reads until `done` holds for what was received or `limit` passes; whether it held.
    fn read_until(&mut self, limit: Duration, done: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut buffer = [0u8; 4096];
        while !done(&self.received) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.stream
                .set_read_timeout(Some(left))
                .expect("read timeout");
            match self.stream.read(&mut buffer) {
                Ok(0) => return false,
                Ok(read) => self
                    .received
                    .push_str(&String::from_utf8_lossy(&buffer[..read])),
                Err(error)
                    if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    return done(&self.received)
                }
                Err(error) => panic!("reading the stream: {error}"),
            }
        }
        true
    }
}

#[test]
fn a_tool_change_sends_no_resources_list_changed_but_a_resource_change_does() {
    let scratch = Scratch::new();
    let path = scratch.write_scenario("scenario.json", &scenario("Forecasts the weather", 3));
    let address = format!("127.0.0.1:{}", free_port());
    let server = crate::support::stdio_server(
        "fx",
        &["--name", "fx", "--scenario", &path.display().to_string()],
    );
    let config = scratch.config(&format!("{server}[http]\nlisten = \"{address}\"\n"));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("fx", 1);
    wait_for("the tool", Duration::from_secs(30), || {
        weather_description(&daemon, "fx")
    });
    wait_for("the HTTP face", Duration::from_secs(20), || {
        TcpStream::connect(&address).ok()
    });

    // An MCP client of the socket that also watches the feed, and a GET stream of the face.
    let mut client = daemon.connect();
    let initialize = client.request("initialize", json!({"protocolVersion": "2025-11-25"}));
    assert!(initialize.get("result").is_some(), "{initialize}");
    let watch = client.request("catalog/watch", json!({}));
    assert!(watch["result"]["latestSeq"].is_i64(), "{watch}");
    let session = http_session(&address, None);
    let mut events = EventStream::open(&address, &session, None);

    // Only the tool changes: the fixture sends tools/list_changed, the mirror swaps tools.
    scratch.write_scenario("scenario.json", &scenario("Predicts the rain", 3));
    // A watcher hears of the tool change; the list_changed an MCP client would get for the
    // same swap is written before it on the one connection, so none may precede it.
    loop {
        let message = client.read_message().expect("the socket stays open");
        assert_ne!(
            message["method"], RESOURCES_LIST_CHANGED,
            "a tool change sent resources/list_changed: {message}"
        );
        if message["method"] != "notifications/catalog/changed" {
            continue;
        }
        let changes = message["params"]["changes"].as_array().expect("changes");
        if changes.iter().any(|change| change["entryKind"] == "tool") {
            break;
        }
    }
    // The GET stream is written as the swap broadcasts, in milliseconds; it stays quiet.
    events.read_until(Duration::from_secs(1), |text| {
        text.contains(RESOURCES_LIST_CHANGED)
    });
    assert!(
        !events.received.contains(RESOURCES_LIST_CHANGED),
        "a tool change reached the GET stream: {}",
        events.received
    );

    // A resource change still reaches both.
    scratch.write_scenario("scenario.json", &scenario("Predicts the rain", 4));
    wait_for(
        "resources/list_changed on the socket",
        Duration::from_secs(30),
        || {
            let message = client.read_message().expect("the socket stays open");
            (message["method"] == RESOURCES_LIST_CHANGED).then_some(())
        },
    );
    assert!(
        events.read_until(Duration::from_secs(30), |text| text
            .contains(RESOURCES_LIST_CHANGED)),
        "no resources/list_changed on the GET stream: {}",
        events.received
    );
}

#[test]
fn a_tool_change_at_an_http_2026_07_28_fixture_reaches_the_mirror_by_push() {
    let scratch = Scratch::new();
    let path = scratch.write_scenario("scenario.json", &scenario("Forecasts the weather", 2));
    let fixture = HttpFixture::start(&["--name", "web", "--scenario", &path.display().to_string()]);
    let config = scratch.config(&format!(
        "[servers.web]\nurl = \"{}\"\nera = \"modern\"\n",
        fixture.url
    ));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("web", 1);
    wait_for("the tool", Duration::from_secs(30), || {
        weather_description(&daemon, "web")
    });
    wait_for("the listen stream", Duration::from_secs(20), || {
        (daemon.server_status("web")["live"]["push"] == "subscriptions/listen").then_some(())
    });
    let pushed_before = daemon.server_status("web")["live"]["notifications"]
        .as_u64()
        .unwrap_or(0);

    // Only the tool changes. Nothing polls a server that can push (the backstop walk is
    // minutes away), so the new description can arrive only through the listen stream.
    scratch.write_scenario("scenario.json", &scenario("Predicts the rain", 2));
    wait_for(
        "the new description at the mirror",
        Duration::from_secs(15),
        || {
            (weather_description(&daemon, "web").as_deref() == Some("Predicts the rain"))
                .then_some(())
        },
    );
    let status = daemon.server_status("web");
    assert!(
        status["live"]["notifications"].as_u64().unwrap_or(0) > pushed_before,
        "the change came by push: {status}"
    );
    assert_eq!(status["live"]["push"], "subscriptions/listen", "{status}");
}

#[test]
fn a_tokens_stream_wakes_only_for_the_servers_its_view_names() {
    let scratch = Scratch::new();
    let seen = scratch.write_scenario("seen.json", &scenario("Forecasts the weather", 3));
    let unseen = scratch.write_scenario("unseen.json", &scenario("Forecasts the weather", 3));
    let token_file = scratch.write_private("narrow.token", "narrow-token-value\n");
    let address = format!("127.0.0.1:{}", free_port());
    let servers: String = [("seen", &seen), ("unseen", &unseen)]
        .iter()
        .map(|(name, path)| {
            crate::support::stdio_server(
                name,
                &["--name", name, "--scenario", &path.display().to_string()],
            )
        })
        .collect();
    let config = scratch.config(&format!(
        "{servers}[http]\nlisten = \"{address}\"\ntokens = {{ narrow = {{ file = {:?}, servers = [\"seen\"] }} }}\n",
        token_file.display().to_string()
    ));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("seen", 1);
    daemon.wait_for_walks("unseen", 1);
    wait_for("the HTTP face", Duration::from_secs(20), || {
        TcpStream::connect(&address).ok()
    });
    let token = Some("narrow-token-value");
    let session = http_session(&address, token);
    let mut events = EventStream::open(&address, &session, token);

    // A resource change of a server outside the view: committed (the walk count says so),
    // and the token's stream stays quiet.
    scratch.write_scenario("unseen.json", &scenario("Forecasts the weather", 4));
    wait_for(
        "the change outside the view",
        Duration::from_secs(30),
        || (daemon.server_status("unseen")["resources"] == 4).then_some(()),
    );
    events.read_until(Duration::from_secs(1), |text| {
        text.contains(RESOURCES_LIST_CHANGED)
    });
    assert!(
        !events.received.contains(RESOURCES_LIST_CHANGED),
        "a change outside the view reached the token's stream: {}",
        events.received
    );

    // One of its own server reaches it.
    scratch.write_scenario("seen.json", &scenario("Forecasts the weather", 4));
    assert!(
        events.read_until(Duration::from_secs(30), |text| text
            .contains(RESOURCES_LIST_CHANGED)),
        "no resources/list_changed on the token's stream: {}",
        events.received
    );
}
