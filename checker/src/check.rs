//! The checker: builds Adya's direct serialization graph (DSG) of the committed transactions,
//! finds its strongly connected components with Tarjan's algorithm (iterative, linear time),
//! classifies the most severe cycle in each component, and explains a shortest one in plain
//! words, after Elle. It also reports the non-cycle anomalies G1a (aborted read) and G1b
//! (intermediate read), reads of versions nobody wrote, the final store against the committed
//! writes (nothing lost, on every replica), and workload invariants.
//!
//! Edges, for committed Ti != Tj and the per-key version order of committed writes:
//! - ww: Tj installs the version right after Ti's;
//! - wr: Tj reads a version Ti installed;
//! - rw: Ti reads a version and Tj installs the next one (anti-dependency);
//! - rt (only with `strict`): Ti ended before Tj started, encoded through a chain of time
//!   points so it costs O(n) edges instead of O(n^2).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use serde::Serialize;

use crate::history::{History, Status, Txn};
use crate::level::Level;

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum AnomalyKind {
    /// Write cycle: only ww edges.
    G0,
    /// Aborted read: a committed transaction read a version an aborted one wrote.
    G1a,
    /// Intermediate read: a committed transaction read a version its writer later overwrote.
    G1b,
    /// Circular information flow: a cycle of ww and wr edges.
    G1c,
    /// A cycle with exactly one anti-dependency (read skew and friends).
    GSingle,
    /// A cycle with an item anti-dependency that is neither G0, G1c nor G-single (write skew
    /// and friends): Adya's G2-item.
    G2Item,
    /// A cycle whose anti-dependencies are all predicate ones (phantoms): G2 but not G2-item.
    G2,
    /// A cycle that needs real-time order: serializable but not strictly (only with `strict`).
    RealTime,
    /// A read of a version no transaction in the history installed.
    UnknownVersion,
    /// Two committed transactions installed the same version of a key (a lost update).
    DuplicateVersion,
    /// A committed write of version v + 1 of a key whose version v no transaction installed
    /// and no one read: a transaction is missing from the history.
    SkippedVersion,
    /// A replica's final version differs from the last committed write.
    LostWrite,
    /// A workload invariant does not hold.
    Invariant,
}

impl AnomalyKind {
    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::G0 => "G0",
            AnomalyKind::G1a => "G1a",
            AnomalyKind::G1b => "G1b",
            AnomalyKind::G1c => "G1c",
            AnomalyKind::GSingle => "G-single",
            AnomalyKind::G2Item => "G2-item",
            AnomalyKind::G2 => "G2",
            AnomalyKind::RealTime => "G-realtime",
            AnomalyKind::UnknownVersion => "unknown-version",
            AnomalyKind::DuplicateVersion => "duplicate-version",
            AnomalyKind::SkippedVersion => "skipped-version",
            AnomalyKind::LostWrite => "lost-write",
            AnomalyKind::Invariant => "invariant",
        }
    }
    /// Whether this anomaly means the history is not serializable.
    pub fn breaks_serializability(self) -> bool {
        !matches!(self, AnomalyKind::LostWrite | AnomalyKind::Invariant | AnomalyKind::RealTime)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// Transaction ids involved (the cycle, in order, for cycles).
    pub txns: Vec<u64>,
    pub explanation: String,
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The level the history is judged at (strict serializability adds real-time edges).
    pub level: Level,
    /// Stop explaining after this many anomalies (all are still counted).
    pub max_explained: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The level the history was judged at.
    pub level: Level,
    /// No anomaly the level forbids.
    pub isolation_ok: bool,
    /// No anomaly serializability forbids, whatever the level.
    pub serializable: bool,
    /// `None` with `strict` off.
    pub strict_serializable: Option<bool>,
    pub checked_txns: usize,
    pub committed: usize,
    pub aborted: usize,
    /// `None` when the history has no final store to compare.
    pub nothing_lost: Option<bool>,
    pub invariants_ok: bool,
    /// Anomalies the level forbids, by class.
    pub counts: BTreeMap<&'static str, usize>,
    /// Anomalies present that the level allows, by class.
    pub allowed: BTreeMap<&'static str, usize>,
    pub anomalies: Vec<Anomaly>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Kind {
    Ww = 0,
    Wr = 1,
    Rw = 2,
    Rt = 3,
}

/// An edge and the key that created it (16 bytes: the graph of a million transactions is
/// scanned several times). The versions an explanation names are looked up in the two
/// transactions' accesses; for real-time edges `key` holds the time.
#[derive(Copy, Clone, Debug)]
struct Edge {
    to: u32,
    kind: Kind,
    key: u64,
}

/// A committed write, as indexed for lookups.
#[derive(Copy, Clone)]
struct W {
    key: u64,
    version: u64,
    txn: u32,
    /// The same transaction later installed a newer version of this key.
    intermediate: bool,
}

struct Graph {
    /// CSR: edges of node `u` are `edges[start[u]..start[u+1]]`.
    start: Vec<u32>,
    edges: Vec<Edge>,
    nodes: usize,
}

impl Graph {
    /// Counting sort by source into compressed rows: linear, and stable, so each node's
    /// edges keep the order they were found in (deterministic explanations).
    fn build(n: usize, list: Vec<(u32, Edge)>) -> Graph {
        // Nodes and edge offsets are u32 to keep edges small.
        assert!(
            n < u32::MAX as usize && list.len() < u32::MAX as usize,
            "graph too large: {n} nodes, {} edges",
            list.len()
        );
        let mut start = vec![0u32; n + 1];
        for (f, _) in &list {
            start[*f as usize + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let dummy = Edge { to: 0, kind: Kind::Ww, key: 0 };
        let mut edges = vec![dummy; list.len()];
        for (f, e) in list {
            edges[fill[f as usize] as usize] = e;
            fill[f as usize] += 1;
        }
        Graph { start, edges, nodes: n }
    }
    fn out(&self, u: u32) -> &[Edge] {
        &self.edges[self.start[u as usize] as usize..self.start[u as usize + 1] as usize]
    }
}

/// Tarjan's SCC, iterative. Returns the component of every node; components are numbered in
/// the order they complete.
fn tarjan(g: &Graph, allowed: impl Fn(&Edge) -> bool, within: impl Fn(u32) -> bool) -> (Vec<u32>, u32) {
    const UNSEEN: u32 = u32::MAX;
    let n = g.nodes;
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0u32; n];
    let mut comp = vec![UNSEEN; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut calls: Vec<(u32, u32)> = Vec::new();
    let (mut next, mut ncomp) = (0u32, 0u32);
    for root in 0..n as u32 {
        if index[root as usize] != UNSEEN || !within(root) {
            continue;
        }
        calls.push((root, g.start[root as usize]));
        index[root as usize] = next;
        low[root as usize] = next;
        next += 1;
        stack.push(root);
        on_stack[root as usize] = true;
        while let Some(&mut (u, ref mut pos)) = calls.last_mut() {
            let end = g.start[u as usize + 1];
            let mut descended = false;
            while *pos < end {
                let e = g.edges[*pos as usize];
                *pos += 1;
                if !allowed(&e) || !within(e.to) {
                    continue;
                }
                let v = e.to as usize;
                if index[v] == UNSEEN {
                    index[v] = next;
                    low[v] = next;
                    next += 1;
                    stack.push(e.to);
                    on_stack[v] = true;
                    calls.push((e.to, g.start[v]));
                    descended = true;
                    break;
                } else if on_stack[v] {
                    low[u as usize] = low[u as usize].min(index[v]);
                }
            }
            if descended {
                continue;
            }
            calls.pop();
            if let Some(&(p, _)) = calls.last() {
                low[p as usize] = low[p as usize].min(low[u as usize]);
            }
            if low[u as usize] == index[u as usize] {
                loop {
                    let w = stack.pop().expect("scc stack");
                    on_stack[w as usize] = false;
                    comp[w as usize] = ncomp;
                    if w == u {
                        break;
                    }
                }
                ncomp += 1;
            }
        }
        debug_assert!(stack.is_empty(), "every node visited from a root is in a component");
    }
    (comp, ncomp)
}

/// Shortest cycle through `s` using allowed edges inside the component: the edges in order.
fn shortest_cycle(g: &Graph, s: u32, allowed: &dyn Fn(&Edge) -> bool, comp: &[u32]) -> Option<Vec<(u32, Edge)>> {
    let c = comp[s as usize];
    let mut parent: BTreeMap<u32, (u32, Edge)> = BTreeMap::new();
    let mut q = VecDeque::from([s]);
    while let Some(u) = q.pop_front() {
        for e in g.out(u) {
            if !allowed(e) || comp[e.to as usize] != c {
                continue;
            }
            if e.to == s {
                let mut path = vec![(u, *e)];
                let mut x = u;
                while x != s {
                    let (p, pe) = parent[&x];
                    path.push((p, pe));
                    x = p;
                }
                path.reverse();
                return Some(path);
            }
            if e.to != s && !parent.contains_key(&e.to) {
                parent.insert(e.to, (u, *e));
                q.push_back(e.to);
            }
        }
    }
    None
}

/// Path from `from` to `to` over allowed edges inside the component (BFS).
fn path(g: &Graph, from: u32, to: u32, allowed: &dyn Fn(&Edge) -> bool, comp: &[u32]) -> Option<Vec<(u32, Edge)>> {
    if from == to {
        return Some(Vec::new());
    }
    let c = comp[from as usize];
    let mut parent: BTreeMap<u32, (u32, Edge)> = BTreeMap::new();
    let mut q = VecDeque::from([from]);
    while let Some(u) = q.pop_front() {
        for e in g.out(u) {
            if !allowed(e) || comp[e.to as usize] != c || e.to == from || parent.contains_key(&e.to) {
                continue;
            }
            parent.insert(e.to, (u, *e));
            if e.to == to {
                let mut p = Vec::new();
                let mut x = to;
                while x != from {
                    let (pu, pe) = parent[&x];
                    p.push((pu, pe));
                    x = pu;
                }
                p.reverse();
                return Some(p);
            }
            q.push_back(e.to);
        }
    }
    None
}

/// Every anomaly found is counted; the first `max_explained` are kept with an explanation.
struct Found {
    max_explained: usize,
    counts: BTreeMap<AnomalyKind, usize>,
    explained: Vec<Anomaly>,
}

impl Found {
    fn new(opts: &Options) -> Self {
        let max_explained = if opts.max_explained == 0 { 20 } else { opts.max_explained };
        Found { max_explained, counts: BTreeMap::new(), explained: Vec::new() }
    }

    /// Counts an anomaly; `text` is only built for the ones explained.
    fn note(&mut self, kind: AnomalyKind, txns: Vec<u64>, text: impl FnOnce() -> String) {
        *self.counts.entry(kind).or_default() += 1;
        if self.explained.len() < self.max_explained {
            self.explained.push(Anomaly { kind, txns, explanation: text() });
        }
    }

    fn has(&self, kind: AnomalyKind) -> bool {
        self.counts.contains_key(&kind)
    }
}

/// Builds the DSG of the committed transactions and reports every anomaly in it, then checks
/// the final stores and the workload invariants.
pub fn check(h: &History, opts: &Options) -> Report {
    check_flat(&crate::flat::Flat::from_history(h), opts)
}

/// [`check`] on a flat history.
pub fn check_flat(f: &crate::flat::Flat, opts: &Options) -> Report {
    let h = &f.to_history();
    let strict = opts.level == Level::StrictSerializable;
    let committed: Vec<&Txn> = h.txns.iter().filter(|t| t.status == Status::Committed).collect();
    let n = committed.len();
    let mut found = Found::new(opts);

    let writes = committed_writes(&committed);
    let aborted = aborted_writes(h);
    let mut edges: Vec<(u32, Edge)> = Vec::with_capacity(writes.len() * 3);
    version_order_edges(&writes, &committed, &mut edges, &mut found);
    read_edges(&writes, &aborted, &committed, &mut edges, &mut found);
    let nodes = if strict { n + real_time_edges(&committed, &mut edges) } else { n };

    // Fast path: only if some edge goes backward in commit order can there be a cycle, and
    // only then is the graph built and searched. (Time points have no commit position, so
    // strict checks always take the full path.)
    let acyclic = !strict && commit_order_is_topological(&committed, &edges);
    let g = Graph::build(nodes, if acyclic { Vec::new() } else { edges });
    report_cycles(&g, &committed, &mut found);

    let nothing_lost = check_final_stores(h, &writes, &committed, &mut found);
    let invariants_ok = check_invariants(h, &mut found);

    let serializable = !found.counts.keys().any(|k| k.breaks_serializability());
    let isolation_ok = !found.counts.keys().any(|k| opts.level.forbids(*k));
    Report {
        level: opts.level,
        isolation_ok,
        allowed: BTreeMap::new(),
        serializable,
        strict_serializable: strict.then(|| serializable && !found.has(AnomalyKind::RealTime)),
        checked_txns: h.txns.len(),
        committed: n,
        aborted: h.txns.len() - n,
        nothing_lost,
        invariants_ok,
        counts: found.counts.iter().map(|(k, &c)| (k.name(), c)).collect(),
        anomalies: found.explained,
    }
}

/// Committed writes sorted by (key, version), each marked if its transaction later installed
/// a newer version of the same key.
fn committed_writes(committed: &[&Txn]) -> Vec<W> {
    let mut writes: Vec<W> = Vec::with_capacity(committed.iter().map(|t| t.writes.len()).sum());
    for (i, t) in committed.iter().enumerate() {
        for w in &t.writes {
            let intermediate = t.writes.iter().any(|x| x.key == w.key && x.version > w.version);
            writes.push(W { key: w.key, version: w.version, txn: i as u32, intermediate });
        }
    }
    // One u128 compare per step instead of a tuple compare (pdqsort: deterministic for a
    // given input, so duplicate versions are always reported the same way).
    writes.sort_unstable_by_key(|w| ((w.key as u128) << 64) | w.version as u128);
    writes
}

/// Aborted transactions' writes as sorted (key, version, txn id), to name G1a's writer.
fn aborted_writes(h: &History) -> Vec<(u64, u64, u64)> {
    let mut aborted: Vec<(u64, u64, u64)> = h
        .txns
        .iter()
        .filter(|t| t.status == Status::Aborted)
        .flat_map(|t| t.writes.iter().map(move |w| (w.key, w.version, t.id)))
        .collect();
    aborted.sort_unstable();
    aborted
}

/// ww edges between consecutive committed versions of a key, and duplicate versions.
fn version_order_edges(writes: &[W], committed: &[&Txn], edges: &mut Vec<(u32, Edge)>, found: &mut Found) {
    for pair in writes.windows(2) {
        let (x, y) = (pair[0], pair[1]);
        if x.key != y.key {
            continue;
        }
        if x.version == y.version {
            let (tx, ty) = (committed[x.txn as usize].id, committed[y.txn as usize].id);
            found.note(AnomalyKind::DuplicateVersion, vec![tx, ty], || {
                format!("T{tx} and T{ty} both installed version {} of key {}", x.version, x.key)
            });
        }
        if x.txn != y.txn {
            edges.push((x.txn, Edge { to: y.txn, kind: Kind::Ww, key: x.key }));
        }
    }
}

/// wr and rw edges, and the read anomalies (G1a, G1b, unknown versions). Reads are sorted and
/// merge-joined with the sorted writes: one linear pass instead of two cache-missing binary
/// searches per read.
fn read_edges(
    writes: &[W],
    aborted: &[(u64, u64, u64)],
    committed: &[&Txn],
    edges: &mut Vec<(u32, Edge)>,
    found: &mut Found,
) {
    let mut reads: Vec<(u64, u64, u32)> = Vec::with_capacity(committed.iter().map(|t| t.reads.len()).sum());
    for (i, t) in committed.iter().enumerate() {
        for r in &t.reads {
            reads.push((r.key, r.version, i as u32));
        }
    }
    reads.sort_unstable_by_key(|&(k, v, _)| ((k as u128) << 64) | v as u128);
    let mut p = 0usize;
    for &(key, version, i) in &reads {
        while p < writes.len() && (writes[p].key, writes[p].version) < (key, version) {
            p += 1;
        }
        let exact = p < writes.len() && writes[p].key == key && writes[p].version == version;
        // The first committed version after the one read: its writer anti-depends on us.
        let mut q = p;
        while q < writes.len() && writes[q].key == key && writes[q].version <= version {
            q += 1;
        }
        if q < writes.len() && writes[q].key == key && writes[q].txn != i {
            edges.push((i, Edge { to: writes[q].txn, kind: Kind::Rw, key }));
        }
        if version == 0 {
            continue;
        }
        let reader = committed[i as usize];
        if !exact {
            note_read_of_missing_version(reader, key, version, aborted, found);
            continue;
        }
        let w = writes[p];
        if w.txn == i {
            continue;
        }
        if w.intermediate {
            note_intermediate_read(reader, committed[w.txn as usize], key, version, found);
        }
        edges.push((w.txn, Edge { to: i, kind: Kind::Wr, key }));
    }
}

/// G1b: `reader` read a version its writer later overwrote itself.
fn note_intermediate_read(reader: &Txn, writer: &Txn, key: u64, version: u64, found: &mut Found) {
    let last_own = writer.writes.iter().filter(|x| x.key == key).map(|x| x.version).max();
    found.note(AnomalyKind::G1b, vec![writer.id, reader.id], || {
        format!(
            "T{} read key {key} version {version}, an intermediate version: its writer T{} later installed version {}",
            reader.id,
            writer.id,
            last_own.unwrap_or(0)
        )
    });
}

/// A read of a version no committed transaction installed: G1a if an aborted one did.
fn note_read_of_missing_version(reader: &Txn, key: u64, version: u64, aborted: &[(u64, u64, u64)], found: &mut Found) {
    match aborted.binary_search_by_key(&(key, version), |&(k, v, _)| (k, v)).ok() {
        Some(ab) => {
            let writer = aborted[ab].2;
            found.note(AnomalyKind::G1a, vec![writer, reader.id], || {
                format!("T{} read key {key} version {version}, written by T{writer} which aborted", reader.id)
            })
        }
        None => found.note(AnomalyKind::UnknownVersion, vec![reader.id], || {
            format!("T{} read key {key} version {version}, which no transaction installed", reader.id)
        }),
    }
}

/// Real-time order through a chain of time points, one per start and end, after the
/// transactions' nodes: O(n) edges instead of O(n^2). Returns the number of points.
fn real_time_edges(committed: &[&Txn], edges: &mut Vec<(u32, Edge)>) -> usize {
    let n = committed.len();
    // Point p: (time, is_end, txn). Starts sort before ends at equal times, so
    // end_i == start_j does not order Ti before Tj.
    let mut points: Vec<(u64, bool, u32)> = Vec::with_capacity(2 * n);
    for (i, t) in committed.iter().enumerate() {
        points.push((t.start_ns, false, i as u32));
        points.push((t.end_ns, true, i as u32));
    }
    points.sort_unstable();
    for (k, &(_, is_end, txn)) in points.iter().enumerate() {
        let p = (n + k) as u32;
        if k + 1 < points.len() {
            edges.push((p, Edge { to: p + 1, kind: Kind::Rt, key: 0 }));
        }
        if is_end {
            edges.push((txn, Edge { to: p, kind: Kind::Rt, key: 0 }));
        } else {
            edges.push((p, Edge { to: txn, kind: Kind::Rt, key: 0 }));
        }
    }
    points.len()
}

/// Whether commit order (end time, then id) is a topological order of the graph, i.e. every
/// edge goes forward in it: then the DSG is acyclic, found in one pass over the edges.
fn commit_order_is_topological(committed: &[&Txn], edges: &[(u32, Edge)]) -> bool {
    let n = committed.len();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by_key(|&i| (committed[i as usize].end_ns, committed[i as usize].id));
    let mut pos = vec![0u32; n];
    for (p, &i) in order.iter().enumerate() {
        pos[i as usize] = p as u32;
    }
    edges.iter().all(|(u, e)| pos[*u as usize] < pos[e.to as usize])
}

/// Classifies and explains the most severe cycle of every strongly connected component with
/// two or more transactions, each reported once, by its smallest member.
fn report_cycles(g: &Graph, committed: &[&Txn], found: &mut Found) {
    let n = committed.len();
    let (comp, ncomp) = tarjan(g, |_: &Edge| true, |_| true);
    let mut size = vec![0u32; ncomp as usize];
    for u in 0..n {
        size[comp[u] as usize] += 1;
    }
    let mut seen = vec![false; ncomp as usize];
    for root in 0..n as u32 {
        let c = comp[root as usize];
        if size[c as usize] < 2 || seen[c as usize] {
            continue;
        }
        seen[c as usize] = true;
        let members: Vec<u32> = (0..n as u32).filter(|&u| comp[u as usize] == c).collect();
        let (kind, cycle) = classify(g, &comp, &members);
        let cycle = cycle.expect("every node of a strongly connected component is on a cycle");
        let ids: Vec<u64> =
            cycle.iter().filter(|(u, _)| (*u as usize) < n).map(|(u, _)| committed[*u as usize].id).collect();
        found.note(kind, ids, || explain(kind, &cycle, committed, n));
    }
}

/// Nothing lost: each replica's final version of each key is the last committed write.
/// `None` when the history has no final store to compare.
fn check_final_stores(h: &History, writes: &[W], committed: &[&Txn], found: &mut Found) -> Option<bool> {
    if h.finals.is_empty() && !h.meta.contains_key("replicas") {
        return None;
    }
    // The last committed write of each key, (version, writer id): the end of its run in the
    // sorted writes.
    let last: BTreeMap<u64, (u64, u64)> = writes
        .iter()
        .enumerate()
        .filter(|(p, w)| writes.get(p + 1).is_none_or(|x| x.key != w.key))
        .map(|(_, w)| (w.key, (w.version, committed[w.txn as usize].id)))
        .collect();
    let mut ok = true;
    for (replica, keys) in &final_stores(h) {
        for (&key, &(version, writer)) in &last {
            let got = keys.get(&key).copied();
            if got != Some(version) {
                ok = false;
                found.note(AnomalyKind::LostWrite, vec![writer], || match got {
                    Some(v) => format!(
                        "replica {replica} holds version {v} of key {key}, but the last committed write is version {version} by T{writer}"
                    ),
                    None => format!(
                        "replica {replica} has no key {key}, but T{writer} committed version {version} of it"
                    ),
                });
            }
        }
        for (&key, &v) in keys {
            if v != 0 && !last.contains_key(&key) {
                ok = false;
                found.note(AnomalyKind::LostWrite, vec![], || {
                    format!("replica {replica} holds version {v} of key {key}, which no committed transaction wrote")
                });
            }
        }
    }
    Some(ok)
}

/// Each replica's final store, key -> version, including replicas the history declares in
/// `meta.replicas` but that list no key (they lost every write).
fn final_stores(h: &History) -> BTreeMap<&str, BTreeMap<u64, u64>> {
    let mut replicas: BTreeMap<&str, BTreeMap<u64, u64>> = BTreeMap::new();
    if let Some(serde_json::Value::Array(names)) = h.meta.get("replicas") {
        for name in names.iter().filter_map(|v| v.as_str()) {
            replicas.entry(name).or_default();
        }
    }
    for f in &h.finals {
        replicas.entry(f.replica.as_str()).or_default().insert(f.key, f.version);
    }
    replicas
}

/// Whether every workload invariant holds; each one that does not is an anomaly.
fn check_invariants(h: &History, found: &mut Found) -> bool {
    let mut ok = true;
    for inv in h.invariants.iter().filter(|inv| inv.expected != inv.actual) {
        ok = false;
        found.note(AnomalyKind::Invariant, vec![], || {
            format!("invariant \"{}\" does not hold: expected {}, found {}", inv.name, inv.expected, inv.actual)
        });
    }
    ok
}

/// The most severe cycle class present in a component, and a shortest such cycle.
fn classify(g: &Graph, comp: &[u32], members: &[u32]) -> (AnomalyKind, Option<Vec<(u32, Edge)>>) {
    let in_comp = |c: u32| move |u: u32| comp[u as usize] == c;
    let c = comp[members[0] as usize];
    let txn_edge = |e: &Edge| e.kind != Kind::Rt;
    // G0, then G1c: a sub-component of ww (then ww+wr) edges with two or more transactions.
    for (kind, allowed) in [
        (AnomalyKind::G0, &(|e: &Edge| e.kind == Kind::Ww) as &dyn Fn(&Edge) -> bool),
        (AnomalyKind::G1c, &|e: &Edge| matches!(e.kind, Kind::Ww | Kind::Wr)),
    ] {
        let (sub, k) = tarjan(g, allowed, in_comp(c));
        let mut sizes = vec![0u32; k as usize];
        for &u in members {
            if sub[u as usize] != u32::MAX {
                sizes[sub[u as usize] as usize] += 1;
            }
        }
        if let Some(&u) = members.iter().find(|&&u| sub[u as usize] != u32::MAX && sizes[sub[u as usize] as usize] > 1)
        {
            return (kind, shortest_cycle(g, u, allowed, &sub));
        }
    }
    // G-single: one rw edge closed by a ww/wr path.
    let dep = |e: &Edge| matches!(e.kind, Kind::Ww | Kind::Wr);
    let mut best: Option<Vec<(u32, Edge)>> = None;
    for &u in members.iter().take(256) {
        for e in g.out(u).iter().filter(|e| e.kind == Kind::Rw && comp[e.to as usize] == c) {
            if let Some(p) = path(g, e.to, u, &dep, comp) {
                let mut cyc = vec![(u, *e)];
                cyc.extend(p);
                if best.as_ref().is_none_or(|b| cyc.len() < b.len()) {
                    best = Some(cyc);
                }
            }
        }
        if best.as_ref().is_some_and(|b| b.len() <= 2) {
            break;
        }
    }
    if best.is_some() {
        return (AnomalyKind::GSingle, best);
    }
    // G2 over transaction edges only; otherwise the cycle needs real-time order.
    let (sub, _) = tarjan(g, txn_edge, in_comp(c));
    let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
    for &u in members {
        if sub[u as usize] != u32::MAX {
            *counts.entry(sub[u as usize]).or_default() += 1;
        }
    }
    if let Some(&u) = members.iter().find(|&&u| counts.get(&sub[u as usize]).is_some_and(|&k| k > 1)) {
        return (AnomalyKind::G2, shortest_cycle(g, u, &txn_edge, &sub));
    }
    (AnomalyKind::RealTime, shortest_cycle(g, members[0], &|_| true, comp))
}

fn explain(kind: AnomalyKind, cycle: &[(u32, Edge)], committed: &[&Txn], n: usize) -> String {
    let name = |u: u32| {
        let t = committed[u as usize];
        if t.label.is_empty() {
            format!("T{}", t.id)
        } else {
            format!("T{} ({})", t.id, t.label)
        }
    };
    let mut s =
        format!("{} cycle of {} transactions:", kind.name(), cycle.iter().filter(|(u, _)| (*u as usize) < n).count());
    // Collapse runs through time points into one real-time step.
    let mut i = 0;
    while i < cycle.len() {
        let (u, e) = cycle[i];
        if (u as usize) >= n {
            i += 1;
            continue;
        }
        if e.kind == Kind::Rt {
            let mut j = i;
            while j < cycle.len() && (cycle[j].1.to as usize) >= n {
                j += 1;
            }
            let v = if j < cycle.len() { cycle[j].1.to } else { cycle[0].0 };
            let _ = write!(
                s,
                "\n  {} ended (at {} ns) before {} started (at {} ns), so it must come first in real time",
                name(u),
                committed[u as usize].end_ns,
                name(v),
                committed[v as usize].start_ns
            );
            i = j + 1;
            continue;
        }
        let v = e.to;
        let (tu, tv) = (committed[u as usize], committed[v as usize]);
        let wrote = |t: &Txn| t.writes.iter().filter(|x| x.key == e.key).map(|x| x.version).max().unwrap_or(0);
        let read = |t: &Txn| t.reads.iter().filter(|x| x.key == e.key).map(|x| x.version).max().unwrap_or(0);
        let _ = match e.kind {
            Kind::Ww => write!(
                s,
                "\n  {} installed key {} version {}, and {} installed the next version {} (ww)",
                name(u),
                e.key,
                wrote(tu),
                name(v),
                wrote(tv)
            ),
            Kind::Wr => {
                write!(s, "\n  {} installed key {} version {}, which {} read (wr)", name(u), e.key, read(tv), name(v))
            }
            Kind::Rw => write!(
                s,
                "\n  {} read key {} version {}, and {} installed the next version {} (rw)",
                name(u),
                e.key,
                read(tu),
                name(v),
                wrote(tv)
            ),
            Kind::Rt => Ok(()),
        };
        i += 1;
    }
    let first = cycle.first().map(|(u, _)| name(*u)).unwrap_or_default();
    let _ = write!(s, "\n  so {first} must both precede and follow itself: no serial order exists.");
    s
}
