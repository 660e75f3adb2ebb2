//! `spillway agg`: results checked against a direct computation, both
//! engines, generated data, and clear errors for bad input.

use std::collections::BTreeMap;
use std::process::{Command, Output};

fn spillway(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(arguments)
        .output()
        .expect("the spillway binary runs")
}

fn results(text: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(text)
        .lines()
        .map(|line| {
            let (key, value) = line.split_once('\t').expect("key<TAB>result");
            (key.to_string(), value.to_string())
        })
        .collect()
}

#[test]
fn sums_a_csv_file_by_key_with_both_engines() {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("sales.csv");
    let mut csv = String::from("region,item,amount\r\n");
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for index in 0..20_000i64 {
        let region = format!("r{}", index * 7 % 131);
        let amount = index % 97 - 40;
        csv.push_str(&format!("{region},item{index},{amount}\r\n"));
        *expected.entry(region).or_default() += amount;
    }
    std::fs::write(&input, csv).unwrap();
    for engine in ["cbt", "hash"] {
        let output = directory.path().join(format!("{engine}.tsv"));
        let run = spillway(&[
            "agg",
            input.to_str().unwrap(),
            "--header",
            "--key",
            "1",
            "--value",
            "3",
            "--function",
            "sum",
            "--engine",
            engine,
            "--buffer",
            "64K",
            "--output",
            output.to_str().unwrap(),
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let report = String::from_utf8_lossy(&run.stderr);
        assert!(report.contains("20000 records, 131 keys"), "{report}");
        let got = results(&std::fs::read(&output).unwrap());
        let want: BTreeMap<String, String> =
            expected.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        assert_eq!(got, want, "{engine}");
    }
}

#[test]
fn aggregates_generated_data_and_reports_json() {
    let output = spillway(&[
        "agg",
        "--generate",
        "50K",
        "--keys",
        "1K",
        "--function",
        "count",
        "--output",
        "-",
        "--json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["records"], 51_200, "50K is 50 x 1024");
    assert_eq!(report["stats"]["inserts"], 51_200);
    assert_eq!(report["stats"]["engine"], "cbt");
    let keys = report["keys"].as_u64().unwrap();
    assert!(
        (500..=1024).contains(&keys),
        "{keys} distinct keys of 1K Zipf ranks"
    );
}

#[test]
fn text_values_and_lists_are_printed() {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("words.tsv");
    std::fs::write(&input, "a\tpear\nb\tfig\na\tapple\na\tpear\n").unwrap();
    let output = spillway(&[
        "agg",
        input.to_str().unwrap(),
        "-d",
        "\\t",
        "--value",
        "2",
        "--function",
        "collect_set",
        "--engine",
        "hash",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let got = results(&output.stdout);
    assert_eq!(got["a"], "[apple,pear]");
    assert_eq!(got["b"], "[fig]");
}

#[test]
fn bad_input_gets_errors_naming_the_line() {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("bad.csv");
    std::fs::write(&input, "k,1\nk\n").unwrap();
    let path = input.to_str().unwrap();
    for (arguments, message) in [
        (
            vec!["agg", path, "--value", "2", "-f", "sum"],
            "line 2: no column 2 (the line has 1)",
        ),
        (
            vec!["agg", path, "--value", "2", "-f", "median"],
            "unknown aggregate function 'median'",
        ),
        (vec!["agg", path, "-f", "sum"], "--value N is needed for sum"),
        (vec!["agg", path, "--engine", "btree"], "use 'cbt' or 'hash'"),
        (
            vec!["agg", path, "--value", "1", "-f", "sum", "--value-type", "int"],
            "line 1, column 1: 'k' is not an integer",
        ),
    ] {
        let output = spillway(&arguments);
        assert_eq!(output.status.code(), Some(1), "{arguments:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{arguments:?}: {stderr}");
    }
}
