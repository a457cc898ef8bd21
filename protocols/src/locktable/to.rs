//! Textbook timestamp ordering (Sec. 3.2.2; Bernstein, Hadzilacos and Goodman): conflicting
//! operations on an item run in the order of transaction ids, and one that comes too late
//! aborts its transaction.
//!
//! Per item: the last read and the last (installed) write timestamps, at most one pending
//! write (granted, not yet committed or aborted), the transactions that read it and have not
//! ended, and a queue of requests waiting for those to end, in timestamp order.
//!
//! - read(ts): too late if ts < write_ts; queued behind a pending write older than it (it
//!   must read that write's value); too late if a younger write is pending.
//! - write(ts) (read-modify-write): too late if ts < read_ts or ts < write_ts; queued
//!   behind a pending write, and behind readers that have not ended.
//!
//! Two rules are stricter than the textbook because the data is read and written one-sided
//! after the grant, where the server cannot order the accesses themselves: a read older than a
//! pending write is refused rather than served around it (the writer may install in place
//! before the reader's READ arrives), and a write waits for the readers of the item to end
//! (so no READ granted earlier can see it). Both keep the history in timestamp order; neither
//! makes TO wait for anything but older transactions, so it cannot deadlock.

use std::collections::BTreeMap;

use super::wire::{LockName, Msg, GRANTED, TOO_LATE};

struct Queued<T> {
    ts: u64,
    write: bool,
    to: T,
    req: Msg,
}

struct Item<T> {
    read_ts: u64,
    write_ts: u64,
    pending: Option<u64>,
    readers: Vec<u64>,
    queue: Vec<Queued<T>>,
}

/// What became of an operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted,
    Queued,
    TooLate,
}

/// One server's timestamp-ordering state. `T` is how a queued request is answered later.
pub struct Ordering<T> {
    items: BTreeMap<LockName, Item<T>>,
    /// Per transaction, the items it read or has a pending write on.
    txns: BTreeMap<u64, Vec<LockName>>,
    /// Planted bug `TwoPendingWrites`: a write is granted beside another pending one.
    two_pending: bool,
}

impl<T> Default for Item<T> {
    fn default() -> Self {
        Item { read_ts: 0, write_ts: 0, pending: None, readers: Vec::new(), queue: Vec::new() }
    }
}

impl<T: Clone> Default for Ordering<T> {
    fn default() -> Self {
        Ordering { items: BTreeMap::new(), txns: BTreeMap::new(), two_pending: false }
    }
}

fn decide<T>(it: &Item<T>, ts: u64, write: bool, two_pending: bool) -> Outcome {
    if ts < it.write_ts || (write && ts < it.read_ts) {
        return Outcome::TooLate;
    }
    if two_pending && write && it.pending.is_some() {
        return Outcome::Granted;
    }
    if let Some(p) = it.pending {
        if p == ts {
            return Outcome::Granted; // its own pending write
        }
        return if ts < p { Outcome::TooLate } else { Outcome::Queued };
    }
    if write && it.readers.iter().any(|r| *r != ts) {
        return Outcome::Queued;
    }
    Outcome::Granted
}

impl<T: Clone> Ordering<T> {
    /// With the planted bug `TwoPendingWrites`.
    pub fn with_bug(two_pending: bool) -> Self {
        Ordering { two_pending, ..Ordering::default() }
    }

    /// Transactions with reads or pending writes here.
    pub fn transactions(&self) -> usize {
        self.txns.len()
    }
    pub fn knows(&self, txn: u64) -> bool {
        self.txns.contains_key(&txn)
    }

    /// Transaction `ts` reads (`write` false) or read-modify-writes `item`.
    pub fn request(&mut self, ts: u64, item: LockName, write: bool, to: T, req: Msg) -> Outcome {
        let it = self.items.entry(item).or_default();
        let o = decide(it, ts, write, self.two_pending);
        match o {
            Outcome::Granted => grant(it, &mut self.txns, item, ts, write),
            Outcome::Queued => {
                let at = it.queue.partition_point(|q| q.ts <= ts);
                it.queue.insert(at, Queued { ts, write, to, req });
            }
            Outcome::TooLate => {}
        }
        o
    }

    /// End of transaction `ts`: its pending writes install (commit) or are discarded (abort),
    /// its reads end; queued operations this unblocks are answered into `out`.
    pub fn end(&mut self, ts: u64, commit: bool, out: &mut Vec<(T, Msg, u8)>) {
        for item in self.txns.remove(&ts).unwrap_or_default() {
            let Some(it) = self.items.get_mut(&item) else { continue };
            if it.pending == Some(ts) {
                it.pending = None;
                if commit {
                    it.write_ts = it.write_ts.max(ts);
                }
            }
            it.readers.retain(|r| *r != ts);
            // Serve the queue in timestamp order until an operation must wait again.
            let mut i = 0;
            while i < it.queue.len() {
                let q = &it.queue[i];
                match decide(it, q.ts, q.write, self.two_pending) {
                    Outcome::Queued => i += 1,
                    o => {
                        let q = it.queue.remove(i);
                        if o == Outcome::Granted {
                            grant(it, &mut self.txns, item, q.ts, q.write);
                            out.push((q.to, q.req, GRANTED));
                        } else {
                            out.push((q.to, q.req, TOO_LATE));
                        }
                    }
                }
            }
            if it.pending.is_none() && it.readers.is_empty() && it.queue.is_empty() && it.read_ts == 0 {
                self.items.remove(&item);
            }
        }
    }
}

fn grant<T>(it: &mut Item<T>, txns: &mut BTreeMap<u64, Vec<LockName>>, item: LockName, ts: u64, write: bool) {
    it.read_ts = it.read_ts.max(ts);
    if write {
        it.pending = Some(ts);
    } else if !it.readers.contains(&ts) {
        it.readers.push(ts);
    }
    let v = txns.entry(ts).or_default();
    if !v.contains(&item) {
        v.push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item() -> LockName {
        LockName { level: 3, table: 0, item: 1 }
    }

    #[test]
    fn late_operations_abort_and_queued_ones_follow_the_commit() {
        let mut o: Ordering<u32> = Ordering::default();
        let m = Msg::default();
        assert_eq!(o.request(10, item(), true, 10, m), Outcome::Granted);
        assert_eq!(o.request(5, item(), false, 5, m), Outcome::TooLate, "older than the pending write");
        assert_eq!(o.request(20, item(), false, 20, m), Outcome::Queued, "reads the pending write's value");
        assert_eq!(o.request(30, item(), true, 30, m), Outcome::Queued);
        let mut out = Vec::new();
        o.end(10, true, &mut out);
        // 20 reads; 30 must wait for reader 20 to end.
        assert_eq!(out.iter().map(|x| (x.0, x.2)).collect::<Vec<_>>(), vec![(20, GRANTED)]);
        out.clear();
        o.end(20, true, &mut out);
        assert_eq!(out.iter().map(|x| (x.0, x.2)).collect::<Vec<_>>(), vec![(30, GRANTED)]);
        out.clear();
        o.end(30, false, &mut out);
        assert_eq!(o.request(25, item(), true, 25, m), Outcome::TooLate, "read at 30 already");
        assert_eq!(o.request(15, item(), false, 15, m), Outcome::Granted, "write 30 aborted: 10 is the last write");
    }
}
