//! Table definitions, shared by the catalog (storage) and the SQL layer.

use crate::value::DataType;

/// One column of a table.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDef {
    /// Column name, lower-cased unless it was quoted.
    pub name: String,
    /// Column type.
    pub ty: DataType,
    /// NOT NULL constraint (always true for primary-key columns).
    pub not_null: bool,
    /// `DEFAULT` expression, as SQL text: sqlparser's rendering of the expression as written,
    /// checked to parse back to it (PostgreSQL keeps `pg_attrdef.adbin` and shows it with
    /// `pg_get_expr`, with its implicit casts). It was bound and checked against the column's
    /// type when the table was created, and is bound again when a statement that needs it is
    /// planned. None: NULL.
    pub default: Option<String>,
}

/// A table's definition as stored in the catalog.
#[derive(Clone, Debug, PartialEq)]
pub struct TableDef {
    /// Table name, lower-cased unless it was quoted.
    pub name: String,
    /// Columns in order.
    pub columns: Vec<ColumnDef>,
    /// Primary-key columns (indexes into `columns`), if the table has one.
    pub primary_key: Option<Vec<usize>>,
    /// `fillfactor` storage parameter, percent (10..=100); heap inserts leave the rest free.
    pub fillfactor: u8,
    /// `autovacuum_enabled` storage parameter: false keeps autovacuum from vacuuming the table
    /// for its dead rows (a VACUUM to freeze its old xids still runs, as in PostgreSQL).
    pub autovacuum_enabled: bool,
    /// CHECK constraints, sorted by name (the order PostgreSQL checks them in).
    pub checks: Vec<CheckDef>,
}

/// A CHECK constraint (PostgreSQL's `pg_constraint` row with `contype = 'c'`).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckDef {
    /// Constraint name, unique among the table's constraints.
    pub name: String,
    /// The boolean expression over the table's columns, as SQL text (sqlparser's rendering,
    /// checked to parse back to the expression written), bound again when a statement that
    /// writes the table is planned. A row passes unless it evaluates to false (NULL passes).
    pub expr: String,
}

impl TableDef {
    /// Position of the column named `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Column types in order.
    pub fn types(&self) -> Vec<DataType> {
        self.column_types().cloned().collect()
    }

    /// Column types in order, borrowed (what `value::encode_row` takes).
    pub fn column_types(&self) -> impl Iterator<Item = &DataType> {
        self.columns.iter().map(|c| &c.ty)
    }
}

/// A sequence's definition as stored in the catalog (PostgreSQL's `pg_sequence` row; the
/// options of `CREATE SEQUENCE`, checked by the SQL layer as PostgreSQL's `init_params` checks
/// them). Its state (the last value, and how many values are logged ahead) lives in its
/// relation's one page (storage DESIGN.md, "Sequences").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceDef {
    /// Sequence name, lower-cased unless it was quoted; tables and sequences share one
    /// namespace.
    pub name: String,
    /// `AS`: `Int2`, `Int4` or `Int8`; bounds the default MINVALUE and MAXVALUE.
    pub ty: DataType,
    /// `START WITH`: the first value `nextval` returns.
    pub start: i64,
    /// `INCREMENT BY`: not zero; negative for a descending sequence.
    pub increment: i64,
    /// `MINVALUE`, below `max`.
    pub min: i64,
    /// `MAXVALUE`.
    pub max: i64,
    /// `CACHE`: values a session takes at a time (at least 1).
    pub cache: i64,
    /// `CYCLE`: wrap from one bound to the other instead of failing with 2200H.
    pub cycle: bool,
    /// The `(table, column)` whose `serial` default created it (`OWNED BY`): DROP TABLE drops
    /// it too.
    pub owned_by: Option<(String, String)>,
}
