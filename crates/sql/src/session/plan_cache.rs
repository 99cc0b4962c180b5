//! The plan cache: prepared statements by (text, parameter OIDs), so that a repeated Parse of
//! the same text neither parses nor plans (crates/sql/DESIGN.md, "The plan cache").

use crate::env::Env;
use crate::plan::Plan;
use crate::planner::Planner;
use crate::storage::Transaction;
use crate::types::ColumnDesc;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use walnut_common::{DataType, Error, Result, SqlState};

/// A parsed and planned statement, shared by the plan cache and the front end's statement store.
#[derive(Debug)]
pub struct Prepared {
    /// The statement text.
    pub sql: Arc<str>,
    /// Parameter types, `$1` first (inferred where the client sent none).
    pub param_types: Vec<DataType>,
    /// Result columns, or `None` if the statement returns no rows (Describe answers NoData).
    pub columns: Option<Arc<Vec<ColumnDesc>>>,
    /// The current plan; replaced if the catalog changed under it.
    pub(crate) plan: Mutex<Arc<Plan>>,
    /// The parsed statement, to plan again (`None` for utility commands, which need no catalog).
    pub(crate) stmt: Option<sqlparser::ast::Statement>,
}

/// (parameter OIDs, statement, last use).
type CacheEntry = (Vec<u32>, Arc<Prepared>, u64);

/// Prepared statements by (text, parameter OIDs), at most [`PLAN_CACHE_CAPACITY`]; when full,
/// the least recently used half is evicted.
#[derive(Default)]
pub(crate) struct PlanCache {
    map: HashMap<String, Vec<CacheEntry>>,
    len: usize,
    tick: u64,
}

const PLAN_CACHE_CAPACITY: usize = 1024;

impl PlanCache {
    /// The statement cached for `sql` with these parameter OIDs.
    pub(crate) fn get(&mut self, sql: &str, oids: &[u32]) -> Option<Arc<Prepared>> {
        self.tick += 1;
        let tick = self.tick;
        let entry = self.map.get_mut(sql)?.iter_mut().find(|e| e.0 == oids)?;
        entry.2 = tick;
        Some(entry.1.clone())
    }

    /// Drops every cached statement (`DISCARD PLANS`).
    pub(crate) fn clear(&mut self) {
        *self = PlanCache::default();
    }

    /// Caches `p` (keyed by its text and `oids`).
    pub(crate) fn put(&mut self, oids: &[u32], p: Arc<Prepared>) {
        if self.len >= PLAN_CACHE_CAPACITY {
            // Evict the least recently used half.
            let mut ticks: Vec<u64> = self.map.values().flatten().map(|e| e.2).collect();
            ticks.sort_unstable();
            let cut = ticks[ticks.len() / 2];
            for v in self.map.values_mut() {
                v.retain(|e| e.2 > cut);
            }
            self.map.retain(|_, v| !v.is_empty());
            self.len = self.map.values().map(Vec::len).sum();
        }
        self.tick += 1;
        self.map
            .entry(p.sql.to_string())
            .or_default()
            .push((oids.to_vec(), p, self.tick));
        self.len += 1;
    }
}

/// The prepared plan, re-planned if the table it was compiled against changed (dropped and
/// re-created, altered). The check is one catalog lookup and a pointer comparison in the common
/// case.
pub(crate) fn validated_plan(
    txn: &mut dyn Transaction,
    env: &dyn Env,
    p: &Prepared,
    plan: Arc<Plan>,
) -> Result<Arc<Plan>> {
    let Some(dep) = plan.table_deps() else {
        return Ok(plan);
    };
    let current = txn.table(&dep.name)?;
    let same = current
        .as_ref()
        .is_some_and(|c| Arc::ptr_eq(c, dep) || **c == **dep);
    if same {
        return Ok(plan);
    }
    let Some(stmt) = &p.stmt else { return Ok(plan) };
    let params = p.param_types.iter().cloned().map(Some).collect();
    let mut planner = Planner { txn, env, params };
    let fresh = Arc::new(planner.plan(stmt)?);
    let fresh_columns = fresh.columns();
    if fresh_columns.as_deref() != p.columns.as_deref() {
        return Err(Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            "cached plan must not change result type",
        ));
    }
    *p.plan.lock() = fresh.clone();
    Ok(fresh)
}
