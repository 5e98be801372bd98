//! mcp-mirror: mirror the resource catalogs of many MCP servers into SQLite and serve them locally.
//!
//! Public modules are those the binaries and `examples/` use; everything else is crate-private,
//! so the compiler reports an item nothing uses.

pub(crate) mod api;
pub(crate) mod api_kinds;
pub mod cli;
pub mod config;
pub mod daemon;
pub(crate) mod entry;
pub(crate) mod http_face;
pub(crate) mod lines;
pub mod mcp;
pub(crate) mod metrics;
pub mod paths;
pub mod protocol;
pub mod redact;
pub mod search;
pub(crate) mod search_gate;
#[cfg(feature = "semantic")]
pub mod semantic;
pub mod session;
pub(crate) mod store;
pub(crate) mod supervisor;
pub mod systemd;
pub(crate) mod uri_template;
pub(crate) mod walk;
pub(crate) mod walk_kinds;
