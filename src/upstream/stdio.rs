//! The stdio transport: a child process speaking newline-delimited JSON-RPC on stdin and stdout.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use super::rpc::{self, Incoming, PendingRequests};
use super::{EventSink, McpError, ServerEvent, MAX_MESSAGE_BYTES};
use crate::protocol::lines::{self, Line};

/// The longest stderr line we log; a child's stderr is free-form and may be noisy.
const STDERR_LINE_BYTES: usize = 16 << 10;

/// How long a child gets after stdin closes, and again after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Stderr lines kept from a first contact, to show if it fails, and how much of each.
const HELD_STDERR_LINES: usize = 20;
const HELD_STDERR_LINE_BYTES: usize = 2 << 10;

/// How long a failed first contact waits for the rest of a dying child's stderr.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

pub struct StdioConnection {
    server: String,
    /// Taken (closing the child's stdin) when the connection closes.
    outgoing: std::sync::Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    pending: Arc<PendingRequests>,
    child: tokio::sync::Mutex<Child>,
    /// The process group the child leads (its pid), for signalling its descendants too.
    process_group: Option<libc::pid_t>,
    closed: AtomicBool,
    stderr: Arc<StderrLog>,
}

/// The child's stderr as we log it: at DEBUG until the first contact is over (a server's
/// complaint about our `server/discover` probe is not news), at INFO after. The lines of a
/// first contact are held, so that if it fails they are shown after all.
struct StderrLog {
    server: String,
    quiet: AtomicBool,
    held: Mutex<VecDeque<String>>,
    /// Becomes true when the child's stderr reached its end.
    ended: watch::Sender<bool>,
}

impl StderrLog {
    fn line(&self, text: &str) {
        let text = crate::redact::scrub_server_text(text);
        let text = text.as_str();
        let server = &self.server;
        if !self.quiet.load(Ordering::Acquire) {
            tracing::info!(server = %server, "child stderr: {text}");
            return;
        }
        tracing::debug!(server = %server, "child stderr (first contact): {text}");
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if held.len() == HELD_STDERR_LINES {
            held.pop_front();
        }
        held.push_back(shorten_line(text, HELD_STDERR_LINE_BYTES));
    }
}

/// At most `limit` bytes of `text`, saying how much was left out.
fn shorten_line(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let kept = crate::protocol::cut_at_char_boundary(text, limit);
    format!("{kept}… ({} bytes more)", text.len() - kept.len())
}

impl StdioConnection {
    // Over 100 lines: the child's start (its process group and parent-death signal), its stdin
    // writer, stdout reader and stderr logger tasks, which share the channels made here.
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

        let stderr_log = Arc::new(StderrLog {
            server: server.to_string(),
            quiet: AtomicBool::new(true),
            held: Mutex::new(VecDeque::new()),
            ended: watch::channel(false).0,
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

        let log = stderr_log.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match lines::read_line(&mut reader, &mut line, STDERR_LINE_BYTES).await {
                    Ok(Line::Complete) => log.line(String::from_utf8_lossy(&line).trim_end()),
                    Ok(Line::TooLong) => log.line(&format!(
                        "(a line over {STDERR_LINE_BYTES} bytes, not shown)"
                    )),
                    Ok(Line::End) | Err(_) => break,
                }
            }
            log.ended.send_replace(true);
        });

        Ok(StdioConnection {
            server: server.to_string(),
            outgoing: std::sync::Mutex::new(Some(outgoing)),
            pending,
            process_group: child.id().map(|pid| pid as libc::pid_t),
            child: tokio::sync::Mutex::new(child),
            closed: AtomicBool::new(false),
            stderr: stderr_log,
        })
    }

    /// The first contact succeeded: the child's stderr is logged at INFO from now on.
    pub fn first_contact_done(&self) {
        self.stderr.quiet.store(false, Ordering::Release);
        self.stderr
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }

    /// The first contact failed: shows at INFO what the child wrote to stderr meanwhile
    /// (waiting briefly for the rest of it when the child is gone), since it may say why.
    pub async fn report_first_contact_stderr(&self) {
        let mut ended = self.stderr.ended.subscribe();
        let _ = tokio::time::timeout(STDERR_DRAIN, ended.wait_for(|ended| *ended)).await;
        self.stderr.quiet.store(false, Ordering::Release);
        let held = std::mem::take(
            &mut *self
                .stderr
                .held
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for line in held {
            tracing::info!(server = %self.server, "child stderr before the failed first contact: {line}");
        }
    }

    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<rpc::RawResult, McpError> {
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
    let incoming = match rpc::parse_message(line) {
        Ok(incoming) => incoming,
        Err(error) => {
            tracing::warn!(server, %error, "child wrote a line that is not JSON; ignoring it");
            return;
        }
    };
    match incoming {
        Some(Incoming::Response { id, outcome }) => {
            if !pending.complete(&id, outcome) {
                tracing::debug!(server, %id, "response for a request nobody waits for");
            }
        }
        Some(Incoming::Notification { method, params }) => {
            if let Some(id) = rpc::cancelled_request(&method, &params) {
                pending.complete(id, Err(rpc::cancelled_error()));
            }
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
