//! The communication layer (Sec. 3.3): mailboxes written with notified one-sided writes, the
//! 2PC vote word, and the two-sided (RPC) alternative.
//!
//! In the lock table's area of every node's registered region (`Area`, the same layout on
//! every node, so any process computes any address):
//!
//! ```text
//! server mailboxes  [worker s][agent a][SLOTS]  SLOT bytes each  (s: the node's server workers)
//! agent mailboxes   [local agent]           SLOT bytes each
//! vote words        [local agent]           8 bytes each
//! ```
//!
//! An agent is a coordinator coroutine, numbered across the cluster
//! `(node x workers + worker) x coroutines + coroutine`. A message to a server is a
//! WRITE_WITH_IMM into the agent's slot of that server's mailbox whose immediate names the
//! server's worker and, as tag, the agent and the slot (`verbs::imm::to_worker`): the server
//! learns the origin from the notification and never scans slots. Each agent has `SLOTS`
//! slots per server and uses them in turn: messages that need no answer (a short release, the
//! end of transaction, the agent's farewell) can still be unread when the next arrives, and one
//! slot would be overwritten. At most three can be unread (a short release, the end, the next
//! transaction's first request): every request and vote waits for the server, which answers
//! only after reading everything before it (per-QP FIFO). A response is a
//! WRITE_WITH_IMM into the agent's one slot, routed to its coroutine
//! (`verbs::imm::to_coroutine`).

use txbed_transport::{imm, Ctx, Endpoint, NodeId, Op, Payload, QpId};
use txbed_txn::node::NodeState;
use txbed_txn::TxnError;

use super::wire::{Msg, SLOT};

/// Bytes of the area for `nodes` x `workers` x `coroutines` (every worker may be a server).
pub fn area_bytes(nodes: u16, workers: u16, coroutines: u32) -> u64 {
    let (n, w, c) = (nodes as u64, workers as u64, coroutines as u64);
    w * (n * w * c) * SLOTS as u64 * SLOT + w * c * (SLOT + 8)
}

/// Where the mailboxes and vote words are, in this run.
#[derive(Copy, Clone, Debug)]
pub struct Area {
    /// Offset of the area from the region base.
    at: u64,
    workers: u16,
    coroutines: u32,
    /// Agents in the cluster (numbers, servers' workers included).
    total: u64,
}

impl Area {
    pub fn of(n: &NodeState) -> Area {
        let l = &n.catalog.layout;
        let (nodes, workers) = (n.nodes as u64, l.log_workers as u64);
        let per_coroutine = workers * nodes * workers * SLOTS as u64 * SLOT + workers * (SLOT + 8);
        let coroutines = l.area_bytes / per_coroutine.max(1);
        debug_assert_eq!(coroutines * per_coroutine, l.area_bytes, "the lock table's area is not area_bytes()");
        Area {
            at: l.area_at,
            workers: l.log_workers,
            coroutines: coroutines as u32,
            total: nodes * workers * coroutines,
        }
    }
    pub fn workers(&self) -> u16 {
        self.workers
    }
    pub fn coroutines(&self) -> u32 {
        self.coroutines
    }
    /// The number of the agent on (node, worker, coroutine).
    pub fn agent(&self, node: u16, worker: u16, coro: u32) -> u32 {
        ((node as u64 * self.workers as u64 + worker as u64) * self.coroutines as u64 + coro as u64) as u32
    }
    /// (node, worker, coroutine) of agent `a`.
    pub fn whose(&self, a: u32) -> (u16, u16, u32) {
        let per_node = self.workers as u32 * self.coroutines;
        let local = a % per_node;
        ((a / per_node) as u16, (local / self.coroutines) as u16, local % self.coroutines)
    }
    pub fn known(&self, a: u32) -> bool {
        (a as u64) < self.total
    }
    pub fn server_slot(&self, server: u16, agent: u32, k: u32) -> u64 {
        self.at + ((server as u64 * self.total + agent as u64) * SLOTS as u64 + k as u64) * SLOT
    }
    fn local(&self, worker: u16, coro: u32) -> u64 {
        worker as u64 * self.coroutines as u64 + coro as u64
    }
    pub fn agent_slot(&self, worker: u16, coro: u32) -> u64 {
        self.at + self.workers as u64 * self.total * SLOTS as u64 * SLOT + self.local(worker, coro) * SLOT
    }
    pub fn vote_word(&self, worker: u16, coro: u32) -> u64 {
        self.at
            + self.workers as u64 * self.total * SLOTS as u64 * SLOT
            + self.workers as u64 * self.coroutines as u64 * SLOT
            + self.local(worker, coro) * 8
    }
}

/// The QP to `node` (loopback for this node: the NIC carries notified writes to other
/// workers of its own process too).
pub fn qp_to(ctx: &Ctx, node: u16) -> Result<QpId, TxnError> {
    ctx.rc_qp(NodeId(node), 0).ok_or(TxnError::NoQp { node })
}

/// Posts `op` on `q`, unsignaled unless the send queue is half full: then signaled and waited
/// for, which confirms the unsignaled ones before it (passive ACK).
pub async fn post(ctx: &Ctx, q: QpId, op: Op) -> Result<(), TxnError> {
    txbed_txn::ops::room(ctx, q, 1).await?;
    let depth = ctx.qp_info(q).map_or(2, |i| i.max_outstanding);
    let signal = ctx.outstanding(q) + 2 >= depth / 2;
    ctx.post(q, [(op, signal)])?;
    if signal {
        ctx.wait().await?;
    }
    Ok(())
}

/// A notified write of `m` into slot `addr` of `node`'s area, notifying with `imm`.
pub async fn notify(ctx: &Ctx, n: &NodeState, node: u16, addr: u64, m: &Msg, imm: u32) -> Result<(), TxnError> {
    let op = Op::WriteImm {
        src: Payload::Inline(m.encode().to_vec()),
        remote: n.catalog.remote(node, addr, SLOT as u32),
        imm,
    };
    post(ctx, qp_to(ctx, node)?, op).await
}

/// Reads the message in slot `addr` of this node's area.
pub fn read_slot(ctx: &Ctx, n: &NodeState, addr: u64) -> Result<Msg, TxnError> {
    let mut b = [0u8; SLOT as usize];
    ctx.read_local(n.base() + addr, &mut b)?;
    Ok(Msg::decode(&b)?)
}

/// Slots each agent has in each server's mailbox (a power of two).
pub const SLOTS: u32 = 4;

/// The immediate of a message from agent `a` in slot `k` to server worker `s`.
pub fn to_server(s: u16, a: u32, k: u32) -> u32 {
    imm::to_worker(s, a * SLOTS + k)
}

/// The agent and slot an immediate to a server names.
pub fn from_tag(tag: u32) -> (u32, u32) {
    (tag / SLOTS, tag % SLOTS)
}

/// The endpoint of server `s` of `node`.
pub fn server(node: u16, s: u16) -> Endpoint {
    Endpoint { node: NodeId(node), worker: s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_numbers_round_trip() {
        let a = Area { at: 64, workers: 3, coroutines: 5, total: 4 * 3 * 5 };
        for node in 0..4 {
            for w in 0..3 {
                for c in 0..5 {
                    assert_eq!(a.whose(a.agent(node, w, c)), (node, w, c));
                }
            }
        }
        assert!(a.known(59) && !a.known(60));
        // The regions do not overlap and end where area_bytes says.
        let last_vote = a.vote_word(2, 4) + 8 - 64;
        assert_eq!(last_vote, area_bytes(4, 3, 5));
        assert!(a.server_slot(2, 59, SLOTS - 1) + SLOT <= a.agent_slot(0, 0));
        assert_eq!(from_tag(imm::tag(to_server(1, 59, 3))), (59, 3));
    }
}
