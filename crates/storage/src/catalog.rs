//! The catalog: one heap relation (`RelFileId::CATALOG`) with a row per table, read and written
//! with the same MVCC rules as user tables, so DDL is transactional and survives restarts.
//!
//! Catalog row (encode_row with these types):
//! `name text, table_id int8, relfile int8, index_relfile int8 (0 = none), columns text,
//! primary_key text, fillfactor int4, options text, defaults text, checks text`.
//! `options` holds the storage parameters other than `fillfactor` that differ from their
//! defaults, in the form of PostgreSQL's `reloptions` but normalised (`autovacuum_enabled=false`,
//! where PostgreSQL keeps the value as written: `off`), comma
//! separated; a row written before it existed has seven columns and reads as all defaults.
//! `columns` is one line per column, `type<TAB>flag<TAB>name`, the flag `0` (nullable), `1`
//! (NOT NULL), or, for an identity column (NOT NULL), `a` (GENERATED ALWAYS) or `d` (BY
//! DEFAULT); `primary_key` is the
//! comma-separated column positions, empty if none. `defaults` holds the `DEFAULT` expression of
//! each column that has one, as `position:length:sql` records one after another (`length` is
//! the byte length of `sql`, which may hold any character); a row written before it existed
//! has eight columns and reads as no defaults. `checks` holds the CHECK constraints as
//! `length:name` `length:sql` pairs one after another, in name order; a row without it has none.
//!
//! A row with an eleventh column, `sequence text`, not empty, is a sequence's (tables and
//! sequences share the namespace, as in PostgreSQL's `pg_class`): `table_id` is its OID,
//! `relfile` its one-page file (crate::seq), `index_relfile` 0, the columns from `columns` to
//! `checks` empty (`fillfactor` 100), and `sequence` holds its options as
//! `type start increment min max cache cycle(0|1)` separated by single spaces, then, for a
//! sequence a column owns, ` length:table length:column`. Rows without the column are tables.
//!
//! [`CatalogCache`] holds the committed catalog in memory; it is rebuilt after every commit that
//! changed the catalog. A transaction's own uncommitted DDL lives in its overlay (crate::txn).

use crate::heap;
use crate::xact::Snapshot;
use crate::Storage;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use walnut_common::value::{decode_row, encode_row};
use walnut_common::{
    BlockNumber, CheckDef, ColumnDef, DataType, Error, RelFileId, Result, SequenceDef, TableDef,
    Tid, Value, Xid,
};

/// A table as the engine knows it.
#[derive(Clone, Debug)]
pub struct TableInfo {
    /// Definition.
    pub def: Arc<TableDef>,
    /// Stable id (the first relation file it had).
    pub table_id: u64,
    /// Current heap relation file.
    pub relfile: RelFileId,
    /// Primary-key index relation file.
    pub index: Option<RelFileId>,
    /// TID of the catalog row version describing it.
    pub catalog_tid: Tid,
}

impl TableInfo {
    /// Name of the primary-key index (`<table>_pkey`).
    pub fn index_name(&self) -> String {
        format!("{}_pkey", self.def.name)
    }
}

/// A sequence as the engine knows it.
#[derive(Clone, Debug)]
pub struct SeqInfo {
    /// Definition.
    pub def: Arc<SequenceDef>,
    /// Stable id (`pg_class.oid`: the first relation file it had).
    pub oid: u64,
    /// Its one-page relation file.
    pub relfile: RelFileId,
    /// TID of the catalog row version describing it.
    pub catalog_tid: Tid,
}

/// A catalog row: a table's or a sequence's.
#[derive(Clone, Debug)]
pub enum Entry {
    /// A table.
    Table(TableInfo),
    /// A sequence.
    Sequence(SeqInfo),
}

fn catalog_types() -> Vec<DataType> {
    vec![
        DataType::Text,
        DataType::Int8,
        DataType::Int8,
        DataType::Int8,
        DataType::Text,
        DataType::Text,
        DataType::Int4,
        DataType::Text,
        DataType::Text,
        DataType::Text,
        DataType::Text,
    ]
}

/// Encodes a sequence's catalog row.
pub fn encode_sequence(info: &SeqInfo) -> Vec<u8> {
    let d = &info.def;
    let mut seq = format!(
        "{} {} {} {} {} {} {}",
        d.ty.to_catalog(),
        d.start,
        d.increment,
        d.min,
        d.max,
        d.cache,
        d.cycle as u8
    );
    if let Some((t, c)) = &d.owned_by {
        seq.push_str(&format!(" {}:{t}{}:{c}", t.len(), c.len()));
    }
    let empty = || Value::Text(String::new());
    let row = vec![
        Value::Text(d.name.clone()),
        Value::Int8(info.oid as i64),
        Value::Int8(info.relfile.0 as i64),
        Value::Int8(0),
        empty(),
        empty(),
        Value::Int4(100),
        empty(),
        empty(),
        empty(),
        Value::Text(seq),
    ];
    let mut out = Vec::new();
    encode_row(&catalog_types(), &row, &mut out);
    out
}

/// Parses the `sequence` column of sequence `name`; None if malformed.
fn decode_sequence(name: String, s: &str) -> Option<SequenceDef> {
    let mut f = s.splitn(8, ' ');
    let ty = DataType::from_catalog(f.next()?)?;
    let mut num = || f.next()?.parse::<i64>().ok();
    let (start, increment, min, max, cache) = (num()?, num()?, num()?, num()?, num()?);
    let cycle = match f.next()? {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    let owned_by = match f.next() {
        None => None,
        Some(o) => {
            let mut pieces = decode_checks(o)?.into_iter();
            let p = pieces.next()?;
            if pieces.next().is_some() {
                return None;
            }
            Some((p.name, p.expr))
        }
    };
    let ok = matches!(ty, DataType::Int2 | DataType::Int4 | DataType::Int8)
        && increment != 0
        && min < max
        && (min..=max).contains(&start)
        && cache >= 1;
    ok.then_some(SequenceDef {
        name,
        ty,
        start,
        increment,
        min,
        max,
        cache,
        cycle,
        owned_by,
    })
}

/// A table's storage parameters other than `fillfactor` that differ from their defaults, in the
/// form of PostgreSQL's `pg_class.reloptions` (`name=value`, the value normalised: `false`
/// where PostgreSQL shows what was written, say `off`).
pub fn reloptions(def: &TableDef) -> Vec<String> {
    let mut o = Vec::new();
    if !def.autovacuum_enabled {
        o.push("autovacuum_enabled=false".to_string());
    }
    o
}

/// Encodes a table's catalog row.
pub fn encode(info: &TableInfo) -> Vec<u8> {
    let cols: Vec<String> = info
        .def
        .columns
        .iter()
        .map(|c| {
            let flag = match (c.identity, c.not_null) {
                (Some(walnut_common::Identity::Always), _) => "a",
                (Some(walnut_common::Identity::ByDefault), _) => "d",
                (None, true) => "1",
                (None, false) => "0",
            };
            format!("{}\t{flag}\t{}", c.ty.to_catalog(), c.name)
        })
        .collect();
    let pk = info
        .def
        .primary_key
        .as_ref()
        .map(|k| {
            k.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let row = vec![
        Value::Text(info.def.name.clone()),
        Value::Int8(info.table_id as i64),
        Value::Int8(info.relfile.0 as i64),
        Value::Int8(info.index.map_or(0, |r| r.0 as i64)),
        Value::Text(cols.join("\n")),
        Value::Text(pk),
        Value::Int4(info.def.fillfactor as i32),
        Value::Text(reloptions(&info.def).join(",")),
        Value::Text(encode_defaults(&info.def.columns)),
        Value::Text(encode_checks(&info.def.checks)),
    ];
    let mut out = Vec::new();
    encode_row(&catalog_types(), &row, &mut out);
    out
}

/// The `defaults` column: `position:length:sql` for each column with a default.
fn encode_defaults(columns: &[ColumnDef]) -> String {
    let mut out = String::new();
    for (i, c) in columns.iter().enumerate() {
        if let Some(d) = &c.default {
            out.push_str(&format!("{i}:{}:{d}", d.len()));
        }
    }
    out
}

/// The `checks` column: `length:name` `length:sql` for each CHECK constraint.
fn encode_checks(checks: &[CheckDef]) -> String {
    let mut out = String::new();
    for c in checks {
        for s in [&c.name, &c.expr] {
            out.push_str(&format!("{}:{s}", s.len()));
        }
    }
    out
}

/// Parses the `checks` column; None if it is malformed.
fn decode_checks(mut s: &str) -> Option<Vec<CheckDef>> {
    /// The next `length:text` of `s` (text not empty), and what follows it.
    fn next(s: &str) -> Option<(String, &str)> {
        let (len, rest) = s.split_once(':')?;
        let len: usize = len.parse().ok()?;
        let v = rest.get(..len)?;
        (!v.is_empty()).then(|| (v.to_string(), &rest[len..]))
    }
    let mut out = Vec::new();
    while !s.is_empty() {
        let (name, rest) = next(s)?;
        let (expr, rest) = next(rest)?;
        s = rest;
        out.push(CheckDef { name, expr });
    }
    Some(out)
}

/// Parses the `defaults` column into `columns`; None if it is malformed.
fn decode_defaults(mut s: &str, columns: &mut [ColumnDef]) -> Option<()> {
    while !s.is_empty() {
        let (pos, rest) = s.split_once(':')?;
        let (len, rest) = rest.split_once(':')?;
        let len: usize = len.parse().ok()?;
        let sql = rest.get(..len)?;
        let col = columns.get_mut(pos.parse::<usize>().ok()?)?;
        if len == 0 || col.default.is_some() {
            return None;
        }
        col.default = Some(sql.to_string());
        s = &rest[len..];
    }
    Some(())
}

/// Decodes a table's catalog row.
///
/// # Errors
/// Corruption if malformed or a sequence's.
pub fn decode(tid: Tid, bytes: &[u8]) -> Result<TableInfo> {
    match decode_entry(tid, bytes)? {
        Entry::Table(t) => Ok(t),
        Entry::Sequence(_) => Err(Error::corruption("catalog row is a sequence's")),
    }
}

/// Decodes a catalog row, a table's or a sequence's.
///
/// # Errors
/// Corruption if malformed.
pub fn decode_entry(tid: Tid, bytes: &[u8]) -> Result<Entry> {
    let bad = || Error::corruption("catalog row is malformed");
    let v = decode_row(&catalog_types(), bytes)?;
    if let Value::Text(seq) = &v[10] {
        if !seq.is_empty() {
            let Value::Text(name) = &v[0] else {
                return Err(bad());
            };
            let def = decode_sequence(name.clone(), seq).ok_or_else(bad)?;
            let (Some(oid), Some(relfile)) = (v[1].as_i64(), v[2].as_i64()) else {
                return Err(bad());
            };
            return Ok(Entry::Sequence(SeqInfo {
                def: Arc::new(def),
                oid: oid as u64,
                relfile: RelFileId(relfile as u32),
                catalog_tid: tid,
            }));
        }
    }
    let text = |i: usize| match &v[i] {
        Value::Text(s) => Ok(s.clone()),
        _ => Err(bad()),
    };
    let int = |i: usize| v[i].as_i64().ok_or_else(bad);
    let mut columns = Vec::new();
    for line in text(4)?.split('\n').filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, '\t');
        let ty = DataType::from_catalog(parts.next().ok_or_else(bad)?).ok_or_else(bad)?;
        let (not_null, identity) = match parts.next().ok_or_else(bad)? {
            "0" => (false, None),
            "1" => (true, None),
            "a" => (true, Some(walnut_common::Identity::Always)),
            "d" => (true, Some(walnut_common::Identity::ByDefault)),
            _ => return Err(bad()),
        };
        let name = parts.next().ok_or_else(bad)?.to_string();
        columns.push(ColumnDef {
            name,
            ty,
            not_null,
            default: None,
            identity,
        });
    }
    let pk_text = text(5)?;
    let primary_key = if pk_text.is_empty() {
        None
    } else {
        Some(
            pk_text
                .split(',')
                .map(|s| s.parse::<usize>().map_err(|_| bad()))
                .collect::<Result<Vec<_>>>()?,
        )
    };
    if primary_key
        .as_ref()
        .is_some_and(|k| k.iter().any(|&i| i >= columns.len()))
    {
        return Err(bad());
    }
    if let Value::Text(d) = &v[8] {
        decode_defaults(d, &mut columns).ok_or_else(bad)?;
    }
    let checks = match &v[9] {
        Value::Text(c) => decode_checks(c).ok_or_else(bad)?,
        _ => Vec::new(),
    };
    let index = int(3)?;
    let mut autovacuum_enabled = true;
    if let Value::Text(options) = &v[7] {
        for o in options.split(',').filter(|o| !o.is_empty()) {
            match o {
                "autovacuum_enabled=false" => autovacuum_enabled = false,
                "autovacuum_enabled=true" => autovacuum_enabled = true,
                _ => return Err(bad()),
            }
        }
    }
    Ok(Entry::Table(TableInfo {
        def: Arc::new(TableDef {
            name: text(0)?,
            columns,
            primary_key,
            fillfactor: int(6)? as u8,
            autovacuum_enabled,
            checks,
        }),
        table_id: int(1)? as u64,
        relfile: RelFileId(int(2)? as u32),
        index: (index != 0).then_some(RelFileId(index as u32)),
        catalog_tid: tid,
    }))
}

/// Scans the catalog with `snap`.
///
/// # Errors
/// Corruption and I/O errors.
pub fn scan(st: &Storage, snap: &Snapshot) -> Result<Vec<Entry>> {
    let rel = st.smgr.open(RelFileId::CATALOG)?;
    let n = rel.nblocks.load(std::sync::atomic::Ordering::Acquire);
    let mut rows = Vec::new();
    for b in 0..n {
        heap::scan_block(st, &rel, BlockNumber(b), snap, &mut rows)?;
    }
    rows.iter()
        .map(|(tid, bytes)| decode_entry(*tid, bytes))
        .collect()
}

/// The committed catalog, by table name.
#[derive(Default)]
pub struct CatalogCache {
    tables: RwLock<HashMap<String, Arc<TableInfo>>>,
    /// The committed sequences, by name.
    sequences: RwLock<HashMap<String, Arc<SeqInfo>>>,
    /// Serializes reloads, so a reload that took an older snapshot can never overwrite one
    /// that took a newer snapshot.
    reload_lock: parking_lot::Mutex<()>,
    /// A reload after a commit failed: the cache may miss that commit's changes until
    /// [`CatalogCache::refresh_if_stale`] reloads it.
    stale: std::sync::atomic::AtomicBool,
}

impl CatalogCache {
    /// The committed definition of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<TableInfo>> {
        self.tables.read().get(name).cloned()
    }

    /// The committed sequence `name`.
    pub fn get_sequence(&self, name: &str) -> Option<Arc<SeqInfo>> {
        self.sequences.read().get(name).cloned()
    }

    /// All committed sequences.
    pub fn all_sequences(&self) -> Vec<Arc<SeqInfo>> {
        self.sequences.read().values().cloned().collect()
    }

    /// Rebuilds from the catalog heap with a fresh snapshot, registered while it reads (so
    /// that freezing, which may make a commit visible to every snapshot, waits for it:
    /// `XactManager::horizon`).
    ///
    /// # Errors
    /// Corruption and I/O errors.
    pub fn reload(&self, st: &Storage) -> Result<()> {
        let _serial = self.reload_lock.lock();
        let slot = st
            .xact
            .register(Arc::new(std::sync::atomic::AtomicBool::new(false)));
        let snap = st.xact.snapshot_in(&slot, Xid::INVALID);
        let scanned = scan(st, &snap);
        st.xact.unregister(&slot);
        let mut map: HashMap<String, Arc<TableInfo>> = HashMap::new();
        let mut seqs: HashMap<String, Arc<SeqInfo>> = HashMap::new();
        for e in scanned? {
            match e {
                Entry::Table(t) => {
                    map.insert(t.def.name.clone(), Arc::new(t));
                }
                Entry::Sequence(s) => {
                    seqs.insert(s.def.name.clone(), Arc::new(s));
                }
            }
        }
        st.table_stats
            .set_heaps(map.values().map(|t| (t.relfile, t.table_id)));
        // Both at once: a reader never sees a new table with the old sequences.
        let (mut tables, mut sequences) = (self.tables.write(), self.sequences.write());
        *tables = map;
        *sequences = seqs;
        self.stale
            .store(false, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Marks the cache stale (a reload after a commit failed).
    pub fn invalidate(&self) {
        self.stale.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Reloads the cache if a reload after a commit failed (one atomic load otherwise). Every
    /// transaction calls it when it starts.
    ///
    /// # Errors
    /// As [`CatalogCache::reload`]; the cache stays stale.
    pub fn refresh_if_stale(&self, st: &Storage) -> Result<()> {
        if self.stale.load(std::sync::atomic::Ordering::Acquire) {
            self.reload(st)?;
        }
        Ok(())
    }

    /// All committed tables.
    pub fn all(&self) -> Vec<Arc<TableInfo>> {
        self.tables.read().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(autovacuum_enabled: bool) -> TableInfo {
        TableInfo {
            def: Arc::new(TableDef {
                name: "t".into(),
                columns: vec![ColumnDef {
                    name: "a".into(),
                    ty: DataType::Int4,
                    not_null: true,
                    default: None,
                    identity: None,
                }],
                primary_key: Some(vec![0]),
                fillfactor: 90,
                autovacuum_enabled,
                checks: Vec::new(),
            }),
            table_id: 16384,
            relfile: RelFileId(16390),
            index: Some(RelFileId(16385)),
            catalog_tid: Tid::INVALID,
        }
    }

    #[test]
    fn options_round_trip_and_a_row_from_before_them_reads_as_defaults() {
        for on in [true, false] {
            let row = encode(&info(on));
            let back = decode(Tid::INVALID, &row).unwrap();
            assert_eq!(back.def.autovacuum_enabled, on);
            assert_eq!(back.def.fillfactor, 90);
            assert_eq!(reloptions(&back.def).is_empty(), on);
        }
        // Seven columns, as written before `options` existed.
        let mut types = catalog_types();
        types.truncate(7);
        let old = vec![
            Value::Text("t".into()),
            Value::Int8(16384),
            Value::Int8(16390),
            Value::Int8(0),
            Value::Text("int4\t1\ta".into()),
            Value::Text("0".into()),
            Value::Int4(100),
        ];
        let mut bytes = Vec::new();
        encode_row(&types, &old, &mut bytes);
        let back = decode(Tid::INVALID, &bytes).unwrap();
        assert!(back.def.autovacuum_enabled);
        // An option this version does not know is corruption, not silently dropped.
        let mut odd = old.clone();
        odd.push(Value::Text("autovacuum_enabled=maybe".into()));
        let mut bytes = Vec::new();
        encode_row(&catalog_types()[..8], &odd, &mut bytes);
        assert!(decode(Tid::INVALID, &bytes).is_err());
    }

    #[test]
    fn defaults_round_trip_whatever_their_text_holds_and_a_bad_record_is_corruption() {
        let mut t = info(true);
        let mut def = (*t.def).clone();
        def.columns.push(ColumnDef {
            name: "b".into(),
            ty: DataType::Text,
            not_null: false,
            default: Some("'a:1:\nb' || 'é'".into()),
            identity: None,
        });
        def.columns.push(ColumnDef {
            name: "c".into(),
            ty: DataType::Int4,
            not_null: true,
            default: Some("nextval('t_c_seq'::regclass)".into()),
            identity: Some(walnut_common::Identity::ByDefault),
        });
        def.columns.push(ColumnDef {
            name: "d".into(),
            ty: DataType::Int8,
            not_null: true,
            default: Some("nextval('t_d_seq'::regclass)".into()),
            identity: Some(walnut_common::Identity::Always),
        });
        def.columns[0].default = Some("(1 + 2)".into());
        def.checks = vec![
            CheckDef {
                name: "t_a_check".into(),
                expr: "a > 0".into(),
            },
            CheckDef {
                name: "odd: name".into(),
                expr: "b <> '1:2:x'".into(),
            },
        ];
        t.def = Arc::new(def.clone());
        let back = decode(Tid::INVALID, &encode(&t)).unwrap();
        assert_eq!(*back.def, def);
        // Eight columns, as written before `defaults` existed: no defaults, no checks.
        let row = decode_row(&catalog_types(), &encode(&info(true))).unwrap();
        let mut bytes = Vec::new();
        encode_row(&catalog_types()[..8], &row[..8], &mut bytes);
        let old = decode(Tid::INVALID, &bytes).unwrap();
        assert_eq!(old.def.columns[0].default, None);
        assert!(old.def.checks.is_empty());
        for bad in ["3:abc", "3:abc0:", "1:a1:", "9:x"] {
            let mut row = row.clone();
            row[9] = Value::Text(bad.into());
            let mut bytes = Vec::new();
            encode_row(&catalog_types(), &row, &mut bytes);
            assert!(decode(Tid::INVALID, &bytes).is_err(), "{bad}");
        }
        for bad in ["0:9:1", "1:1:1", "x:1:1", "0:1", "0:0:", "0:1:10:1:2"] {
            let mut row = row.clone();
            row[8] = Value::Text(bad.into());
            let mut bytes = Vec::new();
            encode_row(&catalog_types(), &row, &mut bytes);
            assert!(decode(Tid::INVALID, &bytes).is_err(), "{bad}");
        }
    }
}
