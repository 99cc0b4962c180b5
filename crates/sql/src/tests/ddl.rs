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
