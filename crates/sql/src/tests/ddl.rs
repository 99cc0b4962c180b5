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
