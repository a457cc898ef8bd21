//! Verbs semantics of the simulated fabric, each test able to fail if the model breaks them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rand::Rng;
use txbed_sim::profile::Atomicity;
use txbed_tests::{cell, small_sim, small_sim_with};
use txbed_transport::*;

fn remote(mr: MemoryRegion, off: u64, len: u32) -> RemoteBuf {
    RemoteBuf { rkey: mr.rkey, addr: mr.addr + off, len }
}

fn sub(l: LocalBuf, off: u64, len: u32) -> LocalBuf {
    LocalBuf { lkey: l.lkey, addr: l.addr + off, len }
}

/// CAS then READ on one QP: the READ executes after the CAS and sees its result, whether
/// both share a doorbell or not (per-QP FIFO), even though the HCA-level CAS writes late.
#[test]
fn cas_then_read_on_one_qp_sees_the_cas() {
    for same_doorbell in [true, false] {
        let mut sim = small_sim(2, 1, 1, |_| {});
        let mr = sim.register_region(1, 4096);
        let seen = cell::<Option<u64>>();
        let out = seen.clone();
        sim.spawn(0, 0, move |ctx| async move {
            let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
            let s = ctx.scratch();
            let cas = Op::Cas { local: sub(s, 0, 8), remote: remote(mr, 64, 8), compare: 0, swap: 42 };
            let read = Op::Read { local: sub(s, 8, 8), remote: remote(mr, 64, 8) };
            if same_doorbell {
                ctx.post(qp, [(cas, false), (read, true)]).unwrap();
            } else {
                ctx.post(qp, [(cas, false)]).unwrap();
                ctx.post(qp, [(read, true)]).unwrap();
            }
            ctx.wait().await.unwrap();
            *out.borrow_mut() = Some(ctx.load_local(s.addr + 8).unwrap());
        });
        sim.run_until(1_000_000);
        assert_eq!(*seen.borrow(), Some(42), "same_doorbell={same_doorbell}");
    }
}

/// Unsignaled requests hold send-queue slots until a later signaled completion on the same
/// QP confirms them; past the depth, posting fails.
#[test]
fn passive_ack_confirms_unsignaled_requests() {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let depth = sim.model().send_queue_depth;
    let mr = sim.register_region(1, 1 << 16);
    let log = cell::<Vec<String>>();
    let out = log.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        for i in 0..depth - 1 {
            let w = Op::Write {
                src: Payload::Inline((i as u64 + 1).to_le_bytes().to_vec()),
                remote: remote(mr, i as u64 * 8, 8),
            };
            ctx.post(qp, [(w, false)]).unwrap();
        }
        out.borrow_mut().push(format!("outstanding={}", ctx.outstanding(qp)));
        let extra = Op::Write { src: Payload::Inline(vec![0; 8]), remote: remote(mr, 60_000, 8) };
        let two = [(extra.clone(), false), (extra.clone(), true)];
        match ctx.post(qp, two) {
            Err(PostError::SendQueueFull { .. }) => out.borrow_mut().push("full".into()),
            other => out.borrow_mut().push(format!("unexpected {other:?}")),
        }
        let last = Op::Write {
            src: Payload::Inline(depth.to_le_bytes().iter().copied().chain([0; 4]).collect()),
            remote: remote(mr, (depth as u64 - 1) * 8, 8),
        };
        ctx.post(qp, [(last, true)]).unwrap();
        ctx.wait().await.unwrap();
        out.borrow_mut().push(format!("outstanding={}", ctx.outstanding(qp)));
    });
    sim.run_until(1_000_000);
    assert_eq!(*log.borrow(), vec![format!("outstanding={}", depth - 1), "full".into(), "outstanding=0".into()]);
    let mem = sim.memory(1);
    for i in 0..depth as u64 {
        assert_eq!(mem.load_u64(mr.addr + i * 8).unwrap(), i + 1, "write {i} landed");
    }
}

/// A READ of a 4-line record racing WRITEs of that record may return lines from different
/// versions, but every 64-byte line is always from a single version.
#[test]
fn multi_line_read_can_tear_but_lines_never_do() {
    let mut sim = small_sim(3, 2, 7, |_| {});
    let mr = sim.register_region(1, 4096);
    const LEN: u32 = 256;
    let torn = Rc::new(Cell::new(0u32));
    let reads = Rc::new(Cell::new(0u32));
    let bad_line = Rc::new(Cell::new(0u32));
    for w in 0..2u16 {
        for c in 0..4u32 {
            // Writers on node 0: each write stamps every byte with a fresh version.
            sim.spawn(0, w, move |ctx| async move {
                let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
                let s = ctx.scratch();
                for v in 0..400u32 {
                    let b = (1 + (v * 8 + w as u32 * 4 + c) % 250) as u8;
                    ctx.write_local(s.addr, &[b; LEN as usize]).unwrap();
                    let wr = Op::Write { src: Payload::Local(sub(s, 0, LEN)), remote: remote(mr, 0, LEN) };
                    ctx.post(qp, [(wr, true)]).unwrap();
                    ctx.wait().await.unwrap();
                }
            });
            let (torn, reads, bad_line) = (torn.clone(), reads.clone(), bad_line.clone());
            // Readers on node 2.
            sim.spawn(2, w, move |ctx| async move {
                let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
                let s = ctx.scratch();
                for _ in 0..400 {
                    // Random think time so readers do not run in lockstep with writers.
                    let pause = ctx.with_rng(|r| r.gen_range(0..500));
                    ctx.sleep(pause).await;
                    ctx.post(qp, [(Op::Read { local: sub(s, 0, LEN), remote: remote(mr, 0, LEN) }, true)]).unwrap();
                    ctx.wait().await.unwrap();
                    let mut buf = [0u8; LEN as usize];
                    ctx.read_local(s.addr, &mut buf).unwrap();
                    reads.set(reads.get() + 1);
                    let lines: Vec<&[u8]> = buf.chunks(64).collect();
                    if lines.iter().any(|l| l.iter().any(|&x| x != l[0])) {
                        bad_line.set(bad_line.get() + 1);
                    }
                    if lines.iter().any(|l| l[0] != lines[0][0]) {
                        torn.set(torn.get() + 1);
                    }
                }
            });
        }
    }
    sim.run_until(50_000_000);
    assert_eq!(reads.get(), 8 * 400);
    assert_eq!(bad_line.get(), 0, "a single cache line was torn");
    assert!(torn.get() > 0, "no torn multi-line READ in {} racing reads", reads.get());
    assert!(sim.stats().torn_lines > 0);
}

/// Runs a NIC CAS (node 0 -> node 1) and a CPU CAS on node 1 on the same word, the CPU one
/// `offset_ns` after start. Returns (NIC CAS old value, CPU CAS old value, final word).
fn race_nic_and_cpu_cas(atomicity: Atomicity, offset_ns: u64) -> (u64, u64, u64) {
    let mut sim = small_sim(2, 1, 3, |p| p.atomicity = atomicity);
    let mr = sim.register_region(1, 4096);
    let nic_old = cell::<u64>();
    let cpu_old = cell::<u64>();
    let o = nic_old.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let s = ctx.scratch();
        ctx.post(qp, [(Op::Cas { local: sub(s, 0, 8), remote: remote(mr, 0, 8), compare: 0, swap: 1 }, true)]).unwrap();
        ctx.wait().await.unwrap();
        *o.borrow_mut() = ctx.load_local(s.addr).unwrap();
    });
    let o = cpu_old.clone();
    sim.spawn(1, 0, move |ctx| async move {
        ctx.sleep(offset_ns).await;
        *o.borrow_mut() = ctx.cas_local(mr.addr, 0, 2).unwrap();
    });
    sim.run_until(1_000_000);
    let fin = sim.memory(1).load_u64(mr.addr).unwrap();
    let r = (*nic_old.borrow(), *cpu_old.borrow(), fin);
    r
}

/// At HCA atomicity a CPU CAS that lands between the NIC's read and write of the word is lost:
/// both CASes "succeed". At GLOB atomicity exactly one succeeds, whatever the timing.
#[test]
fn hca_nic_atomics_race_cpu_cas_glob_does_not() {
    let offsets: Vec<u64> = (0..60).map(|i| i * 50).collect();
    let both_won_hca = offsets
        .iter()
        .filter(|&&o| {
            let (nic, cpu, fin) = race_nic_and_cpu_cas(Atomicity::Hca, o);
            nic == 0 && cpu == 0 && fin == 1
        })
        .count();
    assert!(both_won_hca > 0, "HCA: no offset produced the lost CPU update");
    for &o in &offsets {
        let (nic, cpu, fin) = race_nic_and_cpu_cas(Atomicity::Glob, o);
        let winners = (nic == 0) as u32 + (cpu == 0) as u32;
        assert_eq!(winners, 1, "GLOB at offset {o}: nic_old={nic} cpu_old={cpu} final={fin}");
        assert_eq!(fin, if nic == 0 { 1 } else { 2 });
    }
}

/// Sends `n` one-way datagrams from node 0 to node 1 and counts what arrives.
fn ud_delivered(drop: f64, n: u32, seed: u64) -> u32 {
    let mut sim = small_sim(2, 1, seed, |p| p.reliability.ud_drop_probability = drop);
    let got = Rc::new(Cell::new(0u32));
    let g = got.clone();
    let h: Rc<HandlerFn> = Rc::new(move |_ctx: &mut HandlerCtx<'_>, _req: &[u8]| {
        g.set(g.get() + 1);
        Handled::NoReply
    });
    sim.worker(1, 0).register_handler(1, h);
    sim.spawn(0, 0, move |ctx| async move {
        let dst = Endpoint { node: NodeId(1), worker: 0 };
        for i in 0..n {
            ctx.call_oneway(dst, 1, &i.to_le_bytes());
            // One datagram per event-loop iteration.
            ctx.sleep(100).await;
        }
    });
    sim.run_until(10_000_000);
    got.get()
}

#[test]
fn ud_drops_datagrams_with_the_configured_probability() {
    assert_eq!(ud_delivered(0.0, 2000, 1), 2000);
    let half = ud_delivered(0.5, 2000, 1);
    assert!((850..=1150).contains(&half), "delivered {half} of 2000 at p=0.5");
    assert_eq!(ud_delivered(1.0, 200, 1), 0);
}

/// RPCs over a lossy UD fabric all succeed through retransmission, and the server's duplicate
/// memory runs each handler exactly once.
#[test]
fn rpc_retransmits_through_loss_and_runs_handlers_once() {
    let mut sim = small_sim_with(2, 1, 11, |c| {
        c.profile.reliability.ud_drop_probability = 0.2;
        c.rpc.retries = 15;
        c.rpc.timeout_ns = 50_000;
    });
    let runs = Rc::new(Cell::new(0u32));
    let r = runs.clone();
    let h: Rc<HandlerFn> = Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
        r.set(r.get() + 1);
        ctx.reply.extend_from_slice(req);
        ctx.reply.push(0xAA);
        Handled::Reply
    });
    sim.worker(1, 0).register_handler(3, h);
    let ok = Rc::new(Cell::new(0u32));
    let o = ok.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let dst = Endpoint { node: NodeId(1), worker: 0 };
        for i in 0..200u32 {
            let reply = ctx.rpc(dst, 3, &i.to_le_bytes()).await.expect("rpc succeeds after retries");
            assert_eq!(&reply[..4], &i.to_le_bytes());
            assert_eq!(reply[4], 0xAA);
            o.set(o.get() + 1);
        }
    });
    sim.run_until(2_000_000_000);
    assert_eq!(ok.get(), 200);
    assert_eq!(runs.get(), 200, "a handler ran more than once for one call");
    assert!(sim.stats().ud_dropped > 0);
}

/// Calls and replies larger than a datagram travel as fragments and arrive whole, through UD
/// loss (a lost fragment costs a retransmission), with and without reply coalescing; handlers
/// still run once. Beyond `MAX_MESSAGE`, calls and replies fail with a clear error.
#[test]
fn large_rpcs_are_fragmented_and_reassembled() {
    for (piggyback, drop) in [(false, 0.0), (false, 0.1), (true, 0.1)] {
        let mut sim = small_sim_with(2, 1, 13, |c| {
            c.profile.mtu = 1024;
            c.profile.reliability.ud_drop_probability = drop;
            c.rpc.retries = 30;
            c.rpc.timeout_ns = 100_000;
            c.rpc.piggyback = piggyback;
        });
        let runs = Rc::new(Cell::new(0u32));
        let r = runs.clone();
        // The reply is the request reversed, plus as many bytes again (a larger reply).
        let h: Rc<HandlerFn> = Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
            r.set(r.get() + 1);
            if req == b"huge" {
                ctx.reply.resize(txbed_transport::rpc::MAX_MESSAGE + 1, 0);
                return Handled::Reply;
            }
            ctx.reply.extend(req.iter().rev());
            ctx.reply.extend_from_slice(req);
            Handled::Reply
        });
        sim.worker(1, 0).register_handler(3, h);
        let log = cell::<Vec<String>>();
        let out = log.clone();
        sim.spawn(0, 0, move |ctx| async move {
            let dst = Endpoint { node: NodeId(1), worker: 0 };
            assert_eq!(ctx.max_rpc_payload(), 1024 - txbed_transport::rpc::FRAME_HEADER);
            for (i, len) in [1usize, 1008, 1009, 3000, 10_000, 100_000].into_iter().enumerate() {
                let req: Vec<u8> = (0..len).map(|b| (b * 7 + i) as u8).collect();
                let reply = ctx.rpc(dst, 3, &req).await.expect("large rpc succeeds");
                let mut want: Vec<u8> = req.iter().rev().copied().collect();
                want.extend_from_slice(&req);
                out.borrow_mut().push(format!("{len}: {}", reply == want));
            }
            let too_big = vec![0u8; txbed_transport::rpc::MAX_MESSAGE + 1];
            out.borrow_mut().push(format!("{:?}", ctx.rpc(dst, 3, &too_big).await.err()));
            out.borrow_mut().push(format!("{:?}", ctx.rpc(dst, 3, b"huge").await.err()));
        });
        sim.run_until(5_000_000_000);
        let log = log.borrow();
        let sizes = ["1: true", "1008: true", "1009: true", "3000: true", "10000: true", "100000: true"];
        assert_eq!(&log[..6], sizes, "piggyback {piggyback}, drop {drop}");
        assert!(log[6].starts_with("Some(TooLarge"), "{}", log[6]);
        assert!(log[7].starts_with("Some(ReplyTooLarge"), "{}", log[7]);
        assert_eq!(runs.get(), 7, "a handler ran more than once for one call");
        if drop > 0.0 {
            assert!(sim.stats().ud_dropped > 0);
        }
    }
}

/// An RPC to an unknown handler fails fast with a clear error instead of timing out.
#[test]
fn rpc_to_unknown_handler_is_an_error() {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let res = cell::<Option<Result<Vec<u8>, RpcError>>>();
    let r = res.clone();
    sim.spawn(0, 0, move |ctx| async move {
        *r.borrow_mut() = Some(ctx.rpc(Endpoint { node: NodeId(1), worker: 0 }, 99, b"x").await);
    });
    sim.run_until(100_000);
    let got = res.borrow().clone();
    match got {
        Some(Err(RpcError::UnknownHandler { handler: 99, .. })) => {}
        other => panic!("expected UnknownHandler, got {other:?}"),
    }
}

/// A call of the worker's own handler in place (`Ctx::call_local`, the local path of an RPC):
/// the handler runs at once on the caller's CPU time (its 50 ns, and 1 ns for copying its
/// 8-byte reply at 10 GB/s), no datagram is posted, and the caller's wait returns without
/// suspending. A handler that defers its reply answers later through `send_deferred_reply`,
/// which reaches the waiting caller directly; an unknown handler is an error at once.
#[test]
fn local_calls_run_the_handler_in_place() {
    let mut sim = small_sim(1, 1, 1, |_| {});
    let parked: Rc<RefCell<Option<ReplyToken>>> = cell();
    let p = parked.clone();
    let echo: Rc<HandlerFn> = Rc::new(move |ctx: &mut HandlerCtx<'_>, req: &[u8]| {
        ctx.compute(50);
        if req == b"later" {
            *p.borrow_mut() = Some(ctx.token());
            return Handled::Defer;
        }
        ctx.reply.extend_from_slice(&[7; 8]);
        Handled::Reply
    });
    sim.worker(0, 0).register_handler(3, echo);
    let seen = cell::<Vec<String>>();
    let s = seen.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let (t0, resumed) = (ctx.now(), ctx.resumes());
        let id = ctx.call_local(3, b"now");
        ctx.wait().await.unwrap();
        let spent = ctx.now() - t0;
        s.borrow_mut().push(format!("{:?} {spent} {}", ctx.take_reply(id), ctx.resumes() - resumed));
        let id = ctx.call_local(99, b"x");
        s.borrow_mut().push(format!("{:?}", ctx.take_reply(id).map(|r| r.is_err())));
        let id = ctx.call_local(3, b"later");
        ctx.wait().await.unwrap();
        s.borrow_mut().push(format!("deferred {:?}", ctx.take_reply(id)));
    });
    let p = parked.clone();
    sim.spawn(0, 0, move |ctx| async move {
        // Answers the deferred call once it is parked.
        loop {
            ctx.sleep(1_000).await;
            let token = p.borrow_mut().take();
            if let Some(t) = token {
                ctx.send_deferred_reply(t, b"done".to_vec());
                return;
            }
        }
    });
    sim.run_until(100_000);
    assert_eq!(
        *seen.borrow(),
        [
            "Some(Ok([7, 7, 7, 7, 7, 7, 7, 7])) 51 0".to_string(),
            "Some(true)".into(),
            "deferred Some(Ok([100, 111, 110, 101]))".into()
        ]
    );
    let w = sim.worker_stats();
    assert_eq!((w.datagrams_sent, w.rpc_calls, w.local_calls), (0, 0, 3));
}

/// RC to a dead peer: the request fails with RetryExceeded after the retry budget, the next in
/// the same batch is flushed, and the QP refuses further posts.
#[test]
fn rc_to_dead_peer_fails_the_qp() {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let mr = sim.register_region(1, 4096);
    sim.kill_node_at(1, 0);
    let log = cell::<Vec<String>>();
    let out = log.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let s = ctx.scratch();
        let r = |o| Op::Read { local: sub(s, o, 8), remote: remote(mr, o, 8) };
        let t0 = ctx.now();
        ctx.post(qp, [(r(0), true), (r(8), true)]).unwrap();
        let res = ctx.wait().await;
        let c = res.expect_err("read from a dead node must fail");
        out.borrow_mut().push(format!("{:?} to {} after {}us", c.status, c.peer, (ctx.now() - t0) / 1000));
        match ctx.post(qp, [(r(0), true)]) {
            Err(PostError::QpInError { .. }) => out.borrow_mut().push("qp in error".into()),
            other => out.borrow_mut().push(format!("unexpected {other:?}")),
        }
    });
    sim.run_until(10_000_000);
    let log = log.borrow();
    assert!(log[0].starts_with("RetryExceeded to node 1 after "), "{log:?}");
    let us: u64 = log[0].split("after ").nth(1).unwrap().trim_end_matches("us").parse().unwrap();
    assert!(us >= 262, "gave up after {us} us, before 8 x 32.768 us of retries");
    assert_eq!(log[1], "qp in error");
}

#[test]
fn second_request_after_a_failure_is_flushed() {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let mr = sim.register_region(1, 4096);
    let statuses = cell::<Vec<WcStatus>>();
    let out = statuses.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let s = ctx.scratch();
        let bad = Op::Read { local: sub(s, 0, 8), remote: RemoteBuf { rkey: mr.rkey ^ 1, addr: mr.addr, len: 8 } };
        let good = Op::Read { local: sub(s, 8, 8), remote: remote(mr, 0, 8) };
        ctx.post(qp, [(bad, true), (good, true)]).unwrap();
        let first = ctx.wait().await.unwrap_err();
        out.borrow_mut().push(first.status);
    });
    sim.run_until(1_000_000);
    assert_eq!(*statuses.borrow(), vec![WcStatus::RemoteAccessError]);
    assert_eq!(sim.worker_stats().completions_polled, 2, "the flushed request must complete too");
}

/// Wrong rkey and out-of-bounds ranges are NAKed as remote access errors, for READ, WRITE
/// and atomics, and memory is left untouched.
#[test]
fn remote_access_errors() {
    let cases: Vec<(&str, Box<dyn Fn(MemoryRegion, MemoryRegion, LocalBuf) -> Op>)> = vec![
        (
            "read wrong rkey",
            Box::new(|mr, other, s| Op::Read {
                local: sub(s, 0, 8),
                remote: RemoteBuf { rkey: other.rkey, addr: mr.addr, len: 8 },
            }),
        ),
        ("read past end", Box::new(|mr, _, s| Op::Read { local: sub(s, 0, 64), remote: remote(mr, 4096 - 32, 64) })),
        (
            "write past end",
            Box::new(|mr, _, _| Op::Write { src: Payload::Inline(vec![7; 16]), remote: remote(mr, 4090, 16) }),
        ),
        (
            "write below start",
            Box::new(|mr, _, _| Op::Write {
                src: Payload::Inline(vec![7; 8]),
                remote: RemoteBuf { rkey: mr.rkey, addr: mr.addr - 8, len: 8 },
            }),
        ),
        (
            "cas wrong rkey",
            Box::new(|mr, other, s| Op::Cas {
                local: sub(s, 0, 8),
                remote: RemoteBuf { rkey: other.rkey, addr: mr.addr, len: 8 },
                compare: 0,
                swap: 1,
            }),
        ),
        ("faa misaligned", Box::new(|mr, _, s| Op::Faa { local: sub(s, 0, 8), remote: remote(mr, 4, 8), add: 1 })),
    ];
    for (name, make) in cases {
        let mut sim = small_sim(2, 1, 1, |_| {});
        let mr = sim.register_region(1, 4096);
        let other = sim.register_region(0, 4096);
        let status = cell::<Option<WcStatus>>();
        let out = status.clone();
        sim.spawn(0, 0, move |ctx| async move {
            let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
            ctx.post(qp, [(make(mr, other, ctx.scratch()), true)]).unwrap();
            *out.borrow_mut() = Some(match ctx.wait().await {
                Ok(()) => WcStatus::Success,
                Err(c) => c.status,
            });
        });
        sim.run_until(1_000_000);
        assert_eq!(*status.borrow(), Some(WcStatus::RemoteAccessError), "{name}");
        let mut buf = vec![0u8; 4096];
        sim.memory(1).read(mr.addr, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "{name}: memory changed");
    }
}

/// Posting ten requests in one call rings one doorbell (one MMIO of CPU time); ten calls ring
/// ten.
#[test]
fn doorbell_batching_costs_one_mmio() {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let costs = sim.model().host.clone();
    let mr = sim.register_region(1, 4096);
    let spent = cell::<Vec<u64>>();
    let out = spent.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let s = ctx.scratch();
        let read = |i: u64| (Op::Read { local: sub(s, i * 8, 8), remote: remote(mr, i * 8, 8) }, true);
        let t = ctx.now();
        ctx.post(qp, (0..10).map(read)).unwrap();
        out.borrow_mut().push(ctx.now() - t);
        ctx.wait().await.unwrap();
        let t = ctx.now();
        for i in 0..10 {
            ctx.post(qp, [read(i)]).unwrap();
        }
        out.borrow_mut().push(ctx.now() - t);
        ctx.wait().await.unwrap();
    });
    sim.run_until(1_000_000);
    let spent = spent.borrow();
    assert_eq!(spent[0], costs.mmio_ns + 10 * costs.wqe_ns);
    assert_eq!(spent[1], 10 * (costs.mmio_ns + costs.wqe_ns));
    assert_eq!(sim.stats().doorbells, 11);
    assert_eq!(sim.worker_stats().doorbells, 11);
}

/// WRITE_WITH_IMM lands its data and notifies the peer worker with the immediate.
#[test]
fn write_with_imm_notifies_the_target() {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let mr = sim.register_region(1, 4096);
    let got = Rc::new(RefCell::new(None));
    let g = got.clone();
    sim.spawn(1, 0, move |ctx| async move {
        let (src, imm) = ctx.wait_imm().await;
        let v = ctx.load_local(mr.addr + 128).unwrap();
        *g.borrow_mut() = Some((src, imm, v));
    });
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let w = Op::WriteImm {
            src: Payload::Inline(77u64.to_le_bytes().to_vec()),
            remote: remote(mr, 128, 8),
            imm: 0xBEEF,
        };
        ctx.post(qp, [(w, true)]).unwrap();
        ctx.wait().await.unwrap();
    });
    sim.run_until(1_000_000);
    assert_eq!(*got.borrow(), Some((NodeId(0), 0xBEEF, 77)));
}

/// Routed immediates (`imm`): one names another worker of the target node, whose queue gets
/// it (the QP's own worker does not); one names a coroutine there, and only that coroutine
/// receives it (`wait_own_imm`), not the worker's queue. `wait_imm_until` gives up at its
/// deadline with `None`, and its timer does not wake a later sleep early.
#[test]
fn routed_immediates_reach_the_worker_or_coroutine_they_name() {
    use txbed_transport::imm;
    let mut sim = small_sim(2, 2, 2, |_| {});
    let mr = sim.register_region(1, 4096);
    let log = cell::<Vec<String>>();
    // Node 1 worker 1: coroutine 0 waits on the worker's queue, coroutine 1 for its own.
    let l = log.clone();
    sim.spawn(1, 1, move |ctx| async move {
        let (src, v) = ctx.wait_imm().await;
        l.borrow_mut().push(format!("w1 queue {} {:#x}", src.0, imm::tag(v)));
    });
    let l = log.clone();
    sim.spawn(1, 1, move |ctx| async move {
        let v = ctx.wait_own_imm().await;
        l.borrow_mut().push(format!("w1 c1 own {}", imm::tag(v)));
    });
    // Node 1 worker 0 must see nothing: it waits with a deadline.
    let l = log.clone();
    sim.spawn(1, 0, move |ctx| async move {
        let got = ctx.wait_imm_until(50_000).await;
        l.borrow_mut().push(format!("w0 {:?} at {}", got.map(|g| g.1), ctx.now() >= 50_000));
        let t = ctx.now();
        ctx.sleep(100_000).await;
        l.borrow_mut().push(format!("w0 slept {}", ctx.now() - t >= 100_000));
    });
    // Node 0 worker 0 posts both on its QP, which pairs with node 1's worker 0.
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let w = |imm| Op::WriteImm { src: Payload::Inline(vec![1; 8]), remote: remote(mr, 0, 8), imm };
        ctx.post(qp, [(w(imm::to_worker(1, 0x2a)), false), (w(imm::to_coroutine(1, 1)), true)]).unwrap();
        ctx.wait().await.unwrap();
    });
    sim.run_until(1_000_000);
    let mut got = log.borrow().clone();
    got.sort();
    assert_eq!(got, vec!["w0 None at true", "w0 slept true", "w1 c1 own 1", "w1 queue 0 0x2a"]);
}

/// Inline payloads over the NIC's limit are a local length error; a local buffer with a wrong
/// lkey is a local protection error.
#[test]
fn local_errors() {
    for case in 0..2 {
        let mut sim = small_sim(2, 1, 1, |_| {});
        let mr = sim.register_region(1, 4096);
        let max_inline = sim.model().max_inline as usize;
        let status = cell::<Option<WcStatus>>();
        let out = status.clone();
        sim.spawn(0, 0, move |ctx| async move {
            let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
            let s = ctx.scratch();
            let op = if case == 0 {
                Op::Write { src: Payload::Inline(vec![1; max_inline + 1]), remote: remote(mr, 0, 4096) }
            } else {
                Op::Read { local: LocalBuf { lkey: s.lkey ^ 7, addr: s.addr, len: 8 }, remote: remote(mr, 0, 8) }
            };
            ctx.post(qp, [(op, true)]).unwrap();
            *out.borrow_mut() = ctx.wait().await.err().map(|c| c.status);
        });
        sim.run_until(1_000_000);
        let want = [WcStatus::LocalLengthError, WcStatus::LocalProtectionError][case];
        assert_eq!(*status.borrow(), Some(want));
    }
}

/// Two QPs CAS the same word at once; each CAS is followed by a READ on its own QP. The
/// CAS that finds the word busy in the NIC is deferred, and the READ behind it must wait for
/// it (per-QP FIFO): when the READ completes, that CAS's result is already in place.
#[test]
fn deferred_atomic_keeps_its_qp_in_order() {
    let mut sim = small_sim(3, 1, 2, |_| {});
    let mr = sim.register_region(2, 4096);
    let results = cell::<Vec<(u64, u64)>>();
    for (node, swap) in [(0u16, 1u64), (1, 2)] {
        let out = results.clone();
        sim.spawn(node, 0, move |ctx| async move {
            let qp = ctx.rc_qp(NodeId(2), 0).unwrap();
            let s = ctx.scratch();
            ctx.store_local(s.addr, 0xdead).unwrap();
            let cas = Op::Cas { local: sub(s, 0, 8), remote: remote(mr, 0, 8), compare: 0, swap };
            let read = Op::Read { local: sub(s, 8, 8), remote: remote(mr, 0, 8) };
            ctx.post(qp, [(cas, false), (read, true)]).unwrap();
            ctx.wait().await.unwrap();
            out.borrow_mut().push((ctx.load_local(s.addr).unwrap(), ctx.load_local(s.addr + 8).unwrap()));
        });
    }
    sim.run_until(1_000_000);
    let r = results.borrow();
    assert_eq!(r.len(), 2);
    // Exactly one CAS won; the loser saw the winner's value; nobody saw the stale 0xdead.
    let winners: Vec<_> = r.iter().filter(|(old, _)| *old == 0).collect();
    assert_eq!(winners.len(), 1, "{r:?}");
    for (old, read) in r.iter() {
        assert_ne!(*old, 0xdead, "CAS result missing when its READ completed: {r:?}");
        assert!(*read == 1 || *read == 2, "{r:?}");
    }
    let won = if r[0].0 == 0 { 0 } else { 1 };
    assert_eq!(r[1 - won].0, r[won].1, "the loser's CAS saw the winner's value");
}
