//! The cluster's membership as every worker sees it: which nodes are up, down (crashed and
//! declared dead by the failure detector) or joining (restarted and recovering), and the
//! epoch of that view. A backend delivers each new view to every worker at once (the
//! simulator's membership service, after DrTM Sec. 5.6's ZooKeeper: leases over a network
//! of its own); real backends never change it, since a failed rank ends their run.
//!
//! What the transport does with it: calls to a node that is down fail at once with
//! `RpcError::PeerDown`, and so do calls waiting for a reply from it, and the RPC state kept
//! for its callers is forgotten (a restarted node numbers its calls from 1 again). What the
//! layers above do with it is theirs (the transaction layer stops using a down node's
//! records and backups).

/// A node's state in a view.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodeStatus {
    /// Serving.
    Up,
    /// Crashed, and declared dead: nothing reaches it.
    Down,
    /// Restarted and rebuilding its state: it takes log records as a backup, but its
    /// records may not be used until it is up.
    Joining,
}

/// One view of the membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Grows with every change.
    pub epoch: u64,
    /// Per node.
    pub status: Vec<NodeStatus>,
}

impl View {
    /// Every one of `nodes` up, epoch 0: the view of a run without faults.
    pub fn all_up(nodes: u16) -> View {
        View { epoch: 0, status: vec![NodeStatus::Up; nodes as usize] }
    }

    /// `node`'s status (an unknown node is down).
    pub fn of(&self, node: u16) -> NodeStatus {
        self.status.get(node as usize).copied().unwrap_or(NodeStatus::Down)
    }

    pub fn is_up(&self, node: u16) -> bool {
        self.of(node) == NodeStatus::Up
    }

    pub fn is_down(&self, node: u16) -> bool {
        self.of(node) == NodeStatus::Down
    }
}
