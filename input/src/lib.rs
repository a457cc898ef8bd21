//! Reading the files a user names (scenarios, sweeps, NIC profiles, reports, result CSVs).
//!
//! Only regular files are read, and at most a limit of bytes: a FIFO named as a scenario would
//! block a command forever, and `/dev/zero` named as a NIC profile once grew the process until
//! the kernel's OOM killer ended it. Hand-written on `std` because it is a dozen lines and no
//! crate offers exactly this check.

use std::fmt;
use std::io::Read;
use std::path::Path;

/// The limit for configuration files (scenarios, sweeps, NIC profiles): far above any real
/// one (the largest shipped file is a few KiB).
pub const CONFIG_LIMIT: u64 = 4 << 20;
/// The limit for a run's outputs read back (report.json, results.csv).
pub const RESULTS_LIMIT: u64 = 256 << 20;

/// Why a file could not be read, naming it and what it was meant to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError(pub String);

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// What a non-regular file is, for the message.
fn kind(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Reads `path`, a `what` (e.g. "scenario"), as UTF-8 text of at most `limit` bytes.
pub fn read_text(path: &Path, what: &str, limit: u64) -> Result<String, InputError> {
    let bytes = read_bytes(path, what, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        InputError(format!("{}: {what} is not UTF-8 text (invalid byte at offset {at})", path.display()))
    })
}

/// Reads `path`, a `what`, as at most `limit` bytes (a CSV, which the csv crate checks itself).
pub fn read_bytes(path: &Path, what: &str, limit: u64) -> Result<Vec<u8>, InputError> {
    let shown = path.display();
    let cannot = |e: std::io::Error| InputError(format!("{shown}: cannot read {what}: {e}"));
    let meta = std::fs::metadata(path).map_err(cannot)?;
    if !meta.is_file() {
        let k = kind(meta.file_type());
        return Err(InputError(format!("{shown}: cannot read {what}: it is {k}, not a regular file")));
    }
    let too_big = |n: u64| InputError(format!("{shown}: {what} is {n} bytes, more than the {limit} a {what} may have"));
    if meta.len() > limit {
        return Err(too_big(meta.len()));
    }
    let file = std::fs::File::open(path).map_err(cannot)?;
    // The file may grow between the check and the read: read one byte past the limit at most.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        // One directory per test, replaced by the next run: a name per process left one
        // behind per run.
        let d = std::env::temp_dir().join(format!("txbed-input-unit-{name}"));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_regular_file_within_the_limit_is_read() {
        let d = scratch("ok");
        let f = d.join("a.ron");
        std::fs::write(&f, "Scenario()").unwrap();
        assert_eq!(read_text(&f, "scenario", 100).unwrap(), "Scenario()");
        assert_eq!(read_bytes(&f, "CSV", 100).unwrap(), b"Scenario()");
    }

    #[test]
    fn too_large_directories_devices_and_missing_files_are_refused() {
        let d = scratch("bad");
        let f = d.join("big.ron");
        std::fs::write(&f, vec![b'x'; 101]).unwrap();
        let e = read_text(&f, "scenario", 100).unwrap_err().0;
        assert!(e.contains("101 bytes") && e.contains("more than the 100"), "{e}");
        assert!(read_bytes(&f, "CSV", 100).unwrap_err().0.contains("more than the 100"));
        let e = read_text(&d, "scenario", 100).unwrap_err().0;
        assert!(e.contains("a directory"), "{e}");
        let e = read_text(&d.join("none.ron"), "scenario", 100).unwrap_err().0;
        assert!(e.contains("cannot read scenario"), "{e}");
        #[cfg(unix)]
        {
            let e = read_text(Path::new("/dev/zero"), "NIC profile", 100).unwrap_err().0;
            assert!(e.contains("a character device"), "{e}");
        }
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_text(&f, "scenario", 100).unwrap_err().0.contains("not UTF-8"));
    }

    /// A FIFO is refused before it is opened: opening one with no writer would block.
    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = scratch("fifo");
        let f = d.join("pipe.ron");
        let made = std::process::Command::new("mkfifo").arg(&f).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("mkfifo is not available: skipped");
            return;
        }
        let e = read_text(&f, "scenario", 100).unwrap_err().0;
        assert!(e.contains("a FIFO"), "{e}");
    }
}
