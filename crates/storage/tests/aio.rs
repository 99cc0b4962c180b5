//! Read-ahead of sequential scans by the I/O workers (`io_method = worker`, `crate::aio`):
//! with a buffer pool too small for the table, a full scan's blocks are read by the
//! `io worker` threads ahead of the scanning thread, in reads of up to `io_combine_limit`
//! blocks; with `io_method = sync`, `effective_io_concurrency = 0` or buffered data files
//! (which the kernel reads ahead) only the scanning thread reads. The same for an index range
//! scan's heap fetches and next leaves. On the fault-injecting file system (which checks
//! O_DIRECT's alignment).

use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use walnut_common::BlockNumber;
use walnut_common::{ColumnDef, DataType, TableDef, Value};
use walnut_io::fault::{FaultConfig, FaultVfs};
use walnut_io::hook::{FileRef, HookVfs, Hooks};
use walnut_io::Vfs;
use walnut_storage::aio::{IoMethod, ReadAhead};
use walnut_storage::bufpool::ReadMode;
use walnut_storage::control::DbState;
use walnut_storage::txn::Txn;
use walnut_storage::{IoDirect, Storage, StorageConfig};
use walnut_wal::{CommitOpts, SessionId};

/// Counts blocks read from relation files by I/O worker threads and by other threads, each
/// read after 200 µs, as a device would take (the in-memory file system reads in a
/// microsecond, and a scan would then always outrun the workers), and the largest read by a
/// worker, in blocks.
#[derive(Default)]
struct CountReads {
    by_workers: AtomicU64,
    by_others: AtomicU64,
    largest_by_workers: AtomicU64,
    /// The primary-key index's file name, and the blocks of it read by workers.
    index_file: std::sync::OnceLock<String>,
    index_by_workers: AtomicU64,
}

impl Hooks for CountReads {
    fn read_at(&self, file: FileRef<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if file.path.parent().and_then(Path::file_name) == Some("base".as_ref()) {
            let worker = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("io worker") || n == "io uring");
            let c = if worker {
                &self.by_workers
            } else {
                &self.by_others
            };
            let blocks = (buf.len() / 8192) as u64;
            c.fetch_add(blocks, Ordering::Relaxed);
            if worker {
                self.largest_by_workers.fetch_max(blocks, Ordering::Relaxed);
                if file.path.file_name().and_then(|n| n.to_str())
                    == self.index_file.get().map(String::as_str)
                {
                    self.index_by_workers.fetch_add(blocks, Ordering::Relaxed);
                }
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        file.io.read_at(buf, offset)
    }
}

/// Loads 2000 rows of 1000 bytes (about 250 heap blocks), reopens the storage with a 64-page
/// pool,
/// `io_method` and `effective_io_concurrency` as given, scans the table twice
/// and returns (blocks read by I/O workers, blocks read by others) during the scans.
fn scan_reads(method: IoMethod, distance: u32, direct: bool) -> (u64, u64) {
    let (w, o, _, _) = scan_reads_with(method, distance, direct, 16, Scan::Seq);
    (w, o)
}

/// [`scan_reads`] with `io_combine_limit = combine`; also returns the largest read by a
/// worker, in blocks.
fn scan_reads_combined(
    method: IoMethod,
    distance: u32,
    direct: bool,
    combine: u32,
) -> (u64, u64, u64) {
    let (w, o, l, _) = scan_reads_with(method, distance, direct, combine, Scan::Seq);
    (w, o, l)
}

/// How [`scan_reads_with`] reads the table.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scan {
    /// `Txn::scan`.
    Seq,
    /// `Txn::index_scan` over every key.
    Index,
    /// Every heap block pinned in order behind a `ReadAhead::maintenance`, with
    /// `maintenance_io_concurrency` = this and `effective_io_concurrency` = the distance.
    Maintenance(u32),
}

/// [`scan_reads_combined`], scanning as `scan` says; also returns the blocks of the index
/// read by workers.
fn scan_reads_with(
    method: IoMethod,
    distance: u32,
    direct: bool,
    combine: u32,
    scan: Scan,
) -> (u64, u64, u64, u64) {
    let fault: Arc<dyn Vfs> = Arc::new(FaultVfs::new(FaultConfig::new(3)));
    scan_reads_on(
        fault,
        Path::new("/data"),
        method,
        distance,
        direct,
        combine,
        scan,
    )
}

/// [`scan_reads_with`] on the file system `fault` (the name is historical: a test passes the
/// real one), data directory `dir`.
#[allow(clippy::too_many_arguments)]
fn scan_reads_on(
    fault: Arc<dyn Vfs>,
    dir: &Path,
    method: IoMethod,
    distance: u32,
    direct: bool,
    combine: u32,
    scan: Scan,
) -> (u64, u64, u64, u64) {
    let mut cfg = StorageConfig {
        shared_buffers_pages: 1024,
        io_direct: IoDirect {
            data: direct,
            ..IoDirect::default()
        },
        io_method: method,
        effective_io_concurrency: distance,
        io_combine_limit: combine,
        maintenance_io_concurrency: match scan {
            Scan::Maintenance(d) => d,
            _ => 16,
        },
        ..Default::default()
    };
    Storage::initdb(fault.clone(), dir).unwrap();
    let st = Storage::open(fault.clone(), dir, cfg.clone()).unwrap();
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
        primary_key: Some(vec![0]),
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    })
    .unwrap();
    let info = t.table("t").unwrap();
    for id in 0..2000 {
        t.insert(&info, &[Value::Int4(id), Value::Text("r".repeat(1000))])
            .unwrap();
    }
    let index = info.index.expect("a primary key");
    t.commit(&CommitOpts::new(SessionId::next())).unwrap();
    st.checkpoint_now(DbState::InProduction).unwrap();
    st.shutdown().unwrap();
    drop(st);
    // Reopened with a pool of 64 pages: the table does not fit.
    cfg.shared_buffers_pages = 64;
    let counts = Arc::new(CountReads::default());
    counts.index_file.set(index.0.to_string()).unwrap();
    let hooked: Arc<dyn Vfs> = Arc::new(HookVfs::new(fault, counts.clone()));
    let st = Storage::open(hooked, dir, cfg).unwrap();
    let (w0, o0) = (
        counts.by_workers.load(Ordering::Relaxed),
        counts.by_others.load(Ordering::Relaxed),
    );
    for _ in 0..2 {
        let t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        let info = t.table("t").unwrap();
        let mut n = 0;
        let mut visit = |_, row: Vec<Value>| {
            assert_eq!(row[1], Value::Text("r".repeat(1000)));
            n += 1;
            Ok(true)
        };
        match scan {
            Scan::Seq => t.scan(&info, &mut visit).unwrap(),
            Scan::Index => t
                .index_scan(&info, Bound::Unbounded, Bound::Unbounded, &mut visit)
                .unwrap(),
            Scan::Maintenance(_) => {
                let rel = st.smgr.open(info.relfile).unwrap();
                let end = rel.nblocks.load(Ordering::Acquire);
                let mut ahead = ReadAhead::maintenance(&st, &rel, end);
                for b in 0..end {
                    ahead.before(b);
                    drop(st.pool.pin(&rel, BlockNumber(b), ReadMode::Normal).unwrap());
                }
                n = 2000;
            }
        }
        assert_eq!(n, 2000);
        t.rollback();
    }
    st.shutdown().unwrap();
    (
        counts.by_workers.load(Ordering::Relaxed) - w0,
        counts.by_others.load(Ordering::Relaxed) - o0,
        counts.largest_by_workers.load(Ordering::Relaxed),
        counts.index_by_workers.load(Ordering::Relaxed),
    )
}

#[test]
fn io_workers_read_ahead_of_an_index_range_scan_heap_blocks_and_next_leaves() {
    let (workers, others, _, leaves) = scan_reads_with(IoMethod::Worker, 16, true, 16, Scan::Index);
    eprintln!("index scan: {workers} blocks read by I/O workers ({leaves} of the index), {others} by the scan");
    assert!(
        workers > others,
        "most heap blocks are read ahead: {workers} by workers, {others} by the scan"
    );
    assert!(leaves > 0, "next leaves are read ahead");
    for (method, distance, direct) in [
        (IoMethod::Sync, 16, true),
        (IoMethod::Worker, 0, true),
        (IoMethod::Worker, 16, false),
    ] {
        let (workers, others, _, _) = scan_reads_with(method, distance, direct, 16, Scan::Index);
        assert_eq!(workers, 0, "{method:?}, {distance}, direct {direct}");
        assert!(
            others >= 400,
            "{method:?}: the scan read every block itself: {others}"
        );
    }
}

#[test]
fn io_workers_combine_adjacent_blocks_up_to_io_combine_limit() {
    for combine in [1, 4, 16] {
        let (workers, others, largest) = scan_reads_combined(IoMethod::Worker, 16, true, combine);
        eprintln!("io_combine_limit = {combine}: {workers} blocks read by I/O workers, {others} by the scan, largest read {largest} blocks");
        assert!(
            workers > others,
            "{workers} by workers, {others} by the scan"
        );
        assert!(largest <= combine as u64, "a read of {largest} blocks");
        // A run is cut short only where a block is cached already or the scan passed it, so
        // with more than one block allowed some read takes several (how many depends on the
        // schedule, which the test does not assert on).
        assert!(
            combine == 1 || largest > 1,
            "io_combine_limit = {combine}: largest read {largest} blocks"
        );
    }
}

#[test]
fn io_workers_read_ahead_of_a_sequential_scan() {
    let (workers, others) = scan_reads(IoMethod::Worker, 16, true);
    eprintln!("io_method = worker: {workers} reads by I/O workers, {others} by the scan");
    assert!(
        workers > others,
        "most blocks are read ahead: {workers} by workers, {others} by the scan"
    );
}

#[test]
fn io_method_sync_zero_concurrency_and_buffered_io_read_nothing_ahead() {
    for (method, distance, direct) in [
        (IoMethod::Sync, 16, true),
        (IoMethod::Worker, 0, true),
        (IoMethod::Worker, 16, false),
    ] {
        let (workers, others) = scan_reads(method, distance, direct);
        eprintln!("{method:?}, effective_io_concurrency {distance}, direct {direct}: {workers} reads by I/O workers, {others} by the scan");
        assert_eq!(
            workers, 0,
            "{method:?}, effective_io_concurrency {distance}, direct {direct}"
        );
        assert!(
            others >= 400,
            "{method:?}: the scan read every block itself: {others}"
        );
    }
}

#[test]
fn maintenance_scans_read_ahead_by_maintenance_io_concurrency() {
    // effective_io_concurrency = 0 does not turn a maintenance scan's read-ahead off...
    let (workers, others, _, _) =
        scan_reads_with(IoMethod::Worker, 0, true, 16, Scan::Maintenance(16));
    assert!(
        workers > others,
        "{workers} by workers, {others} by the scan"
    );
    // ... maintenance_io_concurrency = 0 does.
    let (workers, others, _, _) =
        scan_reads_with(IoMethod::Worker, 16, true, 16, Scan::Maintenance(0));
    assert_eq!(workers, 0);
    assert!(others >= 400, "{others}");
}

#[test]
fn io_method_io_uring_reads_ahead_from_one_thread() {
    // On the in-memory file system (no descriptors) the io_uring thread reads each batch's
    // runs itself: the queueing, claiming and installing are io_uring's.
    let (workers, others, largest, _) = scan_reads_with(IoMethod::IoUring, 16, true, 16, Scan::Seq);
    assert!(
        workers > others,
        "{workers} by the io_uring thread, {others} by the scan"
    );
    assert!(largest > 1 && largest <= 16, "{largest}");
    let (workers, others, _, leaves) =
        scan_reads_with(IoMethod::IoUring, 16, true, 16, Scan::Index);
    assert!(
        workers > others && leaves > 0,
        "{workers} {others} {leaves}"
    );
    // Buffered data files: nothing read ahead.
    let (workers, _, _, _) = scan_reads_with(IoMethod::IoUring, 16, false, 16, Scan::Seq);
    assert_eq!(workers, 0);
}

#[test]
fn io_method_io_uring_reads_through_the_ring_on_a_real_file_system() {
    if walnut_io::uring::ReadRing::new(4).is_err() {
        eprintln!("io_uring_setup refused: skipped");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let real: Arc<dyn Vfs> = Arc::new(walnut_io::RealVfs);
    // O_DIRECT needs a file system that takes it (tmpfs does not).
    let direct = probe_direct(tmp.path());
    // The hook sees only reads that do not go through the ring: with it, the io_uring
    // thread makes none; the scan reads little itself; the rows (checked by the scan) are
    // right.
    let (by_ring_thread, others, _, _) =
        scan_reads_on(real, &dir, IoMethod::IoUring, 16, direct, 16, Scan::Seq);
    eprintln!("direct {direct}: {by_ring_thread} blocks read by the io_uring thread through read_at, {others} by the scan");
    if direct {
        assert_eq!(by_ring_thread, 0, "every read ahead went through the ring");
        assert!(others < 250, "the scan read {others} blocks itself");
    }
}

/// True if `dir`'s file system accepts an O_DIRECT open.
fn probe_direct(dir: &Path) -> bool {
    let mode = walnut_io::OpenMode {
        create: true,
        direct: true,
        ..Default::default()
    };
    let ok = walnut_io::RealVfs.open(&dir.join("probe"), mode).is_ok();
    let _ = std::fs::remove_file(dir.join("probe"));
    ok
}
