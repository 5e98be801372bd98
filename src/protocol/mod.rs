//! The socket protocol in one place: every method's params and result, our notifications, the
//! JSON-RPC envelope, the states, the limits and the `_meta` keys, shared by the daemon, the CLI
//! (online and offline) and the bridge.

mod cursor;
mod envelope;
mod index;
mod kinds;
pub(crate) mod lines;
mod listen;
mod params;
mod record;
mod resource;
mod results;
mod state;
pub(crate) mod wire;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use cursor::{
    decode_cursor, decode_index_cursor, decode_kinds_search_cursor, decode_search_cursor,
    encode_cursor, encode_index_cursor, encode_kinds_search_cursor, encode_search_cursor,
    is_index_cursor,
};
pub use envelope::{
    CheckedRequest, ErrorData, ErrorObject, IncomingRequest, NotificationMessage, Request,
    Response, ServerMessage, JSONRPC_VERSION,
};
pub use index::{IndexPhase, IndexStatus, MatchMode};
pub use kinds::{
    mirror_tools, AcceptResult, CallToolParams, CallToolResult, CatalogHit, DescribeEntryArguments,
    DriftCount, DriftEntry, DriftResult, EntriesParams, EntryDetails, EntryParams, FieldChange,
    KindStatus, ListMirrorToolsResult, ListPromptsResult, ListToolsResult, SearchCatalogArguments,
    SearchCatalogResult, ServerParams, DEFAULT_CATALOG_HITS, DESCRIBE_ENTRY_TOOL,
    HIT_DESCRIPTION_CHARS, MAX_CATALOG_HITS, SEARCH_CATALOG_TOOL,
};
pub use listen::{
    AcknowledgedParams, ListenNotifications, ListenParams, ListenResourcesListChanged,
    ListenResult, SubscriptionMeta, SubscriptionParams, SubscriptionsAcknowledged,
};
pub use params::{
    page_limit, parse_params, ChangesParams, InitializeParams, InvalidParams, ListParams, NoParams,
    RefreshParams, SearchParams, ServerListParams, UriParams, WatchParams,
};
pub use record::{socket_record_path, SocketRecord};
pub use resource::{
    CacheNote, ListedFields, MirrorMeta, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate, StoredObject,
};
pub use results::{
    Change, ChangesResult, DaemonStatus, Empty, Implementation, InitializeResult, LastWalk,
    ListResourcesResult, ListTemplatesResult, Listing, LiveStatus, RefreshOutcome, RefreshResult,
    RefreshState, ResourceDetails, ResourcesCapability, SearchEngine, SearchHit, SearchResult,
    ServerCapabilities, ServerListEntry, ServerListResult, ServerStatus, SocketActivity,
    StatusResult, SwapSummary, ToolsCapability, WatchResult,
};
pub use state::{
    ChangeKind, ConnectedTransport, Era, Kind, PushChannel, ServerState, TransportKind, UnknownName,
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
/// The longest cursor a client may send back; ours are far shorter.
pub const MAX_CURSOR_BYTES: usize = 1 << 10;
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
    "A local mirror of the resource catalogs of the configured MCP servers. Its tools search_catalog and describe_entry find the tools, prompts and resources of every mirrored server; call a tool on its own server.";

/// MCP's "resource not found" (handshake era).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// The daemon is at a bound (too many clients, too many searches): try again shortly.
pub const BUSY: i64 = -32003;
/// A search ran past `search_timeout` and was cancelled.
pub const SEARCH_TIMED_OUT: i64 = -32004;

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
/// The `_meta` key on a `resources/read` result served from the content cache.
pub const CACHE_META_KEY: &str = "io.mcp-mirror/cache";

/// A socket method: its name, params and result.
pub trait Method {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned;
    type Result: Serialize + DeserializeOwned;
}

/// A notification the daemon sends: its name and params.
pub trait Notification {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned;
}

macro_rules! methods {
    ($( $(#[$meta:meta])* $name:ident = $text:literal, $params:ty => $result:ty; )+) => {
        $(
            $(#[$meta])*
            pub enum $name {}

            impl Method for $name {
                const NAME: &'static str = $text;
                type Params = $params;
                type Result = $result;
            }
        )+
    };
}

methods! {
    /// The MCP handshake; marks the connection as an MCP client that gets `list_changed`.
    Initialize = "initialize", InitializeParams => InitializeResult;
    Ping = "ping", NoParams => Empty;
    /// The merged catalog, `PAGE_SIZE` per page, keyed by URI.
    ListResources = "resources/list", ListParams => ListResourcesResult;
    ListTemplates = "resources/templates/list", ListParams => ListTemplatesResult;
    /// Read through the server that wins the URI (or from its content cache).
    ReadResource = "resources/read", UriParams => ReadResourceResult;
    CatalogStatus = "catalog/status", NoParams => StatusResult;
    CatalogSearch = "catalog/search", SearchParams => SearchResult;
    CatalogResource = "catalog/resource", UriParams => ResourceDetails;
    CatalogRefresh = "catalog/refresh", RefreshParams => RefreshResult;
    /// One server's own snapshot, each entry marked with the server that wins it if another.
    CatalogList = "catalog/list", ServerListParams => ServerListResult;
    CatalogChanges = "catalog/changes", ChangesParams => ChangesResult;
    /// Answers where the feed stands, then sends `notifications/catalog/changed`.
    CatalogWatch = "catalog/watch", WatchParams => WatchResult;
    /// Tools of every server (or one), `PAGE_SIZE` per page, ordered by server and name.
    CatalogTools = "catalog/tools", EntriesParams => ListToolsResult;
    CatalogPrompts = "catalog/prompts", EntriesParams => ListPromptsResult;
    CatalogTool = "catalog/tool", EntryParams => EntryDetails;
    CatalogPrompt = "catalog/prompt", EntryParams => EntryDetails;
    /// Records the current tools and prompts as accepted; drift is measured from them.
    CatalogAccept = "catalog/accept", ServerParams => AcceptResult;
    CatalogDrift = "catalog/drift", ServerParams => DriftResult;
    /// The mirror's own tools (`search_catalog`, `describe_entry`); it never proxies others'.
    ListTools = "tools/list", ListParams => ListMirrorToolsResult;
    CallTool = "tools/call", CallToolParams => CallToolResult;
}

/// Sent to MCP clients (those that sent `initialize`) once per committed change.
pub enum ResourcesListChanged {}

impl Notification for ResourcesListChanged {
    const NAME: &'static str = "notifications/resources/list_changed";
    type Params = Empty;
}

/// Sent to `catalog/watch` subscribers with the new change feed entries.
pub enum CatalogChanged {}

impl Notification for CatalogChanged {
    const NAME: &'static str = "notifications/catalog/changed";
    type Params = ChangesResult;
}
