//! The configuration parameters the front end reads (PostgreSQL's names), and [`registry`],
//! which collects every crate's: the server's are the last list.

use std::sync::{Arc, OnceLock};
use walnut_common::guc::{int, Context, GucDef, Kind, Registry, Unit};

const CONNECTIONS: &str = "Connections and Authentication / Connection Settings";
const SSL: &str = "Connections and Authentication / SSL";

/// `listen_addresses`: comma-separated host names or addresses (`*` = all).
pub static LISTEN_ADDRESSES: GucDef = GucDef {
    name: "listen_addresses",
    kind: Kind::Str,
    default: "127.0.0.1",
    context: Context::Postmaster,
    category: CONNECTIONS,
    description: "Sets the host name or IP address(es) to listen to.",
    check: None,
};

/// `port` (PostgreSQL's 5432 plus one, so both can run side by side).
pub static PORT: GucDef = GucDef {
    name: "port",
    kind: int(1, 65535, Unit::None),
    default: "5433",
    context: Context::Postmaster,
    category: CONNECTIONS,
    description: "Sets the TCP port the server listens on.",
    check: None,
};

/// `max_connections`: sessions at once; the next gets FATAL 53300.
pub static MAX_CONNECTIONS: GucDef = GucDef {
    name: "max_connections",
    kind: int(1, 262_143, Unit::None),
    default: "100",
    context: Context::Postmaster,
    category: CONNECTIONS,
    description: "Sets the maximum number of concurrent connections.",
    check: None,
};

/// `ssl`.
pub static SSL_ON: GucDef = GucDef {
    name: "ssl",
    kind: Kind::Bool,
    default: "off",
    context: Context::Postmaster,
    category: SSL,
    description: "Enables SSL connections.",
    check: None,
};

/// `ssl_cert_file`, relative to the data directory.
pub static SSL_CERT_FILE: GucDef = GucDef {
    name: "ssl_cert_file",
    kind: Kind::Str,
    default: "server.crt",
    context: Context::Postmaster,
    category: SSL,
    description: "Location of the SSL server certificate file.",
    check: None,
};

/// `ssl_key_file`, relative to the data directory.
pub static SSL_KEY_FILE: GucDef = GucDef {
    name: "ssl_key_file",
    kind: Kind::Str,
    default: "server.key",
    context: Context::Postmaster,
    category: SSL,
    description: "Location of the SSL server private key file.",
    check: None,
};

/// `log_min_messages`: the lowest level the server logs (unless `RUST_LOG` is set).
pub static LOG_MIN_MESSAGES: GucDef = GucDef {
    name: "log_min_messages",
    kind: Kind::Enum(&[
        "debug5", "debug4", "debug3", "debug2", "debug1", "info", "notice", "warning", "error",
        "log", "fatal", "panic",
    ]),
    default: "warning",
    context: Context::Sighup,
    category: "Reporting and Logging / When to Log",
    description: "Sets the message levels that are logged.",
    check: None,
};

const REPLICATION: &str = "Replication / Sending Servers";

/// `max_wal_senders`: replication connections at once; the next gets FATAL 53300.
pub static MAX_WAL_SENDERS: GucDef = GucDef {
    name: "max_wal_senders",
    kind: int(0, 262_143, Unit::None),
    default: "10",
    context: Context::Postmaster,
    category: REPLICATION,
    description: "Sets the maximum number of simultaneously running WAL sender processes.",
    check: None,
};

/// `max_replication_slots`: replication slots at once; the next CREATE_REPLICATION_SLOT gets
/// 53400.
pub static MAX_REPLICATION_SLOTS: GucDef = GucDef {
    name: "max_replication_slots",
    kind: int(0, 262_143, Unit::None),
    default: "10",
    context: Context::Postmaster,
    category: REPLICATION,
    description: "Sets the maximum number of simultaneously defined replication slots.",
    check: None,
};

/// `wal_sender_timeout`, ms: a walsender whose client is silent this long ends; 0 disables.
pub static WAL_SENDER_TIMEOUT: GucDef = GucDef {
    name: "wal_sender_timeout",
    kind: int(0, i32::MAX as i64, Unit::Ms),
    default: "60s",
    context: Context::Sighup,
    category: REPLICATION,
    description: "Sets the maximum time to wait for WAL replication.",
    check: None,
};

/// `data_directory_mode`: the permissions of the data directory (`walnut initdb` leaves the
/// process's umask in force; PostgreSQL's default, owner only, is what this reports).
/// `pg_receivewal` and `pg_basebackup` read it to create their files alike.
pub static DATA_DIRECTORY_MODE: GucDef = GucDef {
    name: "data_directory_mode",
    kind: Kind::Str,
    default: "0700",
    context: Context::Internal,
    category: "Preset Options",
    description: "Shows the mode of the data directory.",
    check: None,
};

/// Every parameter of this crate.
const STANDBY: &str = "Replication / Standby Servers";

/// `primary_conninfo`: the libpq connection string (keywords `host`, `port`, `user`,
/// `password`, `application_name`) the walreceiver of a standby connects with.
pub static PRIMARY_CONNINFO: GucDef = GucDef {
    name: "primary_conninfo",
    kind: Kind::Str,
    default: "",
    context: Context::Sighup,
    category: STANDBY,
    description: "Sets the connection string to be used to connect to the sending server.",
    check: None,
};

/// `primary_slot_name`: the physical replication slot the walreceiver streams from; empty:
/// none.
pub static PRIMARY_SLOT_NAME: GucDef = GucDef {
    name: "primary_slot_name",
    kind: Kind::Str,
    default: "",
    context: Context::Sighup,
    category: STANDBY,
    description: "Sets the name of the replication slot to use on the sending server.",
    check: None,
};

/// `hot_standby`: a standby accepts read-only sessions once consistent.
pub static HOT_STANDBY: GucDef = GucDef {
    name: "hot_standby",
    kind: Kind::Bool,
    default: "on",
    context: Context::Postmaster,
    category: STANDBY,
    description: "Allows connections and queries during recovery.",
    check: None,
};

/// `hot_standby_feedback`: a standby's walreceiver tells the primary the oldest WAL position its
/// queries need (`h` messages), and the primary's walsender holds its visibility horizon there
/// (`walnut_storage::feedback`), so its prunes and freezes keep what those queries read and
/// replay has no conflict to cancel them for (`max_standby_streaming_delay`), once the first
/// feedback is held (storage DESIGN.md, "Hot standby feedback", for the cases it cannot cover).
/// Reloadable.
pub static HOT_STANDBY_FEEDBACK: GucDef = GucDef {
    name: "hot_standby_feedback",
    kind: Kind::Bool,
    default: "off",
    context: Context::Sighup,
    category: STANDBY,
    description:
        "Allows feedback from a hot standby to the primary that will avoid query conflicts.",
    check: None,
};

/// `wal_receiver_status_interval`, s: the longest the walreceiver goes without a status
/// update (write, flush and apply LSNs) to the primary; 0 disables the periodic ones.
pub static WAL_RECEIVER_STATUS_INTERVAL: GucDef = GucDef {
    name: "wal_receiver_status_interval",
    kind: int(0, i32::MAX as i64 / 1000, Unit::S),
    default: "10s",
    context: Context::Sighup,
    category: STANDBY,
    description:
        "Sets the maximum interval between WAL receiver status reports to the sending server.",
    check: None,
};

/// `recovery_min_apply_delay`, ms: a standby applies a commit record only this long after
/// the primary's commit time.
pub static RECOVERY_MIN_APPLY_DELAY: GucDef = GucDef {
    name: "recovery_min_apply_delay",
    kind: int(0, i32::MAX as i64, Unit::Ms),
    default: "0",
    context: Context::Sighup,
    category: STANDBY,
    description: "Sets the minimum delay for applying changes during recovery.",
    check: None,
};

/// `max_standby_streaming_delay`, ms: how long a standby's replay of a prune waits for the
/// queries whose snapshots it conflicts with before it cancels them (-1: wait for ever).
pub static MAX_STANDBY_STREAMING_DELAY: GucDef = GucDef {
    name: "max_standby_streaming_delay",
    kind: int(-1, i32::MAX as i64, Unit::Ms),
    default: "30s",
    context: Context::Sighup,
    category: STANDBY,
    description: "Sets the maximum delay before canceling queries when a hot standby server is processing streamed WAL data.",
    check: None,
};

/// The parameters above, for [`registry`].
pub static GUCS: &[&GucDef] = &[
    &DATA_DIRECTORY_MODE,
    &HOT_STANDBY,
    &HOT_STANDBY_FEEDBACK,
    &LISTEN_ADDRESSES,
    &LOG_MIN_MESSAGES,
    &MAX_CONNECTIONS,
    &MAX_REPLICATION_SLOTS,
    &MAX_STANDBY_STREAMING_DELAY,
    &MAX_WAL_SENDERS,
    &PORT,
    &PRIMARY_CONNINFO,
    &PRIMARY_SLOT_NAME,
    &RECOVERY_MIN_APPLY_DELAY,
    &SSL_ON,
    &SSL_CERT_FILE,
    &SSL_KEY_FILE,
    &WAL_RECEIVER_STATUS_INTERVAL,
    &WAL_SENDER_TIMEOUT,
];

/// Every parameter walnut knows: the SQL layer's, the storage engine's, the WAL's and these.
pub fn registry() -> Arc<Registry> {
    static R: OnceLock<Arc<Registry>> = OnceLock::new();
    R.get_or_init(|| {
        let [wal, storage, sql] = walnut_sql::guc::LISTS;
        Arc::new(Registry::new(&[wal, storage, sql, GUCS]))
    })
    .clone()
}

/// The `tracing` level for a `log_min_messages` level. walnut logs PostgreSQL's `LOG` lines
/// ("database system is ready to accept connections", checkpoints) at tracing's `info`, and in
/// PostgreSQL's order for the server log `LOG` ranks above `ERROR`: so every level from `info`
/// to `log` keeps them (`info`), `fatal` and `panic` keep only errors, and the `debug` levels
/// add tracing's `debug` and `trace`.
pub fn tracing_level(level: &str) -> &'static str {
    match level {
        "debug5" | "debug4" | "debug3" => "trace",
        "debug2" | "debug1" => "debug",
        "fatal" | "panic" => "error",
        _ => "info",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_default_parses_and_names_are_unique() {
        for d in super::registry().iter() {
            d.default_value();
        }
    }
}
