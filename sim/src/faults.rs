//! Faults as data (issue 17, after TigerBeetle's VOPR and FoundationDB's simulation): a
//! schedule of timed faults, random generators that expand into such a schedule from a seed,
//! and the network faults' state the fabric consults on every packet.
//!
//! The vocabulary: crash a node (its CPUs, NIC and volatile memory are gone) and restart it,
//! crash or restart a whole data center, partition sets of nodes (both ways or one way) for a
//! while, drop/duplicate/delay/reorder the messages of a link for a while, slow a node's CPUs,
//! step or drift a node's clock. Node crashes and restarts are carried out by the runner
//! (recovery needs the transaction layer); the network faults and the CPU slow-down by the
//! fabric, at the exact simulated time the schedule gives, and every application is folded
//! into the digest, so a faulty run replays bit for bit from its seed.

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// A fault and when it happens, us of simulated time from the start of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimedFault {
    pub at_us: u64,
    pub fault: Fault,
}

/// One fault of the vocabulary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Fault {
    /// The node stops: its CPUs and NIC, at once; what its volatile memory held is lost.
    #[serde(alias = "crash")]
    Crash { node: u16 },
    /// A crashed node boots again, recovers from its durable memory and the other nodes'
    /// replicas, and rejoins.
    #[serde(alias = "restart")]
    Restart { node: u16 },
    /// Every node of a data center (its name, or `dcN` by position) crashes at once.
    #[serde(alias = "crash_dc")]
    CrashDc { dc: String },
    /// Every node of a crashed data center restarts.
    #[serde(alias = "restart_dc")]
    RestartDc { dc: String },
    /// Nothing gets from a node of `a` to a node of `b`, nor back unless `one_way`, for
    /// `for_us`; then the partition heals.
    #[serde(alias = "partition")]
    Partition {
        a: Vec<u16>,
        b: Vec<u16>,
        #[serde(default)]
        one_way: bool,
        for_us: u64,
    },
    /// For `for_us`, each message from `from` to `to` (and back with `both_ways`) is lost
    /// with probability `drop`, sent twice with probability `duplicate`, delayed by
    /// `delay_us`, and delayed by a further uniform draw in [0, `reorder_us`] so messages
    /// overtake each other. Reliable transports (RC) resend what is lost and never
    /// reorder or duplicate (their packet sequence numbers).
    #[serde(alias = "link")]
    Link {
        from: u16,
        to: u16,
        #[serde(default)]
        both_ways: bool,
        for_us: u64,
        #[serde(default)]
        drop: f64,
        #[serde(default)]
        duplicate: f64,
        #[serde(default)]
        delay_us: u64,
        #[serde(default)]
        reorder_us: u64,
    },
    /// The node's CPUs take `factor` times as long for everything they do, for `for_us`
    /// (a noisy neighbour, thermal throttling, a garbage-collection pause at factor 100).
    #[serde(alias = "slow_cpu")]
    SlowCpu { node: u16, factor: f64, for_us: u64 },
    /// The node's clock jumps by `by_us` (negative: back).
    #[serde(alias = "clock_step")]
    ClockStep { node: u16, by_us: i64 },
    /// The node's clock runs `ppm` parts per million fast (negative: slow) from now on.
    #[serde(alias = "clock_drift")]
    ClockDrift { node: u16, ppm: f64 },
}

impl Fault {
    /// The fault's name as the scenario spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Crash { .. } => "Crash",
            Fault::Restart { .. } => "Restart",
            Fault::CrashDc { .. } => "CrashDc",
            Fault::RestartDc { .. } => "RestartDc",
            Fault::Partition { .. } => "Partition",
            Fault::Link { .. } => "Link",
            Fault::SlowCpu { .. } => "SlowCpu",
            Fault::ClockStep { .. } => "ClockStep",
            Fault::ClockDrift { .. } => "ClockDrift",
        }
    }

    /// How long it lasts, us (0 for a fault that happens at an instant).
    pub fn duration_us(&self) -> u64 {
        match self {
            Fault::Partition { for_us, .. } | Fault::Link { for_us, .. } | Fault::SlowCpu { for_us, .. } => *for_us,
            _ => 0,
        }
    }

    /// The same fault lasting `us` (faults without a duration are unchanged).
    pub fn with_duration_us(&self, us: u64) -> Fault {
        let mut f = self.clone();
        match &mut f {
            Fault::Partition { for_us, .. } | Fault::Link { for_us, .. } | Fault::SlowCpu { for_us, .. } => {
                *for_us = us
            }
            _ => {}
        }
        f
    }

    /// One line for reports: what and where.
    pub fn describe(&self) -> String {
        let list = |v: &[u16]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",");
        match self {
            Fault::Crash { node } => format!("crash node {node}"),
            Fault::Restart { node } => format!("restart node {node}"),
            Fault::CrashDc { dc } => format!("crash data center {dc}"),
            Fault::RestartDc { dc } => format!("restart data center {dc}"),
            Fault::Partition { a, b, one_way, for_us } => {
                let arrow = if *one_way { "->" } else { "<->" };
                format!("partition [{}] {arrow} [{}] for {for_us} us", list(a), list(b))
            }
            Fault::Link { from, to, both_ways, for_us, drop, duplicate, delay_us, reorder_us } => {
                let arrow = if *both_ways { "<->" } else { "->" };
                format!(
                    "link {from} {arrow} {to} for {for_us} us: drop {drop}, duplicate {duplicate}, delay {delay_us} us, reorder {reorder_us} us"
                )
            }
            Fault::SlowCpu { node, factor, for_us } => format!("node {node}'s CPUs {factor}x slower for {for_us} us"),
            Fault::ClockStep { node, by_us } => format!("node {node}'s clock steps {by_us:+} us"),
            Fault::ClockDrift { node, ppm } => format!("node {node}'s clock drifts {ppm:+} ppm"),
        }
    }
}

/// Which parts of a node's memory survive its crash.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Region {
    /// The records and their index (the store).
    #[serde(alias = "store")]
    Store,
    /// The log rings a backup keeps and the replica it applies them to (battery-backed
    /// NVRAM, as FaRM and DrTM Sec. 5.6 assume for logs).
    #[serde(alias = "logs")]
    Logs,
}

/// The largest rate a generator may have: one fault every microsecond.
pub const MAX_PER_MS: f64 = 1000.0;
/// The longest a fault may last, and the largest delay it may add: 10 s.
pub const MAX_FAULT_US: u64 = 10_000_000;
/// The most events a schedule may hold (expanded generators included).
pub const MAX_FAULTS: usize = 100_000;

/// Random fault generators: each fires at random times at its mean rate over the window
/// [`from_us`, `until_us`), and they expand, from the run's seed, into a schedule of the
/// same vocabulary as a hand-written one (so a failing run can be printed, edited, shrunk).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomFaults {
    /// Faults start no earlier than this, us.
    pub from_us: u64,
    /// ... and no later than this, us; `None`: the end of the run.
    pub until_us: Option<u64>,
    /// At most this many nodes are down at once (crashed and not yet restarted); a crash
    /// that would exceed it is not drawn. Default 1.
    pub max_down: Option<u16>,
    /// At most this many crashes (of nodes and data centers) are drawn per run; `None`: no
    /// limit. `Some(1)`: exactly the "one crash mid-run" campaigns (a failure that recovery
    /// has not finished with is a second, overlapping failure).
    pub max_crashes: Option<u32>,
    /// A node crashes and restarts after a downtime drawn from `down_us`.
    pub crash: Option<CrashRate>,
    /// A whole data center crashes and restarts (needs two or more data centers).
    pub dc_crash: Option<CrashRate>,
    /// The nodes split into two random sides for a while.
    pub partition: Option<PartitionRate>,
    /// A random link drops, duplicates, delays or reorders messages for a while.
    pub link: Option<LinkRate>,
    /// A random node's CPUs slow down for a while.
    pub slow_cpu: Option<SlowCpuRate>,
    /// A random node's clock steps.
    pub clock_step: Option<ClockStepRate>,
    /// A random node's clock starts drifting.
    pub clock_drift: Option<ClockDriftRate>,
}

/// A closed range `(lo, hi)` a value is drawn from, uniformly.
pub type Range<T> = (T, T);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrashRate {
    /// Mean faults per millisecond of simulated time.
    pub per_ms: f64,
    /// Time until the restart, us (at least the failure-detection time `detect_us`).
    pub down_us: Range<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionRate {
    pub per_ms: f64,
    pub for_us: Range<u64>,
    /// Probability that a partition is one-way.
    #[serde(default)]
    pub one_way: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkRate {
    pub per_ms: f64,
    pub for_us: Range<u64>,
    #[serde(default = "zero_range_f")]
    pub drop: Range<f64>,
    #[serde(default = "zero_range_f")]
    pub duplicate: Range<f64>,
    #[serde(default = "zero_range_u")]
    pub delay_us: Range<u64>,
    #[serde(default = "zero_range_u")]
    pub reorder_us: Range<u64>,
}

fn zero_range_f() -> Range<f64> {
    (0.0, 0.0)
}
fn zero_range_u() -> Range<u64> {
    (0, 0)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowCpuRate {
    pub per_ms: f64,
    pub for_us: Range<u64>,
    pub factor: Range<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockStepRate {
    pub per_ms: f64,
    pub by_us: Range<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockDriftRate {
    pub per_ms: f64,
    pub ppm: Range<f64>,
}

/// What a schedule is checked and expanded against.
#[derive(Clone, Debug)]
pub struct Topology {
    pub nodes: u16,
    /// Data center names, in order (`dc0`... where unnamed); empty: one data center.
    pub dcs: Vec<String>,
    /// The data center of each node (empty with one data center).
    pub dc_of: Vec<u16>,
    /// The failure-detection time, us: a restart comes no sooner after its crash.
    pub detect_us: u64,
    /// The end of the run, us.
    pub end_us: u64,
}

impl Topology {
    /// The nodes of data center `name`, if there is one of that name.
    pub fn dc_nodes(&self, name: &str) -> Option<Vec<u16>> {
        let i = self.dcs.iter().position(|d| d == name)?;
        Some((0..self.nodes).filter(|&n| self.dc_of.get(n as usize).copied() == Some(i as u16)).collect())
    }

    /// The nodes a fault crashes (`Crash`, `CrashDc`) or restarts (`Restart`, `RestartDc`).
    pub fn nodes_of(&self, f: &Fault) -> Vec<u16> {
        match f {
            Fault::Crash { node } | Fault::Restart { node } => vec![*node],
            Fault::CrashDc { dc } | Fault::RestartDc { dc } => self.dc_nodes(dc).unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

fn probability(what: &str, p: f64) -> Result<(), String> {
    if p.is_finite() && (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!("{what} must be a probability in 0..=1, got {p}"))
    }
}

fn node_in(what: &str, n: u16, t: &Topology) -> Result<(), String> {
    if n < t.nodes {
        Ok(())
    } else {
        Err(format!("{what} {n} is not a node (there are {}: 0..={})", t.nodes, t.nodes - 1))
    }
}

fn duration(what: &str, us: u64) -> Result<(), String> {
    if (1..=MAX_FAULT_US).contains(&us) {
        Ok(())
    } else {
        Err(format!("{what} must be 1..={MAX_FAULT_US} us, got {us}"))
    }
}

impl Fault {
    /// Checks the fault's own values; the error is (field, problem).
    pub fn check(&self, t: &Topology) -> Result<(), (&'static str, String)> {
        match self {
            Fault::Crash { node } | Fault::Restart { node } => node_in("node", *node, t).map_err(|m| ("node", m)),
            Fault::CrashDc { dc } | Fault::RestartDc { dc } => {
                if t.dcs.len() < 2 {
                    return Err(("dc", "the cluster has one data center: crash its nodes with Crash(node: N)".into()));
                }
                match t.dc_nodes(dc) {
                    Some(_) => Ok(()),
                    None => Err(("dc", format!("no data center is named `{dc}` (there are {})", t.dcs.join(", ")))),
                }
            }
            Fault::Partition { a, b, for_us, .. } => {
                duration("for_us", *for_us).map_err(|m| ("for_us", m))?;
                for (side, v) in [("a", a), ("b", b)] {
                    if v.is_empty() {
                        return Err((side, "a side needs at least one node".into()));
                    }
                    for &n in v {
                        node_in("node", n, t).map_err(|m| (side, m))?;
                    }
                }
                if let Some(n) = a.iter().find(|n| b.contains(n)) {
                    return Err(("b", format!("node {n} is on both sides")));
                }
                Ok(())
            }
            Fault::Link { from, to, for_us, drop, duplicate, delay_us, reorder_us, .. } => {
                node_in("from", *from, t).map_err(|m| ("from", m))?;
                node_in("to", *to, t).map_err(|m| ("to", m))?;
                if from == to {
                    return Err(("to", format!("node {to} to itself is not a link")));
                }
                duration("for_us", *for_us).map_err(|m| ("for_us", m))?;
                probability("drop", *drop).map_err(|m| ("drop", m))?;
                probability("duplicate", *duplicate).map_err(|m| ("duplicate", m))?;
                if *drop >= 1.0 {
                    return Err(("drop", "1 loses everything: use a one-way Partition".into()));
                }
                if *delay_us > MAX_FAULT_US {
                    return Err(("delay_us", format!("must be at most {MAX_FAULT_US} us, got {delay_us}")));
                }
                if *reorder_us > MAX_FAULT_US {
                    return Err(("reorder_us", format!("must be at most {MAX_FAULT_US} us, got {reorder_us}")));
                }
                Ok(())
            }
            Fault::SlowCpu { node, factor, for_us } => {
                node_in("node", *node, t).map_err(|m| ("node", m))?;
                duration("for_us", *for_us).map_err(|m| ("for_us", m))?;
                if !(factor.is_finite() && (1.0..=1000.0).contains(factor)) {
                    return Err(("factor", format!("must be 1..=1000 (times slower), got {factor}")));
                }
                Ok(())
            }
            Fault::ClockStep { node, by_us } => {
                node_in("node", *node, t).map_err(|m| ("node", m))?;
                if by_us.unsigned_abs() > MAX_FAULT_US {
                    return Err(("by_us", format!("must be within +-{MAX_FAULT_US} us, got {by_us}")));
                }
                Ok(())
            }
            Fault::ClockDrift { node, ppm } => {
                node_in("node", *node, t).map_err(|m| ("node", m))?;
                if !(ppm.is_finite() && ppm.abs() <= 100_000.0) {
                    return Err(("ppm", format!("must be within +-100000 ppm, got {ppm}")));
                }
                Ok(())
            }
        }
    }
}

/// Checks a schedule (in any order): each fault's values, its time within the run, and the
/// node life cycle: a node crashes only when up, restarts only when down, and no sooner than
/// `detect_us` after its crash (the membership service must have declared it down). The
/// error is (index in `schedule`, field, problem).
pub fn check_schedule(schedule: &[TimedFault], t: &Topology) -> Result<(), (usize, &'static str, String)> {
    if schedule.len() > MAX_FAULTS {
        return Err((MAX_FAULTS, "", format!("at most {MAX_FAULTS} faults, got {}", schedule.len())));
    }
    for (i, f) in schedule.iter().enumerate() {
        f.fault.check(t).map_err(|(field, m)| (i, field, m))?;
        if f.at_us >= t.end_us {
            return Err((
                i,
                "at_us",
                format!("{} us is not before the end of the run ({} us): it would never happen", f.at_us, t.end_us),
            ));
        }
    }
    // Node life cycles, in time order (ties in schedule order, as they are applied).
    let mut down_since: Vec<Option<u64>> = vec![None; t.nodes as usize];
    for i in sorted(schedule) {
        let f = &schedule[i];
        for n in t.nodes_of(&f.fault) {
            let s = &mut down_since[n as usize];
            match (&f.fault, *s) {
                (Fault::Crash { .. } | Fault::CrashDc { .. }, Some(at)) => {
                    return Err((i, "at_us", format!("node {n} is already down (crashed at {at} us)")));
                }
                (Fault::Crash { .. } | Fault::CrashDc { .. }, None) => *s = Some(f.at_us),
                (Fault::Restart { .. } | Fault::RestartDc { .. }, None) => {
                    return Err((i, "at_us", format!("node {n} is not down at {} us: crash it first", f.at_us)));
                }
                (Fault::Restart { .. } | Fault::RestartDc { .. }, Some(at)) => {
                    if f.at_us < at + t.detect_us {
                        return Err((
                            i,
                            "at_us",
                            format!(
                                "node {n} restarts {} us after its crash at {at} us, but is declared down only {} us after it (faults.detect_us): restart at {} us or later",
                                f.at_us - at,
                                t.detect_us,
                                at + t.detect_us
                            ),
                        ));
                    }
                    *s = None;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// When each node `schedule` crashes is down: (crash, restart or the end, nodes).
fn down_intervals(schedule: &[TimedFault], t: &Topology) -> Vec<(u64, u64, Vec<u16>)> {
    let mut out: Vec<(u64, u64, Vec<u16>)> = Vec::new();
    for i in sorted(schedule) {
        let f = &schedule[i];
        for n in t.nodes_of(&f.fault) {
            match f.fault {
                Fault::Crash { .. } | Fault::CrashDc { .. } => out.push((f.at_us, t.end_us, vec![n])),
                _ => {
                    if let Some(d) = out.iter_mut().rev().find(|d| d.2 == [n] && d.1 == t.end_us) {
                        d.1 = f.at_us;
                    }
                }
            }
        }
    }
    out
}

/// Indices of `schedule` in application order: by time, ties in schedule order.
pub fn sorted(schedule: &[TimedFault]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..schedule.len()).collect();
    idx.sort_by_key(|&i| (schedule[i].at_us, i));
    idx
}

fn rate(what: &'static str, per_ms: f64) -> Result<(), (&'static str, String)> {
    if per_ms.is_finite() && per_ms > 0.0 && per_ms <= MAX_PER_MS {
        Ok(())
    } else {
        Err((what, format!("per_ms must be more than 0 and at most {MAX_PER_MS}, got {per_ms}")))
    }
}

fn range_u(what: &'static str, (lo, hi): Range<u64>, min: u64) -> Result<(), (&'static str, String)> {
    if lo > hi {
        return Err((what, format!("(lo, hi) needs lo <= hi, got ({lo}, {hi})")));
    }
    if lo < min || hi > MAX_FAULT_US {
        return Err((what, format!("must lie in {min}..={MAX_FAULT_US}, got ({lo}, {hi})")));
    }
    Ok(())
}

fn range_f(what: &'static str, (lo, hi): Range<f64>, min: f64, max: f64) -> Result<(), (&'static str, String)> {
    if !(lo.is_finite() && hi.is_finite()) || lo > hi || lo < min || hi > max {
        return Err((what, format!("(lo, hi) must have {min} <= lo <= hi <= {max}, got ({lo}, {hi})")));
    }
    Ok(())
}

impl RandomFaults {
    /// Checks the generators; the error is (field, problem).
    pub fn check(&self, t: &Topology) -> Result<(), (&'static str, String)> {
        let until = self.until_us.unwrap_or(t.end_us);
        if self.from_us >= until {
            return Err(("from_us", format!("the window [{}, {until}) us is empty", self.from_us)));
        }
        if until > t.end_us {
            return Err(("until_us", format!("{until} us is past the end of the run ({} us)", t.end_us)));
        }
        if let Some(m) = self.max_down {
            if m == 0 || m >= t.nodes {
                return Err(("max_down", format!("must be 1..={} (one node must stay up), got {m}", t.nodes - 1)));
            }
        }
        if self.max_crashes == Some(0) {
            return Err(("max_crashes", "must be 1 or more (or left out: no limit)".into()));
        }
        if let Some(c) = &self.crash {
            rate("crash", c.per_ms)?;
            range_u("crash.down_us", c.down_us, t.detect_us.max(1))?;
        }
        if let Some(c) = &self.dc_crash {
            if t.dcs.len() < 2 {
                return Err(("dc_crash", "needs two or more data centers (cluster.datacenters)".into()));
            }
            rate("dc_crash", c.per_ms)?;
            range_u("dc_crash.down_us", c.down_us, t.detect_us.max(1))?;
        }
        if let Some(p) = &self.partition {
            rate("partition", p.per_ms)?;
            range_u("partition.for_us", p.for_us, 1)?;
            range_f("partition.one_way", (p.one_way, p.one_way), 0.0, 1.0)?;
        }
        if let Some(l) = &self.link {
            rate("link", l.per_ms)?;
            range_u("link.for_us", l.for_us, 1)?;
            range_f("link.drop", l.drop, 0.0, 0.99)?;
            range_f("link.duplicate", l.duplicate, 0.0, 1.0)?;
            range_u("link.delay_us", l.delay_us, 0)?;
            range_u("link.reorder_us", l.reorder_us, 0)?;
        }
        if let Some(s) = &self.slow_cpu {
            rate("slow_cpu", s.per_ms)?;
            range_u("slow_cpu.for_us", s.for_us, 1)?;
            range_f("slow_cpu.factor", s.factor, 1.0, 1000.0)?;
        }
        if let Some(c) = &self.clock_step {
            rate("clock_step", c.per_ms)?;
            let m = MAX_FAULT_US as i64;
            if c.by_us.0 > c.by_us.1 || c.by_us.0 < -m || c.by_us.1 > m {
                return Err((
                    "clock_step.by_us",
                    format!("(lo, hi) must lie in -{m}..={m}, lo <= hi, got {:?}", c.by_us),
                ));
            }
        }
        if let Some(c) = &self.clock_drift {
            rate("clock_drift", c.per_ms)?;
            range_f("clock_drift.ppm", c.ppm, -100_000.0, 100_000.0)?;
        }
        Ok(())
    }

    /// The schedule these generators give with `seed`, in time order, beside the faults
    /// `fixed` schedules (a crash is not drawn for a node `fixed` has down then). Draws come
    /// from a stream of their own. Gaps between a generator's events are uniform in [0, 2 / rate]
    /// (mean 1 / rate), an integer draw: exponential gaps would need a logarithm, and libm's
    /// may differ between platforms, while a schedule must be the same everywhere.
    pub fn expand(&self, seed: u64, t: &Topology, fixed: &[TimedFault]) -> Vec<TimedFault> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa17_5eed_0017);
        let from = self.from_us;
        let until = self.until_us.unwrap_or(t.end_us).min(t.end_us);
        let mut out = Vec::new();
        // Each generator's arrival times, from its own part of the stream (adding one
        // generator leaves the others' draws as they were).
        let times = |rng: &mut ChaCha8Rng, per_ms: f64| -> Vec<u64> {
            let mean_gap_ns = (1e6 / per_ms).max(1.0) as u64;
            let mut v = Vec::new();
            let mut at = from * 1000;
            loop {
                at += rng.gen_range(0..=2 * mean_gap_ns);
                if at >= until * 1000 || v.len() >= MAX_FAULTS {
                    break;
                }
                v.push(at / 1000);
            }
            v
        };
        let mut sub = |k: u64| ChaCha8Rng::seed_from_u64(rng.next_u64() ^ k);
        let (mut r_crash, mut r_dc, mut r_part, mut r_link, mut r_slow, mut r_step, mut r_drift) =
            (sub(1), sub(2), sub(3), sub(4), sub(5), sub(6), sub(7));
        let pick = |rng: &mut ChaCha8Rng, (lo, hi): Range<u64>| rng.gen_range(lo..=hi);
        // Drawn reals keep three decimals: schedules stay readable, and a printed one
        // reads back to the same value.
        let pick_f = |rng: &mut ChaCha8Rng, (lo, hi): Range<f64>| {
            let v = if hi > lo { rng.gen_range(lo..=hi) } else { lo };
            ((v * 1000.0).round() / 1000.0).clamp(lo, hi)
        };
        // Crashes: a node (or a data center) goes down, and restarts after its downtime,
        // if no more than `max_down` nodes would be down at once.
        let max_down = self.max_down.unwrap_or(1) as usize;
        let mut down: Vec<(u64, u64, Vec<u16>)> = down_intervals(fixed, t); // (from, until, nodes)
        let mut crashes = Vec::new();
        if let Some(c) = &self.crash {
            for at in times(&mut r_crash, c.per_ms) {
                let node = r_crash.gen_range(0..t.nodes);
                crashes.push((at, pick(&mut r_crash, c.down_us), vec![node], None));
            }
        }
        if let Some(c) = &self.dc_crash {
            for at in times(&mut r_dc, c.per_ms) {
                let dc = r_dc.gen_range(0..t.dcs.len());
                let nodes = t.dc_nodes(&t.dcs[dc]).unwrap_or_default();
                crashes.push((at, pick(&mut r_dc, c.down_us), nodes, Some(t.dcs[dc].clone())));
            }
        }
        crashes.sort_by_key(|c| c.0);
        let mut drawn = 0u32;
        for (at, down_us, nodes, dc) in crashes {
            if self.max_crashes.is_some_and(|m| drawn >= m) {
                break;
            }
            let restart = at + down_us.max(t.detect_us);
            let overlapping = |x: &(u64, u64, Vec<u16>)| x.0 <= restart && at <= x.1;
            let busy: Vec<u16> = down.iter().filter(|x| overlapping(x)).flat_map(|x| x.2.clone()).collect();
            // A node already down (or coming back) in that interval, or too many down: skip.
            if nodes.iter().any(|n| busy.contains(n)) || busy.len() + nodes.len() > max_down {
                continue;
            }
            down.push((at, restart, nodes.clone()));
            drawn += 1;
            let (crash, back) = match dc {
                Some(dc) => (Fault::CrashDc { dc: dc.clone() }, Fault::RestartDc { dc }),
                None => (Fault::Crash { node: nodes[0] }, Fault::Restart { node: nodes[0] }),
            };
            out.push(TimedFault { at_us: at, fault: crash });
            if restart < t.end_us {
                out.push(TimedFault { at_us: restart, fault: back });
            }
        }
        if let Some(p) = &self.partition {
            for at in times(&mut r_part, p.per_ms) {
                // A random proper, non-empty subset on side a.
                let mut a: Vec<u16> = Vec::new();
                let mut b: Vec<u16> = Vec::new();
                for n in 0..t.nodes {
                    if r_part.gen_bool(0.5) {
                        a.push(n)
                    } else {
                        b.push(n)
                    }
                }
                if a.is_empty() {
                    a.push(b.remove(0));
                } else if b.is_empty() {
                    b.push(a.pop().expect("a side"));
                }
                let one_way = p.one_way > 0.0 && r_part.gen_bool(p.one_way);
                out.push(TimedFault {
                    at_us: at,
                    fault: Fault::Partition { a, b, one_way, for_us: pick(&mut r_part, p.for_us) },
                });
            }
        }
        if let Some(l) = &self.link {
            for at in times(&mut r_link, l.per_ms) {
                let from = r_link.gen_range(0..t.nodes);
                let to = (from + r_link.gen_range(1..t.nodes)) % t.nodes;
                out.push(TimedFault {
                    at_us: at,
                    fault: Fault::Link {
                        from,
                        to,
                        both_ways: r_link.gen_bool(0.5),
                        for_us: pick(&mut r_link, l.for_us),
                        drop: pick_f(&mut r_link, l.drop),
                        duplicate: pick_f(&mut r_link, l.duplicate),
                        delay_us: pick(&mut r_link, l.delay_us),
                        reorder_us: pick(&mut r_link, l.reorder_us),
                    },
                });
            }
        }
        if let Some(s) = &self.slow_cpu {
            for at in times(&mut r_slow, s.per_ms) {
                let node = r_slow.gen_range(0..t.nodes);
                let fault =
                    Fault::SlowCpu { node, factor: pick_f(&mut r_slow, s.factor), for_us: pick(&mut r_slow, s.for_us) };
                out.push(TimedFault { at_us: at, fault });
            }
        }
        if let Some(c) = &self.clock_step {
            for at in times(&mut r_step, c.per_ms) {
                let node = r_step.gen_range(0..t.nodes);
                let by_us = r_step.gen_range(c.by_us.0..=c.by_us.1);
                out.push(TimedFault { at_us: at, fault: Fault::ClockStep { node, by_us } });
            }
        }
        if let Some(c) = &self.clock_drift {
            for at in times(&mut r_drift, c.per_ms) {
                let node = r_drift.gen_range(0..t.nodes);
                out.push(TimedFault { at_us: at, fault: Fault::ClockDrift { node, ppm: pick_f(&mut r_drift, c.ppm) } });
            }
        }
        let order = sorted(&out);
        order.into_iter().map(|i| out[i].clone()).collect()
    }
}

/// A network fault in force over [`from_ns`, `until_ns`).
#[derive(Clone, Debug, PartialEq)]
struct Window<T> {
    from_ns: u64,
    until_ns: u64,
    what: T,
}

/// A partition: bit sets of the nodes on each side.
#[derive(Clone, Debug, PartialEq)]
struct Cut {
    a: Vec<bool>,
    b: Vec<bool>,
    one_way: bool,
}

/// What a link fault does to each message, with probabilities as 64-bit thresholds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LinkEffect {
    /// A draw below it loses the message.
    pub drop_threshold: u64,
    pub duplicate_threshold: u64,
    pub delay_ps: u64,
    pub reorder_ps: u64,
}

/// A probability as a threshold for a uniform u64 draw (exact: one multiplication).
fn threshold(p: f64) -> u64 {
    if p >= 1.0 {
        u64::MAX
    } else {
        (p * 18_446_744_073_709_551_616.0) as u64
    }
}

/// The network faults in force, and the CPU slow-downs: what the fabric asks on every
/// packet and every CPU charge. Windows are kept until the run ends (there are few), and a
/// lookup scans them: cheap next to the rest of a packet's path.
#[derive(Clone, Debug, Default)]
pub struct NetFaults {
    cuts: Vec<Window<Cut>>,
    links: Vec<Window<(u16, u16, LinkEffect)>>,
    /// Per node: (from, until, factor in thousandths).
    slow: Vec<Window<(u16, u64)>>,
}

impl NetFaults {
    pub fn is_empty(&self) -> bool {
        self.cuts.is_empty() && self.links.is_empty() && self.slow.is_empty()
    }

    /// Starts a partition at `now_ns`.
    pub fn partition(&mut self, nodes: u16, a: &[u16], b: &[u16], one_way: bool, now_ns: u64, for_ns: u64) {
        let set = |v: &[u16]| {
            let mut s = vec![false; nodes as usize];
            for &n in v {
                s[n as usize] = true;
            }
            s
        };
        let cut = Cut { a: set(a), b: set(b), one_way };
        self.cuts.push(Window { from_ns: now_ns, until_ns: now_ns + for_ns, what: cut });
    }

    /// Starts a link fault at `now_ns`.
    #[allow(clippy::too_many_arguments)]
    pub fn link(&mut self, from: u16, to: u16, both_ways: bool, now_ns: u64, for_ns: u64, e: LinkParams) {
        let effect = LinkEffect {
            drop_threshold: threshold(e.drop),
            duplicate_threshold: threshold(e.duplicate),
            delay_ps: e.delay_us * 1_000_000,
            reorder_ps: e.reorder_us * 1_000_000,
        };
        let w = |f, t| Window { from_ns: now_ns, until_ns: now_ns + for_ns, what: (f, t, effect) };
        self.links.push(w(from, to));
        if both_ways {
            self.links.push(w(to, from));
        }
    }

    /// Slows `node`'s CPUs by `factor` from `now_ns` for `for_ns`.
    pub fn slow_cpu(&mut self, node: u16, factor: f64, now_ns: u64, for_ns: u64) {
        let permille = (factor * 1000.0).round() as u64;
        self.slow.push(Window { from_ns: now_ns, until_ns: now_ns + for_ns, what: (node, permille) });
    }

    /// Whether a packet leaving `src` for `dst` at `at_ns` is cut off by a partition.
    pub fn cut(&self, src: u16, dst: u16, at_ns: u64) -> bool {
        self.cuts.iter().any(|w| {
            let on = w.from_ns <= at_ns && at_ns < w.until_ns;
            let (s, d) = (src as usize, dst as usize);
            on && ((w.what.a[s] && w.what.b[d]) || (!w.what.one_way && w.what.b[s] && w.what.a[d]))
        })
    }

    /// When every partition cutting `src` off `dst` that is in force at `at_ns` has healed
    /// (`at_ns` if none is).
    pub fn healed_at(&self, src: u16, dst: u16, at_ns: u64) -> u64 {
        let mut t = at_ns;
        // Partitions may overlap or follow each other: move past each until none holds.
        while self.cut(src, dst, t) {
            t = self
                .cuts
                .iter()
                .filter(|w| w.from_ns <= t && t < w.until_ns)
                .map(|w| w.until_ns)
                .max()
                .expect("a cut in force");
        }
        t
    }

    /// The link fault on `src -> dst` in force at `at_ns`, the latest started if several.
    pub fn link_effect(&self, src: u16, dst: u16, at_ns: u64) -> Option<LinkEffect> {
        self.links
            .iter()
            .rev()
            .find(|w| w.what.0 == src && w.what.1 == dst && w.from_ns <= at_ns && at_ns < w.until_ns)
            .map(|w| w.what.2)
    }

    /// `ns` of CPU work on `node` starting at `at_ns`, as long as it takes there (slowed by
    /// the slow-down in force when it starts).
    pub fn cpu_ns(&self, node: u16, at_ns: u64, ns: u64) -> u64 {
        (ns * self.cpu_permille(node, at_ns)).div_ceil(1000)
    }

    /// How much longer `node`'s CPU work takes at `at_ns`, in thousandths (1000: normal).
    pub fn cpu_permille(&self, node: u16, at_ns: u64) -> u64 {
        match self.slow.iter().rev().find(|w| w.what.0 == node && w.from_ns <= at_ns && at_ns < w.until_ns) {
            Some(w) => w.what.1,
            None => 1000,
        }
    }
}

/// A link fault's effect, as the schedule gives it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LinkParams {
    pub drop: f64,
    pub duplicate: f64,
    pub delay_us: u64,
    pub reorder_us: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo() -> Topology {
        Topology { nodes: 4, dcs: Vec::new(), dc_of: Vec::new(), detect_us: 500, end_us: 10_000 }
    }

    #[test]
    fn life_cycles_are_checked() {
        let at = |at_us, fault| TimedFault { at_us, fault };
        let t = topo();
        let ok = [at(100, Fault::Crash { node: 1 }), at(700, Fault::Restart { node: 1 })];
        assert!(check_schedule(&ok, &t).is_ok());
        let early = [at(100, Fault::Crash { node: 1 }), at(300, Fault::Restart { node: 1 })];
        let e = check_schedule(&early, &t).unwrap_err();
        assert_eq!((e.0, e.1), (1, "at_us"));
        assert!(e.2.contains("600 us or later"), "{}", e.2);
        let twice = [at(100, Fault::Crash { node: 1 }), at(200, Fault::Crash { node: 1 })];
        assert!(check_schedule(&twice, &t).unwrap_err().2.contains("already down"));
        let up = [at(100, Fault::Restart { node: 2 })];
        assert!(check_schedule(&up, &t).unwrap_err().2.contains("crash it first"));
        let late = [at(10_000, Fault::Crash { node: 2 })];
        assert!(check_schedule(&late, &t).unwrap_err().2.contains("never happen"));
        let both = [at(1, Fault::Partition { a: vec![0, 1], b: vec![1], one_way: false, for_us: 5 })];
        assert!(check_schedule(&both, &t).unwrap_err().2.contains("both sides"));
    }

    #[test]
    fn expansion_is_deterministic_and_respects_max_down() {
        let t = topo();
        let r = RandomFaults {
            crash: Some(CrashRate { per_ms: 2.0, down_us: (500, 2000) }),
            partition: Some(PartitionRate { per_ms: 1.0, for_us: (10, 100), one_way: 0.5 }),
            link: Some(LinkRate {
                per_ms: 1.0,
                for_us: (10, 100),
                drop: (0.0, 0.5),
                duplicate: (0.0, 0.1),
                delay_us: (0, 10),
                reorder_us: (0, 10),
            }),
            ..Default::default()
        };
        r.check(&t).unwrap();
        let a = r.expand(7, &t, &[]);
        assert_eq!(a, r.expand(7, &t, &[]));
        assert_ne!(a, r.expand(8, &t, &[]));
        assert!(a.len() > 10, "{a:?}");
        check_schedule(&a, &t).unwrap();
        // Never two nodes down at once (max_down 1).
        let mut down = 0i32;
        for f in &a {
            match f.fault {
                Fault::Crash { .. } => down += 1,
                Fault::Restart { .. } => down -= 1,
                _ => {}
            }
            assert!((0..=1).contains(&down), "{a:?}");
        }
        // max_crashes: the first crash only, the rest of the schedule as it was.
        let one = RandomFaults { max_crashes: Some(1), ..r.clone() };
        one.check(&t).unwrap();
        let b = one.expand(7, &t, &[]);
        let crashes = |s: &[TimedFault]| s.iter().filter(|f| matches!(f.fault, Fault::Crash { .. })).count();
        assert!(crashes(&a) > 1 && crashes(&b) == 1, "{b:?}");
        assert_eq!(
            b.iter().find(|f| matches!(f.fault, Fault::Crash { .. })),
            a.iter().find(|f| matches!(f.fault, Fault::Crash { .. }))
        );
        let others = |s: &[TimedFault]| -> Vec<TimedFault> {
            s.iter().filter(|f| !matches!(f.fault, Fault::Crash { .. } | Fault::Restart { .. })).cloned().collect()
        };
        assert_eq!(others(&a), others(&b));
        assert!(RandomFaults { max_crashes: Some(0), ..r }.check(&t).is_err());
    }

    #[test]
    fn partitions_and_links_apply_in_their_windows() {
        let mut f = NetFaults::default();
        f.partition(4, &[0], &[2, 3], true, 1000, 500);
        assert!(f.cut(0, 2, 1000) && f.cut(0, 3, 1499));
        assert!(!f.cut(2, 0, 1200), "one way");
        assert!(!f.cut(0, 2, 1500) && !f.cut(0, 2, 999));
        assert_eq!(f.healed_at(0, 2, 1200), 1500);
        f.partition(4, &[0], &[2], false, 1400, 1000);
        assert_eq!(f.healed_at(0, 2, 1200), 2400, "overlapping partitions heal together");
        f.link(1, 2, true, 0, 100, LinkParams { drop: 0.5, duplicate: 0.0, delay_us: 3, reorder_us: 0 });
        let e = f.link_effect(2, 1, 50).unwrap();
        assert_eq!(e.delay_ps, 3_000_000);
        assert_eq!(e.drop_threshold, 1 << 63);
        assert!(f.link_effect(1, 2, 100).is_none());
        f.slow_cpu(3, 2.5, 0, 10);
        assert_eq!(f.cpu_ns(3, 5, 100), 250);
        assert_eq!(f.cpu_ns(3, 10, 100), 100);
    }
}
