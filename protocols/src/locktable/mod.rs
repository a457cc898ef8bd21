//! The distributed lock table: strict two-phase locking with multi-granularity lock modes
//! and two-phase commit over notified one-sided writes, at thousands of agents ("2PL and 2PC
//! on thousands of cores over RDMA"; `../shared/seeds/lock-table-2pl-2pc-design.md`).
//!
//! - Agents (Sec. 3.1, `agent.rs`): every coordinator coroutine is a transaction processing
//!   agent running one transaction at a time; its transaction's global id is its local number
//!   (upper 40 bits) and its agent number (lower 24).
//! - Lock-server agents (Sec. 3.2, `server.rs`): the first `servers_per_node` workers of every
//!   node run no transactions; each owns fixed, equal parts of the node's items (whole TPC-C
//!   warehouses, or equal row ranges) and their locks.
//! - Communication (Sec. 3.3, `comm.rs`): mailboxes written with WRITE_WITH_IMM whose
//!   notification names the sender, or, as the paper's alternative, two-sided messages (RPC).
//!   The hybrid code picks per stage: bit `lock` (requests, short releases and the
//!   end-of-transaction, which must not overtake each other) and `vote` (2PC's votes by remote
//!   fetch-and-add, or RPC replies); `log` sends the backups' log records when the run
//!   replicates (a txbed addition).
//! - The lock table (`table.rs`, Fig. 2) with the modes of `modes.rs` (Table 1), and deadlock
//!   handling NO_WAIT, WAIT_DIE or Bounded Wait; or timestamp ordering (`to.rs`, Sec. 3.2.2).
//! - Data (Sec. 3.2.3): after a grant, one-sided READ and WRITE at the address it carried.
//! - 2PC only when a remote item was modified; no presumed-abort or presumed-commit.
//! - Isolation: serializable (long read and write locks, intention locks on database, table
//!   and granule), repeatable read (as serializable here: the workloads have no predicate
//!   reads, so long row locks are all it takes), read committed (short read locks).

pub mod agent;
pub mod comm;
pub mod modes;
pub mod server;
pub mod table;
pub mod to;
pub mod wire;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use txbed_checker::Level;
use txbed_transport::{Ctx, HandlerFn};
use txbed_txn::attempt::Attempt;
use txbed_txn::node::NodeState;
use txbed_txn::protocol::{handler_id, BackgroundFn, Bug, LocalBoxFuture, OptionValues, Protocol};
use txbed_txn::stage::Stage;
use txbed_workloads::TxnSpec;

pub struct LockTable;

/// How conflicts are handled.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Concurrency {
    /// 2PL: a request that cannot be granted at once aborts the transaction.
    #[default]
    NoWait,
    /// 2PL: only a transaction older than the holders waits; a younger one dies.
    WaitDie,
    /// 2PL: requests wait, up to `bound_us` (the server's clock).
    BoundedWait,
    /// Timestamp ordering instead of locking.
    TimestampOrdering,
}

/// The isolation level the locking provides (and the run is checked at).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    #[default]
    Serializable,
    RepeatableRead,
    ReadCommitted,
}

/// The lock table's options (`protocol.options` in a scenario).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// Workers of each node that are lock-server agents; the others run transaction agents.
    pub servers_per_node: u16,
    pub concurrency: Concurrency,
    /// Bounded Wait's bound, us (the paper's example: 100 ms).
    pub bound_us: u64,
    pub isolation: Isolation,
    /// Intention locks on the database, the table and the granule before each row lock.
    pub intention_locks: bool,
    /// Lock a granule whole (S, or SIX with writes under it) when a transaction reads at
    /// least this many of its rows; 0: never.
    pub escalate_after: u32,
    /// How often an agent looks at its vote word while servers vote, ns.
    pub vote_poll_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            servers_per_node: 1,
            concurrency: Concurrency::NoWait,
            bound_us: 100_000,
            isolation: Isolation::Serializable,
            intention_locks: true,
            escalate_after: 0,
            vote_poll_ns: 200,
        }
    }
}

impl Options {
    fn check(&self) -> Result<(), String> {
        if self.servers_per_node == 0 || self.servers_per_node > txbed_transport::imm::MAX_WORKER {
            return Err(format!(
                "servers_per_node must be 1..={}, not {}",
                txbed_transport::imm::MAX_WORKER,
                self.servers_per_node
            ));
        }
        if self.bound_us == 0 || self.bound_us > 10_000_000 {
            return Err(format!("bound_us must be 1..=10000000 (10 s), not {}", self.bound_us));
        }
        if self.vote_poll_ns == 0 || self.vote_poll_ns > 1_000_000 {
            return Err(format!("vote_poll_ns must be 1..=1000000, not {}", self.vote_poll_ns));
        }
        if self.concurrency == Concurrency::TimestampOrdering {
            if self.isolation != Isolation::Serializable {
                return Err("timestamp_ordering provides serializable isolation only (isolation: serializable)".into());
            }
            if self.escalate_after > 0 {
                return Err("escalate_after is for locking; timestamp_ordering has no lock hierarchy".into());
            }
        }
        if self.escalate_after > 0 && !self.intention_locks {
            // A granule locked whole only excludes writers that announce themselves on it.
            return Err(
                "escalate_after needs intention_locks: true (a writer under a granule locked whole must take IX on it)"
                    .into(),
            );
        }
        if self.escalate_after > 0 && self.isolation == Isolation::ReadCommitted {
            return Err(
                "escalate_after needs long read locks (serializable or repeatable_read), not read_committed".into()
            );
        }
        Ok(())
    }
    fn level(&self) -> Level {
        match self.isolation {
            Isolation::Serializable => Level::Serializable,
            Isolation::RepeatableRead => Level::RepeatableRead,
            Isolation::ReadCommitted => Level::ReadCommitted,
        }
    }
}

/// What an agent keeps between its transactions.
#[derive(Default)]
pub struct AgentMemory {
    /// Its last local number.
    pub number: u64,
    /// Its last transaction's read and write set, and whether it ended in a conflict
    /// (WAIT_DIE keeps the number of a transaction that restarts).
    pub last_spec: u64,
    pub last_conflicted: bool,
    /// Per server (node, worker), the mailbox slot it writes next.
    pub slot: BTreeMap<(u16, u16), u32>,
}

/// The lock table's state on one node (every worker's: servers by worker, agents by number).
pub struct Node {
    pub options: Options,
    pub servers: RefCell<Vec<Option<server::Server>>>,
    pub agents: RefCell<BTreeMap<u32, AgentMemory>>,
}

impl Node {
    /// Whether lock requests travel by mailbox (else RPC): the servers then poll their
    /// notifications.
    fn mailbox(&self, n: &NodeState) -> bool {
        [Stage::Lock, Stage::Vote].iter().any(|s| n.hybrid.onesided(*s))
    }
}

impl Node {
    /// Whether some message travels by RPC.
    fn rpc_somewhere(&self, n: &NodeState) -> bool {
        [Stage::Lock, Stage::Vote].iter().any(|s| !n.hybrid.onesided(*s))
    }
}

pub(crate) fn part(n: &NodeState) -> &Node {
    n.participant()
}

/// How long an RPC request may wait at a server.
fn patience_ns(o: &Options) -> u64 {
    match o.concurrency {
        Concurrency::NoWait => 0,
        Concurrency::BoundedWait => o.bound_us * 1000 + 1_000_000,
        Concurrency::WaitDie | Concurrency::TimestampOrdering => 100_000_000,
    }
}

/// The server's request handler (the RPC form).
pub const H_LT: u16 = handler_id(0);
const HANDLER_NAMES: [&str; 1] = ["LT_MESSAGE"];

/// END goes by the channel LOCK uses (`Stage::End` is for its time only): a one-way END by
/// another channel could arrive after the agent's next request, which would then wait for
/// its own transaction's locks.
pub const STAGES: [Stage; 3] = [Stage::Lock, Stage::Log, Stage::Vote];

/// A compatibility matrix that grants S beside IX: a transaction reading a whole granule
/// under S misses writes of rows under it (needs `escalate_after`).
pub const LT_GRANTS_S_WITH_IX: Bug = Bug {
    name: "GrantsSWithIx",
    about: "the compatibility matrix grants S beside IX: a granule read whole misses writes under it",
};
/// Releases read locks right after reading under serializable (read committed's short locks
/// where long ones are needed): non-repeatable reads and write skew.
pub const LT_EARLY_READ_RELEASE: Bug = Bug {
    name: "EarlyReadRelease",
    about: "releases each read lock once the row is read, under serializable (short read locks): write skew",
};
/// Bounded Wait tells a request that timed out it was granted.
pub const LT_GRANTS_TIMED_OUT: Bug = Bug {
    name: "GrantsTimedOut",
    about: "Bounded Wait answers a request that timed out as granted: two holders of one exclusive lock",
};
/// Timestamp ordering grants a write while another is pending on the item: both read the
/// same version and install over it.
pub const LT_TWO_PENDING_WRITES: Bug = Bug {
    name: "TwoPendingWrites",
    about: "timestamp ordering grants a write beside a pending one: both install over the same version (lost update)",
};
const BUGS: [Bug; 4] = [LT_GRANTS_S_WITH_IX, LT_EARLY_READ_RELEASE, LT_GRANTS_TIMED_OUT, LT_TWO_PENDING_WRITES];

impl Protocol for LockTable {
    fn name(&self) -> &'static str {
        "LOCKTABLE"
    }
    fn description(&self) -> &'static str {
        "distributed lock table: strict 2PL (NL/IS/IX/S/SIX/X; NO_WAIT, WAIT_DIE, Bounded Wait) or TO, 2PC by FAA votes, notified one-sided mailboxes (2PL and 2PC at scale)"
    }
    fn stages(&self) -> &'static [Stage] {
        &STAGES
    }
    fn isolation_for(&self, options: &OptionValues) -> Level {
        txbed_txn::protocol::parse_options::<Options>(options).map_or(Level::Serializable, |o| o.level())
    }
    /// The votes are fetch-and-adds from several servers on one word: atomic only if they
    /// reach it through one NIC (or NICs with device-level atomicity).
    fn nic_atomics(&self, hybrid: txbed_txn::stage::Hybrid) -> bool {
        hybrid.onesided(Stage::Vote)
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
        let options = txbed_txn::protocol::parse_options::<Options>(options).unwrap_or_default();
        Box::new(Node { options, servers: RefCell::default(), agents: RefCell::default() })
    }
    fn area_bytes(&self, nodes: u16, workers: u16, coroutines: u32) -> u64 {
        comm::area_bytes(nodes, workers, coroutines)
    }
    fn rpc_patience_ns(&self, options: &OptionValues) -> u64 {
        txbed_txn::protocol::parse_options::<Options>(options).map_or(0, |o| patience_ns(&o))
    }
    fn handler_names(&self) -> &'static [&'static str] {
        &HANDLER_NAMES
    }
    fn handlers(&self, n: &Rc<NodeState>) -> Vec<Rc<HandlerFn>> {
        let n = n.clone();
        vec![Rc::new(move |h: &mut txbed_transport::HandlerCtx<'_>, req: &[u8]| server::handler(&n, h, req))]
    }
    fn server_workers(&self, options: &OptionValues) -> u16 {
        txbed_txn::protocol::parse_options::<Options>(options).map_or(0, |o| o.servers_per_node)
    }
    fn coordinator_done<'a>(&self, ctx: &'a Ctx, n: &'a NodeState) -> Option<LocalBoxFuture<'a, ()>> {
        Some(Box::pin(agent::done(ctx, n)))
    }
    fn background(&self) -> Option<BackgroundFn> {
        Some(|ctx, n, _end| Box::pin(background(ctx, n)))
    }
    fn attempt<'a>(&self, ctx: &'a Ctx, n: &'a NodeState, spec: &'a TxnSpec, id: u64) -> LocalBoxFuture<'a, Attempt> {
        Box::pin(agent::attempt(ctx, n, spec, id))
    }
    fn survives_crashes(&self) -> Result<(), &'static str> {
        Err("the lock table keeps its locks in the servers' memory, and the paper gives no recovery for them")
    }
    fn survives_lost_messages(&self, _hybrid: txbed_txn::stage::Hybrid) -> Result<(), &'static str> {
        Err("the lock table's mailboxes and end-of-transaction messages are not retried when lost")
    }
}

/// A server worker runs its server until every agent is done; an agent worker has nothing
/// in the background.
async fn background(ctx: Ctx, n: Rc<NodeState>) -> Result<(), txbed_txn::TxnError> {
    let o = &part(&n).options;
    let area = comm::Area::of(&n);
    let me = ctx.me().worker;
    if o.servers_per_node >= area.workers() {
        return Err(txbed_txn::wire::WireError::Invalid(
            "servers_per_node leaves no worker for transaction agents (it must be less than cluster.workers)",
        )
        .into());
    }
    let total = n.nodes as u64 * area.workers() as u64 * area.coroutines() as u64;
    if total * comm::SLOTS as u64 > txbed_transport::imm::MAX_TAG as u64 + 1 {
        return Err(
            txbed_txn::wire::WireError::Invalid("more agents than notifications can name (2^20 per cluster)").into()
        );
    }
    if me >= o.servers_per_node {
        return Ok(());
    }
    let agents = n.nodes as u32 * (area.workers() - o.servers_per_node) as u32 * area.coroutines();
    server::run(ctx, n, agents).await
}
