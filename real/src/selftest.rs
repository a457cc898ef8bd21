//! `txbed selftest`: two nodes in this process, one worker each, exchange the verbs no protocol
//! exercises yet over a real backend (sockets, or verbs on a real or soft-RoCE device), through
//! the same `WorkerCore` and transports as a run:
//!
//! - every node, to every node (itself included, which on verbs goes through the loopback QP),
//!   posts one doorbell: a 64-byte WRITE, an 8-byte WRITE_WITH_IMM right behind it, and an RC
//!   SEND carrying a one-way RPC message;
//! - the target's coroutine waits for each immediate and checks that it names the sender, and
//!   that the WRITE before it on the QP (per-QP order) and its own data are already in memory;
//! - the RPC carried by the RC SEND is served by a handler, which checks sender and payload.
//!
//! Any mismatch, failed completion or missing delivery within the deadline is an error.

use std::cell::RefCell;
use std::net::{SocketAddr, UdpSocket};
use std::rc::Rc;
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use txbed_transport::rpc::oneway_message;
use txbed_transport::*;

use crate::host::WorkerTransport;
use crate::sockets::node::{NodeAddrs, SocketsWorker};
use crate::sockets::{start_nic, NicRoutes, SharedMemory, REGION_BASE};

const NODES: u16 = 2;
const TARGET: u64 = 2 * REGION_BASE;
const TARGET_LEN: u64 = 4096;
const SCRATCH_LEN: u64 = 64 << 10;
const HANDLER: u16 = 1;
const DEADLINE: Duration = Duration::from_secs(20);

/// Which real fabric to test.
pub enum SelftestBackend {
    Sockets,
    #[cfg(feature = "verbs")]
    Verbs {
        device: Option<String>,
        gid_index: Option<u32>,
    },
}

fn keys(node: u16) -> [(u64, u32, u32); 2] {
    let k = |i: u32| 0x5000_0000 | ((node as u32) << 12) | i;
    [(SCRATCH_LEN, k(0), 0x6000_0000 | ((node as u32) << 12)), (TARGET_LEN, k(1), 0x6000_0001 | ((node as u32) << 12))]
}

fn pattern(from: u16, to: u16) -> [u8; 64] {
    [0x10 * (from as u8 + 1) + to as u8; 64]
}
fn imm_of(from: u16, to: u16) -> u32 {
    0x5e1f_0000 | ((from as u32) << 8) | to as u32
}
fn message(from: u16, to: u16) -> Vec<u8> {
    format!("rc send from node {from} to node {to}").into_bytes()
}

/// Runs the exchange; returns one line per check passed, or the first failure.
pub fn run(backend: SelftestBackend) -> Result<Vec<String>, String> {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    let mut threads = Vec::new();
    // No node posts before every node is connected (its NIC routes and receives in place):
    // an immediate for a worker not yet registered fails remotely. A node that failed to
    // connect still passes the barrier, so the other does not wait forever.
    let connected = Arc::new(Barrier::new(NODES as usize));
    match backend {
        SelftestBackend::Sockets => {
            let mut nodes = Vec::new();
            for n in 0..NODES {
                let mem = SharedMemory::new(&keys(n));
                let routes = NicRoutes::default();
                let lo: SocketAddr = "127.0.0.1:0".parse().expect("address");
                let nic = start_nic(mem.clone(), routes.clone(), lo).map_err(|e| format!("NIC: {e}"))?;
                let udp = UdpSocket::bind(lo).map_err(|e| format!("UDP: {e}"))?;
                let addrs =
                    NodeAddrs { nic, udp: vec![udp.local_addr().map_err(|e| e.to_string())?], store: mem.regions()[1] };
                nodes.push((mem, routes, udp, addrs));
            }
            let peers: Vec<NodeAddrs> = nodes.iter().map(|n| n.3.clone()).collect();
            for (n, (mem, routes, udp, _)) in nodes.into_iter().enumerate() {
                let (peers, tx, connected) = (peers.clone(), tx.clone(), connected.clone());
                threads.push(std::thread::spawn(move || {
                    let node = n as u16;
                    let r = (|| {
                        let core = core(node, &mem);
                        let w = SocketsWorker::connect(core, me(node), udp, peers, mem, &routes, start, 64);
                        connected.wait();
                        drive(Box::new(w?), node)
                    })();
                    let _ = tx.send((node, r));
                }));
            }
        }
        #[cfg(feature = "verbs")]
        SelftestBackend::Verbs { device, gid_index } => {
            use crate::verbs::transport::{VerbsMemory, VerbsNode};
            let mut devs = Vec::new();
            for n in 0..NODES {
                let mem = VerbsMemory::new(&keys(n));
                devs.push(VerbsNode::open(device.as_deref(), gid_index, mem, NODES, 1, 64).map_err(|e| e.to_string())?);
            }
            let peers: Vec<_> = devs.iter().map(|d| d.descriptor().clone()).collect();
            for (n, dev) in devs.iter_mut().enumerate() {
                let qps = dev.take_worker(0).ok_or("worker 0's queue pairs are missing")?;
                let (peers, tx, connected) = (peers.clone(), tx.clone(), connected.clone());
                threads.push(std::thread::spawn(move || {
                    let node = n as u16;
                    let r = (|| {
                        let core = core(node, &qps.1);
                        let w = crate::verbs::transport::VerbsWorker::connect(core, me(node), qps, peers, start, 64);
                        connected.wait();
                        drive(Box::new(w?), node)
                    })();
                    let _ = tx.send((node, r));
                }));
            }
            // The devices stay open until both workers are done.
            let r = collect(rx, threads);
            drop(devs);
            return r;
        }
    }
    collect(rx, threads)
}

fn collect(
    rx: mpsc::Receiver<(u16, Result<Vec<String>, String>)>,
    threads: Vec<std::thread::JoinHandle<()>>,
) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    let mut first_err = None;
    for _ in 0..threads.len() {
        match rx.recv_timeout(DEADLINE + Duration::from_secs(5)) {
            Ok((_, Ok(l))) => lines.extend(l),
            Ok((node, Err(e))) => {
                let _ = node;
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert("a node neither finished nor failed".to_string());
                break;
            }
        }
    }
    if first_err.is_none() {
        for t in threads {
            let _ = t.join();
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => {
            lines.sort();
            Ok(lines)
        }
    }
}

fn me(node: u16) -> Endpoint {
    Endpoint { node: NodeId(node), worker: 0 }
}

fn core(node: u16, mem: &(impl HostMemory + Clone + 'static)) -> WorkerCore {
    let scratch = mem.regions()[0];
    let cfg = WorkerConfig {
        me: me(node),
        nodes: NODES,
        workers: 1,
        costs: CpuCosts::zero(),
        rpc: RpcConfig {
            timeout_ns: 50_000_000,
            rto_min_ns: 50_000_000,
            rto_max_ns: 50_000_000,
            retries: 10,
            ..RpcConfig::default()
        },
        seed: node as u64,
        scratch: LocalBuf { lkey: scratch.lkey, addr: scratch.addr, len: scratch.len as u32 },
        scratch_per_coroutine: SCRATCH_LEN as u32,
        incarnation: 0,
    };
    WorkerCore::new(cfg, Rc::new(mem.clone()))
}

/// Runs node `node`'s coroutine and handler to the end; returns what it checked.
fn drive(mut w: Box<dyn WorkerTransport>, node: u16) -> Result<Vec<String>, String> {
    let log: Rc<RefCell<Vec<Result<String, String>>>> = Rc::default();
    let l = log.clone();
    w.core().register_handler(
        HANDLER,
        Rc::new(move |h: &mut HandlerCtx<'_>, payload: &[u8]| {
            let want = message(h.src.node.0, h.me.node.0);
            l.borrow_mut().push(if payload == want.as_slice() && h.src.worker == 0 {
                Ok(format!("node {}: RC SEND from node {} served as an RPC", h.me.node.0, h.src.node.0))
            } else {
                Err(format!(
                    "node {}: RC SEND from {} carried {:?}",
                    h.me.node.0,
                    h.src,
                    String::from_utf8_lossy(payload)
                ))
            });
            Handled::NoReply
        }),
    );
    let l = log.clone();
    w.core().spawn(move |ctx| async move {
        let r = program(&ctx, node).await;
        l.borrow_mut().extend(r);
    });
    w.set_start(Instant::now());
    let until = Instant::now() + DEADLINE;
    // Per peer: a completion, an immediate and a served RC SEND.
    let expected = 3 * NODES as usize;
    while log.borrow().len() < expected && !log.borrow().iter().any(|r| r.is_err()) && Instant::now() < until {
        w.step(Duration::from_millis(1));
    }
    // Let the peer's last requests complete before this node's QPs close.
    let linger = Instant::now() + Duration::from_millis(200);
    while Instant::now() < linger {
        w.step(Duration::from_millis(1));
    }
    w.close();
    let log = std::mem::take(&mut *log.borrow_mut());
    let mut ok = Vec::new();
    for r in log {
        ok.push(r?);
    }
    if ok.len() < expected {
        return Err(format!("only {} of {expected} checks finished within {DEADLINE:?}: {ok:?}", ok.len()));
    }
    Ok(ok)
}

/// Node `node`'s side: post to every node, then check every node's requests to it.
async fn program(ctx: &Ctx, node: u16) -> Vec<Result<String, String>> {
    let mut out = Vec::new();
    for t in 0..NODES {
        let Some(qp) = ctx.rc_qp(NodeId(t), 0) else {
            out.push(Err(format!("node {node}: no RC QP to node {t}")));
            return out;
        };
        let rkey = keys(t)[1].1;
        let at = |off: u64, len: u32| RemoteBuf { rkey, addr: TARGET + 128 * node as u64 + off, len };
        let ops = [
            (Op::Write { src: Payload::Inline(pattern(node, t).to_vec()), remote: at(0, 64) }, false),
            (Op::WriteImm { src: Payload::Inline(vec![0xab; 8]), remote: at(64, 8), imm: imm_of(node, t) }, false),
            (Op::Send { src: Payload::Inline(oneway_message(HANDLER, &message(node, t))), dest: None }, true),
        ];
        if let Err(e) = ctx.post(qp, ops) {
            out.push(Err(format!("node {node}: posting to node {t}: {e:?}")));
            return out;
        }
        match ctx.wait().await {
            Ok(()) => out.push(Ok(format!("node {node}: WRITE, WRITE_WITH_IMM and RC SEND to node {t} completed"))),
            Err(c) => {
                out.push(Err(format!("node {node}: a request to node {t} failed: {:?} ({:?})", c.status, c.opcode)));
                return out;
            }
        }
    }
    for _ in 0..NODES {
        let (src, imm) = ctx.wait_imm().await;
        let base = TARGET + 128 * src.0 as u64;
        let (mut data, mut tail) = ([0u8; 64], [0u8; 8]);
        let read = ctx.read_local(base, &mut data).and_then(|_| ctx.read_local(base + 64, &mut tail));
        out.push(if imm != imm_of(src.0, node) {
            Err(format!("node {node}: immediate {imm:#x} from node {}, expected {:#x}", src.0, imm_of(src.0, node)))
        } else if read.is_err() || data != pattern(src.0, node) || tail != [0xab; 8] {
            Err(format!("node {node}: immediate from node {} arrived before its data (or the WRITE before it)", src.0))
        } else {
            Ok(format!(
                "node {node}: WRITE_WITH_IMM from node {} arrived after its data and the WRITE before it",
                src.0
            ))
        });
    }
    out
}
