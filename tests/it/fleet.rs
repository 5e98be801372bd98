//! A downstream mirror of an mcp-mirror follows the upstream's change feed: after one full
//! walk, changes arrive as deltas (no walk), the result equals a fresh full walk, and anything
//! the feed cannot account for (a new upstream database, a pruned feed) costs exactly one
//! walk. A kill -9 of either side in the middle of a delta costs none: the delta and the
//! cursor commit together, so the follower resumes from its old cursor.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http_face::{
    catalog_without_via, count_from, downstream, downstream_tuned, fast_daemon_settings, Upstream,
    TOKEN,
};
use crate::support::{
    free_port, open_database, stdio_server, wait_for, wait_for_every, Daemon, HttpFixture, Scratch,
};

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

/// An upstream mirror of one stdio server `demo` serving `scenario` (rewritten in `origin` as
/// demo.json to change it), once it has walked it.
fn upstream_of(origin: &Scratch, scenario: &Value) -> Upstream {
    let path = origin.write_scenario("demo.json", scenario);
    let path = path.display().to_string();
    let upstream = Upstream::start(
        &stdio_server("demo", &["--name", "demo", "--scenario", &path]),
        "",
    );
    upstream.daemon.wait_for_walks("demo", 1);
    upstream
}

/// A fresh mirror's full walk of `upstream` holds exactly what `mirror` holds, byte for byte.
fn assert_same_as_a_fresh_walk(upstream: &Upstream, mirror: &Daemon) {
    let fresh_scratch = Scratch::new();
    let fresh = downstream(&fresh_scratch, upstream, "modern");
    wait_for("a fresh walk", Duration::from_secs(120), || {
        (fresh.server_status("upstream")["walksOk"].as_u64() >= Some(1)).then_some(())
    });
    assert_eq!(fresh.list_all(), mirror.list_all());
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
    let upstream = upstream_of(&origin, &scenario(0));

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

    assert_same_as_a_fresh_walk(&upstream, &mirror);
}

#[test]
fn a_new_upstream_database_costs_exactly_one_walk() {
    let origin = Scratch::new();
    let mut upstream = upstream_of(&origin, &scenario(1));

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
    // `walksOk` moves once the walk's every list is in, just after its last swap.
    mirror.wait_for_walks("upstream", 2);
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
    let upstream = upstream_of(&origin, &scenario(1));
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

/// An origin of 40 generated resources and 20 named ones: each step changes exactly one
/// entry (a named resource's description, or every tenth step one more resource in or out).
pub(crate) struct Churn {
    descriptions: Vec<String>,
    toggled: bool,
}

impl Churn {
    pub(crate) fn new() -> Churn {
        Churn {
            descriptions: (0..20).map(|index| format!("named {index}")).collect(),
            toggled: false,
        }
    }

    pub(crate) fn step(&mut self, step: usize) {
        match step % 10 {
            0 => self.toggled = !self.toggled,
            _ => self.descriptions[step % 20] = format!("changed in step {step}"),
        }
    }

    pub(crate) fn scenario(&self) -> Value {
        let mut resources: Vec<Value> = self
            .descriptions
            .iter()
            .enumerate()
            .map(|(index, description)| {
                json!({
                    "uri": format!("fixture://demo/named/{index}"),
                    "name": format!("named-{index}"),
                    "description": description,
                })
            })
            .collect();
        if self.toggled {
            resources.push(json!({"uri": "fixture://demo/toggled", "name": "toggled"}));
        }
        json!({"generate": 40, "page_size": 100, "resources": resources})
    }
}

/// The upstream's change feed position (`catalog/changes`' `latestSeq`).
pub(crate) fn latest_seq(client: &mut crate::support::SocketClient) -> i64 {
    let answer = client.request("catalog/changes", json!({"since": 0, "limit": 1}));
    answer["result"]["latestSeq"].as_i64().expect("latestSeq")
}

#[test]
fn a_downstream_follows_a_thousand_single_changes_without_a_walk() {
    let origin = Scratch::new();
    let mut churn = Churn::new();
    let scenario_path = origin.write_scenario("demo.json", &churn.scenario());
    let scenario_text = scenario_path.display().to_string();
    // The fixture looks at its scenario every 2 ms, and the upstream walks it as soon as it
    // says its list changed: each step is one swap of one entry at the upstream.
    let servers = stdio_server(
        "demo",
        &[
            "--name",
            "demo",
            "--scenario",
            &scenario_text,
            "--scenario-poll-ms",
            "2",
        ],
    );
    let quick = "debounce = \"1ms\"\nmin_walk_interval = \"1ms\"\n";
    let upstream = Upstream::start_tuned(&servers, "", quick);
    upstream.daemon.wait_for_walks("demo", 1);

    let scratch = Scratch::new();
    // The downstream follows at most every 100 ms: deltas of one change and of several.
    let mirror = downstream_tuned(
        &scratch,
        &upstream,
        "modern",
        "debounce = \"1ms\"\nmin_walk_interval = \"100ms\"\n",
    );
    mirror.wait_for_walks("upstream", 1);
    wait_for("the listen stream", Duration::from_secs(20), || {
        (mirror.server_status("upstream")["live"]["push"] == "subscriptions/listen").then_some(())
    });
    let walks = status_number(&mirror, "walksOk");
    let deltas = status_number(&mirror, "deltasApplied");

    const STEPS: usize = 1_000;
    let mut feed = upstream.daemon.connect();
    let first_seq = latest_seq(&mut feed);
    let mut seq = first_seq;
    let started = Instant::now();
    for step in 1..=STEPS {
        churn.step(step);
        origin.write_scenario("demo.json", &churn.scenario());
        seq = wait_for_every(
            &format!("step {step} at the upstream"),
            Duration::from_secs(20),
            Duration::from_millis(2),
            || Some(latest_seq(&mut feed)).filter(|latest| *latest > seq),
        );
    }
    // One feed row per step: every step was a swap of its own, of one entry.
    assert_eq!(seq - first_seq, STEPS as i64, "one change per step");
    wait_for(
        "the downstream to hold the upstream's catalog",
        Duration::from_secs(60),
        || same_catalog(&mirror, &upstream.daemon).then_some(()),
    );
    let status = mirror.server_status("upstream");
    assert_eq!(
        status["walksOk"].as_u64(),
        Some(walks),
        "a thousand changes arrived as deltas, not walks: {status}"
    );
    let followed = status["deltasApplied"].as_u64().unwrap_or(0) - deltas;
    assert!(followed >= 1, "{status}");
    eprintln!(
        "{STEPS} changes in {:.1} s, followed in {followed} deltas",
        started.elapsed().as_secs_f64()
    );

    assert_same_as_a_fresh_walk(&upstream, &mirror);
}

#[test]
fn a_pruned_feed_costs_exactly_one_walk_then_following_resumes() {
    let origin = Scratch::new();
    let mut upstream = upstream_of(&origin, &scenario(1));

    let scratch = Scratch::new();
    let mut mirror = downstream(&scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);
    origin.write_scenario("demo.json", &scenario(2));
    wait_for("a followed change", Duration::from_secs(30), || {
        (count_from(&mirror, "demo") == 302).then_some(())
    });
    assert_eq!(status_number(&mirror, "walksOk"), 1);

    // While the downstream is away, two changes at the upstream; then the upstream's feed
    // loses every row but its newest, as pruning by age or size does.
    mirror.stop();
    for (round, expected) in [(3, 303), (4, 304)] {
        origin.write_scenario("demo.json", &scenario(round));
        wait_for(
            "the change at the upstream",
            Duration::from_secs(30),
            || (count_from(&upstream.daemon, "demo") == expected).then_some(()),
        );
    }
    upstream.daemon.stop();
    let pruned = rusqlite::Connection::open(&upstream.daemon.database)
        .expect("open the upstream's database")
        .execute(
            "DELETE FROM changes WHERE seq < (SELECT max(seq) FROM changes)",
            [],
        )
        .expect("prune the feed");
    assert!(pruned > 0);
    upstream.daemon = Daemon::start(&upstream.scratch, &upstream.scratch.path("daemon.toml"));
    upstream.daemon.wait_for_walks("demo", 1);

    let mirror = Daemon::start(&scratch, &scratch.path("daemon.toml"));
    wait_for(
        "the downstream to hold the upstream's catalog",
        Duration::from_secs(60),
        || same_catalog(&mirror, &upstream.daemon).then_some(()),
    );
    mirror.wait_for_walks("upstream", 2);
    assert_eq!(
        status_number(&mirror, "walksOk"),
        2,
        "exactly one walk for the gap: {}",
        mirror.server_status("upstream")
    );
    assert!(mirror
        .log_text()
        .contains("the feed was pruned past the cursor"));

    // From then on it follows again.
    let deltas = status_number(&mirror, "deltasApplied");
    origin.write_scenario("demo.json", &scenario(5));
    wait_for(
        "the next change at the downstream",
        Duration::from_secs(30),
        || (count_from(&mirror, "demo") == 300).then_some(()),
    );
    assert_eq!(status_number(&mirror, "walksOk"), 2);
    assert!(status_number(&mirror, "deltasApplied") > deltas);
    assert_same_as_a_fresh_walk(&upstream, &mirror);
}

/// How many `catalog/entries` requests the upstream's face has taken (one log line each).
fn entries_requests(upstream: &Upstream) -> usize {
    upstream
        .daemon
        .log_text()
        .matches("method=catalog/entries")
        .count()
}

/// The downstream's own record of its follow, read from its database file: deltas applied
/// and the cursor's seq.
fn follow_record(mirror: &Daemon) -> (i64, Option<i64>) {
    open_database(&mirror.database)
        .query_row(
            "SELECT deltas_applied, follow_seq FROM servers WHERE name = 'upstream'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("the downstream's follow record")
}

/// One change of 10,000 entries at the origin, a delta of 20 `catalog/entries` requests at
/// the downstream, and a kill -9 of the downstream (or the upstream) once the upstream has
/// taken the second of them: the downstream keeps its last snapshot and cursor, then
/// resumes following from that cursor (no walk) and ends as a fresh full walk.
fn killed_mid_delta(kill_the_upstream: bool) {
    let origin = Scratch::new();
    let big = |prefix: &str| json!({"generate": 10_000, "page_size": 1000, "prefix": prefix});
    let mut upstream = upstream_of(&origin, &big("first"));
    let scratch = Scratch::new();
    let mut mirror = downstream(&scratch, &upstream, "modern");
    let status = wait_for(
        "the downstream's first walk",
        Duration::from_secs(120),
        || {
            let status = mirror.server_status("upstream");
            (status["walksOk"].as_u64() >= Some(1)).then_some(status)
        },
    );
    assert_eq!(status["resources"], 10_000, "{status}");
    // The walk records its cursor just after its swap.
    let before = wait_for("the first cursor", Duration::from_secs(20), || {
        Some(follow_record(&mirror)).filter(|(_, seq)| seq.is_some())
    });
    let requests = entries_requests(&upstream);

    // Every generated resource is described anew: 10,000 changed keys, 500 per request.
    origin.write_scenario("demo.json", &big("second"));
    wait_for_every(
        "the downstream's second catalog/entries request",
        Duration::from_secs(120),
        Duration::from_millis(1),
        || (entries_requests(&upstream) >= requests + 2).then_some(()),
    );
    let killed = match kill_the_upstream {
        true => &mut upstream.daemon,
        false => &mut mirror,
    };
    killed.child.kill().expect("SIGKILL");
    killed.child.wait().expect("reap");

    // Mid-delta: nothing of it is in the downstream's database, whose cursor has not moved.
    assert_eq!(
        follow_record(&mirror),
        before,
        "the kill came before the commit"
    );
    let described_anew: i64 = open_database(&mirror.database)
        .query_row(
            "SELECT count(*) FROM resources WHERE description LIKE '%second'",
            [],
            |row| row.get(0),
        )
        .expect("count");
    assert_eq!(described_anew, 0);

    match kill_the_upstream {
        true => {
            upstream.daemon =
                Daemon::start(&upstream.scratch, &upstream.scratch.path("daemon.toml"));
        }
        false => mirror = Daemon::start(&scratch, &scratch.path("daemon.toml")),
    }
    wait_for(
        "the downstream to hold the upstream's catalog",
        Duration::from_secs(120),
        || same_catalog(&mirror, &upstream.daemon).then_some(()),
    );
    let status = mirror.server_status("upstream");
    assert_eq!(
        status["walksOk"].as_u64(),
        Some(1),
        "the follow resumed from its cursor, no walk: {status}"
    );
    assert!(follow_record(&mirror).0 > before.0, "{status}");
    assert_same_as_a_fresh_walk(&upstream, &mirror);
}

#[test]
fn a_downstream_killed_mid_delta_resumes_from_its_cursor() {
    killed_mid_delta(false);
}

#[test]
fn an_upstream_killed_mid_delta_costs_the_downstream_no_walk() {
    killed_mid_delta(true);
}

/// Entries as their upstream lists them: without the path a downstream adds.
fn without_via(mut entries: Value) -> Value {
    for entry in entries.as_array_mut().into_iter().flatten() {
        if let Some(meta) = entry["_meta"].as_object_mut() {
            meta.remove("io.mcp-mirror/via");
            meta.remove("io.mcp-mirror/mirrors");
        }
    }
    entries
}

/// The merged URI templates a daemon lists.
fn templates(daemon: &Daemon) -> Value {
    daemon.call("resources/templates/list", json!({}))["resourceTemplates"].clone()
}

fn template(index: usize, description: &str) -> Value {
    json!({
        "uriTemplate": format!("fixture://demo/t{index}/{{id}}"),
        "name": format!("template-{index}"),
        "description": description,
    })
}

#[test]
fn templates_are_followed_through_the_feed_like_resources() {
    let origin = Scratch::new();
    let with_templates =
        |templates: Vec<Value>| json!({"generate": 10, "page_size": 100, "templates": templates});
    let upstream = upstream_of(
        &origin,
        &with_templates(vec![
            template(0, "zero"),
            template(1, "one"),
            template(2, "two"),
        ]),
    );
    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);
    assert_eq!(templates(&mirror).as_array().map(Vec::len), Some(3));
    let deltas = status_number(&mirror, "deltasApplied");

    // One template changed, one removed, one added, and no resource.
    origin.write_scenario(
        "demo.json",
        &with_templates(vec![
            template(0, "zero"),
            template(1, "one, again"),
            template(3, "three"),
        ]),
    );
    wait_for(
        "the templates at the upstream",
        Duration::from_secs(30),
        || {
            templates(&upstream.daemon)
                .to_string()
                .contains("three")
                .then_some(())
        },
    );
    wait_for(
        "the templates at the downstream",
        Duration::from_secs(30),
        || (without_via(templates(&mirror)) == templates(&upstream.daemon)).then_some(()),
    );
    let status = mirror.server_status("upstream");
    assert_eq!(status["walksOk"], 1, "templates came as a delta: {status}");
    assert!(status_number(&mirror, "deltasApplied") > deltas, "{status}");
    assert_eq!(status["templates"], 3, "{status}");
    let fresh_scratch = Scratch::new();
    let fresh = downstream(&fresh_scratch, &upstream, "modern");
    fresh.wait_for_walks("upstream", 1);
    assert_eq!(templates(&fresh), templates(&mirror));
    assert_eq!(fresh.list_all(), mirror.list_all());
}

/// The `cacheScope` a downstream stores with its snapshot of the upstream.
fn stored_scope(mirror: &Daemon) -> Option<String> {
    open_database(&mirror.database)
        .query_row(
            "SELECT scope FROM scopes WHERE server = 'upstream' AND kind = 'resource'",
            [],
            |row| row.get(0),
        )
        .ok()
}

#[test]
fn a_followed_delta_takes_its_cache_scope_as_a_walk_does() {
    let origin = Scratch::new();
    let upstream = upstream_of(&origin, &scenario(1));
    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);
    wait_for("the walk's scope", Duration::from_secs(20), || {
        (stored_scope(&mirror).as_deref() == Some("public")).then_some(())
    });

    // The upstream takes on a private server it shares with tokens: what the downstream's
    // token sees is private from then on, and the delta that brings it says so.
    let private = HttpFixture::start(&[
        "--era",
        "modern",
        "--cache-scope",
        "private",
        "--name",
        "shared",
        "--generate",
        "5",
    ]);
    let config = upstream.scratch.path("daemon.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text.replacen(
        "[http]",
        &format!(
            "[servers.shared]\nurl = \"{}\"\nshare = true\n\n[http]",
            private.url
        ),
        1,
    );
    std::fs::write(&config, text).expect("write config");
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(upstream.daemon.child.id() as libc::pid_t, libc::SIGHUP);
    }
    wait_for(
        "the shared server at the downstream",
        Duration::from_secs(30),
        || (count_from(&mirror, "shared") == 5).then_some(()),
    );
    let status = mirror.server_status("upstream");
    assert_eq!(status["walksOk"], 1, "the change came as a delta: {status}");
    assert_eq!(status["live"]["cacheScope"], "private", "{status}");
    assert_eq!(stored_scope(&mirror).as_deref(), Some("private"));
}

/// Removes a stopped daemon's database and everything derived from it beside it (its log, its
/// search index), so its next start makes a new database: a new instance.
pub(crate) fn remove_database(daemon: &Daemon) {
    let directory = daemon.database.parent().expect("the database's directory");
    let name = daemon
        .database
        .file_name()
        .expect("the database's name")
        .to_string_lossy()
        .to_string();
    let stem = name.trim_end_matches(".db").to_string();
    for entry in std::fs::read_dir(directory).expect("the scratch directory") {
        let path = entry.expect("an entry").path();
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        if file.starts_with(&stem) {
            match path.is_dir() {
                true => std::fs::remove_dir_all(&path).expect("remove a directory"),
                false => std::fs::remove_file(&path).expect("remove a file"),
            }
        }
    }
}

#[test]
fn a_new_upstream_still_loading_never_empties_its_downstream() {
    // 3,000 resources in 60 pages of 100 ms: a first load of about 6 s.
    let origin = Scratch::new();
    let slow = json!({"generate": 3000, "page_size": 50, "faults": {"page_delay_ms": 100}});
    let mut upstream = upstream_of(&origin, &slow);
    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);
    assert_eq!(status_number(&mirror, "resources"), 3000);

    // The upstream starts over on an empty database (a new instance) and loads its origin
    // again, slowly: until that load commits, its catalog is empty.
    upstream.daemon.stop();
    remove_database(&upstream.daemon);
    upstream.daemon = Daemon::start(&upstream.scratch, &upstream.scratch.path("daemon.toml"));
    let (mut fewest, mut held) = (u64::MAX, false);
    wait_for_every(
        "the downstream to hold the new upstream's catalog",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let status = mirror.server_status("upstream");
            fewest = fewest.min(status["resources"].as_u64().unwrap_or(0));
            held |= status["lastError"]
                .as_str()
                .is_some_and(|error| error.contains("has not loaded demo"));
            let loaded = upstream.daemon.server_status("demo")["walksOk"].as_u64() >= Some(1);
            let whole = status["resources"] == 3000 && status["walksOk"].as_u64() >= Some(2);
            (loaded && whole).then_some(())
        },
    );
    let follow_log: Vec<String> = mirror
        .log_text()
        .lines()
        .filter(|line| line.contains("upstream mirror") || line.contains("walk committed"))
        .map(String::from)
        .collect();
    assert_eq!(
        fewest, 3000,
        "the downstream never dropped below its snapshot: {follow_log:#?}"
    );
    assert!(held, "the downstream waited for the upstream's first load");
    wait_for(
        "the downstream to equal the upstream",
        Duration::from_secs(30),
        || same_catalog(&mirror, &upstream.daemon).then_some(()),
    );
    // Still following, now the new database's feed.
    let walks = status_number(&mirror, "walksOk");
    origin.write_scenario(
        "demo.json",
        &json!({"generate": 3000, "page_size": 50, "resources": [{"uri": "fixture://demo/one-more", "name": "one-more"}]}),
    );
    wait_for("the next change", Duration::from_secs(30), || {
        (status_number(&mirror, "resources") == 3001).then_some(())
    });
    assert_eq!(status_number(&mirror, "walksOk"), walks);
}

#[test]
fn an_upstream_whose_view_holds_nothing_is_followed_without_walks() {
    // The downstream's upstream holds no resources at all: its snapshot is empty, and still
    // gets a cursor, so a change that leaves it empty is a delta (of nothing), not a walk,
    // and so is the change that fills it.
    let origin = Scratch::new();
    let upstream = upstream_of(&origin, &json!({"generate": 0}));
    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);
    let cursor = wait_for(
        "the empty snapshot's cursor",
        Duration::from_secs(20),
        || follow_record(&mirror).1,
    );
    assert!(cursor >= 0);
    let deltas = status_number(&mirror, "deltasApplied");
    for round in 1..=3 {
        mirror.call(
            "catalog/refresh",
            json!({"server": "upstream", "wait": true}),
        );
        assert_eq!(status_number(&mirror, "walksOk"), 1, "round {round}");
    }
    assert!(status_number(&mirror, "deltasApplied") > deltas);

    // Then the upstream fills: its entries are a delta onto the empty snapshot, never a first
    // load the delta cannot be applied as (a mirror loop's CI run found one refused for ever).
    origin.write_scenario("demo.json", &json!({"generate": 3}));
    wait_for(
        "the upstream's three new entries, followed",
        Duration::from_secs(30),
        || (status_number(&mirror, "resources") == 3).then_some(()),
    );
    let status = mirror.server_status("upstream");
    assert_eq!(status["walksOk"], 1, "{status}");
    assert!(status["lastError"].is_null(), "{status}");
    assert_same_as_a_fresh_walk(&upstream, &mirror);
}

#[test]
fn a_cold_fleet_gets_its_first_change_paced_by_the_follow_not_the_first_load() {
    // An upstream of 10,000 resources and three downstreams, each of whose first load takes a
    // few seconds; a change at the origin as soon as all of them hold the catalog.
    let origin = Scratch::new();
    let catalog =
        |extra: &[Value]| json!({"generate": 10_000, "page_size": 1000, "resources": extra});
    let upstream = upstream_of(&origin, &catalog(&[]));
    let scratches: Vec<Scratch> = (0..3).map(|_| Scratch::new()).collect();
    let mirrors: Vec<Daemon> = scratches
        .iter()
        .map(|scratch| downstream(scratch, &upstream, "modern"))
        .collect();
    let mut throttled = Vec::new();
    for mirror in &mirrors {
        let status = wait_for(
            "a downstream's first load",
            Duration::from_secs(120),
            || {
                let status = mirror.server_status("upstream");
                let cursor = follow_record(mirror).1;
                (status["resources"] == 10_000 && cursor.is_some()).then_some(status)
            },
        );
        eprintln!(
            "a downstream's first load: {} ms",
            status["lastWalk"]["durationMs"]
        );
        throttled.push(status_number(mirror, "walksThrottled"));
    }

    let extra = json!({"uri": "fixture://demo/cold/one", "name": "one"});
    origin.write_scenario("demo.json", &catalog(&[extra]));
    let at_upstream = wait_for_every(
        "the change at the upstream",
        Duration::from_secs(60),
        Duration::from_millis(5),
        || (status_of(&upstream.daemon, "demo", "resources") == 10_001).then(Instant::now),
    );
    for (index, mirror) in mirrors.iter().enumerate() {
        let arrived = wait_for_every(
            "the change at a downstream",
            Duration::from_secs(60),
            Duration::from_millis(5),
            || (status_number(mirror, "resources") == 10_001).then(Instant::now),
        );
        let lag = arrived.saturating_duration_since(at_upstream);
        let status = mirror.server_status("upstream");
        eprintln!(
            "downstream {index}: {} ms past the upstream",
            lag.as_millis()
        );
        assert_eq!(
            status["walksThrottled"].as_u64().unwrap_or(0),
            throttled[index],
            "the follow was held by the walk pace: {status}"
        );
        assert!(
            lag < Duration::from_secs(1),
            "{} ms: {status}",
            lag.as_millis()
        );
    }
}

fn status_of(daemon: &Daemon, server: &str, field: &str) -> u64 {
    daemon.server_status(server)[field].as_u64().unwrap_or(0)
}

#[test]
fn an_upstream_whose_token_view_holds_no_resources_is_followed_without_walks() {
    // The upstream holds resources, but the downstream's token sees only a server that has
    // none: the downstream's snapshot is empty, gets a cursor all the same, and a change the
    // token cannot see is a delta of nothing, never a walk.
    let origin = Scratch::new();
    let path = origin.write_scenario("demo.json", &scenario(1));
    let path = path.display().to_string();
    let servers = format!(
        "{}{}",
        stdio_server("demo", &["--name", "demo", "--scenario", &path]),
        stdio_server("empty", &["--name", "empty", "--generate", "0"])
    );
    let scratch = Scratch::new();
    let token = scratch.write_private("fleet.token", &format!("{TOKEN}\n"));
    let address = format!("127.0.0.1:{}", free_port());
    let config = scratch.config(&format!(
        "{servers}[http]\nlisten = \"{address}\"\ntokens = {{ fleet = {{ file = {:?}, servers = [\"empty\"] }} }}\n",
        token.display().to_string()
    ));
    fast_daemon_settings(&config);
    let upstream = Upstream {
        daemon: Daemon::start(&scratch, &config),
        address,
        scratch,
    };
    upstream.daemon.wait_for_walks("demo", 1);
    upstream.daemon.wait_for_walks("empty", 1);

    let mirror_scratch = Scratch::new();
    let mirror = downstream(&mirror_scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);
    wait_for("the empty view's cursor", Duration::from_secs(20), || {
        follow_record(&mirror).1
    });
    assert!(mirror.list_all().is_empty());
    let walks = status_number(&mirror, "walksOk");
    let deltas = status_number(&mirror, "deltasApplied");
    for (round, expected) in [(2, 302), (3, 303)] {
        origin.write_scenario("demo.json", &scenario(round));
        wait_for(
            "the change at the upstream",
            Duration::from_secs(30),
            || (count_from(&upstream.daemon, "demo") == expected).then_some(()),
        );
        mirror.call(
            "catalog/refresh",
            json!({"server": "upstream", "wait": true}),
        );
        assert_eq!(status_number(&mirror, "walksOk"), walks, "round {round}");
    }
    assert!(status_number(&mirror, "deltasApplied") > deltas);
    assert!(mirror.list_all().is_empty());
}
