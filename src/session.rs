//! One actor per server: connect, walk, listen for changes, back off; reached only through its handle.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::ServerConfig;
use crate::mcp::{McpError, ServerEvent, Session};
use crate::store::{now_ms, ServerUpdate, Store};
use crate::walk::{self, WalkError, WalkSummary};

/// A quiet period after a `list_changed` before walking, so a burst costs one walk.
const DEBOUNCE: Duration = Duration::from_millis(100);
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
}

impl SessionHandle {
    pub fn spawn(config: ServerConfig, store: Store) -> SessionHandle {
        let (commands, command_receiver) = mpsc::channel(64);
        let (stop, stopping) = watch::channel(false);
        let span = tracing::info_span!("session", server = %config.name);
        let actor = Actor {
            config: config.clone(),
            store,
            stopping,
            commands: command_receiver,
            waiting: Vec::new(),
            backoff: Backoff::default(),
            last_problem: "not connected yet".into(),
        };
        let task = tokio::spawn(actor.run().instrument(span));
        SessionHandle {
            client: SessionClient {
                name: config.name.clone(),
                commands,
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
}

impl Actor {
    async fn run(mut self) {
        while !*self.stopping.borrow() {
            self.report(ServerUpdate::Connecting).await;
            let (events, event_receiver) = mpsc::channel(64);
            let connected = tokio::select! {
                connected = Session::connect(&self.config, events) => connected,
                _ = self.stopping.changed() => break,
            };
            let ended = match connected {
                Ok(session) => {
                    let session = Arc::new(session);
                    tracing::info!(
                        transport = session.transport_kind(),
                        protocol_version = %session.hello.protocol_version,
                        "connected"
                    );
                    self.report(ServerUpdate::Connected {
                        protocol_version: session.hello.protocol_version.clone(),
                        capabilities: session.hello.capabilities.clone(),
                        server_info: session.hello.server_info.clone(),
                    })
                    .await;
                    let ended = self.serve(&session, event_receiver).await;
                    session.close().await;
                    ended
                }
                Err(error) => Ended::Lost(format!("cannot connect: {error}")),
            };
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
    async fn serve(
        &mut self,
        session: &Arc<Session>,
        mut events: mpsc::Receiver<ServerEvent>,
    ) -> Ended {
        let mirrors = session.hello.has_resources();
        if !mirrors {
            tracing::info!("server declares no resources capability; nothing to mirror");
            self.report(ServerUpdate::NoResources).await;
            self.last_problem = "it declares no resources capability".into();
        }
        let mut next_walk = Instant::now();
        loop {
            if !mirrors {
                self.answer_waiting(Err("the server declares no resources capability".into()));
            } else if Instant::now() >= next_walk {
                match self.walk_until_settled(session, &mut events).await {
                    Step::Walked(delay) => next_walk = Instant::now() + delay,
                    Step::Ended(ended) => return ended,
                }
                continue;
            }
            let timer = tokio::time::sleep_until(next_walk);
            tokio::select! {
                _ = timer, if mirrors => {}
                event = events.recv() => match event {
                    Some(ServerEvent::ResourcesListChanged) if mirrors => {
                        if let Some(ended) = self.debounce(&mut events).await {
                            return ended;
                        }
                        next_walk = Instant::now();
                    }
                    Some(_) => {}
                    None => return Ended::Lost("the server closed the connection".into()),
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

    /// Waits until notifications pause for `DEBOUNCE`; `Some` when the session ends meanwhile.
    async fn debounce(&mut self, events: &mut mpsc::Receiver<ServerEvent>) -> Option<Ended> {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(DEBOUNCE) => return None,
                event = events.recv() => if event.is_none() {
                    return Some(Ended::Lost("the server closed the connection".into()));
                },
                _ = self.stopping.changed() => return Some(Ended::Shutdown),
            }
        }
    }

    /// Walks until a walk completes without a `list_changed` arriving during it.
    async fn walk_until_settled(
        &mut self,
        session: &Arc<Session>,
        events: &mut mpsc::Receiver<ServerEvent>,
    ) -> Step {
        loop {
            self.report(ServerUpdate::Walking).await;
            let waiting_for_this_walk = std::mem::take(&mut self.waiting);
            let mut commands_during_walk = Vec::new();
            let outcome = {
                let walk = walk::walk(session, &self.store, &self.config.name, self.config.limits);
                tokio::pin!(walk);
                loop {
                    tokio::select! {
                        outcome = &mut walk => break Some(outcome),
                        event = events.recv() => match event {
                            // The walk may have read pages from before the change: start over.
                            Some(ServerEvent::ResourcesListChanged) => break None,
                            None => break Some(Err(WalkError::Connection(McpError::Closed(
                                "the server closed the connection".into(),
                            )))),
                        },
                        command = self.commands.recv() => match command {
                            Some(command) => commands_during_walk.push(command),
                            None => return Step::Ended(Ended::Shutdown),
                        },
                        _ = self.stopping.changed() => return Step::Ended(Ended::Shutdown),
                    }
                }
            };
            // Commands that came in during the walk: reads start now, refreshes wait for the next walk.
            for command in commands_during_walk {
                self.handle(command, Some(session));
            }
            let Some(outcome) = outcome else {
                tracing::info!("list_changed during the walk; discarding it and walking again");
                self.waiting.extend(waiting_for_this_walk);
                if let Some(ended) = self.debounce(events).await {
                    return Step::Ended(ended);
                }
                continue;
            };
            match outcome {
                Ok(summary) => {
                    self.backoff.reset();
                    tracing::info!(
                        pages = summary.report.pages,
                        resources = summary.swap.resources,
                        added = summary.swap.added,
                        removed = summary.swap.removed,
                        changed = summary.swap.changed,
                        duration_ms = summary.report.duration_ms,
                        "walk committed"
                    );
                    answer(waiting_for_this_walk, Ok(summary));
                    // A refresh that arrived during the walk gets a walk of its own.
                    let delay = if self.waiting.is_empty() {
                        self.config.resync_interval
                    } else {
                        Duration::ZERO
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
                    tracing::warn!(error = %message, retry_in_ms = delay.as_millis() as u64, "keeping the last snapshot");
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
        // Up to 25% of jitter, from the clock's low bits: no need for a random generator here.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.subsec_nanos())
            .unwrap_or(0);
        let jitter = base.mul_f64((nanos % 1000) as f64 / 4000.0);
        base + jitter
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}
