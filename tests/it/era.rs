//! Era detection against real servers that misbehave as real ones do (bare `{}` answers,
//! scripted -32022, slow starters), and reconnect pacing (`retry: 0`, `Retry-After`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{generated_uris, stdio_server, wait_for, Daemon, HttpFixture, Scratch};

/// The fixture's counters, or null while the file is missing or being replaced.
fn stats(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

fn counter(path: &Path, name: &str) -> u64 {
    stats(path)[name].as_u64().unwrap_or(0)
}

/// One of the fixture's `*_at_ms` lists.
fn times(path: &Path, name: &str) -> Vec<u64> {
    stats(path)[name]
        .as_array()
        .map(|times| times.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// The gaps between consecutive times, in milliseconds.
fn gaps(times: &[u64]) -> Vec<u64> {
    times.windows(2).map(|pair| pair[1] - pair[0]).collect()
}

/// A fixture's scenario and stats files in a scratch directory, and its arguments.
struct Fixture {
    scenario: PathBuf,
    stats: PathBuf,
}

impl Fixture {
    fn new(scratch: &Scratch, name: &str, scenario: &Value) -> Fixture {
        Fixture {
            scenario: scratch.write_scenario(&format!("{name}.json"), scenario),
            stats: scratch.path(&format!("{name}-stats.json")),
        }
    }

    fn args<'a>(&'a self, name: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--name",
            name,
            "--scenario",
            self.scenario.to_str().expect("utf-8"),
            "--stats",
            self.stats.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        args
    }

    fn counter(&self, name: &str) -> u64 {
        counter(&self.stats, name)
    }

    fn times(&self, name: &str) -> Vec<u64> {
        times(&self.stats, name)
    }
}

fn http_server(name: &str, url: &str) -> String {
    format!("[servers.{name}]\nurl = \"{url}\"\n\n")
}

/// Waits until the mirror holds exactly the fixture's generated catalog for `name`.
fn wait_for_catalog(daemon: &Daemon, name: &str, count: usize, limit: Duration) {
    let expected = generated_uris(name, count);
    wait_for(
        &format!("the mirror to hold {count} resources of {name}"),
        limit,
        || {
            let uris: Vec<String> = daemon
                .uris()
                .into_iter()
                .filter(|uri| uri.starts_with(&format!("fixture://{name}/")))
                .collect();
            (uris == expected).then_some(())
        },
    );
}

#[test]
fn a_bare_result_to_discover_means_the_handshake_era_over_stdio_and_http() {
    let scratch = Scratch::new();
    let scenario = json!({"generate": 12, "faults": {"bare_result_for_unknown_methods": true}});
    let piped = Fixture::new(&scratch, "piped", &scenario);
    let posted = Fixture::new(&scratch, "posted", &scenario);
    let http = HttpFixture::start(&posted.args("posted", &["--era", "legacy"]));
    let servers = format!(
        "{}{}",
        stdio_server("piped", &piped.args("piped", &["--era", "legacy"])),
        http_server("posted", &http.url),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    for (name, fixture) in [("piped", &piped), ("posted", &posted)] {
        let status = daemon.wait_for_walks(name, 1);
        assert_eq!(status["resources"], 12, "{status}");
        assert_eq!(status["live"]["era"], "legacy", "{status}");
        assert_eq!(status["protocolVersion"], "2025-11-25", "{status}");
        // The probe got its `{}`, and the catalog came over initialize. On stdio both went
        // to the same process: its counters (the stats file is per process) show both.
        assert!(
            fixture.counter("bare_results") >= 1,
            "{}",
            stats(&fixture.stats)
        );
        assert_eq!(
            fixture.counter("initialize"),
            1,
            "{}",
            stats(&fixture.stats)
        );
    }
    wait_for_catalog(&daemon, "piped", 12, Duration::from_secs(10));
    wait_for_catalog(&daemon, "posted", 12, Duration::from_secs(10));
}

#[test]
fn a_scripted_unsupported_version_is_retried_in_the_stateless_era_and_never_answered_with_initialize(
) {
    let scratch = Scratch::new();
    // The first discover is refused with -32022 listing the very version we sent.
    let once = json!({"generate": 9, "faults": {"refuse_discovers": 1}});
    let piped = Fixture::new(&scratch, "piped", &once);
    let posted = Fixture::new(&scratch, "posted", &once);
    // These refuse every discover: the stateless era is proven, so no initialize ever,
    // although the servers would accept one.
    let always = json!({"generate": 9, "faults": {"refuse_discovers": 1000}});
    let refusing = Fixture::new(&scratch, "refusing", &always);
    let refusing_http = Fixture::new(&scratch, "refusinghttp", &always);
    let http = HttpFixture::start(&posted.args("posted", &[]));
    let http_refusing = HttpFixture::start(&refusing_http.args("refusinghttp", &[]));
    let servers = format!(
        "{}{}{}{}",
        stdio_server("piped", &piped.args("piped", &[])),
        http_server("posted", &http.url),
        stdio_server("refusing", &refusing.args("refusing", &[])),
        http_server("refusinghttp", &http_refusing.url),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    for (name, fixture) in [("piped", &piped), ("posted", &posted)] {
        let status = daemon.wait_for_walks(name, 1);
        assert_eq!(status["live"]["era"], "modern", "{status}");
        assert_eq!(status["protocolVersion"], "2026-07-28", "{status}");
        assert_eq!(status["resources"], 9, "{status}");
        let counters = stats(&fixture.stats);
        assert_eq!(counters["refused_discovers"], 1, "{counters}");
        assert_eq!(counters["discover"], 2, "{counters}");
        assert_eq!(counters["initialize"], 0, "{counters}");
    }
    // Over HTTP one process sees every attempt: two, each a discover and its one retry.
    wait_for(
        "two refused connection attempts",
        Duration::from_secs(30),
        || (refusing_http.counter("refused_discovers") >= 4).then_some(()),
    );
    // Over stdio each attempt is a new process: a discover, its retry, and nothing else.
    for (name, fixture) in [("refusing", &refusing), ("refusinghttp", &refusing_http)] {
        wait_for(
            &format!("{name} to back off with the -32022 error"),
            Duration::from_secs(20),
            || {
                let status = daemon.server_status(name);
                let error = status["lastError"].as_str().unwrap_or("");
                (status["state"] == "backing_off" && error.contains("-32022")).then_some(())
            },
        );
        let counters = stats(&fixture.stats);
        assert!(
            counters["refused_discovers"].as_u64() >= Some(2),
            "{counters}"
        );
        assert_eq!(counters["initialize"], 0, "{counters}");
    }
}

#[test]
fn stdio_servers_that_take_12_seconds_to_start_connect_in_both_eras() {
    let scratch = Scratch::new();
    let scenario = json!({"generate": 7});
    let modern = Fixture::new(&scratch, "slowmodern", &scenario);
    let legacy = Fixture::new(&scratch, "slowlegacy", &scenario);
    let slow = ["--start-delay-ms", "12000"];
    let servers = format!(
        "{}{}",
        stdio_server(
            "slowmodern",
            &modern.args("slowmodern", &[&["--era", "modern"][..], &slow].concat())
        ),
        stdio_server(
            "slowlegacy",
            &legacy.args("slowlegacy", &[&["--era", "legacy"][..], &slow].concat())
        ),
    );
    // The request timeout stays the harness's 5 s: the first contact is not bound by it.
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    for (name, fixture, era) in [
        ("slowmodern", &modern, "modern"),
        ("slowlegacy", &legacy, "legacy"),
    ] {
        let status = wait_for(
            &format!("{name} to finish its first walk"),
            Duration::from_secs(45),
            || {
                let status = daemon.server_status(name);
                (status["walksOk"].as_u64().unwrap_or(0) >= 1).then_some(status)
            },
        );
        assert_eq!(status["live"]["era"], era, "{status}");
        assert_eq!(status["resources"], 7, "{status}");
        // One connection, one process: the late answer to the probe was used, and nothing
        // of the other era went down the pipe while it was outstanding.
        assert_eq!(status["live"]["connections"], 1, "{status}");
        let counters = stats(&fixture.stats);
        let initializations = if era == "modern" { 0 } else { 1 };
        assert_eq!(counters["initialize"], initializations, "{counters}");
        wait_for_catalog(&daemon, name, 7, Duration::from_secs(10));
    }
    // What the children said while starting is DEBUG, not INFO.
    let log = daemon.log_text();
    let startup_lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("starting slowly"))
        .collect();
    assert!(!startup_lines.is_empty(), "{log}");
    for line in startup_lines {
        assert!(line.contains("DEBUG"), "{line}");
    }
    assert!(!log.contains("connection lost"), "{log}");
}

#[test]
fn a_get_stream_with_retry_0_that_closes_at_once_is_reopened_at_most_once_a_second_and_ever_slower()
{
    let scratch = Scratch::new();
    let fixture = Fixture::new(
        &scratch,
        "closing",
        &json!({"generate": 5, "faults": {"end_get_streams": true}}),
    );
    let http =
        HttpFixture::start(&fixture.args("closing", &["--era", "legacy", "--sse-retry-ms", "0"]));
    let daemon = Daemon::start(
        &scratch,
        &scratch.config(&http_server("closing", &http.url)),
    );
    daemon.wait_for_walks("closing", 1);
    // Watch the reopening for a while: about 8 s after the first GET.
    let first = wait_for("the first GET", Duration::from_secs(20), || {
        fixture.times("get_requests_at_ms").first().copied()
    });
    wait_for("8 s of reopening", Duration::from_secs(30), || {
        let gets = fixture.times("get_requests_at_ms");
        gets.last()
            .is_some_and(|last| last - first >= 7_000)
            .then_some(())
    });
    let gets = fixture.times("get_requests_at_ms");
    let gaps = gaps(&gets);
    // Floor 1 s, then growing: 1, 2, 4 s ... (jitter only adds).
    assert!(gaps.iter().all(|gap| *gap >= 950), "{gaps:?}");
    let within_8s = gets.iter().filter(|at| **at - first < 8_000).count();
    assert!(within_8s <= 5, "{within_8s} GETs in 8 s: {gaps:?}");
    assert!(
        gaps.len() >= 2 && gaps[gaps.len() - 1] > gaps[0] + 500,
        "{gaps:?}"
    );
    // The server keeps being mirrored meanwhile.
    assert_eq!(daemon.server_status("closing")["state"], "synced");
}

#[test]
fn a_listen_that_ends_at_once_is_reopened_at_most_once_a_second() {
    let scratch = Scratch::new();
    let fixture = Fixture::new(
        &scratch,
        "ending",
        &json!({"generate": 5, "faults": {"end_listens": true}}),
    );
    let http = HttpFixture::start(&fixture.args("ending", &["--era", "modern"]));
    let daemon = Daemon::start(&scratch, &scratch.config(&http_server("ending", &http.url)));
    daemon.wait_for_walks("ending", 1);
    let first = wait_for("the first listen", Duration::from_secs(20), || {
        fixture.times("listens_opened_at_ms").first().copied()
    });
    wait_for("6 s of reopening", Duration::from_secs(30), || {
        let listens = fixture.times("listens_opened_at_ms");
        listens
            .last()
            .is_some_and(|last| last - first >= 5_000)
            .then_some(())
    });
    let listens = fixture.times("listens_opened_at_ms");
    let gaps = gaps(&listens);
    assert!(gaps.iter().all(|gap| *gap >= 950), "{gaps:?}");
    let within_6s = listens.iter().filter(|at| **at - first < 6_000).count();
    assert!(within_6s <= 4, "{within_6s} listens in 6 s: {gaps:?}");
}

#[test]
fn retry_after_on_503_is_honoured_at_first_contact_and_on_the_get_stream() {
    let scratch = Scratch::new();
    // The first two POSTs (the discover probe) are refused: the connection waits them out.
    let posts = Fixture::new(
        &scratch,
        "busypost",
        &json!({"generate": 4, "faults": {"unavailable_posts": 2, "retry_after_secs": 2}}),
    );
    // The first two GET streams are refused: the stream opens on the third try.
    let gets = Fixture::new(
        &scratch,
        "busyget",
        &json!({"generate": 4, "faults": {"unavailable_gets": 2, "retry_after_secs": 2}}),
    );
    let busy_post = HttpFixture::start(&posts.args("busypost", &[]));
    let busy_get = HttpFixture::start(&gets.args("busyget", &["--era", "legacy"]));
    let servers = format!(
        "{}{}",
        http_server("busypost", &busy_post.url),
        http_server("busyget", &busy_get.url),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));

    let status = daemon.wait_for_walks("busypost", 1);
    assert_eq!(status["live"]["era"], "modern", "{status}");
    assert_eq!(status["live"]["connections"], 1, "{status}");
    assert_eq!(posts.counter("initialize"), 0, "{}", stats(&posts.stats));
    let refused = posts.times("unavailable_at_ms");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        gaps(&refused).iter().all(|gap| *gap >= 1_950),
        "{refused:?}"
    );

    daemon.wait_for_walks("busyget", 1);
    wait_for("the GET stream to open", Duration::from_secs(30), || {
        (gets.counter("get_streams_opened") >= 1).then_some(())
    });
    let refused = gets.times("unavailable_at_ms");
    let requests = gets.times("get_requests_at_ms");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(requests.len() >= 3, "{requests:?}");
    assert!(
        gaps(&requests[..3]).iter().all(|gap| *gap >= 1_950),
        "{requests:?}"
    );
    // Changes now arrive on that stream.
    scratch.write_scenario(
        "busyget.json",
        &json!({"generate": 6, "faults": {"unavailable_gets": 2, "retry_after_secs": 2}}),
    );
    wait_for_catalog(&daemon, "busyget", 6, Duration::from_secs(20));
    let status = daemon.server_status("busyget");
    assert!(
        status["live"]["push"]
            .as_str()
            .unwrap_or("")
            .starts_with("GET stream"),
        "{status}"
    );
}

#[test]
fn a_probe_left_unanswered_is_followed_by_initialize_in_a_new_process_only() {
    let scratch = Scratch::new();
    let fixture = Fixture::new(
        &scratch,
        "mute",
        &json!({"generate": 6, "faults": {"unanswered_methods": ["server/discover"]}}),
    );
    let server = format!(
        "{}request_timeout = \"1s\"\nconnect_timeout = \"2s\"\n\n",
        stdio_server("mute", &fixture.args("mute", &["--era", "legacy"]))
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&server));
    let status = daemon.wait_for_walks("mute", 1);
    assert_eq!(status["live"]["era"], "legacy", "{status}");
    assert_eq!(status["resources"], 6, "{status}");
    // The process that got initialize never saw the probe (the stats file is per process):
    // the first one, still owing an answer, was replaced.
    let counters = stats(&fixture.stats);
    assert_eq!(counters["initialize"], 1, "{counters}");
    assert_eq!(counters["unanswered"], 0, "{counters}");
    // The replaced process's end did not reach the session as a lost connection.
    wait_for_catalog(&daemon, "mute", 6, Duration::from_secs(10));
    let status = daemon.server_status("mute");
    assert_eq!(status["state"], "synced", "{status}");
    assert_eq!(status["live"]["connections"], 1, "{status}");
    assert_eq!(status["walksOk"], 1, "{status}");
}
