//! Transaction chopping (DrTM Sec. 4) as the coordinator runs it: the pieces a workload
//! cuts a transaction into (`Workload::chop`) run in turn, each a transaction of its own,
//! checked by the history checker one by one; the whole transactions' serializability
//! rests on the workload's chopping having no SC-cycle (`txbed_workloads::chopping`).

use crate::node::{Bug, NodeState};

/// The coordinator (worker, coroutine) of transaction `id`: the inverse of
/// `attempt::txn_id`'s worker and coroutine fields (tested there).
pub fn txn_coordinator(id: u64) -> (u16, u32) {
    (((id >> 40) & 0xff) as u16, ((id >> 28) & 0xfff) as u32)
}

/// At the commit point of attempt `id`: if it is a piece's, the log says so.
pub fn mark_committed(n: &NodeState, id: u64) {
    let at = txn_coordinator(id);
    if let Some(c) = n.chopped.borrow_mut().get_mut(&at) {
        if c.running == id {
            c.committed = true;
        }
    }
}

/// A restart that ignores the chopping information: a coordinator that crashed between two
/// pieces never runs the rest, and its transaction stays half done.
pub const FORGET_CHOPPING: Bug = Bug {
    name: "ForgetChopping",
    about: "a restarted coordinator ignores its chopping log: a transaction chopped when its machine crashed stays half done",
};

/// A piece after the first that wrote is given up on a conflict instead of retried: its
/// transaction stays half done (a payment's W_YTD without its D_YTD), which the workload's
/// consistency conditions see.
pub const GIVES_UP_PIECE: Bug = Bug {
    name: "GivesUpPiece",
    about: "a chopped transaction's later piece is dropped after a conflict: the transaction is left half done",
};
