//! How a client command fails (`ClientError`) and the exit codes that tell outcomes apart for scripts.

use std::path::PathBuf;

use crate::protocol::{ErrorData, INVALID_PARAMS, RESOURCE_NOT_FOUND};
use crate::store::StoreError;

/// Exit codes that tell outcomes apart for scripts.
pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;
pub const EXIT_NOT_FOUND: u8 = 4;
pub const EXIT_UNAUTHORIZED: u8 = 5;

/// How a client command failed; each has its exit code.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the daemon at {path}: {reason}\nis `mcp-mirror serve` running? start it with `mcp-mirror serve --config daemon.toml`, or pass --socket PATH")]
    Unreachable { path: PathBuf, reason: String },
    #[error("cannot reach the mirror at {url}: {reason}\nis its `[http] listen` on, and is the URL right (it ends in /mcp)?")]
    RemoteUnreachable { url: String, reason: String },
    #[error("the mirror at {url} refused the request: {reason}")]
    Unauthorized { url: String, reason: String },
    #[error("the daemon answered with error {code}: {message}")]
    Remote {
        code: i64,
        message: String,
        data: Option<ErrorData>,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Usage(String),
    #[error("cannot tell which database the daemon at {socket} uses: it left no record we can read at {record}; pass --database PATH to read one")]
    UnknownDatabase { socket: PathBuf, record: PathBuf },
    #[error("cannot read the database {path} either: {source}")]
    Offline { path: PathBuf, source: StoreError },
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Protocol(String),
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Unreachable { .. }
            | ClientError::RemoteUnreachable { .. }
            | ClientError::Offline { .. }
            | ClientError::UnknownDatabase { .. } => EXIT_UNREACHABLE,
            ClientError::NotFound(_) => EXIT_NOT_FOUND,
            ClientError::Unauthorized { .. } => EXIT_UNAUTHORIZED,
            ClientError::Remote { code, data, .. }
                if *code == RESOURCE_NOT_FOUND
                    || data.as_ref().is_some_and(|data| data.not_found.is_some()) =>
            {
                EXIT_NOT_FOUND
            }
            ClientError::Usage(_) => EXIT_USAGE,
            // Invalid params are what the user typed: a raw query FTS5 rejects, a bad cursor.
            ClientError::Remote { code, .. } if *code == INVALID_PARAMS => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }
}
