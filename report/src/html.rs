//! `report.html`: one self-contained page per run or sweep directory, the thing to open first.
//! It shows what the directory holds, whatever wrote it: the checker's verdict and any
//! warnings, the provenance, the summary (every field of report.json, or summary.csv), every
//! SVG plot inline, and links to the other files (trace, history, CSVs). No network, no
//! external scripts: plots are embedded as data URIs. A small script marks the body
//! `data-rendered="ok"` once every plot has decoded, and records script errors in
//! `data-errors`, so a headless browser can check the page (cli/tests/html_cli.rs).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

/// Plots larger than this are linked rather than embedded, so a page stays openable.
const EMBED_LIMIT: u64 = 16 << 20;

/// Writes DIR/report.html from the files in DIR; returns its path.
pub fn write_page(dir: &Path) -> Result<PathBuf, String> {
    let page = page(dir)?;
    let path = dir.join("report.html");
    std::fs::write(&path, page).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The page for DIR as a string.
pub fn page(dir: &Path) -> Result<String, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "report.html"))
        .collect();
    files.sort();
    let name = |n: &str| files.iter().find(|p| p.file_name().is_some_and(|f| f == n));
    let dir_name = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());

    let mut body = String::new();
    let title;
    if let Some(report) = name("report.json") {
        let r: Value = read_json(report)?;
        title = format!(
            "txbed run: {} (seed {}, {})",
            str_of(&r["scenario"]),
            r["seed"],
            [str_of(&r["protocol"]), str_of(&r["hybrid"])].join(" ").trim()
        );
        body += &verdict(&r);
        body += "<h2>Summary</h2>\n";
        body += &key_figures(&r);
        body += &provenance(&r);
        body += "<details><summary>Every field of report.json</summary>\n";
        body += &summary_table(&r);
        body += "</details>\n";
        if let Some(s) = r["resolved_scenario"].as_str() {
            let _ = writeln!(body, "<details><summary>Scenario as run</summary><pre>{}</pre></details>", esc(s));
        }
    } else if name("results.csv").is_some() || name("summary.csv").is_some() || name("sensitivity.csv").is_some() {
        title = format!("txbed: {dir_name}");
        for table in ["summary.csv", "sensitivity.csv", "ranking.csv"] {
            if let Some(p) = name(table) {
                let _ = writeln!(body, "<h2>{table}</h2>");
                body += &csv_table(p)?;
            }
        }
        if let Some(p) = name("results.csv") {
            body += &failed_runs(p)?;
            let _ = writeln!(body, "<details><summary>results.csv: every run</summary>");
            body += &csv_table(p)?;
            body += "</details>\n";
        }
    } else {
        return Err(format!(
            "{}: no report.json, results.csv, summary.csv or sensitivity.csv to make a page of",
            dir.display()
        ));
    }

    let plots: Vec<&PathBuf> = files.iter().filter(|p| p.extension().is_some_and(|x| x == "svg")).collect();
    if !plots.is_empty() {
        body += "<h2>Plots</h2>\n";
    }
    for p in &plots {
        let file = file_name(p);
        let size = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?.len();
        if size > EMBED_LIMIT {
            let _ = writeln!(body, "<p><a href=\"{0}\">{0}</a> ({size} bytes, too large to embed)</p>", esc(&file));
            continue;
        }
        let svg = txbed_input::read_bytes(p, "plot", EMBED_LIMIT).map_err(|e| e.to_string())?;
        let data = base64::engine::general_purpose::STANDARD.encode(svg);
        let _ = writeln!(
            body,
            "<figure><img alt=\"{0}\" src=\"data:image/svg+xml;base64,{data}\"><figcaption><a href=\"{0}\">{0}</a></figcaption></figure>",
            esc(&file)
        );
    }
    body += "<h2>Files</h2>\n<ul>\n";
    for p in &files {
        let size = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let _ = writeln!(body, "<li><a href=\"{0}\">{0}</a> ({size} bytes)</li>", esc(&file_name(p)));
    }
    body += "</ul>\n";
    Ok(format!("{HEAD_1}{}{HEAD_2}<h1>{}</h1>\n{body}{TAIL}", esc(&title), esc(&title)))
}

const HEAD_1: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>";
const HEAD_2: &str = "</title>\n<style>
body{font-family:sans-serif;max-width:75em;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{background:#e6f4e6;border:1px solid #7b7;padding:.5em}.bad{background:#fbe9e9;border:1px solid #d77;padding:.5em}
.warn{background:#fff6dd;border:1px solid #db6;padding:.5em}
.wide{overflow-x:auto}figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}pre{background:#f6f6f6;padding:.5em;overflow:auto}
</style></head><body>\n";
const TAIL: &str = "<script>
window.addEventListener('error', e => { document.body.dataset.errors = (document.body.dataset.errors || '') + e.message + ';'; });
window.addEventListener('load', () => {
  const imgs = [...document.images];
  document.body.dataset.rendered = imgs.every(i => i.complete && i.naturalWidth > 0) ? 'ok' : 'broken';
  document.body.dataset.plots = imgs.length;
});
</script>
</body></html>\n";

/// The checker's verdict, failures and warnings, first thing on the page.
fn verdict(r: &Value) -> String {
    let mut s = String::new();
    let c = &r["check"];
    if c.is_object() {
        let clean = c["clean"].as_bool() == Some(true);
        let checked = &c["checked_txns"];
        // Reports written before levels existed were checked at serializability.
        let level = c["level"].as_str().unwrap_or("serializable");
        let holds = c.get("level_holds").unwrap_or(&c["serializable"]);
        let line = if clean {
            format!(
                "{level}: yes, nothing lost; {checked} transactions checked, invariants {}",
                if c["invariants_ok"].as_bool() == Some(false) { "violated" } else { "hold" }
            )
        } else {
            format!(
                "the checker rejected this run: {level} {holds}, nothing lost {}, invariants hold {} ({checked} transactions checked)",
                c["nothing_lost"], c["invariants_ok"]
            )
        };
        let _ = write!(s, "<p class=\"{}\" id=\"verdict\">{}", if clean { "ok" } else { "bad" }, esc(&line));
        if let Some(a) = c["anomalies"].as_object().filter(|a| !a.is_empty()) {
            let list: Vec<String> = a.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            let _ = write!(s, "<br>anomalies: {}", esc(&list.join(", ")));
        }
        if let Some(a) = c["allowed"].as_object().filter(|a| !a.is_empty()) {
            let list: Vec<String> = a.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            let _ = write!(s, "<br>allowed at {}: {}", esc(level), esc(&list.join(", ")));
        }
        s += "</p>\n";
        if let Some(ex) = c["explanations"].as_array().filter(|x| !x.is_empty()) {
            s += "<h2>Anomalies explained</h2>\n<ol>\n";
            for e in ex {
                let _ = writeln!(s, "<li><pre>{}</pre></li>", esc(&str_of(e)));
            }
            s += "</ol>\n";
        }
    }
    for (key, class) in [("failures", "bad"), ("warnings", "warn")] {
        if let Some(list) = r[key].as_array().filter(|x| !x.is_empty()) {
            let _ = writeln!(s, "<div class=\"{class}\" id=\"{key}\"><b>{key}</b><ul>");
            for f in list {
                let _ = writeln!(s, "<li>{}</li>", esc(&str_of(f)));
            }
            s += "</ul></div>\n";
        }
    }
    s
}

fn provenance(r: &Value) -> String {
    let Some(p) = r["provenance"].as_object() else { return String::new() };
    let mut s = String::from("<h2>Provenance</h2>\n<table id=\"provenance\">\n");
    for (k, v) in p {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&str_of(v)));
    }
    s + "</table>\n"
}

/// The figures a reader looks for first, where the report has them.
fn key_figures(r: &Value) -> String {
    let mut s = String::from("<table id=\"key\">\n");
    let rows = [
        ("throughput (transactions/s)", "/throughput_tps"),
        ("committed in the window", "/committed"),
        ("aborted attempts in the window", "/aborted"),
        ("abort rate", "/abort_rate"),
        ("latency p50 (us)", "/latency_us/p50"),
        ("latency p99 (us)", "/latency_us/p99"),
        ("latency p99.9 (us)", "/latency_us/p99_9"),
        ("latency max (us)", "/latency_us/max"),
        ("latency mean (us)", "/latency_us/mean"),
        ("trace digest", "/digest"),
    ];
    for (label, ptr) in rows {
        if let Some(v) = r.pointer(ptr) {
            let _ = writeln!(s, "<tr><th>{label}</th><td class=\"n\">{}</td></tr>", esc(&short_number(&str_of(v))));
        }
    }
    s + "</table>\n"
}

/// Every field of report.json but the long ones shown elsewhere, dotted paths for nesting.
fn summary_table(r: &Value) -> String {
    let mut rows = Vec::new();
    if let Some(o) = r.as_object() {
        for (k, v) in o {
            if !["resolved_scenario", "check", "provenance", "failures", "warnings"].contains(&k.as_str()) {
                flatten(k, v, &mut rows);
            }
        }
    }
    let mut s = String::from("<table id=\"summary\">\n");
    for (k, v) in rows {
        let class = if v.is_number() { " class=\"n\"" } else { "" };
        let _ = writeln!(s, "<tr><th>{}</th><td{class}>{}</td></tr>", esc(&k), esc(&short_number(&str_of(&v))));
    }
    s + "</table>\n"
}

/// Objects become dotted rows; arrays longer than 16 entries are left as one JSON cell
/// (time series, per-worker lists) so the table stays a summary.
fn flatten(path: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(o) if !o.is_empty() => {
            for (k, x) in o {
                flatten(&format!("{path}.{k}"), x, out);
            }
        }
        Value::Array(a) if !a.is_empty() && a.len() <= 16 && a.iter().any(|x| x.is_object()) => {
            for (i, x) in a.iter().enumerate() {
                flatten(&format!("{path}[{i}]"), x, out);
            }
        }
        Value::Array(a) if a.len() > 16 => {
            out.push((path.to_string(), Value::String(format!("({} entries; see the JSON)", a.len()))))
        }
        _ => out.push((path.to_string(), v.clone())),
    }
}

fn csv_table(p: &Path) -> Result<String, String> {
    let mut rd = csv_reader(p)?;
    let head = rd.headers().map_err(|e| format!("{}: {e}", p.display()))?.clone();
    let mut s = String::from("<div class=\"wide\"><table>\n<tr>");
    for h in &head {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s += "</tr>\n";
    for row in rd.records() {
        let row = row.map_err(|e| format!("{}: {e}", p.display()))?;
        s += "<tr>";
        for cell in &row {
            let class = if cell.parse::<f64>().is_ok() { " class=\"n\"" } else { "" };
            let _ = write!(s, "<td{class}>{}</td>", esc(&short_number(cell)));
        }
        s += "</tr>\n";
    }
    Ok(s + "</table></div>\n")
}

/// A sweep's runs that failed or that the checker rejected, named on the page.
fn failed_runs(p: &Path) -> Result<String, String> {
    let mut rd = csv_reader(p)?;
    let head = rd.headers().map_err(|e| format!("{}: {e}", p.display()))?.clone();
    let col = |n: &str| head.iter().position(|h| h == n);
    let (ser, err) = (col("serializable"), col("error"));
    let mut bad = Vec::new();
    for row in rd.records() {
        let row = row.map_err(|e| format!("{}: {e}", p.display()))?;
        let rejected = ser.is_some_and(|i| row.get(i) == Some("false"));
        let failed = err.and_then(|i| row.get(i)).is_some_and(|e| !e.is_empty());
        if rejected || failed {
            bad.push(row.iter().collect::<Vec<_>>().join(", "));
        }
    }
    if bad.is_empty() {
        return Ok(
            "<p class=\"ok\" id=\"verdict\">every run finished and the checker accepted every history</p>\n".into()
        );
    }
    let mut s = format!(
        "<div class=\"bad\" id=\"verdict\"><b>{} run(s) failed or were rejected by the checker</b><ul>\n",
        bad.len()
    );
    for b in bad {
        let _ = writeln!(s, "<li>{}</li>", esc(&b));
    }
    Ok(s + "</ul></div>\n")
}

fn csv_reader(p: &Path) -> Result<csv::Reader<std::io::Cursor<Vec<u8>>>, String> {
    let bytes = txbed_input::read_bytes(p, "CSV", txbed_input::RESULTS_LIMIT).map_err(|e| e.to_string())?;
    Ok(csv::Reader::from_reader(std::io::Cursor::new(bytes)))
}

/// Long floats rounded to 6 decimals for reading; the CSV keeps them whole.
fn short_number(cell: &str) -> String {
    match cell.parse::<f64>() {
        Ok(x) if cell.contains('.') && x.is_finite() => format!("{}", (x * 1e6).round() / 1e6),
        _ => cell.to_string(),
    }
}

fn read_json(p: &Path) -> Result<Value, String> {
    let text = txbed_input::read_text(p, "report", txbed_input::RESULTS_LIMIT).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
}

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("txbed-html-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A rejected run leads with the verdict in red, its anomalies and their explanations,
    /// everything user-supplied escaped.
    #[test]
    fn a_rejected_run_says_so_first() {
        let d = dir("bad");
        let report = serde_json::json!({
            "scenario": "x<script>", "seed": 3, "protocol": "OCC", "hybrid": "0 (rpc)",
            "committed": 10, "throughput_tps": 1e6, "latency_us": {"p50": 1.5},
            "check": {"clean": false, "serializable": false, "nothing_lost": true, "invariants_ok": true,
                      "checked_txns": 12, "anomalies": {"G-single": 1}, "explanations": ["T1 -rw-> T2 -wr-> T1"]},
            "failures": [], "warnings": ["node 2 committed nothing"],
        });
        std::fs::write(d.join("report.json"), report.to_string()).unwrap();
        std::fs::write(d.join("history.jsonl"), "").unwrap();
        let page = page(&d).unwrap();
        let verdict = page.find("id=\"verdict\"").unwrap();
        assert!(page[..verdict].contains("class=\"bad\""), "{page}");
        assert!(page.find("<h2>Summary").unwrap() > verdict);
        assert!(page.contains("G-single: 1") && page.contains("T1 -rw-&gt; T2 -wr-&gt; T1"));
        assert!(page.contains("node 2 committed nothing") && page.contains("id=\"warnings\""));
        assert!(page.contains("x&lt;script&gt;") && !page.contains("x<script>"));
        assert!(page.contains("<a href=\"history.jsonl\">"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A run checked at a weaker level names it, and lists the anomalies it allows apart.
    #[test]
    fn a_run_names_its_isolation_level_and_what_it_allows() {
        let d = dir("level");
        let report = serde_json::json!({
            "scenario": "rc", "seed": 1, "protocol": "OCC", "hybrid": "0 (rpc)",
            "check": {"clean": true, "level": "read-committed", "level_holds": true, "serializable": false,
                      "nothing_lost": true, "invariants_ok": true, "checked_txns": 12, "anomalies": {},
                      "allowed": {"G2-item": 2}, "explanations": []},
            "failures": [], "warnings": [],
        });
        std::fs::write(d.join("report.json"), report.to_string()).unwrap();
        let page = page(&d).unwrap();
        assert!(page.contains("read-committed: yes, nothing lost; 12 transactions checked"), "{page}");
        assert!(page.contains("allowed at read-committed: G2-item: 2"), "{page}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A sweep page names the runs that failed, with the CSV read by the csv crate (a
    /// quoted comma stays in its cell), and embeds every SVG.
    #[test]
    fn a_sweep_page_names_failed_runs_and_embeds_plots() {
        let d = dir("sweep");
        std::fs::write(
            d.join("results.csv"),
            "axis,seed,throughput_tps,serializable,error\n\"a,b\",1,5.5,true,\n\"c\",1,0,false,\n",
        )
        .unwrap();
        std::fs::write(d.join("summary.csv"), "axis,runs\n\"a,b\",1\n").unwrap();
        std::fs::write(d.join("p.svg"), "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\"/>")
            .unwrap();
        let page = page(&d).unwrap();
        assert!(page.contains("1 run(s) failed or were rejected"), "{page}");
        assert!(page.contains("<td>a,b</td>"));
        assert_eq!(page.matches("data:image/svg+xml;base64,").count(), 1);
        std::fs::write(d.join("results.csv"), "axis,seed,serializable,error\nx,1,true,\n").unwrap();
        assert!(super::page(&d).unwrap().contains("every run finished and the checker accepted"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_without_results_is_an_error() {
        let d = dir("empty");
        assert!(page(&d).unwrap_err().contains("no report.json"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
