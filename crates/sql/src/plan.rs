//! The plan: what the planner ([`crate::planner`]) produces and the executor
//! ([`crate::exec`]) consumes. This is the seam between planning and executing: names are
//! resolved to positions (`Expr::Col(i)`), parameters to `Expr::Param(n)`, every operator's
//! result type is fixed, and the access path is chosen. The executor never looks at a name.
//!
//! A second engine for the SQL this fast path does not cover (joins, CTEs, window functions,
//! catalog queries) is to sit beside it at this seam: the planner decides which statements are
//! fast-path plans, and the session hands the others to that engine.

use crate::expr::Expr;
use crate::storage::Isolation;
use crate::types::ColumnDesc;
use std::sync::Arc;
use walnut_common::{DataType, TableDef};

/// The transaction modes a `BEGIN`, `START TRANSACTION` or `SET TRANSACTION` names (`None`:
/// not named).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TxnModes {
    /// `ISOLATION LEVEL ...`.
    pub isolation: Option<Isolation>,
    /// `READ ONLY` (true) or `READ WRITE` (false).
    pub read_only: Option<bool>,
}

/// A planned statement.
#[derive(Debug)]
pub(crate) enum Plan {
    Select(Box<SelectPlan>),
    Insert(InsertPlan),
    Update(UpdatePlan),
    Delete(DeletePlan),
    CreateTable {
        def: TableDef,
        if_not_exists: bool,
        /// The `serial` and identity columns, with their sequences' options: each gets a
        /// sequence, named when the statement runs, and `nextval` of it as its default.
        serials: Vec<(usize, crate::sequence::SeqOptions)>,
    },
    CreateSequence {
        def: walnut_common::SequenceDef,
        if_not_exists: bool,
    },
    DropSequences {
        names: Vec<String>,
        if_exists: bool,
    },
    DropTable {
        names: Vec<String>,
        if_exists: bool,
    },
    Truncate {
        names: Vec<String>,
    },
    AddPrimaryKey {
        table: String,
        columns: Vec<String>,
    },
    /// `ALTER SEQUENCE [IF EXISTS] name options`: the options given (the rest keep their
    /// values), `RESTART` (`Some(None)`: to START), `OWNED BY` (`Some(None)`: NONE).
    AlterSequence {
        name: String,
        if_exists: bool,
        options: crate::sequence::SeqOptions,
        restart: Option<Option<i64>>,
        owned_by: Option<Option<(String, String)>>,
    },
    /// `ALTER TABLE | SEQUENCE name OWNER TO role`: walnut has one role, the session's, so
    /// this checks the relation and the role and changes nothing.
    AlterOwner {
        name: String,
        if_exists: bool,
        sequence: bool,
        role: String,
    },
    /// `ALTER TABLE [IF EXISTS] table ALTER COLUMN column ADD GENERATED ... AS IDENTITY [(...)]`:
    /// the sequence named `sequence` (or chosen as for serial) with `options`.
    AddIdentity {
        table: String,
        if_exists: bool,
        column: String,
        identity: walnut_common::Identity,
        sequence: Option<String>,
        options: crate::sequence::SeqOptions,
    },
    /// `ALTER TABLE table ALTER COLUMN column SET DEFAULT expr | DROP DEFAULT` (`default`:
    /// the expression's text, checked against the column's type; `None`: DROP).
    AlterColumnDefault {
        table: String,
        if_exists: bool,
        column: String,
        default: Option<String>,
    },
    /// `BEGIN` / `START TRANSACTION`, with the modes it names.
    Begin {
        modes: TxnModes,
    },
    Commit,
    Rollback,
    /// `SET [LOCAL] name = value`; `value: None` is DEFAULT.
    Set {
        name: String,
        value: Option<String>,
        local: bool,
    },
    /// `SET TRANSACTION [ISOLATION LEVEL ...] [READ ONLY | READ WRITE]`, or `SET
    /// transaction_isolation` / `transaction_read_only`: the modes named.
    SetTransaction {
        modes: TxnModes,
    },
    /// `RESET name` / `RESET ALL` (None).
    /// `DISCARD ALL | PLANS | SEQUENCES | TEMP`.
    Discard(Discard),
    Reset {
        name: Option<String>,
    },
    /// `ALTER SYSTEM SET name = value` / `ALTER SYSTEM RESET name` (`value: None`; name `all`
    /// for RESET ALL).
    AlterSystem {
        name: String,
        value: Option<String>,
    },
    /// `SHOW name` / `SHOW ALL` (None).
    Show {
        name: Option<String>,
    },
    /// `VACUUM [ ( options ) ] [ FULL ] [ FREEZE ] [ VERBOSE ] [ ANALYZE ] [ table [, ...] ]`
    /// and `ANALYZE` (which walnut accepts and does nothing for: it keeps no statistics).
    Vacuum {
        analyze_only: bool,
        /// INFO messages with what each table's VACUUM did.
        verbose: bool,
        /// `FREEZE`: freeze as `vacuum_freeze_min_age = 0` would.
        freeze: bool,
        /// The tables named (the schema part dropped); none = every table.
        tables: Vec<String>,
    },
    Checkpoint,
    Copy(CopyPlan),
    Empty,
}

/// What `DISCARD` drops (PostgreSQL's `DiscardMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discard {
    /// Everything below, and the session's settings (RESET ALL) and its prepared statements
    /// and portals (the front end's).
    All,
    /// Cached plans.
    Plans,
    /// The session's sequence state: `currval`, `lastval` and values taken ahead.
    Sequences,
    /// Temporary tables (walnut has none).
    Temp,
}

impl Plan {
    /// The command a read-only server (a standby in recovery) refuses, as PostgreSQL's
    /// `PreventCommandIfReadOnly` names it; `None` if the plan writes nothing.
    pub(crate) fn write_command(&self) -> Option<&'static str> {
        Some(match self {
            Plan::Insert(_) => "INSERT",
            Plan::Update(_) => "UPDATE",
            Plan::Delete(_) => "DELETE",
            Plan::CreateTable { .. } => "CREATE TABLE",
            Plan::DropTable { .. } => "DROP TABLE",
            Plan::CreateSequence { .. } => "CREATE SEQUENCE",
            Plan::DropSequences { .. } => "DROP SEQUENCE",
            Plan::Truncate { .. } => "TRUNCATE TABLE",
            Plan::AddPrimaryKey { .. }
            | Plan::AddIdentity { .. }
            | Plan::AlterColumnDefault { .. }
            | Plan::AlterOwner {
                sequence: false, ..
            } => "ALTER TABLE",
            Plan::AlterSequence { .. } | Plan::AlterOwner { sequence: true, .. } => {
                "ALTER SEQUENCE"
            }
            Plan::Copy(_) => "COPY FROM",
            _ => return None,
        })
    }

    /// Tables the plan was compiled against (checked before each execution).
    pub(crate) fn table_deps(&self) -> Option<&Arc<TableDef>> {
        match self {
            Plan::Select(s) => match &s.source {
                Source::Table(def) => Some(def),
                _ => None,
            },
            Plan::Insert(p) => Some(&p.table),
            Plan::Update(p) => Some(&p.table),
            Plan::Delete(p) => Some(&p.table),
            _ => None,
        }
    }

    /// Result columns, for Describe.
    pub(crate) fn columns(&self) -> Option<Arc<Vec<ColumnDesc>>> {
        match self {
            Plan::Select(s) => Some(s.columns.clone()),
            Plan::Show { name: Some(name) } => Some(Arc::new(vec![ColumnDesc {
                name: crate::guc::registry()
                    .find(name)
                    .map(|d| d.name.to_string())
                    .unwrap_or_else(|| name.clone()),
                ty: DataType::Text,
            }])),
            Plan::Show { name: None } => Some(show_all_columns()),
            Plan::Insert(InsertPlan {
                returning: Some(r), ..
            })
            | Plan::Update(UpdatePlan {
                returning: Some(r), ..
            })
            | Plan::Delete(DeletePlan {
                returning: Some(r), ..
            }) => Some(r.columns.clone()),
            _ => None,
        }
    }
}

/// Columns of `SHOW ALL`.
pub(crate) fn show_all_columns() -> Arc<Vec<ColumnDesc>> {
    Arc::new(
        ["name", "setting", "description"]
            .iter()
            .map(|n| ColumnDesc {
                name: n.to_string(),
                ty: DataType::Text,
            })
            .collect(),
    )
}

/// `COPY table [(columns)] FROM STDIN` options.
#[derive(Debug, Clone)]
pub(crate) struct CopyPlan {
    pub table: String,
    pub columns: Option<Vec<String>>,
    pub delimiter: u8,
    pub null: String,
}

/// Where a SELECT's rows come from.
#[derive(Debug)]
pub(crate) enum Source {
    /// No FROM: one empty row.
    None,
    Table(Arc<TableDef>),
    /// `generate_series(start, stop [, step])`, one column of type `ty`.
    Series {
        start: Expr,
        stop: Expr,
        step: Option<Expr>,
        ty: DataType,
    },
    /// An engine system view.
    View(String),
}

/// How a table is read.
#[derive(Debug, Clone)]
pub(crate) enum Access {
    Full,
    /// Primary-key range: equality values on a key prefix, then an optional range on the next
    /// key column (`(expr, inclusive)`).
    Index {
        eq: Vec<Expr>,
        lo: Option<(Expr, bool)>,
        hi: Option<(Expr, bool)>,
        key_types: Vec<DataType>,
    },
}

/// Aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AggFunc {
    CountStar,
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

/// One aggregate call: its function, argument (over the input row) and result type.
#[derive(Debug, Clone)]
pub(crate) struct AggCall {
    pub func: AggFunc,
    pub arg: Option<Expr>,
    pub ty: DataType,
}

/// Grouping: group keys and aggregates over the input row. The *aggregate row* the outputs see is
/// `[group values..., aggregate results...]`.
#[derive(Debug)]
pub(crate) struct AggPlan {
    pub groups: Vec<Expr>,
    pub calls: Vec<AggCall>,
    pub having: Option<Expr>,
}

/// One ORDER BY key, over the output-side row (input row, or aggregate row).
#[derive(Debug)]
pub(crate) struct SortKey {
    pub expr: Expr,
    pub desc: bool,
    pub nulls_first: bool,
}

/// A SELECT.
#[derive(Debug)]
pub(crate) struct SelectPlan {
    pub source: Source,
    pub access: Access,
    pub filter: Option<Expr>,
    pub agg: Option<AggPlan>,
    pub outputs: Vec<Expr>,
    pub sort: Vec<SortKey>,
    pub limit: Option<Expr>,
    pub offset: Option<Expr>,
    pub columns: Arc<Vec<ColumnDesc>>,
}

/// A `RETURNING` list (PostgreSQL's `transformReturningList`): expressions over a whole row
/// of the table, the new row for INSERT and UPDATE, the old one for DELETE.
#[derive(Debug)]
pub(crate) struct Returning {
    pub outputs: Vec<Expr>,
    pub columns: Arc<Vec<ColumnDesc>>,
}

/// An INSERT: each source row has one value per entry of `targets` (column positions).
#[derive(Debug)]
pub(crate) struct InsertPlan {
    pub table: Arc<TableDef>,
    pub targets: Vec<usize>,
    /// The `DEFAULT` expressions of the columns not in `targets` that have one, by position;
    /// evaluated for every row (each `nextval` or `now()` call is made per row).
    pub defaults: Vec<(usize, Expr)>,
    /// The table's CHECK constraints, bound over its row, in name order.
    pub checks: Vec<(String, Expr)>,
    pub source: InsertSource,
    pub returning: Option<Returning>,
}

/// Rows to insert.
#[derive(Debug)]
pub(crate) enum InsertSource {
    Values(Vec<Vec<Expr>>),
    Select(Box<SelectPlan>),
}

/// An UPDATE: `sets` are (column, expression over the old row).
#[derive(Debug)]
pub(crate) struct UpdatePlan {
    pub table: Arc<TableDef>,
    pub access: Access,
    pub filter: Option<Expr>,
    pub sets: Vec<(usize, Expr)>,
    /// The table's CHECK constraints, bound over its row, in name order.
    pub checks: Vec<(String, Expr)>,
    pub returning: Option<Returning>,
}

/// A DELETE.
#[derive(Debug)]
pub(crate) struct DeletePlan {
    pub table: Arc<TableDef>,
    pub access: Access,
    pub filter: Option<Expr>,
    pub returning: Option<Returning>,
}
