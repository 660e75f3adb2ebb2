//! `SimFs` behaves like a POSIX file system where engines can observe it:
//! errors, short reads, lengths, listings, direct I/O alignment, threads.

use std::path::Path;
use std::sync::Arc;

use spillway_core::fs::{
    AlignedBuffer, Creation, Fs, FsFile, OpenOptions, SimFs, DIRECT_IO_ALIGNMENT_BYTES, SIM_FILE_BYTES_MAX,
};
use spillway_core::ErrorKind;

#[test]
fn reads_past_the_end_and_short_reads() {
    let fs = SimFs::new();
    let file = fs.create(Path::new("/f")).unwrap();
    file.write_at(b"0123456789", 0).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(file.read_at(&mut buf, 8).unwrap(), 2);
    assert_eq!(&buf[..2], b"89");
    assert_eq!(file.read_at(&mut buf, 10).unwrap(), 0);
    assert_eq!(file.read_at(&mut buf, u64::MAX).unwrap(), 0);
    let error = file.read_exact_at(&mut buf, 8).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Io);
    assert_eq!(
        error.to_string(),
        "reading 4 bytes at offset 8 of /f: short read: the file ends after 2 of the 4 bytes"
    );
    match &error {
        spillway_core::Error::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::UnexpectedEof)
        }
        other => panic!("{other}"),
    }
    file.read_exact_at(&mut buf, 6).unwrap();
    assert_eq!(&buf, b"6789");
}

#[test]
fn writes_past_the_end_fill_the_gap_with_zeros() {
    let fs = SimFs::new();
    let file = fs.create(Path::new("f")).unwrap();
    file.write_at(b"x", 5).unwrap();
    let mut buf = [9u8; 6];
    file.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"\0\0\0\0\0x");
    file.set_len(8).unwrap();
    assert_eq!(fs.file_len(Path::new("f")).unwrap(), 8);
    file.allocate(0, 4096).unwrap();
    assert_eq!(file.len().unwrap(), 4096);
    file.allocate(10, 10).unwrap();
    assert_eq!(file.len().unwrap(), 4096);
    let error = file.write_at(b"x", SIM_FILE_BYTES_MAX).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EFBIG));
}

#[test]
fn posix_errors_for_missing_and_existing_names() {
    let fs = SimFs::new();
    let error = fs.create(Path::new("/missing/000001.list")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    assert!(
        error
            .to_string()
            .starts_with("creating /missing/000001.list for reading and writing: "),
        "{error}"
    );
    fs.create_dir_all(Path::new("/db/sub")).unwrap();
    fs.create(Path::new("/db/a")).unwrap();
    let error = fs.create(Path::new("/db/a")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EEXIST));
    let error = fs.open_read(Path::new("/db/b")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    let error = fs.open_read(Path::new("/db/sub")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EISDIR));
    let error = fs.remove_file(Path::new("/db/b")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    let error = fs.rename(Path::new("/db/b"), Path::new("/db/c")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    let error = fs
        .rename(Path::new("/db/a"), Path::new("/nowhere/a"))
        .unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    let error = fs.list_dir(Path::new("/db/a")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOTDIR));
    let error = fs.create_dir_all(Path::new("/db/a/x")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOTDIR));
    let error = fs.sync_dir(Path::new("/nowhere")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    let error = fs.open(Path::new("/db/../a"), OpenOptions::read()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn read_only_handles_refuse_writes() {
    let fs = SimFs::new();
    fs.create(Path::new("/a")).unwrap().write_at(b"abc", 0).unwrap();
    let reader = fs.open_read(Path::new("/a")).unwrap();
    for error in [
        reader.write_at(b"x", 0).unwrap_err(),
        reader.append(b"x").unwrap_err(),
        reader.set_len(0).unwrap_err(),
    ] {
        assert_eq!(error.raw_os_error(), Some(libc::EBADF), "{error}");
    }
    assert_eq!(reader.len().unwrap(), 3);
}

#[test]
fn open_modes_create_truncate_or_keep() {
    let fs = SimFs::new();
    let path = Path::new("/a");
    fs.create(path).unwrap().write_at(b"abc", 0).unwrap();
    let options = OpenOptions {
        creation: Creation::CreateOrOpen,
        ..OpenOptions::read_write()
    };
    assert_eq!(fs.open(path, options).unwrap().len().unwrap(), 3);
    assert_eq!(fs.create_or_truncate(path).unwrap().len().unwrap(), 0);
    assert_eq!(fs.open(Path::new("/b"), options).unwrap().len().unwrap(), 0);
    assert_eq!(fs.list_dir(Path::new("/")).unwrap(), vec!["a", "b"]);
}

#[test]
fn listing_is_sorted_and_includes_subdirectories() {
    let fs = SimFs::new();
    fs.create_dir_all(Path::new("data/zz")).unwrap();
    for name in ["000010.list", "000002.list", "CURRENT", "MANIFEST-000003"] {
        fs.create(&Path::new("data").join(name)).unwrap();
    }
    assert_eq!(
        fs.list_dir(Path::new("./data")).unwrap(),
        vec!["000002.list", "000010.list", "CURRENT", "MANIFEST-000003", "zz"]
    );
    assert_eq!(fs.list_dir(Path::new(".")).unwrap(), vec!["data"]);
    assert!(fs.exists(Path::new("data/zz")).unwrap());
    assert!(fs.exists(Path::new("data/CURRENT")).unwrap());
    assert!(!fs.exists(Path::new("data/nope")).unwrap());
    assert!(!fs.exists(Path::new("nope/nope")).unwrap());
}

#[test]
fn direct_handles_enforce_alignment() {
    let fs = SimFs::new();
    let file = fs
        .open(Path::new("/d"), OpenOptions::create_new().with_direct(true))
        .unwrap();
    let block = DIRECT_IO_ALIGNMENT_BYTES as usize;
    let mut buffer = AlignedBuffer::zeroed(2 * block);
    buffer.fill(3);
    file.write_at(&buffer, 0).unwrap();
    assert_eq!(file.append(&buffer[..block]).unwrap(), 2 * block as u64);
    assert_eq!(fs.stats().direct_write_bytes, 3 * block as u64);
    let error = file.write_at(&buffer[1..=block], 0).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let error = file.write_at(&buffer[..block], 512).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let mut small = AlignedBuffer::zeroed(512);
    let error = file.read_at(&mut small, 0).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let mut read_back = AlignedBuffer::zeroed(3 * block);
    file.read_exact_at(&mut read_back, 0).unwrap();
    assert!(read_back.iter().all(|&byte| byte == 3));
}

#[test]
fn concurrent_appends_get_distinct_offsets() {
    let fs = SimFs::new();
    let shared: Arc<dyn Fs> = Arc::new(fs.clone());
    let file: Arc<dyn FsFile> = Arc::from(shared.create(Path::new("/log")).unwrap());
    let threads: Vec<_> = (0..4u8)
        .map(|thread| {
            let file = Arc::clone(&file);
            std::thread::spawn(move || {
                (0..100)
                    .map(|_| file.append(&[thread; 16]).unwrap())
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut offsets: Vec<(u64, u8)> = Vec::new();
    for (thread, handle) in threads.into_iter().enumerate() {
        offsets.extend(
            handle
                .join()
                .unwrap()
                .into_iter()
                .map(|offset| (offset, thread as u8)),
        );
    }
    offsets.sort_unstable();
    assert_eq!(offsets.len(), 400);
    for (index, (offset, thread)) in offsets.iter().enumerate() {
        assert_eq!(*offset, index as u64 * 16);
        let mut record = [0u8; 16];
        file.read_exact_at(&mut record, *offset).unwrap();
        assert_eq!(record, [*thread; 16]);
    }
    assert_eq!(fs.stats().write_bytes, 400 * 16);
}
