//! The SQLSTATE and message of each kind of error.

use super::*;

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
            "create table u (a int) with (autovacuum_enabled = maybe)",
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
