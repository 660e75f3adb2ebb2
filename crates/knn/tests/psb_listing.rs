//! The fixes to the seed's Algorithm 5 (PSB), one case each, shown by what
//! the search reports: every leaf scanned at most once and in order, the
//! search ending at the root, duplicates and ties kept.

use spillway_core::Interrupt;
use spillway_knn::{reference, Build, BuildOptions, Method, Points, QueryOptions, SsTree};

fn build(data: &[f64], dims: usize, leaf_size: usize, degree: usize) -> SsTree {
    let options = BuildOptions {
        leaf_size,
        degree,
        build: Build::Hilbert,
        ..BuildOptions::default()
    };
    SsTree::build(Points::f64(data, dims).unwrap(), &options, &Interrupt::new()).unwrap()
}

fn psb(tree: &SsTree, query: &[f64], k: usize) -> spillway_knn::Neighbours {
    tree.query(
        query,
        k,
        &QueryOptions {
            method: Method::Psb,
            threads: 1,
            ..QueryOptions::default()
        },
        &Interrupt::new(),
    )
    .unwrap()
}

#[test]
fn every_leaf_is_scanned_at_most_once_even_when_all_must_be() {
    // k = n: nothing can be pruned, so PSB must walk every leaf exactly
    // once and stop (the listing's `visited = 0` start revisits, its
    // backtracking from the root never ends, its last leaf has a sibling).
    let data: Vec<f64> = (0..200).map(|i| ((i * 37) % 101) as f64).collect();
    let tree = build(&data, 2, 4, 3);
    let leaves = u64::from(tree.stats().leaves);
    let found = psb(&tree, &[50.0, 50.0], 100);
    assert_eq!(found.stats.leaves_scanned, leaves);
    // Each point once: the initial descent scans no leaf of fewer than k points.
    assert_eq!(found.stats.distances_computed, 100);
    let expected = reference::knn(Points::f64(&data, 2).unwrap(), &[50.0, 50.0], 100).unwrap();
    assert_eq!(found.indices, expected.indices);
}

#[test]
fn duplicates_at_the_pruning_distance_are_kept() {
    // Forty copies of one point and one far point: with `<` instead of
    // `<=`, ties at the k-th distance are pruned and rows are lost.
    let mut data = vec![3.0; 80];
    data.extend_from_slice(&[1000.0, 1000.0]);
    let tree = build(&data, 2, 2, 2);
    for k in [1, 7, 40, 41] {
        let found = psb(&tree, &[3.0, 4.0], k);
        let expected = reference::knn(Points::f64(&data, 2).unwrap(), &[3.0, 4.0], k).unwrap();
        assert_eq!(found.indices, expected.indices, "k = {k}");
    }
}

#[test]
fn the_initial_bound_holds_for_k_above_one_leaf() {
    // k larger than a leaf: the listing's k-th MINMAXDIST bound would
    // prune true neighbours (it is only valid for k = 1).
    let data: Vec<f64> = (0..600)
        .map(|i| (i / 2) as f64 + if i % 2 == 0 { 0.0 } else { 0.5 })
        .collect();
    let tree = build(&data, 2, 3, 2);
    for k in [1, 2, 3, 4, 9, 50] {
        let found = psb(&tree, &[150.2, 150.7], k);
        let expected = reference::knn(Points::f64(&data, 2).unwrap(), &[150.2, 150.7], k).unwrap();
        assert_eq!(found.indices, expected.indices, "k = {k}");
    }
}

#[test]
fn a_tree_of_one_leaf_is_scanned_and_left() {
    let data = [1.0, 2.0, 3.0];
    let tree = build(&data, 1, 8, 2);
    assert_eq!(tree.stats().levels, 1);
    let found = psb(&tree, &[2.2], 2);
    assert_eq!(found.indices, [1, 2]);
    assert_eq!(found.stats.nodes_visited, 0);
}

#[test]
fn pruning_visits_few_leaves_of_a_large_tree() {
    // The point of the tree: a 1-NN query in a 20,000-point grid looks at
    // a few dozen leaves at most, not all 1,250.
    let data: Vec<f64> = (0..20_000)
        .flat_map(|i| [(i % 200) as f64, (i / 200) as f64])
        .collect();
    let tree = build(&data, 2, 16, 8);
    let found = psb(&tree, &[77.3, 41.6], 1);
    assert_eq!(found.indices, [42 * 200 + 77]);
    assert!(found.stats.leaves_scanned <= 40, "{:?}", found.stats);
}
