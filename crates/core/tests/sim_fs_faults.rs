//! Fault injection in `SimFs`: the Nth operation fails with the injected
//! errno, once or for good, and the counters tell what happened.

use std::path::Path;

use spillway_core::fs::{Fault, FaultTarget, Fs, OpKind, SimFs};
use spillway_core::ErrorKind;

fn setup() -> SimFs {
    let fs = SimFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    fs
}

fn read_all(fs: &SimFs, path: &str) -> Vec<u8> {
    let file = fs.open_read(Path::new(path)).unwrap();
    let mut buf = vec![0u8; file.len().unwrap() as usize];
    file.read_exact_at(&mut buf, 0).unwrap();
    buf
}

#[test]
fn eio_once_fails_one_operation_then_the_disk_works() {
    let fs = setup();
    let file = fs.create(Path::new("/db/000007.list")).unwrap();
    file.write_at(&[1u8; 8192], 0).unwrap();
    // Two operations succeed, the third fails.
    fs.fail_after(2, Fault::once(libc::EIO));
    file.write_at(b"a", 0).unwrap();
    file.write_at(b"b", 1).unwrap();
    let error = file.write_at(&[9u8; 4096], 8192).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Io);
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    assert!(
        error
            .to_string()
            .starts_with("writing 4096 bytes at offset 8192 of /db/000007.list: "),
        "{error}"
    );
    // Nothing of the failed write was applied, and the next write works.
    assert_eq!(file.len().unwrap(), 8192);
    file.write_at(&[9u8; 4096], 8192).unwrap();
    assert_eq!(file.len().unwrap(), 12288);
    assert_eq!(&read_all(&fs, "/db/000007.list")[..2], b"ab");
    assert_eq!(fs.stats().faults_injected, 1);
}

#[test]
fn enospc_for_good_fails_everything_until_cleared() {
    let fs = setup();
    let file = fs.create(Path::new("/db/wal")).unwrap();
    fs.fail_after(1, Fault::for_good(libc::ENOSPC));
    file.append(b"fits").unwrap();
    for _ in 0..3 {
        let error = file.append(b"does not").unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    }
    let error = fs.create(Path::new("/db/other")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    let error = file.sync_data().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    assert!(
        error.to_string().starts_with("syncing the data of /db/wal: "),
        "{error}"
    );
    assert_eq!(fs.stats().faults_injected, 5);

    fs.clear_fault();
    assert_eq!(file.append(b"!").unwrap(), 4);
    assert_eq!(read_all(&fs, "/db/wal"), b"fits!");
}

#[test]
fn enospc_aimed_at_mutations_still_reads() {
    let fs = setup();
    let file = fs.create(Path::new("/db/a")).unwrap();
    file.write_at(b"data", 0).unwrap();
    fs.fail_after(0, Fault::for_good(libc::ENOSPC).on(FaultTarget::Mutations));
    assert_eq!(read_all(&fs, "/db/a"), b"data");
    assert_eq!(fs.list_dir(Path::new("/db")).unwrap(), vec!["a"]);
    assert!(fs.exists(Path::new("/db/a")).unwrap());
    for error in [
        file.write_at(b"x", 0).unwrap_err(),
        file.set_len(0).unwrap_err(),
        file.allocate(0, 4096).unwrap_err(),
        fs.rename(Path::new("/db/a"), Path::new("/db/b")).unwrap_err(),
        fs.remove_file(Path::new("/db/a")).unwrap_err(),
        fs.sync_dir(Path::new("/db")).unwrap_err(),
    ] {
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    }
    assert_eq!(read_all(&fs, "/db/a"), b"data");
}

#[test]
fn fault_aimed_at_one_kind_counts_only_that_kind() {
    let fs = setup();
    let file = fs.create(Path::new("/db/log")).unwrap();
    // The third sync_data fails; other operations do not count.
    fs.fail_after(2, Fault::once(libc::EIO).on(FaultTarget::Kind(OpKind::SyncData)));
    for round in 0..2u8 {
        file.append(&[round; 10]).unwrap();
        file.sync_data().unwrap();
        fs.sync_dir(Path::new("/db")).unwrap();
    }
    file.append(b"x").unwrap();
    let error = file.sync_data().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    file.sync_data().unwrap();
    let stats = fs.stats();
    assert_eq!(stats.sync_data_count, 3);
    assert_eq!(stats.sync_dir_count, 2);
    assert_eq!(stats.faults_injected, 1);
}

#[test]
fn enospc_write_keeps_the_whole_blocks_before_the_last() {
    let fs = setup();
    let file = fs.create(Path::new("/db/big")).unwrap();
    fs.fail_after(0, Fault::once(libc::ENOSPC));
    let error = file.write_at(&[5u8; 10_000], 0).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    // Blocks 0 and 1 were written; the disk filled in block 2.
    assert_eq!(read_all(&fs, "/db/big"), vec![5u8; 8192]);
    assert_eq!(fs.stats().write_bytes, 8192);

    // A write within one block writes nothing, and so does EIO.
    fs.fail_after(0, Fault::once(libc::ENOSPC));
    assert!(file.write_at(&[6u8; 100], 8192).is_err());
    fs.fail_after(0, Fault::once(libc::EIO));
    assert!(file.write_at(&[6u8; 10_000], 0).is_err());
    assert_eq!(read_all(&fs, "/db/big"), vec![5u8; 8192]);

    // An append that fails with ENOSPC leaves its whole blocks at the end.
    fs.fail_after(0, Fault::once(libc::ENOSPC));
    let error = file.append(&[7u8; 4096 + 10]).unwrap_err();
    assert!(error.to_string().contains("at offset 8192"), "{error}");
    assert_eq!(file.len().unwrap(), 12288);
}

#[test]
fn failed_namespace_operations_change_nothing() {
    let fs = setup();
    let file = fs.create(Path::new("/db/a")).unwrap();
    drop(file);
    fs.fail_after(0, Fault::once(libc::EIO));
    assert!(fs.rename(Path::new("/db/a"), Path::new("/db/b")).is_err());
    fs.fail_after(0, Fault::once(libc::EIO));
    assert!(fs.remove_file(Path::new("/db/a")).is_err());
    fs.fail_after(0, Fault::once(libc::EIO));
    assert!(fs.create(Path::new("/db/c")).is_err());
    fs.fail_after(0, Fault::once(libc::EIO));
    assert!(fs.create_dir_all(Path::new("/db/sub")).is_err());
    assert_eq!(fs.list_dir(Path::new("/db")).unwrap(), vec!["a"]);
}

#[test]
fn counters_follow_the_operations() {
    let fs = setup();
    let before = fs.stats();
    let file = fs.create(Path::new("/db/a")).unwrap();
    file.write_at(&[1u8; 100], 0).unwrap();
    file.append(&[2u8; 50]).unwrap();
    let mut buf = [0u8; 120];
    assert_eq!(file.read_at(&mut buf, 40).unwrap(), 110);
    file.sync_data().unwrap();
    fs.sync_dir(Path::new("/db")).unwrap();
    let after = fs.stats();
    assert_eq!(after.operations - before.operations, 6);
    assert_eq!(after.write_bytes, 150);
    assert_eq!(after.read_bytes, 110);
    assert_eq!(after.sync_data_count, 1);
    assert_eq!(after.sync_dir_count, 1);
    assert_eq!(after.faults_injected, 0);
}

#[test]
fn a_new_fault_replaces_a_persistent_one() {
    let fs = setup();
    fs.fail_after(0, Fault::for_good(libc::EIO));
    assert!(fs.exists(Path::new("/db")).is_err());
    fs.fail_after(1, Fault::once(libc::ENOSPC));
    assert!(fs.exists(Path::new("/db")).unwrap());
    let error = fs.exists(Path::new("/db")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    assert!(fs.exists(Path::new("/db")).unwrap());
}
