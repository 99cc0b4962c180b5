//! Storage manager: relation files `base/<relfile>` of 8 KiB blocks, through the I/O trait.
//!
//! A relation's size in blocks is tracked in memory (`nblocks`). New blocks are allocated by
//! extending the file at once, so that a full disk fails the allocation rather than a later
//! write-out: one block by writing zeros (`Smgr::extend`, PostgreSQL's `mdextend`), several in
//! one call (`Smgr::extend_by`, PostgreSQL 16's `mdzeroextend`) by `fallocate` when more than
//! 8, else (or where the file system refuses `fallocate`) by one write of zeros. Neither the
//! zeros nor the allocation are synced, so a file may be shorter than the blocks redo finds in
//! the WAL after a crash: reading a block at or past the file's end yields an all-zero ("new")
//! page, which redo then initializes from a WAL record with `will_init` or a full-page image.
//! Allocated space that no page was written to reads as zeros too (a new page).
//!
//! With `io_direct = data` the files are opened with O_DIRECT ([`Smgr::with_direct_io`]):
//! reads and writes bypass the page cache, so every buffer, offset and length must be aligned
//! to [`DIRECT_IO_ALIGN`]. Offsets and lengths are (blocks are 8 KiB); the buffer pool's frames
//! are not, so a block goes through a 4096-aligned per-thread bounce block ([`AlignedBlock`])
//! unless the caller's buffer happens to be aligned. An 8 KiB copy costs well under a
//! microsecond, against tens of microseconds for the device read or write it accompanies.
//!
//! Adjacent blocks can be read and written together (`Smgr::read_blocks`,
//! `Smgr::write_blocks`, PostgreSQL 17's `smgrreadv`/`smgrwritev`): one system call for up to
//! [`MAX_IO_COMBINE_BLOCKS`] blocks, through a per-thread aligned bounce buffer where O_DIRECT
//! needs one (and for reads always).

use crate::stats::{IoOp, IoStats};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use walnut_common::{panic_fatal, BlockNumber, Error, RelFileId, Result, BLCKSZ};
use walnut_io::{AlignedBuf, FileIo, OpenMode, Vfs, DIRECT_IO_ALIGN};

/// One block, aligned for O_DIRECT. The alignment must be a literal in `repr`; the assertions
/// below tie it to [`DIRECT_IO_ALIGN`].
#[repr(C, align(4096))]
struct AlignedBlock([u8; BLCKSZ]);

const _: () = assert!(std::mem::align_of::<AlignedBlock>() == DIRECT_IO_ALIGN);
const _: () = assert!(std::mem::size_of::<AlignedBlock>() == BLCKSZ);
const _: () = assert!(BLCKSZ % DIRECT_IO_ALIGN == 0);

/// Blocks [`Smgr::extend_by`] writes as zeros in one write at most, when it does not use
/// `fallocate`.
pub const ZERO_CHUNK_BLOCKS: usize = 16;

/// [`Smgr::extend_by`] reserves more blocks than this with `fallocate` instead of writing
/// zeros (PostgreSQL's `mdzeroextend`: "More than 8 blocks").
pub const FALLOCATE_MIN_BLOCKS: u32 = 8;

/// [`ZERO_CHUNK_BLOCKS`] zero blocks, aligned for O_DIRECT (in `.bss`: no memory until used).
#[repr(C, align(4096))]
struct AlignedZeros([u8; BLCKSZ * ZERO_CHUNK_BLOCKS]);

const _: () = assert!(std::mem::align_of::<AlignedZeros>() == DIRECT_IO_ALIGN);

/// The zeros `Smgr::extend_by` writes, aligned so that O_DIRECT can write them as they are.
static ZEROS: AlignedZeros = AlignedZeros([0; BLCKSZ * ZERO_CHUNK_BLOCKS]);

/// errno values of a file system that cannot `fallocate` (Linux: EOPNOTSUPP 95, EINVAL 22).
const EOPNOTSUPP: i32 = 95;
const EINVAL: i32 = 22;

thread_local! {
    /// Each thread's bounce block for O_DIRECT reads and writes of unaligned buffers.
    static BOUNCE: std::cell::RefCell<Box<AlignedBlock>> =
        std::cell::RefCell::new(Box::new(AlignedBlock([0; BLCKSZ])));
}

/// Most adjacent blocks one combined read or write transfers ([`Smgr::read_blocks`],
/// [`Smgr::write_blocks`]): 128 blocks, 1 MiB, PostgreSQL 18's `PG_IOV_MAX` on Unix and the
/// largest `io_combine_limit`.
pub const MAX_IO_COMBINE_BLOCKS: usize = 128;

/// Splits `0..n` into the ranges one combined write covers: maximal runs of at most `max`
/// items in which each item after the first `continues` the one before it (the next block of
/// the same relation). `continues(i)` is asked for `i` in `1..n`.
pub fn runs(
    n: usize,
    max: usize,
    continues: impl Fn(usize) -> bool,
) -> impl Iterator<Item = std::ops::Range<usize>> {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= n {
            return None;
        }
        let mut end = start + 1;
        while end < n && end - start < max && continues(end) {
            end += 1;
        }
        let run = start..end;
        start = end;
        Some(run)
    })
}

thread_local! {
    /// Each thread's aligned bounce buffer for combined reads and writes, grown on demand up
    /// to [`MAX_IO_COMBINE_BLOCKS`] blocks.
    static BOUNCE_RUN: std::cell::RefCell<Option<AlignedBuf>> = const { std::cell::RefCell::new(None) };
}

/// The first `n` blocks of the thread's run bounce buffer, grown if it is smaller.
// `map_or(true, ..)` rather than `is_none_or`, which needs Rust 1.82 (the workspace says 1.80).
#[allow(clippy::unnecessary_map_or)]
fn bounce_run(b: &mut Option<AlignedBuf>, n: usize) -> &mut [u8] {
    let len = n * BLCKSZ;
    if b.as_ref().map_or(true, |b| b.len() < len) {
        *b = Some(AlignedBuf::zeroed(len));
    }
    &mut b.as_mut().expect("just set").as_mut_slice()[..len]
}

/// True if `buf` starts at a [`DIRECT_IO_ALIGN`] boundary.
// `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace says 1.80).
#[allow(clippy::manual_is_multiple_of)]
fn is_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize) % DIRECT_IO_ALIGN == 0
}

/// Per-relation state kept in memory.
pub struct Relation {
    /// The relation file.
    pub id: RelFileId,
    file: Arc<dyn FileIo>,
    /// Blocks allocated: the file holds them (as zeros until a page is written), except after
    /// a crash or redo, when it may hold fewer.
    pub nblocks: AtomicU32,
    /// Block where the last heap insert found room: where the next one tries first.
    pub insert_hint: AtomicU32,
    /// While a VACUUM cuts an empty tail off, the first block no insert may place a version
    /// on (its step 6); `u32::MAX` otherwise. Readers go by `nblocks`, which is lowered only
    /// once the tail is known empty. See [`Relation::insert_end`].
    pub insert_limit: AtomicU32,
    /// The heap's free-space map (VACUUM fills it, inserts read it when the insert hint's page
    /// is full; loaded from `base/<relfile>_fsm` at the first open, written back by
    /// [`Smgr::write_free_space_maps`]).
    pub fsm: crate::fsm::FreeSpaceMap,
    /// Serializes relation extension.
    pub extend_lock: Mutex<()>,
    /// Held by VACUUM of a heap for its whole run: one at a time per relation (PostgreSQL's
    /// `ShareUpdateExclusiveLock`).
    pub vacuum_lock: Mutex<()>,
    /// Set by [`crate::Storage::remove_relation`] before it takes `vacuum_lock`: a VACUUM
    /// that holds the lock stops at its next page (PostgreSQL's DROP TABLE waits for the
    /// VACUUM's lock instead, and cancels an autovacuum's).
    pub dropping: AtomicBool,
    /// VACUUMs waiting for `vacuum_lock`: an autovacuum that holds it stops at its next page
    /// and lets them have it.
    pub vacuum_waiters: AtomicU32,
    /// B-tree structure lock: shared for searches and leaf changes, exclusive for splits.
    pub tree_lock: RwLock<()>,
    /// B-tree root block, cached from the meta page (`u32::MAX` = not read yet). Changes only
    /// under `tree_lock` held exclusively.
    pub btree_root: AtomicU32,
    /// For a B-tree: the relation file of the heap it indexes, looked up in the catalog by the
    /// first range scan that reads ahead (`btree::range`); never changes (TRUNCATE makes new
    /// files for both).
    pub index_heap: OnceLock<RelFileId>,
}

impl Relation {
    /// The first block an insert may not place a version on: `nblocks`, or lower while a
    /// VACUUM cuts an empty tail off (`insert_limit`).
    pub fn insert_end(&self) -> u32 {
        // The limit first: VACUUM lowers `nblocks` to the cut before it lifts the limit, so
        // a lifted limit read here comes with the lowered `nblocks`.
        let limit = self.insert_limit.load(Ordering::Acquire);
        self.nblocks.load(Ordering::Acquire).min(limit)
    }
}

/// The relation files of one data directory.
pub struct Smgr {
    vfs: Arc<dyn Vfs>,
    base: PathBuf,
    rels: RwLock<HashMap<RelFileId, Arc<Relation>>>,
    /// Files written since the last checkpoint; the checkpoint syncs them.
    dirty: Mutex<HashSet<RelFileId>>,
    /// False for `walnut verify`, which must change nothing: a partial block at a file's end
    /// is then left alone (and reported) instead of cut off.
    writable: bool,
    /// I/O counters (`pg_stat_io`).
    pub stats: Arc<IoStats>,
    /// `backend_flush_after`, pages (reloadable).
    pub backend_flush_after: AtomicU32,
    /// Sessions' evictions awaiting write-back by the background writer
    /// ([`crate::writeback`]).
    pub pending_writeback: crate::writeback::PendingWriteback,
    /// `io_direct` includes `data`: files are opened with O_DIRECT and every transfer is
    /// aligned.
    direct: bool,
    /// Serializes writing a map file (`write_free_space_maps`) with removing a relation's
    /// files (`unlink`), so that no map is written for a relation being dropped.
    fsm_io: Mutex<()>,
}

/// What a checkpoint's sync phase did (for the `log_checkpoints` line).
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncReport {
    /// Files fsynced.
    pub files: usize,
    /// The longest fsync.
    pub longest: Duration,
    /// All the fsyncs together.
    pub total: Duration,
}

impl Smgr {
    /// Opens the storage manager over `base` (`DATADIR/base`).
    pub fn new(vfs: Arc<dyn Vfs>, base: PathBuf) -> Smgr {
        Smgr {
            vfs,
            base,
            rels: RwLock::new(HashMap::new()),
            dirty: Mutex::new(HashSet::new()),
            writable: true,
            stats: Arc::default(),
            backend_flush_after: AtomicU32::new(0),
            pending_writeback: Default::default(),
            direct: false,
            fsm_io: Mutex::new(()),
        }
    }

    /// This storage manager, opening relation files with O_DIRECT if `direct` (`io_direct =
    /// data`). Call before any file is opened.
    pub fn with_direct_io(mut self, direct: bool) -> Smgr {
        assert!(
            self.rels.get_mut().is_empty(),
            "Smgr::with_direct_io after a file was opened"
        );
        self.direct = direct;
        self
    }

    /// True if relation files are read and written with O_DIRECT.
    pub fn direct_io(&self) -> bool {
        self.direct
    }

    /// A storage manager that never changes a file (for `walnut verify`); it must not be
    /// written through.
    pub fn read_only(vfs: Arc<dyn Vfs>, base: PathBuf) -> Smgr {
        Smgr {
            writable: false,
            ..Smgr::new(vfs, base)
        }
    }

    fn path(&self, id: RelFileId) -> PathBuf {
        self.base.join(id.0.to_string())
    }

    fn fsm_path(&self, id: RelFileId) -> PathBuf {
        self.base.join(crate::fsm::file_name(id.0))
    }

    /// The size of relation `id`'s free-space map file, bytes; 0 if it has none (yet).
    pub fn free_space_map_bytes(&self, id: RelFileId) -> u64 {
        self.vfs
            .open(&self.fsm_path(id), OpenMode::default())
            .and_then(|f| f.len())
            .unwrap_or(0)
    }

    /// The categories in relation `id`'s map file, if it has one that decodes; a file that
    /// does not is ignored with a warning (the map is a hint; VACUUM fills it again).
    fn read_free_space_map(&self, id: RelFileId) -> Option<Vec<u8>> {
        let path = self.fsm_path(id);
        match crate::control::read_all(&*self.vfs, &path)
            .and_then(|b| b.map(|b| crate::fsm::decode(&b)).transpose())
        {
            Ok(cats) => cats,
            Err(e) => {
                tracing::warn!("ignoring \"{}\": {e}", path.display());
                None
            }
        }
    }

    /// Fills `rel`'s free-space map from categories its file held, ignoring entries past the
    /// relation's end (a truncation, or a power loss that lost an extension, after the map
    /// was written) and marking the map changed then, so that the next checkpoint writes it
    /// without them.
    fn load_free_space_map(rel: &Relation, cats: &[u8]) {
        let n = (rel.nblocks.load(Ordering::Acquire) as usize).min(cats.len());
        rel.fsm.load(&cats[..n]);
        if n < cats.len() {
            rel.fsm.mark_changed();
        }
    }

    /// Writes the free-space map of every open relation whose map changed since it was last
    /// written (a checkpoint's step 3), each replaced as the control file is
    /// ([`crate::control::durable_replace`]: `base/<relfile>_fsm.tmp`, fsync, rename, fsync of
    /// `base`). Not logged, like PostgreSQL's FSM: a crash leaves each file as of this write
    /// or the last one, both valid hints. Each map is written under `fsm_io`, and only while
    /// its relation is still open and not being dropped, so that a drop (`Smgr::unlink`, which
    /// holds `fsm_io` too) never leaves a map behind. A map whose write fails is marked
    /// changed again for the next checkpoint, and its temporary file removed. Returns the
    /// maps written.
    ///
    /// # Errors
    /// The first I/O error creating, writing or renaming a file (the others are still tried).
    ///
    /// # Panics
    /// PANICs ([`panic_fatal`]) if an fsync fails.
    pub fn write_free_space_maps(&self) -> Result<usize> {
        let rels: Vec<Arc<Relation>> = self.rels.read().values().cloned().collect();
        let mut written = 0;
        let mut result = Ok(());
        for rel in rels {
            let _io = self.fsm_io.lock();
            let open = self
                .rels
                .read()
                .get(&rel.id)
                .is_some_and(|r| Arc::ptr_eq(r, &rel));
            if !open || rel.dropping.load(Ordering::Acquire) {
                continue;
            }
            let Some(cats) = rel.fsm.take_changed(rel.nblocks.load(Ordering::Acquire)) else {
                continue;
            };
            let path = self.fsm_path(rel.id);
            match crate::control::durable_replace(&*self.vfs, &path, &crate::fsm::encode(&cats)) {
                Ok(()) => written += 1,
                Err(e) => {
                    rel.fsm.mark_changed();
                    let _ = self.vfs.remove(&path.with_extension("tmp"));
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        result.map(|()| written)
    }

    /// Creates the file for `id` if it does not exist (idempotent, so redo can repeat it) and
    /// syncs the directory.
    ///
    /// # Errors
    /// I/O errors creating or opening the file.
    ///
    /// # Panics
    /// PANICs if the directory's fsync fails (see `sync_base_dir`).
    pub fn create(&self, id: RelFileId) -> Result<Arc<Relation>> {
        let path = self.path(id);
        if !self.vfs.exists(&path) {
            // A map file left by a relation that had this number once must not describe the
            // new one. `unlink` makes the map's removal durable before it removes the file,
            // so none should be there; this is the guard if one is.
            if self.vfs.exists(&self.fsm_path(id)) {
                self.remove_free_space_map(id)?;
                self.sync_base_dir();
            }
            self.vfs
                .open(
                    &path,
                    OpenMode {
                        create: true,
                        ..Default::default()
                    },
                )
                .map_err(|e| {
                    Error::io(format!("could not create file \"{}\"", path.display()), e)
                })?;
            self.sync_base_dir();
        }
        self.open(id)
    }

    /// The relation `id`, opening its file on first use.
    ///
    /// # Errors
    /// I/O errors; NotFound if the file does not exist.
    pub fn open(&self, id: RelFileId) -> Result<Arc<Relation>> {
        if let Some(r) = self.rels.read().get(&id) {
            return Ok(r.clone());
        }
        // Read before taking the lock that every open takes.
        let cats = if self.writable {
            self.read_free_space_map(id)
        } else {
            None
        };
        let mut rels = self.rels.write();
        if let Some(r) = rels.get(&id) {
            return Ok(r.clone());
        }
        let path = self.path(id);
        let mode = OpenMode {
            direct: self.direct,
            ..Default::default()
        };
        let file = self
            .vfs
            .open(&path, mode)
            .map_err(|e| Error::io(format!("could not open file \"{}\"", path.display()), e))?;
        let len = if self.writable {
            cut_partial_block(file.as_ref(), &path)?
        } else {
            file.len()
                .map_err(|e| Error::io(format!("could not stat \"{}\"", path.display()), e))?
        };
        let nblocks = (len / BLCKSZ as u64) as u32;
        let rel = Arc::new(Relation {
            id,
            file,
            nblocks: AtomicU32::new(nblocks),
            insert_hint: AtomicU32::new(nblocks.saturating_sub(1)),
            insert_limit: AtomicU32::new(u32::MAX),
            extend_lock: Mutex::new(()),
            vacuum_lock: Mutex::new(()),
            dropping: AtomicBool::new(false),
            vacuum_waiters: AtomicU32::new(0),
            fsm: Default::default(),
            tree_lock: RwLock::new(()),
            btree_root: AtomicU32::new(u32::MAX),
            index_heap: OnceLock::new(),
        });
        if let Some(cats) = cats {
            Self::load_free_space_map(&rel, &cats);
        }
        rels.insert(id, rel.clone());
        Ok(rel)
    }

    /// The relation `id` if its file is open already (never opens it).
    pub fn open_if_cached(&self, id: RelFileId) -> Option<Arc<Relation>> {
        self.rels.read().get(&id).cloned()
    }

    /// The descriptor of `rel`'s file, for reads submitted through io_uring; `None` for a
    /// file system without descriptors (the in-memory test file systems).
    pub fn raw_fd<'a>(&self, rel: &'a Relation) -> Option<std::os::fd::BorrowedFd<'a>> {
        rel.file.raw_fd()
    }

    /// True if the relation's file exists.
    pub fn exists(&self, id: RelFileId) -> bool {
        self.rels.read().contains_key(&id) || self.vfs.exists(&self.path(id))
    }

    /// Reads block `block` into `buf` (at least [`BLCKSZ`] bytes; the first `BLCKSZ` are
    /// filled); past the end of the file the page is all zeros.
    ///
    /// # Errors
    /// I/O errors.
    pub fn read(&self, rel: &Relation, block: BlockNumber, buf: &mut [u8]) -> Result<()> {
        let buf = &mut buf[..BLCKSZ];
        if !self.direct || is_aligned(buf) {
            return self.read_into(rel, block, buf);
        }
        BOUNCE.with(|b| {
            let mut b = b.borrow_mut();
            self.read_into(rel, block, &mut b.0)?;
            buf.copy_from_slice(&b.0);
            Ok(())
        })
    }

    /// [`Smgr::read`] into `buf` of exactly [`BLCKSZ`] bytes, aligned if `self.direct`. An
    /// O_DIRECT read returns less than asked only at the end of the file; if that leaves an
    /// unaligned position (a partial block), the rest reads as zeros like the rest of a block
    /// past the end.
    fn read_into(&self, rel: &Relation, block: BlockNumber, buf: &mut [u8]) -> Result<()> {
        assert_eq!(buf.len(), BLCKSZ);
        assert!(!self.direct || is_aligned(buf), "unaligned O_DIRECT read");
        let off = block.0 as u64 * BLCKSZ as u64;
        let start = Instant::now();
        let mut done = 0;
        while done < BLCKSZ {
            let n = rel
                .file
                .read_at(&mut buf[done..BLCKSZ], off + done as u64)
                .map_err(|e| {
                    Error::io(
                        format!(
                            "could not read block {} in file \"base/{}\"",
                            block.0, rel.id.0
                        ),
                        e,
                    )
                })?;
            done += n;
            if n == 0 || (self.direct && done % DIRECT_IO_ALIGN != 0) {
                buf[done..BLCKSZ].fill(0);
                break;
            }
        }
        self.stats.add_since(IoOp::Read, 1, start);
        Ok(())
    }

    /// Writes block `block` (not durable until [`Smgr::sync_all`]). A failed write that
    /// extended the file part way is cut back to whole blocks (a data file is never left
    /// half-extended).
    ///
    /// # Errors
    /// I/O errors (53100 for ENOSPC).
    pub fn write(&self, rel: &Relation, block: BlockNumber, buf: &[u8]) -> Result<()> {
        let buf = &buf[..BLCKSZ];
        if !self.direct || is_aligned(buf) {
            return self.write_from(rel, block, buf);
        }
        BOUNCE.with(|b| {
            let mut b = b.borrow_mut();
            b.0.copy_from_slice(buf);
            self.write_from(rel, block, &b.0)
        })
    }

    /// [`Smgr::write`] from `buf` of exactly [`BLCKSZ`] bytes, aligned if `self.direct`.
    fn write_from(&self, rel: &Relation, block: BlockNumber, buf: &[u8]) -> Result<()> {
        assert_eq!(buf.len(), BLCKSZ);
        assert!(!self.direct || is_aligned(buf), "unaligned O_DIRECT write");
        let off = block.0 as u64 * BLCKSZ as u64;
        let start = Instant::now();
        rel.file.write_at(buf, off).map_err(|e| {
            // A write past the end that failed part way (ENOSPC after a short write) must not
            // leave a partial block: cut the file back to where the block starts. If even that
            // fails, the length is not a whole number of blocks and the next open cuts it back;
            // the block is still in the buffer pool and is written again later.
            if let Ok(len) = rel.file.len() {
                if len > off && len < off + BLCKSZ as u64 {
                    let _ = rel.file.set_len(off);
                }
            }
            Error::io(
                format!(
                    "could not write block {} in file \"base/{}\"",
                    block.0, rel.id.0
                ),
                e,
            )
        })?;
        // After the write, as PostgreSQL's mdwrite registers its fsync request: a checkpoint
        // that drains the set in between syncs a write that is complete, never one still to
        // come.
        self.dirty.lock().insert(rel.id);
        self.stats.add_since(IoOp::Write, 1, start);
        Ok(())
    }

    /// Writes `bufs.len()` adjacent blocks of `rel` starting at `first` (the first
    /// [`BLCKSZ`] bytes of each buffer) in one system call: `pwritev(2)` from the buffers as
    /// they are, or with O_DIRECT one aligned write through a per-thread bounce buffer,
    /// [`MAX_IO_COMBINE_BLOCKS`] blocks per write at most. PostgreSQL 17's `smgrwritev`/
    /// `mdwritev`. Not durable until [`Smgr::sync_all`]; the file is registered for it after
    /// the write, as [`Smgr::write`] does. A write that extended the file and failed part way
    /// is cut back to whole blocks.
    ///
    /// # Errors
    /// I/O errors (53100 for ENOSPC); any prefix of the blocks may have been written, and the
    /// caller keeps them all dirty.
    ///
    /// # Panics
    /// If a buffer is shorter than [`BLCKSZ`].
    pub fn write_blocks(&self, rel: &Relation, first: BlockNumber, bufs: &[&[u8]]) -> Result<()> {
        if bufs.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        let off = first.0 as u64 * BLCKSZ as u64;
        let blocks: Vec<&[u8]> = bufs.iter().map(|b| &b[..BLCKSZ]).collect();
        let r = if self.direct {
            BOUNCE_RUN.with(|b| {
                let mut b = b.borrow_mut();
                let mut done = 0;
                for chunk in blocks.chunks(MAX_IO_COMBINE_BLOCKS) {
                    let buf = bounce_run(&mut b, chunk.len());
                    for (i, blk) in chunk.iter().enumerate() {
                        buf[i * BLCKSZ..(i + 1) * BLCKSZ].copy_from_slice(blk);
                    }
                    rel.file.write_at(buf, off + done)?;
                    done += buf.len() as u64;
                }
                Ok(())
            })
        } else {
            rel.file.write_vectored_at(&blocks, off)
        };
        if let Err(e) = r {
            if let Ok(len) = rel.file.len() {
                let whole = len / BLCKSZ as u64 * BLCKSZ as u64;
                if len > off && whole != len {
                    let _ = rel.file.set_len(whole.max(off));
                }
            }
            return Err(Error::io(
                format!(
                    "could not write blocks {}..{} in file \"base/{}\"",
                    first.0,
                    first.0 as u64 + blocks.len() as u64 - 1,
                    rel.id.0
                ),
                e,
            ));
        }
        self.dirty.lock().insert(rel.id);
        self.stats
            .add_since(IoOp::Write, blocks.len() as u64, start);
        Ok(())
    }

    /// Reads `bufs.len()` adjacent blocks of `rel` starting at `first` into the first
    /// [`BLCKSZ`] bytes of each buffer, in one read of the whole run (through a per-thread
    /// aligned bounce buffer, so also with O_DIRECT); at or past the file's end a block is all
    /// zeros, as for [`Smgr::read`]. PostgreSQL 17's `smgrreadv`/`mdreadv`, which the read
    /// stream uses for runs of up to `io_combine_limit` blocks.
    ///
    /// # Errors
    /// I/O errors.
    ///
    /// # Panics
    /// If a buffer is shorter than [`BLCKSZ`] or there are more than
    /// [`MAX_IO_COMBINE_BLOCKS`] of them.
    pub fn read_blocks(
        &self,
        rel: &Relation,
        first: BlockNumber,
        bufs: &mut [&mut [u8]],
    ) -> Result<()> {
        let n = bufs.len();
        assert!(n <= MAX_IO_COMBINE_BLOCKS, "read of {n} blocks at once");
        if n == 0 {
            return Ok(());
        }
        let start = Instant::now();
        let off = first.0 as u64 * BLCKSZ as u64;
        BOUNCE_RUN.with(|b| {
            let mut b = b.borrow_mut();
            let buf = bounce_run(&mut b, n);
            let mut done = 0;
            while done < buf.len() {
                let got = rel
                    .file
                    .read_at(&mut buf[done..], off + done as u64)
                    .map_err(|e| {
                        Error::io(
                            format!(
                                "could not read blocks {}..{} in file \"base/{}\"",
                                first.0,
                                first.0 as u64 + n as u64 - 1,
                                rel.id.0
                            ),
                            e,
                        )
                    })?;
                done += got;
                if got == 0 || (self.direct && done % DIRECT_IO_ALIGN != 0) {
                    buf[done..].fill(0);
                    break;
                }
            }
            for (i, dst) in bufs.iter_mut().enumerate() {
                dst[..BLCKSZ].copy_from_slice(&buf[i * BLCKSZ..(i + 1) * BLCKSZ]);
            }
            Ok::<(), Error>(())
        })?;
        self.stats.add_since(IoOp::Read, n as u64, start);
        Ok(())
    }

    /// Tells the kernel that block `block` of `rel` will be read soon
    /// ([`walnut_io::FileIo::will_need`]: `posix_fadvise(POSIX_FADV_WILLNEED)`, PostgreSQL's
    /// `mdprefetch`). Does nothing for O_DIRECT files, whose reads bypass the page cache; a
    /// failure is ignored (the read comes anyway).
    pub fn will_need(&self, rel: &Relation, block: BlockNumber) {
        if !self.direct {
            let _ = rel
                .file
                .will_need(block.0 as u64 * BLCKSZ as u64, BLCKSZ as u64);
        }
    }

    /// Asks the kernel to write the cached writes of blocks `first .. first + nblocks` of
    /// `rel` to the device now, and waits for it ([`walnut_io::FileIo::flush_range`]); with
    /// `nblocks` 0, from `first` to the end of the file. A pacing hint, not durability: the
    /// checkpoint's fsync still makes them durable. Nothing to do with `io_direct = data`.
    ///
    /// # Panics
    /// PANICs if it fails: a write-back error may not be reported to the next fsync.
    pub fn flush_range(&self, rel: &Relation, first: BlockNumber, nblocks: u32) {
        if self.direct {
            return; // O_DIRECT: the writes are on the device already, nothing is cached
        }
        let start = Instant::now();
        let off = first.0 as u64 * BLCKSZ as u64;
        if let Err(e) = rel.file.flush_range(off, nblocks as u64 * BLCKSZ as u64) {
            panic_fatal(&format!(
                "could not flush dirty data in file \"base/{}\": {e}",
                rel.id.0
            ));
        }
        self.stats.add_since(IoOp::Writeback, nblocks as u64, start);
    }

    /// The relation files written since the last checkpoint's sync phase began.
    pub fn dirty_files(&self) -> Vec<Arc<Relation>> {
        let ids: Vec<RelFileId> = self.dirty.lock().iter().copied().collect();
        let rels = self.rels.read();
        ids.iter().filter_map(|id| rels.get(id).cloned()).collect()
    }

    /// Allocates the next block of `rel` ([`Smgr::extend_by`] of one block: zeros written at
    /// once). The caller holds `extend_lock`.
    ///
    /// # Errors
    /// As [`Smgr::extend_by`].
    pub fn extend(&self, rel: &Relation) -> Result<BlockNumber> {
        self.extend_by(rel, 1)
    }

    /// Allocates the next `nblocks` blocks of `rel` (at least 1) in one call and returns the
    /// first; the caller holds `extend_lock`. PostgreSQL 16's `smgrzeroextend`/`mdzeroextend`
    /// (`src/backend/storage/smgr/md.c`): more than [`FALLOCATE_MIN_BLOCKS`] blocks are
    /// reserved with `fallocate` ([`walnut_io::FileIo::allocate`]), which writes no data;
    /// fewer, or a file system that refuses `fallocate` (EOPNOTSUPP, EINVAL), get zeros written
    /// in one write per [`ZERO_CHUNK_BLOCKS`] blocks, from an aligned static buffer that
    /// O_DIRECT writes as it is.
    ///
    /// Either way the space exists when this returns, so a full disk fails the allocation,
    /// before any page changes, and not a later write-out of the pages, which overwrites space
    /// the file already has (so a full disk cannot fill the buffer pool with pages that cannot
    /// be evicted). No file holds data at or past block `nblocks`, so nothing is overwritten;
    /// if the file is shorter (blocks redo noted), the gap is a hole that reads as zeros. The
    /// new space needs no sync: after a crash a missing block reads as a new page.
    ///
    /// # Errors
    /// I/O errors (53100 for ENOSPC); a partial block the failed extension left at the end of
    /// the file is cut off, and `nblocks` is unchanged.
    ///
    /// # Panics
    /// If `nblocks` is 0, the caller does not hold `extend_lock`, or the relation would pass
    /// 2^32 - 1 blocks.
    pub fn extend_by(&self, rel: &Relation, nblocks: u32) -> Result<BlockNumber> {
        assert!(
            rel.extend_lock.is_locked(),
            "Smgr::extend_by without the relation's extend_lock"
        );
        assert!(nblocks > 0, "Smgr::extend_by of no blocks");
        let first = rel.nblocks.load(Ordering::Acquire);
        let end = first
            .checked_add(nblocks)
            .filter(|&e| e < u32::MAX)
            .expect("relation size past the largest block number");
        let off = first as u64 * BLCKSZ as u64;
        let len = nblocks as u64 * BLCKSZ as u64;
        let start = Instant::now();
        let mut r = Err(std::io::Error::from_raw_os_error(EOPNOTSUPP));
        if nblocks > FALLOCATE_MIN_BLOCKS {
            r = rel.file.allocate(off, len);
        }
        if matches!(&r, Err(e) if matches!(e.raw_os_error(), Some(EOPNOTSUPP | EINVAL))) {
            r = self.write_zeros(rel, off, len);
        }
        if let Err(e) = r {
            // A short write (or a partial allocation) must not leave a partial block: cut the
            // file back to whole blocks. Whole zero blocks past `first` are left as they are:
            // they hold nothing, `nblocks` does not count them, and the next extension
            // allocates them again.
            if let Ok(flen) = rel.file.len() {
                let whole = flen / BLCKSZ as u64 * BLCKSZ as u64;
                if flen > off && whole != flen {
                    let _ = rel.file.set_len(whole.max(off));
                }
            }
            return Err(Error::io(
                format!("could not extend file \"base/{}\"", rel.id.0),
                e,
            ));
        }
        rel.nblocks.store(end, Ordering::Release);
        self.stats.add_since(IoOp::Extend, nblocks as u64, start);
        Ok(BlockNumber(first))
    }

    /// Writes `len` bytes of zeros at `off` of `rel`'s file, [`ZERO_CHUNK_BLOCKS`] blocks per
    /// write at most.
    fn write_zeros(&self, rel: &Relation, off: u64, len: u64) -> std::io::Result<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(ZEROS.0.len() as u64) as usize;
            rel.file.write_at(&ZEROS.0[..n], off + done)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Cuts `rel`'s file to `nblocks` blocks (if it is longer) and lowers `rel.nblocks` to
    /// at most that: VACUUM's truncation of an empty tail and its redo (PostgreSQL's
    /// `mdtruncate`). The file is synced at the next checkpoint, like a write: until then
    /// the WAL record that asked for it is what makes it durable. The caller holds
    /// `extend_lock` and drops the buffers past the cut afterwards.
    ///
    /// # Errors
    /// I/O errors from stat or truncate.
    pub fn truncate(&self, rel: &Relation, nblocks: u32) -> Result<()> {
        let len = nblocks as u64 * BLCKSZ as u64;
        let io = |e| Error::io(format!("could not truncate file \"base/{}\"", rel.id.0), e);
        if rel.file.len().map_err(io)? > len {
            rel.file.set_len(len).map_err(io)?;
            self.dirty.lock().insert(rel.id);
        }
        rel.nblocks.fetch_min(nblocks, Ordering::AcqRel);
        Ok(())
    }

    /// Notes that `block` exists (redo of a record that initialized it).
    pub fn note_block(&self, rel: &Relation, block: BlockNumber) {
        rel.nblocks.fetch_max(block.0 + 1, Ordering::AcqRel);
    }

    /// Fsyncs every relation file written since the last call. A failure is fatal (the caller
    /// PANICs): after a failed fsync the kernel may have dropped the dirty pages.
    ///
    /// # Errors
    /// The first I/O error.
    pub fn sync_all(&self) -> Result<SyncReport> {
        let ids: Vec<RelFileId> = self.dirty.lock().drain().collect();
        let mut report = SyncReport::default();
        for id in ids {
            let rel = match self.rels.read().get(&id) {
                Some(r) => r.clone(),
                None => continue,
            };
            let start = Instant::now();
            rel.file
                .sync_data()
                .map_err(|e| Error::io(format!("could not fsync file \"base/{}\"", id.0), e))?;
            let took = start.elapsed();
            self.stats.add(IoOp::Fsync, 1, took.as_micros() as u64);
            report.files += 1;
            report.longest = report.longest.max(took);
            report.total += took;
        }
        Ok(report)
    }

    /// Fsyncs `rel`'s file now, leaving it registered for the next checkpoint's sync too (a
    /// checkpoint draining the set at the same time must still sync it). For writes made
    /// outside the buffer pool that a checkpoint may have missed: PostgreSQL's
    /// `smgrimmedsync`, called by `smgr_bulk_finish` (`bulk_write.c`) when the redo point
    /// moved during a bulk write.
    ///
    /// # Errors
    /// An I/O error from the fsync; the caller must PANIC (`panic_fatal`), never retry it.
    pub fn sync_relation(&self, rel: &Relation) -> Result<()> {
        let start = Instant::now();
        rel.file
            .sync_data()
            .map_err(|e| Error::io(format!("could not fsync file \"base/{}\"", rel.id.0), e))?;
        self.stats
            .add(IoOp::Fsync, 1, start.elapsed().as_micros() as u64);
        Ok(())
    }

    /// Removes the relation's file (the caller already dropped its buffers). Missing files are
    /// ignored, so redo can repeat it.
    ///
    /// # Errors
    /// I/O errors other than NotFound from removing the file.
    ///
    /// # Panics
    /// PANICs if the directory's fsync fails (see `sync_base_dir`).
    pub fn unlink(&self, id: RelFileId) -> Result<()> {
        // The file goes first, then the open relation: whoever opens it meanwhile shares the
        // cached one (`Relation::dropping` set), and afterwards finds no file.
        self.dirty.lock().remove(&id);
        let _io = self.fsm_io.lock();
        // The map first, made durable before the file goes: a crash between the two leaves a
        // relation file without a map, never a map without its file.
        if self.vfs.exists(&self.fsm_path(id)) {
            self.remove_free_space_map(id)?;
            self.sync_base_dir();
        }
        match self.vfs.remove(&self.path(id)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::io(
                    format!("could not remove file \"base/{}\"", id.0),
                    e,
                ))
            }
        }
        self.rels.write().remove(&id);
        self.sync_base_dir();
        Ok(())
    }

    /// Removes relation `id`'s free-space map file, if it has one.
    fn remove_free_space_map(&self, id: RelFileId) -> Result<()> {
        match self.vfs.remove(&self.fsm_path(id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(
                format!(
                    "could not remove file \"base/{}\"",
                    crate::fsm::file_name(id.0)
                ),
                e,
            )),
        }
    }

    /// Makes the `base` directory's entries durable (a created or removed file).
    ///
    /// # Panics
    /// PANICs ([`panic_fatal`]) if the fsync fails: it is never retried (PostgreSQL's
    /// `fsync_fname` at `data_sync_elevel(ERROR)`, which is PANIC).
    fn sync_base_dir(&self) {
        if let Err(e) = self.vfs.sync_dir(&self.base) {
            panic_fatal(&format!("could not fsync directory \"base\": {e}"));
        }
    }
}

/// Cuts a partial block off the end of a relation file and returns the file's length, bytes.
/// A torn extension (a crash while the zeros or a new page were being written, or a short write
/// on a full disk) leaves one; it holds nothing redo needs, since past the last whole block a
/// page reads as new. Called for every file at start-up after a crash and when a file is
/// opened, so no data file stays half-extended.
///
/// # Errors
/// I/O errors from stat or truncate.
pub(crate) fn cut_partial_block(file: &dyn FileIo, path: &std::path::Path) -> Result<u64> {
    let len = file
        .len()
        .map_err(|e| Error::io(format!("could not stat \"{}\"", path.display()), e))?;
    let whole = len / BLCKSZ as u64 * BLCKSZ as u64;
    if whole != len {
        tracing::info!(
            "truncating a partial block at the end of \"{}\" ({len} bytes) to {whole} bytes",
            path.display()
        );
        file.set_len(whole)
            .map_err(|e| Error::io(format!("could not truncate \"{}\"", path.display()), e))?;
    }
    Ok(whole)
}

/// Removes the temporary files of free-space map writes that a crash or a failure cut
/// short (`base/*.tmp`, [`Smgr::write_free_space_maps`]), at every start.
///
/// # Errors
/// I/O errors listing `base` or removing a file.
pub fn remove_temporary_files(vfs: &dyn Vfs, base: &Path) -> Result<()> {
    let names = vfs
        .list_dir(base)
        .map_err(|e| Error::io(format!("could not list \"{}\"", base.display()), e))?;
    for name in names.iter().filter(|n| n.ends_with(".tmp")) {
        let path = base.join(name);
        match vfs.remove(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::io(
                    format!("could not remove \"{}\"", path.display()),
                    e,
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn runs_end_at_a_gap_and_at_the_combine_limit() {
        let blocks = [1u32, 2, 3, 5, 6, 7, 8, 10];
        let split =
            |max| runs(blocks.len(), max, |i| blocks[i] == blocks[i - 1] + 1).collect::<Vec<_>>();
        assert_eq!(split(3), vec![0..3, 3..6, 6..7, 7..8]);
        assert_eq!(split(usize::MAX), vec![0..3, 3..7, 7..8]);
        assert_eq!(split(1).len(), blocks.len());
        assert_eq!(runs(0, 4, |_| true).count(), 0);
    }
}
