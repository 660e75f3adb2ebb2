//! Exact kNN on an NVIDIA GPU: the tree copied to the device once
//! ([`GpuTree::upload`]), then batches answered by Parallel Scan and
//! Backtrack with one warp per query, or by a fused brute force, kernels
//! compiled at run time (`cuda.rs`, `kernels.cu`). The answer is the CPU's,
//! bit for bit: the kernels compute the canonical distance and the same
//! bounds, the k best are kept by (squared distance, row), and the square
//! roots are taken here, on the host, as the CPU takes them.

mod cuda;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg};
use spillway_core::{ensure, Interrupt, Result};

use crate::options::Method;
use crate::query::{Answer, AUTO_BRUTE_POINTS};
use crate::stats::QueryStats;
use crate::tree::{SsTree, Storage};

/// The most children a node may have for the GPU search: 4 per lane of a
/// warp (`SLOTS` in kernels.cu), the seed's degree.
pub const GPU_DEGREE_MAX: usize = 128;

/// Warps per block of every kernel (`WARPS` in kernels.cu): few, so that a
/// block's slot on the GPU frees soon after its slowest query ends.
const WARPS: usize = 2;

/// Queries a brute-force warp answers at once (`GROUP` in kernels.cu).
const GROUP: usize = 8;

/// The k a PSB warp keeps in registers, one entry per lane (`Lanes` in
/// kernels.cu), and the k it keeps in shared memory (`SHARED_K`); larger k
/// spill to device memory.
const LANES_K: usize = 32;
const SHARED_K: usize = 128;

/// Device memory the answer lists of one launch may take; a batch runs in
/// launches of as many queries as fit, at most [`LAUNCH_QUERIES`].
const LAUNCH_BYTES: usize = 1 << 30;
const LAUNCH_QUERIES: usize = 1 << 16;

/// Bytes of one (squared distance, row) entry of a list.
const ENTRY_BYTES: usize = 12;

/// `auto` on the GPU: PSB answers the batch's first queries (at most this
/// many) and goes on when it computed the distances of at most
/// [`AUTO_SHARE`] of the points per query; else brute force answers the
/// rest. The tree wins where it prunes, and on clustered data it prunes
/// most; where it looks at a large share of the points, brute force, whose
/// warps share each point's load between queries, is faster.
const AUTO_PROBE: usize = 256;
const AUTO_SHARE: f64 = 0.25;

/// A launch's answer on the device: k squared distances and rows per query.
type Found = (CudaSlice<f64>, CudaSlice<u32>);

/// The tree's arrays on the device, as kernels.cu's `Tree`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct TreeView {
    group_centres: u64,
    centres: u64,
    radii: u64,
    child_first: u64,
    child_count: u64,
    parent: u64,
    leaf_last: u64,
    point_count: u64,
    leaf_point_start: u64,
    points: u64,
    point_ids: u64,
    /// 0 where the tree has no boxes (above 8 dimensions).
    boxes: u64,
    dims: u32,
    leaf_node0: u32,
    leaves: u32,
    pad: u32,
}

// SAFETY: plain integers, laid out as kernels.cu's `Tree` (`repr(C)`).
#[allow(unsafe_code)]
unsafe impl DeviceRepr for TreeView {}

/// The device buffers a [`TreeView`] points into, kept alive with it.
#[derive(Debug)]
struct Buffers {
    _f64: Vec<CudaSlice<f64>>,
    _u32: Vec<CudaSlice<u32>>,
    _u64: CudaSlice<u64>,
    _f32_points: Option<CudaSlice<f32>>,
}

/// Counters a batch sums over its launches.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    queries: u64,
    nodes: u64,
    leaves: u64,
    distances: u64,
    /// PSB's warp steps, and the lanes busy in them.
    steps: u64,
    busy: u64,
    /// Seconds from the first launch to the end of the last kernel.
    kernel_s: f64,
}

/// An SS-tree's copy on GPU 0, with the kernels compiled for it. Batches
/// from several threads take turns on the device's stream.
pub struct GpuTree {
    cuda: Arc<cuda::Cuda>,
    _buffers: Buffers,
    view: TreeView,
    points: usize,
    dims: usize,
    leaves: usize,
    f64_points: bool,
    /// Whether a node may have more than 32 children (PSB's kernel for up
    /// to 4 per lane, else the one for 1).
    wide: bool,
    turn: Mutex<()>,
}

impl Drop for GpuTree {
    /// The buffers are freed by the driver in the dropping thread, which
    /// may never have used the GPU: the context is made current there first.
    fn drop(&mut self) {
        let _ = self.cuda.stream.context().bind_to_thread();
    }
}

impl fmt::Debug for GpuTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuTree")
            .field("device", &self.cuda.name)
            .field("points", &self.points)
            .field("dims", &self.dims)
            .finish_non_exhaustive()
    }
}

/// Whether a GPU can be asked for here (its driver present and a device
/// found); else `Unavailable`, saying what is missing. Cheap: nothing is
/// compiled or copied.
pub fn gpu_available() -> Result<()> {
    cuda::probe()
}

impl GpuTree {
    /// Copies `tree` to GPU 0 (compiling the kernels first, once per
    /// process).
    pub fn upload(tree: &SsTree) -> Result<GpuTree> {
        let widest = widest(tree);
        ensure!(
            widest <= GPU_DEGREE_MAX,
            InvalidArgument,
            "the GPU search takes nodes of at most {GPU_DEGREE_MAX} children (4 per lane of a warp); this tree has \
             a node of {widest} (build it with degree <= {GPU_DEGREE_MAX})"
        );
        let cuda = cuda::open()?;
        let stream = &cuda.stream;
        let copy_error = cuda::driver_error("copying the tree to the GPU");
        let mut f64s = [&tree.group_centres, &tree.centres, &tree.radii]
            .into_iter()
            .map(|v| stream.clone_htod(v.as_slice()).map_err(&copy_error))
            .collect::<Result<Vec<_>>>()?;
        let u32s = [
            &tree.child_first,
            &tree.child_count,
            &tree.parent,
            &tree.leaf_last,
            &tree.leaf_point_start,
            &tree.point_ids,
        ]
        .into_iter()
        .map(|v| stream.clone_htod(v.as_slice()).map_err(&copy_error))
        .collect::<Result<Vec<_>>>()?;
        let point_count = stream
            .clone_htod(tree.point_count.as_slice())
            .map_err(&copy_error)?;
        let (points, f32_points, f64_points) = match &tree.storage {
            Storage::F32(v) => {
                let points = stream.clone_htod(v.as_slice()).map_err(&copy_error)?;
                (address(&points, stream), Some(points), false)
            }
            Storage::F64(_) => (0, None, true),
        };
        if let Storage::F64(v) = &tree.storage {
            f64s.push(stream.clone_htod(v.as_slice()).map_err(&copy_error)?);
        }
        let boxes = if tree.boxes.is_empty() {
            0
        } else {
            f64s.push(stream.clone_htod(tree.boxes.as_slice()).map_err(&copy_error)?);
            address(f64s.last().expect("just pushed"), stream)
        };
        let view = TreeView {
            group_centres: address(&f64s[0], stream),
            centres: address(&f64s[1], stream),
            radii: address(&f64s[2], stream),
            child_first: address(&u32s[0], stream),
            child_count: address(&u32s[1], stream),
            parent: address(&u32s[2], stream),
            leaf_last: address(&u32s[3], stream),
            point_count: address(&point_count, stream),
            leaf_point_start: address(&u32s[4], stream),
            points: if f64_points {
                address(&f64s[3], stream)
            } else {
                points
            },
            point_ids: address(&u32s[5], stream),
            boxes,
            dims: tree.dims as u32,
            leaf_node0: tree.leaf_node(0),
            leaves: tree.leaves() as u32,
            pad: 0,
        };
        stream.synchronize().map_err(&copy_error)?;
        Ok(GpuTree {
            _buffers: Buffers {
                _f64: f64s,
                _u32: u32s,
                _u64: point_count,
                _f32_points: f32_points,
            },
            cuda,
            view,
            points: tree.len(),
            dims: tree.dims,
            leaves: tree.leaves(),
            f64_points,
            wide: widest > 32,
            turn: Mutex::new(()),
        })
    }

    /// The GPU's name.
    pub fn device_name(&self) -> &str {
        &self.cuda.name
    }

    /// The `k` nearest points to each query (row-major, `dims` per query,
    /// checked by the caller) into `answer`, as [`SsTree::query`] answers
    /// them, bit for bit. `method`: `Psb`, `BruteForce` or `Auto`
    /// (branch-and-bound runs on the CPU only). Stops with `Interrupted`
    /// between launches when `interrupt` is raised.
    pub(crate) fn query(
        &self,
        queries: &[f64],
        k: usize,
        method: Method,
        interrupt: &Interrupt,
        answer: &mut Answer<'_>,
    ) -> Result<()> {
        let started = Instant::now();
        ensure!(
            method != Method::BranchAndBound,
            InvalidArgument,
            "branch-and-bound (bnb) runs on the CPU only: on the GPU use psb, brute or auto"
        );
        let _turn = self.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Batches arrive on any thread (the Python module's calls each run
        // on one of their own).
        self.cuda
            .stream
            .context()
            .bind_to_thread()
            .map_err(cuda::driver_error("making the GPU current"))?;
        let mut counters = Counters::default();
        let (method, done) = match method {
            Method::Auto => self.choose(queries, k, interrupt, answer, &mut counters)?,
            chosen => (chosen, 0),
        };
        self.batch(
            &queries[done * self.dims..],
            k,
            method,
            interrupt,
            answer,
            done,
            &mut counters,
        )?;
        answer.stats = QueryStats {
            queries: counters.queries,
            k: k as u64,
            method: method.name(),
            device: "cuda",
            nodes_visited: counters.nodes,
            leaves_scanned: counters.leaves,
            distances_computed: counters.distances,
            warp_efficiency: (counters.steps > 0)
                .then(|| counters.busy as f64 / (32 * counters.steps) as f64),
            kernel_s: Some(counters.kernel_s),
            query_s: started.elapsed().as_secs_f64(),
        };
        Ok(())
    }

    /// What `auto` runs on this batch (see [`AUTO_PROBE`]), and how many of
    /// its first queries the choice answered already.
    fn choose(
        &self,
        queries: &[f64],
        k: usize,
        interrupt: &Interrupt,
        answer: &mut Answer<'_>,
        counters: &mut Counters,
    ) -> Result<(Method, usize)> {
        if self.points <= AUTO_BRUTE_POINTS || k > self.points / 8 {
            return Ok((Method::BruteForce, 0));
        }
        let probe = (queries.len() / self.dims).min(AUTO_PROBE);
        let before = counters.distances;
        self.batch(
            &queries[..probe * self.dims],
            k,
            Method::Psb,
            interrupt,
            answer,
            0,
            counters,
        )?;
        let share = (counters.distances - before) as f64 / (probe.max(1) * self.points) as f64;
        let method = if share <= AUTO_SHARE {
            Method::Psb
        } else {
            Method::BruteForce
        };
        Ok((method, probe))
    }

    /// Answers `queries` by `method` into the answer's rows from
    /// `first_row`, in launches of as many queries as fit.
    #[allow(clippy::too_many_arguments)]
    fn batch(
        &self,
        queries: &[f64],
        k: usize,
        method: Method,
        interrupt: &Interrupt,
        answer: &mut Answer<'_>,
        first_row: usize,
        counters: &mut Counters,
    ) -> Result<()> {
        let per_launch = (LAUNCH_BYTES / (k * ENTRY_BYTES)).clamp(1, LAUNCH_QUERIES);
        let mut row = first_row;
        for part in queries.chunks(per_launch * self.dims) {
            interrupt.check()?;
            let m = part.len() / self.dims;
            let found = match method {
                Method::Psb => self.psb(part, k, counters)?,
                _ => self.brute_force(part, k, counters)?,
            };
            let at = row * k..(row + m) * k;
            self.finish(&found, &mut answer.distances[at.clone()], &mut answer.indices[at])?;
            counters.queries += m as u64;
            row += m;
        }
        Ok(())
    }

    /// One PSB launch: one warp per query.
    fn psb(&self, queries: &[f64], k: usize, counters: &mut Counters) -> Result<Found> {
        let m = queries.len() / self.dims;
        let stream = &self.cuda.stream;
        let error = cuda::driver_error("running the PSB search on the GPU");
        let queries = stream.clone_htod(queries).map_err(&error)?;
        let mut out_d2 = unwritten::<f64>(stream, m * k).map_err(&error)?;
        let mut out_rows = unwritten::<u32>(stream, m * k).map_err(&error)?;
        let mut totals = stream.alloc_zeros::<u64>(5).map_err(&error)?;
        let spill = if k > SHARED_K { m * k } else { 1 };
        let mut spill_d2 = unwritten::<f64>(stream, spill).map_err(&error)?;
        let mut spill_rows = unwritten::<u32>(stream, spill).map_err(&error)?;
        let kernels = &self.cuda.kernels;
        let (m32, k32) = (m as u32, k as u32);
        let started = Instant::now();
        if k <= LANES_K {
            let kernel = match (self.f64_points, self.wide) {
                (false, false) => &kernels.psb_lanes_f32_1,
                (false, true) => &kernels.psb_lanes_f32_4,
                (true, false) => &kernels.psb_lanes_f64_1,
                (true, true) => &kernels.psb_lanes_f64_4,
            };
            let mut launch = stream.launch_builder(kernel);
            launch
                .arg(&self.view)
                .arg(&queries)
                .arg(&m32)
                .arg(&k32)
                .arg(&mut out_d2)
                .arg(&mut out_rows)
                .arg(&mut totals);
            // SAFETY: the arguments are the psb_lanes kernels' parameters,
            // in order and of their types; every buffer holds what the
            // kernel indexes (m * k answers with k <= 32, 5 totals), and
            // the view's buffers live as long as `self`.
            #[allow(unsafe_code)]
            unsafe { launch.launch(blocks(m)) }.map_err(&error)?;
        } else {
            let kernel = match (self.f64_points, self.wide) {
                (false, false) => &kernels.psb_f32_1,
                (false, true) => &kernels.psb_f32_4,
                (true, false) => &kernels.psb_f64_1,
                (true, true) => &kernels.psb_f64_4,
            };
            let mut launch = stream.launch_builder(kernel);
            launch
                .arg(&self.view)
                .arg(&queries)
                .arg(&m32)
                .arg(&k32)
                .arg(&mut out_d2)
                .arg(&mut out_rows)
                .arg(&mut spill_d2)
                .arg(&mut spill_rows)
                .arg(&mut totals);
            // SAFETY: the arguments are the psb kernels' parameters, in
            // order and of their types; every buffer holds what the kernel
            // indexes (m * k answers, m * k spill entries when k >
            // SHARED_K, 5 totals), and the view's buffers live as long as
            // `self`.
            #[allow(unsafe_code)]
            unsafe { launch.launch(blocks(m)) }.map_err(&error)?;
        }
        stream.synchronize().map_err(&error)?;
        counters.kernel_s += started.elapsed().as_secs_f64();
        let totals = stream.clone_dtoh(&totals).map_err(&error)?;
        counters.nodes += totals[0];
        counters.leaves += totals[1];
        counters.distances += totals[2];
        counters.steps += totals[3];
        counters.busy += totals[4];
        Ok((out_d2, out_rows))
    }

    /// One brute-force launch: warps over groups of queries and slices of
    /// the leaves (enough slices to fill the GPU, each with a list of k per
    /// query), and a merge of each query's slice lists when there are
    /// several.
    fn brute_force(&self, queries: &[f64], k: usize, counters: &mut Counters) -> Result<Found> {
        let m = queries.len() / self.dims;
        let stream = &self.cuda.stream;
        let error = cuda::driver_error("running the brute-force search on the GPU");
        let groups = m.div_ceil(GROUP);
        let wanted = (self.cuda.multiprocessors as usize * 32).div_ceil(groups);
        let fit = LAUNCH_BYTES / (m * k * ENTRY_BYTES);
        let slices = wanted.min(fit).min(self.leaves.div_ceil(2)).max(1);
        let queries = stream.clone_htod(queries).map_err(&error)?;
        let mut out_d2 = unwritten::<f64>(stream, m * k).map_err(&error)?;
        let mut out_rows = unwritten::<u32>(stream, m * k).map_err(&error)?;
        let mut counts = unwritten::<u32>(stream, m * slices).map_err(&error)?;
        let started = Instant::now();
        let kernel = if self.f64_points {
            &self.cuda.kernels.brute_f64
        } else {
            &self.cuda.kernels.brute_f32
        };
        let (m32, k32, slices32) = (m as u32, k as u32, slices as u32);
        if slices == 1 {
            let mut launch = stream.launch_builder(kernel);
            launch
                .arg(&self.view)
                .arg(&queries)
                .arg(&m32)
                .arg(&k32)
                .arg(&slices32)
                .arg(&mut out_d2)
                .arg(&mut out_rows)
                .arg(&mut counts);
            // SAFETY: brute_f32's / brute_f64's parameters in order and of
            // their types; with one slice the lists are the m * k answers.
            #[allow(unsafe_code)]
            unsafe { launch.launch(blocks(groups)) }.map_err(&error)?;
        } else {
            let mut lists_d2 = unwritten::<f64>(stream, m * slices * k).map_err(&error)?;
            let mut lists_rows = unwritten::<u32>(stream, m * slices * k).map_err(&error)?;
            let mut launch = stream.launch_builder(kernel);
            launch
                .arg(&self.view)
                .arg(&queries)
                .arg(&m32)
                .arg(&k32)
                .arg(&slices32)
                .arg(&mut lists_d2)
                .arg(&mut lists_rows)
                .arg(&mut counts);
            // SAFETY: as above, with m * slices lists of k.
            #[allow(unsafe_code)]
            unsafe { launch.launch(blocks(groups * slices)) }.map_err(&error)?;
            let mut merge = stream.launch_builder(&self.cuda.kernels.merge);
            merge
                .arg(&m32)
                .arg(&k32)
                .arg(&slices32)
                .arg(&lists_d2)
                .arg(&lists_rows)
                .arg(&counts)
                .arg(&mut out_d2)
                .arg(&mut out_rows);
            // SAFETY: merge's parameters in order and of their types; the
            // lists and counts are those just written, the answers m * k.
            #[allow(unsafe_code)]
            unsafe { merge.launch(blocks(m)) }.map_err(&error)?;
        }
        stream.synchronize().map_err(&error)?;
        counters.kernel_s += started.elapsed().as_secs_f64();
        counters.leaves += (m * self.leaves) as u64;
        counters.distances += (m * self.points) as u64;
        Ok((out_d2, out_rows))
    }

    /// Writes a launch's answer (`found`, k per query) into `distances` and
    /// `indices` as the user gets it: the square roots (CUDA's f64 `sqrt`
    /// is correctly rounded, as Rust's) and the rows widened, computed on
    /// the GPU and copied straight into place.
    fn finish(&self, found: &Found, distances: &mut [f64], indices: &mut [i64]) -> Result<()> {
        let stream = &self.cuda.stream;
        let error = cuda::driver_error("copying the answer from the GPU");
        let n = distances.len();
        let mut out_distances = unwritten::<f64>(stream, n).map_err(&error)?;
        let mut out_indices = unwritten::<i64>(stream, n).map_err(&error)?;
        let n64 = n as u64;
        let mut launch = stream.launch_builder(&self.cuda.kernels.finish);
        launch
            .arg(&n64)
            .arg(&found.0)
            .arg(&found.1)
            .arg(&mut out_distances)
            .arg(&mut out_indices);
        // SAFETY: finish's parameters in order and of their types; the
        // four buffers hold n values each (n = m * k of the launch).
        #[allow(unsafe_code)]
        unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }.map_err(&error)?;
        stream.memcpy_dtoh(&out_distances, distances).map_err(&error)?;
        stream.memcpy_dtoh(&out_indices, indices).map_err(&error)?;
        stream.synchronize().map_err(&error)
    }
}

/// The most children of any node of `tree`.
fn widest(tree: &SsTree) -> usize {
    tree.child_count.iter().copied().max().unwrap_or(0) as usize
}

/// Whether the GPU search takes `tree` (no node wider than
/// [`GPU_DEGREE_MAX`]).
pub(crate) fn takes(tree: &SsTree) -> bool {
    widest(tree) <= GPU_DEGREE_MAX
}

/// A launch of `warps` warps, [`WARPS`] to a block.
fn blocks(warps: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (warps.div_ceil(WARPS) as u32, 1, 1),
        block_dim: (WARPS as u32 * 32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A device buffer of `len` values that a kernel writes in full before
/// anything reads it (so not cleared first).
fn unwritten<T: DeviceRepr>(
    stream: &Arc<cudarc::driver::CudaStream>,
    len: usize,
) -> std::result::Result<CudaSlice<T>, cudarc::driver::DriverError> {
    // SAFETY: every caller's kernel writes each value before any is read
    // (the answers: k per query, n >= k; the spill lists: a query's first
    // `count`, the only ones read; the slice counts: one per (query, slice);
    // finish's outputs: every entry).
    #[allow(unsafe_code)]
    unsafe {
        stream.alloc::<T>(len.max(1))
    }
}

/// A buffer's device address (event tracking is off: nothing to wait for).
fn address<T>(buffer: &CudaSlice<T>, stream: &cudarc::driver::CudaStream) -> u64 {
    buffer.device_ptr(stream).0
}

/// `tree`'s copy on the GPU, made by its first GPU query and kept in its
/// slot while the tree lives.
pub(crate) fn copy_of(tree: &SsTree) -> Result<Arc<GpuTree>> {
    tree.gpu.get_or_make(|| GpuTree::upload(tree))
}
