//! Every built-in job on generated data, checked against an independent
//! computation of its answer, with small blocks and memory so that every
//! job runs over many blocks and several partitions.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::{ErrorKind, Fs, RealFs};
use spillway_mapreduce::{
    output_path, run, InputFormat, InputRecord, Job, JobOptions, JobParams, JobReport, JobSpec, MapOutput,
    OutputFormat, PairBuf, Partitioner, Partitioning, Values,
};
use spillway_workload::text::{TextParams, TextSize};

fn fs() -> Arc<dyn Fs> {
    Arc::new(RealFs::new())
}

fn quiet() -> spillway_mapreduce::Progress {
    Arc::new(|_, _, _| {})
}

/// Options that cut a few megabytes of input into dozens of blocks.
fn small_options(dir: &Path) -> JobOptions {
    JobOptions {
        memory_bytes: 16 << 20,
        block_bytes: 64 << 10,
        sample_bytes: 256 << 10,
        threads: 2,
        ..JobOptions::new(dir.join("tmp"))
    }
}

fn run_job(job: Arc<dyn Job>, inputs: &[PathBuf], output: &Path, options: &JobOptions) -> JobReport {
    let report = run(fs(), job, inputs, output, options, &quiet()).unwrap();
    let leftovers = std::fs::read_dir(&options.tmp_dir).unwrap().count();
    assert_eq!(leftovers, 0, "the job's work directory is removed");
    report
}

/// The output files of a job with `partitions` partitions, concatenated in
/// partition order.
fn read_output(output: &Path, partitions: usize, format: OutputFormat) -> Vec<u8> {
    let mut all = Vec::new();
    for partition in 0..partitions {
        all.extend(std::fs::read(output_path(output, partition, format)).unwrap());
    }
    all
}

fn tsv_lines(bytes: &[u8]) -> Vec<(String, String)> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|line| {
            let (key, value) = line.split_once('\t').unwrap();
            (key.to_string(), value.to_string())
        })
        .collect()
}

fn write_text(path: &Path, bytes: u64, seed: u64) -> Vec<u8> {
    let params = TextParams {
        size: TextSize::Bytes(bytes),
        vocabulary_words: 5000,
        seed,
        ..TextParams::default()
    };
    let mut text = Vec::new();
    spillway_workload::text::write_text(&params, &mut text).unwrap();
    std::fs::write(path, &text).unwrap();
    text
}

/// A counting job's output: every key and its count.
fn counts<C: FromIterator<(String, u64)>>(output: &Path, report: &JobReport) -> C {
    tsv_lines(&read_output(output, report.partitions, OutputFormat::Text))
        .into_iter()
        .map(|(key, count)| (key, count.parse().unwrap()))
        .collect()
}

fn is_sorted_by_key(lines: &[(String, String)]) -> bool {
    lines
        .windows(2)
        .all(|pair| pair[0].0.as_bytes() < pair[1].0.as_bytes())
}

#[test]
fn word_count_equals_a_hash_map_count_over_two_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = [dir.path().join("a.txt"), dir.path().join("b.txt")];
    let mut expected: HashMap<String, u64> = HashMap::new();
    for (index, input) in inputs.iter().enumerate() {
        let text = write_text(input, 3 << 20, index as u64 + 1);
        for word in String::from_utf8(text).unwrap().split_ascii_whitespace() {
            *expected.entry(word.to_string()).or_default() += 1;
        }
    }
    for partitioning in [Partitioning::Range, Partitioning::Hash] {
        let output = dir.path().join(format!("out-{partitioning:?}"));
        let options = JobOptions {
            partitioning,
            ..small_options(dir.path())
        };
        let report = run_job(JobSpec::WordCount.build().unwrap(), &inputs, &output, &options);
        assert!(
            report.partitions >= 2,
            "{partitioning:?}: {} partitions",
            report.partitions
        );
        let lines = tsv_lines(&read_output(&output, report.partitions, OutputFormat::Text));
        if partitioning == Partitioning::Range {
            assert!(
                is_sorted_by_key(&lines),
                "range partitions in order are one sorted output"
            );
        }
        let counted: HashMap<String, u64> = lines
            .into_iter()
            .map(|(word, count)| (word, count.parse().unwrap()))
            .collect();
        assert_eq!(counted, expected, "{partitioning:?}");
        assert_eq!(report.output_records, expected.len() as u64);
        assert_eq!(report.map_records, expected.values().sum::<u64>());
        // The combiner collapsed repeated words within each block.
        assert!(report.intermediate_records < report.map_records / 2, "{report:?}");
        assert_eq!(
            report.phase_zero.as_ref().map(|zero| zero.sampled_bytes > 0),
            Some(true)
        );
    }
}

/// Runs the `n`-gram count over `bytes` of generated text (named `name`,
/// from `seed`) with `options` and checks it against a count of the
/// text's word windows.
fn check_ngram_count(dir: &Path, name: &str, bytes: u64, seed: u64, n: usize, options: &JobOptions) {
    let input = dir.join(format!("{name}.txt"));
    let text = write_text(&input, bytes, seed);
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for line in String::from_utf8(text).unwrap().lines() {
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        for window in words.windows(n) {
            *expected.entry(window.join(" ")).or_default() += 1;
        }
    }
    let output = dir.join(format!("out-{name}"));
    let report = run_job(
        JobSpec::NgramCount { n }.build().unwrap(),
        &[input],
        &output,
        options,
    );
    let counted: BTreeMap<String, u64> = counts(&output, &report);
    assert_eq!(counted, expected, "{name}");
}

#[test]
fn ngram_count_counts_word_runs_within_lines() {
    let dir = tempfile::tempdir().unwrap();
    // A combiner far smaller than a block's distinct n-grams: it fills and
    // is emptied many times within each block.
    let options = JobOptions {
        combiner_bytes: 1 << 16,
        ..small_options(dir.path())
    };
    check_ngram_count(dir.path(), "3-grams", 1 << 20, 9, 3, &options);
    // 5-grams are nearly all distinct: after its first block, each mapper's
    // combiner lets them pass through uncombined.
    let options = JobOptions {
        block_bytes: 1 << 20,
        ..small_options(dir.path())
    };
    check_ngram_count(dir.path(), "5-grams", 6 << 20, 10, 5, &options);
}

#[test]
fn kmer_count_skips_headers_and_counts_every_window() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("reads.fa");
    let mut text = String::new();
    let mut state = 1u64;
    for read in 0..3000 {
        text.push_str(&format!(">read{read}\n"));
        let len = 30 + read % 40;
        for _ in 0..len {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            text.push(['A', 'C', 'G', 'T'][(state >> 62) as usize]);
        }
        text.push('\n');
    }
    std::fs::write(&input, &text).unwrap();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines().filter(|line| !line.starts_with('>')) {
        for start in 0..=line.len().saturating_sub(5) {
            if start + 5 <= line.len() {
                *expected.entry(line[start..start + 5].to_string()).or_default() += 1;
            }
        }
    }
    let output = dir.path().join("out");
    let options = JobOptions {
        block_bytes: 4096,
        ..small_options(dir.path())
    };
    let report = run_job(
        JobSpec::KmerCount { k: 5 }.build().unwrap(),
        &[input],
        &output,
        &options,
    );
    let counted: BTreeMap<String, u64> = counts(&output, &report);
    assert_eq!(counted, expected);
    // 1024 distinct 5-mers in many records each: every partition is
    // folded by key.
    assert_eq!(report.folded_partitions, report.partitions);
}

#[test]
fn inverted_index_lists_each_terms_documents_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("docs.tsv");
    let text = write_text(&dir.path().join("text"), 1 << 20, 4);
    let mut docs = String::new();
    let mut expected: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for (line, content) in String::from_utf8(text).unwrap().lines().enumerate() {
        // Ids out of order, so the index must sort them (numerically).
        let id = (line as u64 * 7919) % 100_003;
        docs.push_str(&format!("{id}\t{content}\n"));
        for term in content.split_ascii_whitespace() {
            expected.entry(term.to_string()).or_default().insert(id);
        }
    }
    std::fs::write(&input, docs).unwrap();
    let output = dir.path().join("out");
    let report = run_job(
        JobSpec::InvertedIndex.build().unwrap(),
        &[input],
        &output,
        &small_options(dir.path()),
    );
    // Postings are small records: phase zero cuts partitions whose radix
    // scratch fits a reducer's share, rather than ones that fill the quota.
    assert_eq!(report.radix_sorted_partitions, report.partitions);
    let lines = tsv_lines(&read_output(&output, report.partitions, OutputFormat::Text));
    assert!(is_sorted_by_key(&lines));
    let index: BTreeMap<String, Vec<u64>> = lines
        .into_iter()
        .map(|(term, ids)| (term, ids.split(',').map(|id| id.parse().unwrap()).collect()))
        .collect();
    let expected: BTreeMap<String, Vec<u64>> = expected
        .into_iter()
        .map(|(term, ids)| (term, ids.into_iter().collect()))
        .collect();
    assert_eq!(index, expected);
}

#[test]
fn grep_writes_the_matching_lines_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = [dir.path().join("a.txt"), dir.path().join("b.txt")];
    let mut expected = String::new();
    for (index, input) in inputs.iter().enumerate() {
        let text = String::from_utf8(write_text(input, 1 << 20, 20 + index as u64)).unwrap();
        for line in text.lines().filter(|line| line.contains("ab")) {
            expected.push_str(line);
            expected.push('\n');
        }
    }
    assert!(expected.len() > 1000, "the pattern occurs");
    let output = dir.path().join("out");
    let options = JobOptions {
        partitions: 3,
        ..small_options(dir.path())
    };
    let report = run_job(
        JobSpec::Grep { pattern: "ab".into() }.build().unwrap(),
        &inputs,
        &output,
        &options,
    );
    assert_eq!(report.partitions, 3);
    assert_eq!(
        String::from_utf8(read_output(&output, 3, OutputFormat::Text)).unwrap(),
        expected
    );
}

#[test]
fn sort_equals_the_sort_engines_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("records");
    let spec = spillway_sort::GenerateSpec::binary(40_000);
    std::fs::write(&input, spillway_sort::generate_vec(&spec).unwrap()).unwrap();
    let sorted = dir.path().join("sorted");
    let sort_options = spillway_sort::SortOptions::new(64 << 20, dir.path().join("sort-tmp"));
    let sort_progress: spillway_sort::Progress = Arc::new(|_, _, _| {});
    spillway_sort::sort_file(fs(), &input, &sorted, &sort_options, sort_progress).unwrap();

    let output = dir.path().join("out");
    let report = run_job(
        JobSpec::Sort.build().unwrap(),
        &[input],
        &output,
        &small_options(dir.path()),
    );
    assert!(report.partitions >= 2);
    assert_eq!(
        read_output(&output, report.partitions, OutputFormat::Text),
        std::fs::read(&sorted).unwrap()
    );
}

/// A job over the binary output of word count: the total of the counts
/// per word length, reading the counts back as key/value records.
#[derive(Debug)]
struct CountsByLength;

impl Job for CountsByLength {
    fn name(&self) -> String {
        "counts by word length".into()
    }

    fn input_format(&self) -> InputFormat {
        InputFormat::KeyValue
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> spillway_core::Result<()> {
        out.emit(&(record.key.len() as u32).to_be_bytes(), record.value)
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> spillway_core::Result<()> {
        let total: u64 = values
            .map(|count| std::str::from_utf8(count).unwrap().parse::<u64>().unwrap())
            .sum();
        out.push(key, total.to_string().as_bytes());
        Ok(())
    }

    fn write_text(&self, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        let length = u32::from_be_bytes(key.try_into().unwrap());
        out.extend_from_slice(format!("{length}\t").as_bytes());
        out.extend_from_slice(value);
        out.push(b'\n');
    }
}

#[test]
fn binary_output_reads_back_as_the_input_of_another_job() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("text.txt");
    let text = String::from_utf8(write_text(&input, 1 << 20, 5)).unwrap();
    let counts = dir.path().join("counts");
    let options = JobOptions {
        output_format: OutputFormat::Binary,
        ..small_options(dir.path())
    };
    let first = run_job(JobSpec::WordCount.build().unwrap(), &[input], &counts, &options);
    let parts: Vec<PathBuf> = (0..first.partitions)
        .map(|p| output_path(&counts, p, OutputFormat::Binary))
        .collect();

    let output = dir.path().join("by-length");
    let second = run_job(
        Arc::new(CountsByLength),
        &parts,
        &output,
        &small_options(dir.path()),
    );
    assert_eq!(second.input_records, first.output_records);
    let mut expected: BTreeMap<u32, u64> = BTreeMap::new();
    for word in text.split_ascii_whitespace() {
        *expected.entry(word.len() as u32).or_default() += 1;
    }
    let totals: BTreeMap<u32, u64> = tsv_lines(&read_output(&output, second.partitions, OutputFormat::Text))
        .into_iter()
        .map(|(length, total)| (length.parse().unwrap(), total.parse().unwrap()))
        .collect();
    assert_eq!(totals, expected);
}

#[test]
fn bad_jobs_and_bad_inputs_get_errors_that_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    std::fs::write(&text, "a b c\n").unwrap();
    let wordcount = JobSpec::WordCount.build().unwrap();
    let options = small_options(dir.path());
    let error_of = |job: Arc<dyn Job>, inputs: &[PathBuf], output: &Path, options: &JobOptions| {
        run(fs(), job, inputs, output, options, &quiet()).unwrap_err()
    };

    // An output directory that holds another job's output.
    let used = dir.path().join("used");
    run_job(wordcount.clone(), std::slice::from_ref(&text), &used, &options);
    let error = error_of(wordcount.clone(), std::slice::from_ref(&text), &used, &options);
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("part-00000"), "{error}");

    // gensort input that is not whole records.
    let error = error_of(
        JobSpec::Sort.build().unwrap(),
        std::slice::from_ref(&text),
        &dir.path().join("o1"),
        &options,
    );
    assert!(error.to_string().contains("gensort"), "{error}");

    // A missing input names the file.
    let missing = dir.path().join("missing.txt");
    let error = error_of(
        wordcount.clone(),
        std::slice::from_ref(&missing),
        &dir.path().join("o2"),
        &options,
    );
    assert!(error.to_string().contains("missing.txt"), "{error}");

    // A line longer than the record limit.
    let long = dir.path().join("long.txt");
    std::fs::write(&long, vec![b'x'; 300 << 10]).unwrap();
    let limited = JobOptions {
        limits: spillway_mapreduce::RecordLimits {
            key_bytes_max: 1024,
            value_bytes_max: 100 << 10,
        },
        ..options.clone()
    };
    let error = error_of(wordcount.clone(), &[long], &dir.path().join("o3"), &limited);
    assert!(error.to_string().contains("longer than"), "{error}");

    // A word longer than the key limit.
    let wide = dir.path().join("wide.txt");
    std::fs::write(&wide, [vec![b'y'; 2000], b"\n".to_vec()].concat()).unwrap();
    let error = error_of(wordcount.clone(), &[wide], &dir.path().join("o4"), &limited);
    assert!(error.to_string().contains("2000-byte key"), "{error}");

    // Options.
    for (bad, what) in [
        (
            JobOptions {
                memory_bytes: 1 << 20,
                ..options.clone()
            },
            "16 MiB",
        ),
        (
            JobOptions {
                partitions: 5000,
                ..options.clone()
            },
            "5000 partitions",
        ),
        (
            JobOptions {
                block_bytes: 100,
                ..options
            },
            "block size",
        ),
    ] {
        let error = error_of(
            wordcount.clone(),
            std::slice::from_ref(&text),
            &dir.path().join("o5"),
            &bad,
        );
        assert!(error.to_string().contains(what), "{error}");
    }
    assert!(JobSpec::named("ngram", &JobParams::default())
        .unwrap_err()
        .to_string()
        .contains("job ngram needs n"));
    assert!(JobSpec::named("nope", &JobParams::default())
        .unwrap_err()
        .to_string()
        .contains("wordcount"));
    let params = JobParams {
        vertices: Some(4),
        ..JobParams::default()
    };
    assert_eq!(
        JobSpec::named("pagerank", &params).unwrap(),
        JobSpec::PageRank {
            vertices: 4,
            damping: spillway_mapreduce::DAMPING_DEFAULT
        }
    );
    assert_eq!(
        JobSpec::named("inverted_index", &params).unwrap(),
        JobSpec::InvertedIndex
    );
    assert!(JobSpec::NgramCount { n: 0 }.build().is_err());
}

#[test]
fn a_job_spec_round_trips_through_json() {
    for spec in [
        JobSpec::WordCount,
        JobSpec::NgramCount { n: 5 },
        JobSpec::Grep {
            pattern: "x\ty".into(),
        },
        JobSpec::KmerCount { k: 21 },
    ] {
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<JobSpec>(&json).unwrap(), spec, "{json}");
    }
    let partitioner = Partitioner::Range {
        boundaries: vec![b"m".to_vec()].into(),
    };
    let json = serde_json::to_string(&partitioner).unwrap();
    assert_eq!(serde_json::from_str::<Partitioner>(&json).unwrap(), partitioner);
}

#[test]
fn sessionize_finds_the_generators_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("clicks.tsv");
    let params = spillway_workload::ClickParams {
        users: 2000,
        clicks: 60_000,
        ..spillway_workload::ClickParams::default()
    };
    let mut log = Vec::new();
    let summary = spillway_workload::write_clicks(&params, &mut log).unwrap();
    std::fs::write(&input, &log).unwrap();
    // Independently: every user's clicks in time order, cut at the gap.
    let mut clicks: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in String::from_utf8(log).unwrap().lines() {
        let mut fields = line.split('\t');
        let (user, time) = (fields.next().unwrap(), fields.next().unwrap());
        clicks
            .entry(user.to_string())
            .or_default()
            .push(time.parse().unwrap());
    }
    let mut expected: Vec<(String, u64, u64, u64)> = Vec::new();
    for (user, mut times) in clicks {
        times.sort_unstable();
        let mut start = 0;
        for index in 1..=times.len() {
            if index == times.len() || times[index] - times[index - 1] > params.session_timeout_ms {
                expected.push((
                    user.clone(),
                    times[start],
                    times[index - 1],
                    (index - start) as u64,
                ));
                start = index;
            }
        }
    }
    assert_eq!(expected.len() as u64, summary.sessions);

    let output = dir.path().join("out");
    let spec = JobSpec::Sessionize {
        gap_ms: params.session_timeout_ms,
    };
    let report = run_job(
        spec.build().unwrap(),
        &[input],
        &output,
        &small_options(dir.path()),
    );
    let sessions: Vec<(String, u64, u64, u64)> =
        String::from_utf8(read_output(&output, report.partitions, OutputFormat::Text))
            .unwrap()
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split('\t').collect();
                (
                    fields[0].to_string(),
                    fields[1].parse().unwrap(),
                    fields[2].parse().unwrap(),
                    fields[3].parse().unwrap(),
                )
            })
            .collect();
    assert_eq!(sessions, expected);
}

#[test]
fn a_bad_field_names_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("clicks.tsv");
    std::fs::write(&input, "u1\t100\t/a\nu2\tsoon\t/b\n").unwrap();
    let spec = JobSpec::Sessionize { gap_ms: 10 };
    let error = run(
        fs(),
        spec.build().unwrap(),
        &[input],
        &dir.path().join("out"),
        &small_options(dir.path()),
        &quiet(),
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let message = error.to_string();
    assert!(
        message.contains("clicks.tsv") && message.contains("'soon'") && message.contains("offset 10"),
        "{message}"
    );
}

#[test]
fn pagerank_iterations_equal_an_in_memory_computation() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("edges.tsv");
    let params = spillway_workload::RmatParams {
        scale: 10,
        edge_factor: 8,
        ..spillway_workload::RmatParams::default()
    };
    let mut edges_text = Vec::new();
    spillway_workload::write_rmat(&params, spillway_workload::EdgeFormat::Text, &mut edges_text).unwrap();
    std::fs::write(&input, &edges_text).unwrap();
    let vertices = 1u64 << params.scale;
    let edges: Vec<(u64, u64)> = String::from_utf8(edges_text)
        .unwrap()
        .lines()
        .map(|line| {
            let (source, target) = line.split_once('\t').unwrap();
            (source.parse().unwrap(), target.parse().unwrap())
        })
        .collect();

    // Independently: vertices that appear in an edge, ranks iterated in memory.
    let (damping, iterations) = (0.85, 3);
    let mut ranks: BTreeMap<u64, f64> = BTreeMap::new();
    let mut degree: HashMap<u64, usize> = HashMap::new();
    for &(source, target) in &edges {
        ranks.insert(source, 1.0 / vertices as f64);
        ranks.insert(target, 1.0 / vertices as f64);
        *degree.entry(source).or_default() += 1;
    }
    for _ in 0..iterations {
        let mut sums: HashMap<u64, f64> = HashMap::new();
        for &(source, target) in &edges {
            *sums.entry(target).or_default() += ranks[&source] / degree[&source] as f64;
        }
        for (vertex, rank) in ranks.iter_mut() {
            *rank = (1.0 - damping) / vertices as f64 + damping * sums.get(vertex).copied().unwrap_or(0.0);
        }
    }

    let output = dir.path().join("ranks");
    let pagerank = spillway_mapreduce::PageRankParams {
        vertices,
        damping,
        iterations,
    };
    let options = small_options(dir.path());
    let reports =
        spillway_mapreduce::run_pagerank(fs(), &[input], &output, pagerank, &options, &quiet()).unwrap();
    assert_eq!(reports.len(), iterations + 1);
    assert_eq!(
        std::fs::read_dir(&options.tmp_dir).unwrap().count(),
        0,
        "the states between iterations are removed"
    );
    let last = reports.last().unwrap();
    assert_eq!(
        last.radix_sorted_partitions, last.partitions,
        "8-byte vertex keys are radix sorted"
    );
    let computed: BTreeMap<u64, f64> = tsv_lines(&read_output(&output, last.partitions, OutputFormat::Text))
        .into_iter()
        .map(|(vertex, rank)| (vertex.parse().unwrap(), rank.parse().unwrap()))
        .collect();
    assert_eq!(computed.len(), ranks.len());
    for (vertex, rank) in &ranks {
        let got = computed[vertex];
        assert!(
            (got - rank).abs() <= 1e-12 * rank.abs().max(1e-9),
            "vertex {vertex}: {got} vs {rank}"
        );
    }
}

/// A job whose map output is 32 times its input: each line, under 32 keys.
#[derive(Debug)]
struct Repeat;

impl Job for Repeat {
    fn name(&self) -> String {
        "repeat".into()
    }

    fn map(&self, record: &InputRecord<'_>, out: &mut MapOutput<'_>) -> spillway_core::Result<()> {
        for copy in 0..32u8 {
            out.emit_parts(&[copy], &[record.value])?;
        }
        Ok(())
    }

    fn reduce(&self, key: &[u8], values: Values<'_>, out: &mut PairBuf) -> spillway_core::Result<()> {
        let bytes: usize = values.map(<[u8]>::len).sum();
        out.push(key, bytes.to_string().as_bytes());
        Ok(())
    }

    fn write_text(&self, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(format!("{}\t", key[0]).as_bytes());
        out.extend_from_slice(value);
        out.push(b'\n');
    }
}

#[test]
fn a_block_whose_output_passes_the_mapped_quota_still_goes_through() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("text.txt");
    let text = write_text(&input, 2 << 20, 3);
    // 1 MiB blocks make 32 MiB of map output each, past the quarter of the
    // 64 MiB budget that mapped blocks may hold.
    let options = JobOptions {
        memory_bytes: 64 << 20,
        block_bytes: 1 << 20,
        partitions: 2,
        ..small_options(dir.path())
    };
    let output = dir.path().join("out");
    let report = run_job(Arc::new(Repeat), &[input], &output, &options);
    let line_bytes: usize = String::from_utf8(text).unwrap().lines().map(str::len).sum();
    let totals = tsv_lines(&read_output(&output, report.partitions, OutputFormat::Text));
    assert_eq!(totals.len(), 32);
    assert!(
        totals
            .iter()
            .all(|(_, bytes)| bytes.parse::<usize>().unwrap() == line_bytes),
        "{totals:?}"
    );
}

#[test]
fn an_edge_past_the_vertex_count_fails_pagerank_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("edges.tsv");
    std::fs::write(&input, "0\t1\n1\t2\n2\t63\n").unwrap();
    let output = dir.path().join("ranks");
    let options = small_options(dir.path());
    let pagerank = spillway_mapreduce::PageRankParams {
        vertices: 10,
        damping: 0.85,
        iterations: 2,
    };
    let error =
        spillway_mapreduce::run_pagerank(fs(), &[input], &output, pagerank, &options, &quiet()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let message = error.to_string();
    assert!(
        message.contains("vertex 63") && message.contains("10 vertices"),
        "{message}"
    );
    assert!(
        message.contains("edges.tsv"),
        "the message names the file: {message}"
    );
    // Neither the state of the first step nor the output is left behind.
    assert_eq!(std::fs::read_dir(&options.tmp_dir).unwrap().count(), 0);
    assert!(!output.exists());
}

#[test]
fn an_interrupted_job_leaves_no_work_directory_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("words.txt");
    write_text(&input, 4 << 20, 7);
    let output = dir.path().join("counts");
    let interrupt = spillway_core::Interrupt::new();
    let options = JobOptions {
        interrupt: interrupt.clone(),
        ..small_options(dir.path())
    };
    // Raised once phase two reports progress: partition files exist then,
    // and outputs may.
    let progress: spillway_mapreduce::Progress = Arc::new(move |what: &str, done: u64, _: u64| {
        if what.contains("reduce") && done > 0 {
            interrupt.raise();
        }
    });
    let error = run(
        fs(),
        JobSpec::WordCount.build().unwrap(),
        &[input],
        &output,
        &options,
        &progress,
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Interrupted, "{error}");
    assert_eq!(
        std::fs::read_dir(&options.tmp_dir).unwrap().count(),
        0,
        "no work directory"
    );
    assert!(!output.exists(), "no output");
}

#[test]
fn a_directory_or_a_missing_file_as_input_is_refused_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("counts");
    let options = small_options(dir.path());
    let error = run(
        fs(),
        JobSpec::WordCount.build().unwrap(),
        &[dir.path().to_path_buf()],
        &output,
        &options,
        &quiet(),
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("is a directory"), "{error}");
    let missing = dir.path().join("missing.txt");
    let error = run(
        fs(),
        JobSpec::WordCount.build().unwrap(),
        &[missing],
        &output,
        &options,
        &quiet(),
    )
    .unwrap_err();
    assert!(error.to_string().contains("missing.txt"), "{error}");
    assert!(!output.exists());
}
