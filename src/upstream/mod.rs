//! The protocol engine: JSON-RPC and MCP types, transports and SSE; only this module knows MCP wire details.

mod backoff;
mod client;
mod errors;
mod events;
mod http;
mod legacy_sse;
mod page;
mod rpc;
pub mod sse;
mod stdio;

pub use backoff::{parse_retry_after, with_jitter, Backoff, MAX_SERVER_DELAY, RECONNECT_FLOOR};
pub use client::{Era, PushChannel, ServerHello, Session};
pub use errors::{McpError, RpcError, MAX_MESSAGE_BYTES};
pub use events::{channel as event_channel, EventSink, EventStream, ServerEvent};
pub use page::Page;
