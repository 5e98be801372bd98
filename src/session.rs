//! One actor per server: connect, walk, listen for changes, back off; reached only through its handle.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::ServerConfig;
use crate::mcp::{event_channel, Era, EventStream, McpError, PushChannel, ServerEvent, Session};
use crate::store::{now_ms, ServerUpdate, Store};
use crate::walk::{self, WalkError, WalkSummary};

/// Walks a stream of changes may abandon in a row before one is let finish.
const MAX_RESTARTS_IN_A_ROW: u32 = 3;

/// Listen streams that may end unacknowledged in a row before we fall back to polling.
const MAX_LISTEN_FAILURES: u32 = 5;
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

pub type RefreshReply = oneshot::Sender<Result<WalkSummary, String>>;
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

/// The supervisor's handle on one session actor; the actor ends when told to stop.
pub struct SessionHandle {
    pub config: ServerConfig,
    client: SessionClient,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// A cheap, cloneable way to send a session commands without holding its handle.
#[derive(Clone)]
pub struct SessionClient {
    name: String,
    commands: mpsc::Sender<SessionCommand>,
    live: Arc<Mutex<LiveStatus>>,
}

impl SessionHandle {
    pub fn spawn(config: ServerConfig, store: Store) -> SessionHandle {
        let (commands, command_receiver) = mpsc::channel(64);
        let (stop, stopping) = watch::channel(false);
        let span = tracing::info_span!("session", server = %config.name);
        let live = Arc::new(Mutex::new(LiveStatus::default()));
        let actor = Actor {
            config: config.clone(),
            store,
            stopping,
            commands: command_receiver,
            waiting: Vec::new(),
            backoff: Backoff::default(),
            last_problem: "not connected yet".into(),
            live: live.clone(),
            known_era: None,
            notifications_before: 0,
            notification_walks: 0,
            polling: false,
            listen_failures: 0,
        };
        let task = tokio::spawn(actor.run().instrument(span));
        SessionHandle {
            client: SessionClient {
                name: config.name.clone(),
                commands,
                live,
            },
            config,
            stop,
            task,
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn client(&self) -> SessionClient {
        self.client.clone()
    }

    /// Tells the actor to stop (closing its connection) and waits until it has.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl SessionClient {
    pub fn live_status(&self) -> LiveStatus {
        self.live
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub async fn refresh(&self, reply: Option<RefreshReply>) -> bool {
        let command = SessionCommand::Refresh { reply };
        self.commands.send(command).await.is_ok()
    }

    /// Reads `uri` through the live session; a server that is down gives `ReadError::Offline`.
    pub async fn read(&self, uri: &str) -> Result<Value, ReadError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || ReadError::Offline {
            server: self.name.clone(),
            reason: "its session has stopped".into(),
        };
        let command = SessionCommand::Read {
            uri: uri.to_string(),
            reply,
        };
        self.commands.send(command).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// What this process knows about a session right now, beside what the database records.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveStatus {
    pub era: Option<Era>,
    pub transport: Option<String>,
    /// How changes reach us: "GET stream", "subscriptions/listen", "polling (why)", ...
    pub push: Option<String>,
    /// `list_changed` notifications received, over every connection of this process.
    pub notifications: u64,
    /// Notifications that did not need a walk of their own (absorbed by debounce or a walk).
    pub walks_coalesced: u64,
    pub walks_started: u64,
    /// Walks abandoned because the list changed while they ran.
    pub walks_restarted: u64,
    /// The number of the last walk started; each walk's results belong to it alone.
    pub generation: u64,
    pub connections: u64,
    pub next_walk_at_ms: Option<i64>,
}

/// How a connected stretch of the session ended.
enum Ended {
    Shutdown,
    Lost(String),
}

enum Step {
    /// A walk finished (or failed); walk again after this delay unless told sooner.
    Walked(Duration),
    Ended(Ended),
}

/// What an event from the server asks of the session.
enum Reaction {
    Nothing,
    /// Walk (again): the list changed, or changes may have been missed.
    Walk,
    /// We now poll: the next walk should come no later than a poll interval from now.
    Poll,
    Lost(String),
}

struct Actor {
    config: ServerConfig,
    store: Store,
    stopping: watch::Receiver<bool>,
    commands: mpsc::Receiver<SessionCommand>,
    /// Refresh callers waiting for the next walk to finish.
    waiting: Vec<RefreshReply>,
    backoff: Backoff,
    /// Why the server is not connected, for reads that arrive meanwhile.
    last_problem: String,
    live: Arc<Mutex<LiveStatus>>,
    /// The era this server spoke last, so a reconnect need not probe again.
    known_era: Option<Era>,
    /// Notifications counted on connections that have ended.
    notifications_before: u64,
    /// Walks started because of a notification (or a reopened stream).
    notification_walks: u64,
    /// True while the server cannot push and we poll.
    polling: bool,
    /// Listen streams that ended without being acknowledged, in a row.
    listen_failures: u32,
}

impl Actor {
    async fn run(mut self) {
        while !*self.stopping.borrow() {
            self.report(ServerUpdate::Connecting).await;
            let (events, event_stream) = event_channel();
            let connected = tokio::select! {
                connected = Session::connect(&self.config, events, self.known_era) => connected,
                _ = self.stopping.changed() => break,
            };
            let ended = match connected {
                Ok(session) => {
                    let session = Arc::new(session);
                    self.known_era = Some(session.hello.era);
                    tracing::info!(
                        transport = session.transport_name(),
                        era = ?session.hello.era,
                        protocol_version = %session.hello.protocol_version,
                        "connected"
                    );
                    self.update_live(|live| {
                        live.era = Some(session.hello.era);
                        live.transport = Some(session.transport_name().to_string());
                        live.connections += 1;
                    });
                    self.report(ServerUpdate::Connected {
                        protocol_version: session.hello.protocol_version.clone(),
                        capabilities: session.hello.capabilities.clone(),
                        server_info: session.hello.server_info.clone(),
                    })
                    .await;
                    let pinger = self.start_pinger(&session);
                    let mut event_stream = event_stream;
                    let ended = self.serve(&session, &mut event_stream).await;
                    if let Some(pinger) = pinger {
                        pinger.abort();
                    }
                    self.notifications_before += event_stream.notifications_received();
                    session.close().await;
                    ended
                }
                Err(error) => {
                    // Whatever it spoke before, probe afresh next time.
                    self.known_era = None;
                    Ended::Lost(format!("cannot connect: {error}"))
                }
            };
            self.update_live(|live| live.push = None);
            match ended {
                Ended::Shutdown => break,
                Ended::Lost(error) => {
                    if !self.back_off(error).await {
                        break;
                    }
                }
            }
        }
        self.answer_waiting(Err("the daemon is shutting down".into()));
        self.report(ServerUpdate::Stopped).await;
    }

    fn update_live(&self, change: impl FnOnce(&mut LiveStatus)) {
        change(
            &mut self
                .live
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
    }

    /// Pings the server now and then; a failed ping ends the connection.
    fn start_pinger(&self, session: &Arc<Session>) -> Option<JoinHandle<()>> {
        let interval = self.config.timings.ping_interval?;
        let session = session.clone();
        let events = session.events();
        Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                if let Err(error) = session.ping().await {
                    if error.is_connection_lost() || matches!(error, McpError::Timeout { .. }) {
                        events.send(ServerEvent::Disconnected(format!("ping failed: {error}")));
                        return;
                    }
                }
            }
        }))
    }

    /// Handles a command in any state; `session` is the live one, if any. True when the
    /// command asks for a walk.
    fn handle(&mut self, command: SessionCommand, session: Option<&Arc<Session>>) -> bool {
        match command {
            SessionCommand::Refresh { reply } => {
                self.waiting.extend(reply);
                true
            }
            SessionCommand::Read { uri, reply } => {
                match session {
                    Some(session) => start_read(&self.config.name, session, uri, reply),
                    None => {
                        let _ = reply.send(Err(ReadError::Offline {
                            server: self.config.name.clone(),
                            reason: self.last_problem.clone(),
                        }));
                    }
                }
                false
            }
        }
    }

    /// Decides what a server event means for this session.
    fn react(&mut self, event: Option<ServerEvent>, session: &Arc<Session>) -> Reaction {
        match event {
            None => Reaction::Lost("the server closed the connection".into()),
            Some(ServerEvent::ResourcesListChanged) => Reaction::Walk,
            Some(ServerEvent::ListenAcknowledged {
                resources_list_changed,
            }) => {
                self.listen_failures = 0;
                if resources_list_changed {
                    self.update_live(|live| live.push = Some(PushChannel::Listen.to_string()));
                    Reaction::Nothing
                } else {
                    self.start_polling(
                        "the listen acknowledgement leaves out resource list changes".into(),
                    );
                    Reaction::Poll
                }
            }
            // Only the stateless era listens; elsewhere a cancellation is about something else.
            Some(ServerEvent::ListenEnded(_)) if session.hello.era != Era::Modern => {
                Reaction::Nothing
            }
            Some(ServerEvent::ListenEnded(reason)) => {
                self.listen_failures += 1;
                if self.listen_failures > MAX_LISTEN_FAILURES {
                    let why = format!("the listen stream keeps ending: {reason}");
                    self.start_polling(why);
                } else {
                    tracing::info!(%reason, "reopening the listen stream");
                    session.start_listen();
                }
                Reaction::Walk
            }
            Some(ServerEvent::StreamOpened) => {
                self.update_live(|live| live.push = Some(PushChannel::GetStream.to_string()));
                Reaction::Nothing
            }
            Some(ServerEvent::StreamResumed) => {
                self.update_live(|live| live.push = Some(PushChannel::GetStream.to_string()));
                Reaction::Walk
            }
            Some(ServerEvent::PushUnavailable(reason)) => {
                self.start_polling(reason);
                Reaction::Poll
            }
            Some(ServerEvent::Disconnected(reason)) => Reaction::Lost(reason),
        }
    }

    fn start_polling(&mut self, reason: String) {
        tracing::info!(%reason, "the server cannot push changes; polling");
        self.polling = true;
        self.update_live(|live| live.push = Some(PushChannel::Polling(reason).to_string()));
    }

    /// Records a lost connection and sleeps before the next attempt; false on shutdown.
    async fn back_off(&mut self, error: String) -> bool {
        let delay = self.backoff.next_delay();
        tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "connection lost");
        self.answer_waiting(Err(error.clone()));
        self.last_problem = error.clone();
        self.report(ServerUpdate::BackingOff {
            error,
            retry_at_ms: now_ms() + delay.as_millis() as i64,
        })
        .await;
        let deadline = Instant::now() + delay;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return true,
                _ = self.stopping.changed() => return false,
                command = self.commands.recv() => match command {
                    // A refresh while disconnected is answered after the next walk.
                    Some(command) => { self.handle(command, None); }
                    None => return false,
                },
            }
        }
    }

    /// Runs one connected session until it breaks or the daemon stops.
    async fn serve(&mut self, session: &Arc<Session>, events: &mut EventStream) -> Ended {
        let mirrors = session.hello.has_resources();
        self.polling = false;
        self.listen_failures = 0;
        if !mirrors {
            tracing::info!("server declares no resources capability; nothing to mirror");
            self.report(ServerUpdate::NoResources).await;
            self.last_problem = "it declares no resources capability".into();
        } else {
            let push = session.start_push();
            if let PushChannel::Polling(reason) = &push {
                self.start_polling(reason.clone());
            } else {
                // Streams that still have to open say so until they have.
                let shown = match push {
                    PushChannel::GetStream | PushChannel::Listen => format!("opening {push}"),
                    other => other.to_string(),
                };
                self.update_live(|live| live.push = Some(shown));
            }
        }
        let mut next_walk = Instant::now();
        loop {
            if !mirrors {
                self.answer_waiting(Err("the server declares no resources capability".into()));
            } else if Instant::now() >= next_walk {
                match self.walk_until_settled(session, events).await {
                    Step::Walked(delay) => {
                        next_walk = Instant::now() + delay;
                        let at = now_ms() + delay.as_millis() as i64;
                        self.update_live(|live| live.next_walk_at_ms = Some(at));
                    }
                    Step::Ended(ended) => return ended,
                }
                continue;
            }
            let timer = tokio::time::sleep_until(next_walk);
            tokio::select! {
                _ = timer, if mirrors => {}
                event = events.recv() => match self.react(event, session) {
                    Reaction::Nothing => {}
                    Reaction::Walk if mirrors => {
                        if let Some(ended) = self.debounce(events, session).await {
                            return ended;
                        }
                        self.notification_walks += 1;
                        next_walk = Instant::now();
                    }
                    Reaction::Walk => {}
                    Reaction::Poll => {
                        next_walk = next_walk.min(Instant::now() + self.poll_delay(None));
                    }
                    Reaction::Lost(reason) => return Ended::Lost(reason),
                },
                command = self.commands.recv() => match command {
                    Some(command) => {
                        if self.handle(command, Some(session)) {
                            next_walk = Instant::now();
                        }
                    }
                    None => return Ended::Shutdown,
                },
                _ = self.stopping.changed() => return Ended::Shutdown,
            }
        }
    }

    /// Waits until events pause for the debounce period; `Some` when the session ends meanwhile.
    async fn debounce(
        &mut self,
        events: &mut EventStream,
        session: &Arc<Session>,
    ) -> Option<Ended> {
        // A server that never pauses still gets walked: the wait has a ceiling.
        let debounce = self.config.timings.debounce;
        let ceiling = Instant::now() + (debounce * 20).max(Duration::from_secs(1));
        loop {
            let quiet = (Instant::now() + debounce).min(ceiling);
            tokio::select! {
                _ = tokio::time::sleep_until(quiet) => return None,
                event = events.recv() => if let Reaction::Lost(reason) = self.react(event, session) {
                    return Some(Ended::Lost(reason));
                },
                command = self.commands.recv() => match command {
                    Some(command) => { self.handle(command, Some(session)); }
                    None => return Some(Ended::Shutdown),
                },
                _ = self.stopping.changed() => return Some(Ended::Shutdown),
            }
        }
    }

    /// Walks until a walk completes without a change arriving during it.
    async fn walk_until_settled(
        &mut self,
        session: &Arc<Session>,
        events: &mut EventStream,
    ) -> Step {
        let mut restarts = 0;
        loop {
            self.report(ServerUpdate::Walking).await;
            let waiting_for_this_walk = std::mem::take(&mut self.waiting);
            // After a few restarts in a row the walk runs to the end, and the change that came
            // meanwhile gets the walk after it: a server that changes faster than it can be
            // walked is still mirrored, a little behind, instead of never.
            let may_restart = restarts < MAX_RESTARTS_IN_A_ROW;
            let mut changed_meanwhile = false;
            let mut generation = 0;
            let notifications = self.notifications_before + events.notifications_received();
            let notification_walks = self.notification_walks;
            self.update_live(|live| {
                live.walks_started += 1;
                live.generation += 1;
                generation = live.generation;
                live.notifications = notifications;
                live.walks_coalesced = notifications.saturating_sub(notification_walks);
                live.next_walk_at_ms = None;
            });
            let span = tracing::info_span!("walk", generation);
            let outcome = {
                // The walk gets its own copies, so events can be handled while it runs.
                let (store, name) = (self.store.clone(), self.config.name.clone());
                let walk = walk::walk(session, &store, &name, self.config.limits).instrument(span);
                tokio::pin!(walk);
                loop {
                    tokio::select! {
                        outcome = &mut walk => break Some(outcome),
                        event = events.recv() => match self.react(event, session) {
                            Reaction::Nothing | Reaction::Poll => {}
                            // The walk may have read pages from before the change: start over.
                            Reaction::Walk if may_restart => break None,
                            Reaction::Walk => changed_meanwhile = true,
                            Reaction::Lost(reason) => break Some(Err(WalkError::Connection(McpError::Closed(reason)))),
                        },
                        // Reads start at once; a refresh waits for the walk after this one.
                        command = self.commands.recv() => match command {
                            Some(command) => { self.handle(command, Some(session)); }
                            None => return Step::Ended(Ended::Shutdown),
                        },
                        _ = self.stopping.changed() => return Step::Ended(Ended::Shutdown),
                    }
                }
            };
            let Some(outcome) = outcome else {
                restarts += 1;
                tracing::info!(
                    generation,
                    "the list changed during the walk; discarding it and walking again"
                );
                self.update_live(|live| live.walks_restarted += 1);
                self.waiting.extend(waiting_for_this_walk);
                if let Some(ended) = self.debounce(events, session).await {
                    return Step::Ended(ended);
                }
                self.notification_walks += 1;
                continue;
            };
            let notifications = self.notifications_before + events.notifications_received();
            let notification_walks = self.notification_walks;
            self.update_live(|live| {
                live.notifications = notifications;
                live.walks_coalesced = notifications.saturating_sub(notification_walks);
            });
            match outcome {
                Ok(summary) => {
                    self.backoff.reset();
                    tracing::info!(
                        generation,
                        pages = summary.report.pages,
                        resources = summary.swap.resources,
                        added = summary.swap.added,
                        removed = summary.swap.removed,
                        changed = summary.swap.changed,
                        duration_ms = summary.report.duration_ms,
                        "walk committed"
                    );
                    answer(waiting_for_this_walk, Ok(summary));
                    // A refresh or a change that arrived during the walk gets a walk of its own.
                    let delay = if !self.waiting.is_empty() || changed_meanwhile {
                        Duration::ZERO
                    } else if self.polling {
                        self.poll_delay(summary.ttl_ms)
                    } else {
                        self.config.resync_interval
                    };
                    return Step::Walked(delay);
                }
                Err(WalkError::Connection(error)) => {
                    let message = format!("walk interrupted: {error}");
                    answer(waiting_for_this_walk, Err(message.clone()));
                    return Step::Ended(Ended::Lost(message));
                }
                Err(error) => {
                    let message = format!("walk failed: {error}");
                    let delay = self.backoff.next_delay();
                    tracing::warn!(generation, error = %message, retry_in_ms = delay.as_millis() as u64, "keeping the last snapshot");
                    self.report(ServerUpdate::WalkFailed {
                        error: message.clone(),
                    })
                    .await;
                    answer(waiting_for_this_walk, Err(message.clone()));
                    self.answer_waiting(Err(message));
                    return Step::Walked(delay.min(self.config.resync_interval));
                }
            }
        }
    }

    /// When to poll a server that cannot push: its `ttlMs` hint (never below the floor) or
    /// the configured interval, with jitter so many servers spread out.
    fn poll_delay(&self, ttl_ms: Option<u64>) -> Duration {
        let timings = &self.config.timings;
        let base = match ttl_ms {
            Some(ttl) => Duration::from_millis(ttl).max(timings.poll_floor),
            None => timings.poll_interval,
        };
        let base = base.min(self.config.resync_interval);
        base + base.mul_f64(jitter_fraction() / 10.0)
    }

    fn answer_waiting(&mut self, outcome: Result<WalkSummary, String>) {
        answer(std::mem::take(&mut self.waiting), outcome);
    }

    async fn report(&self, update: ServerUpdate) {
        if let Err(error) = self.store.update_server(&self.config.name, update).await {
            tracing::warn!(%error, "cannot record the server's state");
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

fn answer(waiting: Vec<RefreshReply>, outcome: Result<WalkSummary, String>) {
    for reply in waiting {
        let _ = reply.send(outcome.clone());
    }
}

/// A number in [0, 1) from the clock's low bits: enough to spread retries, no generator needed.
fn jitter_fraction() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    (nanos % 1000) as f64 / 1000.0
}

/// Exponential backoff with jitter, so many failing servers do not retry in lockstep.
#[derive(Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    fn next_delay(&mut self) -> Duration {
        let exponent = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        let base = BACKOFF_FIRST.saturating_mul(1 << exponent).min(BACKOFF_MAX);
        base + base.mul_f64(jitter_fraction() / 4.0)
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}
