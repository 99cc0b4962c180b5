//! `pg_stat_replication`: one row per walsender, with PostgreSQL 18's columns. walnut has no
//! `inet`, `interval` or `timestamptz` types yet: `client_addr` is text, the lags are text in
//! `interval`'s output format (`00:00:00.001234`), and the times are `timestamp` (UTC).
//! `sync_priority` and `sync_state` follow `synchronous_standby_names`.
//!
//! After PostgreSQL's columns come walnut's replay headroom, so that a query naming
//! PostgreSQL's columns, or `*` read by position, sees what it would on PostgreSQL:
//! `incoming_bytes_per_sec` (WAL sent to the standby per second, over the last second or
//! more), `apply_bytes_per_sec` and `apply_records_per_sec` (the apply capacity a walnut
//! standby reports: what it replays per second while it has WAL to replay; NULL from a client
//! that does not report it) and `apply_catchup_time` (the WAL sent and not yet replayed,
//! divided by that capacity: how long the standby needs to replay it, the figure
//! `max_standby_apply_lag` bounds).

use std::time::Duration;
use walnut_common::{ColumnDef, DataType, Value};
use walnut_wal::senders::{SyncState, WalSndSnapshot};

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        default: None,
        identity: None,
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
pub(crate) fn pg_stat_replication(
    senders: &[(WalSndSnapshot, usize, SyncState)],
) -> (Vec<ColumnDef>, Vec<Vec<Value>>) {
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
        col("incoming_bytes_per_sec", Int8),
        col("apply_bytes_per_sec", Int8),
        col("apply_records_per_sec", Int8),
        col("apply_catchup_time", Text),
    ];
    let int8 =
        |v: Option<u64>| v.map_or(Value::Null, |v| Value::Int8(v.min(i64::MAX as u64) as i64));
    let lag = |d: Option<Duration>| d.map_or(Value::Null, |d| Value::Text(interval(d)));
    let rows = senders
        .iter()
        .map(|(s, priority, sync)| {
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
                int8(s.backend_xmin),
                Value::Text(s.state.name().to_string()),
                lsn(s.sent_lsn),
                lsn(s.write_lsn),
                lsn(s.flush_lsn),
                lsn(s.replay_lsn),
                lag(s.write_lag),
                lag(s.flush_lag),
                lag(s.replay_lag),
                Value::Int4(*priority as i32),
                Value::Text(sync.name().into()),
                s.reply_time_us.map_or(Value::Null, unix_us),
                int8(Some(s.incoming_bytes_per_sec)),
                int8(s.apply_bytes_per_sec),
                int8(s.apply_records_per_sec),
                match s.apply_bytes_per_sec {
                    Some(cap) if s.replay_lsn != 0 => {
                        Value::Text(interval(Duration::from_secs_f64(
                            s.sent_lsn.saturating_sub(s.replay_lsn) as f64 / cap as f64,
                        )))
                    }
                    _ => Value::Null,
                },
            ]
        })
        .collect();
    (cols, rows)
}

/// The columns and rows of `pg_replication_slots` (PostgreSQL 18's columns) for these slots,
/// judged against the WAL's insert position `insert` and the limits `max_wal` and
/// `max_slot_keep` (bytes; `None`: no limit), as PostgreSQL's `GetWALAvailability`:
/// `wal_status` is `reserved` within `max_wal_size`, `extended` beyond it, `unreserved` past
/// `max_slot_wal_keep_size` (the next checkpoint invalidates it), `lost` once invalidated.
pub(crate) fn pg_replication_slots(
    slots: &[walnut_storage::slots::SlotInfo],
    insert: u64,
    max_wal: u64,
    max_slot_keep: Option<u64>,
) -> (Vec<ColumnDef>, Vec<Vec<Value>>) {
    use DataType::{Bool, Int4, Int8, PgLsn, Text, Timestamp};
    let cols = vec![
        col("slot_name", Text),
        col("plugin", Text),
        col("slot_type", Text),
        col("datoid", Int8),
        col("database", Text),
        col("temporary", Bool),
        col("active", Bool),
        col("active_pid", Int4),
        col("xmin", Int8),
        col("catalog_xmin", Int8),
        col("restart_lsn", PgLsn),
        col("confirmed_flush_lsn", PgLsn),
        col("wal_status", Text),
        col("safe_wal_size", Int8),
        col("two_phase", Bool),
        col("two_phase_at", PgLsn),
        col("inactive_since", Timestamp),
        col("conflicting", Bool),
        col("invalidation_reason", Text),
        col("failover", Bool),
        col("synced", Bool),
    ];
    let rows = slots
        .iter()
        .map(|s| {
            let behind = s.restart_lsn.map(|l| insert.saturating_sub(l.0));
            let status = match (s.invalidated, behind) {
                (Some(_), _) => Some("lost"),
                (None, None) => None,
                (None, Some(b)) if max_slot_keep.is_some_and(|m| b > m) => Some("unreserved"),
                (None, Some(b)) if b > max_wal => Some("extended"),
                (None, Some(_)) => Some("reserved"),
            };
            let safe = match (s.invalidated, behind, max_slot_keep) {
                (None, Some(b), Some(m)) => Value::Int8(m as i64 - b as i64),
                _ => Value::Null,
            };
            vec![
                Value::Text(s.name.clone()),
                Value::Null,
                Value::Text("physical".into()),
                Value::Null,
                Value::Null,
                Value::Bool(s.temporary),
                Value::Bool(s.active_pid.is_some()),
                s.active_pid.map_or(Value::Null, Value::Int4),
                Value::Null,
                Value::Null,
                s.restart_lsn.map_or(Value::Null, |l| Value::PgLsn(l.0)),
                Value::Null,
                status.map_or(Value::Null, |t| Value::Text(t.into())),
                safe,
                Value::Bool(false),
                Value::Null,
                Value::Null,
                Value::Null,
                s.invalidated
                    .map_or(Value::Null, |i| Value::Text(i.name().into())),
                Value::Bool(false),
                Value::Bool(false),
            ]
        })
        .collect();
    (cols, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_status_follows_the_limits() {
        use walnut_common::Lsn;
        use walnut_storage::slots::{Invalidation, SlotInfo};
        let slot = |name: &str, lsn: Option<u64>, inval| SlotInfo {
            name: name.into(),
            restart_lsn: lsn.map(Lsn),
            active_pid: None,
            invalidated: inval,
            temporary: false,
        };
        let slots = [
            slot("a", Some(900), None),
            slot("b", Some(500), None),
            slot("c", Some(100), None),
            slot("d", Some(100), Some(Invalidation::WalRemoved)),
            slot("e", None, None),
        ];
        let (cols, rows) = pg_replication_slots(&slots, 1000, 200, Some(800));
        let at = |name: &str| cols.iter().position(|c| c.name == name).unwrap();
        let status: Vec<_> = rows.iter().map(|r| r[at("wal_status")].to_text()).collect();
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            status,
            vec![
                s("reserved"),
                s("extended"),
                s("unreserved"),
                s("lost"),
                None
            ]
        );
        assert_eq!(rows[0][at("safe_wal_size")], Value::Int8(700));
        assert_eq!(rows[2][at("safe_wal_size")], Value::Int8(-100));
        assert_eq!(
            rows[3][at("invalidation_reason")],
            Value::Text("wal_removed".into())
        );
    }

    #[test]
    fn intervals_print_as_postgresql_does() {
        assert_eq!(interval(Duration::from_micros(1234)), "00:00:00.001234");
        assert_eq!(interval(Duration::from_secs(3723)), "01:02:03.000000");
    }
}

/// The columns and row of `pg_stat_wal_receiver` (PostgreSQL 18's): one row while a
/// walreceiver runs, none otherwise. `receiver` is its state and the (written, flushed)
/// positions; `pid` is 0 (the walreceiver is a thread of the server process).
pub(crate) fn pg_stat_wal_receiver(
    receiver: Option<(
        walnut_storage::standby::ReceiverInfo,
        (walnut_common::Lsn, walnut_common::Lsn),
    )>,
) -> (Vec<ColumnDef>, Vec<Vec<Value>>) {
    use DataType::{Int4, PgLsn, Text, Timestamp};
    let cols = vec![
        col("pid", Int4),
        col("status", Text),
        col("receive_start_lsn", PgLsn),
        col("receive_start_tli", Int4),
        col("written_lsn", PgLsn),
        col("flushed_lsn", PgLsn),
        col("received_tli", Int4),
        col("last_msg_send_time", Timestamp),
        col("last_msg_receipt_time", Timestamp),
        col("latest_end_lsn", PgLsn),
        col("latest_end_time", Timestamp),
        col("slot_name", Text),
        col("sender_host", Text),
        col("sender_port", Int4),
        col("conninfo", Text),
    ];
    let ts = |t: Option<i64>| t.map_or(Value::Null, Value::Timestamp);
    let rows = receiver
        .map(|(r, (write, flush))| {
            vec![
                Value::Int4(0),
                Value::Text(r.status.into()),
                lsn(r.receive_start_lsn.0),
                Value::Int4(1),
                lsn(write.0),
                lsn(flush.0),
                Value::Int4(1),
                ts(r.last_msg_send_time),
                ts(r.last_msg_receipt_time),
                lsn(r.latest_end_lsn.0),
                ts(r.last_msg_send_time),
                r.slot_name.map_or(Value::Null, Value::Text),
                Value::Text(r.sender_host),
                Value::Int4(i32::from(r.sender_port)),
                Value::Text(r.conninfo),
            ]
        })
        .into_iter()
        .collect();
    (cols, rows)
}
