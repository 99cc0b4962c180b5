//! Types shared by every walnut crate: the identifier newtypes (`Lsn`, `BlockNumber`,
//! `RelFileId`, `Xid`, `Tid`), the error type with its SQLSTATE mapping, SQL values with their
//! on-disk and text encodings, durable-file helpers, and configuration parameters (their
//! declarations, parsing, and the live configuration with its files).
//!
//! Nothing here knows about pages, the WAL or the wire protocol.
#![forbid(unsafe_code)]

pub mod config;
pub mod error;
pub mod fsutil;
pub mod guc;
pub mod ids;
pub mod schema;
pub mod value;

pub use error::{Error, ErrorKind, Result, SqlState};

/// PANIC: logs `what` and aborts the process, for failures after which the in-memory state
/// cannot be trusted and only crash recovery can continue (a failed WAL write or fsync, a
/// failed checkpoint; PostgreSQL's `PANIC` level). Never returns; never unwinds, so no other
/// thread can go on as if the operation had succeeded.
pub fn panic_fatal(what: &str) -> ! {
    tracing::error!("PANIC: {what}");
    eprintln!("PANIC: {what}");
    std::process::abort()
}
pub use ids::{BlockNumber, Lsn, RelFileId, Tid, Xid};
pub use schema::{CheckDef, ColumnDef, Identity, SequenceDef, TableDef};
pub use value::{DataType, Value};

/// Size of every data page and every block of a relation file, in bytes.
pub const BLCKSZ: usize = 8192;
const _: () = assert!(BLCKSZ.is_multiple_of(4096));

/// CRC-32C (Castagnoli) of `bytes`, the checksum of WAL records and pages.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Continues a CRC-32C over more bytes (`crc` is the value so far).
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}
