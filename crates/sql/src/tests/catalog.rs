//! System views, `pg_catalog`, `regclass` and schema qualification.

use super::*;

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
                default: None,
                identity: None,
            },
            ColumnDef {
                name: "wal_bytes".into(),
                ty: DataType::Int8,
                not_null: true,
                default: None,
                identity: None,
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
