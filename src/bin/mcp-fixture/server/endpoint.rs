//! One fixture `Server` (one endpoint): its catalog, `Session`s, push queues, and the replies of both eras.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};
use tracing::{debug, info, warn};

use crate::catalog::{Catalog, Controls, PageFault, Scenario};
use crate::rpc::{self, error_message, result_message, RpcError};
use crate::stats::Stats;
use crate::{Args, EraChoice};

/// Handshake-era protocol versions, newest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub(super) const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";
/// Messages kept per session for `Last-Event-ID` replay (and for a slow legacy SSE reader).
const HISTORY_LIMIT: usize = 4096;

static NEXT_SESSION_NUMBER: AtomicU64 = AtomicU64::new(1);
static NEXT_SERVER_PING: AtomicU64 = AtomicU64::new(1);

/// Something every push channel of a server must act on.
#[derive(Clone, Debug)]
pub enum Push {
    /// The catalog changed: send this many `list_changed` notifications.
    ListChanged(usize),
    /// Tools or prompts changed: send this notification (handshake-era stdio sessions).
    EntriesChanged(&'static str),
    /// Cut every GET, listen and legacy SSE stream without a goodbye.
    DropStreams,
    /// End every listen gracefully: with its result, or on stdio with `notifications/cancelled`.
    CloseListens { cancel: bool },
}

/// The protocol era one message is served in.
#[derive(Clone, Debug)]
pub enum Era {
    /// The handshake era (2024-11-05 .. 2025-11-25): `initialize`, sessions.
    Legacy,
    /// The stateless era (2026-07-28): every request carries its version and capabilities.
    Modern { capabilities: Value },
}

/// What a transport must send back for one request.
pub enum Reply {
    /// A result or error response, and the HTTP status it travels with.
    Message { message: Value, status: u16 },
    /// A `subscriptions/listen` was accepted: open its stream, acknowledging `honoured` first.
    Listen { id: Value, honoured: Value },
    /// A page fault replaces the answer.
    Fault(PageFault),
    /// The stdio process must exit with this code without answering.
    Exit(i32),
}

/// Why a request produced no result.
pub(super) enum Failure {
    Rpc(RpcError),
    Fault(PageFault),
    Exit(i32),
}

impl From<RpcError> for Failure {
    fn from(error: RpcError) -> Self {
        Failure::Rpc(error)
    }
}

/// What a handler produced.
pub(super) enum Handled {
    Result(Value),
    /// A result sent exactly as is, without the stateless era's decorations.
    Raw(Value),
    Listen(Value),
}

/// The two kinds of HTTP session: a Streamable HTTP one (header) or a 2024-11-05 SSE one (query).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SessionKind {
    StreamableHttp,
    LegacySse,
}

/// An HTTP session and the queue of server messages for its stream.
///
/// For Streamable HTTP the queue doubles as the replay history of the GET
/// stream: it is filled whether or not a stream is connected, so a stream that
/// reconnects with `Last-Event-ID` gets what it missed.
pub struct Session {
    pub id: String,
    pub kind: SessionKind,
    inner: Mutex<SessionInner>,
    changes: watch::Sender<u64>,
}

#[derive(Default)]
struct SessionInner {
    history: VecDeque<(u64, String)>,
    last_sequence: u64,
    stream_open: bool,
    pending_post: Vec<String>,
    initialized: bool,
    expired: bool,
    cut: bool,
}

/// What a session's stream should do next.
pub enum Queue {
    /// Send these (sequence, message) pairs; empty means wait.
    Messages(Vec<(u64, String)>),
    /// The session expired or was deleted: end the stream.
    Gone,
    /// A fault asked for this session's stream to be cut abruptly.
    Cut,
}

impl Session {
    fn new(kind: SessionKind) -> Self {
        Self {
            id: new_session_id(),
            kind,
            inner: Mutex::new(SessionInner::default()),
            changes: watch::channel(0).0,
        }
    }

    fn inner(&self) -> MutexGuard<'_, SessionInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues messages for the session's stream, numbering them.
    pub fn push_messages(&self, messages: impl IntoIterator<Item = String>) {
        {
            let mut inner = self.inner();
            for message in messages {
                inner.last_sequence += 1;
                let sequence = inner.last_sequence;
                inner.history.push_back((sequence, message));
                if inner.history.len() > HISTORY_LIMIT {
                    inner.history.pop_front();
                }
            }
        }
        self.changes.send_modify(|version| *version += 1);
    }

    /// The queued messages after `cursor`, or why the stream must end.
    pub fn messages_after(&self, cursor: u64) -> Queue {
        let mut inner = self.inner();
        if std::mem::take(&mut inner.cut) {
            return Queue::Cut;
        }
        if inner.expired {
            return Queue::Gone;
        }
        let messages = inner
            .history
            .iter()
            .filter(|(sequence, _)| *sequence > cursor)
            .cloned()
            .collect();
        Queue::Messages(messages)
    }

    /// Asks the session's stream to cut its connection abruptly (the `drop_at_page` fault).
    pub fn cut_stream(&self) {
        self.inner().cut = true;
        self.changes.send_modify(|version| *version += 1);
    }

    pub fn last_sequence(&self) -> u64 {
        self.inner().last_sequence
    }

    /// A receiver that wakes whenever messages are queued or the session expires.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Claims the session's one server stream; false when one is already open.
    pub fn try_open_stream(&self) -> bool {
        let mut inner = self.inner();
        !std::mem::replace(&mut inner.stream_open, true)
    }

    pub fn close_stream(&self) {
        self.inner().stream_open = false;
    }

    /// Notifications to deliver inside the next POST's SSE response (`--notify-in-post`).
    pub fn take_pending_post(&self) -> Vec<String> {
        std::mem::take(&mut self.inner().pending_post)
    }

    fn queue_for_post(&self, messages: impl IntoIterator<Item = String>) {
        let mut inner = self.inner();
        inner.pending_post.extend(messages);
        let excess = inner.pending_post.len().saturating_sub(HISTORY_LIMIT);
        inner.pending_post.drain(..excess);
    }

    pub fn mark_initialized(&self) {
        self.inner().initialized = true;
    }

    fn is_initialized(&self) -> bool {
        self.inner().initialized
    }

    fn expire(&self) {
        self.inner().expired = true;
        self.changes.send_modify(|version| *version += 1);
    }
}

/// Everything requests mutate, behind one lock that is never held across an await.
struct State {
    catalog: Arc<Catalog>,
    sessions: HashMap<String, Arc<Session>>,
}

/// One MCP server: a catalog, its sessions and its push channels.
pub struct Server {
    pub args: Arc<Args>,
    /// Set when the process serves several endpoints (`--endpoints`).
    pub endpoint: Option<usize>,
    pub stats: Arc<Stats>,
    state: Mutex<State>,
    pushes: broadcast::Sender<Push>,
    pub(super) stale_cursor_fired: AtomicBool,
    /// How many discovers, GETs and POSTs the `refuse_discovers` and `unavailable_*` faults
    /// have refused so far.
    pub(super) discovers_refused: AtomicU64,
    gets_refused: AtomicU64,
    posts_refused: AtomicU64,
    /// The `Authorization` header of the last POST (`--reflect-authorization`).
    pub last_authorization: Mutex<Option<String>>,
}

impl Server {
    pub fn new(
        args: Arc<Args>,
        endpoint: Option<usize>,
        stats: Arc<Stats>,
        catalog: Catalog,
    ) -> Self {
        Self {
            args,
            endpoint,
            stats,
            state: Mutex::new(State {
                catalog: Arc::new(catalog),
                sessions: HashMap::new(),
            }),
            pushes: broadcast::channel(256).0,
            stale_cursor_fired: AtomicBool::new(false),
            discovers_refused: AtomicU64::new(0),
            gets_refused: AtomicU64::new(0),
            posts_refused: AtomicU64::new(0),
            last_authorization: Mutex::new(None),
        }
    }

    /// Locks the shared state; poison is ignored because no holder leaves it half-updated.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.state().catalog)
    }

    pub fn subscribe_pushes(&self) -> broadcast::Receiver<Push> {
        self.pushes.subscribe()
    }

    pub fn create_session(&self, kind: SessionKind) -> Arc<Session> {
        let session = Arc::new(Session::new(kind));
        self.state()
            .sessions
            .insert(session.id.clone(), Arc::clone(&session));
        self.stats.update(|counters| {
            counters.sessions += 1;
            counters.sessions_created += 1;
        });
        info!(session = %session.id, ?kind, endpoint = ?self.endpoint, "session created");
        session
    }

    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.state().sessions.get(id).cloned()
    }

    /// Forgets a session; true when it existed.
    pub fn remove_session(&self, id: &str) -> bool {
        let removed = self.state().sessions.remove(id);
        if let Some(session) = &removed {
            session.expire();
            self.stats
                .update(|counters| counters.sessions = counters.sessions.saturating_sub(1));
            info!(session = %id, "session ended");
        }
        removed.is_some()
    }

    /// Swaps in the catalog of a new scenario, bumps the version and tells every channel.
    pub fn replace_catalog(&self, scenario: &Scenario) -> anyhow::Result<u64> {
        let mut catalog = Catalog::build(&self.args, scenario, 0, self.endpoint)?;
        let burst = catalog.notify_burst;
        let (version, sessions, (entry_notifications, resources_notify)) = {
            let mut state = self.state();
            catalog.version = state.catalog.version + 1;
            let notify = crate::definitions::notifications_for(&state.catalog, &catalog);
            state.catalog = Arc::new(catalog);
            let sessions: Vec<Arc<Session>> = state.sessions.values().cloned().collect();
            (state.catalog.version, sessions, notify)
        };
        for method in entry_notifications {
            let _ = self.pushes.send(Push::EntriesChanged(method));
            for session in sessions.iter().filter(|session| session.is_initialized()) {
                if session.kind == SessionKind::StreamableHttp && !self.args.no_get_stream {
                    session.push_messages([crate::definitions::notification(method, None)]);
                }
            }
        }
        if !resources_notify {
            self.stats
                .update(|counters| counters.catalog_version = version);
            return Ok(version);
        }
        self.stats
            .update(|counters| counters.catalog_version = version);
        self.announce_list_changed(&sessions, burst);
        Ok(version)
    }

    /// Sends `burst` list_changed notifications on every channel of every initialized session.
    fn announce_list_changed(&self, sessions: &[Arc<Session>], burst: usize) {
        let notifications = || std::iter::repeat(rpc::list_changed(None)).take(burst);
        for session in sessions.iter().filter(|session| session.is_initialized()) {
            match session.kind {
                SessionKind::LegacySse => session.push_messages(notifications()),
                SessionKind::StreamableHttp if self.args.notify_in_post => {
                    session.queue_for_post(notifications());
                }
                SessionKind::StreamableHttp if !self.args.no_get_stream => {
                    session.push_messages(notifications());
                }
                SessionKind::StreamableHttp => {}
            }
        }
        // Nobody listening (no stdio session or listen stream yet) is not an error.
        let _ = self.pushes.send(Push::ListChanged(burst));
    }

    /// Performs the one-shot actions of changed scenario counters.
    pub fn apply_controls(&self, controls: &Controls) {
        if controls.expire_sessions {
            let sessions: Vec<Arc<Session>> =
                self.state().sessions.drain().map(|(_, s)| s).collect();
            let expired = sessions.len() as u64;
            for session in &sessions {
                session.expire();
            }
            self.stats
                .update(|counters| counters.sessions = counters.sessions.saturating_sub(expired));
            info!(expired, endpoint = ?self.endpoint, "expired every session");
        }
        if controls.drop_streams {
            info!(endpoint = ?self.endpoint, "dropping every stream");
            let _ = self.pushes.send(Push::DropStreams);
        }
        if controls.close_listens || controls.cancel_listens {
            let cancel = controls.cancel_listens;
            info!(cancel, endpoint = ?self.endpoint, "closing every listen");
            let _ = self.pushes.send(Push::CloseListens { cancel });
        }
    }

    /// The protocol versions the stateless era accepts, as advertised by discover and -32022.
    pub fn modern_versions(&self) -> &[String] {
        &self.args.modern_versions
    }

    /// Validates the per-request `_meta` of a modern request.
    ///
    /// A missing required field is -32602 (the spec calls the request
    /// malformed); a version the server does not speak is -32022 with the
    /// versions it does. Both travel with HTTP 400.
    pub fn modern_era(&self, params: Option<&Value>) -> Result<Era, RpcError> {
        let missing = |what: &str| {
            RpcError::invalid_params(format!("missing required params._meta field {what}"))
                .with_status(400)
        };
        let meta = params
            .and_then(|params| params.get("_meta"))
            .and_then(Value::as_object)
            .ok_or_else(|| missing("(no _meta object)"))?;
        let version = meta
            .get(PROTOCOL_VERSION_KEY)
            .and_then(Value::as_str)
            .ok_or_else(|| missing(PROTOCOL_VERSION_KEY))?;
        let capabilities = meta
            .get(CLIENT_CAPABILITIES_KEY)
            .filter(|capabilities| capabilities.is_object())
            .ok_or_else(|| missing(CLIENT_CAPABILITIES_KEY))?;
        if !self.modern_versions().iter().any(|known| known == version) {
            return Err(self.unsupported_version(version));
        }
        Ok(Era::Modern {
            capabilities: capabilities.clone(),
        })
    }

    /// -32022 for `requested`, listing every version the server speaks: its stateless ones,
    /// and with `--era both` its handshake-era ones too (reached through `initialize`).
    pub(super) fn unsupported_version(&self, requested: &str) -> RpcError {
        let mut supported: Vec<&str> = self.modern_versions().iter().map(String::as_str).collect();
        if self.args.era == EraChoice::Both {
            supported.extend(LEGACY_VERSIONS);
        }
        let data = json!({"supported": supported, "requested": requested});
        RpcError::new(-32022, "Unsupported protocol version")
            .with_data(data)
            .with_status(400)
    }

    /// Whether the `bare_result_for_unknown_methods` fault is on.
    pub fn answers_unknown_methods(&self) -> bool {
        self.catalog().faults.bare_result_for_unknown_methods
    }

    /// For the `unavailable_*` faults: `Some(retry_after_secs)` when this GET (or POST) is to
    /// be answered 503.
    pub fn refuse_as_unavailable(&self, get: bool) -> Option<Option<u64>> {
        let catalog = self.catalog();
        let faults = &catalog.faults;
        let (limit, refused) = if get {
            (faults.unavailable_gets, &self.gets_refused)
        } else {
            (faults.unavailable_posts, &self.posts_refused)
        };
        let limit = limit?;
        // Counted only while refusing, so raising the limit later refuses that many more.
        let claimed = refused.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |count| {
            (count < limit).then_some(count + 1)
        });
        claimed.ok()?;
        self.stats
            .update(|counters| crate::stats::record_now(&mut counters.unavailable_at_ms));
        warn!(get, "answering 503 on request of the unavailable fault");
        Some(faults.retry_after_secs)
    }

    /// Decides the era of a request on stdio, where nothing but the message itself can tell.
    pub fn stdio_era(&self, method: &str, params: Option<&Value>) -> Result<Era, RpcError> {
        let carries_version = params
            .and_then(|params| params.get("_meta"))
            .and_then(|meta| meta.get(PROTOCOL_VERSION_KEY))
            .is_some();
        let modern_only_method = matches!(method, "server/discover" | "subscriptions/listen");
        match self.args.era {
            EraChoice::Legacy => Ok(Era::Legacy),
            // `initialize` always takes the legacy path; a modern-only server refuses it there.
            _ if method == "initialize" => Ok(Era::Legacy),
            EraChoice::Both if !carries_version && !modern_only_method => Ok(Era::Legacy),
            EraChoice::Both | EraChoice::Modern => self.modern_era(params),
        }
    }

    /// Answers one request in `era`.
    pub async fn serve(&self, id: Value, method: &str, params: Option<Value>, era: &Era) -> Reply {
        debug!(method, %id, ?era, "request");
        let outcome = self.dispatch(method, params.as_ref(), era).await;
        if self.catalog().faults.notify_with_every_answer {
            // The `notify_with_every_answer` fault: the list "changed" with every answer.
            let sessions: Vec<Arc<Session>> = self.state().sessions.values().cloned().collect();
            self.announce_list_changed(&sessions, 1);
        }
        match outcome {
            Ok(Handled::Result(result)) => {
                let result = match era {
                    Era::Modern { .. } => self.decorate_modern(method, result),
                    Era::Legacy => result,
                };
                Reply::Message {
                    message: result_message(id, result),
                    status: 200,
                }
            }
            Ok(Handled::Raw(result)) => Reply::Message {
                message: result_message(id, result),
                status: 200,
            },
            Ok(Handled::Listen(honoured)) => Reply::Listen { id, honoured },
            Err(Failure::Rpc(error)) => Reply::Message {
                message: error_message(id, &error),
                status: error.status,
            },
            Err(Failure::Fault(fault)) => Reply::Fault(fault),
            Err(Failure::Exit(code)) => Reply::Exit(code),
        }
    }

    /// A `ping` request for a push channel, counted as sent.
    pub fn next_server_ping(&self) -> String {
        let number = NEXT_SERVER_PING.fetch_add(1, Ordering::Relaxed);
        self.stats
            .update(|counters| counters.server_pings_sent += 1);
        rpc::server_ping(number)
    }

    pub fn count_ping_answer(&self, id: &Value) {
        if rpc::answers_server_ping(id) {
            self.stats
                .update(|counters| counters.client_ping_answers += 1);
        }
    }

    pub fn count_list_changed(&self, sent: usize) {
        if sent > 0 {
            self.stats
                .update(|counters| counters.list_changed_sent += sent as u64);
        }
    }
}

/// -32601; the modern era sends it with HTTP 404, the handshake era with 200.
pub fn method_not_found(method: &str, modern: bool) -> RpcError {
    let error = RpcError::new(-32601, format!("Method not found: {method}"));
    if modern {
        error.with_status(404)
    } else {
        error
    }
}

fn new_session_id() -> String {
    let number = NEXT_SESSION_NUMBER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    let mixed =
        nanos ^ (u64::from(std::process::id()) << 40) ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("{mixed:016x}{number:04x}")
}
