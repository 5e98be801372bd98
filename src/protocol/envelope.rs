//! The JSON-RPC 2.0 envelope, for our socket and for the mirrored servers alike: requests,
//! answers, errors, notifications.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::{Method, Notification};

pub const JSONRPC_VERSION: &str = "2.0";

/// A request as the CLI sends it (`new`, one of our methods), or as the daemon sends a
/// mirrored server one of MCP's (`named`).
#[derive(Debug, Serialize)]
pub struct Request<'a, P> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: &'a P,
}

impl<'a, P: Serialize> Request<'a, P> {
    pub fn new<M: Method<Params = P>>(id: u64, params: &'a P) -> Request<'a, P> {
        Request::named(id, M::NAME, params)
    }

    pub fn named(id: u64, method: &'a str, params: &'a P) -> Request<'a, P> {
        Request {
            jsonrpc: JSONRPC_VERSION,
            id,
            method,
            params,
        }
    }
}

/// A request line as the daemon receives it, before it is checked: any field may be missing
/// or of the wrong type, and an `id` of `null` is told apart from no `id`.
#[derive(Debug, Default, Deserialize)]
pub struct IncomingRequest {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Value>,
}

/// A field that is present, even as `null`, is `Some`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// A checked request: `id` is `None` for a notification, which gets no answer.
#[derive(Debug)]
pub struct CheckedRequest {
    pub id: Option<Value>,
    pub method: String,
    pub params: Value,
}

impl IncomingRequest {
    /// The request, or the error answer for a message that is not one.
    pub fn check(self) -> Result<CheckedRequest, Box<Response>> {
        let valid_id = matches!(
            self.id,
            None | Some(Value::Number(_)) | Some(Value::String(_))
        );
        match (self.method, valid_id, self.jsonrpc) {
            (Some(Value::String(method)), true, Some(Value::String(version)))
                if version == JSONRPC_VERSION =>
            {
                Ok(CheckedRequest {
                    id: self.id,
                    method,
                    params: self.params.unwrap_or(Value::Null),
                })
            }
            _ => Err(Box::new(Response::failure(
                match valid_id {
                    true => self.id.unwrap_or(Value::Null),
                    false => Value::Null,
                },
                ErrorObject::new(
                    super::INVALID_REQUEST,
                    "not a JSON-RPC 2.0 request (needs \"jsonrpc\": \"2.0\", a string \"method\" and a number or string \"id\")",
                ),
            ))),
        }
    }
}

/// An answer as the daemon sends it. The result is JSON text already: a handler serializes
/// its typed result once, straight to text, and no tree of it is ever built.
#[derive(Debug, Clone, Serialize)]
pub struct Response {
    jsonrpc: &'static str,
    id: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorObject>,
}

impl Response {
    pub fn success(id: Value, result: Value) -> Response {
        // A `Value` always serializes; `null` would only stand in for an impossible failure.
        let text =
            serde_json::value::to_raw_value(&result).unwrap_or_else(|_| RawValue::NULL.to_owned());
        Response::answered(id, text)
    }

    /// An answer whose result is already JSON text.
    pub fn answered(id: Value, result: Box<RawValue>) -> Response {
        Response {
            jsonrpc: JSONRPC_VERSION,
            id,
            result: Some(result),
            error: None,
        }
    }

    pub fn failure(id: Value, error: ErrorObject) -> Response {
        Response {
            jsonrpc: JSONRPC_VERSION,
            id,
            result: None,
            error: Some(error),
        }
    }

    /// An answer with a result as the three parts of its text: the envelope before the
    /// result, the result's own text, and the envelope after it (what serializing the whole
    /// answer writes). A writer sends the result's text where it lies instead of copying it
    /// into a buffer of the whole (a page of the catalog is about 250 KB).
    pub fn around_result(&self) -> Option<(String, &str, &'static str)> {
        let result = self.result.as_ref()?.get();
        let mut head = format!("{{\"jsonrpc\":\"{}\",\"id\":", self.jsonrpc);
        // A `Value` always serializes.
        head.push_str(&serde_json::to_string(&self.id).unwrap_or_default());
        head.push_str(",\"result\":");
        Some((head, result, "}"))
    }

    /// The result's text, or the error, for a face that reshapes answers (the HTTP face); an
    /// answer without either is a `null` result.
    pub fn into_outcome(self) -> Result<Box<RawValue>, ErrorObject> {
        match (self.result, self.error) {
            (Some(result), _) => Ok(result),
            (None, Some(error)) => Err(error),
            (None, None) => Ok(RawValue::NULL.to_owned()),
        }
    }
}

/// A JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<ErrorData>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> ErrorObject {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: ErrorData) -> ErrorObject {
        self.data = Some(data);
        self
    }
}

/// What an error is about, for scripts: the server, the URI, what was not found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorData {
    /// What was not found (`"server"`), when the error is a lookup that found nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_found: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// The server could not be reached (a read that found it down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<bool>,
}

/// A notification as the daemon sends it: to its clients (`new`, one of ours), or to a
/// mirrored server (`named`, one of MCP's).
#[derive(Debug, Serialize)]
pub struct NotificationMessage<'a, P> {
    jsonrpc: &'static str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
}

impl<'a, P: Serialize> NotificationMessage<'a, P> {
    pub fn new<N: Notification<Params = P>>(params: Option<&'a P>) -> NotificationMessage<'a, P> {
        NotificationMessage::named(N::NAME, params)
    }

    pub fn named(method: &'a str, params: Option<&'a P>) -> NotificationMessage<'a, P> {
        NotificationMessage {
            jsonrpc: JSONRPC_VERSION,
            method,
            params,
        }
    }
}

/// Whatever the daemon sends the CLI: an answer (`id`, and `result` or `error`) or a
/// notification (`method`, `params`).
#[derive(Debug, Deserialize)]
pub struct ServerMessage {
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Option<Value>,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub error: Option<ErrorObject>,
}

impl ServerMessage {
    pub fn is_notification(&self) -> bool {
        self.method.is_some()
    }

    /// The params of notification `N`, when this is one.
    pub fn notification<N: Notification>(self) -> Option<Result<N::Params, serde_json::Error>> {
        if self.method.as_deref() != Some(N::NAME) {
            return None;
        }
        Some(serde_json::from_value(self.params.unwrap_or(Value::Null)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parts around a result are the answer's own text, whatever its id.
    #[test]
    fn the_parts_around_a_result_are_the_answer_serialized() {
        let result = RawValue::from_string(r#"{"resources":[{"uri":"a://b"}]}"#.into()).unwrap();
        for id in [Value::from(7), Value::from("page \"2\" \u{1}"), Value::Null] {
            let answer = Response::answered(id, result.clone());
            let (head, text, tail) = answer.around_result().expect("a result");
            assert_eq!(
                format!("{head}{text}{tail}"),
                serde_json::to_string(&answer).unwrap()
            );
        }
        let failed = Response::failure(Value::from(1), ErrorObject::new(-32602, "no"));
        assert!(failed.around_result().is_none());
    }
}
