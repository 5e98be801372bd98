//! A token's view is whole and only its own: `/metrics` and `catalog/status` say nothing of a
//! server outside it (nor where the daemon's files are), and within it the merged catalog's
//! winner of a URI is chosen among the servers it sees.

use std::time::Duration;

use serde_json::{json, Value};

use crate::http_face::{fast_daemon_settings, http_exchange_at, TOKEN};
use crate::support::{free_port, stdio_server, wait_for, Daemon, Scratch};

const NARROW_TOKEN: &str = "tok-narrow-51e0b2";

/// A daemon mirroring `pub` (priority 20) and `sec` (priority 10, so it wins a URI both
/// list), each listing `shared://doc/0..20` with its own descriptions, behind an HTTP face
/// with the `fleet` token (everything) and `narrow` (server `pub` only).
struct TwoServers {
    daemon: Daemon,
    address: String,
    _scratch: Scratch,
}

fn shared_docs(server: &str) -> Value {
    let resources: Vec<Value> = (0..20)
        .map(|index| {
            json!({
                "uri": format!("shared://doc/{index:02}"),
                "name": format!("doc-{index:02}"),
                "description": format!("{server} lists doc {index:02}"),
            })
        })
        .collect();
    json!({"generate": 2, "resources": resources})
}

impl TwoServers {
    fn start() -> TwoServers {
        let scratch = Scratch::new();
        let mut servers = String::new();
        for (name, priority) in [("pub", 20), ("sec", 10)] {
            let scenario = scratch.write_scenario(&format!("{name}.json"), &shared_docs(name));
            let scenario = scenario.display().to_string();
            let table = stdio_server(name, &["--name", name, "--scenario", &scenario]);
            servers.push_str(table.trim_end());
            servers.push_str(&format!("\npriority = {priority}\n\n"));
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
        daemon.wait_for_walks("pub", 1);
        daemon.wait_for_walks("sec", 1);
        TwoServers {
            daemon,
            address,
            _scratch: scratch,
        }
    }

    /// `method` as the token `token`, its result (panics on an error answer).
    fn ask(&self, token: &str, method: &str, params: Value) -> Value {
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
        let message = answer.json();
        match message.get("result") {
            Some(result) => result.clone(),
            None => panic!("{method} as {token}: {message}"),
        }
    }

    fn metrics(&self, token: &str) -> String {
        let bearer = format!("Bearer {token}");
        let answer = http_exchange_at(
            &self.address,
            "GET",
            "/metrics",
            &[("Authorization", &bearer)],
            "",
        );
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.body
    }
}

/// The servers a `/metrics` text names in its `server` labels.
fn named_servers(metrics: &str) -> Vec<String> {
    let mut named: Vec<String> = metrics
        .lines()
        .filter_map(|line| line.split("server=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect();
    named.sort_unstable();
    named.dedup();
    named
}

#[test]
fn metrics_and_status_of_a_view_token_say_nothing_outside_its_view() {
    let mirror = TwoServers::start();
    // The owner's scrape names both (the check can fail).
    assert_eq!(named_servers(&mirror.metrics(TOKEN)), ["pub", "sec"]);
    let narrow = mirror.metrics(NARROW_TOKEN);
    assert_eq!(named_servers(&narrow), ["pub"], "{narrow}");
    assert!(
        narrow.contains("mcp_mirror_walk_duration_seconds_count{server=\"pub\"}"),
        "{narrow}"
    );
    assert!(!narrow.contains("\"sec\""), "{narrow}");

    let owner = mirror.daemon.call("catalog/status", json!({}));
    let database = owner["daemon"]["database"]
        .as_str()
        .expect("the owner's database path");
    let config = owner["daemon"]["config"]
        .as_str()
        .expect("the owner's config path");
    let status = mirror.ask(NARROW_TOKEN, "catalog/status", json!({}));
    let text = status.to_string();
    for secret in [database, config, "catalog.db", "daemon.toml", "\"sec\""] {
        assert!(!text.contains(secret), "{secret:?} in {text}");
    }
    let servers: Vec<&str> = status["servers"]
        .as_array()
        .map(|servers| servers.iter().filter_map(|s| s["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(servers, ["pub"], "{text}");
}

/// The 20 shared URIs, in order.
fn shared_uris() -> Vec<String> {
    (0..20)
        .map(|index| format!("shared://doc/{index:02}"))
        .collect()
}

/// The (uri, description) pairs of `resources` that are shared URIs.
fn shared_listings(resources: &Value) -> Vec<(String, String)> {
    resources
        .as_array()
        .map(|resources| {
            resources
                .iter()
                .filter_map(|resource| {
                    let uri = resource["uri"].as_str()?;
                    uri.starts_with("shared://").then(|| {
                        let description = resource["description"].as_str().unwrap_or("");
                        (uri.to_string(), description.to_string())
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_view_chooses_each_uris_winner_among_the_servers_it_sees() {
    let mirror = TwoServers::start();
    let pubs: Vec<(String, String)> = (0..20)
        .map(|index| {
            (
                format!("shared://doc/{index:02}"),
                format!("pub lists doc {index:02}"),
            )
        })
        .collect();
    // The owner's merged catalog shows sec's listings (it wins): the check can fail.
    let owner = mirror.daemon.call("resources/list", json!({}));
    let owner_shared = shared_listings(&owner["resources"]);
    assert_eq!(owner_shared.len(), 20, "{owner}");
    assert!(
        owner_shared
            .iter()
            .all(|(_, text)| text.starts_with("sec ")),
        "{owner}"
    );

    // The token sees pub only: pub's listings are its merged catalog's.
    let listed = mirror.ask(NARROW_TOKEN, "resources/list", json!({}));
    assert_eq!(shared_listings(&listed["resources"]), pubs, "{listed}");
    assert!(!listed.to_string().contains("sec lists"), "{listed}");

    let entries = mirror.ask(
        NARROW_TOKEN,
        "catalog/entries",
        json!({"kind": "resource", "keys": shared_uris()}),
    );
    assert_eq!(shared_listings(&entries["entries"]), pubs, "{entries}");
    assert_eq!(entries["missing"], json!([]), "{entries}");

    // Search answers like the list, whichever engine answers: the search index for plain
    // words (of every kind, or of resources alone), SQLite's FTS5 for raw syntax.
    let secs: Vec<(String, String)> = pubs
        .iter()
        .map(|(uri, text)| (uri.clone(), text.replacen("pub", "sec", 1)))
        .collect();
    for params in [
        json!({"query": "lists doc", "limit": 50}),
        json!({"query": "lists doc", "kinds": ["resource"], "limit": 50}),
        json!({"query": "lists", "raw": true, "limit": 50}),
        json!({"query": "lists", "raw": true, "kinds": ["resource"], "limit": 50}),
    ] {
        let owner = mirror.daemon.call("catalog/search", params.clone());
        assert_eq!(shared_hits(&owner), secs, "owner, {params}: {owner}");
        let everything = mirror.ask(TOKEN, "catalog/search", params.clone());
        assert_eq!(
            shared_hits(&everything),
            secs,
            "fleet, {params}: {everything}"
        );
        let narrow = mirror.ask(NARROW_TOKEN, "catalog/search", params.clone());
        assert_eq!(shared_hits(&narrow), pubs, "narrow, {params}: {narrow}");
    }
}

/// The (uri, description) pairs of a search's hits of shared URIs, in URI order.
fn shared_hits(result: &Value) -> Vec<(String, String)> {
    let mut hits = shared_listings(&result["results"]);
    hits.sort();
    hits
}
