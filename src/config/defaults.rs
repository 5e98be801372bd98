//! The values a `daemon.toml` key takes when left out, and the ceilings a few may not pass.

use std::time::Duration;

/// `[daemon] resync_interval`: the backstop re-walk, besides `list_changed` notifications.
pub(crate) const DEFAULT_RESYNC_INTERVAL: Duration = Duration::from_secs(15 * 60);
/// `request_timeout`: the longest wait for any one request to a server.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// `connect_timeout`: how long the first message of a connection may wait for a server that
/// starts slowly.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// `max_pages`: a walk with more pages fails and keeps the last snapshot.
pub(crate) const DEFAULT_MAX_PAGES: u64 = 10_000;
/// `max_items`: a walk with more resources fails and keeps the last snapshot.
pub(crate) const DEFAULT_MAX_ITEMS: u64 = 1_000_000;
/// `max_entry_bytes`: a listed entry larger than this (as JSON) is stored without its largest
/// optional fields, flagged oversized and counted in status.
pub(crate) const DEFAULT_MAX_ENTRY_BYTES: u64 = 1024 * 1024;
/// `[daemon] max_template_bytes`: a listed URI template longer than this is not stored (the
/// walk skips it, keeps the server's other entries and says so in the log once per walk).
pub(crate) const DEFAULT_MAX_TEMPLATE_BYTES: u64 = 4096;
/// `[daemon] max_template_expressions`: a listed URI template with more `{…}` expressions than
/// this is not stored either.
pub(crate) const DEFAULT_MAX_TEMPLATE_EXPRESSIONS: u64 = 64;
/// The most `max_template_bytes` may be: a longer template is never parsed, even one an older
/// version stored (it routes nothing). A template is its entry's key, so this is the keys'
/// bound.
pub const MAX_TEMPLATE_BYTES_CEILING: usize = crate::protocol::MAX_KEY_BYTES;
/// The most `max_template_expressions` may be, and the most expressions a parsed template has.
pub const MAX_TEMPLATE_EXPRESSIONS_CEILING: usize = 1024;
/// `[daemon] max_pages_without_new`: pages in a row without a new URI that make a cursor loop.
pub(crate) const DEFAULT_MAX_PAGES_WITHOUT_NEW: u64 = 3;
/// `poll_interval`: how often a server that cannot push changes is walked again.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(60);
/// `[daemon] poll_floor`: the shortest poll a server's `ttlMs` hint may ask for.
pub(crate) const DEFAULT_POLL_FLOOR: Duration = Duration::from_secs(5);
/// `ping_interval`: how often a quiet server is pinged (`"off"` turns pings off).
pub(crate) const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(60);
/// `[daemon] debounce`: the quiet period after a `list_changed` before walking.
pub(crate) const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);
/// `[daemon] min_walk_interval`: the least time between the end of a server's walk and a walk
/// its notifications ask for (the last walk's duration, when longer, spaces them instead).
pub(crate) const DEFAULT_MIN_WALK_INTERVAL: Duration = Duration::from_secs(1);
/// `[daemon] upstream_load_wait`: how long a follower keeps its snapshot of an upstream mirror
/// whose servers have not all committed a first load, instead of walking an emptier catalog.
pub(crate) const DEFAULT_UPSTREAM_LOAD_WAIT: Duration = Duration::from_secs(300);
/// `[daemon] history_versions_per_key`: the versions kept of one entry.
pub(crate) const DEFAULT_HISTORY_VERSIONS_PER_KEY: u64 = 100;
/// `[daemon] history_max_age`: a version replaced longer ago than this is pruned.
pub(crate) const DEFAULT_HISTORY_MAX_AGE: Duration = Duration::from_secs(365 * 86_400);
/// `[daemon] history_max_bytes`: the bodies of every history together, oldest pruned first.
pub(crate) const DEFAULT_HISTORY_MAX_BYTES: u64 = 256 << 20;
/// `priority`: lower wins when two servers list the same URI.
pub(crate) const DEFAULT_PRIORITY: i64 = 100;
/// `[daemon] keep_removed`: a removed server's snapshot is dropped unless this is set.
pub(crate) const DEFAULT_KEEP_REMOVED: bool = false;

/// `[daemon] search_timeout`: how long one `catalog/search` may run (and, separately, wait
/// for a slot) before it is cancelled.
pub(crate) const DEFAULT_SEARCH_TIMEOUT: Duration = Duration::from_secs(2);
/// `[daemon] max_clients`: socket connections served at once; more are refused at accept.
pub(crate) const DEFAULT_MAX_CLIENTS: u64 = 1024;

/// `[daemon] max_concurrent_searches` when left out: twice the number of cores, at least 2.
///
/// A slot is held from its grant to the search's end, and that includes two hand-offs that
/// use no core: the waiting request's task woken on an async worker, then its search moved to
/// a blocking thread. With one slot per core, 8 clients of quick searches on 2 cores left a
/// third of a core idle; with two, a search is ready while another hands off (BENCHMARKS.md,
/// "Search and paging"). A CPU-bound search then shares its core, where a queue would have
/// made it wait for one.
pub(crate) fn default_max_concurrent_searches() -> u64 {
    std::thread::available_parallelism()
        .map(|cores| 2 * cores.get() as u64)
        .unwrap_or(2)
        .max(2)
}
