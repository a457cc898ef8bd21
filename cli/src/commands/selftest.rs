//! `txbed selftest`: two nodes in this process exchange the verbs no protocol exercises yet
//! over a real backend and check ordering and delivery.

use std::process::ExitCode;

use txbed_real::selftest::SelftestBackend;

use super::{fail, Backend};

#[derive(clap::Args)]
pub struct Args {
    /// sockets (loopback) or verbs (an RDMA device; needs the "verbs" feature).
    #[arg(long, value_enum, default_value_t = Backend::Sockets)]
    pub backend: Backend,
    /// RDMA device for --backend verbs (default: the first one).
    #[arg(long)]
    pub device: Option<String>,
    /// GID index on port 1 for --backend verbs (default: first RoCE v2 IPv4 GID, else 0).
    #[arg(long)]
    pub gid_index: Option<u32>,
}

pub fn run(a: Args) -> ExitCode {
    #[cfg(feature = "verbs")]
    let (device, gid_index) = (a.device, a.gid_index);
    let b = match a.backend {
        Backend::Sim => return fail("selftest checks a real backend: --backend sockets or --backend verbs"),
        Backend::Sockets => SelftestBackend::Sockets,
        #[cfg(feature = "verbs")]
        Backend::Verbs => {
            if let Err(e) = txbed_real::verbs::probe(device.as_deref(), gid_index) {
                return fail(e);
            }
            SelftestBackend::Verbs { device, gid_index }
        }
        #[cfg(not(feature = "verbs"))]
        Backend::Verbs => return fail(super::NO_VERBS),
    };
    match txbed_real::selftest::run(b) {
        Ok(lines) => {
            for l in lines {
                println!("ok   {l}");
            }
            println!("selftest passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("selftest failed: {e}");
            ExitCode::from(1)
        }
    }
}
