//! Single faults at chosen points, each with the outcome DESIGN.md promises, on the
//! fault-injecting file system (`walnut_io::fault`):
//!
//! - a data page that fails its checksum, with no full-page image to repair it, is reported
//!   (XX001, naming the file and block) and never used, by a scan, an index lookup or redo;
//!   with a full-page image after the checkpoint, redo repairs it;
//! - a short write on a full disk extending a data file fails the statement with 53100 and is
//!   cut back, so the file stays a whole number of blocks;
//! - a crash between creating a table's files and committing leaves harmless orphan files,
//!   whose ids new tables do not reuse (not yet when the SMGR CREATE records had not reached
//!   the disk: a known bug, that case's test is ignored until it is fixed);
//! - a crash after a DROP or TRUNCATE commits and before its files are removed: redo of the
//!   commit record removes them;
//! - a removal that fails after a DROP commits is a warning of the commit, not an error: the
//!   table is gone, and the next checkpoint removes the file;
//! - a crash in the middle of a spread checkpoint, or right after it completes, loses no
//!   acknowledged commit.
//!
//! The crash points are reached exactly through [`support::hook_vfs`].

mod support;

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use support::{hook_vfs, Hook, Io};
use walnut_common::{
    ColumnDef, DataType, ErrorKind, RelFileId, SqlState, TableDef, Tid, Value, BLCKSZ,
};
use walnut_io::fault::{CrashKind, FaultConfig, FaultPlan, FaultVfs};
use walnut_io::Vfs;
use walnut_storage::control::DbState;
use walnut_storage::txn::{RowWrite, Txn};
use walnut_storage::{Cause, Storage, StorageConfig};
use walnut_wal::{CommitOpts, SessionId};

const DIR: &str = "/data";

fn config(full_page_writes: bool) -> StorageConfig {
    StorageConfig {
        // Large enough that no page is evicted: a page is written only by a checkpoint.
        shared_buffers_pages: 256,
        checkpoint_timeout_s: 3600,
        max_wal_size_mb: 10_000,
        // WAL reaches the disk only when a commit (or the test) flushes it.
        wal_writer_delay_ms: 60_000,
        full_page_writes,
        ..Default::default()
    }
}

fn table(name: &str) -> TableDef {
    TableDef {
        name: name.into(),
        columns: vec![
            ColumnDef {
                name: "k".into(),
                ty: DataType::Int4,
                not_null: true,
                default: None,
                identity: None,
            },
            ColumnDef {
                name: "v".into(),
                ty: DataType::Text,
                not_null: false,
                default: None,
                identity: None,
            },
        ],
        primary_key: Some(vec![0]),
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    }
}

fn begin(st: &Arc<Storage>) -> Txn {
    Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)))
}

fn commit(t: Txn) {
    t.commit(&CommitOpts::new(SessionId::next())).unwrap();
}

/// A row of about 300 bytes: some 25 to a page.
fn row(k: i32) -> Vec<Value> {
    vec![
        Value::Int4(k),
        Value::Text(format!("{k:06}{}", "v".repeat(300))),
    ]
}

fn create(st: &Arc<Storage>, name: &str, keys: std::ops::Range<i32>) {
    let mut t = begin(st);
    t.create_table(table(name)).unwrap();
    let info = t.table(name).unwrap();
    for k in keys {
        t.insert(&info, &row(k)).unwrap();
    }
    commit(t);
}

/// The keys of `name`'s visible rows, by a heap scan, with their TIDs.
fn scan(st: &Arc<Storage>, name: &str) -> walnut_common::Result<Vec<(Tid, i32)>> {
    let t = begin(st);
    let info = t.table(name).unwrap_or_else(|| panic!("no table {name}"));
    let mut out = Vec::new();
    t.scan(&info, &mut |tid, r| {
        out.push((tid, r[0].as_i64().expect("int4") as i32));
        Ok(true)
    })?;
    t.rollback();
    Ok(out)
}

/// Looks `k` up through the primary-key index.
fn lookup(st: &Arc<Storage>, name: &str, k: i32) -> walnut_common::Result<Option<Vec<Value>>> {
    let t = begin(st);
    let info = t.table(name).expect("table");
    let key = [Value::Int4(k)];
    let mut found = None;
    t.index_scan(
        &info,
        Bound::Included(&key[..]),
        Bound::Included(&key[..]),
        &mut |_, r| {
            found = Some(r);
            Ok(false)
        },
    )?;
    t.rollback();
    Ok(found)
}

fn rel_path(rel: RelFileId) -> PathBuf {
    Path::new(DIR).join("base").join(rel.0.to_string())
}

fn verify_ok(vfs: &FaultVfs) -> walnut_storage::verify::Report {
    let r = walnut_storage::verify::verify(Arc::new(vfs.clone()), Path::new(DIR)).unwrap();
    assert!(r.is_ok(), "verify found problems:\n{r}");
    r
}

/// Flips bytes in the middle of `block` of the file at `path`, on disk (visible and durable).
fn damage(vfs: &FaultVfs, path: &Path, block: u64) {
    let off = block * BLCKSZ as u64 + 4000;
    let old = vfs.read_file(path).unwrap()[off as usize..off as usize + 8].to_vec();
    let new: Vec<u8> = old.iter().map(|b| !b).collect();
    vfs.corrupt(path, off, &new).unwrap();
}

fn assert_corrupt_block(e: &walnut_common::Error, rel: RelFileId, block: u32) {
    assert_eq!(e.sqlstate, SqlState::DATA_CORRUPTED, "{e}");
    assert_eq!(e.kind, ErrorKind::Corruption, "{e}");
    let names = format!("invalid page in block {block} of relation base/{}", rel.0);
    assert!(
        e.message.contains(&names),
        "the error names the block and file ({names:?}): {e}"
    );
}

#[test]
fn a_page_that_fails_its_checksum_is_reported_and_never_used() {
    let fv = FaultVfs::new(FaultConfig::new(21));
    let vfs: Arc<dyn Vfs> = Arc::new(fv.clone());
    let dir = Path::new(DIR);
    Storage::initdb(vfs.clone(), dir).unwrap();
    let st = Storage::open(vfs.clone(), dir, config(true)).unwrap();
    create(&st, "t", 0..100);
    let heap = st.catalog.get("t").unwrap().relfile;
    let rows = scan(&st, "t").unwrap();
    let on = |b: u32| rows.iter().find(|(tid, _)| tid.block.0 == b).unwrap().1;
    let (good, bad) = (on(0), on(1));
    st.shutdown().unwrap();
    drop(st);

    damage(&fv, &rel_path(heap), 1);
    let block1 = |v: &FaultVfs| v.read_file(&rel_path(heap)).unwrap()[BLCKSZ..2 * BLCKSZ].to_vec();
    let damaged = block1(&fv);
    let st = Storage::open(vfs.clone(), dir, config(true)).unwrap();
    for attempt in 0..2 {
        // A failed read leaves nothing behind in the pool: the second scan fails the same way.
        let e = scan(&st, "t").expect_err("a scan through the damaged page fails");
        assert_corrupt_block(&e, heap, 1);
        let e = lookup(&st, "t", bad).expect_err("a lookup of a row on the damaged page fails");
        assert_corrupt_block(&e, heap, 1);
        assert!(
            lookup(&st, "t", good).unwrap().is_some(),
            "attempt {attempt}: rows on other pages are still read"
        );
    }
    // Never used: nothing writes the page back, not even a checkpoint.
    st.checkpoint_now(DbState::InProduction).unwrap();
    st.shutdown().unwrap();
    drop(st);
    assert!(block1(&fv) == damaged, "the damaged page was written back");
    let r = walnut_storage::verify::verify(vfs, dir).unwrap();
    assert!(
        r.problems.iter().any(|p| p.relfile == Some(heap)
            && p.block.map(|b| b.0) == Some(1)
            && p.what.contains("page verification failed")),
        "verify reports the damaged page:\n{r}"
    );
}

/// A table on disk as of a checkpoint, then a change to its block 0 (a delete) committed after
/// it, then a process kill; block 0 is then damaged in the crash image. Returns the image, the
/// heap file and the deleted key.
fn damaged_after_checkpoint(full_page_writes: bool) -> (FaultVfs, RelFileId, i32) {
    let fv = FaultVfs::new(FaultConfig::new(22));
    let vfs: Arc<dyn Vfs> = Arc::new(fv.clone());
    let dir = Path::new(DIR);
    Storage::initdb(vfs.clone(), dir).unwrap();
    let st = Storage::open(vfs, dir, config(full_page_writes)).unwrap();
    create(&st, "t", 0..60);
    let heap = st.catalog.get("t").unwrap().relfile;
    st.checkpoint_now(DbState::InProduction).unwrap();
    let (tid, k) = scan(&st, "t").unwrap()[3];
    assert_eq!(tid.block.0, 0);
    let mut t = begin(&st);
    let info = t.table("t").unwrap();
    assert_eq!(t.delete(&info, tid).unwrap(), RowWrite::Done);
    commit(t);
    let (image, _) = fv.crash_image(CrashKind::ProcessKill, 1);
    drop(st);
    damage(&image, &rel_path(heap), 0);
    (image, heap, k)
}

#[test]
fn redo_refuses_a_page_that_fails_its_checksum_when_no_full_page_image_repairs_it() {
    // full_page_writes = off: the delete's record carries no image of block 0, so redo must
    // read the page, and must refuse it.
    let (image, heap, _) = damaged_after_checkpoint(false);
    let e = Storage::open(Arc::new(image), Path::new(DIR), config(false))
        .err()
        .expect("recovery must not use a page that fails its checksum");
    assert_corrupt_block(&e, heap, 0);
    assert!(
        e.message.starts_with("redo of record at"),
        "the error names the record being redone: {e}"
    );
}

#[test]
fn redo_repairs_a_page_that_fails_its_checksum_from_a_full_page_image() {
    // The control case: the first change after the checkpoint logged an image of block 0,
    // and redo restores it without reading the damaged page.
    let (image, _, deleted) = damaged_after_checkpoint(true);
    let st = Storage::open(Arc::new(image.clone()), Path::new(DIR), config(true)).unwrap();
    let keys: Vec<i32> = scan(&st, "t")
        .unwrap()
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    let want: Vec<i32> = (0..60).filter(|&k| k != deleted).collect();
    assert_eq!(keys, want);
    st.shutdown().unwrap();
    drop(st);
    let r = verify_ok(&image);
    assert_eq!(r.live_rows, 59);
}

#[test]
fn a_short_write_extending_a_data_file_is_cut_back_to_whole_blocks() {
    let mut partial = 0;
    for seed in 1..=6 {
        let fv = FaultVfs::new(FaultConfig::new(seed));
        let heap_path: Arc<OnceLock<PathBuf>> = Arc::new(OnceLock::new());
        // The file's length right after each failed write to the heap, before the engine
        // reacts.
        let torn: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
        let hook: Arc<Hook> = {
            let (fv, heap_path, torn) = (fv.clone(), heap_path.clone(), torn.clone());
            Arc::new(move |io, run| {
                let r = run();
                if r.is_err() && heap_path.get().map(PathBuf::as_path) == Some(io.path()) {
                    torn.lock()
                        .unwrap()
                        .push(fv.read_file(io.path()).unwrap().len() as u64);
                }
                r
            })
        };
        let dir = Path::new(DIR);
        let inner: Arc<dyn Vfs> = Arc::new(fv.clone());
        Storage::initdb(inner.clone(), dir).unwrap();
        let vfs: Arc<dyn Vfs> = Arc::new(hook_vfs(inner, hook));
        let st = Storage::open(vfs.clone(), dir, config(true)).unwrap();
        create(&st, "t", 0..5);
        let heap = st.catalog.get("t").unwrap().relfile;
        let path = rel_path(heap);
        let _ = heap_path.set(path.clone());
        let len_before = fv.read_file(&path).unwrap().len() as u64;
        assert_eq!(len_before, BLCKSZ as u64);
        // The next write to the heap file (the extension by its second block) fails with
        // ENOSPC after a random sector-aligned prefix.
        fv.set_plan(FaultPlan {
            write_enospc_at: Some(1),
            path_filter: Some(path.to_string_lossy().into_owned()),
            ..Default::default()
        });
        let mut t = begin(&st);
        let info = t.table("t").unwrap();
        let e = (5..200)
            .find_map(|k| t.insert(&info, &row(k)).err())
            .expect("an insert needs a second block");
        drop(t);
        assert_eq!(e.sqlstate, SqlState::DISK_FULL, "seed {seed}: {e}");
        assert!(e.message.contains("could not extend file"), "{e}");
        assert_eq!(fv.stats().injected_enospc, 1);
        let torn = torn.lock().unwrap().clone();
        assert_eq!(torn.len(), 1, "seed {seed}: one failed write");
        let len = fv.read_file(&path).unwrap().len() as u64;
        let tail_bytes = torn[0] % BLCKSZ as u64;
        if tail_bytes > 0 {
            partial += 1;
            assert_eq!(
                len, len_before,
                "seed {seed}: the short write (the file was {} bytes after it) is cut back to where the block starts",
                torn[0]
            );
        } else {
            // Nothing written, or the whole block (and then ENOSPC): whole blocks either way,
            // left as they are; the block is not counted, and the next extension rewrites it.
            assert_eq!(len, torn[0], "seed {seed}");
        }
        assert_eq!(len % BLCKSZ as u64, 0, "seed {seed}: a half-extended file");
        // With space again, the next insert extends at the same place.
        fv.set_plan(FaultPlan::default());
        let mut t = begin(&st);
        let info = t.table("t").unwrap();
        for k in 5..60 {
            t.insert(&info, &row(k)).unwrap();
        }
        commit(t);
        st.shutdown().unwrap();
        drop(st);
        assert_eq!(fv.read_file(&path).unwrap().len() % BLCKSZ, 0);
        let r = verify_ok(&fv);
        assert_eq!(r.live_rows, 60, "seed {seed}");
    }
    // A cut-back was needed in most runs (a prefix of 1 to 15 of the block's 16 sectors).
    eprintln!("{partial} of 6 short writes left a partial block to cut back");
    assert!(partial > 0, "no run left a partial block to cut back");
}

/// Takes a process-kill and a power-loss image of `fv` now.
fn images(fv: &FaultVfs, seed: u64) -> Vec<(CrashKind, FaultVfs)> {
    [CrashKind::ProcessKill, CrashKind::PowerLoss]
        .into_iter()
        .map(|k| (k, fv.crash_image(k, seed).0))
        .collect()
}

/// A crash between CREATE TABLE's file creation and its commit: the files exist after recovery
/// (creating them synced the directory), the table does not; the files are orphans that verify
/// lists, and new tables get files of their own. `wal_flushed`: whether the SMGR CREATE
/// records reached the disk before the crash.
fn crash_between_create_and_commit(wal_flushed: bool) {
    let fv = FaultVfs::new(FaultConfig::new(23));
    let vfs: Arc<dyn Vfs> = Arc::new(fv.clone());
    let dir = Path::new(DIR);
    Storage::initdb(vfs.clone(), dir).unwrap();
    let st = Storage::open(vfs, dir, config(true)).unwrap();
    create(&st, "kept", 0..30);
    st.checkpoint_now(DbState::InProduction).unwrap();
    let mut t = begin(&st);
    t.create_table(table("lost")).unwrap();
    let info = t.table("lost").unwrap();
    for k in 0..30 {
        t.insert(&info, &row(k)).unwrap();
    }
    let lost = [info.relfile, info.index.unwrap()];
    if wal_flushed {
        st.wal().flush(st.wal().insert_lsn()).unwrap();
    }
    let taken = images(&fv, 5);
    drop(t);
    drop(st);
    for (kind, image) in taken {
        let what = format!("{kind:?}, WAL flushed: {wal_flushed}");
        for f in lost {
            assert!(
                image.exists(&rel_path(f)),
                "{what}: the crash left file {}",
                f.0
            );
        }
        let st = Storage::open(Arc::new(image.clone()), dir, config(true)).unwrap();
        assert!(st.catalog.get("lost").is_none(), "{what}");
        assert_eq!(scan(&st, "kept").unwrap().len(), 30, "{what}");
        // New tables get files of their own and work.
        create(&st, "again", 0..40);
        let again = st.catalog.get("again").unwrap();
        for f in std::iter::once(again.relfile).chain(again.index) {
            assert!(
                !lost.contains(&f),
                "{what}: a new table reuses orphan file {}",
                f.0
            );
        }
        assert_eq!(scan(&st, "again").unwrap().len(), 40, "{what}");
        st.shutdown().unwrap();
        drop(st);
        let r = verify_ok(&image);
        assert_eq!(
            r.orphan_files,
            lost.to_vec(),
            "{what}: verify lists the orphans"
        );
    }
}

#[test]
fn a_crash_between_creating_a_tables_files_and_commit_leaves_harmless_orphans() {
    crash_between_create_and_commit(true);
}

/// The SMGR CREATE records never reached the disk, so the relation-file counter recovered
/// from the last checkpoint hands the orphans' ids out again. Before `Storage::create_relation`
/// skipped ids whose file exists (PostgreSQL's `GetNewRelFileNumber`), the new table's index
/// build found the orphan index file's block 0 (the zero block its extension wrote) and
/// panicked ("index build into a non-empty relation"); this test found it.
#[test]
fn a_crash_before_the_create_records_reach_the_wal_leaves_harmless_orphans() {
    crash_between_create_and_commit(false);
}

#[test]
fn a_failed_removal_after_drop_commits_is_a_warning_and_the_next_checkpoint_removes_the_file() {
    let failing = Arc::new(AtomicBool::new(false));
    let hook: Arc<Hook> = {
        let failing = failing.clone();
        Arc::new(move |io, run| {
            if matches!(io, Io::Remove { path } if path.starts_with("/data/base"))
                && failing.load(Ordering::SeqCst)
            {
                return Err(std::io::Error::from_raw_os_error(5));
            }
            run()
        })
    };
    let fv = FaultVfs::new(FaultConfig::new(25));
    let dir = Path::new(DIR);
    let inner: Arc<dyn Vfs> = Arc::new(fv.clone());
    Storage::initdb(inner.clone(), dir).unwrap();
    let st = Storage::open(Arc::new(hook_vfs(inner, hook)), dir, config(true)).unwrap();
    create(&st, "gone", 0..10);
    let old = st.catalog.get("gone").unwrap();
    let files = [old.relfile, old.index.unwrap()];
    failing.store(true, Ordering::SeqCst);
    let mut t = begin(&st);
    t.drop_table("gone").unwrap();
    let outcome = t
        .commit(&CommitOpts::new(SessionId::next()))
        .expect("the commit stands");
    assert!(outcome.durable);
    assert_eq!(outcome.warnings.len(), 2, "{:?}", outcome.warnings);
    for w in &outcome.warnings {
        assert_eq!(
            (w.kind, w.sqlstate),
            (ErrorKind::Io, SqlState::IO_ERROR),
            "{w}"
        );
    }
    assert!(st.catalog.get("gone").is_none(), "the DROP committed");
    for f in files {
        assert!(fv.exists(&rel_path(f)), "file {} is still there", f.0);
    }
    // Still failing: the checkpoint keeps them for the next one.
    st.checkpoint_now(DbState::InProduction).unwrap();
    assert!(fv.exists(&rel_path(files[0])));
    failing.store(false, Ordering::SeqCst);
    st.checkpoint_now(DbState::InProduction).unwrap();
    for f in files {
        assert!(
            !fv.exists(&rel_path(f)),
            "file {} removed at the checkpoint",
            f.0
        );
    }
    st.shutdown().unwrap();
}

#[test]
fn a_crash_after_drop_or_truncate_commits_and_before_the_file_removal_removes_the_files() {
    // The images taken at the first removal of a relation file, before it runs.
    let taken: Arc<Mutex<Vec<(CrashKind, FaultVfs)>>> = Arc::new(Mutex::new(Vec::new()));
    let armed = Arc::new(AtomicBool::new(false));
    let fv = FaultVfs::new(FaultConfig::new(24));
    let hook: Arc<Hook> = {
        let (fv, taken, armed) = (fv.clone(), taken.clone(), armed.clone());
        Arc::new(move |io, run| {
            // The relation file's removal (the free-space map's comes before it).
            if matches!(io, Io::Remove { path } if path.starts_with("/data/base")
                && !path.to_string_lossy().ends_with("_fsm"))
                && armed.swap(false, Ordering::SeqCst)
            {
                taken.lock().unwrap().extend(images(&fv, 7));
            }
            run()
        })
    };
    let dir = Path::new(DIR);
    let inner: Arc<dyn Vfs> = Arc::new(fv.clone());
    Storage::initdb(inner.clone(), dir).unwrap();
    let st = Storage::open(Arc::new(hook_vfs(inner, hook)), dir, config(true)).unwrap();
    create(&st, "gone", 0..50);
    create(&st, "trunc", 0..50);
    st.checkpoint_now(DbState::InProduction).unwrap();
    for op in ["DROP", "TRUNCATE"] {
        let name = if op == "DROP" { "gone" } else { "trunc" };
        let old = st.catalog.get(name).unwrap();
        let old_files = [old.relfile, old.index.unwrap()];
        armed.store(true, Ordering::SeqCst);
        let mut t = begin(&st);
        if op == "DROP" {
            t.drop_table(name).unwrap();
        } else {
            t.truncate(name).unwrap();
        }
        commit(t);
        let at_removal = std::mem::take(&mut *taken.lock().unwrap());
        assert_eq!(at_removal.len(), 2, "{op}: the commit removed a file");
        for (kind, image) in at_removal {
            let what = format!("{op}, {kind:?}");
            for f in old_files {
                assert!(image.exists(&rel_path(f)), "{what}: file {} was there", f.0);
            }
            let st = Storage::open(Arc::new(image.clone()), dir, config(true)).unwrap();
            for f in old_files {
                assert!(
                    !image.exists(&rel_path(f)),
                    "{what}: redo removed file {}",
                    f.0
                );
            }
            if op == "DROP" {
                assert!(st.catalog.get(name).is_none(), "{what}");
            } else {
                assert!(scan(&st, name).unwrap().is_empty(), "{what}");
            }
            st.shutdown().unwrap();
            drop(st);
            let r = verify_ok(&image);
            assert!(
                r.orphan_files.is_empty(),
                "{what}: orphans {:?}",
                r.orphan_files
            );
        }
    }
    st.shutdown().unwrap();
}

/// A checkpoint paced by WAL (as when `max_wal_size` starts it) spreads its writes while
/// sessions keep committing; crash images are taken while its write phase is part way (before
/// its 5th and 30th page writes) and right after it replaced the control file. Every commit
/// acknowledged before an image is there after recovery, and verify passes. The image after
/// the control file catches a checkpoint that left a page dirty at its redo point unwritten:
/// recovery then starts after that page's changes.
#[test]
fn a_crash_in_the_middle_of_a_spread_checkpoint_loses_nothing() {
    type Taken = Vec<(String, CrashKind, FaultVfs, usize)>;
    let taken: Arc<Mutex<Taken>> = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(AtomicUsize::new(0));
    let fv = FaultVfs::new(FaultConfig::new(31));
    let hook: Arc<Hook> = {
        let (fv, taken, acked) = (fv.clone(), taken.clone(), acked.clone());
        let page_writes = AtomicUsize::new(0);
        Arc::new(move |io, run| {
            if std::thread::current().name() != Some("spread") {
                return run();
            }
            let take = |at: &str| {
                let n = acked.load(Ordering::SeqCst);
                let mut t = taken.lock().unwrap();
                for (kind, image) in images(&fv, 11) {
                    t.push((at.to_string(), kind, image, n));
                }
            };
            if matches!(io, Io::Write { path, .. } if path.starts_with("/data/base")) {
                let n = page_writes.fetch_add(1, Ordering::SeqCst) + 1;
                if n == 5 || n == 30 {
                    take(&format!("before page write {n}"));
                }
                return run();
            }
            let r = run();
            if matches!(io, Io::Rename { to, .. } if to.ends_with("pg_control")) {
                take("after the control file");
            }
            r
        })
    };
    let dir = Path::new(DIR);
    let inner: Arc<dyn Vfs> = Arc::new(fv.clone());
    Storage::initdb(inner.clone(), dir).unwrap();
    let mut cfg = StorageConfig {
        // A checkpoint cycle of about 2 MB of WAL: the commits below pace the writes.
        max_wal_size_mb: 4,
        // One write per page (the table's pages are adjacent, and a combined run would be
        // one write): the images fall between page writes, paced one by one. Combined
        // checkpoint writes are crashed in crash.rs.
        io_combine_limit: 1,
        ..config(true)
    };
    // Only the checkpoint writes pages: a background writer cleaning some first (it runs
    // sooner on a loaded machine) would leave the checkpoint fewer than the 30 writes the
    // images are taken at.
    cfg.write.bgwriter_lru_maxpages = 0;
    let st = Storage::open(Arc::new(hook_vfs(inner, hook)), dir, cfg).unwrap();
    create(&st, "t", 0..2000);
    let spread = {
        let st = st.clone();
        std::thread::Builder::new()
            .name("spread".into())
            .spawn(move || st.checkpoint(DbState::InProduction, Cause::Wal).unwrap())
            .unwrap()
    };
    let info = st.catalog.get("t").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut k = 2000;
    while !spread.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the checkpoint never ended"
        );
        let mut t = begin(&st);
        t.insert(&info, &row(k)).unwrap();
        commit(t);
        k += 1;
        acked.store((k - 2000) as usize, Ordering::SeqCst);
    }
    spread.join().unwrap();
    drop(st);
    let taken = std::mem::take(&mut *taken.lock().unwrap());
    assert_eq!(taken.len(), 6, "images at three points");
    for (at, kind, image, n) in taken {
        let what = format!("{kind:?} {at}, {n} commits acknowledged");
        recovers_all_keys(&image, 0..2000 + n as i32, &what);
    }
}

/// Recovers `image`, checks that table "t" holds every key of `keys` in its heap and its
/// index, shuts down cleanly and verifies the directory; `what` names the image.
fn recovers_all_keys(image: &FaultVfs, keys: std::ops::Range<i32>, what: &str) {
    let st = Storage::open(Arc::new(image.clone()), Path::new(DIR), config(true)).unwrap();
    let found: std::collections::HashSet<i32> = scan(&st, "t")
        .unwrap()
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    for key in keys {
        assert!(found.contains(&key), "{what}: row {key} lost");
        assert!(
            lookup(&st, "t", key).unwrap().is_some(),
            "{what}: key {key} not in the index"
        );
    }
    st.shutdown().unwrap();
    drop(st);
    verify_ok(image);
}

/// After crash recovery the server opens before its first checkpoint, which the checkpointer
/// makes in the background (held here at its first data, status or control file I/O). Commits
/// go on meanwhile; the control file still names the crashed run's checkpoint; and a crash
/// then, a process kill or a power loss, recovers from that checkpoint's redo point again and
/// loses nothing: neither what the first recovery replayed nor what was committed after it.
#[test]
fn recovery_opens_before_its_checkpoint_and_a_crash_before_that_ends_loses_nothing() {
    use walnut_storage::control::ControlFile;
    let fv = FaultVfs::new(FaultConfig::new(41));
    let dir = Path::new(DIR);
    Storage::initdb(Arc::new(fv.clone()), dir).unwrap();
    let st = Storage::open(Arc::new(fv.clone()), dir, config(true)).unwrap();
    create(&st, "t", 0..500);
    let crashed_at = ControlFile::read(&fv, dir).unwrap();
    // A power loss: the pages exist only in the dead run's memory; the commits' WAL is durable.
    let (image, _) = fv.crash_image(CrashKind::PowerLoss, 1);
    drop(st);
    let held = Arc::new((Mutex::new(true), std::sync::Condvar::new()));
    let hook: Arc<Hook> = {
        let held = held.clone();
        Arc::new(move |io, run| {
            if std::thread::current().name() == Some("checkpointer")
                && !io.path().starts_with(Path::new(DIR).join("wal"))
            {
                let (m, c) = &*held;
                let mut h = m.lock().unwrap();
                while *h {
                    h = c.wait(h).unwrap();
                }
            }
            run()
        })
    };
    let st = Storage::open(
        Arc::new(hook_vfs(Arc::new(image.clone()), hook)),
        dir,
        config(true),
    )
    .unwrap();
    let ctl = ControlFile::read(&image, dir).unwrap();
    assert_eq!(
        (ctl.checkpoint_lsn, ctl.redo_lsn),
        (crashed_at.checkpoint_lsn, crashed_at.redo_lsn),
        "open wrote no checkpoint"
    );
    assert_ne!(ctl.state, DbState::ShutDown);
    let info = st.catalog.get("t").unwrap();
    for k in 500..700 {
        let mut t = begin(&st);
        t.insert(&info, &row(k)).unwrap();
        commit(t);
    }
    for (kind, again) in images(&image, 43) {
        recovers_all_keys(
            &again,
            0..700,
            &format!("{kind:?} during the deferred checkpoint"),
        );
    }
    // Let the checkpoint finish: it names a redo point past the crash.
    *held.0.lock().unwrap() = false;
    held.1.notify_all();
    st.request_checkpoint().unwrap();
    let ctl = ControlFile::read(&image, dir).unwrap();
    assert!(ctl.redo_lsn > crashed_at.redo_lsn);
    st.shutdown().unwrap();
}

/// Once shutdown has begun, a checkpoint that starts late (the checkpointer's first one after
/// crash recovery, started as the server opens, can lose the race to the shutdown checkpoint)
/// does nothing: the control file keeps the shutdown checkpoint's state.
#[test]
fn a_checkpoint_after_the_shutdown_checkpoint_leaves_the_control_file_shut_down() {
    use walnut_storage::control::ControlFile;
    let fv = FaultVfs::new(FaultConfig::new(47));
    let dir = Path::new(DIR);
    Storage::initdb(Arc::new(fv.clone()), dir).unwrap();
    let st = Storage::open(Arc::new(fv.clone()), dir, config(true)).unwrap();
    create(&st, "t", 0..10);
    st.shutdown().unwrap();
    let shut = ControlFile::read(&fv, dir).unwrap();
    assert_eq!(shut.state, DbState::ShutDown);
    st.checkpoint(DbState::InProduction, Cause::AfterRecovery)
        .unwrap();
    let after = ControlFile::read(&fv, dir).unwrap();
    assert_eq!(
        (after.state, after.checkpoint_lsn),
        (DbState::ShutDown, shut.checkpoint_lsn)
    );
}
