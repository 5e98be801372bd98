//! URI flags: entries whose URI (or template's expansion base) points at the local machine or
//! a private network carry `_meta["io.mcp-mirror/uri"]`, set as they enter whatever the server
//! wrote there; `show`, `ls --long` and search show them; `[http] hide_flagged_uris` leaves
//! them out of the HTTP face (a token may say otherwise), and the socket still has them all.

use serde_json::{json, Value};

use std::time::Duration;

use crate::http_face::{http_exchange, modern_request};
use crate::support::{free_port, run_cli, stdio_server, wait_for, Daemon};

const AGENT: &str = "tok-agent-51c2e8d0";
const FOLLOWER: &str = "tok-follower-9ad14c33";

const FLAGS: &str = "io.mcp-mirror/uri";

fn flags_of(entry: &Value) -> Value {
    entry["_meta"][FLAGS].clone()
}

#[test]
fn flagged_uris_are_marked_shown_and_left_out_of_a_hiding_face() {
    let upstream_scratch = crate::support::Scratch::new();
    let scenario = upstream_scratch.write_scenario(
        "hostile.json",
        &json!({
            "resources": [
                {"uri": "file:///etc/shadow", "name": "shadow secrets"},
                {"uri": "http://0177.0.0.1/admin", "name": "octal secrets"},
                {"uri": "http://[::ffff:127.0.0.1]/", "name": "mapped secrets"},
                {"uri": "http://169.254.169.254/latest/meta-data/", "name": "metadata secrets"},
                {"uri": "http://10.1.2.3/wiki", "name": "private secrets"},
                // A server's own claims are replaced: flags it wrote on a public URI go, and
                // an empty list does not hide a flagged one.
                {"uri": "https://example.com/docs", "name": "public secrets",
                 "_meta": {FLAGS: ["loopback"], "kept": 1}},
                {"uri": "http://localhost:8080/x", "name": "claimed secrets",
                 "_meta": {FLAGS: []}},
            ],
            "templates": [
                {"uriTemplate": "file:///{path}", "name": "files"},
                {"uriTemplate": "https://example.com/{page}", "name": "pages"},
            ],
        }),
    );
    let servers = stdio_server(
        "fx",
        &[
            "--name",
            "fx",
            "--scenario",
            &scenario.display().to_string(),
        ],
    );
    let agent = upstream_scratch.write_private("agent.token", "tok-agent-51c2e8d0\n");
    let follower = upstream_scratch.write_private("follower.token", "tok-follower-9ad14c33\n");
    let address = format!("127.0.0.1:{}", free_port());
    let config = upstream_scratch.config(&format!(
        "{servers}[http]\nlisten = \"{address}\"\nhide_flagged_uris = true\n\
         tokens = {{ agent = {:?}, follower = {{ file = {:?}, hide_flagged_uris = false }} }}\n",
        agent.display().to_string(),
        follower.display().to_string()
    ));
    let daemon = Daemon::start(&upstream_scratch, &config);
    wait_for("the HTTP face", Duration::from_secs(20), || {
        std::net::TcpStream::connect(&address).ok().map(|_| ())
    });
    let post = |token: &str, method: &str, params: Value| -> Value {
        let bearer = format!("Bearer {token}");
        http_exchange(
            &address,
            "POST",
            &[("Authorization", &bearer)],
            &modern_request(method, params).to_string(),
        )
        .json()
    };
    let daemon = &daemon;
    daemon.wait_for_walks("fx", 1);

    // The socket: every entry, marked as it entered.
    let listed: Vec<Value> = daemon.list_all();
    let by_uri = |uri: &str| {
        listed
            .iter()
            .find(|resource| resource["uri"] == uri)
            .cloned()
            .unwrap_or_else(|| panic!("{uri} is not listed"))
    };
    assert_eq!(
        flags_of(&by_uri("file:///etc/shadow")),
        json!(["local-file"])
    );
    assert_eq!(
        flags_of(&by_uri("http://0177.0.0.1/admin")),
        json!(["loopback"])
    );
    assert_eq!(
        flags_of(&by_uri("http://[::ffff:127.0.0.1]/")),
        json!(["loopback"])
    );
    assert_eq!(
        flags_of(&by_uri("http://169.254.169.254/latest/meta-data/")),
        json!(["link-local"])
    );
    assert_eq!(
        flags_of(&by_uri("http://10.1.2.3/wiki")),
        json!(["private-network"])
    );
    assert_eq!(
        flags_of(&by_uri("http://localhost:8080/x")),
        json!(["loopback"])
    );
    let public = by_uri("https://example.com/docs");
    assert_eq!(flags_of(&public), Value::Null, "{public}");
    assert_eq!(public["_meta"]["kept"], 1, "the server's own _meta stays");
    let templates = daemon.call("resources/templates/list", json!({}));
    let template_flags: Vec<(String, Value)> = templates["resourceTemplates"]
        .as_array()
        .expect("templates")
        .iter()
        .map(|template| {
            (
                template["uriTemplate"].as_str().unwrap_or("").to_string(),
                flags_of(template),
            )
        })
        .collect();
    assert!(
        template_flags.contains(&("file:///{path}".into(), json!(["local-file"]))),
        "{template_flags:?}"
    );
    assert!(
        template_flags.contains(&("https://example.com/{page}".into(), Value::Null)),
        "{template_flags:?}"
    );

    // The CLI shows them.
    let shown = run_cli(&daemon.socket, &["show", "file:///etc/shadow"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("uri flags:") && shown.contains("local-file (the URI points at"),
        "{shown}"
    );
    let long = run_cli(&daemon.socket, &["ls", "--long"]);
    let long = String::from_utf8_lossy(&long.stdout);
    assert!(
        long.lines().next().unwrap_or("").contains("URI FLAGS"),
        "{long}"
    );
    let line_of = |uri: &str| {
        long.lines()
            .find(|line| line.starts_with(uri))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        line_of("http://169.254.169.254/")
            .trim_end()
            .ends_with("link-local"),
        "{long}"
    );
    assert!(
        line_of("https://example.com/docs")
            .trim_end()
            .ends_with('-'),
        "{long}"
    );
    let found = run_cli(&daemon.socket, &["search", "secrets", "--kind", "resource"]);
    let found = String::from_utf8_lossy(&found.stdout);
    assert!(
        found.contains("http://10.1.2.3/wiki [private-network]"),
        "{found}"
    );
    let found_json = daemon.call("catalog/search", json!({"query": "shadow"}));
    assert_eq!(
        flags_of(&found_json["results"][0]),
        json!(["local-file"]),
        "{found_json}"
    );

    // Searchable as a filter: any of the flags asked, or `none` for the unflagged.
    let found_uris = |params: Value| -> Vec<String> {
        let answer = daemon.call("catalog/search", params);
        let mut uris: Vec<String> = answer["results"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .filter_map(|hit| hit["uri"].as_str())
            .map(str::to_string)
            .collect();
        uris.sort();
        uris
    };
    assert_eq!(
        found_uris(json!({"query": "secrets", "uriFlags": ["loopback", "link-local"]})),
        vec![
            "http://0177.0.0.1/admin",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:127.0.0.1]/",
            "http://localhost:8080/x",
        ]
    );
    assert_eq!(
        found_uris(json!({"query": "secrets", "uriFlags": ["none"]})),
        vec!["https://example.com/docs"]
    );
    assert_eq!(
        found_uris(json!({"query": "files", "kinds": ["template"], "uriFlags": ["local-file"]})),
        vec!["file:///{path}"]
    );
    let mut client = daemon.connect();
    let refused = client.request(
        "catalog/search",
        json!({"query": "secrets", "uriFlags": ["intranet"]}),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("unknown URI flag")),
        "{refused}"
    );
    let alive = client.request("catalog/search", json!({"query": "secrets"}));
    assert!(alive["result"].is_object(), "the connection lives: {alive}");
    let filtered = run_cli(
        &daemon.socket,
        &["search", "secrets", "--uri-flag", "private-network"],
    );
    let filtered = String::from_utf8_lossy(&filtered.stdout);
    assert!(filtered.contains("http://10.1.2.3/wiki"), "{filtered}");
    assert!(!filtered.contains("example.com"), "{filtered}");
    // The offline CLI (no daemon at this socket) filters the database the same way.
    let offline = std::process::Command::new(crate::support::MIRROR)
        .args([
            "search",
            "secrets",
            "--uri-flag",
            "none",
            "--json",
            "--database",
        ])
        .arg(&daemon.database)
        .arg("--socket")
        .arg(upstream_scratch.path("nobody.sock"))
        .output()
        .expect("run mcp-mirror");
    let offline: Value = serde_json::from_slice(&offline.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&offline.stderr)));
    let offline_uris: Vec<&str> = offline["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|hit| hit["uri"].as_str())
        .collect();
    assert_eq!(offline_uris, vec!["https://example.com/docs"], "{offline}");

    // The HTTP face hides them from the agent's token and keeps them for the follower's.
    let list_over_http = |token: &str, method: &str, key: &str| -> Vec<String> {
        let answer = post(token, method, json!({}));
        answer["result"][key]
            .as_array()
            .unwrap_or_else(|| panic!("{method}: {answer}"))
            .iter()
            .filter_map(|entry| entry.get("uri").or(entry.get("uriTemplate")))
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let hidden = list_over_http(AGENT, "resources/list", "resources");
    assert_eq!(hidden, vec!["https://example.com/docs".to_string()]);
    let hidden = list_over_http(AGENT, "resources/templates/list", "resourceTemplates");
    assert_eq!(hidden, vec!["https://example.com/{page}".to_string()]);
    let all = list_over_http(FOLLOWER, "resources/list", "resources");
    assert_eq!(all.len(), 7, "{all:?}");
    let searched = post(AGENT, "catalog/search", json!({"query": "secrets"}));
    let uris: Vec<&str> = searched["result"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|hit| hit["uri"].as_str())
        .collect();
    assert_eq!(uris, vec!["https://example.com/docs"], "{searched}");
    // The MCP face's tool takes the same filter.
    let called = post(
        FOLLOWER,
        "tools/call",
        json!({"name": "search_catalog",
               "arguments": {"query": "secrets", "uriFlags": ["local-file", "private-network"]}}),
    );
    let mut tool_uris: Vec<&str> = called["result"]["structuredContent"]["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("{called}"))
        .iter()
        .filter_map(|hit| hit["uri"].as_str())
        .collect();
    tool_uris.sort();
    assert_eq!(
        tool_uris,
        vec!["file:///etc/shadow", "http://10.1.2.3/wiki"],
        "{called}"
    );
    let detail = post(
        AGENT,
        "catalog/resource",
        json!({"uri": "file:///etc/shadow"}),
    );
    assert!(detail["error"].is_object(), "{detail}");
    let detail = post(
        FOLLOWER,
        "catalog/resource",
        json!({"uri": "file:///etc/shadow"}),
    );
    assert!(detail["result"].is_object(), "{detail}");
}
