//! A fault-injecting, in-memory implementation of [`Vfs`] for crash and I/O-failure tests.
//!
//! It implements the same contract as [`crate::RealVfs`] (see the crate documentation) and keeps
//! apart what a crash would keep from what it would not:
//!
//! - **Visible state**: what reads return — every write, set_len, create, rename and remove so
//!   far. A process crash (`kill -9`) keeps all of it: the kernel's page cache survives the
//!   process ([`CrashKind::ProcessKill`]), though what was not synced can still be lost by a
//!   power loss later.
//! - **Durable state**: what survives a power loss for certain — file bytes made durable by
//!   `sync_data`/`sync_all`, by an `O_DSYNC`/`O_SYNC` write, or by a device cache flush after
//!   `write_back`; directory entries made durable by `sync_dir`.
//! - **Pending operations** between the two, in issue order: writes and size changes not yet
//!   synced (some of them written back into the "device cache"), and namespace changes not yet
//!   synced.
//!
//! [`FaultVfs::crash_image`] with [`CrashKind::PowerLoss`] builds what a power loss would leave:
//! the durable state plus a random subset of the pending operations, each write possibly torn
//! at 512-byte or 4 KiB granularity, applied in a random order (so unsynced writes are dropped,
//! torn and reordered); the namespace keeps a random prefix of its pending changes, in order,
//! as a journaling file system would. The image is a new, independent `FaultVfs` whose visible
//! and durable states are both the image, ready for recovery.
//!
//! Faults: each `write_at` may fail with EIO or ENOSPC (ENOSPC after writing a random
//! sector-aligned prefix, as a short write would), each sync and write-back with EIO, with the
//! probabilities of [`FaultPlan`], or exactly at the Nth such call. A failed sync drops the
//! file's pending writes from the durable side, as Linux marks the pages clean after a failed
//! writeback (PostgreSQL's fsyncgate, 2018): a retry then "succeeds" without making them
//! durable, which is why callers must PANIC instead.
//!
//! Everything random comes from one seeded generator. Given the same seed and the same
//! sequence of calls, a run is identical; with several threads the interleaving is the OS's,
//! so a concurrent test is replayable in its workload and crash choices, not in its schedule.
//! Every test prints the seed it used.

use crate::{CacheFlush, FileIo, OpenMode, Vfs, DIRECT_IO_ALIGN};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// What kind of crash an image simulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashKind {
    /// The process dies (`kill -9`): everything written survives in the page cache.
    ProcessKill,
    /// The machine loses power: only durable state survives for certain; pending writes are
    /// dropped, torn and reordered at random.
    PowerLoss,
}

/// Probabilities (0.0 ..= 1.0) and exact triggers of injected faults. All default to none.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Each `write_at` fails with EIO with this probability.
    pub write_eio: f64,
    /// Each `write_at` fails with ENOSPC with this probability.
    pub write_enospc: f64,
    /// Each `sync_data`/`sync_all`/`sync_dir`/write-back/cache flush fails with EIO with this
    /// probability.
    pub sync_eio: f64,
    /// The Nth (1-based) sync-like call from now on fails with EIO.
    pub sync_eio_at: Option<u64>,
    /// Each sync-like call fails with ENOSPC with this probability (a file system that
    /// allocates blocks at writeback, such as ext4 with delayed allocation, NFS or a
    /// thin-provisioned volume, reports a full disk only then). Like EIO, it forgets the
    /// pending writes.
    pub sync_enospc: f64,
    /// The Nth (1-based) sync-like call from now on fails with ENOSPC (counted with
    /// `sync_eio_at`'s calls).
    pub sync_enospc_at: Option<u64>,
    /// The Nth (1-based) `write_at` from now on fails with ENOSPC.
    pub write_enospc_at: Option<u64>,
    /// Only paths containing this string are subject to the faults above (all if `None`).
    pub path_filter: Option<String>,
}

/// Counts of calls and injected faults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// `write_at` calls.
    pub writes: u64,
    /// `sync_data`, `sync_all` and `sync_dir` calls.
    pub syncs: u64,
    /// `write_back` calls.
    pub write_backs: u64,
    /// Device cache flushes.
    pub cache_flushes: u64,
    /// Injected EIO errors (writes and syncs).
    pub injected_eio: u64,
    /// Injected ENOSPC errors (writes and syncs).
    pub injected_enospc: u64,
}

/// Options of a new [`FaultVfs`].
#[derive(Clone, Debug)]
pub struct FaultConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Faults to inject.
    pub plan: FaultPlan,
    /// Offer a device cache flusher ([`Vfs::cache_flusher`]), so that the WAL's
    /// `wal_sync_range` path is exercised.
    pub cache_flush: bool,
}

impl FaultConfig {
    /// No faults, a cache flusher offered, the given seed.
    pub fn new(seed: u64) -> FaultConfig {
        FaultConfig {
            seed,
            plan: FaultPlan::default(),
            cache_flush: true,
        }
    }
}

/// splitmix64: small, fast, and good enough to drive test choices.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Debug)]
enum PendingOp {
    /// Bytes written at an offset. `cached`: written back to the device, durable at the next
    /// cache flush.
    Write {
        off: u64,
        bytes: Vec<u8>,
        cached: bool,
    },
    /// The file's size changed.
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct Inode {
    /// What reads see.
    data: Vec<u8>,
    /// What survives a power loss for certain.
    durable: Vec<u8>,
    /// Not yet durable, in issue order.
    pending: Vec<PendingOp>,
    /// 4 KiB blocks ever written (for `allocated_bytes`; `set_len` allocates nothing).
    allocated: HashSet<u64>,
}

fn apply(buf: &mut Vec<u8>, op: &PendingOp) {
    match op {
        PendingOp::Write { off, bytes, .. } => write_into(buf, *off, bytes),
        PendingOp::SetLen(n) => buf.resize(*n as usize, 0),
    }
}

fn write_into(buf: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let off = off as usize;
    if buf.len() < off + bytes.len() {
        buf.resize(off + bytes.len(), 0);
    }
    buf[off..off + bytes.len()].copy_from_slice(bytes);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File(u64),
    Dir,
}

#[derive(Clone, Debug)]
enum NsOp {
    Create(PathBuf, Entry),
    Rename(PathBuf, PathBuf),
    Remove(PathBuf),
}

impl NsOp {
    /// Directories whose entries the operation changes.
    fn dirs(&self) -> Vec<PathBuf> {
        let parent = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
        match self {
            NsOp::Create(p, _) | NsOp::Remove(p) => vec![parent(p)],
            NsOp::Rename(a, b) => vec![parent(a), parent(b)],
        }
    }

    fn apply(&self, ns: &mut BTreeMap<PathBuf, Entry>) {
        match self {
            NsOp::Create(p, e) => {
                ns.insert(p.clone(), *e);
            }
            NsOp::Rename(a, b) => {
                if let Some(e) = ns.remove(a) {
                    ns.insert(b.clone(), e);
                }
            }
            NsOp::Remove(p) => {
                ns.remove(p);
            }
        }
    }
}

#[derive(Debug)]
struct FsState {
    rng: Rng,
    plan: FaultPlan,
    cache_flush: bool,
    stats: FaultStats,
    /// Every call bumps it; [`FaultVfs::seq`] reads it.
    seq: u64,
    /// Sync-like calls and writes subject to the plan so far (for the `*_at` triggers).
    sync_calls: u64,
    write_calls: u64,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    /// Visible namespace.
    ns: BTreeMap<PathBuf, Entry>,
    /// Durable namespace, and the changes since, in order.
    ns_durable: BTreeMap<PathBuf, Entry>,
    ns_pending: Vec<NsOp>,
}

impl FsState {
    // `map_or(true, ..)` rather than `is_none_or`, which needs Rust 1.82 (the workspace says 1.80).
    #[allow(clippy::unnecessary_map_or)]
    fn subject(&self, path: &Path) -> bool {
        self.plan
            .path_filter
            .as_ref()
            .map_or(true, |f| path.to_string_lossy().contains(f.as_str()))
    }

    /// Decides whether this sync-like call (`what`, on `path`) fails, and with which error:
    /// EIO or ENOSPC.
    fn sync_fault(&mut self, what: &str, path: &Path) -> Option<io::Error> {
        if !self.subject(path) {
            return None;
        }
        self.sync_calls += 1;
        let n = self.sync_calls;
        let (p_eio, p_enospc) = (self.plan.sync_eio, self.plan.sync_enospc);
        if self.plan.sync_eio_at == Some(n) || self.rng.chance(p_eio) {
            self.stats.injected_eio += 1;
            return Some(eio(what, path));
        }
        if self.plan.sync_enospc_at == Some(n) || self.rng.chance(p_enospc) {
            self.stats.injected_enospc += 1;
            return Some(enospc());
        }
        None
    }

    fn ns_op(&mut self, op: NsOp) {
        op.apply(&mut self.ns);
        self.ns_pending.push(op);
    }

    /// Makes every pending namespace change up to the last one touching `dir` durable (a
    /// journaling file system commits metadata in order).
    fn sync_dir(&mut self, dir: &Path) {
        if let Some(last) = self
            .ns_pending
            .iter()
            .rposition(|op| op.dirs().iter().any(|d| d == dir))
        {
            for op in self.ns_pending.drain(..=last) {
                op.apply(&mut self.ns_durable);
            }
        }
    }

    fn file(&self, path: &Path) -> io::Result<u64> {
        match self.ns.get(path) {
            Some(Entry::File(ino)) => Ok(*ino),
            Some(Entry::Dir) => Err(io::Error::other(format!(
                "{} is a directory",
                path.display()
            ))),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such file", path.display()),
            )),
        }
    }

    fn dir_exists(&self, dir: &Path) -> bool {
        dir.as_os_str().is_empty()
            || dir == Path::new("/")
            || matches!(self.ns.get(dir), Some(Entry::Dir))
    }
}

/// The fault-injecting in-memory file system. Clones share one state.
#[derive(Clone, Debug)]
pub struct FaultVfs {
    st: Arc<Mutex<FsState>>,
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

fn eio(what: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(5).kind(),
        format!("injected EIO: {what} {}", path.display()),
    )
}

impl FaultVfs {
    /// An empty file system.
    pub fn new(cfg: FaultConfig) -> FaultVfs {
        FaultVfs {
            st: Arc::new(Mutex::new(FsState {
                rng: Rng(cfg.seed),
                plan: cfg.plan,
                cache_flush: cfg.cache_flush,
                stats: FaultStats::default(),
                seq: 0,
                sync_calls: 0,
                write_calls: 0,
                inodes: HashMap::new(),
                next_ino: 1,
                ns: BTreeMap::new(),
                ns_durable: BTreeMap::new(),
                ns_pending: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FsState> {
        // A test thread that panicked while holding the lock leaves consistent state behind:
        // every mutation below completes before it can panic.
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A counter that every call advances: a call that returned before `seq()` was read
    /// happened before it. Tests record it when a commit is acknowledged, and compare it with
    /// the value a crash image was taken at.
    pub fn seq(&self) -> u64 {
        let mut st = self.lock();
        st.seq += 1;
        st.seq
    }

    /// Counts of calls and injected faults so far.
    pub fn stats(&self) -> FaultStats {
        self.lock().stats
    }

    /// Replaces the fault plan (the `*_at` triggers count from now).
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut st = self.lock();
        st.plan = plan;
        st.sync_calls = 0;
        st.write_calls = 0;
    }

    /// What a crash of `kind` at this instant would leave, as a new independent file system
    /// with no faults. After a power loss it has no pending operations (`seed` drives which of
    /// them survived); after a process kill it is an exact copy, pending operations included,
    /// since the kernel keeps them. Returns the image and the [`FaultVfs::seq`] value it was
    /// taken at.
    pub fn crash_image(&self, kind: CrashKind, seed: u64) -> (FaultVfs, u64) {
        let mut st = self.lock();
        st.seq += 1;
        let at = st.seq;
        if kind == CrashKind::ProcessKill {
            // The disk and the page cache are untouched: what was pending stays pending, and a
            // later power loss can still drop it.
            let image = FsState {
                rng: Rng(seed ^ 0xA5A5_A5A5_A5A5_A5A5),
                plan: FaultPlan::default(),
                cache_flush: st.cache_flush,
                stats: FaultStats::default(),
                seq: 0,
                sync_calls: 0,
                write_calls: 0,
                inodes: st.inodes.clone(),
                next_ino: st.next_ino,
                ns: st.ns.clone(),
                ns_durable: st.ns_durable.clone(),
                ns_pending: st.ns_pending.clone(),
            };
            return (
                FaultVfs {
                    st: Arc::new(Mutex::new(image)),
                },
                at,
            );
        }
        let mut rng = Rng(seed);
        let ns = match kind {
            CrashKind::ProcessKill => st.ns.clone(),
            CrashKind::PowerLoss => {
                let mut ns = st.ns_durable.clone();
                let keep = rng.below(st.ns_pending.len() as u64 + 1) as usize;
                for op in &st.ns_pending[..keep] {
                    op.apply(&mut ns);
                }
                ns
            }
        };
        let mut inodes = HashMap::new();
        let mut inos: Vec<u64> = ns
            .values()
            .filter_map(|e| match e {
                Entry::File(i) => Some(*i),
                Entry::Dir => None,
            })
            .collect();
        inos.sort_unstable();
        inos.dedup();
        for ino in inos {
            let Some(node) = st.inodes.get(&ino) else {
                continue;
            };
            let content = match kind {
                CrashKind::ProcessKill => node.data.clone(),
                CrashKind::PowerLoss => power_loss_content(node, &mut rng),
            };
            inodes.insert(
                ino,
                Inode {
                    durable: content.clone(),
                    data: content,
                    pending: Vec::new(),
                    allocated: node.allocated.clone(),
                },
            );
        }
        let image = FsState {
            rng: Rng(seed ^ 0xA5A5_A5A5_A5A5_A5A5),
            plan: FaultPlan::default(),
            cache_flush: st.cache_flush,
            stats: FaultStats::default(),
            seq: 0,
            sync_calls: 0,
            write_calls: 0,
            inodes,
            next_ino: st.next_ino,
            ns_durable: ns.clone(),
            ns,
            ns_pending: Vec::new(),
        };
        (
            FaultVfs {
                st: Arc::new(Mutex::new(image)),
            },
            at,
        )
    }

    /// The visible bytes of the file at `path` (for tests that corrupt or inspect files).
    ///
    /// # Errors
    /// `NotFound` if there is no such file.
    pub fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let st = self.lock();
        let ino = st.file(path)?;
        Ok(st.inodes[&ino].data.clone())
    }

    /// Overwrites bytes of the file at `path` in both its visible and durable states, as media
    /// corruption would (for tests of checksums and of the WAL reader).
    ///
    /// # Errors
    /// `NotFound` if there is no such file.
    pub fn corrupt(&self, path: &Path, off: u64, bytes: &[u8]) -> io::Result<()> {
        let mut st = self.lock();
        let ino = st.file(path)?;
        let node = st.inodes.get_mut(&ino).expect("inode of a named file");
        write_into(&mut node.data, off, bytes);
        write_into(&mut node.durable, off, bytes);
        Ok(())
    }

    /// Operations on the file at `path` not yet durable (0 if there is no such file).
    pub fn pending_ops(&self, path: &Path) -> usize {
        let st = self.lock();
        st.file(path)
            .map(|ino| st.inodes[&ino].pending.len())
            .unwrap_or(0)
    }

    /// Every file path in the visible namespace, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock()
            .ns
            .iter()
            .filter(|(_, e)| matches!(e, Entry::File(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }
}

/// The durable content plus a random subset of the pending operations, in random order, each
/// write kept whole, dropped, or torn at 512-byte or 4 KiB granularity.
fn power_loss_content(node: &Inode, rng: &mut Rng) -> Vec<u8> {
    let mut content = node.durable.clone();
    let mut ops: Vec<&PendingOp> = node.pending.iter().collect();
    // Fisher-Yates: reorder.
    for i in (1..ops.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        ops.swap(i, j);
    }
    for op in ops {
        match rng.below(3) {
            0 => {} // dropped
            1 => apply(&mut content, op),
            _ => match op {
                PendingOp::Write { off, bytes, .. } => {
                    let sector: u64 = if rng.below(2) == 0 { 512 } else { 4096 };
                    let mut pos = *off;
                    let end = off + bytes.len() as u64;
                    while pos < end {
                        let next = ((pos / sector) + 1) * sector;
                        let stop = next.min(end);
                        if rng.below(2) == 0 {
                            let a = (pos - off) as usize;
                            let b = (stop - off) as usize;
                            write_into(&mut content, pos, &bytes[a..b]);
                        }
                        pos = stop;
                    }
                }
                PendingOp::SetLen(_) => apply(&mut content, op),
            },
        }
    }
    content
}

struct FaultFile {
    vfs: FaultVfs,
    ino: u64,
    path: PathBuf,
    mode: OpenMode,
}

impl FaultFile {
    // `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace says 1.80).
    #[allow(clippy::manual_is_multiple_of)]
    fn check_direct(&self, off: u64, len: usize) -> io::Result<()> {
        let a = DIRECT_IO_ALIGN as u64;
        if self.mode.direct && (off % a != 0 || len as u64 % a != 0) {
            return Err(io::Error::from_raw_os_error(22)); // EINVAL, as O_DIRECT gives
        }
        Ok(())
    }

    fn sync(&self, what: &str) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.syncs += 1;
        if let Some(e) = st.sync_fault(what, &self.path) {
            // The kernel marks the pages clean after a failed writeback: the data stays
            // readable but will never reach the disk unless written again.
            st.inodes
                .get_mut(&self.ino)
                .expect("open inode")
                .pending
                .clear();
            return Err(e);
        }
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        for op in std::mem::take(&mut node.pending) {
            apply(&mut node.durable, &op);
        }
        Ok(())
    }
}

impl FileIo for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.check_direct(offset, buf.len())?;
        let mut st = self.vfs.lock();
        st.seq += 1;
        let data = &st.inodes[&self.ino].data;
        let off = offset as usize;
        if off >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - off);
        buf[..n].copy_from_slice(&data[off..off + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_direct(offset, buf.len())?;
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.writes += 1;
        let mut len = buf.len();
        let mut fail = None;
        if st.subject(&self.path) {
            st.write_calls += 1;
            let n = st.write_calls;
            let (p_eio, p_enospc) = (st.plan.write_eio, st.plan.write_enospc);
            if st.rng.chance(p_eio) {
                st.stats.injected_eio += 1;
                return Err(eio("write", &self.path));
            }
            if st.plan.write_enospc_at == Some(n) || st.rng.chance(p_enospc) {
                st.stats.injected_enospc += 1;
                // A short write: a sector-aligned prefix made it.
                let sectors = (buf.len() / 512) as u64;
                len = (st.rng.below(sectors + 1) * 512) as usize;
                fail = Some(enospc());
            }
        }
        let sync_now = self.mode.dsync || self.mode.sync;
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        if len > 0 {
            write_into(&mut node.data, offset, &buf[..len]);
            let first = offset / 4096;
            let last = (offset + len as u64 - 1) / 4096;
            node.allocated.extend(first..=last);
            let op = PendingOp::Write {
                off: offset,
                bytes: buf[..len].to_vec(),
                cached: false,
            };
            if sync_now && fail.is_none() {
                for p in std::mem::take(&mut node.pending) {
                    apply(&mut node.durable, &p);
                }
                apply(&mut node.durable, &op);
            } else {
                node.pending.push(op);
            }
        }
        match fail {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync("fdatasync")
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync("fsync")
    }

    fn len(&self) -> io::Result<u64> {
        let st = self.vfs.lock();
        Ok(st.inodes[&self.ino].data.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        node.data.resize(len as usize, 0);
        node.pending.push(PendingOp::SetLen(len));
        Ok(())
    }

    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.write_backs += 1;
        if let Some(e) = st.sync_fault("sync_file_range", &self.path) {
            st.inodes
                .get_mut(&self.ino)
                .expect("open inode")
                .pending
                .clear();
            return Err(e);
        }
        let node = st.inodes.get_mut(&self.ino).expect("open inode");
        let end = (offset + len).min(node.data.len() as u64);
        if offset >= end {
            return Ok(());
        }
        // Writing back sends the range's current bytes; older unsynced writes wholly inside it
        // are superseded (their pages now hold the newer bytes) and can no longer reach the
        // disk on their own.
        node.pending.retain(|op| match op {
            PendingOp::Write {
                off, bytes, cached, ..
            } => *cached || *off < offset || off + bytes.len() as u64 > end,
            PendingOp::SetLen(_) => true,
        });
        let bytes = node.data[offset as usize..end as usize].to_vec();
        node.pending.push(PendingOp::Write {
            off: offset,
            bytes,
            cached: true,
        });
        Ok(())
    }

    fn allocated_bytes(&self) -> io::Result<u64> {
        let st = self.vfs.lock();
        Ok(st.inodes[&self.ino].allocated.len() as u64 * 4096)
    }
}

/// The device cache flush of a [`FaultVfs`]: every written-back range becomes durable.
struct FaultCacheFlush {
    vfs: FaultVfs,
}

impl CacheFlush for FaultCacheFlush {
    fn flush(&self) -> io::Result<()> {
        let mut st = self.vfs.lock();
        st.seq += 1;
        st.stats.cache_flushes += 1;
        if let Some(e) = st.sync_fault("cache flush", Path::new("<device cache>")) {
            return Err(e);
        }
        for node in st.inodes.values_mut() {
            let mut keep = Vec::with_capacity(node.pending.len());
            for op in std::mem::take(&mut node.pending) {
                if matches!(op, PendingOp::Write { cached: true, .. }) {
                    apply(&mut node.durable, &op);
                } else {
                    keep.push(op);
                }
            }
            node.pending = keep;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        "the fault-injecting device's cache flush".into()
    }
}

impl Vfs for FaultVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        let mut st = self.lock();
        st.seq += 1;
        let ino = match st.file(path) {
            Ok(ino) => ino,
            Err(e) if e.kind() == io::ErrorKind::NotFound && mode.create => {
                let parent = path.parent().unwrap_or(Path::new(""));
                if !st.dir_exists(parent) {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{}: no such directory", parent.display()),
                    ));
                }
                let ino = st.next_ino;
                st.next_ino += 1;
                st.inodes.insert(ino, Inode::default());
                st.ns_op(NsOp::Create(path.to_path_buf(), Entry::File(ino)));
                ino
            }
            Err(e) => return Err(e),
        };
        Ok(Arc::new(FaultFile {
            vfs: self.clone(),
            ino,
            path: path.to_path_buf(),
            mode,
        }))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.seq += 1;
        st.file(path)?;
        st.ns_op(NsOp::Remove(path.to_path_buf()));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.seq += 1;
        st.file(from)?;
        st.ns_op(NsOp::Rename(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.seq += 1;
        st.stats.syncs += 1;
        if !st.dir_exists(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            ));
        }
        if let Some(e) = st.sync_fault("fsync directory", dir) {
            return Err(e);
        }
        st.sync_dir(dir);
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.seq += 1;
        let mut parts = Vec::new();
        let mut p = Some(dir);
        while let Some(d) = p {
            if d.as_os_str().is_empty() || d == Path::new("/") {
                break;
            }
            parts.push(d.to_path_buf());
            p = d.parent();
        }
        for d in parts.into_iter().rev() {
            match st.ns.get(&d) {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{} is a file", d.display()),
                    ))
                }
                None => st.ns_op(NsOp::Create(d, Entry::Dir)),
            }
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.lock();
        if !st.dir_exists(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            ));
        }
        Ok(st
            .ns
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn exists(&self, path: &Path) -> bool {
        self.lock().ns.contains_key(path)
    }

    fn cache_flusher(&self, _dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        let st = self.lock();
        Ok(st
            .cache_flush
            .then(|| Arc::new(FaultCacheFlush { vfs: self.clone() }) as Arc<dyn CacheFlush>))
    }
}

/// A pass-through [`Vfs`] over another (the real file system, in a server under test) that
/// injects two kinds of fault, each optional; every other call goes through unchanged.
///
/// - **A failed sync:** the `nth` (1-based) `sync_data`/`sync_all`/write-back of a file, or
///   `sync_dir` of a directory, whose path contains a filter fails with EIO or ENOSPC. The
///   server installs it when `WALNUT_FAULT_SYNC_EIO=FILTER:N` or
///   `WALNUT_FAULT_SYNC_ENOSPC=FILTER:N` is set (see [`parse_sync_eio_spec`]), so that an
///   end-to-end test can watch a real process PANIC on a failed fsync and recover.
/// - **A full disk:** while the file `full_while` exists, every `write_at` or `set_len` that
///   would make a file longer fails with ENOSPC, writing nothing; writes within a file's length
///   (and syncs, renames, removals) still succeed, as on a full file system whose files were
///   allocated before it filled. If the trigger file holds text, only files whose path contains
///   it are on the full disk (`/wal/`: a WAL directory on its own volume). The server installs
///   it when `WALNUT_FAULT_DISK_FULL_WHILE=PATH` is set, so that a test can fill and free the
///   disk.
pub struct InjectVfs {
    inner: Arc<dyn Vfs>,
    sync_fail: Option<SyncFail>,
    full_while: Option<PathBuf>,
    seen: Arc<std::sync::atomic::AtomicU64>,
}

/// The sync that [`InjectVfs`] fails: the `nth` (1-based) of those on paths containing `filter`.
#[derive(Clone, Debug)]
struct SyncFail {
    filter: String,
    nth: u64,
    enospc: bool,
}

impl SyncFail {
    fn error(&self, what: &str, path: &Path) -> io::Error {
        if self.enospc {
            enospc()
        } else {
            eio(what, path)
        }
    }
}

impl InjectVfs {
    /// Wraps `inner`; the `nth` sync of a file whose path contains `path_filter` fails with EIO.
    pub fn new(inner: Arc<dyn Vfs>, path_filter: &str, nth: u64) -> InjectVfs {
        InjectVfs::pass_through(inner).with_sync_eio(path_filter, nth)
    }

    /// Wraps `inner` with no fault armed.
    pub fn pass_through(inner: Arc<dyn Vfs>) -> InjectVfs {
        InjectVfs {
            inner,
            sync_fail: None,
            full_while: None,
            seen: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    /// Arms the failed sync: the `nth` (1-based) sync of a file whose path contains
    /// `path_filter` fails with EIO.
    pub fn with_sync_eio(mut self, path_filter: &str, nth: u64) -> InjectVfs {
        self.sync_fail = Some(SyncFail {
            filter: path_filter.to_string(),
            nth,
            enospc: false,
        });
        self
    }

    /// Arms the failed sync with ENOSPC instead of EIO (what a file system that allocates at
    /// writeback reports when it fills). Replaces a sync fault armed before.
    pub fn with_sync_enospc(mut self, path_filter: &str, nth: u64) -> InjectVfs {
        self.sync_fail = Some(SyncFail {
            filter: path_filter.to_string(),
            nth,
            enospc: true,
        });
        self
    }

    /// The armed fault if this call on `path` is the failing sync (counting the calls on
    /// matching paths, files' and directories' together).
    fn sync_fails(&self, path: &Path) -> Option<&SyncFail> {
        let f = self.sync_fail.as_ref()?;
        if !path.to_string_lossy().contains(f.filter.as_str()) {
            return None;
        }
        let n = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        (n == f.nth).then_some(f)
    }

    /// Arms the full disk: while the file `trigger` exists (checked at each call), writes
    /// that would lengthen a file fail with ENOSPC; if it holds text, only those of files
    /// whose path contains the text.
    pub fn with_disk_full_while(mut self, trigger: &Path) -> InjectVfs {
        self.full_while = Some(trigger.to_path_buf());
        self
    }
}

/// Parses `FILTER:N` (e.g. `wal:100`, the 100th sync of a file whose path contains `wal`).
///
/// # Errors
/// A message if the text is not of that form or N is not a positive integer.
pub fn parse_sync_eio_spec(spec: &str) -> Result<(String, u64), String> {
    let (f, n) = spec
        .rsplit_once(':')
        .ok_or_else(|| format!("expected FILTER:N, not {spec:?}"))?;
    let n: u64 = n
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("expected a positive count in {spec:?}"))?;
    Ok((f.to_string(), n))
}

struct InjectFile {
    inner: Arc<dyn FileIo>,
    /// The sync to fail, if this file matches the filter.
    fail_sync: Option<SyncFail>,
    full_while: Option<PathBuf>,
    seen: Arc<std::sync::atomic::AtomicU64>,
    path: PathBuf,
}

impl InjectFile {
    fn maybe_fail(&self, what: &str) -> io::Result<()> {
        if let Some(f) = &self.fail_sync {
            if self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == f.nth {
                return Err(f.error(what, &self.path));
            }
        }
        Ok(())
    }

    /// ENOSPC if the disk is "full" for this file (the trigger exists, and is empty or holds
    /// text that the file's path contains) and the file would grow to `new_end` bytes.
    fn check_growth(&self, new_end: u64) -> io::Result<()> {
        let Some(trigger) = &self.full_while else {
            return Ok(());
        };
        let full = match std::fs::read_to_string(trigger) {
            Ok(filter) => {
                let filter = filter.trim();
                filter.is_empty() || self.path.to_string_lossy().contains(filter)
            }
            Err(_) => false,
        };
        if full && new_end > self.inner.len()? {
            return Err(enospc());
        }
        Ok(())
    }
}

impl FileIo for InjectFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_growth(offset + buf.len() as u64)?;
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.maybe_fail("fdatasync")?;
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.maybe_fail("fsync")?;
        self.inner.sync_all()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_growth(len)?;
        self.inner.set_len(len)
    }
    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        self.maybe_fail("sync_file_range")?;
        self.inner.write_back(offset, len)
    }
    fn allocated_bytes(&self) -> io::Result<u64> {
        self.inner.allocated_bytes()
    }
}

impl Vfs for InjectVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        let fail_sync = self
            .sync_fail
            .as_ref()
            .filter(|f| path.to_string_lossy().contains(f.filter.as_str()))
            .cloned();
        Ok(Arc::new(InjectFile {
            inner: self.inner.open(path, mode)?,
            fail_sync,
            full_while: self.full_while.clone(),
            seen: self.seen.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if let Some(f) = self.sync_fails(dir) {
            return Err(f.error("fsync directory", dir));
        }
        self.inner.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn cache_flusher(&self, dir: &Path) -> io::Result<Option<Arc<dyn CacheFlush>>> {
        self.inner.cache_flusher(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create() -> OpenMode {
        OpenMode {
            create: true,
            ..Default::default()
        }
    }

    fn setup(seed: u64) -> (FaultVfs, Arc<dyn FileIo>) {
        let v = FaultVfs::new(FaultConfig::new(seed));
        v.create_dir_all(Path::new("/d")).unwrap();
        let f = v.open(Path::new("/d/f"), create()).unwrap();
        v.sync_dir(Path::new("/d")).unwrap();
        v.sync_dir(Path::new("/")).unwrap();
        (v, f)
    }

    fn content(v: &FaultVfs) -> Vec<u8> {
        v.read_file(Path::new("/d/f")).unwrap_or_default()
    }

    #[test]
    fn synced_writes_survive_power_loss_and_unsynced_may_not() {
        let (v, f) = setup(1);
        f.write_at(&[1u8; 4096], 0).unwrap();
        f.sync_data().unwrap();
        f.write_at(&[2u8; 8192], 4096).unwrap();
        let mut saw_missing = false;
        let mut saw_torn = false;
        let mut saw_whole = false;
        for seed in 0..200 {
            let (img, _) = v.crash_image(CrashKind::PowerLoss, seed);
            let c = content(&img);
            assert_eq!(
                &c[..4096],
                &[1u8; 4096][..],
                "synced data survives (seed {seed})"
            );
            let tail = &c[4096.min(c.len())..];
            let twos = tail.iter().filter(|&&b| b == 2).count();
            match twos {
                0 => saw_missing = true,
                8192 => saw_whole = true,
                _ => saw_torn = true,
            }
        }
        assert!(saw_missing && saw_torn && saw_whole);
        // A process kill keeps everything written, but not durably: a power loss after it can
        // still drop the unsynced part.
        let (img, _) = v.crash_image(CrashKind::ProcessKill, 7);
        assert_eq!(content(&img).len(), 4096 + 8192);
        let lost =
            (0..100).any(|s| content(&img.crash_image(CrashKind::PowerLoss, s).0).len() == 4096);
        assert!(lost);
    }

    #[test]
    fn images_are_replayable_from_their_seed() {
        let (v, f) = setup(2);
        for i in 0..20u8 {
            f.write_at(&[i; 1000], u64::from(i) * 700).unwrap();
        }
        let a = content(&v.crash_image(CrashKind::PowerLoss, 42).0);
        let b = content(&v.crash_image(CrashKind::PowerLoss, 42).0);
        assert_eq!(a, b);
    }

    #[test]
    fn unsynced_writes_are_reordered() {
        // Two overlapping unsynced writes: a power loss may keep the older one on top.
        let (v, f) = setup(3);
        f.write_at(&[1u8; 512], 0).unwrap();
        f.write_at(&[2u8; 512], 0).unwrap();
        let mut seen = HashSet::new();
        for seed in 0..100 {
            let c = content(&v.crash_image(CrashKind::PowerLoss, seed).0);
            seen.insert(c.first().copied());
        }
        assert!(
            seen.contains(&Some(1)) && seen.contains(&Some(2)),
            "{seen:?}"
        );
    }

    #[test]
    fn namespace_changes_need_sync_dir() {
        let (v, _f) = setup(4);
        let g = v.open(Path::new("/d/g"), create()).unwrap();
        g.write_at(b"x", 0).unwrap();
        g.sync_all().unwrap();
        v.rename(Path::new("/d/g"), Path::new("/d/h")).unwrap();
        let mut names = HashSet::new();
        for seed in 0..50 {
            let (img, _) = v.crash_image(CrashKind::PowerLoss, seed);
            let mut l = img.list_dir(Path::new("/d")).unwrap();
            l.sort();
            names.insert(l);
        }
        // Not created, created, or created and renamed: a prefix of the changes.
        assert!(names.len() >= 2, "{names:?}");
        assert!(names.iter().all(|l| l.len() <= 2));
        v.sync_dir(Path::new("/d")).unwrap();
        for seed in 0..20 {
            let (img, _) = v.crash_image(CrashKind::PowerLoss, seed);
            assert!(img.exists(Path::new("/d/h")) && !img.exists(Path::new("/d/g")));
        }
    }

    #[test]
    fn write_back_is_durable_only_after_a_cache_flush() {
        let (v, f) = setup(5);
        f.write_at(&[9u8; 4096], 0).unwrap();
        f.write_back(0, 4096).unwrap();
        let lost = (0..100).any(|s| content(&v.crash_image(CrashKind::PowerLoss, s).0).is_empty());
        assert!(lost, "written back but not flushed: may be lost");
        v.cache_flusher(Path::new("/d"))
            .unwrap()
            .unwrap()
            .flush()
            .unwrap();
        for s in 0..50 {
            assert_eq!(
                content(&v.crash_image(CrashKind::PowerLoss, s).0),
                vec![9u8; 4096]
            );
        }
    }

    #[test]
    fn failed_fsync_forgets_the_pending_writes() {
        let (v, f) = setup(6);
        f.write_at(&[7u8; 4096], 0).unwrap();
        v.set_plan(FaultPlan {
            sync_eio_at: Some(1),
            ..Default::default()
        });
        assert!(f.sync_data().is_err());
        // A retry "succeeds", but the data never became durable: why callers PANIC.
        f.sync_data().unwrap();
        let mut buf = [0u8; 1];
        f.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf[0], 7, "still readable from the cache");
        for s in 0..20 {
            assert!(content(&v.crash_image(CrashKind::PowerLoss, s).0).is_empty());
        }
        assert_eq!(v.stats().injected_eio, 1);
    }

    #[test]
    fn fsync_enospc_fails_like_eio_and_forgets_the_pending_writes() {
        let (v, f) = setup(8);
        f.write_at(&[7u8; 4096], 0).unwrap();
        v.set_plan(FaultPlan {
            sync_enospc_at: Some(2),
            ..Default::default()
        });
        v.sync_dir(Path::new("/d")).unwrap(); // the first sync-like call passes
        let e = f.sync_all().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28), "ENOSPC, not EIO: {e}");
        f.sync_all().unwrap();
        for s in 0..20 {
            assert!(content(&v.crash_image(CrashKind::PowerLoss, s).0).is_empty());
        }
        assert_eq!((v.stats().injected_enospc, v.stats().injected_eio), (1, 0));
        // A directory's sync can fail too.
        v.set_plan(FaultPlan {
            sync_enospc: 1.0,
            ..Default::default()
        });
        assert_eq!(
            v.sync_dir(Path::new("/d")).unwrap_err().raw_os_error(),
            Some(28)
        );
    }

    #[test]
    fn enospc_leaves_a_short_write() {
        let (v, f) = setup(7);
        v.set_plan(FaultPlan {
            write_enospc_at: Some(1),
            ..Default::default()
        });
        let e = f.write_at(&[3u8; 8192], 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28));
        assert!(f.len().unwrap() < 8192 && f.len().unwrap() % 512 == 0);
        f.write_at(&[3u8; 8192], 0).unwrap();
        assert_eq!(v.stats().injected_enospc, 1);
    }

    #[test]
    fn inject_vfs_fails_exactly_the_nth_matching_sync() {
        let inner: Arc<dyn Vfs> = Arc::new(FaultVfs::new(FaultConfig::new(9)));
        inner.create_dir_all(Path::new("/x/wal")).unwrap();
        let v = InjectVfs::new(inner, "wal", 3);
        let w = v.open(Path::new("/x/wal/seg"), create()).unwrap();
        let d = v.open(Path::new("/x/data"), create()).unwrap();
        d.sync_data().unwrap(); // does not match the filter
        w.sync_data().unwrap();
        w.sync_all().unwrap();
        assert!(w.sync_data().is_err(), "the third matching sync fails");
        w.sync_data().unwrap();
        // Directories count with files, and ENOSPC can replace EIO.
        let v = InjectVfs::pass_through(v.inner.clone()).with_sync_enospc("/x/wal", 2);
        let w = v.open(Path::new("/x/wal/seg"), create()).unwrap();
        v.sync_dir(Path::new("/x")).unwrap(); // does not match
        w.sync_data().unwrap();
        let e = v.sync_dir(Path::new("/x/wal")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28), "{e}");
        v.sync_dir(Path::new("/x/wal")).unwrap();
        assert_eq!(parse_sync_eio_spec("wal:100"), Ok(("wal".into(), 100)));
        assert!(parse_sync_eio_spec("wal").is_err() && parse_sync_eio_spec("wal:0").is_err());
    }

    #[test]
    fn inject_vfs_refuses_growth_while_the_trigger_exists() {
        let trigger = std::env::temp_dir().join(format!("walnut-full-{}", std::process::id()));
        let _ = std::fs::remove_file(&trigger);
        let inner: Arc<dyn Vfs> = Arc::new(FaultVfs::new(FaultConfig::new(10)));
        inner.create_dir_all(Path::new("/x")).unwrap();
        let v = InjectVfs::pass_through(inner).with_disk_full_while(&trigger);
        let f = v.open(Path::new("/x/f"), create()).unwrap();
        f.write_at(&[1u8; 8192], 0).unwrap();
        std::fs::write(&trigger, b"").unwrap();
        f.write_at(&[2u8; 4096], 4096).unwrap(); // within the file: allowed
        let full = |r: io::Result<()>| r.unwrap_err().raw_os_error() == Some(28);
        assert!(full(f.write_at(&[3u8; 4096], 6144)), "a write past the end");
        assert!(full(f.set_len(16384)), "a longer length");
        f.set_len(4096).unwrap(); // shorter: allowed
        assert_eq!(f.len().unwrap(), 4096);
        std::fs::write(&trigger, b"/y/").unwrap(); // another volume is full
        f.write_at(&[4u8; 8192], 4096).unwrap();
        assert_eq!(f.len().unwrap(), 12288);
        std::fs::write(&trigger, b"/x/").unwrap();
        assert!(full(f.write_at(&[5u8; 1], 12288)), "this volume is full");
        std::fs::remove_file(&trigger).unwrap();
        f.write_at(&[5u8; 1], 12288).unwrap();
    }

    #[test]
    fn direct_io_needs_alignment() {
        let v = FaultVfs::new(FaultConfig::new(8));
        let f = v
            .open(
                Path::new("/f"),
                OpenMode {
                    create: true,
                    direct: true,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(
            f.write_at(&[0u8; 100], 0).unwrap_err().raw_os_error(),
            Some(22)
        );
        f.write_at(&[0u8; 4096], 4096).unwrap();
    }
}
