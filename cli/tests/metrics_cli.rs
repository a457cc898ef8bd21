//! What a run reports beyond its means (issue 16): warnings and --strict, latency tails and
//! per-type latency, the .hgrm export and CDF plots, per-node and per-worker counts, the time
//! series, trace size control, bench-verbs progress, and stage time per committed transaction.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

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

fn scratch(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-metrics-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// NOWAIT on the hot YCSB with the seeds' retry loop commits nothing (the scenario's comment).
const LIVELOCK: [&str; 6] =
    ["run", "scenarios/rcc/ycsb-high.ron", "--set", "run.retry=Yield", "--set", "run.measure_us=200"];

/// One coroutine per worker and a 1 us window: some workers commit nothing.
const IDLE_WORKERS: [&str; 8] = [
    "run",
    "scenarios/quickstart.ron",
    "--set",
    "run.warmup_us=0",
    "--set",
    "run.measure_us=1",
    "--set",
    "cluster.coroutines=1",
];

#[test]
fn nothing_committed_is_a_warning_and_fails_under_strict() {
    let out = txbed().args(LIVELOCK).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "a clean run without --strict");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("WARNING    no transaction committed in the measured window"), "{text}");
    let r = json(&txbed().args(LIVELOCK).arg("--json").output().unwrap().stdout);
    assert_eq!(r["committed"], 0);
    let w = r["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].as_str().unwrap().contains("no transaction committed"));
    let out = txbed().args(LIVELOCK).arg("--strict").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--strict: 1 warning(s): no transaction committed"));
}

#[test]
fn a_worker_that_committed_nothing_is_a_warning() {
    let r = json(&txbed().args(IDLE_WORKERS).arg("--json").output().unwrap().stdout);
    assert!(r["committed"].as_u64().unwrap() > 0);
    let idle: Vec<&serde_json::Value> =
        r["per_worker"].as_array().unwrap().iter().filter(|u| u["committed"] == 0).collect();
    assert!(!idle.is_empty());
    let w: Vec<&str> = r["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    assert!(w.iter().any(|w| w.contains("workers committed nothing in the measured window")), "{w:?}");
    assert_eq!(txbed().args(IDLE_WORKERS).arg("--strict").output().unwrap().status.code(), Some(1));
    // A sweep counts such a run as failed under --strict only.
    let dir = scratch("sweep-strict");
    let sweep = dir.join("idle.ron");
    let base = root().join("scenarios/quickstart.ron");
    std::fs::write(
        &sweep,
        format!(
            "Sweep(name: \"idle\", base: {:?}, set: [\"run.warmup_us=0\", \"run.measure_us=1\", \"cluster.coroutines=1\"], axes: [(path: \"protocol.name\", values: [\"occ\"])], seeds: [1])",
            base.display().to_string()
        ),
    )
    .unwrap();
    let run = |strict: bool| {
        let mut c = txbed();
        c.args(["sweep", "-q", "--force", "--out"]).arg(dir.join("out")).arg(&sweep);
        if strict {
            c.arg("--strict");
        }
        c.output().unwrap()
    };
    assert_eq!(run(false).status.code(), Some(0));
    let strict = run(true);
    assert_eq!(strict.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&strict.stderr).contains("--strict: "));
    let csv = std::fs::read_to_string(dir.join("out/results.csv")).unwrap();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| row[head.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}"))];
    assert_eq!(col("warnings"), "2", "node 2 and four workers elsewhere committed nothing");
    assert!(col("p999_us").parse::<f64>().unwrap() <= col("max_us").parse::<f64>().unwrap());
    assert!(head.iter().any(|h| h.starts_with("per_txn_") && h.ends_with("_us")));
    // and the run's latency distribution, for txbed plot --cdf
    assert!(dir.join("out/latency/occ-seed1.hgrm").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rows of an .hgrm file: (value us, percentile, total count).
fn hgrm_rows(p: &Path) -> Vec<(f64, f64, u64)> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            Some((c.first()?.parse().ok()?, c.get(1)?.parse().ok()?, c.get(2)?.parse().ok()?))
        })
        .collect()
}

#[test]
fn latency_tail_per_type_latency_and_the_hgrm_export() {
    let dir = scratch("tail");
    let out = txbed().args(["run", "scenarios/quickstart.ron", "--out"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("p99.9 ") && text.contains("  max "), "{text}");
    assert!(text.contains("  type us    amalgamate p50 "), "{text}");
    assert!(!text.contains("WARNING"), "the quickstart has nothing to warn about:\n{text}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let l = &r["latency_us"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    assert!(f(&l["p50"]) <= f(&l["p99"]) && f(&l["p99"]) <= f(&l["p999"]) && f(&l["p999"]) <= f(&l["max"]), "{l}");
    assert_eq!(r["warnings"].as_array().unwrap().len(), 0);
    // Per type: p50 <= p99, and the types' commits weighted by their means give the mean.
    let (mut n, mut sum) = (0u64, 0.0);
    for (k, t) in r["per_type"].as_object().unwrap() {
        let tl = &t["latency_us"];
        assert!(f(&tl["p50"]) <= f(&tl["p99"]), "{k}: {tl}");
        n += t["committed"].as_u64().unwrap();
        sum += f(&tl["mean"]) * t["committed"].as_u64().unwrap() as f64;
    }
    assert_eq!(n, r["committed"].as_u64().unwrap());
    assert!((sum / n as f64 - f(&l["mean"])).abs() / f(&l["mean"]) < 0.01, "{} vs {}", sum / n as f64, l["mean"]);
    // The .hgrm: every committed transaction, its maximum the report's.
    let rows = hgrm_rows(&dir.join("latency.hgrm"));
    let last = rows.last().unwrap();
    assert_eq!(last.1, 1.0);
    assert_eq!(last.2, r["committed"].as_u64().unwrap());
    assert!((last.0 - f(&l["max"])).abs() / f(&l["max"]) < 0.002, "{last:?} vs {}", l["max"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn per_node_per_worker_and_time_series_add_up_to_the_total() {
    let dir = scratch("series");
    // No warm-up: the buckets cover exactly the window.
    let args = ["run", "scenarios/quickstart.ron", "--set", "run.warmup_us=0", "--set", "run.measure_us=500"];
    let out = txbed().args(args).arg("--out").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let total = r["committed"].as_u64().unwrap();
    let sum = |k: &str, f: &str| r[k].as_array().unwrap().iter().map(|u| u[f].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("per_node", "committed"), total);
    assert_eq!(sum("per_worker", "committed"), total);
    assert_eq!(sum("per_node", "aborted"), r["aborted"].as_u64().unwrap());
    assert_eq!(r["per_node"].as_array().unwrap().len(), 4);
    assert_eq!(r["per_worker"].as_array().unwrap().len(), 16);
    let ts = &r["timeseries"];
    assert_eq!(ts["buckets"].as_array().unwrap().len(), 20);
    assert_eq!(ts["bucket_us"], 25.0);
    let bucket_sum = ts["buckets"].as_array().unwrap().iter().map(|b| b["committed"].as_u64().unwrap()).sum::<u64>();
    assert_eq!(bucket_sum, total);
    for f in ["timeseries.svg", "timeseries.png", "latency.hgrm"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    // --bucket-us: 100 us buckets.
    let r = json(&txbed().args(args).args(["--bucket-us", "100", "--json"]).output().unwrap().stdout);
    assert_eq!(r["timeseries"]["buckets"].as_array().unwrap().len(), 5);
    assert_eq!(r["timeseries"]["bucket_us"], 100.0);
    assert_eq!(txbed().args(args).args(["--bucket-us", "0"]).output().unwrap().status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A 300 us one-way delay from node 0 to node 1 stalls every coordinator waiting on it: the
/// time series shows buckets in the window with nothing committed, which the same run without
/// the delay has none of.
#[test]
fn a_planted_stall_shows_in_the_time_series() {
    let base = [
        "run",
        "scenarios/quickstart.ron",
        "--set",
        "protocol.name=nowait",
        "--set",
        "protocol.mode=rpc",
        "--set",
        "workload.name=ycsb",
        "--json",
    ];
    let empty_window_buckets = |r: &serde_json::Value| {
        let from = r["timeseries"]["window_from_us"].as_f64().unwrap();
        r["timeseries"]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["start_us"].as_f64().unwrap() >= from && b["committed"] == 0)
            .count()
    };
    let steady = json(&txbed().args(base).output().unwrap().stdout);
    assert_eq!(empty_window_buckets(&steady), 0);
    let delay = "cluster.link_delay_us=Some([[0,300,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]])";
    let stalled = json(&txbed().args(base).args(["--set", delay]).output().unwrap().stdout);
    assert!(empty_window_buckets(&stalled) >= 3, "{}", stalled["timeseries"]);
}

#[test]
fn plot_cdf_draws_a_series_per_run() {
    let dir = scratch("cdf");
    for (name, proto) in [("occ-run", "occ"), ("nowait-run", "nowait")] {
        let out = txbed()
            .args([
                "run",
                "scenarios/quickstart.ron",
                "-q",
                "--set",
                "run.measure_us=200",
                "--set",
                "protocol.mode=rpc",
            ])
            .arg("--set")
            .arg(format!("protocol.name={proto}"))
            .arg("--out")
            .arg(dir.join(name))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = txbed()
        .args(["plot", "--cdf"])
        .arg(dir.join("occ-run"))
        .arg(dir.join("nowait-run/latency.hgrm"))
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let svg = std::fs::read_to_string(dir.join("cdf.svg")).unwrap();
    assert!(svg.contains("occ-run") && svg.contains("latency"), "labels: the run directory, the file's stem");
    assert!(std::fs::metadata(dir.join("cdf.png")).unwrap().len() > 1000);
    // Not an .hgrm: exit 2 naming the file.
    std::fs::write(dir.join("junk.hgrm"), "not a histogram\n").unwrap();
    let out = txbed().args(["plot", "--cdf"]).arg(dir.join("junk.hgrm")).arg("--out").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("junk.hgrm:1: not a percentile distribution row"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn trace_window_and_filter_shrink_the_trace_and_keep_the_digest() {
    let dir = scratch("trace");
    let run = txbed()
        .args(["run", "scenarios/quickstart.ron", "-q", "--set", "run.measure_us=100", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(run.status.success());
    let replay = |file: &str, extra: &[&str]| {
        let out = txbed()
            .arg("replay")
            .arg(dir.join("report.json"))
            .arg("--trace")
            .arg(dir.join(file))
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("matches"));
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let slices: Vec<serde_json::Value> =
            v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").cloned().collect();
        (text.len(), slices)
    };
    let (full, all) = replay("full.json", &[]);
    let (windowed, inside) = replay("window.json", &["--trace-window", "150..160"]);
    let (filtered, kept) = replay("filter.json", &["--trace-filter", "txn,stage"]);
    assert!(windowed * 10 < full, "{windowed} vs {full}");
    assert!(filtered * 2 < full, "{filtered} vs {full}");
    assert!(!inside.is_empty() && !kept.is_empty());
    for e in &inside {
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(ts < 160.0 && ts + dur >= 150.0, "{e}");
    }
    assert!(kept.iter().all(|e| e["cat"] == "txn" || e["cat"] == "stage"));
    let cats = |v: &[serde_json::Value], c: &str| v.iter().filter(|e| e["cat"] == c).count();
    assert_eq!(cats(&kept, "txn"), cats(&all, "txn"), "the filter keeps every slice of its categories");
    assert!(cats(&all, "verb") > 0);
    let bad = txbed()
        .arg("replay")
        .arg(dir.join("report.json"))
        .arg("--trace")
        .arg(dir.join("x.json"))
        .args(["--trace-filter", "stage,bogus"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("the categories are verb, rpc, local, stage, txn"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// On a pipe (not a terminal), bench-verbs writes no carriage-return progress into logs.
#[test]
fn bench_verbs_progress_stays_out_of_logs() {
    let out = txbed()
        .args(["bench-verbs", "--payloads", "8", "--measure-us", "5", "--no-multi-object", "--nodes", "2"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!out.stderr.contains(&b'\r'), "{:?}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stdout.contains(&b'\r'));
}

/// The stages' time per committed transaction adds up to the reported total, and counts every
/// execution (aborted attempts included): per execution times executions over commits.
#[test]
fn stage_time_per_committed_transaction_is_consistent() {
    let r = json(&txbed().args(["run", "scenarios/quickstart.ron", "--json"]).output().unwrap().stdout);
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    let run_committed = f(&r["run_committed"]);
    assert!(run_committed >= f(&r["committed"]));
    let mut total = 0.0;
    for (k, s) in r["stages"].as_object().unwrap() {
        let per_txn = f(&s["per_committed_us"]);
        let expected = f(&s["mean_us"]) * f(&s["executions"]) / run_committed;
        assert!((per_txn - expected).abs() <= 1e-9 * expected.max(1.0), "{k}: {per_txn} vs {expected}");
        total += per_txn;
    }
    assert!((total - f(&r["stage_us_per_committed"])).abs() < 1e-9);
    // A committed transaction's time in stages is part of its latency (first attempt to
    // commit), so it is at most the mean latency, and here most of it.
    let mean = f(&r["latency_us"]["mean"]);
    assert!(total <= mean * 1.02 && total > mean * 0.5, "stages {total} us, mean latency {mean} us");
}
