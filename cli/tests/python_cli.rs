//! python/txbed_results.py, the notebook loader, against real txbed output: a run directory
//! and a two-protocol, two-seed sweep. Needs python3 (CI installs Debian's with pandas and sets
//! TXBED_PYTHON and TXBED_REQUIRE_PANDAS, so the DataFrame path is exercised too).

use assert_cmd::Command;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn txbed() -> Command {
    let mut c = Command::cargo_bin("txbed").expect("binary built");
    c.current_dir(root());
    c
}

#[test]
fn python_loader_reads_runs_and_sweeps() {
    let dir = std::env::temp_dir().join(format!("txbed-python-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (run, sweep) = (dir.join("run"), dir.join("sweep"));
    txbed()
        .args(["run", "scenarios/quickstart.ron", "-q", "--measure-us", "100", "--out"])
        .arg(&run)
        .assert()
        .success();
    let file = dir.join("py.ron");
    let base = root().join("scenarios/quickstart.ron");
    let text = format!(
        r#"Sweep(name: "py", base: {base:?}, set: ["run.measure_us=100", "protocol.mode=rpc"],
           axes: [(path: "protocol.name", values: ["nowait", "occ"])], seeds: [1, 2])"#
    );
    std::fs::write(&file, text).unwrap();
    txbed().arg("sweep").arg(&file).args(["-q", "--out"]).arg(&sweep).assert().success();
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
