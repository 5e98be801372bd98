//! `mcp-mirror mcp` with the official MCP Python SDK's client: an MCP host launches the
//! bridge as a stdio server and lists and reads the merged catalog through it.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use crate::endpoint::ALL_BYTES_BASE64;
use crate::support::{Daemon, Scratch, MIRROR};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv with the pinned SDK, installed once per test binary.
fn python_with_sdk() -> PathBuf {
    crate::install::python_sdk()
}

#[test]
fn the_python_sdk_client_lists_and_reads_through_the_stdio_bridge() {
    let python = python_with_sdk();
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario(
        "docs.json",
        &json!({"generate": 620, "resources": [{"uri": "fixture://docs/blob.bin", "name": "blob"}]}),
    );
    let daemon = Daemon::with_scenario(&scratch, "docs", &scenario);
    daemon.wait_for_walks("docs", 1);

    let output = Command::new(python)
        .arg(repository().join("tests/interop/bridge_client.py"))
        .arg(MIRROR)
        .arg(&daemon.socket)
        .args(["fixture://docs/docs/000007.md", "fixture://docs/blob.bin"])
        .output()
        .expect("run the Python client");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).expect("the client's JSON");
    assert_eq!(seen["serverName"], "mcp-mirror");
    assert_eq!(seen["protocolVersion"], "2025-11-25");
    assert_eq!(seen["pages"], 2, "500 per page");
    let resources = seen["resources"].as_array().expect("resources");
    assert_eq!(resources.len(), 621);
    assert!(resources
        .iter()
        .all(|resource| resource["_meta"]["io.mcp-mirror/server"] == "docs"));
    assert_eq!(
        seen["templates"].as_array().map(Vec::len),
        Some(3),
        "{}",
        seen["templates"]
    );
    assert_eq!(
        seen["reads"]["fixture://docs/docs/000007.md"][0]["text"],
        "contents of fixture://docs/docs/000007.md"
    );
    assert_eq!(
        seen["reads"]["fixture://docs/blob.bin"][0]["blob"],
        ALL_BYTES_BASE64
    );
}
