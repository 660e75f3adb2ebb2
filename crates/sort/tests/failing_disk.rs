//! A failing disk (through the simulated file system) ends gensort and
//! valsort with a clear error naming the file, never with a wrong answer.

use std::path::Path;

use spillway_core::fs::{CrashMode, Fault, FaultTarget, OpKind};
use spillway_core::{ErrorKind, Fs, SimFs};
use spillway_sort::{
    generate_file, generate_vec, validate_file, GenerateSpec, KeyOrder, Summary, ValidateOptions,
    WriteOptions, BLOCK_RECORDS,
};

fn setup() -> (SimFs, &'static Path) {
    let fs = SimFs::new();
    fs.create_dir_all(Path::new("/data")).unwrap();
    (fs, Path::new("/data/input.dat"))
}

#[test]
fn enospc_while_generating_is_reported_with_the_path() {
    let (fs, path) = setup();
    fs.fail_after(
        2,
        Fault::for_good(libc::ENOSPC).on(FaultTarget::Kind(OpKind::Write)),
    );
    let spec = GenerateSpec::binary(5 * BLOCK_RECORDS);
    let options = WriteOptions {
        threads: 2,
        ..WriteOptions::default()
    };
    let error = generate_file(&fs, path, &spec, &options, &|_| {}).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Io);
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    // The file written until it is complete names the output.
    assert!(error.to_string().contains("input.dat"), "{error}");
    // Workers may have written later blocks after the failure: the file is
    // removed so that nothing of the full length looks complete.
    assert!(!fs.exists(path).unwrap());
    assert_eq!(fs.list_dir(Path::new("/data")).unwrap(), Vec::<String>::new());
}

#[test]
fn eio_on_the_final_sync_fails_the_generation() {
    let (fs, path) = setup();
    fs.fail_after(0, Fault::once(libc::EIO).on(FaultTarget::Kind(OpKind::SyncData)));
    let error = generate_file(
        &fs,
        path,
        &GenerateSpec::binary(100),
        &WriteOptions::default(),
        &|_| {},
    )
    .unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    assert!(!fs.exists(path).unwrap());
}

#[test]
fn synced_output_survives_a_crash_and_validates() {
    let (fs, path) = setup();
    let spec = GenerateSpec::binary(3 * BLOCK_RECORDS / 2);
    let report = generate_file(&fs, path, &spec, &WriteOptions::default(), &|_| {}).unwrap();
    // No directory sync here: generation made the new name durable itself.
    fs.crash(CrashMode::DropUnsynced);
    let summary = validate_file(&fs, path, &ValidateOptions::default(), &|_| {}).unwrap();
    assert_eq!(Some(summary.checksum), report.checksum);
    let expected = Summary::of_records(&generate_vec(&spec).unwrap(), KeyOrder::Bytes);
    assert_eq!(summary, expected);
}

#[test]
fn eio_while_validating_is_an_error_not_a_summary() {
    let (fs, path) = setup();
    generate_file(
        &fs,
        path,
        &GenerateSpec::binary(1000),
        &WriteOptions::default(),
        &|_| {},
    )
    .unwrap();
    fs.fail_after(0, Fault::once(libc::EIO).on(FaultTarget::Kind(OpKind::Read)));
    let error = validate_file(&fs, path, &ValidateOptions::default(), &|_| {}).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    assert!(error.to_string().contains("/data/input.dat"), "{error}");
    // The disk recovered: the next validation succeeds.
    assert!(validate_file(&fs, path, &ValidateOptions::default(), &|_| {}).is_ok());
}

#[test]
fn a_directory_as_output_is_refused_before_any_work() {
    let (fs, _) = setup();
    let error = generate_file(
        &fs,
        Path::new("/data"),
        &GenerateSpec::binary(BLOCK_RECORDS),
        &WriteOptions::default(),
        &|_| panic!("nothing is generated"),
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("/data is a directory"), "{error}");
    assert_eq!(fs.list_dir(Path::new("/data")).unwrap(), Vec::<String>::new());
}
