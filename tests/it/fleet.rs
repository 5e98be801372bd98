//! A downstream mirror of an mcp-mirror follows the upstream's change feed: after one full
//! walk, changes arrive as deltas (no walk), the result equals a fresh full walk, and anything
//! the feed cannot account for (a new upstream database) costs exactly one walk.

use std::time::Duration;

use serde_json::{json, Value};

use crate::http_face::{catalog_without_via, count_from, downstream, Upstream, TOKEN};
use crate::support::{stdio_server, wait_for, Daemon, Scratch};

/// The origin's scenario in round `round`: 300 generated resources and `round % 5` extras,
/// each described by the round, so a round adds, removes or changes a few entries.
fn scenario(round: usize) -> Value {
    let extras: Vec<Value> = (0..round % 5)
        .map(|extra| {
            json!({
                "uri": format!("fixture://demo/extra/{extra}"),
                "name": format!("extra-{extra}"),
                "description": format!("extra {extra} as of round {round}"),
            })
        })
        .collect();
    json!({"generate": 300, "page_size": 100, "resources": extras})
}

fn status_number(daemon: &Daemon, field: &str) -> u64 {
    daemon.server_status("upstream")[field]
        .as_u64()
        .unwrap_or(0)
}

fn same_catalog(left: &Daemon, right: &Daemon) -> bool {
    catalog_without_via(left) == catalog_without_via(right)
}

#[test]
fn a_downstream_follows_the_feed_without_walking_and_ends_as_a_fresh_walk() {
    let origin = Scratch::new();
    let scenario_path = origin.write_scenario("demo.json", &scenario(0));
    let scenario_text = scenario_path.display().to_string();
    let servers = stdio_server("demo", &["--name", "demo", "--scenario", &scenario_text]);
    let upstream = Upstream::start(&servers, "");
    upstream.daemon.wait_for_walks("demo", 1);

    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);
    wait_for("the listen stream", Duration::from_secs(20), || {
        (mirror.server_status("upstream")["live"]["push"] == "subscriptions/listen").then_some(())
    });
    let walks = status_number(&mirror, "walksOk");

    // Rounds of one small change at the origin, each a swap of its own at the upstream.
    const ROUNDS: usize = 40;
    for round in 1..=ROUNDS {
        origin.write_scenario("demo.json", &scenario(round));
        let expected = 300 + round % 5;
        wait_for(
            &format!("round {round} at the upstream"),
            Duration::from_secs(20),
            || (count_from(&upstream.daemon, "demo") == expected).then_some(()),
        );
    }
    wait_for(
        "the downstream to hold the upstream's catalog",
        Duration::from_secs(30),
        || same_catalog(&mirror, &upstream.daemon).then_some(()),
    );
    let status = mirror.server_status("upstream");
    assert_eq!(
        status["walksOk"].as_u64(),
        Some(walks),
        "changes arrived as deltas, not walks: {status}"
    );
    assert!(
        status["deltasApplied"].as_u64().unwrap_or(0) >= 1,
        "{status}"
    );
    assert_eq!(status["resources"], 300 + ROUNDS % 5, "{status}");

    // A fresh mirror's full walk holds exactly what the follower holds, byte for byte.
    let fresh_scratch = Scratch::new();
    let fresh = downstream(&fresh_scratch, &upstream, "modern");
    fresh.wait_for_walks("upstream", 1);
    assert_eq!(fresh.list_all(), mirror.list_all());
}

#[test]
fn a_new_upstream_database_costs_exactly_one_walk() {
    let origin = Scratch::new();
    let scenario_path = origin.write_scenario("demo.json", &scenario(1));
    let scenario_text = scenario_path.display().to_string();
    let servers = stdio_server("demo", &["--name", "demo", "--scenario", &scenario_text]);
    let mut upstream = Upstream::start(&servers, "");
    upstream.daemon.wait_for_walks("demo", 1);

    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);

    // Another upstream, with a database of its own (already synced), takes over the address:
    // the follower's cursor belongs to the old database, so it lists once.
    let other_origin = Scratch::new();
    let other_path = other_origin.write_scenario("demo.json", &scenario(3));
    let other_text = other_path.display().to_string();
    let other_servers = stdio_server("demo", &["--name", "demo", "--scenario", &other_text]);
    let mut other = Upstream::start(&other_servers, "");
    other.daemon.wait_for_walks("demo", 1);
    other.daemon.stop();
    let config = other.scratch.path("daemon.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, text.replace(&other.address, &upstream.address)).expect("config");
    upstream.daemon.stop();
    other.daemon = Daemon::start(&other.scratch, &config);
    wait_for(
        "the downstream to hold the new upstream's catalog",
        Duration::from_secs(60),
        || same_catalog(&mirror, &other.daemon).then_some(()),
    );
    assert_eq!(
        status_number(&mirror, "walksOk"),
        2,
        "{}",
        mirror.server_status("upstream")
    );

    // From then on it follows the new database's feed.
    other_origin.write_scenario("demo.json", &scenario(4));
    wait_for(
        "the next change at the downstream",
        Duration::from_secs(30),
        || (count_from(&mirror, "demo") == 304).then_some(()),
    );
    assert_eq!(status_number(&mirror, "walksOk"), 2);
    assert!(status_number(&mirror, "deltasApplied") >= 1);
}

#[test]
fn list_answers_carry_an_etag_and_an_unchanged_catalog_answers_304() {
    let origin = Scratch::new();
    let scenario_path = origin.write_scenario("demo.json", &scenario(1));
    let scenario_text = scenario_path.display().to_string();
    let servers = stdio_server("demo", &["--name", "demo", "--scenario", &scenario_text]);
    let upstream = Upstream::start(&servers, "");
    upstream.daemon.wait_for_walks("demo", 1);
    let bearer = format!("Bearer {TOKEN}");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {}});

    let first = upstream.post(&[("Authorization", &bearer)], &list);
    assert_eq!(first.status, 200, "{}", first.body);
    let tag = first.header("etag").expect("an ETag on a list answer");
    assert_eq!(
        first.json()["result"]["resources"].as_array().map(Vec::len),
        Some(301)
    );

    let again = upstream.post(
        &[("Authorization", &bearer), ("If-None-Match", &tag)],
        &list,
    );
    assert_eq!(again.status, 304, "{}", again.head);
    assert!(again.body.is_empty(), "{}", again.body);
    assert_eq!(again.header("etag").as_deref(), Some(tag.as_str()));

    // Another page, or another method, is another answer with its own tag.
    let other =
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/templates/list", "params": {}});
    let templates = upstream.post(
        &[("Authorization", &bearer), ("If-None-Match", &tag)],
        &other,
    );
    assert_eq!(templates.status, 200);
    assert_ne!(templates.header("etag").as_deref(), Some(tag.as_str()));
    // Search and other non-list answers carry none.
    let search =
        json!({"jsonrpc": "2.0", "id": 3, "method": "catalog/search", "params": {"query": "doc"}});
    assert_eq!(
        upstream
            .post(&[("Authorization", &bearer)], &search)
            .header("etag"),
        None
    );

    // A change moves the tag: the old one gets the new answer.
    origin.write_scenario("demo.json", &scenario(2));
    wait_for(
        "the change at the upstream",
        Duration::from_secs(20),
        || (count_from(&upstream.daemon, "demo") == 302).then_some(()),
    );
    let changed = upstream.post(
        &[("Authorization", &bearer), ("If-None-Match", &tag)],
        &list,
    );
    assert_eq!(changed.status, 200, "{}", changed.head);
    assert_ne!(changed.header("etag").as_deref(), Some(tag.as_str()));
    assert_eq!(
        changed.json()["result"]["resources"]
            .as_array()
            .map(Vec::len),
        Some(302)
    );
}
