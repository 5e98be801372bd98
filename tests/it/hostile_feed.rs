//! A hostile upstream that claims to be an mcp-mirror (the feed capability) and lies in its
//! change feed (`tests/hostile/mirror_feed.py`): a feed that says `more` and lists nothing, seqs
//! that go back, a feed that never ends, a database id that flips, and `catalog/entries`
//! answers with keys not asked, duplicates and a count that never matches. Each ends a follow
//! in exactly one full walk, says why in the log, keeps the snapshot, and leaves a good
//! server beside it alone.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{stdio_server, wait_for, Daemon, Scratch};

/// The requests the hostile server received, by method.
fn counts(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

fn count(path: &Path, method: &str) -> u64 {
    counts(path)[method].as_u64().unwrap_or(0)
}

/// Follows the hostile upstream in `mode` once (after its first walk) and checks the follow
/// fell back to one walk for `reason`, with the snapshot and the good server intact.
fn one_walk_instead(mode: &str, reason: &str, counted_as: &str) {
    let scratch = Scratch::new();
    let counts_path = scratch.path("counts.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/mirror_feed.py");
    let hostile = format!(
        "[servers.up]\ncommand = \"python3\"\nargs = [{:?}, {mode:?}, {:?}, \"{}\"]\n",
        script.display().to_string(),
        counts_path.display().to_string(),
        mcp_mirror::protocol::FEED_VERSION
    );
    let good = stdio_server("good", &["--name", "good", "--generate", "5"]);
    let config = scratch.config(&format!("{hostile}max_pages = 20\n\n{good}"));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("up", 1);
    daemon.wait_for_walks("good", 1);
    assert_eq!(count(&counts_path, "resources/list"), 1);

    daemon.call("catalog/refresh", json!({"server": "up"}));
    let status = daemon.wait_for_walks("up", 2);
    assert_eq!(status["state"], "synced", "{status}");
    let log = wait_for("the fallback's log line", Duration::from_secs(30), || {
        let log = daemon.log_text();
        log.contains("walking the upstream mirror instead of following its feed")
            .then_some(log)
    });
    assert!(log.contains(reason), "no {reason:?} in the log:\n{log}");
    // Exactly one walk instead: the first one and this one listed resources, no more.
    assert_eq!(
        count(&counts_path, "resources/list"),
        2,
        "{}",
        counts(&counts_path)
    );
    // The feed was read a bounded number of pages (max_pages = 20 here).
    assert!(
        count(&counts_path, "catalog/changes") <= 20,
        "{}",
        counts(&counts_path)
    );
    // The snapshot is the upstream's one resource; nothing it was not asked for.
    let uris: Vec<String> = daemon
        .list_all()
        .iter()
        .filter_map(|resource| resource["uri"].as_str().map(String::from))
        .filter(|uri| uri.starts_with("hostile://"))
        .collect();
    assert_eq!(uris, ["hostile://a"]);
    assert_eq!(daemon.server_status("good")["state"], "synced");
    assert_eq!(daemon.server_status("good")["walksOk"], 1);
    // Each walk instead of a follow is counted by its reason: the first (no cursor), this one
    // (counted by the session once the walk's outcome reaches it, just after its commit).
    let fallbacks = wait_for("the fallback counted", Duration::from_secs(10), || {
        let fallbacks = daemon.server_status("up")["live"]["followFallbacks"].clone();
        (fallbacks[counted_as] == 1).then_some(fallbacks)
    });
    assert_eq!(fallbacks["no_cursor"], 1, "{fallbacks}");
}

#[test]
fn a_feed_that_says_more_and_lists_nothing_ends_in_one_walk() {
    one_walk_instead("stuck", "says more after seq", "feed_stuck");
}

#[test]
fn a_feed_whose_seqs_go_back_ends_in_one_walk() {
    one_walk_instead("backwards", "the feed went back", "feed_went_back");
}

#[test]
fn a_feed_that_never_ends_is_cut_at_max_pages_and_walked() {
    one_walk_instead("endless", "did not end within 20 pages", "feed_endless");
}

#[test]
fn a_database_id_that_flips_ends_in_one_walk() {
    one_walk_instead("flip", "another one", "another_database");
}

#[test]
fn entries_not_asked_and_a_count_that_never_matches_end_in_one_walk() {
    one_walk_instead("count", "and the upstream 99", "counts_differ");
}

/// The most memory a process has held (`VmHWM`), in bytes.
fn high_water_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the status");
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|number| number.parse().ok())
        .expect("a number of kB");
    kib * 1024
}

#[test]
fn a_fat_answer_of_entries_never_asked_costs_no_memory_for_them() {
    let scratch = Scratch::new();
    let counts_path = scratch.path("counts.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/mirror_feed.py");
    let hostile = format!(
        "[servers.up]\ncommand = \"python3\"\nargs = [{:?}, \"fat\", {:?}, \"{}\"]\n",
        script.display().to_string(),
        counts_path.display().to_string(),
        mcp_mirror::protocol::FEED_VERSION
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&hostile));
    daemon.wait_for_walks("up", 1);
    let before = high_water_bytes(daemon.child.id());

    // The follow asks for one key and gets it with 300,000 entries never asked (about 13 MB):
    // only the one asked is kept, as the answer is parsed.
    daemon.call("catalog/refresh", json!({"server": "up", "wait": true}));
    let status = wait_for("the followed delta", Duration::from_secs(30), || {
        let status = daemon.server_status("up");
        (status["deltasApplied"].as_u64() >= Some(1)).then_some(status)
    });
    assert_eq!(status["walksOk"], 1, "a delta, not a walk: {status}");
    assert_eq!(count(&counts_path, "catalog/entries"), 2);
    let uris: Vec<Value> = daemon
        .list_all()
        .iter()
        .map(|resource| resource["uri"].clone())
        .collect();
    assert_eq!(uris, [json!("hostile://a")]);
    let after = high_water_bytes(daemon.child.id());
    let grown = after.saturating_sub(before);
    eprintln!(
        "the daemon's peak memory: {} MB before the fat answer, {} MB after",
        before >> 20,
        after >> 20
    );
    // The answer's text is held while it is parsed (and its line while it is read); nothing
    // more in proportion to it (a tree of values per entry took about ten times the text).
    assert!(
        grown < 64 << 20,
        "the peak grew by {} MB for one answer",
        grown >> 20
    );
}

#[test]
fn a_feed_version_1_peer_is_walked_never_followed_at_a_version_it_does_not_speak() {
    // A half-upgraded fleet: an upstream whose feed is version 1 (resources only, no
    // `catalog/entries` of tools or prompts). This follower speaks version 2, so it walks that
    // upstream as any MCP server, every time, and never reads a feed it would misread.
    let scratch = Scratch::new();
    let counts_path = scratch.path("counts.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/mirror_feed.py");
    let old_peer = format!(
        "[servers.up]\ncommand = \"python3\"\nargs = [{:?}, \"count\", {:?}, \"1\"]\n",
        script.display().to_string(),
        counts_path.display().to_string(),
    );
    let daemon = Daemon::start(&scratch, &scratch.config(&old_peer));
    daemon.wait_for_walks("up", 1);
    daemon.call("catalog/refresh", json!({"server": "up"}));
    let status = daemon.wait_for_walks("up", 2);
    assert_eq!(status["state"], "synced", "{status}");
    assert_eq!(status["walksFailed"], 0, "{status}");
    assert_eq!(count(&counts_path, "resources/list"), 2);
    assert_eq!(
        count(&counts_path, "catalog/changes"),
        0,
        "{}",
        counts(&counts_path)
    );
    assert_eq!(
        count(&counts_path, "catalog/entries"),
        0,
        "{}",
        counts(&counts_path)
    );
    let uris: Vec<Value> = daemon
        .list_all()
        .iter()
        .map(|resource| resource["uri"].clone())
        .collect();
    assert_eq!(uris, [json!("hostile://a")]);
}
