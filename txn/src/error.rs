//! Why a transaction operation failed: a verb, an RPC, local memory, a message that did not
//! decode, or a limit of the run's shape. A failed operation fails the attempt
//! (`Attempt::Failed`); conflicts are not errors.

use std::fmt;

use txbed_transport::{Completion, MemError, PostError, RpcError, WcStatus};

use crate::wire::WireError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnError {
    /// A CPU access to this node's registered memory.
    Mem(MemError),
    /// A work request refused before it reached the NIC.
    Post(PostError),
    /// A verb that completed with an error (`Ctx::wait`).
    Verb(Completion),
    Rpc(RpcError),
    /// No reply to a call after the wait for it (`what`: the call).
    NoReply(&'static str),
    Wire(WireError),
    NoQp {
        node: u16,
    },
    /// The key is not in its home node's store.
    NotFound {
        node: u16,
        table: u16,
        key: u64,
    },
    UnknownTable(u16),
    /// `bytes` of `what` (buffers, a log record) exceed the `limit` bytes of `within`.
    TooBig {
        what: &'static str,
        bytes: u64,
        limit: u64,
        within: &'static str,
    },
    /// A backup did not take a log record: committing without it would lose the write there.
    Log {
        backup: u16,
        error: RpcError,
    },
    /// A backup applied none of a worker's log entries for `ms`: the ring stays full.
    LogStalled {
        backup: u16,
        worker: u16,
        ms: u64,
    },
    /// The run's shape is beyond what the protocol supports.
    Unsupported(&'static str),
    /// Node `node` is not serving (down, or rejoining after a crash, in this worker's
    /// membership view).
    Unavailable {
        node: u16,
    },
    /// This part of a participant stopped on an error of its own (reported where it
    /// happened), so the attempt cannot finish.
    Stopped(&'static str),
}

impl fmt::Display for TxnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxnError::Mem(e) => e.fmt(f),
            TxnError::Post(e) => e.fmt(f),
            TxnError::Verb(c) => c.fmt(f),
            TxnError::Rpc(e) => e.fmt(f),
            TxnError::NoReply(what) => write!(f, "{what} reply lost"),
            TxnError::Wire(e) => e.fmt(f),
            TxnError::NoQp { node } => write!(f, "no QP to node {node}"),
            TxnError::NotFound { node, table, key } => write!(f, "key {key} of table {table} missing on node {node}"),
            TxnError::UnknownTable(t) => write!(f, "unknown table {t}"),
            TxnError::TooBig { what, bytes, limit, within } => {
                write!(f, "{bytes} B of {what} exceed the {limit} B {within}")
            }
            TxnError::Log { backup, error } => write!(f, "LOG to backup {backup}: {error}"),
            TxnError::LogStalled { backup, worker, ms } => {
                write!(f, "backup {backup} applied none of worker {worker}'s log entries for {ms} ms: its ring is full")
            }
            TxnError::Unsupported(what) => f.write_str(what),
            TxnError::Unavailable { node } => write!(f, "node {node} is not serving (down or rejoining)"),
            TxnError::Stopped(what) => write!(f, "{what} stopped on an error (reported as a failure too)"),
        }
    }
}

impl TxnError {
    /// The node this error says failed or is out of reach, if it is that kind of error: a
    /// verb that gave up or was flushed on a broken connection, a post on such a QP, an RPC
    /// that got no answer or whose peer the membership declared down. With faults in a run
    /// these abort the attempt (its locks are released, it is retried); without, they fail it.
    pub fn unreachable_node(&self) -> Option<u16> {
        match self {
            TxnError::Verb(c) if matches!(c.status, WcStatus::RetryExceeded | WcStatus::Flushed) => Some(c.peer.0),
            TxnError::Post(PostError::QpInError { peer, .. }) => Some(peer.0),
            TxnError::Rpc(e) | TxnError::Log { error: e, .. } => match e {
                RpcError::Timeout { dst, .. } | RpcError::PeerDown { dst, .. } => Some(dst.node.0),
                _ => None,
            },
            TxnError::Unavailable { node } => Some(*node),
            _ => None,
        }
    }
}

impl std::error::Error for TxnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TxnError::Mem(e) => Some(e),
            TxnError::Post(e) => Some(e),
            TxnError::Rpc(e) | TxnError::Log { error: e, .. } => Some(e),
            TxnError::Wire(e) => Some(e),
            _ => None,
        }
    }
}

impl From<MemError> for TxnError {
    fn from(e: MemError) -> Self {
        TxnError::Mem(e)
    }
}

impl From<PostError> for TxnError {
    fn from(e: PostError) -> Self {
        TxnError::Post(e)
    }
}

impl From<Completion> for TxnError {
    fn from(c: Completion) -> Self {
        TxnError::Verb(c)
    }
}

impl From<RpcError> for TxnError {
    fn from(e: RpcError) -> Self {
        TxnError::Rpc(e)
    }
}

impl From<WireError> for TxnError {
    fn from(e: WireError) -> Self {
        TxnError::Wire(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fails_with<E>(e: E) -> Result<(), TxnError>
    where
        TxnError: From<E>,
    {
        Err(e)?
    }

    #[test]
    fn transport_and_wire_errors_convert_and_say_what_failed() {
        let e = fails_with(MemError::Misaligned { addr: 3 }).unwrap_err();
        assert_eq!(e, TxnError::Mem(MemError::Misaligned { addr: 3 }));
        assert!(e.to_string().contains("not 8-byte aligned"));
        let e = fails_with(WireError::Short { need: 8, have: 2 }).unwrap_err();
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(fails_with(RpcError::Lost).unwrap_err(), TxnError::Rpc(RpcError::Lost));
        assert_eq!(fails_with(PostError::Empty).unwrap_err(), TxnError::Post(PostError::Empty));
        let e = TxnError::NotFound { node: 1, table: 2, key: 3 };
        assert_eq!(e.to_string(), "key 3 of table 2 missing on node 1");
    }
}
