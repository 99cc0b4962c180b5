//! Execution of the DDL walnut's fast path runs: CREATE TABLE, DROP TABLE, TRUNCATE and ALTER
//! TABLE ... ADD PRIMARY KEY, with PostgreSQL's notices for `IF [NOT] EXISTS`.

use crate::errors::undefined_table;
use crate::progress::Reporter;
use crate::storage::Transaction;
use crate::types::{Notice, Output};
use walnut_common::{Error, Result, SqlState, TableDef};

fn command(tag: &str) -> Output {
    Output::Command { tag: tag.into() }
}

/// CREATE TABLE [IF NOT EXISTS].
///
/// # Errors
/// 42P07 if the table exists (without IF NOT EXISTS); the engine's errors.
pub(crate) fn create_table(
    txn: &mut dyn Transaction,
    def: &TableDef,
    if_not_exists: bool,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    if if_not_exists && txn.table(&def.name)?.is_some() {
        notices.push(Notice::new(
            "NOTICE",
            SqlState::DUPLICATE_TABLE,
            format!("relation \"{}\" already exists, skipping", def.name),
        ));
    } else {
        txn.create_table(def.clone())?;
    }
    Ok(command("CREATE TABLE"))
}

/// DROP TABLE [IF EXISTS] names: checks every name first, then drops.
///
/// # Errors
/// 42P01 for a missing table (without IF EXISTS); the engine's errors.
pub(crate) fn drop_tables(
    txn: &mut dyn Transaction,
    names: &[String],
    if_exists: bool,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    let mut present = Vec::new();
    for n in names {
        if txn.table(n)?.is_some() {
            present.push(n);
        } else if if_exists {
            notices.push(Notice::new(
                "NOTICE",
                SqlState::SUCCESSFUL_COMPLETION,
                format!("table \"{n}\" does not exist, skipping"),
            ));
        } else {
            return Err(Error::user(
                SqlState::UNDEFINED_TABLE,
                format!("table \"{n}\" does not exist"),
            ));
        }
    }
    for n in present {
        txn.drop_table(n)?;
    }
    Ok(command("DROP TABLE"))
}

/// TRUNCATE names: checks every name first, then truncates.
///
/// # Errors
/// 42P01 for a missing table; the engine's errors.
pub(crate) fn truncate(txn: &mut dyn Transaction, names: &[String]) -> Result<Output> {
    for n in names {
        if txn.table(n)?.is_none() {
            return Err(undefined_table(n));
        }
    }
    for n in names {
        txn.truncate(n)?;
    }
    Ok(command("TRUNCATE TABLE"))
}

/// ALTER TABLE table ADD PRIMARY KEY (columns). The index build shows in
/// `pg_stat_progress_create_index` (as PostgreSQL's, command `CREATE INDEX`) while it runs,
/// if `progress` is given.
///
/// # Errors
/// 42P01, 42703 for unknown names; the engine's errors (23505, 23502, 42P16).
pub(crate) fn add_primary_key(
    txn: &mut dyn Transaction,
    table: &str,
    columns: &[String],
    progress: Option<&Reporter>,
) -> Result<Output> {
    let def = txn.table(table)?.ok_or_else(|| undefined_table(table))?;
    let mut idx = Vec::with_capacity(columns.len());
    for c in columns {
        idx.push(def.column_index(c).ok_or_else(|| {
            Error::user(
                SqlState::UNDEFINED_COLUMN,
                format!("column \"{c}\" of relation \"{table}\" does not exist"),
            )
        })?);
    }
    let entry = match progress {
        Some(p) => Some(p.create_index(txn.table_oid(table)?.unwrap_or(0))),
        None => None,
    };
    let installed = entry.as_ref().map(|e| e.install());
    let r = txn.add_primary_key(table, idx);
    drop(installed);
    drop(entry);
    r?;
    Ok(command("ALTER TABLE"))
}
