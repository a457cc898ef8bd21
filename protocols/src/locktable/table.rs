//! The lock table of one lock-server agent (Sec. 3.2.1, Fig. 2): per lock a FIFO waiting
//! group and one granted counter per mode; the transaction table, a multimap from transaction
//! to the locks it holds and their modes, so one end-of-transaction message releases them all
//! (strict 2PL); and the list of locks with pending requests, which Bounded Wait scans.
//!
//! A lock is a pure state machine: requests and releases go in, and what to answer comes out
//! as `(reply handle, request, status)`; the server agent (`server.rs`) sends the answers by
//! whichever channel the run uses.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::modes::{Mode, MODES};
use super::wire::{LockName, Msg, DENIED, DIED, GRANTED, TIMEOUT};

/// How a request that conflicts is handled (Sec. 3.2.1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Refuse it at once: the transaction aborts and restarts.
    NoWait,
    /// Queue it only if its transaction is older (a smaller id) than every holder and every
    /// waiter; otherwise it dies.
    WaitDie,
    /// Queue it with the server's time; a head of a queue that waited past `bound_ns` is
    /// refused (a negative acknowledgement).
    BoundedWait { bound_ns: u64 },
}

struct Waiter<T> {
    txn: u64,
    mode: Mode,
    since: u64,
    to: T,
    req: Msg,
}

struct Lock<T> {
    /// The granted group: one counter per mode.
    granted: [u32; 6],
    /// Who holds it, in which mode (a transaction holds one mode per lock: conversions join).
    holders: Vec<(u64, Mode)>,
    /// The waiting group, FIFO; conversions go ahead of new requests.
    waiting: VecDeque<Waiter<T>>,
}

impl<T> Default for Lock<T> {
    fn default() -> Self {
        Lock { granted: [0; 6], holders: Vec::new(), waiting: VecDeque::new() }
    }
}

impl<T> Lock<T> {
    fn held_by(&self, txn: u64) -> Mode {
        self.holders.iter().find(|(t, _)| *t == txn).map_or(Mode::NL, |(_, m)| *m)
    }
    /// Whether `want` is compatible with every mode granted to others than `txn` (which holds
    /// `own`), judged from the counters as the paper does.
    fn compatible(&self, want: Mode, own: Mode, s_with_ix: bool) -> bool {
        MODES.iter().all(|&m| {
            let others = self.granted[m as usize] - (m == own && own != Mode::NL) as u32;
            others == 0 || m.compatible(want, s_with_ix)
        })
    }
    fn set(&mut self, txn: u64, own: Mode, want: Mode) {
        if own != Mode::NL {
            self.granted[own as usize] -= 1;
            self.holders.retain(|(t, _)| *t != txn);
        }
        if want != Mode::NL {
            self.granted[want as usize] += 1;
            self.holders.push((txn, want));
        }
    }
    fn unused(&self) -> bool {
        self.holders.is_empty() && self.waiting.is_empty()
    }
}

/// What became of a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted,
    /// In the waiting group: the answer comes later, from a release or an expiry.
    Queued,
    /// Refused with this status (`DENIED`, `DIED`).
    Refused(u8),
}

/// One server's lock table. `T` is how a queued request is answered later.
pub struct LockTable<T> {
    locks: BTreeMap<LockName, Lock<T>>,
    /// The transaction table: each transaction's locks and modes.
    txns: BTreeMap<u64, Vec<(LockName, Mode)>>,
    /// Locks with pending requests.
    pending: BTreeSet<LockName>,
    policy: Policy,
    /// Planted bug `GrantsSWithIx`.
    s_with_ix: bool,
}

impl<T: Clone> LockTable<T> {
    pub fn new(policy: Policy, s_with_ix: bool) -> Self {
        LockTable { locks: BTreeMap::new(), txns: BTreeMap::new(), pending: BTreeSet::new(), policy, s_with_ix }
    }

    /// Locks with a holder or a waiter.
    pub fn locks(&self) -> usize {
        self.locks.len()
    }
    /// Transactions holding locks here.
    pub fn transactions(&self) -> usize {
        self.txns.len()
    }
    /// Whether transaction `txn` holds anything here.
    pub fn knows(&self, txn: u64) -> bool {
        self.txns.contains_key(&txn)
    }

    /// Transaction `txn` asks for `lock` in `mode` at time `now`; a queued request is answered
    /// later through `to`.
    pub fn request(&mut self, txn: u64, lock: LockName, mode: Mode, now: u64, to: T, req: Msg) -> Outcome {
        let l = self.locks.entry(lock).or_default();
        let own = l.held_by(txn);
        let want = own.join(mode);
        if want == own {
            return Outcome::Granted;
        }
        // A conversion (it holds the lock already) may pass the queue; a new request may not.
        let first = l.waiting.is_empty() || own != Mode::NL;
        if first && l.compatible(want, own, self.s_with_ix) {
            l.set(txn, own, want);
            note(&mut self.txns, txn, lock, want);
            return Outcome::Granted;
        }
        let queue = match self.policy {
            Policy::NoWait => Err(DENIED),
            Policy::WaitDie => {
                let older =
                    l.holders.iter().all(|(t, _)| *t == txn || txn < *t) && l.waiting.iter().all(|w| txn < w.txn);
                if older {
                    Ok(())
                } else {
                    Err(DIED)
                }
            }
            Policy::BoundedWait { .. } => Ok(()),
        };
        match queue {
            Ok(()) => {
                let w = Waiter { txn, mode, since: now, to, req };
                if own != Mode::NL {
                    l.waiting.push_front(w);
                } else {
                    l.waiting.push_back(w);
                }
                self.pending.insert(lock);
                Outcome::Queued
            }
            Err(status) => {
                if l.unused() {
                    self.locks.remove(&lock);
                }
                Outcome::Refused(status)
            }
        }
    }

    /// Releases `txn`'s lock on `lock` before its end (a short read lock); waiters it
    /// unblocks are granted into `out`.
    pub fn release(&mut self, txn: u64, lock: LockName, out: &mut Vec<(T, Msg, u8)>) {
        if let Some(v) = self.txns.get_mut(&txn) {
            v.retain(|(l, _)| *l != lock);
            if v.is_empty() {
                self.txns.remove(&txn);
            }
        }
        self.drop_hold(txn, lock, out);
    }

    /// End of transaction: releases everything `txn` holds (strict 2PL: no shrinking phase
    /// before this); waiters it unblocks are granted into `out`.
    pub fn end(&mut self, txn: u64, out: &mut Vec<(T, Msg, u8)>) {
        for (lock, _) in self.txns.remove(&txn).unwrap_or_default() {
            self.drop_hold(txn, lock, out);
        }
    }

    fn drop_hold(&mut self, txn: u64, lock: LockName, out: &mut Vec<(T, Msg, u8)>) {
        let Some(l) = self.locks.get_mut(&lock) else { return };
        let own = l.held_by(txn);
        l.set(txn, own, Mode::NL);
        self.grant_waiters(lock, out);
    }

    /// Grants the head of `lock`'s waiting group while it is compatible (FIFO).
    fn grant_waiters(&mut self, lock: LockName, out: &mut Vec<(T, Msg, u8)>) {
        let Some(l) = self.locks.get_mut(&lock) else { return };
        while let Some(w) = l.waiting.front() {
            let own = l.held_by(w.txn);
            let want = own.join(w.mode);
            if !l.compatible(want, own, self.s_with_ix) {
                break;
            }
            let w = l.waiting.pop_front().expect("a head");
            l.set(w.txn, own, want);
            note(&mut self.txns, w.txn, lock, want);
            out.push((w.to, w.req, GRANTED));
        }
        if l.waiting.is_empty() {
            self.pending.remove(&lock);
        }
        if l.unused() {
            self.locks.remove(&lock);
        }
    }

    /// Bounded Wait (run when the server is idle): the head of every queue that has waited
    /// longer than the bound is refused (`TIMEOUT`), and what that unblocks is granted.
    pub fn expire(&mut self, now: u64, out: &mut Vec<(T, Msg, u8)>) {
        let Policy::BoundedWait { bound_ns } = self.policy else { return };
        let due: Vec<LockName> = self
            .pending
            .iter()
            .filter(|l| self.locks[l].waiting.front().is_some_and(|w| now.saturating_sub(w.since) >= bound_ns))
            .copied()
            .collect();
        for lock in due {
            let l = self.locks.get_mut(&lock).expect("a pending lock exists");
            while let Some(w) = l.waiting.front() {
                if now.saturating_sub(w.since) < bound_ns {
                    break;
                }
                let w = l.waiting.pop_front().expect("a head");
                out.push((w.to, w.req, TIMEOUT));
            }
            self.grant_waiters(lock, out);
        }
    }

    /// The earliest time a queue head times out (Bounded Wait), if any waits.
    pub fn next_expiry(&self) -> Option<u64> {
        let Policy::BoundedWait { bound_ns } = self.policy else { return None };
        self.pending.iter().filter_map(|l| self.locks[l].waiting.front()).map(|w| w.since + bound_ns).min()
    }

    /// Every transaction's held modes are in the counters, and every counter has its holders
    /// (a consistency check for tests).
    pub fn consistent(&self) -> bool {
        let mut held = 0u64;
        for (name, l) in &self.locks {
            let sum: u32 = l.granted.iter().sum();
            if sum as usize != l.holders.len() || (l.waiting.is_empty() == self.pending.contains(name)) {
                return false;
            }
            held += sum as u64;
        }
        held == self.txns.values().map(|v| v.len() as u64).sum::<u64>()
    }
}

fn note(txns: &mut BTreeMap<u64, Vec<(LockName, Mode)>>, txn: u64, lock: LockName, mode: Mode) {
    let v = txns.entry(txn).or_default();
    match v.iter_mut().find(|(l, _)| *l == lock) {
        Some(e) => e.1 = mode,
        None => v.push((lock, mode)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locktable::wire::ROW;

    fn row(i: u64) -> LockName {
        LockName { level: ROW, table: 0, item: i }
    }
    fn req() -> Msg {
        Msg::default()
    }

    #[test]
    fn no_wait_refuses_a_conflict_and_end_releases_everything() {
        let mut t: LockTable<u32> = LockTable::new(Policy::NoWait, false);
        assert_eq!(t.request(1, row(1), Mode::S, 0, 1, req()), Outcome::Granted);
        assert_eq!(t.request(2, row(1), Mode::S, 0, 2, req()), Outcome::Granted);
        assert_eq!(t.request(3, row(1), Mode::X, 0, 3, req()), Outcome::Refused(DENIED));
        assert_eq!(t.request(1, row(2), Mode::X, 0, 1, req()), Outcome::Granted);
        assert!(t.consistent());
        let mut out = Vec::new();
        t.end(1, &mut out);
        t.end(2, &mut out);
        assert!(out.is_empty() && t.locks() == 0 && t.transactions() == 0);
        assert_eq!(t.request(3, row(1), Mode::X, 0, 3, req()), Outcome::Granted);
    }

    #[test]
    fn waiters_are_granted_in_fifo_order_and_conversions_go_first() {
        let mut t: LockTable<u32> = LockTable::new(Policy::BoundedWait { bound_ns: 100 }, false);
        assert_eq!(t.request(1, row(1), Mode::S, 0, 1, req()), Outcome::Granted);
        assert_eq!(t.request(2, row(1), Mode::X, 0, 2, req()), Outcome::Queued);
        // A new S request waits behind the X (FIFO), although S is compatible with the holder.
        assert_eq!(t.request(3, row(1), Mode::S, 0, 3, req()), Outcome::Queued);
        let mut out = Vec::new();
        t.end(1, &mut out);
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![2]);
        out.clear();
        t.end(2, &mut out);
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![3]);
        assert!(t.consistent());
        // A conversion: IS held, IX wanted, passes a queued X.
        let g = LockName { level: 1, table: 0, item: 0 };
        assert_eq!(t.request(4, g, Mode::IS, 0, 4, req()), Outcome::Granted);
        assert_eq!(t.request(5, g, Mode::S, 0, 5, req()), Outcome::Granted);
        assert_eq!(t.request(6, g, Mode::X, 0, 6, req()), Outcome::Queued);
        assert_eq!(t.request(4, g, Mode::IX, 0, 4, req()), Outcome::Queued, "IX conflicts with the S held by 5");
        out.clear();
        t.end(5, &mut out);
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![4], "the conversion first; X still waits for IX");
        assert!(t.consistent());
    }

    #[test]
    fn wait_die_queues_only_the_older() {
        let mut t: LockTable<u32> = LockTable::new(Policy::WaitDie, false);
        assert_eq!(t.request(5, row(1), Mode::X, 0, 5, req()), Outcome::Granted);
        assert_eq!(t.request(9, row(1), Mode::X, 0, 9, req()), Outcome::Refused(DIED));
        assert_eq!(t.request(3, row(1), Mode::S, 0, 3, req()), Outcome::Queued);
        // Younger than the waiter 3: dies.
        assert_eq!(t.request(4, row(1), Mode::S, 0, 4, req()), Outcome::Refused(DIED));
        assert_eq!(t.request(2, row(1), Mode::S, 0, 2, req()), Outcome::Queued);
        let mut out = Vec::new();
        t.end(5, &mut out);
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![3, 2]);
    }

    #[test]
    fn bounded_wait_times_out_the_head_only_past_the_bound() {
        let mut t: LockTable<u32> = LockTable::new(Policy::BoundedWait { bound_ns: 100 }, false);
        t.request(1, row(1), Mode::X, 0, 1, req());
        t.request(2, row(1), Mode::X, 10, 2, req());
        t.request(3, row(1), Mode::S, 50, 3, req());
        assert_eq!(t.next_expiry(), Some(110));
        let mut out = Vec::new();
        t.expire(109, &mut out);
        assert!(out.is_empty());
        t.expire(110, &mut out);
        assert_eq!(out.iter().map(|o| (o.0, o.2)).collect::<Vec<_>>(), vec![(2, TIMEOUT)]);
        assert_eq!(t.next_expiry(), Some(150));
        assert!(t.consistent());
    }

    #[test]
    fn the_planted_matrix_grants_s_beside_ix() {
        let g = LockName { level: 2, table: 0, item: 0 };
        for (bug, want) in [(false, Outcome::Refused(DENIED)), (true, Outcome::Granted)] {
            let mut t: LockTable<u32> = LockTable::new(Policy::NoWait, bug);
            assert_eq!(t.request(1, g, Mode::IX, 0, 1, req()), Outcome::Granted);
            assert_eq!(t.request(2, g, Mode::S, 0, 2, req()), want);
        }
    }
}
