//! Opening a data directory: `initdb`, and [`open`], which turns the configuration into the
//! storage engine's, runs the start-up probes the configuration leaves to the server
//! (`wal_sync_method`, the flush capacity), opens the storage (running crash recovery if
//! needed) and registers it for reloads.

use std::path::Path;
use std::sync::Arc;
use walnut_common::config::{Config, CONF_FILE};
use walnut_common::guc::{Context, Source};
use walnut_common::{Error, Result, SqlState};
use walnut_sql::engine::StorageEngine;
use walnut_storage::{Storage, StorageConfig};
use walnut_wal::{GroupCommitMode, SyncMethod};

/// The `walnut.conf` initdb writes: every parameter a file may set, commented out at its
/// default, by category (PostgreSQL's `postgresql.conf.sample`).
pub fn default_conf() -> String {
    let registry = crate::guc::registry();
    let mut defs: Vec<_> = registry
        .iter()
        .filter(|d| d.context != Context::Internal)
        .collect();
    defs.sort_by_key(|d| (d.category, d.name.to_ascii_lowercase()));
    let mut out = String::from(
        "# walnut configuration (postgresql.conf syntax, PostgreSQL's parameter names).\n\
         # Every parameter is shown commented out at its default. ALTER SYSTEM writes\n\
         # walnut.auto.conf, which is read after this file.\n",
    );
    let mut category = "";
    for d in defs {
        if d.category != category {
            category = d.category;
            out.push_str(&format!("\n# - {category} -\n"));
        }
        let line = format!(
            "#{} = {}",
            d.name,
            walnut_common::guc::quote_conf(d.default)
        );
        let context = match d.context {
            Context::Postmaster => " (change requires restart)",
            _ => "",
        };
        out.push_str(&format!("{line:<44}# {}{context}\n", d.description));
    }
    out
}

/// Creates a new data directory at `dir` (`walnut initdb`): directory layout, empty catalog,
/// first WAL segment, control file, a default `walnut.conf` and `pg_hba.conf`.
///
/// # Errors
/// 42P04 if `dir` exists and is not empty; I/O errors.
pub fn initdb(dir: &Path) -> Result<()> {
    Storage::initdb(Arc::new(walnut_io::RealVfs), dir)?;
    std::fs::write(dir.join(CONF_FILE), default_conf())
        .map_err(|e| Error::io("could not write walnut.conf", e))?;
    std::fs::write(dir.join("pg_hba.conf"), crate::hba::DEFAULT_HBA)
        .map_err(|e| Error::io("could not write pg_hba.conf", e))
}

/// Opens the data directory `dir` (running crash recovery if needed) with the settings of
/// `config`, and starts the background checkpointer and WAL writer. When `wal_sync_method` is
/// not set, the start-up probe chooses it and `config` records the choice (what `SHOW` and
/// `pg_settings` report); with `group_commit = adaptive` the disk's flush capacity is
/// measured. The storage applies reloaded `sighup` parameters from then on.
///
/// # Errors
/// I/O and corruption errors from recovery; 0A000 if `io_direct` asks for O_DIRECT where the
/// file system refuses it.
pub fn open(dir: &Path, config: &Arc<Config>) -> Result<Arc<StorageEngine>> {
    let settings = config.settings();
    let mut sc = StorageConfig::from_settings(&settings);
    let wal_dir = dir.join("wal");
    if sc.io_direct.wal || sc.io_direct.wal_init {
        check_direct_io(&wal_dir, "wal")?;
    }
    if sc.io_direct.data {
        // In the data directory itself, which holds `base`: a file a crash left in `base`
        // would count as a stray relation file.
        check_direct_io(dir, "data")?;
    }
    let range = sc.wal.sync_range && sc.wal.init_zero;
    if settings.setting(&walnut_wal::guc::WAL_SYNC_METHOD).source == Source::Default {
        let chosen = probe_sync_method(&wal_dir, sc.wal.direct, range);
        config.set_dynamic_default(walnut_wal::guc::WAL_SYNC_METHOD.name, chosen.name())?;
        sc.wal.sync_method = chosen;
    }
    if sc.wal.group_commit == GroupCommitMode::Adaptive {
        sc.wal.flush_capacity =
            probe_flush_capacity(&wal_dir, sc.wal.sync_method, sc.wal.direct, range);
    }
    let storage = Storage::open(server_vfs()?, dir, sc)?;
    // What the WAL reads only as a sighup parameter (synchronous_standby_names) takes its
    // start-up value the way a reload would give it.
    if let Some(wal) = storage.wal_if_open() {
        wal.apply_settings(&config.settings());
    }
    if let Some(rec) = storage.recovery() {
        rec.set_min_apply_delay_ms(
            config.settings().int(&crate::guc::RECOVERY_MIN_APPLY_DELAY) as u64
        );
        rec.set_max_streaming_delay_ms(
            config
                .settings()
                .int(&crate::guc::MAX_STANDBY_STREAMING_DELAY),
        );
        crate::walreceiver::start(storage.clone(), config.clone())
            .map_err(|e| Error::io("could not start the walreceiver", e))?;
    }
    let weak = Arc::downgrade(&storage);
    config.on_reload(move |s| {
        if let Some(st) = weak.upgrade() {
            st.apply_settings(s);
            if let Some(rec) = st.recovery() {
                rec.set_min_apply_delay_ms(s.int(&crate::guc::RECOVERY_MIN_APPLY_DELAY) as u64);
                rec.set_max_streaming_delay_ms(s.int(&crate::guc::MAX_STANDBY_STREAMING_DELAY));
            }
        }
    });
    Ok(StorageEngine::new(storage))
}

/// The file system the server uses: the real one, or, in a build with the feature
/// `fault-injection` (which `cargo test` turns on for the end-to-end tests), the real one with
/// faults armed by `WALNUT_FAULT_*` environment variables (`walnut_io::fault::vfs_from_env`:
/// a failed fsync or a full disk, so that a test can watch the server PANIC and recover, or
/// fill the disk and free it again). A build without the feature ignores the variables.
///
/// # Errors
/// 22023 if a variable is malformed.
fn server_vfs() -> Result<Arc<dyn walnut_io::Vfs>> {
    let real: Arc<dyn walnut_io::Vfs> = Arc::new(walnut_io::RealVfs);
    #[cfg(feature = "fault-injection")]
    {
        let (vfs, armed) = walnut_io::fault::vfs_from_env(real).map_err(|e| {
            Error::user(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("invalid value for {e}"),
            )
        })?;
        for fault in armed {
            tracing::warn!("fault injection: {fault}");
        }
        Ok(vfs)
    }
    #[cfg(not(feature = "fault-injection"))]
    Ok(real)
}

/// Fails cleanly, before recovery touches a file, if the file system under `dir` (the WAL's
/// for `io_direct = wal`, the data directory's for `data`; `what` names the item) refuses O_DIRECT (tmpfs on
/// older kernels, some FUSE and network file systems): it creates, writes one aligned block
/// to and removes a temporary file there.
///
/// # Errors
/// 0A000 if O_DIRECT is refused; I/O errors.
fn check_direct_io(dir: &Path, what: &str) -> Result<()> {
    use walnut_io::Vfs;
    let path = dir.join("walnut_direct_io_check.tmp");
    let mode = walnut_io::OpenMode {
        create: true,
        direct: true,
        ..Default::default()
    };
    // Some file systems accept the flag at open and refuse the first transfer.
    let r = walnut_io::RealVfs.open(&path, mode).and_then(|f| {
        let block = walnut_io::AlignedBuf::zeroed(walnut_io::DIRECT_IO_ALIGN);
        f.write_at(block.as_slice(), 0)
    });
    let _ = std::fs::remove_file(&path);
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(22) => Err(Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            format!(
                "io_direct = {what} is not supported by the file system of \"{}\"",
                dir.display()
            ),
        )),
        Err(e) => Err(Error::io(
            format!("could not write a file in \"{}\"", dir.display()),
            e,
        )),
    }
}

/// Time the start-up probe spends on each `wal_sync_method`, over all its rounds.
const STARTUP_PROBE: std::time::Duration = std::time::Duration::from_millis(100);

/// Pause between the start-up probe's flushes. Group commit never flushes back to back (a
/// group forms in between), and a paced flush shows costs that back-to-back ones hide: on ext4
/// without a journal, `fdatasync` also writes the inode whenever the clock ticked since the
/// previous flush.
const STARTUP_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(1);

/// The start-up probe: measures each `wal_sync_method`'s flushes/s on the disk that holds
/// `wal_dir` (8 KiB writes, [`STARTUP_PROBE`] each, [`STARTUP_PROBE_INTERVAL`] apart, O_DIRECT
/// if `direct`) and returns the
/// one with the fewest disk write requests per flush, then the fastest (see
/// [`choose_by_requests`]); `fdatasync` (PostgreSQL's Linux default) if the probe fails. With `range`
/// (`wal_sync_range` on and `wal_init_zero` on), `fdatasync` is measured the way the WAL will
/// do it where the file system allows: write-back plus a device cache flush.
pub fn probe_sync_method(wal_dir: &Path, direct: bool, range: bool) -> SyncMethod {
    // Several short rounds, each in its own order, rather than one run per method: on a
    // throttled disk the budget left in the throttle's time slice favours whichever method runs
    // first, and a single 100 ms sample per method picked a different winner at every start.
    // Per method: (method, range, flushes, seconds).
    let mut totals: Vec<(SyncMethod, bool, u64, f64)> = Vec::new();
    // The disk's completed write + flush requests during each method's probes (None if the
    // counters cannot be read).
    let disk = crate::test_fsync::DiskStat::for_dir(wal_dir);
    // The fewest of those per flush in any one round: other writers on the disk (the kernel
    // still writing back a previous server's pages, say) only ever add requests to a round,
    // and a sum over the rounds once made fdatasync (range) read 2.88 requests per flush
    // instead of its 2.0, and the probe pick fsync (2.9 under load).
    let mut requests: std::collections::HashMap<SyncMethod, Option<f64>> = Default::default();
    let mut failed = std::collections::HashSet::new();
    for round in 0..STARTUP_PROBE_ROUNDS {
        let mut order = SyncMethod::ALL.to_vec();
        let n = order.len();
        order.rotate_left(round % n);
        for m in order {
            if failed.contains(&m) {
                continue;
            }
            let before = disk.as_ref().and_then(|d| d.requests());
            let probed = probe_as_the_wal_flushes(
                wal_dir,
                m,
                direct,
                range,
                STARTUP_PROBE / STARTUP_PROBE_ROUNDS as u32,
                STARTUP_PROBE_INTERVAL,
            );
            let after = disk.as_ref().and_then(|d| d.requests());
            let delta = before.zip(after).map(|(b, a)| a.saturating_sub(b));
            let entry = requests.entry(m).or_insert(Some(f64::INFINITY));
            match probed {
                Ok(r) => {
                    let per_flush = delta
                        .filter(|_| r.flushes > 0)
                        .map(|d| d as f64 / r.flushes as f64);
                    *entry = entry.zip(per_flush).map(|(a, b)| a.min(b));
                    let secs = r.flushes as f64 / r.flushes_per_sec.max(f64::MIN_POSITIVE);
                    match totals.iter_mut().find(|t| t.0 == m) {
                        Some(t) => {
                            t.2 += r.flushes;
                            t.3 += secs;
                        }
                        None => totals.push((m, r.range, r.flushes, secs)),
                    }
                }
                Err(e) => {
                    tracing::warn!(method = %m, "wal_sync_method probe failed: {e}");
                    failed.insert(m);
                }
            }
        }
    }
    // In SyncMethod::ALL order, so that choose_sync_method's tie rule favours fdatasync.
    totals.sort_by_key(|t| SyncMethod::ALL.iter().position(|m| *m == t.0));
    let results: Vec<walnut_wal::ProbeResult> = totals
        .iter()
        .filter(|t| !failed.contains(&t.0))
        .map(|&(method, range, flushes, secs)| walnut_wal::ProbeResult {
            method,
            range,
            direct,
            flushes_per_sec: flushes as f64 / secs.max(f64::MIN_POSITIVE),
            mean_us: secs * 1e6 / flushes.max(1) as f64,
            p50_us: f64::NAN,
            p99_us: f64::NAN,
            max_us: f64::NAN,
            flushes,
            write_bytes: 8192,
        })
        .collect();
    // First by the disk's write requests per flush (rounded to a tenth): on an IOPS-limited
    // disk that decides the flush rate, and a method that also writes the segment's inode
    // when the clock ticked costs more, which short latency samples under a throttle do not
    // show reliably. Then by speed, among the methods within a tenth of the fewest.
    let per_flush = |r: &walnut_wal::ProbeResult| {
        requests
            .get(&r.method)
            .copied()
            .flatten()
            .filter(|p| p.is_finite())
    };
    let chosen = choose_by_requests(&results, &per_flush);
    let rates = results
        .iter()
        .map(|r| {
            let range = if r.range { " (range)" } else { "" };
            let rpf = per_flush(r).map_or_else(String::new, |p| format!(" {p:.2} req/flush"));
            format!("{}{range} {:.0}/s{rpf}", r.method, r.flushes_per_sec)
        })
        .collect::<Vec<_>>()
        .join(", ");
    tracing::info!("wal_sync_method = {chosen} (start-up probe: {rates})");
    chosen
}

/// Time the start-up capacity probe flushes back to back (see [`probe_flush_capacity`]). Under
/// a 1000 write-IOPS cgroup limit 100 ms read 521 flushes/s against 503 over 2 s (`walnut
/// test-fsync --seconds 0.1` and `--seconds 2`).
const CAPACITY_PROBE: std::time::Duration = std::time::Duration::from_millis(100);

/// The start-up capacity probe: durable flushes/s the disk under `wal_dir` sustains back to
/// back with `method` (8 KiB writes for [`CAPACITY_PROBE`], O_DIRECT if `direct`, the
/// `wal_sync_range` path if `range` and the file system offers it), which the adaptive group
/// commit compares with the flush rate in use (`walnut_wal::WalConfig::flush_capacity`).
/// `None`, with a warning, if the probe fails.
pub fn probe_flush_capacity(
    wal_dir: &Path,
    method: SyncMethod,
    direct: bool,
    range: bool,
) -> Option<f64> {
    let probed = probe_as_the_wal_flushes(
        wal_dir,
        method,
        direct,
        range,
        CAPACITY_PROBE,
        std::time::Duration::ZERO,
    );
    match probed {
        Ok(r) => {
            tracing::info!(
                "WAL flush capacity: {:.0} flushes/s ({method}, back to back)",
                r.flushes_per_sec
            );
            Some(r.flushes_per_sec)
        }
        Err(e) => {
            tracing::warn!(method = %method, "WAL flush capacity probe failed: {e}");
            None
        }
    }
}

/// One run of [`walnut_wal::probe`] with 8 KiB writes, flushing the way the WAL will: with
/// `range` and `fdatasync`, the `wal_sync_range` path, or plain `fdatasync` where the file
/// system offers no cache flusher (as the WAL then falls back).
///
/// # Errors
/// As [`walnut_wal::probe`].
fn probe_as_the_wal_flushes(
    wal_dir: &Path,
    method: SyncMethod,
    direct: bool,
    range: bool,
    duration: std::time::Duration,
    interval: std::time::Duration,
) -> std::io::Result<walnut_wal::ProbeResult> {
    let spec = |range| walnut_wal::ProbeSpec {
        method,
        direct,
        range,
        write_bytes: 8192,
        duration,
        interval,
    };
    let try_range = range && method == SyncMethod::Fdatasync;
    match walnut_wal::probe(&walnut_io::RealVfs, wal_dir, &spec(try_range)) {
        Err(e) if try_range && e.kind() == std::io::ErrorKind::Unsupported => {
            walnut_wal::probe(&walnut_io::RealVfs, wal_dir, &spec(false))
        }
        other => other,
    }
}

/// The start-up probe's choice: among the methods whose write requests per flush
/// (`per_flush`, `None` if unknown) are within a tenth of the fewest, the fastest by
/// [`walnut_wal::choose_sync_method`]; by speed alone if no counts are known.
fn choose_by_requests(
    results: &[walnut_wal::ProbeResult],
    per_flush: &dyn Fn(&walnut_wal::ProbeResult) -> Option<f64>,
) -> SyncMethod {
    let fewest = results
        .iter()
        .filter_map(per_flush)
        .fold(f64::INFINITY, f64::min);
    let candidates: Vec<walnut_wal::ProbeResult> = if fewest.is_finite() {
        results
            .iter()
            .filter(|r| per_flush(r).is_some_and(|p| p <= fewest + 0.1))
            .cloned()
            .collect()
    } else {
        results.to_vec()
    };
    walnut_wal::choose_sync_method(&candidates).unwrap_or(SyncMethod::Fdatasync)
}

/// Rounds of the start-up probe (each method once per round, in a rotating order).
const STARTUP_PROBE_ROUNDS: usize = 4;

#[cfg(test)]
mod probe_choice_tests {
    use super::*;

    fn r(method: SyncMethod, range: bool, rate: f64) -> walnut_wal::ProbeResult {
        walnut_wal::ProbeResult {
            method,
            range,
            direct: false,
            flushes_per_sec: rate,
            mean_us: 1e6 / rate,
            p50_us: f64::NAN,
            p99_us: f64::NAN,
            max_us: f64::NAN,
            flushes: 100,
            write_bytes: 8192,
        }
    }

    #[test]
    fn fewer_requests_per_flush_win_over_a_noisy_rate() {
        let results = [
            r(SyncMethod::Fdatasync, true, 1600.0),
            r(SyncMethod::Fsync, false, 4600.0),
            r(SyncMethod::OpenDatasync, false, 1300.0),
        ];
        let rpf = |x: &walnut_wal::ProbeResult| {
            Some(match x.method {
                SyncMethod::Fdatasync => 2.5,
                _ => 2.9,
            })
        };
        assert_eq!(choose_by_requests(&results, &rpf), SyncMethod::Fdatasync);
        // Equal requests: the fastest (by the usual 10% margin) wins.
        let same = |_: &walnut_wal::ProbeResult| Some(2.0);
        assert_eq!(choose_by_requests(&results, &same), SyncMethod::Fsync);
        // No counters: speed alone.
        let none = |_: &walnut_wal::ProbeResult| None;
        assert_eq!(choose_by_requests(&results, &none), SyncMethod::Fsync);
    }
}
