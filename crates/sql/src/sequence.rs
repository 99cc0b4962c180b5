//! Sequences in the SQL layer: `CREATE SEQUENCE`'s options checked as PostgreSQL's
//! `init_params` checks them, `serial` columns, and the session's side of `nextval`,
//! `currval`, `setval` and `lastval` (PostgreSQL's `src/backend/commands/sequence.c`: the
//! per-session `SeqTable` cache and `last_used_seq`). The values themselves come from the
//! engine ([`SequenceAccess`]); crates/storage/DESIGN.md, "Sequences", has how they are
//! logged.

use crate::storage::{SeqLookup, SeqRef, SequenceAccess};
use std::collections::HashMap;
use walnut_common::{DataType, Error, Result, SequenceDef, SqlState, Value};

/// A sequence function's call, its relation argument evaluated (a name as text, or an OID).
#[derive(Clone, Debug)]
#[allow(clippy::enum_variant_names)]
pub(crate) enum SeqCall {
    /// `nextval(rel)`.
    NextVal(Value),
    /// `currval(rel)`.
    CurrVal(Value),
    /// `setval(rel, value [, is_called])`.
    SetVal(Value, i64, bool),
    /// `lastval()`.
    LastVal,
    /// `pg_get_serial_sequence(table, column)`: the table as `regclass` reads a name, the
    /// column as written.
    SerialSequence(String, String),
}

/// One sequence's state in this session (PostgreSQL's `SeqTableData`).
#[derive(Clone, Copy, Debug, Default)]
struct Cached {
    /// The relation file version the cached values came from.
    version: u128,
    /// The value `currval` returns (valid if `last_valid`).
    last: i64,
    /// The last value this session may hand out without fetching; `last == cached`: none.
    cached: i64,
    /// `nextval` or `setval(.., true)` has set `last` in this session.
    last_valid: bool,
    /// End of the WAL record that covers the values taken ahead (an LSN).
    covered_by: u64,
}

/// The session's sequence state: values taken ahead (`CACHE`), `currval` per sequence, and
/// the sequence `lastval` reads.
#[derive(Debug, Default)]
pub(crate) struct SessionSeqs {
    by_oid: HashMap<i64, Cached>,
    last_used: Option<i64>,
}

fn read_only(f: &str) -> Error {
    Error::user(
        SqlState::READ_ONLY_SQL_TRANSACTION,
        format!("cannot execute {f}() in a read-only transaction"),
    )
}

/// The sequence `rel` names: a name (PostgreSQL's `regclassin`: unquoted parts fold to lower
/// case) or an OID.
///
/// # Errors
/// 42P01 no such relation; 42809 a table; 3F000 an unknown schema; 42602 a malformed name.
fn resolve(acc: &dyn SequenceAccess, rel: &Value) -> Result<SeqRef> {
    let (found, shown) = match rel {
        Value::Text(s) => {
            let name = crate::expr::relation_name(s)?;
            (acc.lookup(&name), name)
        }
        other => match other.as_i64() {
            Some(oid) => (acc.lookup_oid(oid), oid.to_string()),
            None => return Err(Error::internal("sequence argument is not a name or an OID")),
        },
    };
    match found {
        SeqLookup::Sequence(s) => Ok(s),
        SeqLookup::Table => Err(Error::user(
            SqlState::WRONG_OBJECT_TYPE,
            format!("cannot open relation \"{shown}\""),
        )
        .with_detail("This operation is not supported for tables.")),
        SeqLookup::Missing => Err(crate::errors::undefined_table(&shown)),
    }
}

impl SessionSeqs {
    /// The entry of `s`; cached values of an older version of it are dropped, `currval` kept
    /// (PostgreSQL's `init_sequence` on a new relfilenumber).
    fn entry(&mut self, s: &SeqRef) -> &mut Cached {
        let e = self.by_oid.entry(s.oid).or_default();
        if e.version != s.version {
            e.version = s.version;
            e.cached = e.last;
        }
        e
    }

    /// Runs a sequence function; the result is a bigint. `read_only`: the transaction is READ
    /// ONLY.
    ///
    /// # Errors
    /// 55000 `currval`/`lastval` before a value exists in this session; 25006 `nextval` or
    /// `setval` in a read-only transaction (or on a hot standby); 22003 `setval` out of bounds;
    /// 2200H at a bound; those of [`resolve`] and the engine.
    pub(crate) fn call(
        &mut self,
        acc: &dyn SequenceAccess,
        read_only_txn: bool,
        call: SeqCall,
    ) -> Result<Value> {
        match call {
            SeqCall::NextVal(rel) => {
                let s = resolve(acc, &rel)?;
                if read_only_txn {
                    return Err(read_only("nextval"));
                }
                let e = self.entry(&s);
                if e.last != e.cached {
                    // A value taken ahead (CACHE): never past `cached`, which `fetch` stopped at
                    // a bound. This transaction's commit must make its record durable.
                    e.last += s.def.increment;
                    let v = e.last;
                    acc.note_wal(e.covered_by);
                    self.last_used = Some(s.oid);
                    return Ok(Value::Int8(v));
                }
                let (first, last, covered_by) = acc.fetch(&s)?;
                self.last_used = Some(s.oid);
                let e = self.entry(&s);
                e.last = first;
                e.cached = last;
                e.last_valid = true;
                e.covered_by = covered_by;
                Ok(Value::Int8(first))
            }
            SeqCall::CurrVal(rel) => {
                let s = resolve(acc, &rel)?;
                match self.by_oid.get(&s.oid) {
                    Some(e) if e.last_valid => Ok(Value::Int8(e.last)),
                    _ => Err(Error::user(
                        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                        format!(
                            "currval of sequence \"{}\" is not yet defined in this session",
                            s.def.name
                        ),
                    )),
                }
            }
            SeqCall::SetVal(rel, value, is_called) => {
                let s = resolve(acc, &rel)?;
                if read_only_txn {
                    return Err(read_only("setval"));
                }
                acc.set(&s, value, is_called)?;
                let e = self.entry(&s);
                if is_called {
                    e.last = value;
                    e.last_valid = true;
                }
                e.cached = e.last;
                Ok(Value::Int8(value))
            }
            SeqCall::SerialSequence(table, column) => {
                let table = crate::expr::relation_name(&table)?;
                Ok(match acc.owned_sequence(&table, &column)? {
                    Some(name) => Value::Text(format!("public.{}", crate::ddl::quote_ident(&name))),
                    None => Value::Null,
                })
            }
            SeqCall::LastVal => {
                let undefined = || {
                    Error::user(
                        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                        "lastval is not yet defined in this session",
                    )
                };
                let oid = self.last_used.ok_or_else(undefined)?;
                if !matches!(acc.lookup_oid(oid), SeqLookup::Sequence(_)) {
                    return Err(undefined());
                }
                match self.by_oid.get(&oid) {
                    Some(e) if e.last_valid => Ok(Value::Int8(e.last)),
                    _ => Err(undefined()),
                }
            }
        }
    }
}

/// The options of `CREATE SEQUENCE` (or of a `serial` column's sequence), as written.
#[derive(Clone, Debug, Default)]
pub(crate) struct SeqOptions {
    /// `AS`.
    pub ty: Option<DataType>,
    /// `INCREMENT [BY]`.
    pub increment: Option<i64>,
    /// `MINVALUE n` (`Some(None)`: `NO MINVALUE`).
    pub min: Option<Option<i64>>,
    /// `MAXVALUE n` (`Some(None)`: `NO MAXVALUE`).
    pub max: Option<Option<i64>>,
    /// `START [WITH]`.
    pub start: Option<i64>,
    /// `CACHE`.
    pub cache: Option<i64>,
    /// `[NO] CYCLE`.
    pub cycle: Option<bool>,
}

/// A sequence's definition from its options, with PostgreSQL's defaults and checks
/// (`init_params` in sequence.c): AS bigint, INCREMENT 1, MINVALUE 1 or the type's minimum,
/// MAXVALUE the type's maximum or -1, START the minimum (ascending) or maximum, CACHE 1.
///
/// # Errors
/// 22023 for each option PostgreSQL refuses (a zero increment, MINVALUE not below MAXVALUE, a
/// bound outside the type, START outside the bounds, CACHE below 1, a type other than
/// smallint, integer or bigint).
pub(crate) fn sequence_def(
    name: String,
    o: &SeqOptions,
    owned_by: Option<(String, String)>,
) -> Result<SequenceDef> {
    let bad = |m: String| Error::user(SqlState::INVALID_PARAMETER_VALUE, m);
    let ty = o.ty.clone().unwrap_or(DataType::Int8);
    let (tmin, tmax) = match ty {
        DataType::Int2 => (i16::MIN as i64, i16::MAX as i64),
        DataType::Int4 => (i32::MIN as i64, i32::MAX as i64),
        DataType::Int8 => (i64::MIN, i64::MAX),
        _ => {
            return Err(bad(
                "sequence type must be smallint, integer, or bigint".into()
            ))
        }
    };
    let increment = o.increment.unwrap_or(1);
    if increment == 0 {
        return Err(bad("INCREMENT must not be zero".into()));
    }
    let max = o
        .max
        .flatten()
        .unwrap_or(if increment > 0 { tmax } else { -1 });
    let min = o
        .min
        .flatten()
        .unwrap_or(if increment > 0 { 1 } else { tmin });
    let type_name = match ty {
        DataType::Int2 => "smallint",
        DataType::Int4 => "integer",
        _ => "bigint",
    };
    for (what, v) in [("MAXVALUE", max), ("MINVALUE", min)] {
        if v < tmin || v > tmax {
            return Err(bad(format!(
                "{what} ({v}) is out of range for sequence data type {type_name}"
            )));
        }
    }
    if min >= max {
        return Err(bad(format!(
            "MINVALUE ({min}) must be less than MAXVALUE ({max})"
        )));
    }
    let start = o.start.unwrap_or(if increment > 0 { min } else { max });
    if start < min {
        return Err(bad(format!(
            "START value ({start}) cannot be less than MINVALUE ({min})"
        )));
    }
    if start > max {
        return Err(bad(format!(
            "START value ({start}) cannot be greater than MAXVALUE ({max})"
        )));
    }
    let cache = o.cache.unwrap_or(1);
    if cache <= 0 {
        return Err(bad(format!("CACHE ({cache}) must be greater than zero")));
    }
    Ok(SequenceDef {
        name,
        ty,
        start,
        increment,
        min,
        max,
        cache,
        cycle: o.cycle.unwrap_or(false),
        owned_by,
    })
}

/// ALTER SEQUENCE's new definition of sequence `old` (PostgreSQL's `init_params` with
/// `isInit` false): each option given replaces the old value; `NO MINVALUE` / `NO MAXVALUE`
/// return to the defaults for the new increment and type; a new `AS` type moves a bound that
/// was the old type's limit to the new type's. Then the checks of [`sequence_def`].
///
/// # Errors
/// As [`sequence_def`].
pub(crate) fn altered_def(old: &SequenceDef, o: &SeqOptions) -> Result<SequenceDef> {
    let limits = |ty: &DataType| match ty {
        DataType::Int2 => (i16::MIN as i64, i16::MAX as i64),
        DataType::Int4 => (i32::MIN as i64, i32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    };
    let ty = o.ty.clone().unwrap_or_else(|| old.ty.clone());
    let retyped = ty != old.ty;
    let (old_min, old_max) = limits(&old.ty);
    let merged = SeqOptions {
        ty: Some(ty),
        increment: Some(o.increment.unwrap_or(old.increment)),
        // A bound not given stays, unless it was the old type's limit and the type changes.
        min: o
            .min
            .or(Some((!(retyped && old.min == old_min)).then_some(old.min))),
        max: o
            .max
            .or(Some((!(retyped && old.max == old_max)).then_some(old.max))),
        start: Some(o.start.unwrap_or(old.start)),
        cache: Some(o.cache.unwrap_or(old.cache)),
        cycle: Some(o.cycle.unwrap_or(old.cycle)),
    };
    sequence_def(old.name.clone(), &merged, old.owned_by.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::Arc;

    /// An engine side that hands out `cache` values per fetch, counting fetches.
    struct Fake {
        next: Mutex<i64>,
        fetches: Mutex<u32>,
        noted: Mutex<Vec<u64>>,
        def: Arc<SequenceDef>,
    }

    impl SequenceAccess for Fake {
        fn lookup(&self, name: &str) -> SeqLookup {
            match name {
                "s" => SeqLookup::Sequence(SeqRef {
                    oid: 7,
                    version: 1,
                    relfile: 1,
                    def: self.def.clone(),
                }),
                "t" => SeqLookup::Table,
                _ => SeqLookup::Missing,
            }
        }
        fn lookup_oid(&self, oid: i64) -> SeqLookup {
            if oid == 7 {
                self.lookup("s")
            } else {
                SeqLookup::Missing
            }
        }
        fn fetch(&self, seq: &SeqRef) -> Result<(i64, i64, u64)> {
            *self.fetches.lock() += 1;
            let mut n = self.next.lock();
            let first = *n;
            *n += seq.def.cache * seq.def.increment;
            Ok((first, *n - seq.def.increment, first as u64))
        }
        fn note_wal(&self, covered_by: u64) {
            self.noted.lock().push(covered_by);
        }
        fn set(&self, _: &SeqRef, value: i64, is_called: bool) -> Result<()> {
            *self.next.lock() = value + if is_called { 1 } else { 0 };
            Ok(())
        }
    }

    #[test]
    fn the_session_hands_out_its_cache_then_fetches_and_setval_empties_it() {
        let opts = SeqOptions {
            cache: Some(3),
            ..Default::default()
        };
        let def = Arc::new(sequence_def("s".into(), &opts, None).unwrap());
        let acc = Fake {
            next: Mutex::new(1),
            fetches: Mutex::new(0),
            noted: Mutex::new(Vec::new()),
            def,
        };
        let mut s = SessionSeqs::default();
        let name = || Value::Text("S".into());
        let err = |r: Result<Value>| r.unwrap_err().sqlstate;
        assert_eq!(
            err(s.call(&acc, false, SeqCall::LastVal)),
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
        );
        assert_eq!(
            err(s.call(&acc, false, SeqCall::CurrVal(name()))),
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
        );
        let got: Vec<Value> = (0..4)
            .map(|_| s.call(&acc, false, SeqCall::NextVal(name())).unwrap())
            .collect();
        assert_eq!(got, [1, 2, 3, 4].map(Value::Int8));
        assert_eq!(*acc.fetches.lock(), 2);
        // Values 2 and 3 came from the cache: each noted the record of the fetch that took them.
        assert_eq!(*acc.noted.lock(), [1, 1]);
        assert_eq!(
            s.call(&acc, false, SeqCall::CurrVal(Value::Int8(7)))
                .unwrap(),
            Value::Int8(4)
        );
        s.call(&acc, false, SeqCall::SetVal(name(), 100, true))
            .unwrap();
        assert_eq!(
            s.call(&acc, false, SeqCall::LastVal).unwrap(),
            Value::Int8(100)
        );
        assert_eq!(
            s.call(&acc, false, SeqCall::NextVal(name())).unwrap(),
            Value::Int8(101)
        );
        assert_eq!(*acc.fetches.lock(), 3);
        assert_eq!(
            err(s.call(&acc, true, SeqCall::NextVal(name()))),
            SqlState::READ_ONLY_SQL_TRANSACTION
        );
        assert_eq!(
            err(s.call(&acc, false, SeqCall::NextVal(Value::Text("t".into())))),
            SqlState::WRONG_OBJECT_TYPE
        );
        assert_eq!(
            err(s.call(&acc, false, SeqCall::NextVal(Value::Text("u".into())))),
            SqlState::UNDEFINED_TABLE
        );
    }

    #[test]
    fn options_get_postgresql_defaults_and_checks() {
        let def = |o: SeqOptions| sequence_def("s".into(), &o, None);
        let d = def(SeqOptions::default()).unwrap();
        assert_eq!((d.start, d.min, d.max, d.cache), (1, 1, i64::MAX, 1));
        let d = def(SeqOptions {
            increment: Some(-2),
            ty: Some(DataType::Int2),
            ..Default::default()
        })
        .unwrap();
        assert_eq!((d.start, d.min, d.max), (-1, i16::MIN as i64, -1));
        for bad in [
            SeqOptions {
                increment: Some(0),
                ..Default::default()
            },
            SeqOptions {
                min: Some(Some(5)),
                max: Some(Some(5)),
                ..Default::default()
            },
            SeqOptions {
                start: Some(0),
                ..Default::default()
            },
            SeqOptions {
                cache: Some(0),
                ..Default::default()
            },
            SeqOptions {
                ty: Some(DataType::Text),
                ..Default::default()
            },
            SeqOptions {
                ty: Some(DataType::Int2),
                max: Some(Some(40000)),
                ..Default::default()
            },
        ] {
            assert_eq!(
                def(bad).unwrap_err().sqlstate,
                SqlState::INVALID_PARAMETER_VALUE
            );
        }
    }
}
