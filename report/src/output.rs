//! Where a run's results go besides standard output: report.json, scenario.ron and the
//! history (JSON Lines, for `txbed check`).

use serde::Serialize;
use txbed_checker::History;
use txbed_scenario::Scenario;

/// Where a run's results go besides standard output.
pub struct RunOutput<'a> {
    /// `--out DIR`: report.json, history.jsonl, scenario.ron.
    pub dir: Option<&'a std::path::Path>,
    /// `--history FILE`.
    pub history: Option<&'a std::path::Path>,
    pub json: bool,
    pub quiet: bool,
}

impl RunOutput<'_> {
    /// The history file to write: `--history`, else DIR/history.jsonl.
    pub fn history_path(&self) -> Option<std::path::PathBuf> {
        self.history.map(|p| p.to_path_buf()).or_else(|| self.dir.map(|d| d.join("history.jsonl")))
    }

    pub fn prepare(&self) -> Result<(), String> {
        if let Some(d) = self.dir {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: cannot create output directory: {e}", d.display()))?;
        }
        Ok(())
    }

    /// Writes DIR/report.json and DIR/scenario.ron, and prints the report.
    pub fn finish<R: Serialize>(&self, s: &Scenario, report: &R, text: &str) -> Result<(), String> {
        let json = serde_json::to_string_pretty(report).expect("report serialises");
        if let Some(d) = self.dir {
            let write = |name: &str, body: &str| {
                let p = d.join(name);
                std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))
            };
            write("report.json", &json)?;
            write("scenario.ron", &s.to_ron())?;
        }
        if !self.quiet {
            if self.json {
                println!("{json}");
            } else {
                print!("{text}");
            }
        }
        Ok(())
    }
}

/// Writes the run's history, with the scenario's name and the seed in its metadata.
pub fn write_history(
    s: &Scenario,
    seed: u64,
    history: &mut History,
    path: Option<&std::path::Path>,
) -> Result<(), String> {
    if let Some(path) = path {
        history.meta.insert("scenario".into(), s.name.clone().into());
        history.meta.insert("seed".into(), seed.into());
        let f = std::fs::File::create(path).map_err(|e| format!("{}: cannot write history: {e}", path.display()))?;
        history.write(std::io::BufWriter::new(f)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
