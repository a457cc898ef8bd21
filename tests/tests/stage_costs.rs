//! Issue 15, mechanisms 4 and 5: every stage of NOWAIT, WAIT-DIE, OCC, MVCC and SUNDIAL costs
//! the round trips and bytes the designs lay out (RCC Sec. 4.2-4.5, DrTM+H Sec. 5 for OCC):
//! lock + read, fetch, validate, log, write back + unlock, unlock; MVCC's double reads and CAS
//! on `rts`, SUNDIAL's lease renewal; RPC, one-sided and hybrid; and no stage pays a round trip
//! or a byte the design does not, or, where one does, the comment next to it says so. CALVIN
//! is left out: its stages sequence and forward whole transaction inputs per epoch, not
//! per-record verbs.
//!
//! Each run is a contention-free workload of identical transactions ([`Fixed`]), so every
//! execution of a stage costs the same. Two measures are compared with the values derived
//! from the design: the stage counters the report prints (`stage_round_trips`,
//! `stage_bytes`), and, independently, the trace: every verb and RPC each coordinator issued
//! inside each stage (opcode and payload bytes; handler, request and reply bytes), and the
//! stage's round trips as the longest chain of requests each posted after an earlier one of
//! the stage completed. Field sizes: `txn/src/store.rs` (lock 8 | version 8 | writer 8 |
//! record R), `txn/src/msg.rs` (shared messages), `protocols/src/mvcc.rs` and `sundial.rs`
//! (extensions, messages). Derived per protocol: [`nowait_cost`] (also WAIT-DIE's),
//! [`occ_cost`], [`mvcc_cost`], [`sundial_cost`].

use std::collections::BTreeMap;
use std::sync::Arc;

use txbed_runner::{run_txns, TxnRunResult};
use txbed_tests::harness::{Load, Protocol, Shape, MVCC, NOWAIT, OCC, SUNDIAL, WAITDIE};
use txbed_transport::trace::{TraceEvent, RPC, STAGE, VERB};
use txbed_txn::node::stage_index;
use txbed_txn::protocol::OptionValues;
use txbed_txn::stage::{Hybrid, Stage};
use txbed_txn::store::{bucket_of, Layout, TableSpec, BUCKET_SLOTS, LOAD_FACTOR};
use txbed_workloads::{get_i64, with_i64, Executed, Key, Table, TxnSpec, Workload};

/// Rows per node: few, so a warm location cache holds every bucket.
const ROWS: u64 = 64;

/// Transactions that all look alike: coordinator node `c` reads `reads` rows and writes
/// `writes` rows (read-modify-write of a counter), always the same ones, all owned by node
/// `c + 1` and touched by no other coordinator: no conflict, every stage execution the same.
#[derive(Clone, Debug)]
struct Fixed {
    reads: usize,
    writes: usize,
    record_bytes: u32,
    /// Half the transactions (drawn at random) abort in their logic, after LOCK: RELEASE runs.
    aborts: bool,
}

impl Fixed {
    /// The rows coordinator `node` uses: node `node + 1`'s first rows whose index bucket
    /// holds at most 8 of its keys (a fuller bucket links to an overflow bucket, which the
    /// warm cache does not hold: its lookups would READ, outside the stages' counts).
    fn rows(&self, node: u16, nodes: u16) -> Vec<u64> {
        let home = ((node + 1) % nodes) as u64;
        let spec = TableSpec { id: 0, record_bytes: self.record_bytes, rows_per_node: ROWS };
        let buckets = Layout::new(&[spec], LOAD_FACTOR).tables[0].buckets;
        let keys: Vec<u64> = (home * ROWS..(home + 1) * ROWS).collect();
        let load = |k: u64| keys.iter().filter(|&&o| bucket_of(o, buckets) == bucket_of(k, buckets)).count();
        let rows: Vec<u64> =
            keys.iter().copied().filter(|&k| load(k) <= BUCKET_SLOTS).take(self.reads + self.writes).collect();
        assert_eq!(rows.len(), self.reads + self.writes, "not enough rows in main buckets");
        rows
    }
}

impl Workload for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn tables(&self) -> Vec<Table> {
        vec![Table { id: 0, name: "rows", record_bytes: self.record_bytes, rows_per_node: ROWS }]
    }
    fn initial(&self, _key: Key) -> Vec<u8> {
        vec![0; self.record_bytes as usize]
    }
    fn generate(&self, rng: &mut rand_chacha::ChaCha8Rng, node: u16, nodes: u16) -> TxnSpec {
        use rand::Rng;
        let rows = self.rows(node, nodes);
        let key = |row| Key { table: 0, row };
        TxnSpec {
            kind: "fixed",
            reads: rows[..self.reads].iter().map(|&r| key(r)).collect(),
            writes: rows[self.reads..].iter().map(|&r| key(r)).collect(),
            params: vec![(self.aborts && rng.gen_bool(0.5)) as i64],
            compute_ns: 0,
        }
    }
    fn execute(&self, spec: &TxnSpec, _reads: &[&[u8]], old: &[&[u8]]) -> Executed {
        if spec.params[0] == 1 {
            return Executed::UserAbort;
        }
        let new_values = old.iter().map(|v| with_i64(v, get_i64(v) + 1)).collect();
        Executed::Commit { new_values, external_delta: spec.writes.len() as i64 }
    }
    fn conserved(&self, _key: Key, value: &[u8]) -> i64 {
        get_i64(value)
    }
}

impl Load for Fixed {
    fn workload(&self, _: u16, _: u16, _: u32) -> Arc<dyn Workload> {
        Arc::new(self.clone())
    }
}

/// What one execution of a stage issued, from the trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Issued {
    /// Round trips: the longest chain of requests each posted after one before it completed.
    round_trips: u64,
    /// One-sided verbs: (opcode, payload bytes), sorted.
    verbs: Vec<(String, u64)>,
    /// RPC calls: (handler, request bytes, reply bytes), sorted.
    calls: Vec<(String, u64, u64)>,
}

impl Issued {
    /// Bytes on the wire: verb payloads (a READ's data, a WRITE's, 8 per CAS), RPC request
    /// and reply payloads.
    fn bytes(&self) -> u64 {
        self.verbs.iter().map(|v| v.1).sum::<u64>() + self.calls.iter().map(|c| c.1 + c.2).sum::<u64>()
    }
}

/// A coordinator's request in the trace: when it was posted (or called) and completed.
struct Request<'a> {
    e: &'a TraceEvent,
    posted: u64,
    done: u64,
}

/// Per stage, every distinct [`Issued`] of its executions (one, when they all cost the same)
/// with how many executions issued it.
fn issued_per_stage(trace: &[TraceEvent]) -> BTreeMap<&'static str, BTreeMap<Issued, u64>> {
    let mut out: BTreeMap<&'static str, BTreeMap<Issued, u64>> = BTreeMap::new();
    let track = |e: &TraceEvent| (e.node, e.worker, e.coroutine);
    // A coordinator's requests: verbs on its QPs and its RPC calls. The log's lazy reclaim is
    // a one-way RPC off the critical path (DrTM+H Sec. 5.4): not a stage cost.
    let requests: Vec<Request> = trace
        .iter()
        .filter(|e| e.coroutine.is_some())
        .filter_map(|e| match e.category {
            VERB if e.qp.is_some() => Some(Request { e, posted: e.start_ns, done: e.end_ns }),
            RPC if e.name != "RECLAIM" => Some(Request { e, posted: e.start_ns, done: e.end_ns }),
            _ => None,
        })
        .collect();
    let arg = |e: &TraceEvent, k: &str| e.args.iter().find(|a| a.0 == k).map(|a| a.1);
    let mut claimed = vec![false; requests.len()];
    for s in trace.iter().filter(|e| e.category == STAGE) {
        let stage = Stage::ALL.into_iter().find(|st| st.name() == s.name).expect("a stage name").name();
        let mut mine: Vec<usize> = (0..requests.len())
            .filter(|&i| track(requests[i].e) == track(s) && (s.start_ns..s.end_ns).contains(&requests[i].posted))
            .collect();
        mine.sort_by_key(|&i| requests[i].posted);
        let mut x = Issued::default();
        let mut depth = vec![0u64; mine.len()];
        for (k, &i) in mine.iter().enumerate() {
            assert!(!claimed[i], "a request in two stages: {:?}", requests[i].e);
            claimed[i] = true;
            let r = &requests[i];
            // Depth: one more than the deepest request of this stage that completed before
            // this one was posted (one-way calls and unconfirmed verbs complete nothing).
            depth[k] = 1
                + (0..k)
                    .filter(|&j| {
                        let q = &requests[mine[j]];
                        q.done > q.posted && q.done <= r.posted
                    })
                    .map(|j| depth[j])
                    .max()
                    .unwrap_or(0);
            match r.e.category {
                VERB => x.verbs.push((r.e.name.to_string(), arg(r.e, "bytes").expect("verb bytes"))),
                _ => x.calls.push((
                    r.e.name.to_string(),
                    arg(r.e, "bytes").expect("request bytes"),
                    arg(r.e, "reply_bytes").unwrap_or(0),
                )),
            }
        }
        x.round_trips = depth.iter().copied().max().unwrap_or(0);
        x.verbs.sort();
        x.calls.sort();
        *out.entry(stage).or_default().entry(x).or_default() += 1;
    }
    // Every request a coordinator issued belongs to a stage, but those of the attempts the end
    // of the run cut short.
    let last_stage_end = |t| trace.iter().filter(|s| s.category == STAGE && track(s) == t).map(|s| s.end_ns).max();
    for (i, r) in requests.iter().enumerate() {
        if !claimed[i] && last_stage_end(track(r.e)).is_some_and(|end| r.posted < end) {
            panic!("a request outside every stage: {:?}", r.e);
        }
    }
    out
}

/// Which transactions run a stage.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Per {
    /// Every attempt (READ; LOCK where it runs before the logic).
    Attempt,
    /// Every commit (RENEW, LOG, COMMIT; OCC's VALIDATE, and its LOCK, which runs after the
    /// logic).
    Commit,
    /// Every abort after LOCK (RELEASE).
    Abort,
}

/// A stage's cost per execution as the design lays it out.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cost {
    per: Per,
    /// Round trips the stage counter shows.
    round_trips: u64,
    /// Bytes the stage counter shows.
    bytes: u64,
    /// What the trace shows.
    issued: Issued,
}

fn verbs(v: &[(&str, u64, usize)]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> =
        v.iter().flat_map(|&(op, bytes, n)| std::iter::repeat_n((op.to_string(), bytes), n)).collect();
    out.sort();
    out
}

fn calls(v: &[(&str, u64, u64, usize)]) -> Vec<(String, u64, u64)> {
    let mut out: Vec<(String, u64, u64)> =
        v.iter().flat_map(|&(h, req, rep, n)| std::iter::repeat_n((h.to_string(), req, rep), n)).collect();
    out.sort();
    out
}

/// Runs `w` under `protocol` (with its `options`) with code `hybrid` on 3 nodes x 1 worker x
/// 1 coroutine, warm location caches, 3 replicas (every write logged to 2 backups), the
/// default RDMA options (outstanding requests, doorbell batching, speculative fetch, no
/// passive ACK), traced.
fn run(protocol: Protocol, options: OptionValues, hybrid: Hybrid, w: Fixed) -> (Shape<Fixed>, TxnRunResult) {
    let s = Shape {
        workers: 1,
        coroutines: 1,
        duration_ns: 400_000,
        trace: true,
        protocol_options: options,
        ..Shape::new(protocol, w, hybrid, 1)
    };
    let mut spec = s.spec();
    spec.warm_cache = true;
    let r = run_txns(&spec).unwrap_or_else(|e| panic!("{e}\n{}", s.replay()));
    s.assert_clean(&r);
    s.assert_commits(&r, 20);
    assert_eq!(r.stats.aborted_conflict, 0, "{}: contention", s.replay());
    assert_eq!(r.stats.aborted_user > 20, s.w.aborts, "{}: user aborts", s.replay());
    assert_eq!(r.location.reads, 0, "{}: lookups READ buckets: {:?}", s.replay(), r.location);
    (s, r)
}

/// Checks every stage of `protocol` against `expected` (a stage not listed must never run).
#[track_caller]
fn check(s: &Shape<Fixed>, r: &TxnRunResult, expected: &BTreeMap<Stage, Cost>) {
    let issued = issued_per_stage(&r.trace);
    for &stage in s.protocol.stages() {
        let i = stage_index(stage);
        let calls = r.stats.stage_calls[i];
        let Some(want) = expected.get(&stage) else {
            assert_eq!(calls, 0, "{}: stage {} ran", s.replay(), stage.name());
            continue;
        };
        // Nothing conflicts, so every attempt commits or aborts in its logic.
        let (commits, aborts) = (r.stats.committed, r.stats.aborted_user);
        let runs = match want.per {
            Per::Attempt => commits + aborts,
            Per::Commit => commits,
            Per::Abort => aborts,
        };
        assert!(calls > 10 && calls == runs, "{}: stage {} ran {calls} times, not {runs}", s.replay(), stage.name());
        let got = (r.stats.stage_round_trips[i], r.stats.stage_bytes[i]);
        assert_eq!(
            got,
            (calls * want.round_trips, calls * want.bytes),
            "{}: stage {} counters, {calls} executions",
            s.replay(),
            stage.name()
        );
        let all: Vec<&Issued> = issued.get(stage.name()).map(|m| m.keys().collect()).unwrap_or_default();
        assert_eq!(all, vec![&want.issued], "{}: stage {} as traced", s.replay(), stage.name());
    }
}

/// The transaction's shape: `r` records read, `w` written, records of `rec` bytes (a
/// multiple of 8), `b` backups; every record at one node; whether some abort in the logic.
#[derive(Copy, Clone, Debug)]
struct Sizes {
    r: u64,
    w: u64,
    rec: u64,
    b: u64,
    aborts: bool,
}

impl Sizes {
    fn of(w: &Fixed, backups: u16) -> Sizes {
        Sizes {
            r: w.reads as u64,
            w: w.writes as u64,
            rec: w.record_bytes.div_ceil(8) as u64 * 8,
            b: backups as u64,
            aborts: w.aborts,
        }
    }
    /// The plain tuple (`txn/src/store.rs`): `lock 8 | version 8 | writer 8 | record R`.
    fn tuple(self) -> u64 {
        24 + self.rec
    }
    /// The log record (`txn/src/log.rs`): `id 8`, then per write `table 2 | length 2 | pad 4 |
    /// key 8 | version 8 | value R`.
    fn log_record(self) -> u64 {
        8 + self.w * (24 + self.rec)
    }
}

/// LOG, shared by every protocol here (`ops::log`): one round trip, the log record to each
/// backup, one-sided as one WRITE into its ring framed `length 4 | pad 4 | sequence 8 |
/// record | length 4`, padded to 8 (24 B more), or an `H_LOG` call (empty reply). The
/// counter shows the record's bytes per backup (framing not counted). Coordinator `c` writes
/// node `c + 1`'s rows, whose backups are `c + 2` and `c + 3`, which is `c` itself on 3
/// nodes: that copy takes the local path (the CPU writes its own ring, or calls `H_LOG` in
/// place: no verb, no message, no byte), so `b - 1` backups get it over the network.
fn log_cost(s: Sizes, onesided: bool) -> Cost {
    let l = s.log_record();
    let remote = s.b - 1;
    let issued = if onesided {
        Issued { round_trips: 1, verbs: verbs(&[("WRITE", l + 24, remote as usize)]), calls: vec![] }
    } else {
        Issued { round_trips: 1, verbs: vec![], calls: calls(&[("LOG", l, 0, remote as usize)]) }
    };
    Cost { per: Per::Commit, round_trips: 1, bytes: l * remote, issued }
}

/// The unlocks of `n` records, all posted before one wait: WRITE lock = 0 (8 B) each, or a
/// `handler` call each with `ReleaseReq` = `offset 8 | owner 8` (16 B) and an empty reply.
fn unlocks(n: u64, onesided: bool, handler: &str) -> Issued {
    let n = n as usize;
    if onesided {
        Issued { round_trips: 1, verbs: verbs(&[("WRITE", 8, n)]), calls: vec![] }
    } else {
        Issued { round_trips: 1, verbs: vec![], calls: calls(&[(handler, 16, 0, n)]) }
    }
}

/// RELEASE of `n` locked records on an abort (`ops::release`, or WAIT-DIE's own with
/// `WD_RELEASE`): one round trip, [`unlocks`]. The counter shows 8 B per record in both forms
/// (the lock word; an RPC carries 16).
fn unlock_cost(n: u64, onesided: bool, handler: &str) -> Cost {
    Cost { per: Per::Abort, round_trips: 1, bytes: 8 * n, issued: unlocks(n, onesided, handler) }
}

/// RELEASE, on an abort after LOCK, for MVCC and SUNDIAL, which unlock the write set only,
/// having no read locks ([`unlock_cost`] of `w` records, `H_RELEASE`).
fn release_cost(s: Sizes, onesided: bool) -> Cost {
    unlock_cost(s.w, onesided, "RELEASE")
}

/// A cost whose counter shows exactly what the trace does (the protocols' own stages).
fn exact(per: Per, issued: Issued) -> Cost {
    Cost { per, round_trips: issued.round_trips, bytes: issued.bytes(), issued }
}

/// The RPC handlers a two-phase-locking protocol locks, writes back and unlocks with.
struct Handlers {
    lock: &'static str,
    commit: &'static str,
    release: &'static str,
}

/// LOCK of `n` records, shared by NOWAIT, WAIT-DIE and OCC's early lock (`ops::lock_and_read`,
/// WAIT-DIE's `lock`): one round trip, 8 + T B per record on the counter, T = the plain tuple `lock 8 |
/// version 8 | writer 8 | record R` (24 + R B; none of the three has an extension).
/// One-sided: per record a CAS of the lock word (0 -> owner, 8 B) and, behind it on the same
/// QP in one doorbell, a READ of the whole tuple (T), every record posted before one wait
/// (RCC Sec. 4.2: "issue READ immediately after CAS to overlap the communication"). RPC: the
/// `handler` call per record, request `LockReq` = `table 2 | pad 6 | key 8 | owner 8` (24
/// B), reply `LockReply::Locked` = `status 1 | offset 8 | tuple T` (9 + T B; RCC: "a success
/// message with the record"); the counter shows 8 + T, the lock word and the tuple, as
/// one-sided (the wire carries 25 B more per lock, docs/fidelity.md Sec. 2.4).
fn lock_cost(per: Per, n: u64, onesided: bool, s: Sizes, handler: &str) -> Cost {
    let (t, k) = (s.tuple(), n as usize);
    let issued = if onesided {
        Issued { round_trips: 1, verbs: verbs(&[("CAS", 8, k), ("READ", t, k)]), calls: vec![] }
    } else {
        Issued { round_trips: 1, verbs: vec![], calls: calls(&[(handler, 24, 9 + t, k)]) }
    };
    Cost { per, round_trips: 1, bytes: n * (8 + t), issued }
}

/// The write-back of the `w` written records (`ops::write_back_one`), shared by NOWAIT,
/// WAIT-DIE and OCC, by COMMIT's primitive: 24 + R B per record on the counter. One-sided:
/// a WRITE of `CommitReq::body` = `version 8 | writer 8 | record R` (16 + R B) at the
/// version word, then a WRITE of lock = 0 (8 B) on the same QP in one doorbell, only the
/// second signaled (RCC Sec. 4.2: "two RDMA WRITES ... to update & unlock the record";
/// DrTM+H Sec. 5.3 the same). RPC: a `handler` call, request `CommitReq` = `offset 8 |
/// version 8 | writer 8 | record R` (24 + R B), empty reply (RCC: "a write-back request
/// associated with the updated records"). The whole record, not the changed field (both
/// seeds write records back).
fn write_backs(s: Sizes, onesided: bool, handler: &str) -> Issued {
    let w = s.w as usize;
    if onesided {
        Issued { round_trips: 1, verbs: verbs(&[("WRITE", 16 + s.rec, w), ("WRITE", 8, w)]), calls: vec![] }
    } else {
        Issued { round_trips: 1, verbs: vec![], calls: calls(&[(handler, 24 + s.rec, 0, w)]) }
    }
}

/// Two-phase locking, NOWAIT (RCC Sec. 4.2) and WAIT-DIE (4.3): every record accessed, read
/// or written, is locked (exclusive), so `n = r + w` records hold locks.
fn two_phase_locking_cost(stage: Stage, code: Hybrid, s: Sizes, h: &Handlers) -> Option<Cost> {
    let onesided = code.onesided(stage);
    let n = s.r + s.w;
    let cost = match stage {
        // RCC: "tries to lock all the records accessed": [`lock_cost`] of r + w records at
        // every attempt, before the logic.
        Stage::Lock => lock_cost(Per::Attempt, n, onesided, s, h.lock),
        Stage::Log if s.w > 0 => log_cost(s, onesided),
        // At every commit, read-only ones too (`ops::write_back`, WAIT-DIE's `write_back`):
        // [`write_backs`] of the w written records, and the unlocks of the r records only
        // read, which ride in this stage ("counted, their bytes not") by RELEASE's primitive
        // (`release_posts`), [`unlocks`]: WRITE lock = 0 (8 B) or a `ReleaseReq` call (16 B,
        // empty reply) each; all posted before one wait: one round trip. The counter shows
        // the write-backs' 24 + R B per record and leaves out the read-set unlocks' bytes (r
        // x 8 one-sided, r x 16 by RPC): a read-only commit counts one round trip and 0 B.
        // (`protocols/src/nowait.rs`'s header says RELEASE unlocks the records only read; the
        // code does it here, in COMMIT.)
        Stage::Commit => {
            let back = write_backs(s, onesided, h.commit);
            let free = unlocks(s.r, code.onesided(Stage::Release), h.release);
            let mut issued = Issued { round_trips: 1, verbs: vec![], calls: vec![] };
            for part in [back, free] {
                issued.verbs.extend(part.verbs);
                issued.calls.extend(part.calls);
            }
            issued.verbs.sort();
            issued.calls.sort();
            Cost { per: Per::Commit, round_trips: 1, bytes: s.w * (24 + s.rec), issued }
        }
        // On an abort in the logic every record is locked: [`unlock_cost`] of r + w records.
        Stage::Release if s.aborts => unlock_cost(n, onesided, h.release),
        _ => return None,
    };
    Some(cost)
}

/// NOWAIT (RCC Sec. 4.2): [`two_phase_locking_cost`] with the shared handlers `H_LOCK`,
/// `H_COMMIT`, `H_RELEASE` (`txn/src/participant.rs`).
fn nowait_cost(stage: Stage, code: Hybrid, s: Sizes) -> Option<Cost> {
    two_phase_locking_cost(stage, code, s, &Handlers { lock: "LOCK", commit: "COMMIT", release: "RELEASE" })
}

/// WAIT-DIE (RCC Sec. 4.3): NOWAIT's costs, with its own handlers `WD_LOCK`, `WD_COMMIT`,
/// `WD_RELEASE` (which serve the wait lists) taking the same messages: `LockReq` with the
/// owner = the timestamp (24 B; reply 9 + T), `CommitReq` (24 + R B), `ReleaseReq` (16 B).
/// One-sided LOCK is NOWAIT's CAS (0 -> timestamp) + READ: WAIT-DIE differs only on a
/// conflict (a younger holder is waited for by posting CAS + READ again, a round trip per
/// retry, and a won CAS whose READ does not show the timestamp costs one more READ), which
/// these contention-free runs never meet: a retry or recheck would show as a second round
/// trip and more verbs than derived.
fn waitdie_cost(stage: Stage, code: Hybrid, s: Sizes) -> Option<Cost> {
    two_phase_locking_cost(stage, code, s, &Handlers { lock: "WD_LOCK", commit: "WD_COMMIT", release: "WD_RELEASE" })
}

/// OCC as in DrTM+H Sec. 5 (RCC Sec. 4.1 bases its OCC on it): E fetches, V locks the write
/// set and validates the read set, L logs, C writes back. With `early` (`lock_in_execution`,
/// FaSST's variant, DrTM+H Sec. 6.3), a transaction that writes locks its write set before
/// fetching the read set, so an abort in the logic RELEASEs it.
fn occ_cost(stage: Stage, code: Hybrid, s: Sizes, early: bool) -> Option<Cost> {
    let onesided = code.onesided(stage);
    let (t, r, w) = (s.tuple(), s.r as usize, s.w as usize);
    let early = early && s.w > 0;
    let cost = match stage {
        // E (`ops::fetch`), every attempt: every record, read or written (RCC Sec. 4.1: read
        // records into RS, "other accessed records" into WS), the write set's only when not
        // locked early. One-sided: one READ of the tuple (T) at the cached offset per record,
        // all posted before one wait (speculative fetch, DrTM+H Sec. 6.1): one round trip, T
        // B per record (DrTM+H Sec. 5.1: "one one-sided READ to get the record back"). RPC:
        // `H_FETCH`, request `KeyReq` = `table 2 | pad 6 | key 8` (16 B), reply
        // `FetchReply::Found` = `status 1 | offset 8 | bucket offset 8 | bucket 128 | tuple
        // T` (145 + T B: the key's main index bucket fills the location cache, which DrTM+H
        // Sec. 5.1 fills in the execution phase). The counter shows T per record in both
        // forms: an RPC fetch carries 161 B more per record than it counts.
        Stage::Read => {
            let k = if early { r } else { r + w };
            let issued = if onesided {
                Issued { round_trips: 1, verbs: verbs(&[("READ", t, k)]), calls: vec![] }
            } else {
                Issued { round_trips: 1, verbs: vec![], calls: calls(&[("FETCH", 16, 145 + t, k)]) }
            };
            Cost { per: Per::Attempt, round_trips: 1, bytes: k as u64 * t, issued }
        }
        // FaSST's early lock (`ops::lock_and_read` of the write set before the fetch, every
        // attempt): [`lock_cost`] of w records, the tuple read under the lock.
        Stage::Lock if s.w > 0 && early => lock_cost(Per::Attempt, s.w, onesided, s, "LOCK"),
        // V, lock (`ops::lock_and_check` of the write set), at every commit (after the logic,
        // which is where these runs abort): the record came in E, so under the lock only the
        // version is re-read (DrTM+H Sec. 5.2: "lock the record and then read its version").
        // One-sided: per record a CAS of the lock word (8 B) and, in the same doorbell, a READ
        // of `lock 8 | version 8` (16 B). RPC: `H_LOCK` with `LockReq` plus `meta_only` (24 +
        // 1 = 25 B), reply `status 1 | offset 8 | lock 8 | version 8` (25 B). The counter
        // shows 8 + 16 = 24 B per record either way.
        Stage::Lock if s.w > 0 => {
            let k = s.w as usize;
            let issued = if onesided {
                Issued { round_trips: 1, verbs: verbs(&[("CAS", 8, k), ("READ", 16, k)]), calls: vec![] }
            } else {
                Issued { round_trips: 1, verbs: vec![], calls: calls(&[("LOCK", 25, 25, k)]) }
            };
            Cost { per: Per::Commit, round_trips: 1, bytes: s.w * 24, issued }
        }
        // V, validate (`ops::validate` of the read set), every commit: one-sided a READ of
        // `lock 8 | version 8` (16 B) per record (DrTM+H Sec. 5.2: "a single RDMA READ is
        // enough"), RPC `H_VALIDATE`, request `ValidateReq` = `offset 8`, reply
        // `ValidateReply` = `lock 8 | version 8`; one round trip. The counter shows 16 B per
        // record in both forms (an RPC carries 24).
        Stage::Validate if s.r > 0 => {
            let issued = if onesided {
                Issued { round_trips: 1, verbs: verbs(&[("READ", 16, r)]), calls: vec![] }
            } else {
                Issued { round_trips: 1, verbs: vec![], calls: calls(&[("VALIDATE", 8, 16, r)]) }
            };
            Cost { per: Per::Commit, round_trips: 1, bytes: 16 * s.r, issued }
        }
        Stage::Log if s.w > 0 => log_cost(s, onesided),
        // C (`ops::write_back`): [`write_backs`] of the w written records; OCC holds no read
        // locks, so nothing rides along: the counter shows exactly the trace.
        Stage::Commit if s.w > 0 => exact(Per::Commit, write_backs(s, onesided, "COMMIT")),
        // A read-only transaction still runs an empty COMMIT stage (`occ::run` calls
        // `ops::write_back` with nothing to write): counted as an execution, with no round
        // trip, no byte and nothing issued. DrTM+H Sec. 5.5 runs read-only transactions as R
        // + V only; this costs nothing on the wire but adds executions to COMMIT's count.
        Stage::Commit => exact(Per::Commit, Issued::default()),
        // An abort in the logic holds no lock (V comes after it) unless the write set was
        // locked early: then [`unlock_cost`] of w records by `H_RELEASE`.
        Stage::Release if early && s.aborts => unlock_cost(s.w, onesided, "RELEASE"),
        _ => return None,
    };
    Some(cost)
}

/// MVCC (RCC Sec. 4.4). Tuple: `lock 8 | version 8 | writer 8 | record R | 4 slots of (wts 8
/// | version 8 | writer 8 | record R) | wts 8 | seq 8 | rts 8` = 5R + 144 B (RCC Fig. 3:
/// `tts | rts | wts[0..3] | record[0..3]`, plus txbed's version, writer and seq words).
fn mvcc_cost(stage: Stage, onesided: bool, s: Sizes) -> Option<Cost> {
    let t = 5 * s.rec + 144;
    let (r, w) = (s.r as usize, s.w as usize);
    let cost = match (stage, onesided) {
        // RCC: "two doorbell batched RDMA READs" of the tuple (one round trip), then "an RDMA
        // ATOMIC CAS to update rts" (a second). txbed doorbells a READ of lock and version
        // word (16 B) behind the CAS, answered in the CAS's round trip (a writer that locked
        // between the double read and the CAS is seen): 2 round trips, 2T + 8 + 16 B per
        // record.
        (Stage::Read, true) if r > 0 => exact(
            Per::Attempt,
            Issued {
                round_trips: 2,
                verbs: verbs(&[("READ", t, 2 * r), ("CAS", 8, r), ("READ", 16, r)]),
                calls: vec![],
            },
        ),
        // RCC: the handler checks R2, picks the version (R1), raises rts and returns the
        // record. Request `table 2 | pad 6 | key 8 | ctts 8` (24 B); reply `status 1 | wts 8 |
        // rts 8` (the tuple's, to move the clock) then the version: `offset 8 | wts 8 |
        // version 8 | writer 8 | latest 1 | record R` (50 + R B).
        (Stage::Read, false) if r > 0 => exact(
            Per::Attempt,
            Issued { round_trips: 1, verbs: vec![], calls: calls(&[("MVCC_READ", 24, 50 + s.rec, r)]) },
        ),
        // RCC: "an RDMA READ to read the metadata of the record" (rts and wts), check W1, then
        // "an RDMA ATOMIC CAS to lock the record, and a second RDMA READ to fetch the tuple"
        // doorbelled: 2 round trips. The metadata READ covers `wts | seq | rts` (24 B: seq
        // lies between them); the second READ the whole tuple (T), as RCC's.
        (Stage::Lock, true) if w > 0 => exact(
            Per::Attempt,
            Issued { round_trips: 2, verbs: verbs(&[("READ", 24, w), ("CAS", 8, w), ("READ", t, w)]), calls: vec![] },
        ),
        // RCC: the handler checks W1, locks, and "a new record is created and sent back":
        // request as READ's (24 B); reply `status 1 | wts 8 | rts 8 | offset 8 | slot 1 |
        // version 8 | writer 8 | record R` (42 + R B): the latest version and the slot it
        // will move into, not the 5 versions of the tuple.
        (Stage::Lock, false) if w > 0 => exact(
            Per::Attempt,
            Issued { round_trips: 1, verbs: vec![], calls: calls(&[("MVCC_LOCK", 24, 42 + s.rec, w)]) },
        ),
        // RCC: "two RDMA WRITES. The first write puts the locally prepared new record+metadata
        // to the participant; the second write releases the lock", only the second signaled:
        // one round trip. txbed's latest version lives at the common offsets, so the version
        // it displaces moves into the oldest slot: WRITE `wts | seq` (16 B), WRITE the slot
        // `wts | version | writer | record` (24 + R), WRITE `version | writer | record` (16 +
        // R), WRITE lock = 0 (8), one doorbell. Never the whole tuple (T - 16 B).
        (Stage::Commit, true) if w > 0 => exact(
            Per::Commit,
            Issued {
                round_trips: 1,
                verbs: verbs(&[("WRITE", 16, w), ("WRITE", 24 + s.rec, w), ("WRITE", 16 + s.rec, w), ("WRITE", 8, w)]),
                calls: vec![],
            },
        ),
        // "With RPC, the procedure can be implemented similarly": request `table 2 | pad 6 |
        // offset 8 | ctts 8 | writer 8 | record R` (32 + R B), empty reply; the handler
        // rotates the versions in place.
        (Stage::Commit, false) if w > 0 => exact(
            Per::Commit,
            Issued { round_trips: 1, verbs: vec![], calls: calls(&[("MVCC_COMMIT", 32 + s.rec, 0, w)]) },
        ),
        (Stage::Log, o) if w > 0 => log_cost(s, o),
        (Stage::Release, o) if w > 0 => release_cost(s, o),
        _ => return None,
    };
    Some(cost)
}

/// SUNDIAL (RCC Sec. 4.5). Tuple: `lock 8 | version 8 | writer 8 | record R | wts 8 | rts 8`
/// = R + 40 B (RCC Fig. 3: `lock | rts | wts | record`).
fn sundial_cost(stage: Stage, onesided: bool, s: Sizes) -> Option<Cost> {
    let t = s.rec + 40;
    let (r, w) = (s.r as usize, s.w as usize);
    let cost = match (stage, onesided) {
        // RCC: RS tuples are fetched "similar to MVCC with double doorbell batched reads":
        // one round trip, two READs of the whole tuple per record.
        (Stage::Read, true) if r > 0 => {
            exact(Per::Attempt, Issued { round_trips: 1, verbs: verbs(&[("READ", t, 2 * r)]), calls: vec![] })
        }
        // RCC: "the atomic tuple read ... performed by the handler": request `table 2 | pad 6
        // | key 8` (16 B), reply `status 1 | offset 8 | tuple` (9 + T B): no index bucket.
        (Stage::Read, false) if r > 0 => {
            exact(Per::Attempt, Issued { round_trips: 1, verbs: vec![], calls: calls(&[("SD_READ", 16, 9 + t, r)]) })
        }
        // RCC: a WS record is locked, and its tuple fetched "similar to MVCC with double
        // doorbell batched reads". Under the lock no commit can tear it, so one READ behind
        // the CAS, in one doorbell (as NOWAIT, RCC Sec. 4.2): one round trip, 8 + T B per
        // record (RCC: 8 + 2T).
        (Stage::Lock, true) if w > 0 => exact(
            Per::Attempt,
            Issued { round_trips: 1, verbs: verbs(&[("CAS", 8, w), ("READ", t, w)]), calls: vec![] },
        ),
        // The shared `H_LOCK`: request `table 2 | pad 6 | key 8 | owner 8` (24 B), reply
        // `status 1 | offset 8 | tuple` (9 + T B); the shared counter shows 8 + T per record
        // (lock word and tuple, as one-sided).
        (Stage::Lock, false) if w > 0 => Cost {
            per: Per::Attempt,
            round_trips: 1,
            bytes: w as u64 * (8 + t),
            issued: Issued { round_trips: 1, verbs: vec![], calls: calls(&[("LOCK", 24, 9 + t, w)]) },
        },
        // RCC: renewal "first atomically reads the tuple, then ... poses an RDMA ATOMIC CAS"
        // on rts: 2 round trips, 2T + 8 B per record. txbed posts the CAS (from the rts READ
        // saw) with READs of `lock | version` and `wts | rts` (16 B each) behind it in one
        // doorbell and checks afterwards: 1 round trip, 40 B per record when nothing moved.
        // Every read lease needs renewing here: each commit raises the written rows' lease
        // past the read rows' (commit_ts grows by one per transaction of the coordinator).
        (Stage::Renew, true) if r > 0 && w > 0 => exact(
            Per::Commit,
            Issued { round_trips: 1, verbs: verbs(&[("CAS", 8, r), ("READ", 16, 2 * r)]), calls: vec![] },
        ),
        // The handler checks and CASes: request `offset 8 | ext_at 8 | wts 8 | commit_ts 8 |
        // id 8` (40 B), reply `status 1`.
        (Stage::Renew, false) if r > 0 && w > 0 => {
            exact(Per::Commit, Issued { round_trips: 1, verbs: vec![], calls: calls(&[("SD_RENEW", 40, 1, r)]) })
        }
        // RCC: commit writes the record and sets wts = rts = commit_ts, then unlocks: WRITE
        // `version | writer | record | wts | rts` (32 + R B; version and writer are txbed's
        // bookkeeping) and WRITE lock = 0, one doorbell: one round trip. RPC: the shared
        // `H_COMMIT`, request `offset 8 | version 8 | writer 8 | record R | wts 8 | rts 8` (40 +
        // R B), empty reply. Either way 40 + R B per record.
        (Stage::Commit, true) if w > 0 => exact(
            Per::Commit,
            Issued { round_trips: 1, verbs: verbs(&[("WRITE", 32 + s.rec, w), ("WRITE", 8, w)]), calls: vec![] },
        ),
        (Stage::Commit, false) if w > 0 => {
            exact(Per::Commit, Issued { round_trips: 1, verbs: vec![], calls: calls(&[("COMMIT", 40 + s.rec, 0, w)]) })
        }
        (Stage::Log, o) if w > 0 => log_cost(s, o),
        (Stage::Release, o) if w > 0 => release_cost(s, o),
        _ => return None,
    };
    Some(cost)
}

/// What a protocol's stages cost under a code, for a transaction of a shape.
type CostFn<'a> = &'a dyn Fn(Stage, Hybrid, Sizes) -> Option<Cost>;

/// Runs `w` under `protocol` (with its `options`) with code `hybrid` and checks every stage
/// against `cost`.
fn check_code(protocol: Protocol, options: OptionValues, hybrid: Hybrid, w: Fixed, cost: CostFn) {
    let (s, r) = run(protocol, options, hybrid, w.clone());
    let sizes = Sizes::of(&w, s.replication - 1);
    let expected: BTreeMap<Stage, Cost> =
        protocol.stages().iter().filter_map(|&st| cost(st, hybrid, sizes).map(|c| (st, c))).collect();
    check(&s, &r, &expected);
}

/// The protocol's default options.
fn defaults() -> OptionValues {
    OptionValues::Null
}

/// The shapes: two reads and two writes of SmallBank-sized (8 B) and YCSB-sized (64 B)
/// records, half aborting in the logic; and read-only transactions of three records.
fn shapes() -> [Fixed; 3] {
    [
        Fixed { reads: 2, writes: 2, record_bytes: 8, aborts: true },
        Fixed { reads: 2, writes: 2, record_bytes: 64, aborts: true },
        Fixed { reads: 3, writes: 0, record_bytes: 64, aborts: false },
    ]
}

/// NOWAIT in RPC, one-sided, RCC Sec. 5's guideline for any protocol ("Log, Commit and
/// Release operations prefer one-sided operations": code 28, RPC LOCK) and code 21
/// (one-sided LOCK, LOG and COMMIT, RPC RELEASE: a commit's write-backs go one-sided while
/// its read-set unlocks go by RPC).
#[test]
fn nowait_stages_cost_what_the_design_lays_out() {
    for w in shapes() {
        for hybrid in [Hybrid::RPC, Hybrid::full(NOWAIT.stages()), Hybrid(28), Hybrid(21)] {
            check_code(NOWAIT, defaults(), hybrid, w.clone(), &nowait_cost);
        }
    }
}

/// WAIT-DIE with NOWAIT's codes.
#[test]
fn waitdie_stages_cost_what_the_design_lays_out() {
    for w in shapes() {
        for hybrid in [Hybrid::RPC, Hybrid::full(WAITDIE.stages()), Hybrid(28), Hybrid(21)] {
            check_code(WAITDIE, defaults(), hybrid, w.clone(), &waitdie_cost);
        }
    }
}

/// OCC in RPC, one-sided and DrTM+H's code where NIC atomics are not safe (code 38:
/// one-sided READ, LOG and VALIDATE, RPC LOCK, COMMIT and RELEASE; the `Drtmh` preset and
/// `scenarios/quickstart.ron`).
#[test]
fn occ_stages_cost_what_the_design_lays_out() {
    for w in shapes() {
        for hybrid in [Hybrid::RPC, Hybrid::full(OCC.stages()), Hybrid(38)] {
            check_code(OCC, defaults(), hybrid, w.clone(), &|st, h, s| occ_cost(st, h, s, false));
        }
    }
}

/// OCC with the write set locked in execution (`lock_in_execution`, FaSST's variant): LOCK
/// runs at every attempt, READ fetches the read set only, and an abort in the logic
/// RELEASEs the write set; in RPC (the `Fasst` preset's code), one-sided and code 38.
#[test]
fn occ_locking_in_execution_costs_what_the_design_lays_out() {
    let early = serde_json::json!({ "lock_in_execution": true });
    for w in shapes() {
        for hybrid in [Hybrid::RPC, Hybrid::full(OCC.stages()), Hybrid(38)] {
            check_code(OCC, early.clone(), hybrid, w.clone(), &|st, h, s| occ_cost(st, h, s, true));
        }
    }
}

/// MVCC in RPC, one-sided and RCC's SmallBank hybrid (code 28: RPC READ and LOCK,
/// one-sided LOG, RELEASE and COMMIT).
#[test]
fn mvcc_stages_cost_what_the_design_lays_out() {
    for w in shapes() {
        for hybrid in [Hybrid::RPC, Hybrid::full(MVCC.stages()), Hybrid(28)] {
            check_code(MVCC, defaults(), hybrid, w.clone(), &|st, h, s| mvcc_cost(st, h.onesided(st), s));
        }
    }
}

/// SUNDIAL in RPC, one-sided and RCC's SmallBank hybrid (code 21: RPC READ and RENEW,
/// one-sided LOCK, LOG and COMMIT).
#[test]
fn sundial_stages_cost_what_the_design_lays_out() {
    for w in shapes() {
        for hybrid in [Hybrid::RPC, Hybrid::full(SUNDIAL.stages()), Hybrid(21)] {
            check_code(SUNDIAL, defaults(), hybrid, w.clone(), &|st, h, s| sundial_cost(st, h.onesided(st), s));
        }
    }
}

/// Every code of every protocol here: each stage's cost follows from its own bit (and, for
/// the read-set unlocks in a 2PL COMMIT, RELEASE's), whatever the other stages use (RCC Sec.
/// 5.2: any stage must work with any other's primitive).
#[test]
fn every_code_costs_what_its_stages_do() {
    let protocols: [(Protocol, CostFn); 5] = [
        (NOWAIT, &nowait_cost),
        (WAITDIE, &waitdie_cost),
        (OCC, &|st, h, s| occ_cost(st, h, s, false)),
        (MVCC, &|st, h, s| mvcc_cost(st, h.onesided(st), s)),
        (SUNDIAL, &|st, h, s| sundial_cost(st, h.onesided(st), s)),
    ];
    for (protocol, cost) in protocols {
        for hybrid in Hybrid::all_codes(protocol.stages()) {
            check_code(protocol, defaults(), hybrid, shapes()[0].clone(), cost);
        }
    }
}
