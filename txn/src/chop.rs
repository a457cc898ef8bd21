//! Transaction chopping (DrTM Sec. 4) as the coordinator runs it: the pieces a workload
//! cuts a transaction into (`Workload::chop`) run in turn, each a transaction of its own,
//! checked by the history checker one by one; the whole transactions' serializability
//! rests on the workload's chopping having no SC-cycle (`txbed_workloads::chopping`), and
//! [`half_done`] checks its consequence on the run's history: no transaction saw a parent
//! half done. Deferred pieces (Sec. 4.2) go to the machine's queue (`NodeState::deferred`)
//! and are published per epoch by the coordinators (`runner::node`).

use std::collections::{BTreeMap, BTreeSet};

use txbed_checker::{Status, Txn};

use crate::node::{Bug, NodeState};

/// The coordinator (worker, coroutine) of transaction `id`: the inverse of
/// `attempt::txn_id`'s worker and coroutine fields (tested there).
pub fn txn_coordinator(id: u64) -> (u16, u32) {
    (((id >> 40) & 0xff) as u16, ((id >> 28) & 0xfff) as u32)
}

/// At the commit point of attempt `id`, in the step that writes its write-ahead record: if
/// it is a piece's, the log says so, and the deferred pieces after it join the machine's
/// queue; if it publishes the queue's head, the head leaves the queue. Either way a piece
/// takes effect exactly once across crashes.
pub fn mark_committed(n: &NodeState, id: u64) {
    let at = txn_coordinator(id);
    if let Some(c) = n.chopped.borrow_mut().get_mut(&at) {
        if c.running == id {
            c.committed = true;
            n.pieces.borrow_mut().push((id, c.parent));
            let next = c.next + 1;
            if c.pieces.get(next).is_some_and(|p| n.workload.deferred(p)) {
                let deferred = c.pieces.split_off(next);
                n.deferred.borrow_mut().queue.extend(deferred.into_iter().map(|p| (c.parent, p)));
            }
        }
    }
    let mut d = n.deferred.borrow_mut();
    if d.running == id && id != 0 {
        if let Some((parent, _)) = d.queue.pop_front() {
            n.pieces.borrow_mut().push((id, parent));
        }
        d.running = 0;
    }
}

/// DrTM Sec. 4.4's guarantee, checked on a run's history: no committed transaction saw a
/// chopped transaction half done, that is read a version one piece of it wrote and a
/// version of another record older than the one another of its pieces wrote (a cycle
/// through two pieces of one parent and the reader). `pieces` maps each committed piece to
/// its parent. Returns how many transactions read a piece's write, how many saw their
/// parent half done, and the first.
pub fn half_done(txns: &[Txn], pieces: &[(u64, u64)]) -> (u64, u64, Option<String>) {
    let parent: BTreeMap<u64, u64> = pieces.iter().copied().collect();
    let committed = || txns.iter().filter(|t| t.status == Status::Committed);
    // Who installed each (key, version); and per parent, the versions its pieces installed.
    let mut writer = BTreeMap::new();
    let mut installed: BTreeMap<u64, BTreeMap<u64, Vec<(u64, u64)>>> = BTreeMap::new();
    for t in committed() {
        for w in &t.writes {
            writer.insert((w.key, w.version), t.id);
            if let Some(&p) = parent.get(&t.id) {
                installed.entry(p).or_default().entry(w.key).or_default().push((w.version, t.id));
            }
        }
    }
    let (mut checked, mut violations, mut first) = (0, 0, None);
    for t in committed() {
        let own = parent.get(&t.id);
        let seen: BTreeSet<(u64, u64)> = t
            .reads
            .iter()
            .filter_map(|r| writer.get(&(r.key, r.version)))
            .filter_map(|w| parent.get(w).map(|&p| (p, *w)))
            .filter(|(p, _)| Some(p) != own)
            .collect();
        if seen.is_empty() {
            continue;
        }
        checked += 1;
        let missed = seen.iter().find_map(|&(p, saw)| {
            t.reads.iter().find_map(|r| {
                let later = installed.get(&p)?.get(&r.key)?;
                let &(v, by) = later.iter().find(|&&(v, by)| v > r.version && by != saw)?;
                Some(format!(
                    "transaction {:#x} ({}) saw piece {saw:#x} of chopped transaction {p:#x} but read key {:#x} at version {} before its piece {by:#x} wrote version {v}",
                    t.id, t.label, r.key, r.version
                ))
            })
        });
        if let Some(m) = missed {
            violations += 1;
            first.get_or_insert(m);
        }
    }
    (checked, violations, first)
}

/// A restarted machine that loses its queue of deferred pieces (as if it were volatile):
/// deliveries stay without their customers' balances, which TPC-C's condition 3.3.2.10 sees.
pub const FORGET_PUBLICATION: Bug = Bug {
    name: "ForgetPublication",
    about: "a restarted machine drops its queue of deferred pieces: published results are lost",
};

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
