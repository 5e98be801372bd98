//! Reads `daemon.toml` into a validated `Config`; the rest of the code never sees raw TOML.
//!
//! Two stages, as ripgrep goes from `LowArgs` to `HiArgs`: `raw` deserializes the file into
//! serde structs that keep every value's place in the file, then `validate` (with `server`
//! and `transport`) turns them into one `Config` of durations, resolved paths and a
//! `Transport` (`validated`), or a `ConfigError` (`error`) naming the file, the line and the key
//! at fault. `load` runs both stages and the checks of the paths the file names
//! (`environment`); `defaults` holds the value of every key left out.

mod defaults;
mod environment;
mod error;
mod http;
mod load;
mod nats;
mod raw;
mod search;
mod server;
mod server_table;
mod source;
#[cfg(test)]
mod tests;
mod transport;
mod validate;
mod validated;
mod values;

pub(crate) use defaults::{
    default_max_concurrent_searches, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEBOUNCE,
    DEFAULT_HISTORY_MAX_AGE, DEFAULT_HISTORY_MAX_BYTES, DEFAULT_HISTORY_VERSIONS_PER_KEY,
    DEFAULT_KEEP_REMOVED, DEFAULT_MAX_CLIENTS, DEFAULT_MAX_ENTRY_BYTES, DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_PAGES, DEFAULT_MAX_PAGES_WITHOUT_NEW, DEFAULT_MAX_TEMPLATE_BYTES,
    DEFAULT_MAX_TEMPLATE_EXPRESSIONS, DEFAULT_MIN_WALK_INTERVAL, DEFAULT_PING_INTERVAL,
    DEFAULT_POLL_FLOOR, DEFAULT_POLL_INTERVAL, DEFAULT_PRIORITY, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RESYNC_INTERVAL, DEFAULT_SEARCH_TIMEOUT, DEFAULT_UPSTREAM_LOAD_WAIT,
};
pub use defaults::{MAX_TEMPLATE_BYTES_CEILING, MAX_TEMPLATE_EXPRESSIONS_CEILING};
pub use error::{ConfigError, ConfigErrors};
pub use http::{HttpConfig, HttpToken};
#[cfg(test)]
pub(crate) use load::parse;
pub use load::{load, Loaded};
pub use nats::{NatsConfig, PublishView};
pub use search::{Precision, SearchConfig};
pub use validated::{
    Config, DaemonConfig, EraChoice, HistoryBounds, SearchLimits, ServerConfig, SocketLimits,
    SyncTimings, Transport, WalkLimits,
};
