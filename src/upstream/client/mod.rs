//! An MCP client session in either era: connect, detect the era (`server/discover`, else
//! `initialize`), then list, read, ping and listen for changes.

mod handshake;
mod session;

pub use crate::protocol::{Era, PushChannel};
pub use session::{ServerHello, Session};
