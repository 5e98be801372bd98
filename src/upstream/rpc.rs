//! JSON-RPC 2.0 plumbing shared by the transports: request ids, waiting callers and routing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::oneshot;

use super::{EventSink, McpError, RpcError, ServerEvent};
use crate::protocol as wire;

/// One message from the server, classified.
pub enum Incoming {
    Response {
        id: Value,
        outcome: Result<RawResult, RpcError>,
    },
    Notification {
        method: String,
        params: Value,
    },
    Request {
        id: Value,
        method: String,
    },
}

/// A response's `result` as the server wrote it: whoever asked parses it, into the types it
/// needs (a listed page keeps each entry's own bytes, never building a `Value` per entry).
pub type RawResult = Box<RawValue>;

/// A JSON-RPC message with its `result` left unparsed. Any message this cannot take (not an
/// object, a repeated key, a `method` that is not a string) goes through `classify`.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
    #[serde(default)]
    result: Option<RawResult>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

/// A field that is present, even as `null` (`Option<Value>` alone reads `null` as absent).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// Parses and classifies one message from its text; an error when the text is not JSON.
pub fn parse_message(text: &str) -> Result<Option<Incoming>, serde_json::Error> {
    let Ok(envelope) = serde_json::from_str::<Envelope<'_>>(text) else {
        return serde_json::from_str::<Value>(text).map(classify);
    };
    let Envelope {
        method,
        id,
        params,
        result,
        error,
    } = envelope;
    let incoming = match (method, id) {
        (Some(method), Some(id)) if !id.is_null() => Incoming::Request {
            id,
            method: method.into_owned(),
        },
        (Some(method), _) => Incoming::Notification {
            method: method.into_owned(),
            params: params.unwrap_or(Value::Null),
        },
        (None, Some(id)) => Incoming::Response {
            id,
            outcome: match error {
                Some(error) => Err(parse_error_object(error)),
                None => Ok(result.unwrap_or_else(|| RawValue::NULL.to_owned())),
            },
        },
        (None, None) => return Ok(None),
    };
    Ok(Some(incoming))
}

/// Parses a body that holds one message or a batch of them.
pub fn parse_body(text: &str) -> Result<Vec<Incoming>, serde_json::Error> {
    if text.trim_start().starts_with('[') {
        let batch: Vec<&RawValue> = serde_json::from_str(text)?;
        let mut messages = Vec::with_capacity(batch.len());
        for message in batch {
            messages.extend(parse_message(message.get())?);
        }
        return Ok(messages);
    }
    Ok(parse_message(text)?.into_iter().collect())
}

/// The text of a `Value` as a raw result (serializing a `Value` cannot fail).
fn raw_of(value: &Value) -> RawResult {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// Classifies a message already parsed into a `Value`.
pub fn classify(message: Value) -> Option<Incoming> {
    let Value::Object(mut object) = message else {
        return None;
    };
    let method = object
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let id = object.remove("id");
    match (method, id) {
        (Some(method), Some(id)) if !id.is_null() => Some(Incoming::Request { id, method }),
        (Some(method), _) => Some(Incoming::Notification {
            method,
            params: object.remove("params").unwrap_or(Value::Null),
        }),
        (None, Some(id)) => {
            let outcome = match object.remove("error") {
                Some(error) => Err(parse_error_object(error)),
                None => Ok(raw_of(&object.remove("result").unwrap_or(Value::Null))),
            };
            Some(Incoming::Response { id, outcome })
        }
        (None, None) => None,
    }
}

/// A server's error object as we keep it: the one place a JSON-RPC error from any transport
/// passes, so its message and data are scrubbed and bounded here, before anything logs,
/// stores or echoes them.
fn parse_error_object(error: Value) -> RpcError {
    let data = error.get("data").cloned().map(|mut data| {
        crate::redact::scrub_server_json(&mut data);
        data
    });
    RpcError {
        code: error
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(crate::protocol::INTERNAL_ERROR),
        message: crate::redact::scrub_server_text(
            error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)"),
        ),
        data,
    }
}

/// A message of ours as a `Value` (each envelope always serializes; `null` only stands in for
/// an impossible failure).
fn to_message(envelope: &impl serde::Serialize) -> Value {
    serde_json::to_value(envelope).unwrap_or(Value::Null)
}

pub fn request_message(id: u64, method: &str, params: Value) -> Value {
    to_message(&wire::Request::named(id, method, &params))
}

pub fn notification_message(method: &str, params: Value) -> Value {
    to_message(&wire::NotificationMessage::named(method, Some(&params)))
}

/// The answer we give to a request from the server: `ping` gets `{}`, others are not supported.
pub fn answer_server_request(id: Value, method: &str) -> Value {
    let answer = if method == "ping" {
        wire::Response::success(id, Value::Object(serde_json::Map::new()))
    } else {
        wire::Response::failure(
            id,
            wire::ErrorObject::new(
                wire::METHOD_NOT_FOUND,
                format!("client does not handle {method}"),
            ),
        )
    };
    to_message(&answer)
}

/// Forwards server notifications we act on; everything else is logged and ignored.
pub fn route_notification(server: &str, method: &str, params: &Value, events: &EventSink) {
    match method {
        "notifications/resources/list_changed" => events.list_changed(),
        "notifications/tools/list_changed" => events.kind_list_changed(crate::protocol::Kind::Tool),
        "notifications/prompts/list_changed" => {
            events.kind_list_changed(crate::protocol::Kind::Prompt)
        }
        // The acknowledgement lists what the server agreed to send; without list changes the
        // listen is of no use to a mirror.
        "notifications/subscriptions/acknowledged" => {
            events.send(ServerEvent::ListenAcknowledged {
                // Any kind acknowledged makes the listen useful; kinds it leaves out are
                // covered by the session's scheduled walks.
                resources_list_changed: [
                    "resourcesListChanged",
                    "toolsListChanged",
                    "promptsListChanged",
                ]
                .iter()
                .any(|key| params["notifications"][key] == Value::Bool(true)),
            })
        }
        // The transport ends the request it names (see `cancelled_request`); the request's
        // owner reports what that means.
        "notifications/cancelled" => {
            tracing::debug!(server, request = %params["requestId"], "the server cancelled a request")
        }
        other => tracing::debug!(server, method = other, "ignoring notification"),
    }
}

/// The id of the request a server's `notifications/cancelled` ends, if it is one.
pub fn cancelled_request<'a>(method: &str, params: &'a Value) -> Option<&'a Value> {
    (method == "notifications/cancelled")
        .then(|| params.get("requestId"))
        .flatten()
}

/// How a request the server cancelled fails for its caller.
pub fn cancelled_error() -> RpcError {
    RpcError {
        code: REQUEST_CANCELLED,
        message: "the server cancelled the request".into(),
        data: None,
    }
}

/// The error code we give a request the server cancelled (JSON-RPC has none; LSP's
/// `RequestCancelled`).
pub const REQUEST_CANCELLED: i64 = -32800;

/// Runs `exchange` within `timeout` (none for long-lived requests such as a listen).
pub async fn within<T>(
    method: &str,
    timeout: Option<Duration>,
    exchange: impl std::future::Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    match timeout {
        None => exchange.await,
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(McpError::Timeout {
                    method: method.to_string(),
                    seconds: limit.as_secs_f64(),
                })
            }),
    }
}

/// Callers waiting for responses, by request id.
#[derive(Default)]
pub struct PendingRequests {
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Result<RawResult, RpcError>>>>,
}

impl PendingRequests {
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn register(&self, id: u64) -> oneshot::Receiver<Result<RawResult, RpcError>> {
        let (sender, receiver) = oneshot::channel();
        self.lock().insert(id, sender);
        receiver
    }

    /// Sends request `id` with `send` and waits (within `timeout`) for the answer a reader task
    /// routes back; `gone` describes the connection if it ends first.
    pub async fn exchange(
        &self,
        id: u64,
        method: &str,
        timeout: Option<Duration>,
        send: impl std::future::Future<Output = Result<(), McpError>>,
        gone: impl FnOnce() -> String,
    ) -> Result<RawResult, McpError> {
        let waiter = self.register(id);
        let exchange = async {
            send.await?;
            let outcome = waiter.await.map_err(|_| McpError::Closed(gone()))?;
            outcome.map_err(|error| McpError::Rpc {
                method: method.to_string(),
                error,
            })
        };
        let outcome = within(method, timeout, exchange).await;
        if outcome.is_err() {
            self.forget(id);
        }
        outcome
    }

    pub fn forget(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Hands a response to its caller; false when nobody waits for that id.
    pub fn complete(&self, id: &Value, outcome: Result<RawResult, RpcError>) -> bool {
        let Some(number) = id.as_u64() else {
            return false;
        };
        match self.lock().remove(&number) {
            Some(sender) => {
                let _ = sender.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Drops every waiting caller, which makes their requests fail as closed.
    pub fn fail_all(&self) {
        self.lock().clear();
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<RawResult, RpcError>>>> {
        // A poisoned map only means a panic elsewhere; the map itself is still consistent.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn our_messages_to_a_server_are_the_protocol_envelopes() {
        let params = json!({"cursor": "c"});
        assert_eq!(
            request_message(7, "resources/list", params.clone()),
            json!({"jsonrpc": "2.0", "id": 7, "method": "resources/list", "params": params})
        );
        assert_eq!(
            notification_message("notifications/initialized", Value::Null),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": null})
        );
        assert_eq!(
            answer_server_request(json!("p1"), "ping"),
            json!({"jsonrpc": "2.0", "id": "p1", "result": {}})
        );
        assert_eq!(
            answer_server_request(json!(3), "sampling/createMessage"),
            json!({"jsonrpc": "2.0", "id": 3, "error": {
                "code": crate::protocol::METHOD_NOT_FOUND,
                "message": "client does not handle sampling/createMessage"
            }})
        );
    }
}
