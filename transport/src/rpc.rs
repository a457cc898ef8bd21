//! RPC over UD SEND/RECV (FaSST-style, DrTM+H Sec. 3.1).
//!
//! Calls and replies are frames, each sent as its own datagram; all datagrams of one
//! event-loop iteration go out in one doorbell (batched sends) unless `doorbell_batching` is
//! off. With `piggyback` on, frames for the same worker are coalesced into as few datagrams as
//! the MTU allows, and replies wait (up to `piggyback_flush_ns`) to ride on the next request
//! to that worker: DrTM+H's passive ACK for two-sided primitives (Fig. 4). UD may lose datagrams, so a call that gets
//! no reply within `timeout_ns` is retransmitted up to `retries` times; servers remember recent
//! replies per caller and answer duplicates from that memory, so handlers run at most once.
//!
//! A call or reply larger than a datagram travels as fragments (eRPC's multi-packet messages):
//! frames of kind `FRAGMENT | kind`, each `offset u32 | total u32 | bytes`, which the receiver
//! reassembles before serving the call or taking the reply. A lost fragment loses the message,
//! and the caller's retransmission (or the server's remembered reply) sends it again.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
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
/// A fragment's payload header: offset u32 | total u32.
const FRAGMENT_HEADER: usize = 8;
/// Messages being reassembled per worker; the oldest is dropped beyond this (its sender
/// retransmits).
const MAX_PARTIALS: usize = 256;

#[derive(Clone, Debug, PartialEq)]
pub struct RpcConfig {
    /// Largest datagram payload (the UD MTU).
    pub mtu: u32,
    pub timeout_ns: Nanos,
    /// Retransmissions before a call fails with `Timeout`. 0 disables retransmission and
    /// the servers' duplicate memory.
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
            retries: 3,
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
    token: ReplyToken,
    costs: &'a CpuCosts,
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
        token: ReplyToken,
        costs: &'a CpuCosts,
    ) -> Self {
        HandlerCtx { me, src, now, mem, reply, cpu, deferred, notices, token, costs }
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
        let kind = match h[0] & !FRAGMENT {
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
        Some((Frame { kind, fragment, status: h[1], handler, call_id, payload }, start + len))
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
    /// Added to every attempt's timeout: how long the server may defer the reply on purpose.
    patience: Nanos,
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
    out: BTreeMap<Endpoint, OutQueue>,
    /// Calls awaiting a reply, indexed by `id - pending_base` (ids are handed out in order
    /// and answered roughly in order, so this stays short and needs no allocation per call).
    pending: VecDeque<Option<PendingCall>>,
    pending_base: CallId,
    deadlines: BTreeSet<(Nanos, CallId)>,
    /// Per caller, the calls served recently: when, and the reply (`None` while deferred).
    served: BTreeMap<Endpoint, Served>,
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

/// Calls served for one caller: when, and the reply (`None` while deferred).
type Served = BTreeMap<CallId, (Nanos, Option<Vec<u8>>)>;

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
    pub(crate) fn new(cfg: RpcConfig) -> Self {
        RpcState {
            cfg,
            next_call: 1,
            out: BTreeMap::new(),
            pending: VecDeque::new(),
            pending_base: 1,
            deadlines: BTreeSet::new(),
            served: BTreeMap::new(),
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

    fn enqueue(
        &mut self,
        dst: Endpoint,
        kind: FrameKind,
        status: u8,
        handler: u16,
        id: CallId,
        payload: &[u8],
        now: Nanos,
    ) {
        let mtu = self.cfg.mtu as usize;
        let q = self.out.entry(dst).or_default();
        if FRAME_HEADER + payload.len() <= mtu {
            Frame::encode(&mut q.bytes, kind, status, handler, id, payload);
            q.ends.push(q.bytes.len());
        } else {
            let chunk = mtu - FRAME_HEADER - FRAGMENT_HEADER;
            for (i, c) in payload.chunks(chunk).enumerate() {
                let len = FRAGMENT_HEADER + c.len();
                Frame::encode_header(&mut q.bytes, kind, FRAGMENT, status, handler, id, len);
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
        self.enqueue(dst, kind, STATUS_OK, handler, id, payload, now);
        if want_reply {
            let deadline = now + self.cfg.timeout_ns + patience;
            let keep = (self.cfg.retries > 0).then(|| payload.to_vec());
            self.insert_pending(id, PendingCall { coro, dst, handler, payload: keep, deadline, attempts: 1, patience });
            self.deadlines.insert((deadline, id));
        }
        Ok(id)
    }

    /// Queues a reply, or, if it cannot fit a datagram, an error the caller reports.
    pub(crate) fn queue_reply(&mut self, now: Nanos, token: ReplyToken, payload: &[u8]) {
        if payload.len() > MAX_MESSAGE {
            let err = [(payload.len() as u64).to_le_bytes(), (MAX_MESSAGE as u64).to_le_bytes()].concat();
            self.enqueue(token.to, FrameKind::Reply, STATUS_REPLY_TOO_LARGE, 0, token.call_id, &err, now);
            return;
        }
        self.enqueue(token.to, FrameKind::Reply, STATUS_OK, 0, token.call_id, payload, now);
    }

    pub(crate) fn queue_unknown(&mut self, now: Nanos, token: ReplyToken, handler: u16) {
        self.enqueue(token.to, FrameKind::Reply, STATUS_UNKNOWN_HANDLER, handler, token.call_id, &[], now);
    }

    /// A reply arrived: the coroutine that waits for it, if the call is still pending.
    pub(crate) fn on_reply(&mut self, call_id: CallId) -> Option<(u32, Endpoint)> {
        let p = self.remove_pending(call_id)?;
        self.deadlines.remove(&(p.deadline, call_id));
        Some((p.coro, p.dst))
    }

    /// Whether a request is a duplicate; re-sends the remembered reply if there is one.
    pub(crate) fn duplicate(&mut self, now: Nanos, token: ReplyToken) -> bool {
        if self.cfg.retries == 0 {
            return false;
        }
        let Some((_, seen)) = self.served.get(&token.to).and_then(|m| m.get(&token.call_id)) else {
            return false;
        };
        if let Some(reply) = seen.clone() {
            self.queue_reply(now, token, &reply);
        }
        true
    }

    /// Remembers a served request (and its reply, `None` while deferred) for as long as its
    /// caller may retransmit it: a duplicate of a forgotten call would run its handler again
    /// (a second COMMIT could overwrite a later transaction's write). A count-bounded memory
    /// forgot calls a descheduled caller retransmitted; the bound is now time.
    pub(crate) fn remember(&mut self, now: Nanos, token: ReplyToken, reply: Option<&[u8]>) {
        if self.cfg.retries == 0 {
            return;
        }
        let horizon = (self.cfg.timeout_ns + self.cfg.max_patience_ns).saturating_mul(self.cfg.retries as u64 + 1);
        let m = self.served.entry(token.to).or_default();
        m.insert(token.call_id, (now, reply.map(|r| r.to_vec())));
        // Call ids grow per caller, so the oldest calls are first.
        while m.first_key_value().is_some_and(|(_, (at, _))| at.saturating_add(horizon) < now) {
            m.pop_first();
        }
    }

    /// Calls whose deadline passed: retransmitted, or failed after the last attempt.
    pub(crate) fn expire(&mut self, now: Nanos) -> Vec<(u32, CallId, RpcError)> {
        let mut failed = Vec::new();
        let (retries, timeout) = (self.cfg.retries, self.cfg.timeout_ns);
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            let p = self.pending_mut(id).expect("deadline without call");
            if p.attempts <= retries {
                if let Some(payload) = p.payload.clone() {
                    p.attempts += 1;
                    p.deadline = now + timeout + p.patience;
                    let (dst, handler, d) = (p.dst, p.handler, p.deadline);
                    self.retransmits += 1;
                    self.deadlines.insert((d, id));
                    self.enqueue(dst, FrameKind::Request, STATUS_OK, handler, id, &payload, now);
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
        for (dst, q) in self.out.iter_mut() {
            let due = q.has_request || !piggyback || q.oldest_reply.is_some_and(|t| now >= t + flush);
            if !due || q.ends.is_empty() {
                continue;
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
        }
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
            self.out.values().filter_map(|q| q.oldest_reply).min().map(|t| t + self.cfg.piggyback_flush_ns)
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
        let cfg = RpcConfig { timeout_ns: 1_000, retries: 3, ..RpcConfig::default() };
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

    /// Fragments reassemble in any order, once each, and a message over the limit is refused.
    #[test]
    fn fragments_reassemble_in_any_order() {
        let mut s = RpcState::new(RpcConfig { mtu: 256, ..RpcConfig::default() });
        let src = Endpoint { node: NodeId(2), worker: 1 };
        let msg: Vec<u8> = (0..1000u32).map(|i| (i * 31) as u8).collect();
        s.enqueue(src, FrameKind::Request, STATUS_OK, 7, 42, &msg, 0);
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
