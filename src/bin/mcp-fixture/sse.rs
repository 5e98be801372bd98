//! Server-Sent Events: event formatting and the long-lived server-to-client streams
//! (the handshake era's GET stream, the 2026-07-28 listen stream, the 2024-11-05 SSE stream).
//!
//! Each stream is an `unfold` over a driver whose `next_chunk` waits for the next
//! thing to send; hyper drops the driver when the client goes away, and the
//! driver's guard then updates the counters. An `Err` chunk makes hyper cut the
//! connection without ending the chunked body: that is how streams are dropped
//! abruptly.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};
use tracing::{debug, info};

use crate::rpc;
use crate::server::{Push, Queue, Server, Session, SessionKind};

/// Prefix of GET stream event ids (`get-<sequence>`), so a `Last-Event-ID` names its stream.
const GET_EVENT_PREFIX: &str = "get-";

pub fn keep_alive_comment() -> &'static str {
    ": keep-alive\n\n"
}

/// One `message` event, with an id when the stream is resumable.
pub fn message_event(id: Option<&str>, data: &str) -> String {
    match id {
        Some(id) => format!("event: message\nid: {id}\ndata: {data}\n\n"),
        None => format!("event: message\ndata: {data}\n\n"),
    }
}

/// Renders a POST's SSE answer: optional notifications, then the response.
///
/// A comment comes first (with a bare LF), then the events with CRLF line
/// endings; the response's JSON is split over two `data:` lines, which SSE
/// joins with "\n", insignificant whitespace in JSON. This exercises a
/// client's parser on every answer.
pub fn post_body(event_id: &str, notifications: &[String], message: &Value) -> String {
    let mut body = String::from(": fixture keep-alive\n");
    for (index, notification) in notifications.iter().enumerate() {
        body.push_str(&format!(
            "event: message\r\nid: {event_id}-n{index}\r\ndata: {notification}\r\n\r\n"
        ));
    }
    let json = message.to_string();
    let split_at = first_comma_outside_strings(&json).map_or(json.len(), |comma| comma + 1);
    let (head, tail) = json.split_at(split_at);
    body.push_str(&format!(
        "event: message\r\nid: {event_id}\r\ndata: {head}\r\ndata: {tail}\r\n\r\n"
    ));
    body
}

/// The byte index of the first comma that is JSON syntax rather than part of a string.
fn first_comma_outside_strings(json: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    for (index, byte) in json.bytes().enumerate() {
        match (in_string, escaped, byte) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (_, _, b'"') => in_string = !in_string,
            (false, _, b',') => return Some(index),
            _ => {}
        }
    }
    None
}

/// The sequence number in a GET stream's `Last-Event-ID`, if it names one.
pub fn parse_get_event_id(last_event_id: &str) -> Option<u64> {
    last_event_id.strip_prefix(GET_EVENT_PREFIX)?.parse().ok()
}

/// An SSE response whose body is produced chunk by chunk by `driver`.
pub fn streaming_response<D: Driver>(driver: D) -> Response {
    let stream = futures_util::stream::unfold(driver, |mut driver| async move {
        let chunk = driver.next_chunk().await?;
        Some((chunk, driver))
    });
    let headers = [
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
        (HeaderName::from_static("x-accel-buffering"), "no"),
    ];
    (StatusCode::OK, headers, Body::from_stream(stream)).into_response()
}

/// Produces the chunks of one long-lived SSE body; `None` ends it cleanly.
pub trait Driver: Send + 'static {
    fn next_chunk(
        &mut self,
    ) -> impl std::future::Future<Output = Option<Result<Bytes, std::io::Error>>> + Send;
}

fn abrupt_close() -> Option<Result<Bytes, std::io::Error>> {
    Some(Err(std::io::Error::other("stream dropped on purpose")))
}

pub fn ticker(period: Duration) -> Interval {
    let period = period.max(Duration::from_millis(1));
    let mut ticker = interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}

/// Waits for the next tick, or forever when there is no ticker.
pub async fn maybe_tick(ticker: &mut Option<Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Drives a session's server stream: the handshake era's GET stream or a 2024-11-05 SSE stream.
///
/// Both send what the session's queue holds after the cursor; they differ in
/// framing (GET events carry `get-<n>` ids for `Last-Event-ID`) and in what
/// the end of the stream means (a legacy SSE session dies with its stream).
pub struct SessionStream {
    server: Arc<Server>,
    session: Arc<Session>,
    cursor: u64,
    preamble: Option<String>,
    changes: watch::Receiver<u64>,
    pushes: broadcast::Receiver<Push>,
    keep_alive: Interval,
    pings: Option<Interval>,
    ended: bool,
    /// The `end_get_streams` fault: end cleanly right after the first event.
    end_after_preamble: bool,
}

impl SessionStream {
    /// Opens the stream; the caller has claimed the session's stream slot.
    ///
    /// `resume_after` is the sequence from `Last-Event-ID`: queued messages after it are
    /// replayed. Without it the stream starts at the end of the queue.
    pub fn open(server: Arc<Server>, session: Arc<Session>, resume_after: Option<u64>) -> Self {
        let cursor = resume_after.unwrap_or_else(|| session.last_sequence());
        let args = &server.args;
        let preamble = match session.kind {
            // The first event primes the client with an id to resume from and the retry delay.
            SessionKind::StreamableHttp => format!(
                "retry: {}\nid: {GET_EVENT_PREFIX}{cursor}\ndata:\n\n",
                args.sse_retry_ms
            ),
            SessionKind::LegacySse => {
                // A relative URL: the client resolves it against the SSE URL.
                format!(
                    "event: endpoint\ndata: /message?sessionId={}\n\n",
                    session.id
                )
            }
        };
        let pings = args.server_ping_ms.map(Duration::from_millis).map(ticker);
        server.stats.update(|counters| match session.kind {
            SessionKind::StreamableHttp => {
                counters.get_streams_opened += 1;
                counters.get_streams_open += 1;
            }
            SessionKind::LegacySse => {
                counters.legacy_streams_opened += 1;
                counters.legacy_streams_open += 1;
            }
        });
        info!(session = %session.id, kind = ?session.kind, resume_after, "server stream opened");
        Self {
            changes: session.watch(),
            pushes: server.subscribe_pushes(),
            keep_alive: ticker(Duration::from_millis(args.keepalive_ms)),
            pings,
            cursor,
            preamble: Some(preamble),
            end_after_preamble: session.kind == SessionKind::StreamableHttp
                && server.catalog().faults.end_get_streams,
            server,
            session,
            ended: false,
        }
    }

    /// Frames queued messages after the cursor as one chunk.
    fn drain_queue(&mut self, queued: Vec<(u64, String)>) -> Bytes {
        let mut chunk = String::new();
        let mut list_changed = 0;
        for (sequence, message) in queued {
            self.cursor = sequence;
            if message.contains("notifications/resources/list_changed") {
                list_changed += 1;
            }
            let id = match self.session.kind {
                SessionKind::StreamableHttp => Some(format!("{GET_EVENT_PREFIX}{sequence}")),
                SessionKind::LegacySse => None,
            };
            chunk.push_str(&message_event(id.as_deref(), &message));
        }
        self.server.count_list_changed(list_changed);
        Bytes::from(chunk)
    }
}

impl Driver for SessionStream {
    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if self.ended {
            return None;
        }
        if let Some(preamble) = self.preamble.take() {
            return Some(Ok(Bytes::from(preamble)));
        }
        if self.end_after_preamble {
            info!(session = %self.session.id, "ending the GET stream on request of the end_get_streams fault");
            self.ended = true;
            return None;
        }
        loop {
            match self.session.messages_after(self.cursor) {
                Queue::Messages(queued) if !queued.is_empty() => {
                    return Some(Ok(self.drain_queue(queued)));
                }
                Queue::Messages(_) => {}
                Queue::Gone => {
                    debug!(session = %self.session.id, "session gone; closing its stream");
                    self.ended = true;
                    return None;
                }
                Queue::Cut => {
                    info!(session = %self.session.id, "cutting server stream");
                    self.ended = true;
                    return abrupt_close();
                }
            }
            tokio::select! {
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        self.ended = true;
                        return None;
                    }
                }
                _ = self.keep_alive.tick() => {
                    return Some(Ok(Bytes::from_static(keep_alive_comment().as_bytes())));
                }
                () = maybe_tick(&mut self.pings) => {
                    let ping = self.server.next_server_ping();
                    self.session.push_messages([ping]);
                }
                push = self.pushes.recv() => match push {
                    Ok(Push::DropStreams) => {
                        info!(session = %self.session.id, "dropping server stream");
                        self.ended = true;
                        return abrupt_close();
                    }
                    Err(RecvError::Closed) => {
                        self.ended = true;
                        return None;
                    }
                    // List changes reach this stream through the session queue.
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                },
            }
        }
    }
}

impl Drop for SessionStream {
    fn drop(&mut self) {
        self.session.close_stream();
        let kind = self.session.kind;
        self.server.stats.update(|counters| match kind {
            SessionKind::StreamableHttp => {
                counters.get_streams_open = counters.get_streams_open.saturating_sub(1);
            }
            SessionKind::LegacySse => {
                counters.legacy_streams_open = counters.legacy_streams_open.saturating_sub(1);
            }
        });
        // A 2024-11-05 session lives exactly as long as its SSE stream.
        if kind == SessionKind::LegacySse {
            self.server.remove_session(&self.session.id);
        }
        info!(session = %self.session.id, ?kind, "server stream closed");
    }
}

/// Drives the response stream of one `subscriptions/listen` request over HTTP.
pub struct ListenStream {
    server: Arc<Server>,
    id: Value,
    wants_list_changed: bool,
    /// The acknowledged notifications: which tools and prompts list changes this listen gets.
    honoured: Value,
    preamble: Option<String>,
    pushes: broadcast::Receiver<Push>,
    keep_alive: Interval,
    ended: bool,
}

impl ListenStream {
    /// Subscribes to the server's pushes before the acknowledgement goes out, so no change
    /// between the two is lost.
    pub fn open(server: Arc<Server>, id: Value, honoured: &Value) -> Self {
        let wants_list_changed = honoured.get("resourcesListChanged") == Some(&Value::Bool(true));
        let mut acknowledgement = message_event(None, &rpc::acknowledged(&id, honoured));
        // The `end_listens` fault: the result follows the acknowledgement at once.
        let end_at_once = server.catalog().faults.end_listens;
        if end_at_once {
            acknowledgement.push_str(&message_event(None, &rpc::listen_closed(&id)));
        }
        server.stats.update(|counters| {
            counters.listens_opened += 1;
            counters.listens_open += 1;
            crate::stats::record_now(&mut counters.listens_opened_at_ms);
        });
        info!(%id, "listen stream opened");
        Self {
            pushes: server.subscribe_pushes(),
            keep_alive: ticker(Duration::from_millis(server.args.keepalive_ms)),
            preamble: Some(acknowledgement),
            server,
            id,
            wants_list_changed,
            honoured: honoured.clone(),
            ended: end_at_once,
        }
    }

    fn list_changed_chunk(&self, count: usize) -> Bytes {
        let event = message_event(None, &rpc::list_changed(Some(&self.id)));
        self.server.count_list_changed(count);
        Bytes::from(event.repeat(count))
    }

    /// One notification of every kind this listen gets, after pushes were missed.
    fn missed_chunk(&self) -> Option<Bytes> {
        let mut events = String::new();
        if self.wants_list_changed {
            events.push_str(&message_event(None, &rpc::list_changed(Some(&self.id))));
            self.server.count_list_changed(1);
        }
        for method in [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
        ] {
            if crate::definitions::listen_wants(&self.honoured, method) {
                let message = crate::definitions::notification(method, Some(&self.id));
                events.push_str(&message_event(None, &message));
            }
        }
        (!events.is_empty()).then(|| Bytes::from(events))
    }
}

impl Driver for ListenStream {
    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        // The acknowledgement goes out even when the stream is to end right after it.
        if let Some(preamble) = self.preamble.take() {
            return Some(Ok(Bytes::from(preamble)));
        }
        if self.ended {
            return None;
        }
        loop {
            tokio::select! {
                _ = self.keep_alive.tick() => {
                    return Some(Ok(Bytes::from_static(keep_alive_comment().as_bytes())));
                }
                push = self.pushes.recv() => match push {
                    Ok(Push::ListChanged(count)) if self.wants_list_changed => {
                        return Some(Ok(self.list_changed_chunk(count)));
                    }
                    // A listen gets the tools and prompts list changes it asked for, like stdio.
                    Ok(Push::EntriesChanged(method)) if crate::definitions::listen_wants(&self.honoured, method) => {
                        let event = message_event(None, &crate::definitions::notification(method, Some(&self.id)));
                        return Some(Ok(Bytes::from(event)));
                    }
                    // Missed pushes still mean the lists changed; one notification of each
                    // kind this listen asked for covers them.
                    Err(RecvError::Lagged(_)) => {
                        if let Some(chunk) = self.missed_chunk() {
                            return Some(Ok(chunk));
                        }
                    }
                    Ok(Push::DropStreams) => {
                        info!(id = %self.id, "dropping listen stream");
                        self.ended = true;
                        return abrupt_close();
                    }
                    Ok(Push::CloseListens { .. }) => {
                        // Over HTTP the result is the only graceful close.
                        info!(id = %self.id, "closing listen stream with its result");
                        self.ended = true;
                        let result = message_event(None, &rpc::listen_closed(&self.id));
                        return Some(Ok(Bytes::from(result)));
                    }
                    Err(RecvError::Closed) => {
                        self.ended = true;
                        return None;
                    }
                    Ok(Push::ListChanged(_) | Push::EntriesChanged(_)) => {}
                },
            }
        }
    }
}

impl Drop for ListenStream {
    fn drop(&mut self) {
        self.server.stats.update(|counters| {
            counters.listens_open = counters.listens_open.saturating_sub(1);
        });
        info!(id = %self.id, "listen stream closed");
    }
}
