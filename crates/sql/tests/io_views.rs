//! The I/O statistics views of the real engine (`pg_stat_checkpointer`, `pg_stat_bgwriter`,
//! `pg_stat_io`): PostgreSQL 18's columns, and counters that move with the work done.

mod support;

use support::{Db, EngineKind};
use walnut_common::Value;
use walnut_sql::session::{Output, Session};

/// The rows of `sql`, with the column names.
fn query(s: &mut Session, sql: &str) -> (Vec<String>, Vec<Vec<Value>>) {
    match s.simple_query(sql).pop() {
        Some(Ok(Output::Rows { columns, rows, .. })) => {
            (columns.iter().map(|c| c.name.clone()).collect(), rows)
        }
        other => panic!("{sql}: {other:?}"),
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("not an integer: {v:?}"))
}

#[test]
fn checkpoint_bgwriter_and_io_views_count_the_work() {
    let db = Db::open(EngineKind::Real);
    let mut s = db.session(&[]);
    for sql in [
        "create table t (a int primary key, b text)",
        "insert into t(a, b) select g, 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' from generate_series(1, 2000) as g",
        "checkpoint",
    ] {
        assert!(s.simple_query(sql)[0].is_ok(), "{sql}");
    }
    let (cols, rows) = query(&mut s, "select * from pg_stat_checkpointer");
    assert_eq!(
        cols,
        [
            "num_timed",
            "num_requested",
            "num_done",
            "restartpoints_timed",
            "restartpoints_req",
            "restartpoints_done",
            "write_time",
            "sync_time",
            "buffers_written",
            "slru_written",
            "stats_reset"
        ]
    );
    let r = &rows[0];
    assert!(int(&r[1]) >= 1, "the CHECKPOINT was requested: {r:?}");
    assert!(int(&r[2]) >= 1, "and done: {r:?}");
    assert!(int(&r[8]) >= 30, "and wrote the table's pages: {r:?}");
    let (cols, rows) = query(&mut s, "select * from pg_stat_bgwriter");
    assert_eq!(
        cols,
        [
            "buffers_clean",
            "maxwritten_clean",
            "buffers_alloc",
            "stats_reset"
        ]
    );
    assert!(int(&rows[0][2]) >= 30, "buffers allocated: {:?}", rows[0]);
    let (cols, rows) = query(
        &mut s,
        "select backend_type, writes, fsyncs, hits, extends from pg_stat_io \
         where object = 'relation' and context = 'normal'",
    );
    assert_eq!(
        cols,
        ["backend_type", "writes", "fsyncs", "hits", "extends"]
    );
    let row = |t: &str| {
        rows.iter()
            .find(|r| r[0] == Value::Text(t.into()))
            .unwrap_or_else(|| panic!("no {t} row: {rows:?}"))
            .clone()
    };
    let ckpt = row("checkpointer");
    assert!(int(&ckpt[1]) >= 30, "the checkpointer wrote: {ckpt:?}");
    assert!(int(&ckpt[2]) >= 1, "and synced: {ckpt:?}");
    let client = row("client backend");
    assert!(int(&client[3]) > 0, "sessions hit the pool: {client:?}");
    assert!(int(&client[4]) >= 30, "and extended the table: {client:?}");
    row("background writer");
    row("startup");
    let (_, all) = query(&mut s, "select * from pg_stat_io");
    assert_eq!(all[0].len(), 20, "PostgreSQL 18's 20 columns");
    drop(s);
    db.shutdown();
}

/// `pg_relation_size` and its family on the real engine: sizes in whole 8 kB blocks for the
/// table and its primary-key index, by OID or by name; the free-space map's fork once a
/// VACUUM filled it and a checkpoint wrote it; NULL for an OID no relation has; 22023 for a
/// fork name PostgreSQL does not know.
#[test]
fn relation_sizes_follow_the_files() {
    let db = Db::open(EngineKind::Real);
    let mut s = db.session(&[]);
    for sql in [
        "create table t (a int primary key, b text)",
        "insert into t(a, b) select g, 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' from generate_series(1, 5000) as g",
        "delete from t where a % 2 = 0",
        "vacuum t",
        "checkpoint",
    ] {
        assert!(s.simple_query(sql)[0].is_ok(), "{sql}");
    }
    let (_, rows) = query(
        &mut s,
        "select pg_relation_size('t'), pg_relation_size('t_pkey'), pg_relation_size('t', 'fsm'), \
         pg_relation_size('t', 'vm'), pg_table_size('t'), pg_indexes_size('t'), \
         pg_total_relation_size('t'), pg_relation_size(987654)",
    );
    let r: Vec<Option<i64>> = rows[0].iter().map(Value::as_i64).collect();
    let [heap, index, fsm, vm, table, indexes, total, none] = r[..] else {
        panic!("{r:?}")
    };
    let (heap, index, fsm) = (heap.unwrap(), index.unwrap(), fsm.unwrap());
    assert!(heap >= 5 * 8192 && heap % 8192 == 0, "heap {heap}");
    assert!(index >= 2 * 8192 && index % 8192 == 0, "index {index}");
    assert!(fsm > 16, "the map file: header and entries ({fsm} bytes)");
    assert_eq!(vm, Some(0), "no visibility map");
    assert_eq!(table, Some(heap + fsm));
    assert_eq!(indexes, Some(index));
    assert_eq!(total, Some(heap + fsm + index));
    assert_eq!(none, None, "no relation has that OID");
    let (_, rows) = query(
        &mut s,
        "select pg_relation_size(oid) from pg_class where relname = 't'",
    );
    assert_eq!(rows[0][0].as_i64(), Some(heap), "by OID");
    // After TRUNCATE the table has new files, and its OID stays: the sizes follow the files.
    assert!(s.simple_query("truncate t")[0].is_ok());
    assert!(s.simple_query("insert into t values (1, 'one')")[0].is_ok());
    let (_, rows) = query(
        &mut s,
        "select pg_relation_size(oid), pg_relation_size('t'), pg_relation_size(null), \
         pg_relation_size('t', null), pg_relation_size(987654, 'bad') \
         from pg_class where relname = 't'",
    );
    assert_eq!(
        rows[0],
        [
            Value::Int8(8192),
            Value::Int8(8192),
            Value::Null,
            Value::Null,
            Value::Null
        ],
        "one page after TRUNCATE; NULL in, NULL out; no relation, no fork check"
    );
    let e = s
        .simple_query("select pg_relation_size('t', 'bad')")
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(
        e.sqlstate,
        walnut_common::SqlState::INVALID_PARAMETER_VALUE,
        "{}",
        e.message
    );
    drop(s);
    db.shutdown();
}
