//! Bootstrap of multi-process runs, exercised with threads on loopback.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use txbed_real::bootstrap::{coordinator_from, rank_from, Bootstrap, Rank};

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| m.get(k).cloned()
}

/// A free loopback port (bound and released; the test binds it again at once).
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

#[test]
fn rank_and_size_come_from_each_launcher() {
    let cases = [
        (vec![("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "4")], Rank { rank: 3, size: 4 }),
        (vec![("PMIX_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")], Rank { rank: 1, size: 2 }),
        (vec![("PMI_RANK", "0"), ("PMI_SIZE", "8")], Rank { rank: 0, size: 8 }),
        (vec![("SLURM_PROCID", "5"), ("SLURM_NTASKS", "6")], Rank { rank: 5, size: 6 }),
    ];
    for (vars, want) in cases {
        assert_eq!(rank_from(env(&vars), None, None).unwrap(), want, "{vars:?}");
    }
    // The launcher wins over flags; flags work without a launcher.
    assert_eq!(
        rank_from(env(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]), Some(0), Some(9)).unwrap(),
        Rank { rank: 1, size: 2 }
    );
    assert_eq!(rank_from(env(&[]), Some(2), Some(3)).unwrap(), Rank { rank: 2, size: 3 });
}

#[test]
fn bad_rank_inputs_are_clear_errors() {
    let e = rank_from(env(&[]), None, None).unwrap_err().0;
    assert!(e.contains("mpirun") && e.contains("--rank"), "{e}");
    let e = rank_from(env(&[("SLURM_PROCID", "x"), ("SLURM_NTASKS", "2")]), None, None).unwrap_err().0;
    assert!(e.contains("SLURM_PROCID") && e.contains("\"x\""), "{e}");
    let e = rank_from(env(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")]), None, None).unwrap_err().0;
    assert!(e.contains("rank 4 is not below size 4"), "{e}");
    let e = coordinator_from(env(&[]), None).unwrap_err().0;
    assert!(e.contains("TXBED_COORDINATOR"), "{e}");
    assert_eq!(coordinator_from(env(&[("TXBED_COORDINATOR", "127.0.0.1:7000")]), None).unwrap().port(), 7000);
}

/// Four ranks exchange descriptors through rank 0 and pass two barriers.
#[test]
fn ranks_exchange_descriptors_and_meet_at_barriers() {
    let addr = free_addr();
    let size = 4;
    let handles: Vec<_> = (0..size)
        .map(|rank| {
            std::thread::spawn(move || {
                let me = Rank { rank, size };
                let mut b =
                    Bootstrap::join(me, addr, format!("endpoint-of-{rank}").as_bytes(), Duration::from_secs(10))
                        .unwrap();
                b.barrier("start").unwrap();
                b.barrier("end").unwrap();
                b.descriptors
            })
        })
        .collect();
    for h in handles {
        let d = h.join().unwrap();
        assert_eq!(d.len(), 4);
        for (i, x) in d.iter().enumerate() {
            assert_eq!(x, format!("endpoint-of-{i}").as_bytes());
        }
    }
}

/// A rank that never arrives fails the bootstrap within the timeout, naming it.
#[test]
fn a_missing_rank_is_named_and_nothing_hangs() {
    let addr = free_addr();
    let t = Instant::now();
    let joined =
        std::thread::spawn(move || Bootstrap::join(Rank { rank: 1, size: 3 }, addr, b"one", Duration::from_secs(2)));
    let r0 = Bootstrap::join(Rank { rank: 0, size: 3 }, addr, b"zero", Duration::from_secs(2));
    let e = r0.err().expect("rank 2 never joined").0;
    assert!(e.contains("ranks 2 did not join"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(6));
    assert!(joined.join().unwrap().is_err(), "rank 1 must not wait forever either");
}

/// A rank that dies after the exchange is named at the next barrier.
#[test]
fn a_rank_dying_before_a_barrier_is_named() {
    let addr = free_addr();
    let dying = std::thread::spawn(move || {
        let b = Bootstrap::join(Rank { rank: 1, size: 2 }, addr, b"x", Duration::from_secs(5)).unwrap();
        drop(b); // the process "dies": its connection closes
    });
    let mut b0 = Bootstrap::join(Rank { rank: 0, size: 2 }, addr, b"y", Duration::from_secs(5)).unwrap();
    dying.join().unwrap();
    let e = b0.barrier("start").unwrap_err().0;
    assert!(e.contains("rank 1 died"), "{e}");
}
