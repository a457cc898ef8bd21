//! RedT (issue 21): every workload on 4 data centers x 2 nodes with 3 replicas, checked
//! serializable with nothing lost on any replica; the inter-DC messages and round trips of
//! Table 1 on contention-free runs; planted bugs caught; random shapes.

use std::path::PathBuf;

use proptest::prelude::*;
use txbed_runner::TxnRunResult;
use txbed_scenario::Scenario;
use txbed_txn::node::stage_index;
use txbed_txn::stage::Stage;

fn run_file(file: &str, sets: &[String], bug: Option<&str>) -> TxnRunResult {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/redt").join(file);
    let (s, profile) = Scenario::load_with(&path, sets).unwrap();
    match bug {
        Some(b) => {
            let bug = txbed_runner::campaign::find_bug(s.protocol.as_ref().unwrap().name.protocol(), b).unwrap();
            txbed_runner::campaign::run_scenario(&s, &profile, Some(bug), &mut |_, _| {}).unwrap().result
        }
        None => txbed_runner::run_txn(&s, &profile, s.run.seed, false, &mut |_, _| {}).unwrap().result,
    }
}

fn run(sets: &[&str]) -> TxnRunResult {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    run_file("ycsb.ron", &sets, None)
}

fn check(what: &str, r: &TxnRunResult, at_least: u64) {
    eprintln!("{what}: {} committed, {:.0} tx/s, {:?}", r.measured.committed, r.throughput_tps(), r.inter_dc);
    assert!(r.failures.is_empty(), "{what}: {:?}", r.failures);
    assert!(r.clean(), "{what}: {:?}", r.report.anomalies.first());
    assert!(r.measured.committed >= at_least, "{what}: {} committed", r.measured.committed);
}

/// Every replica's final store is in the history, and the checker found each current.
fn every_replica_checked(r: &TxnRunResult, replicas: u16) {
    for k in 1..replicas {
        let name = format!("replica{k}");
        assert!(r.history.finals.iter().any(|f| f.replica == name), "no final store of {name}");
    }
}

/// The baselines on the same clusters and workloads, checked; each one's planted bug caught
/// (a Paxos primary that releases its locks before installing, TAPIR and MDCC replicas that
/// skip the version check).
#[test]
fn the_baselines_run_checked_and_their_planted_bugs_are_caught() {
    for (p, bug) in [
        ("2pcpaxos", "PaxosUnlockBeforeInstall"),
        ("eppaxos", "PaxosUnlockBeforeInstall"),
        ("tapir", "TapirSkipVersionCheck"),
        ("mdcc", "MdccSkipVersionCheck"),
    ] {
        let name = format!("protocol.name={p}");
        for w in [
            "SmallBank((accounts_per_node: 10000))",
            "Tpcc((warehouses_per_node: 1, items: 1000, customers_per_district: 300))",
        ] {
            let w = format!("workload={w}");
            let r = run(&[&name, "run.measure_us=200000", &w]);
            check(&format!("{p} {w}"), &r, 10);
            every_replica_checked(&r, 3);
        }
        let contended = [
            name.clone(),
            "run.measure_us=300000".to_string(),
            "workload=Ycsb((rows_per_node: 20, ops: 2, write_fraction: 0.5, hot_probability: 0.0))".to_string(),
        ];
        check(&format!("{p} contended"), &run_file("ycsb.ron", &contended, None), 10);
        let r = run_file("ycsb.ron", &contended, Some(bug));
        assert!(!r.report.clean(), "{p}: {bug} not caught");
    }
}

/// MDCC under contention: fast rounds collide, the records' masters run classic rounds
/// (Table 1's second MDCC row, reported as `validate`: a round trip to the master and its own
/// with the replicas), some options are learned there, and the run stays clean.
#[test]
fn mdcc_collisions_go_to_classic_rounds() {
    let r = run(&[
        "protocol.name=mdcc",
        "run.measure_us=300000",
        "workload=Ycsb((rows_per_node: 200, ops: 2, write_fraction: 0.5, hot_probability: 0.0))",
    ]);
    check("MDCC contended", &r, 10);
    let v = stage_index(Stage::Validate);
    assert!(r.stats.stage_calls[v] > 0, "no classic round ran");
    assert!(
        r.stats.stage_inter_dc_round_trips[v] > r.stats.stage_calls[v],
        "classic rounds took {} inter-DC round trips in {} rounds: the master's own round is missing",
        r.stats.stage_inter_dc_round_trips[v],
        r.stats.stage_calls[v]
    );
}

/// The paper's network variants: RedT over TCP inside each data center (`intra_dc: "messages"`:
/// the executor's locks, releases and log writes become messages to the replicas' nodes'
/// CPUs) and RDMA over the links between data centers (`cluster.inter_dc.transport=Rdma`),
/// on data centers 0.5 ms apart where intra-DC costs show: both checked, every replica
/// current; the messages cost the lock stage time on TCP (its per-message CPU on both sides),
/// and the inter-DC counts are Table 1's either way (one round trip per phase).
#[test]
fn the_network_variants_run_checked() {
    let near = [
        "cluster.inter_dc.delay=Constant(500)",
        "run.retry=Backoff(first_us: 500, max_us: 20000)",
        "run.measure_us=50000",
        "workload=Ycsb((rows_per_node: 10000, ops: 4, write_fraction: 0.5, hot_probability: 0.1))",
    ];
    let with = |extra: &[&str]| {
        let mut sets = near.to_vec();
        sets.extend_from_slice(extra);
        run(&sets)
    };
    let rdma = with(&[]);
    let tcp = with(&["protocol.options.intra_dc=messages", "protocol.options.message_stack_cpu_ns=10000"]);
    let everywhere = with(&["cluster.inter_dc.transport=Rdma"]);
    let lock = stage_index(Stage::Lock);
    let mean = |r: &TxnRunResult| r.stats.stage_ns[lock] as f64 / r.stats.stage_calls[lock].max(1) as f64;
    for (what, r) in [("RDMA inside", &rdma), ("TCP inside", &tcp), ("RDMA everywhere", &everywhere)] {
        check(what, r, 200);
        every_replica_checked(r, 3);
        eprintln!("{what}: lock stage {:.1} us per execution", mean(r) / 1000.0);
        for s in [Stage::Lock, Stage::Commit] {
            let i = stage_index(s);
            assert!(
                r.stats.stage_inter_dc_round_trips[i] <= r.stats.stage_calls[i],
                "{what} {s:?}: one inter-DC round trip at most"
            );
        }
    }
    // Two message rounds (locks, then redo entries) with 4 x 10 us of stack CPU each, at least.
    assert!(mean(&tcp) > mean(&rdma) + 40_000.0, "TCP inside: lock stage {} ns against {} ns", mean(&tcp), mean(&rdma));
    // TPC-C over TCP inside, scaled down.
    let r = run(&[
        "protocol.options.intra_dc=messages",
        "run.measure_us=100000",
        "workload=Tpcc((warehouses_per_node: 1, items: 1000, customers_per_district: 300))",
    ]);
    check("TPC-C, TCP inside", &r, 15);
    every_replica_checked(&r, 3);
}

#[test]
fn every_workload_runs_checked_on_four_data_centers() {
    let r = run(&["run.measure_us=100000"]);
    check("YCSB", &r, 50);
    every_replica_checked(&r, 3);
    let r = run(&["run.measure_us=100000", "workload=SmallBank((accounts_per_node: 10000))"]);
    check("SmallBank", &r, 50);
    every_replica_checked(&r, 3);
    // TPC-C scaled down (1,000 items, 300 customers per district) to load 3 copies quickly.
    let r = run(&[
        "run.measure_us=100000",
        "workload=Tpcc((warehouses_per_node: 1, items: 1000, customers_per_district: 300))",
    ]);
    check("TPC-C", &r, 15);
    every_replica_checked(&r, 3);
}

/// What Table 1 says a committed transaction costs between data centers, per stage:
/// (stage, messages, round trips), from its records' homes, the replicas' placement and its
/// coordinator (RedT Sec. 4.3: a_i, b_i, c_i, d_i, K, m, M).
fn table_1(protocol: &str, t: &txbed_checker::Txn, rows: u64, dc_of: &[u16], replicas: u16) -> Vec<(Stage, u64, u64)> {
    use std::collections::BTreeSet;
    let nodes = dc_of.len() as u16;
    let p = txbed_txn::placement::Placement::new(dc_of, nodes);
    let home = |k: u64| ((k & ((1 << 48) - 1)) / rows % nodes as u64) as u16;
    let c = t.node;
    let other = |a: u16, b: u16| dc_of[a as usize] != dc_of[b as usize];
    let homes: BTreeSet<u16> = t.reads.iter().chain(&t.writes).map(|a| home(a.key)).collect();
    let written: BTreeSet<u16> = t.writes.iter().map(|a| home(a.key)).collect();
    let secondaries = |h: u16| p.replicas(h, replicas).unwrap()[1..].to_vec();
    let k = homes.iter().filter(|&&h| other(h, c)).count() as u64;
    let a_remote = written.iter().filter(|&&h| other(h, c)).count() as u64;
    let sec: u64 = written.iter().map(|&h| 2 * secondaries(h).iter().filter(|&&s| other(s, h)).count() as u64).sum();
    let m = 2 * secondaries(c).iter().filter(|&&b| other(b, c)).count() as u64;
    let rt = |x: u64| (x > 0) as u64;
    match protocol {
        "RedT" => {
            let dcs: BTreeSet<u16> =
                homes.iter().flat_map(|&h| p.replicas(h, replicas).unwrap()).map(|n| dc_of[n as usize]).collect();
            let remote = dcs.iter().filter(|&&d| d != dc_of[c as usize]).count() as u64;
            vec![(Stage::Lock, 2 * remote, rt(remote)), (Stage::Commit, 2 * remote, rt(remote))]
        }
        "2PC-Paxos" => vec![
            (Stage::Lock, 2 * k, rt(k)),
            (Stage::Vote, 2 * a_remote + sec + m, rt(a_remote) + rt(sec) + rt(m)),
            (Stage::Commit, 2 * k + sec, rt(k) + rt(sec)),
        ],
        "TAPIR" => {
            // Every replica of every partition touched, in each phase (prepare too: read-only
            // participants validate their reads; docs/protocols.md, "TAPIR").
            let all: BTreeSet<u16> = homes.iter().flat_map(|&h| p.replicas(h, replicas).unwrap()).collect();
            let n = all.iter().filter(|&&x| other(x, c)).count() as u64;
            vec![(Stage::Read, 2 * n, rt(n)), (Stage::Validate, 2 * n, rt(n)), (Stage::Commit, 2 * n, rt(n))]
        }
        "MDCC" => {
            // Reads from a replica in the coordinator's data center, else the primary (the
            // paper's count assumes one everywhere: 0 there); options and visibility to every
            // replica; no classic round without contention.
            let all: BTreeSet<u16> = homes.iter().flat_map(|&h| p.replicas(h, replicas).unwrap()).collect();
            let n = all.iter().filter(|&&x| other(x, c)).count() as u64;
            let far = homes.iter().filter(|&&h| p.replicas(h, replicas).unwrap().iter().all(|&x| other(x, c))).count();
            let far = far as u64;
            vec![
                (Stage::Read, 2 * far, rt(far)),
                (Stage::Commit, 2 * n, rt(n)),
                (Stage::Validate, 0, 0),
                (Stage::Release, 2 * n, rt(n)),
            ]
        }
        "EP-Paxos" => {
            vec![(Stage::Lock, 2 * k + sec + m, rt(k) + rt(sec) + rt(m)), (Stage::Commit, 2 * k + sec, rt(k) + rt(sec))]
        }
        other => panic!("no Table 1 row for {other}"),
    }
}

/// Each protocol's inter-DC messages and round trips by stage, on a contention-free run
/// (no attempt aborts), equal the sum of Table 1's formulas over its committed transactions.
#[test]
fn every_protocol_matches_its_table_1_row() {
    let rows = 10_000u64;
    let dc_of: Vec<u16> = (0..8).map(|n| n / 2).collect();
    for protocol in ["RedT", "2PC-Paxos", "EP-Paxos", "TAPIR", "MDCC"] {
        for wf in ["0.5", "0.0"] {
            let sets = [
                format!("protocol.name={protocol}"),
                "run.measure_us=100000".to_string(),
                "cluster.coroutines=1".to_string(),
                format!("workload=Ycsb((rows_per_node: {rows}, ops: 3, write_fraction: {wf}, hot_probability: 0.0))"),
            ];
            let r = run_file("ycsb.ron", &sets, None);
            check(&format!("{protocol}, write fraction {wf}"), &r, 10);
            assert_eq!(r.stats.aborted_conflict + r.stats.aborted_user, 0, "{protocol}: a contention-free run");
            let mut want: std::collections::BTreeMap<usize, (Stage, u64, u64)> = Default::default();
            for t in r.history.txns.iter().filter(|t| t.status == txbed_checker::Status::Committed) {
                for (s, m, rt) in table_1(protocol, t, rows, &dc_of, 3) {
                    let e = want.entry(stage_index(s)).or_insert((s, 0, 0));
                    e.1 += m;
                    e.2 += rt;
                }
            }
            for (_, (s, m, rt)) in want {
                let i = stage_index(s);
                eprintln!("{protocol} {wf} {s:?}: {m} messages, {rt} round trips");
                assert_eq!(r.stats.stage_inter_dc_messages[i], m, "{protocol} {wf} {s:?}: messages");
                assert_eq!(r.stats.stage_inter_dc_round_trips[i], rt, "{protocol} {wf} {s:?}: round trips");
            }
        }
    }
}

/// Table 1's RedT row, checked on runs without contention (each coordinator alone on its
/// keys: no abort): exactly one inter-DC round trip in each phase, and 2(n - 1) messages,
/// n the data centers the transaction involves, the coordinator's among them. With as many
/// replicas as data centers every transaction involves them all; read-only transactions
/// (T_re) count the same as the others (T_ne).
#[test]
fn inter_dc_messages_and_round_trips_match_table_1() {
    let quiet = "workload=Ycsb((rows_per_node: 100000, ops: 4, write_fraction: WF, hot_probability: 0.0))";
    for (dcs, wf) in [(4u64, "0.5"), (4, "0.0"), (3, "0.5")] {
        let w = quiet.replace("WF", wf);
        let mut sets = vec![
            "run.measure_us=100000".to_string(),
            format!("protocol.replication={dcs}"),
            "cluster.coroutines=1".to_string(),
            w,
        ];
        if dcs == 3 {
            sets.push("cluster.nodes=6".into());
            sets.push(
                "cluster.datacenters=[(name: \"dc0\", nodes: 2), (name: \"dc1\", nodes: 2), (name: \"dc2\", nodes: 2)]"
                    .into(),
            );
        }
        let r = run_file("ycsb.ron", &sets, None);
        check(&format!("{dcs} DCs, write fraction {wf}"), &r, 20);
        let st = &r.stats;
        assert_eq!(st.aborted_conflict, 0, "a contention-free run");
        for s in [Stage::Lock, Stage::Commit] {
            let i = stage_index(s);
            assert_eq!(
                st.stage_inter_dc_round_trips[i], st.committed,
                "{s:?}: one inter-DC round trip per transaction"
            );
            assert_eq!(st.stage_inter_dc_messages[i], st.committed * 2 * (dcs - 1), "{s:?}: 2(n-1) messages");
        }
    }
}

/// A yes vote from a replica that missed a write, and the first replica's value rather than
/// the freshest: 5 replicas (more than 3/4 is 4, so a replica may lag), a slow replay, few
/// rows. Caught; the same run without the bug is clean.
#[test]
fn counting_stale_replicas_is_caught() {
    let sets: Vec<String> = [
        "protocol.replication=5",
        "protocol.options.replay_interval_ns=200000000",
        "run.measure_us=1000000",
        "workload=Ycsb((rows_per_node: 20, ops: 2, write_fraction: 0.5, hot_probability: 0.0))",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let clean = run_file("ycsb.ron", &sets, None);
    check("5 replicas, slow replay", &clean, 50);
    let caught = (1..=3).any(|seed| {
        let mut s = sets.clone();
        s.push(format!("run.seed={seed}"));
        !run_file("ycsb.ron", &s, Some("RedtStaleVotesCount")).report.clean()
    });
    assert!(caught, "RedtStaleVotesCount not caught in 3 seeds");
}

/// The Thomas write rule matters when a node's log holds a later transaction's entry before
/// an earlier one's: delays that break the triangle inequality (dc0-dc3 slow, both near the
/// others) let a decision be overtaken (scenarios/redt/triangle.ron). Without the rule a
/// replica ends on an older version.
#[test]
fn installing_without_the_thomas_rule_is_caught() {
    let clean = run_file("triangle.ron", &["run.measure_us=500000".to_string()], None);
    check("triangle", &clean, 100);
    let caught = (1..=3).any(|seed| {
        let s = vec!["run.measure_us=500000".to_string(), format!("run.seed={seed}")];
        !run_file("triangle.ron", &s, Some("RedtIgnoreThomasRule")).report.clean()
    });
    assert!(caught, "RedtIgnoreThomasRule not caught in 3 seeds");
}

#[test]
fn same_seed_same_digest() {
    let a = run(&["run.measure_us=30000", "run.seed=3"]);
    assert_eq!(a.digest, run(&["run.measure_us=30000", "run.seed=3"]).digest);
    assert_ne!(a.digest, run(&["run.measure_us=30000", "run.seed=4"]).digest);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]
    /// Random data centers (1 to 4, of 1 to 3 nodes), replication (1 to 5, as placement
    /// allows), coroutines, contention and seeds: serializable, nothing lost on any replica.
    #[test]
    fn random_shapes_are_serializable(
        sizes in prop::collection::vec(1u16..=3, 1..=4),
        replication in 1u16..=5,
        coroutines in 1u32..=4,
        rows in prop::sample::select(vec![4u64, 50, 1000]),
        writes in prop::sample::select(vec!["0.0", "0.5", "1.0"]),
        seed in 0u64..1_000_000,
    ) {
        let nodes: u16 = sizes.iter().sum();
        let dcs: Vec<String> = sizes.iter().enumerate().map(|(i, n)| format!("(name: \"d{i}\", nodes: {n})")).collect();
        // The replicas must fit on distinct nodes (placement says when they do not).
        let fits = txbed_txn::placement::Placement::new(
            &sizes.iter().enumerate().flat_map(|(i, &n)| std::iter::repeat_n(i as u16, n as usize)).collect::<Vec<_>>(),
            nodes,
        )
        .copy_load(replication.min(nodes))
        .is_ok();
        prop_assume!(fits && nodes >= 2);
        let mut sets = vec![
            format!("cluster.nodes={nodes}"),
            format!("cluster.coroutines={coroutines}"),
            format!("protocol.replication={}", replication.min(nodes)),
            format!("workload=Ycsb((rows_per_node: {rows}, ops: 3, write_fraction: {writes}, hot_probability: 0.0))"),
            "run.measure_us=60000".to_string(),
            format!("run.seed={seed}"),
        ];
        if sizes.len() >= 2 {
            sets.push(format!("cluster.datacenters=[{}]", dcs.join(", ")));
        } else {
            sets.push("cluster.datacenters=[]".into());
            sets.push("cluster.inter_dc=None".into());
        }
        let r = run_file("ycsb.ron", &sets, None);
        prop_assert!(r.failures.is_empty(), "{:?}: {:?}", sets, r.failures);
        prop_assert!(r.clean(), "{:?}: {:?}", sets, r.report.anomalies.first());
        prop_assert!(r.stats.committed > 0, "{:?}: nothing committed", sets);
    }
}

/// Replicas that cannot sit on distinct nodes of their data centers are refused when the
/// scenario is checked, naming the field.
#[test]
fn replicas_that_do_not_fit_the_data_centers_are_refused() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/redt/sockets.ron");
    let sets = ["cluster.nodes=3".to_string(), "cluster.datacenters=[(nodes: 2), (nodes: 1)]".to_string()];
    let err = Scenario::load_with(&path, &sets).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("protocol.replication") && err.contains("do not fit"), "{err}");
}

/// Sec. 5.1: CI-sized versions of the node-crash and data-center-crash campaigns
/// (`scenarios/redt/campaign-{node,dc,five}.ron`: one crash per run at a random time,
/// restarted mid-run or after it; 3 replicas, and 5 where partitions commit without the
/// crashed replica; 300 seeds each in docs/protocols.md, "RedT: failures") end clean:
/// serializable, nothing committed lost, every replica current. And with the planted bugs (a
/// new coordinator aborting what an executor received committed; a restored copy skipping
/// its catch-up) the same machinery finds failures.
#[test]
fn node_and_data_center_crash_campaigns_end_clean_and_the_recovery_bug_is_caught() {
    use txbed_runner::campaign::{self, Kind, Protocols, Setup};
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let setup = |file: &str, seeds: std::ops::Range<u64>, bug: Option<&str>| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/redt").join(file);
        // "campaign-dc.ron+5": that campaign with 5 replicas.
        let (file, sets) = match file.split_once('+') {
            Some((f, r)) => (f, vec![format!("protocol.replication={r}")]),
            None => (file, Vec::new()),
        };
        let path = path.with_file_name(file);
        let (s, _) = Scenario::load_with(&path, &sets).unwrap();
        let (targets, profile, bug) =
            campaign::prepare(&s, path.to_str().unwrap(), None, &Protocols::Scenario, bug).unwrap();
        Setup { targets, profile, seeds: seeds.collect(), bug }
    };
    let seeds: u64 = std::env::var("TXBED_REDT_CAMPAIGN_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
    let mut resolved = 0;
    // The 5-replica campaigns run half as many seeds in CI (their runs are longer).
    let half = seeds.div_ceil(2);
    for (file, seeds) in [
        ("campaign-node.ron", seeds),
        ("campaign-dc.ron", seeds),
        ("campaign-five.ron", half),
        ("campaign-dc.ron+5", half),
    ] {
        let rows = campaign::run_all(&setup(file, 1..1 + seeds, None), jobs, &|_| {});
        let bad: Vec<String> = rows
            .iter()
            .filter(|r| r.outcome.kind != Kind::Clean)
            .map(|r| format!("seed {}: {:?}", r.seed, r.outcome))
            .collect();
        assert!(bad.is_empty(), "{file}: {bad:?}");
        assert!(rows.iter().all(|r| r.outcome.faults_applied >= 1), "{file}: every run has its crash");
        resolved += rows.iter().map(|r| r.outcome.rolled_forward).sum::<u64>();
    }
    assert!(resolved > 0, "some failed coordinator's transactions were committed by recovery");
    let rows = campaign::run_all(
        &setup("campaign-node.ron", 1..1 + seeds, Some("RedtRecoveryAbortsCommitted")),
        jobs,
        &|_| {},
    );
    let caught = rows.iter().filter(|r| r.outcome.kind.is_failure()).count();
    assert!(caught > 0, "the planted recovery bug was not caught in {seeds} seeds");
    // With 5 replicas, a restored copy that skips the catch-up on what committed without it.
    let rows = campaign::run_all(
        &setup("campaign-five.ron", 1..1 + half, Some("RedtRestoredCopyMissesWrites")),
        jobs,
        &|_| {},
    );
    let caught = rows.iter().filter(|r| r.outcome.kind.is_failure()).count();
    assert!(caught > 0, "the planted catch-up bug was not caught in {half} seeds");
}

/// Sec. 5.1's "no wait below 1/4 failed": with 5 replicas a partition keeps committing while
/// one of its replicas' nodes is down; with 3 it waits for the replica's restoration. Counted
/// on `crash-node.ron` (node 3 down from 21 ms, restarted at 40 ms): committed transactions
/// that wrote a row of node 3's own partition and began and ended while it was down. Both
/// runs checked.
#[test]
fn five_replicas_keep_committing_through_a_crash_three_wait() {
    let during = |replication: u16| {
        let r = run_file("crash-node.ron", &[format!("protocol.replication={replication}")], None);
        assert!(r.clean(), "{replication} replicas: {:?} {:?}", r.failures, r.report.anomalies.first());
        let rows = 3 * 2000..4 * 2000;
        r.history
            .txns
            .iter()
            .filter(|t| t.status == txbed_checker::Status::Committed)
            .filter(|t| t.start_ns >= 21_000_000 && t.end_ns < 40_000_000)
            .filter(|t| t.writes.iter().any(|w| rows.contains(&txbed_txn::recovery::key_of(w.key).row)))
            .count()
    };
    let (five, three) = (during(5), during(3));
    assert!(five > 0, "5 replicas: nothing written to the crashed node's partition while it was down");
    assert_eq!(three, 0, "3 replicas: a partition with a replica down committed");
}
