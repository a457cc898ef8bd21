//! History files through the command line: `txbed run --history FILE.bin` writes the binary
//! form, `txbed check` reads either form, reports its time and peak memory, and exits 2 with
//! a clear message on an empty, truncated or corrupt file (1 stays for anomalies).

use crate::common;

use common::{out, scratch, txbed};

fn check(file: &std::path::Path) -> (Option<i32>, String, String) {
    out(txbed().args(["check", file.to_str().unwrap()]))
}

#[test]
fn a_binary_history_from_a_run_checks_like_its_jsonl() {
    let d = scratch("history-bin");
    let (bin, jsonl) = (d.join("h.bin"), d.join("h.jsonl"));
    for h in [&bin, &jsonl] {
        let (code, _, err) = out(txbed().args([
            "run",
            "scenarios/quickstart.ron",
            "-q",
            "--set",
            "run.measure_us=100",
            "--history",
            h.to_str().unwrap(),
        ]));
        assert_eq!(code, Some(0), "{err}");
    }
    let b = std::fs::read(&bin).unwrap();
    assert_eq!(&b[..8], b"\x89TXBEDH\n", "--history FILE.bin writes the binary form");
    assert!(std::fs::read_to_string(&jsonl).unwrap().lines().last().unwrap().starts_with("{\"type\":\"end\","));

    let (code, text, err) = check(&bin);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(text.contains("serializable: yes, nothing lost"), "{text}");
    assert!(text.contains("transactions/s end to end; peak memory "), "{text}");
    let (_, jtext, _) = check(&jsonl);
    let first = |t: &str| t.lines().take(2).collect::<Vec<_>>().join("\n");
    assert_eq!(first(&text), first(&jtext), "same verdict and counts from both forms");

    // --convert: JSON Lines to binary and back gives the same file.
    let (conv, back) = (d.join("conv.bin"), d.join("back.jsonl"));
    let (code, _, err) = out(txbed().arg("check").arg(&jsonl).arg("--convert").arg(&conv));
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = out(txbed().arg("check").arg(&conv).arg("--convert").arg(&back));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&jsonl).unwrap());
    assert_eq!(&std::fs::read(&conv).unwrap()[..8], b"\x89TXBEDH\n");

    let (code, j, _) = out(txbed().args(["check", bin.to_str().unwrap(), "--json"]));
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert!(v["timing"]["txns"].as_u64().unwrap() > 0, "{v}");
    assert!(v["timing"]["txns_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["timing"]["read_s"].is_f64() && v["timing"]["check_s"].is_f64());
    if cfg!(target_os = "linux") {
        assert!(v["timing"]["peak_memory_bytes"].as_u64().unwrap() > 1 << 20, "{v}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn empty_truncated_and_corrupt_histories_exit_2_with_the_reason() {
    let d = scratch("history-bad");
    let h = d.join("h.jsonl");
    let (code, _, err) = out(txbed()
        .args(["run", "scenarios/quickstart.ron", "-q", "--set", "run.measure_us=100", "--history"])
        .arg(&h));
    assert_eq!(code, Some(0), "{err}");
    let text = std::fs::read_to_string(&h).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let bin = d.join("h.bin");
    let (code, _, err) = out(txbed()
        .args(["run", "scenarios/quickstart.ron", "-q", "--set", "run.measure_us=100", "--history"])
        .arg(&bin));
    assert_eq!(code, Some(0), "{err}");
    let b = std::fs::read(&bin).unwrap();

    let n = lines.len();
    let all_but = |skip: usize| -> String {
        lines.iter().enumerate().filter(|&(i, _)| i != skip).map(|(_, l)| format!("{l}\n")).collect()
    };
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        ("empty.jsonl", Vec::new(), "empty history".into()),
        ("blank.jsonl", b"\n \n".to_vec(), "empty history".into()),
        ("cut.jsonl", all_but(n - 1).into_bytes(), "truncated: no trailer line".into()),
        // Cut inside line n/2: that line does not parse.
        (
            "half.jsonl",
            text.as_bytes()[..lines[..n / 2].iter().map(|l| l.len() + 1).sum::<usize>() - 5].to_vec(),
            format!("line {}: EOF while parsing", n / 2),
        ),
        ("missing.jsonl", all_but(2).into_bytes(), "trailer says".into()),
        (
            "after.jsonl",
            format!("{text}{}\n", lines[1]).into_bytes(),
            format!("line {}: data after the trailer", n + 1),
        ),
        ("empty.bin", b[..0].to_vec(), "empty history".into()),
        ("header.bin", b[..20].to_vec(), "truncated".into()),
        ("cut.bin", b[..b.len() - 1].to_vec(), "truncated: the file ends inside the trailer".into()),
        ("half.bin", b[..b.len() / 2].to_vec(), "truncated: the file ends inside".into()),
        ("after.bin", [&b[..], b"x"].concat(), format!("data after the trailer at byte {}", b.len())),
        ("magic.bin", [&b"\x89PNG\r\n\x1a\n"[..], &b[8..]].concat(), "bad magic".into()),
        ("version.bin", [&b[..8], &[9, 0], &b[10..]].concat(), "unsupported binary history format version 9".into()),
    ];
    for (name, body, want) in cases {
        let p = d.join(name);
        std::fs::write(&p, &body).unwrap();
        let (code, stdout, err) = check(&p);
        assert_eq!(code, Some(2), "{name}: {stdout}{err}");
        assert!(err.contains(&format!("{}: ", p.display())) && err.contains(&want), "{name}: want {want:?} in {err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
