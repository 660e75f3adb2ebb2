// The GPU searches, compiled at run time by NVRTC (see gpu/cuda.rs) with
// fused multiply-adds off, so that every distance is the canonical one:
// acc = 0; for j in 0..d: t = q_j - x_j; acc = acc + t * t, in double, in
// dimension order. The bounds are the CPU's (distance.rs), with the same
// constants and the same correctly rounded square roots, so a search here
// takes the same path as the CPU's and returns the same answer.
//
// One warp answers one query (PSB) or a group of queries over a slice of
// the leaves (brute force). A warp's k best live in a sorted list: for
// PSB with k <= 32 in registers, one entry per lane (`Lanes`), else in
// shared memory for k <= SHARED_K, else in global memory (`List`); every
// lane runs the same control flow, and lane-dependent choices are made by
// votes.

typedef unsigned int u32;
typedef unsigned long long u64;

#define FULL 0xffffffffu
#define WARPS 2
#define SHARED_K 128
// PSB is compiled for SLOTS children per lane, 1 or 4: nodes of up to 32 or
// 128 children (the host picks by the tree's widest node and refuses wider
// ones); one slot keeps a warp's registers few, so more warps run at once.
#define EPS (1.0 / 4294967296.0)
#define ABS 1.0e-150
#define INF (__longlong_as_double(0x7ff0000000000000LL))

// The tree's arrays on the device (gpu/mod.rs `TreeView`, field by field).
struct Tree {
    const double* group_centres;  // per sibling group, dimension-major
    const double* centres;        // per node, row-major
    const double* radii;
    const u32* child_first;
    const u32* child_count;
    const u32* parent;
    const u32* leaf_last;
    const u64* point_count;
    const u32* leaf_point_start;  // leaves + 1
    const void* points;           // leaf blocks, dimension-major
    const u32* point_ids;
    const double* boxes;          // per sibling group, lows then highs; null above 8 dimensions
    u32 dims;
    u32 leaf_node0;               // node id of leaf 0
    u32 leaves;
    u32 pad;
};

// Counters summed over a launch: internal nodes evaluated, leaves scanned,
// distances computed, warp steps, and lanes busy in those steps.
struct Counters {
    u64 nodes, leaves, distances, steps, busy;
};

// A sorted list of k entries in memory (shared or global), every lane
// seeing all of it.
struct List {
    double* d;
    u32* row;
    u32 k;
    u32 count;
};

// A sorted list of k <= 32 entries in registers: lane i holds entry i (past
// the count, anything), and every lane a copy of the k-th.
struct Lanes {
    double d;
    u32 row;
    double kth_d;
    u32 kth_row;
    u32 k;
    u32 count;
};

__device__ __forceinline__ bool before(double da, u32 ra, double db, u32 rb) {
    return da < db || (da == db && ra < rb);
}

__device__ __forceinline__ double kth(const List& l) {
    return l.count == l.k ? l.d[l.k - 1] : INF;
}

__device__ __forceinline__ double kth(const Lanes& l) {
    return l.count == l.k ? l.kth_d : INF;
}

__device__ __forceinline__ double pruning_distance(double kth_d2) {
    return sqrt(kth_d2) * (1.0 + EPS) + ABS;
}

template <typename L>
__device__ __forceinline__ double pruning(const L& l, double initial) {
    return l.count == l.k ? fmin(initial, pruning_distance(kth(l))) : initial;
}

__device__ __forceinline__ double min_distance_lower(double centre_d2, double radius) {
    return fmax(sqrt(centre_d2) * (1.0 - EPS) - radius - ABS, 0.0);
}

__device__ __forceinline__ double box_distance_lower(double gap2) {
    return fmax(sqrt(gap2) * (1.0 - EPS) - ABS, 0.0);
}

// The squared gap between the query and child i of the sibling group from
// `first` (of `count`), as lane_box_gap2 computes it (distance.rs).
__device__ __forceinline__ double box_gap2(const Tree& t, u32 first, u32 count, u32 i, const double* q) {
    const double* block = t.boxes + (u64)first * 2 * t.dims;
    double acc = 0.0;
    for (u32 j = 0; j < t.dims; j++) {
        double below = block[(u64)j * count + i] - q[j];
        double above = q[j] - block[(u64)(t.dims + j) * count + i];
        double gap = below > above ? below : above;
        gap = gap > 0.0 ? gap : 0.0;
        acc += gap * gap;
    }
    return acc;
}

__device__ __forceinline__ double max_distance_upper(double centre_d2, double radius) {
    return sqrt(centre_d2) * (1.0 + EPS) + radius + ABS;
}

// Offers (d, row), the same in every lane, to the warp's sorted list;
// returns whether it entered. The lanes count the entries before it by a
// vote, then move the entries after it up by one, 32 at a time from the top.
__device__ bool offer(List& l, double d, u32 row, u32 lane) {
    if (l.count == l.k && !before(d, row, l.d[l.k - 1], l.row[l.k - 1])) {
        return false;
    }
    u32 pos = 0;
    for (u32 base = 0; base < l.count; base += 32) {
        u32 i = base + lane;
        bool b = i < l.count && before(l.d[i], l.row[i], d, row);
        pos += __popc(__ballot_sync(FULL, b));
    }
    int last = (int)(l.count < l.k ? l.count : l.k - 1);
    for (int top = last; top > (int)pos; top -= 32) {
        int i = top - 1 - (int)lane;
        bool moves = i >= (int)pos;
        double vd = 0.0;
        u32 vr = 0;
        if (moves) {
            vd = l.d[i];
            vr = l.row[i];
        }
        __syncwarp();
        if (moves) {
            l.d[i + 1] = vd;
            l.row[i + 1] = vr;
        }
        __syncwarp();
    }
    if (lane == 0) {
        l.d[pos] = d;
        l.row[pos] = row;
    }
    __syncwarp();
    if (l.count < l.k) {
        l.count++;
    }
    return true;
}

// As above, on a list in registers: a vote finds the position, the entries
// from there move up one lane, and the k-th is broadcast again.
__device__ bool offer(Lanes& l, double d, u32 row, u32 lane) {
    if (l.count == l.k && !before(d, row, l.kth_d, l.kth_row)) {
        return false;
    }
    u32 pos = __popc(__ballot_sync(FULL, lane < l.count && before(l.d, l.row, d, row)));
    double up_d = __shfl_up_sync(FULL, l.d, 1);
    u32 up_row = __shfl_up_sync(FULL, l.row, 1);
    if (lane == pos) {
        l.d = d;
        l.row = row;
    } else if (lane > pos) {
        l.d = up_d;
        l.row = up_row;
    }
    if (l.count < l.k) {
        l.count++;
    }
    l.kth_d = __shfl_sync(FULL, l.d, l.k - 1);
    l.kth_row = __shfl_sync(FULL, l.row, l.k - 1);
    return true;
}

// Offers each lane's candidate (acc and row, if `candidate`) in lane order.
template <typename L>
__device__ __forceinline__ bool offer_lanes(L& l, bool candidate, double acc, u32 row, u32 lane) {
    bool changed = false;
    u32 mask = __ballot_sync(FULL, candidate);
    while (mask) {
        u32 src = __ffs(mask) - 1;
        mask &= mask - 1;
        double d = __shfl_sync(FULL, acc, src);
        u32 r = __shfl_sync(FULL, row, src);
        changed |= offer(l, d, r, lane);
    }
    return changed;
}

// Row i of `rows` in the lanes that offer a candidate (one transaction for
// the warp, and none when no lane does).
__device__ __forceinline__ u32 row_if(bool candidate, const u32* rows, u32 i) {
    return candidate ? rows[i] : 0;
}

// Scans one leaf block (stored points start..end) into the list; returns
// whether any point entered.
template <typename T, typename L>
__device__ bool scan_leaf(const Tree& t, u32 leaf, const double* q, L& l, u32 lane, Counters& c) {
    u32 start = t.leaf_point_start[leaf];
    u32 count = t.leaf_point_start[leaf + 1] - start;
    const T* block = (const T*)t.points + (u64)start * t.dims;
    bool changed = false;
    c.leaves++;
    c.distances += count;
    for (u32 base = 0; base < count; base += 32) {
        u32 i = base + lane;
        bool valid = i < count;
        double acc = 0.0;
        if (valid) {
            for (u32 j = 0; j < t.dims; j++) {
                double x = (double)block[(u64)j * count + i];
                double s = q[j] - x;
                acc += s * s;
            }
        }
        c.steps++;
        c.busy += __popc(__ballot_sync(FULL, valid));
        bool candidate = valid && acc <= kth(l);
        changed |= offer_lanes(l, candidate, acc, row_if(candidate, t.point_ids + start, i), lane);
    }
    return changed;
}

// Evaluates the children of `node`: their lower bounds into `lower` (slot s
// of lane i is child 32 s + i; infinity past the last child) and, while the
// list holds fewer than k, the k-coverage bound into `initial` (the smallest
// upper bound whose children hold k points).
template <int SLOTS, typename L>
__device__ void evaluate_children(const Tree& t, u32 node, const double* q, const L& l,
                                  double& initial, double lower[SLOTS], u32 lane, Counters& c) {
    c.nodes++;
    u32 first = t.child_first[node];
    u32 count = t.child_count[node];
    const double* group = t.group_centres + (u64)first * t.dims;
    double centre_d2[SLOTS];
    double radius[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; s++) {
        u32 i = s * 32 + lane;
        centre_d2[s] = 0.0;
        radius[s] = 0.0;
        if (s * 32 < count) {
            if (i < count) {
                double acc = 0.0;
                for (u32 j = 0; j < t.dims; j++) {
                    double x = group[(u64)j * count + i];
                    double d = q[j] - x;
                    acc += d * d;
                }
                centre_d2[s] = acc;
                radius[s] = t.radii[first + i];
            }
            c.steps++;
            c.busy += __popc(__ballot_sync(FULL, i < count));
        }
    }
    if (l.count < l.k) {
        double upper[SLOTS];
        u64 held[SLOTS];
        u64 points[SLOTS];
#pragma unroll
        for (int s = 0; s < SLOTS; s++) {
            u32 i = s * 32 + lane;
            bool valid = i < count;
            upper[s] = valid ? max_distance_upper(centre_d2[s], radius[s]) : INF;
            points[s] = valid ? t.point_count[first + i] : 0;
            held[s] = 0;
        }
        // held[s]: points below the children that come before child i or
        // are i, in the order (upper bound, child), as a sort would list them.
#pragma unroll
        for (int s2 = 0; s2 < SLOTS; s2++) {
            if (s2 * 32 < count) {
                for (u32 src = 0; src < 32; src++) {
                    double u = __shfl_sync(FULL, upper[s2], src);
                    u64 p = __shfl_sync(FULL, points[s2], src);
                    u32 j = s2 * 32 + src;
#pragma unroll
                    for (int s = 0; s < SLOTS; s++) {
                        u32 i = s * 32 + lane;
                        if (u < upper[s] || (u == upper[s] && j <= i)) {
                            held[s] += p;
                        }
                    }
                }
            }
        }
        double best = INF;
#pragma unroll
        for (int s = 0; s < SLOTS; s++) {
            if (s * 32 + lane < count && held[s] >= l.k) {
                best = fmin(best, upper[s]);
            }
        }
        for (int offset = 16; offset > 0; offset /= 2) {
            best = fmin(best, __shfl_xor_sync(FULL, best, offset));
        }
        if (best < INF) {
            initial = fmin(initial, best * (1.0 + EPS) + ABS);
        }
    }
#pragma unroll
    for (int s = 0; s < SLOTS; s++) {
        u32 i = s * 32 + lane;
        lower[s] = i < count ? min_distance_lower(centre_d2[s], radius[s]) : INF;
        if (t.boxes != nullptr && i < count) {
            lower[s] = fmax(lower[s], box_distance_lower(box_gap2(t, first, count, i, q)));
        }
    }
}

// The child of smallest lower bound (the first such), the same in every lane.
template <int SLOTS>
__device__ u32 nearest_child(const double lower[SLOTS], u32 lane) {
    double best = lower[0];
    u32 at = lane;
#pragma unroll
    for (int s = 1; s < SLOTS; s++) {
        if (lower[s] < best) {
            best = lower[s];
            at = s * 32 + lane;
        }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        double other = __shfl_xor_sync(FULL, best, offset);
        u32 other_at = __shfl_xor_sync(FULL, at, offset);
        if (other < best || (other == best && other_at < at)) {
            best = other;
            at = other_at;
        }
    }
    return at;
}

// The first child still to visit: one whose subtree holds a leaf after
// `visited` and whose lower bound is within `tau`; the child count if none.
template <int SLOTS>
__device__ u32 pick_child(const Tree& t, u32 first, u32 count, const double lower[SLOTS],
                          long long visited, double tau, u32 lane) {
#pragma unroll
    for (int s = 0; s < SLOTS; s++) {
        u32 i = s * 32 + lane;
        bool open = i < count && (long long)t.leaf_last[first + i] > visited && lower[s] <= tau;
        u32 votes = __ballot_sync(FULL, open);
        if (votes) {
            return s * 32 + __ffs(votes) - 1;
        }
    }
    return count;
}

// The lower bound of one node other than the root, as evaluate_children
// gives it among its siblings.
__device__ double lower_bound(const Tree& t, u32 node, const double* q) {
    const double* centre = t.centres + (u64)node * t.dims;
    double acc = 0.0;
    for (u32 j = 0; j < t.dims; j++) {
        double d = q[j] - centre[j];
        acc += d * d;
    }
    double sphere = min_distance_lower(acc, t.radii[node]);
    if (t.boxes == nullptr) {
        return sphere;
    }
    u32 parent = t.parent[node];
    u32 first = t.child_first[parent];
    return fmax(sphere, box_distance_lower(box_gap2(t, first, t.child_count[parent], node - first, q)));
}

// Parallel Scan and Backtrack for one query (psb.rs has the algorithm and
// the fixes to the listing; this is the same loop, step for step).
template <typename T, int SLOTS, typename L>
__device__ void psb(const Tree& t, const double* q, L& l, u32 lane, Counters& c) {
    double lower[SLOTS];
    double initial = INF;
    // The initial bound: down to the nearest leaf; its k-th distance if it
    // holds k points, which stay in the list (the leaf is not scanned again).
    u32 node = 0;
    while (t.child_count[node] != 0) {
        evaluate_children<SLOTS>(t, node, q, l, initial, lower, lane, c);
        node = t.child_first[node] + nearest_child<SLOTS>(lower, lane);
    }
    u32 leaf = node - t.leaf_node0;
    u32 scanned = 0xffffffffu;
    if (t.leaf_point_start[leaf + 1] - t.leaf_point_start[leaf] >= l.k) {
        scan_leaf<T>(t, leaf, q, l, lane, c);
        initial = fmin(initial, pruning_distance(kth(l)));
        scanned = leaf;
    }
    long long last_leaf = (long long)t.leaves - 1;
    long long visited = -1;
    node = 0;
    for (;;) {
        bool out = false;
        while (t.child_count[node] != 0) {
            evaluate_children<SLOTS>(t, node, q, l, initial, lower, lane, c);
            u32 first = t.child_first[node];
            u32 count = t.child_count[node];
            u32 i = pick_child<SLOTS>(t, first, count, lower, visited, pruning(l, initial), lane);
            if (i < count) {
                node = first + i;
                continue;
            }
            long long below = (long long)t.leaf_last[node];
            visited = visited > below ? visited : below;
            if (node == 0) {
                out = true;
                break;
            }
            node = t.parent[node];
        }
        if (out) {
            return;
        }
        leaf = node - t.leaf_node0;
        for (;;) {
            bool changed = leaf == scanned || scan_leaf<T>(t, leaf, q, l, lane, c);
            visited = (long long)leaf;
            if (!(changed && visited < last_leaf)) {
                break;
            }
            if (lower_bound(t, t.leaf_node0 + leaf + 1, q) > pruning(l, initial)) {
                break;
            }
            leaf++;
        }
        if (visited == last_leaf) {
            return;
        }
        node = t.parent[t.leaf_node0 + leaf];
    }
}

// The list of warp `warp` for the query at row `query`: shared memory when
// k fits, else that query's rows of the spill arrays.
__device__ __forceinline__ List warp_list(double (*sd)[SHARED_K], u32 (*sr)[SHARED_K], u32 warp, u32 k,
                                          double* spill_d, u32* spill_r, u64 query) {
    List l;
    if (k <= SHARED_K) {
        l.d = sd[warp];
        l.row = sr[warp];
    } else {
        l.d = spill_d + query * k;
        l.row = spill_r + query * k;
    }
    l.k = k;
    l.count = 0;
    return l;
}

__device__ void add_counters(u64* totals, const Counters& c, u32 lane) {
    if (lane == 0) {
        atomicAdd(&totals[0], c.nodes);
        atomicAdd(&totals[1], c.leaves);
        atomicAdd(&totals[2], c.distances);
        atomicAdd(&totals[3], c.steps);
        atomicAdd(&totals[4], c.busy);
    }
}

// One warp per query, its list in registers (k <= 32): the k nearest as
// squared distances and rows, nearest first, into row `query` of out_d2 /
// out_rows.
template <typename T, int SLOTS>
__device__ void psb_lanes_kernel(Tree t, const double* queries, u32 m, u32 k, double* out_d2, u32* out_rows,
                                 u64* totals) {
    u32 lane = threadIdx.x % 32;
    u64 query = (u64)blockIdx.x * WARPS + threadIdx.x / 32;
    if (query >= m) {
        return;
    }
    Lanes l = {INF, 0, INF, 0, k, 0};
    Counters c = {0, 0, 0, 0, 0};
    psb<T, SLOTS>(t, queries + query * t.dims, l, lane, c);
    if (lane < k) {
        out_d2[query * k + lane] = l.d;
        out_rows[query * k + lane] = l.row;
    }
    add_counters(totals, c, lane);
}

// As above for any k, the list in shared memory, or in the spill arrays
// past SHARED_K.
template <typename T, int SLOTS>
__device__ void psb_kernel(Tree t, const double* queries, u32 m, u32 k, double* out_d2, u32* out_rows,
                           double* spill_d, u32* spill_r, u64* totals) {
    __shared__ double sd[WARPS][SHARED_K];
    __shared__ u32 sr[WARPS][SHARED_K];
    u32 warp = threadIdx.x / 32;
    u32 lane = threadIdx.x % 32;
    u64 query = (u64)blockIdx.x * WARPS + warp;
    if (query >= m) {
        return;
    }
    List l = warp_list(sd, sr, warp, k, spill_d, spill_r, query);
    Counters c = {0, 0, 0, 0, 0};
    psb<T, SLOTS>(t, queries + query * t.dims, l, lane, c);
    for (u32 i = lane; i < k; i += 32) {
        out_d2[query * k + i] = l.d[i];
        out_rows[query * k + i] = l.row[i];
    }
    add_counters(totals, c, lane);
}

// Queries a brute-force warp answers at once: each point's coordinates are
// loaded once for all of them.
#define GROUP 8

// Brute force: warp w answers the queries of group w % groups over the
// leaves of slice w / groups, into that (query, slice)'s list of k in
// lists_d / lists_r (entries past the count it writes into counts are
// unused). With one slice the lists are the answer.
template <typename T>
__device__ void brute_kernel(Tree t, const double* queries, u32 m, u32 k, u32 slices, double* lists_d,
                             u32* lists_r, u32* counts) {
    u32 lane = threadIdx.x % 32;
    u64 w = (u64)blockIdx.x * WARPS + threadIdx.x / 32;
    u32 groups = (m + GROUP - 1) / GROUP;
    if (w >= (u64)groups * slices) {
        return;
    }
    u32 group = (u32)(w % groups);
    u32 slice = (u32)(w / groups);
    u32 q0 = group * GROUP;
    u32 nq = m - q0 < GROUP ? m - q0 : GROUP;
    u32 leaf_lo = (u32)((u64)t.leaves * slice / slices);
    u32 leaf_hi = (u32)((u64)t.leaves * (slice + 1) / slices);
    List lists[GROUP];
    const double* q[GROUP];
#pragma unroll
    for (int b = 0; b < GROUP; b++) {
        u64 at = ((u64)(q0 + b) * slices + slice) * k;
        lists[b].d = lists_d + at;
        lists[b].row = lists_r + at;
        lists[b].k = k;
        lists[b].count = 0;
        q[b] = queries + (u64)(b < nq ? q0 + b : q0) * t.dims;
    }
    for (u32 leaf = leaf_lo; leaf < leaf_hi; leaf++) {
        u32 start = t.leaf_point_start[leaf];
        u32 count = t.leaf_point_start[leaf + 1] - start;
        const T* block = (const T*)t.points + (u64)start * t.dims;
        for (u32 base = 0; base < count; base += 32) {
            u32 i = base + lane;
            bool valid = i < count;
            double acc[GROUP];
#pragma unroll
            for (int b = 0; b < GROUP; b++) {
                acc[b] = 0.0;
            }
            if (valid) {
                for (u32 j = 0; j < t.dims; j++) {
                    double x = (double)block[(u64)j * count + i];
#pragma unroll
                    for (int b = 0; b < GROUP; b++) {
                        double s = q[b][j] - x;
                        acc[b] += s * s;
                    }
                }
            }
#pragma unroll
            for (int b = 0; b < GROUP; b++) {
                if (b < nq) {
                    bool candidate = valid && acc[b] <= kth(lists[b]);
                    offer_lanes(lists[b], candidate, acc[b], row_if(candidate, t.point_ids + start, i), lane);
                }
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int b = 0; b < GROUP; b++) {
            if (b < nq) {
                counts[(u64)(q0 + b) * slices + slice] = lists[b].count;
            }
        }
    }
}

// Merges each query's slice lists into its answer: one warp per query.
__device__ void merge_kernel_body(u32 m, u32 k, u32 slices, const double* lists_d, const u32* lists_r,
                                  const u32* counts, double* out_d2, u32* out_rows) {
    __shared__ double sd[WARPS][SHARED_K];
    __shared__ u32 sr[WARPS][SHARED_K];
    u32 warp = threadIdx.x / 32;
    u32 lane = threadIdx.x % 32;
    u64 query = (u64)blockIdx.x * WARPS + warp;
    if (query >= m) {
        return;
    }
    List l = warp_list(sd, sr, warp, k, out_d2, out_rows, query);
    for (u32 slice = 0; slice < slices; slice++) {
        u64 list = query * slices + slice;
        u32 count = counts[list];
        const double* d = lists_d + list * k;
        const u32* r = lists_r + list * k;
        for (u32 base = 0; base < count; base += 32) {
            u32 i = base + lane;
            bool valid = i < count;
            double acc = valid ? d[i] : INF;
            bool candidate = valid && acc <= kth(l);
            offer_lanes(l, candidate, acc, row_if(candidate, r, i), lane);
        }
    }
    if (k <= SHARED_K) {
        for (u32 i = lane; i < k; i += 32) {
            out_d2[query * k + i] = l.d[i];
            out_rows[query * k + i] = l.row[i];
        }
    }
}

#define PSB_KERNEL(NAME, T, SLOTS)                                                                     \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                              \
        NAME(Tree t, const double* queries, u32 m, u32 k, double* out_d2, u32* out_rows, double* spill_d, \
             u32* spill_r, u64* totals) {                                                                 \
        psb_kernel<T, SLOTS>(t, queries, m, k, out_d2, out_rows, spill_d, spill_r, totals);               \
    }

PSB_KERNEL(psb_f32_1, float, 1)
PSB_KERNEL(psb_f32_4, float, 4)
PSB_KERNEL(psb_f64_1, double, 1)
PSB_KERNEL(psb_f64_4, double, 4)

#define PSB_LANES_KERNEL(NAME, T, SLOTS)                                                                   \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                              \
        NAME(Tree t, const double* queries, u32 m, u32 k, double* out_d2, u32* out_rows, u64* totals) {   \
        psb_lanes_kernel<T, SLOTS>(t, queries, m, k, out_d2, out_rows, totals);                           \
    }

PSB_LANES_KERNEL(psb_lanes_f32_1, float, 1)
PSB_LANES_KERNEL(psb_lanes_f32_4, float, 4)
PSB_LANES_KERNEL(psb_lanes_f64_1, double, 1)
PSB_LANES_KERNEL(psb_lanes_f64_4, double, 4)

extern "C" __global__ void __launch_bounds__(WARPS * 32) brute_f32(Tree t, const double* queries, u32 m, u32 k,
                                                                    u32 slices, double* lists_d, u32* lists_r,
                                                                    u32* counts) {
    brute_kernel<float>(t, queries, m, k, slices, lists_d, lists_r, counts);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32) brute_f64(Tree t, const double* queries, u32 m, u32 k,
                                                                    u32 slices, double* lists_d, u32* lists_r,
                                                                    u32* counts) {
    brute_kernel<double>(t, queries, m, k, slices, lists_d, lists_r, counts);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32) merge(u32 m, u32 k, u32 slices, const double* lists_d,
                                                                const u32* lists_r, const u32* counts,
                                                                double* out_d2, u32* out_rows) {
    merge_kernel_body(m, k, slices, lists_d, lists_r, counts, out_d2, out_rows);
}

// The answer as the user gets it, n entries: distances (CUDA's f64 sqrt is
// correctly rounded, as the CPU's) and rows widened to 64 bits.
extern "C" __global__ void finish(u64 n, const double* d2, const u32* rows, double* distances,
                                  long long* indices) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        distances[i] = sqrt(d2[i]);
        indices[i] = (long long)rows[i];
    }
}
