//! The store and index in registered memory, traversed by one-sided READs on the simulator.

use std::cell::RefCell;
use std::rc::Rc;

use rand::Rng;
use txbed_tests::{cell, small_sim};
use txbed_transport::*;
use txbed_txn::locate::{locate, Catalog, LocationCache};
use txbed_txn::store::{self, Layout, Slot, TableSpec, META_BYTES};

const ROWS: u64 = 20_000;

fn key(node: u16, i: u64) -> u64 {
    (node as u64) << 40 | (i * 7 + 3)
}

fn initial(k: u64, record: &mut [u8]) {
    record.copy_from_slice(&k.to_le_bytes());
}

/// A 3-node store of one table (8-byte records) at the given bucket occupancy.
fn setup(load_factor: f64) -> (txbed_sim::Sim, Rc<Catalog>) {
    let mut sim = small_sim(3, 1, 5, |_| {});
    let layout = Layout::new(&[TableSpec { id: 1, record_bytes: 8, rows_per_node: ROWS }], load_factor);
    let mut regions = Vec::new();
    for n in 0..3u16 {
        let mr = sim.register_region(n, layout.bytes);
        let keys: Vec<u64> = (0..ROWS).map(|i| key(n, i)).collect();
        let keys = store::Keys::List(keys);
        let used =
            store::load_table(&*sim.memory(n), mr, &layout.tables[0], keys, Rc::new(initial), &Default::default())
                .unwrap();
        assert!(used.is_some(), "indirect pool exhausted at load factor {load_factor}");
        regions.push(mr);
    }
    (sim, Rc::new(Catalog { layout, regions }))
}

/// Looks up `n` random remote keys twice from node 0; returns READs per lookup per pass.
fn lookups(load_factor: f64, cache_bytes: u64, n: usize) -> (f64, f64) {
    let (mut sim, cat) = setup(load_factor);
    let out = cell::<Vec<f64>>();
    let o = out.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let cache = RefCell::new(LocationCache::new(cache_bytes));
        let s = ctx.scratch();
        let picks: Vec<(u16, u64)> =
            (0..n).map(|_| ctx.with_rng(|r| (r.gen_range(1..3u16), r.gen_range(0..ROWS)))).collect();
        for _pass in 0..2 {
            let mut reads = 0;
            for &(node, i) in &picks {
                let k = key(node, i);
                let loc = locate(&ctx, &cat, &cache, s, node, 1, k).await.expect("key exists");
                reads += loc.reads;
                // The tuple holds the key's record.
                let qp = ctx.rc_qp(NodeId(node), 0).unwrap();
                let len = cat.layout.tables[0].tuple_bytes as u32;
                ctx.post(
                    qp,
                    [(Op::Read { local: LocalBuf { len, ..s }, remote: cat.remote(node, loc.offset, len) }, true)],
                )
                .unwrap();
                ctx.wait().await.unwrap();
                let mut t = vec![0u8; len as usize];
                ctx.read_local(s.addr, &mut t).unwrap();
                assert!(loc.is_current(&t));
                assert_eq!(&t[META_BYTES as usize..META_BYTES as usize + 8], &k.to_le_bytes());
            }
            o.borrow_mut().push(reads as f64 / n as f64);
        }
    });
    sim.run_until(10_000_000_000);
    let v = out.borrow();
    (v[0], v[1])
}

#[test]
fn one_sided_lookups_find_every_record_in_about_one_read() {
    // DrTM Table VI (uniform keys, cluster hashing): 1.052 READs at 75%, 1.100 at 90%.
    let (first, second) = lookups(0.75, 0, 2000);
    assert!((1.0..1.1).contains(&first), "READs per lookup at 75%: {first}");
    assert_eq!(first, second, "no cache: same cost twice");
    let (first, _) = lookups(0.9, 0, 2000);
    assert!(first > 1.02 && first < 1.2, "READs per lookup at 90%: {first}");
}

#[test]
fn location_cache_removes_index_reads() {
    let (first, second) = lookups(0.75, 64 << 20, 2000);
    assert!(first > 0.9, "cold cache {first}");
    // Direct-mapped (as DrTM's): a few buckets collide and are re-read.
    assert!(second < 0.02, "warm cache still read the index: {second} READs per lookup");
}

/// A re-inserted key (new incarnation) is caught through a stale cached bucket and found
/// again; absent keys are reported.
#[test]
fn stale_cache_entries_are_detected() {
    let (mut sim, cat) = setup(0.75);
    let k = key(1, 42);
    let log = cell::<Vec<String>>();
    let l = log.clone();
    let c2 = cat.clone();
    // Node 1 re-inserts key k (incarnation 2) at time 100 us, in place.
    let mem1 = sim.memory(1);
    sim.spawn(0, 0, move |ctx| async move {
        let cache = RefCell::new(LocationCache::new(1 << 20));
        let s = ctx.scratch();
        let loc = locate(&ctx, &c2, &cache, s, 1, 1, k).await.unwrap();
        l.borrow_mut().push(format!("first inc {} reads {}", loc.incarnation, loc.reads));
        ctx.sleep(200_000).await;
        let loc = locate(&ctx, &c2, &cache, s, 1, 1, k).await.unwrap();
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let len = c2.layout.tables[0].tuple_bytes as u32;
        let read_tuple = |loc: &txbed_txn::locate::Located| {
            (Op::Read { local: LocalBuf { len, ..s }, remote: c2.remote(1, loc.offset, len) }, true)
        };
        ctx.post(qp, [read_tuple(&loc)]).unwrap();
        ctx.wait().await.unwrap();
        let mut t = vec![0u8; len as usize];
        ctx.read_local(s.addr, &mut t).unwrap();
        let current = loc.is_current(&t);
        l.borrow_mut().push(format!("cached inc {} reads {} current {current}", loc.incarnation, loc.reads));
        if !current {
            cache.borrow_mut().invalidate(1, 1, &loc.chain);
            let again = locate(&ctx, &c2, &cache, s, 1, 1, k).await.unwrap();
            l.borrow_mut().push(format!("again inc {} reads {}", again.incarnation, again.reads));
        }
        let missing = locate(&ctx, &c2, &cache, s, 1, 1, key(2, 5)).await;
        l.borrow_mut().push(format!("{:?}", missing.err()));
    });
    sim.run_until(100_000);
    // Re-insert: bump the tuple's incarnation and the slot's lossy copy.
    let place = &cat.layout.tables[0];
    let base = cat.regions[1].addr;
    let mut off = place.buckets_at + store::bucket_of(k, place.buckets) * store::BUCKET_BYTES;
    'walk: loop {
        for i in 0..8u64 {
            let mut b = [0u8; 16];
            mem1.read(base + off + i * 16, &mut b).unwrap();
            match store::decode_slot(&b) {
                Slot::Entry { key: kk, offset, .. } if kk == k => {
                    mem1.write(
                        base + off + i * 16,
                        &store::encode_slot(Slot::Entry { key: k, offset, incarnation: 2 }),
                    )
                    .unwrap();
                    mem1.store_u64(base + offset + store::VERSION, store::version_word(2, 0)).unwrap();
                    break 'walk;
                }
                Slot::Link { offset } => {
                    off = offset;
                    continue 'walk;
                }
                _ => {}
            }
        }
        panic!("key not in its chain");
    }
    sim.run_until(10_000_000);
    let log = log.borrow();
    assert_eq!(log[0], "first inc 1 reads 1");
    assert_eq!(log[1], "cached inc 1 reads 0 current false");
    assert!(log[2].starts_with("again inc 2 reads "), "{log:?}");
    assert!(log[3].contains("NotFound"), "{log:?}");
    let _ = txbed_txn::TxnError::UnknownTable(0);
}

/// Per record, the store costs RCC's tuple (lock | seq | record) plus at most 32 bytes.
#[test]
fn store_costs_at_most_32_bytes_per_record_beyond_the_tuple() {
    for record in [8u32, 64, 1000] {
        let rows = 100_000;
        let layout = Layout::new(&[TableSpec { id: 0, record_bytes: record, rows_per_node: rows }], store::LOAD_FACTOR);
        let rcc_tuple = 16 + record.div_ceil(8) as u64 * 8;
        let extra = layout.bytes as f64 / rows as f64 - rcc_tuple as f64;
        assert!(extra < 32.0, "{record} B records: {extra:.1} B of bookkeeping per record");
    }
}
