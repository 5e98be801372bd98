//! What the socket says of itself in the handshake (version, name, instructions) and its own
//! JSON-RPC error codes.

use super::wire::LEGACY_VERSIONS;

/// The protocol version the socket offers MCP clients that ask for one it does not know (a
/// client asking for one of `LEGACY_VERSIONS` gets it).
pub const PROTOCOL_VERSION: &str = LEGACY_VERSIONS[0];
/// The name the socket gives in `serverInfo`.
pub const SERVER_NAME: &str = "mcp-mirror";
pub const INSTRUCTIONS: &str =
    "A local mirror of the resource catalogs of the configured MCP servers. Its tools search_catalog and describe_entry find the tools, prompts and resources of every mirrored server, and tool_changes says what changed in a tool since you last used it; call a tool on its own server.";

/// MCP's "resource not found" (handshake era).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// The daemon is at a bound (too many clients, too many searches): try again shortly.
pub const BUSY: i64 = -32003;
/// A search ran past `search_timeout` and was cancelled.
pub const SEARCH_TIMED_OUT: i64 = -32004;
/// The client may not call this method (it changes the mirror's state; HTTP token clients).
pub const NOT_PERMITTED: i64 = -32005;
