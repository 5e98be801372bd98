//! The session's states and what each waits on: every source becomes one `Event`.
//!
//! A state owns its futures (a connection attempt, a walk, a ping), so leaving a state drops
//! them: an abandoned walk or connection attempt ends with the state that ran it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::pacing::PollPace;
use super::{RefreshReply, SessionCommand};
use crate::upstream::{EventStream, McpError, ServerEvent, Session};
use crate::walk::{WalkError, WalkSummary};

/// A server that never pauses still gets walked: a debounce ends at the latest this many
/// debounce periods (and at least a second) after it began.
const DEBOUNCE_CEILING_FACTOR: u32 = 20;
const DEBOUNCE_CEILING_MIN: Duration = Duration::from_secs(1);

/// Everything that can happen to a session, whatever its source.
pub(super) enum Event {
    Command(SessionCommand),
    /// The backoff is over: connect again.
    RetryDue,
    /// A connection attempt finished.
    Connected(Result<Arc<Session>, McpError>),
    /// The connection reported something; `None` when its event stream ended.
    Server(Option<ServerEvent>),
    /// A walk is due: changes paused after a debounce, a throttled walk's time came, or the
    /// poll or resync timer fired.
    WalkDue,
    Walked(Result<WalkSummary, WalkError>),
    PingDue,
    Pinged(Result<(), McpError>),
    /// Time to reopen a listen stream that failed to reopen.
    RelistenDue,
}

/// Where the session stands.
pub(super) enum State {
    /// Waiting out the backoff after a failure; `problem` says what failed, for reads meanwhile.
    /// The wait honours a `Retry-After` the server sent with the failure.
    BackingOff {
        retry_at: Instant,
        problem: String,
    },
    /// A connection attempt is under way; its events queue in `events` until it succeeds.
    Connecting {
        attempt: BoxFuture<'static, Result<Arc<Session>, McpError>>,
        events: EventStream,
        problem: String,
    },
    Connected(Box<Link>),
    /// Only while an event is being handled, and after the stop.
    Stopped,
}

/// One live connection and what runs on it.
pub(super) struct Link {
    pub(super) session: Arc<Session>,
    pub(super) events: EventStream,
    /// False when the server declares no resources capability: there is nothing to walk.
    pub(super) mirrors: bool,
    /// The kinds this session walks: configured (`mirror`) and declared by the server.
    pub(super) kinds: Vec<crate::protocol::Kind>,
    /// Kinds whose lists changed and await the next walk; empty means "every kind".
    pub(super) pending: Vec<crate::protocol::Kind>,
    /// A walked kind the server cannot push changes of: scheduled walks come at the poll pace.
    pub(super) kind_cannot_push: bool,
    pub(super) phase: Phase,
    pub(super) ping: Ping,
    pub(super) push: Push,
    pub(super) poll: PollPace,
    /// Walks abandoned in a row because the list changed while they ran.
    pub(super) restarts_in_a_row: u32,
}

/// What a connected session is doing about its catalog.
pub(super) enum Phase {
    /// Waiting for the next scheduled walk (never, for a server with nothing to walk).
    Idle {
        next_walk: Option<Instant>,
    },
    /// A change arrived: walk once changes pause for the debounce period, or at the ceiling.
    Debouncing {
        quiet_at: Instant,
        ceiling: Instant,
    },
    /// Changes arrived faster than this server may be walked: one walk is held back until
    /// `until` (the walk pace), and every change meanwhile rides along with it.
    Throttled {
        until: Instant,
    },
    Walking(Walk),
}

/// A walk in flight. Dropping it abandons the walk; its staged pages are discarded.
pub(super) struct Walk {
    pub(super) generation: u64,
    /// The kinds this walk covers; an abandoned walk hands them back to `Link::pending`.
    pub(super) kinds: Vec<crate::protocol::Kind>,
    pub(super) started: Instant,
    pub(super) run: BoxFuture<'static, Result<WalkSummary, WalkError>>,
    /// The refresh callers this walk answers.
    pub(super) waiters: Vec<Waiter>,
    /// A refresh asked for a walk that this one may not include: walk again right after it.
    pub(super) again: bool,
    /// The list changed while this walk ran on (restarts used up): a notification-driven
    /// walk follows it, paced like any other.
    pub(super) changed: bool,
}

pub(super) enum Ping {
    Off,
    Due(Instant),
    InFlight(BoxFuture<'static, Result<(), McpError>>),
}

/// How changes reach us on this connection.
#[derive(Default)]
pub(super) struct Push {
    /// The server cannot push, and we poll.
    pub(super) polling: bool,
    /// Listen streams that ended without being acknowledged, in a row.
    pub(super) listen_failures: u32,
    /// When to reopen a listen stream that failed to reopen.
    pub(super) relisten_at: Option<Instant>,
    /// Why the push stream cannot be reopened, while it cannot: the server is `reconnecting`.
    pub(super) broken: Option<String>,
}

/// A `refresh --wait` caller, answered once a walk settles.
pub(super) struct Waiter {
    pub(super) reply: RefreshReply,
    /// A caller rides through one lost connection to the next connection's walk.
    pub(super) rode_a_reconnect: bool,
}

impl State {
    pub(super) async fn next_event(&mut self) -> Event {
        match self {
            State::BackingOff { retry_at, .. } => {
                tokio::time::sleep_until(*retry_at).await;
                Event::RetryDue
            }
            State::Connecting { attempt, .. } => Event::Connected(attempt.await),
            State::Connected(link) => link.next_event().await,
            State::Stopped => std::future::pending().await,
        }
    }
}

impl Link {
    pub(super) async fn next_event(&mut self) -> Event {
        let Link {
            events,
            phase,
            ping,
            push,
            ..
        } = self;
        tokio::select! {
            event = events.recv() => Event::Server(event),
            event = phase.next_event() => event,
            event = ping.next_event() => event,
            () = until(push.relisten_at) => Event::RelistenDue,
        }
    }
}

impl Phase {
    pub(super) fn debouncing(debounce: Duration) -> Phase {
        let now = Instant::now();
        let ceiling = now
            + debounce
                .saturating_mul(DEBOUNCE_CEILING_FACTOR)
                .max(DEBOUNCE_CEILING_MIN);
        Phase::Debouncing {
            quiet_at: (now + debounce).min(ceiling),
            ceiling,
        }
    }

    pub(super) async fn next_event(&mut self) -> Event {
        match self {
            Phase::Idle { next_walk } => {
                until(*next_walk).await;
                Event::WalkDue
            }
            Phase::Debouncing { quiet_at, .. } => {
                tokio::time::sleep_until(*quiet_at).await;
                Event::WalkDue
            }
            Phase::Throttled { until } => {
                tokio::time::sleep_until(*until).await;
                Event::WalkDue
            }
            Phase::Walking(walk) => Event::Walked((&mut walk.run).await),
        }
    }
}

impl Ping {
    pub(super) fn after(interval: Option<Duration>) -> Ping {
        match interval {
            Some(interval) => Ping::Due(Instant::now() + interval),
            None => Ping::Off,
        }
    }

    pub(super) async fn next_event(&mut self) -> Event {
        match self {
            Ping::Off => std::future::pending().await,
            Ping::Due(at) => {
                tokio::time::sleep_until(*at).await;
                Event::PingDue
            }
            Ping::InFlight(ping) => Event::Pinged(ping.await),
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Who asked for a paced walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AskedBy {
    /// The server said its list changed.
    Change,
    /// A client asked (`catalog/refresh`).
    Refresh,
}
