//! Reports of runs, in every form a researcher reads or keeps: text (`text`), report.json,
//! scenario.ron and history files (`output`), a sweep's CSVs with confidence intervals (`csv`),
//! the hybrid-search ranking (`rank`), a sensitivity analysis's table and CSV
//! (`sensitivity`), Chrome/Perfetto traces (`trace`), and reading a report back to replay its
//! run (`replay`). Plots are txbed-plot's; the report data is the runner's.

pub mod compare;
pub mod csv;
pub mod html;
pub mod latency;
pub mod output;
pub mod provenance;
pub mod rank;
pub mod replay;
pub mod sensitivity;
pub mod shard;
pub mod text;
pub mod trace;
