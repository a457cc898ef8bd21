//! What several CLI tests need to start txbed as `mpirun` would: a free rendezvous port, one
//! rank of a sockets run, and a bounded wait for it.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Rank `rank` of `size` of `txbed run SCENARIO --backend sockets ARGS`, with Open MPI's
/// environment variables, from the repository root.
pub fn start_rank(scenario: &str, rank: u32, size: u32, port: u16, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_txbed"))
        .current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["run", scenario, "--backend", "sockets"])
        .args(args)
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .env("OMPI_COMM_WORLD_SIZE", size.to_string())
        .env("TXBED_COORDINATOR", format!("127.0.0.1:{port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child at most `limit`; a child still running then is killed and the test fails.
pub fn finish(mut c: Child, limit: Duration) -> Output {
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            c.kill().unwrap();
            panic!("a txbed process hung for {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.wait_with_output().unwrap()
}
