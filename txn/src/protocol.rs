//! The protocol interface: everything a concurrency-control protocol is, in one trait.
//!
//! A protocol is a value implementing [`Protocol`] (usually a unit struct in a `static`). The
//! runner asks it for its stages, tuple extension, memory area, handlers, background coroutine
//! and transaction attempt; the scenario schema, `txbed protocols`, sweeps, `hybrid-search`,
//! presets and the tests that iterate over protocols read the same answers. Nothing outside
//! the protocol's own module names it, but the one line that lists it in a registry
//! (`txbed_protocols::REGISTRY`) or, for a protocol kept outside the workspace's registry, the
//! `TxnRunSpec` that runs it.
//!
//! Call contract (what the runner guarantees):
//! - `options` is called on the scenario's `protocol.options` before anything is built; a
//!   run only starts if it returns `Ok`, and `participant` later gets the same value.
//! - On every node, `participant` is called once, then `handlers` once; the handlers are
//!   registered on every worker of the node under ids `handler_id(0)`, `handler_id(1)`, ... in
//!   the order returned, after the common handlers of [`crate::node`].
//! - `attempt` runs on a coordinator coroutine, any number of times, one at a time per
//!   coroutine; `background` (when there is one) runs once per worker beside them and must
//!   return once the clock passes `end` and its work is drained.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use txbed_transport::{Ctx, HandlerFn};
use txbed_workloads::TxnSpec;

use crate::attempt::Attempt;
use crate::node::NodeState;
pub use crate::node::{Bug, Rdma, DEFAULT_LOG_RECLAIM_BYTES, DEFAULT_LOG_RING_BYTES, FIRST_PROTOCOL_HANDLER};
use crate::stage::{Hybrid, Stage};

/// A boxed, non-`Send` future (coroutines run on one thread).
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A registered protocol.
pub type ProtocolRef = &'static dyn Protocol;

/// A worker's background coroutine: `(ctx, node, end)`. An error ends it and is reported
/// as the run's failure (never a panic: it may come from a peer's message).
pub type BackgroundFn = fn(Ctx, Rc<NodeState>, u64) -> LocalBoxFuture<'static, Result<(), crate::TxnError>>;

/// The isolation level a protocol provides (Adya's levels); a run is checked at it unless its
/// scenario declares another (`isolation`).
pub use txbed_checker::Level;

/// What a protocol needs from the run beyond a cluster of nodes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Clocks synchronized within a known error bound (leases, timestamp ordering).
    pub synchronized_clocks: bool,
    /// Nodes grouped into data centers with long-haul links between them.
    pub data_centers: bool,
    /// Hardware transactional memory (`Ctx::htm_region`), modelled from the scenario's CPU
    /// profile (`cluster.cpu`) or emulated.
    pub htm: bool,
}

impl Needs {
    pub const NOTHING: Needs = Needs { synchronized_clocks: false, data_centers: false, htm: false };

    /// The needs in words, `-` when there are none.
    pub fn describe(self) -> String {
        let mut v = Vec::new();
        if self.synchronized_clocks {
            v.push("synchronized clocks");
        }
        if self.data_centers {
            v.push("data centers");
        }
        if self.htm {
            v.push("HTM");
        }
        if v.is_empty() {
            "-".into()
        } else {
            v.join(", ")
        }
    }
}

/// A protocol's own options, as given in the scenario (`protocol.options`): plain data
/// (numbers, booleans, strings, lists, structures); `Null` when the scenario gives none.
pub type OptionValues = serde_json::Value;

/// A prior system emulated by a protocol's stages and options (DrTM+H Sec. 6.3).
#[derive(Copy, Clone)]
pub struct Preset {
    /// The name scenarios use (`Drtmh`); matched ignoring case and punctuation.
    pub name: &'static str,
    pub about: &'static str,
    /// The hybrid code, RDMA options and protocol options; `atomics_safe`: one-sided CAS is
    /// atomic with every other access to the word on this NIC setup.
    pub resolve: fn(atomics_safe: bool) -> (Hybrid, Rdma, OptionValues),
}

/// A concurrency-control protocol (see the module documentation for the call contract).
pub trait Protocol: Sync {
    /// The name scenarios and reports use (`OCC`); matched ignoring case and punctuation.
    fn name(&self) -> &'static str;

    /// One line: what it is and where it comes from.
    fn description(&self) -> &'static str;

    /// The stages it has: the bits its hybrid code may set.
    fn stages(&self) -> &'static [Stage];

    /// The isolation level it provides: what its runs are checked at by default. Claim only
    /// what the design guarantees and its runs pass (strict serializability needs real-time
    /// order: a transaction that ended before another began precedes it).
    fn isolation(&self) -> Level {
        Level::Serializable
    }

    /// The isolation level it provides with these options (a protocol whose options choose
    /// its locking discipline, as the lock table's `isolation`); the default: `isolation()`.
    fn isolation_for(&self, _options: &OptionValues) -> Level {
        self.isolation()
    }

    /// What it needs from the run.
    fn needs(&self) -> Needs {
        Needs::NOTHING
    }

    /// Bytes of metadata after a record of `record_bytes` (8-byte aligned) in a tuple.
    fn ext_bytes(&self, _record_bytes: u64) -> u64 {
        0
    }

    /// Bytes of registered memory it keeps on every node for itself, after the log rings
    /// (64-byte aligned, at `Layout::area_at`), in a cluster of `nodes` x `workers` x
    /// `coroutines`.
    fn area_bytes(&self, _nodes: u16, _workers: u16, _coroutines: u32) -> u64 {
        0
    }

    /// The longest one of its RPC handlers defers a reply on purpose (`Ctx::rpc_patient`),
    /// ns, with these options: the run's RPC layer waits that much longer before giving a
    /// call up, so no timeout is shorter than the protocol's own waiting. 0: none defers.
    fn rpc_patience_ns(&self, _options: &OptionValues) -> u64 {
        0
    }

    /// Whether code `hybrid` makes it CAS tuple words with NIC atomics (unsafe across
    /// several NICs with HCA-level atomicity).
    fn nic_atomics(&self, hybrid: Hybrid) -> bool {
        hybrid.onesided(Stage::Lock)
    }

    /// Its planted bugs.
    fn bugs(&self) -> &'static [Bug] {
        &[]
    }

    /// The prior systems it can emulate.
    fn presets(&self) -> &'static [Preset] {
        &[]
    }

    /// Checks its options; the error names the field and the problem. Without options of its
    /// own, only `Null` (none given) is accepted.
    fn check_options(&self, given: &OptionValues) -> Result<(), String> {
        if given.is_null() {
            Ok(())
        } else {
            Err(format!("{} has no options of its own", self.name()))
        }
    }

    /// Its options with every default filled in (`Null` when it has none), for
    /// `txbed protocols`.
    fn default_options(&self) -> OptionValues {
        OptionValues::Null
    }

    /// Its per-node state, built from its (checked) options; protocols reach it with
    /// [`NodeState::participant`].
    fn participant(&self, _options: &OptionValues) -> Box<dyn Any> {
        Box::new(())
    }

    /// Names of its RPC handlers, in registration order (ids: [`handler_id`]), for traces.
    fn handler_names(&self) -> &'static [&'static str] {
        &[]
    }

    /// Its RPC handlers on node `n`, in the order of `handler_names`.
    fn handlers(&self, _n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
        Vec::new()
    }

    /// How many of each node's workers, the first ones, run no coordinators (transactions)
    /// with these options: a protocol whose servers are whole workers (the lock table's
    /// lock-server agents). Their coordinator coroutines end at once, and reports leave them
    /// out of the idle-worker warning.
    fn server_workers(&self, _options: &OptionValues) -> u16 {
        0
    }

    /// Runs on a coordinator after its last transaction: a protocol whose servers must know
    /// when every coordinator is done (the lock table's servers, which serve until then)
    /// tells them here.
    fn coordinator_done<'a>(&self, _ctx: &'a Ctx, _n: &'a NodeState) -> Option<LocalBoxFuture<'a, ()>> {
        None
    }

    /// Its per-worker background coroutine, if it has one.
    fn background(&self) -> Option<BackgroundFn> {
        None
    }

    /// How many copies of `background` each worker runs with these options (each its own
    /// coroutine, with its own scratch buffer: a protocol whose servers post verbs for many
    /// requests at once, as RedT's executors).
    fn background_coroutines(&self, _options: &OptionValues) -> u32 {
        1
    }

    /// Whether every replica of a partition lives in registered memory, reachable by
    /// one-sided verbs (`store::Layout::copies`, placed by `placement::Placement`): RedT's
    /// executors lock and write each replica of their data center directly. Otherwise
    /// backups keep what the shared log ships them.
    fn stores_replicas(&self) -> bool {
        false
    }

    /// Runs one attempt of `spec` as transaction `id` (nonzero, unique).
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt>;

    /// Whether it runs chopped transactions (`Workload::chop`, `txbed_txn::chop`): their later
    /// pieces are retried until they commit, past the run's end if need be. `Err` says why
    /// not, and such a run is refused.
    fn runs_chopped(&self) -> Result<(), &'static str> {
        Ok(())
    }

    /// Faults: whether it survives a node crash (docs/faults.md); `Err` says why not, and a
    /// run that crashes a node ends there with that verdict.
    fn survives_crashes(&self) -> Result<(), &'static str> {
        Ok(())
    }

    /// Faults: whether it survives connections that break and messages that are lost for a
    /// while (partitions, link faults that drop) in mode `hybrid`; `Err` says why not, and
    /// the run ends at such a fault with that verdict.
    /// For a protocol that keeps its own replicas (`stores_replicas`) and survives crashes:
    /// the membership declared `dead` down; release, on the live nodes' copies, what its
    /// transactions held that no live node knows of (they cannot have committed). Returns the
    /// locks released. Modelled as the membership service's step, as the generic rebuild is.
    fn node_down(&self, _dead: u16, _live: &[(&NodeState, &dyn txbed_transport::HostMemory)]) -> u64 {
        0
    }

    /// The tuple a restarted node's copy of a record takes, from the live replicas' tuples
    /// (`stores_replicas`); `None`: keep its own.
    fn restore_copy(&self, _ext_at: usize, _candidates: &[Vec<u8>]) -> Option<Vec<u8>> {
        None
    }

    /// What up `node`'s copy of a record takes from the live replicas' tuples after its
    /// restoration (`stores_replicas`): the newest write it missed, its own latch and locks
    /// kept; `None`: it misses nothing.
    fn catch_up_copy(
        &self,
        _node: &NodeState,
        _ext_at: usize,
        _own: &[u8],
        _candidates: &[Vec<u8>],
    ) -> Option<Vec<u8>> {
        None
    }

    /// A restarted node (`stores_replicas`) was restored: it learns from live `peer` the
    /// protocol state a joining node is given (e.g. which coordinators are done).
    fn joined(&self, _node: &NodeState, _peer: &NodeState) {}

    /// Whether a transaction a failed coordinator left past its commit point committed, and
    /// when it was resolved (ns), as the protocol's recovery decided it on the live nodes.
    fn verdict(&self, _live: &[&NodeState], _tid: u64) -> Option<(bool, u64)> {
        None
    }

    /// Whether node `n` still resolves transactions of failed coordinators, or holds some
    /// whose coordinator is not up (`up`) unresolved; a restarted node's copies are restored
    /// only after.
    fn resolving(&self, _n: &NodeState, _up: &dyn Fn(u16) -> bool) -> bool {
        false
    }

    fn survives_lost_messages(&self, _hybrid: Hybrid) -> Result<(), &'static str> {
        Ok(())
    }

    /// Faults: the node whose transaction holds a tuple's lock word `word` (nonzero), so the
    /// recovery of a crashed node can release the locks its transactions held. The default
    /// reads a transaction id (`attempt::txn_node`); a protocol that locks with its own
    /// timestamps says how they name their node.
    fn lock_owner_node(&self, word: u64, _workers: u16) -> Option<u16> {
        crate::attempt::txn_node(word)
    }

    /// Faults: sets its metadata in `tuple` (laid out as `place` says) after a recovery wrote
    /// the record's latest committed version there: what it kept only in memory that is gone
    /// (old versions, timestamps, leases) must be made safe. `floor` bounds every timestamp
    /// issued before the recovery.
    fn recover_tuple(&self, _place: &crate::store::TablePlace, _tuple: &mut [u8], _floor: &RecoveryFloor) {}
}

/// What a recovery knows about timestamps issued before it (`Protocol::recover_tuple`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RecoveryFloor {
    /// Time of the recovery, ns.
    pub now_ns: u64,
    /// Recoveries so far in the run, this one included (1, 2, ...).
    pub recoveries: u64,
}

impl RecoveryFloor {
    /// A clock reading (ns) beyond any clock-based timestamp issued before: the recovery's
    /// time plus the longest a run may be (10 s) and its straggling (10 s more).
    pub fn clock_ns(&self) -> u64 {
        self.now_ns + 20_000_000_000
    }

    /// A logical timestamp beyond any issued before, for protocols whose timestamps only
    /// grow by small steps from the ones they read: each recovery moves 2^40 further.
    pub fn logical(&self) -> u64 {
        (self.recoveries + 1) << 40
    }
}

impl fmt::Debug for dyn Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq for dyn Protocol {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

/// The id of a protocol's `i`-th handler (`Protocol::handler_names` order).
pub const fn handler_id(i: usize) -> u16 {
    FIRST_PROTOCOL_HANDLER + i as u16
}

/// A name as scenarios may spell it: lower case, letters and digits only (`DrTM+H` and
/// `drtmh`, `WAIT-DIE` and `waitdie` are the same).
/// The store layout a run of `protocol` uses (the runner's, and memory estimates'): tuples
/// with its metadata, the copies of other partitions it keeps (`copies`, as
/// `Layout::try_with_copies` takes them; empty unless it `stores_replicas`), log rings for
/// every sender, its own area. None if a size overflows.
pub fn run_layout(
    tables: &[crate::store::TableSpec],
    protocol: ProtocolRef,
    nodes: u16,
    workers: u16,
    coroutines: u32,
    log_ring_bytes: u64,
    copies: &[u64],
) -> Option<crate::store::Layout> {
    let ext = |r| protocol.ext_bytes(r);
    crate::store::Layout::try_with_ext(tables, crate::store::LOAD_FACTOR, &ext)?
        .try_with_copies(copies, &ext)?
        .try_with_log(nodes, workers, log_ring_bytes)?
        .try_with_area(protocol.area_bytes(nodes, workers, coroutines))
}

pub fn fold_name(name: &str) -> String {
    name.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect()
}

/// Parses a protocol's options of type `T` (a serde structure with defaults and
/// `deny_unknown_fields`); `Null` gives the defaults.
pub fn parse_options<T: serde::de::DeserializeOwned + Default>(given: &OptionValues) -> Result<T, String> {
    if given.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(given.clone()).map_err(|e| e.to_string())
}

/// A protocol's handlers given as `(id, handler)` pairs, in id order as `Protocol::handlers`
/// returns them; the ids must be exactly `handler_id(0)`, `handler_id(1)`, ...
pub fn in_id_order(mut handlers: Vec<(u16, Rc<HandlerFn>)>) -> Vec<Rc<HandlerFn>> {
    handlers.sort_by_key(|(id, _)| *id);
    handlers
        .into_iter()
        .enumerate()
        .map(|(i, (id, h))| {
            assert_eq!(id, handler_id(i), "handler {i} has id {id}, not handler_id({i})");
            h
        })
        .collect()
}
