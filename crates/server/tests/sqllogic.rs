//! The differential SQL test (issue 18): every script in `tests/slt/` runs against PostgreSQL
//! 18 and against walnut, and both must give what the script expects. So walnut's answers
//! equal PostgreSQL 18's, and the expected output in the scripts is checked against
//! PostgreSQL itself on every run, not only written down once.
//!
//! The scripts are in the sqllogictest format (the `sqllogictest` crate; see `tests/slt/README.md`):
//! - `query <types> [rowsort]` compares the rows, as the simple query protocol's text (after
//!   sqllogictest's whitespace normalization), and the column types, one letter each ([`PgColumn`]), as a
//!   driver sees them (a Parse and Describe of the same statement);
//! - `statement error (SQLSTATE)` compares the SQLSTATE;
//! - `onlyif walnut` / `skipif walnut` mark a deliberate difference, which the script's
//!   comment explains.
//!
//! PostgreSQL 18 comes from `../shared/bench/postgres18.sh`, as the replication tests'
//! PostgreSQL 18 programs do ([`Reference`]).
//!
//! A second test restores a PostgreSQL 18 `pg_dump` into walnut with PostgreSQL 18's `psql`
//! (issue 18's "pg_dump ... restores into walnut with psql") and compares the tables and the
//! sequences' next values on both servers.
//!
//! A `query` record that expects no rows passes on a command result too (sqllogictest checks
//! neither types nor the kind of result when there are no rows), and the column types are
//! those of the extended protocol's Describe, not of the simple query's RowDescription
//! (tokio-postgres does not expose those).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, ColumnType, DBOutput, Runner};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// A result column's type, as one letter of a `query` record's type string.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PgColumn {
    /// `B`: boolean.
    Bool,
    /// `S`: smallint.
    Int2,
    /// `I`: integer.
    Int4,
    /// `L`: bigint.
    Int8,
    /// `F`: real.
    Float4,
    /// `R`: double precision.
    Float8,
    /// `N`: numeric.
    Numeric,
    /// `T`: text.
    Text,
    /// `V`: varchar.
    Varchar,
    /// `C`: char(n) (bpchar).
    Char,
    /// `M`: name.
    Name,
    /// `O`: oid.
    Oid,
    /// `D`: date.
    Date,
    /// `P`: timestamp.
    Timestamp,
    /// `Z`: timestamptz.
    Timestamptz,
    /// `?`: any other type.
    Other,
}

const LETTERS: &[(char, PgColumn)] = &[
    ('B', PgColumn::Bool),
    ('S', PgColumn::Int2),
    ('I', PgColumn::Int4),
    ('L', PgColumn::Int8),
    ('F', PgColumn::Float4),
    ('R', PgColumn::Float8),
    ('N', PgColumn::Numeric),
    ('T', PgColumn::Text),
    ('V', PgColumn::Varchar),
    ('C', PgColumn::Char),
    ('M', PgColumn::Name),
    ('O', PgColumn::Oid),
    ('D', PgColumn::Date),
    ('P', PgColumn::Timestamp),
    ('Z', PgColumn::Timestamptz),
    ('?', PgColumn::Other),
];

impl ColumnType for PgColumn {
    fn from_char(value: char) -> Option<Self> {
        LETTERS
            .iter()
            .find(|(c, _)| *c == value)
            .map(|(_, t)| t.clone())
    }

    fn to_char(&self) -> char {
        LETTERS
            .iter()
            .find(|(_, t)| t == self)
            .map_or('?', |(c, _)| *c)
    }
}

impl PgColumn {
    fn of(t: &Type) -> PgColumn {
        match *t {
            Type::BOOL => PgColumn::Bool,
            Type::INT2 => PgColumn::Int2,
            Type::INT4 => PgColumn::Int4,
            Type::INT8 => PgColumn::Int8,
            Type::FLOAT4 => PgColumn::Float4,
            Type::FLOAT8 => PgColumn::Float8,
            Type::NUMERIC => PgColumn::Numeric,
            Type::TEXT => PgColumn::Text,
            Type::VARCHAR => PgColumn::Varchar,
            Type::BPCHAR => PgColumn::Char,
            Type::NAME => PgColumn::Name,
            Type::OID => PgColumn::Oid,
            Type::DATE => PgColumn::Date,
            Type::TIMESTAMP => PgColumn::Timestamp,
            Type::TIMESTAMPTZ => PgColumn::Timestamptz,
            _ => PgColumn::Other,
        }
    }
}

/// A statement's error, shown with its SQLSTATE and message (tokio-postgres says only "db
/// error").
#[derive(Debug)]
struct SqlError(tokio_postgres::Error);

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(
                f,
                "{} {}: {}",
                db.severity(),
                db.code().code(),
                db.message()
            ),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for SqlError {}

impl From<tokio_postgres::Error> for SqlError {
    fn from(e: tokio_postgres::Error) -> Self {
        SqlError(e)
    }
}

/// One session of the server under test.
struct Session {
    client: Client,
    engine: &'static str,
}

impl Session {
    async fn connect(port: u16, engine: &'static str) -> Result<Session, SqlError> {
        let (client, conn) = tokio_postgres::connect(
            &format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"),
            NoTls,
        )
        .await?;
        tokio::spawn(conn);
        Ok(Session { client, engine })
    }
}

#[async_trait]
impl AsyncDB for Session {
    type Error = SqlError;
    type ColumnType = PgColumn;

    /// Runs `sql` by the simple query protocol, and then, if it returned rows, describes it by
    /// the extended protocol for the column types. The Describe comes after, not before: a
    /// Parse that fails would abort an open transaction block, and the record would then see
    /// 25P02 instead of its own error. So a record must be one statement that can be prepared
    /// after it ran.
    async fn run(&mut self, sql: &str) -> Result<DBOutput<PgColumn>, Self::Error> {
        let mut rows = Vec::new();
        let mut described = false;
        let mut count = 0;
        for m in self.client.simple_query(sql).await? {
            match m {
                SimpleQueryMessage::RowDescription(_) => described = true,
                SimpleQueryMessage::Row(r) => rows.push(
                    (0..r.len())
                        .map(|i| match r.get(i) {
                            None => "NULL".to_string(),
                            Some("") => "(empty)".to_string(),
                            Some(v) => v.to_string(),
                        })
                        .collect(),
                ),
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        if !described {
            return Ok(DBOutput::StatementComplete(count));
        }
        let statement = self.client.prepare(sql).await?;
        let types = statement
            .columns()
            .iter()
            .map(|c| PgColumn::of(c.type_()))
            .collect();
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        self.engine
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await
    }

    fn error_sql_state(err: &Self::Error) -> Option<String> {
        err.0.code().map(|c| c.code().to_string())
    }
}

/// A throwaway PostgreSQL 18 cluster under `/tmp` (C.UTF-8: text sorts byte by byte, as
/// walnut sorts it, and the encoding is UTF8, as walnut's); stopped and removed on drop.
/// As root (CI), `../shared/bench/postgres18.sh start` makes it and runs it as its
/// unprivileged user (PostgreSQL refuses root); otherwise the script's PostgreSQL 18 programs
/// (or `PG18_BINDIR`'s) run as the current user.
struct Reference {
    script: PathBuf,
    bin: PathBuf,
    root: bool,
    dir: PathBuf,
    port: u16,
}

/// Settings of the reference cluster beside the data directory's defaults.
const REFERENCE_CONF: &[(&str, &str)] = &[
    ("shared_buffers", "128MB"),
    ("max_connections", "20"),
    ("fsync", "off"),
    ("TimeZone", "UTC"),
];

impl Reference {
    fn start() -> Reference {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/postgres18.sh");
        assert!(
            script.exists(),
            "the differential test runs PostgreSQL 18 from {}, which is missing",
            script.display()
        );
        let bin = match std::env::var("PG18_BINDIR") {
            Ok(dir) => PathBuf::from(dir),
            Err(_) => {
                let out = run(Command::new("bash").arg(&script).arg("bin"));
                PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            }
        };
        let uid = run(Command::new("id").arg("-u"));
        let root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        let port = support::port();
        // Under /tmp itself, not in a private temporary directory: as root, the script's
        // unprivileged user must reach it.
        let dir = PathBuf::from(format!(
            "/tmp/walnut-slt-pg18-{}-{port}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        // Made first, so that drop stops whatever part of the start succeeded.
        let r = Reference {
            script,
            bin,
            root,
            dir,
            port,
        };
        if r.root {
            let conf: Vec<String> = REFERENCE_CONF
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            run(Command::new("bash")
                .arg(&r.script)
                .arg("start")
                .arg(&r.dir)
                .arg(port.to_string())
                .env("LC_ALL", "C.UTF-8")
                .env("PG_EXTRA_CONF", conf.join(" ")));
        } else {
            run(Command::new(r.bin.join("initdb"))
                .arg("-D")
                .arg(&r.dir)
                .args(["-U", "postgres", "--auth=trust", "--no-sync"])
                .env("LC_ALL", "C.UTF-8"));
            let mut conf = format!(
                "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n",
                r.dir.display()
            );
            for (k, v) in REFERENCE_CONF {
                conf.push_str(&format!("{k} = '{v}'\n"));
            }
            let file = r.dir.join("postgresql.conf");
            let mut text = std::fs::read_to_string(&file).expect("initdb wrote postgresql.conf");
            text.push_str(&conf);
            std::fs::write(&file, text).expect("postgresql.conf is writable");
            run(Command::new(r.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&r.dir)
                .arg("-l")
                .arg(r.dir.join("server.log"))
                .args(["-w", "start"]));
        }
        r
    }
}

/// Runs `cmd`, which must succeed; its output.
#[track_caller]
fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not start: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = if self.root {
            Command::new("bash")
                .arg(&self.script)
                .arg("stop")
                .arg(&self.dir)
                .output()
        } else {
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&self.dir)
                .args(["-w", "stop", "-m", "fast"])
                .output()
        };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The scripts, in name order.
fn scripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        .collect();
    files.sort();
    files
}

/// Runs `file` against the server on `port` as `engine`; the failure, if any, as text.
async fn run_script(file: &Path, port: u16, engine: &'static str) -> Option<String> {
    let mut runner = Runner::new(move || Session::connect(port, engine));
    runner.add_label(engine);
    runner.with_column_validator(sqllogictest::strict_column_validator);
    let result = runner.run_file_async(file).await;
    runner.shutdown_async().await;
    result
        .err()
        .map(|e| format!("{engine}: {}", e.display(false)))
}

#[test]
fn sql_scripts_give_what_postgresql_18_gives() {
    let files = scripts();
    assert!(!files.is_empty(), "no scripts in tests/slt");
    let reference = Reference::start();
    let walnut = support::Server::new(&[]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut failures = Vec::new();
    for file in &files {
        // PostgreSQL first: if it disagrees, the script's expected output is wrong.
        for (port, engine) in [(reference.port, "postgres"), (walnut.port, "walnut")] {
            if let Some(f) = rt.block_on(run_script(file, port, engine)) {
                failures.push(f);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed (\"postgres\": the script expects what PostgreSQL 18 does not \
         give; \"walnut\": walnut differs from PostgreSQL 18):\n\n{}",
        failures.len(),
        files.len() * 2,
        failures.join("\n\n")
    );
}

/// The schema and rows the dump test makes on PostgreSQL 18: a `serial` column, an identity
/// column (pg_dump writes `ALTER TABLE ... ADD GENERATED ... (SEQUENCE NAME ...)`), a free
/// sequence with options, a CHECK, defaults, NULLs, and text that COPY must escape.
const DUMPED_SCHEMA: &str = r#"
CREATE TABLE customers (id serial PRIMARY KEY, name text NOT NULL, email varchar(40),
    vip boolean DEFAULT false);
CREATE TABLE orders (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    customer_id int NOT NULL, amount int DEFAULT 0, weight double precision, note text,
    CHECK (amount >= 0));
CREATE TABLE "Mixed Case" (k int, part smallint, v text, PRIMARY KEY (k, part));
CREATE SEQUENCE tickets START 100 INCREMENT 5 MAXVALUE 100000 CACHE 1;
INSERT INTO customers (name, email, vip) VALUES ('ann', 'a@x', true), ('bob', NULL, NULL),
    ('cy', 'c@x', false);
INSERT INTO orders (customer_id, amount, weight, note) VALUES (1, 10, 1.5, 'first'),
    (2, 20, NULL, E'tab\there'), (3, 0, -0.25, E'line\nbreak and \\ backslash'),
    (1, 7, 1e10, '');
INSERT INTO "Mixed Case" VALUES (1, 1, 'a'), (1, 2, NULL), (2, 1, 'ü');
SELECT nextval('tickets');
SELECT nextval('tickets');
"#;

/// What the dump test compares on each server: every row of each table in key order, and then
/// each sequence's next value (which also checks that each default still works).
const DUMP_CHECKS: &[&str] = &[
    "SELECT * FROM customers ORDER BY id",
    "SELECT * FROM orders ORDER BY id",
    "SELECT * FROM \"Mixed Case\" ORDER BY k, part",
    "SELECT nextval('tickets')",
    "INSERT INTO customers (name) VALUES ('dee') RETURNING *",
    "INSERT INTO orders (customer_id) VALUES (4) RETURNING *",
];

#[test]
fn a_postgresql_18_dump_restores_into_walnut() {
    let reference = Reference::start();
    let walnut = support::Server::new(&[]);
    let psql = |port: u16, args: &[&str]| {
        run(Command::new(reference.bin.join("psql"))
            .args([
                "-X",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
            ])
            .args(["-p", &port.to_string()])
            .args(args))
    };
    psql(reference.port, &["-c", "CREATE DATABASE dumped"]);
    psql(reference.port, &["-d", "dumped", "-c", DUMPED_SCHEMA]);
    let dump = run(Command::new(reference.bin.join("pg_dump"))
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "dumped"])
        .args(["-p", &reference.port.to_string()])
        // The reference server's own extension (postgres18.sh loads pg_prewarm), not the
        // application's.
        .arg("--exclude-extension=pg_prewarm"));
    let file = walnut.dir.join("dump.sql");
    std::fs::write(&file, &dump.stdout).unwrap();
    let script = String::from_utf8_lossy(&dump.stdout);
    for form in [
        "ADD GENERATED BY DEFAULT AS IDENTITY",
        "OWNED BY",
        "SET DEFAULT nextval",
    ] {
        assert!(script.contains(form), "the dump has no {form}:\n{script}");
    }
    // The whole script, stopping at the first error.
    psql(
        walnut.port,
        &["-d", "postgres", "-f", file.to_str().unwrap()],
    );
    for check in DUMP_CHECKS {
        let on = |port, db| String::from_utf8(psql(port, &["-d", db, "-c", check]).stdout).unwrap();
        let (want, got) = (on(reference.port, "dumped"), on(walnut.port, "postgres"));
        assert_eq!(got, want, "{check}: walnut, then PostgreSQL 18");
    }
}
