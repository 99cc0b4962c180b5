//! SQL for walnut: parse (sqlparser, PostgreSQL dialect, plus a small pre-parser), plan, and
//! execute over a storage engine, and the per-connection [`session::Session`] that the wire
//! protocol front end drives.
//!
//! The storage engine is reached only through the traits in [`storage`], so this crate can be
//! tested against an in-memory model ([`testing::MemEngine`]).
//!
//! API CONTRACT: `storage` (the traits) and the public items of `session` listed in its module
//! docs are fixed; the storage author implements `storage::Engine` for the real engine.
//!
//! Pipeline: `preparse` (statement splitting, utility commands) → sqlparser → `plan` (name
//! resolution, type inference, access path) → `exec` (scans and writes over a `Transaction`).
//! See DESIGN.md next to this crate's Cargo.toml.
#![forbid(unsafe_code)]

pub mod activity;
mod bind;
mod copy;
mod ddl;
pub mod engine;
mod env;
mod errors;
mod exec;
mod expr;
pub mod guc;
mod literals;
mod plan;
mod planner;
mod preparse;
pub mod progress;
mod replication_views;
mod sequence;
pub mod session;
mod stat_views;
pub mod storage;
pub mod testing;
pub mod types;

#[cfg(test)]
mod tests;
