//! `txbed sensitivity` on a shortened quickstart: a parameter an RPC-mode run depends on moves
//! its throughput the way the hardware would, one that cannot matter without faults moves
//! nothing at all, `--compare` gives a verdict, and bad input exits 2.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn txbed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txbed")).args(args).current_dir(root()).output().unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-sensitivity-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// sensitivity.csv as one map per row, keyed by column.
fn csv_rows(path: &std::path::Path) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let head: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines.map(|l| head.iter().cloned().zip(l.split(',').map(String::from)).collect()).collect()
}

fn row<'a>(rows: &'a [HashMap<String, String>], param: &str, side: &str) -> &'a HashMap<String, String> {
    rows.iter().find(|r| r["parameter"] == param && r["side"] == side).unwrap_or_else(|| panic!("no {param} {side}"))
}

/// The quickstart shortened, by RPC, with accounts anywhere (`locality: false`): most RPCs go to
/// other nodes (on the local path an RPC to the own node is a direct call, no dispatch).
const SHORT: [&str; 8] = [
    "--set",
    "run.measure_us=200",
    "--set",
    "run.warmup_us=50",
    "--set",
    "protocol.mode=Rpc",
    "--set",
    "workload.locality=false",
];

#[test]
fn rpc_dispatch_moves_an_rpc_run_and_the_rc_retry_budget_does_not() {
    let out_dir = scratch("rpc");
    let mut args = vec!["sensitivity", "scenarios/quickstart.ron"];
    args.extend(SHORT);
    args.extend(["--params", "host.rpc_dispatch_ns,nic.reliability.rc_retry_count", "--range", "30%"]);
    args.extend(["--out", out_dir.to_str().unwrap()]);
    let out = txbed(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("2 parameters varied, 5 simulations"), "{stdout}");
    // The table lists the larger effect first.
    let dispatch = stdout.find("host.rpc_dispatch_ns ").unwrap();
    let retry = stdout.find("reliability.rc_retry_count ").unwrap();
    assert!(dispatch < retry, "{stdout}");

    let rows = csv_rows(&out_dir.join("sensitivity.csv"));
    let base = &rows[0];
    assert_eq!(base["side"], "base");
    let change = |param: &str, side: &str| row(&rows, param, side)["throughput_change_pct"].parse::<f64>().unwrap();
    // Every RPC costs its handler's worker rpc_dispatch_ns: cheaper dispatch, more throughput.
    assert_eq!(row(&rows, "host.rpc_dispatch_ns", "low")["value"], "14");
    assert_eq!(row(&rows, "host.rpc_dispatch_ns", "high")["value"], "26");
    assert!(change("host.rpc_dispatch_ns", "low") > 1.0, "{rows:?}");
    assert!(change("host.rpc_dispatch_ns", "high") < -1.0, "{rows:?}");
    // The RC retry budget matters only when a node dies: the same run to the last event.
    for side in ["low", "high"] {
        let r = row(&rows, "reliability.rc_retry_count", side);
        assert_eq!(r["throughput"], base["throughput"]);
        assert_eq!(r["p99_us"], base["p99_us"]);
        assert_eq!(r["throughput_change_pct"], "0");
    }
    for f in ["tornado-throughput.svg", "tornado-throughput.png"] {
        assert!(out_dir.join(f).metadata().map(|m| m.len() > 1000).unwrap_or(false), "{f} missing");
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn compare_reports_rankings_and_a_verdict() {
    let out_dir = scratch("compare");
    let mut args = vec!["sensitivity", "scenarios/quickstart.ron"];
    args.extend(SHORT);
    args.extend(["--params", "host.mmio_ns", "--compare", "protocol.name=occ,nowait"]);
    args.extend(["--out", out_dir.to_str().unwrap()]);
    let out = txbed(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("ranking by throughput at the base values: "), "{stdout}");
    let verdict = stdout.lines().find(|l| l.starts_with("verdict: the comparison's conclusion (")).expect(&stdout);
    assert!(
        verdict.contains(" > ") && (verdict.contains("holds across ±30%") || verdict.contains("flips")),
        "{verdict}"
    );
    let rows = csv_rows(&out_dir.join("sensitivity.csv"));
    assert_eq!(rows.len(), 6, "a base, a low and a high row per variant");
    for v in ["occ", "nowait"] {
        assert!(out_dir.join(format!("tornado-throughput-{v}.png")).exists());
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let cases: [(&[&str], &str); 6] = [
        (&["--params", "host.bogus"], "unknown parameter `host.bogus`; the numeric profile fields are"),
        (&["--range", "0%"], "--range 0%: must be above 0% and below 100%"),
        (&["--range", "thirty"], "expected a percentage"),
        (&["--compare", "protocol.name"], "expected PATH=V1,V2"),
        (&["--compare", "protocol.name=occ,nosuch"], "--compare protocol.name=nosuch: protocol.name: unknown protocol"),
        (
            // Through the loopback no transaction finishes in 1 us (on the local path a
            // read-only one of the coordinator's own accounts can).
            &[
                "--set",
                "run.measure_us=1",
                "--set",
                "run.warmup_us=0",
                "--set",
                "protocol.local_path=false",
                "--params",
                "host.mmio_ns",
            ],
            "committed no transactions in its 1 us measured window",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["sensitivity", "scenarios/quickstart.ron", "-q", "--out"];
        let dir = scratch("bad");
        args.push(dir.to_str().unwrap());
        args.extend(extra);
        let out = txbed(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: want {want:?}, got {err}");
        assert!(!err.contains("panicked"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
