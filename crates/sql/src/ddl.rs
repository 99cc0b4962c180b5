//! Execution of the DDL walnut's fast path runs: CREATE TABLE, DROP TABLE, TRUNCATE and ALTER
//! TABLE ... ADD PRIMARY KEY, with PostgreSQL's notices for `IF [NOT] EXISTS`.

use crate::errors::{undefined_column_of, undefined_table};
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
pub(crate) fn quote_ident(name: &str) -> String {
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
        let col = &def.columns[*i];
        let default = create_owned_sequence(txn, &def.name, col, None, opts)?;
        def.columns[*i].default = Some(default);
    }
    txn.create_table(def)?;
    Ok(command("CREATE TABLE"))
}

/// Creates the sequence that column `col` of table `table` owns (a serial or identity
/// column's), of the column's type, with `opts`, named `name` or else `table_column_seq` or,
/// if a relation has that name, `table_column_seq1`, `2`, ... (PostgreSQL's
/// `ChooseRelationName`). Returns the column's default, `nextval('name'::regclass)`.
///
/// # Errors
/// 42P07 if `name` is taken; 22023 from the options; the engine's errors.
fn create_owned_sequence(
    txn: &mut dyn Transaction,
    table: &str,
    col: &walnut_common::ColumnDef,
    name: Option<&str>,
    opts: &crate::sequence::SeqOptions,
) -> Result<String> {
    let name = match name {
        Some(n) => n.to_string(),
        None => {
            let base = format!("{table}_{}_seq", col.name);
            let mut name = base.clone();
            let mut n = 0;
            while relation_exists(txn, &name)? {
                n += 1;
                name = format!("{base}{n}");
            }
            name
        }
    };
    let opts = crate::sequence::SeqOptions {
        ty: Some(col.ty.clone()),
        ..opts.clone()
    };
    let owner = Some((table.to_string(), col.name.clone()));
    txn.create_sequence(crate::sequence::sequence_def(name.clone(), &opts, owner)?)?;
    Ok(format!(
        "nextval('{}'::regclass)",
        quote_ident(&name).replace('\'', "''")
    ))
}

/// The NOTICE of an ALTER ... IF EXISTS of a missing relation.
fn skipping(name: &str) -> Notice {
    Notice::new(
        "NOTICE",
        SqlState::SUCCESSFUL_COMPLETION,
        format!("relation \"{name}\" does not exist, skipping"),
    )
}

/// 42809 `"name" is not a sequence` (or `a table`).
fn wrong_kind(name: &str, word: &str) -> Error {
    Error::user(
        SqlState::WRONG_OBJECT_TYPE,
        format!("\"{name}\" is not a {word}"),
    )
}

/// ALTER SEQUENCE [IF EXISTS] name options: the options merged into the sequence's definition
/// ([`crate::sequence::altered_def`]), `OWNED BY` checked against the table's columns, then
/// `RESTART` (to START without a value) checked against the new bounds.
///
/// # Errors
/// 42P01 missing (without IF EXISTS); 42809 for a table; 42703 for an `OWNED BY` column the
/// table lacks; 22023 from the options; the engine's errors.
pub(crate) fn alter_sequence(
    txn: &mut dyn Transaction,
    name: &str,
    if_exists: bool,
    options: &crate::sequence::SeqOptions,
    restart: Option<Option<i64>>,
    owned_by: &Option<Option<(String, String)>>,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    let Some(old) = txn.sequence_def(name)? else {
        if txn.table(name)?.is_some() {
            return Err(wrong_kind(name, "sequence"));
        }
        if if_exists {
            notices.push(skipping(name));
            return Ok(command("ALTER SEQUENCE"));
        }
        return Err(undefined_table(name));
    };
    let mut def = crate::sequence::altered_def(&old, options)?;
    if let (Some(_), Some((t, c))) = (owned_by, &old.owned_by) {
        let identity = txn.table(t)?.is_some_and(|d| {
            d.column_index(c)
                .is_some_and(|i| d.columns[i].identity.is_some())
        });
        if identity {
            return Err(Error::user(
                SqlState::FEATURE_NOT_SUPPORTED,
                "cannot change ownership of identity sequence",
            )
            .with_detail(format!("Sequence \"{name}\" is linked to table \"{t}\".")));
        }
    }
    if let Some(owner) = owned_by {
        if let Some((t, c)) = owner {
            if txn.table(t)?.is_none() && txn.sequence_exists(t)? {
                return Err(Error::user(
                    SqlState::WRONG_OBJECT_TYPE,
                    format!("referenced relation \"{t}\" is not a table or foreign table"),
                ));
            }
            let table = txn.table(t)?.ok_or_else(|| undefined_table(t))?;
            if table.column_index(c).is_none() {
                return Err(undefined_column_of(t, c));
            }
        }
        def.owned_by = owner.clone();
    }
    let restart = restart.map(|v| v.unwrap_or(def.start));
    txn.alter_sequence(name, def, restart)?;
    Ok(command("ALTER SEQUENCE"))
}

/// ALTER TABLE | SEQUENCE name OWNER TO role. walnut has one role, `postgres`, which owns
/// everything; this checks that the relation is of the kind named and that the role is that
/// one (by name or as `CURRENT_USER`, `CURRENT_ROLE`, `SESSION_USER`), and changes nothing.
///
/// # Errors
/// 42P01 missing (without IF EXISTS); 42809 a relation of the other kind; 42704 another role.
pub(crate) fn alter_owner(
    txn: &mut dyn Transaction,
    name: &str,
    if_exists: bool,
    sequence: bool,
    role: &str,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    let tag = if sequence {
        "ALTER SEQUENCE"
    } else {
        "ALTER TABLE"
    };
    let (is_table, is_sequence) = (txn.table(name)?.is_some(), txn.sequence_exists(name)?);
    // ALTER TABLE of a sequence works in PostgreSQL; ALTER SEQUENCE of a table is 42809.
    if !is_table && !is_sequence {
        if if_exists {
            notices.push(skipping(name));
            return Ok(command(tag));
        }
        return Err(undefined_table(name));
    }
    if sequence && !is_sequence {
        return Err(wrong_kind(name, "sequence"));
    }
    if !matches!(
        role,
        "postgres" | "current_user" | "current_role" | "session_user"
    ) {
        return Err(Error::user(
            SqlState::UNDEFINED_OBJECT,
            format!("role \"{role}\" does not exist"),
        ));
    }
    Ok(command(tag))
}

/// ALTER TABLE [IF EXISTS] table ALTER COLUMN column ADD GENERATED {ALWAYS | BY DEFAULT} AS
/// IDENTITY [(options)] (PostgreSQL's `ATExecAddIdentity`): the column must be NOT NULL, have
/// no default and not be an identity already; it gets an owned sequence (named `sequence`, or
/// chosen as for serial) and, as its default, `nextval` of it.
///
/// # Errors
/// 42P01, 42703 unknown names; 55000 for a column that is nullable, has a default or is an
/// identity; 22023 for a type other than smallint, integer or bigint, or bad options; 42P07
/// if `sequence` is taken.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_identity(
    txn: &mut dyn Transaction,
    table: &str,
    if_exists: bool,
    column: &str,
    identity: walnut_common::Identity,
    sequence: Option<&str>,
    options: &crate::sequence::SeqOptions,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    let Some(def) = txn.table(table)? else {
        if if_exists {
            notices.push(skipping(table));
            return Ok(command("ALTER TABLE"));
        }
        return Err(undefined_table(table));
    };
    let i = def
        .column_index(column)
        .ok_or_else(|| undefined_column_of(table, column))?;
    let col = &def.columns[i];
    let prereq = |what: &str| {
        Err(Error::user(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("column \"{column}\" of relation \"{table}\" {what}"),
        ))
    };
    // In PostgreSQL's order: the type and the sequence (`transformAlterTableStmt`), then the
    // column's state (`ATExecAddIdentity`).
    if !col.ty.is_integer() {
        return Err(Error::user(
            SqlState::INVALID_PARAMETER_VALUE,
            "identity column type must be smallint, integer, or bigint",
        ));
    }
    let default = create_owned_sequence(txn, table, col, sequence, options)?;
    if !col.not_null {
        return prereq("must be declared NOT NULL before identity can be added");
    }
    if col.identity.is_some() {
        return prereq("is already an identity column");
    }
    if col.default.is_some() {
        return prereq("already has a default value");
    }
    txn.alter_table_def(table, &mut |d| {
        let c = &mut d.columns[i];
        c.identity = Some(identity);
        c.default = Some(default.clone());
        Ok(())
    })?;
    Ok(command("ALTER TABLE"))
}

/// ALTER TABLE table ALTER COLUMN column SET DEFAULT (`default`, the expression's text) or
/// DROP DEFAULT (`None`). The expression is bound against the column as CREATE TABLE binds
/// one (PostgreSQL's `cookDefault`), here rather than when planning, as the plan of this
/// text may be a cached one.
///
/// # Errors
/// 42P01 (without IF EXISTS), 42703 unknown names; 42809 for a sequence; 42601 for an
/// identity column; the expression's binding errors (42804, 0A000, ...); the engine's.
pub(crate) fn alter_column_default(
    txn: &mut dyn Transaction,
    table: &str,
    if_exists: bool,
    column: &str,
    default: &Option<String>,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    if txn.table(table)?.is_none() {
        if txn.sequence_exists(table)? {
            return Err(wrong_kind(table, "table"));
        }
        if if_exists {
            notices.push(skipping(table));
            return Ok(command("ALTER TABLE"));
        }
        return Err(undefined_table(table));
    }
    txn.alter_table_def(table, &mut |d| {
        let i = d
            .column_index(column)
            .ok_or_else(|| undefined_column_of(table, column))?;
        let col = &mut d.columns[i];
        if col.identity.is_some() {
            // (PostgreSQL adds the HINT "Use ALTER TABLE ... ALTER COLUMN ... DROP IDENTITY
            // instead.")
            return Err(Error::syntax(format!(
                "column \"{column}\" of relation \"{table}\" is an identity column"
            )));
        }
        col.default = default.clone();
        crate::planner::column_default(col)?;
        Ok(())
    })?;
    Ok(command("ALTER TABLE"))
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
        idx.push(
            def.column_index(c)
                .ok_or_else(|| undefined_column_of(table, c))?,
        );
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
