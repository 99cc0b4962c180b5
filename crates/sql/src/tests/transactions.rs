//! Transaction blocks and their states, read committed under concurrent updates, statement
//! timeouts.

use super::*;

#[test]
fn transaction_states() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(&mut s, "create table t (a int primary key)");
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    ok(&mut s, "begin");
    assert_eq!(s.txn_status(), TxnStatus::InBlock);
    ok(&mut s, "begin");
    let w = s.take_notices();
    assert_eq!(
        (w[0].severity, w[0].sqlstate),
        ("WARNING", SqlState::ACTIVE_SQL_TRANSACTION)
    );
    ok(&mut s, "insert into t values (1)");
    assert_eq!(
        err(&mut s, "insert into t values (1)"),
        SqlState::UNIQUE_VIOLATION
    );
    assert_eq!(s.txn_status(), TxnStatus::Failed);
    assert_eq!(err(&mut s, "select 1"), SqlState::IN_FAILED_SQL_TRANSACTION);
    assert_eq!(err(&mut s, "show jit"), SqlState::IN_FAILED_SQL_TRANSACTION);
    assert!(s.prepare("select 2", &[]).is_err());
    assert_eq!(tag(&mut s, "commit"), "ROLLBACK");
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(one(&mut s, "select count(*) from t"), "0");
    assert_eq!(tag(&mut s, "commit"), "COMMIT");
    assert_eq!(
        s.take_notices()[0].sqlstate,
        SqlState::NO_ACTIVE_SQL_TRANSACTION
    );
    assert_eq!(tag(&mut s, "rollback"), "ROLLBACK");

    // Multi-statement strings are one implicit transaction.
    let out = s.simple_query("insert into t values (1); insert into t values (2); select 1/0");
    assert_eq!(out.len(), 3);
    assert_eq!(
        out[2].as_ref().unwrap_err().sqlstate,
        SqlState::DIVISION_BY_ZERO
    );
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(one(&mut s, "select count(*) from t"), "0");
    let out = s.simple_query("insert into t values (1); insert into t values (2)");
    assert!(out.iter().all(|r| r.is_ok()));
    assert_eq!(one(&mut s, "select count(*) from t"), "2");
    // BEGIN inside a multi-statement string opens a real block.
    let out = s.simple_query("begin; insert into t values (3)");
    assert!(out.iter().all(|r| r.is_ok()));
    assert_eq!(s.txn_status(), TxnStatus::InBlock);
    ok(&mut s, "rollback");
    assert_eq!(one(&mut s, "select count(*) from t"), "2");
    // START TRANSACTION / ABORT, and errors in autocommit leave the session idle.
    ok(&mut s, "start transaction isolation level read committed");
    ok(&mut s, "insert into t values (4)");
    ok(&mut s, "abort");
    assert_eq!(
        err(&mut s, "insert into t values (1)"),
        SqlState::UNIQUE_VIOLATION
    );
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    // An isolation level walnut does not have is refused, not run at READ COMMITTED.
    for sql in [
        "start transaction isolation level serializable, read write",
        "begin transaction read only, isolation level serializable",
        "set transaction isolation level serializable",
        "set default_transaction_isolation = serializable",
    ] {
        assert_eq!(err(&mut s, sql), SqlState::FEATURE_NOT_SUPPORTED, "{sql}");
        assert_eq!(s.txn_status(), TxnStatus::Idle, "{sql}");
    }
    ok(&mut s, "begin isolation level repeatable read");
    assert_eq!(one(&mut s, "show transaction_isolation"), "repeatable read");
    ok(&mut s, "rollback");
    assert_eq!(one(&mut s, "show transaction_isolation"), "read committed");
    ok(&mut s, "begin isolation level read uncommitted");
    ok(&mut s, "set transaction isolation level read committed");
    ok(&mut s, "commit");
    assert_eq!(tag(&mut s, "vacuum"), "VACUUM");
    ok(&mut s, "begin");
    assert_eq!(err(&mut s, "vacuum t"), SqlState::ACTIVE_SQL_TRANSACTION);
    ok(&mut s, "rollback");
    // terminate rolls back.
    ok(&mut s, "begin");
    ok(&mut s, "insert into t values (5)");
    s.terminate();
    assert_eq!(s.txn_status(), TxnStatus::Idle);
    assert_eq!(one(&mut s, "select count(*) from t"), "2");
    assert!(matches!(
        s.simple_query("  ;  ").pop().unwrap().unwrap(),
        Output::Empty
    ));
    assert!(matches!(
        s.simple_query("-- nothing").pop().unwrap().unwrap(),
        Output::Empty
    ));
}

/// Read committed: a writer that waited on a row lock re-checks the newest version.
#[test]
fn concurrent_updates_follow_the_newest_version() {
    let e = MemEngine::new();
    let mut s1 = session(&e);
    ok(&mut s1, "create table acc (id int primary key, bal int)");
    ok(&mut s1, "insert into acc values (1, 100), (2, 100)");
    ok(&mut s1, "begin");
    assert_eq!(
        tag(&mut s1, "update acc set bal = bal + 10 where id = 1"),
        "UPDATE 1"
    );
    assert_eq!(
        tag(&mut s1, "update acc set bal = 0 where id = 2"),
        "UPDATE 1"
    );
    let e2 = e.clone();
    let h = std::thread::spawn(move || {
        let mut s2 = session(&e2);
        let a = tag(&mut s2, "update acc set bal = bal + 1 where id = 1");
        // Row 2 no longer matches once s1 commits.
        let b = tag(&mut s2, "update acc set bal = bal + 1 where bal = 100");
        (a, b)
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    ok(&mut s1, "commit");
    let (a, b) = h.join().unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("UPDATE 1", "UPDATE 0"));
    assert_eq!(
        rows(&mut s1, "select bal from acc order by id"),
        vec![vec!["111"], vec!["0"]]
    );
}

#[test]
fn statement_timeout_cancels_long_statements() {
    let e = MemEngine::new();
    let mut s = session(&e);
    ok(&mut s, "create table big (a int)");
    ok(&mut s, "set statement_timeout = 1");
    let out = s.simple_query("insert into big select x from generate_series(1, 100000000) as x");
    let err = out.last().unwrap().as_ref().unwrap_err();
    assert_eq!(
        (err.sqlstate, err.message.as_str()),
        (
            SqlState::QUERY_CANCELED,
            "canceling statement due to statement timeout"
        )
    );
    ok(&mut s, "set statement_timeout = 0");
    assert_eq!(one(&mut s, "select count(*) from big"), "0");
}
