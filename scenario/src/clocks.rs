//! `cluster.clocks`: every simulated node's clock (offset, drift) and the sync service that
//! keeps them together (docs/clocks.md, docs/scenarios.md).

use serde::{Deserialize, Serialize};
use txbed_sim::clock::{ppm_to_ppb, ClockConfig, Spread, SyncConfig, DRIFT_STREAM, OFFSET_STREAM};

/// The largest clock offset: 10 s.
pub const MAX_OFFSET_US: f64 = 10_000_000.0;
/// The largest drift, and the largest assumed drift: 1000 ppm.
pub const MAX_DRIFT_PPM: f64 = 1000.0;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Clocks {
    /// Each node's clock minus true time at the start, us.
    pub offset_us: PerNode,
    /// Each node's drift, ppm (positive: runs fast).
    pub drift_ppm: PerNode,
    /// The drift the sync bound assumes no clock exceeds, ppm. Drift beyond it shows as bound
    /// violations in the report.
    pub max_drift_ppm: f64,
    /// The sync service; `None`: free-running clocks with bound `run.clock_bound_us`.
    pub sync: Option<ClockSync>,
}

impl Default for Clocks {
    fn default() -> Self {
        Clocks {
            offset_us: PerNode::Uniform(-100.0, 100.0),
            drift_ppm: PerNode::Uniform(-50.0, 50.0),
            max_drift_ppm: 100.0,
            sync: Some(ClockSync::default()),
        }
    }
}

/// A value per node: the same for all, drawn per node from the run's seed, or listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PerNode {
    #[serde(alias = "constant")]
    Constant(f64),
    /// Uniform in [lo, hi], drawn per node from the seed (a stream of its own).
    #[serde(alias = "uniform")]
    Uniform(f64, f64),
    /// One value per node, in node order.
    #[serde(alias = "list")]
    List(Vec<f64>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClockSync {
    /// Time between a node's exchanges with the master, us.
    pub interval_us: u64,
    /// The node whose clock is the reference.
    pub master: u16,
}

impl Default for ClockSync {
    fn default() -> Self {
        ClockSync { interval_us: 1000, master: 0 }
    }
}

impl PerNode {
    /// Checks every value against `max` (either sign) and the list's length; the error is
    /// (field path, problem).
    fn check(&self, path: &str, nodes: u16, max: f64, unit: &str) -> Result<(), (String, String)> {
        let one = |what: String, v: f64| {
            if v.is_finite() && v.abs() <= max {
                Ok(())
            } else {
                Err((path.to_string(), format!("{what} must be -{max}..={max} {unit}, got {v}")))
            }
        };
        match self {
            PerNode::Constant(v) => one("the value".into(), *v),
            PerNode::Uniform(lo, hi) => {
                one("lo".into(), *lo)?;
                one("hi".into(), *hi)?;
                if lo > hi {
                    return Err((path.into(), format!("Uniform(lo, hi) needs lo <= hi, got ({lo}, {hi})")));
                }
                Ok(())
            }
            PerNode::List(v) => {
                if v.len() != nodes as usize {
                    return Err((
                        path.into(),
                        format!("List needs one value per node: {nodes} values, got {}", v.len()),
                    ));
                }
                v.iter().enumerate().try_for_each(|(i, &x)| one(format!("node {i}'s value"), x))
            }
        }
    }

    /// In whole units: `scale` of them per unit of the file (1000 ns per us, 1000 ppb per ppm).
    fn spread(&self, scale: f64) -> Spread {
        let whole = |v: f64| (v * scale).round() as i64;
        match self {
            PerNode::Constant(v) => Spread::Constant(whole(*v)),
            PerNode::Uniform(lo, hi) => Spread::Uniform(whole(*lo), whole(*hi)),
            PerNode::List(v) => Spread::PerNode(v.iter().map(|&x| whole(x)).collect()),
        }
    }
}

impl Clocks {
    /// Checks every value; the error is (field path, problem).
    pub fn check(&self, nodes: u16) -> Result<(), (String, String)> {
        self.offset_us.check("cluster.clocks.offset_us", nodes, MAX_OFFSET_US, "us")?;
        self.drift_ppm.check("cluster.clocks.drift_ppm", nodes, MAX_DRIFT_PPM, "ppm")?;
        let m = self.max_drift_ppm;
        if !(m.is_finite() && (0.0..=MAX_DRIFT_PPM).contains(&m)) {
            return Err(("cluster.clocks.max_drift_ppm".into(), format!("must be 0..={MAX_DRIFT_PPM} ppm, got {m}")));
        }
        if let Some(s) = &self.sync {
            crate::in_range("cluster.clocks.sync.interval_us", s.interval_us)?;
            if s.master >= nodes {
                return Err((
                    "cluster.clocks.sync.master".into(),
                    format!("must be a node, 0..={}, got {}", nodes - 1, s.master),
                ));
            }
        }
        Ok(())
    }

    /// The simulator's clocks for `nodes` nodes: values drawn from `seed`, `bound_us`
    /// (`run.clock_bound_us`) for free-running clocks.
    pub fn config(&self, nodes: u16, seed: u64, bound_us: u64) -> ClockConfig {
        ClockConfig {
            offset_ns: self.offset_us.spread(1000.0).values(nodes, seed, OFFSET_STREAM),
            drift_ppb: self.drift_ppm.spread(1000.0).values(nodes, seed, DRIFT_STREAM),
            max_drift_ppb: ppm_to_ppb(self.max_drift_ppm).max(0) as u64,
            sync: self.sync.as_ref().map(|s| SyncConfig { interval_ns: s.interval_us * 1000, master: s.master }),
            free_bound_ns: bound_us.saturating_mul(1000),
        }
    }
}
