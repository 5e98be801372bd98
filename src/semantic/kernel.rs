//! The encoder's arithmetic, dispatched at run time to the widest vector unit the host has: the linear layers (`output = input W^T + b`, `W` packed once at load) and the element-wise passes (softmax, LayerNorm, GELU, attention per head).
//!
//! A text is a few dozen rows, so a general GEMM spends most of its time packing the weights
//! again at every call (two thirds of a question's time with `matrixmultiply`). Here the
//! weights are packed when the model loads: panels of [`PANEL`] output columns, each panel
//! `[inputs][PANEL]`, zero-padded past the last output. The product walks the panels (each
//! stays in L1/L2 while its row blocks use it) over blocks of input rows, keeping the block's
//! sums in registers for the whole `inputs` loop: with AVX-512 two panels at a time, up to 12
//! rows of two 16-lane accumulators (one broadcast input feeds two multiply-adds; 32
//! registers), and up to 16 rows of one panel for an odd last panel; with AVX2 and FMA 6 rows
//! of two 8-lane ones (16 registers); elsewhere the same loop in plain Rust. The x86 kernels
//! ask for the weights a few inputs ahead of the loop (`x86::PREFETCH_AHEAD`), since they
//! stream from L3 or memory. The element-wise passes are written once, in plain Rust with sums
//! kept in 16 lanes (so every path adds in the same order), and compiled three times by
//! [`multiversion`]: for AVX-512, for AVX2 and FMA, and portable. Every path gives the same
//! vectors within 1e-5 (tests here and in tests/it/semantic.rs).

/// Output columns per panel: one 16-lane AVX-512 register, two 8-lane AVX ones.
pub const PANEL: usize = 16;
/// The most input rows a block keeps in registers (the AVX-512 kernel's).
const MAX_ROWS: usize = 16;
/// The most input rows a block of two panels keeps in registers with AVX-512: 24 accumulators,
/// two panels and the broadcast value in 32 registers.
const PAIR_ROWS: usize = 12;

/// The vector unit the arithmetic runs on. Only [`Isa::widest`] and [`Isa::available`] make
/// one, and only for units the CPU has, so the unsafe dispatch below can trust it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isa(Level);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// AVX-512 with BF16's dot products (`vdpbf16ps`), for [`Precision::Bf16`].
    #[cfg(target_arch = "x86_64")]
    Avx512Bf16,
}

impl Isa {
    /// The plain-Rust path, on every host.
    pub fn portable() -> Isa {
        Isa(Level::Portable)
    }

    /// The widest unit this CPU has: AVX-512 with BF16, else AVX-512 (F), else AVX2 with FMA,
    /// else portable.
    pub fn widest() -> Isa {
        Isa::available()[0]
    }

    /// Every path this CPU can run, widest first; the portable one is always last.
    pub fn available() -> Vec<Isa> {
        let mut paths = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            if avx2 && std::arch::is_x86_feature_detected!("avx512f") {
                if std::arch::is_x86_feature_detected!("avx512bf16") {
                    paths.push(Isa(Level::Avx512Bf16));
                }
                paths.push(Isa(Level::Avx512));
            }
            if avx2 {
                paths.push(Isa(Level::Avx2));
            }
        }
        paths.push(Isa(Level::Portable));
        paths
    }

    /// `avx512-bf16`, `avx512`, `avx2` or `portable`, for status and benchmark lines.
    pub fn name(self) -> &'static str {
        match self.0 {
            Level::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => "avx512",
            #[cfg(target_arch = "x86_64")]
            Level::Avx512Bf16 => "avx512-bf16",
        }
    }

    /// Whether the product takes two panels at a time (AVX-512's 32 registers hold both).
    fn pairs_panels(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.0, Level::Avx512 | Level::Avx512Bf16) {
            return true;
        }
        false
    }

    /// Whether this unit multiplies bfloat16 pairs in hardware.
    fn has_bf16(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.0 == Level::Avx512Bf16 {
            return true;
        }
        false
    }

    /// The most rows one block of the product keeps in registers on this path.
    fn block_rows(self) -> usize {
        match self.0 {
            Level::Portable => 6,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => 6,
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 | Level::Avx512Bf16 => MAX_ROWS,
        }
    }
}

/// Defines `pub fn NAME(isa: Isa, arguments...)` that runs `BODY(arguments...)` (an
/// `#[inline(always)]` function) compiled for the unit `isa` names: the compiler vectorizes
/// the same plain loops to 16, 8 or 4 lanes.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($argument:ident: $type:ty),*) = $body:path;) => {
        $(#[$meta])*
        $vis fn $name(isa: Isa, $($argument: $type),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn wide($($argument: $type),*) {
                    $body($($argument),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn middle($($argument: $type),*) {
                    $body($($argument),*)
                }
                match isa.0 {
                    // SAFETY: an `Isa` of these levels is made only when the CPU has their
                    // features (`Isa::available`).
                    Level::Avx512 | Level::Avx512Bf16 => return unsafe { wide($($argument),*) },
                    Level::Avx2 => return unsafe { middle($($argument),*) },
                    Level::Portable => {}
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = isa;
            $body($($argument),*)
        }
    };
}

pub use crate::config::Precision;

/// `value` rounded to bfloat16 (to nearest, ties to even) in the high 16 bits, the low 16
/// zero: the f32 that bfloat16 value is. Branch-free, so the loops over it vectorize; a NaN
/// stays a (quiet) NaN.
#[inline(always)]
fn bf16_high(value: f32) -> u32 {
    let bits = value.to_bits();
    let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1));
    let chosen = if value.is_nan() {
        bits | 0x0040_0000
    } else {
        rounded
    };
    chosen & 0xFFFF_0000
}

/// `value` rounded to bfloat16, as its 16 bits.
fn bf16_bits(value: f32) -> u16 {
    (bf16_high(value) >> 16) as u16
}

/// `value` rounded to bfloat16, as an f32.
#[inline(always)]
fn bf16_round(value: f32) -> f32 {
    f32::from_bits(bf16_high(value))
}

/// One input row for the f32 kernels at bf16: rounded, each pair swapped (`line` is the row's
/// length rounded up to even; an odd row's last value pairs with a zero).
#[inline(always)]
fn swapped_rounded_body(row: &[f32], line: &mut [f32]) {
    for (pair, out) in row.chunks_exact(2).zip(line.chunks_exact_mut(2)) {
        out[0] = bf16_round(pair[1]);
        out[1] = bf16_round(pair[0]);
    }
    if row.len() % 2 == 1 {
        let last = row.len() - 1;
        line[last] = 0.0;
        line[last + 1] = bf16_round(row[last]);
    }
}

multiversion! {
    /// One input row rounded to bfloat16 with its pairs swapped (see `swapped_rounded_body`).
    fn swapped_rounded(row: &[f32], line: &mut [f32]) = swapped_rounded_body;
}

/// One input row for the BF16 unit: each pair of values rounded into one word, the even one in
/// the low half (an odd row's last value pairs with a zero).
#[inline(always)]
fn paired_body(row: &[f32], line: &mut [u32]) {
    for (pair, word) in row.chunks_exact(2).zip(line.iter_mut()) {
        *word = bf16_high(pair[1]) | bf16_high(pair[0]) >> 16;
    }
    if row.len() % 2 == 1 {
        line[row.len() / 2] = bf16_high(row[row.len() - 1]) >> 16;
    }
}

multiversion! {
    /// One input row as words of bfloat16 pairs (see `paired_body`).
    fn paired(row: &[f32], line: &mut [u32]) = paired_body;
}

/// The packed weights: f32 panels (`panels x depth x PANEL`), or with BF16 in hardware, panels
/// of bfloat16 pairs (`panels x depth/2 x PANEL`, input `2k` in each word's low half).
enum Weights {
    F32(Vec<f32>),
    Bf16Pairs(Vec<u32>),
}

/// Calls `x86::KERNEL::<N>(arguments)` for `N` = `rows`, which must be one of the literals
/// listed (the block sizes that kernel is compiled for).
#[cfg(target_arch = "x86_64")]
macro_rules! with_rows {
    ($rows:expr, $kernel:ident $arguments:tt, $($n:literal)*) => {
        match $rows {
            $($n => x86::$kernel::<$n> $arguments,)*
            _ => unreachable!("a block holds 1 to {} rows", [$($n),*].len()),
        }
    };
}

/// A linear layer's weight and bias, packed for [`Packed::apply`].
pub struct Packed {
    weights: Weights,
    /// The bias, zero-padded to `panels x PANEL`.
    bias: Vec<f32>,
    pub inputs: usize,
    pub outputs: usize,
    /// The inputs a panel holds per output: `inputs`, rounded up to even with bf16 (the
    /// padding's weights are zero).
    depth: usize,
    precision: Precision,
    isa: Isa,
}

impl Packed {
    /// Packs `weight` (`[outputs, inputs]`, as PyTorch stores it) and `bias` (`[outputs]`) for
    /// the products of `isa` at `precision`. With bf16 but no BF16 unit, the panels hold the
    /// rounded weights with each pair of inputs swapped, so that the f32 kernels, walking the
    /// inputs in order, add each pair's odd product first.
    pub fn new(
        weight: &[f32],
        bias: &[f32],
        outputs: usize,
        inputs: usize,
        isa: Isa,
        precision: Precision,
    ) -> Packed {
        assert_eq!(weight.len(), outputs * inputs);
        assert_eq!(bias.len(), outputs);
        let panels = outputs.div_ceil(PANEL);
        let depth = match precision {
            Precision::F32 => inputs,
            Precision::Bf16 => inputs.next_multiple_of(2),
        };
        let weights = match (precision, isa.has_bf16()) {
            (Precision::Bf16, true) => {
                let pairs = depth / 2;
                let mut packed = vec![0u32; panels * pairs * PANEL];
                for (output, row) in weight.chunks_exact(inputs).enumerate() {
                    let (panel, column) = (output / PANEL, output % PANEL);
                    for (pair, values) in row.chunks(2).enumerate() {
                        let low = u32::from(bf16_bits(values[0]));
                        let high = values.get(1).map_or(0, |value| bf16_bits(*value));
                        packed[(panel * pairs + pair) * PANEL + column] =
                            low | u32::from(high) << 16;
                    }
                }
                Weights::Bf16Pairs(packed)
            }
            _ => {
                let mut packed = vec![0f32; panels * depth * PANEL];
                for (output, row) in weight.chunks_exact(inputs).enumerate() {
                    let (panel, column) = (output / PANEL, output % PANEL);
                    let start = panel * depth * PANEL + column;
                    for (input, value) in row.iter().enumerate() {
                        let (at, value) = match precision {
                            Precision::F32 => (input, *value),
                            Precision::Bf16 => (input ^ 1, bf16_round(*value)),
                        };
                        packed[start + at * PANEL] = value;
                    }
                }
                Weights::F32(packed)
            }
        };
        let mut padded = bias.to_vec();
        padded.resize(panels * PANEL, 0.0);
        Packed {
            weights,
            bias: padded,
            inputs,
            outputs,
            depth,
            precision,
            isa,
        }
    }

    /// `output = input W^T + b` for `rows` rows of `input` (`rows x inputs`); `output` becomes
    /// `rows x outputs`. With bf16 the rows are rounded first (pairs swapped for the f32
    /// kernels, paired in words for the BF16 unit's).
    pub fn apply(&self, input: &[f32], rows: usize, output: &mut Vec<f32>) {
        let (inputs, depth) = (self.inputs, self.depth);
        assert!(input.len() >= rows * inputs);
        output.clear();
        output.resize(rows * self.outputs, 0.0);
        if rows == 0 || self.outputs == 0 {
            return;
        }
        match (&self.weights, self.precision) {
            (Weights::F32(weights), Precision::F32) => {
                self.products(input, inputs, weights, rows, output, Self::block)
            }
            (Weights::F32(weights), Precision::Bf16) => {
                let mut rounded = vec![0f32; rows * depth];
                for (row, line) in input
                    .chunks_exact(inputs)
                    .zip(rounded.chunks_exact_mut(depth))
                {
                    swapped_rounded(self.isa, row, line);
                }
                self.products(&rounded, depth, weights, rows, output, Self::block)
            }
            (Weights::Bf16Pairs(weights), _) => {
                let pairs = depth / 2;
                let mut paired_rows = vec![0u32; rows * pairs];
                for (row, line) in input
                    .chunks_exact(inputs)
                    .zip(paired_rows.chunks_exact_mut(pairs))
                {
                    paired(self.isa, row, line);
                }
                self.products(&paired_rows, pairs, weights, rows, output, Self::block_bf16)
            }
        }
    }

    /// The product of `rows` rows of `input` (each `width` values) with the panels of
    /// `weights` (each `width x PANEL`), by `block` (a block of rows against one panel or, with
    /// AVX-512, two).
    fn products<T>(
        &self,
        input: &[T],
        width: usize,
        weights: &[T],
        rows: usize,
        output: &mut [f32],
        block: BlockKernel<T>,
    ) {
        let panels: Vec<&[T]> = weights.chunks_exact(width * PANEL).collect();
        // One block's sums, made once: every kernel writes each of the block's rows (the
        // portable loop clears them first), and only those rows are read.
        let mut sums = [[[0f32; PANEL]; MAX_ROWS]; 2];
        let mut panel = 0;
        while panel < panels.len() {
            let paired = self.isa.pairs_panels() && panel + 1 < panels.len();
            let (width_panels, most) = match paired {
                true => (2, PAIR_ROWS),
                false => (1, self.isa.block_rows()),
            };
            // Blocks of sizes that differ by one at most: 31 rows are 6 + 5 + 5 + 5 + 5 + 5, not
            // 6 + 6 + 6 + 6 + 6 + 1 (a one-row block streams the whole panel for two
            // multiply-add chains: with AVX2 it cost three quarters of a six-row block).
            let blocks = rows.div_ceil(most);
            let (base, longer) = (rows / blocks, rows % blocks);
            let mut row = 0;
            for number in 0..blocks {
                let rows_here = base + usize::from(number < longer);
                let input = &input[row * width..(row + rows_here) * width];
                let second = paired.then(|| panels[panel + 1]);
                block(
                    self,
                    rows_here,
                    width,
                    input,
                    (panels[panel], second),
                    &mut sums,
                );
                for (offset, sums) in sums[..width_panels].iter().enumerate() {
                    self.write_block(output, row, panel + offset, &sums[..rows_here]);
                }
                row += rows_here;
            }
            panel += width_panels;
        }
    }

    /// Adds the bias to one block's sums of panel `panel` and writes them from row `row` on.
    fn write_block(&self, output: &mut [f32], row: usize, panel: usize, sums: &[[f32; PANEL]]) {
        let first = panel * PANEL;
        let columns = PANEL.min(self.outputs - first);
        let bias = &self.bias[first..first + PANEL];
        for (line, sums) in sums.iter().enumerate() {
            let start = (row + line) * self.outputs + first;
            for ((out, sum), bias) in output[start..start + columns]
                .iter_mut()
                .zip(sums)
                .zip(bias)
            {
                *out = sum + bias;
            }
        }
    }

    /// The f32 sums of `rows` rows of `input` (each `width` long) against one panel, or two
    /// (AVX-512 only).
    fn block(
        &self,
        rows: usize,
        width: usize,
        input: &[f32],
        (weights, second): (&[f32], Option<&[f32]>),
        sums: &mut BlockSums,
    ) {
        assert!(input.len() == rows * width && weights.len() == width * PANEL);
        // SAFETY (every arm): the level says the CPU has the kernel's features (`Isa`); each
        // kernel reads `rows * width` values of `input` and `width * PANEL` of each panel,
        // which the lengths above hold, and `rows` is within its block (asserted).
        #[cfg(target_arch = "x86_64")]
        match (self.isa.0, second) {
            (Level::Avx512 | Level::Avx512Bf16, Some(second)) => {
                assert!(rows <= PAIR_ROWS && second.len() == width * PANEL);
                let panels = (weights, second);
                unsafe {
                    with_rows!(rows, block16_pair(width, input, panels, sums),
                        1 2 3 4 5 6 7 8 9 10 11 12)
                };
                return;
            }
            (Level::Avx512 | Level::Avx512Bf16, None) => {
                assert!(rows <= MAX_ROWS);
                let sums = &mut sums[0];
                unsafe {
                    with_rows!(rows, block16(width, input, weights, sums),
                        1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
                };
                return;
            }
            (Level::Avx2, _) => {
                assert!(rows <= 6 && second.is_none());
                let sums = &mut sums[0];
                unsafe { with_rows!(rows, block8(width, input, weights, sums), 1 2 3 4 5 6) };
                return;
            }
            (Level::Portable, _) => {}
        }
        assert!(rows <= 6 && second.is_none());
        for (line, sums) in sums[0][..rows].iter_mut().enumerate() {
            sums.fill(0.0);
            let row = &input[line * width..(line + 1) * width];
            for (value, weights) in row.iter().zip(weights.chunks_exact(PANEL)) {
                for (sum, weight) in sums.iter_mut().zip(weights) {
                    *sum += value * weight;
                }
            }
        }
    }

    /// The sums of `rows` rows of bfloat16 pairs (each `pairs` words) against one panel of
    /// pairs, or two, on the BF16 unit.
    #[allow(unused_variables)] // `rows`, `pairs`... only read on x86_64
    fn block_bf16(
        &self,
        rows: usize,
        pairs: usize,
        input: &[u32],
        (weights, second): (&[u32], Option<&[u32]>),
        sums: &mut BlockSums,
    ) {
        assert!(
            self.isa.has_bf16(),
            "bf16 pairs are packed only for a BF16 unit"
        );
        assert!(input.len() == rows * pairs && weights.len() == pairs * PANEL);
        // SAFETY (both arms): `has_bf16` holds only when the CPU has AVX-512 BF16 (`Isa`);
        // each kernel reads `rows * pairs` words of `input` and `pairs * PANEL` of each panel,
        // which the lengths here hold, and `rows` is within its block (asserted).
        #[cfg(target_arch = "x86_64")]
        match second {
            Some(second) => {
                assert!(rows <= PAIR_ROWS && second.len() == pairs * PANEL);
                let panels = (weights, second);
                unsafe {
                    with_rows!(rows, bf16_pair(pairs, input, panels, sums),
                        1 2 3 4 5 6 7 8 9 10 11 12)
                };
            }
            None => {
                assert!(rows <= MAX_ROWS);
                let sums = &mut sums[0];
                unsafe {
                    with_rows!(rows, bf16_one(pairs, input, weights, sums),
                        1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
                };
            }
        }
    }
}

/// One block's sums: up to [`MAX_ROWS`] rows of a panel, for each of two panels.
type BlockSums = [[[f32; PANEL]; MAX_ROWS]; 2];

/// A kernel of [`Packed::products`]: `(packed, rows, width, input, (panel, second panel), sums)`.
type BlockKernel<T> = fn(&Packed, usize, usize, &[T], (&[T], Option<&[T]>), &mut BlockSums);

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{MAX_ROWS, PANEL};

    /// How far ahead of the product a kernel asks for the panel's weights, in floats: 32
    /// inputs' worth, 2 KiB. The weights (42 MB for all-MiniLM-L6-v2) come from L3 or memory
    /// once per question, and with the hardware prefetcher alone a profile put 41 % of the
    /// product's samples on the instruction after the panel's load. Measured on this project's
    /// 2-core Xeon (AVX-512) while other work ran, each question's thread CPU time over
    /// LiveMCPBench's 94 questions, p10: 9.1-9.8 ms without, 8.2-8.5 ms 8 inputs ahead, 7.2-7.5
    /// 16, 6.5-7.0 32, 6.5 64. A prefetch is a hint: one past the slice's end reads nothing and
    /// never faults, so the address is made with `wrapping_add` and never dereferenced.
    const PREFETCH_AHEAD: usize = 32 * PANEL;

    /// Defines the two AVX-512 kernels of one kind of element: `$one`, `sums[r] = input row r ·
    /// the panel` for the first `N` rows, each `width` elements long, in 16-lane registers; and
    /// `$pair`, the same for two panels at once: each broadcast input feeds two multiply-adds,
    /// so the loop issues `2N` of them for `N + 2` loads (one panel's `N` need `N + 1`: bound
    /// by the load ports at about one a cycle, half of what the unit does). Each sum adds the
    /// same terms in the same order in both, so the two give the same bits. An element is an
    /// f32 (`_mm512_fmadd_ps`) or a word of two bfloat16 values (`_mm512_dpbf16_ps`: both
    /// products of the pair into each lane).
    ///
    /// Safety of both: the CPU must have `$features`; `input` must hold `N * width` elements
    /// and each panel `width * PANEL`.
    macro_rules! kernels {
        (
            $features:literal, $element:ty,
            $one:ident, $pair:ident,
            load: |$at:ident| $load:expr,
            broadcast: |$from:ident| $broadcast:expr,
            add: |$sum:ident, $value:ident, $panel:ident| $add:expr $(,)?
        ) => {
            /// See `kernels!`.
            #[target_feature(enable = $features)]
            #[allow(clippy::needless_range_loop)] // `row` walks the sums and the input's rows
            #[clippy::msrv = "1.89"] // AVX-512's intrinsics; clippy.toml keeps 1.80 for the rest
            pub unsafe fn $one<const N: usize>(
                width: usize,
                input: &[$element],
                weights: &[$element],
                sums: &mut [[f32; PANEL]; MAX_ROWS],
            ) {
                assert!(input.len() >= N * width && weights.len() >= width * PANEL);
                assert!(N <= MAX_ROWS);
                let input = input.as_ptr();
                let mut weight = weights.as_ptr();
                let mut lanes = [_mm512_setzero_ps(); N];
                for column in 0..width {
                    // SAFETY: column < width and row < N keep both reads inside the slices
                    // (asserted); a vector is PANEL elements.
                    unsafe {
                        _mm_prefetch::<_MM_HINT_T0>(weight.wrapping_add(PREFETCH_AHEAD).cast());
                        let $at = weight;
                        let panel = $load;
                        for row in 0..N {
                            let $from = input.add(row * width + column);
                            let ($sum, $value, $panel) = (lanes[row], $broadcast, panel);
                            lanes[row] = $add;
                        }
                        weight = weight.add(PANEL);
                    }
                }
                for row in 0..N {
                    // SAFETY: each row of `sums` holds PANEL = 16 floats.
                    unsafe { _mm512_storeu_ps(sums[row].as_mut_ptr(), lanes[row]) };
                }
            }

            /// See `kernels!`.
            #[target_feature(enable = $features)]
            #[allow(clippy::needless_range_loop)] // `row` walks the sums and the input's rows
            #[clippy::msrv = "1.89"] // AVX-512's intrinsics; clippy.toml keeps 1.80 for the rest
            pub unsafe fn $pair<const N: usize>(
                width: usize,
                input: &[$element],
                (first, second): (&[$element], &[$element]),
                sums: &mut [[[f32; PANEL]; MAX_ROWS]; 2],
            ) {
                assert!(input.len() >= N * width && N <= super::PAIR_ROWS);
                assert!(first.len() >= width * PANEL && second.len() >= width * PANEL);
                let input = input.as_ptr();
                let (mut left, mut right) = (first.as_ptr(), second.as_ptr());
                let mut lanes_left = [_mm512_setzero_ps(); N];
                let mut lanes_right = [_mm512_setzero_ps(); N];
                for column in 0..width {
                    // SAFETY: column < width and row < N keep every read inside the slices
                    // (asserted).
                    unsafe {
                        _mm_prefetch::<_MM_HINT_T0>(left.wrapping_add(PREFETCH_AHEAD).cast());
                        _mm_prefetch::<_MM_HINT_T0>(right.wrapping_add(PREFETCH_AHEAD).cast());
                        let panel_left = {
                            let $at = left;
                            $load
                        };
                        let panel_right = {
                            let $at = right;
                            $load
                        };
                        for row in 0..N {
                            let $from = input.add(row * width + column);
                            let value = $broadcast;
                            lanes_left[row] = {
                                let ($sum, $value, $panel) = (lanes_left[row], value, panel_left);
                                $add
                            };
                            lanes_right[row] = {
                                let ($sum, $value, $panel) = (lanes_right[row], value, panel_right);
                                $add
                            };
                        }
                        left = left.add(PANEL);
                        right = right.add(PANEL);
                    }
                }
                for row in 0..N {
                    // SAFETY: each row of `sums` holds PANEL = 16 floats.
                    unsafe {
                        _mm512_storeu_ps(sums[0][row].as_mut_ptr(), lanes_left[row]);
                        _mm512_storeu_ps(sums[1][row].as_mut_ptr(), lanes_right[row]);
                    }
                }
            }
        };
    }

    kernels!(
        "avx512f", f32, block16, block16_pair,
        load: |at| _mm512_loadu_ps(at),
        broadcast: |from| _mm512_set1_ps(*from),
        add: |sum, value, panel| _mm512_fmadd_ps(value, panel, sum),
    );

    // A word of two bfloat16 inputs (the even one in its low half) against panels of such
    // words: one `vdpbf16ps` adds the pair's two products to each of 16 lanes.
    kernels!(
        "avx512f,avx512bf16", u32, bf16_one, bf16_pair,
        load: |at| std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(at.cast())),
        broadcast: |from| std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(*from as i32)),
        add: |sum, value, panel| _mm512_dpbf16_ps(sum, value, panel),
    );

    /// `sums[r] = input row r · the panel`, for the first `N` rows, in two 8-lane registers each.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `input` must hold `N * inputs` values and `weights`
    /// `inputs * PANEL`.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::needless_range_loop)] // `row` walks three arrays and the input's rows
    pub unsafe fn block8<const N: usize>(
        inputs: usize,
        input: &[f32],
        weights: &[f32],
        sums: &mut [[f32; PANEL]; MAX_ROWS],
    ) {
        assert!(input.len() >= N * inputs && weights.len() >= inputs * PANEL && N <= MAX_ROWS);
        let input = input.as_ptr();
        let mut weight = weights.as_ptr();
        let mut low = [_mm256_setzero_ps(); N];
        let mut high = [_mm256_setzero_ps(); N];
        for column in 0..inputs {
            // SAFETY: column < inputs and row < N keep both reads inside the slices (asserted).
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(weight.wrapping_add(PREFETCH_AHEAD).cast());
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

/// The lanes sums are kept in: 16, so that every path (16, 8 or 4 hardware lanes) adds in the
/// same order and gives the same bits.
const LANES: usize = 16;

/// `a · b` summed in [`LANES`] lanes.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (a, b) in a_chunks.zip(b_chunks) {
        for ((lane, a), b) in lanes.iter_mut().zip(a).zip(b) {
            *lane += a * b;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The sum of `values` in [`LANES`] lanes.
#[inline(always)]
fn lane_sum(values: &[f32], term: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|value| term(*value)).sum();
    for chunk in chunks {
        for (lane, value) in lanes.iter_mut().zip(chunk) {
            *lane += term(*value);
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// e^-v for v >= 0, within 1e-7 relative (0 is read as e^-87): v = n ln 2 - r, a degree-7
/// Taylor series for e^r, |r| <= ln 2 / 2, and 2^n made from its bits. Plain arithmetic
/// without branches or calls, so a loop over it vectorizes (libm's expf and erff do not).
#[inline(always)]
pub fn exp_negative(v: f32) -> f32 {
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

/// erf(x) within 1e-6 (Abramowitz and Stegun 7.1.26, with [`exp_negative`]).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    (1.0 - poly * exp_negative(z * z)).copysign(x)
}

/// Softmax of one row, in place, with the vectorizing exp.
#[inline(always)]
fn softmax_body(row: &mut [f32]) {
    // The largest value, [`LANES`] at a time (the order of `max` changes nothing).
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    for chunk in chunks {
        for (lane, value) in lanes.iter_mut().zip(chunk) {
            *lane = lane.max(*value);
        }
    }
    let max = lanes.iter().copied().fold(tail, f32::max);
    for value in row.iter_mut() {
        *value = exp_negative(max - *value);
    }
    let inverse = 1.0 / lane_sum(row, |value| value);
    for value in row.iter_mut() {
        *value *= inverse;
    }
}

multiversion! {
    /// Softmax of one row, in place.
    pub fn softmax(row: &mut [f32]) = softmax_body;
}

/// LayerNorm of each `weight.len()`-wide row of `values`, in place, in f32 (mean, then the
/// centered variance, both summed in lanes).
#[inline(always)]
fn layer_norm_body(values: &mut [f32], weight: &[f32], bias: &[f32], epsilon: f32) {
    let width = weight.len();
    for row in values.chunks_exact_mut(width) {
        let mean = lane_sum(row, |value| value) / width as f32;
        let variance = lane_sum(row, |value| (value - mean) * (value - mean)) / width as f32;
        let inverse = 1.0 / (variance + epsilon).sqrt();
        for ((value, weight), bias) in row.iter_mut().zip(weight).zip(bias) {
            *value = (*value - mean) * inverse * weight + bias;
        }
    }
}

multiversion! {
    /// LayerNorm of each row of `values` (as wide as `weight`), in place.
    pub fn layer_norm(values: &mut [f32], weight: &[f32], bias: &[f32], epsilon: f32) = layer_norm_body;
}

#[inline(always)]
fn gelu_body(values: &mut [f32]) {
    for value in values {
        let x = *value;
        *value = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

multiversion! {
    /// The exact GELU (with erf), in place.
    pub fn gelu(values: &mut [f32]) = gelu_body;
}

/// The shape of one attention: `tokens` rows of `stride` values (queries, keys and values
/// side by side, `hidden` each), `heads` heads of `hidden / heads`.
#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    pub tokens: usize,
    pub hidden: usize,
    pub heads: usize,
}

/// Self-attention of every head from the stacked `query_key_value` rows: per head, its keys
/// are laid out transposed once (`size x padded`, a copy of O(tokens) per head, zero past the
/// last token up to a whole number of [`LANES`]), so that a query's scores against every key
/// are `size` multiply-adds across all keys at once, [`LANES`] keys kept in one register for
/// the whole head (full vectors: no horizontal sum per key, and no scalar tail when the tokens
/// are not a multiple of the lanes, which was most of a 31-token question's attention); then
/// their softmax over the real keys and the weighted sum of the values into the head's
/// columns of `context` (`tokens x hidden`). Each score adds its `size` terms in order, as
/// the plain dot product does.
#[inline(always)]
fn attention_body(shape: AttentionShape, query_key_value: &[f32], context: &mut [f32]) {
    let AttentionShape {
        tokens,
        hidden,
        heads,
    } = shape;
    let size = hidden / heads;
    let stride = 3 * hidden;
    let scale = 1.0 / (size as f32).sqrt();
    assert!(query_key_value.len() >= tokens * stride && context.len() >= tokens * hidden);
    let padded = tokens.div_ceil(LANES) * LANES;
    let mut keys = vec![0f32; size * padded];
    let mut scores = vec![0f32; padded];
    for head in 0..heads {
        let offset = head * size;
        for key in 0..tokens {
            let start = key * stride + hidden + offset;
            for (d, value) in query_key_value[start..start + size].iter().enumerate() {
                keys[d * padded + key] = *value;
            }
        }
        for query in 0..tokens {
            let start = query * stride + offset;
            let asked = &query_key_value[start..start + size];
            for (block, chunk) in scores.chunks_exact_mut(LANES).enumerate() {
                let mut sums = [0f32; LANES];
                for (factor, row) in asked.iter().zip(keys.chunks_exact(padded)) {
                    let keys: &[f32; LANES] = row[block * LANES..(block + 1) * LANES]
                        .try_into()
                        .expect("rows are whole lanes");
                    for (sum, key) in sums.iter_mut().zip(keys) {
                        *sum += factor * key;
                    }
                }
                for (score, sum) in chunk.iter_mut().zip(sums) {
                    *score = sum * scale;
                }
            }
            let scores = &mut scores[..tokens];
            softmax_body(scores);
            // The weighted sum of the values, [`LANES`] of the head's columns at a time kept
            // in one register over every key (then the columns past the last whole lanes).
            let start = query * hidden + offset;
            let out = &mut context[start..start + size];
            let whole = size - size % LANES;
            let values = |key: usize| {
                let start = key * stride + 2 * hidden + offset;
                &query_key_value[start..start + size]
            };
            for (block, chunk) in out[..whole].chunks_exact_mut(LANES).enumerate() {
                let mut sums = [0f32; LANES];
                for (key, weight) in scores.iter().enumerate() {
                    let values: &[f32; LANES] = values(key)[block * LANES..(block + 1) * LANES]
                        .try_into()
                        .expect("a block is whole lanes");
                    for (sum, value) in sums.iter_mut().zip(values) {
                        *sum += weight * value;
                    }
                }
                chunk.copy_from_slice(&sums);
            }
            let rest = &mut out[whole..];
            rest.fill(0.0);
            for (key, weight) in scores.iter().enumerate() {
                for (out, value) in rest.iter_mut().zip(&values(key)[whole..]) {
                    *out += weight * value;
                }
            }
        }
    }
}

multiversion! {
    /// Self-attention of every head (see `attention_body`).
    pub fn attention(shape: AttentionShape, query_key_value: &[f32], context: &mut [f32]) = attention_body;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pseudo_random(count: usize, seed: usize) -> Vec<f32> {
        (0..count)
            .map(|i| (((i + seed) * 7919 % 113) as f32 - 56.0) / 37.0)
            .collect()
    }

    #[test]
    fn every_path_of_the_product_equals_the_plain_one() {
        // Shapes with partial panels and partial row blocks, and a question's and a document's.
        for (rows, inputs, outputs) in [
            (1, 3, 5),
            (7, 20, 33),
            (13, 16, 16),
            (6, 1, 17),
            (17, 9, 40),
            (32, 384, 1152),
            (61, 64, 20),
        ] {
            let weight = pseudo_random(outputs * inputs, 1);
            let bias: Vec<f32> = (0..outputs).map(|i| i as f32 / 3.0).collect();
            let input: Vec<f32> = (0..rows * inputs)
                .map(|i| ((i * 104_729 % 89) as f32 - 44.0) / 23.0)
                .collect();
            // The exact sums (f64), and each one's scale: f32's rounding error grows with
            // the sum of the terms' sizes, not with the (possibly cancelled) result.
            let mut expected = vec![(0f32, 0f64); rows * outputs];
            for row in 0..rows {
                for output in 0..outputs {
                    let (mut sum, mut scale) = (f64::from(bias[output]), 1f64);
                    for input_column in 0..inputs {
                        let term = f64::from(input[row * inputs + input_column])
                            * f64::from(weight[output * inputs + input_column]);
                        sum += term;
                        scale += term.abs();
                    }
                    expected[row * outputs + output] = (sum as f32, scale);
                }
            }
            let mut portable = Vec::new();
            for isa in Isa::available().into_iter().rev() {
                let packed = Packed::new(&weight, &bias, outputs, inputs, isa, Precision::F32);
                let mut output = vec![1.0; 3];
                packed.apply(&input, rows, &mut output);
                assert_eq!(output.len(), rows * outputs);
                for (got, (want, scale)) in output.iter().zip(&expected) {
                    assert!(
                        f64::from((got - want).abs()) <= 1e-6 * scale,
                        "{rows}x{inputs}x{outputs} on {}: {got} against {want}",
                        isa.name()
                    );
                }
                if isa == Isa::portable() {
                    portable = output;
                } else {
                    for ((got, want), (_, scale)) in output.iter().zip(&portable).zip(&expected) {
                        assert!(
                            f64::from((got - want).abs()) <= 1e-6 * scale,
                            "{rows}x{inputs}x{outputs}: {} {got}, portable {want}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_path_of_the_bf16_product_gives_the_same_bits() {
        // Odd input counts (a zero pair half), partial panels and blocks, a document's shape;
        // values of every size, so that each pair's order of addition shows in the bits.
        for (rows, inputs, outputs) in [
            (1, 3, 5),
            (7, 21, 33),
            (13, 16, 16),
            (17, 9, 40),
            (31, 384, 1152),
        ] {
            let weight: Vec<f32> = pseudo_random(outputs * inputs, 3)
                .iter()
                .enumerate()
                .map(|(i, value)| value * 10f32.powi((i % 7) as i32 - 3))
                .collect();
            let bias: Vec<f32> = (0..outputs).map(|i| i as f32 / 3.0).collect();
            let input: Vec<f32> = pseudo_random(rows * inputs, 8)
                .iter()
                .enumerate()
                .map(|(i, value)| value * 10f32.powi((i % 5) as i32 - 2))
                .collect();
            // The sums as `vdpbf16ps` makes them: per pair, the odd input's exact product
            // added (rounded once), then the even one's; then the bias.
            let mut expected = vec![0f32; rows * outputs];
            for row in 0..rows {
                for output in 0..outputs {
                    let term = |column: usize| match column < inputs {
                        true => {
                            bf16_round(input[row * inputs + column])
                                * bf16_round(weight[output * inputs + column])
                        }
                        false => 0.0,
                    };
                    let mut sum = 0f32;
                    for pair in 0..inputs.div_ceil(2) {
                        sum += term(2 * pair + 1);
                        sum += term(2 * pair);
                    }
                    expected[row * outputs + output] = sum + bias[output];
                }
            }
            for isa in Isa::available() {
                let packed = Packed::new(&weight, &bias, outputs, inputs, isa, Precision::Bf16);
                let mut output = Vec::new();
                packed.apply(&input, rows, &mut output);
                assert_eq!(
                    output.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    expected.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{rows}x{inputs}x{outputs} on {}",
                    isa.name()
                );
            }
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let round = |bits: u32| bf16_bits(f32::from_bits(bits));
        assert_eq!(round(0x3F80_0000), 0x3F80); // 1.0
        assert_eq!(round(0x3F80_7FFF), 0x3F80); // under half: down
        assert_eq!(round(0x3F80_8000), 0x3F80); // a tie, to the even 0x3F80
        assert_eq!(round(0x3F81_8000), 0x3F82); // a tie, to the even 0x3F82
        assert_eq!(round(0x3F80_8001), 0x3F81); // over half: up
        assert_eq!(round(0xBF80_8001), 0xBF81); // the same magnitudes when negative
        assert_eq!(round(0x7F7F_FFFF), 0x7F80); // the largest f32 rounds to infinity
        assert_eq!(round(f32::INFINITY.to_bits()), 0x7F80);
        assert!(f32::from_bits(u32::from(bf16_bits(f32::NAN)) << 16).is_nan());
        assert_eq!(bf16_round(-2.5), -2.5);
    }

    #[test]
    fn the_portable_path_is_always_there_and_last() {
        let paths = Isa::available();
        assert_eq!(paths.last(), Some(&Isa::portable()));
        assert_eq!(paths[0], Isa::widest());
        println!(
            "kernel paths on this host: {:?}",
            paths.iter().map(|isa| isa.name()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn element_wise_passes_agree_on_every_path() {
        let shape = AttentionShape {
            tokens: 19,
            hidden: 96,
            heads: 3,
        };
        let query_key_value = pseudo_random(shape.tokens * 3 * shape.hidden, 5);
        let norm_weight = pseudo_random(shape.hidden, 9);
        let norm_bias = pseudo_random(shape.hidden, 11);
        let run = |isa: Isa| {
            let mut context = vec![0f32; shape.tokens * shape.hidden];
            attention(isa, shape, &query_key_value, &mut context);
            layer_norm(isa, &mut context, &norm_weight, &norm_bias, 1e-12);
            gelu(isa, &mut context);
            context
        };
        let portable = run(Isa::portable());
        // The portable path against a plain f64 computation of the same three steps.
        let mut expected = vec![0f64; shape.tokens * shape.hidden];
        let size = shape.hidden / shape.heads;
        let stride = 3 * shape.hidden;
        let at = |row: usize, column: usize| f64::from(query_key_value[row * stride + column]);
        for head in 0..shape.heads {
            let offset = head * size;
            for query in 0..shape.tokens {
                let scores: Vec<f64> = (0..shape.tokens)
                    .map(|key| {
                        (0..size)
                            .map(|d| at(query, offset + d) * at(key, shape.hidden + offset + d))
                            .sum::<f64>()
                            / (size as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = scores.iter().map(|score| (score - max).exp()).sum();
                for d in 0..size {
                    expected[query * shape.hidden + offset + d] = (0..shape.tokens)
                        .map(|key| {
                            (scores[key] - max).exp() / total
                                * at(key, 2 * shape.hidden + offset + d)
                        })
                        .sum();
                }
            }
        }
        for row in expected.chunks_exact_mut(shape.hidden) {
            let mean = row.iter().sum::<f64>() / shape.hidden as f64;
            let variance =
                row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / shape.hidden as f64;
            for (column, value) in row.iter_mut().enumerate() {
                let normed = (*value - mean) / (variance + 1e-12).sqrt()
                    * f64::from(norm_weight[column])
                    + f64::from(norm_bias[column]);
                *value = 0.5 * normed * (1.0 + libm::erf(normed / std::f64::consts::SQRT_2));
            }
        }
        for (got, want) in portable.iter().zip(&expected) {
            assert!(
                (f64::from(*got) - want).abs() < 1e-5,
                "{got} against {want}"
            );
        }
        for isa in Isa::available() {
            for (got, want) in run(isa).iter().zip(&portable) {
                assert!(
                    (got - want).abs() < 1e-5,
                    "{}: {got} against {want}",
                    isa.name()
                );
            }
        }
    }

    #[test]
    fn layer_norm_and_softmax() {
        let mut values = [1.0, 3.0];
        layer_norm(Isa::widest(), &mut values, &[1.0, 1.0], &[0.5, 0.5], 0.0);
        assert_eq!(values, [-0.5, 1.5]);
        let mut row = [0.0f32, 0.0];
        softmax(Isa::widest(), &mut row);
        assert_eq!(row, [0.5, 0.5]);
        let mut row = [1.0f32, 2.0, 3.0];
        softmax(Isa::widest(), &mut row);
        let total: f32 = [1f32, 2.0, 3.0].iter().map(|v| v.exp()).sum();
        for (got, value) in row.iter().zip([1f32, 2.0, 3.0]) {
            assert!((got - value.exp() / total).abs() < 1e-7);
        }
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
    fn dot_product_in_lanes() {
        let a: Vec<f32> = (0..37).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..37).map(|i| (i % 3) as f32).collect();
        let plain: f32 = a.iter().zip(&b).map(|(a, b)| a * b).sum();
        assert_eq!(dot(&a, &b), plain);
    }
}
