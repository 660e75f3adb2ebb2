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
