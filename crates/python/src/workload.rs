//! The workload generators for Python: keyword options into the
//! generators' parameters (unset ones take the defaults of
//! `spillway_workload`, the command line's too), the file written by the
//! library, its report as JSON.

use std::io::Write;
use std::path::PathBuf;

use pyo3::prelude::*;
use serde::Serialize;
use spillway_core::{Error, Interrupt, Result};
use spillway_workload::{
    generate_to, with_option_names, write_clicks, write_kv, write_rmat, write_text, ClickParams, EdgeFormat,
    KvFormat, KvOptions, RmatParams, TextParams, TextSize, Written, DEFAULT_SEED, THREADS_DEFAULT,
};

use crate::errors::to_py_err;
use crate::interrupt::interruptible;
use crate::json::to_json;

/// A value the library parses from text, the error naming the option.
fn parsed<T: std::str::FromStr<Err = Error>>(text: Option<&str>) -> Result<Option<T>> {
    text.map(str::parse).transpose()
}

/// Runs `write` into `output` with Ctrl-C stopping it; the report as JSON,
/// parameter errors naming the keyword.
fn generate<S: Written + Serialize + Send>(
    py: Python<'_>,
    generator: &'static str,
    output: PathBuf,
    seed: u64,
    validated: Result<()>,
    write: impl FnOnce(&mut dyn Write) -> Result<S> + Send,
) -> PyResult<String> {
    let named = |error: Error| to_py_err(with_option_names(generator, error, str::to_string));
    let generated = interruptible(py, |interrupt: &Interrupt| {
        generate_to(generator, &output, seed, validated, interrupt, write)
    })?
    .map_err(named)?
    .ok_or_else(|| to_py_err(Error::Internal("the output was standard output".into())))?;
    to_json(&generated).map_err(to_py_err)
}

/// `spillway.workload.kv`.
#[pyfunction]
#[pyo3(signature = (output, *, preset=None, ops=None, key_bytes=None, value_bytes=None, keys=None,
    distribution=None, zipf_s=None, no_scramble=false, mix=None, compression_ratio=None, format=None,
    seed=DEFAULT_SEED))]
#[allow(clippy::too_many_arguments)]
pub fn workload_kv(
    py: Python<'_>,
    output: PathBuf,
    preset: Option<&str>,
    ops: Option<u64>,
    key_bytes: Option<usize>,
    value_bytes: Option<u64>,
    keys: Option<u64>,
    distribution: Option<&str>,
    zipf_s: Option<f64>,
    no_scramble: bool,
    mix: Option<&str>,
    compression_ratio: Option<f64>,
    format: Option<&str>,
    seed: u64,
) -> PyResult<String> {
    let defaults = KvOptions::default();
    let prepared = (|| {
        let options = KvOptions {
            preset: parsed(preset)?.unwrap_or(defaults.preset),
            operations: ops.unwrap_or(defaults.operations),
            key_bytes: key_bytes.unwrap_or(defaults.key_bytes),
            value_bytes: value_bytes.unwrap_or(defaults.value_bytes),
            key_count: keys,
            distribution: parsed(distribution)?,
            zipf_s,
            scrambled: !no_scramble,
            mix: parsed(mix)?,
            compression_ratio: compression_ratio.unwrap_or(defaults.compression_ratio),
            seed,
        };
        let format: KvFormat = parsed(format)?.unwrap_or(KvFormat::Text);
        Ok((options.params()?, format))
    })();
    let (params, format) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => return Err(to_py_err(with_option_names("kv", error, str::to_string))),
    };
    let validated = params.validate();
    generate(py, "kv", output, seed, validated, move |writer| {
        write_kv(&params, format, writer)
    })
}

/// `spillway.workload.text`.
#[pyfunction]
#[pyo3(signature = (output, *, bytes=None, lines=None, vocabulary=None, zipf_s=None,
    words_per_line=None, threads=THREADS_DEFAULT, seed=DEFAULT_SEED))]
#[allow(clippy::too_many_arguments)]
pub fn workload_text(
    py: Python<'_>,
    output: PathBuf,
    bytes: Option<u64>,
    lines: Option<u64>,
    vocabulary: Option<u64>,
    zipf_s: Option<f64>,
    words_per_line: Option<u32>,
    threads: usize,
    seed: u64,
) -> PyResult<String> {
    let defaults = TextParams::default();
    let size = match (bytes, lines) {
        (Some(bytes), None) => TextSize::Bytes(bytes),
        (None, Some(lines)) => TextSize::Lines(lines),
        (Some(_), Some(_)) => {
            let message = "text() takes bytes or lines, not both";
            return Err(to_py_err(Error::InvalidArgument(message.into())));
        }
        (None, None) => {
            let message = "text() needs bytes or lines";
            return Err(to_py_err(Error::InvalidArgument(message.into())));
        }
    };
    let params = TextParams {
        size,
        vocabulary_words: vocabulary.unwrap_or(defaults.vocabulary_words),
        zipf_exponent: zipf_s.unwrap_or(defaults.zipf_exponent),
        words_per_line: words_per_line.unwrap_or(defaults.words_per_line),
        threads,
        seed,
    };
    let validated = params.validate();
    generate(py, "text", output, seed, validated, move |writer| {
        write_text(&params, writer)
    })
}

/// `spillway.workload.rmat`.
#[pyfunction]
#[pyo3(signature = (output, *, scale=None, edge_factor=None, a=None, b=None, c=None,
    no_permute=false, binary=false, threads=THREADS_DEFAULT, seed=DEFAULT_SEED))]
#[allow(clippy::too_many_arguments)]
pub fn workload_rmat(
    py: Python<'_>,
    output: PathBuf,
    scale: Option<u32>,
    edge_factor: Option<u64>,
    a: Option<f64>,
    b: Option<f64>,
    c: Option<f64>,
    no_permute: bool,
    binary: bool,
    threads: usize,
    seed: u64,
) -> PyResult<String> {
    let defaults = RmatParams::default();
    let params = RmatParams {
        scale: scale.unwrap_or(defaults.scale),
        edge_factor: edge_factor.unwrap_or(defaults.edge_factor),
        a: a.unwrap_or(defaults.a),
        b: b.unwrap_or(defaults.b),
        c: c.unwrap_or(defaults.c),
        permute: !no_permute,
        threads,
        seed,
    };
    let format = if binary {
        EdgeFormat::Binary
    } else {
        EdgeFormat::Text
    };
    let validated = params.validate();
    generate(py, "rmat", output, seed, validated, move |writer| {
        write_rmat(&params, format, writer)
    })
}

/// `spillway.workload.clicks`.
#[pyfunction]
#[pyo3(signature = (output, *, users=None, clicks=None, user_zipf_s=None, no_scramble=false,
    urls=None, url_zipf_s=None, clicks_per_session=None, click_gap_ms=None,
    session_timeout_ms=None, arrival_gap_ms=None, start_ms=None, seed=DEFAULT_SEED))]
#[allow(clippy::too_many_arguments)]
pub fn workload_clicks(
    py: Python<'_>,
    output: PathBuf,
    users: Option<u64>,
    clicks: Option<u64>,
    user_zipf_s: Option<f64>,
    no_scramble: bool,
    urls: Option<u64>,
    url_zipf_s: Option<f64>,
    clicks_per_session: Option<f64>,
    click_gap_ms: Option<f64>,
    session_timeout_ms: Option<u64>,
    arrival_gap_ms: Option<f64>,
    start_ms: Option<u64>,
    seed: u64,
) -> PyResult<String> {
    let defaults = ClickParams::default();
    let params = ClickParams {
        users: users.unwrap_or(defaults.users),
        clicks: clicks.unwrap_or(defaults.clicks),
        user_zipf_exponent: user_zipf_s.unwrap_or(defaults.user_zipf_exponent),
        scramble_users: !no_scramble,
        urls: urls.unwrap_or(defaults.urls),
        url_zipf_exponent: url_zipf_s.unwrap_or(defaults.url_zipf_exponent),
        clicks_per_session_mean: clicks_per_session.unwrap_or(defaults.clicks_per_session_mean),
        click_gap_ms_mean: click_gap_ms.unwrap_or(defaults.click_gap_ms_mean),
        session_timeout_ms: session_timeout_ms.unwrap_or(defaults.session_timeout_ms),
        session_arrival_gap_ms_mean: arrival_gap_ms.unwrap_or(defaults.session_arrival_gap_ms_mean),
        start_timestamp_ms: start_ms.unwrap_or(defaults.start_timestamp_ms),
        seed,
    };
    let validated = params.validate();
    generate(py, "clicks", output, seed, validated, move |writer| {
        write_clicks(&params, writer)
    })
}
