//! The configuration-parameter helpers the front end uses, from the SQL layer's registry
//! (`walnut_sql::guc`): `parse_conf` (postgresql.conf syntax), `check` (validate and
//! normalise), `value_as_i64` (base units) and `value_as_bool`.

pub(crate) use walnut_sql::guc::{check, parse_conf, value_as_i64};
