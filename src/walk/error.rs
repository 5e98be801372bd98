//! How a walk fails (`WalkError`): the server's error, the store's, or a guard's.

use crate::store::StoreError;
use crate::upstream::McpError;

/// Why a walk did not complete.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// The connection broke; the session must reconnect before walking again.
    #[error("{0}")]
    Connection(McpError),
    /// The server answered, but the walk could not complete (an error, a guard tripped).
    #[error("{0}")]
    Failed(String),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl From<McpError> for WalkError {
    fn from(error: McpError) -> Self {
        if error.is_connection_lost() {
            WalkError::Connection(error)
        } else {
            WalkError::Failed(error.to_string())
        }
    }
}
