//! RPC over UD SEND/RECV (FaSST-style, DrTM+H Sec. 3.1).
//!
//! Calls and replies are frames, each sent as its own datagram; all datagrams of one
//! event-loop iteration go out in one doorbell (batched sends) unless `doorbell_batching` is
//! off. With `piggyback` on, frames for the same worker are coalesced into as few datagrams as
//! the MTU allows, and replies wait (up to `piggyback_flush_ns`) to ride on the next request
//! to that worker: DrTM+H's passive ACK for two-sided primitives (Fig. 4). UD may lose datagrams, so a call that gets
//! no reply within its retransmission timeout (RTO) is sent again; servers remember recent
//! replies per caller and answer duplicates from that memory, so handlers run at most once.
//!
//! The RTO follows RFC 6298 per peer endpoint: SRTT and RTTVAR from measured round trips,
//! RTO = SRTT + 4 RTTVAR clamped to `[rto_min_ns, rto_max_ns]` (`timeout_ns` before the first
//! sample), doubled on each retransmission of a call (up to `rto_max_ns`). Karn's rule: only a
//! call answered on its first transmission gives a sample, and never one whose reply the server
//! deferred on purpose (a lock wait is not a round trip). A server that still holds a deferred
//! call answers its retransmission with a PENDING frame: the caller then knows the peer is
//! alive and waiting, so `retries` bounds transmissions left unanswered, not waiting.
//!
//! A call or reply larger than a datagram travels as fragments (eRPC's multi-packet messages):
//! frames of kind `FRAGMENT | kind`, each `offset u32 | total u32 | bytes`, which the receiver
//! reassembles before serving the call or taking the reply. A lost fragment loses the message,
//! and the caller's retransmission (or the server's remembered reply) sends it again.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rustc_hash::{FxHashMap, FxHashSet};
use std::fmt;

use crate::memory::HostMemory;
use crate::verbs::{Endpoint, Nanos};
use crate::worker::CpuCosts;

/// Identifies one call of one worker.
pub type CallId = u64;

/// Frame header: kind u8 | status u8 | handler u16 | payload length u32 | call id u64.
pub const FRAME_HEADER: usize = 16;
/// Largest call or reply payload, fragmented across datagrams when over the MTU.
pub const MAX_MESSAGE: usize = 1 << 20;
/// Kind bit of a fragment frame.
const FRAGMENT: u8 = 0x10;
/// Kind bit of a reply the server deferred (not a round-trip sample for the caller's RTO).
const DEFERRED: u8 = 0x20;
/// A fragment's payload header: offset u32 | total u32.
const FRAGMENT_HEADER: usize = 8;
/// Messages being reassembled per worker; the oldest is dropped beyond this (its sender
/// retransmits).
const MAX_PARTIALS: usize = 256;

#[derive(Clone, Debug, PartialEq)]
pub struct RpcConfig {
    /// Largest datagram payload (the UD MTU).
    pub mtu: u32,
    /// RTO towards a peer before any round trip to it is measured (RFC 6298's initial RTO).
    pub timeout_ns: Nanos,
    /// Floor of the measured RTO: round trips vary with the server's load more than
    /// RTTVAR shows at first, and a spurious retransmission costs a datagram each way.
    pub rto_min_ns: Nanos,
    /// Cap of the RTO and of its exponential backoff (the floor, if that is higher).
    pub rto_max_ns: Nanos,
    /// Transmissions of a call left unanswered (neither reply nor PENDING) after the first,
    /// before it fails with `Timeout`. 0 disables retransmission and the servers' duplicate
    /// memory.
    pub retries: u32,
    pub piggyback: bool,
    pub piggyback_flush_ns: Nanos,
    /// Post all datagrams of one event-loop iteration with one doorbell (otherwise one
    /// doorbell each).
    pub doorbell_batching: bool,
    /// The longest a caller may wait for a reply its server defers on purpose (`Ctx::rpc_patient`,
    /// e.g. CALVIN's outcome at the end of an epoch): servers remember calls this much longer, so
    /// a retransmission of a patient call is never mistaken for a new one.
    pub max_patience_ns: Nanos,
}

impl Default for RpcConfig {
    fn default() -> Self {
        RpcConfig {
            mtu: 4096,
            timeout_ns: 2_000_000,
            rto_min_ns: 50_000,
            rto_max_ns: 2_000_000,
            // With 3, four silent transmissions in a row (p = 0.02^4 at 1% loss each way)
            // failed about one run in fifty of the quickstart; with 8 it is ~5e-16 per call,
            // and the backoff still gives up on a silent peer within ~10 ms.
            retries: 8,
            piggyback: false,
            piggyback_flush_ns: 5_000,
            doorbell_batching: true,
            max_patience_ns: 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RpcError {
    /// No reply after every retransmission: the peer is dead, unreachable or overloaded.
    Timeout { dst: Endpoint, handler: u16, attempts: u32 },
    /// The call exceeds `MAX_MESSAGE`.
    TooLarge { len: usize, max: usize },
    /// The peer has no handler with this id.
    UnknownHandler { dst: Endpoint, handler: u16 },
    /// The handler's reply exceeds `MAX_MESSAGE` (the peer sent this error instead).
    ReplyTooLarge { dst: Endpoint, len: usize, max: usize },
    /// The reply was never delivered (a bug in the caller's use of the API).
    Lost,
    /// The membership declared `dst`'s node down: the call was not sent, or its reply will
    /// never come.
    PeerDown { dst: Endpoint, handler: u16 },
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::Timeout { dst, handler, attempts } => write!(
                f,
                "RPC to handler {handler} at {dst} got no reply after {attempts} attempts: the peer is dead, unreachable or overloaded"
            ),
            RpcError::TooLarge { len, max } => {
                write!(f, "RPC message of {len} bytes exceeds the {max}-byte limit")
            }
            RpcError::UnknownHandler { dst, handler } => write!(f, "{dst} has no RPC handler {handler}"),
            RpcError::ReplyTooLarge { dst, len, max } => {
                write!(f, "the reply from {dst} ({len} bytes) exceeds the {max}-byte RPC message limit")
            }
            RpcError::Lost => write!(f, "RPC reply was not collected"),
            RpcError::PeerDown { dst, handler } => {
                write!(f, "RPC to handler {handler} at {dst}: the membership declared node {} down", dst.node.0)
            }
        }
    }
}

impl std::error::Error for RpcError {}

/// Where a deferred reply must go.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReplyToken {
    pub to: Endpoint,
    pub call_id: CallId,
}

/// What a handler did with a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Handled {
    /// The reply buffer holds the reply.
    Reply,
    /// The handler kept the token and will reply later (e.g. WAIT-DIE wait lists).
    Defer,
    /// No reply (one-way requests).
    NoReply,
}

/// An RPC handler: runs on the participant's worker, in its event loop.
pub type HandlerFn = dyn Fn(&mut HandlerCtx<'_>, &[u8]) -> Handled;

/// What a handler sees: the caller, the clock, local memory, and the reply buffer.
pub struct HandlerCtx<'a> {
    pub me: Endpoint,
    pub src: Endpoint,
    pub now: Nanos,
    pub mem: &'a dyn HostMemory,
    pub reply: &'a mut Vec<u8>,
    cpu: &'a mut Nanos,
    deferred: &'a mut Vec<(ReplyToken, Vec<u8>)>,
    notices: &'a mut Vec<Notice>,
    wakes: &'a mut Vec<u32>,
    token: ReplyToken,
    costs: &'a CpuCosts,
    clock: Option<&'a crate::clock::NodeClock>,
}

/// A one-way message a handler sends once it has run (see [`HandlerCtx::notify`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Notice {
    pub dst: Endpoint,
    pub handler: u16,
    pub payload: Vec<u8>,
}

impl<'a> HandlerCtx<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: Endpoint,
        src: Endpoint,
        now: Nanos,
        mem: &'a dyn HostMemory,
        reply: &'a mut Vec<u8>,
        cpu: &'a mut Nanos,
        deferred: &'a mut Vec<(ReplyToken, Vec<u8>)>,
        notices: &'a mut Vec<Notice>,
        wakes: &'a mut Vec<u32>,
        token: ReplyToken,
        costs: &'a CpuCosts,
        clock: Option<&'a crate::clock::NodeClock>,
    ) -> Self {
        HandlerCtx { me, src, now, mem, reply, cpu, deferred, notices, wakes, token, costs, clock }
    }
    /// The synchronized clock at the handler's time, as `Ctx::clock` (a participant checking
    /// a lease).
    pub fn clock(&self) -> crate::clock::ClockReading {
        self.clock.map_or(crate::clock::ClockReading::ideal(self.now), |c| c.read(self.now))
    }
    /// Charges handler CPU work.
    pub fn compute(&mut self, ns: Nanos) {
        *self.cpu += ns;
    }
    /// Charges `misses` dependent cache-missing memory accesses (finding a record by key:
    /// its bucket, then its tuple; by offset: the tuple).
    pub fn memory_misses(&mut self, misses: u64) {
        *self.cpu += misses * self.costs.memory_miss_ns;
    }
    /// Charges copying `bytes` (applying a log record, building a reply by hand).
    pub fn copy(&mut self, bytes: usize) {
        *self.cpu += self.costs.copy_ns(bytes);
    }
    /// The token for replying to this request later.
    pub fn token(&self) -> ReplyToken {
        self.token
    }
    /// Sends a reply to an earlier, deferred request.
    pub fn reply_to(&mut self, token: ReplyToken, payload: Vec<u8>) {
        self.deferred.push((token, payload));
    }
    /// Sends a one-way message to `handler` at `dst` once this handler has run: how a
    /// participant tells a caller of a one-way request what came of it in the background
    /// (a log backup reporting the bytes it reclaimed, DrTM+H Sec. 5.4), with no coroutine
    /// waiting for it.
    pub fn notify(&mut self, dst: Endpoint, handler: u16, payload: Vec<u8>) {
        self.notices.push(Notice { dst, handler, payload });
    }
    /// Ends the sleep (`Ctx::sleep`) of this worker's coroutine `coroutine` once this handler
    /// has run, as if its timer fired now: a server coroutine idle until a request it must
    /// serve arrives, rather than polling. A coroutine not sleeping is left alone.
    pub fn wake(&mut self, coroutine: u32) {
        self.wakes.push(coroutine);
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum FrameKind {
    Request,
    Reply,
    OneWay,
}

const STATUS_OK: u8 = 0;
const STATUS_UNKNOWN_HANDLER: u8 = 1;
/// The reply exceeded `MAX_MESSAGE`; the payload is `length u64 | limit u64`.
const STATUS_REPLY_TOO_LARGE: u8 = 2;
/// The server holds the call (its handler deferred the reply): the caller keeps waiting.
pub(crate) const STATUS_PENDING: u8 = 3;

/// A one-way RPC message to `handler` as raw bytes, for carrying an RPC over something other
/// than the RPC layer's own datagrams (an RC SEND: the receiving worker serves it the same way).
pub fn oneway_message(handler: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    Frame::encode(&mut out, FrameKind::OneWay, STATUS_OK, handler, 0, payload);
    out
}

pub(crate) struct Frame<'a> {
    pub kind: FrameKind,
    /// A piece of a larger message (payload `offset u32 | total u32 | bytes`).
    pub fragment: bool,
    /// A reply the server deferred.
    pub deferred: bool,
    pub status: u8,
    pub handler: u16,
    pub call_id: CallId,
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    fn encode(out: &mut Vec<u8>, kind: FrameKind, status: u8, handler: u16, call_id: CallId, payload: &[u8]) {
        Self::encode_header(out, kind, 0, status, handler, call_id, payload.len());
        out.extend_from_slice(payload);
    }

    fn encode_header(
        out: &mut Vec<u8>,
        kind: FrameKind,
        flags: u8,
        status: u8,
        handler: u16,
        call_id: CallId,
        len: usize,
    ) {
        let k = match kind {
            FrameKind::Request => 1,
            FrameKind::Reply => 2,
            FrameKind::OneWay => 3,
        };
        out.push(k | flags);
        out.push(status);
        out.extend_from_slice(&handler.to_le_bytes());
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&call_id.to_le_bytes());
    }

    /// The bytes of a fragment: (offset, total, bytes).
    pub(crate) fn fragment_part(&self) -> Option<(usize, usize, &'a [u8])> {
        let p = self.payload;
        let off = u32::from_le_bytes(p.get(0..4)?.try_into().ok()?) as usize;
        let total = u32::from_le_bytes(p.get(4..8)?.try_into().ok()?) as usize;
        Some((off, total, &p[FRAGMENT_HEADER..]))
    }

    /// Decodes the frame at `off`; `None` at the end or on a malformed datagram (a corrupt
    /// datagram is dropped, as UD would drop it on a bad checksum).
    pub(crate) fn decode(buf: &'a [u8], off: usize) -> Option<(Frame<'a>, usize)> {
        let h = buf.get(off..off + FRAME_HEADER)?;
        let fragment = h[0] & FRAGMENT != 0;
        let deferred = h[0] & DEFERRED != 0;
        let kind = match h[0] & !(FRAGMENT | DEFERRED) {
            1 => FrameKind::Request,
            2 => FrameKind::Reply,
            3 => FrameKind::OneWay,
            _ => return None,
        };
        let handler = u16::from_le_bytes([h[2], h[3]]);
        let len = u32::from_le_bytes(h[4..8].try_into().ok()?) as usize;
        let call_id = u64::from_le_bytes(h[8..16].try_into().ok()?);
        let start = off + FRAME_HEADER;
        let payload = buf.get(start..start.checked_add(len)?)?;
        Some((Frame { kind, fragment, deferred, status: h[1], handler, call_id, payload }, start + len))
    }

    pub(crate) fn error(&self, dst: Endpoint) -> Option<RpcError> {
        let word = |i: usize| {
            let b = self.payload.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok());
            b.map_or(0, |b| u64::from_le_bytes(b) as usize)
        };
        match self.status {
            STATUS_OK => None,
            STATUS_UNKNOWN_HANDLER => Some(RpcError::UnknownHandler { dst, handler: self.handler }),
            _ => Some(RpcError::ReplyTooLarge { dst, len: word(0), max: word(1) }),
        }
    }
}

struct PendingCall {
    coro: u32,
    dst: Endpoint,
    handler: u16,
    /// Kept for retransmission (only when retries are enabled).
    payload: Option<Vec<u8>>,
    deadline: Nanos,
    attempts: u32,
    /// Transmissions since the last answer (reply or PENDING).
    unanswered: u32,
    /// When the first transmission was queued (for the round-trip sample).
    sent_at: Nanos,
    /// This attempt's RTO (backed off on each retransmission).
    rto: Nanos,
    /// Added to every attempt's timeout: how long the server may defer the reply on purpose.
    patience: Nanos,
}

/// RFC 6298's round-trip state towards one peer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct RttEstimate {
    pub srtt: Nanos,
    pub rttvar: Nanos,
}

impl RttEstimate {
    /// RFC 6298 Sec. 2: the first sample sets SRTT = R, RTTVAR = R/2; later ones
    /// RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, then SRTT = 7/8 SRTT + 1/8 R.
    fn update(e: Option<Self>, r: Nanos) -> Self {
        match e {
            None => RttEstimate { srtt: r, rttvar: r / 2 },
            Some(RttEstimate { srtt, rttvar }) => {
                RttEstimate { rttvar: (3 * rttvar + srtt.abs_diff(r)) / 4, srtt: (7 * srtt + r) / 8 }
            }
        }
    }
    /// SRTT + max(G, 4 RTTVAR), with a 1 ns clock granularity G.
    fn rto(&self) -> Nanos {
        self.srtt + (4 * self.rttvar).max(1)
    }
}

#[derive(Default)]
struct OutQueue {
    bytes: Vec<u8>,
    /// Frame boundaries (end offsets) so datagrams split between frames.
    ends: Vec<usize>,
    has_request: bool,
    oldest_reply: Option<Nanos>,
}

pub(crate) struct RpcState {
    cfg: RpcConfig,
    next_call: CallId,
    // Per-peer state (and `deferred`) is looked up on every call, reply and duplicate check,
    // in hash maps: a `BTreeMap` search over hundreds of peers missed the cache at each
    // level. Nothing iterates them (endpoint order comes from `queued`), so their order
    // cannot show.
    out: FxHashMap<Endpoint, OutQueue>,
    /// The endpoints whose queue in `out` holds frames: a worker talks to hundreds of peers
    /// and sends to a few at each step.
    queued: BTreeSet<Endpoint>,
    /// Calls awaiting a reply, indexed by `id - pending_base` (ids are handed out in order
    /// and answered roughly in order, so this stays short and needs no allocation per call).
    pending: VecDeque<Option<PendingCall>>,
    pending_base: CallId,
    deadlines: BTreeSet<(Nanos, CallId)>,
    /// Per caller, the calls answered recently: when, and the reply.
    served: FxHashMap<Endpoint, Served>,
    /// Calls whose handler deferred the reply and has not sent it yet: kept until it does,
    /// however long that takes (a retransmission must never run the handler again).
    deferred: FxHashSet<(Endpoint, CallId)>,
    /// Round-trip estimates per peer.
    rtt: FxHashMap<Endpoint, RttEstimate>,
    requeued: Vec<(Endpoint, Vec<u8>)>,
    /// Byte buffers of received datagrams, reused for outgoing ones.
    spare_bufs: Vec<Vec<u8>>,
    /// Fragmented messages being reassembled, by (sender, call, kind).
    partials: BTreeMap<(Endpoint, CallId, u8), Partial>,
    /// Partials started so far (their age, for dropping the oldest).
    partials_started: u64,
    /// Calls retransmitted so far.
    pub(crate) retransmits: u64,
}

/// Calls answered for one caller: when, and the reply.
type Served = BTreeMap<CallId, (Nanos, Vec<u8>)>;

/// A message being reassembled from fragments.
struct Partial {
    bytes: Vec<u8>,
    /// Offsets received (a retransmission repeats some).
    got: BTreeSet<usize>,
    filled: usize,
    started: u64,
}

/// Spare datagram buffers kept per worker; more are freed.
const SPARE_BUFS: usize = 256;

impl RpcState {
    #[cfg(test)]
    pub(crate) fn new(cfg: RpcConfig) -> Self {
        Self::with_first_call(cfg, 1)
    }

    /// An RPC state whose calls are numbered from `first`.
    pub(crate) fn with_first_call(cfg: RpcConfig, first: CallId) -> Self {
        RpcState {
            cfg,
            next_call: first,
            out: FxHashMap::default(),
            queued: BTreeSet::new(),
            pending: VecDeque::new(),
            pending_base: first,
            deadlines: BTreeSet::new(),
            served: FxHashMap::default(),
            deferred: FxHashSet::default(),
            rtt: FxHashMap::default(),
            requeued: Vec::new(),
            spare_bufs: Vec::new(),
            partials: BTreeMap::new(),
            partials_started: 0,
            retransmits: 0,
        }
    }

    /// Takes a fragment; returns the whole message once every fragment is here. Malformed
    /// fragments are dropped, as a corrupt datagram would be.
    pub(crate) fn reassemble(&mut self, src: Endpoint, frame: &Frame<'_>) -> Option<Vec<u8>> {
        let (off, total, bytes) = frame.fragment_part()?;
        if total > MAX_MESSAGE || off.checked_add(bytes.len())? > total || bytes.is_empty() {
            return None;
        }
        let key = (src, frame.call_id, frame.kind as u8);
        if self.partials.get(&key).is_some_and(|p| p.bytes.len() != total) {
            self.partials.remove(&key);
        }
        if !self.partials.contains_key(&key) && self.partials.len() >= MAX_PARTIALS {
            let oldest = self.partials.iter().min_by_key(|(_, p)| p.started).map(|(k, _)| *k)?;
            self.partials.remove(&oldest);
        }
        self.partials_started += 1;
        let started = self.partials_started;
        let p = self.partials.entry(key).or_insert_with(|| Partial {
            bytes: vec![0; total],
            got: BTreeSet::new(),
            filled: 0,
            started,
        });
        if p.got.insert(off) {
            p.bytes[off..off + bytes.len()].copy_from_slice(bytes);
            p.filled += bytes.len();
        }
        if p.filled < total {
            return None;
        }
        self.partials.remove(&key).map(|p| p.bytes)
    }

    fn pending_mut(&mut self, id: CallId) -> Option<&mut PendingCall> {
        let i = usize::try_from(id.checked_sub(self.pending_base)?).ok()?;
        self.pending.get_mut(i)?.as_mut()
    }

    fn insert_pending(&mut self, id: CallId, p: PendingCall) {
        if self.pending.is_empty() {
            self.pending_base = id;
        }
        // Ids only grow, so `id` is at or past the end.
        let i = (id - self.pending_base) as usize;
        debug_assert!(i >= self.pending.len(), "call id {id} reused");
        self.pending.resize_with(self.pending.len().max(i + 1), || None);
        self.pending[i] = Some(p);
    }

    fn remove_pending(&mut self, id: CallId) -> Option<PendingCall> {
        let i = usize::try_from(id.checked_sub(self.pending_base)?).ok()?;
        let p = self.pending.get_mut(i)?.take();
        while let Some(None) = self.pending.front() {
            self.pending.pop_front();
            self.pending_base += 1;
        }
        p
    }

    /// Hands back a received datagram's buffer for reuse by later sends.
    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare_bufs.len() < SPARE_BUFS {
            buf.clear();
            self.spare_bufs.push(buf);
        }
    }

    fn copy_out(spare: &mut Vec<Vec<u8>>, bytes: &[u8]) -> Vec<u8> {
        let mut v = spare.pop().unwrap_or_default();
        v.extend_from_slice(bytes);
        v
    }

    /// The largest request or reply payload one datagram carries.
    pub(crate) fn max_payload(&self) -> usize {
        self.cfg.mtu as usize - FRAME_HEADER
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        dst: Endpoint,
        kind: FrameKind,
        flags: u8,
        status: u8,
        handler: u16,
        id: CallId,
        payload: &[u8],
        now: Nanos,
    ) {
        let mtu = self.cfg.mtu as usize;
        let q = self.out.entry(dst).or_default();
        self.queued.insert(dst);
        if FRAME_HEADER + payload.len() <= mtu {
            Frame::encode_header(&mut q.bytes, kind, flags, status, handler, id, payload.len());
            q.bytes.extend_from_slice(payload);
            q.ends.push(q.bytes.len());
        } else {
            let chunk = mtu - FRAME_HEADER - FRAGMENT_HEADER;
            for (i, c) in payload.chunks(chunk).enumerate() {
                let len = FRAGMENT_HEADER + c.len();
                Frame::encode_header(&mut q.bytes, kind, FRAGMENT | flags, status, handler, id, len);
                q.bytes.extend_from_slice(&((i * chunk) as u32).to_le_bytes());
                q.bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                q.bytes.extend_from_slice(c);
                q.ends.push(q.bytes.len());
            }
        }
        if kind == FrameKind::Reply {
            q.oldest_reply.get_or_insert(now);
        } else {
            q.has_request = true;
        }
    }

    /// A fresh call id (for a call that never leaves the worker).
    pub(crate) fn next_id(&mut self) -> CallId {
        let id = self.next_call;
        self.next_call += 1;
        id
    }

    /// Queues a call. `Err` carries the id and the error if it cannot be sent at all.
    pub(crate) fn call(
        &mut self,
        now: Nanos,
        coro: u32,
        dst: Endpoint,
        handler: u16,
        payload: &[u8],
        want_reply: bool,
        patience: Nanos,
    ) -> Result<CallId, (CallId, RpcError)> {
        assert!(patience <= self.cfg.max_patience_ns, "a call's patience exceeds RpcConfig::max_patience_ns");
        let id = self.next_call;
        self.next_call += 1;
        if payload.len() > MAX_MESSAGE {
            return Err((id, RpcError::TooLarge { len: payload.len(), max: MAX_MESSAGE }));
        }
        let kind = if want_reply { FrameKind::Request } else { FrameKind::OneWay };
        self.enqueue(dst, kind, 0, STATUS_OK, handler, id, payload, now);
        if want_reply {
            let rto = self.rto(dst);
            let deadline = now + rto + patience;
            let keep = (self.cfg.retries > 0).then(|| payload.to_vec());
            let p = PendingCall {
                coro,
                dst,
                handler,
                payload: keep,
                deadline,
                attempts: 1,
                unanswered: 1,
                sent_at: now,
                rto,
                patience,
            };
            self.insert_pending(id, p);
            self.deadlines.insert((deadline, id));
        }
        Ok(id)
    }

    /// Queues a reply (`deferred`: its handler deferred it), or, if it cannot fit a
    /// datagram, an error the caller reports.
    pub(crate) fn queue_reply(&mut self, now: Nanos, token: ReplyToken, payload: &[u8], deferred: bool) {
        let flags = if deferred { DEFERRED } else { 0 };
        if payload.len() > MAX_MESSAGE {
            let err = [(payload.len() as u64).to_le_bytes(), (MAX_MESSAGE as u64).to_le_bytes()].concat();
            self.enqueue(token.to, FrameKind::Reply, flags, STATUS_REPLY_TOO_LARGE, 0, token.call_id, &err, now);
            return;
        }
        self.enqueue(token.to, FrameKind::Reply, flags, STATUS_OK, 0, token.call_id, payload, now);
    }

    pub(crate) fn queue_unknown(&mut self, now: Nanos, token: ReplyToken, handler: u16) {
        self.enqueue(token.to, FrameKind::Reply, 0, STATUS_UNKNOWN_HANDLER, handler, token.call_id, &[], now);
    }

    /// The RTO of a new call to `dst`.
    pub(crate) fn rto(&self, dst: Endpoint) -> Nanos {
        let raw = self.rtt.get(&dst).map_or(self.cfg.timeout_ns, |e| e.rto());
        raw.clamp(self.cfg.rto_min_ns, self.cfg.rto_max_ns.max(self.cfg.rto_min_ns))
    }

    /// The round-trip estimate towards `dst`, if measured.
    pub(crate) fn rtt_estimate(&self, dst: Endpoint) -> Option<RttEstimate> {
        self.rtt.get(&dst).copied()
    }

    /// A reply arrived at `now`: the coroutine that waits for it, if the call is still
    /// pending. A reply to a call sent once and not deferred by its server is a round-trip
    /// sample (Karn's rule: a retransmitted call's reply may answer either transmission).
    pub(crate) fn on_reply(
        &mut self,
        now: Nanos,
        src: Endpoint,
        call_id: CallId,
        deferred: bool,
    ) -> Option<(u32, Endpoint)> {
        // Only the endpoint the call went to answers it: a reply from another is a stray
        // (a delayed duplicate, an old incarnation's) and is dropped.
        if self.pending_mut(call_id)?.dst != src {
            return None;
        }
        let p = self.remove_pending(call_id)?;
        self.deadlines.remove(&(p.deadline, call_id));
        if p.attempts == 1 && !deferred && p.patience == 0 {
            let e = RttEstimate::update(self.rtt.get(&p.dst).copied(), now.saturating_sub(p.sent_at));
            self.rtt.insert(p.dst, e);
        }
        Some((p.coro, p.dst))
    }

    /// The server holds the call: it is alive and the handler is waiting, so the call's
    /// transmissions so far count as answered (the backoff stays).
    pub(crate) fn on_pending(&mut self, call_id: CallId) {
        if let Some(p) = self.pending_mut(call_id) {
            p.unanswered = 0;
        }
    }

    /// Whether a request is a duplicate; re-sends the remembered reply, or PENDING for a
    /// call whose handler has not replied yet.
    pub(crate) fn duplicate(&mut self, now: Nanos, token: ReplyToken) -> bool {
        if self.cfg.retries == 0 {
            return false;
        }
        if self.deferred.contains(&(token.to, token.call_id)) {
            self.enqueue(token.to, FrameKind::Reply, 0, STATUS_PENDING, 0, token.call_id, &[], now);
            return true;
        }
        let Some((_, reply)) = self.served.get(&token.to).and_then(|m| m.get(&token.call_id)) else {
            return false;
        };
        let reply = reply.clone();
        self.queue_reply(now, token, &reply, false);
        true
    }

    /// Remembers a served request: deferred (`None`) until its handler replies, then with its
    /// reply for as long as its caller may retransmit it: a duplicate of a forgotten call
    /// would run its handler again (a second COMMIT could overwrite a later transaction's
    /// write). A count-bounded memory forgot calls a descheduled caller retransmitted; the
    /// bound is now time.
    pub(crate) fn remember(&mut self, now: Nanos, token: ReplyToken, reply: Option<&[u8]>) {
        if self.cfg.retries == 0 {
            return;
        }
        let Some(reply) = reply else {
            self.deferred.insert((token.to, token.call_id));
            return;
        };
        self.deferred.remove(&(token.to, token.call_id));
        // After the reply, the caller sends at most `retries` + 1 more transmissions, each
        // at most an RTO (capped) plus its patience apart.
        let rto_cap = self.cfg.rto_max_ns.max(self.cfg.rto_min_ns);
        let horizon = (rto_cap + self.cfg.max_patience_ns).saturating_mul(self.cfg.retries as u64 + 1);
        let m = self.served.entry(token.to).or_default();
        m.insert(token.call_id, (now, reply.to_vec()));
        // Call ids grow per caller, so the oldest calls are first.
        while m.first_key_value().is_some_and(|(_, (at, _))| at.saturating_add(horizon) < now) {
            m.pop_first();
        }
    }

    /// `node` was declared down: its pending calls fail (returned as `expire` returns them),
    /// its queued frames are dropped, and what this worker remembers of its calls (served
    /// replies, deferred calls, partial messages, round trips) is forgotten: a restarted
    /// node numbers its calls from 1 again, and they must not pass for duplicates.
    pub(crate) fn peer_down(&mut self, node: u16) -> Vec<(u32, CallId, RpcError)> {
        let of = |e: &Endpoint| e.node.0 == node;
        let ids: Vec<CallId> = self
            .pending
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().filter(|p| of(&p.dst)).map(|_| self.pending_base + i as u64))
            .collect();
        let mut failed = Vec::new();
        for id in ids {
            let p = self.remove_pending(id).expect("listed");
            self.deadlines.remove(&(p.deadline, id));
            failed.push((p.coro, id, RpcError::PeerDown { dst: p.dst, handler: p.handler }));
        }
        self.out.retain(|e, _| !of(e));
        self.queued.retain(|e| !of(e));
        self.requeued.retain(|(e, _)| !of(e));
        self.served.retain(|e, _| !of(e));
        self.deferred.retain(|(e, _)| !of(e));
        self.partials.retain(|(e, _, _), _| !of(e));
        self.rtt.retain(|e, _| !of(e));
        failed
    }

    /// Calls whose deadline passed: retransmitted, or failed after the last attempt.
    pub(crate) fn expire(&mut self, now: Nanos) -> Vec<(u32, CallId, RpcError)> {
        let mut failed = Vec::new();
        let (retries, cap) = (self.cfg.retries, self.cfg.rto_max_ns.max(self.cfg.rto_min_ns));
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            let p = self.pending_mut(id).expect("deadline without call");
            if p.unanswered <= retries {
                if let Some(payload) = p.payload.clone() {
                    p.attempts += 1;
                    p.unanswered += 1;
                    p.rto = p.rto.saturating_mul(2).min(cap);
                    p.deadline = now + p.rto + p.patience;
                    let (dst, handler, d) = (p.dst, p.handler, p.deadline);
                    self.retransmits += 1;
                    self.deadlines.insert((d, id));
                    self.enqueue(dst, FrameKind::Request, 0, STATUS_OK, handler, id, &payload, now);
                    continue;
                }
            }
            let p = self.remove_pending(id).expect("checked");
            failed.push((p.coro, id, RpcError::Timeout { dst: p.dst, handler: p.handler, attempts: p.attempts }));
        }
        failed
    }

    /// Datagrams ready to go now, appended to `out`: every destination with a request, and
    /// destinations whose oldest waiting reply is due (immediately unless piggybacking).
    pub(crate) fn take_datagrams(&mut self, now: Nanos, out: &mut Vec<(Endpoint, Vec<u8>)>) {
        out.append(&mut self.requeued);
        let mtu = self.cfg.mtu as usize;
        let piggyback = self.cfg.piggyback;
        let flush = self.cfg.piggyback_flush_ns;
        let spare = &mut self.spare_bufs;
        let queues = &mut self.out;
        // In endpoint order, as walking every queue would; a queue not yet due stays queued.
        self.queued.retain(|dst| {
            let Some(q) = queues.get_mut(dst) else { return false };
            let due = q.has_request || !piggyback || q.oldest_reply.is_some_and(|t| now >= t + flush);
            if !due || q.ends.is_empty() {
                return !q.ends.is_empty();
            }
            if !piggyback {
                // One message per request and per reply (FaSST).
                let mut start = 0;
                for &end in &q.ends {
                    out.push((*dst, Self::copy_out(spare, &q.bytes[start..end])));
                    start = end;
                }
            } else {
                // Coalesce every frame for this worker, up to the MTU per datagram.
                let mut start = 0;
                let mut cut = 0;
                for &end in &q.ends {
                    if end - start > mtu {
                        out.push((*dst, Self::copy_out(spare, &q.bytes[start..cut])));
                        start = cut;
                    }
                    cut = end;
                }
                if cut > start {
                    out.push((*dst, Self::copy_out(spare, &q.bytes[start..cut])));
                }
            }
            q.bytes.clear();
            q.ends.clear();
            q.has_request = false;
            q.oldest_reply = None;
            false
        });
        // The UD QP refuses a datagram over the MTU: every frame fits one, and coalescing
        // stops at it.
        debug_assert!(out.iter().all(|(_, d)| d.len() <= mtu), "datagram over the MTU");
    }

    pub(crate) fn requeue(&mut self, later: impl IntoIterator<Item = (Endpoint, Vec<u8>)>) {
        self.requeued.extend(later);
    }

    /// The earliest retransmission deadline or piggyback flush.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        let d = self.deadlines.first().map(|&(t, _)| t);
        let p = if self.cfg.piggyback {
            self.queued
                .iter()
                .filter_map(|e| self.out.get(e)?.oldest_reply)
                .min()
                .map(|t| t + self.cfg.piggyback_flush_ns)
        } else {
            None
        };
        // Datagrams requeued for a full send queue go out on the next run, which the send
        // completion (selective signaling keeps one outstanding) triggers.
        [d, p].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::NodeId;

    /// A server remembers every call its caller may still retransmit, however many it served
    /// since (a count bound once let a late duplicate COMMIT run twice), and forgets it after.
    #[test]
    fn duplicates_are_recognised_for_the_whole_retransmission_horizon() {
        let cfg =
            RpcConfig { timeout_ns: 1_000, rto_min_ns: 1_000, rto_max_ns: 1_000, retries: 3, ..RpcConfig::default() };
        let mut s = RpcState::new(cfg);
        let to = Endpoint { node: NodeId(1), worker: 0 };
        let token = |call_id| ReplyToken { to, call_id };
        for id in 1..=50_000 {
            s.remember(id / 20, token(id), Some(b"ok"));
        }
        // 2.5 us later: call 1 (served at 0) is within 4 x 1 us of its caller's retries.
        assert!(s.duplicate(2_500, token(1)));
        assert!(!s.duplicate(2_500, token(50_001)));
        s.remember(4_001, token(50_001), Some(b"ok"));
        assert!(!s.duplicate(4_001, token(1)), "call 1 is past every retransmission");
        assert!(s.duplicate(4_001, token(49_999)));
    }

    /// RFC 6298 from measured samples: the first sets SRTT = R and RTTVAR = R/2, later ones
    /// smooth them; the RTO is SRTT + 4 RTTVAR within [floor, cap], the initial value before
    /// any sample; a retransmitted or deferred call's reply is no sample (Karn's rule), and
    /// each retransmission doubles the call's RTO up to the cap.
    #[test]
    fn rto_adapts_to_measured_round_trips() {
        let cfg = RpcConfig {
            timeout_ns: 1_000_000,
            rto_min_ns: 1_000,
            rto_max_ns: 500_000,
            retries: 3,
            ..RpcConfig::default()
        };
        let mut s = RpcState::new(cfg);
        let dst = Endpoint { node: NodeId(1), worker: 0 };
        assert_eq!(s.rto(dst), 500_000, "the initial RTO, capped");
        let mut t = 0;
        let mut rtt = |s: &mut RpcState, r: Nanos, deferred: bool| {
            let id = s.call(t, 0, dst, 1, b"x", true, 0).unwrap();
            t += r;
            assert_eq!(s.on_reply(t, dst, id, deferred), Some((0, dst)));
        };
        rtt(&mut s, 10_000, false);
        assert_eq!(s.rtt_estimate(dst), Some(RttEstimate { srtt: 10_000, rttvar: 5_000 }));
        assert_eq!(s.rto(dst), 30_000);
        rtt(&mut s, 2_000, false);
        // RTTVAR = 3/4 5000 + 1/4 |10000 - 2000| = 5750; SRTT = 7/8 10000 + 1/8 2000 = 9000.
        assert_eq!(s.rtt_estimate(dst), Some(RttEstimate { srtt: 9_000, rttvar: 5_750 }));
        assert_eq!(s.rto(dst), 32_000);
        for _ in 0..50 {
            rtt(&mut s, 2_000, false);
        }
        let e = s.rtt_estimate(dst).unwrap();
        assert!(e.srtt.abs_diff(2_000) < 100 && e.rttvar < 100, "{e:?}");
        assert!(s.rto(dst) < 3_000, "the RTO follows the round trip down: {}", s.rto(dst));
        rtt(&mut s, 400_000, true);
        assert_eq!(s.rtt_estimate(dst), Some(e), "a deferred reply is no sample");
        // Retransmissions back off from the measured RTO, doubling up to the cap.
        let rto = s.rto(dst);
        let id = s.call(t, 0, dst, 1, b"x", true, 0).unwrap();
        let mut at = t + rto;
        let mut waits = Vec::new();
        for _ in 0..3 {
            assert!(s.expire(at).is_empty());
            let (d, _) = *s.deadlines.first().unwrap();
            waits.push(d - at);
            at = d;
        }
        assert_eq!(waits, [2 * rto, 4 * rto, 8 * rto]);
        assert_eq!(s.expire(at).len(), 1, "the call fails after its retries");
        assert!(s.on_reply(at, dst, id, false).is_none());
        assert_eq!(s.rtt_estimate(dst), Some(e), "a retransmitted call gives no sample");
        assert_eq!(s.retransmits, 3);
    }

    /// A retransmission of a call its server still holds gets PENDING, which counts as an
    /// answer: the caller keeps waiting instead of giving up after `retries` silent attempts.
    #[test]
    fn pending_resets_the_unanswered_count_but_not_the_backoff() {
        let cfg =
            RpcConfig { timeout_ns: 1_000, rto_min_ns: 1_000, rto_max_ns: 4_000, retries: 1, ..RpcConfig::default() };
        let (mut c, mut srv) = (RpcState::new(cfg.clone()), RpcState::new(cfg));
        let (dst, me) = (Endpoint { node: NodeId(1), worker: 0 }, Endpoint { node: NodeId(0), worker: 0 });
        let id = c.call(0, 0, dst, 1, b"x", true, 0).unwrap();
        let token = ReplyToken { to: me, call_id: id };
        assert!(!srv.duplicate(0, token));
        srv.remember(0, token, None);
        let mut at = 1_000;
        for _ in 0..10 {
            assert!(c.expire(at).is_empty(), "gave up at {at} while the server holds the call");
            assert!(srv.duplicate(at, token));
            let q = &srv.out[&me];
            let (f, _) = Frame::decode(&q.bytes, 0).unwrap();
            assert_eq!((f.kind, f.status), (FrameKind::Reply, STATUS_PENDING));
            srv.out.clear();
            c.on_pending(id);
            at = c.deadlines.first().unwrap().0;
        }
        assert_eq!(c.pending_mut(id).unwrap().rto, 4_000, "backed off to the cap");
        srv.remember(at, token, Some(b"done"));
        assert!(srv.duplicate(at, token), "the reply is remembered for later duplicates");
        assert_eq!(c.on_reply(at, dst, id, true), Some((0, dst)));
        // Without PENDING, the call gives up after its retry.
        let id = c.call(at, 0, dst, 1, b"x", true, 0).unwrap();
        let d1 = c.deadlines.first().unwrap().0;
        assert!(c.expire(d1).is_empty());
        let d2 = c.deadlines.first().unwrap().0;
        assert!(matches!(c.expire(d2)[..], [(0, i, RpcError::Timeout { attempts: 2, .. })] if i == id));
    }

    /// Fragments reassemble in any order, once each, and a message over the limit is refused.
    #[test]
    fn fragments_reassemble_in_any_order() {
        let mut s = RpcState::new(RpcConfig { mtu: 256, ..RpcConfig::default() });
        let src = Endpoint { node: NodeId(2), worker: 1 };
        let msg: Vec<u8> = (0..1000u32).map(|i| (i * 31) as u8).collect();
        s.enqueue(src, FrameKind::Request, 0, STATUS_OK, 7, 42, &msg, 0);
        let q = &s.out[&src];
        let mut frames = Vec::new();
        let mut start = 0;
        for &end in &q.ends {
            assert!(end - start <= 256);
            frames.push(q.bytes[start..end].to_vec());
            start = end;
        }
        assert_eq!(frames.len(), 5);
        let mut r = RpcState::new(RpcConfig::default());
        let mut whole = None;
        for i in [3, 0, 0, 4, 1, 2] {
            let (f, _) = Frame::decode(&frames[i], 0).unwrap();
            assert!(f.fragment && f.kind == FrameKind::Request && f.handler == 7 && f.call_id == 42);
            assert!(whole.is_none(), "complete before the last fragment");
            whole = r.reassemble(src, &f);
        }
        assert_eq!(whole, Some(msg));
        assert!(r.partials.is_empty());
        let mut bad = frames[0].clone();
        bad[FRAME_HEADER + 4..FRAME_HEADER + 8].copy_from_slice(&((MAX_MESSAGE + 1) as u32).to_le_bytes());
        let (f, _) = Frame::decode(&bad, 0).unwrap();
        assert_eq!(r.reassemble(src, &f), None);
        assert!(r.partials.is_empty());
    }
}
