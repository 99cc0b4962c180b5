//! The progress views of the real engine: an ADD PRIMARY KEY's index build seen at every step
//! it reports (through the registry's test hook, which runs on the building thread, so each
//! step is observed exactly, with no timing involved), and a COPY seen from another session.

mod support;

use parking_lot::Mutex;
use std::sync::Arc;
use support::{Db, EngineKind};
use walnut_common::Value;
use walnut_sql::session::{Output, Session};

fn rows(s: &mut Session, sql: &str) -> Vec<Vec<Value>> {
    match s.simple_query(sql).pop() {
        Some(Ok(Output::Rows { rows, .. })) => rows,
        other => panic!("{sql}: {other:?}"),
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("not an integer: {v:?}"))
}

fn text(v: &Value) -> &str {
    match v {
        Value::Text(s) => s,
        other => panic!("not text: {other:?}"),
    }
}

fn run(s: &mut Session, sql: &str) {
    for r in s.simple_query(sql) {
        if let Err(e) = r {
            panic!("{sql}: {} {}", e.sqlstate, e.message);
        }
    }
}

// Columns of pg_stat_progress_create_index.
const PID: usize = 0;
const DATNAME: usize = 2;
const RELID: usize = 3;
const INDEX_RELID: usize = 4;
const COMMAND: usize = 5;
const PHASE: usize = 6;
const BLOCKS_TOTAL: usize = 10;
const BLOCKS_DONE: usize = 11;
const TUPLES_TOTAL: usize = 12;
const TUPLES_DONE: usize = 13;

#[test]
fn add_primary_key_reports_each_phase_of_its_index_build() {
    let db = Db::open(EngineKind::Real);
    let registry = db
        .engine
        .progress()
        .expect("the real engine has progress views");
    let mut s = db.session(&[]);
    s.set_backend(777, "bench");
    let n = 5000;
    run(&mut s, "create table t (k int, pad text)");
    run(
        &mut s,
        &format!(
            "insert into t select g, 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' \
             from generate_series(1, {n}) as g"
        ),
    );
    let t_oid = int(&rows(&mut s, "select oid from pg_class where relname = 't'")[0][0]);
    assert!(rows(&mut s, "select * from pg_stat_progress_create_index").is_empty());

    // Every step the build reports, as any session reading the view would see it then.
    let seen: Arc<Mutex<Vec<Vec<Value>>>> = Arc::default();
    let (weak, log) = (Arc::downgrade(&registry), seen.clone());
    registry.on_index_build_report(Arc::new(move || {
        let r = weak.upgrade().expect("registry");
        let (_, rows) = r.view("pg_stat_progress_create_index").expect("view");
        assert_eq!(rows.len(), 1, "one build, one row: {rows:?}");
        log.lock().push(rows[0].clone());
    }));
    run(&mut s, "alter table t add primary key (k)");
    let seen = seen.lock().clone();
    assert!(
        rows(&mut s, "select * from pg_stat_progress_create_index").is_empty(),
        "the row goes when the build ends"
    );
    let index_oid = int(&rows(&mut s, "select oid from pg_class where relname = 't_pkey'")[0][0]);

    for r in &seen {
        assert_eq!(int(&r[PID]), 777);
        assert_eq!(text(&r[DATNAME]), "bench");
        assert_eq!(int(&r[RELID]), t_oid);
        assert_eq!(text(&r[COMMAND]), "CREATE INDEX");
    }
    let phases: Vec<&str> = seen.iter().map(|r| text(&r[PHASE])).collect();
    let scanning = phases
        .iter()
        .filter(|p| **p == "building index: scanning table")
        .count();
    assert_eq!(phases[0], "initializing", "{phases:?}");
    assert!(
        phases[1..=scanning]
            .iter()
            .all(|p| *p == "building index: scanning table"),
        "{phases:?}"
    );
    assert_eq!(
        phases[scanning + 1],
        "building index: sorting live tuples",
        "{phases:?}"
    );
    assert!(
        phases[scanning + 2..]
            .iter()
            .all(|p| *p == "building index: loading tuples in tree"),
        "{phases:?}"
    );
    // Initializing: nothing known yet.
    assert_eq!(
        [
            INDEX_RELID,
            BLOCKS_TOTAL,
            BLOCKS_DONE,
            TUPLES_TOTAL,
            TUPLES_DONE
        ]
        .map(|c| int(&seen[0][c])),
        [0; 5]
    );
    // Scanning: the heap's blocks are known, and counted as they are scanned.
    let blocks = int(&seen[1][BLOCKS_TOTAL]);
    assert!(
        blocks > 5,
        "a table of {n} rows spans many blocks: {blocks}"
    );
    let scanned: Vec<i64> = seen[1..=scanning]
        .iter()
        .map(|r| int(&r[BLOCKS_DONE]))
        .collect();
    assert_eq!(scanned[0], 0);
    assert!(
        scanned.windows(2).all(|w| w[1] == w[0] + 1) && *scanned.last().unwrap() == blocks,
        "{scanned:?}"
    );
    // Sorting: every block scanned.
    assert_eq!(int(&seen[scanning + 1][BLOCKS_DONE]), blocks);
    // Loading: the scan is over, every entry is to be loaded, and the leaf pages fill up.
    let loading = &seen[scanning + 2..];
    assert!(loading.len() > 3, "several leaf pages: {loading:?}");
    let mut done_before = 0;
    for r in loading {
        assert_eq!(int(&r[INDEX_RELID]), index_oid);
        assert_eq!(int(&r[BLOCKS_TOTAL]), blocks);
        assert_eq!(int(&r[BLOCKS_DONE]), blocks);
        assert_eq!(int(&r[TUPLES_TOTAL]), n);
        let done = int(&r[TUPLES_DONE]);
        assert!(done >= done_before && done <= n, "{loading:?}");
        done_before = done;
    }
    assert_eq!(int(&loading[0][TUPLES_DONE]), 0, "loading starts at 0");
    assert_eq!(done_before, n, "and ends with every tuple in the tree");

    // A build that fails (duplicate keys) leaves no row behind.
    run(&mut s, "create table u (k int)");
    run(&mut s, "insert into u values (1), (1)");
    assert!(s.simple_query("alter table u add primary key (k)")[0].is_err());
    assert!(rows(&mut s, "select * from pg_stat_progress_create_index").is_empty());
    drop(s);
    db.shutdown();
}

/// `pg_stat_activity` from another session: a session's row follows its statements and
/// transaction block (state, query, xact_start), shows who its client is, and goes with the
/// session; a session the front end never named has no row.
#[test]
fn pg_stat_activity_follows_each_session() {
    let db = Db::open(EngineKind::Real);
    let mut a = db.session(&[("application_name", "shop")]);
    let mut b = db.session(&[]);
    a.set_backend(41, "db");
    a.set_client(walnut_sql::activity::ClientIdentity {
        user: "alice".into(),
        application_name: "shop".into(),
        addr: Some("10.0.0.7:40000".parse().unwrap()),
        walsender: false,
    });
    b.set_backend(42, "db");
    let sql = "select pid, datname, usename, application_name, client_addr, client_port, state, \
               query, xact_start is null, backend_type from pg_stat_activity order by pid";
    let row = |b: &mut Session| rows(b, sql).into_iter().find(|r| r[0] == Value::Int4(41));
    let t = |s: &str| Value::Text(s.into());
    let a_row = row(&mut b).expect("a's row");
    assert_eq!(
        a_row,
        vec![
            Value::Int4(41),
            t("db"),
            t("alice"),
            t("shop"),
            t("10.0.0.7"),
            Value::Int4(40000),
            t("idle"),
            t(""),
            Value::Bool(true),
            t("client backend"),
        ]
    );
    // b sees itself running the query.
    let b_row = rows(&mut b, sql)
        .into_iter()
        .find(|r| r[0] == Value::Int4(42))
        .unwrap();
    assert_eq!((&b_row[6], &b_row[7]), (&t("active"), &t(sql)));
    run(&mut a, "begin");
    run(&mut a, "select 1");
    let a_row = row(&mut b).unwrap();
    assert_eq!(
        (&a_row[6], &a_row[7], &a_row[8]),
        (
            &t("idle in transaction"),
            &t("select 1"),
            &Value::Bool(false)
        )
    );
    assert!(a.simple_query("select 1/0").pop().unwrap().is_err());
    assert_eq!(row(&mut b).unwrap()[6], t("idle in transaction (aborted)"));
    run(&mut a, "rollback");
    // A COPY that fails: ReadyForQuery follows the error, and the row says so.
    run(&mut a, "create table c (k int primary key)");
    assert!(matches!(
        a.simple_query("copy c from stdin").pop(),
        Some(Ok(Output::CopyIn { .. }))
    ));
    assert_eq!(row(&mut b).unwrap()[6], t("active"));
    a.copy_fail("client gave up");
    let a_row = row(&mut b).unwrap();
    assert_eq!((&a_row[6], &a_row[8]), (&t("idle"), &Value::Bool(true)));
    assert!(matches!(
        a.simple_query("copy c from stdin").pop(),
        Some(Ok(Output::CopyIn { .. }))
    ));
    assert!(a.copy_data(b"not a number\n").is_err());
    assert_eq!(row(&mut b).unwrap()[6], t("idle"), "bad data ends the COPY");
    run(&mut a, "set application_name = 'till'");
    let a_row = row(&mut b).unwrap();
    assert_eq!(
        (&a_row[3], &a_row[6], &a_row[8]),
        (&t("till"), &t("idle"), &Value::Bool(true))
    );
    drop(a);
    assert_eq!(row(&mut b), None, "the row goes with the session");
    let unnamed = db.session(&[]);
    assert_eq!(
        rows(&mut b, sql).len(),
        1,
        "only b: an unnamed session has no row"
    );
    drop(unnamed);
    drop(b);
    db.shutdown();
}

#[test]
fn copy_is_seen_from_another_session_while_it_runs() {
    let db = Db::open(EngineKind::Real);
    let mut a = db.session(&[]);
    let mut b = db.session(&[]);
    a.set_backend(31, "db");
    run(&mut a, "create table t (k int primary key, v text)");
    let t_oid = int(&rows(&mut b, "select oid from pg_class where relname = 't'")[0][0]);
    let sql = "select pid, relid, bytes_processed, tuples_processed from pg_stat_progress_copy";
    assert!(matches!(
        a.simple_query("copy t from stdin").pop(),
        Some(Ok(Output::CopyIn { .. }))
    ));
    let mut data = Vec::new();
    for k in 0..1000 {
        data.extend_from_slice(format!("{k}\tvalue {k}\n").as_bytes());
    }
    a.copy_data(&data).unwrap();
    assert_eq!(
        rows(&mut b, sql),
        vec![vec![
            Value::Int4(31),
            Value::Int8(t_oid),
            Value::Int8(data.len() as i64),
            Value::Int8(1000)
        ]]
    );
    a.copy_data(b"1000\tlast\n").unwrap();
    assert_eq!(int(&rows(&mut b, sql)[0][3]), 1001);
    a.copy_done().unwrap();
    assert!(rows(&mut b, sql).is_empty());
    drop((a, b));
    db.shutdown();
}
