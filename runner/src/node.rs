//! One node of a run, the same on every backend: loading its partition, its protocol state,
//! the coordinator coroutine, and what it contributes to the run's result.

use std::cell::RefCell;
use std::rc::Rc;

use rand::Rng;
use txbed_checker::Final;
use txbed_transport::{Ctx, HostMemory, MemoryRegion};
use txbed_txn::attempt::cause;
use txbed_txn::error::TxnError;
use txbed_txn::history_key;
use txbed_txn::locate::{Catalog, LocationCache};
use txbed_txn::node::Chopped;
use txbed_txn::node::{NodeState, TxnStats};
use txbed_txn::protocol::{BackgroundFn, ProtocolRef};
use txbed_txn::retry::Retry;
use txbed_txn::stage::Stage;
use txbed_txn::store::{self, split_version_word, Layout, VERSION};
use txbed_txn::Attempt;
use txbed_workloads::{Consistency, Key, Terminal, TxnSpec};

use crate::outcome::Measured;
use crate::spec::TxnRunSpec;

/// Loads `node`'s partition of every table into its store region, and the copies of other
/// partitions it holds for a protocol that keeps replicas there (`spec::copies_held`).
/// `partitions`: those loaded before (nodes sharing a process share a partition's index with
/// its copies').
pub fn load_partition(
    mem: &dyn HostMemory,
    mr: MemoryRegion,
    layout: &Layout,
    node: u16,
    spec: &TxnRunSpec,
    partitions: &store::Partitions,
) -> Result<(), String> {
    let load = |place: &store::TablePlace, table: u16, homes: &[u16], per: u64| {
        let keys = store::Keys::Ranges(homes.iter().map(|&h| h as u64 * per..(h as u64 + 1) * per).collect());
        let w = spec.workload.clone();
        let init = Rc::new(move |row: u64, rec: &mut [u8]| w.initial_into(Key { table, row }, rec));
        match store::load_table(mem, mr, place, keys, init, partitions) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("the index's overflow pool is too small for this table".to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    for place in &layout.tables {
        load(place, place.spec.id, &[node], place.spec.rows_per_node)?;
    }
    for (k, homes) in crate::spec::copies_held(spec, node).iter().enumerate() {
        for place in &layout.tables {
            let id = store::copy_table(place.spec.id, k as u16 + 1).ok_or("a table id too large for copies")?;
            let copy = layout.table(id).ok_or("a copy missing from the layout")?;
            load(copy, place.spec.id, homes, place.spec.rows_per_node)?;
        }
    }
    Ok(())
}

pub fn node_state(spec: &TxnRunSpec, me: u16, catalog: &Rc<Catalog>) -> Rc<NodeState> {
    Rc::new(NodeState {
        me,
        nodes: spec.nodes,
        coroutines: spec.coroutines,
        catalog: catalog.clone(),
        cache: RefCell::new(LocationCache::new(spec.cache_bytes)),
        workload: spec.workload.clone(),
        hybrid: spec.hybrid,
        rdma: spec.options,
        local_path: crate::spec::local_path(spec),
        history: RefCell::new(Vec::new()),
        aborted_accesses: RefCell::default(),
        stats: RefCell::new(TxnStats::default()),
        pending_lookups: RefCell::default(),
        dc_of: spec.wan.as_ref().map(|w| w.dc_of.clone()).unwrap_or_default(),
        pending_inter_dc: RefCell::default(),
        replication: spec.replication,
        bug: spec.bug,
        rings: RefCell::new(Vec::new()),
        readers: RefCell::new(Vec::new()),
        replica: RefCell::new(Default::default()),
        recovery: spec.faults.as_ref().map(|f| f.recovery()),
        incarnation: 0,
        pending: RefCell::default(),
        wal: RefCell::default(),
        skipped: RefCell::default(),
        chopped: RefCell::default(),
        deferred: RefCell::default(),
        pieces: RefCell::default(),
        wait_cause: Default::default(),
        committing: RefCell::default(),
        participant: spec.protocol.participant(&spec.protocol_options),
        index: Default::default(),
    })
}

/// The window and counters coordinators of one thread share.
#[derive(Clone)]
pub struct Shared {
    pub protocol: ProtocolRef,
    /// Workers that run no coordinators (`Protocol::server_workers`).
    pub server_workers: u16,
    pub from: u64,
    pub end: u64,
    /// The wait before retrying a conflict (`run.retry`).
    pub retry: Retry,
    pub measured: Rc<RefCell<Measured>>,
    pub failures: Rc<RefCell<Vec<String>>>,
    /// No new transaction starts once set (a fault the protocol does not survive).
    pub stop: Rc<std::cell::Cell<bool>>,
}

/// The protocol's background coroutine on one worker; an error it ends with is a failure of
/// the run, as a coordinator's is.
pub async fn run_background(background: BackgroundFn, ctx: Ctx, st: Rc<NodeState>, sh: Shared) {
    let (n, wk) = (st.me, ctx.me().worker);
    if let Err(e) = background(ctx, st, sh.end).await {
        sh.failures.borrow_mut().push(format!("node {n} worker {wk}: {} background: {e}", sh.protocol.name()));
    }
}

/// The wait `run.retry` says before the `tries`-th retry; one begun before the end stops at
/// the end (a window of inter-DC scale must not carry a retry far past it).
async fn back_off(ctx: &Ctx, sh: &Shared, tries: u32) {
    match sh.retry.window_ns(tries) {
        0 => ctx.yield_now().await,
        window => {
            let pause = ctx.with_rng(|r| r.gen_range(0..window));
            let now = ctx.now();
            let pause = if now < sh.end { pause.min(sh.end - now) } else { pause };
            ctx.sleep(pause).await;
        }
    }
}

/// A coordinator coroutine: draws transactions until `end`, retrying each conflict (the same
/// transaction) after the wait `Shared::retry` says.
pub async fn coordinator(ctx: Ctx, st: Rc<NodeState>, sh: Shared, c: u32) {
    let (n, wk) = (st.me, ctx.me().worker);
    if wk < sh.server_workers {
        return;
    }
    let mut seq = 0u64;
    let mut drawn = 0u64;
    // A transaction that was chopped when this machine crashed: the pieces its log says are
    // left run first (Sec. 5.6, "chopping information").
    let logged = st.chopped.borrow_mut().remove(&(wk, c));
    if let Some((parent, rest)) = logged.map(|l| (l.parent, l.remaining().to_vec())).filter(|r| !r.1.is_empty()) {
        if st.bug != Some(txbed_txn::chop::FORGET_CHOPPING) {
            match run_pieces(&ctx, &st, &sh, &rest, c, &mut seq, Some(parent)).await.0 {
                Attempt::Committed => st.stats.borrow_mut().committed += 1,
                other => {
                    sh.failures
                        .borrow_mut()
                        .push(format!("node {n} worker {wk}: finishing a chopped transaction: {other:?}"));
                    return;
                }
            }
        }
    }
    while ctx.now() < sh.end && !sh.stop.get() {
        if let Err(e) = publish(&ctx, &st, &sh, c, &mut seq, false).await {
            sh.failures.borrow_mut().push(format!("node {n} worker {wk}: {e}"));
            return;
        }
        let terminal = Terminal { worker: wk, coroutine: c, seq: drawn };
        drawn += 1;
        let drawn_spec = ctx.with_rng(|r| st.workload.generate_at(r, n, st.nodes, terminal));
        let lookups = st.workload.lookups(&drawn_spec);
        let mut tries = 0u32;
        // Whether the last attempt ever waited (for the network, a timer, a turn).
        let mut waited;
        let first = ctx.now();
        let in_window = |now: u64| now >= sh.from && now < sh.end;
        loop {
            // Data-dependent read and write sets: ask the owners first, on every attempt.
            let lookup_began = ctx.now();
            let resolved = if lookups.is_empty() {
                None
            } else {
                let answers = match txbed_txn::index::lookup(&ctx, &st, &lookups).await {
                    // With faults, an owner out of reach aborts the attempt like a conflict.
                    Err(e) if st.recovery.is_some() && e.unreachable_node().is_some() => {
                        waited = true;
                        st.stats.borrow_mut().aborted_conflict += 1;
                        // Counted as an abort, so recorded as one (nothing read yet).
                        seq += 1;
                        let id = txbed_txn::attempt::txn_id(n, st.incarnation, wk, c, seq);
                        txbed_txn::attempt::aborted(&ctx, &st, &drawn_spec, id, lookup_began);
                        let now = ctx.now();
                        sh.measured.borrow_mut().abort((n, wk), cause::UNAVAILABLE, now, in_window(now));
                        tries += 1;
                        if ctx.now() >= sh.end {
                            break;
                        }
                        back_off(&ctx, &sh, tries).await;
                        continue;
                    }
                    other => other.map_err(|e| e.to_string()),
                };
                match answers.and_then(|a| st.workload.resolve(&drawn_spec, &a)) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        sh.failures.borrow_mut().push(format!("node {n} worker {wk}: {e}"));
                        return;
                    }
                }
            };
            let t = resolved.as_ref().unwrap_or(&drawn_spec);
            let pieces = st.workload.chop(t);
            let outcome = if pieces.is_empty() {
                one_attempt(&ctx, &st, &sh, t, c, &mut seq, tries, false).await
            } else {
                run_pieces(&ctx, &st, &sh, &pieces, c, &mut seq, None).await
            };
            waited = outcome.1;
            match outcome.0 {
                Attempt::Committed => {
                    st.stats.borrow_mut().committed += 1;
                    let now = ctx.now();
                    let latency = (now - first).max(1);
                    sh.measured.borrow_mut().commit((n, wk), t.kind, now, latency, in_window(now));
                    break;
                }
                Attempt::UserAbort => {
                    st.stats.borrow_mut().aborted_user += 1;
                    break;
                }
                Attempt::Conflict(_) => {
                    tries += 1;
                    if ctx.now() >= sh.end {
                        break;
                    }
                    back_off(&ctx, &sh, tries).await;
                    if ctx.now() >= sh.end {
                        break;
                    }
                }
                Attempt::Failed(e) => {
                    sh.failures.borrow_mut().push(format!("node {n} worker {wk}: {e}"));
                    return;
                }
            }
        }
        // A transaction that never waited (every record local) held the worker throughout:
        // let its event loop and other coroutines run before the next one, as a worker
        // switches coroutines between transactions.
        if !waited {
            ctx.yield_now().await;
        }
    }
    // Deferred pieces left at the end are published before the run ends (by whichever
    // coordinator of the machine finds the queue free; the others wait for it to empty).
    while !sh.stop.get() && !st.deferred.borrow().queue.is_empty() {
        if st.deferred.borrow().publishing {
            ctx.sleep((st.workload.publish_epoch_ns() / 16).max(1_000)).await;
        } else if let Err(e) = publish(&ctx, &st, &sh, c, &mut seq, true).await {
            sh.failures.borrow_mut().push(format!("node {n} worker {wk}: {e}"));
            return;
        }
    }
    if let Some(done) = sh.protocol.coordinator_done(&ctx, &st) {
        done.await;
    }
}

/// One attempt of `t` under a fresh transaction id (sequence `seq` of coroutine `c`): its
/// trace slice (`tries` before it), its history entry if it aborted, a conflict counted.
/// `publishes`: it applies the machine's head deferred piece. Returns how it ended (a user
/// abort that means stale lookups, or a wait the logic asked for, as a conflict) and
/// whether it ever waited.
#[allow(clippy::too_many_arguments)]
async fn one_attempt(
    ctx: &Ctx,
    st: &NodeState,
    sh: &Shared,
    t: &TxnSpec,
    c: u32,
    seq: &mut u64,
    tries: u32,
    publishes: bool,
) -> (Attempt, bool) {
    let (n, wk) = (st.me, ctx.me().worker);
    *seq += 1;
    let id = txbed_txn::attempt::txn_id(n, st.incarnation, wk, c, *seq);
    // A piece's attempt is logged before it runs (`run_pieces`, `publish`).
    if publishes {
        st.deferred.borrow_mut().running = id;
    } else if let Some(l) = st.chopped.borrow_mut().get_mut(&(wk, c)) {
        (l.running, l.committed) = (id, false);
    }
    let began = ctx.now();
    let resumed = ctx.resumes();
    st.wait_cause.borrow_mut().remove(&(wk, c));
    let mut outcome = sh.protocol.attempt(ctx, st, t, id).await;
    let waited = ctx.resumes() != resumed;
    let wait = st.wait_cause.borrow_mut().remove(&(wk, c));
    if outcome == Attempt::UserAbort {
        if let Some(why) = wait {
            // The logic waits out another transaction's pieces (DrTM Sec. 4.4).
            outcome = Attempt::Conflict(why);
        } else if st.workload.retry_on_user_abort(t) {
            // Answers gone stale by the time the transaction read its rows: a conflict.
            outcome = Attempt::Conflict(cause::STALE_LOOKUP);
        }
    }
    if ctx.tracing() {
        let how = match outcome {
            Attempt::Committed => "commit",
            Attempt::Conflict(_) => "abort",
            Attempt::UserAbort => "user abort",
            Attempt::Failed(_) => "failed",
        };
        let name = format!("{} {how}", t.kind);
        let args = [("attempt", tries as u64 + 1), ("id", id)];
        ctx.trace_slice_args(name, txbed_transport::trace::TXN, began, ctx.now(), &args);
    }
    match outcome {
        // Every abort the run counts is in the history, with what it read and wrote.
        Attempt::Conflict(_) | Attempt::UserAbort => txbed_txn::attempt::aborted(ctx, st, t, id, began),
        Attempt::Committed | Attempt::Failed(_) => {
            st.aborted_accesses.borrow_mut().remove(&id);
        }
    }
    if let Attempt::Conflict(why) = outcome {
        st.stats.borrow_mut().aborted_conflict += 1;
        let now = ctx.now();
        let in_window = now >= sh.from && now < sh.end;
        sh.measured.borrow_mut().abort((n, wk), why, now, in_window);
    }
    (outcome, waited)
}

/// A chopped transaction (DrTM Sec. 4, `Workload::chop`): its pieces in turn, each a
/// transaction of its own. Until a piece that writes has committed (`wrote`), an abort is the
/// whole transaction's (retried from its lookups); after, the pieces done are visible to
/// others, so every later piece is retried until it commits, past the run's end if need be
/// (the chopping lets later pieces only conflict). The pieces left are logged before each
/// (`NodeState::chopped`), so a restarted coordinator finishes them. Deferred pieces are not
/// run here: the commit point of the piece before them queues them for publication
/// (`chop::mark_committed`). `resumed`: the parent's id when finishing a logged transaction
/// after a restart (a piece of it already wrote).
#[allow(clippy::too_many_arguments)]
async fn run_pieces(
    ctx: &Ctx,
    st: &NodeState,
    sh: &Shared,
    pieces: &[TxnSpec],
    c: u32,
    seq: &mut u64,
    resumed: Option<u64>,
) -> (Attempt, bool) {
    let at = (ctx.me().worker, c);
    let mut wrote = resumed.is_some();
    // The parent's id: a sequence number of the coordinator's no attempt takes.
    let parent = resumed.unwrap_or_else(|| {
        *seq += 1;
        txbed_txn::attempt::txn_id(st.me, st.incarnation, at.0, c, *seq)
    });
    let log = Chopped { parent, pieces: pieces.to_vec(), next: 0, running: 0, committed: false, wrote };
    // The record goes to the log area (NVRAM where the logs are durable).
    let bytes: usize = pieces.iter().map(|p| 16 * (p.reads.len() + p.writes.len()) + 8 * p.params.len()).sum();
    let copy_ns = ctx.costs().copy_ns(bytes);
    ctx.compute(copy_ns);
    st.chopped.borrow_mut().insert(at, log);
    let mut waited = false;
    let ended = |a: Attempt, waited: bool| {
        st.chopped.borrow_mut().remove(&at);
        (a, waited)
    };
    for (k, p) in pieces.iter().enumerate() {
        if st.workload.deferred(p) {
            break;
        }
        if let Some(l) = st.chopped.borrow_mut().get_mut(&at) {
            (l.next, l.committed, l.wrote) = (k, false, wrote);
        }
        let mut tries = 0;
        loop {
            let (a, w) = one_attempt(ctx, st, sh, p, c, seq, tries, false).await;
            waited |= w;
            match a {
                Attempt::Committed => {
                    wrote |= !p.writes.is_empty();
                    break;
                }
                Attempt::Conflict(_) | Attempt::UserAbort if !wrote => return ended(a, waited),
                Attempt::Failed(_) => return ended(a, waited),
                Attempt::UserAbort => {
                    let why = "a chopped transaction's piece aborted by its logic after an earlier piece wrote (the chopping puts user aborts first)";
                    return ended(Attempt::Failed(TxnError::Unsupported(why)), waited);
                }
                Attempt::Conflict(_) if st.bug == Some(txbed_txn::chop::GIVES_UP_PIECE) => break,
                Attempt::Conflict(_) => {
                    tries += 1;
                    waited = true;
                    back_off(ctx, sh, tries).await;
                }
            }
        }
    }
    ended(Attempt::Committed, waited)
}

/// Publication (DrTM Sec. 4.2): once an epoch boundary has passed since the machine last
/// published (`all`: at once, at the end of the run), this coordinator applies the deferred
/// pieces queued so far, oldest first, each a transaction retried until it commits; one
/// coordinator of the machine at a time, so the queue's order is the order they apply in.
async fn publish(ctx: &Ctx, st: &NodeState, sh: &Shared, c: u32, seq: &mut u64, all: bool) -> Result<(), String> {
    let epoch = ctx.now() / st.workload.publish_epoch_ns().max(1);
    let due = {
        let mut d = st.deferred.borrow_mut();
        if d.queue.is_empty() || d.publishing || (!all && epoch <= d.epoch) {
            return Ok(());
        }
        (d.publishing, d.epoch) = (true, epoch);
        d.queue.len()
    };
    let mut result = Ok(());
    for _ in 0..due {
        let Some((_, piece)) = st.deferred.borrow().queue.front().cloned() else { break };
        let mut tries = 0;
        loop {
            // Its commit point takes it off the queue (`chop::mark_committed`).
            match one_attempt(ctx, st, sh, &piece, c, seq, tries, true).await.0 {
                Attempt::Committed => break,
                Attempt::Conflict(_) => {
                    tries += 1;
                    back_off(ctx, sh, tries).await;
                }
                other => {
                    result = Err(format!("publishing a deferred {}: {other:?}", piece.kind));
                    break;
                }
            }
        }
        if result.is_err() {
            break;
        }
    }
    st.deferred.borrow_mut().publishing = false;
    result
}

/// What one node contributes to the run's result (plain data: it crosses processes as JSON).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct NodeResult {
    pub txns: Vec<txbed_checker::Txn>,
    pub finals: Vec<Final>,
    pub conserved: i64,
    pub initial: i64,
    pub committed: u64,
    pub aborted_conflict: u64,
    pub aborted_user: u64,
    pub external_delta: i64,
    pub measured_committed: u64,
    pub measured_aborted: u64,
    /// Latency histogram as (value ns, count) pairs.
    pub latency: Vec<(u64, u64)>,
    pub failures: Vec<String>,
    /// Committed pieces of chopped transactions and their parents (`NodeState::pieces`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<(u64, u64)>,
    pub stage_ns: [u64; Stage::COUNT],
    pub stage_round_trips: [u64; Stage::COUNT],
    pub stage_bytes: [u64; Stage::COUNT],
    pub stage_calls: [u64; Stage::COUNT],
    #[serde(default)]
    pub stage_lookup_reads: [u64; Stage::COUNT],
    /// Record accesses served on the local path, per stage.
    #[serde(default)]
    pub stage_local: [u64; Stage::COUNT],
    #[serde(default)]
    pub stage_inter_dc_messages: [u64; Stage::COUNT],
    #[serde(default)]
    pub stage_inter_dc_round_trips: [u64; Stage::COUNT],
    /// HTM regions and how they ended (`TxnStats::htm`).
    #[serde(default)]
    pub htm: HtmCounters,
    #[serde(default)]
    pub nvram_log_records: u64,
    #[serde(default)]
    pub nvram_log_bytes: u64,
    /// Work requests posted by this node's workers, by opcode (sockets backend only).
    #[serde(default)]
    pub verbs: [u64; 7],
    /// Committed in the window per transaction type.
    #[serde(default)]
    pub per_kind: std::collections::BTreeMap<String, u64>,
    /// Conflicts in the window per cause.
    #[serde(default)]
    pub aborted_by: std::collections::BTreeMap<String, u64>,
    /// The workload's consistency conditions over this node's records.
    #[serde(default)]
    pub consistency: Vec<Consistency>,
    /// Log records and bytes this node sent to backups (one per backup).
    #[serde(default)]
    pub log_records: u64,
    #[serde(default)]
    pub log_bytes: u64,
    #[serde(default)]
    pub log_room_waits: u64,
    /// This node's location cache and the READs its lookups issued.
    #[serde(default)]
    pub location: txbed_txn::locate::CacheStats,
    /// Latency histograms in the window per transaction type, as (value ns, count) pairs.
    #[serde(default)]
    pub per_kind_latency: std::collections::BTreeMap<String, Vec<(u64, u64)>>,
    /// Counts in the window per (node, worker).
    #[serde(default)]
    pub per_worker: Vec<crate::breakdown::WorkerCounts>,
    /// Commits, aborts and latency over the run by time.
    #[serde(default)]
    pub series: crate::breakdown::Series,
    /// Sockets backend with emulated partitions: datagrams dropped, RC doorbells and RC
    /// completions held while their link was cut.
    #[serde(default)]
    pub partitioned: [u64; 3],
}

/// Records `node_result` asks about at once whether they are untouched since loading.
const UNTOUCHED_BLOCK: u64 = 64;

/// Collects a node's history, final versions (its primaries and the replicas it keeps), and
/// the conserved quantity over its records. `states` are its workers' protocol states (one
/// shared in the simulator, one per worker thread on sockets); their histories move into the
/// result (it is collected once, at the end of a run), where a copy cost a large run's
/// history over again.
pub fn node_result(
    spec: &TxnRunSpec,
    node: u16,
    mem: &dyn HostMemory,
    base: u64,
    states: &[Rc<NodeState>],
    layout: &Layout,
) -> NodeResult {
    let w = &spec.workload;
    let mut r = NodeResult::default();
    let mut stats = TxnStats::default();
    let mut replica: std::collections::BTreeMap<u64, u64> = Default::default();
    for st in states {
        r.location.add(&st.cache.borrow().stats);
        r.txns.append(&mut st.history.borrow_mut());
        r.pieces.extend(st.pieces.borrow().iter().copied());
        stats.add(&st.stats.borrow());
        for (&k, v) in st.replica.borrow().iter() {
            let e = replica.entry(k).or_insert(0);
            *e = (*e).max(v.version);
        }
    }
    // A record the run never touched still holds version 0 and its initial value: it is left
    // out of the finals (as every version 0 is) and of both conserved sums, whose difference
    // is what the invariant checks (memories that do not track touches count every record).
    let mut rec = Vec::new();
    for place in &layout.tables {
        let per = place.spec.rows_per_node;
        rec.resize(place.spec.record_bytes as usize, 0);
        let first = node as u64 * per;
        let mut row = first;
        while row < first + per {
            let key = Key { table: place.spec.id, row };
            let off = base + place.tuples_at + (row - first) * place.tuple_bytes;
            // Untouched runs of records are skipped a block at a time.
            let block = UNTOUCHED_BLOCK.min(first + per - row);
            if mem.untouched_since_load(off, block * place.tuple_bytes) {
                row += block;
                continue;
            }
            row += 1;
            if mem.untouched_since_load(off, place.tuple_bytes) {
                continue;
            }
            let mut word = [0u8; 8];
            let _ = mem.peek(off + VERSION, &mut word);
            let version = split_version_word(u64::from_le_bytes(word)).1;
            let _ = mem.peek(off + store::META_BYTES, &mut rec);
            r.conserved += w.conserved(key, &rec);
            r.initial += w.initial_conserved(key);
            if version > 0 {
                r.finals.push(Final { replica: "primary".into(), key: history_key(key.table, key.row), version });
            }
        }
    }
    // Copies in registered memory (`Protocol::stores_replicas`): replica k of every
    // partition makes up the store `replicaK`.
    for (k, homes) in crate::spec::copies_held(spec, node).iter().enumerate() {
        for place in &layout.tables {
            let Some(copy) = store::copy_table(place.spec.id, k as u16 + 1).and_then(|id| layout.table(id)) else {
                continue;
            };
            let per = place.spec.rows_per_node;
            for (i, row) in homes.iter().flat_map(|&h| h as u64 * per..(h as u64 + 1) * per).enumerate() {
                // Untouched: its main bucket was never read (no chain from it changed) nor its
                // tuple where loading put it.
                let bucket = base + copy.buckets_at + store::bucket_of(row, copy.buckets) * store::BUCKET_BYTES;
                let tuple = base + copy.tuples_at + i as u64 * copy.tuple_bytes;
                if mem.untouched_since_load(bucket, store::BUCKET_BYTES)
                    && mem.untouched_since_load(tuple, copy.tuple_bytes)
                {
                    continue;
                }
                let Some(off) = store::find_local(mem, base, copy, row) else { continue };
                let version = split_version_word(mem.load_u64(base + off + VERSION).unwrap_or(0)).1;
                if version > 0 {
                    let key = history_key(place.spec.id, row);
                    r.finals.push(Final { replica: format!("replica{}", k + 1), key, version });
                }
            }
        }
    }
    // The k-th backup of a key is node (primary + k).
    for (&k, &version) in replica.iter() {
        let key = Key { table: (k >> 48) as u16, row: k & ((1 << 48) - 1) };
        let nth = (node + spec.nodes - w.home(key, spec.nodes)) % spec.nodes;
        r.finals.push(Final { replica: format!("backup{nth}"), key: k, version });
    }
    let records = NodeRecords { w: &**w, mem, base, layout, node };
    r.consistency = w.check_consistency(node, spec.nodes, &records);
    r.set_stats(&stats);
    r
}

/// A node's records as `Workload::check_consistency` reads them, from its memory.
struct NodeRecords<'a> {
    w: &'a dyn txbed_workloads::Workload,
    mem: &'a dyn HostMemory,
    base: u64,
    layout: &'a Layout,
    node: u16,
}

impl NodeRecords<'_> {
    /// Where rows `rows` of `table` lie, if all this node's: records are loaded in key order,
    /// so a key's tuple is at its row's position.
    fn tuples(&self, table: u16, rows: std::ops::Range<u64>) -> Option<(&store::TablePlace, u64, u64)> {
        let place = self.layout.table(table)?;
        let per = place.spec.rows_per_node;
        let first = self.node as u64 * per;
        if rows.start < first || rows.end > first + per || rows.start >= rows.end {
            return None;
        }
        let off = self.base + place.tuples_at + (rows.start - first) * place.tuple_bytes;
        Some((place, off, (rows.end - rows.start) * place.tuple_bytes))
    }
}

impl txbed_workloads::Records for NodeRecords<'_> {
    fn read(&self, key: Key, rec: &mut Vec<u8>) -> bool {
        let Some((place, off, len)) = self.tuples(key.table, key.row..key.row + 1) else { return false };
        rec.clear();
        rec.resize(place.spec.record_bytes as usize, 0);
        // An untouched record is its initial value, as the check reads it: made alone,
        // without filling its page.
        if self.mem.untouched_since_load(off, len) {
            self.w.initial_checked_into(key, rec);
            return true;
        }
        self.mem.peek(off + store::META_BYTES, rec).is_ok()
    }

    fn untouched(&self, table: u16, rows: std::ops::Range<u64>) -> bool {
        self.tuples(table, rows).is_some_and(|(_, off, len)| self.mem.untouched_since_load(off, len))
    }
}

impl NodeResult {
    /// The protocol counters this result carries (flat fields: it crosses processes as JSON).
    pub fn stats(&self) -> TxnStats {
        TxnStats {
            committed: self.committed,
            aborted_conflict: self.aborted_conflict,
            aborted_user: self.aborted_user,
            external_delta: self.external_delta,
            log_records: self.log_records,
            log_bytes: self.log_bytes,
            log_room_waits: self.log_room_waits,
            stage_ns: self.stage_ns,
            stage_round_trips: self.stage_round_trips,
            stage_bytes: self.stage_bytes,
            stage_calls: self.stage_calls,
            stage_lookup_reads: self.stage_lookup_reads,
            stage_local: self.stage_local,
            stage_inter_dc_messages: self.stage_inter_dc_messages,
            stage_inter_dc_round_trips: self.stage_inter_dc_round_trips,
            htm: txbed_txn::node::HtmStats {
                regions: self.htm.regions,
                committed: self.htm.committed,
                aborts: self.htm.aborts,
                fallbacks: self.htm.fallbacks,
                region_ns: self.htm.region_ns,
            },
            nvram_log_records: self.nvram_log_records,
            nvram_log_bytes: self.nvram_log_bytes,
        }
    }

    pub fn set_stats(&mut self, s: &TxnStats) {
        self.committed = s.committed;
        self.aborted_conflict = s.aborted_conflict;
        self.aborted_user = s.aborted_user;
        self.external_delta = s.external_delta;
        self.log_records = s.log_records;
        self.log_bytes = s.log_bytes;
        self.log_room_waits = s.log_room_waits;
        self.stage_ns = s.stage_ns;
        self.stage_round_trips = s.stage_round_trips;
        self.stage_bytes = s.stage_bytes;
        self.stage_calls = s.stage_calls;
        self.stage_lookup_reads = s.stage_lookup_reads;
        self.stage_local = s.stage_local;
        self.stage_inter_dc_messages = s.stage_inter_dc_messages;
        self.stage_inter_dc_round_trips = s.stage_inter_dc_round_trips;
        self.nvram_log_records = s.nvram_log_records;
        self.nvram_log_bytes = s.nvram_log_bytes;
        self.htm = HtmCounters {
            regions: s.htm.regions,
            committed: s.htm.committed,
            aborts: s.htm.aborts,
            fallbacks: s.htm.fallbacks,
            region_ns: s.htm.region_ns,
        };
    }
}

/// `txbed_txn::node::HtmStats` as results carry it between processes.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HtmCounters {
    pub regions: u64,
    pub committed: u64,
    pub aborts: [u64; 5],
    pub fallbacks: u64,
    pub region_ns: u64,
}

pub fn add_measured(r: &mut NodeResult, m: &Measured) {
    r.measured_committed += m.committed;
    r.measured_aborted += m.aborted;
    for (k, v) in &m.per_kind {
        *r.per_kind.entry(k.clone()).or_default() += v;
    }
    for (k, v) in &m.aborted_by {
        *r.aborted_by.entry(k.clone()).or_default() += v;
    }
    r.latency.extend(m.latency_ns.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())));
    for (k, h) in &m.per_kind_latency {
        r.per_kind_latency.entry(k.clone()).or_default().extend(crate::outcome::histogram_pairs(h));
    }
    r.per_worker.extend(m.per_worker.values().copied());
    r.series.add(&m.series);
}
