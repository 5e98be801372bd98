//! Owns the session actors, one per configured server, and routes refreshes and reads to them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{oneshot, Mutex};

use crate::config::ServerConfig;
use crate::session::{LiveStatus, ReadError, Refreshed, SessionClient, SessionHandle};
use crate::store::{RemovedServers, ServerEntry, ServerSync, Store, StoreError};

/// How long sessions get to close (stdio children stopped, HTTP sessions deleted) at shutdown.
const STOP_BOUND: Duration = Duration::from_secs(10);

pub struct Supervisor {
    store: Store,
    /// Where the sessions run (`background::upstream_runtime`).
    upstream: tokio::runtime::Handle,
    /// Behind an async mutex so the socket can refresh while a reload or shutdown changes the set.
    sessions: Mutex<BTreeMap<String, SessionHandle>>,
}

/// What a reload changed, by server name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
}

/// How the store records a configured server.
pub fn server_entry(server: &ServerConfig) -> ServerEntry {
    ServerEntry {
        name: server.name.clone(),
        priority: server.priority,
        transport: (&server.transport).into(),
        read_cache_bytes: server.read_cache_bytes,
        history: server.history,
    }
}

/// What `refresh` found for one server.
pub enum RefreshOutcome {
    Queued,
    /// The walk settled (its swap committed, or there was nothing to walk), or it failed.
    Walked(Result<Refreshed, String>),
}

impl Supervisor {
    /// Starts a session for each of `servers` on `upstream`, the runtime sessions run on.
    pub fn start(
        servers: &[ServerConfig],
        store: &Store,
        upstream: tokio::runtime::Handle,
    ) -> Supervisor {
        let sessions = servers
            .iter()
            .map(|server| {
                (
                    server.name.clone(),
                    SessionHandle::spawn(server.clone(), store.clone(), &upstream),
                )
            })
            .collect();
        Supervisor {
            store: store.clone(),
            upstream,
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
        // Take cheap clients and let go of the lock before sending: a busy session must not
        // hold up reads, status or reloads of the others.
        let targets: Vec<(String, SessionClient)> = {
            let sessions = self.sessions.lock().await;
            match server {
                Some(name) => vec![(name.to_string(), sessions.get(name)?.client())],
                None => sessions
                    .iter()
                    .map(|(name, session)| (name.clone(), session.client()))
                    .collect(),
            }
        };
        let mut pending = Vec::new();
        for (name, client) in targets {
            if wait {
                let (reply, answer) = oneshot::channel();
                let accepted = client.refresh(Some(reply)).await;
                pending.push((name, accepted.then_some(answer)));
            } else {
                client.refresh(None).await;
                pending.push((name, None));
            }
        }
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

    /// Applies a reloaded configuration as a diff: added servers start, removed ones stop (their
    /// snapshots dropped or kept offline, as `removed` says), changed ones restart, and unchanged
    /// ones are not touched at all, so their sessions and schedules carry on.
    pub async fn apply(
        &self,
        servers: &[ServerConfig],
        removed: RemovedServers,
        history_bounds: crate::config::HistoryBounds,
    ) -> Result<ApplyReport, StoreError> {
        let mut sessions = self.sessions.lock().await;
        let mut report = ApplyReport::default();
        let wanted: BTreeMap<&str, &ServerConfig> = servers
            .iter()
            .map(|server| (server.name.as_str(), server))
            .collect();
        for (name, session) in sessions.iter() {
            match wanted.get(name.as_str()) {
                None => report.removed.push(name.clone()),
                Some(server) if **server != session.config => report.changed.push(name.clone()),
                Some(_) => report.unchanged.push(name.clone()),
            }
        }
        report.added = wanted
            .keys()
            .filter(|name| !sessions.contains_key(**name))
            .map(|name| name.to_string())
            .collect();

        // Sessions stop before the store forgets or resets their rows, so a late state report
        // from a stopping session cannot land after the new configuration's.
        let stopping: Vec<SessionHandle> = report
            .removed
            .iter()
            .chain(&report.changed)
            .filter_map(|name| sessions.remove(name))
            .collect();
        let all = futures_util::future::join_all(stopping.into_iter().map(SessionHandle::stop));
        if tokio::time::timeout(STOP_BOUND, all).await.is_err() {
            tracing::warn!("some sessions did not close within {STOP_BOUND:?} during a reload");
        }
        let recorded = self
            .store
            .apply_servers(ServerSync {
                configured: servers.iter().map(server_entry).collect(),
                untouched: report.unchanged.clone(),
                removed,
                history_bounds,
            })
            .await;
        // Even if recording failed, the configured servers run: their next state report or
        // walk tells the operator what is wrong, and the daemon keeps serving.
        for name in report.added.iter().chain(&report.changed) {
            if let Some(server) = wanted.get(name.as_str()) {
                let handle =
                    SessionHandle::spawn((*server).clone(), self.store.clone(), &self.upstream);
                sessions.insert(name.clone(), handle);
            }
        }
        recorded.map(|()| report)
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
