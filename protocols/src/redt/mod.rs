//! RedT (Zhang et al., PVLDB 16(6), 2023): distributed transactions over heterogeneous
//! networks, RDMA inside a data center and slow links between them. A transaction becomes
//! one sub-transaction per data center holding a replica of what it touches; one executor
//! per data center runs it over every replica there with one-sided verbs (latch by CAS, lock
//! read and written back, No-Wait: `executor`), pre-writes the redo log into the replicas'
//! nodes' circular buffers (`logbuf`) and votes; the coordinator commits when more than 3/4
//! of each partition's replicas are up to date and voted yes, with a commit timestamp; the
//! executors then log the decision, install writes by the Thomas write rule and release
//! their locks; each node replays its log buffer asynchronously. Two inter-DC round trips
//! per transaction (Sec. 4.3, Table 1).
//!
//! Replicas live in registered memory (`Protocol::stores_replicas`), placed by
//! `txbed_txn::placement` from the scenario's data centers and `protocol.replication`.

mod coordinator;
mod copy;
mod executor;
pub mod item;
pub mod logbuf;
mod messages;
mod recovery;
pub mod wire;

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use txbed_transport::{Ctx, HandlerCtx, HandlerFn};
use txbed_txn::attempt::Attempt;
use txbed_txn::node::NodeState;
use txbed_txn::placement::Placement;
use txbed_txn::protocol::{
    handler_id, in_id_order, parse_options, BackgroundFn, Bug, LocalBoxFuture, OptionValues, Protocol,
};
use txbed_txn::serve::{Job, Jobs};
use txbed_txn::stage::{Hybrid, Stage};
use txbed_txn::TxnError;
use txbed_workloads::TxnSpec;

pub struct RedT;

/// RedT's options (`protocol.options`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Executor coroutines per worker: sub-transactions each worker runs at once.
    pub executors_per_worker: u32,
    /// How often each node's replay scans its log buffer, ns.
    pub replay_interval_ns: u64,
    /// How the executor reaches its data center's replicas: one-sided verbs (RedT), or
    /// messages to their nodes' CPUs through a kernel stack (the paper's comparison; docs).
    pub intra_dc: IntraDc,
    /// With `intra_dc: "messages"`: the CPU one message costs its sender, and again its
    /// receiver (kernel stack, copies, system calls), as the WAN's kernel-stack transport
    /// charges it.
    pub message_stack_cpu_ns: u64,
}

/// How an executor reaches the replicas in its data center.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IntraDc {
    Onesided,
    Messages,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            executors_per_worker: 8,
            replay_interval_ns: 10_000,
            intra_dc: IntraDc::Onesided,
            message_stack_cpu_ns: 2_000,
        }
    }
}

impl Options {
    fn check(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.executors_per_worker) {
            return Err(format!("executors_per_worker must be 1..=64, got {}", self.executors_per_worker));
        }
        if !(100..=1_000_000_000).contains(&self.replay_interval_ns) {
            return Err(format!("replay_interval_ns must be 100..=1000000000, got {}", self.replay_interval_ns));
        }
        if self.message_stack_cpu_ns > 1_000_000 {
            return Err(format!("message_stack_cpu_ns must be at most 1000000, got {}", self.message_stack_cpu_ns));
        }
        Ok(())
    }
}

/// The stages RedT reports: its execution phase (`Lock`: sub-transactions locking and
/// pre-writing the redo log, Table 1's "exe") and its commit phase (`Commit`).
pub const STAGES: [Stage; 2] = [Stage::Lock, Stage::Commit];

/// Installs without the Thomas write rule: a replay of an older committed entry overwrites
/// a newer version (Sec. 4.2.2's reason for the rule).
pub const IGNORE_THOMAS_RULE: Bug = Bug {
    name: "RedtIgnoreThomasRule",
    about: "installs a logged write whatever the item's wts: a late replay puts an older version back over a newer one (lost update)",
};

/// Counts a yes vote from a replica that is not up to date, and takes the first replica's
/// value rather than the freshest (Sec. 4.2.1's reason for checking wts).
pub const STALE_VOTES_COUNT: Bug = Bug {
    name: "RedtStaleVotesCount",
    about: "counts yes votes of replicas that missed a write and reads the first replica rather than the freshest (stale read, lost update)",
};

/// A new coordinator aborts a failed coordinator's transaction even when an executor already
/// received its commit (Sec. 5.1.1's rule broken): the data centers that installed it keep
/// writes no committed transaction made (invented writes, a replica behind the others).
pub const RECOVERY_ABORTS_COMMITTED: Bug = Bug {
    name: "RedtRecoveryAbortsCommitted",
    about: "a new coordinator aborts a failed coordinator's transaction that some executor already received committed (writes installed in some data centers, history without them)",
};

/// A restored copy (5+ replicas) never takes the writes committed without it while it was
/// restored (Sec. 5.1.2's restoration cut short): it serves them stale.
pub const RESTORED_COPY_MISSES_WRITES: Bug = Bug {
    name: "RedtRestoredCopyMissesWrites",
    about: "a restored replica skips the catch-up on writes committed without it while it was restored (a replica behind the others: lost writes on it)",
};

/// Abort causes.
pub mod cause {
    pub const LOCK_CONFLICT: &str = "redt: lock conflict";
    pub const LATCH_BUSY: &str = "redt: latch busy";
    pub const NO_QUORUM: &str = "redt: under 3/4 of replicas up to date";
    /// A replica's node is down (or failed under a verb): with fewer than 5 replicas the
    /// partition waits for its restoration (Sec. 5.1.2).
    pub const REPLICA_DOWN: &str = "redt: replica down";

    /// A vote's cause on the wire.
    pub fn code(cause: &str) -> u8 {
        match cause {
            LOCK_CONFLICT => 1,
            LATCH_BUSY => 2,
            REPLICA_DOWN => 4,
            _ => 3,
        }
    }

    pub fn of_code(code: u8) -> &'static str {
        match code {
            1 => LOCK_CONFLICT,
            2 => LATCH_BUSY,
            4 => REPLICA_DOWN,
            _ => NO_QUORUM,
        }
    }
}

/// SUB: a sub-transaction for this node's data center (`wire::SubTxn`); the reply, a
/// `wire::Vote`, comes from an executor coroutine.
pub const H_SUB: u16 = handler_id(0);
/// DECIDE: the decision (`wire::Decision`); replied once the executor applied it.
pub const H_DECIDE: u16 = handler_id(1);
/// DONE: a coordinator ran its last transaction.
pub const H_DONE: u16 = handler_id(2);
/// `intra_dc: "messages"`: a data node's CPU locks, releases, appends to its log buffer and
/// sets log entries' status for the executor (`messages`).
pub const H_MSG_LOCK: u16 = handler_id(3);
pub const H_MSG_RELEASE: u16 = handler_id(4);
pub const H_MSG_LOG: u16 = handler_id(5);
pub const H_MSG_STATUS: u16 = handler_id(6);
/// RECOVER: a new coordinator asks what this executor holds of a transaction whose
/// coordinator failed (`wire::Status`), and fences the old coordinator off (Sec. 5.1.1).
pub const H_RECOVER: u16 = handler_id(7);
/// ADOPT: carry out a failed executor's sub-transaction with its decision (`wire::Adopt`).
pub const H_ADOPT: u16 = handler_id(8);
/// Not a message: a job this node queues for itself, to resolve a transaction whose
/// coordinator failed (`recovery::resolve`).
pub const J_RESOLVE: u16 = handler_id(9);
/// QUIET: a node past the run's end with no recovery work left in this view (`recovery`).
pub const H_QUIET: u16 = handler_id(10);
pub const HANDLER_NAMES: [&str; 11] = [
    "REDT_SUB",
    "REDT_DECIDE",
    "REDT_DONE",
    "REDT_MSG_LOCK",
    "REDT_MSG_RELEASE",
    "REDT_MSG_LOG",
    "REDT_MSG_STATUS",
    "REDT_RECOVER",
    "REDT_ADOPT",
    "REDT_RESOLVE",
    "REDT_QUIET",
];

/// A sub-transaction between its phases at its executor's node.
pub struct Sub {
    pub ops: Vec<wire::Op>,
    pub copies: Vec<copy::Copy>,
    /// The redo entries it wrote: (node, slot, entry).
    pub slots: Vec<(u16, u64, logbuf::Entry)>,
    pub yes: bool,
    /// Every data center's executor, and the coordinator's data center's operations: what a
    /// new coordinator needs (Sec. 5.1.1).
    pub executors: Vec<(u16, u16)>,
    pub home_ops: Vec<wire::Op>,
    /// Its execution failed part way (a replica's node failed): what it locked and logged
    /// is found again by its id.
    pub orphan: bool,
}

impl Sub {
    pub fn new(sub: &wire::SubTxn, copies: Vec<copy::Copy>, slots: Vec<(u16, u64, logbuf::Entry)>, yes: bool) -> Sub {
        Sub {
            ops: sub.ops.clone(),
            copies,
            slots,
            yes,
            executors: sub.executors.clone(),
            home_ops: sub.home_ops.clone(),
            orphan: false,
        }
    }

    pub fn orphan(sub: &wire::SubTxn, copies: Vec<copy::Copy>) -> Sub {
        Sub { orphan: true, ..Sub::new(sub, copies, Vec::new(), false) }
    }
}

/// A decision an executor received, with what a new coordinator needs should the
/// transaction's coordinator fail before every data center has it.
#[derive(Clone)]
pub struct Decided {
    pub decision: wire::Decision,
    pub executors: Vec<(u16, u16)>,
    pub home_ops: Vec<wire::Op>,
}

/// A node's RedT state.
pub struct Part {
    pub options: Options,
    /// Requests waiting for an executor, and the coordinators done.
    pub jobs: Jobs,
    pub subs: RefCell<BTreeMap<u64, Sub>>,
    /// The head of each node's log buffer as last read (the lazy head, Algorithm 2).
    pub log_head: RefCell<BTreeMap<u16, u64>>,
    /// A coroutine of worker 0 replays the buffer.
    pub replayer: Cell<bool>,
    pub placement: OnceCell<Placement>,
    /// Accesses a coroutine (worker, coroutine) made on the local path since its last stage.
    pub local: RefCell<BTreeMap<(u16, u32), u64>>,
    /// Recovery (Sec. 5.1.1). Per coordinator thread, the last decision this executor
    /// received (a thread runs one transaction at a time, so this bounds it).
    pub decided: RefCell<BTreeMap<u64, Decided>>,
    /// Transactions a new coordinator took over: their old coordinator's messages are void.
    pub fenced: RefCell<BTreeSet<u64>>,
    /// Transactions this node resolves as their new coordinator, and those it resolved:
    /// (committed, when, ns).
    pub resolving: RefCell<BTreeSet<u64>>,
    pub verdicts: RefCell<BTreeMap<u64, (bool, u64)>>,
    /// The view epoch each node said it was quiet in (QUIET), and the one this node said.
    pub quiet: RefCell<BTreeMap<u16, u64>>,
    /// Log slots (node, index) this node's executors took by FAA and have not written yet: a
    /// slot a failed executor took and never wrote is a hole the replay would wait on.
    pub reserved: RefCell<BTreeSet<(u16, u64)>>,
    pub announced: Cell<Option<u64>>,
}

/// The coordinator thread of a transaction id (node, incarnation, worker, coroutine): it runs
/// one transaction at a time.
pub fn thread_of(tid: u64) -> u64 {
    tid >> 28
}

/// Takes the local accesses coroutine `ctx` made since its last stage.
pub fn take_local(ctx: &Ctx, n: &NodeState) -> u64 {
    part(n).local.borrow_mut().remove(&(ctx.me().worker, ctx.coroutine())).unwrap_or(0)
}

pub fn part(n: &NodeState) -> &Part {
    n.participant()
}

/// Where replicas live (from the run's data centers).
pub fn placement(n: &NodeState) -> &Placement {
    part(n).placement.get_or_init(|| Placement::new(&n.dc_of, n.nodes))
}

impl Protocol for RedT {
    fn name(&self) -> &'static str {
        "RedT"
    }
    fn description(&self) -> &'static str {
        "one executor per data center locking every replica by one-sided verbs, pre-written redo logs, commit on more than 3/4 of replicas (RedT, PVLDB 2023)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn ext_bytes(&self, _record_bytes: u64) -> u64 {
        item::EXT_BYTES
    }
    fn area_bytes(&self, _nodes: u16, _workers: u16, _coroutines: u32) -> u64 {
        logbuf::AREA_BYTES
    }
    fn stores_replicas(&self) -> bool {
        true
    }
    fn nic_atomics(&self, _hybrid: Hybrid) -> bool {
        true
    }
    fn rpc_patience_ns(&self, _options: &OptionValues) -> u64 {
        // An executor answers after its one-sided rounds; under contention it queues.
        100_000_000
    }
    fn bugs(&self) -> &'static [Bug] {
        &[IGNORE_THOMAS_RULE, STALE_VOTES_COUNT, RECOVERY_ABORTS_COMMITTED, RESTORED_COPY_MISSES_WRITES]
    }
    fn check_options(&self, given: &OptionValues) -> Result<(), String> {
        parse_options::<Options>(given)?.check()
    }
    fn default_options(&self) -> OptionValues {
        serde_json::to_value(Options::default()).expect("options serialize")
    }
    fn participant(&self, options: &OptionValues) -> Box<dyn std::any::Any> {
        Box::new(Part {
            options: parse_options(options).unwrap_or_default(),
            jobs: Jobs::default(),
            subs: RefCell::default(),
            log_head: RefCell::default(),
            replayer: Cell::new(false),
            placement: OnceCell::new(),
            local: RefCell::default(),
            decided: RefCell::default(),
            fenced: RefCell::default(),
            resolving: RefCell::default(),
            verdicts: RefCell::default(),
            quiet: RefCell::default(),
            announced: Cell::new(None),
            reserved: RefCell::default(),
        })
    }
    fn handler_names(&self) -> &'static [&'static str] {
        &HANDLER_NAMES
    }
    fn handlers(&self, n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
        let queue = |id: u16| -> Rc<HandlerFn> {
            let n = n.clone();
            Rc::new(move |h: &mut HandlerCtx<'_>, req: &[u8]| part(&n).jobs.defer(h, id, req))
        };
        let done: Rc<HandlerFn> = {
            let n = n.clone();
            Rc::new(move |h: &mut HandlerCtx<'_>, _req: &[u8]| part(&n).jobs.note_done(h))
        };
        let on_cpu = |f: fn(&NodeState, &mut HandlerCtx<'_>, &[u8]) -> txbed_transport::Handled| -> Rc<HandlerFn> {
            let n = n.clone();
            Rc::new(move |h: &mut HandlerCtx<'_>, req: &[u8]| f(&n, h, req))
        };
        in_id_order(vec![
            (H_SUB, queue(H_SUB)),
            (H_DECIDE, queue(H_DECIDE)),
            (H_DONE, done),
            (H_MSG_LOCK, on_cpu(messages::lock_handler)),
            (H_MSG_RELEASE, on_cpu(messages::release_handler)),
            (H_MSG_LOG, on_cpu(messages::log_handler)),
            (H_MSG_STATUS, on_cpu(messages::status_handler)),
            (H_RECOVER, on_cpu(recovery::recover_handler)),
            (H_ADOPT, queue(H_ADOPT)),
            (J_RESOLVE, on_cpu(|_, _, _| txbed_transport::Handled::Reply)),
            (H_QUIET, on_cpu(recovery::quiet_handler)),
        ])
    }
    fn background(&self) -> Option<BackgroundFn> {
        Some(|ctx, n, end| Box::pin(background(ctx, n, end)))
    }
    fn background_coroutines(&self, options: &OptionValues) -> u32 {
        parse_options::<Options>(options).map_or(1, |o| o.executors_per_worker)
    }
    fn coordinator_done<'a>(&self, ctx: &'a Ctx, n: &'a NodeState) -> Option<LocalBoxFuture<'a, ()>> {
        Some(Box::pin(txbed_txn::serve::announce_done(ctx, n, H_DONE)))
    }
    fn survives_crashes(&self) -> Result<(), &'static str> {
        Ok(())
    }
    fn node_down(&self, dead: u16, live: &[(&NodeState, &dyn txbed_transport::HostMemory)]) -> u64 {
        recovery::release_orphans(dead, live)
    }
    fn restore_copy(&self, ext_at: usize, candidates: &[Vec<u8>]) -> Option<Vec<u8>> {
        recovery::restore_copy(ext_at, candidates)
    }
    fn catch_up_copy(&self, node: &NodeState, ext_at: usize, own: &[u8], candidates: &[Vec<u8>]) -> Option<Vec<u8>> {
        if node.bug == Some(RESTORED_COPY_MISSES_WRITES) {
            return None;
        }
        recovery::catch_up_copy(ext_at, own, candidates)
    }
    fn joined(&self, node: &NodeState, peer: &NodeState) {
        part(node).jobs.learn_done(&part(peer).jobs);
    }
    fn verdict(&self, live: &[&NodeState], tid: u64) -> Option<(bool, u64)> {
        live.iter().find_map(|n| part(n).verdicts.borrow().get(&tid).copied())
    }
    fn resolving(&self, n: &NodeState, up: &dyn Fn(u16) -> bool) -> bool {
        recovery::resolving(n, up)
    }
    fn survives_lost_messages(&self, _hybrid: Hybrid) -> Result<(), &'static str> {
        Err("RedT's recovery (Sec. 5.1) is for failed nodes: a decision a partition loses leaves its locks held")
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(coordinator::attempt(ctx, n, spec, id))
    }
}

/// A worker's executor coroutines, and on worker 0 one replay coroutine (Sec. 4.2.2's
/// "separate thread in each node").
async fn background(ctx: Ctx, n: Rc<NodeState>, end: u64) -> Result<(), TxnError> {
    let p = part(&n);
    let waiting = || !p.subs.borrow().is_empty() || recovery::has_work(&ctx, &n) || !recovery::all_quiet(&ctx, &n);
    if ctx.me().worker == 0 && !p.replayer.replace(true) {
        loop {
            recovery::find_orphans(&ctx, &n);
            recovery::announce_quiet(&ctx, &n, end).await;
            let empty = executor::replay_once(&ctx, &n).await?;
            if empty && ctx.now() >= end && p.jobs.all_done(&ctx, &n) && p.jobs.is_empty() && !waiting() {
                return Ok(());
            }
            if ctx.now() > end + txbed_txn::serve::STRAGGLE_NS {
                return Err(TxnError::Unsupported("RedT's log replay still had entries 10 s after the end"));
            }
            // Past the end, drain promptly: the run's finals are read once every coroutine ends.
            let now = ctx.now();
            let pause = match now >= end {
                true => p.options.replay_interval_ns.min(10_000),
                false => p.options.replay_interval_ns.min(end - now).max(1),
            };
            ctx.sleep(pause).await;
        }
    }
    txbed_txn::serve::serve(&ctx, &n, end, &p.jobs, &waiting, serve_job).await
}

/// An executor's answer to a queued request.
fn serve_job<'a>(ctx: &'a Ctx, n: &'a NodeState, job: &'a Job) -> LocalBoxFuture<'a, Result<Vec<u8>, TxnError>> {
    Box::pin(async move {
        match job.handler {
            H_SUB => Ok(executor::execute(ctx, n, &wire::SubTxn::decode(&job.req)?).await?.encode()),
            H_ADOPT => {
                let a = wire::Adopt::decode(&job.req)?;
                recovery::adopt(ctx, n, &a).await?;
                Ok(Vec::new())
            }
            J_RESOLVE => {
                let tids: Vec<u64> = job.req.chunks_exact(8).map(|c| txbed_txn::wire::u64_at(c, 0)).collect();
                recovery::resolve(ctx, n, &tids).await?;
                Ok(Vec::new())
            }
            _ => {
                executor::decide(ctx, n, &wire::Decision::decode(&job.req)?).await?;
                Ok(Vec::new())
            }
        }
    })
}
