//! The answer of each method family, one function per method, shared by the socket, the offline
//! CLI, the stdio bridge and the HTTP face.

pub(crate) mod search;

pub(crate) use search::KindsSearch;
