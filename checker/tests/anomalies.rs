//! The checker on hand-built histories, one per anomaly, and on generated ones.

use proptest::prelude::*;
use txbed_checker::history::generate_serial;
use txbed_checker::*;

mod common;
use common::{a, history, txn};

fn kinds(r: &Report) -> Vec<AnomalyKind> {
    r.anomalies.iter().map(|a| a.kind).collect()
}

#[test]
fn serial_history_is_serializable() {
    let h = history(vec![txn(1, &[a(1, 0)], &[a(1, 1)]), txn(2, &[a(1, 1)], &[a(1, 2), a(2, 1)])]);
    let r = check(&h, &Options::default());
    assert!(r.serializable, "{:?}", r.anomalies);
    assert!(r.anomalies.is_empty());
    assert_eq!(r.committed, 2);
}

#[test]
fn g0_write_cycle() {
    // x: T1 then T2; y: T2 then T1.
    let h = history(vec![txn(1, &[], &[a(1, 1), a(2, 2)]), txn(2, &[], &[a(1, 2), a(2, 1)])]);
    let r = check(&h, &Options::default());
    assert!(!r.serializable);
    assert_eq!(kinds(&r), vec![AnomalyKind::G0]);
    let e = &r.anomalies[0].explanation;
    assert!(e.contains("G0 cycle of 2 transactions"), "{e}");
    assert!(e.contains("(ww)") && e.contains("key 1") && e.contains("key 2"), "{e}");
}

#[test]
fn g1c_circular_information_flow() {
    let h = history(vec![txn(1, &[a(2, 1)], &[a(1, 1)]), txn(2, &[a(1, 1)], &[a(2, 1)])]);
    let r = check(&h, &Options::default());
    assert_eq!(kinds(&r), vec![AnomalyKind::G1c]);
    assert!(r.anomalies[0].explanation.contains("(wr)"));
}

#[test]
fn g_single_read_skew() {
    // T1 reads x0, T2 writes x1 and y1, T1 reads y1.
    let h = history(vec![txn(1, &[a(1, 0), a(2, 1)], &[]), txn(2, &[], &[a(1, 1), a(2, 1)])]);
    let r = check(&h, &Options::default());
    assert_eq!(kinds(&r), vec![AnomalyKind::GSingle]);
    let e = &r.anomalies[0].explanation;
    assert!(e.contains("read key 1 version 0") && e.contains("(rw)") && e.contains("(wr)"), "{e}");
}

#[test]
fn g2_write_skew() {
    let h = history(vec![txn(1, &[a(1, 0), a(2, 0)], &[a(1, 1)]), txn(2, &[a(1, 0), a(2, 0)], &[a(2, 1)])]);
    let r = check(&h, &Options::default());
    assert_eq!(kinds(&r), vec![AnomalyKind::G2Item]);
    assert_eq!(r.anomalies[0].explanation.matches("(rw)").count(), 2);
}

#[test]
fn g1a_aborted_read() {
    let mut t1 = txn(1, &[], &[a(1, 1)]);
    t1.status = Status::Aborted;
    let h = history(vec![t1, txn(2, &[a(1, 1)], &[])]);
    let r = check(&h, &Options::default());
    assert_eq!(kinds(&r), vec![AnomalyKind::G1a]);
    assert!(r.anomalies[0].explanation.contains("aborted"));
    assert_eq!(r.aborted, 1);
}

#[test]
fn g1b_intermediate_read() {
    let h = history(vec![txn(1, &[], &[a(1, 1), a(1, 2)]), txn(2, &[a(1, 1)], &[])]);
    let r = check(&h, &Options::default());
    assert!(kinds(&r).contains(&AnomalyKind::G1b), "{:?}", r.anomalies);
}

#[test]
fn unknown_and_duplicate_versions() {
    let h = history(vec![txn(1, &[a(9, 5)], &[]), txn(2, &[], &[a(1, 1)]), txn(3, &[], &[a(1, 1)])]);
    let r = check(&h, &Options::default());
    assert!(!r.serializable);
    let k = kinds(&r);
    assert!(k.contains(&AnomalyKind::UnknownVersion) && k.contains(&AnomalyKind::DuplicateVersion), "{k:?}");
}

#[test]
fn lost_write_on_a_backup() {
    let mut h = history(vec![txn(1, &[], &[a(1, 1)]), txn(2, &[a(1, 1)], &[a(1, 2)])]);
    h.finals = vec![
        Final { replica: "primary".into(), key: 1, version: 2 },
        Final { replica: "backup-1".into(), key: 1, version: 1 },
    ];
    let r = check(&h, &Options::default());
    assert!(r.serializable);
    assert_eq!(r.nothing_lost, Some(false));
    assert_eq!(kinds(&r), vec![AnomalyKind::LostWrite]);
    assert!(r.anomalies[0].explanation.contains("backup-1"));
    h.finals[1].version = 2;
    assert_eq!(check(&h, &Options::default()).nothing_lost, Some(true));
}

proptest! {
    /// Every replica's final store against the last committed writes, as maps would compare
    /// them: the checker merges sorted lists instead (a TPC-C run lists millions of finals).
    /// Replicas miss keys, hold wrong or extra versions, and list keys twice (the later wins).
    #[test]
    fn final_stores_are_compared_key_by_key(
        writes in proptest::collection::vec(0u64..12, 1..40),
        finals in proptest::collection::vec((0usize..3, 0u64..14, 0u64..6), 1..60),
        stale_reader in proptest::option::of(0u64..12),
    ) {
        let mut latest: std::collections::BTreeMap<u64, u64> = Default::default();
        let mut txns: Vec<_> = writes
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let v = latest.entry(k).or_insert(0);
                *v += 1;
                txn(i as u64 + 1, &[], &[a(k, *v)])
            })
            .collect();
        // A read of a key's initial version after its writes: not serial in commit order,
        // so the checker takes the long way to the last writes.
        if let Some(k) = stale_reader.filter(|k| latest.contains_key(k)) {
            txns.push(txn(writes.len() as u64 + 1, &[a(k, 0)], &[]));
        }
        let mut h = history(txns);
        let names = ["primary", "backup1", "backup2"];
        h.finals = finals.iter().map(|&(r, key, version)| Final { replica: names[r].into(), key, version }).collect();
        let mut stores: std::collections::BTreeMap<&str, std::collections::BTreeMap<u64, u64>> = Default::default();
        for f in &h.finals {
            stores.entry(f.replica.as_str()).or_default().insert(f.key, f.version);
        }
        let mut lost = 0;
        for keys in stores.values() {
            lost += latest.iter().filter(|&(k, v)| keys.get(k) != Some(v)).count();
            lost += keys.iter().filter(|&(k, &v)| v != 0 && !latest.contains_key(k)).count();
        }
        let r = check(&h, &Options::default());
        prop_assert_eq!(r.counts.get("lost-write").copied().unwrap_or(0), lost);
        prop_assert_eq!(r.nothing_lost, Some(lost == 0));
    }
}

#[test]
fn invariants_are_reported() {
    let mut h = history(vec![txn(1, &[], &[a(1, 1)])]);
    h.invariants.push(Invariant { name: "total balance".into(), expected: 100, actual: 90 });
    let r = check(&h, &Options::default());
    assert!(!r.invariants_ok && r.serializable);
    assert!(r.anomalies[0].explanation.contains("total balance"));
}

/// T1 ends before T2 starts, yet T2 must come first (it read what T1 overwrote): serializable,
/// not strictly serializable.
#[test]
fn real_time_violation_needs_strict() {
    let mut t1 = txn(1, &[], &[a(1, 1)]);
    let mut t2 = txn(2, &[a(1, 0)], &[]);
    (t1.start_ns, t1.end_ns, t2.start_ns, t2.end_ns) = (0, 10, 20, 30);
    let h = history(vec![t1, t2]);
    let plain = check(&h, &Options::default());
    assert!(plain.serializable && plain.strict_serializable.is_none());
    let strict = check(&h, &Options { level: Level::StrictSerializable, ..Default::default() });
    assert!(strict.serializable);
    assert_eq!(strict.strict_serializable, Some(false));
    assert_eq!(kinds(&strict), vec![AnomalyKind::RealTime]);
    assert!(strict.anomalies[0].explanation.contains("ended (at 10 ns) before"), "{}", strict.anomalies[0].explanation);
    // Overlapping in time: no real-time order, so strict holds.
    let mut h2 = h.clone();
    h2.txns[1].start_ns = 5;
    assert_eq!(
        check(&h2, &Options { level: Level::StrictSerializable, ..Default::default() }).strict_serializable,
        Some(true)
    );
}

#[test]
fn history_files_round_trip_and_bad_lines_are_named() {
    let mut h = generate_serial(50, 10, 3);
    h.invariants.push(Invariant { name: "x".into(), expected: 1, actual: 1 });
    let mut buf = Vec::new();
    h.write(&mut buf).unwrap();
    let back = History::read(&buf[..]).unwrap();
    assert_eq!(back.txns, h.txns);
    assert_eq!(back.finals, h.finals);
    let bad =
        b"{\"type\":\"txn\",\"id\":1,\"status\":\"committed\"}\n{\"type\":\"txn\",\"id\":2,\"status\":\"maybe\"}\n";
    let e = History::read(&bad[..]).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.to_string().contains("maybe"), "{e}");
    let e = History::read(&b"not json\n"[..]).unwrap_err();
    assert_eq!(e.line, 1);
    let dup =
        b"{\"type\":\"txn\",\"id\":1,\"status\":\"committed\"}\n{\"type\":\"txn\",\"id\":1,\"status\":\"aborted\"}\n\
        {\"type\":\"end\",\"txns\":2,\"committed\":1,\"aborted\":1,\"finals\":0,\"invariants\":0}\n";
    assert!(History::read(&dup[..]).unwrap_err().to_string().contains("twice"));
}

#[test]
fn elle_export_lists_every_value_up_to_the_version_read() {
    let h = history(vec![txn(1, &[], &[a(7, 1)]), txn(2, &[a(7, 1)], &[a(7, 2)]), txn(3, &[a(7, 2)], &[])]);
    let mut out = Vec::new();
    elle::write_list_append(&Flat::from_history(&h), &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let ops = v.as_array().unwrap();
    assert_eq!(ops.len(), 6);
    // Values name the writer: 16 * (position + 1).
    let t3_ok = ops
        .iter()
        .find(|o| o["type"] == "ok" && o["value"].as_array().unwrap().len() == 1 && o["value"][0][0] == "r")
        .unwrap();
    assert_eq!(t3_ok["value"][0], serde_json::json!(["r", 7, [16, 32]]));
    assert!(ops.iter().any(|o| o["value"] == serde_json::json!([["append", 7, 16]]) && o["type"] == "ok"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Serial histories are always serializable, strictly too, with nothing lost.
    #[test]
    fn generated_serial_histories_pass(n in 1usize..400, keys in 2u64..50, seed in any::<u64>()) {
        let h = generate_serial(n, keys, seed);
        let r = check(&h, &Options { level: Level::StrictSerializable, ..Default::default() });
        prop_assert!(r.serializable, "{:?}", r.anomalies);
        prop_assert_eq!(r.strict_serializable, Some(true));
        prop_assert_eq!(r.nothing_lost, Some(true));
        prop_assert!(r.anomalies.is_empty());
    }

    /// Make an earlier transaction read a later one's write when the later one already read
    /// the earlier one's: a cycle the checker must find (G1c).
    #[test]
    fn injected_dependency_cycle_is_caught(n in 10usize..300, keys in 2u64..20, seed in any::<u64>(), pick in any::<prop::sample::Index>()) {
        let mut h = generate_serial(n, keys, seed);
        // Pairs (a, b): b read a version that a installed.
        let mut pairs = Vec::new();
        for (bi, b) in h.txns.iter().enumerate() {
            for r in &b.reads {
                if let Some(ai) = h.txns[..bi].iter().position(|t| t.writes.contains(r)) {
                    pairs.push((ai, bi));
                }
            }
        }
        prop_assume!(!pairs.is_empty());
        let (ai, bi) = pairs[pick.index(pairs.len())];
        let w = h.txns[bi].writes[0];
        h.txns[ai].reads.push(w);
        let r = check(&h, &Options::default());
        prop_assert!(!r.serializable);
        prop_assert!(r.anomalies.iter().any(|x| x.kind == AnomalyKind::G1c), "{:?}", r.anomalies);
    }
}
