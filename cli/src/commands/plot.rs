//! `txbed plot CSV`: plots of a sweep's summary.csv or results.csv.

use std::path::PathBuf;
use std::process::ExitCode;

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    pub csv: PathBuf,
    /// The axis on x (a column such as protocol.mode; default: the first numeric axis).
    #[arg(long)]
    pub x: Option<String>,
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(a: Args) -> ExitCode {
    let dir = a.out.unwrap_or_else(|| a.csv.parent().unwrap_or(std::path::Path::new(".")).to_path_buf());
    match txbed_plot::plot_csv(&a.csv, &dir, a.x.as_deref()) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
