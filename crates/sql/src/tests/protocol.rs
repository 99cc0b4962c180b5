//! The extended protocol: prepared statements, parameter type inference, the plan cache.

use super::*;

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
