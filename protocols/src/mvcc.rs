//! MVCC (RCC Sec. 4.4): timestamp ordering over a fixed number of record versions per tuple.
//!
//! Each attempt takes a timestamp `ctts` (local clock in the high bits, node/worker/coroutine
//! in the low bits, as WAITDIE; the clock is moved ahead whenever a larger `wts` or `rts` is
//! seen). Committed versions carry their writer's timestamp (`wts`); the serialization order
//! is timestamp order, and the version counter the history uses follows it (W1 below).
//!
//! - READ (read set): an atomic tuple read, then Cond R2 (`tts` is 0 or larger than `ctts`)
//!   and Cond R1 (the version with the largest `wts` smaller than `ctts`; none among the slots
//!   is a slot overflow), then `rts` raised to `ctts`. RPC: the handler does all of it at
//!   once. One-sided: two doorbelled READs of the whole tuple (abort when their `wts` differ),
//!   then, if the latest version was chosen, an RDMA CAS on `rts` (retried while another
//!   reader moved it, never a conflict) doorbelled with a READ of lock and version word.
//! - LOCK (write set): Cond W1 (`ctts` larger than every `wts` and than `rts`, or equal to
//!   `rts` for its own read) and W2 (not locked). One-sided, the double read: READ of `wts`
//!   and `rts`, check W1, then CAS lock + READ of the tuple doorbelled, check W1 again
//!   (abort and release on failure). RPC: the handler, which replies with the latest
//!   version and the slot it will move into.
//! - LOG: the new values to the backups (`ops::log`).
//! - COMMIT: the latest version moves into the oldest slot, the new one becomes the latest
//!   (`wts` = `ctts`), then unlock: WRITEs of the new `wts`, of the displaced version's slot
//!   and of the new version, then of the lock, one doorbell, only the last signaled (never
//!   the whole tuple); or RPC. RELEASE unlocks the write set on an abort.
//!
//! Deviations from the paper (docs/protocols.md has the full list): the latest version lives
//! at the common tuple offsets and the four slots keep the stale ones (the paper's "four
//! slots for stale versions"); a one-sided read of the latest version re-reads lock and
//! version word after raising `rts` (without it, a writer that locked between the tuple read
//! and the CAS commits under a younger reader: not serializable); the tuple carries a copy of
//! its version word at the end of the committed body, so a READ torn by a concurrent commit
//! (atomic per cache line only) is detected; reading an older version does not raise `rts`
//! (the older version's successor already bounds every later writer).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use txbed_checker::Access;
use txbed_transport::{Ctx, Handled, HandlerCtx, HandlerFn, HostMemory, LocalBuf, Op, Payload};
use txbed_workloads::TxnSpec;

use txbed_txn::attempt::{new_history, note_accesses, settle, Attempt};
use txbed_txn::history_key;
use txbed_txn::msg::KeyReq;
use txbed_txn::node::Accesses;
use txbed_txn::node::{NodeState, BUSY, MALFORMED, MISSING, OK};
use txbed_txn::ops::{self, Rec, Tally};
use txbed_txn::participant::{BY_KEY, BY_OFFSET};
use txbed_txn::protocol::{handler_id, in_id_order, Bug, LocalBoxFuture, OptionValues, Protocol, RecoveryFloor};
use txbed_txn::stage::{Hybrid, Stage};
use txbed_txn::store::{self, split_version_word, version_word, TablePlace, LOCK, META_BYTES, VERSION, WRITER};
use txbed_txn::wire::{u64_at, Put, Reader, WireError};
use txbed_txn::TxnError;

pub struct Mvcc;

impl Protocol for Mvcc {
    fn name(&self) -> &'static str {
        "MVCC"
    }
    fn description(&self) -> &'static str {
        "multi-version timestamp ordering with four old versions per tuple (RCC Sec. 4.4)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn bugs(&self) -> &'static [Bug] {
        &[SKIP_RTS]
    }
    fn ext_bytes(&self, record_bytes: u64) -> u64 {
        ext_bytes(record_bytes)
    }
    /// A one-sided READ CASes `rts` (a lost raise is a write skew), as LOCK CASes the lock.
    fn nic_atomics(&self, hybrid: Hybrid) -> bool {
        hybrid.onesided(Stage::Lock) || hybrid.onesided(Stage::Read)
    }
    fn participant(&self, _options: &OptionValues) -> Box<dyn std::any::Any> {
        Box::new(Participant::default())
    }
    /// The lock word is the holder's timestamp, which names its thread (node x workers +
    /// worker) in bits 8..20.
    fn lock_owner_node(&self, word: u64, workers: u16) -> Option<u16> {
        Some((((word >> 8) & 0xfff) / workers.max(1) as u64) as u16)
    }
    /// A recovered tuple keeps only its latest version (the old ones were in volatile memory,
    /// or may be stale): the slots are emptied, and `wts` and `rts` are set beyond every
    /// timestamp issued before, so no reader or writer ordered before the recovery uses it
    /// (their clocks move past it, RCC Sec. 4.4, and they retry).
    fn recover_tuple(&self, place: &TablePlace, tuple: &mut [u8], floor: &RecoveryFloor) {
        let g = Geometry::of(place);
        let safe = (floor.clock_ns() & ((1 << 44) - 1)) << ID_BITS;
        tuple[g.slot(0)..g.wts()].fill(0);
        let word = u64_at(tuple, VERSION as usize);
        tuple[g.wts()..g.wts() + 8].copy_from_slice(&safe.to_le_bytes());
        tuple[g.seq()..g.seq() + 8].copy_from_slice(&word.to_le_bytes());
        tuple[g.rts()..g.rts() + 8].copy_from_slice(&safe.to_le_bytes());
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

/// This node's MVCC state.
fn part(n: &NodeState) -> &Participant {
    n.participant()
}

/// Reads never raise the tuple's `rts` (RCC Sec. 4.4 done wrong): a writer older than a
/// reader can still install the version after the one the reader saw (write skew).
pub const SKIP_RTS: Bug = Bug {
    name: "MvccSkipRts",
    about: "reads never raise rts: an older writer installs a version after the one a younger reader saw (write skew)",
};

/// The stages MVCC has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 5] = [Stage::Lock, Stage::Read, Stage::Log, Stage::Release, Stage::Commit];

/// Stale versions kept per tuple (RCC: "a static number of memory slots (i.e., four)").
pub const SLOTS: usize = 4;

/// RPC handler ids.
pub const H_READ: u16 = handler_id(0);
pub const H_LOCK: u16 = handler_id(1);
pub const H_COMMIT: u16 = handler_id(2);
/// Handler names, for traces.
pub const HANDLER_NAMES: [&str; 3] = ["MVCC_READ", "MVCC_LOCK", "MVCC_COMMIT"];

/// Reply status: Cond W1 failed (a younger transaction read or wrote the record).
pub const TOO_LATE: u8 = 3;
/// Reply status: Cond R1 failed (no slot holds a version old enough).
pub const OVERFLOW: u8 = 4;

/// Tuple extension bytes for a record of `record_bytes` (8-byte aligned): four slots of
/// `wts | version word | writer | record`, then `wts` of the latest version, a copy of its
/// version word, and `rts`.
pub fn ext_bytes(record_bytes: u64) -> u64 {
    SLOTS as u64 * (24 + record_bytes) + 24
}

/// Offsets of MVCC's words in a tuple whose record takes `rec` bytes (8-aligned):
///
/// ```text
/// [ lock=tts | version | writer | record | slot 0..4: wts version writer record | wts | seq | rts ]
/// ```
///
/// The common words (lock, version, writer, record at 24) hold the LATEST committed version;
/// `wts` its writer's timestamp; the slots the stale versions (version word 0 = empty). A
/// commit rewrites `[version, rts)` in one WRITE whose first word (version) and last (`seq`)
/// are equal when nothing tore it; `rts` stays outside it, so readers' CAS on it is never
/// overwritten.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub rec: usize,
}

impl Geometry {
    pub fn of(place: &TablePlace) -> Geometry {
        Geometry { rec: (place.ext_at - META_BYTES) as usize }
    }
    pub fn ext_at(self) -> usize {
        META_BYTES as usize + self.rec
    }
    pub fn slot_bytes(self) -> usize {
        24 + self.rec
    }
    pub fn slot(self, i: usize) -> usize {
        self.ext_at() + i * self.slot_bytes()
    }
    pub fn wts(self) -> usize {
        self.slot(SLOTS)
    }
    pub fn seq(self) -> usize {
        self.wts() + 8
    }
    pub fn rts(self) -> usize {
        self.wts() + 16
    }
    pub fn tuple_bytes(self) -> usize {
        self.rts() + 8
    }
    /// The bytes a commit writes: `[VERSION, rts)`.
    pub fn body(self) -> std::ops::Range<usize> {
        VERSION as usize..self.rts()
    }
}

/// One committed version of a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// Timestamp of the transaction that installed it (0 for the initial load).
    pub wts: u64,
    /// Version word (incarnation, counter): the counter is what the history records.
    pub word: u64,
    pub writer: u64,
    pub record: Vec<u8>,
    /// Whether it is the latest version (at the common offsets).
    pub latest: bool,
}

impl Version {
    pub fn counter(&self) -> u64 {
        split_version_word(self.word).1
    }
}

/// The versions a tuple holds: the latest first, then every non-empty slot.
pub fn versions(g: Geometry, t: &[u8]) -> Vec<Version> {
    let at = META_BYTES as usize;
    let mut v = vec![Version {
        wts: u64_at(t, g.wts()),
        word: u64_at(t, VERSION as usize),
        writer: u64_at(t, WRITER as usize),
        record: t[at..at + g.rec].to_vec(),
        latest: true,
    }];
    for i in 0..SLOTS {
        let s = g.slot(i);
        let word = u64_at(t, s + 8);
        if word != 0 {
            v.push(Version {
                wts: u64_at(t, s),
                word,
                writer: u64_at(t, s + 16),
                record: t[s + 24..s + 24 + g.rec].to_vec(),
                latest: false,
            });
        }
    }
    v
}

/// Whether a tuple read is not torn by a commit: the version word at its start equals the
/// copy at the end of the committed body (a tuple never committed has no copy yet).
pub fn consistent(g: Geometry, t: &[u8]) -> bool {
    let (word, seq) = (u64_at(t, VERSION as usize), u64_at(t, g.seq()));
    seq == word || (seq == 0 && split_version_word(word).1 == 0 && u64_at(t, g.wts()) == 0)
}

/// The paper's double-read check: both reads saw the same `wts` of every version.
pub fn same_wts(g: Geometry, a: &[u8], b: &[u8]) -> bool {
    (0..SLOTS).map(|i| g.slot(i)).chain([g.wts()]).all(|o| a[o..o + 8] == b[o..o + 8])
}

/// Cond R2: no uncommitted writer, or one that comes after the reader.
pub fn r2(lock: u64, ctts: u64) -> bool {
    lock == 0 || lock > ctts
}

/// Cond R1: the version with the largest `wts` smaller than `ctts`; `None` is a slot overflow
/// (every version kept is younger than the reader).
pub fn r1(g: Geometry, t: &[u8], ctts: u64) -> Option<Version> {
    versions(g, t).into_iter().filter(|v| v.wts < ctts).max_by_key(|v| v.wts)
}

/// Cond W1 on a tuple: [`w1_words`] of its latest `wts` and its `rts`.
pub fn w1(g: Geometry, t: &[u8], ctts: u64) -> bool {
    w1_words(u64_at(t, g.wts()), u64_at(t, g.rts()), ctts)
}

/// Cond W1: `ctts` after every committed write (the latest has the largest `wts`) and after
/// every read. `rts == ctts` is the transaction's own read (timestamps are unique), which
/// its write may follow.
pub fn w1_words(wts: u64, rts: u64, ctts: u64) -> bool {
    ctts > wts && ctts >= rts
}

/// The slot a commit moves the latest version of tuple `t` into: an empty one first, else
/// the one holding the oldest version (RCC: "overwrites the oldest wts").
pub fn oldest_slot(g: Geometry, t: &[u8]) -> usize {
    (0..SLOTS)
        .find(|&i| u64_at(t, g.slot(i) + 8) == 0)
        .unwrap_or_else(|| (0..SLOTS).min_by_key(|&i| u64_at(t, g.slot(i))).expect("slots"))
}

/// The latest version of tuple `t` (at the common offsets).
pub fn latest(g: Geometry, t: &[u8]) -> Version {
    let at = META_BYTES as usize;
    Version {
        wts: u64_at(t, g.wts()),
        word: u64_at(t, VERSION as usize),
        writer: u64_at(t, WRITER as usize),
        record: t[at..at + g.rec].to_vec(),
        latest: true,
    }
}

/// The WRITEs of a commit (RCC Sec. 4.4) of `record` by transaction `writer` at `ctts` over a
/// tuple whose latest version `old` moves into `slot`: `(offset in the tuple, bytes)`, in the
/// order they must land.
///
/// 1. `wts | seq` of the new version: the end of the committed body (16 B);
/// 2. `old` into its slot: `wts | version | writer | record` (24 + R B);
/// 3. the new version at the common offsets: `version | writer | record` (16 + R B), the
///    start of the body.
///
/// RCC writes the new record and its `wts` into the oldest slot; here the latest version
/// lives at the common offsets, so the version it displaces moves into the slot instead. No
/// other byte of the tuple changes. A READ samples cache lines in address order and WRITEs on
/// one QP land in order, so a READ that saw the new version word saw every line after it
/// new, and one that saw the old `seq` saw every line before it old: [`consistent`] rejects
/// every other mix. A record shorter than the slot keeps `old`'s bytes after it.
pub fn commit_writes(
    g: Geometry,
    old: &Version,
    slot: usize,
    ctts: u64,
    writer: u64,
    record: &[u8],
) -> [(usize, Vec<u8>); 3] {
    let (inc, counter) = split_version_word(old.word);
    let word = version_word(inc, counter + 1);
    let n = record.len().min(g.rec);
    let mut tail = Vec::with_capacity(16);
    tail.put_u64(ctts);
    tail.put_u64(word);
    let mut moved = Vec::with_capacity(24 + g.rec);
    for w in [old.wts, old.word, old.writer] {
        moved.put_u64(w);
    }
    moved.put_bytes(&old.record[..g.rec]);
    let mut head = Vec::with_capacity(16 + g.rec);
    head.put_u64(word);
    head.put_u64(writer);
    head.put_bytes(&record[..n]);
    head.put_bytes(&old.record[n..g.rec]);
    [(g.wts(), tail), (g.slot(slot), moved), (VERSION as usize, head)]
}

/// The bytes `[VERSION, rts)` of tuple `t` after a commit of `record` by `writer` at `ctts`
/// ([`commit_writes`] applied: what the RPC COMMIT handler writes).
pub fn install(g: Geometry, t: &[u8], ctts: u64, writer: u64, record: &[u8]) -> Vec<u8> {
    let mut b = t[g.body()].to_vec();
    for (at, bytes) in commit_writes(g, &latest(g, t), oldest_slot(g, t), ctts, writer, record) {
        let at = at - VERSION as usize;
        b[at..at + bytes.len()].copy_from_slice(&bytes);
    }
    b
}

/// Low bits of a timestamp holding node/worker and coroutine (WAITDIE's organisation).
pub const ID_BITS: u32 = 20;

/// A timestamp: `clock` in the high 44 bits, then node x workers + worker (12 bits) and the
/// coroutine (8 bits). Unique, and never 0 when `clock` > 0 (0 is a free lock).
pub fn timestamp(clock: u64, node: u16, worker: u16, workers: u16, coroutine: u32) -> u64 {
    let thread = node as u64 * workers as u64 + worker as u64;
    ((clock & ((1 << 44) - 1)) << ID_BITS) | ((thread & 0xfff) << 8) | (coroutine as u64 & 0xff)
}

/// The clock a timestamp carries.
pub fn clock_of(ts: u64) -> u64 {
    ts >> ID_BITS
}

/// Why an attempt aborted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Abort {
    /// The two reads of a tuple differ in `wts`, or one was torn by a commit.
    Torn = 0,
    /// Cond R2: locked by an older writer.
    ReadLocked = 1,
    /// Cond R1: no slot holds a version older than the reader.
    SlotOverflow = 2,
    /// After raising `rts`, the tuple was locked by an older writer or had a new version.
    ReadChanged = 3,
    /// Cond W1, before or after locking.
    WriteTooLate = 4,
    /// Cond W2: locked.
    WriteLocked = 5,
}

pub const ABORT_NAMES: [&str; 6] = [
    "torn read",
    "read: locked (R2)",
    "read: slot overflow (R1)",
    "read: changed",
    "write: too late (W1)",
    "write: locked (W2)",
];

/// Participant-side state of MVCC on one node: each coordinator coroutine's clock
/// adjustment, and counters.
#[derive(Default)]
pub struct Participant {
    /// Per (worker, coroutine): how far its clock was moved ahead of the local clock by
    /// timestamps seen (RCC 4.4), and the last clock value it used.
    clocks: RefCell<BTreeMap<(u16, u32), (u64, u64)>>,
    /// Aborts by [`Abort`] reason.
    pub aborts: RefCell<[u64; 6]>,
    /// Reads that returned a version older than the latest.
    pub old_reads: Cell<u64>,
}

impl Participant {
    pub fn aborts(&self) -> Vec<(&'static str, u64)> {
        ABORT_NAMES.iter().copied().zip(self.aborts.borrow().iter().copied()).collect()
    }
}

/// The next timestamp of this coroutine: its adjusted clock, strictly after its last one.
fn next_ts(ctx: &Ctx, n: &NodeState) -> Result<u64, TxnError> {
    let (w, c, workers) = (ctx.me().worker, ctx.coroutine(), ctx.workers());
    if n.me as u64 * workers as u64 + w as u64 >= 1 << 12 || c >= 1 << 8 {
        return Err(TxnError::Unsupported("MVCC timestamps hold 12 bits of node x worker and 8 of coroutine"));
    }
    let mut clocks = part(n).clocks.borrow_mut();
    let (ahead, last) = clocks.entry((w, c)).or_default();
    let clock = (ctx.now() + *ahead).max(*last + 1);
    *last = clock;
    Ok(timestamp(clock, n.me, w, workers, c))
}

/// Moves this coroutine's clock ahead to a timestamp seen in a tuple (RCC 4.4).
fn observe(ctx: &Ctx, n: &NodeState, ts: u64) {
    let mut clocks = part(n).clocks.borrow_mut();
    let (ahead, _) = clocks.entry((ctx.me().worker, ctx.coroutine())).or_default();
    let local = ctx.now() + *ahead;
    if clock_of(ts) > local {
        *ahead += clock_of(ts) - local;
    }
}

/// Trace category of MVCC's instants (abort reasons, older versions read).
pub const TRACE: &str = "mvcc";

fn abort(ctx: &Ctx, n: &NodeState, why: Abort) -> Attempt {
    part(n).aborts.borrow_mut()[why as usize] += 1;
    let now = ctx.now();
    ctx.trace_slice(ABORT_NAMES[why as usize], TRACE, now, now);
    Attempt::Conflict(ABORT_NAMES[why as usize])
}

fn geometry(n: &NodeState, table: u16) -> Geometry {
    n.catalog.layout.table(table).map(Geometry::of).unwrap_or(Geometry { rec: 0 })
}

async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let mut recs = ops::records(n, spec);
    let ctts = match next_ts(ctx, n) {
        Ok(ts) => ts,
        Err(e) => return Attempt::Failed(e),
    };
    let r = run(ctx, n, spec, id, ctts, &mut recs).await;
    settle(ctx, n, r, &recs, id, ctts).await
}

async fn run(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    id: u64,
    ctts: u64,
    recs: &mut [Rec],
) -> Result<Attempt, TxnError> {
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    // Should it abort, its history entry lists the versions it read as it read them (old
    // versions: its records' tuples show the latest), not as `settle` would from `recs`.
    note_accesses(n, id, Accesses::default());
    // Read set: R1/R2 and rts.
    let seen = match read_set(ctx, n, recs, ctts).await? {
        Ok(seen) => seen,
        Err(why) => return Ok(abort(ctx, n, why)),
    };
    let mut acc = Accesses::default();
    for (r, v) in recs.iter().filter(|r| !r.write).zip(&seen) {
        acc.reads.push(Access { key: history_key(r.table, r.key), version: v.counter() });
    }
    note_accesses(n, id, acc.clone());
    // Write set: W1/W2 and the lock.
    let held = match lock_set(ctx, n, recs, ctts).await? {
        Ok(held) => held,
        Err(why) => {
            ops::release(ctx, n, recs, |r| r.write, ctts).await?;
            return Ok(abort(ctx, n, why));
        }
    };
    for (r, held) in recs.iter().filter(|r| r.write).zip(&held) {
        let key = history_key(r.table, r.key);
        acc.reads.push(Access { key, version: held.old.counter() });
        acc.writes.push(Access { key, version: held.old.counter() + 1 });
    }
    note_accesses(n, id, acc);
    let olds: Vec<&[u8]> = held.iter().map(|h| h.old.record.as_slice()).collect();
    let reads: Vec<&[u8]> = seen.iter().map(|v| v.record.as_slice()).collect();
    ctx.compute(spec.compute_ns);
    let (new_values, delta) = match txbed_txn::attempt::logic(ctx, n, spec, &reads, &olds) {
        Some(out) => out,
        None => {
            ops::release(ctx, n, recs, |r| r.write, ctts).await?;
            return Ok(Attempt::UserAbort);
        }
    };
    let mut h = new_history(ctx, n, spec, id, start_ns);
    for (r, v) in recs.iter().filter(|r| !r.write).zip(&seen) {
        h.reads.push(Access { key: history_key(r.table, r.key), version: v.counter() });
    }
    for (r, held) in recs.iter().filter(|r| r.write).zip(&held) {
        let key = history_key(r.table, r.key);
        let ver = held.old.counter();
        h.reads.push(Access { key, version: ver });
        h.writes.push(Access { key, version: ver + 1 });
    }
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        ops::abandon(ctx, n, recs, ctts).await;
        return Ok(Attempt::Conflict(txbed_txn::attempt::cause::VIEW_CHANGED));
    }
    ops::log(ctx, n, recs, &new_values, id).await?;
    commit(ctx, n, recs, &held, &new_values, ctts, id).await?;
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}

/// Verdict of a stage: `Ok(Err(why))` aborts, `Err` is a failed verb or RPC.
type Staged<T> = Result<Result<T, Abort>, TxnError>;

/// Scratch areas, as ops.rs: the first half holds the READ and LOCK stages' buffers, the
/// last quarter commit bodies (the third quarter is the log's). Offsets from the scratch
/// start: `(stage area length, staging start, staging end)`.
fn areas(ctx: &Ctx) -> (u64, u64, u64) {
    let s = ctx.scratch();
    (ops::buffers_end(ctx) - s.addr, ops::staging_at(ctx) - s.addr, s.len as u64)
}

/// READ stage: the version of every read-set record that R1 picks, in read-set order.
async fn read_set(ctx: &Ctx, n: &NodeState, recs: &mut [Rec], ctts: u64) -> Staged<Vec<Version>> {
    if recs.iter().all(|r| r.write) {
        return Ok(Ok(Vec::new()));
    }
    let t0 = ctx.now();
    let out = if n.hybrid.onesided(Stage::Read) {
        read_onesided(ctx, n, recs, ctts).await?
    } else {
        read_rpc(ctx, n, recs, ctts).await?
    };
    let (result, round_trips, t) = out;
    ops::account(ctx, n, Stage::Read, t0, round_trips, t.bytes, t.local);
    if let Ok(seen) = &result {
        let old = seen.iter().filter(|v| !v.latest).count() as u64;
        part(n).old_reads.set(part(n).old_reads.get() + old);
        if old > 0 {
            let now = ctx.now();
            ctx.trace_slice_args("older versions read", TRACE, now, now, &[("count", old)]);
        }
    }
    Ok(result)
}

/// What a stage did: its verdict, its round trips (batches that went through the NIC) and
/// what it sent.
type Done<T> = (Result<T, Abort>, u64, Tally);

/// One-sided READ: two doorbelled READs of each tuple, R2 and R1 locally, then for each
/// record whose latest version was picked, CAS `rts` up to `ctts` with a READ of lock and
/// version word behind it on the same QP (executed after the CAS).
async fn read_onesided(ctx: &Ctx, n: &NodeState, recs: &mut [Rec], ctts: u64) -> Result<Done<Vec<Version>>, TxnError> {
    ops::locate_all(ctx, n, recs, |r| !r.write).await?;
    let s = ctx.scratch();
    let idx: Vec<usize> = (0..recs.len()).filter(|&i| !recs[i].write).collect();
    let mut t = Tally::default();
    // A batch is a round trip if any of its requests went through the NIC.
    let mut round_trips = 0u64;
    let mut batch_from = 0u64;
    // (record, first read, second read), filled as each batch completes.
    let mut snaps: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut posted: Vec<(usize, u64, u64)> = Vec::new();
    let mut at = s.addr;
    let (area, _, _) = areas(ctx);
    for &i in &idx {
        let len = ops::tuple_bytes(n, recs[i].table) as u64;
        if 2 * len > area {
            return Err(TxnError::TooBig {
                what: "two tuple copies",
                bytes: 2 * len,
                limit: area,
                within: "buffer area",
            });
        }
        if at + 2 * len > s.addr + area {
            // The area is full: collect what was read, then reuse it.
            ctx.wait().await?;
            harvest(ctx, &mut posted, &mut snaps)?;
            at = s.addr;
            round_trips += (t.sent > batch_from) as u64;
            batch_from = t.sent;
        }
        let r = &recs[i];
        let remote = n.catalog.remote(r.home, r.offset, len as u32);
        let a = Op::Read { local: LocalBuf { lkey: s.lkey, addr: at, len: len as u32 }, remote };
        let b = Op::Read { local: LocalBuf { lkey: s.lkey, addr: at + len, len: len as u32 }, remote };
        // The first READ is confirmed by the second's completion (FIFO on the QP).
        t.add(ops::issue(ctx, n, r, vec![(a, false), (b, true)]).await?, 2 * len);
        if !n.rdma.speculative {
            ctx.wait().await?;
        }
        posted.push((i, at, len));
        at += 2 * len;
    }
    ctx.wait().await?;
    harvest(ctx, &mut posted, &mut snaps)?;
    round_trips += (t.sent > batch_from) as u64;
    snaps.sort_by_key(|(i, _, _)| *i);

    let mut seen = Vec::with_capacity(snaps.len());
    // Records whose latest version was picked: (record, rts seen, version word seen).
    let mut raise: Vec<(usize, u64, u64)> = Vec::new();
    for (i, a, b) in &snaps {
        let r = &mut recs[*i];
        let g = geometry(n, r.table);
        // RCC: only the wts must match between the two reads; the copy of the version word
        // catches a READ torn inside (cache-line atomicity only).
        if !same_wts(g, a, b) || !consistent(g, a) || !consistent(g, b) {
            return Ok((Err(Abort::Torn), round_trips, t));
        }
        observe(ctx, n, u64_at(b, g.wts()));
        observe(ctx, n, u64_at(b, g.rts()));
        if !r2(u64_at(b, LOCK as usize), ctts) {
            return Ok((Err(Abort::ReadLocked), round_trips, t));
        }
        let Some(v) = r1(g, b, ctts) else { return Ok((Err(Abort::SlotOverflow), round_trips, t)) };
        if v.latest {
            raise.push((*i, u64_at(b, g.rts()), v.word));
        }
        r.tuple = b.clone();
        seen.push(v);
    }
    if n.bug == Some(SKIP_RTS) {
        raise.clear();
    }
    // Raise rts to ctts (CAS, retried while other readers move it), then check that no older
    // writer locked the tuple and no new version appeared before rts covered ctts.
    while !raise.is_empty() {
        let round_from = t.sent;
        let mut at = s.addr;
        let mut slots = Vec::new();
        for &(i, rts, _) in &raise {
            let r = &recs[i];
            let g = geometry(n, r.table);
            let mut list = Vec::new();
            if rts < ctts {
                // A sentinel no rts takes, so a result that never arrived cannot pass for one.
                ctx.store_local(at, NO_RESULT)?;
                let cas = Op::Cas {
                    local: LocalBuf { lkey: s.lkey, addr: at, len: 8 },
                    remote: n.catalog.remote(r.home, r.offset + g.rts() as u64, 8),
                    compare: rts,
                    swap: ctts,
                };
                list.push((cas, false));
            }
            let check = Op::Read {
                local: LocalBuf { lkey: s.lkey, addr: at + 8, len: 16 },
                remote: n.catalog.remote(r.home, r.offset + LOCK, 16),
            };
            list.push((check, true));
            let len = 8 * (list.len() as u64 - 1) + 16;
            t.add(ops::issue(ctx, n, r, list).await?, len);
            slots.push(at);
            at += 24;
        }
        round_trips += (t.sent > round_from) as u64;
        ctx.wait().await?;
        let mut again = Vec::new();
        for (&(i, rts, word), at) in raise.iter().zip(slots) {
            if rts < ctts {
                let old = cas_result(ctx, at, "MVCC CAS on rts")?;
                observe(ctx, n, old);
                if old != rts && old < ctts {
                    // Another reader moved rts, not past ctts: not a conflict, retry.
                    again.push((i, old, word));
                    continue;
                }
            }
            let lock = ctx.load_local(at + 8)?;
            let now_word = ctx.load_local(at + 16)?;
            if !r2(lock, ctts) || now_word != word {
                return Ok((Err(Abort::ReadChanged), round_trips, t));
            }
        }
        raise = again;
    }
    Ok((Ok(seen), round_trips, t))
}

/// Copies completed double reads out of the scratch.
fn harvest(
    ctx: &Ctx,
    posted: &mut Vec<(usize, u64, u64)>,
    snaps: &mut Vec<(usize, Vec<u8>, Vec<u8>)>,
) -> Result<(), TxnError> {
    for (i, at, len) in posted.drain(..) {
        let mut a = vec![0; len as usize];
        let mut b = vec![0; len as usize];
        ctx.read_local(at, &mut a)?;
        ctx.read_local(at + len, &mut b)?;
        snaps.push((i, a, b));
    }
    Ok(())
}

/// Request of the READ and LOCK handlers: `table u16 | pad 6 | key u64 | ctts u64`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TsReq {
    pub table: u16,
    pub key: u64,
    pub ctts: u64,
}

impl TsReq {
    fn of(r: &Rec, ctts: u64) -> TsReq {
        TsReq { table: r.table, key: r.key, ctts }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        KeyReq { table: self.table, key: self.key }.encode_into(&mut out);
        out.put_u64(self.ctts);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let KeyReq { table, key } = KeyReq::read(&mut r)?;
        let ctts = r.u64()?;
        r.finish()?;
        Ok(TsReq { table, key, ctts })
    }
}

/// The replies of READ and LOCK: `MISSING` alone, or `status u8 | wts u64 | rts u64` (the
/// tuple's latest `wts` and its `rts`, which move the reader's clock, whatever the outcome),
/// then on OK the stage's result `T`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply<T> {
    Missing,
    Seen { wts: u64, rts: u64, outcome: Result<T, Abort> },
}

/// READ's result on OK: `offset u64 | wts u64 | version word u64 | writer u64 | latest u8 |
/// record` (the version R1 picked); BUSY is Cond R2, OVERFLOW Cond R1.
pub type ReadReply = Reply<(u64, Version)>;

/// LOCK's result on OK: `offset u64 | slot u8 | version word u64 | writer u64 | record`: the
/// latest version (its `wts` is the reply's) and the slot a commit moves it into, read under
/// the lock; BUSY is Cond W2, TOO_LATE Cond W1.
pub type LockReply = Reply<Locked>;

/// What an OK LOCK reply carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locked {
    pub offset: u64,
    pub slot: usize,
    pub word: u64,
    pub writer: u64,
    pub record: Vec<u8>,
}

impl<T> Reply<T> {
    fn encode_with(&self, out: &mut Vec<u8>, fail: fn(Abort) -> u8, body: impl FnOnce(&T, &mut Vec<u8>)) {
        let Reply::Seen { wts, rts, outcome } = self else { return out.put_u8(MISSING) };
        out.put_u8(outcome.as_ref().map_or_else(|why| fail(*why), |_| OK));
        out.put_u64(*wts);
        out.put_u64(*rts);
        if let Ok(t) = outcome {
            body(t, out);
        }
    }

    fn decode_with(
        b: &[u8],
        fail: fn(u8) -> Option<Abort>,
        body: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>,
    ) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let status = r.u8()?;
        match status {
            MISSING => return r.finish().map(|()| Reply::Missing),
            MALFORMED => return Err(WireError::Rejected),
            _ => {}
        }
        let (wts, rts) = (r.u64()?, r.u64()?);
        let outcome = match status {
            OK => Ok(body(&mut r)?),
            s => Err(fail(s).ok_or(WireError::Status(s))?),
        };
        r.finish()?;
        Ok(Reply::Seen { wts, rts, outcome })
    }
}

impl ReadReply {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let fail = |why| if why == Abort::ReadLocked { BUSY } else { OVERFLOW };
        self.encode_with(out, fail, |(offset, v), out| {
            for w in [*offset, v.wts, v.word, v.writer] {
                out.put_u64(w);
            }
            out.put_u8(v.latest as u8);
            out.put_bytes(&v.record);
        });
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let fail = |s| match s {
            BUSY => Some(Abort::ReadLocked),
            OVERFLOW => Some(Abort::SlotOverflow),
            _ => None,
        };
        Self::decode_with(b, fail, |r| {
            let (offset, wts, word, writer) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            let latest = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(WireError::Invalid("MVCC read reply: latest is not 0 or 1")),
            };
            Ok((offset, Version { wts, word, writer, record: r.rest().to_vec(), latest }))
        })
    }
}

impl LockReply {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let fail = |why| if why == Abort::WriteLocked { BUSY } else { TOO_LATE };
        self.encode_with(out, fail, |l, out| {
            out.put_u64(l.offset);
            out.put_u8(l.slot as u8);
            out.put_u64(l.word);
            out.put_u64(l.writer);
            out.put_bytes(&l.record);
        });
    }

    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let fail = |s| match s {
            BUSY => Some(Abort::WriteLocked),
            TOO_LATE => Some(Abort::WriteTooLate),
            _ => None,
        };
        Self::decode_with(b, fail, |r| {
            let (offset, slot, word, writer) = (r.u64()?, r.u8()? as usize, r.u64()?, r.u64()?);
            Ok(Locked { offset, slot, word, writer, record: r.rest().to_vec() })
        })
    }
}

/// COMMIT's request: `table u16 | pad 6 | offset u64 | ctts u64 | writer u64 | record`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CommitReq<'a> {
    pub table: u16,
    pub offset: u64,
    pub ctts: u64,
    pub writer: u64,
    pub record: &'a [u8],
}

impl<'a> CommitReq<'a> {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.record.len());
        KeyReq { table: self.table, key: self.offset }.encode_into(&mut out);
        out.put_u64(self.ctts);
        out.put_u64(self.writer);
        out.put_bytes(self.record);
        out
    }

    pub fn decode(b: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(b);
        let KeyReq { table, key: offset } = KeyReq::read(&mut r)?;
        let (ctts, writer) = (r.u64()?, r.u64()?);
        Ok(CommitReq { table, offset, ctts, writer, record: r.rest() })
    }
}

/// RPC READ: the handler reads the tuple, checks R2 and R1 and raises rts in one go.
async fn read_rpc(ctx: &Ctx, n: &NodeState, recs: &mut [Rec], ctts: u64) -> Result<Done<Vec<Version>>, TxnError> {
    let mut calls = Vec::new();
    let mut t = Tally::default();
    for (i, r) in recs.iter().enumerate().filter(|(_, r)| !r.write) {
        calls.push((i, ops::call(ctx, n, r.home, H_READ, &TsReq::of(r, ctts).encode()).await?));
        if !n.rdma.speculative {
            ctx.wait().await?;
        }
    }
    ctx.wait().await?;
    let mut seen = Vec::new();
    let mut verdict = Ok(());
    for (i, call) in calls {
        let r = &mut recs[i];
        let rep = ops::reply(ctx, call, "MVCC_READ")?;
        let Reply::Seen { wts, rts, outcome } = ReadReply::decode(&rep)? else {
            return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key });
        };
        observe(ctx, n, wts);
        observe(ctx, n, rts);
        t.add(ops::rpc_path(n, r.home), 24 + rep.len() as u64);
        match outcome {
            Ok((offset, v)) => {
                r.offset = offset;
                seen.push(v);
            }
            Err(why) => verdict = verdict.and(Err(why)),
        }
    }
    ctx.clear_replies();
    Ok((verdict.map(|_| seen), t.round_trips(), t))
}

/// A write-set record under this transaction's lock: its latest version (which the commit
/// displaces) and the slot that version moves into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub old: Version,
    pub slot: usize,
}

/// LOCK stage: locks every write-set record after Cond W1 and W2; the records held, in
/// write-set order, or why the attempt aborts (the caller releases what was locked).
async fn lock_set(ctx: &Ctx, n: &NodeState, recs: &mut [Rec], ctts: u64) -> Staged<Vec<Held>> {
    if !recs.iter().any(|r| r.write) {
        return Ok(Ok(Vec::new()));
    }
    recs.iter_mut().filter(|r| r.write).for_each(|r| r.asked = true);
    let t0 = ctx.now();
    let (result, round_trips, t) = if n.hybrid.onesided(Stage::Lock) {
        lock_onesided(ctx, n, recs, ctts).await?
    } else {
        lock_rpc(ctx, n, recs, ctts).await?
    };
    ops::account(ctx, n, Stage::Lock, t0, round_trips, t.bytes, t.local);
    Ok(result)
}

/// One-sided LOCK, the double-read mechanism: READ wts and rts, check W1; CAS the lock and
/// READ the tuple (doorbelled); check W1 again on what the READ returned.
async fn lock_onesided(ctx: &Ctx, n: &NodeState, recs: &mut [Rec], ctts: u64) -> Result<Done<Vec<Held>>, TxnError> {
    ops::locate_all(ctx, n, recs, |r| r.write && r.tuple.is_empty()).await?;
    let s = ctx.scratch();
    let idx: Vec<usize> = (0..recs.len()).filter(|&i| recs[i].write).collect();
    let mut t = Tally::default();
    // First read: wts | seq | rts.
    let mut at = s.addr;
    for &i in &idx {
        let r = &recs[i];
        let g = geometry(n, r.table);
        let read = Op::Read {
            local: LocalBuf { lkey: s.lkey, addr: at, len: 24 },
            remote: n.catalog.remote(r.home, r.offset + g.wts() as u64, 24),
        };
        t.add(ops::issue(ctx, n, r, vec![(read, true)]).await?, 24);
        at += 24;
    }
    // Each batch that went through the NIC is a round trip.
    let mut round_trips = t.round_trips();
    let mut batch_from = t.sent;
    ctx.wait().await?;
    let mut too_late = false;
    for k in 0..idx.len() {
        let at = s.addr + 24 * k as u64;
        let wts = ctx.load_local(at)?;
        let rts = ctx.load_local(at + 16)?;
        observe(ctx, n, wts);
        observe(ctx, n, rts);
        too_late |= !w1_words(wts, rts, ctts);
    }
    if too_late {
        return Ok((Err(Abort::WriteTooLate), round_trips, t));
    }
    // Second read: CAS + READ of the whole tuple, in batches that fit the area.
    let mut posted: Vec<(usize, u64, u64)> = Vec::new();
    let mut at = s.addr;
    let (area, _, _) = areas(ctx);
    for &i in &idx {
        let len = ops::tuple_bytes(n, recs[i].table) as u64;
        if 8 + len > area {
            return Err(TxnError::TooBig { what: "lock buffer", bytes: 8 + len, limit: area, within: "buffer area" });
        }
        if at + 8 + len > s.addr + area {
            ctx.wait().await?;
            harvest_locks(ctx, recs, &mut posted)?;
            at = s.addr;
            round_trips += (t.sent > batch_from) as u64;
            batch_from = t.sent;
        }
        let r = &recs[i];
        // A sentinel, so a result that never arrived cannot read as "was free".
        ctx.store_local(at, NO_RESULT)?;
        let cas = Op::Cas {
            local: LocalBuf { lkey: s.lkey, addr: at, len: 8 },
            remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            compare: 0,
            swap: ctts,
        };
        let read = Op::Read {
            local: LocalBuf { lkey: s.lkey, addr: at + 8, len: len as u32 },
            remote: n.catalog.remote(r.home, r.offset, len as u32),
        };
        t.add(ops::issue(ctx, n, r, vec![(cas, false), (read, true)]).await?, 8 + len);
        posted.push((i, at, len));
        at += 8 + len;
    }
    ctx.wait().await?;
    harvest_locks(ctx, recs, &mut posted)?;
    round_trips += (t.sent > batch_from) as u64;
    let mut why = None;
    let mut held = Vec::with_capacity(idx.len());
    for &i in &idx {
        let r = &recs[i];
        let g = geometry(n, r.table);
        if !r.locked {
            why = why.or(Some(Abort::WriteLocked));
            continue;
        }
        observe(ctx, n, u64_at(&r.tuple, g.wts()));
        observe(ctx, n, u64_at(&r.tuple, g.rts()));
        // Under the lock nothing commits, so the READ after the CAS is not torn; check anyway.
        if !consistent(g, &r.tuple) {
            why = why.or(Some(Abort::Torn));
        } else if !w1(g, &r.tuple, ctts) {
            why = why.or(Some(Abort::WriteTooLate));
        }
        held.push(Held { old: latest(g, &r.tuple), slot: oldest_slot(g, &r.tuple) });
    }
    Ok((why.map_or(Ok(held), Err), round_trips, t))
}

/// What a CAS's result buffer holds before the result lands: no lock word or `rts` (both
/// timestamps) takes this value.
const NO_RESULT: u64 = u64::MAX;

/// The result of a CAS posted (unsignaled) with `NO_RESULT` at `at`, once a later request on
/// its QP completed. Per-QP order puts it in place by then (RC semantics, checked by
/// `verbs_semantics::deferred_atomic_keeps_its_qp_in_order`); if it is missing anyway, the
/// attempt fails loudly rather than take a lock it may hold for free, or leak it.
fn cas_result(ctx: &Ctx, at: u64, what: &'static str) -> Result<u64, TxnError> {
    match ctx.load_local(at)? {
        NO_RESULT => Err(TxnError::NoReply(what)),
        old => Ok(old),
    }
}

fn harvest_locks(ctx: &Ctx, recs: &mut [Rec], posted: &mut Vec<(usize, u64, u64)>) -> Result<(), TxnError> {
    for (i, at, len) in posted.drain(..) {
        let r = &mut recs[i];
        r.locked = cas_result(ctx, at, "MVCC CAS on the lock")? == 0;
        r.tuple = vec![0; len as usize];
        ctx.read_local(at + 8, &mut r.tuple)?;
    }
    Ok(())
}

/// RPC LOCK: the handler checks W1, locks (W2) and replies with the latest version and the
/// slot a commit moves it into (RCC: "a new record is created and sent back").
async fn lock_rpc(ctx: &Ctx, n: &NodeState, recs: &mut [Rec], ctts: u64) -> Result<Done<Vec<Held>>, TxnError> {
    let mut calls = Vec::new();
    for (i, r) in recs.iter().enumerate().filter(|(_, r)| r.write) {
        calls.push((i, ops::call(ctx, n, r.home, H_LOCK, &TsReq::of(r, ctts).encode()).await?));
    }
    ctx.wait().await?;
    let mut why = None;
    let mut held = Vec::with_capacity(calls.len());
    let mut t = Tally::default();
    for (i, call) in calls {
        let r = &mut recs[i];
        let rep = ops::reply(ctx, call, "MVCC_LOCK")?;
        let Reply::Seen { wts, rts, outcome } = LockReply::decode(&rep)? else {
            return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key });
        };
        observe(ctx, n, wts);
        observe(ctx, n, rts);
        t.add(ops::rpc_path(n, r.home), 24 + rep.len() as u64);
        match outcome {
            Ok(Locked { offset, slot, word, writer, record }) => {
                if slot >= SLOTS || record.len() != geometry(n, r.table).rec {
                    return Err(WireError::Invalid("MVCC lock reply: no such slot, or a record of another size").into());
                }
                r.locked = true;
                r.offset = offset;
                // The tuple's head as the lock left it, for what reads it (the log's version).
                let mut head = Vec::with_capacity(META_BYTES as usize + record.len());
                for w in [ctts, word, writer] {
                    head.put_u64(w);
                }
                head.put_bytes(&record);
                r.tuple = head;
                held.push(Held { old: Version { wts, word, writer, record, latest: true }, slot });
            }
            Err(w) => why = why.or(Some(w)),
        }
    }
    ctx.clear_replies();
    Ok((why.map_or(Ok(held), Err), t.round_trips(), t))
}

/// COMMIT (RCC Sec. 4.4): installs each new value (wts = ctts; the displaced latest version
/// into its slot) and unlocks. One-sided: the WRITEs of [`commit_writes`], then the unlock
/// WRITE, in one doorbell per record, only the last signaled. RPC: the handler does the same
/// in the participant's memory. With faults, a commit that failed is sent again by RPC until
/// its home answers or is no longer up (the handler commits only while `ctts` holds the lock).
async fn commit(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    held: &[Held],
    new_values: &[Vec<u8>],
    ctts: u64,
    id: u64,
) -> Result<(), TxnError> {
    match commit_once(ctx, n, recs, held, new_values, ctts, id).await {
        Err(e) if n.recovery.is_some() && e.unreachable_node().is_some() => {
            let calls = recs
                .iter()
                .filter(|r| r.write)
                .zip(new_values)
                .map(|(r, v)| {
                    let req = CommitReq { table: r.table, offset: r.offset, ctts, writer: id, record: v }.encode();
                    (r.home, H_COMMIT, req)
                })
                .collect();
            ops::until_answered(ctx, n, id, calls).await;
            Ok(())
        }
        other => other,
    }
}

#[allow(clippy::too_many_arguments)]
async fn commit_once(
    ctx: &Ctx,
    n: &NodeState,
    recs: &[Rec],
    held: &[Held],
    new_values: &[Vec<u8>],
    ctts: u64,
    id: u64,
) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let mut t = Tally::default();
    debug_assert_eq!(new_values.len(), recs.iter().filter(|r| r.write).count(), "a new value per write");
    debug_assert_eq!(held.len(), new_values.len(), "a held version per write");
    let writes: Vec<(&Rec, &Vec<u8>)> = recs.iter().filter(|r| r.write).zip(new_values).collect();
    if writes.is_empty() {
        return Ok(());
    }
    if n.hybrid.onesided(Stage::Commit) {
        let s = ctx.scratch();
        let pieces: Vec<[(usize, Vec<u8>); 3]> = writes
            .iter()
            .zip(held)
            .map(|((r, v), held)| commit_writes(geometry(n, r.table), &held.old, held.slot, ctts, id, v))
            .collect();
        // WRITEs of more than 64 B are staged in the last quarter of the scratch (ops.rs); when
        // it is full, everything posted so far is waited for before it is reused, so then
        // every record's last WRITE is signaled.
        let (_, from, to) = areas(ctx);
        let staged = |p: &[(usize, Vec<u8>); 3]| -> u64 {
            p.iter().filter(|(_, b)| b.len() > 64).map(|(_, b)| (b.len() as u64).div_ceil(8) * 8).sum()
        };
        let wraps = pieces.iter().map(staged).sum::<u64>() > to - from;
        let mut at = s.addr + from;
        for ((r, _), p) in writes.iter().zip(&pieces) {
            let need = staged(p);
            if need > to - from {
                return Err(TxnError::TooBig {
                    what: "commit writes",
                    bytes: need,
                    limit: to - from,
                    within: "staging area",
                });
            }
            if at + need > s.addr + to {
                ctx.wait().await?;
                at = s.addr + from;
            }
            let mut list = Vec::with_capacity(4);
            let mut bytes = 8;
            for (off, b) in p {
                bytes += b.len() as u64;
                // The CPU stores a local record's pieces from where they are; the NIC needs
                // them inline or staged.
                let src = if b.len() <= 64 || n.local(r.home) {
                    Payload::Inline(b.clone())
                } else {
                    ctx.write_local(at, b)?;
                    let src = Payload::Local(LocalBuf { lkey: s.lkey, addr: at, len: b.len() as u32 });
                    at += (b.len() as u64).div_ceil(8) * 8;
                    src
                };
                let remote = n.catalog.remote(r.home, r.offset + *off as u64, b.len() as u32);
                list.push((Op::Write { src, remote }, false));
            }
            let unlock = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            };
            let q = ops::rec_qp(ctx, r)?;
            // Passive ACK (DrTM+H Sec. 3.2), as ops::write_back: signal anyway before the send
            // queue fills, or when the staging area will be reused.
            let depth = ctx.qp_info(q).map_or(2, |i| i.max_outstanding);
            let signal = !n.rdma.passive_ack || ctx.outstanding(q) + 4 >= depth / 2 || wraps;
            list.push((unlock, signal));
            t.add(ops::issue(ctx, n, r, list).await?, bytes);
        }
    } else {
        for (r, v) in &writes {
            let req = CommitReq { table: r.table, offset: r.offset, ctts, writer: id, record: v }.encode();
            if n.rdma.passive_ack {
                ops::send_oneway(ctx, n, r.home, H_COMMIT, &req);
            } else {
                ops::call(ctx, n, r.home, H_COMMIT, &req).await?;
            }
            t.add(ops::rpc_path(n, r.home), req.len() as u64);
        }
    }
    let waited = ctx.wait().await;
    // A COMMIT by RPC that got no answer failed as much as a WRITE that gave up.
    let unanswered = ctx.failed_reply();
    ctx.clear_replies();
    waited?;
    if let Some(e) = unanswered {
        return Err(e.into());
    }
    ops::account_tally(ctx, n, Stage::Commit, t0, &t);
    Ok(())
}

/// The geometry and tuple offset of a key on this node.
fn find(n: &NodeState, mem: &dyn HostMemory, table: u16, key: u64) -> Option<(Geometry, u64)> {
    let place = n.catalog.layout.table(table)?;
    Some((Geometry::of(place), store::find_local(mem, n.base(), place, key)?))
}

fn read_tuple(n: &NodeState, mem: &dyn HostMemory, g: Geometry, off: u64) -> Vec<u8> {
    let mut t = vec![0u8; g.tuple_bytes()];
    let _ = mem.read(n.base() + off, &mut t);
    t
}

/// READ handler: R2, R1 and rts, atomically at the participant.
fn read_handler(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(TsReq { table, key, ctts }) = TsReq::decode(req) else { return reply.push(MALFORMED) };
    let Some((g, off)) = find(n, mem, table, key) else { return ReadReply::Missing.encode_into(reply) };
    let t = read_tuple(n, mem, g, off);
    let (wts, rts) = (u64_at(&t, g.wts()), u64_at(&t, g.rts()));
    let seen = |outcome| ReadReply::Seen { wts, rts, outcome };
    if !r2(u64_at(&t, LOCK as usize), ctts) {
        return seen(Err(Abort::ReadLocked)).encode_into(reply);
    }
    let Some(v) = r1(g, &t, ctts) else { return seen(Err(Abort::SlotOverflow)).encode_into(reply) };
    if v.latest && rts < ctts && n.bug != Some(SKIP_RTS) {
        let _ = mem.store_u64(n.base() + off + g.rts() as u64, ctts);
    }
    seen(Ok((off, v))).encode_into(reply);
}

/// LOCK handler: W1, then W2 by CAS, then W1 again on the tuple read under the lock (the
/// double read; a no-op when the handler runs atomically, not on every backend); replies
/// with the latest version and the slot a commit moves it into, not the whole tuple.
fn lock_handler(n: &NodeState, mem: &dyn HostMemory, req: &[u8], reply: &mut Vec<u8>) {
    let Ok(TsReq { table, key, ctts }) = TsReq::decode(req) else { return reply.push(MALFORMED) };
    let Some((g, off)) = find(n, mem, table, key) else { return LockReply::Missing.encode_into(reply) };
    let base = n.base() + off;
    let t = read_tuple(n, mem, g, off);
    let seen = |t: &[u8], outcome| LockReply::Seen { wts: u64_at(t, g.wts()), rts: u64_at(t, g.rts()), outcome };
    if !w1(g, &t, ctts) {
        return seen(&t, Err(Abort::WriteTooLate)).encode_into(reply);
    }
    if mem.cas_u64(base + LOCK, 0, ctts).unwrap_or(u64::MAX) != 0 {
        return seen(&t, Err(Abort::WriteLocked)).encode_into(reply);
    }
    let t = read_tuple(n, mem, g, off);
    if !w1(g, &t, ctts) || !consistent(g, &t) {
        let _ = mem.cas_u64(base + LOCK, ctts, 0);
        return seen(&t, Err(Abort::WriteTooLate)).encode_into(reply);
    }
    let old = latest(g, &t);
    let locked =
        Locked { offset: off, slot: oldest_slot(g, &t), word: old.word, writer: old.writer, record: old.record };
    seen(&t, Ok(locked)).encode_into(reply);
}

/// COMMIT handler: installs the new version over the tuple (held under `ctts`'s lock) and
/// unlocks.
fn commit_handler(n: &NodeState, mem: &dyn HostMemory, req: &[u8]) {
    // Nobody reads the reply: a request that does not decode, or names no table or a tuple
    // outside the store, writes nothing.
    let Ok(CommitReq { table, offset, ctts, writer, record }) = CommitReq::decode(req) else { return };
    let Some(place) = n.catalog.layout.table(table) else { return };
    let g = Geometry::of(place);
    let base = n.base() + offset;
    let mut t = vec![0u8; g.tuple_bytes()];
    if mem.read(base, &mut t).is_err() {
        return;
    }
    // The coordinator commits only records this node's LOCK granted to `ctts`, and only
    // the commit clears that lock: without it, this is a COMMIT sent again after a failure
    // (faults) whose first copy landed, and writing would overwrite a later version.
    if u64_at(&t, LOCK as usize) != ctts {
        return;
    }
    let _ = mem.write(base + VERSION, &install(g, &t, ctts, writer, record));
    let _ = mem.store_u64(base + LOCK, 0);
}

/// MVCC's RPC handlers (ids 30..=39).
pub fn handlers(n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    let (a, b, c) = (n.clone(), n.clone(), n.clone());
    vec![
        (
            H_READ,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                ctx.memory_misses(BY_KEY);
                read_handler(&a, ctx.mem, req, ctx.reply);
                Handled::Reply
            }) as Rc<HandlerFn>,
        ),
        (
            H_LOCK,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                ctx.memory_misses(BY_KEY);
                lock_handler(&b, ctx.mem, req, ctx.reply);
                Handled::Reply
            }),
        ),
        (
            H_COMMIT,
            Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
                ctx.memory_misses(BY_OFFSET);
                commit_handler(&c, ctx.mem, req);
                Handled::Reply
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_keep_their_layouts_and_round_trip() {
        let req = TsReq { table: 2, key: 9, ctts: 1 << 30 };
        assert_eq!(req.encode().len(), 24);
        assert_eq!(TsReq::decode(&req.encode()), Ok(req));
        let v = Version { wts: 3, word: 4, writer: 5, record: vec![6; 16], latest: false };
        for r in [
            ReadReply::Missing,
            ReadReply::Seen { wts: 1, rts: 2, outcome: Ok((64, v.clone())) },
            ReadReply::Seen { wts: 1, rts: 2, outcome: Err(Abort::ReadLocked) },
            ReadReply::Seen { wts: 1, rts: 2, outcome: Err(Abort::SlotOverflow) },
        ] {
            let mut b = Vec::new();
            r.encode_into(&mut b);
            assert_eq!(ReadReply::decode(&b), Ok(r));
        }
        let mut b = Vec::new();
        ReadReply::Seen { wts: 1, rts: 2, outcome: Ok((64, v)) }.encode_into(&mut b);
        assert_eq!(b.len(), 17 + 33 + 16);
        for r in [
            LockReply::Missing,
            LockReply::Seen {
                wts: 1,
                rts: 2,
                outcome: Ok(Locked { offset: 64, slot: 3, word: 5, writer: 6, record: vec![7; 40] }),
            },
            LockReply::Seen { wts: 1, rts: 2, outcome: Err(Abort::WriteLocked) },
            LockReply::Seen { wts: 1, rts: 2, outcome: Err(Abort::WriteTooLate) },
        ] {
            let mut b = Vec::new();
            r.encode_into(&mut b);
            assert_eq!(LockReply::decode(&b), Ok(r));
        }
        // status, wts, rts | offset, slot, version word, writer | record: not the tuple.
        let mut b = Vec::new();
        let locked = Locked { offset: 64, slot: 1, word: 5, writer: 6, record: vec![7; 40] };
        LockReply::Seen { wts: 1, rts: 2, outcome: Ok(locked) }.encode_into(&mut b);
        assert_eq!(b.len(), 17 + 25 + 40);
        let c = CommitReq { table: 2, offset: 64, ctts: 7, writer: 8, record: &[1, 2, 3] };
        assert_eq!(c.encode().len(), 35);
        assert_eq!(CommitReq::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn malformed_messages_do_not_decode() {
        assert!(TsReq::decode(&[0; 23]).is_err());
        assert!(TsReq::decode(&[0; 25]).is_err());
        assert_eq!(ReadReply::decode(&[MALFORMED]), Err(WireError::Rejected));
        assert_eq!(ReadReply::decode(&[TOO_LATE; 17]), Err(WireError::Status(TOO_LATE)));
        assert_eq!(LockReply::decode(&[OVERFLOW; 17]), Err(WireError::Status(OVERFLOW)));
        assert_eq!(LockReply::decode(&[BUSY; 9]), Err(WireError::Short { need: 8, have: 0 }));
        assert!(ReadReply::decode(&[OK; 40]).is_err());
        assert!(CommitReq::decode(&[0; 31]).is_err());
    }
}
