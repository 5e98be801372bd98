//! One walk of a server's resources and templates, and the one cursor walk with its guards (`ListWalk`) that every kind goes through.

pub(crate) mod definitions;
mod error;
pub(crate) mod follow;
mod list_walk;
pub(crate) mod progress;
mod rows;

pub use error::WalkError;
pub(crate) use list_walk::{restarting_once, ListOutcome, ListWalk};
pub use list_walk::{walk, WalkSummary};
pub use rows::resource_row;
pub(crate) use rows::{take_entry, template_row, usable_key, Listed};
