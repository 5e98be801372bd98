//! Interop with the official reference server `@modelcontextprotocol/server-everything`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support::{Daemon, Scratch};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The entry point of a pinned server-everything, installed by tests/interop/install.sh
/// (which `.ci/run` runs first; running it again here makes a bare `cargo test` work too).
fn server_everything(version: &str) -> PathBuf {
    let entry = repository().join(format!(
        "target/interop/server-everything-{version}/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    ));
    if !entry.exists() {
        let status = Command::new("bash")
            .arg(repository().join("tests/interop/install.sh"))
            .status()
            .expect("run tests/interop/install.sh");
        assert!(status.success(), "installing the reference servers failed");
    }
    assert!(
        entry.exists(),
        "{} is missing after install",
        entry.display()
    );
    entry
}

/// A node reference server on loopback, killed when dropped.
struct NodeServer {
    child: Child,
    port: u16,
}

impl NodeServer {
    fn start(entry: &Path, transport: &str) -> NodeServer {
        let preload = repository().join("tests/interop/bind-loopback.cjs");
        let mut child = Command::new("node")
            .arg("--require")
            .arg(&preload)
            .arg(entry)
            .arg(transport)
            .env("PORT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start node (is Node.js installed?)");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("the server exited before listening")
                .expect("read stderr");
            if let Some(address) = line.strip_prefix("bind-loopback: listening on 127.0.0.1:") {
                break address.trim().parse().expect("port");
            }
        };
        // Keep draining its log so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        NodeServer { child, port }
    }
}

impl Drop for NodeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn server_everything_2025_12_18_over_streamable_http_mirrors_exactly_its_100_resources() {
    let entry = server_everything("2025.12.18");
    let server = NodeServer::start(&entry, "streamableHttp");
    let scratch = Scratch::new();
    let config = scratch.config(&format!(
        "[servers.everything]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
        server.port
    ));
    let daemon = Daemon::start(&scratch, &config);
    let status = daemon.wait_for_walks("everything", 1);
    assert_eq!(status["resources"], 100, "{status}");
    assert_eq!(status["last_walk"]["pages"], 10, "{status}");
    assert_eq!(status["protocol_version"], "2025-11-25", "{status}");
    let mut expected: Vec<String> = (1..=100)
        .map(|index| format!("test://static/resource/{index}"))
        .collect();
    expected.sort();
    assert_eq!(daemon.uris(), expected);
    assert_eq!(status["templates"], 1, "{status}");
}

/// The 2026.8.31 reference server lists 7 static documents; it also sends notifications we
/// do not act on (tools/list_changed, log messages), which must pass without errors.
fn assert_mirrors_the_seven_documents(daemon: &Daemon, expected_transport: &str) {
    let status = daemon.wait_for_walks("everything", 1);
    assert_eq!(status["resources"], 7, "{status}");
    assert_eq!(status["walks_failed"], 0, "{status}");
    assert!(status["last_error"].is_null(), "{status}");
    assert_eq!(status["live"]["transport"], expected_transport, "{status}");
    let uris = daemon.uris();
    assert_eq!(uris.len(), 7);
    assert!(
        uris.iter()
            .all(|uri| uri.starts_with("demo://resource/static/document/")),
        "{uris:?}"
    );
}

#[test]
fn server_everything_2026_8_31_over_stdio_http_and_legacy_sse() {
    let entry = server_everything("2026.8.31");
    let scratch = Scratch::new();
    let config = scratch.config(&format!(
        "[servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
        entry.display().to_string()
    ));
    let daemon = Daemon::start(&scratch, &config);
    assert_mirrors_the_seven_documents(&daemon, "stdio");
    drop(daemon);

    for (transport, path, expected) in [
        ("streamableHttp", "mcp", "streamable-http"),
        ("sse", "sse", "http+sse"),
    ] {
        let server = NodeServer::start(&entry, transport);
        let scratch = Scratch::new();
        let config = scratch.config(&format!(
            "[servers.everything]\nurl = \"http://127.0.0.1:{}/{path}\"\n",
            server.port
        ));
        let daemon = Daemon::start(&scratch, &config);
        assert_mirrors_the_seven_documents(&daemon, expected);
        let log = daemon.log_text();
        assert!(!log.contains("ERROR"), "{transport}: {log}");
    }
}
