//! The method table: `Method` (name, params, result and `ScopeRule` of every socket method,
//! from `methods!`) and `Notification` (the notifications we send).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::definitions::{
    AcceptResult, CallToolParams, CallToolResult, DriftParams, DriftResult, EntriesParams,
    EntryDetails, EntryParams, ListPromptsResult, ListToolsResult, ServerParams,
};
use super::history::{DiffParams, DiffResult, HistoryParams, HistoryResult};
use super::params::{
    ChangesParams, InitializeParams, KeysParams, ListParams, NoParams, RefreshParams, SearchParams,
    ServerListParams, UriParams, WatchParams,
};
use super::resource::ReadResourceResult;
use super::results::{
    ChangesResult, Empty, InitializeResult, KeyedEntriesResult, ListResourcesResult,
    ListTemplatesResult, RefreshResult, ReloadResult, ResourceDetails, SearchResult,
    ServerListResult, StatusResult, WatchResult,
};

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
