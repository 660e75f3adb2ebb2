//! `spillway pmem` as a user runs it: a benchmark table created, verified
//! and refused when it exists; a crash test; bad arguments and a damaged
//! table reported with exit status 1 or 2.

use serde_json::Value;

mod common;

use common::{failure, path_str, spillway, success};

#[test]
fn bench_then_verify_a_table_and_refuse_to_overwrite_it() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.pmem");
    let out = success(&[
        "pmem",
        "bench",
        "--table",
        path_str(&table),
        "--keys",
        "20000",
        "--persistence",
        "fence",
        "--region-bytes",
        "16M",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["persistence"], "fence");
    let phases = report["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["insert", "search", "batched search", "negative search", "delete"]
    );
    assert_eq!(phases[1]["flushes_per_operation"], 0.0);
    // A delete's own flush, and the merges' apart.
    let delete = &phases[4];
    let own = delete["flushes_per_operation"].as_f64().unwrap()
        - delete["merge_flushes_per_operation"].as_f64().unwrap();
    assert!((own - 1.0).abs() < 1e-9, "{delete}");
    assert!(phases[0]["flushes_per_operation"].as_f64().unwrap() >= 1.0);
    let two = dir.path().join("two.pmem");
    let out = success(&[
        "pmem",
        "bench",
        "--table",
        path_str(&two),
        "--keys",
        "20000",
        "--threads",
        "2",
        "--distribution",
        "zipfian",
        "--region-bytes",
        "16M",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    let search = &report["phases"][1];
    assert_eq!(search["threads"], 2);
    assert!(search["p50_ns"].as_u64().unwrap() <= search["p999_ns"].as_u64().unwrap());
    let out = success(&["pmem", "verify", "--table", path_str(&table)]);
    assert!(
        out.contains("0 keys") && out.contains("every invariant holds"),
        "{out}"
    );
    let error = failure(&["pmem", "bench", "--table", path_str(&table), "--keys", "5"]);
    assert!(error.contains("exists"), "{error}");
}

#[test]
fn a_crash_test_checks_every_image_of_a_seeded_run() {
    let out = success(&["pmem", "crashtest", "--operations", "60", "--seed", "3", "--json"]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(report["points"].as_u64().unwrap() > 60, "{report}");
    assert!(report["images"].as_u64().unwrap() >= report["points"].as_u64().unwrap());
    assert_eq!(report["dirty_at_end"], serde_json::json!([]));
}

#[test]
fn bad_arguments_and_damaged_tables_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.pmem");
    let output = spillway(&[
        "pmem",
        "bench",
        "--table",
        path_str(&table),
        "--keys",
        "5",
        "--persistence",
        "fast",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("latency:300ns"));
    let error = failure(&[
        "pmem",
        "bench",
        "--table",
        path_str(&table),
        "--keys",
        "5",
        "--segment-bytes",
        "300",
    ]);
    assert!(error.contains("power of two"), "{error}");
    assert!(failure(&["pmem", "verify", "--table", path_str(&table)]).contains("does not exist"));
    std::fs::write(&table, vec![7u8; 8192]).unwrap();
    let error = failure(&["pmem", "verify", "--table", path_str(&table)]);
    assert!(error.contains("t.pmem") && error.contains("magic"), "{error}");
}

/// The B3-tree and the sorted-leaf baseline from the command line: a
/// benchmark on small pages (splits and rebuilds throughout) on two
/// threads, the tree left by it verified by its kind, a crash test, and a
/// page size that is no power of two refused.
#[test]
fn a_btree_is_benchmarked_verified_and_crash_tested() {
    for (index, named) in [
        ("btree", "a B3-tree of 0 u64 keys"),
        ("fastfair", "a sorted-leaf tree of 0 u64 keys"),
    ] {
        a_tree_is_benchmarked_verified_and_crash_tested(index, named);
    }
}

fn a_tree_is_benchmarked_verified_and_crash_tested(index: &str, named: &str) {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree.pmem");
    let out = success(&[
        "pmem",
        "bench",
        "--index",
        index,
        "--table",
        path_str(&tree),
        "--keys",
        "5000",
        "--page-bytes",
        "512",
        "--threads",
        "2",
        "--region-bytes",
        "16M",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    let phases = report["phases"].as_array().unwrap();
    let insert = phases[0]["flushes_per_operation"].as_f64().unwrap();
    assert!((1.0..8.0).contains(&insert), "{index}: {report}");
    assert_eq!(phases[1]["flushes_per_operation"], 0.0);
    assert!(
        phases[4]["flushes_per_operation"].as_f64().unwrap() >= 1.0,
        "{report}"
    );
    let out = success(&["pmem", "verify", "--table", path_str(&tree)]);
    assert!(
        out.contains(named) && out.contains("every invariant holds"),
        "{out}"
    );
    let out = success(&[
        "pmem",
        "crashtest",
        "--index",
        index,
        "--operations",
        "60",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(report["points"].as_u64().unwrap() > 60, "{report}");
    assert_eq!(report["dirty_at_end"], serde_json::json!([]));
    let other = dir.path().join("other.pmem");
    let error = failure(&[
        "pmem",
        "bench",
        "--index",
        index,
        "--table",
        path_str(&other),
        "--keys",
        "5",
        "--page-bytes",
        "1000",
    ]);
    assert!(error.contains("power of two"), "{error}");
}

/// Without `--page-bytes`, each tree is benchmarked at its own size: a
/// B3-tree in 4 KiB pages, the baseline in FAST&FAIR's 512-byte nodes.
#[test]
fn each_tree_is_benchmarked_at_its_own_page_size_by_default() {
    let dir = tempfile::tempdir().unwrap();
    for (index, bytes) in [("btree", "4096-byte pages"), ("fastfair", "512-byte pages")] {
        let tree = dir.path().join(format!("{index}.pmem"));
        let args = ["pmem", "bench", "--index", index, "--table", path_str(&tree)];
        success(&[&args[..], &["--keys", "3000", "--region-bytes", "16M"]].concat());
        let out = success(&["pmem", "verify", "--table", path_str(&tree)]);
        assert!(out.contains(bytes), "{index}: {out}");
    }
}

/// A B3-tree of bytes keys, left without a close (as a crash leaves it),
/// is recovered and verified by `spillway pmem verify`, which names its
/// kind; a record damaged is reported.
#[test]
fn a_btree_of_bytes_keys_left_open_is_recovered_and_verified() {
    use spillway_pmem::b3tree::{B3Tree, Keys, Options};
    use spillway_pmem::Volatile;

    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        page_bytes: 512,
        region_bytes: 4 << 20,
        keys: Keys::Bytes,
    };
    let tree = B3Tree::create(&dir.path().join("open.pmem"), options, Volatile::default()).unwrap();
    for i in 0..700u32 {
        tree.insert_bytes(format!("customer:{i:05}").as_bytes(), b"a value to find")
            .unwrap();
    }
    // The file as it is while the tree is open: not closed clean.
    let path = dir.path().join("bytes.pmem");
    std::fs::write(&path, tree.region().image()).unwrap();
    tree.close().unwrap();
    let out = success(&["pmem", "verify", "--table", path_str(&path)]);
    assert!(
        out.contains("a B3-tree of 700 bytes keys") && out.contains("every invariant holds"),
        "{out}"
    );
    let mut image = std::fs::read(&path).unwrap();
    let at = image
        .windows(15)
        .position(|window| window == b"a value to find")
        .unwrap();
    image[at] ^= 1;
    std::fs::write(&path, image).unwrap();
    let error = failure(&["pmem", "verify", "--table", path_str(&path)]);
    assert!(error.contains("checksum"), "{error}");
}
