//! The verbs vocabulary: memory regions, queue pairs, work requests and completions.
//!
//! These types mirror libibverbs closely enough that the verbs backend maps them one to one
//! (`ibv_send_wr`, `ibv_wc`), while staying plain data so the simulator and the sockets backend
//! can carry them too.

use std::fmt;

/// Time in integer nanoseconds. Simulated time in the simulator, monotonic wall time elsewhere.
pub type Nanos = u64;

/// A node (machine) of the cluster.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u16);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// A worker thread of a node; RPC endpoints and QPs belong to one worker.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    pub node: NodeId,
    pub worker: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} worker {}", self.node.0, self.worker)
    }
}

/// A queue pair owned by one worker: an index into that worker's QP table.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QpId(pub u32);

/// Queue-pair transport type (DrTM+H Table 1): RC supports every verb, UD only SEND/RECV.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum QpType {
    Rc,
    Ud,
}

/// A memory region registered for (remote) access: its virtual address range and keys.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    pub addr: u64,
    pub len: u64,
    /// Key a remote peer must present for one-sided access.
    pub rkey: u32,
    /// Key the owner presents for local buffers of work requests.
    pub lkey: u32,
}

impl MemoryRegion {
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr && len <= self.len && addr - self.addr <= self.len - len
    }
}

/// A slice of local registered memory used as the source or sink of a work request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LocalBuf {
    pub lkey: u32,
    pub addr: u64,
    pub len: u32,
}

/// A slice of a remote node's registered memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RemoteBuf {
    pub rkey: u32,
    pub addr: u64,
    pub len: u32,
}

/// Where the bytes of a WRITE or SEND come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Copied into the work request at post time (`IBV_SEND_INLINE`); must fit the NIC's
    /// inline limit.
    Inline(Vec<u8>),
    /// DMA-read by the NIC from local registered memory when it processes the request.
    Local(LocalBuf),
}

impl Payload {
    pub fn len(&self) -> u32 {
        match self {
            Payload::Inline(b) => b.len() as u32,
            Payload::Local(l) => l.len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One verb. Atomics operate on 8 aligned bytes and return the old value into `local`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Read {
        local: LocalBuf,
        remote: RemoteBuf,
    },
    Write {
        src: Payload,
        remote: RemoteBuf,
    },
    WriteImm {
        src: Payload,
        remote: RemoteBuf,
        imm: u32,
    },
    Cas {
        local: LocalBuf,
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
    },
    Faa {
        local: LocalBuf,
        remote: RemoteBuf,
        add: u64,
    },
    /// SEND on an RC QP goes to its peer; on a UD QP to `dest`.
    Send {
        src: Payload,
        dest: Option<Endpoint>,
    },
}

/// The kind of a verb, for statistics, cost tables and completions.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Opcode {
    Read,
    Write,
    WriteImm,
    Cas,
    Faa,
    Send,
    Recv,
}

impl Opcode {
    pub const ALL: [Opcode; 7] =
        [Opcode::Read, Opcode::Write, Opcode::WriteImm, Opcode::Cas, Opcode::Faa, Opcode::Send, Opcode::Recv];
    pub fn name(self) -> &'static str {
        match self {
            Opcode::Read => "READ",
            Opcode::Write => "WRITE",
            Opcode::WriteImm => "WRITE_WITH_IMM",
            Opcode::Cas => "CAS",
            Opcode::Faa => "FAA",
            Opcode::Send => "SEND",
            Opcode::Recv => "RECV",
        }
    }
    pub fn is_atomic(self) -> bool {
        matches!(self, Opcode::Cas | Opcode::Faa)
    }
}

impl Op {
    pub fn opcode(&self) -> Opcode {
        match self {
            Op::Read { .. } => Opcode::Read,
            Op::Write { .. } => Opcode::Write,
            Op::WriteImm { .. } => Opcode::WriteImm,
            Op::Cas { .. } => Opcode::Cas,
            Op::Faa { .. } => Opcode::Faa,
            Op::Send { .. } => Opcode::Send,
        }
    }
    /// Bytes moved from requester to responder or back (payload, not headers).
    pub fn payload_len(&self) -> u32 {
        match self {
            Op::Read { remote, .. } => remote.len,
            Op::Write { src, .. } | Op::WriteImm { src, .. } | Op::Send { src, .. } => src.len(),
            Op::Cas { .. } | Op::Faa { .. } => 8,
        }
    }
}

/// A work request as posted: the verb, whether it generates a completion, and its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkRequest {
    pub wr_id: u64,
    pub op: Op,
    /// Unsignaled requests complete silently on success; a later signaled completion on the
    /// same QP confirms them (passive ACK). Errors are always reported.
    pub signaled: bool,
}

/// Work-completion status, after `ibv_wc_status`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WcStatus {
    Success,
    /// Bad rkey, out-of-bounds or misaligned remote access (`IBV_WC_REM_ACCESS_ERR`).
    RemoteAccessError,
    /// The peer never acknowledged after all retries: dead or unreachable
    /// (`IBV_WC_RETRY_EXC_ERR`). The RC QP is now in the error state.
    RetryExceeded,
    /// Flushed because the QP entered the error state before this request ran
    /// (`IBV_WC_WR_FLUSH_ERR`).
    Flushed,
    /// Local buffer outside its registered region or bad lkey (`IBV_WC_LOC_PROT_ERR`).
    LocalProtectionError,
    /// Payload too large for the QP (UD message over the MTU, inline over the limit)
    /// (`IBV_WC_LOC_LEN_ERR`).
    LocalLengthError,
    /// Verb not supported by this QP type, e.g. READ on UD (`IBV_WC_LOC_QP_OP_ERR`).
    LocalQpOperationError,
}

impl WcStatus {
    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }
    /// Whether this status moves an RC QP into the error state.
    pub fn fails_qp(self) -> bool {
        !matches!(self, WcStatus::Success)
    }
    pub fn explain(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::RemoteAccessError => {
                "remote access error: wrong rkey, or the address range is outside the peer's registered region"
            }
            WcStatus::RetryExceeded => {
                "transport retry counter exceeded: the peer did not answer (dead process, unplugged link or wrong GID/port)"
            }
            WcStatus::Flushed => "flushed: the QP entered the error state because of an earlier failed request",
            WcStatus::LocalProtectionError => {
                "local protection error: the local buffer is not inside a region registered with that lkey"
            }
            WcStatus::LocalLengthError => "local length error: payload larger than the MTU or the inline limit",
            WcStatus::LocalQpOperationError => "operation not supported by this QP type (UD only supports SEND)",
        }
    }
}

/// A polled completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub qp: QpId,
    pub opcode: Opcode,
    pub status: WcStatus,
    /// Whether the request was signaled. Unsignaled requests only complete on error.
    pub signaled: bool,
    /// The peer the request went to, for error messages.
    pub peer: NodeId,
}

impl fmt::Display for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on QP {} to {} failed: {}", self.opcode.name(), self.qp.0, self.peer, self.status.explain())
    }
}

/// Why a post was refused before reaching the NIC (`ibv_post_send` returning an errno).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PostError {
    /// More requests than the QP's send queue holds (`ENOMEM`). Unsignaled requests occupy
    /// slots until a later signaled completion on the QP confirms them.
    SendQueueFull { qp: QpId, outstanding: u32, max: u32 },
    /// The QP is in the error state after a failed request; it must be re-created.
    QpInError { qp: QpId, peer: NodeId },
    /// No such QP on this worker.
    NoSuchQp(QpId),
    /// An empty list was posted.
    Empty,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostError::SendQueueFull { qp, outstanding, max } => write!(
                f,
                "send queue of QP {} is full ({outstanding} outstanding, max {max}); post a signaled request and wait to reap unsignaled ones",
                qp.0
            ),
            PostError::QpInError { qp, peer } => {
                write!(f, "QP {} to {peer} is in the error state after an earlier failure", qp.0)
            }
            PostError::NoSuchQp(qp) => write!(f, "no QP {} on this worker", qp.0),
            PostError::Empty => write!(f, "empty work-request list"),
        }
    }
}

impl std::error::Error for PostError {}

/// Static facts about a worker's QP, set up by the backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QpInfo {
    pub id: QpId,
    pub kind: QpType,
    /// The connected peer for RC; the owner itself for UD.
    pub peer: NodeId,
    /// Send-queue depth: maximum requests posted and not yet confirmed.
    pub max_outstanding: u32,
}

/// One doorbell: a list of work requests posted on one QP in one call, at a local time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doorbell {
    pub qp: QpId,
    pub wrs: Vec<WorkRequest>,
    /// Worker-local time of the post (after the CPU cost of preparing it).
    pub at: Nanos,
}

/// Immediates that say who on the target node takes a WRITE_WITH_IMM's notification.
///
/// A plain immediate (bit 31 clear) notifies the target worker its QP is paired with. A routed
/// one names the worker (bits 29..22), and either a 22-bit tag for that worker's queue
/// (`Ctx::poll_imm`, `Ctx::wait_imm`: the lock table's mailboxes name the sending agent so the
/// server need not scan slots) or, with bit 30, one of its coroutines, which alone receives it
/// (`Ctx::wait_own_imm`). The receiving node routes it: in the simulator and on sockets its
/// NIC delivers to that worker; on verbs, where a receive completion lands on the CQ of the QP
/// it arrived on, that worker hands it over (docs/verbs.md).
pub mod imm {
    /// A routed immediate.
    pub const ROUTED: u32 = 1 << 31;
    /// Routed to one coroutine rather than the worker's queue.
    pub const TO_COROUTINE: u32 = 1 << 30;
    /// The largest worker a routed immediate names.
    pub const MAX_WORKER: u16 = 0xff;
    /// The largest tag or coroutine a routed immediate carries.
    pub const MAX_TAG: u32 = (1 << 22) - 1;

    /// An immediate for `worker`'s queue carrying `tag`.
    pub fn to_worker(worker: u16, tag: u32) -> u32 {
        debug_assert!(worker <= MAX_WORKER && tag <= MAX_TAG, "routed immediate out of range");
        ROUTED | ((worker as u32 & 0xff) << 22) | (tag & MAX_TAG)
    }
    /// An immediate for coroutine `coro` of `worker`.
    pub fn to_coroutine(worker: u16, coro: u32) -> u32 {
        to_worker(worker, coro) | TO_COROUTINE
    }
    /// The worker a routed immediate names.
    pub fn worker(imm: u32) -> Option<u16> {
        (imm & ROUTED != 0).then_some(((imm >> 22) & 0xff) as u16)
    }
    /// The coroutine a coroutine-routed immediate names.
    pub fn coroutine(imm: u32) -> Option<u32> {
        (imm & (ROUTED | TO_COROUTINE) == ROUTED | TO_COROUTINE).then_some(imm & MAX_TAG)
    }
    /// The tag of a routed immediate.
    pub fn tag(imm: u32) -> u32 {
        imm & MAX_TAG
    }
}
