//! The sockets backend's NIC thread, over loopback TCP.

use std::net::SocketAddr;

use txbed::sockets::{encode_request, start_nic, QpClient, SharedMemory, Verb, REGION_BASE};
use txbed_transport::HostMemory;

const RKEY: u32 = 0x5000_0001;

fn nic() -> (SharedMemory, SocketAddr) {
    let mem = SharedMemory::new(&[(4096, RKEY, 7)]);
    let addr = start_nic(mem.clone(), "127.0.0.1:0".parse().unwrap()).unwrap();
    (mem, addr)
}

#[test]
fn one_sided_verbs_apply_to_the_target_memory() {
    let (mem, addr) = nic();
    let mut qp = QpClient::connect(addr).unwrap();
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
    let mut qp = QpClient::connect(addr).unwrap();
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
                let mut qp = QpClient::connect(addr).unwrap();
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
