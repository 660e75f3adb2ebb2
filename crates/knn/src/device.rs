//! Where a batch of queries runs: this machine's cores (`search.rs`) or
//! the GPU (`gpu/`), by `QueryOptions::device`.

use spillway_core::{ensure, ErrorKind, Interrupt, Result};

use crate::gpu;
use crate::options::{Device, QueryOptions};
use crate::query::{check_batch, Answer, Neighbours};
use crate::search;
use crate::stats::QueryStats;
use crate::tree::SsTree;

impl SsTree {
    /// The `k` nearest points to each query: `queries` is row-major,
    /// [`dims`](Self::dims) coordinates per query. Queries are split between
    /// the option's threads, or answered on the GPU (`options.device`: the
    /// tree is copied there on first use and kept); stops with
    /// `Interrupted` when `interrupt` is raised.
    pub fn query(
        &self,
        queries: &[f64],
        k: usize,
        options: &QueryOptions,
        interrupt: &Interrupt,
    ) -> Result<Neighbours> {
        let len = self.answer_len(queries, k)?;
        let (mut distances, mut indices) = (vec![0.0; len], vec![0; len]);
        let stats = self.query_into(queries, k, options, interrupt, &mut distances, &mut indices)?;
        Ok(Neighbours {
            k,
            distances,
            indices,
            stats,
        })
    }

    /// Entries in the answer to `queries` at `k` (`k` per query), once the
    /// batch is checked: the length [`query_into`](Self::query_into) wants.
    pub fn answer_len(&self, queries: &[f64], k: usize) -> Result<usize> {
        let m = check_batch(self.len(), self.dims, queries, k)?;
        m.checked_mul(k).ok_or_else(|| {
            spillway_core::Error::ResourcesExhausted(format!(
                "an answer of {m} queries at k = {k} is too large"
            ))
        })
    }

    /// As [`query`](Self::query), into the caller's arrays (each of
    /// [`answer_len`](Self::answer_len) entries, row-major): a binding that
    /// owns the memory it hands on saves a copy of the answer. Returns what
    /// the batch did.
    pub fn query_into(
        &self,
        queries: &[f64],
        k: usize,
        options: &QueryOptions,
        interrupt: &Interrupt,
        distances: &mut [f64],
        indices: &mut [i64],
    ) -> Result<QueryStats> {
        let len = self.answer_len(queries, k)?;
        ensure!(
            distances.len() == len && indices.len() == len,
            InvalidArgument,
            "the answer's arrays hold {} and {} entries; {} queries at k = {k} need {len} each",
            distances.len(),
            indices.len(),
            len / k
        );
        let mut answer = Answer {
            distances,
            indices,
            stats: QueryStats::default(),
        };
        let on_cpu = |answer: &mut Answer<'_>| search::run(self, queries, k, options, interrupt, answer);
        match options.device {
            Device::Cpu => on_cpu(&mut answer),
            Device::Cuda => gpu::copy_of(self)?.query(queries, k, options.method, interrupt, &mut answer),
            // The GPU where one can be used and it takes this tree; else here.
            Device::Auto if !gpu::takes(self) => on_cpu(&mut answer),
            Device::Auto => match gpu::gpu_available().and_then(|()| gpu::copy_of(self)) {
                Ok(gpu) => gpu.query(queries, k, options.method, interrupt, &mut answer),
                Err(error) if error.kind() == ErrorKind::Unavailable => on_cpu(&mut answer),
                Err(error) => Err(error),
            },
        }?;
        Ok(answer.stats)
    }
}
