//! A run on the simulated cluster: one `Sim`, every node's workers and coroutines in it,
//! single-threaded and deterministic.

use std::cell::RefCell;
use std::rc::Rc;

use txbed_sim::{Sim, SimConfig};
use txbed_txn::locate::Catalog;
use txbed_txn::node::NodeState;

use crate::faults::{Driver, World};
use crate::node::{add_measured, coordinator, load_partition, node_result, node_state, run_background, Shared};
use crate::outcome::{assemble, Measured, TxnRunResult, WallTimes};
use crate::spec::{check_spec, coroutines_per_worker, layout, scratch_per_coroutine, TxnRunSpec};

/// Simulated time transactions in flight get to finish after the run's end.
const STRAGGLE_NS: u64 = 100_000_000;

/// Runs the transactions on the simulated cluster.
pub fn run_txns(spec: &TxnRunSpec) -> Result<TxnRunResult, String> {
    run_txns_with(spec, &mut |_, _| {})
}

/// [`run_txns`], calling `progress(simulated ns, end ns)` about a hundred times on the way.
/// The run is simulated in slices; the result and digest are the same as in one go.
pub fn run_txns_with(spec: &TxnRunSpec, progress: &mut dyn FnMut(u64, u64)) -> Result<TxnRunResult, String> {
    // Wall-clock phases for the report only (`WallTimes`): nothing simulated reads them.
    let began = std::time::Instant::now();
    check_spec(spec)?;
    let mut cfg = SimConfig::new(spec.nodes, spec.workers, spec.profile.clone(), spec.seed);
    cfg.max_coroutines = coroutines_per_worker(spec);
    cfg.qps_per_node = spec.qps_per_node;
    cfg.scratch_per_coroutine = scratch_per_coroutine(spec, &layout(spec));
    cfg.loopback = true;
    cfg.link_delay_ps = spec.link_delay_ns.iter().map(|d| d * 1000).collect();
    cfg.wan = spec.wan.clone();
    if let Some(w) = &spec.wan {
        // The RTO adapts to measured round trips, but its first value and its cap
        // (`rpc_rto_initial_ns`, `rpc_rto_max_ns`: 2 ms) are below a round trip between far
        // data centers: both grow by four slow one-way trips, so a call is not resent while
        // its reply is still on the way.
        let wan_ns = (4.0 * w.high_one_way_us() * 1000.0) as u64;
        cfg.rpc.timeout_ns += wan_ns;
        cfg.rpc.rto_max_ns += wan_ns;
    }
    // Two-sided passive ACK piggybacks replies on requests; doorbell batching applies to the
    // RPC layer's datagrams too.
    cfg.rpc.piggyback = spec.options.passive_ack;
    cfg.rpc.doorbell_batching = spec.options.doorbell;
    cfg.rpc.max_patience_ns = spec.protocol.rpc_patience_ns(&spec.protocol_options);
    cfg.reconnect_ns = spec.faults.as_ref().map(|f| f.reconnect_ns);
    let mut sim = Sim::new(cfg)?;
    if spec.protocol.needs().htm {
        sim.enable_htm(&spec.cpu);
    }
    let layout = layout(spec);
    let mut regions = Vec::new();
    let partitions = txbed_txn::store::Partitions::default();
    for n in 0..spec.nodes {
        let mr = sim.register_region(n, layout.bytes);
        load_partition(&*sim.memory(n), mr, &layout, n, spec, &partitions)?;
        regions.push(mr);
    }
    let catalog = Rc::new(Catalog { layout: layout.clone(), regions });
    // In the simulator a node's workers share one protocol state (one thread runs them all).
    let mut states: Vec<Rc<NodeState>> = (0..spec.nodes).map(|n| node_state(spec, n, &catalog)).collect();
    for (n, st) in states.iter().enumerate() {
        txbed_txn::index::build(st, &*sim.memory(n as u16));
    }
    if spec.warm_cache {
        for (n, st) in states.iter().enumerate() {
            let read = |m: u16, addr: u64, buf: &mut [u8]| {
                use txbed_transport::HostMemory;
                sim.memory(m).read(addr, buf).expect("a bucket inside the store region")
            };
            warm_location_cache(st, n as u16, &catalog, &read);
        }
    }
    let sh = Shared {
        protocol: spec.protocol,
        server_workers: spec.protocol.server_workers(&spec.protocol_options),
        from: spec.warmup_ns,
        end: spec.warmup_ns + spec.duration_ns,
        retry: spec.retry,
        measured: Rc::new(RefCell::new(Measured::for_run(spec.warmup_ns, spec.duration_ns))),
        failures: Rc::default(),
        stop: Rc::default(),
    };
    for n in 0..spec.nodes {
        for wk in 0..spec.workers {
            if spec.trace {
                sim.worker(n, wk).enable_trace();
            }
            for (id, name, h) in txbed_txn::participant::handlers(spec.protocol, &states[n as usize]) {
                sim.worker(n, wk).name_handler(id, name);
                sim.worker(n, wk).register_handler(id, h);
            }
            for c in 0..spec.coroutines {
                let (st, sh) = (states[n as usize].clone(), sh.clone());
                sim.spawn(n, wk, move |ctx| coordinator(ctx, st, sh, c));
            }
            if let Some(background) = spec.protocol.background() {
                for _ in 0..spec.protocol.background_coroutines(&spec.protocol_options) {
                    let (st, sh) = (states[n as usize].clone(), sh.clone());
                    sim.spawn(n, wk, move |ctx| run_background(background, ctx, st, sh));
                }
            }
        }
    }
    // After the workload's coroutines, which keep their ids and RNG streams.
    if let Some(c) = &spec.clocks.sim {
        sim.enable_clocks(c.clone(), sh.end)?;
    }
    // Start nothing after the end; let transactions in flight finish.
    let loop_began = std::time::Instant::now();
    let mut driver = spec.faults.as_ref().map(|p| Driver::new(p, spec.nodes, spec.replication));
    let slice = (sh.end / 100).max(1);
    let mut t = 0;
    while t < sh.end {
        t = (t + slice).min(sh.end);
        // Faults and the membership's steps due in this slice, each at its exact time.
        while let Some(d) = driver.as_mut().filter(|d| d.next_at().is_some_and(|at| at <= t)) {
            let at = d.next_at().expect("checked");
            sim.run_until(at);
            d.fire(&mut World { sim: &mut sim, states: &mut states, spec, catalog: &catalog, sh: &sh });
        }
        sim.run_until(t);
        progress(t, sh.end);
    }
    // A protocol whose requests may wait on purpose gets that long again to finish.
    let limit = sh.end + STRAGGLE_NS.max(2 * spec.protocol.rpc_patience_ns(&spec.protocol_options));
    while let Some(d) = driver.as_mut().filter(|d| d.next_at().is_some_and(|at| at <= limit)) {
        let at = d.next_at().expect("checked");
        sim.run_until(at);
        d.fire(&mut World { sim: &mut sim, states: &mut states, spec, catalog: &catalog, sh: &sh });
    }
    sim.run_to_idle(limit);
    // A chopped run's transactions must be finished: nodes still down restart now, and their
    // coordinators (and others' waiting on them) run the pieces left.
    let mut limit = limit;
    let mut recovered = false;
    if let Some(d) = driver.as_mut().filter(|_| spec.workload.chopping().is_some()) {
        if (0..spec.nodes).any(|n| !sim.is_alive(n)) {
            d.recover_after_run(
                &mut World { sim: &mut sim, states: &mut states, spec, catalog: &catalog, sh: &sh },
                true,
            );
            recovered = true;
            limit = sim.now() + STRAGGLE_NS;
            sim.run_to_idle(limit);
        }
    }
    // A coroutine still running this long after the end is stuck (a protocol waiting for
    // something that never comes): say so rather than check a history it never finished.
    // A node that is down is reported as such.
    for n in 0..spec.nodes {
        for wk in 0..spec.workers {
            if sim.is_alive(n) && !sim.worker(n, wk).all_finished() {
                let why = if std::env::var_os("TXBED_DEBUG_STUCK").is_some() {
                    format!(" ({})", sim.worker(n, wk).waiting())
                } else {
                    String::new()
                };
                sh.failures.borrow_mut().push(format!(
                    "node {n} worker {wk}: coroutines still running {} ms after the end of the run{why}",
                    (limit - sh.end) / 1_000_000
                ));
            }
        }
    }
    // Nodes still down are recovered for the final check (the report says they were down).
    if let Some(d) = driver.as_mut() {
        if !recovered {
            d.recover_after_run(
                &mut World { sim: &mut sim, states: &mut states, spec, catalog: &catalog, sh: &sh },
                false,
            );
        }
        if let Some(f) = &d.report.fatal {
            sh.failures.borrow_mut().push(f.clone());
        }
    }
    let loop_ended = std::time::Instant::now();
    // Backups catch up on the logs still in their rings (a recovering backup would too).
    for (b, st) in states.iter().enumerate() {
        let mem = sim.memory(b as u16);
        for sender in 0..spec.nodes {
            for wk in 0..spec.workers {
                txbed_txn::log::drain_ring(st, &*mem, sender, wk);
            }
        }
    }
    let mut results = Vec::new();
    for n in 0..spec.nodes {
        let mut r = node_result(
            spec,
            n,
            &*sim.memory(n),
            catalog.regions[n as usize].addr,
            &states[n as usize..=n as usize],
            &layout,
        );
        if n == 0 {
            add_measured(&mut r, &sh.measured.borrow());
            r.failures = sh.failures.borrow().clone();
        }
        results.push(r);
    }
    let location = crate::outcome::location_total(&results);
    let (history, report, stats, measured, failures) = assemble(spec, results);
    let mut trace = Vec::new();
    for n in 0..spec.nodes {
        for wk in 0..spec.workers {
            trace.append(&mut sim.worker(n, wk).take_trace());
        }
    }
    let servers = spec.protocol.server_workers(&spec.protocol_options).min(spec.workers);
    let server_busy_ns = (0..spec.nodes)
        .flat_map(|n| (0..servers).map(move |wk| (n, wk)))
        .map(|(n, wk)| sim.worker(n, wk).stats().cpu_busy_ns)
        .collect();
    let wall = WallTimes {
        setup_s: (loop_began - began).as_secs_f64(),
        loop_s: (loop_ended - loop_began).as_secs_f64(),
        finish_s: loop_ended.elapsed().as_secs_f64(),
    };
    Ok(TxnRunResult {
        wall,
        server_busy_ns,
        measured,
        history,
        report,
        stats,
        failures,
        digest: sim.digest(),
        events: sim.events(),
        simulated_ns: sim.now(),
        verbs: sim.stats().verbs,
        location,
        htm_mode: spec.protocol.needs().htm.then(|| format!("simulated (CPU profile {})", spec.cpu.name)),
        qp_cache_miss_ratio: Some(sim.stats().qp_cache_misses as f64 / sim.stats().qp_cache_lookups.max(1) as f64),
        trace,
        clocks: sim.clock_stats(),
        faults: driver.map(|d| d.report),
        inter_dc: spec.wan.as_ref().map(|_| {
            let st = sim.stats();
            crate::outcome::InterDc { messages: st.wan_messages, retransmits: st.wan_retransmits, lost: st.wan_lost }
        }),
    })
}

/// Fills `st`'s location cache with every other node's index buckets, as a long warm-up
/// would (up to its capacity: later buckets take the slots of earlier ones).
fn warm_location_cache(st: &NodeState, me: u16, catalog: &Catalog, read: &dyn Fn(u16, u64, &mut [u8])) {
    let mut cache = st.cache.borrow_mut();
    for (m, region) in catalog.regions.iter().enumerate() {
        let m = m as u16;
        if m == me {
            continue; // local lookups read local memory, not the cache
        }
        for place in &catalog.layout.tables {
            let mut b = [0u8; txbed_txn::store::BUCKET_BYTES as usize];
            for i in 0..place.buckets {
                let offset = place.buckets_at + i * txbed_txn::store::BUCKET_BYTES;
                read(m, region.addr + offset, &mut b);
                cache.put(m, place.spec.id, offset, &b);
            }
        }
    }
}
