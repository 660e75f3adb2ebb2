//! Bottom-up construction: points grouped into leaves, leaves into nodes,
//! level after level up to one root; then the layout top-down (so that leaf
//! ids are depth-first order whatever order the groups were made in, the
//! seed's listing's renumbering), then the spheres bottom-up.

use std::time::Instant;

use spillway_core::{worker_threads, Interrupt, Result};

use crate::distance::{d2, EPS};
use crate::hilbert;
use crate::kmeans::{self, Settings};
use crate::options::{Build, BuildOptions};
use crate::parallel;
use crate::points::{Coordinate, Points};
use crate::ritter::{self, Member};
use crate::tree::{SsTree, Storage};

/// Nodes whose spheres one thread task computes.
const SPHERE_CHUNK: usize = 256;

impl SsTree {
    /// Builds the tree bottom-up over `points` (see [`BuildOptions`]);
    /// stops with `Interrupted` when `interrupt` is raised.
    pub fn build(points: Points<'_>, options: &BuildOptions, interrupt: &Interrupt) -> Result<SsTree> {
        options.validate()?;
        let started = Instant::now();
        let mut tree = build(points, options, interrupt)?;
        tree.build_s = started.elapsed().as_secs_f64();
        Ok(tree)
    }

    /// Checks every structural and geometric invariant (DESIGN.md,
    /// "Invariants"); an error names the node and what is wrong.
    pub fn check_invariants(&self) -> Result<()> {
        check(self)
            .map_err(|what| spillway_core::Error::Internal(format!("SS-tree invariant broken: {what}")))
    }
}

fn build(points: Points<'_>, options: &BuildOptions, interrupt: &Interrupt) -> Result<SsTree> {
    match points {
        Points::F32 { data, dims } => build_typed(data, dims, options, interrupt, Storage::F32),
        Points::F64 { data, dims } => build_typed(data, dims, options, interrupt, Storage::F64),
    }
}

fn build_typed<T: Coordinate>(
    data: &[T],
    dims: usize,
    options: &BuildOptions,
    interrupt: &Interrupt,
    storage: impl FnOnce(Vec<T>) -> Storage,
) -> Result<SsTree> {
    let threads = worker_threads(options.threads);
    let settings = Settings {
        seed: options.seed,
        iterations: options.kmeans_iterations,
        threads,
        interrupt,
    };
    let group = |items: &[f64], cap: usize| -> Result<Vec<Vec<u32>>> {
        match options.build {
            Build::KMeans => kmeans::groups(items, dims, cap, &settings),
            // Upper levels of the Hilbert build: consecutive runs of the
            // level below, which is in curve order already.
            Build::Hilbert => Ok(runs(items.len() / dims, cap)),
        }
    };
    // Level by level, bottom-up: leaves first, then each grouping of the
    // level below, until one group remains.
    let leaves = match options.build {
        Build::KMeans => kmeans::groups(data, dims, options.leaf_size, &settings)?,
        Build::Hilbert => {
            let keys = hilbert::keys(data.len() / dims, dims, hilbert::KEY_BITS, |i, j| {
                data[i * dims + j].to_f64()
            });
            let order = hilbert::order(&keys);
            order.chunks(options.leaf_size).map(<[u32]>::to_vec).collect()
        }
    };
    let mut centres = group_means(&leaves, dims, |i| (&data[i as usize * dims..][..dims], 1.0));
    let mut weights: Vec<f64> = leaves.iter().map(|g| g.len() as f64).collect();
    let mut uppers: Vec<Vec<Vec<u32>>> = Vec::new();
    while weights.len() > 1 {
        interrupt.check()?;
        let groups = group(&centres, options.degree)?;
        let next_centres = group_means(&groups, dims, |i| {
            (&centres[i as usize * dims..][..dims], weights[i as usize])
        });
        weights = groups
            .iter()
            .map(|g| g.iter().map(|&i| weights[i as usize]).sum())
            .collect();
        centres = next_centres;
        uppers.push(groups);
    }
    let mut tree = lay_out(data, dims, &leaves, &uppers, storage);
    tree.leaf_size = options.leaf_size;
    tree.degree = options.degree;
    tree.build = options.build;
    compute_spheres(&mut tree, data, threads, interrupt)?;
    tree.derive();
    debug_assert_eq!(check(&tree), Ok(()));
    Ok(tree)
}

/// `0..count` in consecutive runs of at most `cap`.
fn runs(count: usize, cap: usize) -> Vec<Vec<u32>> {
    (0..count as u32)
        .collect::<Vec<_>>()
        .chunks(cap)
        .map(<[u32]>::to_vec)
        .collect()
}

/// The weighted mean of each group's members (what the next level groups by).
fn group_means<'a, T: Coordinate>(
    groups: &[Vec<u32>],
    dims: usize,
    member: impl Fn(u32) -> (&'a [T], f64),
) -> Vec<f64> {
    let mut means = vec![0.0; groups.len() * dims];
    for (mean, group) in means.chunks_exact_mut(dims).zip(groups) {
        let mut total = 0.0;
        for &i in group {
            let (centre, weight) = member(i);
            for (m, x) in mean.iter_mut().zip(centre) {
                *m += x.to_f64() * weight;
            }
            total += weight;
        }
        mean.iter_mut().for_each(|m| *m /= total);
    }
    means
}

/// Numbers the nodes top-down, level by level, each level listing the
/// children of the level above in their parents' order; stores the points
/// in the resulting leaf order. Spheres are left for [`compute_spheres`].
fn lay_out<T: Coordinate>(
    data: &[T],
    dims: usize,
    leaves: &[Vec<u32>],
    uppers: &[Vec<Vec<u32>>],
    storage: impl FnOnce(Vec<T>) -> Storage,
) -> SsTree {
    // The order of each level's groups, root level first.
    let mut orders: Vec<Vec<u32>> = vec![vec![0]];
    for grouping in uppers.iter().rev() {
        let above = orders.last().unwrap();
        let below = above
            .iter()
            .flat_map(|&g| grouping[g as usize].iter().copied())
            .collect();
        orders.push(below);
    }
    let levels = orders.len();
    let mut level_start = vec![0u32];
    for order in &orders {
        level_start.push(level_start.last().unwrap() + order.len() as u32);
    }
    let nodes = *level_start.last().unwrap() as usize;
    let mut child_first = vec![0u32; nodes];
    let mut child_count = vec![0u32; nodes];
    let mut parent = vec![u32::MAX; nodes];
    for level in 0..levels - 1 {
        let grouping = &uppers[uppers.len() - 1 - level];
        let mut next_child = level_start[level + 1];
        for (at, &g) in orders[level].iter().enumerate() {
            let node = level_start[level] + at as u32;
            let count = grouping[g as usize].len() as u32;
            child_first[node as usize] = next_child;
            child_count[node as usize] = count;
            for child in next_child..next_child + count {
                parent[child as usize] = node;
            }
            next_child += count;
        }
    }
    let leaf_order = orders.last().unwrap();
    let mut coordinates = Vec::with_capacity(data.len());
    let mut point_ids = Vec::with_capacity(data.len() / dims);
    let mut leaf_point_start = vec![0u32];
    for &g in leaf_order {
        let members = &leaves[g as usize];
        for dim in 0..dims {
            coordinates.extend(members.iter().map(|&row| data[row as usize * dims + dim]));
        }
        point_ids.extend_from_slice(members);
        leaf_point_start.push(point_ids.len() as u32);
    }
    // Leaf ranges and point counts, bottom-up.
    let first_leaf = level_start[levels - 1];
    let mut leaf_first = vec![0u32; nodes];
    let mut leaf_last = vec![0u32; nodes];
    let mut point_count = vec![0u64; nodes];
    for node in (0..nodes).rev() {
        if node as u32 >= first_leaf {
            let leaf = node - first_leaf as usize;
            leaf_first[node] = leaf as u32;
            leaf_last[node] = leaf as u32;
            point_count[node] = u64::from(leaf_point_start[leaf + 1] - leaf_point_start[leaf]);
        } else {
            let (first, count) = (child_first[node] as usize, child_count[node] as usize);
            leaf_first[node] = leaf_first[first];
            leaf_last[node] = leaf_last[first + count - 1];
            point_count[node] = point_count[first..first + count].iter().sum();
        }
    }
    SsTree {
        dims,
        leaf_size: 0,
        degree: 0,
        build: Build::KMeans,
        build_s: 0.0,
        level_start,
        child_first,
        child_count,
        parent,
        leaf_first,
        leaf_last,
        point_count,
        centres: vec![0.0; nodes * dims],
        group_centres: Vec::new(),
        max_magnitude: 0.0,
        boxes: Vec::new(),
        radii: vec![0.0; nodes],
        leaf_point_start,
        point_ids,
        storage: storage(coordinates),
        gpu: Default::default(),
    }
}

/// Every node's sphere, bottom-up: leaves around their points, then each
/// level around its children's spheres.
fn compute_spheres<T: Coordinate>(
    tree: &mut SsTree,
    data: &[T],
    threads: usize,
    interrupt: &Interrupt,
) -> Result<()> {
    let dims = tree.dims;
    let levels = tree.levels();
    let first_leaf = tree.level_start[levels - 1] as usize;
    let mut centres = std::mem::take(&mut tree.centres);
    let mut radii = std::mem::take(&mut tree.radii);
    {
        let (upper_centres, leaf_centres) = centres.split_at_mut(first_leaf * dims);
        let leaf_radii = &mut radii[first_leaf..];
        let tree = &*tree;
        leaf_spheres(tree, data, leaf_centres, leaf_radii, threads, interrupt)?;
        let mut upper_centres = upper_centres;
        for level in (0..levels - 1).rev() {
            let (start, end) = (
                tree.level_start[level] as usize,
                tree.level_start[level + 1] as usize,
            );
            let (above, below) = upper_centres.split_at_mut(end * dims);
            let below: &[f64] = if level + 1 == levels - 1 {
                &*leaf_centres
            } else {
                &*below
            };
            let below_start = end;
            let (radii_above, radii_below) = radii.split_at_mut(end);
            let chunks = above[start * dims..]
                .chunks_mut(SPHERE_CHUNK * dims)
                .zip(radii_above[start..].chunks_mut(SPHERE_CHUNK))
                .enumerate();
            parallel::for_each(
                chunks,
                threads,
                interrupt,
                || vec![0.0; dims],
                |scratch, (chunk, (centres, radii))| {
                    for (at, (centre, radius)) in
                        centres.chunks_exact_mut(dims).zip(radii.iter_mut()).enumerate()
                    {
                        let node = start + chunk * SPHERE_CHUNK + at;
                        let first = tree.child_first[node] as usize - below_start;
                        let member = |i: usize| Member {
                            centre: &below[(first + i) * dims..][..dims],
                            radius: radii_below[first + i],
                            weight: tree.point_count[below_start + first + i] as f64,
                        };
                        *radius = ritter::enclose(tree.child_count[node] as usize, member, centre, scratch);
                    }
                    Ok(())
                },
            )?;
            upper_centres = above;
        }
    }
    tree.centres = centres;
    tree.radii = radii;
    Ok(())
}

/// The leaves' spheres, from the input rows (row-major) of their points.
fn leaf_spheres<T: Coordinate>(
    tree: &SsTree,
    data: &[T],
    centres: &mut [f64],
    radii: &mut [f64],
    threads: usize,
    interrupt: &Interrupt,
) -> Result<()> {
    let dims = tree.dims;
    let chunks = centres
        .chunks_mut(SPHERE_CHUNK * dims)
        .zip(radii.chunks_mut(SPHERE_CHUNK))
        .enumerate();
    parallel::for_each(
        chunks,
        threads,
        interrupt,
        || vec![0.0; dims],
        |scratch, (chunk, (centres, radii))| {
            for (at, (centre, radius)) in centres.chunks_exact_mut(dims).zip(radii.iter_mut()).enumerate() {
                let leaf = chunk * SPHERE_CHUNK + at;
                let start = tree.leaf_point_start[leaf] as usize;
                let count = tree.leaf_point_start[leaf + 1] as usize - start;
                let member = |i: usize| {
                    let row = tree.point_ids[start + i] as usize;
                    Member {
                        centre: &data[row * dims..][..dims],
                        radius: 0.0,
                        weight: 1.0,
                    }
                };
                *radius = ritter::enclose(count, member, centre, scratch);
            }
            Ok(())
        },
    )?;
    Ok(())
}

/// Checks the tree's invariants (DESIGN.md, "Invariants"); the error says
/// which and where.
pub fn check(tree: &SsTree) -> Result<(), String> {
    match &tree.storage {
        Storage::F32(points) => check_typed(tree, points),
        Storage::F64(points) => check_typed(tree, points),
    }
}

fn check_typed<T: Coordinate>(tree: &SsTree, points: &[T]) -> Result<(), String> {
    let dims = tree.dims;
    let nodes = tree.nodes();
    let n = tree.point_ids.len();
    let fail = |what: String| Err(what);
    if dims == 0 || points.len() != n * dims || n == 0 {
        return fail(format!(
            "{} coordinates for {n} points of {dims} dimensions",
            points.len()
        ));
    }
    // Point ids: a permutation of the rows.
    let mut seen = vec![false; n];
    for &row in &tree.point_ids {
        match seen.get_mut(row as usize) {
            Some(slot) if !*slot => *slot = true,
            _ => return fail(format!("point row {row} is out of range or stored twice")),
        }
    }
    // Levels: one root, non-empty levels, per-node arrays of one length.
    let levels = tree.levels();
    let ls = &tree.level_start;
    if levels == 0
        || ls[0] != 0
        || ls[1] != 1
        || ls.windows(2).any(|w| w[0] >= w[1])
        || ls[levels] as usize != nodes
    {
        return fail(format!(
            "level starts {ls:?} do not number {nodes} nodes from one root"
        ));
    }
    for (name, len) in [
        ("child_first", tree.child_first.len()),
        ("child_count", tree.child_count.len()),
        ("parent", tree.parent.len()),
        ("leaf_first", tree.leaf_first.len()),
        ("leaf_last", tree.leaf_last.len()),
        ("point_count", tree.point_count.len()),
        ("centres", tree.centres.len() / dims),
    ] {
        if len != nodes {
            return fail(format!("{name} has {len} entries for {nodes} nodes"));
        }
    }
    let first_leaf = ls[levels - 1] as usize;
    let leaves = nodes - first_leaf;
    let lps = &tree.leaf_point_start;
    if lps.len() != leaves + 1 || lps[0] != 0 || lps[leaves] as usize != n {
        return fail(format!(
            "leaf point starts do not cover {n} points in {leaves} leaves"
        ));
    }
    if tree.parent[0] != u32::MAX {
        return fail("the root has a parent".into());
    }
    // Children contiguous, level by level, with inverse parent links.
    for level in 0..levels - 1 {
        let mut next = ls[level + 1];
        for node in ls[level]..ls[level + 1] {
            let (first, count) = (tree.child_first[node as usize], tree.child_count[node as usize]);
            if first != next || count == 0 || count as usize > tree.degree {
                return fail(format!(
                    "node {node}: children {first}+{count}, expected to start at {next}, 1 to {} of them",
                    tree.degree
                ));
            }
            for child in first..first + count {
                if tree.parent[child as usize] != node {
                    return fail(format!(
                        "node {child}: parent {} is not {node}",
                        tree.parent[child as usize]
                    ));
                }
            }
            next += count;
        }
        if next != ls[level + 2] {
            return fail(format!("level {} has nodes no parent names", level + 1));
        }
    }
    // Leaves: sizes, ranges, counts.
    for leaf in 0..leaves {
        let node = first_leaf + leaf;
        let size = lps[leaf + 1].saturating_sub(lps[leaf]) as usize;
        if size == 0 || size > tree.leaf_size || tree.child_count[node] != 0 {
            return fail(format!(
                "leaf {leaf} holds {size} points (1 to {} allowed)",
                tree.leaf_size
            ));
        }
        if tree.leaf_first[node] as usize != leaf
            || tree.leaf_last[node] as usize != leaf
            || tree.point_count[node] != size as u64
        {
            return fail(format!("leaf {leaf}: wrong leaf range or point count"));
        }
    }
    for node in (0..first_leaf).rev() {
        let first = tree.child_first[node] as usize;
        let children = first..first + tree.child_count[node] as usize;
        let contiguous = children
            .clone()
            .skip(1)
            .all(|c| tree.leaf_first[c] == tree.leaf_last[c - 1] + 1);
        if !contiguous
            || tree.leaf_first[node] != tree.leaf_first[first]
            || tree.leaf_last[node] != tree.leaf_last[children.end - 1]
            || tree.point_count[node] != children.clone().map(|c| tree.point_count[c]).sum::<u64>()
        {
            return fail(format!(
                "node {node}: leaf range or point count disagrees with its children"
            ));
        }
    }
    // Geometry: every point inside its leaf's sphere, every child sphere
    // inside its parent's, with the margin the searches assume.
    let margin = 1.0 + EPS / 2.0;
    for node in 0..nodes {
        let (centre, radius) = (tree.centre(node as u32), tree.radii[node]);
        if !(centre.iter().all(|x| x.is_finite()) && radius.is_finite() && radius >= 0.0) {
            return fail(format!("node {node}: sphere is not finite"));
        }
        if node >= first_leaf {
            let leaf = node - first_leaf;
            let (start, end) = (lps[leaf] as usize, lps[leaf + 1] as usize);
            let block = &points[start * dims..end * dims];
            for p in 0..end - start {
                let point = (0..dims).map(|j| block[j * (end - start) + p].to_f64());
                let reach = point.zip(centre).fold(0.0, |acc, (x, c)| acc + (x - c) * (x - c));
                if reach.sqrt() * margin > radius {
                    return fail(format!(
                        "leaf {leaf}: point row {} lies outside its sphere",
                        tree.point_ids[start + p]
                    ));
                }
            }
        } else {
            let first = tree.child_first[node];
            for child in first..first + tree.child_count[node] {
                if d2(tree.centre(child), centre).sqrt() * margin + tree.radii[child as usize] > radius {
                    return fail(format!(
                        "node {node}: child {child}'s sphere is not inside its own"
                    ));
                }
            }
        }
    }
    if !tree.boxes.is_empty() {
        check_boxes(tree, points)?;
    }
    Ok(())
}

/// Every point inside its leaf's box, every child's box inside its
/// parent's (boxes are derived: present after a build or a load).
fn check_boxes<T: Coordinate>(tree: &SsTree, points: &[T]) -> Result<(), String> {
    let dims = tree.dims;
    let node_box = |node: usize| -> Vec<f64> {
        let (first, count) = match tree.parent[node] {
            u32::MAX => (0, 1),
            parent => (
                tree.child_first[parent as usize] as usize,
                tree.child_count[parent as usize] as usize,
            ),
        };
        (0..2 * dims)
            .map(|j| tree.boxes[first * 2 * dims + j * count + node - first])
            .collect()
    };
    let first_leaf = tree.leaf_node(0) as usize;
    for node in 0..tree.nodes() {
        let outer = node_box(node);
        let (low, high) = outer.split_at(dims);
        let inside = |j: usize, x: f64| low[j] <= x && x <= high[j];
        if node >= first_leaf {
            let (start, end) = tree.leaf_points(node - first_leaf);
            for (j, column) in points[start * dims..end * dims]
                .chunks_exact(end - start)
                .enumerate()
            {
                if !column.iter().all(|x| inside(j, x.to_f64())) {
                    return Err(format!(
                        "leaf {}: a point lies outside its box",
                        node - first_leaf
                    ));
                }
            }
        } else {
            let first = tree.child_first[node] as usize;
            for child in first..first + tree.child_count[node] as usize {
                let inner = node_box(child);
                if !(0..dims).all(|j| inside(j, inner[j]) && inside(j, inner[dims + j])) {
                    return Err(format!("node {node}: child {child}'s box is not inside its own"));
                }
            }
        }
    }
    Ok(())
}
