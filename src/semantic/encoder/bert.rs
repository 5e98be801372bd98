//! The BERT forward pass over one text: embeddings, the layers (attention, feed-forward, norms), the activation, each through the kernels of [`crate::semantic::kernel`] on the unit chosen at load.

use std::path::Path;

use serde::Deserialize;

use crate::semantic::kernel::{attention, gelu, layer_norm, AttentionShape, Isa};
use crate::semantic::kernel::{Packed, Precision};
use crate::semantic::tensors::TensorFile;
use crate::semantic::SemanticError;

/// The feed-forward activation config.json names (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Activation {
    /// The exact GELU, with erf (BERT's `gelu`).
    Gelu,
    /// The tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`).
    GeluTanh,
    Relu,
}

/// The model's config.json: its sizes, norms' epsilon, activation and kind.
#[derive(Deserialize)]
pub(super) struct BertConfig {
    pub(super) hidden_size: usize,
    pub(super) num_attention_heads: usize,
    pub(super) num_hidden_layers: usize,
    pub(super) intermediate_size: usize,
    pub(super) vocab_size: usize,
    pub(super) max_position_embeddings: usize,
    #[serde(default = "default_type_vocab_size")]
    pub(super) type_vocab_size: usize,
    #[serde(default = "default_layer_norm_eps")]
    pub(super) layer_norm_eps: f64,
    #[serde(default = "default_hidden_act")]
    pub(super) hidden_act: String,
    #[serde(default)]
    pub(super) position_embedding_type: Option<String>,
    #[serde(default)]
    pub(super) model_type: Option<String>,
}

fn default_type_vocab_size() -> usize {
    2
}
fn default_layer_norm_eps() -> f64 {
    1e-12
}
fn default_hidden_act() -> String {
    "gelu".to_string()
}

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
    /// How the linear layers' products are rounded.
    pub(super) precision: Precision,
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
        (isa, precision): (Isa, Precision),
    ) -> Result<Bert, SemanticError> {
        let hidden = config.hidden_size;
        let prefix = tensor_prefix(tensors, path)?;
        let shape = LayerShape {
            hidden,
            intermediate: config.intermediate_size,
            epsilon: config.layer_norm_eps as f32,
            isa,
            precision,
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
        let embedding_norm = shape.norm(tensors, format!("{prefix}embeddings.LayerNorm"))?;
        // No capacity from config.json's numbers: each layer's tensors are read (and checked
        // against the file) before its memory is taken.
        let mut layers = Vec::new();
        for number in 0..config.num_hidden_layers {
            layers.push(shape.layer(tensors, &format!("{prefix}encoder.layer.{number}"))?);
        }
        Ok(Bert {
            hidden,
            isa,
            precision,
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
        let mut context = vec![0f32; tokens * hidden];
        let mut projected = Vec::new();
        let mut intermediate = Vec::new();
        for layer in &self.layers {
            layer
                .query_key_value
                .apply(&states, tokens, &mut query_key_value);
            attention(self.isa, shape, &query_key_value, &mut context);
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

/// The prefix of every tensor's name in the file: some exports prefix them with the model's
/// name.
fn tensor_prefix(tensors: &TensorFile, path: &Path) -> Result<&'static str, SemanticError> {
    ["", "bert.", "roberta.", "model."]
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
        })
}

/// How a layer's tensors are read: their sizes, the norms' epsilon, the unit the products
/// run on and their precision.
struct LayerShape {
    hidden: usize,
    intermediate: usize,
    epsilon: f32,
    isa: Isa,
    precision: Precision,
}

impl LayerShape {
    /// The norm `name` (its weight and bias).
    fn norm(&self, tensors: &mut TensorFile, name: String) -> Result<Norm, SemanticError> {
        Ok(Norm {
            weight: tensors.read(&format!("{name}.weight"), &[self.hidden])?,
            bias: tensors.read(&format!("{name}.bias"), &[self.hidden])?,
            epsilon: self.epsilon,
        })
    }

    /// The linear layer `name`, its weight packed for the product.
    fn linear(
        &self,
        tensors: &mut TensorFile,
        name: String,
        outputs: usize,
        inputs: usize,
    ) -> Result<Linear, SemanticError> {
        let weight = tensors.read(&format!("{name}.weight"), &[outputs, inputs])?;
        let bias = tensors.read(&format!("{name}.bias"), &[outputs])?;
        Ok(Packed::new(
            &weight,
            &bias,
            outputs,
            inputs,
            self.isa,
            self.precision,
        ))
    }

    /// The encoder layer named `layer`: attention (query, key and value stacked), its output
    /// and norm, the feed-forward pair and its norm, read in that order.
    fn layer(&self, tensors: &mut TensorFile, layer: &str) -> Result<Layer, SemanticError> {
        let hidden = self.hidden;
        let (mut weight, mut bias) = (Vec::new(), Vec::new());
        for part in ["query", "key", "value"] {
            let name = format!("{layer}.attention.self.{part}");
            weight.extend(tensors.read(&format!("{name}.weight"), &[hidden, hidden])?);
            bias.extend(tensors.read(&format!("{name}.bias"), &[hidden])?);
        }
        Ok(Layer {
            query_key_value: Packed::new(
                &weight,
                &bias,
                3 * hidden,
                hidden,
                self.isa,
                self.precision,
            ),
            attention_output: self.linear(
                tensors,
                format!("{layer}.attention.output.dense"),
                hidden,
                hidden,
            )?,
            attention_norm: self.norm(tensors, format!("{layer}.attention.output.LayerNorm"))?,
            intermediate: self.linear(
                tensors,
                format!("{layer}.intermediate.dense"),
                self.intermediate,
                hidden,
            )?,
            output: self.linear(
                tensors,
                format!("{layer}.output.dense"),
                hidden,
                self.intermediate,
            )?,
            output_norm: self.norm(tensors, format!("{layer}.output.LayerNorm"))?,
        })
    }
}
