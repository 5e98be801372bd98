//! The `Actor`: its state, `next_event` and `handle`, and the replies it sends.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::ServerConfig;
use crate::protocol::Kind;
use crate::session::pacing::{listen_retry_delay, PollPace, WalkPace};
use crate::session::state::{AskedBy, Event, Link, Phase, Ping, Push, State, Waiter};
use crate::session::{LiveStatus, ReadError, ReadReply, Refreshed, SessionCommand};
use crate::store::{now_ms, ServerUpdate, Store};
use crate::upstream::{
    event_channel, Backoff, Era, EventStream, McpError, PushChannel, ServerEvent, Session,
};
use crate::walk::progress::WalkMeter;

/// Listen streams that may end unacknowledged in a row before we fall back to polling.
const MAX_LISTEN_FAILURES: u32 = 5;

/// Where the actor's orders come from: its handle's stop signal and the clients' commands.
pub(in crate::session) struct Inbox {
    pub stopping: watch::Receiver<bool>,
    pub commands: mpsc::Receiver<SessionCommand>,
}

/// Counts kept across connections, shown in the live status.
#[derive(Default)]
pub(super) struct Counters {
    /// `list_changed` notifications counted on connections that have ended.
    notifications_on_ended_connections: u64,
    /// Walks started because of a notification (or a reopened stream).
    pub(super) notification_walks: u64,
    pub(super) walks_started: u64,
    pub(super) walks_restarted: u64,
    /// Notification-driven walks held back by the walk pace.
    pub(super) walks_throttled: u64,
    connections: u64,
}

/// How a connection came to an end, for the log and for waiting refresh callers.
enum Ending {
    CannotConnect,
    ConnectionLost,
}

pub(in crate::session) struct Actor {
    pub(super) config: ServerConfig,
    pub(super) store: Store,
    inbox: Inbox,
    pub(super) live: watch::Sender<LiveStatus>,
    state: State,
    /// Refresh callers waiting for the next walk.
    pub(super) waiting: Vec<Waiter>,
    pub(super) counters: Counters,
    pub(super) backoff: Backoff,
    /// When the last walk ended and how long it took: the spacing of notification-driven walks.
    pub(super) walk_pace: WalkPace,
    /// The throttle was announced in the log; said again only after a walk ran unthrottled.
    pub(super) throttle_announced: bool,
    /// The era this server spoke last, so a reconnect need not probe again.
    known_era: Option<Era>,
    /// The walk in flight's progress, shared with the session's clients (`status`).
    pub(super) meter: Arc<WalkMeter>,
    /// Since when a followed upstream mirror's servers have not all loaded while this one
    /// keeps its snapshot (kept across reconnects: a new upstream instance is one).
    pub(super) upstream_loading_since: Option<Instant>,
}

impl Actor {
    pub(in crate::session) fn new(
        config: ServerConfig,
        store: Store,
        inbox: Inbox,
        live: watch::Sender<LiveStatus>,
        meter: Arc<WalkMeter>,
    ) -> Actor {
        Actor {
            config,
            store,
            inbox,
            live,
            state: State::Stopped,
            waiting: Vec::new(),
            counters: Counters::default(),
            backoff: Backoff::default(),
            walk_pace: WalkPace::default(),
            throttle_announced: false,
            known_era: None,
            meter,
            upstream_loading_since: None,
        }
    }

    pub(in crate::session) async fn run(mut self) {
        if !*self.inbox.stopping.borrow() {
            self.state = self.connect("not connected yet".into()).await;
            while let Some(event) = self.next_event().await {
                self.handle(event).await;
            }
        }
        self.stop().await;
    }

    /// Waits for the next event from any source; `None` when the session must stop.
    async fn next_event(&mut self) -> Option<Event> {
        let Actor { inbox, state, .. } = self;
        tokio::select! {
            biased;
            _ = inbox.stopping.changed() => None,
            // Every client gone means the handle is gone too.
            command = inbox.commands.recv() => command.map(Event::Command),
            event = state.next_event() => Some(event),
        }
    }

    async fn handle(&mut self, event: Event) {
        let state = std::mem::replace(&mut self.state, State::Stopped);
        self.state = match (state, event) {
            (state, Event::Command(command)) => self.on_command(state, command).await,
            (State::BackingOff { problem, .. }, Event::RetryDue) => self.connect(problem).await,
            (State::Connecting { events, .. }, Event::Connected(outcome)) => {
                self.on_connected(outcome, events).await
            }
            (State::Connected(link), event) => self.on_link_event(link, event).await,
            // Each state waits only on its own sources, so no other pair arrives.
            (state, _) => state,
        };
    }

    async fn stop(&mut self) {
        if let State::Connected(link) = std::mem::replace(&mut self.state, State::Stopped) {
            self.close(link).await;
        }
        answer(
            std::mem::take(&mut self.waiting),
            Err("the daemon is shutting down".into()),
        );
        self.report(ServerUpdate::Stopped).await;
    }

    async fn on_command(&mut self, state: State, command: SessionCommand) -> State {
        match command {
            SessionCommand::Read { uri, reply } => {
                match &state {
                    State::Connected(link) => {
                        start_read(&self.config.name, &link.session, uri, reply)
                    }
                    State::BackingOff { problem, .. } | State::Connecting { problem, .. } => {
                        self.refuse_read(reply, problem)
                    }
                    State::Stopped => self.refuse_read(reply, "its session has stopped"),
                }
                state
            }
            SessionCommand::Refresh { reply } => {
                let waiter = reply.map(|reply| Waiter {
                    reply,
                    rode_a_reconnect: false,
                });
                // While disconnected, a refresh is answered after the next connection's walk.
                let State::Connected(mut link) = state else {
                    self.waiting.extend(waiter);
                    return state;
                };
                if !link.mirrors {
                    answer(waiter.into_iter().collect(), Ok(Refreshed::no_resources()));
                    return State::Connected(link);
                }
                self.waiting.extend(waiter);
                match &mut link.phase {
                    // Whoever asks (a person, a tool, an HTTP client), walks keep the walk
                    // pace: a flood of refreshes costs at most one walk per spacing.
                    Phase::Idle { .. } => self.paced_walk(link, AskedBy::Refresh).await,
                    // The walk held back takes the caller along.
                    Phase::Throttled { .. } => State::Connected(link),
                    // The walk after the pause takes the caller along.
                    Phase::Debouncing { .. } => State::Connected(link),
                    // The walk under way may have read its pages already: one more after it.
                    Phase::Walking(walk) => {
                        walk.again = true;
                        State::Connected(link)
                    }
                }
            }
        }
    }

    fn refuse_read(&self, reply: ReadReply, reason: &str) {
        let _ = reply.send(Err(ReadError::Offline {
            server: self.config.name.clone(),
            reason: reason.to_string(),
        }));
    }

    /// Starts a connection attempt; `problem` stays the answer to reads until it succeeds.
    async fn connect(&mut self, problem: String) -> State {
        self.report(ServerUpdate::Connecting).await;
        let (sink, events) = event_channel();
        let (config, known_era) = (self.config.clone(), self.known_era);
        let attempt = async move {
            let session = Session::connect(&config, sink, known_era).await?;
            Ok(Arc::new(session))
        }
        .boxed();
        State::Connecting {
            attempt,
            events,
            problem,
        }
    }

    async fn on_connected(
        &mut self,
        outcome: Result<Arc<Session>, McpError>,
        events: EventStream,
    ) -> State {
        let session = match outcome {
            Ok(session) => session,
            Err(error) => {
                // Whatever it spoke before, probe afresh next time.
                self.known_era = None;
                // A 429 or 503 whose `Retry-After` outlasted the connection window is waited
                // out here, before the next attempt.
                let server_asked = error.retry_after();
                let error = format!("cannot connect: {error}");
                return self
                    .back_off(error, server_asked, Ending::CannotConnect)
                    .await;
            }
        };
        self.known_era = Some(session.hello.era);
        tracing::info!(
            transport = %session.transport(),
            era = ?session.hello.era,
            protocol_version = %session.hello.protocol_version,
            "connected"
        );
        self.counters.connections += 1;
        let (era, transport) = (session.hello.era, session.transport());
        self.publish(|live| {
            live.era = Some(era);
            live.transport = Some(transport);
        });
        self.report(ServerUpdate::Connected {
            protocol_version: session.hello.protocol_version.clone(),
            capabilities: session.hello.capabilities.clone(),
            server_info: session.hello.server_info.clone(),
        })
        .await;
        // A followed mirror's feed covers every kind: its resources' changes are enough.
        let followed = session.hello.follows_feed();
        let kinds = self
            .config
            .mirrored_kinds(&session.hello.capabilities, followed);
        let kind_cannot_push = kinds.iter().any(|kind| {
            let kind = if followed { Kind::Resource } else { *kind };
            !session.hello.kind_lists_changes(kind.capability())
        });
        let mut link = Box::new(Link {
            mirrors: !kinds.is_empty(),
            kinds,
            pending: Vec::new(),
            kind_cannot_push,
            session,
            events,
            phase: Phase::Idle { next_walk: None },
            ping: Ping::after(self.config.timings.ping_interval),
            push: Push::default(),
            poll: PollPace::default(),
            restarts_in_a_row: 0,
        });
        self.show_counters(&link);
        // The push channel is the session's, not one kind's: it opens even on a server with
        // nothing to mirror yet, so its notifications and reconnects behave the same for all.
        match link.session.start_push() {
            PushChannel::Polling(reason) => self.start_polling(&mut link, reason),
            push => {
                // Streams that still have to open say so until they have.
                let shown = PushChannel::opening(push);
                self.publish(|live| live.push = Some(shown));
            }
        }
        if !link.mirrors {
            tracing::info!("server declares no resources capability; nothing to mirror");
            self.report(ServerUpdate::NoResources).await;
            answer(
                std::mem::take(&mut self.waiting),
                Ok(Refreshed::no_resources()),
            );
            return State::Connected(link);
        }
        self.start_walk(link).await
    }

    async fn on_link_event(&mut self, mut link: Box<Link>, event: Event) -> State {
        match event {
            Event::Server(None) => {
                self.lose(link, "the server closed the connection".into(), None)
                    .await
            }
            Event::Server(Some(event)) => self.on_server_event(link, event).await,
            Event::WalkDue => match link.phase {
                Phase::Debouncing { .. } => self.walk_after_change(link).await,
                Phase::Throttled { .. } => {
                    self.counters.notification_walks += 1;
                    self.start_walk(link).await
                }
                _ => self.start_walk(link).await,
            },
            Event::Walked(outcome) => self.on_walked(link, outcome).await,
            Event::PingDue => {
                let session = link.session.clone();
                link.ping = Ping::InFlight(async move { session.ping().await }.boxed());
                State::Connected(link)
            }
            Event::Pinged(Err(error))
                if error.is_connection_lost() || matches!(error, McpError::Timeout { .. }) =>
            {
                let server_asked = error.retry_after();
                self.lose(link, format!("ping failed: {error}"), server_asked)
                    .await
            }
            Event::Pinged(_) => {
                link.ping = Ping::after(self.config.timings.ping_interval);
                State::Connected(link)
            }
            Event::RelistenDue => {
                link.push.relisten_at = None;
                // The warning went out with the first failure; the retries stay quiet.
                tracing::debug!("reopening the listen stream");
                link.session.start_listen();
                State::Connected(link)
            }
            Event::Command(_) | Event::RetryDue | Event::Connected(_) => State::Connected(link),
        }
    }

    async fn on_server_event(&mut self, mut link: Box<Link>, event: ServerEvent) -> State {
        match event {
            ServerEvent::ResourcesListChanged => self.on_kind_change(link, Kind::Resource),
            ServerEvent::ListChanged(kind) => self.on_kind_change(link, kind),
            ServerEvent::ListenAcknowledged {
                resources_list_changed: false,
            } => {
                link.push.listen_failures = 0;
                let reason = "the listen acknowledgement leaves out resource list changes";
                self.start_polling(&mut link, reason.into());
                self.poll_soon(link)
            }
            ServerEvent::ListenAcknowledged {
                resources_list_changed: true,
            } => {
                link.push.listen_failures = 0;
                self.publish(|live| live.push = Some(PushChannel::Listen));
                if self.push_restored(&mut link) {
                    self.on_change(link)
                } else {
                    State::Connected(link)
                }
            }
            // Only the stateless era listens; elsewhere a cancellation is about something else.
            ServerEvent::ListenEnded(_) if link.session.hello.era != Era::Modern => {
                State::Connected(link)
            }
            ServerEvent::ListenEnded(reason) => {
                link.push.listen_failures += 1;
                let failures = link.push.listen_failures;
                if failures > MAX_LISTEN_FAILURES {
                    let why = format!("the listen stream keeps ending: {reason}");
                    self.start_polling(&mut link, why);
                } else if failures == 1 {
                    tracing::info!(%reason, "reopening the listen stream");
                    link.session.start_listen();
                } else {
                    // The stream we reopened ended before the server acknowledged it.
                    let error = format!("the listen stream cannot be reopened: {reason}");
                    self.push_broken(&mut link, error).await;
                    link.push.relisten_at = Some(Instant::now() + listen_retry_delay(failures));
                }
                // Changes may have been missed while the stream was down.
                self.on_change(link)
            }
            ServerEvent::StreamOpened | ServerEvent::StreamResumed => {
                self.publish(|live| live.push = Some(PushChannel::GetStream));
                // A stream back after a break may have missed changes.
                let restored = self.push_restored(&mut link);
                if restored || event == ServerEvent::StreamResumed {
                    self.on_change(link)
                } else {
                    State::Connected(link)
                }
            }
            ServerEvent::StreamFailed(reason) => {
                let error = format!("the GET stream cannot be reopened: {reason}");
                self.push_broken(&mut link, error).await;
                State::Connected(link)
            }
            ServerEvent::PushUnavailable(reason) => {
                self.start_polling(&mut link, reason);
                self.poll_soon(link)
            }
            ServerEvent::Disconnected(reason) => self.lose(link, reason, None).await,
        }
    }

    /// The push stream cannot be reopened: the server is `reconnecting`, its snapshot stale.
    /// Said once, however often the stream is retried.
    async fn push_broken(&mut self, link: &mut Link, error: String) {
        if link.push.broken.is_some() {
            tracing::debug!(%error, "the push stream is still down");
            return;
        }
        tracing::warn!(%error, "changes cannot reach the mirror until the push stream is reopened; keeping the snapshot, marked stale");
        self.report(ServerUpdate::Reconnecting {
            error: error.clone(),
        })
        .await;
        link.push.broken = Some(error);
    }

    /// True when the push stream was down and is open again.
    fn push_restored(&self, link: &mut Link) -> bool {
        let Some(error) = link.push.broken.take() else {
            return false;
        };
        tracing::info!(was = %error, "the push stream is open again");
        true
    }

    /// Ends a connection that broke and schedules the next attempt, no sooner than the
    /// server asked (`Retry-After`), if it did.
    pub(super) async fn lose(
        &mut self,
        link: Box<Link>,
        reason: String,
        server_asked: Option<Duration>,
    ) -> State {
        self.close(link).await;
        self.back_off(reason, server_asked, Ending::ConnectionLost)
            .await
    }

    /// Closes a connection: abandons its walk (whose callers wait on), stops its pings and
    /// streams, and closes the session (stdio child stopped, HTTP session deleted).
    async fn close(&mut self, link: Box<Link>) {
        let Link {
            session,
            events,
            phase,
            ping,
            ..
        } = *link;
        drop(ping);
        if let Phase::Walking(walk) = phase {
            self.waiting.extend(walk.waiters);
            self.meter.end(false);
        }
        self.counters.notifications_on_ended_connections += events.notifications_received();
        session.close().await;
        self.publish(|live| {
            live.push = None;
            live.poll_interval_ms = None;
            live.poll_interval_reason = None;
            live.throttled_until_ms = None;
            live.throttle_reason = None;
        });
    }

    /// Records why the server is not connected and when we try again: after the backoff, or
    /// after the `Retry-After` the server sent with the failure when that is longer (capped).
    async fn back_off(
        &mut self,
        error: String,
        server_asked: Option<Duration>,
        ending: Ending,
    ) -> State {
        let delay = self.backoff.next_delay_honouring(server_asked);
        let retry_in_ms = delay.as_millis() as u64;
        let waiting = std::mem::take(&mut self.waiting);
        match ending {
            Ending::CannotConnect => {
                tracing::warn!(%error, retry_in_ms, "cannot connect");
                answer(waiting, Err(error.clone()));
            }
            Ending::ConnectionLost => {
                tracing::warn!(%error, retry_in_ms, "connection lost");
                self.waiting = ride_through(waiting, &error);
            }
        }
        self.report(ServerUpdate::BackingOff {
            error: error.clone(),
            retry_at_ms: now_ms() + delay.as_millis() as i64,
        })
        .await;
        State::BackingOff {
            retry_at: Instant::now() + delay,
            problem: error,
        }
    }

    pub(super) fn publish(&self, change: impl FnOnce(&mut LiveStatus)) {
        self.live.send_modify(change);
    }

    pub(super) fn show_counters(&self, link: &Link) {
        let counters = &self.counters;
        let notifications =
            counters.notifications_on_ended_connections + link.events.notifications_received();
        self.publish(|live| {
            live.notifications = notifications;
            live.walks_coalesced = notifications.saturating_sub(counters.notification_walks);
            live.walks_started = counters.walks_started;
            live.generation = counters.walks_started;
            live.walks_restarted = counters.walks_restarted;
            live.walks_throttled = counters.walks_throttled;
            live.connections = counters.connections;
        });
    }

    /// Records a state transition in the store. The future borrows nothing from the actor,
    /// whose in-flight futures are `Send` but not `Sync`.
    pub(super) fn report(
        &self,
        update: ServerUpdate,
    ) -> impl std::future::Future<Output = ()> + Send {
        let (store, server) = (self.store.clone(), self.config.name.clone());
        async move {
            if let Err(error) = store.update_server(&server, update).await {
                tracing::warn!(%error, "cannot record the server's state");
            }
        }
    }
}

/// Reads run beside walks and each other, so a slow read never holds up the session.
fn start_read(server: &str, session: &Arc<Session>, uri: String, reply: ReadReply) {
    let session = session.clone();
    let server = server.to_string();
    tokio::spawn(async move {
        let outcome = session
            .read_resource(&uri)
            .await
            .map_err(|error| match error {
                McpError::Rpc { error, .. } => ReadError::Server {
                    server,
                    code: error.code,
                    message: error.message,
                },
                other => ReadError::Failed {
                    server,
                    reason: other.to_string(),
                },
            });
        let _ = reply.send(outcome);
    });
}

pub(super) fn answer(waiters: Vec<Waiter>, outcome: Result<Refreshed, String>) {
    for waiter in waiters {
        let _ = waiter.reply.send(outcome.clone());
    }
}

/// After a lost connection: callers that already rode through one reconnect get the error,
/// the rest wait for the next connection's walk.
fn ride_through(waiters: Vec<Waiter>, error: &str) -> Vec<Waiter> {
    let (answered, riding): (Vec<Waiter>, Vec<Waiter>) = waiters
        .into_iter()
        .partition(|waiter| waiter.rode_a_reconnect);
    answer(answered, Err(error.to_string()));
    riding
        .into_iter()
        .map(|waiter| Waiter {
            rode_a_reconnect: true,
            ..waiter
        })
        .collect()
}
