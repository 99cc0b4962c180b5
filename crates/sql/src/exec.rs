//! Execution of planned SELECT, INSERT, UPDATE and DELETE over a [`Transaction`].
//!
//! Reads go through `Transaction::scan` or, when the plan pinned a primary-key prefix,
//! `Transaction::index_scan`; the WHERE clause is re-checked on every row either way.
//! UPDATE and DELETE first collect the matching rows, then write them one by one, so a write can
//! never be seen by the scan that found it (the Halloween problem). A write that finds the row
//! changed by a transaction that committed meanwhile gets the newest version back
//! ([`WriteOutcome::Changed`]): the WHERE clause is evaluated again on it and, if it still holds,
//! the write is retried on that version — PostgreSQL's EvalPlanQual under read committed.

use crate::ddl;
use crate::env::Env;
use crate::expr::{sort_cmp, Ctx, Expr};
use crate::plan::{
    Access, AggCall, AggFunc, DeletePlan, InsertPlan, InsertSource, Plan, Returning, SelectPlan,
    Source, UpdatePlan,
};
use crate::storage::{RowId, ScanControl, Transaction, WriteOutcome};
use crate::types::{Notice, Output};
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use walnut_common::{DataType, Error, ErrorKind, Result, SqlState, TableDef, Value};

/// Everything a statement's execution needs besides the transaction.
pub(crate) struct ExecCtx<'a> {
    pub params: &'a [Value],
    pub now: i64,
    pub cancel: &'a AtomicBool,
    /// System views and the server's configuration.
    pub env: &'a dyn Env,
    /// `statement_timeout` expiry, if one is set.
    pub deadline: Option<Instant>,
}

impl ExecCtx<'_> {
    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            params: self.params,
            now: self.now,
            env: self.env,
        }
    }

    /// Fails with 57014 if a cancel was requested (clearing the flag) or `statement_timeout`
    /// expired.
    pub(crate) fn check_cancel(&self) -> Result<()> {
        if let Some(d) = self.deadline {
            if Instant::now() >= d {
                return Err(Error::new(
                    ErrorKind::Cancelled,
                    SqlState::QUERY_CANCELED,
                    "canceling statement due to statement timeout",
                ));
            }
        }
        check_cancel(self.cancel)
    }
}

/// Runs a planned statement over `txn`: the executor's one entry point. Utility and
/// transaction-control plans are the session's, not the executor's.
///
/// # Errors
/// The statement's errors; 57014 when cancelled or timed out; XX000 for a plan the executor
/// does not run (a bug).
pub(crate) fn execute(
    txn: &mut dyn Transaction,
    plan: &Plan,
    ec: &ExecCtx<'_>,
    notices: &mut Vec<Notice>,
) -> Result<Output> {
    Ok(match plan {
        Plan::Select(s) => {
            let rows = run_select(txn, s, ec)?;
            let tag = format!("SELECT {}", rows.len());
            Output::Rows {
                columns: s.columns.clone(),
                rows,
                tag,
            }
        }
        Plan::Insert(p) => {
            let mut out = Returned::new(p.returning.as_ref(), ec);
            let n = run_insert(txn, p, ec, &mut out)?;
            out.output(format!("INSERT 0 {n}"))
        }
        Plan::Update(p) => {
            let mut out = Returned::new(p.returning.as_ref(), ec);
            let n = run_update(txn, p, ec, &mut out)?;
            out.output(format!("UPDATE {n}"))
        }
        Plan::Delete(p) => {
            let mut out = Returned::new(p.returning.as_ref(), ec);
            let n = run_delete(txn, p, ec, &mut out)?;
            out.output(format!("DELETE {n}"))
        }
        Plan::CreateTable {
            def,
            if_not_exists,
            serials,
        } => ddl::create_table(txn, def, serials, *if_not_exists, notices)?,
        Plan::CreateSequence { def, if_not_exists } => {
            ddl::create_sequence(txn, def, *if_not_exists, notices)?
        }
        Plan::DropSequences { names, if_exists } => {
            ddl::drop_relations(txn, ddl::DropKind::Sequence, names, *if_exists, notices)?
        }
        Plan::DropTable { names, if_exists } => {
            ddl::drop_relations(txn, ddl::DropKind::Table, names, *if_exists, notices)?
        }
        Plan::Truncate { names } => ddl::truncate(txn, names)?,
        Plan::AddPrimaryKey { table, columns } => {
            ddl::add_primary_key(txn, table, columns, ec.env.progress())?
        }
        Plan::AlterSequence {
            name,
            if_exists,
            options,
            restart,
            owned_by,
        } => ddl::alter_sequence(txn, name, *if_exists, options, *restart, owned_by, notices)?,
        Plan::AlterOwner {
            name,
            if_exists,
            sequence,
            role,
        } => ddl::alter_owner(txn, name, *if_exists, *sequence, role, notices)?,
        Plan::AddIdentity {
            table,
            if_exists,
            column,
            identity,
            sequence,
            options,
        } => ddl::add_identity(
            txn,
            table,
            *if_exists,
            column,
            *identity,
            sequence.as_deref(),
            options,
            notices,
        )?,
        Plan::AlterColumnDefault {
            table,
            if_exists,
            column,
            default,
        } => ddl::alter_column_default(txn, table, *if_exists, column, default, notices)?,
        other => {
            return Err(Error::internal(format!(
                "unexpected plan in executor: {other:?}"
            )))
        }
    })
}

/// The rows a write's `RETURNING` list makes, one for each row written (none without a list).
pub(crate) struct Returned<'p, 'e> {
    list: Option<&'p Returning>,
    ec: &'p ExecCtx<'e>,
    rows: Vec<Vec<Value>>,
}

impl<'p, 'e> Returned<'p, 'e> {
    pub(crate) fn new(list: Option<&'p Returning>, ec: &'p ExecCtx<'e>) -> Self {
        Returned {
            list,
            ec,
            rows: Vec::new(),
        }
    }

    /// Writes `row` with `write` and, once it is written (`Done`: not a version a concurrent
    /// update replaced first), evaluates the list over it. The row is copied only with a list.
    ///
    /// # Errors
    /// `write`'s; evaluation errors.
    fn write(
        &mut self,
        row: Vec<Value>,
        write: impl FnOnce(Vec<Value>) -> Result<WriteOutcome>,
    ) -> Result<WriteOutcome> {
        let kept = self.list.is_some().then(|| row.clone());
        let outcome = write(row)?;
        if let (WriteOutcome::Done, Some(row)) = (&outcome, kept) {
            self.add(&row)?;
        }
        Ok(outcome)
    }

    /// Evaluates the list over `row`, a whole row of the table, as written (INSERT, UPDATE)
    /// or as it was (DELETE).
    ///
    /// # Errors
    /// Evaluation errors (22012, 22003 ...).
    fn add(&mut self, row: &[Value]) -> Result<()> {
        if let Some(list) = self.list {
            let ctx = self.ec.ctx();
            let out = list
                .outputs
                .iter()
                .map(|e| e.eval(row, &ctx))
                .collect::<Result<Vec<_>>>()?;
            self.rows.push(out);
        }
        Ok(())
    }

    /// The statement's result: its rows under `tag` with a list, else the bare command tag.
    fn output(self, tag: String) -> Output {
        match self.list {
            Some(list) => Output::Rows {
                columns: list.columns.clone(),
                rows: self.rows,
                tag,
            },
            None => Output::Command { tag },
        }
    }
}

/// Fails with 57014 (clearing the flag) if `flag` is set.
pub(crate) fn check_cancel(flag: &AtomicBool) -> Result<()> {
    if flag.load(Ordering::Relaxed) {
        flag.store(false, Ordering::Relaxed);
        return Err(Error::cancelled());
    }
    Ok(())
}

enum Bounds {
    Full,
    Empty,
    Range(Bound<Vec<Value>>, Bound<Vec<Value>>),
}

/// A bound value converted to the key column's type, or `None` if the index cannot be used for
/// it (then the scan falls back to a full scan plus filter, which is always correct).
fn key_value(v: Value, ty: &DataType) -> Option<Value> {
    let same_family = (ty.is_integer() && v.as_i64().is_some() && !matches!(v, Value::Float8(_)))
        || (ty.is_string() && matches!(v, Value::Text(_)))
        || v.data_type() == *ty;
    if !same_family {
        return None;
    }
    v.cast(ty).ok()
}

fn bounds(access: &Access, ec: &ExecCtx<'_>) -> Result<Bounds> {
    let Access::Index {
        eq,
        lo,
        hi,
        key_types,
    } = access
    else {
        return Ok(Bounds::Full);
    };
    let ctx = ec.ctx();
    let mut prefix = Vec::with_capacity(eq.len() + 1);
    for (e, ty) in eq.iter().zip(key_types) {
        let v = e.eval(&[], &ctx)?;
        if v.is_null() {
            return Ok(Bounds::Empty);
        }
        match key_value(v, ty) {
            Some(k) => prefix.push(k),
            None => return Ok(Bounds::Full),
        }
    }
    let side = |b: &Option<(Expr, bool)>| -> Result<Option<Bound<Vec<Value>>>> {
        Ok(Some(match b {
            None if prefix.is_empty() => Bound::Unbounded,
            None => Bound::Included(prefix.clone()),
            Some((e, inclusive)) => {
                let v = e.eval(&[], &ctx)?;
                if v.is_null() {
                    return Ok(None);
                }
                let Some(ty) = key_types.get(prefix.len()) else {
                    return Ok(Some(Bound::Unbounded));
                };
                let Some(k) = key_value(v, ty) else {
                    return Ok(Some(Bound::Unbounded));
                };
                let mut key = prefix.clone();
                key.push(k);
                if *inclusive {
                    Bound::Included(key)
                } else {
                    Bound::Excluded(key)
                }
            }
        }))
    };
    let (Some(l), Some(h)) = (side(lo)?, side(hi)?) else {
        return Ok(Bounds::Empty);
    };
    Ok(Bounds::Range(l, h))
}

fn as_ref_bound(b: &Bound<Vec<Value>>) -> Bound<&[Value]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Visits the rows of `def` that satisfy `filter`, using `access`.
pub(crate) fn scan_table(
    txn: &mut dyn Transaction,
    def: &TableDef,
    access: &Access,
    filter: Option<&Expr>,
    ec: &ExecCtx<'_>,
    f: &mut dyn FnMut(RowId, Vec<Value>) -> Result<ScanControl>,
) -> Result<()> {
    let ctx = ec.ctx();
    let mut visit = |rid: RowId, row: Vec<Value>| -> Result<ScanControl> {
        ec.check_cancel()?;
        if let Some(flt) = filter {
            if !flt.matches(&row, &ctx)? {
                return Ok(ScanControl::Continue);
            }
        }
        f(rid, row)
    };
    match bounds(access, ec)? {
        Bounds::Empty => Ok(()),
        Bounds::Full => txn.scan(&def.name, &mut visit),
        Bounds::Range(lo, hi) => {
            txn.index_scan(&def.name, as_ref_bound(&lo), as_ref_bound(&hi), &mut visit)
        }
    }
}

/// `generate_series` bounds, evaluated.
fn series_range(
    start: &Expr,
    stop: &Expr,
    step: Option<&Expr>,
    ec: &ExecCtx<'_>,
) -> Result<Option<(i64, i64, i64)>> {
    let ctx = ec.ctx();
    let (a, b) = (start.eval(&[], &ctx)?, stop.eval(&[], &ctx)?);
    let s = match step {
        Some(s) => s.eval(&[], &ctx)?,
        None => Value::Int8(1),
    };
    let (Some(a), Some(b), Some(s)) = (a.as_i64(), b.as_i64(), s.as_i64()) else {
        return Ok(None);
    };
    if s == 0 {
        return Err(Error::user(
            SqlState::INVALID_PARAMETER_VALUE,
            "step size cannot equal zero",
        ));
    }
    Ok(Some((a, b, s)))
}

/// Runs `f` for each value of a series (no transaction access, so `f` may write).
fn for_series(
    start: &Expr,
    stop: &Expr,
    step: Option<&Expr>,
    ty: &DataType,
    ec: &ExecCtx<'_>,
    f: &mut dyn FnMut(Vec<Value>) -> Result<ScanControl>,
) -> Result<()> {
    let Some((a, b, s)) = series_range(start, stop, step, ec)? else {
        return Ok(());
    };
    let mut i = a;
    let mut n: u32 = 0;
    while (s > 0 && i <= b) || (s < 0 && i >= b) {
        n = n.wrapping_add(1);
        if n & 1023 == 0 {
            ec.check_cancel()?;
        }
        let v = if *ty == DataType::Int4 {
            Value::Int4(i as i32)
        } else {
            Value::Int8(i)
        };
        if f(vec![v])? == ScanControl::Stop {
            break;
        }
        match i.checked_add(s) {
            Some(x) => i = x,
            None => break,
        }
    }
    Ok(())
}

/// Visits the input rows of a SELECT that pass its WHERE clause.
fn scan_source(
    txn: &mut dyn Transaction,
    plan: &SelectPlan,
    ec: &ExecCtx<'_>,
    f: &mut dyn FnMut(Vec<Value>) -> Result<ScanControl>,
) -> Result<()> {
    let ctx = ec.ctx();
    let filter = plan.filter.as_ref();
    let mut filtered = |row: Vec<Value>| -> Result<ScanControl> {
        if let Some(flt) = filter {
            if !flt.matches(&row, &ctx)? {
                return Ok(ScanControl::Continue);
            }
        }
        f(row)
    };
    match &plan.source {
        Source::None => {
            filtered(Vec::new())?;
            Ok(())
        }
        Source::Table(def) => scan_table(txn, def, &plan.access, filter, ec, &mut |_, row| f(row)),
        Source::Series {
            start,
            stop,
            step,
            ty,
        } => for_series(start, stop, step.as_ref(), ty, ec, &mut filtered),
        Source::View(name) => {
            let rows = ec.env.view(name).map(|(_, r)| r).unwrap_or_default();
            for row in rows {
                if filtered(row)? == ScanControl::Stop {
                    break;
                }
            }
            Ok(())
        }
    }
}

fn count_arg(e: Option<&Expr>, what: &str, ec: &ExecCtx<'_>) -> Result<Option<i64>> {
    let Some(e) = e else { return Ok(None) };
    let v = e.eval(&[], &ec.ctx())?;
    let Some(n) = v.as_i64() else { return Ok(None) };
    if n < 0 {
        let code = if what == "LIMIT" { "2201W" } else { "2201X" };
        return Err(Error::user(
            SqlState(code),
            format!("{what} must not be negative"),
        ));
    }
    Ok(Some(n))
}

/// An aggregate's running state.
enum Acc {
    Count(i64),
    SumInt(i128, bool),
    SumFloat(f64, bool),
    Avg(f64, i64),
    Min(Option<Value>),
    Max(Option<Value>),
}

impl Acc {
    fn new(call: &AggCall) -> Acc {
        match call.func {
            AggFunc::Count | AggFunc::CountStar => Acc::Count(0),
            AggFunc::Sum if call.ty == DataType::Float8 => Acc::SumFloat(0.0, false),
            AggFunc::Sum => Acc::SumInt(0, false),
            AggFunc::Avg => Acc::Avg(0.0, 0),
            AggFunc::Min => Acc::Min(None),
            AggFunc::Max => Acc::Max(None),
        }
    }

    fn add(&mut self, v: Option<Value>) {
        let Some(v) = v else {
            if let Acc::Count(n) = self {
                *n += 1;
            }
            return;
        };
        if v.is_null() {
            return;
        }
        match self {
            Acc::Count(n) => *n += 1,
            Acc::SumInt(s, seen) => {
                *s += v.as_i64().unwrap_or(0) as i128;
                *seen = true;
            }
            Acc::SumFloat(s, seen) => {
                *s += v.as_f64().unwrap_or(0.0);
                *seen = true;
            }
            Acc::Avg(s, n) => {
                *s += v.as_f64().unwrap_or(0.0);
                *n += 1;
            }
            Acc::Min(m) => {
                let better = match m {
                    None => true,
                    Some(cur) => v.sql_cmp(cur) == Some(std::cmp::Ordering::Less),
                };
                if better {
                    *m = Some(v);
                }
            }
            Acc::Max(m) => {
                let better = match m {
                    None => true,
                    Some(cur) => v.sql_cmp(cur) == Some(std::cmp::Ordering::Greater),
                };
                if better {
                    *m = Some(v);
                }
            }
        }
    }

    fn finish(self) -> Result<Value> {
        Ok(match self {
            Acc::Count(n) => Value::Int8(n),
            Acc::SumInt(_, false) | Acc::SumFloat(_, false) | Acc::Avg(_, 0) => Value::Null,
            Acc::SumInt(s, true) => Value::Int8(i64::try_from(s).map_err(|_| {
                Error::user(SqlState::NUMERIC_VALUE_OUT_OF_RANGE, "bigint out of range")
            })?),
            Acc::SumFloat(s, true) => Value::Float8(s),
            Acc::Avg(s, n) => Value::Float8(s / n as f64),
            Acc::Min(m) | Acc::Max(m) => m.unwrap_or(Value::Null),
        })
    }
}

/// Runs a SELECT and returns its rows.
///
/// # Errors
/// Evaluation errors, storage errors, 57014 on cancel.
pub(crate) fn run_select(
    txn: &mut dyn Transaction,
    plan: &SelectPlan,
    ec: &ExecCtx<'_>,
) -> Result<Vec<Vec<Value>>> {
    let ctx = ec.ctx();
    let limit = count_arg(plan.limit.as_ref(), "LIMIT", ec)?;
    let offset = count_arg(plan.offset.as_ref(), "OFFSET", ec)?.unwrap_or(0);
    // (outputs, sort keys)
    let mut rows: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
    let project = |row: &[Value], rows: &mut Vec<(Vec<Value>, Vec<Value>)>| -> Result<()> {
        let mut out = Vec::with_capacity(plan.outputs.len());
        for e in &plan.outputs {
            out.push(e.eval(row, &ctx)?);
        }
        let mut keys = Vec::with_capacity(plan.sort.len());
        for k in &plan.sort {
            keys.push(k.expr.eval(row, &ctx)?);
        }
        rows.push((out, keys));
        Ok(())
    };
    match &plan.agg {
        None => {
            let stop_at = match (plan.sort.is_empty(), limit) {
                (true, Some(l)) => Some((l + offset) as usize),
                _ => None,
            };
            if stop_at != Some(0) {
                scan_source(txn, plan, ec, &mut |row| {
                    project(&row, &mut rows)?;
                    Ok(if stop_at.is_some_and(|s| rows.len() >= s) {
                        ScanControl::Stop
                    } else {
                        ScanControl::Continue
                    })
                })?;
            }
        }
        Some(agg) => {
            let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
            let mut groups: Vec<(Vec<Value>, Vec<Acc>)> = Vec::new();
            if agg.groups.is_empty() {
                groups.push((Vec::new(), agg.calls.iter().map(Acc::new).collect()));
                index.insert(Vec::new(), 0);
            }
            scan_source(txn, plan, ec, &mut |row| {
                let mut key = Vec::with_capacity(agg.groups.len());
                for g in &agg.groups {
                    key.push(g.eval(&row, &ctx)?);
                }
                let enc = walnut_common::value::encode_key(&key);
                let slot = match index.get(&enc) {
                    Some(&s) => s,
                    None => {
                        groups.push((key, agg.calls.iter().map(Acc::new).collect()));
                        index.insert(enc, groups.len() - 1);
                        groups.len() - 1
                    }
                };
                for (call, acc) in agg.calls.iter().zip(groups[slot].1.iter_mut()) {
                    let v = match &call.arg {
                        Some(a) => Some(a.eval(&row, &ctx)?),
                        None => None,
                    };
                    acc.add(v);
                }
                Ok(ScanControl::Continue)
            })?;
            for (key, accs) in groups {
                let mut arow = key;
                for a in accs {
                    arow.push(a.finish()?);
                }
                if let Some(h) = &agg.having {
                    if !h.matches(&arow, &ctx)? {
                        continue;
                    }
                }
                project(&arow, &mut rows)?;
            }
        }
    }
    if !plan.sort.is_empty() {
        rows.sort_by(|a, b| {
            for (i, k) in plan.sort.iter().enumerate() {
                let o = sort_cmp(&a.1[i], &b.1[i], k.desc, k.nulls_first);
                if o != std::cmp::Ordering::Equal {
                    return o;
                }
            }
            std::cmp::Ordering::Equal
        });
    }
    let it = rows.into_iter().skip(offset as usize).map(|r| r.0);
    Ok(match limit {
        Some(l) => it.take(l as usize).collect(),
        None => it.collect(),
    })
}

/// The DETAIL of a constraint violation: `Failing row contains (...)`.
fn failing_row(row: &[Value]) -> String {
    let shown: Vec<String> = row
        .iter()
        .map(|v| v.to_text().unwrap_or_else(|| "null".into()))
        .collect();
    format!("Failing row contains ({}).", shown.join(", "))
}

fn not_null_violation(def: &TableDef, col: usize, row: &[Value]) -> Error {
    Error::user(
        SqlState::NOT_NULL_VIOLATION,
        format!(
            "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
            def.columns[col].name, def.name
        ),
    )
    .with_detail(failing_row(row))
}

/// Checks a complete row against `checks` (bound CHECK constraints, in name order; PostgreSQL's
/// `ExecRelCheck`): the first that evaluates to false fails the row with 23514; NULL passes.
///
/// # Errors
/// 23514; evaluation errors.
pub(crate) fn check_constraints(
    def: &TableDef,
    checks: &[(String, Expr)],
    row: &[Value],
    ctx: &Ctx<'_>,
) -> Result<()> {
    for (name, e) in checks {
        if e.eval(row, ctx)? == Value::Bool(false) {
            return Err(Error::user(
                SqlState::CHECK_VIOLATION,
                format!(
                    "new row for relation \"{}\" violates check constraint \"{name}\"",
                    def.name
                ),
            )
            .with_detail(failing_row(row)));
        }
    }
    Ok(())
}

/// Checks NOT NULL constraints of a complete row.
pub(crate) fn check_not_null(def: &TableDef, row: &[Value]) -> Result<()> {
    for (i, c) in def.columns.iter().enumerate() {
        if c.not_null && row[i].is_null() {
            return Err(not_null_violation(def, i, row));
        }
    }
    Ok(())
}

/// The full row an INSERT writes from `vals`, one per target column: assignment casts, the
/// defaults of the other columns (NULL where there is none), then NOT NULL and the CHECK
/// constraints checked.
///
/// # Errors
/// Cast and evaluation errors, 23502, 23514.
pub(crate) fn build_row(plan: &InsertPlan, vals: Vec<Value>, ctx: &Ctx<'_>) -> Result<Vec<Value>> {
    let def = &plan.table;
    let mut row = vec![Value::Null; def.columns.len()];
    for (v, &i) in vals.into_iter().zip(&plan.targets) {
        row[i] = v.cast(&def.columns[i].ty)?;
    }
    complete_row(def, &mut row, &plan.defaults, &plan.checks, ctx)?;
    Ok(row)
}

/// Completes a new row whose given columns are filled: evaluates `defaults` (by position,
/// assignment cast) into the others, then checks NOT NULL and the CHECK constraints. Shared by
/// INSERT and COPY FROM.
///
/// # Errors
/// Cast and evaluation errors, 23502, 23514.
pub(crate) fn complete_row(
    def: &TableDef,
    row: &mut [Value],
    defaults: &[(usize, Expr)],
    checks: &[(String, Expr)],
    ctx: &Ctx<'_>,
) -> Result<()> {
    for (i, e) in defaults {
        row[*i] = e.eval(&[], ctx)?.cast(&def.columns[*i].ty)?;
    }
    check_not_null(def, row)?;
    check_constraints(def, checks, row, ctx)
}

/// Runs an INSERT; returns the number of rows inserted, and adds each to `out`.
///
/// # Errors
/// 23502, 23505, 23514, cast errors, storage errors.
pub(crate) fn run_insert(
    txn: &mut dyn Transaction,
    plan: &InsertPlan,
    ec: &ExecCtx<'_>,
    out: &mut Returned<'_, '_>,
) -> Result<u64> {
    let def = &plan.table;
    let ctx = ec.ctx();
    let mut n = 0u64;
    match &plan.source {
        InsertSource::Values(rows) => {
            for r in rows {
                let mut vals = Vec::with_capacity(r.len());
                for e in r {
                    vals.push(e.eval(&[], &ctx)?);
                }
                out.write(build_row(plan, vals, &ctx)?, |row| {
                    txn.insert(&def.name, row).map(|()| WriteOutcome::Done)
                })?;
                n += 1;
            }
        }
        InsertSource::Select(sel) => {
            let streamable = sel.agg.is_none()
                && sel.sort.is_empty()
                && sel.limit.is_none()
                && sel.offset.is_none();
            if let (
                true,
                Source::Series {
                    start,
                    stop,
                    step,
                    ty,
                },
            ) = (streamable, &sel.source)
            {
                // Stream: generate_series needs no transaction access, so each row is inserted
                // as it is produced (pgbench -I G inserts millions of rows this way).
                for_series(start, stop, step.as_ref(), ty, ec, &mut |row| {
                    if let Some(f) = &sel.filter {
                        if !f.matches(&row, &ctx)? {
                            return Ok(ScanControl::Continue);
                        }
                    }
                    let mut vals = Vec::with_capacity(sel.outputs.len());
                    for e in &sel.outputs {
                        vals.push(e.eval(&row, &ctx)?);
                    }
                    out.write(build_row(plan, vals, &ctx)?, |row| {
                        txn.insert_bulk(&def.name, row).map(|()| WriteOutcome::Done)
                    })?;
                    n += 1;
                    Ok(ScanControl::Continue)
                })?;
            } else {
                // The rows are all read before the first is inserted, so the load cannot see
                // its own rows.
                for vals in run_select(txn, sel, ec)? {
                    ec.check_cancel()?;
                    out.write(build_row(plan, vals, &ctx)?, |row| {
                        txn.insert_bulk(&def.name, row).map(|()| WriteOutcome::Done)
                    })?;
                    n += 1;
                }
            }
            // INSERT ... SELECT loads like COPY: whole pages logged as images.
            txn.finish_bulk()?;
        }
    }
    Ok(n)
}

fn collect_matches(
    txn: &mut dyn Transaction,
    def: &TableDef,
    access: &Access,
    filter: Option<&Expr>,
    ec: &ExecCtx<'_>,
) -> Result<Vec<(RowId, Vec<Value>)>> {
    let mut out = Vec::new();
    scan_table(txn, def, access, filter, ec, &mut |rid, row| {
        out.push((rid, row));
        Ok(ScanControl::Continue)
    })?;
    Ok(out)
}

/// Writes each matching row with `write`, following concurrent updates (EvalPlanQual): on
/// `Changed` the WHERE clause is re-checked on the newest version and the write retried there.
fn write_each(
    matches: Vec<(RowId, Vec<Value>)>,
    filter: Option<&Expr>,
    ec: &ExecCtx<'_>,
    write: &mut dyn FnMut(RowId, &[Value]) -> Result<WriteOutcome>,
) -> Result<u64> {
    let ctx = ec.ctx();
    let mut n = 0;
    for (mut rid, mut row) in matches {
        loop {
            ec.check_cancel()?;
            match write(rid, &row)? {
                WriteOutcome::Done => {
                    n += 1;
                    break;
                }
                WriteOutcome::Changed { row: newer, values } => {
                    let still = match filter {
                        Some(f) => f.matches(&values, &ctx)?,
                        None => true,
                    };
                    if !still {
                        break;
                    }
                    rid = newer;
                    row = values;
                }
                WriteOutcome::Gone => break,
            }
        }
    }
    Ok(n)
}

/// Runs an UPDATE; returns the number of rows written, and adds the new version of each to
/// `out`.
///
/// # Errors
/// 23502, 23514, cast and evaluation errors, storage errors (40P01, 57014).
pub(crate) fn run_update(
    txn: &mut dyn Transaction,
    plan: &UpdatePlan,
    ec: &ExecCtx<'_>,
    out: &mut Returned<'_, '_>,
) -> Result<u64> {
    let def = &plan.table;
    let matches = collect_matches(txn, def, &plan.access, plan.filter.as_ref(), ec)?;
    let ctx = ec.ctx();
    write_each(matches, plan.filter.as_ref(), ec, &mut |rid, old| {
        let mut new = old.to_vec();
        for (i, e) in &plan.sets {
            new[*i] = e.eval(old, &ctx)?.cast(&def.columns[*i].ty)?;
        }
        check_not_null(def, &new)?;
        check_constraints(def, &plan.checks, &new, &ctx)?;
        out.write(new, |new| txn.update(&def.name, rid, new))
    })
}

/// Runs a DELETE; returns the number of rows deleted, and adds each, as it was, to `out`.
///
/// # Errors
/// Storage errors (40P01, 57014).
pub(crate) fn run_delete(
    txn: &mut dyn Transaction,
    plan: &DeletePlan,
    ec: &ExecCtx<'_>,
    out: &mut Returned<'_, '_>,
) -> Result<u64> {
    let def = &plan.table;
    let matches = collect_matches(txn, def, &plan.access, plan.filter.as_ref(), ec)?;
    write_each(matches, plan.filter.as_ref(), ec, &mut |rid, old| {
        let outcome = txn.delete(&def.name, rid)?;
        if let WriteOutcome::Done = outcome {
            out.add(old)?;
        }
        Ok(outcome)
    })
}
