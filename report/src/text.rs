//! Reports as text, for a terminal.

use std::collections::BTreeMap;

use txbed_runner::report::{Report, TxnReport};
use txbed_scenario::{Scenario, Workload};

/// A primitive (verbs) run's report as text.
pub fn verbs_text(s: &Scenario, r: &Report) -> String {
    let Workload::Verbs(v) = &s.workload else {
        return format!("scenario {:?}: not a Verbs scenario\n", r.scenario);
    };
    let c = &s.cluster;
    let verbs: Vec<String> = r.verbs.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(
        "scenario {:?}, seed {}\n  cluster   {} nodes x {} workers x {} coroutines, NIC {}\n{}  workload  {:?} {} B, {} outstanding per coroutine, random remote nodes\n  throughput {:.2} M requests/s per machine\n  latency   p50 {:.2} us  p90 {:.2} us  p99 {:.2} us  mean {:.2} us\n  verbs     {}\n  simulator {} events, {:.2} M events/s, {} us simulated\n  digest    {}\n",
        r.scenario,
        r.seed,
        c.nodes,
        c.workers,
        c.coroutines,
        c.nic,
        overrides_line("  overrides ", &r.nic_overrides),
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

/// The NIC profile fields a run overrode, as `--set` would write them; empty when none.
fn overrides_line(label: &str, fields: &BTreeMap<String, serde_json::Value>) -> String {
    if fields.is_empty() {
        return String::new();
    }
    let sets: Vec<String> = fields
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("nic.{k}={s}"),
            other => format!("nic.{k}={other}"),
        })
        .collect();
    format!("{label}{}\n", sets.join(", "))
}

/// Coordinator failures, one line per distinct reason (at most five).
pub fn failure_summary(failures: &[String]) -> String {
    let mut distinct: Vec<&String> = failures.iter().collect();
    distinct.sort();
    distinct.dedup();
    let mut out = format!("{} coordinators failed; {} distinct reasons:", failures.len(), distinct.len());
    for f in distinct.iter().take(5) {
        out.push_str(&format!("\n  {f}"));
    }
    out
}

/// A transactional run's report as text.
/// The `causes` line (conflicts by cause, most frequent first), and a warning when conflicts
/// left nothing committed.
fn abort_causes(s: &Scenario, r: &TxnReport) -> String {
    if r.aborted == 0 {
        return String::new();
    }
    let mut by: Vec<(&String, &u64)> = r.aborts_by_cause.iter().collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> =
        by.iter().map(|(c, &n)| format!("{c} {:.1}%", n as f64 * 100.0 / r.aborted as f64)).collect();
    let mut out = format!("  causes     {}\n", parts.join(" | "));
    if r.committed == 0 {
        out.push_str(&format!(
            "  LIVELOCK   no transaction committed in the window: every attempt conflicted (run.retry: {:?}; docs/transactions.md, \"After an abort\")\n",
            s.run.retry
        ));
    }
    out
}

/// The `clocks` line of a run with simulated clocks (empty without): the sync service, the
/// largest error and bound the simulator measured, and bound violations, shouted.
fn servers_line(r: &TxnReport) -> String {
    let Some(s) = &r.servers else { return String::new() };
    let util = match (s.utilisation_mean, s.utilisation_max) {
        (Some(m), Some(x)) => format!("CPU busy {:.1}% on average, {:.1}% at most (whole run)", m * 100.0, x * 100.0),
        _ => "CPU busy not measured on this backend".to_string(),
    };
    format!(
        "  servers    {} server workers, {util}; {:.1} messages per committed transaction\n",
        s.workers, s.messages_per_txn
    )
}

/// The `htm` line of a protocol with HTM, and the `chopping` line of a chopped run.
fn htm_line(r: &TxnReport) -> String {
    let chopping =
        r.chopping.as_ref().map(|c| format!("  chopping   {c}; the checker judged each piece as a transaction\n"));
    let Some(h) = &r.htm else { return chopping.unwrap_or_default() };
    let aborts: Vec<String> = h.aborts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(
        "  htm        {}: {} regions, {} committed ({:.1}%), mean {:.2} us; aborts {}; fallbacks {} ({:.3} per committed transaction) (whole run)\n",
        h.mode,
        h.regions,
        h.committed,
        100.0 * h.committed as f64 / h.regions.max(1) as f64,
        h.mean_region_us,
        aborts.join(", "),
        h.fallbacks,
        h.fallbacks_per_txn
    ) + &chopping.unwrap_or_default()
}

fn clock_line(r: &TxnReport) -> String {
    let Some(c) = &r.clocks else { return String::new() };
    let how = match (c.sync_interval_us, c.master, c.free_bound_us) {
        (Some(i), Some(m), _) => format!("sync every {i} us with node {m}"),
        (_, _, b) => format!("free-running, bound {} us (run.clock_bound_us)", b.unwrap_or(0.0)),
    };
    let violations = match (c.violations, c.first_violation_us) {
        (0, _) => "0 bound violations".to_string(),
        (n, first) => {
            let at = first.map(|t| format!(" (first at {t:.2} us)")).unwrap_or_default();
            format!("{n} BOUND VIOLATION{}{at}", if n == 1 { "" } else { "S" })
        }
    };
    let exchanges = if c.sync_interval_us.is_some() {
        format!(", {} exchanges ({} lost)", c.exchanges, c.lost)
    } else {
        String::new()
    };
    format!(
        "  clocks     {how}: max |error| {:.2} us, max bound {:.2} us, {violations}{exchanges}\n",
        c.max_abs_error_us, c.max_bound_us
    )
}

/// The `faults` and `recovery` lines of a run with faults (empty without): what was applied,
/// when, and what each crashed node went through.
fn fault_lines(r: &TxnReport) -> String {
    let Some(f) = &r.faults else { return String::new() };
    let us = |ns: u64| format!("{:.0} us", ns as f64 / 1000.0);
    let mut out = String::new();
    let applied: Vec<String> = f.applied.iter().take(6).map(|(at, what)| format!("{what} at {}", us(*at))).collect();
    let more = if f.applied.len() > 6 { format!("; and {} more", f.applied.len() - 6) } else { String::new() };
    let none = if f.applied.is_empty() { "none applied" } else { "" };
    out.push_str(&format!(
        "  faults     {none}{}{more}
",
        applied.join("; ")
    ));
    if let Some(e) = &f.emulated {
        let n = f.applied.len();
        out.push_str(&format!(
            "  emulated   {n} partition{} on {}, wall clock from the common start: {} datagrams dropped, {} RC doorbells and {} RC completions held until they healed
",
            if n == 1 { "" } else { "s" },
            e.backend,
            f.lost,
            e.doorbells_held,
            e.completions_held
        ));
    } else if f.lost + f.duplicated + f.gave_up > 0 {
        out.push_str(&format!(
            "  network    faults lost {} messages, duplicated {}, and {} RC requests gave up
",
            f.lost, f.duplicated, f.gave_up
        ));
    }
    for n in &f.recoveries {
        let opt = |t: Option<u64>| t.map(us).unwrap_or_else(|| "never".into());
        let mut line = format!(
            "  recovery   node {}: crashed at {}, declared down at {}, restarted at {}",
            n.node,
            us(n.crashed_ns),
            opt(n.declared_down_ns),
            opt(n.restarted_ns)
        );
        if let Some(b) = n.rebuilt_ns {
            line.push_str(&format!(
                ", rebuilt at {} ({} transactions rolled forward, {} locks released, {} + {} records)",
                us(b),
                n.rolled_forward,
                n.locks_released,
                n.store_records,
                n.replica_records
            ));
        }
        if n.aborted_by_recovery > 0 {
            line.push_str(&format!(", {} past their commit point aborted by recovery", n.aborted_by_recovery));
        }
        if n.lost_pending > 0 {
            line.push_str(&format!(", {} PENDING TRANSACTIONS LOST (volatile logs)", n.lost_pending));
        }
        match (n.up_ns, n.after_run) {
            (_, true) => line.push_str(", DOWN AT THE END: recovered after the run for the final check"),
            (Some(u), _) => line.push_str(&format!(", up at {}", us(u))),
            (None, _) => {}
        }
        if n.caught_up > 0 {
            line.push_str(&format!(", then caught up on {} records written while it was restored", n.caught_up));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Where the simulator's wall-clock time went, and how many committed transactions it
/// simulated per wall second.
fn wall_line(r: &TxnReport) -> String {
    match (r.sim.wall, r.sim.committed_per_wall_s) {
        (Some(w), Some(c)) => format!(
            "  wall       {:.2} s ({} build): set-up {:.2} s, event loop {:.2} s, results and check {:.2} s; {:.0} committed transactions simulated per wall second\n",
            w.setup_s + w.loop_s + w.finish_s,
            r.sim.build,
            w.setup_s,
            w.loop_s,
            w.finish_s,
            c
        ),
        _ => String::new(),
    }
}

/// The messages between data centers, when the scenario has them: the simulator's count,
/// then the coordinators' by stage (also on sockets, which counts no whole-run total).
fn inter_dc_line(r: &TxnReport) -> String {
    let stages: Vec<String> = r
        .stages
        .iter()
        .filter(|(_, v)| v.inter_dc_messages_per_committed > 0.0)
        .map(|(k, v)| {
            format!(
                "{k} {:.2} RTT / {:.2} msgs",
                v.inter_dc_round_trips_per_committed, v.inter_dc_messages_per_committed
            )
        })
        .collect();
    let by_stage = |stages: Vec<String>| {
        let stages = if stages.is_empty() { "none".to_string() } else { stages.join(" | ") };
        format!(
            "  inter-DC   by stage, per committed transaction (coordinators' requests and their replies): {stages}\n"
        )
    };
    match &r.inter_dc {
        Some(d) => format!(
            "  inter-DC   {} messages ({:.2} per committed transaction), {} retransmitted, {} lost (whole run; requests and responses)\n{}",
            d.messages,
            d.per_committed,
            d.retransmits,
            d.lost,
            by_stage(stages)
        ),
        None if !stages.is_empty() => by_stage(stages),
        None => String::new(),
    }
}

pub fn txn_text(s: &Scenario, r: &TxnReport) -> String {
    let c = &s.cluster;
    let yes = |b: bool| if b { "yes" } else { "NO" };
    let stages: Vec<String> = r
        .stages
        .iter()
        .map(|(k, v)| {
            let lookups =
                if v.lookup_reads >= 0.005 { format!(" + {:.2} lookup READs", v.lookup_reads) } else { String::new() };
            let local = if v.local > 0.0 { format!(" / {:.1} local", v.local) } else { String::new() };
            format!("{k} {:.2} us / {:.1} RTT{lookups} / {:.0} B{local}", v.mean_us, v.round_trips, v.bytes)
        })
        .collect();
    let verbs: Vec<String> = r.verbs.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let types: Vec<String> = r.per_type.iter().map(|(k, t)| format!("{k} {:.0}/s", t.tps)).collect();
    let mut out = format!(
        "scenario {:?}, seed {}: {} ({}) on {}\n  cluster    {} nodes x {} workers x {} coroutines, NIC {}\n{}  throughput {:.0} transactions/s ({:.0} per node), {} committed in the window\n  latency    p50 {:.2} us  p90 {:.2} us  p99 {:.2} us  p99.9 {:.2} us  max {:.2} us  mean {:.2} us\n  aborts     {:.1}% ({} conflicts in the window), {} user aborts\n{}  types      {}\n{}  stages     {}\n{}  verbs      {}\n  locations  {}\n  log        {}\n{}{}{}{}{}  {}: {}{}; {} transactions checked ({} aborted), invariants {}\n{}",
        r.scenario,
        r.seed,
        r.protocol,
        r.hybrid,
        s.workload.title(),
        c.nodes,
        c.workers,
        c.coroutines,
        c.nic,
        overrides_line("  overrides  ", &r.nic_overrides),
        r.throughput_tps,
        r.throughput_tps / c.nodes as f64,
        r.committed,
        r.latency_us.p50,
        r.latency_us.p90,
        r.latency_us.p99,
        r.latency_us.p999,
        r.latency_us.max,
        r.latency_us.mean,
        r.abort_rate * 100.0,
        r.aborted,
        r.user_aborts,
        abort_causes(s, r),
        types.join(" | "),
        crate::latency::breakdown_lines(r),
        stages.join(" | "),
        crate::latency::stage_total_line(r),
        verbs.join(", "),
        {
            let l = &r.location_cache;
            format!(
                "cache {} hits, {} misses, {} stale; lookups cost {} READs ({} B) besides the stages' round trips (whole run)",
                l.hits, l.misses, l.stale, l.reads, l.read_bytes
            )
        },
        {
            let nvram = if r.log.nvram_records > 0 {
                format!("; {} records, {} B to the nodes' NVRAM logs", r.log.nvram_records, r.log.nvram_bytes)
            } else {
                String::new()
            };
            format!(
                "{} records, {} B to backups; writers waited for ring room {} times{nvram} (whole run)",
                r.log.records, r.log.bytes, r.log.room_waits
            )
        },
        servers_line(r),
        format!("{}{}", htm_line(r), inter_dc_line(r)),
        clock_line(r),
        fault_lines(r),
        if r.backend == "sim" {
            format!(
                "  simulator  {} events, {:.2} M events/s{}, {} us simulated\n{}  digest     {}\n",
                r.sim.events,
                r.sim.events_per_s / 1e6,
                if r.sim.wall.is_some() { " in the event loop" } else { "" },
                r.sim.simulated_ns / 1000,
                wall_line(r),
                r.digest
            )
        } else {
            format!("  backend    {}, {:.2} s wall clock (not deterministic: no digest)\n", r.backend, r.sim.simulated_ns as f64 / 1e9)
        },
        r.check.level,
        yes(r.check.level_holds),
        match r.check.nothing_lost {
            Some(true) => ", nothing lost",
            Some(false) => ", WRITES LOST",
            None => "",
        },
        r.check.checked_txns,
        r.check.aborted_txns,
        if r.check.invariants_ok { "hold" } else { "VIOLATED" },
        allowed_line(&r.check.level, &r.check.allowed),
    );
    for w in &r.warnings {
        out.push_str(&format!("  WARNING    {w}\n"));
    }
    for e in r.check.explanations.iter().take(3) {
        out.push_str(&format!("\n{e}\n"));
    }
    out
}

/// Anomalies the checked level allows, apart from the verdict (they do not fail the run).
fn allowed_line(level: &str, allowed: &std::collections::BTreeMap<&'static str, usize>) -> String {
    if allowed.is_empty() {
        return String::new();
    }
    let list: Vec<String> = allowed.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("  allowed    {} (anomalies {level} allows: not counted against the run)\n", list.join(", "))
}
