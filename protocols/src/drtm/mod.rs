//! DrTM (`../shared/seeds/drtm-design.md`): each transaction's local part runs inside an HTM
//! region and its remote part by RDMA two-phase locking, glued by HTM's strong atomicity (a
//! one-sided access landing on a line a region tracks aborts it) and the per-record state
//! word (`state`): exclusive locks by CAS, shared locks as leases that need no release,
//! confirmed against the synchronized clock before XEND.
//!
//! - `start`: START (Fig. 9a) and START_RO (Fig. 10c): REMOTE_WRITE / REMOTE_READ by CAS +
//!   READ of each remote record, one-sided or through this module's RPC handler.
//! - `local_tx`: the HTM region: LOCAL_READ / LOCAL_WRITE (Fig. 10b), the transaction's
//!   logic, and COMMIT's lease confirmation before XEND.
//! - `fallback`: the fallback handler after the region's retry budget (Sec. 7.2): every
//!   record locked in a global order, leases confirmed, updates outside HTM.
//! - `txn`: an attempt: START, the region with its retries, XEND as the commit point,
//!   REMOTE_WRITE_BACK (`write_back`); read-only transactions without HTM (Sec. 5.4).
//!
//! HTM comes from the transport (`txbed_transport::htm`: a model fed by every access, or an
//! emulation that excludes them). Recovery (Sec. 5.6) is the shared layer's with DrTM's
//! irrevocable XEND (`ops::commit_allowed`); transaction chopping (Sec. 4) is the
//! coordinator's (`txbed_txn::chop`): each piece is an attempt here. Not built yet (issue
//! 20): the publish-subscribe deferral, real RTM (docs/protocols.md, "DrTM").

mod fallback;
mod local_tx;
mod log;
mod start;
pub mod state;
mod txn;
mod write_back;

use std::rc::Rc;

use serde::{Deserialize, Serialize};
use txbed_transport::{Ctx, HandlerFn};
use txbed_txn::attempt::Attempt;
use txbed_txn::node::NodeState;
use txbed_txn::protocol::{Bug, Level, LocalBoxFuture, Needs, OptionValues, Protocol};
use txbed_txn::stage::Stage;
use txbed_workloads::TxnSpec;

pub struct Drtm;

/// START and the fallback's locks (Lock), LOG when the run replicates, REMOTE_WRITE_BACK
/// (Commit).
pub const STAGES: [Stage; 3] = [Stage::Lock, Stage::Log, Stage::Commit];

/// DrTM's knobs (`protocol.options`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// Read lease of read-write transactions, us (Sec. 5.3: 0.4 ms on the paper's cluster).
    pub lease_us: f64,
    /// Read lease of read-only transactions, us (Sec. 5.3: 1.0 ms).
    pub ro_lease_us: f64,
    /// DELTA, the clock disagreement leases tolerate, ns; `None`: each reading's own error
    /// bound from the clock service (Sec. 7.1). Set it below the clocks' real skew only to
    /// show what goes wrong.
    pub delta_ns: Option<u64>,
    /// Regions retried after a conflict or system abort before the fallback handler (a
    /// capacity abort goes to the fallback at once: RTM clears its retry bit).
    pub htm_retries: u32,
    /// The fallback handler waits at most this long for a lock held by another, us, then
    /// aborts the attempt.
    pub fallback_wait_us: u64,
    /// Cooperative logging to NVRAM (Sec. 5.6): the lock-ahead log before START, the
    /// write-ahead log inside the region before XEND (`false`: neither, to measure its cost).
    pub logging: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            lease_us: 400.0,
            ro_lease_us: 1000.0,
            delta_ns: None,
            htm_retries: 8,
            fallback_wait_us: 10_000,
            logging: true,
        }
    }
}

impl Options {
    fn check(&self) -> Result<(), String> {
        for (f, v) in [("lease_us", self.lease_us), ("ro_lease_us", self.ro_lease_us)] {
            if !v.is_finite() || !(0.001..=1_000_000.0).contains(&v) {
                return Err(format!("{f} must be 0.001..=1000000 us, got {v}"));
            }
        }
        if self.delta_ns.is_some_and(|d| d > 1_000_000_000) {
            return Err(format!("delta_ns must be at most 1 s, got {:?}", self.delta_ns));
        }
        if self.htm_retries > 1000 {
            return Err(format!("htm_retries must be at most 1000, got {}", self.htm_retries));
        }
        if !(1..=10_000_000).contains(&self.fallback_wait_us) {
            return Err(format!("fallback_wait_us must be 1..=10000000, got {}", self.fallback_wait_us));
        }
        Ok(())
    }
    pub(crate) fn lease_ns(&self, read_only: bool) -> u64 {
        ((if read_only { self.ro_lease_us } else { self.lease_us }) * 1000.0) as u64
    }
}

/// LOCAL_WRITE without its lease check (Fig. 10b lines 4-9 dropped): a local write lands
/// under a remote reader's unexpired lease, which then commits having read the old value.
pub const LOCAL_WRITE_IGNORES_LEASE: Bug = Bug {
    name: "LocalWriteIgnoresLease",
    about:
        "a local write ignores an unexpired read lease: a remote reader commits on a value overwritten under its lease",
};

/// COMMIT without `VALID(end_time)` before XEND (Fig. 9a lines 1-3 dropped): a lease that
/// expired during the transaction no longer protects what it read.
pub const COMMIT_WITHOUT_LEASE_CONFIRMATION: Bug = Bug {
    name: "CommitWithoutLeaseConfirmation",
    about: "commits without confirming its leases: a read whose lease expired (and was overwritten) is committed",
};

/// REMOTE_READ that finds an expired lease and "shares" it with its own end time instead of
/// CASing a new lease in (Fig. 10a lines 9-11 skipped): the state word still says expired,
/// so writers lock the record while the reader believes it holds a lease.
pub const SHARES_EXPIRED_LEASE: Bug = Bug {
    name: "SharesExpiredLease",
    about: "a remote read shares an expired lease without renewing it: writers see it expired and overwrite what the reader relies on",
};

pub const BUGS: [Bug; 3] = [LOCAL_WRITE_IGNORES_LEASE, COMMIT_WITHOUT_LEASE_CONFIRMATION, SHARES_EXPIRED_LEASE];

/// The RPC handler of START in RPC form (`start::H_CAS_READ`).
const HANDLER_NAMES: [&str; 1] = ["DRTM_CAS_READ"];

/// The protocol's per-node state: its options.
pub(crate) struct Node {
    pub options: Options,
}

pub(crate) fn options(n: &NodeState) -> &Options {
    &n.participant::<Node>().options
}

impl Protocol for Drtm {
    fn name(&self) -> &'static str {
        "DrTM"
    }
    fn description(&self) -> &'static str {
        "HTM for local records glued to RDMA 2PL with lease-based shared locks (DrTM, TOCS 2017)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    /// Sec. 5.5 argues strict serializability (equivalence with S2PL).
    fn isolation(&self) -> Level {
        Level::StrictSerializable
    }
    fn needs(&self) -> Needs {
        Needs { synchronized_clocks: true, htm: true, ..Needs::NOTHING }
    }
    fn bugs(&self) -> &'static [Bug] {
        &BUGS
    }
    fn check_options(&self, given: &OptionValues) -> Result<(), String> {
        txbed_txn::protocol::parse_options::<Options>(given)?.check()
    }
    fn default_options(&self) -> OptionValues {
        serde_json::to_value(Options::default()).expect("plain data")
    }
    fn participant(&self, options: &OptionValues) -> Box<dyn std::any::Any> {
        Box::new(Node { options: txbed_txn::protocol::parse_options::<Options>(options).unwrap_or_default() })
    }
    fn handler_names(&self) -> &'static [&'static str] {
        &HANDLER_NAMES
    }
    /// A log slot per coroutine (`log`).
    fn area_bytes(&self, _nodes: u16, workers: u16, coroutines: u32) -> u64 {
        log::area_bytes(workers, coroutines)
    }
    fn handlers(&self, n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
        vec![start::cas_read_handler(n)]
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(txn::attempt(ctx, n, spec, id))
    }
    /// The owner machine of a write lock (bits 1..=8 of the state word).
    fn lock_owner_node(&self, word: u64, _workers: u16) -> Option<u16> {
        state::owner(word).map(u16::from)
    }
    fn survives_lost_messages(&self, _hybrid: txbed_txn::stage::Hybrid) -> Result<(), &'static str> {
        Err("DrTM's locks and leases are not yet released when a peer's messages are lost")
    }
}
