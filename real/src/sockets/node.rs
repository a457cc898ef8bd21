//! A node of a sockets run: the same `WorkerCore`s and protocol code as in the simulator, driven
//! by real threads, TCP and UDP.
//!
//! - Every worker thread owns its `WorkerCore` and its own protocol state (`NodeState`):
//!   nothing is shared between worker threads but the registered memory (atomics) and the
//!   catalog (immutable).
//! - An RC QP is a TCP connection to the peer's NIC thread (`sockets.rs`). Posting writes the
//!   doorbell's requests back to back and flushes once. A reader thread per QP takes the
//!   replies in order, writes READ and atomic results into local memory, then delivers the
//!   completion (signaled requests, and every error) to the worker's inbox. A broken
//!   connection completes the request in flight with `RetryExceeded` and the rest `Flushed`.
//! - WRITE_WITH_IMM and RC SEND go over the same connection; the target NIC hands the
//!   immediate or the payload to its worker of the same index (`sockets::NicRoutes`).
//! - The UD QP is a UDP socket per worker; a receiver thread delivers datagrams. Real loss is
//!   handled by the RPC layer's retransmission, as simulated loss is.
//! - The worker loop feeds the inbox into the core, runs it with wall-clock time, sends what it
//!   posted, and sleeps on the inbox until its next timer when idle.
//! - Emulated partitions (`crate::partitions`): datagrams across a cut are dropped, RC
//!   doorbells across it held per QP in order, completions coming back over it held; the
//!   idle wait wakes when one heals.

use std::collections::VecDeque;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use txbed_transport::*;

use crate::partitions::{Counts, HeldDoorbells, Partitions};
use crate::sockets::{encode_request, hello, write_frame, Inbound, NicRoutes, SharedMemory, Verb};

/// Where a node can be reached: its NIC and every worker's UDP socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddrs {
    pub nic: SocketAddr,
    pub udp: Vec<SocketAddr>,
    /// The node's store region (as every node's layout is the same, only keys differ).
    pub store: MemoryRegion,
}

impl NodeAddrs {
    pub fn encode(&self) -> Vec<u8> {
        let mut s =
            format!("{}|{}|{}|{}|{}", self.nic, self.store.addr, self.store.len, self.store.rkey, self.store.lkey);
        for u in &self.udp {
            s.push('|');
            s.push_str(&u.to_string());
        }
        s.into_bytes()
    }
    pub fn decode(b: &[u8]) -> Result<NodeAddrs, String> {
        let s = std::str::from_utf8(b).map_err(|e| e.to_string())?;
        let mut it = s.split('|');
        let bad = || format!("malformed node descriptor {s:?}");
        let nic = it.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let mut num = || -> Result<u64, String> { it.next().ok_or_else(bad)?.parse().map_err(|_| bad()) };
        let store = MemoryRegion { addr: num()?, len: num()?, rkey: num()? as u32, lkey: num()? as u32 };
        let udp = it.map(|u| u.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
        Ok(NodeAddrs { nic, udp, store })
    }
}

/// What a reader thread needs to finish a request.
struct Pending {
    wr_id: u64,
    opcode: Opcode,
    signaled: bool,
    /// Where READ data or an atomic's old value lands.
    sink: Option<(u64, u32)>,
}

struct RcQp {
    peer: u16,
    core: QpId,
    wr: Option<BufWriter<TcpStream>>,
    pending: Arc<Mutex<VecDeque<Pending>>>,
    broken: Arc<AtomicBool>,
}

fn read_frame(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// One worker thread's transport.
pub struct SocketsWorker {
    pub core: WorkerCore,
    inbox: Receiver<Inbound>,
    tx: Sender<Inbound>,
    rc: Vec<Option<RcQp>>,
    udp: UdpSocket,
    peers: Vec<NodeAddrs>,
    mem: SharedMemory,
    start: Instant,
    me: Endpoint,
    /// Extra one-way delay to each node (ns): inbound traffic from a delayed link is held.
    delay_ns: Vec<u64>,
    /// Held inbound traffic by (due time, arrival order).
    held: std::collections::BTreeMap<(Nanos, u64), Inbound>,
    arrivals: u64,
    /// Injected UD loss (the NIC profile's `ud_drop_probability`): outbound datagrams dropped
    /// with this probability, so the RPC layer's retransmission is exercised for real.
    loss: Option<(f64, rand::rngs::StdRng)>,
    /// Emulated partitions (`crate::partitions`), the RC doorbells they hold, and counts.
    partitions: Arc<Partitions>,
    held_dbs: HeldDoorbells<Doorbell>,
    pub partitioned: Counts,
}

impl SocketsWorker {
    /// Connects this worker's QPs: one RC QP to every node's NIC (itself included), and its
    /// UD socket (already bound; its receiver thread starts here). Registers with the local
    /// NIC's `routes` for immediates and RC SENDs.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        mut core: WorkerCore,
        me: Endpoint,
        udp: UdpSocket,
        peers: Vec<NodeAddrs>,
        mem: SharedMemory,
        routes: &NicRoutes,
        start: Instant,
        depth: u32,
    ) -> Result<SocketsWorker, String> {
        let (tx, inbox) = channel();
        routes.register(me.worker, tx.clone());
        let ud = core.add_qp(QpType::Ud, me.node, depth);
        let mut rc: Vec<Option<RcQp>> = Vec::new();
        rc.resize_with(ud.0 as usize + 1, || None);
        for (n, p) in peers.iter().enumerate() {
            let id = core.add_qp(QpType::Rc, NodeId(n as u16), depth);
            let s = TcpStream::connect(p.nic)
                .map_err(|e| format!("{me}: cannot reach node {n}'s NIC at {}: {e}", p.nic))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            write_frame(&mut &s, &hello(me)).map_err(|e| format!("{me}: node {n}'s NIC: {e}"))?;
            let pending: Arc<Mutex<VecDeque<Pending>>> = Arc::default();
            let broken = Arc::new(AtomicBool::new(false));
            let (rd, pend, brk, txc, m) =
                (s.try_clone().map_err(|e| e.to_string())?, pending.clone(), broken.clone(), tx.clone(), mem.clone());
            std::thread::Builder::new()
                .name(format!("txbed-qp-{}-{}-{n}", me.node.0, me.worker))
                .spawn(move || reader(rd, pend, brk, txc, m, id, NodeId(n as u16)))
                .map_err(|e| e.to_string())?;
            if rc.len() <= id.0 as usize {
                rc.resize_with(id.0 as usize + 1, || None);
            }
            rc[id.0 as usize] = Some(RcQp { peer: n as u16, core: id, wr: Some(BufWriter::new(s)), pending, broken });
        }
        // UD receiver: map the source address back to its endpoint.
        let (u, txu, ps) = (udp.try_clone().map_err(|e| e.to_string())?, tx.clone(), peers.clone());
        std::thread::Builder::new()
            .name(format!("txbed-ud-{}-{}", me.node.0, me.worker))
            .spawn(move || {
                let mut buf = vec![0u8; 65536];
                while let Ok((n, from)) = u.recv_from(&mut buf) {
                    let src = ps.iter().enumerate().find_map(|(node, p)| {
                        p.udp
                            .iter()
                            .position(|a| *a == from)
                            .map(|w| Endpoint { node: NodeId(node as u16), worker: w as u16 })
                    });
                    if let Some(src) = src {
                        if txu.send(Inbound::Datagram(src, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let delay_ns = Vec::new();
        let (held, arrivals) = (Default::default(), 0);
        Ok(SocketsWorker {
            core,
            inbox,
            tx,
            rc,
            udp,
            peers,
            mem,
            start,
            me,
            delay_ns,
            held,
            arrivals,
            loss: None,
            partitions: Arc::default(),
            held_dbs: HeldDoorbells::default(),
            partitioned: Counts::default(),
        })
    }

    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Sets the instant time is measured from (the run's common start).
    pub fn set_start(&mut self, start: Instant) {
        self.start = start;
    }

    /// Emulates long-haul links: one-way extra delay to each node, ns (a completion waits
    /// for the request and the response, so twice its link's delay; a datagram once).
    pub fn set_link_delays(&mut self, delay_ns: Vec<u64>) {
        self.delay_ns = delay_ns;
    }

    /// Drops each outbound datagram with probability `p` (seeded), as a lossy UD network would.
    pub fn set_datagram_loss(&mut self, p: f64, seed: u64) {
        use rand::SeedableRng;
        self.loss = (p > 0.0).then(|| (p, rand::rngs::StdRng::seed_from_u64(seed)));
    }

    /// Emulates network partitions on wall-clock windows from the common start.
    pub fn set_partitions(&mut self, p: Arc<Partitions>) {
        self.partitions = p;
    }

    /// Takes inbound traffic: now, or held until its link's delay has passed, or (an RC
    /// response over a cut link) until the partition heals.
    fn arrive(&mut self, x: Inbound) {
        let hold = match &x {
            Inbound::Completion(c) => 2 * self.delay_ns.get(c.peer.0 as usize).copied().unwrap_or(0),
            Inbound::Datagram(src, _) => self.delay_ns.get(src.node.0 as usize).copied().unwrap_or(0),
            Inbound::Imm(src, _) => self.delay_ns.get(src.0 as usize).copied().unwrap_or(0),
        };
        let now = self.now();
        // Only replies that came over the wire: local errors name the peer too.
        let heal = match &x {
            Inbound::Completion(c) if matches!(c.status, WcStatus::Success | WcStatus::RemoteAccessError) => {
                self.partitions.cut(c.peer.0, self.me.node.0, now)
            }
            _ => None,
        };
        if heal.is_some() {
            self.partitioned.completions_held += 1;
        }
        let due = (now + hold).max(heal.unwrap_or(0));
        if due == now && self.held.is_empty() {
            self.deliver(x);
        } else {
            self.arrivals += 1;
            self.held.insert((due, self.arrivals), x);
        }
    }

    fn release_due(&mut self) {
        let now = self.now();
        while let Some(e) = self.held.first_entry() {
            if e.key().0 > now {
                break;
            }
            let x = e.remove();
            self.deliver(x);
        }
    }

    fn deliver(&mut self, x: Inbound) {
        match x {
            Inbound::Completion(c) => self.core.on_completion(c),
            Inbound::Datagram(src, b) => self.core.on_datagram(src, b),
            Inbound::Imm(src, imm) => self.core.on_imm(src, imm),
        }
    }

    /// One loop iteration: inbox, run, send. Returns whether the core has more to do now.
    pub fn step(&mut self, idle_wait: Duration) {
        while let Ok(x) = self.inbox.try_recv() {
            self.arrive(x);
        }
        self.release_due();
        if !self.held_dbs.is_empty() {
            for db in self.held_dbs.release(&self.partitions, self.me.node.0, self.now()) {
                self.send_rc(db);
            }
        }
        let now = self.now();
        self.core.run(now);
        let mut dbs = Vec::new();
        self.core.drain_doorbells(&mut dbs);
        for db in dbs {
            self.send(db);
        }
        if !self.core.has_work() {
            let heal = self.held_dbs.next_heal(&self.partitions, self.me.node.0, self.now());
            let next = [self.core.poll_timeout(), self.held.first_key_value().map(|(k, _)| k.0), heal]
                .into_iter()
                .flatten()
                .min();
            let wait = match next {
                Some(t) => Duration::from_nanos(t.saturating_sub(self.now())).min(idle_wait),
                None => idle_wait,
            };
            match self.inbox.recv_timeout(wait) {
                Ok(x) => self.arrive(x),
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
            }
        }
    }

    fn complete_now(&self, wr: &WorkRequest, qp: QpId, status: WcStatus, peer: NodeId) {
        let _ = self.tx.send(Inbound::Completion(Completion {
            wr_id: wr.wr_id,
            qp,
            opcode: wr.op.opcode(),
            status,
            signaled: wr.signaled,
            peer,
        }));
    }

    fn send(&mut self, db: Doorbell) {
        let qi = db.qp.0 as usize;
        if self.rc.get(qi).is_some_and(|q| q.is_none()) || qi >= self.rc.len() {
            // The UD QP: each SEND is one datagram.
            for wr in &db.wrs {
                if let Op::Send { src: Payload::Inline(bytes), dest: Some(d) } = &wr.op {
                    let lost = self.loss.as_mut().is_some_and(|(p, rng)| rand::Rng::gen_bool(rng, *p));
                    let cut = self.partitions.cut(self.me.node.0, d.node.0, self.now()).is_some();
                    self.partitioned.datagrams_dropped += cut as u64;
                    if let Some(addr) = self.peers.get(d.node.0 as usize).and_then(|p| p.udp.get(d.worker as usize)) {
                        if !lost && !cut {
                            let _ = self.udp.send_to(bytes, addr);
                        }
                    }
                }
                if wr.signaled {
                    self.complete_now(wr, db.qp, WcStatus::Success, self.me.node);
                }
            }
            return;
        }
        // RC: held while its link is cut (or earlier doorbells of its QP are).
        let peer = self.rc[qi].as_ref().map_or(self.me.node.0, |q| q.peer);
        let now = self.now();
        if let Some(db) = self.held_dbs.post(&self.partitions, self.me.node.0, db.qp.0, peer, db, now) {
            self.send_rc(db);
        } else {
            self.partitioned.doorbells_held += 1;
        }
    }

    /// Writes an RC doorbell's requests to its QP's connection.
    fn send_rc(&mut self, db: Doorbell) {
        let qi = db.qp.0 as usize;
        let mem = self.mem.clone();
        let q = self.rc[qi].as_mut().expect("RC QP");
        let peer = NodeId(q.peer);
        let broken = q.broken.load(Ordering::Acquire);
        let mut frames = Vec::new();
        let mut local_errors = Vec::new();
        {
            let bytes_of = |p: &Payload| match p {
                Payload::Inline(b) => Some(b.clone()),
                Payload::Local(l) => {
                    let mut v = vec![0u8; l.len as usize];
                    mem.read(l.addr, &mut v).ok().map(|_| v)
                }
            };
            let mut pend = q.pending.lock().expect("pending");
            for wr in &db.wrs {
                let (verb, remote, a, b, payload, sink) = match &wr.op {
                    Op::Read { local, remote } => {
                        (Verb::Read, *remote, 0, 0, Vec::new(), Some((local.addr, local.len)))
                    }
                    Op::Write { src, remote } | Op::WriteImm { src, remote, .. } => {
                        let Some(data) = bytes_of(src) else {
                            local_errors.push((wr.clone(), WcStatus::LocalProtectionError));
                            continue;
                        };
                        match &wr.op {
                            Op::WriteImm { imm, .. } => (Verb::WriteImm, *remote, *imm as u64, 0, data, None),
                            _ => (Verb::Write, *remote, 0, 0, data, None),
                        }
                    }
                    Op::Send { src, dest: None } => {
                        let Some(data) = bytes_of(src) else {
                            local_errors.push((wr.clone(), WcStatus::LocalProtectionError));
                            continue;
                        };
                        // A SEND names no remote address; the receiving NIC routes it.
                        (Verb::Send, RemoteBuf { rkey: 0, addr: 0, len: 0 }, 0, 0, data, None)
                    }
                    Op::Cas { local, remote, compare, swap } => {
                        (Verb::Cas, *remote, *compare, *swap, Vec::new(), Some((local.addr, 8)))
                    }
                    Op::Faa { local, remote, add } => (Verb::Faa, *remote, *add, 0, Vec::new(), Some((local.addr, 8))),
                    // A UD SEND (with a destination) on an RC QP.
                    Op::Send { dest: Some(_), .. } => {
                        local_errors.push((wr.clone(), WcStatus::LocalQpOperationError));
                        continue;
                    }
                };
                if broken {
                    local_errors.push((wr.clone(), WcStatus::Flushed));
                    continue;
                }
                frames.push(encode_request(verb, remote.rkey, remote.addr, remote.len, a, b, &payload));
                pend.push_back(Pending { wr_id: wr.wr_id, opcode: wr.op.opcode(), signaled: wr.signaled, sink });
            }
        }
        if let Some(w) = q.wr.as_mut() {
            // The doorbell: every request written, one flush.
            let ok = frames
                .iter()
                .all(|f| w.write_all(&(f.len() as u32).to_le_bytes()).and_then(|_| w.write_all(f)).is_ok())
                && w.flush().is_ok();
            if !ok {
                q.broken.store(true, Ordering::Release);
            }
        }
        let core = q.core;
        for (wr, st) in local_errors {
            self.complete_now(&wr, core, st, peer);
        }
    }

    /// Marks the QPs' connections for shutdown (their reader threads end with the sockets).
    pub fn close(&mut self) {
        for q in self.rc.iter_mut().flatten() {
            if let Some(w) = q.wr.take() {
                if let Ok(s) = w.into_inner() {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
        }
    }
}

/// Replies of one RC QP, in order. Results land in local memory before the completion.
fn reader(
    s: TcpStream,
    pending: Arc<Mutex<VecDeque<Pending>>>,
    broken: Arc<AtomicBool>,
    tx: Sender<Inbound>,
    mem: SharedMemory,
    qp: QpId,
    peer: NodeId,
) {
    let mut rd = BufReader::new(s);
    while let Ok(rep) = read_frame(&mut rd) {
        let Some(p) = pending.lock().expect("pending").pop_front() else { break };
        let ok = rep.first() == Some(&0);
        if ok {
            if let Some((addr, len)) = p.sink {
                let data = rep.get(8..8 + len as usize).unwrap_or_default();
                let _ = mem.write(addr, data);
            }
        }
        let status = if ok { WcStatus::Success } else { WcStatus::RemoteAccessError };
        if p.signaled || !ok {
            let c = Completion { wr_id: p.wr_id, qp, opcode: p.opcode, status, signaled: p.signaled, peer };
            if tx.send(Inbound::Completion(c)).is_err() {
                return;
            }
        }
    }
    // The connection broke (peer dead or closing): what was in flight fails.
    broken.store(true, Ordering::Release);
    let mut first = true;
    for p in pending.lock().expect("pending").drain(..) {
        let status = if first { WcStatus::RetryExceeded } else { WcStatus::Flushed };
        first = false;
        let _ = tx.send(Inbound::Completion(Completion {
            wr_id: p.wr_id,
            qp,
            opcode: p.opcode,
            status,
            signaled: p.signaled,
            peer,
        }));
    }
}
