//! Iterative jobs: PageRank as a chain of jobs, one per iteration, each
//! reading the binary output of the one before.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::{ensure, scratch, Fs, Result};

use crate::driver::{run, JobReport};
use crate::jobs::JobSpec;
use crate::options::{JobOptions, Progress};
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
/// jobs live in scratch directories under `options.tmp_dir` (named after
/// this process), each removed once the next job has read it or when a job
/// fails; the last iteration writes `output` in `options.output_format`.
/// Returns every job's report, in order.
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
    // The states are scratch: a failed step cannot be resumed (the next
    // run names its states afresh), so their jobs keep no work directory.
    let state_options = JobOptions {
        output_format: OutputFormat::Binary,
        input_format: None,
        resumable: false,
        ..options.clone()
    };
    let state_dir = |step: usize| {
        options
            .tmp_dir
            .join(scratch::name("pagerank", &format!("state-{step}")))
    };
    let mut state = state_dir(0);
    let init = JobSpec::PageRankInit { vertices }.build()?;
    let initial = run(fs.clone(), init, edges, &state, &state_options, progress);
    reports.push(initial.inspect_err(|_| remove_state(&*fs, &state))?);
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
        remove_state(&*fs, &state);
        if outcome.is_err() && !last {
            remove_state(&*fs, &target);
        }
        reports.push(outcome?);
        state = target;
    }
    Ok(reports)
}

/// Removes a state directory with its files, as far as it can: the error
/// that matters is the job's, if there is one, and a state left behind is
/// swept by a later run once this process is gone.
fn remove_state(fs: &dyn Fs, dir: &Path) {
    let _ = scratch::remove_all(fs, dir);
}
