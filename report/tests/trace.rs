//! Event tracing of simulated transaction runs: tracing changes nothing in the run (same
//! digest), and the Chrome trace built from it is well formed.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use txbed_report::trace::{chrome_trace_json, write_chrome_trace};
use txbed_runner::{run_txns, TxnRunResult, TxnRunSpec};
use txbed_sim::NicProfile;
use txbed_txn::protocol::Rdma as Options;
use txbed_txn::stage::{Hybrid, Stage};
use txbed_txn::ProtocolRef;
use txbed_workloads::smallbank::SmallBank;

const NOWAIT: ProtocolRef = &txbed_protocols::nowait::NoWait;
const OCC: ProtocolRef = &txbed_protocols::occ::Occ;
const WAITDIE: ProtocolRef = &txbed_protocols::waitdie::WaitDie;
const MVCC: ProtocolRef = &txbed_protocols::mvcc::Mvcc;
const SUNDIAL: ProtocolRef = &txbed_protocols::sundial::Sundial;
const CALVIN: ProtocolRef = &txbed_protocols::calvin::Calvin;

fn spec(protocol: ProtocolRef, hybrid: Hybrid, options: Options, trace: bool) -> TxnRunSpec {
    let mut p = NicProfile::load("cx4").unwrap();
    p.nics_per_node = 1;
    TxnRunSpec {
        protocol,
        protocol_options: Default::default(),
        nodes: 3,
        workers: 2,
        coroutines: 4,
        qps_per_node: 1,
        profile: p,
        seed: 5,
        hybrid,
        replication: 2,
        workload: Arc::new(SmallBank { accounts_per_node: 300, distributed: 0.5, ..SmallBank::default() }),
        warmup_ns: 0,
        duration_ns: 60_000,
        cache_bytes: 1 << 20,
        warm_cache: false,
        local_path: true,
        retry: txbed_txn::retry::Retry::DEFAULT,
        options,
        bug: None,
        allow_unsafe_atomics: false,
        link_delay_ns: Vec::new(),
        wan: None,
        trace,
        clocks: Default::default(),
        faults: None,
        isolation: None,
        cpu: txbed_sim::cpu::CpuProfile::load("haswell").unwrap(),
    }
}

/// OCC with LOCK and COMMIT one-sided, the other stages by RPC: every kind of record.
fn mixed() -> Hybrid {
    Hybrid(Stage::Lock.bit() | Stage::Commit.bit())
}

fn run(s: &TxnRunSpec) -> TxnRunResult {
    let r = run_txns(s).unwrap();
    assert!(r.clean(), "{:?} {:?}", r.report, r.failures);
    assert!(r.stats.committed > 0);
    r
}

#[test]
fn tracing_does_not_change_the_run() {
    let passive = Options { passive_ack: true, ..Options::default() };
    let cases = [
        (OCC, mixed(), Options::default()),
        (OCC, Hybrid::full(OCC.stages()), passive),
        (NOWAIT, Hybrid::RPC, passive),
    ];
    for (protocol, hybrid, options) in cases {
        let off = run(&spec(protocol, hybrid, options, false));
        let on = run(&spec(protocol, hybrid, options, true));
        let what = format!("{} {hybrid} {options:?}", protocol.name());
        assert_eq!(off.digest, on.digest, "{what}: tracing changed the simulation");
        assert_eq!(off.events, on.events, "{what}");
        assert_eq!(off.stats, on.stats, "{what}");
        assert_eq!(off.history.txns.len(), on.history.txns.len(), "{what}");
        assert!(off.trace.is_empty(), "{what}: recorded with tracing off");
        assert!(on.trace.len() as u64 > on.stats.committed, "{what}: too few trace events");
        // Every worker recorded, and no slice ends before it starts.
        for n in 0..3 {
            for w in 0..2 {
                assert!(on.trace.iter().any(|e| e.node == n && e.worker == w), "{what}: nothing from {n}/{w}");
            }
        }
        assert!(on.trace.iter().all(|e| e.end_ns >= e.start_ns), "{what}");
        // One transaction slice per attempt: commits plus aborts.
        let txns = on.trace.iter().filter(|e| e.category == "txn").count() as u64;
        let s = &on.stats;
        assert_eq!(txns, s.committed + s.aborted_conflict + s.aborted_user, "{what}");
        // One stage slice per accounted stage.
        let stages = on.trace.iter().filter(|e| e.category == "stage").count() as u64;
        assert_eq!(stages, s.stage_calls.iter().sum::<u64>(), "{what}");
    }
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn f64_of(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or_else(|| panic!("no {k} in {v}"))
}

fn thread(v: &Value) -> (u64, u64) {
    (v["pid"].as_u64().unwrap(), v["tid"].as_u64().unwrap())
}

#[test]
fn chrome_trace_is_well_formed() {
    let r = run(&spec(OCC, mixed(), Options::default(), true));
    let json = chrome_trace_json(&r.trace, 3, 2);
    // Round-trips through text, and the streaming writer gives the same trace.
    let text = serde_json::to_string(&json).unwrap();
    let parsed: Value = serde_json::from_str(&text).unwrap();
    let mut streamed = Vec::new();
    write_chrome_trace(&r.trace, 3, 2, &mut streamed).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&streamed).unwrap(), parsed);
    assert_eq!(parsed["displayTimeUnit"], "ns");
    let evs = parsed["traceEvents"].as_array().unwrap();

    // Names: every node, every worker, coroutines, QPs (RC with their peer, and UD).
    let mut threads: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut processes = BTreeMap::new();
    for e in evs.iter().filter(|e| e["ph"] == "M") {
        let name = e["args"]["name"].as_str().map(str::to_string);
        match str_of(e, "name") {
            "thread_name" => assert!(threads.insert(thread(e), name.unwrap()).is_none(), "thread named twice"),
            "process_name" => {
                processes.insert(e["pid"].as_u64().unwrap(), name.unwrap());
            }
            _ => {}
        }
    }
    for n in 0..3u64 {
        assert_eq!(processes.get(&n).map(String::as_str), Some(format!("node {n}").as_str()));
        for w in 0..2 {
            let named = |s: &str| threads.iter().any(|(&(p, _), t)| p == n && t == s);
            assert!(named(&format!("worker {w}")), "no track for node {n} worker {w}");
            assert!(named(&format!("worker {w} / coroutine 0")), "no coroutine track on {n}/{w}");
            assert!(threads.iter().any(|(&(p, _), t)| p == n && t.starts_with(&format!("worker {w} / QP "))));
        }
    }
    assert!(threads.values().any(|t| t.contains("(to node ")), "no RC QP track");
    assert!(threads.values().any(|t| t.contains("(UD)")), "no UD QP track");

    // Slices: the three categories, non-negative durations, on named threads, and properly
    // nested on each thread (what viewers require of complete events).
    let slices: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), r.trace.len());
    let mut by_thread: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    for s in &slices {
        let (ts, dur) = (f64_of(s, "ts"), f64_of(s, "dur"));
        assert!(dur >= 0.0 && ts >= 0.0, "{s}");
        assert!(threads.contains_key(&thread(s)), "slice on an unnamed thread: {s}");
        by_thread.entry(thread(s)).or_default().push((ts, ts + dur));
    }
    for cat in ["verb", "rpc", "stage", "txn"] {
        assert!(slices.iter().any(|s| s["cat"] == cat), "no {cat} slice");
    }
    for stage in ["lock", "read", "validate", "log", "commit"] {
        assert!(slices.iter().any(|s| s["cat"] == "stage" && s["name"] == stage), "no {stage} stage");
    }
    assert!(slices.iter().any(|s| s["cat"] == "txn" && str_of(s, "name").ends_with(" commit")));
    assert!(slices.iter().any(|s| s["cat"] == "rpc" && s["name"] == "FETCH"), "handler names missing");
    let eps = 1e-9;
    for (t, v) in by_thread.iter_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<f64> = Vec::new();
        for &(s, e) in v.iter() {
            while open.last().is_some_and(|&end| end <= s + eps) {
                open.pop();
            }
            if let Some(&end) = open.last() {
                assert!(e <= end + eps, "slices overlap without nesting on {t:?}: [{s}, {e}] vs end {end}");
            }
            open.push(e);
        }
    }

    // Flows: each id once as "s" and once as "f" (bp "e"), same name and category; "f" not
    // before "s"; each inside a slice of its own thread (so viewers can bind it).
    let inside = |e: &Value| {
        let ts = f64_of(e, "ts");
        by_thread.get(&thread(e)).is_some_and(|v| v.iter().any(|&(s, end)| s <= ts + eps && ts <= end + eps))
    };
    let mut flows: BTreeMap<u64, (Option<&Value>, Option<&Value>)> = BTreeMap::new();
    for e in evs {
        match str_of(e, "ph") {
            "s" => assert!(flows.entry(e["id"].as_u64().unwrap()).or_default().0.replace(e).is_none(), "two starts"),
            "f" => {
                assert_eq!(e["bp"], "e");
                assert!(flows.entry(e["id"].as_u64().unwrap()).or_default().1.replace(e).is_none(), "two ends");
            }
            _ => {}
        }
    }
    assert!(!flows.is_empty());
    let mut kinds = BTreeMap::new();
    for (id, (s, f)) in &flows {
        let (s, f) = (
            s.unwrap_or_else(|| panic!("flow {id} has no start")),
            f.unwrap_or_else(|| panic!("flow {id} has no end")),
        );
        assert_eq!((&s["name"], &s["cat"]), (&f["name"], &f["cat"]));
        assert!(f64_of(f, "ts") >= f64_of(s, "ts"), "flow {id} ends before it starts");
        assert!(inside(s) && inside(f), "flow {id} is outside its slices: {s} {f}");
        *kinds.entry(str_of(s, "cat").to_string()).or_insert(0) += 1;
        if s["cat"] == "rpc" {
            assert_ne!(thread(s), thread(f), "an RPC flow goes from the caller to the handler");
        }
    }
    assert!(kinds.contains_key("verb") && kinds.contains_key("rpc"), "{kinds:?}");
}

/// Every protocol's RPC handlers appear in traces by name, not by id.
#[test]
fn protocol_handlers_are_named_in_traces() {
    for (protocol, names) in [
        (WAITDIE, &["WD_LOCK", "WD_COMMIT"][..]),
        (MVCC, &["MVCC_READ", "MVCC_LOCK", "MVCC_COMMIT"]),
        (SUNDIAL, &["SD_READ"]),
        (CALVIN, &["CALVIN_SUBMIT", "CALVIN_INPUT", "CALVIN_FORWARD"]),
    ] {
        let r = run(&spec(protocol, Hybrid::RPC, Options::default(), true));
        let json = chrome_trace_json(&r.trace, 3, 2).to_string();
        for name in names {
            assert!(json.contains(&format!("\"{name}")), "{}: no {name} in the trace", protocol.name());
        }
    }
}
