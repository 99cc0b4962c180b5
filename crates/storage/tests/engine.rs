//! Storage engine tests: the B-tree against a BTreeMap model, heap + index operations under
//! transactions, and redo of every record type (by reopening a copy of the data directory taken
//! without a checkpoint, so every change must come back from the WAL).

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use walnut_common::value::encode_key;
use walnut_common::{
    BlockNumber, ColumnDef, DataType, RelFileId, SqlState, TableDef, Tid, Value, Xid,
};
use walnut_storage::txn::{Isolation, RowWrite, Txn};
use walnut_storage::{btree, Storage, StorageConfig};
use walnut_wal::{CommitOpts, SessionId};

fn config(pages: usize) -> StorageConfig {
    StorageConfig {
        shared_buffers_pages: pages,
        checkpoint_timeout_s: 3600,
        ..Default::default()
    }
}

fn fresh(dir: &Path, pages: usize) -> Arc<Storage> {
    Storage::initdb(Arc::new(walnut_io::RealVfs), dir).unwrap();
    Storage::open(Arc::new(walnut_io::RealVfs), dir, config(pages)).unwrap()
}

fn commit(t: Txn) {
    t.commit(&CommitOpts::new(SessionId::next())).unwrap();
}

fn accounts() -> TableDef {
    TableDef {
        name: "accounts".into(),
        columns: vec![
            ColumnDef {
                name: "aid".into(),
                ty: DataType::Int4,
                not_null: true,
                default: None,
                identity: None,
            },
            ColumnDef {
                name: "abalance".into(),
                ty: DataType::Int4,
                not_null: false,
                default: None,
                identity: None,
            },
            ColumnDef {
                name: "filler".into(),
                ty: DataType::Char(84),
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

fn row(aid: i32, bal: i32) -> Vec<Value> {
    vec![
        Value::Int4(aid),
        Value::Int4(bal),
        Value::Text(format!("{:84}", "")),
    ]
}

fn contents(st: &Arc<Storage>, table: &str) -> BTreeMap<i32, i32> {
    let t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let info = t.table(table).expect("table exists");
    let mut m = BTreeMap::new();
    t.scan(&info, &mut |_, r| {
        assert!(
            m.insert(r[0].as_i64().unwrap() as i32, r[1].as_i64().unwrap() as i32)
                .is_none(),
            "two visible versions of one row"
        );
        Ok(true)
    })
    .unwrap();
    // The index must agree with the heap.
    let mut via_index = BTreeMap::new();
    if info.index.is_some() {
        t.index_scan(&info, Bound::Unbounded, Bound::Unbounded, &mut |_, r| {
            via_index.insert(r[0].as_i64().unwrap() as i32, r[1].as_i64().unwrap() as i32);
            Ok(true)
        })
        .unwrap();
        assert_eq!(via_index, m, "index scan and heap scan disagree");
    }
    t.rollback();
    m
}

/// Copies a data directory as it is on disk now: what a crash at this instant would leave
/// (with the OS page cache counted as durable).
fn crash_copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in walkdir(from) {
        let rel = e.strip_prefix(from).unwrap();
        let dst = to.join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&e, &dst).unwrap();
    }
}

fn walkdir(p: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap().path();
        if e.is_dir() {
            out.extend(walkdir(&e));
        } else {
            out.push(e);
        }
    }
    out
}

#[test]
fn rows_survive_redo_of_every_record_type() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    // A small pool forces evictions (WAL rule) during the run.
    let st = fresh(&dir, 32);
    let cancel = Arc::new(AtomicBool::new(false));
    let mut t = Txn::begin(st.clone(), cancel.clone());
    t.create_table(accounts()).unwrap();
    let mut hist = accounts();
    hist.name = "history".into();
    hist.primary_key = None;
    t.create_table(hist).unwrap();
    let mut gone = accounts();
    gone.name = "gone".into();
    t.create_table(gone).unwrap();
    commit(t);
    st.request_checkpoint().unwrap();

    let mut expect = BTreeMap::new();
    let mut t = Txn::begin(st.clone(), cancel.clone());
    let info = t.table("accounts").unwrap();
    for aid in 1..=3000 {
        t.insert(&info, &row(aid, 0)).unwrap();
        expect.insert(aid, 0);
    }
    let h = t.table("history").unwrap();
    for aid in 1..=50 {
        t.insert(&h, &row(aid, aid)).unwrap();
    }
    commit(t);
    // Updates (other-page versions: fillfactor 100 pages are full), deletes, an aborted txn.
    for round in 0..3 {
        let mut t = Txn::begin(st.clone(), cancel.clone());
        t.new_statement();
        for aid in (1..=3000).step_by(7) {
            let mut hits = Vec::new();
            t.index_scan(
                &info,
                Bound::Included(&[Value::Int4(aid)]),
                Bound::Included(&[Value::Int4(aid)]),
                &mut |tid, r| {
                    hits.push((tid, r));
                    Ok(true)
                },
            )
            .unwrap();
            for (tid, r) in hits {
                let new = row(aid, r[1].as_i64().unwrap() as i32 + 10);
                assert_eq!(t.update(&info, tid, &r, &new).unwrap(), RowWrite::Done);
                *expect.get_mut(&aid).unwrap() += 10;
            }
        }
        if round == 1 {
            t.new_statement();
            let mut victims = Vec::new();
            t.scan(&info, &mut |tid, r| {
                if r[0].as_i64().unwrap() % 100 == 0 {
                    victims.push((tid, r[0].as_i64().unwrap() as i32));
                }
                Ok(true)
            })
            .unwrap();
            for (tid, aid) in victims {
                assert_eq!(t.delete(&info, tid).unwrap(), RowWrite::Done);
                expect.remove(&aid);
            }
        }
        commit(t);
    }
    let mut t = Txn::begin(st.clone(), cancel.clone());
    for aid in 5000..5100 {
        t.insert(&info, &row(aid, 1)).unwrap();
    }
    t.rollback();
    // Re-insert a deleted key; truncate history; drop a table; add a primary key later.
    let mut t = Txn::begin(st.clone(), cancel.clone());
    t.insert(&info, &row(100, 7)).unwrap();
    expect.insert(100, 7);
    t.truncate("history").unwrap();
    t.drop_table("gone").unwrap();
    commit(t);
    let mut t = Txn::begin(st.clone(), cancel.clone());
    let h = t.table("history").unwrap();
    for aid in 1..=20 {
        t.insert(&h, &row(aid, 2)).unwrap();
    }
    t.add_primary_key("history", vec![0]).unwrap();
    commit(t);

    assert_eq!(contents(&st, "accounts"), expect);
    let copy = tmp.path().join("copy");
    crash_copy(&dir, &copy);
    let st2 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(64)).unwrap();
    assert_eq!(
        contents(&st2, "accounts"),
        expect,
        "redo restored the accounts table"
    );
    assert_eq!(contents(&st2, "history").len(), 20);
    assert!(
        st2.catalog.get("gone").is_none(),
        "a committed DROP stays dropped"
    );
    let t = Txn::begin(st2.clone(), cancel.clone());
    assert!(t.table("history").unwrap().def.primary_key.is_some());
    drop(t);
    st2.shutdown().unwrap();
    // A second restart after a clean shutdown needs no redo and sees the same.
    let st3 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(64)).unwrap();
    assert_eq!(contents(&st3, "accounts"), expect);
    st.shutdown().unwrap();
}

/// `max_wal_size` is a `sighup` parameter: a reload reaches the running checkpointer, which
/// starts a checkpoint (its redo point moves; the checkpoint itself then spreads its writes
/// over the WAL to come, and the shutdown finishes it at full speed).
#[test]
fn a_reloaded_max_wal_size_reaches_the_checkpointer() {
    use walnut_common::guc::{Registry, Settings, Source};
    let tmp = tempfile::tempdir().unwrap();
    let st = fresh(&tmp.path().join("d"), 256);
    let cancel = Arc::new(AtomicBool::new(false));
    let mut t = Txn::begin(st.clone(), cancel.clone());
    t.create_table(accounts()).unwrap();
    commit(t);
    let mut s = Settings::defaults(Arc::new(Registry::new(&[
        walnut_storage::GUCS,
        walnut_wal::GUCS,
    ])));
    s.set("max_wal_size", "2MB", Source::CommandLine).unwrap();
    st.apply_settings(&s);
    let before = st.wal().redo_lsn();
    let started = || st.wal().redo_lsn() > before;
    // A checkpoint is due once about 1 MB of WAL was written since the last redo point.
    let mut aid = 0;
    while st.wal().insert_lsn().0 - st.wal().redo_lsn().0 < 2 << 20 {
        let mut t = Txn::begin(st.clone(), cancel.clone());
        let info = t.table("accounts").unwrap();
        for _ in 0..100 {
            aid += 1;
            t.insert(&info, &row(aid, 0)).unwrap();
        }
        commit(t);
        if started() {
            break;
        }
    }
    let t0 = std::time::Instant::now();
    while !started() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "no checkpoint after {} bytes of WAL",
            st.wal().insert_lsn().0 - st.wal().redo_lsn().0
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    st.shutdown().unwrap();
}

#[test]
fn unique_violation_and_waits() {
    let tmp = tempfile::tempdir().unwrap();
    let st = fresh(&tmp.path().join("d"), 256);
    let cancel = Arc::new(AtomicBool::new(false));
    let mut t = Txn::begin(st.clone(), cancel.clone());
    t.create_table(accounts()).unwrap();
    commit(t);
    let mut a = Txn::begin(st.clone(), cancel.clone());
    let info = a.table("accounts").unwrap();
    a.insert(&info, &row(1, 1)).unwrap();
    let e = a.insert(&info, &row(1, 2)).unwrap_err();
    assert_eq!(e.sqlstate, SqlState::UNIQUE_VIOLATION);
    a.rollback();
    // After the rollback the key is free again.
    let mut b = Txn::begin(st.clone(), cancel.clone());
    b.insert(&info, &row(1, 3)).unwrap();
    commit(b);
    assert_eq!(contents(&st, "accounts"), BTreeMap::from([(1, 3)]));
}

/// A fresh store at `dir` with the accounts table holding row (1, 0).
fn one_account(dir: &Path) -> (Arc<Storage>, Arc<walnut_storage::catalog::TableInfo>) {
    let st = fresh(dir, 256);
    let cancel = Arc::new(AtomicBool::new(false));
    let mut t = Txn::begin(st.clone(), cancel.clone());
    t.create_table(accounts()).unwrap();
    commit(t);
    let mut t = Txn::begin(st.clone(), cancel);
    let info = t.table("accounts").unwrap();
    t.insert(&info, &row(1, 0)).unwrap();
    commit(t);
    (st, info)
}

#[test]
fn concurrent_updates_of_one_row_serialize() {
    let tmp = tempfile::tempdir().unwrap();
    let (st, _) = one_account(&tmp.path().join("d"));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let st = st.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
                    let info = t.table("accounts").unwrap();
                    t.new_statement();
                    let (mut tid, mut r) = visible(&t, &info, 1);
                    loop {
                        let new = row(1, r[1].as_i64().unwrap() as i32 + 1);
                        match t.update(&info, tid, &r, &new).unwrap() {
                            RowWrite::Done => break,
                            RowWrite::Changed(t2, r2) => {
                                tid = t2;
                                r = r2;
                            }
                            RowWrite::Gone => panic!("row vanished"),
                        }
                    }
                    commit(t);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(
        contents(&st, "accounts"),
        BTreeMap::from([(1, 200)]),
        "no update was lost"
    );
}

/// The version of row `aid` that `t`'s current snapshot sees.
fn visible(t: &Txn, info: &walnut_storage::catalog::TableInfo, aid: i32) -> (Tid, Vec<Value>) {
    let mut found = None;
    t.index_scan(
        info,
        Bound::Included(&[Value::Int4(aid)]),
        Bound::Included(&[Value::Int4(aid)]),
        &mut |tid, r| {
            found = Some((tid, r));
            Ok(true)
        },
    )
    .unwrap();
    found.expect("row visible")
}

/// Repeatable read: the snapshot of the first statement serves the next, and an update of a
/// row that a transaction it waited for updated or deleted fails with 40001; if that
/// transaction aborts, the update goes through. Read committed follows the newer version.
#[test]
fn a_repeatable_read_writer_fails_on_a_concurrent_change_and_read_committed_follows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (st, info) = one_account(&tmp.path().join("d"));
    let cancel = Arc::new(AtomicBool::new(false));
    // (the writer's level, whether the blocker deletes rather than updates, whether it commits)
    let mut bal = 0;
    for (level, delete, commits) in [
        (Isolation::RepeatableRead, false, true),
        (Isolation::RepeatableRead, true, true),
        (Isolation::RepeatableRead, false, false),
        (Isolation::ReadCommitted, false, true),
    ] {
        let mut b = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        b.set_isolation(level).unwrap();
        b.new_statement();
        let (tid, r) = visible(&b, &info, 1);
        b.end_statement();
        // The blocker changes the row and holds it while `b` tries to write it.
        let mut a = Txn::begin(st.clone(), cancel.clone());
        a.new_statement();
        let (atid, ar) = visible(&a, &info, 1);
        let done = if delete {
            a.delete(&info, atid).unwrap()
        } else {
            a.update(&info, atid, &ar, &row(1, bal + 100)).unwrap()
        };
        assert_eq!(done, RowWrite::Done);
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            b.new_statement();
            tx.send(()).unwrap();
            let new = row(1, r[1].as_i64().unwrap() as i32 + 1);
            let info = b.table("accounts").unwrap();
            let out = b.update(&info, tid, &r, &new);
            (b, out)
        });
        rx.recv().unwrap();
        // Whether `b` is already waiting or not, the outcome is the same.
        std::thread::sleep(std::time::Duration::from_millis(20));
        if commits {
            commit(a);
        } else {
            a.rollback();
        }
        let (b, out) = writer.join().unwrap();
        match (level, commits) {
            (Isolation::RepeatableRead, true) => {
                let e = out.unwrap_err();
                assert_eq!(e.sqlstate, SqlState::SERIALIZATION_FAILURE, "{delete}");
                let what = if delete { "delete" } else { "update" };
                assert_eq!(
                    e.message,
                    format!("could not serialize access due to concurrent {what}")
                );
                b.rollback();
            }
            (Isolation::RepeatableRead, false) => {
                assert_eq!(out.unwrap(), RowWrite::Done);
                commit(b);
                bal += 1;
            }
            (Isolation::ReadCommitted, _) => {
                assert!(matches!(out.unwrap(), RowWrite::Changed(..)));
                b.rollback();
            }
        }
        if delete && commits {
            let mut t = Txn::begin(st.clone(), cancel.clone());
            t.insert(&info, &row(1, bal)).unwrap();
            commit(t);
        } else if commits {
            bal += 100;
        }
        assert_eq!(contents(&st, "accounts"), BTreeMap::from([(1, bal)]));
    }
    // One snapshot for the whole transaction: a commit after the first statement is not seen
    // by the second; changing the level then is 25001.
    let mut b = Txn::begin(st.clone(), cancel.clone());
    b.set_isolation(Isolation::RepeatableRead).unwrap();
    b.new_statement();
    assert_eq!(visible(&b, &info, 1).1, row(1, bal));
    b.end_statement();
    let mut a = Txn::begin(st.clone(), cancel.clone());
    a.new_statement();
    let (atid, ar) = visible(&a, &info, 1);
    a.update(&info, atid, &ar, &row(1, 7)).unwrap();
    commit(a);
    b.new_statement();
    assert_eq!(visible(&b, &info, 1).1, row(1, bal));
    assert_eq!(
        b.set_isolation(Isolation::ReadCommitted)
            .unwrap_err()
            .sqlstate,
        SqlState::ACTIVE_SQL_TRANSACTION
    );
    b.set_isolation(Isolation::RepeatableRead).unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u16),
    SetTid(u16),
    Get(u16),
    Range(u16, u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u16>(), 0u16..400).prop_map(|(k, pad)| Op::Insert(k % 2000, pad)),
        1 => any::<u16>().prop_map(|k| Op::SetTid(k % 2000)),
        1 => any::<u16>().prop_map(|k| Op::Get(k % 2000)),
        1 => (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Op::Range(a % 2000, b % 2000)),
    ]
}

fn key(k: u16, pad: u16) -> Vec<u8> {
    let mut v = encode_key(&[Value::Int4(k as i32)]);
    v.extend(std::iter::repeat_n(0xAB, pad as usize));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]
    #[test]
    fn btree_behaves_like_btreemap(ops in proptest::collection::vec(op(), 200..600)) {
        let tmp = tempfile::tempdir().unwrap();
        let st = fresh(&tmp.path().join("d"), 64);
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        t.create_table(accounts()).unwrap();
        let idx = t.table("accounts").unwrap().index.unwrap();
        commit(t);
        let rel = st.smgr.open(idx).unwrap();
        // Model keyed by the int; the stored key carries the padding chosen at insert.
        let mut model: BTreeMap<u16, (Vec<u8>, Tid)> = BTreeMap::new();
        let xid = Xid(3);
        for (n, o) in ops.into_iter().enumerate() {
            let tid = Tid { block: BlockNumber(n as u32), slot: 1 };
            match o {
                Op::Insert(k, pad) => {
                    let kk = model.get(&k).map(|e| e.0.clone()).unwrap_or_else(|| key(k, pad));
                    let r = btree::insert_unique(&st, &rel, xid, &kk, tid, &mut |_| Ok(btree::Existing::Duplicate), "i");
                    if model.contains_key(&k) {
                        prop_assert_eq!(r.unwrap_err().sqlstate, SqlState::UNIQUE_VIOLATION);
                    } else {
                        r.unwrap();
                        model.insert(k, (kk, tid));
                    }
                }
                Op::SetTid(k) => {
                    if let Some(e) = model.get_mut(&k) {
                        btree::set_tid(&st, &rel, xid, &e.0, tid).unwrap();
                        e.1 = tid;
                    }
                }
                Op::Get(k) => {
                    let kk = model.get(&k).map(|e| e.0.clone()).unwrap_or_else(|| key(k, 0));
                    prop_assert_eq!(btree::get(&st, &rel, &kk).unwrap(), model.get(&k).map(|e| e.1));
                }
                Op::Range(a, b) => {
                    let (lo, hi) = (a.min(b), a.max(b));
                    let (klo, khi) = (encode_key(&[Value::Int4(lo as i32)]), encode_key(&[Value::Int4(hi as i32)]));
                    let mut got = Vec::new();
                    btree::range(&st, &rel, Bound::Included(&klo), Bound::Included(&khi), &mut |_, t| { got.push(t); Ok(true) }).unwrap();
                    let want: Vec<Tid> = model.range(lo..=hi).map(|(_, e)| e.1).collect();
                    prop_assert_eq!(got, want);
                }
            }
        }
        // Everything is still there after redo from a crash copy (once the WAL is flushed, as
        // the commit of the transaction that did this would have).
        st.wal().flush(st.wal().insert_lsn()).unwrap();
        let copy = tmp.path().join("copy");
        crash_copy(&tmp.path().join("d"), &copy);
        let st2 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(64)).unwrap();
        let rel2 = st2.smgr.open(idx).unwrap();
        let mut all = Vec::new();
        btree::range(&st2, &rel2, Bound::Unbounded, Bound::Unbounded, &mut |_, t| { all.push(t); Ok(true) }).unwrap();
        prop_assert_eq!(all, model.values().map(|e| e.1).collect::<Vec<_>>());
        let _ = RelFileId::CATALOG;
    }
}

/// One step of the pruning model test.
#[derive(Debug, Clone)]
enum Step {
    /// Set key's value in a transaction that commits (true) or aborts.
    Upsert(u8, i32, bool),
    /// Delete the key in a transaction that commits or aborts.
    Delete(u8, bool),
    /// Open a snapshot and remember what it reads.
    Open,
    /// Close the n-th open snapshot (modulo how many are open).
    Close(u8),
    /// Prune every page of the table.
    Prune,
    /// VACUUM the table.
    Vacuum,
    /// VACUUM FREEZE the table and the catalog, then checkpoint: the status store forgets
    /// what they froze.
    Freeze,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0u8..24, any::<i32>(), proptest::bool::weighted(0.85)).prop_map(|(k, v, c)| Step::Upsert(k, v, c)),
        2 => (0u8..24, proptest::bool::weighted(0.85)).prop_map(|(k, c)| Step::Delete(k, c)),
        1 => Just(Step::Open),
        1 => any::<u8>().prop_map(Step::Close),
        2 => Just(Step::Prune),
        2 => Just(Step::Vacuum),
        1 => Just(Step::Freeze),
    ]
}

/// What `t`'s snapshot reads of table `kv`: by a full scan, and by an index lookup of each key
/// (which walks version chains back), which must agree.
fn read_kv(t: &Txn) -> BTreeMap<i32, i32> {
    let info = t.table("kv").unwrap();
    let mut by_scan = BTreeMap::new();
    t.scan(&info, &mut |_, r| {
        let k = r[0].as_i64().unwrap() as i32;
        assert!(
            by_scan.insert(k, r[1].as_i64().unwrap() as i32).is_none(),
            "two visible versions of key {k}"
        );
        Ok(true)
    })
    .unwrap();
    let mut by_index = BTreeMap::new();
    for k in 0..24 {
        let key = [Value::Int4(k)];
        t.index_scan(
            &info,
            Bound::Included(&key[..]),
            Bound::Included(&key[..]),
            &mut |_, r| {
                by_index.insert(k, r[1].as_i64().unwrap() as i32);
                Ok(true)
            },
        )
        .unwrap();
    }
    assert_eq!(
        by_scan, by_index,
        "a scan and index lookups of one snapshot disagree"
    );
    by_scan
}

/// VACUUM FREEZE of `info` and of the catalog, then a checkpoint, which lets the status store
/// forget the xids below what they left.
fn freeze_all(st: &Arc<Storage>, info: &walnut_storage::catalog::TableInfo) {
    let params = walnut_storage::vacuum::VacuumParams {
        freeze_min_age: 0,
        ..Default::default()
    };
    walnut_storage::vacuum::vacuum_table_with(st, info, params, &mut || Ok(())).unwrap();
    walnut_storage::vacuum::vacuum_catalog(st, 0, &mut || Ok(())).unwrap();
    // The first checkpoint computes the cut, the second puts it in force (once no snapshot
    // of the time of the first is left).
    for _ in 0..2 {
        st.checkpoint_now(walnut_storage::control::DbState::InProduction)
            .unwrap();
    }
}

fn kv_row(k: i32, v: i32) -> Vec<Value> {
    // Wide rows: a page holds a dozen, so updates fill pages and prune them.
    vec![Value::Int4(k), Value::Int4(v), Value::Text("p".repeat(500))]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Random updates, deletes, re-inserts and aborts against a model, with snapshots held open
    /// across them: pruning (explicit, and whenever an update or insert finds its page full)
    /// never takes a version an open snapshot reads, every snapshot reads exactly what it read
    /// when it was taken, and redo of a crash copy (prune records included) gives the model's
    /// rows, with `verify` clean.
    #[test]
    fn pruning_keeps_what_every_open_snapshot_reads(steps in proptest::collection::vec(step(), 40..160)) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        let st = fresh(&dir, 64);
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        t.create_table(TableDef {
            name: "kv".into(),
            columns: vec![
                ColumnDef { name: "k".into(), ty: DataType::Int4, not_null: true, default: None, identity: None },
                ColumnDef { name: "v".into(), ty: DataType::Int4, not_null: false, default: None, identity: None },
                ColumnDef { name: "pad".into(), ty: DataType::Text, not_null: false, default: None, identity: None },
            ],
            primary_key: Some(vec![0]),
            fillfactor: 100,
autovacuum_enabled: true,
checks: Vec::new(),
        })
        .unwrap();
        commit(t);
        let info = st.catalog.get("kv").unwrap();
        let rel = st.smgr.open(info.relfile).unwrap();
        let mut model: BTreeMap<i32, i32> = BTreeMap::new();
        let mut open: Vec<(Txn, BTreeMap<i32, i32>)> = Vec::new();
        let pruned_before = st.prune_stats.versions.load(std::sync::atomic::Ordering::Relaxed);
        for s in steps {
            match s {
                Step::Upsert(k, v, ok) => {
                    let k = k as i32;
                    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
                    t.new_statement();
                    match by_key(&t, &info, k) {
                        Some((tid, old)) => prop_assert_eq!(t.update(&info, tid, &old, &kv_row(k, v)).unwrap(), RowWrite::Done),
                        None => t.insert(&info, &kv_row(k, v)).unwrap(),
                    }
                    if ok {
                        commit(t);
                        model.insert(k, v);
                    } else {
                        t.rollback();
                    }
                }
                Step::Delete(k, ok) => {
                    let k = k as i32;
                    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
                    t.new_statement();
                    if let Some((tid, _)) = by_key(&t, &info, k) {
                        prop_assert_eq!(t.delete(&info, tid).unwrap(), RowWrite::Done);
                        if ok {
                            commit(t);
                            model.remove(&k);
                        } else {
                            t.rollback();
                        }
                    }
                }
                Step::Open => {
                    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
                    t.new_statement();
                    let seen = read_kv(&t);
                    prop_assert_eq!(&seen, &model);
                    open.push((t, seen));
                }
                Step::Close(n) => {
                    if !open.is_empty() {
                        let i = n as usize % open.len();
                        open.remove(i).0.rollback();
                    }
                }
                Step::Prune => {
                    for b in 0..rel.nblocks.load(std::sync::atomic::Ordering::Acquire) {
                        walnut_storage::heap::prune_block(&st, &rel, BlockNumber(b)).unwrap();
                    }
                }
                Step::Vacuum => {
                    walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
                }
                Step::Freeze => freeze_all(&st, &info),
            }
            for (t, seen) in &open {
                prop_assert_eq!(&read_kv(t), seen, "an open snapshot reads something else now");
            }
        }
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        t.new_statement();
        prop_assert_eq!(&read_kv(&t), &model);
        drop(t);
        drop(open);
        for b in 0..rel.nblocks.load(std::sync::atomic::Ordering::Acquire) {
            walnut_storage::heap::prune_block(&st, &rel, BlockNumber(b)).unwrap();
        }
        prop_assert!(
            st.prune_stats.versions.load(std::sync::atomic::Ordering::Relaxed) > pruned_before,
            "nothing was pruned"
        );
        // With no snapshot left, one VACUUM leaves no dead line pointer and no index entry
        // without a live row (aborted inserts that linked to a deleted row included: it prunes
        // them again once it unlinked them).
        walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
        let again = walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
        prop_assert_eq!((again.dead_items, again.index_entries_removed, again.removed), (0, 0, 0));
        let mut entries = 0;
        let irel = st.smgr.open(info.index.unwrap()).unwrap();
        btree::range(&st, &irel, Bound::Unbounded, Bound::Unbounded, &mut |_, _| { entries += 1; Ok(true) }).unwrap();
        prop_assert_eq!(entries, model.len());
        // With no snapshot left, freezing leaves no xid below the oldest running one, and the
        // status store forgets them all.
        freeze_all(&st, &info);
        prop_assert_eq!(st.xact.oldest_xid(), st.xact.next_xid());
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        t.new_statement();
        prop_assert_eq!(&read_kv(&t), &model);
        drop(t);
        // Redo: a crash copy (the WAL is flushed by the commits) comes back as the model, and,
        // once shut down, verifies.
        st.wal().flush(st.wal().insert_lsn()).unwrap();
        let copy = tmp.path().join("copy");
        crash_copy(&dir, &copy);
        let st2 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(64)).unwrap();
        let mut t = Txn::begin(st2.clone(), Arc::new(AtomicBool::new(false)));
        t.new_statement();
        prop_assert_eq!(&read_kv(&t), &model);
        drop(t);
        st2.shutdown().unwrap();
        drop(st2);
        let report = walnut_storage::verify::verify(Arc::new(walnut_io::RealVfs), &copy).unwrap();
        prop_assert!(report.is_ok(), "verify after redo:\n{}", report);
    }
}

/// A hot standby's replay cancels a query whose snapshot a prune conflicts with: the query's
/// next page fails with 40001 (not 57014) and gives its snapshot up, and the transaction's next
/// statement runs normally.
#[test]
fn a_recovery_conflict_fails_the_statement_with_40001_and_the_next_one_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let st = fresh(&tmp.path().join("d"), 64);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.create_table(accounts()).unwrap();
    let info = t.table("accounts").unwrap();
    t.insert(&info, &row(1, 10)).unwrap();
    commit(t);
    let mut q = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    q.new_statement();
    let conflicting = st.xact.conflicting_snapshots(u64::MAX);
    assert_eq!(conflicting.len(), 1, "the query's snapshot is registered");
    conflicting[0].signal_conflict();
    let e = q.scan(&info, &mut |_, _| Ok(true)).unwrap_err();
    assert_eq!(e.sqlstate, SqlState::SERIALIZATION_FAILURE, "{e}");
    assert!(e.message.contains("conflict with recovery"), "{e}");
    assert!(
        st.xact.conflicting_snapshots(u64::MAX).is_empty(),
        "the cancelled query gave its snapshot up"
    );
    q.new_statement();
    let mut n = 0;
    q.scan(&info, &mut |_, _| {
        n += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(n, 1);
    q.end_statement();
    assert!(st.xact.conflicting_snapshots(u64::MAX).is_empty());
}

/// What VACUUM leaves of rows that are gone for everyone: nothing. A failed insert (here a
/// duplicate key) wrote a version that no entry will ever name; once the row it collided with
/// is deleted and VACUUM freed that row's slot, no version may still link to the slot, or it
/// would stay for good (and could lead a later reader into a reused slot). And a table without
/// an index loses its aborted updates too.
#[test]
fn vacuum_leaves_nothing_of_failed_inserts_deleted_rows_and_aborted_updates() {
    let tmp = tempfile::tempdir().unwrap();
    let st = fresh(tmp.path(), 64);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let mut plain = accounts();
    plain.name = "plain".into();
    plain.primary_key = None;
    t.create_table(accounts()).unwrap();
    t.create_table(plain).unwrap();
    commit(t);
    let row = |k: i32, v: i32| vec![Value::Int4(k), Value::Int4(v), Value::Null];
    let info = st.catalog.get("accounts").unwrap();
    let plain = st.catalog.get("plain").unwrap();
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.insert(&info, &row(1, 0)).unwrap();
    t.insert(&plain, &row(1, 0)).unwrap();
    commit(t);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let e = t.insert(&info, &row(1, 1)).unwrap_err();
    assert_eq!(e.sqlstate, SqlState::UNIQUE_VIOLATION);
    t.rollback();
    // An aborted update of the table without an index.
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let mut found = Vec::new();
    t.scan(&plain, &mut |tid, r| {
        found.push((tid, r));
        Ok(true)
    })
    .unwrap();
    let (tid, old) = found.pop().unwrap();
    assert_eq!(
        t.update(&plain, tid, &old, &row(1, 5)).unwrap(),
        RowWrite::Done
    );
    t.rollback();
    // The row is deleted; nothing of key 1 is left for anyone.
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let (tid, _) = by_key(&t, &info, 1).unwrap();
    assert_eq!(t.delete(&info, tid).unwrap(), RowWrite::Done);
    commit(t);
    // What pg_stat_progress_vacuum shows of the first VACUUM of `accounts`, once it ended.
    let progress = Arc::new(walnut_storage::progress::VacuumProgress::default());
    walnut_storage::progress::report_vacuums_to(Some(progress.clone()));
    walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
    walnut_storage::progress::report_vacuums_to(None);
    let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Acquire);
    assert_eq!(
        (
            get(&progress.relid),
            progress.phase.load(std::sync::atomic::Ordering::Acquire),
            get(&progress.heap_blks_scanned),
            get(&progress.heap_blks_total),
            get(&progress.index_vacuum_count),
            get(&progress.heap_blks_vacuumed),
        ),
        (
            info.table_id,
            walnut_storage::progress::VACUUM_FINAL_CLEANUP,
            1,
            1,
            1,
            1
        )
    );
    for table in [&info, &plain] {
        let rel = st.smgr.open(table.relfile).unwrap();
        for _ in 0..3 {
            walnut_storage::vacuum::vacuum_table(&st, table, &mut || Ok(())).unwrap();
        }
        let mut left = Vec::new();
        for b in 0..rel.nblocks.load(std::sync::atomic::Ordering::Acquire) {
            walnut_storage::heap::prev_links(&st, &rel, BlockNumber(b), &|_| true, &mut left)
                .unwrap();
        }
        let s = walnut_storage::vacuum::vacuum_table(&st, table, &mut || Ok(())).unwrap();
        assert_eq!(
            (left.len(), s.removed, s.dead_items),
            (0, 0, 0),
            "table {}: versions still linked {left:?}, or removed by a fourth VACUUM",
            table.def.name
        );
    }
}

/// A fresh data directory at `dir`, opened with a pool of `pages` pages and autovacuum's
/// settings `autovacuum`.
fn fresh_with(
    dir: &Path,
    pages: usize,
    autovacuum: walnut_storage::autovacuum::AutovacuumSettings,
) -> Arc<Storage> {
    Storage::initdb(Arc::new(walnut_io::RealVfs), dir).unwrap();
    let cfg = StorageConfig {
        autovacuum,
        ..config(pages)
    };
    Storage::open(Arc::new(walnut_io::RealVfs), dir, cfg).unwrap()
}

/// Flushes `st`'s WAL, copies its data directory `dir` as a crash would leave it to `in_dir`
/// /copy, and opens the copy (crash recovery): the copy's storage and path.
fn recover_copy(st: &Storage, in_dir: &Path, dir: &Path) -> (Arc<Storage>, std::path::PathBuf) {
    st.wal().flush(st.wal().insert_lsn()).unwrap();
    let copy = in_dir.join("copy");
    crash_copy(dir, &copy);
    let st2 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(256)).unwrap();
    (st2, copy)
}

/// A fresh data directory (`d` in a temporary directory) opened with a 256-page pool and
/// autovacuum off: the temporary directory (kept alive by the caller), the data directory and
/// the storage.
fn quiet_db() -> (tempfile::TempDir, std::path::PathBuf, Arc<Storage>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let st = fresh_with(&dir, 256, no_autovacuum());
    (tmp, dir, st)
}

/// Autovacuum off, for tests that VACUUM themselves.
fn no_autovacuum() -> walnut_storage::autovacuum::AutovacuumSettings {
    walnut_storage::autovacuum::AutovacuumSettings {
        enabled: false,
        ..Default::default()
    }
}

/// Creates table `accounts` with rows 1..=`n`, balance 0, each step committed.
fn accounts_with_rows(st: &Arc<Storage>, n: i32) -> Arc<walnut_storage::catalog::TableInfo> {
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.create_table(accounts()).unwrap();
    commit(t);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let info = t.table("accounts").unwrap();
    for aid in 1..=n {
        t.insert(&info, &row(aid, 0)).unwrap();
    }
    commit(t);
    info
}

/// Deletes, in one committed transaction, every row of `info` whose first column (an int4 key)
/// satisfies `doomed`.
fn delete_where(
    st: &Arc<Storage>,
    info: &walnut_storage::catalog::TableInfo,
    doomed: impl Fn(i32) -> bool,
) {
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let mut victims = Vec::new();
    t.scan(info, &mut |tid, r| {
        if doomed(r[0].as_i64().unwrap() as i32) {
            victims.push(tid);
        }
        Ok(true)
    })
    .unwrap();
    for tid in victims {
        assert_eq!(t.delete(info, tid).unwrap(), RowWrite::Done);
    }
    commit(t);
}

/// Shuts `st` down cleanly and checks its data directory `dir` with `walnut verify`'s checks.
fn shut_down_and_verify(st: Arc<Storage>, dir: &Path) {
    st.shutdown().unwrap();
    drop(st);
    let report = walnut_storage::verify::verify(Arc::new(walnut_io::RealVfs), dir).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// Raises every balance of `accounts` by 1 in one committed transaction.
fn raise_every_balance(st: &Arc<Storage>, info: &walnut_storage::catalog::TableInfo) {
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let mut rows = Vec::new();
    t.scan(info, &mut |tid, r| {
        rows.push((tid, r));
        Ok(true)
    })
    .unwrap();
    t.new_statement();
    for (tid, r) in rows {
        let new = row(
            r[0].as_i64().unwrap() as i32,
            r[1].as_i64().unwrap() as i32 + 1,
        );
        assert_eq!(t.update(info, tid, &r, &new).unwrap(), RowWrite::Done);
    }
    commit(t);
}

/// Polls `done` every 20 ms until it holds, failing the test after 120 s (a liveness guard:
/// the test asserts what happened, never how fast).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "still waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Autovacuum, at aggressive settings, vacuums a table once its dead versions pass the
/// threshold, and keeps what an open snapshot still sees: a statement's snapshot taken before
/// the updates reads the same rows after several autovacuums; once it ends, the dead versions
/// go, and the table verifies. Fails if autovacuum never runs, or if it removed a version the
/// snapshot needed.
#[test]
fn autovacuum_vacuums_dead_versions_and_keeps_what_an_open_snapshot_sees() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let st = fresh_with(
        &dir,
        64,
        walnut_storage::autovacuum::AutovacuumSettings {
            naptime: std::time::Duration::from_secs(1),
            vacuum_threshold: 0.0,
            vacuum_scale_factor: 0.0,
            log_min_duration: Some(std::time::Duration::ZERO),
            ..Default::default()
        },
    );
    let info = accounts_with_rows(&st, 300);
    // An open statement's snapshot, from before the updates.
    let mut old = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    old.new_statement();
    let read = |t: &Txn| {
        let mut m = BTreeMap::new();
        t.scan(&info, &mut |_, r| {
            m.insert(r[0].as_i64().unwrap(), r[1].as_i64().unwrap());
            Ok(true)
        })
        .unwrap();
        m
    };
    let before = read(&old);
    assert_eq!(before.len(), 300);
    let counters = st.table_stats.of(info.table_id);
    let autovacuums = || {
        counters
            .autovacuum_count
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    for _ in 0..3 {
        raise_every_balance(&st, &info);
    }
    wait_until("an autovacuum", || autovacuums() >= 1);
    // More dead versions, and more autovacuums, while the snapshot stays open.
    raise_every_balance(&st, &info);
    wait_until("a second autovacuum", || autovacuums() >= 2);
    assert_eq!(
        read(&old),
        before,
        "the open snapshot lost versions it sees"
    );
    assert!(
        counters
            .last_autovacuum
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    assert_eq!(
        counters
            .vacuum_count
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "autovacuums count as such"
    );
    drop(old);
    // The snapshot gone, what it held is dead: the next autovacuums remove it, until one
    // finds nothing left that a snapshot might see (with a threshold of 0, every autovacuum
    // that finds some is followed by another).
    let ran = autovacuums();
    wait_until("an autovacuum that leaves no dead version", || {
        autovacuums() > ran
            && counters
                .n_dead_tup
                .load(std::sync::atomic::Ordering::Relaxed)
                == 0
    });
    let mut now = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    now.new_statement();
    assert_eq!(read(&now), (1..=300).map(|k| (k, 4)).collect());
    drop(now);
    let s = walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
    assert_eq!(
        (s.removed, s.dead_items, s.recently_dead),
        (0, 0, 0),
        "autovacuum left dead versions behind"
    );
    shut_down_and_verify(st, &dir);
}

/// The commit of a DROP TABLE whose table a VACUUM is scanning waits for the VACUUM, which
/// stops at its next page and returns; nothing is written to the dropped relation after its
/// buffers are gone, and the data directory verifies. Without `Relation::dropping` the VACUUM
/// never sees the drop and the test's guard fails.
#[test]
fn drop_table_stops_a_vacuum_in_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let st = fresh_with(&dir, 64, no_autovacuum());
    let info = accounts_with_rows(&st, 2000);
    raise_every_balance(&st, &info);
    let rel = st.smgr.open(info.relfile).unwrap();
    assert!(rel.nblocks.load(std::sync::atomic::Ordering::Acquire) > 10);
    let (in_vacuum_tx, in_vacuum) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let vacuum = scope.spawn(|| {
            let mut pages = 0;
            walnut_storage::vacuum::vacuum_table_with(&st, &info, Default::default(), &mut || {
                pages += 1;
                if pages == 3 {
                    in_vacuum_tx.send(()).unwrap();
                    wait_until("the drop", || {
                        rel.dropping.load(std::sync::atomic::Ordering::Acquire)
                    });
                }
                Ok(())
            })
            .unwrap()
        });
        in_vacuum.recv().unwrap();
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        t.drop_table("accounts").unwrap();
        commit(t);
        assert_eq!(vacuum.join().unwrap(), None, "the VACUUM saw the drop");
    });
    assert!(st.catalog.get("accounts").is_none());
    shut_down_and_verify(st, &dir);
}

/// Inserts fill the space VACUUM freed before they extend the relation: after half the rows of
/// a table are deleted and vacuumed, as many new rows fit without a new page, in a table with
/// a primary key and in one without. Fails without the free-space map (the inserts then go to
/// the last page and extend).
#[test]
fn inserts_reuse_the_space_vacuum_freed_before_extending() {
    let (_tmp, dir, st) = quiet_db();
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.create_table(accounts()).unwrap();
    let mut plain = accounts();
    plain.name = "plain".into();
    plain.primary_key = None;
    t.create_table(plain).unwrap();
    commit(t);
    for name in ["accounts", "plain"] {
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        let info = t.table(name).unwrap();
        for aid in 1..=3000 {
            t.insert(&info, &row(aid, 0)).unwrap();
        }
        commit(t);
        delete_where(&st, &info, |aid| aid % 2 == 0);
        let rel = st.smgr.open(info.relfile).unwrap();
        let pages = rel.nblocks.load(std::sync::atomic::Ordering::Acquire);
        let s = walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
        assert_eq!(s.dead_items, 1500, "{name}");
        // Every page now has room: the map says so.
        let roomy = (0..pages)
            .filter(|&b| rel.fsm.recorded(BlockNumber(b)) > 1000)
            .count();
        assert!(roomy as u32 >= pages - 1, "{name}: {roomy} of {pages}");
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        for aid in 3001..=4500 {
            t.insert(&info, &row(aid, 1)).unwrap();
        }
        commit(t);
        assert_eq!(
            rel.nblocks.load(std::sync::atomic::Ordering::Acquire),
            pages,
            "{name}: the inserts extended the relation"
        );
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        t.new_statement();
        let mut n = 0;
        t.scan(&info, &mut |_, r| {
            let k = r[0].as_i64().unwrap();
            assert!(k % 2 == 1 || k > 3000, "{name}: deleted row {k} is back");
            n += 1;
            Ok(true)
        })
        .unwrap();
        assert_eq!(n, 3000, "{name}");
    }
    shut_down_and_verify(st, &dir);
}

/// The free-space map outlives the server (DESIGN.md, "Free-space map"). Half of a table is
/// deleted and vacuumed. A crash copy taken then has no map file (no checkpoint has run
/// since), and redo of the vacuum records fills its map again; the original, shut down
/// cleanly, writes its map, and a restart reads it back. Either way the map is the one VACUUM
/// left, entry for entry, and as many rows as were deleted go in without a new page. Both
/// directories verify (with their map files).
#[test]
fn the_free_space_map_outlives_a_restart_and_redo_refills_it() {
    use std::sync::atomic::Ordering::Acquire;
    let (tmp, dir, st) = quiet_db();
    let copy = tmp.path().join("copy");
    let info = accounts_with_rows(&st, 3000);
    delete_where(&st, &info, |aid| aid % 2 == 0);
    walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
    let pages = st.smgr.open(info.relfile).unwrap().nblocks.load(Acquire);
    let map = |st: &Storage| {
        let rel = st.smgr.open(info.relfile).unwrap();
        (0..pages)
            .map(|b| rel.fsm.recorded(BlockNumber(b)))
            .collect::<Vec<_>>()
    };
    let vacuumed = map(&st);
    let roomy = vacuumed.iter().filter(|&&room| room > 1000).count() as u32;
    assert!(roomy >= pages - 1, "{roomy} of {pages} pages have room");
    let file = |d: &Path| d.join("base").join(format!("{}_fsm", info.relfile.0));
    st.wal().flush(st.wal().insert_lsn()).unwrap();
    crash_copy(&dir, &copy);
    assert!(
        !file(&copy).exists(),
        "no checkpoint has written the map yet"
    );
    st.shutdown().unwrap();
    drop(st);
    assert!(
        file(&dir).exists(),
        "the shutdown checkpoint writes the map"
    );
    for (d, how) in [(&dir, "a restart"), (&copy, "crash recovery")] {
        let cfg = StorageConfig {
            autovacuum: no_autovacuum(),
            ..config(256)
        };
        let st = Storage::open(Arc::new(walnut_io::RealVfs), d, cfg).unwrap();
        assert_eq!(map(&st), vacuumed, "the map after {how}");
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        for aid in 3001..=4500 {
            t.insert(&info, &row(aid, 1)).unwrap();
        }
        commit(t);
        let rel = st.smgr.open(info.relfile).unwrap();
        assert_eq!(
            rel.nblocks.load(Acquire),
            pages,
            "inserts after {how} extended the heap"
        );
        shut_down_and_verify(st, d);
    }
}

/// VACUUM cuts an empty tail off (its step 6): the rows of the last two thirds of the heap are
/// deleted, and VACUUM removes their pages, shortens the file and says so in its report.
/// Inserts after it extend the heap from the cut. A crash copy's redo repeats the inserts into
/// the old tail, the deletes, the cut and the new inserts, and ends with the same rows and the
/// same length. Both directories verify.
#[test]
fn vacuum_truncates_an_empty_tail_and_redo_repeats_it() {
    use std::sync::atomic::Ordering::Acquire;
    let (tmp, dir, st) = quiet_db();
    let info = accounts_with_rows(&st, 3000);
    let rel = st.smgr.open(info.relfile).unwrap();
    let pages = rel.nblocks.load(Acquire);
    delete_where(&st, &info, |aid| aid > 1000);
    let s = walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
    let kept = rel.nblocks.load(Acquire);
    assert!(
        s.pages_removed >= pages / 2 && kept == pages - s.pages_removed,
        "{pages} pages, {} removed, {kept} kept",
        s.pages_removed
    );
    let file = dir.join(format!("base/{}", info.relfile.0));
    assert_eq!(std::fs::metadata(&file).unwrap().len(), kept as u64 * 8192);
    let report =
        walnut_storage::vacuum::report("finished vacuuming", &info, &s, Default::default());
    assert!(
        report.contains(&format!(
            "pages: {} removed, {kept} remain",
            s.pages_removed
        )),
        "{report}"
    );
    let mut want: BTreeMap<i32, i32> = (1..=1000).map(|k| (k, 0)).collect();
    assert_eq!(contents(&st, "accounts"), want);
    // A second VACUUM finds nothing more to cut.
    let s = walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
    assert_eq!(s.pages_removed, 0);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    for aid in 1001..=2000 {
        t.insert(&info, &row(aid, 5)).unwrap();
        want.insert(aid, 5);
    }
    commit(t);
    let grown = rel.nblocks.load(Acquire);
    assert!(grown > kept, "the inserts extend from the cut");
    assert_eq!(contents(&st, "accounts"), want);
    let (st2, copy) = recover_copy(&st, tmp.path(), &dir);
    assert_eq!(contents(&st2, "accounts"), want);
    let rel2 = st2.smgr.open(info.relfile).unwrap();
    assert_eq!(
        rel2.nblocks.load(Acquire),
        grown,
        "redo cut the tail it re-created"
    );
    shut_down_and_verify(st2, &copy);
    shut_down_and_verify(st, &dir);
}

/// Truncation races inserts and scans: rounds of "insert a batch, delete it, VACUUM" (which
/// cuts the batch's pages off) while one thread inserts a row, finds it by key and deletes it,
/// over and over, each time with the insert hint pointed at a random page (often one being
/// cut), and another thread scans all the time (each scan read `nblocks` before a cut). No
/// row is lost (each is found again), no scan fails, and the data directory verifies. The
/// race that `heap::past_a_cut` closes (a row placed on a page being cut would go with it) is
/// hit only by chance here.
#[test]
fn truncation_loses_no_row_inserted_or_scanned_meanwhile() {
    use std::sync::atomic::Ordering::{Acquire, Release};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let st = fresh_with(&dir, 512, no_autovacuum());
    let info = accounts_with_rows(&st, 1);
    let stop = AtomicBool::new(false);
    let (mut cut, mut cycles) = (0, 0);
    std::thread::scope(|s| {
        let inserter = s.spawn(|| {
            let rel = st.smgr.open(info.relfile).unwrap();
            let mut rng = 0x9E37_79B9_u64;
            let mut n = 0;
            while !stop.load(Acquire) {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
                let pages = rel.nblocks.load(Acquire) as u64;
                rel.insert_hint.store(((rng >> 33) % pages) as u32, Release);
                let aid = 1_000_000 + n;
                let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
                t.insert(&info, &row(aid, 1)).unwrap();
                commit(t);
                let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
                t.new_statement();
                let (tid, _) =
                    by_key(&t, &info, aid).unwrap_or_else(|| panic!("row {aid} was lost"));
                assert_eq!(t.delete(&info, tid).unwrap(), RowWrite::Done);
                commit(t);
                n += 1;
            }
            n
        });
        s.spawn(|| {
            while !stop.load(Acquire) {
                let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
                t.new_statement();
                t.scan(&info, &mut |_, _| Ok(true)).unwrap();
                t.rollback();
            }
        });
        for round in 0..20 {
            let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
            let base = 10_000 * (round + 1);
            for aid in base..base + 3000 {
                t.insert(&info, &row(aid, 0)).unwrap();
            }
            commit(t);
            delete_where(&st, &info, |aid| (base..base + 3000).contains(&aid));
            // Scans that began before the deletes still see the rows.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let s = walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
            cut += s.pages_removed;
        }
        stop.store(true, Release);
        cycles = inserter.join().unwrap();
    });
    assert!(cut > 0, "no round cut anything");
    assert_eq!(contents(&st, "accounts").len(), 1);
    eprintln!("{cycles} rows inserted, found and deleted during 20 rounds; {cut} pages cut");
    shut_down_and_verify(st, &dir);
}

/// Freezing lets the status store forget: after more than a segment's worth of xids (a
/// million), VACUUM FREEZE of every heap and a checkpoint remove `pg_xact/0000` and drop the
/// in-memory statuses below the oldest xid, while every row reads as before: committed rows,
/// a row an aborted UPDATE left its version beside, a row an aborted DELETE stamped, an
/// aborted insert. A crash copy recovers to the same rows, and `verify` finds no version
/// naming a forgotten xid. Without freezing, the checkpoint removes nothing.
#[test]
fn freezing_lets_a_checkpoint_remove_status_segments_no_heap_needs() {
    let (tmp, dir, st) = quiet_db();
    let info = accounts_with_rows(&st, 300);
    // An aborted update (its version stays beside the row's), an aborted delete (its xmax
    // stays on the row), an aborted insert.
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let mut rows = Vec::new();
    t.scan(&info, &mut |tid, r| {
        rows.push((tid, r));
        Ok(rows.len() < 2)
    })
    .unwrap();
    t.new_statement();
    assert_eq!(
        t.update(&info, rows[0].0, &rows[0].1, &row(1, 99)).unwrap(),
        RowWrite::Done
    );
    assert_eq!(t.delete(&info, rows[1].0).unwrap(), RowWrite::Done);
    t.insert(&info, &row(1000, 7)).unwrap();
    t.rollback();
    raise_every_balance(&st, &info);
    let want = contents(&st, "accounts");
    assert_eq!((want.len(), want[&1], want.get(&1000)), (300, 1, None));
    // Over a million xids, each with an outcome (aborted, as a transaction that wrote nothing
    // durable would be).
    let per_segment = 32 * 8192 * 4;
    while st.xact.next_xid().0 < per_segment + 5 {
        let x = st.xact.assign_xid();
        st.xact.abort(x);
    }
    let segment0 = dir.join("pg_xact/0000");
    st.checkpoint_now(walnut_storage::control::DbState::InProduction)
        .unwrap();
    assert!(
        segment0.exists(),
        "nothing froze yet: the store keeps every xid"
    );
    assert_eq!(st.xact.oldest_xid(), Xid::FIRST_NORMAL);
    freeze_all(&st, &info);
    assert!(
        !segment0.exists(),
        "the segment below the oldest xid is removed"
    );
    assert!(dir.join("pg_xact/0001").exists());
    assert_eq!(st.xact.oldest_xid(), st.xact.next_xid());
    let (open, settled) = st.xact.chunk_counts();
    assert!(
        open + settled <= 1,
        "chunks below the oldest xid are dropped: {open} + {settled}"
    );
    assert_eq!(contents(&st, "accounts"), want);
    // Redo of a crash copy starts from the control file's oldest xid.
    let (st2, copy) = recover_copy(&st, tmp.path(), &dir);
    assert_eq!(contents(&st2, "accounts"), want);
    // Writes go on over frozen rows.
    raise_every_balance(&st2, &info);
    assert_eq!(contents(&st2, "accounts")[&1], 2);
    shut_down_and_verify(st2, &copy);
    shut_down_and_verify(st, &dir);
}

/// The version of the row whose int4 key is `aid` that `t`'s statement sees, with its TID,
/// found through the index.
fn by_key(
    t: &Txn,
    info: &walnut_storage::catalog::TableInfo,
    aid: i32,
) -> Option<(Tid, Vec<Value>)> {
    let key = [Value::Int4(aid)];
    let mut found = None;
    t.index_scan(
        info,
        Bound::Included(&key[..]),
        Bound::Included(&key[..]),
        &mut |tid, r| {
            found = Some((tid, r));
            Ok(false)
        },
    )
    .unwrap();
    found
}

/// Sets row `aid`'s balance to `bal`, found by its key, in a transaction that commits or
/// (`commit` false) aborts.
fn update_by_key(
    st: &Arc<Storage>,
    info: &walnut_storage::catalog::TableInfo,
    aid: i32,
    bal: i32,
    commit_it: bool,
) {
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let (tid, old) =
        by_key(&t, info, aid).unwrap_or_else(|| panic!("row {aid} not found by its key"));
    assert_eq!(
        t.update(info, tid, &old, &row(aid, bal)).unwrap(),
        RowWrite::Done
    );
    if commit_it {
        commit(t);
    } else {
        t.rollback();
    }
}

/// Same-page updates (heap-only versions, PostgreSQL's HOT): the index entry stays on the
/// chain's root through every update of a row, and lookups walk forward from it. Pruning makes
/// the root a redirect to the newest version; a deleted row's chain ends in a dead root, which
/// VACUUM removes with its entry. An update that aborted after moving the row to another page
/// left the entry there, as does a delete and re-insert that aborted, so the next same-page
/// update moves the entry back (not heap-only). A heap-only version that its aborted
/// transaction went on to delete (and insert its key again) stays through pruning. Lookups and
/// scans agree throughout, redo of a crash copy repeats it all, and `verify` is clean.
#[test]
fn same_page_updates_keep_the_index_entry_and_pruning_redirects_the_root() {
    use walnut_storage::bufpool::ReadMode;
    use walnut_storage::{heap, page};
    let (tmp, dir, st) = quiet_db();
    // 200 rows of 38 bytes: block 0 is full (194), the rest on block 1.
    let info = accounts_with_rows(&st, 200);
    let rel = st.smgr.open(info.relfile).unwrap();
    let irel = st.smgr.open(info.index.unwrap()).unwrap();
    let entry = |aid: i32| btree::get(&st, &irel, &encode_key(&[Value::Int4(aid)])).unwrap();
    let hot_updates = || {
        st.table_stats.with(info.table_id, |c| {
            c.n_tup_hot_upd.load(std::sync::atomic::Ordering::Relaxed)
        })
    };
    let mut want: BTreeMap<i32, i32> = (1..=200).map(|k| (k, 0)).collect();
    // Make room on block 0: delete rows 100..=157 and prune.
    delete_where(&st, &info, |aid| (100..=157).contains(&aid));
    heap::prune_block(&st, &rel, BlockNumber(0)).unwrap();
    want.retain(|&k, _| !(100..=157).contains(&k));
    // Twenty updates of row 1, all on block 0, all heap-only: the entry never moves.
    let root = entry(1).unwrap();
    assert_eq!(root.block, BlockNumber(0));
    for bal in 1..=20 {
        update_by_key(&st, &info, 1, bal, true);
        want.insert(1, bal);
        assert_eq!(contents(&st, "accounts"), want);
    }
    assert_eq!(
        entry(1),
        Some(root),
        "a same-page update moved the index entry"
    );
    assert_eq!(hot_updates(), 20);
    // Pruning removes the root's version and leaves a redirect to the newest one.
    heap::prune_block(&st, &rel, BlockNumber(0)).unwrap();
    {
        let pin = st.pool.pin(&rel, root.block, ReadMode::Normal).unwrap();
        let p = pin.read();
        assert!(
            page::redirect_target(&p, root.slot as usize - 1).is_some(),
            "the pruned root is not a redirect"
        );
    }
    assert_eq!(contents(&st, "accounts"), want);
    update_by_key(&st, &info, 1, 21, true);
    want.insert(1, 21);
    assert_eq!(entry(1), Some(root));
    assert_eq!(contents(&st, "accounts"), want);
    // Row 2: updated, then deleted. Pruning ends its chain with a dead root, VACUUM removes it
    // with its entry.
    for bal in 1..=3 {
        update_by_key(&st, &info, 2, bal, true);
    }
    delete_where(&st, &info, |aid| aid == 2);
    want.remove(&2);
    walnut_storage::vacuum::vacuum_table(&st, &info, &mut || Ok(())).unwrap();
    assert_eq!(entry(2), None, "VACUUM left the deleted row's entry");
    assert_eq!(contents(&st, "accounts"), want);
    // Row 3: an update that goes to another page (block 0 is filled first) and aborts; then,
    // with room again, a same-page update must move the entry back from the aborted version.
    rel.insert_hint
        .store(0, std::sync::atomic::Ordering::Release);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    for aid in 1000..1100 {
        t.insert(&info, &row(aid, 0)).unwrap();
        want.insert(aid, 0);
    }
    commit(t);
    let before = entry(3).unwrap();
    update_by_key(&st, &info, 3, 7, false);
    let moved = entry(3).unwrap();
    assert_ne!(
        moved.block, before.block,
        "the aborted update stayed on its page"
    );
    delete_where(&st, &info, |aid| (1000..1100).contains(&aid));
    want.retain(|&k, _| !(1000..1100).contains(&k));
    heap::prune_block(&st, &rel, before.block).unwrap();
    let hot = hot_updates();
    update_by_key(&st, &info, 3, 8, true);
    want.insert(3, 8);
    let now = entry(3).unwrap();
    assert_eq!(
        (now.block, hot_updates()),
        (before.block, hot),
        "the update after the aborted move is not on the old page, or heap-only"
    );
    assert_eq!(contents(&st, "accounts"), want);
    update_by_key(&st, &info, 3, 9, true);
    want.insert(3, 9);
    assert_eq!((entry(3), hot_updates()), (Some(now), hot + 1));
    assert_eq!(contents(&st, "accounts"), want);
    // Row 4: deleted and inserted again in a transaction that aborts, which moved the entry to
    // the aborted insert's version (and left no mark on the row's version but its aborted
    // `xmax`): the next update, on the row's page, moves the entry back.
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let found = by_key(&t, &info, 4).map(|(tid, _)| tid);
    assert_eq!(t.delete(&info, found.unwrap()).unwrap(), RowWrite::Done);
    t.insert(&info, &row(4, 99)).unwrap();
    t.rollback();
    assert_ne!(entry(4), found, "the insert did not move the entry");
    let hot = hot_updates();
    update_by_key(&st, &info, 4, 5, true);
    want.insert(4, 5);
    assert_eq!(
        hot_updates(),
        hot,
        "the update after the aborted insert is heap-only"
    );
    assert_eq!(contents(&st, "accounts"), want);
    heap::prune_block(&st, &rel, found.unwrap().block).unwrap();
    assert_eq!(contents(&st, "accounts"), want);
    // Row 5: in one transaction that aborts, a heap-only update, then a delete and an insert of
    // the key: the insert links to the heap-only version, and the entry moves to the insert's.
    // Pruning must keep that heap-only version (its transaction stamped it), or the lookup
    // walks back into a freed slot, which new rows then fill.
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let (tid, old) = by_key(&t, &info, 5).unwrap();
    assert_eq!(
        t.update(&info, tid, &old, &row(5, 50)).unwrap(),
        RowWrite::Done
    );
    t.new_statement();
    let (tid, _) = by_key(&t, &info, 5).unwrap();
    assert_eq!(t.delete(&info, tid).unwrap(), RowWrite::Done);
    t.insert(&info, &row(5, 51)).unwrap();
    t.rollback();
    heap::prune_block(&st, &rel, tid.block).unwrap();
    rel.insert_hint
        .store(tid.block.0, std::sync::atomic::Ordering::Release);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    for aid in 2000..2010 {
        t.insert(&info, &row(aid, 0)).unwrap();
        want.insert(aid, 0);
    }
    commit(t);
    assert_eq!(contents(&st, "accounts"), want);
    // Redo repeats it all.
    let (st2, copy) = recover_copy(&st, tmp.path(), &dir);
    assert_eq!(contents(&st2, "accounts"), want);
    shut_down_and_verify(st2, &copy);
    shut_down_and_verify(st, &dir);
}

/// Room left on heap page `block` of `info`, bytes.
fn room(st: &Storage, info: &walnut_storage::catalog::TableInfo, block: u32) -> usize {
    let rel = st.smgr.open(info.relfile).unwrap();
    let pin = st
        .pool
        .pin(
            &rel,
            BlockNumber(block),
            walnut_storage::bufpool::ReadMode::Normal,
        )
        .unwrap();
    let p = pin.read();
    walnut_storage::page::free_space(&p)
}

/// Pruning on a read (PostgreSQL's `heap_page_prune_opt`; DESIGN.md, "Pruning"). Rows are
/// deleted from two full pages. While the deleter runs, neither an index lookup nor a scan
/// prunes anything. Once it committed, an index lookup of a row on the second page prunes
/// that page and only that one, and a scan prunes the first. A full page whose rows nobody
/// deleted is left alone. The rows read are the same throughout, a crash copy's redo repeats
/// the prunes, and both directories verify.
#[test]
fn a_read_prunes_a_nearly_full_page_once_its_deleter_committed() {
    use std::sync::atomic::Ordering::Relaxed;
    use walnut_storage::heap::PRUNE_ON_READ_BELOW;
    let (tmp, dir, st) = quiet_db();
    let info = accounts_with_rows(&st, 3000);
    for b in 0..3 {
        assert!(
            room(&st, &info, b) < PRUNE_ON_READ_BELOW,
            "block {b} is full"
        );
    }
    // Every other row of blocks 0 and 1, deleted by a transaction left open.
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.new_statement();
    let mut doomed = Vec::new();
    let mut on_block1 = None;
    t.scan(&info, &mut |tid, r| {
        let aid = r[0].as_i64().unwrap() as i32;
        if tid.block.0 < 2 && aid % 2 == 0 {
            doomed.push((tid, aid));
        }
        if tid.block.0 == 1 && aid % 2 == 1 {
            on_block1 = Some(aid);
        }
        Ok(true)
    })
    .unwrap();
    let on_block1 = on_block1.unwrap();
    for &(tid, _) in &doomed {
        assert_eq!(t.delete(&info, tid).unwrap(), RowWrite::Done);
    }
    let want: BTreeMap<i32, i32> = contents(&st, "accounts");
    assert_eq!(want.len(), 3000, "the delete is not committed");
    let full = [0, 1].map(|b| room(&st, &info, b));
    let on_read = || st.prune_stats.on_read.load(Relaxed);
    let reader = || {
        let mut r = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        r.new_statement();
        r
    };
    assert!(by_key(&reader(), &info, on_block1).is_some());
    assert_eq!(contents(&st, "accounts"), want);
    assert_eq!(on_read(), 0, "the deleter still runs: nothing to prune");
    assert_eq!([0, 1].map(|b| room(&st, &info, b)), full);
    commit(t);
    let mut want = want;
    for (_, aid) in &doomed {
        want.remove(aid);
    }
    // A reader never waits for the exclusive latch, and a write-out copying the page holds the
    // shared one: look again until a lookup found it free (at once, but for such a race).
    for _ in 0..1000 {
        assert!(by_key(&reader(), &info, on_block1).is_some());
        if on_read() > 0 {
            break;
        }
    }
    assert_eq!(on_read(), 1, "the lookup pruned its page");
    assert!(room(&st, &info, 1) > full[1] + 1000, "block 1 was pruned");
    assert_eq!(room(&st, &info, 0), full[0], "block 0 was not read");
    let mut got = contents(&st, "accounts");
    for _ in 0..1000 {
        if room(&st, &info, 0) > full[0] + 1000 {
            break;
        }
        got = contents(&st, "accounts");
    }
    assert!(
        room(&st, &info, 0) > full[0] + 1000,
        "the scan pruned block 0"
    );
    assert_eq!(on_read(), 2, "block 2 has nothing to prune");
    assert_eq!(got, want);
    let (st2, copy) = recover_copy(&st, tmp.path(), &dir);
    assert_eq!(contents(&st2, "accounts"), got);
    for b in 0..2 {
        assert!(
            room(&st2, &info, b) > full[b as usize] + 1000,
            "redo repeated block {b}'s prune"
        );
    }
    shut_down_and_verify(st2, &copy);
    shut_down_and_verify(st, &dir);
}

fn sequence(name: &str, cache: i64, increment: i64) -> walnut_common::SequenceDef {
    walnut_common::SequenceDef {
        increment,
        min: if increment > 0 { 1 } else { i64::MIN },
        max: if increment > 0 { i64::MAX } else { -1 },
        cache,
        ..walnut_common::SequenceDef::with_defaults(name)
    }
}

/// Takes `n` values of sequence `name` in one transaction without an xid (as `SELECT
/// nextval(..)` would), commits it, and returns them with the number of calls that logged.
fn nextvals(st: &Arc<Storage>, name: &str, n: usize) -> (Vec<i64>, usize) {
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let seqs = t.sequences();
    let walnut_storage::txn::RelKind::Sequence(s) = seqs.lookup(name) else {
        panic!("no sequence {name}");
    };
    let (mut out, mut logged) = (Vec::new(), 0);
    for _ in 0..n {
        let f = seqs.fetch(&s).unwrap();
        logged += f.logged.is_some() as usize;
        // cache 1: one value per fetch.
        assert_eq!(f.first, f.last);
        out.push(f.first);
    }
    commit(t);
    (out, logged)
}

/// `nextval` logs 32 values ahead (one record per 33 calls), and also on its first call after
/// a checkpoint's redo point; a crash at any point then hands out only values above every value
/// handed out before it (PostgreSQL's `nextval_internal`; storage DESIGN.md, "Sequences").
#[test]
fn a_sequence_logs_ahead_and_after_each_checkpoint_so_a_crash_never_reissues_a_value() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let st = fresh(&dir, 64);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.create_sequence(sequence("s", 1, 1)).unwrap();
    let err = t.create_table(TableDef {
        name: "s".into(),
        ..accounts()
    });
    assert_eq!(err.unwrap_err().sqlstate, SqlState::DUPLICATE_TABLE);
    commit(t);

    let (vals, logged) = nextvals(&st, "s", 60);
    assert_eq!(vals, (1..=60).collect::<Vec<i64>>());
    assert_eq!(logged, 2, "calls 1 and 34 log, each 32 values ahead");
    let copy = tmp.path().join("c1");
    crash_copy(&dir, &copy);
    let st2 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(64)).unwrap();
    let (after, _) = nextvals(&st2, "s", 1);
    assert!(
        after[0] > 60 && after[0] <= 34 + 33,
        "after a crash: {after:?} (60 handed out, 66 logged)"
    );
    st2.shutdown().unwrap();

    // A checkpoint between two calls: the next call logs although 6 values logged ahead
    // remain, or replay from the new redo point would start from the page the checkpoint
    // wrote, and hand out 61 to 66 again.
    st.request_checkpoint().unwrap();
    let (vals, logged) = nextvals(&st, "s", 1);
    assert_eq!(
        (vals[0], logged),
        (61, 1),
        "the first call after a checkpoint logs"
    );
    let (more, logged) = nextvals(&st, "s", 5);
    assert_eq!((more, logged), ((62..=66).collect(), 0));
    let copy = tmp.path().join("c2");
    crash_copy(&dir, &copy);
    let st3 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(64)).unwrap();
    let (after, _) = nextvals(&st3, "s", 1);
    assert!(after[0] > 66, "after a checkpoint and a crash: {after:?}");
    // setval is logged at once; DROP SEQUENCE removes it at commit.
    let mut t = Txn::begin(st3.clone(), Arc::new(AtomicBool::new(false)));
    let seqs = t.sequences();
    let walnut_storage::txn::RelKind::Sequence(s) = seqs.lookup("s") else {
        panic!("no sequence s");
    };
    assert_eq!(
        seqs.set(&s, 0, true).unwrap_err().sqlstate,
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE
    );
    seqs.set(&s, 1000, false).unwrap();
    assert_eq!(seqs.fetch(&s).unwrap().first, 1000);
    commit(t);
    let copy2 = tmp.path().join("c3");
    crash_copy(&copy, &copy2);
    let st4 = Storage::open(Arc::new(walnut_io::RealVfs), &copy2, config(64)).unwrap();
    assert!(nextvals(&st4, "s", 1).0[0] > 1000);
    let mut t = Txn::begin(st4.clone(), Arc::new(AtomicBool::new(false)));
    t.drop_sequence("s").unwrap();
    commit(t);
    let mut t = Txn::begin(st4.clone(), Arc::new(AtomicBool::new(false)));
    assert!(matches!(
        t.sequences().lookup("s"),
        walnut_storage::txn::RelKind::Missing
    ));
    drop(t);
    st4.shutdown().unwrap();
    st3.shutdown().unwrap();
    st.shutdown().unwrap();
}

/// A descending sequence with CACHE 5: each fetch takes five values, stops at MINVALUE, and
/// then fails with 2200H without changing anything.
#[test]
fn a_cached_descending_sequence_stops_at_its_minimum() {
    let tmp = tempfile::tempdir().unwrap();
    let st = fresh(tmp.path(), 64);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let mut def = sequence("d", 5, -3);
    def.start = -1;
    def.min = -20;
    t.create_sequence(def).unwrap();
    commit(t);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let seqs = t.sequences();
    let walnut_storage::txn::RelKind::Sequence(s) = seqs.lookup("d") else {
        panic!("no sequence d");
    };
    let f = seqs.fetch(&s).unwrap();
    assert_eq!((f.first, f.last), (-1, -13));
    let f = seqs.fetch(&s).unwrap();
    assert_eq!((f.first, f.last), (-16, -19), "stops at the bound");
    let e = seqs.fetch(&s).unwrap_err();
    assert_eq!(e.sqlstate, SqlState::SEQUENCE_GENERATOR_LIMIT_EXCEEDED);
    assert_eq!(seqs.read(&s).unwrap().last_value, -19);
    commit(t);
    st.shutdown().unwrap();
}

/// ALTER SEQUENCE changes the options that `log_cnt` was counted under: the next `nextval`
/// logs again, so that values of the new increment past the last record are never handed out
/// unlogged (31 values of increment 2 would reach 63, past the 33 logged); a crash then hands
/// out only values above those handed out. RESTART gives the sequence a new relation file: a
/// rollback undoes it, a commit makes it the sequence.
#[test]
fn an_altered_sequence_logs_again_and_a_restart_is_undone_by_rollback() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let st = fresh(&dir, 64);
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    t.create_sequence(sequence("s", 1, 1)).unwrap();
    commit(t);
    assert_eq!(nextvals(&st, "s", 1), (vec![1], 1));
    let alter = |st: &Arc<Storage>, increment: i64, restart: Option<i64>, keep: bool| {
        let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
        t.alter_sequence("s", sequence("s", 1, increment), restart)
            .unwrap();
        if keep {
            commit(t);
        } else {
            t.rollback();
        }
    };
    alter(&st, 2, None, true);
    let (vals, logged) = nextvals(&st, "s", 31);
    assert_eq!(vals, (1..=31).map(|k| 1 + 2 * k).collect::<Vec<i64>>());
    assert_eq!(logged, 1, "the first call under the new increment logs");
    let copy = tmp.path().join("c1");
    crash_copy(&dir, &copy);
    let st2 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(64)).unwrap();
    let (after, _) = nextvals(&st2, "s", 1);
    assert!(after[0] > 63, "after a crash: {after:?} (63 handed out)");
    st2.shutdown().unwrap();

    alter(&st, 2, Some(1000), false);
    assert_eq!(nextvals(&st, "s", 1).0, vec![65], "a rolled back RESTART");
    alter(&st, 2, Some(1000), true);
    assert_eq!(nextvals(&st, "s", 2).0, vec![1000, 1002]);
    let copy = tmp.path().join("c2");
    crash_copy(&dir, &copy);
    let st3 = Storage::open(Arc::new(walnut_io::RealVfs), &copy, config(64)).unwrap();
    let (after, _) = nextvals(&st3, "s", 1);
    assert!(after[0] > 1002, "after a RESTART and a crash: {after:?}");
    st3.shutdown().unwrap();

    // A transaction that looked the sequence up before a RESTART committed (and removed the
    // old file) goes on with the new file, not 42P01.
    let mut t = Txn::begin(st.clone(), Arc::new(AtomicBool::new(false)));
    let seqs = t.sequences();
    let walnut_storage::txn::RelKind::Sequence(s) = seqs.lookup("s") else {
        panic!("no sequence s");
    };
    alter(&st, 2, Some(5000), true);
    assert_eq!(seqs.fetch(&s).unwrap().first, 5000);
    assert_eq!(seqs.fetch(&s).unwrap().first, 5002);
    drop(t);
    st.shutdown().unwrap();
}
