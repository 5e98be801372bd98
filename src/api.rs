//! The Unix socket API: JSON-RPC 2.0, one JSON object per line, MCP-compatible methods plus `catalog/*`.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::watch;

use crate::lines::{self, Line};
use crate::mcp::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};
use crate::session::ReadError;
use crate::store::{
    decode_cursor, decode_search_cursor, encode_cursor, encode_search_cursor, SearchRequest, Store,
    StoreError, DEFAULT_HIGHLIGHT, ORIGIN_META_KEY,
};
use crate::supervisor::{RefreshOutcome, Supervisor};

/// The longest request line we accept; longer ones get an error and the connection closes.
pub const MAX_LINE_BYTES: usize = 1 << 20;
const PAGE_SIZE: usize = 500;
/// Search pages reach this deep at most; a cursor past it is not one we made.
const MAX_SEARCH_OFFSET: usize = 1_000_000;
const DEFAULT_SEARCH_LIMIT: usize = 20;
const MAX_SEARCH_LIMIT: usize = 1000;
const DEFAULT_CHANGES_LIMIT: usize = 1000;
const MAX_CHANGES_LIMIT: usize = 10_000;
/// The protocol version the socket offers MCP clients that ask for one it does not know.
const API_PROTOCOL_VERSION: &str = "2025-11-25";
/// The handshake-era versions the socket speaks; a client asking for one of them gets it.
const API_PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// MCP's "resource not found" (handshake era).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// The `_meta` key on a `resources/read` result served from the content cache.
pub const CACHE_META_KEY: &str = "io.mcp-mirror/cache";
/// The notification `catalog/watch` subscribers get for new change feed entries.
pub const CATALOG_CHANGED: &str = "notifications/catalog/changed";

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

/// Accepts connections until shutdown; each connection is served by its own task, so a slow
/// or stuck client holds up nobody but itself.
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

/// What one connection has asked for.
#[derive(Default)]
struct ConnectionState {
    /// The client sent `initialize`: it speaks MCP and expects `list_changed` notifications.
    /// Plain JSON-RPC clients (the CLI, socat) never get unasked-for lines.
    mcp_client: bool,
    /// After `catalog/watch`: the last change feed sequence number sent to this client.
    watching: Option<i64>,
}

async fn serve_connection(
    stream: UnixStream,
    context: &ApiContext,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let (read_half, mut write_half) = stream.into_split();
    let mut reader = BufReader::new(read_half);
    let mut line = Vec::new();
    let mut state = ConnectionState::default();
    let mut catalog_changes = context.store.subscribe();
    let mut changes_open = true;
    loop {
        let outcome = tokio::select! {
            outcome = lines::read_line(&mut reader, &mut line, MAX_LINE_BYTES) => outcome?,
            event = catalog_changes.recv(), if changes_open => {
                match event {
                    // A client that lagged behind gets one notification, like everyone else:
                    // list_changed carries nothing, and the feed itself lives in the database.
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        // Coalesce a burst of swaps into one notification.
                        loop {
                            match catalog_changes.try_recv() {
                                Ok(_) | Err(TryRecvError::Lagged(_)) => continue,
                                Err(TryRecvError::Empty) => break,
                                Err(TryRecvError::Closed) => {
                                    changes_open = false;
                                    break;
                                }
                            }
                        }
                        notify_catalog_changed(&mut state, &mut write_half, context).await?;
                    }
                    Err(RecvError::Closed) => changes_open = false,
                }
                continue;
            }
            _ = shutdown.changed() => return Ok(()),
        };
        let response = match outcome {
            Line::End => return Ok(()),
            Line::TooLong => {
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
            Line::Complete => {
                let blank = line.iter().all(u8::is_ascii_whitespace);
                let response = match blank {
                    true => None,
                    false => handle_line(&line, context, &mut state).await,
                };
                line.clear();
                response
            }
        };
        if let Some(response) = response {
            write_message(&mut write_half, &response).await?;
        }
        if state.watching.is_some() {
            // A new watcher that asked for changes `since` an older point gets them now,
            // after its response; later ones arrive as they are committed.
            send_watched_changes(&mut state, &mut write_half, context).await?;
        }
    }
}

/// Tells this client that the catalog changed, in whichever ways it asked for.
async fn notify_catalog_changed(
    state: &mut ConnectionState,
    writer: &mut OwnedWriteHalf,
    context: &ApiContext,
) -> io::Result<()> {
    if state.mcp_client {
        let notification =
            json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"});
        write_message(writer, &notification).await?;
    }
    if state.watching.is_some() {
        send_watched_changes(state, writer, context).await?;
    }
    Ok(())
}

/// Sends a watcher every change feed entry after the last one it got, in batches.
async fn send_watched_changes(
    state: &mut ConnectionState,
    writer: &mut OwnedWriteHalf,
    context: &ApiContext,
) -> io::Result<()> {
    while let Some(since) = state.watching {
        let page = match context
            .store
            .changes_since(Some(since), DEFAULT_CHANGES_LIMIT)
            .await
        {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(%error, "cannot read the change feed for a watcher");
                return Ok(());
            }
        };
        let Some(last) = page.changes.last().map(|change| change.seq) else {
            return Ok(());
        };
        let notification = json!({
            "jsonrpc": "2.0",
            "method": CATALOG_CHANGED,
            "params": page,
        });
        write_message(writer, &notification).await?;
        state.watching = Some(last);
        if !page.more {
            return Ok(());
        }
    }
    Ok(())
}

async fn write_message(writer: &mut OwnedWriteHalf, message: &Value) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
    bytes.push(b'\n');
    writer.write_all(&bytes).await
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A handler's failure: a JSON-RPC error code, message and optional data.
struct Failure {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl Failure {
    fn new(code: i64, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn with_data(mut self, data: Value) -> Failure {
        self.data = Some(data);
        self
    }
}

fn invalid_params(message: impl Into<String>) -> Failure {
    Failure::new(INVALID_PARAMS, message)
}

fn internal(error: impl std::fmt::Display) -> Failure {
    Failure::new(INTERNAL_ERROR, error.to_string())
}

/// Handles one request line; `None` for notifications, which get no answer.
async fn handle_line(
    line: &[u8],
    context: &ApiContext,
    state: &mut ConnectionState,
) -> Option<Value> {
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
        Value::Null | Value::Object(_) => dispatch(method, &params, context, state).await,
        _ => Err(invalid_params("params must be an object")),
    };
    Some(match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(failure) => {
            let mut response = error_response(id, failure.code, &failure.message);
            if let Some(data) = failure.data {
                response["error"]["data"] = data;
            }
            response
        }
    })
}

fn optional_string<'a>(params: &'a Value, key: &str) -> Result<Option<&'a str>, Failure> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(invalid_params(format!("`{key}` must be a string"))),
    }
}

fn required_string<'a>(params: &'a Value, key: &str) -> Result<&'a str, Failure> {
    optional_string(params, key)?.ok_or_else(|| invalid_params(format!("`{key}` is required")))
}

fn optional_bool(params: &Value, key: &str) -> Result<bool, Failure> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(_) => Err(invalid_params(format!("`{key}` must be true or false"))),
    }
}

/// A whole number of at least 1, capped at `max`; `default` when absent.
fn optional_limit(params: &Value, key: &str, default: usize, max: usize) -> Result<usize, Failure> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => match value.as_u64() {
            Some(limit) if limit >= 1 => Ok((limit.min(max as u64)) as usize),
            _ => Err(invalid_params(format!(
                "`{key}` must be a whole number of at least 1"
            ))),
        },
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

/// The page and, when more follow, a cursor after the last entry's `key` field.
fn keyset_page(items: Vec<Value>, more: bool, list_key: &str, key: &str) -> Value {
    let next = match more {
        true => items
            .last()
            .and_then(|item| item.get(key))
            .and_then(Value::as_str)
            .map(encode_cursor),
        false => None,
    };
    let mut result = json!({ list_key: items });
    if let Some(next) = next {
        result["nextCursor"] = Value::String(next);
    }
    result
}

async fn dispatch(
    method: &str,
    params: &Value,
    context: &ApiContext,
    state: &mut ConnectionState,
) -> Result<Value, Failure> {
    match method {
        "initialize" => {
            state.mcp_client = true;
            let requested = optional_string(params, "protocolVersion")?;
            let version = requested
                .filter(|version| API_PROTOCOL_VERSIONS.contains(version))
                .unwrap_or(API_PROTOCOL_VERSION);
            Ok(json!({
                "protocolVersion": version,
                "capabilities": {"resources": {"listChanged": true}},
                "serverInfo": {"name": "mcp-mirror", "version": env!("CARGO_PKG_VERSION")},
                "instructions": "A local mirror of the resource catalogs of the configured MCP servers.",
            }))
        }
        "ping" => Ok(json!({})),
        "resources/list" => {
            let after = page_cursor(params)?;
            let (resources, more) = context
                .store
                .list_resources(after, PAGE_SIZE)
                .await
                .map_err(internal)?;
            Ok(keyset_page(resources, more, "resources", "uri"))
        }
        "resources/templates/list" => {
            let after = page_cursor(params)?;
            let (templates, more) = context
                .store
                .list_templates(after, PAGE_SIZE)
                .await
                .map_err(internal)?;
            Ok(keyset_page(
                templates,
                more,
                "resourceTemplates",
                "uriTemplate",
            ))
        }
        "resources/read" => read_resource(required_string(params, "uri")?, context).await,
        "catalog/resource" => {
            let uri = required_string(params, "uri")?;
            context
                .store
                .resource_details(uri)
                .await
                .map_err(internal)?
                .ok_or_else(|| not_listed(uri))
        }
        "catalog/status" => status(context).await,
        "catalog/search" => search(params, context).await,
        "catalog/changes" => {
            let since = optional_seq(params)?;
            let limit = optional_limit(params, "limit", DEFAULT_CHANGES_LIMIT, MAX_CHANGES_LIMIT)?;
            let page = context
                .store
                .changes_since(since, limit)
                .await
                .map_err(internal)?;
            serde_json::to_value(page).map_err(internal)
        }
        "catalog/watch" => {
            let latest = context.store.latest_change_seq().await.map_err(internal)?;
            state.watching = Some(optional_seq(params)?.unwrap_or(latest));
            Ok(json!({ "latestSeq": latest }))
        }
        "catalog/refresh" => {
            let server = optional_string(params, "server")?;
            let wait = optional_bool(params, "wait")?;
            let outcomes = context
                .supervisor
                .refresh(server, wait)
                .await
                .ok_or_else(|| {
                    let name = server.unwrap_or("");
                    invalid_params(format!("no server named {name}"))
                        .with_data(json!({"notFound": "server", "server": name}))
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
        _ => Err(Failure::new(
            METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )),
    }
}

fn optional_seq(params: &Value) -> Result<Option<i64>, Failure> {
    match params.get("since") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .filter(|since| *since >= 0)
            .map(Some)
            .ok_or_else(|| invalid_params("`since` must be a sequence number (0 or more)")),
    }
}

fn not_listed(uri: &str) -> Failure {
    Failure::new(
        RESOURCE_NOT_FOUND,
        format!("resource not found: no mirrored server lists {uri}"),
    )
    .with_data(json!({ "uri": uri }))
}

/// Reads through the server that wins `uri` in the merged catalog; when that server cannot
/// be reached and its content cache has the URI, serves the cached contents instead.
async fn read_resource(uri: &str, context: &ApiContext) -> Result<Value, Failure> {
    let target = context
        .store
        .read_target(uri)
        .await
        .map_err(internal)?
        .ok_or_else(|| not_listed(uri))?;
    let server = target.server.as_str();
    match context.supervisor.read(server, uri).await {
        Ok(mut result) => {
            if let Some(limit) = target.read_cache_bytes {
                context.store.cache_contents(server, uri, &result, limit);
            }
            set_meta(&mut result, ORIGIN_META_KEY, json!(server));
            Ok(result)
        }
        Err(error) => {
            let unreachable = matches!(error, ReadError::Offline { .. } | ReadError::Failed { .. });
            if unreachable && target.read_cache_bytes.is_some() {
                let cached = context
                    .store
                    .cached_contents(server, uri)
                    .await
                    .map_err(internal)?;
                if let Some((mut result, stored_at)) = cached {
                    set_meta(&mut result, ORIGIN_META_KEY, json!(server));
                    let note = json!({"storedAtMs": stored_at, "reason": error.to_string()});
                    set_meta(&mut result, CACHE_META_KEY, note);
                    return Ok(result);
                }
            }
            // The server's own answer, such as its "resource not found", passes through.
            let code = match error {
                ReadError::Server { code, .. } => code,
                ReadError::Offline { .. } | ReadError::Failed { .. } => INTERNAL_ERROR,
            };
            Err(Failure::new(code, error.to_string())
                .with_data(json!({"server": server, "uri": uri, "offline": unreachable})))
        }
    }
}

/// Sets `_meta[key]` on a result object, creating `_meta` when needed.
fn set_meta(result: &mut Value, key: &str, value: Value) {
    let Value::Object(object) = result else {
        return;
    };
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(key.to_string(), value);
    }
}

async fn search(params: &Value, context: &ApiContext) -> Result<Value, Failure> {
    let query = required_string(params, "query")?;
    let mut request = SearchRequest::new(
        query,
        optional_limit(params, "limit", DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT)?,
    );
    request.server = optional_string(params, "server")?.map(str::to_string);
    request.mime_type = optional_string(params, "mimeType")?.map(str::to_string);
    request.raw = optional_bool(params, "raw")?;
    if let Some(cursor) = optional_string(params, "cursor")? {
        request.offset = decode_search_cursor(cursor)
            .filter(|offset| *offset <= MAX_SEARCH_OFFSET)
            .ok_or_else(|| invalid_params("invalid cursor"))?;
    }
    request.highlight = match params.get("highlight") {
        None | Some(Value::Null) => (DEFAULT_HIGHLIGHT.0.into(), DEFAULT_HIGHLIGHT.1.into()),
        Some(Value::Array(markers)) => match markers.as_slice() {
            [Value::String(open), Value::String(close)] => (open.clone(), close.clone()),
            _ => return Err(invalid_params("`highlight` must be two strings")),
        },
        Some(_) => return Err(invalid_params("`highlight` must be two strings")),
    };
    let (results, next) = context
        .store
        .search(request)
        .await
        .map_err(|error| match error {
            StoreError::InvalidQuery(_) => invalid_params(error.to_string()),
            other => internal(other),
        })?;
    let mut answer = json!({ "results": results });
    if let Some(next) = next {
        answer["nextCursor"] = Value::String(encode_search_cursor(next));
    }
    Ok(answer)
}

async fn status(context: &ApiContext) -> Result<Value, Failure> {
    let servers = context.store.status().await.map_err(internal)?;
    let mut live = context.supervisor.live_status().await;
    let database_bytes = std::fs::metadata(context.store.path())
        .map(|metadata| metadata.len())
        .ok();
    let resources: u64 = servers.iter().map(|server| server.resources).sum();
    let change_seq = context.store.latest_change_seq().await.map_err(internal)?;
    let read_cache_bytes = context.store.read_cache_bytes().await.map_err(internal)?;
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
            "changeSeq": change_seq,
            "readCacheBytes": read_cache_bytes,
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
