//! The verbs transport: `WorkerCore`s driven by a real RDMA NIC through `sideway` 0.4.3.
//!
//! Implemented:
//! - [`VerbsMemory`]: the node's registered memory: the sockets backend's `SharedMemory` (same
//!   address layout, region `i` at `REGION_BASE * (i + 1)`, configured keys, one CPU access
//!   path) plus each region's NIC registration (LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE |
//!   REMOTE_ATOMIC). Work requests are translated from those addresses/keys to real addresses
//!   and the NIC's lkeys/rkeys.
//! - [`VerbsNode`]: opens the device chosen as `probe` chooses it (device name, GID index), allocates
//!   a PD, registers the memory, creates per worker the CQs and the queue pairs, and produces the
//!   [`NodeDescriptor`] exchanged at bootstrap (bytes, [`NodeDescriptor::encode`]/`decode`).
//! - [`VerbsWorker`]: the `SocketsWorker` surface (`connect`, `step`, `now`, `set_start`,
//!   `set_datagram_loss`, `close`, `pub core`). RC QPs go RESET→INIT→RTR→RTS with the peer's QPN,
//!   GID/LID and PSN and the port's active MTU. Each doorbell is posted as ONE posting list
//!   (one chained `ibv_post_send`; the `ibv_wr_start`..`ibv_wr_complete` path for extended QPs exists but is unused)
//!   with per-request signaling, inline data up to [`INLINE_MAX`] bytes, larger inline payloads
//!   staged in a registered ring. The RC CQ is polled and work completions become `Completion`s
//!   ([`map_status`]); unsignaled requests are retired by the next signaled completion of their QP.
//! - **One UD QP per worker** for datagrams (the core's UD QP, RPC traffic). sideway 0.4.3 cannot
//!   express UD (no address handles, no UD address on a send, no `qkey` in its QP attributes, no
//!   `src_qp` in its work completions), so the UD QP, its own CQ and its address handles are made
//!   with raw libibverbs calls through `rdma-mummy-sys` on the PD's raw handle (`sys::UdQp`, the
//!   only unsafe code, in sys.rs). The QP (qkey [`UD_QKEY`]) goes RESET→INIT (pkey index 0, port
//!   1, qkey)→RTR→RTS (sq_psn from its QPN); one address handle per node is built from the
//!   node's descriptor (GID/LID, GRH with the link's GID index, hop limit 64). The descriptor
//!   carries each worker's UD QPN. [`UD_RECVS`] receive buffers of [`GRH`] + [`SLOT`] bytes are
//!   posted and reposted after each receive; the GRH is stripped and the source endpoint is found
//!   from the completion's `src_qp` (descriptor QPN → (node, worker)); a datagram from an unknown
//!   QPN is dropped. Sends are one chained `ibv_post_send` per doorbell, inline up to
//!   [`INLINE_MAX`] bytes, else from registered memory or a staging slot; signaled when the core
//!   asks, when staged, and at least every 32nd send (to drain the send queue). The UD CQ is
//!   polled in `poll()` alongside the RC CQ. As on UD: a datagram over the port's active MTU
//!   (IBTA C10-93.1.1), one that finds no free staging slot or a full send queue, and one whose
//!   send fails, is lost (success to the sender; the RPC layer retransmits), so the core's UD QP
//!   never enters the error state. A datagram a worker sends itself is delivered in software.
//!   `set_datagram_loss` still injects loss before the NIC.
//!
//! - WRITE_WITH_IMM and RC SEND on the RC QPs: every RC QP that can receive (the ones to other
//!   nodes, and the loopback QP `lo` for the worker's own node) keeps [`RC_RECVS`] receive
//!   buffers of [`SLOT`] bytes posted. A receive completion with an immediate becomes
//!   `on_imm(peer)`, a plain receive `on_datagram(peer, this worker's index)`: RC QPs pair equal
//!   worker indices, as in the simulator. An RC SEND above [`SLOT`] bytes is refused locally.
//!
//! Limitations:
//! - No link-delay emulation (`set_link_delays`), no completion channel: an idle worker polls.
//!
//! Tested on Soft-RoCE (rdma_rxe in a QEMU guest, tests/rxe/run.sh, run by CI): two processes
//! run SmallBank with every stage over RPC and with every stage one-sided (READ, CAS, WRITE),
//! and the checker finds both serializable with nothing lost. Not tested on hardware NICs.
//! Choices a hardware NIC may reject and that are unverified there: `max_rd_atomic` and
//! `max_dest_rd_atomic` 16, `max_inline_data` 128 (RC and UD), an RC CQ of `(nodes+1)*depth`
//! entries clamped to 64..=32767, a UD send queue of `4*depth` clamped to 64..=4096 with a CQ of
//! that plus [`UD_RECVS`], qkey [`UD_QKEY`], hop limit 64 and traffic class 0 in the GRH, PSNs
//! derived from QP numbers. Basic QPs only: the extended-QP posting path (`ibv_wr_*`) failed with
//! IBV_WC_LOC_QP_OP_ERR on rxe and is unused.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{
    GenericCompletionQueue, WorkCompletionOperationType as WcOp, WorkCompletionStatus as Wcs,
};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion as Mr;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState, SendOperationFlags, SetInlineData,
    WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use txbed_transport::*;

use super::{sys, DeviceInfo, VerbsError, PORT};
use crate::sockets::SharedMemory;
pub use crate::sockets::REGION_BASE;
/// Largest payload sent inline (`IBV_SEND_INLINE`); larger inline payloads are staged.
pub const INLINE_MAX: u32 = 128;
/// Size of a datagram receive buffer and of a staging slot (the RPC layer's default MTU).
pub const SLOT: u32 = 4096;
/// Receive buffers posted on each worker's UD QP.
pub const UD_RECVS: u32 = 256;
/// The qkey of every UD QP (sends carry it, receivers check it).
pub const UD_QKEY: u32 = 0x1117_0000;
/// The GRH a UD receive buffer starts with (RoCE and any GRH-routed datagram).
pub const GRH: u32 = 40;
/// Size of a UD receive buffer: GRH and payload.
pub const RECV_SLOT: u32 = GRH + SLOT;
/// Receive buffers kept posted on each receiving RC QP (for RC SEND and WRITE_WITH_IMM).
pub const RC_RECVS: u32 = 16;
/// The UD QP's unsignaled sends between two signaled ones (to keep its send queue drained).
const UD_UNSIGNALED_MAX: u32 = 32;
/// Staging slots per worker.
pub const STAGING_SLOTS: u32 = 256;

const ACCESS: AccessFlags =
    AccessFlags::LocalWrite.or(AccessFlags::RemoteRead).or(AccessFlags::RemoteWrite).or(AccessFlags::RemoteAtomic);

// ------------------------------------------------------------------------------------------------
// Memory

/// Registers `words` once per `cell`: later calls return the same memory region.
fn register_once(
    cell: &OnceLock<Arc<Mr>>,
    words: &crate::words::Words,
    pd: &Arc<ProtectionDomain>,
    during: &'static str,
    dev: &str,
) -> Result<Arc<Mr>, VerbsError> {
    if let Some(m) = cell.get() {
        return Ok(m.clone());
    }
    let m = sys::register_words(pd, words.as_slice(), ACCESS).map_err(|e| {
        let errno = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>()?.raw_os_error());
        super::classify_call_error(during, dev, errno)
    })?;
    let _ = cell.set(m.clone());
    Ok(m)
}

/// Buffers a NIC may register (receive and staging rings): words plus their registration.
struct Words {
    /// Declared before `words`: deregistered before the memory is freed (see sys.rs).
    mr: OnceLock<Arc<Mr>>,
    words: crate::words::Words,
}

impl Words {
    fn new(bytes: u64) -> Words {
        Words { mr: OnceLock::new(), words: crate::words::Words::new(bytes) }
    }
    fn base(&self) -> u64 {
        self.words.base()
    }
    fn read(&self, off: u64, out: &mut [u8]) {
        self.words.read(off, out)
    }
    fn write(&self, off: u64, data: &[u8]) {
        self.words.write(off, data)
    }
    fn register(&self, pd: &Arc<ProtectionDomain>, during: &'static str, dev: &str) -> Result<Arc<Mr>, VerbsError> {
        register_once(&self.mr, &self.words, pd, during, dev)
    }
}

/// The node's registered memory: the sockets backend's memory (same layout, keys and CPU
/// access) plus each region's registration with the NIC.
#[derive(Clone, Default)]
pub struct VerbsMemory {
    /// Declared before `shared`: registrations are dropped before the memory (see sys.rs).
    mrs: Arc<Vec<OnceLock<Arc<Mr>>>>,
    shared: SharedMemory,
}

impl VerbsMemory {
    /// Memory with regions of the given `(len, rkey, lkey)` (as `SharedMemory::new`).
    pub fn new(regions: &[(u64, u32, u32)]) -> Self {
        VerbsMemory {
            mrs: Arc::new(regions.iter().map(|_| OnceLock::new()).collect()),
            shared: SharedMemory::new(regions),
        }
    }

    /// Registers region `i` (once) and describes it as peers address it.
    fn register(&self, i: usize, pd: &Arc<ProtectionDomain>, dev: &str) -> Result<RegionDesc, VerbsError> {
        let r = self.shared.regions()[i];
        let words = self.shared.region_words(i);
        let m = register_once(&self.mrs[i], words, pd, "registering memory", dev)?;
        Ok(RegionDesc { addr: r.addr, len: r.len, key: r.rkey, remote: words.base(), rkey: m.rkey() })
    }

    /// The local translation table (after registration: real addresses and lkeys).
    fn local_table(&self) -> Vec<LocalRegion> {
        self.shared
            .regions()
            .iter()
            .enumerate()
            .map(|(i, r)| LocalRegion {
                addr: r.addr,
                len: r.len,
                key: r.lkey,
                real: self.shared.region_words(i).base(),
                lkey: self.mrs[i].get().map_or(0, |m| m.lkey()),
            })
            .collect()
    }
}

impl HostMemory for VerbsMemory {
    fn regions(&self) -> Vec<MemoryRegion> {
        self.shared.regions()
    }
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.shared.read(addr, out)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.shared.write(addr, data)
    }
    fn cas_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        self.shared.cas_u64(addr, compare, swap)
    }
    fn faa_u64(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        self.shared.faa_u64(addr, add)
    }
}

// ------------------------------------------------------------------------------------------------
// Descriptor

/// One registered region as peers address it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionDesc {
    /// txbed address and configured rkey (what protocol code puts in a `RemoteBuf`).
    pub addr: u64,
    pub len: u64,
    pub key: u32,
    /// The real virtual address and the NIC's rkey.
    pub remote: u64,
    pub rkey: u32,
}

/// What a node tells every other node at bootstrap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDescriptor {
    pub lid: u16,
    pub gid: [u8; 16],
    /// Workers on this node (every node must have the same number).
    pub workers: u16,
    /// Nodes in the cluster.
    pub nodes: u16,
    /// `rc_qpn[w][n]`: worker `w`'s one-sided RC QP toward node `n` (paired with node `n`'s
    /// worker `w`).
    pub rc_qpn: Vec<Vec<u32>>,
    /// `ud_qpn[w]`: worker `w`'s UD QP (for RPC datagrams).
    pub ud_qpn: Vec<u32>,
    pub regions: Vec<RegionDesc>,
}

const MAGIC: &[u8; 4] = b"TXBV";
const VERSION: u8 = 2;

impl NodeDescriptor {
    /// Little-endian: "TXBV" | version u8 | lid u16 | gid [16] | workers u16 | nodes u16 |
    /// regions u16 | rc QPNs (workers*nodes u32) | UD QPNs (workers u32) |
    /// regions (addr u64, len u64, key u32, remote u64, rkey u32).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.push(VERSION);
        b.extend_from_slice(&self.lid.to_le_bytes());
        b.extend_from_slice(&self.gid);
        b.extend_from_slice(&self.workers.to_le_bytes());
        b.extend_from_slice(&self.nodes.to_le_bytes());
        b.extend_from_slice(&(self.regions.len() as u16).to_le_bytes());
        for q in self.rc_qpn.iter().flatten().chain(&self.ud_qpn) {
            b.extend_from_slice(&q.to_le_bytes());
        }
        for r in &self.regions {
            b.extend_from_slice(&r.addr.to_le_bytes());
            b.extend_from_slice(&r.len.to_le_bytes());
            b.extend_from_slice(&r.key.to_le_bytes());
            b.extend_from_slice(&r.remote.to_le_bytes());
            b.extend_from_slice(&r.rkey.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<NodeDescriptor, String> {
        struct R<'a>(&'a [u8]);
        impl R<'_> {
            fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
                if self.0.len() < N {
                    return Err("verbs node descriptor is truncated".into());
                }
                let (h, t) = self.0.split_at(N);
                self.0 = t;
                Ok(h.try_into().expect("N bytes"))
            }
            fn u16(&mut self) -> Result<u16, String> {
                self.take().map(u16::from_le_bytes)
            }
            fn u32(&mut self) -> Result<u32, String> {
                self.take().map(u32::from_le_bytes)
            }
            fn u64(&mut self) -> Result<u64, String> {
                self.take().map(u64::from_le_bytes)
            }
        }
        let mut r = R(b);
        if &r.take::<4>()? != MAGIC {
            return Err("not a verbs node descriptor (bad magic)".into());
        }
        let v = r.take::<1>()?[0];
        if v != VERSION {
            return Err(format!("verbs node descriptor version {v}, expected {VERSION}"));
        }
        let lid = r.u16()?;
        let gid = r.take::<16>()?;
        let (workers, nodes, nregions) = (r.u16()?, r.u16()?, r.u16()? as usize);
        if workers == 0 || nodes == 0 {
            return Err("verbs node descriptor with no workers or no nodes".into());
        }
        let (w, n) = (workers as usize, nodes as usize);
        let want = w * n * 4 + w * 4 + nregions * 32;
        if r.0.len() != want {
            return Err(format!("verbs node descriptor has {} bytes of tables, expected {want}", r.0.len()));
        }
        let mut qpns = |k: usize| -> Result<Vec<Vec<u32>>, String> {
            (0..w)
                .map(|_| {
                    (0..k)
                        .map(|_| {
                            let q = r.u32()?;
                            if q >= 1 << 24 {
                                return Err(format!("QP number {q:#x} is over 24 bits"));
                            }
                            Ok(q)
                        })
                        .collect()
                })
                .collect()
        };
        let rc_qpn = qpns(n)?;
        let ud_qpn = qpns(1)?.into_iter().flatten().collect();
        let regions = (0..nregions)
            .map(|_| Ok(RegionDesc { addr: r.u64()?, len: r.u64()?, key: r.u32()?, remote: r.u64()?, rkey: r.u32()? }))
            .collect::<Result<_, String>>()?;
        Ok(NodeDescriptor { lid, gid, workers, nodes, rc_qpn, ud_qpn, regions })
    }
}

// ------------------------------------------------------------------------------------------------
// Pure translation

/// One local region: txbed address/lkey and real address/NIC lkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalRegion {
    pub addr: u64,
    pub len: u64,
    pub key: u32,
    pub real: u64,
    pub lkey: u32,
}

/// The verb of a posting, with real remote addresses and NIC keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verb {
    Read { rkey: u32, addr: u64 },
    Write { rkey: u32, addr: u64 },
    WriteImm { rkey: u32, addr: u64, imm: u32 },
    Cas { rkey: u32, addr: u64, compare: u64, swap: u64 },
    Faa { rkey: u32, addr: u64, add: u64 },
    Send,
}

/// Where a posting's local bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data {
    /// Copied into the WQE (`IBV_SEND_INLINE`).
    Inline(Vec<u8>),
    /// Too large to inline: copied into a registered staging slot first.
    Staged(Vec<u8>),
    /// Registered memory: (real address, length, lkey).
    Sge { addr: u64, len: u32, lkey: u32 },
}

/// What one work request becomes on the NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posting {
    pub verb: Verb,
    pub data: Data,
}

fn local(t: &[LocalRegion], b: &LocalBuf) -> Result<Data, WcStatus> {
    t.iter()
        .find(|r| {
            r.key == b.lkey
                && MemoryRegion { addr: r.addr, len: r.len, rkey: 0, lkey: 0 }.contains(b.addr, b.len as u64)
        })
        .map(|r| Data::Sge { addr: r.real + (b.addr - r.addr), len: b.len, lkey: r.lkey })
        .ok_or(WcStatus::LocalProtectionError)
}

fn remote(t: &[RegionDesc], b: &RemoteBuf) -> Result<(u32, u64), WcStatus> {
    t.iter()
        .find(|r| {
            r.key == b.rkey
                && MemoryRegion { addr: r.addr, len: r.len, rkey: 0, lkey: 0 }.contains(b.addr, b.len as u64)
        })
        .map(|r| (r.rkey, r.remote + (b.addr - r.addr)))
        .ok_or(WcStatus::RemoteAccessError)
}

fn payload(t: &[LocalRegion], p: &Payload, max: u32) -> Result<Data, WcStatus> {
    match p {
        Payload::Inline(b) if b.len() as u32 <= INLINE_MAX => Ok(Data::Inline(b.clone())),
        Payload::Inline(b) if b.len() as u32 <= max => Ok(Data::Staged(b.clone())),
        Payload::Inline(_) => Err(WcStatus::LocalLengthError),
        Payload::Local(l) => local(t, l),
    }
}

/// Translates one work request against the local table and the peer's regions. `rc`: whether the
/// target QP is one of the core's RC QPs (every verb but a UD SEND) or the UD QP (only a SEND
/// with a destination). An `Err` is the status the request completes with locally.
pub fn translate(op: &Op, rc: bool, loc: &[LocalRegion], rem: &[RegionDesc]) -> Result<Posting, WcStatus> {
    let atomic = |l: &LocalBuf, r: &RemoteBuf| -> Result<(Data, u32, u64), WcStatus> {
        let data = local(loc, &LocalBuf { len: 8, ..*l })?;
        let (rkey, addr) = remote(rem, &RemoteBuf { len: 8, ..*r })?;
        Ok((data, rkey, addr))
    };
    match (op, rc) {
        (Op::Read { local: l, remote: r }, true) => {
            let data = local(loc, l)?;
            let (rkey, addr) = remote(rem, &RemoteBuf { len: l.len, ..*r })?;
            Ok(Posting { verb: Verb::Read { rkey, addr }, data })
        }
        (Op::Write { src, remote: r }, true) => {
            let data = payload(loc, src, SLOT)?;
            let (rkey, addr) = remote(rem, &RemoteBuf { len: src.len(), ..*r })?;
            Ok(Posting { verb: Verb::Write { rkey, addr }, data })
        }
        (Op::WriteImm { src, remote: r, imm }, true) => {
            let data = payload(loc, src, SLOT)?;
            let (rkey, addr) = remote(rem, &RemoteBuf { len: src.len(), ..*r })?;
            Ok(Posting { verb: Verb::WriteImm { rkey, addr, imm: *imm }, data })
        }
        // The peer's receive buffers are SLOT bytes.
        (Op::Send { src, dest: None }, true) if src.len() > SLOT => Err(WcStatus::LocalLengthError),
        (Op::Send { src, dest: None }, true) => Ok(Posting { verb: Verb::Send, data: payload(loc, src, SLOT)? }),
        (Op::Cas { local: l, remote: r, compare, swap }, true) => {
            let (data, rkey, addr) = atomic(l, r)?;
            Ok(Posting { verb: Verb::Cas { rkey, addr, compare: *compare, swap: *swap }, data })
        }
        (Op::Faa { local: l, remote: r, add }, true) => {
            let (data, rkey, addr) = atomic(l, r)?;
            Ok(Posting { verb: Verb::Faa { rkey, addr, add: *add }, data })
        }
        (Op::Send { src, dest: Some(_) }, false) => Ok(Posting { verb: Verb::Send, data: payload(loc, src, SLOT)? }),
        _ => Err(WcStatus::LocalQpOperationError),
    }
}

/// `ibv_wc_status` (raw) to txbed's status.
pub fn map_status(raw: u32) -> WcStatus {
    const fn s(x: Wcs) -> u32 {
        x as u32
    }
    match raw {
        x if x == s(Wcs::Success) => WcStatus::Success,
        x if x == s(Wcs::RemoteAccessError)
            || x == s(Wcs::RemoteInvalidRequestError)
            || x == s(Wcs::RemoteOperationError) =>
        {
            WcStatus::RemoteAccessError
        }
        x if x == s(Wcs::RetryCounterExceededError)
            || x == s(Wcs::ResponderNotReadyRetryCounterExceededError)
            || x == s(Wcs::ResponseTimeoutError)
            || x == s(Wcs::RemoteAbortedError) =>
        {
            WcStatus::RetryExceeded
        }
        x if x == s(Wcs::WorkRequestFlushedError) => WcStatus::Flushed,
        x if x == s(Wcs::LocalProtectionError)
            || x == s(Wcs::LocalAccessError)
            || x == s(Wcs::MemoryWindowBindError) =>
        {
            WcStatus::LocalProtectionError
        }
        x if x == s(Wcs::LocalLengthError) => WcStatus::LocalLengthError,
        _ => WcStatus::LocalQpOperationError,
    }
}

/// Work-request ids on the NIC: bit 63 marks a receive; sends carry (hardware QP index, sequence).
pub mod wrid {
    pub const RECV: u64 = 1 << 63;
    pub fn send(qp: u32, seq: u64) -> u64 {
        ((qp as u64) << 40) | (seq & ((1 << 40) - 1))
    }
    pub fn recv(dg: u32, slot: u32) -> u64 {
        RECV | ((dg as u64) << 32) | slot as u64
    }
    /// `Ok((qp, seq))` for a send, `Err((dg, slot))` for a receive.
    pub fn split(id: u64) -> Result<(u32, u64), (u32, u32)> {
        if id & RECV != 0 {
            Err((((id & !RECV) >> 32) as u32, id as u32))
        } else {
            Ok(((id >> 40) as u32, id & ((1 << 40) - 1)))
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Node

/// Queue pairs, CQ and buffers of one worker, created before the descriptor exchange.
pub struct WorkerQps {
    // Declared first: queue pairs are destroyed before the CQ and the buffers they use.
    rc: Vec<GenericQueuePair>,
    /// The worker's UD QP with its own CQ and address handles (raw libibverbs, see sys.rs).
    ud: sys::UdQp,
    /// The far end of this worker's RC QP to its own node: a QP connected to itself does not
    /// work on every driver (rdma_rxe fails it), so local one-sided verbs go A -> B on the NIC.
    lo: GenericQueuePair,
    cq: GenericCompletionQueue,
    recv: Words,
    /// RC receive buffers: [`RC_RECVS`] slots of [`SLOT`] bytes per RC QP, then `lo`'s.
    rc_recv: Words,
    staging: Words,
}

/// Immediates a worker received for another worker of its process (`verbs::imm` routing):
/// a receive completion lands on the CQ of the QP it arrived on, so that worker hands it over
/// through this queue, which the named worker drains when it polls.
pub type ImmRoutes = Arc<Vec<std::sync::Mutex<VecDeque<(NodeId, u32)>>>>;

/// An opened device with registered memory and every worker's queue pairs.
pub struct VerbsNode {
    workers: Vec<Option<WorkerQps>>,
    imm_routes: ImmRoutes,
    mem: VerbsMemory,
    info: DeviceInfo,
    mtu: Mtu,
    desc: NodeDescriptor,
    _pd: Arc<ProtectionDomain>,
    _ctx: Arc<DeviceContext>,
}

fn mtu_of(bytes: u32) -> Mtu {
    match bytes {
        0..=256 => Mtu::Mtu256,
        257..=512 => Mtu::Mtu512,
        513..=1024 => Mtu::Mtu1024,
        1025..=2048 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

fn os<E: std::error::Error + 'static>(during: &'static str, dev: &str, e: E) -> VerbsError {
    let mut src: Option<&dyn std::error::Error> = Some(&e);
    let mut errno = None;
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            errno = io.raw_os_error();
            break;
        }
        src = s.source();
    }
    super::classify_call_error(during, dev, errno)
}

impl VerbsNode {
    /// Opens `device` (or the first) with `gid_index` (or probe's default), registers `mem` and
    /// creates, for each of `workers` workers, a CQ, one RC QP per node of the `nodes`-node
    /// cluster (itself included), each with a send queue of `depth`, and one UD QP with its own
    /// CQ.
    pub fn open(
        device: Option<&str>,
        gid_index: Option<u32>,
        mem: VerbsMemory,
        nodes: u16,
        workers: u16,
        depth: u32,
    ) -> Result<VerbsNode, VerbsError> {
        let info = super::probe(device, gid_index)?;
        let list = super::list_devices()?;
        let index = super::device_names(&list).iter().position(|n| *n == info.name).ok_or_else(|| {
            VerbsError::DeviceNotFound { name: info.name.clone(), present: super::device_names(&list) }
        })?;
        let ctx = super::open(&list, index, &info.name)?;
        let dev = info.name.as_str();
        let pd = ctx.alloc_pd().map_err(|e| os("allocating a protection domain", dev, e))?;
        let mut regions = Vec::new();
        for i in 0..mem.mrs.len() {
            regions.push(mem.register(i, &pd, dev)?);
        }
        let (n, w) = (nodes as usize, workers as usize);
        let mut qps = Vec::new();
        let (mut rc_qpn, mut ud_qpn) = (Vec::new(), Vec::new());
        for _ in 0..w {
            let cqe = ((n as u32 + 1) * (depth + RC_RECVS)).clamp(64, 32767);
            let cq = GenericCompletionQueue::from(
                ctx.create_cq_builder()
                    .setup_cqe(cqe)
                    .build()
                    .map_err(|e| os("creating a completion queue", dev, e))?,
            );
            let mk = |recv: u32| -> Result<GenericQueuePair, VerbsError> {
                let mut b = pd.create_qp_builder();
                b.setup_max_send_wr(depth.max(1))
                    .setup_max_recv_wr(recv.max(1))
                    .setup_max_send_sge(1)
                    .setup_max_recv_sge(1)
                    .setup_max_inline_data(INLINE_MAX)
                    .setup_send_cq(cq.clone())
                    .setup_recv_cq(cq.clone())
                    .setup_send_ops_flags(
                        SendOperationFlags::Send
                            | SendOperationFlags::Write
                            | SendOperationFlags::WriteWithImmediate
                            | SendOperationFlags::Read
                            | SendOperationFlags::AtomicCompareAndSwap
                            | SendOperationFlags::AtomicFetchAndAdd,
                    );
                // Basic QPs: each doorbell is one chained `ibv_post_send`. Extended QPs
                // (`build_ex`, `ibv_wr_*`) failed every request with IBV_WC_LOC_QP_OP_ERR on
                // rdma_rxe (Linux 6.1, rdma-core 44) in tests/rxe; not triaged further.
                b.build().map(GenericQueuePair::from).map_err(|e| os("creating a queue pair", dev, e))
            };
            let rc = (0..n).map(|_| mk(RC_RECVS)).collect::<Result<Vec<_>, _>>()?;
            let lo = mk(RC_RECVS)?;
            let ud_sq = ud_send_depth(depth);
            let ud = sys::UdQp::create(&pd, ud_sq + UD_RECVS, ud_sq, UD_RECVS, INLINE_MAX)
                .map_err(|e| os("creating the UD queue pair", dev, e))?;
            rc_qpn.push(rc.iter().map(|q| q.qp_number()).collect());
            ud_qpn.push(ud.qpn());
            let recv = Words::new(UD_RECVS as u64 * RECV_SLOT as u64);
            recv.register(&pd, "registering receive buffers", dev)?;
            let rc_recv = Words::new((n as u64 + 1) * RC_RECVS as u64 * SLOT as u64);
            rc_recv.register(&pd, "registering RC receive buffers", dev)?;
            let staging = Words::new(STAGING_SLOTS as u64 * SLOT as u64);
            staging.register(&pd, "registering staging buffers", dev)?;
            qps.push(Some(WorkerQps { rc, ud, lo, cq, recv, rc_recv, staging }));
        }
        let desc =
            NodeDescriptor { lid: info.lid, gid: info.gid.gid.octets(), workers, nodes, rc_qpn, ud_qpn, regions };
        let mtu = mtu_of(info.active_mtu);
        let imm_routes = Arc::new((0..workers).map(|_| std::sync::Mutex::new(VecDeque::new())).collect());
        Ok(VerbsNode { workers: qps, imm_routes, mem, info, mtu, desc, _pd: pd, _ctx: ctx })
    }

    /// What to send every other node.
    pub fn descriptor(&self) -> &NodeDescriptor {
        &self.desc
    }

    pub fn device(&self) -> &DeviceInfo {
        &self.info
    }

    /// The registered memory (give the core a clone as its `HostMemory`).
    pub fn memory(&self) -> VerbsMemory {
        self.mem.clone()
    }

    /// Hands worker `w`'s queue pairs to the thread that will run it (once).
    pub fn take_worker(&mut self, w: u16) -> Option<(WorkerQps, VerbsMemory, WorkerLink)> {
        let q = self.workers.get_mut(w as usize)?.take()?;
        let link = WorkerLink {
            worker: w,
            mtu: self.mtu,
            ud_max: if self.info.active_mtu == 0 { 256 } else { self.info.active_mtu.min(SLOT) },
            gid_index: self.info.gid.index,
            device: self.info.name.clone(),
            imm_routes: self.imm_routes.clone(),
        };
        Some((q, self.mem.clone(), link))
    }
}

/// Per-worker facts the connection needs from the node.
#[derive(Clone, Debug)]
pub struct WorkerLink {
    pub worker: u16,
    mtu: Mtu,
    /// Largest UD message: the port's active MTU (at most [`SLOT`]).
    ud_max: u32,
    gid_index: u32,
    device: String,
    imm_routes: ImmRoutes,
}

/// Send queue depth of the UD QP for a core UD QP of `depth`.
fn ud_send_depth(depth: u32) -> u32 {
    (depth.saturating_mul(4)).clamp(64, 4096)
}

// ------------------------------------------------------------------------------------------------
// Worker

struct Posted {
    seq: u64,
    wr_id: u64,
    opcode: Opcode,
    signaled: bool,
    staging: Option<u32>,
}

/// A hardware queue pair with what it carries for the core.
struct Hw {
    qp: GenericQueuePair,
    /// The core's QP this hardware QP serves, and the peer node.
    core: QpId,
    peer: NodeId,
    seq: u64,
    fifo: VecDeque<Posted>,
}

/// One worker thread's transport.
pub struct VerbsWorker {
    pub core: WorkerCore,
    /// Hardware QPs: the core's RC QPs (one per node).
    hw: Vec<Hw>,
    /// Receives for this worker's own node (what `hw[me]` sends arrives here).
    lo: GenericQueuePair,
    rc_recv: Words,
    /// The hardware UD QP serving the core's UD QP, its posted sends and their sequence.
    udqp: sys::UdQp,
    ud_fifo: VecDeque<Posted>,
    ud_seq: u64,
    /// Unsignaled UD sends since the last signaled one.
    ud_unsignaled: u32,
    /// `ud_ah[n]`: the UD QP's address handle for node `n`.
    ud_ah: Vec<usize>,
    /// UD QP number → the endpoint that owns it (from the descriptors).
    src_of: std::collections::HashMap<u32, Endpoint>,
    ud_max: u32,
    /// Datagrams this worker sent itself: delivered without the NIC.
    to_self: Vec<Vec<u8>>,
    /// Core QP id → index into `hw` for RC QPs.
    rc_of: Vec<Option<usize>>,
    ud: QpId,
    cq: GenericCompletionQueue,
    recv: Words,
    staging: Words,
    free_slots: Vec<u32>,
    local: Vec<LocalRegion>,
    peers: Vec<NodeDescriptor>,
    me: Endpoint,
    start: Instant,
    /// Completions decided before reaching the NIC, delivered on the next step.
    local_done: Vec<Completion>,
    /// Every worker's queue of immediates routed to it by another (`ImmRoutes`).
    imm_routes: ImmRoutes,
    loss: Option<(f64, rand::rngs::StdRng)>,
    reported_error: bool,
    reported_oversize: bool,
    _mem: VerbsMemory,
}

fn modify(qp: &mut GenericQueuePair, a: &QueuePairAttribute, what: &'static str, dev: &str) -> Result<(), VerbsError> {
    qp.modify(a).map_err(|e| os(what, dev, e))
}

fn connect_rc(
    qp: &mut GenericQueuePair,
    peer: &NodeDescriptor,
    dest_qpn: u32,
    link: &WorkerLink,
) -> Result<(), VerbsError> {
    let dev = link.device.as_str();
    let my_psn = qp.qp_number() & 0xff_ffff;
    let mut a = QueuePairAttribute::new();
    a.setup_state(QueuePairState::Init).setup_pkey_index(0).setup_port(PORT).setup_access_flags(ACCESS);
    modify(qp, &a, "moving a queue pair to INIT", dev)?;
    let mut ah = AddressHandleAttribute::new();
    ah.setup_dest_lid(peer.lid).setup_port(PORT).setup_service_level(0).setup_grh(
        &Gid { raw: peer.gid },
        0,
        link.gid_index as u8,
        64,
        0,
    );
    let mut a = QueuePairAttribute::new();
    a.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(link.mtu)
        .setup_dest_qp_num(dest_qpn)
        .setup_rq_psn(dest_qpn & 0xff_ffff)
        .setup_max_dest_read_atomic(16)
        .setup_min_rnr_timer(12)
        .setup_address_vector(&ah);
    modify(qp, &a, "moving a queue pair to RTR", dev)?;
    let mut a = QueuePairAttribute::new();
    a.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(my_psn)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(16);
    modify(qp, &a, "moving a queue pair to RTS", dev)
}

impl VerbsWorker {
    /// Connects worker `me.worker`'s queue pairs (from [`VerbsNode::take_worker`]) to every
    /// node's descriptor (`peers[n]` is node `n`'s, this node's included), registers them with
    /// the core (one RC QP per node, then the UD QP), builds one address handle per node and
    /// posts the UD receive buffers.
    pub fn connect(
        mut core: WorkerCore,
        me: Endpoint,
        qps: (WorkerQps, VerbsMemory, WorkerLink),
        peers: Vec<NodeDescriptor>,
        start: Instant,
        depth: u32,
    ) -> Result<VerbsWorker, String> {
        let (q, mem, link) = qps;
        let WorkerQps { rc, ud: mut udqp, mut lo, cq, recv, rc_recv, staging } = q;
        let (w, n) = (me.worker as usize, peers.len());
        if rc.len() != n || n == 0 {
            return Err(format!("{me}: {} peer descriptors for queue pairs made for {} nodes", n, rc.len()));
        }
        let workers = peers[me.node.0 as usize].workers;
        for (i, p) in peers.iter().enumerate() {
            if p.workers != workers
                || p.nodes as usize != n
                || p.rc_qpn.len() <= w
                || p.ud_qpn.len() != workers as usize
            {
                return Err(format!(
                    "{me}: node {i} has {} workers in a {}-node cluster, this node {workers} in {n}",
                    p.workers, p.nodes
                ));
            }
        }
        let ud = core.add_qp(QpType::Ud, me.node, depth);
        let mut hw = Vec::new();
        let mut rc_of = Vec::new();
        for (i, mut qp) in rc.into_iter().enumerate() {
            if i == me.node.0 as usize {
                let (a, b) = (qp.qp_number(), lo.qp_number());
                connect_rc(&mut qp, &peers[i], b, &link).map_err(|e| e.to_string())?;
                connect_rc(&mut lo, &peers[i], a, &link).map_err(|e| e.to_string())?;
            } else {
                connect_rc(&mut qp, &peers[i], peers[i].rc_qpn[w][me.node.0 as usize], &link)
                    .map_err(|e| e.to_string())?;
            }
            let id = core.add_qp(QpType::Rc, NodeId(i as u16), depth);
            if rc_of.len() <= id.0 as usize {
                rc_of.resize(id.0 as usize + 1, None);
            }
            rc_of[id.0 as usize] = Some(hw.len());
            hw.push(Hw { qp, core: id, peer: NodeId(i as u16), seq: 0, fifo: VecDeque::new() });
        }
        let qpn = udqp.qpn();
        udqp.activate(PORT, UD_QKEY, qpn).map_err(|e| format!("{me}: {e}"))?;
        let mut ud_ah = Vec::new();
        let mut src_of = std::collections::HashMap::new();
        for (i, p) in peers.iter().enumerate() {
            let ah = udqp
                .add_ah(p.gid, p.lid, PORT, link.gid_index as u8, 64)
                .map_err(|e| format!("{me}: address handle for node {i}: {e}"))?;
            ud_ah.push(ah);
            for (v, q) in p.ud_qpn.iter().enumerate() {
                src_of.insert(*q, Endpoint { node: NodeId(i as u16), worker: v as u16 });
            }
        }
        let local = mem.local_table();
        let mut me_ = VerbsWorker {
            core,
            hw,
            lo,
            rc_recv,
            udqp,
            ud_fifo: VecDeque::new(),
            ud_seq: 0,
            ud_unsignaled: 0,
            ud_ah,
            src_of,
            ud_max: link.ud_max,
            to_self: Vec::new(),
            rc_of,
            ud,
            cq,
            recv,
            staging,
            free_slots: (0..STAGING_SLOTS).rev().collect(),
            local,
            peers,
            me,
            start,
            local_done: Vec::new(),
            imm_routes: link.imm_routes.clone(),
            loss: None,
            reported_error: false,
            reported_oversize: false,
            _mem: mem,
        };
        for s in 0..UD_RECVS {
            me_.post_recv(s)?;
        }
        for q in 0..=n as u32 {
            if q as usize != me.node.0 as usize {
                for k in 0..RC_RECVS {
                    me_.post_rc_recv(q, k)?;
                }
            }
        }
        Ok(me_)
    }

    /// Posts RC receive buffer `k` of hardware QP `q` (`q == nodes`: the loopback QP).
    fn post_rc_recv(&mut self, q: u32, k: u32) -> Result<(), String> {
        let lkey = self.rc_recv.mr.get().map_or(0, |m| m.lkey());
        let addr = self.rc_recv.base() + (q * RC_RECVS + k) as u64 * SLOT as u64;
        let qp = if q as usize == self.hw.len() { &mut self.lo } else { &mut self.hw[q as usize].qp };
        let mut g = qp.start_post_recv();
        sys::set_sge(g.construct_wr(wrid::recv(q + 1, k)), lkey, addr, SLOT);
        g.post().map_err(|e| format!("posting an RC receive buffer: {e}"))
    }

    /// An RC receive completed on hardware QP `q`, buffer `k`: an immediate or a SEND's payload
    /// from the peer's worker of this worker's index.
    fn on_rc_recv(&mut self, q: u32, k: u32, opcode: u32, imm: u32, len: u32) {
        let peer = if q as usize == self.hw.len() { self.me.node } else { self.hw[q as usize].peer };
        if opcode == WcOp::ReceiveWithImmediate as u32 {
            match txbed_transport::imm::worker(imm).filter(|&w| w != self.me.worker) {
                Some(w) if (w as usize) < self.imm_routes.len() => {
                    if let Ok(mut q) = self.imm_routes[w as usize].lock() {
                        q.push_back((peer, imm));
                    }
                }
                _ => self.core.on_imm(peer, imm),
            }
        } else {
            let mut b = vec![0u8; len.min(SLOT) as usize];
            self.rc_recv.read((q * RC_RECVS + k) as u64 * SLOT as u64, &mut b);
            self.core.on_datagram(Endpoint { node: peer, worker: self.me.worker }, b);
        }
        if let Err(e) = self.post_rc_recv(q, k) {
            if !self.reported_error {
                self.reported_error = true;
                eprintln!("verbs: {}: {e}", self.me);
            }
        }
    }

    fn post_recv(&mut self, slot: u32) -> Result<(), String> {
        let lkey = self.recv.mr.get().map_or(0, |m| m.lkey());
        let addr = self.recv.base() + slot as u64 * RECV_SLOT as u64;
        self.udqp
            .post_recv(wrid::recv(0, slot), addr, RECV_SLOT, lkey)
            .map_err(|e| format!("posting a receive buffer: {e}"))
    }

    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Sets the instant time is measured from (the run's common start).
    pub fn set_start(&mut self, start: Instant) {
        self.start = start;
    }

    /// Drops each outbound datagram with probability `p` (seeded), as a lossy UD network would.
    pub fn set_datagram_loss(&mut self, p: f64, seed: u64) {
        use rand::SeedableRng;
        self.loss = (p > 0.0).then(|| (p, rand::rngs::StdRng::seed_from_u64(seed)));
    }

    /// One loop iteration: completions, run, post. When the core is idle, polls the CQ until
    /// something arrives, its next timer, or `idle_wait`.
    pub fn step(&mut self, idle_wait: Duration) {
        self.poll();
        let now = self.now();
        self.core.run(now);
        let mut dbs = Vec::new();
        self.core.drain_doorbells(&mut dbs);
        for db in dbs {
            self.post(db);
        }
        if !self.core.has_work() && self.local_done.is_empty() && self.to_self.is_empty() {
            let deadline = match self.core.poll_timeout() {
                Some(t) => Duration::from_nanos(t.saturating_sub(self.now())).min(idle_wait),
                None => idle_wait,
            };
            let until = Instant::now() + deadline;
            while Instant::now() < until {
                if self.poll() > 0 {
                    break;
                }
                std::thread::yield_now();
            }
        }
    }

    /// Polls the CQ and feeds the core; returns how many events were delivered.
    fn poll(&mut self) -> usize {
        let mut n = 0;
        for c in std::mem::take(&mut self.local_done) {
            self.core.on_completion(c);
            n += 1;
        }
        for b in std::mem::take(&mut self.to_self) {
            self.core.on_datagram(self.me, b);
            n += 1;
        }
        if let Some(q) = self.imm_routes.get(self.me.worker as usize) {
            let routed: Vec<(NodeId, u32)> = q.lock().map(|mut q| q.drain(..).collect()).unwrap_or_default();
            for (src, imm) in routed {
                self.core.on_imm(src, imm);
                n += 1;
            }
        }
        let mut wcs = Vec::new();
        if let Ok(p) = self.cq.start_poll() {
            for wc in p {
                wcs.push((wc.wr_id(), wc.status(), wc.byte_len(), wc.opcode(), wc.imm_data()));
            }
        }
        let mut uds = Vec::new();
        self.udqp.poll(&mut uds);
        for wc in uds {
            n += 1;
            match wrid::split(wc.wr_id) {
                Err((_, slot)) => {
                    if wc.status == Wcs::Success as u32 {
                        let len = (wc.byte_len.saturating_sub(GRH)).min(SLOT) as usize;
                        let mut b = vec![0u8; len];
                        self.recv.read(slot as u64 * RECV_SLOT as u64 + GRH as u64, &mut b);
                        let _ = self.post_recv(slot);
                        // A datagram from a QP no descriptor names is dropped.
                        if let Some(src) = self.src_of.get(&wc.src_qp).copied() {
                            self.core.on_datagram(src, b);
                        }
                    }
                    // A failed receive (flushed: the QP broke) is not reposted.
                }
                Ok((_, seq)) => {
                    if wc.status != Wcs::Success as u32 && !self.reported_error {
                        self.reported_error = true;
                        eprintln!(
                            "verbs: {}: first failed UD send: ibv_wc_status {} ({:?}); counted as a lost datagram",
                            self.me,
                            wc.status,
                            map_status(wc.status)
                        );
                    }
                    self.retire_ud(seq);
                }
            }
        }
        for (id, status, len, opcode, imm) in wcs {
            n += 1;
            match wrid::split(id) {
                // A failed receive (flushed: the QP broke) is not reposted.
                Err((q, k)) if q >= 1 && status == Wcs::Success as u32 => self.on_rc_recv(q - 1, k, opcode, imm, len),
                Err(_) => {}
                Ok((qp, seq)) => {
                    if status != Wcs::Success as u32 && !self.reported_error {
                        // The NIC's own status is the best clue; later requests only show "flushed".
                        self.reported_error = true;
                        let peer = self.hw.get(qp as usize).map(|h| h.peer.0);
                        eprintln!(
                            "verbs: {}: first failed work request on hardware QP {qp} (to node {peer:?}): ibv_wc_status {status} ({:?})",
                            self.me,
                            map_status(status)
                        );
                    }
                    self.retire(qp as usize, seq, map_status(status))
                }
            }
        }
        n
    }

    /// Retires every UD send up to `seq`. A UD send that failed is a lost datagram: the sender
    /// sees success and the RPC layer retransmits.
    fn retire_ud(&mut self, seq: u64) {
        while let Some(p) = self.ud_fifo.front() {
            if p.seq > seq {
                break;
            }
            let p = self.ud_fifo.pop_front().expect("front");
            if let Some(s) = p.staging {
                self.free_slots.push(s);
            }
            if p.signaled {
                self.core.on_completion(Completion {
                    wr_id: p.wr_id,
                    qp: self.ud,
                    opcode: p.opcode,
                    status: WcStatus::Success,
                    signaled: true,
                    peer: self.me.node,
                });
            }
        }
    }

    /// Retires every request of `hw[qp]` up to `seq`: earlier ones completed silently.
    fn retire(&mut self, qp: usize, seq: u64, status: WcStatus) {
        let Some(h) = self.hw.get_mut(qp) else { return };
        let (core, peer) = (h.core, h.peer);
        let mut out = Vec::new();
        while let Some(p) = h.fifo.front() {
            if p.seq > seq {
                break;
            }
            let p = h.fifo.pop_front().expect("front");
            if let Some(s) = p.staging {
                self.free_slots.push(s);
            }
            let st = if p.seq == seq { status } else { WcStatus::Success };
            if p.signaled || !st.is_ok() {
                out.push(Completion {
                    wr_id: p.wr_id,
                    qp: core,
                    opcode: p.opcode,
                    status: st,
                    signaled: p.signaled,
                    peer,
                });
            }
        }
        for c in out {
            self.core.on_completion(c);
        }
    }

    fn fail_now(&mut self, wr: &WorkRequest, qp: QpId, status: WcStatus, peer: NodeId) {
        self.local_done.push(Completion {
            wr_id: wr.wr_id,
            qp,
            opcode: wr.op.opcode(),
            status,
            signaled: wr.signaled,
            peer,
        });
    }

    /// Posts one doorbell: a UD doorbell goes to [`Self::post_ud`]; an RC doorbell is one
    /// posting list on its hardware QP.
    fn post(&mut self, db: Doorbell) {
        if db.qp == self.ud {
            return self.post_ud(db);
        }
        let Some(target) = self.rc_of.get(db.qp.0 as usize).copied().flatten() else {
            for wr in &db.wrs {
                self.fail_now(wr, db.qp, WcStatus::LocalQpOperationError, self.me.node);
            }
            return;
        };
        let peer = self.hw[target].peer;
        let mut list = Vec::new();
        for wr in db.wrs {
            let rem: &[RegionDesc] = &self.peers[peer.0 as usize].regions;
            match translate(&wr.op, true, &self.local, rem) {
                Ok(p) => list.push((wr, p)),
                Err(st) => self.fail_now(&wr, db.qp, st, peer),
            }
        }
        if !list.is_empty() {
            self.post_list(target, db.qp, list);
        }
    }

    /// Posts a doorbell of the core's UD QP as one chained `ibv_post_send` on the UD QP.
    fn post_ud(&mut self, db: Doorbell) {
        let me = self.me.node;
        struct P {
            wr: WorkRequest,
            ah: usize,
            qpn: u32,
            data: Data,
            slot: Option<u32>,
            hw_signaled: bool,
        }
        let mut list: Vec<P> = Vec::new();
        let staging_lkey = self.staging.mr.get().map_or(0, |m| m.lkey());
        let staging_base = self.staging.base();
        for wr in db.wrs {
            let d = match &wr.op {
                Op::Send { dest: Some(d), .. } => *d,
                _ => {
                    self.fail_now(&wr, db.qp, WcStatus::LocalQpOperationError, me);
                    continue;
                }
            };
            if d == self.me {
                let Op::Send { src, .. } = &wr.op else { unreachable!() };
                let bytes = match src {
                    Payload::Inline(b) => Some(b.clone()),
                    Payload::Local(l) => {
                        let mut v = vec![0u8; l.len as usize];
                        self._mem.read(l.addr, &mut v).ok().map(|_| v)
                    }
                };
                match bytes {
                    Some(b) => {
                        self.to_self.push(b);
                        if wr.signaled {
                            self.fail_now(&wr, db.qp, WcStatus::Success, me);
                        }
                    }
                    None => self.fail_now(&wr, db.qp, WcStatus::LocalProtectionError, me),
                }
                continue;
            }
            let (pn, pw) = (d.node.0 as usize, d.worker as usize);
            if pn >= self.peers.len() || pw >= self.peers[pn].ud_qpn.len() {
                self.fail_now(&wr, db.qp, WcStatus::LocalQpOperationError, me);
                continue;
            }
            let data = match translate(&wr.op, false, &self.local, &[]) {
                Ok(p) => p.data,
                Err(st) => {
                    self.fail_now(&wr, db.qp, st, me);
                    continue;
                }
            };
            let len = match &data {
                Data::Inline(b) | Data::Staged(b) => b.len() as u32,
                Data::Sge { len, .. } => *len,
            };
            let lost = self.loss.as_mut().is_some_and(|(p, rng)| rand::Rng::gen_bool(rng, *p));
            // Over the path MTU a UD NIC emits nothing and reports no error (IBTA C10-93.1.1):
            // the datagram is lost.
            if len > self.ud_max && !self.reported_oversize {
                self.reported_oversize = true;
                eprintln!(
                    "verbs: {}: datagram of {len} bytes is over the UD MTU {} and is dropped (reported once)",
                    self.me, self.ud_max
                );
            }
            if lost || len > self.ud_max {
                if wr.signaled {
                    self.fail_now(&wr, db.qp, WcStatus::Success, me);
                }
                continue;
            }
            let (data, slot) = match data {
                Data::Staged(b) => match self.free_slots.pop() {
                    Some(s) => {
                        self.staging.write(s as u64 * SLOT as u64, &b);
                        let addr = staging_base + s as u64 * SLOT as u64;
                        (Data::Sge { addr, len: b.len() as u32, lkey: staging_lkey }, Some(s))
                    }
                    None => {
                        // No staging slot: dropped, as a UD NIC would drop it.
                        if wr.signaled {
                            self.fail_now(&wr, db.qp, WcStatus::Success, me);
                        }
                        continue;
                    }
                },
                d => (d, None),
            };
            self.ud_unsignaled += 1;
            let hw_signaled = wr.signaled || slot.is_some() || self.ud_unsignaled >= UD_UNSIGNALED_MAX;
            if hw_signaled {
                self.ud_unsignaled = 0;
            }
            let (ah, qpn) = (self.ud_ah[pn], self.peers[pn].ud_qpn[pw]);
            list.push(P { wr, ah, qpn, data, slot, hw_signaled });
        }
        if list.is_empty() {
            return;
        }
        let first = self.ud_seq + 1;
        let sends: Vec<sys::UdSend<'_>> = list
            .iter()
            .enumerate()
            .map(|(i, p)| sys::UdSend {
                wr_id: wrid::send(0, first + i as u64),
                ah: p.ah,
                qpn: p.qpn,
                qkey: UD_QKEY,
                signaled: p.hw_signaled,
                data: match &p.data {
                    Data::Inline(b) | Data::Staged(b) => sys::UdData::Inline(b),
                    Data::Sge { addr, len, lkey } => sys::UdData::Sge { addr: *addr, len: *len, lkey: *lkey },
                },
            })
            .collect();
        let ok = self.udqp.post_send(&sends).is_ok();
        drop(sends);
        if ok {
            self.ud_seq += list.len() as u64;
        }
        for (i, p) in list.into_iter().enumerate() {
            if ok {
                self.ud_fifo.push_back(Posted {
                    seq: first + i as u64,
                    wr_id: p.wr.wr_id,
                    opcode: p.wr.op.opcode(),
                    signaled: p.wr.signaled,
                    staging: p.slot,
                });
            } else {
                // The NIC refused the list (QP in error, queue full): the datagrams are lost.
                if let Some(s) = p.slot {
                    self.free_slots.push(s);
                }
                if p.wr.signaled {
                    self.fail_now(&p.wr, db.qp, WcStatus::Success, me);
                }
            }
        }
    }

    fn post_list(&mut self, target: usize, core: QpId, list: Vec<(WorkRequest, Posting)>) {
        let staging_lkey = self.staging.mr.get().map_or(0, |m| m.lkey());
        let staging_base = self.staging.base();
        let mut posted = Vec::with_capacity(list.len());
        let mut dropped = Vec::new();
        let h = &mut self.hw[target];
        let mut g = h.qp.start_post_send();
        for (wr, p) in list {
            let slot = match &p.data {
                Data::Staged(b) => match self.free_slots.pop() {
                    Some(s) => {
                        self.staging.write(s as u64 * SLOT as u64, b);
                        Some(s)
                    }
                    None => {
                        dropped.push(wr);
                        continue;
                    }
                },
                _ => None,
            };
            h.seq += 1;
            let seq = h.seq;
            // Staged requests are always signaled on the NIC (to free the slot); the core hears
            // only of what it signaled.
            let hw_signaled = wr.signaled || slot.is_some();
            let flags = if hw_signaled { WorkRequestFlags::Signaled } else { WorkRequestFlags::none() };
            let wh = g.construct_wr(wrid::send(target as u32, seq), flags);
            let lb = match p.verb {
                Verb::Read { rkey, addr } => wh.setup_read(rkey, addr),
                Verb::Write { rkey, addr } => wh.setup_write(rkey, addr),
                Verb::WriteImm { rkey, addr, imm } => wh.setup_write_imm(rkey, addr, imm),
                Verb::Cas { rkey, addr, compare, swap } => wh.setup_atomic_compare_swap(rkey, addr, compare, swap),
                Verb::Faa { rkey, addr, add } => wh.setup_atomic_fetch_add(rkey, addr, add),
                Verb::Send => wh.setup_send(),
            };
            match &p.data {
                Data::Inline(b) => lb.setup_inline_data(b),
                Data::Staged(b) => {
                    let s = slot.expect("staged slot");
                    sys::set_sge(lb, staging_lkey, staging_base + s as u64 * SLOT as u64, b.len() as u32)
                }
                Data::Sge { addr, len, lkey } => sys::set_sge(lb, *lkey, *addr, *len),
            }
            posted.push(Posted { seq, wr_id: wr.wr_id, opcode: wr.op.opcode(), signaled: wr.signaled, staging: slot });
        }
        let ok = if posted.is_empty() {
            drop(g);
            true
        } else {
            g.post().is_ok()
        };
        let peer = h.peer;
        if ok {
            h.fifo.extend(posted);
        } else {
            // The NIC refused the list (QP in error, queue full): nothing of it was posted.
            for p in posted {
                if let Some(s) = p.staging {
                    self.free_slots.push(s);
                }
                self.local_done.push(Completion {
                    wr_id: p.wr_id,
                    qp: core,
                    opcode: p.opcode,
                    status: WcStatus::Flushed,
                    signaled: p.signaled,
                    peer,
                });
            }
        }
        for wr in dropped {
            // No staging slot: a WRITE cannot be dropped.
            self.fail_now(&wr, core, WcStatus::LocalLengthError, peer);
        }
    }

    /// Moves every queue pair to the error state (outstanding requests flush).
    pub fn close(&mut self) {
        self.udqp.set_error();
        for h in &mut self.hw {
            let mut a = QueuePairAttribute::new();
            a.setup_state(QueuePairState::Error);
            let _ = h.qp.modify(&a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc() -> NodeDescriptor {
        NodeDescriptor {
            lid: 7,
            gid: *b"\0\0\0\0\0\0\0\0\0\0\xff\xff\x0a\0\0\x01",
            workers: 2,
            nodes: 3,
            rc_qpn: vec![vec![17, 18, 19], vec![20, 21, 22]],
            ud_qpn: vec![100, 200],
            regions: vec![
                RegionDesc { addr: REGION_BASE, len: 4096, key: 11, remote: 0x7f00_0000_1000, rkey: 0xabc },
                RegionDesc { addr: 2 * REGION_BASE, len: 64, key: 12, remote: 0x7f00_0000_9000, rkey: 0xdef },
            ],
        }
    }

    #[test]
    fn descriptor_round_trips() {
        let d = desc();
        assert_eq!(NodeDescriptor::decode(&d.encode()).unwrap(), d);
    }

    #[test]
    fn descriptor_rejects_garbage() {
        let b = desc().encode();
        assert!(NodeDescriptor::decode(b"").is_err());
        assert!(NodeDescriptor::decode(b"127.0.0.1:4000|1|2|3|4").unwrap_err().contains("magic"));
        assert!(NodeDescriptor::decode(&b[..b.len() - 1]).is_err());
        let mut long = b.clone();
        long.push(0);
        assert!(NodeDescriptor::decode(&long).is_err());
        let mut v = b.clone();
        v[4] = 9;
        assert!(NodeDescriptor::decode(&v).unwrap_err().contains("version"));
        let mut big = desc();
        big.rc_qpn[0][0] = 1 << 24;
        assert!(NodeDescriptor::decode(&big.encode()).unwrap_err().contains("24 bits"));
        let mut z = b;
        z[23] = 0;
        z[24] = 0; // workers = 0
        assert!(NodeDescriptor::decode(&z).is_err());
    }

    #[test]
    fn status_mapping() {
        assert_eq!(map_status(Wcs::Success as u32), WcStatus::Success);
        assert_eq!(map_status(Wcs::RemoteAccessError as u32), WcStatus::RemoteAccessError);
        assert_eq!(map_status(Wcs::RemoteInvalidRequestError as u32), WcStatus::RemoteAccessError);
        assert_eq!(map_status(Wcs::RetryCounterExceededError as u32), WcStatus::RetryExceeded);
        assert_eq!(map_status(Wcs::ResponderNotReadyRetryCounterExceededError as u32), WcStatus::RetryExceeded);
        assert_eq!(map_status(Wcs::WorkRequestFlushedError as u32), WcStatus::Flushed);
        assert_eq!(map_status(Wcs::LocalProtectionError as u32), WcStatus::LocalProtectionError);
        assert_eq!(map_status(Wcs::LocalLengthError as u32), WcStatus::LocalLengthError);
        assert_eq!(map_status(Wcs::LocalQueuePairOperationError as u32), WcStatus::LocalQpOperationError);
        assert_eq!(map_status(Wcs::FatalError as u32), WcStatus::LocalQpOperationError);
        assert_eq!(map_status(9999), WcStatus::LocalQpOperationError);
    }

    fn table() -> Vec<LocalRegion> {
        vec![LocalRegion { addr: REGION_BASE, len: 4096, key: 5, real: 0x5000_0000, lkey: 0x99 }]
    }

    #[test]
    fn translation() {
        let (loc, rem) = (table(), desc().regions);
        let l = LocalBuf { lkey: 5, addr: REGION_BASE + 64, len: 32 };
        let r = RemoteBuf { rkey: 11, addr: REGION_BASE + 128, len: 32 };
        let p = translate(&Op::Read { local: l, remote: r }, true, &loc, &rem).unwrap();
        assert_eq!(p.verb, Verb::Read { rkey: 0xabc, addr: 0x7f00_0000_1000 + 128 });
        assert_eq!(p.data, Data::Sge { addr: 0x5000_0000 + 64, len: 32, lkey: 0x99 });
        let w = |n: usize| Op::Write { src: Payload::Inline(vec![1; n]), remote: RemoteBuf { len: n as u32, ..r } };
        assert!(matches!(translate(&w(16), true, &loc, &rem).unwrap().data, Data::Inline(_)));
        assert!(matches!(translate(&w(1000), true, &loc, &rem).unwrap().data, Data::Staged(_)));
        assert_eq!(translate(&w(5000), true, &loc, &rem), Err(WcStatus::LocalLengthError));
        let c = Op::Cas {
            local: l,
            remote: RemoteBuf { rkey: 12, addr: 2 * REGION_BASE + 8, len: 8 },
            compare: 1,
            swap: 2,
        };
        let p = translate(&c, true, &loc, &rem).unwrap();
        assert_eq!(p.verb, Verb::Cas { rkey: 0xdef, addr: 0x7f00_0000_9008, compare: 1, swap: 2 });
        assert_eq!(p.data, Data::Sge { addr: 0x5000_0040, len: 8, lkey: 0x99 });
        // Wrong keys and out-of-bounds ranges fail as the NIC would report them.
        let bad_r = Op::Read { local: l, remote: RemoteBuf { rkey: 12, ..r } };
        assert_eq!(translate(&bad_r, true, &loc, &rem), Err(WcStatus::RemoteAccessError));
        let oob = Op::Read { local: l, remote: RemoteBuf { addr: REGION_BASE + 4090, ..r } };
        assert_eq!(translate(&oob, true, &loc, &rem), Err(WcStatus::RemoteAccessError));
        let bad_l = Op::Read { local: LocalBuf { lkey: 6, ..l }, remote: r };
        assert_eq!(translate(&bad_l, true, &loc, &rem), Err(WcStatus::LocalProtectionError));
        // A SEND with a destination only on the UD QP, one-sided verbs only on RC.
        let dest = Some(Endpoint { node: NodeId(1), worker: 0 });
        let s = Op::Send { src: Payload::Inline(vec![1, 2, 3]), dest };
        assert_eq!(translate(&s, false, &loc, &rem).unwrap().verb, Verb::Send);
        assert_eq!(translate(&s, true, &loc, &rem), Err(WcStatus::LocalQpOperationError));
        assert_eq!(translate(&w(8), false, &loc, &rem), Err(WcStatus::LocalQpOperationError));
        // RC SEND up to a receive buffer, WRITE_WITH_IMM like a WRITE.
        let rc_send = |n: usize| Op::Send { src: Payload::Inline(vec![7; n]), dest: None };
        assert_eq!(translate(&rc_send(3), true, &loc, &rem).unwrap().verb, Verb::Send);
        assert_eq!(translate(&rc_send(SLOT as usize + 1), true, &loc, &rem), Err(WcStatus::LocalLengthError));
        assert_eq!(translate(&rc_send(3), false, &loc, &rem), Err(WcStatus::LocalQpOperationError));
        let imm = Op::WriteImm { src: Payload::Inline(vec![1; 8]), remote: r, imm: 9 };
        let p = translate(&imm, true, &loc, &rem).unwrap();
        assert_eq!(p.verb, Verb::WriteImm { rkey: 0xabc, addr: 0x7f00_0000_1000 + 128, imm: 9 });
        let imm_oob = Op::WriteImm {
            src: Payload::Inline(vec![1; 8]),
            remote: RemoteBuf { addr: REGION_BASE + 4092, ..r },
            imm: 9,
        };
        assert_eq!(translate(&imm_oob, true, &loc, &rem), Err(WcStatus::RemoteAccessError));
    }

    #[test]
    fn wr_ids() {
        assert_eq!(wrid::split(wrid::send(3, 77)), Ok((3, 77)));
        assert_eq!(wrid::split(wrid::send(0, (1 << 40) + 5)), Ok((0, 5)));
        assert_eq!(wrid::split(wrid::recv(9, 15)), Err((9, 15)));
    }

    #[test]
    fn memory_layout_matches_sockets() {
        let m = VerbsMemory::new(&[(100, 11, 5), (64, 12, 6)]);
        let r = m.regions();
        assert_eq!(r[0], MemoryRegion { addr: REGION_BASE, len: 100, rkey: 11, lkey: 5 });
        assert_eq!(r[1].addr, 2 * REGION_BASE);
        m.write(REGION_BASE + 3, b"hello, verbs").unwrap();
        let mut b = [0u8; 12];
        m.read(REGION_BASE + 3, &mut b).unwrap();
        assert_eq!(&b, b"hello, verbs");
        assert_eq!(m.cas_u64(2 * REGION_BASE + 8, 0, 9).unwrap(), 0);
        assert_eq!(m.faa_u64(2 * REGION_BASE + 8, 1).unwrap(), 9);
        assert_eq!(m.load_u64(2 * REGION_BASE + 8).unwrap(), 10);
        assert!(m.read(REGION_BASE + 99, &mut b).is_err());
        assert!(m.cas_u64(2 * REGION_BASE + 4, 0, 1).is_err());
        let t = m.local_table();
        assert_eq!(t[0].real % 8, 0);
        assert_eq!(t[0].lkey, 0); // not registered here
    }
}

/// What the node hands a worker thread must be able to move there.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<(WorkerQps, VerbsMemory, WorkerLink)>();
    send::<NodeDescriptor>();
};
