//! Where a batch of queries runs: this machine's cores (`search.rs`) or
//! the GPU (`gpu/`), by `QueryOptions::device`.

use spillway_core::{ErrorKind, Interrupt, Result};

use crate::gpu;
use crate::options::{Device, QueryOptions};
use crate::query::Neighbours;
use crate::search;
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
        match options.device {
            Device::Cpu => search::run(self, queries, k, options, interrupt),
            Device::Cuda => gpu::copy_of(self)?.query(queries, k, options.method, interrupt),
            // The GPU where one can be used and it takes this tree; else here.
            Device::Auto if !gpu::takes(self) => search::run(self, queries, k, options, interrupt),
            Device::Auto => match gpu::gpu_available().and_then(|()| gpu::copy_of(self)) {
                Ok(gpu) => gpu.query(queries, k, options.method, interrupt),
                Err(error) if error.kind() == ErrorKind::Unavailable => {
                    search::run(self, queries, k, options, interrupt)
                }
                Err(error) => Err(error),
            },
        }
    }
}
