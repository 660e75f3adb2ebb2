//! `spillway knn` as a user runs it: build an index from a .npy file, query
//! it into .npy files (compared bit for bit with the reference brute
//! force), stats, verify; bad input and a damaged index reported with the
//! file named and exit status 1.

use std::path::{Path, PathBuf};

use serde_json::Value;
use spillway_knn::npy::{self, NpyData};
use spillway_knn::{reference, Points};

mod common;

use common::{failure, path_str, scratch_files, spillway, success};

/// Deterministic coordinates in `[0, scale)`: an xorshift generator.
fn coordinates(count: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 * scale
        })
        .collect()
}

fn write(path: &Path, bytes: Vec<u8>) {
    std::fs::write(path, bytes).unwrap();
}

fn read_f64(path: &Path) -> (usize, usize, Vec<f64>) {
    let array = npy::read(path).unwrap();
    match array.data {
        NpyData::F64(values) => (array.rows, array.cols, values),
        other => panic!("{} holds {other:?}, not float64", path.display()),
    }
}

fn read_i64(path: &Path) -> (usize, usize, Vec<i64>) {
    let array = npy::read(path).unwrap();
    match array.data {
        NpyData::I64(values) => (array.rows, array.cols, values),
        other => panic!("{} holds {other:?}, not int64", path.display()),
    }
}

fn bits(values: &[f64]) -> Vec<u64> {
    values.iter().map(|value| value.to_bits()).collect()
}

struct Files {
    _directory: tempfile::TempDir,
    root: PathBuf,
}

impl Files {
    fn new() -> Files {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path().to_path_buf();
        Files {
            _directory: directory,
            root,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

#[test]
fn every_build_and_method_answers_as_the_reference_does() {
    let files = Files::new();
    let (n, dims, m, k) = (3_000, 3, 40, 7);
    // Points on a coarse grid, so that many distances tie: ties go by row.
    let points: Vec<f64> = coordinates(n * dims, 1, 20.0).iter().map(|x| x.floor()).collect();
    let queries: Vec<f32> = coordinates(m * dims, 2, 20.0).iter().map(|&x| x as f32).collect();
    let points_file = files.path("points.npy");
    let queries_file = files.path("queries.npy");
    write(&points_file, npy::encode_f64(n, dims, &points));
    write(&queries_file, npy::encode_f32(m, dims, &queries));
    let widened: Vec<f64> = queries.iter().map(|&x| f64::from(x)).collect();
    let expected = reference::knn(Points::f64(&points, dims).unwrap(), &widened, k).unwrap();

    for build in ["kmeans", "hilbert"] {
        let index = files.path(&format!("{build}.sst"));
        let stats: Value = serde_json::from_str(&success(&[
            "knn",
            "build",
            "--points",
            path_str(&points_file),
            "--index",
            path_str(&index),
            "--build",
            build,
            "--leaf-size",
            "16",
            "--degree",
            "4",
            "--json",
        ]))
        .unwrap();
        assert_eq!(stats["points"], n as u64, "{stats}");
        assert_eq!(stats["dims"], dims as u64, "{stats}");
        assert_eq!(stats["dtype"], "f64", "{stats}");
        assert_eq!(stats["build"], build, "{stats}");
        assert_eq!(stats["leaf_size"], 16, "{stats}");
        assert!(stats["leaves"].as_u64().unwrap() >= (n / 16) as u64, "{stats}");
        assert!(stats["levels"].as_u64().unwrap() >= 2, "{stats}");

        for method in ["auto", "psb", "bnb", "brute"] {
            let distances = files.path(&format!("{build}-{method}-d.npy"));
            let indices = files.path(&format!("{build}-{method}-i.npy"));
            let report: Value = serde_json::from_str(&success(&[
                "knn",
                "query",
                "--index",
                path_str(&index),
                "--queries",
                path_str(&queries_file),
                "--k",
                &k.to_string(),
                "--method",
                method,
                "--threads",
                "2",
                "--distances",
                path_str(&distances),
                "--indices",
                path_str(&indices),
                "--json",
            ]))
            .unwrap();
            assert_eq!(report["queries"], m as u64, "{report}");
            assert_eq!(report["k"], k as u64, "{report}");
            if method != "auto" {
                assert_eq!(report["method"], method, "{report}");
            }
            for field in ["nodes_visited", "leaves_scanned", "distances_computed"] {
                assert!(report[field].is_u64(), "{field}: {report}");
            }
            assert!(report["query_s"].as_f64().unwrap() >= 0.0, "{report}");

            let (rows, cols, found) = read_f64(&distances);
            assert_eq!((rows, cols), (m, k));
            assert_eq!(bits(&found), bits(&expected.distances), "{build} {method}");
            let (rows, cols, found) = read_i64(&indices);
            assert_eq!((rows, cols), (m, k));
            assert_eq!(found, expected.indices, "{build} {method}");
        }
        let listing = scratch_files(&files.root);
        assert!(listing.is_empty(), "scratch files left: {listing:?}");
    }
}

#[test]
fn neighbours_print_as_lines_and_stats_and_verify_describe_the_index() {
    let files = Files::new();
    let (n, dims) = (500, 2);
    let points: Vec<f32> = coordinates(n * dims, 3, 1.0).iter().map(|&x| x as f32).collect();
    let points_file = files.path("points.npy");
    write(&points_file, npy::encode_f32(n, dims, &points));
    let index = files.path("points.sst");
    let built = success(&[
        "knn",
        "build",
        "--points",
        path_str(&points_file),
        "--index",
        path_str(&index),
    ]);
    assert!(
        built.contains("points.sst") && built.contains("500 points"),
        "{built}"
    );

    // The first two points as queries: each is its own nearest neighbour.
    let queries_file = files.path("queries.npy");
    write(&queries_file, npy::encode_f32(2, dims, &points[..2 * dims]));
    let output = spillway(&[
        "knn",
        "query",
        "--index",
        path_str(&index),
        "--queries",
        path_str(&queries_file),
        "--k",
        "3",
        "--method",
        "psb",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Vec<String>> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| line.split('\t').map(str::to_string).collect())
        .collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    let widened: Vec<f64> = points[..2 * dims].iter().map(|&x| f64::from(x)).collect();
    let expected = reference::knn(Points::f32(&points, dims).unwrap(), &widened, 3).unwrap();
    for (at, line) in lines.iter().enumerate() {
        assert_eq!(line[0], (at / 3).to_string(), "{line:?}");
        assert_eq!(line[1], (at % 3).to_string(), "{line:?}");
        assert_eq!(line[2], expected.indices[at].to_string(), "{line:?}");
        assert_eq!(
            line[3].parse::<f64>().unwrap().to_bits(),
            expected.distances[at].to_bits(),
            "{line:?}"
        );
    }
    assert_eq!(lines[0][2], "0");
    assert_eq!(lines[3][2], "1");
    let summary = String::from_utf8(output.stderr).unwrap();
    assert!(
        summary.contains("2 queries") && summary.contains("psb"),
        "{summary}"
    );

    let stats: Value =
        serde_json::from_str(&success(&["knn", "stats", "--index", path_str(&index), "--json"])).unwrap();
    assert_eq!(stats["points"], 500);
    assert_eq!(stats["dims"], 2);
    assert_eq!(stats["dtype"], "f32");
    assert_eq!(stats["build"], "kmeans");
    assert_eq!(stats["leaf_size"], 64);
    assert_eq!(stats["degree"], 32);
    for field in ["leaves", "nodes", "levels", "bytes"] {
        assert!(stats[field].as_u64().unwrap() > 0, "{field}: {stats}");
    }
    assert!(stats["leaf_fill"].as_f64().unwrap() > 0.0, "{stats}");
    let text = success(&["knn", "stats", "--index", path_str(&index)]);
    assert!(
        text.contains("points 500") && text.contains("dtype f32"),
        "{text}"
    );

    let verified = success(&["knn", "verify", "--index", path_str(&index)]);
    assert!(
        verified.contains("500 points") && verified.ends_with("ok\n"),
        "{verified}"
    );
}

#[test]
fn bad_input_is_refused_naming_the_file_and_leaves_no_output() {
    let files = Files::new();
    let (n, dims) = (100, 4);
    let points = coordinates(n * dims, 4, 10.0);
    let points_file = files.path("points.npy");
    write(&points_file, npy::encode_f64(n, dims, &points));
    let index = files.path("points.sst");
    success(&[
        "knn",
        "build",
        "--points",
        path_str(&points_file),
        "--index",
        path_str(&index),
    ]);
    let queries_file = files.path("queries.npy");
    write(&queries_file, npy::encode_f64(2, dims, &points[..2 * dims]));
    let index_arg = path_str(&index);
    let queries_arg = path_str(&queries_file);

    // Not a .npy file, and no file at all.
    let garbage = files.path("garbage.npy");
    write(&garbage, b"not a numpy file at all".to_vec());
    let error = failure(&[
        "knn",
        "build",
        "--points",
        path_str(&garbage),
        "--index",
        index_arg,
    ]);
    assert!(error.contains("garbage.npy") && error.contains("npy"), "{error}");
    let missing = files.path("missing.npy");
    let error = failure(&[
        "knn",
        "build",
        "--points",
        path_str(&missing),
        "--index",
        index_arg,
    ]);
    assert!(error.contains("missing.npy"), "{error}");
    let error = failure(&["knn", "stats", "--index", path_str(&files.path("missing.sst"))]);
    assert!(error.contains("missing.sst"), "{error}");

    // Integer points are refused with the dtypes accepted.
    let integers = files.path("integers.npy");
    write(&integers, npy::encode_i64(2, 2, &[1, 2, 3, 4]));
    let error = failure(&[
        "knn",
        "build",
        "--points",
        path_str(&integers),
        "--index",
        index_arg,
    ]);
    assert!(
        error.contains("integers.npy") && error.contains("float64"),
        "{error}"
    );

    // NaN coordinates: the engine names the row and column.
    let mut nan_points = points.clone();
    nan_points[2 * dims + 1] = f64::NAN;
    let nan_file = files.path("nan.npy");
    write(&nan_file, npy::encode_f64(n, dims, &nan_points));
    let error = failure(&[
        "knn",
        "build",
        "--points",
        path_str(&nan_file),
        "--index",
        index_arg,
    ]);
    assert!(error.contains("NaN") && error.contains("[2, 1]"), "{error}");

    // Build options the engine refuses.
    let error = failure(&[
        "knn",
        "build",
        "--points",
        path_str(&points_file),
        "--index",
        index_arg,
        "--leaf-size",
        "0",
    ]);
    assert!(error.contains("leaf_size"), "{error}");

    // k = 0 and k > n; queries of the wrong width; nothing is written.
    let distances = files.path("d.npy");
    let indices = files.path("i.npy");
    let query = |k: &str, queries: &str| {
        failure(&[
            "knn",
            "query",
            "--index",
            index_arg,
            "--queries",
            queries,
            "--k",
            k,
            "--distances",
            path_str(&distances),
            "--indices",
            path_str(&indices),
        ])
    };
    let error = query("0", queries_arg);
    assert!(error.contains("k must be at least 1"), "{error}");
    let error = query("101", queries_arg);
    assert!(error.contains("101") && error.contains("100 points"), "{error}");
    let narrow = files.path("narrow.npy");
    write(&narrow, npy::encode_f64(4, 2, &points[..8]));
    let error = query("1", path_str(&narrow));
    assert!(error.contains("narrow.npy") && error.contains('4'), "{error}");
    assert!(!distances.exists() && !indices.exists());
    assert!(scratch_files(&files.root).is_empty());

    // Unknown names are command-line errors (status 2), listing the names.
    let output = spillway(&[
        "knn",
        "query",
        "--index",
        index_arg,
        "--queries",
        queries_arg,
        "--k",
        "1",
        "--method",
        "fast",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("psb") && error.contains("brute"), "{error}");
    let output = spillway(&[
        "knn",
        "build",
        "--points",
        path_str(&points_file),
        "--index",
        index_arg,
        "--build",
        "random",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("hilbert"));
}

#[test]
fn a_damaged_index_fails_verify_naming_the_file() {
    let files = Files::new();
    let (n, dims) = (2_000, 3);
    let points = coordinates(n * dims, 5, 1.0);
    let points_file = files.path("points.npy");
    write(&points_file, npy::encode_f64(n, dims, &points));
    let index = files.path("points.sst");
    success(&[
        "knn",
        "build",
        "--points",
        path_str(&points_file),
        "--index",
        path_str(&index),
    ]);
    let mut bytes = std::fs::read(&index).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&index, bytes).unwrap();
    let error = failure(&["knn", "verify", "--index", path_str(&index)]);
    assert!(
        error.contains("corruption") && error.contains("points.sst"),
        "{error}"
    );
}
