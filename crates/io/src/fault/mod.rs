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
//!
//! [`Inject`] is the other half of this module: faults injected into another file system
//! (the real one, under a server started by an end-to-end test), through [`crate::hook`], and
//! armed from the environment by [`vfs_from_env`].
//!
//! Layout: this file holds the state and crash images, `file.rs` the [`FileIo`] and [`Vfs`]
//! implementations over it, `inject.rs` [`Inject`].

use crate::{FileIo, OpenMode, Vfs};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

mod file;
mod inject;

pub use inject::{parse_sync_eio_spec, vfs_from_env, Inject};

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

/// splitmix64: small, fast, and good enough to drive test choices (the fault layer's, and
/// tests' workloads: `Rng(seed)`).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
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

#[cfg(test)]
mod tests;
