//! The configuration parameters the WAL reads (PostgreSQL's names; `group_commit` and
//! `wal_sync_range` are walnut's). [`GUCS`] lists them for the server's registry.

use walnut_common::guc::{int, Context, GucDef, Kind, Unit, Val};
use walnut_common::{Error, Result, SqlState};

const WAL_SETTINGS: &str = "Write-Ahead Log / Settings";

/// `wal_segment_size`, MB: fixed at 16 ([`crate::WAL_SEGMENT_SIZE`]); shown as `16MB`, which
/// `pg_receivewal` and `pg_basebackup` read with `SHOW wal_segment_size`.
pub static WAL_SEGMENT_SIZE: GucDef = GucDef {
    name: "wal_segment_size",
    kind: int(16, 16, Unit::Mb),
    default: "16MB",
    context: Context::Internal,
    category: "Preset Options",
    description: "Shows the size of write ahead log segments.",
    check: None,
};

/// `synchronous_standby_names`: the standbys synchronous commits wait for
/// ([`crate::senders::SyncStandbys::parse`]); empty: none.
pub static SYNCHRONOUS_STANDBY_NAMES: GucDef = GucDef {
    name: "synchronous_standby_names",
    kind: Kind::Str,
    default: "",
    context: Context::Sighup,
    category: "Replication / Primary Server",
    description: "Number of synchronous standbys and list of names of potential synchronous ones.",
    check: Some(check_sync_names),
};

fn check_sync_names(v: Val) -> Result<Val> {
    if let Val::Str(s) = &v {
        crate::senders::SyncStandbys::parse(s).map_err(|e| {
            Error::user(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("invalid value for parameter \"synchronous_standby_names\": \"{s}\""),
            )
            .with_detail(e)
        })?;
    }
    Ok(v)
}

/// `max_standby_apply_lag`, ms (walnut's; 0, the default: off): a commit returns only once
/// every synchronous standby that reports its apply capacity could replay the WAL up to the
/// commit within this time at that capacity
/// ([`crate::senders::WalSenders::wait_for_apply_lag`]). openGauss's `recovery_time_target`
/// bounds the same thing, a failover's replay time.
pub static MAX_STANDBY_APPLY_LAG: GucDef = GucDef {
    name: "max_standby_apply_lag",
    kind: int(0, i32::MAX as i64, Unit::Ms),
    default: "0",
    context: Context::Sighup,
    category: "Replication / Primary Server",
    description: "Slows commits while a synchronous standby would need longer than this to replay the WAL it has not replayed.",
    check: None,
};

/// `synchronous_commit`: how long a commit waits (see [`crate::SynchronousCommit`]).
pub static SYNCHRONOUS_COMMIT: GucDef = GucDef {
    name: "synchronous_commit",
    kind: Kind::Enum(&["on", "off", "local", "remote_write", "remote_apply"]),
    default: "on",
    context: Context::User,
    category: WAL_SETTINGS,
    description: "Sets the current transaction's synchronization level.",
    check: None,
};

/// `commit_delay`, µs: see [`crate::CommitOpts::commit_delay_us`].
pub static COMMIT_DELAY: GucDef = GucDef {
    name: "commit_delay",
    kind: int(0, 100_000, Unit::None),
    default: "0",
    context: Context::User,
    category: WAL_SETTINGS,
    description:
        "Sets the delay in microseconds between transaction commit and flushing WAL to disk.",
    check: None,
};

/// `commit_siblings`: see [`crate::CommitOpts::commit_siblings`].
pub static COMMIT_SIBLINGS: GucDef = GucDef {
    name: "commit_siblings",
    kind: int(0, 1000, Unit::None),
    default: "5",
    context: Context::User,
    category: WAL_SETTINGS,
    description: "Sets the minimum number of concurrent open transactions required before performing commit_delay.",
    check: None,
};

/// `group_commit` (walnut): [`crate::GroupCommitMode`].
pub static GROUP_COMMIT: GucDef = GucDef {
    name: "group_commit",
    kind: Kind::Enum(&["adaptive", "fixed"]),
    default: "adaptive",
    context: Context::Postmaster,
    category: WAL_SETTINGS,
    description: "Selects walnut's group commit policy: adaptive (no tuning) or fixed (commit_delay and commit_siblings, as PostgreSQL).",
    check: None,
};

/// `wal_buffers`, 8 kB pages; -1 chooses 1/32 of `shared_buffers` (see
/// [`crate::WalConfig::buffers_for`]).
pub static WAL_BUFFERS: GucDef = GucDef {
    name: "wal_buffers",
    kind: int(-1, 262_143, Unit::Blocks),
    default: "-1",
    context: Context::Postmaster,
    category: WAL_SETTINGS,
    description: "Sets the number of disk-page buffers in shared memory for WAL.",
    check: None,
};

/// `wal_init_zero`: [`crate::WalConfig::init_zero`].
pub static WAL_INIT_ZERO: GucDef = GucDef {
    name: "wal_init_zero",
    kind: Kind::Bool,
    default: "on",
    context: Context::Sighup,
    category: WAL_SETTINGS,
    description: "Writes zeroes to new WAL files before first use.",
    check: None,
};

/// `wal_recycle`: [`crate::WalConfig::recycle`].
pub static WAL_RECYCLE: GucDef = GucDef {
    name: "wal_recycle",
    kind: Kind::Bool,
    default: "on",
    context: Context::Sighup,
    category: WAL_SETTINGS,
    description: "Recycles WAL files by renaming them.",
    check: None,
};

/// `wal_sync_method`: [`crate::SyncMethod`]. Unset, the server chooses it at start-up.
pub static WAL_SYNC_METHOD: GucDef = GucDef {
    name: "wal_sync_method",
    kind: Kind::Enum(&["fdatasync", "fsync", "open_sync", "open_datasync"]),
    default: "fdatasync",
    context: Context::Postmaster,
    category: WAL_SETTINGS,
    description: "Selects the method used for forcing WAL updates to disk.",
    check: None,
};

/// `wal_sync_range` (walnut): [`crate::WalConfig::sync_range`].
pub static WAL_SYNC_RANGE: GucDef = GucDef {
    name: "wal_sync_range",
    kind: Kind::Bool,
    default: "on",
    context: Context::Postmaster,
    category: WAL_SETTINGS,
    description: "With fdatasync, makes WAL durable by writing back the written range and flushing the disk cache, where the file system allows it.",
    check: None,
};

/// `wal_writer_delay`, ms: how often the WAL writer flushes.
pub static WAL_WRITER_DELAY: GucDef = GucDef {
    name: "wal_writer_delay",
    kind: int(1, 10_000, Unit::Ms),
    default: "200ms",
    context: Context::Sighup,
    category: WAL_SETTINGS,
    description: "Time between WAL flushes performed in the WAL writer.",
    check: None,
};

/// `wal_writer_flush_after`, 8 kB blocks: an asynchronous commit (`synchronous_commit = off`)
/// that leaves at least this much WAL unflushed wakes the WAL writer at once instead of
/// leaving it to its next `wal_writer_delay` round; 0 wakes it at every asynchronous commit.
/// PostgreSQL's (xlog.c `XLogSetAsyncXactLSN`, walwriter.c), whose default is 1 MB; walnut's
/// is 256 kB, because its WAL is several times smaller per transaction (full-page images are
/// LZ4-compressed by default: 1.3 kB against 8.8 kB per pgbench transaction at scale 100), so
/// that about as many commits wait for a flush as in PostgreSQL. A standby sees
/// asynchronous commits no sooner than they are flushed, and replays them in bursts of this
/// size: this bounds its lag under load as well.
pub static WAL_WRITER_FLUSH_AFTER: GucDef = GucDef {
    name: "wal_writer_flush_after",
    kind: int(0, walnut_common::guc::INT_MAX, Unit::Blocks),
    default: "256kB",
    context: Context::Sighup,
    category: WAL_SETTINGS,
    description: "Amount of WAL written out by WAL writer that triggers a flush.",
    check: None,
};

/// `wal_level`: walnut writes what `replica` needs, always; the other levels are refused.
pub static WAL_LEVEL: GucDef = GucDef {
    name: "wal_level",
    kind: Kind::Enum(&["replica"]),
    default: "replica",
    context: Context::Postmaster,
    category: WAL_SETTINGS,
    description: "Sets the level of information written to the WAL (walnut: replica only).",
    check: None,
};

/// `wal_compression`: how full-page images are stored (see [`crate::WalCompression`]).
/// walnut compresses with LZ4 by default (PostgreSQL: `off`); `on` means `lz4` here (pglz in
/// PostgreSQL). `pglz` and `zstd` are refused (0A000). Reloadable (`sighup`), where
/// PostgreSQL's may be set per session by a superuser.
pub static WAL_COMPRESSION: GucDef = GucDef {
    name: "wal_compression",
    kind: Kind::Enum(&["lz4", "off", "on", "pglz", "zstd"]),
    default: "lz4",
    context: Context::Sighup,
    category: WAL_SETTINGS,
    description: "Compresses full-page writes written in WAL file with specified method.",
    check: Some(check_wal_compression),
};

fn check_wal_compression(v: Val) -> Result<Val> {
    match v {
        Val::Enum(m @ ("pglz" | "zstd")) => Err(Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            format!("wal_compression = {m} is not supported by this build"),
        )
        .with_detail(
            "walnut compresses full-page images with lz4 (on means lz4), or not at all (off).",
        )),
        other => Ok(other),
    }
}

/// Every parameter of this crate.
pub static GUCS: &[&GucDef] = &[
    &WAL_SEGMENT_SIZE,
    &COMMIT_DELAY,
    &COMMIT_SIBLINGS,
    &GROUP_COMMIT,
    &MAX_STANDBY_APPLY_LAG,
    &SYNCHRONOUS_COMMIT,
    &SYNCHRONOUS_STANDBY_NAMES,
    &WAL_BUFFERS,
    &WAL_COMPRESSION,
    &WAL_INIT_ZERO,
    &WAL_LEVEL,
    &WAL_RECYCLE,
    &WAL_SYNC_METHOD,
    &WAL_SYNC_RANGE,
    &WAL_WRITER_DELAY,
    &WAL_WRITER_FLUSH_AFTER,
];

#[cfg(test)]
mod tests {
    #[test]
    fn wal_compression_takes_lz4_on_and_off_and_refuses_pglz_and_zstd() {
        use super::WAL_COMPRESSION;
        use crate::WalCompression;
        for (v, want) in [
            ("lz4", WalCompression::Lz4),
            ("on", WalCompression::Lz4),
            ("off", WalCompression::Off),
        ] {
            WAL_COMPRESSION.parse(v).unwrap();
            assert_eq!(WalCompression::parse(v), want);
        }
        for v in ["pglz", "zstd"] {
            let e = WAL_COMPRESSION.parse(v).unwrap_err();
            assert_eq!(e.sqlstate, walnut_common::SqlState::FEATURE_NOT_SUPPORTED);
        }
        assert_eq!(
            WalCompression::parse(WAL_COMPRESSION.default),
            WalCompression::Lz4
        );
    }

    #[test]
    fn every_default_parses() {
        for d in super::GUCS {
            d.default_value();
        }
    }
}
