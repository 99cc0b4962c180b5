//! SQL values and types, with three encodings:
//! - text, as PostgreSQL prints and parses them (`Value::to_text`, `Value::parse`);
//! - the row format stored in heap tuples (`encode_row`, `decode_row`);
//! - the memcomparable key format stored in B-tree entries (`encode_key`), whose byte order is
//!   the SQL order of the values.

use crate::error::{Error, Result, SqlState};
use std::cmp::Ordering;
use std::fmt;

/// A column type. Names and OIDs follow PostgreSQL's `pg_type`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `boolean` (OID 16).
    Bool,
    /// `smallint` (OID 21).
    Int2,
    /// `integer` (OID 23).
    Int4,
    /// `bigint` (OID 20).
    Int8,
    /// `double precision` (OID 701).
    Float8,
    /// `text` (OID 25).
    Text,
    /// `varchar(n)` (OID 1043); `None` means no limit. The limit counts characters.
    Varchar(Option<u32>),
    /// `char(n)` (OID 1042), blank-padded to `n` characters.
    Char(u32),
    /// `timestamp` without time zone (OID 1114), microseconds since 2000-01-01 00:00:00.
    Timestamp,
    /// `pg_lsn` (OID 3220): a WAL position, bytes; text `X/X` (two hexadecimal halves).
    PgLsn,
}

impl DataType {
    /// PostgreSQL type OID, as sent in RowDescription and ParameterDescription.
    pub fn oid(&self) -> u32 {
        match self {
            DataType::Bool => 16,
            DataType::Int2 => 21,
            DataType::Int4 => 23,
            DataType::Int8 => 20,
            DataType::Float8 => 701,
            DataType::Text => 25,
            DataType::Varchar(_) => 1043,
            DataType::Char(_) => 1042,
            DataType::Timestamp => 1114,
            DataType::PgLsn => 3220,
        }
    }

    /// The type's name as PostgreSQL prints it (`format_type`).
    pub fn name(&self) -> String {
        match self {
            DataType::Bool => "boolean".into(),
            DataType::Int2 => "smallint".into(),
            DataType::Int4 => "integer".into(),
            DataType::Int8 => "bigint".into(),
            DataType::Float8 => "double precision".into(),
            DataType::Text => "text".into(),
            DataType::Varchar(None) => "character varying".into(),
            DataType::Varchar(Some(n)) => format!("character varying({n})"),
            DataType::Char(n) => format!("character({n})"),
            DataType::Timestamp => "timestamp without time zone".into(),
            DataType::PgLsn => "pg_lsn".into(),
        }
    }

    /// True for smallint, integer and bigint.
    pub fn is_integer(&self) -> bool {
        matches!(self, DataType::Int2 | DataType::Int4 | DataType::Int8)
    }

    /// True for the character types.
    pub fn is_string(&self) -> bool {
        matches!(
            self,
            DataType::Text | DataType::Varchar(_) | DataType::Char(_)
        )
    }

    /// Stable one-line encoding used in the catalog (`int4`, `varchar:10`, `char:84`, ...).
    pub fn to_catalog(&self) -> String {
        match self {
            DataType::Bool => "bool".into(),
            DataType::Int2 => "int2".into(),
            DataType::Int4 => "int4".into(),
            DataType::Int8 => "int8".into(),
            DataType::Float8 => "float8".into(),
            DataType::Text => "text".into(),
            DataType::Varchar(None) => "varchar".into(),
            DataType::Varchar(Some(n)) => format!("varchar:{n}"),
            DataType::Char(n) => format!("char:{n}"),
            DataType::Timestamp => "timestamp".into(),
            DataType::PgLsn => "pg_lsn".into(),
        }
    }

    /// Inverse of [`DataType::to_catalog`]. `None` if the string is not one it produces.
    pub fn from_catalog(s: &str) -> Option<DataType> {
        Some(match s {
            "bool" => DataType::Bool,
            "int2" => DataType::Int2,
            "int4" => DataType::Int4,
            "int8" => DataType::Int8,
            "float8" => DataType::Float8,
            "text" => DataType::Text,
            "varchar" => DataType::Varchar(None),
            "timestamp" => DataType::Timestamp,
            "pg_lsn" => DataType::PgLsn,
            _ => {
                let (name, n) = s.split_once(':')?;
                let n: u32 = n.parse().ok()?;
                match name {
                    "varchar" => DataType::Varchar(Some(n)),
                    "char" => DataType::Char(n),
                    _ => return None,
                }
            }
        })
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// One SQL value. Strings of every character type are `Text` (char(n) values already padded).
#[derive(Clone, Debug)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// boolean.
    Bool(bool),
    /// smallint.
    Int2(i16),
    /// integer.
    Int4(i32),
    /// bigint.
    Int8(i64),
    /// double precision.
    Float8(f64),
    /// text, varchar, char.
    Text(String),
    /// timestamp: microseconds since 2000-01-01 00:00:00.
    Timestamp(i64),
    /// pg_lsn: a WAL position, bytes.
    PgLsn(u64),
}

/// Parses `X/X`, a `pg_lsn`'s text (`pg_lsn_in`): two hexadecimal halves of at most 8 digits.
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    let ok = |p: &str| !p.is_empty() && p.len() <= 8 && p.bytes().all(|b| b.is_ascii_hexdigit());
    if !ok(hi) || !ok(lo) {
        return None;
    }
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// A `pg_lsn`'s text, `X/X` (`pg_lsn_out`).
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

/// Microseconds between 1970-01-01 and 2000-01-01 (PostgreSQL's epoch).
pub const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

impl Value {
    /// True for `Value::Null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value as i64 if it is an integer of any width.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int2(v) => Some(*v as i64),
            Value::Int4(v) => Some(*v as i64),
            Value::Int8(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as f64 if it is numeric.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float8(v) => Some(*v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// Text output as PostgreSQL prints it (`t`/`f`, `1.5`, `2024-01-02 03:04:05.123456`).
    /// `None` for NULL.
    pub fn to_text(&self) -> Option<String> {
        Some(match self {
            Value::Null => return None,
            Value::Bool(b) => if *b { "t" } else { "f" }.to_string(),
            Value::Int2(v) => v.to_string(),
            Value::Int4(v) => v.to_string(),
            Value::Int8(v) => v.to_string(),
            Value::Float8(v) => format_float8(*v),
            Value::Text(s) => s.clone(),
            Value::Timestamp(us) => format_timestamp(*us),
            Value::PgLsn(lsn) => format_lsn(*lsn),
        })
    }

    /// Parses PostgreSQL text input for `ty` (`'t'`, `'42'`, `'2024-01-02 03:04:05'`).
    ///
    /// # Errors
    /// 22P02 for malformed numbers and booleans, 22003 for out-of-range integers, 22007 for
    /// malformed timestamps, 22001 for strings longer than a varchar(n)/char(n) limit.
    pub fn parse(ty: &DataType, s: &str) -> Result<Value> {
        let bad = |t: &str| {
            Error::user(
                SqlState::INVALID_TEXT_REPRESENTATION,
                format!("invalid input syntax for type {t}: \"{s}\""),
            )
        };
        let t = s.trim();
        Ok(match ty {
            DataType::Bool => match t.to_ascii_lowercase().as_str() {
                "t" | "true" | "yes" | "y" | "on" | "1" => Value::Bool(true),
                "f" | "false" | "no" | "n" | "off" | "0" => Value::Bool(false),
                _ => return Err(bad("boolean")),
            },
            DataType::Int2 | DataType::Int4 | DataType::Int8 => {
                let v: i128 = t.parse().map_err(|_| bad(&ty.name()))?;
                Value::Int8(i64::try_from(v).map_err(|_| out_of_range(ty))?).cast(ty)?
            }
            DataType::Float8 => Value::Float8(match t.to_ascii_lowercase().as_str() {
                "nan" => f64::NAN,
                "infinity" | "inf" => f64::INFINITY,
                "-infinity" | "-inf" => f64::NEG_INFINITY,
                _ => t.parse().map_err(|_| bad("double precision"))?,
            }),
            DataType::Text | DataType::Varchar(_) | DataType::Char(_) => {
                Value::Text(fit_text(s, ty)?)
            }
            DataType::Timestamp => Value::Timestamp(parse_timestamp(t).ok_or_else(|| {
                Error::user(
                    SqlState::INVALID_DATETIME_FORMAT,
                    format!("invalid input syntax for type timestamp: \"{s}\""),
                )
            })?),
            DataType::PgLsn => Value::PgLsn(parse_lsn(t).ok_or_else(|| bad("pg_lsn"))?),
        })
    }

    /// Casts to `ty` with PostgreSQL's rules (assignment or explicit cast; both are the same for
    /// the supported types). NULL casts to NULL.
    ///
    /// # Errors
    /// 22003 when a number does not fit, 22001 when a string is too long for varchar(n)/char(n),
    /// the errors of [`Value::parse`] when casting from text, 42846 (as 42804) when no cast exists.
    pub fn cast(&self, ty: &DataType) -> Result<Value> {
        if self.is_null() {
            return Ok(Value::Null);
        }
        if let Value::Text(s) = self {
            return match ty {
                DataType::Text | DataType::Varchar(_) | DataType::Char(_) => {
                    Ok(Value::Text(fit_text(s, ty)?))
                }
                _ => Value::parse(ty, s),
            };
        }
        Ok(match ty {
            DataType::Int2 | DataType::Int4 | DataType::Int8 => {
                let v = match self {
                    Value::Float8(f) => {
                        let r = f.round_ties_even();
                        if !r.is_finite() || r < i64::MIN as f64 || r >= i64::MAX as f64 {
                            return Err(out_of_range(ty));
                        }
                        r as i64
                    }
                    Value::Bool(b) if *ty == DataType::Int4 => *b as i64,
                    _ => self.as_i64().ok_or_else(|| no_cast(self, ty))?,
                };
                match ty {
                    DataType::Int2 => Value::Int2(i16::try_from(v).map_err(|_| out_of_range(ty))?),
                    DataType::Int4 => Value::Int4(i32::try_from(v).map_err(|_| out_of_range(ty))?),
                    _ => Value::Int8(v),
                }
            }
            DataType::Float8 => Value::Float8(self.as_f64().ok_or_else(|| no_cast(self, ty))?),
            DataType::Bool => match self {
                Value::Bool(b) => Value::Bool(*b),
                Value::Int4(v) => Value::Bool(*v != 0),
                _ => return Err(no_cast(self, ty)),
            },
            DataType::Timestamp => match self {
                Value::Timestamp(t) => Value::Timestamp(*t),
                _ => return Err(no_cast(self, ty)),
            },
            DataType::PgLsn => match self {
                Value::PgLsn(l) => Value::PgLsn(*l),
                _ => return Err(no_cast(self, ty)),
            },
            DataType::Text | DataType::Varchar(_) | DataType::Char(_) => {
                // The cast from boolean spells the word (PostgreSQL's `booltext`), where the
                // output function prints `t` or `f`; an explicit cast to a shorter type cuts
                // it (`true::char` is `t`). walnut cannot tell an explicit cast from an
                // assignment here, where PostgreSQL would fail with 22001 instead.
                let text = match (self, ty) {
                    (Value::Bool(b), DataType::Char(n) | DataType::Varchar(Some(n))) => {
                        b.to_string().chars().take(*n as usize).collect()
                    }
                    (Value::Bool(b), _) => b.to_string(),
                    _ => self.to_text().expect("non-null value has a text form"),
                };
                Value::Text(text).cast(ty)?
            }
        })
    }

    /// SQL comparison of two non-null values of comparable types (numbers with numbers, strings
    /// with strings, ...). `None` if either is NULL or the types are not comparable.
    /// Trailing blanks are not significant for character comparison (as for bpchar).
    pub fn sql_cmp(&self, other: &Value) -> Option<Ordering> {
        match (self, other) {
            (Value::Null, _) | (_, Value::Null) => None,
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            (Value::Text(a), Value::Text(b)) => Some(a.cmp(b)),
            (Value::Timestamp(a), Value::Timestamp(b)) => Some(a.cmp(b)),
            (Value::PgLsn(a), Value::PgLsn(b)) => Some(a.cmp(b)),
            (Value::PgLsn(_), _) | (_, Value::PgLsn(_)) => None,
            (Value::Float8(_), _) | (_, Value::Float8(_)) => {
                let (a, b) = (self.as_f64()?, other.as_f64()?);
                Some(a.total_cmp(&b))
            }
            _ => Some(self.as_i64()?.cmp(&other.as_i64()?)),
        }
    }

    /// The type this value naturally has (`Text` for strings, `Bool` for NULL).
    pub fn data_type(&self) -> DataType {
        match self {
            Value::Null | Value::Bool(_) => DataType::Bool,
            Value::Int2(_) => DataType::Int2,
            Value::Int4(_) => DataType::Int4,
            Value::Int8(_) => DataType::Int8,
            Value::Float8(_) => DataType::Float8,
            Value::Text(_) => DataType::Text,
            Value::Timestamp(_) => DataType::Timestamp,
            Value::PgLsn(_) => DataType::PgLsn,
        }
    }
}

impl PartialEq for Value {
    /// Structural equality for tests (NULL == NULL here, unlike SQL).
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Float8(a), Value::Float8(b)) => a.to_bits() == b.to_bits(),
            _ => {
                self.sql_cmp(other) == Some(Ordering::Equal)
                    && self.data_type() == other.data_type()
            }
        }
    }
}

/// `s` as a value of the string type `ty`: cut to a varchar(n)/char(n) limit if only spaces
/// are cut, padded with spaces to char(n)'s length; one allocation.
///
/// # Errors
/// 22001 if more than spaces would be cut.
fn fit_text(s: &str, ty: &DataType) -> Result<String> {
    let (limit, pad_to) = match ty {
        DataType::Varchar(limit) => (*limit, None),
        DataType::Char(n) => (Some(*n), Some(*n as usize)),
        _ => (None, None),
    };
    let fitted = match limit {
        None => s,
        Some(n) => match s.char_indices().nth(n as usize) {
            None => s,
            Some((cut, _)) if s[cut..].chars().all(|c| c == ' ') => &s[..cut],
            Some(_) => {
                return Err(Error::user(
                    SqlState::STRING_DATA_RIGHT_TRUNCATION,
                    format!("value too long for type {}", ty.name()),
                ))
            }
        },
    };
    let pad = pad_to.map_or(0, |n| n.saturating_sub(fitted.chars().count()));
    let mut out = String::with_capacity(fitted.len() + pad);
    out.push_str(fitted);
    const SPACES: &str = "                                                                ";
    let mut left = pad;
    while left > 0 {
        let k = left.min(SPACES.len());
        out.push_str(&SPACES[..k]);
        left -= k;
    }
    Ok(out)
}

fn out_of_range(ty: &DataType) -> Error {
    Error::user(
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{} out of range", ty.name()),
    )
}

fn no_cast(v: &Value, ty: &DataType) -> Error {
    Error::user(
        SqlState::DATATYPE_MISMATCH,
        format!("cannot cast type {} to {}", v.data_type().name(), ty.name()),
    )
}

fn format_float8(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        // The shortest digits that round-trip, as PostgreSQL 12+ prints them
        // (`float8out_internal`, src/common/d2s.c `to_chars`): plain notation for decimal
        // exponents -4 to 14, else scientific with a signed exponent of at least two digits
        // (`1e+301`, `1.5e-05`).
        let sci = format!("{v:e}");
        let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
        let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
        if (-4..15).contains(&exp) {
            format!("{v}")
        } else {
            let sign = if exp < 0 { '-' } else { '+' };
            format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
        }
    }
}

/// Formats microseconds since 2000-01-01 as `YYYY-MM-DD HH:MM:SS[.ffffff]`.
pub fn format_timestamp(us: i64) -> String {
    let unix_us = us.saturating_add(PG_EPOCH_OFFSET_US);
    match chrono::DateTime::from_timestamp_micros(unix_us) {
        Some(dt) => {
            let dt = dt.naive_utc();
            let frac = unix_us.rem_euclid(1_000_000);
            if frac == 0 {
                dt.format("%Y-%m-%d %H:%M:%S").to_string()
            } else {
                let mut s = format!("{}.{:06}", dt.format("%Y-%m-%d %H:%M:%S"), frac);
                while s.ends_with('0') {
                    s.pop();
                }
                s
            }
        }
        None => "infinity".into(),
    }
}

/// Parses `YYYY-MM-DD[ HH:MM:SS[.f]]` (or `T` as the separator) into microseconds since 2000-01-01.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    use chrono::{NaiveDate, NaiveDateTime};
    let s = s.trim();
    let dt = [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()?
            .and_hms_opt(0, 0, 0)
    })?;
    Some(dt.and_utc().timestamp_micros() - PG_EPOCH_OFFSET_US)
}

/// Current time as a timestamp value (microseconds since 2000-01-01, UTC).
pub fn now_timestamp() -> i64 {
    let unix_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    unix_us - PG_EPOCH_OFFSET_US
}

/// Encodes a row for a heap tuple: u16 LE attribute count, a null bitmap of
/// `ceil(natts / 8)` bytes (bit set = NULL), then each non-null value in column order:
/// bool 1 byte, int2 2, int4 4, int8 8, float8 8, timestamp 8 (all LE); a string as its length
/// (one byte `0..=127`, or the byte 0x80 and a u32 LE) and its UTF-8 bytes. A `char(n)` value is
/// stored without its trailing blanks, which [`decode_row`] puts back: pgbench's
/// `filler char(84)`, blank in every row, takes one byte instead of 88.
///
/// `types` are the columns' types, `values` the row, cast to them (see [`Value::cast`]): one type
/// per value.
///
/// # Panics
/// If `types` has fewer entries than `values` (a caller's bug, checked in release builds).
pub fn encode_row<'t>(
    types: impl IntoIterator<Item = &'t DataType>,
    values: &[Value],
    out: &mut Vec<u8>,
) {
    let natts = values.len();
    out.extend_from_slice(&(natts as u16).to_le_bytes());
    let bitmap_at = out.len();
    out.resize(bitmap_at + natts.div_ceil(8), 0);
    let mut types = types.into_iter();
    for (i, v) in values.iter().enumerate() {
        let ty = types.next().expect("encode_row: a type for every value");
        match v {
            Value::Null => out[bitmap_at + i / 8] |= 1 << (i % 8),
            Value::Bool(b) => out.push(*b as u8),
            Value::Int2(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Int4(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Int8(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Float8(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Timestamp(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::PgLsn(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Text(s) => {
                let s = match ty {
                    DataType::Char(_) => s.trim_end_matches(' '),
                    _ => s.as_str(),
                };
                match u8::try_from(s.len()) {
                    Ok(len) if len <= SHORT_STRING_MAX => out.push(len),
                    _ => {
                        out.push(LONG_STRING);
                        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                    }
                }
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
}

/// Longest string whose stored length takes one byte (the byte is the length).
const SHORT_STRING_MAX: u8 = 0x7F;
/// First byte of a longer string's stored length; a u32 LE length follows.
const LONG_STRING: u8 = 0x80;

/// Decodes [`encode_row`]'s format given the column types.
///
/// Columns beyond the stored attribute count decode as NULL (rows written before a column
/// existed).
///
/// # Errors
/// A corruption error if the bytes are truncated or a string is not UTF-8.
pub fn decode_row(types: &[DataType], bytes: &[u8]) -> Result<Vec<Value>> {
    let corrupt = || Error::corruption("malformed tuple data");
    let natts = u16::from_le_bytes(
        bytes
            .get(..2)
            .ok_or_else(corrupt)?
            .try_into()
            .expect("2 bytes"),
    ) as usize;
    let bitmap = bytes.get(2..2 + natts.div_ceil(8)).ok_or_else(corrupt)?;
    let mut pos = 2 + natts.div_ceil(8);
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = bytes.get(pos..pos + n).ok_or_else(corrupt)?;
        pos += n;
        Ok(s)
    };
    let mut out = Vec::with_capacity(types.len());
    for (i, ty) in types.iter().enumerate() {
        if i >= natts || bitmap[i / 8] & (1 << (i % 8)) != 0 {
            out.push(Value::Null);
            continue;
        }
        let v = match ty {
            DataType::Bool => Value::Bool(take(1)?[0] != 0),
            DataType::Int2 => Value::Int2(i16::from_le_bytes(take(2)?.try_into().expect("2"))),
            DataType::Int4 => Value::Int4(i32::from_le_bytes(take(4)?.try_into().expect("4"))),
            DataType::Int8 => Value::Int8(i64::from_le_bytes(take(8)?.try_into().expect("8"))),
            DataType::Float8 => Value::Float8(f64::from_le_bytes(take(8)?.try_into().expect("8"))),
            DataType::Timestamp => {
                Value::Timestamp(i64::from_le_bytes(take(8)?.try_into().expect("8")))
            }
            DataType::PgLsn => Value::PgLsn(u64::from_le_bytes(take(8)?.try_into().expect("8"))),
            DataType::Text | DataType::Varchar(_) | DataType::Char(_) => {
                let len = match take(1)?[0] {
                    len @ 0..=SHORT_STRING_MAX => len as usize,
                    LONG_STRING => u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize,
                    _ => return Err(corrupt()),
                };
                let s = std::str::from_utf8(take(len)?).map_err(|_| corrupt())?;
                match ty {
                    DataType::Char(n) => {
                        let chars = if s.is_ascii() { len } else { s.chars().count() };
                        let pad = (*n as usize).saturating_sub(chars);
                        let mut padded = String::with_capacity(len + pad);
                        padded.push_str(s);
                        padded.extend(std::iter::repeat_n(' ', pad));
                        Value::Text(padded)
                    }
                    _ => Value::Text(s.to_string()),
                }
            }
        };
        out.push(v);
    }
    Ok(out)
}

/// Appends the memcomparable encoding of one key column to `out`, so that comparing encodings
/// with `memcmp` orders them as SQL orders the values. Integers of every width encode alike
/// (8 bytes big-endian, sign bit flipped), so an int8 parameter finds an int4 key.
/// Strings: bytes with 0x00 escaped as 0x00 0xFF, ended by 0x00 0x00. Floats: IEEE bits,
/// flipped so negative numbers sort first. NULL encodes as a lone 0x00 before any non-null
/// (tag 0x01) value.
pub fn encode_key_part(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(0),
        Value::Bool(b) => out.extend_from_slice(&[1, *b as u8]),
        Value::Int2(_) | Value::Int4(_) | Value::Int8(_) | Value::Timestamp(_) => {
            let x = match v {
                Value::Timestamp(t) => *t,
                _ => v.as_i64().expect("integer"),
            };
            out.push(1);
            out.extend_from_slice(&((x as u64) ^ (1 << 63)).to_be_bytes());
        }
        Value::PgLsn(x) => {
            out.push(1);
            out.extend_from_slice(&x.to_be_bytes());
        }
        Value::Float8(f) => {
            let bits = f.to_bits();
            let key = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ (1 << 63)
            };
            out.push(1);
            out.extend_from_slice(&key.to_be_bytes());
        }
        Value::Text(s) => {
            out.push(1);
            for &b in s.as_bytes() {
                out.push(b);
                if b == 0 {
                    out.push(0xff);
                }
            }
            out.extend_from_slice(&[0, 0]);
        }
    }
}

/// Memcomparable encoding of a whole key (see [`encode_key_part`]).
pub fn encode_key(values: &[Value]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 9);
    for v in values {
        encode_key_part(v, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn types() -> Vec<DataType> {
        vec![
            DataType::Bool,
            DataType::Int4,
            DataType::Int8,
            DataType::Text,
            DataType::Float8,
            DataType::Int2,
            DataType::Timestamp,
            DataType::Char(20),
            DataType::Varchar(None),
            DataType::PgLsn,
        ]
    }

    /// float8 text as PostgreSQL 18 prints it (values checked against `SELECT x::float8`).
    #[test]
    fn float8_text_is_postgresql_s() {
        for (v, text) in [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456789012345.0, "123456789012345"),
            (1e15, "1e+15"),
            (1e301, "1e+301"),
            (-1.2345678901234568e17, "-1.2345678901234568e+17"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (f64::INFINITY, "Infinity"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(Value::Float8(v).to_text().unwrap(), text, "{v:e}");
        }
    }

    /// A cast of boolean to a character type spells the word (PostgreSQL's `booltext`), cut to
    /// the type's length; its output form stays `t`/`f`.
    #[test]
    fn boolean_casts_to_text_as_a_word() {
        for (v, ty, text) in [
            (true, DataType::Text, "true"),
            (false, DataType::Varchar(None), "false"),
            (true, DataType::Char(1), "t"),
            (false, DataType::Char(4), "fals"),
            (true, DataType::Varchar(Some(2)), "tr"),
            (true, DataType::Char(6), "true  "),
        ] {
            assert_eq!(
                Value::Bool(v).cast(&ty).unwrap(),
                Value::Text(text.into()),
                "{v} as {ty:?}"
            );
        }
        assert_eq!(Value::Bool(true).to_text().unwrap(), "t");
    }

    #[test]
    fn pg_lsn_text_order_and_keys() {
        let a = Value::parse(&DataType::PgLsn, "0/16B3748").unwrap();
        let b = Value::parse(&DataType::PgLsn, "1/0").unwrap();
        assert_eq!(a, Value::PgLsn(0x16B_3748));
        assert_eq!(b.to_text().unwrap(), "1/0");
        assert_eq!(a.sql_cmp(&b), Some(Ordering::Less));
        assert!(encode_key(&[a.clone()]) < encode_key(&[b.clone()]));
        assert_eq!(
            Value::Text("A/10".into()).cast(&DataType::PgLsn).unwrap(),
            Value::PgLsn((10 << 32) | 16)
        );
        assert_eq!(
            a.cast(&DataType::Text).unwrap(),
            Value::Text("0/16B3748".into())
        );
        for bad in ["", "16", "0/", "/0", "x/1", "123456789/0"] {
            let e = Value::parse(&DataType::PgLsn, bad).unwrap_err();
            assert_eq!(e.sqlstate, SqlState::INVALID_TEXT_REPRESENTATION, "{bad}");
        }
        assert_eq!(
            DataType::from_catalog(&DataType::PgLsn.to_catalog()),
            Some(DataType::PgLsn)
        );
    }

    proptest! {
        #[test]
        fn row_round_trip(b in any::<Option<bool>>(), i in any::<Option<i32>>(), l in any::<i64>(),
                          s in any::<Option<String>>(), f in any::<f64>(), h in any::<i16>(), t in any::<i64>(),
                          c in "[a-z\u{e9} ]{0,20}", v in "[a-z ]{0,200}", lsn in any::<u64>()) {
            let row = vec![
                b.map(Value::Bool).unwrap_or(Value::Null),
                i.map(Value::Int4).unwrap_or(Value::Null),
                Value::Int8(l),
                s.map(Value::Text).unwrap_or(Value::Null),
                Value::Float8(f),
                Value::Int2(h),
                Value::Timestamp(t),
                Value::Text(c).cast(&DataType::Char(20)).unwrap(),
                Value::Text(v),
                Value::PgLsn(lsn),
            ];
            let mut buf = Vec::new();
            encode_row(&types(), &row, &mut buf);
            prop_assert_eq!(decode_row(&types(), &buf).unwrap(), row);
        }

        #[test]
        fn truncated_rows_are_corruption_not_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_row(&types(), &bytes);
        }

        #[test]
        fn int_keys_sort_like_ints(a in any::<i64>(), b in any::<i64>()) {
            prop_assert_eq!(encode_key(&[Value::Int8(a)]).cmp(&encode_key(&[Value::Int8(b)])), a.cmp(&b));
        }

        #[test]
        fn text_keys_sort_like_strings(a in any::<String>(), b in any::<String>(), x in any::<i32>()) {
            let ka = encode_key(&[Value::Text(a.clone()), Value::Int4(x)]);
            let kb = encode_key(&[Value::Text(b.clone()), Value::Int4(x)]);
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        }

        #[test]
        fn float_keys_sort_like_floats(a in -1e300f64..1e300, b in -1e300f64..1e300) {
            prop_assert_eq!(encode_key(&[Value::Float8(a)]).cmp(&encode_key(&[Value::Float8(b)])), a.total_cmp(&b));
        }
    }

    #[test]
    fn a_char_value_is_stored_without_its_trailing_blanks_and_read_back_padded() {
        let types = [DataType::Char(84), DataType::Text, DataType::Char(3)];
        let row = [
            Value::Text(" ".repeat(84)),
            Value::Text(format!("{} ", "x".repeat(199))),
            Value::Text("\u{e9}  ".into()),
        ];
        let mut buf = Vec::new();
        encode_row(&types, &row, &mut buf);
        let mut want = vec![3, 0, 0, 0];
        want.extend_from_slice(&[0x80, 200, 0, 0, 0]);
        want.extend_from_slice(format!("{} ", "x".repeat(199)).as_bytes());
        want.extend_from_slice(&[2, 0xC3, 0xA9]);
        assert_eq!(buf, want, "char(84) blank: 1 byte; text keeps its blank");
        let back = decode_row(&types, &buf).unwrap();
        assert_eq!(back, row);
        assert_eq!(
            back[2],
            Value::Text("\u{e9}  ".into()),
            "padded to 3 characters"
        );
        buf[3] = 0x81;
        assert!(
            decode_row(&types, &buf).is_err(),
            "a length byte of 0x81 is corruption"
        );
    }

    #[test]
    fn char_is_padded_and_varchar_is_checked() {
        assert_eq!(
            Value::Text("ab".into()).cast(&DataType::Char(4)).unwrap(),
            Value::Text("ab  ".into())
        );
        assert!(Value::Text("abcdef".into())
            .cast(&DataType::Varchar(Some(3)))
            .is_err());
        assert_eq!(
            Value::Text("abc   ".into())
                .cast(&DataType::Varchar(Some(3)))
                .unwrap(),
            Value::Text("abc".into())
        );
    }

    #[test]
    fn text_input_and_output() {
        assert_eq!(
            Value::parse(&DataType::Int4, " 42 ").unwrap(),
            Value::Int4(42)
        );
        assert!(Value::parse(&DataType::Int2, "70000").is_err());
        assert_eq!(
            Value::parse(&DataType::Bool, "on").unwrap(),
            Value::Bool(true)
        );
        let ts = Value::parse(&DataType::Timestamp, "2024-02-03 04:05:06.5").unwrap();
        assert_eq!(ts.to_text().unwrap(), "2024-02-03 04:05:06.5");
        assert_eq!(Value::Float8(1.5).to_text().unwrap(), "1.5");
        assert_eq!(
            DataType::from_catalog(&DataType::Char(84).to_catalog()),
            Some(DataType::Char(84))
        );
    }
}
