//! End-to-end tests of standby mode against the built `walnut` binary: a standby made with
//! `walnut basebackup -R` streams and replays a primary's WAL under pgbench, serves
//! consistent read-only queries while it replays (in parallel, and alternately serial and
//! parallel: `recovery_workers = 3`, `recovery_parallel_backlog` 0 and 8 kB),
//! survives kill -9 at any moment of replay, and is promoted without losing an acknowledged
//! commit.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{stderr, tpcb_sums, wait_for, Server};

/// A standby of `p`: `walnut basebackup -R -C -S slot` into a new directory, started with
/// `settings`. The directory lives as long as the returned guard.
fn standby_of(p: &Server, slot: &str, settings: &[&str]) -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("standby");
    let out = Command::new(env!("CARGO_BIN_EXE_walnut"))
        .args(["basebackup", "-h", "127.0.0.1", "-p", &p.port.to_string()])
        .args(["-U", "postgres", "-R", "-C", "-S", slot, "-D"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "basebackup: {}", stderr(&out));
    assert!(dir.join("standby.signal").exists());
    let s = Server::on(dir, settings);
    (s, tmp)
}

/// Sets `synchronous_standby_names = '*'` on `p` and waits until its one standby is `sync`.
fn make_synchronous(p: &Server) {
    p.query("alter system set synchronous_standby_names = '*'");
    p.query("select pg_reload_conf()");
    wait_for("the standby to be synchronous", || {
        p.query("select sync_state from pg_stat_replication") == "sync"
    });
}

/// The primary's flush position, as text.
fn primary_lsn(p: &Server) -> String {
    p.query("select pg_current_wal_flush_lsn()")
}

/// Waits until the standby has replayed everything the primary had flushed when called.
fn wait_caught_up(p: &Server, s: &Server) {
    let target = primary_lsn(p);
    wait_for(&format!("the standby to replay up to {target}"), || {
        s.psql(&format!(
            "select pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '{target}') >= 0"
        ))
        .stdout
        .starts_with(b"t")
    });
}

/// Every table's rows in key order: equal on two servers if they hold the same data.
fn digest(s: &Server) -> Vec<String> {
    [
        "select * from pgbench_accounts order by aid",
        "select * from pgbench_branches order by bid",
        "select * from pgbench_tellers order by tid",
        "select tid, bid, aid, delta from pgbench_history order by tid, bid, aid, delta",
    ]
    .iter()
    .map(|q| s.query(q))
    .collect()
}

/// psql's error output for `sql` with `VERBOSITY verbose` (which shows the SQLSTATE).
fn verbose_error(s: &Server, sql: &str) -> String {
    let out = Command::new(support::pg_bin("psql"))
        .args(s.conn_args())
        .args([
            "-X",
            "-At",
            "-v",
            "VERBOSITY=verbose",
            "-d",
            "postgres",
            "-c",
            sql,
        ])
        .output()
        .unwrap();
    stderr(&out)
}

fn verify(dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_walnut"))
        .args(["verify", "-D"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "walnut verify {}: {}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

#[test]
fn a_standby_converges_under_pgbench_and_refuses_writes() {
    let mut p = Server::new(&[]);
    let out = p.pgbench(&["-i", "-s", "2", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (mut s, _tmp) = standby_of(&p, "s1", &[]);
    assert_eq!(s.query("select pg_is_in_recovery()"), "t");
    assert_eq!(p.query("select pg_is_in_recovery()"), "f");
    // Tables created after the backup reach the standby too.
    p.query("create table after_backup (k int primary key, v text)");
    let out = p.pgbench(&["-c", "8", "-j", "2", "-T", "8"]);
    assert!(out.status.success(), "{}", stderr(&out));
    p.query("insert into after_backup select 1, 'one'");
    // A sequence's records (logged ahead, outside any transaction) replay too.
    p.query("create table ser (id serial primary key, v int)");
    p.query("insert into ser (v) select 1 from generate_series(1, 40)");
    wait_caught_up(&p, &s);
    assert_eq!(s.query("select count(*), max(id) from ser"), "40|40");
    assert_eq!(digest(&p), digest(&s), "the standby's rows differ");
    let sums = tpcb_sums(&s);
    assert!(sums.windows(2).all(|w| w[0] == w[1]), "TPC-B sums {sums:?}");
    assert_eq!(tpcb_sums(&p), sums);
    assert_eq!(s.query("select v from after_backup where k = 1"), "one");
    // The primary sees its standby; the standby sees its walreceiver.
    assert_eq!(
        p.query("select application_name, state, sync_state from pg_stat_replication"),
        "walreceiver|streaming|async"
    );
    assert_eq!(
        s.query("select status, slot_name from pg_stat_wal_receiver"),
        "streaming|s1"
    );
    // Writes fail with 25006; WAL functions of a primary with 55000.
    for (sql, cmd) in [
        ("insert into after_backup values (2, 'two')", "INSERT"),
        // Refused even though it would change no row, as in PostgreSQL.
        (
            "update pgbench_branches set bbalance = 0 where bid < 0",
            "UPDATE",
        ),
        ("delete from pgbench_history", "DELETE"),
        ("create table nope (a int)", "CREATE TABLE"),
        ("select nextval('ser_id_seq')", "nextval()"),
        ("select setval('ser_id_seq', 1)", "setval()"),
    ] {
        let err = verbose_error(&s, sql);
        assert!(
            err.contains("25006")
                && err.contains(&format!("cannot execute {cmd} in a read-only transaction")),
            "{sql}: {err}"
        );
    }
    let err = verbose_error(&s, "select pg_current_wal_lsn()");
    assert!(
        err.contains("55000") && err.contains("recovery is in progress"),
        "{err}"
    );
    assert!(!s.query("select pg_last_xact_replay_timestamp()").is_empty());
    // With hot_standby = off it replays but takes no sessions.
    s.stop();
    s.start(&["hot_standby=off"]);
    let err = verbose_error(&s, "select 1");
    assert!(err.contains("Hot standby mode is disabled"), "{err}");
    // A clean stop of both leaves directories that verify clean.
    p.stop();
    s.stop();
    verify(&p.dir);
    verify(&s.dir);
}

/// The transfer workload: each transaction moves an amount between two accounts and logs
/// both halves, so at every snapshot sum(abalance) = 0, sum(delta) = 0 and the history has an
/// even number of rows. A torn transaction on the standby breaks one of them.
const TRANSFER: &str = "\\set a1 random(1, 100000 * :scale)
\\set a2 random(1, 100000 * :scale)
\\set d random(-5000, 5000)
\\set nd 0 - :d
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :d WHERE aid = :a1;
UPDATE pgbench_accounts SET abalance = abalance + :nd WHERE aid = :a2;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, :a1, :d, now());
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, :a2, :nd, now());
END;
";

/// pgbench running TRANSFER on `p` with 4 clients for `seconds` (its script written under `dir`).
fn transfers(p: &Server, dir: &Path, seconds: &str) -> std::process::Child {
    let script: PathBuf = dir.join("transfer.sql");
    std::fs::write(&script, TRANSFER).unwrap();
    Command::new(support::pg_bin("pgbench"))
        .args(p.conn_args())
        .args(["-n", "-c", "4", "-j", "2", "-T", seconds, "-f"])
        .arg(&script)
        .arg("postgres")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The reader: one check on the standby; `Err` describes a broken invariant. The accounts
/// are summed twice: by a heap scan, and by a range scan of the primary-key index (which
/// starts at each entry's newest version and walks back, so an entry replayed ahead of its
/// heap version would lose a row or fail).
fn check_consistent(s: &Server) -> Result<(), String> {
    for sql in [
        "select sum(abalance) from pgbench_accounts",
        "select sum(abalance) from pgbench_accounts where aid >= 1",
    ] {
        let out = s.psql(sql);
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("ERROR") {
            return Err(format!("{sql}: {err}"));
        }
        if !out.status.success() {
            return Ok(()); // the standby is down (killed) or starting
        }
        let a = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if a != "0" {
            return Err(format!("{sql}: {a}"));
        }
    }
    let out = s.psql("select coalesce(sum(delta), 0), count(*) from pgbench_history");
    if !out.status.success() {
        return Ok(());
    }
    let h = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut it = h.split('|');
    let (sum, n) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
    let n: i64 = n.parse().map_err(|_| format!("history: {h}"))?;
    if sum != "0" || n % 2 != 0 {
        return Err(format!("pgbench_history: sum(delta) = {sum}, {n} rows"));
    }
    Ok(())
}

/// The standby's replay in parallel on any machine (the default is one worker per core),
/// whenever there is WAL to replay (by default only while it is 16 MB behind): each time
/// replay catches up it goes serial, and the next record starts a parallel stretch again.
const PARALLEL: &[&str] = &["recovery_workers=3", "recovery_parallel_backlog=0"];
/// Parallel only 8 kB behind: stretches of serial and of parallel replay alternate.
const MIXED: &[&str] = &["recovery_workers=3", "recovery_parallel_backlog=8kB"];

#[test]
fn hot_standby_reads_are_consistent_under_replay_and_kill9_of_the_standby() {
    let p = Server::new(&[]);
    let out = p.pgbench(&["-i", "-s", "1", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (mut s, tmp) = standby_of(&p, "s1", PARALLEL);
    let load = transfers(&p, tmp.path(), "30");
    let mut checks = 0;
    let mut kills = 0;
    let mut rng = std::process::id() as u64;
    // A count of checks, not a time: a slow machine does fewer checks in the load's 30 s, and
    // those after the load ended check a standby catching up.
    while kills < 3 || checks <= 30 {
        check_consistent(&s).unwrap_or_else(|e| panic!("torn read on the standby: {e}"));
        checks += 1;
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Now and then: a checkpoint on the primary, a restartpoint on the standby, and a
        // kill -9 of the standby at a random moment of replay, then its restart.
        if checks % 10 == 0 && kills < 3 {
            p.query("checkpoint");
            if rng >> 63 == 1 {
                let _ = s.psql("checkpoint");
            }
            std::thread::sleep(Duration::from_millis((rng >> 40) % 500));
            s.kill9();
            kills += 1;
            s.start(if kills % 2 == 1 { MIXED } else { PARALLEL });
        }
    }
    let out = load.wait_with_output().unwrap();
    assert!(out.status.success(), "pgbench: {}", stderr(&out));
    wait_caught_up(&p, &s);
    check_consistent(&s).unwrap();
    assert_eq!(digest(&p), digest(&s), "the standby's rows differ");
    let restarts = s.log().matches("entering standby mode").count();
    assert_eq!(restarts, 4, "{}", s.log());
}

/// The primary prunes the versions its own queries no longer need, under pgbench; the standby
/// replays the prunes with `max_standby_streaming_delay = 0`, so a standby query whose snapshot
/// still needs what a prune removes is cancelled at once. Every standby read either returns
/// consistent balances or is cancelled ("conflict with recovery"); none reads a removed version
/// (XX001) or a torn state; `pg_stat_database_conflicts` counts at least the cancels seen; the
/// standby ends with the primary's rows.
#[test]
fn replayed_prunes_cancel_the_standby_queries_they_conflict_with_and_no_other_harm() {
    let p = Server::new(&[]);
    let out = p.pgbench(&["-i", "-s", "1", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut settings = PARALLEL.to_vec();
    settings.push("max_standby_streaming_delay=0");
    let (s, tmp) = standby_of(&p, "s1", &settings);
    let load = transfers(&p, tmp.path(), "15");
    let t0 = Instant::now();
    let (mut reads, mut cancelled) = (0, 0);
    while t0.elapsed() < Duration::from_secs(13) {
        match check_consistent(&s) {
            Ok(()) => reads += 1,
            Err(e) if e.contains("conflict with recovery") => cancelled += 1,
            Err(e) => panic!("a standby read under replayed prunes: {e}"),
        }
    }
    let out = load.wait_with_output().unwrap();
    assert!(out.status.success(), "pgbench: {}", stderr(&out));
    wait_caught_up(&p, &s);
    check_consistent(&s).unwrap();
    assert_eq!(digest(&p), digest(&s), "the standby's rows differ");
    let counted: i64 = s
        .query("select confl_snapshot from pg_stat_database_conflicts where datname = 'postgres'")
        .parse()
        .unwrap();
    assert!(
        counted >= cancelled,
        "{cancelled} reads cancelled, {counted} conflicts counted"
    );
    assert_eq!(
        p.query("select confl_snapshot from pg_stat_database_conflicts"),
        "0",
        "a primary has no recovery conflicts"
    );
    eprintln!("{reads} consistent reads, {cancelled} cancelled, {counted} conflicts counted");
}

/// The load of the test above on `p` for `seconds`, with VACUUM FREEZE on `p` over and over,
/// while `s`'s readers check their invariants: (reads, reads cancelled by a recovery
/// conflict). Any other failed read fails the test.
fn reads_under_freezes(p: &Server, s: &Server, dir: &Path, seconds: u64) -> (u32, u32) {
    let load = transfers(p, dir, &(seconds + 2).to_string());
    let done = AtomicBool::new(false);
    let counts = std::thread::scope(|scope| {
        let h = scope.spawn(|| {
            let (mut reads, mut cancelled) = (0, 0);
            while !done.load(Ordering::Acquire) {
                match check_consistent(s) {
                    Ok(()) => reads += 1,
                    Err(e) if e.contains("conflict with recovery") => cancelled += 1,
                    Err(e) => return Err(e),
                }
            }
            Ok((reads, cancelled))
        });
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(seconds) {
            p.query("vacuum freeze");
        }
        done.store(true, Ordering::Release);
        h.join().unwrap()
    });
    let out = load.wait_with_output().unwrap();
    assert!(out.status.success(), "pgbench: {}", stderr(&out));
    counts.unwrap_or_else(|e| panic!("a standby read: {e}\nstandby log:\n{}", s.log()))
}

/// `hot_standby_feedback`. The primary runs the load of the test above, VACUUM FREEZE (age 0)
/// without pause, and autovacuum at aggressive settings; the standby has
/// `max_standby_streaming_delay = 0`.
/// - Without feedback, the standby's readers are cancelled (the control).
/// - With it, the standby's walreceiver tells the primary the oldest position its queries need,
///   and the primary's prunes and freezes keep what they read: no read is cancelled and
///   `pg_stat_database_conflicts` counts nothing. `pg_stat_replication.backend_xmin` shows
///   the hold, which moves forward.
#[test]
fn hot_standby_feedback_keeps_what_standby_queries_read() {
    let mut p = Server::new(&[
        "autovacuum_naptime=1",
        "autovacuum_vacuum_threshold=50",
        "autovacuum_vacuum_scale_factor=0",
        "vacuum_freeze_min_age=0",
    ]);
    let out = p.pgbench(&["-i", "-s", "1", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut settings = PARALLEL.to_vec();
    settings.extend([
        "max_standby_streaming_delay=0",
        "wal_receiver_status_interval=1",
    ]);
    let (mut s, tmp) = standby_of(&p, "s1", &settings);
    let (_, cancelled) = reads_under_freezes(&p, &s, tmp.path(), 5);
    assert!(
        cancelled > 0,
        "without feedback no standby read was cancelled"
    );
    assert_eq!(p.query("select backend_xmin from pg_stat_replication"), "");

    s.stop();
    settings.push("hot_standby_feedback=on");
    s.start(&settings);
    let counted = || {
        s.query("select confl_snapshot from pg_stat_database_conflicts where datname = 'postgres'")
    };
    let before = counted();
    // Queries taken before the first feedback arrived are not covered by it.
    let xmin = || p.query("select backend_xmin from pg_stat_replication");
    wait_for("the primary to hold its horizon for the standby", || {
        !xmin().is_empty()
    });
    let first: i64 = xmin().parse().unwrap();
    let (reads, cancelled) = reads_under_freezes(&p, &s, tmp.path(), 10);
    assert_eq!(
        cancelled, 0,
        "standby reads cancelled despite hot_standby_feedback"
    );
    assert!(reads > 0);
    assert_eq!(
        counted(),
        before,
        "recovery conflicts despite hot_standby_feedback"
    );
    wait_for("the hold to move forward", || {
        xmin().parse::<i64>().is_ok_and(|x| x > first)
    });
    wait_caught_up(&p, &s);
    check_consistent(&s).unwrap();
    assert_eq!(digest(&p), digest(&s), "the standby's rows differ");
    eprintln!("{reads} standby reads with feedback, none cancelled");
    s.stop();
    wait_for("the hold to go with the standby", || {
        p.query("select count(*) from pg_stat_replication") == "0"
    });
    p.stop();
    verify(&p.dir);
    verify(&s.dir);
}

/// VACUUM on the primary while its clients move rows between paired keys (`k` and `k + 1000`:
/// always exactly one of the two exists, each key deleted and inserted again in turn), every
/// other one a database-wide VACUUM FREEZE followed by a checkpoint: a hot standby replays the
/// prunes, freezes, index deletes, cleared links and freed slots in parallel while
/// its readers scan the index from one key of a pair to the other (one statement, one
/// snapshot), and count the table by a heap scan, and every read finds one row per pair. At the end the two servers hold the same rows and both
/// data directories verify.
#[test]
fn replayed_vacuums_keep_every_standby_read_whole() {
    let mut p = Server::new(&[]);
    p.query("create table t (id int primary key, v int)");
    p.query("insert into t select g, g from generate_series(1, 1000) g");
    let (mut s, tmp) = standby_of(&p, "s1", PARALLEL);
    let churn = tmp.path().join("churn.sql");
    std::fs::write(
        &churn,
        "\\set k random(1, 250) + 250 * :client_id\n\
         begin;\n\
         select count(*) as here from t where id = :k \\gset\n\
         \\if :here = 1\n\
         delete from t where id = :k;\n\
         insert into t values (:k + 1000, :client_id);\n\
         \\else\n\
         delete from t where id = :k + 1000;\n\
         insert into t values (:k, :client_id);\n\
         \\endif\n\
         commit;\n",
    )
    .unwrap();
    let read = tmp.path().join("read.sql");
    std::fs::write(
        &read,
        "\\set r random(1, 1000)\n\
         select count(*) as n from t where id between :r and :r + 1000 and (id = :r or id = :r + 1000) \\gset\n\
         \\if :n != 1\n\
         select 1 / 0;\n\
         \\endif\n\
         select count(*) as n from t \\gset\n\
         \\if :n != 1000\n\
         select 2 / 0;\n\
         \\endif\n",
    )
    .unwrap();
    let bench = |server: &Server, script: &Path| {
        Command::new(support::pg_bin("pgbench"))
            .args(server.conn_args())
            .args(["-n", "-c", "4", "-j", "2", "-T", "10", "-f"])
            .arg(script)
            .arg("postgres")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let writers = bench(&p, &churn);
    let readers = bench(&s, &read);
    let t0 = Instant::now();
    let mut vacuums = 0;
    while t0.elapsed() < Duration::from_secs(10) {
        if vacuums % 2 == 0 {
            p.query("vacuum t");
        } else {
            p.query("vacuum freeze");
            p.query("checkpoint");
        }
        vacuums += 1;
    }
    for (what, child) in [("the writers", writers), ("the standby's readers", readers)] {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{what}' pgbench:\n{}\n{}\nstandby log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out),
            s.log()
        );
    }
    assert!(vacuums > 0);
    p.query("vacuum t");
    wait_caught_up(&p, &s);
    let rows = "select * from t order by id";
    assert_eq!(p.query(rows), s.query(rows), "the standby's rows differ");
    s.stop();
    p.stop();
    verify(&p.dir);
    verify(&s.dir);
}

/// `synchronous_commit = remote_apply` with one synchronous standby: a read on the standby
/// right after a commit returns sees it. Then failover: the primary is killed under load and
/// the standby promoted (`pg_promote()`); every commit that was acknowledged is there, and the
/// promoted server takes writes.
#[test]
fn remote_apply_reads_see_commits_and_failover_loses_no_acknowledged_commit() {
    let mut p = Server::new(&[]);
    p.query("create table acked (id int primary key, who int)");
    let (s, _tmp) = standby_of(&p, "s1", &[]);
    // Only now: with no standby, every commit would wait (as in PostgreSQL).
    make_synchronous(&p);
    for i in 1..=20 {
        p.query(&format!(
            "set synchronous_commit = remote_apply; insert into acked values ({i}, 0)"
        ));
        assert_eq!(
            s.query(&format!("select count(*) from acked where id = {i}")),
            "1",
            "remote_apply: commit {i} not visible on the standby right after it returned"
        );
    }
    // Failover under load: four writers, each recording what was acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (1..=4)
        .map(|w| {
            let (port, stop) = (p.port, stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut id = 1000 * w;
                while !stop.load(Ordering::Acquire) {
                    id += 1;
                    let out = Command::new(support::pg_bin("psql"))
                        .args(["-X", "-At", "-h", "127.0.0.1", "-p", &port.to_string()])
                        .args(["-U", "postgres", "-d", "postgres", "-c"])
                        .arg(format!("insert into acked values ({id}, {w})"))
                        .output()
                        .unwrap();
                    if out.status.success() && out.stdout.starts_with(b"INSERT") {
                        acked.push(id);
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    p.kill9();
    stop.store(true, Ordering::Release);
    let acked: Vec<i32> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(
        acked.len() > 10,
        "only {} commits acknowledged",
        acked.len()
    );
    assert_eq!(s.query("select pg_promote()"), "t");
    assert_eq!(s.query("select pg_is_in_recovery()"), "f");
    for id in &acked {
        assert_eq!(
            s.query(&format!("select count(*) from acked where id = {id}")),
            "1",
            "acknowledged commit {id} is missing after failover"
        );
    }
    s.query("insert into acked values (999999, 9)");
    assert_eq!(s.query("select who from acked where id = 999999"), "9");
    assert!(!s.dir.join("standby.signal").exists());
}

/// A stopped standby's slot keeps the WAL it needs while the primary writes more than
/// max_wal_size (including pgbench -i's DROP and CREATE of every table), and the standby
/// catches up from it; past max_slot_wal_keep_size the slot is invalidated and the standby
/// Replay headroom: a walnut standby reports its apply capacity, the primary's
/// `pg_stat_replication` shows it beside the incoming rate, and `max_standby_apply_lag`
/// holds commits once the synchronous standby could not replay what it has not within the
/// setting: with replay paused, the WAL ahead of the standby's replay position stays within
/// capacity × setting (plus the commit that crossed it), until replay resumes.
#[test]
fn max_standby_apply_lag_holds_commits_while_the_synchronous_standby_cannot_keep_up() {
    let p = Server::new(&[]);
    p.query("create table h (id int primary key, pad text)");
    let (s, _tmp) = standby_of(&p, "s1", &[]);
    make_synchronous(&p);
    let pad = "x".repeat(1000);
    let mut next = 0;
    let mut insert = |p: &Server, rows: usize| {
        let values: Vec<String> = (0..rows)
            .map(|_| {
                next += 1;
                format!("({next}, '{pad}')")
            })
            .collect();
        p.query(&format!("insert into h values {}", values.join(", ")));
    };
    // The standby measures its capacity while it replays, and reports it.
    wait_for("the standby to report its apply capacity", || {
        insert(&p, 20);
        p.query(
            "select apply_bytes_per_sec > 0 and apply_records_per_sec > 0 \
             and incoming_bytes_per_sec >= 0 and apply_catchup_time is not null \
             from pg_stat_replication",
        ) == "t"
    });
    s.query("select pg_wal_replay_pause()");
    wait_for("replay to pause", || {
        s.query("select pg_is_wal_replay_paused()") == "t"
    });
    // The primary holds commits by the replay position the standby last reported: measured
    // from there, once it is the paused one (the startup thread may finish a record after
    // the flag).
    wait_for("the primary to see where replay paused", || {
        let replayed = s.query("select pg_last_wal_replay_lsn()");
        std::thread::sleep(Duration::from_millis(200));
        replayed == s.query("select pg_last_wal_replay_lsn()")
            && p.query("select replay_lsn from pg_stat_replication") == replayed
    });
    p.query("alter system set max_standby_apply_lag = '5ms'");
    p.query("select pg_reload_conf()");
    // The WAL ahead of the standby as the primary sees it, and the allowance: capacity ×
    // 5 ms. A figure the standby folded at the pause may still arrive with the writer's
    // first flush, so the bound is the largest allowance seen.
    let ahead_and_allowance = || {
        let row = p.query(
            "select pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint, \
             apply_bytes_per_sec from pg_stat_replication",
        );
        let (a, cap) = row.split_once('|').unwrap();
        (
            a.parse::<i64>().unwrap(),
            cap.parse::<i64>().unwrap() * 5 / 1000,
        )
    };
    let mut allowance = ahead_and_allowance().1;
    // One commit's WAL: 20 rows of 1 kB. Enough rows to pass four times the allowance.
    let commit = 40_000;
    let rows_needed = (4 * allowance + 4 * commit) / 1000 * 2;
    // One session, one commit per statement.
    let mut script = String::new();
    let mut id = 1_000_000;
    for _ in 0..rows_needed / 20 + 1 {
        let values: Vec<String> = (0..20)
            .map(|_| {
                id += 1;
                format!("({id}, '{pad}')")
            })
            .collect();
        script += &format!("insert into h values {};\n", values.join(", "));
    }
    let script_file = _tmp.path().join("writer.sql");
    std::fs::write(&script_file, script).unwrap();
    let writer = {
        let args = p.conn_args();
        std::thread::spawn(move || {
            let out = Command::new(support::pg_bin("psql"))
                .args(&args)
                .args(["-X", "-q", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-f"])
                .arg(&script_file)
                .output()
                .unwrap();
            assert!(out.status.success(), "writer: {}", stderr(&out));
        })
    };
    wait_for("the writer to reach the allowance", || {
        let (a, now) = ahead_and_allowance();
        allowance = allowance.max(now);
        a > allowance
    });
    for _ in 0..20 {
        let (a, now) = ahead_and_allowance();
        allowance = allowance.max(now);
        assert!(
            a <= allowance + 2 * commit,
            "{a} bytes ahead of a paused standby allowed {allowance} bytes"
        );
        assert!(
            !writer.is_finished(),
            "every commit passed a paused standby"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s.query("select pg_wal_replay_resume()");
    wait_for("the held commits to return", || writer.is_finished());
    writer.join().unwrap();
    p.query("alter system set max_standby_apply_lag = 0");
    p.query("select pg_reload_conf()");
    wait_caught_up(&p, &s);
    let rows = "select count(*), sum(id), sum(length(pad)) from h";
    assert_eq!(p.query(rows), s.query(rows), "the standby's rows differ");
}

#[test]
fn a_stopped_standby_catches_up_from_its_slot_until_the_slot_is_lost() {
    let settings = [
        "max_wal_size=32MB",
        "min_wal_size=32MB",
        "checkpoint_timeout=1h",
    ];
    let p = Server::new(&settings);
    let out = p.pgbench(&["-i", "-s", "1", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (mut s, _tmp) = standby_of(&p, "s1", &[]);
    wait_caught_up(&p, &s);
    s.stop();
    // Over twice max_wal_size of WAL (pgbench's rows compress well in page images), with
    // checkpoints that would recycle it.
    let out = p.pgbench(&["-i", "-s", "40", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    p.query("checkpoint");
    p.query("checkpoint");
    let (status, behind) = {
        let r = p.query(
            "select wal_status, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) from pg_replication_slots where slot_name = 's1'",
        );
        let (a, b) = r.split_once('|').unwrap();
        (a.to_string(), b.parse::<i64>().unwrap())
    };
    assert!(
        behind > 64 << 20 && status != "lost",
        "the slot is {behind} bytes behind, {status}"
    );
    s.start(&[]);
    wait_caught_up(&p, &s);
    assert_eq!(digest(&p), digest(&s), "the standby's rows differ");

    // Now with a bound the slot passes while the standby is away.
    p.query("alter system set max_slot_wal_keep_size = '32MB'");
    p.query("select pg_reload_conf()");
    s.stop();
    let out = p.pgbench(&["-i", "-s", "40", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // A checkpoint invalidates it once its WAL is past the bound at the checkpoint's start.
    wait_for("the slot to be invalidated", || {
        p.query("checkpoint");
        p.query("select wal_status from pg_replication_slots where slot_name = 's1'") == "lost"
    });
    s.start(&[]);
    wait_for("the standby to report its lost slot", || {
        let log = s.log();
        log.contains("can no longer get changes from replication slot \"s1\"")
            && log.contains("a new base backup")
    });
    // It stays up, read-only, at what it had.
    assert_eq!(s.query("select pg_is_in_recovery()"), "t");
}

/// Makes the (stopped) server in `dir` stream from `primary` when it starts as a standby.
fn stream_from(dir: &Path, primary: &Server) {
    std::fs::write(
        dir.join("walnut.auto.conf"),
        format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres'\n",
            primary.port
        ),
    )
    .unwrap();
}

/// The replication connection's IDENTIFY_SYSTEM timeline of `s` (a primary: a standby refuses
/// replication connections).
fn timeline_of(s: &Server) -> String {
    let out = s.psql_with("IDENTIFY_SYSTEM", "user=postgres replication=database", &[]);
    String::from_utf8_lossy(&out.stdout)
        .split('|')
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// The WAL segment files in `data_dir`/wal as (timeline, segment number), by segment.
fn wal_segments(data_dir: &std::path::Path) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = std::fs::read_dir(data_dir.join("wal"))
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            let hex = |r: std::ops::Range<usize>| u64::from_str_radix(n.get(r)?, 16).ok();
            (n.len() == 24).then_some(())?;
            Some((hex(0..8)? as u32, hex(8..16)? * 256 + hex(16..24)?))
        })
        .collect();
    v.sort_by_key(|&(tli, segno)| (segno, tli));
    v
}

/// Segment files from `switch_segno` on carry timeline `tli`, earlier ones a lower one.
fn assert_segments_named(data_dir: &std::path::Path, switch_segno: u64, tli: u32) {
    let segs = wal_segments(data_dir);
    assert!(segs.iter().any(|&(_, s)| s >= switch_segno), "{segs:?}");
    for &(t, s) in &segs {
        assert!(
            if s >= switch_segno { t == tli } else { t < tli },
            "{}: segment {s:X} is named for timeline {t}; the switch to {tli} is in segment {switch_segno:X}: {segs:?}",
            data_dir.display()
        );
    }
}

/// Promotion starts timeline 2 with a history file. A second standby that had not gone past
/// the switch point follows the promoted one onto it; the old primary, whose WAL went further
/// than the promoted standby's, is refused with PostgreSQL's "forked off" error instead of
/// splicing two histories.
#[test]
fn promotion_starts_a_timeline_that_a_standby_follows_and_a_diverged_primary_cannot() {
    let mut p = Server::new(&[]);
    p.query("create table t (k int primary key, at text)");
    let (mut s1, _t1) = standby_of(&p, "s1", &[]);
    let (mut s2, _t2) = standby_of(&p, "s2", &[]);
    p.query("insert into t values (1, 'both')");
    wait_caught_up(&p, &s1);
    wait_caught_up(&p, &s2);
    // s1 stops: what the primary writes now, only s2 and the primary have.
    s1.stop();
    p.query("insert into t values (2, 'old primary and s2')");
    wait_caught_up(&p, &s2);
    // s2 stops too, and the primary writes once more: only the primary has it.
    s2.stop();
    p.query("insert into t values (3, 'old primary only')");
    p.kill9();

    // Promote s2, the furthest: timeline 2, forking off timeline 1 at its WAL end.
    s2.start(&[]);
    assert_eq!(s2.query("select pg_promote()"), "t");
    assert_eq!(timeline_of(&s2), "2");
    let history = std::fs::read_to_string(s2.dir.join("wal/00000002.history")).unwrap();
    assert!(history.starts_with("1\t"), "{history}");
    // The switch point's segment and later ones are named for timeline 2, as PostgreSQL names
    // them; earlier ones keep timeline 1.
    let switch = history.split('\t').nth(1).unwrap();
    let (hi, lo) = switch.split_once('/').unwrap();
    let switch = u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap();
    let switch_segno = switch / (16 << 20);
    assert_segments_named(&s2.dir, switch_segno, 2);
    s2.query("insert into t values (4, 'timeline 2')");
    // A base backup of the promoted server carries its history.
    let copy = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_walnut"))
        .args(["basebackup", "-h", "127.0.0.1", "-p", &s2.port.to_string()])
        .args(["-U", "postgres", "-D"])
        .arg(copy.path().join("c"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(copy.path().join("c/wal/00000002.history")).unwrap(),
        history
    );
    assert_segments_named(&copy.path().join("c"), switch_segno, 2);
    let label = std::fs::read_to_string(copy.path().join("c/backup_label")).unwrap();
    assert!(label.contains("START TIMELINE: 2\n"), "{label}");

    // s1 (behind the switch point) follows s2 onto timeline 2.
    stream_from(&s1.dir, &s2);
    s1.start(&[]);
    wait_caught_up(&s2, &s1);
    assert_eq!(s1.query("select count(*) from t"), "3");
    assert_eq!(s1.query("select at from t where k = 4"), "timeline 2");
    assert!(
        s1.log().contains("following the primary's timeline 2"),
        "{}",
        s1.log()
    );
    // s1's copy of the switch segment took timeline 2's name when it followed (walnut streams
    // a follower everything on the new timeline: segments between its start and the switch
    // are named for timeline 2 too, where PostgreSQL's would keep timeline 1's name).
    let segs = wal_segments(&s1.dir);
    assert!(
        segs.iter()
            .filter(|&&(_, s)| s >= switch_segno)
            .all(|&(t, _)| t == 2)
            && segs.iter().any(|&(_, s)| s >= switch_segno),
        "{segs:?}"
    );

    // The old primary, made a standby of s2, went past the switch point: refused.
    std::fs::write(p.dir.join("standby.signal"), b"").unwrap();
    stream_from(&p.dir, &s2);
    p.start(&[]);
    wait_for("the old primary to refuse the new timeline", || {
        p.log()
            .contains("new timeline 2 forked off current database system timeline 1")
    });
    assert_eq!(p.query("select count(*) from t"), "3");
    assert_eq!(p.query("select count(*) from t where k = 4"), "0");
}
