//! The Streamable HTTP transport: POST each message and read JSON or SSE answers; in the
//! handshake era, also the session id and the GET notification stream.

mod connection;
mod errors;

pub use connection::HttpConnection;
pub use errors::{describe_reqwest_error, error_body, shorten};
