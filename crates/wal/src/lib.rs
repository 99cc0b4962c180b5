//! walnut's write-ahead log: record format, concurrent insertion, WAL buffers, segment files,
//! flush with group commit, and the reader used by redo.
//!
//! The WAL knows nothing about pages. A record is a resource-manager id, an info byte, the xid,
//! a list of block references (each with optional full-page image and per-block data) and main
//! data. See DESIGN.md beside this crate for the formats, protocols and crash windows.
//!
//! API CONTRACT (written by the storage author; the WAL implementer fills in the bodies and may
//! add private modules, but keeps these public signatures):
#![forbid(unsafe_code)]

pub mod adaptive;
mod commit;
mod flush;
mod group_commit;
pub mod guc;
mod probe;
mod reader;
pub mod receive;
mod record;
mod ring;
mod segment;
pub mod senders;
mod sync;
#[cfg(test)]
mod tests;
mod wal;

pub use commit::{CommitOpts, CommitOutcome, SessionId, SynchronousCommit};
pub use guc::GUCS;
pub use probe::{choose_sync_method, probe, probe_flush_rate, ProbeResult, ProbeSpec};
pub use record::{
    align8, decode_record, decode_record_with, encode_record, encode_record_with, record_len,
    BLOCK_HEADER_LEN, MAX_RECORD_LEN, RECORD_ALIGN, RECORD_HEADER_LEN,
};
pub use segment::{
    find_segment, list_segments, parse_segment_file_name, segment_file_name, segment_of,
    FIRST_TIMELINE, WAL_SEGMENT_SIZE,
};
pub use wal::{Wal, WalReader, NUM_INSERT_SLOTS};

use std::path::PathBuf;
use walnut_common::guc::Settings;
use walnut_common::{BlockNumber, Error, Lsn, RelFileId, Result, Xid};

/// Resource manager ids: which redo routine understands a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RmgrId(pub u8);

/// One block a record touches.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockRef {
    /// Relation file the block belongs to.
    pub rel: RelFileId,
    /// Block number within that file.
    pub block: BlockNumber,
    /// Redo initializes the page from scratch (a new page); it need not be read first.
    pub will_init: bool,
    /// Full-page image (exactly `BLCKSZ` bytes) of the page *after* this record's change. When
    /// present, redo restores the image and does not apply `data`.
    pub image: Option<Vec<u8>>,
    /// `image` holds the page image LZ4-compressed (an `lz4_flex` block, as in the record), not
    /// the page: what a reader that defers decompression returns
    /// ([`WalReader::defer_image_decompression`]), so that redo decompresses it
    /// ([`BlockRef::restore_image`]) on the thread that applies the block. False in records to
    /// insert, which the WAL compresses itself.
    pub image_lz4: bool,
    /// Per-block redo data (resource-manager specific).
    pub data: Vec<u8>,
}

impl BlockRef {
    /// Writes the full-page image into `page` (`BLCKSZ` bytes), decompressing it if it is held
    /// compressed (into a scratch page, copied once whole). Returns false, leaving `page`
    /// alone, if the block has no image; on an error `page` is left alone too. Source:
    /// PostgreSQL `xlogreader.c`, `RestoreBlockImage`.
    ///
    /// # Errors
    /// Corruption if the image is not `BLCKSZ` bytes or does not decompress to exactly
    /// `BLCKSZ` bytes ("invalid compressed image").
    pub fn restore_image(&self, page: &mut [u8]) -> Result<bool> {
        let Some(img) = &self.image else {
            return Ok(false);
        };
        if page.len() != walnut_common::BLCKSZ {
            return Err(Error::internal("an image is restored into a whole page"));
        }
        if self.image_lz4 {
            // Into a scratch page first: a failure part-way must not leave the buffer half
            // overwritten.
            let mut scratch = [0u8; walnut_common::BLCKSZ];
            match lz4_flex::block::decompress_into(img, &mut scratch) {
                Ok(n) if n == walnut_common::BLCKSZ => {
                    page.copy_from_slice(&scratch);
                    Ok(true)
                }
                _ => Err(Error::corruption(format!(
                    "invalid compressed image of block {} of relation file {}",
                    self.block.0, self.rel.0
                ))),
            }
        } else if img.len() == walnut_common::BLCKSZ {
            page.copy_from_slice(img);
            Ok(true)
        } else {
            Err(Error::corruption("full-page image is not BLCKSZ bytes"))
        }
    }
}

/// A WAL record to insert.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Which redo routine handles it.
    pub rmgr: RmgrId,
    /// Record type within the resource manager.
    pub info: u8,
    /// Transaction that wrote it (`Xid::INVALID` for none).
    pub xid: Xid,
    /// `RECORD_MULTI_BLOCK_ATOMIC`: the blocks must be redone together (e.g. a B-tree split);
    /// a parallel redo must not expose one block's change without the others.
    pub flags: u8,
    /// Blocks touched, at most 255.
    pub blocks: Vec<BlockRef>,
    /// Resource-manager specific payload not tied to one block.
    pub main_data: Vec<u8>,
}

/// `Record::flags` bit: the record's blocks must be redone together.
pub const RECORD_MULTI_BLOCK_ATOMIC: u8 = 0x01;

/// Resource manager of the WAL's own records. [`Wal::insert`] refuses it from callers, so no
/// other record can be taken for one.
pub const RM_WAL: RmgrId = RmgrId(0xFF);
/// Flush mark: main data = u64 LSN before which everything was durable when the mark was
/// inserted. No blocks; the reader skips it. See DESIGN.md, "Flush marks".
pub const WAL_FLUSH_MARK: u8 = 0x01;

/// A record read back from the WAL.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedRecord {
    /// Start position of the record.
    pub lsn: Lsn,
    /// Position just after the record (aligned); the page LSN redo sets.
    pub end_lsn: Lsn,
    /// The record itself.
    pub record: Record,
}

/// How a WAL flush is made durable (`wal_sync_method`). Source: PostgreSQL `xlog.c`
/// `issue_xlog_fsync` and `get_sync_bit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncMethod {
    /// `write` then `fdatasync(2)`: data and the size, no other metadata.
    Fdatasync,
    /// `write` then `fsync(2)`: data and all metadata.
    Fsync,
    /// Segments opened with `O_DSYNC`: each `write` is durable on return; no separate sync call.
    OpenDatasync,
    /// Segments opened with `O_SYNC`: as `OpenDatasync`, metadata included.
    OpenSync,
}

impl SyncMethod {
    /// Every method, in the order `walnut test-fsync` reports them.
    pub const ALL: [SyncMethod; 4] = [
        SyncMethod::Fdatasync,
        SyncMethod::Fsync,
        SyncMethod::OpenDatasync,
        SyncMethod::OpenSync,
    ];

    /// The GUC spelling (`fdatasync`, `fsync`, `open_datasync`, `open_sync`).
    pub fn name(self) -> &'static str {
        match self {
            SyncMethod::Fdatasync => "fdatasync",
            SyncMethod::Fsync => "fsync",
            SyncMethod::OpenDatasync => "open_datasync",
            SyncMethod::OpenSync => "open_sync",
        }
    }

    /// Parses the GUC spelling, case-insensitively; `None` for anything else.
    pub fn parse(s: &str) -> Option<SyncMethod> {
        SyncMethod::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
    }

    /// True for the `open_*` methods, where the write itself is the sync.
    pub fn syncs_on_write(self) -> bool {
        matches!(self, SyncMethod::OpenDatasync | SyncMethod::OpenSync)
    }

    /// The open flags segment files need for this method (and for `direct`, O_DIRECT).
    pub fn open_mode(self, direct: bool) -> walnut_io::OpenMode {
        walnut_io::OpenMode {
            create: false,
            direct,
            dsync: self == SyncMethod::OpenDatasync,
            sync: self == SyncMethod::OpenSync,
        }
    }
}

impl std::fmt::Display for SyncMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How full-page images are compressed in WAL records (`wal_compression`; PostgreSQL's
/// `XLogCompressBackupBlock` in `xloginsert.c`). Records of either kind decode under any
/// setting: each image says how it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum WalCompression {
    /// Images are stored whole (`BLCKSZ` bytes).
    Off,
    /// Images are LZ4 block-compressed (the `lz4_flex` crate), when that saves space: walnut's
    /// default, unlike PostgreSQL's `off` (see DESIGN.md, "Full-page image compression").
    #[default]
    Lz4,
}

impl WalCompression {
    /// Parses a value the registry admitted: `off`, or `on`/`lz4` (walnut's `on` means lz4;
    /// PostgreSQL's means pglz, which walnut refuses).
    pub fn parse(s: &str) -> WalCompression {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "false" | "no" | "0" => WalCompression::Off,
            _ => WalCompression::Lz4,
        }
    }

    /// The GUC spelling.
    pub fn name(self) -> &'static str {
        match self {
            WalCompression::Off => "off",
            WalCompression::Lz4 => "lz4",
        }
    }
}

/// How the group-commit leader decides whether to wait before flushing (`group_commit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GroupCommitMode {
    /// walnut's default: the wait is chosen from measured flush latency, commit arrivals and
    /// the progress of active transactions (see DESIGN.md, "Adaptive group commit").
    #[default]
    Adaptive,
    /// PostgreSQL's rule, kept exactly: sleep `commit_delay` µs if at least `commit_siblings`
    /// other transactions are active.
    Fixed,
}

impl GroupCommitMode {
    /// Parses `adaptive` or `fixed`, case-insensitively.
    pub fn parse(s: &str) -> Option<GroupCommitMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "adaptive" => Some(GroupCommitMode::Adaptive),
            "fixed" => Some(GroupCommitMode::Fixed),
            _ => None,
        }
    }

    /// The GUC spelling.
    pub fn name(self) -> &'static str {
        match self {
            GroupCommitMode::Adaptive => "adaptive",
            GroupCommitMode::Fixed => "fixed",
        }
    }
}

/// Static configuration of the WAL.
#[derive(Clone, Debug)]
pub struct WalConfig {
    /// Directory holding segment files (`DATADIR/wal`).
    pub dir: PathBuf,
    /// The timeline WAL is written on (the control file's), which names the segments this WAL
    /// creates or recycles; [`Wal::open`] renames the segment holding its end position and
    /// later ones from older timelines to it.
    pub timeline: u32,
    /// WAL buffer size in bytes (`wal_buffers`); a power of two, at least 1 MiB.
    pub wal_buffers_bytes: usize,
    /// Segments kept preallocated ahead of the insert position.
    pub prealloc_segments: u32,
    /// `wal_sync_method`.
    pub sync_method: SyncMethod,
    /// `io_direct` includes `wal`: segments are written with O_DIRECT from 4096-aligned buffers.
    pub direct: bool,
    /// `io_direct` includes `wal_init`: new segments are zero-filled with O_DIRECT.
    pub direct_init: bool,
    /// `wal_init_zero`: new segments are filled with zeros (otherwise only sized with
    /// `set_len`, so a later flush may also have to commit block allocation metadata).
    pub init_zero: bool,
    /// `wal_recycle`: old segments are renamed to future names rather than removed.
    pub recycle: bool,
    /// `wal_sync_range`: with `wal_sync_method = fdatasync`, `wal_init_zero = on` and a file
    /// system that offers a cache flusher ([`walnut_io::Vfs::cache_flusher`]), a flush writes
    /// back only the written range of each fully allocated segment and then flushes the
    /// device cache once, instead of `fdatasync(2)` of each segment; so no flush also writes a
    /// segment's inode for its new modification time (see DESIGN.md, "Range sync").
    pub sync_range: bool,
    /// `group_commit`.
    pub group_commit: GroupCommitMode,
    /// `wal_compression`: how full-page images are stored (a reload may change it; see
    /// [`Wal::apply_settings`]).
    pub compression: WalCompression,
    /// The disk's capacity for durable WAL flushes, flushes/s back to back with `sync_method`,
    /// as the server's start-up probe measures it (`walnut test-fsync` measures the same); `None`
    /// if not measured. The adaptive controller compares it with the flush rate in use to tell
    /// a busy device from one with spare capacity (DESIGN.md, "Adaptive group commit").
    pub flush_capacity: Option<f64>,
}

/// Counters for `pg_stat_wal` and group-commit statistics. Times in µs.
#[derive(Clone, Debug, Default)]
pub struct WalStats {
    /// Records inserted.
    pub wal_records: u64,
    /// Full-page images inserted.
    pub wal_fpi: u64,
    /// Bytes inserted (including alignment).
    pub wal_bytes: u64,
    /// Times an inserter had to write out WAL buffers because they were full.
    pub wal_buffers_full: u64,
    /// write(2) calls.
    pub wal_write: u64,
    /// Sync operations: `fdatasync`/`fsync` calls, or device cache flushes under
    /// `wal_sync_range` (each covering the ranges written back before it).
    pub wal_sync: u64,
    /// Time in write calls, µs.
    pub wal_write_time_us: u64,
    /// Time in sync calls, µs.
    pub wal_sync_time_us: u64,
    /// Flushes done by a group-commit leader.
    pub group_flushes: u64,
    /// Flush requests (commits) satisfied: by a leader, as followers, or already durable on
    /// arrival.
    pub group_commits: u64,
    /// Histogram of waiting commit requests per flush: (bucket upper bound, flushes); the first
    /// bound is 0 (flushes that acknowledged no commit), the last is `u64::MAX` (open-ended).
    pub group_histogram: Vec<(u64, u64)>,
    /// Flushes by why the leader closed its group: (cause, all flushes, flushes that
    /// acknowledged exactly one commit). Causes: `background` (a flush for no commit: the WAL
    /// writer, a page write, a checkpoint), `fixed` (`group_commit = fixed`), `none_expected`
    /// (adaptive: no other session was expected in time), `patience` (adaptive: the wait ran
    /// out, or was zero).
    pub group_closed: Vec<(&'static str, u64, u64)>,
    /// Total time leaders kept their groups open before flushing, µs.
    pub group_wait_time_us: u64,
    /// The adaptive controller's current patience (the longest a leader will wait), µs.
    pub group_patience_us: u64,
    /// EWMA of how long leaders recently kept groups open (the current adaptive wait), µs.
    pub group_recent_wait_us: u64,
    /// EWMA of flush service time (write + sync), µs.
    pub group_flush_latency_us: u64,
    /// Committing sessions the adaptive controller tracks.
    pub group_sessions: u64,
    /// The device's flush capacity the adaptive controller works with, flushes/s
    /// ([`WalConfig::flush_capacity`]); `None` if unknown.
    pub group_flush_capacity: Option<f64>,
    /// The adaptive controller's last probe pair: its higher flush rate ÷ the flush capacity;
    /// at or above `adaptive::BUSY_FRACTION` the device counts as busy. `None` if the capacity
    /// is unknown or no probe pair has ended yet.
    pub group_utilization: Option<f64>,
}

impl WalConfig {
    /// The largest `wal_buffers_bytes` the automatic setting chooses: one segment (16 MiB), as
    /// PostgreSQL's `XLOGChooseNumBuffers`.
    pub const MAX_AUTO_WAL_BUFFERS_BYTES: usize = 16 * 1024 * 1024;
    /// Default `prealloc_segments`.
    pub const DEFAULT_PREALLOC_SEGMENTS: u32 = 2;

    /// A configuration for `dir` with every parameter at its default, and the largest
    /// automatic `wal_buffers`.
    pub fn new(dir: impl Into<PathBuf>) -> WalConfig {
        WalConfig::from_settings(dir, &Settings::builtin(), None)
    }

    /// The configuration the settings give, for the WAL in `dir`. `shared_buffers_bytes` sizes
    /// the automatic `wal_buffers` (`None`: the largest). `sync_method` is the setting's value
    /// (the server records the start-up probe's choice there); `flush_capacity` is left
    /// unknown and `io_direct` off, for the caller to fill in.
    pub fn from_settings(
        dir: impl Into<PathBuf>,
        s: &Settings,
        shared_buffers_bytes: Option<u64>,
    ) -> WalConfig {
        WalConfig {
            dir: dir.into(),
            timeline: FIRST_TIMELINE,
            wal_buffers_bytes: WalConfig::buffers_for(
                s.int(&guc::WAL_BUFFERS),
                shared_buffers_bytes,
            ),
            prealloc_segments: Self::DEFAULT_PREALLOC_SEGMENTS,
            sync_method: SyncMethod::parse(&s.text(&guc::WAL_SYNC_METHOD))
                .expect("the registry admits only known methods"),
            direct: false,
            direct_init: false,
            init_zero: s.bool(&guc::WAL_INIT_ZERO),
            recycle: s.bool(&guc::WAL_RECYCLE),
            sync_range: s.bool(&guc::WAL_SYNC_RANGE),
            group_commit: GroupCommitMode::parse(&s.text(&guc::GROUP_COMMIT))
                .expect("the registry admits only known modes"),
            compression: WalCompression::parse(&s.text(&guc::WAL_COMPRESSION)),
            flush_capacity: None,
        }
    }

    /// The WAL buffer size in bytes for `wal_buffers` = `pages` (8 kB pages; -1 = automatic),
    /// as a power of two of at least 1 MiB (the ring's requirement). Automatic is 1/32 of
    /// `shared_buffers_bytes`, at most one segment (PostgreSQL's `XLOGChooseNumBuffers`);
    /// `None` takes the largest.
    pub fn buffers_for(pages: i64, shared_buffers_bytes: Option<u64>) -> usize {
        let bytes = if pages < 0 {
            shared_buffers_bytes.map_or(Self::MAX_AUTO_WAL_BUFFERS_BYTES as u64, |b| {
                (b / 32).min(Self::MAX_AUTO_WAL_BUFFERS_BYTES as u64)
            })
        } else {
            pages as u64 * walnut_common::BLCKSZ as u64
        };
        (bytes.max(1 << 20) as usize).next_power_of_two()
    }
}
