//! CALVIN (RCC Sec. 4.6) on the simulator: every hybrid code (input dispatch and value
//! forwarding, each by RPC or one-sided WRITEs) on SmallBank and YCSB at low and high
//! contention, on random small clusters, each run checked by the history checker; the global
//! order is the same on every node and in every run of a seed; a planted bug is caught.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use txbed::txn::{run_txns, Protocol, TxnRunResult, TxnRunSpec};
use txbed_protocols::calvin::STAGES;
use txbed_protocols::node::{Bug, Options};
use txbed_protocols::stage::Hybrid;
use txbed_sim::NicProfile;
use txbed_workloads::smallbank::SmallBank;
use txbed_workloads::ycsb::Ycsb;
use txbed_workloads::Workload;

#[derive(Copy, Clone, Debug)]
enum W {
    SmallBankHot,
    YcsbLow,
    YcsbHot,
}

const WORKLOADS: [W; 3] = [W::SmallBankHot, W::YcsbLow, W::YcsbHot];

fn workload(w: W, nodes: u16) -> Arc<dyn Workload> {
    match w {
        W::SmallBankHot => Arc::new(SmallBank { accounts_per_node: 400, distributed: 0.5, ..SmallBank::default() }),
        W::YcsbLow => Arc::new(
            Ycsb { rows_per_node: 20_000, ops: 4, write_fraction: 0.5, hot_probability: 0.0, ..Ycsb::default() }
                .prepare(nodes),
        ),
        W::YcsbHot => Arc::new(
            Ycsb { rows_per_node: 2_000, ops: 4, write_fraction: 0.5, hot_probability: 0.5, ..Ycsb::default() }
                .prepare(nodes),
        ),
    }
}

#[derive(Clone, Debug)]
struct Shape {
    w: W,
    nodes: u16,
    workers: u16,
    coroutines: u32,
    replication: u16,
    hybrid: Hybrid,
    seed: u64,
    bug: Option<Bug>,
    options: Options,
    trace: bool,
}

impl Shape {
    fn new(w: W, hybrid: Hybrid, seed: u64) -> Shape {
        Shape {
            w,
            nodes: 3,
            workers: 2,
            coroutines: 4,
            replication: 3,
            hybrid,
            seed,
            bug: None,
            options: Options::default(),
            trace: false,
        }
    }
    fn spec(&self) -> TxnRunSpec {
        let mut profile = NicProfile::load("cx4").unwrap();
        profile.nics_per_node = 1;
        TxnRunSpec {
            link_delay_ns: Vec::new(),
            protocol: Protocol::Calvin,
            nodes: self.nodes,
            workers: self.workers,
            coroutines: self.coroutines,
            profile,
            seed: self.seed,
            hybrid: self.hybrid,
            replication: self.replication.min(self.nodes),
            workload: workload(self.w, self.nodes),
            warmup_ns: 0,
            duration_ns: 150_000,
            cache_bytes: 1 << 20,
            options: self.options,
            bug: self.bug,
            allow_unsafe_atomics: false,
            trace: self.trace,
        }
    }
    fn replay(&self) -> String {
        format!("replay: CALVIN {self:?}")
    }
    fn run(&self) -> TxnRunResult {
        run_txns(&self.spec()).unwrap_or_else(|e| panic!("{e}\n{}", self.replay()))
    }
}

fn assert_clean(s: &Shape, r: &TxnRunResult) {
    assert!(
        r.clean(),
        "{}\nserializable={} nothing_lost={:?} invariants_ok={} failures={:?}\n{}",
        s.replay(),
        r.report.serializable,
        r.report.nothing_lost,
        r.report.invariants_ok,
        r.failures,
        r.report.anomalies.iter().map(|a| a.explanation.as_str()).collect::<Vec<_>>().join("\n")
    );
    assert!(r.stats.committed > 20, "{}: only {} commits", s.replay(), r.stats.committed);
    assert_eq!(r.stats.aborted_conflict, 0, "{}: CALVIN has no conflict aborts", s.replay());
}

/// Every hybrid code (input and forwarding, each RPC or one-sided) on SmallBank and YCSB at
/// low and high contention, two seeds each: serializable, nothing lost, invariants hold.
#[test]
fn every_hybrid_code_is_serializable() {
    let codes = Hybrid::all_codes(&STAGES);
    assert_eq!(codes.len(), 4);
    for code in codes {
        for w in WORKLOADS {
            for seed in [1, 2] {
                let s = Shape::new(w, code, seed);
                let r = s.run();
                assert_clean(&s, &r);
                // Both communication stages ran and were accounted.
                for stage in STAGES {
                    let i = txbed_protocols::node::stage_index(stage);
                    assert!(r.stats.stage_calls[i] > 0, "{}: no {} stage", s.replay(), stage.name());
                }
            }
        }
    }
}

proptest! {
    // Random cluster shapes x codes x workloads x seeds, each a full run and check.
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_shapes_are_serializable(
        nodes in 2u16..=4,
        workers in 1u16..=2,
        coroutines in 1u32..=4,
        replication in 1u16..=3,
        code in 0usize..4,
        w in 0usize..3,
        seed in 0u64..1_000_000,
    ) {
        let hybrid = Hybrid::all_codes(&STAGES)[code];
        let s = Shape { nodes, workers, coroutines, replication, ..Shape::new(WORKLOADS[w], hybrid, seed) };
        let r = s.run();
        prop_assert!(r.clean(), "{}\n{:?} {:?}", s.replay(), r.failures, r.report.anomalies.first());
        prop_assert!(r.stats.committed > 5, "{}: {} commits", s.replay(), r.stats.committed);
        prop_assert_eq!(r.stats.aborted_conflict, 0);
    }
}

/// Every combination of the RDMA options keeps CALVIN serializable (doorbell batching and
/// passive ACK apply to the one-sided channels, doorbell batching to the RPC datagrams).
#[test]
fn every_option_combination_is_serializable() {
    for bits in 0..16u32 {
        let options = Options {
            outstanding: bits & 1 != 0,
            doorbell: bits & 2 != 0,
            passive_ack: bits & 4 != 0,
            speculative: bits & 8 != 0,
            ..Options::default()
        };
        for hybrid in [Hybrid::RPC, Hybrid::full(&STAGES)] {
            let s = Shape { options, ..Shape::new(W::YcsbHot, hybrid, 5) };
            assert_clean(&s, &s.run());
        }
    }
}

/// Per node, the ids of the global order it computed ("calvin order" trace instants) and of
/// the transactions whose writes it applied ("calvin commit").
fn orders(r: &TxnRunResult, nodes: u16, name: &str) -> Vec<Vec<(u64, u64)>> {
    let mut per: Vec<Vec<(u64, u64)>> = vec![Vec::new(); nodes as usize];
    for e in r.trace.iter().filter(|e| e.name == name) {
        let arg = |k: &str| e.args.iter().find(|(n, _)| *n == k).map(|a| a.1).unwrap();
        per[e.node as usize].push((arg("gseq"), arg("id")));
    }
    per
}

/// CALVIN's determinism: every node computes the same global order (epoch, sequencer,
/// position), two runs of a seed compute the same one, and each record's committed versions
/// were installed in that order.
#[test]
fn every_node_commits_in_the_same_order() {
    for (w, hybrid) in [(W::SmallBankHot, Hybrid::RPC), (W::YcsbHot, Hybrid::full(&STAGES)), (W::YcsbLow, Hybrid(128))]
    {
        let s = Shape { nodes: 4, trace: true, ..Shape::new(w, hybrid, 11) };
        let (a, b) = (s.run(), s.run());
        assert_clean(&s, &a);
        let order = orders(&a, s.nodes, "calvin order");
        assert!(order[0].len() as u64 >= a.stats.committed, "{}: order shorter than the commits", s.replay());
        for (node, o) in order.iter().enumerate() {
            assert_eq!(o, &order[0], "{}: node {node} ordered differently from node 0", s.replay());
        }
        assert!(order[0].windows(2).all(|p| p[0].0 < p[1].0), "{}: order not by (epoch, node, position)", s.replay());
        assert_eq!(orders(&b, s.nodes, "calvin order"), order, "{}: another run of the seed differs", s.replay());
        assert_eq!(orders(&b, s.nodes, "calvin commit"), orders(&a, s.nodes, "calvin commit"));
        assert_eq!(a.digest, b.digest);
        // Tracing changes nothing in the run.
        assert_eq!(Shape { trace: false, ..s.clone() }.run().digest, a.digest);
        // Each record's versions were installed in the global order, and every node applied
        // its writes in an order consistent with it for the records it shares with the others.
        let pos: BTreeMap<u64, usize> = order[0].iter().enumerate().map(|(i, &(_, id))| (id, i)).collect();
        let mut writers: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        for t in &a.history.txns {
            assert!(pos.contains_key(&t.id), "{}: committed {} was never ordered", s.replay(), t.id);
            for w in &t.writes {
                writers.entry(w.key).or_default().push((w.version, t.id));
            }
        }
        for (key, mut ws) in writers {
            ws.sort();
            assert!(
                ws.windows(2).all(|p| pos[&p[0].1] < pos[&p[1].1]),
                "{}: key {key:#x} written out of the global order",
                s.replay()
            );
        }
        let c = Shape { seed: 12, ..s.clone() }.run();
        assert_ne!(orders(&c, s.nodes, "calvin order"), order, "another seed, same order");
    }
}

/// The planted bug (participants read before the deterministic lock manager grants their
/// turn) is caught by the checker, in RPC and one-sided form.
#[test]
fn planted_bug_is_caught() {
    for hybrid in [Hybrid::RPC, Hybrid::full(&STAGES)] {
        let caught = (1..=1000u64).find(|&seed| {
            let s = Shape { bug: Some(Bug::CalvinReadBeforeLock), ..Shape::new(W::YcsbHot, hybrid, seed) };
            let r = s.run();
            let bad = !r.report.serializable || r.report.nothing_lost != Some(true) || !r.report.invariants_ok;
            if bad {
                eprintln!(
                    "caught: {}\n{}",
                    s.replay(),
                    r.report.anomalies.first().map_or("", |a| a.explanation.as_str())
                );
            }
            bad
        });
        assert!(caught.is_some(), "CALVIN planted bug not caught in 1000 seeds ({hybrid})");
    }
}

/// The same code over the sockets backend (three nodes as threads of this process, real
/// clocks): each worker has its own protocol state there, so coordinators on worker 1 reach
/// the sequencer on worker 0 by RPC.
#[test]
fn sockets_run_is_serializable() {
    use std::net::{SocketAddr, TcpListener};
    for hybrid in [Hybrid::RPC, Hybrid::full(&STAGES)] {
        let s = Shape::new(W::SmallBankHot, hybrid, 3);
        let mut spec = s.spec();
        spec.warmup_ns = 5_000_000;
        spec.duration_ns = 100_000_000;
        let addr: SocketAddr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let nodes: Vec<_> = (0..3u32)
            .map(|rank| {
                let spec = spec.clone();
                std::thread::spawn(move || {
                    txbed::host::run_sockets_node(
                        &spec,
                        txbed::bootstrap::Rank { rank, size: 3 },
                        addr,
                        "127.0.0.1".parse().unwrap(),
                    )
                })
            })
            .collect();
        let mut out = None;
        for (rank, h) in nodes.into_iter().enumerate() {
            let r = h.join().unwrap().unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            out = out.or(r);
        }
        let r = out.unwrap();
        eprintln!(
            "sockets {hybrid}: {} committed, {} late, stages {:?}",
            r.stats.committed, r.stats.aborted_conflict, r.stats.stage_calls
        );
        assert!(r.clean(), "{}: {:?} {:?}", s.replay(), r.failures, r.report.anomalies.first());
        assert!(r.stats.committed > 30, "{} commits", r.stats.committed);
    }
}

/// A longer one-sided run wraps every ring several times (frames skipping the ring's end,
/// senders waiting for credit) and stays serializable.
#[test]
fn one_sided_rings_wrap_and_stay_serializable() {
    for options in [Options::default(), Options { passive_ack: true, doorbell: false, ..Options::default() }] {
        let s = Shape { coroutines: 8, options, ..Shape::new(W::YcsbHot, Hybrid::full(&STAGES), 4) };
        let mut spec = s.spec();
        spec.duration_ns = 3_000_000;
        let r = run_txns(&spec).unwrap();
        assert_clean(&s, &r);
        let channels = (s.nodes * (s.nodes - 1)) as u64;
        for stage in STAGES {
            let per_channel = r.stats.stage_bytes[txbed_protocols::node::stage_index(stage)] / channels;
            eprintln!("{}: {} B per channel, {} commits", stage.name(), per_channel, r.stats.committed);
            assert!(
                per_channel > 3 * txbed_protocols::calvin::RING_BYTES / 2,
                "{}: {} rings not wrapped",
                s.replay(),
                stage.name()
            );
        }
    }
}
