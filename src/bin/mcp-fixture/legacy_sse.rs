//! The 2024-11-05 HTTP+SSE transport (`--legacy-sse`): `GET /sse` opens a session's stream,
//! whose first event names the POST URL; `POST /message?sessionId=` answers 202 and the
//! response travels as a `message` event on the stream.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tracing::debug;

use crate::catalog::PageFault;
use crate::http::{is_foreign_origin, json_error, Servers};
use crate::rpc::{parse_message, Incoming};
use crate::server::{Era, Reply, SessionKind};
use crate::sse::{self, SessionStream};

/// `/sse`: GET opens the stream; anything else is 405, which is what sends a client that
/// first tries Streamable HTTP here back to GET.
pub async fn sse_endpoint(
    State(servers): State<Servers>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    if is_foreign_origin(&headers) {
        return (StatusCode::FORBIDDEN, "foreign Origin refused\n").into_response();
    }
    if method != Method::GET {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "GET")]).into_response();
    }
    let server = &servers[0];
    let session = server.create_session(SessionKind::LegacySse);
    // A new session has no stream yet, so the claim cannot fail.
    session.try_open_stream();
    sse::streaming_response(SessionStream::open(Arc::clone(server), session, None))
}

/// `/message?sessionId=<id>`: one client message per POST.
pub async fn message_endpoint(
    State(servers): State<Servers>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if is_foreign_origin(&headers) {
        return (StatusCode::FORBIDDEN, "foreign Origin refused\n").into_response();
    }
    if method != Method::POST {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
    }
    let server = &servers[0];
    let Some(session_id) = query_value(&uri, "sessionId") else {
        return (StatusCode::BAD_REQUEST, "missing sessionId\n").into_response();
    };
    let Some(session) = server.session(session_id) else {
        return (StatusCode::NOT_FOUND, "unknown sessionId\n").into_response();
    };
    let incoming = match parse_message(&body) {
        Ok(incoming) => incoming,
        Err((id, error)) => return json_error(id, &error),
    };
    let (id, method, params) = match incoming {
        Incoming::Request { id, method, params } => (id, method, params),
        Incoming::Notification { method, .. } => {
            debug!(method, "notification");
            return accepted();
        }
        Incoming::Response { id } => {
            server.count_ping_answer(&id);
            return accepted();
        }
    };
    // This transport predates the stateless era: everything is served in the handshake era.
    let reply = server.serve(id, &method, params, &Era::Legacy).await;
    if method == "initialize" {
        session.mark_initialized();
    }
    match reply {
        Reply::Message { message, .. } => session.push_messages([message.to_string()]),
        Reply::Fault(PageFault::Drop) => session.cut_stream(),
        Reply::Fault(PageFault::Http500) => {
            let body = "injected internal server error\n";
            return (StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
        }
        Reply::Fault(PageFault::Garbage) => {
            session.push_messages(["<html>this is not JSON</html>".to_owned()]);
        }
        // Neither can happen in the handshake era over HTTP.
        Reply::Listen { .. } | Reply::Exit(_) => {}
    }
    accepted()
}

fn accepted() -> Response {
    (StatusCode::ACCEPTED, "Accepted").into_response()
}

/// The value of `name` in the URI's query string (session ids need no percent-decoding).
fn query_value<'a>(uri: &'a Uri, name: &str) -> Option<&'a str> {
    uri.query()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}
