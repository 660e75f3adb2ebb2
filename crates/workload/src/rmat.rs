//! R-MAT graph edges (Chakrabarti, Zhan and Faloutsos, 2004), as Graph500
//! generates them for PageRank-style benchmarks.
//!
//! # Algorithm
//! An edge is placed in the `2^scale x 2^scale` adjacency matrix by `scale`
//! recursive choices of a quadrant:
//! ```text
//!        dst bit 0   dst bit 1
//!      +-----------+-----------+
//!  src |     a     |     b     |   src bit 0
//!      +-----------+-----------+
//!      |     c     |  d = 1-a-b-c  |   src bit 1
//!      +-----------+-----------+
//! ```
//! Level `i` (most significant bit first) sets bit `scale - 1 - i` of the
//! source and destination. With `a > d` the mass piles up near vertex 0:
//! a power-law-like degree distribution. `a = b = c = d = 0.25` gives a
//! uniform random graph. Self loops and duplicate edges are kept (Graph500
//! keeps them too); Graph500's per-level noise on the probabilities is not
//! applied.
//!
//! # Stream format
//! Quadrant choices compare 32-bit uniforms against the thresholds
//! `round(a * 2^32)`, `round((a + b) * 2^32)`, `round((a + b + c) * 2^32)`;
//! each `next_u64` supplies two of them, the high half first (a new word per
//! level pair, a fresh word at each edge). Edges are grouped in blocks of
//! [`EDGES_PER_BLOCK`]; block `k` draws from [`Rng::stream`]`(seed, k)`, so
//! threads build blocks independently and the output does not depend on the
//! thread count. With `permute`, every vertex id `v` is replaced by
//! `Permutation::new(2^scale, derive_seed(seed, u64::MAX)).apply(v)`, which
//! removes the locality of hot vertices near 0.
//!
//! Output: text lines `src\tdst\n` (decimal), or binary pairs of
//! little-endian `u64` (16 bytes per edge, no header).

use std::io::Write;

use serde::Serialize;
use spillway_core::decimal::push_decimal;
use spillway_core::{ensure, Result};

use crate::blocks::for_each_block;
use crate::permutation::Permutation;
use crate::rng::{derive_seed, Rng};
use crate::sink::ChunkedSink;
use crate::DEFAULT_SEED;

/// Edges per block: 1 MiB of binary output.
pub const EDGES_PER_BLOCK: u64 = 1 << 16;
/// The largest scale: 2^48 vertices is far beyond any benchmark and keeps
/// `edge_factor << scale` well inside `u64`.
pub const SCALE_MAX: u32 = 48;
/// Slack allowed in `a + b + c <= 1` for probabilities written in decimal.
const PROBABILITY_SLACK: f64 = 1e-9;
/// The sub-stream index reserved for the vertex permutation (blocks never
/// reach it).
const PERMUTATION_STREAM: u64 = u64::MAX;

/// Everything that determines a graph (except `threads`, which only changes
/// the speed).
#[derive(Debug, Clone, PartialEq)]
pub struct RmatParams {
    /// log2 of the vertex count (default 16).
    pub scale: u32,
    /// Edges per vertex: `edges = edge_factor * 2^scale` (default 16, Graph500).
    pub edge_factor: u64,
    /// Probability of the top-left quadrant (default 0.57, Graph500).
    pub a: f64,
    /// Probability of the top-right quadrant (default 0.19).
    pub b: f64,
    /// Probability of the bottom-left quadrant (default 0.19); the
    /// bottom-right gets `d = 1 - a - b - c`.
    pub c: f64,
    /// Relabel vertices with a seeded permutation (default true, as Graph500).
    pub permute: bool,
    /// Threads building blocks: 0 = every core the process may use (as
    /// [`spillway_core::worker_threads`]), 1 = the calling thread only;
    /// capped at the number of blocks and at [`THREADS_MAX`](crate::THREADS_MAX)
    /// (see [`worker_count`](crate::worker_count)). The output does not
    /// depend on it.
    pub threads: usize,
    /// The seed all draws derive from.
    pub seed: u64,
}

impl Default for RmatParams {
    fn default() -> Self {
        RmatParams {
            scale: 16,
            edge_factor: 16,
            a: 0.57,
            b: 0.19,
            c: 0.19,
            permute: true,
            threads: 1,
            seed: DEFAULT_SEED,
        }
    }
}

impl RmatParams {
    /// Checks every parameter; errors name the parameter and its value.
    /// [`RmatGenerator::new`] and [`write_rmat`] fail only where this does
    /// (or on a write error, or when no worker thread can be started).
    pub fn validate(&self) -> Result<()> {
        ensure!(
            (1..=SCALE_MAX).contains(&self.scale),
            InvalidArgument,
            "scale must be in 1..={SCALE_MAX}, got {}",
            self.scale
        );
        ensure!(
            self.edge_factor >= 1,
            InvalidArgument,
            "edge_factor must be at least 1, got {}",
            self.edge_factor
        );
        ensure!(
            self.edge_factor.checked_mul(1u64 << self.scale).is_some(),
            InvalidArgument,
            "edge_factor {} times 2^{} vertices overflows the edge count",
            self.edge_factor,
            self.scale
        );
        for (name, probability) in [("a", self.a), ("b", self.b), ("c", self.c)] {
            ensure!(
                (0.0..=1.0).contains(&probability),
                InvalidArgument,
                "probability {name} must be in [0, 1], got {probability}"
            );
        }
        let sum = self.a + self.b + self.c;
        ensure!(
            sum <= 1.0 + PROBABILITY_SLACK,
            InvalidArgument,
            "a + b + c must be at most 1 (the fourth quadrant gets the rest), got {} + {} + {} = {sum}",
            self.a,
            self.b,
            self.c
        );
        Ok(())
    }
}

/// What [`write_rmat`] produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RmatSummary {
    /// Edges written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Vertices in the graph (`2^scale`; some may have no edges).
    pub vertices: u64,
    /// Edges whose source equals their destination.
    pub self_loops: u64,
}

/// The edge generator of an [`RmatParams`]: iterator and block APIs.
#[derive(Debug, Clone)]
pub struct RmatGenerator {
    params: RmatParams,
    thresholds: [u64; 3],
    permutation: Option<Permutation>,
}

impl RmatGenerator {
    /// A generator for `params`; fails only when [`RmatParams::validate`]
    /// does.
    pub fn new(params: &RmatParams) -> Result<Self> {
        params.validate()?;
        let threshold = |probability: f64| ((probability * 4_294_967_296.0).round() as u64).min(1 << 32);
        let permutation = if params.permute {
            Some(Permutation::new(
                1u64 << params.scale,
                derive_seed(params.seed, PERMUTATION_STREAM),
            )?)
        } else {
            None
        };
        Ok(RmatGenerator {
            thresholds: [
                threshold(params.a),
                threshold(params.a + params.b),
                threshold(params.a + params.b + params.c),
            ],
            permutation,
            params: params.clone(),
        })
    }

    /// The number of edges, `edge_factor * 2^scale`.
    pub fn edge_count(&self) -> u64 {
        self.params.edge_factor << self.params.scale
    }

    /// The number of vertices, `2^scale`.
    pub fn vertex_count(&self) -> u64 {
        1 << self.params.scale
    }

    /// The number of blocks of [`EDGES_PER_BLOCK`] edges (the last may be
    /// shorter).
    pub fn block_count(&self) -> u64 {
        self.edge_count().div_ceil(EDGES_PER_BLOCK)
    }

    /// The edges of block `index` in order, as `(source, destination)`.
    pub fn block(&self, index: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let first = index * EDGES_PER_BLOCK;
        let count = EDGES_PER_BLOCK.min(self.edge_count().saturating_sub(first));
        let mut rng = Rng::stream(self.params.seed, index);
        (0..count).map(move |_| self.edge(&mut rng))
    }

    /// Every edge, in output order (single-threaded).
    pub fn edges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.block_count()).flat_map(move |index| self.block(index))
    }

    #[inline]
    fn edge(&self, rng: &mut Rng) -> (u64, u64) {
        let [a_cut, ab_cut, abc_cut] = self.thresholds;
        let mut source = 0u64;
        let mut destination = 0u64;
        let mut word = 0u64;
        for level in 0..self.params.scale {
            let uniform = if level % 2 == 0 {
                word = rng.next_u64();
                word >> 32
            } else {
                word & 0xFFFF_FFFF
            };
            // Quadrants a, b, c, d are (0,0), (0,1), (1,0), (1,1). Branch-free
            // because the choice is unpredictable: the source bit is "in c or
            // d", the destination bit "in b or d", i.e. the parity of the
            // thresholds passed.
            let past_a = u64::from(uniform >= a_cut);
            let past_b = u64::from(uniform >= ab_cut);
            let past_c = u64::from(uniform >= abc_cut);
            source = (source << 1) | past_b;
            destination = (destination << 1) | (past_a ^ past_b ^ past_c);
        }
        match &self.permutation {
            Some(permutation) => (permutation.apply(source), permutation.apply(destination)),
            None => (source, destination),
        }
    }
}

/// How [`write_rmat`] serializes edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeFormat {
    /// `src\tdst\n` in decimal.
    Text,
    /// Little-endian `u64` source then destination, 16 bytes per edge.
    Binary,
}

struct EdgeBlock {
    bytes: Vec<u8>,
    edges: u64,
    self_loops: u64,
}

/// Writes the graph of `params` to `writer` in `format` (block by block, on
/// [`worker_count`](crate::worker_count)`(params.threads, blocks)` threads)
/// and returns what was written.
pub fn write_rmat(params: &RmatParams, format: EdgeFormat, writer: impl Write) -> Result<RmatSummary> {
    let generator = RmatGenerator::new(params)?;
    let mut sink = ChunkedSink::new(writer, "R-MAT edges");
    let mut summary = RmatSummary {
        vertices: generator.vertex_count(),
        ..RmatSummary::default()
    };
    let make = |index: u64| {
        let mut block = EdgeBlock {
            bytes: Vec::with_capacity(EDGES_PER_BLOCK as usize * 16),
            edges: 0,
            self_loops: 0,
        };
        for (source, destination) in generator.block(index) {
            block.edges += 1;
            block.self_loops += u64::from(source == destination);
            match format {
                EdgeFormat::Text => {
                    push_decimal(&mut block.bytes, source);
                    block.bytes.push(b'\t');
                    push_decimal(&mut block.bytes, destination);
                    block.bytes.push(b'\n');
                }
                EdgeFormat::Binary => {
                    block.bytes.extend_from_slice(&source.to_le_bytes());
                    block.bytes.extend_from_slice(&destination.to_le_bytes());
                }
            }
        }
        block
    };
    for_each_block(params.threads, generator.block_count(), make, |_, block| {
        sink.write_block(&block.bytes)?;
        summary.records += block.edges;
        summary.self_loops += block.self_loops;
        Ok(true)
    })?;
    summary.bytes = sink.finish()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out_degrees(params: &RmatParams) -> Vec<u64> {
        let generator = RmatGenerator::new(params).unwrap();
        let mut degrees = vec![0u64; generator.vertex_count() as usize];
        for (source, destination) in generator.edges() {
            assert!(destination < generator.vertex_count());
            degrees[source as usize] += 1;
        }
        assert_eq!(degrees.iter().sum::<u64>(), generator.edge_count());
        degrees
    }

    #[test]
    fn graph500_parameters_give_a_skewed_out_degree() {
        // 4096 vertices, 65536 edges, mean out-degree 16. Vertex 0 (before
        // permutation) expects 65536 * (a + b)^12 ~ 2400 edges.
        let params = RmatParams {
            scale: 12,
            ..RmatParams::default()
        };
        let degrees = out_degrees(&params);
        let max = *degrees.iter().max().unwrap();
        assert!(max > 50 * 16, "max out-degree {max}");
        let isolated = degrees.iter().filter(|&&degree| degree == 0).count();
        assert!(isolated > 4096 / 4, "{isolated} vertices without out-edges");
    }

    #[test]
    fn uniform_parameters_give_no_skew() {
        let params = RmatParams {
            scale: 12,
            a: 0.25,
            b: 0.25,
            c: 0.25,
            ..RmatParams::default()
        };
        let degrees = out_degrees(&params);
        // Poisson(16): the maximum over 4096 vertices is about 33.
        let max = *degrees.iter().max().unwrap();
        assert!(max < 3 * 16, "max out-degree {max}");
    }

    #[test]
    fn unpermuted_hub_is_vertex_zero_and_permutation_moves_it() {
        let plain = RmatParams {
            scale: 10,
            permute: false,
            ..RmatParams::default()
        };
        let degrees = out_degrees(&plain);
        let hub = (0..degrees.len()).max_by_key(|&vertex| degrees[vertex]).unwrap();
        assert_eq!(hub, 0);
        let permuted = out_degrees(&RmatParams {
            permute: true,
            ..plain
        });
        let mut sorted_plain = degrees.clone();
        let mut sorted_permuted = permuted.clone();
        sorted_plain.sort_unstable();
        sorted_permuted.sort_unstable();
        assert_eq!(
            sorted_plain, sorted_permuted,
            "a relabelling keeps the degree multiset"
        );
        assert_ne!(permuted[0], degrees[0]);
    }

    fn generate(params: &RmatParams, format: EdgeFormat) -> (Vec<u8>, RmatSummary) {
        let mut output = Vec::new();
        let summary = write_rmat(params, format, &mut output).unwrap();
        (output, summary)
    }

    #[test]
    fn output_is_identical_for_one_and_two_threads_and_depends_on_the_seed() {
        let one = RmatParams {
            scale: 14,
            edge_factor: 8,
            threads: 1,
            ..RmatParams::default()
        };
        let (single, single_summary) = generate(&one, EdgeFormat::Binary);
        let (parallel, parallel_summary) = generate(&RmatParams { threads: 2, ..one }, EdgeFormat::Binary);
        assert!(single == parallel, "1-thread and 2-thread outputs differ");
        assert_eq!(single_summary, parallel_summary);
        assert_eq!(single_summary.records, 8 << 14);
        assert!(generate(&RmatParams { seed: 9, ..one }, EdgeFormat::Binary).0 != single);
        // 0 = every core; usize::MAX is capped (it used to panic).
        for threads in [0, usize::MAX] {
            let (other, other_summary) = generate(&RmatParams { threads, ..one }, EdgeFormat::Binary);
            assert!(other == single, "{threads} threads give other edges");
            assert_eq!(other_summary, single_summary);
        }
    }

    #[test]
    fn text_binary_and_iterator_agree() {
        let params = RmatParams {
            scale: 9,
            edge_factor: 300, // 153600 edges: three blocks, the last partial.
            ..RmatParams::default()
        };
        let edges: Vec<(u64, u64)> = RmatGenerator::new(&params).unwrap().edges().collect();
        assert_eq!(edges.len(), 153_600);
        let (binary, summary) = generate(&params, EdgeFormat::Binary);
        assert_eq!(summary.bytes, 16 * 153_600);
        let decoded: Vec<(u64, u64)> = binary
            .chunks_exact(16)
            .map(|pair| {
                (
                    u64::from_le_bytes(pair[..8].try_into().unwrap()),
                    u64::from_le_bytes(pair[8..].try_into().unwrap()),
                )
            })
            .collect();
        assert_eq!(decoded, edges);
        let (text, text_summary) = generate(&params, EdgeFormat::Text);
        let parsed: Vec<(u64, u64)> = std::str::from_utf8(&text)
            .unwrap()
            .lines()
            .map(|line| {
                let (source, destination) = line.split_once('\t').unwrap();
                (source.parse().unwrap(), destination.parse().unwrap())
            })
            .collect();
        assert_eq!(parsed, edges);
        let loops = edges
            .iter()
            .filter(|(source, destination)| source == destination)
            .count();
        assert_eq!(text_summary.self_loops, loops as u64);
        assert_eq!(text_summary.bytes, text.len() as u64);
    }

    #[test]
    fn validation_names_the_parameter_and_value() {
        let check = |params: RmatParams, wanted: &str| {
            let error = write_rmat(&params, EdgeFormat::Text, std::io::sink())
                .unwrap_err()
                .to_string();
            assert!(error.contains(wanted), "{error} does not contain {wanted}");
        };
        check(
            RmatParams {
                scale: 0,
                ..RmatParams::default()
            },
            "scale must be in 1..=48, got 0",
        );
        check(
            RmatParams {
                edge_factor: 0,
                ..RmatParams::default()
            },
            "edge_factor must be at least 1, got 0",
        );
        check(
            RmatParams {
                a: 1.5,
                ..RmatParams::default()
            },
            "probability a must be in [0, 1], got 1.5",
        );
        check(
            RmatParams {
                c: -0.1,
                ..RmatParams::default()
            },
            "probability c must be in [0, 1], got -0.1",
        );
        check(
            RmatParams {
                a: 0.6,
                b: 0.3,
                c: 0.3,
                ..RmatParams::default()
            },
            "a + b + c must be at most 1",
        );
        check(
            RmatParams {
                scale: 48,
                edge_factor: 1 << 20,
                ..RmatParams::default()
            },
            "overflows the edge count",
        );
    }
}
