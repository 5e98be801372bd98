//! Tools and prompts travel through a fleet: a downstream of an mcp-mirror holds the origin
//! servers' tools and prompts (each under its origin-qualified key, so one name on two origin
//! servers stays two entries), follows their changes as deltas of the feed, sees only its
//! token's view, ends as a fresh walk would, and keeps the path of keys through two levels;
//! it keeps its own history of what it follows and answers it cut off (issue 34).

use std::time::Duration;

use serde_json::{json, Value};

use crate::http_face::{downstream, fast_daemon_settings, Upstream};
use crate::support::{free_port, stdio_server, wait_for, Daemon, Scratch};

const NARROW_TOKEN: &str = "tok-narrow-5e1b0d";

/// An origin server's scenario: a few resources, the tool `echo` (and `extra` tools), the
/// prompt `greet` (and `extra` prompts), each described by `version`.
fn origin_scenario(origin: &str, version: &str, tools: &[&str], prompts: &[&str]) -> Value {
    let tool = |name: &str| {
        json!({
            "name": name,
            "description": format!("{name} of {origin}, {version}"),
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        })
    };
    let prompt = |name: &str| {
        json!({
            "name": name,
            "description": format!("{name} of {origin}, {version}"),
            "arguments": [{"name": "who", "required": false}],
        })
    };
    json!({
        "generate": 5,
        "page_size": 100,
        "resources": [{"uri": format!("fixture://{origin}/own"), "name": format!("{origin}-own")}],
        "tools": tools.iter().map(|name| tool(name)).collect::<Vec<_>>(),
        "prompts": prompts.iter().map(|name| prompt(name)).collect::<Vec<_>>(),
    })
}

/// An upstream of two origin servers, `alpha` and `beta` (their scenarios in `origin`), with
/// the token `fleet` (everything) and `narrow` (server alpha; resources and prompts only).
fn upstream_of_two(origin: &Scratch) -> Upstream {
    let mut servers = String::new();
    for (name, tools) in [
        ("alpha", &["echo", "only_alpha"][..]),
        ("beta", &["echo"][..]),
    ] {
        let scenario = origin.write_scenario(
            &format!("{name}.json"),
            &origin_scenario(name, "v1", tools, &["greet"]),
        );
        let scenario = scenario.display().to_string();
        servers.push_str(&stdio_server(
            name,
            &["--name", name, "--scenario", &scenario],
        ));
    }
    let scratch = Scratch::new();
    let fleet = scratch.write_private("fleet.token", &format!("{}\n", crate::http_face::TOKEN));
    let narrow = scratch.write_private("narrow.token", &format!("{NARROW_TOKEN}\n"));
    let address = format!("127.0.0.1:{}", free_port());
    let config = scratch.config(&format!(
        "{servers}[http]\nlisten = \"{address}\"\n\
         tokens = {{ fleet = {:?}, narrow = {{ file = {:?}, servers = [\"alpha\"], kinds = [\"resource\", \"prompt\"] }} }}\n",
        fleet.display().to_string(),
        narrow.display().to_string()
    ));
    fast_daemon_settings(&config);
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("alpha", 1);
    daemon.wait_for_walks("beta", 1);
    let upstream = Upstream {
        daemon,
        address,
        scratch,
    };
    wait_for("the HTTP face", Duration::from_secs(20), || {
        std::net::TcpStream::connect(&upstream.address)
            .ok()
            .map(|_| ())
    });
    upstream
}

/// A downstream of `upstream` through the `narrow` token.
fn narrow_downstream(scratch: &Scratch, upstream: &Upstream) -> Daemon {
    let token = scratch.write("upstream.token", NARROW_TOKEN);
    let config = scratch.config(&format!(
        "[servers.upstream]\nurl = \"http://{}/mcp\"\nbearer_token_file = {:?}\nera = \"modern\"\n",
        upstream.address,
        token.display().to_string()
    ));
    fast_daemon_settings(&config);
    Daemon::start(scratch, &config)
}

/// Every entry of `catalog/tools` or `catalog/prompts` (`key`) of a daemon, page by page.
fn all_entries(daemon: &Daemon, method: &str, key: &str) -> Vec<Value> {
    let mut client = daemon.connect();
    let (mut entries, mut cursor) = (Vec::new(), Value::Null);
    loop {
        let params = match &cursor {
            Value::Null => json!({}),
            cursor => json!({"cursor": cursor}),
        };
        let answer = client.request(method, params);
        let result = &answer["result"];
        entries.extend(result[key].as_array().cloned().unwrap_or_default());
        cursor = result["nextCursor"].clone();
        if cursor.is_null() {
            return entries;
        }
    }
}

fn tools(daemon: &Daemon) -> Vec<Value> {
    all_entries(daemon, "catalog/tools", "tools")
}

fn prompts(daemon: &Daemon) -> Vec<Value> {
    all_entries(daemon, "catalog/prompts", "prompts")
}

/// (key, name, origin, description) of each entry.
fn summary(entries: &[Value]) -> Vec<(String, String, String, String)> {
    entries
        .iter()
        .map(|entry| {
            let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
            (
                text(&entry["_meta"]["io.mcp-mirror/key"]),
                text(&entry["name"]),
                text(&entry["_meta"]["io.mcp-mirror/server"]),
                text(&entry["description"]),
            )
        })
        .collect()
}

fn status_number(daemon: &Daemon, field: &str) -> u64 {
    daemon.server_status("upstream")[field]
        .as_u64()
        .unwrap_or(0)
}

/// Waits for the first walk of every kind (resources are swapped first, tools and prompts after).
fn wait_for_kinds(mirror: &Daemon, tool_count: usize, prompt_count: usize) {
    mirror.wait_for_walks("upstream", 1);
    wait_for("the tools and prompts", Duration::from_secs(30), || {
        (tools(mirror).len() == tool_count && prompts(mirror).len() == prompt_count).then_some(())
    });
}

fn wait_for_listen(mirror: &Daemon) {
    wait_for("the listen stream", Duration::from_secs(20), || {
        (mirror.server_status("upstream")["live"]["push"] == "subscriptions/listen").then_some(())
    });
}

#[test]
fn origin_tools_and_prompts_reach_a_downstream_kept_apart_and_follow_as_deltas() {
    let origin = Scratch::new();
    let upstream = upstream_of_two(&origin);
    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    wait_for_kinds(&mirror, 3, 2);
    wait_for_listen(&mirror);

    // Both origin servers' `echo`, apart, with their origin; the key chains through the
    // upstream's server name.
    let held = summary(&tools(&mirror));
    let own = |key: &str, name: &str, origin: &str, description: &str| {
        (key.into(), name.into(), origin.into(), description.into())
    };
    assert_eq!(
        held,
        vec![
            own("upstream/alpha/echo", "echo", "alpha", "echo of alpha, v1"),
            own(
                "upstream/alpha/only_alpha",
                "only_alpha",
                "alpha",
                "only_alpha of alpha, v1"
            ),
            own("upstream/beta/echo", "echo", "beta", "echo of beta, v1"),
        ]
    );
    let via: Vec<Value> = tools(&mirror)
        .iter()
        .map(|tool| tool["_meta"]["io.mcp-mirror/via"].clone())
        .collect();
    assert_eq!(via, vec![json!("upstream"); 3]);
    assert_eq!(
        summary(&prompts(&mirror)),
        vec![
            own(
                "upstream/alpha/greet",
                "greet",
                "alpha",
                "greet of alpha, v1"
            ),
            own("upstream/beta/greet", "greet", "beta", "greet of beta, v1"),
        ]
    );
    // The mirror's own MCP tools stay its two callable tools.
    let own_tools = mirror.connect().request("tools/list", json!({}));
    let names: Vec<&str> = own_tools["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(names.contains(&"search_catalog"), "{own_tools}");
    assert!(!names.contains(&"echo"), "{own_tools}");

    // One tool changes at one origin, then a prompt goes at the other: deltas, not walks.
    // The first walk is counted once its every list is in.
    mirror.wait_for_walks("upstream", 1);
    let walks = status_number(&mirror, "walksOk");
    let deltas = status_number(&mirror, "deltasApplied");
    origin.write_scenario(
        "alpha.json",
        &origin_scenario("alpha", "v2", &["echo", "only_alpha"], &["greet"]),
    );
    wait_for(
        "the changed tool at the downstream",
        Duration::from_secs(30),
        || {
            tools(&mirror)
                .iter()
                .any(|tool| tool["description"] == "echo of alpha, v2")
                .then_some(())
        },
    );
    origin.write_scenario("beta.json", &origin_scenario("beta", "v1", &["echo"], &[]));
    wait_for(
        "the removed prompt at the downstream",
        Duration::from_secs(30),
        || (prompts(&mirror).len() == 1).then_some(()),
    );
    let status = mirror.server_status("upstream");
    assert_eq!(
        status["walksOk"].as_u64(),
        Some(walks),
        "tool and prompt changes arrived as deltas: {status}"
    );
    assert!(
        status_number(&mirror, "deltasApplied") >= deltas + 2,
        "{status}"
    );
    assert_eq!(
        summary(&tools(&mirror))[0].3,
        "echo of alpha, v2",
        "only the changed tool changed"
    );
    assert_eq!(summary(&tools(&mirror))[2].3, "echo of beta, v1");

    // A fresh walk of the upstream holds exactly the same tools and prompts.
    let fresh_scratch = Scratch::new();
    let fresh = downstream(&fresh_scratch, &upstream, "modern");
    wait_for_kinds(&fresh, 3, 1);
    assert_eq!(tools(&fresh), tools(&mirror));
    assert_eq!(prompts(&fresh), prompts(&mirror));
    assert_eq!(fresh.list_all(), mirror.list_all());
}

#[test]
fn a_token_without_tools_or_a_server_gets_none_of_them_through_a_downstream() {
    let origin = Scratch::new();
    let upstream = upstream_of_two(&origin);
    let scratch = Scratch::new();
    let mirror = narrow_downstream(&scratch, &upstream);
    wait_for_kinds(&mirror, 0, 1);
    wait_for_listen(&mirror);
    let only_alpha = |daemon: &Daemon| {
        assert!(tools(daemon).is_empty(), "{:?}", tools(daemon));
        let prompts = summary(&prompts(daemon));
        assert!(
            prompts.iter().all(|prompt| prompt.2 == "alpha"),
            "{prompts:?}"
        );
        let resources = daemon.list_all();
        assert!(
            resources
                .iter()
                .all(|resource| resource["_meta"]["io.mcp-mirror/server"] == "alpha"),
            "{resources:?}"
        );
        prompts
    };
    assert_eq!(only_alpha(&mirror).len(), 1);

    // Changes outside the view (beta's prompt, any tool), then one inside it (alpha's
    // prompt) that tells they have all been followed.
    // The first walk is counted once its every list is in.
    mirror.wait_for_walks("upstream", 1);
    let walks = status_number(&mirror, "walksOk");
    origin.write_scenario(
        "beta.json",
        &origin_scenario("beta", "v2", &["echo", "new"], &["greet", "welcome"]),
    );
    wait_for(
        "beta's change at the upstream",
        Duration::from_secs(30),
        || (prompts(&upstream.daemon).len() == 3).then_some(()),
    );
    origin.write_scenario(
        "alpha.json",
        &origin_scenario("alpha", "v2", &["echo", "only_alpha", "more"], &["greet"]),
    );
    wait_for(
        "alpha's prompt change at the downstream",
        Duration::from_secs(30),
        || {
            prompts(&mirror)
                .iter()
                .any(|prompt| prompt["description"] == "greet of alpha, v2")
                .then_some(())
        },
    );
    assert_eq!(only_alpha(&mirror).len(), 1);
    assert_eq!(
        status_number(&mirror, "walksOk"),
        walks,
        "{}",
        mirror.server_status("upstream")
    );
}

#[test]
fn a_tool_keeps_its_path_through_two_levels_of_mirrors() {
    let origin = Scratch::new();
    let upstream = upstream_of_two(&origin);
    // The middle mirror follows the upstream and serves its own face to the last one.
    let middle_scratch = Scratch::new();
    let token = middle_scratch.write("upstream.token", crate::http_face::TOKEN);
    let face_token =
        middle_scratch.write_private("fleet.token", &format!("{}\n", crate::http_face::TOKEN));
    let address = format!("127.0.0.1:{}", free_port());
    let config = middle_scratch.config(&format!(
        "[servers.upstream]\nurl = \"http://{}/mcp\"\nbearer_token_file = {:?}\nera = \"modern\"\n\
         [http]\nlisten = \"{address}\"\ntokens = {{ fleet = {:?} }}\n",
        upstream.address,
        token.display().to_string(),
        face_token.display().to_string()
    ));
    fast_daemon_settings(&config);
    let middle = Upstream {
        daemon: Daemon::start(&middle_scratch, &config),
        address,
        scratch: middle_scratch,
    };
    wait_for_kinds(&middle.daemon, 3, 2);
    let last_scratch = Scratch::new();
    let last = downstream(&last_scratch, &middle, "modern");
    wait_for_kinds(&last, 3, 2);
    wait_for_listen(&last);

    let keys: Vec<String> = summary(&tools(&last))
        .into_iter()
        .map(|(key, name, origin, _)| format!("{key} {name} {origin}"))
        .collect();
    assert_eq!(
        keys,
        [
            "upstream/upstream/alpha/echo echo alpha",
            "upstream/upstream/alpha/only_alpha only_alpha alpha",
            "upstream/upstream/beta/echo echo beta",
        ]
    );
    let chain = &tools(&last)[0]["_meta"]["io.mcp-mirror/mirrors"];
    assert_eq!(chain.as_array().map(Vec::len), Some(2), "{chain}");

    // A change at the origin crosses both levels as deltas.
    // The first walk is counted once its every list is in.
    last.wait_for_walks("upstream", 1);
    let walks = status_number(&last, "walksOk");
    origin.write_scenario(
        "alpha.json",
        &origin_scenario("alpha", "v3", &["echo", "only_alpha"], &["greet"]),
    );
    wait_for(
        "the changed tool two levels down",
        Duration::from_secs(30),
        || {
            tools(&last)
                .iter()
                .any(|tool| tool["description"] == "echo of alpha, v3")
                .then_some(())
        },
    );
    assert_eq!(status_number(&last, "walksOk"), walks);
    assert_eq!(status_number(&middle.daemon, "walksOk"), 1);
}

/// `catalog/history` of one of a downstream's tools (`key`: the upstream's key), with
/// definitions: the versions, newest first.
fn downstream_history(mirror: &Daemon, key: &str) -> Vec<Value> {
    let answer = mirror.connect().request(
        "catalog/history",
        json!({"kind": "tool", "server": "upstream", "key": key, "includeDefinitions": true}),
    );
    answer["result"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_downstream_keeps_its_own_history_of_what_it_follows_and_answers_it_cut_off() {
    let origin = Scratch::new();
    let mut upstream = upstream_of_two(&origin);
    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    wait_for_kinds(&mirror, 3, 2);
    wait_for_listen(&mirror);
    wait_for(
        "the first version downstream",
        Duration::from_secs(30),
        || (downstream_history(&mirror, "alpha/echo").len() == 1).then_some(()),
    );

    // The origin's tool changes: the downstream records the new version from the followed
    // feed (a delta, not a walk), beside the one it had.
    let deltas = status_number(&mirror, "deltasApplied");
    origin.write_scenario(
        "alpha.json",
        &origin_scenario("alpha", "v2", &["echo", "only_alpha"], &["greet"]),
    );
    let versions = wait_for(
        "the second version downstream",
        Duration::from_secs(30),
        || {
            let versions = downstream_history(&mirror, "alpha/echo");
            (versions.len() == 2).then_some(versions)
        },
    );
    assert!(status_number(&mirror, "deltasApplied") > deltas);
    assert_eq!(
        versions[0]["definition"]["description"], "echo of alpha, v2",
        "{versions:?}"
    );
    assert_eq!(
        versions[1]["definition"]["description"], "echo of alpha, v1",
        "{versions:?}"
    );
    assert_eq!(versions[0]["current"], true, "{versions:?}");
    assert_eq!(
        downstream_history(&mirror, "beta/echo").len(),
        1,
        "the other origin's echo did not change"
    );

    // Cut off from its upstream, the downstream still answers from its own history.
    upstream.daemon.stop();
    assert_eq!(downstream_history(&mirror, "alpha/echo"), versions);
    let diff = mirror.call(
        "catalog/diff",
        json!({"kind": "tool", "server": "upstream", "key": "alpha/echo"}),
    );
    let changes = diff["toolChanges"].as_array().expect("toolChanges");
    assert_eq!(changes.len(), 1, "{diff}");
    assert_eq!(changes[0]["change"], "descriptionChanged", "{diff}");
}
