//! `HttpConnection`: one Streamable HTTP connection to an upstream, its POSTs, its GET stream and its session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::errors::describe_reqwest_error;
use super::errors::error_body;
use super::errors::shorten;
use super::errors::{http_error, retry_after};
use crate::upstream::backoff::{Backoff, RECONNECT_FLOOR};
use crate::upstream::rpc::{self, Incoming, PendingRequests};
use crate::upstream::sse::SseParser;
use crate::upstream::{EventSink, McpError, RpcError, ServerEvent, MAX_MESSAGE_BYTES};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
const LAST_EVENT_HEADER: &str = "last-event-id";
/// The slowest a GET stream that keeps failing is reopened.
const MAX_STREAM_RETRY: Duration = Duration::from_secs(30);
/// A GET stream that stayed open this long was healthy: its end is not a failure.
const HEALTHY_STREAM: Duration = Duration::from_secs(5);
/// How long an SSE answer's stream is read past the answer, in the background, for its end:
/// a stream read to its end gives its connection back to the pool. A server that keeps the
/// stream open longer costs that connection, never the answer's time.
const SSE_END_WAIT: Duration = Duration::from_secs(5);

/// What every request and stream of one connection shares.
#[derive(Clone)]
struct Endpoint {
    server: String,
    client: reqwest::Client,
    url: String,
    /// Configured headers and the bearer token, sent on every request.
    base_headers: HeaderMap,
    events: EventSink,
}

pub struct HttpConnection {
    endpoint: Endpoint,
    session_id: Mutex<Option<String>>,
    protocol_version: Mutex<Option<String>>,
    /// Stateless era: per-request method headers, no session.
    modern: AtomicBool,
    ids: PendingRequests,
    get_stream: Mutex<Option<JoinHandle<()>>>,
}

impl HttpConnection {
    pub fn new(
        server: &str,
        url: &str,
        headers: &[(String, String)],
        bearer_token: Option<&SecretString>,
        events: EventSink,
    ) -> Result<Self, McpError> {
        let mut base_headers = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| McpError::Transport(format!("invalid header name `{name}`")))?;
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| McpError::Transport(format!("invalid value for header `{name}`")))?;
            value.set_sensitive(true);
            base_headers.insert(name, value);
        }
        if let Some(token) = bearer_token {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose_secret()))
                .map_err(|_| {
                    McpError::Transport("the bearer token is not a valid header value".into())
                })?;
            value.set_sensitive(true);
            base_headers.insert(AUTHORIZATION, value);
        }
        // No redirects: one would carry our secret headers to wherever the server points, and
        // turn a POST into a GET. A redirect is reported as the error it is.
        // TCP_NODELAY: a request goes out whole at once, never held back by Nagle's algorithm
        // waiting for the ACK of an earlier segment (reqwest's default too; said here on purpose).
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none());
        if is_loopback(url) {
            // A server on this host gets a new connection per request. Most servers do not set
            // TCP_NODELAY (axum's and so rmcp's default), so an answer's body, written after
            // its head, waits for our ACK of the head; loopback's 64 KiB segments make any
            // page under 64 KiB such a body; and a kept-alive connection on which we send
            // right after receiving is in the kernel's delayed-ACK ("pingpong") mode, so that
            // ACK waits 40 ms: 33 ms a page of 100 against rmcp, where a fresh connection
            // ACKs at once (1 ms). Connecting costs microseconds here (and Linux reuses
            // loopback ports in TIME_WAIT); to a remote server it costs round trips and a TLS
            // handshake, and its pages span many segments, so remote connections stay pooled.
            builder = builder.pool_max_idle_per_host(0);
        }
        let client = builder
            .build()
            .map_err(|error| McpError::Transport(format!("cannot build HTTP client: {error}")))?;
        Ok(HttpConnection {
            endpoint: Endpoint {
                server: server.to_string(),
                client,
                url: url.to_string(),
                base_headers,
                events,
            },
            session_id: Mutex::new(None),
            protocol_version: Mutex::new(None),
            modern: AtomicBool::new(false),
            ids: PendingRequests::default(),
            get_stream: Mutex::new(None),
        })
    }

    /// The client, URL and configured headers, for the 2024-11-05 transport to reuse.
    pub fn parts(&self) -> (reqwest::Client, String, HeaderMap) {
        let endpoint = &self.endpoint;
        (
            endpoint.client.clone(),
            endpoint.url.clone(),
            endpoint.base_headers.clone(),
        )
    }

    pub fn set_protocol_version(&self, version: &str, modern: bool) {
        *lock(&self.protocol_version) = Some(version.to_string());
        self.modern.store(modern, Ordering::Relaxed);
    }

    /// Forgets the version, the era and any session id, so `initialize` goes out as the
    /// first message of a new session, without version headers.
    pub fn clear_protocol_version(&self) {
        *lock(&self.protocol_version) = None;
        *lock(&self.session_id) = None;
        self.modern.store(false, Ordering::Relaxed);
    }

    fn headers(&self, method: Option<&str>, params: &Value) -> HeaderMap {
        let mut headers = self.endpoint.base_headers.clone();
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let modern = self.modern.load(Ordering::Relaxed);
        if !modern {
            if let Some(session) = lock(&self.session_id).as_deref() {
                if let Ok(value) = HeaderValue::from_str(session) {
                    headers.insert(SESSION_HEADER, value);
                }
            }
        }
        if let Some(version) = lock(&self.protocol_version).as_deref() {
            if let Ok(value) = HeaderValue::from_str(version) {
                headers.insert(VERSION_HEADER, value);
            }
        }
        if modern {
            if let Some(method) = method {
                if let Ok(value) = HeaderValue::from_str(method) {
                    headers.insert(METHOD_HEADER, value);
                }
                // The spec names the target of these methods in a header, for routing.
                let name = match method {
                    "resources/read" => params.get("uri"),
                    "tools/call" | "prompts/get" => params.get("name"),
                    _ => None,
                };
                if let Some(value) = name
                    .and_then(Value::as_str)
                    .and_then(|name| HeaderValue::from_str(name).ok())
                {
                    headers.insert(NAME_HEADER, value);
                }
            }
        }
        headers
    }

    /// Sends a request and waits (within `timeout`, if any) for its answer.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<rpc::RawResult, McpError> {
        let id = self.ids.next_id();
        let headers = self.headers(Some(method), &params);
        let message = rpc::request_message(id, method, params);
        let exchange = async {
            let response = self.post(&message, headers).await?;
            if let Some(session) = response.headers().get(SESSION_HEADER) {
                if let Ok(session) = session.to_str() {
                    *lock(&self.session_id) = Some(session.to_string());
                }
            }
            self.read_response(response, id).await
        };
        rpc::within(method, timeout, exchange)
            .await?
            .map_err(|error| McpError::Rpc {
                method: method.to_string(),
                error,
            })
    }

    pub async fn notify(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<(), McpError> {
        let headers = self.headers(Some(method), &params);
        let message = rpc::notification_message(method, params);
        rpc::within(method, Some(timeout), self.post(&message, headers)).await?;
        Ok(())
    }

    async fn post(
        &self,
        message: &Value,
        headers: HeaderMap,
    ) -> Result<reqwest::Response, McpError> {
        let endpoint = &self.endpoint;
        let response = endpoint
            .client
            .post(&endpoint.url)
            .headers(headers)
            .header(CONTENT_TYPE, "application/json")
            .json(message)
            .send()
            .await
            .map_err(|error| McpError::Transport(describe_reqwest_error(&endpoint.url, &error)))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(&response);
        let body = error_body(response).await;
        let had_session = lock(&self.session_id).is_some() && !self.modern.load(Ordering::Relaxed);
        Err(http_error(status, &body, had_session, retry_after))
    }

    /// Reads the answer to request `id` from a JSON body or from an SSE stream; other
    /// messages on the way (notifications, pings) are routed as they come.
    async fn read_response(
        &self,
        mut response: reqwest::Response,
        id: u64,
    ) -> Result<Result<rpc::RawResult, RpcError>, McpError> {
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") {
            let mut parser = SseParser::new();
            loop {
                let chunk = response.chunk().await.map_err(|error| {
                    McpError::Closed(format!("SSE response broke off: {error}"))
                })?;
                let Some(chunk) = chunk else {
                    return Err(McpError::Closed(
                        "SSE response ended before the answer".into(),
                    ));
                };
                let events = parser
                    .feed(&chunk)
                    .map_err(|_| McpError::too_large("an SSE event"))?;
                for event in events {
                    if event.event.as_deref().is_some_and(|name| name != "message") {
                        continue;
                    }
                    let message = rpc::parse_message(&event.data).map_err(|error| {
                        McpError::Protocol(format!("SSE event data is not JSON: {error}"))
                    })?;
                    if let Some(answer) = self.route(message, Some(id)) {
                        self.finish_stream(response, parser);
                        return Ok(answer);
                    }
                }
            }
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|error| McpError::Closed(format!("response body broke off: {error}")))?
        {
            if body.len() + chunk.len() > MAX_MESSAGE_BYTES {
                return Err(McpError::too_large("a response body"));
            }
            body.extend_from_slice(&chunk);
        }
        let not_json = |error: String| {
            McpError::Protocol(format!(
                "response is not JSON ({error}; content-type `{content_type}`): {}",
                shorten(&String::from_utf8_lossy(&body))
            ))
        };
        let text = std::str::from_utf8(&body).map_err(|error| not_json(error.to_string()))?;
        let messages = rpc::parse_body(text).map_err(|error| not_json(error.to_string()))?;
        for message in messages {
            if let Some(answer) = self.route(Some(message), Some(id)) {
                return Ok(answer);
            }
        }
        Err(McpError::Protocol(
            "the response body holds no answer to our request".into(),
        ))
    }

    /// Reads an SSE answer's stream past the answer to its end (routing whatever else comes),
    /// so hyper gives the connection back to the pool for the next request instead of
    /// opening another. What has already arrived is read now; a rest still on its way is read
    /// by a task of its own, so the answer never waits for it. Bounded by `SSE_END_WAIT` and
    /// the message cap; a stream that does not end by then is dropped, with its connection.
    fn finish_stream(&self, mut response: reqwest::Response, mut parser: SseParser) {
        use futures_util::FutureExt as _;
        let headers = self.headers(None, &Value::Null);
        let mut read = 0usize;
        loop {
            match response.chunk().now_or_never() {
                None => break,
                Some(Ok(Some(chunk))) => {
                    read += chunk.len();
                    if read > MAX_MESSAGE_BYTES
                        || !route_events(&self.endpoint, &headers, &mut parser, &chunk)
                    {
                        return;
                    }
                }
                Some(Ok(None) | Err(_)) => return,
            }
        }
        let endpoint = self.endpoint.clone();
        tokio::spawn(async move {
            let reading = async {
                while let Ok(Some(chunk)) = response.chunk().await {
                    read += chunk.len();
                    if read > MAX_MESSAGE_BYTES
                        || !route_events(&endpoint, &headers, &mut parser, &chunk)
                    {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(SSE_END_WAIT, reading).await;
        });
    }

    /// Routes one server message; returns the outcome when it answers request `id`.
    fn route(
        &self,
        message: Option<Incoming>,
        id: Option<u64>,
    ) -> Option<Result<rpc::RawResult, RpcError>> {
        route_message(
            &self.endpoint,
            &self.headers(None, &Value::Null),
            message,
            id,
        )
    }

    /// Opens the handshake era's GET stream for server notifications, and keeps it open.
    pub fn start_get_stream(&self) {
        let endpoint = self.endpoint.clone();
        let headers = self.headers(None, &Value::Null);
        let task = tokio::spawn(run_get_stream(endpoint, headers));
        if let Some(previous) = lock(&self.get_stream).replace(task) {
            previous.abort();
        }
    }

    /// Stops the GET stream and ends the server-side session, if the server assigned one.
    pub async fn close(&self) {
        if let Some(task) = lock(&self.get_stream).take() {
            task.abort();
        }
        if self.modern.load(Ordering::Relaxed) || lock(&self.session_id).is_none() {
            return;
        }
        let endpoint = &self.endpoint;
        let request = endpoint
            .client
            .delete(&endpoint.url)
            .headers(self.headers(None, &Value::Null));
        match tokio::time::timeout(Duration::from_secs(2), request.send()).await {
            Ok(Ok(response)) => {
                tracing::debug!(server = %endpoint.server, status = %response.status(), "session deleted")
            }
            _ => tracing::debug!(server = %endpoint.server, "could not delete the session"),
        }
    }
}

impl Drop for HttpConnection {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.get_stream).take() {
            task.abort();
        }
    }
}

/// Feeds a chunk of a stream after its answer and routes its messages; false when the stream
/// is past the event size bound and is to be dropped.
fn route_events(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    parser: &mut SseParser,
    chunk: &[u8],
) -> bool {
    let Ok(events) = parser.feed(chunk) else {
        return false;
    };
    for event in events {
        if event.event.as_deref().is_some_and(|name| name != "message") {
            continue;
        }
        if let Ok(message) = rpc::parse_message(&event.data) {
            route_message(endpoint, headers, message, None);
        }
    }
    true
}

/// Whether the URL names this host (a loopback address or `localhost`).
fn is_loopback(url: &str) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_ascii_lowercase))
    else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(address) => address.is_loopback(),
        Err(_) => host == "localhost" || host.ends_with(".localhost"),
    }
}

/// Routes a message from the server: answers for `id` are returned, notifications go to
/// the session's events, and server requests (`ping`) are answered with a POST.
fn route_message(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    message: Option<Incoming>,
    id: Option<u64>,
) -> Option<Result<rpc::RawResult, RpcError>> {
    match message {
        Some(Incoming::Response {
            id: answered,
            outcome,
        }) if id.is_some() && answered.as_u64() == id => Some(outcome),
        Some(Incoming::Response { id: answered, .. }) => {
            tracing::debug!(server = %endpoint.server, %answered, "ignoring a response to another request");
            None
        }
        Some(Incoming::Notification { method, params }) => {
            rpc::route_notification(&endpoint.server, &method, &params, &endpoint.events);
            // A cancellation of the request this stream answers ends it.
            let cancelled = rpc::cancelled_request(&method, &params).and_then(Value::as_u64);
            (id.is_some() && cancelled == id).then(|| Err(rpc::cancelled_error()))
        }
        Some(Incoming::Request {
            id: request_id,
            method,
        }) => {
            let answer = rpc::answer_server_request(request_id, &method);
            let request = endpoint
                .client
                .post(&endpoint.url)
                .headers(headers.clone())
                .header(CONTENT_TYPE, "application/json")
                .json(&answer);
            tokio::spawn(async move {
                let _ = request.send().await;
            });
            None
        }
        None => None,
    }
}

/// Keeps the GET stream open: reconnects with `Last-Event-ID`, reports a reconnect (changes
/// may have been missed), and gives up on 405 (no push) or on a forgotten session.
///
/// Reopening is paced by one `Backoff`: never sooner than its floor (whatever `retry:` says),
/// slower while streams keep failing or ending at once, and no sooner than a 429 or 503
/// answer's `Retry-After`.
async fn run_get_stream(endpoint: Endpoint, headers: HeaderMap) {
    let mut parser = SseParser::new();
    let mut opened_before = false;
    let mut backoff = Backoff::new(RECONNECT_FLOOR, MAX_STREAM_RETRY);
    loop {
        let mut request = endpoint
            .client
            .get(&endpoint.url)
            .headers(headers.clone())
            .header(ACCEPT, "text/event-stream");
        if let Some(last) = &parser.last_event_id {
            request = request.header(LAST_EVENT_HEADER, last.as_str());
        }
        let server_asked = match request.send().await {
            Ok(response) if response.status() == StatusCode::METHOD_NOT_ALLOWED => {
                endpoint.events.send(ServerEvent::PushUnavailable(
                    "the server offers no GET stream (HTTP 405)".into(),
                ));
                return;
            }
            Ok(response) if response.status().is_success() => {
                endpoint.events.send(if opened_before {
                    ServerEvent::StreamResumed
                } else {
                    ServerEvent::StreamOpened
                });
                opened_before = true;
                // Bytes of an event cut off with the last stream do not belong to this one.
                parser.reset_partial();
                let opened_at = tokio::time::Instant::now();
                tracing::debug!(server = %endpoint.server, "GET stream open");
                let mut response = response;
                while let Ok(Some(chunk)) = response.chunk().await {
                    let Ok(events) = parser.feed(&chunk) else {
                        endpoint.events.send(ServerEvent::PushUnavailable(
                            McpError::too_large("a GET stream event").to_string(),
                        ));
                        return;
                    };
                    for event in events {
                        if event.event.as_deref().is_some_and(|name| name != "message") {
                            continue;
                        }
                        match rpc::parse_message(&event.data) {
                            Ok(message) => {
                                route_message(&endpoint, &headers, message, None);
                            }
                            Err(error) => {
                                tracing::debug!(server = %endpoint.server, %error, "GET stream event is not JSON")
                            }
                        }
                    }
                }
                // A stream that keeps closing at once counts as failing, and is reopened
                // ever more slowly; one that lived a while starts again from the floor.
                if opened_at.elapsed() >= HEALTHY_STREAM {
                    backoff.reset();
                }
                parser.retry_ms.map(Duration::from_millis)
            }
            Ok(response)
                if matches!(
                    response.status(),
                    StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
                ) =>
            {
                let asked = retry_after(&response);
                tracing::debug!(server = %endpoint.server, status = %response.status(), retry_after_ms = asked.map(|asked| asked.as_millis() as u64), "GET stream refused for now");
                asked
            }
            Ok(response) => {
                let status = response.status();
                let body = error_body(response).await;
                match http_error(status, &body, true, None) {
                    McpError::SessionExpired(reason) => {
                        endpoint.events.send(ServerEvent::Disconnected(format!(
                            "the server no longer knows our session: {reason}"
                        )));
                    }
                    other => endpoint.events.send(ServerEvent::PushUnavailable(format!(
                        "the GET stream was refused: {other}"
                    ))),
                }
                return;
            }
            Err(error) => {
                let error = describe_reqwest_error(&endpoint.url, &error);
                tracing::debug!(server = %endpoint.server, %error, "GET stream failed");
                endpoint.events.send(ServerEvent::StreamFailed(error));
                parser.retry_ms.map(Duration::from_millis)
            }
        };
        let delay = backoff.next_delay_honouring(server_asked);
        tracing::debug!(server = %endpoint.server, delay_ms = delay.as_millis() as u64, "reopening the GET stream");
        tokio::time::sleep(delay).await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
