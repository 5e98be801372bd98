//! Shared test harness: real daemon and fixture processes, a real socket, polling with deadlines.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;

/// Spawning, waiting for and stopping the binaries, and the socket client: shared with the
/// benchmarks (examples/bench), which use parts of it these tests do not.
#[allow(dead_code)]
#[path = "../common/process.rs"]
mod process;

pub const MIRROR: &str = env!("CARGO_BIN_EXE_mcp-mirror");
pub const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture");

/// A loopback port nobody listens on now: for a daemon's `[http] listen`, a nats-server, or an
/// address that refuses. Taken from below Linux's ephemeral range (32768-60999), from which every
/// outgoing connection and every bind to port 0 draw theirs: a port from inside it can be taken
/// by any test's connection before the daemon binds it (many test processes at once made a
/// daemon's start fail with `Address already in use`). Each call moves on to the next port, so
/// no two tests of this process get the same one; processes start at different places.
pub fn free_port() -> u16 {
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..COUNT {
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = (FIRST + start.wrapping_add(next) % COUNT) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}..{}", FIRST + COUNT)
}

/// Polls `check` until it returns `Some`, or panics with `what` after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    process::poll_until(what, limit, Duration::from_millis(25), || Ok(check()))
        .unwrap_or_else(|error| panic!("{error:#}"))
}

/// Sets its flag when dropped, also while a panic unwinds. Every `std::thread::scope` whose
/// threads loop until a flag is set holds one: a panic in the scope's body (a failed
/// assertion, a `wait_for` past its limit) then ends those loops, and the scope joins them and
/// fails the test, instead of waiting for ever on threads nobody will stop.
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `wait_for` looking every `interval`: for a loop of many short waits.
pub fn wait_for_every<T>(
    what: &str,
    limit: Duration,
    interval: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    process::poll_until(what, limit, interval, || Ok(check()))
        .unwrap_or_else(|error| panic!("{error:#}"))
}

/// What a search answered by SQLite's full-text index says while that index is still
/// indexing a large swap's rows (the writer indexes them after the swap's commit).
pub const FULL_TEXT_BEHIND: &str = "full-text index is still indexing";

/// Waits until SQLite's full-text index holds every resource (a raw search says nothing of a
/// backlog), so searches it answers can be compared with the catalog.
pub fn wait_for_full_text(daemon: &Daemon) {
    wait_for("the full-text index", Duration::from_secs(180), || {
        let answer = daemon.call(
            "catalog/search",
            serde_json::json!({"query": "x", "raw": true}),
        );
        let note = answer["note"].as_str().unwrap_or("");
        (!note.contains(FULL_TEXT_BEHIND)).then_some(())
    });
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

    /// Writes a file only its owner may read, as a token file must be.
    pub fn write_private(&self, name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.write(name, text);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
        path
    }

    /// Writes a scenario for the fixture atomically, so it never reads half a file.
    pub fn write_scenario(&self, name: &str, scenario: &Value) -> PathBuf {
        let path = self.path(name);
        process::write_json_atomically(&path, scenario).unwrap_or_else(|error| panic!("{error:#}"));
        path
    }

    /// A daemon.toml with this directory's database and socket and the given server tables.
    pub fn config(&self, servers: &str) -> PathBuf {
        let text =
            process::daemon_config_text(self.dir.path(), "request_timeout = \"5s\"", servers);
        self.write("daemon.toml", &text)
    }
}

/// A stdio fixture server table for daemon.toml.
pub fn stdio_server(name: &str, args: &[&str]) -> String {
    process::stdio_server_table(name, Path::new(FIXTURE), args)
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
        let child = process::spawn_daemon(Path::new(MIRROR), config, &log, "info,mcp_mirror=debug")
            .unwrap_or_else(|error| panic!("{error:#}"));
        let mut daemon = Daemon {
            child,
            socket: scratch.path("mirror.sock"),
            database: scratch.path("catalog.db"),
            log,
        };
        process::wait_for_socket(
            &mut daemon.child,
            &daemon.socket,
            &daemon.log,
            Duration::from_secs(20),
        )
        .unwrap_or_else(|error| panic!("{error:#}"));
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
        if !process::terminate(&mut self.child, Duration::from_secs(20)) {
            panic!(
                "the daemon did not stop within 20s of SIGTERM: {}",
                self.log_text()
            );
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        process::terminate(&mut self.child, Duration::from_secs(10));
        // A failing test shows the end of each of its daemons' logs: CI keeps nothing else.
        if std::thread::panicking() {
            let log = self.log_text();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_LINES_ON_FAILURE)..];
            eprintln!(
                "--- the last {} lines of {} ---\n{}",
                tail.len(),
                self.log.display(),
                tail.join("\n")
            );
        }
    }
}

/// How much of a daemon's log a failing test prints.
const LOG_LINES_ON_FAILURE: usize = 60;

/// Runs a CLI command of the real binary against the daemon at `socket`.
pub fn run_cli(socket: &Path, args: &[&str]) -> std::process::Output {
    Command::new(MIRROR)
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .expect("run mcp-mirror")
}

/// A line-oriented JSON-RPC client on the daemon's socket (the shared one, panicking on errors).
pub struct SocketClient(process::SocketClient);

impl SocketClient {
    pub fn connect(path: &Path) -> SocketClient {
        SocketClient(
            process::SocketClient::connect(path, Duration::from_secs(60))
                .unwrap_or_else(|error| panic!("{error:#}")),
        )
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.0.send_raw(bytes).expect("write to socket");
    }

    /// Writes what it can; the daemon may close the connection part way.
    pub fn send_raw_lossy(&mut self, bytes: &[u8]) {
        let _ = self.0.send_raw(bytes);
    }

    /// Reads one response line; `None` when the daemon closed the connection.
    pub fn read_message(&mut self) -> Option<Value> {
        self.0
            .read_message()
            .unwrap_or_else(|error| panic!("{error:#}"))
    }

    /// Sends a request and returns the whole response, skipping notifications.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.0
            .request(method, params)
            .unwrap_or_else(|error| panic!("{error:#}"))
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
        let (child, url) = process::spawn_listening(
            Command::new(FIXTURE)
                .args(["--http", address])
                .args(args)
                .stderr(Stdio::null()),
        )
        .unwrap_or_else(|error| panic!("{error:#}"));
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
