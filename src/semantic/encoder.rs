//! A sentence-transformers encoder of the BERT family on the CPU: tokenizer.json's ids, the transformer, the pooling of `1_Pooling/config.json`, and the normalization `modules.json` asks for.
//!
//! The forward pass is written out here (about the size of the model's own definition) over
//! one text at a time, so no padding is computed and no attention mask is needed: every token
//! of the text attends to every other. The matrix products go to `matrixmultiply`'s `sgemm`.

use std::path::Path;

use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};

use super::kernel::Packed;
use super::tensors::TensorFile;
use super::SemanticError;

/// Text beyond this many bytes is not tokenized: the model reads at most `max_tokens` tokens,
/// and a tokenizer's cost follows the text it is given, whatever it keeps.
pub const MAX_TEXT_BYTES: usize = 32 * 1024;

/// A loaded encoder: what turns a text into one unit-length (or pooled) vector.
pub struct Encoder {
    tokenizer: Tokenizer,
    model: Bert,
    pooling: Pooling,
    normalize: bool,
    /// The length of each vector.
    pub dimensions: usize,
    /// The most tokens of a text the model reads (special tokens included); the rest is cut.
    pub max_tokens: usize,
    /// A hash of the model's files (configs, tokenizer, the tensor table and size): vectors
    /// made by another model, or another version of it, are never mixed with this one's.
    pub fingerprint: u64,
    /// The model directory's name, for status output.
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooling {
    Mean,
    Cls,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activation {
    /// The exact GELU, with erf (BERT's `gelu`).
    Gelu,
    /// The tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`).
    GeluTanh,
    Relu,
}

#[derive(Deserialize)]
struct BertConfig {
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    vocab_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab_size")]
    type_vocab_size: usize,
    #[serde(default = "default_layer_norm_eps")]
    layer_norm_eps: f64,
    #[serde(default = "default_hidden_act")]
    hidden_act: String,
    #[serde(default)]
    position_embedding_type: Option<String>,
    #[serde(default)]
    model_type: Option<String>,
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

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

#[derive(Deserialize)]
struct SentenceConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(rename = "type")]
    module_type: String,
}

/// A linear layer, its weight packed at load for the product (see [`super::kernel`]).
type Linear = Packed;

struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    epsilon: f32,
}

struct Layer {
    /// Query, key and value stacked: one product gives all three.
    query_key_value: Linear,
    attention_output: Linear,
    attention_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

struct Bert {
    hidden: usize,
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

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<(T, Vec<u8>), SemanticError> {
    let bytes = std::fs::read(path).map_err(|source| SemanticError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    })?;
    let value = serde_json::from_slice(&bytes)
        .map_err(|error| SemanticError::Model(format!("{}: {error}", path.display())))?;
    Ok((value, bytes))
}

impl Encoder {
    /// Loads the sentence-transformers directory `directory` (config.json, model.safetensors,
    /// tokenizer.json, 1_Pooling/config.json; sentence_bert_config.json and modules.json when
    /// present). Nothing is fetched from anywhere.
    pub fn load(directory: &Path) -> Result<Encoder, SemanticError> {
        let mut fingerprint = xxhash_rust::xxh3::Xxh3::new();
        let (config, bytes): (BertConfig, _) = read_json(&directory.join("config.json"))?;
        fingerprint.update(&bytes);
        if let Some(kind) = &config.model_type {
            if !matches!(kind.as_str(), "bert" | "roberta" | "xlm-roberta") {
                return Err(SemanticError::Model(format!(
                    "{}: model_type {kind:?} is not a BERT-family encoder",
                    directory.display()
                )));
            }
        }
        if let Some(kind) = &config.position_embedding_type {
            if kind != "absolute" {
                return Err(SemanticError::Model(format!(
                    "{}: position_embedding_type {kind:?} is not supported (absolute is)",
                    directory.display()
                )));
            }
        }
        if config.hidden_size == 0
            || config.num_attention_heads == 0
            || config.hidden_size % config.num_attention_heads != 0
        {
            return Err(SemanticError::Model(format!(
                "{}: hidden_size {} is not a multiple of num_attention_heads {}",
                directory.display(),
                config.hidden_size,
                config.num_attention_heads
            )));
        }
        let activation = match config.hidden_act.as_str() {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            other => {
                return Err(SemanticError::Model(format!(
                    "{}: hidden_act {other:?} is not supported",
                    directory.display()
                )))
            }
        };

        let pooling_path = directory.join("1_Pooling").join("config.json");
        let pooling = if pooling_path.exists() {
            let (pooling, bytes): (PoolingConfig, _) = read_json(&pooling_path)?;
            fingerprint.update(&bytes);
            if pooling.pooling_mode_max_tokens || pooling.pooling_mode_mean_sqrt_len_tokens {
                return Err(SemanticError::Model(format!(
                    "{}: only mean and CLS pooling are supported",
                    pooling_path.display()
                )));
            }
            match (
                pooling.pooling_mode_mean_tokens,
                pooling.pooling_mode_cls_token,
            ) {
                (true, false) => Pooling::Mean,
                (false, true) => Pooling::Cls,
                _ => {
                    return Err(SemanticError::Model(format!(
                        "{}: exactly one of mean and CLS pooling must be on",
                        pooling_path.display()
                    )))
                }
            }
        } else {
            Pooling::Mean
        };
        let modules_path = directory.join("modules.json");
        let normalize = if modules_path.exists() {
            let (modules, bytes): (Vec<ModuleEntry>, _) = read_json(&modules_path)?;
            fingerprint.update(&bytes);
            modules
                .iter()
                .any(|module| module.module_type.ends_with("models.Normalize"))
        } else {
            false
        };
        let sentence_path = directory.join("sentence_bert_config.json");
        let max_seq_length = if sentence_path.exists() {
            let (sentence, bytes): (SentenceConfig, _) = read_json(&sentence_path)?;
            fingerprint.update(&bytes);
            sentence.max_seq_length
        } else {
            None
        };
        let max_tokens = max_seq_length
            .unwrap_or(config.max_position_embeddings)
            .min(config.max_position_embeddings);

        let tokenizer_path = directory.join("tokenizer.json");
        let tokenizer_bytes =
            std::fs::read(&tokenizer_path).map_err(|source| SemanticError::Io {
                action: "read",
                path: tokenizer_path.clone(),
                source,
            })?;
        fingerprint.update(&tokenizer_bytes);
        let mut tokenizer = Tokenizer::from_bytes(&tokenizer_bytes).map_err(|error| {
            SemanticError::Model(format!("{}: {error}", tokenizer_path.display()))
        })?;
        // sentence-transformers cuts at max_seq_length whatever tokenizer.json says, and one
        // text at a time needs no padding.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|error| {
                SemanticError::Model(format!("{}: {error}", tokenizer_path.display()))
            })?;
        tokenizer.with_padding(None);

        let weights_path = directory.join("model.safetensors");
        let mut tensors = TensorFile::open(&weights_path)?;
        fingerprint.update(&tensors.header_digest().to_le_bytes());
        let model = Bert::load(&mut tensors, &config, activation, &weights_path)?;
        let name = directory
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| directory.display().to_string());
        Ok(Encoder {
            tokenizer,
            dimensions: model.hidden,
            model,
            pooling,
            normalize,
            max_tokens,
            fingerprint: fingerprint.digest(),
            name,
        })
    }

    /// The token ids the model reads for `text`: tokenizer.json's, special tokens included,
    /// cut at `max_tokens`.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, SemanticError> {
        let text = cut_at_char_boundary(text, MAX_TEXT_BYTES);
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|error| SemanticError::Model(format!("tokenizing failed: {error}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The sentence embedding of `text`.
    pub fn embed(&self, text: &str) -> Result<Vec<f32>, SemanticError> {
        let ids = self.token_ids(text)?;
        Ok(self.embed_ids(&ids))
    }

    /// The sentence embedding of already tokenized ids (ids past the vocabulary read as 0).
    pub fn embed_ids(&self, ids: &[u32]) -> Vec<f32> {
        let ids = &ids[..ids.len().min(self.max_tokens)];
        let hidden = self.model.hidden;
        if ids.is_empty() {
            return vec![0.0; hidden];
        }
        let states = self.model.forward(ids);
        let mut pooled = match self.pooling {
            Pooling::Cls => states[..hidden].to_vec(),
            Pooling::Mean => {
                let mut sum = vec![0f64; hidden];
                for row in states.chunks_exact(hidden) {
                    for (total, value) in sum.iter_mut().zip(row) {
                        *total += f64::from(*value);
                    }
                }
                let count = ids.len() as f64;
                sum.iter().map(|total| (total / count) as f32).collect()
            }
        };
        if self.normalize {
            let norm = pooled
                .iter()
                .map(|value| f64::from(*value) * f64::from(*value))
                .sum::<f64>()
                .sqrt()
                .max(1e-12);
            for value in &mut pooled {
                *value = (f64::from(*value) / norm) as f32;
            }
        }
        pooled
    }
}

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
fn cut_at_char_boundary(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl Bert {
    fn load(
        tensors: &mut TensorFile,
        config: &BertConfig,
        activation: Activation,
        path: &Path,
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
            Ok(Packed::new(&weight, &bias, outputs, inputs))
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
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for number in 0..config.num_hidden_layers {
            let layer = format!("{prefix}encoder.layer.{number}");
            let mut weight = Vec::with_capacity(3 * hidden * hidden);
            let mut bias = Vec::with_capacity(3 * hidden);
            for part in ["query", "key", "value"] {
                let name = format!("{layer}.attention.self.{part}");
                weight.extend(tensors.read(&format!("{name}.weight"), &[hidden, hidden])?);
                bias.extend(tensors.read(&format!("{name}.bias"), &[hidden])?);
            }
            layers.push(Layer {
                query_key_value: Packed::new(&weight, &bias, 3 * hidden, hidden),
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
    fn forward(&self, ids: &[u32]) -> Vec<f32> {
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
        self.embedding_norm.apply(&mut states);

        let heads = self.heads;
        let head_size = hidden / heads;
        let scale = 1.0 / (head_size as f32).sqrt();
        let mut query_key_value = Vec::new();
        let mut scores = vec![0f32; tokens * tokens];
        let mut context = vec![0f32; tokens * hidden];
        let mut projected = Vec::new();
        let mut intermediate = Vec::new();
        for layer in &self.layers {
            layer
                .query_key_value
                .apply(&states, tokens, &mut query_key_value);
            let stride = 3 * hidden;
            for head in 0..heads {
                let offset = head * head_size;
                // scores = Q_h K_h^T / sqrt(d)
                matmul(
                    (tokens, head_size, tokens),
                    scale,
                    (&query_key_value[offset..], stride, 1),
                    (&query_key_value[hidden + offset..], 1, stride),
                    0.0,
                    (&mut scores, tokens, 1),
                );
                for row in scores.chunks_exact_mut(tokens) {
                    softmax(row);
                }
                // context_h = P V_h, into the head's columns of `context`
                matmul(
                    (tokens, tokens, head_size),
                    1.0,
                    (&scores, tokens, 1),
                    (&query_key_value[2 * hidden + offset..], stride, 1),
                    0.0,
                    (&mut context[offset..], hidden, 1),
                );
            }
            layer
                .attention_output
                .apply(&context, tokens, &mut projected);
            for (state, update) in states.iter_mut().zip(&projected) {
                *state += update;
            }
            layer.attention_norm.apply(&mut states);
            layer.intermediate.apply(&states, tokens, &mut intermediate);
            self.activate(&mut intermediate);
            layer.output.apply(&intermediate, tokens, &mut projected);
            for (state, update) in states.iter_mut().zip(&projected) {
                *state += update;
            }
            layer.output_norm.apply(&mut states);
        }
        states
    }

    fn activate(&self, values: &mut [f32]) {
        match self.activation {
            Activation::Gelu => {
                for value in values {
                    let x = *value;
                    *value = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
                }
            }
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
    fn apply(&self, values: &mut [f32]) {
        let width = self.weight.len();
        for row in values.chunks_exact_mut(width) {
            let mean = row.iter().map(|value| f64::from(*value)).sum::<f64>() / width as f64;
            let variance = row
                .iter()
                .map(|value| {
                    let centered = f64::from(*value) - mean;
                    centered * centered
                })
                .sum::<f64>()
                / width as f64;
            let inverse = 1.0 / (variance + f64::from(self.epsilon)).sqrt();
            for ((value, weight), bias) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                *value = ((f64::from(*value) - mean) * inverse) as f32 * weight + bias;
            }
        }
    }
}

/// erf(x) within 1e-6 (Abramowitz and Stegun 7.1.26, with e^-x² written out below), in plain
/// arithmetic without branches or calls, so that a loop over it vectorizes: libm's erff was a
/// sixth of a text's time.
fn erf(x: f32) -> f32 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    (1.0 - poly * exp_negative(z * z)).copysign(x)
}

/// e^-v for v >= 0, within 1e-7 relative (0 is read as e^-87): v = n ln 2 - r, a degree-7
/// Taylor series for e^r, |r| <= ln 2 / 2, and 2^n made from its bits.
fn exp_negative(v: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to an integer, which lands in the low bits of the mantissa.
    const ROUND: f32 = 12_582_912.0;
    const ROUND_BITS: i32 = 0x4B40_0000;
    let y = (-v).max(-87.0);
    let shifted = y * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    // ln 2 in two parts, the first exact in f32, so that n ln 2 loses nothing.
    let r = y - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let series = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let exponent = shifted.to_bits() as i32 - ROUND_BITS + 127;
    series * f32::from_bits((exponent << 23) as u32)
}

fn softmax(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for value in row.iter_mut() {
        *value = (*value - max).exp();
        sum += *value;
    }
    for value in row.iter_mut() {
        *value /= sum;
    }
}

/// `c = alpha * a b + beta * c` for an `m x k` matrix `a` and a `k x n` matrix `b`, each given
/// as a slice with its row and column strides. Panics (never reads out of bounds) when a slice
/// is too short for its shape and strides.
fn matmul(
    (m, k, n): (usize, usize, usize),
    alpha: f32,
    (a, row_stride_a, column_stride_a): (&[f32], usize, usize),
    (b, row_stride_b, column_stride_b): (&[f32], usize, usize),
    beta: f32,
    (c, row_stride_c, column_stride_c): (&mut [f32], usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, columns: usize, row_stride: usize, column_stride: usize| {
        (rows - 1) * row_stride + columns.saturating_sub(1) * column_stride
    };
    if k > 0 {
        assert!(last(m, k, row_stride_a, column_stride_a) < a.len());
        assert!(last(k, n, row_stride_b, column_stride_b) < b.len());
    }
    assert!(last(m, n, row_stride_c, column_stride_c) < c.len());
    // SAFETY: the asserts above keep every element sgemm touches, (rows - 1) * row stride +
    // (columns - 1) * column stride at most, inside its slice; `c` is borrowed mutably, so it
    // overlaps neither `a` nor `b`.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            row_stride_a as isize,
            column_stride_a as isize,
            b.as_ptr(),
            row_stride_b as isize,
            column_stride_b as isize,
            beta,
            c.as_mut_ptr(),
            row_stride_c as isize,
            column_stride_c as isize,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_follows_strides() {
        // a = [[1, 2], [3, 4]], b given transposed: b^T = [[5, 6], [7, 8]] so b = [[5, 7], [6, 8]].
        let a = [1.0, 2.0, 3.0, 4.0];
        let b_transposed = [5.0, 6.0, 7.0, 8.0];
        let mut c = [1.0; 4];
        matmul(
            (2, 2, 2),
            1.0,
            (&a, 2, 1),
            (&b_transposed, 1, 2),
            1.0,
            (&mut c, 2, 1),
        );
        assert_eq!(c, [1.0 + 17.0, 1.0 + 23.0, 1.0 + 39.0, 1.0 + 53.0]);
    }

    #[test]
    fn layer_norm_and_softmax() {
        let norm = Norm {
            weight: vec![1.0, 1.0],
            bias: vec![0.5, 0.5],
            epsilon: 0.0,
        };
        let mut values = [1.0, 3.0];
        norm.apply(&mut values);
        assert_eq!(values, [-0.5, 1.5]);
        let mut row = [0.0f32, 0.0];
        softmax(&mut row);
        assert_eq!(row, [0.5, 0.5]);
    }

    #[test]
    fn fast_erf_is_within_a_millionth() {
        let mut worst = 0f64;
        for step in -240_000..=240_000 {
            let x = step as f32 / 20_000.0;
            let exact = libm::erf(f64::from(x));
            worst = worst.max((f64::from(erf(x)) - exact).abs());
        }
        assert!(worst < 1e-6, "erf is off by {worst:e}");
        assert!(erf(0.0).abs() < 1e-6);
        assert_eq!(erf(40.0), 1.0);
        assert_eq!(erf(-40.0), -1.0);
        assert!((exp_negative(1.0) - (-1f32).exp()).abs() < 1e-7);
    }

    #[test]
    fn cut_keeps_whole_characters() {
        assert_eq!(cut_at_char_boundary("héllo", 2), "h");
        assert_eq!(cut_at_char_boundary("héllo", 3), "hé");
        assert_eq!(cut_at_char_boundary("abc", 10), "abc");
    }
}
