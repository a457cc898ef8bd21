//! The command line's end-to-end tests, as one test binary: each module below was a binary of
//! its own (compiling and linking 20 copies cost CI about half a minute). `verbs_cli` stays
//! apart: CI builds it again with the "verbs" feature. Run one file's tests with its module
//! name as the filter: `cargo test --release -p txbed --test cli readme::`.

mod campaign_cli;
mod cli;
mod clocks_cli;
mod cluster_cli;
mod common;
mod elle_cli;
mod faults_cli;
mod geo_cli;
mod history_cli;
mod html_cli;
mod input_cli;
mod list_cli;
mod loss_cli;
mod metrics_cli;
mod protocol_cli;
mod python_cli;
mod readme;
mod results_cli;
mod sensitivity;
mod sockets_cli;
mod workflow;
