//! The GPU path through the Rust API. Where no GPU can be used (CI), asking
//! for one is an `Unavailable` error that says why, `Device::Auto` answers
//! on the CPU, and a tree too wide for a warp is refused before any GPU is
//! looked for. Where one can, every GPU search equals the reference answer
//! bit for bit (the Python tests, run on the GPU machine by
//! scripts/gpu-check, cover the GPU in depth).

use spillway_core::{ErrorKind, Interrupt};
use spillway_knn::{
    gpu_available, reference, Build, BuildOptions, Device, GpuTree, Method, Points, QueryOptions, SsTree,
};

fn coordinates(n: usize, dims: usize) -> Vec<f64> {
    (0..n * dims)
        .map(|i| ((i * 7919 + i / dims * 104729) % 10007) as f64 / 10.0)
        .collect()
}

fn options(method: Method, device: Device) -> QueryOptions {
    QueryOptions {
        method,
        device,
        threads: 2,
    }
}

#[test]
fn the_gpu_answers_exactly_or_says_why_it_cannot() {
    let data = coordinates(5_000, 3);
    let points = Points::f64(&data, 3).unwrap();
    let tree = SsTree::build(points, &BuildOptions::default(), &Interrupt::new()).unwrap();
    let queries = &data[..3 * 40];
    let expected = reference::knn(points, queries, 7).unwrap();
    let interrupt = Interrupt::new();
    let auto = tree
        .query(queries, 7, &options(Method::Psb, Device::Auto), &interrupt)
        .unwrap();
    assert_eq!(auto.indices, expected.indices);
    assert_eq!(auto.distances, expected.distances);
    match gpu_available() {
        Err(why) => {
            assert_eq!(why.kind(), ErrorKind::Unavailable, "{why}");
            assert!(
                why.to_string().contains("CUDA") || why.to_string().contains("GPU"),
                "{why}"
            );
            assert_eq!(auto.stats.device, "cpu");
            let error = tree
                .query(queries, 7, &options(Method::Psb, Device::Cuda), &interrupt)
                .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
            assert_eq!(GpuTree::upload(&tree).unwrap_err().kind(), ErrorKind::Unavailable);
        }
        Ok(()) => {
            assert_eq!(auto.stats.device, "cuda");
            for method in [Method::Psb, Method::BruteForce, Method::Auto] {
                let found = tree
                    .query(queries, 7, &options(method, Device::Cuda), &interrupt)
                    .unwrap();
                assert_eq!(found.indices, expected.indices, "{method:?}");
                assert_eq!(found.distances, expected.distances, "{method:?}");
            }
            let error = tree
                .query(
                    queries,
                    7,
                    &options(Method::BranchAndBound, Device::Cuda),
                    &interrupt,
                )
                .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        }
    }
}

#[test]
fn a_tree_too_wide_for_a_warp_is_refused_first() {
    let data = coordinates(3_000, 2);
    let options = BuildOptions {
        leaf_size: 4,
        degree: 300,
        build: Build::Hilbert,
        ..BuildOptions::default()
    };
    let tree = SsTree::build(Points::f64(&data, 2).unwrap(), &options, &Interrupt::new()).unwrap();
    let error = GpuTree::upload(&tree).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert!(error.to_string().contains("at most 128 children"), "{error}");
}
