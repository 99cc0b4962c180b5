//! Errors the planner, the executor and the session raise alike.

use walnut_common::{Error, SqlState};

/// 42P01 `relation "name" does not exist`.
pub fn undefined_table(name: &str) -> Error {
    Error::user(
        SqlState::UNDEFINED_TABLE,
        format!("relation \"{name}\" does not exist"),
    )
}

/// 42703 `column "name" does not exist`.
pub(crate) fn undefined_column(name: &str) -> Error {
    Error::user(
        SqlState::UNDEFINED_COLUMN,
        format!("column \"{name}\" does not exist"),
    )
}

/// 42703 `column "c" of relation "t" does not exist`: a column named by a statement that
/// names its table (INSERT's or COPY's column list, ALTER TABLE).
pub(crate) fn undefined_column_of(table: &str, column: &str) -> Error {
    Error::user(
        SqlState::UNDEFINED_COLUMN,
        format!("column \"{column}\" of relation \"{table}\" does not exist"),
    )
}
