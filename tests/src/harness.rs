//! What the protocol and benchmark tests share: the workloads they run, the shape of a
//! simulated run, the checks every run must pass, and a sockets cluster inside this process.

use std::fmt::Debug;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

pub use txbed_protocols::REGISTRY;
use txbed_runner::{run_txns, TxnRunResult, TxnRunSpec};
use txbed_sim::NicProfile;
use txbed_txn::protocol::{Bug, Rdma as Options};
use txbed_txn::stage::Hybrid;
pub use txbed_txn::ProtocolRef as Protocol;
use txbed_workloads::smallbank::SmallBank;
use txbed_workloads::tpcc::Tpcc;
use txbed_workloads::tpce::Tpce;
use txbed_workloads::ycsb::Ycsb;
use txbed_workloads::Workload;

/// A workload a [`Shape`] names, built for the shape's cluster.
/// The registered protocols, for tests about one of them (tests over all iterate `REGISTRY`).
pub const NOWAIT: Protocol = &txbed_protocols::nowait::NoWait;
pub const WAITDIE: Protocol = &txbed_protocols::waitdie::WaitDie;
pub const OCC: Protocol = &txbed_protocols::occ::Occ;
pub const MVCC: Protocol = &txbed_protocols::mvcc::Mvcc;
pub const SUNDIAL: Protocol = &txbed_protocols::sundial::Sundial;
pub const CALVIN: Protocol = &txbed_protocols::calvin::Calvin;

/// A protocol's options scaled to the tests' runs of a few hundred microseconds: DrTM's
/// leases (the paper's 0.4 ms, 1 ms read-only) would hold a record against every writer for a
/// whole run. `Null` (the defaults) for the others.
pub fn short_run_options(protocol: Protocol) -> txbed_txn::protocol::OptionValues {
    if protocol.name() == "DrTM" {
        serde_json::json!({ "lease_us": 10.0, "ro_lease_us": 25.0 })
    } else {
        Default::default()
    }
}

pub trait Load: Clone + Debug {
    fn workload(&self, nodes: u16, workers: u16, coroutines: u32) -> Arc<dyn Workload>;
}

/// SmallBank, 400 accounts per node, half of SP/AMG cross-node: high contention.
pub fn smallbank() -> Arc<dyn Workload> {
    Arc::new(SmallBank { accounts_per_node: 400, distributed: 0.5, ..SmallBank::default() })
}

/// YCSB, 4 operations half of them writes, over `rows_per_node`; `hot_probability` of the
/// accesses go to the hot rows (2 per node at 2,000 rows).
pub fn ycsb(nodes: u16, rows_per_node: u64, hot_probability: f64) -> Arc<dyn Workload> {
    Arc::new(Ycsb { rows_per_node, ops: 4, write_fraction: 0.5, hot_probability, ..Ycsb::default() }.prepare(nodes))
}

/// The workloads the protocol tests run, at low and high contention.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum W {
    /// [`smallbank`].
    SmallBank,
    /// YCSB, uniform over 2,000 rows per node.
    YcsbLow,
    /// YCSB, half the accesses on 2 hot rows per node.
    YcsbHigh,
}

pub const WORKLOADS: [W; 3] = [W::SmallBank, W::YcsbLow, W::YcsbHigh];

impl Load for W {
    fn workload(&self, nodes: u16, _: u16, _: u32) -> Arc<dyn Workload> {
        match self {
            W::SmallBank => smallbank(),
            W::YcsbLow => ycsb(nodes, 2_000, 0.0),
            W::YcsbHigh => ycsb(nodes, 2_000, 0.5),
        }
    }
}

impl Load for Tpcc {
    fn workload(&self, nodes: u16, workers: u16, coroutines: u32) -> Arc<dyn Workload> {
        Arc::new(self.prepare(nodes, workers, coroutines))
    }
}

impl Load for Tpce {
    fn workload(&self, nodes: u16, _: u16, _: u32) -> Arc<dyn Workload> {
        Arc::new(self.prepare(nodes))
    }
}

/// ConnectX-4 with one NIC per node: one-sided locking, and MVCC's CAS on rts, need every
/// atomic on a word to go through one HCA.
pub fn cx4_one_nic() -> NicProfile {
    let mut p = NicProfile::load("cx4").unwrap();
    p.nics_per_node = 1;
    p
}

/// The RDMA optimisations of the set bits: outstanding (1), doorbell (2), passive ACK (4),
/// speculative (8); the rest default. `0..16` gives every combination.
pub fn rdma_options(bits: u32) -> Options {
    Options {
        outstanding: bits & 1 != 0,
        doorbell: bits & 2 != 0,
        passive_ack: bits & 4 != 0,
        speculative: bits & 8 != 0,
        ..Options::default()
    }
}

/// A simulated run on [`cx4_one_nic`]: its `Debug` form is what a failure prints to replay.
#[derive(Clone, Debug)]
pub struct Shape<L> {
    pub protocol: Protocol,
    pub w: L,
    pub nodes: u16,
    pub workers: u16,
    pub coroutines: u32,
    pub replication: u16,
    pub hybrid: Hybrid,
    pub seed: u64,
    pub bug: Option<Bug>,
    pub options: Options,
    /// The protocol's own options (`Null`: its defaults).
    pub protocol_options: txbed_txn::protocol::OptionValues,
    pub duration_ns: u64,
    pub trace: bool,
    /// The UD MTU (4096 on InfiniBand; RoCE over standard Ethernet frames has 1024).
    pub mtu: u32,
}

impl<L: Load> Shape<L> {
    /// 3 nodes, 2 workers, 4 coroutines, 3 replicas, 150 us, default options, no bug, no trace,
    /// a 4 KiB MTU.
    pub fn new(protocol: Protocol, w: L, hybrid: Hybrid, seed: u64) -> Self {
        Shape {
            protocol,
            w,
            nodes: 3,
            workers: 2,
            coroutines: 4,
            replication: 3,
            hybrid,
            seed,
            bug: None,
            options: Options::default(),
            protocol_options: short_run_options(protocol),
            duration_ns: 150_000,
            trace: false,
            mtu: 4096,
        }
    }
    pub fn spec(&self) -> TxnRunSpec {
        self.spec_with(self.w.workload(self.nodes, self.workers, self.coroutines))
    }
    /// The run with `workload` in place of `w`'s.
    pub fn spec_with(&self, workload: Arc<dyn Workload>) -> TxnRunSpec {
        TxnRunSpec {
            link_delay_ns: Vec::new(),
            wan: None,
            protocol: self.protocol,
            protocol_options: self.protocol_options.clone(),
            nodes: self.nodes,
            // A protocol with server workers (the lock table) needs one more for its agents.
            workers: self.workers.max(self.protocol.server_workers(&self.protocol_options) + 1),
            coroutines: self.coroutines,
            qps_per_node: 1,
            profile: NicProfile { mtu: self.mtu, ..cx4_one_nic() },
            seed: self.seed,
            hybrid: self.hybrid,
            replication: self.replication,
            workload,
            warmup_ns: 0,
            duration_ns: self.duration_ns,
            cache_bytes: 1 << 20,
            warm_cache: false,
            local_path: true,
            retry: txbed_txn::retry::Retry::DEFAULT,
            options: self.options,
            bug: self.bug,
            allow_unsafe_atomics: false,
            trace: self.trace,
            clocks: Default::default(),
            faults: None,
            isolation: None,
            cpu: txbed_sim::cpu::CpuProfile::load("haswell").unwrap(),
        }
    }
    pub fn replay(&self) -> String {
        format!("replay: {self:?} (hybrid {})", self.hybrid)
    }
    #[track_caller]
    pub fn run(&self) -> TxnRunResult {
        match run_txns(&self.spec()) {
            Ok(r) => r,
            Err(e) => panic!("{e}\n{}", self.replay()),
        }
    }
    /// Ok when the run is clean; otherwise how to replay it and what the checker found.
    pub fn check(&self, r: &TxnRunResult) -> Result<(), String> {
        if r.clean() {
            return Ok(());
        }
        Err(format!("{}\n{}", self.replay(), problems(r)))
    }
    /// Panics, where it is called, unless the checker found nothing wrong.
    #[track_caller]
    pub fn assert_clean(&self, r: &TxnRunResult) {
        if let Err(e) = self.check(r) {
            panic!("{e}");
        }
    }
    /// More than `more_than` commits, so the run tested something.
    #[track_caller]
    pub fn assert_commits(&self, r: &TxnRunResult, more_than: u64) {
        assert!(r.stats.committed > more_than, "{}: only {} commits", self.replay(), r.stats.committed);
    }
}

/// What the checker found: its verdicts, the broken invariants, and the first few failures and
/// anomalies (a broken run can have thousands).
pub fn problems(r: &TxnRunResult) -> String {
    const SHOWN: usize = 3;
    let broken: Vec<String> = r
        .history
        .invariants
        .iter()
        .filter(|i| i.expected != i.actual)
        .map(|i| format!("{}: expected {}, found {}", i.name, i.expected, i.actual))
        .collect();
    format!(
        "serializable={} nothing_lost={:?} invariants_ok={} committed={} failures ({} in all)={:?}\n{}\n{}",
        r.report.serializable,
        r.report.nothing_lost,
        r.report.invariants_ok,
        r.stats.committed,
        r.failures.len(),
        r.failures.iter().take(SHOWN).collect::<Vec<_>>(),
        broken.join("\n"),
        r.report.anomalies.iter().take(SHOWN).map(|a| a.explanation.as_str()).collect::<Vec<_>>().join("\n")
    )
}

/// Runs `spec` on the sockets backend, every node a thread of this process on loopback TCP and
/// UDP with real clocks; rank 0's result, which gathers the cluster's.
pub fn run_sockets(spec: &TxnRunSpec) -> TxnRunResult {
    // A free port for rank 0 to listen on (the probe is closed before it binds).
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let size = spec.nodes as u32;
    let nodes: Vec<_> = (0..size)
        .map(|rank| {
            let spec = spec.clone();
            std::thread::spawn(move || {
                let me = txbed_real::bootstrap::Rank { rank, size };
                txbed_real::host::run_sockets_node(&spec, me, addr, "127.0.0.1".parse().unwrap())
            })
        })
        .collect();
    let mut out = None;
    for (rank, h) in nodes.into_iter().enumerate() {
        out = out.or(h.join().unwrap().unwrap_or_else(|e| panic!("rank {rank}: {e}")));
    }
    out.expect("rank 0 reports")
}
