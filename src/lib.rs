//! mcp-mirror: mirror the resource catalogs of many MCP servers into SQLite and serve them locally.

pub mod api;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod lines;
pub mod mcp;
pub mod paths;
pub mod protocol;
pub mod redact;
pub mod search;
pub mod session;
pub mod store;
pub mod supervisor;
pub mod systemd;
pub mod walk;
