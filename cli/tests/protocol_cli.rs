//! OCC presets emulating prior systems and `txbed hybrid-search`, through the binary.

use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn txbed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txbed")).args(args).current_dir(root()).output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn presets_pick_their_codes_and_run_serializable() {
    let short = ["--set", "run.measure_us=200", "--json"];
    for (preset, nics, code) in
        [("farm", 1, "38"), ("drtm-r", 1, "63"), ("fasst", 1, "0"), ("drtmh", 1, "63"), ("drtmh", 2, "38")]
    {
        let p = format!("protocol.preset={preset}");
        let n = format!("cluster.nics_per_node={nics}");
        let mut args = vec!["run", "scenarios/quickstart.ron", "--set", &p, "--set", &n];
        args.extend(short);
        let r = json(&txbed(&args));
        assert!(r["hybrid"].as_str().unwrap().starts_with(code), "{preset}: {}", r["hybrid"]);
        assert_eq!(r["check"]["serializable"], true, "{preset}");
        assert_eq!(r["check"]["nothing_lost"], true, "{preset}");
        assert!(r["committed"].as_u64().unwrap() > 0, "{preset}");
    }
    // DrTM+R needs safe atomics; presets are for OCC only.
    let out = txbed(&["run", "scenarios/quickstart.ron", "--set", "protocol.preset=drtm-r"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("one-sided LOCK is unsafe"));
    let out =
        txbed(&["run", "scenarios/quickstart.ron", "--set", "protocol.preset=farm", "--set", "protocol.name=nowait"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("protocol.preset"));
}

/// FaSST's variant locks the write set during execution: no separate lock round after the
/// logic, so the lock stage runs once per writing transaction either way, but the read stage
/// fetches only the read set (fewer bytes per fetch than plain OCC over RPC).
#[test]
fn fasst_locks_in_execution() {
    let base = [
        "run",
        "scenarios/quickstart.ron",
        "--set",
        "run.measure_us=200",
        "--json",
        "--set",
        "cluster.nics_per_node=1",
    ];
    let mut a = base.to_vec();
    a.extend(["--set", "protocol.mode=rpc"]);
    let plain = json(&txbed(&a));
    let mut b = base.to_vec();
    b.extend(["--set", "protocol.preset=fasst"]);
    let fasst = json(&txbed(&b));
    let bytes = |r: &serde_json::Value| r["stages"]["read"]["bytes"].as_f64().unwrap();
    assert!(bytes(&fasst) < bytes(&plain), "fasst fetches only the read set: {} vs {}", bytes(&fasst), bytes(&plain));
}

#[test]
fn hybrid_search_ranks_every_code() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-hs");
    let _ = std::fs::remove_dir_all(&dir);
    let f = dir.join("s.ron");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        &f,
        r#"Scenario(
    cluster: (nodes: 3, workers: 2, coroutines: 4, nics_per_node: Some(1)),
    protocol: Some((name: Nowait, replication: 2)),
    workload: SmallBank((accounts_per_node: 10000)),
    run: (warmup_us: 20, measure_us: 150),
)"#,
    )
    .unwrap();
    let out = txbed(&[
        "hybrid-search",
        f.to_str().unwrap(),
        "--seeds",
        "1,2",
        "--jobs",
        "2",
        "-q",
        "--out",
        dir.join("o").to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let ranked: Vec<&str> =
        text.lines().filter(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit())).collect();
    assert_eq!(ranked.len(), 16, "NOWAIT has 4 stages, 16 codes:\n{text}");
    assert!(ranked.iter().all(|l| l.ends_with("serializable")), "{text}");
    let summary = std::fs::read_to_string(dir.join("o/summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), 17);
    // Ranked by mean throughput, best first (as summary.csv has it).
    let head: Vec<&str> = summary.lines().next().unwrap().split(',').collect();
    let col = head.iter().position(|h| *h == "throughput_tps_mean").unwrap();
    let mean_of = |code: &str| -> f64 {
        summary
            .lines()
            .skip(1)
            // Codes are categories, written as --set takes them: Code(5).
            .find(|l| l.split(',').next() == Some(format!("Code({code})").as_str()))
            .unwrap()
            .split(',')
            .nth(col)
            .unwrap()
            .parse()
            .unwrap()
    };
    let order: Vec<f64> = ranked.iter().map(|l| mean_of(l.split_whitespace().nth(1).unwrap())).collect();
    assert!(order.windows(2).all(|w| w[0] >= w[1]), "{order:?}");
    let out = txbed(&["hybrid-search", "scenarios/verbs-read.ron"]);
    assert_eq!(out.status.code(), Some(2));
}

/// CALVIN's epoch length is a scenario option: commit latency follows it.
#[test]
fn calvin_epoch_length_is_configurable() {
    let p50 = |epoch: &str| {
        let e = format!("protocol.options.epoch_us={epoch}");
        let r = json(&txbed(&[
            "run",
            "scenarios/quickstart.ron",
            "--set",
            "protocol.name=calvin",
            "--set",
            "protocol.mode=rpc",
            "--set",
            &e,
            "--set",
            "run.measure_us=300",
            "--json",
        ]));
        assert_eq!(r["check"]["serializable"], true);
        r["latency_us"]["p50"].as_f64().unwrap()
    };
    let (short, long) = (p50("10"), p50("50"));
    assert!(long > short + 20.0, "p50 {short} us with 10 us epochs, {long} us with 50 us epochs");
    let calvin = ["run", "scenarios/quickstart.ron", "--set", "protocol.name=calvin", "--set", "protocol.mode=rpc"];
    let out = txbed(&[&calvin[..], &["--set", "protocol.options.epoch_us=0"]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("protocol.options: epoch_us must be 1..=1000000"));
    // Another protocol's option is refused by name.
    let out = txbed(&["run", "scenarios/quickstart.ron", "--set", "protocol.options.epoch_us=10"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `epoch_us`"));
}

/// TPC-C's large log records on 4 KiB log rings: writers wait for backups to apply their
/// entries (never lap them), backups read wrap markers in a ring's last 16 bytes, and the
/// ring size applies with a preset too. Nothing is lost.
#[test]
fn tiny_log_rings_lose_nothing() {
    for extra in [None, Some("protocol.preset=drtmh")] {
        let mut args = vec!["run", "scenarios/tpcc/quick.ron", "--set", "protocol.log_ring_kib=4", "--json"];
        if let Some(e) = extra {
            args.extend(["--set", e]);
        }
        let r = json(&txbed(&args));
        assert_eq!(r["check"]["serializable"], true, "{extra:?}");
        assert_eq!(r["check"]["nothing_lost"], true, "{extra:?}");
        assert!(r["committed"].as_u64().unwrap() > 100, "{extra:?}");
        let s = r["resolved_scenario"].to_string();
        assert!(s.contains("log_ring_kib"), "{s}");
    }
}

/// A scenario's `protocol.isolation` is the level its run is checked at: OCC skipping
/// validation (planted) makes G2-item cycles, which read committed allows (the run passes and
/// the report lists them as allowed) and serializability, OCC's own level, forbids.
#[test]
fn a_scenario_is_checked_at_its_declared_isolation_level() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-isolation");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("rc.ron");
    std::fs::write(
        &f,
        "Scenario(name: \"rc\", cluster: (nodes: 3, workers: 2, coroutines: 4, nic: \"cx4\", nics_per_node: Some(1)),
         protocol: Some((name: Occ, mode: Rpc, isolation: Some(ReadCommitted))),
         workload: Ycsb((rows_per_node: 2000, ops: 4, write_fraction: 0.5, hot_fraction: 0.01, hot_probability: 0.9)),
         run: (warmup_us: 0, measure_us: 200, seed: 1))",
    )
    .unwrap();
    let f = f.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", f, "--bug", "SkipValidation"];
        args.extend(extra);
        txbed(&args)
    };
    let r = json(&run(&["--json"]));
    let c = &r["check"];
    assert_eq!(c["level"], "read-committed", "{c}");
    assert_eq!(c["level_holds"], true, "{c}");
    assert_eq!(c["clean"], true, "{c}");
    assert_eq!(c["serializable"], false, "{c}");
    assert!(c["anomalies"].as_object().unwrap().is_empty(), "{c}");
    assert!(c["allowed"]["G2-item"].as_u64().is_some_and(|n| n > 0), "{c}");
    let text = run(&[]);
    assert!(text.status.success());
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("  read-committed: yes, nothing lost;"), "{out}");
    assert!(out.contains("  allowed    G2-item "), "{out}");
    // The protocol's own level, serializable, forbids them: the same run fails.
    let strict = run(&["--set", "protocol.isolation=None"]);
    assert_eq!(strict.status.code(), Some(1));
    let out = String::from_utf8_lossy(&strict.stdout);
    assert!(out.contains("  serializable: NO"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
