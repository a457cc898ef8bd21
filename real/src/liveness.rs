//! Failure detection for real runs, on every backend: each rank sends a small UDP heartbeat to
//! every other rank every `timeout / 5`; a rank heard from for no longer than `timeout` (the
//! scenario's `run.failure_timeout_ms`) is alive. A rank that died (kill -9), hangs (SIGSTOP)
//! or became unreachable is named by every survivor, each from its own observation, within
//! `timeout` plus one interval: blame never travels second-hand, so it cannot land on the wrong
//! rank. A rank that finished its part says goodbye, so finishing early is not mistaken for
//! death.
//!
//! A thread is the right shape here (and not a worker's job): detection must go on while the
//! main thread blocks in a barrier and while workers busy-poll.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"TXLV";
const ALIVE: u8 = 1;
const BYE: u8 = 2;

/// What a survivor does once it knows a peer failed: the message, then exit code 2.
pub type OnDead = Box<dyn Fn(String) + Send>;

/// A datagram: magic, kind, sender rank.
fn encode(kind: u8, rank: u32) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[..4].copy_from_slice(MAGIC);
    b[4] = kind;
    b[5..].copy_from_slice(&rank.to_le_bytes());
    b
}

fn decode(b: &[u8]) -> Option<(u8, u32)> {
    (b.len() == 9 && &b[..4] == MAGIC).then(|| (b[4], u32::from_le_bytes(b[5..9].try_into().expect("4 bytes"))))
}

/// A bound heartbeat socket, before the peers' addresses are known.
pub struct Socket(UdpSocket);

impl Socket {
    pub fn bind(ip: IpAddr) -> std::io::Result<Socket> {
        UdpSocket::bind(SocketAddr::new(ip, 0)).map(Socket)
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// The running detector; `finish` stops it and tells the others this rank is done.
pub struct Watch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    sock: UdpSocket,
    peers: Vec<SocketAddr>,
    me: u32,
}

impl Watch {
    /// Starts watching `peers` (index = rank; `me`'s own entry is ignored).
    pub fn start(sock: Socket, me: u32, peers: Vec<SocketAddr>, timeout: Duration, on_dead: OnDead) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let interval = (timeout / 5).max(Duration::from_millis(1));
        let sock = sock.0;
        let thread_sock = sock.try_clone().expect("a UDP socket clones");
        let (stop2, peers2) = (stop.clone(), peers.clone());
        let thread = std::thread::spawn(move || watch(thread_sock, me, peers2, timeout, interval, stop2, on_dead));
        Watch { stop, thread: Some(thread), sock, peers, me }
    }

    /// This rank is done: stop watching and say goodbye (three times: a datagram can be lost).
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for _ in 0..3 {
            for (r, p) in self.peers.iter().enumerate() {
                if r as u32 != self.me {
                    let _ = self.sock.send_to(&encode(BYE, self.me), p);
                }
            }
        }
    }
}

fn watch(
    sock: UdpSocket,
    me: u32,
    peers: Vec<SocketAddr>,
    timeout: Duration,
    interval: Duration,
    stop: Arc<AtomicBool>,
    on_dead: OnDead,
) {
    let start = Instant::now();
    // Everyone counts as heard at the start: a rank that never sends is blamed after `timeout`.
    let mut heard = vec![start; peers.len()];
    let mut done = vec![false; peers.len()];
    let mut next_send = start;
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= next_send {
            for (r, p) in peers.iter().enumerate() {
                if r as u32 != me && !done[r] {
                    let _ = sock.send_to(&encode(ALIVE, me), p);
                }
            }
            next_send = now + interval;
        }
        let _ = sock.set_read_timeout(Some(next_send.saturating_duration_since(now).max(Duration::from_micros(100))));
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            // Attributed by rank and checked against that rank's address: a stray datagram
            // cannot vouch for (or blame) anyone.
            if let Some((kind, r)) = decode(&buf[..n]) {
                let r = r as usize;
                if r < peers.len() && r as u32 != me && peers[r].port() == from.port() {
                    heard[r] = Instant::now();
                    done[r] |= kind == BYE;
                }
            }
        }
        let now = Instant::now();
        for r in 0..peers.len() {
            if r as u32 != me && !done[r] && now.duration_since(heard[r]) > timeout {
                on_dead(format!(
                    "rank {me}: rank {r} died, hangs (e.g. SIGSTOP) or is unreachable: no heartbeat from {} for {} ms (run.failure_timeout_ms {})",
                    peers[r],
                    now.duration_since(heard[r]).as_millis(),
                    timeout.as_millis()
                ));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn sockets(n: usize) -> (Vec<Socket>, Vec<SocketAddr>) {
        let s: Vec<Socket> = (0..n).map(|_| Socket::bind("127.0.0.1".parse().unwrap()).unwrap()).collect();
        let a = s.iter().map(|s| s.local_addr().unwrap()).collect();
        (s, a)
    }

    /// Three ranks: rank 2 stops heartbeating without a goodbye; ranks 0 and 1 each name it,
    /// within the timeout plus an interval (and some scheduling slack), and never blame each
    /// other. A goodbye is not a death.
    #[test]
    fn a_silent_rank_is_named_by_every_survivor_and_only_it() {
        let (socks, addrs) = sockets(3);
        let timeout = Duration::from_millis(200);
        let (tx, rx) = mpsc::channel();
        let mut watches = Vec::new();
        for (r, s) in socks.into_iter().enumerate() {
            let tx = tx.clone();
            watches.push(Watch::start(
                s,
                r as u32,
                addrs.clone(),
                timeout,
                Box::new(move |m| tx.send((r, m)).unwrap()),
            ));
        }
        std::thread::sleep(Duration::from_millis(400));
        assert!(rx.try_recv().is_err(), "nobody is blamed while all heartbeat");
        // Rank 2 goes silent (its thread stops; no goodbye).
        let w2 = watches.pop().unwrap();
        w2.stop.store(true, Ordering::Relaxed);
        let t = Instant::now();
        let mut blamed = Vec::new();
        while blamed.len() < 2 {
            let (who, m) = rx.recv_timeout(Duration::from_secs(5)).expect("survivors notice");
            assert!(m.contains("rank 2 died") && !m.contains("rank 0 died") && !m.contains("rank 1 died"), "{m}");
            blamed.push(who);
        }
        assert!(t.elapsed() < timeout * 3, "{:?}", t.elapsed());
        blamed.sort();
        assert_eq!(blamed, [0, 1]);
        // Goodbyes: two fresh ranks, one finishes; the other blames nobody.
        let (socks, addrs) = sockets(2);
        let (tx, rx) = mpsc::channel();
        let mut it = socks.into_iter();
        let tx0 = tx.clone();
        let w0 = Watch::start(it.next().unwrap(), 0, addrs.clone(), timeout, Box::new(move |m| tx0.send(m).unwrap()));
        let w1 = Watch::start(it.next().unwrap(), 1, addrs, timeout, Box::new(move |m| tx.send(m).unwrap()));
        std::thread::sleep(Duration::from_millis(100));
        w1.finish();
        std::thread::sleep(Duration::from_millis(500));
        assert!(rx.try_recv().is_err(), "a rank that said goodbye is not dead");
        w0.finish();
    }
}
