//! The HTTP face: the socket's MCP face served over Streamable HTTP at `/mcp` (both eras), with
//! bearer tokens, origin checks and bounds, so one mirror can be the upstream of a fleet; and
//! `GET /metrics` (also alone on `[http] metrics_listen`).
//!
//! Requests go through the socket's own `socket::answer_request`; this module adds what HTTP
//! needs around it: who may ask (`access`), the 2026-07-28 headers and `server/discover`,
//! handshake-era sessions, the caching hints, the GET and `subscriptions/listen` streams
//! (`stream`), and withholding a `private` server's entries from token clients.

mod access;
mod endpoint;
mod face;
mod face_state;
mod limits;
mod sessions;
mod stall;
mod stream;

pub use face::{bind, serve, Face};
pub use face_state::HttpFace;
