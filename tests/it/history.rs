//! Every definition's history (issue 34): a fixture server changes a tool's definition and the daemon keeps each version, reuses a flip-flop's body, prunes by count, and diffs versions in a client's words, through the socket and the CLI.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{open_database, run_cli, stdio_server, wait_for, Daemon, Scratch};

/// The `weather` tool with these input properties and required names.
fn weather(properties: Value, required: Value) -> Value {
    json!({
        "tools": [{
            "name": "weather",
            "description": "Forecasts the weather",
            "inputSchema": {"type": "object", "properties": properties, "required": required}
        }]
    })
}

fn history(daemon: &Daemon) -> Vec<Value> {
    let answer = daemon.connect().request(
        "catalog/history",
        json!({"kind": "tool", "server": "fx", "key": "weather", "includeDefinitions": true}),
    );
    answer["result"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Writes the scenario and waits until the newest kept version is its tool.
fn change_to(daemon: &Daemon, scratch: &Scratch, scenario: &Value, versions: usize) -> Vec<Value> {
    scratch.write_scenario("scenario.json", scenario);
    wait_for("the new version", Duration::from_secs(30), || {
        let versions_now = history(daemon);
        (versions_now.len() == versions && versions_now[0]["definition"] == scenario["tools"][0])
            .then_some(versions_now)
    })
}

/// Starts a daemon mirroring the fixture `fx` with `scenario`, and these extra `[daemon]` lines.
fn fixture_daemon(scratch: &Scratch, scenario: &Value, daemon_lines: &str) -> Daemon {
    let path = scratch.write_scenario("scenario.json", scenario);
    let server = stdio_server(
        "fx",
        &["--name", "fx", "--scenario", &path.display().to_string()],
    );
    let config = scratch.write(
        "daemon.toml",
        &format!(
            "[daemon]\ndatabase = \"{}\"\nsocket = \"{}\"\nrequest_timeout = \"5s\"\n{daemon_lines}\n\n{server}",
            scratch.path("catalog.db").display(),
            scratch.path("mirror.sock").display(),
        ),
    );
    Daemon::start(scratch, &config)
}

#[test]
fn a_changing_tool_keeps_its_versions_reuses_bodies_prunes_by_count_and_diffs_plainly() {
    let scratch = Scratch::new();
    let city = json!({"city": {"type": "string"}});
    let first = weather(city.clone(), json!(["city"]));
    let daemon = fixture_daemon(&scratch, &first, "history_versions_per_key = 4");
    let versions = wait_for("the first version", Duration::from_secs(30), || {
        let versions = history(&daemon);
        (versions.len() == 1).then_some(versions)
    });
    assert_eq!(versions[0]["current"], true, "{versions:?}");
    assert!(versions[0].get("lastSeenMs").is_none(), "{versions:?}");

    // B: a parameter added; C: that parameter made required and retyped.
    let second = weather(
        json!({"city": {"type": "string"}, "days": {"type": "integer"}}),
        json!(["city"]),
    );
    change_to(&daemon, &scratch, &second, 2);
    let third = weather(
        json!({"city": {"type": "string"}, "days": {"type": "string"}}),
        json!(["city", "days"]),
    );
    let versions = change_to(&daemon, &scratch, &third, 3);
    // Newest first, each closed when the next was seen.
    let numbers: Vec<i64> = versions
        .iter()
        .map(|v| v["version"].as_i64().unwrap())
        .collect();
    assert!(
        numbers.windows(2).all(|pair| pair[0] > pair[1]),
        "{numbers:?}"
    );
    assert_eq!(versions[1]["current"], false);
    assert!(
        versions[1]["lastSeenMs"].as_i64().unwrap() >= versions[1]["firstSeenMs"].as_i64().unwrap()
    );

    // The default diff: the previous version against the current one, in a client's words.
    let diff = daemon.call(
        "catalog/diff",
        json!({"kind": "tool", "server": "fx", "key": "weather"}),
    );
    assert_eq!(
        diff["toolChanges"],
        json!([
            {"change": "madeRequired", "parameter": "days"},
            {"change": "typeChanged", "parameter": "days", "from": "integer", "to": "string"}
        ]),
        "{diff}"
    );
    assert!(
        diff["changed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "/inputSchema/properties/days/type"),
        "{diff}"
    );
    // An older pair: the parameter added.
    let diff = daemon.call(
        "catalog/diff",
        json!({"kind": "tool", "server": "fx", "key": "weather", "from": numbers[2], "to": numbers[1]}),
    );
    assert_eq!(
        diff["toolChanges"],
        json!([{"change": "parameterAdded", "parameter": "days", "required": false}]),
        "{diff}"
    );
    assert_eq!(
        diff["added"][0]["path"], "/inputSchema/properties/days",
        "{diff}"
    );

    // The CLI: readable, and JSON with --json.
    let output = run_cli(&daemon.socket, &["diff", "tool", "fx/weather"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("parameter `days` made required"), "{text}");
    assert!(
        text.contains("parameter `days` type changed from \"integer\" to \"string\""),
        "{text}"
    );
    let output = run_cli(&daemon.socket, &["history", "tool", "fx/weather", "--json"]);
    let listed: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(listed["versions"].as_array().unwrap().len(), 3, "{listed}");
    let output = run_cli(&daemon.socket, &["history", "tool", "fx/weather"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("current") && text.contains("VERSION"),
        "{text}"
    );

    // A flip-flop back to the first body: a new version pointing at the body already kept.
    let bodies = |daemon: &Daemon| -> (i64, i64) {
        open_database(&daemon.database)
            .query_row(
                "SELECT count(*), (SELECT count(*) FROM history_bodies WHERE digest IN
                     (SELECT digest FROM history_versions WHERE kind = 'tool' AND key = 'weather'))
                 FROM history_bodies",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .expect("count")
    };
    let (all_before, _) = bodies(&daemon);
    let versions = change_to(&daemon, &scratch, &first, 4);
    assert_eq!(versions[0]["digest"], versions[3]["digest"], "{versions:?}");
    assert_ne!(versions[0]["version"], versions[3]["version"]);
    assert_eq!(
        bodies(&daemon),
        (all_before, 3),
        "the flip-flop stored no new body"
    );

    // A fifth version over a bound of four: the oldest goes, its body stays (the newest uses it).
    let fifth = weather(json!({"place": {"type": "string"}}), json!(["place"]));
    let versions = change_to(&daemon, &scratch, &fifth, 4);
    let kept: Vec<i64> = versions
        .iter()
        .map(|v| v["version"].as_i64().unwrap())
        .collect();
    assert!(
        !kept.contains(&numbers[2]),
        "the oldest version was pruned: {kept:?}"
    );
    assert_eq!(bodies(&daemon), (all_before + 1, 4));
    let diff = daemon.call(
        "catalog/diff",
        json!({"kind": "tool", "server": "fx", "key": "weather"}),
    );
    assert_eq!(
        diff["toolChanges"],
        json!([
            {"change": "parameterAdded", "parameter": "place", "required": true},
            {"change": "parameterRemoved", "parameter": "city"}
        ]),
        "{diff}"
    );
}

#[test]
fn resources_keep_a_history_only_where_history_is_on() {
    let scratch = Scratch::new();
    let resource = |description: &str| json!({"resources": [{"uri": "fixture://r/a", "name": "a", "description": description}]});
    let kept_path = scratch.write_scenario("kept.json", &resource("one"));
    let plain_path = scratch.write_scenario("plain.json", &resource("one"));
    let kept = stdio_server(
        "kept",
        &[
            "--name",
            "kept",
            "--scenario",
            &kept_path.display().to_string(),
        ],
    );
    let plain = stdio_server(
        "plain",
        &[
            "--name",
            "plain",
            "--scenario",
            &plain_path.display().to_string(),
        ],
    );
    let config = scratch.config(&format!("{}\nhistory = true\n\n{plain}", kept.trim_end()));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("kept", 1);
    daemon.wait_for_walks("plain", 1);
    scratch.write_scenario("kept.json", &resource("two"));
    scratch.write_scenario("plain.json", &resource("two"));
    let ask = |server: &str| {
        daemon.connect().request(
            "catalog/history",
            json!({"kind": "resource", "server": server, "key": "fixture://r/a", "includeDefinitions": true}),
        )
    };
    // The first load is not recorded; the first change records the body it replaces too.
    let versions = wait_for("the resource's versions", Duration::from_secs(30), || {
        let answer = ask("kept");
        let versions = answer["result"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (versions.len() == 2).then_some(versions)
    });
    assert_eq!(
        versions[0]["definition"]["description"], "two",
        "{versions:?}"
    );
    assert_eq!(
        versions[1]["definition"]["description"], "one",
        "{versions:?}"
    );
    wait_for("the plain server's change", Duration::from_secs(30), || {
        let listed = daemon
            .call("catalog/list", json!({"server": "plain"}))
            .to_string();
        listed.contains("\"two\"").then_some(())
    });
    assert!(
        ask("plain").get("error").is_some(),
        "no history where it is off"
    );
}

/// Starts a daemon over the `weather` fixture with these extra `[daemon]` lines.
fn daemon_with_bounds(scratch: &Scratch, bounds: &str) -> Daemon {
    let city = weather(json!({"city": {"type": "string"}}), json!(["city"]));
    let daemon = fixture_daemon(scratch, &city, bounds);
    wait_for("the first version", Duration::from_secs(30), || {
        (history(&daemon).len() == 1).then_some(())
    });
    daemon
}

#[test]
fn pruning_by_age_drops_versions_replaced_long_ago_and_keeps_the_current_one() {
    let scratch = Scratch::new();
    let daemon = daemon_with_bounds(&scratch, "history_max_age = \"1s\"");
    let second = weather(json!({"town": {"type": "string"}}), json!(["town"]));
    change_to(&daemon, &scratch, &second, 2);
    // The first version was replaced more than the bound ago when the third arrives.
    std::thread::sleep(Duration::from_millis(1500));
    let third = weather(json!({"village": {"type": "string"}}), json!(["village"]));
    let versions = change_to(&daemon, &scratch, &third, 2);
    assert_eq!(versions[0]["current"], true, "{versions:?}");
    assert_eq!(
        versions[1]["definition"], second["tools"][0],
        "{versions:?}"
    );
}

#[test]
fn pruning_by_total_bytes_drops_replaced_versions_and_never_the_current_one() {
    let scratch = Scratch::new();
    let daemon = daemon_with_bounds(&scratch, "history_max_bytes = \"1\"");
    let second = weather(json!({"town": {"type": "string"}}), json!(["town"]));
    let versions = change_to(&daemon, &scratch, &second, 1);
    assert_eq!(versions[0]["current"], true, "{versions:?}");
    let third = weather(json!({"village": {"type": "string"}}), json!(["village"]));
    let versions = change_to(&daemon, &scratch, &third, 1);
    assert_eq!(versions[0]["current"], true, "{versions:?}");
}

#[test]
fn pruning_never_removes_the_accepted_version() {
    let scratch = Scratch::new();
    let daemon = daemon_with_bounds(&scratch, "history_max_bytes = \"1\"");
    let first = weather(json!({"city": {"type": "string"}}), json!(["city"]));
    daemon.call("catalog/accept", json!({"server": "fx"}));
    let second = weather(json!({"town": {"type": "string"}}), json!(["town"]));
    change_to(&daemon, &scratch, &second, 2);
    let third = weather(json!({"village": {"type": "string"}}), json!(["village"]));
    // The second version goes over the bound; the accepted first one stays.
    let versions = change_to(&daemon, &scratch, &third, 2);
    assert_eq!(versions[0]["current"], true, "{versions:?}");
    assert_eq!(versions[1]["definition"], first["tools"][0], "{versions:?}");
}

#[test]
fn sigkill_while_definitions_change_leaves_the_current_version_equal_to_the_stored_entry() {
    let scratch = Scratch::new();
    let mut daemon = daemon_with_bounds(&scratch, "");
    // Changes written faster than walks finish, then SIGKILL while one may be swapping. On a
    // loaded host the first changes may all wait for one walk: the kill comes once one of
    // them is recorded (else the test would prove nothing), two changes later.
    let change = |round: usize| {
        let name = format!("p{round}");
        scratch.write_scenario(
            "scenario.json",
            &weather(json!({name.clone(): {"type": "string"}}), json!([name])),
        );
        std::thread::sleep(Duration::from_millis(150));
    };
    for round in 0..6 {
        change(round);
    }
    wait_for("a change recorded", Duration::from_secs(30), || {
        (history(&daemon).len() >= 2).then_some(())
    });
    for round in 6..8 {
        change(round);
    }
    daemon.child.kill().expect("SIGKILL");
    let _ = daemon.child.wait();
    let recorded: i64 = open_database(&daemon.database)
        .query_row(
            "SELECT count(*) FROM history_versions WHERE kind = 'tool' AND key = 'weather'",
            [],
            |row| row.get(0),
        )
        .expect("count the versions");
    assert!(
        recorded >= 2,
        "some changes were swapped in before the kill: {recorded}"
    );
    let (current_versions, matching): (i64, i64) = open_database(&daemon.database)
        .query_row(
            "SELECT count(*),
                    sum(b.body = (SELECT e.raw FROM entries e
                                  WHERE e.server_id = v.server_id AND e.kind = 'tool' AND e.name = v.key))
             FROM history_versions v JOIN history_bodies b ON b.id = v.body_id
             WHERE v.kind = 'tool' AND v.key = 'weather' AND v.last_seen IS NULL",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("query the history");
    assert_eq!(
        (current_versions, matching),
        (1, 1),
        "one current version, equal to the stored entry"
    );
}

#[test]
fn pruning_by_bytes_keeps_up_with_a_walk_that_changes_more_than_a_batch() {
    let scratch = Scratch::new();
    // 600 tools, each a new version at every walk: more than one prune batch (500) per swap.
    let daemon = fixture_daemon(
        &scratch,
        &json!({"generate_tools": 600, "revise_tools_per_list": true}),
        "history_max_bytes = \"1\"",
    );
    let versions = |daemon: &Daemon| -> (i64, i64) {
        open_database(&daemon.database)
            .query_row(
                "SELECT count(*), coalesce(sum(last_seen IS NULL), 0) FROM history_versions
                 WHERE kind = 'tool'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .expect("count the versions")
    };
    wait_for("the first walk's versions", Duration::from_secs(60), || {
        (versions(&daemon) == (600, 600)).then_some(())
    });
    for walk in 0..2 {
        let answer = daemon.call("catalog/refresh", json!({"server": "fx", "wait": true}));
        assert_eq!(answer["servers"]["fx"]["ok"], true, "{answer}");
        // Over the bytes bound every replaced version goes in the swap that replaced it,
        // the 600 current ones stay.
        assert_eq!(versions(&daemon), (600, 600), "after walk {walk}");
    }
}
