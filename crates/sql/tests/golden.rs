//! Golden SQL scripts: `tests/golden/*.test` hold statements and, after each, the output it must
//! produce, in the manner of toydb's `testscripts/`. Every script runs against both engines,
//! the in-memory model (`MemEngine`) and the real one over a temporary data directory, and both
//! must print exactly the expected output.
//!
//! ```text
//! # A comment. A blank line ends a paragraph.
//! > create table t (a int primary key, b text)
//! CREATE TABLE
//! > select a, b from t order by a
//! a | b
//! --+-----
//! 1 | x
//! 2 | NULL
//! SELECT 2
//! > begin
//! BEGIN
//! [txn: T]
//! @s2 > select count(*) from t
//! ...
//! ```
//!
//! - `> sql` runs `sql` as one Simple Query message on session `s1`; `@name > sql` on session
//!   `name` (sessions are opened on first use, with default settings). A `;`-separated string
//!   is one message: one implicit transaction, one result per statement. Sessions run one
//!   statement at a time on one thread, so a script must not make one wait for another's row
//!   lock (it would hang).
//! - The lines after a statement, up to the next statement, comment or blank line, are its
//!   output: the notices and warnings it raised (`NOTICE 42P07: ...`, `WARNING 25P01: ...`),
//!   then each result: rows as a table (column names, a rule, the rows, the command tag), a
//!   command tag, or `ERROR <sqlstate>: <message>` and its `DETAIL: ...`. SQL NULL prints as
//!   `NULL`; a string that would be ambiguous (`"NULL"`, `""`, trailing blanks, `|`, control
//!   characters) prints quoted with Rust escapes. When the session was or is in a transaction
//!   block, a last line `[txn: T]`, `[txn: E]` or `[txn: I]` gives the status after it (the
//!   ReadyForQuery letter). Rows are compared in the order printed, so a query that returns
//!   several rows needs an ORDER BY that fixes it.
//! - `# engine: real` or `# engine: mem` limits the statements of its paragraph (up to the next
//!   blank line) to one engine. Use it only where the engines legitimately differ, and say why.
//!
//! `UPDATE_GOLDEN=1 cargo test -p walnut-sql --test golden` rewrites the expected output from
//! what the real engine prints (the model's for `# engine: mem` paragraphs); the model must
//! still agree with it, or the test fails.

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use support::{render_error, render_notice, render_output, status_letter, Db, EngineKind};
use walnut_sql::session::{Output, Session, TxnStatus};

/// One statement of a script and its expected output.
struct Stmt {
    /// 1-based line of the statement.
    line: usize,
    /// The statement line as written (kept when the file is rewritten).
    head: String,
    session: String,
    sql: String,
    /// `None`: both engines.
    only: Option<EngineKind>,
    expected: Vec<String>,
}

enum Item {
    /// A comment, directive or blank line, kept as is.
    Text(String),
    Stmt(Stmt),
}

fn script_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.test"))
}

/// How messages name a script: its path from the workspace root.
fn display_path(name: &str) -> String {
    format!("crates/sql/tests/golden/{name}.test")
}

fn ends_output(line: &str) -> bool {
    line.trim().is_empty() || line.starts_with(['#', '>', '@'])
}

/// `> sql` or `@name > sql` → (session, sql).
fn statement_line(line: &str) -> Option<(String, String)> {
    if let Some(sql) = line.strip_prefix("> ") {
        return Some(("s1".into(), sql.trim().into()));
    }
    let (name, sql) = line.strip_prefix('@')?.split_once(" > ")?;
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then(|| (name.to_string(), sql.trim().to_string()))
}

fn parse(name: &str, text: &str) -> Vec<Item> {
    let lines: Vec<&str> = text.lines().collect();
    let mut items = Vec::new();
    let mut only = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let at = format!("{}:{}", display_path(name), i + 1);
        if line.trim().is_empty() {
            only = None;
            items.push(Item::Text(line.into()));
            i += 1;
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if let Some(engine) = comment.trim().strip_prefix("engine:") {
                only = Some(match engine.trim() {
                    "real" => EngineKind::Real,
                    "mem" => EngineKind::Mem,
                    other => panic!("{at}: unknown engine {other:?} (real or mem)"),
                });
            }
            items.push(Item::Text(line.into()));
            i += 1;
            continue;
        }
        let Some((session, sql)) = statement_line(line) else {
            panic!(
                "{at}: expected a statement (`> sql`, `@session > sql`), a comment or a blank \
                 line, found {line:?}"
            );
        };
        let first = i;
        i += 1;
        let mut expected = Vec::new();
        while i < lines.len() && !ends_output(lines[i]) {
            expected.push(lines[i].to_string());
            i += 1;
        }
        items.push(Item::Stmt(Stmt {
            line: first + 1,
            head: line.into(),
            session,
            sql,
            only,
            expected,
        }));
    }
    items
}

fn unparse(items: &[Item]) -> String {
    let mut out = String::new();
    for item in items {
        match item {
            Item::Text(t) => {
                out.push_str(t);
                out.push('\n');
            }
            Item::Stmt(s) => {
                out.push_str(&s.head);
                out.push('\n');
                for l in &s.expected {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// Runs one Simple Query message and renders everything it produced.
fn run_statement(s: &mut Session, sql: &str) -> Vec<String> {
    let before = s.txn_status();
    let results = s.simple_query(sql);
    let mut body = Vec::new();
    for r in &results {
        match r {
            Ok(out) => {
                body.extend(render_output(out));
                if let Output::CopyIn { .. } = out {
                    // Scripts send no COPY data: end the COPY as a client would that gave up.
                    body.extend(render_error(&s.copy_fail("no data in golden scripts")));
                }
            }
            Err(e) => body.extend(render_error(e)),
        }
    }
    let mut lines: Vec<String> = s.take_notices().iter().map(render_notice).collect();
    lines.extend(body);
    let after = s.txn_status();
    if before != TxnStatus::Idle || after != TxnStatus::Idle {
        lines.push(format!("[txn: {}]", status_letter(after)));
    }
    lines
}

/// Runs the script's statements for `kind` on a fresh database: the output of each, by item
/// index (`None` for items not run on this engine).
fn run(items: &[Item], kind: EngineKind) -> Vec<Option<Vec<String>>> {
    let db = Db::open(kind);
    let mut sessions: BTreeMap<String, Session> = BTreeMap::new();
    let mut actual = Vec::with_capacity(items.len());
    for item in items {
        let Item::Stmt(st) = item else {
            actual.push(None);
            continue;
        };
        if st.only.is_some_and(|o| o != kind) {
            actual.push(None);
            continue;
        }
        let s = sessions
            .entry(st.session.clone())
            .or_insert_with(|| db.session(&[]));
        actual.push(Some(run_statement(s, &st.sql)));
    }
    for (_, mut s) in sessions {
        s.terminate();
    }
    db.shutdown();
    actual
}

/// A line diff (longest common subsequence): `  ` common, `- ` expected only, `+ ` actual only.
fn diff(expected: &[String], actual: &[String]) -> String {
    let (n, m) = (expected.len(), actual.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if expected[i] == actual[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut out = String::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && expected[i] == actual[j] {
            let _ = writeln!(out, "    {}", expected[i]);
            (i, j) = (i + 1, j + 1);
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "  - {}", expected[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "  + {}", actual[j]);
            j += 1;
        }
    }
    out
}

/// Mismatches between the expected output and `actual`, one message each.
fn mismatches(
    name: &str,
    items: &[Item],
    kind: EngineKind,
    actual: &[Option<Vec<String>>],
) -> Vec<String> {
    let mut out = Vec::new();
    for (item, got) in items.iter().zip(actual) {
        let (Item::Stmt(st), Some(got)) = (item, got) else {
            continue;
        };
        if *got != st.expected {
            out.push(format!(
                "{}:{} (engine {}): {}\n  (- expected, + actual)\n{}",
                display_path(name),
                st.line,
                kind.name(),
                st.head,
                diff(&st.expected, got)
            ));
        }
    }
    out
}

fn run_script(name: &str) {
    let path = script_path(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", display_path(name)));
    let mut items = parse(name, &text);
    let actual: Vec<(EngineKind, Vec<Option<Vec<String>>>)> = EngineKind::ALL
        .iter()
        .map(|&k| (k, run(&items, k)))
        .collect();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| !v.is_empty() && v != "0");
    if update {
        // The first engine that ran a statement (the real one, unless `# engine: mem`) defines
        // its expected output.
        for (idx, item) in items.iter_mut().enumerate() {
            if let Item::Stmt(st) = item {
                if let Some(got) = actual.iter().find_map(|(_, a)| a[idx].as_ref()) {
                    st.expected = got.clone();
                }
            }
        }
        let new = unparse(&items);
        if new != text {
            std::fs::write(&path, new).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    let failures: Vec<String> = actual
        .iter()
        .flat_map(|(k, a)| mismatches(name, &items, *k, a))
        .collect();
    if !failures.is_empty() {
        let hint = if update {
            "The engines disagree: the real engine's output was written, the model's differs."
        } else {
            "If the new output is right, accept it with \
             UPDATE_GOLDEN=1 cargo test -p walnut-sql --test golden"
        };
        panic!(
            "{} statement(s) printed something else than expected:\n\n{}\n{hint}",
            failures.len(),
            failures.join("\n")
        );
    }
}

macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_script(stringify!($name));
            }
        )*
        const SCRIPTS: &[&str] = &[$(stringify!($name)),*];
    };
}

scripts!(
    catalog,
    ddl_dml,
    ddl_transactions,
    errors,
    expressions,
    generate_series,
    keys,
    queries,
    settings,
    transactions,
);

#[test]
fn every_script_is_listed() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .expect("tests/golden")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "test"))
        .map(|p| {
            p.file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    found.sort();
    let mut listed: Vec<String> = SCRIPTS.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "tests/golden/*.test and the scripts! list differ"
    );
}

#[test]
fn the_format_round_trips() {
    let text = "# c\n# engine: mem\n> select 1\n?column?\n--------\n1\nSELECT 1\n\n@s2 > begin\nBEGIN\n[txn: T]\n";
    let items = parse("x", text);
    assert_eq!(unparse(&items), text);
    let stmts: Vec<&Stmt> = items
        .iter()
        .filter_map(|i| match i {
            Item::Stmt(s) => Some(s),
            Item::Text(_) => None,
        })
        .collect();
    assert_eq!(stmts.len(), 2);
    assert_eq!(
        (stmts[0].line, stmts[0].only, stmts[0].expected.len()),
        (3, Some(EngineKind::Mem), 4)
    );
    assert_eq!((stmts[1].session.as_str(), stmts[1].only), ("s2", None));
}

#[test]
fn the_diff_marks_changed_lines() {
    let e: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let a: Vec<String> = ["a", "x", "c"].map(String::from).to_vec();
    assert_eq!(diff(&e, &a), "    a\n  - b\n  + x\n    c\n");
}
