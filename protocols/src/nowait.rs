//! NOWAIT (RCC Sec. 4.2): two-phase locking with exclusive locks that never waits.
//!
//! - LOCK: every record is locked and read. One-sided: RDMA CAS (0 -> owner) and READ of the
//!   tuple posted back to back on one QP, the CAS unsignaled; the READ runs after the CAS
//!   (per-QP order), and its data is ignored if the CAS failed. RPC: the handler CASes the lock
//!   locally and replies with the tuple. A failed lock aborts the transaction at once.
//! - LOG: the new values go to the backups of every written record's primary (RCC Sec. 4.1;
//!   DrTM+H Sec. 5.4): one-sided WRITE into a ring buffer the backup owns, or RPC.
//! - COMMIT: write-back and unlock, one-sided as two WRITEs with only the second signaled, or
//!   one RPC. RELEASE: read-only records (and every record on abort) are unlocked by a WRITE
//!   of 0, or by RPC. The lock word always holds the owner, so an RPC LOCK can be released
//!   one-sided and vice versa (RCC Sec. 5.2).

use txbed_checker::{Access, Status, Txn};
use txbed_transport::{Ctx, Endpoint, LocalBuf, NodeId, Op, Payload, QpId};
use txbed_workloads::{Executed, TxnSpec};

use crate::locate::locate;
use crate::node::{Bug, NodeState, BUSY, H_COMMIT, H_LOCK, H_RELEASE, OK};
use crate::stage::Stage;
use crate::store::{split_version_word, version_word, LOCK, META_BYTES, VERSION};

/// The stages NOWAIT has, hence the bits its hybrid code may set.
pub const STAGES: [Stage; 4] = [Stage::Lock, Stage::Log, Stage::Release, Stage::Commit];

/// How one attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Committed,
    /// A lock was held by another transaction: retry.
    Conflict,
    /// The transaction's logic aborted: do not retry.
    UserAbort,
    /// A verb or RPC failed (peer dead): the message says which.
    Failed(String),
}

struct Rec {
    table: u16,
    key: u64,
    home: u16,
    write: bool,
    offset: u64,
    locked: bool,
    tuple: Vec<u8>,
}

fn endpoint(ctx: &Ctx, node: u16) -> Endpoint {
    Endpoint { node: NodeId(node), worker: ctx.me().worker }
}

fn qp(ctx: &Ctx, node: u16) -> Result<QpId, String> {
    ctx.rc_qp(NodeId(node), ctx.coroutine() as usize).ok_or_else(|| format!("no QP to node {node}"))
}

/// Runs one attempt of `spec` as transaction `id` (nonzero; also the lock owner).
pub async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let start_ns = ctx.now();
    let tb = |table: u16| n.catalog.layout.table(table).map(|p| p.tuple_bytes as u32).unwrap_or(0);
    let mut recs: Vec<Rec> = spec
        .reads
        .iter()
        .map(|k| (k, false))
        .chain(spec.writes.iter().map(|k| (k, true)))
        .map(|(k, write)| Rec {
            table: k.table,
            key: k.row,
            home: n.workload.home(*k, n.nodes),
            write,
            offset: 0,
            locked: false,
            tuple: Vec::new(),
        })
        .collect();
    let scratch = ctx.scratch();
    let h = n.hybrid;

    // LOCK (and read) every record.
    if h.onesided(Stage::Lock) {
        for r in recs.iter_mut() {
            match locate(ctx, &n.catalog, &n.cache, scratch, r.home, r.table, r.key).await {
                Ok(l) => r.offset = l.offset,
                Err(e) => return Attempt::Failed(format!("{e:?}")),
            }
        }
        let mut at = scratch.addr;
        let mut slots = Vec::new();
        for r in &recs {
            let len = tb(r.table);
            let cas_out = LocalBuf { lkey: scratch.lkey, addr: at, len: 8 };
            // A sentinel, so a result that never arrived cannot read as "was free".
            let _ = ctx.store_local(at, u64::MAX);
            let read_out = LocalBuf { lkey: scratch.lkey, addr: at + 8, len };
            slots.push(at);
            at += 8 + len as u64;
            let q = match qp(ctx, r.home) {
                Ok(q) => q,
                Err(e) => return Attempt::Failed(e),
            };
            let cas =
                Op::Cas { local: cas_out, remote: n.catalog.remote(r.home, r.offset + LOCK, 8), compare: 0, swap: id };
            let read = Op::Read { local: read_out, remote: n.catalog.remote(r.home, r.offset, len) };
            if let Err(e) = ctx.post(q, [(cas, false), (read, true)]) {
                return Attempt::Failed(e.to_string());
            }
        }
        if let Err(c) = ctx.wait().await {
            return Attempt::Failed(c.to_string());
        }
        for (r, &at) in recs.iter_mut().zip(&slots) {
            let old = ctx.load_local(at).unwrap_or(u64::MAX);
            r.locked = old == 0;
            r.tuple = vec![0; tb(r.table) as usize];
            let _ = ctx.read_local(at + 8, &mut r.tuple);
        }
    } else {
        let mut calls = Vec::new();
        for r in &recs {
            let mut req = Vec::with_capacity(24);
            req.extend_from_slice(&r.table.to_le_bytes());
            req.extend_from_slice(&[0; 6]);
            req.extend_from_slice(&r.key.to_le_bytes());
            req.extend_from_slice(&id.to_le_bytes());
            calls.push(ctx.call(endpoint(ctx, r.home), H_LOCK, &req));
        }
        let _ = ctx.wait().await;
        for (r, call) in recs.iter_mut().zip(calls) {
            match ctx.take_reply(call) {
                Some(Ok(rep)) if rep.first() == Some(&OK) => {
                    r.locked = true;
                    r.offset = u64::from_le_bytes(rep[1..9].try_into().expect("reply"));
                    r.tuple = rep[9..].to_vec();
                }
                Some(Ok(rep)) if rep.first() == Some(&BUSY) => {}
                Some(Ok(_)) => return Attempt::Failed(format!("key {} missing on node {}", r.key, r.home)),
                Some(Err(e)) => return Attempt::Failed(e.to_string()),
                None => return Attempt::Failed("lock reply lost".into()),
            }
        }
    }
    if recs.iter().any(|r| !r.locked) {
        release(ctx, n, &recs, |_| true, id).await;
        return Attempt::Conflict;
    }

    // Execute.
    let record = |r: &Rec| r.tuple[META_BYTES as usize..].to_vec();
    let reads: Vec<Vec<u8>> = recs.iter().filter(|r| !r.write).map(record).collect();
    let olds: Vec<Vec<u8>> = recs.iter().filter(|r| r.write).map(record).collect();
    ctx.compute(spec.compute_ns);
    let rv: Vec<&[u8]> = reads.iter().map(|v| v.as_slice()).collect();
    let ov: Vec<&[u8]> = olds.iter().map(|v| v.as_slice()).collect();
    let (new_values, delta) = match n.workload.execute(spec, &rv, &ov) {
        Executed::Commit { new_values, external_delta } => (new_values, external_delta),
        Executed::UserAbort => {
            release(ctx, n, &recs, |_| true, id).await;
            return Attempt::UserAbort;
        }
    };
    let version_of = |r: &Rec| {
        let w = u64::from_le_bytes(r.tuple[VERSION as usize..VERSION as usize + 8].try_into().expect("tuple"));
        split_version_word(w)
    };

    // LOG the new values to the backups of every written primary.
    if n.replication > 1 && !new_values.is_empty() {
        let mut log = Vec::new();
        log.extend_from_slice(&id.to_le_bytes());
        for (r, v) in recs.iter().filter(|r| r.write).zip(&new_values) {
            log.extend_from_slice(&r.key.to_le_bytes());
            log.extend_from_slice(&(version_of(r).1 + 1).to_le_bytes());
            log.extend_from_slice(v);
        }
        let mut backups: Vec<u16> = Vec::new();
        for r in recs.iter().filter(|r| r.write) {
            for k in 1..n.replication {
                let b = (r.home + k) % n.nodes;
                if !backups.contains(&b) {
                    backups.push(b);
                }
            }
        }
        if let Err(e) = crate::log::append(ctx, n, &backups, &log).await {
            return Attempt::Failed(e);
        }
    }

    // COMMIT: write back and unlock; RELEASE the records only read.
    let bug = n.bug == Some(Bug::UnlockBeforeWriteBack);
    if bug {
        release(ctx, n, &recs, |_| true, id).await;
    }
    let mut history = Txn {
        id,
        node: n.me,
        worker: ctx.me().worker,
        coroutine: ctx.coroutine(),
        start_ns,
        end_ns: 0,
        status: Status::Committed,
        label: spec.kind.to_string(),
        reads: Vec::new(),
        writes: Vec::new(),
    };
    let mut calls = Vec::new();
    // Scratch layout: [0, 8 KiB) lock phase and index buckets, [8, 12) KiB log record,
    // [12, 16) KiB write-back staging.
    let mut staging = scratch.addr + 12 * 1024;
    for (r, v) in recs.iter().filter(|r| r.write).zip(&new_values) {
        let (inc, ver) = version_of(r);
        let key = crate::history_key(r.table, r.key);
        history.reads.push(Access { key, version: ver });
        history.writes.push(Access { key, version: ver + 1 });
        let mut body = Vec::with_capacity(16 + v.len());
        body.extend_from_slice(&version_word(inc, ver + 1).to_le_bytes());
        body.extend_from_slice(&id.to_le_bytes());
        body.extend_from_slice(v);
        if h.onesided(Stage::Commit) {
            let q = match qp(ctx, r.home) {
                Ok(q) => q,
                Err(e) => return Attempt::Failed(e),
            };
            let write = Op::Write {
                src: inline_or_staged(ctx, &body, &mut staging),
                remote: n.catalog.remote(r.home, r.offset + VERSION, body.len() as u32),
            };
            let unlock = Op::Write {
                src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
            };
            let ops = if bug { vec![(write, true)] } else { vec![(write, false), (unlock, true)] };
            if let Err(e) = ctx.post(q, ops) {
                return Attempt::Failed(e.to_string());
            }
        } else {
            let mut req = Vec::with_capacity(8 + body.len());
            req.extend_from_slice(&r.offset.to_le_bytes());
            req.extend_from_slice(&body);
            calls.push(ctx.call(endpoint(ctx, r.home), H_COMMIT, &req));
        }
    }
    for r in recs.iter().filter(|r| !r.write) {
        history.reads.push(Access { key: crate::history_key(r.table, r.key), version: version_of(r).1 });
    }
    if !bug {
        release_posts(ctx, n, &recs, |r| !r.write, id);
    }
    let _ = ctx.wait().await;
    ctx.clear_replies();
    let _ = calls;
    history.end_ns = ctx.now();
    n.history.borrow_mut().push(history);
    n.stats.borrow_mut().external_delta += delta;
    Attempt::Committed
}

/// The payload of a WRITE: inline when small (DrTM+H inlines up to 64 B), otherwise staged
/// in this coroutine's scratch at `*at`, which advances. Each request needs its own staging
/// bytes: the NIC DMA-reads them when it processes the request, after later ones are posted.
fn inline_or_staged(ctx: &Ctx, bytes: &[u8], at: &mut u64) -> Payload {
    if bytes.len() <= 64 {
        return Payload::Inline(bytes.to_vec());
    }
    let s = ctx.scratch();
    let here = *at;
    *at += (bytes.len() as u64).div_ceil(8) * 8;
    assert!(*at <= s.addr + s.len as u64, "scratch too small for the write set");
    let _ = ctx.write_local(here, bytes);
    Payload::Local(LocalBuf { lkey: s.lkey, addr: here, len: bytes.len() as u32 })
}

/// Posts the unlocks of the records `which` selects, by the RELEASE stage's primitive.
fn release_posts(ctx: &Ctx, n: &NodeState, recs: &[Rec], which: impl Fn(&Rec) -> bool, id: u64) {
    for r in recs.iter().filter(|r| r.locked && which(r)) {
        if n.hybrid.onesided(Stage::Release) {
            if let Ok(q) = qp(ctx, r.home) {
                let unlock = Op::Write {
                    src: Payload::Inline(0u64.to_le_bytes().to_vec()),
                    remote: n.catalog.remote(r.home, r.offset + LOCK, 8),
                };
                let _ = ctx.post(q, [(unlock, true)]);
            }
        } else {
            let mut req = Vec::with_capacity(16);
            req.extend_from_slice(&r.offset.to_le_bytes());
            req.extend_from_slice(&id.to_le_bytes());
            ctx.call(endpoint(ctx, r.home), H_RELEASE, &req);
        }
    }
}

async fn release(ctx: &Ctx, n: &NodeState, recs: &[Rec], which: impl Fn(&Rec) -> bool, id: u64) {
    release_posts(ctx, n, recs, which, id);
    let _ = ctx.wait().await;
    ctx.clear_replies();
}
