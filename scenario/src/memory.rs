//! How much memory a scenario needs, estimated before anything is allocated, so `validate` and
//! `run` refuse what the machine cannot hold instead of aborting on an allocation.
//!
//! Per node (docs/scenarios.md, "Memory"):
//! - records and index, log rings: the registered region, `txbed_txn::protocol::run_layout`
//!   exactly: per table buckets (rows / 0.9 / 8 x 128 B), the overflow pool, rows x tuple (24 B
//!   of metadata, the record and the protocol's extension, each rounded up to 8); then one log
//!   ring of `log_ring_kib` per (node, worker) and the protocol's own area;
//! - table images: what the simulator keeps to make a store's parts on first touch
//!   (`txbed_txn::store::load_table`), 5 B per row and 8 B per bucket, once for tables of
//!   the same keys and size (a node's tables of as many rows; in the simulator a copy of one
//!   partition and that partition);
//! - location cache: `cache_mb` worth of 128-byte buckets, allocated up front;
//! - coroutines: workers x (coroutines + 1) x 16 KiB of scratch (the smallest a coroutine gets);
//! - QPs: workers x (1 + nodes x qps_per_node) x the simulator's per-QP state.
//!
//! Plus, once, 8 B per row of the largest table while a partition loads. The simulator holds
//! every node in one process; a real backend one node per process. Histories and the event
//! queue grow with the run and are not counted: the estimate is a lower bound.

use std::fmt;

use txbed_sim::NicProfile;
use txbed_txn::locate::LocationCache;
use txbed_txn::store::TableSpec;
use txbed_workloads::Shape;

use crate::{BackendName, Scenario, Workload};

/// Scratch every coroutine gets at least (`runner::spec::scratch_per_coroutine`).
const SCRATCH_FLOOR: u64 = 16 << 10;

/// A scenario's memory estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Per node: (what, bytes, the field that drives it).
    pub per_node: Vec<(&'static str, u64, &'static str)>,
    /// Nodes one process holds (all of them on the simulator).
    pub nodes_per_process: u16,
    /// Bytes once per process (loading a partition).
    pub once: u64,
    /// Bytes one process needs.
    pub total: u64,
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self.per_node.iter().map(|(w, b, _)| format!("{w} {}", bytes(*b))).collect();
        write!(f, "{} ({} per node, x {} node(s)", bytes(self.total), terms.join(" + "), self.nodes_per_process)?;
        if self.once > 0 {
            write!(f, " + {} loading", bytes(self.once))?;
        }
        f.write_str(")")
    }
}

/// Bytes for people: `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn bytes(b: u64) -> String {
    let b = b as f64;
    match b {
        _ if b >= (1u64 << 40) as f64 => format!("{:.1} TiB", b / (1u64 << 40) as f64),
        _ if b >= (1u64 << 30) as f64 => format!("{:.1} GiB", b / (1u64 << 30) as f64),
        _ if b >= (1u64 << 20) as f64 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        _ if b >= 1024.0 => format!("{:.1} KiB", b / 1024.0),
        _ => format!("{b} B"),
    }
}

/// The estimate; Err(field, message) when a size overflows 64 bits. Call after the other
/// checks of `Scenario::validate` (it relies on their ranges).
pub fn estimate(s: &Scenario, profile: &NicProfile) -> Result<Estimate, (String, String)> {
    let c = &s.cluster;
    let (nodes, workers) = (c.nodes as u64, c.workers as u64);
    let mut per_node = Vec::new();
    let mut once = 0;
    let qps = workers * (1 + nodes * c.qps_per_node as u64) * txbed_sim::fabric::qp_bytes(profile.nics_per_node);
    let mut coroutines = c.coroutines as u64;
    if let (Workload::Txn(w), Some(p)) = (&s.workload, &s.protocol) {
        let shape = Shape { nodes: c.nodes, workers: c.workers, coroutines: c.coroutines };
        let tables = w.tables(shape);
        let specs: Vec<TableSpec> = tables
            .iter()
            .map(|t| TableSpec { id: t.id, record_bytes: t.record_bytes, rows_per_node: t.rows_per_node })
            .collect();
        let proto = p.name.protocol();
        // A protocol keeping replicas in registered memory holds copies of other partitions
        // (a placement that does not fit is refused where the run is checked).
        let copies = match proto.stores_replicas() {
            true => {
                let dc_of = c.wan().map(|w| w.dc_of).unwrap_or_default();
                let placement = txbed_txn::placement::Placement::new(&dc_of, c.nodes);
                placement.copy_load(p.replication).unwrap_or_default()
            }
            false => Vec::new(),
        };
        let store = txbed_txn::protocol::run_layout(
            &specs,
            proto,
            c.nodes,
            c.workers,
            c.coroutines,
            p.log_ring_kib << 10,
            &copies,
        )
        .ok_or_else(|| {
            let rows: Vec<String> =
                tables.iter().map(|t| format!("{} {} x {} B", t.name, t.rows_per_node, t.record_bytes)).collect();
            (
                "workload".to_string(),
                format!("its tables ({} rows per node) need more than 2^64 bytes per node", rows.join(", ")),
            )
        })?;
        per_node.push(("records and index", store.log_at, "workload"));
        per_node.push(("log rings", store.bytes - store.log_at, "protocol.log_ring_kib"));
        // Tables loaded with the same keys into as many buckets share one image
        // (`txbed_txn::store::Partitions`): a node's tables of as many rows, and, in one
        // process (the simulator), a copy of one partition with that partition's tables.
        let mut distinct = std::collections::BTreeSet::new();
        for t in store.tables.iter().chain(&store.copies) {
            let (base, k) = txbed_txn::store::copy_of(t.spec.id);
            let whole = store.tables.iter().any(|p| p.spec.id == base && p.spec.rows_per_node == t.spec.rows_per_node);
            if k > 0 && whole && s.backend == BackendName::Sim {
                continue;
            }
            distinct.insert((k, t.spec.rows_per_node, t.buckets, t.pool));
        }
        let images = distinct.iter().fold(0u64, |a, &(_, rows, buckets, _)| {
            a.saturating_add(rows.saturating_mul(txbed_txn::store::IMAGE_BYTES_PER_ROW))
                .saturating_add(buckets.saturating_mul(txbed_txn::store::IMAGE_BYTES_PER_BUCKET))
        });
        per_node.push(("table images", images, "workload"));
        once = tables.iter().map(|t| t.rows_per_node).max().unwrap_or(0).saturating_mul(8);
        let cache =
            p.cache_mb.checked_mul(1 << 20).and_then(LocationCache::bytes_for).ok_or_else(|| {
                ("protocol.cache_mb".to_string(), format!("{} MiB is more than 2^64 bytes", p.cache_mb))
            })?;
        per_node.push(("location cache", cache, "protocol.cache_mb"));
        if proto.background().is_some() {
            coroutines += proto.background_coroutines(&p.options) as u64;
        }
    }
    per_node.push(("coroutines", workers * coroutines * SCRATCH_FLOOR, "cluster.coroutines"));
    per_node.push(("QPs", qps, "cluster.nodes"));
    let nodes_per_process = if s.backend == BackendName::Sim { c.nodes } else { 1 };
    let total = per_node
        .iter()
        .try_fold(0u64, |a, t| a.checked_add(t.1))
        .and_then(|n| n.checked_mul(nodes_per_process as u64))
        .and_then(|t| t.checked_add(once))
        .ok_or_else(|| ("cluster.nodes".to_string(), "the memory all nodes need exceeds 2^64 bytes".to_string()))?;
    Ok(Estimate { per_node, nodes_per_process, once, total })
}

/// Bytes this machine can still give (Linux: `MemAvailable` of /proc/meminfo); None where
/// unknown.
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuses a scenario whose estimate exceeds the memory available, naming the field behind
/// the largest term.
pub fn check_estimate(s: &Scenario, profile: &NicProfile) -> Result<(), (String, String)> {
    let e = estimate(s, profile)?;
    let Some(have) = available() else { return Ok(()) };
    if e.total <= have {
        return Ok(());
    }
    let field = e.per_node.iter().max_by_key(|t| t.1).map_or("cluster", |t| t.2);
    Err((
        field.to_string(),
        format!(
            "the scenario needs about {} of memory, more than the {} this machine has available (MemAvailable); estimate: {e}",
            bytes(e.total),
            bytes(have)
        ),
    ))
}
