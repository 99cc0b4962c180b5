//! walnut's front end: the PostgreSQL wire protocol server and the pieces of the `walnut`
//! binary (configuration, the in-process demo).
//!
//! - [`server`] listens and runs one task per connection;
//! - [`protocol`] implements the protocol on top of `pgwire` (see DESIGN.md);
//! - [`backend`] runs each connection's `Session` on its own OS thread;
//! - [`config`] reads walnut.conf, `-c` overrides and startup-packet options;
//! - [`engine`] opens a data directory (owned by the storage side);
//! - [`demo`] is `walnut demo`.
//!
//! Nothing in walnut imports this crate except the `walnut` binary and tests.
#![forbid(unsafe_code)]

pub mod authid;
pub mod backend;
pub mod basebackup;
pub mod config;
pub mod demo;
pub mod engine;
pub mod guc;
pub mod hba;
pub mod protocol;
pub mod repl_client;
pub mod server;
pub mod test_fsync;
pub mod walreceiver;

/// Changes the level of the log [`init_logging`] set up, unless `RUST_LOG` chose it.
type LogReload = Box<dyn Fn(&str) + Send + Sync>;
static LOG_RELOAD: std::sync::OnceLock<LogReload> = std::sync::OnceLock::new();

/// Initialises tracing to stderr: `RUST_LOG` if set, else `default_filter` (a tracing
/// directive such as `info`), which [`set_log_level`] may change later.
pub fn init_logging(default_filter: &str) {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{fmt, reload, EnvFilter};
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    if let Ok(filter) = EnvFilter::try_from_default_env() {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(fmt::layer().with_writer(std::io::stderr).with_ansi(ansi))
            .try_init();
        return;
    }
    let (filter, handle) = reload::Layer::new(EnvFilter::new(default_filter));
    if tracing_subscriber::registry()
        .with(filter)
        .with(fmt::layer().with_writer(std::io::stderr).with_ansi(ansi))
        .try_init()
        .is_ok()
    {
        let _ = LOG_RELOAD.set(Box::new(move |directive: &str| {
            let _ = handle.reload(EnvFilter::new(directive));
        }));
    }
}

/// Sets the log level (a tracing directive) if [`init_logging`] chose it, as a reload of
/// `log_min_messages` does.
pub fn set_log_level(directive: &str) {
    if let Some(f) = LOG_RELOAD.get() {
        f(directive);
    }
}
