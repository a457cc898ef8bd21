//! Bootstrap of a real (multi-process) run, shared by the sockets and verbs backends.
//!
//! Rank and size come from the launcher a cluster already has (`mpirun`: `OMPI_COMM_WORLD_*`;
//! PMIx: `PMIX_RANK`; MPICH/Hydra: `PMI_RANK`/`PMI_SIZE`; Slurm `srun`: `SLURM_PROCID`/
//! `SLURM_NTASKS`), else from `--rank`/`--size`. Rank 0 listens at the coordinator address
//! (`--coordinator host:port` or `TXBED_COORDINATOR`); every rank connects, sends its
//! descriptor (endpoint addresses, memory-region keys: opaque bytes here), and receives
//! everyone's. Barriers reuse the same connections. No host list exists anywhere: the launcher
//! places processes, rank 0's address is the only thing shared.
//!
//! Every wait is bounded: a rank that never arrives, or whose connection drops, ends the
//! bootstrap with an error naming it.

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// This process's place in the run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rank {
    pub rank: u32,
    pub size: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapError(pub String);

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BootstrapError {}

/// Prefix of the message rank 0 sends in place of a barrier release when the run must end.
const ABORT: &[u8] = b"\0abort:";

fn err<T>(m: impl Into<String>) -> Result<T, BootstrapError> {
    Err(BootstrapError(m.into()))
}

/// Launcher variables, in the order they are tried: (rank variable, size variable).
pub const LAUNCHERS: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMIX_RANK", "PMIX_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];

/// Rank and size from a launcher's environment (`env` looks variables up), else from the
/// flags. Errors say which variable or flag is wrong.
pub fn rank_from(
    env: impl Fn(&str) -> Option<String>,
    flag_rank: Option<u32>,
    flag_size: Option<u32>,
) -> Result<Rank, BootstrapError> {
    let parse = |name: &str, v: String| {
        v.trim().parse::<u32>().map_err(|_| BootstrapError(format!("{name}={v:?} is not a non-negative integer")))
    };
    for (rv, sv) in LAUNCHERS {
        if let Some(r) = env(rv) {
            let rank = parse(rv, r)?;
            // PMIx publishes the size under another name on some versions; fall back to MPI's.
            let size = match env(sv).or_else(|| env("OMPI_COMM_WORLD_SIZE")) {
                Some(s) => parse(sv, s)?,
                None => match flag_size {
                    Some(s) => s,
                    None => return err(format!("{rv} is set but {sv} is not: pass --size")),
                },
            };
            return check(Rank { rank, size });
        }
    }
    match (flag_rank, flag_size) {
        (Some(rank), Some(size)) => check(Rank { rank, size }),
        _ => err(format!(
            "no launcher environment found ({}); run under mpirun or srun, or pass --rank and --size",
            LAUNCHERS.iter().map(|(r, _)| *r).collect::<Vec<_>>().join(", ")
        )),
    }
}

fn check(r: Rank) -> Result<Rank, BootstrapError> {
    if r.size == 0 {
        return err("size must be at least 1");
    }
    if r.rank >= r.size {
        return err(format!("rank {} is not below size {}", r.rank, r.size));
    }
    Ok(r)
}

/// The coordinator address: the flag, else `TXBED_COORDINATOR`.
pub fn coordinator_from(
    env: impl Fn(&str) -> Option<String>,
    flag: Option<&str>,
) -> Result<SocketAddr, BootstrapError> {
    let s = match flag.map(str::to_string).or_else(|| env("TXBED_COORDINATOR")) {
        Some(s) => s,
        None => return err("no coordinator address: pass --coordinator host:port or set TXBED_COORDINATOR"),
    };
    s.to_socket_addrs()
        .map_err(|e| BootstrapError(format!("coordinator {s:?}: {e}")))?
        .next()
        .ok_or_else(|| BootstrapError(format!("coordinator {s:?} resolves to no address")))
}

/// Length-prefixed frames over a TCP stream, with the peer's rank for messages.
fn send(s: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    s.write_all(&(bytes.len() as u32).to_le_bytes())?;
    s.write_all(bytes)
}

fn recv(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > 64 << 20 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "frame over 64 MiB"));
    }
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)?;
    Ok(b)
}

/// A bootstrapped run: everyone's descriptors, and the connections for barriers.
pub struct Bootstrap {
    pub me: Rank,
    /// Descriptor of rank `i` at index `i`.
    pub descriptors: Vec<Vec<u8>>,
    /// Rank 0: a connection per other rank (index = rank); others: the one to rank 0.
    links: Vec<Option<TcpStream>>,
    timeout: Duration,
    /// This rank's heartbeat socket and every rank's heartbeat address (`crate::liveness`),
    /// exchanged with the descriptors.
    liveness: Option<(crate::liveness::Socket, Vec<SocketAddr>)>,
}

/// Prefixes `descriptor` with this rank's heartbeat address.
fn wrap(addr: SocketAddr, descriptor: &[u8]) -> Vec<u8> {
    let a = addr.to_string();
    let mut b = (a.len() as u16).to_le_bytes().to_vec();
    b.extend_from_slice(a.as_bytes());
    b.extend_from_slice(descriptor);
    b
}

/// Splits a wrapped descriptor into the heartbeat address and the descriptor.
fn unwrap(b: &[u8]) -> Result<(SocketAddr, Vec<u8>), BootstrapError> {
    let bad = || BootstrapError("a rank's descriptor has no valid heartbeat address".into());
    let n = u16::from_le_bytes(b.get(..2).ok_or_else(bad)?.try_into().expect("2 bytes")) as usize;
    let a = std::str::from_utf8(b.get(2..2 + n).ok_or_else(bad)?).map_err(|_| bad())?;
    Ok((a.parse().map_err(|_| bad())?, b[2 + n..].to_vec()))
}

/// Unwraps every rank's descriptor: (heartbeat addresses, descriptors).
fn unwrap_all(all: Vec<Vec<u8>>) -> Result<(Vec<SocketAddr>, Vec<Vec<u8>>), BootstrapError> {
    let mut addrs = Vec::new();
    let mut descriptors = Vec::new();
    for d in all {
        let (a, d) = unwrap(&d)?;
        addrs.push(a);
        descriptors.push(d);
    }
    Ok((addrs, descriptors))
}

impl Bootstrap {
    /// Exchanges `descriptor` with every rank through the coordinator, waiting at most
    /// `timeout` for all ranks to arrive.
    pub fn join(
        me: Rank,
        coordinator: SocketAddr,
        descriptor: &[u8],
        timeout: Duration,
    ) -> Result<Bootstrap, BootstrapError> {
        let deadline = Instant::now() + timeout;
        if me.rank == 0 {
            let listener = TcpListener::bind(coordinator)
                .map_err(|e| BootstrapError(format!("rank 0 cannot listen on {coordinator}: {e}")))?;
            listener.set_nonblocking(true).map_err(|e| BootstrapError(e.to_string()))?;
            let mut links: Vec<Option<TcpStream>> = (0..me.size).map(|_| None).collect();
            let mut descriptors = vec![Vec::new(); me.size as usize];
            let hb = crate::liveness::Socket::bind(coordinator.ip())
                .map_err(|e| BootstrapError(format!("rank 0: heartbeat socket on {}: {e}", coordinator.ip())))?;
            let hb_addr = hb.local_addr().map_err(|e| BootstrapError(e.to_string()))?;
            descriptors[0] = wrap(hb_addr, descriptor);
            let mut arrived = 1;
            while arrived < me.size {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        s.set_nonblocking(false).map_err(|e| BootstrapError(e.to_string()))?;
                        s.set_read_timeout(Some(timeout)).map_err(|e| BootstrapError(e.to_string()))?;
                        let hello = recv(&mut s)
                            .map_err(|e| BootstrapError(format!("a joining rank failed to introduce itself: {e}")))?;
                        if hello.len() < 4 {
                            return err("a joining rank sent a malformed hello");
                        }
                        let r = u32::from_le_bytes(hello[..4].try_into().expect("4 bytes"));
                        if r == 0 || r >= me.size || links[r as usize].is_some() {
                            return err(format!("unexpected rank {r} joined (size {}, or it joined twice)", me.size));
                        }
                        descriptors[r as usize] = hello[4..].to_vec();
                        links[r as usize] = Some(s);
                        arrived += 1;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            let missing: Vec<String> =
                                (1..me.size).filter(|&r| links[r as usize].is_none()).map(|r| r.to_string()).collect();
                            return err(format!("ranks {} did not join within {timeout:?}", missing.join(", ")));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return err(format!("rank 0 accept failed: {e}")),
                }
            }
            // Everyone's descriptors to everyone.
            let mut table = Vec::new();
            for d in &descriptors {
                table.extend_from_slice(&(d.len() as u32).to_le_bytes());
                table.extend_from_slice(d);
            }
            for (r, l) in links.iter_mut().enumerate() {
                if let Some(s) = l {
                    send(s, &table)
                        .map_err(|e| BootstrapError(format!("rank {r} dropped during the exchange: {e}")))?;
                }
            }
            let (addrs, descriptors) = unwrap_all(descriptors)?;
            Ok(Bootstrap { me, descriptors, links, timeout, liveness: Some((hb, addrs)) })
        } else {
            // The coordinator may not be up yet: retry until the deadline.
            let mut s = loop {
                match TcpStream::connect_timeout(&coordinator, Duration::from_millis(500)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => return err(format!("rank {} cannot reach the coordinator {coordinator}: {e}", me.rank)),
                }
            };
            s.set_read_timeout(Some(timeout)).map_err(|e| BootstrapError(e.to_string()))?;
            // Heartbeats leave from the address this rank reaches the coordinator from.
            let ip = s.local_addr().map_err(|e| BootstrapError(e.to_string()))?.ip();
            let hb = crate::liveness::Socket::bind(ip)
                .map_err(|e| BootstrapError(format!("rank {}: heartbeat socket on {ip}: {e}", me.rank)))?;
            let hb_addr = hb.local_addr().map_err(|e| BootstrapError(e.to_string()))?;
            let mut hello = me.rank.to_le_bytes().to_vec();
            hello.extend_from_slice(&wrap(hb_addr, descriptor));
            send(&mut s, &hello)
                .map_err(|e| BootstrapError(format!("rank {}: sending to rank 0 failed: {e}", me.rank)))?;
            let table =
                recv(&mut s).map_err(|e| BootstrapError(format!("rank {}: rank 0 did not answer: {e}", me.rank)))?;
            let mut descriptors = Vec::new();
            let mut at = 0;
            while at + 4 <= table.len() {
                let n = u32::from_le_bytes(table[at..at + 4].try_into().expect("4 bytes")) as usize;
                descriptors.push(
                    table.get(at + 4..at + 4 + n).ok_or(BootstrapError("truncated descriptor table".into()))?.to_vec(),
                );
                at += 4 + n;
            }
            if descriptors.len() != me.size as usize {
                return err(format!("descriptor table has {} entries, expected {}", descriptors.len(), me.size));
            }
            let mut links: Vec<Option<TcpStream>> = (0..me.size).map(|_| None).collect();
            links[0] = Some(s);
            let (addrs, descriptors) = unwrap_all(descriptors)?;
            Ok(Bootstrap { me, descriptors, links, timeout, liveness: Some((hb, addrs)) })
        }
    }

    /// Starts failure detection (`crate::liveness`): from now on a rank silent for `timeout`
    /// makes `on_dead` run in every survivor. Once per bootstrap.
    pub fn watch(&mut self, timeout: Duration, on_dead: crate::liveness::OnDead) -> Option<crate::liveness::Watch> {
        let (sock, addrs) = self.liveness.take()?;
        Some(crate::liveness::Watch::start(sock, self.me.rank, addrs, timeout, on_dead))
    }

    /// Waits until every rank reaches the barrier named `tag`; an error names the rank that
    /// failed (dead, or arrived at another barrier).
    pub fn barrier(&mut self, tag: &str) -> Result<(), BootstrapError> {
        let t = tag.as_bytes();
        if self.me.rank == 0 {
            for (r, l) in self.links.iter_mut().enumerate() {
                if let Some(s) = l {
                    let failure = match recv(s) {
                        Err(e) => Some(format!("rank {r} died or hung before barrier {tag:?}: {e}")),
                        Ok(got) if got != t => Some(format!(
                            "rank {r} reached barrier {:?} instead of {tag:?}",
                            String::from_utf8_lossy(&got)
                        )),
                        Ok(_) => None,
                    };
                    if let Some(msg) = failure {
                        self.abort_others(&msg);
                        return err(msg);
                    }
                }
            }
            for (r, l) in self.links.iter_mut().enumerate() {
                if let Some(s) = l {
                    send(s, t).map_err(|e| BootstrapError(format!("rank {r} died at barrier {tag:?}: {e}")))?;
                }
            }
        } else {
            let s = self.links[0].as_mut().expect("link to rank 0");
            send(s, t).map_err(|e| BootstrapError(format!("rank 0 died before barrier {tag:?}: {e}")))?;
            let got = recv(s).map_err(|e| {
                BootstrapError(format!("rank 0 died or hung at barrier {tag:?} (timeout {:?}): {e}", self.timeout))
            })?;
            if let Some(why) = got.strip_prefix(ABORT) {
                return err(format!("run aborted by rank 0: {}", String::from_utf8_lossy(why)));
            }
            if got != t {
                return err(format!("rank 0 released barrier {:?} instead of {tag:?}", String::from_utf8_lossy(&got)));
            }
        }
        Ok(())
    }

    /// Rank 0 tells every rank still connected why the run ends (best effort: a rank that is
    /// gone cannot be told), so each survivor's error names the rank that failed.
    fn abort_others(&mut self, why: &str) {
        let msg: Vec<u8> = ABORT.iter().chain(why.as_bytes()).copied().collect();
        for s in self.links.iter_mut().flatten() {
            let _ = send(s, &msg);
        }
    }

    /// Rank 0 receives every rank's `bytes` (index = rank); other ranks get `None`.
    pub fn gather(&mut self, bytes: &[u8]) -> Result<Option<Vec<Vec<u8>>>, BootstrapError> {
        if self.me.rank == 0 {
            let mut all = vec![bytes.to_vec()];
            for (r, l) in self.links.iter_mut().enumerate().skip(1) {
                let s = l.as_mut().expect("link to every rank");
                all.push(
                    recv(s).map_err(|e| BootstrapError(format!("rank {r} died before sending its results: {e}")))?,
                );
            }
            Ok(Some(all))
        } else {
            let s = self.links[0].as_mut().expect("link to rank 0");
            send(s, bytes).map_err(|e| BootstrapError(format!("rank 0 died before collecting results: {e}")))?;
            Ok(None)
        }
    }
}
