//! Network partitions on the sockets backend (issue 17, docs/faults.md). A scenario's `faults`
//! whose schedule (random generators expanded with the run's seed) holds only `Partition`s is
//! emulated in each worker's transport; anything else is refused naming the entry, never
//! ignored. The verbs backend refuses every fault: it cannot hold real RDMA traffic.
//!
//! Times are wall-clock ns from the run's common start (`Start(t0)`: the instant the
//! coordinators start, which is time 0 of a simulated run too), so `at_us` means the same on
//! both. While `a -> b` is cut (both ways unless `one_way`, as in the simulator's
//! `NetFaults::cut`): datagrams `a -> b` are dropped (the RPC layer resends), RC doorbells
//! `a -> b` are held in posting order and sent when it heals, and RC completions coming back
//! over a cut `b -> a` are held until it heals. RC never gives up here, so a partition longer
//! than the NIC profile's retry budget (the simulator's `RetryExceeded`) is refused: sockets
//! cannot re-establish a broken connection.

use std::collections::{BTreeMap, VecDeque};

use txbed_scenario::Scenario;
use txbed_sim::faults::{Fault, NetFaults, TimedFault};
use txbed_sim::NicProfile;
use txbed_transport::Nanos;

const ON_SIM: &str = "run on the simulator (--backend sim)";

/// The partitions of a run, by wall-clock window from the common start.
#[derive(Clone, Debug, Default)]
pub struct Partitions {
    /// The simulator's own bookkeeping, so cuts mean exactly what they mean there.
    net: NetFaults,
    /// Each partition: (start ns, what), in the order of the schedule.
    pub applied: Vec<(u64, String)>,
}

impl Partitions {
    /// The `Partition`s of `schedule` (other faults are not taken: `check` refuses them).
    pub fn new(nodes: u16, schedule: &[TimedFault]) -> Partitions {
        let mut p = Partitions::default();
        for f in schedule {
            if let Fault::Partition { a, b, one_way, for_us } = &f.fault {
                p.net.partition(nodes, a, b, *one_way, f.at_us * 1000, for_us * 1000);
                p.applied.push((f.at_us * 1000, f.fault.describe()));
            }
        }
        p
    }

    pub fn is_empty(&self) -> bool {
        self.applied.is_empty()
    }

    /// If the link `from -> to` is cut at `now`, when it heals (overlapping partitions heal
    /// together).
    pub fn cut(&self, from: u16, to: u16, now: Nanos) -> Option<Nanos> {
        (!self.is_empty() && self.net.cut(from, to, now)).then(|| self.net.healed_at(from, to, now))
    }
}

/// RC doorbells held while their link is cut. Per QP in posting order: once one is held,
/// later ones of its QP queue behind it even if the link has healed meanwhile (RC's per-QP
/// FIFO), until `release` sends them.
#[derive(Debug)]
pub struct HeldDoorbells<T> {
    /// QP -> (peer node, doorbells in posting order).
    qps: BTreeMap<u32, (u16, VecDeque<T>)>,
}

impl<T> Default for HeldDoorbells<T> {
    fn default() -> Self {
        HeldDoorbells { qps: BTreeMap::new() }
    }
}

impl<T> HeldDoorbells<T> {
    /// A doorbell for QP `qp` to `peer`, posted at `now` by node `me`: returned to be sent
    /// now, or held (`None`).
    pub fn post(&mut self, p: &Partitions, me: u16, qp: u32, peer: u16, x: T, now: Nanos) -> Option<T> {
        if p.cut(me, peer, now).is_none() && !self.qps.contains_key(&qp) {
            return Some(x);
        }
        self.qps.entry(qp).or_insert_with(|| (peer, VecDeque::new())).1.push_back(x);
        None
    }

    /// Every held doorbell whose link has healed by `now`, each QP's in posting order.
    pub fn release(&mut self, p: &Partitions, me: u16, now: Nanos) -> Vec<T> {
        let mut out = Vec::new();
        self.qps.retain(|_, (peer, q)| {
            if p.cut(me, *peer, now).is_some() {
                return true;
            }
            out.extend(q.drain(..));
            false
        });
        out
    }

    /// When the first held QP's link heals (the worker's idle wait wakes for it).
    pub fn next_heal(&self, p: &Partitions, me: u16, now: Nanos) -> Option<Nanos> {
        self.qps.values().map(|(peer, _)| p.cut(me, *peer, now).unwrap_or(now)).min()
    }

    pub fn is_empty(&self) -> bool {
        self.qps.is_empty()
    }
}

/// What the sockets backend can go without: RC's give-up time on this NIC profile (the
/// simulator's: `rc_timeout_ns` x `rc_retry_count` of retransmissions), and the real RPC
/// layer's (`rpc_retries` x `rpc_rto_ns` of silence). A partition no longer than both loses
/// no RC request and no call.
pub fn budget_ns(profile: &NicProfile, rpc_rto_ns: u64, rpc_retries: u32) -> (u64, String) {
    let r = &profile.reliability;
    let rc = r.rc_timeout_ns.saturating_mul(r.rc_retry_count as u64);
    let rpc = rpc_rto_ns.saturating_mul(rpc_retries as u64);
    if rc <= rpc {
        let why = format!(
            "RC's retry budget on this NIC profile (reliability.rc_timeout_ns {} x rc_retry_count {} = {} us): its requests would give up (RetryExceeded) and the sockets backend cannot re-establish a connection (a larger nic.reliability.rc_timeout_ns raises the budget)",
            r.rc_timeout_ns,
            r.rc_retry_count,
            rc / 1000
        );
        (rc, why)
    } else {
        let why = format!(
            "the sockets backend's RPC budget ({rpc_retries} retransmissions {} ms apart = {} us): calls across it would fail",
            rpc_rto_ns / 1_000_000,
            rpc / 1000
        );
        (rpc, why)
    }
}

/// Checks that the sockets backend can emulate `s`'s faults with `seed`: only partitions,
/// each within `budget_ns` (overlapping ones on a link count together) and healed before the
/// run ends. The error names the entry and what to do.
pub fn check(s: &Scenario, seed: u64, budget: (u64, String)) -> Result<Vec<TimedFault>, String> {
    let Some(f) = &s.faults else { return Ok(Vec::new()) };
    let (budget_ns, why) = budget;
    let refuse = |kind: &str| {
        let what = match kind {
            "Crash" | "Restart" | "CrashDc" | "RestartDc" => {
                format!("{kind} (kill -9 or SIGSTOP a rank to test failure detection, docs/faults.md)")
            }
            "Link" => format!("{kind} (per-message loss, duplication and reordering on one link)"),
            "SlowCpu" => format!("{kind} (its threads run at the host's speed)"),
            _ => format!("{kind} (real runs read the host's clock, run.clock_bound_us)"),
        };
        format!("the sockets backend cannot emulate {what}; {ON_SIM}, or keep only partitions")
    };
    for (i, t) in f.schedule.iter().enumerate() {
        if !matches!(t.fault, Fault::Partition { .. }) {
            return Err(format!("faults.schedule[{i}]: {}", refuse(t.fault.kind())));
        }
    }
    if let Some(r) = &f.random {
        let gens = [
            ("crash", r.crash.is_some(), "Crash"),
            ("dc_crash", r.dc_crash.is_some(), "CrashDc"),
            ("link", r.link.is_some(), "Link"),
            ("slow_cpu", r.slow_cpu.is_some(), "SlowCpu"),
            ("clock_step", r.clock_step.is_some(), "ClockStep"),
            ("clock_drift", r.clock_drift.is_some(), "ClockDrift"),
        ];
        if let Some((name, _, kind)) = gens.iter().find(|g| g.1) {
            return Err(format!("faults.random.{name}: {}", refuse(kind)));
        }
        if let Some(p) = &r.partition {
            if p.for_us.1 * 1000 > budget_ns {
                return Err(format!(
                    "faults.random.partition.for_us: partitions up to {} us are longer than {why}; keep for_us within {} us, or {ON_SIM}",
                    p.for_us.1,
                    budget_ns / 1000
                ));
            }
        }
    }
    let mut seeded = s.clone();
    seeded.run.seed = seed;
    let all = seeded.fault_schedule();
    let end_us = s.run.warmup_us + s.run.measure_us;
    // Where an expanded fault came from: its place in the schedule, else the generator.
    let at = |t: &TimedFault| match f.schedule.iter().position(|x| x == t) {
        Some(i) => format!("faults.schedule[{i}]"),
        None => format!("faults.random.partition (with seed {seed}: `{}` at {} us)", t.fault.describe(), t.at_us),
    };
    for t in &all {
        let len = t.fault.duration_us();
        if len * 1000 > budget_ns {
            return Err(format!(
                "{}.fault.for_us: a {len} us partition is longer than {why}; shorten it to {} us or less, or {ON_SIM}",
                at(t),
                budget_ns / 1000
            ));
        }
        if t.at_us + len > end_us {
            return Err(format!(
                "{}: the partition heals at {} us, after the run ends ({end_us} us); on sockets it must heal before the end (what it holds would be lost when the connections close): end it sooner, or {ON_SIM}",
                at(t),
                t.at_us + len
            ));
        }
    }
    let p = Partitions::new(s.cluster.nodes, &all);
    if let Some((from, to, start, len)) = longest_cut(&p, &all) {
        if len > budget_ns {
            return Err(format!(
                "faults.schedule: partitions overlap and cut node {from} off node {to} for {} us in a row from {} us, longer than {why}; space them out, or {ON_SIM}",
                len / 1000,
                start / 1000
            ));
        }
    }
    Ok(all)
}

/// The longest a directed link is cut in a row (overlapping partitions joined): (from, to,
/// start ns, ns).
fn longest_cut(p: &Partitions, all: &[TimedFault]) -> Option<(u16, u16, u64, u64)> {
    let mut best: Option<(u16, u16, u64, u64)> = None;
    for t in all {
        let Fault::Partition { a, b, one_way, .. } = &t.fault else { continue };
        let start = t.at_us * 1000;
        let pairs = a.iter().flat_map(|&x| b.iter().map(move |&y| (x, y)));
        let back = b.iter().flat_map(|&y| a.iter().map(move |&x| (y, x))).filter(|_| !one_way);
        for (x, y) in pairs.chain(back) {
            let len = p.cut(x, y, start).unwrap_or(start) - start;
            if best.is_none_or(|b| len > b.3) {
                best = Some((x, y, start, len));
            }
        }
    }
    best
}

/// What a worker's emulation did: datagrams dropped, doorbells and completions held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub datagrams_dropped: u64,
    pub doorbells_held: u64,
    pub completions_held: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(at_us: u64, a: Vec<u16>, b: Vec<u16>, one_way: bool, for_us: u64) -> TimedFault {
        TimedFault { at_us, fault: Fault::Partition { a, b, one_way, for_us } }
    }

    #[test]
    fn cuts_follow_the_simulators_sides_and_windows() {
        let p = Partitions::new(4, &[part(10, vec![0], vec![2, 3], true, 5), part(100, vec![1], vec![2], false, 10)]);
        assert_eq!(p.cut(0, 2, 10_000), Some(15_000));
        assert_eq!(p.cut(0, 3, 14_999), Some(15_000));
        assert_eq!(p.cut(2, 0, 12_000), None, "one way: b -> a is not cut");
        assert_eq!(p.cut(0, 2, 15_000), None, "healed");
        assert_eq!(p.cut(0, 2, 9_999), None, "not yet");
        assert_eq!(p.cut(2, 1, 105_000), Some(110_000), "both ways");
        assert_eq!(p.cut(1, 2, 105_000), Some(110_000));
        assert_eq!(p.cut(0, 1, 105_000), None, "nodes on no side");
        assert!(Partitions::new(4, &[]).cut(0, 1, 0).is_none());
    }

    #[test]
    fn held_doorbells_keep_per_qp_fifo() {
        let p = Partitions::new(3, &[part(10, vec![0], vec![1], true, 10)]);
        let mut h = HeldDoorbells::default();
        // Before the cut: sent at once.
        assert_eq!(h.post(&p, 0, 7, 1, "early", 5_000), Some("early"));
        // Cut: held, in order; another QP to an uncut peer goes through.
        assert_eq!(h.post(&p, 0, 7, 1, "a", 10_000), None);
        assert_eq!(h.post(&p, 0, 7, 1, "b", 12_000), None);
        assert_eq!(h.post(&p, 0, 8, 2, "other", 12_000), Some("other"));
        assert_eq!(h.next_heal(&p, 0, 12_000), Some(20_000));
        assert!(h.release(&p, 0, 19_999).is_empty(), "still cut");
        // Healed, but `a` and `b` are not released yet: `c` queues behind them.
        assert_eq!(h.post(&p, 0, 7, 1, "c", 20_000), None);
        assert_eq!(h.release(&p, 0, 20_000), vec!["a", "b", "c"]);
        assert!(h.is_empty());
        assert_eq!(h.post(&p, 0, 7, 1, "d", 20_001), Some("d"));
        // The other direction was never cut.
        assert_eq!(h.post(&p, 1, 3, 0, "back", 15_000), Some("back"));
    }

    #[test]
    fn overlapping_partitions_count_together() {
        let all = [part(10, vec![0], vec![1], false, 100), part(90, vec![1], vec![0, 2], false, 100)];
        let p = Partitions::new(3, &all);
        assert_eq!(longest_cut(&p, &all), Some((0, 1, 10_000, 180_000)));
    }
}
