//! What one connection has asked for (`ConnectionState`): its kind of client, its watch, its
//! share of the search gate, its view; the socket's connections and the HTTP face's requests
//! each hold one, and the dispatch reads and updates it.

/// What one connection has asked for (on the HTTP face: one request, or one session).
#[derive(Default)]
pub(crate) struct ConnectionState {
    /// The client sent `initialize`: it speaks MCP and expects `list_changed` notifications.
    /// Plain JSON-RPC clients (the CLI, socat) never get unasked-for lines.
    pub(super) mcp_client: bool,
    /// After `catalog/watch`: the last change feed sequence number sent to this client.
    pub(super) watching: Option<i64>,
    /// This client's share of the search gate (its recent search time).
    pub(super) search_client: crate::search::gate::SearchClient,
    /// What this client may see and do; socket clients are the owner.
    pub(super) view: crate::answer::View,
    /// A client of the Unix socket, which may call the methods on the daemon process itself
    /// (`ScopeRule::Local`); the HTTP face's clients may not, whatever their token.
    pub(super) local: bool,
    /// The catalog generation the last list answer was read at (in the same read
    /// transaction as its rows): what the HTTP face makes that answer's ETag from.
    pub(super) answered_generation: Option<u64>,
    /// The next cursor of the last answer, when it was a page with more after it.
    pub(super) answered_next_cursor: Option<String>,
    /// The next page, read ahead while the client takes in the last one (the socket's
    /// clients only: an HTTP request's state lives for one request).
    pub(super) readahead: Option<super::readahead::Readahead>,
}

impl ConnectionState {
    /// The catalog generation the last list answer was read at, if the last answer was one.
    pub(crate) fn answered_generation(&self) -> Option<u64> {
        self.answered_generation
    }

    /// A fresh state whose searches use `search_client`'s share of the gate (the HTTP face
    /// gives every request of one client identity the same one).
    /// Its answers are restricted to `view` (the HTTP face's token clients).
    pub(crate) fn searching_as(
        search_client: crate::search::gate::SearchClient,
        view: crate::answer::View,
    ) -> Self {
        ConnectionState {
            search_client,
            view,
            ..ConnectionState::default()
        }
    }
}
