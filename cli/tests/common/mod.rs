//! What several CLI tests need to start txbed as `mpirun` would: a free rendezvous port, one
//! rank of a sockets run, and a bounded wait for it; and a run plus a small sweep to read back.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

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

/// A fresh scratch directory named after `tag` and this process.
pub fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("txbed-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Under `dir`: `run/` from a 100 us quickstart run, and `sweep/` from NOWAIT and OCC by RPC
/// over seeds 1 and 2 (4 runs); returns both paths.
pub fn run_and_sweep(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let txbed = |args: &[&std::ffi::OsStr]| {
        let o = Command::new(env!("CARGO_BIN_EXE_txbed")).current_dir(&root).args(args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (run, sweep, file) = (dir.join("run"), dir.join("sweep"), dir.join("sweep.ron"));
    let os = |s: &str| std::ffi::OsStr::new(s).to_owned();
    txbed(&[
        &os("run"),
        &os("scenarios/quickstart.ron"),
        &os("-q"),
        &os("--measure-us"),
        &os("100"),
        &os("--out"),
        run.as_os_str(),
    ]);
    let base = root.join("scenarios/quickstart.ron");
    let text = format!(
        r#"Sweep(name: "two", base: {base:?}, set: ["run.measure_us=100", "protocol.mode=rpc"],
           axes: [(path: "protocol.name", values: ["nowait", "occ"])], seeds: [1, 2])"#
    );
    std::fs::write(&file, text).unwrap();
    txbed(&[&os("sweep"), file.as_os_str(), &os("-q"), &os("--out"), sweep.as_os_str()]);
    (run, sweep)
}

/// The built txbed, run from the repository's root.
pub fn txbed() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_txbed"));
    c.current_dir(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

/// Exit code, stdout and stderr of `c`.
pub fn out(c: &mut Command) -> (Option<i32>, String, String) {
    let o = c.output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}
