//! The simulated ConnectX-4 reproduces the primitive-level figures of DrTM+H Sec. 4 from its
//! parameters (docs/nic-model.md). These are checks of the model, not timed tests: every
//! number is simulated time.

use txbed_sim::bench_verbs::{multi_object, raw, Primitive, RawVerb, Setting, Step, Window};
use txbed_sim::NicProfile;

fn cx4() -> NicProfile {
    NicProfile::load("cx4").unwrap()
}

fn rate(verb: RawVerb, payload: u32, s: &Setting) -> f64 {
    raw(&cx4(), s, verb, payload, 1, Window { warmup_ns: 20_000, measure_ns: 20_000 }).per_machine_per_s / 1e6
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= want * tol
}

#[test]
fn raw_rates_match_drtmh_within_15_percent() {
    let s = Setting::sixteen();
    for (verb, payload, want) in [
        (RawVerb::Read, 64, 86.9),
        (RawVerb::Write, 64, 130.0),
        (RawVerb::Write, 8, 130.0),
        (RawVerb::Atomic, 8, 48.0),
        (RawVerb::Rpc, 8, 79.0),
    ] {
        let got = rate(verb, payload, &s);
        assert!(within(got, want, 0.15), "{} {payload} B: {got:.1} M/s, want {want} +-15%", verb.name());
    }
}

#[test]
fn read_beats_ud_rpc_below_64_bytes() {
    let s = Setting::sixteen();
    for p in [8, 32] {
        let (r, c) = (rate(RawVerb::Read, p, &s), rate(RawVerb::Rpc, p, &s));
        assert!(r > c, "{p} B: READ {r:.1} <= RPC {c:.1}");
    }
}

#[test]
fn eighty_node_setting_dips_for_small_payloads_only() {
    let (a, b) = (Setting::sixteen(), Setting::eighty());
    for p in [8, 64] {
        let (small, large) = (rate(RawVerb::Read, p, &a), rate(RawVerb::Read, p, &b));
        assert!(large < small * 0.9, "{p} B READ: 80-node {large:.1} not below 16-node {small:.1}");
    }
    let (x, y) = (rate(RawVerb::Read, 1024, &a), rate(RawVerb::Read, 1024, &b));
    assert!(within(y, x, 0.05), "1 KiB READ: 80-node {y:.1} vs 16-node {x:.1} should match");
    // UD RPC uses one QP per worker: unaffected by emulated cluster size.
    assert!(within(rate(RawVerb::Rpc, 8, &b), rate(RawVerb::Rpc, 8, &a), 0.02));
}

fn multi(prim: Primitive, write: bool, step: Step) -> f64 {
    multi_object(&cx4(), &Setting::sixteen(), prim, write, step, 1, Window { warmup_ns: 60_000, measure_ns: 100_000 })
        .per_machine_per_s
}

/// DrTM+H Sec. 4.2: coroutines hide latency (several-fold), outstanding requests improve
/// further, passive ACK improves one-sided WRITE and nearly doubles two-sided.
#[test]
fn multi_object_optimisations_move_throughput_as_drtmh_describes() {
    for prim in [Primitive::OneSided, Primitive::TwoSided] {
        for write in [false, true] {
            let base = multi(prim, write, Step::Baseline);
            let co = multi(prim, write, Step::Coroutines);
            let or = multi(prim, write, Step::Outstanding);
            let what = format!("{} {}", prim.label(), if write { "WRITE" } else { "READ" });
            assert!(co > 3.0 * base, "{what}: coroutines {co:.0} vs baseline {base:.0}");
            assert!(or > co, "{what}: outstanding requests {or:.0} vs coroutines {co:.0}");
        }
    }
    let one_db = multi(Primitive::OneSided, true, Step::Doorbell);
    let one_pa = multi(Primitive::OneSided, true, Step::PassiveAck);
    assert!(one_pa > 1.05 * one_db, "one-sided passive ACK {one_pa:.0} vs {one_db:.0}");
    let two_db = multi(Primitive::TwoSided, true, Step::Doorbell);
    let two_pa = multi(Primitive::TwoSided, true, Step::PassiveAck);
    assert!(two_pa > 1.5 * two_db, "two-sided passive ACK {two_pa:.0} vs {two_db:.0}");
    // Doorbell batching always helps two-sided (one UD QP carries every request).
    let two_or = multi(Primitive::TwoSided, true, Step::Outstanding);
    assert!(two_db > 1.2 * two_or, "two-sided doorbell batching {two_db:.0} vs {two_or:.0}");
}
