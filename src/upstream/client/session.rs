//! `Session`: one connection to an upstream server, opened per transport, with what its hello said (`ServerHello`, `MirrorPeer`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::handshake::*;
use crate::config::{EraChoice, ServerConfig, Transport};
use crate::protocol::ConnectedTransport;
use crate::protocol::Era;
use crate::protocol::PushChannel;
use crate::protocol::{LEGACY_VERSIONS, METHOD_NOT_FOUND, MODERN_VERSIONS};
use crate::upstream::backoff::{Backoff, RECONNECT_FLOOR};
use crate::upstream::http::HttpConnection;
use crate::upstream::legacy_sse::LegacySseConnection;
use crate::upstream::page::Page;
use crate::upstream::stdio::StdioConnection;
use crate::upstream::{rpc, EventSink, McpError, ServerEvent};

/// The slowest a listen that keeps ending is reopened.
const MAX_LISTEN_RETRY: Duration = Duration::from_secs(30);
/// A listen that stayed open this long was healthy: its end is not a failure.
const HEALTHY_LISTEN: Duration = Duration::from_secs(5);

/// What the server told us about itself.
#[derive(Debug, Clone)]
pub struct ServerHello {
    pub era: Era,
    pub protocol_version: String,
    pub capabilities: Value,
    pub server_info: Value,
    /// Set when the server is an mcp-mirror (it declares the feed capability), read once at the
    /// handshake.
    pub mirror: Option<MirrorPeer>,
}

/// An upstream that is an mcp-mirror: the version of its change feed and its database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorPeer {
    /// `capabilities.experimental["io.mcp-mirror/feed"].version` (0 when it is not a number).
    pub feed_version: u64,
    /// `serverInfo["io.mcp-mirror/instance"]`, when it says.
    pub instance: Option<String>,
}

impl ServerHello {
    /// Reads whether the server is an mcp-mirror, once its capabilities and info are known.
    pub(super) fn read_mirror(&mut self) {
        let feed = &self.capabilities["experimental"][crate::protocol::FEED_CAPABILITY];
        self.mirror = (!feed.is_null()).then(|| MirrorPeer {
            feed_version: feed["version"].as_u64().unwrap_or(0),
            instance: self.server_info["io.mcp-mirror/instance"]
                .as_str()
                .map(|instance| crate::redact::truncate_server_text(instance).to_string()),
        });
    }

    /// True when the server is an mcp-mirror whose feed this version follows.
    pub fn follows_feed(&self) -> bool {
        self.mirror
            .as_ref()
            .is_some_and(|mirror| mirror.feed_version == crate::protocol::FEED_VERSION)
    }

    pub fn has_resources(&self) -> bool {
        self.capabilities
            .get("resources")
            .is_some_and(Value::is_object)
    }

    /// True when the server promises `list_changed` notifications (of any kind).
    pub fn lists_changes(&self) -> bool {
        ["resources", "tools", "prompts"]
            .iter()
            .any(|kind| self.kind_lists_changes(kind))
    }

    /// True when the server promises `list_changed` for one capability (`resources`, `tools`, …).
    pub fn kind_lists_changes(&self, capability: &str) -> bool {
        self.capabilities[capability]["listChanged"] == Value::Bool(true)
    }
}

pub(super) enum Connection {
    Stdio(StdioConnection),
    Http(HttpConnection),
    LegacySse(LegacySseConnection),
}

/// A live session with one server.
pub struct Session {
    pub(super) connection: Connection,
    pub(super) timeout: Duration,
    /// How long the first message of a connection may wait for the server to start.
    pub(super) connect_timeout: Duration,
    /// No message of this connection has been answered yet.
    pub(super) first_contact_pending: bool,
    /// Until when this connection waits for its first answer (set by its first message).
    pub(super) first_contact_deadline: Option<Instant>,
    pub(super) events: EventSink,
    pub hello: ServerHello,
    listen: Mutex<Option<JoinHandle<()>>>,
    /// Paces reopening a listen that keeps ending.
    listen_backoff: Mutex<Backoff>,
}

impl Session {
    /// Connects and establishes the session in the era the server speaks. `known_era` is what
    /// this server spoke last time, so a reconnect need not probe again.
    pub async fn connect(
        server: &ServerConfig,
        events: EventSink,
        known_era: Option<Era>,
    ) -> Result<Session, McpError> {
        let connection = open_connection(server, events.clone())?;
        let mut session = Session {
            connection,
            timeout: server.request_timeout,
            connect_timeout: server.connect_timeout,
            first_contact_pending: true,
            first_contact_deadline: None,
            events,
            hello: ServerHello {
                era: Era::Legacy,
                protocol_version: String::new(),
                capabilities: Value::Null,
                server_info: Value::Null,
                mirror: None,
            },
            listen: Mutex::new(None),
            listen_backoff: Mutex::new(Backoff::new(RECONNECT_FLOOR, MAX_LISTEN_RETRY)),
        };
        match session.establish(server, known_era).await {
            Ok(()) => {
                if let Connection::Stdio(stdio) = &session.connection {
                    stdio.first_contact_done();
                }
                Ok(session)
            }
            Err(error) => {
                session.close().await;
                if let Connection::Stdio(stdio) = &session.connection {
                    stdio.report_first_contact_stderr().await;
                }
                Err(error)
            }
        }
    }

    async fn establish(
        &mut self,
        server: &ServerConfig,
        known_era: Option<Era>,
    ) -> Result<(), McpError> {
        let pinned = server.protocol_version.as_deref();
        let pinned_modern = pinned.filter(|version| MODERN_VERSIONS.contains(version));
        let pinned_legacy = pinned.filter(|version| LEGACY_VERSIONS.contains(version));
        let probe = match server.era {
            EraChoice::Modern => true,
            EraChoice::Legacy => false,
            EraChoice::Auto => pinned_legacy.is_none() && known_era != Some(Era::Legacy),
        };
        let mut handshake_version = pinned_legacy.unwrap_or(LEGACY_VERSIONS[0]).to_string();
        if probe {
            match self.discover(pinned_modern).await? {
                Probe::Stateless => return Ok(()),
                Probe::Handshake { why, .. } if server.era == EraChoice::Modern => return Err(why),
                Probe::Handshake {
                    why,
                    fresh_connection,
                    version,
                } => {
                    tracing::debug!(server = %server.name, reason = %why, "not the stateless era; trying initialize");
                    if fresh_connection {
                        self.reopen(server).await?;
                    }
                    if let Some(version) = version {
                        handshake_version = version;
                    }
                }
            }
        }
        self.initialize(&handshake_version, &server.name).await
    }

    /// Replaces a stdio child whose state after the probe is unknown (it may still answer
    /// it, or it died) with a new one; the old one's events no longer reach the session.
    /// Over HTTP every POST stands alone, and `initialize` resets what the probe set.
    async fn reopen(&mut self, server: &ServerConfig) -> Result<(), McpError> {
        if !matches!(self.connection, Connection::Stdio(_)) {
            return Ok(());
        }
        tracing::debug!(server = %server.name, "starting the server again for initialize");
        self.events = self.events.renewed();
        self.close_connection().await;
        self.connection = open_connection(server, self.events.clone())?;
        self.first_contact_pending = true;
        self.first_contact_deadline = None;
        Ok(())
    }

    pub async fn request(&self, method: &str, params: Value) -> Result<Value, McpError> {
        self.request_within(method, params, Some(self.timeout))
            .await
    }

    /// A request whose result comes back as the server wrote it (its text), for a caller that
    /// parses it as it needs (keeping only part of a large answer, say).
    /// `params` are the method's typed params (ours serialize always; `null` only stands in for
    /// an impossible failure).
    pub async fn request_text(
        &self,
        method: &str,
        params: &impl serde::Serialize,
    ) -> Result<Box<serde_json::value::RawValue>, McpError> {
        let params = serde_json::to_value(params).unwrap_or(Value::Null);
        self.raw_request_within(method, params, Some(self.timeout))
            .await
    }

    pub(super) async fn request_within(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<Value, McpError> {
        let raw = self.raw_request_within(method, params, timeout).await?;
        serde_json::from_str(raw.get()).map_err(|error| McpError::Protocol(error.to_string()))
    }

    /// A request whose result stays as the server wrote it, for the caller to parse.
    async fn raw_request_within(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<rpc::RawResult, McpError> {
        let params = self.with_meta(params);
        let outcome = match &self.connection {
            Connection::Stdio(stdio) => stdio.request(method, params, timeout).await,
            Connection::Http(http) => http.request(method, params, timeout).await,
            Connection::LegacySse(sse) => sse.request(method, params, timeout).await,
        };
        outcome.map_err(|error| match error {
            McpError::Rpc {
                method: named,
                error,
            } if named.is_empty() => McpError::Rpc {
                method: method.to_string(),
                error,
            },
            other => other,
        })
    }

    pub(super) async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        let params = self.with_meta(params);
        match &self.connection {
            Connection::Stdio(stdio) => stdio.notify(method, params).await,
            Connection::Http(http) => http.notify(method, params, self.timeout).await,
            Connection::LegacySse(sse) => sse.notify(method, params).await,
        }
    }

    /// In the stateless era every request carries the protocol version, our capabilities
    /// and who we are in `params._meta`.
    fn with_meta(&self, params: Value) -> Value {
        if self.hello.era != Era::Modern {
            return params;
        }
        let mut object = match params {
            Value::Object(object) => object,
            _ => Map::new(),
        };
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(
                "io.modelcontextprotocol/protocolVersion".into(),
                Value::String(self.hello.protocol_version.clone()),
            );
            meta.insert(
                "io.modelcontextprotocol/clientCapabilities".into(),
                json!({}),
            );
            meta.insert("io.modelcontextprotocol/clientInfo".into(), client_info());
        }
        Value::Object(object)
    }

    /// Fetches one page of `method` (`resources/list` or `resources/templates/list`).
    pub async fn list_page(
        &self,
        method: &str,
        field: &str,
        cursor: Option<&str>,
    ) -> Result<Page, McpError> {
        let params = match cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let raw = self
            .raw_request_within(method, params, Some(self.timeout))
            .await?;
        crate::upstream::page::parse_page(method, field, raw.get())
    }

    pub async fn read_resource(&self, uri: &str) -> Result<Value, McpError> {
        self.request("resources/read", json!({ "uri": uri })).await
    }

    /// Pings the server; a server without `ping` still counts as alive.
    pub async fn ping(&self) -> Result<(), McpError> {
        match self.request("ping", json!({})).await {
            Ok(_) => Ok(()),
            Err(error) if error.rpc_code() == Some(METHOD_NOT_FOUND) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Where this connection's events go; tasks beside the session report through it.
    pub fn events(&self) -> EventSink {
        self.events.clone()
    }

    pub fn transport(&self) -> ConnectedTransport {
        match self.connection {
            Connection::Stdio(_) => ConnectedTransport::Stdio,
            Connection::Http(_) => ConnectedTransport::StreamableHttp,
            Connection::LegacySse(_) => ConnectedTransport::HttpSse,
        }
    }

    /// Starts whatever brings this server's change notifications to us, and says which.
    pub fn start_push(self: &Arc<Self>) -> PushChannel {
        if !self.hello.lists_changes() {
            // The GET stream is the session's channel for whatever the server sends unasked
            // (pings, logs, a notification it did not declare), so it opens all the same, as
            // the SDK clients do; changes are still found by polling.
            if let (Connection::Http(http), Era::Legacy) = (&self.connection, self.hello.era) {
                http.start_get_stream();
            }
            return PushChannel::Polling(
                "the server does not declare resources.listChanged".into(),
            );
        }
        match (&self.connection, self.hello.era) {
            (_, Era::Modern) => {
                self.start_listen();
                PushChannel::Listen
            }
            (Connection::Stdio(_), Era::Legacy) => PushChannel::Stdio,
            (Connection::Http(http), Era::Legacy) => {
                http.start_get_stream();
                PushChannel::GetStream
            }
            (Connection::LegacySse(_), Era::Legacy) => PushChannel::SseStream,
        }
    }

    /// Opens (or reopens) the long-lived `subscriptions/listen` request.
    ///
    /// When it ends, the end is reported only after a pause paced by the session's listen
    /// backoff (a floor, longer while listens keep ending at once, at least a 429 or 503's
    /// `Retry-After`): the owner reopens the listen and walks when it hears of the end, so
    /// the pause keeps a server that ends every listen from making a loop.
    pub fn start_listen(self: &Arc<Self>) {
        let session = self.clone();
        let task = tokio::spawn(async move {
            // Ask for the list changes of every kind the server declares (an mcp-mirror whose
            // feed is followed: of every kind of its catalog).
            let followed = session.hello.follows_feed();
            let mut notifications = serde_json::Map::new();
            for kind in [
                crate::protocol::Kind::Resource,
                crate::protocol::Kind::Tool,
                crate::protocol::Kind::Prompt,
            ] {
                let declared = session.hello.capabilities.get(kind.capability());
                if kind == crate::protocol::Kind::Resource
                    || followed
                    || declared.is_some_and(Value::is_object)
                {
                    notifications.insert(kind.listen_key().into(), Value::Bool(true));
                }
            }
            let params = json!({ "notifications": notifications });
            let opened_at = Instant::now();
            let outcome = session
                .request_within("subscriptions/listen", params, None)
                .await;
            let (event, server_asked) = match outcome {
                Ok(_) => (
                    ServerEvent::ListenEnded("the server closed the listen stream".into()),
                    None,
                ),
                Err(error) if error.rpc_code() == Some(METHOD_NOT_FOUND) => {
                    session.events.send(ServerEvent::PushUnavailable(
                        "the server does not support subscriptions/listen".into(),
                    ));
                    return;
                }
                Err(error) => (
                    ServerEvent::ListenEnded(format!("the listen stream dropped: {error}")),
                    error.retry_after(),
                ),
            };
            let delay = {
                let mut backoff = lock(&session.listen_backoff);
                if opened_at.elapsed() >= HEALTHY_LISTEN {
                    backoff.reset();
                }
                backoff.next_delay_honouring(server_asked)
            };
            tracing::debug!(
                delay_ms = delay.as_millis() as u64,
                "the listen stream ended; reopening it after a pause"
            );
            tokio::time::sleep(delay).await;
            session.events.send(event);
        });
        if let Some(previous) = lock(&self.listen).replace(task) {
            previous.abort();
        }
    }

    /// Ends the session: the listen and streams stop, stdio children are stopped, HTTP
    /// sessions deleted.
    pub async fn close(&self) {
        if let Some(task) = lock(&self.listen).take() {
            task.abort();
        }
        self.close_connection().await;
    }

    async fn close_connection(&self) {
        match &self.connection {
            Connection::Stdio(stdio) => stdio.close().await,
            Connection::Http(http) => http.close().await,
            Connection::LegacySse(sse) => sse.close(),
        }
    }
}

/// Opens the configured transport; no message has been sent on it yet.
fn open_connection(server: &ServerConfig, events: EventSink) -> Result<Connection, McpError> {
    Ok(match &server.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => Connection::Stdio(StdioConnection::spawn(
            &server.name,
            command,
            args,
            env,
            cwd.as_ref(),
            events,
        )?),
        Transport::Http {
            url,
            headers,
            bearer_token,
        } => Connection::Http(HttpConnection::new(
            &server.name,
            url,
            headers,
            bearer_token.as_ref(),
            events,
        )?),
        // The session runs the bucket's follower instead (`session::fleet`): never an MCP one.
        Transport::Nats { .. } => {
            return Err(McpError::Transport(
                "a server followed through NATS has no MCP connection".into(),
            ))
        }
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
