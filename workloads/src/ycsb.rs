//! YCSB as RCC uses it: one table of fixed-size records, transactions of `ops` distinct keys,
//! each a read or (with probability `write_fraction`) a read-modify-write, plus `compute_us`
//! of CPU work. Keys are uniform, or skewed by a hot area (`hot_fraction` of the rows receive
//! `hot_probability` of the accesses; 0.1% by default), or by a Zipf law (`zipf_theta`).
//!
//! A write increments the record's first 8 bytes (a counter) and stamps the rest; the sum of
//! counters therefore grows by exactly the number of committed writes, which is the
//! invariant a lost update breaks.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{get_i64, with_i64, Executed, Key, Table, TxnSpec, Workload};

pub const TABLE: u16 = 0;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Ycsb {
    pub rows_per_node: u64,
    pub record_bytes: u32,
    pub ops: u32,
    pub write_fraction: f64,
    pub hot_fraction: f64,
    pub hot_probability: f64,
    /// Zipf skew; when set it replaces the hot area.
    pub zipf_theta: Option<f64>,
    pub compute_us: u64,
}

impl Default for Ycsb {
    fn default() -> Self {
        Ycsb {
            rows_per_node: 100_000,
            record_bytes: 64,
            ops: 10,
            write_fraction: 0.2,
            hot_fraction: 0.001,
            hot_probability: 0.0,
            zipf_theta: None,
            compute_us: 0,
        }
    }
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record synthetic
/// databases"), on `libm`: `rand_distr::Zipf` uses the platform's `powf`, whose last bits
/// differ between C libraries, and a run must replay bit for bit on any machine.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Zipf {
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / libm::pow(i as f64, theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - libm::pow(2.0 / n as f64, 1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf { n, theta, alpha, zetan, eta }
    }
    /// A rank in 0..n, rank 0 the most popular.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + libm::pow(0.5, self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * libm::pow(self.eta * u - self.eta + 1.0, self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

impl Ycsb {
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.rows_per_node == 0 {
            return Err(("rows_per_node", "must be at least 1".into()));
        }
        if !(8..=1 << 20).contains(&self.record_bytes) {
            return Err(("record_bytes", format!("must be 8 B to 1 MiB, got {}", self.record_bytes)));
        }
        if self.ops == 0 || self.ops as u64 > self.rows_per_node {
            return Err(("ops", format!("must be 1..=rows_per_node, got {}", self.ops)));
        }
        for (name, p) in [
            ("write_fraction", self.write_fraction),
            ("hot_fraction", self.hot_fraction),
            ("hot_probability", self.hot_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err((name, format!("must be in [0, 1], got {p}")));
            }
        }
        if let Some(t) = self.zipf_theta {
            if !(t > 0.0 && t < 1.0) {
                return Err(("zipf_theta", format!("must be in (0, 1), got {t}")));
            }
        }
        Ok(())
    }

    /// A prepared generator for a cluster of `nodes` (the Zipf table depends on its size).
    pub fn prepare(&self, nodes: u16) -> PreparedYcsb {
        let rows = self.rows_per_node * nodes as u64;
        PreparedYcsb { cfg: self.clone(), rows, zipf: self.zipf_theta.map(|t| Zipf::new(rows, t)) }
    }
}

/// YCSB bound to a cluster size.
#[derive(Clone, Debug)]
pub struct PreparedYcsb {
    pub cfg: Ycsb,
    rows: u64,
    zipf: Option<Zipf>,
}

impl PreparedYcsb {
    fn row(&self, rng: &mut ChaCha8Rng) -> u64 {
        if let Some(z) = &self.zipf {
            // Scatter ranks over the cluster so popular rows are not all on node 0.
            return z.sample(rng).wrapping_mul(0x9e37_79b9_7f4a_7c15) % self.rows;
        }
        let hot = ((self.rows as f64 * self.cfg.hot_fraction) as u64).clamp(1, self.rows);
        if rng.gen_bool(self.cfg.hot_probability) {
            rng.gen_range(0..hot) * (self.rows / hot)
        } else {
            rng.gen_range(0..self.rows)
        }
    }
}

impl Workload for PreparedYcsb {
    fn name(&self) -> &'static str {
        "ycsb"
    }
    fn tables(&self) -> Vec<Table> {
        vec![Table {
            id: TABLE,
            name: "usertable",
            record_bytes: self.cfg.record_bytes,
            rows_per_node: self.cfg.rows_per_node,
        }]
    }
    fn initial(&self, _key: Key) -> Vec<u8> {
        vec![0; self.cfg.record_bytes as usize]
    }
    fn initial_into(&self, _key: Key, _record: &mut [u8]) {
        // Zero, as the record already is.
    }
    fn generate(&self, rng: &mut ChaCha8Rng, _node: u16, _nodes: u16) -> TxnSpec {
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        while reads.len() + writes.len() < self.cfg.ops as usize {
            let k = Key { table: TABLE, row: self.row(rng) };
            if reads.contains(&k) || writes.contains(&k) {
                continue;
            }
            if rng.gen_bool(self.cfg.write_fraction) {
                writes.push(k);
            } else {
                reads.push(k);
            }
        }
        TxnSpec { kind: "ycsb", reads, writes, params: vec![], compute_ns: self.cfg.compute_us * 1000 }
    }
    fn execute(&self, spec: &TxnSpec, _read_values: &[&[u8]], old: &[&[u8]]) -> Executed {
        let new_values = old
            .iter()
            .map(|v| {
                let mut n = with_i64(v, get_i64(v) + 1);
                let stamp = (get_i64(v) as u8).wrapping_add(1);
                n[8..].fill(stamp);
                n
            })
            .collect();
        Executed::Commit { new_values, external_delta: spec.writes.len() as i64 }
    }
    fn conserved(&self, _key: Key, value: &[u8]) -> i64 {
        get_i64(value)
    }
}

/// The registry's entry (`crate::REGISTRY`).
pub static KIND: crate::Kind<Ycsb> = crate::Kind::new(
    "Ycsb",
    "YCSB",
    "YCSB transactions: reads and read-modify-writes of fixed-size records, uniform or Zipfian",
);

impl crate::Params for Ycsb {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        Ycsb::validate(self)
    }
    fn build(&self, shape: crate::Shape) -> std::sync::Arc<dyn crate::Workload> {
        use std::sync::Arc;
        Arc::new(self.prepare(shape.nodes))
    }
    // `prepare` sums the Zipf constant over every row: not for a memory estimate.
    fn tables(&self, _shape: crate::Shape) -> Vec<Table> {
        PreparedYcsb { cfg: self.clone(), rows: 0, zipf: None }.tables()
    }
}
