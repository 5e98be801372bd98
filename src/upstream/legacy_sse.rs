//! The 2024-11-05 HTTP+SSE transport: one GET stream carries every server message; the
//! first event names the URL to POST our messages to.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::http::{describe_reqwest_error, error_body, shorten};
use super::rpc::{self, Incoming, PendingRequests};
use super::sse::SseParser;
use super::{EventSink, McpError, ServerEvent};

pub struct LegacySseConnection {
    server: String,
    client: reqwest::Client,
    post_url: String,
    headers: HeaderMap,
    pending: Arc<PendingRequests>,
    stream: JoinHandle<()>,
}

impl LegacySseConnection {
    /// Opens the stream at `url` and waits (within `timeout`) for its `endpoint` event.
    pub async fn connect(
        server: &str,
        client: reqwest::Client,
        url: &str,
        headers: HeaderMap,
        events: EventSink,
        timeout: Duration,
    ) -> Result<Self, McpError> {
        let opening = async {
            let response = client
                .get(url)
                .headers(headers.clone())
                .header(ACCEPT, "text/event-stream")
                .send()
                .await
                .map_err(|error| McpError::Transport(describe_reqwest_error(url, &error)))?;
            let status = response.status();
            if !status.is_success() {
                let body = error_body(response).await;
                return Err(McpError::Http {
                    status: status.as_u16(),
                    body: shorten(&body),
                    retry_after: None,
                });
            }
            let mut response = response;
            let mut parser = SseParser::new();
            loop {
                let chunk = response
                    .chunk()
                    .await
                    .map_err(|error| {
                        McpError::Closed(format!("the SSE stream broke off: {error}"))
                    })?
                    .ok_or_else(|| {
                        McpError::Closed("the SSE stream ended before its endpoint event".into())
                    })?;
                let events = parser
                    .feed(&chunk)
                    .map_err(|_| McpError::too_large("an SSE event"))?;
                for event in events {
                    if event.event.as_deref() == Some("endpoint") {
                        let base = reqwest::Url::parse(url)
                            .map_err(|error| McpError::Transport(error.to_string()))?;
                        let post_url = base.join(event.data.trim()).map_err(|error| {
                            McpError::Protocol(format!("the endpoint event is not a URL: {error}"))
                        })?;
                        // Our token and headers go wherever we POST: only to the same origin.
                        if post_url.origin() != base.origin() {
                            return Err(McpError::Protocol(format!(
                                "the endpoint event names another origin ({}); refusing to send our credentials there",
                                post_url.origin().ascii_serialization()
                            )));
                        }
                        return Ok((response, parser, post_url.to_string()));
                    }
                }
            }
        };
        let (response, parser, post_url) =
            rpc::within("GET (SSE endpoint)", Some(timeout), opening).await?;
        let pending = Arc::new(PendingRequests::default());
        let stream = tokio::spawn(read_stream(
            server.to_string(),
            client.clone(),
            post_url.clone(),
            headers.clone(),
            response,
            parser,
            pending.clone(),
            events,
        ));
        Ok(LegacySseConnection {
            server: server.to_string(),
            client,
            post_url,
            headers,
            pending,
            stream,
        })
    }

    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<rpc::RawResult, McpError> {
        let id = self.pending.next_id();
        let message = rpc::request_message(id, method, params);
        let gone = || format!("the SSE stream of `{}` ended", self.server);
        self.pending
            .exchange(id, method, timeout, self.post(&message), gone)
            .await
    }

    pub async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        self.post(&rpc::notification_message(method, params)).await
    }

    async fn post(&self, message: &Value) -> Result<(), McpError> {
        post_message(&self.client, &self.post_url, &self.headers, message).await
    }

    pub fn close(&self) {
        self.stream.abort();
    }
}

impl Drop for LegacySseConnection {
    fn drop(&mut self) {
        self.stream.abort();
    }
}

async fn post_message(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    message: &Value,
) -> Result<(), McpError> {
    let response = client
        .post(url)
        .headers(headers.clone())
        .header(CONTENT_TYPE, "application/json")
        .json(message)
        .send()
        .await
        .map_err(|error| McpError::Transport(describe_reqwest_error(url, &error)))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = error_body(response).await;
    Err(McpError::Http {
        status: status.as_u16(),
        body: shorten(&body),
        retry_after: None,
    })
}

#[allow(clippy::too_many_arguments)]
async fn read_stream(
    server: String,
    client: reqwest::Client,
    post_url: String,
    headers: HeaderMap,
    mut response: reqwest::Response,
    mut parser: SseParser,
    pending: Arc<PendingRequests>,
    events: EventSink,
) {
    let reason = loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break "the server ended the SSE stream".to_string(),
            Err(error) => break format!("the SSE stream broke off: {error}"),
        };
        let Ok(completed) = parser.feed(&chunk) else {
            break McpError::too_large("an SSE event").to_string();
        };
        for event in completed {
            if event.event.as_deref().is_some_and(|name| name != "message") {
                continue;
            }
            let Ok(incoming) = rpc::parse_message(&event.data) else {
                tracing::debug!(server, "SSE event data is not JSON; ignoring it");
                continue;
            };
            match incoming {
                Some(Incoming::Response { id, outcome }) => {
                    pending.complete(&id, outcome);
                }
                Some(Incoming::Notification { method, params }) => {
                    if let Some(id) = rpc::cancelled_request(&method, &params) {
                        pending.complete(id, Err(rpc::cancelled_error()));
                    }
                    rpc::route_notification(&server, &method, &params, &events)
                }
                Some(Incoming::Request { id, method }) => {
                    let answer = rpc::answer_server_request(id, &method);
                    let (client, url, headers) =
                        (client.clone(), post_url.clone(), headers.clone());
                    tokio::spawn(async move {
                        let _ = post_message(&client, &url, &headers, &answer).await;
                    });
                }
                None => {}
            }
        }
    };
    pending.fail_all();
    events.send(ServerEvent::Disconnected(reason));
}
