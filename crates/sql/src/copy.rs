//! `COPY ... FROM STDIN` in PostgreSQL's text format: one row per `\n`-terminated line, fields
//! separated by the delimiter (tab), `\N` for NULL, backslash escapes, and an optional `\.` end
//! marker line. Data arrives in arbitrary chunks; complete lines are parsed and inserted as they
//! arrive, and only the unfinished tail of the last chunk is buffered, so the input is streamed.
//! Rows go through [`Transaction::insert_bulk`] (the storage engine fills whole pages and logs
//! them as page images, PostgreSQL's `bulk_write.c`), and [`CopyState::finish`] ends the load.
//! While it runs, the COPY has a row in `pg_stat_progress_copy` (`crate::progress`): bytes
//! counted as each chunk arrives, rows as each is inserted; the row goes with the state.

use crate::errors::undefined_table;
use crate::exec::{check_cancel, complete_row};
use crate::expr::{Ctx, Expr};
use crate::plan::CopyPlan;
use crate::progress::{CopyProgress, Reporter};
use crate::storage::Transaction;
use std::borrow::Cow;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use walnut_common::{Error, Result, SqlState, TableDef, Value};

/// A COPY in progress.
pub(crate) struct CopyState {
    pub def: Arc<TableDef>,
    /// Column position of each field.
    pub targets: Vec<usize>,
    /// The bound `DEFAULT` expressions of the other columns, by position (evaluated per row).
    pub defaults: Vec<(usize, Expr)>,
    /// The table's CHECK constraints, bound, in name order.
    pub checks: Vec<(String, Expr)>,
    pub delimiter: u8,
    pub null: Vec<u8>,
    /// Unfinished last line.
    pub partial: Vec<u8>,
    /// Lines seen so far.
    pub line: u64,
    /// Rows inserted.
    pub rows: u64,
    /// Saw the `\.` end marker: ignore the rest.
    pub ended: bool,
    /// Commit when the COPY ends (it was not started inside a transaction block).
    pub autocommit: bool,
    /// This COPY's row in `pg_stat_progress_copy`, removed when the state is dropped.
    pub progress: Option<CopyProgress>,
}

fn bad_copy(msg: impl Into<String>) -> Error {
    Error::user(SqlState::BAD_COPY_FILE_FORMAT, msg)
}

impl CopyState {
    /// Starts `COPY cp.table [(cp.columns)] FROM STDIN` in `txn`: resolves the table and the
    /// target columns, and registers in `pg_stat_progress_copy` with `progress`, if given.
    /// `autocommit`: the COPY commits when it ends.
    ///
    /// # Errors
    /// 42P01 unknown table, 42703 unknown column; errors binding a column's `DEFAULT`.
    pub(crate) fn start(
        txn: &mut dyn Transaction,
        cp: &CopyPlan,
        autocommit: bool,
        progress: Option<&Reporter>,
    ) -> Result<CopyState> {
        let def = txn
            .table(&cp.table)?
            .ok_or_else(|| undefined_table(&cp.table))?;
        let targets = match &cp.columns {
            None => (0..def.columns.len()).collect(),
            Some(cols) => cols
                .iter()
                .map(|c| {
                    def.column_index(c)
                        .ok_or_else(|| crate::errors::undefined_column_of(&def.name, c))
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let defaults = crate::planner::missing_defaults(&def, &targets)?;
        let checks = crate::planner::table_checks(&def)?;
        let progress = match progress {
            Some(p) => Some(p.copy_from(txn.table_oid(&cp.table)?.unwrap_or(0))),
            None => None,
        };
        Ok(CopyState {
            def,
            targets,
            defaults,
            checks,
            delimiter: cp.delimiter,
            null: cp.null.as_bytes().to_vec(),
            partial: Vec::new(),
            line: 0,
            rows: 0,
            ended: false,
            autocommit,
            progress,
        })
    }

    /// Feeds a chunk: parses and inserts every line it completes.
    ///
    /// # Errors
    /// 22P04 malformed lines, conversion and constraint errors, 57014 on cancel; each with the
    /// context `COPY t, line N` as detail.
    pub(crate) fn feed(
        &mut self,
        txn: &mut dyn Transaction,
        mut data: &[u8],
        cancel: &AtomicBool,
        ctx: &Ctx<'_>,
    ) -> Result<()> {
        if let Some(p) = &self.progress {
            p.received(data.len());
        }
        while !data.is_empty() && !self.ended {
            match data.iter().position(|&b| b == b'\n') {
                None => {
                    self.partial.extend_from_slice(data);
                    return Ok(());
                }
                Some(p) => {
                    check_cancel(cancel)?;
                    if self.partial.is_empty() {
                        self.line_done(txn, &data[..p], ctx)?;
                    } else {
                        let mut line = std::mem::take(&mut self.partial);
                        line.extend_from_slice(&data[..p]);
                        self.line_done(txn, &line, ctx)?;
                    }
                    data = &data[p + 1..];
                }
            }
        }
        Ok(())
    }

    /// Ends the input: a last line without a newline is still a row.
    ///
    /// # Errors
    /// As [`CopyState::feed`].
    pub(crate) fn finish(&mut self, txn: &mut dyn Transaction, ctx: &Ctx<'_>) -> Result<()> {
        if !self.partial.is_empty() && !self.ended {
            let line = std::mem::take(&mut self.partial);
            self.line_done(txn, &line, ctx)?;
        }
        txn.finish_bulk()
    }

    fn line_done(&mut self, txn: &mut dyn Transaction, line: &[u8], ctx: &Ctx<'_>) -> Result<()> {
        self.line += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line == b"\\." {
            self.ended = true;
            return Ok(());
        }
        let context = |mut e: Error, line_no: u64, table: &str| {
            let ctx = format!("COPY {table}, line {line_no}");
            e.detail = Some(match e.detail.take() {
                Some(d) => format!("{d}\n{ctx}"),
                None => ctx,
            });
            e
        };
        self.insert_line(txn, line, ctx)
            .map_err(|e| context(e, self.line, &self.def.name))
    }

    fn insert_line(&mut self, txn: &mut dyn Transaction, line: &[u8], ctx: &Ctx<'_>) -> Result<()> {
        let def = &self.def;
        let mut row = vec![Value::Null; def.columns.len()];
        let mut fields = split_fields(line, self.delimiter);
        for &col in &self.targets {
            let Some(raw) = fields.next() else {
                return Err(bad_copy(format!(
                    "missing data for column \"{}\"",
                    def.columns[col].name
                )));
            };
            if raw == self.null.as_slice() {
                continue;
            }
            let text = unescape(raw)?;
            row[col] = Value::parse(&def.columns[col].ty, &text)?;
        }
        if fields.next().is_some() {
            return Err(bad_copy("extra data after last expected column"));
        }
        complete_row(def, &mut row, &self.defaults, &self.checks, ctx)?;
        txn.insert_bulk(&def.name, row)?;
        self.rows += 1;
        if let Some(p) = &self.progress {
            p.inserted(self.rows);
        }
        Ok(())
    }
}

/// Splits a line at unescaped delimiters (a backslash protects the next byte).
fn split_fields(line: &[u8], delim: u8) -> impl Iterator<Item = &[u8]> {
    let mut pos = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let start = pos;
        let mut i = pos;
        while i < line.len() {
            if line[i] == b'\\' {
                i += 2;
                continue;
            }
            if line[i] == delim {
                pos = i + 1;
                return Some(&line[start..i]);
            }
            i += 1;
        }
        done = true;
        Some(&line[start.min(line.len())..])
    })
}

/// Decodes text-format escapes: `\b \f \n \r \t \v \\`, octal `\123`, hex `\x41`; any other
/// escaped byte stands for itself.
fn unescape(raw: &[u8]) -> Result<Cow<'_, str>> {
    let invalid = || {
        Error::user(
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            "invalid byte sequence for encoding \"UTF8\"",
        )
    };
    if !raw.contains(&b'\\') {
        return std::str::from_utf8(raw)
            .map(Cow::Borrowed)
            .map_err(|_| invalid());
    }
    let bytes = {
        let mut out = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            let b = raw[i];
            i += 1;
            if b != b'\\' || i >= raw.len() {
                out.push(b);
                continue;
            }
            let e = raw[i];
            i += 1;
            match e {
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'v' => out.push(11),
                b'0'..=b'7' => {
                    let mut v = (e - b'0') as u32;
                    let mut n = 1;
                    while n < 3 && i < raw.len() && (b'0'..=b'7').contains(&raw[i]) {
                        v = v * 8 + (raw[i] - b'0') as u32;
                        i += 1;
                        n += 1;
                    }
                    out.push((v & 0xff) as u8);
                }
                b'x' if i < raw.len() && raw[i].is_ascii_hexdigit() => {
                    let mut v = 0u32;
                    let mut n = 0;
                    while n < 2 && i < raw.len() && raw[i].is_ascii_hexdigit() {
                        v = v * 16 + (raw[i] as char).to_digit(16).expect("hex digit");
                        i += 1;
                        n += 1;
                    }
                    out.push(v as u8);
                }
                other => out.push(other),
            }
        }
        out
    };
    String::from_utf8(bytes)
        .map(Cow::Owned)
        .map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_escapes() {
        let f: Vec<&[u8]> = split_fields(b"1\ta\\tb\t\\N\t", b'\t').collect();
        assert_eq!(f, vec![&b"1"[..], b"a\\tb", b"\\N", b""]);
        assert_eq!(
            unescape(b"a\\tb\\\\c\\nd\\101\\x42").unwrap(),
            "a\tb\\c\ndAB"
        );
        let f: Vec<&[u8]> = split_fields(b"", b'\t').collect();
        assert_eq!(f, vec![&b""[..]]);
    }
}
