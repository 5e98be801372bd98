//! The stdio transport: a child process speaking newline-delimited JSON-RPC on stdin and stdout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::rpc::{self, Incoming, PendingRequests};
use super::{EventSink, McpError, ServerEvent, MAX_MESSAGE_BYTES};
use crate::lines::{self, Line};

/// The longest stderr line we log; a child's stderr is free-form and may be noisy.
const STDERR_LINE_BYTES: usize = 16 << 10;

/// How long a child gets after stdin closes, and again after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(2);

pub struct StdioConnection {
    server: String,
    /// Taken (closing the child's stdin) when the connection closes.
    outgoing: std::sync::Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    pending: Arc<PendingRequests>,
    child: tokio::sync::Mutex<Child>,
    /// The process group the child leads (its pid), for signalling its descendants too.
    process_group: Option<libc::pid_t>,
    closed: AtomicBool,
}

impl StdioConnection {
    pub fn spawn(
        server: &str,
        command: &Path,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: Option<&PathBuf>,
        events: EventSink,
    ) -> Result<Self, McpError> {
        let mut builder = Command::new(command);
        builder
            .args(args)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = cwd {
            builder.current_dir(cwd);
        }
        // SAFETY: setpgid and prctl are async-signal-safe. Its own process group keeps a
        // terminal's Ctrl-C from reaching the child before our ordered shutdown does; the
        // parent-death signal makes the kernel SIGTERM it if the daemon is killed outright.
        unsafe {
            builder.pre_exec(|| {
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = builder.spawn().map_err(|error| {
            McpError::Transport(format!("cannot start `{}`: {error}", command.display()))
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(McpError::Transport("child pipes are missing".into()));
        };
        let pending = Arc::new(PendingRequests::default());
        let (outgoing, mut outgoing_receiver) = mpsc::channel::<Vec<u8>>(64);

        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(mut line) = outgoing_receiver.recv().await {
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            // Dropping stdin here closes it, which asks a well-behaved server to exit.
        });

        let reader_pending = pending.clone();
        // Weak, so that closing the connection's sender really closes the child's stdin.
        let reader_outgoing = outgoing.downgrade();
        let reader_server = server.to_string();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            let reason = loop {
                line.clear();
                match lines::read_line(&mut reader, &mut line, MAX_MESSAGE_BYTES).await {
                    Ok(Line::Complete) => handle_line(
                        &reader_server,
                        &String::from_utf8_lossy(&line),
                        &reader_pending,
                        &reader_outgoing,
                        &events,
                    ),
                    Ok(Line::End) => {
                        break "the server process closed its stdout (it exited or crashed)"
                            .to_string()
                    }
                    Ok(Line::TooLong) => break McpError::too_large("a line").to_string(),
                    Err(error) => break format!("cannot read the server's stdout: {error}"),
                }
            };
            reader_pending.fail_all();
            events.send(ServerEvent::Disconnected(reason));
        });

        let stderr_server = server.to_string();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match lines::read_line(&mut reader, &mut line, STDERR_LINE_BYTES).await {
                    Ok(Line::Complete) => {
                        let text = String::from_utf8_lossy(&line);
                        tracing::info!(server = %stderr_server, "child stderr: {}", text.trim_end());
                    }
                    Ok(Line::TooLong) => {
                        tracing::info!(server = %stderr_server, "child stderr: (a line over {STDERR_LINE_BYTES} bytes, not shown)")
                    }
                    Ok(Line::End) | Err(_) => break,
                }
            }
        });

        Ok(StdioConnection {
            server: server.to_string(),
            outgoing: std::sync::Mutex::new(Some(outgoing)),
            pending,
            process_group: child.id().map(|pid| pid as libc::pid_t),
            child: tokio::sync::Mutex::new(child),
            closed: AtomicBool::new(false),
        })
    }

    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<Value, McpError> {
        let id = self.pending.next_id();
        let message = rpc::request_message(id, method, params);
        let gone = || format!("`{}` exited or closed stdout", self.server);
        self.pending
            .exchange(id, method, timeout, self.send(&message), gone)
            .await
    }

    pub async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        self.send(&rpc::notification_message(method, params)).await
    }

    async fn send(&self, message: &Value) -> Result<(), McpError> {
        let bytes =
            serde_json::to_vec(message).map_err(|error| McpError::Protocol(error.to_string()))?;
        let outgoing = self
            .outgoing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let Some(outgoing) = outgoing else {
            return Err(McpError::Closed("stdin already closed".into()));
        };
        outgoing
            .send(bytes)
            .await
            .map_err(|_| McpError::Closed(format!("`{}` closed its stdin", self.server)))
    }

    /// Stops the child: close stdin, wait, SIGTERM, wait, SIGKILL.
    pub async fn close(&self) {
        self.outgoing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let mut child = self.child.lock().await;
        if let Ok(Ok(status)) = tokio::time::timeout(STOP_GRACE, child.wait()).await {
            tracing::debug!(server = %self.server, %status, "child exited after stdin closed");
            // A wrapper (npx, uvx, sh -c) may leave the real server behind in its group.
            self.signal_group(libc::SIGTERM);
            self.closed.store(true, Ordering::Relaxed);
            return;
        }
        self.signal_group(libc::SIGTERM);
        if let Ok(Ok(status)) = tokio::time::timeout(STOP_GRACE, child.wait()).await {
            tracing::debug!(server = %self.server, %status, "child exited after SIGTERM");
            self.closed.store(true, Ordering::Relaxed);
            return;
        }
        tracing::warn!(server = %self.server, "child ignored SIGTERM; killing its process group");
        self.signal_group(libc::SIGKILL);
        let _ = child.kill().await;
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Signals the child's whole process group (it leads one of its own), grandchildren too.
    fn signal_group(&self, signal: libc::c_int) {
        if let Some(group) = self.process_group {
            // SAFETY: kill(2) on the negative id of the group our child leads.
            unsafe {
                libc::kill(-group, signal);
            }
        }
    }
}

impl Drop for StdioConnection {
    fn drop(&mut self) {
        // Not closed in order (a task was aborted): leave no process of this server behind.
        if !self.closed.load(Ordering::Relaxed) {
            self.signal_group(libc::SIGKILL);
        }
    }
}

fn handle_line(
    server: &str,
    line: &str,
    pending: &PendingRequests,
    outgoing: &mpsc::WeakSender<Vec<u8>>,
    events: &EventSink,
) {
    if line.trim().is_empty() {
        return;
    }
    let message: Value = match serde_json::from_str(line) {
        Ok(message) => message,
        Err(error) => {
            tracing::warn!(server, %error, "child wrote a line that is not JSON; ignoring it");
            return;
        }
    };
    match rpc::classify(message) {
        Some(Incoming::Response { id, outcome }) => {
            if !pending.complete(&id, outcome) {
                tracing::debug!(server, %id, "response for a request nobody waits for");
            }
        }
        Some(Incoming::Notification { method, params }) => {
            rpc::route_notification(server, &method, &params, events)
        }
        Some(Incoming::Request { id, method }) => {
            let answer = rpc::answer_server_request(id, &method);
            if let Ok(bytes) = serde_json::to_vec(&answer) {
                if let Some(outgoing) = outgoing.upgrade() {
                    let _ = outgoing.try_send(bytes);
                }
            }
        }
        None => tracing::warn!(
            server,
            "child wrote a JSON value that is not JSON-RPC; ignoring it"
        ),
    }
}
