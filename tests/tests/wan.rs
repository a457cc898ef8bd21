//! Links between data centers in the simulator (`txbed_sim::wan`, issue 17 item 1): the delay
//! follows its distribution, datagrams are lost at the link's rate and reliable transports
//! retransmit, TCP-like links deliver in order and cost CPU, the link's bandwidth limits, and
//! a run is a function of its seed.

use std::cell::Cell;
use std::rc::Rc;

use txbed_sim::wan::{Delay, TcpCosts, Wan, WanLink, WanTransport};
use txbed_sim::{Sim, SimConfig};
use txbed_tests::{cell, small_sim_with};
use txbed_transport::*;

/// Two nodes, each in a data center of its own, joined by `link`.
fn two_dcs(link: WanLink, seed: u64, tweak: impl FnOnce(&mut SimConfig)) -> Sim {
    small_sim_with(2, 1, seed, |c| {
        c.wan = Some(Wan { dcs: 2, dc_of: vec![0, 1], links: vec![link.clone(), link.clone(), link.clone(), link] });
        tweak(c);
    })
}

fn link(delay: Delay) -> WanLink {
    WanLink { delay, jitter_us: 0.0, loss: 0.0, gbps: None, transport: WanTransport::Rdma, retransmit_us: None }
}

/// Round trips (ns) of `n` READs of 8 bytes from node 0 to node 1, one at a time.
fn read_rtts(sim: &mut Sim, n: usize) -> Vec<f64> {
    let mr = sim.register_region(1, 4096);
    let rtts = cell::<Vec<f64>>();
    let out = rtts.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let s = ctx.scratch();
        for _ in 0..n {
            let t = ctx.now();
            let read = Op::Read { local: s, remote: RemoteBuf { rkey: mr.rkey, addr: mr.addr, len: 8 } };
            ctx.post(qp, [(read, true)]).unwrap();
            ctx.wait().await.unwrap();
            out.borrow_mut().push((ctx.now() - t) as f64);
        }
    });
    sim.run_until(100_000_000_000);
    let v = rtts.borrow().clone();
    assert_eq!(v.len(), n, "every READ completed");
    v
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64;
    (m, var.sqrt())
}

/// The round trip of a READ across DCs is the fabric's plus two independent draws: for
/// Normal(200 us, 30 us) its mean rises by 400 us and its sd is 30 * sqrt(2) us; Uniform and
/// a measured CDF give their means too.
#[test]
fn delay_follows_its_distribution() {
    const N: usize = 4000;
    let base = mean_sd(&read_rtts(&mut two_dcs(link(Delay::Constant(0.0)), 1, |_| {}), 200)).0;
    let cases = [
        (Delay::Normal(200.0, 30.0), 400.0, 30.0 * 2f64.sqrt()),
        (Delay::Uniform(100.0, 300.0), 400.0, 200.0 / 12f64.sqrt() * 2f64.sqrt()),
        (Delay::Cdf(vec![(100.0, 0.5), (300.0, 1.0)]), 300.0, f64::NAN),
    ];
    for (delay, want_mean_us, want_sd_us) in cases {
        let rtts = read_rtts(&mut two_dcs(link(delay.clone()), 7, |_| {}), N);
        let extra: Vec<f64> = rtts.iter().map(|r| (r - base) / 1000.0).collect();
        let (m, sd) = mean_sd(&extra);
        eprintln!("{delay:?}: extra round trip mean {m:.1} us, sd {sd:.1} us over {N} READs");
        assert!((m - want_mean_us).abs() < 0.02 * want_mean_us, "{delay:?}: mean {m}, want {want_mean_us}");
        if want_sd_us.is_finite() {
            assert!((sd - want_sd_us).abs() < 0.1 * want_sd_us, "{delay:?}: sd {sd}, want {want_sd_us}");
        }
        assert!(extra.iter().all(|&x| x >= -0.01), "{delay:?}: a round trip beat the fabric's");
    }
}

/// Of `pairs` pairs of WRITEs to one word, the first (1) on one RC QP and the second (2)
/// posted right after it on another QP to the same node: how many times the second landed
/// first (the word ends up 1).
fn overtaken(delay: Delay, transport: WanTransport, pairs: u64) -> usize {
    let mut sim = two_dcs(WanLink { transport, ..link(delay) }, 3, |c| c.qps_per_node = 2);
    let mr = sim.register_region(1, 8 * pairs);
    sim.spawn(0, 0, move |ctx| async move {
        let (a, b) = (ctx.rc_qp(NodeId(1), 0).unwrap(), ctx.rc_qp(NodeId(1), 1).unwrap());
        for i in 0..pairs {
            let w = |v: u64| Op::Write {
                src: Payload::Inline(v.to_le_bytes().to_vec()),
                remote: RemoteBuf { rkey: mr.rkey, addr: mr.addr + 8 * i, len: 8 },
            };
            ctx.post(a, [(w(1), true)]).unwrap();
            ctx.post(b, [(w(2), true)]).unwrap();
            ctx.wait().await.unwrap();
            ctx.wait().await.unwrap();
        }
    });
    sim.run_until(100_000_000_000);
    let mem = sim.memory(1);
    (0..pairs)
        .filter(|i| {
            let mut w = [0u8; 8];
            mem.read(mr.addr + 8 * i, &mut w).unwrap();
            assert_ne!(u64::from_le_bytes(w), 0, "a WRITE never landed");
            u64::from_le_bytes(w) == 1
        })
        .count()
}

/// Over an RDMA link each QP keeps its own order, so a message on one QP overtakes an
/// earlier one on another when its delay draw is shorter; a TCP-like link is one
/// connection per node pair and nothing overtakes anything on it.
#[test]
fn tcp_delivers_in_order_rdma_qps_do_not() {
    let jittery = Delay::Uniform(100.0, 600.0);
    assert_eq!(overtaken(Delay::Constant(350.0), WanTransport::Rdma, 200), 0, "a constant delay reordered");
    let rdma = overtaken(jittery.clone(), WanTransport::Rdma, 200);
    eprintln!("RDMA link: {rdma} of 200 second WRITEs overtook the first");
    assert!(rdma > 50, "jittery RDMA QPs were (almost) never reordered: the test shows nothing");
    let tcp = overtaken(jittery, WanTransport::Tcp(TcpCosts { per_message_cpu_ns: 1000 }), 200);
    assert_eq!(tcp, 0, "a TCP-like link reordered messages");
}

/// A TCP-like link costs each message CPU time on both ends: a call's round trip grows by
/// four times the per-message cost (call and reply, each sent and received).
#[test]
fn tcp_messages_cost_cpu_on_both_ends() {
    let rtt = |transport: WanTransport| {
        let mut sim = two_dcs(WanLink { transport, ..link(Delay::Constant(100.0)) }, 1, |_| {});
        sim.worker(1, 0).register_handler(3, Rc::new(|_: &mut HandlerCtx<'_>, _: &[u8]| Handled::Reply));
        let took = Rc::new(Cell::new(0u64));
        let t = took.clone();
        sim.spawn(0, 0, move |ctx| async move {
            let start = ctx.now();
            for _ in 0..10 {
                ctx.rpc(Endpoint { node: NodeId(1), worker: 0 }, 3, b"x").await.unwrap();
            }
            t.set((ctx.now() - start) / 10);
        });
        sim.run_until(1_000_000_000);
        took.get()
    };
    let rdma = rtt(WanTransport::Rdma);
    let tcp = rtt(WanTransport::Tcp(TcpCosts { per_message_cpu_ns: 20_000 }));
    eprintln!("RPC round trip over 100 us links: RDMA {rdma} ns, TCP-like (20 us per message) {tcp} ns");
    assert!(tcp >= rdma + 80_000 && tcp <= rdma + 85_000, "TCP {tcp} ns vs RDMA {rdma} ns");
}

/// Over an RDMA link with loss 0.1, about one datagram in ten is gone (RPC retransmits until
/// every call is answered); RC READs are never lost but retransmitted, each loss costing the
/// retransmission wait.
#[test]
fn loss_drops_datagrams_and_delays_reliable_messages() {
    let mut sim = two_dcs(WanLink { loss: 0.1, ..link(Delay::Constant(50.0)) }, 5, |c| {
        c.rpc.timeout_ns = 300_000;
        c.rpc.retries = 50;
    });
    sim.worker(1, 0).register_handler(3, Rc::new(|_: &mut HandlerCtx<'_>, _: &[u8]| Handled::Reply));
    let done = Rc::new(Cell::new(0u32));
    let d = done.clone();
    sim.spawn(0, 0, move |ctx| async move {
        for _ in 0..3000 {
            ctx.rpc(Endpoint { node: NodeId(1), worker: 0 }, 3, b"x").await.unwrap();
            d.set(d.get() + 1);
        }
    });
    sim.run_until(100_000_000_000);
    assert_eq!(done.get(), 3000);
    let st = sim.stats();
    let rate = st.wan_lost as f64 / st.wan_messages as f64;
    eprintln!("datagrams: {} lost of {} ({rate:.4})", st.wan_lost, st.wan_messages);
    assert!((rate - 0.1).abs() < 0.01, "loss rate {rate}");
    assert_eq!(st.wan_retransmits, 0);

    let lossy = WanLink { loss: 0.2, retransmit_us: Some(1000.0), ..link(Delay::Constant(50.0)) };
    let mut sim = two_dcs(lossy, 5, |_| {});
    let (m, _) = mean_sd(&read_rtts(&mut sim, 3000));
    let st = sim.stats();
    let per_msg = st.wan_retransmits as f64 / st.wan_messages as f64;
    // Retransmissions per message: geometric, p / (1 - p) = 0.25; each costs 1 ms.
    eprintln!("RC: {per_msg:.3} retransmissions per message, mean round trip {:.1} us", m / 1000.0);
    assert!((per_msg - 0.25).abs() < 0.03, "{per_msg}");
    assert_eq!(st.wan_lost, 0, "RC lost a message");
    let want = 100.0 + 2.0 * 0.25 * 1000.0;
    assert!((m / 1000.0 - want).abs() < 0.1 * want, "mean round trip {m} ns, want about {want} us");
}

/// Back-to-back 64 KiB WRITEs across a 1 Gbit/s link go at about 1 Gbit/s (the NIC's own
/// link is 56).
#[test]
fn bandwidth_limits_the_link() {
    let mut sim = two_dcs(WanLink { gbps: Some(1.0), ..link(Delay::Constant(10.0)) }, 1, |_| {});
    let mr = sim.register_region(1, 1 << 20);
    let src = sim.register_region(0, 1 << 16);
    let took = Rc::new(Cell::new(0u64));
    let t = took.clone();
    const LEN: u32 = 1 << 16;
    const BATCHES: usize = 20;
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let start = ctx.now();
        for _ in 0..BATCHES {
            let w = |last| {
                let local = LocalBuf { lkey: src.lkey, addr: src.addr, len: LEN };
                (
                    Op::Write {
                        src: Payload::Local(local),
                        remote: RemoteBuf { rkey: mr.rkey, addr: mr.addr, len: LEN },
                    },
                    last,
                )
            };
            ctx.post(qp, (0..8).map(|i| w(i == 7))).unwrap();
            ctx.wait().await.unwrap();
        }
        t.set(ctx.now() - start);
    });
    sim.run_until(10_000_000_000);
    let gbps = (BATCHES * 8 * LEN as usize * 8) as f64 / took.get() as f64;
    eprintln!("64 KiB WRITEs over a 1 Gbit/s inter-DC link: {gbps:.3} Gbit/s of payload");
    assert!((0.9..=1.0).contains(&gbps), "{gbps} Gbit/s");
}

/// The same seed gives the same run, another seed another one; a cluster with one data
/// center (no `wan`) never touches the inter-DC draws.
#[test]
fn runs_are_a_function_of_the_seed() {
    let lossy = WanLink { loss: 0.05, jitter_us: 20.0, ..link(Delay::Normal(100.0, 10.0)) };
    let digest = |seed| {
        let mut sim = two_dcs(lossy.clone(), seed, |_| {});
        read_rtts(&mut sim, 200);
        sim.digest()
    };
    assert_eq!(digest(1), digest(1));
    assert_ne!(digest(1), digest(2));
}

/// Of `pairs` pairs posted on one RC QP, a large WRITE (first word 1) then a small inline
/// WRITE (2) to the same word: how many times the small one landed first (the word ends 1).
fn same_qp_overtaken(link: WanLink, pairs: u64) -> usize {
    const BIG: u32 = 2048;
    let mut sim = two_dcs(link, 11, |_| {});
    let mr = sim.register_region(1, BIG as u64 * pairs);
    let src = sim.register_region(0, BIG as u64);
    sim.memory(0).write(src.addr, &1u64.to_le_bytes()).unwrap();
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        for i in 0..pairs {
            let at = mr.addr + BIG as u64 * i;
            let big = Op::Write {
                src: Payload::Local(LocalBuf { lkey: src.lkey, addr: src.addr, len: BIG }),
                remote: RemoteBuf { rkey: mr.rkey, addr: at, len: BIG },
            };
            let small = Op::Write {
                src: Payload::Inline(2u64.to_le_bytes().to_vec()),
                remote: RemoteBuf { rkey: mr.rkey, addr: at, len: 8 },
            };
            // One doorbell, as CALVIN's channel posts its frames and then their notify.
            ctx.post(qp, [(big, false), (small, true)]).unwrap();
            ctx.wait().await.unwrap();
        }
    });
    sim.run_until(100_000_000_000);
    let mem = sim.memory(1);
    (0..pairs)
        .filter(|i| {
            let mut w = [0u8; 8];
            mem.read(mr.addr + BIG as u64 * i, &mut w).unwrap();
            assert_ne!(u64::from_le_bytes(w), 0, "a WRITE never landed");
            u64::from_le_bytes(w) == 1
        })
        .count()
}

/// One RC QP keeps its order across an inter-DC link whatever the delay draws and sizes: a
/// small WRITE never lands before a larger one posted ahead of it (a later packet must not
/// arrive before the last bit of an earlier one). CALVIN's one-sided channel relies on it.
#[test]
fn one_rc_qp_stays_in_order_across_a_jittery_link() {
    for delay in [Delay::Uniform(5.0, 45.0), Delay::Normal(57.0, 10.0), Delay::Constant(30.0)] {
        for transport in [WanTransport::Rdma, WanTransport::Tcp(TcpCosts { per_message_cpu_ns: 100 })] {
            let l = WanLink { jitter_us: 10.0, transport: transport.clone(), ..link(delay.clone()) };
            let n = same_qp_overtaken(l, 300);
            assert_eq!(
                n, 0,
                "{delay:?} over {transport:?}: {n} of 300 small WRITEs overtook the large one before them"
            );
        }
    }
}

/// Of `n` (unsignaled CAS, signaled READ) pairs on one RC QP, as MVCC's one-sided LOCK posts
/// them, how many times the READ completed before the CAS's result landed.
fn cas_results_missing(link: WanLink, n: u64) -> u64 {
    const UNSET: u64 = u64::MAX;
    let mut sim = two_dcs(link, 13, |_| {});
    let mr = sim.register_region(1, 8 * n + 64);
    let missing = Rc::new(Cell::new(0u64));
    let m = missing.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let qp = ctx.rc_qp(NodeId(1), 0).unwrap();
        let s = ctx.scratch();
        for i in 0..n {
            ctx.store_local(s.addr, UNSET).unwrap();
            let word = RemoteBuf { rkey: mr.rkey, addr: mr.addr + 8 * i, len: 8 };
            let cas = Op::Cas { local: LocalBuf { len: 8, ..s }, remote: word, compare: 0, swap: i + 1 };
            let read =
                Op::Read { local: LocalBuf { addr: s.addr + 8, len: 64, ..s }, remote: RemoteBuf { len: 64, ..word } };
            ctx.post(qp, [(cas, false), (read, true)]).unwrap();
            ctx.wait().await.unwrap();
            if ctx.load_local(s.addr).unwrap() == UNSET {
                m.set(m.get() + 1);
            }
        }
    });
    sim.run_until(100_000_000_000);
    missing.get()
}

/// An unsignaled CAS's result is in place when a later signaled request on its QP completes
/// (MVCC relies on it), also across a lossy inter-DC RDMA link whose retransmissions delay the
/// CAS: the READ behind it, a smaller packet, once landed first and its completion woke the
/// coroutine before the CAS result ("MVCC CAS on the lock reply lost"). The constant delay
/// shows that loss alone (the retransmission wait) was enough.
#[test]
fn cas_result_lands_before_a_later_completion_across_a_lossy_link() {
    let cases = [
        (Delay::Constant(30.0), 0.0, 0.05),
        (Delay::Uniform(5.0, 45.0), 10.0, 0.01),
        (Delay::Normal(40.0, 10.0), 0.0, 0.0),
    ];
    for (delay, jitter_us, loss) in cases {
        let l = WanLink { jitter_us, loss, ..link(delay.clone()) };
        let missing = cas_results_missing(l, 500);
        assert_eq!(missing, 0, "{delay:?}, loss {loss}: {missing} of 500 READs completed before their CAS's result");
    }
}
