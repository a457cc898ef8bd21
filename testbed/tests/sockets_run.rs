//! A sockets run with every node in this process (one thread each), on loopback: the same
//! protocol code as in the simulator, on real threads, TCP and UDP, checked by the checker.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use txbed::bootstrap::Rank;
use txbed::host::run_sockets_node;
use txbed::txn::{Protocol, TxnRunSpec};
use txbed_protocols::node::Options;
use txbed_protocols::stage::Hybrid;
use txbed_sim::NicProfile;
use txbed_workloads::smallbank::SmallBank;

fn spec(protocol: Protocol, hybrid: Hybrid) -> TxnRunSpec {
    let mut p = NicProfile::load("cx4").unwrap();
    p.nics_per_node = 1;
    TxnRunSpec {
        protocol,
        nodes: 3,
        workers: 2,
        coroutines: 4,
        profile: p,
        seed: 1,
        hybrid,
        replication: 3,
        workload: Arc::new(SmallBank { accounts_per_node: 2_000, distributed: 0.3, ..SmallBank::default() }),
        warmup_ns: 20_000_000,
        duration_ns: 200_000_000,
        cache_bytes: 1 << 20,
        options: Options::default(),
        bug: None,
        allow_unsafe_atomics: false,
    }
}

fn run(protocol: Protocol, hybrid: Hybrid) -> txbed::txn::TxnRunResult {
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let nodes: Vec<_> = (0..3u32)
        .map(|rank| {
            std::thread::spawn(move || {
                run_sockets_node(&spec(protocol, hybrid), Rank { rank, size: 3 }, addr, "127.0.0.1".parse().unwrap())
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
    for (protocol, hybrid) in [
        (Protocol::Occ, Hybrid(38)),
        (Protocol::NoWait, Hybrid::RPC),
        (Protocol::Occ, Hybrid::full(Protocol::Occ.stages())),
    ] {
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
