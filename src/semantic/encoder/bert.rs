//! The BERT forward pass over one text: embeddings, the layers (attention, feed-forward,
//! norms), the activation; the small numeric kernels it calls (erf, softmax, matmul).

use super::*;

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
}
