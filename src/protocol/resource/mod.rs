//! The MCP objects the mirror passes on (resources, templates, read results): the fields we
//! use are typed, every other field is kept exactly as the server sent it, and our own notes
//! travel in `_meta` under the `io.mcp-mirror/…` keys.

mod objects;
#[cfg(test)]
mod tests;

pub use objects::{
    written_json, CacheNote, Definition, ListedFields, MirrorMeta, Prompt, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, StoredObject, Tool,
};
