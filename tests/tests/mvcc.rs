//! MVCC (RCC Sec. 4.4) on the simulator: every hybrid code on SmallBank and YCSB at low and
//! high contention, on random small cluster shapes, each run checked by the history checker
//! (serializable, nothing lost, invariants); the planted bug (reads that never raise `rts`)
//! caught; and the tuple logic (R1, W1, version slots, torn-read detection, timestamps) unit
//! tested. Failures print the run to replay.

use std::sync::Arc;

use proptest::prelude::*;
use txbed_protocols::mvcc::{self, Geometry, SLOTS};
use txbed_runner::{run_txns, TxnRunResult};
use txbed_sim::wan::{Delay, Wan, WanLink, WanTransport};
use txbed_sim::NicProfile;
use txbed_tests::harness::{rdma_options, Shape, MVCC, W, WORKLOADS};
use txbed_txn::stage::{Hybrid, Stage};
use txbed_txn::store::{split_version_word, version_word, META_BYTES, VERSION};
use txbed_workloads::smallbank::SmallBank;
use txbed_workloads::ycsb::Ycsb;

/// MVCC on the shared defaults.
fn shape(w: W, hybrid: Hybrid, seed: u64) -> Shape<W> {
    Shape::new(MVCC, w, hybrid, seed)
}

#[track_caller]
fn assert_clean(s: &Shape<W>, r: &TxnRunResult) {
    s.assert_clean(r);
    s.assert_commits(r, 10);
}

/// A small random shape for (code, workload), drawn from `seed`: 2-4 nodes, 1-2 workers,
/// 1-4 coroutines, replication 1-3.
fn random_shape(w: W, hybrid: Hybrid, seed: u64) -> Shape<W> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (hybrid.0 as u64) << 8 ^ w as u64;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let nodes = 2 + next(3) as u16;
    let workers = 1 + next(2) as u16;
    let coroutines = 1 + next(4) as u32;
    let replication = 1 + next(nodes.min(3) as u64) as u16;
    Shape { nodes, workers, coroutines, replication, ..shape(w, hybrid, seed) }
}

/// Every valid hybrid code (32 combinations of LOCK, READ, LOG, RELEASE, COMMIT) on SmallBank
/// and YCSB at low and high contention, each on its own random small shape: clean, with
/// commits. Code 28 is RCC's suggested hybrid for SmallBank (RPC READ and LOCK, one-sided
/// LOG, RELEASE and COMMIT).
#[test]
fn every_hybrid_code_on_every_workload() {
    let codes = Hybrid::all_codes(&mvcc::STAGES);
    assert_eq!(codes.len(), 32);
    assert_eq!(Hybrid(28).to_string(), "28 (one-sided: log, release, commit)");
    let mut conflicts = 0;
    for code in codes {
        for (k, w) in WORKLOADS.into_iter().enumerate() {
            let s = random_shape(w, code, 1 + code.0 as u64 * 3 + k as u64);
            let r = s.run();
            assert_clean(&s, &r);
            if w == W::YcsbHigh {
                conflicts += r.stats.aborted_conflict;
            }
        }
    }
    assert!(conflicts > 1000, "only {conflicts} conflicts at high contention: contention not tested");
}

proptest! {
    // Random codes, workloads, shapes and seeds, each a full run and check.
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_shapes_are_serializable(
        code in 0u32..32,
        w in 0usize..3,
        nodes in 2u16..=4,
        workers in 1u16..=2,
        coroutines in 1u32..=4,
        replication in 1u16..=3,
        seed in 0u64..1_000_000,
    ) {
        let s = Shape {
            nodes,
            workers,
            coroutines,
            replication: replication.min(nodes),
            ..shape(WORKLOADS[w], Hybrid(code), seed)
        };
        let r = s.run();
        let res = s.check(&r);
        prop_assert!(res.is_ok(), "{}", res.unwrap_err());
        prop_assert!(r.stats.committed > 0, "{}: nothing committed", s.replay());
    }
}

/// MVCC's trace instants named `name`, summed by their `count` argument (1 if none).
fn instants(r: &TxnRunResult, name: &str) -> u64 {
    r.trace
        .iter()
        .filter(|e| e.category == mvcc::TRACE && e.name == name)
        .map(|e| e.args.iter().find(|(k, _)| *k == "count").map_or(1, |(_, c)| *c))
        .sum()
}

/// Older versions are read, and reading them stays serializable: SmallBank's read-only
/// Balance against single-record deposits on 5 accounts per node, with node 0's requests
/// delayed 20 us so its readers' timestamps are old when their reads arrive.
#[test]
fn old_versions_are_read_serializably() {
    let (mut old, mut overflow) = (0, 0);
    for code in [Hybrid::RPC, Hybrid(2), Hybrid::full(&mvcc::STAGES), Hybrid(28)] {
        for seed in 1..=2 {
            let s = Shape {
                nodes: 4,
                coroutines: 8,
                replication: 1,
                duration_ns: 600_000,
                trace: true,
                ..shape(W::SmallBank, code, seed)
            };
            let mut spec = s.spec_with(Arc::new(SmallBank {
                accounts_per_node: 5,
                distributed: 0.5,
                locality: false,
                mix: [0, 0, 50, 25, 0, 25],
                ..SmallBank::default()
            }));
            let n = s.nodes as usize;
            spec.link_delay_ns = (0..n * n).map(|k| if k / n == 0 && k % n != 0 { 20_000 } else { 0 }).collect();
            let r = run_txns(&spec).unwrap();
            assert_clean(&s, &r);
            old += instants(&r, "older versions read");
            overflow += instants(&r, mvcc::ABORT_NAMES[mvcc::Abort::SlotOverflow as usize]);
        }
    }
    eprintln!("{old} reads of older versions, {overflow} slot overflows");
    assert!(old > 10, "only {old} reads returned an older version");
    assert!(overflow > 0, "no slot overflow");
}

/// The planted bug (reads never raise rts) is caught within 1000 seeds in RPC and one-sided
/// form on YCSB at high contention (write skew: G2-item), and the same runs are clean without it.
#[test]
fn planted_bug_is_caught() {
    for hybrid in [Hybrid::RPC, Hybrid(2), Hybrid::full(&mvcc::STAGES)] {
        let caught = (1..=1000u64).find(|&seed| {
            let s = Shape { bug: Some(txbed_protocols::mvcc::SKIP_RTS), ..shape(W::YcsbHigh, hybrid, seed) };
            let r = s.run();
            if r.report.serializable {
                return false;
            }
            eprintln!("caught at seed {seed}: {}\n{}", s.replay(), r.report.anomalies[0].explanation);
            let fixed = Shape { bug: None, ..s };
            assert_clean(&fixed, &fixed.run());
            true
        });
        assert!(caught.is_some(), "MvccSkipRts not caught in 1000 seeds ({hybrid})");
    }
}

/// Every combination of the RDMA options keeps MVCC serializable, in RPC and one-sided form.
#[test]
fn every_option_combination_is_serializable() {
    for bits in 0..16u32 {
        let options = rdma_options(bits);
        for hybrid in [Hybrid::RPC, Hybrid::full(&mvcc::STAGES)] {
            let s = Shape { options, ..shape(W::YcsbHigh, hybrid, 5) };
            let r = s.run();
            s.assert_clean(&r);
            s.assert_commits(&r, 5);
        }
    }
}

/// Large records: tuples of 2.7 KiB, so the double reads and commit bodies fill the scratch
/// areas and are issued in batches; still clean.
#[test]
fn large_records_are_batched() {
    for hybrid in [Hybrid::RPC, Hybrid::full(&mvcc::STAGES)] {
        let s = Shape { replication: 1, ..shape(W::YcsbHigh, hybrid, 3) };
        let spec = s.spec_with(Arc::new(
            Ycsb { rows_per_node: 2_000, ops: 4, write_fraction: 0.5, record_bytes: 512, ..Ycsb::default() }
                .prepare(s.nodes),
        ));
        let r = run_txns(&spec).unwrap();
        assert_clean(&s, &r);
    }
}

// ---- The tuple logic, unit by unit ----

const REC: usize = 16;
const G: Geometry = Geometry { rec: REC };

/// A tuple as loaded: incarnation 1, version 0, record filled with `fill`, no extension.
fn loaded(fill: u8) -> Vec<u8> {
    let mut t = vec![0u8; G.tuple_bytes()];
    t[VERSION as usize..VERSION as usize + 8].copy_from_slice(&version_word(1, 0).to_le_bytes());
    t[META_BYTES as usize..META_BYTES as usize + REC].fill(fill);
    t
}

/// Commits `record` by `writer` at `ctts` over `t`, as both commit forms do.
fn commit(t: &[u8], ctts: u64, writer: u64, fill: u8) -> Vec<u8> {
    let body = mvcc::install(G, t, ctts, writer, &[fill; REC]);
    let mut n = t.to_vec();
    n[G.body()].copy_from_slice(&body);
    n
}

fn word(t: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(t[at..at + 8].try_into().unwrap())
}

#[test]
fn layout_matches_the_store() {
    assert_eq!(MVCC.ext_bytes(REC as u64), (SLOTS * (24 + REC) + 24) as u64);
    assert_eq!(G.tuple_bytes() as u64, META_BYTES + REC as u64 + MVCC.ext_bytes(REC as u64));
    let spec = txbed_txn::store::TableSpec { id: 0, record_bytes: 12, rows_per_node: 10 };
    let layout = txbed_txn::store::Layout::with_ext(&[spec], 0.9, &|r| MVCC.ext_bytes(r));
    let place = &layout.tables[0];
    let g = Geometry::of(place);
    assert_eq!(g.rec, 16);
    assert_eq!(g.tuple_bytes() as u64, place.tuple_bytes);
    assert_eq!(g.ext_at() as u64, place.ext_at);
    // rts is the last word and outside what a commit writes.
    assert_eq!(g.rts() + 8, g.tuple_bytes());
    assert_eq!(G.body().end, G.rts());
}

#[test]
fn the_loaded_tuple_is_version_zero_at_wts_zero() {
    let t = loaded(7);
    assert!(mvcc::consistent(G, &t));
    let v = mvcc::r1(G, &t, 1).expect("version 0 is readable at any timestamp");
    assert_eq!((v.wts, v.counter(), v.latest, v.record.clone()), (0, 0, true, vec![7; REC]));
    assert!(mvcc::w1(G, &t, 1));
}

#[test]
fn commits_rotate_the_oldest_slot_and_r1_picks_by_timestamp() {
    let mut t = loaded(0);
    // Versions 1..=6 at timestamps 100, 200, ... 600.
    for k in 1..=6u64 {
        t = commit(&t, k * 100, 1000 + k, k as u8);
        assert!(mvcc::consistent(G, &t));
        let (inc, ver) = split_version_word(word(&t, VERSION as usize));
        assert_eq!((inc, ver), (1, k));
        assert_eq!(word(&t, G.wts()), k * 100);
        assert_eq!(word(&t, G.seq()), word(&t, VERSION as usize));
        assert_eq!(word(&t, 16), 1000 + k, "writer of the latest");
        assert_eq!(t[META_BYTES as usize], k as u8, "latest record at the common offset");
    }
    // Latest (6) plus four stale versions (2..=5); 0 and 1 were overwritten, oldest first.
    let mut kept: Vec<u64> = mvcc::versions(G, &t).iter().map(|v| v.counter()).collect();
    kept.sort();
    assert_eq!(kept, vec![2, 3, 4, 5, 6]);
    for v in mvcc::versions(G, &t) {
        assert_eq!(v.record, vec![v.counter() as u8; REC]);
        assert_eq!(v.wts, v.counter() * 100);
        assert_eq!(v.writer, 1000 + v.counter());
    }
    // R1: the largest wts below ctts.
    assert_eq!(mvcc::r1(G, &t, 601).map(|v| (v.counter(), v.latest)), Some((6, true)));
    assert_eq!(mvcc::r1(G, &t, 450).map(|v| (v.counter(), v.latest)), Some((4, false)));
    assert_eq!(mvcc::r1(G, &t, 201).map(|v| v.counter()), Some(2));
    // Versions 0 and 1 are gone: a reader older than version 2 overflows.
    assert_eq!(mvcc::r1(G, &t, 150), None);
    // W1: after the latest wts and after rts.
    assert!(!mvcc::w1(G, &t, 600) && mvcc::w1(G, &t, 601));
    t[G.rts()..G.rts() + 8].copy_from_slice(&700u64.to_le_bytes());
    assert!(!mvcc::w1(G, &t, 650) && mvcc::w1(G, &t, 701));
    // Its own read (rts == ctts) does not stop a transaction's write.
    assert!(mvcc::w1(G, &t, 700) && !mvcc::w1_words(600, 700, 699));
    // rts survives a commit (it is outside the body).
    let t2 = commit(&t, 800, 9, 9);
    assert_eq!(word(&t2, G.rts()), 700);
}

#[test]
fn r2_allows_only_free_or_younger_locks() {
    assert!(mvcc::r2(0, 50));
    assert!(mvcc::r2(60, 50));
    assert!(!mvcc::r2(40, 50));
}

/// A READ torn by a commit (old bytes up to some cache line, new after) is inconsistent at
/// every cut that splits the committed body; the paper's wts comparison alone would accept
/// two reads torn at the same cut.
#[test]
fn torn_reads_are_detected() {
    let mut old = loaded(1);
    for k in 1..=5u64 {
        old = commit(&old, k * 10, k, k as u8);
    }
    let new = commit(&old, 60, 6, 6);
    for cut in (0..=G.tuple_bytes()).step_by(8) {
        let mut torn = old[..cut].to_vec();
        torn.extend_from_slice(&new[cut..]);
        let splits_body = cut > VERSION as usize && cut < G.rts();
        assert_eq!(mvcc::consistent(G, &torn), !splits_body, "cut at {cut}");
        if splits_body && cut > G.wts() + 8 {
            assert!(mvcc::same_wts(G, &torn, &torn.clone()) && !mvcc::same_wts(G, &torn, &new));
        }
    }
    // The first commit of a loaded tuple, torn.
    let first = commit(&loaded(0), 5, 1, 1);
    let mut torn = loaded(0)[..G.wts()].to_vec();
    torn.extend_from_slice(&first[G.wts()..]);
    assert!(!mvcc::consistent(G, &torn));
    let mut torn = first[..G.wts()].to_vec();
    torn.extend_from_slice(&loaded(0)[G.wts()..]);
    assert!(!mvcc::consistent(G, &torn));
}

/// The tuple after the first `k` of `writes` landed on `t`, for k = 0..=3.
fn landed(t: &[u8], writes: &[(usize, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut states = vec![t.to_vec()];
    for (at, b) in writes {
        let mut next = states.last().unwrap().clone();
        next[*at..*at + b.len()].copy_from_slice(b);
        states.push(next);
    }
    states
}

/// Views a READ can return while `states` land one after another: it samples the tuple in
/// address order, so word `i` comes from the state after `j(i)` WRITEs, `j` non-decreasing
/// (three cut points). Returns the views `consistent` accepts that are neither the first
/// nor the last state's body.
fn undetected_tears(states: &[Vec<u8>]) -> usize {
    let words = G.tuple_bytes() / 8;
    let (first, last) = (&states[0][G.body()], &states[3][G.body()]);
    let mut bad = 0;
    for c1 in 0..=words {
        for c2 in c1..=words {
            for c3 in c2..=words {
                let view: Vec<u8> = (0..words)
                    .flat_map(|i| {
                        let j = (i >= c1) as usize + (i >= c2) as usize + (i >= c3) as usize;
                        states[j][i * 8..i * 8 + 8].to_vec()
                    })
                    .collect();
                if mvcc::consistent(G, &view) && view[G.body()] != *first && view[G.body()] != *last {
                    bad += 1;
                }
            }
        }
    }
    bad
}

/// A one-sided commit writes the new version and the version it displaces, never the whole
/// tuple: `wts | seq` (16 B), the slot (24 + R B) and `version | writer | record` (16 + R B),
/// landing in that order, which leaves every READ torn by them detectable. Landing in another
/// order (the new version first) would let a torn READ pass: the test can fail.
#[test]
fn commit_writes_only_the_new_version_and_never_tear_unseen() {
    let mut old = loaded(1);
    for k in 1..=5u64 {
        old = commit(&old, k * 10, k, k as u8);
    }
    let slot = mvcc::oldest_slot(G, &old);
    let writes = mvcc::commit_writes(G, &mvcc::latest(G, &old), slot, 60, 6, &[6; REC]);
    let sizes: Vec<(usize, usize)> = writes.iter().map(|(at, b)| (*at, b.len())).collect();
    assert_eq!(sizes, vec![(G.wts(), 16), (G.slot(slot), 24 + REC), (VERSION as usize, 16 + REC)]);
    let states = landed(&old, &writes);
    assert_eq!(states[3][G.body()], commit(&old, 60, 6, 6)[G.body()], "the same commit as RPC's");
    assert_eq!(undetected_tears(&states), 0);
    let mut reversed = writes.to_vec();
    reversed.reverse();
    assert!(undetected_tears(&landed(&old, &reversed)) > 0, "another order tears unseen");
}

#[test]
fn timestamps_are_unique_ordered_and_never_zero() {
    let a = mvcc::timestamp(1, 0, 0, 2, 0);
    assert_ne!(a, 0);
    assert_eq!(mvcc::clock_of(a), 1);
    // Same clock: ids break the tie; a later clock wins over any ids.
    let b = mvcc::timestamp(1, 1, 1, 2, 255);
    assert!(a < b && b < mvcc::timestamp(2, 0, 0, 2, 0));
    let mut all: Vec<u64> = Vec::new();
    for node in 0..4 {
        for worker in 0..2 {
            for c in 0..8 {
                all.push(mvcc::timestamp(77, node, worker, 2, c));
            }
        }
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 64);
    assert!(all.iter().all(|&t| mvcc::clock_of(t) == 77));
}

#[test]
fn stages_and_handlers() {
    assert_eq!(mvcc::STAGES.to_vec(), vec![Stage::Lock, Stage::Read, Stage::Log, Stage::Release, Stage::Commit]);
    assert_eq!(MVCC.handler_names(), ["MVCC_READ", "MVCC_LOCK", "MVCC_COMMIT"]);
}

/// MVCC's one-sided READ CASes rts: with two HCA-atomic NICs per node a raise can be lost
/// (the runner refuses it, as one-sided locking), and when forced the checker catches it.
#[test]
fn two_hca_nics_refuse_one_sided_reads() {
    let s = shape(W::YcsbHigh, Hybrid(2), 1);
    let mut spec = s.spec();
    spec.profile = NicProfile::load("cx4").unwrap();
    let err = run_txns(&spec).err().expect("refused");
    assert!(err.contains("HCA-level atomicity"), "{err}");
    spec.allow_unsafe_atomics = true;
    let caught = (1..=300u64).find(|&seed| {
        let s = Shape { nodes: 2, coroutines: 8, replication: 1, ..shape(W::YcsbHigh, Hybrid(2), seed) };
        let mut spec = s.spec();
        spec.profile = NicProfile::load("cx4").unwrap();
        spec.allow_unsafe_atomics = true;
        !run_txns(&spec).unwrap().report.serializable
    });
    assert!(caught.is_some(), "two NICs never lost an rts raise");
    eprintln!("two NICs with a one-sided READ caught at seed {caught:?}");
    // RPC READ (CPU stores at the owner) is safe with any number of NICs.
    spec.hybrid = Hybrid(28);
    spec.allow_unsafe_atomics = false;
    assert_clean(&s, &run_txns(&spec).unwrap());
}

/// One-sided MVCC across two data centers (nodes 0-1 and 2-3) joined by a lossy, jittery RDMA
/// link. LOCK posts an unsignaled CAS and a signaled READ on one QP; a lost CAS waited for its
/// retransmission and the smaller READ behind it landed first, so its completion came before
/// the CAS result ("MVCC CAS on the lock reply lost"). Each QP's order holds now: no
/// coordinator fails and every run is clean.
#[test]
fn one_sided_locks_survive_a_lossy_inter_dc_link() {
    for (delay, jitter_us, loss) in [(Delay::Constant(30.0), 0.0, 0.05), (Delay::Uniform(5.0, 45.0), 10.0, 0.01)] {
        for seed in [1, 2] {
            let s = Shape {
                nodes: 4,
                duration_ns: 1_000_000,
                ..shape(W::YcsbHigh, Hybrid::full(mvcc::STAGES.as_slice()), seed)
            };
            let mut spec = s.spec();
            let link = WanLink {
                delay: delay.clone(),
                jitter_us,
                loss,
                gbps: None,
                transport: WanTransport::Rdma,
                retransmit_us: None,
            };
            spec.wan = Some(Wan { dcs: 2, dc_of: vec![0, 0, 1, 1], links: vec![link; 4] });
            let r = run_txns(&spec).unwrap_or_else(|e| panic!("{e}\n{}", s.replay()));
            let what = format!("{delay:?} + jitter {jitter_us} us, loss {loss}: {}", s.replay());
            assert!(r.failures.is_empty(), "{what}: {:?}", r.failures.first());
            assert_clean(&s, &r);
        }
    }
}
