//! RPC over lossy UD (issue 17, item 8): every call gets its reply exactly once from its
//! handler, however many of its datagrams are lost, including replies a handler deferred and
//! sent later from another handler's run (WAITDIE's lock hand-over).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use txbed_tests::small_sim_with;
use txbed_transport::*;

/// Node 1's handler 1 parks every call; handler 2 answers every parked call from its own run
/// (`HandlerCtx::reply_to`), as a lock RELEASE grants a waiter. Node 0 makes `calls` parked
/// calls one after another while another coroutine keeps releasing. Returns the replies,
/// how many times handler 1 ran, and the worker stats.
fn parked_calls(drop: f64, seed: u64, calls: u32) -> (Vec<Result<Vec<u8>, RpcError>>, u32, WorkerStats) {
    let mut sim = small_sim_with(2, 1, seed, |c| {
        c.profile.reliability.ud_drop_probability = drop;
        c.rpc.retries = 20;
        c.rpc.timeout_ns = 20_000;
    });
    let parked: Rc<RefCell<Vec<ReplyToken>>> = Rc::default();
    let runs = Rc::new(Cell::new(0u32));
    let (p, r) = (parked.clone(), runs.clone());
    let park: Rc<HandlerFn> = Rc::new(move |h: &mut HandlerCtx<'_>, _req: &[u8]| {
        r.set(r.get() + 1);
        p.borrow_mut().push(h.token());
        Handled::Defer
    });
    let p = parked.clone();
    let release: Rc<HandlerFn> = Rc::new(move |h: &mut HandlerCtx<'_>, _req: &[u8]| {
        for t in p.borrow_mut().drain(..) {
            h.reply_to(t, b"granted".to_vec());
        }
        Handled::Reply
    });
    sim.worker(1, 0).register_handler(1, park);
    sim.worker(1, 0).register_handler(2, release);
    let dst = Endpoint { node: NodeId(1), worker: 0 };
    let got: Rc<RefCell<Vec<Result<Vec<u8>, RpcError>>>> = Rc::default();
    let done = Rc::new(Cell::new(false));
    let (g, d) = (got.clone(), done.clone());
    sim.spawn(0, 0, move |ctx| async move {
        for i in 0..calls {
            let r = ctx.rpc(dst, 1, &i.to_le_bytes()).await;
            g.borrow_mut().push(r);
        }
        d.set(true);
    });
    sim.spawn(0, 0, move |ctx| async move {
        while !done.get() {
            ctx.sleep(3_000).await;
            let _ = ctx.rpc(dst, 2, b"release").await;
        }
    });
    sim.run_until(1_000_000_000);
    let got = got.borrow().clone();
    (got, runs.get(), sim.worker_stats())
}

/// A deferred reply sent from another handler's run is remembered: when it is lost, the
/// caller's retransmission gets it again (it used to find the call still marked deferred and
/// be dropped, so the caller gave up: WAITDIE over RPC at 1% loss failed runs with "got no
/// reply after 4 attempts"). Each call's handler runs once.
#[test]
fn a_lost_deferred_reply_is_sent_again_on_retransmission() {
    for seed in 1..=5 {
        let (got, runs, stats) = parked_calls(0.3, seed, 40);
        assert_eq!(got.len(), 40, "seed {seed}: calls left unanswered");
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.as_deref(), Ok(&b"granted"[..]), "seed {seed}: call {i}");
        }
        assert_eq!(runs, 40, "seed {seed}: a retransmitted parked call ran its handler again");
        assert!(stats.rpc_retransmits > 0, "seed {seed}: no loss exercised");
    }
}
