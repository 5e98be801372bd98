//! The Unix socket API: JSON-RPC 2.0, one JSON object per line, MCP-compatible methods plus `catalog/*`.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use crate::mcp::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};
use crate::store::{decode_cursor, encode_cursor, SearchFilters, Store};
use crate::supervisor::{RefreshOutcome, Supervisor};

/// The longest request line we accept; longer ones get an error and the connection closes.
pub const MAX_LINE_BYTES: usize = 1 << 20;
const PAGE_SIZE: usize = 500;
const DEFAULT_SEARCH_LIMIT: usize = 20;
const MAX_SEARCH_LIMIT: usize = 1000;
/// The protocol version the socket speaks to MCP clients.
const API_PROTOCOL_VERSION: &str = "2025-11-25";

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
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(BindError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(|source| io_error("remove the stale socket", source))?;
    }
    let listener =
        UnixListener::bind(path).map_err(|source| io_error("bind the socket", source))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|source| io_error("set permissions on", source))?;
    Ok(listener)
}

/// What request handlers need.
pub struct ApiContext {
    pub store: Store,
    pub supervisor: Arc<Supervisor>,
    pub socket_path: PathBuf,
    pub config_path: PathBuf,
    pub started: Instant,
    pub clients: AtomicUsize,
    /// When the configuration in force was loaded, and why the last reload was refused.
    pub config_load: std::sync::Mutex<ConfigLoad>,
}

/// The daemon's record of its configuration file, shown by `catalog/status`.
#[derive(Debug, Clone, Default)]
pub struct ConfigLoad {
    pub loaded_at_ms: i64,
    /// Set when the last reload was rejected (the previous configuration stays in force).
    pub error: Option<String>,
    pub error_at_ms: Option<i64>,
}

/// Accepts connections until shutdown; each connection is served by its own task.
pub async fn serve(
    listener: UnixListener,
    context: Arc<ApiContext>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let context = context.clone();
                    let shutdown = shutdown.clone();
                    tokio::spawn(async move {
                        context.clients.fetch_add(1, Ordering::Relaxed);
                        if let Err(error) = serve_connection(stream, &context, shutdown).await {
                            tracing::debug!(%error, "socket client connection ended with an error");
                        }
                        context.clients.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed on the socket");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Reads one line of at most `MAX_LINE_BYTES`; `Ok(None)` at end of stream.
async fn read_line(
    reader: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    line: &mut Vec<u8>,
) -> io::Result<Option<bool>> {
    line.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if line.is_empty() { None } else { Some(true) });
        }
        let (taken, done) = match available.iter().position(|&byte| byte == b'\n') {
            Some(newline) => (newline + 1, true),
            None => (available.len(), false),
        };
        if line.len() + taken > MAX_LINE_BYTES + 1 {
            reader.consume(taken);
            return Ok(Some(false));
        }
        line.extend_from_slice(&available[..taken]);
        reader.consume(taken);
        if done {
            return Ok(Some(true));
        }
    }
}

async fn serve_connection(
    stream: UnixStream,
    context: &ApiContext,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let (read_half, mut write_half) = stream.into_split();
    let mut reader = BufReader::new(read_half);
    let mut line = Vec::new();
    loop {
        let outcome = tokio::select! {
            outcome = read_line(&mut reader, &mut line) => outcome?,
            _ = shutdown.changed() => return Ok(()),
        };
        let response = match outcome {
            None => return Ok(()),
            Some(false) => {
                let response = error_response(
                    Value::Null,
                    INVALID_REQUEST,
                    &format!(
                        "request line longer than {MAX_LINE_BYTES} bytes; closing the connection"
                    ),
                );
                write_message(&mut write_half, &response).await?;
                return Ok(());
            }
            Some(true) => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                handle_line(&line, context).await
            }
        };
        if let Some(response) = response {
            write_message(&mut write_half, &response).await?;
        }
    }
}

async fn write_message(
    writer: &mut tokio::net::unix::OwnedWriteHalf,
    message: &Value,
) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
    bytes.push(b'\n');
    writer.write_all(&bytes).await
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A handler's failure: a JSON-RPC error code and message.
struct Failure(i64, String);

fn invalid_params(message: impl Into<String>) -> Failure {
    Failure(INVALID_PARAMS, message.into())
}

fn internal(error: impl std::fmt::Display) -> Failure {
    Failure(INTERNAL_ERROR, error.to_string())
}

/// Handles one request line; `None` for notifications, which get no answer.
async fn handle_line(line: &[u8], context: &ApiContext) -> Option<Value> {
    let message: Value = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(error) => {
            return Some(error_response(
                Value::Null,
                PARSE_ERROR,
                &format!("parse error: {error}"),
            ))
        }
    };
    let id = message.get("id").cloned();
    let valid_id = matches!(id, None | Some(Value::Number(_)) | Some(Value::String(_)));
    let method = message.get("method").and_then(Value::as_str);
    let (Some(method), true, Some("2.0")) = (
        method,
        valid_id,
        message.get("jsonrpc").and_then(Value::as_str),
    ) else {
        return Some(error_response(
            if valid_id { id.unwrap_or(Value::Null) } else { Value::Null },
            INVALID_REQUEST,
            "not a JSON-RPC 2.0 request (needs \"jsonrpc\": \"2.0\", a string \"method\" and a number or string \"id\")",
        ));
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let Some(id) = id else {
        // Notifications (such as notifications/initialized) need no answer.
        return None;
    };
    let outcome = match &params {
        Value::Null | Value::Object(_) => dispatch(method, &params, context).await,
        _ => Err(invalid_params("params must be an object")),
    };
    Some(match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(Failure(code, message)) => error_response(id, code, &message),
    })
}

fn optional_string<'a>(params: &'a Value, key: &str) -> Result<Option<&'a str>, Failure> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(invalid_params(format!("`{key}` must be a string"))),
    }
}

fn optional_bool(params: &Value, key: &str) -> Result<bool, Failure> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(_) => Err(invalid_params(format!("`{key}` must be true or false"))),
    }
}

fn page_cursor(params: &Value) -> Result<Option<String>, Failure> {
    match optional_string(params, "cursor")? {
        None => Ok(None),
        Some(cursor) => decode_cursor(cursor)
            .map(Some)
            .ok_or_else(|| invalid_params("invalid cursor")),
    }
}

async fn dispatch(method: &str, params: &Value, context: &ApiContext) -> Result<Value, Failure> {
    match method {
        "initialize" => Ok(json!({
            "protocolVersion": API_PROTOCOL_VERSION,
            "capabilities": {"resources": {"listChanged": true}},
            "serverInfo": {"name": "mcp-mirror", "version": env!("CARGO_PKG_VERSION")},
            "instructions": "A local mirror of the resource catalogs of the configured MCP servers.",
        })),
        "ping" => Ok(json!({})),
        "resources/list" => {
            let after = page_cursor(params)?;
            let (resources, more) = context
                .store
                .list_resources(after, PAGE_SIZE)
                .await
                .map_err(internal)?;
            let mut result = json!({ "resources": resources });
            if more {
                if let Some(last) = resources
                    .last()
                    .and_then(|resource| resource.get("uri"))
                    .and_then(Value::as_str)
                {
                    result["nextCursor"] = Value::String(encode_cursor(last));
                }
            }
            Ok(result)
        }
        "resources/templates/list" => {
            let after = page_cursor(params)?;
            let (templates, more) = context
                .store
                .list_templates(after, PAGE_SIZE)
                .await
                .map_err(internal)?;
            let mut result = json!({ "resourceTemplates": templates });
            if more {
                if let Some(last) = templates
                    .last()
                    .and_then(|template| template.get("uriTemplate"))
                    .and_then(Value::as_str)
                {
                    result["nextCursor"] = Value::String(encode_cursor(last));
                }
            }
            Ok(result)
        }
        "catalog/status" => status(context).await,
        "catalog/search" => {
            let query = optional_string(params, "query")?
                .ok_or_else(|| invalid_params("`query` is required"))?;
            let limit = match params.get("limit") {
                None | Some(Value::Null) => DEFAULT_SEARCH_LIMIT,
                Some(value) => match value.as_u64() {
                    Some(limit) if limit >= 1 => (limit as usize).min(MAX_SEARCH_LIMIT),
                    _ => {
                        return Err(invalid_params(
                            "`limit` must be a whole number of at least 1",
                        ))
                    }
                },
            };
            let filters = SearchFilters {
                server: optional_string(params, "server")?.map(str::to_string),
                mime_type: optional_string(params, "mimeType")?.map(str::to_string),
                raw: optional_bool(params, "raw")?,
            };
            let results = context
                .store
                .search(query.to_string(), filters, limit)
                .await
                .map_err(|error| match filters_error(&error.to_string()) {
                    true => invalid_params(format!("invalid full-text query: {error}")),
                    false => internal(error),
                })?;
            Ok(json!({ "results": results }))
        }
        "catalog/refresh" => {
            let server = optional_string(params, "server")?;
            let wait = optional_bool(params, "wait")?;
            let outcomes = context
                .supervisor
                .refresh(server, wait)
                .await
                .ok_or_else(|| {
                    invalid_params(format!("no server named {}", server.unwrap_or("")))
                })?;
            let mut servers = serde_json::Map::new();
            for (name, outcome) in outcomes {
                let entry = match outcome {
                    RefreshOutcome::Queued => json!({"queued": true}),
                    RefreshOutcome::Walked(Ok(summary)) => {
                        json!({"ok": true, "swap": summary.swap, "pages": summary.report.pages, "durationMs": summary.report.duration_ms})
                    }
                    RefreshOutcome::Walked(Err(error)) => json!({"ok": false, "error": error}),
                };
                servers.insert(name, entry);
            }
            Ok(json!({ "servers": servers }))
        }
        _ => Err(Failure(
            METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )),
    }
}

/// Raw FTS5 syntax errors are the caller's mistake, not ours.
fn filters_error(message: &str) -> bool {
    message.contains("fts5")
        || message.contains("syntax error")
        || message.contains("no such column")
}

async fn status(context: &ApiContext) -> Result<Value, Failure> {
    let servers = context.store.status().await.map_err(internal)?;
    let mut live = context.supervisor.live_status().await;
    let database_bytes = std::fs::metadata(context.store.path())
        .map(|metadata| metadata.len())
        .ok();
    let resources: u64 = servers.iter().map(|server| server.resources).sum();
    let config_load = context
        .config_load
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    let mut status = json!({
        "daemon": {
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "uptimeMs": context.started.elapsed().as_millis() as u64,
            "database": context.store.path(),
            "databaseBytes": database_bytes,
            "socket": context.socket_path,
            "config": context.config_path,
            "clients": context.clients.load(Ordering::Relaxed),
            "resources": resources,
            "configLoadedAt": config_load.loaded_at_ms,
            "configError": config_load.error,
            "configErrorAt": config_load.error_at_ms,
        },
        "servers": servers
            .iter()
            .map(|server| {
                let mut entry = serde_json::to_value(server).unwrap_or(Value::Null);
                entry["live"] = serde_json::to_value(live.remove(&server.name)).unwrap_or(Value::Null);
                entry
            })
            .collect::<Vec<_>>(),
    });
    crate::redact::scrub_json(&mut status);
    Ok(status)
}
