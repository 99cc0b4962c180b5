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

mod reader;
mod record;
mod ring;
mod segment;
#[cfg(test)]
mod tests;
mod wal;

pub use record::{
    align8, decode_record, encode_record, record_len, BLOCK_HEADER_LEN, MAX_RECORD_LEN,
    RECORD_ALIGN, RECORD_HEADER_LEN,
};
pub use segment::{parse_segment_file_name, segment_file_name, segment_of, WAL_SEGMENT_SIZE};
pub use wal::{Wal, WalReader, NUM_INSERT_SLOTS};

use std::path::PathBuf;
use walnut_common::{BlockNumber, Lsn, RelFileId, Xid};

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
    /// Per-block redo data (resource-manager specific).
    pub data: Vec<u8>,
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

/// Static configuration of the WAL.
#[derive(Clone, Debug)]
pub struct WalConfig {
    /// Directory holding segment files (`DATADIR/wal`).
    pub dir: PathBuf,
    /// WAL buffer size in bytes (`wal_buffers`); a power of two, at least 1 MiB.
    pub wal_buffers_bytes: usize,
    /// Segments kept preallocated ahead of the insert position, and recycled (`wal_recycle`).
    pub prealloc_segments: u32,
}

/// Per-call group commit settings (the committing session's GUCs; PostgreSQL applies the
/// leader's `commit_delay`).
#[derive(Clone, Copy, Debug, Default)]
pub struct FlushOpts {
    /// `commit_delay` in µs: the leader sleeps this long before flushing, if at least
    /// `commit_siblings` other transactions are active. 0 = never.
    pub commit_delay_us: u32,
    /// `commit_siblings`: minimum number of other active transactions for the delay.
    pub commit_siblings: u32,
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
    /// fdatasync calls.
    pub wal_sync: u64,
    /// Time in write calls, µs.
    pub wal_write_time_us: u64,
    /// Time in sync calls, µs.
    pub wal_sync_time_us: u64,
    /// Flushes done by a group-commit leader.
    pub group_flushes: u64,
    /// Flush requests (commits) satisfied, by leader or as followers.
    pub group_commits: u64,
}

impl WalConfig {
    /// Default `wal_buffers_bytes`: 16 MiB (PostgreSQL's maximum automatic `wal_buffers`).
    pub const DEFAULT_WAL_BUFFERS_BYTES: usize = 16 * 1024 * 1024;
    /// Default `prealloc_segments`.
    pub const DEFAULT_PREALLOC_SEGMENTS: u32 = 2;

    /// A configuration for `dir` with the defaults above.
    pub fn new(dir: impl Into<PathBuf>) -> WalConfig {
        WalConfig {
            dir: dir.into(),
            wal_buffers_bytes: Self::DEFAULT_WAL_BUFFERS_BYTES,
            prealloc_segments: Self::DEFAULT_PREALLOC_SEGMENTS,
        }
    }
}
