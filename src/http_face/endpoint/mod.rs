//! `/mcp` over Streamable HTTP: POSTed JSON-RPC in both eras (the 2026-07-28 headers checked,
//! `server/discover`, `subscriptions/listen`; `initialize` with `Mcp-Session-Id`), the GET
//! stream, DELETE of a session; answers shaped for the client (caching hints, withheld
//! `private` entries) around the socket's own `socket::answer_request`. `handlers`: the
//! POST, GET and DELETE handlers and what both eras share; `modern`: the 2026-07-28 era;
//! `legacy`: the handshake era and its sessions.

mod handlers;
mod legacy;
mod modern;

pub(super) use handlers::post_message;
pub(super) use legacy::{delete_session, get_stream};
