//! `walnut test-fsync`: how fast the disk under a directory makes WAL flushes durable, for each
//! `wal_sync_method`, buffered and with O_DIRECT — walnut's `pg_test_fsync`.
//!
//! Each combination runs [`walnut_wal::probe`] for the same time and write size, one after
//! another, and prints one row as soon as it finishes. After `fdatasync` comes
//! `fdatasync+range`, the `wal_sync_range` path (write-back of the written range, then a device
//! cache flush), where the file system offers it. A combination the file system cannot do
//! (O_DIRECT on tmpfs, the range path off ext4) prints `n/a` with the reason; any other I/O
//! error stops the run. The last lines name the method [`walnut_wal::choose_sync_method`]
//! picks from the buffered rows and from the direct rows (`io_direct = wal`), as the server's
//! start-up probe would.
//!
//! The `req/flush` column is the disk's own count of completed write and flush requests
//! (`/sys/dev/block/MAJ:MIN/stat`, fields 5 and 15) during the row, divided by its flushes:
//! device-wide, so other activity on the disk inflates it, and `-` where the counters cannot be
//! read. `--interval-us` pauses between flushes (untimed), as a paced workload does; on ext4
//! without a journal that exposes the inode write `fdatasync` adds whenever the clock ticked
//! since the previous flush, which back-to-back flushes mostly hide.
//!
//! The probe writes and removes one temporary file in the directory; it never touches anything
//! else there, so the directory may be a data directory or any other.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use walnut_wal::{ProbeResult, ProbeSpec, SyncMethod, WAL_SEGMENT_SIZE};

/// Largest `--size`, bytes: one WAL segment (a flush never writes more).
pub const SIZE_BYTES_MAX: usize = WAL_SEGMENT_SIZE as usize;

/// Largest `--interval-us`, µs (one second).
pub const INTERVAL_US_MAX: u64 = 1_000_000;

/// What `walnut test-fsync` measures.
#[derive(Clone, Debug)]
pub struct Options {
    /// Directory on the disk to measure.
    pub dir: PathBuf,
    /// Seconds per combination; positive and finite.
    pub seconds: f64,
    /// Bytes written per flush, 1 ..= [`SIZE_BYTES_MAX`].
    pub size: usize,
    /// Untimed pause after each flush, µs, 0 ..= [`INTERVAL_US_MAX`].
    pub interval_us: u64,
}

/// Runs every combination and prints the table and the chosen methods to stdout.
///
/// # Errors
/// A message if `seconds` is not a positive finite number, `size` is 0 or above
/// [`SIZE_BYTES_MAX`], `interval_us` is above [`INTERVAL_US_MAX`], `dir` is not a directory,
/// or a probe fails other than for lack of support (e.g. permission denied, disk full, an fsync
/// error).
pub fn run(opts: &Options) -> Result<(), String> {
    run_to(&mut io::stdout().lock(), opts)
}

/// One row to measure: a method, and for `fdatasync` the range path too.
fn rows() -> Vec<(SyncMethod, bool)> {
    let mut v = Vec::new();
    for m in SyncMethod::ALL {
        v.push((m, false));
        if m == SyncMethod::Fdatasync {
            v.push((m, true));
        }
    }
    v
}

/// [`run`], printing to `out`.
fn run_to(out: &mut dyn Write, opts: &Options) -> Result<(), String> {
    let (duration, interval) = check_args(opts)?;
    let dir = opts.dir.as_path();
    let print_err = |e: io::Error| format!("could not write output: {e}");
    let pacing = if interval.is_zero() {
        "back to back".to_string()
    } else {
        format!("{} µs apart", opts.interval_us)
    };
    writeln!(
        out,
        "{} s per test, {}-byte writes (direct: rounded up to 4096), flushes {pacing}, in \"{}\"",
        opts.seconds,
        opts.size,
        dir.display()
    )
    .map_err(print_err)?;
    writeln!(
        out,
        "direct = O_DIRECT, as with io_direct = wal; +range = wal_sync_range (write-back, then a disk cache flush)"
    )
    .map_err(print_err)?;
    writeln!(
        out,
        "req/flush = the disk's completed write + flush requests per flush (device-wide)\n"
    )
    .map_err(print_err)?;
    writeln!(out, "{}", header()).map_err(print_err)?;
    let disk = DiskStat::for_dir(dir);
    let mut buffered = Vec::new();
    let mut direct = Vec::new();
    for is_direct in [false, true] {
        for (method, range) in rows() {
            let spec = ProbeSpec {
                method,
                direct: is_direct,
                range,
                write_bytes: opts.size,
                duration,
                interval,
            };
            let before = disk.as_ref().and_then(DiskStat::requests);
            let probed = walnut_wal::probe(&walnut_io::RealVfs, dir, &spec);
            let after = disk.as_ref().and_then(DiskStat::requests);
            match probed {
                Ok(r) => {
                    let per = match (before, after) {
                        (Some(b), Some(a)) if r.flushes > 0 => {
                            Some(a.saturating_sub(b) as f64 / r.flushes as f64)
                        }
                        _ => None,
                    };
                    writeln!(out, "{}", row(&r, per)).map_err(print_err)?;
                    if is_direct {
                        &mut direct
                    } else {
                        &mut buffered
                    }
                    .push(r);
                }
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    writeln!(out, "{}", row_unsupported(method, range, is_direct, &e))
                        .map_err(print_err)?;
                }
                Err(e) => {
                    return Err(format!(
                        "{} ({}) failed in \"{}\": {e}",
                        label(method, range),
                        io_name(is_direct),
                        dir.display()
                    ));
                }
            }
        }
    }
    writeln!(out).map_err(print_err)?;
    writeln!(out, "{}", choice_line("buffered", &buffered)).map_err(print_err)?;
    writeln!(out, "{}", choice_line("io_direct = wal", &direct)).map_err(print_err)?;
    Ok(())
}

/// Validates the arguments; returns the time per test and the pause between flushes.
fn check_args(opts: &Options) -> Result<(Duration, Duration), String> {
    let seconds = opts.seconds;
    let duration = Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("--seconds must be a positive number, not {seconds}"))?;
    if opts.size == 0 || opts.size > SIZE_BYTES_MAX {
        return Err(format!(
            "--size must be between 1 and {SIZE_BYTES_MAX} bytes, not {}",
            opts.size
        ));
    }
    if opts.interval_us > INTERVAL_US_MAX {
        return Err(format!(
            "--interval-us must be between 0 and {INTERVAL_US_MAX}, not {}",
            opts.interval_us
        ));
    }
    match std::fs::metadata(&opts.dir) {
        Ok(m) if m.is_dir() => Ok((duration, Duration::from_micros(opts.interval_us))),
        Ok(_) => Err(format!("\"{}\" is not a directory", opts.dir.display())),
        Err(e) => Err(format!("could not access \"{}\": {e}", opts.dir.display())),
    }
}

/// The block device statistics of the disk that holds a directory.
pub(crate) struct DiskStat {
    path: PathBuf,
}

impl DiskStat {
    /// `/sys/dev/block/MAJ:MIN/stat` of `dir`'s device, if it exists.
    pub(crate) fn for_dir(dir: &Path) -> Option<DiskStat> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).ok()?.dev();
        let path = PathBuf::from(format!(
            "/sys/dev/block/{}:{}/stat",
            rustix::fs::major(dev),
            rustix::fs::minor(dev)
        ));
        path.exists().then_some(DiskStat { path })
    }

    /// Completed write requests plus completed flush requests so far.
    pub(crate) fn requests(&self) -> Option<u64> {
        parse_requests(&std::fs::read_to_string(&self.path).ok()?)
    }
}

/// Writes completed (field 5) plus flushes completed (field 15, 0 on kernels before 5.5) from
/// a block device `stat` line (Documentation/block/stat.rst); `None` if malformed.
fn parse_requests(stat: &str) -> Option<u64> {
    let f: Vec<u64> = stat
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    Some(f.get(4)? + f.get(14).copied().unwrap_or(0))
}

/// `buffered` or `direct`.
fn io_name(direct: bool) -> &'static str {
    if direct {
        "direct"
    } else {
        "buffered"
    }
}

/// The method column: the method's name, `+range` for the `wal_sync_range` path.
fn label(method: SyncMethod, range: bool) -> String {
    if range {
        format!("{}+range", method.name())
    } else {
        method.name().to_string()
    }
}

/// The column titles, aligned with [`row`].
fn header() -> String {
    format!(
        "{:<15}  {:<8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>9}",
        "method", "I/O", "flushes/s", "mean µs", "p50 µs", "p99 µs", "req/flush"
    )
}

/// One measured combination, with the disk's requests per flush if known.
fn row(r: &ProbeResult, per_flush: Option<f64>) -> String {
    let per = per_flush.map_or_else(|| "-".to_string(), |p| format!("{p:.2}"));
    format!(
        "{:<15}  {:<8}  {:>10.1}  {:>10.1}  {:>10.1}  {:>10.1}  {:>9}",
        label(r.method, r.range),
        io_name(r.direct),
        r.flushes_per_sec,
        r.mean_us,
        r.p50_us,
        r.p99_us,
        per
    )
}

/// One combination the file system cannot do, with the reason.
fn row_unsupported(method: SyncMethod, range: bool, direct: bool, e: &io::Error) -> String {
    format!(
        "{:<15}  {:<8}  {:>10}  ({e})",
        label(method, range),
        io_name(direct),
        "n/a"
    )
}

/// The line naming the method walnut would choose from `results`: the range row stands for
/// `fdatasync` where it was measured, as in the server's start-up probe.
fn choice_line(mode: &str, results: &[ProbeResult]) -> String {
    let has_range = results.iter().any(|r| r.range);
    let candidates: Vec<ProbeResult> = results
        .iter()
        .filter(|r| !(has_range && r.method == SyncMethod::Fdatasync && !r.range))
        .cloned()
        .collect();
    match walnut_wal::choose_sync_method(&candidates) {
        Some(m) => {
            let range = if has_range && m == SyncMethod::Fdatasync {
                " (with wal_sync_range)"
            } else {
                ""
            };
            format!("walnut would choose ({mode}): wal_sync_method = {m}{range}")
        }
        None => format!("walnut would choose ({mode}): none (no method could be measured)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_align_with_header() {
        let r = ProbeResult {
            range: false,
            method: SyncMethod::OpenDatasync,
            direct: true,
            flushes_per_sec: 1234.56,
            mean_us: 810.0,
            p50_us: 799.5,
            p99_us: 2047.9,
            max_us: 3000.0,
            flushes: 2469,
            write_bytes: 8192,
        };
        let line = row(&r, Some(2.0));
        assert_eq!(line.chars().count(), header().chars().count());
        assert!(line.starts_with("open_datasync    direct"), "{line}");
        assert!(line.contains("1234.6") && line.contains("2047.9") && line.ends_with(" 2.00"));
        assert!(row(&r, None).ends_with(" -"));
        let range = ProbeResult {
            range: true,
            method: SyncMethod::Fdatasync,
            ..r
        };
        assert!(row(&range, None).starts_with("fdatasync+range  direct"));
        let e = io::Error::new(io::ErrorKind::Unsupported, "no O_DIRECT here");
        let na = row_unsupported(SyncMethod::Fsync, false, true, &e);
        assert!(na.starts_with("fsync            direct"), "{na}");
        assert!(na.contains("n/a") && na.ends_with("(no O_DIRECT here)"));
    }

    fn opts(dir: &Path, seconds: f64, size: usize, interval_us: u64) -> Options {
        Options {
            dir: dir.to_path_buf(),
            seconds,
            size,
            interval_us,
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for seconds in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(check_args(&opts(d, seconds, 8192, 0)).is_err(), "{seconds}");
        }
        assert!(check_args(&opts(d, 1.0, 0, 0)).is_err());
        assert!(check_args(&opts(d, 1.0, SIZE_BYTES_MAX + 1, 0)).is_err());
        assert!(check_args(&opts(d, 1.0, 8192, INTERVAL_US_MAX + 1)).is_err());
        assert!(check_args(&opts(&d.join("missing"), 1.0, 8192, 0)).is_err());
        let file = d.join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(check_args(&opts(&file, 1.0, 8192, 0)).is_err());
        assert_eq!(
            check_args(&opts(d, 0.25, 8192, 500)),
            Ok((Duration::from_millis(250), Duration::from_micros(500)))
        );
    }

    #[test]
    fn disk_stat_lines_parse() {
        // 17 fields (Linux 5.5+): writes completed = 2000, flushes completed = 300.
        let line = "  100 0 800 5 2000 10 16000 7 0 9 12 0 0 0 300 4 0\n";
        assert_eq!(parse_requests(line), Some(2300));
        // 11 fields (older kernels): no flush counter.
        assert_eq!(parse_requests("1 2 3 4 50 6 7 8 9 10 11"), Some(50));
        assert_eq!(parse_requests("1 2 3"), None);
        assert_eq!(parse_requests("a b c d e"), None);
    }

    #[test]
    fn run_prints_every_method_and_a_choice() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        run_to(&mut out, &opts(dir.path(), 0.02, 8192, 0)).unwrap();
        let text = String::from_utf8(out).unwrap();
        for (method, range) in rows() {
            for io in ["buffered", "direct"] {
                let prefix = format!("{:<15}  {io}", label(method, range));
                assert!(
                    text.lines().any(|l| l.starts_with(&prefix)),
                    "{prefix}\n{text}"
                );
            }
        }
        assert!(text.contains("walnut would choose (buffered): wal_sync_method = "));
        assert!(text.contains("walnut would choose (io_direct = wal): "));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
