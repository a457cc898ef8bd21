//! The checker: builds Adya's direct serialization graph (DSG) of the committed transactions,
//! finds its strongly connected components with Tarjan's algorithm (iterative, linear time),
//! classifies every component by its most severe cycle, and explains a shortest such cycle in
//! plain words, after Elle. It also reports the non-cycle anomalies G1a (aborted read) and G1b
//! (intermediate read), version integrity (reads of versions nobody installed, two writers of
//! one version, versions skipped), the final store against the committed writes (nothing lost,
//! on every replica), and workload invariants. What counts against a history depends on the
//! isolation level it is judged at ([`Level::forbids`]).
//!
//! Edges, for committed Ti != Tj and the per-key version order of committed writes:
//! - ww: Tj installs the version right after Ti's;
//! - wr: Tj reads a version Ti installed (item), or Tj's scan saw a version Ti installed of a
//!   key in its range (predicate);
//! - rw: Ti reads a version and Tj installs the next one (item anti-dependency), or Ti's scan
//!   saw a version of a key in its range and Tj installed the next (predicate);
//! - rt (strict serializability only): Ti ended before Tj started, encoded through a chain of
//!   time points so it costs O(n) edges instead of O(n^2); and a coroutine's transactions in
//!   the order it ran them (its next may start in the nanosecond its previous ended).
//!
//! Adya's predicate edges go to every later (earlier) installer of a key in the range; the
//! version chain of ww edges makes edges to the next (from the observed) version enough: every
//! cycle through a farther one has a counterpart with the same anti-dependency edges.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::flat::Flat;
use crate::history::{History, Status};
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

    /// Cycle classes, most severe first: a component is named by the first it shows.
    pub const CYCLES: [AnomalyKind; 5] =
        [AnomalyKind::G0, AnomalyKind::G1c, AnomalyKind::GSingle, AnomalyKind::G2Item, AnomalyKind::G2];
}

#[derive(Clone, Debug, Serialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// Transaction ids involved (the cycle, in order, for cycles).
    pub txns: Vec<u64>,
    pub explanation: String,
    /// The level judged at allows it (reported, not counted against the history).
    pub allowed: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The level the history is judged at (strict serializability adds real-time edges).
    pub level: Level,
    /// Stop explaining after this many forbidden anomalies (all are still counted).
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
    /// `None` unless judged at strict serializability.
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
    Ww,
    Wr,
    Rw,
    Rt,
    /// Predicate read-dependency.
    WrP,
    /// Predicate anti-dependency.
    RwP,
}

impl Kind {
    fn dep(self) -> bool {
        matches!(self, Kind::Ww | Kind::Wr | Kind::WrP)
    }
    fn anti(self) -> bool {
        matches!(self, Kind::Rw | Kind::RwP)
    }
    fn txn(self) -> bool {
        self != Kind::Rt
    }
}

/// An edge and the key that created it (16 bytes: the graph of ten million transactions is
/// scanned several times). The versions an explanation names are looked up in the two
/// transactions' accesses.
#[derive(Copy, Clone, Debug)]
struct Edge {
    to: u32,
    kind: Kind,
    key: u64,
}

/// A committed write in its key's group.
#[derive(Copy, Clone)]
struct W {
    version: u64,
    /// Node (index into the committed transactions).
    txn: u32,
    /// The same transaction later installed a newer version of this key.
    intermediate: bool,
}

/// Committed writes grouped by key (dense key ids) and sorted by version within a group: a
/// counting sort by key instead of one sort of every write, linear in the writes.
struct Writes {
    dense: FxHashMap<u64, u32>,
    keys: Vec<u64>,
    start: Vec<u64>,
    list: Vec<W>,
}

impl Writes {
    fn build(f: &Flat, committed: &[u32]) -> Writes {
        let mut dense: FxHashMap<u64, u32> = FxHashMap::default();
        let mut keys = Vec::new();
        let total: usize = committed.iter().map(|&r| f.txns[r as usize].writes as usize).sum();
        let mut of = Vec::with_capacity(total);
        let mut count: Vec<u64> = Vec::new();
        for &r in committed {
            for w in f.writes(r as usize) {
                let d = *dense.entry(w.key).or_insert_with(|| {
                    keys.push(w.key);
                    count.push(0);
                    keys.len() as u32 - 1
                });
                count[d as usize] += 1;
                of.push(d);
            }
        }
        let mut start = vec![0u64; keys.len() + 1];
        for d in 0..keys.len() {
            start[d + 1] = start[d] + count[d];
        }
        let mut fill = start.clone();
        let mut list = vec![W { version: 0, txn: 0, intermediate: false }; total];
        let mut k = 0;
        for (i, &r) in committed.iter().enumerate() {
            let ws = f.writes(r as usize);
            for w in ws {
                let d = of[k] as usize;
                k += 1;
                let intermediate = ws.iter().any(|x| x.key == w.key && x.version > w.version);
                list[fill[d] as usize] = W { version: w.version, txn: i as u32, intermediate };
                fill[d] += 1;
            }
        }
        for d in 0..keys.len() {
            let g = &mut list[start[d] as usize..start[d + 1] as usize];
            // Transactions mostly come in commit order, so groups mostly arrive sorted.
            if !g.is_sorted_by_key(|w| (w.version, w.txn)) {
                g.sort_unstable_by_key(|w| (w.version, w.txn));
            }
        }
        Writes { dense, keys, start, list }
    }

    fn group(&self, d: u32) -> &[W] {
        &self.list[self.start[d as usize] as usize..self.start[d as usize + 1] as usize]
    }

    fn of_key(&self, key: u64) -> Option<(u32, &[W])> {
        self.dense.get(&key).map(|&d| (d, self.group(d)))
    }

    /// Written keys in key order, for range scans.
    fn sorted_keys(&self) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self.keys.iter().enumerate().map(|(d, &k)| (k, d as u32)).collect();
        v.sort_unstable();
        v
    }
}

/// Committed item reads grouped like the writes of their key, (version, node) sorted within a
/// group; reads of keys nobody wrote apart, as (node, key, version).
struct Reads {
    start: Vec<u64>,
    list: Vec<(u64, u32)>,
    unwritten: Vec<(u32, u64, u64)>,
}

impl Reads {
    fn build(t: &Txns, writes: &Writes) -> Reads {
        let k = writes.keys.len();
        let mut count = vec![0u64; k + 1];
        let mut of: Vec<u32> = Vec::new();
        let mut unwritten = Vec::new();
        for (u, &row) in t.rows.iter().enumerate() {
            for r in t.f.reads(row as usize) {
                match writes.dense.get(&r.key) {
                    Some(&d) => {
                        count[d as usize + 1] += 1;
                        of.push(d);
                    }
                    None => {
                        unwritten.push((u as u32, r.key, r.version));
                        of.push(NONE);
                    }
                }
            }
        }
        for d in 0..k {
            count[d + 1] += count[d];
        }
        let start = count;
        let mut fill = start.clone();
        let mut list = vec![(0u64, 0u32); start[k] as usize];
        let mut i = 0;
        for (u, &row) in t.rows.iter().enumerate() {
            for r in t.f.reads(row as usize) {
                let d = of[i];
                i += 1;
                if d != NONE {
                    list[fill[d as usize] as usize] = (r.version, u as u32);
                    fill[d as usize] += 1;
                }
            }
        }
        for d in 0..k {
            let g = &mut list[start[d] as usize..start[d + 1] as usize];
            if !g.is_sorted() {
                g.sort_unstable();
            }
        }
        Reads { start, list, unwritten }
    }

    fn group(&self, d: u32) -> &[(u64, u32)] {
        &self.list[self.start[d as usize] as usize..self.start[d as usize + 1] as usize]
    }
}

/// The writers of exactly `version` and of the first version after it, in a version-sorted
/// group `g` that starts at the first version >= `version` (a linear walk: runs are short).
fn runs(g: &[W], version: u64) -> (usize, usize, usize) {
    let run_end = |a: usize| a + g[a..].iter().take_while(|w| w.version == g[a].version).count();
    let q = g.iter().take_while(|w| w.version == version).count();
    let mut a = q;
    let mut b = if a < g.len() { run_end(a) } else { a };
    // An intermediate version is not in the version order (Adya): the anti-dependency goes
    // to the next version another transaction installed.
    if q == 1 {
        while a < b && g[a..b].iter().all(|x| x.txn == g[0].txn) {
            a = b;
            b = if a < g.len() { run_end(a) } else { a };
        }
    }
    (q, a, b)
}

struct Graph {
    /// CSR: edges of node `u` are `edges[start[u]..start[u+1]]`.
    start: Vec<u64>,
    edges: Vec<Edge>,
    nodes: usize,
}

impl Graph {
    /// Counting sort by source into compressed rows: linear, and stable, so each node's
    /// edges keep the order they were found in (deterministic explanations).
    fn build(n: usize, list: Vec<(u32, Edge)>) -> Graph {
        let mut start = vec![0u64; n + 1];
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

const NONE: u32 = u32::MAX;

/// Scratch arrays sized to the graph, reused by every search so a search costs only what it
/// touches: a history with a million small components stays linear.
struct Scratch {
    index: Vec<u32>,
    low: Vec<u32>,
    comp: Vec<u32>,
    on_stack: Vec<bool>,
    stack: Vec<u32>,
    calls: Vec<(u32, u64)>,
    /// BFS: parent edge of each node reached, and the search that reached it.
    parent: Vec<(u32, Edge)>,
    seen: Vec<u32>,
    stamp: u32,
}

impl Scratch {
    fn new(nodes: usize) -> Scratch {
        let dummy = Edge { to: 0, kind: Kind::Ww, key: 0 };
        Scratch {
            index: vec![NONE; nodes],
            low: vec![0; nodes],
            comp: vec![NONE; nodes],
            on_stack: vec![false; nodes],
            stack: Vec::new(),
            calls: Vec::new(),
            parent: vec![(0, dummy); nodes],
            seen: vec![0; nodes],
            stamp: 0,
        }
    }

    /// Tarjan's SCC, iterative, from `roots` over `allowed` edges whose head is `within`.
    /// Component ids start at 0 for each call and come in reverse topological order: a
    /// component reachable from another has the smaller id. Returns how many; `comp[u]` is
    /// set for every node visited, and must be cleared with [`Scratch::clear`] before the
    /// next call that may visit the same nodes.
    fn tarjan(
        &mut self,
        g: &Graph,
        roots: &[u32],
        allowed: impl Fn(&Edge) -> bool,
        within: impl Fn(u32) -> bool,
    ) -> u32 {
        let (mut next, mut ncomp) = (0u32, 0u32);
        for &root in roots {
            if self.index[root as usize] != NONE {
                continue;
            }
            self.calls.push((root, g.start[root as usize]));
            self.index[root as usize] = next;
            self.low[root as usize] = next;
            next += 1;
            self.stack.push(root);
            self.on_stack[root as usize] = true;
            while let Some(&mut (u, ref mut pos)) = self.calls.last_mut() {
                let end = g.start[u as usize + 1];
                let mut descended = false;
                while *pos < end {
                    let e = g.edges[*pos as usize];
                    *pos += 1;
                    if !allowed(&e) || !within(e.to) {
                        continue;
                    }
                    let v = e.to as usize;
                    if self.index[v] == NONE {
                        self.index[v] = next;
                        self.low[v] = next;
                        next += 1;
                        self.stack.push(e.to);
                        self.on_stack[v] = true;
                        self.calls.push((e.to, g.start[v]));
                        descended = true;
                        break;
                    } else if self.on_stack[v] {
                        self.low[u as usize] = self.low[u as usize].min(self.index[v]);
                    }
                }
                if descended {
                    continue;
                }
                self.calls.pop();
                if let Some(&(p, _)) = self.calls.last() {
                    self.low[p as usize] = self.low[p as usize].min(self.low[u as usize]);
                }
                if self.low[u as usize] == self.index[u as usize] {
                    loop {
                        let w = self.stack.pop().expect("scc stack");
                        self.on_stack[w as usize] = false;
                        self.comp[w as usize] = ncomp;
                        if w == u {
                            break;
                        }
                    }
                    ncomp += 1;
                }
            }
        }
        ncomp
    }

    fn clear(&mut self, nodes: &[u32]) {
        for &u in nodes {
            self.index[u as usize] = NONE;
            self.comp[u as usize] = NONE;
        }
    }

    /// Shortest path from `from` to `to` (a cycle when they are equal) over `allowed` edges
    /// whose head is `within`: the edges in order.
    fn bfs(
        &mut self,
        g: &Graph,
        from: u32,
        to: u32,
        allowed: impl Fn(&Edge) -> bool,
        within: impl Fn(u32) -> bool,
    ) -> Option<Vec<(u32, Edge)>> {
        self.stamp += 1;
        let stamp = self.stamp;
        let mut queue = std::collections::VecDeque::from([from]);
        while let Some(u) = queue.pop_front() {
            for e in g.out(u) {
                if !allowed(e) || !within(e.to) {
                    continue;
                }
                if e.to == to {
                    let mut path = vec![(u, *e)];
                    let mut x = u;
                    while x != from {
                        let (p, pe) = self.parent[x as usize];
                        path.push((p, pe));
                        x = p;
                    }
                    path.reverse();
                    return Some(path);
                }
                if e.to != from && self.seen[e.to as usize] != stamp {
                    self.seen[e.to as usize] = stamp;
                    self.parent[e.to as usize] = (u, *e);
                    queue.push_back(e.to);
                }
            }
        }
        None
    }
}

/// Every anomaly found is counted, as forbidden or allowed at the level; the first
/// `max_explained` forbidden ones (and a few allowed ones) are kept with an explanation.
struct Found {
    level: Level,
    max_explained: usize,
    counts: BTreeMap<AnomalyKind, usize>,
    allowed: BTreeMap<AnomalyKind, usize>,
    explained: Vec<Anomaly>,
    explained_allowed: usize,
}

const MAX_EXPLAINED_ALLOWED: usize = 3;

impl Found {
    fn new(opts: &Options) -> Self {
        let max_explained = if opts.max_explained == 0 { 20 } else { opts.max_explained };
        Found {
            level: opts.level,
            max_explained,
            counts: BTreeMap::new(),
            allowed: BTreeMap::new(),
            explained: Vec::new(),
            explained_allowed: 0,
        }
    }

    /// Counts an anomaly; `text` is only built for the ones explained.
    fn note(&mut self, kind: AnomalyKind, txns: Vec<u64>, text: impl FnOnce() -> String) {
        let allowed = !self.level.forbids(kind);
        if allowed {
            *self.allowed.entry(kind).or_default() += 1;
            if self.explained_allowed < MAX_EXPLAINED_ALLOWED {
                self.explained_allowed += 1;
                let explanation = format!("{} (allowed at {})", text(), self.level);
                self.explained.push(Anomaly { kind, txns, explanation, allowed });
            }
            return;
        }
        *self.counts.entry(kind).or_default() += 1;
        if self.explained.len() - self.explained_allowed < self.max_explained {
            self.explained.push(Anomaly { kind, txns, explanation: text(), allowed });
        }
    }

    fn any(&self, pred: impl Fn(AnomalyKind) -> bool) -> bool {
        self.counts.keys().chain(self.allowed.keys()).any(|&k| pred(k))
    }
}

/// Builds the DSG of the committed transactions and reports every anomaly in it, then checks
/// the final stores and the workload invariants.
pub fn check(h: &History, opts: &Options) -> Report {
    check_flat(&Flat::from_history(h), opts)
}

/// The committed transactions and their commit order.
struct Txns<'a> {
    f: &'a Flat,
    /// Row index of each node.
    rows: Vec<u32>,
}

impl Txns<'_> {
    fn id(&self, u: u32) -> u64 {
        self.f.txns[self.rows[u as usize] as usize].id
    }
    fn name(&self, u: u32) -> String {
        let r = self.rows[u as usize] as usize;
        let label = self.f.label(r);
        if label.is_empty() {
            format!("T{}", self.f.txns[r].id)
        } else {
            format!("T{} ({label})", self.f.txns[r].id)
        }
    }
}

/// [`check`] on a flat history.
pub fn check_flat(f: &Flat, opts: &Options) -> Report {
    let strict = opts.level == Level::StrictSerializable;
    let rows: Vec<u32> = (0..f.txns.len() as u32).filter(|&r| f.txns[r as usize].status == Status::Committed).collect();
    let n = rows.len();
    let t = Txns { f, rows };
    let mut found = Found::new(opts);
    let pos = commit_positions(&t);
    // Fast path: replay commit order (end time, then id) keeping each key's latest version.
    // If every read sees the latest and every write installs the next, commit order is a
    // serial order of the whole graph (real-time edges always go forward in it too), so no
    // anomaly is possible and nothing else is built.
    let last = match f.preds.is_empty().then(|| replay_commit_order(&t, pos.as_deref())).flatten() {
        Some(last) => last,
        None => full_check(&t, pos.as_deref(), strict, &mut found),
    };
    let nothing_lost = check_final_stores(&t, &last, &mut found);
    let invariants_ok = check_invariants(f, &mut found);
    let serializable = !found.any(|k| k.breaks_serializability());
    Report {
        level: opts.level,
        isolation_ok: found.counts.is_empty(),
        serializable,
        strict_serializable: strict.then(|| serializable && !found.any(|k| k == AnomalyKind::RealTime)),
        checked_txns: f.txns.len(),
        committed: n,
        aborted: f.txns.len() - n,
        nothing_lost,
        invariants_ok,
        counts: found.counts.iter().map(|(k, &c)| (k.name(), c)).collect(),
        allowed: found.allowed.iter().map(|(k, &c)| (k.name(), c)).collect(),
        anomalies: found.explained,
    }
}

/// The last committed write of each key, (key, (version, writer id)), ascending by key.
/// A sorted vector, not a map: a large run's finals are merged with it in one pass.
type LastWrites = Vec<(u64, (u64, u64))>;

/// Checks the graph the long way: every non-cycle anomaly, then, if some edge goes backward
/// in commit order, the graph and its components. Returns the last committed write of each
/// key, (version, writer id).
fn full_check(t: &Txns, pos: Option<&[u32]>, strict: bool, found: &mut Found) -> LastWrites {
    let n = t.rows.len();
    let writes = Writes::build(t.f, &t.rows);
    let aborted = aborted_writes(t.f);
    let forward = |u: u32, v: u32| match pos {
        None => u < v,
        Some(p) => p[u as usize] < p[v as usize],
    };
    let at = |u: u32| pos.map_or(u, |p| p[u as usize]) as usize;
    // Every cycle has an edge going backward in commit order, and every transaction on it
    // lies within the span of one of its backward edges (the way down from the cycle's last
    // transaction to its first crosses each position in between by a backward edge). So only
    // the transactions those spans cover are put in the graph.
    let mut cover = vec![0i64; n + 1];
    let mut backward = false;
    let mut missing_reads = Vec::new();
    let reads = Reads::build(t, &writes);
    scan(
        t,
        &writes,
        &reads,
        &mut |u, e| {
            if !forward(u, e.to) {
                backward = true;
                cover[at(e.to)] += 1;
                cover[at(u) + 1] -= 1;
            }
        },
        Some((&mut *found, &aborted, &mut missing_reads)),
    );
    note_skipped_versions(t, &writes, &aborted, &missing_reads, found);
    if backward {
        let mut depth = 0;
        let mut covered_at = vec![false; n];
        for (p, c) in covered_at.iter_mut().enumerate() {
            depth += cover[p];
            *c = depth > 0;
        }
        let covered: Vec<u32> = (0..n as u32).filter(|&u| covered_at[at(u)]).collect();
        let inside = |u: u32| covered_at[at(u)];
        let mut edges: Vec<(u32, Edge)> = Vec::new();
        scan(
            t,
            &writes,
            &reads,
            &mut |u, e| {
                if inside(u) && inside(e.to) {
                    edges.push((u, e))
                }
            },
            None,
        );
        let nodes = if strict { n + real_time_edges(t, &covered, &mut edges) } else { n };
        let g = Graph::build(nodes, edges);
        report_cycles(&g, t, &covered, strict, found);
    }
    let mut last = Vec::with_capacity(writes.keys.len());
    for d in 0..writes.keys.len() as u32 {
        if let Some(w) = writes.group(d).last() {
            last.push((writes.keys[d as usize], (w.version, t.id(w.txn))));
        }
    }
    last.sort_unstable_by_key(|&(key, _)| key);
    last
}

/// Replays the committed transactions in commit order: `None` as soon as a read does not see
/// its key's latest version or a write does not install the next one (then the long way
/// decides); otherwise the last committed write of each key.
fn replay_commit_order(t: &Txns, pos: Option<&[u32]>) -> Option<LastWrites> {
    let order: Vec<u32> = match pos {
        None => Vec::new(),
        Some(p) => {
            let mut o = vec![0u32; p.len()];
            for (u, &q) in p.iter().enumerate() {
                o[q as usize] = u as u32;
            }
            o
        }
    };
    let mut latest: FxHashMap<u64, (u64, u32)> = FxHashMap::default();
    let node = |k: usize| if pos.is_none() { k as u32 } else { order[k] };
    for u in (0..t.rows.len()).map(node) {
        let row = t.rows[u as usize] as usize;
        for r in t.f.reads(row) {
            if latest.get(&r.key).map_or(0, |l| l.0) != r.version {
                return None;
            }
        }
        for w in t.f.writes(row) {
            let l = latest.entry(w.key).or_insert((0, u));
            if w.version != l.0 + 1 {
                return None;
            }
            *l = (w.version, u);
        }
    }
    let mut last: LastWrites = latest.into_iter().map(|(k, (v, u))| (k, (v, t.id(u)))).collect();
    last.sort_unstable_by_key(|&(key, _)| key);
    Some(last)
}

/// Each node's position in commit order (end time, then id); `None` when the nodes already
/// come in that order, as recorded histories do.
fn commit_positions(t: &Txns) -> Option<Vec<u32>> {
    let key = |u: usize| {
        let r = &t.f.txns[t.rows[u] as usize];
        (r.end_ns, r.id)
    };
    if (1..t.rows.len()).all(|u| key(u - 1) < key(u)) {
        return None;
    }
    let mut order: Vec<u32> = (0..t.rows.len() as u32).collect();
    order.sort_unstable_by_key(|&u| key(u as usize));
    let mut pos = vec![0u32; order.len()];
    for (p, &u) in order.iter().enumerate() {
        pos[u as usize] = p as u32;
    }
    Some(pos)
}

/// Aborted transactions' writes as sorted (key, version, txn id), to name G1a's writer.
fn aborted_writes(f: &Flat) -> Vec<(u64, u64, u64)> {
    let mut v: Vec<(u64, u64, u64)> = Vec::new();
    for (i, r) in f.txns.iter().enumerate() {
        if r.status == Status::Aborted {
            v.extend(f.writes(i).iter().map(|w| (w.key, w.version, r.id)));
        }
    }
    v.sort_unstable();
    v
}

type Notes<'a> = Option<(&'a mut Found, &'a [(u64, u64, u64)], &'a mut Vec<(u64, u64)>)>;

/// Generates every edge of the DSG into `emit`. With `notes`, also reports the version and
/// read anomalies (duplicate versions, G1a, G1b, reads of versions nobody installed) and
/// collects the reads of missing versions.
fn scan(t: &Txns, writes: &Writes, reads: &Reads, emit: &mut impl FnMut(u32, Edge), mut notes: Notes) {
    let f = t.f;
    // ww: every writer of a version to every writer of the next one. Two writers of one
    // version are a duplicate, with no edge invented between them.
    for d in 0..writes.keys.len() as u32 {
        let key = writes.keys[d as usize];
        let g = writes.group(d);
        let mut i = 0;
        while i < g.len() {
            let mut j = i + 1;
            while j < g.len() && g[j].version == g[i].version {
                if let Some((found, _, _)) = notes.as_mut() {
                    if g[j].txn != g[i].txn {
                        let (a, b) = (t.id(g[i].txn), t.id(g[j].txn));
                        let v = g[i].version;
                        found.note(AnomalyKind::DuplicateVersion, vec![a, b], || {
                            format!("T{a} and T{b} both installed version {v} of key {key} (a lost update)")
                        });
                    }
                }
                j += 1;
            }
            let mut k = j;
            while k < g.len() && g[k].version == g[j].version {
                k += 1;
            }
            for x in &g[i..j] {
                for y in &g[j..k] {
                    if x.txn != y.txn {
                        emit(x.txn, Edge { to: y.txn, kind: Kind::Ww, key });
                    }
                }
            }
            i = j;
        }
    }
    // Item reads: wr from the writer of the version read, rw to the writers of the next.
    // Key by key, reads in version order, so each key's writes are walked once while in cache.
    for d in 0..writes.keys.len() as u32 {
        let (key, g) = (writes.keys[d as usize], writes.group(d));
        let mut p = 0;
        for &(version, u) in reads.group(d) {
            while p < g.len() && g[p].version < version {
                p += 1;
            }
            read_edges(t, Some(&g[p..]), u, key, version, (Kind::Wr, Kind::Rw), emit, &mut notes);
        }
    }
    for &(u, key, version) in &reads.unwritten {
        read_edges(t, None, u, key, version, (Kind::Wr, Kind::Rw), emit, &mut notes);
    }
    // Predicate reads: the same for every written key of the range, at the version the scan
    // saw (0 when its version set does not list the key).
    if f.preds.is_empty() {
        return;
    }
    let sorted = writes.sorted_keys();
    let mut node_of_row = FxHashMap::default();
    for (u, &row) in t.rows.iter().enumerate() {
        if !f.preds_of(row as usize).is_empty() {
            node_of_row.insert(row, u as u32);
        }
    }
    for p in &f.preds {
        let Some(&u) = node_of_row.get(&p.txn) else { continue };
        let mut vset = f.vset_of(p).to_vec();
        vset.sort_unstable();
        let a = sorted.partition_point(|&(k, _)| k < p.lo);
        for &(key, _) in sorted[a..].iter().take_while(|&&(k, _)| k <= p.hi) {
            let seen = vset.binary_search_by_key(&key, |x| x.key).map(|i| vset[i].version).unwrap_or(0);
            let g = writes.of_key(key).map(|(_, g)| &g[g.partition_point(|w| w.version < seen)..]);
            read_edges(t, g, u, key, seen, (Kind::WrP, Kind::RwP), emit, &mut None);
        }
        // Listed versions of keys nobody wrote are reads of missing versions.
        for x in vset.iter().filter(|x| x.version != 0 && writes.of_key(x.key).is_none()) {
            read_edges(t, None, u, x.key, x.version, (Kind::WrP, Kind::RwP), emit, &mut notes);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn read_edges(
    t: &Txns,
    group: Option<&[W]>,
    u: u32,
    key: u64,
    version: u64,
    (wr, rw): (Kind, Kind),
    emit: &mut impl FnMut(u32, Edge),
    notes: &mut Notes,
) {
    let Some(g) = group else {
        if version != 0 {
            if let Some((found, aborted, missing)) = notes.as_mut() {
                missing.push((key, version));
                note_read_of_missing_version(t, u, key, version, aborted, found);
            }
        }
        return;
    };
    let (q, a, b) = runs(g, version);
    let (exact, next) = (&g[..q], &g[a..b]);
    for w in next {
        if w.txn != u {
            emit(u, Edge { to: w.txn, kind: rw, key });
        }
    }
    if version == 0 {
        return;
    }
    if exact.is_empty() {
        if let Some((found, aborted, missing)) = notes.as_mut() {
            missing.push((key, version));
            note_read_of_missing_version(t, u, key, version, aborted, found);
        }
        return;
    }
    // A version two transactions claim: which one was read is unknown, so no wr edge.
    if let [w] = exact {
        if w.txn != u {
            if w.intermediate {
                if let Some((found, _, _)) = notes.as_mut() {
                    note_intermediate_read(t, u, w.txn, key, version, found);
                }
            }
            emit(w.txn, Edge { to: u, kind: wr, key });
        }
    }
}

/// G1b: node `reader` read a version its writer later overwrote itself.
fn note_intermediate_read(t: &Txns, reader: u32, writer: u32, key: u64, version: u64, found: &mut Found) {
    let row = t.rows[writer as usize] as usize;
    let last_own = t.f.writes(row).iter().filter(|x| x.key == key).map(|x| x.version).max().unwrap_or(0);
    let (w, r) = (t.id(writer), t.id(reader));
    found.note(AnomalyKind::G1b, vec![w, r], || {
        format!(
            "T{r} read key {key} version {version}, an intermediate version: its writer T{w} later installed version {last_own}"
        )
    });
}

/// A read of a version no committed transaction installed: G1a if an aborted one did.
fn note_read_of_missing_version(
    t: &Txns,
    reader: u32,
    key: u64,
    version: u64,
    aborted: &[(u64, u64, u64)],
    found: &mut Found,
) {
    let r = t.id(reader);
    match aborted.binary_search_by_key(&(key, version), |&(k, v, _)| (k, v)).ok() {
        Some(ab) => {
            let writer = aborted[ab].2;
            found.note(AnomalyKind::G1a, vec![writer, r], || {
                format!("T{r} read key {key} version {version}, written by T{writer} which aborted")
            })
        }
        None => found.note(AnomalyKind::UnknownVersion, vec![r], || {
            format!("T{r} read key {key} version {version}, which no transaction installed")
        }),
    }
}

/// Versions skipped: a committed write of a version whose predecessor no transaction
/// installed, committed or aborted, and no committed transaction read (a read would already
/// be reported as a read of a missing version).
fn note_skipped_versions(
    t: &Txns,
    writes: &Writes,
    aborted: &[(u64, u64, u64)],
    missing_reads: &[(u64, u64)],
    found: &mut Found,
) {
    let mut missing = missing_reads.to_vec();
    missing.sort_unstable();
    let covered = |key: u64, lo: u64, hi: u64| {
        let in_range = |v: &[(u64, u64)]| {
            let i = v.partition_point(|&x| x < (key, lo));
            i < v.len() && v[i].0 == key && v[i].1 <= hi
        };
        let i = aborted.partition_point(|&(k, v, _)| (k, v) < (key, lo));
        in_range(&missing) || (i < aborted.len() && aborted[i].0 == key && aborted[i].1 <= hi)
    };
    for d in 0..writes.keys.len() as u32 {
        let key = writes.keys[d as usize];
        let mut prev = 0;
        for w in writes.group(d) {
            if w.version > prev + 1 && !covered(key, prev + 1, w.version - 1) {
                let (lo, hi, id) = (prev + 1, w.version - 1, t.id(w.txn));
                found.note(AnomalyKind::SkippedVersion, vec![id], || {
                    let skipped = if lo == hi { format!("version {lo}") } else { format!("versions {lo}..={hi}") };
                    format!(
                        "T{id} installed version {} of key {key}, but {skipped} no transaction installed and no one read: a transaction is missing from the history",
                        w.version
                    )
                });
            }
            prev = w.version;
        }
    }
}

/// Real-time order through a chain of time points, one per start and end, after the
/// transactions' nodes: O(n) edges instead of O(n^2). Returns the number of points.
fn real_time_edges(t: &Txns, nodes: &[u32], edges: &mut Vec<(u32, Edge)>) -> usize {
    let n = t.rows.len();
    // Point p: (time, is_end, txn). Starts sort before ends at equal times, so
    // end_i == start_j does not order Ti before Tj.
    let mut points: Vec<(u64, bool, u32)> = Vec::with_capacity(2 * nodes.len());
    for &u in nodes {
        let r = &t.f.txns[t.rows[u as usize] as usize];
        points.push((r.start_ns, false, u));
        points.push((r.end_ns, true, u));
    }
    points.sort_unstable();
    // A coroutine runs one transaction at a time, so its next one follows its previous one
    // even when it starts in the nanosecond the previous one ended. (Zero-length pairs at one
    // instant are left unordered: commit order could not put them forward.)
    let mut by_process: Vec<(u64, u64, u64, u32)> = nodes
        .iter()
        .map(|&u| {
            let r = &t.f.txns[t.rows[u as usize] as usize];
            let process = ((r.node as u64) << 48) | ((r.worker as u64) << 32) | r.coroutine as u64;
            (process, r.start_ns, r.end_ns, u)
        })
        .collect();
    by_process.sort_unstable();
    for w in by_process.windows(2) {
        let ((pa, _, ea, a), (pb, sb, eb, b)) = (w[0], w[1]);
        if pa == pb && ea == sb && ea < eb {
            edges.push((a, Edge { to: b, kind: Kind::Rt, key: 0 }));
        }
    }
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

/// Nodes grouped by component: `members[start[c]..start[c+1]]`, in node order.
fn bucket(nodes: &[u32], comp: impl Fn(u32) -> u32, ncomp: u32) -> (Vec<u32>, Vec<u32>) {
    let mut start = vec![0u32; ncomp as usize + 1];
    for &u in nodes {
        start[comp(u) as usize + 1] += 1;
    }
    for c in 0..ncomp as usize {
        start[c + 1] += start[c];
    }
    let mut fill = start.clone();
    let mut members = vec![0u32; nodes.len()];
    for &u in nodes {
        let c = comp(u) as usize;
        members[fill[c] as usize] = u;
        fill[c] += 1;
    }
    (start, members)
}

/// Classifies and explains every strongly connected component of two or more transactions
/// over transaction edges; with `strict`, then every component that needs real-time edges.
fn report_cycles(g: &Graph, t: &Txns, all: &[u32], strict: bool, found: &mut Found) {
    let n = t.rows.len();
    let mut s = Scratch::new(g.nodes);
    let ncomp = s.tarjan(g, all, |e| e.kind.txn(), |v| (v as usize) < n);
    let comp: Vec<u32> = s.comp[..n].to_vec();
    s.clear(all);
    let (start, members) = bucket(all, |u| comp[u as usize], ncomp);
    let mut cyclic = vec![false; n];
    for c in 0..ncomp as usize {
        let m = &members[start[c] as usize..start[c + 1] as usize];
        if m.len() < 2 {
            continue;
        }
        for &u in m {
            cyclic[u as usize] = true;
        }
        let c = c as u32;
        let (kind, cycle) = classify(g, &mut s, m, &|v: u32| (v as usize) < n && comp[v as usize] == c, found.level);
        let ids: Vec<u64> = cycle.iter().filter(|(u, _)| (*u as usize) < n).map(|(u, _)| t.id(*u)).collect();
        found.note(kind, ids, || explain(kind, &cycle, t));
    }
    if !strict {
        return;
    }
    // Components that only real-time edges close.
    let everything: Vec<u32> = (0..g.nodes as u32).collect();
    let nfull = s.tarjan(g, &everything, |_| true, |_| true);
    let full: Vec<u32> = s.comp.clone();
    let (fstart, fmembers) = bucket(all, |u| full[u as usize], nfull);
    for c in 0..nfull as usize {
        let m = &fmembers[fstart[c] as usize..fstart[c + 1] as usize];
        if m.len() < 2 || m.iter().any(|&u| cyclic[u as usize]) {
            continue;
        }
        let c = c as u32;
        let cycle = s
            .bfs(g, m[0], m[0], |_| true, |v| full[v as usize] == c)
            .expect("every node of a strongly connected component is on a cycle");
        let ids: Vec<u64> = cycle.iter().filter(|(u, _)| (*u as usize) < n).map(|(u, _)| t.id(*u)).collect();
        found.note(AnomalyKind::RealTime, ids, || explain(AnomalyKind::RealTime, &cycle, t));
    }
}

/// A strongly connected component's cycle classes: which are present, and the class to name
/// it by (the most severe the level forbids, else the most severe), with a shortest witness.
///
/// - G0 and G1c: a strongly connected sub-component of ww (ww and wr) edges: linear.
/// - G-single: an anti-dependency u -> v with a ww/wr path back from v to u. Inside one
///   strongly connected component of ww/wr edges the path exists; otherwise it is a
///   reachability question in the condensation of those components, a DAG, answered 64
///   candidate edges at a time with bit sets after pruning by the lowest component each one
///   reaches: linear when anti-dependencies are few or local, O((n + m) * candidates / 64)
///   at worst.
/// - G2-item: any item anti-dependency inside the component (the component being strongly
///   connected, a path back always exists); G2: any anti-dependency at all.
fn classify(
    g: &Graph,
    s: &mut Scratch,
    members: &[u32],
    in_c: &dyn Fn(u32) -> bool,
    level: Level,
) -> (AnomalyKind, Vec<(u32, Edge)>) {
    let ww = |e: &Edge| e.kind == Kind::Ww;
    let dep = |e: &Edge| e.kind.dep();
    // G0.
    let k = s.tarjan(g, members, ww, in_c);
    let g0 = nontrivial(s, members, k);
    s.clear(members);
    // G1c and the ww/wr components, kept for G-single.
    let k = s.tarjan(g, members, dep, in_c);
    let g1c = nontrivial(s, members, k);
    let dcomp: FxHashMap<u32, u32> = members.iter().map(|&u| (u, s.comp[u as usize])).collect();
    s.clear(members);
    let single = g_single(g, members, in_c, &dcomp, k);
    let item =
        members.iter().find_map(|&u| g.out(u).iter().find(|e| e.kind == Kind::Rw && in_c(e.to)).map(|e| (u, *e)));
    let any_rw = members.iter().find_map(|&u| g.out(u).iter().find(|e| e.kind.anti() && in_c(e.to)).map(|e| (u, *e)));
    let present = [g0.is_some(), g1c.is_some(), single.is_some(), item.is_some(), any_rw.is_some()];
    let pick = (0..5)
        .find(|&i| present[i] && level.forbids(AnomalyKind::CYCLES[i]))
        .or_else(|| (0..5).find(|&i| present[i]))
        .expect("a strongly connected component has a cycle of some class");
    let kind = AnomalyKind::CYCLES[pick];
    let cycle = match kind {
        AnomalyKind::G0 => cycle_within(g, s, members, g0.unwrap(), ww, in_c),
        AnomalyKind::G1c => cycle_within(g, s, members, g1c.unwrap(), dep, in_c),
        AnomalyKind::GSingle => close(g, s, single.unwrap(), dep, in_c),
        AnomalyKind::G2Item => close(g, s, item.unwrap(), |e| e.kind.txn(), in_c),
        _ => close(g, s, any_rw.unwrap(), |e| e.kind.txn(), in_c),
    };
    (kind, cycle)
}

/// A member of a sub-component of two or more nodes, with that sub-component's id.
fn nontrivial(s: &Scratch, members: &[u32], k: u32) -> Option<(u32, u32)> {
    let mut size = vec![0u32; k as usize];
    for &u in members {
        size[s.comp[u as usize] as usize] += 1;
    }
    members.iter().find(|&&u| size[s.comp[u as usize] as usize] > 1).map(|&u| (u, s.comp[u as usize]))
}

/// A shortest cycle through `at.0` inside its sub-component (recomputed: `s` was cleared).
fn cycle_within(
    g: &Graph,
    s: &mut Scratch,
    members: &[u32],
    at: (u32, u32),
    allowed: impl Fn(&Edge) -> bool + Copy,
    in_c: &dyn Fn(u32) -> bool,
) -> Vec<(u32, Edge)> {
    s.tarjan(g, members, allowed, in_c);
    let sub: FxHashMap<u32, u32> = members.iter().map(|&u| (u, s.comp[u as usize])).collect();
    s.clear(members);
    let c = sub[&at.0];
    s.bfs(g, at.0, at.0, allowed, |v| in_c(v) && sub.get(&v) == Some(&c))
        .expect("a node of a strongly connected sub-component is on a cycle")
}

/// The edge `e` from `u` and a shortest path back from its head to `u`.
fn close(
    g: &Graph,
    s: &mut Scratch,
    (u, e): (u32, Edge),
    allowed: impl Fn(&Edge) -> bool,
    in_c: &dyn Fn(u32) -> bool,
) -> Vec<(u32, Edge)> {
    let mut cycle = vec![(u, e)];
    if e.to != u {
        cycle.extend(s.bfs(g, e.to, u, allowed, in_c).expect("the head of an edge in a component reaches its tail"));
    }
    cycle
}

/// An anti-dependency u -> v of the component with a ww/wr path from v back to u, if any.
/// `dcomp` holds the ww/wr components (reverse topological ids: reachable ones are smaller).
fn g_single(
    g: &Graph,
    members: &[u32],
    in_c: &dyn Fn(u32) -> bool,
    dcomp: &FxHashMap<u32, u32>,
    k: u32,
) -> Option<(u32, Edge)> {
    let dc = |u: u32| dcomp[&u];
    let mut candidates: Vec<(u32, Edge)> = Vec::new();
    for &u in members {
        for e in g.out(u).iter().filter(|e| e.kind.anti() && in_c(e.to)) {
            if dc(u) == dc(e.to) {
                return Some((u, *e));
            }
            candidates.push((u, *e));
        }
    }
    if candidates.is_empty() {
        return None;
    }
    // The condensation: members by component, and the lowest component each reaches.
    let (start, by) = bucket(members, dc, k);
    let succ = |c: u32, f: &mut dyn FnMut(u32)| {
        for &x in &by[start[c as usize] as usize..start[c as usize + 1] as usize] {
            for e in g.out(x).iter().filter(|e| e.kind.dep() && in_c(e.to)) {
                f(dc(e.to));
            }
        }
    };
    let mut lowest: Vec<u32> = (0..k).collect();
    for c in 0..k {
        let mut lo = c;
        succ(c, &mut |d| lo = lo.min(lowest[d as usize]));
        lowest[c as usize] = lo;
    }
    candidates.retain(|(u, e)| dc(*u) < dc(e.to) && lowest[dc(e.to) as usize] <= dc(*u));
    // Highest sources first, so a batch spans few components.
    candidates.sort_by_key(|(u, e)| (std::cmp::Reverse(dc(e.to)), dc(*u)));
    let mut mask = vec![0u64; k as usize];
    for batch in candidates.chunks(64) {
        let top = batch.iter().map(|(_, e)| dc(e.to)).max().expect("nonempty batch");
        let bottom = batch.iter().map(|(u, _)| dc(*u)).min().expect("nonempty batch");
        for (i, (_, e)) in batch.iter().enumerate() {
            mask[dc(e.to) as usize] |= 1 << i;
        }
        for c in (bottom..=top).rev() {
            let m = mask[c as usize];
            if m != 0 {
                // Components below the batch's lowest target cannot matter (and stay clear).
                succ(c, &mut |d| {
                    if d >= bottom {
                        mask[d as usize] |= m
                    }
                });
            }
        }
        let hit = batch.iter().enumerate().find(|(i, (u, _))| mask[dc(*u) as usize] & (1 << i) != 0);
        if let Some((_, &c)) = hit {
            return Some(c);
        }
        mask[bottom as usize..=top as usize].fill(0);
    }
    None
}

/// Nothing lost: each replica's final version of each key is the last committed write.
/// `None` when the history has no final store to compare.
fn check_final_stores(t: &Txns, last: &LastWrites, found: &mut Found) -> Option<bool> {
    let f = t.f;
    if f.finals.is_empty() && !f.meta.contains_key("replicas") {
        return None;
    }
    let mut ok = true;
    for (replica, keys) in &final_stores(f) {
        // Both ascending by key: one merge finds what each side lacks or holds differently.
        let mut held = keys.iter().peekable();
        for &(key, (version, writer)) in last {
            while held.next_if(|&&(k, _)| k < key).is_some() {}
            let got = held.next_if(|&&(k, _)| k == key).map(|&(_, v)| v);
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
        let mut written = last.iter().map(|&(k, _)| k).peekable();
        for &(key, v) in keys {
            while written.next_if(|&k| k < key).is_some() {}
            if v != 0 && written.peek() != Some(&key) {
                ok = false;
                found.note(AnomalyKind::LostWrite, vec![], || {
                    format!("replica {replica} holds version {v} of key {key}, which no committed transaction wrote")
                });
            }
        }
    }
    Some(ok)
}

/// Each replica's final store, (key, version) ascending by key (a key listed twice: its later
/// entry), replicas by name, including replicas the history declares in `meta.replicas` but
/// that list no key (they lost every write). Sorted vectors, not maps: a TPC-C run lists
/// millions of finals.
fn final_stores(f: &Flat) -> Vec<(&str, Vec<(u64, u64)>)> {
    let mut names: BTreeMap<&str, u32> = BTreeMap::new();
    if let Some(serde_json::Value::Array(listed)) = f.meta.get("replicas") {
        for name in listed.iter().filter_map(|v| v.as_str()) {
            names.entry(name).or_default();
        }
    }
    for fin in &f.finals {
        names.entry(fin.replica.as_str()).or_default();
    }
    for (i, n) in names.values_mut().enumerate() {
        *n = i as u32;
    }
    // (replica, key, position in the list): sorted, the last of each (replica, key) wins.
    let mut all: Vec<(u32, u64, u32, u64)> = f
        .finals
        .iter()
        .enumerate()
        .map(|(i, fin)| (names[fin.replica.as_str()], fin.key, i as u32, fin.version))
        .collect();
    all.sort_unstable();
    let mut stores: Vec<(&str, Vec<(u64, u64)>)> = names.keys().map(|&n| (n, Vec::new())).collect();
    for (i, &(r, key, _, version)) in all.iter().enumerate() {
        if all.get(i + 1).is_some_and(|next| (next.0, next.1) == (r, key)) {
            continue;
        }
        stores[r as usize].1.push((key, version));
    }
    stores
}

/// Whether every workload invariant holds; each one that does not is an anomaly.
fn check_invariants(f: &Flat, found: &mut Found) -> bool {
    let mut ok = true;
    for inv in f.invariants.iter().filter(|inv| inv.expected != inv.actual) {
        ok = false;
        found.note(AnomalyKind::Invariant, vec![], || {
            format!("invariant \"{}\" does not hold: expected {}, found {}", inv.name, inv.expected, inv.actual)
        });
    }
    ok
}

fn explain(kind: AnomalyKind, cycle: &[(u32, Edge)], t: &Txns) -> String {
    let n = t.rows.len();
    let f = t.f;
    let mut s =
        format!("{} cycle of {} transactions:", kind.name(), cycle.iter().filter(|(u, _)| (*u as usize) < n).count());
    let row = |u: u32| t.rows[u as usize] as usize;
    let wrote =
        |u: u32, key: u64| f.writes(row(u)).iter().filter(|x| x.key == key).map(|x| x.version).max().unwrap_or(0);
    let read = |u: u32, key: u64| f.reads(row(u)).iter().filter(|x| x.key == key).map(|x| x.version).max().unwrap_or(0);
    // The scan of `u` covering `key`, and the version it saw there.
    let scanned = |u: u32, key: u64| {
        let p = f.preds_of(row(u)).iter().find(|p| p.lo <= key && key <= p.hi).copied();
        p.map(|p| (p.lo, p.hi, f.vset_of(&p).iter().find(|x| x.key == key).map_or(0, |x| x.version)))
            .unwrap_or((key, key, 0))
    };
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
                t.name(u),
                f.txns[row(u)].end_ns,
                t.name(v),
                f.txns[row(v)].start_ns
            );
            i = j + 1;
            continue;
        }
        let (v, key) = (e.to, e.key);
        let _ = match e.kind {
            Kind::Ww => write!(
                s,
                "\n  {} installed key {key} version {}, and {} installed the next version {} (ww)",
                t.name(u),
                wrote(u, key),
                t.name(v),
                wrote(v, key)
            ),
            Kind::Wr => write!(
                s,
                "\n  {} installed key {key} version {}, which {} read (wr)",
                t.name(u),
                read(v, key),
                t.name(v)
            ),
            Kind::Rw => write!(
                s,
                "\n  {} read key {key} version {}, and {} installed the next version {} (rw)",
                t.name(u),
                read(u, key),
                t.name(v),
                wrote(v, key)
            ),
            Kind::WrP => {
                let (lo, hi, seen) = scanned(v, key);
                write!(
                    s,
                    "\n  {} installed key {key} version {seen}, which {} saw scanning keys {lo}..={hi} (wr, predicate)",
                    t.name(u),
                    t.name(v)
                )
            }
            Kind::RwP => {
                let (lo, hi, seen) = scanned(u, key);
                write!(
                    s,
                    "\n  {} scanned keys {lo}..={hi} and saw key {key} at version {seen}, and {} installed the next version {} (rw, predicate)",
                    t.name(u),
                    t.name(v),
                    wrote(v, key)
                )
            }
            Kind::Rt => Ok(()),
        };
        i += 1;
    }
    let first = cycle.first().map(|(u, _)| t.name(*u)).unwrap_or_default();
    let _ = write!(s, "\n  so {first} must both precede and follow itself: no serial order exists.");
    s
}
