//! Bad input gets a clear error naming what is wrong.

use spillway_core::{ErrorKind, Interrupt};
use spillway_knn::{BuildOptions, Method, Points, QueryOptions, SsTree};

fn message(result: spillway_core::Result<impl std::fmt::Debug>) -> String {
    let error = result.expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    error.to_string()
}

#[test]
fn points_that_cannot_be_indexed_are_refused_by_row_and_column() {
    assert!(message(Points::f64(&[], 3)).contains("empty"));
    assert!(message(Points::f64(&[1.0; 5], 2)).contains("not a whole number"));
    assert!(message(Points::f64(&[1.0; 4], 0)).contains("dimensions"));
    assert!(message(Points::f64(&[0.0, 1.0, f64::NAN, 2.0], 2)).contains("points[1, 0] is NaN"));
    assert!(message(Points::f32(&[0.0, f32::INFINITY], 1)).contains("points[1, 0] is infinite"));
    assert!(message(Points::f64(&[0.0, 0.0, 0.0, 1e151], 2)).contains("points[1, 1]"));
}

#[test]
fn bad_options_and_queries_are_refused() {
    let data: Vec<f64> = (0..40).map(f64::from).collect();
    let points = Points::f64(&data, 2).unwrap();
    let interrupt = Interrupt::new();
    for (options, named) in [
        (
            BuildOptions {
                leaf_size: 0,
                ..BuildOptions::default()
            },
            "leaf_size",
        ),
        (
            BuildOptions {
                degree: 1,
                ..BuildOptions::default()
            },
            "degree",
        ),
        (
            BuildOptions {
                threads: 100_000,
                ..BuildOptions::default()
            },
            "threads",
        ),
        (
            BuildOptions {
                kmeans_iterations: 0,
                ..BuildOptions::default()
            },
            "kmeans_iterations",
        ),
    ] {
        assert!(
            message(SsTree::build(points, &options, &interrupt)).contains(named),
            "{named}"
        );
    }
    let tree = SsTree::build(points, &BuildOptions::default(), &interrupt).unwrap();
    let options = QueryOptions::default();
    assert!(message(tree.query(&[1.0, 2.0], 0, &options, &interrupt)).contains("k must be at least 1"));
    assert!(message(tree.query(&[1.0, 2.0], 21, &options, &interrupt)).contains("more than the 20 points"));
    assert!(message(tree.query(&[1.0, 2.0, 3.0], 1, &options, &interrupt))
        .contains("not a whole number of 2-dimensional"));
    assert!(message(tree.query(&[1.0, f64::NAN], 1, &options, &interrupt)).contains("queries[0, 1] is NaN"));
    assert!(message("fastest".parse::<Method>()).contains("auto, psb, bnb or brute"));
    // No queries: an empty answer.
    assert!(tree
        .query(&[], 3, &options, &interrupt)
        .unwrap()
        .indices
        .is_empty());
}

#[test]
fn an_interrupt_stops_a_build_and_a_query() {
    let data: Vec<f64> = (0..20_000).map(|i| ((i * 31) % 1009) as f64).collect();
    let points = Points::f64(&data, 2).unwrap();
    let raised = Interrupt::new();
    raised.raise();
    let error = SsTree::build(points, &BuildOptions::default(), &raised).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Interrupted);
    let tree = SsTree::build(points, &BuildOptions::default(), &Interrupt::new()).unwrap();
    let error = tree
        .query(&data[..2000], 5, &QueryOptions::default(), &raised)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Interrupted);
}

#[test]
fn builds_are_deterministic_whatever_the_thread_count() {
    let data: Vec<f32> = (0..30_000).map(|i| ((i * 7919) % 10_007) as f32).collect();
    let points = Points::f32(&data, 3).unwrap();
    let build = |threads| {
        SsTree::build(
            points,
            &BuildOptions {
                threads,
                ..BuildOptions::default()
            },
            &Interrupt::new(),
        )
        .unwrap()
    };
    let (one, two) = (build(1), build(2));
    assert_eq!(one.stats().nodes, two.stats().nodes);
    let dir = tempfile::tempdir().unwrap();
    let fs = spillway_core::RealFs::new();
    one.save(&fs, &dir.path().join("1.sst")).unwrap();
    two.save(&fs, &dir.path().join("2.sst")).unwrap();
    let (a, b) = (
        std::fs::read(dir.path().join("1.sst")).unwrap(),
        std::fs::read(dir.path().join("2.sst")).unwrap(),
    );
    // Equal but for the tree id (bytes 16..24), the checksums it seeds and the header's.
    assert_eq!(a.len(), b.len());
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert!(differing < 100, "{differing} bytes differ");
}

#[test]
fn query_into_fills_the_callers_arrays_and_refuses_ones_of_the_wrong_length() {
    let data: Vec<f64> = (0..400).map(|i| f64::from(i * 37 % 101)).collect();
    let tree = SsTree::build(
        Points::f64(&data, 2).unwrap(),
        &BuildOptions::default(),
        &Interrupt::new(),
    )
    .unwrap();
    let queries = [3.0, 4.0, 50.0, 60.0, 99.0, 0.0];
    let (k, options, interrupt) = (7, QueryOptions::default(), Interrupt::new());
    let expected = tree.query(&queries, k, &options, &interrupt).unwrap();
    assert_eq!(tree.answer_len(&queries, k).unwrap(), 3 * k);
    let (mut distances, mut indices) = (vec![-1.0; 3 * k], vec![-1; 3 * k]);
    let stats = tree
        .query_into(&queries, k, &options, &interrupt, &mut distances, &mut indices)
        .unwrap();
    assert_eq!((distances, indices), (expected.distances, expected.indices));
    assert_eq!(stats.queries, 3);
    let (mut short, mut right) = (vec![0.0; 3 * k - 1], vec![0; 3 * k]);
    let refused = message(tree.query_into(&queries, k, &options, &interrupt, &mut short, &mut right));
    assert!(
        refused.contains("hold 20 and 21 entries") && refused.contains("need 21"),
        "{refused}"
    );
    assert!(message(tree.answer_len(&queries, 201)).contains("k = 201"));
}
