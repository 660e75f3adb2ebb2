//! Iterative jobs: PageRank as a chain of jobs, one per iteration, each
//! reading the binary output of the one before.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::{ensure, Fs, Result};

use crate::driver::{run, JobOptions, JobReport, Progress};
use crate::jobs::JobSpec;
use crate::output::{output_path, OutputFormat};

/// A PageRank computation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageRankParams {
    /// Vertices in the graph.
    pub vertices: u64,
    /// The damping factor, in (0, 1).
    pub damping: f64,
    /// Iterations to run.
    pub iterations: usize,
}

/// Runs PageRank over the edge list `edges` (lines `src<TAB>dst`) for
/// `params.iterations` iterations: `pagerank-init` builds the graph's state, then
/// each iteration is one [`JobSpec::PageRank`] job. The states between
/// jobs live in directories under `options.tmp_dir`, each removed once the
/// next job has read it; the last iteration writes `output` in
/// `options.output_format`. Returns every job's report, in order.
pub fn run_pagerank(
    fs: Arc<dyn Fs>,
    edges: &[PathBuf],
    output: &Path,
    params: PageRankParams,
    options: &JobOptions,
    progress: &Progress,
) -> Result<Vec<JobReport>> {
    let PageRankParams {
        vertices,
        damping,
        iterations,
    } = params;
    ensure!(
        iterations >= 1,
        InvalidArgument,
        "PageRank needs at least one iteration"
    );
    let mut reports = Vec::with_capacity(iterations + 1);
    let state_options = JobOptions {
        output_format: OutputFormat::Binary,
        input_format: None,
        ..options.clone()
    };
    let state_dir = |step: usize| {
        options
            .tmp_dir
            .join(format!("pagerank-state-{}-{step}", std::process::id()))
    };
    let mut state = state_dir(0);
    let init = JobSpec::PageRankInit { vertices }.build()?;
    reports.push(run(fs.clone(), init, edges, &state, &state_options, progress)?);
    for iteration in 1..=iterations {
        let last = iteration == iterations;
        let target = if last {
            output.to_path_buf()
        } else {
            state_dir(iteration)
        };
        let inputs: Vec<PathBuf> = (0..reports[iteration - 1].partitions)
            .map(|partition| output_path(&state, partition, OutputFormat::Binary))
            .collect();
        let job = JobSpec::PageRank { vertices, damping }.build()?;
        let job_options = if last {
            JobOptions {
                input_format: None,
                ..options.clone()
            }
        } else {
            state_options.clone()
        };
        let outcome = run(fs.clone(), job, &inputs, &target, &job_options, progress);
        remove_output(&*fs, &state, &inputs)?;
        reports.push(outcome?);
        state = target;
    }
    Ok(reports)
}

/// Removes a state directory and its files.
fn remove_output(fs: &dyn Fs, dir: &Path, files: &[PathBuf]) -> Result<()> {
    for file in files {
        fs.remove_file(file)?;
    }
    std::fs::remove_dir(dir)
        .map_err(|error| spillway_core::Error::io(format!("removing {}", dir.display()), error))
}
