//! Regions: created, reopened with their root, and refused with a clear
//! error when the file is not one, is damaged, or holds another structure.

use std::path::Path;

use spillway_core::ErrorKind;
use spillway_pmem::region::{HEADER, MIN_SIZE, ROOT_AT};
use spillway_pmem::{Hardware, Persist, Region, Tracing};

fn refused(result: spillway_core::Result<Region>, kind: ErrorKind) -> String {
    let error = result.expect_err("refused");
    assert_eq!(error.kind(), kind, "{error}");
    error.to_string()
}

/// Rewrites byte `at` of the file at `path` with `value`.
fn poke(path: &Path, at: usize, value: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] = value;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_region_keeps_its_root_and_bytes_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("table.pmem");
    let persist = Hardware::detect();
    {
        let region = Region::create(&path, 4 * MIN_SIZE, "cceh").unwrap();
        assert_eq!((region.len(), region.root()), (4 * MIN_SIZE, 0));
        persist.copy(&region, 128, b"persistent bytes");
        persist.flush(&region, 128, 16);
        persist.fence();
        persist.set_root(&region, 128);
        region.sync().unwrap();
    }
    let region = Region::open(&path, "cceh").unwrap();
    assert_eq!(region.root(), 128);
    assert_eq!(region.bytes(128, 16), b"persistent bytes");
    assert_eq!(region.len(), 4 * MIN_SIZE);
    let copy = Region::from_image(&region.image(), "cceh").unwrap();
    assert_eq!(
        (copy.root(), copy.bytes(128, 16)),
        (128, &b"persistent bytes"[..])
    );
}

/// A file's region starts on a 2 MiB boundary (where the kernel can map
/// 2 MiB pages), whatever address the kernel would have picked.
#[test]
fn a_file_region_is_mapped_on_a_huge_page_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let regions: Vec<_> = (0..3)
        .map(|i| {
            let path = dir.path().join(format!("r{i}.pmem"));
            (
                Region::create(&path, 3 * MIN_SIZE + i * 8 * MIN_SIZE, "cceh").unwrap(),
                path,
            )
        })
        .collect();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for (region, path) in &regions {
        let line = maps
            .lines()
            .find(|line| line.ends_with(path.to_str().unwrap()))
            .unwrap_or_else(|| panic!("no mapping of {}", path.display()));
        let start = usize::from_str_radix(line.split('-').next().unwrap(), 16).unwrap();
        assert_eq!(start % (2 << 20), 0, "{line}");
        assert!(region.huge_page_bytes() <= region.len());
        assert_eq!(region.bytes(HEADER - 64, 8), b"SPWYPMEM");
    }
}

#[test]
fn a_region_open_elsewhere_is_refused_until_it_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.pmem");
    let first = Region::create(&path, MIN_SIZE, "cceh").unwrap();
    let message = refused(Region::open(&path, "cceh"), ErrorKind::InvalidArgument);
    assert!(message.contains("open elsewhere"), "{message}");
    drop(first);
    Region::open(&path, "cceh").unwrap();
}

#[test]
fn bad_sizes_kinds_and_existing_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.pmem");
    assert!(refused(Region::create(&path, 0, "cceh"), ErrorKind::InvalidArgument).contains("0 bytes"));
    assert!(refused(Region::create(&path, 5000, "cceh"), ErrorKind::InvalidArgument).contains("pages"));
    assert!(refused(Region::create(&path, MIN_SIZE, ""), ErrorKind::InvalidArgument).contains("kind"));
    assert!(refused(
        Region::create(&path, MIN_SIZE, "too-long-kind"),
        ErrorKind::InvalidArgument
    )
    .contains("kind"));
    assert!(!path.exists(), "a refused region leaves no file");
    std::fs::write(&path, b"someone's data").unwrap();
    assert!(refused(Region::create(&path, MIN_SIZE, "cceh"), ErrorKind::Io).contains("creating"));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"someone's data",
        "an existing file is never overwritten"
    );
    assert!(refused(Region::open(&dir.path().join("absent"), "cceh"), ErrorKind::Io).contains("opening"));
}

#[test]
fn damaged_or_foreign_region_files_are_named_and_explained() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.pmem");
    let fresh = |path: &Path| {
        let _ = std::fs::remove_file(path);
        drop(Region::create(path, MIN_SIZE, "cceh").unwrap());
    };

    fresh(&path);
    poke(&path, 0, b'X');
    let message = refused(Region::open(&path, "cceh"), ErrorKind::Corruption);
    assert!(
        message.contains("r.pmem") && message.contains("magic"),
        "{message}"
    );

    fresh(&path);
    poke(&path, 20, b'z'); // inside the kind: covered by the checksum
    assert!(refused(Region::open(&path, "cceh"), ErrorKind::Corruption).contains("checksum"));

    fresh(&path);
    poke(&path, 8, 2); // the version, checked before the checksum
    assert!(refused(Region::open(&path, "cceh"), ErrorKind::Corruption).contains("version 2"));

    fresh(&path);
    let message = refused(Region::open(&path, "b3tree"), ErrorKind::InvalidArgument);
    assert!(message.contains("holds a cceh region, not a b3tree"), "{message}");

    fresh(&path);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..HEADER as usize - 1]).unwrap();
    assert!(refused(Region::open(&path, "cceh"), ErrorKind::Corruption).contains("too short"));
    let mut longer = bytes;
    longer.extend_from_slice(&[0; 4096]);
    std::fs::write(&path, &longer).unwrap();
    assert!(
        refused(Region::open(&path, "cceh"), ErrorKind::Corruption).contains("the header says 4096 bytes")
    );

    fresh(&path);
    poke(&path, ROOT_AT as usize + 2, 0xff); // a root far past the end
    assert!(refused(Region::open(&path, "cceh"), ErrorKind::Corruption).contains("root offset"));

    assert!(refused(Region::from_image(&[0; 100], "cceh"), ErrorKind::Corruption).contains("not a region"));
    assert!(refused(Region::from_image(&[0; 4096], "cceh"), ErrorKind::Corruption).contains("magic"));
}

#[test]
fn a_region_in_memory_is_checked_like_a_file() {
    let trace = Tracing::default();
    let region = Region::in_memory(MIN_SIZE, "test").unwrap();
    trace.set_root(&region, HEADER);
    let reopened = Region::from_image(&region.image(), "test").unwrap();
    assert_eq!(reopened.root(), HEADER);
    assert_eq!(reopened.path().to_str(), Some("<memory>"));
}

#[test]
#[should_panic(expected = "outside the region")]
fn a_word_past_the_end_is_a_bug_caught_at_once() {
    let region = Region::in_memory(MIN_SIZE, "test").unwrap();
    region.word(MIN_SIZE);
}
