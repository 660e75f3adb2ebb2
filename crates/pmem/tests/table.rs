//! Persistence modes by name, and a table opened or created in one.

use std::time::Duration;

use spillway_core::ErrorKind;
use spillway_pmem::cceh::Options;
use spillway_pmem::{FlushKind, Mode, Table};

#[test]
fn modes_are_named_as_users_spell_them_and_bad_names_are_explained() {
    assert_eq!("none".parse::<Mode>().unwrap(), Mode::Volatile);
    assert_eq!("fence".parse::<Mode>().unwrap(), Mode::Fence);
    assert_eq!(
        "clflush".parse::<Mode>().unwrap(),
        Mode::Hardware(FlushKind::Clflush)
    );
    assert_eq!(
        "auto".parse::<Mode>().unwrap(),
        Mode::Hardware(FlushKind::detect())
    );
    assert_eq!(
        "latency:300ns".parse::<Mode>().unwrap(),
        Mode::Latency(Duration::from_nanos(300))
    );
    assert_eq!(
        "latency:1us".parse::<Mode>().unwrap(),
        Mode::Latency(Duration::from_micros(1))
    );
    for bad in [
        "latency:",
        "latency:5",
        "latency:3ms",
        "latency:2000000ns",
        "fast",
    ] {
        let error = bad.parse::<Mode>().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{bad}");
        assert!(error.to_string().contains("latency:300ns"), "{error}");
    }
    match FlushKind::detect() {
        FlushKind::Clwb => assert!("clwb".parse::<Mode>().is_ok()),
        other => assert!("clwb"
            .parse::<Mode>()
            .unwrap_err()
            .to_string()
            .contains(other.name())),
    }
}

#[test]
fn a_table_is_created_then_opened_in_any_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.cceh");
    let options = Options {
        segment_bytes: 1024,
        probe: 2,
        region_bytes: 1 << 20,
        ..Options::default()
    };
    let table = Table::open_or_create(&path, "fence".parse().unwrap(), options).unwrap();
    for key in 0..500 {
        table.insert(key, key + 1).unwrap();
    }
    assert_eq!(table.remove(7).unwrap(), Some(8));
    let stats = table.stats();
    assert_eq!(stats.persistence, "fence");
    assert!(stats.flushes >= 500 && stats.fences >= 500 && stats.global_depth > 0);
    table.close().unwrap();
    let table = Table::open_or_create(&path, "latency:100ns".parse().unwrap(), Options::default()).unwrap();
    table.verify().unwrap();
    assert_eq!(
        (table.len().unwrap(), table.get(8).unwrap(), table.get(7).unwrap()),
        (499, Some(9), None)
    );
    assert_eq!(table.stats().persistence, "latency:100ns");
}

#[test]
fn get_many_and_sessions_refuse_what_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        region_bytes: 1 << 20,
        ..Options::default()
    };
    let table = Table::open_or_create(&dir.path().join("u64.pmem"), Mode::Volatile, options).unwrap();
    table.insert(1, 10).unwrap();
    let mut values = [None; 3];
    table.get_many(&[1, 2, 3], &mut values).unwrap();
    assert_eq!(values, [Some(10), None, None]);
    let error = table.get_many(&[1, 2], &mut values).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("2 keys but 3 value slots"), "{error}");
    let mut session = table.session().unwrap();
    assert_eq!(session.insert(2, 20).unwrap(), None);
    assert_eq!(session.get(2), Some(20));
    assert_eq!(session.remove(1).unwrap(), Some(10));
    drop(session);
    table.close().unwrap();

    let bytes = Options {
        keys: spillway_pmem::cceh::Keys::Bytes,
        ..options
    };
    let table = Table::open_or_create(&dir.path().join("bytes.pmem"), Mode::Volatile, bytes).unwrap();
    for error in [
        table.session().map(drop).unwrap_err(),
        table.get_many(&[1], &mut [None]).unwrap_err(),
    ] {
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    }
    table.close().unwrap();
}
