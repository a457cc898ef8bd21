//! NIC profiles: the simulated NIC's parameters, read from RON files in `scenarios/nics/`.
//!
//! Every field is documented (with its source) in `docs/nic-model.md`. A profile is converted
//! once into [`NicModel`], whose times are integer picoseconds so no event time ever depends on
//! floating point beyond the correctly rounded conversions done here.

use std::path::Path;

use serde::{Deserialize, Serialize};
use txbed_transport::CpuCosts;

/// Per-verb NIC work, in nanoseconds of one processing unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerbWork {
    pub read: f64,
    pub write: f64,
    pub atomic: f64,
    pub send: f64,
}

/// How NIC atomics relate to CPU atomics on the same word (`ibv_atomic_cap`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Atomicity {
    /// `IBV_ATOMIC_HCA`: atomic only among operations through this NIC; a CPU CAS landing
    /// between the NIC's read and write of the word is lost.
    Hca,
    /// `IBV_ATOMIC_GLOB`: atomic with respect to the CPU as well.
    Glob,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QpCache {
    /// QP contexts the NIC keeps on chip.
    pub entries: u32,
    /// Processing-unit time lost to a miss (fetching the context over PCIe).
    pub miss_ns: f64,
    /// Latency a miss adds to the operation.
    pub miss_latency_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pcie {
    /// Usable data rate per direction, Gbit/s (after 128b/130b encoding).
    pub gbps: f64,
    /// Maximum TLP payload (bytes) and per-TLP overhead (header, framing, DLLP share).
    pub tlp_payload: u32,
    pub tlp_overhead: u32,
    /// Round trip of a NIC DMA read of host memory.
    pub read_latency_ns: u64,
    /// Time until a NIC DMA write is visible in host memory.
    pub write_latency_ns: u64,
    /// Time from the CPU's doorbell MMIO to the NIC seeing it.
    pub mmio_latency_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Data rate per direction, Gbit/s (after line encoding).
    pub gbps: f64,
    /// Per-packet framing outside the transport headers (IB: LRH + ICRC + VCRC = 14 B;
    /// RoCE v2: Ethernet + IPv4 + UDP + ICRC + FCS + preamble/IFG).
    pub packet_overhead_bytes: u32,
    /// Cable propagation per hop (node to switch).
    pub propagation_ns: u64,
    /// Switch port-to-port latency.
    pub switch_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reliability {
    /// Probability that a UD datagram is dropped.
    pub ud_drop_probability: f64,
    /// RC local ACK timeout (4.096 us x 2^timeout in verbs).
    pub rc_timeout_ns: u64,
    /// RC retransmissions before `RetryExceeded`.
    pub rc_retry_count: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub coroutine_switch_ns: u64,
    pub mmio_ns: u64,
    pub wqe_ns: u64,
    pub poll_cqe_ns: u64,
    pub recv_ns: u64,
    pub rpc_dispatch_ns: u64,
    pub copy_ps_per_byte: u64,
    pub memory_miss_ns: u64,
}

/// A NIC (and host) profile as written in a RON file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicProfile {
    pub name: String,
    pub description: String,
    /// NICs per machine; worker `w` uses NIC `w % nics_per_node`.
    pub nics_per_node: u32,
    /// Parallel processing units per NIC.
    pub processing_units: u32,
    /// Work on the requester NIC per request.
    pub requester_ns: VerbWork,
    /// Work on the responder NIC per request (for SEND: the receive).
    pub responder_ns: VerbWork,
    /// Work to write one completion-queue entry.
    pub cqe_ns: f64,
    /// Fixed latency of one pass through the NIC pipeline, beyond processing-unit work.
    pub pipeline_latency_ns: u64,
    pub max_inline: u32,
    pub mtu: u32,
    pub wqe_bytes: u32,
    pub send_queue_depth: u32,
    pub qp_cache: QpCache,
    pub atomicity: Atomicity,
    /// How long the NIC's read-modify-write of an atomic takes (read then write over PCIe).
    pub atomic_rmw_ns: u64,
    pub pcie: Pcie,
    pub link: Link,
    pub reliability: Reliability,
    pub host: Host,
}

#[derive(Debug)]
pub struct ProfileError(pub String);

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ProfileError {}

/// The profiles shipped in `scenarios/nics/`, embedded so the binary runs from anywhere.
pub const BUILTIN: [(&str, &str); 4] = [
    ("cx3", include_str!("../../scenarios/nics/cx3.ron")),
    ("cx4", include_str!("../../scenarios/nics/cx4.ron")),
    ("cx5", include_str!("../../scenarios/nics/cx5.ron")),
    ("roce-cx4", include_str!("../../scenarios/nics/roce-cx4.ron")),
];

impl NicProfile {
    /// Parses a profile; errors name the source, line and column.
    pub fn parse(text: &str, source: &str) -> Result<Self, ProfileError> {
        let p: NicProfile = ron::Options::default()
            .from_str(text)
            .map_err(|e| ProfileError(format!("{source}:{}:{}: {}", e.position.line, e.position.col, e.code)))?;
        p.validate().map_err(|m| ProfileError(format!("{source}: {m}")))?;
        Ok(p)
    }

    /// A built-in profile by name, or a RON file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ProfileError> {
        if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, &format!("scenarios/nics/{n}.ron"));
        }
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|e| {
            let names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
            ProfileError(format!(
                "cannot read NIC profile {name_or_path:?} ({e}); built-in profiles are {}",
                names.join(", ")
            ))
        })?;
        Self::parse(&text, name_or_path)
    }

    fn validate(&self) -> Result<(), String> {
        let pos = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{name} must be a positive number, got {v}"))
            }
        };
        if self.nics_per_node == 0 {
            return Err("nics_per_node must be at least 1".into());
        }
        if self.processing_units == 0 {
            return Err("processing_units must be at least 1".into());
        }
        for (side, w) in [("requester_ns", &self.requester_ns), ("responder_ns", &self.responder_ns)] {
            for (verb, v) in [("read", w.read), ("write", w.write), ("atomic", w.atomic), ("send", w.send)] {
                pos(&format!("{side}.{verb}"), v)?;
            }
        }
        if !(self.cqe_ns >= 0.0 && self.cqe_ns.is_finite()) {
            return Err("cqe_ns must be >= 0".into());
        }
        pos("pcie.gbps", self.pcie.gbps)?;
        pos("link.gbps", self.link.gbps)?;
        if self.qp_cache.entries == 0 {
            return Err("qp_cache.entries must be at least 1".into());
        }
        if !(self.qp_cache.miss_ns >= 0.0 && self.qp_cache.miss_ns.is_finite()) {
            return Err("qp_cache.miss_ns must be >= 0".into());
        }
        if self.mtu < 256 || !self.mtu.is_power_of_two() || self.mtu > 4096 {
            return Err(format!("mtu must be 256, 512, 1024, 2048 or 4096, got {}", self.mtu));
        }
        if self.send_queue_depth == 0 {
            return Err("send_queue_depth must be at least 1".into());
        }
        if self.pcie.tlp_payload == 0 {
            return Err("pcie.tlp_payload must be at least 1".into());
        }
        let p = self.reliability.ud_drop_probability;
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("reliability.ud_drop_probability must be in [0, 1], got {p}"));
        }
        Ok(())
    }

    pub fn host_costs(&self) -> CpuCosts {
        CpuCosts {
            coroutine_switch_ns: self.host.coroutine_switch_ns,
            mmio_ns: self.host.mmio_ns,
            wqe_ns: self.host.wqe_ns,
            poll_cqe_ns: self.host.poll_cqe_ns,
            recv_ns: self.host.recv_ns,
            rpc_dispatch_ns: self.host.rpc_dispatch_ns,
            copy_ps_per_byte: self.host.copy_ps_per_byte,
            memory_miss_ns: self.host.memory_miss_ns,
        }
    }
}

/// Verb classes with distinct NIC costs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VerbClass {
    Read = 0,
    Write = 1,
    Atomic = 2,
    Send = 3,
}

/// A profile in integer picoseconds (and femtoseconds per byte for rates).
#[derive(Clone, Debug)]
pub struct NicModel {
    pub nics_per_node: u32,
    pub units: u64,
    pub requester_ps: [u64; 4],
    pub responder_ps: [u64; 4],
    pub cqe_ps: u64,
    pub pipeline_ps: u64,
    pub max_inline: u32,
    pub mtu: u32,
    pub wqe_bytes: u32,
    pub send_queue_depth: u32,
    pub qp_cache_entries: u32,
    pub qp_miss_ps: u64,
    pub qp_miss_latency_ps: u64,
    pub atomicity: Atomicity,
    pub atomic_rmw_ps: u64,
    pub pcie_fs_per_byte: u64,
    pub tlp_payload: u32,
    pub tlp_overhead: u32,
    pub pcie_read_ps: u64,
    pub pcie_write_ps: u64,
    pub mmio_latency_ps: u64,
    pub link_fs_per_byte: u64,
    pub packet_overhead: u32,
    pub propagation_ps: u64,
    pub switch_ps: u64,
    /// Drop when a uniform u64 draw is below this.
    pub ud_drop_threshold: u64,
    pub ud_drop: bool,
    pub rc_give_up_ps: u64,
    pub host: CpuCosts,
}

fn ps(ns: f64) -> u64 {
    (ns * 1000.0).round() as u64
}

fn fs_per_byte(gbps: f64) -> u64 {
    // 8 bits per byte at `gbps` Gbit/s = 8/gbps ns per byte = 8e6/gbps fs per byte.
    (8.0e6 / gbps).round() as u64
}

impl NicModel {
    pub fn new(p: &NicProfile) -> Self {
        let w = |v: &VerbWork| [ps(v.read), ps(v.write), ps(v.atomic), ps(v.send)];
        let prob = p.reliability.ud_drop_probability;
        NicModel {
            nics_per_node: p.nics_per_node,
            units: p.processing_units as u64,
            requester_ps: w(&p.requester_ns),
            responder_ps: w(&p.responder_ns),
            cqe_ps: ps(p.cqe_ns),
            pipeline_ps: p.pipeline_latency_ns * 1000,
            max_inline: p.max_inline,
            mtu: p.mtu,
            wqe_bytes: p.wqe_bytes,
            send_queue_depth: p.send_queue_depth,
            qp_cache_entries: p.qp_cache.entries,
            qp_miss_ps: ps(p.qp_cache.miss_ns),
            qp_miss_latency_ps: p.qp_cache.miss_latency_ns * 1000,
            atomicity: p.atomicity,
            atomic_rmw_ps: p.atomic_rmw_ns * 1000,
            pcie_fs_per_byte: fs_per_byte(p.pcie.gbps),
            tlp_payload: p.pcie.tlp_payload,
            tlp_overhead: p.pcie.tlp_overhead,
            pcie_read_ps: p.pcie.read_latency_ns * 1000,
            pcie_write_ps: p.pcie.write_latency_ns * 1000,
            mmio_latency_ps: p.pcie.mmio_latency_ns * 1000,
            link_fs_per_byte: fs_per_byte(p.link.gbps),
            packet_overhead: p.link.packet_overhead_bytes,
            propagation_ps: p.link.propagation_ns * 1000,
            switch_ps: p.link.switch_ns * 1000,
            ud_drop_threshold: if prob >= 1.0 { u64::MAX } else { (prob * 18_446_744_073_709_551_616.0) as u64 },
            ud_drop: prob > 0.0,
            rc_give_up_ps: p.reliability.rc_timeout_ns * 1000 * (p.reliability.rc_retry_count as u64 + 1),
            host: p.host_costs(),
        }
    }

    /// Bytes on PCIe for a DMA of `bytes` (payload split into TLPs, each with overhead).
    pub fn pcie_bytes(&self, bytes: u32) -> u64 {
        let tlps = bytes.div_ceil(self.tlp_payload).max(1);
        bytes as u64 + tlps as u64 * self.tlp_overhead as u64
    }

    pub fn pcie_ps(&self, bytes: u32) -> u64 {
        self.pcie_bytes(bytes) * self.pcie_fs_per_byte / 1000
    }

    /// Wire bytes of a message of `payload` bytes with `headers` transport-header bytes per
    /// packet, segmented at the MTU.
    pub fn wire_bytes(&self, headers: u32, payload: u32) -> u64 {
        let packets = payload.div_ceil(self.mtu).max(1) as u64;
        payload as u64 + packets * (headers + self.packet_overhead) as u64
    }

    pub fn wire_ps(&self, bytes: u64) -> u64 {
        bytes * self.link_fs_per_byte / 1000
    }
}

/// InfiniBand transport headers per packet (IBTA spec), excluding LRH/ICRC/VCRC framing.
pub mod headers {
    pub const BTH: u32 = 12;
    pub const RETH: u32 = 16;
    pub const AETH: u32 = 4;
    pub const ATOMIC_ETH: u32 = 28;
    pub const ATOMIC_ACK_ETH: u32 = 8;
    pub const IMM: u32 = 4;
    pub const DETH: u32 = 8;
}
