//! What the golden and differential tests share: the two engines a test runs against, and the
//! text rendering of a statement's results.

#![allow(dead_code)] // each test binary uses its own part

use std::io;
use std::path::Path;
use std::sync::Arc;
use walnut_common::config::Config;
use walnut_common::{Error, Value};
use walnut_io::hook::{FileRef, FlushRef, HookVfs, Hooks};
use walnut_io::{FileIo, OpenMode, RealVfs, Vfs};
use walnut_sql::engine::StorageEngine;
use walnut_sql::session::{Notice, Output, Session, TxnStatus};
use walnut_sql::storage::Engine;
use walnut_sql::testing::MemEngine;
use walnut_storage::{Storage, StorageConfig};

/// A server configuration without files: every parameter at its default.
pub fn config() -> Arc<Config> {
    Arc::new(Config::in_memory(walnut_sql::guc::registry(), &[]).expect("default configuration"))
}

/// The engines a script runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// The in-memory model, `walnut_sql::testing::MemEngine`.
    Mem,
    /// `walnut_storage` over a temporary data directory.
    Real,
}

impl EngineKind {
    /// Both, the real engine first (it is the reference when expected output is regenerated).
    pub const ALL: [EngineKind; 2] = [EngineKind::Real, EngineKind::Mem];

    /// The name used in scripts and messages.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Mem => "mem",
            EngineKind::Real => "real",
        }
    }
}

/// The real engine's configuration in tests: the defaults, but a smaller buffer pool and new
/// WAL segments neither zero-filled nor preallocated, which makes opening a data directory
/// cheaper and changes nothing a statement can see.
pub fn storage_config() -> StorageConfig {
    let defaults = StorageConfig::default();
    let mut wal = defaults.wal.clone();
    wal.init_zero = false;
    wal.prealloc_segments = 0;
    StorageConfig {
        shared_buffers_pages: 1024,
        wal,
        ..defaults
    }
}

/// The real file system without durability: every sync returns at once. Tests never crash
/// the engine, so nothing they check depends on a sync; skipping them makes a data directory
/// cheap to create, open and shut down (walnut refuses `fsync = off`, so this is done here, one
/// layer down, through the I/O hook: every other call takes production's path).
pub fn no_sync_vfs() -> Arc<dyn Vfs> {
    Arc::new(HookVfs::new(Arc::new(RealVfs), Arc::new(NoSync)))
}

/// [`Hooks`] that make every sync, write-back and cache flush return at once, and open files
/// without O_DIRECT, O_DSYNC or O_SYNC.
struct NoSync;

impl Hooks for NoSync {
    fn open(&self, vfs: &dyn Vfs, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn FileIo>> {
        let mode = OpenMode {
            direct: false,
            dsync: false,
            sync: false,
            ..mode
        };
        vfs.open(path, mode)
    }
    fn sync_dir(&self, _vfs: &dyn Vfs, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn sync_data(&self, _file: FileRef<'_>) -> io::Result<()> {
        Ok(())
    }
    fn sync_all(&self, _file: FileRef<'_>) -> io::Result<()> {
        Ok(())
    }
    fn write_back(&self, _file: FileRef<'_>, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self, _flusher: FlushRef<'_>) -> io::Result<()> {
        Ok(())
    }
}

/// An open engine of either kind. A real one lives in a temporary directory, removed when this
/// is dropped; call [`Db::shutdown`] at the end of a test that did not fail.
pub struct Db {
    /// The engine sessions run against.
    pub engine: Arc<dyn Engine>,
    real: Option<(Arc<Storage>, tempfile::TempDir)>,
}

impl Db {
    /// A fresh, empty database; a real one in a new temporary directory.
    pub fn open(kind: EngineKind) -> Db {
        if kind == EngineKind::Mem {
            return Db {
                engine: Arc::new(MemEngine::new()),
                real: None,
            };
        }
        let tmp = tempfile::tempdir().expect("temporary directory");
        let dir = tmp.path().join("data");
        Storage::initdb(no_sync_vfs(), &dir).expect("initdb");
        let storage = Storage::open(no_sync_vfs(), &dir, storage_config()).expect("open");
        Db {
            engine: StorageEngine::new(storage.clone()),
            real: Some((storage, tmp)),
        }
    }

    /// A session with default settings and `options` as startup options.
    pub fn session(&self, options: &[(&str, &str)]) -> Session {
        let options: Vec<(String, String)> = options
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        Session::new(self.engine.clone(), config(), &options).expect("session")
    }

    /// Shuts a real engine down (a checkpoint), checking that it succeeds. Sessions must be
    /// gone.
    pub fn shutdown(mut self) {
        if let Some((storage, _dir)) = self.real.take() {
            storage.shutdown().expect("clean shutdown");
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // A test that panicked: stop the engine's threads; the error no longer matters.
        if let Some((storage, _dir)) = self.real.take() {
            let _ = storage.shutdown();
        }
    }
}

/// A value as a script shows it: `NULL` for SQL NULL; a string in Rust's quoted, escaped form
/// (`"NULL"`, `""`, `"ab  "`, `"a|b"`) when printing it plainly would be ambiguous or would
/// break the table, else as PostgreSQL's text output (`t`, `1.5`, `2024-01-02 00:00:00`).
pub fn render_value(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Text(s) if needs_quotes(s) => format!("{s:?}"),
        other => other.to_text().expect("not null"),
    }
}

fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s == "NULL"
        || s.starts_with(|c: char| c.is_whitespace() || matches!(c, '"' | '>' | '@' | '#'))
        || s.ends_with(char::is_whitespace)
        || s.contains(|c: char| c.is_control() || c == '|')
}

/// A result as lines: for rows a psql-like table (names, a rule, one line per row, columns
/// padded to their widest cell, the last one not padded), then the command tag.
pub fn render_output(out: &Output) -> Vec<String> {
    match out {
        Output::Rows { columns, rows, tag } => {
            let mut cells: Vec<Vec<String>> = Vec::with_capacity(rows.len() + 1);
            cells.push(columns.iter().map(|c| c.name.clone()).collect());
            cells.extend(rows.iter().map(|r| r.iter().map(render_value).collect()));
            let widths: Vec<usize> = (0..columns.len())
                .map(|i| {
                    cells
                        .iter()
                        .map(|r| r[i].chars().count())
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let line = |r: &[String]| {
                let mut s = String::new();
                for (i, c) in r.iter().enumerate() {
                    if i > 0 {
                        s.push_str(" | ");
                    }
                    s.push_str(c);
                    if i + 1 < r.len() {
                        s.push_str(&" ".repeat(widths[i] - c.chars().count()));
                    }
                }
                s
            };
            let mut lines = Vec::with_capacity(rows.len() + 3);
            if columns.is_empty() {
                lines.push("(no columns)".into());
            } else {
                lines.push(line(&cells[0]));
                let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
                lines.push(rule.join("-+-"));
                lines.extend(cells[1..].iter().map(|r| line(r)));
            }
            lines.push(tag.clone());
            lines
        }
        Output::Command { tag } => vec![tag.clone()],
        Output::Empty => vec!["(empty query)".into()],
        Output::CopyIn { columns } => vec![format!("(copy in, {columns} columns)")],
    }
}

/// An error as `ERROR <sqlstate>: <message>`, then `DETAIL: <detail>` if it has one.
pub fn render_error(e: &Error) -> Vec<String> {
    let mut lines = vec![format!("ERROR {}: {}", e.sqlstate, e.message)];
    if let Some(d) = &e.detail {
        lines.push(format!("DETAIL: {d}"));
    }
    lines
}

/// A notice as `<severity> <sqlstate>: <message>`.
pub fn render_notice(n: &Notice) -> String {
    format!("{} {}: {}", n.severity, n.sqlstate, n.message)
}

/// The ReadyForQuery letter.
pub fn status_letter(s: TxnStatus) -> char {
    match s {
        TxnStatus::Idle => 'I',
        TxnStatus::InBlock => 'T',
        TxnStatus::Failed => 'E',
    }
}
