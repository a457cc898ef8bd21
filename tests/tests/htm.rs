//! The HTM model in the simulator (`transport::htm`, `Ctx::htm_region`, `Sim::enable_htm`):
//! regions commit their buffered writes at XEND, and conflicting accesses that land while a
//! region is open abort it, at their simulated time: one-sided RDMA from another node, and
//! plain CPU accesses of another worker. Each test can fail if the model breaks.

use txbed_sim::cpu::CpuProfile;
use txbed_tests::{cell, small_sim};
use txbed_transport::htm::Abort;
use txbed_transport::*;

/// The built-in Haswell profile with `system_aborts_per_ms` interrupts.
fn haswell(system_aborts_per_ms: f64) -> CpuProfile {
    CpuProfile { system_aborts_per_ms, ..CpuProfile::load("haswell").unwrap() }
}

fn remote(mr: MemoryRegion, off: u64, len: u32) -> RemoteBuf {
    RemoteBuf { rkey: mr.rkey, addr: mr.addr + off, len }
}

/// Node 1 worker 0 runs a 20 us region that reads word 0 and writes word 512 of a region;
/// node 0 does (or does not) RDMA-WRITE word 0 at about 5 us. The region aborts with
/// `ConflictRdma` exactly when the WRITE lands inside it; otherwise its write is in memory.
#[test]
fn an_rdma_write_landing_in_an_open_region_aborts_it() {
    for remote_write in [false, true] {
        let mut sim = small_sim(2, 1, 1, |_| {});
        let mr = sim.register_region(1, 4096);
        sim.enable_htm(&haswell(0.0));
        let out = cell::<Option<Result<u64, Abort>>>();
        let o = out.clone();
        sim.spawn(1, 0, move |ctx| async move {
            let r = ctx
                .htm_region(|tx| {
                    let mut b = [0u8; 8];
                    tx.read(mr.addr, &mut b).unwrap();
                    tx.write(mr.addr + 512, &7u64.to_le_bytes());
                    tx.compute(20_000);
                    u64::from_le_bytes(b)
                })
                .await;
            *o.borrow_mut() = Some(r);
        });
        if remote_write {
            sim.spawn(0, 0, move |ctx| async move {
                ctx.sleep(5_000).await;
                let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
                let w = Op::Write { src: Payload::Inline(9u64.to_le_bytes().to_vec()), remote: remote(mr, 0, 8) };
                ctx.post(qp, [(w, true)]).unwrap();
                ctx.wait().await.unwrap();
            });
        }
        sim.run_until(1_000_000);
        let got = out.borrow().clone().expect("the region ended");
        let mem = sim.memory(1);
        let written = mem.load_u64(mr.addr + 512).unwrap();
        if remote_write {
            assert_eq!(got, Err(Abort::ConflictRdma));
            assert_eq!(written, 0, "an aborted region's write is discarded");
        } else {
            assert_eq!(got, Ok(0));
            assert_eq!(written, 7, "a committed region's write lands at XEND");
        }
    }
}

/// A plain CPU write by another worker of the node to a line the region read aborts it
/// (`ConflictLocal`); a read of that line by the other worker does not.
#[test]
fn another_workers_write_aborts_a_reader_and_its_read_does_not() {
    for other_writes in [false, true] {
        let mut sim = small_sim(1, 2, 3, |_| {});
        let mr = sim.register_region(0, 4096);
        sim.enable_htm(&haswell(0.0));
        let out = cell::<Option<Result<(), Abort>>>();
        let o = out.clone();
        sim.spawn(0, 0, move |ctx| async move {
            let r = ctx
                .htm_region(|tx| {
                    let mut b = [0u8; 8];
                    tx.read(mr.addr + 64, &mut b).unwrap();
                    tx.compute(10_000);
                })
                .await;
            *o.borrow_mut() = Some(r);
        });
        sim.spawn(0, 1, move |ctx| async move {
            ctx.sleep(2_000).await;
            if other_writes {
                ctx.store_local(mr.addr + 72, 1).unwrap();
            } else {
                ctx.load_local(mr.addr + 72).unwrap();
            }
        });
        sim.run_until(1_000_000);
        let want = if other_writes { Err(Abort::ConflictLocal) } else { Ok(()) };
        assert_eq!(out.borrow().clone(), Some(want));
    }
}

/// System aborts follow the configured rate: at 1,000 per ms a 100 us region almost never
/// survives; at 0 it always does.
#[test]
fn system_aborts_follow_their_rate() {
    for (rate, want_abort) in [(0.0, false), (1000.0, true)] {
        let mut sim = small_sim(1, 1, 5, |_| {});
        sim.enable_htm(&haswell(rate));
        let out = cell::<Option<Result<(), Abort>>>();
        let o = out.clone();
        sim.spawn(0, 0, move |ctx| async move {
            *o.borrow_mut() = Some(ctx.htm_region(|tx| tx.compute(100_000)).await);
        });
        sim.run_until(1_000_000);
        assert_eq!(out.borrow().clone(), Some(if want_abort { Err(Abort::System) } else { Ok(()) }));
    }
}

/// Node 1 worker 0 runs a 20 us region that reads word `at` of `mr`; node 0 posts `op(mr)`
/// (signaled) at about 5 us. How the region ended.
fn region_hit_by(
    sim: &mut txbed_sim::Sim,
    mr: MemoryRegion,
    at: u64,
    op: fn(MemoryRegion, LocalBuf) -> Op,
) -> Result<(), Abort> {
    let out = cell::<Option<Result<(), Abort>>>();
    let o = out.clone();
    sim.spawn(1, 0, move |ctx| async move {
        let r = ctx
            .htm_region(|tx| {
                let mut b = [0u8; 8];
                tx.read(mr.addr + at, &mut b).unwrap();
                tx.compute(20_000);
            })
            .await;
        *o.borrow_mut() = Some(r);
    });
    sim.spawn(0, 0, move |ctx| async move {
        ctx.sleep(5_000).await;
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let s = ctx.scratch();
        ctx.post(qp, [(op(mr, LocalBuf { len: 8, ..s }), true)]).unwrap();
        let _ = ctx.wait().await;
    });
    sim.run_until(1_000_000);
    let r = out.borrow().clone().expect("the region ended");
    r
}

/// DrTM Table IV's false conflict, on the simulated NIC: a remote read's lease CAS on a state
/// word that an open region only read (a local read) aborts that region, at the CAS's time.
#[test]
fn a_remote_lease_cas_aborts_a_region_that_only_read_the_state_word() {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let mr = sim.register_region(1, 4096);
    sim.enable_htm(&haswell(0.0));
    let lease_cas = |mr, local| Op::Cas { local, remote: remote(mr, 128, 8), compare: 0, swap: 1 << 9 };
    assert_eq!(region_hit_by(&mut sim, mr, 128, lease_cas), Err(Abort::ConflictRdma));
    assert_eq!(sim.memory(1).load_u64(mr.addr + 128).unwrap(), 1 << 9, "the CAS itself landed");
}

/// A crash ends every open region and a restarted node models HTM again with a fresh tracker:
/// its new workers run regions, and the NIC's accesses reach them.
#[test]
fn a_restarted_node_keeps_its_htm_model() {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let mr = sim.register_region(1, 4096);
    sim.enable_htm(&haswell(0.0));
    sim.run_until(1_000);
    sim.crash(1);
    sim.restart(1);
    let write = |mr, _| Op::Write { src: Payload::Inline(9u64.to_le_bytes().to_vec()), remote: remote(mr, 0, 8) };
    assert_eq!(region_hit_by(&mut sim, mr, 0, write), Err(Abort::ConflictRdma));
}
