//! Interrupts: an interrupted finalize leaves every value in the
//! aggregator and the next finalize completes it; an interrupted batch
//! leaves an aggregator that refuses further work, saying why.

use std::collections::BTreeMap;
use std::time::Duration;

use spillway_agg::{Aggregator, AggregatorOptions, CbtOptions, Engine, Output, Value};
use spillway_core::{ErrorKind, Interrupt};

fn aggregator(spec: &str, engine: Engine, threads: usize) -> Aggregator {
    let options = AggregatorOptions {
        engine,
        threads,
        memory_bytes: 64 << 20,
        cbt: CbtOptions {
            buffer_bytes: 4096,
            fan_out: 4,
            ..CbtOptions::default()
        },
    };
    Aggregator::new(spec, options).unwrap()
}

/// `sum+count` over 60,000 values of 7,000 keys: enough for a tree of
/// several levels with fragments pending in many nodes.
fn filled(engine: Engine, threads: usize) -> Aggregator {
    let mut aggregator = aggregator("sum+count", engine, threads);
    let keys: Vec<String> = (0..60_000)
        .map(|index| format!("key-{}", index * 13 % 7_000))
        .collect();
    aggregator
        .insert_batch(
            keys.iter()
                .enumerate()
                .map(|(index, key)| (key.as_bytes(), Value::Int(index as i64))),
        )
        .unwrap();
    aggregator
}

fn results(aggregator: &Aggregator) -> BTreeMap<Vec<u8>, Output> {
    aggregator.iter().unwrap().map(Result::unwrap).collect()
}

#[test]
fn an_interrupted_finalize_keeps_every_value_and_the_next_one_completes() {
    let mut model = filled(Engine::Hash, 0);
    model.finalize().unwrap();
    let expected = results(&model);
    assert_eq!(expected.len(), 7_000);
    for threads in [0, 2] {
        // Raised before the call: it stops at its first check.
        let mut stopped = filled(Engine::Cbt, threads);
        let interrupt = Interrupt::new();
        interrupt.raise();
        stopped.set_interrupt(interrupt);
        let error = stopped.finalize().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Interrupted, "{threads} threads: {error}");
        let error = stopped.get(b"key-1").unwrap_err();
        assert!(error.to_string().contains("must be finalized"), "{error}");
        stopped.set_interrupt(Interrupt::new());
        stopped.finalize().unwrap();
        assert_eq!(results(&stopped), expected, "{threads} threads");

        // Raised part-way, wherever the work then is: the outcome is the
        // same whether the finalize was stopped or had finished.
        for delay_us in [0, 300, 1_000, 3_000, 10_000] {
            let mut aggregator = filled(Engine::Cbt, threads);
            let interrupt = Interrupt::new();
            aggregator.set_interrupt(interrupt.clone());
            let raiser = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(delay_us));
                interrupt.raise();
            });
            let outcome = aggregator.finalize();
            raiser.join().unwrap();
            if let Err(error) = outcome {
                assert_eq!(error.kind(), ErrorKind::Interrupted, "{error}");
                aggregator.set_interrupt(Interrupt::new());
                aggregator.finalize().unwrap();
            }
            assert_eq!(results(&aggregator), expected, "{threads} threads, {delay_us} us");
            // Still usable: more values, another finalize (with a token
            // not raised: a raised one stays raised).
            aggregator.set_interrupt(Interrupt::new());
            aggregator.insert(b"key-1", Value::Int(1)).unwrap();
            aggregator.finalize().unwrap();
        }
    }
}

#[test]
fn an_interrupted_check_changes_nothing_and_an_interrupted_batch_leaves_the_aggregator_refusing_work() {
    for (engine, threads) in [(Engine::Cbt, 0), (Engine::Cbt, 2), (Engine::Hash, 0)] {
        let keys: Vec<String> = (0..10_000).map(|index| format!("new-{index}")).collect();
        let pairs = || keys.iter().map(|key| (key.as_bytes(), Value::Int(1)));
        let mut aggregator = filled(engine, threads);
        let interrupt = Interrupt::new();
        interrupt.raise();
        aggregator.set_interrupt(interrupt);

        // Checking inserts nothing, so an interrupted check changes nothing.
        let error = aggregator.check_batch(pairs()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Interrupted, "{error}");
        assert_eq!(aggregator.stats().inserts, 60_000, "{engine:?}/{threads}");

        // An interrupted insert may have inserted part of its batch.
        let error = aggregator.insert_batch(pairs()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Interrupted, "{error}");
        aggregator.set_interrupt(Interrupt::new());
        let refusals = [
            aggregator.insert(b"a", Value::Int(1)).unwrap_err(),
            aggregator.check_batch(pairs()).unwrap_err(),
            aggregator.insert_batch(pairs()).unwrap_err(),
            aggregator.finalize().unwrap_err(),
            aggregator.get(b"a").unwrap_err(),
            aggregator.iter().map(|_| ()).unwrap_err(),
        ];
        for error in refusals {
            assert_eq!(error.kind(), ErrorKind::Poisoned, "{engine:?}/{threads}: {error}");
            assert!(
                error.to_string().contains(
                    "interrupted part-way through insert_batch and holds only part of what it was given"
                ),
                "{error}"
            );
        }
    }
}
