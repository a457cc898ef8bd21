//! NIC profiles: the simulated NIC's parameters, read from RON files in `scenarios/nics/`.
//!
//! Every field is documented (with its source) in `docs/nic-model.md`. A profile is converted
//! once into [`NicModel`], whose times are integer picoseconds so no event time ever depends on
//! floating point beyond the correctly rounded conversions done here.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
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
    #[serde(alias = "hca", alias = "HCA")]
    Hca,
    /// `IBV_ATOMIC_GLOB`: atomic with respect to the CPU as well.
    #[serde(alias = "glob", alias = "GLOB")]
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
    /// RPC over UD: the retransmission timeout before any round trip to a peer is measured
    /// (RFC 6298's initial RTO, scaled to the fabric; transport/src/rpc.rs).
    #[serde(default = "default_rto_initial")]
    pub rpc_rto_initial_ns: u64,
    /// RPC over UD: the floor of the measured RTO (SRTT + 4 RTTVAR).
    #[serde(default = "default_rto_min")]
    pub rpc_rto_min_ns: u64,
    /// RPC over UD: the cap of the RTO and of its exponential backoff (the floor, if higher).
    #[serde(default = "default_rto_max")]
    pub rpc_rto_max_ns: u64,
}

// Defaults of the RPC layer's RTO (docs/fidelity.md, "RPC retransmission"): the initial value
// and cap are the fixed timeout the RPC layer used before it measured round trips; the floor
// is about ten unloaded RPC round trips on these NICs, so load swings seldom fire it.
fn default_rto_initial() -> u64 {
    2_000_000
}
fn default_rto_min() -> u64 {
    50_000
}
fn default_rto_max() -> u64 {
    2_000_000
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
        p.validate().map_err(|(field, m)| ProfileError(format!("{source}: {field} {m}")))?;
        Ok(p)
    }

    /// A built-in profile by name, or a RON file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ProfileError> {
        if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, &format!("scenarios/nics/{n}.ron"));
        }
        let path = Path::new(name_or_path);
        let text = txbed_input::read_text(path, "NIC profile", txbed_input::CONFIG_LIMIT).map_err(|e| {
            let names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
            ProfileError(format!("{e}; built-in profiles are {}", names.join(", ")))
        })?;
        Self::parse(&text, name_or_path)
    }

    /// Checks every value; on error returns the field's path and the problem.
    fn validate(&self) -> Result<(), (String, String)> {
        let err = |field: &str, msg: String| Err((field.to_string(), msg));
        let pos = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                err(name, format!("must be a positive number, got {v}"))
            }
        };
        if self.nics_per_node == 0 {
            return err("nics_per_node", "must be at least 1".into());
        }
        if self.processing_units == 0 {
            return err("processing_units", "must be at least 1".into());
        }
        for (side, w) in [("requester_ns", &self.requester_ns), ("responder_ns", &self.responder_ns)] {
            for (verb, v) in [("read", w.read), ("write", w.write), ("atomic", w.atomic), ("send", w.send)] {
                pos(&format!("{side}.{verb}"), v)?;
            }
        }
        if !(self.cqe_ns >= 0.0 && self.cqe_ns.is_finite()) {
            return err("cqe_ns", "must be >= 0".into());
        }
        pos("pcie.gbps", self.pcie.gbps)?;
        pos("link.gbps", self.link.gbps)?;
        if self.qp_cache.entries == 0 {
            return err("qp_cache.entries", "must be at least 1".into());
        }
        if !(self.qp_cache.miss_ns >= 0.0 && self.qp_cache.miss_ns.is_finite()) {
            return err("qp_cache.miss_ns", "must be >= 0".into());
        }
        if self.mtu < 256 || !self.mtu.is_power_of_two() || self.mtu > 4096 {
            return err("mtu", format!("must be 256, 512, 1024, 2048 or 4096, got {}", self.mtu));
        }
        if self.send_queue_depth == 0 {
            return err("send_queue_depth", "must be at least 1".into());
        }
        if self.pcie.tlp_payload == 0 {
            return err("pcie.tlp_payload", "must be at least 1".into());
        }
        let p = self.reliability.ud_drop_probability;
        if !(0.0..=1.0).contains(&p) {
            return err("reliability.ud_drop_probability", format!("must be in [0, 1], got {p}"));
        }
        self.within_sanity_bounds()
    }

    /// Bounds far outside any NIC or host, so a typo or a runaway override (`link.gbps=1e-12`,
    /// a latency of hours) is an error naming the field instead of a run that breaks.
    fn within_sanity_bounds(&self) -> Result<(), (String, String)> {
        const SECOND_NS: u64 = 1_000_000_000;
        let rate = |name: &str, v: f64| -> Result<(), (String, String)> {
            if (0.1..=100_000.0).contains(&v) {
                Ok(())
            } else {
                Err((name.to_string(), format!("must be 0.1 to 100000 Gbit/s, got {v}")))
            }
        };
        rate("pcie.gbps", self.pcie.gbps)?;
        rate("link.gbps", self.link.gbps)?;
        let (r, q, l, h) = (&self.reliability, &self.qp_cache, &self.link, &self.host);
        let times = [
            ("pipeline_latency_ns", self.pipeline_latency_ns),
            ("atomic_rmw_ns", self.atomic_rmw_ns),
            ("qp_cache.miss_latency_ns", q.miss_latency_ns),
            ("pcie.read_latency_ns", self.pcie.read_latency_ns),
            ("pcie.write_latency_ns", self.pcie.write_latency_ns),
            ("pcie.mmio_latency_ns", self.pcie.mmio_latency_ns),
            ("link.propagation_ns", l.propagation_ns),
            ("link.switch_ns", l.switch_ns),
            ("reliability.rc_timeout_ns", r.rc_timeout_ns),
            ("reliability.rpc_rto_initial_ns", r.rpc_rto_initial_ns),
            ("reliability.rpc_rto_min_ns", r.rpc_rto_min_ns),
            ("reliability.rpc_rto_max_ns", r.rpc_rto_max_ns),
            ("host.coroutine_switch_ns", h.coroutine_switch_ns),
            ("host.mmio_ns", h.mmio_ns),
            ("host.wqe_ns", h.wqe_ns),
            ("host.poll_cqe_ns", h.poll_cqe_ns),
            ("host.recv_ns", h.recv_ns),
            ("host.rpc_dispatch_ns", h.rpc_dispatch_ns),
            ("host.copy_ps_per_byte", h.copy_ps_per_byte),
            ("host.memory_miss_ns", h.memory_miss_ns),
        ];
        if let Some((name, v)) = times.iter().find(|(_, v)| *v > SECOND_NS) {
            return Err((name.to_string(), format!("must be at most {SECOND_NS} (1 s), got {v}")));
        }
        let works = [
            ("requester_ns.read", self.requester_ns.read),
            ("requester_ns.write", self.requester_ns.write),
            ("requester_ns.atomic", self.requester_ns.atomic),
            ("requester_ns.send", self.requester_ns.send),
            ("responder_ns.read", self.responder_ns.read),
            ("responder_ns.write", self.responder_ns.write),
            ("responder_ns.atomic", self.responder_ns.atomic),
            ("responder_ns.send", self.responder_ns.send),
            ("cqe_ns", self.cqe_ns),
            ("qp_cache.miss_ns", q.miss_ns),
        ];
        if let Some((name, v)) = works.iter().find(|(_, v)| *v > 1e9) {
            return Err((name.to_string(), format!("must be at most 1e9 ns (1 s), got {v}")));
        }
        let counts = [
            ("nics_per_node", self.nics_per_node as u64, 16),
            ("processing_units", self.processing_units as u64, 4096),
            ("qp_cache.entries", q.entries as u64, 1 << 24),
            ("send_queue_depth", self.send_queue_depth as u64, 1 << 16),
            ("max_inline", self.max_inline as u64, 1 << 16),
            ("wqe_bytes", self.wqe_bytes as u64, 4096),
            ("pcie.tlp_payload", self.pcie.tlp_payload as u64, 4096),
            ("pcie.tlp_overhead", self.pcie.tlp_overhead as u64, 4096),
            ("link.packet_overhead_bytes", l.packet_overhead_bytes as u64, 4096),
            ("reliability.rc_retry_count", r.rc_retry_count as u64, 1000),
        ];
        if let Some((name, v, max)) = counts.iter().find(|(_, v, max)| v > max) {
            return Err((name.to_string(), format!("must be at most {max}, got {v}")));
        }
        // A floor above the cap is allowed (the RTO is then fixed at the floor), so that
        // scaling one of them alone stays valid.
        if r.rpc_rto_min_ns == 0 {
            return Err(("reliability.rpc_rto_min_ns".into(), "must be at least 1 ns, got 0".into()));
        }
        if self.wqe_bytes == 0 {
            return Err(("wqe_bytes".into(), "must be at least 1".into()));
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

/// Declares an override struct: the profile struct's fields, each optional and written bare
/// (`host: (mmio_ns: 50)`, not `Some(..)`), unknown fields rejected, absent ones not written.
macro_rules! overrides {
    ($(#[$doc:meta])* $name:ident as $ron:literal { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, rename = $ron)]
        pub struct $name {
            $(
                #[serde(default, with = "bare", skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
        }
    };
}

/// An `Option` written as its value: `Some` when present, absent fields are skipped.
mod bare {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) => x.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        T::deserialize(d).map(Some)
    }
}

// One line per profile struct; `overrides_mirror_the_profile` fails if a field is missing.
overrides!(VerbWorkOverrides as "VerbWork" { read: f64, write: f64, atomic: f64, send: f64 });
overrides!(QpCacheOverrides as "QpCache" { entries: u32, miss_ns: f64, miss_latency_ns: u64 });
overrides!(PcieOverrides as "Pcie" {
    gbps: f64, tlp_payload: u32, tlp_overhead: u32, read_latency_ns: u64, write_latency_ns: u64, mmio_latency_ns: u64,
});
overrides!(LinkOverrides as "Link" { gbps: f64, packet_overhead_bytes: u32, propagation_ns: u64, switch_ns: u64 });
overrides!(ReliabilityOverrides as "Reliability" {
    ud_drop_probability: f64, rc_timeout_ns: u64, rc_retry_count: u32, rpc_rto_initial_ns: u64, rpc_rto_min_ns: u64,
    rpc_rto_max_ns: u64,
});
overrides!(HostOverrides as "Host" {
    coroutine_switch_ns: u64, mmio_ns: u64, wqe_ns: u64, poll_cqe_ns: u64, recv_ns: u64, rpc_dispatch_ns: u64,
    copy_ps_per_byte: u64, memory_miss_ns: u64,
});
overrides!(
    /// Overrides of some profile fields, nested as in the profile (a scenario's `nic`:
    /// `(host: (rpc_dispatch_ns: 500), link: (gbps: 56.0))`). Every field but `name` and
    /// `description`; [`NicProfile::with_overrides`] applies them.
    NicOverrides as "NicOverrides" {
        nics_per_node: u32,
        processing_units: u32,
        requester_ns: VerbWorkOverrides,
        responder_ns: VerbWorkOverrides,
        cqe_ns: f64,
        pipeline_latency_ns: u64,
        max_inline: u32,
        mtu: u32,
        wqe_bytes: u32,
        send_queue_depth: u32,
        qp_cache: QpCacheOverrides,
        atomicity: Atomicity,
        atomic_rmw_ns: u64,
        pcie: PcieOverrides,
        link: LinkOverrides,
        reliability: ReliabilityOverrides,
        host: HostOverrides,
    }
);

impl NicOverrides {
    pub fn is_empty(&self) -> bool {
        self.fields().is_empty()
    }

    /// Every overridden field as (dotted path, value), by path in alphabetical order.
    pub fn fields(&self) -> Vec<(String, Value)> {
        fn walk(prefix: &str, m: &Map<String, Value>, out: &mut Vec<(String, Value)>) {
            for (k, v) in m {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                match v {
                    Value::Object(inner) => walk(&path, inner, out),
                    leaf => out.push((path, leaf.clone())),
                }
            }
        }
        let mut out = Vec::new();
        if let Value::Object(m) = serde_json::to_value(self).expect("overrides serialise") {
            walk("", &m, &mut out);
        }
        out
    }
}

/// A numeric profile field: its dotted path, value, and whether it is an integer.
#[derive(Clone, Debug, PartialEq)]
pub struct NumericField {
    pub path: String,
    pub value: f64,
    pub integer: bool,
}

impl NicProfile {
    /// This profile with `o` applied and checked as a profile file is; on error returns the
    /// field's dotted path and the problem.
    pub fn with_overrides(&self, o: &NicOverrides) -> Result<NicProfile, (String, String)> {
        fn merge(into: &mut Value, from: Value) {
            match (into, from) {
                (Value::Object(a), Value::Object(b)) => {
                    for (k, v) in b {
                        merge(a.entry(k).or_insert(Value::Null), v);
                    }
                }
                (slot, v) => *slot = v,
            }
        }
        let mut v = serde_json::to_value(self).expect("a profile serialises");
        merge(&mut v, serde_json::to_value(o).expect("overrides serialise"));
        // Cannot fail: the override types are the profile's.
        let p: NicProfile = serde_json::from_value(v).map_err(|e| (String::new(), e.to_string()))?;
        p.validate()?;
        Ok(p)
    }

    /// Every numeric field, by path in alphabetical order.
    pub fn numeric_fields(&self) -> Vec<NumericField> {
        fn walk(prefix: &str, v: &Value, out: &mut Vec<NumericField>) {
            match v {
                Value::Object(m) => {
                    for (k, x) in m {
                        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                        walk(&path, x, out);
                    }
                }
                Value::Number(n) => out.push(NumericField {
                    path: prefix.to_string(),
                    value: n.as_f64().unwrap_or(f64::NAN),
                    integer: !n.is_f64(),
                }),
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk("", &serde_json::to_value(self).expect("a profile serialises"), &mut out);
        out
    }

    /// The valid value nearest to `v` for the numeric field at `path`, by the rules of
    /// `validate` (for tools that scale a field, e.g. `txbed sensitivity`). Integer fields
    /// should be rounded first. `v` is assumed positive where the field must be.
    pub fn nearest_valid(path: &str, v: f64) -> f64 {
        match path {
            // Powers of two from 256 to 4096, nearest on a log scale.
            "mtu" => 2f64.powi(v.max(1.0).log2().round().clamp(8.0, 12.0) as i32),
            "reliability.ud_drop_probability" => v.clamp(0.0, 1.0),
            "pcie.gbps" | "link.gbps" => v.clamp(0.1, 100_000.0),
            "nics_per_node" => v.clamp(1.0, 16.0),
            "processing_units"
            | "qp_cache.entries"
            | "send_queue_depth"
            | "pcie.tlp_payload"
            | "wqe_bytes"
            | "reliability.rpc_rto_initial_ns"
            | "reliability.rpc_rto_min_ns"
            | "reliability.rpc_rto_max_ns" => v.max(1.0),
            _ => v.max(0.0),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn overrides(v: Value) -> Result<NicOverrides, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    /// Every profile field but the name and description can be overridden, and overriding
    /// every one of them with another profile's values gives that profile.
    #[test]
    fn overrides_mirror_the_profile() {
        let (cx3, cx4) = (NicProfile::load("cx3").unwrap(), NicProfile::load("cx4").unwrap());
        let mut all = serde_json::to_value(&cx3).unwrap();
        all.as_object_mut().unwrap().retain(|k, _| k != "name" && k != "description");
        let o = overrides(all).unwrap();
        let mut got = cx4.with_overrides(&o).unwrap();
        got.name = cx3.name.clone();
        got.description = cx3.description.clone();
        assert_eq!(got, cx3);
        assert_eq!(o.fields().len(), cx3.numeric_fields().len() + 1); // + atomicity
    }

    #[test]
    fn overrides_change_only_their_fields() {
        let base = NicProfile::load("cx4").unwrap();
        let o =
            overrides(json!({"host": {"rpc_dispatch_ns": 500}, "link": {"gbps": 50}, "atomicity": "glob"})).unwrap();
        let p = base.with_overrides(&o).unwrap();
        assert_eq!(p.host.rpc_dispatch_ns, 500);
        assert_eq!(p.link.gbps, 50.0);
        assert_eq!(p.atomicity, Atomicity::Glob);
        let mut back = p.clone();
        back.host.rpc_dispatch_ns = base.host.rpc_dispatch_ns;
        back.link.gbps = base.link.gbps;
        back.atomicity = base.atomicity;
        assert_eq!(back, base);
        let paths: Vec<String> = o.fields().into_iter().map(|(k, _)| k).collect();
        assert_eq!(paths, ["atomicity", "host.rpc_dispatch_ns", "link.gbps"]);
        // RON, as a scenario writes it, and back.
        let ron_text = "(host: (rpc_dispatch_ns: 500), link: (gbps: 50.0), atomicity: Glob)";
        let from_ron: NicOverrides = ron::from_str(ron_text).unwrap();
        assert_eq!(from_ron, o);
        let again: NicOverrides = ron::from_str(&ron::to_string(&from_ron).unwrap()).unwrap();
        assert_eq!(again, o);
    }

    #[test]
    fn bad_overrides_name_the_field() {
        let base = NicProfile::load("cx4").unwrap();
        let m = overrides(json!({"host": {"rpc_dispatch": 1}})).unwrap_err();
        assert!(m.contains("unknown field `rpc_dispatch`") && m.contains("`rpc_dispatch_ns`"), "{m}");
        let m = overrides(json!({"name": "x"})).unwrap_err();
        assert!(m.contains("unknown field `name`"), "{m}");
        let m = overrides(json!({"host": {"mmio_ns": 0.5}})).unwrap_err();
        assert!(m.contains("invalid type"), "{m}");
        let m = ron::from_str::<NicOverrides>("(host: (mmio: 1))").unwrap_err().to_string();
        assert!(m.starts_with("1:") && m.contains("`mmio`") && m.contains("mmio_ns"), "{m}");
        let err = |v: Value| base.with_overrides(&overrides(v).unwrap()).unwrap_err();
        let (f, m) = err(json!({"link": {"gbps": -1}}));
        assert_eq!((f.as_str(), m.as_str()), ("link.gbps", "must be a positive number, got -1"));
        let (f, m) = err(json!({"mtu": 1000}));
        assert_eq!(f, "mtu");
        assert!(m.contains("must be 256"), "{m}");
        let (f, _) = err(json!({"reliability": {"ud_drop_probability": 1.5}}));
        assert_eq!(f, "reliability.ud_drop_probability");
    }

    /// What a tool scaling a field by (1 +- r) gets from `nearest_valid` always passes
    /// Values no NIC or host has are refused with the field's path, not run.
    #[test]
    fn absurd_values_are_refused() {
        let base = NicProfile::load("cx4").unwrap();
        for (tree, field) in [
            (json!({"link": {"gbps": 1e-12}}), "link.gbps"),
            (json!({"pcie": {"read_latency_ns": 5_000_000_000u64}}), "pcie.read_latency_ns"),
            (json!({"host": {"memory_miss_ns": 2_000_000_000u64}}), "host.memory_miss_ns"),
            (json!({"nics_per_node": 64}), "nics_per_node"),
            (json!({"wqe_bytes": 0}), "wqe_bytes"),
        ] {
            let e = base.with_overrides(&overrides(tree.clone()).unwrap()).unwrap_err();
            assert!(format!("{e:?}").contains(field), "{tree}: {e:?}");
        }
    }

    /// `validate`, for every numeric field of every built-in profile.
    #[test]
    fn nearest_valid_values_validate() {
        for (name, _) in BUILTIN {
            let base = NicProfile::load(name).unwrap();
            let fields = base.numeric_fields();
            assert!(fields.len() >= 30, "{name}: {} numeric fields", fields.len());
            for f in fields {
                for scale in [0.01, 0.5, 0.7, 1.3, 1.99, 5.0] {
                    let mut v = f.value * scale;
                    if f.integer {
                        v = v.round();
                    }
                    let v = NicProfile::nearest_valid(&f.path, v);
                    let value = if f.integer { json!(v as u64) } else { json!(v) };
                    let mut tree = json!({});
                    let mut at = &mut tree;
                    for seg in f.path.split('.') {
                        at = &mut at[seg];
                    }
                    *at = value;
                    if let Err(e) = base.with_overrides(&overrides(tree).unwrap()) {
                        panic!("{name} {} = {v}: {e:?}", f.path);
                    }
                }
            }
        }
        assert_eq!(NicProfile::nearest_valid("mtu", 2867.0), 2048.0);
        assert_eq!(NicProfile::nearest_valid("mtu", 5325.0), 4096.0);
        assert_eq!(NicProfile::nearest_valid("nics_per_node", 0.0), 1.0);
    }
}
