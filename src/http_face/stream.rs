//! The HTTP face's long-lived SSE streams (the handshake era's GET stream, the 2026-07-28
//! `subscriptions/listen` answer): one `list_changed` of each kind a burst of committed swaps
//! touched (resources, the catalog's tools, its prompts), keep-alive comments, and an end at shutdown. Each holds what it
//! counts against (a permit of the bounded stream count, its client's share, its session)
//! until it ends.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::{broadcast, watch};
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};

use crate::answer::View;
use crate::store::CatalogChanged;

/// Keep-alive comments on open streams, so a vanished client is noticed.
const STREAM_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// One SSE `message` event carrying `json`.
pub(super) fn message_event(json: &str) -> String {
    format!("event: message\ndata: {json}\n\n")
}

/// A complete SSE answer of one or more messages (a POST answered as a stream).
pub(super) fn sse_response(status: StatusCode, events: String) -> Response {
    let mut response = (status, events).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// What a stream sends besides keep-alives.
pub(super) struct StreamPlan {
    /// Messages sent at once (the listen acknowledgement).
    pub first: Vec<String>,
    /// The message sent for each burst of resource changes, if the client asked for them.
    pub on_change: Option<String>,
    /// The messages for a burst of tool changes and of prompt changes, if asked for.
    pub on_tools: Option<String>,
    pub on_prompts: Option<String>,
    /// The message sent when the daemon stops (the listen request's final result).
    pub at_end: Option<String>,
    /// Closed when the stream's session ends (a GET stream's); the stream ends with it.
    pub session_ended: Option<watch::Receiver<()>>,
    /// Whose stream it is: only changes of servers and kinds it names wake it.
    pub view: View,
}

struct Driver {
    pending: VecDeque<String>,
    on_change: Option<String>,
    on_tools: Option<String>,
    on_prompts: Option<String>,
    at_end: Option<String>,
    changes: broadcast::Receiver<CatalogChanged>,
    shutdown: watch::Receiver<bool>,
    session_ended: Option<watch::Receiver<()>>,
    view: View,
    keep_alive: Interval,
    done: bool,
    /// Given back when the stream ends.
    _holds: Box<dyn Send>,
}

impl Driver {
    /// The next chunk to send; `None` ends the stream.
    async fn next_chunk(&mut self) -> Option<String> {
        if let Some(message) = self.pending.pop_front() {
            return Some(message_event(&message));
        }
        if self.done {
            return None;
        }
        loop {
            if *self.shutdown.borrow() {
                return self.finish();
            }
            tokio::select! {
                changed = self.shutdown.changed() => {
                    if changed.is_err() {
                        return self.finish();
                    }
                }
                event = self.changes.recv() => {
                    // A burst of swaps is one notification per kind: list_changed carries
                    // nothing. Only a change the view names is announced (templates swap with
                    // resources, as kind `Resource`).
                    let view = &self.view;
                    let burst = crate::store::drain_changes(event, &mut self.changes, |change| {
                        view.names(&change.server, change.kind)
                    });
                    if burst.closed && !burst.changed {
                        return self.finish();
                    }
                    let messages = [
                        (burst.resources, &self.on_change),
                        (burst.tools, &self.on_tools),
                        (burst.prompts, &self.on_prompts),
                    ];
                    for (_, message) in messages.into_iter().filter(|(changed, _)| *changed) {
                        self.pending.extend(message.clone());
                    }
                    if let Some(message) = self.pending.pop_front() {
                        return Some(message_event(&message));
                    }
                }
                _ = session_ended(&mut self.session_ended) => return self.finish(),
                _ = self.keep_alive.tick() => return Some(": keep-alive\n\n".to_string()),
            }
        }
    }

    fn finish(&mut self) -> Option<String> {
        self.done = true;
        self.at_end.take().map(|message| message_event(&message))
    }
}

/// Resolves when the session is gone; never for a stream without one.
async fn session_ended(ended: &mut Option<watch::Receiver<()>>) {
    match ended {
        Some(ended) => while ended.changed().await.is_ok() {},
        None => std::future::pending().await,
    }
}

/// An open stream answering with `plan`, until the client goes away or the daemon stops.
pub(super) fn open(
    plan: StreamPlan,
    changes: broadcast::Receiver<CatalogChanged>,
    shutdown: watch::Receiver<bool>,
    holds: Box<dyn Send>,
) -> Response {
    let mut keep_alive = interval_at(Instant::now() + STREAM_KEEP_ALIVE, STREAM_KEEP_ALIVE);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let driver = Driver {
        pending: plan.first.into(),
        on_change: plan.on_change,
        on_tools: plan.on_tools,
        on_prompts: plan.on_prompts,
        at_end: plan.at_end,
        changes,
        shutdown,
        session_ended: plan.session_ended,
        view: plan.view,
        keep_alive,
        done: false,
        _holds: holds,
    };
    let chunks = futures_util::stream::unfold(driver, |mut driver| async move {
        let chunk = driver.next_chunk().await?;
        Some((Ok::<_, Infallible>(Bytes::from(chunk)), driver))
    });
    let mut response = Response::new(Body::from_stream(chunks));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
