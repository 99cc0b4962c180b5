//! Glue between the storage engine and the SQL layer: opens a data directory and exposes it as
//! `walnut_sql::storage::Engine`. OWNED BY THE STORAGE AUTHOR (front-end code calls only
//! `initdb`, `open_engine` and `Handle`).

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use walnut_common::{ColumnDef, DataType, Error, Result, SqlState, TableDef, Tid, Value};
use walnut_sql::storage::{CommitOpts, Engine, ScanControl, Transaction, WriteOutcome};
use walnut_storage::txn::{CommitSettings, RowWrite, Txn};
use walnut_storage::{Storage, StorageConfig};
use walnut_wal::{FlushOpts, GroupCommitMode, SyncMethod};

/// Default `walnut.conf` written by initdb.
pub const DEFAULT_CONF: &str = "\
# walnut configuration (postgresql.conf syntax, PostgreSQL GUC names)
listen_addresses = '127.0.0.1'
port = 5433
max_connections = 100
shared_buffers = 128MB
synchronous_commit = on
commit_delay = 0                # µs; the leader sleeps if >= commit_siblings others are active
commit_siblings = 5
wal_writer_delay = 200ms
checkpoint_timeout = 5min
max_wal_size = 1GB
full_page_writes = on
";

/// Creates a new data directory at `dir` (`walnut initdb`): directory layout, empty catalog,
/// first WAL segment, control file, and a default `walnut.conf`.
///
/// # Errors
/// 42P04 if `dir` exists and is not empty; I/O errors.
pub fn initdb(dir: &Path) -> Result<()> {
    Storage::initdb(Arc::new(walnut_io::RealVfs), dir)?;
    std::fs::write(dir.join("walnut.conf"), DEFAULT_CONF)
        .map_err(|e| Error::io("could not write walnut.conf", e))?;
    std::fs::write(dir.join("pg_hba.conf"), crate::hba::DEFAULT_HBA)
        .map_err(|e| Error::io("could not write pg_hba.conf", e))
}

/// The engine as the SQL layer sees it.
pub struct Handle {
    /// The open data directory.
    pub storage: Arc<Storage>,
}

fn setting<'a>(settings: &'a [(String, String)], name: &str) -> Option<&'a str> {
    settings
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn int_setting(settings: &[(String, String)], name: &str, default: i64) -> Result<i64> {
    match setting(settings, name) {
        Some(v) => walnut_sql::guc::value_as_i64(name, v),
        None => Ok(default),
    }
}

/// Storage configuration from GUC settings (name -> value text).
///
/// # Errors
/// 22023 for invalid values.
pub fn storage_config(settings: &[(String, String)]) -> Result<StorageConfig> {
    let d = StorageConfig::default();
    let io_direct = parse_io_direct(setting(settings, "io_direct").unwrap_or(""))?;
    Ok(StorageConfig {
        shared_buffers_pages: int_setting(
            settings,
            "shared_buffers",
            d.shared_buffers_pages as i64,
        )?
        .max(16) as usize,
        full_page_writes: match setting(settings, "full_page_writes") {
            Some(v) => walnut_sql::guc::value_as_bool("full_page_writes", v)?,
            None => true,
        },
        checkpoint_timeout_s: int_setting(
            settings,
            "checkpoint_timeout",
            d.checkpoint_timeout_s as i64,
        )?
        .max(1) as u64,
        max_wal_size_mb: int_setting(settings, "max_wal_size", d.max_wal_size_mb as i64)?.max(2)
            as u64,
        wal_writer_delay_ms: int_setting(
            settings,
            "wal_writer_delay",
            d.wal_writer_delay_ms as i64,
        )?
        .max(1) as u64,
        wal_buffers_bytes: d.wal_buffers_bytes,
        wal_sync_method: match setting(settings, "wal_sync_method") {
            Some(v) => SyncMethod::parse(v).ok_or_else(|| invalid("wal_sync_method", v))?,
            None => d.wal_sync_method,
        },
        io_direct_wal: io_direct.wal,
        io_direct_wal_init: io_direct.wal_init,
        wal_init_zero: match setting(settings, "wal_init_zero") {
            Some(v) => walnut_sql::guc::value_as_bool("wal_init_zero", v)?,
            None => d.wal_init_zero,
        },
        wal_recycle: match setting(settings, "wal_recycle") {
            Some(v) => walnut_sql::guc::value_as_bool("wal_recycle", v)?,
            None => d.wal_recycle,
        },
        wal_sync_range: match setting(settings, "wal_sync_range") {
            Some(v) => walnut_sql::guc::value_as_bool("wal_sync_range", v)?,
            None => d.wal_sync_range,
        },
        group_commit: match setting(settings, "group_commit") {
            Some(v) => GroupCommitMode::parse(v).ok_or_else(|| invalid("group_commit", v))?,
            None => d.group_commit,
        },
        wal_flush_capacity: None,
    })
}

fn invalid(name: &str, value: &str) -> Error {
    Error::user(
        SqlState::INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"{name}\": \"{value}\""),
    )
}

/// What `io_direct` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoDirect {
    /// `wal`: WAL segments are written with O_DIRECT.
    pub wal: bool,
    /// `wal_init`: new WAL segments are zero-filled with O_DIRECT.
    pub wal_init: bool,
}

/// Parses `io_direct` (PostgreSQL's `debug_io_direct`): a comma-separated list of `data`, `wal`
/// and `wal_init`, or empty.
///
/// # Errors
/// 22023 for an unknown item; 0A000 for `data`, which walnut does not support yet.
pub fn parse_io_direct(v: &str) -> Result<IoDirect> {
    let mut r = IoDirect::default();
    let v = v.trim().trim_matches('\'');
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item.to_ascii_lowercase().as_str() {
            "wal" => r.wal = true,
            "wal_init" => r.wal_init = true,
            "data" => {
                return Err(Error::user(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "io_direct = data is not supported yet; use wal, wal_init",
                ))
            }
            _ => {
                return Err(Error::user(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("invalid value for parameter \"io_direct\": \"{v}\""),
                )
                .with_detail(format!("Unrecognized key word: \"{item}\".")))
            }
        }
    }
    Ok(r)
}

/// Opens the data directory (running crash recovery if needed) with the server-level settings
/// `settings` (GUC name -> value text), and starts the background checkpointer and WAL writer.
///
/// # Errors
/// I/O and corruption errors from recovery; 22023 for invalid settings.
pub fn open_engine(dir: &Path, settings: &[(String, String)]) -> Result<Arc<dyn Engine>> {
    Ok(open_handle(dir, settings)?)
}

/// Like [`open_engine`], returning the concrete handle (for shutdown).
///
/// # Errors
/// As for [`open_engine`].
pub fn open_handle(dir: &Path, settings: &[(String, String)]) -> Result<Arc<Handle>> {
    let mut config = storage_config(settings)?;
    if config.io_direct_wal || config.io_direct_wal_init {
        check_direct_io(&dir.join("wal"))?;
    }
    let range = config.wal_sync_range && config.wal_init_zero;
    if setting(settings, "wal_sync_method").is_none() {
        config.wal_sync_method = probe_sync_method(&dir.join("wal"), config.io_direct_wal, range);
    }
    if config.group_commit == GroupCommitMode::Adaptive {
        config.wal_flush_capacity = probe_flush_capacity(
            &dir.join("wal"),
            config.wal_sync_method,
            config.io_direct_wal,
            range,
        );
    }
    let storage = Storage::open(server_vfs()?, dir, config)?;
    Ok(Arc::new(Handle { storage }))
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

/// Fails cleanly, before recovery touches the WAL, if the file system under `wal_dir` refuses
/// O_DIRECT (tmpfs on older kernels, some FUSE and network file systems).
///
/// # Errors
/// 0A000 if O_DIRECT is refused; I/O errors.
fn check_direct_io(wal_dir: &Path) -> Result<()> {
    use walnut_io::Vfs;
    let path = wal_dir.join("walnut_direct_io_check.tmp");
    let mode = walnut_io::OpenMode {
        create: true,
        direct: true,
        ..Default::default()
    };
    let r = walnut_io::RealVfs.open(&path, mode);
    let _ = std::fs::remove_file(&path);
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(22) => Err(Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            format!(
                "io_direct = wal is not supported by the file system of \"{}\"",
                wal_dir.display()
            ),
        )),
        Err(e) => Err(Error::io(
            format!("could not open a file in \"{}\"", wal_dir.display()),
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

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
    }
}

impl Engine for Handle {
    fn begin(&self, cancel: Arc<AtomicBool>) -> Result<Box<dyn Transaction>> {
        Ok(Box::new(TxnAdapter {
            txn: Some(Txn::begin(self.storage.clone(), cancel)),
        }))
    }

    fn checkpoint(&self) -> Result<()> {
        self.storage.request_checkpoint()
    }

    fn system_view(&self, name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
        let s = self.storage.wal().stats();
        let i = |v: u64| Value::Int8(v as i64);
        match name {
            "pg_stat_wal" => Some((
                vec![
                    col("wal_records", DataType::Int8),
                    col("wal_fpi", DataType::Int8),
                    col("wal_bytes", DataType::Int8),
                    col("wal_buffers_full", DataType::Int8),
                    col("wal_write", DataType::Int8),
                    col("wal_sync", DataType::Int8),
                    col("wal_write_time", DataType::Float8),
                    col("wal_sync_time", DataType::Float8),
                ],
                vec![vec![
                    i(s.wal_records),
                    i(s.wal_fpi),
                    i(s.wal_bytes),
                    i(s.wal_buffers_full),
                    i(s.wal_write),
                    i(s.wal_sync),
                    Value::Float8(s.wal_write_time_us as f64 / 1000.0),
                    Value::Float8(s.wal_sync_time_us as f64 / 1000.0),
                ]],
            )),
            "walnut_stat_group_commit" => {
                let per = if s.group_flushes == 0 {
                    0.0
                } else {
                    s.group_commits as f64 / s.group_flushes as f64
                };
                // Buckets are labelled by the commits they hold: "0", "1", "2", "3-4", … "65+".
                let histogram = s
                    .group_histogram
                    .iter()
                    .scan(None::<u64>, |prev, &(hi, n)| {
                        let lo = prev.map_or(0, |p| p + 1);
                        let label = match (lo, hi) {
                            (a, u64::MAX) => format!("{a}+"),
                            (a, b) if a == b => format!("{a}"),
                            (a, b) => format!("{a}-{b}"),
                        };
                        *prev = Some(hi);
                        Some(format!("{label}:{n}"))
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                let by_cause = |single: bool| {
                    s.group_closed
                        .iter()
                        .map(|&(cause, all, one)| {
                            format!("{cause}:{}", if single { one } else { all })
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let mode = self.storage.config().group_commit.name();
                Some((
                    vec![
                        col("group_commit", DataType::Text),
                        col("flushes", DataType::Int8),
                        col("commits", DataType::Int8),
                        col("commits_per_flush", DataType::Float8),
                        col("commits_per_flush_histogram", DataType::Text),
                        col("group_wait_time", DataType::Float8),
                        col("current_wait_us", DataType::Int8),
                        col("patience_us", DataType::Int8),
                        col("flush_latency_us", DataType::Int8),
                        col("sessions", DataType::Int8),
                        col("wal_sync_method", DataType::Text),
                        col("wal_sync_range", DataType::Bool),
                        col("flushes_by_close", DataType::Text),
                        col("single_commit_flushes_by_close", DataType::Text),
                        col("flush_capacity", DataType::Float8),
                        col("flush_utilization", DataType::Float8),
                    ],
                    vec![vec![
                        Value::Text(mode.into()),
                        i(s.group_flushes),
                        i(s.group_commits),
                        Value::Float8(per),
                        Value::Text(histogram),
                        Value::Float8(s.group_wait_time_us as f64 / 1000.0),
                        i(s.group_recent_wait_us),
                        i(s.group_patience_us),
                        i(s.group_flush_latency_us),
                        i(s.group_sessions),
                        Value::Text(self.storage.config().wal_sync_method.name().into()),
                        Value::Bool(self.storage.wal().sync_range_in_use()),
                        Value::Text(by_cause(false)),
                        Value::Text(by_cause(true)),
                        s.group_flush_capacity.map_or(Value::Null, Value::Float8),
                        s.group_utilization.map_or(Value::Null, Value::Float8),
                    ]],
                ))
            }
            "pg_class" => {
                let mut rows = Vec::new();
                for t in self.storage.catalog.all() {
                    rows.push(vec![
                        Value::Int8(t.table_id as i64),
                        Value::Text(t.def.name.clone()),
                        Value::Text("r".into()),
                        Value::Int8(2200),
                    ]);
                    if let Some(ix) = t.index {
                        rows.push(vec![
                            Value::Int8(ix.0 as i64),
                            Value::Text(t.index_name()),
                            Value::Text("i".into()),
                            Value::Int8(2200),
                        ]);
                    }
                }
                rows.sort_by_key(|r| r[0].as_i64());
                Some((
                    vec![
                        col("oid", DataType::Int8),
                        col("relname", DataType::Text),
                        col("relkind", DataType::Char(1)),
                        col("relnamespace", DataType::Int8),
                    ],
                    rows,
                ))
            }
            _ => None,
        }
    }
}

struct TxnAdapter {
    txn: Option<Txn>,
}

impl TxnAdapter {
    fn t(&mut self) -> &mut Txn {
        self.txn
            .as_mut()
            .expect("transaction used after commit or rollback")
    }

    fn info(&mut self, table: &str) -> Result<Arc<walnut_storage::catalog::TableInfo>> {
        self.t().table(table).ok_or_else(|| {
            Error::user(
                SqlState::UNDEFINED_TABLE,
                format!("relation \"{table}\" does not exist"),
            )
        })
    }
}

fn outcome(w: RowWrite) -> WriteOutcome {
    match w {
        RowWrite::Done => WriteOutcome::Done,
        RowWrite::Changed(row, values) => WriteOutcome::Changed { row, values },
        RowWrite::Gone => WriteOutcome::Gone,
    }
}

impl Transaction for TxnAdapter {
    fn new_statement(&mut self) {
        self.t().new_statement();
    }

    fn table(&mut self, name: &str) -> Result<Option<Arc<TableDef>>> {
        Ok(self.t().table(name).map(|i| i.def.clone()))
    }

    fn create_table(&mut self, def: TableDef) -> Result<()> {
        self.t().create_table(def)
    }

    fn drop_table(&mut self, name: &str) -> Result<()> {
        self.t().drop_table(name)
    }

    fn truncate(&mut self, name: &str) -> Result<()> {
        self.t().truncate(name)
    }

    fn add_primary_key(&mut self, name: &str, columns: Vec<usize>) -> Result<()> {
        self.t().add_primary_key(name, columns)
    }

    fn insert(&mut self, table: &str, row: Vec<Value>) -> Result<()> {
        let info = self.info(table)?;
        self.t().insert(&info, &row)
    }

    fn scan(
        &mut self,
        table: &str,
        visit: &mut dyn FnMut(Tid, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()> {
        let info = self.info(table)?;
        self.t().scan(&info, &mut |tid, row| {
            Ok(visit(tid, row)? == ScanControl::Continue)
        })
    }

    fn index_scan(
        &mut self,
        table: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        visit: &mut dyn FnMut(Tid, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()> {
        let info = self.info(table)?;
        self.t().index_scan(&info, lo, hi, &mut |tid, row| {
            Ok(visit(tid, row)? == ScanControl::Continue)
        })
    }

    fn update(&mut self, table: &str, row: Tid, values: Vec<Value>) -> Result<WriteOutcome> {
        let info = self.info(table)?;
        // The key check needs the old row's key: read it from the version being replaced.
        let old = self.t().row_at(&info, row)?;
        self.t().update(&info, row, &old, &values).map(outcome)
    }

    fn delete(&mut self, table: &str, row: Tid) -> Result<WriteOutcome> {
        let info = self.info(table)?;
        self.t().delete(&info, row).map(outcome)
    }

    fn commit(mut self: Box<Self>, opts: CommitOpts) -> Result<()> {
        let txn = self.txn.take().expect("transaction already finished");
        txn.commit(CommitSettings {
            synchronous: opts.synchronous,
            flush: FlushOpts {
                commit_delay_us: opts.commit_delay_us,
                commit_siblings: opts.commit_siblings,
                commit: true,
            },
        })
    }

    fn rollback(mut self: Box<Self>) {
        if let Some(t) = self.txn.take() {
            t.rollback();
        }
    }
}

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
