//! Issue 15, mechanism 2: CPU work on participant and coordinator.
//!
//! The seeds' workers run one event loop per thread (DrTM+H Sec. 4.1, RCC Sec. 3: an event
//! handling coroutine polls completions and runs RPC handlers; transaction coroutines yield
//! only after issuing network requests). So a transaction's logic runs to its next request
//! without letting handlers in, and an RPC arriving meanwhile waits for it: txbed's worker does
//! the same (`Ctx::compute` blocks the worker; handlers run when the coroutine yields). A
//! handler pays `rpc_dispatch_ns`, copies of its request and reply, and the cache-missing
//! memory accesses it makes (`memory_miss_ns`: by key, the index bucket then the tuple).

use std::rc::Rc;

use txbed_tests::{cell, small_sim};
use txbed_transport::*;

/// The latency of one RPC to a worker that is busy computing for `busy_ns` when the request
/// arrives, and the latency to an idle one.
fn rpc_latency_behind(busy_ns: u64, handler_misses: u64) -> u64 {
    let mut sim = small_sim(2, 1, 1, |_| {});
    let h: Rc<HandlerFn> = Rc::new(move |ctx: &mut HandlerCtx<'_>, _req: &[u8]| {
        ctx.memory_misses(handler_misses);
        ctx.reply.push(1);
        Handled::Reply
    });
    sim.worker(1, 0).register_handler(3, h);
    // Node 1's only worker starts a block of transaction logic at time 0.
    sim.spawn(1, 0, move |ctx| async move {
        ctx.compute(busy_ns);
    });
    let took = cell::<u64>();
    let out = took.clone();
    sim.spawn(0, 0, move |ctx| async move {
        let t = ctx.now();
        ctx.rpc(Endpoint { node: NodeId(1), worker: 0 }, 3, &[0u8; 16]).await.unwrap();
        *out.borrow_mut() = ctx.now() - t;
    });
    sim.run_until(1_000_000_000);
    let v = *took.borrow();
    v
}

/// An idle server answers in one UD round trip (a few us on cx4). A server busy with 50 us of
/// logic started when the call left serves it only when the logic ends: the call takes the
/// 50 us block, minus the one-way trip already overlapped with it, plus the way back. So
/// the busy latency exceeds the idle one by 50 us less at most one idle round trip.
#[test]
fn an_rpc_waits_for_the_servers_logic_to_yield() {
    let idle = rpc_latency_behind(0, 0);
    let busy = rpc_latency_behind(50_000, 0);
    assert!(idle > 1_000 && idle < 10_000, "idle RPC {idle} ns");
    assert!(busy >= 50_000 && busy <= 50_000 + idle, "busy {busy} ns, idle {idle} ns");
}

/// Each cache-missing access a handler makes adds `memory_miss_ns` (90 ns on every built-in
/// profile: idle DRAM load-to-use latency of the Xeon E5 class hosts the profiles assume) to
/// the call: a LOCK by key (bucket, tuple) costs 2 x 90 = 180 ns more than a handler touching
/// nothing.
#[test]
fn handler_memory_misses_add_to_the_call() {
    let p = txbed_sim::NicProfile::load("cx4").unwrap();
    assert_eq!(p.host.memory_miss_ns, 90);
    let none = rpc_latency_behind(0, 0);
    let by_key = rpc_latency_behind(0, txbed_txn::participant::BY_KEY);
    assert_eq!(by_key - none, 2 * p.host.memory_miss_ns);
}
