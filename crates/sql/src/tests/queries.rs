//! SELECT and DML: expressions, aggregates, ordering and limits, and which predicates use the
//! primary-key index.

use super::*;

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
fn pg_lsn_values_compare_subtract_and_report_the_wal() {
    let e = MemEngine::new();
    let mut s = session(&e);
    assert_eq!(
        one(&mut s, "select pg_wal_lsn_diff('1/0', '0/10')"),
        "4294967280"
    );
    assert_eq!(one(&mut s, "select '1/0'::pg_lsn - '0/10'"), "4294967280");
    assert_eq!(one(&mut s, "select '0/10'::pg_lsn - '1/0'"), "-4294967280");
    assert_eq!(one(&mut s, "select '0/10'::pg_lsn < '1/0'::pg_lsn"), "t");
    assert_eq!(one(&mut s, "select '0/A'::pg_lsn"), "0/A");
    assert_eq!(
        err(&mut s, "select 'FFFFFFFF/FFFFFFFF'::pg_lsn - '0/0'"),
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE
    );
    assert_eq!(
        err(&mut s, "select 'x/1'::pg_lsn"),
        SqlState::INVALID_TEXT_REPRESENTATION
    );
    // The model engine has no WAL.
    assert_eq!(
        err(&mut s, "select pg_current_wal_lsn()"),
        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
    );
    // A primary is not in recovery: PostgreSQL's answers there.
    assert_eq!(one(&mut s, "select pg_is_in_recovery()"), "f");
    assert_eq!(
        rows(&mut s, "select pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn(), pg_last_xact_replay_timestamp()"),
        vec![vec!["NULL", "NULL", "NULL"]]
    );
    assert_eq!(
        err(&mut s, "select pg_wal_replay_pause()"),
        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
    );
}

#[test]
fn returning_gives_the_rows_written() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(&mut s, "create table r (id int primary key, v text, n int)");

    // INSERT: the new rows, with expressions, aliases and `*`; the tag stays INSERT's.
    assert_eq!(
        rows(
            &mut s,
            "insert into r values (1, 'a', 10), (2, 'b', NULL) returning id, v || '!' as loud, n * 2"
        ),
        vec![vec!["1", "a!", "20"], vec!["2", "b!", "NULL"]]
    );
    assert_eq!(
        tag(&mut s, "insert into r (id, v) values (3, 'c') returning *"),
        "INSERT 0 1"
    );
    assert_eq!(
        rows(
            &mut s,
            "insert into r as x (id) values (4) returning x.id, x.v"
        ),
        vec![vec!["4", "NULL"]]
    );

    // UPDATE: the new version of each row written.
    assert_eq!(
        rows(
            &mut s,
            "update r set n = coalesce(n, 0) + 1 where id in (1, 2) returning id, n"
        ),
        vec![vec!["1", "11"], vec!["2", "1"]]
    );
    assert_eq!(
        tag(&mut s, "update r set v = 'z' where id = 3 returning r.v"),
        "UPDATE 1"
    );
    // Nothing matched: no rows, and the columns all the same.
    match ok(&mut s, "update r set n = 0 where id = 99 returning id") {
        Output::Rows { columns, rows, tag } => {
            assert_eq!(columns.len(), 1);
            assert!(rows.is_empty());
            assert_eq!(tag, "UPDATE 0");
        }
        other => panic!("unexpected {other:?}"),
    }

    // DELETE: each row as it was.
    assert_eq!(
        rows(&mut s, "delete from r where id >= 3 returning *"),
        vec![vec!["3", "z", "NULL"], vec!["4", "NULL", "NULL"]]
    );
    assert_eq!(one(&mut s, "select count(*) from r"), "2");

    // INSERT ... SELECT returns what it loaded.
    assert_eq!(
        rows(
            &mut s,
            "insert into r select id + 10, v, n from r returning id"
        ),
        vec![vec!["11"], vec!["12"]]
    );

    // Prepared: Describe gives the list's columns, and parameters bind in it.
    let p = s
        .prepare("insert into r values ($1, $2, 7) returning id, n + $1", &[])
        .expect("prepare");
    let cols = p.columns.as_ref().expect("RETURNING describes rows");
    assert_eq!(cols[0].name, "id");
    assert_eq!(cols[0].ty, DataType::Int4);
    assert_eq!(cols[1].ty, DataType::Int4);
    match s.execute(&p, vec![Value::Int4(20), Value::Text("t".into())]) {
        Ok(Output::Rows { rows, tag, .. }) => {
            assert_eq!(rows, vec![vec![Value::Int4(20), Value::Int4(27)]]);
            assert_eq!(tag, "INSERT 0 1");
        }
        other => panic!("unexpected {other:?}"),
    }

    // Errors: an aggregate (42803), an unknown column (42703); nothing is written.
    assert_eq!(
        err(
            &mut s,
            "insert into r values (30, 'x', 1) returning count(*)"
        ),
        SqlState::GROUPING_ERROR
    );
    assert_eq!(
        err(&mut s, "delete from r returning nope"),
        SqlState::UNDEFINED_COLUMN
    );
    assert_eq!(
        err(&mut s, "delete from r returning nosuch.*"),
        SqlState::UNDEFINED_TABLE
    );
    assert_eq!(
        rows(&mut s, "update r set n = 1 where id = 1 returning r.*"),
        vec![vec!["1", "a", "1"]]
    );
    assert_eq!(one(&mut s, "select count(*) from r"), "5");
}
