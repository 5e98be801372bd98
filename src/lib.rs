//! mcp-mirror: mirror the resource catalogs of many MCP servers into SQLite and serve them locally.
//!
//! Public modules are those the binaries and `examples/` use; everything else is crate-private,
//! so the compiler reports an item nothing uses.

pub(crate) mod answer;
pub mod background;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod heap;
pub(crate) mod http_face;
pub(crate) mod metrics;
pub(crate) mod nats;
pub mod paths;
pub mod protocol;
pub(crate) mod publish;
pub mod redact;
pub mod search;
#[cfg(feature = "semantic")]
pub mod semantic;
pub mod session;
pub(crate) mod socket;
pub(crate) mod store;
pub(crate) mod supervisor;
pub mod systemd;
pub mod upstream;
pub(crate) mod walk;
