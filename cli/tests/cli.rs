//! End-to-end tests of the `txbed` command line.

use assert_cmd::Command;
use std::path::PathBuf;

fn txbed() -> Command {
    let mut c = Command::cargo_bin("txbed").expect("binary built");
    c.current_dir(root());
    c
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).expect("valid JSON")
}

/// The README's first command: OCC on SmallBank, checked serializable with nothing lost.
#[test]
fn quickstart_runs_occ_on_smallbank_and_checks_it() {
    let out = txbed().args(["run", "scenarios/quickstart.ron"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for word in
        ["OCC", "SmallBank", "throughput", "p99", "aborts", "stages", "digest", "serializable: yes, nothing lost"]
    {
        assert!(text.contains(word), "missing {word:?} in:\n{text}");
    }
    let r = json(&txbed().args(["run", "scenarios/quickstart.ron", "--json"]).output().unwrap().stdout);
    for key in [
        "seed",
        "digest",
        "throughput_tps",
        "committed",
        "aborted",
        "abort_rate",
        "latency_us",
        "stages",
        "verbs",
        "sim",
        "check",
    ] {
        assert!(r.get(key).is_some(), "report lacks {key}: {r}");
    }
    assert!(r["committed"].as_u64().unwrap() > 1000);
    assert_eq!(r["check"]["serializable"], true);
    assert_eq!(r["check"]["nothing_lost"], true);
    assert!(r["stages"]["read"]["mean_us"].as_f64().unwrap() > 0.0);
    assert!(r["stages"]["log"]["round_trips"].as_f64().unwrap() > 0.0);
    // Speed figures say which build made them, in report.json and on the text's wall line.
    let build = r["sim"]["build"].as_str().unwrap();
    let expected = if cfg!(debug_assertions) { "debug" } else { "release" };
    assert!(build.starts_with(expected), "sim.build {build:?}");
    assert!(text.contains(&format!("s ({build} build): set-up ")), "no build on the wall line:\n{text}");
    // The history it writes is checked clean by `txbed check`, replicas included.
    let h = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-quick.jsonl");
    let out = txbed().args(["run", "scenarios/quickstart.ron", "--history", h.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    let out = txbed().args(["check", h.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("serializable: yes, nothing lost"));
}

#[test]
fn verbs_scenario_runs_and_reports_a_digest() {
    let out = txbed().args(["run", "scenarios/verbs-read.ron", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = json(&out.stdout);
    let digest = r["digest"].as_str().unwrap();
    assert_eq!(digest.len(), 16);
    assert!(digest.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(r["throughput_mops_per_machine"].as_f64().unwrap() > 1.0);
    assert!(r["sim"]["events"].as_u64().unwrap() > 10_000);
    assert!(r["sim"]["events_per_s"].as_f64().unwrap() > 0.0);
    assert!(r["latency_us"]["p50"].as_f64().unwrap() > 0.5);
    // Same seed, same digest; another seed, another digest.
    let again = json(&txbed().args(["run", "scenarios/verbs-read.ron", "--json"]).output().unwrap().stdout);
    assert_eq!(again["digest"], r["digest"]);
    let other =
        json(&txbed().args(["run", "scenarios/verbs-read.ron", "--json", "--seed", "99"]).output().unwrap().stdout);
    assert_ne!(other["digest"], r["digest"]);
}

#[test]
fn text_report_names_the_numbers() {
    let out = txbed().args(["run", "scenarios/verbs-read.ron"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for word in ["throughput", "latency", "p99", "digest", "events/s"] {
        assert!(text.contains(word), "missing {word:?} in:\n{text}");
    }
}

/// Each malformed scenario fails with exit code 2 and a message naming the problem.
#[test]
fn malformed_scenarios_are_rejected_clearly() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("syntax.ron", "Scenario(\n  workload: Verbs((verb: Read,)\n", &["syntax.ron:", ":"]),
        ("unknown_field.ron", "Scenario(workload: Verbs((verb: Read)), clutser: ())", &["clutser", "cluster"]),
        ("zero_nodes.ron", "Scenario(cluster: (nodes: 0), workload: Verbs((verb: Read)))", &["cluster.nodes"]),
        ("bad_verb.ron", "Scenario(workload: Verbs((verb: Reed)))", &["Reed"]),
        ("atomic_size.ron", "Scenario(workload: Verbs((verb: Atomic, payload: 64)))", &["workload.payload", "8 bytes"]),
        ("rpc_size.ron", "Scenario(workload: Verbs((verb: Rpc, payload: 4096)))", &["workload.payload", "UD datagram"]),
        ("bad_nic.ron", "Scenario(cluster: (nic: \"cx9\"), workload: Verbs((verb: Read)))", &["cluster.nic", "cx4"]),
        ("negative.ron", "Scenario(cluster: (workers: -1), workload: Verbs((verb: Read)))", &["negative.ron:"]),
        ("no_workload.ron", "Scenario()", &["workload"]),
        ("no_protocol.ron", "Scenario(workload: SmallBank(()))", &["protocol", "needs a protocol"]),
        (
            "bad_bits.ron",
            "Scenario(protocol: Some((name: Nowait, mode: Code(34))), workload: SmallBank(()))",
            &["protocol.mode", "read (2)", "validate (32)"],
        ),
        (
            "replication.ron",
            "Scenario(protocol: Some((name: Occ, replication: 9)), workload: SmallBank(()))",
            &["protocol.replication", "cannot exceed nodes"],
        ),
        (
            "smallbank_range.ron",
            "Scenario(protocol: Some((name: Occ)), workload: SmallBank((hot_probability: 1.5)))",
            &["workload.hot_probability"],
        ),
        ("ycsb_unknown.ron", "Scenario(protocol: Some((name: Occ)), workload: Ycsb((opps: 3)))", &["opps", "ops"]),
        (
            "unsafe_lock.ron",
            "Scenario(protocol: Some((name: Occ, mode: Onesided)), workload: Ycsb(()))",
            &["protocol.mode", "HCA-level atomicity", "nics_per_node"],
        ),
        (
            "link_shape.ron",
            "Scenario(cluster: (nodes: 2, link_delay_us: Some([[0, 5]])), protocol: Some((name: Occ, replication: 2)), workload: SmallBank(()))",
            &["cluster.link_delay_us", "2 x 2"],
        ),
        (
            "link_self.ron",
            "Scenario(cluster: (nodes: 2, link_delay_us: Some([[0, 5], [5, 7]])), protocol: Some((name: Occ, replication: 2)), workload: SmallBank(()))",
            &["cluster.link_delay_us", "node 1 to itself"],
        ),
    ];
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-cli");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text, needles) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        for cmd in ["validate", "run"] {
            let out = txbed().args([cmd, path.to_str().unwrap()]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {name}: {err}");
            assert!(!err.contains("panicked"), "{cmd} {name} panicked: {err}");
            for n in *needles {
                assert!(err.contains(n), "{cmd} {name}: {n:?} not in {err:?}");
            }
        }
    }
    let out = txbed().args(["run", "no/such/file.ron"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn validate_accepts_the_shipped_scenarios() {
    for f in ["scenarios/quickstart.ron", "scenarios/verbs-read.ron"] {
        let out = txbed().args(["validate", f]).output().unwrap();
        assert!(out.status.success(), "{f}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn bad_flags_exit_2() {
    for args in [
        &["bench-verbs", "--nic", "cx9"][..],
        &["bench-verbs", "--nodes", "1"],
        &["bench-verbs", "--qps-per-node", "0"],
        &["bench-verbs", "--payloads", "0"],
        &["bench-verbs", "--bogus"],
        &["bench-verbs", "--jobs", "0"],
        &["sweep", "scenarios/sweeps/stage-optimizations.ron", "--jobs", "0"],
        &["sensitivity", "scenarios/quickstart.ron", "--jobs", "0"],
        &["hybrid-search", "scenarios/quickstart.ron", "--jobs", "99999"],
        &["frobnicate"],
    ] {
        let out = txbed().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Issue 16: input files must be regular files of bounded size. A FIFO named as a scenario or
/// sweep once hung the command, and `nic: "/dev/zero"` grew the process until the OOM killer
/// ended it; each is now refused at once with exit 2, naming the file and what it is.
#[test]
fn input_files_must_be_regular_and_bounded() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-cli-input");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let zero_nic = dir.join("zero-nic.ron");
    let quick = std::fs::read_to_string(root().join("scenarios/quickstart.ron")).unwrap();
    std::fs::write(&zero_nic, quick.replace(r#"nic: "cx4""#, r#"nic: "/dev/zero""#)).unwrap();
    let big = dir.join("big.ron");
    std::fs::write(&big, vec![b' '; 5 << 20]).unwrap();
    let fifo = dir.join("pipe.ron");
    let has_fifo = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
    let s = |p: &std::path::Path| p.display().to_string();
    let mut cases = vec![
        (vec!["run".to_string(), s(&zero_nic)], "a character device"),
        (vec!["validate".to_string(), s(&dir)], "a directory"),
        (vec!["validate".to_string(), s(&big)], "more than the"),
        (vec!["replay".to_string(), "/dev/zero".to_string()], "a character device"),
    ];
    if has_fifo {
        cases.push((vec!["run".to_string(), s(&fifo)], "a FIFO"));
        cases.push((vec!["sweep".to_string(), s(&fifo), "--out".to_string(), s(&dir.join("o"))], "a FIFO"));
    }
    for (args, says) in cases {
        let out = txbed().args(&args).timeout(std::time::Duration::from_secs(60)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A reduced bench-verbs run: JSON of the documented shape, and the same rows whatever the
/// number of parallel simulations.
#[test]
fn bench_verbs_json_shape_and_parallel_determinism() {
    let args =
        ["bench-verbs", "--json", "--payloads", "8,256", "--measure-us", "5", "--no-multi-object", "--nodes", "4"];
    let one = json(&txbed().args(args).args(["--jobs", "1"]).output().unwrap().stdout);
    let two = json(&txbed().args(args).args(["--jobs", "2"]).output().unwrap().stdout);
    assert_eq!(one["rows"], two["rows"]);
    assert_eq!(one["nic"], "cx4");
    let rows = one["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7, "READ, WRITE, UD RPC at 2 payloads + ATOMIC at 8 B");
    for r in rows {
        assert_eq!(r["bench"], "raw");
        assert_eq!(r["setting"], "4-node");
        assert!(r["mops_per_machine"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["verb"].is_string() && r["payload"].is_u64());
    }
    assert!(one["sim"]["events"].as_u64().unwrap() > 0);
    assert!(one["sim"]["events_per_s"].as_f64().unwrap() > 0.0);
}

/// `txbed check`: exit 0 on a clean history, 1 with an explained anomaly, 2 on a bad file;
/// `--export-elle` writes Elle's list-append JSON.
#[test]
fn check_reports_anomalies_with_exit_codes() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-check");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let clean = dir.join("clean.jsonl");
    std::fs::write(
        &clean,
        "{\"type\":\"txn\",\"id\":1,\"status\":\"committed\",\"writes\":[{\"key\":1,\"version\":1}]}\n\
         {\"type\":\"txn\",\"id\":2,\"status\":\"committed\",\"reads\":[{\"key\":1,\"version\":1}],\"writes\":[{\"key\":1,\"version\":2}]}\n\
         {\"type\":\"final\",\"key\":1,\"version\":2}\n\
         {\"type\":\"end\",\"txns\":2,\"committed\":2,\"aborted\":0,\"finals\":1,\"invariants\":0}\n",
    )
    .unwrap();
    let out = txbed().args(["check", clean.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("serializable: yes, nothing lost"));

    let skew = dir.join("skew.jsonl");
    std::fs::write(
        &skew,
        "{\"type\":\"txn\",\"id\":1,\"status\":\"committed\",\"reads\":[{\"key\":1,\"version\":0},{\"key\":2,\"version\":0}],\"writes\":[{\"key\":1,\"version\":1}]}\n\
         {\"type\":\"txn\",\"id\":2,\"status\":\"committed\",\"reads\":[{\"key\":1,\"version\":0},{\"key\":2,\"version\":0}],\"writes\":[{\"key\":2,\"version\":1}]}\n\
         {\"type\":\"end\",\"txns\":2,\"committed\":2,\"aborted\":0,\"finals\":0,\"invariants\":0}\n",
    )
    .unwrap();
    let elle = dir.join("elle.json");
    let out = txbed()
        .args(["check", skew.to_str().unwrap(), "--export-elle", elle.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let r = json(&out.stdout);
    assert_eq!(r["serializable"], false);
    assert_eq!(r["counts"]["G2-item"], 1);
    assert!(r["anomalies"][0]["explanation"].as_str().unwrap().contains("(rw)"));
    let e: serde_json::Value = serde_json::from_slice(&std::fs::read(&elle).unwrap()).unwrap();
    assert_eq!(e.as_array().unwrap().len(), 4);

    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"type\":\"txn\",\"id\":1}\n").unwrap();
    let out = txbed().args(["check", bad.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
    let out = txbed().args(["check", "no/such.jsonl"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
