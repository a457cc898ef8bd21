//! Export to Elle's history forms (jepsen-io/elle), so an independent checker can confirm a
//! verdict: list-append (`elle.list-append`) and rw-register (`elle.rw-register`).
//!
//! - One Elle process per coroutine (node, worker, coroutine), numbered from 0 in order of
//!   first appearance.
//! - Each transaction is an `invoke` at its start and an `ok` (committed) or `fail`
//!   (aborted) at its end, in time order. At one instant a process's completion comes before
//!   its next invocation (it runs one transaction at a time); otherwise invocations come
//!   before completions, so no real-time order is invented between transactions that merely
//!   touch (txbed orders Ti before Tj only if `end_i < start_j`). The one order a linear
//!   history cannot avoid: two processes that each end a transaction and start the next in the
//!   same nanosecond; the first one's completion then precedes the second's invocation.
//! - A write is an append (list-append) or a write (rw-register) of a value that identifies
//!   the transaction: `16 * (n + 1) + k`, where n is the transaction's position in the history
//!   (from 0) and k counts its earlier writes of the same key (at most 15 are told apart), so
//!   two writers of one version stay two values and Elle sees a lost update.
//! - A read of version v lists the values that installed versions 1..=v of the key, in version
//!   order (list-append), or returns the value that installed v (rw-register; `null` for the
//!   initial version 0). A version two committed transactions installed lists both, in history
//!   order (the reader read one of them, and each writer then read a prefix missing the
//!   other's append: Elle's lost update). A version only an aborted transaction installed lists
//!   its value (Elle's G1a); a version nobody installed is cut short at the versions known.
//! - Predicate reads have no Elle form and are left out.
//!
//! The output is one JSON array of operations, written as it is produced (no value tree).

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::flat::Flat;
use crate::history::Status;

/// Value of the `k`-th write of transaction row `n` to one key.
fn value(n: usize, k: usize) -> u64 {
    16 * (n as u64 + 1) + k.min(15) as u64
}

/// For each key, the values installing each version, in version order (committed writers,
/// and aborted ones for versions no committed transaction installed).
fn versions(f: &Flat) -> BTreeMap<u64, Vec<(u64, u64)>> {
    let mut by_key: BTreeMap<u64, Vec<(u64, bool, usize, u64)>> = BTreeMap::new();
    for (n, row) in f.txns.iter().enumerate() {
        let committed = row.status == Status::Committed;
        let ws = f.writes(n);
        for (i, w) in ws.iter().enumerate() {
            let k = ws[..i].iter().filter(|x| x.key == w.key).count();
            by_key.entry(w.key).or_default().push((w.version, !committed, n, value(n, k)));
        }
    }
    by_key
        .into_iter()
        .map(|(key, mut v)| {
            v.sort_unstable();
            let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
            let mut i = 0;
            while i < v.len() {
                let version = v[i].0;
                let mut j = i;
                while j < v.len() && v[j].0 == version {
                    j += 1;
                }
                // Aborted writers only where no committed one installed the version.
                let committed = v[i..j].iter().any(|x| !x.1);
                out.extend(v[i..j].iter().filter(|x| !committed || !x.1).map(|x| (version, x.3)));
                i = j;
            }
            (key, out)
        })
        .collect()
}

#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Invoke,
    Complete,
}

/// Every invocation and completion in the order Elle should see them: `(row, event, time)`.
fn events(f: &Flat) -> (Vec<(usize, Event, u64)>, Vec<u64>) {
    let mut processes: BTreeMap<(u16, u16, u32), u64> = BTreeMap::new();
    let process: Vec<u64> = f
        .txns
        .iter()
        .map(|r| {
            let next = processes.len() as u64;
            *processes.entry((r.node, r.worker, r.coroutine)).or_insert(next)
        })
        .collect();
    // Per process, its events in the order it ran them.
    let mut runs: Vec<usize> = (0..f.txns.len()).collect();
    runs.sort_by_key(|&n| (process[n], f.txns[n].start_ns, f.txns[n].end_ns, n));
    let mut all: Vec<(u64, u64, usize, Event)> = Vec::with_capacity(2 * runs.len());
    for &n in &runs {
        all.push((f.txns[n].start_ns, process[n], n, Event::Invoke));
        all.push((f.txns[n].end_ns, process[n], n, Event::Complete));
    }
    all.sort_by_key(|&(t, p, n, e)| (t, p, f.txns[n].start_ns, n, e));
    // At each instant: a process's own events keep their order; across processes, every
    // invocation that can go goes first, then one completion (a process whose next event is
    // an invocation first), and again.
    let mut out = Vec::with_capacity(all.len());
    let mut i = 0;
    while i < all.len() {
        let t = all[i].0;
        let mut j = i;
        while j < all.len() && all[j].0 == t {
            j += 1;
        }
        let group = &all[i..j];
        // Each process's events at t, in order: heads[p] indexes into them.
        let mut queues: BTreeMap<u64, Vec<(usize, Event)>> = BTreeMap::new();
        for &(_, p, n, e) in group {
            queues.entry(p).or_default().push((n, e));
        }
        let mut heads: BTreeMap<u64, usize> = queues.keys().map(|&p| (p, 0)).collect();
        let mut left = group.len();
        while left > 0 {
            let mut moved = false;
            for (p, q) in &queues {
                let h = heads.get_mut(p).expect("head");
                while *h < q.len() && q[*h].1 == Event::Invoke {
                    out.push((q[*h].0, Event::Invoke, t));
                    *h += 1;
                    left -= 1;
                    moved = true;
                }
            }
            if moved {
                continue;
            }
            let pick = queues
                .iter()
                .filter(|(p, q)| heads[*p] < q.len())
                .min_by_key(|(p, q)| {
                    let h = heads[*p];
                    // Chained first: its completion frees an invocation.
                    (q.get(h + 1).map_or(1, |x| if x.1 == Event::Invoke { 0 } else { 1 }), **p)
                })
                .map(|(p, _)| *p)
                .expect("an event is left");
            let h = heads.get_mut(&pick).expect("head");
            out.push((queues[&pick][*h].0, Event::Complete, t));
            *h += 1;
            left -= 1;
        }
        i = j;
    }
    (out, process)
}

/// Writes the history in Elle's list-append form.
pub fn write_list_append(f: &Flat, w: impl Write) -> io::Result<()> {
    write_ops(f, w, Form::ListAppend)
}

/// Writes the history in Elle's rw-register form.
pub fn write_rw_register(f: &Flat, w: impl Write) -> io::Result<()> {
    write_ops(f, w, Form::RwRegister)
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Form {
    ListAppend,
    RwRegister,
}

fn write_ops(f: &Flat, w: impl Write, form: Form) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    let versions = versions(f);
    let (events, process) = events(f);
    w.write_all(b"[")?;
    for (index, &(n, event, time)) in events.iter().enumerate() {
        if index > 0 {
            w.write_all(b",\n")?;
        }
        let row = &f.txns[n];
        let kind = match (event, row.status) {
            (Event::Invoke, _) => "invoke",
            (Event::Complete, Status::Committed) => "ok",
            (Event::Complete, Status::Aborted) => "fail",
        };
        write!(
            w,
            "{{\"index\":{index},\"type\":\"{kind}\",\"f\":\"txn\",\"process\":{},\"time\":{time},\"value\":[",
            process[n]
        )?;
        let mut first = true;
        let mut sep = |w: &mut io::BufWriter<_>| -> io::Result<()> {
            if !first {
                w.write_all(b",")?;
            }
            first = false;
            Ok(())
        };
        for r in f.reads(n) {
            sep(&mut w)?;
            let known = versions.get(&r.key).map(|v| &v[..v.partition_point(|x| x.0 <= r.version)]).unwrap_or(&[]);
            match (form, event) {
                (Form::ListAppend, Event::Invoke) => write!(w, "[\"r\",{},null]", r.key)?,
                (Form::RwRegister, Event::Invoke) => write!(w, "[\"r\",{},null]", r.key)?,
                (Form::ListAppend, Event::Complete) => {
                    write!(w, "[\"r\",{},[", r.key)?;
                    for (i, (_, v)) in known.iter().enumerate() {
                        write!(w, "{}{v}", if i > 0 { "," } else { "" })?;
                    }
                    w.write_all(b"]]")?;
                }
                (Form::RwRegister, Event::Complete) => {
                    // The value that installed exactly the version read (the first of two
                    // writers of one version).
                    let exact = known.iter().find(|x| x.0 == r.version).filter(|_| r.version != 0);
                    match exact {
                        Some((_, v)) => write!(w, "[\"r\",{},{v}]", r.key)?,
                        None => write!(w, "[\"r\",{},null]", r.key)?,
                    }
                }
            }
        }
        let ws = f.writes(n);
        for (i, x) in ws.iter().enumerate() {
            sep(&mut w)?;
            let k = ws[..i].iter().filter(|y| y.key == x.key).count();
            let op = if form == Form::ListAppend { "append" } else { "w" };
            write!(w, "[\"{op}\",{},{}]", x.key, value(n, k))?;
        }
        w.write_all(b"]}")?;
    }
    w.write_all(b"]\n")?;
    w.flush()
}
