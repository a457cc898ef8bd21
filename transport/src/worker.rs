//! The per-worker core: a small single-threaded coroutine executor, verb posting with send-queue
//! accounting, completion dispatch, timers and the RPC layer, all without I/O.
//!
//! Like quinn-proto under quinn, a backend drives it: it delivers inputs (`on_completion`,
//! `on_datagram`, `on_imm`), calls `run(now)` when the worker's CPU is free, and drains outputs
//! (`drain_doorbells`) and the next deadline (`poll_timeout`). The core never reads a clock; the
//! time it is given plus the CPU cost it charges is the only time coroutines see.
//!
//! Coroutines are `async` blocks. They never need a real `Waker`: every event they can wait on
//! (a completion, a reply, a timer) is routed here by id, so the executor marks the owning
//! coroutine ready itself. Wakers are no-ops, which keeps readiness deterministic.

use std::borrow::Cow;
use std::cell::{Ref, RefCell, RefMut};
use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::clock::{ClockReading, NodeClock};
use crate::membership::{NodeStatus, View};
use crate::memory::{HostMemory, MemError};
use crate::rpc::{self, CallId, Frame, FrameKind, Handled, HandlerCtx, HandlerFn, ReplyToken, RpcConfig, RpcError};
use crate::trace::{Recorder, TraceEvent};
use crate::verbs::*;

/// CPU costs a worker pays, in nanoseconds (picoseconds for per-byte costs). The simulator
/// charges them to advance the worker's clock; real backends set them to zero and let the
/// hardware take its time.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuCosts {
    /// Switching from one coroutine to another (DrTM+H Sec. 4.1: about 20 ns with Boost).
    pub coroutine_switch_ns: Nanos,
    /// Ringing a doorbell: one MMIO write to the NIC, paid once per post call.
    pub mmio_ns: Nanos,
    /// Building one work-queue entry, paid per work request.
    pub wqe_ns: Nanos,
    /// Polling one completion-queue entry.
    pub poll_cqe_ns: Nanos,
    /// Per received datagram beyond its CQE: re-posting the RECV buffer and the cache misses
    /// of reading a buffer the NIC just wrote.
    pub recv_ns: Nanos,
    /// Dispatching one received RPC frame to its handler (before the handler's own work).
    pub rpc_dispatch_ns: Nanos,
    /// Copying one byte between buffers, in picoseconds.
    pub copy_ps_per_byte: u64,
    /// One dependent memory access that misses the CPU caches: a handler probing the index
    /// bucket, then touching the tuple, pays two.
    pub memory_miss_ns: Nanos,
}

impl CpuCosts {
    pub fn zero() -> Self {
        CpuCosts {
            coroutine_switch_ns: 0,
            mmio_ns: 0,
            wqe_ns: 0,
            poll_cqe_ns: 0,
            recv_ns: 0,
            rpc_dispatch_ns: 0,
            copy_ps_per_byte: 0,
            memory_miss_ns: 0,
        }
    }
    pub fn copy_ns(&self, bytes: usize) -> Nanos {
        (bytes as u64 * self.copy_ps_per_byte).div_ceil(1000)
    }
}

/// Set-up facts a backend gives a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub me: Endpoint,
    pub nodes: u16,
    pub workers: u16,
    pub costs: CpuCosts,
    pub rpc: RpcConfig,
    /// Seed of the run; each coroutine's RNG stream is derived from it and its ids.
    pub seed: u64,
    /// Per-worker region of local registered memory carved into equal per-coroutine scratch
    /// buffers (READ targets, atomic results, WRITE sources).
    pub scratch: LocalBuf,
    pub scratch_per_coroutine: u32,
    /// How many times the node restarted (0 on real backends): RPC call ids of each
    /// incarnation are distinct, so a late reply to an old call never answers a new one.
    pub incarnation: u32,
}

/// Id bits: a work-request id carries its coroutine and its per-QP sequence number.
const CORO_SHIFT: u32 = 48;
const SEQ_MASK: u64 = (1 << CORO_SHIFT) - 1;
/// Coroutine id used for requests the core posts for itself (RPC datagrams).
const INTERNAL_CORO: u32 = 0xFFFF;

/// Host memory a worker keeps per QP (its state and its place in the RC index), for memory
/// estimates.
pub const QP_STATE_BYTES: u64 = (std::mem::size_of::<QpState>() + std::mem::size_of::<QpId>()) as u64;

struct QpState {
    info: QpInfo,
    /// Sequence number of the last request posted (1-based).
    posted: u64,
    /// Highest sequence number known complete (signaled completion or error).
    confirmed: u64,
    error: bool,
}

#[derive(Default)]
struct CoroState {
    /// Signaled verbs and RPC calls not yet complete.
    pending: u32,
    waiting: bool,
    /// First failed completion since the last `wait`.
    failed: Option<Completion>,
    failures: u32,
    /// Replies not yet taken. A coroutine has a few calls out at a time, so a small list is
    /// cheaper than a map (a `BTreeMap` reallocates its node every time it empties).
    replies: Vec<(CallId, Result<Vec<u8>, RpcError>)>,
    timer_fired: bool,
    rng: Option<ChaCha8Rng>,
    finished: bool,
    /// Times the executor resumed it (it waited, slept or yielded before each but the first).
    resumes: u64,
    /// Immediates routed to it (`verbs::imm::to_coroutine`), not yet taken.
    own_imms: VecDeque<u32>,
    /// It waits in `wait_own_imm`.
    waits_own_imm: bool,
}

impl CoroState {
    /// One signaled verb or RPC call of this coroutine is done.
    fn settle_one(&mut self) {
        assert!(self.pending > 0, "a completion or reply for a coroutine with nothing pending");
        self.pending -= 1;
    }

    fn insert_reply(&mut self, call: CallId, r: Result<Vec<u8>, RpcError>) {
        match self.replies.iter_mut().find(|(id, _)| *id == call) {
            Some(slot) => slot.1 = r,
            None => self.replies.push((call, r)),
        }
    }
}

/// A received datagram, or a completion, waiting for the worker's event loop.
enum Inbound {
    Completion(Completion),
    Datagram { src: Endpoint, bytes: Vec<u8> },
    Imm { src: NodeId, imm: u32 },
}

/// What [`WorkerCore::step`] reports besides the doorbells.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StepOutcome {
    /// CPU time used; the worker is busy until `now + used`.
    pub used: Nanos,
    pub has_work: bool,
    pub timeout: Option<Nanos>,
}

/// Counters a backend can report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub doorbells: u64,
    pub wrs_posted: u64,
    /// Work requests posted, by `Opcode as usize`.
    pub verbs: [u64; 7],
    pub completions_polled: u64,
    pub rpc_calls: u64,
    pub rpc_handled: u64,
    /// Calls of this worker's own handlers run in place (`Ctx::call_local`): no datagram.
    pub local_calls: u64,
    pub rpc_retransmits: u64,
    pub rpc_timeouts: u64,
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub coroutine_switches: u64,
    pub cpu_busy_ns: u64,
}

pub(crate) struct Shared {
    pub(crate) cfg: WorkerConfig,
    mem: Rc<dyn HostMemory>,
    /// Worker-local clock: the time `run` was given plus CPU charged since.
    now: Nanos,
    current: u32,
    ready: VecDeque<u32>,
    /// A coroutine whose HTM region's body has run and which waits for the world to reach
    /// the region's end (`Ctx::htm_region`): this step runs nothing after it, and the next
    /// step resumes it before anything else, so its XEND precedes every later action of this
    /// worker (a hardware thread runs its region to the end).
    region_waiter: Option<u32>,
    /// The backend's time when this step began: the rest of the world is there, while the
    /// worker's own clock (`now`) runs ahead by the CPU its coroutines charge.
    step_at: Nanos,
    coros: Vec<CoroState>,
    qps: Vec<QpState>,
    /// RC QPs grouped by peer node in one flat list (one allocation, cache friendly):
    /// node n's QPs are `rc_qps[rc_range[n].0..][..rc_range[n].1]`, in creation order.
    rc_qps: Vec<QpId>,
    rc_range: Vec<(u32, u32)>,
    ud_qp: Option<QpId>,
    outbox: Vec<Doorbell>,
    /// Emptied work-request lists the backend handed back, reused by the next posts.
    spare_wrs: Vec<Vec<WorkRequest>>,
    inbox: VecDeque<Inbound>,
    imms: VecDeque<(NodeId, u32)>,
    imm_waiters: Vec<u32>,
    timers: BTreeSet<(Nanos, u64, u32)>,
    timer_seq: u64,
    pub(crate) rpc: rpc::RpcState,
    /// Reused buffers: datagrams of one flush, and a handler's reply.
    dgram_buf: Vec<(Endpoint, Vec<u8>)>,
    reply_buf: Vec<u8>,
    handlers: Vec<Option<Rc<HandlerFn>>>,
    /// Local calls whose handler deferred its reply: (call, calling coroutine).
    local_deferred: Vec<(CallId, u32)>,
    /// Handler names for traces only.
    handler_names: Vec<Option<&'static str>>,
    pub(crate) stats: WorkerStats,
    /// Event recorder; `None` (the default) keeps every hook to one check.
    trace: Option<Box<Recorder>>,
    /// The membership as the backend last delivered it.
    view: View,
    /// The node's clock (`crate::clock`); `None`: ideal, the worker's own time with bound 0.
    clock: Option<Rc<NodeClock>>,
    /// The node's HTM regions (`crate::htm`), when the run models HTM.
    htm: Option<crate::htm::SharedHtm>,
}

impl Shared {
    fn charge(&mut self, ns: Nanos) {
        self.now += ns;
        self.stats.cpu_busy_ns += ns;
    }

    fn clock(&self) -> ClockReading {
        self.clock.as_ref().map_or(ClockReading::ideal(self.now), |c| c.read(self.now))
    }

    fn has_work(&self) -> bool {
        !self.inbox.is_empty() || !self.ready.is_empty()
    }

    fn handler_name(&self, id: u16) -> Cow<'static, str> {
        match self.handler_names.get(id as usize) {
            Some(Some(n)) => Cow::Borrowed(*n),
            _ => Cow::Owned(format!("rpc {id}")),
        }
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        let t = self.timers.first().map(|&(t, _, _)| t);
        match (t, self.rpc.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The RC QPs to `node` (empty for an unknown node).
    fn rc_slice(&self, node: NodeId) -> &[QpId] {
        match self.rc_range.get(node.0 as usize) {
            Some(&(start, len)) => &self.rc_qps[start as usize..(start + len) as usize],
            None => &[],
        }
    }

    fn wake(&mut self, coro: u32) {
        let c = &mut self.coros[coro as usize];
        if c.waiting && c.pending == 0 {
            c.waiting = false;
            self.ready.push_back(coro);
        }
    }

    fn post_from(&mut self, coro: u32, qp: QpId, ops: &mut dyn Iterator<Item = (Op, bool)>) -> Result<u32, PostError> {
        let Some(q) = self.qps.get_mut(qp.0 as usize) else {
            return Err(PostError::NoSuchQp(qp));
        };
        if q.error {
            return Err(PostError::QpInError { qp, peer: q.info.peer });
        }
        let mut wrs = self.spare_wrs.pop().unwrap_or_default();
        wrs.reserve(ops.size_hint().0.max(1));
        let mut signaled = 0u32;
        // Every post is refused beyond the send queue, and completions confirm only what
        // was posted.
        debug_assert!(q.confirmed <= q.posted && q.posted - q.confirmed <= q.info.max_outstanding as u64);
        let outstanding = (q.posted - q.confirmed) as u32;
        for (op, sig) in ops {
            if outstanding + wrs.len() as u32 + 1 > q.info.max_outstanding {
                return Err(PostError::SendQueueFull {
                    qp,
                    outstanding: outstanding + wrs.len() as u32,
                    max: q.info.max_outstanding,
                });
            }
            let seq = q.posted + wrs.len() as u64 + 1;
            signaled += sig as u32;
            self.stats.verbs[op.opcode() as usize] += 1;
            wrs.push(WorkRequest { wr_id: ((coro as u64) << CORO_SHIFT) | seq, op, signaled: sig });
        }
        if wrs.is_empty() {
            return Err(PostError::Empty);
        }
        let first_seq = q.posted + 1;
        q.posted += wrs.len() as u64;
        let n = wrs.len() as u64;
        let t0 = self.now;
        self.charge(self.cfg.costs.mmio_ns + n * self.cfg.costs.wqe_ns);
        self.stats.doorbells += 1;
        self.stats.wrs_posted += n;
        if coro != INTERNAL_CORO {
            self.coros[coro as usize].pending += signaled;
        }
        let at = self.now;
        if let Some(t) = self.trace.as_mut() {
            let info = self.qps[qp.0 as usize].info;
            let who = (coro != INTERNAL_CORO).then_some(coro);
            t.posted(who, info, first_seq, &wrs, t0, self.cfg.costs.wqe_ns, at);
        }
        self.outbox.push(Doorbell { qp, wrs, at });
        Ok(signaled)
    }

    fn handle_completion(&mut self, c: Completion) {
        let seq = c.wr_id & SEQ_MASK;
        if let Some(t) = self.trace.as_mut() {
            t.completed(self.now, seq, &c);
        }
        self.charge(self.cfg.costs.poll_cqe_ns);
        self.stats.completions_polled += 1;
        let coro = (c.wr_id >> CORO_SHIFT) as u32;
        if let Some(q) = self.qps.get_mut(c.qp.0 as usize) {
            assert!(seq >= 1 && seq <= q.posted, "completion of request {seq}, but {} were posted", q.posted);
            // RC completes in order: this completion confirms every earlier request (passive ACK).
            // The max: a request failing at post may complete before earlier ones in flight.
            q.confirmed = q.confirmed.max(seq);
            if !c.status.is_ok() && q.info.kind == QpType::Rc {
                q.error = true;
            }
        }
        if coro == INTERNAL_CORO {
            return;
        }
        let cs = &mut self.coros[coro as usize];
        if !c.status.is_ok() {
            cs.failures += 1;
            if cs.failed.is_none() {
                cs.failed = Some(c.clone());
            }
        }
        // Only signaled requests were counted as pending.
        if c.signaled {
            cs.settle_one();
            self.wake(coro);
        }
    }

    fn fire_timers(&mut self) {
        while let Some(&(at, seq, coro)) = self.timers.first() {
            if at > self.now {
                break;
            }
            self.timers.remove(&(at, seq, coro));
            if coro == INTERNAL_CORO {
                continue;
            }
            let c = &mut self.coros[coro as usize];
            c.timer_fired = true;
            c.waiting = false;
            self.ready.push_back(coro);
        }
    }

    fn handle_datagram(&mut self, src: Endpoint, bytes: Vec<u8>) {
        self.charge(self.cfg.costs.poll_cqe_ns + self.cfg.costs.recv_ns);
        self.stats.datagrams_received += 1;
        let mut off = 0;
        while let Some((frame, next)) = Frame::decode(&bytes, off) {
            off = next;
            if frame.fragment {
                self.charge(self.cfg.costs.copy_ns(frame.payload.len()));
                if let Some(whole) = self.rpc.reassemble(src, &frame) {
                    self.handle_frame(src, Frame { fragment: false, payload: &whole, ..frame });
                }
                continue;
            }
            self.handle_frame(src, frame);
        }
        self.rpc.recycle(bytes);
    }

    /// Serves a request or takes a reply.
    fn handle_frame(&mut self, src: Endpoint, frame: Frame<'_>) {
        let start = self.now;
        self.charge(self.cfg.costs.rpc_dispatch_ns + self.cfg.costs.copy_ns(frame.payload.len()));
        match frame.kind {
            FrameKind::Request | FrameKind::OneWay => self.serve(src, frame, start),
            FrameKind::Reply if frame.status == rpc::STATUS_PENDING => self.rpc.on_pending(frame.call_id),
            FrameKind::Reply => {
                let now = self.now;
                if let Some((coro, dst)) = self.rpc.on_reply(now, src, frame.call_id, frame.deferred) {
                    if let Some(t) = self.trace.as_mut() {
                        let why = frame.error(dst).map(|e| match e {
                            RpcError::ReplyTooLarge { .. } => "reply too large",
                            _ => "unknown handler",
                        });
                        t.call_done(start, frame.call_id, frame.payload.len(), why);
                    }
                    let result = match frame.error(dst) {
                        Some(e) => Err(e),
                        None => Ok(frame.payload.to_vec()),
                    };
                    let cs = &mut self.coros[coro as usize];
                    cs.insert_reply(frame.call_id, result);
                    cs.settle_one();
                    self.wake(coro);
                }
            }
        }
    }

    /// Serves a request whose dispatch started at `start` (for the trace).
    fn serve(&mut self, src: Endpoint, frame: Frame<'_>, start: Nanos) {
        let token = ReplyToken { to: src, call_id: frame.call_id };
        let wants_reply = frame.kind == FrameKind::Request;
        if wants_reply && self.rpc.duplicate(self.now, token) {
            return;
        }
        let Some(Some(h)) = self.handlers.get(frame.handler as usize).cloned() else {
            // Answer at once so the caller gets a clear error instead of a timeout.
            if wants_reply {
                self.rpc.queue_unknown(self.now, token, frame.handler);
            }
            return;
        };
        self.stats.rpc_handled += 1;
        let Served { outcome, reply, deferred, notices } = self.run_handler(&*h, src, token, frame.payload);
        if self.trace.is_some() {
            let name = self.handler_name(frame.handler);
            let end = self.now;
            let call = wants_reply.then_some(frame.call_id);
            if let Some(t) = self.trace.as_mut() {
                t.served(start, end, src, call, name);
            }
        }
        for (t, bytes) in deferred {
            self.send_reply(t, &bytes);
        }
        self.send_notices(notices);
        match outcome {
            Handled::Reply if wants_reply => {
                self.rpc.remember(self.now, token, Some(&reply));
                self.rpc.queue_reply(self.now, token, &reply, false)
            }
            Handled::Reply | Handled::NoReply => {}
            Handled::Defer => self.rpc.remember(self.now, token, None),
        }
        self.reply_buf = reply;
    }

    /// Runs handler `h` on a request from `src`, charging its CPU and its reply's copy.
    fn run_handler(&mut self, h: &HandlerFn, src: Endpoint, token: ReplyToken, payload: &[u8]) -> Served {
        let mut reply = std::mem::take(&mut self.reply_buf);
        reply.clear();
        let (mut cpu, mut deferred, mut notices, mut wakes) = (0, Vec::new(), Vec::new(), Vec::new());
        // A handler's accesses are this worker's CPU's: HTM regions see them (strong atomicity).
        let tracked =
            self.htm.clone().map(|htm| crate::htm::Tracked { mem: &*self.mem, htm, worker: self.cfg.me.worker });
        let mem: &dyn HostMemory = match &tracked {
            Some(t) => t,
            None => &*self.mem,
        };
        let outcome = {
            let mut hctx = HandlerCtx::new(
                self.cfg.me,
                src,
                self.now,
                mem,
                &mut reply,
                &mut cpu,
                &mut deferred,
                &mut notices,
                &mut wakes,
                token,
                &self.cfg.costs,
                self.clock.as_deref(),
            );
            h(&mut hctx, payload)
        };
        self.charge(cpu + self.cfg.costs.copy_ns(reply.len()));
        for coro in wakes {
            self.end_sleep(coro);
        }
        Served { outcome, reply, deferred, notices }
    }

    /// `HandlerCtx::wake`: a coroutine waiting on its timer has it fire now.
    fn end_sleep(&mut self, coro: u32) {
        let Some(&key) = self.timers.iter().find(|&&(_, _, c)| c == coro) else { return };
        self.timers.remove(&key);
        let Some(c) = self.coros.get_mut(coro as usize) else { return };
        c.timer_fired = true;
        c.waiting = false;
        self.ready.push_back(coro);
    }

    /// Handlers' one-way messages (`HandlerCtx::notify`), queued like a coroutine's
    /// `call_oneway`. One to this very worker runs its handler in place.
    fn send_notices(&mut self, notices: Vec<crate::rpc::Notice>) {
        for crate::rpc::Notice { dst, handler, payload } in notices {
            if dst == self.cfg.me {
                self.call_here(0, handler, &payload, false);
                continue;
            }
            self.stats.rpc_calls += 1;
            let now = self.now;
            let sent = self.rpc.call(now, 0, dst, handler, &payload, false, 0).is_ok();
            if sent && self.trace.is_some() {
                let name = self.handler_name(handler);
                if let Some(t) = self.trace.as_mut() {
                    t.notice(now, dst, name, payload.len());
                }
            }
        }
    }

    /// A deferred reply for a local call goes straight to its coroutine; returns whether
    /// `token` named one.
    fn deliver_local(&mut self, token: ReplyToken, payload: &[u8]) -> bool {
        if token.to != self.cfg.me {
            return false;
        }
        let Some(i) = self.local_deferred.iter().position(|&(id, _)| id == token.call_id) else { return false };
        let (id, coro) = self.local_deferred.swap_remove(i);
        let now = self.now;
        if let Some(t) = self.trace.as_mut() {
            t.call_done(now, id, payload.len(), None);
        }
        let cs = &mut self.coros[coro as usize];
        cs.insert_reply(id, Ok(payload.to_vec()));
        cs.settle_one();
        self.wake(coro);
        true
    }

    /// A handler's reply to an earlier, deferred request: to its local caller, or queued and
    /// remembered, so a retransmission of the call (its first reply may be lost) gets it
    /// again. Unremembered, the duplicate found the call still marked deferred and was
    /// dropped: the caller retried until it gave up (WAITDIE over lossy UD, issue 17).
    fn send_reply(&mut self, token: ReplyToken, payload: &[u8]) {
        if !self.deliver_local(token, payload) {
            let now = self.now;
            self.rpc.remember(now, token, Some(payload));
            self.rpc.queue_reply(now, token, payload, true);
        }
    }

    /// Runs this worker's `handler` on `payload` for coroutine `coro` at once, as a function
    /// call: no datagram, no NIC, no dispatch; the handler's CPU and its reply's copy are
    /// charged as when it serves a datagram. An immediate reply is ready for `take_reply`; a
    /// deferred one is delivered to the coroutine when the handler side sends it.
    fn call_here(&mut self, coro: u32, handler: u16, payload: &[u8], want_reply: bool) -> CallId {
        let id = self.rpc.next_id();
        let me = self.cfg.me;
        let start = self.now;
        self.stats.local_calls += 1;
        if self.trace.is_some() {
            let name = self.handler_name(handler);
            if let Some(t) = self.trace.as_mut() {
                t.call(start, coro, id, me, name, payload.len(), !want_reply);
                t.file_last(1, crate::trace::LOCAL);
            }
        }
        let Some(Some(h)) = self.handlers.get(handler as usize).cloned() else {
            if want_reply {
                self.coros[coro as usize].insert_reply(id, Err(RpcError::UnknownHandler { dst: me, handler }));
            }
            if let Some(t) = self.trace.as_mut() {
                t.call_done(start, id, 0, Some("unknown handler"));
            }
            return id;
        };
        let token = ReplyToken { to: me, call_id: id };
        let Served { outcome, reply, deferred, notices } = self.run_handler(&*h, me, token, payload);
        if self.trace.is_some() {
            let name = self.handler_name(handler);
            let end = self.now;
            if let Some(t) = self.trace.as_mut() {
                t.served(start, end, me, want_reply.then_some(id), name);
                t.file_last(1, crate::trace::LOCAL);
            }
        }
        for (t, bytes) in deferred {
            self.send_reply(t, &bytes);
        }
        self.send_notices(notices);
        match outcome {
            Handled::Reply if want_reply => {
                self.coros[coro as usize].insert_reply(id, Ok(reply.clone()));
                let end = self.now;
                if let Some(t) = self.trace.as_mut() {
                    t.call_done(end, id, reply.len(), None);
                }
            }
            Handled::Defer if want_reply => {
                self.coros[coro as usize].pending += 1;
                self.local_deferred.push((id, coro));
            }
            _ => {
                let end = self.now;
                if let Some(t) = self.trace.as_mut() {
                    t.call_done(end, id, 0, None);
                }
            }
        }
        self.reply_buf = reply;
        id
    }

    /// Packs queued RPC frames into datagrams and posts them as one doorbell on the UD QP.
    fn flush_rpc(&mut self) {
        let Some(ud) = self.ud_qp else { return };
        let now = self.now;
        let mut datagrams = std::mem::take(&mut self.dgram_buf);
        self.rpc.take_datagrams(now, &mut datagrams);
        if !datagrams.is_empty() {
            let q = &self.qps[ud.0 as usize];
            let room = q.info.max_outstanding - (q.posted - q.confirmed) as u32;
            if datagrams.len() as u32 > room {
                // The UD send queue is full: keep the excess for the next flush.
                self.rpc.requeue(datagrams.drain(room as usize..));
            }
            self.post_datagrams(ud, &mut datagrams);
        }
        self.dgram_buf = datagrams;
    }

    /// Posts (and drains) `datagrams`.
    fn post_datagrams(&mut self, ud: QpId, datagrams: &mut Vec<(Endpoint, Vec<u8>)>) {
        if datagrams.is_empty() {
            return;
        }
        let q = &self.qps[ud.0 as usize];
        let after = (q.posted - q.confirmed) as u32 + datagrams.len() as u32;
        // Selective signaling: only signal when the send queue is half full, so sends are
        // reaped in bulk (FaSST's trick).
        let signal_last = after * 2 >= q.info.max_outstanding;
        let n = datagrams.len();
        self.stats.datagrams_sent += n as u64;
        let mut sends = datagrams.drain(..).enumerate().map(|(i, (dest, bytes))| {
            (Op::Send { src: Payload::Inline(bytes), dest: Some(dest) }, signal_last && i + 1 == n)
        });
        if self.cfg.rpc.doorbell_batching {
            let _ = self.post_from(INTERNAL_CORO, ud, &mut sends);
        } else {
            for s in sends {
                let _ = self.post_from(INTERNAL_CORO, ud, &mut std::iter::once(s));
            }
        }
    }
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// One worker thread's coroutines and event loop, driven by a backend.
pub struct WorkerCore {
    shared: Rc<RefCell<Shared>>,
    tasks: Vec<Option<Task>>,
}

impl WorkerCore {
    pub fn new(cfg: WorkerConfig, mem: Rc<dyn HostMemory>) -> Self {
        let rpc = rpc::RpcState::with_first_call(cfg.rpc.clone(), ((cfg.incarnation as u64) << 40) | 1);
        let nodes = cfg.nodes as usize;
        let shared = Shared {
            cfg,
            mem,
            now: 0,
            current: 0,
            ready: VecDeque::new(),
            region_waiter: None,
            step_at: 0,
            coros: Vec::new(),
            qps: Vec::new(),
            rc_qps: Vec::new(),
            rc_range: vec![(0, 0); nodes],
            ud_qp: None,
            outbox: Vec::new(),
            spare_wrs: Vec::new(),
            inbox: VecDeque::new(),
            imms: VecDeque::new(),
            imm_waiters: Vec::new(),
            timers: BTreeSet::new(),
            timer_seq: 0,
            rpc,
            dgram_buf: Vec::new(),
            reply_buf: Vec::new(),
            handlers: Vec::new(),
            local_deferred: Vec::new(),
            handler_names: Vec::new(),
            stats: WorkerStats::default(),
            trace: None,
            view: View::all_up(nodes as u16),
            clock: None,
            htm: None,
        };
        WorkerCore { shared: Rc::new(RefCell::new(shared)), tasks: Vec::new() }
    }

    pub fn me(&self) -> Endpoint {
        self.shared.borrow().cfg.me
    }

    /// Registers a QP created by the backend. RC QPs are grouped by peer node.
    pub fn add_qp(&mut self, kind: QpType, peer: NodeId, max_outstanding: u32) -> QpId {
        let mut s = self.shared.borrow_mut();
        let id = QpId(s.qps.len() as u32);
        s.qps.push(QpState { info: QpInfo { id, kind, peer, max_outstanding }, posted: 0, confirmed: 0, error: false });
        match kind {
            QpType::Rc => {
                let n = peer.0 as usize;
                let (start, len) = s.rc_range[n];
                s.rc_qps.insert((start + len) as usize, id);
                s.rc_range[n].1 += 1;
                for r in &mut s.rc_range[n + 1..] {
                    r.0 += 1;
                }
            }
            QpType::Ud => s.ud_qp = Some(id),
        }
        id
    }

    pub fn qp_info(&self, qp: QpId) -> Option<QpInfo> {
        self.shared.borrow().qps.get(qp.0 as usize).map(|q| q.info)
    }

    /// Replaces RC QP `old` (its connection broke: the peer restarted, or the QP went into
    /// the error state) by a new one the backend connected to the same peer; returns the
    /// new id, which `Ctx::rc_qp` hands out from now on. `old` stays known, so its late
    /// completions are still taken (as flushed requests of a dead connection).
    pub fn replace_qp(&mut self, old: QpId) -> Option<QpId> {
        let mut s = self.shared.borrow_mut();
        let info = s.qps.get(old.0 as usize)?.info;
        if info.kind != QpType::Rc {
            return None;
        }
        let id = QpId(s.qps.len() as u32);
        s.qps.push(QpState { info: QpInfo { id, ..info }, posted: 0, confirmed: 0, error: false });
        let slot = s.rc_qps.iter().position(|&q| q == old)?;
        s.rc_qps[slot] = id;
        Some(id)
    }

    /// A new membership view. An open HTM region of this worker aborts (cause system). Calls
    /// to nodes it declares down fail now with `RpcError::PeerDown` (their coroutines become
    /// ready: `has_work`), and what this worker's RPC layer kept of those nodes is forgotten.
    pub fn set_view(&mut self, view: &View) {
        let mut s = self.shared.borrow_mut();
        if s.view.epoch != view.epoch {
            // The notification interrupts this worker's core: an open HTM region aborts (a
            // transaction that began under the old view cannot reach XEND in the new one).
            let worker = s.cfg.me.worker;
            if let Some(h) = s.htm.as_ref() {
                h.borrow_mut().system_abort(worker);
            }
        }
        let newly_down: Vec<u16> = (0..view.status.len() as u16)
            .filter(|&n| view.of(n) == NodeStatus::Down && s.view.of(n) != NodeStatus::Down)
            .collect();
        s.view = view.clone();
        for n in newly_down {
            // What its dead incarnation sent and this worker has not served yet is dropped,
            // as the NIC would once its connections are torn down.
            s.inbox.retain(|ev| !matches!(ev, Inbound::Datagram { src, .. } if src.node.0 == n));
            let now = s.now;
            for (coro, call_id, err) in s.rpc.peer_down(n) {
                s.stats.rpc_timeouts += 1;
                if let Some(t) = s.trace.as_mut() {
                    t.call_done(now, call_id, 0, Some("peer down"));
                }
                let cs = &mut s.coros[coro as usize];
                cs.insert_reply(call_id, Err(err));
                cs.settle_one();
                s.wake(coro);
            }
        }
    }

    /// The membership view this worker has.
    pub fn view(&self) -> View {
        self.shared.borrow().view.clone()
    }

    /// Registers an RPC handler under `id` on this worker; an id is registered once.
    pub fn register_handler(&mut self, id: u16, h: Rc<HandlerFn>) {
        let mut s = self.shared.borrow_mut();
        if s.handlers.len() <= id as usize {
            s.handlers.resize(id as usize + 1, None);
        }
        assert!(s.handlers[id as usize].is_none(), "RPC handler {id} registered twice on one worker");
        s.handlers[id as usize] = Some(h);
    }

    /// Names handler `id` in traces (otherwise "rpc ID").
    pub fn name_handler(&mut self, id: u16, name: &'static str) {
        let mut s = self.shared.borrow_mut();
        if s.handler_names.len() <= id as usize {
            s.handler_names.resize(id as usize + 1, None);
        }
        s.handler_names[id as usize] = Some(name);
    }

    /// Starts recording trace events (`crate::trace`). Recording never changes what the
    /// worker does or when.
    pub fn enable_trace(&mut self) {
        let mut s = self.shared.borrow_mut();
        if s.trace.is_none() {
            let me = s.cfg.me;
            s.trace = Some(Box::new(Recorder::new(me)));
        }
    }

    /// Gives this worker its node's clock (`crate::clock`); until then `Ctx::clock` is ideal
    /// (the worker's own time, bound 0). The backend supplies it: the core reads no clock.
    pub fn set_clock(&mut self, clock: Rc<NodeClock>) {
        self.shared.borrow_mut().clock = Some(clock);
    }

    /// The node's HTM (shared by its workers and, in the simulator, its NIC): this worker's
    /// CPU accesses are shown to it and `Ctx::htm_region` runs regions in it.
    pub fn set_htm(&mut self, htm: crate::htm::SharedHtm) {
        self.shared.borrow_mut().htm = Some(htm);
    }

    /// Whether trace events are being recorded.
    pub fn tracing(&self) -> bool {
        self.shared.borrow().trace.is_some()
    }

    /// Takes the events recorded so far (empty when tracing is off); recording continues.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        self.shared.borrow_mut().trace.as_mut().map(|t| t.take()).unwrap_or_default()
    }

    /// Starts a coroutine. It first runs at the next `run`.
    pub fn spawn<F, Fut>(&mut self, f: F) -> u32
    where
        F: FnOnce(Ctx) -> Fut,
        Fut: Future<Output = ()> + 'static,
    {
        let id = {
            let mut s = self.shared.borrow_mut();
            let id = s.coros.len() as u32;
            assert!(id < INTERNAL_CORO, "too many coroutines on one worker");
            let me = s.cfg.me;
            let mut rng = ChaCha8Rng::seed_from_u64(s.cfg.seed);
            rng.set_stream(((me.node.0 as u64) << 40) | ((me.worker as u64) << 20) | id as u64);
            s.coros.push(CoroState { rng: Some(rng), ..Default::default() });
            s.ready.push_back(id);
            id
        };
        let ctx = Ctx { shared: self.shared.clone(), coro: id };
        self.tasks.push(Some(Box::pin(f(ctx))));
        id
    }

    /// A completion polled from this worker's CQ. Signaled completions and error completions
    /// (signaled or not) come here.
    pub fn on_completion(&mut self, c: Completion) {
        self.shared.borrow_mut().inbox.push_back(Inbound::Completion(c));
    }

    /// A UD datagram received for this worker.
    pub fn on_datagram(&mut self, src: Endpoint, bytes: Vec<u8>) {
        self.shared.borrow_mut().inbox.push_back(Inbound::Datagram { src, bytes });
    }

    /// The receive completion of a WRITE_WITH_IMM that targeted this worker.
    pub fn on_imm(&mut self, src: NodeId, imm: u32) {
        self.shared.borrow_mut().inbox.push_back(Inbound::Imm { src, imm });
    }

    /// Runs one event-loop iteration starting at `now`: polls the inbox, fires timers, runs
    /// every coroutine that was ready, and flushes batched RPC sends. Returns the CPU time it
    /// used; the worker is busy until `now + used`.
    pub fn run(&mut self, now: Nanos) -> Nanos {
        self.run_locked(now).0
    }

    /// `run`, then what a backend does right after it, under the same borrow: moves posted
    /// doorbells to `out`, takes back (up to their number) emptied work-request lists from
    /// `spare` for later posts, and reports `has_work` and `poll_timeout`.
    pub fn step(&mut self, now: Nanos, out: &mut Vec<Doorbell>, spare: &mut Vec<Vec<WorkRequest>>) -> StepOutcome {
        let (used, mut s) = self.run_locked(now);
        for _ in 0..s.outbox.len() {
            let Some(v) = spare.pop() else { break };
            debug_assert!(v.is_empty());
            s.spare_wrs.push(v);
        }
        out.append(&mut s.outbox);
        StepOutcome { used, has_work: s.has_work(), timeout: s.poll_timeout() }
    }

    fn run_locked(&mut self, now: Nanos) -> (Nanos, RefMut<'_, Shared>) {
        let start;
        let to_run;
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        {
            let mut s = self.shared.borrow_mut();
            // A real backend's clock may lag the worker's (CPU charged since its last call):
            // the worker's clock never goes back. The simulator never passes an earlier time.
            s.now = s.now.max(now);
            s.step_at = now;
            start = s.now;
            // An HTM region reaching its end goes first: before handlers and completions.
            if let Some(c) = s.region_waiter.take() {
                if let Some(pos) = s.ready.iter().position(|&x| x == c) {
                    s.ready.remove(pos);
                }
                s.current = c;
                drop(s);
                let task = self.tasks[c as usize].as_mut().expect("a region's coroutine is alive");
                if task.as_mut().poll(&mut cx).is_ready() {
                    self.tasks[c as usize] = None;
                    self.shared.borrow_mut().coros[c as usize].finished = true;
                }
                s = self.shared.borrow_mut();
                if s.region_waiter.is_some() {
                    s.flush_rpc();
                    return (s.now - start, s);
                }
            }
            while let Some(ev) = s.inbox.pop_front() {
                match ev {
                    Inbound::Completion(c) => s.handle_completion(c),
                    Inbound::Datagram { src, bytes } => s.handle_datagram(src, bytes),
                    Inbound::Imm { src, imm } => {
                        let cost = s.cfg.costs.poll_cqe_ns;
                        s.charge(cost);
                        if let Some(c) = crate::verbs::imm::coroutine(imm).filter(|&c| (c as usize) < s.coros.len()) {
                            let cs = &mut s.coros[c as usize];
                            cs.own_imms.push_back(imm);
                            if cs.waits_own_imm {
                                cs.waits_own_imm = false;
                                cs.waiting = false;
                                s.ready.push_back(c);
                            }
                            continue;
                        }
                        s.imms.push_back((src, imm));
                        for w in std::mem::take(&mut s.imm_waiters) {
                            s.coros[w as usize].waiting = false;
                            s.ready.push_back(w);
                        }
                    }
                }
            }
            s.fire_timers();
            let now = s.now;
            let expired = s.rpc.expire(now);
            s.stats.rpc_retransmits = s.rpc.retransmits;
            for (coro, call_id, err) in expired {
                s.stats.rpc_timeouts += 1;
                if let Some(t) = s.trace.as_mut() {
                    t.call_done(now, call_id, 0, Some("timeout"));
                }
                let cs = &mut s.coros[coro as usize];
                cs.insert_reply(call_id, Err(err));
                cs.settle_one();
                s.wake(coro);
            }
            to_run = s.ready.len();
        }
        for _ in 0..to_run {
            let id = {
                let mut s = self.shared.borrow_mut();
                let Some(id) = s.ready.pop_front() else { break };
                if s.coros[id as usize].finished {
                    continue;
                }
                let cost = s.cfg.costs.coroutine_switch_ns;
                s.charge(cost);
                s.stats.coroutine_switches += 1;
                s.coros[id as usize].resumes += 1;
                s.current = id;
                id
            };
            let task = self.tasks[id as usize].as_mut().expect("finished coroutine was scheduled");
            if task.as_mut().poll(&mut cx).is_ready() {
                self.tasks[id as usize] = None;
                self.shared.borrow_mut().coros[id as usize].finished = true;
            }
            if self.shared.borrow().region_waiter.is_some() {
                break;
            }
        }
        let mut s = self.shared.borrow_mut();
        s.flush_rpc();
        (s.now - start, s)
    }

    /// Moves posted doorbells out, in posting order.
    pub fn drain_doorbells(&mut self, out: &mut Vec<Doorbell>) {
        out.append(&mut self.shared.borrow_mut().outbox);
    }

    /// Whether `run` has work right now (inbox or ready coroutines).
    pub fn has_work(&self) -> bool {
        self.shared.borrow().has_work()
    }

    /// The earliest deadline (coroutine timer, RPC retransmission, reply-piggyback flush).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.shared.borrow().poll_timeout()
    }

    /// Whether every coroutine has returned.
    pub fn all_finished(&self) -> bool {
        self.tasks.iter().all(|t| t.is_none())
    }

    /// What each unfinished coroutine waits for (signaled requests and calls pending, a
    /// timer), and the QPs with requests outstanding: for a report of stuck coroutines.
    pub fn waiting(&self) -> String {
        let s = self.shared.borrow();
        let mut out = Vec::new();
        for (i, t) in self.tasks.iter().enumerate() {
            if t.is_none() {
                continue;
            }
            let c = &s.coros[i];
            let timer = s.timers.iter().find(|&&(_, _, co)| co == i as u32).map(|&(at, _, _)| at);
            out.push(format!(
                "coroutine {i}: {} pending{}{}",
                c.pending,
                if c.waiting { ", waiting" } else { "" },
                timer.map(|t| format!(", timer at {t} ns")).unwrap_or_default()
            ));
        }
        for q in s.qps.iter().filter(|q| q.posted > q.confirmed) {
            out.push(format!(
                "QP {} to node {}: {} outstanding{}",
                q.info.id.0,
                q.info.peer.0,
                q.posted - q.confirmed,
                if q.error { " (error)" } else { "" }
            ));
        }
        out.join("; ")
    }

    pub fn stats(&self) -> WorkerStats {
        self.shared.borrow().stats.clone()
    }

    /// The worker-local clock.
    pub fn now(&self) -> Nanos {
        self.shared.borrow().now
    }

    /// The RTO a new call to `dst` would get, and the measured (SRTT, RTTVAR) behind it.
    pub fn rpc_rto(&self, dst: Endpoint) -> (Nanos, Option<(Nanos, Nanos)>) {
        let s = self.shared.borrow();
        (s.rpc.rto(dst), s.rpc.rtt_estimate(dst).map(|e| (e.srtt, e.rttvar)))
    }
}

/// What a coroutine holds: its view of the transport, clock, timers and RNG.
#[derive(Clone)]
pub struct Ctx {
    shared: Rc<RefCell<Shared>>,
    coro: u32,
}

impl Ctx {
    pub fn me(&self) -> Endpoint {
        self.shared.borrow().cfg.me
    }
    pub fn coroutine(&self) -> u32 {
        self.coro
    }
    pub fn nodes(&self) -> u16 {
        self.shared.borrow().cfg.nodes
    }
    pub fn workers(&self) -> u16 {
        self.shared.borrow().cfg.workers
    }
    /// The worker-local clock (includes CPU time charged so far in this step).
    pub fn now(&self) -> Nanos {
        self.shared.borrow().now
    }
    /// The synchronized clock: the node's estimate of the reference time and its error bound
    /// (`crate::clock`; docs/clocks.md says what DrTM's DELTA should be). Ideal (this worker's
    /// time, bound 0) when the backend set no clock.
    pub fn clock(&self) -> ClockReading {
        self.shared.borrow().clock()
    }
    /// The node's raw physical clock (may drift and be stepped; no bound): for measurements,
    /// not for leases. Without a clock set, this worker's time.
    pub fn local_clock_ns(&self) -> i64 {
        let s = self.shared.borrow();
        s.clock.as_ref().map_or(s.now as i64, |c| c.local_ns(s.now))
    }
    /// Uses this coroutine's seeded RNG stream. The closure form keeps the borrow from
    /// outliving the call (a held borrow would make any other `Ctx` call panic).
    pub fn with_rng<T>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> T) -> T {
        let mut s = self.shared.borrow_mut();
        f(s.coros[self.coro as usize].rng.as_mut().expect("rng"))
    }
    /// Spends CPU time (application compute, e.g. YCSB's per-transaction work).
    pub fn compute(&self, ns: Nanos) {
        self.shared.borrow_mut().charge(ns);
    }
    pub fn costs(&self) -> Ref<'_, CpuCosts> {
        Ref::map(self.shared.borrow(), |s| &s.cfg.costs)
    }

    /// Whether this worker records a trace: check it before building a name that allocates.
    pub fn tracing(&self) -> bool {
        self.shared.borrow().trace.is_some()
    }
    /// Records a slice on this coroutine's track (a protocol stage, a transaction); a no-op
    /// unless tracing. Costs nothing in simulated time.
    pub fn trace_slice(
        &self,
        name: impl Into<Cow<'static, str>>,
        category: &'static str,
        start_ns: Nanos,
        end_ns: Nanos,
    ) {
        self.trace_slice_args(name, category, start_ns, end_ns, &[]);
    }
    /// [`Ctx::trace_slice`] with numeric arguments shown in the trace viewer.
    pub fn trace_slice_args(
        &self,
        name: impl Into<Cow<'static, str>>,
        category: &'static str,
        start_ns: Nanos,
        end_ns: Nanos,
        args: &[(&'static str, u64)],
    ) {
        if let Some(t) = self.shared.borrow_mut().trace.as_mut() {
            t.slice(self.coro, name.into(), category, start_ns, end_ns, args);
        }
    }

    /// `node`'s status in this worker's membership view.
    pub fn node_status(&self, node: u16) -> NodeStatus {
        self.shared.borrow().view.of(node)
    }
    /// The epoch of this worker's membership view (0 until something changes).
    pub fn view_epoch(&self) -> u64 {
        self.shared.borrow().view.epoch
    }

    /// The RC QPs this worker has to `node` (one per emulated connection).
    pub fn rc_qps(&self, node: NodeId) -> Vec<QpId> {
        self.shared.borrow().rc_slice(node).to_vec()
    }
    /// How many RC QPs this worker has to `node`.
    pub fn rc_qp_count(&self, node: NodeId) -> usize {
        self.shared.borrow().rc_slice(node).len()
    }
    /// The `k`-th RC QP to `node` (k taken modulo the count).
    pub fn rc_qp(&self, node: NodeId, k: usize) -> Option<QpId> {
        let s = self.shared.borrow();
        let v = s.rc_slice(node);
        (!v.is_empty()).then(|| v[k % v.len()])
    }
    pub fn qp_info(&self, qp: QpId) -> Option<QpInfo> {
        self.shared.borrow().qps.get(qp.0 as usize).map(|q| q.info)
    }
    /// Requests posted on `qp` and not yet confirmed by a completion.
    pub fn outstanding(&self, qp: QpId) -> u32 {
        let s = self.shared.borrow();
        s.qps.get(qp.0 as usize).map(|q| (q.posted - q.confirmed) as u32).unwrap_or(0)
    }

    /// This coroutine's scratch buffer in local registered memory.
    pub fn scratch(&self) -> LocalBuf {
        let s = self.shared.borrow();
        let per = s.cfg.scratch_per_coroutine;
        let off = self.coro as u64 * per as u64;
        assert!(off + per as u64 <= s.cfg.scratch.len as u64, "scratch memory exhausted: too many coroutines");
        LocalBuf { lkey: s.cfg.scratch.lkey, addr: s.cfg.scratch.addr + off, len: per }
    }

    /// Posts `ops` (verb, signaled) on `qp` with one doorbell. Charges one MMIO plus a WQE
    /// cost per request.
    pub fn post(&self, qp: QpId, ops: impl IntoIterator<Item = (Op, bool)>) -> Result<(), PostError> {
        let mut it = ops.into_iter();
        self.shared.borrow_mut().post_from(self.coro, qp, &mut it).map(|_| ())
    }

    /// Waits until every signaled request and RPC call this coroutine issued has completed.
    /// Returns the first failed completion since the last wait, if any.
    pub fn wait(&self) -> Wait {
        Wait { ctx: self.clone(), parked: false }
    }

    /// Issues an RPC to `dst`'s handler; it is sent with the worker's next batch. The reply
    /// is collected with [`Ctx::take_reply`] after [`Ctx::wait`].
    pub fn call(&self, dst: Endpoint, handler: u16, payload: &[u8]) -> CallId {
        self.call_patient(dst, handler, payload, 0)
    }

    /// [`Ctx::call`] to a handler that defers its reply on purpose for up to `patience` ns
    /// (at most `RpcConfig::max_patience_ns`): each attempt waits that much longer before it
    /// is retransmitted or given up.
    pub fn call_patient(&self, dst: Endpoint, handler: u16, payload: &[u8], patience: Nanos) -> CallId {
        let mut s = self.shared.borrow_mut();
        s.stats.rpc_calls += 1;
        let now = s.now;
        let cost = s.cfg.costs.copy_ns(payload.len());
        s.charge(cost);
        let r = if s.view.is_down(dst.node.0) {
            Err((s.rpc.next_id(), RpcError::PeerDown { dst, handler }))
        } else {
            s.rpc.call(now, self.coro, dst, handler, payload, true, patience)
        };
        if s.trace.is_some() {
            let name = s.handler_name(handler);
            if let Some(t) = s.trace.as_mut() {
                let id = match &r {
                    Ok(id) | Err((id, _)) => *id,
                };
                t.call(now, self.coro, id, dst, name, payload.len(), false);
                if let Err((_, e)) = &r {
                    t.call_done(
                        now,
                        id,
                        0,
                        Some(if matches!(e, RpcError::PeerDown { .. }) { "peer down" } else { "too large" }),
                    );
                }
            }
        }
        match r {
            Ok(id) => {
                s.coros[self.coro as usize].pending += 1;
                id
            }
            Err((id, e)) => {
                s.coros[self.coro as usize].insert_reply(id, Err(e));
                id
            }
        }
    }

    /// A one-way RPC: the handler runs but no reply is sent or awaited (e.g. lazy log
    /// reclamation, DrTM+H Sec. 5.4).
    pub fn call_oneway(&self, dst: Endpoint, handler: u16, payload: &[u8]) {
        let mut s = self.shared.borrow_mut();
        if s.view.is_down(dst.node.0) {
            return;
        }
        s.stats.rpc_calls += 1;
        let now = s.now;
        let r = s.rpc.call(now, self.coro, dst, handler, payload, false, 0);
        if s.trace.is_some() {
            let name = s.handler_name(handler);
            if let (Some(t), Ok(id)) = (s.trace.as_mut(), r) {
                t.call(now, self.coro, id, dst, name, payload.len(), true);
            }
        }
    }

    /// Calls `handler` of this very worker in place: the local path of an RPC whose
    /// participant is the caller's own worker (no datagram, no NIC). The handler runs now, on
    /// this coroutine's CPU time; the reply is taken with [`Ctx::take_reply`] as for
    /// [`Ctx::call`] (after [`Ctx::wait`] if the handler deferred it). The caller must hold no
    /// borrow of state the handler uses.
    pub fn call_local(&self, handler: u16, payload: &[u8]) -> CallId {
        self.shared.borrow_mut().call_here(self.coro, handler, payload, true)
    }

    /// [`Ctx::call_local`] without a reply (the local form of [`Ctx::call_oneway`]).
    pub fn call_local_oneway(&self, handler: u16, payload: &[u8]) {
        self.shared.borrow_mut().call_here(self.coro, handler, payload, false);
    }

    /// How many times the executor has resumed this coroutine: unchanged across a stretch of
    /// code means it ran without waiting, sleeping or yielding.
    pub fn resumes(&self) -> u64 {
        self.shared.borrow().coros[self.coro as usize].resumes
    }

    /// Takes the reply to `call` (after `wait`). `None` if it has not arrived.
    pub fn take_reply(&self, call: CallId) -> Option<Result<Vec<u8>, RpcError>> {
        let mut s = self.shared.borrow_mut();
        let replies = &mut s.coros[self.coro as usize].replies;
        let i = replies.iter().position(|(id, _)| *id == call)?;
        Some(replies.swap_remove(i).1)
    }

    /// The first error among the replies this coroutine has not taken (a call that got no
    /// answer), if any: for callers that `clear_replies` without taking them one by one.
    pub fn failed_reply(&self) -> Option<RpcError> {
        let s = self.shared.borrow();
        s.coros[self.coro as usize].replies.iter().find_map(|(_, r)| r.as_ref().err().cloned())
    }

    /// Drops replies this coroutine did not take (one-way use of `call`).
    pub fn clear_replies(&self) {
        self.shared.borrow_mut().coros[self.coro as usize].replies.clear();
    }

    /// The largest RPC request or reply payload (the UD MTU less the frame header); larger
    /// messages must be split by the caller.
    pub fn max_rpc_payload(&self) -> usize {
        self.shared.borrow().rpc.max_payload()
    }

    /// Calls and waits for the reply.
    pub async fn rpc(&self, dst: Endpoint, handler: u16, payload: &[u8]) -> Result<Vec<u8>, RpcError> {
        self.rpc_patient(dst, handler, payload, 0).await
    }

    /// [`Ctx::rpc`] to a handler that defers its reply on purpose for up to `patience` ns.
    pub async fn rpc_patient(
        &self,
        dst: Endpoint,
        handler: u16,
        payload: &[u8],
        patience: Nanos,
    ) -> Result<Vec<u8>, RpcError> {
        let id = self.call_patient(dst, handler, payload, patience);
        let _ = self.wait().await;
        self.take_reply(id).unwrap_or(Err(RpcError::Lost))
    }

    /// Sends a reply that a handler deferred.
    pub fn send_deferred_reply(&self, token: ReplyToken, payload: Vec<u8>) {
        let mut s = self.shared.borrow_mut();
        if s.deliver_local(token, &payload) {
            return;
        }
        let now = s.now;
        s.rpc.remember(now, token, Some(&payload));
        s.rpc.queue_reply(now, token, &payload, true);
    }

    /// Sleeps for `ns` of this worker's time.
    pub fn sleep(&self, ns: Nanos) -> Sleep {
        Sleep { ctx: self.clone(), ns, armed: false }
    }

    /// Waits, if this worker's clock has run ahead of the rest of the world within the current
    /// step (coroutines before this one charged CPU), until the world catches up: what this
    /// coroutine reads next is the state at its own time. A transaction that must be ordered
    /// by real time against others (strict serializability) starts with it.
    pub async fn catch_up(&self) {
        let ahead = {
            let s = self.shared.borrow();
            s.now > s.step_at
        };
        if ahead {
            self.sleep(0).await;
        }
    }

    /// The backend's time at the start of the current step: the instant whose state of the
    /// world (memory, peers) this coroutine sees; the worker's own clock (`now`) may be ahead
    /// of it by CPU charged within the step. A history's start time that must order the
    /// transaction by real time against others' ends is this one.
    pub fn world_now(&self) -> Nanos {
        self.shared.borrow().step_at
    }

    /// Lets the other ready coroutines run before continuing.
    pub fn yield_now(&self) -> YieldNow {
        YieldNow { ctx: self.clone(), yielded: false }
    }

    /// Takes the next received WRITE_WITH_IMM notification, if any.
    pub fn poll_imm(&self) -> Option<(NodeId, u32)> {
        self.shared.borrow_mut().imms.pop_front()
    }

    /// Waits until a WRITE_WITH_IMM notification is available.
    pub fn wait_imm(&self) -> WaitImm {
        WaitImm { ctx: self.clone() }
    }

    /// Waits until a WRITE_WITH_IMM notification is available (`Some`) or the worker's clock
    /// reaches `deadline` (`None`): a server that polls its mailbox and has timeouts to keep.
    pub fn wait_imm_until(&self, deadline: Nanos) -> WaitImmUntil {
        WaitImmUntil { ctx: self.clone(), deadline, timer: None }
    }

    /// Takes the next immediate routed to this coroutine (`verbs::imm::to_coroutine`), if any.
    pub fn poll_own_imm(&self) -> Option<u32> {
        let coro = self.coro;
        self.shared.borrow_mut().coros[coro as usize].own_imms.pop_front()
    }

    /// Waits for the next immediate routed to this coroutine.
    pub fn wait_own_imm(&self) -> WaitOwnImm {
        WaitOwnImm { ctx: self.clone() }
    }

    // --- local memory (this node's registered memory, through the same rules as the NIC) ---

    /// Runs `f` on this node's registered memory as its CPU sees it (a server walking its own
    /// index); charges nothing: the caller charges what `f` costs (`memory_misses`).
    pub fn with_memory<R>(&self, f: impl FnOnce(&dyn HostMemory) -> R) -> R {
        let mem = self.shared.borrow().mem.clone();
        f(&*mem)
    }

    /// Charges `misses` dependent cache-missing memory accesses, as `HandlerCtx::memory_misses`.
    pub fn memory_misses(&self, misses: u64) {
        let c = self.costs().memory_miss_ns * misses;
        self.compute(c);
    }

    /// Shows a CPU access of this worker outside any region to the node's HTM (strong
    /// atomicity: it aborts the regions whose lines it conflicts with).
    fn htm_sees(&self, addr: u64, len: u64, write: bool) {
        let h = self.shared.borrow().htm.clone();
        if let Some(h) = h {
            h.borrow_mut().access(crate::htm::Accessor::Worker(self.me().worker), addr, len, write);
        }
    }

    pub fn read_local(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.htm_sees(addr, out.len() as u64, false);
        let s = self.shared.borrow();
        let r = s.mem.read(addr, out);
        drop(s);
        let c = self.costs().copy_ns(out.len());
        self.compute(c);
        r
    }
    pub fn write_local(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.htm_sees(addr, data.len() as u64, true);
        let s = self.shared.borrow();
        let r = s.mem.write(addr, data);
        drop(s);
        let c = self.costs().copy_ns(data.len());
        self.compute(c);
        r
    }
    /// Copies `len` bytes within this node's registered memory, charging nothing: for bytes
    /// whose cost is charged elsewhere (the local path puts a record where a NIC READ would
    /// have, and the caller's copy out of that buffer is the one memcpy a local read costs).
    pub fn place_local(&self, dst: u64, src: u64, len: usize) -> Result<(), MemError> {
        // A record fits on the stack: no allocation per local read.
        let (mut small, mut large);
        let buf: &mut [u8] = if len <= 512 {
            small = [0u8; 512];
            &mut small[..len]
        } else {
            large = vec![0u8; len];
            &mut large
        };
        let s = self.shared.borrow();
        s.mem.read(src, buf).and_then(|_| s.mem.write(dst, buf))
    }
    pub fn load_local(&self, addr: u64) -> Result<u64, MemError> {
        self.htm_sees(addr, 8, false);
        self.shared.borrow().mem.load_u64(addr)
    }
    pub fn store_local(&self, addr: u64, v: u64) -> Result<(), MemError> {
        self.htm_sees(addr, 8, true);
        self.shared.borrow().mem.store_u64(addr, v)
    }
    /// CPU compare-and-swap on local memory (not atomic with NIC atomics at HCA level).
    pub fn cas_local(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        self.htm_sees(addr, 8, true);
        self.shared.borrow().mem.cas_u64(addr, compare, swap)
    }
    pub fn faa_local(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        self.htm_sees(addr, 8, true);
        self.shared.borrow().mem.faa_u64(addr, add)
    }
    pub fn regions(&self) -> Vec<MemoryRegion> {
        self.shared.borrow().mem.regions()
    }
}

/// Future of [`Ctx::wait`].
pub struct Wait {
    ctx: Ctx,
    parked: bool,
}

impl Future for Wait {
    type Output = Result<(), Completion>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let coro = self.ctx.coro as usize;
        let mut s = self.ctx.shared.borrow_mut();
        let c = &mut s.coros[coro];
        if c.pending == 0 {
            c.waiting = false;
            c.failures = 0;
            return Poll::Ready(match c.failed.take() {
                Some(f) => Err(f),
                None => Ok(()),
            });
        }
        c.waiting = true;
        drop(s);
        self.parked = true;
        Poll::Pending
    }
}

/// Future of [`Ctx::sleep`].
pub struct Sleep {
    ctx: Ctx,
    ns: Nanos,
    armed: bool,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let coro = self.ctx.coro;
        let mut s = self.ctx.shared.borrow_mut();
        if !self.armed {
            let at = s.now + self.ns;
            let seq = s.timer_seq;
            s.timer_seq += 1;
            s.timers.insert((at, seq, coro));
            s.coros[coro as usize].timer_fired = false;
            drop(s);
            self.armed = true;
            return Poll::Pending;
        }
        if std::mem::take(&mut s.coros[coro as usize].timer_fired) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Future of [`Ctx::yield_now`].
pub struct YieldNow {
    ctx: Ctx,
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        let coro = self.ctx.coro;
        self.ctx.shared.borrow_mut().ready.push_back(coro);
        Poll::Pending
    }
}

impl Ctx {
    /// `htm_region` under the emulation: the body and the writes' landing hold the node's
    /// lock, so no other access interleaves; capacity and explicit aborts are as in the model,
    /// conflicts and interrupts cannot happen.
    fn emulated_region<R>(
        &self,
        htm: &crate::htm::SharedHtm,
        lock: &crate::htm::NodeLock,
        body: impl FnOnce(&mut Tx<'_>) -> R,
    ) -> Result<R, crate::htm::Abort> {
        let worker = self.me().worker;
        let _excluded = lock.lock();
        htm.borrow_mut().begin(worker);
        let mut tx = Tx { ctx: self, worker, htm: htm.clone(), writes: Vec::new() };
        let r = body(&mut tx);
        let writes = std::mem::take(&mut tx.writes);
        htm.borrow_mut().end(worker)?;
        let s = self.shared.borrow();
        for (a, d) in writes {
            s.mem.write(a, &d).expect("a region writes only local registered memory it read");
        }
        Ok(r)
    }
}

/// What `Ctx::htm_region` awaits between its body and XEND: the rest of the world running up
/// to the region's end, and nothing else of this worker (`Shared::region_waiter`).
struct RegionEnd {
    ctx: Ctx,
    waited: bool,
}

impl Future for RegionEnd {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.waited {
            return Poll::Ready(());
        }
        self.waited = true;
        let coro = self.ctx.coro;
        let mut s = self.ctx.shared.borrow_mut();
        s.region_waiter = Some(coro);
        // Ready, so the backend steps this worker again once its clock is reached.
        s.ready.push_back(coro);
        Poll::Pending
    }
}

/// Future of [`Ctx::wait_imm`].
pub struct WaitImm {
    ctx: Ctx,
}

impl Future for WaitImm {
    type Output = (NodeId, u32);
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<(NodeId, u32)> {
        let coro = self.ctx.coro;
        let mut s = self.ctx.shared.borrow_mut();
        if let Some(x) = s.imms.pop_front() {
            return Poll::Ready(x);
        }
        if !s.imm_waiters.contains(&coro) {
            s.imm_waiters.push(coro);
        }
        s.coros[coro as usize].waiting = true;
        Poll::Pending
    }
}

/// Future of [`Ctx::wait_imm_until`]; its timer is withdrawn when it ends, so a timer that
/// did not fire never wakes a later wait.
pub struct WaitImmUntil {
    ctx: Ctx,
    deadline: Nanos,
    timer: Option<(Nanos, u64)>,
}

impl Future for WaitImmUntil {
    type Output = Option<(NodeId, u32)>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<(NodeId, u32)>> {
        let coro = self.ctx.coro;
        let mut s = self.ctx.shared.borrow_mut();
        if let Some(x) = s.imms.pop_front() {
            return Poll::Ready(Some(x));
        }
        if s.now >= self.deadline {
            return Poll::Ready(None);
        }
        if self.timer.is_none() {
            let seq = s.timer_seq;
            s.timer_seq += 1;
            s.timers.insert((self.deadline, seq, coro));
            drop(s);
            self.timer = Some((self.deadline, seq));
            s = self.ctx.shared.borrow_mut();
        }
        if !s.imm_waiters.contains(&coro) {
            s.imm_waiters.push(coro);
        }
        s.coros[coro as usize].waiting = true;
        Poll::Pending
    }
}

impl Drop for WaitImmUntil {
    fn drop(&mut self) {
        if let Some((at, seq)) = self.timer {
            let coro = self.ctx.coro;
            let mut s = self.ctx.shared.borrow_mut();
            s.timers.remove(&(at, seq, coro));
            s.coros[coro as usize].timer_fired = false;
            s.imm_waiters.retain(|&w| w != coro);
        }
    }
}

/// Future of [`Ctx::wait_own_imm`].
pub struct WaitOwnImm {
    ctx: Ctx,
}

impl Future for WaitOwnImm {
    type Output = u32;
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<u32> {
        let coro = self.ctx.coro;
        let mut s = self.ctx.shared.borrow_mut();
        let cs = &mut s.coros[coro as usize];
        if let Some(x) = cs.own_imms.pop_front() {
            cs.waits_own_imm = false;
            return Poll::Ready(x);
        }
        cs.waits_own_imm = true;
        cs.waiting = true;
        Poll::Pending
    }
}

/// What a handler run left to do: its outcome, its reply (the reusable buffer), the deferred
/// replies and one-way notices it sent.
struct Served {
    outcome: Handled,
    reply: Vec<u8>,
    deferred: Vec<(ReplyToken, Vec<u8>)>,
    notices: Vec<crate::rpc::Notice>,
}

/// One HTM region's view of memory ([`Ctx::htm_region`]): reads see memory (and the region's
/// own writes), writes are buffered and land only if the region commits.
pub struct Tx<'a> {
    ctx: &'a Ctx,
    worker: u16,
    htm: crate::htm::SharedHtm,
    writes: Vec<(u64, Vec<u8>)>,
}

impl Tx<'_> {
    /// Reads `out.len()` bytes at `addr` inside the region (tracked; charged as a copy).
    pub fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.htm.borrow_mut().access(crate::htm::Accessor::Worker(self.worker), addr, out.len() as u64, false);
        {
            let s = self.ctx.shared.borrow();
            s.mem.read(addr, out)?;
        }
        // The region's own writes, newest last.
        for (a, d) in &self.writes {
            let (lo, hi) = (addr.max(*a), (addr + out.len() as u64).min(a + d.len() as u64));
            if lo < hi {
                out[(lo - addr) as usize..(hi - addr) as usize]
                    .copy_from_slice(&d[(lo - a) as usize..(hi - a) as usize]);
            }
        }
        let c = self.ctx.costs().copy_ns(out.len());
        self.ctx.compute(c);
        Ok(())
    }
    /// Writes `data` at `addr` inside the region (tracked; buffered until XEND).
    pub fn write(&mut self, addr: u64, data: &[u8]) {
        self.htm.borrow_mut().access(crate::htm::Accessor::Worker(self.worker), addr, data.len() as u64, true);
        self.writes.push((addr, data.to_vec()));
        let c = self.ctx.costs().copy_ns(data.len());
        self.ctx.compute(c);
    }
    /// XABORT(code): the region ends aborted.
    pub fn abort(&mut self, code: u8) {
        self.htm.borrow_mut().explicit_abort(self.worker, code);
    }
    /// CPU work inside the region, ns.
    pub fn compute(&mut self, ns: Nanos) {
        self.ctx.compute(ns);
    }
    /// Whether the region has aborted already (its remaining work is wasted).
    pub fn aborted(&self) -> bool {
        self.htm.borrow().aborted(self.worker).is_some()
    }
}

impl Ctx {
    /// Runs `body` as an HTM region (XBEGIN .. XEND) on this worker. The body runs on the CPU
    /// at once (no awaiting inside a region: a coroutine switch or an RDMA post would abort
    /// it on real RTM), and the region stays open for the CPU time it took: accesses by other
    /// workers and by the NIC in that time that touch its lines abort it (strong atomicity);
    /// system events abort it at the model's rate. Returns the body's result once XEND
    /// committed its writes, or why it aborted (its writes discarded). Without an HTM model
    /// installed (`WorkerCore::set_htm`) this is a programming error and panics.
    pub async fn htm_region<R>(&self, body: impl FnOnce(&mut Tx<'_>) -> R) -> Result<R, crate::htm::Abort> {
        let htm = self.shared.borrow().htm.clone().expect("htm_region without an HTM model (WorkerCore::set_htm)");
        let worker = self.me().worker;
        debug_assert!(!htm.borrow().open(worker), "a region while another is open on worker {worker}");
        let emulated = match htm.borrow().mode() {
            crate::htm::Mode::Emulated(lock) => Some(lock.clone()),
            crate::htm::Mode::Model => None,
        };
        if let Some(lock) = emulated {
            return self.emulated_region(&htm, &lock, body);
        }
        let t0 = self.now();
        let (xbegin_ns, xend_ns, abort_ns) = htm.borrow().costs();
        self.compute(xbegin_ns);
        htm.borrow_mut().begin(worker);
        let mut tx = Tx { ctx: self, worker, htm: htm.clone(), writes: Vec::new() };
        let r = body(&mut tx);
        let writes = std::mem::take(&mut tx.writes);
        // The region lasts the CPU time the body and XEND take: let the world run up to its end.
        self.compute(xend_ns);
        let dur = self.now() - t0;
        RegionEnd { ctx: self.clone(), waited: false }.await;
        let system = {
            let p = htm.borrow().system_abort_probability(dur.max(1));
            p > 0.0 && self.with_rng(|g| rand::Rng::gen_bool(g, p.min(1.0)))
        };
        if system {
            htm.borrow_mut().system_abort(worker);
        }
        if let Err(a) = htm.borrow_mut().end(worker) {
            self.compute(abort_ns);
            return Err(a);
        }
        let s = self.shared.borrow();
        for (a, d) in writes {
            s.mem.write(a, &d).expect("a region writes only local registered memory it read");
        }
        Ok(r)
    }
}
