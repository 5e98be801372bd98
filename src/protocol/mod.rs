//! The socket protocol in one place: every method's params and result, our notifications, the
//! JSON-RPC envelope, the states, the limits and the `_meta` keys, shared by the daemon, the CLI
//! (online and offline) and the bridge.

mod codes;
mod cursor;
mod definitions;
mod envelope;
mod history;
mod index;
mod limits;
pub(crate) mod lines;
mod listen;
mod meta;
mod method;
mod params;
mod parse;
mod record;
mod resource;
mod results;
mod since;
mod state;
pub mod uri_flags;
pub(crate) mod wire;

pub use codes::{
    BUSY, INSTRUCTIONS, NOT_PERMITTED, PROTOCOL_VERSION, RESOURCE_NOT_FOUND, SEARCH_TIMED_OUT,
    SERVER_NAME,
};
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
pub use limits::{
    cut_at_char_boundary, DEFAULT_CHANGES_LIMIT, DEFAULT_HIGHLIGHT, DEFAULT_SEARCH_LIMIT,
    MAX_CHANGES_LIMIT, MAX_CURSOR_BYTES, MAX_HIGHLIGHT_BYTES, MAX_KEY_BYTES, MAX_LINE_BYTES,
    MAX_LIST_CURSOR_BYTES, MAX_NAME_BYTES, MAX_QUERY_BYTES, MAX_SEARCH_LIMIT, MAX_SEARCH_OFFSET,
    MAX_URI_BYTES, PAGE_SIZE,
};
pub use listen::{
    AcknowledgedParams, ListenNotifications, ListenParams, ListenPromptsListChanged,
    ListenResourcesListChanged, ListenResult, ListenToolsListChanged, SubscriptionMeta,
    SubscriptionParams, SubscriptionsAcknowledged,
};
pub use meta::{
    came_through_us, mirror_id, origin_meta, set_mirror_id, through_mirror, CACHE_META_KEY,
    FEED_CAPABILITY, FEED_VERSION, INSTANCE_INFO_KEY, KEY_META_KEY, MAX_MIRROR_HOPS,
    MIRRORS_META_KEY, ORIGIN_META_KEY, OVERSIZED_META_KEY, VIA_META_KEY,
};
pub use method::{
    scope_rule, CallTool, CatalogAccept, CatalogChanged, CatalogChanges, CatalogDiff, CatalogDrift,
    CatalogEntries, CatalogHistory, CatalogList, CatalogPrompt, CatalogPrompts, CatalogRefresh,
    CatalogResource, CatalogSearch, CatalogStatus, CatalogTool, CatalogTools, CatalogWatch,
    DaemonReload, Initialize, ListResources, ListTemplates, ListTools, Method, Notification, Ping,
    PromptsListChanged, ReadResource, ResourcesListChanged, ScopeRule, ToolsListChanged, METHODS,
};
pub use params::{
    page_limit, ChangesParams, InitializeParams, KeysParams, ListParams, NoParams, RefreshParams,
    SearchParams, ServerListParams, UriParams, WatchParams, MAX_KEYS,
};
pub use parse::{parse_params, InvalidParams};
pub use record::{socket_record_path, SocketRecord};
pub use resource::{
    written_json, CacheNote, Definition, ListedFields, MirrorMeta, Prompt, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, StoredObject, Tool,
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
