//! `catalog/search` in one place, read in one direction: the params parsed once into the one
//! request every engine reads (`request`), the view's servers put in it, the one ladder of
//! engines (`index`: the derived index, by words or with the model's vectors (`hybrid`);
//! `sqlite`: FTS5 on one reader, under the gate in the daemon, bare for the offline CLI), the
//! view applied once to the page, and the hits shaped (`hits`).

mod catalog_search;
mod hits;
#[cfg(feature = "semantic")]
mod hybrid;
mod index;
mod permit;
mod request;
mod sqlite;

pub(crate) use catalog_search::catalog_search;
pub use sqlite::sqlite_search;
