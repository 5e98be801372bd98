//! The socket protocol in one place: every method's params and result, our notifications, the
//! JSON-RPC envelope, the states, the limits and the `_meta` keys, shared by the daemon, the CLI
//! (online and offline) and the bridge.

mod cursor;
mod definitions;
mod envelope;
mod history;
mod index;
pub(crate) mod lines;
mod listen;
mod params;
mod record;
mod resource;
mod results;
mod since;
mod state;
pub mod uri_flags;
pub(crate) mod wire;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use cursor::{
    decode_cursor, decode_index_cursor, decode_kinds_search_cursor, decode_search_cursor,
    encode_cursor, encode_index_cursor, encode_kinds_search_cursor, encode_search_cursor,
    is_index_cursor,
};
pub use definitions::{
    mirror_tools, AcceptResult, CallToolParams, CallToolResult, CatalogHit, DescribeEntryArguments,
    DriftCount, DriftEntry, DriftParams, DriftResult, EntriesParams, EntryDetails, EntryParams,
    FieldChange, KindStatus, ListPromptsResult, ListToolsResult, SearchCatalogArguments,
    SearchCatalogResult, ServerParams, ToolChangesArguments, ToolChangesResult,
    DEFAULT_CATALOG_HITS, DESCRIBE_ENTRY_TOOL, HIT_DESCRIPTION_CHARS, MAX_CATALOG_HITS,
    MAX_TOOL_CHANGES_VERSIONS, SEARCH_CATALOG_TOOL, TOOL_CHANGES_TOOL,
};
pub use envelope::{
    CheckedRequest, ErrorData, ErrorObject, IncomingRequest, NotificationMessage, Request,
    Response, ServerMessage, JSONRPC_VERSION,
};
pub use history::{
    DiffParams, DiffResult, DiffSide, HistoryParams, HistoryResult, HistoryVersion, PathChange,
    PathValue, StructuralDiff, ToolChange, DEFAULT_HISTORY_PAGE, MAX_HISTORY_PAGE,
};
pub use index::{IndexPhase, IndexStatus, MatchMode};
pub use listen::{
    AcknowledgedParams, ListenNotifications, ListenParams, ListenPromptsListChanged,
    ListenResourcesListChanged, ListenResult, ListenToolsListChanged, SubscriptionMeta,
    SubscriptionParams, SubscriptionsAcknowledged,
};
pub use params::{
    page_limit, parse_params, ChangesParams, InitializeParams, InvalidParams, KeysParams,
    ListParams, NoParams, RefreshParams, SearchParams, ServerListParams, UriParams, WatchParams,
    MAX_KEYS,
};
pub use record::{socket_record_path, SocketRecord};
pub use resource::{
    CacheNote, Definition, ListedFields, MirrorMeta, Prompt, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, StoredObject, Tool,
};
pub use results::{
    Change, ChangesResult, CheckpointStatus, DaemonStatus, Empty, FleetStatus, Implementation,
    InitializeResult, KeyedEntriesResult, LastWalk, ListResourcesResult, ListTemplatesResult,
    Listing, LiveStatus, RefreshOutcome, RefreshResult, RefreshState, ReloadOutcome, ReloadResult,
    ResourceDetails, ResourcesCapability, SearchEngine, SearchHit, SearchMode, SearchResult,
    ServerCapabilities, ServerListEntry, ServerListResult, ServerStatus, SocketActivity,
    StatusResult, SwapSummary, ToolsCapability, VectorsState, VectorsStatus, WalStatus,
    WalkProgress, WatchResult,
};
pub use since::{
    feed_time, ChangeCounts, ChangesSummary, FeedStart, ServerChangeCounts, Since,
    MAX_SINCE_AGE_MS, MAX_SINCE_BYTES, SINCE_FORMS,
};
pub use state::{
    CacheScope, ChangeKind, ConnectedTransport, Era, FallbackReason, Kind, PushChannel,
    ServerState, TransportKind, UnknownName,
};
pub use wire::{
    supported_versions, DiscoverResult, UnsupportedVersionData, DISCOVER, HEADER_MISMATCH,
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, LEGACY_VERSIONS, METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY, MODERN_VERSIONS, PARSE_ERROR, SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
};

/// The longest request line the socket accepts; longer ones get an error and the connection closes.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Entries per page of `resources/list` and `resources/templates/list`.
pub const PAGE_SIZE: usize = 500;
/// Search pages reach this deep at most; a cursor past it is not one we made.
pub const MAX_SEARCH_OFFSET: usize = 1_000_000;
pub const DEFAULT_SEARCH_LIMIT: usize = 20;
pub const MAX_SEARCH_LIMIT: usize = 1000;
pub const DEFAULT_CHANGES_LIMIT: usize = 1000;
pub const MAX_CHANGES_LIMIT: usize = 10_000;
/// The longest highlight marker a search may ask for, in bytes (each of the two).
pub const MAX_HIGHLIGHT_BYTES: usize = 32;
/// The longest raw (FTS5) search query, in bytes; a longer plain query is cut to this (the
/// store uses at most its first 32 words anyway).
pub const MAX_QUERY_BYTES: usize = 4 << 10;
/// The longest search cursor a client may send back (an offset and a fingerprint; ours are far
/// shorter).
pub const MAX_CURSOR_BYTES: usize = 1 << 10;
/// The longest key an entry may have: a URI, a URI template, a tool's or prompt's name (or the
/// key a followed mirror gives it). A walk leaves out an entry with a longer one (counted in
/// `lastWalk.skipped`), so every stored entry can be asked for by its key and every list
/// cursor fits `MAX_LIST_CURSOR_BYTES`.
pub const MAX_KEY_BYTES: usize = MAX_URI_BYTES;
/// The longest list cursor a client may send back. A list cursor is the last key of its page
/// (with its server and kind) in hex, so its bound follows the keys' bound: a fixed 1 KiB
/// refused the next page after any URI over about 500 bytes.
pub const MAX_LIST_CURSOR_BYTES: usize = 16 + 2 * (MAX_NAME_BYTES + MAX_KEY_BYTES + 16);
/// The longest URI a client may ask about (`resources/read`, `catalog/resource`).
pub const MAX_URI_BYTES: usize = 64 << 10;
/// The longest server name, MIME type or protocol version a client may send.
pub const MAX_NAME_BYTES: usize = 1 << 10;
/// The markers around matched words in snippets unless the caller chooses others.
pub const DEFAULT_HIGHLIGHT: (&str, &str) = ("\u{ab}", "\u{bb}");

/// The protocol version the socket offers MCP clients that ask for one it does not know (a
/// client asking for one of `LEGACY_VERSIONS` gets it).
pub const PROTOCOL_VERSION: &str = LEGACY_VERSIONS[0];
/// The name the socket gives in `serverInfo`.
pub const SERVER_NAME: &str = "mcp-mirror";
pub const INSTRUCTIONS: &str =
    "A local mirror of the resource catalogs of the configured MCP servers. Its tools search_catalog and describe_entry find the tools, prompts and resources of every mirrored server, and tool_changes says what changed in a tool since you last used it; call a tool on its own server.";

/// MCP's "resource not found" (handshake era).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// The daemon is at a bound (too many clients, too many searches): try again shortly.
pub const BUSY: i64 = -32003;
/// A search ran past `search_timeout` and was cancelled.
pub const SEARCH_TIMED_OUT: i64 = -32004;
/// The client may not call this method (it changes the mirror's state; HTTP token clients).
pub const NOT_PERMITTED: i64 = -32005;

/// The `_meta` key that names a resource's origin server.
pub const ORIGIN_META_KEY: &str = "io.mcp-mirror/server";

/// A search hit's `_meta`: `{"io.mcp-mirror/server": server}`, as on listed resources.
pub fn origin_meta(server: &str) -> serde_json::Value {
    let mut meta = serde_json::Map::new();
    meta.insert(ORIGIN_META_KEY.into(), server.into());
    serde_json::Value::Object(meta)
}

/// The `_meta` key naming the mirror an entry came through, when its origin is another
/// mirror's server ("demo via upstream").
pub const VIA_META_KEY: &str = "io.mcp-mirror/via";
/// The `_meta` key listing the instance ids of the mirrors an entry passed through, the
/// nearest to its origin first; a mirror appends its upstream's id as it takes the entry.
pub const MIRRORS_META_KEY: &str = "io.mcp-mirror/mirrors";
/// The longest `io.mcp-mirror/mirrors` chain a mirror takes from an upstream; a longer one is
/// left out like a loop (a tree of mirrors deeper than this is a mistake or an attack).
pub const MAX_MIRROR_HOPS: usize = 16;

static MIRROR_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets this process's mirror instance id (from its database); the first one set stays.
pub fn set_mirror_id(id: &str) {
    let _ = MIRROR_ID.set(id.to_string());
}

/// This mirror's instance id, once its database is open.
pub fn mirror_id() -> Option<&'static str> {
    MIRROR_ID.get().map(String::as_str)
}

/// Whether a listed entry (its JSON text) came through this mirror already, or through more
/// mirrors than `MAX_MIRROR_HOPS`: a mirror never takes back its own entries from an upstream.
pub fn came_through_us(entry: &str) -> bool {
    if !entry.contains(MIRRORS_META_KEY) {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "io.mcp-mirror/mirrors")]
        mirrors: Option<Vec<serde_json::Value>>,
    }
    let Ok(Entry {
        meta: Some(Meta {
            mirrors: Some(mirrors),
        }),
    }) = serde_json::from_str::<Entry>(entry)
    else {
        return false;
    };
    mirrors.len() >= MAX_MIRROR_HOPS
        || mirror_id().is_some_and(|us| mirrors.iter().any(|mirror| mirror.as_str() == Some(us)))
}

/// The `serverInfo` key where a mirror names its instance id, so that a downstream can
/// record it in the chain of each entry it takes (`MIRRORS_META_KEY`).
pub const INSTANCE_INFO_KEY: &str = "io.mcp-mirror/instance";

/// An entry taken from the upstream mirror `upstream` (its instance id), with `upstream`
/// appended to its chain of mirrors; `None` when it does not parse as an object.
pub fn through_mirror(entry: &str, upstream: &str) -> Option<Box<serde_json::value::RawValue>> {
    let mut value: serde_json::Value = serde_json::from_str(entry).ok()?;
    let object = value.as_object_mut()?;
    let meta = object
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if !meta.is_object() {
        *meta = serde_json::Value::Object(Default::default());
    }
    let chain = meta
        .as_object_mut()?
        .entry(MIRRORS_META_KEY)
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if !chain.is_array() {
        *chain = serde_json::Value::Array(Vec::new());
    }
    chain.as_array_mut()?.push(upstream.into());
    serde_json::value::to_raw_value(&value).ok()
}

/// The `_meta` key on a `resources/read` result served from the content cache.
pub const CACHE_META_KEY: &str = "io.mcp-mirror/cache";
/// The `_meta` key (`true`) on an entry stored trimmed because it was over `max_entry_bytes`.
pub const OVERSIZED_META_KEY: &str = "io.mcp-mirror/oversized";

/// What a method's answer may carry, and so what a client's view does to it. Every method
/// declares one (`methods!`), so a new method cannot forget it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeRule {
    /// The answer carries no server's entries (the handshake, ping, the mirror's own tools).
    NoEntries,
    /// The answer carries entries or servers: each passes the view's rule before the answer
    /// is serialized.
    Filtered,
    /// The method changes the owner's state: refused to a view that may not mutate.
    Mutating,
    /// The method acts on the daemon process itself (its configuration): answered on the Unix
    /// socket only, whose file permissions are the operator's boundary, never on the HTTP face.
    Local,
}

/// The capability (under `experimental`) by which an mcp-mirror says a downstream mirror may
/// follow its change feed, and the version of that contract.
pub const FEED_CAPABILITY: &str = "io.mcp-mirror/feed";
/// Version 2: the feed and `catalog/entries` carry every kind (tools and prompts keyed
/// `<server>/<name>`, `KEY_META_KEY`), and the face notifies tool and prompt changes too.
pub const FEED_VERSION: u64 = 2;

/// The `_meta` key on a tool or prompt a mirror serves (`catalog/tools`, `catalog/prompts`,
/// `catalog/entries`): its key in that mirror's catalog, `<server>/<name>` (`name` being the
/// key within the server: a mirrored entry's is itself qualified, so the path chains through
/// each level). A downstream mirror keeps the entry under this key, since one name may be
/// listed by several servers of its upstream.
pub const KEY_META_KEY: &str = "io.mcp-mirror/key";

/// A socket method: its name, params and result.
pub trait Method {
    const NAME: &'static str;
    const SCOPE: ScopeRule;
    type Params: Serialize + DeserializeOwned;
    type Result: Serialize + DeserializeOwned;
}

/// A notification the daemon sends: its name and params.
pub trait Notification {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned;
}

macro_rules! methods {
    ($( $(#[$meta:meta])* $name:ident = $text:literal, $params:ty => $result:ty, $rule:ident; )+) => {
        $(
            $(#[$meta])*
            pub enum $name {}

            impl Method for $name {
                const NAME: &'static str = $text;
                const SCOPE: ScopeRule = ScopeRule::$rule;
                type Params = $params;
                type Result = $result;
            }
        )+

        /// The method table: every socket method's name and scope rule.
        pub const METHODS: &[(&str, ScopeRule)] = &[$(($text, ScopeRule::$rule)),+];
    };
}

/// A method's scope rule; `None` for a name that is no method.
pub fn scope_rule(method: &str) -> Option<ScopeRule> {
    METHODS
        .iter()
        .find(|(name, _)| *name == method)
        .map(|(_, rule)| *rule)
}

methods! {
    /// The MCP handshake; marks the connection as an MCP client that gets `list_changed`.
    Initialize = "initialize", InitializeParams => InitializeResult, NoEntries;
    Ping = "ping", NoParams => Empty, NoEntries;
    /// The merged catalog, `PAGE_SIZE` per page, keyed by URI.
    ListResources = "resources/list", ListParams => ListResourcesResult, Filtered;
    ListTemplates = "resources/templates/list", ListParams => ListTemplatesResult, Filtered;
    /// Read through the server that wins the URI (or from its content cache).
    ReadResource = "resources/read", UriParams => ReadResourceResult, Filtered;
    CatalogStatus = "catalog/status", NoParams => StatusResult, Filtered;
    CatalogSearch = "catalog/search", SearchParams => SearchResult, Filtered;
    CatalogResource = "catalog/resource", UriParams => ResourceDetails, Filtered;
    CatalogRefresh = "catalog/refresh", RefreshParams => RefreshResult, Mutating;
    /// Re-reads the configuration file and applies it, as SIGHUP does, answering its outcome.
    DaemonReload = "daemon/reload", NoParams => ReloadResult, Local;
    /// One server's own snapshot, each entry marked with the server that wins it if another.
    CatalogList = "catalog/list", ServerListParams => ServerListResult, Filtered;
    CatalogChanges = "catalog/changes", ChangesParams => ChangesResult, Filtered;
    /// The merged entries of up to `MAX_KEYS` keys of one kind, for a follower of the feed.
    CatalogEntries = "catalog/entries", KeysParams => KeyedEntriesResult, Filtered;
    /// Answers where the feed stands, then sends `notifications/catalog/changed`.
    CatalogWatch = "catalog/watch", WatchParams => WatchResult, NoEntries;
    /// Tools of every server (or one), `PAGE_SIZE` per page, ordered by server and name.
    CatalogTools = "catalog/tools", EntriesParams => ListToolsResult, Filtered;
    CatalogPrompts = "catalog/prompts", EntriesParams => ListPromptsResult, Filtered;
    CatalogTool = "catalog/tool", EntryParams => EntryDetails, Filtered;
    CatalogPrompt = "catalog/prompt", EntryParams => EntryDetails, Filtered;
    /// Records the current tools and prompts as accepted; drift is measured from them.
    CatalogAccept = "catalog/accept", ServerParams => AcceptResult, Mutating;
    CatalogDrift = "catalog/drift", DriftParams => DriftResult, Filtered;
    /// One entry's kept versions, newest first.
    CatalogHistory = "catalog/history", HistoryParams => HistoryResult, Filtered;
    /// Two versions of one entry compared (default: the previous and the current).
    CatalogDiff = "catalog/diff", DiffParams => DiffResult, Filtered;
    /// The mirror's own tools (`search_catalog`, `describe_entry`); it never proxies others'.
    ListTools = "tools/list", ListParams => ListToolsResult, NoEntries;
    CallTool = "tools/call", CallToolParams => CallToolResult, Filtered;
}

/// Sent to MCP clients (those that sent `initialize`) once per committed change.
pub enum ResourcesListChanged {}

impl Notification for ResourcesListChanged {
    const NAME: &'static str = "notifications/resources/list_changed";
    type Params = Empty;
}

/// Sent by the HTTP face when the catalog's tools changed (what a downstream mirror follows;
/// the face's own `tools/list` never changes).
pub enum ToolsListChanged {}

impl Notification for ToolsListChanged {
    const NAME: &'static str = "notifications/tools/list_changed";
    type Params = Empty;
}

/// Sent by the HTTP face when the catalog's prompts changed.
pub enum PromptsListChanged {}

impl Notification for PromptsListChanged {
    const NAME: &'static str = "notifications/prompts/list_changed";
    type Params = Empty;
}

/// Sent to `catalog/watch` subscribers with the new change feed entries.
pub enum CatalogChanged {}

impl Notification for CatalogChanged {
    const NAME: &'static str = "notifications/catalog/changed";
    type Params = ChangesResult;
}
