//! Every method, build and thread count returns exactly the reference
//! answer (the float64 brute force), distances and rows bit for bit.

use proptest::prelude::*;
use spillway_core::Interrupt;
use spillway_knn::{reference, Build, BuildOptions, Method, Points, QueryOptions, SsTree};

const METHODS: [Method; 4] = [
    Method::Psb,
    Method::BranchAndBound,
    Method::BruteForce,
    Method::Auto,
];

/// Points of one of several shapes: uniform, a grid of integers (mass
/// ties), clusters, all identical, a far offset with tiny noise.
fn coordinates(shape: u8, n: usize, dims: usize, seed: u64) -> Vec<f64> {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n * dims)
        .map(|i| match shape {
            0 => next() * 100.0,
            1 => (next() * 4.0).floor(),
            2 => ((i / dims) % 3) as f64 * 1000.0 + next(),
            3 => 7.25,
            _ => 1e6 + next() * 1e-3,
        })
        .collect()
}

fn check_all(points: Points<'_>, queries: &[f64], k: usize, options: &BuildOptions) {
    let interrupt = Interrupt::new();
    let tree = SsTree::build(points, options, &interrupt).unwrap();
    tree.check_invariants().unwrap();
    let expected = reference::knn(points, queries, k).unwrap();
    for method in METHODS {
        for threads in [1, 2] {
            let found = tree
                .query(
                    queries,
                    k,
                    &QueryOptions {
                        method,
                        threads,
                        ..QueryOptions::default()
                    },
                    &interrupt,
                )
                .unwrap();
            assert_eq!(
                found.indices, expected.indices,
                "{method:?}, {threads} threads, {options:?}"
            );
            assert_eq!(
                found.distances, expected.distances,
                "{method:?}, {threads} threads"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_method_equals_the_reference(
        shape in 0u8..5,
        n in 1usize..300,
        dims in 1usize..9,
        k_share in 0.0f64..1.0,
        leaf_size in 1usize..9,
        degree in 2usize..6,
        hilbert in any::<bool>(),
        single in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let data = coordinates(shape, n, dims, seed);
        let queries = coordinates(if shape == 3 { 3 } else { 0 }, 7, dims, seed ^ 1);
        let k = 1 + ((n - 1) as f64 * k_share * k_share) as usize;
        let options = BuildOptions {
            leaf_size,
            degree,
            build: if hilbert { Build::Hilbert } else { Build::KMeans },
            seed,
            ..BuildOptions::default()
        };
        if single {
            let narrow: Vec<f32> = data.iter().map(|&x| x as f32).collect();
            check_all(Points::f32(&narrow, dims).unwrap(), &queries, k, &options);
        } else {
            check_all(Points::f64(&data, dims).unwrap(), &queries, k, &options);
        }
    }
}

#[test]
fn larger_trees_in_more_dimensions_with_default_fan_out() {
    for (dims, shape, k) in [(2, 2, 10), (16, 0, 1), (64, 2, 100), (128, 0, 7)] {
        let data = coordinates(shape, 6000, dims, dims as u64);
        let queries = coordinates(0, 70, dims, 99);
        for build in [Build::KMeans, Build::Hilbert] {
            let options = BuildOptions {
                build,
                ..BuildOptions::default()
            };
            check_all(Points::f64(&data, dims).unwrap(), &queries, k, &options);
        }
    }
}

#[test]
fn queries_at_the_points_themselves_find_them_first() {
    let data = coordinates(0, 3000, 3, 5);
    let points = Points::f64(&data, 3).unwrap();
    let tree = SsTree::build(points, &BuildOptions::default(), &Interrupt::new()).unwrap();
    let queries = &data[..300];
    let found = tree
        .query(
            queries,
            1,
            &QueryOptions {
                method: Method::Psb,
                threads: 2,
                ..QueryOptions::default()
            },
            &Interrupt::new(),
        )
        .unwrap();
    assert_eq!(found.indices, (0..100).collect::<Vec<i64>>());
    assert!(found.distances.iter().all(|&d| d == 0.0));
    assert!(found.stats.nodes_visited > 0 && found.stats.leaves_scanned >= 100);
}

#[test]
fn brute_force_filter_keeps_near_ties_that_f32_arithmetic_misorders() {
    // f32 points a few ulps apart, queries between them at finer than f32
    // resolution: in f32 the candidates tie or swap, in f64 they do not.
    let ulp = (-14.0f64).exp2();
    let mut data: Vec<f32> = Vec::new();
    for i in 0..3000 {
        let base = 1000.0 + (i % 40) as f64 * ulp;
        data.extend_from_slice(&[base as f32, (500.0 + (i / 40) as f64 * 3.0 * ulp) as f32]);
        // Constant coordinates: eight dimensions, where the filter runs.
        data.extend_from_slice(&[7.0; 6]);
    }
    let queries: Vec<f64> = (0..64)
        .flat_map(|i| {
            let mut query = [7.0 + ulp / 3.0; 8];
            query[0] = 1000.0 + (i as f64 * 0.37 % 40.0) * ulp;
            query[1] = 500.0 + (i as f64 * 1.3 % 75.0) * 3.0 * ulp;
            query
        })
        .collect();
    let points = Points::f32(&data, 8).unwrap();
    let tree = SsTree::build(points, &BuildOptions::default(), &Interrupt::new()).unwrap();
    for k in [1, 3, 40] {
        let expected = reference::knn(points, &queries, k).unwrap();
        for method in METHODS {
            let options = QueryOptions {
                method,
                threads: 2,
                ..QueryOptions::default()
            };
            let found = tree.query(&queries, k, &options, &Interrupt::new()).unwrap();
            assert_eq!(found.indices, expected.indices, "k = {k}, {method:?}");
            assert_eq!(found.distances, expected.distances, "k = {k}, {method:?}");
        }
    }
}
