//! `Encoder`: reads the model's files (config, tokenizer, pooling, modules) and encodes one text into one vector.

use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};

use super::bert::{Activation, Bert, BertConfig};
use crate::protocol::cut_at_char_boundary;
use crate::semantic::kernel::{Isa, Precision};
use crate::semantic::tensors::{open_regular_file, TensorFile};
use crate::semantic::SemanticError;

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

/// The fewest tokens a model must read: its special tokens ([CLS], [SEP]) and some text (the
/// tokenizer's truncation underflows below its special tokens).
const MIN_TOKENS: usize = 8;

/// The largest JSON file of a model directory this reads (tokenizer.json is the large one:
/// 0.7 MB for all-MiniLM-L6-v2, 17 MB for a multilingual vocabulary).
const MAX_MODEL_JSON_BYTES: u64 = 64 << 20;

/// A model directory's JSON file, refused unread when over `MAX_MODEL_JSON_BYTES`.
fn read_bounded(path: &Path) -> Result<Vec<u8>, SemanticError> {
    let io = |source| SemanticError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    };
    let file = open_regular_file(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_MODEL_JSON_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_MODEL_JSON_BYTES {
        return Err(SemanticError::Model(format!(
            "{}: over the {MAX_MODEL_JSON_BYTES} bytes a model's JSON file may take",
            path.display()
        )));
    }
    Ok(bytes)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<(T, Vec<u8>), SemanticError> {
    let bytes = read_bounded(path)?;
    let value = serde_json::from_slice(&bytes)
        .map_err(|error| SemanticError::Model(format!("{}: {error}", path.display())))?;
    Ok((value, bytes))
}

impl Encoder {
    /// Loads the sentence-transformers directory `directory` (config.json, model.safetensors,
    /// tokenizer.json, 1_Pooling/config.json; sentence_bert_config.json and modules.json when
    /// present), for the widest vector unit of this CPU. Nothing is fetched from anywhere.
    pub fn load(directory: &Path, precision: Precision) -> Result<Encoder, SemanticError> {
        Encoder::load_with(directory, Isa::widest(), precision)
    }

    /// [`Encoder::load`] with the arithmetic on `isa` (one of [`Isa::available`]): the parity
    /// tests load one encoder per path.
    pub fn load_with(
        directory: &Path,
        isa: Isa,
        precision: Precision,
    ) -> Result<Encoder, SemanticError> {
        // The fingerprint takes each file in this order: config, pooling, modules, sentence
        // config, tokenizer, the weights' header.
        let mut fingerprint = xxhash_rust::xxh3::Xxh3::new();
        let (config, bytes): (BertConfig, _) = read_json(&directory.join("config.json"))?;
        fingerprint.update(&bytes);
        let activation = checked_activation(&config, directory)?;
        let pooling = read_pooling(directory, &mut fingerprint)?;
        let normalize = read_normalize(directory, &mut fingerprint)?;
        let max_tokens = read_max_tokens(directory, &config, &mut fingerprint)?;
        let tokenizer = read_tokenizer(directory, max_tokens, &mut fingerprint)?;

        let weights_path = directory.join("model.safetensors");
        let mut tensors = TensorFile::open(&weights_path)?;
        fingerprint.update(&tensors.header_digest().to_le_bytes());
        // Vectors of another precision differ (slightly): never mixed either.
        fingerprint.update(precision.name().as_bytes());
        let model = Bert::load(
            &mut tensors,
            &config,
            activation,
            &weights_path,
            (isa, precision),
        )?;
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

    /// The vector unit the arithmetic runs on.
    pub fn isa(&self) -> Isa {
        self.model.isa
    }

    /// How the products are rounded.
    pub fn precision(&self) -> Precision {
        self.model.precision
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

/// The activation `config` names, once its model type, position embeddings and sizes are
/// ones this encoder runs.
fn checked_activation(config: &BertConfig, directory: &Path) -> Result<Activation, SemanticError> {
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
    match config.hidden_act.as_str() {
        "gelu" => Ok(Activation::Gelu),
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Activation::GeluTanh),
        "relu" => Ok(Activation::Relu),
        other => Err(SemanticError::Model(format!(
            "{}: hidden_act {other:?} is not supported",
            directory.display()
        ))),
    }
}

/// The pooling 1_Pooling/config.json asks for (mean or CLS), mean without the file.
fn read_pooling(
    directory: &Path,
    fingerprint: &mut xxhash_rust::xxh3::Xxh3,
) -> Result<Pooling, SemanticError> {
    let pooling_path = directory.join("1_Pooling").join("config.json");
    if !pooling_path.exists() {
        return Ok(Pooling::Mean);
    }
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
        (true, false) => Ok(Pooling::Mean),
        (false, true) => Ok(Pooling::Cls),
        _ => Err(SemanticError::Model(format!(
            "{}: exactly one of mean and CLS pooling must be on",
            pooling_path.display()
        ))),
    }
}

/// Whether modules.json ends the pipeline with a `Normalize` module (no file: no).
fn read_normalize(
    directory: &Path,
    fingerprint: &mut xxhash_rust::xxh3::Xxh3,
) -> Result<bool, SemanticError> {
    let modules_path = directory.join("modules.json");
    if !modules_path.exists() {
        return Ok(false);
    }
    let (modules, bytes): (Vec<ModuleEntry>, _) = read_json(&modules_path)?;
    fingerprint.update(&bytes);
    Ok(modules
        .iter()
        .any(|module| module.module_type.ends_with("models.Normalize")))
}

/// How many tokens the encoder reads: sentence_bert_config.json's `max_seq_length` within
/// the model's positions, at least `MIN_TOKENS`.
fn read_max_tokens(
    directory: &Path,
    config: &BertConfig,
    fingerprint: &mut xxhash_rust::xxh3::Xxh3,
) -> Result<usize, SemanticError> {
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
    if max_tokens < MIN_TOKENS {
        return Err(SemanticError::Model(format!(
            "{}: reads at most {max_tokens} tokens (max_position_embeddings, max_seq_length); a sentence encoder reads {MIN_TOKENS} at least",
            directory.display()
        )));
    }
    Ok(max_tokens)
}

/// tokenizer.json, cut at `max_tokens` and without padding.
fn read_tokenizer(
    directory: &Path,
    max_tokens: usize,
    fingerprint: &mut xxhash_rust::xxh3::Xxh3,
) -> Result<Tokenizer, SemanticError> {
    let tokenizer_path = directory.join("tokenizer.json");
    let tokenizer_bytes = read_bounded(&tokenizer_path)?;
    fingerprint.update(&tokenizer_bytes);
    let mut tokenizer = Tokenizer::from_bytes(&tokenizer_bytes)
        .map_err(|error| SemanticError::Model(format!("{}: {error}", tokenizer_path.display())))?;
    // sentence-transformers cuts at max_seq_length whatever tokenizer.json says, and one
    // text at a time needs no padding.
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_tokens,
            ..TruncationParams::default()
        }))
        .map_err(|error| SemanticError::Model(format!("{}: {error}", tokenizer_path.display())))?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_whole_characters() {
        assert_eq!(cut_at_char_boundary("héllo", 2), "h");
        assert_eq!(cut_at_char_boundary("héllo", 3), "hé");
        assert_eq!(cut_at_char_boundary("abc", 10), "abc");
    }
}
