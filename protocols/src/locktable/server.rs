//! The lock-server agent (Sec. 3.2): owns a fixed range of the node's items and their locks,
//! answers requests, and handles deadlocks when idle. With mailboxes it is a worker's
//! background coroutine that polls its notifications without blocking and runs Bounded Wait's
//! check when none is there; in the RPC mode its handler serves each request as it arrives
//! and the background coroutine keeps the timeouts.

use std::rc::Rc;

use txbed_transport::{imm, Ctx, Handled, HandlerCtx, Op, ReplyToken};
use txbed_txn::node::{NodeState, MALFORMED};
use txbed_txn::store;
use txbed_txn::TxnError;

use super::comm::{self, Area};
use super::modes::Mode;
use super::table::{self, LockTable};
use super::to::{self, Ordering};
use super::wire::*;
use super::{part, Concurrency, LT_GRANTS_TIMED_OUT};

/// How a queued request is answered: in the agent's mailbox, or by a deferred RPC reply.
#[derive(Copy, Clone, Debug)]
pub enum To {
    Agent(u32),
    Token(ReplyToken),
}

/// What a server does besides answering: add a vote to an agent's vote word.
pub enum Action {
    Respond(To, Msg),
    Vote { agent: u32, yes: bool },
}

/// One lock-server agent's state.
pub struct Server {
    pub locks: LockTable<To>,
    pub order: Ordering<To>,
    /// Agents that said they are done.
    pub done: u32,
}

impl Server {
    pub fn new(c: Concurrency, bound_ns: u64, s_with_ix: bool, two_pending: bool) -> Server {
        let policy = match c {
            Concurrency::NoWait | Concurrency::TimestampOrdering => table::Policy::NoWait,
            Concurrency::WaitDie => table::Policy::WaitDie,
            Concurrency::BoundedWait => table::Policy::BoundedWait { bound_ns },
        };
        Server { locks: LockTable::new(policy, s_with_ix), order: Ordering::with_bug(two_pending), done: 0 }
    }
}

/// The response to `req` with `status`; a granted row carries the item's address (its
/// offset in the home's store region).
fn response(n: &NodeState, mem: &dyn txbed_transport::HostMemory, req: Msg, status: u8) -> Msg {
    let mut m = Msg { kind: RESPONSE, status, ..req };
    if status == GRANTED && req.level == ROW {
        m.addr = n
            .catalog
            .layout
            .table(req.table)
            .and_then(|place| store::find_local(mem, n.base(), place, req.item))
            .unwrap_or(u64::MAX);
    }
    m
}

/// Serves message `m` (already decoded) from `to` at time `now`: what to send goes to `out`.
/// `Err` is a message that makes no sense here (a peer's bug), never a panic.
pub fn serve(
    n: &NodeState,
    srv: &mut Server,
    mem: &dyn txbed_transport::HostMemory,
    m: Msg,
    to: To,
    now: u64,
    out: &mut Vec<Action>,
) -> Result<(), &'static str> {
    let p = part(n);
    let mut answered = Vec::new();
    match m.kind {
        REQUEST => {
            if p.options.concurrency == Concurrency::TimestampOrdering {
                if m.level != ROW || !(m.mode == TO_READ || m.mode == TO_WRITE) {
                    return Err("timestamp ordering takes row reads and writes only");
                }
                match srv.order.request(m.txn, m.lock(), m.mode == TO_WRITE, to, m) {
                    to::Outcome::Granted => answered.push((to, m, GRANTED)),
                    to::Outcome::Queued => {}
                    to::Outcome::TooLate => answered.push((to, m, TOO_LATE)),
                }
            } else {
                let mode = Mode::from_u8(m.mode).ok_or("an unknown lock mode")?;
                match srv.locks.request(m.txn, m.lock(), mode, now, to, m) {
                    table::Outcome::Granted => answered.push((to, m, GRANTED)),
                    table::Outcome::Queued => {}
                    table::Outcome::Refused(status) => answered.push((to, m, status)),
                }
            }
        }
        RELEASE => srv.locks.release(m.txn, m.lock(), &mut answered),
        END => {
            if p.options.concurrency == Concurrency::TimestampOrdering {
                srv.order.end(m.txn, m.status == COMMIT, &mut answered);
            } else {
                srv.locks.end(m.txn, &mut answered);
            }
        }
        VOTE => {
            // Strict 2PL (and TO) hold everything until the end, and the run has no failures:
            // nothing can make a server refuse. The abort half of the word is for failures.
            match to {
                To::Agent(agent) => out.push(Action::Vote { agent, yes: true }),
                To::Token(_) => out.push(Action::Respond(to, Msg { kind: RESPONSE, status: COMMIT, ..m })),
            }
        }
        DONE => srv.done += 1,
        _ => return Err("a message kind servers do not take"),
    }
    for (to, req, status) in answered {
        out.push(Action::Respond(to, answer(n, mem, req, status)));
    }
    Ok(())
}

fn answer(n: &NodeState, mem: &dyn txbed_transport::HostMemory, req: Msg, status: u8) -> Msg {
    // The planted bug tells a waiter that timed out it has the lock.
    let status = if status == TIMEOUT && n.bug == Some(LT_GRANTS_TIMED_OUT) { GRANTED } else { status };
    response(n, mem, req, status)
}

/// Runs `f` on this worker's server state.
pub fn with_server<R>(n: &NodeState, worker: u16, f: impl FnOnce(&mut Server) -> R) -> R {
    let p = part(n);
    let mut v = p.servers.borrow_mut();
    if v.len() <= worker as usize {
        v.resize_with(worker as usize + 1, || None);
    }
    let s = v[worker as usize].get_or_insert_with(|| {
        Server::new(
            p.options.concurrency,
            p.options.bound_us * 1000,
            n.bug == Some(super::LT_GRANTS_S_WITH_IX),
            n.bug == Some(super::LT_TWO_PENDING_WRITES),
        )
    });
    f(s)
}

/// The RPC form of a server: the handler serves each request on arrival; a request that waits
/// keeps its token and is answered by a deferred reply.
pub fn handler(n: &Rc<NodeState>, h: &mut HandlerCtx<'_>, req: &[u8]) -> Handled {
    let Ok(m) = Msg::decode(req) else {
        h.reply.clear();
        h.reply.push(MALFORMED);
        return Handled::Reply;
    };
    let me = h.me.worker;
    let to = To::Token(h.token());
    let mut out = Vec::new();
    let now = h.now;
    // A lock-table lookup, and for a granted row the index (bucket, tuple).
    h.memory_misses(1 + (m.kind == REQUEST && m.level == ROW) as u64 * 2);
    let r = with_server(n, me, |s| serve(n, s, h.mem, m, to, now, &mut out));
    if r.is_err() {
        h.reply.clear();
        h.reply.push(MALFORMED);
        return Handled::Reply;
    }
    let mut replied = false;
    for a in out {
        if let Action::Respond(To::Token(t), msg) = a {
            if t == h.token() {
                h.reply.clear();
                h.reply.extend_from_slice(&msg.encode());
                replied = true;
            } else {
                h.reply_to(t, msg.encode().to_vec());
            }
        }
    }
    if replied {
        Handled::Reply
    } else if m.kind == REQUEST {
        Handled::Defer
    } else {
        // END, RELEASE, DONE: an acknowledgement, so a lost datagram is sent again.
        h.reply.clear();
        h.reply.extend_from_slice(&Msg { kind: RESPONSE, ..m }.encode());
        Handled::Reply
    }
}

/// Sends what serving left to send, from the server's coroutine.
async fn send(ctx: &Ctx, n: &NodeState, area: &Area, out: Vec<Action>) -> Result<(), TxnError> {
    for a in out {
        match a {
            Action::Respond(To::Agent(agent), msg) => {
                let (node, worker, coro) = area.whose(agent);
                comm::notify(ctx, n, node, area.agent_slot(worker, coro), &msg, imm::to_coroutine(worker, coro))
                    .await?;
            }
            Action::Respond(To::Token(t), msg) => ctx.send_deferred_reply(t, msg.encode().to_vec()),
            Action::Vote { agent, yes } => {
                // MPI_Fetch_and_op with MPI_SUM: +1 in the low half (yes) or the high half.
                let (node, worker, coro) = area.whose(agent);
                let scratch = ctx.scratch();
                let local = txbed_transport::LocalBuf { lkey: scratch.lkey, addr: scratch.addr, len: 8 };
                let add = if yes { 1 } else { 1 << 32 };
                let remote = n.catalog.remote(node, area.vote_word(worker, coro), 8);
                comm::post(ctx, comm::qp_to(ctx, node)?, Op::Faa { local, remote, add }).await?;
            }
        }
    }
    Ok(())
}

/// The server agent on worker `me` until every agent is done and nothing is held.
pub async fn run(ctx: Ctx, n: Rc<NodeState>, expected_done: u32) -> Result<(), TxnError> {
    let p = part(&n);
    let area = Area::of(&n);
    let me = ctx.me().worker;
    let mailbox = p.mailbox(&n);
    // Some stages by RPC beside mailboxes: the handler takes those messages, and this
    // coroutine must still look at the end now and then.
    let mixed = mailbox && p.rpc_somewhere(&n);
    let finished =
        |s: &mut Server| s.done >= expected_done && s.locks.transactions() == 0 && s.order.transactions() == 0;
    loop {
        if with_server(&n, me, finished) {
            return Ok(());
        }
        let mut deadline = with_server(&n, me, |s| s.locks.next_expiry());
        if mixed {
            deadline = Some(deadline.unwrap_or(u64::MAX).min(ctx.now() + POLL_NS));
        }
        let got = if mailbox {
            match deadline {
                Some(d) => ctx.wait_imm_until(d).await,
                None => Some(ctx.wait_imm().await),
            }
        } else {
            // The handler serves requests; this coroutine only keeps the timeouts and the end.
            let poll = deadline.map_or(POLL_NS, |d| d.saturating_sub(ctx.now()).clamp(1, POLL_NS));
            ctx.sleep(poll).await;
            None
        };
        let mut out = Vec::new();
        match got {
            Some((_src, imm)) => {
                let (agent, slot) = comm::from_tag(imm::tag(imm));
                if !area.known(agent) {
                    return Err(txbed_txn::wire::WireError::Invalid("a notification from an unknown agent").into());
                }
                let m = comm::read_slot(&ctx, &n, area.server_slot(me, agent, slot))?;
                if m.agent != agent {
                    return Err(
                        txbed_txn::wire::WireError::Invalid("a mailbox slot holds another agent's message").into()
                    );
                }
                ctx.memory_misses(1 + (m.kind == REQUEST && m.level == ROW) as u64 * 2);
                let now = ctx.now();
                let r = ctx
                    .with_memory(|mem| with_server(&n, me, |s| serve(&n, s, mem, m, To::Agent(agent), now, &mut out)));
                r.map_err(txbed_txn::wire::WireError::Invalid)?;
            }
            None => {
                // Idle: deadlock handling (Bounded Wait's timeouts).
                let now = ctx.now();
                let mut timed = Vec::new();
                with_server(&n, me, |s| s.locks.expire(now, &mut timed));
                ctx.with_memory(|mem| {
                    for (to, req, status) in timed {
                        out.push(Action::Respond(to, answer(&n, mem, req, status)));
                    }
                });
            }
        }
        send(&ctx, &n, &area, out).await?;
    }
}

/// How often the RPC form's server coroutine looks at its timeouts and at the end.
const POLL_NS: u64 = 10_000;
