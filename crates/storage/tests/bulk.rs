//! Crash tests of bulk loads (DESIGN.md, "Bulk load") on the fault-injecting file system
//! (`walnut_io::fault`): a load (`Txn::insert_bulk`, whole pages logged as `HEAP_NEWPAGES`
//! images), a checkpoint in its middle, its commit, and then a bottom-up index build
//! (`Txn::add_primary_key`, pages logged as `BTREE_NEWPAGE` images), with crash images —
//! power losses (unsynced writes dropped, torn, reordered) and process kills — taken before
//! every Nth write or sync of the run, through the file-system hook ([`support::hook_vfs`]).
//!
//! Each image is recovered and checked:
//! - the load is all there or not at all: the table holds its first rows plus either every
//!   loaded row (exactly once, with its values) or none; every one if the commit had been
//!   acknowledged when the image was taken, none if the load's transaction was never to
//!   commit;
//! - the primary key is there only if its build committed (all of it if acknowledged), and
//!   then a lookup through the index finds every row;
//! - `walnut_storage::verify` finds no problem after a clean shutdown (pages, heap, B-tree
//!   structure, index and heap in agreement).

mod support;

use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use support::{hook_vfs, Hook, Io};
use walnut_common::{ColumnDef, DataType, TableDef, Value};
use walnut_io::fault::{CrashKind, FaultConfig, FaultVfs};
use walnut_io::Vfs;
use walnut_storage::aio::IoMethod;
use walnut_storage::control::DbState;
use walnut_storage::txn::Txn;
use walnut_storage::{Storage, StorageConfig};
use walnut_wal::{CommitOpts, SessionId};

const DIR: &str = "/data";
/// Rows before the load (committed with ordinary inserts).
const FIRST: i32 = 10;

fn config(pool_pages: usize) -> StorageConfig {
    StorageConfig {
        shared_buffers_pages: pool_pages,
        checkpoint_timeout_s: 3600,
        max_wal_size_mb: 10_000,
        wal_writer_delay_ms: 60_000,
        full_page_writes: true,
        // A checkpoint writes one page per call, so that images fall between its page
        // writes as often as the counts below assume (combined checkpoint writes are
        // crashed in crash.rs).
        io_combine_limit: 1,
        ..Default::default()
    }
}

fn table() -> TableDef {
    TableDef {
        name: "t".into(),
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
        primary_key: None,
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    }
}

/// A row of about 250 bytes: some 30 to a page.
fn row(k: i32) -> Vec<Value> {
    vec![
        Value::Int4(k),
        Value::Text(format!("{k:07}{}", "b".repeat(240))),
    ]
}

fn begin(st: &Arc<Storage>) -> Txn {
    Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)))
}

fn commit(t: Txn) {
    t.commit(&CommitOpts::new(SessionId::next())).unwrap();
}

/// Creates table `t` with its [`FIRST`] rows, committed with ordinary inserts.
fn create_with_first_rows(st: &Arc<Storage>) {
    let mut t = begin(st);
    t.create_table(table()).unwrap();
    let info = t.table("t").unwrap();
    for k in 0..FIRST {
        t.insert(&info, &row(k)).unwrap();
    }
    commit(t);
}

/// What the run had done when an image was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Phase {
    /// Loading; the commit not yet acknowledged.
    Loading = 0,
    /// The load's commit acknowledged; the index build not yet acknowledged.
    Loaded = 1,
    /// The index build's commit acknowledged.
    Indexed = 2,
}

struct Taken {
    kind: CrashKind,
    phase: Phase,
    image: FaultVfs,
}

/// How the load's transaction reaches the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Into {
    /// The committed table: batches enter it through the buffer pool.
    Pool,
    /// The table truncated first, in the load's own transaction, which then loads the first
    /// rows again with the rest: batches go straight to the new file, one write each. The
    /// load's checkpoint runs between the second batch's record and its write (from the hook,
    /// before the second write to the file): its redo point passes a record whose pages it
    /// did not sync, so the load's end must sync the file itself (`BulkInsert::finish`).
    NewFile,
}

/// Runs the workload on a hooked file system that takes both kinds of image before every
/// `every`th changing I/O call. `commit_load`: whether the load commits (else it is dropped,
/// and nothing more runs). Returns the images and the number of rows loaded.
fn run(
    seed: u64,
    pool_pages: usize,
    every: u64,
    commit_load: bool,
    into: Into,
) -> (Vec<Taken>, i32) {
    let fv = FaultVfs::new(FaultConfig::new(seed));
    let taken: Arc<Mutex<Vec<Taken>>> = Arc::new(Mutex::new(Vec::new()));
    let phase = Arc::new(AtomicU8::new(Phase::Loading as u8));
    let armed = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    // Into::NewFile: the new file's path, the writes to it so far, and the storage.
    let new_file: Arc<Mutex<Option<PathBuf>>> = Arc::new(Mutex::new(None));
    let new_file_writes = Arc::new(AtomicU64::new(0));
    let storage: Arc<OnceLock<Weak<Storage>>> = Arc::new(OnceLock::new());
    let hook: Arc<Hook> = {
        let (fv, taken, phase, armed, calls) = (
            fv.clone(),
            taken.clone(),
            phase.clone(),
            armed.clone(),
            calls.clone(),
        );
        let (new_file, new_file_writes, storage) =
            (new_file.clone(), new_file_writes.clone(), storage.clone());
        Arc::new(
            move |io: &Io<'_>, run: &mut dyn FnMut() -> std::io::Result<()>| {
                let to_new_file = matches!(io, Io::Write { .. })
                    && new_file.lock().unwrap().as_deref() == Some(io.path());
                if to_new_file && new_file_writes.fetch_add(1, Ordering::SeqCst) == 1 {
                    let st = storage.get().and_then(Weak::upgrade).expect("storage");
                    st.checkpoint_now(DbState::InProduction).unwrap();
                }
                let relevant =
                    io.path().starts_with("/data/base") || io.path().starts_with("/data/wal");
                // The index build makes few calls (a write per batch of 32 pages): an image
                // before each of them.
                let every = if phase.load(Ordering::SeqCst) == Phase::Loaded as u8 {
                    1
                } else {
                    every
                };
                if armed.load(Ordering::SeqCst)
                    && relevant
                    && calls.fetch_add(1, Ordering::SeqCst) % every == every - 1
                {
                    let phase = match phase.load(Ordering::SeqCst) {
                        0 => Phase::Loading,
                        1 => Phase::Loaded,
                        _ => Phase::Indexed,
                    };
                    let n = calls.load(Ordering::SeqCst);
                    let mut t = taken.lock().unwrap();
                    for kind in [CrashKind::ProcessKill, CrashKind::PowerLoss] {
                        let (image, _) = fv.crash_image(kind, seed ^ n);
                        t.push(Taken { kind, phase, image });
                    }
                }
                run()
            },
        )
    };
    let dir = Path::new(DIR);
    let inner: Arc<dyn Vfs> = Arc::new(fv.clone());
    Storage::initdb(inner.clone(), dir).unwrap();
    let mut cfg = config(pool_pages);
    if into == Into::NewFile {
        // No write-back: the fault layer counts a written-back page durable, and the
        // background writer's page-cache sweep would make the window below hit or miss by
        // timing.
        cfg.write.checkpoint_flush_after = 0;
    }
    let st = Storage::open(Arc::new(hook_vfs(inner, hook)), dir, cfg).unwrap();
    storage.set(Arc::downgrade(&st)).unwrap();
    create_with_first_rows(&st);
    st.checkpoint_now(DbState::InProduction).unwrap();
    armed.store(true, Ordering::SeqCst);

    let loaded = 3000;
    let mut t = begin(&st);
    let mut from = FIRST;
    if into == Into::NewFile {
        t.truncate("t").unwrap();
        let id = t.table("t").unwrap().relfile;
        *new_file.lock().unwrap() = Some(dir.join("base").join(id.0.to_string()));
        from = 0;
    }
    let info = t.table("t").unwrap();
    for k in from..FIRST + loaded {
        t.insert_bulk(&info, &row(k)).unwrap();
        if k == FIRST + loaded / 2 && into == Into::Pool {
            // A checkpoint in the middle of the load: its redo point falls between batches.
            st.checkpoint_now(DbState::InProduction).unwrap();
        }
    }
    if into == Into::NewFile {
        // The batches are written in the background (io_method = worker): the end of the
        // load waits for them.
        t.finish_bulk().unwrap();
        assert!(
            new_file_writes.load(Ordering::SeqCst) > 2,
            "the load wrote no batch straight to its new file"
        );
    }
    if !commit_load {
        t.finish_bulk().unwrap();
        // Its records may reach the disk with a later flush, never a commit record.
        st.checkpoint_now(DbState::InProduction).unwrap();
        drop(t);
        st.shutdown().unwrap();
        return (std::mem::take(&mut *taken.lock().unwrap()), loaded);
    }
    commit(t);
    phase.store(Phase::Loaded as u8, Ordering::SeqCst);
    if into == Into::NewFile {
        // Power losses right after the acknowledgement, before anything else syncs the file.
        let mut t = taken.lock().unwrap();
        for i in 0..8 {
            let (image, _) = fv.crash_image(CrashKind::PowerLoss, seed ^ (i << 32));
            t.push(Taken {
                kind: CrashKind::PowerLoss,
                phase: Phase::Loaded,
                image,
            });
        }
    }

    let mut t = begin(&st);
    t.add_primary_key("t", vec![0]).unwrap();
    commit(t);
    phase.store(Phase::Indexed as u8, Ordering::SeqCst);
    st.checkpoint_now(DbState::InProduction).unwrap();
    st.shutdown().unwrap();
    drop(st);
    let mut t = std::mem::take(&mut *taken.lock().unwrap());
    for kind in [CrashKind::ProcessKill, CrashKind::PowerLoss] {
        t.push(Taken {
            kind,
            phase: Phase::Indexed,
            image: fv.crash_image(kind, seed).0,
        });
    }
    (t, loaded)
}

/// Recovers `image` and checks it (see the module's documentation). Returns whether the load
/// and the index were there.
fn check(what: &str, image: &FaultVfs, phase: Phase, loaded: i32, committed: bool) -> (bool, bool) {
    let dir = Path::new(DIR);
    let st = Storage::open(Arc::new(image.clone()), dir, config(64))
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let t = begin(&st);
    let info = t
        .table("t")
        .unwrap_or_else(|| panic!("{what}: table t is gone"));
    let mut keys = BTreeSet::new();
    t.scan(&info, &mut |_, r| {
        let k = r[0].as_i64().expect("int4") as i32;
        assert_eq!(r, row(k), "{what}: row {k} has other values");
        assert!(keys.insert(k), "{what}: row {k} is there twice");
        Ok(true)
    })
    .unwrap_or_else(|e| panic!("{what}: scan failed: {e}"));
    let first: BTreeSet<i32> = (0..FIRST).collect();
    let all: BTreeSet<i32> = (0..FIRST + loaded).collect();
    let has_load = if keys == all {
        true
    } else {
        assert_eq!(
            keys.len(),
            first.len(),
            "{what}: a load of {loaded} rows is partly there ({} rows)",
            keys.len()
        );
        assert_eq!(keys, first, "{what}");
        false
    };
    if phase >= Phase::Loaded {
        assert!(has_load, "{what}: the acknowledged load is missing");
    }
    if !committed {
        assert!(
            !has_load,
            "{what}: the rows of a load that never committed are visible"
        );
    }
    let has_index = info.index.is_some();
    if phase == Phase::Indexed {
        assert!(has_index, "{what}: the acknowledged primary key is missing");
    }
    if has_index {
        assert!(has_load, "{what}: an index without the load");
        for k in [
            0,
            FIRST,
            FIRST + loaded / 2,
            FIRST + loaded - 1,
            7 * loaded / 11,
        ] {
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
            )
            .unwrap_or_else(|e| panic!("{what}: index lookup of {k} failed: {e}"));
            assert_eq!(found, Some(row(k)), "{what}: index lookup of {k}");
        }
    }
    t.rollback();
    st.shutdown().unwrap();
    drop(st);
    let r = walnut_storage::verify::verify(Arc::new(image.clone()), dir).unwrap();
    assert!(r.is_ok(), "{what}: verify found problems:\n{r}");
    (has_load, has_index)
}

/// Held by each crash test while it runs: one holds dozens of in-memory crash images (about
/// 13 GB at its peak), and two at once came near a 24 GB machine's memory.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn check_all(seed: u64, pool_pages: usize, every: u64, commit_load: bool, into: Into) {
    // A test that failed while holding it leaves it poisoned; the others go on.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (images, loaded) = run(seed, pool_pages, every, commit_load, into);
    assert!(
        images.len() > 20,
        "seed {seed}: only {} images",
        images.len()
    );
    let (mut with_load, mut without, mut mid_load, mut mid_build) = (0, 0, 0, 0);
    for (i, tk) in images.iter().enumerate() {
        let what = format!(
            "seed {seed}, pool {pool_pages}, {into:?}, image {i} ({:?}, {:?})",
            tk.kind, tk.phase
        );
        let (has_load, has_index) = check(&what, &tk.image, tk.phase, loaded, commit_load);
        if has_load {
            with_load += 1;
        } else {
            without += 1;
        }
        mid_load += (tk.phase == Phase::Loading) as u32;
        mid_build += (tk.phase == Phase::Loaded && !has_index) as u32;
    }
    println!(
        "seed {seed}, pool {pool_pages}: {} images, {with_load} with the load, {without} \
         without; {mid_load} taken during the load, {mid_build} during the index build \
         without the index",
        images.len()
    );
    assert!(mid_load > 0, "seed {seed}: no image taken during the load");
    if commit_load {
        assert!(
            with_load > 0 && without > 0,
            "seed {seed}: both outcomes seen"
        );
        assert!(
            mid_build > 0,
            "seed {seed}: no image taken during the index build"
        );
    }
}

#[test]
fn a_crash_during_a_committed_bulk_load_and_index_build_keeps_all_or_nothing() {
    // A large pool: the load's pages leave it only at checkpoints.
    check_all(31, 512, 7, true, Into::Pool);
}

#[test]
fn a_crash_during_a_bulk_load_with_evictions_keeps_all_or_nothing() {
    // A small pool: loaded pages are evicted (written, after their WAL) while the load runs.
    check_all(32, 48, 11, true, Into::Pool);
}

#[test]
fn a_crash_during_an_uncommitted_bulk_load_shows_none_of_it() {
    check_all(33, 48, 9, false, Into::Pool);
}

#[test]
fn a_crash_during_a_committed_load_into_a_table_its_transaction_truncated_keeps_all_or_nothing() {
    // Batches bypass the pool; a checkpoint in the middle of one's writes.
    check_all(34, 48, 2, true, Into::NewFile);
}

#[test]
fn a_crash_during_an_uncommitted_load_into_a_table_its_transaction_truncated_shows_none_of_it() {
    check_all(35, 48, 1, false, Into::NewFile);
}

fn keys_of(st: &Arc<Storage>) -> Vec<i32> {
    let t = begin(st);
    let info = t.table("t").unwrap();
    let mut keys = Vec::new();
    t.scan(&info, &mut |_, r| {
        keys.push(r[0].as_i64().expect("int4") as i32);
        Ok(true)
    })
    .unwrap();
    t.rollback();
    keys
}

#[test]
fn a_bulk_load_is_visible_at_its_end_to_itself_and_at_its_commit_to_others() {
    let fv = FaultVfs::new(FaultConfig::new(34));
    let dir = Path::new(DIR);
    Storage::initdb(Arc::new(fv.clone()), dir).unwrap();
    let st = Storage::open(Arc::new(fv.clone()), dir, config(256)).unwrap();
    let mut t = begin(&st);
    t.create_table(table()).unwrap();
    commit(t);

    // An aborted load leaves no row, and its written pages hold only invisible tuples.
    let mut t = begin(&st);
    let info = t.table("t").unwrap();
    for k in 0..500 {
        t.insert_bulk(&info, &row(k)).unwrap();
    }
    t.finish_bulk().unwrap();
    t.rollback();
    assert!(keys_of(&st).is_empty(), "rows of an aborted load");

    let mut t = begin(&st);
    let info = t.table("t").unwrap();
    for k in 0..1000 {
        t.insert_bulk(&info, &row(k)).unwrap();
    }
    // A row too large for a page fails like an insert's, and the load goes on.
    let big = vec![Value::Int4(-1), Value::Text("x".repeat(9000))];
    let e = t.insert_bulk(&info, &big).unwrap_err();
    assert_eq!(
        e.sqlstate,
        walnut_common::SqlState::PROGRAM_LIMIT_EXCEEDED,
        "{e}"
    );
    assert!(
        keys_of(&st).is_empty(),
        "another session sees an uncommitted load"
    );
    t.finish_bulk().unwrap();
    t.new_statement();
    let mut mine = 0;
    t.scan(&info, &mut |_, _| {
        mine += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(
        mine, 1000,
        "the loading transaction sees its rows after the load"
    );
    // The last, partly filled page takes later rows: one insert extends nothing.
    let rel_blocks = |st: &Arc<Storage>| {
        let info = st.catalog.get("t").unwrap();
        fv.read_file(&Path::new(DIR).join("base").join(info.relfile.0.to_string()))
            .unwrap()
            .len()
    };
    let before = rel_blocks(&st);
    t.insert(&info, &row(1000)).unwrap();
    assert_eq!(
        rel_blocks(&st),
        before,
        "an insert after the load extended the table"
    );
    commit(t);
    let mut keys = keys_of(&st);
    keys.sort_unstable();
    assert_eq!(keys, (0..=1000).collect::<Vec<_>>());
    st.shutdown().unwrap();
    drop(st);
    let r = walnut_storage::verify::verify(Arc::new(fv.clone()), dir).unwrap();
    assert!(r.is_ok(), "verify found problems:\n{r}");
}

/// What a load onto a filling disk got: its error and where (`"insert"` or `"finish"`), if
/// any, and the writes it tried on its file.
type Outcome = (Option<(walnut_common::Error, &'static str)>, u64);

/// A load into a file its transaction created, on a disk that fills up after `ok_writes`
/// writes to that file; the transaction then rolls back, and the table must be as before.
fn load_onto_a_full_disk(method: IoMethod, ok_writes: u64) -> Outcome {
    let fv = FaultVfs::new(FaultConfig::new(35));
    let dir = Path::new(DIR);
    Storage::initdb(Arc::new(fv.clone()), dir).unwrap();
    let target: Arc<Mutex<Option<PathBuf>>> = Arc::new(Mutex::new(None));
    let writes = Arc::new(AtomicU64::new(0));
    let hook: Arc<Hook> = {
        let (target, writes) = (target.clone(), writes.clone());
        Arc::new(
            move |io: &Io<'_>, run: &mut dyn FnMut() -> std::io::Result<()>| {
                let ours = matches!(io, Io::Write { .. })
                    && target.lock().unwrap().as_deref() == Some(io.path());
                if ours && writes.fetch_add(1, Ordering::SeqCst) >= ok_writes {
                    return Err(std::io::Error::from_raw_os_error(28));
                }
                run()
            },
        )
    };
    let cfg = StorageConfig {
        io_method: method,
        ..config(256)
    };
    let st = Storage::open(Arc::new(hook_vfs(Arc::new(fv.clone()), hook)), dir, cfg).unwrap();
    create_with_first_rows(&st);

    let mut t = begin(&st);
    t.truncate("t").unwrap();
    let id = t.table("t").unwrap().relfile;
    *target.lock().unwrap() = Some(dir.join("base").join(id.0.to_string()));
    let info = t.table("t").unwrap();
    let mut failed = None;
    for k in 0..5000 {
        if let Err(e) = t.insert_bulk(&info, &row(k)) {
            failed = Some((e, "insert"));
            break;
        }
    }
    if failed.is_none() {
        failed = t.finish_bulk().err().map(|e| (e, "finish"));
    }
    t.rollback();
    // The truncation and the load are undone; the table takes new rows.
    assert_eq!(keys_of(&st), (0..FIRST).collect::<Vec<_>>());
    let mut t = begin(&st);
    let info = t.table("t").unwrap();
    t.insert(&info, &row(-1)).unwrap();
    commit(t);
    assert_eq!(keys_of(&st).len(), FIRST as usize + 1);
    st.shutdown().unwrap();
    (failed, writes.load(Ordering::SeqCst))
}

#[test]
fn a_full_disk_fails_a_load_into_a_new_file_with_53100_and_the_transaction_undoes_it() {
    let (none, all) = load_onto_a_full_disk(IoMethod::Worker, u64::MAX);
    assert!(none.is_none() && all >= 4, "{all} writes");
    let full = |method, ok| {
        let (failed, tried) = load_onto_a_full_disk(method, ok);
        let (e, at) = failed.expect("the load fails");
        assert_eq!(e.sqlstate, walnut_common::SqlState::DISK_FULL, "{e}");
        assert!(tried > ok, "the disk filled up");
        at
    };
    // In the background (io_method = worker): the batch that failed was handed over earlier;
    // a later batch or the end of the load reports it.
    full(IoMethod::Worker, 1);
    // The last batch fails: only the end of the load can report it.
    assert_eq!(full(IoMethod::Worker, all - 1), "finish");
    // io_method = sync: the insert that completed the batch gets the error itself.
    assert_eq!(full(IoMethod::Sync, 1), "insert");
}

/// Loads `keys` (in this order) into a new table `t` and commits; returns its blocks.
fn load_keys(st: &Arc<Storage>, keys: impl Iterator<Item = i32>, null_last: bool) -> u32 {
    let mut t = begin(st);
    let _ = t.drop_table("t");
    t.create_table(table()).unwrap();
    let info = t.table("t").unwrap();
    for k in keys {
        t.insert_bulk(&info, &row(k)).unwrap();
    }
    if null_last {
        t.insert_bulk(&info, &[Value::Int4(-1), Value::Null])
            .unwrap();
    }
    commit(t);
    let rel = st.smgr.open(begin(st).table("t").unwrap().relfile).unwrap();
    rel.nblocks.load(Ordering::Acquire)
}

/// An index build over a table of more than 3 × 1024 blocks scans it with two helper threads
/// besides the session's (max_parallel_maintenance_workers = 2, the default), each over its
/// own part: keys loaded in descending order come out of the index ascending and whole; a key
/// of the session's part duplicated in the last helper's part is 23505; a NULL key in the last
/// part is 23502. With no helpers (0) the index is the same.
#[test]
fn a_parallel_index_build_scan_sorts_across_parts_and_finds_duplicates_and_nulls_in_any() {
    for workers in [2, 0] {
        let fv = FaultVfs::new(FaultConfig::new(36));
        let dir = Path::new(DIR);
        Storage::initdb(Arc::new(fv.clone()), dir).unwrap();
        let cfg = StorageConfig {
            max_parallel_maintenance_workers: workers,
            ..config(512)
        };
        let st = Storage::open(Arc::new(fv.clone()), dir, cfg).unwrap();
        let n = 95_000;
        let blocks = load_keys(&st, (0..n).rev(), false);
        assert!(blocks >= 3 * 1024, "{blocks} blocks: two helpers");
        let mut t = begin(&st);
        t.add_primary_key("t", vec![0]).unwrap();
        commit(t);
        let t = begin(&st);
        let info = t.table("t").unwrap();
        let mut keys = Vec::new();
        t.index_scan(&info, Bound::Unbounded, Bound::Unbounded, &mut |_, r| {
            assert_eq!(r, row(r[0].as_i64().unwrap() as i32));
            keys.push(r[0].as_i64().unwrap() as i32);
            Ok(true)
        })
        .unwrap();
        t.rollback();
        assert!(keys == (0..n).collect::<Vec<_>>(), "workers {workers}");

        // The last key loaded (0, in the last part) also first (in the session's part).
        load_keys(&st, std::iter::once(0).chain((0..n).rev()), false);
        let mut t = begin(&st);
        let e = t.add_primary_key("t", vec![0]).unwrap_err();
        assert_eq!(e.sqlstate, walnut_common::SqlState::UNIQUE_VIOLATION, "{e}");
        t.rollback();
        // A NULL key in the last part.
        load_keys(&st, (0..n).rev(), true);
        let mut t = begin(&st);
        let e = t.add_primary_key("t", vec![1]).unwrap_err();
        assert_eq!(
            e.sqlstate,
            walnut_common::SqlState::NOT_NULL_VIOLATION,
            "{e}"
        );
        assert!(e.message.contains("column \"v\""), "{e}");
        t.rollback();
        st.shutdown().unwrap();
    }
}
