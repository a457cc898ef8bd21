//! The only unsafe code of the verbs backend: asking the dynamic loader whether libibverbs loads,
//! registering memory and attaching SGEs through sideway, and the worker's UD QP (`UdQp`: QP, CQ
//! and address handles made with raw libibverbs calls through `rdma-mummy-sys`).
//!
//! `sideway` reaches libibverbs through `rdma-mummy-sys`, whose wrappers `dlopen("libibverbs.so.1")`
//! at start-up and, when that fails, make every call fail with `EOPNOTSUPP`. That errno alone cannot
//! tell "library missing" from "operation not supported", so we ask the loader ourselves.
//!
//! Invariants this module keeps:
//! - the name passed to `dlopen` is a NUL-terminated C string literal that lives for the program;
//! - the handle returned by `dlopen` is checked for NULL and, when non-NULL, closed exactly once
//!   with `dlclose` and never used after; no symbol is looked up through it, so no foreign function
//!   is ever called through a pointer from here;
//! - the string returned by `dlerror` is checked for NULL and copied out at once (it is only valid
//!   until the next `dl*` call on this thread).
//!
//! `dlopen` of a library that is already loaded only bumps its reference count, and `dlclose` drops
//! it again, so this does not unload the copy the binding uses.

use std::ffi::CStr;

/// The soname `rdma-mummy-sys` loads.
pub const LIBIBVERBS: &str = "libibverbs.so.1";

/// `Ok(())` if the dynamic loader can load libibverbs in this process, else the loader's message.
pub fn load_libibverbs() -> Result<(), String> {
    const NAME: &CStr = c"libibverbs.so.1";
    // SAFETY: NAME is a valid NUL-terminated string for the duration of the call (see invariants).
    let handle = unsafe { libc::dlopen(NAME.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror takes no arguments; its result is checked for NULL and copied before any
        // other dl* call can invalidate it.
        let msg = unsafe {
            let p = libc::dlerror();
            if p.is_null() {
                format!("{LIBIBVERBS}: cannot be loaded")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        return Err(msg);
    }
    // SAFETY: handle is the non-NULL result of the dlopen above and is closed exactly once here.
    unsafe {
        libc::dlclose(handle);
    }
    Ok(())
}

// ---- Memory registration and scatter/gather entries (the verbs transport, `transport.rs`) ----
//
// Invariants the transport keeps for the two functions below:
// - every range handed to `register_words` is a live `[AtomicU64]` slice owned by a structure that
//   also owns the returned `MemoryRegion` and declares it *before* the slice, so the region is
//   deregistered (Rust drops fields in declaration order) before the memory is freed; the memory
//   is never moved (it is a boxed slice) while registered;
// - the NIC writing those words behind Rust's back is sound because every CPU access to them goes
//   through `AtomicU64` (interior mutability), never through `&[u8]`/`&mut [u8]`;
// - `set_sge` is only called with an (lkey, addr, len) that `transport::translate` or the
//   receive/staging ring produced from such a registered range, on a queue pair owned by the same
//   `VerbsWorker` that keeps a clone of the memory, so the range outlives the work request.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use sideway::ibverbs::memory_region::{MemoryRegion, RegisterMemoryRegionError};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::SetScatterGatherEntry;
use sideway::ibverbs::AccessFlags;

/// Registers `words` (at least one word) with `access`; see the invariants above.
pub(crate) fn register_words(
    pd: &Arc<ProtectionDomain>,
    words: &[AtomicU64],
    access: AccessFlags,
) -> Result<Arc<MemoryRegion>, RegisterMemoryRegionError> {
    // SAFETY: `words` is a live allocation of `words.len() * 8` bytes; the caller keeps it alive
    // and in place for as long as the returned region (see the invariants above).
    unsafe { pd.reg_mr(words.as_ptr() as usize, std::mem::size_of_val(words), access) }
}

/// Attaches one scatter/gather entry to a work request; see the invariants above.
pub(crate) fn set_sge<H: SetScatterGatherEntry>(h: H, lkey: u32, addr: u64, len: u32) {
    // SAFETY: (lkey, addr, len) lies inside a registered range that outlives the request.
    unsafe { h.setup_sge(lkey, addr, len) }
}

// ---- The worker's UD QP, raw libibverbs through `rdma-mummy-sys` (sideway 0.4.3 has no UD) ----
//
// sideway cannot create address handles, give a send its UD address, set a QP's qkey or read
// `src_qp` from a completion, so the UD QP, its CQ and its address handles are made here with
// raw calls. Invariants `UdQp` keeps:
// - it owns a clone of the `Arc<ProtectionDomain>` its QP, CQ and AHs were made from; the PD
//   owns the device context, so the PD and the context outlive every raw object below;
// - `qp`, `cq` and every pointer in `ahs` are the non-NULL results of the create calls here,
//   used only through `&mut self` (one thread at a time: `UdQp` is `Send`, not `Sync`) and
//   destroyed exactly once in `Drop`, QP first (it refers to the CQ), then the AHs, then the CQ;
// - `post_recv` / `post_send` are only given (addr, len, lkey) from a registered range that the
//   owner of this `UdQp` keeps alive and in place while the request is outstanding (the same
//   rule as `set_sge` above); inline payloads are copied by `ibv_post_send` before it returns;
// - work requests and SGEs passed to `ibv_post_*` live on this stack frame for the whole call;
// - an AH index passed to `post_send` is checked against `ahs`.

use std::ptr::NonNull;

use rdma_mummy_sys as ib;

/// Where a UD send's bytes are.
pub(crate) enum UdData<'a> {
    Inline(&'a [u8]),
    Sge { addr: u64, len: u32, lkey: u32 },
}

/// One UD send: to the peer behind address handle `ah`, QP `qpn`.
pub(crate) struct UdSend<'a> {
    pub wr_id: u64,
    pub ah: usize,
    pub qpn: u32,
    pub qkey: u32,
    pub signaled: bool,
    pub data: UdData<'a>,
}

/// One work completion of the UD QP's CQ.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UdWc {
    pub wr_id: u64,
    pub status: u32,
    pub byte_len: u32,
    pub src_qp: u32,
}

/// A UD queue pair with its own CQ and address handles (see the invariants above).
pub(crate) struct UdQp {
    qp: NonNull<ib::ibv_qp>,
    cq: NonNull<ib::ibv_cq>,
    ahs: Vec<NonNull<ib::ibv_ah>>,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: the raw objects belong to this value alone and libibverbs objects may be used from any
// thread; `&mut self` on every use keeps it to one thread at a time.
unsafe impl Send for UdQp {}

fn last_os_error(what: &str, ret: i32) -> std::io::Error {
    let e = if ret > 0 { std::io::Error::from_raw_os_error(ret) } else { std::io::Error::last_os_error() };
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl UdQp {
    /// Creates a CQ of `cqe` entries and a UD QP (in RESET) on it.
    pub(crate) fn create(
        pd: &Arc<ProtectionDomain>,
        cqe: u32,
        send_wr: u32,
        recv_wr: u32,
        max_inline: u32,
    ) -> std::io::Result<UdQp> {
        // SAFETY: `pd.pd()` is the live PD owned by `pd`; its `context` field is the live device
        // context the PD was allocated from.
        let (pdp, ctx) = unsafe {
            let p = pd.pd().as_ptr();
            (p, (*p).context)
        };
        // SAFETY: `ctx` is live (above); no completion channel, vector 0.
        let cq = unsafe { ib::ibv_create_cq(ctx, cqe as i32, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        let cq = NonNull::new(cq).ok_or_else(|| last_os_error("ibv_create_cq (UD)", 0))?;
        // SAFETY: all-zero is a valid `ibv_qp_init_attr` (NULL pointers, zero caps).
        let mut init: ib::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq.as_ptr();
        init.recv_cq = cq.as_ptr();
        init.cap.max_send_wr = send_wr.max(1);
        init.cap.max_recv_wr = recv_wr.max(1);
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = max_inline;
        init.qp_type = ib::ibv_qp_type::IBV_QPT_UD;
        // SAFETY: `pdp` is live, `init` is a valid attribute block for the call.
        let qp = unsafe { ib::ibv_create_qp(pdp, &mut init) };
        let Some(qp) = NonNull::new(qp) else {
            let e = last_os_error("ibv_create_qp (UD)", 0);
            // SAFETY: `cq` was created above, has no QP, and is destroyed once here.
            unsafe { ib::ibv_destroy_cq(cq.as_ptr()) };
            return Err(e);
        };
        Ok(UdQp { qp, cq, ahs: Vec::new(), pd: pd.clone() })
    }

    pub(crate) fn qpn(&self) -> u32 {
        // SAFETY: `qp` is live (invariants); `qp_num` is set by `ibv_create_qp` and never changes.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    fn modify(&mut self, attr: &mut ib::ibv_qp_attr, mask: u32, what: &str) -> std::io::Result<()> {
        // SAFETY: `qp` is live and `attr` is a valid attribute block for the call.
        let r = unsafe { ib::ibv_modify_qp(self.qp.as_ptr(), attr, mask as i32) };
        if r != 0 {
            return Err(last_os_error(what, r));
        }
        Ok(())
    }

    /// RESET → INIT (pkey index 0, `port`, `qkey`) → RTR → RTS (`sq_psn`).
    pub(crate) fn activate(&mut self, port: u8, qkey: u32, sq_psn: u32) -> std::io::Result<()> {
        use ib::ibv_qp_attr_mask as m;
        // SAFETY: all-zero is a valid `ibv_qp_attr`.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = port;
        a.qkey = qkey;
        let mask = m::IBV_QP_STATE.0 | m::IBV_QP_PKEY_INDEX.0 | m::IBV_QP_PORT.0 | m::IBV_QP_QKEY.0;
        self.modify(&mut a, mask, "moving the UD queue pair to INIT")?;
        a.qp_state = ib::ibv_qp_state::IBV_QPS_RTR;
        self.modify(&mut a, m::IBV_QP_STATE.0, "moving the UD queue pair to RTR")?;
        a.qp_state = ib::ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = sq_psn & 0xff_ffff;
        self.modify(&mut a, m::IBV_QP_STATE.0 | m::IBV_QP_SQ_PSN.0, "moving the UD queue pair to RTS")
    }

    /// Moves the QP to ERROR (outstanding requests flush).
    pub(crate) fn set_error(&mut self) {
        // SAFETY: all-zero is a valid `ibv_qp_attr`.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::ibv_qp_state::IBV_QPS_ERR;
        let _ = self.modify(&mut a, ib::ibv_qp_attr_mask::IBV_QP_STATE.0, "moving the UD queue pair to ERROR");
    }

    /// Creates an address handle (GRH: `gid`, `sgid_index`, `hop_limit`, traffic class 0) and
    /// returns its index for `post_send`.
    pub(crate) fn add_ah(
        &mut self,
        gid: [u8; 16],
        lid: u16,
        port: u8,
        sgid_index: u8,
        hop_limit: u8,
    ) -> std::io::Result<usize> {
        // SAFETY: all-zero is a valid `ibv_ah_attr`.
        let mut a: ib::ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.grh.dgid = ib::ibv_gid { raw: gid };
        a.grh.sgid_index = sgid_index;
        a.grh.hop_limit = hop_limit;
        a.dlid = lid;
        a.is_global = 1;
        a.port_num = port;
        // SAFETY: the PD is live (held by `self.pd`) and `a` is a valid attribute block.
        let ah = unsafe { ib::ibv_create_ah(self.pd.pd().as_ptr(), &mut a) };
        let ah = NonNull::new(ah).ok_or_else(|| last_os_error("ibv_create_ah", 0))?;
        self.ahs.push(ah);
        Ok(self.ahs.len() - 1)
    }

    /// Posts one receive buffer; see the invariants above.
    pub(crate) fn post_recv(&mut self, wr_id: u64, addr: u64, len: u32, lkey: u32) -> std::io::Result<()> {
        let mut sge = ib::ibv_sge { addr, length: len, lkey };
        let mut wr = ib::ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list: &mut sge, num_sge: 1 };
        let mut bad = std::ptr::null_mut();
        // SAFETY: `qp` is live; `wr` and `sge` live for the call; the buffer is registered and
        // outlives the request (invariants).
        let r = unsafe { ib::ibv_post_recv(self.qp.as_ptr(), &mut wr, &mut bad) };
        if r != 0 {
            return Err(last_os_error("ibv_post_recv (UD)", r));
        }
        Ok(())
    }

    /// Posts `list` as one chained `ibv_post_send`; on error nothing of it is assumed posted.
    pub(crate) fn post_send(&mut self, list: &[UdSend<'_>]) -> std::io::Result<()> {
        if list.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<ib::ibv_sge> = Vec::with_capacity(list.len());
        for s in list {
            if s.ah >= self.ahs.len() {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no such address handle"));
            }
            sges.push(match s.data {
                UdData::Inline(b) => ib::ibv_sge { addr: b.as_ptr() as u64, length: b.len() as u32, lkey: 0 },
                UdData::Sge { addr, len, lkey } => ib::ibv_sge { addr, length: len, lkey },
            });
        }
        let mut wrs: Vec<ib::ibv_send_wr> = Vec::with_capacity(list.len());
        for (i, s) in list.iter().enumerate() {
            // SAFETY: all-zero is a valid `ibv_send_wr` (NULL pointers, zero unions).
            let mut wr: ib::ibv_send_wr = unsafe { std::mem::zeroed() };
            wr.wr_id = s.wr_id;
            wr.sg_list = &mut sges[i];
            wr.num_sge = 1;
            wr.opcode = ib::ibv_wr_opcode::IBV_WR_SEND;
            let mut flags = 0;
            if s.signaled {
                flags |= ib::ibv_send_flags::IBV_SEND_SIGNALED.0;
            }
            if matches!(s.data, UdData::Inline(_)) {
                flags |= ib::ibv_send_flags::IBV_SEND_INLINE.0;
            }
            wr.send_flags = flags;
            wr.wr.ud = ib::ud_t { ah: self.ahs[s.ah].as_ptr(), remote_qpn: s.qpn, remote_qkey: s.qkey };
            wrs.push(wr);
        }
        // Chain after the vector stops moving.
        let base = wrs.as_mut_ptr();
        for i in 0..wrs.len() - 1 {
            // SAFETY: `i + 1 < wrs.len()`, so the pointer is inside the vector.
            wrs[i].next = unsafe { base.add(i + 1) };
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: `qp` is live; the chained requests, their SGEs and inline bytes live for the
        // call; registered ranges outlive the requests (invariants); AH indices were checked.
        let r = unsafe { ib::ibv_post_send(self.qp.as_ptr(), base, &mut bad) };
        if r != 0 {
            return Err(last_os_error("ibv_post_send (UD)", r));
        }
        Ok(())
    }

    /// Polls up to 32 completions into `out`.
    pub(crate) fn poll(&mut self, out: &mut Vec<UdWc>) {
        // SAFETY: all-zero is a valid `ibv_wc`.
        let mut wc: [ib::ibv_wc; 32] = unsafe { std::mem::zeroed() };
        // SAFETY: `cq` is live and `wc` has room for 32 entries.
        let n = unsafe { ib::ibv_poll_cq(self.cq.as_ptr(), wc.len() as i32, wc.as_mut_ptr()) };
        for w in wc.iter().take(n.max(0) as usize) {
            out.push(UdWc { wr_id: w.wr_id, status: w.status, byte_len: w.byte_len, src_qp: w.src_qp });
        }
    }
}

impl Drop for UdQp {
    fn drop(&mut self) {
        // SAFETY: each object is live and destroyed exactly once, QP before the AHs and the CQ
        // it uses (invariants); the PD is still held by `self.pd`.
        unsafe {
            ib::ibv_destroy_qp(self.qp.as_ptr());
            for ah in self.ahs.drain(..) {
                ib::ibv_destroy_ah(ah.as_ptr());
            }
            ib::ibv_destroy_cq(self.cq.as_ptr());
        }
    }
}
