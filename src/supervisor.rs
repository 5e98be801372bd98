//! Owns the session actors, one per configured server, and routes refresh requests to them.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::{oneshot, watch, Mutex};

use crate::config::ServerConfig;
use crate::session::SessionHandle;
use crate::store::Store;
use crate::walk::WalkSummary;

/// How long sessions get to close (stdio children stopped, HTTP sessions deleted) at shutdown.
const STOP_BOUND: Duration = Duration::from_secs(10);

pub struct Supervisor {
    /// Behind an async mutex so the socket can refresh while a reload or shutdown changes the set.
    sessions: Mutex<BTreeMap<String, SessionHandle>>,
}

/// What `refresh` found for one server.
pub enum RefreshOutcome {
    Queued,
    Walked(Result<WalkSummary, String>),
}

impl Supervisor {
    pub fn start(
        servers: &[ServerConfig],
        store: &Store,
        shutdown: &watch::Receiver<bool>,
    ) -> Supervisor {
        let sessions = servers
            .iter()
            .map(|server| {
                (
                    server.name.clone(),
                    SessionHandle::spawn(server.clone(), store.clone(), shutdown.clone()),
                )
            })
            .collect();
        Supervisor {
            sessions: Mutex::new(sessions),
        }
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
                let accepted = session.refresh(Some(reply)).await;
                pending.push((session.name.clone(), accepted.then_some(answer)));
            } else {
                session.refresh(None).await;
                pending.push((session.name.clone(), None));
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

    /// Waits for every session to close after shutdown was signalled, within a bound.
    pub async fn join(&self) {
        let sessions = std::mem::take(&mut *self.sessions.lock().await);
        let all = futures_util::future::join_all(sessions.into_values().map(SessionHandle::join));
        if tokio::time::timeout(STOP_BOUND, all).await.is_err() {
            tracing::warn!("some sessions did not close within {STOP_BOUND:?}");
        }
    }
}
