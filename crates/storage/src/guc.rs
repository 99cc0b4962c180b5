//! The configuration parameters the storage engine reads (PostgreSQL's names). [`GUCS`] lists
//! them for the server's registry; [`crate::StorageConfig::from_settings`] reads them.

use walnut_common::guc::{int, Context, GucDef, Kind, Unit, Val, INT_MAX};
use walnut_common::{Error, Result, SqlState};

/// `shared_buffers`, 8 kB pages: the buffer pool's size.
pub static SHARED_BUFFERS: GucDef = GucDef {
    name: "shared_buffers",
    kind: int(16, INT_MAX / 2, Unit::Blocks),
    default: "128MB",
    context: Context::Postmaster,
    category: "Resource Usage / Memory",
    description: "Sets the number of shared memory buffers used by the server.",
    check: None,
};

/// `checkpoint_timeout`, seconds: the longest time between automatic checkpoints.
pub static CHECKPOINT_TIMEOUT: GucDef = GucDef {
    name: "checkpoint_timeout",
    kind: int(30, 86400, Unit::S),
    default: "5min",
    context: Context::Sighup,
    category: "Write-Ahead Log / Checkpoints",
    description: "Sets the maximum time between automatic WAL checkpoints.",
    check: None,
};

/// `max_wal_size`, MB: a checkpoint starts when the WAL since the last redo point reaches
/// `max_wal_size / (1 + checkpoint_completion_target)`.
pub static MAX_WAL_SIZE: GucDef = GucDef {
    name: "max_wal_size",
    kind: int(2, INT_MAX, Unit::Mb),
    default: "1GB",
    context: Context::Sighup,
    category: "Write-Ahead Log / Checkpoints",
    description: "Sets the WAL size that triggers a checkpoint.",
    check: None,
};

/// `min_wal_size`, MB: a checkpoint keeps at least this much WAL in recycled segments for
/// reuse, even when the checkpoints' distance is shorter.
pub static MIN_WAL_SIZE: GucDef = GucDef {
    name: "min_wal_size",
    kind: int(2, INT_MAX, Unit::Mb),
    default: "80MB",
    context: Context::Sighup,
    category: "Write-Ahead Log / Checkpoints",
    description: "Sets the minimum size to shrink the WAL to.",
    check: None,
};

/// `full_page_writes`: log a page's image at its first change after a checkpoint.
pub static FULL_PAGE_WRITES: GucDef = GucDef {
    name: "full_page_writes",
    kind: Kind::Bool,
    default: "on",
    context: Context::Postmaster,
    category: "Write-Ahead Log / Settings",
    description: "Writes full pages to WAL when first modified after a checkpoint.",
    check: None,
};

/// `io_direct`: which files use O_DIRECT (see [`IoDirect`]).
pub static IO_DIRECT: GucDef = GucDef {
    name: "io_direct",
    kind: Kind::Str,
    default: "",
    context: Context::Postmaster,
    category: "Resource Usage / I/O",
    description: "Use direct I/O for file access: a list of data, wal and wal_init.",
    check: Some(check_io_direct),
};

/// `fsync`: walnut always makes its writes durable; `off` is refused.
pub static FSYNC: GucDef = GucDef {
    name: "fsync",
    kind: Kind::Bool,
    default: "on",
    context: Context::Sighup,
    category: "Write-Ahead Log / Settings",
    description: "Forces synchronization of updates to disk (walnut: always on).",
    check: Some(check_fsync),
};

/// `checkpoint_completion_target`: the fraction of the checkpoint interval (by time and by WAL)
/// over which a checkpoint spreads its writes (PostgreSQL's `IsCheckpointOnSchedule`).
pub static CHECKPOINT_COMPLETION_TARGET: GucDef = GucDef {
    name: "checkpoint_completion_target",
    kind: Kind::Real { min: 0.0, max: 1.0 },
    default: "0.9",
    context: Context::Sighup,
    category: "Write-Ahead Log / Checkpoints",
    description:
        "Time spent flushing dirty buffers during checkpoint, as fraction of checkpoint interval.",
    check: None,
};

/// `checkpoint_flush_after`, 8 kB pages: after this many pages written by the checkpointer,
/// ask the kernel to write them back (`sync_file_range`), so the final fsync finds little.
/// Also the checkpoint's last write-back pass over the files it is about to fsync, in chunks
/// of this many pages. 0 disables both.
pub static CHECKPOINT_FLUSH_AFTER: GucDef = GucDef {
    name: "checkpoint_flush_after",
    kind: int(0, 256, Unit::Blocks),
    default: "256kB",
    context: Context::Sighup,
    category: "Write-Ahead Log / Checkpoints",
    description: "Number of pages after which previously performed writes are flushed to disk.",
    check: None,
};

/// `checkpoint_warning`, seconds: log a hint when checkpoints caused by WAL volume come closer
/// together than this. 0 disables it.
pub static CHECKPOINT_WARNING: GucDef = GucDef {
    name: "checkpoint_warning",
    kind: int(0, INT_MAX, Unit::S),
    default: "30s",
    context: Context::Sighup,
    category: "Write-Ahead Log / Checkpoints",
    description: "Sets the maximum time before warning if checkpoints triggered by WAL volume happen too frequently.",
    check: None,
};

/// `wal_keep_size`, MB: a checkpoint keeps at least this much WAL behind the current
/// position for receivers without a slot (PostgreSQL's `KeepLogSeg`). 0: none beyond the redo
/// point.
pub static WAL_KEEP_SIZE: GucDef = GucDef {
    name: "wal_keep_size",
    kind: int(0, INT_MAX, Unit::Mb),
    default: "0",
    context: Context::Sighup,
    category: "Replication / Sending Servers",
    description: "Sets the size of WAL files held for replication.",
    check: None,
};

/// `max_slot_wal_keep_size`, MB: the most WAL a replication slot may keep behind the current
/// position; a slot further behind is invalidated at the next checkpoint. -1: no limit.
pub static MAX_SLOT_WAL_KEEP_SIZE: GucDef = GucDef {
    name: "max_slot_wal_keep_size",
    kind: int(-1, INT_MAX, Unit::Mb),
    default: "-1",
    context: Context::Sighup,
    category: "Replication / Sending Servers",
    description: "Sets the maximum WAL size that can be reserved by replication slots.",
    check: None,
};

/// `log_checkpoints`: log each checkpoint's start and completion with PostgreSQL's line.
pub static LOG_CHECKPOINTS: GucDef = GucDef {
    name: "log_checkpoints",
    kind: Kind::Bool,
    default: "on",
    context: Context::Sighup,
    category: "Reporting and Logging / What to Log",
    description: "Logs each checkpoint.",
    check: None,
};

/// `log_startup_progress_interval`, ms (PostgreSQL 15's): while crash recovery's redo runs,
/// a line with its elapsed time, current LSN and rate every this often
/// ([`crate::recovery::Progress`]); 0 turns it off. Read at start, which is when it is used
/// (PostgreSQL's is `sighup`, and it too only matters at start-up).
pub static LOG_STARTUP_PROGRESS_INTERVAL: GucDef = GucDef {
    name: "log_startup_progress_interval",
    kind: int(0, INT_MAX, Unit::Ms),
    default: "10s",
    context: Context::Sighup,
    category: "Reporting and Logging / When to Log",
    description: "Time between progress updates for long-running startup operations.",
    check: None,
};

/// `bgwriter_delay`, ms: the background writer's sleep between rounds.
pub static BGWRITER_DELAY: GucDef = GucDef {
    name: "bgwriter_delay",
    kind: int(10, 10000, Unit::Ms),
    default: "200ms",
    context: Context::Sighup,
    category: "Resource Usage / Background Writer",
    description: "Background writer sleep time between rounds.",
    check: None,
};

/// `bgwriter_lru_maxpages`: the most buffers the background writer cleans per round (0
/// disables its cleaning).
pub static BGWRITER_LRU_MAXPAGES: GucDef = GucDef {
    name: "bgwriter_lru_maxpages",
    kind: int(0, INT_MAX / 2, Unit::None),
    default: "100",
    context: Context::Sighup,
    category: "Resource Usage / Background Writer",
    description: "Background writer maximum number of LRU pages to flush per round.",
    check: None,
};

/// `bgwriter_lru_multiplier`: clean this many times the recent buffer allocations per round.
pub static BGWRITER_LRU_MULTIPLIER: GucDef = GucDef {
    name: "bgwriter_lru_multiplier",
    kind: Kind::Real {
        min: 0.0,
        max: 10.0,
    },
    default: "2",
    context: Context::Sighup,
    category: "Resource Usage / Background Writer",
    description: "Multiple of the average buffer usage to free per round.",
    check: None,
};

/// `bgwriter_flush_after`, 8 kB pages: write-back batch of the background writer's writes,
/// and the chunk in which it writes back the sessions' evictions beyond those due
/// (`crate::writeback`). 0 disables both: evictions are then left to the kernel and the
/// checkpoint's fsync, as in PostgreSQL.
pub static BGWRITER_FLUSH_AFTER: GucDef = GucDef {
    name: "bgwriter_flush_after",
    kind: int(0, 256, Unit::Blocks),
    default: "512kB",
    context: Context::Sighup,
    category: "Resource Usage / Background Writer",
    description: "Number of pages after which previously performed writes are flushed to disk.",
    check: None,
};

/// `backend_flush_after`, 8 kB pages: write-back batch of the pages sessions write themselves
/// (evictions). 0, the default, queues them for the background writer to write back
/// (`crate::writeback::PendingWriteback`). walnut reads it
/// server-wide (PostgreSQL lets each session set it).
pub static BACKEND_FLUSH_AFTER: GucDef = GucDef {
    name: "backend_flush_after",
    kind: int(0, 256, Unit::Blocks),
    default: "0",
    context: Context::Sighup,
    category: "Resource Usage / I/O",
    description: "Number of pages after which previously performed writes are flushed to disk.",
    check: None,
};

/// Every parameter of this crate.
pub static GUCS: &[&GucDef] = &[
    &BACKEND_FLUSH_AFTER,
    &BGWRITER_DELAY,
    &BGWRITER_FLUSH_AFTER,
    &BGWRITER_LRU_MAXPAGES,
    &BGWRITER_LRU_MULTIPLIER,
    &CHECKPOINT_COMPLETION_TARGET,
    &CHECKPOINT_FLUSH_AFTER,
    &CHECKPOINT_TIMEOUT,
    &CHECKPOINT_WARNING,
    &FSYNC,
    &FULL_PAGE_WRITES,
    &IO_DIRECT,
    &LOG_CHECKPOINTS,
    &LOG_STARTUP_PROGRESS_INTERVAL,
    &MAX_SLOT_WAL_KEEP_SIZE,
    &MAX_WAL_SIZE,
    &MIN_WAL_SIZE,
    &WAL_KEEP_SIZE,
    &SHARED_BUFFERS,
    &IO_METHOD,
    &IO_WORKERS,
    &EFFECTIVE_IO_CONCURRENCY,
    &IO_COMBINE_LIMIT,
    &MAINTENANCE_IO_CONCURRENCY,
    &MAX_PARALLEL_MAINTENANCE_WORKERS,
    &RECOVERY_WORKERS,
    &RECOVERY_PARALLEL_BACKLOG,
    &RECOVERY_PREFETCH,
    &WAL_DECODE_BUFFER_SIZE,
    &AUTOVACUUM,
    &AUTOVACUUM_NAPTIME,
    &AUTOVACUUM_MAX_WORKERS,
    &AUTOVACUUM_VACUUM_THRESHOLD,
    &AUTOVACUUM_VACUUM_MAX_THRESHOLD,
    &AUTOVACUUM_VACUUM_SCALE_FACTOR,
    &AUTOVACUUM_VACUUM_INSERT_THRESHOLD,
    &AUTOVACUUM_VACUUM_INSERT_SCALE_FACTOR,
    &AUTOVACUUM_VACUUM_COST_DELAY,
    &AUTOVACUUM_VACUUM_COST_LIMIT,
    &VACUUM_COST_LIMIT,
    &VACUUM_COST_PAGE_HIT,
    &VACUUM_COST_PAGE_MISS,
    &VACUUM_COST_PAGE_DIRTY,
    &LOG_AUTOVACUUM_MIN_DURATION,
    &VACUUM_BUFFER_USAGE_LIMIT,
    &VACUUM_FREEZE_MIN_AGE,
    &AUTOVACUUM_FREEZE_MAX_AGE,
];

fn check_fsync(v: Val) -> Result<Val> {
    if v == Val::Bool(false) {
        return Err(Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            "fsync = off is not supported: walnut does not run without durable writes",
        )
        .with_detail(
            "synchronous_commit = off trades the durability of the latest commits for speed \
             without risking corruption.",
        ));
    }
    Ok(v)
}

/// What `io_direct` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoDirect {
    /// `data`: relation files (`base/*`) are read and written with O_DIRECT.
    pub data: bool,
    /// `wal`: WAL segments are written with O_DIRECT.
    pub wal: bool,
    /// `wal_init`: new WAL segments are zero-filled with O_DIRECT.
    pub wal_init: bool,
}

impl IoDirect {
    /// Parses `io_direct` (PostgreSQL's `debug_io_direct`): a comma-separated list of `data`,
    /// `wal` and `wal_init`, or empty.
    ///
    /// # Errors
    /// 22023 for an unknown item.
    pub fn parse(v: &str) -> Result<IoDirect> {
        let mut r = IoDirect::default();
        let v = v.trim().trim_matches('\'');
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.to_ascii_lowercase().as_str() {
                "wal" => r.wal = true,
                "wal_init" => r.wal_init = true,
                "data" => r.data = true,
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
}

fn check_io_direct(v: Val) -> Result<Val> {
    if let Val::Str(s) = &v {
        IoDirect::parse(s)?;
    }
    Ok(v)
}

// New parameters are appended after the tests, at the end of the file, to ease merging.
#[allow(clippy::items_after_test_module)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_parses() {
        for d in GUCS {
            d.default_value();
        }
    }

    #[test]
    fn io_direct_and_fsync_refuse_what_walnut_cannot_do() {
        assert_eq!(
            IoDirect::parse("wal, wal_init").unwrap(),
            IoDirect {
                data: false,
                wal: true,
                wal_init: true
            }
        );
        // `data` in any combination with the others.
        for (v, data, wal, wal_init) in [
            ("data", true, false, false),
            ("'data,wal,wal_init'", true, true, true),
            ("wal_init, DATA", true, false, true),
            ("wal,data", true, true, false),
            ("", false, false, false),
        ] {
            assert_eq!(
                IoDirect::parse(v).unwrap(),
                IoDirect {
                    data,
                    wal,
                    wal_init
                },
                "{v}"
            );
            IO_DIRECT.parse(v).unwrap();
        }
        assert_eq!(
            IO_DIRECT.parse("wal,bogus").unwrap_err().sqlstate,
            SqlState::INVALID_PARAMETER_VALUE
        );
        assert_eq!(
            FSYNC.parse("off").unwrap_err().sqlstate,
            SqlState::FEATURE_NOT_SUPPORTED
        );
        assert_eq!(FSYNC.parse("on").unwrap(), Val::Bool(true));
    }

    #[test]
    fn io_method_takes_worker_sync_and_io_uring() {
        assert_eq!(IO_METHOD.parse("worker").unwrap(), Val::Enum("worker"));
        assert_eq!(IO_METHOD.parse("SYNC").unwrap(), Val::Enum("sync"));
        assert_eq!(IO_METHOD.parse("io_uring").unwrap(), Val::Enum("io_uring"));
        assert_eq!(
            crate::aio::IoMethod::parse("io_uring"),
            crate::aio::IoMethod::IoUring
        );
        assert!(IO_METHOD.parse("posix_aio").is_err());
        assert!(IO_WORKERS.parse("0").is_err());
        assert_eq!(EFFECTIVE_IO_CONCURRENCY.parse("0").unwrap(), Val::Int(0));
    }

    #[test]
    fn max_parallel_maintenance_workers_is_0_to_1024_default_2() {
        assert_eq!(
            MAX_PARALLEL_MAINTENANCE_WORKERS.default_value(),
            Val::Int(2)
        );
        assert!(MAX_PARALLEL_MAINTENANCE_WORKERS.parse("1025").is_err());
        assert!(GUCS
            .iter()
            .any(|g| g.name == "max_parallel_maintenance_workers"));
        assert_eq!(
            crate::StorageConfig::default().max_parallel_maintenance_workers,
            2
        );
    }

    #[test]
    fn recovery_workers_is_minus_1_to_64_default_one_per_core_and_never_0() {
        assert_eq!(RECOVERY_WORKERS.default_value(), Val::Int(-1));
        assert!(RECOVERY_WORKERS.parse("65").is_err());
        assert!(RECOVERY_WORKERS.parse("-2").is_err());
        assert_eq!(RECOVERY_WORKERS.parse("1").unwrap(), Val::Int(1));
        assert!(check_recovery_workers(Val::Int(0)).is_err());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(crate::StorageConfig::default().recovery_workers, cores);
    }

    #[test]
    fn recovery_prefetch_defaults_to_try_and_decode_buffer_to_512kb() {
        assert_eq!(RECOVERY_PREFETCH.default_value(), Val::Enum("try"));
        assert!(RECOVERY_PREFETCH.parse("maybe").is_err());
        assert_eq!(WAL_DECODE_BUFFER_SIZE.default_value(), Val::Int(512));
        assert!(WAL_DECODE_BUFFER_SIZE.parse("32kB").is_err());
        let c = crate::StorageConfig::default();
        assert!(c.recovery_prefetch);
        assert_eq!(c.wal_decode_buffer_bytes, 512 << 10);
    }

    #[test]
    fn recovery_parallel_backlog_is_kb_default_16mb() {
        assert_eq!(
            RECOVERY_PARALLEL_BACKLOG.default_value(),
            Val::Int(16 * 1024)
        );
        assert_eq!(RECOVERY_PARALLEL_BACKLOG.parse("0").unwrap(), Val::Int(0));
        assert!(RECOVERY_PARALLEL_BACKLOG.parse("-1").is_err());
        assert_eq!(
            crate::StorageConfig::default().recovery_parallel_backlog_bytes,
            16 << 20
        );
    }

    #[test]
    fn maintenance_io_concurrency_is_0_to_1000_default_16() {
        assert_eq!(MAINTENANCE_IO_CONCURRENCY.default_value(), Val::Int(16));
        assert_eq!(MAINTENANCE_IO_CONCURRENCY.parse("0").unwrap(), Val::Int(0));
        assert_eq!(
            MAINTENANCE_IO_CONCURRENCY.parse("1000").unwrap(),
            Val::Int(1000)
        );
        assert!(MAINTENANCE_IO_CONCURRENCY.parse("1001").is_err());
        assert!(MAINTENANCE_IO_CONCURRENCY.parse("-1").is_err());
        assert!(GUCS.iter().any(|g| g.name == "maintenance_io_concurrency"));
        assert_eq!(
            crate::StorageConfig::default().maintenance_io_concurrency,
            16
        );
    }

    #[test]
    fn io_combine_limit_is_in_blocks_up_to_1mb() {
        assert_eq!(IO_COMBINE_LIMIT.default_value(), Val::Int(16));
        assert_eq!(IO_COMBINE_LIMIT.parse("256kB").unwrap(), Val::Int(32));
        assert_eq!(IO_COMBINE_LIMIT.parse("1MB").unwrap(), Val::Int(128));
        assert_eq!(IO_COMBINE_LIMIT.parse("1").unwrap(), Val::Int(1));
        assert!(IO_COMBINE_LIMIT.parse("0").is_err());
        assert!(IO_COMBINE_LIMIT.parse("2MB").is_err());
        assert!(GUCS.iter().any(|g| g.name == "io_combine_limit"));
        assert_eq!(
            crate::StorageConfig::default().io_combine_limit,
            16,
            "StorageConfig reads it"
        );
    }
}

/// `io_method` (PostgreSQL 18): how reads ahead are done (see [`crate::aio`]). `worker`: a
/// pool of `io_workers` threads reads ahead of scans of O_DIRECT data files (`io_direct =
/// data`; buffered reads are read ahead by the kernel); `io_uring`: one thread submits them in
/// batches through io_uring (Linux only: refused with 0A000 elsewhere; a kernel that refuses
/// `io_uring_setup` fails the start with 0A000 naming the setting); `sync`: no read-ahead.
pub static IO_METHOD: GucDef = GucDef {
    name: "io_method",
    kind: Kind::Enum(&["worker", "sync", "io_uring"]),
    default: "worker",
    context: Context::Postmaster,
    category: "Resource Usage / I/O",
    description: "Selects the method for executing asynchronous I/O.",
    check: Some(check_io_method),
};

/// `io_workers` (PostgreSQL 18): threads of `io_method = worker`. walnut starts them once, so
/// unlike PostgreSQL's (`sighup`) a change needs a restart.
pub static IO_WORKERS: GucDef = GucDef {
    name: "io_workers",
    kind: int(1, 32, Unit::None),
    default: "3",
    context: Context::Postmaster,
    category: "Resource Usage / I/O",
    description: "Number of IO worker processes, for io_method=worker.",
    check: None,
};

/// `effective_io_concurrency`, blocks: how far a sequential scan reads ahead with `io_method =
/// worker` (0 turns read-ahead off). walnut reads it from the server's configuration
/// (`sighup`), not per session as PostgreSQL's `user` parameter.
pub static EFFECTIVE_IO_CONCURRENCY: GucDef = GucDef {
    name: "effective_io_concurrency",
    kind: int(0, 1000, Unit::None),
    default: "16",
    context: Context::Sighup,
    category: "Resource Usage / I/O",
    description:
        "Number of simultaneous requests that can be handled efficiently by the disk subsystem.",
    check: None,
};

fn check_io_method(v: Val) -> Result<Val> {
    if v == Val::Enum("io_uring") && !cfg!(target_os = "linux") {
        return Err(Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            "io_method = io_uring is not supported on this platform",
        )
        .with_detail("io_method = worker reads ahead with a pool of I/O threads."));
    }
    Ok(v)
}

/// `io_combine_limit`, 8 kB blocks: most adjacent blocks one read ahead brings in with one
/// system call (see [`crate::aio`]). PostgreSQL 18's range and default: 1 ..= 128 blocks (1 MB,
/// `PG_IOV_MAX` on Unix; 32, 256 kB, in PostgreSQL 17), default 128 kB. walnut reads it from
/// the server's configuration (`sighup`), not per session as PostgreSQL's `user` parameter,
/// and has no separate `io_max_combine_limit`.
pub static IO_COMBINE_LIMIT: GucDef = GucDef {
    name: "io_combine_limit",
    kind: int(1, crate::smgr::MAX_IO_COMBINE_BLOCKS as i64, Unit::Blocks),
    default: "128kB",
    context: Context::Sighup,
    category: "Resource Usage / I/O",
    description: "Limit on the size of data reads and writes.",
    check: None,
};

/// `max_parallel_maintenance_workers` (PostgreSQL 11): helper threads the heap scan of an index
/// build may use besides the session's own thread (`Txn::add_primary_key`; how many follows
/// the table's size, as PostgreSQL's `plan_create_index_workers`). PostgreSQL sets it per
/// session (`user`); walnut's storage reads it at start and reload (`sighup`).
pub static MAX_PARALLEL_MAINTENANCE_WORKERS: GucDef = GucDef {
    name: "max_parallel_maintenance_workers",
    kind: int(0, 1024, Unit::None),
    default: "2",
    context: Context::Sighup,
    category: "Resource Usage / Worker Processes",
    description: "Sets the maximum number of parallel processes per maintenance operation.",
    check: None,
};

/// `recovery_workers` (walnut's; PostgreSQL redoes on one process): threads that apply WAL
/// records' block changes in crash recovery and in a standby's replay, each owning the blocks
/// that hash to it ([`crate::recovery::parallel`]). 1 is the serial redo; -1 (the default) is
/// the number of cores ([`crate::StorageConfig::recovery_workers`]).
pub static RECOVERY_WORKERS: GucDef = GucDef {
    name: "recovery_workers",
    kind: int(-1, 64, Unit::None),
    default: "-1",
    context: Context::Postmaster,
    category: "Write-Ahead Log / Recovery",
    description: "Sets the number of threads that apply WAL in recovery and standby replay (-1: one per core).",
    check: Some(check_recovery_workers),
};

/// `recovery_parallel_backlog` (walnut's), kB: a standby's replay hands blocks to the
/// `recovery_workers` only while it is at least this far behind the WAL its walreceiver has
/// flushed, and applies serially on the startup thread from the moment it catches up
/// (storage DESIGN.md, "Parallel redo": handing each record over costs latency that only a
/// backlog repays). 0: parallel whenever there is WAL to replay. Crash recovery, and the
/// standby's replay of its own WAL at start, always use the workers.
pub static RECOVERY_PARALLEL_BACKLOG: GucDef = GucDef {
    name: "recovery_parallel_backlog",
    kind: int(0, INT_MAX, Unit::Kb),
    default: "16MB",
    context: Context::Postmaster,
    category: "Write-Ahead Log / Recovery",
    description:
        "Sets how far behind a standby's replay must be before it applies WAL in parallel.",
    check: None,
};

/// `recovery_prefetch` (PostgreSQL 15's): redo asks for the blocks of records it has decoded
/// but not applied yet, so their reads overlap ([`crate::recovery::prefetch`]). `try` (the
/// default) and `on` prefetch where the data files allow it (`posix_fadvise` for buffered
/// files; the I/O workers for O_DIRECT files once they run); `off` never. Read at start
/// (PostgreSQL's is `sighup`).
pub static RECOVERY_PREFETCH: GucDef = GucDef {
    name: "recovery_prefetch",
    kind: Kind::Enum(&["off", "on", "try"]),
    default: "try",
    context: Context::Postmaster,
    category: "Write-Ahead Log / Recovery",
    description: "Prefetch referenced blocks during recovery.",
    check: None,
};

/// `wal_decode_buffer_size` (PostgreSQL 15's), kB: how far ahead of the record being
/// applied redo decodes WAL to find blocks to prefetch. PostgreSQL's range and default (64 kB
/// ..= 1 GB, 512 kB).
pub static WAL_DECODE_BUFFER_SIZE: GucDef = GucDef {
    name: "wal_decode_buffer_size",
    kind: int(64, 1024 * 1024, Unit::Kb),
    default: "512kB",
    context: Context::Postmaster,
    category: "Write-Ahead Log / Recovery",
    description: "Buffer size for reading ahead in the WAL during recovery.",
    check: None,
};

fn check_recovery_workers(v: Val) -> Result<Val> {
    if v == Val::Int(0) {
        return Err(Error::user(
            SqlState::INVALID_PARAMETER_VALUE,
            "invalid value for parameter \"recovery_workers\": 0",
        )
        .with_detail("Use 1 for serial redo, or -1 for one worker per core."));
    }
    Ok(v)
}

/// `maintenance_io_concurrency`, blocks: how far maintenance scans read ahead with `io_method
/// = worker` ([`crate::aio::ReadAhead::maintenance`]; 0 turns it off). PostgreSQL's range and
/// default (0 ..= 1000, 16); read from the server's configuration (`sighup`), not per session
/// as PostgreSQL's `user` parameter.
pub static MAINTENANCE_IO_CONCURRENCY: GucDef = GucDef {
    name: "maintenance_io_concurrency",
    kind: int(0, 1000, Unit::None),
    default: "16",
    context: Context::Sighup,
    category: "Resource Usage / I/O",
    description: "A variant of \"effective_io_concurrency\" that is used for maintenance work.",
    check: None,
};

/// `autovacuum`: whether the autovacuum launcher starts workers (`crate::autovacuum`).
pub static AUTOVACUUM: GucDef = GucDef {
    name: "autovacuum",
    kind: Kind::Bool,
    default: "on",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Starts the autovacuum subprocess.",
    check: None,
};

/// `autovacuum_naptime`, seconds: the launcher starts a worker this often.
pub static AUTOVACUUM_NAPTIME: GucDef = GucDef {
    name: "autovacuum_naptime",
    kind: int(1, INT_MAX / 1000, Unit::S),
    default: "1min",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Time to sleep between autovacuum runs.",
    check: None,
};

/// `autovacuum_max_workers`: most autovacuum workers running at once.
pub static AUTOVACUUM_MAX_WORKERS: GucDef = GucDef {
    name: "autovacuum_max_workers",
    kind: int(1, 64, Unit::None),
    default: "3",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Sets the maximum number of simultaneously running autovacuum worker processes.",
    check: None,
};

/// `vacuum_freeze_min_age`, xids: VACUUM freezes the xids at least this much older than the
/// oldest running one (DESIGN.md of the storage, "Freezing"). Server-wide in walnut (PostgreSQL
/// lets a session set it); `VACUUM FREEZE` uses 0.
pub static VACUUM_FREEZE_MIN_AGE: GucDef = GucDef {
    name: "vacuum_freeze_min_age",
    kind: int(0, 1_000_000_000, Unit::None),
    default: "50000000",
    context: Context::Sighup,
    category: "Client Connection Defaults / Statement Behavior",
    description: "Minimum age at which VACUUM should freeze a table row.",
    check: None,
};

/// `autovacuum_freeze_max_age`, xids: autovacuum VACUUMs a table whose `relfrozenxid` is
/// older than this, even with `autovacuum = off`, so that the transaction status store can
/// forget the xids below it.
pub static AUTOVACUUM_FREEZE_MAX_AGE: GucDef = GucDef {
    name: "autovacuum_freeze_max_age",
    kind: int(100_000, 2_000_000_000, Unit::None),
    default: "200000000",
    context: Context::Postmaster,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Age at which to autovacuum a table to prevent transaction ID wraparound.",
    check: None,
};

/// `autovacuum_vacuum_threshold`, rows: dead versions a table needs, beyond the scale
/// factor's share, before autovacuum vacuums it.
pub static AUTOVACUUM_VACUUM_THRESHOLD: GucDef = GucDef {
    name: "autovacuum_vacuum_threshold",
    kind: int(0, INT_MAX, Unit::None),
    default: "50",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Minimum number of tuple updates or deletes prior to vacuum.",
    check: None,
};

/// `autovacuum_vacuum_max_threshold`, rows (PostgreSQL 18): the dead-version threshold never
/// exceeds this, whatever the table's size; -1 disables the cap.
pub static AUTOVACUUM_VACUUM_MAX_THRESHOLD: GucDef = GucDef {
    name: "autovacuum_vacuum_max_threshold",
    kind: int(-1, INT_MAX, Unit::None),
    default: "100000000",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Maximum number of tuple updates or deletes prior to vacuum.",
    check: None,
};

/// `autovacuum_vacuum_scale_factor`: the fraction of a table's live rows added to
/// `autovacuum_vacuum_threshold`.
pub static AUTOVACUUM_VACUUM_SCALE_FACTOR: GucDef = GucDef {
    name: "autovacuum_vacuum_scale_factor",
    kind: Kind::Real {
        min: 0.0,
        max: 100.0,
    },
    default: "0.2",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Number of tuple updates or deletes prior to vacuum as a fraction of reltuples.",
    check: None,
};

/// `autovacuum_vacuum_insert_threshold`, rows: inserts since the last VACUUM, beyond the
/// insert scale factor's share, that make autovacuum vacuum a table; -1 disables it.
pub static AUTOVACUUM_VACUUM_INSERT_THRESHOLD: GucDef = GucDef {
    name: "autovacuum_vacuum_insert_threshold",
    kind: int(-1, INT_MAX, Unit::None),
    default: "1000",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description:
        "Minimum number of tuple inserts prior to vacuum, or -1 to disable insert vacuums.",
    check: None,
};

/// `autovacuum_vacuum_insert_scale_factor`: the fraction of a table's live rows added to
/// `autovacuum_vacuum_insert_threshold`.
pub static AUTOVACUUM_VACUUM_INSERT_SCALE_FACTOR: GucDef = GucDef {
    name: "autovacuum_vacuum_insert_scale_factor",
    kind: Kind::Real {
        min: 0.0,
        max: 100.0,
    },
    default: "0.2",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Number of tuple inserts prior to vacuum as a fraction of reltuples.",
    check: None,
};

/// `autovacuum_vacuum_cost_delay`, ms: an autovacuum worker's pause each time its cost
/// balance reaches the limit; -1 takes `vacuum_cost_delay`'s 0. Whole milliseconds (PostgreSQL
/// also takes fractions).
pub static AUTOVACUUM_VACUUM_COST_DELAY: GucDef = GucDef {
    name: "autovacuum_vacuum_cost_delay",
    kind: int(-1, 100, Unit::Ms),
    default: "2ms",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Vacuum cost delay in milliseconds, for autovacuum.",
    check: None,
};

/// `autovacuum_vacuum_cost_limit`: the cost after which an autovacuum worker pauses, shared
/// among the running workers; -1 takes `vacuum_cost_limit`.
pub static AUTOVACUUM_VACUUM_COST_LIMIT: GucDef = GucDef {
    name: "autovacuum_vacuum_cost_limit",
    kind: int(-1, 10000, Unit::None),
    default: "-1",
    context: Context::Sighup,
    category: "Vacuuming / Automatic Vacuuming",
    description: "Vacuum cost amount available before napping, for autovacuum.",
    check: None,
};

/// `vacuum_cost_limit`: the cost after which a vacuum pauses (PostgreSQL lets a session set
/// it; walnut reads it server-wide, for autovacuum).
pub static VACUUM_COST_LIMIT: GucDef = GucDef {
    name: "vacuum_cost_limit",
    kind: int(1, 10000, Unit::None),
    default: "200",
    context: Context::Sighup,
    category: "Vacuuming / Cost-Based Vacuum Delay",
    description: "Vacuum cost amount available before napping.",
    check: None,
};

/// `vacuum_cost_page_hit`: the cost of a page a vacuum finds in the buffer pool.
pub static VACUUM_COST_PAGE_HIT: GucDef = GucDef {
    name: "vacuum_cost_page_hit",
    kind: int(0, 10000, Unit::None),
    default: "1",
    context: Context::Sighup,
    category: "Vacuuming / Cost-Based Vacuum Delay",
    description: "Vacuum cost for a page found in the buffer cache.",
    check: None,
};

/// `vacuum_cost_page_miss`: the cost of a page a vacuum reads from its file.
pub static VACUUM_COST_PAGE_MISS: GucDef = GucDef {
    name: "vacuum_cost_page_miss",
    kind: int(0, 10000, Unit::None),
    default: "2",
    context: Context::Sighup,
    category: "Vacuuming / Cost-Based Vacuum Delay",
    description: "Vacuum cost for a page not found in the buffer cache.",
    check: None,
};

/// `vacuum_cost_page_dirty`: the cost of a clean page a vacuum dirties.
pub static VACUUM_COST_PAGE_DIRTY: GucDef = GucDef {
    name: "vacuum_cost_page_dirty",
    kind: int(0, 10000, Unit::None),
    default: "20",
    context: Context::Sighup,
    category: "Vacuuming / Cost-Based Vacuum Delay",
    description: "Vacuum cost for a page dirtied by vacuum.",
    check: None,
};

/// `log_autovacuum_min_duration`, ms: log each autovacuum that runs at least this long; 0
/// logs all of them, -1 none.
pub static LOG_AUTOVACUUM_MIN_DURATION: GucDef = GucDef {
    name: "log_autovacuum_min_duration",
    kind: int(-1, INT_MAX, Unit::Ms),
    default: "10min",
    context: Context::Sighup,
    category: "Reporting and Logging / What to Log",
    description:
        "Sets the minimum execution time above which vacuum actions by autovacuum will be logged.",
    check: None,
};

/// `vacuum_buffer_usage_limit`, kB: the ring of buffer-pool frames a VACUUM (or autovacuum)
/// reads its misses into, so that it does not push the rest of the pool out
/// ([`crate::bufpool::BufferPool::use_ring`]); 0 uses the whole pool, as without a ring.
/// PostgreSQL 17's default and range (0, or 128 kB to 16 GB; at most an eighth of
/// `shared_buffers` is used). walnut reads it server-wide (PostgreSQL lets each session set it).
pub static VACUUM_BUFFER_USAGE_LIMIT: GucDef = GucDef {
    name: "vacuum_buffer_usage_limit",
    kind: int(0, 16 * 1024 * 1024, Unit::Kb),
    default: "2MB",
    context: Context::Sighup,
    category: "Resource Usage / Memory",
    description: "Sets the buffer pool size for VACUUM, ANALYZE, and autovacuum.",
    check: Some(check_vacuum_buffer_usage_limit),
};

fn check_vacuum_buffer_usage_limit(v: Val) -> Result<Val> {
    if let Val::Int(n) = v {
        if n != 0 && n < 128 {
            return Err(Error::user(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("invalid value for parameter \"vacuum_buffer_usage_limit\": {n}"),
            )
            .with_detail(
                "\"vacuum_buffer_usage_limit\" must be 0 or between 128 kB and 16777216 kB.",
            ));
        }
    }
    Ok(v)
}
