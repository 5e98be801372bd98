//! A sentence-transformers encoder of the BERT family on the CPU: tokenizer.json's ids, the transformer, the pooling of `1_Pooling/config.json`, and the normalization `modules.json` asks for.
//!
//! The forward pass is written out here (about the size of the model's own definition) over
//! one text at a time, so no padding is computed and no attention mask is needed: every token
//! of the text attends to every other. The arithmetic is [`crate::semantic::kernel`]'s, on the
//! widest vector unit of the host unless [`Encoder::load_with`] names another.

mod bert;
mod sentence_encoder;

pub use sentence_encoder::{Encoder, MAX_TEXT_BYTES};
