//! A sockets run with every node in this process (one thread each), on loopback: the same
//! protocol code as in the simulator, on real threads, TCP and UDP, checked by the checker.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use txbed_real::bootstrap::Rank;
use txbed_real::host::run_sockets_node;
use txbed_runner::TxnRunSpec;
use txbed_sim::NicProfile;
use txbed_txn::protocol::Rdma as Options;
use txbed_txn::stage::Hybrid;
use txbed_txn::ProtocolRef;
use txbed_workloads::smallbank::SmallBank;

const NOWAIT: ProtocolRef = &txbed_protocols::nowait::NoWait;
const OCC: ProtocolRef = &txbed_protocols::occ::Occ;

fn spec(protocol: ProtocolRef, hybrid: Hybrid) -> TxnRunSpec {
    let mut p = NicProfile::load("cx4").unwrap();
    p.nics_per_node = 1;
    TxnRunSpec {
        link_delay_ns: Vec::new(),
        wan: None,
        protocol,
        protocol_options: Default::default(),
        nodes: 3,
        workers: 2,
        coroutines: 4,
        qps_per_node: 1,
        profile: p,
        seed: 1,
        hybrid,
        replication: 3,
        workload: Arc::new(SmallBank { accounts_per_node: 2_000, distributed: 0.3, ..SmallBank::default() }),
        warmup_ns: 20_000_000,
        duration_ns: 200_000_000,
        cache_bytes: 1 << 20,
        warm_cache: false,
        local_path: true,
        retry: txbed_txn::retry::Retry::DEFAULT,
        options: Options::default(),
        bug: None,
        allow_unsafe_atomics: false,
        trace: false,
        clocks: Default::default(),
        faults: None,
        isolation: None,
        cpu: txbed_sim::cpu::CpuProfile::load("haswell").unwrap(),
    }
}

fn run(protocol: ProtocolRef, hybrid: Hybrid) -> txbed_runner::TxnRunResult {
    run_spec(spec(protocol, hybrid))
}

fn run_spec(spec: TxnRunSpec) -> txbed_runner::TxnRunResult {
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let nodes: Vec<_> = (0..3u32)
        .map(|rank| {
            let spec = spec.clone();
            std::thread::spawn(move || {
                run_sockets_node(&spec, Rank { rank, size: 3 }, addr, "127.0.0.1".parse().unwrap())
            })
        })
        .collect();
    let mut out = None;
    for (rank, h) in nodes.into_iter().enumerate() {
        let r = h.join().unwrap().unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(r.is_some(), rank == 0);
        out = out.or(r);
    }
    out.unwrap()
}

#[test]
fn occ_and_nowait_over_sockets_are_serializable() {
    for (protocol, hybrid) in [(OCC, Hybrid(38)), (NOWAIT, Hybrid::RPC), (OCC, Hybrid::full(OCC.stages()))] {
        let r = run(protocol, hybrid);
        eprintln!(
            "{} {hybrid}: {} committed ({} in window), {} conflicts, failures {:?}, anomalies {:?}",
            protocol.name(),
            r.stats.committed,
            r.measured.committed,
            r.stats.aborted_conflict,
            r.failures,
            r.report.counts
        );
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert!(r.stats.committed > 100, "{} commits", r.stats.committed);
        assert!(r.clean(), "{:?}", r.report.anomalies.first());
    }
}

/// One-way delay `d` ns between every pair of distinct nodes of 3.
fn all_links(d: u64) -> Vec<u64> {
    (0..9).map(|i| if i / 3 == i % 3 { 0 } else { d }).collect()
}

fn p50_ms(r: &txbed_runner::TxnRunResult) -> f64 {
    r.measured.latency_ns.value_at_quantile(0.5) as f64 / 1e6
}

/// Emulated long-haul links: every OCC update transaction logs to a backup on another node,
/// so with a one-way delay d each takes at least 2d (one round trip) -- on the sockets backend
/// and in the simulator alike, from the same setting.
#[test]
fn link_delay_slows_transactions_on_sockets_and_simulator() {
    const D: u64 = 3_000_000; // 3 ms one way
    let mut s = spec(OCC, Hybrid(38));
    s.link_delay_ns = all_links(D);
    let real = run_spec(s.clone());
    assert!(real.clean() && real.failures.is_empty(), "{:?}", real.report.anomalies.first());
    assert!(real.measured.committed > 0);
    eprintln!("sockets, 3 ms links: p50 {:.2} ms", p50_ms(&real));
    assert!(p50_ms(&real) >= 2.0 * D as f64 / 1e6, "p50 {:.2} ms", p50_ms(&real));

    s.duration_ns = 30_000_000; // simulated time: 30 ms is plenty for 3 ms links
    s.warmup_ns = 5_000_000;
    let sim = txbed_runner::run_txns(&s).unwrap();
    assert!(sim.clean(), "{:?}", sim.report.anomalies.first());
    s.link_delay_ns.clear();
    let near = txbed_runner::run_txns(&s).unwrap();
    eprintln!("simulator: p50 {:.3} ms with 3 ms links, {:.3} ms without", p50_ms(&sim), p50_ms(&near));
    assert!(p50_ms(&sim) >= 2.0 * D as f64 / 1e6, "p50 {:.3} ms", p50_ms(&sim));
    assert!(p50_ms(&near) < 0.5, "p50 {:.3} ms without delay", p50_ms(&near));
}

/// Real UD can lose datagrams: with the profile's `ud_drop_probability` the sockets backend
/// drops that share of outbound RPC datagrams, and the RPC layer's retransmission and
/// duplicate suppression must keep the run correct. Losing every datagram must fail loudly.
#[test]
fn rpc_survives_datagram_loss_and_total_loss_fails_loudly() {
    let mut s = spec(NOWAIT, Hybrid::RPC);
    s.profile.reliability.ud_drop_probability = 0.05;
    let lossy = run_spec(s.clone());
    assert!(lossy.failures.is_empty(), "{:?}", lossy.failures.first());
    assert!(lossy.stats.committed > 100, "{} commits", lossy.stats.committed);
    assert!(lossy.clean(), "{:?}", lossy.report.anomalies.first());

    s.profile.reliability.ud_drop_probability = 1.0;
    s.duration_ns = 20_000_000;
    // Through the loopback, every coordinator needs datagrams. On the local path one whose
    // every attempt stays on its node and meets a lock held by a stuck coordinator sends none,
    // and ends its window without failing.
    s.local_path = false;
    let dead = run_spec(s);
    assert!(!dead.failures.is_empty(), "no datagram arrives, yet no coordinator failed");
    assert!(dead.failures[0].contains("got no reply"), "{}", dead.failures[0]);
    assert_eq!(dead.failures.len(), 3 * 2 * 4, "every coordinator gives up");
    let r = &dead.report;
    assert!(r.serializable && r.nothing_lost == Some(true) && r.invariants_ok, "{:?}", r.anomalies.first());
}
