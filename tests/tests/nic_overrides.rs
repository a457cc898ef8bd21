//! A scenario's `nic` overrides reach the simulated run and move its results the way the
//! hardware would: through `--set`, a scenario file and a sweep axis.

use std::path::PathBuf;

use txbed_scenario::sweep::Sweep;
use txbed_scenario::Scenario;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn quickstart(sets: &[&str]) -> (Scenario, txbed_sim::NicProfile) {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::load_with(&root().join("scenarios/quickstart.ron"), &sets).unwrap()
}

/// Every stage by RPC: each request and reply costs the handler's worker `rpc_dispatch_ns`, so
/// a 25x larger dispatch cost lowers throughput and raises latency.
#[test]
fn a_costlier_rpc_dispatch_slows_an_rpc_run() {
    let short = ["protocol.mode=Rpc", "run.warmup_us=50", "run.measure_us=200"];
    let run = |extra: &[&str]| {
        let sets: Vec<&str> = short.iter().chain(extra).copied().collect();
        let (s, p) = quickstart(&sets);
        txbed_runner::run_txn(&s, &p, 1, false, &mut |_, _| {}).unwrap().report(&s, 1)
    };
    let base = run(&[]);
    let slow = run(&["nic.host.rpc_dispatch_ns=500"]);
    assert_eq!(base.nic_overrides.len(), 0);
    assert_eq!(slow.nic_overrides["host.rpc_dispatch_ns"], 500);
    assert!(base.committed > 100, "{}", base.committed);
    assert!(slow.throughput_tps < 0.8 * base.throughput_tps, "{} -> {} tx/s", base.throughput_tps, slow.throughput_tps);
    assert!(slow.latency_us.p50 > base.latency_us.p50);
    // The profile value as loaded is what the run used: the same override as a file field.
    let text = std::fs::read_to_string(root().join("scenarios/quickstart.ron"))
        .unwrap()
        .replace("cluster: (", "nic: Some((host: (rpc_dispatch_ns: 500))),\n    cluster: (");
    let (s, p) = Scenario::parse(&text, "quickstart+nic").unwrap();
    assert_eq!(p.host.rpc_dispatch_ns, 500);
    let s = s.apply_sets(&short.map(String::from)).unwrap();
    let again = txbed_runner::run_txn(&s, &p, 1, false, &mut |_, _| {}).unwrap().report(&s, 1);
    assert_eq!(again.digest, slow.digest);
}

/// A 64 KiB READ is bandwidth-bound: at half the link rate its latency grows by at least one
/// more serialisation time (64 KiB takes 5.2 us at 100 Gb/s, 10.5 us at 50).
#[test]
fn a_slower_link_raises_a_large_reads_latency() {
    let run = |sets: &[&str]| {
        let mut all =
            vec!["workload.payload=65536", "workload.outstanding=1", "cluster.coroutines=1", "run.measure_us=100"];
        all.extend(sets);
        let all: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        let (s, p) = Scenario::load_with(&root().join("scenarios/verbs-read.ron"), &all).unwrap();
        txbed_runner::run_verbs(&s, &p, 1).unwrap()
    };
    let fast = run(&[]);
    let slow = run(&["nic.link.gbps=50"]);
    assert_eq!(slow.nic_overrides["link.gbps"], 50.0);
    assert!(
        slow.latency_us.p50 > fast.latency_us.p50 + 4.0,
        "p50 {} -> {} us",
        fast.latency_us.p50,
        slow.latency_us.p50
    );
    assert!(slow.throughput_mops_per_machine < fast.throughput_mops_per_machine);
}

/// A sweep axis over a profile field: each point's profile carries its value, and the runs
/// differ accordingly.
#[test]
fn a_sweep_axis_over_a_nic_field() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-nic-sweep");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sweep.ron");
    let base = root().join("scenarios/quickstart.ron");
    std::fs::write(
        &file,
        format!(
            r#"Sweep(
    base: {base:?},
    set: ["protocol.mode=Rpc", "run.warmup_us=50", "run.measure_us=200"],
    axes: [(path: "nic.host.rpc_dispatch_ns", values: [20, 500])],
    seeds: [1],
)"#
        ),
    )
    .unwrap();
    let sw = Sweep::load(&file).unwrap();
    let points = sw.points(&file).unwrap();
    let dispatch: Vec<u64> = points.iter().map(|p| p.profile.host.rpc_dispatch_ns).collect();
    assert_eq!(dispatch, [20, 500]);
    let reports = txbed_runner::parallel::run_points(&points, 2, &|| {});
    let tps: Vec<f64> = reports.iter().map(|r| r.as_ref().unwrap().throughput_tps).collect();
    assert!(tps[1] < 0.8 * tps[0], "{tps:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_overrides_are_refused_with_the_field() {
    let err = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Scenario::load_with(&root().join("scenarios/quickstart.ron"), &sets).unwrap_err().0
    };
    let e = err(&["nic.host.rpc_dispatch=5"]);
    assert!(e.contains("unknown field `rpc_dispatch`") && e.contains("`rpc_dispatch_ns`"), "{e}");
    let e = err(&["nic.link.gbps=0"]);
    assert!(e.ends_with("nic.link.gbps: must be a positive number, got 0"), "{e}");
    let e = err(&["nic.host.mmio_ns=1.5"]);
    assert!(e.contains("nic.host.mmio_ns: expected a whole number") && e.contains("got 1.5"), "{e}");
    let e = err(&["nic.nics_per_node=1", "cluster.nics_per_node=1"]);
    assert!(e.contains("nic.nics_per_node: cluster.nics_per_node is set too"), "{e}");
}
