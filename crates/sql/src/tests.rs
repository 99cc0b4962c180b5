//! Tests of the SQL layer through [`Session`], over the in-memory model engine.

use crate::session::{Output, Session, TxnStatus};
use crate::testing::MemEngine;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use walnut_common::config::Config;
use walnut_common::{ColumnDef, DataType, SqlState, Value};

/// A server configuration without files: the defaults and `pairs`.
fn config(pairs: &[(&str, &str)]) -> Arc<Config> {
    Arc::new(Config::in_memory(crate::guc::registry(), pairs).expect("config"))
}

fn session(e: &MemEngine) -> Session {
    Session::new(Arc::new(e.clone()), config(&[]), &[]).expect("session")
}

/// Runs a simple query that must succeed; returns its last output.
#[track_caller]
fn ok(s: &mut Session, sql: &str) -> Output {
    let mut out = s.simple_query(sql);
    for r in &out {
        if let Err(e) = r {
            panic!("{sql}: {} {}", e.sqlstate, e.message);
        }
    }
    out.pop().expect("one result").expect("checked")
}

#[track_caller]
fn tag(s: &mut Session, sql: &str) -> String {
    match ok(s, sql) {
        Output::Command { tag } | Output::Rows { tag, .. } => tag,
        other => panic!("{sql}: unexpected {other:?}"),
    }
}

fn text(v: &Value) -> String {
    v.to_text().unwrap_or_else(|| "NULL".into())
}

/// Rows as text, `NULL` for nulls.
#[track_caller]
fn rows(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    match ok(s, sql) {
        Output::Rows { rows, .. } => rows.iter().map(|r| r.iter().map(text).collect()).collect(),
        other => panic!("{sql}: unexpected {other:?}"),
    }
}

#[track_caller]
fn one(s: &mut Session, sql: &str) -> String {
    let r = rows(s, sql);
    assert_eq!(r.len(), 1, "{sql}: {r:?}");
    r[0][0].clone()
}

#[track_caller]
fn err(s: &mut Session, sql: &str) -> SqlState {
    match s.simple_query(sql).pop().expect("one result") {
        Err(e) => e.sqlstate,
        Ok(o) => panic!("{sql}: expected an error, got {o:?}"),
    }
}

fn exec(s: &mut Session, sql: &str, params: Vec<Value>) -> Output {
    let p = s
        .prepare(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {}", e.message));
    s.execute(&p, params)
        .unwrap_or_else(|e| panic!("{sql}: {}", e.message))
}

const PGBENCH_DDL: &[&str] = &[
    "drop table if exists pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    "create table pgbench_history(tid int,bid int,aid    int,delta int,mtime timestamp,filler char(22))",
    "create table pgbench_tellers(tid int not null,bid int,tbalance int,filler char(84)) with (fillfactor=100)",
    "create table pgbench_accounts(aid    int not null,bid int,abalance int,filler char(84)) with (fillfactor=100)",
    "create table pgbench_branches(bid int not null,bbalance int,filler char(88)) with (fillfactor=100)",
];

const ACCOUNTS: i64 = 5000;

/// pgbench -i's client-side sequence, with COPY data in awkward chunks.
fn pgbench_init(s: &mut Session) {
    for sql in PGBENCH_DDL {
        ok(s, sql);
    }
    let notices = s.take_notices();
    assert_eq!(notices.len(), 4);
    assert_eq!(
        notices[0].message,
        "table \"pgbench_accounts\" does not exist, skipping"
    );
    assert_eq!(tag(s, "begin"), "BEGIN");
    assert_eq!(
        tag(
            s,
            "truncate table pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers"
        ),
        "TRUNCATE TABLE"
    );
    let copy = |s: &mut Session, table: &str, data: String, chunk: usize| {
        match ok(s, &format!("copy {table} from stdin with (freeze on)")) {
            Output::CopyIn { .. } => {}
            other => panic!("{other:?}"),
        }
        for c in data.as_bytes().chunks(chunk) {
            s.copy_data(c).expect("copy data");
        }
        match s.copy_done().expect("copy done") {
            Output::Command { tag } => tag,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(copy(s, "pgbench_branches", "1\t0\t\n".into(), 3), "COPY 1");
    let tellers: String = (1..=10).map(|t| format!("{t}\t1\t0\t\n")).collect();
    assert_eq!(copy(s, "pgbench_tellers", tellers, 7), "COPY 10");
    let accounts: String = (1..=ACCOUNTS)
        .map(|a| format!("{a}\t1\t0\t\n"))
        .collect::<String>()
        + "\\.\n";
    assert_eq!(
        copy(s, "pgbench_accounts", accounts, 4093),
        format!("COPY {ACCOUNTS}")
    );
    assert_eq!(s.txn_status(), TxnStatus::InBlock);
    assert_eq!(tag(s, "commit"), "COMMIT");
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    for t in [
        "pgbench_branches",
        "pgbench_tellers",
        "pgbench_accounts",
        "pgbench_history",
    ] {
        assert_eq!(tag(s, &format!("vacuum analyze {t}")), "VACUUM");
    }
    assert_eq!(
        tag(s, "alter table pgbench_branches add primary key (bid)"),
        "ALTER TABLE"
    );
    assert_eq!(
        tag(s, "alter table pgbench_tellers add primary key (tid)"),
        "ALTER TABLE"
    );
    assert_eq!(
        tag(
            s,
            "alter table pgbench_accounts add constraint pgbench_accounts_pkey primary key (aid)"
        ),
        "ALTER TABLE"
    );
}

#[test]
fn pgbench_init_and_tpcb_simple() {
    let e = MemEngine::new();
    let mut s = session(&e);
    pgbench_init(&mut s);
    assert_eq!(
        one(&mut s, "select count(*) from pgbench_accounts"),
        ACCOUNTS.to_string()
    );
    assert_eq!(one(&mut s, "select count(*) from pgbench_branches"), "1");
    assert_eq!(
        one(
            &mut s,
            "select length(filler) from pgbench_accounts where aid = 7"
        ),
        "0"
    );
    assert_eq!(one(&mut s, "select filler from pgbench_branches").len(), 88);

    // tpcb-like, -M simple (literals, negative delta).
    for (aid, tid, delta) in [(17, 3, -40), (17, 4, 100), (4999, 3, 7)] {
        assert_eq!(tag(&mut s, "BEGIN;"), "BEGIN");
        let up =
            format!("UPDATE pgbench_accounts SET abalance = abalance + {delta} WHERE aid = {aid};");
        assert_eq!(tag(&mut s, &up), "UPDATE 1");
        let _ = rows(
            &mut s,
            &format!("SELECT abalance FROM pgbench_accounts WHERE aid = {aid};"),
        );
        assert_eq!(
            tag(
                &mut s,
                &format!(
                    "UPDATE pgbench_tellers SET tbalance = tbalance + {delta} WHERE tid = {tid};"
                )
            ),
            "UPDATE 1"
        );
        assert_eq!(
            tag(
                &mut s,
                &format!(
                    "UPDATE pgbench_branches SET bbalance = bbalance + {delta} WHERE bid = 1;"
                )
            ),
            "UPDATE 1"
        );
        let ins = format!(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ({tid}, 1, {aid}, {delta}, CURRENT_TIMESTAMP);"
        );
        assert_eq!(tag(&mut s, &ins), "INSERT 0 1");
        assert_eq!(tag(&mut s, "END;"), "COMMIT");
    }
    assert_eq!(
        one(
            &mut s,
            "SELECT abalance FROM pgbench_accounts WHERE aid = 17"
        ),
        "60"
    );
    assert_eq!(one(&mut s, "select bbalance from pgbench_branches"), "67");
    assert_eq!(one(&mut s, "select sum(delta) from pgbench_history"), "67");
    assert_eq!(
        one(
            &mut s,
            "select count(*) from pgbench_history where mtime <= now()"
        ),
        "3"
    );
    assert_eq!(
        one(&mut s, "select tbalance from pgbench_tellers where tid = 3"),
        "-33"
    );
}

#[test]
fn pgbench_server_side_generate() {
    let e = MemEngine::new();
    let mut s = session(&e);
    for sql in PGBENCH_DDL {
        ok(&mut s, sql);
    }
    ok(&mut s, "begin");
    ok(
        &mut s,
        "truncate table pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    );
    assert_eq!(
        tag(
            &mut s,
            "insert into pgbench_branches(bid,bbalance) select bid, 0 from generate_series(1, 2) as bid"
        ),
        "INSERT 0 2"
    );
    assert_eq!(
        tag(&mut s, "insert into pgbench_tellers(tid,bid,tbalance) select tid, (tid - 1) / 10 + 1, 0 from generate_series(1, 20) as tid"),
        "INSERT 0 20"
    );
    assert_eq!(
        tag(&mut s, "insert into pgbench_accounts(aid,bid,abalance,filler) select aid, (aid - 1) / 1000 + 1, 0, '' from generate_series(1, 2000) as aid"),
        "INSERT 0 2000"
    );
    ok(&mut s, "commit");
    assert_eq!(
        rows(
            &mut s,
            "select bid, count(*) from pgbench_accounts group by bid order by bid"
        ),
        vec![vec!["1", "1000"], vec!["2", "1000"]]
    );
    assert_eq!(one(&mut s, "select max(bid) from pgbench_tellers"), "2");
    assert_eq!(
        rows(
            &mut s,
            "select x * 2 from generate_series(1, 3) as g(x) order by 1 desc"
        ),
        vec![vec!["6"], vec!["4"], vec!["2"]]
    );
    assert_eq!(
        one(&mut s, "select count(*) from generate_series(10, 1, -3)"),
        "4"
    );
}

#[test]
fn pgbench_prepared_scripts_and_plan_cache() {
    let e = MemEngine::new();
    let mut s = session(&e);
    pgbench_init(&mut s);
    let upd = "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;";
    let sel = "SELECT abalance FROM pgbench_accounts WHERE aid = $1;";
    let ins = "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);";
    let p_upd = s.prepare(upd, &[]).unwrap();
    assert_eq!(p_upd.param_types, vec![DataType::Int4, DataType::Int4]);
    assert!(p_upd.columns.is_none());
    let p_sel = s.prepare(sel, &[]).unwrap();
    assert_eq!(p_sel.param_types, vec![DataType::Int4]);
    assert_eq!(p_sel.columns.as_ref().unwrap()[0].name, "abalance");
    let p_ins = s.prepare(ins, &[]).unwrap();
    assert_eq!(p_ins.param_types, vec![DataType::Int4; 4]);
    let p_begin = s.prepare("BEGIN;", &[]).unwrap();
    let p_end = s.prepare("END;", &[]).unwrap();
    // The cache hands back the same plan.
    assert!(Arc::ptr_eq(&p_upd, &s.prepare(upd, &[]).unwrap()));
    assert!(Arc::ptr_eq(&p_sel, &s.prepare(sel, &[]).unwrap()));
    assert!(!Arc::ptr_eq(&p_sel, &s.prepare(sel, &[20]).unwrap()));

    for i in 0..50 {
        let aid = 1 + (i * 97) % ACCOUNTS as i32;
        s.execute(&p_begin, vec![]).unwrap();
        assert_eq!(s.txn_status(), TxnStatus::InBlock);
        let out = s
            .execute(&p_upd, vec![Value::Int4(5), Value::Int4(aid)])
            .unwrap();
        assert!(
            matches!(out, Output::Command { ref tag } if tag == "UPDATE 1"),
            "{out:?}"
        );
        match s.execute(&p_sel, vec![Value::Int4(aid)]).unwrap() {
            Output::Rows { rows, tag, .. } => {
                assert_eq!(tag, "SELECT 1");
                assert!(rows[0][0].as_i64().unwrap() >= 5);
            }
            other => panic!("{other:?}"),
        }
        s.execute(
            &p_ins,
            vec![
                Value::Int4(1),
                Value::Int4(1),
                Value::Int4(aid),
                Value::Int4(5),
            ],
        )
        .unwrap();
        s.execute(&p_end, vec![]).unwrap();
        s.sync().unwrap();
        assert_eq!(s.txn_status(), TxnStatus::Idle);
    }
    assert_eq!(
        one(&mut s, "select sum(abalance) from pgbench_accounts"),
        "250"
    );
    assert_eq!(one(&mut s, "select count(*) from pgbench_history"), "50");
    // Select-only outside a block autocommits.
    let before = e.commits();
    s.execute(&p_sel, vec![Value::Int4(1)]).unwrap();
    assert_eq!(e.commits(), before + 1);
    assert_eq!(s.txn_status(), TxnStatus::Idle);
}

#[test]
fn prepared_plan_survives_table_recreation() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(&mut s, "create table t (a int primary key, b text)");
    ok(&mut s, "insert into t values (1, 'x')");
    let p = s.prepare("select b from t where a = $1", &[]).unwrap();
    ok(&mut s, "drop table t");
    ok(&mut s, "create table t (z int, b text, a int primary key)");
    ok(&mut s, "insert into t values (0, 'y', 1)");
    match s.execute(&p, vec![Value::Int4(1)]).unwrap() {
        Output::Rows { rows, .. } => assert_eq!(rows, vec![vec![Value::Text("y".into())]]),
        other => panic!("{other:?}"),
    }
    ok(&mut s, "drop table t");
    assert_eq!(
        s.execute(&p, vec![Value::Int4(1)]).unwrap_err().sqlstate,
        SqlState::UNDEFINED_TABLE
    );
}

fn items(s: &mut Session) {
    ok(
        s,
        "create table items (id int primary key, name varchar(20), price double precision, qty int, code char(4))",
    );
    ok(
        s,
        "insert into items values (1, 'apple', 1.5, 10, 'ab'), (2, 'pear', 2.25, NULL, 'cd'), (3, 'fig', NULL, 3, NULL), \
         (4, 'Kiwi', 0.5, 7, 'ab'), (5, NULL, 9, 1, 'zz')",
    );
}

#[test]
fn select_features() {
    let e = MemEngine::new();
    let mut s = session(&e);
    items(&mut s);
    assert_eq!(
        rows(
            &mut s,
            "select count(*), count(qty), sum(qty), min(price), max(name), avg(qty) from items"
        ),
        vec![vec!["5", "4", "21", "0.5", "pear", "5.25"]]
    );
    assert_eq!(
        rows(&mut s, "select id from items order by qty desc"),
        vec![vec!["2"], vec!["1"], vec!["4"], vec!["3"], vec!["5"]]
    );
    assert_eq!(
        rows(
            &mut s,
            "select id from items order by qty nulls first limit 2"
        ),
        vec![vec!["2"], vec!["5"]]
    );
    assert_eq!(
        rows(
            &mut s,
            "select id, qty * 2 as dbl from items where qty is not null order by dbl limit 2 offset 1"
        ),
        vec![vec!["3", "6"], vec!["4", "14"]]
    );
    assert_eq!(
        rows(&mut s, "select name from items order by 1 limit 1"),
        vec![vec!["Kiwi"]]
    );
    assert_eq!(
        rows(
            &mut s,
            "select id from items where id between 2 and 4 and qty in (3, 7) order by id"
        ),
        vec![vec!["3"], vec!["4"]]
    );
    assert_eq!(
        rows(&mut s, "select id from items where id > 3"),
        vec![vec!["4"], vec!["5"]]
    );
    assert_eq!(
        rows(&mut s, "select id from items where id >= 2 and id < 4"),
        vec![vec!["2"], vec!["3"]]
    );
    assert_eq!(
        rows(&mut s, "select id from items where 4 <= id"),
        vec![vec!["4"], vec!["5"]]
    );
    assert_eq!(
        rows(&mut s, "select id from items where id = 3.0"),
        vec![vec!["3"]]
    );
    assert_eq!(
        rows(&mut s, "select id from items where id = null"),
        Vec::<Vec<String>>::new()
    );
    assert_eq!(
        rows(
            &mut s,
            "select code, count(*) from items group by code order by code"
        ),
        vec![
            vec!["ab  ", "2"],
            vec!["cd  ", "1"],
            vec!["zz  ", "1"],
            vec!["NULL", "1"]
        ]
    );
    assert_eq!(
        rows(
            &mut s,
            "select code, sum(qty) from items group by 1 having count(*) > 1"
        ),
        vec![vec!["ab  ", "17"]]
    );
    assert_eq!(
        rows(&mut s, "select count(*) from items where id > 100"),
        vec![vec!["0"]]
    );
    assert_eq!(
        rows(&mut s, "select sum(qty) from items where id > 100"),
        vec![vec!["NULL"]]
    );
    assert_eq!(
        rows(
            &mut s,
            "select lower(name), upper(name), length(name) from items where id = 4"
        ),
        vec![vec!["kiwi", "KIWI", "4"]]
    );
    assert_eq!(
        one(
            &mut s,
            "select coalesce(name, 'none') from items where id = 5"
        ),
        "none"
    );
    assert_eq!(one(&mut s, "select id from items where code = 'zz'"), "5");
    assert_eq!(
        one(
            &mut s,
            "select count(*) from items where name like 'a%' or true"
        ),
        "5"
    );
    match ok(
        &mut s,
        "select *, 1, id + 1 as next from items where id = 1",
    ) {
        Output::Rows { columns, .. } => {
            let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(
                names,
                ["id", "name", "price", "qty", "code", "?column?", "next"]
            );
            assert_eq!(columns[4].ty, DataType::Char(4));
        }
        other => panic!("{other:?}"),
    }
    match ok(&mut s, "select count(*) from items") {
        Output::Rows { columns, tag, .. } => {
            assert_eq!(
                (columns[0].name.as_str(), &columns[0].ty, tag.as_str()),
                ("count", &DataType::Int8, "SELECT 1")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        tag(
            &mut s,
            "update items set qty = qty + 1 where qty is null or qty < 5"
        ),
        "UPDATE 3"
    );
    assert_eq!(
        tag(&mut s, "delete from items where price is null"),
        "DELETE 1"
    );
    assert_eq!(tag(&mut s, "delete from items where id = 42"), "DELETE 0");
    assert_eq!(one(&mut s, "select count(*) from items"), "4");
    assert_eq!(
        tag(&mut s, "insert into items (id) values (9)"),
        "INSERT 0 1"
    );
    assert_eq!(
        one(
            &mut s,
            "select name is null and qty is null from items where id = 9"
        ),
        "t"
    );
}

#[test]
fn system_views() {
    let e = MemEngine::new();
    e.set_view(
        "pg_stat_wal",
        vec![
            ColumnDef {
                name: "wal_records".into(),
                ty: DataType::Int8,
                not_null: true,
            },
            ColumnDef {
                name: "wal_bytes".into(),
                ty: DataType::Int8,
                not_null: true,
            },
        ],
        vec![vec![Value::Int8(10), Value::Int8(2048)]],
    );
    let mut s = session(&e);
    assert_eq!(
        rows(&mut s, "select * from pg_stat_wal"),
        vec![vec!["10", "2048"]]
    );
    assert_eq!(
        rows(
            &mut s,
            "select wal_bytes / wal_records from pg_stat_wal where wal_records > 5"
        ),
        vec![vec!["204"]]
    );
    assert_eq!(
        rows(&mut s, "select wal_records from pg_catalog.pg_stat_wal"),
        vec![vec!["10"]]
    );
    assert_eq!(
        err(&mut s, "select * from pg_catalog.nosuch"),
        SqlState::UNDEFINED_TABLE
    );
    assert_eq!(tag(&mut s, "checkpoint"), "CHECKPOINT");
    assert_eq!(e.checkpoints(), 1);
}

#[test]
fn transaction_states() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(&mut s, "create table t (a int primary key)");
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    ok(&mut s, "begin");
    assert_eq!(s.txn_status(), TxnStatus::InBlock);
    ok(&mut s, "begin");
    let w = s.take_notices();
    assert_eq!(
        (w[0].severity, w[0].sqlstate),
        ("WARNING", SqlState::ACTIVE_SQL_TRANSACTION)
    );
    ok(&mut s, "insert into t values (1)");
    assert_eq!(
        err(&mut s, "insert into t values (1)"),
        SqlState::UNIQUE_VIOLATION
    );
    assert_eq!(s.txn_status(), TxnStatus::Failed);
    assert_eq!(err(&mut s, "select 1"), SqlState::IN_FAILED_SQL_TRANSACTION);
    assert_eq!(err(&mut s, "show jit"), SqlState::IN_FAILED_SQL_TRANSACTION);
    assert!(s.prepare("select 2", &[]).is_err());
    assert_eq!(tag(&mut s, "commit"), "ROLLBACK");
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(one(&mut s, "select count(*) from t"), "0");
    assert_eq!(tag(&mut s, "commit"), "COMMIT");
    assert_eq!(
        s.take_notices()[0].sqlstate,
        SqlState::NO_ACTIVE_SQL_TRANSACTION
    );
    assert_eq!(tag(&mut s, "rollback"), "ROLLBACK");

    // Multi-statement strings are one implicit transaction.
    let out = s.simple_query("insert into t values (1); insert into t values (2); select 1/0");
    assert_eq!(out.len(), 3);
    assert_eq!(
        out[2].as_ref().unwrap_err().sqlstate,
        SqlState::DIVISION_BY_ZERO
    );
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(one(&mut s, "select count(*) from t"), "0");
    let out = s.simple_query("insert into t values (1); insert into t values (2)");
    assert!(out.iter().all(|r| r.is_ok()));
    assert_eq!(one(&mut s, "select count(*) from t"), "2");
    // BEGIN inside a multi-statement string opens a real block.
    let out = s.simple_query("begin; insert into t values (3)");
    assert!(out.iter().all(|r| r.is_ok()));
    assert_eq!(s.txn_status(), TxnStatus::InBlock);
    ok(&mut s, "rollback");
    assert_eq!(one(&mut s, "select count(*) from t"), "2");
    // START TRANSACTION / ABORT, and errors in autocommit leave the session idle.
    ok(&mut s, "start transaction isolation level read committed");
    ok(&mut s, "insert into t values (4)");
    ok(&mut s, "abort");
    assert_eq!(
        err(&mut s, "insert into t values (1)"),
        SqlState::UNIQUE_VIOLATION
    );
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(tag(&mut s, "vacuum"), "VACUUM");
    ok(&mut s, "begin");
    assert_eq!(err(&mut s, "vacuum t"), SqlState::ACTIVE_SQL_TRANSACTION);
    ok(&mut s, "rollback");
    // terminate rolls back.
    ok(&mut s, "begin");
    ok(&mut s, "insert into t values (5)");
    s.terminate();
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(one(&mut s, "select count(*) from t"), "2");
    assert!(matches!(
        s.simple_query("  ;  ").pop().unwrap().unwrap(),
        Output::Empty
    ));
    assert!(matches!(
        s.simple_query("-- nothing").pop().unwrap().unwrap(),
        Output::Empty
    ));
}

#[test]
fn error_codes() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table t (a int primary key, b int not null, c text)",
    );
    let cases: &[(&str, SqlState)] = &[
        ("select * from nope", SqlState::UNDEFINED_TABLE),
        ("select zz from t", SqlState::UNDEFINED_COLUMN),
        ("selec 1", SqlState::SYNTAX_ERROR),
        ("insert into t (a) values (1)", SqlState::NOT_NULL_VIOLATION),
        (
            "insert into t values (1, null)",
            SqlState::NOT_NULL_VIOLATION,
        ),
        ("select 1/0", SqlState::DIVISION_BY_ZERO),
        ("select 5 % 0", SqlState::DIVISION_BY_ZERO),
        (
            "select 2147483647 + 1",
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        ),
        (
            "select 9223372036854775807 * 2",
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        ),
        ("select * from t, t as u", SqlState::FEATURE_NOT_SUPPORTED),
        ("select * from t where 1", SqlState::DATATYPE_MISMATCH),
        (
            "insert into t values ('x', 1)",
            SqlState::INVALID_TEXT_REPRESENTATION,
        ),
        ("insert into t values (1, 1, 2, 3)", SqlState::SYNTAX_ERROR),
        ("select a from t where c = 1", SqlState::UNDEFINED_FUNCTION),
        ("select a, count(*) from t", SqlState::GROUPING_ERROR),
        ("create table t (x int)", SqlState::DUPLICATE_TABLE),
        ("drop table nope", SqlState::UNDEFINED_TABLE),
        ("truncate nope", SqlState::UNDEFINED_TABLE),
        (
            "alter table t add primary key (a)",
            SqlState::INVALID_TABLE_DEFINITION,
        ),
        (
            "create table u (a int) with (fillfactor = 5)",
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            "create table u (a numeric)",
            SqlState::FEATURE_NOT_SUPPORTED,
        ),
        (
            "set shared_buffers = '1GB'",
            SqlState::CANT_CHANGE_RUNTIME_PARAM,
        ),
        ("set no_such_setting = 1", SqlState::UNDEFINED_OBJECT),
        ("show no_such_setting", SqlState::UNDEFINED_OBJECT),
        (
            "set commit_delay = 100001",
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        ("copy t to stdout", SqlState::FEATURE_NOT_SUPPORTED),
        ("savepoint a", SqlState::FEATURE_NOT_SUPPORTED),
        ("select $1", SqlState::UNDEFINED_PARAMETER),
    ];
    for (sql, code) in cases {
        assert_eq!(err(&mut s, sql), *code, "{sql}");
    }
    ok(&mut s, "insert into t values (1, 1)");
    assert_eq!(
        err(&mut s, "insert into t values (1, 2)"),
        SqlState::UNIQUE_VIOLATION
    );
    let e23502 = s
        .simple_query("insert into t (a) values (2)")
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(
        e23502.message,
        "null value in column \"b\" of relation \"t\" violates not-null constraint"
    );
    assert_eq!(
        e23502.detail.as_deref(),
        Some("Failing row contains (2, null, null).")
    );
    let e = s
        .simple_query("select * from t, t as u")
        .pop()
        .unwrap()
        .unwrap_err();
    assert!(e.message.contains("joins"), "{}", e.message);
    // The pgbench startup catalog query fails cleanly.
    let q = "select o.n, p.partstrat, pg_catalog.count(i.inhparent) from pg_catalog.pg_class as c join pg_catalog.pg_namespace as n on (n.oid = c.relnamespace) cross join lateral (select pg_catalog.array_position(pg_catalog.current_schemas(true), n.nspname)) as o(n) left join pg_catalog.pg_partitioned_table as p on (p.partrelid = c.oid) left join pg_catalog.pg_inherits as i on (c.oid = i.inhparent) where c.relname = 'pgbench_accounts' and o.n is not null group by 1, 2 order by 1 asc limit 1";
    let code = err(&mut s, q);
    assert!(
        code == SqlState::UNDEFINED_TABLE || code == SqlState::FEATURE_NOT_SUPPORTED,
        "{code}"
    );
    assert_eq!(s.txn_status(), TxnStatus::Idle);
}

#[test]
fn copy_streams_and_reports_errors() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table c (a int primary key, b text, d char(3), e boolean)",
    );
    let data =
        "1\thello\\tworld\tx\tt\n2\t\\N\t\\N\tf\n3\tback\\\\slash\\n\tyz\ton\r\n4\tlast\t\t\\N";
    // Byte-at-a-time delivery; the last line has no newline.
    assert!(matches!(
        ok(&mut s, "copy c (a, b, d, e) from stdin"),
        Output::CopyIn { columns: 4 }
    ));
    for b in data.as_bytes() {
        s.copy_data(std::slice::from_ref(b)).unwrap();
    }
    assert!(matches!(s.copy_done().unwrap(), Output::Command { tag } if tag == "COPY 4"));
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(
        rows(&mut s, "select a, b, d, e from c order by a"),
        vec![
            vec!["1", "hello\tworld", "x  ", "t"],
            vec!["2", "NULL", "NULL", "f"],
            vec!["3", "back\\slash\n", "yz ", "t"],
            vec!["4", "last", "   ", "NULL"],
        ]
    );

    // A bad line: 22P04 with the line number; the COPY (autocommit) is rolled back.
    ok(&mut s, "copy c from stdin");
    s.copy_data(b"10\ta\tb\tt\n11\tonly two\n")
        .map(|_| ())
        .and_then(|_| s.copy_done().map(|_| ()))
        .map_or_else(
            |e| {
                assert_eq!(e.sqlstate, SqlState::BAD_COPY_FILE_FORMAT);
                assert_eq!(e.message, "missing data for column \"d\"");
                assert_eq!(e.detail.as_deref(), Some("COPY c, line 2"));
            },
            |_| panic!("expected an error"),
        );
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(one(&mut s, "select count(*) from c"), "4");
    // Conversion errors keep their SQLSTATE and get the context.
    ok(&mut s, "copy c from stdin");
    let e1 = s.copy_data(b"x\ta\tb\tt\n").unwrap_err();
    assert_eq!(
        (e1.sqlstate, e1.detail.as_deref()),
        (
            SqlState::INVALID_TEXT_REPRESENTATION,
            Some("COPY c, line 1")
        )
    );
    assert_eq!(s.copy_data(b"ignored").map(|_| 1).unwrap(), 1);
    // Extra columns.
    ok(&mut s, "copy c from stdin");
    assert_eq!(
        s.copy_data(b"20\ta\tb\tt\textra\n").unwrap_err().sqlstate,
        SqlState::BAD_COPY_FILE_FORMAT
    );
    // In a block, a COPY stays in the block; CopyFail fails the block.
    ok(&mut s, "begin");
    ok(&mut s, "copy c from stdin");
    s.copy_data(b"30\ta\tb\tt\n").unwrap();
    s.copy_done().unwrap();
    assert_eq!(s.txn_status(), TxnStatus::InBlock);
    ok(&mut s, "copy c from stdin");
    let f = s.copy_fail("client gave up");
    assert_eq!(
        (f.sqlstate, f.message.as_str()),
        (
            SqlState::QUERY_CANCELED,
            "COPY from stdin failed: client gave up"
        )
    );
    assert_eq!(s.txn_status(), TxnStatus::Failed);
    ok(&mut s, "rollback");
    assert_eq!(one(&mut s, "select count(*) from c"), "4");
    // Cancel between rows.
    ok(&mut s, "copy c from stdin");
    s.cancel_flag().store(true, Ordering::Relaxed);
    assert_eq!(
        s.copy_data(b"40\ta\tb\tt\n").unwrap_err().sqlstate,
        SqlState::QUERY_CANCELED
    );
    assert!(!s.cancel_flag().load(Ordering::Relaxed));
    // The end marker stops the data.
    ok(&mut s, "copy c from stdin");
    s.copy_data(b"50\ta\tb\tt\n\\.\ngarbage\n").unwrap();
    assert!(matches!(s.copy_done().unwrap(), Output::Command { tag } if tag == "COPY 1"));
}

#[test]
fn char_padding_and_varchar_limits() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table p (k character(5) primary key, v varchar(3))",
    );
    ok(&mut s, "insert into p values ('ab', 'xyz')");
    assert_eq!(one(&mut s, "select k || '|' from p"), "ab   |");
    assert_eq!(one(&mut s, "select length(k) from p"), "2");
    assert_eq!(one(&mut s, "select v from p where k = 'ab'"), "xyz");
    assert_eq!(
        err(&mut s, "insert into p values ('cd', 'long')"),
        SqlState::STRING_DATA_RIGHT_TRUNCATION
    );
    assert_eq!(
        err(&mut s, "insert into p values ('toolong', 'a')"),
        SqlState::STRING_DATA_RIGHT_TRUNCATION
    );
    assert_eq!(
        err(&mut s, "insert into p values ('ab', 'a')"),
        SqlState::UNIQUE_VIOLATION
    );
}

#[test]
fn gucs_set_show_reset() {
    let e = MemEngine::new();
    let defaults = config(&[("shared_buffers", "3GB"), ("commit_siblings", "7")]);
    let opts = vec![
        ("user".to_string(), "bob".to_string()),
        ("database".into(), "db".into()),
        ("application_name".into(), "pgbench".into()),
        ("client_encoding".into(), "utf8".into()),
        ("synchronous_commit".into(), "off".into()),
    ];
    let mut s = Session::new(Arc::new(e.clone()), defaults, &opts).unwrap();
    let params = s.startup_parameters();
    let get = |n: &str| {
        params
            .iter()
            .find(|p| p.0 == n)
            .map(|p| p.1.clone())
            .unwrap()
    };
    assert_eq!(get("server_version"), "18.0 (walnut 0.1)");
    assert_eq!(get("application_name"), "pgbench");
    assert_eq!(get("client_encoding"), "UTF8");
    assert_eq!(get("DateStyle"), "ISO, MDY");
    assert_eq!(get("integer_datetimes"), "on");
    assert_eq!(one(&mut s, "show shared_buffers"), "3GB");
    assert_eq!(one(&mut s, "show commit_delay"), "0");
    assert_eq!(one(&mut s, "SHOW commit_siblings"), "7");
    assert_eq!(one(&mut s, "show synchronous_commit"), "off");
    match ok(&mut s, "show datestyle") {
        Output::Rows { columns, tag, .. } => {
            assert_eq!(
                (columns[0].name.as_str(), tag.as_str()),
                ("DateStyle", "SHOW")
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(tag(&mut s, "set commit_delay = 10"), "SET");
    assert_eq!(tag(&mut s, "set synchronous_commit to on"), "SET");
    ok(&mut s, "create table t (a int)");
    let o = e.last_commit_opts().unwrap();
    assert_eq!(
        (o.synchronous_commit, o.commit_delay_us, o.commit_siblings),
        (walnut_wal::SynchronousCommit::On, 10, 7)
    );
    assert_eq!(one(&mut s, "show statement_timeout"), "0");
    ok(&mut s, "set statement_timeout = '5s'");
    assert_eq!(one(&mut s, "show statement_timeout"), "5s");
    // SET LOCAL lasts to the end of the transaction; SET in a rolled-back block is undone.
    ok(&mut s, "begin");
    ok(&mut s, "set local commit_delay = 50");
    assert_eq!(one(&mut s, "show commit_delay"), "50");
    ok(&mut s, "commit");
    assert_eq!(one(&mut s, "show commit_delay"), "10");
    ok(&mut s, "begin");
    ok(&mut s, "set commit_delay = 70");
    ok(&mut s, "rollback");
    assert_eq!(one(&mut s, "show commit_delay"), "10");
    ok(&mut s, "set local commit_delay = 5");
    assert_eq!(
        s.take_notices()[0].message,
        "SET LOCAL can only be used in transaction blocks"
    );
    ok(&mut s, "reset commit_delay");
    assert_eq!(one(&mut s, "show commit_delay"), "0");
    ok(&mut s, "set application_name = 'x'");
    ok(&mut s, "reset all");
    assert_eq!(one(&mut s, "show application_name"), "pgbench");
    ok(&mut s, "set synchronous_commit = default");
    assert_eq!(one(&mut s, "show synchronous_commit"), "off");
    let all = rows(&mut s, "show all");
    assert!(all
        .iter()
        .any(|r| r[0] == "shared_buffers" && r[1] == "3GB"));
    assert!(all
        .iter()
        .any(|r| r[0] == "checkpoint_timeout" && r[1] == "5min"));
    assert!(all
        .iter()
        .any(|r| r[0] == "group_commit" && r[1] == "adaptive"));
    // Startup options that cannot be set per session.
    let bad = vec![("shared_buffers".to_string(), "1GB".to_string())];
    assert_eq!(
        Session::new(Arc::new(e.clone()), config(&[]), &bad)
            .err()
            .unwrap()
            .sqlstate,
        SqlState::CANT_CHANGE_RUNTIME_PARAM
    );
    let bad = vec![("bogus".to_string(), "1".to_string())];
    assert_eq!(
        Session::new(Arc::new(e.clone()), config(&[]), &bad)
            .err()
            .unwrap()
            .sqlstate,
        SqlState::UNDEFINED_OBJECT
    );
    // Extended protocol: SET/SHOW prepared.
    let p = s.prepare("show commit_siblings", &[]).unwrap();
    assert_eq!(p.columns.as_ref().unwrap()[0].name, "commit_siblings");
    assert!(matches!(
        s.execute(&p, vec![]).unwrap(),
        Output::Rows { .. }
    ));
}

#[test]
fn parameter_type_inference() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table t (a bigint primary key, b text, c timestamp, d double precision)",
    );
    let p = s
        .prepare("insert into t values ($1, $2, $3, $4)", &[])
        .unwrap();
    assert_eq!(
        p.param_types,
        vec![
            DataType::Int8,
            DataType::Text,
            DataType::Timestamp,
            DataType::Float8
        ]
    );
    let p = s
        .prepare("select a from t where b = $1 and a > $2 limit $3", &[])
        .unwrap();
    assert_eq!(
        p.param_types,
        vec![DataType::Text, DataType::Int8, DataType::Int8]
    );
    let p = s.prepare("select $1, $2 + 1", &[0, 20]).unwrap();
    assert_eq!(p.param_types, vec![DataType::Text, DataType::Int8]);
    let p = s
        .prepare("update t set d = d * $1 where a = $2", &[701, 0])
        .unwrap();
    assert_eq!(p.param_types, vec![DataType::Float8, DataType::Int8]);
    exec(
        &mut s,
        "insert into t values ($1, $2, $3, $4)",
        vec![
            Value::Int8(1),
            Value::Null,
            Value::Timestamp(0),
            Value::Float8(2.0),
        ],
    );
    exec(
        &mut s,
        "update t set d = d * $1 where a = $2",
        vec![Value::Float8(1.5), Value::Int8(1)],
    );
    assert_eq!(one(&mut s, "select d from t"), "3");
    assert_eq!(one(&mut s, "select c from t"), "2000-01-01 00:00:00");
    match exec(&mut s, "select a from t where a = $1", vec![Value::Null]) {
        Output::Rows { rows, .. } => assert!(rows.is_empty()),
        other => panic!("{other:?}"),
    }
    let p = s.prepare("select 1", &[]).unwrap();
    assert_eq!(
        s.execute(&p, vec![Value::Int4(1)]).unwrap_err().sqlstate,
        SqlState::PROTOCOL_VIOLATION
    );
    assert_eq!(
        s.prepare("select 1; select 2", &[]).unwrap_err().sqlstate,
        SqlState::SYNTAX_ERROR
    );
    let empty = s.prepare("", &[]).unwrap();
    assert!(matches!(s.execute(&empty, vec![]).unwrap(), Output::Empty));
}

/// Read committed: a writer that waited on a row lock re-checks the newest version.
#[test]
fn concurrent_updates_follow_the_newest_version() {
    let e = MemEngine::new();
    let mut s1 = session(&e);
    ok(&mut s1, "create table acc (id int primary key, bal int)");
    ok(&mut s1, "insert into acc values (1, 100), (2, 100)");
    ok(&mut s1, "begin");
    assert_eq!(
        tag(&mut s1, "update acc set bal = bal + 10 where id = 1"),
        "UPDATE 1"
    );
    assert_eq!(
        tag(&mut s1, "update acc set bal = 0 where id = 2"),
        "UPDATE 1"
    );
    let e2 = e.clone();
    let h = std::thread::spawn(move || {
        let mut s2 = session(&e2);
        let a = tag(&mut s2, "update acc set bal = bal + 1 where id = 1");
        // Row 2 no longer matches once s1 commits.
        let b = tag(&mut s2, "update acc set bal = bal + 1 where bal = 100");
        (a, b)
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    ok(&mut s1, "commit");
    let (a, b) = h.join().unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("UPDATE 1", "UPDATE 0"));
    assert_eq!(
        rows(&mut s1, "select bal from acc order by id"),
        vec![vec!["111"], vec!["0"]]
    );
}

#[test]
fn ddl_forms() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table if not exists k (a int, b int, c smallint, primary key (a, b))",
    );
    ok(&mut s, "create table if not exists k (a int)");
    assert_eq!(
        s.take_notices()[0].message,
        "relation \"k\" already exists, skipping"
    );
    ok(
        &mut s,
        "insert into k values (1, 1, 1), (1, 2, 2), (2, 1, 3), (2, 2, 4)",
    );
    assert_eq!(
        rows(&mut s, "select c from k where a = 2 and b >= 1 order by b"),
        vec![vec!["3"], vec!["4"]]
    );
    assert_eq!(
        rows(&mut s, "select c from k where a = 1 and b > 1"),
        vec![vec!["2"]]
    );
    assert_eq!(
        rows(&mut s, "select c from k where a = 1 and b < 2"),
        vec![vec!["1"]]
    );
    assert_eq!(one(&mut s, "select c from k where a = 2 and b = 2"), "4");
    assert_eq!(
        err(&mut s, "insert into k values (1, 1, 9)"),
        SqlState::UNIQUE_VIOLATION
    );
    assert_eq!(
        err(&mut s, "insert into k values (1, null, 9)"),
        SqlState::NOT_NULL_VIOLATION
    );
    ok(&mut s, "create table public.m (x int)");
    ok(&mut s, "insert into m values (1), (1)");
    assert_eq!(
        err(&mut s, "alter table m add primary key (x)"),
        SqlState::UNIQUE_VIOLATION
    );
    assert_eq!(tag(&mut s, "truncate m"), "TRUNCATE TABLE");
    assert_eq!(
        tag(&mut s, "drop table if exists m, nothere, k"),
        "DROP TABLE"
    );
    assert_eq!(s.take_notices().len(), 1);
    assert_eq!(err(&mut s, "select * from k"), SqlState::UNDEFINED_TABLE);
}

#[test]
fn key_predicates_use_the_index() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table a (aid int primary key, bid int, abalance int)",
    );
    ok(
        &mut s,
        "insert into a select x, 1, 0 from generate_series(1, 100) as x",
    );
    let count = |e: &MemEngine| e.scan_counts();
    let before = count(&e);
    let upd = s
        .prepare("UPDATE a SET abalance = abalance + $1 WHERE aid = $2", &[])
        .unwrap();
    let sel = s
        .prepare("SELECT abalance FROM a WHERE aid = $1", &[])
        .unwrap();
    s.execute(&upd, vec![Value::Int4(3), Value::Int4(42)])
        .unwrap();
    s.execute(&sel, vec![Value::Int4(42)]).unwrap();
    ok(&mut s, "select * from a where aid between 10 and 20");
    ok(&mut s, "delete from a where aid = 99");
    ok(&mut s, "select * from a where aid = 5 and bid = 1");
    let after = count(&e);
    assert_eq!((after.0 - before.0, after.1 - before.1), (0, 5));
    // Non-key predicates, and comparisons the index cannot serve, scan the table.
    ok(&mut s, "select * from a where bid = 1");
    ok(&mut s, "select * from a where aid = 5 or aid = 6");
    assert_eq!(one(&mut s, "select count(*) from a where aid = 5.5"), "0");
    assert_eq!(
        one(&mut s, "select count(*) from a where aid < 3000000000"),
        "99"
    );
    // (The last one range-scans with an open upper bound: 3e9 does not fit the int4 key.)
    assert_eq!(count(&e).0 - after.0, 3);
    assert_eq!(one(&mut s, "select abalance from a where aid = 42"), "3");
}

#[test]
fn plan_cache_is_bounded() {
    let e = MemEngine::new();
    let mut s = session(&e);
    let first = s.prepare("select 0", &[]).unwrap();
    for i in 1..3000 {
        s.prepare(&format!("select {i}"), &[]).unwrap();
    }
    let again = s.prepare("select 0", &[]).unwrap();
    assert!(!Arc::ptr_eq(&first, &again), "the oldest entry was evicted");
    let hot = s.prepare("select 2999", &[]).unwrap();
    assert!(Arc::ptr_eq(&hot, &s.prepare("select 2999", &[]).unwrap()));
}

#[test]
fn statement_timeout_cancels_long_statements() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(&mut s, "create table big (a int)");
    ok(&mut s, "set statement_timeout = 1");
    let out = s.simple_query("insert into big select x from generate_series(1, 100000000) as x");
    let err = out.last().unwrap().as_ref().unwrap_err();
    assert_eq!(
        (err.sqlstate, err.message.as_str()),
        (
            SqlState::QUERY_CANCELED,
            "canceling statement due to statement timeout"
        )
    );
    ok(&mut s, "set statement_timeout = 0");
    assert_eq!(one(&mut s, "select count(*) from big"), "0");
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// However the COPY stream is chunked, the same rows arrive.
        #[test]
        fn copy_chunking_is_irrelevant(cuts in proptest::collection::vec(0usize..400, 0..12),
                                       texts in proptest::collection::vec("[a-z\\t\\\\\n é]{0,6}", 1..8)) {
            let e = MemEngine::new();
            let mut s = session(&e);
            ok(&mut s, "create table c (a int primary key, b text)");
            let mut data = String::new();
            for (i, t) in texts.iter().enumerate() {
                let esc = t.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n");
                data.push_str(&format!("{i}\t{esc}\n"));
            }
            let bytes = data.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            ok(&mut s, "copy c from stdin");
            let mut at = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                s.copy_data(&bytes[at..c]).unwrap();
                at = c;
            }
            let done = matches!(s.copy_done().unwrap(), Output::Command { .. });
            prop_assert!(done);
            let got = rows(&mut s, "select b from c order by a");
            let want: Vec<Vec<String>> = texts.iter().map(|t| vec![t.clone()]).collect();
            prop_assert_eq!(got, want);
        }
    }
}

/// pgbench 18 asks `SELECT relkind FROM pg_catalog.pg_class WHERE oid=$1::pg_catalog.regclass`
/// before COPY ... FREEZE.
#[test]
fn regclass_and_pg_catalog() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table pgbench_accounts (aid int primary key, abalance int)",
    );
    ok(&mut s, "create table \"Mixed\" (x int)");
    ok(&mut s, "create table public.plain (x int)");

    // The pgbench 18 query, extended protocol, untyped parameter: inferred as text.
    let q = "SELECT relkind FROM pg_catalog.pg_class WHERE oid=$1::pg_catalog.regclass";
    let p = s.prepare(q, &[]).unwrap();
    assert_eq!(p.param_types, vec![DataType::Text]);
    for (name, kind) in [
        ("pgbench_accounts", "r"),
        ("pgbench_accounts_pkey", "i"),
        ("public.pgbench_accounts", "r"),
        ("PGBENCH_ACCOUNTS", "r"),
        ("\"Mixed\"", "r"),
    ] {
        match exec(&mut s, q, vec![Value::Text(name.into())]) {
            Output::Rows { rows, columns, .. } => {
                assert_eq!(columns[0].ty, DataType::Char(1));
                assert_eq!(rows, vec![vec![Value::Text(kind.into())]], "{name}");
            }
            other => panic!("{other:?}"),
        }
    }
    let p = s.prepare(q, &[]).unwrap();
    let e2 = s
        .execute(&p, vec![Value::Text("nosuch".into())])
        .unwrap_err();
    assert_eq!(e2.sqlstate, SqlState::UNDEFINED_TABLE);
    assert_eq!(e2.message, "relation \"nosuch\" does not exist");
    // NULL in, no rows out.
    match exec(&mut s, q, vec![Value::Null]) {
        Output::Rows { rows, .. } => assert!(rows.is_empty()),
        other => panic!("{other:?}"),
    }

    // Literals, CAST, unqualified pg_class, ::oid.
    assert_eq!(
        one(
            &mut s,
            "select relkind from pg_class where oid = 'pgbench_accounts'::regclass"
        ),
        "r"
    );
    assert_eq!(
        one(
            &mut s,
            "select relname from pg_catalog.pg_class where oid = cast('plain' as regclass)"
        ),
        "plain"
    );
    let oid = one(&mut s, "select 'pgbench_accounts'::regclass");
    assert_eq!(
        one(
            &mut s,
            &format!("select relname from pg_class where oid = {oid}::oid")
        ),
        "pgbench_accounts"
    );
    assert_eq!(
        one(
            &mut s,
            &format!("select {oid}::regclass = '{oid}'::regclass")
        ),
        "t"
    );
    assert_eq!(
        rows(&mut s, "select relname, relkind from pg_class order by oid"),
        vec![
            vec!["pgbench_accounts", "r"],
            vec!["pgbench_accounts_pkey", "i"],
            vec!["Mixed", "r"],
            vec!["plain", "r"],
        ]
    );
    assert_eq!(
        err(
            &mut s,
            "select relkind from pg_class where oid = 'nosuch'::regclass"
        ),
        SqlState::UNDEFINED_TABLE
    );
    assert_eq!(
        err(&mut s, "select 'pg_catalog.nosuch'::pg_catalog.regclass"),
        SqlState::UNDEFINED_TABLE
    );
    assert_eq!(
        err(&mut s, "select 'other.plain'::regclass"),
        SqlState::INVALID_SCHEMA_NAME
    );
    assert_eq!(
        err(&mut s, "select true::regclass"),
        SqlState::CANNOT_COERCE
    );

    // Schema qualification: public.* is tables only, pg_catalog.* views only.
    assert_eq!(
        one(&mut s, "select count(*) from public.pgbench_accounts"),
        "0"
    );
    assert_eq!(
        err(&mut s, "select * from public.pg_class"),
        SqlState::UNDEFINED_TABLE
    );
    assert_eq!(
        err(&mut s, "select * from pg_catalog.pgbench_accounts"),
        SqlState::UNDEFINED_TABLE
    );
    assert_eq!(
        err(&mut s, "select * from other.plain"),
        SqlState::UNDEFINED_TABLE
    );
    // A user table shadows a view of the same name only when unqualified.
    ok(&mut s, "create table pg_class (x int)");
    assert_eq!(
        rows(&mut s, "select * from pg_class"),
        Vec::<Vec<String>>::new()
    );
    assert_eq!(
        one(
            &mut s,
            "select relkind from pg_catalog.pg_class where relname = 'pgbench_accounts'"
        ),
        "r"
    );
}
