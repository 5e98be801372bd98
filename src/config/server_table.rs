//! The table of one `[servers.NAME]` as the server's and its transport's checks read it: its
//! raw fields, where it stands in the file, and the names its keys have in errors.

use super::raw::RawServer;

/// The table of one server, named `servers.NAME` in errors.
pub(super) struct ServerTable<'a> {
    pub key: String,
    pub span: std::ops::Range<usize>,
    pub raw: &'a RawServer,
}

impl ServerTable<'_> {
    /// The key of one field of this table, such as `servers.docs.url`.
    pub fn key_of(&self, field: &str) -> String {
        format!("{}.{field}", self.key)
    }
}
