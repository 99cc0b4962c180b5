//! The I/O statistics views, with PostgreSQL 18's columns: `pg_stat_checkpointer`,
//! `pg_stat_bgwriter` and `pg_stat_io` (rows for the relation object in the normal context;
//! walnut has no bulk-read/vacuum ring buffers and counts WAL I/O in `pg_stat_wal`). Times are
//! in milliseconds, as PostgreSQL's.

use std::time::{SystemTime, UNIX_EPOCH};
use walnut_common::{ColumnDef, DataType, Value};
use walnut_storage::stats::{BackendType, IoOp, IoStats};

/// Seconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_UNIX_S: i64 = 946_684_800;

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        default: None,
        identity: None,
    }
}

fn timestamp(t: SystemTime) -> Value {
    let us = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    Value::Timestamp(us - PG_EPOCH_UNIX_S * 1_000_000)
}

/// The columns and rows of view `name`, if it is one of these.
pub(crate) fn view(s: &IoStats, name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
    use std::sync::atomic::Ordering::Relaxed;
    let i = |v: u64| Value::Int8(v as i64);
    let ms = |us: u64| Value::Float8(us as f64 / 1000.0);
    match name {
        "pg_stat_checkpointer" => {
            let mut cols: Vec<ColumnDef> = [
                "num_timed",
                "num_requested",
                "num_done",
                "restartpoints_timed",
                "restartpoints_req",
                "restartpoints_done",
            ]
            .iter()
            .map(|n| col(n, DataType::Int8))
            .collect();
            cols.push(col("write_time", DataType::Float8));
            cols.push(col("sync_time", DataType::Float8));
            cols.push(col("buffers_written", DataType::Int8));
            cols.push(col("slru_written", DataType::Int8));
            cols.push(col("stats_reset", DataType::Timestamp));
            let row = vec![
                i(s.ckpt_timed.load(Relaxed)),
                i(s.ckpt_requested.load(Relaxed)),
                i(s.ckpt_done.load(Relaxed)),
                i(0),
                i(0),
                i(0),
                Value::Float8(s.ckpt_write_time_ms.load(Relaxed) as f64),
                Value::Float8(s.ckpt_sync_time_ms.load(Relaxed) as f64),
                i(s.ckpt_buffers_written.load(Relaxed)),
                i(0),
                timestamp(s.reset_time()),
            ];
            Some((cols, vec![row]))
        }
        "pg_stat_bgwriter" => Some((
            vec![
                col("buffers_clean", DataType::Int8),
                col("maxwritten_clean", DataType::Int8),
                col("buffers_alloc", DataType::Int8),
                col("stats_reset", DataType::Timestamp),
            ],
            vec![vec![
                i(s.bg_buffers_clean.load(Relaxed)),
                i(s.bg_maxwritten_clean.load(Relaxed)),
                i(s.buffers_alloc.load(Relaxed)),
                timestamp(s.reset_time()),
            ]],
        )),
        "pg_stat_io" => {
            let mut cols = vec![
                col("backend_type", DataType::Text),
                col("object", DataType::Text),
                col("context", DataType::Text),
            ];
            for (n, ty) in [
                ("reads", DataType::Int8),
                ("read_bytes", DataType::Int8),
                ("read_time", DataType::Float8),
                ("writes", DataType::Int8),
                ("write_bytes", DataType::Int8),
                ("write_time", DataType::Float8),
                ("writebacks", DataType::Int8),
                ("writeback_time", DataType::Float8),
                ("extends", DataType::Int8),
                ("extend_bytes", DataType::Int8),
                ("extend_time", DataType::Float8),
                ("hits", DataType::Int8),
                ("evictions", DataType::Int8),
                ("reuses", DataType::Int8),
                ("fsyncs", DataType::Int8),
                ("fsync_time", DataType::Float8),
                ("stats_reset", DataType::Timestamp),
            ] {
                cols.push(col(n, ty));
            }
            let page = walnut_common::BLCKSZ as u64;
            let rows = BackendType::ALL
                .iter()
                .map(|&t| {
                    let r = s.row(t);
                    vec![
                        Value::Text(t.name().into()),
                        Value::Text("relation".into()),
                        Value::Text("normal".into()),
                        i(r.count(IoOp::Read)),
                        i(r.count(IoOp::Read) * page),
                        ms(r.time_us(IoOp::Read)),
                        i(r.count(IoOp::Write)),
                        i(r.count(IoOp::Write) * page),
                        ms(r.time_us(IoOp::Write)),
                        i(r.count(IoOp::Writeback)),
                        ms(r.time_us(IoOp::Writeback)),
                        i(r.count(IoOp::Extend)),
                        i(r.count(IoOp::Extend) * page),
                        ms(r.time_us(IoOp::Extend)),
                        i(r.count(IoOp::Hit)),
                        i(r.count(IoOp::Eviction)),
                        Value::Null,
                        i(r.count(IoOp::Fsync)),
                        ms(r.time_us(IoOp::Fsync)),
                        timestamp(s.reset_time()),
                    ]
                })
                .collect();
            Some((cols, rows))
        }
        _ => None,
    }
}
