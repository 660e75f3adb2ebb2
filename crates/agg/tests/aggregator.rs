//! The `Aggregator` front: reading results from a position, as a reader
//! that takes them a page at a time does.

use spillway_agg::{Aggregator, AggregatorOptions, CbtOptions, Engine, Output, Value};

fn filled(engine: Engine, threads: usize) -> Aggregator {
    let options = AggregatorOptions {
        engine,
        threads,
        cbt: CbtOptions {
            buffer_bytes: 4096,
            fan_out: 4,
            ..CbtOptions::default()
        },
        ..AggregatorOptions::default()
    };
    let mut aggregator = Aggregator::new("sum", options).unwrap();
    for index in 0..5_000i64 {
        let key = format!("key{}", index % 1_700);
        aggregator.insert(key.as_bytes(), Value::Int(index)).unwrap();
    }
    aggregator.finalize().unwrap();
    aggregator
}

#[test]
fn reading_from_a_position_continues_the_full_order() {
    for (engine, threads) in [(Engine::Cbt, 0), (Engine::Cbt, 3), (Engine::Hash, 0)] {
        let aggregator = filled(engine, threads);
        let all: Vec<(Vec<u8>, Output)> = aggregator.iter().unwrap().map(Result::unwrap).collect();
        assert_eq!(all.len(), 1_700);
        for skip in [0, 1, 63, 64, 999, 1_699, 1_700, 5_000] {
            let rest: Vec<(Vec<u8>, Output)> =
                aggregator.iter_from(skip).unwrap().map(Result::unwrap).collect();
            assert_eq!(
                rest,
                all[skip.min(all.len())..],
                "{engine:?} on {threads} threads, skip {skip}"
            );
        }
    }
}
