//! The record a daemon leaves next to its socket (`SOCKET.json`): which database it serves,
//! so a client that finds the socket dead reads that database and no other.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketRecord {
    /// The database the daemon serving this socket uses.
    pub database: PathBuf,
    pub pid: u32,
}

/// Where the record of the socket at `socket` lives: beside it, the name plus `.json`.
pub fn socket_record_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_os_string();
    name.push(".json");
    PathBuf::from(name)
}
