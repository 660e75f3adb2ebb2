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
