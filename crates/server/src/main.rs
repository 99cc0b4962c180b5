//! The `walnut` binary.
mod engine;
fn main() {
    let _ = engine::initdb;
    let _ = engine::open_engine;
}
