//! The local path (`NodeState::local_path`): requests about records homed on the
//! coordinator's own node done by its CPU instead of its NIC, and the HCA rule that keeps
//! atomics on the NIC where the CPU's are not atomic with them (docs/transactions.md, "Local
//! and remote records").

use txbed_transport::{Ctx, Op, Payload};

use crate::error::TxnError;
use crate::node::{Bug, NodeState};

/// How a request reached its record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Path {
    /// The CPU, on its own node's memory (the local path).
    Local,
    /// The NIC: a verb (the loopback for a local record) or an RPC.
    Nic,
}

/// Planted bug shared by every protocol: the local path CASes with the CPU although the NIC's
/// atomics are HCA-level (the runner then sets `LocalPath::cpu_atomics`), so a coordinator
/// locking its own record and a remote one locking it through the NIC can both win.
pub const CPU_CAS_ON_HCA: Bug = Bug {
    name: "CpuCasOnHca",
    about: "local locks by CPU CAS on NICs whose atomics are HCA-level: a local and a remote lock of one record can both win (lost update)",
};

/// Whether the CPU does `ops` about a record homed on `home` (the local path), rather than the
/// NIC: the record is local and the local path on, and the list CASes nothing, or the CPU's
/// atomics are atomic with the NIC's. With HCA-level atomicity a CPU CAS could interleave with
/// a remote coordinator's NIC CAS of the same lock word and both win, so local locking stays
/// on the NIC ("local atomic operations must also use RNIC's atomic operations", DrTM+H
/// Sec. 5.2). Plain loads and stores are coherent with the NIC's accesses either way.
pub fn by_cpu(n: &NodeState, home: u16, ops: &[(Op, bool)]) -> bool {
    n.local(home)
        && (n.local_path.cpu_atomics || !ops.iter().any(|(op, _)| matches!(op, Op::Cas { .. } | Op::Faa { .. })))
}

/// Does with the CPU what the NIC would do with `ops` on this node's own memory, in order: a
/// READ puts the bytes in its local buffer, a WRITE stores its payload, a CAS or FAA is a CPU
/// atomic whose old value lands in its local buffer. The list is about one record, found by
/// its offset: one cache-missing access (`CpuCosts::memory_miss_ns`, as a handler pays for a
/// tuple it finds by offset), plus the bytes a WRITE stores. A READ's bytes are
/// charged when the caller copies them out of its buffer, as after a NIC READ: a local read is
/// one copy of the record. Nothing is posted, so nothing completes: the results are there when
/// this returns.
pub fn on_cpu(ctx: &Ctx, ops: &[(Op, bool)]) -> Result<(), TxnError> {
    let miss = ctx.costs().memory_miss_ns;
    ctx.compute(miss);
    for (op, _) in ops {
        match op {
            Op::Read { local, remote } => ctx.place_local(local.addr, remote.addr, remote.len as usize)?,
            Op::Write { src: Payload::Inline(bytes), remote } => ctx.write_local(remote.addr, bytes)?,
            Op::Write { src: Payload::Local(src), remote } => {
                ctx.place_local(remote.addr, src.addr, src.len as usize)?;
                let copy = ctx.costs().copy_ns(src.len as usize);
                ctx.compute(copy);
            }
            Op::Cas { local, remote, compare, swap } => {
                let old = ctx.cas_local(remote.addr, *compare, *swap)?;
                ctx.store_local(local.addr, old)?;
            }
            Op::Faa { local, remote, add } => {
                let old = ctx.faa_local(remote.addr, *add)?;
                ctx.store_local(local.addr, old)?;
            }
            // Messages, not accesses to a record: protocols send them to other nodes only.
            Op::WriteImm { .. } | Op::Send { .. } => {
                return Err(TxnError::Unsupported("a WRITE_WITH_IMM or SEND on the local path"))
            }
        }
    }
    Ok(())
}
