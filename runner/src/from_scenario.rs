//! The run a scenario file describes: its spec, its simulated run, and the primitive
//! (verbs-only) runs that need no protocol.

use std::collections::BTreeMap;
use std::time::Instant;

use txbed_scenario::{Scenario, Workload};
use txbed_sim::bench_verbs::{closed_loop, LoopSpec, Setting, Window};
use txbed_sim::NicProfile;
use txbed_transport::Opcode;

use crate::outcome::TxnRunResult;
use crate::report::{Latency, Report, SimInfo};
use crate::spec::TxnRunSpec;

/// The run spec a transactional scenario describes.
pub fn txn_spec(s: &Scenario, profile: &NicProfile, seed: u64) -> Result<TxnRunSpec, String> {
    let c = &s.cluster;
    let p = s.protocol.as_ref().ok_or("a transactional workload needs a protocol")?;
    let Workload::Txn(w) = &s.workload else {
        return Err("not a transactional workload".into());
    };
    let workload = w.build(txbed_workloads::Shape { nodes: c.nodes, workers: c.workers, coroutines: c.coroutines });
    let mut profile = profile.clone();
    if let Some(k) = c.nics_per_node {
        profile.nics_per_node = k;
    }
    let (hybrid, options, protocol_options) = p.resolve(&profile);
    Ok(TxnRunSpec {
        protocol: p.name.protocol(),
        protocol_options,
        nodes: c.nodes,
        workers: c.workers,
        coroutines: c.coroutines,
        qps_per_node: c.qps_per_node,
        profile,
        seed,
        hybrid,
        replication: p.replication,
        workload,
        warmup_ns: s.run.warmup_us * 1000,
        duration_ns: s.run.measure_us * 1000,
        cache_bytes: p.cache_mb << 20,
        warm_cache: p.warm_cache,
        local_path: p.local_path,
        retry: s.run.retry,
        options,
        bug: None,
        allow_unsafe_atomics: false,
        link_delay_ns: c.link_delay_us.iter().flatten().flatten().map(|&d| d as u64 * 1000).collect(),
        wan: c.wan(),
        trace: false,
        clocks: crate::spec::ClockSpec {
            sim: c.clocks.as_ref().map(|k| k.config(c.nodes, seed, s.run.clock_bound_us)),
            host_bound_ns: s.run.clock_bound_us * 1000,
        },
        faults: fault_plan(s, seed),
        isolation: p.isolation.map(|i| i.0),
        cpu: txbed_sim::cpu::CpuProfile::load(&c.cpu).map_err(|e| format!("cluster.cpu: {e}"))?,
    })
}

/// The faults of `s` run with `seed` (its random generators expanded with that seed).
pub fn fault_plan(s: &Scenario, seed: u64) -> Option<crate::faults::FaultPlan> {
    use txbed_sim::faults::Region;
    let f = s.faults.as_ref()?;
    let mut seeded = s.clone();
    seeded.run.seed = seed;
    let t = seeded.fault_topology();
    let dcs = t.dcs.iter().map(|d| (d.clone(), t.dc_nodes(d).unwrap_or_default())).collect();
    Some(crate::faults::FaultPlan {
        detect_ns: f.detect_us * 1000,
        reconnect_ns: f.reconnect_us * 1000,
        durable_store: f.durable.contains(&Region::Store),
        durable_logs: f.durable.contains(&Region::Logs),
        schedule: seeded.fault_schedule(),
        dcs,
    })
}

/// A transactional scenario run on the simulator: its spec, result and wall-clock seconds.
pub struct ScenarioRun {
    pub spec: TxnRunSpec,
    pub result: TxnRunResult,
    pub wall_s: f64,
}

/// Runs a transactional scenario on the simulator, calling `progress(simulated ns, end ns)`
/// on the way; `trace` records trace events for `txbed replay --trace`.
pub fn run_txn(
    s: &Scenario,
    profile: &NicProfile,
    seed: u64,
    trace: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ScenarioRun, String> {
    let mut spec = txn_spec(s, profile, seed)?;
    spec.trace = trace;
    let start = Instant::now();
    let result = crate::sim::run_txns_with(&spec, progress)?;
    Ok(ScenarioRun { spec, result, wall_s: start.elapsed().as_secs_f64() })
}

impl ScenarioRun {
    pub fn report(&self, s: &Scenario, seed: u64) -> crate::report::TxnReport {
        crate::report::txn_report(s, &self.spec, seed, &self.result, self.wall_s, "sim")
    }
}

/// A primitive scenario (`Workload::Verbs`): a closed loop of one verb on the simulated NIC.
pub fn run_verbs(s: &Scenario, profile: &NicProfile, seed: u64) -> Result<Report, String> {
    let Workload::Verbs(v) = &s.workload else {
        return Err("not a Verbs scenario".into());
    };
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
    let mut verbs = BTreeMap::new();
    for op in Opcode::ALL {
        let n = out.outcome.verbs[op as usize];
        if n > 0 {
            verbs.insert(op.name(), n);
        }
    }
    Ok(Report {
        scenario: s.name.clone(),
        resolved_scenario: s.to_ron(),
        seed,
        nic_overrides: s.nic_overrides().into_iter().collect(),
        digest: format!("{:016x}", out.outcome.digest),
        throughput_mops_per_machine: out.outcome.per_machine_per_s / 1e6,
        latency_us: Latency::from_ns(h),
        verbs,
        qp_cache_miss_ratio: out.outcome.qp_miss_ratio,
        sim: SimInfo {
            events: out.outcome.events,
            events_per_s: out.outcome.events as f64 / wall.max(1e-9),
            build: crate::report::build_kind(),
            simulated_ns: w.warmup_ns + w.measure_ns,
            wall: None,
            committed_per_wall_s: None,
        },
    })
}
