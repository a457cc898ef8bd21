//! `txbed run SCENARIO`: one simulated run and its report.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use txbed_sim::bench_verbs::{closed_loop, LoopSpec, Setting, Window};
use txbed_sim::NicProfile;
use txbed_transport::Opcode;

use crate::scenario::{Scenario, Workload};

#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

#[derive(Debug, Serialize)]
pub struct SimInfo {
    pub events: u64,
    /// Events per second of wall time (one core).
    pub events_per_s: f64,
    pub simulated_ns: u64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    /// 64-bit digest of every simulated event, as 16 hex digits.
    pub digest: String,
    /// Completed requests per machine per second, in millions.
    pub throughput_mops_per_machine: f64,
    /// Latency of one round of `outstanding` requests, microseconds.
    pub latency_us: Latency,
    pub verbs: BTreeMap<&'static str, u64>,
    pub qp_cache_miss_ratio: f64,
    pub sim: SimInfo,
}

pub fn run(s: &Scenario, profile: &NicProfile, seed: u64) -> Report {
    let Workload::Verbs(v) = &s.workload;
    let c = &s.cluster;
    let spec = LoopSpec {
        setting: Setting { label: format!("{}-node", c.nodes), nodes: c.nodes, qps_per_node: c.qps_per_node },
        workers: c.workers,
        coroutines: c.coroutines,
        depth: v.outstanding,
        verb: v.verb.raw(),
        payload: v.payload,
    };
    let w = Window { warmup_ns: s.run.warmup_us * 1000, measure_ns: s.run.measure_us * 1000 };
    let start = Instant::now();
    let out = closed_loop(profile, &spec, seed, w);
    let wall = start.elapsed().as_secs_f64();
    let h = &out.latency_ns;
    let us = |ns: u64| ns as f64 / 1000.0;
    let mut verbs = BTreeMap::new();
    for op in Opcode::ALL {
        let n = out.outcome.verbs[op as usize];
        if n > 0 {
            verbs.insert(op.name(), n);
        }
    }
    Report {
        scenario: s.name.clone(),
        seed,
        digest: format!("{:016x}", out.outcome.digest),
        throughput_mops_per_machine: out.outcome.per_machine_per_s / 1e6,
        latency_us: Latency {
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            mean: h.mean() / 1000.0,
        },
        verbs,
        qp_cache_miss_ratio: out.outcome.qp_miss_ratio,
        sim: SimInfo {
            events: out.outcome.events,
            events_per_s: out.outcome.events as f64 / wall.max(1e-9),
            simulated_ns: w.warmup_ns + w.measure_ns,
        },
    }
}

pub fn text(s: &Scenario, r: &Report) -> String {
    let Workload::Verbs(v) = &s.workload;
    let c = &s.cluster;
    let verbs: Vec<String> = r.verbs.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(
        "scenario {:?}, seed {}\n  cluster   {} nodes x {} workers x {} coroutines, NIC {}\n  workload  {:?} {} B, {} outstanding per coroutine, random remote nodes\n  throughput {:.2} M requests/s per machine\n  latency   p50 {:.2} us  p90 {:.2} us  p99 {:.2} us  mean {:.2} us\n  verbs     {}\n  simulator {} events, {:.2} M events/s, {} us simulated\n  digest    {}\n",
        r.scenario,
        r.seed,
        c.nodes,
        c.workers,
        c.coroutines,
        c.nic,
        v.verb,
        v.payload,
        v.outstanding,
        r.throughput_mops_per_machine,
        r.latency_us.p50,
        r.latency_us.p90,
        r.latency_us.p99,
        r.latency_us.mean,
        verbs.join(", "),
        r.sim.events,
        r.sim.events_per_s / 1e6,
        r.sim.simulated_ns / 1000,
        r.digest
    )
}
