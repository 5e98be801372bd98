//! The Streamable HTTP transport (handshake era): POST each message, read JSON or SSE answers.

use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;
use tokio::sync::mpsc;

use super::rpc::{self, Incoming, PendingRequests};
use super::sse::SseParser;
use super::{McpError, ServerEvent};
use crate::config::Secret;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// How much of an error body we keep for status and logs.
const ERROR_BODY_LIMIT: usize = 300;

pub struct HttpConnection {
    server: String,
    client: reqwest::Client,
    url: String,
    /// Configured headers and the bearer token, sent on every request.
    base_headers: HeaderMap,
    session_id: Mutex<Option<String>>,
    protocol_version: Mutex<Option<String>>,
    ids: PendingRequests,
    events: mpsc::Sender<ServerEvent>,
}

impl HttpConnection {
    pub fn new(
        server: &str,
        url: &str,
        headers: &[(String, String)],
        bearer_token: Option<&Secret>,
        events: mpsc::Sender<ServerEvent>,
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
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
                    McpError::Transport("the bearer token is not a valid header value".into())
                })?;
            value.set_sensitive(true);
            base_headers.insert(AUTHORIZATION, value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|error| McpError::Transport(format!("cannot build HTTP client: {error}")))?;
        Ok(HttpConnection {
            server: server.to_string(),
            client,
            url: url.to_string(),
            base_headers,
            session_id: Mutex::new(None),
            protocol_version: Mutex::new(None),
            ids: PendingRequests::default(),
            events,
        })
    }

    pub fn set_protocol_version(&self, version: &str) {
        *lock(&self.protocol_version) = Some(version.to_string());
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = self.base_headers.clone();
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(session) = lock(&self.session_id).as_deref() {
            if let Ok(value) = HeaderValue::from_str(session) {
                headers.insert(SESSION_HEADER, value);
            }
        }
        if let Some(version) = lock(&self.protocol_version).as_deref() {
            if let Ok(value) = HeaderValue::from_str(version) {
                headers.insert(VERSION_HEADER, value);
            }
        }
        headers
    }

    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let id = self.ids.next_id();
        let message = rpc::request_message(id, method, params);
        let exchange = async {
            let response = self.post(&message).await?;
            if let Some(session) = response.headers().get(SESSION_HEADER) {
                if let Ok(session) = session.to_str() {
                    *lock(&self.session_id) = Some(session.to_string());
                }
            }
            self.read_response(response, id).await
        };
        let outcome = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| McpError::Timeout {
                method: method.to_string(),
                seconds: timeout.as_secs_f64(),
            })??;
        outcome.map_err(|error| McpError::Rpc {
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
        let message = rpc::notification_message(method, params);
        tokio::time::timeout(timeout, self.post(&message))
            .await
            .map_err(|_| McpError::Timeout {
                method: method.to_string(),
                seconds: timeout.as_secs_f64(),
            })??;
        Ok(())
    }

    async fn post(&self, message: &Value) -> Result<reqwest::Response, McpError> {
        let response = self
            .client
            .post(&self.url)
            .headers(self.headers())
            .header(CONTENT_TYPE, "application/json")
            .json(message)
            .send()
            .await
            .map_err(|error| McpError::Transport(describe_reqwest_error(&self.url, &error)))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        Err(McpError::Http {
            status: status.as_u16(),
            body: shorten(&body),
        })
    }

    /// Reads the answer to request `id` from a JSON body or from an SSE stream.
    async fn read_response(
        &self,
        mut response: reqwest::Response,
        id: u64,
    ) -> Result<Result<Value, super::RpcError>, McpError> {
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
                for event in parser.feed(&chunk) {
                    if event.event.as_deref().is_some_and(|name| name != "message") {
                        continue;
                    }
                    let message: Value = serde_json::from_str(&event.data).map_err(|error| {
                        McpError::Protocol(format!("SSE event data is not JSON: {error}"))
                    })?;
                    if let Some(answer) = self.handle_message(message, id) {
                        return Ok(answer);
                    }
                }
            }
        }
        let body = response
            .bytes()
            .await
            .map_err(|error| McpError::Closed(format!("response body broke off: {error}")))?;
        let message: Value = serde_json::from_slice(&body).map_err(|error| {
            McpError::Protocol(format!(
                "response is not JSON ({error}; content-type `{content_type}`): {}",
                shorten(&String::from_utf8_lossy(&body))
            ))
        })?;
        let messages = match message {
            Value::Array(batch) => batch,
            single => vec![single],
        };
        for message in messages {
            if let Some(answer) = self.handle_message(message, id) {
                return Ok(answer);
            }
        }
        Err(McpError::Protocol(
            "the response body holds no answer to our request".into(),
        ))
    }

    /// Routes one server message; returns the outcome when it answers request `id`.
    fn handle_message(&self, message: Value, id: u64) -> Option<Result<Value, super::RpcError>> {
        match rpc::classify(message) {
            Some(Incoming::Response {
                id: answered,
                outcome,
            }) if answered.as_u64() == Some(id) => Some(outcome),
            Some(Incoming::Response { id: answered, .. }) => {
                tracing::debug!(server = %self.server, %answered, "ignoring a response to another request");
                None
            }
            Some(Incoming::Notification { method }) => {
                rpc::route_notification(&self.server, &method, &self.events);
                None
            }
            Some(Incoming::Request {
                id: request_id,
                method,
            }) => {
                let answer = rpc::answer_server_request(request_id, &method);
                let request = self
                    .client
                    .post(&self.url)
                    .headers(self.headers())
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

    /// Ends the server-side session, if the server assigned one.
    pub async fn close(&self) {
        let Some(session) = lock(&self.session_id).clone() else {
            return;
        };
        let request = self.client.delete(&self.url).headers(self.headers());
        match tokio::time::timeout(Duration::from_secs(2), request.send()).await {
            Ok(Ok(response)) => {
                tracing::debug!(server = %self.server, status = %response.status(), session, "session deleted")
            }
            _ => tracing::debug!(server = %self.server, "could not delete the session"),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn shorten(text: &str) -> String {
    let text = text.trim();
    if text.len() <= ERROR_BODY_LIMIT {
        return text.to_string();
    }
    let mut end = ERROR_BODY_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Describes a reqwest error without its URL query (which may hold a secret someone put there).
fn describe_reqwest_error(url: &str, error: &reqwest::Error) -> String {
    let base = url.split('?').next().unwrap_or(url);
    let kind = if error.is_connect() {
        "cannot connect to"
    } else if error.is_timeout() {
        "timed out talking to"
    } else {
        "request failed to"
    };
    let mut detail = String::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        detail = cause.to_string();
        source = cause.source();
    }
    if detail.is_empty() {
        format!("{kind} {base}")
    } else {
        format!("{kind} {base}: {detail}")
    }
}
