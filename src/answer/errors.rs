//! The JSON-RPC errors every answer function gives: ours as `-32603`, params that do not fit as `-32602`.

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
