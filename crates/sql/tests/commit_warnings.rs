//! Work after a durable commit that fails is a warning, never an error: the session reports the
//! commit's success and sends each warning as a WARNING notice, as PostgreSQL does.

use std::sync::Arc;
use walnut_common::config::Config;
use walnut_common::{Error, SqlState};
use walnut_sql::session::{Output, Session, TxnStatus};
use walnut_sql::testing::MemEngine;

fn session(e: &MemEngine) -> Session {
    let config = Config::in_memory(walnut_sql::guc::registry(), &[]).unwrap();
    Session::new(Arc::new(e.clone()), Arc::new(config), &[]).unwrap()
}

fn warning() -> Error {
    Error::io(
        "could not remove file \"base/16390\"",
        std::io::Error::from_raw_os_error(5),
    )
}

#[test]
fn a_warning_of_an_autocommit_reaches_the_client_with_the_success() {
    let e = MemEngine::new();
    let mut s = session(&e);
    assert!(s.simple_query("create table t (a int)")[0].is_ok());
    e.warn_at_next_commit(warning());
    let out = s.simple_query("drop table t");
    assert!(
        matches!(&out[..], [Ok(Output::Command { tag })] if tag == "DROP TABLE"),
        "{out:?}"
    );
    let notices = s.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].severity, "WARNING");
    assert_eq!(notices[0].sqlstate, SqlState::IO_ERROR);
    assert!(notices[0].message.contains("could not remove file"));
    assert_eq!(s.txn_status(), TxnStatus::Idle);
}

#[test]
fn a_warning_of_an_explicit_commit_reaches_the_client_with_the_success() {
    let e = MemEngine::new();
    let mut s = session(&e);
    for sql in ["create table t (a int)", "begin", "drop table t"] {
        assert!(s.simple_query(sql)[0].is_ok(), "{sql}");
    }
    e.warn_at_next_commit(warning());
    let out = s.simple_query("commit");
    assert!(
        matches!(&out[..], [Ok(Output::Command { tag })] if tag == "COMMIT"),
        "{out:?}"
    );
    let notices = s.take_notices();
    assert_eq!(
        notices.iter().map(|n| n.severity).collect::<Vec<_>>(),
        ["WARNING"]
    );
    // The session goes on as after any commit.
    assert!(s.simple_query("select 1")[0].is_ok());
    assert_eq!(s.txn_status(), TxnStatus::Idle);
}

#[test]
fn client_min_messages_error_hides_the_warning() {
    let e = MemEngine::new();
    let mut s = session(&e);
    assert!(s.simple_query("set client_min_messages = error")[0].is_ok());
    assert!(s.simple_query("create table t (a int)")[0].is_ok());
    e.warn_at_next_commit(warning());
    assert!(s.simple_query("drop table t")[0].is_ok());
    assert!(s.take_notices().is_empty());
}
