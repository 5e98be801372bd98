//! Matching a URI against an RFC 6570 URI template (levels 1–3): is the URI one of the
//! template's expansions? Used to route a read of a templated resource to its server.
//!
//! The common Rust crates for RFC 6570 expand templates; none matches a URI against one, so
//! this is our own. A URI matches when some assignment of values (each variable defined or
//! not, as RFC 6570 allows) expands the template to exactly that URI. Query expressions
//! (`{?a,b}`, `{&a}`) also accept their pairs in any order, as clients write them.
//!
//! Templates come from servers, so matching is bounded whatever the template: no recursion
//! (the parts are walked in a loop, keeping the set of URI positions each part may start at,
//! as an NFA simulation keeps its states), memory of a few bit sets the size of the URI, and
//! every step paid from a `MatchBudget` the caller gives (a read gives each server one).

mod template;
#[cfg(test)]
mod tests;

pub use crate::config::MAX_TEMPLATE_BYTES_CEILING;
pub use template::{MatchBudget, TemplateError, UriTemplate};
