//! The stacked stage plot of a sweep with `per_txn_<stage>_us` columns (issue 16): stage time
//! per committed transaction, with the mean latency as a marker and a caption saying what is
//! counted.

use std::fs;

#[test]
fn stacks_stage_time_per_committed_transaction_with_the_mean_latency() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txbed-plot-per-txn");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    // Per execution, LOG (run by few transactions) would stack to 30 us; per committed
    // transaction the stages take 9 us of a 10 us mean latency.
    let csv = dir.join("summary.csv");
    fs::write(
        &csv,
        "protocol.name,runs,throughput_tps_mean,throughput_tps_ci95,mean_us_mean,mean_us_ci95,stage_lock_us_mean,stage_lock_us_ci95,stage_log_us_mean,stage_log_us_ci95,per_txn_lock_us_mean,per_txn_lock_us_ci95,per_txn_log_us_mean,per_txn_log_us_ci95\n\
         occ,3,1000000,0,10,0.1,4,0,26,0,4,0,5,0\n\
         nowait,3,900000,0,12,0.1,5,0,25,0,5,0,6,0\n",
    )
    .unwrap();
    let paths = txbed_plot::plot_csv(&csv, &dir, None).unwrap();
    let svg = paths.iter().find(|p| p.file_name().unwrap() == "summary-stages.svg").unwrap();
    let svg = fs::read_to_string(svg).unwrap();
    for text in [
        "Stage time per committed transaction",
        "time in stages per committed transaction",
        "mean latency",
        "aborted attempts included,",
        "/ committed transactions",
    ] {
        assert!(svg.contains(text), "missing {text:?}");
    }
    // The totals over the bars: occ 4 + 5 and nowait 5 + 6, not the per-execution 30.
    let lines: Vec<&str> = svg.lines().map(str::trim).collect();
    assert!(lines.contains(&"9.0") && lines.contains(&"11"), "stack totals");
    assert!(!lines.contains(&"30"), "per-execution means stacked");
    // A diamond per bar marks the mean latency (black polygons; stages are filled rects).
    assert!(svg.matches("<polygon").count() >= 2);
    fs::remove_dir_all(&dir).unwrap();
}
