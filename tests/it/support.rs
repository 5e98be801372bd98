//! Shared test harness: real daemon and fixture processes, a real socket, polling with deadlines.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

pub const MIRROR: &str = env!("CARGO_BIN_EXE_mcp-mirror");
pub const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture");

/// Polls `check` until it returns `Some`, or panics with `what` after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A scratch directory for one test: config, database, socket and scenario files.
pub struct Scratch {
    pub dir: TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::Builder::new()
                .prefix("mcp-mirror-it")
                .tempdir()
                .expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("write scratch file");
        path
    }

    /// Writes a scenario for the fixture atomically, so it never reads half a file.
    pub fn write_scenario(&self, name: &str, scenario: &Value) -> PathBuf {
        let path = self.path(name);
        let temporary = self.path(&format!("{name}.tmp"));
        std::fs::write(
            &temporary,
            serde_json::to_vec_pretty(scenario).expect("json"),
        )
        .expect("write");
        std::fs::rename(&temporary, &path).expect("rename");
        path
    }

    /// A daemon.toml with this directory's database and socket and the given server tables.
    pub fn config(&self, servers: &str) -> PathBuf {
        let text = format!(
            "[daemon]\ndatabase = \"{}\"\nsocket = \"{}\"\nrequest_timeout = \"5s\"\n\n{servers}",
            self.path("catalog.db").display(),
            self.path("mirror.sock").display(),
        );
        self.write("daemon.toml", &text)
    }
}

/// A stdio fixture server table for daemon.toml.
pub fn stdio_server(name: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|arg| format!("{arg:?}")).collect();
    format!(
        "[servers.{name}]\ncommand = {:?}\nargs = [{}]\n\n",
        FIXTURE,
        args.join(", ")
    )
}

/// The real daemon binary, running until dropped (SIGTERM, then SIGKILL).
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub database: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(scratch: &Scratch, config: &Path) -> Daemon {
        let log = scratch.path("daemon.log");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = Command::new(MIRROR)
            .args(["serve", "--config"])
            .arg(config)
            .env("RUST_LOG", "info,mcp_mirror=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start mcp-mirror");
        let mut daemon = Daemon {
            child,
            socket: scratch.path("mirror.sock"),
            database: scratch.path("catalog.db"),
            log,
        };
        let socket = daemon.socket.clone();
        wait_for("the daemon's socket", Duration::from_secs(20), || {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                panic!("the daemon exited with {status}: {}", daemon.log_text());
            }
            UnixStream::connect(&socket).ok().map(|_| ())
        });
        daemon
    }

    /// A daemon mirroring one stdio fixture named `name`, driven by the scenario file at `scenario`.
    pub fn with_scenario(scratch: &Scratch, name: &str, scenario: &Path) -> Daemon {
        let scenario = scenario.display().to_string();
        let server = stdio_server(name, &["--name", name, "--scenario", &scenario]);
        Daemon::start(scratch, &scratch.config(&server))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn connect(&self) -> SocketClient {
        SocketClient::connect(&self.socket)
    }

    /// Calls `method` and returns its result, panicking on a JSON-RPC error.
    pub fn call(&self, method: &str, params: Value) -> Value {
        let response = self.connect().request(method, params);
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("{method} failed: {response}"),
        }
    }

    pub fn server_status(&self, server: &str) -> Value {
        let status = self.call("catalog/status", json!({}));
        status["servers"]
            .as_array()
            .and_then(|servers| {
                servers
                    .iter()
                    .find(|entry| entry["name"] == server)
                    .cloned()
            })
            .unwrap_or_else(|| panic!("no server {server} in {status}"))
    }

    /// Waits until `server` has committed at least `walks` walks; returns its status.
    pub fn wait_for_walks(&self, server: &str, walks: u64) -> Value {
        wait_for(
            &format!("{server} to finish walk {walks}"),
            Duration::from_secs(30),
            || {
                let status = self.server_status(server);
                (status["walksOk"].as_u64().unwrap_or(0) >= walks).then_some(status)
            },
        )
    }

    /// Every resource of the merged catalog, following cursors to the end.
    pub fn list_all(&self) -> Vec<Value> {
        let mut client = self.connect();
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let response = client.request("resources/list", params);
            let result = &response["result"];
            all.extend(
                result["resources"]
                    .as_array()
                    .expect("resources array")
                    .iter()
                    .cloned(),
            );
            match result["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => return all,
            }
        }
    }

    pub fn uris(&self) -> Vec<String> {
        let mut uris: Vec<String> = self
            .list_all()
            .iter()
            .map(|resource| resource["uri"].as_str().expect("uri").to_string())
            .collect();
        uris.sort();
        uris
    }

    pub fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!(
            "the daemon did not stop within 20s of SIGTERM: {}",
            self.log_text()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a CLI command of the real binary against the daemon at `socket`.
pub fn run_cli(socket: &Path, args: &[&str]) -> std::process::Output {
    Command::new(MIRROR)
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .expect("run mcp-mirror")
}

/// A line-oriented JSON-RPC client on the daemon's socket.
pub struct SocketClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl SocketClient {
    pub fn connect(path: &Path) -> SocketClient {
        let stream = UnixStream::connect(path).expect("connect to the daemon's socket");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        SocketClient {
            writer: stream.try_clone().expect("clone"),
            reader: BufReader::new(stream),
            next_id: 0,
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write to socket");
    }

    /// Writes what it can; the daemon may close the connection part way.
    pub fn send_raw_lossy(&mut self, bytes: &[u8]) {
        let _ = self.writer.write_all(bytes);
    }

    /// Reads one response line; `None` when the daemon closed the connection.
    pub fn read_message(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("response is JSON")),
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let request =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let mut line = serde_json::to_vec(&request).expect("json");
        line.push(b'\n');
        self.send_raw(&line);
        // Clients that sent `initialize` or `catalog/watch` also get notifications.
        loop {
            let message = self.read_message().expect("a response");
            if message.get("method").is_none() {
                return message;
            }
        }
    }
}

/// A fixture serving Streamable HTTP on loopback, stopped when dropped.
pub struct HttpFixture {
    pub child: Child,
    pub url: String,
}

impl HttpFixture {
    pub fn start(args: &[&str]) -> HttpFixture {
        HttpFixture::start_on("127.0.0.1:0", args)
    }

    /// Starts on a given loopback address, such as the one a stopped fixture had.
    pub fn start_on(address: &str, args: &[&str]) -> HttpFixture {
        let mut child = Command::new(FIXTURE)
            .args(["--http", address])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mcp-fixture");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the fixture's address");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from the fixture: {line:?}"))
            .to_string();
        HttpFixture { child, url }
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Opens the database file directly (read-only) for checks a user would make with sqlite3.
pub fn open_database(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open database")
}

/// The fixture's generated URIs for `count` resources named `name`.
pub fn generated_uris(name: &str, count: usize) -> Vec<String> {
    let mut uris: Vec<String> = (0..count)
        .map(|index| format!("fixture://{name}/docs/{index:06}.md"))
        .collect();
    uris.sort();
    uris
}
