//! The official MCP conformance suite's client scenarios, run against the real daemon on both lines of the suite.
//!
//! `conformance client` starts a scenario's test server and runs tests/conformance/mirror-client.mjs
//! with its URL; that script runs `mcp-mirror serve` on the URL until the server has settled, reads
//! one resource if there is any, and stops the daemon. The suite then reports the checks it made
//! of what the daemon sent. A scenario passes here when it reports at least one check, every
//! check it names as required succeeded, no check is a FAILURE or a WARNING, and the daemon
//! settled without an error.
//!
//! Lines (pinned in tests/conformance/package.json): "0.1" is the stable line (2025-11-25),
//! "0.2" the pre-release line that also covers 2026-07-28. `request-metadata` and
//! `http-standard-headers` exist only on the 0.2 line.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::install::{conformance_node, conformance_suite, repository};
use crate::support::{Scratch, MIRROR};

const STABLE: &str = "0.1";
const PRE_RELEASE: &str = "0.2";

/// What one run of a scenario left behind.
struct ScenarioRun {
    checks: Vec<Value>,
    /// The wrapper's stdout: `{outcome, status, read}`.
    client: Value,
    /// The suite's own output, the wrapper's stderr (the daemon's log) included.
    transcript: String,
}

fn run_scenario(line: &str, scenario: &str) -> ScenarioRun {
    let node = conformance_node();
    let suite = conformance_suite(line);
    let wrapper = repository().join("tests/conformance/mirror-client.mjs");
    // The suite splits the client command on spaces and runs it through a shell.
    for path in [&node, &wrapper] {
        assert!(
            !path.display().to_string().contains(char::is_whitespace),
            "the suite cannot run a client command from a path with spaces: {}",
            path.display()
        );
    }
    let scratch = Scratch::new();
    let results = scratch.path("results");
    let output = Command::new(&node)
        .arg(&suite)
        .args(["client", "--scenario", scenario, "--timeout", "30000"])
        .arg("--command")
        .arg(format!("{} {}", node.display(), wrapper.display()))
        .arg("--output-dir")
        .arg(&results)
        .env("MCP_MIRROR", MIRROR)
        .output()
        .expect("run the conformance suite");
    let mut transcript = format!(
        "conformance {line} client --scenario {scenario}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let directory = single_result_directory(&results).unwrap_or_else(|| {
        panic!(
            "the suite saved no results in {}: {transcript}",
            results.display()
        )
    });
    let read = |name: &str| std::fs::read_to_string(directory.join(name)).unwrap_or_default();
    transcript.push_str(&format!("\nthe client's stderr:\n{}", read("stderr.txt")));
    let checks = serde_json::from_str(&read("checks.json"))
        .unwrap_or_else(|error| panic!("checks.json is not a JSON list ({error}): {transcript}"));
    let client = serde_json::from_str(&read("stdout.txt")).unwrap_or(Value::Null);
    ScenarioRun {
        checks,
        client,
        transcript,
    }
}

/// The suite writes `<scenario>-<timestamp>/` under the output directory.
fn single_result_directory(results: &Path) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(results)
        .ok()?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_dir())
        .collect();
    (entries.len() == 1).then(|| entries.remove(0))
}

fn describe(check: &Value) -> String {
    format!(
        "{} [{} / {}] {}{}",
        check["status"].as_str().unwrap_or("?"),
        check["id"].as_str().unwrap_or("?"),
        check["name"].as_str().unwrap_or("?"),
        check["description"].as_str().unwrap_or(""),
        check["errorMessage"]
            .as_str()
            .map(|message| format!(": {message}"))
            .unwrap_or_default()
    )
}

/// Runs `scenario` on `line` and fails on anything short of a clean pass.
///
/// `required` names checks (by id or by name) that must be present and succeed, so a scenario
/// cannot pass by checking nothing. `not_applicable` names checks a resource mirror cannot
/// meet, each with the reason; they are left out of the FAILURE/WARNING rule.
fn assert_scenario_passes(
    line: &str,
    scenario: &str,
    required: &[&str],
    not_applicable: &[(&str, &str)],
) {
    let run = run_scenario(line, scenario);
    let everything = || {
        let listed: Vec<String> = run.checks.iter().map(describe).collect();
        format!(
            "conformance {line} {scenario}\nchecks:\n  {}\nclient: {}\n{}",
            listed.join("\n  "),
            run.client,
            run.transcript
        )
    };
    assert!(
        !run.checks.is_empty(),
        "the scenario reported no check at all: {}",
        everything()
    );
    let applies = |check: &&Value| {
        !not_applicable
            .iter()
            .any(|(id, _why)| check["id"] == *id || check["name"] == *id)
    };
    let bad: Vec<String> = run
        .checks
        .iter()
        .filter(applies)
        .filter(|check| matches!(check["status"].as_str(), Some("FAILURE" | "WARNING")))
        .map(describe)
        .collect();
    assert!(
        bad.is_empty(),
        "checks failed or warned:\n  {}\n\n{}",
        bad.join("\n  "),
        everything()
    );
    for wanted in required {
        let succeeded = run.checks.iter().any(|check| {
            (check["id"] == *wanted || check["name"] == *wanted) && check["status"] == "SUCCESS"
        });
        assert!(
            succeeded,
            "the required check {wanted} did not succeed: {}",
            everything()
        );
    }
    assert_eq!(
        run.client["outcome"],
        "ok",
        "the daemon did not settle cleanly: {}",
        everything()
    );
}

/// The `initialize` scenario answers every other method with an empty result, `server/discover`
/// included; the daemon must see that this is not the stateless era and hand-shake.
fn initialize(line: &str) {
    assert_scenario_passes(line, "initialize", &["mcp-client-initialization"], &[]);
}

/// `sse-retry` measures how a client comes back after the server closes the SSE stream of a
/// `tools/call`. A mirror never calls tools, so only the reconnect check applies: the daemon
/// must open the GET stream.
fn sse_retry(line: &str) {
    const NO_TOOL_CALL: &str =
        "timed from the close of a tools/call stream, which a resource mirror never opens";
    assert_scenario_passes(
        line,
        "sse-retry",
        &["client-sse-graceful-reconnect"],
        &[
            ("client-sse-retry-timing", NO_TOOL_CALL),
            ("client-sse-last-event-id", NO_TOOL_CALL),
        ],
    );
}

#[test]
fn initialize_on_the_stable_line() {
    initialize(STABLE);
}

#[test]
fn initialize_on_the_pre_release_line() {
    initialize(PRE_RELEASE);
}

#[test]
fn sse_retry_reconnect_on_the_stable_line() {
    sse_retry(STABLE);
}

#[test]
fn sse_retry_reconnect_on_the_pre_release_line() {
    sse_retry(PRE_RELEASE);
}

/// SEP-2575: `_meta` and `MCP-Protocol-Version` on every request, and a retry with a supported
/// version after the server's first answer is `-32022`.
#[test]
fn request_metadata_on_the_pre_release_line() {
    assert_scenario_passes(
        PRE_RELEASE,
        "request-metadata",
        &[
            "sep-2575-http-client-sends-version-header",
            "sep-2575-client-populates-meta",
            "sep-2575-client-sends-client-info",
            "sep-2575-http-version-header-matches-meta",
            "sep-2575-client-retry-supported-version",
        ],
        &[],
    );
}

/// SEP-2243: `Mcp-Method` on every POST, and `Mcp-Name` on `resources/read` (the wrapper reads a
/// resource whose URI has a percent-encoded space).
#[test]
fn http_standard_headers_on_the_pre_release_line() {
    assert_scenario_passes(
        PRE_RELEASE,
        "http-standard-headers",
        &[
            "ClientMcpMethodHeader_resources_list",
            "ClientMcpMethodHeader_resources_read",
            "ClientMcpNameHeader_resources_read",
        ],
        &[],
    );
}
