//! Simulated node clocks: each node's physical clock (its oscillator, what CLOCK_REALTIME
//! reads) is true simulated time plus an offset plus a drift, piecewise linear so faults can
//! step it or change its drift at run time (`Sim::step_clock`, `Sim::set_clock_drift`). The
//! transport's `NodeClock` turns it into the readings protocols get (`Ctx::clock`), kept in
//! sync with a master node by the transport's sync service over the simulated network.
//!
//! The simulator knows the reference time (the master's clock, or true time without sync), so
//! it measures every reading's true error against its bound: every reading a protocol takes,
//! both sides of every estimate update and of every clock step or drift change, and every
//! node at the end. Error and bound are piecewise linear in time between those points, so
//! their largest gap is at one of them: the samples catch every bound violation.
//!
//! Timers, RPC timeouts and CPU time stay on true simulated time (CLOCK_MONOTONIC: a step
//! does not move it, and 100 ppm of drift is 0.1 ns per microsecond timer). Integer
//! arithmetic throughout: drifts are whole parts per billion, readings whole nanoseconds.

use std::cell::RefCell;
use std::rc::Rc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use txbed_transport::clock::{
    sync_client, sync_handlers, ClockReading, ClockSource, Discipline, NodeClock, SyncParams, SyncStats, MAX_DRIFT_PPB,
};
use txbed_transport::{Nanos, NodeId};

use crate::fabric::Sim;

/// Per-node values of a clock parameter in whole units (ns of offset, ppb of drift).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spread {
    /// Every node the same.
    Constant(i64),
    /// Each node drawn uniformly in [lo, hi] from the run's seed.
    Uniform(i64, i64),
    /// One value per node, in node order.
    PerNode(Vec<i64>),
}

/// RNG streams of the draws: their own, so clocks change no other draw of a run.
pub const OFFSET_STREAM: u64 = 0xc10c_0ff5;
pub const DRIFT_STREAM: u64 = 0xc10c_d41f;

impl Spread {
    /// The values of `nodes` nodes; `Uniform` draws from `seed` on `stream`.
    pub fn values(&self, nodes: u16, seed: u64, stream: u64) -> Vec<i64> {
        match self {
            Spread::Constant(v) => vec![*v; nodes as usize],
            Spread::Uniform(lo, hi) => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(stream);
                (0..nodes).map(|_| rng.gen_range(*lo.min(hi)..=*hi.max(lo))).collect()
            }
            Spread::PerNode(v) => v.clone(),
        }
    }
}

/// A drift in ppm as whole parts per billion (saturating; NaN is 0).
pub fn ppm_to_ppb(ppm: f64) -> i64 {
    (ppm * 1000.0).round() as i64
}

/// The clocks of a simulated cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockConfig {
    /// Each node's clock minus true time when the model starts, ns.
    pub offset_ns: Vec<i64>,
    /// Each node's drift, parts per billion (positive: runs fast).
    pub drift_ppb: Vec<i64>,
    /// The drift the sync bound assumes no clock exceeds, ppb (at most `MAX_DRIFT_PPB`).
    pub max_drift_ppb: u64,
    /// The sync service; `None`: free-running clocks.
    pub sync: Option<SyncConfig>,
    /// The bound free-running clocks report (`run.clock_bound_us`), ns.
    pub free_bound_ns: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SyncConfig {
    /// Time between a node's requests, ns.
    pub interval_ns: Nanos,
    /// The node whose clock is the reference.
    pub master: u16,
}

impl ClockConfig {
    /// Every clock perfect (offset 0, drift 0), free-running with bound 0: what a run without
    /// a clock model has, for faults that step a clock there.
    pub fn ideal(nodes: u16) -> ClockConfig {
        let n = nodes as usize;
        ClockConfig { offset_ns: vec![0; n], drift_ppb: vec![0; n], max_drift_ppb: 0, sync: None, free_bound_ns: 0 }
    }

    fn check(&self, nodes: u16) -> Result<(), String> {
        let n = nodes as usize;
        if self.offset_ns.len() != n || self.drift_ppb.len() != n {
            return Err(format!(
                "clocks: {} offsets and {} drifts for {n} nodes",
                self.offset_ns.len(),
                self.drift_ppb.len()
            ));
        }
        if self.max_drift_ppb > MAX_DRIFT_PPB {
            return Err(format!("clocks: max_drift_ppb {} exceeds {MAX_DRIFT_PPB}", self.max_drift_ppb));
        }
        if let Some(s) = self.sync {
            if s.master >= nodes {
                return Err(format!("clocks: sync master {} is not a node (0..{nodes})", s.master));
            }
        }
        Ok(())
    }
}

/// One linear piece of a physical clock: it read `reading` at true time `from` and gains
/// `ppb` parts per billion.
#[derive(Copy, Clone, Debug)]
struct Segment {
    from: Nanos,
    reading: i64,
    ppb: i64,
}

impl Segment {
    fn at(&self, t: Nanos) -> i64 {
        let e = t as i128 - self.from as i128;
        let v = self.reading as i128 + e + (e * self.ppb as i128).div_euclid(1_000_000_000);
        v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

/// What the samples of one node showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeClockStats {
    /// Readings with a bound, checked against the reference.
    pub samples: u64,
    /// Readings before the node's first sync exchange (no bound to check).
    pub unsynced: u64,
    /// Readings whose true error exceeded their bound.
    pub violations: u64,
    pub max_abs_error_ns: u64,
    pub max_bound_ns: u64,
    /// When the first violation was seen, simulated ns.
    pub first_violation_ns: Option<Nanos>,
    /// The node's sync exchanges.
    pub sync: SyncStats,
}

/// The clocks of a run: the configuration and each node's measurements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockStats {
    pub config: ClockConfig,
    pub nodes: Vec<NodeClockStats>,
}

impl ClockStats {
    pub fn violations(&self) -> u64 {
        self.nodes.iter().map(|n| n.violations).sum()
    }
    pub fn samples(&self) -> u64 {
        self.nodes.iter().map(|n| n.samples).sum()
    }
    pub fn max_abs_error_ns(&self) -> u64 {
        self.nodes.iter().map(|n| n.max_abs_error_ns).max().unwrap_or(0)
    }
    pub fn max_bound_ns(&self) -> u64 {
        self.nodes.iter().map(|n| n.max_bound_ns).max().unwrap_or(0)
    }
    pub fn first_violation_ns(&self) -> Option<Nanos> {
        self.nodes.iter().filter_map(|n| n.first_violation_ns).min()
    }
    /// Sync requests sent, cluster-wide.
    pub fn exchanges(&self) -> u64 {
        self.nodes.iter().map(|n| n.sync.sent).sum()
    }
    /// Requests never answered (lost, or in flight when counted).
    pub fn lost(&self) -> u64 {
        self.nodes.iter().map(|n| n.sync.unanswered()).sum()
    }
    pub fn accepted(&self) -> u64 {
        self.nodes.iter().map(|n| n.sync.accepted).sum()
    }
}

struct Model {
    osc: Vec<Segment>,
    /// The node whose clock is the reference; `None`: true time.
    reference: Option<u16>,
    stats: Vec<NodeClockStats>,
}

impl Model {
    fn truth(&self, now: Nanos) -> i64 {
        match self.reference {
            Some(m) => self.osc[m as usize].at(now),
            None => now as i64,
        }
    }

    fn record(&mut self, node: usize, now: Nanos, r: ClockReading) {
        let truth = self.truth(now);
        let s = &mut self.stats[node];
        if !r.synced() {
            s.unsynced += 1;
            return;
        }
        let err = (r.now_ns as i128 - truth as i128).unsigned_abs().min(u64::MAX as u128) as u64;
        s.samples += 1;
        s.max_abs_error_ns = s.max_abs_error_ns.max(err);
        s.max_bound_ns = s.max_bound_ns.max(r.bound_ns);
        if err > r.bound_ns {
            s.violations += 1;
            s.first_violation_ns.get_or_insert(now);
        }
    }
}

/// A node's oscillator as the transport sees it.
struct NodeOsc {
    node: usize,
    model: Rc<RefCell<Model>>,
}

impl ClockSource for NodeOsc {
    fn local_ns(&self, now: Nanos) -> i64 {
        self.model.borrow().osc[self.node].at(now)
    }
    fn observe(&self, now: Nanos, reading: ClockReading) {
        self.model.borrow_mut().record(self.node, now, reading);
    }
}

/// The clock model a `Sim` keeps once clocks are enabled.
pub(crate) struct SimClocks {
    model: Rc<RefCell<Model>>,
    clocks: Vec<Rc<NodeClock>>,
    cfg: ClockConfig,
}

impl SimClocks {
    /// Samples the nodes whose error a change of `node`'s clock moves: all of them if it is
    /// the reference.
    fn sample_affected(&self, node: u16, now: Nanos) {
        if self.model.borrow().reference == Some(node) {
            for c in &self.clocks {
                c.read(now);
            }
        } else {
            self.clocks[node as usize].read(now);
        }
    }
}

impl Sim {
    /// Models every node's clock from now on (`ClockConfig`), gives each worker its node's
    /// clock, and with `sync` starts the sync service on worker 0 of every node (the master
    /// answers; the others send a request every interval until `sync_until`). Call it after
    /// spawning the workload's coroutines, so theirs keep their ids and RNG streams.
    pub fn enable_clocks(&mut self, cfg: ClockConfig, sync_until: Nanos) -> Result<(), String> {
        if self.clocks.is_some() {
            return Err("clocks: already enabled".into());
        }
        let nodes = self.nodes();
        cfg.check(nodes)?;
        let now = self.now();
        let osc = (0..nodes as usize)
            .map(|n| Segment {
                from: now,
                reading: (now as i64).saturating_add(cfg.offset_ns[n]),
                ppb: cfg.drift_ppb[n],
            })
            .collect();
        let model = Rc::new(RefCell::new(Model {
            osc,
            reference: cfg.sync.map(|s| s.master),
            stats: vec![NodeClockStats::default(); nodes as usize],
        }));
        let mut clocks = Vec::new();
        for node in 0..nodes {
            let discipline = match cfg.sync {
                None => Discipline::Free { bound_ns: cfg.free_bound_ns },
                Some(s) if s.master == node => Discipline::Master,
                Some(s) => Discipline::Synced(SyncParams {
                    master: NodeId(s.master),
                    interval_ns: s.interval_ns,
                    max_drift_ppb: cfg.max_drift_ppb,
                    until_ns: sync_until,
                }),
            };
            let src = Rc::new(NodeOsc { node: node as usize, model: model.clone() });
            let clock = Rc::new(NodeClock::new(src, discipline));
            for w in 0..self.workers() {
                self.worker(node, w).set_clock(clock.clone());
            }
            for (id, name, h) in sync_handlers(&clock) {
                self.worker(node, 0).name_handler(id, name);
                self.worker(node, 0).register_handler(id, h);
            }
            if matches!(clock.discipline(), Discipline::Synced(_)) {
                let c = clock.clone();
                self.spawn(node, 0, move |ctx| sync_client(ctx, c));
            }
            clocks.push(clock);
        }
        self.clocks = Some(Box::new(SimClocks { model, clocks, cfg }));
        Ok(())
    }

    /// A restarted node's clock: the same oscillator (the hardware keeps running), a sync
    /// estimate lost with the node's memory (the first exchange after the restart starts a
    /// new one), given to its fresh workers.
    pub(crate) fn restart_clock(&mut self, node: u16) {
        let Some(c) = self.clocks.as_deref() else { return };
        let old = c.clocks[node as usize].clone();
        let src = Rc::new(NodeOsc { node: node as usize, model: c.model.clone() });
        let clock = Rc::new(NodeClock::new(src, old.discipline().clone()));
        for w in 0..self.workers() {
            self.worker(node, w).set_clock(clock.clone());
        }
        for (id, name, h) in sync_handlers(&clock) {
            self.worker(node, 0).name_handler(id, name);
            self.worker(node, 0).register_handler(id, h);
        }
        if matches!(clock.discipline(), Discipline::Synced(_)) {
            let c = clock.clone();
            self.spawn(node, 0, move |ctx| sync_client(ctx, c));
        }
        if let Some(cs) = self.clocks.as_deref_mut() {
            cs.clocks[node as usize] = clock;
        }
    }

    /// Clocks of a run that enabled none: ideal and free-running (what they were), so a fault
    /// can step one.
    fn clocks_or_ideal(&mut self) -> &SimClocks {
        if self.clocks.is_none() {
            let ideal = ClockConfig::ideal(self.nodes());
            self.enable_clocks(ideal, 0).expect("ideal clocks fit any cluster");
        }
        self.clocks.as_deref().expect("enabled")
    }

    /// Steps `node`'s physical clock by `by_ns` now (an operator or a bad NTP server jumping
    /// it). Monotonic time, and so timers, are untouched; the sync estimate is not: readings
    /// are off by the step until the next exchange (if the master steps, every node's are).
    pub fn step_clock(&mut self, node: u16, by_ns: i64) {
        assert!(node < self.nodes(), "step_clock: no node {node}");
        let now = self.now();
        let c = self.clocks_or_ideal();
        c.sample_affected(node, now);
        {
            let mut m = c.model.borrow_mut();
            let seg = m.osc[node as usize];
            m.osc[node as usize] = Segment { from: now, reading: seg.at(now).saturating_add(by_ns), ppb: seg.ppb };
        }
        c.sample_affected(node, now);
    }

    /// Sets `node`'s drift to `ppm` from now on (a clock whose oscillator heats up, or one
    /// beyond the assumed `max_drift_ppb`). The ppm are rounded to whole parts per billion.
    pub fn set_clock_drift(&mut self, node: u16, ppm: f64) {
        assert!(node < self.nodes(), "set_clock_drift: no node {node}");
        let now = self.now();
        let c = self.clocks_or_ideal();
        c.sample_affected(node, now);
        let mut m = c.model.borrow_mut();
        let seg = m.osc[node as usize];
        m.osc[node as usize] = Segment { from: now, reading: seg.at(now), ppb: ppm_to_ppb(ppm) };
    }

    /// `node`'s synchronized clock now and the reference time it estimates (the error is
    /// their difference); `None` without clocks. The reading counts as a sample.
    pub fn clock_sample(&self, node: u16) -> Option<(ClockReading, i64)> {
        let c = self.clocks.as_deref()?;
        let now = self.now();
        let r = c.clocks[node as usize].read(now);
        Some((r, c.model.borrow().truth(now)))
    }

    /// What the clocks measured, after sampling every node now (the run's end); `None`
    /// without clocks.
    pub fn clock_stats(&self) -> Option<ClockStats> {
        let c = self.clocks.as_deref()?;
        let now = self.now();
        for k in &c.clocks {
            k.read(now);
        }
        let mut nodes = c.model.borrow().stats.clone();
        for (s, k) in nodes.iter_mut().zip(&c.clocks) {
            s.sync = k.stats();
        }
        Some(ClockStats { config: c.cfg.clone(), nodes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_integer_lines() {
        let s = Segment { from: 1_000, reading: -50, ppb: 100_000 };
        assert_eq!(s.at(1_000), -50);
        assert_eq!(s.at(1_000 + 1_000_000_000), -50 + 1_000_000_000 + 100_000); // 100 ppm of 1 s
        assert_eq!(s.at(1_000 + 10), -40); // 0.001 ns of drift floors away
        let slow = Segment { from: 0, reading: 0, ppb: -1 };
        assert_eq!(slow.at(10), 9, "floored toward minus infinity");
    }

    #[test]
    fn spreads_draw_from_their_own_stream() {
        let u = Spread::Uniform(-1000, 1000);
        let a = u.values(8, 1, OFFSET_STREAM);
        assert_eq!(a, u.values(8, 1, OFFSET_STREAM), "deterministic");
        assert_ne!(a, u.values(8, 2, OFFSET_STREAM), "seeded");
        assert_ne!(a, u.values(8, 1, DRIFT_STREAM), "per stream");
        assert!(a.iter().all(|v| (-1000..=1000).contains(v)));
        assert_eq!(Spread::Constant(7).values(3, 1, 0), [7, 7, 7]);
        assert_eq!(ppm_to_ppb(12.3456), 12_346);
        assert_eq!(ppm_to_ppb(f64::NAN), 0);
    }
}
