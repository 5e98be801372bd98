//! What a session's handle asks of its actor (`SessionCommand`) and the answers: a refresh's `Refreshed`, a read's `ReadError`.

use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::store::{SwapOutcome, WalkReport};
use crate::walk::WalkSummary;

pub type RefreshReply = oneshot::Sender<Result<Refreshed, String>>;
pub type ReadReply = oneshot::Sender<Result<Value, ReadError>>;

pub enum SessionCommand {
    /// Walk again now; with a reply, answer after that walk's swap committed (or failed).
    Refresh { reply: Option<RefreshReply> },
    /// `resources/read` through the live session.
    Read { uri: String, reply: ReadReply },
}

/// Why a read through a session failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    #[error("server {server} is not connected ({reason})")]
    Offline { server: String, reason: String },
    #[error("server {server} answered error {code}: {message}")]
    Server {
        server: String,
        code: i64,
        message: String,
    },
    #[error("reading from server {server} failed: {reason}")]
    Failed { server: String, reason: String },
}

/// What a refresh found once it settled: the server's state, and what the walk changed (all
/// zero when there was nothing to walk).
#[derive(Debug, Clone, Copy)]
pub struct Refreshed {
    pub state: SettledState,
    pub swap: SwapOutcome,
    pub report: WalkReport,
}

/// The states a refresh may settle in without failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettledState {
    /// A walk committed its swap.
    Synced,
    /// The server declares no resources capability: nothing to walk, and not an error.
    NoResources,
}

impl Refreshed {
    pub(super) fn walked(summary: &WalkSummary) -> Refreshed {
        Refreshed {
            state: SettledState::Synced,
            swap: summary.swap,
            report: summary.report,
        }
    }

    /// A server followed through a bucket: its updates arrive as published, nothing to walk.
    pub(super) fn followed() -> Refreshed {
        Refreshed {
            state: SettledState::Synced,
            swap: SwapOutcome::default(),
            report: WalkReport::default(),
        }
    }

    pub(super) fn no_resources() -> Refreshed {
        Refreshed {
            state: SettledState::NoResources,
            swap: SwapOutcome::default(),
            report: WalkReport::default(),
        }
    }
}
