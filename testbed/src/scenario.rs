//! Scenario files (RON). Unknown fields and bad values are rejected with the file, line and
//! column (syntax) or the field path (meaning); nothing here panics on user input.
//!
//! This is the first slice of the schema: a cluster and a closed-loop verbs workload. The
//! transaction workloads and the full schema of docs/scenarios.md extend it.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use txbed_sim::bench_verbs::{rpc_max_payload, RawVerb};
use txbed_sim::NicProfile;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub cluster: Cluster,
    pub workload: Workload,
    #[serde(default)]
    pub run: RunSpec,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cluster {
    pub nodes: u16,
    pub workers: u16,
    pub coroutines: u32,
    /// A built-in NIC profile name or a path to a RON profile.
    pub nic: String,
    /// RC QPs per remote node per worker (emulates larger clusters).
    pub qps_per_node: u16,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster { nodes: 4, workers: 4, coroutines: 8, nic: "cx4".into(), qps_per_node: 1 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Workload {
    /// Every coroutine keeps `outstanding` requests of one verb to random remote nodes.
    Verbs(VerbsWorkload),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verb {
    Read,
    Write,
    Atomic,
    Rpc,
}

impl Verb {
    pub fn raw(self) -> RawVerb {
        match self {
            Verb::Read => RawVerb::Read,
            Verb::Write => RawVerb::Write,
            Verb::Atomic => RawVerb::Atomic,
            Verb::Rpc => RawVerb::Rpc,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerbsWorkload {
    pub verb: Verb,
    #[serde(default = "default_payload")]
    pub payload: u32,
    #[serde(default = "default_outstanding")]
    pub outstanding: u32,
}

fn default_payload() -> u32 {
    64
}
fn default_outstanding() -> u32 {
    1
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    pub warmup_us: u64,
    pub measure_us: u64,
    pub seed: u64,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec { warmup_us: 20, measure_us: 200, seed: 1 }
    }
}

/// A scenario error: where, and what.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioError(pub String);

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Scenario {
    pub fn load(path: &Path) -> Result<(Scenario, NicProfile), ScenarioError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError(format!("{}: cannot read scenario: {e}", path.display())))?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, source: &str) -> Result<(Scenario, NicProfile), ScenarioError> {
        let s: Scenario = ron::Options::default()
            .from_str(text)
            .map_err(|e| ScenarioError(format!("{source}:{}:{}: {}", e.position.line, e.position.col, e.code)))?;
        let profile = s.validate().map_err(|(field, msg)| ScenarioError(format!("{source}: {field}: {msg}")))?;
        Ok((s, profile))
    }

    /// Checks values; on error returns the field path and the problem.
    fn validate(&self) -> Result<NicProfile, (&'static str, String)> {
        let c = &self.cluster;
        if c.nodes < 2 {
            return Err((
                "cluster.nodes",
                format!("must be at least 2 (the workload talks to remote nodes), got {}", c.nodes),
            ));
        }
        if c.nodes > 1024 {
            return Err(("cluster.nodes", format!("at most 1024 nodes are supported, got {}", c.nodes)));
        }
        if c.workers == 0 || c.workers > 256 {
            return Err(("cluster.workers", format!("must be 1..=256, got {}", c.workers)));
        }
        if c.coroutines == 0 || c.coroutines > 1024 {
            return Err(("cluster.coroutines", format!("must be 1..=1024, got {}", c.coroutines)));
        }
        if c.qps_per_node == 0 || c.qps_per_node > 64 {
            return Err(("cluster.qps_per_node", format!("must be 1..=64, got {}", c.qps_per_node)));
        }
        let profile = NicProfile::load(&c.nic).map_err(|e| ("cluster.nic", e.to_string()))?;
        let Workload::Verbs(v) = &self.workload;
        if v.outstanding == 0 || v.outstanding > 64 {
            return Err(("workload.outstanding", format!("must be 1..=64, got {}", v.outstanding)));
        }
        match v.verb {
            Verb::Atomic if v.payload != 8 => {
                return Err(("workload.payload", format!("atomics operate on 8 bytes, got {}", v.payload)))
            }
            Verb::Rpc if v.payload > rpc_max_payload(&profile) => {
                return Err((
                    "workload.payload",
                    format!(
                        "an RPC reply of {} B does not fit one UD datagram (max {} B)",
                        v.payload,
                        rpc_max_payload(&profile)
                    ),
                ))
            }
            _ if v.payload == 0 || v.payload > 1 << 20 => {
                return Err(("workload.payload", format!("must be 1 B to 1 MiB, got {}", v.payload)))
            }
            _ => {}
        }
        if self.run.measure_us == 0 {
            return Err(("run.measure_us", "must be at least 1".into()));
        }
        if self.run.warmup_us + self.run.measure_us > 10_000_000 {
            return Err(("run.measure_us", "warm-up plus measured time must be at most 10 s of simulated time".into()));
        }
        Ok(profile)
    }
}
