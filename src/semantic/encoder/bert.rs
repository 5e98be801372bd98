//! The BERT forward pass over one text: embeddings, the layers (attention, feed-forward, norms), the activation, each through the kernels of [`crate::semantic::kernel`] on the unit chosen at load.

use std::path::Path;

use super::sentence_encoder::{Activation, BertConfig};
use crate::semantic::kernel::Packed;
use crate::semantic::kernel::{attention, gelu, layer_norm, AttentionShape, Isa};
use crate::semantic::tensors::TensorFile;
use crate::semantic::SemanticError;

/// A linear layer, its weight packed at load for the product (see [`crate::semantic::kernel`]).
pub(super) type Linear = Packed;

pub(super) struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    epsilon: f32,
}

pub(super) struct Layer {
    /// Query, key and value stacked: one product gives all three.
    query_key_value: Linear,
    attention_output: Linear,
    attention_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

pub(super) struct Bert {
    pub(super) hidden: usize,
    /// The vector unit every product and pass runs on.
    pub(super) isa: Isa,
    heads: usize,
    activation: Activation,
    words: Vec<f32>,
    positions: Vec<f32>,
    /// Token type 0's embedding: one text is one segment.
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
    vocabulary: usize,
    max_positions: usize,
}

impl Bert {
    pub(super) fn load(
        tensors: &mut TensorFile,
        config: &BertConfig,
        activation: Activation,
        path: &Path,
        isa: Isa,
    ) -> Result<Bert, SemanticError> {
        let hidden = config.hidden_size;
        // Some exports prefix every tensor with the model's name.
        let prefix = ["", "bert.", "roberta.", "model."]
            .into_iter()
            .find(|prefix| {
                tensors
                    .find(&[&format!("{prefix}embeddings.word_embeddings.weight")])
                    .is_some()
            })
            .ok_or_else(|| {
                SemanticError::Model(format!(
                    "{}: no embeddings.word_embeddings.weight tensor",
                    path.display()
                ))
            })?;
        let epsilon = config.layer_norm_eps as f32;
        let norm = |tensors: &mut TensorFile, name: String| -> Result<Norm, SemanticError> {
            Ok(Norm {
                weight: tensors.read(&format!("{name}.weight"), &[hidden])?,
                bias: tensors.read(&format!("{name}.bias"), &[hidden])?,
                epsilon,
            })
        };
        let linear = |tensors: &mut TensorFile,
                      name: String,
                      outputs: usize,
                      inputs: usize|
         -> Result<Linear, SemanticError> {
            let weight = tensors.read(&format!("{name}.weight"), &[outputs, inputs])?;
            let bias = tensors.read(&format!("{name}.bias"), &[outputs])?;
            Ok(Packed::new(&weight, &bias, outputs, inputs, isa))
        };
        let words = tensors.read(
            &format!("{prefix}embeddings.word_embeddings.weight"),
            &[config.vocab_size, hidden],
        )?;
        let positions = tensors.read(
            &format!("{prefix}embeddings.position_embeddings.weight"),
            &[config.max_position_embeddings, hidden],
        )?;
        let mut token_type = tensors.read(
            &format!("{prefix}embeddings.token_type_embeddings.weight"),
            &[config.type_vocab_size, hidden],
        )?;
        token_type.truncate(hidden);
        let embedding_norm = norm(tensors, format!("{prefix}embeddings.LayerNorm"))?;
        // No capacity from config.json's numbers: each layer's tensors are read (and checked
        // against the file) before its memory is taken.
        let mut layers = Vec::new();
        for number in 0..config.num_hidden_layers {
            let layer = format!("{prefix}encoder.layer.{number}");
            let (mut weight, mut bias) = (Vec::new(), Vec::new());
            for part in ["query", "key", "value"] {
                let name = format!("{layer}.attention.self.{part}");
                weight.extend(tensors.read(&format!("{name}.weight"), &[hidden, hidden])?);
                bias.extend(tensors.read(&format!("{name}.bias"), &[hidden])?);
            }
            layers.push(Layer {
                query_key_value: Packed::new(&weight, &bias, 3 * hidden, hidden, isa),
                attention_output: linear(
                    tensors,
                    format!("{layer}.attention.output.dense"),
                    hidden,
                    hidden,
                )?,
                attention_norm: norm(tensors, format!("{layer}.attention.output.LayerNorm"))?,
                intermediate: linear(
                    tensors,
                    format!("{layer}.intermediate.dense"),
                    config.intermediate_size,
                    hidden,
                )?,
                output: linear(
                    tensors,
                    format!("{layer}.output.dense"),
                    hidden,
                    config.intermediate_size,
                )?,
                output_norm: norm(tensors, format!("{layer}.output.LayerNorm"))?,
            });
        }
        Ok(Bert {
            hidden,
            isa,
            heads: config.num_attention_heads,
            activation,
            words,
            positions,
            token_type,
            embedding_norm,
            layers,
            vocabulary: config.vocab_size,
            max_positions: config.max_position_embeddings,
        })
    }

    /// The last hidden states, `[tokens, hidden]` row by row.
    pub(super) fn forward(&self, ids: &[u32]) -> Vec<f32> {
        let hidden = self.hidden;
        let tokens = ids.len().min(self.max_positions);
        let mut states = Vec::with_capacity(tokens * hidden);
        for (position, id) in ids[..tokens].iter().enumerate() {
            let id = (*id as usize).min(self.vocabulary - 1);
            let word = &self.words[id * hidden..(id + 1) * hidden];
            let place = &self.positions[position * hidden..(position + 1) * hidden];
            states.extend(
                word.iter()
                    .zip(place)
                    .zip(&self.token_type)
                    .map(|((word, place), segment)| word + place + segment),
            );
        }
        self.embedding_norm.apply(self.isa, &mut states);

        let shape = AttentionShape {
            tokens,
            hidden,
            heads: self.heads,
        };
        let mut query_key_value = Vec::new();
        let mut scores = vec![0f32; tokens];
        let mut context = vec![0f32; tokens * hidden];
        let mut projected = Vec::new();
        let mut intermediate = Vec::new();
        for layer in &self.layers {
            layer
                .query_key_value
                .apply(&states, tokens, &mut query_key_value);
            attention(self.isa, shape, &query_key_value, &mut scores, &mut context);
            layer
                .attention_output
                .apply(&context, tokens, &mut projected);
            for (state, update) in states.iter_mut().zip(&projected) {
                *state += update;
            }
            layer.attention_norm.apply(self.isa, &mut states);
            layer.intermediate.apply(&states, tokens, &mut intermediate);
            self.activate(&mut intermediate);
            layer.output.apply(&intermediate, tokens, &mut projected);
            for (state, update) in states.iter_mut().zip(&projected) {
                *state += update;
            }
            layer.output_norm.apply(self.isa, &mut states);
        }
        states
    }

    fn activate(&self, values: &mut [f32]) {
        match self.activation {
            Activation::Gelu => gelu(self.isa, values),
            Activation::GeluTanh => {
                const SQRT_2_OVER_PI: f32 = 0.797_884_6;
                for value in values {
                    let x = *value;
                    *value =
                        0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh());
                }
            }
            Activation::Relu => {
                for value in values {
                    *value = value.max(0.0);
                }
            }
        }
    }
}

impl Norm {
    /// Layer normalization of each row, in place.
    fn apply(&self, isa: Isa, values: &mut [f32]) {
        layer_norm(isa, values, &self.weight, &self.bias, self.epsilon);
    }
}
