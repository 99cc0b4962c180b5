//! SQL for walnut: parse (sqlparser, PostgreSQL dialect, plus a small pre-parser), plan, and
//! execute over a storage engine, and the per-connection [`session::Session`] that the wire
//! protocol front end drives.
//!
//! The storage engine is reached only through the traits in [`storage`], so this crate can be
//! tested against an in-memory model.
//!
//! API CONTRACT: `storage` (the traits) and the public items of `session` listed in its module
//! docs are fixed; the storage author implements `storage::Engine` for the real engine.
#![forbid(unsafe_code)]

pub mod session;
pub mod storage;
