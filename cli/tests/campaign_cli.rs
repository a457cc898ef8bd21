//! `txbed campaign` from the command line (issue 17 item 6, docs/campaign.md): bad input exits
//! 2 naming the option or field; --out is refused when not empty; campaign.csv has its
//! columns, one row per run; with a planted bug the printed replay command runs as printed and
//! reproduces the verdict and the digest campaign.csv recorded.

use crate::common;

use common::out;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn txbed() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_txbed"));
    c.current_dir(root());
    c
}

fn scratch(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-campaign-cli-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const SB: &str = "scenarios/campaign/smallbank.ron";

#[test]
fn bad_input_exits_2_naming_the_option_or_field() {
    let d = scratch("bad");
    let o = d.join("o");
    let bad_profile = d.join("bad-profile.ron");
    std::fs::write(&bad_profile, "RandomFaults(crash: Some((per_ms: 1.0, down_us: (10, 20))))").unwrap();
    let typo_profile = d.join("typo-profile.ron");
    std::fs::write(&typo_profile, "RandomFaults(crashes: Some((per_ms: 1.0, down_us: (600, 700))))").unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["--faults", "nosuch"], vec!["--faults", "unknown fault profile `nosuch`", "mixed"]),
        (vec!["--faults", s(&bad_profile)], vec!["--faults", "faults.random.crash.down_us", "500"]),
        (vec!["--faults", s(&typo_profile)], vec!["--faults", "field named `crashes`", "crash"]),
        (vec!["--protocols", "occ,paxos"], vec!["--protocols", "`paxos` is not a protocol", "NOWAIT"]),
        (vec!["--set", "cluster.nodes=1"], vec!["cluster.nodes", "at least 2"]),
        (vec!["--set", "cluster.nodez=4"], vec!["cluster", "nodez"]),
        (vec!["--bug", "nosuch"], vec!["--bug", "OCC has no planted bug `nosuch`", "ForgetWal"]),
        (vec!["--seeds", "0"], vec!["--seeds"]),
        (vec!["--jobs", "0"], vec!["--jobs"]),
    ];
    for (extra, want) in cases {
        let mut args = vec!["campaign", SB, "--seeds", "2", "--out", s(&o)];
        args.extend(extra.iter());
        if extra[0] == "--seeds" {
            args.drain(2..4);
        }
        let (code, _, err) = out(txbed().args(&args));
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        for w in want {
            assert!(err.contains(w), "{extra:?}: want {w:?} in\n{err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    // A scenario without random faults needs --faults.
    let (code, _, err) = out(txbed().args(["campaign", "scenarios/quickstart.ron", "--seeds", "1", "--out", s(&o)]));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("faults.random") && err.contains("--faults PROFILE"), "{err}");
    assert!(!o.exists() || std::fs::read_dir(&o).unwrap().next().is_none(), "bad input wrote outputs");
}

#[test]
fn out_is_refused_when_not_empty_and_csv_has_its_columns() {
    let d = scratch("out");
    let o = d.join("o");
    std::fs::create_dir_all(&o).unwrap();
    std::fs::write(o.join("notes.txt"), "mine").unwrap();
    let args = |force: bool| {
        let mut a = vec!["campaign", SB, "--seeds", "3", "--protocols", "occ,nowait", "--faults", "network", "-q"];
        a.extend(["--out", s(&o)]);
        if force {
            a.push("--force");
        }
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let (code, _, err) = out(txbed().args(args(false)));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is not empty") && err.contains("notes.txt"), "{err}");
    let (code, _, err) = out(txbed().args(args(true)));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("did not write") && err.contains("notes.txt"), "{err}");
    assert!(o.join("notes.txt").exists(), "--force removed a foreign file");
    std::fs::remove_file(o.join("notes.txt")).unwrap();
    let (code, stdout, err) = out(txbed().args(args(false)));
    assert_eq!(code, Some(0), "{stdout}{err}");
    // -q: no table; failures would still be printed.
    assert!(stdout.is_empty(), "{stdout}");
    let mut r = csv::Reader::from_path(o.join("campaign.csv")).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header,
        [
            "protocol",
            "workload",
            "seed",
            "verdict",
            "detail",
            "faults_scheduled",
            "faults_applied",
            "committed",
            "rolled_forward",
            "locks_released",
            "digest",
            "wall_s",
            "shrunk_faults",
            "replay",
            "replay_digest"
        ]
    );
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    assert_eq!(rows.len(), 6);
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let protocols: Vec<&str> = rows.iter().map(|x| &x[col("protocol")]).collect();
    assert_eq!(protocols, ["OCC", "OCC", "OCC", "NOWAIT", "NOWAIT", "NOWAIT"]);
    for x in &rows {
        assert_eq!(&x[col("workload")], "SmallBank");
        assert_eq!(&x[col("verdict")], "clean", "{x:?}");
        assert_eq!(x[col("digest")].len(), 16, "{x:?}");
        assert!(x[col("committed")].parse::<u64>().unwrap() > 0, "{x:?}");
        assert!(x[col("replay")].is_empty());
    }
    // The same seeds give the same schedules and digests for both protocols' runs again, and
    // --force reuses the directory.
    let first: Vec<String> = rows.iter().map(|x| x[col("digest")].to_string()).collect();
    let (code, _, err) = out(txbed().args(args(true)));
    assert_eq!(code, Some(0), "{err}");
    let again: Vec<String> = csv::Reader::from_path(o.join("campaign.csv"))
        .unwrap()
        .records()
        .map(|x| x.unwrap()[col("digest")].to_string())
        .collect();
    assert_eq!(first, again);
}

#[test]
fn a_planted_bug_fails_and_the_printed_command_replays_it() {
    let d = scratch("bug");
    let o = d.join("o");
    let (code, stdout, err) = out(txbed().args([
        "campaign",
        SB,
        "--seeds",
        "3",
        "--faults",
        "crash",
        "--bug",
        "forget-wal",
        "--shrink-budget",
        "15",
        "--jobs",
        "2",
        "--out",
        s(&o),
    ]));
    assert_eq!(code, Some(1), "{stdout}{err}");
    assert!(err.contains("runs failed"), "{err}");
    assert!(
        stdout.contains("protocol") && stdout.contains("failures by kind") && stdout.contains("wall time"),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains(": txbed run ")).collect();
    assert!(!lines.is_empty(), "{stdout}");
    let rows: Vec<csv::StringRecord> =
        csv::Reader::from_path(o.join("campaign.csv")).unwrap().records().map(|x| x.unwrap()).collect();
    for line in lines {
        // "OCC seed 2: lost-writes (faults 2 -> 1, measured 2000 -> 1500 us): txbed run FILE --bug ForgetWal"
        let (head, cmd) = line.split_once(": txbed run ").unwrap();
        let seed = head.split_whitespace().nth(2).unwrap().trim_end_matches(':');
        let kind = head.split(": ").nth(1).unwrap().split_whitespace().next().unwrap();
        let row = rows.iter().find(|x| &x[2] == seed).unwrap_or_else(|| panic!("no row for {line}"));
        assert_eq!(&row[3], kind, "{line}");
        let args: Vec<&str> = cmd.split_whitespace().collect();
        assert_eq!(args[0], &row[13], "{line}");
        assert!(Path::new(args[0]).exists(), "{line}");
        assert_eq!(&args[1..], ["--bug", "ForgetWal"], "{line}");
        // Run exactly as printed (with --json to read the digest).
        let (code, json, err) = out(txbed().arg("run").args(&args).arg("--json"));
        assert_eq!(code, Some(1), "{line}: {err}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["digest"].as_str(), Some(&row[14]), "{line}");
        let serializable = v["check"]["serializable"].as_bool().unwrap();
        let lost = v["check"]["nothing_lost"].as_bool() == Some(false);
        match kind {
            "not-serializable" => assert!(!serializable, "{line}"),
            "lost-writes" => assert!(serializable && lost, "{line}"),
            other => panic!("FORGET_WAL gave {other}: {line}"),
        }
        // Without the bug the same file runs clean.
        let (code, _, err) = out(txbed().arg("run").arg(args[0]).arg("-q"));
        assert_eq!(code, Some(0), "{line}: {err}");
    }
}
