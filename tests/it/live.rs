//! Live sync: changes reach the socket on every transport and in both eras; storms,
//! mid-walk changes and broken sessions never leave the mirror wrong or stuck.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{generated_uris, stdio_server, wait_for, Daemon, HttpFixture, Scratch};

/// Reads the fixture's counters.
fn stats(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

fn counter(path: &Path, name: &str) -> u64 {
    stats(path)[name].as_u64().unwrap_or(0)
}

/// Waits until the mirror lists exactly the fixture's generated catalog of `count`.
fn wait_for_catalog(daemon: &Daemon, name: &str, count: usize) {
    let expected = generated_uris(name, count);
    wait_for(
        &format!("the mirror to hold {count} resources"),
        Duration::from_secs(30),
        || (daemon.uris() == expected).then_some(()),
    );
}

struct Live {
    scratch: Scratch,
    scenario: PathBuf,
    stats: PathBuf,
}

impl Live {
    fn new(initial: &Value) -> Live {
        let scratch = Scratch::new();
        let scenario = scratch.write_scenario("scenario.json", initial);
        let stats = scratch.path("stats.json");
        Live {
            scratch,
            scenario,
            stats,
        }
    }

    fn fixture_args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--name",
            "live",
            "--scenario",
            self.scenario.to_str().expect("utf-8"),
            "--stats",
            self.stats.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        args
    }

    fn change(&self, scenario: &Value) {
        self.scratch.write_scenario("scenario.json", scenario);
    }

    fn daemon(&self, servers: &str) -> Daemon {
        let daemon_settings = "poll_floor = \"200ms\"\ndebounce = \"50ms\"\n";
        let config = self.scratch.config(servers);
        let text = std::fs::read_to_string(&config).expect("config");
        let text = text.replacen("[daemon]\n", &format!("[daemon]\n{daemon_settings}"), 1);
        std::fs::write(&config, text).expect("write config");
        Daemon::start(&self.scratch, &config)
    }
}

fn http_server(url: &str, extra: &str) -> String {
    format!("[servers.live]\nurl = \"{url}\"\n{extra}\n")
}

/// A change on the server reaches the socket; the push channel is the one we expect.
fn assert_change_arrives(live: &Live, daemon: &Daemon, push: &str) {
    daemon.wait_for_walks("live", 1);
    wait_for_catalog(daemon, "live", 30);
    wait_for(
        &format!("the push channel {push}"),
        Duration::from_secs(20),
        || {
            let status = daemon.server_status("live");
            let shown = status["live"]["push"].as_str().unwrap_or("").to_string();
            shown.starts_with(push).then_some(())
        },
    );
    live.change(&json!({"generate": 37, "page_size": 10}));
    wait_for_catalog(daemon, "live", 37);
}

#[test]
fn changes_arrive_over_stdio_in_both_eras() {
    for (era, push, era_name) in [
        ("legacy", "stdio notifications", "legacy"),
        ("modern", "subscriptions/listen", "modern"),
    ] {
        let live = Live::new(&json!({"generate": 30, "page_size": 10}));
        let daemon = live.daemon(&stdio_server("live", &live.fixture_args(&["--era", era])));
        assert_change_arrives(&live, &daemon, push);
        assert_eq!(daemon.server_status("live")["live"]["era"], era_name);
    }
}

#[test]
fn changes_arrive_over_streamable_http_in_both_eras() {
    for (era, push) in [("legacy", "GET stream"), ("modern", "subscriptions/listen")] {
        let live = Live::new(&json!({"generate": 30, "page_size": 10}));
        let fixture = HttpFixture::start(&live.fixture_args(&["--era", era]));
        let daemon = live.daemon(&http_server(&fixture.url, ""));
        assert_change_arrives(&live, &daemon, push);
        let status = daemon.server_status("live");
        assert_eq!(status["live"]["era"], era, "{status}");
        assert_eq!(status["live"]["transport"], "streamable-http", "{status}");
    }
}

#[test]
fn changes_arrive_over_the_2024_11_05_sse_transport() {
    let live = Live::new(&json!({"generate": 30, "page_size": 10}));
    let fixture = HttpFixture::start(&live.fixture_args(&["--legacy-sse"]));
    let daemon = live.daemon(&http_server(&fixture.url, ""));
    assert_change_arrives(&live, &daemon, "SSE stream");
    assert_eq!(
        daemon.server_status("live")["live"]["transport"],
        "http+sse"
    );
}

#[test]
fn servers_that_cannot_push_are_polled() {
    // No GET stream (405): polled at the configured interval.
    let live = Live::new(&json!({"generate": 30, "page_size": 10}));
    let fixture = HttpFixture::start(&live.fixture_args(&["--era", "legacy", "--no-get-stream"]));
    let daemon = live.daemon(&http_server(&fixture.url, "poll_interval = \"300ms\""));
    assert_change_arrives(&live, &daemon, "polling");
    drop(daemon);

    // No subscriptions/listen: polled, paced by the server's ttlMs where it is longer than
    // poll_interval (a shorter one never shortens it).
    let live = Live::new(&json!({"generate": 30, "page_size": 10}));
    let fixture = HttpFixture::start(&live.fixture_args(&[
        "--era",
        "modern",
        "--no-listen",
        "--ttl-ms",
        "300",
    ]));
    let daemon = live.daemon(&http_server(&fixture.url, "poll_interval = \"100ms\""));
    assert_change_arrives(&live, &daemon, "polling");
    let status = daemon.server_status("live");
    assert_eq!(status["live"]["ttlMs"], 300, "{status}");
    let reason = status["live"]["pollIntervalReason"].as_str().unwrap_or("");
    assert!(reason.contains("ttlMs (300 ms)"), "{status}");
}

#[test]
fn notifications_inside_post_responses_are_acted_on() {
    // No GET stream and no polling to speak of: only the notification that rides in a
    // ping's SSE response can bring the change.
    let live = Live::new(&json!({"generate": 30, "page_size": 10}));
    let fixture = HttpFixture::start(&live.fixture_args(&[
        "--era",
        "legacy",
        "--no-get-stream",
        "--sse",
        "--notify-in-post",
    ]));
    let daemon = live.daemon(&http_server(
        &fixture.url,
        "poll_interval = \"1h\"\nping_interval = \"200ms\"",
    ));
    assert_change_arrives(&live, &daemon, "polling");
}

#[test]
fn a_storm_during_a_walk_costs_at_most_two_more_walks() {
    let live = Live::new(&json!({"generate": 400, "page_size": 20}));
    let daemon = live.daemon(&stdio_server("live", &live.fixture_args(&[])));
    daemon.wait_for_walks("live", 1);
    // A slow walk, and a storm of 1,000 notifications while it runs.
    live.change(&json!({"generate": 410, "page_size": 20, "faults": {"page_delay_ms": 30}}));
    wait_for(
        "the slow walk to be under way",
        Duration::from_secs(20),
        || (counter(&live.stats, "pages") >= 20 + 5).then_some(()),
    );
    let walks_before_storm = counter(&live.stats, "walks");
    live.change(&json!({"generate": 420, "page_size": 20, "notify_burst": 1000}));
    wait_for_catalog(&daemon, "live", 420);
    // Let anything still queued run out before counting.
    std::thread::sleep(Duration::from_millis(500));
    let further = counter(&live.stats, "walks") - walks_before_storm;
    assert!(further <= 2, "{further} walks after the storm began");
    let status = daemon.server_status("live");
    assert!(
        status["live"]["notifications"].as_u64().unwrap_or(0) >= 1000,
        "{status}"
    );
    assert!(
        status["live"]["walksCoalesced"].as_u64().unwrap_or(0) >= 990,
        "{status}"
    );
}

#[test]
fn a_change_mid_walk_restarts_it_and_the_partial_walk_is_never_visible() {
    let live = Live::new(&json!({"generate": 200, "page_size": 10}));
    let daemon = live.daemon(&stdio_server("live", &live.fixture_args(&[])));
    daemon.wait_for_walks("live", 1);
    live.change(&json!({"generate": 300, "page_size": 10, "faults": {"page_delay_ms": 20}}));
    wait_for(
        "the slow walk to be under way",
        Duration::from_secs(20),
        || (counter(&live.stats, "pages") >= 20 + 5).then_some(()),
    );
    live.change(&json!({"generate": 250, "page_size": 10}));
    let complete = [
        generated_uris("live", 200),
        generated_uris("live", 250),
        generated_uris("live", 300),
    ];
    let final_catalog = generated_uris("live", 250);
    wait_for(
        "the mirror to settle on the last catalog",
        Duration::from_secs(30),
        || {
            let seen = daemon.uris();
            assert!(
                complete.contains(&seen),
                "a partial walk became visible: {} resources",
                seen.len()
            );
            (seen == final_catalog).then_some(())
        },
    );
    let status = daemon.server_status("live");
    assert!(
        status["live"]["walksRestarted"].as_u64().unwrap_or(0) >= 1,
        "{status}"
    );
}

#[test]
fn expired_sessions_killed_children_dropped_streams_and_restarts_recover() {
    // Session expiry and a dropped GET stream, over Streamable HTTP.
    let live = Live::new(&json!({"generate": 30, "page_size": 10}));
    let fixture = HttpFixture::start(&live.fixture_args(&["--era", "legacy"]));
    let daemon = live.daemon(&http_server(&fixture.url, ""));
    daemon.wait_for_walks("live", 1);
    let initializations = counter(&live.stats, "initialize");
    live.change(&json!({"generate": 33, "page_size": 10, "expire_sessions": 1}));
    wait_for_catalog(&daemon, "live", 33);
    wait_for("a new session", Duration::from_secs(20), || {
        (counter(&live.stats, "initialize") > initializations).then_some(())
    });
    let walks = counter(&live.stats, "walks");
    live.change(&json!({"generate": 33, "page_size": 10, "expire_sessions": 1, "drop_streams": 1}));
    wait_for(
        "a walk after the stream dropped",
        Duration::from_secs(20),
        || (counter(&live.stats, "walks") > walks).then_some(()),
    );
    live.change(&json!({"generate": 36, "page_size": 10, "expire_sessions": 1, "drop_streams": 1}));
    wait_for_catalog(&daemon, "live", 36);

    // A server restart on the same address.
    let address = fixture
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    drop(fixture);
    live.change(&json!({"generate": 40, "page_size": 10}));
    let _restarted = HttpFixture::start_on(&address, &live.fixture_args(&["--era", "legacy"]));
    wait_for_catalog(&daemon, "live", 40);
    drop(daemon);

    // A dropped listen stream over HTTP (stateless era).
    let live = Live::new(&json!({"generate": 30, "page_size": 10}));
    let fixture = HttpFixture::start(&live.fixture_args(&["--era", "modern"]));
    let daemon = live.daemon(&http_server(&fixture.url, ""));
    daemon.wait_for_walks("live", 1);
    let (walks, listens) = (
        counter(&live.stats, "walks"),
        counter(&live.stats, "listens_opened"),
    );
    live.change(&json!({"generate": 30, "page_size": 10, "drop_streams": 1}));
    wait_for(
        "a new listen and a walk after the stream dropped",
        Duration::from_secs(20),
        || {
            let relistened = counter(&live.stats, "listens_opened") > listens;
            (relistened && counter(&live.stats, "walks") > walks).then_some(())
        },
    );
    live.change(&json!({"generate": 34, "page_size": 10, "drop_streams": 1}));
    wait_for_catalog(&daemon, "live", 34);
    drop(daemon);

    // Over stdio: the server ends the listen gracefully (a result), then cancels it; each
    // time the mirror listens again and walks. Then the child is killed.
    let live = Live::new(&json!({"generate": 30, "page_size": 10}));
    let daemon = live.daemon(&stdio_server(
        "live",
        &live.fixture_args(&["--era", "modern"]),
    ));
    daemon.wait_for_walks("live", 1);
    for ending in ["close_listens", "cancel_listens"] {
        let (walks, listens) = (
            counter(&live.stats, "walks"),
            counter(&live.stats, "listens_opened"),
        );
        let mut scenario = json!({"generate": 30, "page_size": 10, "close_listens": 1});
        scenario[ending] = json!(1);
        live.change(&scenario);
        wait_for(
            &format!("a new listen and a walk after {ending}"),
            Duration::from_secs(20),
            || {
                let relistened = counter(&live.stats, "listens_opened") > listens;
                (relistened && counter(&live.stats, "walks") > walks).then_some(())
            },
        );
    }
    let pid = counter(&live.stats, "pid");
    assert!(pid > 0, "{}", stats(&live.stats));
    // SAFETY: kill(2) on the fixture child the daemon started.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
    wait_for("a new child", Duration::from_secs(20), || {
        let now = counter(&live.stats, "pid");
        (now != 0 && now != pid).then_some(())
    });
    live.change(&json!({"generate": 44, "page_size": 10}));
    wait_for_catalog(&daemon, "live", 44);
}

#[test]
fn the_era_is_detected_pinned_and_negotiated() {
    // A server whose only stateless version is one we do not speak answers -32022; the
    // mirror falls back to the handshake era.
    let live = Live::new(&json!({"generate": 12, "page_size": 5}));
    let fixture = HttpFixture::start(&live.fixture_args(&["--modern-versions", "2027-01-01"]));
    let daemon = live.daemon(&http_server(&fixture.url, ""));
    let status = daemon.wait_for_walks("live", 1);
    assert_eq!(status["live"]["era"], "legacy", "{status}");
    assert_eq!(status["protocolVersion"], "2025-11-25", "{status}");
    drop(daemon);

    // Pinned to the handshake era (and an older version) on a server that speaks both.
    let live = Live::new(&json!({"generate": 12, "page_size": 5}));
    let fixture = HttpFixture::start(&live.fixture_args(&[]));
    let daemon = live.daemon(&http_server(
        &fixture.url,
        "era = \"legacy\"\nprotocol_version = \"2025-06-18\"",
    ));
    let status = daemon.wait_for_walks("live", 1);
    assert_eq!(status["live"]["era"], "legacy", "{status}");
    assert_eq!(status["protocolVersion"], "2025-06-18", "{status}");
    assert_eq!(
        counter(&live.stats, "discover"),
        0,
        "a pinned era is not probed"
    );
    drop(daemon);

    // Pinned to the stateless era on a server that does not speak it: a clear error, and
    // no fallback.
    let live = Live::new(&json!({"generate": 12, "page_size": 5}));
    let fixture = HttpFixture::start(&live.fixture_args(&["--era", "legacy"]));
    let daemon = live.daemon(&http_server(&fixture.url, "era = \"modern\""));
    let status = wait_for("the pinned era to fail", Duration::from_secs(20), || {
        let status = daemon.server_status("live");
        (status["state"] == "backing_off").then_some(status)
    });
    assert!(
        status["lastError"]
            .as_str()
            .unwrap_or("")
            .contains("server/discover"),
        "{status}"
    );
    assert_eq!(counter(&live.stats, "initialize"), 0, "{status}");
}
