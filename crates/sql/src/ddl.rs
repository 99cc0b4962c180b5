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

/// True if a table or a sequence is named `name`.
fn relation_exists(txn: &mut dyn Transaction, name: &str) -> Result<bool> {
    Ok(txn.table(name)?.is_some() || txn.sequence_exists(name)?)
}

fn already_exists(name: &str) -> Notice {
    Notice::new(
        "NOTICE",
        SqlState::DUPLICATE_TABLE,
        format!("relation \"{name}\" already exists, skipping"),
    )
}

/// `name` as SQL text: an identifier quoted unless it is lower case letters, digits and `_`
/// (PostgreSQL's `quote_identifier`, without its keyword check).
fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// CREATE TABLE [IF NOT EXISTS]. Each `serial` or identity column (positions `serials`, with
/// the sequence options an identity column gave) first gets its sequence, of the column's type,
/// owned by the column, named `table_column_seq` or, if a
/// relation has that name, `table_column_seq1`, `2`, ... (PostgreSQL's `ChooseRelationName`),
/// and then `nextval('name'::regclass)` as its default.
///
/// # Errors
/// 42P07 if the table exists (without IF NOT EXISTS); the engine's errors.
pub(crate) fn create_table(
    txn: &mut dyn Transaction,
    def: &TableDef,
    serials: &[(usize, crate::sequence::SeqOptions)],
    if_not_exists: bool,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    if if_not_exists && relation_exists(txn, &def.name)? {
        notices.push(already_exists(&def.name));
        return Ok(command("CREATE TABLE"));
    }
    if relation_exists(txn, &def.name)? {
        return Err(Error::user(
            SqlState::DUPLICATE_TABLE,
            format!("relation \"{}\" already exists", def.name),
        ));
    }
    let mut def = def.clone();
    for (i, opts) in serials {
        let i = *i;
        let col = &def.columns[i];
        let base = format!("{}_{}_seq", def.name, col.name);
        let mut name = base.clone();
        let mut n = 0;
        while relation_exists(txn, &name)? {
            n += 1;
            name = format!("{base}{n}");
        }
        let opts = crate::sequence::SeqOptions {
            ty: Some(col.ty.clone()),
            ..opts.clone()
        };
        let owner = Some((def.name.clone(), col.name.clone()));
        txn.create_sequence(crate::sequence::sequence_def(name.clone(), &opts, owner)?)?;
        def.columns[i].default = Some(format!(
            "nextval('{}'::regclass)",
            quote_ident(&name).replace('\'', "''")
        ));
    }
    txn.create_table(def)?;
    Ok(command("CREATE TABLE"))
}

/// CREATE SEQUENCE [IF NOT EXISTS].
///
/// # Errors
/// 42P07 if a relation has the name (without IF NOT EXISTS); the engine's errors.
pub(crate) fn create_sequence(
    txn: &mut dyn Transaction,
    def: &walnut_common::SequenceDef,
    if_not_exists: bool,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    if if_not_exists && relation_exists(txn, &def.name)? {
        notices.push(already_exists(&def.name));
    } else {
        txn.create_sequence(def.clone())?;
    }
    Ok(command("CREATE SEQUENCE"))
}

/// What DROP drops.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropKind {
    Table,
    Sequence,
}

/// DROP TABLE or DROP SEQUENCE [IF EXISTS] names: checks every name first, then drops.
///
/// # Errors
/// 42P01 for a missing relation (without IF EXISTS); 42809 for a relation of the other kind;
/// the engine's errors (2BP01 for a sequence a column owns).
pub(crate) fn drop_relations(
    txn: &mut dyn Transaction,
    kind: DropKind,
    names: &[String],
    if_exists: bool,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    let word = match kind {
        DropKind::Table => "table",
        DropKind::Sequence => "sequence",
    };
    let mut present = Vec::new();
    for n in names {
        let (is_table, is_sequence) = (txn.table(n)?.is_some(), txn.sequence_exists(n)?);
        let (is, is_other) = match kind {
            DropKind::Table => (is_table, is_sequence),
            DropKind::Sequence => (is_sequence, is_table),
        };
        if is {
            present.push(n);
        } else if is_other {
            // (PostgreSQL adds the HINT "Use DROP SEQUENCE to remove a sequence.".)
            return Err(Error::user(
                SqlState::WRONG_OBJECT_TYPE,
                format!("\"{n}\" is not a {word}"),
            ));
        } else if if_exists {
            notices.push(Notice::new(
                "NOTICE",
                SqlState::SUCCESSFUL_COMPLETION,
                format!("{word} \"{n}\" does not exist, skipping"),
            ));
        } else {
            return Err(Error::user(
                SqlState::UNDEFINED_TABLE,
                format!("{word} \"{n}\" does not exist"),
            ));
        }
    }
    for n in present {
        match kind {
            DropKind::Table => txn.drop_table(n)?,
            DropKind::Sequence => txn.drop_sequence(n)?,
        }
    }
    Ok(command(if kind == DropKind::Table {
        "DROP TABLE"
    } else {
        "DROP SEQUENCE"
    }))
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
