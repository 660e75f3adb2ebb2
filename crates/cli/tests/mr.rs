//! `spillway mr` as a user runs it: generated text counted, the report in
//! JSON, a chained PageRank, and bad command lines refused with a reason.

use serde_json::Value;

mod common;

use common::{failure, path_str, spillway, success};

#[test]
fn word_count_of_generated_text_matches_the_generators_vocabulary() {
    let directory = tempfile::tempdir().unwrap();
    let text = directory.path().join("text.txt");
    let generated: Value = serde_json::from_str(&success(&[
        "gen",
        "text",
        "--bytes",
        "2M",
        "-o",
        path_str(&text),
        "--json",
    ]))
    .unwrap();
    let output = directory.path().join("counts");
    let report: Value = serde_json::from_str(&success(&[
        "mr",
        "wordcount",
        path_str(&text),
        "-o",
        path_str(&output),
        "--memory",
        "64M",
        "--block-size",
        "256K",
        "--json",
    ]))
    .unwrap();
    assert_eq!(report["output_records"], generated["distinct_words"], "{report}");
    assert_eq!(report["map_records"], generated["words"]);
    let partitions = report["partitions"].as_u64().unwrap();
    let mut total = 0u64;
    for partition in 0..partitions {
        let counts = std::fs::read_to_string(output.join(format!("part-{partition:05}.tsv"))).unwrap();
        total += counts
            .lines()
            .map(|line| line.split('\t').nth(1).unwrap().parse::<u64>().unwrap())
            .sum::<u64>();
    }
    assert_eq!(Some(total), generated["words"].as_u64());

    // Text report: throughput and the stage tables.
    let again = spillway(&[
        "mr",
        "ngram",
        "--n",
        "2",
        path_str(&text),
        "-o",
        path_str(&directory.path().join("bigrams")),
    ]);
    assert!(again.status.success());
    let stderr = String::from_utf8(again.stderr).unwrap();
    assert!(
        stderr.contains("2-gram count") && stderr.contains("phase one") && stderr.contains("mapper"),
        "{stderr}"
    );
}

#[test]
fn pagerank_runs_its_iterations_and_reports_each_job() {
    let directory = tempfile::tempdir().unwrap();
    let edges = directory.path().join("edges.tsv");
    success(&[
        "gen",
        "rmat",
        "--scale",
        "8",
        "--edge-factor",
        "4",
        "-o",
        path_str(&edges),
    ]);
    let output = directory.path().join("ranks");
    let reports: Value = serde_json::from_str(&success(&[
        "mr",
        "pagerank",
        path_str(&edges),
        "-o",
        path_str(&output),
        "--vertices",
        "256",
        "--iterations",
        "2",
        "--memory",
        "32M",
        "--json",
    ]))
    .unwrap();
    assert_eq!(reports.as_array().unwrap().len(), 3, "init and two iterations");
    let ranks = std::fs::read_to_string(output.join("part-00000.tsv")).unwrap();
    let first = ranks.lines().next().unwrap();
    let rank: f64 = first.split('\t').nth(1).unwrap().parse().unwrap();
    assert!(rank > 0.0 && rank < 1.0, "{first}");
}

#[test]
fn bad_command_lines_say_what_is_wrong() {
    let directory = tempfile::tempdir().unwrap();
    let text = directory.path().join("text.txt");
    std::fs::write(&text, "a b\n").unwrap();
    let output = directory.path().join("out");
    let (text, output) = (path_str(&text), path_str(&output));
    assert!(failure(&["mr", "ngram", text, "-o", output]).contains("job ngram needs n"));
    assert!(failure(&["mr", "nope", text, "-o", output]).contains("unknown job"));
    assert!(
        failure(&["mr", "wordcount", text, "-o", output, "--format", "xml"]).contains("unknown input format")
    );
    assert!(failure(&["mr", "wordcount", "/no/such/file", "-o", output]).contains("/no/such/file"));
}

#[test]
fn pagerank_refuses_an_edge_past_the_vertex_count_and_a_failed_job_leaves_nothing() {
    let directory = tempfile::tempdir().unwrap();
    let edges = directory.path().join("edges.tsv");
    let lines: String = (0..64)
        .map(|vertex| format!("{vertex}\t{}\n", (vertex * 7 + 1) % 64))
        .collect();
    std::fs::write(&edges, lines).unwrap();
    let ranks = directory.path().join("ranks");
    let message = failure(&[
        "mr",
        "pagerank",
        path_str(&edges),
        "-o",
        path_str(&ranks),
        "--vertices",
        "10",
        "--memory",
        "32M",
    ]);
    assert!(
        message.contains("vertex") && message.contains("10 vertices"),
        "{message}"
    );
    assert!(message.contains("edges.tsv"), "{message}");
    let left: Vec<_> = std::fs::read_dir(directory.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("edges.tsv")]);

    // A missing input: no output directory is made.
    let counts = directory.path().join("counts");
    let message = failure(&[
        "mr",
        "wordcount",
        path_str(&directory.path().join("missing.txt")),
        "-o",
        path_str(&counts),
    ]);
    assert!(message.contains("missing.txt"), "{message}");
    assert!(!counts.exists());
    // Python's spelling of a job name works here too.
    let text = directory.path().join("text.txt");
    std::fs::write(&text, "a b\nb c\n").unwrap();
    success(&[
        "mr",
        "inverted_index",
        path_str(&text),
        "-o",
        path_str(&directory.path().join("index")),
    ]);
}
