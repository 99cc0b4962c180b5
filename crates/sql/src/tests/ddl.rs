//! DDL forms (IF [NOT] EXISTS, composite keys, ALTER TABLE, TRUNCATE, DROP) and what column
//! types enforce (char padding, varchar limits).

use super::*;

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

/// Column defaults where the differential script cannot reach: COPY with a column list, a
/// prepared INSERT run twice (the bound defaults live in the cached plan), a default the
/// catalog keeps as text and binds again (a string with a quote and a colon), and the errors
/// CREATE TABLE gives, with nothing created.
#[test]
fn column_defaults() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table d (id int primary key, n int default 40 + 2, t text default 'it''s: ok', \
         ts timestamp default now())",
    );
    ok(&mut s, "copy d (id) from stdin");
    s.copy_data(b"1\n2\n").unwrap();
    s.copy_done().unwrap();
    ok(&mut s, "copy d (t, id) from stdin");
    s.copy_data(b"given\t3\n").unwrap();
    s.copy_done().unwrap();
    for id in [4, 5] {
        exec(
            &mut s,
            "insert into d (id) values ($1)",
            vec![Value::Int4(id)],
        );
    }
    assert_eq!(
        rows(&mut s, "select id, n, t, ts is not null from d order by id"),
        vec![
            vec!["1", "42", "it's: ok", "t"],
            vec!["2", "42", "it's: ok", "t"],
            vec!["3", "42", "given", "t"],
            vec!["4", "42", "it's: ok", "t"],
            vec!["5", "42", "it's: ok", "t"],
        ]
    );
    for (sql, state) in [
        (
            "create table bad (a int, b int default a)",
            SqlState::FEATURE_NOT_SUPPORTED,
        ),
        (
            "create table bad (a int default sum(1))",
            SqlState::GROUPING_ERROR,
        ),
        (
            "create table bad (a int default 'x'::text)",
            SqlState::DATATYPE_MISMATCH,
        ),
    ] {
        assert_eq!(err(&mut s, sql), state, "{sql}");
    }
    assert_eq!(err(&mut s, "select * from bad"), SqlState::UNDEFINED_TABLE);
}

/// CHECK constraints beyond the differential script: the names chosen for unnamed ones (and
/// the name order they are checked in), COPY and a prepared UPDATE, and the messages.
#[test]
fn check_constraints() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(
        &mut s,
        "create table c (id int primary key, a int check (a > 0) check (a < 10), \
         b int, check (b <> a), constraint aaa check (b < 100), check (b > -5))",
    );
    // The names chosen, each seen in the error of a row only it rejects; a row several reject
    // reports the first in name order.
    for (row, name, detail) in [
        ("1, 0, null", "c_a_check", "(1, 0, null)"),
        ("1, 10, null", "c_a_check1", "(1, 10, null)"),
        ("1, 5, 5", "c_check", "(1, 5, 5)"),
        ("1, 5, -6", "c_b_check", "(1, 5, -6)"),
        ("1, 5, 200", "aaa", "(1, 5, 200)"),
        ("1, 0, 200", "aaa", "(1, 0, 200)"),
    ] {
        let e1 = s
            .simple_query(&format!("insert into c values ({row})"))
            .pop()
            .unwrap()
            .unwrap_err();
        assert_eq!(e1.sqlstate, SqlState::CHECK_VIOLATION, "{row}");
        assert_eq!(
            e1.message,
            format!("new row for relation \"c\" violates check constraint \"{name}\""),
            "{row}"
        );
        assert_eq!(
            e1.detail,
            Some(format!("Failing row contains {detail}.")),
            "{row}"
        );
    }
    ok(&mut s, "insert into c values (1, 5, null)");
    ok(&mut s, "copy c from stdin");
    assert_eq!(
        s.copy_data(b"2\t3\t3\n").unwrap_err().sqlstate,
        SqlState::CHECK_VIOLATION
    );
    ok(&mut s, "copy c from stdin");
    s.copy_data(b"2\t3\t4\n").unwrap();
    s.copy_done().unwrap();
    let p = s.prepare("update c set b = $1 where id = $2", &[]).unwrap();
    for (b, state) in [(5, None), (-9, Some(SqlState::CHECK_VIOLATION))] {
        let r = s.execute(&p, vec![Value::Int4(b), Value::Int4(2)]);
        assert_eq!(r.err().map(|e| e.sqlstate), state, "b = {b}");
    }
    assert_eq!(
        rows(&mut s, "select id, a, b from c order by id"),
        vec![vec!["1", "5", "NULL"], vec!["2", "3", "5"]]
    );
    // Unnamed constraints are named in the order written, a column's and the table's
    // interleaved, as PostgreSQL 18 names them (`pg_constraint` there: p_check is a < b,
    // p_check1 a + b < 100, p_check2 c > a).
    ok(
        &mut s,
        "create table p (a int, b int, check (a < b), check (a + b < 100), c int check (c > a))",
    );
    for (row, name) in [
        ("5, 2, 6", "p_check"),
        ("50, 60, 70", "p_check1"),
        ("1, 2, 0", "p_check2"),
    ] {
        let e1 = s
            .simple_query(&format!("insert into p values ({row})"))
            .pop()
            .unwrap()
            .unwrap_err();
        assert_eq!(
            e1.message,
            format!("new row for relation \"p\" violates check constraint \"{name}\""),
            "{row}"
        );
    }
    let e1 = s
        .simple_query(
            "create table q (a int constraint x check (a > 0), constraint x check (a > 1))",
        )
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(e1.sqlstate, SqlState::DUPLICATE_OBJECT);
    assert_eq!(e1.message, "check constraint \"x\" already exists");
}
