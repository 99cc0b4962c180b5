//! Compiled scalar expressions and their evaluation.
//!
//! The planner turns sqlparser's AST into [`Expr`], with column references resolved to row
//! positions, parameters to their index and every operator's result type fixed. Evaluation is a
//! plain recursive walk over a row (`&[Value]`), the statement's parameters and its clock.
//! NULL handling follows SQL: operators on NULL give NULL, AND/OR use three-valued logic.

use crate::env::Env;
use crate::storage::RelationSize;
use std::cmp::Ordering;
use walnut_common::{DataType, Error, Result, SqlState, Value};

/// Arithmetic operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

impl ArithOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Mod => "%",
        }
    }
}

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// The operator with its operands swapped (`a < b` is `b > a`).
    pub(crate) fn flip(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            o => o,
        }
    }

    pub(crate) fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    fn test(self, o: Ordering) -> bool {
        match self {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        }
    }
}

/// Scalar functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Func {
    Abs,
    Lower,
    Upper,
    Length,
    /// length() of char(n): trailing blanks do not count.
    BpcharLength,
    Coalesce,
    /// `pg_reload_conf()`: reloads the configuration files; true.
    ReloadConf,
    /// `pg_backend_pid()`: the session's backend process id, integer.
    BackendPid,
    /// `current_user`, `session_user`, `user`: the user the session connected as, text
    /// (PostgreSQL's type is `name`).
    CurrentUser,
    /// `current_database()`: the database the session connected to, text (`name`).
    CurrentDatabase,
    /// `version()`: PostgreSQL's version string, with walnut's.
    Version,
    /// `pg_current_wal_insert_lsn()`: the WAL's insert position, pg_lsn.
    WalInsertLsn,
    /// `pg_current_wal_lsn()`: the WAL's write position, pg_lsn.
    WalWriteLsn,
    /// `pg_current_wal_flush_lsn()`: the WAL's flush position, pg_lsn.
    WalFlushLsn,
    /// `pg_is_in_recovery()`: bool.
    IsInRecovery,
    /// `pg_last_wal_receive_lsn()`: pg_lsn, NULL on a primary.
    LastWalReceiveLsn,
    /// `pg_last_wal_replay_lsn()`: pg_lsn, NULL on a primary.
    LastWalReplayLsn,
    /// `pg_last_xact_replay_timestamp()`: timestamp, NULL on a primary or before the first.
    LastXactReplayTimestamp,
    /// `pg_wal_replay_pause()`: void (NULL); 55000 on a primary.
    WalReplayPause,
    /// `pg_wal_replay_resume()`: void (NULL); 55000 on a primary.
    WalReplayResume,
    /// `pg_is_wal_replay_paused()`: bool; 55000 on a primary.
    IsWalReplayPaused,
    /// `pg_promote([wait [, wait_seconds]])`: bool; 55000 on a primary.
    Promote,
    /// `pg_relation_size(rel [, fork])`, `pg_table_size`, `pg_indexes_size`,
    /// `pg_total_relation_size`: bytes (bigint), NULL for an OID no relation has. With a
    /// fork argument (evaluated at run time) the kind is [`RelationSize::Main`] until the
    /// fork names another.
    RelationSize(crate::storage::RelationSize),
    /// `pg_wal_lsn_diff(a, b)` and `a - b` of two pg_lsn: a - b in bytes (PostgreSQL's is
    /// numeric; bigint here holds every difference of two LSNs below 2^63).
    LsnDiff,
    /// `nextval(rel)`: bigint; volatile. The argument is a name (text) or an OID (int8).
    NextVal,
    /// `currval(rel)`: bigint.
    CurrVal,
    /// `setval(rel, value bigint [, is_called bool])`: bigint; volatile.
    SetVal,
    /// `lastval()`: bigint.
    LastVal,
    /// `pg_get_serial_sequence(table text, column text)`: text, `public.name`, or NULL.
    SerialSequence,
    /// `current_setting(name [, missing_ok])`: text, as `SHOW` prints it; NULL for an unknown
    /// name when `missing_ok`.
    CurrentSetting,
    /// `set_config(name, value, is_local)`: `SET [LOCAL] name = value` (a NULL value: `RESET`)
    /// once the statement succeeds; returns the new value as text. Volatile.
    SetConfig,
}

/// A compiled expression.
#[derive(Clone, Debug)]
pub(crate) enum Expr {
    Const(Value),
    /// Column of the input row.
    Col(usize),
    /// `$n`, 0-based.
    Param(usize),
    Neg(Box<Expr>, DataType),
    Arith(ArithOp, Box<Expr>, Box<Expr>, DataType),
    Concat(Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    IsNull(Box<Expr>, bool),
    InList(Box<Expr>, Vec<Expr>, bool),
    Cast(Box<Expr>, DataType),
    Func(Func, Vec<Expr>),
    /// CURRENT_TIMESTAMP / now(): the transaction's start time.
    Now,
    /// `x [NOT] [I]LIKE pattern`: (value, pattern, negated, case-insensitive).
    Like(Box<Expr>, Box<Expr>, bool, bool),
    /// `CASE WHEN c THEN v ... ELSE e END`.
    Case(Vec<(Expr, Expr)>, Box<Expr>),
    /// `x::regclass` of a text value: the relation's OID (int8) from the `pg_class` system view,
    /// looked up at execution time.
    Regclass(Box<Expr>),
}

/// What evaluation needs besides the row.
pub(crate) struct Ctx<'a> {
    pub params: &'a [Value],
    /// Transaction start, µs since 2000-01-01.
    pub now: i64,
    /// For catalog lookups (`::regclass`) and `pg_reload_conf()`.
    pub env: &'a dyn Env,
}

fn out_of_range(ty: &DataType) -> Error {
    Error::user(
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{} out of range", ty.name()),
    )
}

fn division_by_zero() -> Error {
    Error::user(SqlState::DIVISION_BY_ZERO, "division by zero")
}

/// Narrows an i64 result to the integer type `ty`.
fn int_value(v: i64, ty: &DataType) -> Result<Value> {
    Ok(match ty {
        DataType::Int2 => Value::Int2(i16::try_from(v).map_err(|_| out_of_range(ty))?),
        DataType::Int4 => Value::Int4(i32::try_from(v).map_err(|_| out_of_range(ty))?),
        _ => Value::Int8(v),
    })
}

/// `a op b` for non-null numbers, result of type `ty` (checked: 22003, 22012).
pub(crate) fn arith(op: ArithOp, a: &Value, b: &Value, ty: &DataType) -> Result<Value> {
    if a.is_null() || b.is_null() {
        return Ok(Value::Null);
    }
    if *ty == DataType::Float8 {
        let (x, y) = match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => (x, y),
            _ => return Err(Error::internal("non-numeric operand")),
        };
        let r = match op {
            ArithOp::Add => x + y,
            ArithOp::Sub => x - y,
            ArithOp::Mul => x * y,
            ArithOp::Div => {
                if y == 0.0 {
                    return Err(division_by_zero());
                }
                x / y
            }
            ArithOp::Mod => {
                if y == 0.0 {
                    return Err(division_by_zero());
                }
                x % y
            }
        };
        if r.is_infinite() && x.is_finite() && y.is_finite() {
            return Err(Error::user(
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                "value out of range: overflow",
            ));
        }
        return Ok(Value::Float8(r));
    }
    let (x, y) = match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => (x, y),
        _ => return Err(Error::internal("non-integer operand")),
    };
    let r = match op {
        ArithOp::Add => x.checked_add(y),
        ArithOp::Sub => x.checked_sub(y),
        ArithOp::Mul => x.checked_mul(y),
        ArithOp::Div => {
            if y == 0 {
                return Err(division_by_zero());
            }
            x.checked_div(y)
        }
        ArithOp::Mod => {
            if y == 0 {
                return Err(division_by_zero());
            }
            Some(x.checked_rem(y).unwrap_or(0))
        }
    };
    int_value(r.ok_or_else(|| out_of_range(ty))?, ty)
}

/// SQL truth of a value: `Some(bool)` or `None` for NULL.
fn truth(v: &Value) -> Result<Option<bool>> {
    match v {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        other => Err(Error::internal(format!("expected boolean, got {other:?}"))),
    }
}

impl Expr {
    /// Evaluates over `row`.
    ///
    /// # Errors
    /// Arithmetic errors (22003, 22012), cast errors.
    pub(crate) fn eval(&self, row: &[Value], ctx: &Ctx<'_>) -> Result<Value> {
        Ok(match self {
            Expr::Const(v) => v.clone(),
            Expr::Col(i) => row.get(*i).cloned().unwrap_or(Value::Null),
            Expr::Param(i) => ctx.params.get(*i).cloned().unwrap_or(Value::Null),
            Expr::Neg(e, ty) => {
                let v = e.eval(row, ctx)?;
                match v {
                    Value::Null => Value::Null,
                    Value::Float8(f) => Value::Float8(-f),
                    v => {
                        let x = v
                            .as_i64()
                            .ok_or_else(|| Error::internal("negating a non-number"))?;
                        int_value(x.checked_neg().ok_or_else(|| out_of_range(ty))?, ty)?
                    }
                }
            }
            Expr::Arith(op, a, b, ty) => arith(*op, &a.eval(row, ctx)?, &b.eval(row, ctx)?, ty)?,
            Expr::Concat(a, b) => {
                let (a, b) = (a.eval(row, ctx)?, b.eval(row, ctx)?);
                match (a.to_text(), b.to_text()) {
                    (Some(a), Some(b)) => Value::Text(a + &b),
                    _ => Value::Null,
                }
            }
            Expr::Cmp(op, a, b) => {
                let (a, b) = (a.eval(row, ctx)?, b.eval(row, ctx)?);
                match a.sql_cmp(&b) {
                    Some(o) => Value::Bool(op.test(o)),
                    None => Value::Null,
                }
            }
            Expr::And(a, b) => {
                let x = truth(&a.eval(row, ctx)?)?;
                if x == Some(false) {
                    return Ok(Value::Bool(false));
                }
                match (x, truth(&b.eval(row, ctx)?)?) {
                    (_, Some(false)) => Value::Bool(false),
                    (Some(true), Some(true)) => Value::Bool(true),
                    _ => Value::Null,
                }
            }
            Expr::Or(a, b) => {
                let x = truth(&a.eval(row, ctx)?)?;
                if x == Some(true) {
                    return Ok(Value::Bool(true));
                }
                match (x, truth(&b.eval(row, ctx)?)?) {
                    (_, Some(true)) => Value::Bool(true),
                    (Some(false), Some(false)) => Value::Bool(false),
                    _ => Value::Null,
                }
            }
            Expr::Not(e) => match truth(&e.eval(row, ctx)?)? {
                Some(b) => Value::Bool(!b),
                None => Value::Null,
            },
            Expr::IsNull(e, negated) => Value::Bool(e.eval(row, ctx)?.is_null() != *negated),
            Expr::InList(e, list, negated) => {
                let v = e.eval(row, ctx)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let mut saw_null = false;
                for item in list {
                    match v.sql_cmp(&item.eval(row, ctx)?) {
                        Some(Ordering::Equal) => return Ok(Value::Bool(!negated)),
                        None => saw_null = true,
                        _ => {}
                    }
                }
                if saw_null {
                    Value::Null
                } else {
                    Value::Bool(*negated)
                }
            }
            Expr::Cast(e, ty) => e.eval(row, ctx)?.cast(ty)?,
            Expr::Func(f, args) => eval_func(*f, args, row, ctx)?,
            Expr::Now => Value::Timestamp(ctx.now),
            Expr::Like(v, p, negated, ci) => {
                let (v, p) = (v.eval(row, ctx)?, p.eval(row, ctx)?);
                match (v, p) {
                    (Value::Text(v), Value::Text(p)) => {
                        let m = if *ci {
                            like(
                                &v.to_lowercase().chars().collect::<Vec<_>>(),
                                &p.to_lowercase().chars().collect::<Vec<_>>(),
                            )
                        } else {
                            like(
                                &v.chars().collect::<Vec<_>>(),
                                &p.chars().collect::<Vec<_>>(),
                            )
                        };
                        Value::Bool(m != *negated)
                    }
                    _ => Value::Null,
                }
            }
            Expr::Case(arms, default) => {
                for (cond, value) in arms {
                    if truth(&cond.eval(row, ctx)?)? == Some(true) {
                        return value.eval(row, ctx);
                    }
                }
                default.eval(row, ctx)?
            }
            Expr::Regclass(e) => match e.eval(row, ctx)? {
                Value::Null => Value::Null,
                v => {
                    let name = v.to_text().unwrap_or_default();
                    Value::Int8(regclass(ctx.env, &name)?)
                }
            },
        })
    }

    /// Evaluates a predicate: true only if the result is TRUE (NULL counts as false).
    ///
    /// # Errors
    /// As [`Expr::eval`].
    pub(crate) fn matches(&self, row: &[Value], ctx: &Ctx<'_>) -> Result<bool> {
        Ok(matches!(self.eval(row, ctx)?, Value::Bool(true)))
    }

    /// True if the expression reads no column (constants, parameters, the clock).
    pub(crate) fn is_row_independent(&self) -> bool {
        match self {
            Expr::Col(_) => false,
            Expr::Const(_) | Expr::Param(_) | Expr::Now => true,
            Expr::Neg(e, _)
            | Expr::Not(e)
            | Expr::IsNull(e, _)
            | Expr::Cast(e, _)
            | Expr::Regclass(e) => e.is_row_independent(),
            Expr::Arith(_, a, b, _)
            | Expr::Concat(a, b)
            | Expr::Like(a, b, _, _)
            | Expr::Cmp(_, a, b)
            | Expr::And(a, b)
            | Expr::Or(a, b) => a.is_row_independent() && b.is_row_independent(),
            Expr::InList(e, l, _) => {
                e.is_row_independent() && l.iter().all(Expr::is_row_independent)
            }
            // Volatile (or, for currval and lastval, changed by a nextval of the same
            // statement): a new value for each row, never an index key computed once.
            Expr::Func(
                Func::NextVal
                | Func::SetVal
                | Func::CurrVal
                | Func::LastVal
                | Func::CurrentSetting
                | Func::SetConfig,
                _,
            ) => false,
            Expr::Func(_, args) => args.iter().all(Expr::is_row_independent),
            Expr::Case(arms, d) => {
                d.is_row_independent()
                    && arms
                        .iter()
                        .all(|(c, v)| c.is_row_independent() && v.is_row_independent())
            }
        }
    }
}

/// Splits a possibly qualified, possibly quoted relation name as PostgreSQL's `regclassin` does:
/// unquoted parts fold to lower case, `""` inside quotes is a quote. `None` if malformed.
pub(crate) fn name_parts(s: &str) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut chars = s.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    '"' => break,
                    c => part.push(c),
                }
            }
            if part.is_empty() {
                return None;
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' || c == '"' {
                    break;
                }
                part.extend(c.to_lowercase());
                chars.next();
            }
            let trimmed = part.trim();
            if trimmed.is_empty() || trimmed.contains(char::is_whitespace) {
                return None;
            }
            part = trimmed.to_string();
        }
        parts.push(part);
        match chars.next() {
            None => return Some(parts),
            Some('.') => {}
            Some(_) => return None,
        }
    }
}

/// The relation name in `text` as `regclassin` reads it ([`name_parts`]), without its schema,
/// which must be `public` or `pg_catalog`.
///
/// # Errors
/// 42602 for a malformed name; 3F000 for another schema; 42P01 for more than two parts.
pub(crate) fn relation_name(text: &str) -> Result<String> {
    let parts = name_parts(text).ok_or_else(|| {
        Error::user(
            SqlState::INVALID_NAME,
            format!("invalid name syntax: \"{text}\""),
        )
    })?;
    match parts.as_slice() {
        [r] => Ok(r.clone()),
        [s, r] if s == "public" || s == "pg_catalog" => Ok(r.clone()),
        [s, _] => Err(Error::user(
            SqlState::INVALID_SCHEMA_NAME,
            format!("schema \"{s}\" does not exist"),
        )),
        _ => Err(crate::errors::undefined_table(text)),
    }
}

/// `text::regclass`: the OID of the relation named `text` in the engine's `pg_class` view (a
/// number is taken as an OID as is). Schemas `public` and `pg_catalog` are accepted.
///
/// # Errors
/// 42P01 if there is no such relation; as [`relation_name`].
pub(crate) fn regclass(env: &dyn Env, text: &str) -> Result<i64> {
    if let Ok(oid) = text.trim().parse::<i64>() {
        return Ok(oid);
    }
    let rel = &relation_name(text)?;
    let missing = || crate::errors::undefined_table(text);
    let (cols, rows) = env.view("pg_class").ok_or_else(missing)?;
    let col = |n: &str| cols.iter().position(|c| c.name == n);
    let (Some(oid), Some(relname)) = (col("oid"), col("relname")) else {
        return Err(missing());
    };
    rows.iter()
        .find(|r| matches!(r.get(relname), Some(Value::Text(n)) if n == rel))
        .and_then(|r| r.get(oid).and_then(Value::as_i64))
        .ok_or_else(missing)
}

/// SQL LIKE: `%` matches any run, `_` one character, `\\` escapes the next character.
fn like(s: &[char], p: &[char]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some('%') => (0..=s.len()).any(|i| like(&s[i..], &p[1..])),
        Some('_') => !s.is_empty() && like(&s[1..], &p[1..]),
        Some('\\') if p.len() > 1 => s.first() == Some(&p[1]) && like(&s[1..], &p[2..]),
        Some(c) => s.first() == Some(c) && like(&s[1..], &p[1..]),
    }
}

/// The recovery functions (PostgreSQL's src/backend/access/transam/xlogfuncs.c); `None` for
/// any other function.
fn eval_recovery_func(
    f: Func,
    args: &[Expr],
    row: &[Value],
    ctx: &Ctx<'_>,
) -> Result<Option<Value>> {
    use crate::storage::RecoveryControl;
    let r = ctx.env.recovery();
    let in_recovery = || r.ok_or_else(crate::storage::not_in_recovery);
    Ok(Some(match f {
        Func::IsInRecovery => Value::Bool(r.is_some()),
        Func::LastWalReceiveLsn => r.map_or(Value::Null, |r| Value::PgLsn(r.receive_lsn)),
        Func::LastWalReplayLsn => r.map_or(Value::Null, |r| Value::PgLsn(r.replay_lsn)),
        Func::LastXactReplayTimestamp => r
            .and_then(|r| r.last_xact_replay_timestamp)
            .map_or(Value::Null, Value::Timestamp),
        Func::IsWalReplayPaused => Value::Bool(in_recovery()?.paused),
        Func::WalReplayPause | Func::WalReplayResume => {
            in_recovery()?;
            ctx.env.recovery_control(if f == Func::WalReplayPause {
                RecoveryControl::Pause
            } else {
                RecoveryControl::Resume
            })?;
            Value::Null
        }
        Func::Promote => {
            in_recovery()?;
            let wait = match args.first() {
                Some(a) => !matches!(a.eval(row, ctx)?, Value::Bool(false)),
                None => true,
            };
            let secs = match args.get(1) {
                Some(a) => a.eval(row, ctx)?.as_i64().unwrap_or(60),
                None => 60,
            };
            if secs <= 0 {
                return Err(Error::user(
                    SqlState::INVALID_PARAMETER_VALUE,
                    "\"wait_seconds\" must not be negative or zero",
                ));
            }
            let wait = wait.then(|| std::time::Duration::from_secs(secs as u64));
            Value::Bool(ctx.env.recovery_control(RecoveryControl::Promote(wait))?)
        }
        _ => return Ok(None),
    }))
}

fn eval_func(f: Func, args: &[Expr], row: &[Value], ctx: &Ctx<'_>) -> Result<Value> {
    if f == Func::ReloadConf {
        ctx.env.reload_conf()?;
        return Ok(Value::Bool(true));
    }
    if f == Func::BackendPid {
        return Ok(Value::Int4(ctx.env.backend_pid()));
    }
    match f {
        Func::CurrentUser => return Ok(Value::Text(ctx.env.session_user())),
        Func::CurrentDatabase => return Ok(Value::Text(ctx.env.database())),
        Func::Version => {
            return Ok(Value::Text(format!(
                "PostgreSQL {} on {}-{}, compiled by rustc, 64-bit",
                crate::guc::SERVER_VERSION.default,
                std::env::consts::ARCH,
                std::env::consts::OS
            )))
        }
        _ => {}
    }
    if matches!(
        f,
        Func::WalInsertLsn | Func::WalWriteLsn | Func::WalFlushLsn
    ) {
        let p = ctx.env.wal_positions()?;
        return Ok(Value::PgLsn(match f {
            Func::WalInsertLsn => p.insert,
            Func::WalWriteLsn => p.write,
            _ => p.flush,
        }));
    }
    if f == Func::SerialSequence {
        let table = args[0].eval(row, ctx)?;
        let column = args[1].eval(row, ctx)?;
        return match (table, column) {
            (Value::Text(t), Value::Text(c)) => ctx
                .env
                .sequence(crate::sequence::SeqCall::SerialSequence(t, c)),
            _ => Ok(Value::Null),
        };
    }
    if matches!(
        f,
        Func::NextVal | Func::CurrVal | Func::SetVal | Func::LastVal
    ) {
        use crate::sequence::SeqCall;
        let mut v = Vec::with_capacity(args.len());
        for a in args {
            v.push(a.eval(row, ctx)?);
        }
        if v.iter().any(Value::is_null) {
            return Ok(Value::Null);
        }
        let call = match (f, v.as_slice()) {
            (Func::LastVal, []) => SeqCall::LastVal,
            (Func::NextVal, [rel]) => SeqCall::NextVal(rel.clone()),
            (Func::CurrVal, [rel]) => SeqCall::CurrVal(rel.clone()),
            (Func::SetVal, [rel, value, rest @ ..]) => SeqCall::SetVal(
                rel.clone(),
                value
                    .as_i64()
                    .ok_or_else(|| Error::internal("setval value is not bigint"))?,
                !matches!(rest, [Value::Bool(false)]),
            ),
            _ => return Err(Error::internal("sequence function arguments")),
        };
        return ctx.env.sequence(call);
    }
    if matches!(f, Func::CurrentSetting | Func::SetConfig) {
        let mut v = Vec::with_capacity(args.len());
        for a in args {
            v.push(a.eval(row, ctx)?);
        }
        let Some(Value::Text(name)) = v.first() else {
            if f == Func::SetConfig {
                return Err(Error::user(
                    SqlState::NULL_VALUE_NOT_ALLOWED,
                    "SET requires parameter name",
                ));
            }
            return Ok(Value::Null);
        };
        return Ok(if f == Func::CurrentSetting {
            // Strict, as PostgreSQL's: a NULL missing_ok gives NULL.
            if v.get(1).is_some_and(Value::is_null) {
                return Ok(Value::Null);
            }
            let missing_ok = matches!(v.get(1), Some(Value::Bool(true)));
            match ctx.env.setting(name, missing_ok)? {
                Some(s) => Value::Text(s),
                None => Value::Null,
            }
        } else {
            let value = match v.get(1) {
                Some(Value::Text(s)) => Some(s.as_str()),
                _ => None,
            };
            let local = matches!(v.get(2), Some(Value::Bool(true)));
            Value::Text(ctx.env.set_config(name, value, local)?)
        });
    }
    if let Some(v) = eval_recovery_func(f, args, row, ctx)? {
        return Ok(v);
    }
    if let Func::RelationSize(which) = f {
        let Some(oid) = args[0].eval(row, ctx)?.as_i64() else {
            return Ok(Value::Null);
        };
        // The relation first, as PostgreSQL opens it before it reads the fork's name.
        if ctx.env.relation_size(oid, RelationSize::NoFork).is_none() {
            return Ok(Value::Null);
        }
        let which = match args.get(1).map(|a| a.eval(row, ctx)).transpose()? {
            None => which,
            Some(Value::Null) => return Ok(Value::Null),
            Some(Value::Text(fork)) => match fork.as_str() {
                "main" => RelationSize::Main,
                "fsm" => RelationSize::Fsm,
                "vm" | "init" => RelationSize::NoFork,
                _ => {
                    return Err(Error::user(
                        SqlState::INVALID_PARAMETER_VALUE,
                        "invalid fork name",
                    ))
                }
            },
            Some(v) => return Err(Error::internal(format!("bad fork argument {v:?}"))),
        };
        return Ok(ctx
            .env
            .relation_size(oid, which)
            .map_or(Value::Null, Value::Int8));
    }
    if f == Func::LsnDiff {
        return Ok(match (args[0].eval(row, ctx)?, args[1].eval(row, ctx)?) {
            (Value::PgLsn(a), Value::PgLsn(b)) => Value::Int8(
                i64::try_from(i128::from(a) - i128::from(b))
                    .map_err(|_| out_of_range(&DataType::Int8))?,
            ),
            _ => Value::Null,
        });
    }
    if f == Func::Coalesce {
        for a in args {
            let v = a.eval(row, ctx)?;
            if !v.is_null() {
                return Ok(v);
            }
        }
        return Ok(Value::Null);
    }
    let v = args[0].eval(row, ctx)?;
    Ok(match (f, v) {
        (_, Value::Null) => Value::Null,
        (Func::Abs, Value::Float8(x)) => Value::Float8(x.abs()),
        (Func::Abs, v) => {
            let ty = v.data_type();
            let x = v
                .as_i64()
                .ok_or_else(|| Error::internal("abs of a non-number"))?;
            int_value(x.checked_abs().ok_or_else(|| out_of_range(&ty))?, &ty)?
        }
        (Func::Lower, Value::Text(s)) => Value::Text(s.to_lowercase()),
        (Func::Upper, Value::Text(s)) => Value::Text(s.to_uppercase()),
        (Func::Length, Value::Text(s)) => Value::Int4(s.chars().count() as i32),
        (Func::BpcharLength, Value::Text(s)) => {
            Value::Int4(s.trim_end_matches(' ').chars().count() as i32)
        }
        (f, v) => return Err(Error::internal(format!("bad argument {v:?} to {f:?}"))),
    })
}

/// Sort order of two values for ORDER BY: NULLs compare per `nulls_first`, others by SQL order.
pub(crate) fn sort_cmp(a: &Value, b: &Value, desc: bool, nulls_first: bool) -> Ordering {
    match (a.is_null(), b.is_null()) {
        (true, true) => Ordering::Equal,
        (true, false) => {
            if nulls_first {
                Ordering::Less
            } else {
                Ordering::Greater
            }
        }
        (false, true) => {
            if nulls_first {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (false, false) => {
            let o = a.sql_cmp(b).unwrap_or(Ordering::Equal);
            if desc {
                o.reverse()
            } else {
                o
            }
        }
    }
}
