//! Scenario files (RON). Unknown fields and bad values are rejected with the file, line and
//! column (syntax) or the field path (meaning); nothing here panics on user input.
//!
//! `--set path=value` (`apply_sets`) edits any field by the path it has in the file; enum
//! variants are accepted in the file's spelling or in lower case (`Occ` or `occ`).
//!
//! Sweep files (`sweep`) name a base scenario and axes of such edits.

pub mod clocks;
pub mod faults;
pub mod fields;
pub mod memory;
pub mod set;
pub mod sweep;

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use txbed_sim::bench_verbs::{rpc_max_payload, RawVerb};
use txbed_sim::profile::{Atomicity, NicOverrides};
use txbed_sim::wan::{Delay, Wan, WanLink, WanTransport};
use txbed_sim::NicProfile;
use txbed_txn::protocol::{fold_name, Level, OptionValues, Preset, ProtocolRef, Rdma};
use txbed_txn::retry::Retry;
use txbed_txn::stage::{Hybrid, Stage};
use txbed_workloads::WorkloadConfig;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub cluster: Cluster,
    /// Overrides of the NIC profile's fields (`cluster.nic`), nested as in the profile:
    /// `nic: Some((host: (rpc_dispatch_ns: 500), link: (gbps: 56.0)))`.
    #[serde(default)]
    pub nic: Option<NicOverrides>,
    /// The concurrency-control protocol (transactional workloads only).
    #[serde(default)]
    pub protocol: Option<ProtocolSpec>,
    pub workload: Workload,
    #[serde(default)]
    pub run: RunSpec,
    /// Where `txbed run` runs it unless `--backend` says otherwise.
    #[serde(default)]
    pub backend: BackendName,
    /// Faults the simulator applies: a schedule, random generators, what survives a crash
    /// (docs/faults.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<faults::Faults>,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackendName {
    #[default]
    #[serde(alias = "sim")]
    Sim,
    #[serde(alias = "sockets")]
    Sockets,
    #[serde(alias = "verbs")]
    Verbs,
}

/// A protocol of `txbed_protocols::REGISTRY`, by name (`Occ`, `occ`, `WAIT-DIE`: case and
/// punctuation do not matter). Written back as the protocol's own spelling (`OCC`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ProtocolName(pub ProtocolRef);

impl ProtocolName {
    pub fn protocol(self) -> ProtocolRef {
        self.0
    }
}

impl Serialize for ProtocolName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit_variant("Protocol", 0, self.0.name())
    }
}

impl<'de> Deserialize<'de> for ProtocolName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum(
            "Protocol",
            &[],
            NameVisitor("a protocol name", |name| {
                txbed_protocols::named(name).map(ProtocolName).ok_or_else(|| {
                    format!("unknown protocol `{name}`, expected one of {}", txbed_protocols::names().join(", "))
                })
            }),
        )
    }
}

/// A preset of the scenario's protocol, by name (`Drtmh`, `drtm-h`, `DrTM+H`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PresetName(pub &'static str);

impl Serialize for PresetName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit_variant("Preset", 0, self.0)
    }
}

impl<'de> Deserialize<'de> for PresetName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum(
            "Preset",
            &[],
            NameVisitor("a preset name", |name| {
                let all = || txbed_protocols::REGISTRY.iter().flat_map(|p| p.presets());
                let want = fold_name(name);
                all().find(|p| fold_name(p.name) == want).map(|p| PresetName(p.name)).ok_or_else(|| {
                    let names: Vec<&str> = all().map(|p| p.name).collect();
                    format!("unknown preset `{name}`, expected one of {}", names.join(", "))
                })
            }),
        )
    }
}

/// An isolation level, by name (`Serializable`, `ReadCommitted`, `StrictSerializable`, or
/// `"read-committed"`: case and punctuation do not matter). Written back as a RON variant
/// (`ReadCommitted`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IsolationName(pub Level);

impl IsolationName {
    /// The variant a scenario file spells (`ReadCommitted`).
    pub fn variant(level: Level) -> &'static str {
        match level {
            Level::ReadUncommitted => "ReadUncommitted",
            Level::ReadCommitted => "ReadCommitted",
            Level::RepeatableRead => "RepeatableRead",
            Level::Snapshot => "Snapshot",
            Level::Serializable => "Serializable",
            Level::StrictSerializable => "StrictSerializable",
        }
    }
}

impl Serialize for IsolationName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit_variant("Isolation", self.0 as u32, Self::variant(self.0))
    }
}

impl<'de> Deserialize<'de> for IsolationName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum(
            "Isolation",
            &[],
            NameVisitor("an isolation level", |name| {
                let want = fold_name(name);
                Level::ALL.into_iter().find(|l| fold_name(l.name()) == want).map(IsolationName).ok_or_else(|| {
                    let names: Vec<&str> = Level::ALL.into_iter().map(IsolationName::variant).collect();
                    format!("unknown isolation level `{name}`, expected one of {}", names.join(", "))
                })
            }),
        )
    }
}

/// Reads a bare name (`Occ`, or `"occ"` through `--set`) and looks it up.
struct NameVisitor<T>(&'static str, fn(&str) -> Result<T, String>);

impl<'de, T> serde::de::Visitor<'de> for NameVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        (self.1)(v).map_err(E::custom)
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, a: A) -> Result<T, A::Error> {
        use serde::de::{Error, VariantAccess};
        let (Ident(name), rest) = a.variant()?;
        rest.unit_variant()?;
        (self.1)(&name).map_err(A::Error::custom)
    }
}

/// A variant's name as written: formats read it with `deserialize_identifier` (RON's bare
/// words), not as a quoted string.
struct Ident(String);

impl<'de> Deserialize<'de> for Ident {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Ident;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Ident, E> {
                Ok(Ident(v.to_string()))
            }
        }
        d.deserialize_identifier(V)
    }
}

/// Which stages run one-sided: all RPC, all one-sided, an RCC hybrid code, or a list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Mode {
    #[serde(alias = "rpc", alias = "RPC")]
    Rpc,
    #[serde(alias = "onesided", alias = "OneSided")]
    Onesided,
    #[serde(alias = "code")]
    Code(u32),
    #[serde(alias = "stages")]
    Stages(Vec<StageName>),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StageName {
    #[serde(alias = "lock")]
    Lock,
    #[serde(alias = "read")]
    Read,
    #[serde(alias = "log")]
    Log,
    #[serde(alias = "release")]
    Release,
    #[serde(alias = "commit")]
    Commit,
    #[serde(alias = "validate")]
    Validate,
    #[serde(alias = "renew")]
    Renew,
    #[serde(alias = "calvin_input", alias = "CalvinInput")]
    Input,
    #[serde(alias = "calvin_forward", alias = "CalvinForward")]
    Forward,
    #[serde(alias = "vote")]
    Vote,
    #[serde(alias = "end")]
    End,
}

impl StageName {
    fn stage(self) -> Stage {
        match self {
            StageName::Lock => Stage::Lock,
            StageName::Read => Stage::Read,
            StageName::Log => Stage::Log,
            StageName::Release => Stage::Release,
            StageName::Commit => Stage::Commit,
            StageName::Validate => Stage::Validate,
            StageName::Renew => Stage::Renew,
            StageName::Input => Stage::CalvinInput,
            StageName::Forward => Stage::CalvinForward,
            StageName::Vote => Stage::Vote,
            StageName::End => Stage::End,
        }
    }
}

/// A protocol's options as plain data. Read through `ron::Value` first: serde_json's `Value`
/// cannot take RON's anonymous structures of more than one field (`(a: 1, b: 2)`), which
/// `ron::Value` reads as a map.
fn options_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<OptionValues, D::Error> {
    let v = ron::Value::deserialize(d)?;
    serde_json::to_value(&v).map_err(serde::de::Error::custom)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolSpec {
    pub name: ProtocolName,
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// Replicas of every record, the primary included (logs go to the others).
    #[serde(default = "default_replication")]
    pub replication: u16,
    /// Location cache per node, MiB (0 turns it off).
    #[serde(default = "default_cache_mb")]
    pub cache_mb: u64,
    /// Start with every node's location cache filled from the other nodes' index buckets (as
    /// after a long warm-up), up to `cache_mb`; off: the cache starts empty. Simulator only.
    #[serde(default)]
    pub warm_cache: bool,
    /// Records homed on the coordinator's own node are accessed by its CPU (loads, stores,
    /// CPU atomics where the NIC's atomics allow) and RPCs to its own worker are direct calls;
    /// off: through the NIC loopback, like remote records (docs/transactions.md).
    #[serde(default = "default_local_path")]
    pub local_path: bool,
    /// One-sided LOG: KiB of each ring a backup keeps per (sender node, sender worker).
    #[serde(default = "default_log_ring_kib")]
    pub log_ring_kib: u64,
    /// One-sided LOG: KiB a writer logs to a ring between lazy reclaims (the batch a backup
    /// applies in one go); at most half a ring is used.
    #[serde(default = "default_log_reclaim_kib")]
    pub log_reclaim_kib: u64,
    /// The RDMA optimisations of DrTM+H Sec. 3.2, for every protocol.
    #[serde(default)]
    pub rdma: RdmaSpec,
    /// The protocol's own options (`txbed protocols` lists them with their defaults).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null", deserialize_with = "options_value")]
    pub options: OptionValues,
    /// A prior system the protocol emulates (`txbed protocols` lists them); replaces `mode`,
    /// `rdma` and `options`.
    #[serde(default)]
    pub preset: Option<PresetName>,
    /// The isolation level the run is checked at (`Some(ReadCommitted)`); `None`: the one the
    /// protocol provides (`txbed protocols`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationName>,
}

/// RDMA optimisations (DrTM+H Sec. 3.2), each on or off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RdmaSpec {
    pub outstanding: bool,
    pub doorbell: bool,
    pub passive_ack: bool,
    pub speculative: bool,
}

impl Default for RdmaSpec {
    fn default() -> Self {
        let d = Rdma::default();
        RdmaSpec {
            outstanding: d.outstanding,
            doorbell: d.doorbell,
            passive_ack: d.passive_ack,
            speculative: d.speculative,
        }
    }
}

fn default_mode() -> Mode {
    Mode::Rpc
}
fn default_replication() -> u16 {
    3
}
fn default_cache_mb() -> u64 {
    64
}
fn default_local_path() -> bool {
    true
}
fn default_log_ring_kib() -> u64 {
    txbed_txn::protocol::DEFAULT_LOG_RING_BYTES >> 10
}
fn default_log_reclaim_kib() -> u64 {
    txbed_txn::protocol::DEFAULT_LOG_RECLAIM_BYTES >> 10
}

/// Whether one-sided CAS is safe on `profile`: HCA-level atomicity is only atomic within one
/// NIC, so several NICs per node make it unsafe.
pub fn atomics_safe(profile: &NicProfile) -> bool {
    !(profile.atomicity == Atomicity::Hca && profile.nics_per_node > 1)
}

impl ProtocolSpec {
    /// The hybrid code, RDMA options and protocol options a run uses: the preset's (with this
    /// log ring and reclaim sizes, which no preset sets), else `mode`, `rdma` and `options`.
    pub fn resolve(&self, profile: &NicProfile) -> (Hybrid, Rdma, OptionValues) {
        let log_ring_bytes = self.log_ring_kib << 10;
        let log_reclaim_bytes = self.log_reclaim_kib << 10;
        if let Some(preset) = self.preset() {
            let (hybrid, rdma, options) = (preset.resolve)(atomics_safe(profile));
            return (hybrid, Rdma { log_ring_bytes, log_reclaim_bytes, ..rdma }, options);
        }
        let r = &self.rdma;
        let rdma = Rdma {
            outstanding: r.outstanding,
            doorbell: r.doorbell,
            passive_ack: r.passive_ack,
            speculative: r.speculative,
            log_ring_bytes,
            log_reclaim_bytes,
        };
        (self.hybrid(), rdma, self.options.clone())
    }

    /// The isolation level the run is checked at: the scenario's, else the protocol's.
    pub fn level(&self) -> Level {
        self.isolation.map_or_else(|| self.name.protocol().isolation_for(&self.options), |i| i.0)
    }

    /// The preset named, if it is the protocol's.
    fn preset(&self) -> Option<&'static Preset> {
        let name = self.preset?.0;
        self.name.0.presets().iter().find(|p| p.name == name)
    }

    pub fn hybrid(&self) -> Hybrid {
        let stages = self.name.protocol().stages();
        match &self.mode {
            Mode::Rpc => Hybrid::RPC,
            Mode::Onesided => Hybrid::full(stages),
            Mode::Code(c) => Hybrid(*c),
            Mode::Stages(list) => Hybrid(list.iter().map(|s| s.stage().bit()).fold(0, |a, b| a | b)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cluster {
    pub nodes: u16,
    pub workers: u16,
    pub coroutines: u32,
    /// A built-in NIC profile name or a path to a RON profile.
    pub nic: String,
    /// A built-in CPU profile name or a path to a RON profile (`scenarios/cpus/`): what the
    /// simulator's HTM model needs (protocols that use HTM: DrTM).
    #[serde(skip_serializing_if = "is_default_cpu")]
    pub cpu: String,
    /// RC QPs per remote node per worker (emulates larger clusters).
    pub qps_per_node: u16,
    /// Overrides the NIC profile's NICs per node.
    pub nics_per_node: Option<u32>,
    /// Extra one-way delay in us from node i (row) to node j (column): long-haul links between
    /// data centers, on the simulator and the sockets backend alike. nodes x nodes, zero
    /// diagonal.
    pub link_delay_us: Option<Vec<Vec<u32>>>,
    /// Data centers, in node order: the first `nodes` nodes are in the first one, and so on.
    /// Empty: one data center of all nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub datacenters: Vec<Datacenter>,
    /// The links between data centers (required with two or more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inter_dc: Option<InterDc>,
    /// Node clocks and their sync service (simulator; docs/clocks.md). `None`: every clock
    /// reads simulated time, bound 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clocks: Option<clocks::Clocks>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Datacenter {
    /// Names it in `inter_dc.pairs`; empty: `dc0`, `dc1`, ... by position.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Nodes it holds.
    pub nodes: u16,
}

/// The link between every two data centers (each direction alike), and per-pair overrides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterDc {
    /// One-way delay, us: `Constant(us)`, `Uniform(lo, hi)`, `Normal(mean, sd)` or
    /// `Cdf([(us, p), ..])`.
    pub delay: Delay,
    /// Extra delay per message, uniform in [0, jitter_us].
    #[serde(default)]
    pub jitter_us: f64,
    /// Probability one transmission is lost.
    #[serde(default)]
    pub loss: f64,
    /// Link bandwidth, Gbit/s each way; `None`: only the NICs limit.
    #[serde(default)]
    pub gbps: Option<f64>,
    #[serde(default)]
    pub transport: WanTransport,
    /// Wait before RC or TCP resends a lost message, us; `None`: one round trip.
    #[serde(default)]
    pub retransmit_us: Option<f64>,
    /// Links between two named data centers (both directions) that differ from the above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<DcPair>,
}

/// The link between two data centers, where it differs from `inter_dc`'s: fields left out
/// keep `inter_dc`'s value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcPair {
    pub between: (String, String),
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Delay>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<WanTransport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmit_us: Option<f64>,
}

impl InterDc {
    /// The link every pair without an override uses.
    pub fn base(&self) -> WanLink {
        WanLink {
            delay: self.delay.clone(),
            jitter_us: self.jitter_us,
            loss: self.loss,
            gbps: self.gbps,
            transport: self.transport.clone(),
            retransmit_us: self.retransmit_us,
        }
    }
}

impl DcPair {
    /// `base` with this pair's overrides.
    pub fn link(&self, base: &WanLink) -> WanLink {
        WanLink {
            delay: self.delay.clone().unwrap_or_else(|| base.delay.clone()),
            jitter_us: self.jitter_us.unwrap_or(base.jitter_us),
            loss: self.loss.unwrap_or(base.loss),
            gbps: self.gbps.or(base.gbps),
            transport: self.transport.clone().unwrap_or_else(|| base.transport.clone()),
            retransmit_us: self.retransmit_us.or(base.retransmit_us),
        }
    }
}

impl Cluster {
    /// Data center names, by position (`dc0`... where none is given).
    pub fn dc_names(&self) -> Vec<String> {
        let name = |i: usize, d: &Datacenter| if d.name.is_empty() { format!("dc{i}") } else { d.name.clone() };
        self.datacenters.iter().enumerate().map(|(i, d)| name(i, d)).collect()
    }

    /// The simulator's view of the data centers, if there are two or more (a checked
    /// scenario's names and counts are valid).
    pub fn wan(&self) -> Option<Wan> {
        let inter = self.inter_dc.as_ref()?;
        let dcs = self.datacenters.len();
        if dcs < 2 {
            return None;
        }
        let dc_of = self
            .datacenters
            .iter()
            .enumerate()
            .flat_map(|(i, d)| std::iter::repeat_n(i as u16, d.nodes as usize))
            .collect();
        let base = inter.base();
        let mut links = vec![base.clone(); dcs * dcs];
        let names = self.dc_names();
        let at = |n: &str| names.iter().position(|x| x == n);
        for p in &inter.pairs {
            if let (Some(a), Some(b)) = (at(&p.between.0), at(&p.between.1)) {
                links[a * dcs + b] = p.link(&base);
                links[b * dcs + a] = p.link(&base);
            }
        }
        Some(Wan { dcs: dcs as u16, dc_of, links })
    }

    /// Checks `datacenters` and `inter_dc`; the error is (field path, problem).
    fn check_topology(&self) -> Result<(), (String, String)> {
        let dcs = self.datacenters.len();
        if dcs == 0 {
            if self.inter_dc.is_some() {
                return Err((
                    "cluster.inter_dc".into(),
                    "there is one data center: list two or more in cluster.datacenters, or remove inter_dc".into(),
                ));
            }
            return Ok(());
        }
        if dcs > self.nodes as usize {
            return Err(("cluster.datacenters".into(), format!("{dcs} data centers for {} nodes", self.nodes)));
        }
        for (i, d) in self.datacenters.iter().enumerate() {
            if d.nodes == 0 {
                return Err((format!("cluster.datacenters[{i}].nodes"), "must be at least 1".into()));
            }
        }
        let sum: u32 = self.datacenters.iter().map(|d| d.nodes as u32).sum();
        if sum != self.nodes as u32 {
            return Err((
                "cluster.datacenters".into(),
                format!("the data centers hold {sum} nodes, but cluster.nodes is {}", self.nodes),
            ));
        }
        let names = self.dc_names();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err((format!("cluster.datacenters[{i}].name"), format!("`{n}` names two data centers")));
            }
        }
        let Some(inter) = &self.inter_dc else {
            if dcs == 1 {
                return Ok(());
            }
            return Err((
                "cluster.inter_dc".into(),
                format!(
                    "{dcs} data centers need the links between them, e.g. inter_dc: Some((delay: Normal(1000, 100)))"
                ),
            ));
        };
        if dcs == 1 {
            return Err((
                "cluster.inter_dc".into(),
                "one data center has no links to other ones: remove inter_dc".into(),
            ));
        }
        let base = inter.base();
        base.check().map_err(|(f, m)| (format!("cluster.inter_dc.{f}"), m))?;
        let mut seen = Vec::new();
        for (i, p) in inter.pairs.iter().enumerate() {
            let path = |f: &str| format!("cluster.inter_dc.pairs[{i}].{f}");
            for n in [&p.between.0, &p.between.1] {
                if !names.contains(n) {
                    return Err((
                        path("between"),
                        format!("no data center is named `{n}` (there are {})", names.join(", ")),
                    ));
                }
            }
            if p.between.0 == p.between.1 {
                return Err((
                    path("between"),
                    format!("`{}` to itself is not a link between data centers", p.between.0),
                ));
            }
            let key =
                if p.between.0 < p.between.1 { (&p.between.0, &p.between.1) } else { (&p.between.1, &p.between.0) };
            if seen.contains(&key) {
                return Err((path("between"), format!("{} and {} are given twice", key.0, key.1)));
            }
            seen.push(key);
            p.link(&base).check().map_err(|(f, m)| (path(f), m))?;
        }
        Ok(())
    }
}

/// The CPU profile a scenario that names none gets.
pub const DEFAULT_CPU: &str = "haswell";

fn is_default_cpu(cpu: &str) -> bool {
    cpu == DEFAULT_CPU
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            nodes: 4,
            workers: 4,
            coroutines: 8,
            nic: "cx4".into(),
            cpu: DEFAULT_CPU.into(),
            qps_per_node: 1,
            nics_per_node: None,
            link_delay_us: None,
            datacenters: Vec::new(),
            inter_dc: None,
            clocks: None,
        }
    }
}

/// What a scenario runs: a primitive loop of one verb, or transactions of a registered
/// workload (`txbed_workloads::REGISTRY`), written `Name((parameters))` in the file.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Every coroutine keeps `outstanding` requests of one verb to random remote nodes.
    Verbs(VerbsWorkload),
    /// A transactional workload and its parameters (docs/workloads.md).
    Txn(WorkloadConfig),
}

impl Workload {
    /// The name reports print (`TPC-C`, `verbs`).
    pub fn title(&self) -> &'static str {
        match self {
            Workload::Verbs(_) => "verbs",
            Workload::Txn(w) => w.kind.title(),
        }
    }
}

// Written by hand, not derived: the variants are the registry's, so a new workload needs no
// edit here. The form is serde's externally tagged enum, as a derive would give.
impl Serialize for Workload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Workload::Verbs(v) => s.serialize_newtype_variant("Workload", 0, "Verbs", v),
            Workload::Txn(w) => {
                let index = txbed_workloads::REGISTRY.iter().position(|k| k.name() == w.kind.name()).unwrap_or(0);
                s.serialize_newtype_variant("Workload", index as u32 + 1, w.kind.name(), &*w.params)
            }
        }
    }
}

impl<'de> Deserialize<'de> for Workload {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Workload, D::Error> {
        d.deserialize_enum("Workload", &[], WorkloadVisitor)
    }
}

struct WorkloadVisitor;

impl<'de> serde::de::Visitor<'de> for WorkloadVisitor {
    type Value = Workload;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a workload: Verbs or one of {}", txbed_workloads::kind::names().join(", "))
    }

    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<Workload, A::Error> {
        use serde::de::{Error, VariantAccess};
        let (Ident(name), variant): (Ident, A::Variant) = data.variant()?;
        if txbed_workloads::kind::fold(&name) == "verbs" {
            return variant.newtype_variant().map(Workload::Verbs);
        }
        let Some(kind) = txbed_workloads::kind::named(&name) else {
            return Err(A::Error::custom(format!(
                "unknown workload `{name}`, expected Verbs or one of {}",
                txbed_workloads::kind::names().join(", ")
            )));
        };
        variant.newtype_variant_seed(ParamsSeed(kind)).map(Workload::Txn)
    }
}

/// Reads a registered workload's parameters through `WorkloadKind::parse`.
struct ParamsSeed(txbed_workloads::WorkloadKindRef);

impl<'de> serde::de::DeserializeSeed<'de> for ParamsSeed {
    type Value = WorkloadConfig;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<WorkloadConfig, D::Error> {
        let mut erased = <dyn erased_serde::Deserializer>::erase(d);
        self.0.parse(&mut erased).map_err(serde::de::Error::custom)
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verb {
    #[serde(alias = "read")]
    Read,
    #[serde(alias = "write")]
    Write,
    #[serde(alias = "atomic")]
    Atomic,
    #[serde(alias = "rpc")]
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
    #[serde(default = "default_verb")]
    pub verb: Verb,
    #[serde(default = "default_payload")]
    pub payload: u32,
    #[serde(default = "default_outstanding")]
    pub outstanding: u32,
}

fn default_verb() -> Verb {
    Verb::Read
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
    /// The wait before retrying a transaction a conflict aborted.
    pub retry: Retry,
    /// Real backends: a rank that sends no heartbeat for this long (wall-clock ms) is declared
    /// dead or hung, and every survivor ends naming it.
    pub failure_timeout_ms: u64,
    /// The bound `ctx.clock()` reports where no sync service measures one, us: real backends
    /// (the host's clock; measure it with chrony or PTP, docs/clocks.md) and simulated clocks
    /// without `sync`.
    pub clock_bound_us: u64,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            warmup_us: 20,
            measure_us: 200,
            seed: 1,
            retry: Retry::DEFAULT,
            failure_timeout_ms: 1000,
            clock_bound_us: 1000,
        }
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

/// A scenario, sweep or NIC profile file's text: a regular file of at most
/// `txbed_input::CONFIG_LIMIT` bytes.
pub fn read_config(path: &Path, what: &str) -> Result<String, ScenarioError> {
    txbed_input::read_text(path, what, txbed_input::CONFIG_LIMIT).map_err(|e| ScenarioError(e.0))
}

impl Scenario {
    pub fn load(path: &Path) -> Result<(Scenario, NicProfile), ScenarioError> {
        let text = read_config(path, "scenario")?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, source: &str) -> Result<(Scenario, NicProfile), ScenarioError> {
        let s = Self::parse_unchecked(text, source)?;
        let profile = s.check(source)?;
        Ok((s, profile))
    }

    /// Parses without checking values (`--set` edits come before the check).
    pub fn parse_unchecked(text: &str, source: &str) -> Result<Scenario, ScenarioError> {
        fields::parse_ron(text, source).map_err(ScenarioError)
    }

    /// Loads `path`, applies `sets` (`path=value`, in order) and checks the result.
    pub fn load_with(path: &Path, sets: &[String]) -> Result<(Scenario, NicProfile), ScenarioError> {
        let source = path.display().to_string();
        let text = read_config(path, "scenario")?;
        let s = Self::parse_unchecked(&text, &source)?;
        let s = s.apply_sets(sets)?;
        let profile = s.check(&if sets.is_empty() { source } else { format!("{source} (with --set)") })?;
        Ok((s, profile))
    }

    /// Checks every value; the error names `source` and the field path.
    pub fn check(&self, source: &str) -> Result<NicProfile, ScenarioError> {
        self.validate().map_err(|(field, msg)| ScenarioError(format!("{source}: {field}: {msg}")))
    }

    /// The scenario with every default filled in, as a RON file that loads back to it.
    pub fn to_ron(&self) -> String {
        let cfg = ron::ser::PrettyConfig::new().struct_names(true);
        ron::ser::to_string_pretty(self, cfg).expect("a scenario serialises")
    }

    /// The NIC profile fields `nic` overrides, as (dotted path, value).
    pub fn nic_overrides(&self) -> Vec<(String, serde_json::Value)> {
        self.nic.as_ref().map(NicOverrides::fields).unwrap_or_default()
    }

    /// Applies `path=value` edits (e.g. `protocol.name=occ`, `cluster.nodes=8`,
    /// `workload.name=ycsb`, `protocol.mode=Code(38)`); see `crate::set`.
    pub fn apply_sets(&self, sets: &[String]) -> Result<Scenario, ScenarioError> {
        crate::set::apply(self, sets).map_err(ScenarioError)
    }

    /// Checks values; on error returns the field path and the problem.
    fn validate(&self) -> Result<NicProfile, (String, String)> {
        let c = &self.cluster;
        if c.nodes < 2 {
            return Err((
                "cluster.nodes".into(),
                format!("must be at least 2 (the workload talks to remote nodes), got {}", c.nodes),
            ));
        }
        if c.nodes > 1024 {
            return Err(("cluster.nodes".into(), format!("at most 1024 nodes are supported, got {}", c.nodes)));
        }
        in_range("cluster.workers", c.workers.into())?;
        in_range("cluster.coroutines", c.coroutines.into())?;
        in_range("cluster.qps_per_node", c.qps_per_node.into())?;
        if let Some(m) = &c.link_delay_us {
            let n = c.nodes as usize;
            if m.len() != n || m.iter().any(|row| row.len() != n) {
                return Err(("cluster.link_delay_us".into(), format!("must be a {n} x {n} matrix (one row per node)")));
            }
            if let Some(i) = (0..n).find(|&i| m[i][i] != 0) {
                return Err(("cluster.link_delay_us".into(), format!("node {i} to itself must be 0, got {}", m[i][i])));
            }
            if let Some(d) = m.iter().flatten().find(|&&d| d > 1_000_000) {
                return Err(("cluster.link_delay_us".into(), format!("at most 1000000 us (1 s) per link, got {d}")));
            }
        }
        c.check_topology()?;
        if let Some(k) = &c.clocks {
            k.check(c.nodes)?;
        }
        let mut profile = NicProfile::load(&c.nic).map_err(|e| ("cluster.nic".into(), e.to_string()))?;
        txbed_sim::cpu::CpuProfile::load(&c.cpu).map_err(|e| ("cluster.cpu".to_string(), e))?;
        if let Some(o) = &self.nic {
            if c.nics_per_node.is_some() && o.fields().iter().any(|(f, _)| f == "nics_per_node") {
                return Err(("nic.nics_per_node".into(), "cluster.nics_per_node is set too: keep one of them".into()));
            }
            let field = |f: String| if f.is_empty() { "nic".to_string() } else { format!("nic.{f}") };
            profile = profile.with_overrides(o).map_err(|(f, m)| (field(f), m))?;
        }
        if let Some(k) = c.nics_per_node {
            in_range("cluster.nics_per_node", k.into())?;
            profile.nics_per_node = k;
        }
        match &self.workload {
            Workload::Verbs(v) => {
                if self.protocol.is_some() {
                    return Err(("protocol".into(), "a Verbs workload runs no transactions: remove protocol".into()));
                }
                // The verb loops build a cluster of their own, without long-haul links.
                if !c.datacenters.is_empty() {
                    return Err((
                        "cluster.datacenters".into(),
                        "Verbs workloads run in one data center; data centers need a transactional workload".into(),
                    ));
                }
                if c.link_delay_us.is_some() {
                    return Err((
                        "cluster.link_delay_us".into(),
                        "Verbs workloads do not model link delays; they need a transactional workload".into(),
                    ));
                }
                if c.clocks.is_some() {
                    return Err((
                        "cluster.clocks".into(),
                        "Verbs workloads do not model clocks; they need a transactional workload".into(),
                    ));
                }
                in_range("workload.outstanding", v.outstanding.into())?;
                match v.verb {
                    Verb::Atomic if v.payload != 8 => {
                        return Err((
                            "workload.payload".into(),
                            format!("atomics operate on 8 bytes, got {}", v.payload),
                        ))
                    }
                    Verb::Rpc if v.payload > rpc_max_payload(&profile) => {
                        return Err((
                            "workload.payload".into(),
                            format!(
                                "an RPC reply of {} B does not fit one UD datagram (max {} B)",
                                v.payload,
                                rpc_max_payload(&profile)
                            ),
                        ))
                    }
                    _ if v.payload == 0 || v.payload > 1 << 20 => {
                        return Err(("workload.payload".into(), format!("must be 1 B to 1 MiB, got {}", v.payload)))
                    }
                    _ => {}
                }
            }
            Workload::Txn(w) => w.validate().map_err(|(f, m)| (format!("workload.{f}"), m))?,
        }
        if !matches!(self.workload, Workload::Verbs(_)) {
            let Some(p) = &self.protocol else {
                return Err((
                    "protocol".into(),
                    "a transactional workload needs a protocol, e.g. protocol: (name: Occ)".into(),
                ));
            };
            if !(4..=1 << 20).contains(&p.log_ring_kib) {
                return Err((
                    "protocol.log_ring_kib".into(),
                    format!("must be 4..=1048576 (4 KiB to 1 GiB), got {}", p.log_ring_kib),
                ));
            }
            if !(1..=p.log_ring_kib).contains(&p.log_reclaim_kib) {
                return Err((
                    "protocol.log_reclaim_kib".into(),
                    format!("must be 1..=log_ring_kib ({}), got {}", p.log_ring_kib, p.log_reclaim_kib),
                ));
            }
            let proto = p.name.protocol();
            if let Some(preset) = p.preset {
                if p.preset().is_none() {
                    let names: Vec<&str> = proto.presets().iter().map(|p| p.name).collect();
                    let have = if names.is_empty() { "none".to_string() } else { names.join(", ") };
                    return Err((
                        "protocol.preset".into(),
                        format!("{} is not a preset of {} (its presets: {have})", preset.0, proto.name()),
                    ));
                }
            }
            proto.check_options(&p.options).map_err(|m| ("protocol.options".into(), m))?;
            let h = p.resolve(&profile).0;
            h.check(proto.name(), proto.stages()).map_err(|m| ("protocol.mode".into(), mode_hint(m, h, proto)))?;
            if p.replication == 0 || p.replication > c.nodes {
                return Err((
                    "protocol.replication".into(),
                    format!("must be 1..={} (replicas cannot exceed nodes), got {}", c.nodes, p.replication),
                ));
            }
            if proto.stores_replicas() {
                // Its replicas live in registered memory, one per node: they must fit the DCs.
                let dc_of = c.wan().map(|w| w.dc_of).unwrap_or_default();
                txbed_txn::placement::Placement::new(&dc_of, c.nodes)
                    .copy_load(p.replication)
                    .map_err(|m| ("protocol.replication".to_string(), m))?;
            }
            if proto.nic_atomics(h) && !atomics_safe(&profile) {
                return Err((
                    "protocol.mode".into(),
                    format!(
                        "one-sided {} is unsafe on {:?}: its {} NICs per node have HCA-level atomicity (CAS through different NICs is not atomic); set cluster.nics_per_node: 1 or run that stage by RPC",
                        if h.onesided(Stage::Vote) {
                            "VOTE (the servers' fetch-and-adds meet on one word)"
                        } else if h.onesided(Stage::Lock) {
                            "LOCK"
                        } else {
                            "READ (it CASes tuple words)"
                        },
                        profile.name, profile.nics_per_node
                    ),
                ));
            }
        }
        if self.run.measure_us == 0 {
            return Err(("run.measure_us".into(), "must be at least 1".into()));
        }
        // Each part alone first, so the error blames the field that is too large.
        in_range("run.warmup_us", self.run.warmup_us)?;
        in_range("run.measure_us", self.run.measure_us)?;
        in_range("run.failure_timeout_ms", self.run.failure_timeout_ms)?;
        in_range("run.clock_bound_us", self.run.clock_bound_us)?;
        self.run.retry.check().map_err(|e| ("run.retry".to_string(), e))?;
        if self.run.warmup_us + self.run.measure_us > fields::MAX_RUN_US {
            return Err((
                "run.measure_us".into(),
                format!(
                    "warm-up ({} us) plus measured time ({} us) must be at most {} us (10 s) of simulated time",
                    self.run.warmup_us,
                    self.run.measure_us,
                    fields::MAX_RUN_US
                ),
            ));
        }
        self.check_faults()?;
        memory::check_estimate(self, &profile)?;
        Ok(profile)
    }
}

/// Checks a whole-number field against its range in `fields::RANGES`.
pub(crate) fn in_range(path: &str, v: u64) -> Result<(), (String, String)> {
    let (lo, hi) = fields::range(path).expect("a field of fields::RANGES");
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err((path.to_string(), format!("must be {lo}..={hi}, got {v}")))
    }
}

/// A hybrid code with bits the protocol lacks: the error says what to set instead.
fn mode_hint(msg: String, h: Hybrid, proto: ProtocolRef) -> String {
    let keep = Hybrid(h.0 & Hybrid::full(proto.stages()).0);
    let e_g = if keep.0 != 0 {
        format!(", e.g. Code({}) (the bits of Code({}) {} has)", keep.0, h.0, proto.name())
    } else {
        String::new()
    };
    format!("{msg}. Set protocol.mode to Rpc, Onesided or a code of those stages' bits{e_g}")
}
