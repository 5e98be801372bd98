//! Streamable HTTP at `/mcp` (or `/mcp/{index}` with `--endpoints`), both eras:
//! handshake-era sessions with POST, the GET stream and DELETE; stateless
//! 2026-07-28 POSTs with header validation and `subscriptions/listen` streams.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tracing::debug;

use crate::catalog::{base64_decode, PageFault};
use crate::rpc::{error_message, parse_message, Incoming, RpcError};
use crate::server::{
    method_not_found, Era, Reply, Server, Session, SessionKind, LEGACY_VERSIONS,
    PROTOCOL_VERSION_KEY,
};
use crate::sse::{self, ListenStream, SessionStream};
use crate::EraChoice;

const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
const METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
const NAME_HEADER: HeaderName = HeaderName::from_static("mcp-name");
const LAST_EVENT_ID_HEADER: HeaderName = HeaderName::from_static("last-event-id");

static NEXT_POST_EVENT: AtomicU64 = AtomicU64::new(1);

/// Every endpoint of the process, indexed as in `/mcp/{index}`.
pub type Servers = Arc<Vec<Arc<Server>>>;

/// The single `/mcp` endpoint.
pub async fn single_endpoint(
    State(servers): State<Servers>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    mcp_endpoint(&servers[0], method, &headers, &body).await
}

/// One of the `/mcp/{index}` endpoints of `--endpoints`.
pub async fn indexed_endpoint(
    State(servers): State<Servers>,
    Path(index): Path<usize>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match servers.get(index) {
        Some(server) => mcp_endpoint(server, method, &headers, &body).await,
        None => (StatusCode::NOT_FOUND, "no such endpoint\n").into_response(),
    }
}

async fn mcp_endpoint(
    server: &Arc<Server>,
    method: Method,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if is_foreign_origin(headers) {
        return (StatusCode::FORBIDDEN, "foreign Origin refused\n").into_response();
    }
    let stateless_only = server.args.era == EraChoice::Modern;
    if method == Method::GET {
        server
            .stats
            .update(|counters| crate::stats::record_now(&mut counters.get_requests_at_ms));
    }
    if matches!(method, Method::GET | Method::POST) {
        if let Some(retry_after) = server.refuse_as_unavailable(method == Method::GET) {
            return unavailable(retry_after);
        }
    }
    match method {
        Method::POST => post_message(server, headers, body).await,
        Method::GET if !stateless_only && !server.args.no_get_stream => get_stream(server, headers),
        Method::DELETE if !stateless_only => delete_session(server, headers),
        _ => {
            let allow = if stateless_only {
                "POST"
            } else if server.args.no_get_stream {
                "POST, DELETE"
            } else {
                "GET, POST, DELETE"
            };
            (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, allow)]).into_response()
        }
    }
}

/// 503, with `Retry-After` in seconds when one is given (the `unavailable_*` faults).
fn unavailable(retry_after_secs: Option<u64>) -> Response {
    let mut response =
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable on purpose\n").into_response();
    if let Some(seconds) = retry_after_secs {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// Whether an `Origin` header names something other than this loopback server (DNS rebinding).
pub fn is_foreign_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let Ok(origin) = origin.to_str() else {
        return true;
    };
    let authority = origin
        .split_once("://")
        .map_or("", |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or("");
    let host = if authority.starts_with('[') {
        authority
            .split_once(']')
            .map_or(authority, |(host, _)| host)
            .trim_start_matches('[')
    } else {
        authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
    };
    !matches!(host, "127.0.0.1" | "localhost" | "::1")
}

pub fn json_response(status: u16, message: &Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = [(header::CONTENT_TYPE, "application/json")];
    (status, content_type, message.to_string()).into_response()
}

pub fn json_error(id: Value, error: &RpcError) -> Response {
    json_response(error.status, &error_message(id, error))
}

fn accept_header(headers: &HeaderMap) -> String {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
        .to_ascii_lowercase()
}

/// The session id header, if present and readable.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
}

async fn post_message(server: &Arc<Server>, headers: &HeaderMap, body: &[u8]) -> Response {
    if server.args.reflect_authorization {
        let seen = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        *server
            .last_authorization
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = seen;
    }
    let accept = accept_header(headers);
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        let message = "Accept must list both application/json and text/event-stream\n";
        return (StatusCode::NOT_ACCEPTABLE, message).into_response();
    }
    let incoming = match parse_message(body) {
        Ok(incoming) => incoming,
        Err((id, error)) => return json_error(id, &error),
    };
    let stateless_only = server.args.era == EraChoice::Modern;
    let session = session_id(headers).filter(|_| !stateless_only);
    match incoming {
        Incoming::Request { id, method, params } => {
            post_request(server, headers, session, id, method, params).await
        }
        Incoming::Notification { method, .. } => {
            if session.is_some_and(|session| server.session(session).is_none()) {
                return StatusCode::NOT_FOUND.into_response();
            }
            debug!(method, "notification");
            StatusCode::ACCEPTED.into_response()
        }
        Incoming::Response { id } => {
            if session.is_some_and(|session| server.session(session).is_none()) {
                return StatusCode::NOT_FOUND.into_response();
            }
            server.count_ping_answer(&id);
            StatusCode::ACCEPTED.into_response()
        }
    }
}

/// Routes a POSTed request to the handshake era (initialize, or a session id) or the modern one.
async fn post_request(
    server: &Arc<Server>,
    headers: &HeaderMap,
    session: Option<&str>,
    id: Value,
    method: String,
    params: Option<Value>,
) -> Response {
    if method == "initialize" {
        return initialize_session(server, id, params).await;
    }
    match (server.args.era, session) {
        (EraChoice::Modern, _) | (EraChoice::Both, None) => {
            modern_request(server, headers, id, &method, params).await
        }
        // A server that answers every unknown method serves them without a session too.
        (EraChoice::Legacy, None) if server.answers_unknown_methods() => {
            let reply = server.serve(id, &method, params, &Era::Legacy).await;
            render(server, reply, None)
        }
        (EraChoice::Legacy, None) => {
            // A handshake-only server knows nothing of the stateless methods; anything
            // else without a session is a client that skipped initialize.
            let error = if matches!(method.as_str(), "server/discover" | "subscriptions/listen") {
                method_not_found(&method, false)
            } else {
                RpcError::new(-32600, "Bad Request: missing Mcp-Session-Id header")
            };
            json_error(id, &error.with_status(400))
        }
        (_, Some(session)) => legacy_request(server, headers, session, id, &method, params).await,
    }
}

/// Creates a session for an `initialize` request and returns its id in `Mcp-Session-Id`.
async fn initialize_session(server: &Arc<Server>, id: Value, params: Option<Value>) -> Response {
    if server.args.era == EraChoice::Modern {
        // The server refuses it; no session is created for a refused handshake.
        let reply = server.serve(id, "initialize", params, &Era::Legacy).await;
        return render(server, reply, None);
    }
    let session = server.create_session(SessionKind::StreamableHttp);
    session.mark_initialized();
    let reply = server.serve(id, "initialize", params, &Era::Legacy).await;
    let mut response = render(server, reply, Some(&session));
    if let Ok(value) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

async fn legacy_request(
    server: &Arc<Server>,
    headers: &HeaderMap,
    session: &str,
    id: Value,
    method: &str,
    params: Option<Value>,
) -> Response {
    let Some(session) = server.session(session) else {
        let error = RpcError::new(-32001, "Session not found").with_status(404);
        return json_error(id, &error);
    };
    if let Some(version) = headers.get(PROTOCOL_VERSION_HEADER) {
        let version = version.to_str().unwrap_or_default();
        if !LEGACY_VERSIONS.contains(&version) {
            let error = RpcError::new(-32600, format!("unsupported protocol version {version:?}"))
                .with_status(400);
            return json_error(id, &error);
        }
    }
    let reply = server.serve(id, method, params, &Era::Legacy).await;
    render(server, reply, Some(&session))
}

async fn modern_request(
    server: &Arc<Server>,
    headers: &HeaderMap,
    id: Value,
    method: &str,
    params: Option<Value>,
) -> Response {
    if let Err(error) = check_modern_headers(headers, method, params.as_ref()) {
        return json_error(id, &error);
    }
    let era = match server.modern_era(params.as_ref()) {
        Ok(era) => era,
        Err(error) => return json_error(id, &error),
    };
    let reply = server.serve(id, method, params, &era).await;
    render(server, reply, None)
}

/// The 2026-07-28 request headers: `MCP-Protocol-Version` equal to the `_meta` version,
/// `Mcp-Method` equal to the method, `Mcp-Name` equal to the target name where required.
fn check_modern_headers(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Value>,
) -> Result<(), RpcError> {
    let header_text = |name: &HeaderName| -> Result<Option<&str>, RpcError> {
        match headers.get(name) {
            None => Ok(None),
            Some(value) => value.to_str().map(Some).map_err(|_| {
                RpcError::header_mismatch(format!("{name} header contains invalid characters"))
            }),
        }
    };
    let Some(version) = header_text(&PROTOCOL_VERSION_HEADER)? else {
        return Err(RpcError::header_mismatch(
            "missing required MCP-Protocol-Version header",
        ));
    };
    match header_text(&METHOD_HEADER)? {
        None => {
            return Err(RpcError::header_mismatch(
                "missing required Mcp-Method header",
            ))
        }
        Some(header_method) if header_method != method => {
            return Err(RpcError::header_mismatch(format!(
                "Mcp-Method header value '{header_method}' does not match body value '{method}'"
            )));
        }
        Some(_) => {}
    }
    let name_field = match method {
        "resources/read" => Some("uri"),
        "tools/call" | "prompts/get" => Some("name"),
        _ => None,
    };
    if let Some(field) = name_field {
        let body_name = params
            .and_then(|params| params.get(field))
            .and_then(Value::as_str);
        let Some(header_name) = header_text(&NAME_HEADER)? else {
            return Err(RpcError::header_mismatch(format!(
                "missing required Mcp-Name header for {method}"
            )));
        };
        let decoded = decode_header_value(header_name).ok_or_else(|| {
            RpcError::header_mismatch("Mcp-Name header is not valid =?base64?...?= encoding")
        })?;
        if Some(decoded.as_str()) != body_name {
            return Err(RpcError::header_mismatch(format!(
                "Mcp-Name header value '{decoded}' does not match body value '{}'",
                body_name.unwrap_or_default()
            )));
        }
    }
    let meta_version = params
        .and_then(|params| params.get("_meta"))
        .and_then(|meta| meta.get(PROTOCOL_VERSION_KEY))
        .and_then(Value::as_str);
    if let Some(meta_version) = meta_version {
        if meta_version != version {
            return Err(RpcError::header_mismatch(format!(
                "MCP-Protocol-Version header value '{version}' does not match body value \
                 '{meta_version}'"
            )));
        }
    }
    Ok(())
}

/// A header value, decoded from the `=?base64?...?=` sentinel form when it uses it.
fn decode_header_value(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => String::from_utf8(base64_decode(encoded)?).ok(),
        None => Some(value.to_owned()),
    }
}

/// Turns a reply into an HTTP response: JSON or a one-shot SSE body, a listen stream, or a fault.
fn render(server: &Arc<Server>, reply: Reply, session: Option<&Arc<Session>>) -> Response {
    match reply {
        Reply::Message { message, status } => {
            // Errors that carry an HTTP status go out as plain JSON.
            if !server.args.sse || status != 200 {
                return json_response(status, &message);
            }
            let notifications = session
                .map(|session| session.take_pending_post())
                .unwrap_or_default();
            server.count_list_changed(notifications.len());
            let event_id = format!("post-{}", NEXT_POST_EVENT.fetch_add(1, Ordering::Relaxed));
            let headers = [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ];
            let body = sse::post_body(&event_id, &notifications, &message);
            (StatusCode::OK, headers, body).into_response()
        }
        Reply::Listen { id, honoured } => {
            sse::streaming_response(ListenStream::open(Arc::clone(server), id, &honoured))
        }
        Reply::Fault(fault) => fault_response(fault, server.args.sse),
        // Only stdio exits; HTTP never produces this.
        Reply::Exit(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Renders a page fault: a connection cut part way, a 500, or a body that is not JSON.
fn fault_response(fault: PageFault, sse: bool) -> Response {
    let content_type = if sse {
        "text/event-stream"
    } else {
        "application/json"
    };
    match fault {
        PageFault::Drop => {
            let partial: &'static [u8] = if sse {
                b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":"
            } else {
                b"{\"jsonrpc\":\"2.0\",\"id\":"
            };
            // The pause lets the headers and the partial body reach the client before the cut.
            let chunks = futures_util::stream::unfold(0, move |step| async move {
                match step {
                    0 => Some((Ok(Bytes::from_static(partial)), 1)),
                    1 => {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        let cut =
                            std::io::Error::other("connection cut on purpose by drop_at_page");
                        Some((Err(cut), 2))
                    }
                    _ => None,
                }
            });
            let body = Body::from_stream(chunks);
            (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        PageFault::Http500 => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            "injected internal server error\n",
        )
            .into_response(),
        PageFault::Garbage => {
            let body = if sse {
                "event: message\ndata: <html>this is not JSON</html>\n\n"
            } else {
                "<html>this is not JSON</html>\n"
            };
            (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
        }
    }
}

/// `GET /mcp`: the session's server-to-client stream, resumable with `Last-Event-ID`.
fn get_stream(server: &Arc<Server>, headers: &HeaderMap) -> Response {
    if !accept_header(headers).contains("text/event-stream") {
        let message = "Accept must list text/event-stream\n";
        return (StatusCode::NOT_ACCEPTABLE, message).into_response();
    }
    let Some(session_id) = session_id(headers) else {
        let error = RpcError::new(-32600, "Bad Request: missing Mcp-Session-Id header");
        return json_error(Value::Null, &error.with_status(400));
    };
    let Some(session) = server.session(session_id) else {
        let error = RpcError::new(-32001, "Session not found").with_status(404);
        return json_error(Value::Null, &error);
    };
    if !session.try_open_stream() {
        let message = "a GET stream is already open for this session\n";
        return (StatusCode::CONFLICT, message).into_response();
    }
    let resume_after = headers
        .get(LAST_EVENT_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(sse::parse_get_event_id);
    sse::streaming_response(SessionStream::open(
        Arc::clone(server),
        session,
        resume_after,
    ))
}

fn delete_session(server: &Server, headers: &HeaderMap) -> Response {
    let Some(session) = session_id(headers) else {
        let error = RpcError::new(-32600, "Bad Request: missing Mcp-Session-Id header");
        return json_error(Value::Null, &error.with_status(400));
    };
    if !server.remove_session(session) {
        return StatusCode::NOT_FOUND.into_response();
    }
    StatusCode::OK.into_response()
}
