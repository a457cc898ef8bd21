//! report.html of a run and of a sweep, opened in a real headless browser (Chromium): the page
//! must load with no script error and every embedded plot must decode. CI installs
//! chromium-headless-shell and sets TXBED_REQUIRE_BROWSER, so there a missing browser fails;
//! elsewhere the browser half is skipped with a message and the page is still checked as text.

use crate::common;

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn txbed() -> Command {
    let mut c = Command::cargo_bin("txbed").expect("binary built");
    c.current_dir(root());
    c
}

/// TXBED_CHROMIUM, else the first Chromium on PATH.
fn browser() -> Option<PathBuf> {
    if let Ok(b) = std::env::var("TXBED_CHROMIUM") {
        return Some(b.into());
    }
    let path = std::env::var_os("PATH")?;
    ["chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|b| std::env::split_paths(&path).map(move |d| d.join(b)))
        .find(|p| p.is_file())
}

/// The `<body ...>` tag of the page as the browser left it after loading.
fn rendered_body(page: &Path) -> Option<String> {
    let Some(b) = browser() else {
        assert!(
            std::env::var_os("TXBED_REQUIRE_BROWSER").is_none(),
            "no Chromium found and TXBED_REQUIRE_BROWSER is set"
        );
        eprintln!("no Chromium on PATH: skipping the browser check of {}", page.display());
        return None;
    };
    let out = std::process::Command::new(b)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("the browser starts");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8(out.stdout).unwrap();
    let start = dom.find("<body").expect("a body");
    Some(dom[start..start + dom[start..].find('>').unwrap() + 1].to_string())
}

fn svgs(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "svg"))
        .count()
}

#[test]
fn run_and_sweep_pages_render_in_a_browser() {
    let dir = common::scratch("html");
    let (run, sweep) = common::run_and_sweep(&dir);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("report.json")).unwrap()).unwrap();
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(page.contains("class=\"ok\" id=\"verdict\">serializable: yes, nothing lost"), "{page}");
    assert!(page.contains(&format!("<td class=\"n\">{}</td>", report["digest"].as_str().unwrap())));
    assert!(page.contains("<a href=\"history.jsonl\">") && page.contains("<a href=\"scenario.ron\">"));
    let commit = report["provenance"]["git_commit"].as_str().expect("provenance in report.json");
    assert!(page.contains("id=\"provenance\"") && page.contains(commit), "{page}");
    // A replay's trace is linked from the page once written.
    let trace = run.join("trace.json");
    txbed().arg("replay").arg(run.join("report.json")).arg("--trace").arg(&trace).assert().success();
    assert!(std::fs::read_to_string(run.join("report.html")).unwrap().contains("<a href=\"trace.json\">"));
    if let Some(body) = rendered_body(&run.join("report.html")) {
        assert!(body.contains("data-rendered=\"ok\"") && !body.contains("data-errors"), "{body}");
        assert!(body.contains(&format!("data-plots=\"{}\"", svgs(&run))), "{body}");
    }

    let page = std::fs::read_to_string(sweep.join("report.html")).unwrap();
    assert!(page.contains("every run finished and the checker accepted every history"));
    let plots = svgs(&sweep);
    assert!(plots >= 4, "{plots}");
    assert_eq!(page.matches("data:image/svg+xml;base64,").count(), plots);
    if let Some(body) = rendered_body(&sweep.join("report.html")) {
        assert!(body.contains("data-rendered=\"ok\"") && !body.contains("data-errors"), "{body}");
        assert!(body.contains(&format!("data-plots=\"{plots}\"")), "{body}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
