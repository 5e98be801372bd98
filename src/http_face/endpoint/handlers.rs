//! The `/mcp` handlers on `HttpFace`: POST in both eras, the GET stream, DELETE of a session.

use std::collections::{BTreeSet, HashMap};
use std::io::Read as _;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::watch;

use super::legacy::legacy_request;
use super::modern::modern_request;
use crate::answer::{Restriction, View};
use crate::http_face::access::{admit, Client};
use crate::http_face::face_state::PeerAddress;
use crate::http_face::limits::ClientIdentity;
use crate::http_face::limits::{stream_reserve, ClientKey, Refusal, ShareGuard};
use crate::http_face::sessions::SessionBounds;
use crate::http_face::stream::{message_event, sse_response};
use crate::http_face::HttpFace;
use crate::protocol::{
    self as wire, CacheScope, CatalogList, CatalogPrompts, CatalogTools, CheckedRequest,
    IncomingRequest, Kind, ListResources, ListTemplates, Method, INVALID_REQUEST, PARSE_ERROR,
};
use crate::socket::{self, ConnectionState};
use crate::store::now_ms;

pub(super) const SESSION_HEADER: &str = "mcp-session-id";
pub(super) const VERSION_HEADER: &str = "mcp-protocol-version";
pub(super) const METHOD_HEADER: &str = "mcp-method";
pub(super) const NAME_HEADER: &str = "mcp-name";

/// The `_meta` key of the protocol version (2026-07-28).
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

pub(super) const LISTEN: &str = "subscriptions/listen";

/// An error answer with free-form `data` (the 2026-07-28 errors carry their own shapes).
#[derive(Serialize)]
struct ErrorAnswer<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: i64,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Value>,
}

/// The caching hints of a 2026-07-28 result.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CachingHints {
    pub(super) result_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cache_scope: Option<CacheScope>,
}

/// What a request may see (its `View`: the one rule every answer passes in
/// `api::answer_request`), whether `private` entries are in what it sees, and how long results
/// stay good (until the next backstop walk).
pub(super) struct Audience {
    pub(super) view: View,
    pub(super) private_visible: bool,
    pub(super) ttl_ms: u64,
}

impl HttpFace {
    /// What `client` may see (the view of its token and the stored scopes).
    pub(in crate::http_face) async fn view_of(&self, client: &Client) -> View {
        self.audience(client).await.view
    }

    pub(super) async fn audience(&self, client: &Client) -> Audience {
        let live = self.api.supervisor.live_status().await;
        // The scopes stored with each snapshot; none readable means every scope is unknown,
        // and an unknown scope is withheld from tokens.
        let scopes: HashMap<(String, Kind), CacheScope> =
            match self.api.store.read(|reader| reader.scopes()).await {
                Ok(scopes) => scopes
                    .into_iter()
                    .map(|(server, kind, scope)| ((server, kind), scope))
                    .collect(),
                Err(error) => {
                    tracing::warn!(%error, "cannot read the stored scopes: private is assumed");
                    HashMap::new()
                }
            };
        let hide_flagged_uris = client
            .token
            .as_deref()
            .and_then(|name| self.config.tokens.iter().find(|token| token.name == name))
            .and_then(|token| token.hide_flagged_uris)
            .unwrap_or(self.config.hide_flagged_uris);
        let view = match client.token.as_deref() {
            None => View::owner(),
            Some(name) => {
                let token = self.config.tokens.iter().find(|token| token.name == name);
                View::restricted(Restriction {
                    token: name.to_string(),
                    servers: token.and_then(|token| token.servers.clone()),
                    kinds: token.and_then(|token| token.kinds.clone()),
                    shared: self
                        .shared
                        .read()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .clone(),
                    scopes: scopes.clone(),
                    may_mutate: token.is_some_and(|token| token.mutate),
                })
            }
        }
        .hiding_flagged_uris(hide_flagged_uris);
        // The answers are `private` when the view holds any private (or unknown) snapshot.
        let known: BTreeSet<&str> = scopes.keys().map(|(server, _)| server.as_str()).collect();
        let private_visible = scopes.iter().any(|((server, kind), scope)| {
            *scope == CacheScope::Private && view.sees(server, *kind)
        }) || (view.is_owner()
            && live.keys().any(|server| !known.contains(server.as_str())));
        let now = now_ms();
        let ttl_ms = live
            .iter()
            .filter(|(server, _)| view.sees_server(server))
            .filter_map(|(_, status)| status.next_walk_at_ms)
            .map(|next| next.saturating_sub(now).max(0) as u64)
            .min()
            .unwrap_or(0);
        Audience {
            view,
            private_visible,
            ttl_ms,
        }
    }
}

/// The 2026-07-28 protocol version a request names in `_meta`, if it names one.
fn modern_version(params: &Value) -> Option<&str> {
    params
        .get("_meta")
        .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
}

pub(super) fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .map(|value| value.to_str().unwrap_or("\u{fffd}"))
}

/// How the client wants answers: JSON unless it accepts only event streams.
fn wants_sse_only(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    accept.contains("text/event-stream")
        && !accept.contains("application/json")
        && !accept.contains("*/*")
}

fn json_body(status: StatusCode, body: &impl Serialize) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An answer in the form the client asked for.
pub(super) fn deliver(headers: &HeaderMap, status: StatusCode, body: &impl Serialize) -> Response {
    if wants_sse_only(headers) {
        let json = serde_json::to_string(body).unwrap_or_default();
        return sse_response(status, message_event(&json));
    }
    json_body(status, body)
}

pub(super) fn error_answer(
    headers: &HeaderMap,
    status: StatusCode,
    id: &Value,
    code: i64,
    message: &str,
    data: Option<Value>,
) -> Response {
    let answer = ErrorAnswer {
        jsonrpc: wire::JSONRPC_VERSION,
        id,
        error: ErrorBody {
            code,
            message,
            data,
        },
    };
    deliver(headers, status, &answer)
}

/// A fresh session id: 128 random bits from the kernel, in hex.
pub(super) fn new_session_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

// Over 100 lines: one POST of the modern era from its body deadline to its answer (the body, the
// version, the view, the validator, the caching hints) in the order HTTP asks them; a candidate for
// named steps.
pub(in crate::http_face) async fn post_message(
    State(face): State<Arc<HttpFace>>,
    Extension(PeerAddress(peer)): Extension<PeerAddress>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let client = match admit(&face, peer, &headers) {
        Ok(client) => client,
        Err(refusal) => return *refusal,
    };
    // The whole body within `body_timeout` of the head: a client that sends a head and then
    // nothing, or a byte now and then, holds its connection that long and no longer.
    let read = tokio::time::timeout(
        face.config.body_timeout,
        axum::body::to_bytes(body, face.config.max_body_bytes),
    )
    .await;
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        Err(_) => {
            face.refusals.refused(Refusal::BodyTimeout);
            let message = format!(
                "request body not sent within {:?} ([http] body_timeout)",
                face.config.body_timeout
            );
            let mut response = error_answer(
                &headers,
                StatusCode::REQUEST_TIMEOUT,
                &Value::Null,
                INVALID_REQUEST,
                &message,
                None,
            );
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
        Ok(Err(_)) => {
            face.refusals.refused(Refusal::BodyTooLarge);
            let message = format!(
                "request body larger than {} bytes ([http] max_body)",
                face.config.max_body_bytes
            );
            return error_answer(
                &headers,
                StatusCode::PAYLOAD_TOO_LARGE,
                &Value::Null,
                INVALID_REQUEST,
                &message,
                None,
            );
        }
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(error) => {
            let message = format!("parse error: {error}");
            return error_answer(
                &headers,
                StatusCode::BAD_REQUEST,
                &Value::Null,
                PARSE_ERROR,
                &message,
                None,
            );
        }
    };
    // Anything but an object is checked like a request with every field missing.
    let request = match IncomingRequest::deserialize(message) {
        Ok(request) => request.check(),
        Err(_) => IncomingRequest::default().check(),
    };
    let request = match request {
        Ok(request) => request,
        Err(response) => return deliver(&headers, StatusCode::BAD_REQUEST, &*response),
    };
    tracing::debug!(token = client.name(), method = %request.method, "HTTP request");
    // One view for the whole request: the validator names the view the answer is read through.
    let audience = face.audience(&client).await;
    let validator = Validator::of(&client, &audience, &headers, &request);
    if let Some(validator) = &validator {
        // The generation now: a tag naming it names the body an answer read now would hold.
        match face
            .api
            .store
            .read(|reader| reader.catalog_generation())
            .await
        {
            Ok(generation) => {
                let tag = validator.tag(&face, generation);
                if none_match_hits(&headers, &tag) {
                    return (StatusCode::NOT_MODIFIED, [(header::ETAG, tag.as_str())])
                        .into_response();
                }
            }
            Err(error) => tracing::warn!(%error, "cannot read the catalog's generation"),
        }
    }
    let asked = Asked {
        client: &client,
        headers: &headers,
        audience: &audience,
        validator: validator.as_ref(),
    };
    match modern_version(&request.params).map(str::to_string) {
        Some(version) => modern_request(&face, &asked, request, &version).await,
        None => legacy_request(&face, &asked, request).await,
    }
}

/// What every answer of one POST goes by: who asks, how, through which view, and the
/// validator of a conditional answer.
pub(super) struct Asked<'a> {
    pub(super) client: &'a Client,
    pub(super) headers: &'a HeaderMap,
    pub(super) audience: &'a Audience,
    pub(super) validator: Option<&'a Validator>,
}

/// List methods whose answer follows from the catalog, the request and the client alone: it
/// carries an ETag, and a request whose `If-None-Match` names the current one gets 304 with
/// no body, so a client or a plain HTTP cache re-polling an unchanged catalog costs nothing.
const CONDITIONAL: &[&str] = &[
    ListResources::NAME,
    ListTemplates::NAME,
    CatalogList::NAME,
    CatalogTools::NAME,
    CatalogPrompts::NAME,
];

/// A conditional answer's ETag but for the catalog's generation: this database, this process,
/// the request as sent (its method, params and form), the client, and the view its answer is
/// read through (the token's servers and kinds, the shared servers and the scopes judged by).
/// The generation comes from the read that made the answer (`ConnectionState::
/// answered_generation`), or, for a 304, from a read of the generation alone: the catalog's
/// generation moves in the very commit of every change a list shows, so one generation and
/// one validator name one body.
pub(super) struct Validator {
    digest: u64,
}

impl Validator {
    fn of(
        client: &Client,
        audience: &Audience,
        headers: &HeaderMap,
        request: &CheckedRequest,
    ) -> Option<Validator> {
        if !CONDITIONAL.contains(&request.method.as_str()) {
            return None;
        }
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let form: &[u8] = match wants_sse_only(headers) {
            true => b"sse",
            false => b"json",
        };
        let hints: &[u8] = match audience.private_visible {
            true => b"private",
            false => b"public",
        };
        for part in [
            request.method.as_bytes(),
            request.params.to_string().as_bytes(),
            client.name().as_bytes(),
            audience.view.identity().as_bytes(),
            form,
            hints,
        ] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        Some(Validator {
            digest: hasher.digest(),
        })
    }

    /// The ETag of the answer read at `generation`.
    fn tag(&self, face: &HttpFace, generation: u64) -> String {
        static STARTED_MS: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
        format!(
            "\"{}-{:x}-{}-{:016x}\"",
            face.api.store.instance(),
            STARTED_MS.get_or_init(now_ms),
            generation,
            self.digest
        )
    }

    /// `response` with the ETag of the answer read at `generation`, when it is a success
    /// read in one read transaction (errors and other answers carry none).
    pub(super) fn mark(
        validator: Option<&Validator>,
        face: &HttpFace,
        generation: Option<u64>,
        mut response: Response,
    ) -> Response {
        if let (Some(validator), Some(generation), StatusCode::OK) =
            (validator, generation, response.status())
        {
            if let Ok(value) = HeaderValue::from_str(&validator.tag(face, generation)) {
                response.headers_mut().insert(header::ETAG, value);
            }
        }
        response
    }
}

/// True when `If-None-Match` names `tag` (weakly or strongly) or is `*`.
fn none_match_hits(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|candidate| candidate.trim())
        .any(|candidate| candidate == "*" || candidate.trim_start_matches("W/") == tag)
}

impl HttpFace {
    pub(super) fn session_bounds(&self) -> SessionBounds {
        SessionBounds {
            max: self.config.max_sessions,
            per_client: self.config.max_sessions_per_client,
            idle: self.config.session_idle_timeout,
        }
    }

    /// A stream's place: a permit of `max_streams` and one of its client's
    /// `max_streams_per_client`; the refusal to send when either is used up, or when only the
    /// reserve is left and the client's identity already holds a stream (`stream_reserve`).
    pub(super) fn stream_place(
        &self,
        client: &Client,
        headers: &HeaderMap,
        id: &Value,
    ) -> Result<StreamPlace, Box<Response>> {
        let Some(share) = self
            .client_streams
            .try_take(&client.key(), self.config.max_streams_per_client)
        else {
            self.refusals.refused(Refusal::ClientStreams);
            let message = format!(
                "too many open streams of this client ([http] max_streams_per_client = {})",
                self.config.max_streams_per_client
            );
            return Err(Box::new(error_answer(
                headers,
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                INVALID_REQUEST,
                &message,
                None,
            )));
        };
        let identity = client.identity();
        let reserve = stream_reserve(self.config.max_streams, self.config.max_streams_per_client);
        if self.identity_streams.held(&identity) > 0 && self.streams.available_permits() <= reserve
        {
            return Err(Box::new(too_many_streams(self, headers, id, reserve)));
        }
        let Ok(permit) = self.streams.clone().try_acquire_owned() else {
            return Err(Box::new(too_many_streams(self, headers, id, 0)));
        };
        let identity_share = self.identity_streams.take(&identity);
        Ok(StreamPlace {
            _permit: permit,
            _share: share,
            _identity_share: identity_share,
            _session: None,
        })
    }
}

/// What an open stream holds until it ends.
pub(super) struct StreamPlace {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _share: ShareGuard<ClientKey>,
    _identity_share: ShareGuard<ClientIdentity>,
    _session: Option<SessionStream>,
}

impl StreamPlace {
    pub(super) fn of_session(self, session: SessionStream) -> StreamPlace {
        StreamPlace {
            _session: Some(session),
            ..self
        }
    }
}

/// A GET stream's mark on its session: while it is open the session does not expire.
pub(super) struct SessionStream {
    face: Arc<HttpFace>,
    id: String,
}

impl SessionStream {
    /// The mark, and what closes when the session ends.
    pub(super) fn open(
        face: &Arc<HttpFace>,
        id: &str,
    ) -> (SessionStream, Option<watch::Receiver<()>>) {
        let ended = face
            .sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .stream(id, true, Instant::now());
        let mark = SessionStream {
            face: face.clone(),
            id: id.to_string(),
        };
        (mark, ended)
    }
}

impl Drop for SessionStream {
    fn drop(&mut self) {
        self.face
            .sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .stream(&self.id, false, Instant::now());
    }
}

/// An answer through the socket's dispatch: `None` for a notification; `Err` is the JSON-RPC
/// error answer; with the catalog generation a list answer was read at.
pub(super) struct Answered {
    /// The result, or the failure as the client gets it (boxed: a `Response` is large).
    pub(super) outcome: Option<Result<Box<RawValue>, Box<wire::Response>>>,
    pub(super) generation: Option<u64>,
}

/// Answers through the socket's dispatch, restricted to the client's view (applied to each
/// method's typed result there).
pub(super) async fn answer(
    face: &HttpFace,
    client: &Client,
    audience: &Audience,
    request: CheckedRequest,
) -> Answered {
    let Some(id) = request.id.clone() else {
        return Answered {
            outcome: None,
            generation: None,
        };
    };
    // Each HTTP request is its own connection state: `catalog/watch` and the `initialize`
    // flag mean nothing without a socket to push on (the GET stream and listen do that). Its
    // searches are its identity's, so the gate holds a client of many requests back as one.
    let mut state =
        ConnectionState::searching_as(face.search_client(client.identity()), audience.view.clone());
    let Some(response) = socket::answer_request(request, &face.api, &mut state).await else {
        return Answered {
            outcome: None,
            generation: None,
        };
    };
    let (outcome, generation) = match response.into_outcome() {
        Ok(result) => (Ok(result), state.answered_generation()),
        Err(error) => (Err(Box::new(wire::Response::failure(id, error))), None),
    };
    Answered {
        outcome: Some(outcome),
        generation,
    }
}

/// One message of a stream as its JSON text.
pub(super) fn message_text(message: &impl Serialize) -> String {
    serde_json::to_string(message).unwrap_or_default()
}

/// A stream refused by `max_streams`; `reserve` when the streams left are kept for identities
/// that hold none (`stream_reserve`).
fn too_many_streams(face: &HttpFace, headers: &HeaderMap, id: &Value, reserve: usize) -> Response {
    face.refusals.refused(Refusal::Streams);
    let message = match reserve {
        0 => format!(
            "too many open streams ([http] max_streams = {})",
            face.config.max_streams
        ),
        _ => format!(
            "too many open streams: the last {reserve} of [http] max_streams = {} are kept for tokens (or, without tokens, addresses) that hold none",
            face.config.max_streams
        ),
    };
    error_answer(
        headers,
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        INVALID_REQUEST,
        &message,
        None,
    )
}
