//! Issue 15, mechanism 5: MVCC's and SUNDIAL's stages cost the round trips and bytes RCC
//! Sec. 4.4-4.5 lay out (double reads, CAS on `rts`, the write of the new version), RPC and
//! one-sided, and no stage pays a round trip or a whole-tuple write the design does not.
//!
//! Each run is a contention-free workload of identical transactions ([`Fixed`]), so every
//! execution of a stage costs the same. Two measures are compared with the values derived
//! from the design: the stage counters the report prints (`stage_round_trips`,
//! `stage_bytes`), and, independently, the trace: every verb and RPC each coordinator issued
//! inside each stage (opcode and payload bytes; handler, request and reply bytes), and the
//! stage's round trips as the longest chain of requests each posted after an earlier one of
//! the stage completed. Field sizes: `txn/src/store.rs` (lock 8 | version 8 | writer 8 |
//! record R), `protocols/src/mvcc.rs` and `sundial.rs` (extensions, messages),
//! `txn/src/msg.rs` (shared messages).

use std::collections::BTreeMap;
use std::sync::Arc;

use txbed_runner::{run_txns, TxnRunResult};
use txbed_tests::harness::{Load, Protocol, Shape, MVCC, SUNDIAL};
use txbed_transport::trace::{TraceEvent, RPC, STAGE, VERB};
use txbed_txn::node::stage_index;
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
    /// Every attempt (READ, LOCK).
    Attempt,
    /// Every commit (RENEW, LOG, COMMIT).
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

/// Runs `w` under `protocol` with code `hybrid` on 3 nodes x 1 worker x 1 coroutine, warm
/// location caches, 3 replicas (every write logged to 2 backups), traced.
fn run(protocol: Protocol, hybrid: Hybrid, w: Fixed) -> (Shape<Fixed>, TxnRunResult) {
    let s =
        Shape { workers: 1, coroutines: 1, duration_ns: 400_000, trace: true, ..Shape::new(protocol, w, hybrid, 1) };
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
/// multiple of 8), `b` backups; every record at one node.
#[derive(Copy, Clone, Debug)]
struct Sizes {
    r: u64,
    w: u64,
    rec: u64,
    b: u64,
}

impl Sizes {
    fn of(w: &Fixed, backups: u16) -> Sizes {
        Sizes { r: w.reads as u64, w: w.writes as u64, rec: w.record_bytes.div_ceil(8) as u64 * 8, b: backups as u64 }
    }
    /// The log record (`txn/src/log.rs`): `id 8`, then per write `table 2 | length 2 | pad 4 |
    /// key 8 | version 8 | value R`.
    fn log_record(self) -> u64 {
        8 + self.w * (24 + self.rec)
    }
}

/// LOG, shared by both protocols (`ops::log`): one round trip, the log record to each backup,
/// one-sided as one WRITE into its ring framed `length 4 | pad 4 | sequence 8 | record |
/// length 4`, padded to 8 (24 B more), or an `H_LOG` call (empty reply). The counter shows
/// the record's bytes per backup (framing not counted). Coordinator `c` writes node `c + 1`'s
/// rows, whose backups are `c + 2` and `c + 3`, which is `c` itself on 3 nodes: that copy
/// takes the local path (the CPU writes its own ring, or calls `H_LOG` in place: no verb, no
/// message, no byte), so `b - 1` backups get it over the network.
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

/// RELEASE, on an abort after LOCK (`ops::release`; both protocols unlock the write set
/// only, having no read locks): one round trip, WRITE lock = 0 (8 B) per record, or
/// `H_RELEASE` (`offset 8 | owner 8`, empty reply). The counter shows 8 B per record in both
/// forms (the lock word).
fn release_cost(s: Sizes, onesided: bool) -> Cost {
    let n = s.w as usize;
    let issued = if onesided {
        Issued { round_trips: 1, verbs: verbs(&[("WRITE", 8, n)]), calls: vec![] }
    } else {
        Issued { round_trips: 1, verbs: vec![], calls: calls(&[("RELEASE", 16, 0, n)]) }
    };
    Cost { per: Per::Abort, round_trips: 1, bytes: 8 * s.w, issued }
}

/// A cost whose counter shows exactly what the trace does (the protocols' own stages).
fn exact(per: Per, issued: Issued) -> Cost {
    Cost { per, round_trips: issued.round_trips, bytes: issued.bytes(), issued }
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

/// Runs `w` under `protocol` with code `hybrid` and checks every stage against `cost`.
fn check_code(protocol: Protocol, hybrid: Hybrid, w: Fixed, cost: fn(Stage, bool, Sizes) -> Option<Cost>) {
    let (s, r) = run(protocol, hybrid, w.clone());
    let sizes = Sizes::of(&w, s.replication - 1);
    let expected: BTreeMap<Stage, Cost> =
        protocol.stages().iter().filter_map(|&st| cost(st, hybrid.onesided(st), sizes).map(|c| (st, c))).collect();
    check(&s, &r, &expected);
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

/// MVCC in RPC, one-sided and RCC's SmallBank hybrid (code 28: RPC READ and LOCK,
/// one-sided LOG, RELEASE and COMMIT).
#[test]
fn mvcc_stages_cost_what_the_design_lays_out() {
    for w in shapes() {
        for hybrid in [Hybrid::RPC, Hybrid::full(MVCC.stages()), Hybrid(28)] {
            check_code(MVCC, hybrid, w.clone(), mvcc_cost);
        }
    }
}

/// SUNDIAL in RPC, one-sided and RCC's SmallBank hybrid (code 21: RPC READ and RENEW,
/// one-sided LOCK, LOG and COMMIT).
#[test]
fn sundial_stages_cost_what_the_design_lays_out() {
    for w in shapes() {
        for hybrid in [Hybrid::RPC, Hybrid::full(SUNDIAL.stages()), Hybrid(21)] {
            check_code(SUNDIAL, hybrid, w.clone(), sundial_cost);
        }
    }
}
