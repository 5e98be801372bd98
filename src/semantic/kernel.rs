//! The encoder's linear layers: `output = input W^T + b` with `W` packed once, at load, into the order the inner loop reads it.
//!
//! A text is a few dozen rows, so a general GEMM spends most of its time packing the weights
//! again at every call (two thirds of a question's time with `matrixmultiply`). Here the
//! weights are packed when the model loads: panels of [`PANEL`] output columns, each panel
//! `[inputs][PANEL]`, zero-padded past the last output. The product walks one panel at a time
//! (it stays in L1/L2) over blocks of up to [`ROWS`] input rows, keeping the block's
//! `ROWS x PANEL` sums in registers for the whole `inputs` loop. With AVX2 and FMA (detected at
//! run time) that is twelve 8-lane accumulators; elsewhere the same loop in plain Rust.

/// Output columns per panel: two 8-lane AVX registers.
pub const PANEL: usize = 16;
/// Input rows per block: 6 x 2 accumulators + 2 weight vectors + 1 broadcast fit in 16 registers.
const ROWS: usize = 6;

/// A linear layer's weight and bias, packed for [`Packed::apply`].
pub struct Packed {
    /// `panels x inputs x PANEL`.
    weights: Vec<f32>,
    /// The bias, zero-padded to `panels x PANEL`.
    bias: Vec<f32>,
    pub inputs: usize,
    pub outputs: usize,
    fused: bool,
}

impl Packed {
    /// Packs `weight` (`[outputs, inputs]`, as PyTorch stores it) and `bias` (`[outputs]`).
    pub fn new(weight: &[f32], bias: &[f32], outputs: usize, inputs: usize) -> Packed {
        assert_eq!(weight.len(), outputs * inputs);
        assert_eq!(bias.len(), outputs);
        let panels = outputs.div_ceil(PANEL);
        let mut weights = vec![0f32; panels * inputs * PANEL];
        for (output, row) in weight.chunks_exact(inputs).enumerate() {
            let (panel, column) = (output / PANEL, output % PANEL);
            let start = panel * inputs * PANEL + column;
            for (input, value) in row.iter().enumerate() {
                weights[start + input * PANEL] = *value;
            }
        }
        let mut padded = bias.to_vec();
        padded.resize(panels * PANEL, 0.0);
        Packed {
            weights,
            bias: padded,
            inputs,
            outputs,
            fused: fused_multiply_add(),
        }
    }

    /// `output = input W^T + b` for `rows` rows of `input` (`rows x inputs`); `output` becomes
    /// `rows x outputs`.
    pub fn apply(&self, input: &[f32], rows: usize, output: &mut Vec<f32>) {
        let (inputs, outputs) = (self.inputs, self.outputs);
        assert!(input.len() >= rows * inputs);
        output.clear();
        output.resize(rows * outputs, 0.0);
        if rows == 0 || outputs == 0 {
            return;
        }
        for (panel, weights) in self.weights.chunks_exact(inputs * PANEL).enumerate() {
            let first = panel * PANEL;
            let columns = PANEL.min(outputs - first);
            let bias: &[f32; PANEL] = self.bias[first..first + PANEL]
                .try_into()
                .expect("the bias is padded to whole panels");
            let mut row = 0;
            while row < rows {
                let block = ROWS.min(rows - row);
                let input = &input[row * inputs..(row + block) * inputs];
                let mut sums = [[0f32; PANEL]; ROWS];
                self.block(block, input, weights, &mut sums);
                for (line, sums) in sums[..block].iter().enumerate() {
                    let start = (row + line) * outputs + first;
                    for ((out, sum), bias) in output[start..start + columns]
                        .iter_mut()
                        .zip(sums)
                        .zip(bias)
                    {
                        *out = sum + bias;
                    }
                }
                row += block;
            }
        }
    }

    /// The sums of `block` rows of `input` (each `inputs` long) against one panel.
    fn block(&self, block: usize, input: &[f32], weights: &[f32], sums: &mut [[f32; PANEL]; ROWS]) {
        debug_assert!(input.len() == block * self.inputs && weights.len() == self.inputs * PANEL);
        #[cfg(target_arch = "x86_64")]
        if self.fused {
            // SAFETY: `fused` is set only when the CPU has AVX2 and FMA; the kernel reads
            // `block * inputs` values of `input` and `inputs * PANEL` of `weights`, which the
            // lengths checked above hold.
            unsafe {
                match block {
                    6 => x86::block::<6>(self.inputs, input, weights, sums),
                    5 => x86::block::<5>(self.inputs, input, weights, sums),
                    4 => x86::block::<4>(self.inputs, input, weights, sums),
                    3 => x86::block::<3>(self.inputs, input, weights, sums),
                    2 => x86::block::<2>(self.inputs, input, weights, sums),
                    _ => x86::block::<1>(self.inputs, input, weights, sums),
                }
            }
            return;
        }
        let inputs = self.inputs;
        for (line, sums) in sums[..block].iter_mut().enumerate() {
            let row = &input[line * inputs..(line + 1) * inputs];
            for (value, weights) in row.iter().zip(weights.chunks_exact(PANEL)) {
                for (sum, weight) in sums.iter_mut().zip(weights) {
                    *sum += value * weight;
                }
            }
        }
    }
}

fn fused_multiply_add() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{PANEL, ROWS};

    /// `sums[r] = input row r · the panel`, for the first `N` rows.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `input` must hold `N * inputs` values and `weights`
    /// `inputs * PANEL`.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::needless_range_loop)] // `row` walks three arrays and the input's rows
    pub unsafe fn block<const N: usize>(
        inputs: usize,
        input: &[f32],
        weights: &[f32],
        sums: &mut [[f32; PANEL]; ROWS],
    ) {
        assert!(input.len() >= N * inputs && weights.len() >= inputs * PANEL && N <= ROWS);
        let input = input.as_ptr();
        let mut weight = weights.as_ptr();
        let mut low = [_mm256_setzero_ps(); N];
        let mut high = [_mm256_setzero_ps(); N];
        for column in 0..inputs {
            // SAFETY: column < inputs and row < N keep both reads inside the slices (asserted).
            unsafe {
                let first = _mm256_loadu_ps(weight);
                let second = _mm256_loadu_ps(weight.add(8));
                for row in 0..N {
                    let value = _mm256_broadcast_ss(&*input.add(row * inputs + column));
                    low[row] = _mm256_fmadd_ps(value, first, low[row]);
                    high[row] = _mm256_fmadd_ps(value, second, high[row]);
                }
                weight = weight.add(PANEL);
            }
        }
        for row in 0..N {
            // SAFETY: each row of `sums` holds PANEL = 16 floats.
            unsafe {
                _mm256_storeu_ps(sums[row].as_mut_ptr(), low[row]);
                _mm256_storeu_ps(sums[row].as_mut_ptr().add(8), high[row]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_product_equals_the_plain_one() {
        // Shapes with partial panels and partial row blocks.
        for (rows, inputs, outputs) in [(1, 3, 5), (7, 20, 33), (13, 16, 16), (6, 1, 17)] {
            let weight: Vec<f32> = (0..outputs * inputs)
                .map(|i| ((i * 7919 % 113) as f32 - 56.0) / 37.0)
                .collect();
            let bias: Vec<f32> = (0..outputs).map(|i| i as f32 / 3.0).collect();
            let input: Vec<f32> = (0..rows * inputs)
                .map(|i| ((i * 104_729 % 89) as f32 - 44.0) / 23.0)
                .collect();
            let mut expected = vec![0f32; rows * outputs];
            for row in 0..rows {
                for output in 0..outputs {
                    let mut sum = f64::from(bias[output]);
                    for input_column in 0..inputs {
                        sum += f64::from(input[row * inputs + input_column])
                            * f64::from(weight[output * inputs + input_column]);
                    }
                    expected[row * outputs + output] = sum as f32;
                }
            }
            let mut packed = Packed::new(&weight, &bias, outputs, inputs);
            for fused in [packed.fused, false] {
                packed.fused = fused;
                let mut output = vec![1.0; 3];
                packed.apply(&input, rows, &mut output);
                assert_eq!(output.len(), rows * outputs);
                for (got, want) in output.iter().zip(&expected) {
                    assert!(
                        (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{rows}x{inputs}x{outputs} fused {fused}: {got} against {want}"
                    );
                }
            }
        }
    }
}
