//! `pg_stat_replication`: one row per walsender, with PostgreSQL 18's columns. walnut has no
//! `inet`, `interval` or `timestamptz` types yet: `client_addr` is text, the lags are text in
//! `interval`'s output format (`00:00:00.001234`), and the times are `timestamp` (UTC).
//! `sync_priority` is 0 and `sync_state` `async`: synchronous replication is not built yet.

use std::time::Duration;
use walnut_common::{ColumnDef, DataType, Value};
use walnut_wal::senders::WalSndSnapshot;

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
    }
}

/// A duration as PostgreSQL prints an interval under 24 hours: `HH:MM:SS.ffffff`.
fn interval(d: Duration) -> String {
    let us = d.as_micros();
    let s = us / 1_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        us % 1_000_000
    )
}

fn lsn(v: u64) -> Value {
    if v == 0 {
        Value::Null
    } else {
        Value::PgLsn(v)
    }
}

/// µs since the Unix epoch as a `timestamp` value.
fn unix_us(us: i64) -> Value {
    Value::Timestamp(us - walnut_common::value::PG_EPOCH_OFFSET_US)
}

/// The columns and rows of `pg_stat_replication` for these walsenders.
pub(crate) fn pg_stat_replication(senders: &[WalSndSnapshot]) -> (Vec<ColumnDef>, Vec<Vec<Value>>) {
    use DataType::{Int4, Int8, PgLsn, Text, Timestamp};
    let cols = vec![
        col("pid", Int4),
        col("usesysid", Int8),
        col("usename", Text),
        col("application_name", Text),
        col("client_addr", Text),
        col("client_hostname", Text),
        col("client_port", Int4),
        col("backend_start", Timestamp),
        col("backend_xmin", Int8),
        col("state", Text),
        col("sent_lsn", PgLsn),
        col("write_lsn", PgLsn),
        col("flush_lsn", PgLsn),
        col("replay_lsn", PgLsn),
        col("write_lag", Text),
        col("flush_lag", Text),
        col("replay_lag", Text),
        col("sync_priority", Int4),
        col("sync_state", Text),
        col("reply_time", Timestamp),
    ];
    let lag = |d: Option<Duration>| d.map_or(Value::Null, |d| Value::Text(interval(d)));
    let rows = senders
        .iter()
        .map(|s| {
            let start = s
                .backend_start
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            vec![
                Value::Int4(s.pid),
                Value::Int8(10),
                Value::Text(s.user.clone()),
                Value::Text(s.application_name.clone()),
                s.client_addr
                    .map_or(Value::Null, |a| Value::Text(a.to_string())),
                Value::Null,
                Value::Int4(i32::from(s.client_port)),
                unix_us(start),
                Value::Null,
                Value::Text(s.state.name().to_string()),
                lsn(s.sent_lsn),
                lsn(s.write_lsn),
                lsn(s.flush_lsn),
                lsn(s.replay_lsn),
                lag(s.write_lag),
                lag(s.flush_lag),
                lag(s.replay_lag),
                Value::Int4(0),
                Value::Text("async".into()),
                s.reply_time_us.map_or(Value::Null, unix_us),
            ]
        })
        .collect();
    (cols, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_print_as_postgresql_does() {
        assert_eq!(interval(Duration::from_micros(1234)), "00:00:00.001234");
        assert_eq!(interval(Duration::from_secs(3723)), "01:02:03.000000");
    }
}
