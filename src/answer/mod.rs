//! The answer of each method family: a function per method that takes a `Reader` (or, for
//! what needs the live daemon, its context) and typed params and returns the typed result.
//! The socket (and through it the HTTP face and the stdio bridge) and the offline CLI call
//! the same functions, so no method body exists twice.

pub(crate) mod changes;
mod context;
pub(crate) mod entries;
mod errors;
pub(crate) mod history;
pub(crate) mod list;
pub(crate) mod read;
pub(crate) mod refresh;
pub mod reload;
pub(crate) mod resource;
pub(crate) mod search;
pub(crate) mod status;
pub(crate) mod tools;
pub(crate) mod view;

pub(crate) use context::{on_one_read, on_reader};
pub use context::{ConfigLoad, DaemonContext, IntervalLog};
pub(crate) use view::{Restriction, View};

pub(crate) use errors::{internal, invalid, invalid_params};
