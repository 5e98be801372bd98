//! Child processes and the daemon's socket, shared by the integration tests and the benchmarks.
//!
//! Included with `#[path]` by `tests/it/support.rs` (which turns every error into a panic, as a
//! test should) and by `examples/bench/main.rs` (which passes errors up and reports them), so
//! the two harnesses start, wait for, talk to and stop the real binaries the same way. Every
//! function returns `anyhow::Result`; nothing here panics, sleeps for a fixed time to wait for
//! readiness, or knows where the binaries were built.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

/// Calls `check` every `interval` until it returns `Some`, or fails naming `what` after `limit`.
pub fn poll_until<T>(
    what: &str,
    limit: Duration,
    interval: Duration,
    mut check: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check()? {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(interval);
    }
}

/// Sends SIGTERM and waits up to `grace` for `child` to exit, then SIGKILLs it. Returns whether
/// it exited on its own (`true` too when it had already exited).
pub fn terminate(child: &mut Child, grace: Duration) -> bool {
    if let Ok(Some(_)) = child.try_wait() {
        return true;
    }
    // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// A child process stopped by [`terminate`] when dropped.
pub struct ChildProcess {
    pub child: Child,
    /// How long a stop waits after SIGTERM before SIGKILL.
    pub grace: Duration,
}

impl ChildProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the process; returns whether it exited within the grace time of SIGTERM.
    pub fn stop(&mut self) -> bool {
        terminate(&mut self.child, self.grace)
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts `mcp-mirror serve --config CONFIG` from `binary`, with `RUST_LOG=rust_log` and its
/// stderr appended to `log`; does not wait for it.
pub fn spawn_daemon(
    binary: &Path,
    config: &Path,
    log: &Path,
    rust_log: &str,
) -> anyhow::Result<Child> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("while opening the log {}", log.display()))?;
    Command::new(binary)
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", rust_log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("while starting {}", binary.display()))
}

/// Waits until `socket` accepts a connection; fails early, with the log, if the daemon exits.
pub fn wait_for_socket(
    daemon: &mut Child,
    socket: &Path,
    log: &Path,
    limit: Duration,
) -> anyhow::Result<()> {
    poll_until(
        "the daemon's socket",
        limit,
        Duration::from_millis(5),
        || {
            if let Some(status) = daemon.try_wait()? {
                bail!(
                    "the daemon exited with {status}: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            Ok(UnixStream::connect(socket).ok().map(|_| ()))
        },
    )
}

/// Spawns a server that prints `listening on URL` as its first stdout line (`mcp-fixture --http`,
/// the fast peer) and returns it with that URL. Its later output is drained so it never blocks.
pub fn spawn_listening(command: &mut Command) -> anyhow::Result<(Child, String)> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("while starting {command:?}"))?;
    let Some(stdout) = child.stdout.take() else {
        bail!("no stdout from {command:?}");
    };
    let mut lines = BufReader::new(stdout).lines();
    let first = match lines.next() {
        Some(line) => line.context("while reading the server's address")?,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{command:?} exited without printing its address");
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});
    match first.trim().strip_prefix("listening on ") {
        Some(url) => Ok((child, url.to_string())),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("unexpected first line from {command:?}: {first:?}")
        }
    }
}

/// The `[daemon]` table with `database` and `socket` in `directory`, then `settings` (more keys
/// of that table) and `servers` (the `[servers.NAME]` tables).
pub fn daemon_config_text(directory: &Path, settings: &str, servers: &str) -> String {
    format!(
        "[daemon]\ndatabase = \"{}\"\nsocket = \"{}\"\n{settings}\n\n{servers}",
        directory.join("catalog.db").display(),
        directory.join("mirror.sock").display(),
    )
}

/// A `[servers.NAME]` table running `command ARGS...` over stdio.
pub fn stdio_server_table(name: &str, command: &Path, args: &[impl AsRef<str>]) -> String {
    let args: Vec<String> = args
        .iter()
        .map(|arg| format!("{:?}", arg.as_ref()))
        .collect();
    format!(
        "[servers.{name}]\ncommand = {:?}\nargs = [{}]\n\n",
        command.display().to_string(),
        args.join(", ")
    )
}

/// A `[servers.NAME]` table for a Streamable HTTP server at `url`.
pub fn http_server_table(name: &str, url: &str) -> String {
    format!("[servers.{name}]\nurl = {url:?}\n\n")
}

/// Writes `value` as JSON to `path` through a temporary file and a rename, so a reader that
/// polls the file (the fixture's scenario) never sees half of it.
pub fn write_json_atomically(path: &Path, value: &Value) -> anyhow::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, serde_json::to_vec_pretty(value)?)
        .with_context(|| format!("while writing {}", temporary.display()))?;
    std::fs::rename(&temporary, path)
        .with_context(|| format!("while renaming {} into place", temporary.display()))
}

/// A line-oriented JSON-RPC client on the daemon's Unix socket.
pub struct SocketClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    line: String,
}

impl SocketClient {
    /// Connects; a read waiting longer than `read_timeout` fails.
    pub fn connect(path: &Path, read_timeout: Duration) -> anyhow::Result<SocketClient> {
        let stream = UnixStream::connect(path)
            .with_context(|| format!("while connecting to {}", path.display()))?;
        stream.set_read_timeout(Some(read_timeout))?;
        Ok(SocketClient {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
            next_id: 0,
            line: String::new(),
        })
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// Reads one message; `None` when the daemon closed the connection (or the read failed).
    pub fn read_message(&mut self) -> anyhow::Result<Option<Value>> {
        self.line.clear();
        match self.reader.read_line(&mut self.line) {
            Ok(0) | Err(_) => Ok(None),
            Ok(_) => Ok(Some(
                serde_json::from_str(&self.line).context("the daemon's answer is not JSON")?,
            )),
        }
    }

    /// Sends a request and returns the whole response, skipping notifications (clients that
    /// sent `initialize` or `catalog/watch` get them too).
    pub fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.next_id += 1;
        let request =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let mut bytes = serde_json::to_vec(&request)?;
        bytes.push(b'\n');
        self.send_raw(&bytes)
            .with_context(|| format!("while sending {method}"))?;
        loop {
            let Some(message) = self.read_message()? else {
                bail!("the daemon closed the connection before answering {method}");
            };
            if message.get("method").is_none() {
                return Ok(message);
            }
        }
    }

    /// Sends a request and returns its `result`; a JSON-RPC error is an error naming `method`.
    pub fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let mut response = self.request(method, params)?;
        match response.get_mut("result") {
            Some(result) => Ok(result.take()),
            None => bail!("{method} failed: {response}"),
        }
    }
}
