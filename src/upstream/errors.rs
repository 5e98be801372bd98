//! How talking to a server fails (`McpError`, a server's own `RpcError`), and the largest message we take (`MAX_MESSAGE_BYTES`) past which it does.

use std::time::Duration;

use serde_json::Value;

/// The largest single message we accept from a server (a line on stdio, a body, an SSE
/// event); a server that sends more is cut off, so its size limits stay its own problem.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// A JSON-RPC error object as a server sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("`{method}` timed out after {seconds:.1}s")]
    Timeout { method: String, seconds: f64 },
    #[error("`{method}` failed with error {}: {}", .error.code, .error.message)]
    Rpc { method: String, error: RpcError },
    #[error("connection closed: {0}")]
    Closed(String),
    #[error("HTTP {status} from server: {body}")]
    Http {
        status: u16,
        body: String,
        /// The `Retry-After` of a 429 or 503 answer.
        retry_after: Option<Duration>,
    },
    #[error("the server no longer knows our session: {0}")]
    SessionExpired(String),
    #[error("{0}")]
    Transport(String),
    /// A stateless-era server recognised us but refused (header mismatch, missing capability).
    #[error("{0}")]
    StatelessRefusal(String),
    #[error("protocol violation: {0}")]
    Protocol(String),
}

impl McpError {
    /// The error for a server message past `MAX_MESSAGE_BYTES`.
    pub fn too_large(what: &str) -> McpError {
        McpError::Protocol(format!(
            "the server sent {what} larger than {} MiB",
            MAX_MESSAGE_BYTES >> 20
        ))
    }

    /// The JSON-RPC error code, when the server answered with an error object.
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            McpError::Rpc { error, .. } => Some(error.code),
            _ => None,
        }
    }

    /// How long the server asked us to wait (`Retry-After` on 429 or 503), for a caller's
    /// `Backoff::next_delay_honouring`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            McpError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// True when the connection itself is unusable and a new one is needed.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            McpError::Closed(_) | McpError::Transport(_) | McpError::SessionExpired(_)
        )
    }
}
