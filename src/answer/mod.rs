//! The answer of each method family: a function per method that takes a `Reader` (or, for
//! what needs the live daemon, its context) and typed params and returns the typed result.
//! The socket (and through it the HTTP face and the stdio bridge) and the offline CLI call
//! the same functions, so no method body exists twice.

pub(crate) mod changes;
mod context;
pub(crate) mod entries;
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

use crate::protocol::{ErrorObject, InvalidParams, INTERNAL_ERROR, INVALID_PARAMS};

/// An error of ours (the database, a stored text that no longer parses), as `-32603`.
pub(crate) fn internal(error: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, error.to_string())
}

/// Params that do not fit, as `-32602`.
pub(crate) fn invalid(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, message.into())
}

pub(crate) fn invalid_params(error: InvalidParams) -> ErrorObject {
    invalid(error.0)
}
