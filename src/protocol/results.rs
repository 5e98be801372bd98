//! The result of every socket method and the params of our notifications. Every key of our
//! own `catalog/*` answers is camelCase, as MCP's are.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::resource::{Resource, ResourceTemplate};
use super::state::{
    ChangeKind, ConnectedTransport, Era, Kind, PushChannel, ServerState, TransportKind,
};

/// `ping`'s answer, and any other empty object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub protocol_version: String,
    pub capabilities: ServerCapabilities,
    pub server_info: Implementation,
    pub instructions: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerCapabilities {
    pub resources: ResourcesCapability,
    /// The mirror's own tools (`search_catalog`, `describe_entry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsCapability>,
    /// `{"io.mcp-mirror/feed": {"version": 1}}`: this server is an mcp-mirror whose change
    /// feed a downstream mirror may follow (`catalog/changes` + `catalog/entries`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<Value>,
}

impl ServerCapabilities {
    /// What the mirror itself declares, on the socket and the HTTP face alike: its merged
    /// resources (with `list_changed`) and its own tools.
    pub fn of_the_mirror() -> ServerCapabilities {
        ServerCapabilities {
            resources: ResourcesCapability { list_changed: true },
            // Its own tools never change; `tools/list_changed` says the catalog's tools did
            // (what a downstream mirror follows).
            tools: Some(ToolsCapability { list_changed: true }),
            experimental: Some(serde_json::json!({
                super::FEED_CAPABILITY: {"version": super::FEED_VERSION}
            })),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsCapability {
    pub list_changed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesCapability {
    pub list_changed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    pub name: String,
    pub version: String,
    /// A mirror's instance id (`INSTANCE_INFO_KEY`); absent elsewhere.
    #[serde(
        default,
        rename = "io.mcp-mirror/instance",
        skip_serializing_if = "Option::is_none"
    )]
    pub instance: Option<String>,
}

/// `resources/list`: a page of the merged catalog. The daemon writes its entries straight
/// from their stored text (`R` = `StoredObject`); clients read `Resource`s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourcesResult<R = Resource> {
    pub resources: Vec<R>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `resources/templates/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTemplatesResult<T = ResourceTemplate> {
    pub resource_templates: Vec<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `catalog/resource`: the winning resource and every server that lists the URI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDetails {
    /// The server that wins the URI.
    pub server: String,
    /// The winner's resource, its origin in `_meta`.
    pub resource: Resource,
    pub stale: bool,
    pub snapshot_at_ms: Option<i64>,
    /// Every server that lists the URI, winner first.
    pub listed_by: Vec<Listing>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    pub server: String,
    pub priority: i64,
    /// The resource as this server lists it.
    pub resource: Resource,
}

/// `catalog/search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchResult {
    pub results: Vec<SearchHit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Which index answered: the derived search index, or SQLite's full-text index (for `raw`
    /// queries, offline, and while the search index is not ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<SearchEngine>,
    /// How the hits matched the words (the search index only): `all`, `typo` when only a word
    /// with one typo matched, `any` when no entry has every word.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub match_mode: Option<super::MatchMode>,
    /// Why SQLite answered although the search index exists (it is rebuilding, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Which ranking answered: `lexical`, `semantic` or `hybrid` (a search that asked for
    /// vectors while they are not ready is answered `lexical`, and `note` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<SearchMode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchEngine {
    Index,
    Sqlite,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    /// `resource`, `tool` or `prompt`.
    #[serde(default = "resource_kind")]
    pub kind: Kind,
    pub server: String,
    /// A resource's URI; tools and prompts have none (their `name` identifies them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    pub name: String,
    pub title: Option<String>,
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub score: f64,
    /// The best matching stretch of text, matched words between the highlight markers.
    #[serde(default)]
    pub snippet: Option<String>,
    /// `{"io.mcp-mirror/server": server}`, as on listed resources.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

/// `catalog/changes`, and the params of `notifications/catalog/changed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangesResult {
    pub changes: Vec<Change>,
    /// The newest sequence number in the feed; pass the last `seq` you saw as `since`.
    pub latest_seq: i64,
    /// True when entries after `since` were pruned from the bounded history: list again.
    pub truncated: bool,
    /// True when more entries follow this page.
    pub more: bool,
    /// The id of the database that answered (made once, when it was created): a follower
    /// whose cursor came from another database lists again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// With `more`: the `since` of the next page (the last entry read, which the client's
    /// view may have left out of `changes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_since: Option<i64>,
    /// When `since` was a time: what changed from then up to `latestSeq`, within the view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<super::ChangesSummary>,
}

/// `catalog/entries`: the merged entries of the given keys as `resources/list` shows them
/// (`R` = `StoredObject` when written, `Value` when read), in one read of the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyedEntriesResult<R = Value> {
    /// The database that answered (as in `catalog/changes`).
    pub instance: String,
    /// The change feed's newest sequence number when the entries were read: they reflect
    /// every change up to it.
    pub seq: i64,
    /// Keys in the merged catalog of this kind at `seq` (URIs, or URI templates); absent
    /// when the answer was filtered for its client (then it cannot be compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    pub entries: Vec<R>,
    /// The asked keys that no server lists.
    pub missing: Vec<String>,
    /// The servers (of the client's view) that have not committed a first load yet: until
    /// they have, this catalog is emptier than it will be, and a follower that holds a
    /// snapshot keeps it instead of walking this one (absent from older mirrors: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loading: Vec<String>,
}

/// One change feed entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    pub seq: i64,
    pub at_ms: i64,
    pub server: String,
    /// For `truncated`, `uri` is absent and `count` says how many changes of that swap were
    /// not recorded one by one.
    pub kind: ChangeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    pub count: i64,
    /// The kind of entry (`resource`, `tool`, `prompt`); `kind` above is the kind of change.
    #[serde(default = "resource_kind")]
    pub entry_kind: Kind,
    /// A tool's or prompt's name (they have no URI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For a changed tool or prompt: the top-level fields that changed (`description`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
}

fn resource_kind() -> Kind {
    Kind::Resource
}

/// `catalog/watch`: where the feed stands; changes follow as notifications.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchResult {
    pub latest_seq: i64,
    /// The watch sends the changes after this sequence number: `since`'s own, the last one
    /// written before `since`'s time, or `latestSeq` when no `since` was given.
    #[serde(default)]
    pub since_seq: i64,
}

/// `daemon/reload`: the outcome of the reload that read the configuration file after the
/// request arrived (requests that wait together share one reload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadResult {
    pub outcome: ReloadOutcome,
    /// Why the file was refused (`refused`); the previous configuration stays in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the configuration in force was loaded (ms since the epoch).
    pub config_loaded_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReloadOutcome {
    /// The file was read and applied.
    Applied,
    /// The file is invalid; nothing changed.
    Refused,
}

/// `catalog/refresh`: one outcome per server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshResult {
    pub servers: BTreeMap<String, RefreshOutcome>,
}

/// One server's refresh: queued (without `wait`), walked, or failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RefreshOutcome {
    Walked {
        /// Always true.
        ok: bool,
        /// How the refresh settled: a committed walk, or a server with nothing to walk.
        #[serde(default)]
        state: RefreshState,
        swap: SwapSummary,
        pages: u64,
        #[serde(rename = "durationMs")]
        duration_ms: i64,
    },
    Failed {
        /// Always false.
        ok: bool,
        error: String,
    },
    Queued {
        /// Always true.
        queued: bool,
    },
}

impl RefreshOutcome {
    /// A refresh that settled without failing, in `state`.
    pub fn settled(
        state: RefreshState,
        swap: SwapSummary,
        pages: u64,
        duration_ms: i64,
    ) -> RefreshOutcome {
        RefreshOutcome::Walked {
            ok: true,
            state,
            swap,
            pages,
            duration_ms,
        }
    }

    pub fn failed(error: String) -> RefreshOutcome {
        RefreshOutcome::Failed { ok: false, error }
    }

    pub fn queued() -> RefreshOutcome {
        RefreshOutcome::Queued { queued: true }
    }
}

/// The states a refresh may settle in without failing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefreshState {
    /// A walk committed its swap.
    #[default]
    Synced,
    /// The server declares no resources capability: nothing to walk, and not an error.
    NoResources,
}

/// `catalog/list`: a page of one server's own snapshot, keyed by URI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerListResult {
    pub server: String,
    pub resources: Vec<ServerListEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One resource as the server lists it, and the server that wins its URI in the merged
/// catalog when that is another one (absent when this server wins it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerListEntry {
    pub resource: Resource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub won_by: Option<String>,
}

/// What a swap changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapSummary {
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
    pub resources: u64,
    pub templates: u64,
}

/// `catalog/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusResult {
    pub daemon: DaemonStatus,
    pub servers: Vec<ServerStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonStatus {
    pub version: String,
    pub pid: u32,
    pub uptime_ms: u64,
    /// The daemon's files: for the owner only (a token's view is not told where they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<PathBuf>,
    pub database_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<PathBuf>,
    /// Socket connections open now.
    pub clients: usize,
    /// Resources over every snapshot (a URI listed twice counts twice).
    pub resources: u64,
    /// URIs in the merged catalog (a URI listed twice counts once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_resources: Option<u64>,
    pub change_seq: i64,
    pub read_cache_bytes: u64,
    /// When the configuration in force was loaded (ms since the epoch).
    pub config_loaded_at: i64,
    /// Why the last reload was refused; the previous configuration stays in force.
    pub config_error: Option<String>,
    pub config_error_at: Option<i64>,
    /// The database path no longer names the file the daemon opened (deleted or replaced);
    /// the daemon is stopping so that it can be restarted on the file at the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_error: Option<String>,
    /// The socket's bounds and what they turned away.
    #[serde(default)]
    pub socket_limits: SocketActivity,
    /// The derived search index: `state` (`opening | ready | catching-up | rebuilding`
    /// with `percent` | `failed`), the store `generation` it reflects, `documents`, `bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_index: Option<super::IndexStatus>,
    /// The vectors of hybrid search (`[search] semantic_model`): the model, its dimensions,
    /// the kinds embedded, how many entries have a vector and how many wait for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vectors: Option<VectorsStatus>,
    /// The database's write-ahead log: its size and the last checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal: Option<WalStatus>,
}

/// The write-ahead log (`catalog.db-wal`), as `catalog/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WalStatus {
    /// The log file's size now.
    pub bytes: Option<u64>,
    /// Outside a first load the log restarts once past this size (`WAL_RESTART_BYTES`).
    pub restart_bytes: u64,
    /// Checkpoints wait for a first load that is making progress.
    pub deferred_for_first_load: bool,
    /// Checkpoints since the daemon started, of them `restart`s, and `restart`s that readers
    /// held off (tried again later).
    pub checkpoints: u64,
    pub restarts: u64,
    pub restarts_busy: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint: Option<CheckpointStatus>,
}

/// One checkpoint: when (ms since the epoch), its mode (`passive | restart`), the log's pages
/// and how many of them are in the database now, and `busy` when readers or another
/// checkpoint kept it from finishing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointStatus {
    pub at_ms: i64,
    pub mode: String,
    pub log_pages: i64,
    pub copied_pages: i64,
    pub busy: bool,
}

/// The semantic side of search, as `catalog/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VectorsStatus {
    /// `loading` (the model), `embedding` (entries wait for vectors: searches stay lexical),
    /// `ready`, or `failed` (see `error`; searches stay lexical).
    pub state: VectorsState,
    /// The model directory's name.
    pub model: String,
    pub dimensions: usize,
    /// How the products are rounded (`[search] semantic_precision`: `f32` or `bf16`).
    #[serde(default)]
    pub precision: crate::config::Precision,
    /// The vector unit the encoder runs on (`avx512-bf16`, `avx512`, `avx2` or `portable`),
    /// once the model is loaded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernel: String,
    pub kinds: Vec<Kind>,
    /// Entries of those kinds that have their vector.
    pub count: u64,
    /// Entries of those kinds still waiting for theirs.
    pub pending: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VectorsState {
    Loading,
    Embedding,
    Ready,
    Failed,
}

/// How `catalog/search` ranked: by words (`lexical`), by meaning (`semantic`, the local
/// model's vectors), or both fused (`hybrid`, the default when a model is configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    Lexical,
    Semantic,
    Hybrid,
}

impl std::str::FromStr for SearchMode {
    type Err = String;

    fn from_str(text: &str) -> Result<SearchMode, String> {
        match text {
            "lexical" => Ok(SearchMode::Lexical),
            "semantic" => Ok(SearchMode::Semantic),
            "hybrid" => Ok(SearchMode::Hybrid),
            other => Err(format!(
                "`{other}` is not a search mode (lexical, semantic, hybrid)"
            )),
        }
    }
}

/// The socket's client and search bounds, with counts of what they refused since start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SocketActivity {
    pub max_clients: usize,
    /// Connections refused at accept because `max_clients` were open.
    pub clients_refused: u64,
    pub max_concurrent_searches: usize,
    pub search_timeout_ms: u64,
    pub searches_running: usize,
    pub searches_waiting: usize,
    /// The most searches that ever ran at once.
    pub searches_peak: usize,
    /// Searches refused as busy (the queue was full, or no slot came free in time).
    pub searches_refused: u64,
    /// Searches cancelled at `search_timeout`.
    pub searches_timed_out: u64,
    /// Searches of the index answered on the thread that took their request, without the
    /// hand-off to a blocking thread (an established client's, quick on average).
    #[serde(default)]
    pub searches_in_place: u64,
}

/// One server in `catalog/status`: what the database records, and `live`, what the running
/// session knows (null when it has none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    pub name: String,
    pub priority: i64,
    pub transport: TransportKind,
    pub state: ServerState,
    pub protocol_version: Option<String>,
    pub server_info: Option<Value>,
    pub resources: u64,
    pub templates: u64,
    /// The snapshot is kept from before the last failure.
    pub stale: bool,
    pub snapshot_at_ms: Option<i64>,
    pub connected_at_ms: Option<i64>,
    pub retry_at_ms: Option<i64>,
    pub last_walk: Option<LastWalk>,
    pub walks_ok: u64,
    pub walks_failed: u64,
    /// Deltas of a followed upstream mirror's change feed applied instead of walks.
    #[serde(default)]
    pub deltas_applied: u64,
    pub last_error: Option<String>,
    pub last_error_at_ms: Option<i64>,
    /// Entries of the snapshot over `max_entry_bytes`, stored without their largest fields.
    #[serde(default)]
    pub oversized_entries: u64,
    /// The follow cursor committed with the snapshot (a bucket's revision, a feed's sequence):
    /// not on the wire itself; the answer shows it as `live.fleet.revision`.
    #[serde(skip)]
    pub follow_seq: Option<i64>,
    pub live: Option<LiveStatus>,
    /// Tools and prompts: counts and drift per kind (resources are counted above).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kinds: BTreeMap<Kind, super::definitions::KindStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastWalk {
    pub at_ms: i64,
    pub duration_ms: i64,
    pub pages: u64,
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
    pub duplicates: u64,
    pub skipped: u64,
}

/// What the daemon process knows about a session right now, beside the database.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveStatus {
    pub era: Option<Era>,
    pub transport: Option<ConnectedTransport>,
    /// How changes reach the mirror.
    pub push: Option<PushChannel>,
    /// `list_changed` notifications received, over every connection of this process.
    pub notifications: u64,
    /// Notifications that did not need a walk of their own.
    pub walks_coalesced: u64,
    pub walks_started: u64,
    /// Walks abandoned because the list changed while they ran.
    pub walks_restarted: u64,
    /// Notification-driven walks held back by the walk pace: no sooner than
    /// `min_walk_interval`, or the last walk's duration when longer, after the last walk.
    #[serde(default)]
    pub walks_throttled: u64,
    /// While such a walk is held back: when it may start, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_until_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reason: Option<String>,
    /// The number of the last walk started.
    pub generation: u64,
    pub connections: u64,
    pub next_walk_at_ms: Option<i64>,
    /// While polling a server that cannot push: the interval between polls now in force
    /// (before jitter), and why it is that long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_reason: Option<String>,
    /// The caching hints of the server's last list result (stateless era).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<super::CacheScope>,
    /// Set when the last walk left out entries that came through this mirror already: the
    /// server is (or reaches) a mirror that mirrors this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_loop: Option<String>,
    /// While a walk runs: how far it got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk_progress: Option<WalkProgress>,
    /// Set for a server followed through a fan-out engine (a NATS JetStream bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetStatus>,
    /// A followed upstream mirror: the full walks this session made instead of following its
    /// feed, by reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub follow_fallbacks: BTreeMap<super::FallbackReason, u64>,
}

/// A walk in progress: pages and entries read so far (every kind it walks, in order), the rate
/// since it started, and the time left when the server's last complete walk here counted its
/// entries (`expectedEntries`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WalkProgress {
    pub pages: u64,
    pub entries: u64,
    /// Entries per second since the walk started.
    pub per_second: u64,
    pub started_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_entries: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_ms: Option<u64>,
}

/// How a server followed through a fan-out engine stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetStatus {
    /// The engine: `nats`.
    pub engine: String,
    pub bucket: String,
    /// The bucket revision the snapshot reflects.
    pub revision: u64,
    /// Revisions of the bucket after it when the last batch was applied.
    pub lag_revisions: u64,
    /// From the last applied update's publication to its commit here.
    pub lag_ms: u64,
    /// Connections made to the NATS server (the first one included).
    pub connections: u64,
    /// Whole-bucket loads (the first sync, a purged history, a bucket made again).
    pub reloads: u64,
    /// Batches of updates applied as deltas.
    pub deltas: u64,
    /// Why following stopped last, while it is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
