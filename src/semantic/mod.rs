//! Hybrid search with a local sentence-transformers model: the encoder, the vectors kept beside the search index, and the fusion of their ranking with the lexical one.

pub mod encoder;
pub mod fusion;
mod index;
mod kernel;
mod tensors;
mod vectors;

use std::path::PathBuf;

pub use encoder::Encoder;
pub use index::{entry_text, Document, Filter, SemanticIndex};

#[derive(Debug, thiserror::Error)]
pub enum SemanticError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("semantic model: {0}")]
    Model(String),
}
