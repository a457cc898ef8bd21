//! The sockets backend's NIC thread, over loopback TCP.

use std::net::SocketAddr;

use txbed_real::sockets::{encode_request, start_nic, NicRoutes, QpClient, SharedMemory, Verb, REGION_BASE};
use txbed_transport::{Endpoint, NodeId};

const FROM: Endpoint = Endpoint { node: NodeId(1), worker: 0 };
use txbed_transport::HostMemory;

const RKEY: u32 = 0x5000_0001;

fn nic() -> (SharedMemory, SocketAddr) {
    let mem = SharedMemory::new(&[(4096, RKEY, 7)]);
    let addr = start_nic(mem.clone(), NicRoutes::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    (mem, addr)
}

#[test]
fn one_sided_verbs_apply_to_the_target_memory() {
    let (mem, addr) = nic();
    let mut qp = QpClient::connect(addr, FROM).unwrap();
    let base = REGION_BASE;
    let r = qp
        .post(&[
            encode_request(Verb::Write, RKEY, base + 64, 16, 0, 0, &[9u8; 16]),
            encode_request(Verb::Cas, RKEY, base, 8, 0, 42, &[]),
            encode_request(Verb::Read, RKEY, base, 8, 0, 0, &[]),
            encode_request(Verb::Faa, RKEY, base + 8, 8, 5, 0, &[]),
            encode_request(Verb::Read, RKEY, base + 64, 16, 0, 0, &[]),
        ])
        .unwrap();
    assert!(r.iter().all(|(ok, _)| *ok), "{r:?}");
    assert_eq!(r[1].1, 0u64.to_le_bytes(), "CAS returns the old value");
    assert_eq!(r[2].1, 42u64.to_le_bytes(), "READ after CAS on one QP sees it (FIFO)");
    assert_eq!(r[4].1, vec![9u8; 16]);
    assert_eq!(mem.load_u64(base + 8).unwrap(), 5);
}

#[test]
fn bad_rkey_out_of_bounds_and_misaligned_are_refused_untouched() {
    let (mem, addr) = nic();
    let mut qp = QpClient::connect(addr, FROM).unwrap();
    let base = REGION_BASE;
    let r = qp
        .post(&[
            encode_request(Verb::Read, RKEY ^ 1, base, 8, 0, 0, &[]),
            encode_request(Verb::Read, RKEY, base + 4090, 16, 0, 0, &[]),
            encode_request(Verb::Write, RKEY, base + 4090, 16, 0, 0, &[1; 16]),
            encode_request(Verb::Cas, RKEY, base + 4, 8, 0, 1, &[]),
            encode_request(Verb::Write, RKEY, base - 8, 8, 0, 0, &[1; 8]),
        ])
        .unwrap();
    assert!(r.iter().all(|(ok, _)| !*ok), "{r:?}");
    let mut all = vec![0u8; 4096];
    mem.read(base, &mut all).unwrap();
    assert!(all.iter().all(|&b| b == 0));
}

/// Many QPs increment one counter with CAS loops and FAA concurrently: no update is lost
/// (the NIC uses CPU atomics, which are atomic with the host's own CAS as well).
#[test]
fn atomics_from_many_qps_and_the_cpu_are_atomic() {
    let (mem, addr) = nic();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut qp = QpClient::connect(addr, FROM).unwrap();
                for _ in 0..200 {
                    qp.post(&[encode_request(Verb::Faa, RKEY, REGION_BASE, 8, 1, 0, &[])]).unwrap();
                    loop {
                        let cur = u64::from_le_bytes(
                            qp.post(&[encode_request(Verb::Read, RKEY, REGION_BASE + 8, 8, 0, 0, &[])]).unwrap()[0]
                                .1
                                .clone()
                                .try_into()
                                .unwrap(),
                        );
                        let r =
                            qp.post(&[encode_request(Verb::Cas, RKEY, REGION_BASE + 8, 8, cur, cur + 1, &[])]).unwrap();
                        if r[0].1 == cur.to_le_bytes() {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    for _ in 0..200 {
        mem.faa_u64(REGION_BASE, 1).unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(mem.load_u64(REGION_BASE).unwrap(), 4 * 200 + 200);
    assert_eq!(mem.load_u64(REGION_BASE + 8).unwrap(), 4 * 200);
}

/// WRITE_WITH_IMM places its data before the immediate reaches the worker with the requester's
/// worker index; an RC SEND reaches it as a datagram; with no such worker both fail remotely.
#[test]
fn immediates_and_rc_sends_reach_the_paired_worker() {
    use txbed_real::sockets::Inbound;
    let mem = SharedMemory::new(&[(4096, RKEY, 7)]);
    let routes = NicRoutes::default();
    let (tx, rx) = std::sync::mpsc::channel();
    routes.register(0, tx);
    let addr = start_nic(mem.clone(), routes, "127.0.0.1:0".parse().unwrap()).unwrap();
    let mut qp = QpClient::connect(addr, FROM).unwrap();
    let r = qp
        .post(&[
            encode_request(Verb::WriteImm, RKEY, REGION_BASE + 8, 8, 77, 0, &[3; 8]),
            encode_request(Verb::Send, 0, 0, 0, 0, 0, b"hello"),
        ])
        .unwrap();
    assert!(r.iter().all(|(ok, _)| *ok), "{r:?}");
    match rx.recv().unwrap() {
        Inbound::Imm(src, imm) => {
            assert_eq!((src, imm), (NodeId(1), 77));
            assert_eq!(mem.load_u64(REGION_BASE + 8).unwrap(), u64::from_le_bytes([3; 8]));
        }
        _ => panic!("expected the immediate first"),
    }
    match rx.recv().unwrap() {
        Inbound::Datagram(src, b) => assert_eq!((src, b.as_slice()), (FROM, &b"hello"[..])),
        _ => panic!("expected the SEND's payload"),
    }
    let mut other = QpClient::connect(addr, Endpoint { node: NodeId(1), worker: 3 }).unwrap();
    let r = other
        .post(&[
            encode_request(Verb::WriteImm, RKEY, REGION_BASE, 8, 1, 0, &[1; 8]),
            encode_request(Verb::Send, 0, 0, 0, 0, 0, b"x"),
        ])
        .unwrap();
    assert!(r.iter().all(|(ok, _)| !*ok), "no worker 3 on this node: {r:?}");
}
