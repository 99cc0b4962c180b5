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

use std::path::PathBuf;
use std::sync::Arc;
use walnut_common::{BlockNumber, Lsn, RelFileId, Result, Xid};

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

/// The write-ahead log of one data directory.
pub struct Wal {
    _private: (),
}

impl Wal {
    /// Creates an empty WAL in `cfg.dir` (initdb): the directory, the first segment(s)
    /// preallocated. The first record will be at `Lsn::FIRST`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(_vfs: Arc<dyn walnut_io::Vfs>, _cfg: &WalConfig) -> Result<()> {
        todo!()
    }

    /// Opens the WAL for appending after recovery: the next record goes at `end_lsn` (the end of
    /// the last valid record found by [`WalReader`]); bytes after it in the current segment are
    /// overwritten. `redo_lsn` is the redo point of the last checkpoint (see [`Wal::redo_lsn`]).
    /// `active_xacts` returns the number of transactions with an xid, for `commit_siblings`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn open(
        _vfs: Arc<dyn walnut_io::Vfs>,
        _cfg: WalConfig,
        _end_lsn: Lsn,
        _redo_lsn: Lsn,
        _active_xacts: Arc<dyn Fn() -> usize + Send + Sync>,
    ) -> Result<Arc<Wal>> {
        todo!()
    }

    /// Inserts one record, concurrently with other inserters (reserve space atomically, copy in
    /// parallel; PostgreSQL's `XLogInsertRecord`). `assemble` builds the record given the current
    /// redo point, so that the caller takes a full-page image of each block whose page LSN is
    /// `<= redo_lsn`. If a checkpoint moves the redo point between assembly and reservation,
    /// `assemble` is called again (PostgreSQL's `RedoRecPtr` recheck).
    ///
    /// Returns (start LSN, end LSN). The record is durable only after `flush(end)`.
    ///
    /// # Errors
    /// I/O errors when the buffers were full and had to be written out.
    pub fn insert(&self, _assemble: &mut dyn FnMut(Lsn) -> Record) -> Result<(Lsn, Lsn)> {
        todo!()
    }

    /// Waits until all WAL up to `lsn` is durable, by group commit (PostgreSQL 9.3+'s
    /// `XLogFlush`): one leader writes and syncs everything inserted so far; followers wait and
    /// never sync again what is already synced. Returns at once if `lsn <= flush_lsn()`.
    /// Blocks the calling OS thread: never call it from an async task.
    ///
    /// # Errors
    /// A failed write or sync is fatal: the implementation panics (PANIC) rather than retry.
    pub fn flush(&self, _lsn: Lsn, _opts: FlushOpts) -> Result<()> {
        todo!()
    }

    /// End of the last reserved record (PostgreSQL's insert position), bytes.
    pub fn insert_lsn(&self) -> Lsn {
        todo!()
    }

    /// Everything before this is durable.
    pub fn flush_lsn(&self) -> Lsn {
        todo!()
    }

    /// The current checkpoint's redo point.
    pub fn redo_lsn(&self) -> Lsn {
        todo!()
    }

    /// Starts a checkpoint: with every insertion excluded, sets the redo point to the current
    /// insert position and returns it (PostgreSQL's `CreateCheckPoint` holding all insertion
    /// locks). Records inserted afterwards see the new redo point in `assemble`.
    pub fn begin_checkpoint(&self) -> Lsn {
        todo!()
    }

    /// Recycles or removes segments wholly before `lsn` (after a checkpoint whose redo point is
    /// `lsn`), keeping `prealloc_segments` recycled for future use.
    ///
    /// # Errors
    /// I/O errors.
    pub fn remove_old_segments(&self, _lsn: Lsn) -> Result<()> {
        todo!()
    }

    /// Starts the background WAL writer thread (for `synchronous_commit = off`): every
    /// `delay_ms` it flushes what was inserted. Stops when the `Wal` is dropped or `shutdown`.
    pub fn start_wal_writer(self: &Arc<Self>, _delay_ms: u64) {
        todo!()
    }

    /// Flushes everything and stops background threads.
    pub fn shutdown(&self) {
        todo!()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> WalStats {
        todo!()
    }
}

/// Reads records sequentially from a start LSN (redo).
pub struct WalReader {
    _private: (),
}

impl WalReader {
    /// Opens the WAL in `dir` for reading from `start` (which must be a record start).
    ///
    /// # Errors
    /// I/O errors; a missing segment for `start` is a corruption error.
    pub fn open(_vfs: Arc<dyn walnut_io::Vfs>, _dir: PathBuf, _start: Lsn) -> Result<WalReader> {
        todo!()
    }

    /// The next valid record, or `None` at the end of valid WAL (zeroed, torn or stale tail).
    ///
    /// # Errors
    /// I/O errors.
    pub fn next_record(&mut self) -> Result<Option<DecodedRecord>> {
        todo!()
    }

    /// End of the last record returned (where a new WAL would continue).
    pub fn end_lsn(&self) -> Lsn {
        todo!()
    }
}

/// Encodes a record at `lsn` into its on-disk bytes (header, blocks, main data, padding to 8).
pub fn encode_record(_lsn: Lsn, _rec: &Record) -> Vec<u8> {
    todo!()
}

/// Decodes one record from `bytes` expected at `lsn`.
///
/// # Errors
/// A corruption error for a bad CRC, a wrong LSN in the header, or malformed lengths.
pub fn decode_record(_lsn: Lsn, _bytes: &[u8]) -> Result<DecodedRecord> {
    todo!()
}
