//! One actor per server, reached only through its handle: the handle, its commands and the live status it publishes.
//!
//! `actor/` is the state machine (connect, walk, listen for changes, pace walks, back off),
//! `state.rs` its states and events, `pacing.rs` its waits (walk pace, poll pace, listen retry,
//! poll jitter); the reconnect backoff is the crate's one `upstream::Backoff`.

mod actor;
mod commands;
mod fleet;
mod handle;
mod pacing;
mod state;

/// What this process knows about a session right now, beside what the database records:
/// the socket protocol's own type, so what the session publishes is what clients read.
pub use crate::protocol::LiveStatus;
pub use commands::{ReadError, ReadReply, RefreshReply, Refreshed, SessionCommand, SettledState};
pub use handle::{SessionClient, SessionHandle};
