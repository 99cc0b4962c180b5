//! The SQL front end (pre-parser, sqlparser, planner, executor) on arbitrary text, through a
//! session over the in-memory engine: every statement must end in a result or an error, never
//! a panic, and the session must stay usable afterwards.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use walnut_common::config::Config;
use walnut_sql::session::Session;
use walnut_sql::testing::MemEngine;

/// Every parameter at its default, without configuration files.
fn config() -> Arc<Config> {
    static C: OnceLock<Arc<Config>> = OnceLock::new();
    C.get_or_init(|| {
        Arc::new(Config::in_memory(walnut_sql::guc::registry(), &[]).expect("defaults"))
    })
    .clone()
}

fn engine() -> &'static MemEngine {
    static E: OnceLock<MemEngine> = OnceLock::new();
    E.get_or_init(|| {
        let e = MemEngine::new();
        let mut s = Session::new(Arc::new(e.clone()), config(), &[]).expect("session");
        for r in s.simple_query(
            "create table t (id int primary key, name text, score double precision, at timestamp);
             insert into t values (1, 'a', 1.5, '2024-01-01 00:00:00'), (2, null, -2, null);",
        ) {
            r.expect("setup");
        }
        e
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let mut s = Session::new(Arc::new(engine().clone()), config(), &[]).expect("session");
    let _ = s.simple_query(sql);
    let _ = s.prepare(sql, &[]);
    // Whatever happened, the session answers a plain query (after ending any transaction).
    let _ = s.simple_query("rollback");
    let out = s.simple_query("select 1");
    assert!(out.iter().all(|r| r.is_ok()), "session unusable after {sql:?}");
});
