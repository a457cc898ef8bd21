//! Issue 15, mechanism 1: records homed on the coordinator's own node take the local path
//! (`protocol.local_path`, `txbed_txn::node::LocalPath`). A one-sided request about a local
//! record is done by the CPU (loads, stores, CPU atomics where the NIC's atomics are GLOB), an
//! RPC to the coordinator's own worker is a direct call of the handler: no NIC, no datagram, no
//! round trip, no wire bytes, only CPU time. With HCA-level atomicity a request list that CASes
//! stays on the NIC (loopback), so every CAS of a lock word is the NIC's (DrTM+H Sec. 5.2).
//!
//! Costs used below (`scenarios/nics/cx4.ron`, host section): a cache-missing memory access,
//! `memory_miss_ns` = 90 (a handler finds a record by key with 2, the bucket then the tuple, or
//! by offset with 1; a one-sided request list about a local record pays 1, the tuple), plus
//! the bytes the CPU copies at `copy_ps_per_byte` = 100 (10 GB/s), rounded up per copy.

use std::sync::Arc;

use txbed_runner::{run_txns, TxnRunResult, TxnRunSpec};
use txbed_sim::profile::Atomicity;
use txbed_tests::harness::*;
use txbed_transport::Opcode;
use txbed_txn::node::stage_index;
use txbed_txn::stage::{Hybrid, Stage};
use txbed_workloads::tpcc::Tpcc;
use txbed_workloads::ycsb::Ycsb;

/// YCSB's tuple under NOWAIT: lock, version and writer words (24 B) and a 64 B record.
const TUPLE: u64 = 24 + 64;

/// A one-node cluster with one worker and one coroutine: every record is local, nothing is
/// replicated (one replica), nothing contends and nothing else runs on the worker, so a stage
/// that never waits takes exactly the CPU time it charges.
fn alone(protocol: Protocol, hybrid: Hybrid, local_path: bool) -> (Shape<W>, TxnRunSpec) {
    let s = Shape {
        nodes: 1,
        workers: 1,
        coroutines: 1,
        replication: 1,
        duration_ns: 300_000,
        ..Shape::new(protocol, W::YcsbLow, hybrid, 3)
    };
    let mut spec =
        s.spec_with(Arc::new(Ycsb { rows_per_node: 2_000, ops: 4, write_fraction: 0.5, ..Ycsb::default() }.prepare(1)));
    spec.local_path = local_path;
    (s, spec)
}

/// Per stage: (executions, round trips, bytes, local accesses, ns), summed over the run.
fn stage(r: &TxnRunResult, st: Stage) -> (u64, u64, u64, u64, u64) {
    let i = stage_index(st);
    let s = &r.stats;
    (s.stage_calls[i], s.stage_round_trips[i], s.stage_bytes[i], s.stage_local[i], s.stage_ns[i])
}

fn run_clean(s: &Shape<W>, spec: &TxnRunSpec) -> TxnRunResult {
    let r = run_txns(spec).unwrap_or_else(|e| panic!("{e}\n{}", s.replay()));
    s.assert_clean(&r);
    s.assert_commits(&r, 20);
    r
}

/// RPC stages on local records: each LOCK is a direct call of the LOCK handler, costing what
/// the handler costs a remote caller's participant: the record found by key (2 misses, 180 ns)
/// and the copy of its reply (status 1 + offset 8 + tuple 88 = 97 B: 9.7, rounded up to 10 ns),
/// so exactly 190 ns per record; each COMMIT write-back and each unlock of a record only read
/// is a direct call by offset with an empty reply: 90 ns. No round trip, no byte on the wire. Through the NIC loopback instead (local path off), every LOCK waits for a UD
/// round trip: at least two MMIOs reaching the NIC (150 ns each), two passes through its
/// pipeline (100 ns each) and two DMA writes of a datagram into host memory (200 ns each):
/// more than 900 ns.
#[test]
fn local_rpcs_are_direct_calls_that_cost_cpu_only() {
    let (s, on) = alone(NOWAIT, Hybrid::RPC, true);
    let r = run_clean(&s, &on);
    let (calls, rtt, bytes, local, ns) = stage(&r, Stage::Lock);
    assert_eq!((rtt, bytes), (0, 0), "{}", s.replay());
    // YCSB draws 4 distinct keys a transaction, and NOWAIT locks them all.
    assert_eq!(local, 4 * calls, "{}", s.replay());
    assert_eq!(ns, (2 * 90 + (1 + 8 + TUPLE).div_ceil(10)) * local, "LOCK: 190 ns per local record");
    let (calls, rtt, bytes, local, ns) = stage(&r, Stage::Commit);
    assert_eq!((rtt, bytes), (0, 0), "{}", s.replay());
    assert_eq!(ns, 90 * local, "COMMIT: 90 ns per record written back or unlocked ({calls} commits)");
    assert_eq!(r.verbs, [0; 7], "a one-node run on the local path posts no verb, not even a datagram");

    let (s, off) = alone(NOWAIT, Hybrid::RPC, false);
    let slow = run_clean(&s, &off);
    let (calls, rtt, _, local, ns) = stage(&slow, Stage::Lock);
    assert_eq!((rtt, local), (calls, 0), "off: every LOCK is one loopback round trip");
    eprintln!("LOCK of 4 records: 760 ns on the local path, {} ns through the loopback", ns / calls);
    assert!(ns / calls > 900, "a loopback LOCK took {} ns", ns / calls);
    assert!(slow.verbs[Opcode::Send as usize] > 0);
    // Every transaction of the lone coroutine waits for loopback round trips when off.
    assert!(r.stats.committed > 3 * slow.stats.committed, "on {} vs off {}", r.stats.committed, slow.stats.committed);
}

/// One-sided stages on local records. With GLOB atomics the CPU does everything: a LOCK of a
/// record is one miss on its tuple (90 ns), its CPU CAS, and one copy of the 88 B tuple into
/// the read set (9 ns), 99 ns, plus at most one copy of a 128 B index bucket (13 ns) the first
/// time the record is located; nothing is posted. With
/// HCA atomics the CAS and the READ behind it go through the NIC loopback: every LOCK is a
/// round trip and posts one CAS per record, while COMMIT and RELEASE (plain stores) stay on
/// the CPU.
#[test]
fn one_sided_locks_stay_on_the_nic_with_hca_atomics() {
    let glob = |on: bool| {
        let (s, mut spec) = alone(NOWAIT, Hybrid::full(NOWAIT.stages()), on);
        spec.profile.atomicity = Atomicity::Glob;
        (s, spec)
    };
    let (s, spec) = glob(true);
    let r = run_clean(&s, &spec);
    let (_, rtt, bytes, local, ns) = stage(&r, Stage::Lock);
    assert_eq!((rtt, bytes), (0, 0), "{}", s.replay());
    assert!(ns >= 99 * local && ns <= (99 + 13) * local, "GLOB LOCK: {ns} ns for {local} records");
    assert_eq!(r.verbs, [0; 7], "GLOB, one node: the CPU does every access");

    let (s, hca) = alone(NOWAIT, Hybrid::full(NOWAIT.stages()), true);
    assert_eq!(hca.profile.atomicity, Atomicity::Hca);
    let r = run_clean(&s, &hca);
    let (calls, rtt, bytes, local, _) = stage(&r, Stage::Lock);
    assert_eq!((rtt, local), (calls, 0), "HCA: LOCK keeps its CAS on the NIC");
    // One CAS (8 B) and one READ of the tuple per record locked.
    assert_eq!(r.verbs[Opcode::Cas as usize], bytes / (8 + TUPLE), "{}", s.replay());
    assert_eq!(r.verbs[Opcode::Cas as usize], r.verbs[Opcode::Read as usize]);
    let (_, rtt, bytes, local, _) = stage(&r, Stage::Commit);
    assert_eq!((rtt, bytes), (0, 0), "HCA: write-back and unlock are plain stores, on the CPU");
    assert!(local > 0);
    assert_eq!(r.verbs[Opcode::Write as usize], 0);
}

/// The HCA rule matters: with the planted bug `CPU_CAS_ON_HCA` the local path locks by CPU CAS
/// although the NIC's atomics are HCA-level. A remote NIC CAS reads the lock word and writes it
/// `atomic_rmw_ns` (500 ns) later; a local CPU CAS in between finds it free and wins too, so two
/// transactions hold the lock and one's write is lost. Two nodes of four workers, one-sided
/// NOWAIT on YCSB with half the accesses on 2 hot rows per node: the checker catches it, and
/// the same runs without the bug are clean.
#[test]
fn cpu_cas_on_hca_atomics_is_caught() {
    let mut caught = 0;
    for seed in 1..=4 {
        let s = Shape {
            nodes: 2,
            workers: 4,
            replication: 2,
            duration_ns: 300_000,
            ..Shape::new(NOWAIT, W::YcsbHigh, Hybrid::full(NOWAIT.stages()), seed)
        };
        let r = s.run();
        s.assert_clean(&r);
        let bad = Shape { bug: Some(txbed_txn::local::CPU_CAS_ON_HCA), ..s };
        let r = bad.run();
        assert!(r.failures.is_empty(), "{}: {:?}", bad.replay(), r.failures);
        eprintln!("seed {seed}: {:?}", r.report.counts);
        caught += !r.report.clean() as u32;
    }
    // All four seeds are caught (two transactions install the same version: a lost update).
    assert!(caught == 4, "only {caught} of 4 runs with CPU CAS on HCA atomics were caught");
}

/// Every protocol, RPC and one-sided, with GLOB atomics (local CPU CAS on lock words, MVCC's
/// rts, SUNDIAL's leases) and with the local path off: clean on contended YCSB.
#[test]
fn every_protocol_is_clean_on_and_off_the_local_path() {
    for &protocol in REGISTRY {
        for hybrid in [Hybrid::RPC, Hybrid::full(protocol.stages())] {
            for (on, atomicity) in [(true, Atomicity::Glob), (false, Atomicity::Hca)] {
                let s = Shape::new(protocol, W::YcsbHigh, hybrid, 5);
                let mut spec = s.spec();
                spec.local_path = on;
                spec.profile.atomicity = atomicity;
                let r = run_txns(&spec).unwrap_or_else(|e| panic!("{e}\n{}", s.replay()));
                s.assert_clean(&r);
                s.assert_commits(&r, 5);
                let local: u64 = r.stats.stage_local.iter().sum();
                assert_eq!(local > 0, on && protocol.name() != "CALVIN", "{} local path {on}", s.replay());
            }
        }
    }
}

/// TPC-C new-order on 2 nodes, one warehouse each (ITEM is replicated on every node), one
/// coordinator per node, under OCC with DrTM+H's code 38 (one-sided READ, LOG, VALIDATE; RPC
/// LOCK and COMMIT).
fn new_orders(remote_item: f64, local_path: bool) -> (Shape<Tpcc>, TxnRunSpec, TxnRunResult) {
    let t = Tpcc {
        warehouses_per_node: 1,
        new_order_only: true,
        remote_item,
        items: 500,
        customers_per_district: 30,
        order_headroom: 2_000,
        history_per_terminal: 16,
        ..Tpcc::default()
    };
    let s = Shape {
        nodes: 2,
        workers: 1,
        coroutines: 1,
        replication: 2,
        duration_ns: 4_000_000,
        ..Shape::new(OCC, t, Hybrid(38), 1)
    };
    let mut spec = s.spec();
    spec.local_path = local_path;
    let r = run_txns(&spec).unwrap_or_else(|e| panic!("{e}\n{}", s.replay()));
    s.assert_clean(&r);
    s.assert_commits(&r, 50);
    (s, spec, r)
}

/// A new-order whose lines all come from its home warehouse touches only its own node. Its
/// READ stage (OCC's E) is then CPU time only: per record one miss on its tuple (90 ns), one
/// copy of the tuple into the read set (at 10 GB/s) and, the first times a record is located,
/// a copy of one or two 128 B index buckets (13 ns each): between 90 + smallest tuple / 10 and
/// 90 + largest tuple / 10 + 26 ns per record. Through the NIC loopback (local path off)
/// every READ stage waits for a round trip (> 900 ns, as above).
#[test]
fn tpcc_new_order_at_home_reads_on_the_cpu() {
    let (s, spec, on) = new_orders(0.0, true);
    let tuples: Vec<u64> = txbed_runner::layout(&spec).tables.iter().map(|t| t.tuple_bytes).collect();
    let (small, large) = (*tuples.iter().min().unwrap(), *tuples.iter().max().unwrap());
    let (calls, rtt, bytes, local, ns) = stage(&on, Stage::Read);
    assert_eq!((rtt, bytes), (0, 0), "{}", s.replay());
    let per = ns / local;
    eprintln!("READ on the local path: {} ns, {per} ns per record ({small}..{large} B tuples)", ns / calls);
    assert!(per >= 90 + small / 10 && per <= 90 + large.div_ceil(10) + 26, "{per} ns per local record");
    let (_, _, off) = new_orders(0.0, false);
    let (calls_off, rtt_off, _, local_off, ns_off) = stage(&off, Stage::Read);
    assert_eq!((rtt_off, local_off), (calls_off, 0));
    eprintln!(
        "READ through the loopback: {} ns; commits {} on, {} off",
        ns_off / calls_off,
        on.stats.committed,
        off.stats.committed
    );
    assert!(ns_off / calls_off > 900, "off: {} ns", ns_off / calls_off);
    assert!(ns / calls < ns_off / calls_off, "READ {} ns on, {} ns off", ns / calls, ns_off / calls_off);
    assert!(on.stats.committed > off.stats.committed, "{} vs {}", on.stats.committed, off.stats.committed);
}

/// With TPC-C's 1% of lines supplied by another warehouse (here the other node's), a
/// new-order of k lines (k uniform in 5..=15) touches the other node with probability
/// 1 - 0.99^k, on average 1 - (1/11) sum 0.99^k = 0.095: its READ is a round trip only then,
/// about 0.095 round trips per execution instead of 1. One coordinator per node keeps aborts
/// (which would re-execute the slower, distributed new-orders more often) rare. Over the
/// ~370 executions of 4 ms the share's standard error is about 0.015 (sqrt(0.095 x 0.905 /
/// 370)), so 0.05..=0.15 is a 3-sigma band.
#[test]
fn tpcc_new_order_reads_mostly_on_the_local_path() {
    let (_, _, on) = new_orders(0.01, true);
    let (calls, rtt, _, local, _) = stage(&on, Stage::Read);
    let share = rtt as f64 / calls as f64;
    eprintln!("READ round trips per execution: {share:.3} ({calls} executions)");
    assert!((0.05..=0.15).contains(&share), "READ round trips per execution {share:.3}, expected ~0.095");
    assert!(local > 5 * calls, "a new-order reads 5-15 lines' ITEM and STOCK rows: {local} local in {calls}");
}

/// The sockets backend runs the same code: its NIC thread applies CAS with the CPU's atomics,
/// so GLOB holds there, and local CPU CAS races remote NIC CAS safely.
#[test]
fn the_local_path_runs_on_the_sockets_backend() {
    for hybrid in [Hybrid::RPC, Hybrid::full(NOWAIT.stages())] {
        let s = Shape { duration_ns: 100_000_000, ..Shape::new(NOWAIT, W::YcsbHigh, hybrid, 2) };
        let mut spec = s.spec();
        spec.profile.atomicity = Atomicity::Glob;
        spec.warmup_ns = 10_000_000;
        let r = run_sockets(&spec);
        s.assert_clean(&r);
        // A wall-clock window: under a loaded test run it held 16 commits once; any will do.
        s.assert_commits(&r, 0);
        assert!(r.stats.stage_local.iter().sum::<u64>() > 0, "{}", s.replay());
    }
}
