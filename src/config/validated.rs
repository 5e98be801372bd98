//! The validated configuration: `Config`, its daemon settings, limits and timings, and each
//! server's `ServerConfig` and `Transport`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::defaults::{
    DEFAULT_HISTORY_MAX_AGE, DEFAULT_HISTORY_MAX_BYTES, DEFAULT_HISTORY_VERSIONS_PER_KEY,
};
use super::http::HttpConfig;
use super::nats::NatsConfig;
use super::search::SearchConfig;

/// The search gate's bounds, from `[daemon] search_timeout` and `max_concurrent_searches`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchLimits {
    /// How long one search may run (and, separately, how long it may wait for a slot).
    pub timeout: Duration,
    /// How many searches run at once.
    pub max_concurrent: usize,
}

/// Bounds on what socket clients may ask of the daemon; read at start (a reload keeps them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketLimits {
    pub search: SearchLimits,
    pub max_clients: usize,
}

/// Limits that stop a walk from running away on a misbehaving server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkLimits {
    pub max_pages: u64,
    pub max_items: u64,
    /// The largest entry (its JSON text) stored whole; larger ones are trimmed and flagged.
    pub max_entry_bytes: u64,
    /// Consecutive pages without a new URI that count as a cursor loop.
    pub max_pages_without_new: u64,
    /// The longest URI template stored; a longer one is skipped.
    pub max_template_bytes: u64,
    /// The most expressions of a stored URI template; one with more is skipped.
    pub max_template_expressions: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file this configuration came from.
    pub source: PathBuf,
    pub daemon: DaemonConfig,
    pub servers: Vec<ServerConfig>,
    /// The HTTP face (`[http]`); off unless `listen` is set.
    pub http: HttpConfig,
    /// `[search]`: the local model of hybrid search, off unless `semantic_model` is set.
    pub search: SearchConfig,
    /// `[nats]`: the JetStream fan-out (published views, and the credentials of followers).
    pub nats: NatsConfig,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DaemonConfig {
    pub database: PathBuf,
    pub socket: PathBuf,
    pub resync_interval: Duration,
    pub request_timeout: Duration,
    /// How long the first message of a connection may wait for a server that starts slowly.
    pub connect_timeout: Duration,
    pub limits: WalkLimits,
    pub timings: SyncTimings,
    /// A server removed from the configuration keeps its snapshot, marked offline, instead of
    /// having it dropped.
    pub keep_removed: bool,
    /// A tracing filter (`info`, `mcp_mirror=debug,warn`); `RUST_LOG` overrides it.
    pub log_level: Option<String>,
    pub socket_limits: SocketLimits,
    /// `[daemon] history`: whether resources keep a history of their versions by default
    /// (tools, prompts and templates always do).
    pub history_resources: bool,
    /// The bounds of every kept definition history.
    pub history_bounds: HistoryBounds,
}

/// How much definition history the store keeps (`[daemon] history_*`); the writer prunes past
/// these in bounded batches, never the current version of an entry nor an accepted one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryBounds {
    /// The versions kept of one entry.
    pub versions_per_key: u64,
    /// A version replaced longer ago than this is pruned.
    pub max_age: Duration,
    /// The bodies of every history together.
    pub max_bytes: u64,
}

impl Default for HistoryBounds {
    fn default() -> Self {
        HistoryBounds {
            versions_per_key: DEFAULT_HISTORY_VERSIONS_PER_KEY,
            max_age: DEFAULT_HISTORY_MAX_AGE,
            max_bytes: DEFAULT_HISTORY_MAX_BYTES,
        }
    }
}

/// How a session paces itself between walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncTimings {
    /// How often to re-walk a server that cannot push `list_changed`.
    pub poll_interval: Duration,
    /// The shortest poll a server's `ttlMs` hint may ask for.
    pub poll_floor: Duration,
    /// How often to ping a quiet server to notice a dead session; `None` turns pings off.
    pub ping_interval: Option<Duration>,
    /// The quiet period after a `list_changed` before walking.
    pub debounce: Duration,
    /// The floor of the spacing between notification-driven walks of one server.
    pub min_walk_interval: Duration,
    /// How long a follower keeps its snapshot while its upstream mirror's servers have not
    /// committed a first load (a new upstream database), before walking it as it is.
    pub upstream_load_wait: Duration,
}

/// Which protocol era to speak to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EraChoice {
    /// Probe `server/discover` and fall back to `initialize`.
    Auto,
    Legacy,
    Modern,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub priority: i64,
    pub resync_interval: Duration,
    pub request_timeout: Duration,
    /// How long the first message of a connection may wait for a server that starts slowly.
    pub connect_timeout: Duration,
    pub limits: WalkLimits,
    /// The size cap of the `resources/read` content cache; `None` (the default) turns it off.
    pub read_cache_bytes: Option<u64>,
    pub timings: SyncTimings,
    pub era: EraChoice,
    /// A protocol version to insist on, instead of negotiating.
    pub protocol_version: Option<String>,
    /// The kinds to mirror (`mirror = [...]`); `None` mirrors every kind the server declares.
    pub mirror: Option<Vec<crate::protocol::Kind>>,
    /// `share = true`: entries from this server may go to HTTP token clients even when its
    /// results were `cacheScope: "private"` (the operator vouches that every client may see them).
    pub share: bool,
    /// `history = true`: this server's resources keep a history of their versions (its
    /// tools, prompts and templates always do); `[daemon] history` by default.
    pub history: bool,
}

impl ServerConfig {
    /// The kinds to walk on a server that declares `capabilities`: those configured (or all)
    /// that it declares. Templates ride with resources. An upstream mcp-mirror whose feed is
    /// followed serves every kind of its catalog (`catalog/tools`, `catalog/prompts`),
    /// whatever its own MCP face declares.
    pub fn mirrored_kinds(
        &self,
        capabilities: &serde_json::Value,
        followed: bool,
    ) -> Vec<crate::protocol::Kind> {
        use crate::protocol::Kind;
        [Kind::Resource, Kind::Tool, Kind::Prompt]
            .into_iter()
            .filter(|kind| {
                self.mirror
                    .as_ref()
                    .map_or(true, |chosen| chosen.contains(kind))
            })
            .filter(|kind| {
                followed
                    || capabilities
                        .get(kind.capability())
                        .is_some_and(serde_json::Value::is_object)
            })
            .collect()
    }
}

/// How to reach a server. Header values and `env` values are treated as secrets like the
/// bearer token (they often carry API keys, and a rule with no exceptions cannot be
/// forgotten): `Debug` shows their names only and `Config::secrets` lists them for the scrubber.
#[derive(Clone)]
pub enum Transport {
    Stdio {
        command: PathBuf,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
        bearer_token: Option<SecretString>,
    },
    /// A JetStream key-value bucket an upstream mirror publishes a view to (`nats`, `bucket`);
    /// `credentials` is `[nats] credentials`, this daemon's one NATS identity.
    Nats {
        url: String,
        bucket: String,
        credentials: Option<PathBuf>,
    },
}

impl Transport {
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
            Transport::Nats { .. } => "nats",
        }
    }
}

/// Names with their values replaced, for `Debug`.
fn redacted_names<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    names
        .map(|name| format!("{name}: {}", crate::redact::REDACTED))
        .collect()
}

impl fmt::Debug for Transport {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => formatter
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &redacted_names(env.keys()))
                .field("cwd", cwd)
                .finish(),
            Transport::Http {
                url,
                headers,
                bearer_token,
            } => formatter
                .debug_struct("Http")
                .field("url", url)
                .field(
                    "headers",
                    &redacted_names(headers.iter().map(|(name, _)| name)),
                )
                .field("bearer_token", bearer_token)
                .finish(),
            // The credentials file's path is no secret; its contents are read at connect.
            Transport::Nats {
                url,
                bucket,
                credentials,
            } => formatter
                .debug_struct("Nats")
                .field("url", url)
                .field("bucket", bucket)
                .field("credentials", credentials)
                .finish(),
        }
    }
}

/// A reload compares configurations to restart only the servers that changed, so a changed
/// token must count; `SecretString` has no `PartialEq` of its own.
impl PartialEq for Transport {
    fn eq(&self, other: &Transport) -> bool {
        match (self, other) {
            (
                Transport::Stdio {
                    command,
                    args,
                    env,
                    cwd,
                },
                Transport::Stdio {
                    command: other_command,
                    args: other_args,
                    env: other_env,
                    cwd: other_cwd,
                },
            ) => {
                command == other_command
                    && args == other_args
                    && env == other_env
                    && cwd == other_cwd
            }
            (
                Transport::Http {
                    url,
                    headers,
                    bearer_token,
                },
                Transport::Http {
                    url: other_url,
                    headers: other_headers,
                    bearer_token: other_token,
                },
            ) => {
                url == other_url
                    && headers == other_headers
                    && bearer_token.as_ref().map(ExposeSecret::expose_secret)
                        == other_token.as_ref().map(ExposeSecret::expose_secret)
            }
            (
                Transport::Nats {
                    url,
                    bucket,
                    credentials,
                },
                Transport::Nats {
                    url: other_url,
                    bucket: other_bucket,
                    credentials: other_credentials,
                },
            ) => url == other_url && bucket == other_bucket && credentials == other_credentials,
            _ => false,
        }
    }
}

impl Config {
    /// The values that must never be printed: bearer tokens, header values and `env` values.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        let servers = self.servers.iter().flat_map(|server| -> Vec<&str> {
            match &server.transport {
                Transport::Http {
                    headers,
                    bearer_token,
                    ..
                } => headers
                    .iter()
                    .map(|(_, value)| value.as_str())
                    .chain(bearer_token.as_ref().map(ExposeSecret::expose_secret))
                    .collect(),
                Transport::Stdio { env, .. } => env.values().map(String::as_str).collect(),
                Transport::Nats { .. } => Vec::new(),
            }
        });
        let http_tokens = self.http.tokens.iter();
        servers.chain(http_tokens.map(|token| token.value.expose_secret()))
    }
}
