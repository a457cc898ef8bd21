//! `txbed bench-verbs`: the simulator's primitive microbenchmarks (DrTM+H Fig. 5 and 6), many
//! simulations in parallel, with per-machine rates and the simulator's own speed.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// NIC profile: a built-in name (cx3, cx4, cx5, roce-cx4) or a RON file.
    #[arg(long, default_value = "cx4")]
    pub nic: String,
    /// Override a field of the NIC profile by its path in the profile, e.g.
    /// --set host.rpc_dispatch_ns=500 --set link.gbps=56 (as a scenario's nic.PATH).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
    /// Simulate this many nodes instead of the 16-node and emulated 80-node settings.
    #[arg(long)]
    pub nodes: Option<u16>,
    /// RC QPs per remote node per worker (5 emulates 80 nodes on 16).
    #[arg(long)]
    pub qps_per_node: Option<u16>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Simulations to run at once (default: all cores).
    #[arg(long, value_parser = super::parse_jobs)]
    pub jobs: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Measured simulated time per raw simulation, microseconds (after 20 us of warm-up;
    /// multi-object runs warm up 100 us and measure 200 us).
    #[arg(long, default_value_t = 40)]
    pub measure_us: u64,
    /// Comma-separated payload sizes in bytes.
    #[arg(long, value_delimiter = ',')]
    pub payloads: Option<Vec<u32>>,
    /// Skip the multi-object benchmark.
    #[arg(long)]
    pub no_multi_object: bool,
}

pub fn run(a: Args) -> ExitCode {
    let Args { nic, sets, nodes, qps_per_node, json, jobs, seed, measure_us, payloads, no_multi_object } = a;
    let nic_overrides = match txbed_scenario::set::nic_overrides(&sets) {
        Ok(o) => o,
        Err(e) => return super::fail(e),
    };
    if measure_us == 0 {
        eprintln!("error: --measure-us must be at least 1");
        return ExitCode::from(2);
    }
    let payloads = payloads.unwrap_or_else(|| txbed_runner::bench_verbs::PAYLOADS.to_vec());
    if let Some(p) = payloads.iter().find(|&&p| p == 0 || p > 1 << 20) {
        eprintln!("error: payload {p} is out of range (1 B to 1 MiB)");
        return ExitCode::from(2);
    }
    let o = txbed_runner::bench_verbs::Options {
        nic,
        nic_overrides,
        nodes,
        qps_per_node,
        seed,
        jobs: super::jobs(jobs),
        window: txbed_sim::bench_verbs::Window { warmup_ns: 20_000, measure_ns: measure_us * 1000 },
        multi_window: txbed_sim::bench_verbs::Window::multi_object(),
        payloads,
        multi_object: !no_multi_object,
    };
    // A bar on a terminal only: logs and pipes get no carriage returns.
    let bar = crate::progress::counted_bar(0, "simulations", json);
    let report = txbed_runner::bench_verbs::run(&o, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    match report {
        Ok(r) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&r).expect("report serialises"));
            } else {
                print!("{}", txbed_runner::bench_verbs::table(&r));
            }
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(e),
    }
}
