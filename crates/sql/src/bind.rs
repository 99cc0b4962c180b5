//! Binding: sqlparser expressions → compiled [`Expr`]s over a scope of columns, with PostgreSQL's
//! type resolution. An *unknown* operand (string literal, NULL, untyped `$n`) takes the type of
//! the operand or column it meets; what stays unknown becomes `text`. In aggregate mode, GROUP BY
//! expressions and aggregate calls map to slots of the aggregate row.

use crate::errors::{undefined_column, undefined_table};
use crate::expr::{ArithOp, CmpOp, Expr, Func};
use crate::plan::{AggCall, AggFunc};
use sqlparser::ast;
use walnut_common::{DataType, Error, Result, SqlState, Value};

/// Type of a bound expression: known, or PostgreSQL's *unknown* (literal strings, NULL, untyped
/// parameters), resolved by context.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    Known(DataType),
    Unknown,
}

/// A column visible to expressions.
#[derive(Debug, Clone)]
pub(crate) struct ScopeCol {
    pub qual: Option<String>,
    pub name: String,
    pub ty: DataType,
}

pub(crate) struct AggState {
    pub groups: Vec<(ast::Expr, DataType)>,
    pub calls: Vec<AggCall>,
}

/// Normalizes an identifier: unquoted names fold to lower case.
pub(crate) fn ident(i: &ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

pub(crate) fn object_parts(name: &ast::ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|p| match p {
            ast::ObjectNamePart::Identifier(i) => Ok(ident(i)),
            _ => Err(Error::unsupported("this kind of name")),
        })
        .collect()
}

/// The relation name in an object name: `public.t` and `t` are `t`; other schemas do not exist.
pub(crate) fn table_name(name: &ast::ObjectName) -> Result<String> {
    let parts = object_parts(name)?;
    match parts.as_slice() {
        [t] => Ok(t.clone()),
        [s, t] if s == "public" => Ok(t.clone()),
        _ => Err(undefined_table(&parts.join("."))),
    }
}

pub(crate) fn mismatch(msg: String) -> Error {
    Error::user(SqlState::DATATYPE_MISMATCH, msg)
}

pub(crate) fn is_numeric(t: &DataType) -> bool {
    t.is_integer() || *t == DataType::Float8
}

/// True if a value of type `from` may be stored in a column of type `to` (assignment cast).
pub(crate) fn assignable(from: &DataType, to: &DataType) -> bool {
    (is_numeric(from) && is_numeric(to)) || to.is_string() || from == to
}

/// True if `a` and `b` can be compared.
pub(crate) fn comparable(a: &DataType, b: &DataType) -> bool {
    (is_numeric(a) && is_numeric(b)) || (a.is_string() && b.is_string()) || a == b
}

/// Maps a SQL type name to a walnut type.
///
/// # Errors
/// 0A000 for types walnut does not have.
pub(crate) fn map_type(t: &ast::DataType) -> Result<DataType> {
    use ast::DataType as D;
    let len = |l: &Option<ast::CharacterLength>| match l {
        Some(ast::CharacterLength::IntegerLength { length, .. }) => Some(*length as u32),
        _ => None,
    };
    Ok(match t {
        D::Int(_) | D::Integer(_) | D::Int4(_) => DataType::Int4,
        D::BigInt(_) | D::Int8(_) => DataType::Int8,
        D::SmallInt(_) | D::Int2(_) => DataType::Int2,
        D::Bool | D::Boolean => DataType::Bool,
        D::DoublePrecision | D::Float8 | D::Double(_) => DataType::Float8,
        D::Float(ast::ExactNumberInfo::None) => DataType::Float8,
        D::Float(ast::ExactNumberInfo::Precision(p)) if *p > 24 => DataType::Float8,
        D::Text => DataType::Text,
        D::Varchar(l) | D::CharacterVarying(l) | D::CharVarying(l) => DataType::Varchar(len(l)),
        D::Char(l) | D::Character(l) => DataType::Char(len(l).unwrap_or(1)),
        D::Timestamp(_, ast::TimezoneInfo::None | ast::TimezoneInfo::WithoutTimeZone) => {
            DataType::Timestamp
        }
        D::Custom(name, args) => {
            let n = object_parts(name)?.last().cloned().unwrap_or_default();
            let arg = args.first().and_then(|a| a.parse::<u32>().ok());
            match n.as_str() {
                "int4" => DataType::Int4,
                "int8" => DataType::Int8,
                "int2" => DataType::Int2,
                "bool" => DataType::Bool,
                "float8" => DataType::Float8,
                "text" => DataType::Text,
                "varchar" => DataType::Varchar(arg),
                "bpchar" => DataType::Char(arg.unwrap_or(1)),
                "timestamp" => DataType::Timestamp,
                "pg_lsn" => DataType::PgLsn,
                // Object identifiers are plain int8 here (catalog views report int8 OIDs).
                "oid" => DataType::Int8,
                _ => return Err(Error::unsupported(format!("type {n}"))),
            }
        }
        other => return Err(Error::unsupported(format!("type {other}"))),
    })
}

/// True for `regclass` / `pg_catalog.regclass`, which walnut has only as a cast target.
pub(crate) fn is_regclass(t: &ast::DataType) -> bool {
    match t {
        ast::DataType::Regclass => true,
        ast::DataType::Custom(name, args) if args.is_empty() => match object_parts(name).as_deref()
        {
            Ok([n]) => n == "regclass",
            Ok([s, n]) => s == "pg_catalog" && n == "regclass",
            _ => false,
        },
        _ => false,
    }
}

/// Binds expressions over one scope.
pub(crate) struct Binder<'p> {
    pub cols: &'p [ScopeCol],
    pub params: &'p mut Vec<Option<DataType>>,
    pub agg: Option<AggState>,
    /// Where aggregates are not allowed, the clause name for the error (`WHERE`).
    pub clause: &'static str,
}

pub(crate) fn agg_func(name: &str) -> Option<AggFunc> {
    Some(match name {
        "count" => AggFunc::Count,
        "sum" => AggFunc::Sum,
        "min" => AggFunc::Min,
        "max" => AggFunc::Max,
        "avg" => AggFunc::Avg,
        _ => return None,
    })
}

pub(crate) fn func_name(f: &ast::Function) -> Result<String> {
    let parts = object_parts(&f.name)?;
    match parts.as_slice() {
        [n] => Ok(n.clone()),
        [s, n] if s == "pg_catalog" => Ok(n.clone()),
        _ => Err(Error::user(
            SqlState::UNDEFINED_FUNCTION,
            format!("function {} does not exist", parts.join(".")),
        )),
    }
}

/// Unnamed plain arguments of a call; `Ok(None)` for `f(*)`.
pub(crate) fn func_args(f: &ast::Function) -> Result<Option<Vec<&ast::Expr>>> {
    match &f.args {
        ast::FunctionArguments::None => Ok(Some(Vec::new())),
        ast::FunctionArguments::Subquery(_) => Err(Error::unsupported("subqueries")),
        ast::FunctionArguments::List(list) => {
            if list.duplicate_treatment == Some(ast::DuplicateTreatment::Distinct) {
                return Err(Error::unsupported("DISTINCT in aggregates"));
            }
            let mut out = Vec::new();
            for a in &list.args {
                match a {
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => out.push(e),
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard)
                        if list.args.len() == 1 =>
                    {
                        return Ok(None)
                    }
                    _ => return Err(Error::unsupported("this kind of function argument")),
                }
            }
            Ok(Some(out))
        }
    }
}

/// True if `e` contains an aggregate call.
pub(crate) fn contains_agg(e: &ast::Expr) -> bool {
    use ast::Expr as E;
    match e {
        E::Function(f) => {
            func_name(f).ok().and_then(|n| agg_func(&n)).is_some()
                || func_args(f)
                    .ok()
                    .flatten()
                    .is_some_and(|a| a.iter().any(|x| contains_agg(x)))
        }
        E::BinaryOp { left, right, .. } => contains_agg(left) || contains_agg(right),
        E::UnaryOp { expr, .. } | E::Nested(expr) | E::IsNull(expr) | E::IsNotNull(expr) => {
            contains_agg(expr)
        }
        E::Cast { expr, .. } => contains_agg(expr),
        E::Between {
            expr, low, high, ..
        } => contains_agg(expr) || contains_agg(low) || contains_agg(high),
        E::InList { expr, list, .. } => contains_agg(expr) || list.iter().any(contains_agg),
        E::Like { expr, pattern, .. } | E::ILike { expr, pattern, .. } => {
            contains_agg(expr) || contains_agg(pattern)
        }
        E::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            operand.as_deref().is_some_and(contains_agg)
                || conditions
                    .iter()
                    .any(|c| contains_agg(&c.condition) || contains_agg(&c.result))
                || else_result.as_deref().is_some_and(contains_agg)
        }
        _ => false,
    }
}

pub(crate) fn number_literal(s: &str) -> Result<(Value, DataType)> {
    if let Ok(v) = s.parse::<i32>() {
        return Ok((Value::Int4(v), DataType::Int4));
    }
    if let Ok(v) = s.parse::<i64>() {
        return Ok((Value::Int8(v), DataType::Int8));
    }
    let f: f64 = s
        .parse()
        .map_err(|_| Error::syntax(format!("invalid number \"{s}\"")))?;
    Ok((Value::Float8(f), DataType::Float8))
}

pub(crate) fn string_literal(v: &ast::Value) -> Option<&str> {
    match v {
        ast::Value::SingleQuotedString(s)
        | ast::Value::EscapedStringLiteral(s)
        | ast::Value::UnicodeStringLiteral(s) => Some(s),
        ast::Value::DollarQuotedString(d) => Some(&d.value),
        _ => None,
    }
}

impl Binder<'_> {
    /// Fixes the type of an unknown expression to `target` (literal parsing, parameter typing).
    pub(crate) fn coerce(
        &mut self,
        e: Expr,
        ty: Ty,
        target: &DataType,
    ) -> Result<(Expr, DataType)> {
        if let Ty::Known(t) = ty {
            return Ok((e, t));
        }
        let e = match e {
            Expr::Const(Value::Text(s)) => Expr::Const(Value::parse(target, &s)?),
            Expr::Param(i) => {
                if self.params[i].is_none() {
                    self.params[i] = Some(target.clone());
                }
                Expr::Param(i)
            }
            e => e,
        };
        Ok((e, target.clone()))
    }

    /// Unknown becomes text.
    pub(crate) fn resolve(&mut self, e: Expr, ty: Ty) -> Result<(Expr, DataType)> {
        self.coerce(e, ty, &DataType::Text)
    }

    pub(crate) fn bind_resolved(&mut self, e: &ast::Expr) -> Result<(Expr, DataType)> {
        let (e, t) = self.bind(e)?;
        self.resolve(e, t)
    }

    /// Binds `e` expecting `target`: unknowns take `target`, known types must match its family.
    pub(crate) fn bind_as(&mut self, e: &ast::Expr, target: &DataType) -> Result<Expr> {
        let (x, t) = self.bind(e)?;
        let (x, t) = self.coerce(x, t, target)?;
        if *target == DataType::Bool && t != DataType::Bool {
            return Err(mismatch(format!(
                "argument of {} must be type boolean, not type {}",
                self.clause,
                t.name()
            )));
        }
        if is_numeric(target) && !is_numeric(&t) {
            return Err(mismatch(format!(
                "argument must be type {}, not type {}",
                target.name(),
                t.name()
            )));
        }
        Ok(x)
    }

    /// Makes two operands' types agree where one is unknown.
    pub(crate) fn unify(
        &mut self,
        l: (Expr, Ty),
        r: (Expr, Ty),
    ) -> Result<((Expr, DataType), (Expr, DataType))> {
        match (&l.1, &r.1) {
            (Ty::Unknown, Ty::Known(t)) => {
                let t = t.clone();
                Ok((self.coerce(l.0, l.1, &t)?, (r.0, t)))
            }
            (Ty::Known(t), Ty::Unknown) => {
                let t = t.clone();
                Ok(((l.0, t.clone()), self.coerce(r.0, r.1, &t)?))
            }
            _ => Ok((self.resolve(l.0, l.1)?, self.resolve(r.0, r.1)?)),
        }
    }

    fn column(&self, qual: Option<&str>, name: &str) -> Result<(Expr, Ty)> {
        if let Some(q) = qual {
            if !self.cols.iter().any(|c| c.qual.as_deref() == Some(q)) {
                return Err(Error::user(
                    SqlState::UNDEFINED_TABLE,
                    format!("missing FROM-clause entry for table \"{q}\""),
                ));
            }
        }
        let mut found = None;
        for (i, c) in self.cols.iter().enumerate() {
            if c.name == name && (qual.is_none() || c.qual.as_deref() == qual) {
                if found.is_some() {
                    return Err(Error::user(
                        SqlState::AMBIGUOUS_COLUMN,
                        format!("column reference \"{name}\" is ambiguous"),
                    ));
                }
                found = Some(i);
            }
        }
        let full = match qual {
            Some(q) => format!("{q}.{name}"),
            None => name.to_string(),
        };
        let i = found.ok_or_else(|| undefined_column(&full))?;
        Ok((Expr::Col(i), Ty::Known(self.cols[i].ty.clone())))
    }

    pub(crate) fn bind(&mut self, e: &ast::Expr) -> Result<(Expr, Ty)> {
        use ast::Expr as E;
        if let Some(state) = &self.agg {
            if let Some(k) = state.groups.iter().position(|(g, _)| g == e) {
                return Ok((Expr::Col(k), Ty::Known(state.groups[k].1.clone())));
            }
            if let E::Identifier(_) | E::CompoundIdentifier(_) = e {
                let name = match e {
                    E::Identifier(i) => ident(i),
                    E::CompoundIdentifier(p) => p.iter().map(ident).collect::<Vec<_>>().join("."),
                    _ => unreachable!("matched above"),
                };
                // Resolve first so unknown columns report 42703.
                let saved = self.agg.take();
                let r = self.bind(e);
                self.agg = saved;
                r?;
                return Err(Error::user(
                    SqlState::GROUPING_ERROR,
                    format!("column \"{name}\" must appear in the GROUP BY clause or be used in an aggregate function"),
                ));
            }
        }
        Ok(match e {
            E::Identifier(i) => self.column(None, &ident(i))?,
            E::CompoundIdentifier(parts) => match parts.as_slice() {
                [q, c] => self.column(Some(&ident(q)), &ident(c))?,
                [s, q, c] if ident(s) == "public" => self.column(Some(&ident(q)), &ident(c))?,
                _ => return Err(Error::unsupported("this kind of column reference")),
            },
            E::Nested(inner) => self.bind(inner)?,
            E::Value(v) => self.literal(&v.value)?,
            E::TypedString(ts) => {
                let ty = map_type(&ts.data_type)?;
                let s = string_literal(&ts.value.value)
                    .ok_or_else(|| Error::syntax("expected a string literal"))?;
                (Expr::Const(Value::parse(&ty, s)?), Ty::Known(ty))
            }
            E::Cast {
                expr,
                data_type,
                kind,
                ..
            } => {
                if !matches!(kind, ast::CastKind::Cast | ast::CastKind::DoubleColon) {
                    return Err(Error::unsupported("this kind of cast"));
                }
                if is_regclass(data_type) {
                    return self.regclass_cast(expr);
                }
                let target = map_type(data_type)?;
                let (x, t) = self.bind(expr)?;
                match t {
                    Ty::Unknown => {
                        let (x, t) = self.coerce(x, Ty::Unknown, &target)?;
                        (x, Ty::Known(t))
                    }
                    Ty::Known(_) => (Expr::Cast(Box::new(x), target.clone()), Ty::Known(target)),
                }
            }
            E::UnaryOp { op, expr } => match op {
                ast::UnaryOperator::Plus => self.bind(expr)?,
                ast::UnaryOperator::Minus => {
                    if let E::Value(v) = expr.as_ref() {
                        if let ast::Value::Number(n, _) = &v.value {
                            let (v, t) = number_literal(&format!("-{n}"))?;
                            return Ok((Expr::Const(v), Ty::Known(t)));
                        }
                    }
                    let (x, t) = self.bind(expr)?;
                    let (x, t) = self.coerce(x, t, &DataType::Float8)?;
                    if !is_numeric(&t) {
                        return Err(Error::user(
                            SqlState::UNDEFINED_FUNCTION,
                            format!("operator does not exist: - {}", t.name()),
                        ));
                    }
                    (Expr::Neg(Box::new(x), t.clone()), Ty::Known(t))
                }
                ast::UnaryOperator::Not => {
                    let x = self.bind_as(expr, &DataType::Bool)?;
                    (Expr::Not(Box::new(x)), Ty::Known(DataType::Bool))
                }
                other => return Err(Error::unsupported(format!("operator {other}"))),
            },
            E::BinaryOp { left, op, right } => self.binary(left, op, right)?,
            E::IsNull(x) | E::IsNotNull(x) => {
                let (x, _) = self.bind_resolved(x)?;
                (
                    Expr::IsNull(Box::new(x), matches!(e, E::IsNotNull(_))),
                    Ty::Known(DataType::Bool),
                )
            }
            E::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let x = self.bind(expr)?;
                let lo = self.bind(low)?;
                let hi = self.bind(high)?;
                let (x1, lo) = self.unify(x, lo)?;
                let x1 = (x1.0, Ty::Known(x1.1));
                let ((x, xt), hi) = self.unify(x1, hi)?;
                self.check_comparable(&xt, CmpOp::Ge, &lo.1)?;
                self.check_comparable(&xt, CmpOp::Le, &hi.1)?;
                let both = Expr::And(
                    Box::new(Expr::Cmp(CmpOp::Ge, Box::new(x.clone()), Box::new(lo.0))),
                    Box::new(Expr::Cmp(CmpOp::Le, Box::new(x), Box::new(hi.0))),
                );
                let out = if *negated {
                    Expr::Not(Box::new(both))
                } else {
                    both
                };
                (out, Ty::Known(DataType::Bool))
            }
            E::InList {
                expr,
                list,
                negated,
            } => {
                let (mut x, mut xt) = self.bind(expr)?;
                let mut items = Vec::with_capacity(list.len());
                for item in list {
                    let it = self.bind(item)?;
                    let ((nx, nxt), (it, itt)) = self.unify((x, xt), it)?;
                    self.check_comparable(&nxt, CmpOp::Eq, &itt)?;
                    x = nx;
                    xt = Ty::Known(nxt);
                    items.push(it);
                }
                (
                    Expr::InList(Box::new(x), items, *negated),
                    Ty::Known(DataType::Bool),
                )
            }
            E::Function(f) => self.function(f)?,
            E::Like {
                negated,
                any: false,
                expr,
                pattern,
                escape_char: None,
            }
            | E::ILike {
                negated,
                any: false,
                expr,
                pattern,
                escape_char: None,
            } => {
                let (x, _) = self.bind_resolved(expr)?;
                let (p, _) = self.bind_resolved(pattern)?;
                let ci = matches!(e, E::ILike { .. });
                let text = |x| Expr::Cast(Box::new(x), DataType::Text);
                (
                    Expr::Like(Box::new(text(x)), Box::new(text(p)), *negated, ci),
                    Ty::Known(DataType::Bool),
                )
            }
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => self.case(operand.as_deref(), conditions, else_result.as_deref())?,
            E::Subquery(_) | E::Exists { .. } | E::InSubquery { .. } => {
                return Err(Error::unsupported("subqueries"))
            }
            other => return Err(Error::unsupported(format!("expression {other}"))),
        })
    }

    /// The relation argument of a sequence function (PostgreSQL's is `regclass`): a name as
    /// text, looked up when the function runs (so a sequence this transaction created is
    /// found), or an OID as int8. `'s'::regclass` is taken as the name `'s'`.
    fn sequence_arg(&mut self, e: &ast::Expr) -> Result<Expr> {
        let e = match e {
            ast::Expr::Cast {
                expr, data_type, ..
            } if is_regclass(data_type) => expr,
            e => e,
        };
        let (x, t) = self.bind(e)?;
        let (x, t) = self.coerce(x, t, &DataType::Text)?;
        if t.is_integer() {
            Ok(Expr::Cast(Box::new(x), DataType::Int8))
        } else if t.is_string() {
            Ok(x)
        } else {
            Err(Error::user(
                SqlState::CANNOT_COERCE,
                format!("cannot cast type {} to regclass", t.name()),
            ))
        }
    }

    /// `x::regclass`: text (an unknown literal or `$n` becomes text) is looked up by name in the
    /// `pg_class` system view at execution time; an integer is already an OID. The result is int8.
    fn regclass_cast(&mut self, e: &ast::Expr) -> Result<(Expr, Ty)> {
        let (x, t) = self.bind(e)?;
        let (x, t) = self.coerce(x, t, &DataType::Text)?;
        let x = if t.is_integer() {
            Expr::Cast(Box::new(x), DataType::Int8)
        } else if t.is_string() {
            Expr::Regclass(Box::new(x))
        } else {
            return Err(Error::user(
                SqlState::CANNOT_COERCE,
                format!("cannot cast type {} to regclass", t.name()),
            ));
        };
        Ok((x, Ty::Known(DataType::Int8)))
    }

    fn literal(&mut self, v: &ast::Value) -> Result<(Expr, Ty)> {
        if let Some(s) = string_literal(v) {
            return Ok((Expr::Const(Value::Text(s.to_string())), Ty::Unknown));
        }
        Ok(match v {
            ast::Value::Number(n, _) => {
                let (v, t) = number_literal(n)?;
                (Expr::Const(v), Ty::Known(t))
            }
            ast::Value::Boolean(b) => (Expr::Const(Value::Bool(*b)), Ty::Known(DataType::Bool)),
            ast::Value::Null => (Expr::Const(Value::Null), Ty::Unknown),
            ast::Value::Placeholder(p) => {
                let n: usize = p
                    .strip_prefix('$')
                    .and_then(|d| d.parse().ok())
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| {
                        Error::user(
                            SqlState::UNDEFINED_PARAMETER,
                            format!("there is no parameter {p}"),
                        )
                    })?;
                if n > 65535 {
                    return Err(Error::user(
                        SqlState::UNDEFINED_PARAMETER,
                        format!("there is no parameter {p}"),
                    ));
                }
                if self.params.len() < n {
                    self.params.resize(n, None);
                }
                let ty = match &self.params[n - 1] {
                    Some(t) => Ty::Known(t.clone()),
                    None => Ty::Unknown,
                };
                (Expr::Param(n - 1), ty)
            }
            other => return Err(Error::unsupported(format!("literal {other}"))),
        })
    }

    fn check_comparable(&self, a: &DataType, op: CmpOp, b: &DataType) -> Result<()> {
        if comparable(a, b) {
            Ok(())
        } else {
            Err(Error::user(
                SqlState::UNDEFINED_FUNCTION,
                format!(
                    "operator does not exist: {} {} {}",
                    a.name(),
                    op.symbol(),
                    b.name()
                ),
            ))
        }
    }

    fn binary(
        &mut self,
        left: &ast::Expr,
        op: &ast::BinaryOperator,
        right: &ast::Expr,
    ) -> Result<(Expr, Ty)> {
        use ast::BinaryOperator as B;
        let cmp = match op {
            B::Eq => Some(CmpOp::Eq),
            B::NotEq => Some(CmpOp::Ne),
            B::Lt => Some(CmpOp::Lt),
            B::LtEq => Some(CmpOp::Le),
            B::Gt => Some(CmpOp::Gt),
            B::GtEq => Some(CmpOp::Ge),
            _ => None,
        };
        if let B::And | B::Or = op {
            let l = self.bind_as(left, &DataType::Bool)?;
            let r = self.bind_as(right, &DataType::Bool)?;
            let e = if *op == B::And {
                Expr::And(Box::new(l), Box::new(r))
            } else {
                Expr::Or(Box::new(l), Box::new(r))
            };
            return Ok((e, Ty::Known(DataType::Bool)));
        }
        let l = self.bind(left)?;
        let r = self.bind(right)?;
        if let Some(c) = cmp {
            let ((l, lt), (r, rt)) = self.unify(l, r)?;
            self.check_comparable(&lt, c, &rt)?;
            return Ok((
                Expr::Cmp(c, Box::new(l), Box::new(r)),
                Ty::Known(DataType::Bool),
            ));
        }
        if *op == B::StringConcat {
            let (l, _) = self.resolve(l.0, l.1)?;
            let (r, _) = self.resolve(r.0, r.1)?;
            return Ok((
                Expr::Concat(Box::new(l), Box::new(r)),
                Ty::Known(DataType::Text),
            ));
        }
        let a = match op {
            B::Plus => ArithOp::Add,
            B::Minus => ArithOp::Sub,
            B::Multiply => ArithOp::Mul,
            B::Divide => ArithOp::Div,
            B::Modulo => ArithOp::Mod,
            other => return Err(Error::unsupported(format!("operator {other}"))),
        };
        let ((l, lt), (r, rt)) = match (&l.1, &r.1) {
            (Ty::Unknown, Ty::Unknown) => (
                self.coerce(l.0, l.1, &DataType::Int4)?,
                self.coerce(r.0, r.1, &DataType::Int4)?,
            ),
            _ => self.unify(l, r)?,
        };
        if a == ArithOp::Sub && lt == DataType::PgLsn && rt == DataType::PgLsn {
            return Ok((
                Expr::Func(Func::LsnDiff, vec![l, r]),
                Ty::Known(DataType::Int8),
            ));
        }
        let ty = match (&lt, &rt) {
            (a2, b2) if a2.is_integer() && b2.is_integer() => {
                let rank = |t: &DataType| match t {
                    DataType::Int2 => 0,
                    DataType::Int4 => 1,
                    _ => 2,
                };
                if rank(a2) >= rank(b2) {
                    a2.clone()
                } else {
                    b2.clone()
                }
            }
            (a2, b2) if is_numeric(a2) && is_numeric(b2) && a != ArithOp::Mod => DataType::Float8,
            _ => {
                return Err(Error::user(
                    SqlState::UNDEFINED_FUNCTION,
                    format!(
                        "operator does not exist: {} {} {}",
                        lt.name(),
                        a.symbol(),
                        rt.name()
                    ),
                ))
            }
        };
        Ok((
            Expr::Arith(a, Box::new(l), Box::new(r), ty.clone()),
            Ty::Known(ty),
        ))
    }

    fn function(&mut self, f: &ast::Function) -> Result<(Expr, Ty)> {
        if f.over.is_some() || f.filter.is_some() {
            return Err(Error::unsupported("window functions and FILTER"));
        }
        let name = func_name(f)?;
        let args = func_args(f)?;
        if let Some(agg) = agg_func(&name) {
            return self.aggregate(agg, args);
        }
        let args = args.ok_or_else(|| {
            Error::syntax(format!(
                "{name}(*) specified, but {name} is not an aggregate function"
            ))
        })?;
        let nargs = args.len();
        let no_such = || {
            Error::user(
                SqlState::UNDEFINED_FUNCTION,
                format!("function {name} with {nargs} argument(s) does not exist"),
            )
        };
        Ok(match (name.as_str(), nargs) {
            (
                "current_timestamp"
                | "now"
                | "localtimestamp"
                | "statement_timestamp"
                | "transaction_timestamp",
                0,
            ) => (Expr::Now, Ty::Known(DataType::Timestamp)),
            ("pg_reload_conf", 0) => (
                Expr::Func(Func::ReloadConf, Vec::new()),
                Ty::Known(DataType::Bool),
            ),
            ("pg_backend_pid", 0) => (
                Expr::Func(Func::BackendPid, Vec::new()),
                Ty::Known(DataType::Int4),
            ),
            // Without parentheses (sqlparser's `FunctionArguments::None`), as SQL writes them.
            ("current_user" | "session_user" | "user" | "current_role", 0)
                if matches!(f.args, ast::FunctionArguments::None) =>
            {
                (
                    Expr::Func(Func::CurrentUser, Vec::new()),
                    Ty::Known(DataType::Text),
                )
            }
            ("current_database" | "version", 0) => (
                Expr::Func(
                    if name == "version" {
                        Func::Version
                    } else {
                        Func::CurrentDatabase
                    },
                    Vec::new(),
                ),
                Ty::Known(DataType::Text),
            ),
            // Names resolve in `public` only (see DESIGN.md, "Names").
            ("current_schema", 0) => (
                Expr::Const(Value::Text("public".into())),
                Ty::Known(DataType::Text),
            ),
            ("current_setting", 1 | 2) | ("set_config", 3) | ("pg_get_serial_sequence", 2) => {
                let (f, types): (Func, &[DataType]) = match name.as_str() {
                    "set_config" => (
                        Func::SetConfig,
                        &[DataType::Text, DataType::Text, DataType::Bool],
                    ),
                    "pg_get_serial_sequence" => {
                        (Func::SerialSequence, &[DataType::Text, DataType::Text])
                    }
                    _ => (Func::CurrentSetting, &[DataType::Text, DataType::Bool]),
                };
                let mut bound = Vec::with_capacity(nargs);
                for (a, ty) in args.iter().zip(types) {
                    let (x, t) = self.bind(a)?;
                    let (x, t) = self.coerce(x, t, ty)?;
                    if !(t == *ty || (ty.is_string() && t.is_string())) {
                        return Err(no_such());
                    }
                    bound.push(x);
                }
                (Expr::Func(f, bound), Ty::Known(DataType::Text))
            }
            (
                "pg_current_wal_lsn" | "pg_current_wal_insert_lsn" | "pg_current_wal_flush_lsn",
                0,
            ) => {
                let f = match name.as_str() {
                    "pg_current_wal_insert_lsn" => Func::WalInsertLsn,
                    "pg_current_wal_flush_lsn" => Func::WalFlushLsn,
                    _ => Func::WalWriteLsn,
                };
                (Expr::Func(f, Vec::new()), Ty::Known(DataType::PgLsn))
            }
            // The recovery functions: evaluated at run time (a standby's answers change).
            (
                "pg_is_in_recovery"
                | "pg_last_wal_receive_lsn"
                | "pg_last_wal_replay_lsn"
                | "pg_last_xact_replay_timestamp"
                | "pg_is_wal_replay_paused"
                | "pg_wal_replay_pause"
                | "pg_wal_replay_resume",
                0,
            ) => {
                let (f, ty) = match name.as_str() {
                    "pg_is_in_recovery" => (Func::IsInRecovery, DataType::Bool),
                    "pg_last_wal_receive_lsn" => (Func::LastWalReceiveLsn, DataType::PgLsn),
                    "pg_last_wal_replay_lsn" => (Func::LastWalReplayLsn, DataType::PgLsn),
                    "pg_last_xact_replay_timestamp" => {
                        (Func::LastXactReplayTimestamp, DataType::Timestamp)
                    }
                    "pg_is_wal_replay_paused" => (Func::IsWalReplayPaused, DataType::Bool),
                    // void in PostgreSQL: an empty text value here.
                    "pg_wal_replay_pause" => (Func::WalReplayPause, DataType::Text),
                    _ => (Func::WalReplayResume, DataType::Text),
                };
                (Expr::Func(f, Vec::new()), Ty::Known(ty))
            }
            ("pg_promote", 0..=2) => {
                let mut bound = Vec::with_capacity(args.len());
                for (a, ty) in args.iter().zip([DataType::Bool, DataType::Int4]) {
                    let (x, t) = self.bind(a)?;
                    let (x, _) = self.coerce(x, t, &ty)?;
                    bound.push(x);
                }
                (Expr::Func(Func::Promote, bound), Ty::Known(DataType::Bool))
            }
            (
                "pg_relation_size" | "pg_table_size" | "pg_indexes_size" | "pg_total_relation_size",
                1,
            )
            | ("pg_relation_size", 2) => {
                use crate::storage::RelationSize;
                // The relation as `regclass` takes it: a name (an unknown literal) or an OID.
                let (rel, _) = self.regclass_cast(args[0])?;
                let mut bound = vec![rel];
                if let Some(fork) = args.get(1) {
                    let (x, t) = self.bind(fork)?;
                    let (x, t) = self.coerce(x, t, &DataType::Text)?;
                    if !t.is_string() {
                        return Err(Error::user(
                            SqlState::UNDEFINED_FUNCTION,
                            format!(
                                "function pg_relation_size(regclass, {}) does not exist",
                                t.name()
                            ),
                        ));
                    }
                    bound.push(x);
                }
                let which = match name.as_str() {
                    "pg_table_size" => RelationSize::Table,
                    "pg_indexes_size" => RelationSize::Indexes,
                    "pg_total_relation_size" => RelationSize::Total,
                    _ => RelationSize::Main,
                };
                (
                    Expr::Func(Func::RelationSize(which), bound),
                    Ty::Known(DataType::Int8),
                )
            }
            ("nextval" | "currval", 1) | ("setval", 2 | 3) | ("lastval", 0) => {
                let mut bound = Vec::with_capacity(nargs);
                if let Some(rel) = args.first() {
                    bound.push(self.sequence_arg(rel)?);
                }
                for (a, ty) in args.iter().skip(1).zip([DataType::Int8, DataType::Bool]) {
                    let (x, t) = self.bind(a)?;
                    let (x, t) = self.coerce(x, t, &ty)?;
                    if t != ty && !(ty == DataType::Int8 && t.is_integer()) {
                        return Err(no_such());
                    }
                    bound.push(if t == ty {
                        x
                    } else {
                        Expr::Cast(Box::new(x), ty)
                    });
                }
                let f = match name.as_str() {
                    "nextval" => Func::NextVal,
                    "currval" => Func::CurrVal,
                    "setval" => Func::SetVal,
                    _ => Func::LastVal,
                };
                (Expr::Func(f, bound), Ty::Known(DataType::Int8))
            }
            ("pg_wal_lsn_diff", 2) => {
                let mut bound = Vec::with_capacity(2);
                for a in &args {
                    let (x, t) = self.bind(a)?;
                    let (x, t) = self.coerce(x, t, &DataType::PgLsn)?;
                    if t != DataType::PgLsn {
                        return Err(Error::user(
                            SqlState::UNDEFINED_FUNCTION,
                            format!("function pg_wal_lsn_diff with an argument of type {} does not exist", t.name()),
                        ));
                    }
                    bound.push(x);
                }
                (Expr::Func(Func::LsnDiff, bound), Ty::Known(DataType::Int8))
            }
            ("abs", 1) => {
                let (x, t) = self.bind(args[0])?;
                let (x, t) = self.coerce(x, t, &DataType::Float8)?;
                if !is_numeric(&t) {
                    return Err(Error::user(
                        SqlState::UNDEFINED_FUNCTION,
                        format!("function abs({}) does not exist", t.name()),
                    ));
                }
                (Expr::Func(Func::Abs, vec![x]), Ty::Known(t))
            }
            ("lower" | "upper", 1) => {
                let (x, _) = self.bind_resolved(args[0])?;
                let func = if name == "lower" {
                    Func::Lower
                } else {
                    Func::Upper
                };
                (
                    Expr::Func(func, vec![Expr::Cast(Box::new(x), DataType::Text)]),
                    Ty::Known(DataType::Text),
                )
            }
            ("length" | "char_length" | "character_length", 1) => {
                let (x, t) = self.bind_resolved(args[0])?;
                // char(n) length ignores trailing blanks, as PostgreSQL's bpcharlen.
                let func = if let DataType::Char(_) = t {
                    Func::BpcharLength
                } else {
                    Func::Length
                };
                (
                    Expr::Func(func, vec![Expr::Cast(Box::new(x), DataType::Text)]),
                    Ty::Known(DataType::Int4),
                )
            }
            ("coalesce", n) if n >= 1 => {
                let mut bound = Vec::with_capacity(n);
                for a in &args {
                    bound.push(self.bind(a)?);
                }
                let target = bound.iter().find_map(|(_, t)| match t {
                    Ty::Known(t) => Some(t.clone()),
                    Ty::Unknown => None,
                });
                let target = target.unwrap_or(DataType::Text);
                let mut out = Vec::with_capacity(n);
                for (x, t) in bound {
                    let (x, t) = self.coerce(x, t, &target)?;
                    if !comparable(&t, &target) {
                        return Err(mismatch(format!(
                            "COALESCE types {} and {} cannot be matched",
                            target.name(),
                            t.name()
                        )));
                    }
                    out.push(if t == target {
                        x
                    } else {
                        Expr::Cast(Box::new(x), target.clone())
                    });
                }
                (Expr::Func(Func::Coalesce, out), Ty::Known(target))
            }
            _ => return Err(no_such()),
        })
    }

    fn aggregate(&mut self, func: AggFunc, args: Option<Vec<&ast::Expr>>) -> Result<(Expr, Ty)> {
        let Some(mut state) = self.agg.take() else {
            return Err(Error::user(
                SqlState::GROUPING_ERROR,
                format!("aggregate functions are not allowed in {}", self.clause),
            ));
        };
        let result = (|| -> Result<AggCall> {
            let (func, arg, ty) = match args {
                None if func == AggFunc::Count => (AggFunc::CountStar, None, DataType::Int8),
                None => return Err(Error::syntax("* is only allowed in count(*)")),
                Some(a) if a.len() != 1 => {
                    return Err(Error::user(
                        SqlState::UNDEFINED_FUNCTION,
                        "aggregate function takes exactly one argument",
                    ))
                }
                Some(a) => {
                    if contains_agg(a[0]) {
                        return Err(Error::user(
                            SqlState::GROUPING_ERROR,
                            "aggregate function calls cannot be nested",
                        ));
                    }
                    let (x, t) = self.bind_resolved(a[0])?;
                    let ty = match func {
                        AggFunc::Count => DataType::Int8,
                        AggFunc::Sum if t.is_integer() => DataType::Int8,
                        AggFunc::Sum | AggFunc::Avg if t == DataType::Float8 => DataType::Float8,
                        AggFunc::Avg if t.is_integer() => DataType::Float8,
                        AggFunc::Min | AggFunc::Max => t.clone(),
                        _ => {
                            return Err(Error::user(
                                SqlState::UNDEFINED_FUNCTION,
                                format!("function {func:?}({}) does not exist", t.name())
                                    .to_lowercase(),
                            ))
                        }
                    };
                    (func, Some(x), ty)
                }
            };
            Ok(AggCall { func, arg, ty })
        })();
        let call = match result {
            Ok(c) => c,
            Err(e) => {
                self.agg = Some(state);
                return Err(e);
            }
        };
        let slot = state.groups.len() + state.calls.len();
        let ty = call.ty.clone();
        state.calls.push(call);
        self.agg = Some(state);
        Ok((Expr::Col(slot), Ty::Known(ty)))
    }

    fn case(
        &mut self,
        operand: Option<&ast::Expr>,
        arms: &[ast::CaseWhen],
        default: Option<&ast::Expr>,
    ) -> Result<(Expr, Ty)> {
        let mut conds = Vec::with_capacity(arms.len());
        let mut results = Vec::with_capacity(arms.len() + 1);
        for arm in arms {
            let cond = match operand {
                Some(op) => {
                    let cmp = ast::Expr::BinaryOp {
                        left: Box::new(op.clone()),
                        op: ast::BinaryOperator::Eq,
                        right: Box::new(arm.condition.clone()),
                    };
                    self.bind(&cmp)?.0
                }
                None => self.bind_as(&arm.condition, &DataType::Bool)?,
            };
            conds.push(cond);
            results.push(self.bind(&arm.result)?);
        }
        results.push(match default {
            Some(d) => self.bind(d)?,
            None => (Expr::Const(Value::Null), Ty::Unknown),
        });
        let target = results
            .iter()
            .find_map(|(_, t)| {
                if let Ty::Known(t) = t {
                    Some(t.clone())
                } else {
                    None
                }
            })
            .unwrap_or(DataType::Text);
        let mut out = Vec::with_capacity(results.len());
        for (x, t) in results {
            let (x, t) = self.coerce(x, t, &target)?;
            if !comparable(&t, &target) {
                return Err(mismatch(format!(
                    "CASE types {} and {} cannot be matched",
                    target.name(),
                    t.name()
                )));
            }
            out.push(if t == target {
                x
            } else {
                Expr::Cast(Box::new(x), target.clone())
            });
        }
        let default = out.pop().expect("default arm pushed above");
        Ok((
            Expr::Case(conds.into_iter().zip(out).collect(), Box::new(default)),
            Ty::Known(target),
        ))
    }
}

/// The display name of a select-list expression, as PostgreSQL labels it.
pub(crate) fn output_name(e: &ast::Expr) -> String {
    use ast::Expr as E;
    match e {
        E::Identifier(i) => ident(i),
        E::CompoundIdentifier(p) => p.last().map(ident).unwrap_or_default(),
        E::Nested(x) => output_name(x),
        E::Function(f) => func_name(f).unwrap_or_else(|_| "?column?".into()),
        E::Cast {
            expr, data_type, ..
        } => match output_name(expr).as_str() {
            "?column?" if is_regclass(data_type) => "regclass".into(),
            "?column?" => match map_type(data_type) {
                Ok(t) => match t {
                    DataType::Int4 => "int4".into(),
                    DataType::Int8 => "int8".into(),
                    DataType::Int2 => "int2".into(),
                    DataType::Bool => "bool".into(),
                    DataType::Float8 => "float8".into(),
                    DataType::Text => "text".into(),
                    DataType::Varchar(_) => "varchar".into(),
                    DataType::Char(_) => "bpchar".into(),
                    DataType::Timestamp => "timestamp".into(),
                    DataType::PgLsn => "pg_lsn".into(),
                },
                Err(_) => "?column?".into(),
            },
            n => n.to_string(),
        },
        E::Case { .. } => "case".into(),
        _ => "?column?".into(),
    }
}
