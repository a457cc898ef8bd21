//! TPC-C on every protocol of `REGISTRY`, in RPC and one-sided form and every hybrid
//! code, on small clusters: every run is checked serializable with nothing lost, W_YTD -
//! C_YTD_PAYMENT conserved, and TPC-C's consistency conditions 1-4 holding at the end. A
//! protocol that is not implemented yet (its attempts fail saying so) is skipped. Failures
//! print the shape to replay.

use std::sync::Arc;

use proptest::prelude::*;
use txbed_runner::{run_txns, TxnRunResult};
use txbed_tests::harness::{problems, run_sockets, Protocol, Shape, CALVIN, NOWAIT, OCC, REGISTRY};
use txbed_txn::protocol::Rdma as Options;
use txbed_txn::stage::Hybrid;
use txbed_workloads::tpcc::{PreparedTpcc, Tpcc, KINDS};
use txbed_workloads::*;

#[derive(Copy, Clone, Debug, PartialEq)]
enum Mix {
    /// 45/43/4/4/4.
    Full,
    /// New-order only, every one distributed (DrTM+H's TPC-C/no).
    NewOrder,
    /// 20% of each type: the rare ones get exercised in a short run.
    Even,
}

fn tpcc(mix: Mix, w: u32) -> Tpcc {
    Tpcc {
        warehouses_per_node: w,
        mix: if mix == Mix::Even { [20; 5] } else { [45, 43, 4, 4, 4] },
        new_order_only: mix == Mix::NewOrder,
        distributed: if mix == Mix::NewOrder { 1.0 } else { 0.0 },
        items: 500,
        customers_per_district: 30,
        order_headroom: 500,
        history_per_terminal: 16,
        ..Tpcc::default()
    }
}

/// 2 warehouses a node, 3 coroutines a worker, for 300 us; 1 ms for a protocol that sends
/// every record to every replica in each phase (TAPIR: three round trips carrying R copies),
/// so each coordinator still finishes several transactions.
fn shape(protocol: Protocol, mix: Mix, hybrid: Hybrid, seed: u64) -> Shape<Tpcc> {
    let duration_ns = if protocol.stores_replicas() { 1_000_000 } else { 300_000 };
    Shape { coroutines: 3, duration_ns, ..Shape::new(protocol, tpcc(mix, 2), hybrid, seed) }
}

#[track_caller]
fn assert_clean(s: &Shape<Tpcc>, r: &TxnRunResult) {
    s.assert_clean(r);
    // The five conditions (1-4 and 10) and the conserved total were all checked.
    let tpcc = r.history.invariants.iter().filter(|i| i.name.starts_with("TPC-C 3.3.2.")).count();
    assert_eq!(tpcc, 5, "{}", s.replay());
    s.assert_commits(r, 10);
}

/// Committed transactions per type, from the history (the window may miss long ones).
fn committed_kinds(r: &TxnRunResult) -> std::collections::BTreeMap<String, u64> {
    let mut kinds = std::collections::BTreeMap::new();
    for t in &r.history.txns {
        *kinds.entry(t.label.clone()).or_default() += 1;
    }
    kinds
}

/// Every protocol, RPC and one-sided, full mix and new-order only: serializable, nothing
/// lost, the consistency conditions hold.
#[test]
fn every_protocol_and_mode_runs_tpcc() {
    let mut ran = Vec::new();
    for &protocol in REGISTRY {
        for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
            for mix in [Mix::Full, Mix::NewOrder] {
                let s = shape(protocol, mix, hybrid, 1);
                let r = s.run();
                assert_clean(&s, &r);
                let kinds = committed_kinds(&r);
                if mix == Mix::NewOrder {
                    assert_eq!(kinds.keys().collect::<Vec<_>>(), ["new-order"], "{}", s.replay());
                } else {
                    assert!(kinds.len() >= 3, "{}: {kinds:?}", s.replay());
                    // A stock-level's input (~400 keys, 3-4 KB) spans several CALVIN messages.
                    if protocol == CALVIN {
                        assert!(kinds.contains_key("stock-level"), "{}: {kinds:?}", s.replay());
                    }
                }
                ran.push(protocol.name());
            }
        }
    }
    ran.dedup();
    eprintln!("TPC-C ran on {ran:?}");
    assert_eq!(ran.len(), REGISTRY.len(), "{ran:?}");
}

/// With every type at 20%, each commits, on both primitives, under locking and OCC.
#[test]
fn every_transaction_type_commits() {
    for protocol in [NOWAIT, OCC] {
        for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
            let s = Shape { duration_ns: 500_000, ..shape(protocol, Mix::Even, hybrid, 2) };
            let r = s.run();
            assert_clean(&s, &r);
            let kinds = committed_kinds(&r);
            for k in KINDS {
                assert!(kinds.get(k).copied().unwrap_or(0) > 0, "{}: no {k} committed: {kinds:?}", s.replay());
            }
        }
    }
}

proptest! {
    // Random small shapes, protocols, hybrid codes, mixes and seeds.
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_shapes_keep_tpcc_consistent(
        p in 0usize..REGISTRY.len(),
        nodes in 2u16..=3,
        warehouses in 1u32..=2,
        workers in 1u16..=2,
        coroutines in 1u32..=4,
        code in 0u32..512,
        new_order in any::<bool>(),
        seed in 0u64..1_000_000,
    ) {
        let protocol = REGISTRY[p];
        let codes = Hybrid::all_codes(protocol.stages());
        let hybrid = codes[code as usize % codes.len()];
        let mix = if new_order { Mix::NewOrder } else { Mix::Full };
        let s = Shape {
            w: tpcc(mix, warehouses),
            nodes,
            replication: 3.min(nodes),
            workers,
            coroutines,
            duration_ns: 200_000,
            ..shape(protocol, mix, hybrid, seed)
        };
        let r = s.run();
        let res = s.check(&r);
        prop_assert!(res.is_ok(), "{}", res.unwrap_err());
    }
}

/// A new-order that forgets to bump D_NEXT_O_ID (its write of the district is dropped): the
/// history stays serializable, but consistency condition 2 catches it.
struct ForgetsNextOrderId(PreparedTpcc);

impl Workload for ForgetsNextOrderId {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn tables(&self) -> Vec<Table> {
        self.0.tables()
    }
    fn home(&self, key: Key, nodes: u16) -> u16 {
        self.0.home(key, nodes)
    }
    fn initial(&self, key: Key) -> Vec<u8> {
        self.0.initial(key)
    }
    fn generate(&self, rng: &mut rand_chacha::ChaCha8Rng, node: u16, nodes: u16) -> TxnSpec {
        self.0.generate(rng, node, nodes)
    }
    fn generate_at(&self, rng: &mut rand_chacha::ChaCha8Rng, node: u16, nodes: u16, t: Terminal) -> TxnSpec {
        self.0.generate_at(rng, node, nodes, t)
    }
    fn lookups(&self, spec: &TxnSpec) -> Vec<Lookup> {
        self.0.lookups(spec)
    }
    fn answer(&self, args: &[i64], index: &mut OrderedIndex, read: &dyn Fn(Key) -> Option<Vec<u8>>) -> Vec<i64> {
        self.0.answer(args, index, read)
    }
    fn resolve(&self, spec: &TxnSpec, answers: &[Vec<i64>]) -> Result<TxnSpec, String> {
        self.0.resolve(spec, answers)
    }
    fn retry_on_user_abort(&self, spec: &TxnSpec) -> bool {
        self.0.retry_on_user_abort(spec)
    }
    fn max_accesses(&self) -> Vec<(u16, u32)> {
        self.0.max_accesses()
    }
    fn check_consistency(&self, node: u16, nodes: u16, read: txbed_workloads::ReadInto) -> Vec<Consistency> {
        self.0.check_consistency(node, nodes, read)
    }
    fn conserved(&self, key: Key, value: &[u8]) -> i64 {
        self.0.conserved(key, value)
    }
    fn execute(&self, spec: &TxnSpec, reads: &[&[u8]], old: &[&[u8]]) -> Executed {
        match self.0.execute(spec, reads, old) {
            Executed::Commit { mut new_values, external_delta } if spec.kind == "new-order" => {
                // The district is the last write: keep its old D_NEXT_O_ID.
                *new_values.last_mut().unwrap() = old.last().unwrap().to_vec();
                Executed::Commit { new_values, external_delta }
            }
            other => other,
        }
    }
}

#[test]
fn a_new_order_that_forgets_d_next_o_id_fails_condition_two() {
    for protocol in [NOWAIT, OCC] {
        for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
            let s = shape(protocol, Mix::NewOrder, hybrid, 3);
            let forgets = ForgetsNextOrderId(s.w.prepare(s.nodes, s.workers, s.coroutines));
            let r = run_txns(&s.spec_with(Arc::new(forgets))).unwrap();
            assert!(r.report.serializable, "{}\n{}", s.replay(), problems(&r));
            assert!(!r.report.invariants_ok, "{}: the lost D_NEXT_O_ID went unnoticed", s.replay());
            let cond2 = r.history.invariants.iter().find(|i| i.name.starts_with("TPC-C 3.3.2.2")).unwrap();
            assert!(cond2.actual > 0 && cond2.name.contains("max(O_ID)"), "{}: {cond2:?}", s.replay());
            assert!(r.report.anomalies.iter().any(|a| a.explanation.contains("3.3.2.2")), "{}", s.replay());
        }
    }
}

/// Per-type throughput adds up to the total.
#[test]
fn throughput_is_reported_per_type() {
    let s = Shape { duration_ns: 1_000_000, ..shape(OCC, Mix::Full, Hybrid::RPC, 4) };
    let r = s.run();
    let sum: u64 = r.measured.per_kind.values().sum();
    assert_eq!(sum, r.measured.committed);
    assert!(r.measured.per_kind.get("new-order") > Some(&0), "{:?}", r.measured.per_kind);
    assert!(r.measured.per_kind.get("payment") > Some(&0), "{:?}", r.measured.per_kind);
}

/// The scenario files load, and `--set workload.name=tpcc` gives TPC-C with every default.
#[test]
fn tpcc_scenarios_load_and_fit() {
    use txbed_scenario::{Scenario, Workload as W};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for f in ["scenarios/tpcc/quick.ron", "scenarios/tpcc/full-mix-8.ron", "scenarios/drtmh/tpcc-no-16.ron"] {
        let (s, _) = Scenario::load(&root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let t = match &s.workload {
            W::Txn(w) => w.params::<Tpcc>().unwrap_or_else(|| panic!("{f}: not TPC-C")),
            W::Verbs(_) => panic!("{f}: not TPC-C"),
        };
        let c = &s.cluster;
        // The whole cluster's stores, as the simulator holds them in one process.
        let s = shape(OCC, Mix::Full, Hybrid::RPC, 1);
        let mut spec = s.spec_with(Arc::new(t.prepare(c.nodes, c.workers, c.coroutines)));
        spec.nodes = c.nodes;
        spec.workers = c.workers;
        let bytes = txbed_runner::layout(&spec).bytes * c.nodes as u64;
        eprintln!("{f}: {:.2} GiB of stores", bytes as f64 / (1u64 << 30) as f64);
        assert!(bytes < 16 << 30, "{f}: {bytes} B of stores do not fit a 24 GiB machine");
    }
    let (s, _) = Scenario::load_with(&root.join("scenarios/quickstart.ron"), &["workload.name=tpcc".into()]).unwrap();
    assert_eq!(s.workload, W::Txn(txbed_workloads::tpcc::KIND.default_config()));
    let err =
        Scenario::load_with(&root.join("scenarios/tpcc/quick.ron"), &["workload.remote_item=2".into()]).unwrap_err();
    assert!(err.0.contains("workload.remote_item"), "{}", err.0);
}

/// The same workload on the sockets backend (every node a thread of this process, loopback
/// TCP and UDP): lookups over real datagrams, an index per worker thread, consistency checked
/// on every node and gathered at rank 0. New-order's large log records once lapped backups'
/// rings here, whose CPUs lag on real threads (about 7 runs in 10 lost a replica's writes):
/// writers now wait for the backup to apply (`protocols/src/log.rs`).
#[test]
fn tpcc_runs_on_the_sockets_backend() {
    for (protocol, mix, onesided) in [(OCC, Mix::Full, false), (NOWAIT, Mix::NewOrder, true)] {
        let hybrid = if onesided { Hybrid::full(protocol.stages()) } else { Hybrid::RPC };
        let s = Shape { duration_ns: 200_000_000, ..shape(protocol, mix, hybrid, 5) };
        let mut spec = s.spec();
        spec.warmup_ns = 20_000_000;
        let r = run_sockets(&spec);
        assert_clean(&s, &r);
        assert!(r.measured.per_kind.contains_key("new-order"), "{}", s.replay());
    }
}

/// New-order's log records (3-4 KB per backup) fill small one-sided log rings within a few
/// transactions: writers must wait for the backup to apply what they wrote rather than lap it,
/// and the backup must read a wrap marker in a ring's last 16 bytes. Both once lost writes.
#[test]
fn small_log_rings_lose_nothing() {
    for (protocol, mix) in [(OCC, Mix::NewOrder), (NOWAIT, Mix::NewOrder), (OCC, Mix::Full)] {
        for kib in [4, 8] {
            let hybrid = Hybrid::full(protocol.stages());
            let options = Options { log_ring_bytes: kib << 10, ..Options::default() };
            // Longer than the other TPC-C runs: writers waiting for room commit slowly.
            let s = Shape { options, duration_ns: 450_000, ..shape(protocol, mix, hybrid, 8) };
            let r = s.run();
            assert_clean(&s, &r);
            // Each (sender worker, backup) ring is written around at least twice on average.
            let rings = s.nodes as u64 * s.workers as u64 * 2;
            let laps = r.stats.log_bytes / (rings * (kib << 10));
            assert!(laps >= 2, "{}: {} B logged, {laps} laps", s.replay(), r.stats.log_bytes);
            // A record fills most of a 4 KiB ring: the awaited reclaim is exercised.
            if kib == 4 {
                assert!(r.stats.log_room_waits > 0, "{}: no writer waited for room", s.replay());
            }
            eprintln!("{}: {laps} laps", s.replay());
        }
    }
}

/// With a 1 KiB MTU, TPC-C's large messages (stock-level's lookups and CALVIN input, log
/// records, write-back bodies) exceed a datagram: the RPC layer fragments them, and every
/// protocol stays clean in both modes.
#[test]
fn small_mtu_runs_tpcc_on_every_protocol() {
    for &protocol in REGISTRY {
        for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
            let s = Shape { mtu: 1024, duration_ns: 400_000, ..shape(protocol, Mix::Even, hybrid, 9) };
            let r = s.run();
            assert_clean(&s, &r);
            assert!(committed_kinds(&r).contains_key("stock-level"), "{}", s.replay());
        }
    }
}

/// A TPC-C run is a pure function of its seed, lookups and index included.
#[test]
fn tpcc_runs_are_deterministic() {
    let s = shape(OCC, Mix::Full, Hybrid::full(OCC.stages()), 6);
    let (a, b) = (s.run(), s.run());
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.history, b.history);
    assert_ne!(a.digest, Shape { seed: 7, ..s }.run().digest);
}

/// Every hybrid code of every protocol, on a tiny cluster with every transaction type in the
/// mix: serializable, nothing lost, the conditions hold.
#[test]
fn every_hybrid_code_of_every_protocol_runs_tpcc() {
    let t0 = std::time::Instant::now();
    let mut runs = 0;
    for &protocol in REGISTRY {
        for (k, hybrid) in Hybrid::all_codes(protocol.stages()).into_iter().enumerate() {
            let s = Shape {
                w: tpcc(Mix::Even, 1),
                nodes: 2,
                replication: 2,
                workers: 1,
                coroutines: 3,
                duration_ns: 150_000,
                ..shape(protocol, Mix::Even, hybrid, 10 + k as u64)
            };
            let r = s.run();
            s.assert_clean(&r);
            s.assert_commits(&r, 0);
            runs += 1;
        }
    }
    eprintln!("{runs} runs in {:.1} s", t0.elapsed().as_secs_f64());
}
