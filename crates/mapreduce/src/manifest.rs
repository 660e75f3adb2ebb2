//! The job manifest: what a job's work directory holds, so that a job run
//! again after a crash resumes where the last run stopped.
//!
//! `job.json` in the work directory is JSON followed by a line
//! `crc32c XXXXXXXX` (the checksum of the JSON). It is written whole to
//! `job.json.tmp`, synced, and renamed over the old one (the directory
//! synced after), so it is always one complete version. It is written
//! twice per job: after phase zero (the partitioner) and after phase one
//! (the partition files, synced before).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use spillway_core::fs::replace_file;
use spillway_core::{crc32c, Error, Fs, Result};

use crate::input::{InputFormat, Inputs};
use crate::partition::Partitioner;

const VERSION: u32 = 1;

/// One partition file of phase one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShuffleFile {
    /// Its path.
    pub path: PathBuf,
    /// Its length.
    pub bytes: u64,
    /// Records in its chunks.
    pub records: u64,
}

/// A job's progress, as its work directory records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobManifest {
    version: u32,
    /// The job's name.
    pub job: String,
    /// Every input's path and length.
    pub inputs: Vec<(PathBuf, u64)>,
    /// The input format.
    pub format: InputFormat,
    /// The block size the inputs were cut with.
    pub block_bytes: u64,
    /// The partitioner phase zero chose.
    pub partitioner: Partitioner,
    /// The partition files, once phase one has completed and synced them.
    pub shuffled: Option<Vec<ShuffleFile>>,
}

impl JobManifest {
    /// The manifest's file name in a work directory.
    pub const FILE_NAME: &'static str = "job.json";

    /// The manifest of a job that has finished phase zero.
    pub fn new(job: String, inputs: &Inputs, block_bytes: u64, partitioner: Partitioner) -> Self {
        JobManifest {
            version: VERSION,
            job,
            inputs: inputs
                .paths()
                .map(Path::to_path_buf)
                .zip(inputs.lengths())
                .collect(),
            format: inputs.format(),
            block_bytes,
            partitioner,
            shuffled: None,
        }
    }

    /// Whether this manifest describes the same job over the same inputs
    /// (what it holds can be reused).
    pub fn matches(&self, other: &JobManifest) -> bool {
        self.job == other.job
            && self.inputs == other.inputs
            && self.format == other.format
            && self.block_bytes == other.block_bytes
    }

    /// Reads the manifest of `dir`, if it has one.
    ///
    /// # Errors
    /// [`Error::Corruption`] if it fails its checksum or does not parse.
    pub fn load(fs: &dyn Fs, dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(Self::FILE_NAME);
        if !fs.exists(&path)? {
            return Ok(None);
        }
        let file = fs.open_read(&path)?;
        let mut bytes = Vec::new();
        file.read_exact_append(&mut bytes, file.len()? as usize, 0)?;
        let corrupt = |what: String| Error::corruption(&path, 0, what);
        let text = std::str::from_utf8(&bytes).map_err(|_| corrupt("the manifest is not UTF-8".into()))?;
        let Some((json, trailer)) = text.trim_end().rsplit_once('\n') else {
            return Err(corrupt("the manifest has no checksum line".into()));
        };
        let stored = trailer
            .strip_prefix("crc32c ")
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
            .ok_or_else(|| {
                corrupt(format!(
                    "the manifest's last line '{trailer}' is not its checksum"
                ))
            })?;
        let computed = crc32c(json.as_bytes());
        if stored != computed {
            return Err(corrupt(format!(
                "manifest checksum mismatch: stored {stored:08x}, computed {computed:08x}"
            )));
        }
        let manifest: JobManifest = serde_json::from_str(json)
            .map_err(|error| corrupt(format!("the manifest does not parse: {error}")))?;
        if manifest.version != VERSION {
            return Err(corrupt(format!(
                "manifest version {}; this build reads version {VERSION}",
                manifest.version
            )));
        }
        manifest.partitioner.validate()?;
        Ok(Some(manifest))
    }

    /// Writes this manifest into `dir`, atomically and durably.
    pub fn store(&self, fs: &dyn Fs, dir: &Path) -> Result<()> {
        let json = serde_json::to_string(self)
            .map_err(|error| Error::Internal(format!("the job manifest does not serialize: {error}")))?;
        let text = format!("{json}\ncrc32c {:08x}\n", crc32c(json.as_bytes()));
        replace_file(fs, dir, Self::FILE_NAME, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::{ErrorKind, SimFs};

    fn manifest() -> JobManifest {
        JobManifest {
            version: VERSION,
            job: "wordcount".into(),
            inputs: vec![(PathBuf::from("/in/a.txt"), 1234)],
            format: InputFormat::Text,
            block_bytes: 4096,
            partitioner: Partitioner::Range {
                boundaries: vec![b"m".to_vec()].into(),
            },
            shuffled: Some(vec![ShuffleFile {
                path: "/work/part-00000.shuffle".into(),
                bytes: 10,
                records: 2,
            }]),
        }
    }

    #[test]
    fn a_stored_manifest_loads_back_and_damage_is_a_corruption_error() {
        let fs = SimFs::new();
        let dir = Path::new("/work");
        fs.create_dir_all(dir).unwrap();
        assert_eq!(JobManifest::load(&fs, dir).unwrap(), None);
        manifest().store(&fs, dir).unwrap();
        assert_eq!(JobManifest::load(&fs, dir).unwrap(), Some(manifest()));
        assert!(manifest().matches(&JobManifest {
            shuffled: None,
            ..manifest()
        }));
        assert!(!manifest().matches(&JobManifest {
            block_bytes: 8192,
            ..manifest()
        }));

        let path = dir.join(JobManifest::FILE_NAME);
        let file = fs.open_read_write(&path).unwrap();
        let mut bytes = vec![0u8; file.len().unwrap() as usize];
        file.read_exact_at(&mut bytes, 0).unwrap();
        let at = bytes.iter().position(|&byte| byte == b'w').unwrap();
        file.write_at(b"W", at as u64).unwrap();
        let error = JobManifest::load(&fs, dir).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(error.to_string().contains("job.json"), "{error}");
    }
}
