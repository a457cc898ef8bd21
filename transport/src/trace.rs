//! Optional event tracing of a worker: verbs, RPCs, handlers and protocol stages as timed
//! records, for a Chrome/Perfetto trace (written by txbed-report).
//!
//! The recorder only reads the worker's clock and the ids it is handed: it charges no CPU,
//! draws no random numbers and posts nothing, so a traced run is the same run (the simulator's
//! digest does not change). Off by default; when off, each hook costs one `Option` check.
//!
//! What lands where (the track a record belongs to is `qp`, else `coroutine`, else the worker):
//! - a posted work request: a "post OPCODE" slice on the posting coroutine's track (the worker's
//!   track for the RPC layer's own datagrams) covering the CPU time of building its WQE (the
//!   doorbell's MMIO is added to the last one), and an "OPCODE" slice on the QP's track from the
//!   doorbell to its completion. Unsignaled requests are slices too: they end when a later
//!   completion on the same QP retires them (passive ACK), so their length is how long they held
//!   a send-queue slot; one still unconfirmed when the trace is taken ends where it started.
//!   Signaled requests (and failed ones, which always complete) carry a flow from the post
//!   slice to the QP slice.
//! - an RPC call: a slice on the calling coroutine's track from the call to its reply (or
//!   timeout), named after the handler, with the request's and the reply's payload bytes; a
//!   one-way call is a zero-length slice. A flow goes from the call to the handler that served
//!   it on the callee's worker track ("rpc" slices covering dispatch, handler CPU and reply
//!   copy). Duplicates answered from memory are not recorded.
//! - stages and transactions: whatever protocol code reports through `Ctx::trace_slice`.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use crate::rpc::CallId;
use crate::verbs::{Completion, Endpoint, Nanos, QpInfo, QpType, WorkRequest};

/// Categories of trace records.
pub const VERB: &str = "verb";
pub const RPC: &str = "rpc";
/// A worker's direct call of its own handler (`Ctx::call_local`: the local path, no message).
pub const LOCAL: &str = "local";
pub const STAGE: &str = "stage";
pub const TXN: &str = "txn";
/// Every category, as `--trace-filter` takes them.
pub const CATEGORIES: [&str; 5] = [VERB, RPC, LOCAL, STAGE, TXN];

/// One traced slice. `start_ns == end_ns` for instants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub node: u16,
    pub worker: u16,
    pub coroutine: Option<u32>,
    pub qp: Option<u32>,
    /// The node a QP is connected to (RC) or an RPC goes to; `None` on a UD QP.
    pub peer: Option<u16>,
    pub name: Cow<'static, str>,
    /// [`VERB`], [`RPC`], [`STAGE`] or [`TXN`].
    pub category: &'static str,
    /// A flow (request to completion) starts at this slice: a trace-wide id.
    pub flow_out: Option<u64>,
    /// A flow ends at this slice.
    pub flow_in: Option<u64>,
    pub args: Vec<(&'static str, u64)>,
}

/// Flow ids are unique over a run: the owning worker's endpoint is part of them. Verb flows
/// have the top bit set; RPC flows are named by the caller's call id so the callee can compute
/// the same id.
fn flow_id(verb: bool, who: Endpoint, n: u64) -> u64 {
    ((verb as u64) << 63) | ((who.node.0 as u64) << 47) | ((who.worker as u64) << 31) | (n & 0x7fff_ffff)
}

/// The flow id of the RPC call `call_id` made by `caller`.
pub fn rpc_flow(caller: Endpoint, call_id: CallId) -> u64 {
    flow_id(false, caller, call_id)
}

pub(crate) struct Recorder {
    me: Endpoint,
    events: Vec<TraceEvent>,
    /// Per QP: requests not yet retired, (sequence number, event index), in posting order.
    open_wrs: Vec<VecDeque<(u64, usize)>>,
    /// Calls awaiting their reply.
    open_calls: BTreeMap<CallId, usize>,
    next_flow: u64,
}

impl Recorder {
    pub(crate) fn new(me: Endpoint) -> Self {
        Recorder { me, events: Vec::new(), open_wrs: Vec::new(), open_calls: BTreeMap::new(), next_flow: 1 }
    }

    fn event(
        &self,
        start: Nanos,
        end: Nanos,
        coro: Option<u32>,
        name: Cow<'static, str>,
        cat: &'static str,
    ) -> TraceEvent {
        TraceEvent {
            start_ns: start,
            end_ns: end,
            node: self.me.node.0,
            worker: self.me.worker,
            coroutine: coro,
            qp: None,
            peer: None,
            name,
            category: cat,
            flow_out: None,
            flow_in: None,
            args: Vec::new(),
        }
    }

    /// One doorbell: `wrs` (sequence numbers from `first_seq`) built from `t0` at `wqe_ns`
    /// each, rung at `at`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn posted(
        &mut self,
        coro: Option<u32>,
        qp: QpInfo,
        first_seq: u64,
        wrs: &[WorkRequest],
        t0: Nanos,
        wqe_ns: Nanos,
        at: Nanos,
    ) {
        let q = qp.id.0 as usize;
        if self.open_wrs.len() <= q {
            self.open_wrs.resize_with(q + 1, VecDeque::new);
        }
        let peer = (qp.kind == QpType::Rc).then_some(qp.peer.0);
        for (i, wr) in wrs.iter().enumerate() {
            let op = wr.op.opcode().name();
            let from = t0 + i as u64 * wqe_ns;
            let to = if i + 1 == wrs.len() { at } else { from + wqe_ns };
            // Failed unsignaled requests complete too; the flow is dropped then if unmatched.
            let flow = wr.signaled.then(|| {
                self.next_flow += 1;
                flow_id(true, self.me, self.next_flow)
            });
            let mut post = self.event(from, to, coro, Cow::Borrowed(post_name(op)), VERB);
            post.flow_out = flow;
            post.peer = peer;
            self.events.push(post);
            let mut e = self.event(at, at, coro, Cow::Borrowed(op), VERB);
            e.qp = Some(qp.id.0);
            e.peer = peer;
            e.flow_in = flow;
            e.args = vec![("bytes", wr.op.payload_len() as u64), ("signaled", wr.signaled as u64)];
            self.open_wrs[q].push_back((first_seq + i as u64, self.events.len()));
            self.events.push(e);
        }
    }

    /// A completion for request `seq` on its QP, polled at `now`: ends it and every earlier
    /// request on the QP it confirms.
    pub(crate) fn completed(&mut self, now: Nanos, seq: u64, c: &Completion) {
        let Some(open) = self.open_wrs.get_mut(c.qp.0 as usize) else { return };
        while let Some(&(s, i)) = open.front() {
            if s > seq {
                break;
            }
            open.pop_front();
            let e = &mut self.events[i];
            e.end_ns = now;
            if s == seq && !c.status.is_ok() {
                e.name = Cow::Owned(format!("{} ({:?})", e.name, c.status));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn call(
        &mut self,
        now: Nanos,
        coro: u32,
        call_id: CallId,
        dst: Endpoint,
        name: Cow<'static, str>,
        bytes: usize,
        oneway: bool,
    ) {
        let mut e = self.event(now, now, Some(coro), name, RPC);
        e.peer = Some(dst.node.0);
        e.args = vec![("to_worker", dst.worker as u64), ("bytes", bytes as u64)];
        if oneway {
            e.args.push(("oneway", 1));
        } else {
            e.flow_out = Some(rpc_flow(self.me, call_id));
            self.open_calls.insert(call_id, self.events.len());
        }
        self.events.push(e);
    }

    /// A one-way message a handler sent (`HandlerCtx::notify`): no coroutine's call.
    pub(crate) fn notice(&mut self, now: Nanos, dst: Endpoint, name: Cow<'static, str>, bytes: usize) {
        let mut e = self.event(now, now, None, name, RPC);
        e.peer = Some(dst.node.0);
        e.args = vec![("to_worker", dst.worker as u64), ("bytes", bytes as u64), ("oneway", 1)];
        self.events.push(e);
    }

    /// The call ended at `now`: replied with `reply_bytes` of payload, or failed with `error`.
    pub(crate) fn call_done(&mut self, now: Nanos, call_id: CallId, reply_bytes: usize, error: Option<&'static str>) {
        if let Some(i) = self.open_calls.remove(&call_id) {
            let e = &mut self.events[i];
            e.end_ns = now;
            match error {
                Some(what) => e.name = Cow::Owned(format!("{} ({what})", e.name)),
                None => e.args.push(("reply_bytes", reply_bytes as u64)),
            }
        }
    }

    /// Marks the last `n` recorded events as `category` (a direct call and its serving are
    /// recorded like an RPC's, then filed as `LOCAL`).
    pub(crate) fn file_last(&mut self, n: usize, category: &'static str) {
        let from = self.events.len().saturating_sub(n);
        for e in &mut self.events[from..] {
            e.category = category;
        }
    }

    /// A request from `src` served from `start` to `end`.
    pub(crate) fn served(
        &mut self,
        start: Nanos,
        end: Nanos,
        src: Endpoint,
        call_id: Option<CallId>,
        name: Cow<'static, str>,
    ) {
        let mut e = self.event(start, end, None, name, RPC);
        e.peer = Some(src.node.0);
        e.args = vec![("from_worker", src.worker as u64)];
        e.flow_in = call_id.map(|id| rpc_flow(src, id));
        self.events.push(e);
    }

    pub(crate) fn slice(
        &mut self,
        coro: u32,
        name: Cow<'static, str>,
        cat: &'static str,
        start: Nanos,
        end: Nanos,
        args: &[(&'static str, u64)],
    ) {
        let mut e = self.event(start, end.max(start), Some(coro), name, cat);
        e.args = args.to_vec();
        self.events.push(e);
    }

    /// Everything recorded so far. Requests and calls still open stay zero-length and are
    /// forgotten, so a later completion cannot touch a taken record.
    pub(crate) fn take(&mut self) -> Vec<TraceEvent> {
        for q in &mut self.open_wrs {
            q.clear();
        }
        self.open_calls.clear();
        std::mem::take(&mut self.events)
    }
}

fn post_name(op: &'static str) -> &'static str {
    match op {
        "READ" => "post READ",
        "WRITE" => "post WRITE",
        "WRITE_WITH_IMM" => "post WRITE_WITH_IMM",
        "CAS" => "post CAS",
        "FAA" => "post FAA",
        "SEND" => "post SEND",
        _ => "post",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{NodeId, Op, Opcode, Payload, QpId, RemoteBuf, WcStatus};

    fn wr(signaled: bool) -> WorkRequest {
        let remote = RemoteBuf { rkey: 1, addr: 0, len: 8 };
        WorkRequest { wr_id: 0, op: Op::Write { src: Payload::Inline(vec![0; 8]), remote }, signaled }
    }

    #[test]
    fn unsignaled_requests_end_at_the_completion_that_retires_them() {
        let me = Endpoint { node: NodeId(1), worker: 2 };
        let mut r = Recorder::new(me);
        let qp = QpInfo { id: QpId(3), kind: QpType::Rc, peer: NodeId(0), max_outstanding: 16 };
        r.posted(Some(4), qp, 1, &[wr(false), wr(true)], 100, 10, 125);
        r.posted(Some(4), qp, 3, &[wr(false)], 200, 10, 215);
        let c = Completion {
            wr_id: 2,
            qp: QpId(3),
            opcode: Opcode::Write,
            status: WcStatus::Success,
            signaled: true,
            peer: NodeId(0),
        };
        r.completed(900, 2, &c);
        let ev = r.take();
        let on_qp: Vec<&TraceEvent> = ev.iter().filter(|e| e.qp.is_some()).collect();
        assert_eq!(on_qp.len(), 3);
        assert_eq!((on_qp[0].start_ns, on_qp[0].end_ns), (125, 900), "unsignaled, retired by the next completion");
        assert_eq!((on_qp[1].start_ns, on_qp[1].end_ns), (125, 900));
        assert_eq!((on_qp[2].start_ns, on_qp[2].end_ns), (215, 215), "never confirmed: zero length");
        // Post slices: per WQE, the MMIO on the last of a doorbell.
        let posts: Vec<(u64, u64)> = ev.iter().filter(|e| e.qp.is_none()).map(|e| (e.start_ns, e.end_ns)).collect();
        assert_eq!(posts, vec![(100, 110), (110, 125), (200, 215)]);
        // Only the signaled request has a flow, on both ends.
        let flows: Vec<_> = ev.iter().filter_map(|e| e.flow_out.or(e.flow_in)).collect();
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[0], flows[1]);
        assert!(ev.iter().all(|e| e.node == 1 && e.worker == 2 && e.coroutine == Some(4)));
    }

    #[test]
    fn rpc_flows_match_between_caller_and_callee() {
        let caller = Endpoint { node: NodeId(0), worker: 1 };
        let callee = Endpoint { node: NodeId(2), worker: 1 };
        let mut a = Recorder::new(caller);
        let mut b = Recorder::new(callee);
        a.call(10, 0, 7, callee, Cow::Borrowed("LOCK"), 24, false);
        b.served(50, 60, caller, Some(7), Cow::Borrowed("LOCK"));
        a.call_done(100, 7, 9, None);
        let (ea, eb) = (a.take(), b.take());
        assert_eq!((ea[0].start_ns, ea[0].end_ns), (10, 100));
        assert_eq!(ea[0].args, vec![("to_worker", 1), ("bytes", 24), ("reply_bytes", 9)]);
        assert_eq!(ea[0].flow_out, eb[0].flow_in);
        assert!(ea[0].flow_out.is_some());
        assert_ne!(ea[0].flow_out, Some(flow_id(true, caller, 7)), "verb and RPC flows are distinct");
    }
}
