//! python/txbed_results.py, the notebook loader, against real txbed output: a run directory
//! and a two-protocol, two-seed sweep. Needs python3 (CI installs Debian's with pandas and sets
//! TXBED_PYTHON and TXBED_REQUIRE_PANDAS, so the DataFrame path is exercised too).

use crate::common;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn python_loader_reads_runs_and_sweeps() {
    let dir = common::scratch("python");
    let (run, sweep) = common::run_and_sweep(&dir);
    // TXBED_PYTHON: the interpreter to use (CI: Debian's, where it installed pandas).
    let python = std::env::var("TXBED_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .arg(root().join("python/test_txbed_results.py"))
        .args([&run, &sweep])
        .arg("4")
        .output()
        .expect("python3 runs (CI installs it)");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("Ran 5 tests") && log.contains("OK"), "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}
