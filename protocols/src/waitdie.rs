//! WAIT-DIE (RCC Sec. 4.3): two-phase locking with exclusive locks where a conflict is
//! settled by timestamps instead of an abort. An older transaction (smaller timestamp) waits
//! for a younger lock holder; a younger one dies (aborts and retries). Waits only ever point
//! from older to younger transactions, so they cannot form a cycle: no deadlock.
//!
//! - Timestamp: the local clock with node, worker and coroutine ids in the low bits
//!   ([`timestamp`]), unique without clock synchronisation, taken when a transaction first
//!   starts and kept when it dies and restarts (so it ages and cannot starve). The lock word
//!   holds the holder's timestamp; the writer word still gets the attempt's id at commit
//!   (the history's name for it).
//! - LOCK by RPC (`H_WD_LOCK`): the handler CASes the timestamp in; if the lock is held by a
//!   younger transaction it defers its reply and queues the request in the tuple's wait list
//!   ([`Participant`]), never busy-waiting. The list is served when the lock is freed: by the
//!   RELEASE and COMMIT handlers on the spot, and, since a one-sided RELEASE or COMMIT (a
//!   WRITE of lock = 0) bypasses the participant's CPU, by each worker's event loop checking
//!   its waiting locks every [`POLL_NS`] ([`background`]). A granted waiter gets the reply a
//!   successful LOCK gets (status, offset, tuple, read after the holder's write-back).
//! - LOCK one-sided: CAS (0 -> timestamp) and READ doorbelled on one QP, as NOWAIT; a failed
//!   CAS returns the holder's timestamp: older than us, die; younger, yield and post CAS +
//!   READ again for the records still missing. A won CAS whose READ does not show our lock
//!   is checked by one more READ ([`recheck_locks`]).
//! - LOG, COMMIT (write back + unlock) and RELEASE as NOWAIT; the RPC forms use WAITDIE's own
//!   handlers so they can serve the wait list.
//! - A wait is bounded ([`WAIT_BOUND_NS`], answered BUSY: the waiter dies) so nothing waits
//!   forever if a holder's coordinator dies mid-run; WAIT-DIE itself never needs it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use txbed_transport::{Ctx, Handled, HandlerCtx, HandlerFn, LocalBuf, Op, Payload, ReplyToken};
use txbed_workloads::TxnSpec;

use txbed_txn::attempt::{cause, execute, new_history, settle, Attempt};
use txbed_txn::msg::{CommitReq, LockReply, LockReq, ReleaseReq};
use txbed_txn::node::{NodeState, MALFORMED};
use txbed_txn::ops::{self, Rec, Tally};
use txbed_txn::participant::{BY_KEY, BY_OFFSET};
use txbed_txn::protocol::{handler_id, in_id_order, BackgroundFn, Bug, LocalBoxFuture, OptionValues, Protocol};
use txbed_txn::stage::Stage;
use txbed_txn::store::{self, LOCK, META_BYTES, VERSION, WRITER};
use txbed_txn::TxnError;

pub struct WaitDie;

impl Protocol for WaitDie {
    fn name(&self) -> &'static str {
        "WAITDIE"
    }
    fn description(&self) -> &'static str {
        "2PL where an older transaction waits for a younger lock holder and a younger one dies (RCC Sec. 4.3)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn bugs(&self) -> &'static [Bug] {
        &[STALE_READ]
    }
    /// The lock word is the holder's timestamp, which names its thread (node x workers +
    /// worker) in bits 8..20.
    fn lock_owner_node(&self, word: u64, workers: u16) -> Option<u16> {
        Some((((word >> 8) & 0xfff) / workers.max(1) as u64) as u16)
    }
    fn background(&self) -> Option<BackgroundFn> {
        Some(|ctx, n, end| Box::pin(background(ctx, n, end)))
    }
    fn participant(&self, _options: &OptionValues) -> Box<dyn std::any::Any> {
        Box::new(Participant::default())
    }
    fn handler_names(&self) -> &'static [&'static str] {
        &HANDLER_NAMES
    }
    fn handlers(&self, n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
        in_id_order(handlers(n))
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(attempt(ctx, n, spec, id))
    }
}

/// This node's WAITDIE state.
fn part(n: &NodeState) -> &Participant {
    n.participant()
}

/// Hands a transaction that waited for a lock the tuple as it was when it began to wait,
/// before the holder's write-back (a stale read: lost updates).
pub const STALE_READ: Bug = Bug {
    name: "WaitDieStaleRead",
    about: "a waiter gets the tuple as it was when it began to wait, before the holder wrote back (lost update)",
};

/// The stages WAITDIE has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 4] = [Stage::Lock, Stage::Log, Stage::Release, Stage::Commit];

/// LOCK: request `msg::LockReq` (the owner is the timestamp); reply `msg::LockReply`,
/// locked now or, for a waiter, when the lock is granted; BUSY: die.
pub const H_WD_LOCK: u16 = handler_id(0);
/// RELEASE: request `msg::ReleaseReq`; clears the lock if the timestamp holds it.
pub const H_WD_RELEASE: u16 = handler_id(1);
/// COMMIT: request `msg::CommitReq`.
pub const H_WD_COMMIT: u16 = handler_id(2);

/// Handler names, for traces.
pub const HANDLER_NAMES: [&str; 3] = ["WD_LOCK", "WD_RELEASE", "WD_COMMIT"];

/// The longest a transaction waits for its locks before it gives up (dies). WAIT-DIE cannot
/// deadlock, so this fires only if a holder never releases (its coordinator died); it is
/// well under the default RPC timeout (2 ms), so a waiter's deferred reply comes first.
pub const WAIT_BOUND_NS: u64 = 1_000_000;
/// How often each worker's event loop checks the locks its waiters wait for.
pub const POLL_NS: u64 = 1_000;

/// A transaction's timestamp (RCC Sec. 4.3): the local clock (ns, wrapping after 4.9 hours)
/// in the high 44 bits, then the node and worker (12 bits) and the coroutine (8 bits), so
/// two transactions never share one. Smaller is older. Never 0 (0 is a free lock).
pub fn timestamp(now: u64, node: u16, worker: u16, workers: u16, coroutine: u32) -> u64 {
    let thread = node as u64 * workers as u64 + worker as u64;
    debug_assert!(thread < 1 << 12 && coroutine < 1 << 8, "timestamp id bits overflow");
    (((now + 1) & ((1 << 44) - 1)) << 20) | ((thread & 0xfff) << 8) | (coroutine as u64 & 0xff)
}

/// A deferred LOCK request.
struct Waiter {
    ts: u64,
    token: ReplyToken,
    /// The worker that deferred it: only that worker replies (its RPC layer owns the call).
    worker: u16,
    /// When it gives up.
    deadline: u64,
    tuple_bytes: usize,
    /// Planted bug only: the tuple as it was when the wait began.
    stale: Option<Vec<u8>>,
}

/// Participant-side state of WAITDIE on one node: the wait list of every lock that has
/// waiters, by tuple offset. (Where a node's workers share one `NodeState`, each worker still
/// serves only the waiters it deferred.)
#[derive(Default)]
pub struct Participant {
    waits: RefCell<BTreeMap<u64, Vec<Waiter>>>,
    /// End of the run's window, set by the background coroutine: later requests never wait,
    /// so the event loops can stop checking. 0 (no background loop yet) also means no waits.
    end: Cell<u64>,
    /// Coordinator side, per (worker, coroutine): the transaction that last died and its
    /// timestamp, which its restart keeps (so it ages and cannot starve).
    died: RefCell<BTreeMap<(u16, u32), (TxnSpec, u64)>>,
}

/// What serving a wait list needs, from a handler or from the event loop's coroutine.
trait Side {
    fn now(&self) -> u64;
    fn worker(&self) -> u16;
    fn load(&self, addr: u64) -> Option<u64>;
    fn cas(&self, addr: u64, compare: u64, swap: u64) -> Option<u64>;
    fn read(&self, addr: u64, out: &mut [u8]);
    fn reply(&mut self, token: ReplyToken, payload: Vec<u8>);
}

impl Side for HandlerCtx<'_> {
    fn now(&self) -> u64 {
        self.now
    }
    fn worker(&self) -> u16 {
        self.me.worker
    }
    fn load(&self, addr: u64) -> Option<u64> {
        self.mem.load_u64(addr).ok()
    }
    fn cas(&self, addr: u64, compare: u64, swap: u64) -> Option<u64> {
        self.mem.cas_u64(addr, compare, swap).ok()
    }
    fn read(&self, addr: u64, out: &mut [u8]) {
        let _ = self.mem.read(addr, out);
    }
    fn reply(&mut self, token: ReplyToken, payload: Vec<u8>) {
        self.reply_to(token, payload);
    }
}

impl Side for Ctx {
    fn now(&self) -> u64 {
        Ctx::now(self)
    }
    fn worker(&self) -> u16 {
        self.me().worker
    }
    fn load(&self, addr: u64) -> Option<u64> {
        self.load_local(addr).ok()
    }
    fn cas(&self, addr: u64, compare: u64, swap: u64) -> Option<u64> {
        self.cas_local(addr, compare, swap).ok()
    }
    fn read(&self, addr: u64, out: &mut [u8]) {
        let _ = self.read_local(addr, out);
    }
    fn reply(&mut self, token: ReplyToken, payload: Vec<u8>) {
        self.send_deferred_reply(token, payload);
    }
}

/// The waiter a free lock goes to: the youngest of those `(timestamp, ours)` marks ours.
fn youngest(waiters: impl Iterator<Item = (u64, bool)>) -> Option<usize> {
    waiters.enumerate().filter(|(_, (_, ours))| *ours).max_by_key(|(_, (ts, _))| *ts).map(|(i, _)| i)
}

/// Whether a waiter dies: WAIT-DIE lets only an older transaction wait for a holder (the
/// holder may have changed since it began to wait), and the wait is bounded.
fn dies(ts: u64, holder: u64, deadline: u64, now: u64) -> bool {
    (holder != 0 && ts >= holder) || now >= deadline
}

/// Serves this worker's waiters for the tuple at `off`: a free lock goes to the youngest
/// waiter, so those left stay older than the holder and may keep waiting (DBx1000 orders its
/// WAIT_DIE waiters the same way); then waiters younger than the holder (it may have been
/// taken by a newcomer) die, and waiters past their bound give up. Returns whether any of
/// this worker's waiters remain.
fn serve(n: &NodeState, side: &mut impl Side, off: u64) -> bool {
    let me = side.worker();
    let mut waits = part(n).waits.borrow_mut();
    let Some(list) = waits.get_mut(&off) else { return false };
    let addr = n.base() + off + LOCK;
    let mut holder = side.load(addr).unwrap_or(u64::MAX);
    if holder == 0 {
        if let Some(i) = youngest(list.iter().map(|w| (w.ts, w.worker == me))) {
            if side.cas(addr, 0, list[i].ts) == Some(0) {
                let w = list.remove(i);
                holder = w.ts;
                // The tuple now, after the previous holder's write-back.
                let tuple = w.stale.unwrap_or_else(|| {
                    let mut t = vec![0u8; w.tuple_bytes];
                    side.read(n.base() + off, &mut t);
                    t
                });
                side.reply(w.token, LockReply::Locked { offset: off, tuple }.encode());
            }
        }
    }
    let now = side.now();
    list.retain(|w| {
        if w.worker != me {
            return true;
        }
        let dies = dies(w.ts, holder, w.deadline, now);
        if dies {
            side.reply(w.token, LockReply::Busy.encode());
        }
        !dies
    });
    let left = list.iter().any(|w| w.worker == me);
    if list.is_empty() {
        waits.remove(&off);
    }
    left
}

/// LOCK handler: take a free lock, wait for a younger holder, die for an older one.
fn lock_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    let Ok(LockReq { table, key, owner: ts, .. }) = LockReq::decode(req) else {
        h.reply.push(MALFORMED);
        return Handled::Reply;
    };
    let place = n.catalog.layout.table(table);
    let Some((place, off)) = place.and_then(|p| Some((p, store::find_local(h.mem, n.base(), p, key)?))) else {
        LockReply::Missing.encode_into(h.reply);
        return Handled::Reply;
    };
    // A lock freed one-sided since the last check goes to its waiters first.
    serve(n, h, off);
    let tuple_bytes = place.tuple_bytes as usize;
    let read = |h: &HandlerCtx<'_>| {
        let mut t = vec![0u8; tuple_bytes];
        let _ = h.mem.read(n.base() + off, &mut t);
        t
    };
    match h.mem.cas_u64(n.base() + off + LOCK, 0, ts) {
        Ok(0) => {
            let tuple = read(h);
            LockReply::Locked { offset: off, tuple }.encode_into(h.reply);
            Handled::Reply
        }
        // Older than the holder: wait, without blocking the event loop (RCC Sec. 4.3).
        Ok(holder) if ts < holder && h.now < part(n).end.get() => {
            let stale = (n.bug == Some(STALE_READ)).then(|| read(h));
            let w = Waiter {
                ts,
                token: h.token(),
                worker: h.me.worker,
                deadline: h.now + WAIT_BOUND_NS,
                tuple_bytes,
                stale,
            };
            part(n).waits.borrow_mut().entry(off).or_default().push(w);
            Handled::Defer
        }
        // Younger than the holder: die.
        _ => {
            LockReply::Busy.encode_into(h.reply);
            Handled::Reply
        }
    }
}

/// RELEASE handler: unlock if the timestamp holds the lock, then hand it to a waiter.
fn release_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    // Nobody reads the reply: a request that does not decode releases nothing.
    let Ok(ReleaseReq { offset, owner }) = ReleaseReq::decode(req) else { return Handled::Reply };
    let _ = h.mem.cas_u64(n.base() + offset + LOCK, owner, 0);
    serve(n, h, offset);
    Handled::Reply
}

/// COMMIT handler: write back version, writer and record, unlock, hand the lock to a waiter.
fn commit_handler(n: &NodeState, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    // Nobody reads the reply: a request that does not decode writes nothing.
    let Ok(c) = CommitReq::decode(req) else { return Handled::Reply };
    let base = n.base() + c.offset;
    let _ = h.mem.write(base + META_BYTES, c.record);
    let _ = h.mem.store_u64(base + VERSION, c.version);
    let _ = h.mem.store_u64(base + WRITER, c.writer);
    let _ = h.mem.store_u64(base + LOCK, 0);
    serve(n, h, c.offset);
    Handled::Reply
}

/// WAITDIE's RPC handlers (ids 20..=29).
pub fn handlers(n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    let handler = |misses: u64, f: fn(&NodeState, &mut HandlerCtx<'_>, &[u8]) -> Handled| -> Rc<HandlerFn> {
        let n = n.clone();
        Rc::new(move |h: &mut HandlerCtx<'_>, req: &[u8]| {
            h.memory_misses(misses);
            f(&n, h, req)
        })
    };
    vec![
        (H_WD_LOCK, handler(BY_KEY, lock_handler)),
        (H_WD_RELEASE, handler(BY_OFFSET, release_handler)),
        (H_WD_COMMIT, handler(BY_OFFSET, commit_handler)),
    ]
}

/// The worker's event-loop check (RCC Sec. 4.3: "the waiting list, which is checked in the
/// event loop periodically"): locks freed by one-sided WRITEs go to their waiters, and
/// waiters past their bound give up. Returns after `end` once this worker has no waiters.
async fn background(ctx: Ctx, n: Rc<NodeState>, end: u64) -> Result<(), TxnError> {
    part(&n).end.set(end);
    let me = ctx.me().worker;
    let mut side = ctx.clone();
    loop {
        let offs: Vec<u64> =
            part(&n).waits.borrow().iter().filter(|(_, l)| l.iter().any(|w| w.worker == me)).map(|(o, _)| *o).collect();
        let mut left = false;
        for off in offs {
            left |= serve(&n, &mut side, off);
        }
        if !left && ctx.now() >= end {
            return Ok(());
        }
        ctx.sleep(POLL_NS).await;
    }
}

/// LOCK (RCC Sec. 4.3): locks and reads every record, waiting for younger holders. Returns
/// whether all were locked; `false` means the transaction dies (it met an older holder, or
/// waited past the bound), holding the records marked `locked`.
async fn lock(ctx: &Ctx, n: &NodeState, recs: &mut [Rec], ts: u64) -> Result<bool, TxnError> {
    let t0 = ctx.now();
    // Every record is locked (with faults, `ops::abandon` releases what may be held).
    recs.iter_mut().for_each(|r| r.asked = true);
    let (mut round_trips, mut t) = (0u64, Tally::default());
    let all = if n.hybrid.onesided(Stage::Lock) {
        lock_onesided(ctx, n, recs, ts, &mut round_trips, &mut t).await?
    } else {
        let mut calls = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            let req = LockReq { table: r.table, key: r.key, owner: ts, meta_only: false }.encode();
            calls.push((i, ops::call(ctx, n, r.home, H_WD_LOCK, &req).await?));
            t.add(ops::rpc_path(n, r.home), 8 + ops::tuple_bytes(n, r.table) as u64);
        }
        round_trips = t.round_trips();
        // Waiters' replies come when their locks are granted (or they die).
        ctx.wait().await?;
        for (i, call) in calls {
            let r = &mut recs[i];
            match LockReply::decode(&ops::reply(ctx, call, "WD_LOCK")?)? {
                LockReply::Locked { offset, tuple } => {
                    r.tuple = ops::tuple_for(n, r, tuple)?;
                    r.locked = true;
                    r.offset = offset;
                }
                LockReply::Busy => {}
                LockReply::Missing => return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key }),
            }
        }
        recs.iter().all(|r| r.locked)
    };
    ops::account(ctx, n, Stage::Lock, t0, round_trips, t.bytes, t.local);
    Ok(all)
}

/// One-sided LOCK: CAS + READ per missing record, doorbelled on one QP (the READ's data is
/// ignored if the CAS failed); a failed CAS returns the holder's timestamp to compare with.
/// A round counts as a round trip if any of its requests went through the NIC.
async fn lock_onesided(
    ctx: &Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    ts: u64,
    round_trips: &mut u64,
    t: &mut Tally,
) -> Result<bool, TxnError> {
    ops::locate_all(ctx, n, recs, |r| r.tuple.is_empty()).await?;
    const SENTINEL: u64 = u64::MAX;
    let began = ctx.now();
    let bug = n.bug == Some(STALE_READ);
    let mut seen: Vec<Option<Vec<u8>>> = vec![None; recs.len()];
    let scratch = ctx.scratch();
    // LOCK buffers live in the first half of the coroutine's scratch (ops.rs's layout).
    let need: u64 = recs.iter().map(|r| 8 + ops::tuple_bytes(n, r.table) as u64).sum();
    if scratch.addr + need > ops::buffers_end(ctx) {
        let limit = ops::buffers_end(ctx) - scratch.addr;
        return Err(TxnError::TooBig { what: "lock buffers", bytes: need, limit, within: "scratch half" });
    }
    loop {
        let sent = t.sent;
        let mut at = scratch.addr;
        let mut slots = Vec::new();
        for (i, r) in recs.iter().enumerate().filter(|(_, r)| !r.locked) {
            let len = ops::tuple_bytes(n, r.table);
            // A sentinel, so a result that never arrived cannot read as "was free".
            ctx.store_local(at, SENTINEL)?;
            let cas = Op::Cas {
                local: LocalBuf { lkey: scratch.lkey, addr: at, len: 8 },
                remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
                compare: 0,
                swap: ts,
            };
            let read = Op::Read {
                local: LocalBuf { lkey: scratch.lkey, addr: at + 8, len },
                remote: n.catalog.remote(r.home, r.offset, len),
            };
            slots.push((i, at));
            at += 8 + len as u64;
            t.add(ops::issue(ctx, n, r, vec![(cas, false), (read, true)]).await?, 8 + len as u64);
        }
        *round_trips += (t.sent > sent) as u64;
        ctx.wait().await?;
        let mut die = false;
        let mut recheck = Vec::new();
        for (i, at) in slots {
            let holder = ctx.load_local(at)?;
            let r = &mut recs[i];
            r.tuple = vec![0; ops::tuple_bytes(n, r.table) as usize];
            ctx.read_local(at + 8, &mut r.tuple)?;
            if holder != 0 && holder != SENTINEL {
                // Wait-die: an older holder kills us; a younger one is waited for.
                die |= holder <= ts;
                if bug && seen[i].is_none() {
                    seen[i] = Some(r.tuple.clone());
                }
            } else if r.lock_word() != ts {
                // The CAS won (or its result is not back) but the READ does not show our
                // lock: it ran before the CAS (see `recheck`). Read again to be sure.
                recheck.push(i);
            } else {
                r.locked = true;
                if let Some(old) = seen[i].take().filter(|_| bug) {
                    r.tuple = old;
                }
            }
        }
        if !recheck.is_empty() {
            let sent = t.sent;
            die |= recheck_locks(ctx, n, recs, &recheck, ts, t).await?;
            *round_trips += (t.sent > sent) as u64;
        }
        if recs.iter().all(|r| r.locked) {
            return Ok(true);
        }
        if die || ctx.now() >= began + WAIT_BOUND_NS {
            return Ok(false);
        }
        // Wait: let the other coroutines run, then try the missing locks again.
        ctx.yield_now().await;
    }
}

/// READs again the tuples whose CAS + READ left it unclear whether we hold the lock, and
/// returns whether one is held by an older transaction (die). Needed because a READ has been
/// seen to overtake the CAS posted before it on the same QP (when the CAS waits behind
/// another atomic on the word), the unsignaled CAS's result landing after the READ's
/// completion: trusting the CAS result alone would leave our lock in place unrecorded (held
/// forever), or read the tuple as it was before we locked it. A READ posted now sees the
/// CAS's outcome: the lock word is our timestamp iff we won.
async fn recheck_locks(
    ctx: &Ctx,
    n: &NodeState,
    recs: &mut [Rec],
    which: &[usize],
    ts: u64,
    t: &mut Tally,
) -> Result<bool, TxnError> {
    let scratch = ctx.scratch();
    let mut at = scratch.addr;
    let mut slots = Vec::new();
    for &i in which {
        let r = &recs[i];
        let len = ops::tuple_bytes(n, r.table);
        let read = Op::Read {
            local: LocalBuf { lkey: scratch.lkey, addr: at, len },
            remote: n.catalog.remote(r.home, r.offset, len),
        };
        t.add(ops::issue(ctx, n, r, vec![(read, true)]).await?, len as u64);
        slots.push((i, at));
        at += len as u64;
    }
    ctx.wait().await?;
    let mut die = false;
    for (i, at) in slots {
        let r = &mut recs[i];
        ctx.read_local(at, &mut r.tuple)?;
        let holder = r.lock_word();
        r.locked = holder == ts;
        die |= holder != 0 && holder < ts;
    }
    Ok(die)
}

/// Posts the unlocks of the locked records `which` selects, by the RELEASE stage's primitive
/// (a local record's by the CPU or a direct call); returns what it sent.
fn release_posts(ctx: &Ctx, n: &NodeState, recs: &[Rec], which: impl Fn(&Rec) -> bool, ts: u64) -> Tally {
    let mut t = Tally::default();
    for r in recs.iter().filter(|r| r.locked && which(r)) {
        if n.hybrid.onesided(Stage::Release) {
            let unlock = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            };
            // A full send queue must not leave the lock held: the lock word holds our
            // timestamp, so the RPC can release it instead (RCC Sec. 5.2).
            if let Ok(path) = ops::issue_now(ctx, n, r, vec![(unlock, true)]) {
                t.add(path, 8);
                continue;
            }
        }
        let req = ReleaseReq { offset: r.offset, owner: ts }.encode();
        ops::send(ctx, n, r.home, H_WD_RELEASE, &req);
        t.add(ops::rpc_path(n, r.home), 8);
    }
    t
}

/// RELEASE every lock held, and wait.
async fn release(ctx: &Ctx, n: &NodeState, recs: &[Rec], ts: u64) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let t = release_posts(ctx, n, recs, |_| true, ts);
    let waited = ctx.wait().await;
    ctx.clear_replies();
    waited?;
    ops::account_tally(ctx, n, Stage::Release, t0, &t);
    Ok(())
}

/// COMMIT: writes back the new values (version + 1, writer = `id`) and unlocks, and
/// RELEASEs the records only read (owner = `ts`). With faults, what failed is done again
/// as `ops::write_back` does it (the wait lists are served by the background poll).
async fn write_back(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    new_values: &[Vec<u8>],
    id: u64,
    ts: u64,
) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let mut t = Tally::default();
    let mut staging = txbed_txn::ops::staging_at(ctx);
    debug_assert_eq!(new_values.len(), recs.iter().filter(|r| r.write).count(), "a new value per write");
    let mut failed = None;
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values) {
        match ops::write_back_one(ctx, n, r, v, id, &mut staging, true, H_WD_COMMIT).await {
            Ok(sent) => t += sent,
            Err(e) if n.recovery.is_some() && e.unreachable_node().is_some() => failed = Some(e),
            Err(e) => return Err(e),
        }
    }
    // The read set's unlocks ride in this stage: counted, their bytes not.
    let unlocks = release_posts(ctx, n, recs, |r| !r.write, ts);
    t.sent += unlocks.sent;
    t.local += unlocks.local;
    let waited = ctx.wait().await;
    // A COMMIT by RPC that got no answer failed as much as a WRITE that gave up.
    let unanswered = ctx.failed_reply().map(TxnError::from);
    ctx.clear_replies();
    match waited.err().map(TxnError::from).or(failed).or(unanswered) {
        Some(e) if n.recovery.is_some() && e.unreachable_node().is_some() => {
            ops::finish_write_back(ctx, n, recs, new_values, id, ts, true).await;
        }
        Some(e) => return Err(e),
        None => {}
    }
    ops::account_tally(ctx, n, Stage::Commit, t0, &t);
    Ok(())
}

/// The abort cause: a younger transaction met an older lock holder and died.
const DIED: &str = "lock: died (younger)";

/// Runs one attempt of `spec` as transaction `id`. A transaction gets its timestamp when it
/// first starts and keeps it when it dies and restarts (the classic WAIT-DIE rule: it grows
/// older than its rivals, so it eventually waits instead of dying).
async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let start_ns = ctx.now();
    let me = (ctx.me().worker, ctx.coroutine());
    let restart = part(n).died.borrow_mut().remove(&me).filter(|(s, _)| s == spec);
    let ts = restart.map_or_else(|| timestamp(start_ns, n.me, me.0, ctx.workers(), me.1), |(_, ts)| ts);
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, ts, start_ns, &mut recs).await;
    let outcome = settle(ctx, n, r, &recs, id, ts).await;
    if matches!(outcome, Attempt::Conflict(_)) {
        part(n).died.borrow_mut().insert(me, (spec.clone(), ts));
    }
    outcome
}

async fn run(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    id: u64,
    ts: u64,
    start_ns: u64,
    recs: &mut [Rec],
) -> Result<Attempt, TxnError> {
    let epoch0 = ctx.view_epoch();
    if !lock(ctx, n, recs, ts).await? {
        release(ctx, n, recs, ts).await?;
        return Ok(Attempt::Conflict(DIED));
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        release(ctx, n, recs, ts).await?;
        return Ok(Attempt::UserAbort);
    };
    let mut h = new_history(ctx, n, spec, id, start_ns);
    ops::history_of(recs, &mut h);
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        ops::abandon(ctx, n, recs, ts).await;
        return Ok(Attempt::Conflict(cause::VIEW_CHANGED));
    }
    ops::log(ctx, n, recs, &new_values, id).await?;
    write_back(ctx, n, recs, &new_values, id, ts).await?;
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}

#[cfg(test)]
mod tests {
    use super::{dies, timestamp, youngest};

    /// Granting to the youngest waiter keeps every waiter older than the holder (waits point
    /// from older to younger only: no cycle); a newcomer holder kills the younger waiters.
    #[test]
    fn waiters_stay_older_than_the_holder() {
        let mut waiting: Vec<(u64, bool)> = vec![(50, true), (90, true), (70, true), (99, false), (10, true)];
        let mut released = Vec::new();
        while let Some(i) = youngest(waiting.iter().copied()) {
            let (holder, _) = waiting.remove(i);
            released.push(holder);
            assert!(waiting.iter().filter(|w| w.1).all(|&(ts, _)| ts < holder && !dies(ts, holder, u64::MAX, 0)));
        }
        // Only this worker's waiters, youngest first; the other worker's stays.
        assert_eq!(released, [90, 70, 50, 10]);
        assert_eq!(waiting, [(99, false)]);
        // Held by a newcomer of 60: the waiter of 70 dies, the one of 50 waits on.
        assert!(dies(70, 60, u64::MAX, 0) && !dies(50, 60, u64::MAX, 0));
        // A free lock kills no one; the bound does.
        assert!(!dies(70, 0, 100, 99) && dies(70, 0, 100, 100));
    }

    #[test]
    fn timestamps_order_by_clock_then_ids_and_are_never_zero() {
        assert_ne!(timestamp(0, 0, 0, 1, 0), 0);
        assert!(timestamp(5, 3, 1, 2, 7) < timestamp(6, 0, 0, 2, 0));
        let a = timestamp(5, 1, 0, 2, 3);
        let b = timestamp(5, 0, 1, 2, 3);
        let c = timestamp(5, 1, 0, 2, 4);
        assert!(a != b && a != c && b != c);
        // Same clock: the ids break the tie, so two transactions never share a timestamp.
        let mut all: Vec<u64> = (0..4u16)
            .flat_map(|n| (0..2u16).flat_map(move |w| (0..4u32).map(move |c| timestamp(9, n, w, 2, c))))
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 32);
    }
}
