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
pub mod config;
pub mod demo;
pub mod engine;
mod guc;
pub mod hba;
pub mod protocol;
pub mod server;
pub mod test_fsync;

/// Initialises tracing to stderr: `RUST_LOG` if set, else `default_filter` (`info`).
pub fn init_logging(default_filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}
