//! `txbed sensitivity SCENARIO`: lowers and raises each numeric NIC/host profile field by a
//! percentage, re-runs the scenario at every point (optionally for several variants to compare)
//! and reports how throughput, latency and aborts move; writes sensitivity.csv and tornado
//! plots. Exit code 0, 1 if a run failed or the checker rejected one, 2 an error.

use std::path::PathBuf;
use std::process::ExitCode;

use txbed_plot::{tornado, Tornado, TornadoBar};
use txbed_report::output::prepare_dir;
use txbed_report::sensitivity::{text, write_csv};
use txbed_runner::sensitivity::{percent, plan, Options, Sensitivity};
use txbed_scenario::Scenario;

use super::fail;
use crate::progress::runs_bar;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario file (RON).
    pub scenario: PathBuf,
    /// Profile fields to vary, comma-separated, by their path in the profile
    /// (host.rpc_dispatch_ns,link.gbps). Default: every numeric field that can matter.
    #[arg(long, value_delimiter = ',')]
    pub params: Option<Vec<String>>,
    /// How far each field is lowered and raised, in percent (above 0, below 100).
    #[arg(long, default_value = "30%")]
    pub range: String,
    /// Run every variant at every point and check whether their ranking by throughput holds,
    /// e.g. --compare protocol.name=occ,nowait,sundial or --compare protocol.mode=Rpc,Onesided.
    #[arg(long, value_name = "PATH=V1,V2,...")]
    pub compare: Option<String>,
    /// Seeds, comma-separated; each point runs once per seed and the means are compared.
    /// Default: the scenario's seed.
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Change a field of the scenario first, as `txbed run --set` does.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
    /// Output directory for sensitivity.csv and the tornado plots
    /// (default: results/sensitivity/<scenario name>); new or empty, see --force.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reuse a non-empty output directory: remove txbed's earlier outputs from it first (a
    /// directory holding other files is refused).
    #[arg(long)]
    pub force: bool,
    /// Simulations at once (default: all cores).
    #[arg(long, value_parser = super::parse_jobs)]
    pub jobs: Option<usize>,
    /// No progress bar and no table (the files are still written).
    #[arg(short, long)]
    pub quiet: bool,
}

/// `30%`, `30` or `7.5%` as a fraction.
fn parse_range(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let n: f64 = t.strip_suffix('%').unwrap_or(t).trim().parse().map_err(|_| {
        format!("--range {s}: expected a percentage such as 30% (each field is lowered and raised by it)")
    })?;
    if !(n > 0.0 && n < 100.0) {
        return Err(format!("--range {s}: must be above 0% and below 100%"));
    }
    Ok(n / 100.0)
}

/// `protocol.name=occ,nowait` as (path, values).
fn parse_compare(s: &str) -> Result<(String, Vec<String>), String> {
    let (path, values) = s
        .split_once('=')
        .ok_or_else(|| format!("--compare {s}: expected PATH=V1,V2,... e.g. protocol.name=occ,nowait"))?;
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if path.trim().is_empty() || values.iter().any(String::is_empty) {
        return Err(format!("--compare {s}: expected PATH=V1,V2,... e.g. protocol.name=occ,nowait"));
    }
    Ok((path.trim().to_string(), values))
}

/// A file name for a variant's value: letters, digits, '-' and '_' kept.
fn file_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// One tornado plot of throughput per variant; returns the files written.
fn plots(s: &Sensitivity, dir: &std::path::Path, name: &str) -> Result<Vec<PathBuf>, String> {
    let order = s.order();
    let r = s.range * 100.0;
    let seeds = if s.seeds.len() == 1 { "1 seed".to_string() } else { format!("{} seeds", s.seeds.len()) };
    let mut written = Vec::new();
    for (v, label) in s.variants.iter().enumerate() {
        let base = s.base[v].throughput;
        let noted = |i: usize| {
            let a = &s.params[i].at[v];
            a.low.note.is_some() || a.high.note.is_some()
        };
        let bars: Vec<TornadoBar> = order
            .iter()
            .map(|&i| {
                let a = &s.params[i].at[v];
                let star = if noted(i) { " *" } else { "" };
                TornadoBar {
                    label: format!("{}{star}", s.params[i].path),
                    low: percent(a.low.metrics.throughput, base),
                    high: percent(a.high.metrics.throughput, base),
                }
            })
            .collect();
        let (title, stem) = match &s.compare {
            Some(c) => (
                format!("Throughput sensitivity: {name}, {c}={label}"),
                format!("tornado-throughput-{}", file_safe(label)),
            ),
            None => (format!("Throughput sensitivity: {name}"), "tornado-throughput".to_string()),
        };
        let subtitle = format!("{}; each NIC/host parameter at -{r}% and +{r}% of its value; {seeds}", s.title);
        let (low_name, high_name) = (format!("parameter -{r}%"), format!("parameter +{r}%"));
        let x_desc = if order.iter().any(|&i| noted(i)) {
            format!("throughput change vs base (%); * not exactly ±{r}%: rounded or kept valid")
        } else {
            "throughput change vs base (%)".to_string()
        };
        let t = Tornado {
            title: &title,
            subtitle: &subtitle,
            x_desc: &x_desc,
            low_name: &low_name,
            high_name: &high_name,
            bars: &bars,
        };
        written.extend(tornado(&t, dir, &stem)?);
    }
    Ok(written)
}

pub fn run(a: Args) -> ExitCode {
    let range = match parse_range(&a.range) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let compare = match a.compare.as_deref().map(parse_compare).transpose() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let (s, _) = match Scenario::load_with(&a.scenario, &a.sets) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let source = a.scenario.display().to_string();
    if let Err(e) = txbed_scenario::sweep::simulated(&s, &source) {
        return fail(e);
    }
    let seeds = a.seeds.unwrap_or_else(|| vec![s.run.seed]);
    if let Err(e) = txbed_scenario::sweep::check_seeds(&seeds) {
        return fail(format!("--seeds: {e}"));
    }
    let o = Options { params: a.params, range, compare, seeds };
    let plan = match plan(&s, &source, &o) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let name = if s.name.is_empty() {
        a.scenario.file_stem().map_or("scenario".into(), |x| x.to_string_lossy().into_owned())
    } else {
        s.name.clone()
    };
    let dir = a.out.unwrap_or_else(|| PathBuf::from("results").join("sensitivity").join(&name));
    if let Err(e) = prepare_dir(&dir, a.force) {
        return fail(e);
    }
    let provenance = super::provenance("sim");
    if let Err(e) = provenance.write(&dir) {
        return fail(e);
    }
    let jobs = super::jobs(a.jobs);
    if !a.quiet {
        eprintln!("sensitivity of {name:?}: {} simulations on {jobs} threads", plan.simulations());
    }
    let bar = runs_bar(plan.simulations(), a.quiet);
    let result = plan.run(jobs, &|| bar.inc(1));
    bar.finish_and_clear();
    let result = match result {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let csv = match write_csv(&result, &dir) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let figures = match plots(&result, &dir, &name) {
        Ok(p) => p,
        Err(e) => return fail(format!("plotting: {e}")),
    };
    if let Err(e) = super::html_page(&dir, a.quiet) {
        return fail(e);
    }
    if !a.quiet {
        print!("{}", text(&result));
        println!("\n{}", csv.display());
        for f in figures {
            println!("{}", f.display());
        }
    }
    if result.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("{} of {} runs failed or were rejected by the checker", result.problems.len(), result.simulations);
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_comparisons_parse() {
        assert_eq!(parse_range("30%").unwrap(), 0.3);
        assert_eq!(parse_range("7.5").unwrap(), 0.075);
        for bad in ["0%", "100%", "-5%", "abc", ""] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_compare("protocol.name=occ, nowait").unwrap(),
            ("protocol.name".into(), vec!["occ".into(), "nowait".into()])
        );
        for bad in ["protocol.name", "=occ,nowait", "protocol.name=occ,,nowait"] {
            assert!(parse_compare(bad).is_err(), "{bad}");
        }
        assert_eq!(file_safe("Code(38)"), "Code_38_");
    }
}
