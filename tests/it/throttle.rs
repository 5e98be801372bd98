//! Bounded sync rates against hostile servers: one that says its list changed with every answer
//! is walked at the walk pace while another keeps syncing, and a `Retry-After` longer than the
//! connection window delays the reconnect.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{
    generated_uris, run_cli, stdio_server, wait_for, Daemon, HttpFixture, Scratch,
};

/// The fixture's counters, or null while the file is missing or being replaced.
fn stats(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

/// A fixture's scenario and stats files in a scratch directory, and its arguments.
struct Fixture {
    name: &'static str,
    scenario: PathBuf,
    stats: PathBuf,
}

impl Fixture {
    fn new(scratch: &Scratch, name: &'static str, scenario: &Value) -> Fixture {
        Fixture {
            name,
            scenario: scratch.write_scenario(&format!("{name}.json"), scenario),
            stats: scratch.path(&format!("{name}-stats.json")),
        }
    }

    fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--name",
            self.name,
            "--scenario",
            self.scenario.to_str().expect("utf-8"),
            "--stats",
            self.stats.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        args
    }

    fn change(&self, scratch: &Scratch, scenario: &Value) {
        scratch.write_scenario(&format!("{}.json", self.name), scenario);
    }

    fn counter(&self, name: &str) -> u64 {
        stats(&self.stats)[name].as_u64().unwrap_or(0)
    }

    fn times(&self, name: &str) -> Vec<u64> {
        stats(&self.stats)[name]
            .as_array()
            .map(|times| times.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()
    }
}

/// Waits until the mirror holds exactly the fixture's generated catalog of `count` for `name`.
fn wait_for_catalog(daemon: &Daemon, name: &str, count: usize, limit: Duration) {
    let expected = generated_uris(name, count);
    let prefix = format!("fixture://{name}/");
    wait_for(
        &format!("the mirror to hold {count} resources of {name}"),
        limit,
        || {
            let uris: Vec<String> = daemon
                .uris()
                .into_iter()
                .filter(|uri| uri.starts_with(&prefix))
                .collect();
            (uris == expected).then_some(())
        },
    );
}

#[test]
fn a_server_notifying_with_every_answer_is_walked_at_the_walk_pace() {
    let scratch = Scratch::new();
    let noisy_scenario = |generate: usize| json!({"generate": generate, "page_size": 10, "faults": {"notify_with_every_answer": true}});
    let noisy = Fixture::new(&scratch, "noisy", &noisy_scenario(30));
    let calm = Fixture::new(&scratch, "calm", &json!({"generate": 5}));
    let servers = format!(
        "{}{}",
        stdio_server("noisy", &noisy.args(&["--era", "legacy"])),
        stdio_server("calm", &calm.args(&[])),
    );
    // The default `min_walk_interval` (1 s) is in force.
    let daemon = Daemon::start(&scratch, &scratch.config(&servers));
    daemon.wait_for_walks("calm", 1);
    wait_for(
        "the noisy server's first walk",
        Duration::from_secs(20),
        || (noisy.counter("walks") >= 1).then_some(()),
    );

    // Ten seconds of a server whose every answer says its list changed. Without the pace it
    // was walked about 8.6 times a second; the pace allows about one walk a second.
    let window = Duration::from_secs(10);
    let started = Instant::now();
    let walks_before = noisy.counter("walks");
    // Meanwhile the other server keeps syncing, promptly.
    calm.change(&scratch, &json!({"generate": 8}));
    wait_for_catalog(&daemon, "calm", 8, Duration::from_secs(5));
    // The throttle shows in status, with its reason, and in the CLI's table.
    let status = wait_for("the throttle in status", window, || {
        let status = daemon.server_status("noisy");
        status["live"]["throttledUntilMs"]
            .as_i64()
            .is_some()
            .then_some(status)
    });
    let reason = status["live"]["throttleReason"].as_str().unwrap_or("");
    assert!(reason.contains("min_walk_interval"), "{status}");
    assert!(
        status["live"]["walksThrottled"].as_u64().unwrap_or(0) >= 1,
        "{status}"
    );
    wait_for("the throttle in the CLI", window, || {
        let output = run_cli(&daemon.socket, &["status"]);
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.lines()
            .any(|line| line.starts_with("noisy") && line.contains("(throttled)"))
            .then_some(())
    });
    std::thread::sleep(window.saturating_sub(started.elapsed()));
    let walks = noisy.counter("walks") - walks_before;
    let seconds = started.elapsed().as_secs_f64();
    // One walk start per second at most, give or take the one under way and scheduling.
    assert!(
        walks as f64 <= seconds + 3.0,
        "{walks} walks in {seconds:.1} s: {}",
        daemon.server_status("noisy")
    );
    assert!(
        walks >= 2,
        "{walks} walks in {seconds:.1} s: the pace stopped it"
    );

    // Walks are held back, never lost: a real change of the noisy server still arrives.
    noisy.change(&scratch, &noisy_scenario(40));
    wait_for_catalog(&daemon, "noisy", 40, Duration::from_secs(30));
    calm.change(&scratch, &json!({"generate": 3}));
    wait_for_catalog(&daemon, "calm", 3, Duration::from_secs(5));
}

#[test]
fn a_retry_after_longer_than_the_connection_window_delays_the_reconnect() {
    let scratch = Scratch::new();
    // The first two POSTs are refused with `Retry-After: 3`; the connection window is 1 s, so
    // the first attempt gives up and the session must wait out the 3 s before the next one.
    let busy = Fixture::new(
        &scratch,
        "busy",
        &json!({"generate": 4, "faults": {"unavailable_posts": 2, "retry_after_secs": 3}}),
    );
    let http = HttpFixture::start(&busy.args(&[]));
    let server = format!(
        "[servers.busy]\nurl = \"{}\"\nrequest_timeout = \"1s\"\nconnect_timeout = \"1s\"\n\n",
        http.url
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&server));
    let status = daemon.wait_for_walks("busy", 1);
    assert_eq!(status["resources"], 4, "{status}");
    let refused = busy.times("unavailable_at_ms");
    assert_eq!(refused.len(), 2, "{refused:?}");
    let gap = refused[1] - refused[0];
    // The backoff alone would have tried again after about 1 s.
    assert!(
        gap >= 2_950,
        "reconnected {gap} ms after a Retry-After of 3 s"
    );
    assert!(gap < 10_000, "reconnected only {gap} ms later");
    let log = daemon.log_text();
    assert!(log.contains("cannot connect"), "{log}");
}
