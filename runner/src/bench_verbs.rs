//! `txbed bench-verbs`: runs the simulator's primitive microbenchmarks, many simulations in
//! parallel (each one single-threaded), and reports per-machine rates and simulator speed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;
use txbed_sim::bench_verbs::{self as bv, Primitive, RawVerb, Setting, Step, Window};
use txbed_sim::profile::NicOverrides;
use txbed_sim::NicProfile;

pub const PAYLOADS: [u32; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

#[derive(Clone, Debug)]
pub struct Options {
    pub nic: String,
    /// Fields of the profile to override (`--set host.rpc_dispatch_ns=500`).
    pub nic_overrides: NicOverrides,
    pub nodes: Option<u16>,
    pub qps_per_node: Option<u16>,
    pub seed: u64,
    pub jobs: usize,
    pub window: Window,
    pub multi_window: Window,
    pub payloads: Vec<u32>,
    pub multi_object: bool,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub bench: &'static str,
    pub verb: String,
    pub payload: u32,
    pub setting: String,
    /// Verbs or RPCs completed per machine per second, in millions.
    pub mops_per_machine: f64,
    /// Multi-object only: requests (10 objects each) per machine per second, in millions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mreqs_per_machine: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primitive: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimizations: Option<&'static str>,
    pub qp_cache_miss_ratio: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SimSpeed {
    pub events: u64,
    /// Events per second of wall time of one core (sum of events / sum of per-simulation time).
    pub events_per_s: f64,
    pub simulations: usize,
    pub wall_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub nic: String,
    /// The profile fields `--set` overrode, by dotted path.
    pub nic_overrides: std::collections::BTreeMap<String, serde_json::Value>,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    pub sim: SimSpeed,
}

enum Job {
    Raw(Setting, RawVerb, u32),
    Multi(Setting, Primitive, bool, Step),
}

pub fn settings(o: &Options) -> Vec<Setting> {
    if o.nodes.is_none() && o.qps_per_node.is_none() {
        return vec![Setting::sixteen(), Setting::eighty()];
    }
    let nodes = o.nodes.unwrap_or(16);
    let k = o.qps_per_node.unwrap_or(1);
    let label = if k == 1 { format!("{nodes}-node") } else { format!("{nodes}-node x{k} QPs") };
    vec![Setting { label, nodes, qps_per_node: k }]
}

pub fn run(o: &Options, progress: impl Fn(usize, usize) + Sync) -> Result<Report, String> {
    let profile = NicProfile::load(&o.nic).map_err(|e| e.to_string())?;
    let profile = profile.with_overrides(&o.nic_overrides).map_err(|(f, m)| format!("--set {f}: {m}"))?;
    if o.nodes.is_some_and(|n| n < 2) {
        return Err("--nodes must be at least 2: the benchmarks talk to remote nodes".into());
    }
    if o.qps_per_node == Some(0) {
        return Err("--qps-per-node must be at least 1".into());
    }
    let max_rpc = bv::rpc_max_payload(&profile);
    let mut jobs = Vec::new();
    let mut notes = Vec::new();
    for s in settings(o) {
        for verb in RawVerb::ALL {
            for &p in &o.payloads {
                let ok = match verb {
                    RawVerb::Atomic => p == 8,
                    RawVerb::Rpc => p <= max_rpc,
                    _ => true,
                };
                if ok {
                    jobs.push(Job::Raw(s.clone(), verb, p));
                }
            }
        }
    }
    if o.payloads.iter().any(|&p| p > max_rpc) {
        notes.push(format!(
            "UD RPC rows stop at {max_rpc} B: a larger reply does not fit one UD datagram (MTU {} B minus the 16 B RPC frame header)",
            profile.mtu
        ));
    }
    notes.push("ATOMIC is 8 B only (RDMA atomics operate on one 64-bit word)".into());
    if o.multi_object {
        let s = settings(o).remove(0);
        for write in [false, true] {
            for prim in [Primitive::OneSided, Primitive::TwoSided] {
                for step in Step::ALL {
                    if step == Step::PassiveAck && !write {
                        continue; // A READ's completion carries its data: it cannot be passive.
                    }
                    jobs.push(Job::Multi(s.clone(), prim, write, step));
                }
            }
        }
    }
    let total = jobs.len();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Row, u64, f64)>> = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|sc| {
        for _ in 0..o.jobs.max(1).min(total.max(1)) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let t = Instant::now();
                let row = run_job(&profile, job, o.seed, o.window, o.multi_window);
                let secs = t.elapsed().as_secs_f64();
                results.lock().unwrap().push((i, row.0, row.1, secs));
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let events: u64 = results.iter().map(|r| r.2).sum();
    let busy: f64 = results.iter().map(|r| r.3).sum();
    Ok(Report {
        nic: profile.name.clone(),
        nic_overrides: o.nic_overrides.fields().into_iter().collect(),
        rows: results.into_iter().map(|r| r.1).collect(),
        notes,
        sim: SimSpeed {
            events,
            events_per_s: events as f64 / busy.max(1e-9),
            simulations: total,
            wall_s: start.elapsed().as_secs_f64(),
        },
    })
}

fn run_job(p: &NicProfile, job: &Job, seed: u64, w: Window, mw: Window) -> (Row, u64) {
    match job {
        Job::Raw(s, verb, payload) => {
            let out = bv::raw(p, s, *verb, *payload, seed, w);
            let row = Row {
                bench: "raw",
                verb: verb.name().into(),
                payload: *payload,
                setting: s.label.clone(),
                mops_per_machine: out.per_machine_per_s / 1e6,
                mreqs_per_machine: None,
                primitive: None,
                optimizations: None,
                qp_cache_miss_ratio: out.qp_miss_ratio,
            };
            (row, out.events)
        }
        Job::Multi(s, prim, write, step) => {
            let out = bv::multi_object(p, s, *prim, *write, *step, seed, mw);
            let reqs = out.per_machine_per_s / 1e6;
            let row = Row {
                bench: "multi-object",
                verb: if *write { "WRITE".into() } else { "READ".into() },
                payload: bv::MULTI_PAYLOAD,
                setting: s.label.clone(),
                mops_per_machine: reqs * bv::MULTI_OBJECTS as f64,
                mreqs_per_machine: Some(reqs),
                primitive: Some(prim.label()),
                optimizations: Some(step.label()),
                qp_cache_miss_ratio: out.qp_miss_ratio,
            };
            (row, out.events)
        }
    }
}

/// A readable table: raw rates by payload and setting, then the multi-object steps.
pub fn table(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "Primitive microbenchmarks on the simulated '{}' NIC (per machine, M ops/s)", r.nic);
    if !r.nic_overrides.is_empty() {
        let sets: Vec<String> = r.nic_overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "profile fields overridden: {}", sets.join(", "));
    }
    let mut settings: Vec<&str> = Vec::new();
    for row in r.rows.iter().filter(|x| x.bench == "raw") {
        if !settings.contains(&row.setting.as_str()) {
            settings.push(&row.setting);
        }
    }
    for s in &settings {
        let _ = writeln!(out, "\n[{s}]");
        let _ = write!(out, "{:>9}", "payload");
        for v in RawVerb::ALL {
            let _ = write!(out, "{:>10}", v.name());
        }
        let _ = writeln!(out);
        let mut payloads: Vec<u32> = r.rows.iter().filter(|x| x.bench == "raw").map(|x| x.payload).collect();
        payloads.sort();
        payloads.dedup();
        for p in payloads {
            let _ = write!(out, "{:>8}B", p);
            for v in RawVerb::ALL {
                let cell = r
                    .rows
                    .iter()
                    .find(|x| x.bench == "raw" && x.setting == *s && x.payload == p && x.verb == v.name())
                    .map(|x| format!("{:.1}", x.mops_per_machine))
                    .unwrap_or_else(|| "-".into());
                let _ = write!(out, "{cell:>10}");
            }
            let _ = writeln!(out);
        }
    }
    let multi: Vec<&Row> = r.rows.iter().filter(|x| x.bench == "multi-object").collect();
    if !multi.is_empty() {
        let _ =
            writeln!(out, "\n[multi-object: 10 x 64 B per request, {}; M requests/s per machine]", multi[0].setting);
        for verb in ["READ", "WRITE"] {
            for prim in ["one-sided", "two-sided"] {
                let _ = write!(out, "{:>6} {:<10}", verb, prim);
                for row in multi.iter().filter(|x| x.verb == verb && x.primitive == Some(prim)) {
                    let _ = write!(
                        out,
                        " {:>8} {:>6.2}",
                        row.optimizations.unwrap_or(""),
                        row.mreqs_per_machine.unwrap_or(0.0)
                    );
                }
                let _ = writeln!(out);
            }
        }
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let _ = writeln!(
        out,
        "\nsimulator: {} events in {} simulations, {:.2} M events/s per core, {:.1} s wall",
        r.sim.events,
        r.sim.simulations,
        r.sim.events_per_s / 1e6,
        r.sim.wall_s
    );
    out
}
