//! End-to-end tests of replication connections against the built `walnut` binary: PostgreSQL
//! 18's `pg_receivewal` streams walnut's WAL byte for byte, psql runs the walsender's commands,
//! and bad input gets a clear error while the server stays up.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{pg_bin, stderr, tpcb_sums, wait_for, Server};

/// The directory of PostgreSQL 18's client programs: `PG18_BINDIR`, else what
/// `../shared/bench/postgres18.sh bin` installs, else the `PATH`'s if they are version 18 or
/// later (an older `pg_receivewal` refuses a server that says it is 18).
fn pg18_bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("PG18_BINDIR") {
        return PathBuf::from(dir);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/postgres18.sh");
    if script.exists() {
        let out = Command::new("bash")
            .arg(&script)
            .arg("bin")
            .output()
            .unwrap();
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && Path::new(&dir).join("pg_receivewal").exists() {
            return PathBuf::from(dir);
        }
    }
    let in_path = pg_bin("pg_receivewal");
    let v = Command::new(&in_path).arg("--version").output().unwrap();
    let v = String::from_utf8_lossy(&v.stdout).to_string();
    let major: u32 = v
        .split_whitespace()
        .nth(2)
        .and_then(|x| x.split('.').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 18,
        "PostgreSQL 18's pg_receivewal is needed ({v:?} found): set PG18_BINDIR or run \
         ../shared/bench/postgres18.sh install"
    );
    in_path.parent().unwrap().to_path_buf()
}

/// psql on a replication connection (`replication=true` or `database`): (stdout, stderr).
fn psql_repl(s: &Server, replication: &str, sql: &str) -> (String, String) {
    let out = s.psql_with(
        sql,
        &format!("user=postgres replication={replication}"),
        &[],
    );
    (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        stderr(&out),
    )
}

fn segment_name(segno: u64) -> String {
    format!("{:08X}{:08X}{:08X}", 1, segno >> 8, segno & 0xff)
}

fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s.trim().split_once('/').expect("an LSN");
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

#[test]
fn pg_receivewal_writes_the_primarys_wal_byte_for_byte() {
    let s = Server::new(&["checkpoint_timeout=1h", "max_wal_size=10GB"]);
    let (row, err) = psql_repl(&s, "database", "IDENTIFY_SYSTEM");
    let f: Vec<&str> = row.split('|').collect();
    assert_eq!(f.len(), 4, "{row} {err}");
    assert!(f[0].parse::<u64>().unwrap() > 0, "systemid {row}");
    assert_eq!((f[1], f[3]), ("1", "postgres"), "{row}");
    parse_lsn(f[2]);
    let (row, _) = psql_repl(&s, "true", "IDENTIFY_SYSTEM");
    assert!(
        row.ends_with('|'),
        "a physical walsender has no dbname: {row}"
    );
    let (row, _) = psql_repl(&s, "true", "SHOW wal_segment_size");
    assert_eq!(row, "16MB");

    let recv = tempfile::tempdir().unwrap();
    let mut receiver = Command::new(pg18_bindir().join("pg_receivewal"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &s.port.to_string(),
            "-U",
            "postgres",
        ])
        .args(["--status-interval=1", "-D"])
        .arg(recv.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Three segments or more of WAL: a load, then updates.
    let out = s.pgbench(&["-i", "-s", "20", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Updates until there are three full segments, however slow the machine is today.
    let mut flush = 0;
    for _ in 0..20 {
        let out = s.pgbench(&["-c", "4", "-T", "3", "-M", "prepared"]);
        assert!(out.status.success(), "{}", stderr(&out));
        flush = parse_lsn(&s.query("select pg_current_wal_flush_lsn()"));
        if flush / (16 << 20) >= 3 {
            break;
        }
    }
    let last_full = flush / (16 << 20);
    assert!(last_full >= 3, "only {flush:X} bytes of WAL");

    // While it streams, pg_stat_replication shows it.
    let t0 = Instant::now();
    loop {
        let row = s.query(
            "select application_name, state, sent_lsn >= pg_current_wal_flush_lsn(), \
             write_lsn is not null and reply_time is not null from pg_stat_replication",
        );
        if row == "pg_receivewal|streaming|t|t" {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "pg_stat_replication: {row}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every segment before the flush position's is complete on the receiver's side.
    let t0 = Instant::now();
    while !recv.path().join(segment_name(last_full - 1)).exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "segments did not arrive"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill")
        .arg("-INT")
        .arg(receiver.id().to_string())
        .status();
    let status = receiver.wait().unwrap();
    let mut log = String::new();
    receiver
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "pg_receivewal: {status}\n{log}");

    // pg_receivewal starts at the segment holding the position IDENTIFY_SYSTEM gave: 0.
    let mut compared = 0;
    for segno in 0..last_full {
        let name = segment_name(segno);
        let got = std::fs::read(recv.path().join(&name))
            .unwrap_or_else(|e| panic!("{name} not received: {e}\n{log}"));
        let want = std::fs::read(s.dir.join("wal").join(&name)).unwrap();
        assert!(got == want, "segment {name} differs from the primary's");
        compared += 1;
    }
    assert!(compared >= 3);
    assert_eq!(s.query("select count(*) from pg_stat_replication"), "0");
}

/// A connection speaking the protocol by hand: what psql cannot send.
struct Raw(TcpStream);

impl Raw {
    fn connect(port: u16, params: &[(&str, &str)]) -> Raw {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut body = 196_608u32.to_be_bytes().to_vec();
        for (k, v) in params {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut msg = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        msg.extend_from_slice(&body);
        c.write_all(&msg).unwrap();
        Raw(c)
    }

    fn send(&mut self, tag: u8, body: &[u8]) {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        self.0.write_all(&m).unwrap();
    }

    fn query(&mut self, sql: &str) {
        let mut b = sql.as_bytes().to_vec();
        b.push(0);
        self.send(b'Q', &b);
    }

    /// The next message (tag, body), or `None` at EOF.
    fn recv(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut h = [0u8; 5];
        self.0.read_exact(&mut h).ok()?;
        let len = u32::from_be_bytes(h[1..5].try_into().unwrap()) as usize - 4;
        let mut b = vec![0u8; len];
        self.0.read_exact(&mut b).ok()?;
        Some((h[0], b))
    }

    /// Messages up to one with tag `until` (included), or EOF.
    fn until(&mut self, until: u8) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(m) = self.recv() {
            let done = m.0 == until;
            v.push(m);
            if done {
                break;
            }
        }
        v
    }
}

/// The SQLSTATE and message of an ErrorResponse body.
fn error_fields(body: &[u8]) -> (String, String, String) {
    let (mut sev, mut code, mut msg) = (String::new(), String::new(), String::new());
    for f in body.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let v = String::from_utf8_lossy(&f[1..]).to_string();
        match f[0] {
            b'V' => sev = v,
            b'C' => code = v,
            b'M' => msg = v,
            _ => {}
        }
    }
    (sev, code, msg)
}

fn first_error(msgs: &[(u8, Vec<u8>)]) -> (String, String, String) {
    let e = msgs.iter().find(|(t, _)| *t == b'E').unwrap_or_else(|| {
        panic!(
            "no ErrorResponse in {:?}",
            msgs.iter().map(|m| m.0 as char).collect::<String>()
        )
    });
    error_fields(&e.1)
}

#[test]
fn replication_connections_refuse_bad_input_clearly_and_the_primary_stays_up() {
    let mut s = Server::new(&["max_wal_senders=2", "checkpoint_timeout=1h"]);

    // SQL on a physical walsender; a future start point; a replication command's syntax.
    let (_, err) = psql_repl(&s, "true", "select 1");
    assert!(
        err.contains("cannot execute SQL commands in WAL sender for physical replication"),
        "{err}"
    );
    let (_, err) = psql_repl(&s, "true", "START_REPLICATION 7/0");
    assert!(
        err.contains("is ahead of the WAL flush position of this server"),
        "{err}"
    );
    let (_, err) = psql_repl(&s, "true", "START_REPLICATION SLOT nosuch 0/0");
    assert!(
        err.contains("replication slot \"nosuch\" does not exist"),
        "{err}"
    );
    let (_, err) = psql_repl(&s, "true", "START_REPLICATION 0/0 TIMELINE 2");
    assert!(err.contains("not in this server's history"), "{err}");
    let (_, err) = psql_repl(&s, "true", "START_REPLICATION now");
    assert!(err.contains("syntax error"), "{err}");
    let (_, err) = psql_repl(&s, "true", "TIMELINE_HISTORY 1");
    assert!(err.contains("00000001.history"), "{err}");
    // SQL still runs on a database walsender.
    let (out, err) = psql_repl(&s, "database", "select 40 + 2");
    assert_eq!(out, "42", "{err}");
    let out = s.psql_with("select 1", "user=postgres replication=sometimes", &[]);
    assert!(
        stderr(&out).contains("invalid value for parameter \"replication\""),
        "{}",
        stderr(&out)
    );

    // The extended protocol on a replication connection: 08P01, the connection goes on.
    let mut r = Raw::connect(s.port, &[("user", "postgres"), ("replication", "true")]);
    r.until(b'Z');
    r.send(b'P', b"\0select 1\0\0\0");
    r.send(b'S', b"");
    let msgs = r.until(b'Z');
    assert_eq!(first_error(&msgs).1, "08P01");

    // A malformed standby status update: FATAL 08P01, that connection closes.
    r.query("START_REPLICATION 0/0");
    let msgs = r.until(b'W');
    assert_eq!(msgs.last().map(|m| m.0), Some(b'W'), "CopyBothResponse");
    let mut d = vec![b'r'];
    d.extend_from_slice(&[0u8; 10]);
    r.send(b'd', &d);
    let mut rest = Vec::new();
    while let Some(m) = r.recv() {
        rest.push(m);
    }
    let (sev, code, msg) = first_error(&rest);
    assert_eq!((sev.as_str(), code.as_str()), ("FATAL", "08P01"), "{msg}");
    assert!(msg.contains("standby status update"), "{msg}");
    // Gone once its client has seen the connection close (the next check counts on it).
    let out = s.psql("select count(*) from pg_stat_replication");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0",
        "{}",
        stderr(&out)
    );

    // max_wal_senders: a third walsender is refused with 53300 while two are connected.
    let mut a = Raw::connect(s.port, &[("user", "postgres"), ("replication", "true")]);
    a.until(b'Z');
    let mut b = Raw::connect(s.port, &[("user", "postgres"), ("replication", "true")]);
    b.until(b'Z');
    let mut c = Raw::connect(s.port, &[("user", "postgres"), ("replication", "true")]);
    let (sev, code, msg) = first_error(&c.until(b'Z'));
    assert_eq!((sev.as_str(), code.as_str()), ("FATAL", "53300"), "{msg}");
    assert!(msg.contains("max_wal_senders (currently 2)"), "{msg}");
    // A walsender streaming, then ended by its client's CopyDone, takes commands again.
    a.query("START_REPLICATION 0/0");
    a.until(b'W');
    a.send(b'c', b"");
    let msgs = a.until(b'Z');
    let tags: String = msgs.iter().map(|m| m.0 as char).collect();
    assert!(tags.ends_with("cCZ"), "after CopyDone: {tags}");
    a.query("IDENTIFY_SYSTEM");
    let msgs = a.until(b'Z');
    assert!(
        msgs.iter().any(|m| m.0 == b'D'),
        "IDENTIFY_SYSTEM after streaming"
    );
    drop((a, b, c));

    // WAL whose segment was recycled: "requested WAL segment ... has already been removed".
    let out = s.pgbench(&["-i", "-s", "20", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    s.query("checkpoint");
    s.query("checkpoint");
    assert!(!s.dir.join("wal").join(segment_name(0)).exists());
    let (_, err) = psql_repl(&s, "true", "START_REPLICATION 0/100");
    assert!(
        err.contains("requested WAL segment 000000010000000000000000 has already been removed"),
        "{err}"
    );

    // pg_hba.conf without replication lines refuses walsenders, naming what was asked.
    s.stop();
    std::fs::write(
        s.dir.join("pg_hba.conf"),
        "host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n",
    )
    .unwrap();
    s.start(&[]);
    let (_, err) = psql_repl(&s, "true", "IDENTIFY_SYSTEM");
    assert!(
        err.contains("no pg_hba.conf entry for replication connection from host \"127.0.0.1\""),
        "{err}"
    );
    // Through all of it the server stayed up.
    assert_eq!(s.query("select 1"), "1");
}

/// Starts PostgreSQL 18's `pg_receivewal` into `dir` on slot `slot`, with `--no-loop`: an
/// error ends it instead of a retry every 5 s.
fn receivewal(s: &Server, dir: &Path, slot: &str) -> std::process::Child {
    Command::new(pg18_bindir().join("pg_receivewal"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &s.port.to_string(),
            "-U",
            "postgres",
        ])
        .args(["--no-loop", "--status-interval=1", "-S", slot, "-D"])
        .arg(dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// SIGINT, then its exit status and what it printed.
fn stop_receiver(mut r: std::process::Child) -> (std::process::ExitStatus, String) {
    let _ = Command::new("kill")
        .arg("-INT")
        .arg(r.id().to_string())
        .status();
    let status = r.wait().unwrap();
    let mut log = String::new();
    r.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    (status, log)
}

#[test]
fn a_slot_keeps_wal_for_a_stopped_receiver_until_max_slot_wal_keep_size() {
    let mut s = Server::new(&["checkpoint_timeout=1h"]);
    let (row, err) = psql_repl(
        &s,
        "database",
        "CREATE_REPLICATION_SLOT s1 PHYSICAL RESERVE_WAL",
    );
    assert_eq!(row, "s1|||", "{err}");
    let (_, err) = psql_repl(&s, "true", "CREATE_REPLICATION_SLOT s1 PHYSICAL");
    assert!(
        err.contains("replication slot \"s1\" already exists"),
        "{err}"
    );
    let (_, err) = psql_repl(&s, "true", "CREATE_REPLICATION_SLOT Bad PHYSICAL");
    assert!(err.contains("contains invalid character"), "{err}");
    let (row, _) = psql_repl(&s, "true", "READ_REPLICATION_SLOT s1");
    let f: Vec<&str> = row.split('|').collect();
    assert_eq!((f[0], f[2]), ("physical", "1"), "{row}");
    let reserved = parse_lsn(f[1]);
    let (row, _) = psql_repl(&s, "true", "READ_REPLICATION_SLOT nosuch");
    assert_eq!(row, "||");

    // Stream on the slot: its position follows what the receiver flushed.
    let recv = tempfile::tempdir().unwrap();
    let r = receivewal(&s, recv.path(), "s1");
    let out = s.pgbench(&["-i", "-s", "10", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for("the slot to be active and to advance", || {
        s.query(&format!(
            "select active and restart_lsn > '{}' from pg_replication_slots where slot_name = 's1'",
            f[1]
        )) == "t"
    });
    let (status, log) = stop_receiver(r);
    assert!(status.success(), "{log}");
    let kept =
        parse_lsn(&s.query("select restart_lsn from pg_replication_slots where slot_name = 's1'"));
    assert!(kept > reserved);

    // With the receiver gone, checkpoints keep the slot's WAL, also across a restart.
    let out = s.pgbench(&["-i", "-s", "20", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    s.query("checkpoint");
    s.query("checkpoint");
    s.stop();
    s.start(&["checkpoint_timeout=1h"]);
    s.query("checkpoint");
    let kept_after =
        parse_lsn(&s.query("select restart_lsn from pg_replication_slots where slot_name = 's1'"));
    assert!(
        kept_after >= reserved && kept_after <= kept,
        "{kept_after:X}"
    );
    let first_kept = kept_after / (16 << 20);
    assert!(
        s.dir.join("wal").join(segment_name(first_kept)).exists(),
        "the slot's segment was recycled"
    );
    assert_eq!(
        s.query("select wal_status, active from pg_replication_slots"),
        "reserved|f"
    );

    // The receiver resumes on its slot with nothing missing, and catches up.
    let r = receivewal(&s, recv.path(), "s1");
    let flush = parse_lsn(&s.query("select pg_current_wal_flush_lsn()"));
    let last_full = flush / (16 << 20);
    wait_for("the receiver to catch up", || {
        recv.path().join(segment_name(last_full - 1)).exists()
    });
    let (status, log) = stop_receiver(r);
    assert!(status.success(), "{log}");
    assert!(!log.contains("removed"), "{log}");
    let mut compared = 0;
    for segno in first_kept..last_full {
        let name = segment_name(segno);
        let got = std::fs::read(recv.path().join(&name)).unwrap();
        let want = std::fs::read(s.dir.join("wal").join(&name)).unwrap();
        assert!(got == want, "segment {name} differs");
        compared += 1;
    }
    assert!(compared >= 2, "{compared} segments compared");

    // Past max_slot_wal_keep_size the next checkpoint invalidates the slot, visibly.
    s.query("alter system set max_slot_wal_keep_size = '16MB'");
    s.query("select pg_reload_conf()");
    let out = s.pgbench(&["-i", "-s", "10", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    s.query("checkpoint");
    assert_eq!(
        s.query("select wal_status, invalidation_reason from pg_replication_slots"),
        "lost|wal_removed"
    );
    assert!(s
        .log()
        .contains("invalidating obsolete replication slot \"s1\""));
    let r = receivewal(&s, recv.path(), "s1");
    let status = {
        let mut r = r;
        let t0 = Instant::now();
        loop {
            if let Some(st) = r.try_wait().unwrap() {
                let mut log = String::new();
                r.stderr.take().unwrap().read_to_string(&mut log).unwrap();
                break (st, log);
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "pg_receivewal kept running"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert!(!status.0.success());
    assert!(
        status
            .1
            .contains("can no longer get changes from replication slot \"s1\""),
        "{}",
        status.1
    );
    let (_, err) = psql_repl(&s, "true", "DROP_REPLICATION_SLOT s1");
    assert!(err.is_empty(), "{err}");
    assert_eq!(s.query("select count(*) from pg_replication_slots"), "0");

    // A temporary slot (what pg_basebackup -X stream makes) lives as long as its connection.
    let mut t = Raw::connect(s.port, &[("user", "postgres"), ("replication", "true")]);
    t.until(b'Z');
    t.query("CREATE_REPLICATION_SLOT tmp1 TEMPORARY PHYSICAL (RESERVE_WAL)");
    let msgs = t.until(b'Z');
    assert!(msgs.iter().all(|m| m.0 != b'E'), "{:?}", first_error(&msgs));
    assert_eq!(
        s.query("select slot_name, temporary, active, restart_lsn is not null from pg_replication_slots"),
        "tmp1|t|t|t"
    );
    assert!(!s.dir.join("pg_replslot").join("tmp1.slot").exists());
    drop(t);
    wait_for("the temporary slot to go with its connection", || {
        s.query("select count(*) from pg_replication_slots") == "0"
    });
}

/// `walnut basebackup` from server `s` into `dir`.
fn basebackup(s: &Server, dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_walnut"))
        .args(["basebackup", "-h", "127.0.0.1", "-p", &s.port.to_string()])
        .args(["-U", "postgres", "-D"])
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn a_base_backup_taken_under_pgbench_recovers_to_a_consistent_state() {
    let s = Server::new(&[]);
    let out = s.pgbench(&["-i", "-s", "10", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut load = Command::new(pg_bin("pgbench"))
        .args(s.conn_args())
        .args(["-c", "4", "-T", "8", "postgres"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("copy");
    let out = basebackup(&s, &copy);
    assert!(out.status.success(), "{}\n{}", stderr(&out), s.log());
    assert!(stderr(&out).contains("complete"), "{}", stderr(&out));
    assert!(copy.join("backup_label").exists() && copy.join("wal").is_dir());
    let broken = tmp.path().join("broken");
    let out = basebackup(&s, &broken);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(load.wait().unwrap().success());

    // A target that is not empty is refused, and left alone.
    let out = basebackup(&s, &copy);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("exists but is not empty"),
        "{}",
        stderr(&out)
    );

    // The WAL it carries must reach the backup's end: with the end of its WAL lost, the copy
    // refuses to start, and says why.
    let label = std::fs::read_to_string(broken.join("backup_label")).unwrap();
    let end = label
        .lines()
        .find_map(|l| l.strip_prefix("BACKUP END LOCATION: "))
        .map(parse_lsn)
        .unwrap();
    let seg = broken.join("wal").join(segment_name(end / (16 << 20)));
    let mut bytes = std::fs::read(&seg).unwrap();
    let cut = ((end % (16 << 20)) as usize).saturating_sub(16);
    bytes[cut..].fill(0);
    std::fs::write(&seg, bytes).unwrap();
    let port = support::port();
    let out = Command::new(env!("CARGO_BIN_EXE_walnut"))
        .args(["serve", "-D"])
        .arg(&broken)
        .args(["-p", &port.to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert!(
        text.contains("WAL ends before end of online backup"),
        "{text}"
    );

    // The good copy recovers to the backup's end: consistent, and it runs on its own.
    let mut c = Server::on(copy.clone(), &[]);
    assert!(c.log().contains("backup recovery complete"), "{}", c.log());
    assert!(!copy.join("backup_label").exists() && copy.join("backup_label.old").exists());
    let sums = tpcb_sums(&c);
    assert!(
        sums.iter().all(|x| *x == sums[0]),
        "TPC-B invariants broken on the copy: {sums:?}"
    );
    assert!(c.query_i64("select count(*) from pgbench_history") > 0);
    assert_eq!(
        c.query_i64("select count(*) from pgbench_accounts"),
        1_000_000
    );
    let out = c.pgbench(&["-c", "2", "-t", "100"]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.stop();
    let out = Command::new(env!("CARGO_BIN_EXE_walnut"))
        .args(["verify", "-D"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "walnut verify on the copy: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A label left by a crash after the end-of-recovery checkpoint: the copy is consistent
    // already; the start recognises it and removes the label.
    std::fs::copy(copy.join("backup_label.old"), copy.join("backup_label")).unwrap();
    c.start(&[]);
    assert!(
        c.log().contains("backup recovery had completed"),
        "{}",
        c.log()
    );
    assert!(!copy.join("backup_label").exists());
    assert_eq!(
        c.query_i64("select count(*) from pgbench_accounts"),
        1_000_000
    );
}

#[test]
fn synchronous_commits_wait_for_the_synchronous_standby() {
    use futures::StreamExt;
    let s = Server::new(&["checkpoint_timeout=1h"]);
    s.query("create table t (id int primary key, v int)");
    let (row, err) = psql_repl(
        &s,
        "database",
        "CREATE_REPLICATION_SLOT sync1 PHYSICAL RESERVE_WAL",
    );
    assert_eq!(row, "sync1|||", "{err}");
    s.query("alter system set synchronous_standby_names = 'FIRST 1 (pg_receivewal, other)'");
    s.query("select pg_reload_conf()");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, mut conn) = tokio_postgres::connect(
            &format!(
                "host=127.0.0.1 port={} user=postgres dbname=postgres",
                s.port
            ),
            tokio_postgres::NoTls,
        )
        .await
        .unwrap();
        let (tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(
            futures::stream::poll_fn(move |cx| conn.poll_message(cx)).for_each(move |m| {
                if let Ok(tokio_postgres::AsyncMessage::Notice(n)) = m {
                    let _ = tx.send(n);
                }
                std::future::ready(())
            }),
        );
        // No standby connected: the commit waits; a cancel ends the wait with PostgreSQL's
        // warning, and the transaction stands.
        let client = std::sync::Arc::new(client);
        let c2 = client.clone();
        let insert =
            tokio::spawn(async move { c2.execute("insert into t values (1, 1)", &[]).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !insert.is_finished(),
            "the commit did not wait for the standby"
        );
        client
            .cancel_token()
            .cancel_query(tokio_postgres::NoTls)
            .await
            .unwrap();
        assert_eq!(insert.await.unwrap().unwrap(), 1);
        let n = notices.recv().await.unwrap();
        assert_eq!(n.code().code(), "01000");
        assert!(
            n.message()
                .contains("canceling wait for synchronous replication"),
            "{}",
            n.message()
        );
        assert!(n.detail().unwrap_or("").contains("committed locally"));
        let v: i32 = client
            .query_one("select v from t where id = 1", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(v, 1);
    });

    // With the synchronous standby streaming (pg_receivewal --synchronous reports its flushes
    // at once), commits go through, at every level it can confirm.
    let recv = tempfile::tempdir().unwrap();
    let r = Command::new(pg18_bindir().join("pg_receivewal"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &s.port.to_string(),
            "-U",
            "postgres",
        ])
        .args(["--no-loop", "--synchronous", "-S", "sync1", "-D"])
        .arg(recv.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the standby to be synchronous", || {
        s.query("select sync_state, sync_priority from pg_stat_replication") == "sync|1"
    });
    s.query("insert into t values (2, 2)");
    let out = s.psql("set synchronous_commit = remote_write; insert into t values (3, 3)");
    assert!(out.status.success(), "{}", stderr(&out));
    let (status, log) = stop_receiver(r);
    assert!(status.success(), "{log}");

    // The standby gone, a commit waits again, until the setting is emptied (reload), which
    // releases every waiter.
    let mut waiting = Command::new(pg_bin("psql"))
        .args(s.conn_args())
        .args([
            "-X",
            "-At",
            "-d",
            "postgres",
            "-c",
            "insert into t values (4, 4)",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "the commit did not wait"
    );
    s.query("alter system set synchronous_standby_names = ''");
    s.query("select pg_reload_conf()");
    let st = waiting.wait().unwrap();
    assert!(st.success());
    assert_eq!(s.query("select count(*) from t"), "4");
}

#[test]
fn basebackup_r_c_s_writes_the_standby_configuration_and_creates_its_slot() {
    let s = Server::new(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let run = |dir: &Path, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_walnut"))
            .args(["basebackup", "-h", "127.0.0.1", "-p", &s.port.to_string()])
            .args(["-U", "postgres", "-D"])
            .arg(dir)
            .args(extra)
            .env_remove("PGPASSWORD")
            .output()
            .unwrap()
    };

    // -R -C -S: the slot is created on the server, and the copy is told to stream from it.
    let copy = tmp.path().join("standby1");
    let out = run(&copy, &["-R", "-C", "-S", "standby1"]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), s.log());
    assert!(stderr(&out).contains("complete"), "{}", stderr(&out));
    let signal = copy.join("standby.signal");
    assert!(signal.is_file() && std::fs::metadata(&signal).unwrap().len() == 0);
    let conf = std::fs::read_to_string(copy.join("walnut.auto.conf")).unwrap();
    assert!(
        conf.contains(&format!(
            "primary_conninfo = 'user=postgres host=127.0.0.1 port={}'\n",
            s.port
        )),
        "{conf}"
    );
    assert!(conf.contains("primary_slot_name = 'standby1'\n"), "{conf}");
    assert!(!conf.contains("application_name"), "{conf}");
    assert_eq!(
        s.query("select slot_name, slot_type, restart_lsn is not null from pg_replication_slots"),
        "standby1|physical|t"
    );

    // -S alone uses the slot that exists.
    let copy2 = tmp.path().join("standby2");
    let out = run(&copy2, &["-R", "-S", "standby1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let conf = std::fs::read_to_string(copy2.join("walnut.auto.conf")).unwrap();
    assert!(conf.contains("primary_slot_name = 'standby1'\n"), "{conf}");

    // -C for a slot that exists fails with the server's error, and leaves the slot alone.
    let out = run(&tmp.path().join("again"), &["-R", "-C", "-S", "standby1"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("replication slot \"standby1\" already exists"),
        "{}",
        stderr(&out)
    );
    assert!(!tmp.path().join("again").exists());
    assert_eq!(
        s.query("select slot_name from pg_replication_slots"),
        "standby1"
    );

    // A slot that does not exist is refused before anything is copied.
    let missing = tmp.path().join("missing");
    let out = run(&missing, &["-R", "-S", "nosuchslot"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("replication slot \"nosuchslot\" does not exist"),
        "{}",
        stderr(&out)
    );
    assert!(!missing.exists());

    // -C needs -S.
    let out = run(&missing, &["-C"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--slot"), "{}", stderr(&out));
}
