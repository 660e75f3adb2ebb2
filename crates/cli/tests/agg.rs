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

fn run_on(contents: &str, arguments: &[&str]) -> (Output, tempfile::TempDir) {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("data.csv");
    std::fs::write(&input, contents).unwrap();
    let mut all = vec!["agg", input.to_str().unwrap()];
    all.extend_from_slice(arguments);
    (spillway(&all), directory)
}

#[test]
fn mixed_types_and_values_out_of_range_are_errors_naming_file_line_and_column() {
    for (contents, arguments, messages) in [
        (
            // Once accepted, then "the CBTs lost records" at finalize.
            "a,1\nb,2\nc,3\na,seven\n",
            &["--value", "2", "-f", "min"][..],
            &[
                "data.csv line 4, column 2",
                "key \"a\": min cannot take a byte string here",
                "values are numbers (the first was an integer for key \"a\")",
            ][..],
        ),
        (
            "a,x\nb,2\n",
            &["--value", "2", "-f", "top_k(2)", "--engine", "hash"],
            &[
                "data.csv line 2, column 2",
                "top_k(2) cannot take an integer here",
            ],
        ),
        (
            // Once read as a float, silently.
            "a,1\nb,99999999999999999999\n",
            &["--value", "2", "-f", "sum"],
            &[
                "data.csv line 2, column 2",
                "'99999999999999999999' is an integer outside the 64-bit range",
            ],
        ),
        (
            "a,1\nb,-99999999999999999999\n",
            &["--value", "2", "-f", "max", "--value-type", "int"],
            &["data.csv line 2, column 2", "outside the 64-bit range"],
        ),
        (
            // Once read as text.
            "a,1\nb,NaN\n",
            &["--value", "2", "-f", "mean"],
            &["data.csv line 2, column 2", "'NaN' is not a finite number"],
        ),
        (
            "a,1\nb,-inf\n",
            &["--value", "2", "-f", "sum", "--value-type", "float"],
            &["data.csv line 2, column 2", "'-inf' is not a finite number"],
        ),
        (
            "a,1\nb,1e999\n",
            &["--value", "2", "-f", "first"],
            &["data.csv line 2, column 2", "'1e999' is not a finite number"],
        ),
        (
            "a,1\nb,text\n",
            &["--value", "2", "-f", "sum"],
            &[
                "data.csv line 2, column 2",
                "key \"b\": sum takes numbers, not a byte string",
            ],
        ),
    ] {
        let directory = tempfile::tempdir().unwrap();
        let input = directory.path().join("data.csv");
        std::fs::write(&input, contents).unwrap();
        let output = directory.path().join("out.tsv");
        let mut all = vec!["agg", input.to_str().unwrap(), "-o", output.to_str().unwrap()];
        all.extend_from_slice(arguments);
        let run = spillway(&all);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{arguments:?}: {stderr}");
        for message in messages {
            assert!(stderr.contains(message), "{arguments:?}: {stderr}");
        }
        assert!(!output.exists(), "{arguments:?}: a failed run writes no results");
        let left: Vec<_> = std::fs::read_dir(directory.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            ["data.csv"],
            "{arguments:?}: a failed run leaves no partial file"
        );
    }
}

#[test]
fn integer_sums_past_64_bits_are_exact_and_text_stays_text() {
    let (run, _directory) = run_on(
        "k,9223372036854775807\nk,9223372036854775807\nk,2\nm,-9223372036854775808\nm,-1\n",
        &["--value", "2", "-f", "sum"],
    );
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let got = results(&run.stdout);
    assert_eq!(got["k"], "18446744073709551616");
    assert_eq!(got["m"], "-9223372036854775809");
    // In text mode a NaN is a word like any other.
    let (run, _directory) = run_on(
        "k,NaN\nk,inf\n",
        &["--value", "2", "-f", "collect_list", "--value-type", "text"],
    );
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(results(&run.stdout)["k"], "[NaN,inf]");
}

#[test]
fn impossible_options_are_refused_before_any_work() {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("data.csv");
    std::fs::write(&input, "a,1\n").unwrap();
    let path = input.to_str().unwrap();
    let folder = directory.path().to_str().unwrap();
    let nowhere = directory.path().join("missing/out.tsv");
    for (arguments, message) in [
        (
            vec!["agg", path, "--threads", "100000"],
            "threads must be from 0 to 1024",
        ),
        (
            vec!["agg", path, "-o", folder],
            "is a directory; give a file name",
        ),
        (
            vec!["agg", path, "-o", nowhere.to_str().unwrap()],
            "missing does not exist",
        ),
        (vec!["agg", folder], "is a directory; give a delimited text file"),
    ] {
        let run = spillway(&arguments);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{arguments:?}: {stderr}");
        assert!(stderr.contains(message), "{arguments:?}: {stderr}");
    }
}

#[test]
fn a_signal_stops_the_run_removes_its_output_and_exits_130_or_143() {
    for (signal, status) in [("-INT", 130), ("-TERM", 143)] {
        let directory = tempfile::tempdir().unwrap();
        let output = directory.path().join("out.tsv");
        // Far more records than the run gets through before the signal.
        let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args([
                "agg",
                "--generate",
                "10000M",
                "--keys",
                "1M",
                "-o",
                output.to_str().unwrap(),
            ])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        let killed = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        // Generous: it stops within milliseconds; a run that ignores the
        // signal would take hours.
        let mut waited = 0;
        let exit = loop {
            if let Some(exit) = child.try_wait().unwrap() {
                break exit;
            }
            if waited >= 30_000 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{signal}: still running 30 s after the signal");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            waited += 20;
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(exit.code(), Some(status), "{signal}: {stderr}");
        assert!(stderr.contains("interrupted"), "{signal}: {stderr}");
        let left: Vec<_> = std::fs::read_dir(directory.path()).unwrap().collect();
        assert!(left.is_empty(), "{signal}: left {left:?}");
    }
}

#[test]
fn groups_by_several_columns_with_a_value_column_per_function() {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("sales.tsv");
    let mut text = String::from("region\tstore\tunits\tprice\n");
    let mut expected: BTreeMap<(String, String), (i64, f64, u64)> = BTreeMap::new();
    for index in 0..30_000i64 {
        // A key with a comma and a quote, which CSV output must quote.
        let region = if index % 11 == 0 {
            "north, \"old\"".to_string()
        } else {
            format!("r{}", index % 7)
        };
        let store = format!("s{}", index * 13 % 29);
        let (units, price) = (index % 50 - 10, (index % 400) as f64 / 8.0);
        text.push_str(&format!("{region}\t{store}\t{units}\t{price}\n"));
        let entry = expected.entry((region, store)).or_default();
        entry.0 += units;
        entry.1 += price;
        entry.2 += 1;
    }
    std::fs::write(&input, text).unwrap();
    let output = directory.path().join("totals.csv");
    let run = spillway(&[
        "agg",
        input.to_str().unwrap(),
        "-d",
        "\\t",
        "--header",
        "--key",
        "1,2",
        "--value",
        "3,4",
        "--function",
        "sum+mean",
        "--engine",
        "hash",
        "-o",
        output.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let report = String::from_utf8_lossy(&run.stderr);
    assert!(
        report.contains(&format!("30000 records, {} keys", expected.len())),
        "{report}"
    );
    assert!(report.contains("typed path"), "{report}");
    let written = std::fs::read_to_string(&output).unwrap();
    let mut lines = written.lines();
    assert_eq!(lines.next(), Some("key_1,key_2,sum,mean"));
    let mut seen = 0;
    for line in lines {
        // The one quoted key: "north, ""old""".
        let (region, rest) = match line.strip_prefix("\"north, \"\"old\"\"\",") {
            Some(rest) => ("north, \"old\"".to_string(), rest),
            None => {
                let (region, rest) = line.split_once(',').unwrap();
                (region.to_string(), rest)
            }
        };
        let fields: Vec<&str> = rest.split(',').collect();
        let (units, price_sum, count) = expected[&(region, fields[0].to_string())];
        assert_eq!(fields[1].parse::<i64>().unwrap(), units, "{line}");
        let mean: f64 = fields[2].parse().unwrap();
        assert!((mean - price_sum / count as f64).abs() < 1e-9, "{line}");
        seen += 1;
    }
    assert_eq!(seen, expected.len());
    // Standard output: a tab-separated column per key and function.
    let run = spillway(&[
        "agg",
        input.to_str().unwrap(),
        "-d",
        "\\t",
        "--header",
        "--key",
        "2",
        "--value",
        "3",
        "--function",
        "count+max",
        "--engine",
        "hash",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(stdout.lines().count(), 29);
    assert!(
        stdout.lines().all(|line| line.split('\t').count() == 3),
        "{stdout}"
    );
}

#[test]
fn typed_columns_refuse_what_they_cannot_read() {
    let contents = "a,1,x\nb,2.5,y\n";
    for (arguments, message) in [
        (
            vec!["--key", "1,3", "--value", "2", "-f", "sum"],
            "several --key or --value columns take --engine hash",
        ),
        (
            vec![
                "--key", "1,3", "--value", "2", "-f", "top_k(2)", "--engine", "hash",
            ],
            "several --key or --value columns take --engine hash",
        ),
        (
            vec![
                "--key",
                "1,3",
                "--value",
                "2",
                "-f",
                "sum",
                "--engine",
                "hash",
                "--value-type",
                "int",
            ],
            "line 2, column 2: '2.5' is not an integer",
        ),
        (
            vec!["--value", "3", "-f", "sum", "--engine", "hash"],
            "line 1, column 3: 'x' is not a number",
        ),
        (
            vec![
                "--value",
                "2",
                "-f",
                "sum",
                "--engine",
                "hash",
                "--value-type",
                "text",
            ],
            "--value-type text has no typed form",
        ),
        (
            vec![
                "--key",
                "1,4",
                "--value",
                "2",
                "-f",
                "sum",
                "--engine",
                "hash",
                "--value-type",
                "float",
            ],
            "line 1: no column 4 (the line has 3)",
        ),
        (
            vec![
                "--key", "1,3", "--value", "2,2,2", "-f", "sum+mean", "--engine", "hash",
            ],
            "3 value columns for 2 functions",
        ),
    ] {
        let (run, _directory) = run_on(contents, &arguments);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{arguments:?}: {stderr}");
        assert!(stderr.contains(message), "{arguments:?}: {stderr}");
    }
    let (run, _directory) = run_on(
        contents,
        &[
            "--key",
            "1,3",
            "--value",
            "2",
            "-f",
            "sum",
            "--engine",
            "hash",
            "--value-type",
            "float",
        ],
    );
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mut lines: Vec<String> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    assert_eq!(lines, ["a\tx\t1", "b\ty\t2.5"]);
}
