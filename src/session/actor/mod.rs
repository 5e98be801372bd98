//! The session actor as a state machine: `next_event` turns every source into one `Event`, `handle` moves the `State`.
//!
//! Sources: the stop signal, commands, and whatever the current state waits on (`state.rs`:
//! the backoff timer, a connection attempt, the server's events, the debounce, throttle, poll
//! and resync timers, a walk in flight, pings, the listen retry).

mod state_machine;
mod walks;

pub(super) use state_machine::{Actor, Inbox};
