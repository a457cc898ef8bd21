//! The transaction processing agent (Sec. 3.1): one transaction at a time, each lock asked
//! for by one message and waited for (at most one pending request), data read and written
//! one-sided at the address the grant carries, 2PC when a remote item was modified, and one
//! end-of-transaction message per server contacted.

use std::collections::BTreeMap;

use txbed_transport::{Ctx, LocalBuf, Op};
use txbed_txn::attempt::{execute, new_history, settle, Attempt};
use txbed_txn::msg::CommitReq;
use txbed_txn::node::NodeState;
use txbed_txn::ops::{self, Rec};
use txbed_txn::stage::Stage;
use txbed_txn::store::{version_word, VERSION};
use txbed_txn::TxnError;
use txbed_workloads::{Key, TxnSpec};

use super::comm::{self, Area};
use super::modes::Mode;
use super::wire::*;
use super::{part, AgentMemory, Concurrency, Isolation, H_LT, LT_EARLY_READ_RELEASE};

/// Where a record's lock lives: its home node, the server worker owning its range, and the
/// granule between its table and the row.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    pub node: u16,
    pub server: u16,
    pub group: u64,
}

/// The place of `key`: with a workload granule (TPC-C's warehouse) whole granules go to
/// servers in turn, so a warehouse's rows share a server in every table; otherwise each
/// server owns an equal range of consecutive rows of each table, and that range is the granule.
pub fn place(n: &NodeState, key: Key, servers: u16) -> Place {
    let node = n.workload.home(key, n.nodes);
    let servers = servers.max(1) as u64;
    if let Some(g) = n.workload.lock_group(key) {
        return Place { node, server: (g % servers) as u16, group: g };
    }
    let per = n.catalog.layout.table(key.table).map_or(1, |t| t.spec.rows_per_node.max(1));
    let local = key.row % per;
    let s = (local as u128 * servers as u128 / per as u128) as u64;
    Place { node, server: s as u16, group: (key.row / per) * servers + s }
}

/// One transaction attempt's agent-side state.
struct Agent {
    me: u32,
    txn: u64,
    area: Area,
    /// Locks held, by server: the mode held.
    held: BTreeMap<(u16, u16, LockName), Mode>,
    /// Servers contacted, in order.
    involved: Vec<(u16, u16)>,
}

/// The abort cause of a refused request.
fn cause_of(status: u8) -> &'static str {
    match status {
        DENIED => "lock denied",
        DIED => "wait-die",
        TIMEOUT => "lock timeout",
        TOO_LATE => "TO conflict",
        _ => "lock refused",
    }
}

fn spec_hash(spec: &TxnSpec) -> u64 {
    spec.reads.iter().chain(&spec.writes).fold(spec.writes.len() as u64, |h, k| {
        (h.rotate_left(7) ^ ((k.table as u64) << 48 ^ k.row)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    })
}

pub async fn attempt(ctx: &Ctx, n: &NodeState, spec: &TxnSpec, id: u64) -> Attempt {
    let p = part(n);
    let area = Area::of(n);
    let w = ctx.me();
    let me = area.agent(n.me, w.worker, ctx.coroutine());
    // The global id: the local number in the upper 40 bits, the agent in the lower 24.
    // TO takes the number from the synchronized clock; 2PL counts, and WAIT_DIE keeps the
    // number when the same transaction restarts (it ages, so it cannot starve).
    let hash = spec_hash(spec);
    let number = {
        let mut agents = p.agents.borrow_mut();
        let m = agents.entry(me).or_insert_with(AgentMemory::default);
        let keep = p.options.concurrency == Concurrency::WaitDie && m.last_conflicted && m.last_spec == hash;
        if !keep {
            m.number = if p.options.concurrency == Concurrency::TimestampOrdering {
                (m.number + 1).max(ctx.clock().now_ns.max(0) as u64)
            } else {
                m.number + 1
            };
        }
        m.last_spec = hash;
        m.number
    };
    let txn = ((number & ((1 << 40) - 1)) << 24) | (me as u64 & 0xff_ffff);
    let mut a = Agent { me, txn, area, held: BTreeMap::new(), involved: Vec::new() };
    let mut recs = ops::records(n, spec);
    let r = run(ctx, n, spec, id, &mut a, &mut recs).await;
    let r = match r {
        Ok(Attempt::Committed) => Ok(Attempt::Committed),
        Ok(aborted) => end(ctx, n, &mut a, ABORT).await.map(|_| aborted),
        Err(e) => Err(e),
    };
    if let Some(m) = p.agents.borrow_mut().get_mut(&me) {
        m.last_conflicted = matches!(r, Ok(Attempt::Conflict(_)));
    }
    settle(ctx, n, r, &recs, id, id).await
}

async fn run(
    ctx: &Ctx,
    n: &NodeState,
    spec: &TxnSpec,
    id: u64,
    a: &mut Agent,
    recs: &mut [Rec],
) -> Result<Attempt, TxnError> {
    let p = part(n);
    let o = &p.options;
    let start_ns = ctx.now();
    let epoch0 = ctx.view_epoch();
    let to = o.concurrency == Concurrency::TimestampOrdering;
    let places: Vec<Place> =
        recs.iter().map(|r| place(n, Key { table: r.table, row: r.key }, o.servers_per_node)).collect();
    // Lock escalation: a granule with many rows read is locked whole (S, or SIX when rows
    // under it are also written) and its rows read under it without row locks.
    let mut escalated: BTreeMap<(Place, u16), Mode> = BTreeMap::new();
    if o.escalate_after > 0 && !to {
        let mut count: BTreeMap<(Place, u16), (u32, u32)> = BTreeMap::new();
        for (r, pl) in recs.iter().zip(&places) {
            let c = count.entry((*pl, r.table)).or_default();
            if r.write {
                c.1 += 1;
            } else {
                c.0 += 1;
            }
        }
        for (k, (reads, writes)) in count {
            if reads >= o.escalate_after {
                escalated.insert(k, if writes > 0 { Mode::SIX } else { Mode::S });
            }
        }
    }
    let short_reads = o.isolation == Isolation::ReadCommitted || n.bug == Some(LT_EARLY_READ_RELEASE);
    for (r, pl) in recs.iter_mut().zip(&places) {
        let t0 = ctx.now();
        let mut asks = 0u64;
        r.asked = true;
        let granted = if to {
            let mode = if r.write { TO_WRITE } else { TO_READ };
            asks += 1;
            request(ctx, n, a, *pl, LockName { level: ROW, table: r.table, item: r.key }, mode).await?
        } else {
            let row_mode = if r.write { Mode::X } else { Mode::S };
            let esc = escalated.get(&(*pl, r.table)).copied();
            let mut refused = None;
            if o.intention_locks || esc.is_some() {
                let group_mode = esc.unwrap_or_else(|| row_mode.intention());
                let top = group_mode.intention();
                for (lock, mode) in [
                    (LockName { level: DATABASE, table: 0, item: 0 }, top),
                    (LockName { level: TABLE, table: r.table, item: 0 }, top),
                    (LockName { level: GROUP, table: r.table, item: pl.group }, group_mode),
                ] {
                    if a.held.get(&(pl.node, pl.server, lock)).is_some_and(|h| h.covers(mode)) {
                        continue;
                    }
                    asks += 1;
                    if let Err(status) = request(ctx, n, a, *pl, lock, mode as u8).await? {
                        refused = Some(status);
                        break;
                    }
                }
            }
            match refused {
                Some(status) => Err(status),
                None => {
                    // Under a granule held in S/SIX/X a read needs no row lock: NL asks
                    // only for the address.
                    let row_req = if esc.is_some_and(|m| m.covers(row_mode)) { Mode::NL } else { row_mode };
                    asks += 1;
                    request(ctx, n, a, *pl, LockName { level: ROW, table: r.table, item: r.key }, row_req as u8).await?
                }
            }
        };
        ops::account(ctx, n, Stage::Lock, t0, asks, asks * SLOT, 0);
        let addr = match granted {
            Ok(addr) => addr,
            Err(status) => return Ok(Attempt::Conflict(cause_of(status))),
        };
        if addr == u64::MAX {
            return Err(TxnError::NotFound { node: r.home, table: r.table, key: r.key });
        }
        r.offset = addr;
        r.locked = true;
        read_tuple(ctx, n, r).await?;
        // Read committed: the read lock is short, released once the data is read (the planted
        // bug does the same under serializable).
        if short_reads && !r.write && !to {
            let row = LockName { level: ROW, table: r.table, item: r.key };
            if a.held.remove(&(pl.node, pl.server, row)).is_some() {
                let t0 = ctx.now();
                let m = Msg {
                    kind: RELEASE,
                    level: ROW,
                    table: r.table,
                    agent: a.me,
                    txn: a.txn,
                    item: r.key,
                    ..Msg::default()
                };
                send(ctx, n, a, pl.node, pl.server, m, Stage::Lock).await?;
                ops::account(ctx, n, Stage::Lock, t0, 1, SLOT, 0);
            }
        }
    }
    let Some((new_values, delta)) = execute(ctx, n, spec, recs) else {
        return Ok(Attempt::UserAbort);
    };
    // 2PC only when a remote item was modified.
    if recs.iter().any(|r| r.write && r.home != n.me) && !vote(ctx, n, a).await? {
        return Ok(Attempt::Conflict("2pc: a server voted abort"));
    }
    let mut h = new_history(ctx, n, spec, id, start_ns);
    ops::history_of(recs, &mut h);
    if !ops::commit_point(ctx, n, epoch0, recs, &new_values, h, delta) {
        return Ok(Attempt::Conflict(txbed_txn::attempt::cause::VIEW_CHANGED));
    }
    // Replication (a txbed addition: the paper keeps one copy): the new values go to the
    // backups' logs before the data is written, as in the other protocols.
    ops::log(ctx, n, recs, &new_values, id).await?;
    write_back(ctx, n, recs, &new_values, id).await?;
    end(ctx, n, a, COMMIT).await?;
    ops::complete(ctx, n, id);
    Ok(Attempt::Committed)
}

/// Asks server `pl` for `lock` in `mode` and waits for the answer: the item's address (0 for
/// a granule) or the refusal's status.
async fn request(
    ctx: &Ctx,
    n: &NodeState,
    a: &mut Agent,
    pl: Place,
    lock: LockName,
    mode: u8,
) -> Result<Result<u64, u8>, TxnError> {
    let m = Msg {
        kind: REQUEST,
        mode,
        level: lock.level,
        table: lock.table,
        agent: a.me,
        txn: a.txn,
        item: lock.item,
        ..Msg::default()
    };
    if !a.involved.contains(&(pl.node, pl.server)) {
        a.involved.push((pl.node, pl.server));
    }
    let reply = if n.hybrid.onesided(Stage::Lock) {
        send(ctx, n, a, pl.node, pl.server, m, Stage::Lock).await?;
        // One request pending at a time: the next notification is its response.
        ctx.wait_own_imm().await;
        let r = comm::read_slot(ctx, n, a.area.agent_slot(ctx.me().worker, ctx.coroutine()))?;
        if r.kind != RESPONSE || r.txn != a.txn || r.lock() != lock {
            return Err(txbed_txn::wire::WireError::Invalid("a response to a request this agent did not make").into());
        }
        r
    } else {
        let patience = super::patience_ns(&part(n).options);
        let call = ctx.call_patient(comm::server(pl.node, pl.server), H_LT, &m.encode(), patience);
        ctx.wait().await?;
        let b = ops::reply(ctx, call, "LOCK-TABLE REQUEST")?;
        // Acknowledgements of earlier one-way messages (END, RELEASE) are not needed.
        ctx.clear_replies();
        Msg::decode(&b)?
    };
    if reply.status != GRANTED {
        return Ok(Err(reply.status));
    }
    if lock.level != ROW || mode != Mode::NL as u8 {
        let e = a.held.entry((pl.node, pl.server, lock)).or_insert(Mode::NL);
        if part(n).options.concurrency != Concurrency::TimestampOrdering {
            *e = e.join(Mode::from_u8(mode).unwrap_or(Mode::NL));
        }
    }
    Ok(Ok(reply.addr))
}

/// Sends `m` to server `s` of `node` without waiting: by mailbox when `stage` runs
/// one-sided, else as a one-way RPC.
async fn send(ctx: &Ctx, n: &NodeState, a: &Agent, node: u16, s: u16, m: Msg, stage: Stage) -> Result<(), TxnError> {
    if n.hybrid.onesided(stage) {
        let k = {
            let mut agents = part(n).agents.borrow_mut();
            let mem = agents.entry(a.me).or_insert_with(AgentMemory::default);
            let next = mem.slot.entry((node, s)).or_insert(0);
            let k = *next;
            *next = (k + 1) % comm::SLOTS;
            k
        };
        comm::notify(ctx, n, node, a.area.server_slot(s, a.me, k), &m, comm::to_server(s, a.me, k)).await
    } else {
        // A call, not a one-way message: lost datagrams are sent again (and run once), and
        // its acknowledgement settles with the agent's next wait.
        ctx.call(comm::server(node, s), H_LT, &m.encode());
        Ok(())
    }
}

/// 2PC's vote among the servers contacted: by remote fetch-and-add into this agent's vote
/// word (zeroed first), or by RPC. Returns whether every server voted yes.
async fn vote(ctx: &Ctx, n: &NodeState, a: &mut Agent) -> Result<bool, TxnError> {
    let t0 = ctx.now();
    let k = a.involved.len() as u64;
    let (worker, coro) = (ctx.me().worker, ctx.coroutine());
    let yes = if n.hybrid.onesided(Stage::Vote) {
        let word = n.base() + a.area.vote_word(worker, coro);
        ctx.write_local(word, &0u64.to_le_bytes())?;
        for &(node, s) in &a.involved {
            let m = Msg { kind: VOTE, agent: a.me, txn: a.txn, ..Msg::default() };
            send(ctx, n, a, node, s, m, Stage::Vote).await?;
        }
        let poll = part(n).options.vote_poll_ns;
        loop {
            let mut b = [0u8; 8];
            ctx.read_local(word, &mut b)?;
            let v = u64::from_le_bytes(b);
            let (yes, no) = (v & 0xffff_ffff, v >> 32);
            if yes + no >= k {
                break no == 0;
            }
            ctx.sleep(poll).await;
        }
    } else {
        let mut calls = Vec::new();
        for &(node, s) in &a.involved {
            let m = Msg { kind: VOTE, agent: a.me, txn: a.txn, ..Msg::default() };
            calls.push(ctx.call(comm::server(node, s), H_LT, &m.encode()));
        }
        ctx.wait().await?;
        let mut all = true;
        for c in calls {
            let r = Msg::decode(&ops::reply(ctx, c, "LOCK-TABLE VOTE")?)?;
            all &= r.status == COMMIT;
        }
        ctx.clear_replies();
        all
    };
    ops::account(ctx, n, Stage::Vote, t0, 1, k * SLOT, 0);
    Ok(yes)
}

/// End of transaction: one message to every server contacted releases everything there.
async fn end(ctx: &Ctx, n: &NodeState, a: &mut Agent, outcome: u8) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let involved = std::mem::take(&mut a.involved);
    for &(node, s) in &involved {
        let m = Msg { kind: END, status: outcome, agent: a.me, txn: a.txn, ..Msg::default() };
        send(ctx, n, a, node, s, m, Stage::Lock).await?;
    }
    a.held.clear();
    ops::account(ctx, n, Stage::End, t0, 0, involved.len() as u64 * SLOT, 0);
    Ok(())
}

/// The data layer: one READ of the tuple at the address the grant carried.
async fn read_tuple(ctx: &Ctx, n: &NodeState, r: &mut Rec) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let len = ops::tuple_bytes(n, r.table);
    let s = ctx.scratch();
    let op = Op::Read {
        local: LocalBuf { lkey: s.lkey, addr: s.addr, len },
        remote: n.catalog.remote(r.home, r.offset, len),
    };
    let path = ops::issue(ctx, n, r, vec![(op, true)]).await?;
    ctx.wait().await?;
    let mut t = vec![0u8; len as usize];
    ctx.read_local(s.addr, &mut t)?;
    r.tuple = t;
    let mut tally = ops::Tally::default();
    tally.add(path, len as u64);
    ops::account_tally(ctx, n, Stage::Read, t0, &tally);
    Ok(())
}

/// The data layer: one WRITE per modified item (version, writer, record), then one wait.
async fn write_back(ctx: &Ctx, n: &NodeState, recs: &[Rec], new_values: &[Vec<u8>], id: u64) -> Result<(), TxnError> {
    let t0 = ctx.now();
    let mut staging = ops::staging_at(ctx);
    let mut tally = ops::Tally::default();
    for (r, v) in recs.iter().filter(|r| r.write).zip(new_values) {
        let (inc, ver) = r.version();
        let body = CommitReq { offset: r.offset, version: version_word(inc, ver + 1), writer: id, record: v }.body();
        let len = body.len() as u32;
        let src = if n.local(r.home) {
            txbed_transport::Payload::Inline(body)
        } else {
            ops::inline_or_staged(ctx, &body, &mut staging)?
        };
        let write = Op::Write { src, remote: n.catalog.remote(r.home, r.offset + VERSION, len) };
        tally.add(ops::issue(ctx, n, r, vec![(write, true)]).await?, len as u64);
    }
    ctx.wait().await?;
    ops::account_tally(ctx, n, Stage::Commit, t0, &tally);
    Ok(())
}

/// After the agent's last transaction: every server is told, so it knows when to stop.
pub async fn done(ctx: &Ctx, n: &NodeState) {
    let p = part(n);
    let area = Area::of(n);
    let me = area.agent(n.me, ctx.me().worker, ctx.coroutine());
    let a = Agent { me, txn: 0, area, held: BTreeMap::new(), involved: Vec::new() };
    for node in 0..n.nodes {
        for s in 0..p.options.servers_per_node {
            let m = Msg { kind: DONE, agent: me, ..Msg::default() };
            // A server that is never told keeps waiting, and the run reports it as still
            // running after the end: the failure is not lost.
            let _ = send(ctx, n, &a, node, s, m, Stage::Lock).await;
        }
    }
    // By RPC: until every server has acknowledged.
    let _ = ctx.wait().await;
    ctx.clear_replies();
}
