//! Lookups before a transaction (reconnaissance): secondary and ordered access served by the
//! node that owns the rows, whatever the protocol.
//!
//! A workload whose read and write sets depend on data (TPC-C's D_NEXT_O_ID, customers by
//! last name, a customer's newest order) names [`Lookup`]s; the coordinator sends each to the
//! node that owns its key (`H_LOOKUP`, or a direct call when that is itself), where
//! `Workload::answer` replies from the node's committed records and its ordered index: one
//! per node (`NodeState::index`), kept by that node's CPU, since one-sided verbs cannot
//! search a sorted structure. Answers are hints: the transaction reads the rows they name and
//! its logic checks them (`docs/workloads.md` says why that keeps the run serializable).
//!
//! Request: `args` as i64s; reply: the answer as i64s (both little-endian, `msg::encode_ints`).

use std::cell::Cell;
use std::rc::Rc;

use txbed_transport::{Ctx, Handled, HandlerCtx, HandlerFn, HostMemory, MemError, MemoryRegion};
use txbed_workloads::{Key, Lookup};

use crate::error::TxnError;
use crate::msg::{decode_ints, encode_ints};
use crate::node::{NodeState, MALFORMED};
use crate::post::endpoint;
use crate::store::{self, META_BYTES, VERSION};

pub use crate::node::NodeIndex;
/// Handler ids 60..=69 belong to lookups.
pub use crate::node::H_LOOKUP;

/// CPU time of answering: a fixed part and a part per record read (a local hash lookup and
/// copy), ns.
const ANSWER_NS: u64 = 150;
const ROW_NS: u64 = 40;

/// Reads `key`'s committed record from this node's store (None if the node does not hold
/// it, or a write kept changing it): the version word before and after must agree.
fn read_record(n: &NodeState, mem: &dyn HostMemory, key: Key) -> Option<Vec<u8>> {
    if n.workload.home(key, n.nodes) != n.me {
        return None;
    }
    let place = n.catalog.layout.table(key.table)?;
    let at = n.base() + store::find_local(mem, n.base(), place, key.row)?;
    let mut rec = vec![0u8; place.spec.record_bytes as usize];
    for _ in 0..3 {
        let before = mem.load_u64(at + VERSION).ok()?;
        mem.read(at + META_BYTES, &mut rec).ok()?;
        if mem.load_u64(at + VERSION).ok()? == before {
            return Some(rec);
        }
    }
    None
}

/// Answers `args` at node `n`; returns the answer and the CPU time it took.
fn answer(n: &NodeState, mem: &dyn HostMemory, args: &[i64]) -> (Vec<i64>, u64) {
    let rows = Cell::new(0u64);
    let read = |k: Key| {
        rows.set(rows.get() + 1);
        read_record(n, mem, k)
    };
    let out = n.workload.answer(args, &mut n.index.0.borrow_mut(), &read);
    (out, ANSWER_NS + ROW_NS * rows.get())
}

/// Builds `n`'s index from its loaded store (`Workload::build_index`), before the run.
pub fn build(n: &NodeState, mem: &dyn HostMemory) {
    let read = |k: Key| read_record(n, mem, k);
    n.workload.build_index(n.me, n.nodes, &mut n.index.0.borrow_mut(), &read);
}

/// The lookup handlers of `n`.
pub fn handlers(n: &Rc<NodeState>) -> Vec<(u16, Rc<HandlerFn>)> {
    let n = n.clone();
    let h: Rc<HandlerFn> = Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
        // A request that does not decode gets one byte, which no answer is.
        let Ok(args) = decode_ints(req) else {
            ctx.reply.push(MALFORMED);
            return Handled::Reply;
        };
        let (out, ns) = answer(&n, ctx.mem, &args);
        ctx.compute(ns);
        ctx.reply.extend_from_slice(&encode_ints(&out));
        Handled::Reply
    });
    vec![(H_LOOKUP, h)]
}

/// This node's memory through a coroutine (for answering its own lookups without a message).
struct CtxMem<'a>(&'a Ctx);

impl HostMemory for CtxMem<'_> {
    fn regions(&self) -> Vec<MemoryRegion> {
        self.0.regions()
    }
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.0.read_local(addr, out)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.0.write_local(addr, data)
    }
    fn cas_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        self.0.cas_local(addr, compare, swap)
    }
    fn faa_u64(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        self.0.faa_local(addr, add)
    }
}

/// Asks every lookup at the node owning its key, all in parallel; the answers come back in
/// order. A lookup of this node's own rows is answered in place.
pub async fn lookup(ctx: &Ctx, n: &NodeState, lookups: &[Lookup]) -> Result<Vec<Vec<i64>>, TxnError> {
    let t0 = ctx.now();
    let mut answers: Vec<Option<Vec<i64>>> = vec![None; lookups.len()];
    let mut calls = Vec::new();
    for (i, l) in lookups.iter().enumerate() {
        let home = n.workload.home(l.key, n.nodes);
        if home == n.me {
            let (out, ns) = answer(n, &CtxMem(ctx), &l.args);
            ctx.compute(ns);
            answers[i] = Some(out);
        } else {
            // A rejoining owner's index is not rebuilt yet (`ops::check_up`).
            if let Err(e) = crate::ops::check_up(ctx, n, home) {
                let _ = ctx.wait().await;
                ctx.clear_replies();
                return Err(e);
            }
            n.note_send((ctx.me().worker, ctx.coroutine()), home, true);
            calls.push((i, ctx.call(endpoint(ctx, home), H_LOOKUP, &encode_ints(&l.args))));
        }
    }
    if !calls.is_empty() {
        ctx.wait().await?;
    }
    for (i, call) in calls {
        let rep = ctx.take_reply(call).ok_or(TxnError::NoReply("LOOKUP"))??;
        answers[i] = Some(decode_ints(&rep)?);
    }
    ctx.trace_slice("lookup", txbed_transport::trace::STAGE, t0, ctx.now());
    Ok(answers.into_iter().map(|a| a.unwrap_or_default()).collect())
}
