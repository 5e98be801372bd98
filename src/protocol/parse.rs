//! A method's params deserialized (`parse_params`) or refused with the field named
//! (`InvalidParams`, JSON-RPC `-32602`).

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Params that do not fit their method; the message names the field (JSON-RPC `-32602`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidParams(pub String);

/// Deserializes a method's params; absent params are an empty object.
pub fn parse_params<P: DeserializeOwned>(params: Value) -> Result<P, InvalidParams> {
    let params = match params {
        Value::Null => Value::Object(serde_json::Map::new()),
        other => other,
    };
    serde_path_to_error::deserialize(params).map_err(|error| {
        let path = error.path().to_string();
        match path.as_str() {
            // A missing field is reported on the object, and the message names it.
            "." => InvalidParams(error.into_inner().to_string()),
            _ => InvalidParams(format!("`{path}`: {}", error.into_inner())),
        }
    })
}
