//! Saved trees: a round trip gives the same tree; any damage is reported as
//! corruption (or a refused version), never a panic or a wrong answer.

use std::path::Path;

use spillway_core::fs::{CrashMode, Fault, FaultTarget, TearGranularity};
use spillway_core::{ErrorKind, Fs, Interrupt, RealFs, SimFs};
use spillway_knn::{Build, BuildOptions, Method, Points, QueryOptions, SsTree};

fn sample_tree(dims: usize, n: usize, build: Build) -> (SsTree, Vec<f64>) {
    let data: Vec<f64> = (0..n * dims).map(|i| ((i * 7919) % 997) as f64 * 0.5).collect();
    let options = BuildOptions {
        leaf_size: 8,
        degree: 4,
        build,
        ..BuildOptions::default()
    };
    (
        SsTree::build(Points::f64(&data, dims).unwrap(), &options, &Interrupt::new()).unwrap(),
        data,
    )
}

#[test]
fn a_saved_tree_loads_equal_and_answers_alike() {
    let dir = tempfile::tempdir().unwrap();
    let fs = RealFs::new();
    for build in [Build::KMeans, Build::Hilbert] {
        let (tree, data) = sample_tree(3, 500, build);
        let path = dir.path().join("tree.sst");
        tree.save(&fs, &path).unwrap();
        let loaded = SsTree::load(&fs, &path).unwrap();
        assert_eq!(loaded.stats().nodes, tree.stats().nodes);
        let options = QueryOptions {
            method: Method::Psb,
            threads: 1,
            ..QueryOptions::default()
        };
        let queries = &data[..30];
        assert_eq!(
            loaded
                .query(queries, 5, &options, &Interrupt::new())
                .unwrap()
                .indices,
            tree.query(queries, 5, &options, &Interrupt::new())
                .unwrap()
                .indices
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no staged file is left behind"
        );
    }
    // f32 points stay f32.
    let narrow: Vec<f32> = (0..400).map(|i| i as f32).collect();
    let tree = SsTree::build(
        Points::f32(&narrow, 4).unwrap(),
        &BuildOptions::default(),
        &Interrupt::new(),
    )
    .unwrap();
    let path = dir.path().join("narrow.sst");
    tree.save(&fs, &path).unwrap();
    assert_eq!(SsTree::load(&fs, &path).unwrap().dtype(), "f32");
}

fn load_image(image: &[u8], dir: &Path) -> spillway_core::Result<SsTree> {
    let path = dir.join("damaged.sst");
    std::fs::write(&path, image).unwrap();
    SsTree::load(&RealFs::new(), &path)
}

#[test]
fn every_flipped_byte_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (tree, _) = sample_tree(2, 60, Build::KMeans);
    let path = dir.path().join("tree.sst");
    tree.save(&RealFs::new(), &path).unwrap();
    let image = std::fs::read(&path).unwrap();
    for at in 0..image.len() {
        let mut damaged = image.clone();
        damaged[at] ^= 0x10;
        let error =
            load_image(&damaged, dir.path()).expect_err(&format!("a flip at byte {at} went unnoticed"));
        assert_eq!(error.kind(), ErrorKind::Corruption, "byte {at}: {error}");
        assert!(error.to_string().contains("damaged.sst"), "{error}");
    }
}

#[test]
fn another_format_version_is_refused_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let (tree, _) = sample_tree(2, 60, Build::KMeans);
    let path = dir.path().join("tree.sst");
    tree.save(&RealFs::new(), &path).unwrap();
    let mut image = std::fs::read(&path).unwrap();
    image[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = spillway_core::crc32c(&image[..60]);
    image[60..64].copy_from_slice(&crc.to_le_bytes());
    let error = load_image(&image, dir.path()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("version 2"), "{error}");
}

#[test]
fn truncation_extension_and_sections_from_another_tree_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    let fs = RealFs::new();
    let (first, _) = sample_tree(2, 60, Build::KMeans);
    let (second, _) = sample_tree(2, 60, Build::KMeans);
    first.save(&fs, &dir.path().join("a.sst")).unwrap();
    second.save(&fs, &dir.path().join("b.sst")).unwrap();
    let a = std::fs::read(dir.path().join("a.sst")).unwrap();
    let b = std::fs::read(dir.path().join("b.sst")).unwrap();
    assert_eq!(a.len(), b.len());
    for cut in [0, 10, 64, a.len() / 2, a.len() - 1] {
        assert_eq!(
            load_image(&a[..cut], dir.path()).unwrap_err().kind(),
            ErrorKind::Corruption,
            "cut at {cut}"
        );
    }
    let mut longer = a.clone();
    longer.extend_from_slice(&[0; 8]);
    assert_eq!(
        load_image(&longer, dir.path()).unwrap_err().kind(),
        ErrorKind::Corruption
    );
    // The same layout, another tree id: b's body under a's header.
    let mut spliced = a[..64].to_vec();
    spliced.extend_from_slice(&b[64..]);
    assert_eq!(
        load_image(&spliced, dir.path()).unwrap_err().kind(),
        ErrorKind::Corruption
    );
}

#[test]
fn a_file_that_is_not_a_tree_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = load_image(
        b"just some text, long enough to fill a header of sixty-four bytes....",
        dir.path(),
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains("bad magic"), "{error}");
    let missing = SsTree::load(&RealFs::new(), &dir.path().join("missing.sst")).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Io);
}

#[test]
fn saves_are_atomic_under_crashes() {
    // A save that fails or crashes at any operation leaves the old tree or
    // the new one, whole.
    let (old, _) = sample_tree(2, 40, Build::Hilbert);
    let (new, _) = sample_tree(3, 90, Build::KMeans);
    let dir = Path::new("/trees");
    let path = dir.join("t.sst");
    let mut saw = [false, false];
    for operation in 0..40 {
        let fs = SimFs::new();
        fs.create_dir_all(dir).unwrap();
        old.save(&fs, &path).unwrap();
        fs.fail_after(operation, Fault::for_good(libc::EIO).on(FaultTarget::Mutations));
        let saved = new.save(&fs, &path).is_ok();
        fs.clear_fault();
        fs.crash(CrashMode::TearUnsynced {
            seed: operation,
            granularity: TearGranularity::Byte,
        });
        let loaded = SsTree::load(&fs, &path)
            .unwrap_or_else(|error| panic!("failure at operation {operation}: {error}"));
        assert!(loaded.dims() == 3 || !saved, "a save that succeeded was lost");
        saw[loaded.dims() - 2] = true;
        if saved {
            break;
        }
    }
    assert_eq!(saw, [true, true]);
}
