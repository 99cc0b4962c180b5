//! Values on the wire: Bind parameters in, RowDescription and DataRow out.
//!
//! Text format is PostgreSQL's text I/O (`Value::parse`, `Value::to_text`). Binary format
//! follows PostgreSQL's send/recv functions for the supported types: int2/int4/int8 and
//! float8 big-endian, bool one byte, character types as UTF-8 bytes, timestamp as i64
//! microseconds since 2000-01-01.

use bytes::{BufMut, BytesMut};
use pgwire::messages::data::{
    DataRow, FieldDescription, RowDescription, FORMAT_CODE_BINARY, FORMAT_CODE_TEXT,
};
use std::fmt::Write as _;
use walnut_common::{DataType, Error, Result, SqlState, Value};
use walnut_sql::session::ColumnDesc;

/// Expands a Bind message's format-code list to one code per item: no codes means all text,
/// one code applies to all, otherwise one per item.
///
/// # Errors
/// 08P01 if the list has another length or a code is neither 0 nor 1.
pub fn resolve_formats(codes: &[i16], n: usize, what: &str) -> Result<Vec<i16>> {
    let formats = match codes.len() {
        0 => vec![FORMAT_CODE_TEXT; n],
        1 => vec![codes[0]; n],
        len if len == n => codes.to_vec(),
        len => {
            return Err(Error::user(
                SqlState::PROTOCOL_VIOLATION,
                format!("bind message has {len} {what} formats but {n} {what}s"),
            ))
        }
    };
    if let Some(bad) = formats
        .iter()
        .find(|f| **f != FORMAT_CODE_TEXT && **f != FORMAT_CODE_BINARY)
    {
        return Err(Error::user(
            SqlState::PROTOCOL_VIOLATION,
            format!("unsupported format code: {bad}"),
        ));
    }
    Ok(formats)
}

/// Decodes Bind parameter number `index` (0-based) of type `ty` in `format`; `None` is NULL.
///
/// # Errors
/// The text input errors of [`Value::parse`]; 22P03 for malformed binary values; 22021 for
/// invalid UTF-8.
pub fn decode_param(
    ty: &DataType,
    format: i16,
    bytes: Option<&[u8]>,
    index: usize,
) -> Result<Value> {
    let Some(bytes) = bytes else {
        return Ok(Value::Null);
    };
    if format == FORMAT_CODE_TEXT {
        return Value::parse(ty, utf8(bytes)?);
    }
    let bad = || {
        Error::user(
            SqlState::INVALID_BINARY_REPRESENTATION,
            format!(
                "incorrect binary data format in bind parameter {}",
                index + 1
            ),
        )
    };
    Ok(match ty {
        DataType::Bool => match bytes {
            [b] => Value::Bool(*b != 0),
            _ => return Err(bad()),
        },
        DataType::Int2 => Value::Int2(i16::from_be_bytes(bytes.try_into().map_err(|_| bad())?)),
        DataType::Int4 => Value::Int4(i32::from_be_bytes(bytes.try_into().map_err(|_| bad())?)),
        DataType::Int8 => Value::Int8(i64::from_be_bytes(bytes.try_into().map_err(|_| bad())?)),
        DataType::Float8 => Value::Float8(f64::from_be_bytes(bytes.try_into().map_err(|_| bad())?)),
        DataType::Timestamp => {
            Value::Timestamp(i64::from_be_bytes(bytes.try_into().map_err(|_| bad())?))
        }
        DataType::PgLsn => Value::PgLsn(u64::from_be_bytes(bytes.try_into().map_err(|_| bad())?)),
        DataType::Text | DataType::Varchar(_) | DataType::Char(_) => {
            Value::Text(utf8(bytes)?.to_string()).cast(ty)?
        }
    })
}

fn utf8(bytes: &[u8]) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|_| {
        Error::user(
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            "invalid byte sequence for encoding \"UTF8\"",
        )
    })
}

/// `pg_type.typlen` of a type (-1 for variable length).
fn type_size(ty: &DataType) -> i16 {
    match ty {
        DataType::Bool => 1,
        DataType::Int2 => 2,
        DataType::Int4 => 4,
        DataType::Int8 | DataType::Float8 | DataType::Timestamp | DataType::PgLsn => 8,
        DataType::Text | DataType::Varchar(_) | DataType::Char(_) => -1,
    }
}

/// The type modifier PostgreSQL reports: declared length + 4 for varchar(n)/char(n), else -1.
fn type_modifier(ty: &DataType) -> i32 {
    match ty {
        DataType::Varchar(Some(n)) | DataType::Char(n) => {
            i32::try_from(*n).map_or(-1, |n| n.saturating_add(4))
        }
        _ => -1,
    }
}

/// RowDescription for `columns`; `formats` gives each column's format code (empty = all text).
pub fn row_description(columns: &[ColumnDesc], formats: &[i16]) -> RowDescription {
    let fields = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            FieldDescription::new(
                c.name.clone(),
                0,
                0,
                c.ty.oid(),
                type_size(&c.ty),
                type_modifier(&c.ty),
                formats.get(i).copied().unwrap_or(FORMAT_CODE_TEXT),
            )
        })
        .collect();
    RowDescription::new(fields)
}

/// Encodes one row as a DataRow. `formats` gives each column's format code (empty = all
/// text).
///
/// # Errors
/// XX000 if a value cannot be represented in its column's binary format (a planner bug).
pub fn encode_row(row: &[Value], columns: &[ColumnDesc], formats: &[i16]) -> Result<DataRow> {
    let mut buf = BytesMut::with_capacity(row.len() * 12);
    for (i, value) in row.iter().enumerate() {
        if value.is_null() {
            buf.put_i32(-1);
            continue;
        }
        let len_at = buf.len();
        buf.put_i32(0);
        let binary = formats.get(i).copied().unwrap_or(FORMAT_CODE_TEXT) == FORMAT_CODE_BINARY;
        match (binary, columns.get(i)) {
            (true, Some(col)) => put_binary(&mut buf, value, &col.ty)?,
            _ => put_text(&mut buf, value),
        }
        let len = buf.len() - len_at - 4;
        let len = i32::try_from(len).map_err(|_| Error::internal("field value too large"))?;
        buf[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
    }
    let count = i16::try_from(row.len()).map_err(|_| Error::internal("too many columns"))?;
    Ok(DataRow::new(buf, count))
}

/// Appends the text form of a non-null value.
fn put_text(buf: &mut BytesMut, value: &Value) {
    match value {
        Value::Text(s) => buf.put_slice(s.as_bytes()),
        // Integer Display is exactly PostgreSQL's output; skip the String allocation.
        Value::Int2(v) => write!(buf, "{v}").expect("BytesMut grows"),
        Value::Int4(v) => write!(buf, "{v}").expect("BytesMut grows"),
        Value::Int8(v) => write!(buf, "{v}").expect("BytesMut grows"),
        other => {
            if let Some(text) = other.to_text() {
                buf.put_slice(text.as_bytes());
            }
        }
    }
}

/// Appends the binary form of a non-null value as type `ty`.
fn put_binary(buf: &mut BytesMut, value: &Value, ty: &DataType) -> Result<()> {
    let cast;
    let value = if value.data_type() == *ty || (ty.is_string() && matches!(value, Value::Text(_))) {
        value
    } else {
        cast = value.cast(ty)?;
        &cast
    };
    match (ty, value) {
        (DataType::Bool, Value::Bool(b)) => buf.put_u8(u8::from(*b)),
        (DataType::Int2, Value::Int2(v)) => buf.put_i16(*v),
        (DataType::Int4, Value::Int4(v)) => buf.put_i32(*v),
        (DataType::Int8, Value::Int8(v)) => buf.put_i64(*v),
        (DataType::Float8, Value::Float8(v)) => buf.put_f64(*v),
        (DataType::Timestamp, Value::Timestamp(v)) => buf.put_i64(*v),
        (DataType::PgLsn, Value::PgLsn(v)) => buf.put_u64(*v),
        (_, Value::Text(s)) if ty.is_string() => buf.put_slice(s.as_bytes()),
        _ => {
            return Err(Error::internal(format!(
                "cannot send {value:?} as binary {ty}"
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn fields(row: &DataRow) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::new();
        let mut b = &row.data[..];
        for _ in 0..row.field_count {
            let len = i32::from_be_bytes(b[..4].try_into().unwrap());
            b = &b[4..];
            if len < 0 {
                out.push(None);
            } else {
                out.push(Some(b[..len as usize].to_vec()));
                b = &b[len as usize..];
            }
        }
        assert!(b.is_empty());
        out
    }

    #[test]
    fn text_params() {
        assert_eq!(
            decode_param(&DataType::Int4, 0, Some(b"42"), 0).unwrap(),
            Value::Int4(42)
        );
        assert_eq!(
            decode_param(&DataType::Int8, 0, Some(b" -7 "), 0).unwrap(),
            Value::Int8(-7)
        );
        assert_eq!(
            decode_param(&DataType::Bool, 0, Some(b"t"), 0).unwrap(),
            Value::Bool(true)
        );
        assert_eq!(
            decode_param(&DataType::Float8, 0, Some(b"1.5"), 0).unwrap(),
            Value::Float8(1.5)
        );
        assert_eq!(
            decode_param(&DataType::Char(3), 0, Some(b"a"), 0).unwrap(),
            Value::Text("a  ".into())
        );
        assert!(decode_param(&DataType::Int4, 0, None, 0).unwrap().is_null());
        let ts = decode_param(&DataType::Timestamp, 0, Some(b"2000-01-01 00:00:01"), 0).unwrap();
        assert_eq!(ts, Value::Timestamp(1_000_000));
        let err = decode_param(&DataType::Int4, 0, Some(b"x"), 0).unwrap_err();
        assert_eq!(err.sqlstate, SqlState::INVALID_TEXT_REPRESENTATION);
        let err = decode_param(&DataType::Int2, 0, Some(b"70000"), 0).unwrap_err();
        assert_eq!(err.sqlstate, SqlState::NUMERIC_VALUE_OUT_OF_RANGE);
        let err = decode_param(&DataType::Text, 0, Some(&[0xff, 0xfe]), 0).unwrap_err();
        assert_eq!(err.sqlstate, SqlState::CHARACTER_NOT_IN_REPERTOIRE);
    }

    #[test]
    fn binary_params() {
        assert_eq!(
            decode_param(&DataType::Int2, 1, Some(&(-3i16).to_be_bytes()), 0).unwrap(),
            Value::Int2(-3)
        );
        assert_eq!(
            decode_param(&DataType::Int4, 1, Some(&77i32.to_be_bytes()), 0).unwrap(),
            Value::Int4(77)
        );
        assert_eq!(
            decode_param(&DataType::Int8, 1, Some(&(1i64 << 40).to_be_bytes()), 0).unwrap(),
            Value::Int8(1 << 40)
        );
        assert_eq!(
            decode_param(&DataType::Float8, 1, Some(&2.25f64.to_be_bytes()), 0).unwrap(),
            Value::Float8(2.25)
        );
        assert_eq!(
            decode_param(&DataType::Bool, 1, Some(&[1]), 0).unwrap(),
            Value::Bool(true)
        );
        assert_eq!(
            decode_param(&DataType::Varchar(None), 1, Some(b"hi"), 0).unwrap(),
            Value::Text("hi".into())
        );
        assert_eq!(
            decode_param(&DataType::Timestamp, 1, Some(&5i64.to_be_bytes()), 0).unwrap(),
            Value::Timestamp(5)
        );
        // An int8 where int4 is expected is malformed, as in PostgreSQL's int4recv.
        let err = decode_param(&DataType::Int4, 1, Some(&1i64.to_be_bytes()), 2).unwrap_err();
        assert_eq!(err.sqlstate, SqlState::INVALID_BINARY_REPRESENTATION);
        assert!(err.message.contains("parameter 3"));
        let err = decode_param(&DataType::Varchar(Some(1)), 1, Some(b"toolong"), 0).unwrap_err();
        assert_eq!(err.sqlstate, SqlState::STRING_DATA_RIGHT_TRUNCATION);
    }

    #[test]
    fn formats() {
        assert_eq!(resolve_formats(&[], 3, "parameter").unwrap(), vec![0, 0, 0]);
        assert_eq!(resolve_formats(&[1], 2, "parameter").unwrap(), vec![1, 1]);
        assert_eq!(
            resolve_formats(&[0, 1], 2, "parameter").unwrap(),
            vec![0, 1]
        );
        assert!(resolve_formats(&[0, 1], 3, "parameter").is_err());
        assert!(resolve_formats(&[2], 1, "parameter").is_err());
    }

    #[test]
    fn rows_text_and_binary() {
        let cols = Arc::new(vec![
            ColumnDesc {
                name: "a".into(),
                ty: DataType::Int4,
            },
            ColumnDesc {
                name: "b".into(),
                ty: DataType::Text,
            },
            ColumnDesc {
                name: "c".into(),
                ty: DataType::Float8,
            },
            ColumnDesc {
                name: "d".into(),
                ty: DataType::Bool,
            },
        ]);
        let row = vec![
            Value::Int4(-12),
            Value::Text("x".into()),
            Value::Null,
            Value::Bool(false),
        ];
        let text = encode_row(&row, &cols, &[]).unwrap();
        assert_eq!(
            fields(&text),
            vec![
                Some(b"-12".to_vec()),
                Some(b"x".to_vec()),
                None,
                Some(b"f".to_vec())
            ]
        );
        let bin = encode_row(&row, &cols, &[1, 1, 1, 1]).unwrap();
        assert_eq!(
            fields(&bin),
            vec![
                Some((-12i32).to_be_bytes().to_vec()),
                Some(b"x".to_vec()),
                None,
                Some(vec![0])
            ]
        );
        // A value of a narrower integer type is widened to the column type.
        let cols8 = vec![ColumnDesc {
            name: "n".into(),
            ty: DataType::Int8,
        }];
        let bin = encode_row(&[Value::Int4(5)], &cols8, &[1]).unwrap();
        assert_eq!(fields(&bin), vec![Some(5i64.to_be_bytes().to_vec())]);
    }

    #[test]
    fn row_description_types() {
        let cols = vec![
            ColumnDesc {
                name: "aid".into(),
                ty: DataType::Int4,
            },
            ColumnDesc {
                name: "filler".into(),
                ty: DataType::Char(84),
            },
        ];
        let rd = row_description(&cols, &[1]);
        assert_eq!(rd.fields[0].type_id, 23);
        assert_eq!(rd.fields[0].type_size, 4);
        assert_eq!(rd.fields[0].format_code, 1);
        assert_eq!(rd.fields[1].type_id, 1042);
        assert_eq!(rd.fields[1].type_modifier, 88);
        assert_eq!(rd.fields[1].format_code, 0);
    }
}
