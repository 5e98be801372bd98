//! The Unix socket API: JSON-RPC 2.0, one JSON object per line, MCP-compatible methods plus `catalog/*`.

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::watch;

use crate::api_kinds;
use crate::lines::{self, Line};
use crate::protocol::{
    self as wire, encode_cursor, encode_index_cursor, encode_search_cursor, parse_params,
    CacheNote, CatalogChanged, CatalogChanges, CatalogList, CatalogRefresh, CatalogResource,
    CatalogSearch, CatalogStatus, CatalogWatch, CheckedRequest, ErrorData, ErrorObject,
    IncomingRequest, Initialize, InvalidParams, ListResources, ListTemplates, Method,
    NotificationMessage, Ping, ReadResource, ReadResourceResult, ResourcesListChanged, Response,
    BUSY, DEFAULT_CHANGES_LIMIT, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, MAX_LINE_BYTES,
    METHOD_NOT_FOUND, PAGE_SIZE, PARSE_ERROR, RESOURCE_NOT_FOUND, SEARCH_TIMED_OUT,
};
use crate::redact;
use crate::search::{SearchError, SearchIndex, SearchQuery};
use crate::search_gate::SearchGate;
use crate::session::ReadError;
use crate::store::{self, CatalogRow, ListingRow, Store, StoreError};
use crate::supervisor::{RefreshOutcome, Supervisor};

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
    /// The derived search index; `None` when it could not be opened (SQLite answers).
    pub search_index: Option<Arc<SearchIndex>>,
    /// Admits `catalog/search` calls: a bounded number at once, a bounded queue, a deadline.
    pub search_gate: SearchGate,
    /// The most connections served at once; more are refused at accept.
    pub max_clients: usize,
    /// Connections refused at accept, and the log of refusals (once per interval).
    pub refused_clients: AtomicU64,
    pub refusal_log: Mutex<IntervalLog>,
}

/// How often a repeated condition (refused clients, failing accepts) is logged at most.
const REPEATED_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// The first and the longest pause after a failed accept (such as EMFILE, out of descriptors).
const ACCEPT_RETRY_FIRST: Duration = Duration::from_millis(50);
const ACCEPT_RETRY_MAX: Duration = Duration::from_secs(2);

/// Logs a repeated event at most once per interval, with how many happened since the last line.
#[derive(Debug)]
pub struct IntervalLog {
    interval: Duration,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl IntervalLog {
    pub fn new(interval: Duration) -> IntervalLog {
        IntervalLog {
            interval,
            last_logged: None,
            unlogged: 0,
        }
    }

    /// Counts one event; `Some(count)` when it is time to log, with the events since the last line.
    pub fn record(&mut self) -> Option<u64> {
        self.unlogged += 1;
        let due = self
            .last_logged
            .map_or(true, |last| last.elapsed() >= self.interval);
        if !due {
            return None;
        }
        self.last_logged = Some(Instant::now());
        Some(std::mem::take(&mut self.unlogged))
    }
}

impl Default for IntervalLog {
    fn default() -> Self {
        IntervalLog::new(REPEATED_LOG_INTERVAL)
    }
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
    let mut accept_retry = ACCEPT_RETRY_FIRST;
    let mut accept_failures = IntervalLog::default();
    loop {
        tokio::select! {
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
fn refuse_client(stream: &UnixStream, context: &ApiContext) {
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

/// What one connection has asked for (on the HTTP face: one request, or one session).
#[derive(Default)]
pub(crate) struct ConnectionState {
    /// The client sent `initialize`: it speaks MCP and expects `list_changed` notifications.
    /// Plain JSON-RPC clients (the CLI, socat) never get unasked-for lines.
    mcp_client: bool,
    /// After `catalog/watch`: the last change feed sequence number sent to this client.
    watching: Option<i64>,
    /// This client's share of the search gate (its recent search time).
    search_client: crate::search_gate::SearchClient,
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
                let response = Response::failure(
                    Value::Null,
                    ErrorObject::new(
                        INVALID_REQUEST,
                        format!(
                            "request line longer than {MAX_LINE_BYTES} bytes; closing the connection"
                        ),
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
        let notification = NotificationMessage::new::<ResourcesListChanged>(None);
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
        let more = page.more;
        let changes = changes_result(page);
        let notification = NotificationMessage::new::<CatalogChanged>(Some(&changes));
        write_message(writer, &notification).await?;
        state.watching = Some(last);
        if !more {
            return Ok(());
        }
    }
    Ok(())
}

/// Writes one message; the one choke point every answer and notification passes, so no
/// configured secret a server echoed (into an error, a walk failure, a read) reaches a client.
async fn write_message(writer: &mut OwnedWriteHalf, message: &impl Serialize) -> io::Result<()> {
    let text = serde_json::to_string(message).map_err(io::Error::other)?;
    let mut bytes = redact::scrub(&text).into_owned().into_bytes();
    bytes.push(b'\n');
    writer.write_all(&bytes).await
}

fn invalid_params(error: InvalidParams) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, error.0)
}

fn internal(error: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, error.to_string())
}

/// Handles one request line; `None` for notifications, which get no answer.
async fn handle_line(
    line: &[u8],
    context: &ApiContext,
    state: &mut ConnectionState,
) -> Option<Response> {
    let message: Value = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(error) => {
            return Some(Response::failure(
                Value::Null,
                ErrorObject::new(PARSE_ERROR, format!("parse error: {error}")),
            ))
        }
    };
    // Anything but an object (an array, a number) is not a request: checked like one with
    // every field missing.
    let request = match IncomingRequest::deserialize(message) {
        Ok(request) => request.check(),
        Err(_) => IncomingRequest::default().check(),
    };
    match request {
        Ok(request) => answer_request(request, context, state).await,
        Err(response) => Some(*response),
    }
}

/// Answers one checked request through `dispatch`: the socket and the HTTP face both come
/// here. `None` for notifications, which get no answer.
pub(crate) async fn answer_request(
    request: CheckedRequest,
    context: &ApiContext,
    state: &mut ConnectionState,
) -> Option<Response> {
    // Notifications (such as notifications/initialized) need no answer.
    let id = request.id?;
    let outcome = match request.params {
        params @ (Value::Null | Value::Object(_)) => {
            // The search gate shares its slots fairly between the clients it knows.
            let client = state.search_client.clone();
            crate::search_gate::CURRENT_CLIENT
                .scope(client, dispatch(&request.method, params, context, state))
                .await
        }
        _ => Err(ErrorObject::new(INVALID_PARAMS, "params must be an object")),
    };
    Some(match outcome {
        Ok(result) => Response::success(id, result),
        Err(error) => Response::failure(id, error),
    })
}

/// `M`'s params, or `-32602` naming the field that does not fit.
fn params<M: Method>(params: Value) -> Result<M::Params, ErrorObject> {
    parse_params(params).map_err(invalid_params)
}

/// `M`'s result as the JSON the answer carries.
fn answer<M: Method>(result: M::Result) -> Result<Value, ErrorObject> {
    serde_json::to_value(result).map_err(internal)
}

async fn dispatch(
    method: &str,
    raw: Value,
    context: &ApiContext,
    state: &mut ConnectionState,
) -> Result<Value, ErrorObject> {
    match method {
        Initialize::NAME => {
            let params = params::<Initialize>(raw)?;
            state.mcp_client = true;
            answer::<Initialize>(initialize(params))
        }
        Ping::NAME => {
            params::<Ping>(raw)?;
            answer::<Ping>(wire::Empty {})
        }
        ListResources::NAME => {
            let after = params::<ListResources>(raw)?
                .after()
                .map_err(invalid_params)?;
            let (rows, more) = context
                .store
                .list_resources(after, PAGE_SIZE)
                .await
                .map_err(internal)?;
            answer::<ListResources>(resources_page(rows, more).map_err(internal)?)
        }
        ListTemplates::NAME => {
            let after = params::<ListTemplates>(raw)?
                .after()
                .map_err(invalid_params)?;
            let (rows, more) = context
                .store
                .list_templates(after, PAGE_SIZE)
                .await
                .map_err(internal)?;
            answer::<ListTemplates>(templates_page(rows, more).map_err(internal)?)
        }
        ReadResource::NAME => {
            let uri = params::<ReadResource>(raw)?.uri;
            answer::<ReadResource>(read_resource(&uri, context).await?)
        }
        CatalogResource::NAME => {
            let uri = params::<CatalogResource>(raw)?.uri;
            let listings = context.store.listings(&uri).await.map_err(internal)?;
            let details = resource_details(listings).map_err(internal)?;
            answer::<CatalogResource>(details.ok_or_else(|| not_listed(&uri))?)
        }
        CatalogStatus::NAME => {
            params::<CatalogStatus>(raw)?;
            let mut status = answer::<CatalogStatus>(status(context).await?)?;
            redact::scrub_json(&mut status);
            // Server-supplied texts are bounded where they are stored; this bounds the rest
            // (a session's live hints), so the answer stays small whatever a server sent.
            redact::bound_json_strings(&mut status);
            Ok(status)
        }
        CatalogSearch::NAME => {
            let params = params::<CatalogSearch>(raw)?;
            // Every answer counts, refusals and timeouts too: they are latency a client saw.
            let started = std::time::Instant::now();
            if params.searches_entries() {
                let search = params.into_kinds_request().map_err(invalid_params)?;
                let outcome = api_kinds::search_kinds(search, context).await;
                crate::metrics::observe_search(started.elapsed());
                return answer::<CatalogSearch>(outcome?);
            }
            let index_cursor = params.cursor.as_deref().map(wire::is_index_cursor);
            let request = params.into_request().map_err(invalid_params)?;
            // A cursor stays with the engine that made it: the two rank differently.
            let outcome = if index_cursor == Some(false) {
                gated_search(request, context)
                    .await
                    .map(|(hits, next)| (hits, next, None))
            } else {
                resource_search(request, context)
                    .await
                    .map(|(hits, next, origin)| (hits, next, Some(origin)))
            };
            crate::metrics::observe_search(started.elapsed());
            let (hits, next, origin) = outcome?;
            let mut result = search_result(hits, next);
            if let Some(origin) = origin {
                if origin.engine == Some(wire::SearchEngine::Index) {
                    result.next_cursor = next.map(encode_index_cursor);
                }
                result.engine = origin.engine;
                result.match_mode = origin.match_mode;
                result.note = origin.note;
            }
            answer::<CatalogSearch>(result)
        }
        CatalogChanges::NAME => {
            let params = params::<CatalogChanges>(raw)?;
            let (since, limit) = params.checked().map_err(invalid_params)?;
            let page = match params.kinds {
                Some(kinds) => context.store.changes_of_kinds(since, limit, kinds).await,
                None => context.store.changes_since(since, limit).await,
            }
            .map_err(internal)?;
            answer::<CatalogChanges>(changes_result(page))
        }
        CatalogWatch::NAME => {
            let since = params::<CatalogWatch>(raw)?
                .checked_since()
                .map_err(invalid_params)?;
            let latest_seq = context.store.latest_change_seq().await.map_err(internal)?;
            state.watching = Some(since.unwrap_or(latest_seq));
            answer::<CatalogWatch>(wire::WatchResult { latest_seq })
        }
        CatalogRefresh::NAME => {
            let params = params::<CatalogRefresh>(raw)?;
            answer::<CatalogRefresh>(refresh(params, context).await?)
        }
        wire::CatalogTools::NAME => {
            let params = params::<wire::CatalogTools>(raw)?;
            let (tools, next_cursor) =
                api_kinds::entries_page(&context.store, wire::Kind::Tool, params).await?;
            answer::<wire::CatalogTools>(wire::ListToolsResult { tools, next_cursor })
        }
        wire::CatalogPrompts::NAME => {
            let params = params::<wire::CatalogPrompts>(raw)?;
            let (prompts, next_cursor) =
                api_kinds::entries_page(&context.store, wire::Kind::Prompt, params).await?;
            answer::<wire::CatalogPrompts>(wire::ListPromptsResult {
                prompts,
                next_cursor,
            })
        }
        wire::CatalogTool::NAME => {
            let params = params::<wire::CatalogTool>(raw)?;
            answer::<wire::CatalogTool>(
                api_kinds::entry_details(&context.store, wire::Kind::Tool, params).await?,
            )
        }
        wire::CatalogPrompt::NAME => {
            let params = params::<wire::CatalogPrompt>(raw)?;
            answer::<wire::CatalogPrompt>(
                api_kinds::entry_details(&context.store, wire::Kind::Prompt, params).await?,
            )
        }
        wire::CatalogAccept::NAME => {
            let params = params::<wire::CatalogAccept>(raw)?;
            answer::<wire::CatalogAccept>(api_kinds::accept(&context.store, params).await?)
        }
        wire::CatalogDrift::NAME => {
            let params = params::<wire::CatalogDrift>(raw)?;
            answer::<wire::CatalogDrift>(api_kinds::drift(&context.store, params).await?)
        }
        wire::ListTools::NAME => {
            params::<wire::ListTools>(raw)?;
            answer::<wire::ListTools>(wire::ListMirrorToolsResult {
                tools: wire::mirror_tools(),
            })
        }
        wire::CallTool::NAME => {
            let params = params::<wire::CallTool>(raw)?;
            answer::<wire::CallTool>(api_kinds::call_tool(context, params).await?)
        }
        CatalogList::NAME => {
            let params = params::<CatalogList>(raw)?;
            answer::<CatalogList>(server_list(params, context).await?)
        }
        _ => Err(ErrorObject::new(
            METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )),
    }
}

/// Runs a search once the gate admits it, cancelled at the permit's deadline.
pub(crate) async fn gated_search(
    mut request: store::SearchRequest,
    context: &ApiContext,
) -> Result<(Vec<store::SearchHit>, Option<usize>), ErrorObject> {
    let permit = context
        .search_gate
        .acquire()
        .await
        .map_err(|error| ErrorObject::new(BUSY, error.to_string()))?;
    request.deadline = Some(permit.deadline);
    context
        .store
        .search(request)
        .await
        .map_err(|error| match error {
            StoreError::InvalidQuery(_) => ErrorObject::new(INVALID_PARAMS, error.to_string()),
            StoreError::SearchTimedOut => {
                permit.timed_out();
                let limit = context.search_gate.limits().timeout;
                ErrorObject::new(
                    SEARCH_TIMED_OUT,
                    format!("the search ran longer than {limit:?} (search_timeout) and was cancelled; narrow the query"),
                )
            }
            other => internal(other),
        })
}

fn initialize(params: wire::InitializeParams) -> wire::InitializeResult {
    let version = params
        .protocol_version
        .filter(|version| wire::PROTOCOL_VERSIONS.contains(&version.as_str()))
        .unwrap_or_else(|| wire::PROTOCOL_VERSION.to_string());
    wire::InitializeResult {
        protocol_version: version,
        capabilities: wire::ServerCapabilities::of_the_mirror(),
        server_info: wire::Implementation {
            name: wire::SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        instructions: wire::INSTRUCTIONS.into(),
    }
}

async fn refresh(
    params: wire::RefreshParams,
    context: &ApiContext,
) -> Result<wire::RefreshResult, ErrorObject> {
    let server = params.server.as_deref();
    let outcomes = context
        .supervisor
        .refresh(server, params.wait.unwrap_or(false))
        .await
        .ok_or_else(|| {
            let name = server.unwrap_or("");
            ErrorObject::new(INVALID_PARAMS, format!("no server named {name}")).with_data(
                ErrorData {
                    not_found: Some("server".into()),
                    server: Some(name.into()),
                    ..ErrorData::default()
                },
            )
        })?;
    let servers = outcomes
        .into_iter()
        .map(|(name, outcome)| {
            let outcome = match outcome {
                RefreshOutcome::Queued => wire::RefreshOutcome::queued(),
                RefreshOutcome::Walked(Ok(summary)) => wire::RefreshOutcome::settled(
                    refresh_state(summary.state),
                    swap_summary(summary.swap),
                    summary.report.pages,
                    summary.report.duration_ms,
                ),
                // A server's words, bounded (secrets go at the answer's choke point).
                RefreshOutcome::Walked(Err(error)) => {
                    wire::RefreshOutcome::failed(redact::truncate_server_text(&error).into_owned())
                }
            };
            (name, outcome)
        })
        .collect();
    Ok(wire::RefreshResult { servers })
}

pub(crate) fn not_listed(uri: &str) -> ErrorObject {
    ErrorObject::new(
        RESOURCE_NOT_FOUND,
        format!("resource not found: no mirrored server lists {uri}"),
    )
    .with_data(ErrorData {
        uri: Some(uri.into()),
        ..ErrorData::default()
    })
}

/// Reads through the server that wins `uri` in the merged catalog; when that server cannot
/// be reached and its content cache has the URI, serves the cached contents instead.
async fn read_resource(uri: &str, context: &ApiContext) -> Result<ReadResourceResult, ErrorObject> {
    let target = read_target_or_template(uri, context).await?;
    let server = target.server.as_str();
    match context.supervisor.read(server, uri).await {
        Ok(answer) => {
            let mut result: ReadResourceResult =
                serde_json::from_value(answer).map_err(|error| {
                    internal(format!(
                        "server {server} answered resources/read with an invalid result: {error}"
                    ))
                })?;
            if let Some(limit) = target.read_cache_bytes {
                let text = serde_json::to_string(&result).map_err(internal)?;
                context.store.cache_contents(server, uri, text, limit);
            }
            result.meta.origin = Some(server.to_string());
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
                // An entry that no longer parses is as good as none.
                let cached = cached.and_then(|(text, stored_at_ms)| {
                    let result = serde_json::from_str::<ReadResourceResult>(&text).ok()?;
                    Some((result, stored_at_ms))
                });
                if let Some((mut result, stored_at_ms)) = cached {
                    result.meta.origin = Some(server.to_string());
                    result.meta.cache = Some(CacheNote {
                        stored_at_ms,
                        reason: redact::scrub_server_text(&error.to_string()),
                    });
                    return Ok(result);
                }
            }
            // The server's own answer, such as its "resource not found", passes through.
            let code = match error {
                ReadError::Server { code, .. } => code,
                ReadError::Offline { .. } | ReadError::Failed { .. } => INTERNAL_ERROR,
            };
            Err(
                ErrorObject::new(code, redact::scrub_server_text(&error.to_string())).with_data(
                    ErrorData {
                        server: Some(server.into()),
                        uri: Some(uri.into()),
                        offline: Some(unreachable),
                        ..ErrorData::default()
                    },
                ),
            )
        }
    }
}

pub(crate) async fn status(context: &ApiContext) -> Result<wire::StatusResult, ErrorObject> {
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
    let daemon = wire::DaemonStatus {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        uptime_ms: context.started.elapsed().as_millis() as u64,
        database: context.store.path().to_path_buf(),
        database_bytes,
        socket: context.socket_path.clone(),
        config: context.config_path.clone(),
        clients: context.clients.load(Ordering::Relaxed),
        resources,
        merged_resources: Some(
            context
                .store
                .merged_resource_count()
                .await
                .map_err(internal)?,
        ),
        change_seq,
        read_cache_bytes,
        config_loaded_at: config_load.loaded_at_ms,
        config_error: config_load.error,
        config_error_at: config_load.error_at_ms,
        database_error: context.store.database_error(),
        socket_limits: socket_activity(context),
        search_index: context.search_index.as_ref().map(|index| index.status()),
    };
    let mut servers: Vec<wire::ServerStatus> = servers
        .into_iter()
        .map(|server| {
            let session = live.remove(&server.name);
            server_status(server, session)
        })
        .collect();
    crate::api_kinds::add_kind_status(&context.store, &mut servers).await?;
    Ok(wire::StatusResult { daemon, servers })
}

fn socket_activity(context: &ApiContext) -> wire::SocketActivity {
    let searches = context.search_gate.activity();
    wire::SocketActivity {
        max_clients: context.max_clients,
        clients_refused: context.refused_clients.load(Ordering::Relaxed),
        max_concurrent_searches: searches.max_concurrent,
        search_timeout_ms: context.search_gate.limits().timeout.as_millis() as u64,
        searches_running: searches.running,
        searches_waiting: searches.waiting,
        searches_peak: searches.peak_running,
        searches_refused: searches.refused_busy,
        searches_timed_out: searches.timed_out,
    }
}

// Shaping the store's rows into the protocol's results: the daemon and the CLI reading the
// database while no daemon runs answer through these alike.

/// A page of the merged catalog, with a cursor after its last URI when more follow.
pub fn resources_page(
    rows: Vec<CatalogRow>,
    more: bool,
) -> Result<wire::ListResourcesResult, serde_json::Error> {
    let next_cursor = next_cursor(&rows, more);
    let resources = rows
        .iter()
        .map(|row| wire::Resource::from_stored(&row.raw, Some(&row.server)))
        .collect::<Result<_, _>>()?;
    Ok(wire::ListResourcesResult {
        resources,
        next_cursor,
    })
}

pub fn templates_page(
    rows: Vec<CatalogRow>,
    more: bool,
) -> Result<wire::ListTemplatesResult, serde_json::Error> {
    let next_cursor = next_cursor(&rows, more);
    let resource_templates = rows
        .iter()
        .map(|row| wire::ResourceTemplate::from_stored(&row.raw, Some(&row.server)))
        .collect::<Result<_, _>>()?;
    Ok(wire::ListTemplatesResult {
        resource_templates,
        next_cursor,
    })
}

fn next_cursor(rows: &[CatalogRow], more: bool) -> Option<String> {
    match more {
        true => rows.last().map(|row| encode_cursor(&row.key)),
        false => None,
    }
}

/// The winner (first listing) with its origin, and every listing; `None` when there is none.
pub fn resource_details(
    listings: Vec<ListingRow>,
) -> Result<Option<wire::ResourceDetails>, serde_json::Error> {
    let Some(winner) = listings.first() else {
        return Ok(None);
    };
    let resource = wire::Resource::from_stored(&winner.raw, Some(&winner.server))?;
    let (server, stale, snapshot_at_ms) =
        (winner.server.clone(), winner.stale, winner.snapshot_at_ms);
    let listed_by = listings
        .into_iter()
        .map(|listing| {
            Ok(wire::Listing {
                resource: wire::Resource::from_stored(&listing.raw, None)?,
                server: listing.server,
                priority: listing.priority,
            })
        })
        .collect::<Result<_, serde_json::Error>>()?;
    Ok(Some(wire::ResourceDetails {
        server,
        resource,
        stale,
        snapshot_at_ms,
        listed_by,
    }))
}

/// How long a search waits for the index to apply a swap its caller may already have seen
/// (one committed before the search arrived) before SQLite answers instead.
const INDEX_CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Answers from the derived search index; `Ok(Err(why))` when it cannot answer for the
/// catalog as it stands (repairing, or behind a swap it has not applied yet in time).
async fn search_index(
    index: &Arc<SearchIndex>,
    context: &ApiContext,
    request: &store::SearchRequest,
) -> Result<Result<IndexAnswer, String>, ErrorObject> {
    let mut query = SearchQuery::new(request.query.clone(), request.limit);
    query.server = request.server.clone();
    query.mime_type = request.mime_type.clone();
    query.offset = request.offset;
    query.highlight = request.highlight.clone();
    // The same gate as SQLite's searches: a bounded number at once, each with a deadline.
    let mut permit = context
        .search_gate
        .acquire()
        .await
        .map_err(|error| ErrorObject::new(BUSY, error.to_string()))?;
    query.time_limit = permit.deadline.saturating_duration_since(Instant::now());
    // Usually one hop off the async threads: the newest resource generation a reader sees in
    // SQLite, then the search, if the index reflects it (and the in-memory version, which
    // moves on only after the commit that SQLite already shows).
    let wanted = context.store.catalog_version();
    let searched = {
        let (index, query) = (index.clone(), query.clone());
        context
            .store
            .with_resource_generation(move |generation| {
                if index.status().serves(wanted, generation) {
                    Ok(index.search(&query))
                } else {
                    Err(generation)
                }
            })
            .await
            .map_err(internal)?
    };
    let searched = match searched {
        Ok(searched) => searched,
        Err(generation) => {
            // Behind a swap the caller may already have seen: wait for the keeper to apply it
            // (without holding a slot), then search, or let SQLite answer.
            drop(permit);
            let mut status = index.watch();
            let caught_up = status.wait_for(|status| {
                status.serves(wanted, generation) || status.phase != crate::search::Phase::Ready
            });
            let _ = tokio::time::timeout(INDEX_CATCH_UP_WAIT, caught_up).await;
            let now = index.status();
            if !now.serves(wanted, generation) {
                let state = match now.phase {
                    crate::search::Phase::Ready => "catching up with the latest change".to_string(),
                    crate::search::Phase::Opening => "opening".to_string(),
                    crate::search::Phase::CatchingUp => "catching up".to_string(),
                    crate::search::Phase::Rebuilding { percent } => {
                        format!("rebuilding ({percent}%)")
                    }
                    crate::search::Phase::Failed => "unavailable (see the log)".to_string(),
                };
                return Ok(Err(format!(
                    "the search index is {state}; answered by SQLite full-text search"
                )));
            }
            permit = context
                .search_gate
                .acquire()
                .await
                .map_err(|error| ErrorObject::new(BUSY, error.to_string()))?;
            query.time_limit = permit.deadline.saturating_duration_since(Instant::now());
            let index = index.clone();
            tokio::task::spawn_blocking(move || index.search(&query))
                .await
                .map_err(internal)?
        }
    };
    let page = match searched {
        Ok(page) => page,
        Err(error @ SearchError::InvalidQuery(_)) => {
            return Err(ErrorObject::new(INVALID_PARAMS, error.to_string()))
        }
        Err(SearchError::TimedOut(_)) => {
            permit.timed_out();
            let limit = context.search_gate.limits().timeout;
            return Err(ErrorObject::new(
                SEARCH_TIMED_OUT,
                format!("the search ran longer than {limit:?} (search_timeout) and was cancelled; narrow the query"),
            ));
        }
        Err(error @ SearchError::Busy) => return Err(ErrorObject::new(BUSY, error.to_string())),
        // A damaged index must not cost an answer: SQLite has the same catalog.
        Err(error) => {
            tracing::warn!(%error, "the search index failed a search; SQLite answered");
            return Ok(Err(format!(
                "the search index failed ({error}); answered by SQLite full-text search"
            )));
        }
    };
    let hits = page
        .hits
        .into_iter()
        .map(|hit| store::SearchHit {
            server: hit.server,
            uri: hit.uri,
            name: hit.name,
            title: hit.title,
            mime_type: hit.mime_type,
            description: hit.description,
            score: f64::from(hit.score),
            snippet: hit.snippet,
        })
        .collect();
    Ok(Ok(IndexAnswer {
        hits,
        next: page.next_offset,
        mode: page.mode,
    }))
}

/// A page of resources from the derived search index.
pub struct IndexAnswer {
    pub hits: Vec<store::SearchHit>,
    pub next: Option<usize>,
    pub mode: crate::search::MatchMode,
}

/// The resource part of a search: from the derived index when it can answer for the catalog
/// as it stands, else from SQLite's FTS5 (with the reason in the answer's `note`). The result
/// says which engine answered; `next_cursor` is left to the caller.
pub async fn resource_search(
    request: store::SearchRequest,
    context: &ApiContext,
) -> Result<(Vec<store::SearchHit>, Option<usize>, wire::SearchResult), ErrorObject> {
    let mut origin = wire::SearchResult {
        results: Vec::new(),
        next_cursor: None,
        engine: Some(wire::SearchEngine::Sqlite),
        match_mode: None,
        note: None,
    };
    if let (Some(index), false) = (&context.search_index, request.raw) {
        match search_index(index, context, &request).await? {
            Ok(answer) => {
                origin.engine = Some(wire::SearchEngine::Index);
                origin.match_mode = Some(answer.mode);
                return Ok((answer.hits, answer.next, origin));
            }
            Err(why) => origin.note = Some(why),
        }
    }
    let (hits, next) = gated_search(request, context).await?;
    Ok((hits, next, origin))
}

pub fn search_result(hits: Vec<store::SearchHit>, next: Option<usize>) -> wire::SearchResult {
    wire::SearchResult {
        results: hits
            .into_iter()
            .map(|hit| wire::SearchHit {
                meta: Some(serde_json::json!({ wire::ORIGIN_META_KEY: hit.server })),
                kind: wire::Kind::Resource,
                server: hit.server,
                uri: Some(hit.uri),
                name: hit.name,
                title: hit.title,
                mime_type: hit.mime_type,
                description: hit.description,
                score: hit.score,
                snippet: hit.snippet,
            })
            .collect(),
        next_cursor: next.map(encode_search_cursor),
        engine: Some(wire::SearchEngine::Sqlite),
        match_mode: None,
        note: None,
    }
}

fn changes_result(page: store::ChangePage) -> wire::ChangesResult {
    wire::ChangesResult {
        changes: page
            .changes
            .into_iter()
            .map(|change| wire::Change {
                seq: change.seq,
                at_ms: change.at_ms,
                server: change.server,
                kind: change.kind,
                uri: change.uri,
                count: change.count,
                entry_kind: change.entry_kind,
                name: change.name,
                fields: change.fields,
            })
            .collect(),
        latest_seq: page.latest_seq,
        truncated: page.truncated,
        more: page.more,
    }
}

fn refresh_state(state: crate::session::SettledState) -> wire::RefreshState {
    match state {
        crate::session::SettledState::Synced => wire::RefreshState::Synced,
        crate::session::SettledState::NoResources => wire::RefreshState::NoResources,
    }
}

/// The server a read of `uri` goes to: the one that wins the URI in the merged catalog, else
/// (a URI no server lists) the one whose mirrored template matches it, by the same priority.
async fn read_target_or_template(
    uri: &str,
    context: &ApiContext,
) -> Result<store::ReadTarget, ErrorObject> {
    if let Some(target) = context.store.read_target(uri).await.map_err(internal)? {
        return Ok(target);
    }
    let template = context
        .store
        .template_target(uri)
        .await
        .map_err(internal)?
        .ok_or_else(|| not_listed(uri))?;
    Ok(store::ReadTarget {
        server: template.server,
        read_cache_bytes: template.read_cache_bytes,
    })
}

/// The "no server named" error, as `catalog/refresh` and `catalog/list` answer it.
fn no_such_server(name: &str) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, format!("no server named {name}")).with_data(ErrorData {
        not_found: Some("server".into()),
        server: Some(name.into()),
        ..ErrorData::default()
    })
}

async fn server_list(
    params: wire::ServerListParams,
    context: &ApiContext,
) -> Result<wire::ServerListResult, ErrorObject> {
    let (after, limit) = params.checked().map_err(invalid_params)?;
    if !context
        .store
        .server_exists(&params.server)
        .await
        .map_err(internal)?
    {
        return Err(no_such_server(&params.server));
    }
    let (rows, more) = context
        .store
        .server_snapshot(&params.server, after, limit)
        .await
        .map_err(internal)?;
    server_list_result(params.server, rows, more).map_err(internal)
}

/// A page of one server's own snapshot, with a cursor after its last URI when more follow.
pub fn server_list_result(
    server: String,
    rows: Vec<store::SnapshotRow>,
    more: bool,
) -> Result<wire::ServerListResult, serde_json::Error> {
    let next_cursor = match more {
        true => rows.last().map(|row| encode_cursor(&row.uri)),
        false => None,
    };
    let resources = rows
        .into_iter()
        .map(|row| {
            Ok(wire::ServerListEntry {
                resource: wire::Resource::from_stored(&row.raw, Some(&server))?,
                won_by: row.won_by,
            })
        })
        .collect::<Result<_, serde_json::Error>>()?;
    Ok(wire::ServerListResult {
        server,
        resources,
        next_cursor,
    })
}

fn swap_summary(swap: store::SwapOutcome) -> wire::SwapSummary {
    wire::SwapSummary {
        added: swap.added,
        removed: swap.removed,
        changed: swap.changed,
        resources: swap.resources,
        templates: swap.templates,
    }
}

fn server_status(
    server: store::ServerStatus,
    live: Option<wire::LiveStatus>,
) -> wire::ServerStatus {
    wire::ServerStatus {
        name: server.name,
        priority: server.priority,
        transport: server.transport,
        state: server.state,
        protocol_version: server.protocol_version,
        server_info: server.server_info,
        resources: server.resources,
        templates: server.templates,
        stale: server.stale,
        snapshot_at_ms: server.snapshot_at_ms,
        connected_at_ms: server.connected_at_ms,
        retry_at_ms: server.retry_at_ms,
        last_walk: server.last_walk.map(|walk| wire::LastWalk {
            at_ms: walk.at_ms,
            duration_ms: walk.duration_ms,
            pages: walk.pages,
            added: walk.added,
            removed: walk.removed,
            changed: walk.changed,
            duplicates: walk.duplicates,
            skipped: walk.skipped,
        }),
        walks_ok: server.walks_ok,
        walks_failed: server.walks_failed,
        last_error: server.last_error,
        last_error_at_ms: server.last_error_at_ms,
        oversized_entries: server.oversized_entries,
        live,
        kinds: Default::default(),
    }
}
