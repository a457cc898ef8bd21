//! What a transactional run is: protocol and its options, cluster shape, NIC profile, seed,
//! hybrid code, workload, window; the checks a spec must pass before anything is built, and the
//! store layout every node uses.

use std::sync::Arc;

use txbed_sim::NicProfile;
use txbed_txn::node::LocalPath;
use txbed_txn::protocol::{Bug, OptionValues, ProtocolRef, Rdma};
use txbed_txn::retry::Retry;
use txbed_txn::stage::Hybrid;
use txbed_txn::store::{Layout, TableSpec};
use txbed_workloads::Workload;

/// Scratch memory per coroutine: 16 KiB, or four times the record buffers of the workload's
/// largest transaction (`Workload::max_accesses`; `ops::buffers_end` and the areas after it).
pub fn scratch_per_coroutine(spec: &TxnRunSpec, layout: &Layout) -> u32 {
    let need: u64 = spec
        .workload
        .max_accesses()
        .iter()
        .map(|&(t, n)| n as u64 * (8 + layout.table(t).map_or(0, |p| p.tuple_bytes)))
        .sum();
    (4 * need).next_multiple_of(4096).clamp(16 << 10, 64 << 20) as u32
}

/// How this run's coordinators reach their own node's records: the local path as the spec
/// says, with CPU atomics standing in for NIC atomics only where the profile's NICs are
/// atomic with the CPU (`Atomicity::Glob`).
pub fn local_path(spec: &TxnRunSpec) -> LocalPath {
    let glob = spec.profile.atomicity == txbed_sim::profile::Atomicity::Glob;
    let planted = spec.bug == Some(txbed_txn::local::CPU_CAS_ON_HCA);
    LocalPath { on: spec.local_path, cpu_atomics: spec.local_path && (glob || planted) }
}

/// Room for copies in each node's store (`Layout::try_with_copies`).
fn copy_load(spec: &TxnRunSpec) -> Vec<u64> {
    if !spec.protocol.stores_replicas() {
        return Vec::new();
    }
    placement(spec).copy_load(spec.replication).expect("checked: the replicas fit (check_spec)")
}

/// Coroutines each worker runs: the coordinators, plus the protocol's background ones.
pub fn coroutines_per_worker(spec: &TxnRunSpec) -> u32 {
    // The clock sync service's coroutine on worker 0 (docs/clocks.md); a restarted node
    // spawns it before its coordinators, so its room is reserved.
    let sync = spec.clocks.sim.as_ref().is_some_and(|c| c.sync.is_some());
    spec.coroutines + background_coroutines(spec) + sync as u32
}

/// The protocol's background coroutines per worker.
pub fn background_coroutines(spec: &TxnRunSpec) -> u32 {
    match spec.protocol.background() {
        Some(_) => spec.protocol.background_coroutines(&spec.protocol_options),
        None => 0,
    }
}

#[derive(Clone)]
pub struct TxnRunSpec {
    /// The protocol: one of `txbed_protocols::REGISTRY`, or one of your own.
    pub protocol: ProtocolRef,
    /// The protocol's own options (`Protocol::check_options`); `Null` for its defaults.
    pub protocol_options: OptionValues,
    pub nodes: u16,
    pub workers: u16,
    pub coroutines: u32,
    /// RC QPs from each worker to each other node (`cluster.qps_per_node`): k > 1 emulates a
    /// k-times larger cluster's connections (DrTM+H Sec. 4; `txbed_txn::post::record_qp`).
    pub qps_per_node: u16,
    pub profile: NicProfile,
    pub seed: u64,
    pub hybrid: Hybrid,
    pub replication: u16,
    pub workload: Arc<dyn Workload>,
    /// Simulated time before measurement starts (transactions run, but are not counted).
    pub warmup_ns: u64,
    /// Measured simulated time; coroutines start transactions until warm-up plus this.
    pub duration_ns: u64,
    pub cache_bytes: u64,
    /// Start with every node's location cache filled (`protocol.warm_cache`).
    pub warm_cache: bool,
    /// Records homed on the coordinator's own node take the local path
    /// (`protocol.local_path`, `txbed_txn::node::LocalPath`).
    pub local_path: bool,
    pub options: Rdma,
    /// A planted bug: one of the protocol's `bugs()`, `txbed_txn::log::SKIP_LOG` or
    /// `txbed_txn::local::CPU_CAS_ON_HCA`.
    pub bug: Option<Bug>,
    /// Allow one-sided locking across several HCA-atomic NICs per node (unsafe: for tests
    /// that show the checker catching it).
    pub allow_unsafe_atomics: bool,
    /// Extra one-way delay from node i to node j at `[i * nodes + j]`, ns; empty for none.
    pub link_delay_ns: Vec<u64>,
    /// Data centers and the links between them (`cluster.datacenters`, `cluster.inter_dc`);
    /// `None`: one data center.
    pub wan: Option<txbed_sim::wan::Wan>,
    /// The wait before retrying a conflict (`run.retry`).
    pub retry: Retry,
    /// Record trace events on every simulated worker (`TxnRunResult::trace`); changes nothing
    /// else in the run.
    pub trace: bool,
    /// Node clocks (`cluster.clocks`, `run.clock_bound_us`; docs/clocks.md).
    pub clocks: ClockSpec,
    /// Faults the simulator applies (`faults`; docs/faults.md); `None`: none.
    pub faults: Option<crate::faults::FaultPlan>,
    /// The isolation level the history is checked at (`protocol.isolation`); `None`: the
    /// protocol's (`Protocol::isolation`).
    pub isolation: Option<txbed_checker::Level>,
    /// The CPU the simulator's HTM model follows (`cluster.cpu`), for protocols that need HTM.
    pub cpu: txbed_sim::cpu::CpuProfile,
}

/// The clocks of a run: the simulator's model, and the bound real backends report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockSpec {
    /// Simulated clocks and their sync service; `None`: every clock reads simulated time,
    /// bound 0 (and the run is exactly as before clocks existed).
    pub sim: Option<txbed_sim::clock::ClockConfig>,
    /// What `ctx.clock()` adds as its bound to the host's clock on real backends, ns.
    pub host_bound_ns: u64,
}

impl Default for ClockSpec {
    fn default() -> Self {
        ClockSpec { sim: None, host_bound_ns: 1_000_000 }
    }
}

impl TxnRunSpec {
    /// A small run of `protocol` on `workload`: 3 nodes x 2 workers x 4 coroutines on the
    /// cx4 profile with one NIC per node, all stages by RPC, 3 replicas, 200 us measured from
    /// the start, seed 1, the protocol's default options, no planted bug. Change any field.
    pub fn new(protocol: ProtocolRef, workload: Arc<dyn Workload>) -> TxnRunSpec {
        let mut profile = NicProfile::load("cx4").expect("built-in profile");
        profile.nics_per_node = 1;
        TxnRunSpec {
            protocol,
            protocol_options: OptionValues::Null,
            nodes: 3,
            workers: 2,
            coroutines: 4,
            qps_per_node: 1,
            profile,
            seed: 1,
            hybrid: Hybrid::RPC,
            replication: 3,
            workload,
            warmup_ns: 0,
            duration_ns: 200_000,
            cache_bytes: 1 << 20,
            warm_cache: false,
            local_path: true,
            retry: Retry::DEFAULT,
            options: Rdma::default(),
            bug: None,
            allow_unsafe_atomics: false,
            link_delay_ns: Vec::new(),
            wan: None,
            trace: false,
            clocks: ClockSpec::default(),
            faults: None,
            isolation: None,
            cpu: txbed_sim::cpu::CpuProfile::load(txbed_scenario::DEFAULT_CPU).expect("built-in CPU profile"),
        }
    }

    /// The isolation level the history is checked at: `isolation`, else the protocol's.
    pub fn level(&self) -> txbed_checker::Level {
        self.isolation.unwrap_or_else(|| self.protocol.isolation_for(&self.protocol_options))
    }
}

/// Checks a spec before anything is built.
pub fn check_spec(spec: &TxnRunSpec) -> Result<(), String> {
    let p = spec.protocol;
    spec.hybrid.check(p.name(), p.stages())?;
    p.check_options(&spec.protocol_options).map_err(|e| format!("{} options: {e}", p.name()))?;
    if let Some(bug) = spec.bug {
        if !p.bugs().contains(&bug) && !crate::campaign::shared_bugs(p).contains(&bug) {
            return Err(format!("{} has no planted bug {}", p.name(), bug.name));
        }
    }
    if let (Some(chopping), Err(why)) = (spec.workload.chopping(), p.runs_chopped()) {
        return Err(format!("{} cannot run chopped transactions ({why}); the workload chops: {chopping}", p.name()));
    }
    // IBV_ATOMIC_HCA makes NIC atomics atomic only among QPs of one HCA: with two NICs per
    // node, two coordinators can CAS the same lock through different NICs and both win.
    if p.nic_atomics(spec.hybrid)
        && spec.profile.atomicity == txbed_sim::profile::Atomicity::Hca
        && spec.profile.nics_per_node > 1
        && !spec.allow_unsafe_atomics
    {
        return Err(format!(
            "one-sided locking is unsafe on NIC profile {:?}: its {} NICs per node have HCA-level atomicity, so CAS through different NICs is not atomic; use a profile with nics_per_node: 1 or atomicity: Glob",
            spec.profile.name, spec.profile.nics_per_node
        ));
    }
    if spec.replication == 0 || spec.replication > spec.nodes {
        return Err(format!("replication {} must be 1..={} (the number of nodes)", spec.replication, spec.nodes));
    }
    if spec.protocol.stores_replicas() {
        if spec.replication - 1 > txbed_txn::store::MAX_COPIES {
            return Err(format!(
                "{} keeps at most {} replicas",
                spec.protocol.name(),
                txbed_txn::store::MAX_COPIES + 1
            ));
        }
        placement(spec).copy_load(spec.replication).map_err(|e| format!("replica placement: {e}"))?;
    }
    if spec.faults.is_some() && spec.options.passive_ack {
        return Err(
            "faults need every write-back confirmed, and passive ACK (protocol.rdma.passive_ack, or a preset's) leaves them unconfirmed: a write-back lost to a fault would leave its lock held; run this protocol without it under faults".into(),
        );
    }
    if spec.workers > 256 && spec.faults.is_some() {
        return Err(format!("faults need at most 256 workers per node (transaction ids), got {}", spec.workers));
    }
    Ok(())
}

/// Where replicas live (`txbed_txn::placement`): by data center when the run has them.
pub fn placement(spec: &TxnRunSpec) -> txbed_txn::placement::Placement {
    let dc_of = spec.wan.as_ref().map(|w| w.dc_of.clone()).unwrap_or_default();
    txbed_txn::placement::Placement::new(&dc_of, spec.nodes)
}

/// For a protocol that keeps replicas in registered memory: for each copy k = 1.., the
/// homes whose copy k `node` holds (empty otherwise). The spec is checked (`check`).
pub fn copies_held(spec: &TxnRunSpec, node: u16) -> Vec<Vec<u16>> {
    if !spec.protocol.stores_replicas() {
        return Vec::new();
    }
    placement(spec).copies_held(node, spec.replication).expect("checked: the replicas fit (check_spec)")
}

/// The store layout every node uses.
pub fn layout(spec: &TxnRunSpec) -> Layout {
    let tables: Vec<TableSpec> = spec
        .workload
        .tables()
        .iter()
        .map(|t| TableSpec { id: t.id, record_bytes: t.record_bytes, rows_per_node: t.rows_per_node })
        .collect();
    txbed_txn::protocol::run_layout(
        &tables,
        spec.protocol,
        spec.nodes,
        spec.workers,
        spec.coroutines,
        spec.options.log_ring_bytes,
        &copy_load(spec),
    )
    .expect("a store region of at most 2^64 bytes (Scenario::validate estimates it)")
}
