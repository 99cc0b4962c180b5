//! Multi-block relation extension (`Smgr::extend_by`, PostgreSQL 16's `mdzeroextend`): more
//! than 8 blocks are reserved with `fallocate` (`FileIo::allocate`), fewer are written as zeros
//! in one write; a file system that refuses `fallocate` gets zeros; a full disk fails the
//! extension whole and leaves the file and `nblocks` as they were. On the fault-injecting file
//! system (which checks O_DIRECT's alignment), through a hook that counts and fails calls.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use walnut_common::{BlockNumber, ErrorKind, RelFileId, SqlState, BLCKSZ};
use walnut_io::fault::{FaultConfig, FaultVfs};
use walnut_io::hook::{FileRef, HookVfs, Hooks};
use walnut_io::Vfs;
use walnut_storage::smgr::{Relation, Smgr};

/// What the hook does with `allocate`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Alloc {
    /// Passes it on.
    Pass,
    /// Refuses with this errno, as a file system without `fallocate` does (or ENOSPC).
    Fail(i32),
    /// Passes it on, then reports ENOSPC, as a partial allocation would.
    PartThenFull,
}

/// Counts data-file writes (and the bytes they wrote) and allocations.
struct Count {
    alloc: Alloc,
    writes: AtomicU64,
    written: AtomicU64,
    allocs: AtomicU64,
}

impl Hooks for Count {
    fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.written.fetch_add(buf.len() as u64, Ordering::Relaxed);
        file.io.write_at(buf, offset)
    }

    fn allocate(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        self.allocs.fetch_add(1, Ordering::Relaxed);
        match self.alloc {
            Alloc::Pass => file.io.allocate(offset, len),
            Alloc::Fail(errno) => Err(io::Error::from_raw_os_error(errno)),
            Alloc::PartThenFull => {
                file.io.allocate(offset, len / 2)?;
                Err(io::Error::from_raw_os_error(28))
            }
        }
    }
}

struct Setup {
    smgr: Smgr,
    rel: Arc<Relation>,
    count: Arc<Count>,
    fault: FaultVfs,
    path: PathBuf,
}

fn setup(alloc: Alloc, direct: bool) -> Setup {
    let fault = FaultVfs::new(FaultConfig::new(7));
    let count = Arc::new(Count {
        alloc,
        writes: AtomicU64::new(0),
        written: AtomicU64::new(0),
        allocs: AtomicU64::new(0),
    });
    let vfs: Arc<dyn Vfs> = Arc::new(HookVfs::new(Arc::new(fault.clone()), count.clone()));
    vfs.create_dir_all(Path::new("/base")).unwrap();
    let smgr = Smgr::new(vfs, PathBuf::from("/base")).with_direct_io(direct);
    let rel = smgr.create(RelFileId(16384)).unwrap();
    Setup {
        smgr,
        rel,
        count,
        fault,
        path: PathBuf::from("/base/16384"),
    }
}

impl Setup {
    fn extend_by(&self, n: u32) -> walnut_common::Result<BlockNumber> {
        let _ext = self.rel.extend_lock.lock();
        self.smgr.extend_by(&self.rel, n)
    }

    /// (writes, bytes written, allocations) since the last call.
    fn calls(&self) -> (u64, u64, u64) {
        (
            self.count.writes.swap(0, Ordering::Relaxed),
            self.count.written.swap(0, Ordering::Relaxed),
            self.count.allocs.swap(0, Ordering::Relaxed),
        )
    }

    fn file_len(&self) -> u64 {
        self.fault.read_file(&self.path).unwrap().len() as u64
    }

    /// Every block below `nblocks` reads back as zeros, except those `written` (filled with
    /// their block number's low byte + 1).
    fn check_blocks(&self, written: &[u32]) {
        let n = self.rel.nblocks.load(Ordering::Acquire);
        assert_eq!(self.file_len(), n as u64 * BLCKSZ as u64, "file size");
        let mut buf = vec![0xEEu8; BLCKSZ];
        for b in 0..n {
            self.smgr.read(&self.rel, BlockNumber(b), &mut buf).unwrap();
            let want = if written.contains(&b) { b as u8 + 1 } else { 0 };
            assert!(
                buf.iter().all(|&x| x == want),
                "block {b} does not read back as {want}"
            );
        }
    }
}

#[test]
fn extend_by_allocates_above_8_blocks_and_writes_zeros_below() {
    for direct in [false, true] {
        let s = setup(Alloc::Pass, direct);
        assert_eq!(s.extend_by(1).unwrap(), BlockNumber(0));
        assert_eq!(
            s.calls(),
            (1, BLCKSZ as u64, 0),
            "one block: one zero write"
        );
        assert_eq!(s.extend_by(8).unwrap(), BlockNumber(1));
        assert_eq!(
            s.calls(),
            (1, 8 * BLCKSZ as u64, 0),
            "8 blocks: one zero write"
        );
        assert_eq!(s.extend_by(9).unwrap(), BlockNumber(9));
        assert_eq!(s.calls(), (0, 0, 1), "9 blocks: fallocate, no write");
        // A page written into allocated space, then more space past it.
        let page = vec![11u8; BLCKSZ];
        s.smgr.write(&s.rel, BlockNumber(10), &page).unwrap();
        s.calls();
        assert_eq!(s.extend_by(40).unwrap(), BlockNumber(18));
        assert_eq!(s.calls(), (0, 0, 1));
        assert_eq!(s.rel.nblocks.load(Ordering::Acquire), 58);
        let one = {
            let _ext = s.rel.extend_lock.lock();
            s.smgr.extend(&s.rel).unwrap()
        };
        assert_eq!(one, BlockNumber(58));
        s.check_blocks(&[10]);
    }
}

#[test]
fn a_file_system_that_refuses_fallocate_gets_zeros_written() {
    for errno in [95, 22] {
        for direct in [false, true] {
            let s = setup(Alloc::Fail(errno), direct);
            assert_eq!(s.extend_by(20).unwrap(), BlockNumber(0));
            let (writes, written, allocs) = s.calls();
            assert_eq!(allocs, 1, "fallocate tried first");
            assert_eq!(written, 20 * BLCKSZ as u64, "then every block written");
            assert_eq!(writes, 2, "in 16-block writes");
            assert_eq!(s.extend_by(3).unwrap(), BlockNumber(20));
            s.check_blocks(&[]);
        }
    }
}

#[test]
fn a_full_disk_fails_the_extension_whole() {
    // fallocate reports ENOSPC: no zeros are written instead, nothing changes.
    let s = setup(Alloc::Fail(28), false);
    s.extend_by(2).unwrap();
    let e = s.extend_by(30).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Resource);
    assert_eq!(e.sqlstate, SqlState::DISK_FULL);
    assert_eq!(
        s.calls(),
        (1, 2 * BLCKSZ as u64, 1),
        "no zero write after ENOSPC"
    );
    assert_eq!(s.rel.nblocks.load(Ordering::Acquire), 2);
    s.check_blocks(&[]);
    // A partial allocation: whole zero blocks past the relation's end, not counted; the next
    // extension starts where the failed one did.
    let s = setup(Alloc::PartThenFull, true);
    s.extend_by(3).unwrap();
    assert_eq!(s.extend_by(24).unwrap_err().sqlstate, SqlState::DISK_FULL);
    assert_eq!(s.rel.nblocks.load(Ordering::Acquire), 3);
    assert_eq!(
        s.file_len(),
        15 * BLCKSZ as u64,
        "whole blocks left as they are"
    );
    assert_eq!(s.extend_by(2).unwrap(), BlockNumber(3));
    let mut buf = vec![1u8; BLCKSZ];
    s.smgr.read(&s.rel, BlockNumber(4), &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn allocated_blocks_past_a_power_loss_read_as_new_pages_or_are_gone() {
    let s = setup(Alloc::Pass, true);
    s.extend_by(12).unwrap();
    s.smgr
        .write(&s.rel, BlockNumber(0), &vec![1u8; BLCKSZ])
        .unwrap();
    s.smgr.sync_all().unwrap();
    s.extend_by(20).unwrap();
    let (mut shorter, mut whole) = (false, false);
    for seed in 0..64 {
        let (img, _) = s
            .fault
            .crash_image(walnut_io::fault::CrashKind::PowerLoss, seed);
        let bytes = img.read_file(&s.path).unwrap();
        assert!(bytes.len() >= 12 * BLCKSZ, "synced blocks stay");
        assert!(bytes[..BLCKSZ].iter().all(|&b| b == 1));
        assert!(
            bytes[BLCKSZ..].iter().all(|&b| b == 0),
            "new space is zeros"
        );
        shorter |= bytes.len() < 32 * BLCKSZ;
        whole |= bytes.len() == 32 * BLCKSZ;
        // Reopened, the relation has whole blocks, and past them a read gives a new page.
        let smgr = Smgr::new(Arc::new(img), PathBuf::from("/base"));
        let rel = smgr.open(RelFileId(16384)).unwrap();
        let n = rel.nblocks.load(Ordering::Acquire);
        assert!((12..=32).contains(&n));
        let mut buf = vec![9u8; BLCKSZ];
        smgr.read(&rel, BlockNumber(40), &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }
    assert!(
        shorter && whole,
        "the unsynced allocation may be lost or kept"
    );
}

/// Counts `allocate` calls and writes of zero blocks (extensions written as zeros) on files
/// under `base`.
#[derive(Default)]
struct CountExtensions {
    allocs: AtomicU64,
    zero_writes: AtomicU64,
}

impl Hooks for CountExtensions {
    fn write_at(&self, file: FileRef<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        if file.path.to_string_lossy().contains("/base/") && buf.iter().all(|&b| b == 0) {
            self.zero_writes.fetch_add(1, Ordering::Relaxed);
        }
        file.io.write_at(buf, offset)
    }

    fn allocate(&self, file: FileRef<'_>, offset: u64, len: u64) -> io::Result<()> {
        if file.path.to_string_lossy().contains("/base/") {
            self.allocs.fetch_add(1, Ordering::Relaxed);
        }
        file.io.allocate(offset, len)
    }
}

#[test]
fn a_bulk_load_extends_its_relation_once_per_batch() {
    use std::sync::atomic::AtomicBool;
    use walnut_common::{ColumnDef, DataType, TableDef, Value};
    use walnut_storage::txn::Txn;
    use walnut_storage::{Storage, StorageConfig};
    use walnut_wal::{CommitOpts, SessionId};

    for direct in [false, true] {
        let fault: Arc<dyn Vfs> = Arc::new(FaultVfs::new(FaultConfig::new(21)));
        let dir = Path::new("/data");
        Storage::initdb(fault.clone(), dir).unwrap();
        let counts = Arc::new(CountExtensions::default());
        let vfs: Arc<dyn Vfs> = Arc::new(HookVfs::new(fault, counts.clone()));
        let mut cfg = StorageConfig {
            shared_buffers_pages: 1024,
            ..Default::default()
        };
        cfg.io_direct.data = direct;
        let st = Storage::open(vfs, dir, cfg).unwrap();
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        t.create_table(TableDef {
            name: "t".into(),
            columns: vec![
                ColumnDef {
                    name: "id".into(),
                    ty: DataType::Int4,
                    not_null: true,
                    default: None,
                    identity: None,
                },
                ColumnDef {
                    name: "v".into(),
                    ty: DataType::Text,
                    not_null: true,
                    default: None,
                    identity: None,
                },
            ],
            primary_key: None,
            fillfactor: 100,
            autovacuum_enabled: true,
            checks: Vec::new(),
        })
        .unwrap();
        t.commit(&CommitOpts::new(SessionId::next())).unwrap();
        let (a0, z0) = (
            counts.allocs.load(Ordering::Relaxed),
            counts.zero_writes.load(Ordering::Relaxed),
        );
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        let info = t.table("t").unwrap();
        for id in 0..800 {
            t.insert_bulk(&info, &[Value::Int4(id), Value::Text("r".repeat(1000))])
                .unwrap();
        }
        t.finish_bulk().unwrap();
        t.commit(&CommitOpts::new(SessionId::next())).unwrap();
        let allocs = counts.allocs.load(Ordering::Relaxed) - a0;
        let zero_writes = counts.zero_writes.load(Ordering::Relaxed) - z0;
        let rel = st.smgr.open(info.relfile).unwrap();
        let pages = rel.nblocks.load(Ordering::Acquire) as u64;
        eprintln!(
            "direct {direct}: {pages} pages, {allocs} allocations, {zero_writes} zero writes"
        );
        assert!(pages >= 90, "{pages} pages");
        // Batches of 32 pages: one allocation each, and the last, smaller batch one
        // allocation or one write of zeros.
        assert_eq!(allocs + zero_writes, pages.div_ceil(32), "direct {direct}");
        assert!(allocs >= pages / 32);
        st.shutdown().unwrap();
    }
}
