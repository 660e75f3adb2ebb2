//! `PhaseBuilder::build` rejects graphs that could not run or could not end.

use spillway_core::ErrorKind;
use spillway_pipeline::{PhaseBuilder, StageSpec};

fn build_error(phase: PhaseBuilder) -> String {
    let error = phase.build().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    error.to_string()
}

#[test]
fn an_empty_phase_is_rejected() {
    assert!(build_error(PhaseBuilder::new("empty")).contains("has no stages"));
}

#[test]
fn a_queue_without_reader_or_writer_is_rejected() {
    let mut phase = PhaseBuilder::new("dangling");
    let (out, _unread) = phase.queue::<Vec<u8>>("unread", 1);
    let (_unwritten, input) = phase.queue::<Vec<u8>>("unwritten", 1);
    phase.stage(StageSpec::new("a", 1).writes(&out).reads(&input), |_| Ok(()));
    let message = build_error(phase);
    assert!(
        message.contains("queue 'unread' has no reader stage"),
        "{message}"
    );
    assert!(
        message.contains("queue 'unwritten' has no writer stage"),
        "{message}"
    );
}

#[test]
fn zero_workers_zero_capacity_and_duplicate_names_are_rejected() {
    let mut phase = PhaseBuilder::new("sloppy");
    let (out, input) = phase.queue::<Vec<u8>>("q", 0);
    let (out2, input2) = phase.queue::<Vec<u8>>("q", 1);
    phase.stage(StageSpec::new("a", 0).writes(&out).writes(&out2), |_| Ok(()));
    phase.stage(StageSpec::new("a", 1).reads(&input).reads(&input2), |_| Ok(()));
    let message = build_error(phase);
    assert!(message.contains("stage 'a' has 0 workers"), "{message}");
    assert!(message.contains("queue 'q' has capacity 0"), "{message}");
    assert!(message.contains("two queues are named 'q'"), "{message}");
    assert!(message.contains("two stages are named 'a'"), "{message}");
}

#[test]
fn a_queue_of_another_phase_is_rejected() {
    let mut other = PhaseBuilder::new("other");
    let (foreign_out, _foreign_in) = other.queue::<Vec<u8>>("foreign", 1);
    let mut phase = PhaseBuilder::new("mine");
    phase.stage(StageSpec::new("a", 1).writes(&foreign_out), |_| Ok(()));
    let message = build_error(phase);
    assert!(
        message.contains("stage 'a' names queue 'foreign', which belongs to another phase"),
        "{message}"
    );
}

#[test]
fn a_cycle_is_rejected() {
    let mut phase = PhaseBuilder::new("loop");
    let (ab_out, ab_in) = phase.queue::<Vec<u8>>("ab", 1);
    let (ba_out, ba_in) = phase.queue::<Vec<u8>>("ba", 1);
    phase.stage(StageSpec::new("source", 1), |_| Ok(()));
    phase.stage(StageSpec::new("a", 1).reads(&ba_in).writes(&ab_out), |_| Ok(()));
    phase.stage(StageSpec::new("b", 1).reads(&ab_in).writes(&ba_out), |_| Ok(()));
    let message = build_error(phase);
    assert!(message.contains("the stages 'a', 'b' form a cycle"), "{message}");

    let mut phase = PhaseBuilder::new("self-loop");
    let (out, input) = phase.queue::<Vec<u8>>("self", 1);
    phase.stage(StageSpec::new("ouroboros", 1).reads(&input).writes(&out), |_| {
        Ok(())
    });
    assert!(build_error(phase).contains("'ouroboros' form a cycle"));
}

#[test]
fn a_valid_graph_builds() {
    let mut phase = PhaseBuilder::new("fine");
    let (out, input) = phase.queue::<Vec<u8>>("q", 2);
    // Declaring a queue twice is harmless.
    phase.stage(StageSpec::new("w", 2).writes(&out).writes(&out), |_| Ok(()));
    phase.stage(StageSpec::new("r", 1).reads(&input), |_| Ok(()));
    let phase = phase.build().unwrap();
    assert_eq!(phase.name(), "fine");
    assert!(phase.describe().contains("stage 'w' x2 writes 'q'(2)\n"));
}
