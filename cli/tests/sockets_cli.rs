//! `txbed run --backend sockets` as separate processes on loopback, the way `mpirun` starts
//! it: rank and size from the launcher's environment, rank 0 reports. A peer killed mid-run:
//! the survivors must exit non-zero with a message, not hang. Partitions emulated from the
//! scenario's `faults`, both ways and one way.

use crate::common;

use common::{finish, free_port, start_rank};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

fn scenario(name: &str, measure_us: u64) -> PathBuf {
    scenario_with(name, measure_us, "")
}

/// `run_extra`: more fields of `run`, e.g. `failure_timeout_ms: 500,`.
fn scenario_with(name: &str, measure_us: u64, run_extra: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-sockets-cli-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.ron");
    std::fs::write(
        &path,
        format!(
            "Scenario(name: \"{name}\", cluster: (nodes: 3, workers: 1, coroutines: 4, nic: \"cx4\"),\n\
             protocol: Some((name: Occ, mode: Code(38), replication: 3)),\n\
             workload: SmallBank((accounts_per_node: 2000)),\n\
             run: ({run_extra} warmup_us: 20000, measure_us: {measure_us}, seed: 7))\n"
        ),
    )
    .unwrap();
    path
}

/// Starts rank `rank` of 3, as `mpirun -n 3` would.
fn start(path: &Path, rank: u32, port: u16) -> Child {
    start_with(path, rank, port, &[])
}

fn start_with(path: &Path, rank: u32, port: u16, extra: &[&str]) -> Child {
    start_rank(path.to_str().unwrap(), rank, 3, port, extra)
}

#[test]
fn three_processes_run_check_and_report() {
    let path = scenario("three", 300_000);
    let port = free_port();
    let children: Vec<Child> = (0..3).map(|r| start(&path, r, port)).collect();
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, Duration::from_secs(90))).collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {:?}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    }
    let report = String::from_utf8_lossy(&outs[0].stdout);
    assert!(report.contains("backend    sockets"), "{report}");
    assert!(report.contains("serializable: yes, nothing lost"), "{report}");
    let committed: u64 = report
        .split("committed in the window")
        .next()
        .and_then(|s| s.rsplit(' ').nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no commit count in\n{report}"));
    assert!(committed > 0, "{report}");
    assert!(outs[1].stdout.is_empty() && outs[2].stdout.is_empty(), "only rank 0 reports");
}

/// The number before `what` in `line`.
fn count_before(line: &str, what: &str) -> u64 {
    line.split(what)
        .next()
        .and_then(|s| s.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of {what:?} in {line}"))
}

/// scenarios/faults/partition-sockets.ron (3 ranks, a 50 ms partition from 100 ms) with `sets`:
/// the run must end serializable with commits, and its report name the partition and say what
/// it dropped and held; returns (datagrams dropped, doorbells held, completions held).
fn partitioned_run(sets: &[&str], names: &str) -> (u64, u64, u64) {
    let port = free_port();
    let mut args = vec![];
    for s in sets {
        args.extend(["--set", s]);
    }
    let children: Vec<Child> =
        (0..3).map(|r| start_rank("scenarios/faults/partition-sockets.ron", r, 3, port, &args)).collect();
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, Duration::from_secs(90))).collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {:?}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    }
    let report = String::from_utf8_lossy(&outs[0].stdout);
    assert!(report.contains("serializable: yes, nothing lost"), "{report}");
    assert!(count_before(&report, "committed in the window") > 0, "{report}");
    assert!(report.contains(&format!("  faults     {names} at 100000 us\n")), "{report}");
    let line = report
        .lines()
        .find(|l| l.starts_with("  emulated   1 partition on sockets"))
        .unwrap_or_else(|| panic!("{report}"));
    (count_before(line, "datagrams dropped"), count_before(line, "RC doorbells"), count_before(line, "RC completions"))
}

/// Node 0 cut off nodes 1 and 2 both ways for 50 ms, with one-sided READ, LOG and VALIDATE:
/// RC traffic across it is held (requests and the responses on their way back), and the run
/// stays serializable.
#[test]
fn a_partition_both_ways_is_emulated_on_sockets() {
    let (_, doorbells, completions) = partitioned_run(&[], "partition [0] <-> [1,2] for 50000 us");
    assert!(doorbells + completions > 0, "nothing was held across the partition");
}

/// Participant 1 cannot reach 0 and 2 for 50 ms (they still reach it), over RPC: its
/// datagrams are dropped and resent after the heal; the run stays serializable.
#[test]
fn a_one_way_partition_of_a_participant_is_emulated_on_sockets() {
    let (dropped, ..) = partitioned_run(
        &[
            "faults.schedule=[(at_us: 100000, fault: Partition(a: [1], b: [0, 2], one_way: true, for_us: 50000))]",
            "protocol.mode=rpc",
        ],
        "partition [1] -> [0,2] for 50000 us",
    );
    assert!(dropped > 0, "no datagram was dropped across the partition");
}

/// A 1 us wall-clock window commits nothing: rank 0 warns, and fails under --strict.
#[test]
fn strict_fails_a_real_run_that_committed_nothing() {
    let path = scenario("strict", 1);
    let port = free_port();
    let children: Vec<Child> = (0..3).map(|r| start_with(&path, r, port, &["--strict"])).collect();
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, Duration::from_secs(90))).collect();
    let report = String::from_utf8_lossy(&outs[0].stdout);
    assert!(report.contains("WARNING"), "{report}");
    assert_eq!(outs[0].status.code(), Some(1), "{}", String::from_utf8_lossy(&outs[0].stderr));
    assert!(String::from_utf8_lossy(&outs[0].stderr).contains("--strict: "));
}

/// The bound docs/cluster.md states: every survivor names a dead or hung rank within
/// `run.failure_timeout_ms` plus a fifth of it (one heartbeat interval); the rest is process
/// start-up and exit slack.
const FAILURE_TIMEOUT_MS: u64 = 500;
const SLACK: Duration = Duration::from_millis(2500);

/// Kills (SIGKILL) or stops (SIGSTOP) rank 2 of 3 mid-run; ranks 0 and 1 must each exit 2
/// naming rank 2, and only rank 2, within the bound.
fn peer_failure(signal: &str) {
    let path = scenario_with(signal, 9_000_000, &format!("failure_timeout_ms: {FAILURE_TIMEOUT_MS},"));
    let port = free_port();
    let mut children: Vec<Child> = (0..3).map(|r| start(&path, r, port)).collect();
    std::thread::sleep(Duration::from_millis(1500));
    let victim = children.pop().unwrap();
    let status = Command::new("kill").args([&format!("-{signal}"), &victim.id().to_string()]).status().unwrap();
    assert!(status.success());
    let t = Instant::now();
    let bound = Duration::from_millis(FAILURE_TIMEOUT_MS * 6 / 5) + SLACK;
    for (r, c) in children.into_iter().enumerate() {
        let o = finish(c, bound.saturating_sub(t.elapsed()) + Duration::from_millis(100));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "rank {r}: {:?}\n{err}", o.status);
        assert!(err.contains("rank 2 died"), "rank {r} names the failed rank: {err}");
        assert!(!err.contains("rank 0 died") && !err.contains("rank 1 died"), "rank {r} blames a survivor: {err}");
    }
    assert!(t.elapsed() < bound, "survivors took {:?}", t.elapsed());
    let mut victim = victim;
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn a_killed_peer_makes_the_others_fail_cleanly() {
    peer_failure("KILL");
}

#[test]
fn a_stopped_peer_is_named_by_every_survivor_in_bounded_time() {
    peer_failure("STOP");
}

/// `txbed selftest` over loopback sockets: WRITE_WITH_IMM arrives after its data and the WRITE
/// before it, an RC SEND is served as an RPC, between two nodes and from a node to itself.
#[test]
fn selftest_exchanges_immediates_and_rc_sends_over_sockets() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_txbed"))
        .args(["selftest", "--backend", "sockets"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("selftest passed"), "{text}");
    for (from, to) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let imm = format!("node {to}: WRITE_WITH_IMM from node {from} arrived after its data");
        let send = format!("node {to}: RC SEND from node {from} served as an RPC");
        assert!(text.contains(&imm) && text.contains(&send), "missing {from}->{to} in:\n{text}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_txbed"))
        .args(["selftest", "--backend", "sim"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "the simulator is not a real backend");
}
