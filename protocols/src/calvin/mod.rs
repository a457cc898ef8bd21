//! CALVIN (RCC Sec. 4.6; Thomson et al., SIGMOD 2012): deterministic transactions.
//!
//! Every node runs a sequencer and a scheduler, both in the background coroutine of its
//! worker 0 (the other workers' background coroutines have nothing to do):
//!
//! 1. A coordinator submits its transaction's input to its node's sequencer (`H_SUBMIT`, a
//!    local RPC whose reply is deferred until the transaction's fate is known).
//! 2. Every `epoch_ns`, each sequencer closes an epoch: its batch (possibly empty) goes to
//!    every node (CALVIN-INPUT: batched RPC, or one-sided WRITEs into a ring per sender,
//!    `calvin_chan`). A sequencer runs at most `LAG` epochs ahead of what its node has
//!    scheduled, so a slow transport stretches the epochs instead of queueing them.
//! 3. Once a node holds every sequencer's batch of an epoch (epoch synchronization), it
//!    orders the epoch's transactions by (epoch, sequencer node, position) and, for the
//!    records it owns, queues lock requests in that order (a deterministic lock manager:
//!    shared reads, exclusive writes, no aborts, no deadlock since every node uses one order).
//! 4. When a transaction holds its local locks, the node reads its local records and sends
//!    them to the transaction's active participants (CALVIN-FORWARD: RPC, or two doorbelled
//!    WRITEs, value then notify). Passive participants (only read-set records here) are done;
//!    actives (a write-set record here; for a read-only transaction, its lowest participant)
//!    wait for every record, run the logic, log their own writes to the backups (RPC, grouped
//!    per scheduler round), apply them (version + 1, writer, record), and release.
//! 5. One active (the origin if it is one, else the lowest) reports the outcome and the
//!    versions read to the origin's sequencer, which answers the coordinator; the coordinator
//!    records the history.
//!
//! At the end, each sequencer marks the first batch it closes at least an epoch after `end`
//! as final and takes no more submissions: one arriving later is refused and its attempt returns
//! `Conflict` (the coordinator then stops, the window being over). Nodes treat a finished
//! sequencer's later batches as empty, and stop once every sequencer has finished and their
//! transactions have run.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use txbed_checker::Access;
use txbed_transport::{CallId, Ctx, Endpoint, Handled, HandlerCtx, HandlerFn, NodeId, ReplyToken};
use txbed_workloads::{Executed, TxnSpec};

mod chan;
mod wire;

pub use chan::RING_BYTES;

use chan::{FORWARD, INPUT};
use serde::{Deserialize, Serialize};
use txbed_txn::attempt::{self, Attempt};
use txbed_txn::history_key;
use txbed_txn::msg::{LogEntry, LogRecord};
use txbed_txn::node::{NodeState, H_LOG, MALFORMED};
use txbed_txn::ops;
use txbed_txn::protocol::{
    handler_id, in_id_order, parse_options, BackgroundFn, Bug, LocalBoxFuture, OptionValues, Protocol,
};
use txbed_txn::stage::{Hybrid, Stage};
use txbed_txn::store::{self, split_version_word, version_word, BUCKET_BYTES, META_BYTES, VERSION, WRITER};
use txbed_txn::wire::{u64_at, WireError};
use txbed_txn::TxnError;
use wire::Value;

/// The stages CALVIN has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 2] = [Stage::CalvinInput, Stage::CalvinForward];

/// Default epoch length. Calvin and RCC use 10 ms on real clusters; runs of a few hundred
/// microseconds need short epochs to sequence anything.
pub const DEFAULT_EPOCH_NS: u64 = 10_000;
/// How often the scheduler looks for new work (one-sided arrivals need polling).
const POLL_NS: u64 = 500;
/// Epochs a sequencer may close beyond those its node has scheduled.
const LAG: u64 = 2;
/// Largest message (a batch part, a forward): fits a datagram and, framed, a quarter ring.
/// Larger batches span several parts.
const MAX_MSG: usize = 2048;
/// Largest RPC payload of several frames, and of an input's fragment.
const MAX_RPC: usize = 3 * 1024;

/// RPC handler ids.
pub const H_SUBMIT: u16 = handler_id(0);
pub const H_INPUT: u16 = handler_id(1);
pub const H_FORWARD: u16 = handler_id(2);
pub const H_RESULT: u16 = handler_id(3);

/// Handler names, for traces.
pub const HANDLER_NAMES: [&str; 4] = ["CALVIN_SUBMIT", "CALVIN_INPUT", "CALVIN_FORWARD", "CALVIN_RESULT"];

const COMMITTED: u8 = 0;
const USER_ABORT: u8 = 1;
const TOO_LATE: u8 = 2;
/// The origin's scheduler stopped on an error (reported as the run's failure).
const FAILED: u8 = 3;

/// Participant-side state of CALVIN on one node.
pub struct Participant {
    /// The epoch length; every node of a run uses the same.
    epoch_ns: u64,
    e: RefCell<Engine>,
}

pub struct Calvin;

impl Protocol for Calvin {
    fn name(&self) -> &'static str {
        "CALVIN"
    }
    fn description(&self) -> &'static str {
        "deterministic: sequenced epochs, ordered lock queues, no aborts (RCC Sec. 4.6)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn area_bytes(&self, nodes: u16, _workers: u16, _coroutines: u32) -> u64 {
        chan::area_bytes(nodes)
    }
    fn bugs(&self) -> &'static [Bug] {
        &[READ_BEFORE_LOCK, SHORT_FORWARD]
    }
    /// Calvin replicates its input log to recover a node by replaying it; here the sequencer
    /// buffers, the epoch barrier and the lock queues live only in the nodes' memory, so a
    /// crashed node's epochs can never complete (docs/faults.md).
    fn survives_lost_messages(&self, hybrid: Hybrid) -> Result<(), &'static str> {
        if hybrid.onesided(Stage::CalvinInput) || hybrid.onesided(Stage::CalvinForward) {
            return Err("its one-sided channels write each message once into the receiver's ring: one lost to a broken connection leaves a hole the receiver waits on forever (the RPC channels resend)");
        }
        Ok(())
    }
    fn runs_chopped(&self) -> Result<(), &'static str> {
        Err("its sequencers stop taking transactions at the run's end, so a chopped transaction's later pieces could not finish")
    }
    fn survives_crashes(&self) -> Result<(), &'static str> {
        Err("its sequencers, epoch batches and lock queues are kept only in volatile memory and are not replicated, so every node would wait forever for the crashed node's batches")
    }
    fn check_options(&self, given: &OptionValues) -> Result<(), String> {
        let o = parse_options::<Options>(given)?;
        if o.epoch_us == 0 || o.epoch_us > 1_000_000 {
            return Err(format!("epoch_us must be 1..=1000000 (1 us to 1 s), got {}", o.epoch_us));
        }
        Ok(())
    }
    fn default_options(&self) -> OptionValues {
        serde_json::to_value(Options::default()).expect("options serialise")
    }
    fn participant(&self, options: &OptionValues) -> Box<dyn std::any::Any> {
        let o = parse_options::<Options>(options).expect("options were checked");
        Box::new(Participant { epoch_ns: o.epoch_us * 1000, e: RefCell::default() })
    }
    /// A submit's outcome comes once its epoch closes, its batch is scheduled (at most `LAG`
    /// epochs behind) and it runs: give it `LAG + 2` epochs.
    fn rpc_patience_ns(&self, options: &OptionValues) -> u64 {
        let o = parse_options::<Options>(options).expect("options were checked");
        submit_patience_ns(o.epoch_us * 1000)
    }
    fn handler_names(&self) -> &'static [&'static str] {
        &HANDLER_NAMES
    }
    fn handlers(&self, n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
        in_id_order(handlers(n))
    }
    fn background(&self) -> Option<BackgroundFn> {
        Some(|ctx, n, end| Box::pin(background(ctx, n, end)))
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id))
    }
}

/// CALVIN's options (`protocol.options`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// Epoch length, us: how often each sequencer closes and broadcasts its batch.
    pub epoch_us: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { epoch_us: DEFAULT_EPOCH_NS / 1000 }
    }
}

/// Participants read their records as soon as a transaction is sequenced, without waiting
/// for the deterministic lock manager's grant (RCC Sec. 4.6 done wrong): they miss the writes
/// of earlier transactions in the order.
pub const READ_BEFORE_LOCK: Bug = Bug {
    name: "CalvinReadBeforeLock",
    about: "reads records before the lock manager grants them: misses earlier transactions' writes",
};

/// Cuts 8 bytes off every forwarded-values message: receivers cannot decode them, and must
/// stop with an error the run reports (a peer's message never panics).
pub const SHORT_FORWARD: Bug = Bug {
    name: "CalvinShortForward",
    about: "sends forwarded values 8 B short: each receiving scheduler reports a malformed message and stops",
};

/// This node's CALVIN state.
fn part(n: &NodeState) -> &Participant {
    n.participant()
}

/// A lock request in a record's queue.
struct LockReq {
    gseq: u64,
    write: bool,
    granted: bool,
}

/// A transaction this node participates in.
struct Local {
    id: u64,
    origin: u16,
    spec: TxnSpec,
    /// This node's records (packed keys, deduplicated) and whether each is written.
    keys: Vec<(u64, bool)>,
    /// Locks not granted yet.
    missing: usize,
    actives: Vec<u16>,
    /// Distinct records of the transaction (all must be here before an active executes).
    records: usize,
    /// When the local records were read (an active then waits for the others).
    ready_at: u64,
}

/// A round of executed transactions whose log calls are in flight.
struct Logging {
    calls: Vec<CallId>,
    t0: u64,
    bytes: u64,
    done: Vec<Done>,
}

/// An executed transaction whose writes wait for the log.
struct Done {
    gseq: u64,
    id: u64,
    origin: u16,
    /// (packed key, tuple offset, new version word, new record).
    writes: Vec<(u64, u64, u64, Vec<u8>)>,
    /// The result for the origin, if this node reports it.
    result: Option<Vec<u8>>,
}

/// Where a batch's parts stand.
#[derive(Default)]
struct Parts {
    count: u16,
    fin: bool,
    got: BTreeMap<u16, Vec<u8>>,
}

impl Parts {
    fn complete(&self) -> bool {
        self.count > 0 && self.got.len() == self.count as usize
    }
}

#[derive(Default)]
struct Engine {
    // Sequencer.
    /// Inputs submitted since the last epoch closed, in arrival order.
    queue: Vec<Vec<u8>>,
    /// Fragments of inputs not yet whole, by transaction id.
    submitting: BTreeMap<u64, BTreeMap<u16, Vec<u8>>>,
    /// Coordinators waiting for their transaction's outcome, by id.
    waiting: BTreeMap<u64, ReplyToken>,
    /// Outcomes other nodes reported, to pass on to the coordinators.
    results: Vec<Vec<u8>>,
    next_close: u64,
    /// When the next epoch is due.
    next_due: u64,
    /// This sequencer's final batch is closed: refuse submissions.
    sealed: bool,
    /// Per sequencer, the epoch of its final batch, once scheduled.
    fin: Vec<Option<u64>>,
    /// Per closed epoch not yet scheduled: when it closed, bytes sent.
    closed: BTreeMap<u64, (u64, u64)>,
    // Inputs.
    parts: BTreeMap<(u64, u16), Parts>,
    next_sched: u64,
    // Scheduler.
    locks: BTreeMap<u64, VecDeque<LockReq>>,
    txns: BTreeMap<u64, Local>,
    ready: VecDeque<u64>,
    /// Actives waiting for forwarded values.
    executing: BTreeSet<u64>,
    /// Values of each transaction an active has so far (forwards may arrive before the
    /// transaction is scheduled here).
    values: BTreeMap<u64, BTreeMap<u64, Value>>,
    offsets: BTreeMap<u64, u64>,
    kinds: Vec<&'static str>,
    logging: VecDeque<Logging>,
    log_rounds: u64,
    /// Calls whose replies nobody needs (inputs, forwards, results), until they arrive.
    inflight: Vec<CallId>,
    // Outgoing messages and one-sided channel state, per channel and peer.
    out: Vec<chan::Out>,
    inb: Vec<chan::In>,
    /// The first message a handler could not decode (only CALVIN's own nodes send them: a
    /// bug), for the scheduler to report.
    malformed: Option<WireError>,
    /// The scheduler stopped on an error: submissions are answered `FAILED`.
    failed: bool,
}

impl Engine {
    fn init(&mut self, nodes: u16) {
        if self.out.is_empty() {
            self.out = (0..2 * nodes).map(|_| chan::Out::default()).collect();
            self.inb = (0..2 * nodes).map(|_| chan::In::default()).collect();
            self.fin = vec![None; nodes as usize];
        }
    }

    /// The `&'static str` for a kind's name (specs hold static names; a name seen first on
    /// the wire is leaked once per node).
    fn intern(&mut self, name: &str) -> &'static str {
        if let Some(k) = self.kinds.iter().find(|k| **k == name) {
            return k;
        }
        let k: &'static str = Box::leak(name.to_string().into_boxed_str());
        self.kinds.push(k);
        k
    }

    /// A message that arrived on channel `ch` from `from`.
    fn deliver(&mut self, ch: usize, from: u16, m: &[u8]) -> Result<(), WireError> {
        if ch == INPUT {
            let (epoch, part, count, fin) = wire::part_header(m)?;
            let p = self.parts.entry((epoch, from)).or_default();
            p.count = count;
            p.fin |= fin;
            p.got.insert(part, m.to_vec());
        } else {
            let (id, vals) = wire::decode_forward(m)?;
            self.values.entry(id).or_default().extend(vals);
        }
        Ok(())
    }

    /// Whether every sequencer has finished and this node scheduled all their batches.
    fn all_scheduled(&self) -> bool {
        self.fin.iter().all(|f| f.is_some_and(|f| f < self.next_sched))
    }

    /// Whether epoch `e` can be scheduled: every sequencer's batch is here, or the sequencer
    /// finished before `e`.
    fn schedulable(&self, e: u64) -> bool {
        !self.all_scheduled()
            && (0..self.fin.len() as u16).all(|s| {
                self.fin[s as usize].is_some_and(|f| f < e) || self.parts.get(&(e, s)).is_some_and(|p| p.complete())
            })
    }

    /// Queues `t`'s lock requests behind those of every earlier transaction (deterministic
    /// locking, RCC Sec. 4.6); `t` is ready once all are granted. The planted bug reads at
    /// once, as if every lock were free.
    fn enqueue(&mut self, g: u64, mut t: Local, bug: bool) {
        for &(k, write) in &t.keys {
            let q = self.locks.entry(k).or_default();
            let granted = bug || if write { q.is_empty() } else { q.iter().all(|r| !r.write) };
            t.missing += !granted as usize;
            q.push_back(LockReq { gseq: g, write, granted });
        }
        if t.missing == 0 {
            self.ready.push_back(g);
        }
        self.txns.insert(g, t);
    }

    /// Grants the requests at the head of `key`'s queue that can run: the first writer, or
    /// every reader before the first writer.
    fn grant(&mut self, key: u64) {
        let Some(q) = self.locks.get_mut(&key) else { return };
        let mut granted = Vec::new();
        for (i, r) in q.iter_mut().enumerate() {
            if r.write && i > 0 {
                break;
            }
            if !r.granted {
                r.granted = true;
                granted.push(r.gseq);
            }
            if r.write {
                break;
            }
        }
        for g in granted {
            if let Some(t) = self.txns.get_mut(&g) {
                t.missing -= 1;
                if t.missing == 0 {
                    self.ready.push_back(g);
                }
            }
        }
    }

    fn release(&mut self, key: u64, gseq: u64) {
        let Some(q) = self.locks.get_mut(&key) else { return };
        q.retain(|r| r.gseq != gseq);
        if q.is_empty() {
            self.locks.remove(&key);
        } else {
            self.grant(key);
        }
    }
}

fn stage_of(ch: usize) -> Stage {
    if ch == INPUT {
        Stage::CalvinInput
    } else {
        Stage::CalvinForward
    }
}

/// Global position of a transaction: (epoch, sequencer node, position) in one word.
fn gseq(epoch: u64, node: u16, pos: u64) -> u64 {
    (epoch << 32) | ((node as u64) << 20) | pos
}

/// Largest RPC payload here: `MAX_RPC`, or less when the datagram MTU is smaller.
fn max_rpc(ctx: &Ctx) -> usize {
    MAX_RPC.min(ctx.max_rpc_payload())
}

/// Largest message: fits a quarter ring and, framed, an RPC payload.
fn max_msg(ctx: &Ctx) -> usize {
    MAX_MSG.min((RING_BYTES / 4).saturating_sub(8) as usize).min(max_rpc(ctx) - 8)
}

fn home(n: &NodeState, key: u64) -> u16 {
    n.workload.home(wire::unpack(key), n.nodes)
}

/// How long a coordinator waits for its submit's outcome (`Protocol::rpc_patience_ns`).
fn submit_patience_ns(epoch_ns: u64) -> u64 {
    (LAG + 2) * epoch_ns
}

fn worker0(node: u16) -> Endpoint {
    Endpoint { node: NodeId(node), worker: 0 }
}

/// CALVIN's RPC handlers (ids 50..=59).
pub fn handlers(n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    let submit = n.clone();
    let result = n.clone();
    let mut hs: Vec<(u16, Rc<HandlerFn>)> = vec![
        (
            H_SUBMIT,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                // The sequencer takes the input, once all its fragments are here; the
                // coordinator hears back on the fragment that completed it, once it ran.
                ctx.copy(req.len());
                let mut e = part(&submit).e.borrow_mut();
                let Ok((id, frag, frags, bytes)) = wire::decode_submit(req) else {
                    // The coordinator's attempt fails on this reply.
                    ctx.reply.push(MALFORMED);
                    return Handled::Reply;
                };
                if e.sealed || e.failed {
                    e.submitting.remove(&id);
                    let status = if e.failed { FAILED } else { TOO_LATE };
                    ctx.reply.extend_from_slice(&wire::encode_result(id, status, 0, &[]));
                    return Handled::Reply;
                }
                let got = e.submitting.entry(id).or_default();
                got.insert(frag, bytes.to_vec());
                if got.len() < frags as usize {
                    return Handled::Reply; // an empty reply acknowledges a fragment
                }
                let input = e.submitting.remove(&id).expect("fragments").into_values().flatten().collect();
                e.queue.push(input);
                e.waiting.insert(id, ctx.token());
                Handled::Defer
            }),
        ),
        (
            H_RESULT,
            Rc::new(move |_: &mut HandlerCtx<'_>, req: &[u8]| {
                // Answered by the sequencer's coroutine: `send_deferred_reply` also remembers
                // the reply for a coordinator that retransmits its call.
                let mut e = part(&result).e.borrow_mut();
                match wire::decode_result(req) {
                    Ok(_) => e.results.push(req.to_vec()),
                    Err(err) => {
                        e.malformed.get_or_insert(err);
                    }
                }
                Handled::Reply
            }),
        ),
    ];
    for (h, ch) in [(H_INPUT, INPUT), (H_FORWARD, FORWARD)] {
        let n = n.clone();
        hs.push((
            h,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                ctx.copy(req.len());
                let mut e = part(&n).e.borrow_mut();
                let from = ctx.src.node.0;
                let delivered =
                    wire::unframe(req).and_then(|ms| ms.into_iter().try_for_each(|m| e.deliver(ch, from, m)));
                if let Err(err) = delivered {
                    e.malformed.get_or_insert(err);
                }
                Handled::Reply
            }),
        ));
    }
    hs
}

/// Submits the transaction to this node's sequencer and waits for its outcome.
async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    run(ctx, n, spec, id).await.unwrap_or_else(Attempt::Failed)
}

async fn run(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let mut input = Vec::new();
    wire::encode_input(&mut input, id, spec);
    let mut reply = Vec::new();
    for frag in wire::submit_fragments(id, &input, max_rpc(ctx)) {
        reply = ctx.rpc_patient(worker0(n.me), H_SUBMIT, &frag, submit_patience_ns(part(n).epoch_ns)).await?;
        if !reply.is_empty() {
            break; // the outcome, or a refusal of the run's end
        }
    }
    let (_, status, delta, versions) = wire::decode_result(&reply)?;
    match status {
        COMMITTED => {}
        USER_ABORT => return Ok(Attempt::UserAbort),
        TOO_LATE => return Ok(Attempt::Conflict("calvin: sequenced after the run")),
        FAILED => return Err(TxnError::Stopped("CALVIN's scheduler on this node")),
        s => return Err(WireError::Status(s).into()),
    }
    if versions.len() != spec.reads.len() + spec.writes.len() {
        return Err(WireError::Invalid("CALVIN result has the wrong number of versions").into());
    }
    let mut h = attempt::new_history(ctx, n, spec, id, start_ns);
    let (rs, ws) = versions.split_at(spec.reads.len());
    for (k, &v) in spec.reads.iter().zip(rs) {
        h.reads.push(Access { key: history_key(k.table, k.row), version: v });
    }
    for (k, &v) in spec.writes.iter().zip(ws) {
        h.reads.push(Access { key: history_key(k.table, k.row), version: v });
        h.writes.push(Access { key: history_key(k.table, k.row), version: v + 1 });
    }
    attempt::committed(ctx, n, h, delta);
    Ok(Attempt::Committed)
}

/// The worker's background coroutine: on worker 0, the node's sequencer and scheduler, until
/// the final epoch is sequenced and everything in it has run here. An error (a peer's
/// malformed message, a failed verb) stops it: the coordinators waiting here hear `FAILED`.
async fn background(ctx: Ctx, n: Rc<NodeState>, end: u64) -> Result<(), TxnError> {
    if ctx.me().worker != 0 {
        return Ok(());
    }
    let r = scheduler(&ctx, &n, end).await;
    if r.is_err() {
        let mut e = part(&n).e.borrow_mut();
        e.failed = true;
        for (id, token) in std::mem::take(&mut e.waiting) {
            ctx.send_deferred_reply(token, wire::encode_result(id, FAILED, 0, &[]));
        }
    }
    r
}

async fn scheduler(ctx: &Ctx, n: &NodeState, end: u64) -> Result<(), TxnError> {
    let epoch_ns = part(n).epoch_ns;
    part(n).e.borrow_mut().init(n.nodes);
    loop {
        step(ctx, n, epoch_ns, end)?;
        let done = execute(ctx, n)?;
        let executed = !done.is_empty();
        if executed {
            // Group commit: this round's writes go to the backups; they are applied and
            // released once every backup has them.
            log(ctx, n, done);
        }
        flush(ctx, n)?;
        let applied = reap(ctx, n)?;
        if executed || applied {
            continue; // new work may be ready
        }
        let finished = {
            let e = part(n).e.borrow();
            e.sealed
                && e.all_scheduled()
                && e.waiting.is_empty()
                && e.results.is_empty()
                && e.txns.is_empty()
                && e.logging.is_empty()
                && e.out.iter().all(|o| o.msgs.is_empty())
        };
        if finished {
            break;
        }
        ctx.sleep(POLL_NS).await;
    }
    // What is still in flight: one-sided channel WRITEs and calls whose replies nobody
    // needs; a failed WRITE lost a message the run depended on.
    ctx.wait().await?;
    ctx.clear_replies();
    Ok(())
}

/// Sequencer, arrivals, scheduling and local reads: everything that needs no waiting.
fn step(ctx: &Ctx, n: &NodeState, epoch_ns: u64, end: u64) -> Result<(), TxnError> {
    let mut e = part(n).e.borrow_mut();
    let e = &mut *e;
    if let Some(err) = e.malformed.take() {
        return Err(err.into());
    }
    for r in std::mem::take(&mut e.results) {
        if let Some(token) = e.waiting.remove(&wire::result_id(&r)?) {
            ctx.send_deferred_reply(token, r);
        }
    }
    // Sequencer: close the epoch when it is due (RCC Sec. 4.6, transaction dispatch).
    let now = ctx.now();
    if e.next_due == 0 {
        e.next_due = epoch_ns;
    }
    if !e.sealed && now >= e.next_due && e.next_close < e.next_sched + LAG {
        let epoch = e.next_close;
        e.next_close += 1;
        e.next_due += epoch_ns;
        if e.next_due <= now {
            e.next_due = now + epoch_ns; // fell behind: restart the grid
        }
        e.sealed = now >= end + epoch_ns;
        let parts = wire::batch_parts(epoch, e.sealed, &std::mem::take(&mut e.queue), max_msg(ctx));
        let mut bytes = 0;
        for to in 0..n.nodes {
            for p in &parts {
                if to == n.me {
                    e.deliver(INPUT, to, p)?;
                } else {
                    bytes += p.len() as u64;
                    e.out[INPUT * n.nodes as usize + to as usize].msgs.push_back(p.clone());
                }
            }
        }
        e.closed.insert(epoch, (now, bytes));
    }
    // One-sided arrivals: poll the inboxes.
    for ch in [INPUT, FORWARD] {
        if !n.hybrid.onesided(stage_of(ch)) {
            continue;
        }
        for from in (0..n.nodes).filter(|&f| f != n.me) {
            let i = ch * n.nodes as usize + from as usize;
            for m in chan::poll(ctx, n, &mut e.inb[i], ch, from)? {
                e.deliver(ch, from, &m)?;
            }
        }
    }
    // Schedule every epoch whose batches are all here, in (sequencer, position) order.
    while e.schedulable(e.next_sched) {
        let epoch = e.next_sched;
        e.next_sched += 1;
        if let Some((t0, bytes)) = e.closed.remove(&epoch) {
            // Dispatch plus epoch synchronization: from this sequencer's close to the last batch.
            ops::account(ctx, n, Stage::CalvinInput, t0, 1, bytes, 0);
        }
        for s in 0..n.nodes {
            let Some(parts) = e.parts.remove(&(epoch, s)) else { continue }; // finished sequencer
            if parts.fin {
                e.fin[s as usize] = Some(epoch);
            }
            let batch = parts.got.values().map(|m| m.as_slice());
            let inputs = wire::batch_inputs(batch, &mut |k| e.intern(k))?;
            for (pos, (id, spec)) in inputs.into_iter().enumerate() {
                schedule(ctx, n, e, gseq(epoch, s, pos as u64), s, id, spec);
            }
        }
    }
    read_ready(ctx, n, e)
}

/// Queues a sequenced transaction's lock requests on the records this node owns.
fn schedule(ctx: &Ctx, n: &NodeState, e: &mut Engine, g: u64, origin: u16, id: u64, spec: TxnSpec) {
    if ctx.tracing() {
        ctx.trace_slice_args(
            "calvin order",
            txbed_transport::trace::TXN,
            ctx.now(),
            ctx.now(),
            &[("gseq", g), ("id", id)],
        );
    }
    let mut keys: Vec<(u64, bool)> = Vec::new();
    for (k, w) in spec.reads.iter().map(|k| (k, false)).chain(spec.writes.iter().map(|k| (k, true))) {
        let k = k.packed();
        match keys.iter_mut().find(|(x, _)| *x == k) {
            Some(e) => e.1 |= w,
            None => keys.push((k, w)),
        }
    }
    let homes: BTreeSet<u16> = keys.iter().map(|&(k, _)| home(n, k)).collect();
    if !homes.contains(&n.me) {
        return;
    }
    let mut actives: Vec<u16> = keys.iter().filter(|k| k.1).map(|&(k, _)| home(n, k)).collect();
    actives.sort_unstable();
    actives.dedup();
    if actives.is_empty() {
        // A read-only transaction runs at its lowest participant.
        actives.push(*homes.first().expect("a participant"));
    }
    let records = keys.len();
    let local: Vec<(u64, bool)> = keys.into_iter().filter(|&(k, _)| home(n, k) == n.me).collect();
    let t = Local { id, origin, spec, keys: local, missing: 0, actives, records, ready_at: 0 };
    e.enqueue(g, t, n.bug == Some(READ_BEFORE_LOCK));
}

/// The tuple offset of a record this node owns (its index, through local memory).
fn offset(ctx: &Ctx, n: &NodeState, e: &mut Engine, key: u64) -> Result<u64, TxnError> {
    if let Some(&o) = e.offsets.get(&key) {
        return Ok(o);
    }
    let k = wire::unpack(key);
    let place = n.catalog.layout.table(k.table).ok_or(TxnError::UnknownTable(k.table))?;
    let mut at = place.buckets_at + store::bucket_of(k.row, place.buckets) * BUCKET_BYTES;
    for _ in 0..=place.pool + 1 {
        let mut b = [0u8; BUCKET_BYTES as usize];
        ctx.read_local(n.base() + at, &mut b)?;
        match store::probe(&b, k.row) {
            store::Probe::Found { offset, .. } => {
                e.offsets.insert(key, offset);
                return Ok(offset);
            }
            store::Probe::Next { offset } => at = offset,
            store::Probe::Absent => break,
        }
    }
    Err(TxnError::NotFound { node: n.me, table: k.table, key: k.row })
}

/// Transactions holding their local locks read their records, forward them to the actives
/// and release what they only read (passive participants are then done).
fn read_ready(ctx: &Ctx, n: &NodeState, e: &mut Engine) -> Result<(), TxnError> {
    while let Some(g) = e.ready.pop_front() {
        let t = e.txns.get(&g).expect("ready transaction");
        let keys = t.keys.clone();
        let (id, actives) = (t.id, t.actives.clone());
        let mut vals: Vec<(u64, Value)> = Vec::with_capacity(keys.len());
        for &(k, _) in &keys {
            let off = offset(ctx, n, e, k)?;
            let table = n.catalog.layout.table(wire::unpack(k).table).expect("table");
            let mut tuple = vec![0u8; table.tuple_bytes as usize];
            ctx.read_local(n.base() + off, &mut tuple)?;
            let ver = u64_at(&tuple, VERSION as usize);
            vals.push((k, (ver, tuple[META_BYTES as usize..].to_vec())));
        }
        let refs: Vec<(u64, &Value)> = vals.iter().map(|(k, v)| (*k, v)).collect();
        for &a in actives.iter().filter(|&&a| a != n.me) {
            for mut m in wire::forward_msgs(id, &refs, max_msg(ctx)) {
                if n.bug == Some(SHORT_FORWARD) {
                    m.truncate(m.len() - 8);
                }
                e.out[FORWARD * n.nodes as usize + a as usize].msgs.push_back(m);
            }
        }
        let active = actives.contains(&n.me);
        if active {
            e.values.entry(id).or_default().extend(vals);
            e.txns.get_mut(&g).expect("ready").ready_at = ctx.now();
            e.executing.insert(g);
        }
        for &(k, write) in &keys {
            if !write {
                e.release(k, g);
            }
        }
        if !active {
            e.txns.remove(&g);
        }
    }
    Ok(())
}

/// Actives holding every record run the logic; returns what must be logged and applied.
fn execute(ctx: &Ctx, n: &NodeState) -> Result<Vec<Done>, TxnError> {
    let mut e = part(n).e.borrow_mut();
    let e = &mut *e;
    let mut done = Vec::new();
    let runnable: Vec<u64> = e
        .executing
        .iter()
        .copied()
        .filter(|g| {
            let t = &e.txns[g];
            e.values.get(&t.id).map_or(0, |v| v.len()) >= t.records
        })
        .collect();
    for g in runnable {
        e.executing.remove(&g);
        let t = &e.txns[&g];
        let vals = e.values.remove(&t.id).expect("values");
        check_values(n, &t.spec, &vals)?;
        let remote: u64 = vals.iter().filter(|(k, _)| home(n, **k) != n.me).map(|(_, v)| 24 + v.1.len() as u64).sum();
        if remote > 0 {
            // Waiting for the other participants' values (RCC Sec. 4.6, second communication).
            ops::account(ctx, n, Stage::CalvinForward, t.ready_at, 1, remote, 0);
        }
        let get = |k: &txbed_workloads::Key| &vals[&k.packed()];
        let reads: Vec<&[u8]> = t.spec.reads.iter().map(|k| get(k).1.as_slice()).collect();
        let olds: Vec<&[u8]> = t.spec.writes.iter().map(|k| get(k).1.as_slice()).collect();
        ctx.compute(t.spec.compute_ns);
        let outcome = n.workload.execute(&t.spec, &reads, &olds);
        let versions: Vec<u64> =
            t.spec.reads.iter().chain(&t.spec.writes).map(|k| split_version_word(get(k).0).1).collect();
        let (status, delta, writes) = match outcome {
            Executed::Commit { new_values, external_delta } => {
                let mut writes = Vec::new();
                for (k, v) in t.spec.writes.iter().zip(new_values) {
                    let key = k.packed();
                    if home(n, key) == n.me && !writes.iter().any(|w: &(u64, u64, u64, Vec<u8>)| w.0 == key) {
                        let (inc, ver) = split_version_word(get(k).0);
                        writes.push((key, e.offsets[&key], version_word(inc, ver + 1), v));
                    }
                }
                (COMMITTED, external_delta, writes)
            }
            // A wait (Sec. 4.4) only arises in chopped runs, which CALVIN refuses.
            Executed::UserAbort | Executed::Wait(_) => (USER_ABORT, 0, Vec::new()),
        };
        let reporter = if t.actives.contains(&t.origin) { t.origin } else { t.actives[0] };
        let result = (reporter == n.me).then(|| wire::encode_result(t.id, status, delta, &versions));
        done.push(Done { gseq: g, id: t.id, origin: t.origin, writes, result });
    }
    Ok(done)
}

/// Whether the values an active holds (some forwarded by peers) are every record of `spec`,
/// each as long as its table's records, before the workload reads them.
fn check_values(n: &NodeState, spec: &TxnSpec, vals: &BTreeMap<u64, Value>) -> Result<(), TxnError> {
    for k in spec.reads.iter().chain(&spec.writes) {
        let Some((_, rec)) = vals.get(&k.packed()) else {
            return Err(WireError::Invalid("CALVIN forwarded values lack a record of the transaction").into());
        };
        let table = n.catalog.layout.table(k.table).ok_or(TxnError::UnknownTable(k.table))?;
        if rec.len() as u64 != table.tuple_bytes - META_BYTES {
            return Err(WireError::Invalid("a CALVIN forwarded record's length is not its table's").into());
        }
    }
    Ok(())
}

/// LOG: this round's writes to the backups of this node's records, as one record (split
/// only if it would not fit a datagram), by RPC without waiting (LOG is not one of CALVIN's
/// stages; `reap` applies the round once every backup answered).
fn log(ctx: &Ctx, n: &NodeState, done: Vec<Done>) {
    let mut calls = Vec::new();
    let mut bytes = 0;
    if n.replication > 1 && n.bug != Some(txbed_txn::log::SKIP_LOG) {
        let backups: Vec<u16> = (1..n.replication).map(|k| (n.me + k) % n.nodes).collect();
        let mut records: Vec<Vec<u8>> = Vec::new();
        for d in &done {
            for (key, _, ver, value) in &d.writes {
                if records.last().is_none_or(|r| r.len() + 24 + value.len() > max_rpc(ctx)) {
                    records.push(LogRecord::start(d.id));
                }
                let k = wire::unpack(*key);
                let entry = LogEntry { table: k.table, key: k.row, version: split_version_word(*ver).1, value };
                entry.encode_into(records.last_mut().expect("record"));
            }
        }
        // Backups apply a log record to their replica whichever worker serves it: spare the
        // scheduler's worker 0 when there are others.
        let workers = ctx.workers();
        let mut e = part(n).e.borrow_mut();
        e.log_rounds += 1;
        let worker = if workers > 1 { 1 + (e.log_rounds % (workers as u64 - 1)) as u16 } else { 0 };
        drop(e);
        let mut st = n.stats.borrow_mut();
        for r in &records {
            for &b in &backups {
                calls.push(ctx.call(Endpoint { node: NodeId(b), worker }, H_LOG, r));
                bytes += r.len() as u64;
            }
            st.log_records += backups.len() as u64;
            st.log_bytes += (backups.len() * r.len()) as u64;
        }
    }
    part(n).e.borrow_mut().logging.push_back(Logging { calls, t0: ctx.now(), bytes, done });
}

/// Applies every round whose log every backup acknowledged, and forgets the replies nobody
/// needs. Returns whether a round was applied.
fn reap(ctx: &Ctx, n: &NodeState) -> Result<bool, TxnError> {
    let mut rounds = Vec::new();
    {
        let mut e = part(n).e.borrow_mut();
        e.inflight.retain(|&c| ctx.take_reply(c).is_none());
        for l in e.logging.iter_mut() {
            // A failed log call (a dead backup: the RPC layer retransmits through loss) is
            // dropped, unlike `log::append`'s: a sequenced transaction cannot abort, and no
            // scenario kills a backup yet.
            l.calls.retain(|&c| ctx.take_reply(c).is_none());
        }
        while e.logging.front().is_some_and(|l| l.calls.is_empty()) {
            rounds.push(e.logging.pop_front().expect("round"));
        }
    }
    let applied = !rounds.is_empty();
    for l in rounds {
        if l.bytes > 0 {
            ops::account(ctx, n, Stage::Log, l.t0, 1, l.bytes, 0);
        }
        apply(ctx, n, l.done)?;
    }
    Ok(applied)
}

/// Applies logged writes (version + 1, writer, record), releases the locks and reports.
fn apply(ctx: &Ctx, n: &NodeState, done: Vec<Done>) -> Result<(), TxnError> {
    let mut e = part(n).e.borrow_mut();
    for d in done {
        for (_, off, ver, value) in &d.writes {
            let at = n.base() + off;
            ctx.write_local(at + META_BYTES, value)?;
            ctx.store_local(at + VERSION, *ver)?;
            ctx.store_local(at + WRITER, d.id)?;
        }
        if ctx.tracing() && !d.writes.is_empty() {
            let args = [("gseq", d.gseq), ("id", d.id)];
            ctx.trace_slice_args("calvin commit", txbed_transport::trace::TXN, ctx.now(), ctx.now(), &args);
        }
        let t = e.txns.remove(&d.gseq).expect("done transaction");
        for &(k, write) in &t.keys {
            if write {
                e.release(k, d.gseq);
            }
        }
        if let Some(r) = d.result {
            if d.origin == n.me {
                if let Some(token) = e.waiting.remove(&d.id) {
                    ctx.send_deferred_reply(token, r);
                }
            } else {
                let c = ctx.call(worker0(d.origin), H_RESULT, &r);
                e.inflight.push(c);
            }
        }
    }
    drop(e);
    read_ready(ctx, n, &mut part(n).e.borrow_mut())
}

/// Sends every queued message: batched RPCs, or one-sided WRITEs, as each stage's bit says.
fn flush(ctx: &Ctx, n: &NodeState) -> Result<(), TxnError> {
    let mut e = part(n).e.borrow_mut();
    for ch in [INPUT, FORWARD] {
        let onesided = n.hybrid.onesided(stage_of(ch));
        for to in (0..n.nodes).filter(|&t| t != n.me) {
            let out = &mut e.out[ch * n.nodes as usize + to as usize];
            if onesided {
                chan::send(ctx, n, out, ch, to)?;
                continue;
            }
            let handler = if ch == INPUT { H_INPUT } else { H_FORWARD };
            let mut payloads = vec![Vec::new()];
            while let Some(m) = out.msgs.pop_front() {
                if payloads.last().is_some_and(|p| !p.is_empty() && p.len() + wire::framed_len(&m) > max_rpc(ctx)) {
                    payloads.push(Vec::new());
                }
                wire::frame(payloads.last_mut().expect("payload"), &m);
            }
            for p in payloads.iter().filter(|p| !p.is_empty()) {
                let c = ctx.call(worker0(to), handler, p);
                e.inflight.push(c);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(keys: &[(u64, bool)]) -> Local {
        let spec = TxnSpec { kind: "t", reads: vec![], writes: vec![], params: vec![], compute_ns: 0 };
        Local { id: 0, origin: 0, spec, keys: keys.to_vec(), missing: 0, actives: vec![], records: 0, ready_at: 0 }
    }

    fn ready(e: &mut Engine) -> Vec<u64> {
        e.ready.drain(..).collect()
    }

    /// Readers share a lock, a writer waits for every earlier request, and grants follow the
    /// queue order whatever order the holders release in.
    #[test]
    fn lock_queues_grant_in_order() {
        let (k1, k2) = (10, 20);
        let mut e = Engine::default();
        e.enqueue(1, txn(&[(k1, true)]), false);
        e.enqueue(2, txn(&[(k1, false)]), false);
        e.enqueue(3, txn(&[(k1, false)]), false);
        e.enqueue(4, txn(&[(k1, true), (k2, false)]), false);
        e.enqueue(5, txn(&[(k2, false)]), false);
        e.enqueue(6, txn(&[(k2, true)]), false);
        assert_eq!(ready(&mut e), vec![1, 5]);
        e.release(k1, 1);
        assert_eq!(ready(&mut e), vec![2, 3]);
        e.release(k1, 3);
        assert_eq!(ready(&mut e), Vec::<u64>::new());
        e.release(k1, 2);
        assert_eq!(ready(&mut e), vec![4]);
        e.release(k2, 4);
        e.release(k2, 5);
        assert_eq!(ready(&mut e), vec![6]);
        e.release(k1, 4);
        e.release(k2, 6);
        assert!(e.locks.is_empty());
        // The planted bug grants everything at once.
        let mut e = Engine::default();
        e.enqueue(1, txn(&[(k1, true)]), true);
        e.enqueue(2, txn(&[(k1, true)]), true);
        assert_eq!(ready(&mut e), vec![1, 2]);
    }
}
