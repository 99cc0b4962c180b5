//! `walnut test-fsync`: how fast the disk under a directory makes WAL flushes durable, for each
//! `wal_sync_method`, buffered and with O_DIRECT — walnut's `pg_test_fsync`.
//!
//! Each of the eight combinations runs [`walnut_wal::probe_flush_rate`] for the same time and
//! write size, one after another, and prints one row as soon as it finishes. A combination the
//! file system cannot do (O_DIRECT on tmpfs) prints `n/a` with the reason; any other I/O error
//! stops the run. The last lines name the method [`walnut_wal::choose_sync_method`] picks from
//! the buffered rows and from the direct rows (`io_direct = wal`).
//!
//! The probe writes and removes one temporary file in the directory; it never touches anything
//! else there, so the directory may be a data directory or any other.

use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;
use walnut_wal::{ProbeResult, SyncMethod, WAL_SEGMENT_SIZE};

/// Largest `--size`, bytes: one WAL segment (a flush never writes more).
pub const SIZE_BYTES_MAX: usize = WAL_SEGMENT_SIZE as usize;

/// Runs every method buffered and direct for `seconds` each, writing `size` bytes per flush to a
/// temporary file in `dir`, and prints the table and the chosen methods to stdout.
///
/// # Errors
/// A message if `seconds` is not a positive finite number, `size` is 0 or above
/// [`SIZE_BYTES_MAX`], `dir` is not a directory, or a probe fails other than for lack of
/// O_DIRECT support (e.g. permission denied, disk full, an fsync error).
pub fn run(dir: &Path, seconds: f64, size: usize) -> Result<(), String> {
    run_to(&mut io::stdout().lock(), dir, seconds, size)
}

/// [`run`], printing to `out`.
fn run_to(out: &mut dyn Write, dir: &Path, seconds: f64, size: usize) -> Result<(), String> {
    let duration = check_args(dir, seconds, size)?;
    let print_err = |e: io::Error| format!("could not write output: {e}");
    writeln!(
        out,
        "{seconds} s per test, {size}-byte writes (direct: rounded up to 4096), in \"{}\"",
        dir.display()
    )
    .map_err(print_err)?;
    writeln!(out, "direct = O_DIRECT, as with io_direct = wal\n").map_err(print_err)?;
    writeln!(out, "{}", header()).map_err(print_err)?;
    let mut buffered = Vec::new();
    let mut direct = Vec::new();
    for is_direct in [false, true] {
        for method in SyncMethod::ALL {
            let probed = walnut_wal::probe_flush_rate(
                &walnut_io::RealVfs,
                dir,
                method,
                is_direct,
                size,
                duration,
            );
            match probed {
                Ok(r) => {
                    writeln!(out, "{}", row(&r)).map_err(print_err)?;
                    if is_direct {
                        &mut direct
                    } else {
                        &mut buffered
                    }
                    .push(r);
                }
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    writeln!(out, "{}", row_unsupported(method, is_direct, &e))
                        .map_err(print_err)?;
                }
                Err(e) => {
                    return Err(format!(
                        "{method} ({}) failed in \"{}\": {e}",
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

/// Validates the arguments; returns the time per test.
fn check_args(dir: &Path, seconds: f64, size: usize) -> Result<Duration, String> {
    let duration = Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("--seconds must be a positive number, not {seconds}"))?;
    if size == 0 || size > SIZE_BYTES_MAX {
        return Err(format!(
            "--size must be between 1 and {SIZE_BYTES_MAX} bytes, not {size}"
        ));
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(duration),
        Ok(_) => Err(format!("\"{}\" is not a directory", dir.display())),
        Err(e) => Err(format!("could not access \"{}\": {e}", dir.display())),
    }
}

/// `buffered` or `direct`.
fn io_name(direct: bool) -> &'static str {
    if direct {
        "direct"
    } else {
        "buffered"
    }
}

/// The column titles, aligned with [`row`].
fn header() -> String {
    format!(
        "{:<13}  {:<8}  {:>10}  {:>10}  {:>10}  {:>10}",
        "method", "I/O", "flushes/s", "mean µs", "p50 µs", "p99 µs"
    )
}

/// One measured combination.
fn row(r: &ProbeResult) -> String {
    format!(
        "{:<13}  {:<8}  {:>10.1}  {:>10.1}  {:>10.1}  {:>10.1}",
        r.method.name(),
        io_name(r.direct),
        r.flushes_per_sec,
        r.mean_us,
        r.p50_us,
        r.p99_us
    )
}

/// One combination the file system cannot do, with the reason.
fn row_unsupported(method: SyncMethod, direct: bool, e: &io::Error) -> String {
    format!(
        "{:<13}  {:<8}  {:>10}  ({e})",
        method.name(),
        io_name(direct),
        "n/a"
    )
}

/// The line naming the method walnut would choose from `results`.
fn choice_line(mode: &str, results: &[ProbeResult]) -> String {
    match walnut_wal::choose_sync_method(results) {
        Some(m) => format!("walnut would choose ({mode}): wal_sync_method = {m}"),
        None => format!("walnut would choose ({mode}): none (no method could be measured)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_align_with_header() {
        let r = ProbeResult {
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
        let line = row(&r);
        assert_eq!(line.chars().count(), header().chars().count());
        assert!(line.starts_with("open_datasync  direct"));
        assert!(line.contains("1234.6") && line.contains("2047.9"));
        let e = io::Error::new(io::ErrorKind::Unsupported, "no O_DIRECT here");
        let na = row_unsupported(SyncMethod::Fsync, true, &e);
        assert!(na.starts_with("fsync          direct"));
        assert!(na.contains("n/a") && na.ends_with("(no O_DIRECT here)"));
    }

    #[test]
    fn bad_arguments_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        for seconds in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(check_args(dir.path(), seconds, 8192).is_err(), "{seconds}");
        }
        assert!(check_args(dir.path(), 1.0, 0).is_err());
        assert!(check_args(dir.path(), 1.0, SIZE_BYTES_MAX + 1).is_err());
        assert!(check_args(&dir.path().join("missing"), 1.0, 8192).is_err());
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(check_args(&file, 1.0, 8192).is_err());
        assert_eq!(
            check_args(dir.path(), 0.25, 8192),
            Ok(Duration::from_millis(250))
        );
    }

    #[test]
    fn run_prints_every_method_and_a_choice() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        run_to(&mut out, dir.path(), 0.02, 8192).unwrap();
        let text = String::from_utf8(out).unwrap();
        for method in SyncMethod::ALL {
            for io in ["buffered", "direct"] {
                let prefix = format!("{:<13}  {io}", method.name());
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
