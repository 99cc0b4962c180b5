//! Tests of the SQL layer through [`Session`], over the in-memory model engine.
//!
//! This file holds what the tests share: a session over a [`MemEngine`] and the helpers that run
//! a statement and check its outcome (`ok`, `err`, `tag`, `rows`, `one`, `exec`). The tests are
//! in submodules by topic.

use crate::session::{Output, Session, TxnStatus};
use crate::testing::MemEngine;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use walnut_common::config::Config;
use walnut_common::{ColumnDef, DataType, SqlState, Value};

mod catalog;
mod copy;
mod ddl;
mod errors;
mod gucs;
mod pgbench;
mod progress;
mod protocol;
mod queries;
mod transactions;

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
