//! One MCP server (one endpoint): its catalog, sessions and push channels, and the method
//! handlers of both protocol eras. Transports decide the era of a message and render replies.

mod endpoint;
mod methods;

pub use endpoint::{
    method_not_found, Era, Push, Queue, Reply, Server, Session, SessionKind, LEGACY_VERSIONS,
    PROTOCOL_VERSION_KEY,
};
