//! Chrome Trace Event Format (JSON) from the events `WorkerCore`s record
//! (`txbed_transport::trace`), for Perfetto (ui.perfetto.dev) or chrome://tracing.
//!
//! Layout: one process per node ("node N"); per worker a thread "worker W" (RPC handlers it
//! served, and the posts of the RPC layer's datagrams), one per coroutine ("worker W /
//! coroutine C": transactions, stages, verb posts, RPC calls) and one per QP ("worker W / QP Q
//! (to node P)", or "(UD)": each work request from its doorbell to its completion).
//! Complete events on one thread must nest, but a QP's requests overlap (its queue is FIFO:
//! later requests start and end later) and so do a coroutine's outstanding RPC calls; such a
//! track is split into lanes, extra threads named like the track plus " #2", " #3", ...
//!
//! Flows ("s", then "f" with "bp":"e", same id) go from the request to what completes it: from
//! the "post" slice of a signaled work request on the coroutine's track to the request's slice
//! on the QP track, and from an RPC call to the handler that served it on the callee's worker
//! track. The "s" sits at the start of its slice, the "f" 1 ns before the end of its slice (at
//! most halfway), so each binds to its own slice. Flows missing an end are left out.
//! Timestamps are microseconds (floats, so nanoseconds survive).

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde_json::{json, Map, Value};
use txbed_transport::TraceEvent;

/// A logical track of a worker, in display order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Track {
    Worker,
    Coroutine(u32),
    Qp(u32),
}

type TrackKey = (u16, u16, Track);

fn track(e: &TraceEvent) -> TrackKey {
    let t = match (e.qp, e.coroutine) {
        (Some(q), _) => Track::Qp(q),
        (None, Some(c)) => Track::Coroutine(c),
        (None, None) => Track::Worker,
    };
    (e.node, e.worker, t)
}

/// One output record, in time order.
enum Out {
    Slice(usize),
    FlowStart { id: u64, src: usize, dst: usize },
    FlowEnd { id: u64, dst: usize },
}

struct Plan {
    /// (node, tid) of every event.
    place: Vec<(u16, u32)>,
    /// Thread names: (node, tid) -> name.
    threads: BTreeMap<(u16, u32), String>,
    /// Timed records sorted by time (then generation order).
    out: Vec<(f64, Out)>,
    nodes: u16,
}

fn us(ns: f64) -> f64 {
    ns / 1000.0
}

fn plan(events: &[TraceEvent], nodes: u16, workers: u16) -> Plan {
    let mut tracks: BTreeMap<TrackKey, Vec<usize>> = BTreeMap::new();
    for n in 0..nodes {
        for w in 0..workers {
            tracks.entry((n, w, Track::Worker)).or_default();
        }
    }
    let mut qp_peer: BTreeMap<TrackKey, Option<u16>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let k = track(e);
        tracks.entry(k).or_default().push(i);
        if e.qp.is_some() {
            let p = qp_peer.entry(k).or_default();
            *p = p.or(e.peer);
        }
    }
    // Lanes: outer slices first; a slice goes to the first lane where it nests in (or follows)
    // what is open there.
    let mut lane = vec![0u32; events.len()];
    let mut lanes: BTreeMap<TrackKey, u32> = BTreeMap::new();
    for (k, idx) in tracks.iter_mut() {
        idx.sort_by_key(|&i| (events[i].start_ns, std::cmp::Reverse(events[i].end_ns), i));
        let mut open: Vec<Vec<u64>> = Vec::new();
        for &i in idx.iter() {
            let (s, e) = (events[i].start_ns, events[i].end_ns.max(events[i].start_ns));
            let mut chosen = None;
            for (l, stack) in open.iter_mut().enumerate() {
                while stack.last().is_some_and(|&end| end <= s) {
                    stack.pop();
                }
                if stack.last().is_none_or(|&end| end >= e) {
                    stack.push(e);
                    chosen = Some(l);
                    break;
                }
            }
            let l = chosen.unwrap_or_else(|| {
                open.push(vec![e]);
                open.len() - 1
            });
            lane[i] = l as u32;
        }
        lanes.insert(*k, open.len().max(1) as u32);
    }
    // Thread ids per node, in track order.
    let mut tid_of: BTreeMap<(TrackKey, u32), u32> = BTreeMap::new();
    let mut threads = BTreeMap::new();
    let mut next: BTreeMap<u16, u32> = BTreeMap::new();
    for (&k, &count) in &lanes {
        let (node, w, t) = k;
        let base = match t {
            Track::Worker => format!("worker {w}"),
            Track::Coroutine(c) => format!("worker {w} / coroutine {c}"),
            Track::Qp(q) => match qp_peer.get(&k).copied().flatten() {
                Some(p) => format!("worker {w} / QP {q} (to node {p})"),
                None => format!("worker {w} / QP {q} (UD)"),
            },
        };
        for l in 0..count {
            let tid = next.entry(node).or_insert(1);
            tid_of.insert((k, l), *tid);
            let name = if l == 0 { base.clone() } else { format!("{base} #{}", l + 1) };
            threads.insert((node, *tid), name);
            *tid += 1;
        }
    }
    let place: Vec<(u16, u32)> =
        events.iter().enumerate().map(|(i, e)| (e.node, tid_of[&(track(e), lane[i])])).collect();
    // Flows with both ends, numbered densely (viewers read ids as doubles).
    let mut ends: BTreeMap<u64, (Option<usize>, Option<usize>)> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(f) = e.flow_out {
            ends.entry(f).or_default().0.get_or_insert(i);
        }
        if let Some(f) = e.flow_in {
            ends.entry(f).or_default().1.get_or_insert(i);
        }
    }
    let mut flow_of: BTreeMap<usize, Vec<(u64, usize)>> = BTreeMap::new();
    let mut dense = 0u64;
    for (src, dst) in ends.values() {
        if let (Some(s), Some(d)) = (src, dst) {
            dense += 1;
            flow_of.entry(*s).or_default().push((dense, *d));
        }
    }
    // Each track in nesting order (outer slices first at equal times), so that after the
    // stable sort by time a viewer opens a parent before its children.
    let mut out = Vec::with_capacity(events.len() * 2);
    for &i in tracks.values().flatten() {
        let e = &events[i];
        out.push((e.start_ns as f64, Out::Slice(i)));
        for &(id, dst) in flow_of.get(&i).into_iter().flatten() {
            out.push((e.start_ns as f64, Out::FlowStart { id, src: i, dst }));
            let d = &events[dst];
            let dur = d.end_ns.saturating_sub(d.start_ns) as f64;
            out.push((d.end_ns.max(d.start_ns) as f64 - (dur / 2.0).min(1.0), Out::FlowEnd { id, dst }));
        }
    }
    // Stable: a flow start follows its slice at the same time.
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    Plan { place, threads, out, nodes }
}

fn metadata(p: &Plan) -> Vec<Value> {
    let mut v = Vec::new();
    let mut nodes: Vec<u16> = (0..p.nodes).collect();
    nodes.extend(p.threads.keys().map(|&(n, _)| n).filter(|&n| n >= p.nodes));
    nodes.dedup();
    for n in nodes {
        v.push(json!({"ph": "M", "name": "process_name", "pid": n, "tid": 0, "args": {"name": format!("node {n}")}}));
        v.push(json!({"ph": "M", "name": "process_sort_index", "pid": n, "tid": 0, "args": {"sort_index": n}}));
    }
    for (&(n, tid), name) in &p.threads {
        v.push(json!({"ph": "M", "name": "thread_name", "pid": n, "tid": tid, "args": {"name": name}}));
        v.push(json!({"ph": "M", "name": "thread_sort_index", "pid": n, "tid": tid, "args": {"sort_index": tid}}));
    }
    v
}

fn record(p: &Plan, events: &[TraceEvent], ts: f64, o: &Out) -> Value {
    match *o {
        Out::Slice(i) => {
            let e = &events[i];
            let (pid, tid) = p.place[i];
            let mut args = Map::new();
            if let Some(c) = e.coroutine {
                args.insert("coroutine".into(), c.into());
            }
            if let Some(q) = e.qp {
                args.insert("qp".into(), q.into());
            }
            if let Some(n) = e.peer {
                args.insert("peer".into(), n.into());
            }
            for &(k, v) in &e.args {
                args.insert(k.into(), v.into());
            }
            let dur = e.end_ns.saturating_sub(e.start_ns) as f64;
            json!({"ph": "X", "name": e.name, "cat": e.category, "pid": pid, "tid": tid,
                   "ts": us(ts), "dur": us(dur), "args": args})
        }
        Out::FlowStart { id, src, dst } => {
            let (pid, tid) = p.place[src];
            let d = &events[dst];
            json!({"ph": "s", "id": id, "name": d.name, "cat": d.category, "pid": pid, "tid": tid, "ts": us(ts)})
        }
        Out::FlowEnd { id, dst } => {
            let (pid, tid) = p.place[dst];
            let d = &events[dst];
            json!({"ph": "f", "bp": "e", "id": id, "name": d.name, "cat": d.category, "pid": pid, "tid": tid,
                   "ts": us(ts)})
        }
    }
}

/// The trace as one JSON value: `{"traceEvents": [...], "displayTimeUnit": "ns"}`. `nodes` and
/// `workers` name every node and worker even if it recorded nothing. Holds every event in
/// memory as JSON; [`write_chrome_trace`] streams instead.
pub fn chrome_trace_json(events: &[TraceEvent], nodes: u16, workers: u16) -> Value {
    let p = plan(events, nodes, workers);
    let mut all = metadata(&p);
    all.extend(p.out.iter().map(|(ts, o)| record(&p, events, *ts, o)));
    json!({"traceEvents": all, "displayTimeUnit": "ns"})
}

/// Writes the same trace as [`chrome_trace_json`] to `w`, one event at a time.
pub fn write_chrome_trace(events: &[TraceEvent], nodes: u16, workers: u16, mut w: impl Write) -> io::Result<()> {
    let p = plan(events, nodes, workers);
    w.write_all(b"{\"traceEvents\":[\n")?;
    let mut first = true;
    let meta = metadata(&p);
    let timed = p.out.iter().map(|(ts, o)| record(&p, events, *ts, o));
    for v in meta.into_iter().chain(timed) {
        if !first {
            w.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut w, &v)?;
    }
    w.write_all(b"\n],\"displayTimeUnit\":\"ns\"}\n")?;
    w.flush()
}

/// Which recorded events a trace file keeps (`txbed replay --trace-window`, `--trace-filter`):
/// recording is unchanged (and so is the run's digest); only the file shrinks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceSelect {
    /// Keep slices that overlap [from, to) ns of simulated time.
    pub window_ns: Option<(u64, u64)>,
    /// Keep only these categories (`txbed_transport::trace::CATEGORIES`).
    pub categories: Option<Vec<&'static str>>,
}

impl TraceSelect {
    pub fn keeps(&self, e: &TraceEvent) -> bool {
        let in_window = self.window_ns.is_none_or(|(from, to)| e.start_ns < to && e.end_ns.max(e.start_ns) >= from);
        let in_filter = self.categories.as_ref().is_none_or(|c| c.contains(&e.category));
        in_window && in_filter
    }
}

/// The events `sel` keeps, in their order.
pub fn select(events: Vec<TraceEvent>, sel: &TraceSelect) -> Vec<TraceEvent> {
    if *sel == TraceSelect::default() {
        return events;
    }
    events.into_iter().filter(|e| sel.keeps(e)).collect()
}

/// `FROM..TO` in simulated microseconds (either end may be omitted: `..500`, `200..`).
pub fn parse_window(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("--trace-window {s:?}: expected FROM..TO in simulated microseconds, e.g. 100..200"))?;
    let num = |x: &str, default: u64| -> Result<u64, String> {
        let x = x.trim();
        if x.is_empty() {
            return Ok(default);
        }
        x.parse::<u64>()
            .ok()
            .and_then(|v| v.checked_mul(1000))
            .ok_or_else(|| format!("--trace-window {s:?}: {x:?} is not a whole number of microseconds"))
    };
    let (from, to) = (num(a, 0)?, num(b, u64::MAX)?);
    if from >= to {
        return Err(format!("--trace-window {s:?}: FROM must be below TO"));
    }
    Ok((from, to))
}

/// A comma-separated list of trace categories; an unknown one is an error naming the valid ones.
pub fn parse_categories(s: &str) -> Result<Vec<&'static str>, String> {
    let all = txbed_transport::trace::CATEGORIES;
    let mut out = Vec::new();
    for c in s.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        match all.iter().find(|k| k.eq_ignore_ascii_case(c)) {
            Some(k) => out.push(*k),
            None => {
                return Err(format!("--trace-filter: unknown category {c:?}; the categories are {}", all.join(", ")))
            }
        }
    }
    if out.is_empty() {
        return Err(format!("--trace-filter: no category given; the categories are {}", all.join(", ")));
    }
    Ok(out)
}

#[cfg(test)]
mod select_tests {
    use super::*;

    #[test]
    fn windows_and_categories_parse_or_are_refused() {
        assert_eq!(parse_window("100..200"), Ok((100_000, 200_000)));
        assert_eq!(parse_window("..5"), Ok((0, 5000)));
        assert_eq!(parse_window("7.."), Ok((7000, u64::MAX)));
        assert!(parse_window("200..100").is_err());
        assert!(parse_window("12").is_err());
        assert!(parse_window("a..b").is_err());
        assert_eq!(parse_categories("stage, TXN"), Ok(vec!["stage", "txn"]));
        let e = parse_categories("stage,bogus").unwrap_err();
        assert!(e.contains("\"bogus\"") && e.contains("verb, rpc, local, stage, txn"), "{e}");
    }
}
