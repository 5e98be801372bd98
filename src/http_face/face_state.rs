//! What the HTTP handlers share (`HttpFace`: the daemon's context, the face's config and
//! bounds, its sessions and shares, each identity's client of the search gate), and the peer
//! address put on each request.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Semaphore};

use super::limits::{ClientIdentity, ClientKey, RefusalLog, Shares};
use super::sessions::Sessions;
use crate::answer::DaemonContext;
use crate::config::{Config, HttpConfig};
use crate::search::gate::SearchClient;

/// Search identities remembered at most; past it the ones idle longest are forgotten.
const MAX_SEARCH_IDENTITIES: usize = 4096;
/// An identity idle this long has used next to nothing lately (six of the gate's 10 s
/// half-lives): forgetting it loses nothing.
const SEARCH_IDENTITY_IDLE: Duration = Duration::from_secs(60);

/// The address a request's connection comes from, put on every request of the connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct PeerAddress(pub(super) IpAddr);

/// What the HTTP handlers share.
pub struct HttpFace {
    pub(super) api: Arc<DaemonContext>,
    pub(super) config: HttpConfig,
    /// Servers whose config says `share = true`; replaced on reload.
    pub(super) shared: std::sync::RwLock<BTreeSet<String>>,
    /// Handshake-era sessions (`Mcp-Session-Id`), bounded by `max_sessions`,
    /// `max_sessions_per_client` and `session_idle_timeout`.
    pub(super) sessions: std::sync::Mutex<Sessions>,
    pub(super) streams: Arc<Semaphore>,
    /// Each client's open streams, bounded by `max_streams_per_client`.
    pub(super) client_streams: Shares<ClientKey>,
    /// Each identity's open streams over all its addresses: one that holds any may not take
    /// the last `stream_reserve` of `max_streams`.
    pub(super) identity_streams: Shares<ClientIdentity>,
    pub(super) connections: Arc<Semaphore>,
    /// Each peer's open connections, bounded by `max_connections_per_peer`.
    pub(super) peer_connections: Shares<IpAddr>,
    /// Refusals, said once per interval with their count.
    pub(super) refusals: RefusalLog,
    /// HTTP connections open now.
    pub(super) clients: AtomicUsize,
    /// Each identity's share of the search gate, and when it last asked.
    search_clients: std::sync::Mutex<HashMap<ClientIdentity, (SearchClient, Instant)>>,
    pub(super) shutdown: watch::Receiver<bool>,
}

impl HttpFace {
    pub fn new(
        api: Arc<DaemonContext>,
        config: &Config,
        shutdown: watch::Receiver<bool>,
    ) -> HttpFace {
        let face = HttpFace {
            api,
            streams: Arc::new(Semaphore::new(config.http.max_streams)),
            client_streams: Shares::default(),
            identity_streams: Shares::default(),
            connections: Arc::new(Semaphore::new(config.http.max_connections)),
            peer_connections: Shares::default(),
            refusals: RefusalLog::default(),
            config: config.http.clone(),
            shared: std::sync::RwLock::new(BTreeSet::new()),
            sessions: std::sync::Mutex::new(Sessions::default()),
            clients: AtomicUsize::new(0),
            search_clients: std::sync::Mutex::new(HashMap::new()),
            shutdown,
        };
        face.apply(config);
        face
    }

    /// Takes the reloadable part of a (re)loaded configuration: which servers are shared.
    /// Listening addresses and tokens change only at the next start.
    pub fn apply(&self, config: &Config) {
        let shared = config
            .servers
            .iter()
            .filter(|server| server.share)
            .map(|server| server.name.clone())
            .collect();
        *self
            .shared
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = shared;
    }

    /// HTTP connections open now.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// The search gate's client for every request of `identity`, so the gate's fairness
    /// (least recent search time first, heavy clients kept off one slot, a bounded share of
    /// the queue) holds it back like one socket connection.
    pub(super) fn search_client(&self, identity: ClientIdentity) -> SearchClient {
        let now = Instant::now();
        let mut known = self
            .search_clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !known.contains_key(&identity) && known.len() >= MAX_SEARCH_IDENTITIES {
            known.retain(|_, (_, last)| now.duration_since(*last) < SEARCH_IDENTITY_IDLE);
            if known.len() >= MAX_SEARCH_IDENTITIES {
                let oldest = known
                    .iter()
                    .min_by_key(|(_, (_, last))| *last)
                    .map(|(identity, _)| identity.clone());
                if let Some(oldest) = oldest {
                    known.remove(&oldest);
                }
            }
        }
        let (client, last) = known
            .entry(identity)
            .or_insert_with(|| (SearchClient::default(), now));
        *last = now;
        client.clone()
    }
}
