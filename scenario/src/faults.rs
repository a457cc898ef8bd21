//! The scenario's `faults` section (issue 17): when the membership service declares a crashed
//! node down, how long a broken RC connection takes to re-establish, which memory survives a
//! crash, a schedule of timed faults, and random fault generators. The vocabulary and the
//! generators are the simulator's (`txbed_sim::faults`); docs/faults.md describes them.

use serde::{Deserialize, Serialize};
use txbed_sim::faults::{check_schedule, sorted, Fault, RandomFaults, Region, TimedFault, Topology};

use crate::Scenario;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Failure detection: a crashed node is declared down this long after it stops, us (the
    /// membership service's lease; DrTM Sec. 5.6 uses ZooKeeper's heartbeats).
    #[serde(default = "default_detect_us")]
    pub detect_us: u64,
    /// Re-establishing an RC connection a fault broke takes this long, us (the connection
    /// manager's exchange and the QP state transitions).
    #[serde(default = "default_reconnect_us")]
    pub reconnect_us: u64,
    /// What survives a crash (battery-backed NVRAM); the rest is DRAM and is lost. Default
    /// `[Logs]` (the write-ahead log, the log rings and the backups' replicas), as FaRM and
    /// DrTM Sec. 5.6 assume; `[]` loses everything, `[Store, Logs]` keeps the records too.
    #[serde(default = "default_durable")]
    pub durable: Vec<Region>,
    /// Faults at given times.
    #[serde(default)]
    pub schedule: Vec<TimedFault>,
    /// Random fault generators, expanded into more of the schedule from the run's seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random: Option<RandomFaults>,
}

pub const DEFAULT_DETECT_US: u64 = 500;
pub const DEFAULT_RECONNECT_US: u64 = 200;
/// The longest failure detection and reconnection may take: 1 s.
pub const MAX_DETECT_US: u64 = 1_000_000;

fn default_detect_us() -> u64 {
    DEFAULT_DETECT_US
}
fn default_reconnect_us() -> u64 {
    DEFAULT_RECONNECT_US
}
fn default_durable() -> Vec<Region> {
    vec![Region::Logs]
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            detect_us: DEFAULT_DETECT_US,
            reconnect_us: DEFAULT_RECONNECT_US,
            durable: default_durable(),
            schedule: Vec::new(),
            random: None,
        }
    }
}

impl Scenario {
    /// What a fault schedule is checked and expanded against.
    pub fn fault_topology(&self) -> Topology {
        let c = &self.cluster;
        let dcs = if c.datacenters.len() >= 2 { c.dc_names() } else { Vec::new() };
        let dc_of = if dcs.is_empty() {
            Vec::new()
        } else {
            c.datacenters
                .iter()
                .enumerate()
                .flat_map(|(i, d)| std::iter::repeat_n(i as u16, d.nodes as usize))
                .collect()
        };
        Topology {
            nodes: c.nodes,
            dcs,
            dc_of,
            detect_us: self.faults.as_ref().map_or(DEFAULT_DETECT_US, |f| f.detect_us),
            end_us: self.run.warmup_us + self.run.measure_us,
        }
    }

    /// Every fault of the run, in the order they are applied: the schedule and what the
    /// random generators give with the run's seed.
    pub fn fault_schedule(&self) -> Vec<TimedFault> {
        let Some(f) = &self.faults else { return Vec::new() };
        let mut all = f.schedule.clone();
        if let Some(r) = &f.random {
            all.extend(r.expand(self.run.seed, &self.fault_topology(), &f.schedule));
        }
        sorted(&all).into_iter().map(|i| all[i].clone()).collect()
    }

    /// The scenario with its random generators expanded into the schedule (for the copy a
    /// run writes: it replays without drawing again).
    pub fn with_faults_expanded(&self) -> Scenario {
        let mut s = self.clone();
        if let Some(f) = s.faults.as_mut() {
            if f.random.is_some() {
                f.schedule = self.fault_schedule();
                f.random = None;
            }
        }
        s
    }

    /// Checks the `faults` section; the error is (field path, problem).
    pub(crate) fn check_faults(&self) -> Result<(), (String, String)> {
        let Some(f) = &self.faults else { return Ok(()) };
        if matches!(self.workload, crate::Workload::Verbs(_)) {
            return Err((
                "faults".into(),
                "faults need a transactional workload (a Verbs loop has no recovery)".into(),
            ));
        }
        if !(1..=MAX_DETECT_US).contains(&f.detect_us) {
            return Err(("faults.detect_us".into(), format!("must be 1..={MAX_DETECT_US} us, got {}", f.detect_us)));
        }
        if !(1..=MAX_DETECT_US).contains(&f.reconnect_us) {
            return Err((
                "faults.reconnect_us".into(),
                format!("must be 1..={MAX_DETECT_US} us, got {}", f.reconnect_us),
            ));
        }
        for (i, r) in f.durable.iter().enumerate() {
            if f.durable[..i].contains(r) {
                return Err((format!("faults.durable[{i}]"), format!("{r:?} is listed twice")));
            }
        }
        let t = self.fault_topology();
        check_schedule(&f.schedule, &t).map_err(|(i, field, m)| {
            let at = if field.is_empty() { String::new() } else { format!(".{field}") };
            let fault = if ["at_us", ""].contains(&field) { "" } else { ".fault" };
            (format!("faults.schedule[{i}]{fault}{at}"), m)
        })?;
        if let Some(r) = &f.random {
            r.check(&t).map_err(|(field, m)| (format!("faults.random.{field}"), m))?;
            // The generators avoid what the schedule does; the whole must still hold.
            let all = self.fault_schedule();
            check_schedule(&all, &t).map_err(|(i, _, m)| {
                (
                    "faults.random".into(),
                    format!(
                        "with seed {} the generators give `{}` at {} us: {m}",
                        self.run.seed,
                        all[i].fault.describe(),
                        all[i].at_us
                    ),
                )
            })?;
        }
        Ok(())
    }
}

/// Whether `f` stops nodes (the runner then needs recovery).
pub fn crashes(f: &Fault) -> bool {
    matches!(f, Fault::Crash { .. } | Fault::CrashDc { .. })
}
