//! JSON-RPC 2.0 framing: parsing incoming messages, building results, errors and notifications.

use serde_json::{json, Value};

/// The `_meta` key that tags a notification with the listen request that opened its stream.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// Prefix of the ids of the `ping` requests this server sends, so answers can be counted.
pub const SERVER_PING_PREFIX: &str = "fixture-ping-";

/// A JSON-RPC error to put in a response, with the HTTP status it travels with.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
    /// 200 unless the spec names a status (400 for malformed modern requests, 404 for an
    /// unknown method in the modern era); only the HTTP transports read it.
    pub status: u16,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
            status: 200,
        }
    }

    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(-32602, message)
    }

    /// -32020: an HTTP header is missing or disagrees with the body (always HTTP 400).
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::new(-32020, format!("Header mismatch: {}", message.into())).with_status(400)
    }
}

/// A JSON-RPC message sorted by kind.
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    Response {
        id: Value,
    },
}

/// Parses one message and sorts it by kind, or says why it is not valid JSON-RPC.
pub fn parse_message(bytes: &[u8]) -> Result<Incoming, (Value, RpcError)> {
    let message: Value = serde_json::from_slice(bytes).map_err(|error| {
        let error = RpcError::new(-32700, format!("Parse error: {error}")).with_status(400);
        (Value::Null, error)
    })?;
    let Value::Object(mut object) = message else {
        let error = RpcError::new(-32600, "expected a JSON-RPC object").with_status(400);
        return Err((Value::Null, error));
    };
    let id = object.remove("id");
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let error = RpcError::new(-32600, "jsonrpc must be \"2.0\"").with_status(400);
        return Err((id.unwrap_or(Value::Null), error));
    }
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Ok(Incoming::Request {
            id,
            method,
            params: object.remove("params"),
        }),
        (Some(Value::String(method)), None) => Ok(Incoming::Notification {
            method,
            params: object.remove("params"),
        }),
        (None, Some(id)) if object.contains_key("result") || object.contains_key("error") => {
            Ok(Incoming::Response { id })
        }
        (_, id) => Err((
            id.unwrap_or(Value::Null),
            RpcError::new(-32600, "not a JSON-RPC request, notification or response")
                .with_status(400),
        )),
    }
}

pub fn error_message(id: Value, error: &RpcError) -> Value {
    let mut body = json!({"code": error.code, "message": error.message});
    if let Some(data) = &error.data {
        body["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": body})
}

pub fn result_message(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// `notifications/resources/list_changed`, tagged with the listen request's id when it
/// travels on a `subscriptions/listen` stream.
pub fn list_changed(subscription: Option<&Value>) -> String {
    let mut message = json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"});
    if let Some(subscription) = subscription {
        message["params"] = json!({"_meta": {SUBSCRIPTION_ID: subscription}});
    }
    message.to_string()
}

/// The first message of a listen stream: which of the requested notifications the server honours.
pub fn acknowledged(subscription: &Value, honoured: &Value) -> String {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUBSCRIPTION_ID: subscription}, "notifications": honoured},
    })
    .to_string()
}

/// The result that ends a listen stream gracefully.
pub fn listen_closed(subscription: &Value) -> String {
    let result = json!({"resultType": "complete", "_meta": {SUBSCRIPTION_ID: subscription}});
    result_message(subscription.clone(), result).to_string()
}

/// The stdio-only way for a server to end a listen: `notifications/cancelled` naming its id.
pub fn listen_cancelled(subscription: &Value) -> String {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {
            "_meta": {SUBSCRIPTION_ID: subscription},
            "requestId": subscription,
            "reason": "the test server ended the subscription",
        },
    })
    .to_string()
}

/// A `ping` request from the server to the client.
pub fn server_ping(number: u64) -> String {
    json!({"jsonrpc": "2.0", "id": format!("{SERVER_PING_PREFIX}{number}"), "method": "ping"})
        .to_string()
}

/// Whether a response from the client answers one of this server's pings.
pub fn answers_server_ping(id: &Value) -> bool {
    id.as_str()
        .is_some_and(|id| id.starts_with(SERVER_PING_PREFIX))
}
