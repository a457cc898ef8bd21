//! The verbs backend's device layer: find an RDMA device through libibverbs (via `sideway`), read
//! port 1 and pick a GID, and explain clearly why that is impossible on a machine without RDMA.
//!
//! Not here yet: queue pairs, memory registration, posting (see docs/verbs.md).
//!
//! The only unsafe code is in [`sys`] (asking the loader whether libibverbs loads).

mod sys;
pub mod transport;

use std::fmt;
use std::io;
use std::net::Ipv6Addr;
use std::path::Path;

use sideway::ibverbs::device::{DeviceInfo as _, DeviceList, GetDeviceListErrorKind, OpenDeviceErrorKind};
use sideway::ibverbs::device_context::{DeviceContext, QueryGidErrorKind, QueryPortErrorKind};

/// The port every probe reads.
pub const PORT: u8 = 1;

const ENOSYS: i32 = libc::ENOSYS;
const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;

/// Logical port state (`ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    Unknown(u32),
}

impl PortState {
    pub fn from_raw(v: u32) -> Self {
        match v {
            0 => Self::Nop,
            1 => Self::Down,
            2 => Self::Init,
            3 => Self::Armed,
            4 => Self::Active,
            5 => Self::ActiveDefer,
            n => Self::Unknown(n),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Nop => f.write_str("NOP"),
            Self::Down => f.write_str("DOWN"),
            Self::Init => f.write_str("INIT"),
            Self::Armed => f.write_str("ARMED"),
            Self::Active => f.write_str("ACTIVE"),
            Self::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            Self::Unknown(n) => write!(f, "unknown ({n})"),
        }
    }
}

/// Port link layer (`IBV_LINK_LAYER_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    Unspecified,
    InfiniBand,
    Ethernet,
    Unknown(u8),
}

impl LinkLayer {
    pub fn from_raw(v: u8) -> Self {
        match v {
            0 => Self::Unspecified,
            1 => Self::InfiniBand,
            2 => Self::Ethernet,
            n => Self::Unknown(n),
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unspecified => f.write_str("unspecified"),
            Self::InfiniBand => f.write_str("InfiniBand"),
            Self::Ethernet => f.write_str("Ethernet"),
            Self::Unknown(n) => write!(f, "unknown ({n})"),
        }
    }
}

/// The wire format a GID entry is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidKind {
    InfiniBand,
    RoceV1,
    RoceV2,
    /// The type could not be read (old kernel or driver).
    Unknown,
}

impl GidKind {
    /// From `ibv_query_gid_type`'s sysfs type (0: IB or RoCE v1, 1: RoCE v2) and the link layer.
    fn from_sysfs(t: Option<u32>, link: LinkLayer) -> Self {
        match (t, link) {
            (Some(1), _) => Self::RoceV2,
            (Some(0), LinkLayer::Ethernet) => Self::RoceV1,
            (Some(0), _) => Self::InfiniBand,
            _ => Self::Unknown,
        }
    }
}

impl fmt::Display for GidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InfiniBand => "IB",
            Self::RoceV1 => "RoCE v1",
            Self::RoceV2 => "RoCE v2",
            Self::Unknown => "type unknown",
        })
    }
}

/// One populated GID table entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Ipv6Addr,
    pub kind: GidKind,
}

impl GidEntry {
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), as RoCE v2 over IPv4 uses.
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        self.gid.to_ipv4_mapped()
    }
}

impl fmt::Display for GidEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gid[{}] {} ({}", self.index, self.gid, self.kind)?;
        if let Some(v4) = self.ipv4() {
            write!(f, ", IPv4 {v4}")?;
        }
        f.write_str(")")
    }
}

/// What [`probe`] found: the device, its port 1 and the chosen GID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    pub port: u8,
    pub state: PortState,
    pub link_layer: LinkLayer,
    /// Active MTU in bytes (0 if the driver reported an unknown value).
    pub active_mtu: u32,
    pub lid: u16,
    pub gid_table_len: u32,
    pub gid: GidEntry,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "device: {}", self.name)?;
        writeln!(
            f,
            "port {}: state {}, link layer {}, active MTU {}, LID {}, {} GID entries",
            self.port, self.state, self.link_layer, self.active_mtu, self.lid, self.gid_table_len
        )?;
        write!(f, "using {}", self.gid)
    }
}

/// What the machine shows about RDMA besides the binding's errno.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// `Err(loader message)` if libibverbs.so.1 cannot be loaded.
    pub library: Result<(), String>,
    /// /sys/class/infiniband exists (ib_core loaded).
    pub sys_infiniband: bool,
    /// /sys/class/infiniband_verbs exists (ib_uverbs loaded).
    pub sys_uverbs: bool,
    /// /dev/infiniband exists (uverbs character devices).
    pub dev_infiniband: bool,
}

impl Evidence {
    /// Look at this machine.
    pub fn gather() -> Self {
        Self {
            library: sys::load_libibverbs(),
            sys_infiniband: Path::new("/sys/class/infiniband").exists(),
            sys_uverbs: Path::new("/sys/class/infiniband_verbs").exists(),
            dev_infiniband: Path::new("/dev/infiniband").exists(),
        }
    }

    fn missing(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        if !self.sys_infiniband {
            m.push("/sys/class/infiniband");
        }
        if !self.sys_uverbs {
            m.push("/sys/class/infiniband_verbs");
        }
        if !self.dev_infiniband {
            m.push("/dev/infiniband");
        }
        m
    }

    /// The kernel side of verbs (ib_uverbs) is visibly absent.
    fn no_kernel_verbs(&self) -> bool {
        !self.sys_uverbs || !self.dev_infiniband
    }
}

const SOFT_ROCE: &str = "modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <interface>";

/// Why the device layer cannot give a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerbsError {
    /// (a) libibverbs.so.1 could not be loaded.
    LibraryMissing { detail: String },
    /// (b) The kernel offers no verbs interface (ENOSYS, or ib_uverbs absent).
    NoKernelSupport { errno: Option<i32>, missing: Vec<&'static str> },
    /// (c) EOPNOTSUPP from libibverbs or the driver.
    NotSupported { during: &'static str },
    /// (d) libibverbs works but lists no device.
    NoDevices { uverbs_loaded: bool },
    /// (e) The named device is not among those present.
    DeviceNotFound { name: String, present: Vec<String> },
    /// (f) The requested GID index is out of range or its entry is empty.
    BadGidIndex { device: String, port: u8, index: u32, table_len: u32, reason: Option<String> },
    /// Any other failure of a verbs call.
    Os { during: &'static str, device: Option<String>, errno: Option<i32> },
}

fn errno_text(errno: Option<i32>) -> String {
    match errno {
        Some(n) => io::Error::from_raw_os_error(n).to_string(),
        None => "unknown error".to_string(),
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LibraryMissing { detail } => write!(
                f,
                "libibverbs could not be loaded ({detail}); install the RDMA user-space libraries \
                 (rdma-core): apt install libibverbs1 ibverbs-providers"
            ),
            Self::NoKernelSupport { errno, missing } => {
                write!(f, "the kernel has no RDMA verbs support")?;
                match errno {
                    Some(n) => write!(f, " (listing RDMA devices failed: {})", errno_text(Some(*n)))?,
                    None => write!(f, " (libibverbs lists no devices)")?,
                }
                if !missing.is_empty() {
                    write!(f, "; missing: {}", missing.join(", "))?;
                }
                write!(
                    f,
                    "; load the kernel modules: modprobe ib_uverbs and an RDMA driver, \
                     or for Soft-RoCE over Ethernet: {SOFT_ROCE}"
                )
            }
            Self::NotSupported { during } => write!(
                f,
                "{during}: operation not supported (EOPNOTSUPP) by libibverbs or the RDMA driver; \
                 check that rdma-core matches the kernel and that ibverbs-providers has a provider for this device"
            ),
            Self::NoDevices { uverbs_loaded } => {
                write!(f, "no RDMA devices found")?;
                if !uverbs_loaded {
                    write!(f, " (ib_uverbs is not loaded: modprobe ib_uverbs)")?;
                }
                write!(f, "; to create a Soft-RoCE device over an Ethernet interface: {SOFT_ROCE}")
            }
            Self::DeviceNotFound { name, present } => {
                write!(f, "RDMA device {name:?} not found; devices present: ")?;
                if present.is_empty() {
                    write!(f, "none")
                } else {
                    write!(f, "{}", present.join(", "))
                }
            }
            Self::BadGidIndex { device, port, index, table_len, reason } => {
                write!(f, "bad GID index {index} for {device} port {port}: ")?;
                match reason {
                    Some(r) => write!(f, "{r}"),
                    None => write!(f, "the GID table has {table_len} entries (valid indices 0 to {})", {
                        table_len.saturating_sub(1)
                    }),
                }?;
                write!(f, "; list the populated entries with: txbed devices")
            }
            Self::Os { during, device, errno } => {
                write!(f, "{during}")?;
                if let Some(d) = device {
                    write!(f, " ({d})")?;
                }
                write!(f, " failed: {}", errno_text(*errno))
            }
        }
    }
}

impl std::error::Error for VerbsError {}

/// Classify a failure of `ibv_get_device_list` (NULL return, `errno`) with the machine's evidence.
///
/// rdma-mummy-sys reports a libibverbs that failed to load as EOPNOTSUPP, so the loader's verdict
/// goes first; ENOSYS is what libibverbs says when the kernel has no uverbs ABI.
pub fn classify_list_error(errno: Option<i32>, ev: &Evidence) -> VerbsError {
    if let Err(detail) = &ev.library {
        return VerbsError::LibraryMissing { detail: detail.clone() };
    }
    match errno {
        Some(ENOSYS) => VerbsError::NoKernelSupport { errno, missing: ev.missing() },
        Some(EOPNOTSUPP) => VerbsError::NotSupported { during: "listing RDMA devices" },
        _ if ev.no_kernel_verbs() => VerbsError::NoKernelSupport { errno, missing: ev.missing() },
        _ => VerbsError::Os { during: "listing RDMA devices", device: None, errno },
    }
}

/// Classify an empty device list.
pub fn classify_empty_list(ev: &Evidence) -> VerbsError {
    if !ev.sys_infiniband && !ev.sys_uverbs && !ev.dev_infiniband {
        VerbsError::NoKernelSupport { errno: None, missing: ev.missing() }
    } else {
        VerbsError::NoDevices { uverbs_loaded: ev.sys_uverbs }
    }
}

/// Classify a failing verbs call after the device list was obtained.
pub fn classify_call_error(during: &'static str, device: &str, errno: Option<i32>) -> VerbsError {
    match errno {
        Some(EOPNOTSUPP) => VerbsError::NotSupported { during },
        _ => VerbsError::Os { during, device: Some(device.to_string()), errno },
    }
}

/// Check a requested GID index against the port's table.
pub fn check_gid_index(device: &str, port: u8, index: u32, table_len: u32) -> Result<(), VerbsError> {
    if index >= table_len {
        return Err(VerbsError::BadGidIndex { device: device.to_string(), port, index, table_len, reason: None });
    }
    Ok(())
}

/// The default GID: the first RoCE v2 IPv4-mapped entry, else index 0.
pub fn default_gid_index(entries: &[GidEntry]) -> u32 {
    entries.iter().find(|e| e.kind == GidKind::RoceV2 && e.ipv4().is_some()).map_or(0, |e| e.index)
}

fn mtu_bytes(raw: u32) -> u32 {
    match raw {
        1..=5 => 128 << raw,
        _ => 0,
    }
}

struct Port {
    state: PortState,
    link_layer: LinkLayer,
    active_mtu: u32,
    lid: u16,
    gid_table_len: u32,
}

fn list_devices() -> Result<DeviceList, VerbsError> {
    match DeviceList::new() {
        Ok(l) => {
            if l.is_empty() {
                Err(classify_empty_list(&Evidence::gather()))
            } else {
                Ok(l)
            }
        }
        Err(e) => {
            let errno = match &e.0 {
                GetDeviceListErrorKind::Ibverbs(io) => io.raw_os_error(),
                _ => None,
            };
            Err(classify_list_error(errno, &Evidence::gather()))
        }
    }
}

fn device_names(list: &DeviceList) -> Vec<String> {
    list.iter().map(|d| d.name()).collect()
}

fn open(list: &DeviceList, index: usize, name: &str) -> Result<std::sync::Arc<DeviceContext>, VerbsError> {
    let dev = list
        .get(index)
        .ok_or_else(|| VerbsError::DeviceNotFound { name: name.to_string(), present: device_names(list) })?;
    dev.open().map_err(|e| {
        let errno = match &e.0 {
            OpenDeviceErrorKind::Ibverbs(io) => io.raw_os_error(),
            _ => None,
        };
        classify_call_error("opening the device", name, errno)
    })
}

fn query_port(ctx: &DeviceContext, name: &str, port: u8) -> Result<Port, VerbsError> {
    let p = ctx.query_port(port).map_err(|e| {
        let errno = match &e.source {
            QueryPortErrorKind::Ibverbs(io) => io.raw_os_error(),
            _ => None,
        };
        classify_call_error("querying port attributes", name, errno)
    })?;
    let a = &p.attr;
    Ok(Port {
        state: PortState::from_raw(a.state as u32),
        link_layer: LinkLayer::from_raw(a.link_layer),
        active_mtu: mtu_bytes(a.active_mtu as u32),
        lid: a.lid,
        gid_table_len: u32::try_from(a.gid_tbl_len).unwrap_or(0),
    })
}

/// Read one GID entry; `Ok(None)` for an empty (all-zero) entry.
fn query_gid(
    ctx: &DeviceContext,
    name: &str,
    port: u8,
    index: u32,
    link: LinkLayer,
) -> Result<Option<GidEntry>, VerbsError> {
    let gid = ctx.query_gid(port, index).map_err(|e| {
        let errno = match &e.source {
            QueryGidErrorKind::Ibverbs(io) => io.raw_os_error(),
            _ => None,
        };
        classify_call_error("querying a GID", name, errno)
    })?;
    let addr = Ipv6Addr::from(gid);
    if addr.is_unspecified() {
        return Ok(None);
    }
    let kind = GidKind::from_sysfs(ctx.query_gid_type(port, index).ok(), link);
    Ok(Some(GidEntry { index, gid: addr, kind }))
}

/// The populated GID entries of a port (entries that fail to read are skipped: on RoCE, unused
/// slots of the table may answer with an error rather than zeros).
fn gid_table(ctx: &DeviceContext, name: &str, port: u8, p: &Port) -> Vec<GidEntry> {
    (0..p.gid_table_len).filter_map(|i| query_gid(ctx, name, port, i, p.link_layer).ok().flatten()).collect()
}

/// Open `device` (or the first device), read port 1 and the chosen GID.
///
/// `gid_index`: `None` picks the first RoCE v2 IPv4-mapped GID if there is one, else index 0.
pub fn probe(device: Option<&str>, gid_index: Option<u32>) -> Result<DeviceInfo, VerbsError> {
    let list = list_devices()?;
    let names = device_names(&list);
    let index = match device {
        None => 0,
        Some(want) => names
            .iter()
            .position(|n| n == want)
            .ok_or_else(|| VerbsError::DeviceNotFound { name: want.to_string(), present: names.clone() })?,
    };
    let name = names[index].clone();
    let ctx = open(&list, index, &name)?;
    let p = query_port(&ctx, &name, PORT)?;
    let entry = match gid_index {
        Some(i) => {
            check_gid_index(&name, PORT, i, p.gid_table_len)?;
            let bad = |reason: String| VerbsError::BadGidIndex {
                device: name.clone(),
                port: PORT,
                index: i,
                table_len: p.gid_table_len,
                reason: Some(reason),
            };
            match query_gid(&ctx, &name, PORT, i, p.link_layer) {
                Ok(Some(e)) => e,
                Ok(None) => return Err(bad("the entry is empty (no address is assigned to it)".into())),
                Err(e) => return Err(bad(format!("the entry cannot be read ({e})"))),
            }
        }
        None => {
            let table = gid_table(&ctx, &name, PORT, &p);
            let i = default_gid_index(&table);
            match table.into_iter().find(|e| e.index == i) {
                Some(e) => e,
                None => {
                    return Err(VerbsError::BadGidIndex {
                        device: name.clone(),
                        port: PORT,
                        index: i,
                        table_len: p.gid_table_len,
                        reason: Some(
                            "the port has no populated GID entry (is the interface up with an address?)".into(),
                        ),
                    })
                }
            }
        }
    };
    Ok(DeviceInfo {
        name,
        port: PORT,
        state: p.state,
        link_layer: p.link_layer,
        active_mtu: p.active_mtu,
        lid: p.lid,
        gid_table_len: p.gid_table_len,
        gid: entry,
    })
}

/// A text listing of every device, its ports and populated GIDs (for `txbed devices`).
pub fn describe_devices() -> Result<String, VerbsError> {
    use std::fmt::Write as _;
    let list = list_devices()?;
    let mut out = String::new();
    for (i, name) in device_names(&list).into_iter().enumerate() {
        let _ = writeln!(out, "{name}");
        let ctx = match open(&list, i, &name) {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(out, "  cannot open: {e}");
                continue;
            }
        };
        let ports = match ctx.query_device() {
            Ok(a) => a.phys_port_cnt(),
            Err(_) => 1,
        };
        for port in 1..=ports {
            match query_port(&ctx, &name, port) {
                Ok(p) => {
                    let _ = writeln!(
                        out,
                        "  port {port}: state {}, link layer {}, active MTU {}, LID {}, {} GID entries",
                        p.state, p.link_layer, p.active_mtu, p.lid, p.gid_table_len
                    );
                    let table = gid_table(&ctx, &name, port, &p);
                    if table.is_empty() {
                        let _ = writeln!(out, "    no populated GID entries");
                    }
                    let default = default_gid_index(&table);
                    for e in &table {
                        let mark = if port == PORT && e.index == default { "  (default)" } else { "" };
                        let _ = writeln!(out, "    {e}{mark}");
                    }
                }
                Err(e) => {
                    let _ = writeln!(out, "  port {port}: {e}");
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_rdma() -> Evidence {
        Evidence { library: Ok(()), sys_infiniband: false, sys_uverbs: false, dev_infiniband: false }
    }

    fn rdma() -> Evidence {
        Evidence { library: Ok(()), sys_infiniband: true, sys_uverbs: true, dev_infiniband: true }
    }

    #[test]
    fn missing_library_wins_over_the_wrappers_eopnotsupp() {
        let ev = Evidence { library: Err("libibverbs.so.1: cannot open shared object file".into()), ..no_rdma() };
        let e = classify_list_error(Some(EOPNOTSUPP), &ev);
        assert!(matches!(e, VerbsError::LibraryMissing { .. }), "{e:?}");
        let m = e.to_string();
        assert!(m.contains("libibverbs could not be loaded"), "{m}");
        assert!(m.contains("apt install libibverbs1 ibverbs-providers"), "{m}");
        assert!(m.contains("cannot open shared object file"), "{m}");
    }

    #[test]
    fn enosys_means_no_kernel_support() {
        let e = classify_list_error(Some(ENOSYS), &no_rdma());
        assert!(matches!(e, VerbsError::NoKernelSupport { errno: Some(ENOSYS), .. }), "{e:?}");
        let m = e.to_string();
        assert!(m.contains("the kernel has no RDMA verbs support"), "{m}");
        assert!(m.contains("Function not implemented"), "{m}");
        assert!(m.contains("modprobe ib_uverbs"), "{m}");
        assert!(m.contains("rdma_rxe"), "{m}");
        assert!(m.contains("/sys/class/infiniband_verbs"), "{m}");
        // ENOSYS is decisive even if sysfs looks populated.
        assert!(matches!(classify_list_error(Some(ENOSYS), &rdma()), VerbsError::NoKernelSupport { .. }));
    }

    #[test]
    fn eopnotsupp_with_a_loadable_library_is_not_supported() {
        let e = classify_list_error(Some(EOPNOTSUPP), &rdma());
        assert_eq!(e, VerbsError::NotSupported { during: "listing RDMA devices" });
        assert!(e.to_string().contains("EOPNOTSUPP"));
        let e = classify_call_error("querying port attributes", "rxe0", Some(EOPNOTSUPP));
        assert!(matches!(e, VerbsError::NotSupported { .. }));
    }

    #[test]
    fn other_errnos_use_sysfs_evidence() {
        let e = classify_list_error(Some(libc::ENOENT), &no_rdma());
        assert!(matches!(e, VerbsError::NoKernelSupport { .. }), "{e:?}");
        let e = classify_list_error(Some(libc::ENOMEM), &rdma());
        assert!(matches!(e, VerbsError::Os { errno: Some(libc::ENOMEM), .. }), "{e:?}");
        assert!(e.to_string().contains("listing RDMA devices failed"));
    }

    #[test]
    fn empty_list() {
        let e = classify_empty_list(&rdma());
        assert_eq!(e, VerbsError::NoDevices { uverbs_loaded: true });
        let m = e.to_string();
        assert!(m.contains("no RDMA devices found"), "{m}");
        assert!(m.contains("rdma link add rxe0 type rxe netdev"), "{m}");
        assert!(!m.contains("modprobe ib_uverbs"), "{m}");
        let ib_core_only = Evidence { sys_infiniband: true, ..no_rdma() };
        assert!(classify_empty_list(&ib_core_only).to_string().contains("modprobe ib_uverbs"));
        assert!(matches!(classify_empty_list(&no_rdma()), VerbsError::NoKernelSupport { errno: None, .. }));
    }

    #[test]
    fn device_not_found_lists_names() {
        let e = VerbsError::DeviceNotFound { name: "mlx5_9".into(), present: vec!["mlx5_0".into(), "rxe0".into()] };
        assert_eq!(e.to_string(), "RDMA device \"mlx5_9\" not found; devices present: mlx5_0, rxe0");
    }

    #[test]
    fn gid_index_checks() {
        assert!(check_gid_index("rxe0", 1, 3, 4).is_ok());
        let e = check_gid_index("rxe0", 1, 4, 4).unwrap_err();
        assert!(e.to_string().contains("bad GID index 4 for rxe0 port 1"), "{e}");
        assert!(e.to_string().contains("valid indices 0 to 3"), "{e}");
        let e = check_gid_index("rxe0", 1, 0, 0).unwrap_err();
        assert!(e.to_string().contains("0 entries"), "{e}");
    }

    #[test]
    fn default_gid_prefers_roce_v2_ipv4() {
        let link_local: Ipv6Addr = "fe80::1".parse().unwrap();
        let v4: Ipv6Addr = "::ffff:10.0.0.1".parse().unwrap();
        let e = |index, gid, kind| GidEntry { index, gid, kind };
        let t = [
            e(0, link_local, GidKind::RoceV1),
            e(1, link_local, GidKind::RoceV2),
            e(2, v4, GidKind::RoceV1),
            e(3, v4, GidKind::RoceV2),
        ];
        assert_eq!(default_gid_index(&t), 3);
        assert_eq!(default_gid_index(&t[..3]), 0);
        assert_eq!(default_gid_index(&[]), 0);
        assert_eq!(t[3].to_string(), "gid[3] ::ffff:10.0.0.1 (RoCE v2, IPv4 10.0.0.1)");
    }

    #[test]
    fn raw_values_never_panic() {
        assert_eq!(PortState::from_raw(4), PortState::Active);
        assert_eq!(PortState::from_raw(99), PortState::Unknown(99));
        assert_eq!(LinkLayer::from_raw(2), LinkLayer::Ethernet);
        assert_eq!(LinkLayer::from_raw(7).to_string(), "unknown (7)");
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(mtu_bytes(1), 256);
        assert_eq!(mtu_bytes(9), 0);
        assert_eq!(GidKind::from_sysfs(Some(0), LinkLayer::InfiniBand), GidKind::InfiniBand);
        assert_eq!(GidKind::from_sysfs(Some(0), LinkLayer::Ethernet), GidKind::RoceV1);
        assert_eq!(GidKind::from_sysfs(None, LinkLayer::Ethernet), GidKind::Unknown);
    }

    /// On this machine, whatever it has, probing must return (not panic).
    #[test]
    fn probe_returns_on_this_machine() {
        match probe(None, None) {
            Ok(info) => assert!(!info.name.is_empty()),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
