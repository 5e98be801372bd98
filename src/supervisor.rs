//! Owns the session actors, one per configured server, and routes refreshes and reads to them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{oneshot, Mutex};

use crate::config::ServerConfig;
use crate::session::{LiveStatus, ReadError, SessionHandle};
use crate::store::Store;
use crate::walk::WalkSummary;

/// How long sessions get to close (stdio children stopped, HTTP sessions deleted) at shutdown.
const STOP_BOUND: Duration = Duration::from_secs(10);

pub struct Supervisor {
    store: Store,
    /// Behind an async mutex so the socket can refresh while a reload or shutdown changes the set.
    sessions: Mutex<BTreeMap<String, SessionHandle>>,
}

/// What `refresh` found for one server.
pub enum RefreshOutcome {
    Queued,
    Walked(Result<WalkSummary, String>),
}

impl Supervisor {
    pub fn start(servers: &[ServerConfig], store: &Store) -> Supervisor {
        let sessions = servers
            .iter()
            .map(|server| {
                (
                    server.name.clone(),
                    SessionHandle::spawn(server.clone(), store.clone()),
                )
            })
            .collect();
        Supervisor {
            store: store.clone(),
            sessions: Mutex::new(sessions),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Asks one server (or all) to walk now; with `wait`, returns after each walk finished.
    /// `None` when no server has that name.
    pub async fn refresh(
        &self,
        server: Option<&str>,
        wait: bool,
    ) -> Option<BTreeMap<String, RefreshOutcome>> {
        let sessions = self.sessions.lock().await;
        let targets: Vec<&SessionHandle> = match server {
            Some(name) => vec![sessions.get(name)?],
            None => sessions.values().collect(),
        };
        let mut pending = Vec::new();
        for session in targets {
            if wait {
                let (reply, answer) = oneshot::channel();
                let accepted = session.client().refresh(Some(reply)).await;
                pending.push((session.name().to_string(), accepted.then_some(answer)));
            } else {
                session.client().refresh(None).await;
                pending.push((session.name().to_string(), None));
            }
        }
        drop(sessions);
        let mut outcomes = BTreeMap::new();
        for (name, answer) in pending {
            let outcome = match answer {
                Some(answer) => RefreshOutcome::Walked(
                    answer
                        .await
                        .unwrap_or_else(|_| Err("the session stopped before walking".into())),
                ),
                None if wait => RefreshOutcome::Walked(Err("the session has stopped".into())),
                None => RefreshOutcome::Queued,
            };
            outcomes.insert(name, outcome);
        }
        Some(outcomes)
    }

    /// What each session knows right now beside the database: era, push channel, counters.
    pub async fn live_status(&self) -> BTreeMap<String, LiveStatus> {
        let sessions = self.sessions.lock().await;
        sessions
            .iter()
            .map(|(name, session)| (name.clone(), session.client().live_status()))
            .collect()
    }

    /// Reads `uri` from `server` through its live session.
    pub async fn read(&self, server: &str, uri: &str) -> Result<Value, ReadError> {
        let client = self
            .sessions
            .lock()
            .await
            .get(server)
            .map(SessionHandle::client);
        match client {
            Some(client) => client.read(uri).await,
            None => Err(ReadError::Offline {
                server: server.to_string(),
                reason: "it is no longer configured".into(),
            }),
        }
    }

    /// Stops every session (stdio children stopped, HTTP sessions deleted), within a bound.
    pub async fn shutdown(&self) {
        let sessions = std::mem::take(&mut *self.sessions.lock().await);
        let all = futures_util::future::join_all(sessions.into_values().map(SessionHandle::stop));
        if tokio::time::timeout(STOP_BOUND, all).await.is_err() {
            tracing::warn!("some sessions did not close within {STOP_BOUND:?}");
        }
    }
}
