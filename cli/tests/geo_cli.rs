//! Data centers from the command line (issue 17 item 1): the geo scenario validates and runs
//! checked; bad values exit 2 naming the field; one data center leaves the quickstart's digest
//! as it was; the sockets backend emulates constant inter-DC delays and refuses, naming the
//! field, what it cannot emulate.

use crate::common;

use common::{finish, free_port, out, start_rank, txbed};
use std::process::{Child, Output};
use std::time::Duration;

#[test]
fn the_geo_scenario_validates_and_runs_checked() {
    let (code, _, err) = out(txbed().args(["validate", "scenarios/geo/3dc.ron"]));
    assert_eq!(code, Some(0), "{err}");
    let (code, stdout, err) = out(txbed().args(["run", "scenarios/geo/3dc.ron", "--set", "protocol.name=waitdie"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(stdout.contains("serializable: yes, nothing lost"), "{stdout}");
}

#[test]
fn bad_topologies_exit_2_naming_the_field() {
    let cases: &[(&str, &str)] = &[
        ("cluster.inter_dc.loss=1.5", "cluster.inter_dc.loss: must be a probability"),
        ("cluster.inter_dc.delay=Uniform(5, 1)", "cluster.inter_dc.delay: Uniform(lo, hi) needs lo <= hi"),
        ("cluster.inter_dc=None", "cluster.inter_dc: 3 data centers need"),
        ("cluster.datacenters=[(nodes: 5)]", "cluster.datacenters: the data centers hold 5 nodes"),
    ];
    for (set, want) in cases {
        let (code, _, err) = out(txbed().args(["validate", "scenarios/geo/3dc.ron", "--set", set]));
        assert_eq!(code, Some(2), "{set}: {err}");
        assert!(err.contains(want), "{set}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// One data center is the cluster as before: the README's quickstart digest.
#[test]
fn one_data_center_keeps_the_quickstart_digest() {
    let (code, stdout, err) =
        out(txbed().args(["run", "scenarios/quickstart.ron", "--set", "cluster.datacenters=[(nodes: 4)]"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(stdout.contains("digest     7d22152a6eae34dc"), "{stdout}");
}

/// Rank `rank` of `size` of a sockets run with `--set` edits, as `mpirun` starts it.
fn rank(path: &str, rank: u32, size: u32, port: u16, sets: &[&str]) -> Child {
    let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
    start_rank(path, rank, size, port, &args)
}

/// What sockets cannot emulate is refused before anything connects, naming the field.
#[test]
fn sockets_refuses_what_it_cannot_emulate() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "cluster.inter_dc.delay: the sockets backend cannot emulate a Normal(..) delay"),
        (
            &["cluster.inter_dc.delay=Constant(500)", "cluster.inter_dc.pairs=[]"],
            "cluster.inter_dc.jitter_us: the sockets backend cannot emulate jitter",
        ),
        (
            &["cluster.inter_dc=Some((delay: Constant(500), pairs: [(between: (\"east\", \"west\"), loss: Some(0.1))]))"],
            "cluster.inter_dc.pairs[0].loss: the sockets backend cannot emulate loss",
        ),
        (
            &["cluster.inter_dc=Some((delay: Constant(500), transport: Tcp((per_message_cpu_ns: 100))))"],
            "cluster.inter_dc.transport: the sockets backend cannot emulate a TCP-like transport",
        ),
        (&["cluster.inter_dc=Some((delay: Constant(500), gbps: Some(1.0)))"], "cluster.inter_dc.gbps"),
    ];
    for (sets, want) in cases {
        let o = finish(rank("scenarios/geo/3dc.ron", 0, 6, free_port(), sets), Duration::from_secs(30));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{sets:?}: {err}");
        assert!(err.contains(want), "{sets:?}: {err}");
    }
}

/// Constant delays between data centers are emulated on sockets: three single-node DCs 3 ms
/// apart make the median transaction wait at least one round trip (6 ms), checked clean.
#[test]
fn sockets_emulates_constant_inter_dc_delays() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-geo-cli");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.ron");
    std::fs::write(
        &path,
        "Scenario(cluster: (nodes: 3, workers: 1, coroutines: 4, nic: \"cx4\",\n\
           datacenters: [(nodes: 1), (nodes: 1), (nodes: 1)], inter_dc: Some((delay: Constant(3000)))),\n\
         protocol: Some((name: Occ, mode: Rpc, replication: 3)),\n\
         workload: SmallBank((accounts_per_node: 2000)),\n\
         run: (warmup_us: 100000, measure_us: 600000, seed: 7))\n",
    )
    .unwrap();
    let port = free_port();
    let p = path.to_str().unwrap();
    let children: Vec<Child> = (0..3).map(|r| rank(p, r, 3, port, &[])).collect();
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, Duration::from_secs(90))).collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {:?}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    }
    let report = String::from_utf8_lossy(&outs[0].stdout);
    assert!(report.contains("serializable: yes, nothing lost"), "{report}");
    let p50_us: f64 = report
        .split("p50 ")
        .nth(1)
        .and_then(|s| s.split(" us").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no p50 in\n{report}"));
    assert!(p50_us >= 6000.0, "p50 {p50_us} us with 3 ms links\n{report}");
    // The nodes know their data centers: the stages count what crossed between them.
    assert!(report.contains("inter-DC   by stage") && report.contains(" RTT / "), "{report}");
}
