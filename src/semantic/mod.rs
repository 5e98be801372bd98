//! Hybrid search with a local sentence-transformers model: the encoder, the vectors kept beside the search index, and the fusion of their ranking with the lexical one.

pub mod encoder;
mod error;
pub mod fusion;
mod index;
pub mod kernel;
mod questions;
mod tensors;
mod vectors;

pub use encoder::Encoder;
pub use error::SemanticError;
pub use index::{entry_text, Document, SemanticIndex, MAX_EMBEDDING_WORKERS};
pub use kernel::{Isa, Precision};
pub use questions::{QUESTION_CACHE_ENTRIES, QUESTION_CACHE_TEXT_BYTES};
