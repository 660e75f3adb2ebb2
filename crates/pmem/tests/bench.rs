//! The benchmark's phases: every distribution, one and two threads, the
//! figures consistent with what each phase does.

use spillway_core::{ErrorKind, Interrupt};
use spillway_pmem::bench::{run, Distribution};
use spillway_pmem::cceh::Options;
use spillway_pmem::{Mode, Table};

#[test]
fn every_distribution_on_one_and_two_threads_gives_consistent_phases() {
    let dir = tempfile::tempdir().unwrap();
    for (i, name) in ["uniform", "selfsimilar", "zipfian"].iter().enumerate() {
        for threads in [1, 2] {
            let path = dir.path().join(format!("{i}-{threads}.pmem"));
            let options = Options {
                segment_bytes: 1024,
                probe: 4,
                region_bytes: 8 << 20,
                ..Options::default()
            };
            let table = Table::open_or_create(&path, Mode::Volatile, options).unwrap();
            let distribution: Distribution = name.parse().unwrap();
            let phases = run(&table, 20_000, threads, distribution, 9, &Interrupt::new()).unwrap();
            let names: Vec<&str> = phases.iter().map(|p| p.name).collect();
            assert_eq!(
                names,
                ["insert", "search", "batched search", "negative search", "delete"]
            );
            for phase in &phases {
                assert_eq!((phase.operations, phase.threads), (20_000, threads));
                assert!(
                    phase.p50_ns <= phase.p99_ns && phase.p99_ns <= phase.p999_ns,
                    "{phase:?}"
                );
                // (A batched search's call is many searches: no latency.)
                let batched = phase.name == "batched search";
                assert!((phase.p50_ns > 0) != batched && phase.operations_per_s > 0.0);
            }
            assert!(phases[0].flushes_per_operation >= 1.0 && phases[0].fences_per_operation >= 1.0);
            for search in &phases[1..4] {
                assert_eq!(search.flushes_per_operation, 0.0, "{search:?}");
            }
            // A delete is one flush and one fence; merges of emptied
            // segments add some, counted apart (exactly: each thread
            // counts its own, its stripe of the counts).
            let own = phases[4].flushes_per_operation - phases[4].merge_flushes_per_operation;
            assert!((own - 1.0).abs() < 1e-9, "{:?}", phases[4]);
            assert!(phases[4].merge_flushes_per_operation > 0.0);
            assert!(
                (1.0..2.0).contains(&phases[4].flushes_per_operation)
                    && (1.0..2.0).contains(&phases[4].fences_per_operation),
                "{:?}",
                phases[4]
            );
            assert!(table.is_empty().unwrap(), "every key deleted");
        }
    }
    let error = "gaussian".parse::<Distribution>().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("zipfian"), "{error}");
}

/// A tree's run scans instead of batching searches: a scan per ten keys,
/// no flush; the B3-tree and the sorted-leaf baseline alike, on two
/// threads too.
#[test]
fn a_tree_run_scans_its_keys_in_order() {
    use spillway_pmem::b3tree::Options;
    use spillway_pmem::tree::{Family, SortedLeaf, B3};
    use spillway_pmem::Tree;

    fn phases<F: Family>(path: &std::path::Path, threads: usize) {
        let options = Options {
            page_bytes: 512,
            region_bytes: 16 << 20,
            keys: spillway_pmem::b3tree::Keys::U64,
        };
        let tree = Tree::<F>::open_or_create(path, Mode::Volatile, options).unwrap();
        let phases = run(&tree, 5_000, threads, Distribution::Uniform, 3, &Interrupt::new()).unwrap();
        let names: Vec<&str> = phases.iter().map(|p| p.name).collect();
        assert_eq!(names, ["insert", "search", "scan", "negative search", "delete"]);
        assert_eq!(phases[2].operations, 500);
        assert_eq!(phases[2].flushes_per_operation, 0.0);
        assert!(phases[2].p50_ns > 0 && phases[2].operations_per_s > 0.0);
        assert!(phases[0].flushes_per_operation >= 1.0 && phases[4].flushes_per_operation >= 1.0);
        assert!(tree.is_empty().unwrap(), "every key deleted");
    }
    let dir = tempfile::tempdir().unwrap();
    for threads in [1, 2] {
        phases::<B3>(&dir.path().join(format!("b3-{threads}")), threads);
        phases::<SortedLeaf>(&dir.path().join(format!("ff-{threads}")), threads);
    }
}
