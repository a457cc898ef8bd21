//! The sockets backend's NIC: registered memory shared by the worker threads and a NIC thread
//! that serves one-sided verbs from other processes over TCP (the worker side is
//! `sockets_node.rs`, the hosting `host.rs`).
//!
//! - Memory is a set of regions of `words::Words`: CPU access (`HostMemory`) and NIC access
//!   both go through word-sized atomics, so an 8-byte CAS/FAA is atomic (the CPU's own
//!   atomics), while a multi-word READ racing a WRITE can be torn, as on a real NIC.
//! - Each RC queue pair is one TCP connection; the NIC thread serves each connection's requests
//!   one after another and answers in order, so per-QP FIFO holds.
//! - Every request is checked against the region's rkey and bounds; a bad one gets a remote
//!   access error and nothing is read or written.
//! - A connection opens with the requester's endpoint. WRITE_WITH_IMM places its data, then
//!   hands the immediate to the local worker with the requester's worker index (an RC QP pairs
//!   equal worker indices, as in the simulator), then answers; an RC SEND hands its payload to
//!   that worker the same way (its receive path), so both arrive after everything before them
//!   on the QP.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::sync::mpsc::Sender;
use std::sync::Mutex;

use crate::words::Words;
use txbed_transport::{Completion, Endpoint, HostMemory, MemError, MemoryRegion, NodeId, WcStatus};

/// What reaches a worker thread from outside: completions of its own requests, datagrams
/// (UD, or RC SEND through the NIC) and immediates of WRITE_WITH_IMM.
pub enum Inbound {
    Completion(Completion),
    Datagram(Endpoint, Vec<u8>),
    Imm(NodeId, u32),
}

/// The NIC's way to each local worker's inbox (a worker registers when it connects).
#[derive(Clone, Default)]
pub struct NicRoutes(Arc<Mutex<Vec<Option<Sender<Inbound>>>>>);

impl NicRoutes {
    pub fn register(&self, worker: u16, tx: Sender<Inbound>) {
        let mut r = self.0.lock().expect("routes");
        if r.len() <= worker as usize {
            r.resize(worker as usize + 1, None);
        }
        r[worker as usize] = Some(tx);
    }
    /// Delivers to `worker`; false when it has no inbox (then the request fails remotely).
    fn deliver(&self, worker: u16, x: Inbound) -> bool {
        let r = self.0.lock().expect("routes");
        r.get(worker as usize).and_then(|t| t.as_ref()).is_some_and(|t| t.send(x).is_ok())
    }
}

struct Region {
    mr: MemoryRegion,
    words: Words,
}

/// A process's registered memory, shared by its workers and its NIC thread.
#[derive(Clone, Default)]
pub struct SharedMemory {
    regions: Arc<Vec<Region>>,
    /// The HTM emulation's node-wide lock (`txbed_transport::htm::NodeLock`), when the run
    /// emulates HTM: every access takes it, so a region holding it excludes them all.
    htm: Option<txbed_transport::htm::NodeLock>,
}

/// Region `i` starts at this address times `i + 1`, as in the simulator.
pub const REGION_BASE: u64 = 1 << 40;

impl SharedMemory {
    /// Memory with regions of the given lengths (rounded up to 8 bytes) and keys.
    pub fn new(regions: &[(u64, u32, u32)]) -> Self {
        let r = regions
            .iter()
            .enumerate()
            .map(|(i, &(len, rkey, lkey))| Region {
                mr: MemoryRegion { addr: REGION_BASE * (i as u64 + 1), len, rkey, lkey },
                words: Words::new(len),
            })
            .collect();
        SharedMemory { regions: Arc::new(r), htm: None }
    }

    /// Every access takes `lock` (the HTM emulation's).
    pub fn with_htm_lock(mut self, lock: txbed_transport::htm::NodeLock) -> Self {
        self.htm = Some(lock);
        self
    }

    /// The emulation's lock, if the run emulates HTM.
    pub fn htm_lock(&self) -> Option<txbed_transport::htm::NodeLock> {
        self.htm.clone()
    }

    /// Holds the emulation's lock, if any, for as long as the guard lives.
    fn exclude(&self) -> Option<parking_lot::ReentrantMutexGuard<'_, ()>> {
        self.htm.as_ref().map(|l| l.lock())
    }

    /// Region `i`'s words (what the verbs backend registers with its NIC).
    #[cfg(feature = "verbs")]
    pub(crate) fn region_words(&self, i: usize) -> &Words {
        &self.regions[i].words
    }

    fn find(&self, addr: u64, len: u64, rkey: Option<u32>) -> Option<&Region> {
        let i = (addr / REGION_BASE).checked_sub(1)? as usize;
        let r = self.regions.get(i)?;
        if rkey.is_some_and(|k| k != r.mr.rkey) || !r.mr.contains(addr, len) {
            return None;
        }
        Some(r)
    }

    fn word(&self, addr: u64, rkey: Option<u32>) -> Result<&AtomicU64, ()> {
        if addr % 8 != 0 {
            return Err(());
        }
        let r = self.find(addr, 8, rkey).ok_or(())?;
        Ok(r.words.word(addr - r.mr.addr))
    }
}

impl HostMemory for SharedMemory {
    fn regions(&self) -> Vec<MemoryRegion> {
        self.regions.iter().map(|r| r.mr).collect()
    }
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        let _excluded = self.exclude();
        let r = self.find(addr, out.len() as u64, None).ok_or(MemError::OutOfBounds { addr, len: out.len() as u64 })?;
        r.words.read(addr - r.mr.addr, out);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let _excluded = self.exclude();
        let r =
            self.find(addr, data.len() as u64, None).ok_or(MemError::OutOfBounds { addr, len: data.len() as u64 })?;
        r.words.write(addr - r.mr.addr, data);
        Ok(())
    }
    fn cas_u64(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        let _excluded = self.exclude();
        let w = self.word(addr, None).map_err(|_| MemError::Misaligned { addr })?;
        Ok(match w.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        })
    }
    fn faa_u64(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        let _excluded = self.exclude();
        let w = self.word(addr, None).map_err(|_| MemError::Misaligned { addr })?;
        Ok(w.fetch_add(add, Ordering::AcqRel))
    }
}

/// Requests on the wire: opcode u8 | pad 3 | rkey u32 | addr u64 | len u32 | pad 4 | a u64 |
/// b u64 | payload (WRITE, WRITE_WITH_IMM with the immediate in `a`, SEND). Replies: status u8
/// | pad 7 | data. A connection's first frame is the requester's [`hello`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verb {
    Read = 1,
    Write = 2,
    Cas = 3,
    Faa = 4,
    WriteImm = 5,
    Send = 6,
}

/// The first frame of a connection: the requesting endpoint.
pub fn hello(from: Endpoint) -> Vec<u8> {
    let mut f = from.node.0.to_le_bytes().to_vec();
    f.extend_from_slice(&from.worker.to_le_bytes());
    f
}

fn parse_hello(b: &[u8]) -> Option<Endpoint> {
    let b: [u8; 4] = b.try_into().ok()?;
    Some(Endpoint { node: NodeId(u16::from_le_bytes([b[0], b[1]])), worker: u16::from_le_bytes([b[2], b[3]]) })
}

pub const REQUEST_HEADER: usize = 40;

pub fn encode_request(verb: Verb, rkey: u32, addr: u64, len: u32, a: u64, b: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(REQUEST_HEADER + payload.len());
    f.push(verb as u8);
    f.extend_from_slice(&[0; 3]);
    f.extend_from_slice(&rkey.to_le_bytes());
    f.extend_from_slice(&addr.to_le_bytes());
    f.extend_from_slice(&len.to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&a.to_le_bytes());
    f.extend_from_slice(&b.to_le_bytes());
    f.extend_from_slice(payload);
    f
}

fn status_code(s: WcStatus) -> u8 {
    match s {
        WcStatus::Success => 0,
        _ => 1,
    }
}

/// Applies one request from `from` to `mem` (immediates and SENDs go through `routes`); returns
/// the reply (status and data).
pub fn serve(mem: &SharedMemory, routes: &NicRoutes, from: Endpoint, req: &[u8]) -> Vec<u8> {
    let bad = || {
        let mut r = vec![status_code(WcStatus::RemoteAccessError)];
        r.extend_from_slice(&[0; 7]);
        r
    };
    if req.len() < REQUEST_HEADER {
        return bad();
    }
    let u64_at = |i: usize| u64::from_le_bytes(req[i..i + 8].try_into().expect("8 bytes"));
    let rkey = u32::from_le_bytes(req[4..8].try_into().expect("4 bytes"));
    let addr = u64_at(8);
    let len = u32::from_le_bytes(req[16..20].try_into().expect("4 bytes")) as u64;
    let (a, b) = (u64_at(24), u64_at(32));
    let mut reply = vec![0u8; 8];
    let _excluded = mem.exclude();
    match req[0] {
        1 => match mem.find(addr, len, Some(rkey)) {
            Some(r) => {
                let mut out = vec![0u8; len as usize];
                r.words.read(addr - r.mr.addr, &mut out);
                reply.extend_from_slice(&out);
            }
            None => return bad(),
        },
        2 | 5 => {
            let data = &req[REQUEST_HEADER..];
            match mem.find(addr, data.len() as u64, Some(rkey)) {
                Some(r) => r.words.write(addr - r.mr.addr, data),
                None => return bad(),
            }
            // The data is in place before the immediate is seen.
            // A routed immediate goes to the worker it names (`verbs::imm`).
            let to = txbed_transport::imm::worker(a as u32).unwrap_or(from.worker);
            if req[0] == 5 && !routes.deliver(to, Inbound::Imm(from.node, a as u32)) {
                return bad();
            }
        }
        6 => {
            if !routes.deliver(from.worker, Inbound::Datagram(from, req[REQUEST_HEADER..].to_vec())) {
                return bad();
            }
        }
        3 | 4 => match mem.word(addr, Some(rkey)) {
            Ok(w) => {
                let old = if req[0] == 3 {
                    match w.compare_exchange(a, b, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(v) | Err(v) => v,
                    }
                } else {
                    w.fetch_add(a, Ordering::AcqRel)
                };
                reply.extend_from_slice(&old.to_le_bytes());
            }
            Err(()) => return bad(),
        },
        _ => return bad(),
    }
    reply
}

fn read_frame(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > 64 << 20 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "frame over 64 MiB"));
    }
    let mut b = vec![0u8; n];
    r.read_exact(&mut b)?;
    Ok(b)
}

pub(crate) fn write_frame(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(&(bytes.len() as u32).to_le_bytes())?;
    w.write_all(bytes)
}

/// The NIC: accepts connections (one per remote QP) and serves each in its own thread, in
/// order. Returns the address it listens on.
pub fn start_nic(mem: SharedMemory, routes: NicRoutes, bind: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(bind)?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new().name("txbed-nic".into()).spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (mem, routes) = (mem.clone(), routes.clone());
            let _ = std::thread::Builder::new().name("txbed-nic-qp".into()).spawn(move || {
                let _ = conn.set_nodelay(true);
                let Ok(rd) = conn.try_clone() else { return };
                let mut rd = BufReader::new(rd);
                let mut wr = BufWriter::new(conn);
                let Some(from) = read_frame(&mut rd).ok().and_then(|h| parse_hello(&h)) else { return };
                while let Ok(req) = read_frame(&mut rd) {
                    let reply = serve(&mem, &routes, from, &req);
                    if write_frame(&mut wr, &reply).is_err() || wr.flush().is_err() {
                        break;
                    }
                }
            });
        }
    })?;
    Ok(addr)
}

/// A requester's end of one QP: requests go out in order and are answered in order.
pub struct QpClient {
    rd: BufReader<TcpStream>,
    wr: BufWriter<TcpStream>,
}

impl QpClient {
    pub fn connect(nic: SocketAddr, from: Endpoint) -> std::io::Result<QpClient> {
        let s = TcpStream::connect(nic)?;
        s.set_nodelay(true)?;
        let mut wr = BufWriter::new(s.try_clone()?);
        write_frame(&mut wr, &hello(from))?;
        Ok(QpClient { rd: BufReader::new(s), wr })
    }
    /// Posts requests back to back (one flush: the doorbell), then collects their replies in
    /// order: `(success, data)` each.
    pub fn post(&mut self, reqs: &[Vec<u8>]) -> std::io::Result<Vec<(bool, Vec<u8>)>> {
        for r in reqs {
            write_frame(&mut self.wr, r)?;
        }
        self.wr.flush()?;
        let mut out = Vec::with_capacity(reqs.len());
        for _ in reqs {
            let rep = read_frame(&mut self.rd)?;
            out.push((rep.first() == Some(&0), rep.get(8..).unwrap_or_default().to_vec()));
        }
        Ok(out)
    }
}
