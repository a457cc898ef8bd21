//! Faults in a simulated run (issue 17, docs/faults.md): the schedule applied at its exact
//! times, the membership service (a crashed node is declared down a lease after it stops,
//! and every worker gets each new view at once, after DrTM Sec. 5.6's ZooKeeper), and the
//! recovery of restarted nodes.
//!
//! A node's life: up; crashed (CPUs, NIC and volatile memory gone: `Sim::crash`); declared
//! down `detect` later (fenced off; survivors stop using it and apply what its log rings on
//! them hold); restarted (a new incarnation, reconnected: `Sim::restart`) and joining (it
//! takes log records as a backup but its records are not used); rebuilt once no transaction
//! that committed before it joined is still completing anywhere; up again a modelled
//! transfer time later, with its coordinators. The rebuild: its write-ahead log (durable
//! logs) rolls its committed transactions forward everywhere; the locks its transactions
//! held are released; its store (reloaded from the initial checkpoint unless durable) takes
//! the newest version of each of its records from the backups' replicas; its replica takes
//! the newest of each record it backs from the primaries and other backups.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde::Serialize;
use txbed_sim::faults::{Fault, LinkParams, TimedFault};
use txbed_sim::Sim;
use txbed_transport::{HostMemory, NodeStatus, View};
use txbed_txn::locate::Catalog;
use txbed_txn::msg::LogRecord;
use txbed_txn::node::{NodeState, Recovery};
use txbed_txn::protocol::RecoveryFloor;
use txbed_txn::recovery::{self, key_of};

use crate::node::{coordinator, load_partition, node_state, run_background, Shared};
use crate::spec::TxnRunSpec;

/// The faults of a simulated run, as the scenario's `faults` section gives them.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    /// A crashed node is declared down this long after it stops, ns.
    pub detect_ns: u64,
    /// A connection a fault broke is re-established this long after, ns.
    pub reconnect_ns: u64,
    /// The store survives a crash (NVRAM); otherwise it is reloaded and rebuilt.
    pub durable_store: bool,
    /// The logs survive a crash: the write-ahead log, the rings, the backup's replica.
    pub durable_logs: bool,
    /// Every fault, in the order applied.
    pub schedule: Vec<TimedFault>,
    /// The nodes of each data center, by name (empty: one data center).
    pub dcs: Vec<(String, Vec<u16>)>,
}

impl FaultPlan {
    /// What the transaction layer is told.
    pub fn recovery(&self) -> Recovery {
        Recovery { retry_ns: self.reconnect_ns.max(10_000) }
    }

    /// Whether some fault stops a node.
    pub fn crashes(&self) -> bool {
        self.schedule.iter().any(|f| matches!(f.fault, Fault::Crash { .. } | Fault::CrashDc { .. }))
    }

    fn dc(&self, name: &str) -> Vec<u16> {
        self.dcs.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap_or_default()
    }
}

/// What the faults did, for the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultReport {
    /// Each fault applied: when (ns) and what.
    pub applied: Vec<(u64, String)>,
    /// Each node crash and what became of it.
    pub recoveries: Vec<NodeRecovery>,
    /// Nodes down at the end of the run (recovered afterwards for the final check).
    pub down_at_end: Vec<u16>,
    /// Why the run stopped early: the protocol does not survive a fault.
    pub fatal: Option<String>,
    /// Messages partitions and link faults lost, datagrams they duplicated, RC requests that
    /// gave up.
    pub lost: u64,
    pub duplicated: u64,
    pub gave_up: u64,
    /// A real backend that emulated the faults (docs/faults.md); absent on the simulator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulated: Option<Emulated>,
}

/// What a real backend did to emulate the faults (partitions on sockets); the datagrams it
/// dropped are `FaultReport::lost`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Emulated {
    pub backend: String,
    /// RC doorbells held while their link was cut, sent when it healed.
    pub doorbells_held: u64,
    /// RC completions held while the link back was cut, delivered when it healed.
    pub completions_held: u64,
}

/// One crash of a node and its recovery; times in ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NodeRecovery {
    pub node: u16,
    pub crashed_ns: u64,
    pub declared_down_ns: Option<u64>,
    pub restarted_ns: Option<u64>,
    /// When its rebuild ran (after the transactions committed before it rejoined completed).
    pub rebuilt_ns: Option<u64>,
    pub up_ns: Option<u64>,
    /// Transactions its write-ahead log rolled forward, and pending ones it lost (volatile
    /// logs).
    pub rolled_forward: u64,
    pub lost_pending: u64,
    /// For a protocol that keeps its own replicas: its transactions past their commit point
    /// that recovery aborted (no executor had received the commit; no client saw them commit).
    pub aborted_by_recovery: u64,
    /// Locks its transactions held elsewhere, released.
    pub locks_released: u64,
    /// Records its store took from the replicas, and its replica from the others.
    pub store_records: u64,
    pub replica_records: u64,
    /// Recovered only after the run, for the final check.
    pub after_run: bool,
    /// For a protocol that keeps its own replicas: records its copies took after it was up,
    /// written by transactions that committed without it while it was restored.
    pub caught_up: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Action {
    Fault(usize),
    Detect(u16),
    /// Rebuild `node` once nothing committed before `epoch` is still completing.
    Barrier {
        node: u16,
        epoch: u64,
    },
    /// `node`'s incarnation `inc` is rebuilt: it serves again.
    Up {
        node: u16,
        inc: u32,
    },
    /// Up `node`'s incarnation `inc` takes, once nothing committed before `epoch` (the view
    /// it came up in) is still completing, the writes its copies missed while it was restored.
    CatchUp {
        node: u16,
        inc: u32,
        epoch: u64,
    },
}

/// How often a rejoining node checks that the transactions it waits for have completed.
const BARRIER_POLL_NS: u64 = 10_000;

/// The simulated cluster a driver acts on.
pub(crate) struct World<'a> {
    pub sim: &'a mut Sim,
    pub states: &'a mut Vec<Rc<NodeState>>,
    pub spec: &'a TxnRunSpec,
    pub catalog: &'a Rc<Catalog>,
    pub sh: &'a Shared,
}

/// The fault schedule and the membership service of one run.
pub(crate) struct Driver {
    plan: FaultPlan,
    /// By (time, rank, order of scheduling): at one time, declaring a node down comes first
    /// (a restart may fall on the very time its node is declared down).
    queue: BTreeMap<(u64, u8, u64), Action>,
    seq: u64,
    view: View,
    pub report: FaultReport,
    recoveries: u64,
    /// Crashed nodes' states as they were (their history and, with durable logs, their logs).
    crashed: BTreeMap<u16, Rc<NodeState>>,
    /// Per partition (the records a node is primary of): the nodes whose copy has every
    /// committed write (the primary's store, the backups' replicas). A node that goes down
    /// leaves it (it misses later writes) unless it holds the last such copy; a rebuilt node
    /// rejoins it. A partition whose last current copy was volatile is lost.
    current: Vec<std::collections::BTreeSet<u16>>,
    /// Partitions whose every current copy was lost (volatile memory), with the node whose
    /// crash lost the last one.
    pub lost: Vec<(u16, u16)>,
    /// Restarted nodes waiting to be rebuilt, and the membership epoch they joined in.
    joined: BTreeMap<u16, u64>,
    /// Up nodes whose copies still take the writes they missed while restored (`CatchUp`).
    catching_up: std::collections::BTreeSet<u16>,
}

impl Driver {
    pub fn new(plan: &FaultPlan, nodes: u16, replication: u16) -> Driver {
        let mut d = Driver {
            plan: plan.clone(),
            queue: BTreeMap::new(),
            seq: 0,
            view: View::all_up(nodes),
            report: FaultReport::default(),
            recoveries: 0,
            crashed: BTreeMap::new(),
            current: Vec::new(),
            lost: Vec::new(),
            joined: BTreeMap::new(),
            catching_up: Default::default(),
        };
        for (i, f) in plan.schedule.iter().enumerate() {
            d.push(f.at_us * 1000, Action::Fault(i));
        }
        d.current = (0..nodes).map(|p| holders(p, nodes, replication).into_iter().collect()).collect();
        d
    }

    /// Whether `node` holds a copy of partition `p` that survives its crash.
    fn durable_copy(&self, node: u16, p: u16) -> bool {
        if node == p {
            self.plan.durable_store
        } else {
            self.plan.durable_logs
        }
    }

    /// Crashed `node` misses every later write of the partitions it holds: it leaves their
    /// current copies, unless it holds the last one; a last copy that was volatile is lost.
    fn leave_current(&mut self, w: &World<'_>, node: u16) {
        for p in 0..w.spec.nodes {
            let cur = &mut self.current[p as usize];
            if !cur.contains(&node) {
                continue;
            }
            if cur.len() > 1 {
                cur.remove(&node);
            } else if !(if node == p { self.plan.durable_store } else { self.plan.durable_logs }) {
                cur.clear();
                self.lost.push((p, node));
                w.sh.failures.borrow_mut().push(format!(
                    "the crash of node {node} lost partition {p}: its copy there was the last with every committed write, and it was volatile (faults.durable)"
                ));
            }
        }
    }

    /// Whether every partition restarted `node` holds has a current copy it can read: on a
    /// node that is up, or that survived its own crash (durable) and is running again. A
    /// lost partition waits for nothing.
    fn sources_ready(&self, w: &World<'_>, node: u16) -> bool {
        if w.spec.protocol.stores_replicas() {
            // Its copies are restored from the live replicas, once no failed coordinator's
            // transaction is still being resolved.
            let live: Vec<u16> = self.up_peers(w, node);
            let up = |m: u16| self.view.is_up(m);
            let states: Vec<&NodeState> = live.iter().map(|&m| &*w.states[m as usize]).collect();
            let decided = self.crashed.get(&node).is_none_or(|old| {
                old.pending.borrow().keys().all(|&id| w.spec.protocol.verdict(&states, id).is_some())
            });
            return !live.is_empty()
                && decided
                && live.iter().all(|&m| !w.spec.protocol.resolving(&w.states[m as usize], &up));
        }
        (0..w.spec.nodes).filter(|&p| holders(p, w.spec.nodes, w.spec.replication).contains(&node)).all(|p| {
            let cur = &self.current[p as usize];
            cur.is_empty()
                || cur.iter().any(|&s| {
                    w.sim.is_alive(s)
                        && (self.view.is_up(s) || (self.durable_copy(s, p) && self.crashed.contains_key(&s)))
                })
        })
    }

    fn push(&mut self, at: u64, a: Action) {
        self.seq += 1;
        let rank = if matches!(a, Action::Detect(_)) { 0 } else { 1 };
        self.queue.insert((at, rank, self.seq), a);
    }

    /// When the next action is due.
    pub fn next_at(&self) -> Option<u64> {
        self.queue.keys().next().map(|k| k.0)
    }

    /// Carries out every action due at or before the simulation's time.
    pub fn fire(&mut self, w: &mut World<'_>) {
        let now = w.sim.now();
        while let Some((&key, &a)) = self.queue.iter().next() {
            if key.0 > now {
                break;
            }
            self.queue.remove(&key);
            match a {
                Action::Fault(i) => self.apply(w, i),
                Action::Detect(n) => self.detect(w, n),
                // The node crashed again while it waited: its new restart waits anew.
                Action::Barrier { node, epoch } if self.joined.get(&node) != Some(&epoch) => {}
                Action::Barrier { node, epoch } => {
                    if w.sim.is_alive(node) && barrier_clear(w, epoch) && self.sources_ready(w, node) {
                        self.joined.remove(&node);
                        self.rebuild(w, node, false);
                    } else if w.sim.is_alive(node) {
                        self.push(now + BARRIER_POLL_NS, Action::Barrier { node, epoch });
                    }
                }
                Action::Up { node, inc } => {
                    if w.sim.is_alive(node) && w.sim.incarnation(node) == inc {
                        self.up(w, node);
                    }
                }
                Action::CatchUp { node, inc, epoch } => {
                    if !w.sim.is_alive(node) || w.sim.incarnation(node) != inc {
                        self.catching_up.remove(&node);
                    } else if barrier_clear(w, epoch) && self.sources_ready(w, node) && self.catch_up(w, node, false) {
                        self.catching_up.remove(&node);
                    } else {
                        self.push(now + BARRIER_POLL_NS, Action::CatchUp { node, inc, epoch });
                    }
                }
            }
            if self.report.fatal.is_some() {
                // No fault after a fatal one; but the membership still declares crashed nodes
                // down, so transactions past their commit points stop waiting on them and end.
                self.queue.retain(|_, a| matches!(a, Action::Detect(_)));
                w.sh.stop.set(true);
                return;
            }
        }
    }

    /// Why a crash would leave a chopped transaction half done, if it would: the restarted
    /// coordinator finishes it from the chopping information in its logs (Sec. 5.6), so the
    /// logs must be durable. A node down at the end restarts after the run to finish them
    /// (`recover_after_run`).
    fn cannot_finish_chopped(&self) -> Option<&'static str> {
        (!self.plan.durable_logs).then_some(
            "a chopped transaction's remaining pieces are in the logs, which are volatile here (faults.durable)",
        )
    }

    /// Why a protocol that keeps its own replicas (RedT) cannot recover here, if it cannot:
    /// it assumes NVM (Sec. 3: store and logs survive a crash), and a failed coordinator's
    /// transaction is resolved by its executors in other data centers.
    fn cannot_restore_copies(&self, w: &World<'_>) -> Option<&'static str> {
        if !w.spec.protocol.stores_replicas() {
            return None;
        }
        if !(self.plan.durable_store && self.plan.durable_logs) {
            return Some("its recovery assumes NVM: a crashed node keeps its copies and log buffer (faults.durable: [Store, Logs])");
        }
        let dcs = self.plan.dcs.len().max(1);
        if w.spec.replication < 2 || dcs < 2 {
            return Some("a failed coordinator's transactions are resolved by executors in other data centers: it needs 2 or more data centers and protocol.replication 2 or more");
        }
        None
    }

    fn set_view(&mut self, w: &mut World<'_>, node: u16, s: NodeStatus) {
        self.view.status[node as usize] = s;
        self.view.epoch += 1;
        w.sim.set_view(&self.view);
    }

    fn apply(&mut self, w: &mut World<'_>, i: usize) {
        let f = self.plan.schedule[i].clone();
        let now = w.sim.now();
        let us = |x: u64| x * 1000;
        match &f.fault {
            Fault::Crash { .. } | Fault::CrashDc { .. } => {
                let nodes = match &f.fault {
                    Fault::Crash { node } => vec![*node],
                    Fault::CrashDc { dc } => self.plan.dc(dc),
                    _ => unreachable!(),
                };
                let chopped = w.spec.workload.chopping().and_then(|_| self.cannot_finish_chopped());
                let copies = self.cannot_restore_copies(w);
                if let Some(why) = w.spec.protocol.survives_crashes().err().or(chopped).or(copies) {
                    self.report.fatal = Some(format!(
                        "{} does not survive a node crash ({why}): the run stopped starting transactions at {} us, the time of `{}`",
                        w.spec.protocol.name(),
                        f.at_us,
                        f.fault.describe()
                    ));
                    return;
                }
                self.report.applied.push((now, f.fault.describe()));
                for n in nodes {
                    w.sim.crash(n);
                    self.report.recoveries.push(NodeRecovery { node: n, crashed_ns: now, ..Default::default() });
                    self.push(now + self.plan.detect_ns, Action::Detect(n));
                }
            }
            Fault::Restart { .. } | Fault::RestartDc { .. } => {
                self.report.applied.push((now, f.fault.describe()));
                let nodes = match &f.fault {
                    Fault::Restart { node } => vec![*node],
                    Fault::RestartDc { dc } => self.plan.dc(dc),
                    _ => unreachable!(),
                };
                for n in nodes {
                    self.restart(w, n);
                }
            }
            Fault::Partition { .. } | Fault::Link { .. } if self.loses_messages(w, &f) => {}
            Fault::Partition { a, b, one_way, for_us } => {
                self.report.applied.push((now, f.fault.describe()));
                w.sim.partition(a, b, *one_way, us(*for_us));
            }
            Fault::Link { from, to, both_ways, for_us, drop, duplicate, delay_us, reorder_us } => {
                self.report.applied.push((now, f.fault.describe()));
                let e = LinkParams { drop: *drop, duplicate: *duplicate, delay_us: *delay_us, reorder_us: *reorder_us };
                w.sim.link_fault(*from, *to, *both_ways, us(*for_us), e);
            }
            Fault::SlowCpu { node, factor, for_us } => {
                self.report.applied.push((now, f.fault.describe()));
                w.sim.slow_cpu(*node, *factor, us(*for_us));
            }
            Fault::ClockStep { node, by_us } => {
                self.report.applied.push((now, f.fault.describe()));
                w.sim.step_clock(*node, by_us.saturating_mul(1000));
            }
            Fault::ClockDrift { node, ppm } => {
                self.report.applied.push((now, f.fault.describe()));
                w.sim.set_clock_drift(*node, *ppm);
            }
        }
    }

    /// Whether `f` loses messages and the protocol does not survive that (the run then ends
    /// with the verdict).
    fn loses_messages(&mut self, w: &World<'_>, f: &TimedFault) -> bool {
        let loses = match &f.fault {
            Fault::Partition { .. } => true,
            Fault::Link { drop, .. } => *drop > 0.0,
            _ => false,
        };
        if !loses {
            return false;
        }
        let Err(why) = w.spec.protocol.survives_lost_messages(w.spec.hybrid) else { return false };
        self.report.fatal = Some(format!(
            "{} in this mode does not survive lost messages ({why}): the run stopped starting transactions at {} us, the time of `{}`",
            w.spec.protocol.name(),
            f.at_us,
            f.fault.describe()
        ));
        true
    }

    fn record(&mut self, node: u16) -> &mut NodeRecovery {
        self.report.recoveries.iter_mut().rev().find(|r| r.node == node).expect("a crash recorded")
    }

    /// The membership declares crashed `node` down: every worker stops using it, its
    /// messages are fenced off, and the survivors apply what its rings on them hold (its
    /// transactions logged only after their commit points).
    fn detect(&mut self, w: &mut World<'_>, node: u16) {
        let now = w.sim.now();
        w.sim.declare_down(node);
        self.set_view(w, node, NodeStatus::Down);
        self.record(node).declared_down_ns = Some(now);
        if w.spec.protocol.stores_replicas() {
            // The protocol's own recovery (RedT Sec. 5.1): what the dead node's transactions
            // hold that no live node knows of is released.
            let live: Vec<u16> = self.alive(w).into_iter().filter(|&m| self.view.is_up(m)).collect();
            let mems: Vec<_> = live.iter().map(|&m| w.sim.memory(m)).collect();
            let pairs: Vec<(&NodeState, &dyn HostMemory)> =
                live.iter().zip(&mems).map(|(&m, mem)| (&*w.states[m as usize], &**mem as &dyn HostMemory)).collect();
            let released = w.spec.protocol.node_down(node, &pairs);
            self.record(node).locks_released += released;
            return;
        }
        self.leave_current(w, node);
        for m in self.alive(w) {
            let mem = w.sim.memory(m);
            for wk in 0..w.spec.workers {
                txbed_txn::log::drain_ring(&w.states[m as usize], &*mem, node, wk);
            }
        }
    }

    fn alive(&self, w: &World<'_>) -> Vec<u16> {
        (0..w.spec.nodes).filter(|&n| w.sim.is_alive(n)).collect()
    }

    /// The nodes other than `node` that are alive and up: where a restored copy's records
    /// come from.
    fn up_peers(&self, w: &World<'_>, node: u16) -> Vec<u16> {
        self.alive(w).into_iter().filter(|&m| m != node && self.view.is_up(m)).collect()
    }

    /// Restarts `node`: a new incarnation that joins (log records yes, its records no);
    /// what did not survive its crash is wiped; its rebuild waits for the barrier.
    fn restart(&mut self, w: &mut World<'_>, node: u16) {
        let now = w.sim.now();
        w.sim.restart(node);
        let layout = &w.catalog.layout;
        let mem = w.sim.memory(node);
        let region = w.catalog.regions[node as usize];
        let old = w.states[node as usize].clone();
        // Durable logs: what the rings hold (committed records not yet applied) goes into
        // the replica that survives with them, before the rings start anew.
        if self.plan.durable_logs {
            for sender in 0..w.spec.nodes {
                for wk in 0..w.spec.workers {
                    txbed_txn::log::drain_ring(&old, &*mem, sender, wk);
                }
            }
        }
        // What did not survive: the store unless durable; the rings always (their entries
        // were applied or are rebuilt), the protocol's area (volatile state).
        if !self.plan.durable_store {
            zero(&*mem, region.addr, layout.log_at);
        }
        zero(&*mem, region.addr + layout.log_at, layout.bytes - layout.log_at);
        let st = fresh_state(w, &old, self.plan.durable_logs, self.plan.recovery());
        w.states[node as usize] = st.clone();
        for wk in 0..w.spec.workers {
            if w.spec.trace {
                w.sim.worker(node, wk).enable_trace();
            }
            for (id, name, h) in txbed_txn::participant::handlers(w.spec.protocol, &st) {
                w.sim.worker(node, wk).name_handler(id, name);
                w.sim.worker(node, wk).register_handler(id, h);
            }
        }
        // Both sides of every log ring with it start again: its peers forget where they
        // wrote and read, and the rings it wrote on them are cleared.
        for m in self.alive(w).into_iter().filter(|&m| m != node) {
            w.states[m as usize].reset_rings_with(node);
            let mm = w.sim.memory(m);
            let at = w.catalog.regions[m as usize].addr;
            for wk in 0..w.spec.workers {
                zero(&*mm, at + layout.ring(node, wk), layout.ring_bytes);
            }
        }
        // A node that crashes again before its rebuild keeps its first state's logs (its
        // history moved on with each restart).
        self.crashed.entry(node).or_insert(old);
        self.set_view(w, node, NodeStatus::Joining);
        self.record(node).restarted_ns = Some(now);
        let epoch = self.view.epoch;
        self.joined.insert(node, epoch);
        self.push(now, Action::Barrier { node, epoch });
    }

    /// Rebuilds joining `node` (see the module documentation), then schedules it up after
    /// the modelled transfer time (`after_run`: only for the final check, never up).
    fn rebuild(&mut self, w: &mut World<'_>, node: u16, after_run: bool) {
        let now = w.sim.now();
        self.recoveries += 1;
        let floor = RecoveryFloor { now_ns: now, recoveries: self.recoveries };
        let protocol = w.spec.protocol;
        let st = w.states[node as usize].clone();
        let mem = w.sim.memory(node);
        let old = self.crashed.remove(&node).expect("a restarted node's old state");
        self.joined.remove(&node);
        if protocol.stores_replicas() {
            self.restore_copies(w, node, &old, after_run);
            return;
        }
        let alive: Vec<u16> = self.alive(w).into_iter().filter(|&m| m != node).collect();
        let (mut store_records, mut replica_records, mut bytes) = (0u64, 0u64, 0u64);
        // The backups first apply every complete entry their rings hold (lazily reclaimed
        // ones included): the rebuild must see every version logged.
        for &m in &alive {
            let mm = w.sim.memory(m);
            for sender in 0..w.spec.nodes {
                for wk in 0..w.spec.workers {
                    txbed_txn::log::drain_ring(&w.states[m as usize], &*mm, sender, wk);
                }
            }
        }
        // Its store: the checkpoint, or what survived without its locks (but those of other
        // crashed nodes' transactions, which their own rebuilds resolve).
        let held_by: Vec<u16> =
            (0..w.spec.nodes).filter(|&m| m != node && (!w.sim.is_alive(m) || self.crashed.contains_key(&m))).collect();
        if self.plan.durable_store {
            recovery::reset_store(protocol, &st, &*mem, &floor, &held_by, w.spec.workers);
        } else {
            let region = w.catalog.regions[node as usize];
            let partitions = txbed_txn::store::Partitions::default();
            if let Err(e) = load_partition(&*mem, region, &w.catalog.layout, node, w.spec, &partitions) {
                w.sh.failures.borrow_mut().push(format!("recovery of node {node}: {e}"));
            }
            // The protocol's metadata (timestamps, leases) was lost with the memory too.
            recovery::reset_store(protocol, &st, &*mem, &floor, &[], w.spec.workers);
        }
        // Its committed transactions, from its write-ahead log, everywhere.
        let mut rolled = 0;
        let mut wal = std::mem::take(&mut *old.wal.borrow_mut());
        if w.spec.bug == Some(recovery::FORGET_WAL) {
            wal.clear();
        }
        for (id, record) in &wal {
            let Ok(rec) = LogRecord::decode(record) else { continue };
            let mut absent = std::collections::BTreeSet::new();
            for e in &rec.entries {
                let key = txbed_workloads::Key { table: e.table, row: e.key };
                let home = w.spec.workload.home(key, w.spec.nodes);
                if home != node && !alive.contains(&home) {
                    absent.insert(home);
                }
                if home == node || alive.contains(&home) {
                    let hm = w.sim.memory(home);
                    recovery::install(
                        protocol,
                        &w.states[home as usize],
                        &*hm,
                        key,
                        e.version,
                        *id,
                        e.value,
                        false,
                        &floor,
                    );
                }
                let hk = txbed_txn::history_key(e.table, e.key);
                for m in alive.iter().copied().chain([node]) {
                    recovery::replica_apply(&w.states[m as usize], hk, e.version, *id, e.value);
                }
            }
            // A home that is down too gets these values at its own rebuild: the record stays.
            if !absent.is_empty() {
                st.wal.borrow_mut().insert(*id, record.clone());
                st.skipped.borrow_mut().insert(*id, absent);
            }
            if let Some(p) = old.pending.borrow_mut().remove(id) {
                let mut h = p.history;
                h.end_ns = now;
                st.history.borrow_mut().push(h);
                st.stats.borrow_mut().external_delta += p.delta;
            }
            rolled += 1;
        }
        let lost_pending = old.pending.borrow().len() as u64;
        // What other coordinators committed while it was down and could not write back here:
        // their write-ahead logs kept it for this rebuild.
        for &m in &alive {
            let sm = w.states[m as usize].clone();
            let waiting: Vec<u64> =
                sm.skipped.borrow().iter().filter(|(_, homes)| homes.contains(&node)).map(|(id, _)| *id).collect();
            for id in waiting {
                let record = sm.wal.borrow().get(&id).cloned();
                if let Some(rec) = record.as_deref().and_then(|r| LogRecord::decode(r).ok()) {
                    for e in &rec.entries {
                        let key = txbed_workloads::Key { table: e.table, row: e.key };
                        if w.spec.workload.home(key, w.spec.nodes) == node {
                            recovery::install(protocol, &st, &*mem, key, e.version, id, e.value, false, &floor);
                        }
                    }
                }
                let mut skipped = sm.skipped.borrow_mut();
                let homes = skipped.get_mut(&id).expect("listed");
                homes.remove(&node);
                if homes.is_empty() {
                    skipped.remove(&id);
                    if !sm.pending.borrow().contains_key(&id) {
                        sm.wal.borrow_mut().remove(&id);
                    }
                }
            }
        }
        // The locks its transactions held: released.
        let mut locks = 0;
        for &m in &alive {
            let mm = w.sim.memory(m);
            locks += recovery::release_locks_of(protocol, &w.states[m as usize], &*mm, node, w.spec.workers);
        }
        // Its records: the newest version any replica has.
        for &m in &alive {
            let reps: Vec<(u64, txbed_txn::node::Replica)> =
                w.states[m as usize].replica.borrow().iter().map(|(k, r)| (*k, r.clone())).collect();
            for (hk, r) in reps {
                let key = key_of(hk);
                if w.spec.workload.home(key, w.spec.nodes) == node
                    && recovery::install(protocol, &st, &*mem, key, r.version, r.writer, &r.value, true, &floor)
                {
                    store_records += 1;
                    bytes += r.value.len() as u64 + 24;
                }
            }
        }
        // Its replica: the newest version of each record it backs, from the primaries and
        // the other backups.
        for &m in &alive {
            let mm = w.sim.memory(m);
            for (hk, v, writer, rec) in recovery::written(&w.states[m as usize], &*mm) {
                if recovery::replica_apply(&st, hk, v, writer, &rec) {
                    replica_records += 1;
                    bytes += rec.len() as u64 + 24;
                }
            }
            let reps: Vec<(u64, txbed_txn::node::Replica)> =
                w.states[m as usize].replica.borrow().iter().map(|(k, r)| (*k, r.clone())).collect();
            for (hk, r) in reps {
                if recovery::replica_apply(&st, hk, r.version, r.writer, &r.value) {
                    replica_records += 1;
                    bytes += r.value.len() as u64 + 24;
                }
            }
        }
        txbed_txn::index::build(&st, &*mem);
        for p in 0..w.spec.nodes {
            if holders(p, w.spec.nodes, w.spec.replication).contains(&node) && !self.current[p as usize].is_empty() {
                self.current[p as usize].insert(node);
            }
        }
        let rec = self.record(node);
        rec.rebuilt_ns = Some(now);
        rec.rolled_forward = rolled;
        rec.lost_pending = lost_pending;
        rec.locks_released = locks;
        rec.store_records = store_records;
        rec.replica_records = replica_records;
        rec.after_run = after_run;
        if !after_run {
            self.up_after_transfer(w, node, bytes, store_records + replica_records);
        }
    }

    /// The rebuild of a protocol that keeps its own replicas (RedT Sec. 5.1.2, "restore the
    /// failed replicas asynchronously"): each copy `node` holds takes, record by record, the
    /// tuple the protocol picks among the live replicas' (`Protocol::restore_copy`); the
    /// transactions it coordinated that were past their commit point enter the history as
    /// the protocol's recovery resolved them (`Protocol::verdict`): committed ones at their
    /// resolution, aborted ones not at all (no client saw them commit).
    fn restore_copies(&mut self, w: &mut World<'_>, node: u16, old: &Rc<NodeState>, after_run: bool) {
        let now = w.sim.now();
        let protocol = w.spec.protocol;
        let st = w.states[node as usize].clone();
        let mem = w.sim.memory(node);
        let live: Vec<u16> = self.up_peers(w, node);
        let (records, bytes) = merge_copies(w, node, &live, &mut |ext_at, own, candidates| {
            if candidates.is_empty() {
                protocol.restore_copy(ext_at, &[own.to_vec()])
            } else {
                protocol.restore_copy(ext_at, candidates)
            }
        });
        txbed_txn::index::build(&st, &*mem);
        if let Some(&peer) = live.first() {
            protocol.joined(&st, &w.states[peer as usize]);
        }
        // Its transactions past their commit point, as recovery resolved them.
        let states: Vec<&NodeState> = live.iter().map(|&m| &*w.states[m as usize]).collect();
        let (mut committed, mut aborted) = (0, 0);
        let pending = std::mem::take(&mut *old.pending.borrow_mut());
        for (id, p) in pending {
            match protocol.verdict(&states, id) {
                Some((true, at)) => {
                    let mut h = p.history;
                    h.end_ns = at;
                    st.history.borrow_mut().push(h);
                    st.stats.borrow_mut().external_delta += p.delta;
                    committed += 1;
                }
                _ => aborted += 1,
            }
        }
        let rec = self.record(node);
        rec.rebuilt_ns = Some(now);
        rec.rolled_forward = committed;
        rec.aborted_by_recovery = aborted;
        rec.store_records = records;
        rec.after_run = after_run;
        if !after_run {
            self.up_after_transfer(w, node, bytes, records);
        }
    }

    /// Schedules rebuilt `node` up after the transfer: `bytes` over its link, and two
    /// cache-missing accesses per record at the receiving CPU (docs/faults.md, "Recovery time").
    fn up_after_transfer(&mut self, w: &World<'_>, node: u16, bytes: u64, records: u64) {
        let p = &w.spec.profile;
        let wire_ns = (bytes as f64 * 8.0 / p.link.gbps).ceil() as u64;
        let cpu_ns = records * 2 * p.host.memory_miss_ns;
        let inc = w.sim.incarnation(node);
        self.push(w.sim.now() + wire_ns + cpu_ns, Action::Up { node, inc });
    }

    /// Rebuilt `node` is up: it serves its records and its coordinators start. A protocol
    /// that keeps its own replicas may have committed without its copies since they were
    /// restored (5+ replicas: more than 3/4 were up): they catch up once every transaction
    /// that did not include them has completed (`CatchUp`).
    fn up(&mut self, w: &mut World<'_>, node: u16) {
        let now = w.sim.now();
        self.set_view(w, node, NodeStatus::Up);
        self.record(node).up_ns = Some(now);
        if w.spec.protocol.stores_replicas() {
            let (inc, epoch) = (w.sim.incarnation(node), self.view.epoch);
            self.catching_up.insert(node);
            self.push(now, Action::CatchUp { node, inc, epoch });
        }
        let st = w.states[node as usize].clone();
        for wk in 0..w.spec.workers {
            for c in 0..w.spec.coroutines {
                let (st, sh) = (st.clone(), w.sh.clone());
                w.sim.spawn(node, wk, move |ctx| coordinator(ctx, st, sh, c));
            }
            if let Some(background) = w.spec.protocol.background() {
                for _ in 0..w.spec.protocol.background_coroutines(&w.spec.protocol_options) {
                    let (st, sh) = (st.clone(), w.sh.clone());
                    w.sim.spawn(node, wk, move |ctx| run_background(background, ctx, st, sh));
                }
            }
        }
    }

    /// Up `node`'s copies take, record by record, the newest write among the live replicas
    /// that they miss (`Protocol::catch_up_copy`: value, version and wts; its own latch and
    /// locks stay). A record whose latch is held is being changed by an executor: unless
    /// `force`, it is left for the next poll. Returns whether every record was merged.
    fn catch_up(&mut self, w: &mut World<'_>, node: u16, force: bool) -> bool {
        let protocol = w.spec.protocol;
        let live: Vec<u16> = self.up_peers(w, node);
        let mut busy = 0u64;
        let st = w.states[node as usize].clone();
        let (records, _) = merge_copies(w, node, &live, &mut |ext_at, own, candidates| {
            if !force && txbed_txn::wire::u64_at(own, txbed_txn::store::LOCK as usize) != 0 {
                busy += 1;
                return None;
            }
            protocol.catch_up_copy(&st, ext_at, own, candidates)
        });
        self.record(node).caught_up += records;
        busy == 0
    }

    /// After the run: every node still down is restarted and rebuilt (never up), so the
    /// final check sees what survived of its data. Nodes are rebuilt once a current copy of
    /// each of their partitions is readable (as during the run); what is left then is
    /// rebuilt from what there is.
    /// `up`: the rebuilt nodes come up too, and their coordinators start (and stop drawing at
    /// once): a chopped run's transactions must be finished (`cannot_finish_chopped`).
    pub fn recover_after_run(&mut self, w: &mut World<'_>, up: bool) {
        let down_before = self.report.down_at_end.len();
        for node in 0..w.spec.nodes {
            if w.sim.is_alive(node) {
                continue;
            }
            self.report.down_at_end.push(node);
            if self.view.of(node) != NodeStatus::Down {
                self.detect(w, node);
            }
            self.restart(w, node);
        }
        loop {
            let waiting: Vec<u16> = self.crashed.keys().copied().collect();
            let ready: Vec<u16> = waiting.iter().copied().filter(|&n| self.sources_ready(w, n)).collect();
            match (ready.first(), waiting.first()) {
                (Some(&n), _) | (None, Some(&n)) => self.rebuild(w, n, true),
                (None, None) => break,
            }
        }
        // Up nodes still catching up finish now: every transaction has completed.
        for node in std::mem::take(&mut self.catching_up) {
            if w.sim.is_alive(node) {
                self.catch_up(w, node, true);
            }
        }
        self.queue.clear();
        if up {
            for node in self.report.down_at_end[down_before..].to_vec() {
                self.up(w, node);
            }
        }
        let s = w.sim.stats();
        (self.report.lost, self.report.duplicated, self.report.gave_up) =
            (s.fault_lost, s.fault_duplicated, s.fault_gave_up);
    }
}

/// Each record copy `node` holds (copy 0 of its own rows, copy k of the homes it backs),
/// with the tuples of that record on the `live` replicas: `pick(ext_at, own, candidates)`
/// says what the copy becomes (`None`: left as is). Returns (records changed, their bytes).
fn merge_copies(
    w: &World<'_>,
    node: u16,
    live: &[u16],
    pick: &mut dyn FnMut(usize, &[u8], &[Vec<u8>]) -> Option<Vec<u8>>,
) -> (u64, u64) {
    let st = &w.states[node as usize];
    let mem = w.sim.memory(node);
    let placement = crate::spec::placement(w.spec);
    let layout = &w.catalog.layout;
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut held: Vec<(u16, Vec<u16>)> = vec![(0, vec![node])];
    for (k, homes) in crate::spec::copies_held(w.spec, node).into_iter().enumerate() {
        held.push((k as u16 + 1, homes));
    }
    for (k, homes) in held {
        for place in &layout.tables {
            let per = place.spec.rows_per_node;
            let Some(mine) = txbed_txn::store::copy_table(place.spec.id, k).and_then(|id| layout.table(id)) else {
                continue;
            };
            for &home in &homes {
                let Ok(replicas) = placement.replicas(home, w.spec.replication) else { continue };
                for row in home as u64 * per..(home as u64 + 1) * per {
                    let Some(at) = txbed_txn::store::find_local(&*mem, st.base(), mine, row) else { continue };
                    let mut candidates = Vec::new();
                    for (j, &m) in replicas.iter().enumerate() {
                        if !live.contains(&m) {
                            continue;
                        }
                        let Some(theirs) =
                            txbed_txn::store::copy_table(place.spec.id, j as u16).and_then(|id| layout.table(id))
                        else {
                            continue;
                        };
                        let mm = w.sim.memory(m);
                        let base = w.states[m as usize].base();
                        let Some(off) = txbed_txn::store::find_local(&*mm, base, theirs, row) else { continue };
                        let mut t = vec![0u8; theirs.tuple_bytes as usize];
                        if mm.read(base + off, &mut t).is_ok() {
                            candidates.push(t);
                        }
                    }
                    let mut own = vec![0u8; mine.tuple_bytes as usize];
                    let _ = mem.read(st.base() + at, &mut own);
                    if let Some(t) = pick(mine.ext_at as usize, &own, &candidates) {
                        if t != own {
                            records += 1;
                            bytes += t.len() as u64;
                            let _ = mem.write(st.base() + at, &t);
                        }
                    }
                }
            }
        }
    }
    (records, bytes)
}

/// The nodes holding partition `p` (records homed on node `p`): the primary and the next
/// `replication - 1` nodes.
fn holders(p: u16, nodes: u16, replication: u16) -> Vec<u16> {
    (0..replication).map(|k| (p + k) % nodes).collect()
}

/// Whether no node has a transaction that committed in a view before `epoch` still
/// completing (a rejoining node's replica must not miss what such a transaction writes).
fn barrier_clear(w: &World<'_>, epoch: u64) -> bool {
    (0..w.spec.nodes).filter(|&m| w.sim.is_alive(m)).all(|m| {
        let c = w.states[m as usize].committing.borrow();
        c.range(..epoch).all(|(_, &n)| n == 0)
    })
}

/// A restarted node's state: everything in its memory starts anew, but the history and
/// counters (the observer's record of what happened before) carry over, and with durable
/// logs so does its replica.
fn fresh_state(w: &World<'_>, old: &Rc<NodeState>, durable_logs: bool, recovery: Recovery) -> Rc<NodeState> {
    let mut st = node_state(w.spec, old.me, w.catalog);
    let s = Rc::get_mut(&mut st).expect("a new state");
    s.recovery = Some(recovery);
    s.incarnation = old.incarnation + 1;
    s.history = RefCell::new(std::mem::take(&mut *old.history.borrow_mut()));
    s.pieces = RefCell::new(std::mem::take(&mut *old.pieces.borrow_mut()));
    s.stats = RefCell::new(std::mem::take(&mut *old.stats.borrow_mut()));
    if durable_logs {
        s.replica = RefCell::new(std::mem::take(&mut *old.replica.borrow_mut()));
        s.chopped = RefCell::new(std::mem::take(&mut *old.chopped.borrow_mut()));
        let mut deferred = std::mem::take(&mut *old.deferred.borrow_mut());
        if s.bug == Some(txbed_txn::chop::FORGET_PUBLICATION) {
            deferred.queue.clear();
        }
        // The queue is what the log keeps: an attempt that was publishing its head either
        // passed its commit point (and popped it) or is void.
        s.deferred = RefCell::new(txbed_txn::node::Deferred { queue: deferred.queue, ..Default::default() });
    } else {
        old.chopped.borrow_mut().clear();
        old.deferred.borrow_mut().queue.clear();
        old.wal.borrow_mut().clear();
        old.replica.borrow_mut().clear();
    }
    st
}

/// Zeroes `len` bytes of registered memory from `at`.
fn zero(mem: &dyn HostMemory, at: u64, len: u64) {
    const CHUNK: u64 = 1 << 20;
    let buf = vec![0u8; CHUNK.min(len) as usize];
    let mut off = 0;
    while off < len {
        let n = CHUNK.min(len - off);
        let _ = mem.write(at + off, &buf[..n as usize]);
        off += n;
    }
}
