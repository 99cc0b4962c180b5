//! Sequences: a relation of one page holding a sequence's state, changed in place outside
//! any transaction and WAL-logged ahead of use (PostgreSQL's `src/backend/commands/sequence.c`
//! and `sequence_xlog.c`). Storage DESIGN.md, "Sequences", has the protocol and its crash
//! windows.
//!
//! The page (kind [`PageKind::Sequence`], little-endian):
//! ```text
//! offset  size  field
//!  0      24    page header: kind 4, lower 28, upper 8160, special 8184
//! 24      4     line pointer: offset 8136, length 48
//! 8136    8     last_value  i64: the last value handed out (or the first to hand out, if
//!                           not is_called)
//! 8144    8     log_cnt     i64: values handed out before the next must be WAL-logged
//! 8152    1     is_called   0 or 1
//! 8153    1     log_cycle   0 or 1  } the options log_cnt was counted under (all zero:
//! 8154    6     zero                }  none; log_cnt counts nothing): a fetch under other
//! 8160    8     log_increment i64   }  options (an ALTER SEQUENCE since) takes log_cnt as
//! 8168    8     log_min     i64     }  0 and logs, as the values that are logged ahead
//! 8176    8     log_max     i64     }  depend on the increment, bounds and CYCLE
//! 8184    4     magic       0x1717 (PostgreSQL's SEQ_MAGIC)
//! 8188    2     version     2
//! 8190    2     zero
//! ```

use crate::bufpool::{Pinned, ReadMode};
use crate::page::{self, PageBuf, PageKind};
use crate::Storage;
use std::sync::atomic::Ordering;
use walnut_common::{
    BlockNumber, Error, Lsn, RelFileId, Result, SequenceDef, SqlState, Xid, BLCKSZ,
};
use walnut_wal::{Record, RmgrId};

/// Resource manager of sequence records.
pub const RM_SEQ: RmgrId = RmgrId(6);
/// The sequence's new state, the whole page (`will_init`): block 0's data is
/// `last_value i64, log_cnt i64, is_called u8` (17 bytes). PostgreSQL's `XLOG_SEQ_LOG`.
pub const SEQ_LOG: u8 = 0x00;
/// Values `nextval` logs ahead of what it hands out: a crash skips at most this many (per
/// session cache) and never hands one out twice (PostgreSQL's `SEQ_LOG_VALS`).
pub const SEQ_LOG_VALS: i64 = 32;

const MAGIC: u32 = 0x1717;
const VERSION: u16 = 2;
const SPECIAL_SIZE: usize = 8;
const ITEM_SIZE: usize = 48;
/// Where in the item the options `log_cnt` was counted under are ([`write_state`]).
const LOG_CYCLE_AT: usize = 17;
const LOG_PARAMS_AT: usize = 24;
const ITEM_AT: usize = BLCKSZ - SPECIAL_SIZE - ITEM_SIZE;

/// A sequence's on-page state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqState {
    /// The last value handed out, or the next one if not `is_called`.
    pub last_value: i64,
    /// How many more values may be handed out before the next must be logged.
    pub log_cnt: i64,
    /// `nextval` (or `setval(.., true)`) has returned `last_value`.
    pub is_called: bool,
}

impl SeqState {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(17);
        v.extend_from_slice(&self.last_value.to_le_bytes());
        v.extend_from_slice(&self.log_cnt.to_le_bytes());
        v.push(self.is_called as u8);
        v
    }

    fn decode(d: &[u8]) -> Option<SeqState> {
        Some(SeqState {
            last_value: i64::from_le_bytes(d.get(0..8)?.try_into().ok()?),
            log_cnt: i64::from_le_bytes(d.get(8..16)?.try_into().ok()?),
            is_called: match d.get(16)? {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    }
}

/// Initializes `p` as an empty sequence page (state all zero, not called).
pub fn init_page(p: &mut PageBuf) {
    page::init(p, PageKind::Sequence, SPECIAL_SIZE);
    let at = page::append_item(p, &[0u8; ITEM_SIZE]);
    assert_eq!(at, 0, "the state is the page's first item");
    p[BLCKSZ - 8..BLCKSZ - 4].copy_from_slice(&MAGIC.to_le_bytes());
    p[BLCKSZ - 4..BLCKSZ - 2].copy_from_slice(&VERSION.to_le_bytes());
    assert_eq!(page::line_pointer(p, 0), (ITEM_AT, ITEM_SIZE));
}

/// Writes state `s` into sequence page `p`, with the options its `log_cnt` was counted under
/// (`None`: none, for a `log_cnt` of 0).
fn write_state(p: &mut PageBuf, s: &SeqState, counted_under: Option<&SequenceDef>) {
    let item = &mut p[ITEM_AT..ITEM_AT + ITEM_SIZE];
    item.fill(0);
    item[..17].copy_from_slice(&s.encode());
    if let Some(d) = counted_under {
        item[LOG_CYCLE_AT] = d.cycle as u8;
        for (k, v) in [d.increment, d.min, d.max].into_iter().enumerate() {
            let at = LOG_PARAMS_AT + 8 * k;
            item[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Whether the `log_cnt` on page `p` was counted under `def`'s increment, bounds and CYCLE:
/// the values it lets `nextval` hand out unlogged are then those the last record covers. An
/// ALTER SEQUENCE changes them (without touching the page), and then `log_cnt` counts
/// nothing.
fn counted_under(p: &PageBuf, def: &SequenceDef) -> bool {
    let item = &p[ITEM_AT..ITEM_AT + ITEM_SIZE];
    let at = |k: usize| {
        let a = LOG_PARAMS_AT + 8 * k;
        i64::from_le_bytes(item[a..a + 8].try_into().expect("8 bytes"))
    };
    item[LOG_CYCLE_AT] == def.cycle as u8
        && at(0) == def.increment
        && at(1) == def.min
        && at(2) == def.max
}

/// The state on sequence page `p` of `rel`.
///
/// # Errors
/// Corruption (XX001) if `p` is not a sequence page of this version.
pub fn read_state(p: &PageBuf, rel: RelFileId) -> Result<SeqState> {
    let bad = || {
        Error::corruption(format!(
            "bad magic number in sequence in relation file {}",
            rel.0
        ))
    };
    if page::kind(p) != Some(PageKind::Sequence)
        || p[BLCKSZ - 8..BLCKSZ - 4] != MAGIC.to_le_bytes()
        || p[BLCKSZ - 4..BLCKSZ - 2] != VERSION.to_le_bytes()
        || page::slot_count(p) != 1
        || page::line_pointer(p, 0) != (ITEM_AT, ITEM_SIZE)
    {
        return Err(bad());
    }
    SeqState::decode(&p[ITEM_AT..ITEM_AT + 17]).ok_or_else(bad)
}

/// Redo of a [`SEQ_LOG`] block (the page was initialized: `will_init`).
///
/// # Errors
/// Corruption if the data is not a state.
pub fn redo_block(info: u8, data: &[u8], p: &mut PageBuf) -> Result<()> {
    let state = match (info, SeqState::decode(data)) {
        (SEQ_LOG, Some(s)) if data.len() == 17 => s,
        _ => return Err(Error::corruption("sequence record is malformed")),
    };
    write_state(p, &state, None);
    Ok(())
}

/// Logs `state` as the whole page of sequence `rel` (pinned in `pin`, held exclusively latched
/// in `p`) through [`Storage::log_change`], which marks it dirty first; sets the page's LSN and
/// returns the record's end.
fn log_state(
    st: &Storage,
    rel: RelFileId,
    xid: Xid,
    (pin, p): (&Pinned<'_>, &mut PageBuf),
    s: &SeqState,
) -> Result<Lsn> {
    let data = s.encode();
    let end = st.log_change(&[pin], &mut |_redo| Record {
        rmgr: RM_SEQ,
        info: SEQ_LOG,
        xid,
        flags: 0,
        blocks: vec![walnut_wal::BlockRef {
            rel,
            block: BlockNumber(0),
            will_init: true,
            image_lz4: false,
            image: None,
            data: data.clone(),
        }],
        main_data: vec![],
    })?;
    page::set_lsn(p, end);
    Ok(end)
}

fn read_only_error(what: &str) -> Error {
    Error::user(
        SqlState::READ_ONLY_SQL_TRANSACTION,
        format!("cannot execute {what} in a read-only transaction"),
    )
}

/// Creates the page of new sequence `rel` (created by [`Storage::create_relation`] in
/// transaction `xid`): block 0 with `start`, not called, logged.
///
/// # Errors
/// The WAL insert's (53100); I/O errors extending the file.
pub fn create(st: &Storage, rel: RelFileId, xid: Xid, def: &SequenceDef) -> Result<()> {
    st.wal().check_space(4096)?;
    let r = st.smgr.open(rel)?;
    let _ext = r.extend_lock.lock();
    let pin = st.pool.pin(&r, BlockNumber(0), ReadMode::Zero)?;
    let block = st.smgr.extend(&r)?;
    assert_eq!(block, BlockNumber(0), "a new sequence's first block");
    let mut p = pin.write();
    init_page(&mut p);
    let s = SeqState {
        last_value: def.start,
        log_cnt: 0,
        is_called: false,
    };
    write_state(&mut p, &s, None);
    log_state(st, rel, xid, (&pin, &mut p), &s)?;
    Ok(())
}

/// What [`fetch`] took: `first`, `first + increment`, ... `last` (no wrap between them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The value to return now.
    pub first: i64,
    /// The last value the session may hand out without coming back (`cache` values in all,
    /// fewer at a bound).
    pub last: i64,
    /// End of the WAL record this call logged, if it logged one.
    pub logged: Option<Lsn>,
    /// End of the record that covers these values (the page's LSN after the call: this call's
    /// record, or the earlier one whose values logged ahead they are). A transaction that hands
    /// out any of them must flush the WAL to it before its commit is acknowledged, or a crash
    /// could lose the record and hand them out again.
    pub covered_by: Lsn,
}

/// `nextval` when the session has no cached values left (PostgreSQL's `nextval_internal`):
/// takes up to `def.cache` values from the page of sequence `rel`, logging
/// [`SEQ_LOG_VALS`] more ahead when the logged values run out, the sequence was never called,
/// or this is the page's first change since the redo point.
///
/// # Errors
/// 25006 on a hot standby; 2200H at MAXVALUE/MINVALUE without CYCLE (nothing changed);
/// 53100 if the WAL has no room; corruption (XX001) if the page is not a sequence's.
pub fn fetch(st: &Storage, rel: RelFileId, def: &SequenceDef) -> Result<Fetched> {
    if st.in_recovery() {
        return Err(read_only_error("nextval()"));
    }
    st.wal().check_space(4096)?;
    let r = st.smgr.open(rel)?;
    let pin = st.pool.pin(&r, BlockNumber(0), ReadMode::Normal)?;
    let mut p = pin.write();
    let cur = read_state(&p, rel)?;
    let (inc, min, max) = (def.increment, def.min, def.max);
    let cache = def.cache.max(1);
    let mut fetch = cache;
    // Counted under other options (an ALTER SEQUENCE since), log_cnt covers nothing.
    let mut log = if counted_under(&p, def) {
        cur.log_cnt
    } else {
        0
    };
    let mut next = cur.last_value;
    let mut result = next;
    let mut last = next;
    let mut rescnt = 0i64;
    if !cur.is_called {
        rescnt += 1;
        fetch -= 1;
    }
    // Dirty before the redo point is read: a checkpoint that moves it after this read finds
    // the frame dirty and its write-out waits for this latch, so an advance not logged
    // because of an older redo point is never lost (DESIGN.md, "Sequences", step 4).
    pin.mark_dirty();
    std::sync::atomic::fence(Ordering::SeqCst);
    let redo = st.wal().redo_lsn();
    let logit = log < fetch || !cur.is_called || page::lsn(&p) <= redo;
    if logit {
        // Saturating: a CACHE near i64::MAX must not wrap (PostgreSQL's int64 would).
        fetch = fetch.saturating_add(SEQ_LOG_VALS);
        log = fetch;
    }
    while fetch > 0 {
        let past = if inc > 0 {
            (max >= 0 && next > max - inc) || (max < 0 && next + inc > max)
        } else {
            (min < 0 && next < min - inc) || (min >= 0 && next + inc < min)
        };
        if past {
            if rescnt > 0 {
                break;
            }
            if !def.cycle {
                let (which, bound) = if inc > 0 {
                    ("maximum", max)
                } else {
                    ("minimum", min)
                };
                return Err(Error::user(
                    SqlState::SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                    format!(
                        "nextval: reached {which} value of sequence \"{}\" ({bound})",
                        def.name
                    ),
                ));
            }
            next = if inc > 0 { min } else { max };
        } else {
            next += inc;
        }
        fetch -= 1;
        if rescnt < cache {
            log -= 1;
            rescnt += 1;
            last = next;
            if rescnt == 1 {
                result = next;
            }
        }
    }
    log -= fetch;
    assert!(log >= 0, "sequence log count below zero");
    let logged = if logit {
        let ahead = SeqState {
            last_value: next,
            log_cnt: 0,
            is_called: true,
        };
        Some(log_state(st, rel, Xid::INVALID, (&pin, &mut p), &ahead)?)
    } else {
        None
    };
    write_state(
        &mut p,
        &SeqState {
            last_value: last,
            log_cnt: log,
            is_called: true,
        },
        Some(def),
    );
    Ok(Fetched {
        first: result,
        last,
        logged,
        covered_by: page::lsn(&p),
    })
}

/// `setval`: sets the page of sequence `rel` to `value` (`is_called` as given), logged.
/// Returns the record's end, which the transaction's commit must flush.
///
/// # Errors
/// 25006 on a hot standby; 22003 if `value` is outside MINVALUE..MAXVALUE; 53100; XX001.
pub fn set(
    st: &Storage,
    rel: RelFileId,
    def: &SequenceDef,
    value: i64,
    is_called: bool,
) -> Result<Lsn> {
    if st.in_recovery() {
        return Err(read_only_error("setval()"));
    }
    if value < def.min || value > def.max {
        return Err(Error::user(
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "setval: value {value} is out of bounds for sequence \"{}\" ({}..{})",
                def.name, def.min, def.max
            ),
        ));
    }
    st.wal().check_space(4096)?;
    let r = st.smgr.open(rel)?;
    let pin = st.pool.pin(&r, BlockNumber(0), ReadMode::Normal)?;
    let mut p = pin.write();
    read_state(&p, rel)?;
    let s = SeqState {
        last_value: value,
        log_cnt: 0,
        is_called,
    };
    let end = log_state(st, rel, Xid::INVALID, (&pin, &mut p), &s)?;
    write_state(&mut p, &s, None);
    Ok(end)
}

/// The state of sequence `rel` (what `SELECT * FROM s` shows).
///
/// # Errors
/// XX001 if the page is not a sequence's; I/O errors.
pub fn read(st: &Storage, rel: RelFileId) -> Result<SeqState> {
    let r = st.smgr.open(rel)?;
    let pin = st.pool.pin(&r, BlockNumber(0), ReadMode::Normal)?;
    let p = pin.read();
    read_state(&p, rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_holds_its_state_and_a_bad_one_is_corruption() {
        let mut p = page::zeroed();
        init_page(&mut p);
        page::check_header(&p).unwrap();
        let s = SeqState {
            last_value: i64::MIN,
            log_cnt: 32,
            is_called: true,
        };
        write_state(&mut p, &s, None);
        assert_eq!(read_state(&p, RelFileId(1)).unwrap(), s);
        // The options log_cnt was counted under: none, then exactly these.
        let def = SequenceDef::with_defaults("s");
        assert!(!counted_under(&p, &def));
        write_state(&mut p, &s, Some(&def));
        assert_eq!(read_state(&p, RelFileId(1)).unwrap(), s);
        assert!(counted_under(&p, &def));
        for other in [
            SequenceDef {
                increment: 2,
                ..def.clone()
            },
            SequenceDef {
                cycle: true,
                ..def.clone()
            },
            SequenceDef {
                min: 0,
                ..def.clone()
            },
            SequenceDef {
                max: 100,
                ..def.clone()
            },
        ] {
            assert!(!counted_under(&p, &other), "{other:?}");
        }
        assert!(counted_under(
            &p,
            &SequenceDef {
                cache: 20,
                start: 7,
                ..def.clone()
            }
        ));
        let mut q = page::zeroed();
        init_page(&mut q);
        redo_block(SEQ_LOG, &s.encode(), &mut q).unwrap();
        assert_eq!(read_state(&q, RelFileId(1)).unwrap(), s);
        assert!(redo_block(SEQ_LOG, &s.encode()[..16], &mut p).is_err());
        assert!(redo_block(0x10, &s.encode(), &mut p).is_err());
        let mut bad = p.clone();
        bad[BLCKSZ - 8] = 0;
        assert!(read_state(&bad, RelFileId(1)).is_err());
        let mut bad = p.clone();
        bad[ITEM_AT + 16] = 2;
        assert!(read_state(&bad, RelFileId(1)).is_err());
        let mut heap = page::zeroed();
        crate::heap::init_page(&mut heap);
        assert!(read_state(&heap, RelFileId(1)).is_err());
    }
}
