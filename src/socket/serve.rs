//! Binds the Unix socket (refusing a live one, replacing a stale one), records it, and serves its connections.

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};

use super::connection::serve_connection;
use crate::answer::{DaemonContext, IntervalLog};
use crate::protocol::{self as wire, ErrorObject, Response, BUSY};

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another mcp-mirror is already serving on {0}; stop it or choose another `socket` in daemon.toml")]
    InUse(PathBuf),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// Binds the socket at `path` with mode 0600, replacing a stale file left by a crashed daemon.
pub fn bind(path: &Path) -> Result<UnixListener, BindError> {
    let io_error = |action, source| BindError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|source| BindError::Io {
            action: "create the directory",
            path: parent.to_path_buf(),
            source,
        })?;
    }
    if let Ok(metadata) = std::fs::symlink_metadata(path) {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(BindError::InUse(path.to_path_buf()));
        }
        // Only a stale socket is ours to replace; anything else at that path is a mistake.
        if !std::os::unix::fs::FileTypeExt::is_socket(&metadata.file_type()) {
            return Err(BindError::Io {
                action: "replace",
                path: path.to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "it exists and is not a socket",
                ),
            });
        }
        std::fs::remove_file(path).map_err(|source| io_error("remove the stale socket", source))?;
    }
    let listener =
        UnixListener::bind(path).map_err(|source| io_error("bind the socket", source))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|source| io_error("set permissions on", source))?;
    Ok(listener)
}

/// Leaves the record beside the socket at `socket` that names the database this daemon
/// serves (owner-only, replaced atomically), so `--socket PATH` clients never fall back to
/// another database. It stays after shutdown: that is when clients need it.
pub fn record_socket_database(socket: &Path, database: &Path) -> io::Result<()> {
    let record = wire::SocketRecord {
        database: std::path::absolute(database)?,
        pid: std::process::id(),
    };
    let path = wire::socket_record_path(socket);
    let mut temporary = path.clone().into_os_string();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    let text = serde_json::to_vec(&record).map_err(io::Error::other)?;
    io::Write::write_all(&mut file, &text)?;
    std::fs::rename(&temporary, &path)
}

/// The first and the longest pause after a failed accept (such as EMFILE, out of descriptors).
const ACCEPT_RETRY_FIRST: Duration = Duration::from_millis(50);
const ACCEPT_RETRY_MAX: Duration = Duration::from_secs(2);

/// Accepts connections until shutdown; each connection is served by its own task, so a slow
/// or stuck client holds up nobody but itself.
///
/// `probes` are connections the daemon makes to itself (its readiness and watchdog checks):
/// this loop serves them like accepted ones, so an answer proves the loop and dispatch are
/// alive, but they do not come through the socket's file, whose owner and mode may keep the
/// daemon out (systemd creates a socket unit's file as root, `SocketMode=0600`, for a
/// `DynamicUser` service). They are not clients: never counted, never refused.
pub async fn serve(
    listener: UnixListener,
    context: Arc<DaemonContext>,
    mut probes: mpsc::Receiver<UnixStream>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut accept_retry = ACCEPT_RETRY_FIRST;
    let mut accept_failures = IntervalLog::default();
    loop {
        tokio::select! {
            Some(stream) = probes.recv() => {
                let context = context.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    let _ = serve_connection(stream, &context, shutdown).await;
                });
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    accept_retry = ACCEPT_RETRY_FIRST;
                    // Only this loop adds clients, so the check and the count cannot race.
                    if context.clients.load(Ordering::Acquire) >= context.max_clients {
                        refuse_client(&stream, &context);
                        continue;
                    }
                    context.clients.fetch_add(1, Ordering::AcqRel);
                    let context = context.clone();
                    let shutdown = shutdown.clone();
                    tokio::spawn(async move {
                        if let Err(error) = serve_connection(stream, &context, shutdown).await {
                            tracing::debug!(%error, "socket client connection ended with an error");
                        }
                        context.clients.fetch_sub(1, Ordering::AcqRel);
                    });
                }
                Err(error) => {
                    // Out of descriptors (EMFILE) and the like: wait longer each time instead
                    // of spinning, and say so once per interval.
                    if let Some(count) = accept_failures.record() {
                        tracing::warn!(%error, failures = count, retry_in_ms = accept_retry.as_millis() as u64, "accept failed on the socket");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(accept_retry) => {}
                        _ = shutdown.changed() => return,
                    }
                    accept_retry = (accept_retry * 2).min(ACCEPT_RETRY_MAX);
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Turns a client away at accept: one JSON-RPC error line, written without waiting (a client
/// that does not read loses it), then the connection closes.
fn refuse_client(stream: &UnixStream, context: &DaemonContext) {
    let max_clients = context.max_clients;
    let response = Response::failure(
        Value::Null,
        ErrorObject::new(
            BUSY,
            format!("busy: too many clients (max_clients = {max_clients}); try again later"),
        ),
    );
    if let Ok(mut line) = serde_json::to_vec(&response) {
        line.push(b'\n');
        let _ = stream.try_write(&line);
    }
    let total = context.refused_clients.fetch_add(1, Ordering::Relaxed) + 1;
    let due = context
        .refusal_log
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .record();
    if let Some(count) = due {
        tracing::warn!(
            max_clients,
            refused = count,
            refused_total = total,
            "refusing socket clients: max_clients connections are open"
        );
    }
}
