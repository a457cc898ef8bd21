//! Transaction chopping by static analysis (DrTM Sec. 4.1, after Shasha et al. 1995): a set
//! of transaction templates, each a sequence of operations on tables, is cut into the finest
//! pieces whose chopping graph has no SC-cycle. Two instances of every template take part
//! (Sec. 4.1: several instances of one transaction run at once). Two operations of different
//! instances conflict (a C-edge) when they access a table and one of them writes it, unless
//! both are declared commutative in the same class (Sec. 4.1's commutative updates) or one is
//! deferred (Sec. 4.2's publish-subscribe: applied at an epoch barrier, outside every piece).
//! Pieces are sets of operations, not runs of consecutive ones: independent operations are
//! reordered (Sec. 4.1), and the piece holding a user-initiated abort runs first.
//!
//! Correctness rests on the declarations: a chopping is serializable if its graph has no
//! SC-cycle *and* every declared commutativity holds. [`sc_cycle`] checks a given chopping
//! (so a hand-made or mutated one can be tested); [`finest`] computes one.
//!
//! The graph is tiny (two instances of a handful of templates): the analysis is a plain
//! fixpoint over connected components, written here rather than pulled from a graph crate.

use std::collections::BTreeSet;

/// One access of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub table: &'static str,
    pub write: bool,
    /// Accesses of one class commute with each other (no C-edge between them).
    pub commutes: Option<&'static str>,
    /// Conflicts with nothing inside pieces: deferred to an epoch barrier (Sec. 4.2), or a
    /// read of fields no transaction writes.
    pub deferred: bool,
}

impl Access {
    pub fn read(table: &'static str) -> Access {
        Access { table, write: false, commutes: None, deferred: false }
    }
    pub fn write(table: &'static str) -> Access {
        Access { table, write: true, commutes: None, deferred: false }
    }
    /// A write that commutes with the other writes of `class`.
    pub fn commuting(table: &'static str, class: &'static str) -> Access {
        Access { table, write: true, commutes: Some(class), deferred: false }
    }
    /// A read of fields no transaction writes: it conflicts with nothing.
    pub fn constant(table: &'static str) -> Access {
        Access { table, write: false, commutes: None, deferred: true }
    }
    /// A write deferred to the publish-subscribe barrier.
    pub fn deferred(table: &'static str) -> Access {
        Access { table, write: true, commutes: None, deferred: true }
    }
}

/// One operation of a template: what the static analysis sees of a query or update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub name: &'static str,
    pub accesses: Vec<Access>,
    /// It may abort the transaction by the logic's own decision (TPC-C's invalid item).
    pub user_abort: bool,
}

/// A transaction type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub name: &'static str,
    pub ops: Vec<Op>,
}

/// A chopping: per template (same order), its pieces in execution order, each the indices
/// of its operations.
pub type Chopping = Vec<Vec<Vec<usize>>>;

fn conflict(a: &Access, b: &Access) -> bool {
    a.table == b.table
        && (a.write || b.write)
        && !a.deferred
        && !b.deferred
        && !(a.commutes.is_some() && a.commutes == b.commutes)
}

fn ops_conflict(a: &Op, b: &Op) -> bool {
    a.accesses.iter().any(|x| b.accesses.iter().any(|y| conflict(x, y)))
}

/// Vertices: (template, instance 0/1, piece); the graph of `chop` with the S-edges of the
/// instances `s_edges` keeps; returns a component label per vertex.
fn components(ts: &[Template], chop: &Chopping, s_edges: impl Fn((usize, usize)) -> bool) -> Vec<Vec<Vec<usize>>> {
    let mut verts = Vec::new();
    for (t, pieces) in chop.iter().enumerate() {
        for i in 0..2 {
            for p in 0..pieces.len() {
                verts.push((t, i, p));
            }
        }
    }
    let mut label: Vec<usize> = (0..verts.len()).collect();
    fn find(l: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while l[r] != r {
            r = l[r];
        }
        l[x] = r;
        r
    }
    let union = |l: &mut Vec<usize>, a: usize, b: usize| {
        let (ra, rb) = (find(l, a), find(l, b));
        if ra != rb {
            l[ra.max(rb)] = ra.min(rb);
        }
    };
    for (a, &(ta, ia, pa)) in verts.iter().enumerate() {
        for (b, &(tb, ib, pb)) in verts.iter().enumerate().skip(a + 1) {
            let same_instance = ta == tb && ia == ib;
            let edge = if same_instance {
                // S-edges join the pieces of an instance.
                s_edges((ta, ia))
            } else {
                chop[ta][pa].iter().any(|&x| chop[tb][pb].iter().any(|&y| ops_conflict(&ts[ta].ops[x], &ts[tb].ops[y])))
            };
            if edge {
                union(&mut label, a, b);
            }
        }
    }
    let mut out: Vec<Vec<Vec<usize>>> = chop.iter().map(|p| vec![vec![0; p.len()]; 2]).collect();
    for (k, &(t, i, p)) in verts.iter().enumerate() {
        out[t][i][p] = find(&mut label, k);
    }
    out
}

/// The first SC-cycle of `chop`, if any: (template, two of its pieces) joined by a path that
/// does not use that instance's own S-edges.
pub fn sc_cycle(ts: &[Template], chop: &Chopping) -> Option<(usize, usize, usize)> {
    for t in 0..ts.len() {
        // Without the S-edges of the instance under test.
        let c = components(ts, chop, |i| i != (t, 0));
        for p in 0..chop[t].len() {
            for q in p + 1..chop[t].len() {
                if c[t][0][p] == c[t][0][q] {
                    return Some((t, p, q));
                }
            }
        }
    }
    None
}

/// Sec. 4.2's premise for deferring (publish-subscribe): no path of C-edges alone joins a
/// publisher (a template with a deferred write) to a subscriber (a template accessing that
/// table without deferring), else the subscriber could see the publisher's other pieces
/// before the deferred one. The first violation, as (publisher, subscriber) templates.
pub fn deferral_premise(ts: &[Template], chop: &Chopping) -> Option<(usize, usize)> {
    let c = components(ts, chop, |_| false);
    let touches =
        |t: &Template, table: &str| t.ops.iter().flat_map(|o| &o.accesses).any(|a| a.table == table && !a.deferred);
    for (p, tp) in ts.iter().enumerate() {
        let deferred = tp.ops.iter().flat_map(|o| &o.accesses).filter(|a| a.deferred && a.write).map(|a| a.table);
        for table in deferred {
            for (s, _) in ts.iter().enumerate().filter(|(_, t)| touches(t, table)) {
                if c[p].iter().flatten().any(|x| c[s].iter().flatten().any(|y| x == y)) {
                    return Some((p, s));
                }
            }
        }
    }
    None
}

/// The finest chopping without SC-cycles: every operation its own piece, then pieces an
/// SC-cycle joins merged, to a fixpoint; the piece with a user abort goes first.
pub fn finest(ts: &[Template]) -> Chopping {
    let mut chop: Chopping = ts.iter().map(|t| (0..t.ops.len()).map(|o| vec![o]).collect()).collect();
    while let Some((t, p, q)) = sc_cycle(ts, &chop) {
        let moved = chop[t].remove(q);
        chop[t][p].extend(moved);
        chop[t][p].sort_unstable();
    }
    for (t, pieces) in chop.iter_mut().enumerate() {
        pieces.sort_by_key(|p| (!p.iter().any(|&o| ts[t].ops[o].user_abort), p[0]));
    }
    chop
}

/// The tables a piece touches, for display (`W+D`).
pub fn piece_tables(t: &Template, piece: &[usize]) -> String {
    let tables: BTreeSet<&str> = piece.iter().flat_map(|&o| t.ops[o].accesses.iter().map(|a| a.table)).collect();
    let mut ordered: Vec<&str> = Vec::new();
    for &o in piece {
        for a in &t.ops[o].accesses {
            if tables.contains(a.table) && !ordered.contains(&a.table) {
                ordered.push(a.table);
            }
        }
    }
    ordered.join("+")
}

/// A chopping as text: `NEW: I | W+C+D+S+O+N+L` per template.
pub fn describe(ts: &[Template], chop: &Chopping) -> String {
    ts.iter()
        .zip(chop)
        .map(|(t, pieces)| {
            let ps: Vec<String> = pieces.iter().map(|p| piece_tables(t, p)).collect();
            format!("{}: {}", t.name, ps.join(" | "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &'static str, accesses: Vec<Access>) -> Op {
        Op { name, accesses, user_abort: false }
    }

    /// Sec. 4.1's Fig. 5: TX1 updates A then B, TX2 reads C then updates B. The two TX1
    /// instances meet on A and on B: an SC-cycle, so TX1 becomes one piece; TX2's read of a
    /// table nobody writes stays a piece of its own.
    #[test]
    fn figure_five_merges_tx1_and_keeps_tx2_chopped() {
        let ts = vec![
            Template { name: "TX1", ops: vec![op("a", vec![Access::write("A")]), op("b", vec![Access::write("B")])] },
            Template { name: "TX2", ops: vec![op("c", vec![Access::read("C")]), op("b", vec![Access::write("B")])] },
        ];
        let chop = finest(&ts);
        assert_eq!(describe(&ts, &chop), "TX1: A+B\nTX2: C | B");
        assert_eq!(sc_cycle(&ts, &chop), None);
        // The unchopped TX1 is the cycle the analysis removed.
        let split: Chopping = vec![vec![vec![0], vec![1]], vec![vec![0], vec![1]]];
        assert_eq!(sc_cycle(&ts, &split), Some((0, 0, 1)));
    }

    /// Commutative updates leave no C-edge between them, so both instances chop apart.
    #[test]
    fn commutative_updates_chop_apart() {
        let ts = vec![Template {
            name: "PAY",
            ops: vec![op("w", vec![Access::commuting("W", "ytd")]), op("d", vec![Access::commuting("D", "ytd")])],
        }];
        assert_eq!(describe(&ts, &finest(&ts)), "PAY: W | D");
        let plain = vec![Template {
            name: "PAY",
            ops: vec![op("w", vec![Access::write("W")]), op("d", vec![Access::write("D")])],
        }];
        assert_eq!(describe(&plain, &finest(&plain)), "PAY: W+D");
    }

    /// The piece with a user abort runs first (Sec. 4.1, reordering).
    #[test]
    fn the_user_abort_piece_goes_first() {
        let ts = vec![Template {
            name: "T",
            ops: vec![
                op("x", vec![Access::write("X")]),
                Op { name: "i", accesses: vec![Access::read("I")], user_abort: true },
            ],
        }];
        assert_eq!(describe(&ts, &finest(&ts)), "T: I | X");
    }
}
