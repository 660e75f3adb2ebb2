//! Micro-benchmark of the pipeline's queue hand-off: a phase whose
//! producers send small work units through one bounded queue to consumers
//! that drop them, so the time is the hand-off itself (and the unit's
//! allocation): `cargo bench -p spillway-pipeline --bench pipeline_queue -- [UNITS]`.
//! Prints units/s and ns per unit for several queue capacities and worker
//! counts.

use std::time::Instant;

use spillway_pipeline::{PhaseBuilder, StageSpec};

fn main() {
    let units: usize = std::env::args()
        .skip(1)
        .find(|argument| !argument.starts_with('-'))
        .map_or(1_000_000, |value| value.parse().expect("UNITS"));
    if cfg!(debug_assertions) {
        eprintln!("WARNING: debug build; run with cargo bench (release) for real numbers");
    }
    for (capacity, producers, consumers) in [(4, 1, 1), (64, 1, 1), (64, 2, 2)] {
        let mut phase = PhaseBuilder::new("hand-off");
        let (sender, receiver) = phase.queue::<Vec<u8>>("units", capacity);
        phase.stage(
            StageSpec::new("produce", producers).writes(&sender),
            move |worker| {
                for _ in (worker.index()..units).step_by(worker.workers()) {
                    worker.send(&sender, vec![0u8; 64])?;
                }
                Ok(())
            },
        );
        phase.stage(
            StageSpec::new("consume", consumers).reads(&receiver),
            move |worker| {
                while let Some(unit) = worker.recv(&receiver)? {
                    drop(unit);
                }
                Ok(())
            },
        );
        let phase = phase.build().expect("phase");
        let started = Instant::now();
        let report = phase.run().expect("run");
        let seconds = started.elapsed().as_secs_f64();
        let handed = report.stage("consume").expect("consume stage").units_in;
        assert_eq!(handed, units as u64);
        println!(
            "queue of {capacity}, {producers} producer(s) to {consumers} consumer(s): {units} units of 64 bytes \
             in {seconds:.3} s, {:.2} M units/s, {:.0} ns/unit",
            units as f64 / seconds / 1e6,
            seconds * 1e9 / units as f64
        );
    }
}
