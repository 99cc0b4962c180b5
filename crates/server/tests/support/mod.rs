//! What the end-to-end tests share: [`Server`], the built `walnut` binary on its own port and
//! data directory, and the PostgreSQL client programs that drive it.
//!
//! They need PostgreSQL's client programs (`apt-get install postgresql-client`); `.ci/run`
//! installs them. Set `PG_BINDIR` to use a specific pgbench/psql.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A port for a test server: below Linux's ephemeral range (32768-60999), where a connect to
/// a port nobody listens on can be given that same port as its source and connect to itself.
pub fn port() -> u16 {
    let base = 20000 + (std::process::id() % 1000) as u16 * 10;
    base + NEXT_PORT.fetch_add(1, Ordering::Relaxed)
}

/// Something listens on 127.0.0.1:`port`: a connect succeeds, and not to itself (a TCP
/// self-connect, when the kernel picks `port` as the source port too, also "succeeds").
fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
}

pub fn pg_bin(name: &str) -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BINDIR") {
        return Path::new(&dir).join(name);
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} not found: install postgresql-client (apt-get install -y postgresql-client) or set PG_BINDIR");
}

pub struct Server {
    pub dir: PathBuf,
    pub port: u16,
    pub child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    pub fn new(extra: &[&str]) -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let out = Command::new(env!("CARGO_BIN_EXE_walnut"))
            .args(["initdb", "-D"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut s = Server {
            dir,
            port: port(),
            child: None,
            _tmp: Some(tmp),
        };
        s.start(extra);
        s
    }

    pub fn start(&mut self, extra: &[&str]) {
        self.start_env(extra, &[]);
    }

    /// A server on an existing data directory (a base backup's copy), started.
    pub fn on(dir: PathBuf, extra: &[&str]) -> Server {
        let mut s = Server {
            dir,
            port: port(),
            child: None,
            _tmp: None,
        };
        s.start(extra);
        s
    }

    /// Starts the server with `-c` settings `extra` and environment variables `env`. If the
    /// port was taken meanwhile (tests run in parallel and `port()` only finds one free at the
    /// time it looks), starts again on another, up to five times.
    pub fn start_env(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        for attempt in 1..=5 {
            let logged = self.log().len();
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join("server.log"))
                .unwrap();
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_walnut"));
            cmd.args(["serve", "-D"])
                .arg(&self.dir)
                .args(["-p", &self.port.to_string()]);
            for e in extra {
                cmd.args(["-c", e]);
            }
            cmd.envs(env.iter().copied());
            let child = cmd
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            self.child = Some(child);
            let t0 = Instant::now();
            let mut exited = None;
            while !listening(self.port) {
                if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                    exited = Some(st);
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(120),
                    "server did not start:\n{}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            let Some(st) = exited else { return };
            self.child = None;
            let this_start = self.log().get(logged..).unwrap_or_default().to_string();
            if attempt < 5 && this_start.contains("Address already in use") {
                self.port = port();
                continue;
            }
            panic!("server exited with {st} during start-up:\n{}", self.log());
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn kill9(&mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-INT")
                .arg(c.id().to_string())
                .status();
            let t0 = Instant::now();
            while c.try_wait().unwrap().is_none() {
                if t0.elapsed() > Duration::from_secs(60) {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    pub fn conn_args(&self) -> Vec<String> {
        vec![
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.port.to_string(),
            "-U".into(),
            "postgres".into(),
        ]
    }

    pub fn psql(&self, sql: &str) -> Output {
        Command::new(pg_bin("psql"))
            .args(self.conn_args())
            .args([
                "-X",
                "-At",
                "-v",
                "ON_ERROR_STOP=0",
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .output()
            .unwrap()
    }

    pub fn query(&self, sql: &str) -> String {
        let out = self.psql(sql);
        assert!(
            out.status.success(),
            "psql -c {sql:?} failed: {}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    pub fn query_i64(&self, sql: &str) -> i64 {
        let s = self.query(sql);
        s.parse()
            .unwrap_or_else(|_| panic!("{sql:?} returned {s:?}"))
    }

    pub fn pgbench(&self, args: &[&str]) -> Output {
        Command::new(pg_bin("pgbench"))
            .args(self.conn_args())
            .args(args)
            .arg("postgres")
            .output()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Server {
    /// psql with a connection string of extra options (`sslmode=require`, ...) and
    /// environment variables (`PGPASSWORD`); never prompts for a password.
    pub fn psql_with(&self, sql: &str, conninfo: &str, env: &[(&str, &str)]) -> Output {
        let dsn = format!(
            "host=127.0.0.1 port={} dbname=postgres {conninfo}",
            self.port
        );
        Command::new(pg_bin("psql"))
            .args(["-X", "-At", "-w", "-d", &dsn, "-c", sql])
            .env_remove("PGPASSWORD")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Polls `f` every 100 ms until it holds; panics after 120 s, naming `what`.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// sum(abalance), sum(bbalance), sum(tbalance), sum(delta): all equal after any number of
/// whole TPC-B transactions.
pub fn tpcb_sums(s: &Server) -> Vec<i64> {
    [
        "select sum(abalance) from pgbench_accounts",
        "select sum(bbalance) from pgbench_branches",
        "select sum(tbalance) from pgbench_tellers",
        "select coalesce(sum(delta), 0) from pgbench_history",
    ]
    .iter()
    .map(|q| s.query_i64(q))
    .collect()
}
