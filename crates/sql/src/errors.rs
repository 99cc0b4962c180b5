//! Errors the planner, the executor and the session raise alike.

use walnut_common::{Error, SqlState};

/// 42P01 `relation "name" does not exist`.
pub(crate) fn undefined_table(name: &str) -> Error {
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
