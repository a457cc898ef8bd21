//! The researcher's workflow end to end through the `txbed` binary: run with --set and --out,
//! validate a suite of malformed scenarios, sweep, replay (with a trace), plot.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn txbed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txbed")).args(args).current_dir(root()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-workflow-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Each file in tests/malformed starts with `// expect: <text>`: `validate` and `run` must both
/// exit 2 with that text in the message, and never panic.
#[test]
fn malformed_scenarios_get_their_message_and_exit_2() {
    let dir = root().join("cli/tests/malformed");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 15, "the suite has {} files", files.len());
    for f in files {
        let body = std::fs::read_to_string(&f).unwrap();
        let want = body.lines().next().and_then(|l| l.strip_prefix("// expect: ")).expect("// expect: line").trim();
        for cmd in ["validate", "run"] {
            let out = Command::new(env!("CARGO_BIN_EXE_txbed")).args([cmd, s(&f)]).current_dir(&dir).output().unwrap();
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {}: {err}", f.display());
            assert!(err.contains(want), "{cmd} {}:\n  want {want:?}\n  got  {err}", f.display());
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}

#[test]
fn set_switches_protocol_mode_and_workload_and_out_describes_the_run() {
    let d = scratch("set");
    let out = txbed(&[
        "run",
        "scenarios/quickstart.ron",
        "--set",
        "protocol.name=nowait",
        "--set",
        "protocol.mode=onesided",
        "--set",
        "cluster.nics_per_node=1",
        "--set",
        "workload.name=ycsb",
        "--set",
        "run.measure_us=300",
        "--seed",
        "5",
        "--out",
        s(&d),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("NOWAIT") && stdout.contains("on YCSB") && stdout.contains("one-sided"), "{stdout}");
    for f in ["report.json", "history.jsonl", "scenario.ron"] {
        assert!(d.join(f).metadata().map(|m| m.len() > 0).unwrap_or(false), "{f} missing");
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["seed"], 5);
    assert_eq!(report["protocol"], "NOWAIT");
    // The resolved scenario is a scenario file: it runs to the same digest without any flags.
    let resolved = std::fs::read_to_string(d.join("scenario.ron")).unwrap();
    assert!(resolved.contains("write_fraction") && resolved.contains("seed: 5"), "{resolved}");
    let again = txbed(&["run", s(&d.join("scenario.ron")), "--json"]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["digest"], report["digest"]);
    // The history is checkable.
    let check = txbed(&["check", s(&d.join("history.jsonl"))]);
    assert!(check.status.success(), "{}", text(&check.stdout));
    // -q prints nothing.
    let quiet = txbed(&["run", "scenarios/quickstart.ron", "-q", "--set", "run.measure_us=100"]);
    assert!(quiet.status.success() && quiet.stdout.is_empty() && quiet.stderr.is_empty());
}

#[test]
fn bad_sets_name_what_is_valid() {
    let cases = [
        ("protocol.nmae=occ", "unknown field `nmae`, expected one of `name`, `mode`"),
        (
            "cluster.nodes=many",
            "--set cluster.nodes=many: cluster.nodes: expected a whole number in 2..=1024, got many",
        ),
        ("protocol.name=paxos", "unknown protocol `paxos`, expected one of NOWAIT"),
        ("cluster.nodes=1", "(with --set): cluster.nodes: must be at least 2"),
        ("cluster.nodes", "expected path=value"),
        ("cluster..nodes=2", "is not a field path"),
        ("protocol.mode=Code(2", "expected ',' or ')'"),
        ("cluster.nodes.x=2", "cannot set .x"),
    ];
    for (set, want) in cases {
        let out = txbed(&["run", "scenarios/quickstart.ron", "--set", set]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--set {set}: {err}");
        assert!(err.contains(want), "--set {set}:\n  want {want:?}\n  got  {err}");
    }
}

#[test]
fn replay_reproduces_the_digest_and_writes_a_trace() {
    let d = scratch("replay");
    let run = txbed(&["run", "scenarios/quickstart.ron", "--set", "run.measure_us=200", "-q", "--out", s(&d)]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let report = d.join("report.json");
    let trace = d.join("trace.json");
    let out = txbed(&["replay", s(&report), "--trace", s(&trace)]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("matches"), "{}", text(&out.stdout));
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).expect("trace is JSON");
    let events = t["traceEvents"].as_array().expect("traceEvents");
    let names: Vec<&str> =
        events.iter().filter(|e| e["ph"] == "M").filter_map(|e| e["args"]["name"].as_str()).collect();
    for track in ["node 0", "worker", "coroutine", "QP"] {
        assert!(names.iter().any(|n| n.contains(track)), "no {track} track in {:?}", &names[..names.len().min(20)]);
    }
    assert!(events.iter().any(|e| e["ph"] == "X"), "no slices");
    // A report whose digest differs is a divergence (exit 1).
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    v["digest"] = "0000000000000000".into();
    let bad = d.join("tampered.json");
    std::fs::write(&bad, v.to_string()).unwrap();
    let out = txbed(&["replay", s(&bad)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("DIVERGED"), "{}", text(&out.stderr));
    // Real runs and garbage are refused (exit 2).
    v["backend"] = "sockets".into();
    std::fs::write(&bad, v.to_string()).unwrap();
    let out = txbed(&["replay", s(&bad)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not deterministic"), "{}", text(&out.stderr));
    std::fs::write(&bad, "{not json").unwrap();
    assert_eq!(txbed(&["replay", s(&bad)]).status.code(), Some(2));
}

#[test]
fn a_sweep_of_2_protocols_2_modes_3_seeds_writes_csvs_with_intervals_and_plots() {
    let d = scratch("sweep");
    let sweep = d.join("sweep.ron");
    std::fs::write(
        &sweep,
        format!(
            r#"Sweep(
    name: "t",
    base: "{}",
    set: ["cluster.nics_per_node=1", "run.measure_us=200", "run.warmup_us=50"],
    axes: [
        (path: "protocol.name", values: ["nowait", "occ"]),
        (path: "protocol.mode", values: ["rpc", "onesided"]),
    ],
    seeds: [1, 2, 3],
)"#,
            s(&root().join("scenarios/quickstart.ron"))
        ),
    )
    .unwrap();
    let out_dir = d.join("out");
    let out = txbed(&["sweep", s(&sweep), "--jobs", "2", "--out", s(&out_dir)]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let results = std::fs::read_to_string(out_dir.join("results.csv")).unwrap();
    let rows: Vec<&str> = results.lines().collect();
    assert_eq!(rows.len(), 13, "{results}");
    assert!(rows[0].starts_with("protocol.name,protocol.mode,seed,throughput_tps"), "{}", rows[0]);
    assert!(rows[1..].iter().all(|r| r.contains(",true,")), "every run serializable:\n{results}");
    let summary = std::fs::read_to_string(out_dir.join("summary.csv")).unwrap();
    let lines: Vec<&str> = summary.lines().collect();
    assert_eq!(lines.len(), 5, "{summary}");
    let head: Vec<&str> = lines[0].split(',').collect();
    let ci = head.iter().position(|h| *h == "throughput_tps_ci95").expect("ci column");
    let runs = head.iter().position(|h| *h == "runs").unwrap();
    for l in &lines[1..] {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f[runs], "3");
        let half: f64 = f[ci].parse().unwrap();
        assert!(half > 0.0, "three seeds differ, so the interval has width: {l}");
    }
    // Same seeds, same digests, whatever the parallelism.
    let serial = d.join("serial");
    let out = txbed(&["sweep", s(&sweep), "--jobs", "1", "--out", s(&serial), "-q"]);
    assert!(out.status.success());
    // The digest column by name: provenance columns follow it.
    let digests = |p: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(p).unwrap();
        let col = text.lines().next().unwrap().split(',').position(|c| c == "digest").unwrap();
        text.lines().skip(1).map(|l| l.split(',').nth(col).unwrap().to_string()).collect()
    };
    assert_eq!(digests(&out_dir.join("results.csv")), digests(&serial.join("results.csv")));
    let pngs: Vec<PathBuf> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    assert!(pngs.len() >= 4, "plots: {pngs:?}");
    // txbed plot re-plots the same CSV elsewhere; a missing file is an error.
    let again = d.join("replot");
    let out = txbed(&["plot", s(&out_dir.join("summary.csv")), "--out", s(&again)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::read_dir(&again).unwrap().count() >= 8);
    let out = txbed(&["plot", s(&d.join("nope.csv"))]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bad_sweeps_fail_before_running() {
    let d = scratch("badsweep");
    let cases = [
        ("Sweep(base: \"x.ron\", axes: [])", "axes: give at least one axis"),
        ("Sweep(base: \"missing.ron\", axes: [(path: \"cluster.nodes\", values: [2])])", "base"),
        ("Sweep(base: \"q.ron\", axes: [(path: \"cluster.nodes\", values: [1])])", "cluster.nodes=1"),
        ("Sweep(base: \"q.ron\", axes: [(path: \"cluster.nodes\", values: [2])], oops: 1)", "oops"),
        (
            "Sweep(base: \"q.ron\", axes: [(path: \"cluster.nodes\", values: [2])], x: Some(\"a.b\"))",
            "not one of the axes",
        ),
    ];
    std::fs::copy(root().join("scenarios/quickstart.ron"), d.join("q.ron")).unwrap();
    for (body, want) in cases {
        let f = d.join("s.ron");
        std::fs::write(&f, body).unwrap();
        let out = txbed(&["sweep", s(&f), "--out", s(&d.join("o"))]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body}: {err}");
        assert!(err.contains(want), "{body}:\n  want {want:?}\n  got  {err}");
    }
}

/// Every scenario and sweep shipped in scenarios/ loads.
#[test]
fn the_scenario_library_validates() {
    let mut n = 0;
    let mut stack = vec![root().join("scenarios")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                // NIC, CPU and fault profiles are not scenarios (their own tests load them).
                if !p.ends_with("nics") && !p.ends_with("cpus") && !p.ends_with("faults/profiles") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|e| e != "ron") {
                continue;
            }
            n += 1;
            if p.parent().unwrap().ends_with("sweeps") {
                let sw = txbed_scenario::sweep::Sweep::load(&p).unwrap_or_else(|e| panic!("{e}"));
                sw.points(&p).unwrap_or_else(|e| panic!("{e}"));
            } else {
                let out = txbed(&["validate", s(&p)]);
                assert!(out.status.success(), "{}", text(&out.stderr));
            }
        }
    }
    assert!(n >= 10, "only {n} scenario files");
}
