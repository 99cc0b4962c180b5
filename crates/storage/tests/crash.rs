//! Randomized crash tests through the fault-injecting file system (`walnut_io::fault`).
//!
//! Each round runs concurrent transactions against a storage engine on a [`FaultVfs`]: money
//! transfers between accounts (two row updates and a history insert with a long key, so the
//! history index splits often), with checkpoints requested in between and a buffer pool small
//! enough that pages are evicted (written) while transactions run. Every acknowledged commit
//! goes into a ledger with the file system's sequence number at acknowledgement.
//!
//! Meanwhile the test takes crash images — power losses (unsynced writes dropped, torn at
//! 512 B or 4 KiB, reordered) and process kills — at random moments, which fall in the middle
//! of checkpoints, page write-outs, splits and commits alike, and at two targeted crash points
//! per round that the file system hook ([`support::hook_vfs`]) reaches exactly:
//!
//! - **inside a checkpoint**: before the Nth I/O call of one of the checkpoint thread's
//!   checkpoints — of the whole checkpoint (page write-outs, fsyncs, WAL), of its writes of the
//!   status store's pages (open, write, fsync, fsync of `pg_xact` after creating a segment) or
//!   of its control-file replacement (create, truncate, write, fsync, rename, fsync of the
//!   directory);
//! - **inside a split**: right after a B-tree split of the history index allocated its new
//!   block (the zero block written, nothing of the split logged yet).
//!
//! Each image is recovered and checked:
//!
//! - every commit acknowledged before the image was taken is there (its history row);
//! - the sequence `ids`, from which each transfer takes a value (`nextval`), hands out a value
//!   above every acknowledged transfer's after recovery: logged ahead, never reissued;
//! - no transaction is partly there: each account's balance is its initial balance plus the
//!   transfers whose history rows exist, and the total is unchanged;
//! - `walnut_storage::verify` finds no problem after recovery and a clean shutdown.
//!
//! The test counts, and prints with its summary, the images taken **mid-checkpoint** (while the
//! checkpoint thread was inside `Storage::checkpoint_now`: a counter it bumps before and after
//! each call reads the same odd value before and after the image; the background
//! checkpointer's own checkpoints are not counted) and **mid-split** (some block that a split of the history
//! index allocated had not yet been written with its page: the split's pages were only in the
//! buffer pool and the WAL, so recovery must redo the whole split from its SMO record, or find
//! none of it if the record was not durable; only a split extends an index file here, so an
//! 8 KiB zero write to it marks one), and among these those with a split **half on disk** (a
//! page whose right link points at a split's new block written, the new block not). It
//! asserts that images mid-checkpoint and mid-split were taken, which the targeted points
//! guarantee and chance adds to.
//!
//! Half the rounds (bit 1 of the round's seed, [`direct_for`]) run with `io_direct =
//! 'data,wal,wal_init'`: relation files and WAL through O_DIRECT, which the fault layer checks
//! for alignment as the kernel does; their unsynced writes are torn the same way. Half (bit 2)
//! store full-page images whole (`wal_compression = off`), the others LZ4-compressed. Every
//! image recovers with the parallel redo (`recovery_workers = 3`).
//!
//! `WALNUT_CRASH_SEED` replays a seed (workload and crash choices; thread interleaving is the
//! OS's), `WALNUT_CRASH_ROUNDS` sets the number of rounds (default 8, each with
//! `WALNUT_CRASH_IMAGES` images, default 6). The seeds used are printed. An image that fails
//! its check is saved under `target/tmp/crash-images/` and replays, interleaving included,
//! with `WALNUT_CRASH_REPLAY=DIR` (the `replay` test): exactly for a power-loss image; for a
//! process-kill image the writes the page cache held replay as durable.

mod support;

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use support::{hook_vfs, Hook, Io};
use walnut_common::{ColumnDef, DataType, SqlState, TableDef, Value, BLCKSZ};
use walnut_io::fault::{CrashKind, FaultConfig, FaultVfs};
use walnut_io::Vfs;
use walnut_storage::control::DbState;
use walnut_storage::page::{self, PageBuf, PageKind};
use walnut_storage::txn::{RowWrite, Txn};
use walnut_storage::{btree, Storage, StorageConfig};
use walnut_wal::{CommitOpts, SessionId};

const ACCOUNTS: i32 = 50;
const INITIAL: i64 = 1000;
const WORKERS: u64 = 4;
/// Keys of table `scratch` ([`churn`]).
const SCRATCH_KEYS: u64 = 64;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// splitmix64, for the workload's choices.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The engine's configuration; with `direct`, `io_direct = 'data,wal,wal_init'` (the fault
/// layer then refuses, as O_DIRECT does, any transfer whose buffer, offset or length is not
/// 4096-aligned, and still tears unsynced writes at 512 B and 4 KiB).
fn config(direct: bool) -> StorageConfig {
    let mut c = StorageConfig {
        // Small: pages are evicted, so written, while transactions run.
        shared_buffers_pages: 48,
        checkpoint_timeout_s: 3600,
        // A checkpoint whenever 1 MB of WAL was written since the last redo point.
        max_wal_size_mb: 2,
        // Images recover with the parallel redo, three workers on any machine.
        recovery_workers: 3,
        // The churn thread runs VACUUM itself; an autovacuum worker of a run the test
        // abandons (a simulated crash) might go on writing to the image being recovered.
        autovacuum: walnut_storage::autovacuum::AutovacuumSettings {
            enabled: false,
            ..Default::default()
        },
        ..Default::default()
    };
    if direct {
        c.io_direct = walnut_storage::IoDirect::parse("data,wal,wal_init").unwrap();
        c.wal.direct = true;
        c.wal.direct_init = true;
    }
    c
}

/// Whether a round with this seed runs with `io_direct = 'data,wal,wal_init'`: bit 1 of the
/// seed, so that eight consecutive seeds cover each combination with bit 0 (a cache flusher
/// or not) twice.
fn direct_for(seed: u64) -> bool {
    seed & 2 != 0
}

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: true,
        default: None,
        identity: None,
    }
}

fn commit(t: Txn) -> walnut_common::Result<()> {
    // Each worker thread stands for one session.
    thread_local! {
        static SESSION: SessionId = SessionId::next();
    }
    t.commit(&CommitOpts::new(SESSION.with(|s| *s))).map(|_| ())
}

/// One acknowledged transfer.
#[derive(Clone, Debug)]
struct Entry {
    key: String,
    from: i32,
    to: i32,
    amount: i64,
    /// `FaultVfs::seq()` after the commit returned.
    acked_at: u64,
    /// The value the transfer took from sequence `ids`.
    id: i64,
}

/// The next value of sequence `ids` (`nextval`), in transaction `t`.
fn next_id(t: &mut Txn) -> walnut_common::Result<i64> {
    let seqs = t.sequences();
    let walnut_storage::txn::RelKind::Sequence(s) = seqs.lookup("ids") else {
        panic!("sequence ids is missing");
    };
    Ok(seqs.fetch(&s)?.first)
}

fn setup(st: &Arc<Storage>) {
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.create_sequence(walnut_common::SequenceDef::with_defaults("ids"))
        .unwrap();
    t.create_table(TableDef {
        name: "accounts".into(),
        columns: vec![col("aid", DataType::Int4), col("balance", DataType::Int8)],
        primary_key: Some(vec![0]),
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    })
    .unwrap();
    t.create_table(TableDef {
        name: "history".into(),
        columns: vec![
            col("key", DataType::Text),
            col("from_aid", DataType::Int4),
            col("to_aid", DataType::Int4),
            col("amount", DataType::Int8),
        ],
        primary_key: Some(vec![0]),
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    })
    .unwrap();
    t.create_table(TableDef {
        name: "bulge".into(),
        columns: vec![col("k", DataType::Int4), col("v", DataType::Int8)],
        primary_key: Some(vec![0]),
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    })
    .unwrap();
    t.create_table(TableDef {
        name: "scratch".into(),
        columns: vec![col("k", DataType::Int4), col("v", DataType::Int8)],
        primary_key: Some(vec![0]),
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    })
    .unwrap();
    commit(t).unwrap();
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let info = t.table("accounts").unwrap();
    for aid in 0..ACCOUNTS {
        t.insert(&info, &[Value::Int4(aid), Value::Int8(INITIAL)])
            .unwrap();
    }
    commit(t).unwrap();
}

/// Adds `delta` to account `aid`'s balance, following concurrent updates.
fn add(t: &mut Txn, aid: i32, delta: i64) -> walnut_common::Result<()> {
    let info = t.table("accounts").expect("accounts");
    let key = [Value::Int4(aid)];
    let mut found = None;
    t.index_scan(
        &info,
        Bound::Included(&key[..]),
        Bound::Included(&key[..]),
        &mut |tid, row| {
            found = Some((tid, row));
            Ok(false)
        },
    )?;
    let (mut tid, mut row) = found.expect("every account exists");
    loop {
        let bal = row[1].as_i64().expect("int8");
        let new = [Value::Int4(aid), Value::Int8(bal + delta)];
        match t.update(&info, tid, &row, &new)? {
            RowWrite::Done => return Ok(()),
            RowWrite::Changed(t2, r2) => {
                tid = t2;
                row = r2;
            }
            RowWrite::Gone => panic!("account {aid} vanished"),
        }
    }
}

fn transfer(
    st: &Arc<Storage>,
    rng: &mut Rng,
    worker: u64,
    seq: u64,
) -> walnut_common::Result<Entry> {
    let from = rng.below(ACCOUNTS as u64) as i32;
    let to = (from + 1 + rng.below(ACCOUNTS as u64 - 1) as i32) % ACCOUNTS;
    let amount = 1 + rng.below(100) as i64;
    // A long key, so that history's index splits every few dozen inserts.
    let key = format!(
        "{worker:02}-{seq:08}-{}",
        "k".repeat(150 + rng.below(100) as usize)
    );
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    // Lock accounts in aid order: no deadlocks.
    let (a, b) = if from < to {
        (from, -amount)
    } else {
        (to, amount)
    };
    let (c, d) = if from < to {
        (to, amount)
    } else {
        (from, -amount)
    };
    add(&mut t, a, b)?;
    add(&mut t, c, d)?;
    let id = next_id(&mut t)?;
    let info = t.table("history").expect("history");
    t.insert(
        &info,
        &[
            Value::Text(key.clone()),
            Value::Int4(from),
            Value::Int4(to),
            Value::Int8(amount),
        ],
    )?;
    commit(t)?;
    Ok(Entry {
        key,
        from,
        to,
        amount,
        acked_at: 0,
        id,
    })
}

/// One change to table `scratch`, which only VACUUM's records and `verify` check: inserts a
/// key 0..[`SCRATCH_KEYS`] if it has no row, deletes it if it has; a fifth of them abort. So
/// pages fill with deleted rows and aborted inserts (dead line pointers for VACUUM, their
/// index entries to remove) and keys come back after a delete (`prev` links for it to clear).
fn churn(st: &Arc<Storage>, rng: &mut Rng) -> walnut_common::Result<()> {
    let k = rng.below(SCRATCH_KEYS) as i32;
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let info = t.table("scratch").expect("scratch");
    let key = [Value::Int4(k)];
    let mut found = None;
    t.index_scan(
        &info,
        Bound::Included(&key[..]),
        Bound::Included(&key[..]),
        &mut |tid, _| {
            found = Some(tid);
            Ok(false)
        },
    )?;
    match found {
        Some(tid) => {
            t.delete(&info, tid)?;
        }
        None => t.insert(&info, &[Value::Int4(k), Value::Int8(rng.next() as i64)])?,
    }
    if rng.below(5) == 0 {
        t.rollback();
        Ok(())
    } else {
        commit(t)
    }
}

/// Rows table `bulge` grows by and loses again in one [`bulge`].
const BULGE_ROWS: i32 = 800;

/// Grows table `bulge` by [`BULGE_ROWS`] rows in one transaction and deletes them all in the
/// next, so that the next VACUUM finds an empty tail and cuts it off (`SMGR TRUNCATE`).
fn bulge(st: &Arc<Storage>, rng: &mut Rng) -> walnut_common::Result<()> {
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let info = t.table("bulge").expect("bulge");
    for k in 0..BULGE_ROWS {
        t.insert(&info, &[Value::Int4(k), Value::Int8(rng.next() as i64)])?;
    }
    commit(t)?;
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let mut tids = Vec::new();
    t.scan(&info, &mut |tid, _| {
        tids.push(tid);
        Ok(true)
    })?;
    for tid in tids {
        t.delete(&info, tid)?;
    }
    commit(t)
}

/// Rows of `table` (first column as text or int, second as int) visible now.
fn rows(st: &Arc<Storage>, table: &str) -> Vec<Vec<Value>> {
    try_rows(st, table).unwrap_or_else(|e| panic!("scan of {table}: {e}"))
}

fn try_rows(st: &Arc<Storage>, table: &str) -> walnut_common::Result<Vec<Vec<Value>>> {
    let t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let info = t.table(table).expect("table");
    let mut out = Vec::new();
    t.scan(&info, &mut |_, r| {
        out.push(r);
        Ok(true)
    })?;
    t.rollback();
    Ok(out)
}

/// Recovers `image`, checks the ledger and the invariants, shuts down, and runs the verifier.
/// After a process kill it first goes on: recovery, a few more transfers, then a power loss
/// of the recovered system, which must keep everything acknowledged before and after.
fn check_image(
    image: &FaultVfs,
    dir: &Path,
    must: &[Entry],
    what: &str,
    kind: CrashKind,
    seed: u64,
    direct: bool,
) {
    if kind == CrashKind::ProcessKill {
        let vfs: Arc<dyn Vfs> = Arc::new(image.clone());
        let st = Storage::open(vfs, dir, config(direct))
            .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
        let mut all = must.to_vec();
        let mut rng = Rng(seed);
        for seq in 0..30 {
            let mut e = transfer(&st, &mut rng, 99, seq)
                .unwrap_or_else(|e| panic!("{what}: transfer after recovery failed: {e}"));
            e.acked_at = image.seq();
            all.push(e);
        }
        let (lost_power, at) = image.crash_image(CrashKind::PowerLoss, seed ^ 0x1234);
        drop(st); // a crash: no shutdown
        let must_after: Vec<Entry> = all.into_iter().filter(|e| e.acked_at < at).collect();
        check_recovered(
            &lost_power,
            dir,
            &must_after,
            &format!("{what}, recovered, then a power loss"),
            direct,
        );
        return;
    }
    check_recovered(image, dir, must, what, direct);
}

/// Recovers `image`, checks the ledger and the invariants, shuts down, and runs the verifier.
fn check_recovered(image: &FaultVfs, dir: &Path, must: &[Entry], what: &str, direct: bool) {
    let vfs: Arc<dyn Vfs> = Arc::new(image.clone());
    let st = Storage::open(vfs.clone(), dir, config(direct))
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let history = try_rows(&st, "history").unwrap_or_else(|e| panic!("{what}: {e}"));
    let accounts = try_rows(&st, "accounts").unwrap_or_else(|e| panic!("{what}: {e}"));
    // A bulge is one transaction and its removal the next: all of it or none.
    let bulge = try_rows(&st, "bulge").unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        bulge.is_empty() || bulge.len() == BULGE_ROWS as usize,
        "{what}: {} rows of a bulge of {BULGE_ROWS}",
        bulge.len()
    );
    let present: HashMap<String, (i32, i32, i64)> = history
        .iter()
        .map(|r| {
            let k = match &r[0] {
                Value::Text(s) => s.clone(),
                v => panic!("{what}: history key {v:?}"),
            };
            let n = |v: &Value| v.as_i64().expect("int");
            (k, (n(&r[1]) as i32, n(&r[2]) as i32, n(&r[3])))
        })
        .collect();
    assert_eq!(
        present.len(),
        history.len(),
        "{what}: duplicate history keys"
    );
    for e in must {
        assert_eq!(
            present.get(&e.key),
            Some(&(e.from, e.to, e.amount)),
            "{what}: acknowledged commit {} (acked at seq {}) is missing after recovery",
            e.key,
            e.acked_at
        );
    }
    let mut expect: BTreeMap<i32, i64> = (0..ACCOUNTS).map(|a| (a, INITIAL)).collect();
    for (from, to, amount) in present.values() {
        *expect.get_mut(from).expect("account") -= amount;
        *expect.get_mut(to).expect("account") += amount;
    }
    let got: BTreeMap<i32, i64> = accounts
        .iter()
        .map(|r| (r[0].as_i64().unwrap() as i32, r[1].as_i64().unwrap()))
        .collect();
    assert_eq!(
        got, expect,
        "{what}: balances disagree with the history present: a transaction is partly visible"
    );
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let next = next_id(&mut t).unwrap_or_else(|e| panic!("{what}: nextval: {e}"));
    t.rollback();
    if let Some(e) = must.iter().max_by_key(|e| e.id) {
        assert!(
            next > e.id,
            "{what}: nextval gave {next} after recovery, but transfer {} (acked at seq {}) took {}",
            e.key,
            e.acked_at,
            e.id
        );
    }
    st.shutdown()
        .unwrap_or_else(|e| panic!("{what}: shutdown failed: {e}"));
    drop(st);
    let report = walnut_storage::verify::verify(vfs, dir)
        .unwrap_or_else(|e| panic!("{what}: verify could not run: {e}"));
    assert!(report.is_ok(), "{what}: verify found problems:\n{report}");
    FSM_FILES_VERIFIED.fetch_add(report.fsm_files as u64, Ordering::Relaxed);
}

/// Free-space map files `verify` checked in recovered images (all tests of this file).
static FSM_FILES_VERIFIED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// True on the checkpoint thread while it is inside `Storage::checkpoint_now`.
    static IN_CHECKPOINT: Cell<bool> = const { Cell::new(false) };
}

/// A targeted crash point, armed by the main thread and reached by the file system hook.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// Before the `nth` (1-based) I/O call, on a path containing `filter` ("" for any path),
    /// made by the checkpoint thread inside `Storage::checkpoint_now`; `left` counts down.
    Checkpoint {
        nth: u64,
        left: u64,
        filter: &'static str,
        kind: CrashKind,
        seed: u64,
    },
    /// Right after the next allocation of a block of the history index (inside a split).
    Split { kind: CrashKind, seed: u64 },
}

/// A crash image and what was going on when it was taken.
struct Image {
    vfs: FaultVfs,
    /// `FaultVfs::seq()` when it was taken.
    at: u64,
    kind: CrashKind,
    seed: u64,
    /// How it was chosen.
    how: String,
    /// Taken while the checkpoint thread was inside `Storage::checkpoint_now`.
    mid_checkpoint: bool,
    /// Taken while a split's pages were not all written (see the module documentation).
    mid_split: bool,
    /// Taken while a split was half on disk: a page whose right link points at the split's
    /// new block had been written, and the new block had not.
    half_split: bool,
}

/// The history index's splits as its writes show them.
#[derive(Default)]
struct Splits {
    /// Blocks that a split allocated and that have not been written with their page since.
    unwritten: HashSet<u64>,
    /// Of `unwritten`, those whose left sibling has been written with its right link to them.
    half_written: HashSet<u64>,
}

/// What the file system hook watches, shared with the main thread.
struct Probe {
    vfs: FaultVfs,
    /// The history index's file, once the table exists.
    index: OnceLock<PathBuf>,
    /// Held across every write to the history index and every image, so an image sees it
    /// exact.
    splits: Mutex<Splits>,
    /// Bumped by the checkpoint thread before and after each `checkpoint_now`: odd while one
    /// runs.
    ckpt_phase: AtomicU64,
    target: Mutex<Option<Target>>,
    /// Images taken at targeted crash points.
    targeted: Mutex<Vec<Image>>,
}

impl Probe {
    /// Takes a crash image now; the caller holds `splits`.
    fn image(&self, splits: &Splits, kind: CrashKind, seed: u64, how: String) -> Image {
        let phase = self.ckpt_phase.load(Ordering::SeqCst);
        let (vfs, at) = self.vfs.crash_image(kind, seed);
        let mid_checkpoint = phase % 2 == 1 && self.ckpt_phase.load(Ordering::SeqCst) == phase;
        Image {
            vfs,
            at,
            kind,
            seed,
            how,
            mid_checkpoint,
            mid_split: !splits.unwritten.is_empty(),
            half_split: !splits.half_written.is_empty(),
        }
    }

    /// The hook: targeted crash points, and the bookkeeping of the history index's blocks.
    fn on_io(
        &self,
        io: &Io<'_>,
        run: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        if IN_CHECKPOINT.get() {
            self.checkpoint_point(io);
        }
        let Io::Write { path, off, buf } = io else {
            return run();
        };
        if self.index.get().map(PathBuf::as_path) != Some(*path) {
            return run();
        }
        let mut splits = self.splits.lock().unwrap();
        run()?;
        let block = off / BLCKSZ as u64;
        if !buf.iter().all(|&b| b == 0) {
            splits.unwritten.remove(&block);
            splits.half_written.remove(&block);
            let right = <&PageBuf>::try_from(*buf)
                .ok()
                .filter(|p| page::kind(p) == Some(PageKind::BTree))
                .and_then(btree::right_link)
                .map(|r| u64::from(r.0));
            if let Some(r) = right.filter(|r| splits.unwritten.contains(r)) {
                splits.half_written.insert(r);
            }
            return Ok(());
        }
        // Only a split extends the index (with a zero block, `Smgr::extend`).
        splits.unwritten.insert(block);
        let mut target = self.target.lock().unwrap();
        if let Some(Target::Split { kind, seed }) = *target {
            *target = None;
            drop(target);
            let how = format!("inside a split, right after it allocated block {block}");
            let image = self.image(&splits, kind, seed, how);
            self.targeted.lock().unwrap().push(image);
        }
        Ok(())
    }

    /// On the checkpoint thread, inside a checkpoint: counts down an armed checkpoint target
    /// and takes its image before the call runs.
    fn checkpoint_point(&self, io: &Io<'_>) {
        let mut target = self.target.lock().unwrap();
        let Some(Target::Checkpoint {
            nth,
            left,
            filter,
            kind,
            seed,
        }) = *target
        else {
            return;
        };
        if !io.path().to_string_lossy().contains(filter) {
            return;
        }
        if left > 1 {
            *target = Some(Target::Checkpoint {
                nth,
                left: left - 1,
                filter,
                kind,
                seed,
            });
            return;
        }
        *target = None;
        drop(target);
        let how = format!(
            "inside a checkpoint, before the checkpoint thread's I/O call {nth}{} since the point was armed ({} of {})",
            if filter.is_empty() {
                String::new()
            } else {
                format!(" on {filter}")
            },
            io.name(),
            io.path().display()
        );
        let splits = self.splits.lock().unwrap();
        let image = self.image(&splits, kind, seed, how);
        drop(splits);
        self.targeted.lock().unwrap().push(image);
    }

    /// Arms `target` and waits until the hook has taken its image.
    fn reach(&self, target: Target, seed: u64) {
        *self.target.lock().unwrap() = Some(target);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.target.lock().unwrap().is_some() {
            assert!(
                Instant::now() < deadline,
                "seed {seed}: the targeted crash point {target:?} was not reached in 20 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Counts over the images of one round or of the whole test.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    commits: u64,
    images: u64,
    mid_checkpoint: u64,
    /// Of `mid_checkpoint`, those taken at random moments.
    mid_checkpoint_by_chance: u64,
    mid_split: u64,
    /// Of `mid_split`, those taken at random moments.
    mid_split_by_chance: u64,
    /// Of `mid_split`, those with a split half on disk.
    half_split: u64,
    /// Pages pruned (`PRUNE` records) while the images were taken.
    prunes: u64,
    /// Dead line pointers VACUUM freed while the images were taken.
    vacuumed: u64,
    /// Index entries VACUUM removed.
    vacuumed_entries: u64,
    /// Versions VACUUM froze (`FREEZE` records).
    frozen: u64,
    /// Rounds whose checkpoints let the status store forget xids (the oldest xid moved).
    truncated: u64,
    /// Empty pages VACUUM cut off the end of a heap (`SMGR TRUNCATE` records).
    pages_cut: u64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.commits += o.commits;
        self.images += o.images;
        self.mid_checkpoint += o.mid_checkpoint;
        self.mid_checkpoint_by_chance += o.mid_checkpoint_by_chance;
        self.mid_split += o.mid_split;
        self.mid_split_by_chance += o.mid_split_by_chance;
        self.half_split += o.half_split;
        self.prunes += o.prunes;
        self.vacuumed += o.vacuumed;
        self.vacuumed_entries += o.vacuumed_entries;
        self.frozen += o.frozen;
        self.truncated += o.truncated;
        self.pages_cut += o.pages_cut;
    }
}

fn round(seed: u64, images: u64) -> Tally {
    let dir = Path::new("/data");
    let vfs = FaultVfs::new(FaultConfig {
        // Every other round without a cache flusher: plain fdatasync instead of wal_sync_range.
        cache_flush: seed & 1 == 0,
        ..FaultConfig::new(seed)
    });
    let probe = Arc::new(Probe {
        vfs: vfs.clone(),
        index: OnceLock::new(),
        splits: Mutex::new(Splits::default()),
        ckpt_phase: AtomicU64::new(0),
        target: Mutex::new(None),
        targeted: Mutex::new(Vec::new()),
    });
    let hook: Arc<Hook> = {
        let probe = probe.clone();
        Arc::new(move |io, run| probe.on_io(io, run))
    };
    let dynvfs: Arc<dyn Vfs> = Arc::new(vfs.clone());
    Storage::initdb(dynvfs.clone(), dir).unwrap();
    let direct = direct_for(seed);
    // Bit 2 of the seed: full-page images stored whole (`wal_compression = off`) rather than
    // LZ4-compressed; recovery, opened with the default, decodes either.
    let mut cfg = config(direct);
    if seed & 4 != 0 {
        cfg.wal.compression = walnut_wal::WalCompression::Off;
    }
    let compression = cfg.wal.compression.name();
    let st = Storage::open(Arc::new(hook_vfs(dynvfs, hook)), dir, cfg).unwrap();
    setup(&st);
    let index = st.catalog.get("history").unwrap().index.unwrap();
    let _ = probe.index.set(dir.join("base").join(index.0.to_string()));
    let ledger: Arc<Mutex<Vec<Entry>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (st, ledger, stop, vfs) = (st.clone(), ledger.clone(), stop.clone(), vfs.clone());
        workers.push(std::thread::spawn(move || {
            let mut rng = Rng(seed ^ (w + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                seq += 1;
                match transfer(&st, &mut rng, w, seq) {
                    Ok(mut e) => {
                        e.acked_at = vfs.seq();
                        ledger.lock().unwrap().push(e);
                    }
                    Err(e) if e.sqlstate == SqlState::DEADLOCK_DETECTED => {}
                    Err(e) => panic!("transfer failed: {e}"),
                }
            }
        }));
    }
    let churner = {
        let (st, stop) = (st.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(seed ^ 0x5C4A_7C41);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let r = if n % 50 == 0 {
                    bulge(&st, &mut rng)
                } else {
                    churn(&st, &mut rng)
                };
                match r {
                    Ok(()) => {}
                    Err(e) if e.sqlstate == SqlState::DEADLOCK_DETECTED => {}
                    Err(e) => panic!("churn failed: {e}"),
                }
            }
        })
    };
    let vacuum = {
        let (st, stop) = (st.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(seed ^ 0x7AC0);
            let mut done = walnut_storage::vacuum::VacuumStats::default();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10 + rng.below(40)));
                // Every other round a VACUUM FREEZE, the catalog's too: the checkpoints then
                // let the status store forget the xids below what is left.
                let freeze = rng.below(2) == 0;
                let params = walnut_storage::vacuum::VacuumParams {
                    freeze_min_age: if freeze { 0 } else { 50_000_000 },
                    ..Default::default()
                };
                for table in ["scratch", "accounts", "history", "bulge"] {
                    let info = st.catalog.get(table).expect("table");
                    let s =
                        walnut_storage::vacuum::vacuum_table_with(&st, &info, params, &mut || {
                            Ok(())
                        })
                        .unwrap_or_else(|e| panic!("VACUUM {table}: {e}"))
                        .unwrap_or_default();
                    done.dead_items += s.dead_items;
                    done.index_entries_removed += s.index_entries_removed;
                    done.frozen += s.frozen;
                    done.pages_removed += s.pages_removed;
                }
                if freeze {
                    walnut_storage::vacuum::vacuum_catalog(&st, 0, &mut || Ok(()))
                        .unwrap_or_else(|e| panic!("VACUUM of the catalog: {e}"));
                }
            }
            done
        })
    };
    let ckpt = {
        let (st, stop, probe) = (st.clone(), stop.clone(), probe.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(seed ^ 0xC0FFEE);
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5 + rng.below(30)));
                IN_CHECKPOINT.set(true);
                probe.ckpt_phase.fetch_add(1, Ordering::SeqCst);
                st.checkpoint_now(DbState::InProduction).unwrap();
                probe.ckpt_phase.fetch_add(1, Ordering::SeqCst);
                IN_CHECKPOINT.set(false);
            }
        })
    };
    let mut rng = Rng(seed ^ 0xDEAD_BEEF);
    let mut taken = Vec::new();
    let started = Instant::now();
    for i in 0..images {
        std::thread::sleep(Duration::from_millis(10 + rng.below(60)));
        let kind = if i % 3 == 2 {
            CrashKind::ProcessKill
        } else {
            CrashKind::PowerLoss
        };
        let image_seed = rng.next();
        // Two of the images (if there are three or more) at targeted crash points, of either
        // kind.
        let targeted_kind = if image_seed & 1 == 0 {
            CrashKind::PowerLoss
        } else {
            CrashKind::ProcessKill
        };
        if images >= 3 && i == 1 {
            let (filter, calls) = match rng.below(3) {
                0 => ("", 16),
                1 => ("pg_xact", 4),
                _ => ("global", 6),
            };
            let nth = 1 + rng.below(calls);
            let target = Target::Checkpoint {
                nth,
                left: nth,
                filter,
                kind: targeted_kind,
                seed: image_seed,
            };
            probe.reach(target, seed);
            continue;
        }
        if images >= 3 && i == 3 {
            let target = Target::Split {
                kind: targeted_kind,
                seed: image_seed,
            };
            probe.reach(target, seed);
            continue;
        }
        let splits = probe.splits.lock().unwrap();
        let image = probe.image(&splits, kind, image_seed, "at a random moment".into());
        drop(splits);
        taken.push(image);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    ckpt.join().unwrap();
    churner.join().unwrap();
    let vacuumed = vacuum.join().unwrap();
    let commits = ledger.lock().unwrap().len() as u64;
    let prunes = st.prune_stats.records.load(Ordering::Relaxed);
    let truncated = u64::from(st.xact.oldest_xid() > walnut_common::Xid::FIRST_NORMAL);
    st.shutdown().unwrap();
    drop(st);
    let report = walnut_storage::verify::verify(Arc::new(vfs.clone()), dir).unwrap();
    assert!(
        report.is_ok(),
        "seed {seed}: verify after a clean shutdown:\n{report}"
    );
    let mut tally = Tally {
        commits,
        images,
        prunes,
        vacuumed: vacuumed.dead_items,
        vacuumed_entries: vacuumed.index_entries_removed,
        frozen: vacuumed.frozen,
        truncated,
        pages_cut: vacuumed.pages_removed as u64,
        ..Tally::default()
    };
    for image in &taken {
        tally.mid_checkpoint_by_chance += u64::from(image.mid_checkpoint);
        tally.mid_split_by_chance += u64::from(image.mid_split);
    }
    taken.append(&mut probe.targeted.lock().unwrap());
    assert_eq!(taken.len() as u64, images, "seed {seed}: images taken");
    for image in &taken {
        tally.mid_checkpoint += u64::from(image.mid_checkpoint);
        tally.mid_split += u64::from(image.mid_split);
        tally.half_split += u64::from(image.half_split);
    }
    eprintln!(
        "seed {seed} ({}, wal_compression = {compression}): {commits} commits in {:?}, {images} crash images ({} mid-checkpoint, {} mid-split, {} with a split half on disk)",
        if direct { "io_direct = data,wal,wal_init" } else { "buffered" },
        started.elapsed(),
        tally.mid_checkpoint,
        tally.mid_split,
        tally.half_split
    );
    // Every entry acknowledged before an image was taken (the ledger is complete now).
    let ledger = ledger.lock().unwrap();
    for (i, image) in taken.iter().enumerate() {
        let must: Vec<Entry> = ledger
            .iter()
            .filter(|e| e.acked_at < image.at)
            .cloned()
            .collect();
        let what = format!(
            "seed {seed}, image {i} ({:?} {}, image seed {}, {} acknowledged commits before it)",
            image.kind,
            image.how,
            image.seed,
            must.len()
        );
        check_or_save(
            &image.vfs, dir, &must, &what, image.kind, image.seed, direct,
        );
    }
    tally
}

/// [`check_image`]; if the check fails, first saves the image (every file, as recovery would
/// find it), the ledger it was checked against and how it was taken, under
/// `target/tmp/crash-images/`, so that the failure replays whatever the threads' interleaving
/// was (see `save_image` for what a process-kill image loses):
/// `WALNUT_CRASH_REPLAY=DIR cargo test -p walnut-storage --test crash replay`.
fn check_or_save(
    image: &FaultVfs,
    dir: &Path,
    must: &[Entry],
    what: &str,
    kind: CrashKind,
    seed: u64,
    direct: bool,
) {
    // The check changes the image (recovery, shutdown): keep an exact copy to save.
    let pristine = image.crash_image(CrashKind::ProcessKill, 0).0;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_image(image, dir, must, what, kind, seed, direct)
    }));
    if let Err(panic) = r {
        let name: String = what
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("crash-images")
            .join(name);
        match save_image(&pristine, must, kind, seed, direct, &out) {
            Ok(()) => eprintln!(
                "{what}: failed; the image is saved: replay with WALNUT_CRASH_REPLAY={}",
                out.display()
            ),
            Err(e) => eprintln!("{what}: failed; could not save the image: {e}"),
        }
        std::panic::resume_unwind(panic);
    }
}

/// Writes `image`'s files under `out/files`, `must` to `out/ledger.tsv` and the crash kind,
/// seed and `direct` (io_direct) to `out/crash.txt`. The files' visible contents are saved: after a process kill, what
/// the page cache still held replays as durable (the dead process's view, which recovery reads;
/// only the later power loss of that replay differs).
fn save_image(
    image: &FaultVfs,
    must: &[Entry],
    kind: CrashKind,
    seed: u64,
    direct: bool,
    out: &Path,
) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(out);
    for path in image.files() {
        let rel = path.strip_prefix("/").unwrap_or(&path);
        let to = out.join("files").join(rel);
        std::fs::create_dir_all(to.parent().expect("a file has a parent"))?;
        std::fs::write(&to, image.read_file(&path)?)?;
    }
    let ledger: String = must
        .iter()
        .map(|e| {
            format!(
                "{}\t{}\t{}\t{}\t{}\t{}\n",
                e.key, e.from, e.to, e.amount, e.acked_at, e.id
            )
        })
        .collect();
    std::fs::write(out.join("ledger.tsv"), ledger)?;
    let kind = match kind {
        CrashKind::PowerLoss => "power-loss",
        CrashKind::ProcessKill => "process-kill",
    };
    let io = if direct { "direct" } else { "buffered" };
    std::fs::write(out.join("crash.txt"), format!("{kind} {seed} {io}\n"))
}

/// Loads what [`save_image`] wrote: a file system holding the image's files, durable.
fn load_image(from: &Path) -> (FaultVfs, Vec<Entry>, CrashKind, u64, bool) {
    fn walk(vfs: &FaultVfs, root: &Path, dir: &Path) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(vfs, root, &path);
                continue;
            }
            let target = Path::new("/").join(path.strip_prefix(root).unwrap());
            let parent = target.parent().unwrap();
            vfs.create_dir_all(parent).unwrap();
            let mode = walnut_io::OpenMode {
                create: true,
                ..Default::default()
            };
            let f = vfs.open(&target, mode).unwrap();
            f.write_at(&std::fs::read(&path).unwrap(), 0).unwrap();
            f.sync_all().unwrap();
            let mut d = Some(parent);
            while let Some(p) = d {
                vfs.sync_dir(p).unwrap();
                d = p.parent();
            }
        }
    }
    let vfs = FaultVfs::new(FaultConfig::new(0));
    walk(&vfs, &from.join("files"), &from.join("files"));
    let must = std::fs::read_to_string(from.join("ledger.tsv"))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Entry {
                key: f[0].to_string(),
                from: f[1].parse().unwrap(),
                to: f[2].parse().unwrap(),
                amount: f[3].parse().unwrap(),
                acked_at: f[4].parse().unwrap(),
                // Images saved before the sequence have no id: 0 checks nothing.
                id: f.get(5).map_or(0, |v| v.parse().unwrap()),
            }
        })
        .collect();
    let crash = std::fs::read_to_string(from.join("crash.txt")).unwrap();
    let mut words = crash.split_whitespace();
    let kind = match words.next().unwrap() {
        "power-loss" => CrashKind::PowerLoss,
        _ => CrashKind::ProcessKill,
    };
    let seed = words.next().unwrap().parse().unwrap();
    // Images saved before io_direct was recorded were buffered.
    let direct = words.next() == Some("direct");
    (vfs, must, kind, seed, direct)
}

/// Replays an image that [`check_or_save`] saved, when `WALNUT_CRASH_REPLAY=DIR` is set
/// (otherwise it saves, loads and checks the image of a short clean run, so the saving and
/// loading stay honest).
#[test]
fn replay() {
    let (from, _keep) = match std::env::var_os("WALNUT_CRASH_REPLAY") {
        Some(d) => (std::path::PathBuf::from(d), None),
        None => {
            let tmp = tempfile::tempdir().unwrap();
            let vfs = FaultVfs::new(FaultConfig::new(11));
            let dir = Path::new("/data");
            let dynvfs: Arc<dyn Vfs> = Arc::new(vfs.clone());
            Storage::initdb(dynvfs.clone(), dir).unwrap();
            let st = Storage::open(dynvfs, dir, config(true)).unwrap();
            setup(&st);
            let mut rng = Rng(11);
            let mut must = Vec::new();
            for seq in 0..20 {
                let mut e = transfer(&st, &mut rng, 0, seq).unwrap();
                e.acked_at = vfs.seq();
                must.push(e);
            }
            let (image, _) = vfs.crash_image(CrashKind::PowerLoss, 5);
            drop(st);
            save_image(&image, &must, CrashKind::PowerLoss, 5, true, tmp.path()).unwrap();
            (tmp.path().to_path_buf(), Some(tmp))
        }
    };
    let (vfs, must, kind, seed, direct) = load_image(&from);
    eprintln!(
        "replaying {} ({kind:?}, seed {seed}, {} acknowledged commits)",
        from.display(),
        must.len()
    );
    assert!(!must.is_empty() || std::env::var_os("WALNUT_CRASH_REPLAY").is_some());
    check_image(
        &vfs,
        Path::new("/data"),
        &must,
        "replay",
        kind,
        seed,
        direct,
    );
}

#[test]
fn acknowledged_commits_survive_random_crashes_and_nothing_is_partial() {
    let rounds = env_u64("WALNUT_CRASH_ROUNDS", 8);
    let images = env_u64("WALNUT_CRASH_IMAGES", 6);
    let base = env_u64(
        "WALNUT_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    );
    eprintln!("crash test: base seed {base} (replay with WALNUT_CRASH_SEED={base})");
    let started = Instant::now();
    let mut t = Tally::default();
    for r in 0..rounds {
        t.add(round(base.wrapping_add(r), images));
    }
    eprintln!(
        "crash test: {rounds} rounds, {} commits, {} crash images recovered and verified in {:?}: \
         {} mid-checkpoint ({} of them at random moments), {} mid-split ({} at random moments; \
         {} with a split half on disk); {} pages pruned; VACUUM freed {} dead line pointers, \
         removed {} index entries, froze {} versions and cut {} empty pages off; {} rounds \
         moved the oldest xid; {} free-space map files verified",
        t.commits,
        t.images,
        started.elapsed(),
        t.mid_checkpoint,
        t.mid_checkpoint_by_chance,
        t.mid_split,
        t.mid_split_by_chance,
        t.half_split,
        t.prunes,
        t.vacuumed,
        t.vacuumed_entries,
        t.frozen,
        t.pages_cut,
        t.truncated,
        FSM_FILES_VERIFIED.load(Ordering::Relaxed)
    );
    if images >= 3 {
        // The targeted crash points guarantee these.
        assert!(
            t.mid_checkpoint >= rounds,
            "base seed {base}: {} mid-checkpoint crash images in {rounds} rounds",
            t.mid_checkpoint
        );
        assert!(
            t.mid_split >= rounds,
            "base seed {base}: {} mid-split crash images in {rounds} rounds",
            t.mid_split
        );
        // Updates of the accounts fill their pages: their dead versions are pruned (and the
        // images hold prune records to replay).
        assert!(
            t.prunes >= rounds,
            "base seed {base}: {} pages pruned in {rounds} rounds",
            t.prunes
        );
        // The churn deletes rows and aborts inserts, which VACUUM frees with their entries.
        assert!(
            t.vacuumed > 0 && t.vacuumed_entries > 0,
            "base seed {base}: VACUUM freed {} dead line pointers and {} index entries",
            t.vacuumed,
            t.vacuumed_entries
        );
        // VACUUM FREEZE froze versions (the images hold freeze records to replay), and
        // checkpoints let the status store forget xids.
        assert!(t.frozen > 0, "base seed {base}: nothing was frozen");
        // VACUUM fills the maps and checkpoints write them: recovered images have some.
        assert!(
            FSM_FILES_VERIFIED.load(Ordering::Relaxed) > 0,
            "base seed {base}: no recovered image had a free-space map file"
        );
        assert!(
            t.truncated > 0,
            "base seed {base}: no round moved the oldest xid"
        );
        // The bulges left empty tails, which VACUUM cut off (the images hold truncation
        // records to replay).
        assert!(t.pages_cut > 0, "base seed {base}: no empty tail was cut");
    }
}

/// The window a process crash leaves open: the dead run wrote pages (evicted them) that only
/// the page cache holds; recovery reads them, skips their WAL records by page LSN, and its
/// checkpoint moves the redo point past those records. Unless start-up syncs the data files
/// first (PostgreSQL's `SyncDataDirectory`), a power loss after that loses the pages for good.
#[test]
fn a_power_loss_after_recovering_from_a_process_kill_keeps_what_the_dead_run_wrote() {
    let seed = env_u64("WALNUT_CRASH_SEED", 7);
    eprintln!("seed {seed}");
    let dir = Path::new("/data");
    let vfs = FaultVfs::new(FaultConfig::new(seed));
    let dynvfs: Arc<dyn Vfs> = Arc::new(vfs.clone());
    let cfg = StorageConfig {
        shared_buffers_pages: 16,
        checkpoint_timeout_s: 3600,
        max_wal_size_mb: 10_000,
        // With full-page images, redo rewrites every page changed since the checkpoint, and
        // its checkpoint syncs their files anyway; without them it skips pages whose LSN is
        // new enough, so only the start-up sync protects what the dead run wrote.
        full_page_writes: false,
        ..Default::default()
    };
    Storage::initdb(dynvfs.clone(), dir).unwrap();
    let st = Storage::open(dynvfs, dir, cfg.clone()).unwrap();
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    for name in ["kept", "filler"] {
        t.create_table(TableDef {
            name: name.into(),
            columns: vec![col("id", DataType::Int4), col("v", DataType::Text)],
            primary_key: Some(vec![0]),
            fillfactor: 100,
            autovacuum_enabled: true,
            checks: Vec::new(),
        })
        .unwrap();
    }
    commit(t).unwrap();
    st.checkpoint_now(DbState::InProduction).unwrap();
    // Rows that must survive, committed after the last checkpoint...
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let kept = t.table("kept").unwrap();
    for id in 0..60 {
        t.insert(&kept, &[Value::Int4(id), Value::Text("x".repeat(300))])
            .unwrap();
    }
    commit(t).unwrap();
    // ...and enough other work that their pages are evicted (written, not synced).
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let filler = t.table("filler").unwrap();
    for id in 0..800 {
        t.insert(&filler, &[Value::Int4(id), Value::Text("y".repeat(400))])
            .unwrap();
    }
    commit(t).unwrap();
    let (killed, _) = vfs.crash_image(CrashKind::ProcessKill, seed);
    drop(st);
    // Recovery and its checkpoint, then a power loss.
    let st = Storage::open(Arc::new(killed.clone()), dir, cfg.clone()).unwrap();
    assert_eq!(rows(&st, "kept").len(), 60);
    drop(st);

    for s in 0..4 {
        let (lost, _) = killed.crash_image(CrashKind::PowerLoss, seed ^ s);
        let st = Storage::open(Arc::new(lost.clone()), dir, cfg.clone())
            .unwrap_or_else(|e| panic!("power-loss seed {s}: recovery failed: {e}"));
        assert_eq!(
            rows(&st, "kept").len(),
            60,
            "power-loss seed {s}: rows lost"
        );
        st.shutdown().unwrap();
        drop(st);
        let report = walnut_storage::verify::verify(Arc::new(lost), dir).unwrap();
        assert!(report.is_ok(), "power-loss seed {s}:\n{report}");
    }
}

/// Runs the torn-write scenario of
/// `direct_data_writes_torn_at_512_bytes_and_4_kib_are_restored_from_full_page_images` once:
/// a table of 300 rows checkpointed, every row updated and committed, the pages written out
/// with O_DIRECT (`BufferPool::flush_all`, not a checkpoint: the redo point stays before the
/// updates). Then, in a process-kill image, every block of the table's file that the write-out
/// changed is torn at `sector` bytes: every other sector keeps its bytes from before. Returns
/// the image, the number of blocks torn and the file's path.
fn torn_direct_image(full_page_writes: bool, sector: usize, seed: u64) -> (FaultVfs, usize) {
    let dir = Path::new("/data");
    let vfs = FaultVfs::new(FaultConfig::new(seed));
    let dynvfs: Arc<dyn Vfs> = Arc::new(vfs.clone());
    let cfg = StorageConfig {
        full_page_writes,
        max_wal_size_mb: 10_000,
        ..config(true)
    };
    Storage::initdb(dynvfs.clone(), dir).unwrap();
    let st = Storage::open(dynvfs, dir, cfg).unwrap();
    assert!(
        st.smgr.direct_io(),
        "io_direct = data reached the storage manager"
    );
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.create_table(TableDef {
        name: "torn".into(),
        columns: vec![col("id", DataType::Int4), col("v", DataType::Text)],
        primary_key: Some(vec![0]),
        fillfactor: 100,
        autovacuum_enabled: true,
        checks: Vec::new(),
    })
    .unwrap();
    commit(t).unwrap();
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let info = t.table("torn").unwrap();
    for id in 0..300 {
        t.insert(&info, &[Value::Int4(id), Value::Text("a".repeat(300))])
            .unwrap();
    }
    commit(t).unwrap();
    st.checkpoint_now(DbState::InProduction).unwrap();
    let path = dir.join("base").join(info.relfile.0.to_string());
    let before = vfs.read_file(&path).unwrap();
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let mut found = Vec::new();
    t.scan(&info, &mut |tid, row| {
        found.push((tid, row));
        Ok(true)
    })
    .unwrap();
    for (tid, row) in found {
        let new = [row[0].clone(), Value::Text("b".repeat(300))];
        assert!(matches!(
            t.update(&info, tid, &row, &new).unwrap(),
            RowWrite::Done
        ));
    }
    commit(t).unwrap();
    assert!(st.pool.flush_all().unwrap() > 0, "pages written out");
    let after = vfs.read_file(&path).unwrap();
    let (image, _) = vfs.crash_image(CrashKind::ProcessKill, seed);
    drop(st); // a crash: no shutdown
    let mut torn = 0;
    for (b, new) in after.chunks(BLCKSZ).enumerate() {
        let start = b * BLCKSZ;
        let old: Vec<u8> = (start..start + BLCKSZ)
            .map(|i| before.get(i).copied().unwrap_or(0))
            .collect();
        let mut mixed = new.to_vec();
        for s in (1..BLCKSZ / sector).step_by(2) {
            mixed[s * sector..(s + 1) * sector].copy_from_slice(&old[s * sector..(s + 1) * sector]);
        }
        if mixed[..] != new[..] && mixed != old {
            torn += 1;
            image.corrupt(&path, start as u64, &mixed).unwrap();
        }
    }
    (image, torn)
}

/// Issue 14: with `io_direct = data` a page write that a power loss or a kill tears at the
/// device's granularity (512 B sectors or 4 KiB blocks) leaves a page that is half old, half
/// new. The first change of each page after the checkpoint logged its full image, so redo
/// restores every torn page without reading it; without full-page writes the same tear is
/// found as a corruption, which shows the tear is real.
#[test]
fn direct_data_writes_torn_at_512_bytes_and_4_kib_are_restored_from_full_page_images() {
    let dir = Path::new("/data");
    for (i, sector) in [512usize, 4096].into_iter().enumerate() {
        let (image, torn) = torn_direct_image(true, sector, 40 + i as u64);
        assert!(torn >= 5, "{torn} blocks torn at {sector} bytes");
        let st = Storage::open(Arc::new(image.clone()), dir, config(true))
            .unwrap_or_else(|e| panic!("torn at {sector} bytes: recovery failed: {e}"));
        let got = rows(&st, "torn");
        assert_eq!(got.len(), 300, "torn at {sector} bytes");
        assert!(
            got.iter().all(|r| r[1] == Value::Text("b".repeat(300))),
            "torn at {sector} bytes: every row has its committed update"
        );
        st.shutdown().unwrap();
        drop(st);
        let report = walnut_storage::verify::verify(Arc::new(image), dir).unwrap();
        assert!(report.is_ok(), "torn at {sector} bytes:\n{report}");
        eprintln!("{torn} blocks torn at {sector} bytes: restored from full-page images");

        let (image, torn) = torn_direct_image(false, sector, 50 + i as u64);
        assert!(torn >= 5, "{torn} blocks torn at {sector} bytes");
        let caught = match Storage::open(Arc::new(image.clone()), dir, config(true)) {
            Err(e) => {
                assert_eq!(e.sqlstate, SqlState::DATA_CORRUPTED, "{e}");
                eprintln!("torn at {sector} bytes without full-page writes: {e}");
                true
            }
            Ok(st) => {
                let bad = try_rows(&st, "torn").is_err();
                st.shutdown().unwrap();
                drop(st);
                bad || !walnut_storage::verify::verify(Arc::new(image), dir)
                    .unwrap()
                    .is_ok()
            }
        };
        assert!(
            caught,
            "torn at {sector} bytes without full-page writes: the damage went unnoticed"
        );
    }
}
