//! Interop with the official reference server `@modelcontextprotocol/server-everything`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::install::{python_sdk, repository, server_everything};
use crate::support::{Daemon, Scratch};

/// Forwards a child's stderr, line by line, to the test's output (shown when the test fails)
/// and keeps it for a panic message; the child never blocks on a full pipe.
struct ChildStderr {
    text: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl ChildStderr {
    fn forward(label: &'static str, lines: impl Iterator<Item = String> + Send + 'static) -> Self {
        let text = Arc::new(Mutex::new(String::new()));
        let kept = Arc::clone(&text);
        // Spawned threads inherit the test's output capture, so these lines land in its output.
        let reader = std::thread::spawn(move || {
            for line in lines {
                eprintln!("[{label}] {line}");
                let mut kept = kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                kept.push_str(&line);
                kept.push('\n');
            }
        });
        ChildStderr {
            text,
            reader: Some(reader),
        }
    }

    /// Everything the child wrote, once it has exited (its stderr then reaches end of file).
    fn after_exit(&mut self, child: &mut Child) -> String {
        let _ = child.kill();
        let status = exit_status(child);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let text = self
            .text
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        format!("it exited ({status}); its stderr:\n{text}")
    }
}

fn exit_status(child: &mut Child) -> String {
    match child.wait() {
        Ok(status) => status.to_string(),
        Err(error) => format!("cannot wait for it: {error}"),
    }
}

/// A node reference server on loopback, killed when dropped.
pub(crate) struct NodeServer {
    child: Child,
    pub(crate) port: u16,
    _stderr: ChildStderr,
}

impl NodeServer {
    pub(crate) fn start(entry: &Path, transport: &str) -> NodeServer {
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
        let mut lines = BufReader::new(child.stderr.take().expect("stderr"))
            .lines()
            .map_while(Result::ok);
        let mut before = String::new();
        let port = loop {
            let Some(line) = lines.next() else {
                let status = exit_status(&mut child);
                panic!("the node server exited ({status}) before listening; its stderr:\n{before}");
            };
            if let Some(address) = line.strip_prefix("bind-loopback: listening on 127.0.0.1:") {
                break address.trim().parse().expect("port");
            }
            eprintln!("[node server] {line}");
            before.push_str(&line);
            before.push('\n');
        };
        let stderr = ChildStderr::forward("node server", lines);
        NodeServer {
            child,
            port,
            _stderr: stderr,
        }
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
    assert_eq!(status["lastWalk"]["pages"], 10, "{status}");
    assert_eq!(status["protocolVersion"], "2025-11-25", "{status}");
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
    assert_eq!(status["walksFailed"], 0, "{status}");
    assert!(status["lastError"].is_null(), "{status}");
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

/// A resource server written with the official Python SDK, killed when dropped.
struct PythonServer {
    child: Child,
    url: String,
    _stderr: ChildStderr,
}

impl PythonServer {
    fn start(resources: u32) -> PythonServer {
        let script = repository().join("tests/interop/python_resource_server.py");
        let mut child = Command::new(python_sdk())
            .arg(script)
            .args([
                "--port",
                "0",
                "--page-size",
                "10",
                "--resources",
                &resources.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the Python SDK server");
        let stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut stderr =
            ChildStderr::forward("python server", stderr.lines().map_while(Result::ok));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the address");
        let Some(url) = line
            .trim()
            .strip_prefix("listening on ")
            .map(str::to_string)
        else {
            let said = stderr.after_exit(&mut child);
            panic!("the Python SDK server's first line was {line:?}, not its address: {said}");
        };
        PythonServer {
            child,
            url,
            _stderr: stderr,
        }
    }

    /// Calls the server's `add_resources` tool (stateless era, so no session is needed).
    fn add_resources(&self, count: u32) {
        let address = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp");
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {
                "name": "add_resources", "arguments": {"count": count},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
            }
        })
        .to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/call\r\nMcp-Name: add_resources\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut stream =
            std::net::TcpStream::connect(address).expect("connect to the Python server");
        std::io::Write::write_all(&mut stream, request.as_bytes()).expect("send the tool call");
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stream, &mut answer).expect("read the answer");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("catalog now has"), "{answer}");
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn python_sdk_server_changes_arrive_on_the_get_stream_and_through_listen() {
    for (era, push) in [("legacy", "GET stream"), ("modern", "subscriptions/listen")] {
        let server = PythonServer::start(25);
        let scratch = Scratch::new();
        let config = scratch.config(&format!(
            "[servers.python]\nurl = \"{}\"\nera = \"{era}\"\n",
            server.url
        ));
        let daemon = Daemon::start(&scratch, &config);
        let status = daemon.wait_for_walks("python", 1);
        assert_eq!(status["resources"], 25, "{era}: {status}");
        assert_eq!(status["lastWalk"]["pages"], 3, "{era}: {status}");
        assert_eq!(status["live"]["era"], era, "{status}");
        crate::support::wait_for(
            "the push channel to open",
            std::time::Duration::from_secs(20),
            || {
                let status = daemon.server_status("python");
                status["live"]["push"]
                    .as_str()
                    .is_some_and(|shown| shown.starts_with(push))
                    .then_some(())
            },
        );
        server.add_resources(3);
        crate::support::wait_for(
            &format!("the change to arrive ({era})"),
            std::time::Duration::from_secs(20),
            || (daemon.uris().len() == 28).then_some(()),
        );
        let status = daemon.server_status("python");
        assert!(
            status["live"]["notifications"].as_u64().unwrap_or(0) >= 1,
            "{era}: {status}"
        );
    }
}
