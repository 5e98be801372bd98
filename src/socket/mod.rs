//! The Unix socket API: JSON-RPC 2.0, one JSON object per line, MCP-compatible methods plus `catalog/*`.
//!
//! `serve` binds the socket and runs the accept loop, `connection` serves one client,
//! `dispatch` answers one request, `readahead` reads the next page for a client paging on.

mod connection;
mod connection_state;
mod dispatch;
mod readahead;
mod serve;

pub(crate) use connection_state::ConnectionState;
pub(crate) use dispatch::answer_request;
pub use serve::{bind, record_socket_database, serve};
