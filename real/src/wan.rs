//! What the real backends make of data centers (`cluster.datacenters`, `cluster.inter_dc`):
//! sockets holds traffic from another data center for a constant delay (as it does
//! `cluster.link_delay_us`); anything else a link model asks for (a delay distribution,
//! jitter, loss, bandwidth, TCP-like transport) is refused naming the field, never ignored.

use txbed_runner::TxnRunSpec;
use txbed_scenario::{DcPair, InterDc, Scenario};
use txbed_sim::wan::{Delay, WanTransport};

const ON_SIM: &str = "run this scenario on the simulator (--backend sim)";

/// Folds the scenario's data centers into `spec.link_delay_ns` for sockets (`verbs`:
/// false), or says which field cannot be emulated. `spec.wan` stays: nodes still learn which
/// data center each node is in (`NodeState::dc_of`, the stages' inter-DC counts); only the
/// simulator applies its link model.
pub fn emulate(s: &Scenario, spec: &mut TxnRunSpec, verbs: bool) -> Result<(), String> {
    let Some(wan) = spec.wan.clone() else {
        return Ok(());
    };
    let Some(inter) = &s.cluster.inter_dc else {
        return Ok(());
    };
    if verbs {
        return Err(format!(
            "cluster.datacenters: the verbs backend adds no delay to real RDMA links, so it cannot emulate data centers; {ON_SIM}, or on sockets (Constant delays)"
        ));
    }
    check_sockets("cluster.inter_dc", &Fields::of(inter))?;
    for (i, p) in inter.pairs.iter().enumerate() {
        check_sockets(&format!("cluster.inter_dc.pairs[{i}]"), &Fields::of_pair(p))?;
    }
    let n = spec.nodes as usize;
    if spec.link_delay_ns.is_empty() {
        spec.link_delay_ns = vec![0; n * n];
    }
    for i in 0..n {
        for j in 0..n {
            if let Some((_, link)) = wan.link(i as u16, j as u16) {
                let Delay::Constant(us) = link.delay else { unreachable!("checked above") };
                spec.link_delay_ns[i * n + j] += (us * 1000.0).round() as u64;
            }
        }
    }
    Ok(())
}

/// The fields of a link as written (a pair's may be left out).
struct Fields<'a> {
    delay: Option<&'a Delay>,
    jitter_us: Option<f64>,
    loss: Option<f64>,
    gbps: Option<f64>,
    transport: Option<&'a WanTransport>,
}

impl<'a> Fields<'a> {
    fn of(l: &'a InterDc) -> Self {
        Fields {
            delay: Some(&l.delay),
            jitter_us: Some(l.jitter_us),
            loss: Some(l.loss),
            gbps: l.gbps,
            transport: Some(&l.transport),
        }
    }
    fn of_pair(p: &'a DcPair) -> Self {
        Fields {
            delay: p.delay.as_ref(),
            jitter_us: p.jitter_us,
            loss: p.loss,
            gbps: p.gbps,
            transport: p.transport.as_ref(),
        }
    }
}

fn check_sockets(at: &str, f: &Fields) -> Result<(), String> {
    let refuse =
        |field: &str, what: String| Err(format!("{at}.{field}: the sockets backend cannot emulate {what}; {ON_SIM}"));
    if let Some(d) = f.delay.filter(|d| !matches!(d, Delay::Constant(_))) {
        let kind = match d {
            Delay::Uniform(..) => "Uniform",
            Delay::Normal(..) => "Normal",
            _ => "Cdf",
        };
        return refuse("delay", format!("a {kind}(..) delay (only Constant(us))"));
    }
    if let Some(j) = f.jitter_us.filter(|&j| j != 0.0) {
        return refuse("jitter_us", format!("jitter ({j} us)"));
    }
    if let Some(l) = f.loss.filter(|&l| l != 0.0) {
        return refuse(
            "loss",
            format!("loss on one link ({l}); the NIC profile's ud_drop_probability drops datagrams on every link"),
        );
    }
    if let Some(g) = f.gbps {
        return refuse("gbps", format!("a {g} Gbit/s link (its traffic runs at the host's speed)"));
    }
    if let Some(WanTransport::Tcp(_)) = f.transport {
        return refuse("transport", "a TCP-like transport's per-message CPU cost and ordering".into());
    }
    Ok(())
}
