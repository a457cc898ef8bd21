//! Requests a protocol answers from coroutines rather than in its RPC handlers: a handler
//! cannot post verbs or wait, so one whose answer needs either (RedT's executors, a Paxos
//! primary replicating to its secondaries) queues the request and defers its reply; the
//! worker's server coroutines (`Protocol::background`, `background_coroutines` of them) take
//! requests in arrival order and answer with `Ctx::send_deferred_reply`. And the count of
//! coordinators done, so servers know when nothing more will come.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};

use txbed_transport::{Ctx, Handled, HandlerCtx, NodeStatus, ReplyToken};

use crate::node::NodeState;
use crate::protocol::LocalBoxFuture;
use crate::TxnError;

/// A queued request: the handler it came to, where the reply goes, the request.
pub struct Job {
    pub handler: u16,
    /// None for a job a node queued for itself (`Jobs::push_local`): no reply.
    pub token: Option<ReplyToken>,
    pub req: Vec<u8>,
}

/// A node's queued requests, per worker (a deferred reply leaves from the worker the request
/// came to), and the coordinators of the cluster that are done.
#[derive(Default)]
pub struct Jobs {
    queues: RefCell<BTreeMap<u16, VecDeque<Job>>>,
    /// Coordinators done, by node (a node declared down is forgotten: `forget`).
    done: RefCell<BTreeMap<u16, u64>>,
    /// Per worker, its server coroutines asleep for want of work (`serve`).
    idle: RefCell<BTreeMap<u16, Vec<u32>>>,
}

impl Jobs {
    /// A handler's body: queue the request for this worker's servers, defer the reply.
    /// One idle server of this worker wakes for it.
    pub fn defer(&self, h: &mut HandlerCtx<'_>, handler: u16, req: &[u8]) -> Handled {
        let job = Job { handler, token: Some(h.token()), req: req.to_vec() };
        self.queues.borrow_mut().entry(h.me.worker).or_default().push_back(job);
        if let Some(coro) = self.idle.borrow_mut().get_mut(&h.me.worker).and_then(|v| v.pop()) {
            h.wake(coro);
        }
        Handled::Defer
    }

    /// Queues a job this node gives itself (no reply): an idle server takes it when its
    /// sleep ends.
    pub fn push_local(&self, worker: u16, handler: u16, req: Vec<u8>) {
        self.queues.borrow_mut().entry(worker).or_default().push_back(Job { handler, token: None, req });
    }

    /// Every queued request, by its handler.
    pub fn for_each(&self, mut f: impl FnMut(u16, &[u8])) {
        for q in self.queues.borrow().values() {
            for j in q {
                f(j.handler, &j.req);
            }
        }
    }

    pub fn pop(&self, worker: u16) -> Option<Job> {
        self.queues.borrow_mut().get_mut(&worker).and_then(|q| q.pop_front())
    }

    pub fn is_empty(&self) -> bool {
        self.queues.borrow().values().all(|q| q.is_empty())
    }

    /// A DONE handler's body: one more coordinator of the sender's node ran its last
    /// transaction.
    pub fn note_done(&self, h: &HandlerCtx<'_>) -> Handled {
        *self.done.borrow_mut().entry(h.src.node.0).or_default() += 1;
        Handled::Reply
    }

    /// A node declared down: its coordinators will not say they are done (a restarted one's
    /// new coordinators will).
    pub fn forget(&self, node: u16) {
        self.done.borrow_mut().remove(&node);
    }

    /// A restarted node learns, with its state, which coordinators said they are done (it
    /// was down when they said so).
    pub fn learn_done(&self, from: &Jobs) {
        let mut mine = self.done.borrow_mut();
        for (&m, &c) in from.done.borrow().iter() {
            let e = mine.entry(m).or_default();
            *e = (*e).max(c);
        }
    }

    /// Whether every coordinator of every node not down said it is done.
    pub fn all_done(&self, ctx: &Ctx, n: &NodeState) -> bool {
        let each = ctx.workers() as u64 * n.coroutines as u64;
        let done = self.done.borrow();
        (0..n.nodes).all(|m| ctx.node_status(m) == NodeStatus::Down || done.get(&m).copied().unwrap_or(0) >= each)
    }
}

/// Tells every node's `handler` (a DONE handler) that this coordinator is done, by RPC (a lost
/// datagram is resent), as `Protocol::coordinator_done`.
pub async fn announce_done(ctx: &Ctx, n: &NodeState, handler: u16) {
    for node in 0..n.nodes {
        ctx.call(crate::ops::endpoint(ctx, node), handler, &[]);
    }
    let _ = ctx.wait().await;
    ctx.clear_replies();
}

/// What serves one job: the reply's payload.
pub type ServeFn = for<'a> fn(&'a Ctx, &'a NodeState, &'a Job) -> LocalBoxFuture<'a, Result<Vec<u8>, TxnError>>;

/// How long past the run's end servers keep serving before the run is called stuck.
pub const STRAGGLE_NS: u64 = 10_000_000_000;

/// How long an idle server sleeps when no request wakes it: it then checks whether the run
/// is over (a DONE message does not wake it).
const IDLE_NS: u64 = 1_000_000;

/// A server coroutine: serves this worker's jobs until the run ended, every coordinator is
/// done, the queues are empty and `busy` says nothing else waits at this node. Idle, it
/// sleeps until a request queued for this worker wakes it (`Jobs::defer`), or `IDLE_NS`.
pub async fn serve(
    ctx: &Ctx,
    n: &NodeState,
    end: u64,
    jobs: &Jobs,
    busy: &dyn Fn() -> bool,
    serve: ServeFn,
) -> Result<(), TxnError> {
    let me = ctx.me().worker;
    loop {
        match jobs.pop(me) {
            Some(job) => {
                let reply = serve(ctx, n, &job).await?;
                if let Some(token) = job.token {
                    ctx.send_deferred_reply(token, reply);
                }
            }
            None => {
                if ctx.now() >= end && jobs.all_done(ctx, n) && jobs.is_empty() && !busy() {
                    return Ok(());
                }
                if ctx.now() > end + STRAGGLE_NS {
                    return Err(TxnError::Unsupported("a protocol's servers still had work 10 s after the end"));
                }
                let coro = ctx.coroutine();
                jobs.idle.borrow_mut().entry(me).or_default().push(coro);
                ctx.sleep(IDLE_NS).await;
                if let Some(v) = jobs.idle.borrow_mut().get_mut(&me) {
                    v.retain(|&c| c != coro);
                }
            }
        }
    }
}

/// Round trips of one stage: its waits in a row, each an inter-DC round trip if it waited for
/// another data center, plus the longest chain a server waited for inside it.
#[derive(Default)]
pub struct Trips {
    pub total: u64,
    pub messages: u64,
}

impl Trips {
    /// One wait: `remote` whether a reply came from another data center, `nested` the
    /// servers' (messages, longest chain).
    pub fn wait(&mut self, remote: bool, nested: (u64, u64)) {
        self.total += remote as u64 + nested.1;
        self.messages += nested.0;
    }

    /// Counts what the stage's own sends do not: the servers' messages and the round trips
    /// beyond the one the stage's own inter-DC replies give.
    pub fn note(&self, ctx: &Ctx, n: &NodeState, own_remote: bool) {
        let extra = self.total.saturating_sub(own_remote as u64);
        n.note_nested_inter_dc((ctx.me().worker, ctx.coroutine()), self.messages, extra);
    }
}
