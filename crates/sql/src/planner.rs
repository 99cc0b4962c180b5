//! Planning: sqlparser's AST → [`Plan`], with names resolved against the catalog, expressions
//! compiled ([`crate::expr::Expr`]), parameter types inferred and the access path chosen.
//!
//! Type inference follows PostgreSQL's rule for *unknown* operands: a string literal, `NULL` or an
//! untyped `$n` takes the type of whatever it meets first — the other operand of a comparison or
//! an arithmetic operator, the column it is assigned to, the target of a cast. What stays unknown
//! at the end becomes `text`.

use crate::bind::{
    assignable, contains_agg, ident, map_type, mismatch, object_parts, output_name, string_literal,
    table_name, AggState, Binder, ScopeCol,
};
use crate::env::Env;
use crate::errors::undefined_table;
use crate::expr::{CmpOp, Expr};
use crate::plan::*;
use crate::storage::Transaction;
use crate::types::ColumnDesc;
use sqlparser::ast;
use sqlparser::ast::Spanned;
use std::sync::Arc;
use walnut_common::{
    CheckDef, ColumnDef, DataType, Error, Identity, Result, SqlState, TableDef, Value,
};

fn conjuncts(e: &Expr, out: &mut Vec<Expr>) {
    if let Expr::And(a, b) = e {
        conjuncts(a, out);
        conjuncts(b, out);
    } else {
        out.push(e.clone());
    }
}

/// The planner: binds names against one transaction's catalog.
pub(crate) struct Planner<'a> {
    pub txn: &'a mut dyn Transaction,
    /// System views, for FROM names that are not tables.
    pub env: &'a dyn Env,
    /// Parameter types so far; `None` = not yet inferred.
    pub params: Vec<Option<DataType>>,
}

/// Picks a primary-key range scan when the filter pins a key prefix (equalities, then at most
/// one range on the next key column). The filter is still applied to every row.
pub(crate) fn choose_access(filter: Option<&Expr>, def: &TableDef) -> Access {
    let (Some(filter), Some(pk)) = (filter, def.primary_key.as_ref()) else {
        return Access::Full;
    };
    let mut cs = Vec::new();
    conjuncts(filter, &mut cs);
    // (column, op, row-independent operand), normalized so the column is on the left.
    let preds: Vec<(usize, CmpOp, Expr)> = cs
        .into_iter()
        .filter_map(|c| match c {
            Expr::Cmp(op, a, b) => match (*a, *b) {
                (Expr::Col(i), v) if v.is_row_independent() => Some((i, op, v)),
                (v, Expr::Col(i)) if v.is_row_independent() => Some((i, op.flip(), v)),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let mut eq = Vec::new();
    let mut key_types = Vec::new();
    let (mut lo, mut hi) = (None, None);
    for &k in pk {
        key_types.push(def.columns[k].ty.clone());
        if let Some((_, _, v)) = preds.iter().find(|(c, op, _)| *c == k && *op == CmpOp::Eq) {
            eq.push(v.clone());
            continue;
        }
        for (c, op, v) in &preds {
            if *c != k {
                continue;
            }
            match op {
                CmpOp::Gt | CmpOp::Ge if lo.is_none() => lo = Some((v.clone(), *op == CmpOp::Ge)),
                CmpOp::Lt | CmpOp::Le if hi.is_none() => hi = Some((v.clone(), *op == CmpOp::Le)),
                _ => {}
            }
        }
        break;
    }
    if eq.is_empty() && lo.is_none() && hi.is_none() {
        return Access::Full;
    }
    key_types.truncate(eq.len() + 1);
    Access::Index {
        eq,
        lo,
        hi,
        key_types,
    }
}

fn expect_no(cond: bool, what: &str) -> Result<()> {
    if cond {
        Err(Error::unsupported(what))
    } else {
        Ok(())
    }
}

impl Planner<'_> {
    /// Plans one parsed statement.
    ///
    /// # Errors
    /// 42P01/42703 unknown names, 42804/42883 type errors, 0A000 unsupported features.
    pub(crate) fn plan(&mut self, stmt: &ast::Statement) -> Result<Plan> {
        use ast::Statement as S;
        match stmt {
            S::Query(q) => Ok(Plan::Select(Box::new(self.plan_query(q, None)?))),
            S::Insert(ins) => self.plan_insert(ins),
            S::Update(u) => self.plan_update(u),
            S::Delete(d) => self.plan_delete(d),
            S::CreateTable(ct) => plan_create_table(ct),
            S::Drop {
                object_type,
                if_exists,
                names,
                cascade,
                ..
            } => {
                let names = names.iter().map(table_name).collect::<Result<_>>()?;
                // CASCADE of a table is accepted as before (nothing depends on a table yet);
                // of a sequence it would have to drop the defaults that use it.
                let sequence = *object_type == ast::ObjectType::Sequence;
                expect_no(*cascade && sequence, "DROP SEQUENCE ... CASCADE")?;
                match object_type {
                    ast::ObjectType::Table => Ok(Plan::DropTable {
                        names,
                        if_exists: *if_exists,
                    }),
                    ast::ObjectType::Sequence => Ok(Plan::DropSequences {
                        names,
                        if_exists: *if_exists,
                    }),
                    _ => Err(Error::unsupported(format!("DROP {object_type}"))),
                }
            }
            S::Truncate(t) => {
                let names = t
                    .table_names
                    .iter()
                    .map(|t| table_name(&t.name))
                    .collect::<Result<_>>()?;
                Ok(Plan::Truncate { names })
            }
            S::AlterTable(at) => {
                let table = table_name(&at.name)?;
                match at.operations.as_slice() {
                    [ast::AlterTableOperation::AddConstraint {
                        constraint: ast::TableConstraint::PrimaryKey(pk),
                        ..
                    }] => Ok(Plan::AddPrimaryKey {
                        table,
                        columns: index_columns(&pk.columns)?,
                    }),
                    [ast::AlterTableOperation::OwnerTo { new_owner }] => Ok(Plan::AlterOwner {
                        name: table,
                        if_exists: at.if_exists,
                        sequence: false,
                        role: match new_owner {
                            ast::Owner::Ident(i) => ident(i),
                            other => other.to_string().to_ascii_lowercase(),
                        },
                    }),
                    [ast::AlterTableOperation::AlterColumn { column_name, op }] => {
                        self.plan_alter_column_default(table, at.if_exists, ident(column_name), op)
                    }
                    _ => Err(Error::unsupported("this form of ALTER TABLE")),
                }
            }
            S::StartTransaction { modes, .. } => {
                let mut out = crate::plan::TxnModes::default();
                for m in modes {
                    if let ast::TransactionMode::AccessMode(a) = m {
                        out.read_only = Some(*a == ast::TransactionAccessMode::ReadOnly);
                    }
                    if let ast::TransactionMode::IsolationLevel(l) = m {
                        out.isolation = Some(match l {
                            ast::TransactionIsolationLevel::RepeatableRead => {
                                crate::storage::Isolation::RepeatableRead
                            }
                            ast::TransactionIsolationLevel::ReadCommitted
                            | ast::TransactionIsolationLevel::ReadUncommitted => {
                                crate::storage::Isolation::ReadCommitted
                            }
                            _ => return Err(Error::unsupported(format!("isolation level {l}"))),
                        });
                    }
                }
                Ok(Plan::Begin { modes: out })
            }
            S::Commit { .. } => Ok(Plan::Commit),
            S::Rollback {
                savepoint: None, ..
            } => Ok(Plan::Rollback),
            S::Rollback { .. } | S::Savepoint { .. } | S::ReleaseSavepoint { .. } => {
                Err(Error::unsupported("savepoints"))
            }
            S::CreateIndex(_) => Err(Error::unsupported("CREATE INDEX")),
            S::Explain { .. } => Err(Error::unsupported("EXPLAIN")),
            other => {
                let text = other.to_string();
                let word: String = text
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ");
                Err(Error::unsupported(word))
            }
        }
    }

    /// ALTER TABLE ... ALTER COLUMN c SET DEFAULT e | DROP DEFAULT: the expression as text.
    /// The table, the column and the expression are checked when it runs
    /// (`ddl::alter_column_default`): a DDL plan is cached by its text and not planned again.
    ///
    /// # Errors
    /// 0A000 for other ALTER COLUMN forms and an expression whose text does not read back.
    fn plan_alter_column_default(
        &mut self,
        table: String,
        if_exists: bool,
        column: String,
        op: &ast::AlterColumnOperation,
    ) -> Result<Plan> {
        let default = match op {
            ast::AlterColumnOperation::SetDefault { value } => Some(expr_text(value)?),
            ast::AlterColumnOperation::DropDefault => None,
            other => {
                return Err(Error::unsupported(format!(
                    "ALTER TABLE ... ALTER COLUMN {other}"
                )))
            }
        };
        Ok(Plan::AlterColumnDefault {
            table,
            if_exists,
            column,
            default,
        })
    }

    fn binder<'s>(&'s mut self, cols: &'s [ScopeCol], clause: &'static str) -> Binder<'s> {
        Binder {
            cols,
            params: &mut self.params,
            agg: None,
            clause,
        }
    }

    /// The table an INSERT, UPDATE or DELETE writes.
    ///
    /// # Errors
    /// 42P01 if there is none; 42809 for a sequence (PostgreSQL's `CheckValidResultRel`).
    fn table(&mut self, name: &str) -> Result<Arc<TableDef>> {
        if let Some(t) = self.txn.table(name)? {
            return Ok(t);
        }
        if self.txn.sequence_exists(name)? {
            return Err(Error::user(
                SqlState::WRONG_OBJECT_TYPE,
                format!("cannot change sequence \"{name}\""),
            ));
        }
        Err(undefined_table(name))
    }

    fn table_scope(def: &TableDef, qual: &str) -> Vec<ScopeCol> {
        def.columns
            .iter()
            .map(|c| ScopeCol {
                qual: Some(qual.to_string()),
                name: c.name.clone(),
                ty: c.ty.clone(),
            })
            .collect()
    }

    fn plan_from(&mut self, from: &[ast::TableWithJoins]) -> Result<(Source, Vec<ScopeCol>)> {
        let item = match from {
            [] => return Ok((Source::None, Vec::new())),
            [one] if one.joins.is_empty() => &one.relation,
            _ => return Err(Error::unsupported("joins")),
        };
        let (name, args, alias) = match item {
            ast::TableFactor::Table {
                name, alias, args, ..
            } => (name, args.as_ref().map(|a| a.args.as_slice()), alias),
            ast::TableFactor::Function {
                name, args, alias, ..
            } => (name, Some(args.as_slice()), alias),
            ast::TableFactor::Derived { .. } => {
                return Err(Error::unsupported("subqueries in FROM"))
            }
            other => return Err(Error::unsupported(format!("FROM item {other}"))),
        };
        if let Some(args) = args {
            return self.series(name, args, alias.as_ref());
        }
        // `t` is a user table or else a system view; `public.t` only a table, `pg_catalog.v` only
        // a system view.
        let parts = object_parts(name)?;
        let (tables, views) = match parts.as_slice() {
            [_] => (true, true),
            [s, _] if s == "public" => (true, false),
            [s, _] if s == "pg_catalog" => (false, true),
            _ => return Err(undefined_table(&parts.join("."))),
        };
        let tname = parts.last().cloned().unwrap_or_default();
        let qual = alias
            .as_ref()
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| tname.clone());
        if tables {
            if let Some(def) = self.txn.table(&tname)? {
                let scope = Self::table_scope(&def, &qual);
                return Ok((Source::Table(def), scope));
            }
            if self.txn.sequence_exists(&tname)? {
                return Err(Error::unsupported("reading a sequence as a table"));
            }
        }
        if let Some((cols, _)) = views.then(|| self.env.view(&tname)).flatten() {
            let def = TableDef {
                name: tname.clone(),
                columns: cols,
                primary_key: None,
                fillfactor: 100,
                autovacuum_enabled: true,
                checks: Vec::new(),
            };
            return Ok((Source::View(tname), Self::table_scope(&def, &qual)));
        }
        Err(undefined_table(&parts.join(".")))
    }

    fn series(
        &mut self,
        name: &ast::ObjectName,
        args: &[ast::FunctionArg],
        alias: Option<&ast::TableAlias>,
    ) -> Result<(Source, Vec<ScopeCol>)> {
        let fname = object_parts(name)?.last().cloned().unwrap_or_default();
        if fname != "generate_series" {
            return Err(Error::unsupported(format!("table function {fname}")));
        }
        if !(2..=3).contains(&args.len()) {
            return Err(Error::user(
                SqlState::UNDEFINED_FUNCTION,
                "function generate_series with these arguments does not exist",
            ));
        }
        let mut exprs = Vec::new();
        let mut ty = DataType::Int4;
        {
            let mut b = self.binder(&[], "FROM");
            for a in args {
                let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) = a else {
                    return Err(Error::unsupported("this kind of function argument"));
                };
                let (x, t) = b.bind(e)?;
                let (x, t) = b.coerce(x, t, &DataType::Int4)?;
                if !t.is_integer() {
                    return Err(Error::unsupported(format!(
                        "generate_series over {}",
                        t.name()
                    )));
                }
                if t == DataType::Int8 {
                    ty = DataType::Int8;
                }
                exprs.push(x);
            }
        }
        let mut it = exprs.into_iter();
        let (start, stop, step) = (
            it.next().expect("2 args"),
            it.next().expect("2 args"),
            it.next(),
        );
        let (qual, col) = match alias {
            Some(a) => {
                let q = ident(&a.name);
                let c = a
                    .columns
                    .first()
                    .map(|c| ident(&c.name))
                    .unwrap_or_else(|| q.clone());
                (q, c)
            }
            None => ("generate_series".to_string(), "generate_series".to_string()),
        };
        let scope = vec![ScopeCol {
            qual: Some(qual),
            name: col,
            ty: ty.clone(),
        }];
        Ok((
            Source::Series {
                start,
                stop,
                step,
                ty,
            },
            scope,
        ))
    }

    /// Plans a query. `hints` are target column types (INSERT ... SELECT) for unknown outputs.
    pub(crate) fn plan_query(
        &mut self,
        q: &ast::Query,
        hints: Option<&[DataType]>,
    ) -> Result<SelectPlan> {
        expect_no(q.with.is_some(), "WITH")?;
        expect_no(q.fetch.is_some(), "FETCH")?;
        expect_no(!q.locks.is_empty(), "FOR UPDATE/SHARE")?;
        let select = match q.body.as_ref() {
            ast::SetExpr::Select(s) => s,
            ast::SetExpr::Query(inner) if q.order_by.is_none() && q.limit_clause.is_none() => {
                return self.plan_query(inner, hints)
            }
            ast::SetExpr::SetOperation { .. } => {
                return Err(Error::unsupported("UNION/INTERSECT/EXCEPT"))
            }
            ast::SetExpr::Values(_) => {
                return Err(Error::unsupported("VALUES lists outside INSERT"))
            }
            _ => return Err(Error::unsupported("this kind of query")),
        };
        expect_no(select.distinct.is_some(), "SELECT DISTINCT")?;
        expect_no(select.into.is_some(), "SELECT INTO")?;
        let (source, scope) = self.plan_from(&select.from)?;

        let filter = match &select.selection {
            Some(w) => {
                if contains_agg(w) {
                    return Err(Error::user(
                        SqlState::GROUPING_ERROR,
                        "aggregate functions are not allowed in WHERE",
                    ));
                }
                Some(self.binder(&scope, "WHERE").bind_as(w, &DataType::Bool)?)
            }
            None => None,
        };

        let group_asts: Vec<ast::Expr> = match &select.group_by {
            ast::GroupByExpr::Expressions(e, m) if m.is_empty() => e.clone(),
            _ => return Err(Error::unsupported("GROUP BY ALL and grouping modifiers")),
        };
        let order_exprs: Vec<ast::OrderByExpr> = match &q.order_by {
            None => Vec::new(),
            Some(ob) => match &ob.kind {
                ast::OrderByKind::Expressions(e) => e.clone(),
                ast::OrderByKind::All(_) => return Err(Error::unsupported("ORDER BY ALL")),
            },
        };
        let is_agg = !group_asts.is_empty()
            || select.having.is_some()
            || select.projection.iter().any(|p| match p {
                ast::SelectItem::UnnamedExpr(e)
                | ast::SelectItem::ExprWithAlias { expr: e, .. } => contains_agg(e),
                _ => false,
            })
            || order_exprs.iter().any(|o| contains_agg(&o.expr));

        let mut b = Binder {
            cols: &scope,
            params: &mut self.params,
            agg: None,
            clause: "SELECT",
        };
        let mut groups = Vec::new();
        if is_agg {
            let mut state = AggState {
                groups: Vec::new(),
                calls: Vec::new(),
            };
            for g in &group_asts {
                // GROUP BY n refers to the n-th output column.
                let g = match g {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::Number(n, _) => {
                            let idx: usize = n
                                .parse()
                                .map_err(|_| Error::syntax("bad GROUP BY position"))?;
                            match select.projection.get(idx.wrapping_sub(1)) {
                                Some(
                                    ast::SelectItem::UnnamedExpr(e)
                                    | ast::SelectItem::ExprWithAlias { expr: e, .. },
                                ) => e.clone(),
                                _ => {
                                    return Err(Error::user(
                                        SqlState::INVALID_COLUMN_REFERENCE,
                                        format!("GROUP BY position {idx} is not in select list"),
                                    ))
                                }
                            }
                        }
                        _ => g.clone(),
                    },
                    _ => g.clone(),
                };
                b.clause = "GROUP BY";
                let (x, t) = b.bind_resolved(&g)?;
                groups.push(x);
                state.groups.push((g, t));
            }
            b.agg = Some(state);
        }

        // Select list.
        let mut outputs = Vec::new();
        let mut columns = Vec::new();
        b.clause = "SELECT";
        for item in &select.projection {
            match item {
                ast::SelectItem::Wildcard(_) => {
                    if is_agg {
                        return Err(Error::user(
                            SqlState::GROUPING_ERROR,
                            "SELECT * is not allowed with aggregates",
                        ));
                    }
                    expand_star(&scope, &mut outputs, &mut columns);
                }
                ast::SelectItem::QualifiedWildcard(..) => {
                    if is_agg {
                        return Err(Error::user(
                            SqlState::GROUPING_ERROR,
                            "SELECT t.* is not allowed with aggregates",
                        ));
                    }
                    expand_star(&scope, &mut outputs, &mut columns);
                }
                ast::SelectItem::UnnamedExpr(e)
                | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                    let name = match item {
                        ast::SelectItem::ExprWithAlias { alias, .. } => ident(alias),
                        _ => output_name(e),
                    };
                    let (x, t) = b.bind(e)?;
                    let (x, t) = match hints.and_then(|h| h.get(outputs.len())) {
                        Some(h) => b.coerce(x, t, h)?,
                        None => b.resolve(x, t)?,
                    };
                    outputs.push(x);
                    columns.push(ColumnDesc { name, ty: t });
                }
                _ => return Err(Error::unsupported("this kind of select item")),
            }
        }

        let having = match &select.having {
            Some(h) => {
                b.clause = "HAVING";
                Some(b.bind_as(h, &DataType::Bool)?)
            }
            None => None,
        };

        // ORDER BY: output position, output name, or an expression.
        let mut sort = Vec::new();
        b.clause = "ORDER BY";
        for o in &order_exprs {
            let desc = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
            let nulls_first = o.options.nulls_first.unwrap_or(desc);
            let expr = match &o.expr {
                ast::Expr::Value(v) if matches!(v.value, ast::Value::Number(..)) => {
                    let ast::Value::Number(n, _) = &v.value else {
                        unreachable!("matched above")
                    };
                    let idx: usize = n.parse().unwrap_or(0);
                    outputs.get(idx.wrapping_sub(1)).cloned().ok_or_else(|| {
                        Error::user(
                            SqlState::INVALID_COLUMN_REFERENCE,
                            format!("ORDER BY position {n} is not in select list"),
                        )
                    })?
                }
                // A bare name means an output column first (SQL92), then an input column.
                ast::Expr::Identifier(i)
                    if columns.iter().filter(|c| c.name == ident(i)).count() == 1 =>
                {
                    let k = columns
                        .iter()
                        .position(|c| c.name == ident(i))
                        .expect("counted above");
                    outputs[k].clone()
                }
                e => b.bind_resolved(e)?.0,
            };
            sort.push(SortKey {
                expr,
                desc,
                nulls_first,
            });
        }

        let agg = if is_agg {
            let state = b.agg.take().expect("set when is_agg");
            Some(AggPlan {
                groups,
                calls: state.calls,
                having,
            })
        } else {
            None
        };
        // LIMIT / OFFSET.
        let (limit, offset) = match &q.limit_clause {
            None => (None, None),
            Some(ast::LimitClause::LimitOffset {
                limit,
                offset,
                limit_by,
            }) => {
                expect_no(!limit_by.is_empty(), "LIMIT BY")?;
                (limit.clone(), offset.as_ref().map(|o| o.value.clone()))
            }
            Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => {
                (Some(limit.clone()), Some(offset.clone()))
            }
        };
        let mut bind_count = |e: Option<ast::Expr>, what: &'static str| -> Result<Option<Expr>> {
            let Some(e) = e else { return Ok(None) };
            if let ast::Expr::Value(v) = &e {
                if v.value == ast::Value::Null {
                    return Ok(None);
                }
            }
            let mut lb = Binder {
                cols: &[],
                params: &mut self.params,
                agg: None,
                clause: what,
            };
            let (x, t) = lb.bind(&e)?;
            let (x, t) = lb.coerce(x, t, &DataType::Int8)?;
            if !t.is_integer() {
                return Err(mismatch(format!(
                    "argument of {what} must be type bigint, not type {}",
                    t.name()
                )));
            }
            Ok(Some(x))
        };
        let limit = bind_count(limit, "LIMIT")?;
        let offset = bind_count(offset, "OFFSET")?;

        let access = match &source {
            Source::Table(def) => choose_access(filter.as_ref(), def),
            _ => Access::Full,
        };
        Ok(SelectPlan {
            source,
            access,
            filter,
            agg,
            outputs,
            sort,
            limit,
            offset,
            columns: Arc::new(columns),
        })
    }

    fn plan_insert(&mut self, ins: &ast::Insert) -> Result<Plan> {
        expect_no(ins.on.is_some(), "INSERT ... ON CONFLICT")?;
        let ast::TableObject::TableName(name) = &ins.table else {
            return Err(Error::unsupported("INSERT into a table function"));
        };
        let tname = table_name(name)?;
        let def = self.table(&tname)?;
        let explicit = !ins.columns.is_empty();
        let mut targets = Vec::new();
        for c in &ins.columns {
            let cname = object_parts(c)?.last().cloned().unwrap_or_default();
            let i = def.column_index(&cname).ok_or_else(|| {
                Error::user(
                    SqlState::UNDEFINED_COLUMN,
                    format!("column \"{cname}\" of relation \"{tname}\" does not exist"),
                )
            })?;
            if targets.contains(&i) {
                return Err(Error::syntax(format!(
                    "column \"{cname}\" specified more than once"
                )));
            }
            targets.push(i);
        }
        if !explicit {
            targets = (0..def.columns.len()).collect();
        }
        let width_check = |n: usize, targets: &mut Vec<usize>| -> Result<()> {
            if n > targets.len() {
                return Err(Error::syntax(
                    "INSERT has more expressions than target columns",
                ));
            }
            if n < targets.len() {
                if explicit {
                    return Err(Error::syntax(
                        "INSERT has more target columns than expressions",
                    ));
                }
                targets.truncate(n);
            }
            Ok(())
        };
        let source = match ins.source.as_deref() {
            None if !explicit && ins.assignments.is_empty() => {
                // DEFAULT VALUES: one row, every column its default.
                targets.clear();
                InsertSource::Values(vec![Vec::new()])
            }
            None => return Err(Error::unsupported("INSERT without VALUES or SELECT")),
            Some(source) => match source.body.as_ref() {
                ast::SetExpr::Values(values)
                    if source.order_by.is_none() && source.limit_clause.is_none() =>
                {
                    let n = values.rows.first().map(|r| r.content.len()).unwrap_or(0);
                    width_check(n, &mut targets)?;
                    // The defaults of the positions where some row says DEFAULT.
                    let mut keyword_defaults = Vec::with_capacity(n);
                    for (k, &i) in targets.iter().enumerate() {
                        let used = values
                            .rows
                            .iter()
                            .any(|r| r.content.get(k).is_some_and(is_default_keyword));
                        keyword_defaults.push(if used {
                            column_default(&def.columns[i])?
                        } else {
                            None
                        });
                    }
                    let scope: Vec<ScopeCol> = Vec::new();
                    let mut b = self.binder(&scope, "VALUES");
                    let mut rows = Vec::with_capacity(values.rows.len());
                    for row in &values.rows {
                        if row.content.len() != n {
                            return Err(Error::syntax("VALUES lists must all be the same length"));
                        }
                        let mut out = Vec::with_capacity(n);
                        for (k, (e, &col)) in row.content.iter().zip(&targets).enumerate() {
                            let c = &def.columns[col];
                            if is_default_keyword(e) {
                                let d = keyword_defaults.get(k).cloned().flatten();
                                out.push(d.unwrap_or(Expr::Const(Value::Null)));
                                continue;
                            }
                            if c.identity == Some(Identity::Always) {
                                return Err(generated_always(c, false));
                            }
                            let (x, t) = b.bind(e)?;
                            let (x, t) = b.coerce(x, t, &c.ty)?;
                            check_assign(&t, c)?;
                            out.push(x);
                        }
                        rows.push(out);
                    }
                    InsertSource::Values(rows)
                }
                _ => {
                    if let Some(&i) = targets
                        .iter()
                        .find(|&&i| def.columns[i].identity == Some(Identity::Always))
                    {
                        return Err(generated_always(&def.columns[i], false));
                    }
                    let hints: Vec<DataType> =
                        targets.iter().map(|&i| def.columns[i].ty.clone()).collect();
                    let sel = self.plan_query(source, Some(&hints))?;
                    width_check(sel.columns.len(), &mut targets)?;
                    for (c, &i) in sel.columns.iter().zip(&targets) {
                        check_assign(&c.ty, &def.columns[i])?;
                    }
                    InsertSource::Select(Box::new(sel))
                }
            },
        };
        let returning = match &ins.returning {
            Some(items) => {
                let qual = match &ins.table_alias {
                    Some(a) => ident(&a.alias),
                    None => tname.clone(),
                };
                Some(self.plan_returning(items, &Self::table_scope(&def, &qual))?)
            }
            None => None,
        };
        let defaults = missing_defaults(&def, &targets)?;
        let checks = table_checks(&def)?;
        Ok(Plan::Insert(InsertPlan {
            table: def,
            targets,
            defaults,
            checks,
            source,
            returning,
        }))
    }

    /// A `RETURNING` list over `scope`, the target table's row (PostgreSQL's
    /// `transformReturningList`).
    ///
    /// # Errors
    /// 42803 for an aggregate; binding errors (42703, 42804 ...).
    fn plan_returning(
        &mut self,
        items: &[ast::SelectItem],
        scope: &[ScopeCol],
    ) -> Result<Returning> {
        let mut b = self.binder(scope, "RETURNING");
        let mut outputs = Vec::new();
        let mut columns = Vec::new();
        for item in items {
            match item {
                ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                    if let ast::SelectItem::QualifiedWildcard(
                        ast::SelectItemQualifiedWildcardKind::ObjectName(name),
                        _,
                    ) = item
                    {
                        let qual = object_parts(name)?.last().cloned().unwrap_or_default();
                        if scope
                            .first()
                            .is_some_and(|c| c.qual.as_deref() != Some(&qual))
                        {
                            return Err(Error::user(
                                SqlState::UNDEFINED_TABLE,
                                format!("missing FROM-clause entry for table \"{qual}\""),
                            ));
                        }
                    }
                    expand_star(scope, &mut outputs, &mut columns);
                }
                ast::SelectItem::UnnamedExpr(e)
                | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                    if contains_agg(e) {
                        return Err(Error::user(
                            SqlState::GROUPING_ERROR,
                            "aggregate functions are not allowed in RETURNING",
                        ));
                    }
                    let name = match item {
                        ast::SelectItem::ExprWithAlias { alias, .. } => ident(alias),
                        _ => output_name(e),
                    };
                    let (x, t) = b.bind_resolved(e)?;
                    outputs.push(x);
                    columns.push(ColumnDesc { name, ty: t });
                }
                _ => return Err(Error::unsupported("this kind of RETURNING item")),
            }
        }
        Ok(Returning {
            outputs,
            columns: Arc::new(columns),
        })
    }

    fn single_table(
        &mut self,
        twj: &ast::TableWithJoins,
    ) -> Result<(Arc<TableDef>, Vec<ScopeCol>)> {
        expect_no(!twj.joins.is_empty(), "joins")?;
        let ast::TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = &twj.relation
        else {
            return Err(Error::unsupported("this kind of target table"));
        };
        let tname = table_name(name)?;
        let def = self.table(&tname)?;
        let qual = alias.as_ref().map(|a| ident(&a.name)).unwrap_or(tname);
        let scope = Self::table_scope(&def, &qual);
        Ok((def, scope))
    }

    fn plan_update(&mut self, u: &ast::Update) -> Result<Plan> {
        expect_no(u.from.is_some(), "UPDATE ... FROM")?;
        let (def, scope) = self.single_table(&u.table)?;
        let mut b = Binder {
            cols: &scope,
            params: &mut self.params,
            agg: None,
            clause: "UPDATE",
        };
        let mut sets = Vec::new();
        for a in &u.assignments {
            let ast::AssignmentTarget::ColumnName(cn) = &a.target else {
                return Err(Error::unsupported("multi-column assignment"));
            };
            let cname = object_parts(cn)?.last().cloned().unwrap_or_default();
            let i = def.column_index(&cname).ok_or_else(|| {
                Error::user(
                    SqlState::UNDEFINED_COLUMN,
                    format!(
                        "column \"{cname}\" of relation \"{}\" does not exist",
                        def.name
                    ),
                )
            })?;
            if contains_agg(&a.value) {
                return Err(Error::user(
                    SqlState::GROUPING_ERROR,
                    "aggregate functions are not allowed in UPDATE",
                ));
            }
            if is_default_keyword(&a.value) {
                let d = column_default(&def.columns[i])?;
                sets.push((i, d.unwrap_or(Expr::Const(Value::Null))));
                continue;
            }
            if def.columns[i].identity == Some(Identity::Always) {
                return Err(generated_always(&def.columns[i], true));
            }
            let (x, t) = b.bind(&a.value)?;
            let (x, t) = b.coerce(x, t, &def.columns[i].ty)?;
            check_assign(&t, &def.columns[i])?;
            sets.push((i, x));
        }
        b.clause = "WHERE";
        let filter = match &u.selection {
            Some(w) => Some(b.bind_as(w, &DataType::Bool)?),
            None => None,
        };
        let access = choose_access(filter.as_ref(), &def);
        let returning = match &u.returning {
            Some(items) => Some(self.plan_returning(items, &scope)?),
            None => None,
        };
        let checks = table_checks(&def)?;
        Ok(Plan::Update(UpdatePlan {
            table: def,
            access,
            filter,
            sets,
            checks,
            returning,
        }))
    }

    fn plan_delete(&mut self, d: &ast::Delete) -> Result<Plan> {
        expect_no(d.using.is_some(), "DELETE ... USING")?;
        let tables = match &d.from {
            ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => t,
        };
        let [twj] = tables.as_slice() else {
            return Err(Error::unsupported("DELETE from several tables"));
        };
        let (def, scope) = self.single_table(twj)?;
        let filter = match &d.selection {
            Some(w) => Some(self.binder(&scope, "WHERE").bind_as(w, &DataType::Bool)?),
            None => None,
        };
        let access = choose_access(filter.as_ref(), &def);
        let returning = match &d.returning {
            Some(items) => Some(self.plan_returning(items, &scope)?),
            None => None,
        };
        Ok(Plan::Delete(DeletePlan {
            table: def,
            access,
            filter,
            returning,
        }))
    }
}

/// `*`: every column of `scope`, in order, as outputs with their names and types.
fn expand_star(scope: &[ScopeCol], outputs: &mut Vec<Expr>, columns: &mut Vec<ColumnDesc>) {
    for (i, c) in scope.iter().enumerate() {
        outputs.push(Expr::Col(i));
        columns.push(ColumnDesc {
            name: c.name.clone(),
            ty: c.ty.clone(),
        });
    }
}

fn check_assign(from: &DataType, col: &ColumnDef) -> Result<()> {
    if assignable(from, &col.ty) {
        Ok(())
    } else {
        Err(mismatch(format!(
            "column \"{}\" is of type {} but expression is of type {}",
            col.name,
            col.ty.name(),
            from.name()
        )))
    }
}

/// Binds a `DEFAULT` expression for `col` and coerces it to the column's type (PostgreSQL's
/// `cookDefault`): no column references (0A000), aggregates (42803) or parameters (42P02), and
/// a type that assigns to the column's (42804).
fn bind_default(e: &ast::Expr, col: &ColumnDef) -> Result<Expr> {
    let mut params = Vec::new();
    let mut b = Binder {
        cols: &[],
        params: &mut params,
        agg: None,
        clause: "DEFAULT expressions",
    };
    if contains_agg(e) {
        return Err(Error::user(
            SqlState::GROUPING_ERROR,
            "aggregate functions are not allowed in DEFAULT expressions",
        ));
    }
    let (x, t) = b.bind(e).map_err(|err| {
        // With no columns in scope, any column reference fails to resolve.
        if err.sqlstate == SqlState::UNDEFINED_COLUMN || err.sqlstate == SqlState::UNDEFINED_TABLE {
            Error::user(
                SqlState::FEATURE_NOT_SUPPORTED,
                "cannot use column reference in DEFAULT expression",
            )
        } else {
            err
        }
    })?;
    let (x, t) = b.coerce(x, t, &col.ty)?;
    if !params.is_empty() {
        return Err(Error::user(
            SqlState::UNDEFINED_PARAMETER,
            "there is no parameter $1",
        ));
    }
    if !assignable(&t, &col.ty) {
        return Err(mismatch(format!(
            "column \"{}\" is of type {} but default expression is of type {}",
            col.name,
            col.ty.name(),
            t.name()
        )));
    }
    Ok(x)
}

/// The text a `DEFAULT` or `CHECK` expression is kept as: sqlparser's rendering of it, which
/// must parse back to the same expression (it does not always: `- -1` renders as `--1`, a
/// comment).
///
/// # Errors
/// 0A000 if the rendering does not parse back to `e`.
fn expr_text(e: &ast::Expr) -> Result<String> {
    let text = e.to_string();
    match parse_expr(&text) {
        Some(back) if back == *e => Ok(text),
        _ => Err(Error::unsupported(format!(
            "this expression in a table definition (it would be stored as {text})"
        ))),
    }
}

/// Binds a CHECK constraint's expression over the table's row `scope` (PostgreSQL's
/// `cookConstraint`): no aggregates (42803) or parameters (42P02), and boolean (42804).
fn bind_check(e: &ast::Expr, scope: &[ScopeCol]) -> Result<Expr> {
    if contains_agg(e) {
        return Err(Error::user(
            SqlState::GROUPING_ERROR,
            "aggregate functions are not allowed in check constraints",
        ));
    }
    let mut params = Vec::new();
    let mut b = Binder {
        cols: scope,
        params: &mut params,
        agg: None,
        clause: "check constraints",
    };
    let (x, t) = b.bind(e)?;
    let (x, t) = b.coerce(x, t, &DataType::Bool)?;
    if !params.is_empty() {
        return Err(Error::user(
            SqlState::UNDEFINED_PARAMETER,
            "there is no parameter $1",
        ));
    }
    if t != DataType::Bool {
        return Err(mismatch(format!(
            "argument of CHECK must be type boolean, not type {}",
            t.name()
        )));
    }
    Ok(x)
}

/// The columns of `columns` that `e` names, sorted, each once.
fn referenced_columns(e: &ast::Expr, columns: &[ColumnDef]) -> Vec<String> {
    let mut out = Vec::new();
    let _ = ast::visit_expressions(e, |x| {
        let name = match x {
            ast::Expr::Identifier(i) => Some(ident(i)),
            ast::Expr::CompoundIdentifier(parts) => parts.last().map(ident),
            _ => None,
        };
        if let Some(n) = name.filter(|n| columns.iter().any(|c| &c.name == n)) {
            out.push(n);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    out.sort();
    out.dedup();
    out
}

/// The CHECK constraints of a new table `table`, from (name if given, expression) in the
/// order written (column and table constraints interleaved, as PostgreSQL names them): each bound over the table's columns and checked, named, and sorted by name.
/// An unnamed one is `table_col_check` if it names one column and `table_check` otherwise,
/// with 1, 2 ... appended while that is taken (PostgreSQL's `ChooseConstraintName`, within the
/// table).
///
/// # Errors
/// As [`bind_check`]; 42710 for a name given twice.
fn plan_checks(
    table: &str,
    columns: &[ColumnDef],
    raw: &[(Option<String>, ast::Expr)],
) -> Result<Vec<CheckDef>> {
    let scope: Vec<ScopeCol> = columns
        .iter()
        .map(|c| ScopeCol {
            qual: Some(table.to_string()),
            name: c.name.clone(),
            ty: c.ty.clone(),
        })
        .collect();
    // One pass in the order written, as AddRelationNewConstraints makes: a name given is
    // checked against every name before it, given or chosen.
    let mut taken: Vec<String> = Vec::new();
    let mut out = Vec::with_capacity(raw.len());
    for (name, e) in raw {
        bind_check(e, &scope)?;
        let name = match name {
            Some(n) if taken.contains(n) => {
                return Err(Error::user(
                    SqlState::DUPLICATE_OBJECT,
                    format!("check constraint \"{n}\" already exists"),
                ))
            }
            Some(n) => {
                taken.push(n.clone());
                n.clone()
            }
            None => {
                let base = match referenced_columns(e, columns).as_slice() {
                    [one] => format!("{table}_{one}_check"),
                    _ => format!("{table}_check"),
                };
                let mut n = base.clone();
                let mut k = 0;
                while taken.contains(&n) {
                    k += 1;
                    n = format!("{base}{k}");
                }
                taken.push(n.clone());
                n
            }
        };
        out.push(CheckDef {
            name,
            expr: expr_text(e)?,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The CHECK constraints of `def`, bound over its row, in name order.
///
/// # Errors
/// Corruption if a stored expression no longer parses; binding errors if it no longer binds.
pub(crate) fn table_checks(def: &TableDef) -> Result<Vec<(String, Expr)>> {
    let scope = Planner::table_scope(def, &def.name);
    def.checks
        .iter()
        .map(|c| {
            let e = parse_expr(&c.expr).ok_or_else(|| {
                Error::corruption(format!(
                    "check constraint \"{}\" does not parse: {}",
                    c.name, c.expr
                ))
            })?;
            Ok((c.name.clone(), bind_check(&e, &scope)?))
        })
        .collect()
}

fn parse_expr(sql: &str) -> Option<ast::Expr> {
    sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| {
            let e = p.parse_expr()?;
            p.expect_token(&sqlparser::tokenizer::Token::EOF)?;
            Ok(e)
        })
        .ok()
}

/// The `DEFAULT` expression of `col`, bound (PostgreSQL's `build_column_default`); None if the
/// column has none, so its default is NULL.
///
/// # Errors
/// Corruption if the stored text no longer parses; binding errors if it no longer binds.
pub(crate) fn column_default(col: &ColumnDef) -> Result<Option<Expr>> {
    let Some(sql) = &col.default else {
        return Ok(None);
    };
    let e = parse_expr(sql).ok_or_else(|| {
        Error::corruption(format!(
            "DEFAULT expression of column \"{}\" does not parse: {sql}",
            col.name
        ))
    })?;
    bind_default(&e, col).map(Some)
}

/// The bound defaults of `def`'s columns that `targets` leaves out and that have one.
///
/// # Errors
/// As [`column_default`].
pub(crate) fn missing_defaults(def: &TableDef, targets: &[usize]) -> Result<Vec<(usize, Expr)>> {
    let mut out = Vec::new();
    for (i, c) in def.columns.iter().enumerate() {
        if !targets.contains(&i) {
            if let Some(e) = column_default(c)? {
                out.push((i, e));
            }
        }
    }
    Ok(out)
}

/// Whether `e` is the bare keyword `DEFAULT` (in a VALUES row or a SET clause).
fn is_default_keyword(e: &ast::Expr) -> bool {
    matches!(e, ast::Expr::Identifier(i) if i.quote_style.is_none() && ident(i) == "default")
}

/// `NOT ENFORCED` (PostgreSQL 18) is not supported: 0A000.
fn reject_not_enforced(ck: &ast::CheckConstraint) -> Result<()> {
    expect_no(ck.enforced == Some(false), "NOT ENFORCED check constraints")
}

fn index_columns(cols: &[ast::IndexColumn]) -> Result<Vec<String>> {
    cols.iter()
        .map(|c| match &c.column.expr {
            ast::Expr::Identifier(i) => Ok(ident(i)),
            _ => Err(Error::unsupported("expressions in a primary key")),
        })
        .collect()
}

/// A name that goes into the catalog: `""` is 42601, as PostgreSQL's scanner refuses it
/// (the catalog's records cannot hold an empty name).
fn nonempty(name: String) -> Result<String> {
    if name.is_empty() {
        return Err(Error::syntax("zero-length delimited identifier"));
    }
    Ok(name)
}

fn plan_create_table(ct: &ast::CreateTable) -> Result<Plan> {
    expect_no(ct.query.is_some(), "CREATE TABLE AS")?;
    expect_no(ct.like.is_some(), "CREATE TABLE LIKE")?;
    let name = nonempty(table_name(&ct.name)?)?;
    let mut columns: Vec<ColumnDef> = Vec::new();
    let mut pk: Option<Vec<usize>> = None;
    let mut raw_checks: Vec<(Option<String>, ast::Expr)> = Vec::new();
    let multiple_pk = || {
        Error::user(
            SqlState::INVALID_TABLE_DEFINITION,
            format!("multiple primary keys for table \"{name}\" are not allowed"),
        )
    };
    let mut serials = Vec::new();
    for c in &ct.columns {
        let cname = nonempty(ident(&c.name))?;
        if columns.iter().any(|x| x.name == cname) {
            return Err(Error::user(
                SqlState::DUPLICATE_COLUMN,
                format!("column \"{cname}\" specified more than once"),
            ));
        }
        let serial = serial_type(&c.data_type);
        let mut identity = None;
        let mut col = ColumnDef {
            name: cname,
            ty: match &serial {
                Some(t) => t.clone(),
                None => map_type(&c.data_type)?,
            },
            not_null: false,
            default: None,
            identity: None,
        };
        for o in &c.options {
            match &o.option {
                ast::ColumnOption::NotNull => col.not_null = true,
                ast::ColumnOption::Null => {}
                ast::ColumnOption::PrimaryKey(_) => {
                    if pk.is_some() {
                        return Err(multiple_pk());
                    }
                    pk = Some(vec![columns.len()]);
                }
                ast::ColumnOption::Check(ck) => {
                    reject_not_enforced(ck)?;
                    let name = o.name.as_ref().or(ck.name.as_ref()).map(ident);
                    raw_checks.push((name.map(nonempty).transpose()?, (*ck.expr).clone()));
                }
                ast::ColumnOption::Default(e) => {
                    if col.default.is_some() {
                        return Err(Error::syntax(format!(
                            "multiple default values specified for column \"{}\" of table \"{name}\"",
                            col.name
                        )));
                    }
                    // Checked now, as PostgreSQL's cookDefault does; stored as text.
                    bind_default(e, &col)?;
                    col.default = Some(expr_text(e)?);
                }
                ast::ColumnOption::Generated {
                    generated_as: g @ (ast::GeneratedAs::Always | ast::GeneratedAs::ByDefault),
                    sequence_options,
                    generation_expr: None,
                    ..
                } => {
                    if identity.is_some() {
                        return Err(Error::syntax(format!(
                            "multiple identity specifications for column \"{}\" of table \"{name}\"",
                            col.name
                        )));
                    }
                    col.identity = Some(if *g == ast::GeneratedAs::Always {
                        Identity::Always
                    } else {
                        Identity::ByDefault
                    });
                    identity = Some(identity_options(
                        sequence_options.as_deref().unwrap_or(&[]),
                    )?);
                }
                other => return Err(Error::unsupported(format!("column option {other}"))),
            }
        }
        if let Some(opts) = identity {
            if !matches!(col.ty, DataType::Int2 | DataType::Int4 | DataType::Int8) {
                return Err(Error::user(
                    SqlState::INVALID_PARAMETER_VALUE,
                    "identity column type must be smallint, integer, or bigint",
                ));
            }
            if col.default.is_some() || serial.is_some() {
                return Err(Error::syntax(format!(
                    "both default and identity specified for column \"{}\" of table \"{name}\"",
                    col.name
                )));
            }
            serials.push((columns.len(), opts));
        } else if serial.is_some() {
            serials.push((columns.len(), crate::sequence::SeqOptions::default()));
        }
        columns.push(col);
    }
    for tc in &ct.constraints {
        match tc {
            ast::TableConstraint::PrimaryKey(p) => {
                if pk.is_some() {
                    return Err(multiple_pk());
                }
                let mut idx = Vec::new();
                for cname in index_columns(&p.columns)? {
                    let i = columns
                        .iter()
                        .position(|c| c.name == cname)
                        .ok_or_else(|| {
                            Error::user(
                                SqlState::UNDEFINED_COLUMN,
                                format!("column \"{cname}\" named in key does not exist"),
                            )
                        })?;
                    idx.push(i);
                }
                pk = Some(idx);
            }
            ast::TableConstraint::Check(ck) => {
                reject_not_enforced(ck)?;
                let name = ck.name.as_ref().map(ident).map(nonempty).transpose()?;
                raw_checks.push((name, (*ck.expr).clone()));
            }
            other => return Err(Error::unsupported(format!("table constraint {other}"))),
        }
    }
    if let Some(pk) = &pk {
        for &i in pk {
            columns[i].not_null = true;
        }
    }
    let mut fillfactor = 100u8;
    let mut autovacuum_enabled = true;
    let opts: &[ast::SqlOption] = match &ct.table_options {
        ast::CreateTableOptions::None => &[],
        ast::CreateTableOptions::With(o) => o,
        _ => return Err(Error::unsupported("these table options")),
    };
    for o in opts {
        match o {
            ast::SqlOption::KeyValue { key, value } if ident(key) == "fillfactor" => {
                let text = match value {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::Number(n, _) => n.clone(),
                        other => string_literal(other).unwrap_or_default().to_string(),
                    },
                    other => other.to_string(),
                };
                let n: i64 = text.trim().parse().map_err(|_| {
                    Error::user(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("invalid value for integer option \"fillfactor\": {text}"),
                    )
                })?;
                if !(10..=100).contains(&n) {
                    return Err(Error::user(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("value {n} out of bounds for option \"fillfactor\""),
                    )
                    .with_detail("Valid values are between \"10\" and \"100\"."));
                }
                fillfactor = n as u8;
            }
            ast::SqlOption::KeyValue { key, value } if ident(key) == "autovacuum_enabled" => {
                let text = match value {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::Boolean(b) => b.to_string(),
                        ast::Value::Number(n, _) => n.clone(),
                        other => string_literal(other).unwrap_or_default().to_string(),
                    },
                    ast::Expr::Identifier(i) => i.value.clone(),
                    other => other.to_string(),
                };
                autovacuum_enabled = walnut_common::guc::parse_bool(&text).ok_or_else(|| {
                    Error::user(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("invalid value for boolean option \"autovacuum_enabled\": {text}"),
                    )
                })?;
            }
            ast::SqlOption::KeyValue { key, .. } => {
                return Err(Error::user(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("unrecognized parameter \"{}\"", ident(key)),
                ))
            }
            _ => return Err(Error::unsupported("this table option")),
        }
    }
    // sqlparser keeps column and table constraints apart; their positions in the text give
    // back the order they were written in, which decides the names of unnamed ones.
    if raw_checks.iter().all(|(_, e)| e.span().start.line > 0) {
        raw_checks.sort_by_key(|(_, e)| {
            let at = e.span().start;
            (at.line, at.column)
        });
    }
    let checks = plan_checks(&name, &columns, &raw_checks)?;
    for &(i, _) in &serials {
        if columns[i].default.is_some() {
            return Err(Error::syntax(format!(
                "multiple default values specified for column \"{}\" of table \"{name}\"",
                columns[i].name
            )));
        }
        columns[i].not_null = true;
    }
    let def = TableDef {
        name,
        columns,
        primary_key: pk,
        fillfactor,
        autovacuum_enabled,
        checks,
    };
    Ok(Plan::CreateTable {
        def,
        if_not_exists: ct.if_not_exists,
        serials,
    })
}

/// The sequence options of an identity column, `GENERATED ... AS IDENTITY (options)` (sqlparser
/// takes them in CREATE SEQUENCE's fixed order only).
///
/// # Errors
/// 42601 for a repeated option or a value other than an integer literal; 22003 beyond bigint.
fn identity_options(opts: &[ast::SequenceOptions]) -> Result<crate::sequence::SeqOptions> {
    use ast::SequenceOptions as O;
    fn int(e: &ast::Expr) -> Result<i64> {
        let (neg, e) = match e {
            ast::Expr::UnaryOp {
                op: ast::UnaryOperator::Minus,
                expr,
            } => (true, &**expr),
            e => (false, e),
        };
        let n = match e {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => n,
                _ => return Err(Error::syntax(format!("syntax error at or near \"{e}\""))),
            },
            _ => return Err(Error::syntax(format!("syntax error at or near \"{e}\""))),
        };
        let text = if neg { format!("-{n}") } else { n.clone() };
        text.parse().map_err(|_| {
            Error::user(
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                format!("value \"{text}\" is out of range for type bigint"),
            )
        })
    }
    fn set<T>(slot: &mut Option<T>, v: T) -> Result<()> {
        if slot.replace(v).is_some() {
            return Err(Error::syntax("conflicting or redundant options"));
        }
        Ok(())
    }
    let mut o = crate::sequence::SeqOptions::default();
    for opt in opts {
        match opt {
            O::IncrementBy(e, _) => set(&mut o.increment, int(e)?)?,
            O::MinValue(e) => set(&mut o.min, e.as_ref().map(int).transpose()?)?,
            O::MaxValue(e) => set(&mut o.max, e.as_ref().map(int).transpose()?)?,
            O::StartWith(e, _) => set(&mut o.start, int(e)?)?,
            O::Cache(e) => set(&mut o.cache, int(e)?)?,
            O::Cycle(no) => set(&mut o.cycle, !*no)?,
        }
    }
    Ok(o)
}

/// 428C9 for a value other than DEFAULT given to a GENERATED ALWAYS identity column (PostgreSQL's
/// `rewriteTargetListIU`); `update`: by UPDATE.
fn generated_always(c: &ColumnDef, update: bool) -> Error {
    let message = if update {
        format!("column \"{}\" can only be updated to DEFAULT", c.name)
    } else {
        format!(
            "cannot insert a non-DEFAULT value into column \"{}\"",
            c.name
        )
    };
    Error::user(SqlState::GENERATED_ALWAYS, message).with_detail(format!(
        "Column \"{}\" is an identity column defined as GENERATED ALWAYS.",
        c.name
    ))
}

/// The column type of `serial`, `bigserial` and `smallserial` (and `serial4`, `serial8`,
/// `serial2`); `None` for any other type.
fn serial_type(t: &ast::DataType) -> Option<DataType> {
    let ast::DataType::Custom(name, args) = t else {
        return None;
    };
    if !args.is_empty() {
        return None;
    }
    match object_parts(name).ok()?.as_slice() {
        [n] | [_, n] => match n.as_str() {
            "serial" | "serial4" => Some(DataType::Int4),
            "bigserial" | "serial8" => Some(DataType::Int8),
            "smallserial" | "serial2" => Some(DataType::Int2),
            _ => None,
        },
        _ => None,
    }
}
