//! Configuration parameters: startup options, SET, SHOW, RESET, SET LOCAL.

use super::*;

#[test]
fn gucs_set_show_reset() {
    let e = MemEngine::new();
    let defaults = config(&[("shared_buffers", "3GB"), ("commit_siblings", "7")]);
    let opts = vec![
        ("user".to_string(), "bob".to_string()),
        ("database".into(), "db".into()),
        ("application_name".into(), "pgbench".into()),
        ("client_encoding".into(), "utf8".into()),
        ("synchronous_commit".into(), "off".into()),
    ];
    let mut s = Session::new(Arc::new(e.clone()), defaults, &opts).unwrap();
    let params = s.startup_parameters();
    let get = |n: &str| {
        params
            .iter()
            .find(|p| p.0 == n)
            .map(|p| p.1.clone())
            .unwrap()
    };
    assert_eq!(get("server_version"), "18.0 (walnut 0.1)");
    assert_eq!(get("application_name"), "pgbench");
    assert_eq!(get("client_encoding"), "UTF8");
    assert_eq!(get("DateStyle"), "ISO, MDY");
    assert_eq!(get("integer_datetimes"), "on");
    assert_eq!(one(&mut s, "show shared_buffers"), "3GB");
    assert_eq!(one(&mut s, "show commit_delay"), "0");
    assert_eq!(one(&mut s, "SHOW commit_siblings"), "7");
    assert_eq!(one(&mut s, "show synchronous_commit"), "off");
    match ok(&mut s, "show datestyle") {
        Output::Rows { columns, tag, .. } => {
            assert_eq!(
                (columns[0].name.as_str(), tag.as_str()),
                ("DateStyle", "SHOW")
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(tag(&mut s, "set commit_delay = 10"), "SET");
    assert_eq!(tag(&mut s, "set synchronous_commit to on"), "SET");
    ok(&mut s, "create table t (a int)");
    let o = e.last_commit_opts().unwrap();
    assert_eq!(
        (o.synchronous_commit, o.commit_delay_us, o.commit_siblings),
        (walnut_wal::SynchronousCommit::On, 10, 7)
    );
    assert_eq!(one(&mut s, "show statement_timeout"), "0");
    ok(&mut s, "set statement_timeout = '5s'");
    assert_eq!(one(&mut s, "show statement_timeout"), "5s");
    // SET LOCAL lasts to the end of the transaction; SET in a rolled-back block is undone.
    ok(&mut s, "begin");
    ok(&mut s, "set local commit_delay = 50");
    assert_eq!(one(&mut s, "show commit_delay"), "50");
    ok(&mut s, "commit");
    assert_eq!(one(&mut s, "show commit_delay"), "10");
    ok(&mut s, "begin");
    ok(&mut s, "set commit_delay = 70");
    ok(&mut s, "rollback");
    assert_eq!(one(&mut s, "show commit_delay"), "10");
    ok(&mut s, "set local commit_delay = 5");
    assert_eq!(
        s.take_notices()[0].message,
        "SET LOCAL can only be used in transaction blocks"
    );
    ok(&mut s, "reset commit_delay");
    assert_eq!(one(&mut s, "show commit_delay"), "0");
    ok(&mut s, "set application_name = 'x'");
    ok(&mut s, "reset all");
    assert_eq!(one(&mut s, "show application_name"), "pgbench");
    ok(&mut s, "set synchronous_commit = default");
    assert_eq!(one(&mut s, "show synchronous_commit"), "off");
    let all = rows(&mut s, "show all");
    assert!(all
        .iter()
        .any(|r| r[0] == "shared_buffers" && r[1] == "3GB"));
    assert!(all
        .iter()
        .any(|r| r[0] == "checkpoint_timeout" && r[1] == "5min"));
    assert!(all
        .iter()
        .any(|r| r[0] == "group_commit" && r[1] == "adaptive"));
    // Startup options that cannot be set per session.
    let bad = vec![("shared_buffers".to_string(), "1GB".to_string())];
    assert_eq!(
        Session::new(Arc::new(e.clone()), config(&[]), &bad)
            .err()
            .unwrap()
            .sqlstate,
        SqlState::CANT_CHANGE_RUNTIME_PARAM
    );
    let bad = vec![("bogus".to_string(), "1".to_string())];
    assert_eq!(
        Session::new(Arc::new(e.clone()), config(&[]), &bad)
            .err()
            .unwrap()
            .sqlstate,
        SqlState::UNDEFINED_OBJECT
    );
    // Extended protocol: SET/SHOW prepared.
    let p = s.prepare("show commit_siblings", &[]).unwrap();
    assert_eq!(p.columns.as_ref().unwrap()[0].name, "commit_siblings");
    assert!(matches!(
        s.execute(&p, vec![]).unwrap(),
        Output::Rows { .. }
    ));
}
