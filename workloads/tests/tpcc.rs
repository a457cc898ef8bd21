//! TPC-C under the serial executor: the initial database and every run keep consistency
//! conditions 1-4, each transaction does what Clause 2 says, stale lookups are caught inside
//! the transaction, and a planted bug breaks a condition.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use txbed_workloads::tpcc::field::*;
use txbed_workloads::tpcc::*;
use txbed_workloads::*;

fn small() -> Tpcc {
    Tpcc {
        warehouses_per_node: 2,
        items: 200,
        customers_per_district: 30,
        order_headroom: 300,
        history_per_terminal: 8,
        ..Tpcc::default()
    }
}

const NODES: u16 = 2;

fn prepared(t: &Tpcc) -> PreparedTpcc {
    t.prepare(NODES, 1, 2)
}

fn get(v: &[u8], at: usize, n: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..n].copy_from_slice(&v[at..at + n]);
    u64::from_le_bytes(b)
}

/// Every consistency condition on every node, with the first violation of each.
fn violations(w: &PreparedTpcc, store: &SerialStore) -> Vec<String> {
    let mut out = Vec::new();
    for node in 0..NODES {
        let read = |k: Key, out: &mut Vec<u8>| {
            let mine = w.home(k, NODES) == node;
            if mine {
                *out = store.value(w, k);
            }
            mine
        };
        for c in w.check_consistency(node, NODES, &read) {
            assert!(c.checked > 0, "{} checked nothing", c.name);
            if c.violations > 0 {
                out.push(format!("{}: {}", c.name, c.first.unwrap_or_default()));
            }
        }
    }
    out
}

fn conserved(w: &PreparedTpcc, store: &SerialStore) -> i64 {
    let mut total = 0;
    for t in w.tables() {
        if t.id == WAREHOUSE || t.id == CUSTOMER {
            for row in 0..t.rows_per_node * NODES as u64 {
                let k = Key { table: t.id, row };
                total += w.conserved(k, &store.value(w, k));
            }
        }
    }
    total
}

#[test]
fn records_have_the_specification_row_lengths() {
    let w = prepared(&small());
    let lengths: BTreeMap<&str, u32> = w.tables().iter().map(|t| (t.name, t.record_bytes)).collect();
    let spec = [
        ("warehouse", 89),
        ("district", 95),
        ("customer", 655),
        ("history", 46),
        ("new-order", 8),
        ("order", 24),
        ("order-line", 54),
        ("item", 82),
        ("stock", 306),
    ];
    for (name, len) in spec {
        assert_eq!(lengths[name], len, "{name}");
    }
    for t in w.tables() {
        assert_eq!(w.initial(Key { table: t.id, row: 0 }).len(), t.record_bytes as usize, "{}", t.name);
    }
    // Warehouses partitioned: W per node; ITEM replicated on every node.
    assert_eq!(w.home(w.warehouse(1), NODES), 0);
    assert_eq!(w.home(w.warehouse(2), NODES), 1);
    assert_eq!(w.home(w.stock(3, 17), NODES), 1);
    assert_eq!(w.home(w.item(1, 5), NODES), 1);
    assert_eq!(w.home(w.order_line(2, 9, w.slots(), 15), NODES), 1);
}

#[test]
fn initial_database_meets_the_consistency_conditions() {
    for t in [small(), Tpcc { customers_per_district: 3000, items: 1000, order_headroom: 10, ..small() }] {
        let w = prepared(&t);
        let store = SerialStore::new();
        assert!(violations(&w, &store).is_empty(), "{:?}", violations(&w, &store));
        // Clause 4.3.3.1: orders 1..=3000, the last 900 undelivered; every last name once
        // among the first 1,000 customers.
        let d = store.value(&w, w.district(0, 0));
        assert_eq!(get(&d, D_NEXT_O_ID, 4), t.customers_per_district as u64 + 1);
        let undelivered = (1..=t.customers_per_district as u64)
            .filter(|&o| store.value(&w, w.new_order(0, 0, o))[NO_STATE] == NO_PRESENT)
            .count();
        assert_eq!(undelivered, t.customers_per_district as usize * 3 / 10);
        let c = store.value(&w, w.customer(0, 0, 7));
        assert_eq!(name_number(&c[C_LAST..C_LAST + 16]), Some(7));
    }
}

#[test]
fn full_mix_keeps_every_condition_and_the_money() {
    let w = prepared(&small());
    let mut store = SerialStore::new();
    let before = conserved(&w, &store);
    let mut r = ChaCha8Rng::seed_from_u64(1);
    let mut kinds: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for seq in 0..3000u64 {
        let node = (seq % NODES as u64) as u16;
        let t = w.generate_at(&mut r, node, NODES, Terminal { worker: 0, coroutine: (seq % 2) as u32, seq });
        let (resolved, out) = store.run_drawn(&w, &t).unwrap();
        let e = kinds.entry(t.kind).or_default();
        match out {
            Executed::Commit { .. } => e.0 += 1,
            Executed::UserAbort => {
                // Serially, answers are never stale: only new-order's invalid item aborts.
                assert!(!w.retry_on_user_abort(&resolved), "{} aborted serially: {resolved:?}", t.kind);
                e.1 += 1;
            }
            Executed::Wait(why) => panic!("{} waited serially ({why}): {resolved:?}", t.kind),
        }
    }
    let total: u32 = kinds.values().map(|v| v.0 + v.1).sum();
    for (k, pct) in KINDS.iter().zip([45, 43, 4, 4, 4]) {
        let got = (kinds[k].0 + kinds[k].1) as f64 / total as f64 * 100.0;
        assert!((got - pct as f64).abs() < 3.0, "{k}: {got:.1}% vs {pct}%");
    }
    let (no, aborted) = kinds["new-order"];
    assert!(
        aborted > 0 && (aborted as f64) < 0.03 * (no + aborted) as f64,
        "invalid items: {aborted} of {}",
        no + aborted
    );
    assert!(violations(&w, &store).is_empty(), "{:?}", violations(&w, &store));
    assert_eq!(conserved(&w, &store), before, "W_YTD - C_YTD_PAYMENT changed");
}

#[test]
fn new_order_inserts_the_next_order_and_only_new_orders_run_when_asked() {
    let t = Tpcc { new_order_only: true, ..small() };
    let w = prepared(&t);
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(2);
    let mut committed = 0;
    for seq in 0..400 {
        let spec = w.generate_at(&mut r, 0, NODES, Terminal { seq, ..Terminal::default() });
        assert_eq!(spec.kind, "new-order");
        let (wh, d) = (spec.params[0] as u64, spec.params[1] as u64);
        let next = get(&store.value(&w, w.district(wh, d)), D_NEXT_O_ID, 4);
        let (resolved, out) = store.run_drawn(&w, &spec).unwrap();
        assert_eq!(*resolved.params.last().unwrap() as u64, next, "the lookup named D_NEXT_O_ID");
        let after = get(&store.value(&w, w.district(wh, d)), D_NEXT_O_ID, 4);
        if let Executed::Commit { .. } = out {
            committed += 1;
            assert_eq!(after, next + 1);
            let o = store.value(&w, w.order(wh, d, next));
            assert_eq!(get(&o, O_ID, 4), next);
            assert_eq!(get(&o, O_C_ID, 2), spec.params[2] as u64 + 1);
            let lines = get(&o, O_OL_CNT, 1);
            assert!((5..=15).contains(&lines));
            let l = store.value(&w, w.order_line(wh, d, next, lines));
            assert_eq!(get(&l, OL_NUMBER, 1), lines);
            assert_eq!(store.value(&w, w.new_order(wh, d, next))[NO_STATE], NO_PRESENT);
        } else {
            assert_eq!(after, next, "a rolled-back new-order leaves the district alone");
            assert_eq!(spec.params[3], 1, "only the invalid item aborts");
        }
    }
    assert!(committed > 350);
    assert!(violations(&w, &store).is_empty(), "{:?}", violations(&w, &store));
}

#[test]
fn stale_lookups_are_caught_inside_the_transaction() {
    let w = prepared(&Tpcc { new_order_only: true, ..small() });
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(3);
    // Two new-orders on one district: resolve both, run the first, then the second is stale.
    let draw = |r: &mut ChaCha8Rng| loop {
        let s = w.generate(r, 0, NODES);
        if s.params[0] == 0 && s.params[1] == 4 && s.params[3] == 0 {
            return s;
        }
    };
    let (a, b) = (draw(&mut r), draw(&mut r));
    let (ra, rb) = (store.resolve(&w, &a).unwrap(), store.resolve(&w, &b).unwrap());
    assert_eq!(ra.params.last(), rb.params.last(), "both were told the same order id");
    assert!(matches!(store.run(&w, &ra), Executed::Commit { .. }));
    assert_eq!(store.run(&w, &rb), Executed::UserAbort);
    assert!(w.retry_on_user_abort(&rb), "a stale order id is a conflict to retry, not a user abort");
    // Resolved again, it commits with the next id.
    let (rb2, out) = store.run_drawn(&w, &b).unwrap();
    assert!(matches!(out, Executed::Commit { .. }));
    assert_eq!(*rb2.params.last().unwrap(), *ra.params.last().unwrap() + 1);
}

/// Draws specs of one kind (on node 0, warehouse 0) until `keep` says yes.
fn draw_kind(w: &PreparedTpcc, r: &mut ChaCha8Rng, kind: &str, keep: impl Fn(&TxnSpec) -> bool) -> TxnSpec {
    loop {
        let s = w.generate(r, 0, NODES);
        if s.kind == kind && s.params[0] == 0 && keep(&s) {
            return s;
        }
    }
}

#[test]
fn delivery_takes_the_oldest_orders_in_order_and_stale_ones_retry() {
    let w = prepared(&small());
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(4);
    let first = 30 - 30 * 3 / 10 + 1;
    for k in 0..3u64 {
        let s = draw_kind(&w, &mut r, "delivery", |_| true);
        let balance = get(&store.value(&w, w.customer(0, 3, 0)), C_BALANCE, 8);
        let _ = balance;
        let (resolved, out) = store.run_drawn(&w, &s).unwrap();
        assert!(matches!(out, Executed::Commit { .. }), "{resolved:?}");
        for d in 0..10 {
            let o = first + k;
            assert_eq!(store.value(&w, w.new_order(0, d, o))[NO_STATE], NO_DELIVERED, "district {d} order {o}");
            assert_eq!(store.value(&w, w.new_order(0, d, o + 1))[NO_STATE], NO_PRESENT);
            let carrier = get(&store.value(&w, w.order(0, d, o)), O_CARRIER_ID, 1);
            assert_eq!(carrier, s.params[1] as u64);
            assert_ne!(get(&store.value(&w, w.order_line(0, d, o, 1)), OL_DELIVERY_D, 4), 0);
        }
    }
    // Two deliveries resolved together: the second one's oldest orders are gone.
    let (a, b) = (draw_kind(&w, &mut r, "delivery", |_| true), draw_kind(&w, &mut r, "delivery", |_| true));
    let (ra, rb) = (store.resolve(&w, &a).unwrap(), store.resolve(&w, &b).unwrap());
    assert!(matches!(store.run(&w, &ra), Executed::Commit { .. }));
    assert_eq!(store.run(&w, &rb), Executed::UserAbort);
    assert!(w.retry_on_user_abort(&rb));
    assert!(violations(&w, &store).is_empty(), "{:?}", violations(&w, &store));
}

#[test]
fn delivery_skips_districts_without_new_orders() {
    let w = prepared(&Tpcc { customers_per_district: 10, ..small() });
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(5);
    // 3 undelivered orders per district: 5 deliveries empty them and 2 find nothing.
    for _ in 0..5 {
        let s = draw_kind(&w, &mut r, "delivery", |_| true);
        let (resolved, out) = store.run_drawn(&w, &s).unwrap();
        assert!(matches!(out, Executed::Commit { .. }), "{resolved:?}");
    }
    for d in 0..10 {
        for o in 1..=10 {
            assert_eq!(store.value(&w, w.new_order(0, d, o))[NO_STATE], NO_DELIVERED);
        }
    }
    // A new order after that is delivered by the next delivery.
    let no = draw_kind(&w, &mut r, "new-order", |s| s.params[1] == 2 && s.params[3] == 0);
    assert!(matches!(store.run_drawn(&w, &no).unwrap().1, Executed::Commit { .. }));
    let s = draw_kind(&w, &mut r, "delivery", |_| true);
    assert!(matches!(store.run_drawn(&w, &s).unwrap().1, Executed::Commit { .. }));
    assert_eq!(store.value(&w, w.new_order(0, 2, 11))[NO_STATE], NO_DELIVERED);
    assert!(violations(&w, &store).is_empty(), "{:?}", violations(&w, &store));
}

#[test]
fn order_status_finds_the_newest_order_by_id_and_by_name() {
    let w = prepared(&small());
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(6);
    // A new order for customer 5 of district 1, then order-status for that customer.
    let no = draw_kind(&w, &mut r, "new-order", |s| s.params[1] == 1 && s.params[3] == 0);
    let mut no = no;
    no.params[2] = 5;
    let (resolved, out) = store.run_drawn(&w, &no).unwrap();
    assert!(matches!(out, Executed::Commit { .. }));
    let o = *resolved.params.last().unwrap();
    for by_name in [0, 1] {
        // Customers 0..30 have last names 0..30, each once.
        let os = TxnSpec {
            kind: "order-status",
            reads: vec![],
            writes: vec![],
            params: vec![0, 1, by_name, 5],
            compute_ns: 0,
        };
        let (resolved, out) = store.run_drawn(&w, &os).unwrap();
        assert!(matches!(out, Executed::Commit { .. }));
        assert_eq!(resolved.params[4..6], [5, o], "customer 5's newest order");
    }
    // Another new order for the same customer makes an earlier answer stale.
    let os = TxnSpec { kind: "order-status", reads: vec![], writes: vec![], params: vec![0, 1, 0, 5], compute_ns: 0 };
    let stale = store.resolve(&w, &os).unwrap();
    assert!(matches!(store.run_drawn(&w, &no).unwrap().1, Executed::Commit { .. }));
    assert_eq!(store.run(&w, &stale), Executed::UserAbort);
    assert!(w.retry_on_user_abort(&stale));
}

#[test]
fn payment_by_last_name_picks_the_middle_customer_by_first_name() {
    // 3,000 customers: names 0..999 once each among the first 1,000, then NURand.
    let w = prepared(&Tpcc { customers_per_district: 3000, items: 200, order_headroom: 10, ..small() });
    let store = SerialStore::new();
    let mut index = OrderedIndex::default();
    let read = |k: Key| Some(store.value(&w, k));
    let mut by_name: BTreeMap<u64, Vec<(Vec<u8>, u64)>> = BTreeMap::new();
    for c in 0..3000 {
        let v = store.value(&w, w.customer(1, 2, c));
        let n = name_number(&v[C_LAST..C_LAST + 16]).unwrap();
        by_name.entry(n).or_default().push((v[C_FIRST..C_FIRST + 16].to_vec(), c));
    }
    for (name, mut list) in by_name.into_iter().take(40) {
        list.sort();
        let want = list[list.len().div_ceil(2) - 1].1;
        let spec = TxnSpec {
            kind: "payment",
            reads: vec![],
            writes: vec![],
            params: vec![1, 2, 1, 2, 1, name as i64, 500, 0],
            compute_ns: 0,
        };
        let l = &w.lookups(&spec)[0];
        let got = w.answer(&l.args, &mut index, &read);
        assert_eq!(got, vec![want as i64], "name {name}: {} customers", list.len());
    }
}

#[test]
fn stock_level_reads_the_last_twenty_orders_lines() {
    let w = prepared(&small());
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(7);
    let s = draw_kind(&w, &mut r, "stock-level", |_| true);
    let (resolved, out) = store.run_drawn(&w, &s).unwrap();
    assert!(matches!(out, Executed::Commit { .. }));
    let d = s.params[1] as u64;
    let lines: u64 = (11..=30).map(|o| get(&store.value(&w, w.order(0, d, o)), O_OL_CNT, 1)).sum();
    let stock = resolved.reads.iter().filter(|k| k.table == STOCK).count() as u64;
    let ol = resolved.reads.iter().filter(|k| k.table == ORDER_LINE).count() as u64;
    assert!(stock > 0 && stock <= lines, "{stock} stock rows for {lines} lines");
    assert!(ol >= lines && ol <= lines + 20, "order lines {ol} for {lines}");
    // A new order in the district makes the answer stale.
    let stale = store.resolve(&w, &s).unwrap();
    let no = draw_kind(&w, &mut r, "new-order", |x| x.params[1] == d as i64 && x.params[3] == 0);
    assert!(matches!(store.run_drawn(&w, &no).unwrap().1, Executed::Commit { .. }));
    assert_eq!(store.run(&w, &stale), Executed::UserAbort);
}

#[test]
fn remote_fractions_and_the_distributed_knob() {
    let w = prepared(&Tpcc { warehouses_per_node: 4, ..small() });
    let mut r = ChaCha8Rng::seed_from_u64(8);
    let (mut lines, mut remote_lines, mut pays, mut remote_pays) = (0u32, 0u32, 0u32, 0u32);
    for _ in 0..20_000 {
        let s = w.generate(&mut r, 1, NODES);
        let home = s.params[0];
        assert!((4..8).contains(&home), "home warehouse on the coordinator's node");
        match s.kind {
            "new-order" => {
                for k in 0..s.params[4] as usize {
                    lines += 1;
                    remote_lines += (s.params[6 + 3 * k] != home) as u32;
                }
            }
            "payment" => {
                pays += 1;
                remote_pays += (s.params[2] != home) as u32;
            }
            _ => {}
        }
    }
    let (fl, fp) = (remote_lines as f64 / lines as f64, remote_pays as f64 / pays as f64);
    assert!((fl - 0.01).abs() < 0.003, "remote items {fl}");
    assert!((fp - 0.15).abs() < 0.015, "remote payments {fp}");
    // Always distributed: every new-order has a line supplied from the other node.
    let w = prepared(&Tpcc { new_order_only: true, distributed: 1.0, ..small() });
    for _ in 0..2000 {
        let s = w.generate(&mut r, 0, NODES);
        let other = (0..s.params[4] as usize).any(|k| w.home(w.warehouse(s.params[6 + 3 * k] as u64), NODES) != 0);
        assert!(other, "{s:?}");
    }
}

#[test]
fn a_planted_lost_d_next_o_id_breaks_condition_two() {
    let w = prepared(&Tpcc { new_order_only: true, ..small() });
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(9);
    let s = draw_kind(&w, &mut r, "new-order", |s| s.params[3] == 0);
    let before = store.value(&w, w.district(0, s.params[1] as u64));
    assert!(matches!(store.run_drawn(&w, &s).unwrap().1, Executed::Commit { .. }));
    // The district's write is lost: D_NEXT_O_ID falls behind the order just inserted.
    store.values.insert(w.district(0, s.params[1] as u64), before);
    let v = violations(&w, &store);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with("TPC-C 3.3.2.2") && v[0].contains("D_NEXT_O_ID - 1 = 30"), "{v:?}");
}

#[test]
fn generation_is_deterministic_and_nurand_skews() {
    let w = prepared(&Tpcc { items: 100_000, customers_per_district: 3000, order_headroom: 10, ..small() });
    let draw = |seed| {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        (0..200).map(|_| w.generate(&mut r, 1, NODES)).collect::<Vec<_>>()
    };
    assert_eq!(draw(11), draw(11));
    assert_ne!(draw(11), draw(12));
    // NURand(8191, 1, 100000): the item ids are skewed (some drawn far more than uniform).
    let mut r = ChaCha8Rng::seed_from_u64(13);
    let mut count: BTreeMap<i64, u32> = BTreeMap::new();
    let mut n = 0;
    while n < 100_000 {
        let s = w.generate(&mut r, 0, NODES);
        if s.kind == "new-order" {
            for k in 0..s.params[4] as usize {
                let i = s.params[5 + 3 * k];
                assert!((1..=100_000).contains(&i));
                *count.entry(i).or_default() += 1;
                n += 1;
            }
        }
    }
    let max = *count.values().max().unwrap();
    assert!(max > 20, "hottest item drawn {max} times in 100,000 (uniform: ~1)");
}

#[test]
fn each_worker_serves_its_share_of_the_warehouses() {
    let mut r = ChaCha8Rng::seed_from_u64(14);
    for (workers, expect) in
        [(4u16, [vec![4], vec![5], vec![6], vec![7]]), (2, [vec![4, 5], vec![6, 7], vec![], vec![]])]
    {
        let w = Tpcc { warehouses_per_node: 4, ..small() }.prepare(NODES, workers, 3);
        for (k, want) in expect.iter().enumerate().take(workers as usize) {
            let t = Terminal { worker: k as u16, coroutine: 1, seq: 0 };
            let mut seen: Vec<i64> = (0..200).map(|_| w.generate_at(&mut r, 1, NODES, t).params[0]).collect();
            seen.sort();
            seen.dedup();
            assert_eq!(seen, *want, "{workers} workers, worker {k}");
        }
    }
}

#[test]
fn unbound_workers_draw_every_warehouse_of_their_node() {
    let mut r = ChaCha8Rng::seed_from_u64(15);
    let w = Tpcc { warehouses_per_node: 4, home_warehouse: HomeWarehouse::Node, ..small() }.prepare(NODES, 4, 3);
    for k in 0..4 {
        let t = Terminal { worker: k, coroutine: 1, seq: 0 };
        let mut seen: Vec<i64> = (0..200).map(|_| w.generate_at(&mut r, 1, NODES, t).params[0]).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, [4, 5, 6, 7], "worker {k}");
    }
}

/// TPC-C's chopping (DrTM Sec. 4, Fig. 7): both analyses are free of SC-cycles; the default
/// one chops almost nothing (only new-order's item reads, which conflict with nothing, come
/// out, and first: they may abort); the optimized declarations chop more.
#[test]
fn tpcc_chopping_default_and_optimized() {
    use txbed_workloads::chopping::{describe, finest, sc_cycle};
    let default = chopping_templates(false);
    let optimized = chopping_templates(true);
    let (d, o) = (finest(&default), finest(&optimized));
    eprintln!("default:\n{}\noptimized:\n{}", describe(&default, &d), describe(&optimized, &o));
    assert_eq!(sc_cycle(&default, &d), None);
    assert_eq!(sc_cycle(&optimized, &o), None);
    let pieces = |c: &Vec<Vec<Vec<usize>>>| c.iter().map(|t| t.len()).sum::<usize>();
    assert!(pieces(&o) > pieces(&d), "{} vs {}", pieces(&o), pieces(&d));
    // New-order's item reads come first in both.
    for (ts, c) in [(&default, &d), (&optimized, &o)] {
        assert_eq!(c[0][0].iter().map(|&i| ts[0].ops[i].name).collect::<Vec<_>>(), ["read items"]);
    }
    // The optimized chopping is wrong without its declarations: the plain tables have cycles.
    assert!(sc_cycle(&default, &o).is_some(), "the optimized pieces need the declarations");
}

/// The optimized chopping's declarations hold in this workload's logic (they are what makes
/// it serializable, `chopping_templates`): over a serial full mix, W_TAX, D_TAX and
/// C_DISCOUNT never change; payment changes a warehouse only in W_YTD and a district only in
/// D_YTD, each by adding its amount (so two payments' increments commute); new-order changes
/// a district only in D_NEXT_O_ID (disjoint from D_YTD); its ORDER rows were empty (fresh
/// inserts).
#[test]
fn the_optimized_chopping_declarations_hold_in_the_logic() {
    let w = prepared(&small());
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(7);
    let only = |before: &[u8], after: &[u8], at: usize, len: usize| {
        before.iter().zip(after).enumerate().all(|(i, (a, b))| a == b || (at..at + len).contains(&i))
    };
    let i64_at = |v: &[u8], at: usize| i64::from_le_bytes(v[at..at + 8].try_into().unwrap());
    let mut checked = BTreeMap::<&str, u32>::new();
    for seq in 0..3000u64 {
        let node = (seq % NODES as u64) as u16;
        let t = w.generate_at(&mut r, node, NODES, Terminal { worker: 0, coroutine: (seq % 2) as u32, seq });
        let spec = store.resolve(&w, &t).unwrap();
        let before: Vec<Vec<u8>> = spec.writes.iter().map(|&k| store.value(&w, k)).collect();
        if !matches!(store.run(&w, &spec), Executed::Commit { .. }) {
            continue;
        }
        for (k, old) in spec.writes.iter().zip(&before) {
            let new = store.value(&w, *k);
            let what = format!("{} {k:?}", spec.kind);
            match (k.table, spec.kind) {
                (WAREHOUSE, "payment") => {
                    assert!(only(old, &new, W_YTD, 8), "{what}");
                    assert_eq!(i64_at(&new, W_YTD) - i64_at(old, W_YTD), spec.params[6], "{what}");
                }
                (DISTRICT, "payment") => {
                    assert!(only(old, &new, D_YTD, 8), "{what}");
                    assert_eq!(i64_at(&new, D_YTD) - i64_at(old, D_YTD), spec.params[6], "{what}");
                }
                (DISTRICT, _) => assert!(only(old, &new, D_NEXT_O_ID, 4), "{what}"),
                (CUSTOMER, _) => assert_eq!(old[C_DISCOUNT..C_DISCOUNT + 2], new[C_DISCOUNT..C_DISCOUNT + 2], "{what}"),
                (ORDER, "new-order") => assert_eq!(get(old, O_ID, 4), 0, "{what}: not a fresh row"),
                (WAREHOUSE, _) => panic!("{what}: only payment writes a warehouse"),
                (ITEM, _) => panic!("{what}: ITEM is constant"),
                _ => continue,
            }
            *checked.entry(spec.kind).or_default() += 1;
        }
    }
    assert!(
        checked.get("payment").is_some_and(|&n| n > 1000) && checked.get("new-order").is_some_and(|&n| n > 1000),
        "{checked:?}"
    );
}

/// What a chopped run executes (`run_chopping`): new-order `I | W+D+C+S+O+N+L` and the rest
/// whole by default; optimized new-order `I | W.tax | D+S+O+N+L | C.discount`, payment in
/// four and delivery `N+O+L | C.balance` with the balance deferred (Sec. 4.2); no SC-cycle.
#[test]
fn the_chopping_a_run_executes() {
    use txbed_workloads::chopping::{describe, sc_cycle};
    assert_eq!(run_chopping(Chopping::Off).unwrap(), Vec::<Vec<Vec<usize>>>::new());
    for (level, new, pay, dly) in [
        (Chopping::Default, "NEW: I | W+D+C+S+O+N+L", "PAY: W+D+C+H", "DLY: N+O+L+C"),
        (
            Chopping::Optimized,
            "NEW: I | W.tax | D.tax+D.next_o_id+S+O+N+L | C.discount",
            "PAY: W.ytd | D.ytd | C.balance+C.data | H",
            "DLY: N+O+L | C.balance+O.unpublished+L.amount",
        ),
    ] {
        let ts = run_templates(level == Chopping::Optimized);
        let chop = run_chopping(level).unwrap();
        let text = describe(&ts, &chop);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], new, "{level:?}\n{text}");
        assert_eq!(lines[1], pay, "{level:?}\n{text}");
        assert_eq!(lines[2], dly, "{level:?}\n{text}");
        assert_eq!(sc_cycle(&ts, &chop), None);
    }
}

/// A chopping with an SC-cycle is caught: new-order's stock updates cut from the district
/// piece (two new-orders can then see each other's stock and district in opposite orders).
#[test]
fn a_chopping_with_an_sc_cycle_is_caught() {
    use txbed_workloads::chopping::sc_cycle;
    for optimized in [false, true] {
        let ts = run_templates(optimized);
        let mut chop = run_chopping(if optimized { Chopping::Optimized } else { Chopping::Default }).unwrap();
        let with_stock = chop[0].iter().position(|p| p.contains(&4)).unwrap();
        chop[0][with_stock].retain(|&o| o != 4);
        chop[0].push(vec![4]);
        assert!(sc_cycle(&ts, &chop).is_some(), "optimized {optimized}: {chop:?}");
    }
}

/// Chopped, a transaction does what it does whole: over a serial full mix, running the
/// pieces in turn leaves the same database as running the transaction, every piece after
/// the first that writes commits, and the pieces split the records between them.
#[test]
fn pieces_in_turn_do_what_the_whole_transaction_does() {
    for level in [Chopping::Default, Chopping::Optimized] {
        let whole = prepared(&small());
        let chopped = prepared(&Tpcc { chopping: level, ..small() });
        let (mut a, mut b) = (SerialStore::new(), SerialStore::new());
        let mut r = ChaCha8Rng::seed_from_u64(11);
        let mut pieces_run = 0;
        for seq in 0..2000u64 {
            let node = (seq % NODES as u64) as u16;
            let t = whole.generate_at(&mut r, node, NODES, Terminal { worker: 0, coroutine: (seq % 2) as u32, seq });
            let spec = a.resolve(&whole, &t).unwrap();
            assert_eq!(b.resolve(&chopped, &t).unwrap(), spec);
            let out = a.run(&whole, &spec);
            let pieces = chopped.chop(&spec);
            if pieces.is_empty() {
                b.run(&chopped, &spec);
            } else {
                let mut keys: Vec<Key> = pieces.iter().flat_map(|p| p.reads.iter().chain(&p.writes)).copied().collect();
                let mut all: Vec<Key> = spec.reads.iter().chain(&spec.writes).copied().collect();
                keys.sort();
                keys.dedup();
                all.sort();
                all.dedup();
                assert_eq!(keys, all, "{spec:?}");
                let mut wrote = false;
                for p in &pieces {
                    pieces_run += 1;
                    match b.run(&chopped, p) {
                        Executed::Commit { .. } => wrote |= !p.writes.is_empty(),
                        Executed::UserAbort => {
                            assert!(!wrote, "a piece after one that wrote aborted: {p:?}");
                            assert_eq!(out, Executed::UserAbort, "{spec:?}");
                            break;
                        }
                        Executed::Wait(why) => panic!("a piece waited ({why}): {p:?}"),
                    }
                }
            }
            let same = spec.reads.iter().chain(&spec.writes).all(|&k| a.value(&whole, k) == b.value(&whole, k));
            assert!(same, "{level:?}: the stores differ after {spec:?}");
        }
        assert!(pieces_run > 1500, "{level:?}: {pieces_run} pieces");
        assert!(violations(&chopped, &b).is_empty());
    }
}

/// Sec. 4.2's premise for delivery's deferred balance (no C-path alone between publisher and
/// subscriber): it holds with payment the only other transaction on C_BALANCE, and fails
/// once order-status takes part, which reads the balance and the orders delivery writes
/// (joined by C-edges alone: delivery's order-line piece, order-status, payment's customer
/// piece). Sec. 4.4 runs read-only transactions apart, waiting for conflicting pieces; this
/// is why order-status waits out an unpublished order
/// (`a_deferred_balance_is_published_later_and_order_status_waits_for_it`).
#[test]
fn the_deferral_premise_holds_for_payment_and_fails_with_order_status() {
    use txbed_workloads::chopping::{deferral_premise, describe, finest};
    let ts = chopping_templates(true);
    let chop = finest(&ts);
    assert_eq!(deferral_premise(&ts, &chop), None, "{}", describe(&ts, &chop));
    let mut with_os = ts.clone();
    with_os.push(run_templates(true)[3].clone());
    assert_eq!(with_os[3].name, "OS");
    let mut chop_os = chop.clone();
    chop_os.push(vec![(0..with_os[3].ops.len()).collect()]);
    let (p, s) = deferral_premise(&with_os, &chop_os).expect("order-status joins delivery and payment");
    assert_eq!(with_os[p].name, "DLY");
    assert!(["PAY", "OS"].contains(&with_os[s].name), "{}", with_os[s].name);
}

/// Sec. 4.2 and 4.4 in the logic: delivery's first piece leaves its orders marked
/// unpublished, which the balance condition (3.3.2.10) reports while it lasts, and an
/// order-status of such an order waits (`Executed::Wait`); the deferred piece publishes the
/// balance, after which every condition holds and order-status no longer waits.
#[test]
fn a_deferred_balance_is_published_later_and_order_status_waits_for_it() {
    let cfg = Tpcc { chopping: Chopping::Optimized, mix: [0, 0, 0, 100, 0], ..small() };
    let w = prepared(&cfg);
    let os = prepared(&Tpcc { mix: [0, 0, 100, 0, 0], ..cfg.clone() });
    let mut store = SerialStore::new();
    let mut r = ChaCha8Rng::seed_from_u64(5);
    let t = w.generate_at(&mut r, 0, NODES, Terminal::default());
    let spec = store.resolve(&w, &t).unwrap();
    let pieces = w.chop(&spec);
    assert_eq!(pieces.len(), 2, "{pieces:?}");
    assert!(!w.deferred(&pieces[0]) && w.deferred(&pieces[1]));
    assert!(pieces[0].writes.iter().all(|k| k.table != CUSTOMER), "{:?}", pieces[0]);
    assert!(matches!(store.run(&w, &pieces[0]), Executed::Commit { .. }));
    let v = violations(&w, &store);
    assert!(v.iter().any(|x| x.contains("never published")), "{v:?}");
    let customers: Vec<Key> = spec.writes.iter().copied().filter(|k| k.table == CUSTOMER).collect();
    let order_status = |store: &mut SerialStore, r: &mut ChaCha8Rng| {
        let mut waited = 0;
        for seq in 0..3000 {
            let t = os.generate_at(r, 0, NODES, Terminal { worker: 0, coroutine: 0, seq });
            let s = store.resolve(&os, &t).unwrap();
            match store.run(&os, &s) {
                Executed::Wait(why) => {
                    assert_eq!(why, UNPUBLISHED);
                    assert!(s.reads.iter().any(|k| customers.contains(k)), "waited for another customer: {s:?}");
                    waited += 1;
                }
                Executed::Commit { .. } => {}
                Executed::UserAbort => panic!("order-status aborted serially: {s:?}"),
            }
        }
        waited
    };
    assert!(order_status(&mut store, &mut r) > 0, "no order-status met the unpublished orders");
    assert!(matches!(store.run(&w, &pieces[1]), Executed::Commit { .. }));
    assert_eq!(violations(&w, &store), Vec::<String>::new());
    assert_eq!(order_status(&mut store, &mut r), 0);
}
