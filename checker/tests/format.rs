//! History files: JSON Lines and binary round trips through `Flat`, the fast JSON path
//! agreeing with serde, and every rejection (empty, truncated, counts, trailing data, magic,
//! version, absurd lengths) with its message.

use proptest::prelude::*;
use txbed_checker::format::{self, Format, LAYOUT, MAGIC};
use txbed_checker::history::generate_serial;
use txbed_checker::{Access, Final, Flat, History, Invariant, PredicateRead, Status, Txn};

fn jsonl(h: &History) -> Vec<u8> {
    let mut b = Vec::new();
    h.write(&mut b).unwrap();
    b
}
fn binary(h: &History) -> Vec<u8> {
    let mut b = Vec::new();
    h.write_binary(&mut b).unwrap();
    b
}
fn read(b: &[u8]) -> Result<History, String> {
    format::read(b, Some(b.len() as u64)).map(|f| f.to_history()).map_err(|e| e.to_string())
}
fn read_err(b: &[u8]) -> String {
    match format::read(b, Some(b.len() as u64)) {
        Ok(_) => panic!("accepted: {}", String::from_utf8_lossy(b)),
        Err(e) => e.to_string(),
    }
}

/// Everything the format holds: labels (one with escapes), aborted transactions, predicate
/// reads, replicas, invariants, meta.
fn rich() -> History {
    let mut h = generate_serial(20, 5, 7);
    h.txns[3].label = "send-payment".into();
    h.txns[4].label = "quote \"x\" \\ \u{e9}".into();
    h.txns[5].status = Status::Aborted;
    h.txns[6].predicates = vec![
        PredicateRead { lo: 1, hi: 9, vset: vec![Access { key: 2, version: 1 }] },
        PredicateRead { lo: 0, hi: 0, vset: vec![] },
    ];
    h.txns[7].node = 65535;
    h.txns[7].coroutine = u32::MAX;
    h.txns[8].end_ns = u64::MAX;
    h.finals.push(Final { replica: "backup1".into(), key: 1, version: 3 });
    h.invariants.push(Invariant { name: "total".into(), expected: -5, actual: i64::MIN });
    h.meta.insert("scenario".into(), "t".into());
    h.meta.insert("replicas".into(), serde_json::json!(["primary", "backup1"]));
    h
}

#[test]
fn both_forms_round_trip_through_flat() {
    let h = rich();
    assert_eq!(read(&jsonl(&h)).unwrap(), h);
    assert_eq!(read(&binary(&h)).unwrap(), h);
    let f = Flat::from_history(&h);
    let mut a = Vec::new();
    format::write_jsonl_flat(&f, &mut a).unwrap();
    assert_eq!(a, jsonl(&h), "Flat and History write the same JSON Lines");
    let mut b = Vec::new();
    format::write_binary_flat(&f, &mut b).unwrap();
    assert_eq!(b, binary(&h));
    assert_eq!(format::read(&b[..], None).unwrap(), f);
    assert!(jsonl(&h)
        .ends_with(b"{\"type\":\"end\",\"txns\":20,\"committed\":19,\"aborted\":1,\"finals\":6,\"invariants\":1}\n"));
}

#[test]
fn streamed_generator_matches_generate_serial() {
    let h = generate_serial(1000, 50, 3);
    assert_eq!(format::generate_serial_flat(1000, 50, 3), Flat::from_history(&h));
    for fmt in [Format::Jsonl, Format::Binary] {
        let mut b = Vec::new();
        format::write_serial(&mut b, fmt, 1000, 50, 3).unwrap();
        assert_eq!(read(&b).unwrap(), h, "{fmt:?}");
    }
}

#[test]
fn fast_path_agrees_with_serde_on_spacing_order_and_escapes() {
    let h = rich();
    let text = String::from_utf8(jsonl(&h)).unwrap();
    // Spaces around every separator (no label here holds ':' or ','), and fields reordered.
    let spaced = text.replace(',', " , ").replace(':', " :\t").replace('{', "{ ");
    assert_eq!(read(spaced.as_bytes()).unwrap(), h);
    let reordered = text.replace("{\"type\":\"txn\",\"id\":0,\"node\":0,", "{\"node\":0,\"id\":0,\"type\":\"txn\",");
    assert_ne!(reordered, text);
    assert_eq!(read(reordered.as_bytes()).unwrap(), h);
    let swapped = text.replace("{\"key\":1,\"version\":1}", "{\"version\":1,\"key\":1}");
    assert_ne!(swapped, text);
    assert_eq!(read(swapped.as_bytes()).unwrap(), h);
}

const END1: &str = "{\"type\":\"end\",\"txns\":1,\"committed\":1,\"aborted\":0,\"finals\":0,\"invariants\":0}\n";

/// What serde refuses the fast path must refuse too, with serde's message and the line.
#[test]
fn bad_values_are_rejected_with_their_line() {
    let cases = [
        ("{\"type\":\"txn\",\"id\":1,\"id\":2,\"status\":\"committed\"}", "duplicate field"),
        ("{\"type\":\"txn\",\"id\":1,\"status\":\"committed\",\"colour\":1}", "unknown field"),
        ("{\"type\":\"txn\",\"id\":1,\"node\":70000,\"status\":\"committed\"}", "70000"),
        ("{\"type\":\"txn\",\"id\":01,\"status\":\"committed\"}", ""),
        ("{\"type\":\"txn\",\"id\":1.5,\"status\":\"committed\"}", "1.5"),
        ("{\"type\":\"txn\",\"id\":-1,\"status\":\"committed\"}", "-1"),
        ("{\"type\":\"txn\",\"id\":18446744073709551616,\"status\":\"committed\"}", ""),
        ("{\"type\":\"txn\",\"id\":1}", "status"),
        ("{\"type\":\"txn\",\"id\":1,\"status\":\"maybe\"}", "maybe"),
        ("{\"type\":\"txn\",\"id\":1,\"status\":\"committed\"} x", "trailing"),
        ("{\"type\":\"txn\",\"id\":1,\"status\":\"committed\",\"reads\":[{\"key\":1}]}", "version"),
        ("{\"type\":\"txn\",\"id\":1,\"status\":\"committed\",\"reads\":[{\"key\":1,\"key\":2}]}", "duplicate"),
        ("{\"type\":\"final\",\"key\":1}", "version"),
        ("{\"type\":\"final\",\"key\":1,\"version\":1,\"id\":3}", "unknown field"),
        ("{\"type\":\"txn\",\"id\":1,\"status\":\"committed\",\"label\":\"\u{1}\"}", "control character"),
        ("{\"type\":\"wat\"}", "wat"),
        ("{\"type\":\"end\",\"txns\":1}", "committed"),
    ];
    // The same in exactly the shape the writers emit (the literal fast path).
    let exact = |node: &str, status: &str, tail: &str| {
        format!(
            "{{\"type\":\"txn\",\"id\":1,\"node\":{node},\"worker\":0,\"coroutine\":0,\"start_ns\":0,\"end_ns\":5,\"status\":\"{status}\",\"reads\":[{{\"key\":1,\"version\":0}}],\"writes\":[{{\"key\":1,\"version\":1}}]}}{tail}"
        )
    };
    let exact_cases = [
        (exact("70000", "committed", ""), "70000".to_string()),
        (exact("01", "committed", ""), "".into()),
        (exact("1", "maybe", ""), "maybe".into()),
        (exact("1", "committed", " x"), "trailing".into()),
        (exact("1", "committed", "}"), "trailing".into()),
    ];
    let ok = format!("{}\n{END1}", exact("1", "committed", ""));
    assert_eq!(read(ok.as_bytes()).unwrap().txns[0].node, 1);
    let cases: Vec<(String, String)> =
        cases.iter().map(|(b, w)| (b.to_string(), w.to_string())).chain(exact_cases).collect();
    for (bad, what) in cases {
        let (bad, what) = (bad.as_str(), what.as_str());
        let file = format!("{{\"type\":\"meta\"}}\n{bad}\n{END1}");
        let e = read_err(file.as_bytes());
        assert!(e.starts_with("line 2: "), "{bad}: {e}");
        assert!(e.contains(what), "{bad}: {e}");
    }
}

#[test]
fn empty_files_are_rejected() {
    for f in [&b""[..], b"\n\n  \n"] {
        let e = read_err(f);
        assert!(e.starts_with("empty history"), "{e}");
    }
    // Meta alone holds no record a check could be about, but it is a record: no trailer.
    assert!(read_err(b"{\"type\":\"meta\"}\n").starts_with("truncated"));
}

#[test]
fn a_jsonl_file_cut_anywhere_is_rejected() {
    let b = jsonl(&rich());
    for cut in 1..b.len() - 1 {
        let e = read_err(&b[..cut]);
        let at_line_end = b[cut - 1] == b'\n';
        if at_line_end {
            assert!(e.starts_with("truncated: no trailer line"), "cut at {cut}: {e}");
        } else {
            // Mid-line: that line does not parse, or (cut inside the last line) no trailer.
            assert!(e.starts_with("line ") || e.starts_with("truncated"), "cut at {cut}: {e}");
        }
    }
}

#[test]
fn a_binary_file_cut_anywhere_is_rejected() {
    let b = binary(&rich());
    for cut in 1..b.len() {
        let e = read_err(&b[..cut]);
        assert!(e.starts_with("truncated"), "cut at {cut}: {e}");
    }
    assert_eq!(
        read_err(&b[..0]),
        "empty history: the file holds no records (a history ends with a trailer line {\"type\":\"end\",...})"
    );
}

#[test]
fn counts_that_do_not_match_are_named() {
    let text = String::from_utf8(jsonl(&generate_serial(3, 5, 1))).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let dropped: String = lines.iter().enumerate().filter(|&(i, _)| i != 1).map(|(_, l)| format!("{l}\n")).collect();
    let e = read_err(dropped.as_bytes());
    assert!(e.contains("txns: trailer says 3, found 2") && e.contains("committed: trailer says 3, found 2"), "{e}");
    assert!(e.starts_with(&format!("line {}: ", lines.len() - 1)), "{e}");
    assert!(!e.contains("finals:"), "only what differs: {e}");

    // Binary: the trailer's last count (invariants) edited.
    let mut b = binary(&generate_serial(3, 5, 1));
    let n = b.len();
    b[n - 8] = 9;
    let e = read_err(&b);
    assert!(e.contains("invariants: trailer says 9, found 0"), "{e}");
}

#[test]
fn data_after_the_trailer_is_rejected() {
    let mut t = jsonl(&generate_serial(3, 5, 1));
    let lines = t.iter().filter(|&&c| c == b'\n').count();
    t.extend_from_slice(b"\n{\"type\":\"final\",\"key\":1,\"version\":1}\n");
    let e = read_err(&t);
    assert_eq!(e, format!("line {}: data after the trailer (line {lines} ended the history)", lines + 2));
    // A second trailer too.
    let mut t2 = jsonl(&generate_serial(3, 5, 1));
    t2.extend_from_slice(END1.as_bytes());
    assert!(read_err(&t2).contains("data after the trailer"));

    let mut b = binary(&generate_serial(3, 5, 1));
    let n = b.len();
    b.push(0);
    assert_eq!(read_err(&b), format!("data after the trailer at byte {n}"));
}

fn header_len() -> usize {
    8 + 2 + 4 + LAYOUT.len() + 16
}

#[test]
fn bad_magic_version_and_corrupt_records_are_rejected() {
    let good = binary(&generate_serial(3, 5, 1));
    let mut b = good.clone();
    b[3] = b'Q';
    assert!(read_err(&b).contains("bad magic"));
    let mut b = good.clone();
    b[8] = 2;
    assert_eq!(read_err(&b), "unsupported binary history format version 2 (this txbed reads version 1)");
    let h = header_len();
    assert_eq!(good[h], b'T');
    let mut b = good.clone();
    b[h + 1 + 36] = 7;
    assert!(read_err(&b).contains("txn status byte 7"), "{}", read_err(&b));
    let mut b = good.clone();
    b[h] = b'Z';
    assert!(read_err(&b).contains("unknown record tag 0x5a"));
    let mut b = good.clone();
    b[h + 1 + 28] = 5; // label: string 5, never defined
    assert!(read_err(&b).contains("names string 5, which is not defined"), "{}", read_err(&b));
    // Written as the first bytes of the magic but nothing else: bad magic or truncated.
    assert!(read_err(&MAGIC[..1]).starts_with("truncated"));
}

#[test]
fn absurd_length_fields_fail_without_allocating_them() {
    let good = binary(&generate_serial(3, 5, 1));
    let h = header_len();
    // Reads, writes and predicate counts of u32::MAX (64 GiB of accesses): the file ends first.
    for at in [37, 41, 45] {
        let mut b = good.clone();
        b[h + 1 + at..h + 1 + at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = read_err(&b);
        assert!(e.starts_with("truncated: the file ends inside"), "{at}: {e}");
    }
    // Hints of u64::MAX are capped by the file size, or by a fixed bound without one.
    let mut b = good.clone();
    b[h - 16..h].copy_from_slice(&[0xff; 16]);
    assert!(format::read(&b[..], Some(b.len() as u64)).is_ok());
    assert!(format::read(&b[..], None).is_ok());
    // The layout text's length.
    let mut b = good.clone();
    b[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(read_err(&b).contains("the header's layout text of 4294967295 bytes, more than"), "{}", read_err(&b));
    // A string and a meta record of 4 GiB.
    let mut with_label = generate_serial(3, 5, 1);
    with_label.txns[0].label = "x".into();
    with_label.meta.insert("k".into(), 1.into());
    let good = binary(&with_label);
    assert_eq!(good[h], b'M');
    let mut b = good.clone();
    b[h + 1..h + 5].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(read_err(&b).contains("a meta record of 4294967295 bytes"), "{}", read_err(&b));
    let s = h + 1 + 4 + 7; // after the meta record {"k":1}
    assert_eq!(good[s], b'S');
    let mut b = good.clone();
    b[s + 1..s + 5].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(read_err(&b).contains("a string of 4294967295 bytes"), "{}", read_err(&b));
}

#[test]
fn structural_errors_still_name_the_transaction() {
    let mut h = generate_serial(3, 5, 1);
    h.txns[2].id = 0;
    for b in [jsonl(&h), binary(&h)] {
        assert_eq!(read_err(&b), "transaction id 0 appears twice");
    }
    let mut h = generate_serial(3, 5, 1);
    h.txns[1].writes[0].version = 0;
    assert!(read_err(&binary(&h)).contains("installs version 0"));
}

fn access() -> impl Strategy<Value = Access> {
    (0u64..20, 0u64..5).prop_map(|(key, version)| Access { key, version })
}

fn txn() -> impl Strategy<Value = Txn> {
    (
        any::<u16>(),
        any::<u32>(),
        0u64..1000,
        0u64..1000,
        any::<bool>(),
        prop::sample::select(vec!["", "a", "b c", "é\"\\\n"]),
        prop::collection::vec(access(), 0..4),
        prop::collection::vec(access().prop_map(|a| Access { version: a.version + 1, ..a }), 0..4),
        prop::collection::vec((0u64..10, 0u64..10, prop::collection::vec(access(), 0..3)), 0..2),
    )
        .prop_map(|(node, coroutine, start, len, aborted, label, reads, writes, preds)| Txn {
            id: 0,
            node,
            worker: node / 3,
            coroutine,
            start_ns: start,
            end_ns: start + len,
            status: if aborted { Status::Aborted } else { Status::Committed },
            label: label.to_string(),
            reads,
            writes,
            predicates: preds.into_iter().map(|(lo, hi, vset)| PredicateRead { lo, hi, vset }).collect(),
        })
}

proptest! {
    #[test]
    fn random_histories_round_trip(
        txns in prop::collection::vec(txn(), 0..12),
        finals in prop::collection::vec((prop::sample::select(vec!["primary", "", "b1"]), access()), 0..4),
        inv in prop::collection::vec((any::<i64>(), any::<i64>()), 0..2),
    ) {
        let mut h = History { txns, ..Default::default() };
        for (i, t) in h.txns.iter_mut().enumerate() {
            t.id = i as u64 * 3;
        }
        h.finals = finals.into_iter().map(|(r, a)| Final { replica: r.into(), key: a.key, version: a.version }).collect();
        h.invariants = inv.into_iter().map(|(e, a)| Invariant { name: "i".into(), expected: e, actual: a }).collect();
        let j = jsonl(&h);
        let b = binary(&h);
        prop_assert_eq!(read(&j).unwrap(), h.clone());
        prop_assert_eq!(read(&b).unwrap(), h.clone());
        // JSONL -> Flat -> binary is byte for byte the binary written from the History.
        let mut b2 = Vec::new();
        format::write_binary_flat(&format::read(&j[..], None).unwrap(), &mut b2).unwrap();
        prop_assert_eq!(b2, b);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// Corrupt files (bytes overwritten, cut) give an error or a history, never a panic, in
    /// either form; a binary one whose header survived fails or reads, within its own size.
    #[test]
    fn corrupt_files_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        form in any::<bool>(),
    ) {
        let h = rich();
        let mut b = if form { binary(&h) } else { jsonl(&h) };
        for (at, byte) in edits {
            let i = at.index(b.len());
            b[i] = byte;
        }
        let n = cut.index(b.len() + 1);
        let _ = format::read(&b[..n], Some(n as u64));
        let _ = format::read(&b[..], None);
    }
}
