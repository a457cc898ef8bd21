//! `txbed run --backend verbs` and `txbed devices`, with and without the "verbs" feature.
//!
//! With the feature, on a machine without RDMA (CI, this testbed's dev machines) the run must fail
//! with exit code 2 and one of the no-RDMA explanations; on a machine with a device, this
//! rank-less run must stop at finding its rank (still exit code 2). Never a panic, never
//! success. Real runs over a device are tested on Soft-RoCE by tests/rxe/run.sh.

use assert_cmd::Command;
use std::path::PathBuf;

fn txbed() -> Command {
    let mut c = Command::cargo_bin("txbed").expect("binary built");
    c.current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap());
    c
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = txbed().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(not(feature = "verbs"))]
#[test]
fn without_the_feature_verbs_says_how_to_rebuild() {
    let want = "error: this txbed was built without the \"verbs\" feature; \
                rebuild with cargo build --release -p txbed --features verbs";
    for args in [
        &["run", "scenarios/quickstart.ron", "--backend", "verbs"][..],
        &["devices"][..],
        &["selftest", "--backend", "verbs"][..],
    ] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end(), want, "{args:?}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
}

#[cfg(feature = "verbs")]
const NO_RDMA: [&str; 4] = [
    "libibverbs could not be loaded",
    "the kernel has no RDMA verbs support",
    "operation not supported (EOPNOTSUPP)",
    "no RDMA devices found",
];

#[cfg(feature = "verbs")]
fn has_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").map(|mut d| d.next().is_some()).unwrap_or(false)
}

#[cfg(feature = "verbs")]
#[test]
fn verbs_backend_without_rdma_or_rank_explains_itself_and_exits_2() {
    let (code, stdout, stderr) = run(&["run", "scenarios/quickstart.ron", "--backend", "verbs"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(code, Some(2), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    if has_device() {
        // A device exists, so the run gets as far as finding its rank: none was given.
        assert!(stderr.contains("no launcher environment found"), "{stderr}");
    } else {
        assert!(NO_RDMA.iter().any(|m| stderr.contains(m)), "not a no-RDMA message: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
    }
}

#[cfg(feature = "verbs")]
#[test]
fn devices_and_flags_never_panic() {
    let (code, _, stderr) = run(&["devices"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    if !has_device() {
        assert_eq!(code, Some(2));
        assert!(NO_RDMA.iter().any(|m| stderr.contains(m)), "not a no-RDMA message: {stderr}");
    }
    // A device that cannot exist and an absurd GID index: an error, exit 2, no panic.
    let (code, stdout, stderr) = run(&[
        "run",
        "scenarios/quickstart.ron",
        "--backend",
        "verbs",
        "--device",
        "no_such_dev9",
        "--gid-index",
        "4000000000",
    ]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    if has_device() {
        assert!(stderr.contains("RDMA device \"no_such_dev9\" not found; devices present: "), "{stderr}");
    } else {
        assert!(NO_RDMA.iter().any(|m| stderr.contains(m)), "{stderr}");
    }
}

#[cfg(feature = "verbs")]
#[test]
fn selftest_without_rdma_explains_itself_and_exits_2() {
    if has_device() {
        return; // tests/rxe/run.sh runs the verbs selftest on a device.
    }
    let (code, stdout, stderr) = run(&["selftest", "--backend", "verbs"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(code, Some(2), "stdout: {stdout}\nstderr: {stderr}");
    assert!(NO_RDMA.iter().any(|m| stderr.contains(m)), "not a no-RDMA message: {stderr}");
}
