//! The handles to one server's session actor: `SessionHandle` (spawn, stop, status) and `SessionClient` (commands to it).

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::actor;
use super::commands::ReadError;
use super::commands::RefreshReply;
use super::commands::SessionCommand;
use super::fleet;
use crate::config::ServerConfig;
use crate::protocol::LiveStatus;
use crate::store::Store;
use crate::walk::progress::WalkMeter;

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
    live: watch::Receiver<LiveStatus>,
    /// The walk in flight's progress, read when status is asked (not published per page).
    meter: Arc<WalkMeter>,
}

impl SessionHandle {
    /// Starts the session's task on `runtime` (the daemon's `background::upstream_runtime`).
    pub fn spawn(
        config: ServerConfig,
        store: Store,
        runtime: &tokio::runtime::Handle,
    ) -> SessionHandle {
        let (commands, command_receiver) = mpsc::channel(64);
        let (stop, stopping) = watch::channel(false);
        let (live_sender, live) = watch::channel(LiveStatus::default());
        let span = tracing::info_span!("session", server = %config.name);
        let meter = Arc::new(WalkMeter::default());
        // A bucket is followed by the fleet's task; every other transport by the MCP actor.
        let task = match &config.transport {
            crate::config::Transport::Nats {
                url,
                bucket,
                credentials,
            } => {
                let source = fleet::BucketSource {
                    url: url.clone(),
                    bucket: bucket.clone(),
                    credentials: credentials.clone(),
                };
                let run = fleet::run(
                    config.clone(),
                    source,
                    store,
                    stopping,
                    command_receiver,
                    live_sender,
                );
                runtime.spawn(run.instrument(span))
            }
            _ => {
                let actor = actor::Actor::new(
                    config.clone(),
                    store,
                    actor::Inbox {
                        stopping,
                        commands: command_receiver,
                    },
                    live_sender,
                    meter.clone(),
                );
                runtime.spawn(actor.run().instrument(span))
            }
        };
        SessionHandle {
            client: SessionClient {
                name: config.name.clone(),
                commands,
                live,
                meter,
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
        let mut live = self.live.borrow().clone();
        live.walk_progress = self.meter.snapshot();
        live
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
