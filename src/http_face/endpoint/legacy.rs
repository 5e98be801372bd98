//! The handshake era of `/mcp`: `initialize` opens a session (`Mcp-Session-Id`), the GET
//! stream of a session, and DELETE of a session.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::Value;

use super::handlers::{
    answer, deliver, error_answer, header_text, message_text, new_session_id, Asked, SessionStream,
    Validator, SESSION_HEADER, VERSION_HEADER,
};
use super::modern::{discover, modern_result};
use crate::http_face::access::{admit, Client};
use crate::http_face::face_state::PeerAddress;
use crate::http_face::limits::Refusal;
use crate::http_face::sessions::Opened;
use crate::http_face::stream::{self, StreamPlan};
use crate::http_face::HttpFace;
use crate::protocol::{
    self as wire, CheckedRequest, Initialize, Method, DISCOVER, INVALID_REQUEST,
};

/// A handshake-era request: `initialize` opens a session; a request naming an unknown
/// session is answered 404 so the client starts a new one.
// Over 100 lines: a handshake-era request in order (the version header, `initialize` opening a
// session within the per-client cap, evicting the least recent, a known session for the rest, the
// answer and its session header); a candidate for named steps.
pub(super) async fn legacy_request(
    face: &Arc<HttpFace>,
    asked: &Asked<'_>,
    request: CheckedRequest,
) -> Response {
    let (client, headers, audience) = (asked.client, asked.headers, asked.audience);
    let id = request.id.clone().unwrap_or(Value::Null);
    if let Some(version) = header_text(headers, VERSION_HEADER) {
        if !wire::LEGACY_VERSIONS.contains(&version) && request.method != Initialize::NAME {
            let message = format!("unsupported MCP-Protocol-Version header: {version}");
            return error_answer(
                headers,
                StatusCode::BAD_REQUEST,
                &id,
                INVALID_REQUEST,
                &message,
                None,
            );
        }
    }
    let mut new_session = None;
    if request.method == Initialize::NAME {
        let session = match new_session_id() {
            Ok(session) => session,
            Err(error) => {
                let message = format!("cannot make a session id: {error}");
                return error_answer(
                    headers,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &id,
                    wire::INTERNAL_ERROR,
                    &message,
                    None,
                );
            }
        };
        let opened = face
            .sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .open(
                session.clone(),
                &client.key(),
                Instant::now(),
                face.session_bounds(),
            );
        match opened {
            Opened::Yes { evicted } => {
                for _ in 0..evicted {
                    face.refusals.refused(Refusal::SessionEvicted);
                }
                new_session = Some(session);
            }
            Opened::Full => {
                face.refusals.refused(Refusal::Sessions);
                let message = format!(
                    "too many sessions, each with an open GET stream ([http] max_sessions = {}, max_sessions_per_client = {})",
                    face.config.max_sessions, face.config.max_sessions_per_client
                );
                return error_answer(
                    headers,
                    StatusCode::SERVICE_UNAVAILABLE,
                    &id,
                    INVALID_REQUEST,
                    &message,
                    None,
                );
            }
        }
    } else if let Some(session) = header_text(headers, SESSION_HEADER) {
        if !known_session(face, client, session) {
            return error_answer(
                headers,
                StatusCode::NOT_FOUND,
                &id,
                INVALID_REQUEST,
                "session not found: send initialize without Mcp-Session-Id",
                None,
            );
        }
    }
    let Some(request_id) = request.id.clone() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let mut response = match request.method.as_str() {
        DISCOVER => deliver(
            headers,
            StatusCode::OK,
            &wire::Response::answered(request_id, modern_result(discover(), audience, true)),
        ),
        _ => {
            let answered = answer(face, client, audience, request).await;
            let response = match answered.outcome {
                Some(Ok(result)) => deliver(
                    headers,
                    StatusCode::OK,
                    &wire::Response::answered(request_id, result),
                ),
                Some(Err(response)) => deliver(headers, StatusCode::OK, &*response),
                None => StatusCode::ACCEPTED.into_response(),
            };
            Validator::mark(asked.validator, face, answered.generation, response)
        }
    };
    if let Some(session) = new_session.and_then(|session| HeaderValue::from_str(&session).ok()) {
        response.headers_mut().insert(SESSION_HEADER, session);
    }
    response
}

/// Whether `session` is one of `client`'s, marking it used.
fn known_session(face: &HttpFace, client: &Client, session: &str) -> bool {
    face.sessions
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .touch(
            session,
            &client.key(),
            Instant::now(),
            face.config.session_idle_timeout,
        )
}

/// The handshake era's GET stream of a session: `list_changed` after each committed change.
pub(in crate::http_face) async fn get_stream(
    State(face): State<Arc<HttpFace>>,
    Extension(PeerAddress(peer)): Extension<PeerAddress>,
    headers: HeaderMap,
) -> Response {
    let client = match admit(&face, peer, &headers) {
        Ok(client) => client,
        Err(refusal) => return *refusal,
    };
    let accepts_sse = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    if !accepts_sse {
        return (
            StatusCode::NOT_ACCEPTABLE,
            "GET /mcp is an event stream: send Accept: text/event-stream\n",
        )
            .into_response();
    }
    if header_text(&headers, VERSION_HEADER)
        .is_some_and(|version| wire::MODERN_VERSIONS.contains(&version))
    {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            "the 2026-07-28 era has no GET stream: use subscriptions/listen\n",
        )
            .into_response();
    }
    let session = match header_text(&headers, SESSION_HEADER) {
        None => {
            return (
                StatusCode::BAD_REQUEST,
                "GET /mcp needs the Mcp-Session-Id from initialize\n",
            )
                .into_response()
        }
        Some(session) if !known_session(&face, &client, session) => {
            return (StatusCode::NOT_FOUND, "session not found\n").into_response()
        }
        Some(session) => session,
    };
    let (session_stream, session_ended) = SessionStream::open(&face, session);
    let place = match face.stream_place(&client, &headers, &Value::Null) {
        Ok(place) => place.of_session(session_stream),
        Err(refusal) => return *refusal,
    };
    tracing::debug!(token = client.name(), "HTTP GET stream opened");
    let changed = wire::NotificationMessage::new::<wire::ResourcesListChanged>(None);
    let tools = wire::NotificationMessage::new::<wire::ToolsListChanged>(None);
    let prompts = wire::NotificationMessage::new::<wire::PromptsListChanged>(None);
    let plan = StreamPlan {
        first: Vec::new(),
        on_change: Some(message_text(&changed)),
        on_tools: Some(message_text(&tools)),
        on_prompts: Some(message_text(&prompts)),
        at_end: None,
        session_ended,
        view: face.audience(&client).await.view,
    };
    stream::open(
        plan,
        face.api.store.subscribe(),
        face.shutdown.clone(),
        Box::new(place),
    )
}

/// Ends a handshake-era session.
pub(in crate::http_face) async fn delete_session(
    State(face): State<Arc<HttpFace>>,
    Extension(PeerAddress(peer)): Extension<PeerAddress>,
    headers: HeaderMap,
) -> Response {
    let client = match admit(&face, peer, &headers) {
        Ok(client) => client,
        Err(refusal) => return *refusal,
    };
    let Some(session) = header_text(&headers, SESSION_HEADER) else {
        return (
            StatusCode::BAD_REQUEST,
            "DELETE /mcp needs an Mcp-Session-Id\n",
        )
            .into_response();
    };
    let removed = face
        .sessions
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .remove(session, &client.key());
    tracing::debug!(token = client.name(), removed, "HTTP session deleted");
    match removed {
        true => StatusCode::NO_CONTENT.into_response(),
        false => (StatusCode::NOT_FOUND, "session not found\n").into_response(),
    }
}
