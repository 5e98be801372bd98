//! `private` never crosses a token, and a token sees only its view: every method of the
//! protocol's table is asked, as two token clients, about entries they may not see (a server
//! that is private throughout, one private from its second page, one whose tools and templates
//! only are private, and servers or kinds outside a token's view), before and after a restart
//! with a server whose walks keep failing. Mutating methods are refused to token clients.

use std::path::Path;
use std::time::{Duration, Instant};

use mcp_mirror::protocol::ScopeRule;
use serde_json::{json, Value};

use crate::http_face::{fast_daemon_settings, http_exchange, modern_request, TOKEN};
use crate::support::{free_port, stdio_server, wait_for, Daemon, HttpFixture, Scratch};

const NARROW_TOKEN: &str = "tok-narrow-51b2e8";
const OPS_TOKEN: &str = "tok-ops-a09c41";
/// `protocol::NOT_PERMITTED`.
const NOT_PERMITTED: i64 = -32005;

/// Texts that only the private entries hold.
const PRIVATE_MARKERS: &[&str] = &[
    // Every entry of `secret` (its templates too).
    "fixture://secret/",
    // `paged`'s resources: its first page is public, the rest private.
    "fixture://paged/docs/0",
    // `kinds`: its tools and templates are private, its resources and prompts public.
    "kinds_private_tool",
    "fixture://kinds/docs/{id}",
    "from template fixture://kinds/",
];

/// What the narrow token (servers `open` and `kinds`, kinds `resource` and `prompt`) may not
/// see besides the private entries.
const OUTSIDE_NARROW_VIEW: &[&str] = &["fixture://paged/", "fixture://open/docs/{id}"];

/// One request of every method of the table, some several times.
fn probes(method: &str) -> Vec<Value> {
    let reads = [
        "fixture://secret/docs/000001.md",
        "fixture://paged/docs/000004.md",
        "fixture://paged/docs/000000.md",
        // Unlisted: reached through a template.
        "fixture://kinds/docs/999999.md",
        "fixture://secret/docs/999999.md",
    ];
    match method {
        "initialize" => vec![json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "it", "version": "1"},
        })],
        "ping"
        | "catalog/status"
        | "catalog/watch"
        | "tools/list"
        | "catalog/drift"
        | "catalog/accept"
        | "catalog/refresh"
        | "resources/templates/list"
        | "catalog/prompts" => {
            vec![json!({})]
        }
        // Paged to the end by `ask`.
        "resources/list" | "catalog/tools" => vec![json!({}), json!({"server": "kinds"})],
        "resources/read" => reads.iter().map(|uri| json!({"uri": uri})).collect(),
        "catalog/resource" => reads.iter().map(|uri| json!({"uri": uri})).collect(),
        "catalog/search" => vec![
            json!({"query": "document"}),
            json!({"query": "synthetic", "limit": 100}),
            json!({"query": "kinds_private_tool", "kinds": ["tool"]}),
            json!({"query": "secret", "kinds": ["resource", "template", "tool", "prompt"]}),
            json!({"query": "document", "raw": true}),
        ],
        "catalog/list" => ["secret", "paged", "kinds", "open"]
            .iter()
            .map(|server| json!({"server": server}))
            .collect(),
        "catalog/changes" => vec![
            json!({}),
            json!({"kinds": ["tool", "template"]}),
            json!({"since": "1d"}),
        ],
        "daemon/reload" => vec![json!({})],
        "catalog/entries" => vec![
            json!({"kind": "resource", "keys": reads}),
            json!({"kind": "template", "keys": ["fixture://kinds/docs/{id}.md", "fixture://secret/docs/{id}.md"]}),
        ],
        "catalog/tool" => vec![json!({"server": "kinds", "name": "kinds_private_tool"})],
        "catalog/prompt" => vec![json!({"server": "kinds", "name": "kinds_public_prompt"})],
        "catalog/history" => vec![
            json!({"kind": "tool", "server": "kinds", "key": "kinds_private_tool", "includeDefinitions": true}),
            json!({"kind": "template", "server": "secret", "key": "fixture://secret/docs/{id}.md", "includeDefinitions": true}),
            json!({"kind": "template", "server": "kinds", "key": "fixture://kinds/docs/{id}.md", "includeDefinitions": true}),
            json!({"kind": "prompt", "server": "kinds", "key": "kinds_public_prompt", "includeDefinitions": true}),
        ],
        "catalog/diff" => vec![
            json!({"kind": "tool", "server": "kinds", "key": "kinds_private_tool"}),
            json!({"kind": "template", "server": "secret", "key": "fixture://secret/docs/{id}.md"}),
        ],
        "tools/call" => vec![
            json!({"name": "search_catalog", "arguments": {"query": "kinds_private_tool"}}),
            json!({"name": "search_catalog", "arguments": {"query": "document", "limit": 50}}),
            json!({"name": "describe_entry", "arguments": {"kind": "tool", "server": "kinds", "name": "kinds_private_tool"}}),
            json!({"name": "describe_entry", "arguments": {"kind": "resource", "server": "secret", "uri": "fixture://secret/docs/000001.md"}}),
            json!({"name": "describe_entry", "arguments": {"kind": "resource", "server": "paged", "uri": "fixture://paged/docs/000004.md"}}),
            json!({"name": "tool_changes", "arguments": {"server": "kinds", "name": "kinds_private_tool"}}),
            json!({"name": "tool_changes", "arguments": {"server": "kinds", "name": "kinds_private_tool", "since": "1d"}}),
        ],
        other => panic!(
            "the method {other} is in the protocol's table but this test has no probe for it: \
             add one, and make sure its answer passes the view"
        ),
    }
}

/// Asks `method` with `params` as `token` (the socket when `None`), following `nextCursor`;
/// every answer's text.
fn ask(
    daemon: &Daemon,
    address: &str,
    token: Option<&str>,
    method: &str,
    params: &Value,
) -> Vec<Value> {
    let mut answers = Vec::new();
    let mut params = params.clone();
    for _ in 0..50 {
        let answer = match token {
            None => daemon.connect().request(method, params.clone()),
            Some(token) => {
                let bearer = format!("Bearer {token}");
                http_exchange(
                    address,
                    "POST",
                    &[("Authorization", &bearer)],
                    &modern_request(method, params.clone()).to_string(),
                )
                .json()
            }
        };
        let next = answer["result"]["nextCursor"].as_str().map(str::to_string);
        answers.push(answer);
        match next {
            Some(cursor) => params["cursor"] = json!(cursor),
            None => break,
        }
    }
    answers
}

/// Every method of the table, as `token`: no answer holds a text of `hidden`; mutating methods
/// are refused. Errors may quote the request's own words (a URI asked for), so a marker the
/// request holds is looked for in results only. Returns every answer's text.
fn every_method(daemon: &Daemon, address: &str, token: &str, hidden: &[&str]) -> String {
    let mut everything = String::new();
    for (method, rule) in mcp_mirror::protocol::METHODS {
        for params in probes(method) {
            for answer in ask(daemon, address, Some(token), method, &params) {
                // `catalog/entries` names the keys it was asked for in `missing`: its entries
                // are what must hold nothing hidden.
                let text = match *method {
                    "catalog/entries" if answer.get("result").is_some() => {
                        answer["result"]["entries"].to_string()
                    }
                    _ => answer.to_string(),
                };
                everything.push_str(&text);
                // Mutating methods are refused to these tokens, and methods on the daemon process
                // to the HTTP face altogether.
                if matches!(rule, ScopeRule::Mutating | ScopeRule::Local) {
                    assert_eq!(
                        answer["error"]["code"], NOT_PERMITTED,
                        "{method} as {token}: {text}"
                    );
                    continue;
                }
                let asked = params.to_string();
                for marker in hidden {
                    let quoted = answer.get("error").is_some() && asked.contains(marker);
                    assert!(
                        quoted || !text.contains(marker),
                        "{method} {asked} as {token} reached {marker:?}: {text}"
                    );
                }
            }
        }
    }
    everything
}

fn scenario(scratch: &Scratch) -> std::path::PathBuf {
    scratch.write_scenario(
        "kinds.json",
        &json!({
            "generate": 3,
            "tools": [{"name": "kinds_private_tool", "description": "a tool", "inputSchema": {"type": "object"}}],
            "prompts": [{"name": "kinds_public_prompt", "description": "a prompt"}],
        }),
    )
}

fn config(scratch: &Scratch, secret: &str, paged: &str, kinds: &str) -> std::path::PathBuf {
    let token = |name: &str, value: &str| {
        scratch
            .write_private(name, &format!("{value}\n"))
            .display()
            .to_string()
    };
    let (fleet, narrow, ops) = (
        token("fleet.token", TOKEN),
        token("narrow.token", NARROW_TOKEN),
        token("ops.token", OPS_TOKEN),
    );
    let address = format!("127.0.0.1:{}", free_port());
    let config = scratch.config(&format!(
        "[servers.secret]\nurl = \"{secret}\"\n\n[servers.paged]\nurl = \"{paged}\"\n\n[servers.kinds]\nurl = \"{kinds}\"\n\n{}\
         [http]\nlisten = \"{address}\"\n\
         tokens = {{ fleet = {fleet:?}, narrow = {{ file = {narrow:?}, servers = [\"open\", \"kinds\"], kinds = [\"resource\", \"prompt\"] }}, ops = {{ file = {ops:?}, mutate = true }} }}\n",
        stdio_server("open", &["--name", "open", "--generate", "6"]),
    ));
    fast_daemon_settings(&config);
    config
}

fn address_of(config: &Path) -> String {
    let text = std::fs::read_to_string(config).expect("config");
    let line = text
        .lines()
        .find(|line| line.starts_with("listen = "))
        .expect("listen");
    line.trim_start_matches("listen = ")
        .trim_matches('"')
        .to_string()
}

fn wait_for_face(address: &str) {
    wait_for("the HTTP face", Duration::from_secs(20), || {
        std::net::TcpStream::connect(address).ok().map(|_| ())
    });
}

#[test]
fn no_private_entry_and_nothing_outside_its_view_reaches_a_token_by_any_method() {
    let scratch = Scratch::new();
    let kinds_scenario = scenario(&scratch).display().to_string();
    let secret = HttpFixture::start(&[
        "--era",
        "modern",
        "--cache-scope",
        "private",
        "--name",
        "secret",
        "--generate",
        "4",
    ]);
    let paged = HttpFixture::start(&[
        "--era",
        "modern",
        "--name",
        "paged",
        "--generate",
        "5",
        "--page-size",
        "2",
        "--private-after-page",
        "1",
    ]);
    let kinds = HttpFixture::start(&[
        "--era",
        "modern",
        "--name",
        "kinds",
        "--scenario",
        &kinds_scenario,
        "--private-lists",
        "tools/list,resources/templates/list",
    ]);
    let config = config(&scratch, &secret.url, &paged.url, &kinds.url);
    let address = address_of(&config);
    let mut daemon = Daemon::start(&scratch, &config);
    wait_for_face(&address);
    for server in ["secret", "paged", "kinds", "open"] {
        daemon.wait_for_walks(server, 1);
    }
    // The owner (the socket) holds everything the tokens must not get: the probes can fail.
    let mut owner = String::new();
    for (method, rule) in mcp_mirror::protocol::METHODS {
        if matches!(rule, ScopeRule::Mutating | ScopeRule::Local) {
            continue;
        }
        for params in probes(method) {
            for answer in ask(&daemon, &address, None, method, &params) {
                owner.push_str(&answer.to_string());
            }
        }
    }
    for marker in PRIVATE_MARKERS.iter().chain(OUTSIDE_NARROW_VIEW) {
        assert!(owner.contains(marker), "the owner never saw {marker:?}");
    }

    let narrow_hidden: Vec<&str> = PRIVATE_MARKERS
        .iter()
        .chain(OUTSIDE_NARROW_VIEW)
        .copied()
        .collect();
    let check = |daemon: &Daemon, when: &str| {
        let fleet = every_method(daemon, &address, TOKEN, PRIVATE_MARKERS);
        // What each token may see, it sees (the view hides no more than it should).
        for visible in [
            "fixture://open/docs/000001.md",
            "fixture://kinds/docs/000001.md",
            "kinds_public_prompt",
            "fixture://paged/docs/{id}",
        ] {
            assert!(
                fleet.contains(visible),
                "{when}: the fleet token never saw {visible:?}"
            );
        }
        let narrow = every_method(daemon, &address, NARROW_TOKEN, &narrow_hidden);
        for visible in [
            "fixture://open/docs/000001.md",
            "fixture://kinds/docs/000001.md",
            "kinds_public_prompt",
        ] {
            assert!(
                narrow.contains(visible),
                "{when}: the narrow token never saw {visible:?}"
            );
        }
    };
    check(&daemon, "after the first walks");

    // Status tells the narrow token of its servers and kinds only, totals included.
    let status = ask(
        &daemon,
        &address,
        Some(NARROW_TOKEN),
        "catalog/status",
        &json!({}),
    );
    let status = &status[0]["result"];
    let servers = status["servers"].as_array().expect("servers");
    let names: Vec<&str> = servers
        .iter()
        .filter_map(|server| server["name"].as_str())
        .collect();
    assert_eq!(names, ["kinds", "open"], "{status}");
    let kinds_server = &servers[0];
    assert!(
        kinds_server["kinds"].get("tool").is_none(),
        "{kinds_server}"
    );
    let visible_total: u64 = servers
        .iter()
        .map(|server| server["resources"].as_u64().expect("resources"))
        .sum();
    assert_eq!(status["daemon"]["resources"], visible_total, "{status}");
    assert!(
        status["daemon"].get("mergedResources").is_none(),
        "{status}"
    );

    // A token allowed to mutate may refresh; the others were refused above.
    let bearer = format!("Bearer {OPS_TOKEN}");
    let refreshed = http_exchange(
        &address,
        "POST",
        &[("Authorization", &bearer)],
        &modern_request("catalog/refresh", json!({"server": "open", "wait": true})).to_string(),
    )
    .json();
    assert_eq!(
        refreshed["result"]["servers"]["open"]["ok"], true,
        "{refreshed}"
    );

    // Restarted with `secret` gone: its walks fail, and what is stored keeps its scope.
    daemon.stop();
    drop(secret);
    let daemon = Daemon::start(&scratch, &config);
    wait_for_face(&address);
    check(&daemon, "after a restart, before any walk");
    wait_for("a failed walk of secret", Duration::from_secs(30), || {
        let status = daemon.server_status("secret");
        (status["walksFailed"].as_u64().unwrap_or(0) > 0 || status["lastError"].is_string())
            .then_some(())
    });
    check(&daemon, "after a restart, with secret failing");
}

#[test]
fn refreshes_are_paced_by_min_walk_interval_whoever_sends_them() {
    let scratch = Scratch::new();
    let servers = stdio_server("docs", &["--name", "docs", "--generate", "3"]);
    let config = scratch.config(&servers);
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        text.replacen("[daemon]\n", "[daemon]\nmin_walk_interval = \"1s\"\n", 1),
    )
    .expect("config");
    let daemon = Daemon::start(&scratch, &config);
    let before = daemon.wait_for_walks("docs", 1)["walksOk"]
        .as_u64()
        .unwrap_or(0);
    let started = Instant::now();
    let mut client = daemon.connect();
    let mut asked = 0;
    while started.elapsed() < Duration::from_secs(2) {
        let answer = client.request("catalog/refresh", json!({"server": "docs"}));
        assert!(answer["result"].is_object(), "{answer}");
        asked += 1;
    }
    // Every caller is answered: the walk held back takes the last ones along.
    let answer = client.request("catalog/refresh", json!({"server": "docs", "wait": true}));
    assert_eq!(answer["result"]["servers"]["docs"]["ok"], true, "{answer}");
    let elapsed = started.elapsed();
    let walks = daemon.server_status("docs")["walksOk"]
        .as_u64()
        .unwrap_or(0)
        - before;
    // One walk per second of asking at most, plus the one that may start at once, the last,
    // and one left over from the start (unpaced, a refresh flood walks hundreds of times).
    let bound = elapsed.as_millis().div_ceil(1000) as u64 + 3;
    assert!(asked > 20, "only {asked} refreshes were sent");
    assert!(
        walks <= bound,
        "{asked} refreshes in {elapsed:?} made {walks} walks (at most {bound})"
    );
    assert!(walks >= 1);
}

#[test]
fn a_server_reflecting_our_token_into_an_entry_never_gets_it_stored_or_served() {
    const UPSTREAM_TOKEN: &str = "tok-upstream-reflected-8c21";
    let scratch = Scratch::new();
    let reflecting = HttpFixture::start(&[
        "--name",
        "mirror",
        "--generate",
        "3",
        "--reflect-authorization",
    ]);
    let token_file = scratch.write("upstream.token", UPSTREAM_TOKEN);
    let config = scratch.config(&format!(
        "[servers.mirror]\nurl = \"{}\"\nbearer_token_file = {:?}\n",
        reflecting.url,
        token_file.display().to_string()
    ));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("mirror", 1);
    let listed = serde_json::to_string(&daemon.list_all()).expect("json");
    // The server did reflect it (the fixture wrote what it saw), and it was scrubbed.
    assert!(
        listed.contains("Authorization: Bearer <redacted>"),
        "{listed}"
    );
    assert!(!listed.contains(UPSTREAM_TOKEN), "{listed}");
    let searched = daemon
        .call("catalog/search", json!({"query": "Authorization"}))
        .to_string();
    assert!(!searched.contains(UPSTREAM_TOKEN), "{searched}");
    drop(daemon);
    let stored = std::fs::read(scratch.path("catalog.db")).expect("database");
    let stored = String::from_utf8_lossy(&stored);
    assert!(
        !stored.contains(UPSTREAM_TOKEN),
        "the token is in the database file"
    );
}

/// A daemon with one stdio fixture of its own (`own_name`, from a scenario file) and the
/// other daemon's HTTP face as server `peer_name`, serving its face at `own_address`.
fn loop_member(
    scratch: &Scratch,
    own_name: &str,
    own_address: &str,
    peer_name: &str,
    peer_address: &str,
    generate: u64,
) -> (Daemon, std::path::PathBuf) {
    let scenario = scratch.write_scenario("own.json", &json!({"generate": generate}));
    let token = scratch
        .write_private("fleet.token", &format!("{TOKEN}\n"))
        .display()
        .to_string();
    let config = scratch.config(&format!(
        "{}[servers.{peer_name}]\nurl = \"http://{peer_address}/mcp\"\nbearer_token_file = {token:?}\n\n\
         [http]\nlisten = \"{own_address}\"\ntokens = {{ fleet = {token:?} }}\n",
        stdio_server(own_name, &["--name", own_name, "--scenario", scenario.to_str().expect("utf-8")]),
    ));
    fast_daemon_settings(&config);
    (Daemon::start(scratch, &config), scenario)
}

/// Pages of our own entries coming back through the loop are left out, but they are not a
/// cursor loop: a peer listing more than `max_pages_without_new` pages of them before its own
/// (here 2,000 of A's, four pages of 500, before B's three) is walked to its end, so B's own
/// entries and their removals still reach A (the soak found A's walk of B failing forever).
#[test]
fn pages_of_our_own_entries_back_through_a_loop_are_not_a_cursor_loop() {
    let (scratch_a, scratch_b) = (Scratch::new(), Scratch::new());
    let (address_a, address_b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let (a, _) = loop_member(&scratch_a, "alpha", &address_a, "b", &address_b, 2000);
    let (b, beta_scenario) = loop_member(&scratch_b, "beta", &address_b, "a", &address_a, 3);
    wait_for("B to hold A's 2,000", Duration::from_secs(60), || {
        (b.server_status("a")["resources"] == 2000).then_some(())
    });
    // A walks B after B took A's entries: B's three, and a walk that succeeds.
    let walks_before = a.server_status("b")["walksOk"].as_u64().unwrap_or(0);
    scratch_b.write_scenario("own.json", &json!({"generate": 2}));
    assert!(beta_scenario.exists());
    wait_for(
        "a removal at B's source to leave A",
        Duration::from_secs(60),
        || {
            let status = a.server_status("b");
            (own_snapshot(&a, "b").len() == 2
                && status["walksOk"].as_u64().unwrap_or(0) > walks_before)
                .then_some(())
        },
    );
    let status = a.server_status("b");
    assert_ne!(status["state"], "failed", "{status}");
    assert!(status["lastError"].is_null(), "{status}");
}

fn own_snapshot(daemon: &Daemon, server: &str) -> Vec<Value> {
    daemon.call("catalog/list", json!({"server": server}))["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_mirror_loop_is_cut_by_the_chain_of_mirrors_and_removed_entries_die() {
    let (scratch_a, scratch_b) = (Scratch::new(), Scratch::new());
    let (address_a, address_b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let (a, alpha_scenario) = loop_member(&scratch_a, "alpha", &address_a, "b", &address_b, 4);
    let (b, _) = loop_member(&scratch_b, "beta", &address_b, "a", &address_a, 3);
    // Each holds its own entries and the other's, once: what came back through the loop is
    // left out (A's copy of B holds B's own three, not A's four again).
    let settled = |daemon: &Daemon, peer: &str, own: &str, own_count: usize, peer_count: usize| {
        wait_for(
            &format!("{peer} mirrored without a loop"),
            Duration::from_secs(40),
            || {
                let peer_snapshot = own_snapshot(daemon, peer);
                let uris: Vec<&str> = peer_snapshot
                    .iter()
                    .filter_map(|entry| entry["resource"]["uri"].as_str())
                    .collect();
                let foreign = uris
                    .iter()
                    .all(|uri| !uri.starts_with(&format!("fixture://{own}/")));
                (foreign
                    && uris.len() == peer_count
                    && own_snapshot(daemon, own).len() == own_count)
                    .then_some(peer_snapshot)
            },
        )
    };
    let a_of_b = settled(&a, "b", "alpha", 4, 3);
    settled(&b, "a", "beta", 3, 4);
    // Entries keep their origin and a chain of one mirror; `_meta` does not grow.
    for entry in &a_of_b {
        let meta = &entry["resource"]["_meta"];
        assert_eq!(meta["io.mcp-mirror/server"], "beta", "{entry}");
        assert_eq!(
            meta["io.mcp-mirror/mirrors"].as_array().map(Vec::len),
            Some(1),
            "{entry}"
        );
    }
    // The loop is named in status, on both sides, once each has walked the other after that
    // other took its entries.
    wait_for("the loop in status", Duration::from_secs(40), || {
        let a_status = a.server_status("b");
        let b_status = b.server_status("a");
        (a_status["live"]["mirrorLoop"].is_string() || b_status["live"]["mirrorLoop"].is_string())
            .then_some(())
    });

    // An entry removed at its source leaves both mirrors.
    let removed = "fixture://alpha/docs/000003.md";
    scratch_a.write_scenario("own.json", &json!({"generate": 3}));
    assert!(alpha_scenario.exists());
    for (daemon, name) in [(&a, "A"), (&b, "B")] {
        wait_for(
            &format!("{removed} to leave {name}"),
            Duration::from_secs(40),
            || (!daemon.uris().iter().any(|uri| uri == removed)).then_some(()),
        );
    }
    settled(&b, "a", "beta", 3, 3);
    // No walk storm: a handful of walks each, not a growing count.
    let walks = |daemon: &Daemon, server: &str| {
        daemon.server_status(server)["walksOk"]
            .as_u64()
            .unwrap_or(0)
    };
    let (a_walks, b_walks) = (walks(&a, "b"), walks(&b, "a"));
    assert!(
        a_walks <= 8 && b_walks <= 8,
        "walks of the peer: A {a_walks}, B {b_walks}"
    );
}
