//! Turns what a person typed into index queries (AND, then typo-tolerant AND, then OR) and builds the page.

mod deadline;
mod run;
mod snippet;
mod stages;

pub use run::{run, Page, MAX_MARKER_BYTES};
