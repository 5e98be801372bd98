//! The client commands: talk to the daemon's socket (or, for reading the catalog while no
//! daemon runs, the database file read-only) and print tables or JSON.

mod bridge;
mod changes;
mod client;
mod commands;
mod definitions;
mod errors;
mod history;
mod offline;
mod progress;
mod reload;
mod render;
mod status;

pub use bridge::bridge;
pub use changes::changes;
pub use client::{use_remote, Client, Remote};
pub use commands::{ls, read, refresh, search, show, templates, watch, SearchArgs};
pub use definitions::{accept, drift, list as list_kind, show as show_entry};
pub use errors::{
    ClientError, EXIT_FAILURE, EXIT_NOT_FOUND, EXIT_UNAUTHORIZED, EXIT_UNREACHABLE, EXIT_USAGE,
};
pub use history::{diff, history};
pub use offline::DatabaseChoice;
pub use reload::reload;
pub use status::status;
