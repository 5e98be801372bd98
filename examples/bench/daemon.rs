//! The benchmark's side of the shared process helpers: the release binaries, one kept work
//! directory per daemon, and a running daemon with what its log says about swaps.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail};
use serde_json::{json, Value};

use crate::measure::{log_field, parse_timestamp_us};
use crate::paths::{release_binary, work_dir};
use crate::process::{self, ChildProcess, SocketClient};

/// How long a socket call may wait: a `refresh {wait}` of 1,000,000 resources takes a while.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a stopping daemon or server gets after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The daemon's log filter: the writer logs a swap that changed nothing only at debug level,
/// and the walk scenario reads every swap's timings from the log.
const DAEMON_LOG: &str = "info,mcp_mirror::store::writer=debug";

/// Connects a socket client with the benchmark's timeout.
pub fn connect(socket: &Path) -> anyhow::Result<SocketClient> {
    SocketClient::connect(socket, SOCKET_TIMEOUT)
}

/// A server serving Streamable HTTP on a loopback port (the fixture or the fast peer).
pub struct HttpServer {
    pub process: ChildProcess,
    pub url: String,
}

/// Starts `binary ARGS... --http 127.0.0.1:0` with its stderr in `log`.
pub fn start_http_server(binary: &Path, args: &[String], log: &Path) -> anyhow::Result<HttpServer> {
    let (child, url) = process::spawn_listening(
        Command::new(binary)
            .args(args)
            .args(["--http", "127.0.0.1:0"])
            .stderr(std::fs::File::create(log)?),
    )?;
    Ok(HttpServer {
        process: ChildProcess {
            child,
            grace: STOP_GRACE,
        },
        url,
    })
}

/// Starts the release fixture over Streamable HTTP.
pub fn start_http_fixture(args: &[String], log: &Path) -> anyhow::Result<HttpServer> {
    start_http_server(&release_binary("mcp-fixture"), args, log)
}

/// Where one daemon keeps its files: `target/bench-work/NAME`, emptied when made and kept
/// after the run so its logs can be read.
pub struct DaemonFiles {
    pub dir: PathBuf,
}

impl DaemonFiles {
    pub fn fresh(name: &str) -> anyhow::Result<DaemonFiles> {
        let dir = work_dir().join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(DaemonFiles { dir })
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    pub fn socket(&self) -> PathBuf {
        self.path("mirror.sock")
    }
    pub fn log(&self) -> PathBuf {
        self.path("daemon.log")
    }
    /// Writes daemon.toml with generous walk caps, no polling and no backstop re-walks, so
    /// nothing but the benchmark starts a walk.
    pub fn config(&self, extra_daemon: &str, servers: &str) -> anyhow::Result<PathBuf> {
        let settings = format!(
            "request_timeout = \"120s\"\nmax_pages = 1000000\nmax_items = 10000000\n\
             poll_interval = \"24h\"\nresync_interval = \"24h\"\n{extra_daemon}"
        );
        let path = self.path("daemon.toml");
        std::fs::write(
            &path,
            process::daemon_config_text(&self.dir, &settings, servers),
        )?;
        Ok(path)
    }
}

/// A `[servers.NAME]` table running the release fixture over stdio.
pub fn fixture_stdio_table(name: &str, args: &[String]) -> String {
    process::stdio_server_table(name, &release_binary("mcp-fixture"), args)
}

/// The fixture's arguments for a generated catalog of `size` resources.
pub fn fixture_args(size: usize, page: usize, name: &str) -> Vec<String> {
    vec![
        "--name".into(),
        name.into(),
        "--generate".into(),
        size.to_string(),
        "--page-size".into(),
        page.to_string(),
    ]
}

/// The release daemon, stopped when dropped.
pub struct Daemon {
    pub process: ChildProcess,
    pub socket: PathBuf,
    pub log: PathBuf,
}

/// Starts target/release/mcp-mirror and waits until its socket accepts connections.
pub fn start_daemon(files: &DaemonFiles, config: &Path) -> anyhow::Result<Daemon> {
    let child = process::spawn_daemon(
        &release_binary("mcp-mirror"),
        config,
        &files.log(),
        DAEMON_LOG,
    )?;
    let mut daemon = Daemon {
        process: ChildProcess {
            child,
            grace: STOP_GRACE,
        },
        socket: files.socket(),
        log: files.log(),
    };
    process::wait_for_socket(
        &mut daemon.process.child,
        &daemon.socket,
        &daemon.log,
        Duration::from_secs(60),
    )?;
    Ok(daemon)
}

/// Spawns the release daemon without waiting for anything (the start scenario times that).
pub fn spawn_daemon(files: &DaemonFiles, config: &Path) -> anyhow::Result<ChildProcess> {
    let child = process::spawn_daemon(
        &release_binary("mcp-mirror"),
        config,
        &files.log(),
        DAEMON_LOG,
    )?;
    Ok(ChildProcess {
        child,
        grace: STOP_GRACE,
    })
}

impl Daemon {
    pub fn client(&self) -> anyhow::Result<SocketClient> {
        connect(&self.socket)
    }
    pub fn call(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.client()?.call(method, params)
    }
    pub fn server_status(&self, server: &str) -> anyhow::Result<Value> {
        let status = self.call("catalog/status", json!({}))?;
        status["servers"]
            .as_array()
            .and_then(|servers| servers.iter().find(|entry| entry["name"] == server))
            .cloned()
            .ok_or_else(|| anyhow!("no server {server} in the status"))
    }
    /// Waits until every server has at least `walks` complete walks.
    pub fn wait_for_walks(&self, walks: u64, limit: Duration) -> anyhow::Result<()> {
        let mut client = self.client()?;
        let mut last = Value::Null;
        let outcome = process::poll_until(
            &format!("every server's walk {walks}"),
            limit,
            Duration::from_millis(10),
            || {
                last = client.call("catalog/status", json!({}))?;
                let servers = last["servers"].as_array().cloned().unwrap_or_default();
                Ok((!servers.is_empty()
                    && servers
                        .iter()
                        .all(|server| server["walksOk"].as_u64().unwrap_or(0) >= walks))
                .then_some(()))
            },
        );
        match outcome {
            Ok(()) => Ok(()),
            Err(error) => bail!("{error:#}: {last}"),
        }
    }
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// Every "snapshot swapped" log line (also "snapshot swapped; nothing changed").
    pub fn swaps(&self) -> Vec<Swap> {
        swaps_in(&self.log_text())
    }
}

/// Every "snapshot swapped" line of a daemon's log `text`.
pub fn swaps_in(text: &str) -> Vec<Swap> {
    text.lines()
        .filter(|line| line.contains("snapshot swapped"))
        .filter_map(|line| {
            let at = parse_timestamp_us(line.split_whitespace().next()?)?;
            let hold: f64 = log_field(line, "hold_ms")?.trim_matches('"').parse().ok()?;
            let total: f64 = log_field(line, "swap_ms")
                .and_then(|value| value.trim_matches('"').parse().ok())
                .unwrap_or(hold);
            // A swap that changed nothing is logged without counts.
            let changed: u64 = log_field(line, "changed")
                .and_then(|value| value.parse().ok())
                .unwrap_or(0);
            Some(Swap {
                committed_at_us: at,
                hold_ms: hold,
                total_ms: total,
                changed,
            })
        })
        .collect()
}

/// One swap as the writer logged it.
#[derive(Clone, Copy)]
pub struct Swap {
    pub committed_at_us: i64,
    /// The write lock's hold time.
    pub hold_ms: f64,
    /// Computing the diff and applying it.
    pub total_ms: f64,
    pub changed: u64,
}

/// Runs a child that prints one JSON line per round (with at least `seconds`); returns them.
pub fn timed_rounds(command: &mut Command, limit: Duration) -> anyhow::Result<Vec<Value>> {
    let started = std::time::Instant::now();
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()?;
    if !output.status.success() {
        bail!(
            "{:?} failed: {}",
            command,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if started.elapsed() > limit {
        eprintln!("warning: {command:?} took {:?}", started.elapsed());
    }
    let rounds: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect();
    if let Some(round) = rounds
        .iter()
        .find(|round| round["seconds"].as_f64().is_none())
    {
        bail!("no seconds in {round}");
    }
    Ok(rounds)
}
