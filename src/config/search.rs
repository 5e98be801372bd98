//! The `[search]` table: the local sentence-transformers model of hybrid search and the kinds it embeds, validated into one `SearchConfig`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::source::SourceFile;
use super::values::{duration, optional_duration};
use super::ConfigError;
use crate::protocol::Kind;

/// `[search] semantic_kinds` when left out: what agents search for by meaning, and few enough
/// to embed (10,000 tools take minutes of one core; a million resources would take hours).
pub(crate) const DEFAULT_SEMANTIC_KINDS: &[Kind] = &[Kind::Template, Kind::Tool, Kind::Prompt];

/// `[search] semantic_load_timeout` when left out: all-MiniLM-L6-v2 loads in about 0.5 s, a
/// large multilingual model in tens of seconds on a slow disk.
pub const DEFAULT_SEMANTIC_LOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// How the encoder's linear layers round their products (`[search] semantic_precision`); the
/// arithmetic is src/semantic/kernel.rs's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// The model's f32 weights times f32 inputs, summed in f32.
    F32,
    /// Weights and inputs rounded to bfloat16 (8 bits of mantissa, to nearest even), their
    /// products (exact in f32) summed in f32 two inputs at a time, in the order AVX-512 BF16's
    /// `vdpbf16ps` adds them: the odd input's product, then the even one's. That unit does
    /// twice the products of an f32 multiply-add in the same time; every other path computes
    /// the same sums in f32 on the rounded values, so every path gives the same vectors.
    /// The default: on LiveMCPBench it finds what f32 finds (bench/run retrieval; BENCHMARKS.md).
    #[default]
    Bf16,
}

impl Precision {
    /// `f32` or `bf16`, as `[search] semantic_precision` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSearch {
    pub semantic_model: Option<Spanned<String>>,
    pub semantic_load_timeout: Option<Spanned<String>>,
    pub semantic_kinds: Option<Spanned<Vec<String>>>,
    pub semantic_precision: Option<Spanned<String>>,
    pub first_load_index_hold: Option<Spanned<String>>,
}

/// How `catalog/search` ranks beyond words.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchConfig {
    /// A sentence-transformers directory (config.json, model.safetensors, tokenizer.json,
    /// 1_Pooling/config.json); `None` (the default) keeps search lexical.
    pub semantic_model: Option<PathBuf>,
    /// How long loading the model may take before it counts as broken (`failed`, search
    /// lexical).
    pub semantic_load_timeout: Duration,
    /// The kinds whose entries are embedded (and so found by meaning).
    pub semantic_kinds: Vec<Kind>,
    /// How the model's products are rounded.
    pub semantic_precision: Precision,
    /// How long a first load's walk may wait in all for the search index building it
    /// (`"off"`: never); `None` keeps the store's `FIRST_LOAD_INDEX_HOLD`.
    pub first_load_index_hold: Option<Duration>,
}

impl Default for SearchConfig {
    fn default() -> SearchConfig {
        SearchConfig {
            semantic_model: None,
            semantic_load_timeout: DEFAULT_SEMANTIC_LOAD_TIMEOUT,
            semantic_kinds: Vec::new(),
            semantic_precision: Precision::default(),
            first_load_index_hold: None,
        }
    }
}

pub(super) fn search_config(
    source: &SourceFile,
    raw: &RawSearch,
) -> Result<SearchConfig, ConfigError> {
    let semantic_model = match &raw.semantic_model {
        None => None,
        Some(value) => {
            if !cfg!(feature = "semantic") {
                return Err(source.error(
                    &value.span(),
                    "search.semantic_model",
                    "this mcp-mirror was built without the `semantic` feature",
                ));
            }
            Some(source.resolve(value.get_ref()))
        }
    };
    let semantic_kinds = match &raw.semantic_kinds {
        None => DEFAULT_SEMANTIC_KINDS.to_vec(),
        Some(value) => {
            let mut kinds = Vec::new();
            for name in value.get_ref() {
                let singular = name.strip_suffix('s').unwrap_or(name);
                let kind: Kind = singular.parse().map_err(|_| {
                    source.error(
                        &value.span(),
                        "search.semantic_kinds",
                        format!("`{name}` is not a kind (resources, templates, tools, prompts)"),
                    )
                })?;
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            kinds.sort();
            kinds
        }
    };
    let semantic_precision = match &raw.semantic_precision {
        None => Precision::default(),
        Some(value) => match value.get_ref().as_str() {
            "f32" => Precision::F32,
            "bf16" => Precision::Bf16,
            other => {
                return Err(source.error(
                    &value.span(),
                    "search.semantic_precision",
                    format!("`{other}` is not a precision (f32, bf16)"),
                ))
            }
        },
    };
    // "off" (no wait at all) is a hold of zero; left out, the store's default.
    let first_load_index_hold = match &raw.first_load_index_hold {
        None => None,
        Some(_) => Some(
            optional_duration(
                source,
                &raw.first_load_index_hold,
                "search.first_load_index_hold",
                None,
            )?
            .unwrap_or(Duration::ZERO),
        ),
    };
    let semantic_load_timeout = duration(
        source,
        &raw.semantic_load_timeout,
        "search.semantic_load_timeout",
        DEFAULT_SEMANTIC_LOAD_TIMEOUT,
    )?;
    Ok(SearchConfig {
        semantic_model,
        semantic_load_timeout,
        semantic_kinds,
        semantic_precision,
        first_load_index_hold,
    })
}
