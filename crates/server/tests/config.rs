//! End-to-end tests of the configuration: what `SHOW` and `pg_settings` report, `ALTER
//! SYSTEM`, `pg_reload_conf()` and SIGHUP, through the built `walnut` binary and `psql`.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::{stderr, Server};

/// `pg_settings` columns for one parameter: setting|unit|context|vartype|source|sourcefile
/// (file name only)|pending_restart.
fn pg_settings(s: &Server, name: &str) -> String {
    s.query(&format!(
        "select setting, coalesce(unit, ''), context, vartype, source, \
         coalesce(sourcefile, ''), pending_restart from pg_settings where name = '{name}'"
    ))
    .replace(&format!("{}/", s.dir.display()), "")
}

/// psql's error for `sql`, or a panic if it succeeded.
fn error(s: &Server, sql: &str) -> String {
    let out = s.psql(sql);
    let e = stderr(&out);
    assert!(e.contains("ERROR"), "{sql:?} should fail: {e}");
    e
}

#[test]
fn show_and_pg_settings_report_the_values_in_effect() {
    let s = Server::new(&["shared_buffers=64MB", "commit_siblings=7"]);
    // The start-up probe's choice is what SHOW reports, with source "default".
    let chosen = s.query("select wal_sync_method from walnut_stat_group_commit");
    assert_eq!(s.query("show wal_sync_method"), chosen);
    let row = pg_settings(&s, "wal_sync_method");
    assert_eq!(row, format!("{chosen}||postmaster|enum|default||f"));
    // Command-line values, in base units for pg_settings and the largest unit for SHOW.
    assert_eq!(s.query("show shared_buffers"), "64MB");
    assert_eq!(
        pg_settings(&s, "shared_buffers"),
        "8192|8kB|postmaster|integer|command line||f"
    );
    assert_eq!(
        pg_settings(&s, "commit_siblings"),
        "7||user|integer|command line||f"
    );
    // Server parameters are there too.
    assert_eq!(s.query("show port"), s.port.to_string());
    assert_eq!(
        s.query("select count(*) > 30 from pg_settings"),
        "t",
        "every parameter has a row"
    );
    // SET in the session shows as source "session".
    assert_eq!(
        s.query("set commit_delay = 10; select setting, source from pg_settings where name = 'commit_delay'"),
        "SET\n10|session"
    );
    // What walnut cannot do is refused, what nothing reads does not exist.
    assert!(error(&s, "set fsync = off").contains("cannot be changed now"));
    assert!(error(&s, "alter system set fsync = off").contains("not supported"));
    assert!(error(&s, "set work_mem = '64MB'").contains("unrecognized configuration parameter"));
    assert!(error(&s, "set transaction_isolation = 'serializable'")
        .contains("serializable snapshot isolation"));
}

#[test]
fn alter_system_and_pg_reload_conf_change_sighup_parameters() {
    let s = Server::new(&[]);
    assert_eq!(s.query("show checkpoint_timeout"), "5min");
    assert_eq!(
        s.query("alter system set checkpoint_timeout = '10min'"),
        "ALTER SYSTEM"
    );
    // Written, not applied until a reload.
    assert_eq!(s.query("show checkpoint_timeout"), "5min");
    let auto = std::fs::read_to_string(s.dir.join("walnut.auto.conf")).unwrap();
    assert!(
        auto.contains("checkpoint_timeout = '10min'"),
        "walnut.auto.conf:\n{auto}"
    );
    assert_eq!(s.query("select pg_reload_conf()"), "t");
    assert_eq!(s.query("show checkpoint_timeout"), "10min");
    assert_eq!(
        pg_settings(&s, "checkpoint_timeout"),
        "600|s|sighup|integer|configuration file|walnut.auto.conf|f"
    );
    assert!(
        s.log()
            .contains("parameter \"checkpoint_timeout\" changed to \"10min\""),
        "{}",
        s.log()
    );
    // A postmaster parameter is written, and pending a restart after the reload.
    s.query("alter system set shared_buffers = '64MB'");
    s.query("select pg_reload_conf()");
    assert_eq!(s.query("show shared_buffers"), "128MB");
    assert!(pg_settings(&s, "shared_buffers").ends_with("|t"));
    // A user parameter's new default reaches sessions that did not SET it.
    s.query("alter system set commit_siblings = 9");
    s.query("select pg_reload_conf()");
    assert_eq!(s.query("show commit_siblings"), "9");
    assert_eq!(
        s.query("set commit_siblings = 3; select pg_reload_conf(); show commit_siblings"),
        "SET\nt\n3",
        "a SET wins over a reloaded default"
    );
    // Bad input is refused and changes nothing.
    assert!(
        error(&s, "alter system set checkpoint_timeout = '1s'").contains("outside the valid range")
    );
    assert!(error(&s, "alter system set no_such_thing = 1").contains("unrecognized"));
    assert!(error(&s, "begin; alter system set wal_recycle = off").contains("transaction block"));
    // RESET removes the line; the next reload returns to the default.
    s.query("alter system reset checkpoint_timeout");
    s.query("select pg_reload_conf()");
    assert_eq!(s.query("show checkpoint_timeout"), "5min");
}

#[test]
fn sighup_reloads_the_configuration_files() {
    let s = Server::new(&[]);
    let conf = s.dir.join("walnut.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("wal_writer_delay = 50ms\n");
    std::fs::write(&conf, text).unwrap();
    let pid = s.child.as_ref().unwrap().id();
    let st = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let t0 = Instant::now();
    while s.query("show wal_writer_delay") != "50ms" {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "SIGHUP did not reload:\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(s.log().contains("received SIGHUP"), "{}", s.log());
}
