//! Heap tables: tuple versions on slotted pages, with WAL.
//!
//! Tuple layout (all little-endian):
//! ```text
//!  0  u64  xmin        inserting transaction
//!  8  u64  xmax        deleting/updating transaction, 0 if none
//! 16  u32  prev.block  the older version this one replaced (INVALID if none)
//! 20  u16  prev.slot
//! 22  u32  next.block  the newer version that replaced this one (set with xmax by UPDATE)
//! 26  u16  next.slot
//! 28  u16  flags       reserved, 0
//! 30  u16  reserved    0
//! 32  ...  row data    walnut_common::value::encode_row
//! ```
//! Versions are chained both ways: the primary-key index points at the newest version, readers
//! walk `prev` back to the first version visible to them, and updaters follow `next` forward to
//! the newest committed version (PostgreSQL's `t_ctid`) under read committed.
//!
//! WAL records (resource manager [`RM_HEAP`]):
//! - `INSERT`: block 0 = target page (`will_init` if the page was new); data = u16 slot, tuple.
//! - `UPDATE`: block 0 = old page; data = u16 old slot, u64 xmax, 6-byte new TID, then, when
//!   the new version is on the same page, u16 new slot and the tuple. Otherwise block 1 = new
//!   page, data = u16 new slot, tuple.
//! - `DELETE`: block 0; data = u16 slot, u64 xmax.

use crate::bufpool::{Pinned, ReadMode};
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::Relation;
use crate::xact::{Snapshot, XidStatus};
use crate::Storage;
use std::sync::atomic::Ordering;
use walnut_common::{BlockNumber, Error, Result, Tid, Xid, BLCKSZ};
use walnut_wal::{Record, RmgrId};

/// Heap resource manager id.
pub const RM_HEAP: RmgrId = RmgrId(2);
/// Record types.
pub const HEAP_INSERT: u8 = 0x00;
/// UPDATE record.
pub const HEAP_UPDATE: u8 = 0x10;
/// DELETE record.
pub const HEAP_DELETE: u8 = 0x20;

/// Tuple header size, bytes.
pub const TUPLE_HEADER_SIZE: usize = 32;
/// Largest tuple (header + data) a page can hold, bytes.
pub const MAX_TUPLE_SIZE: usize = BLCKSZ - page::PAGE_HEADER_SIZE - page::LINE_POINTER_SIZE;

/// A decoded tuple header plus its row bytes.
#[derive(Clone, Debug)]
pub struct Version {
    /// Inserting transaction.
    pub xmin: Xid,
    /// Deleting/updating transaction (INVALID if none).
    pub xmax: Xid,
    /// Older version.
    pub prev: Tid,
    /// Newer version.
    pub next: Tid,
    /// encode_row bytes.
    pub data: Vec<u8>,
}

fn rd_tid(b: &[u8]) -> Tid {
    Tid::from_bytes(b).unwrap_or(Tid::INVALID)
}

/// Parses a tuple item.
///
/// # Errors
/// Corruption if shorter than the header.
pub fn parse_version(item: &[u8]) -> Result<Version> {
    if item.len() < TUPLE_HEADER_SIZE {
        return Err(Error::corruption(format!(
            "heap tuple of {} bytes is shorter than its header",
            item.len()
        )));
    }
    Ok(Version {
        xmin: Xid(u64::from_le_bytes(item[0..8].try_into().expect("8"))),
        xmax: Xid(u64::from_le_bytes(item[8..16].try_into().expect("8"))),
        prev: rd_tid(&item[16..22]),
        next: rd_tid(&item[22..28]),
        data: item[TUPLE_HEADER_SIZE..].to_vec(),
    })
}

/// Builds a tuple item.
pub fn build_tuple(xmin: Xid, prev: Tid, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(TUPLE_HEADER_SIZE + data.len());
    t.extend_from_slice(&xmin.0.to_le_bytes());
    t.extend_from_slice(&0u64.to_le_bytes());
    t.extend_from_slice(&prev.to_bytes());
    t.extend_from_slice(&Tid::INVALID.to_bytes());
    t.extend_from_slice(&[0u8; 4]);
    t.extend_from_slice(data);
    t
}

fn header_xmax(item: &[u8]) -> Xid {
    Xid(u64::from_le_bytes(item[8..16].try_into().expect("8")))
}

fn set_xmax_next(item: &mut [u8], xmax: Xid, next: Tid) {
    item[8..16].copy_from_slice(&xmax.0.to_le_bytes());
    item[22..28].copy_from_slice(&next.to_bytes());
}

fn slot_index(p: &PageBuf, slot: u16) -> Result<usize> {
    let i = slot as usize;
    if i == 0 || i > page::slot_count(p) || page::item(p, i - 1).is_none() {
        return Err(Error::corruption(format!(
            "heap line pointer {slot} does not exist"
        )));
    }
    Ok(i - 1)
}

/// Outcome of trying to write (update/delete) a row version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteCheck {
    /// Written; for an update, the new version's TID.
    Done(Tid),
    /// Another transaction holds the row: wait for it, then retry.
    WaitFor(Xid),
    /// A committed transaction updated it; the next version is here.
    Updated(Tid),
    /// A committed transaction deleted it.
    Deleted,
    /// We already updated or deleted it in this transaction.
    SelfModified,
}

fn check_xmax(st: &Storage, item: &[u8], me: Xid) -> Option<WriteCheck> {
    let xmax = header_xmax(item);
    if !xmax.is_valid() {
        return None;
    }
    if xmax == me {
        return Some(WriteCheck::SelfModified);
    }
    match st.xact.status(xmax) {
        XidStatus::Aborted => None,
        XidStatus::InProgress => Some(WriteCheck::WaitFor(xmax)),
        XidStatus::Committed(_) => {
            let next = rd_tid(&item[22..28]);
            Some(if next.is_valid() {
                WriteCheck::Updated(next)
            } else {
                WriteCheck::Deleted
            })
        }
    }
}

/// A page found full: point the relation's insert hint past the end (if it still names that
/// page), so the next insert extends the relation.
fn skip_full_page(rel: &Relation, block: BlockNumber) {
    let _ = rel.insert_hint.compare_exchange(
        block.0,
        rel.nblocks.load(Ordering::Acquire),
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
}

/// Pins a page with room for `len` bytes (leaving `reserve` bytes free for fillfactor),
/// preferring the relation's insert hint, else extending the relation. `avoid` is a block
/// that must not be chosen. Returns the pinned page; the caller latches and rechecks space.
fn target_page<'a>(
    st: &'a Storage,
    rel: &Relation,
    len: usize,
    reserve: usize,
    avoid: Option<BlockNumber>,
) -> Result<Pinned<'a>> {
    let hint = BlockNumber(rel.insert_hint.load(Ordering::Acquire));
    if hint.0 < rel.nblocks.load(Ordering::Acquire) && Some(hint) != avoid {
        let pin = st.pool.pin(rel, hint, ReadMode::Normal)?;
        let ok = {
            let p = pin.read();
            page::is_new(&p)
                || (page::kind(&p) == Some(PageKind::Heap)
                    && page::free_space(&p) >= len + page::LINE_POINTER_SIZE + reserve)
        };
        if ok {
            return Ok(pin);
        }
    }
    let _ext = rel.extend_lock.lock();
    let cur = BlockNumber(rel.insert_hint.load(Ordering::Acquire));
    if cur != hint && cur.0 < rel.nblocks.load(Ordering::Acquire) && Some(cur) != avoid {
        return st.pool.pin(rel, cur, ReadMode::Normal);
    }
    let block = st.smgr.extend(rel)?;
    let pin = st.pool.pin(rel, block, ReadMode::Zero)?;
    rel.insert_hint.store(block.0, Ordering::Release);
    Ok(pin)
}

/// Inserts a new tuple for transaction `xid`. Returns its TID.
///
/// # Errors
/// 54000 if the row is larger than a page; I/O errors.
pub fn insert(
    st: &Storage,
    rel: &Relation,
    xid: Xid,
    prev: Tid,
    data: &[u8],
    fillfactor: u8,
) -> Result<Tid> {
    let tuple = build_tuple(xid, prev, data);
    if tuple.len() > MAX_TUPLE_SIZE {
        return Err(Error::user(
            walnut_common::SqlState("54000"),
            format!(
                "row is too big: size {}, maximum size {}",
                tuple.len(),
                MAX_TUPLE_SIZE
            ),
        ));
    }
    let reserve = BLCKSZ * (100 - fillfactor.clamp(10, 100) as usize) / 100;
    loop {
        let pin = target_page(st, rel, tuple.len(), reserve, None)?;
        let mut p = pin.write();
        let will_init = page::is_new(&p);
        if will_init {
            page::init(&mut p, PageKind::Heap, 0);
        }
        if page::free_space(&p)
            < tuple.len() + page::LINE_POINTER_SIZE + if will_init { 0 } else { reserve }
        {
            drop(p);
            // Someone filled it: point the hint past the end so the next try extends.
            skip_full_page(rel, pin.tag.block);
            continue;
        }
        let slot = page::append_item(&mut p, &tuple) as u16 + 1;
        let block = pin.tag.block;
        let (_, end) = st.wal().insert(&mut |redo| {
            let mut d = Vec::with_capacity(2 + tuple.len());
            d.extend_from_slice(&slot.to_le_bytes());
            d.extend_from_slice(&tuple);
            Record {
                rmgr: RM_HEAP,
                info: HEAP_INSERT,
                xid,
                flags: 0,
                blocks: vec![st.block_ref(rel.id, block, &p, redo, will_init, d)],
                main_data: vec![],
            }
        })?;
        page::set_lsn(&mut p, end);
        pin.mark_dirty();
        return Ok(Tid { block, slot });
    }
}

/// Reads the version at `tid` (no visibility check).
///
/// # Errors
/// Corruption if `tid` does not exist; I/O errors.
pub fn fetch(st: &Storage, rel: &Relation, tid: Tid) -> Result<Version> {
    if tid.block.0 >= rel.nblocks.load(Ordering::Acquire) {
        return Err(Error::corruption(format!(
            "TID ({},{}) is beyond the end of relation base/{}",
            tid.block.0, tid.slot, rel.id.0
        )));
    }
    let pin = st.pool.pin(rel, tid.block, ReadMode::Normal)?;
    let p = pin.read();
    let i = slot_index(&p, tid.slot)?;
    parse_version(page::item(&p, i).expect("checked"))
}

/// Walks the version chain from `head` back to the version visible to `snap`.
/// Returns it with its TID, or `None` if no version is visible or the visible one is deleted.
///
/// # Errors
/// Corruption and I/O errors.
pub fn visible_version(
    st: &Storage,
    rel: &Relation,
    head: Tid,
    snap: &Snapshot,
) -> Result<Option<(Tid, Version)>> {
    let mut tid = head;
    for _ in 0..1_000_000 {
        if !tid.is_valid() {
            return Ok(None);
        }
        let v = fetch(st, rel, tid)?;
        if st.xact.visible(snap, v.xmin) {
            if v.xmax.is_valid() && st.xact.visible(snap, v.xmax) {
                return Ok(None);
            }
            return Ok(Some((tid, v)));
        }
        tid = v.prev;
    }
    Err(Error::corruption(format!(
        "version chain from ({},{}) does not end",
        head.block.0, head.slot
    )))
}

/// Follows `next` links from `tid` to the newest version whose creator committed, returning it
/// unless it was deleted (read committed's EvalPlanQual target).
///
/// # Errors
/// Corruption and I/O errors.
pub fn newest_committed(
    st: &Storage,
    rel: &Relation,
    mut tid: Tid,
) -> Result<Option<(Tid, Version)>> {
    loop {
        let v = fetch(st, rel, tid)?;
        let xmax_committed =
            v.xmax.is_valid() && matches!(st.xact.status(v.xmax), XidStatus::Committed(_));
        if xmax_committed {
            if v.next.is_valid() {
                tid = v.next;
                continue;
            }
            return Ok(None);
        }
        return Ok(Some((tid, v)));
    }
}

/// Deletes the version at `tid` for `xid` if nobody else holds it.
///
/// # Errors
/// I/O and corruption errors.
pub fn delete(st: &Storage, rel: &Relation, tid: Tid, xid: Xid) -> Result<WriteCheck> {
    let pin = st.pool.pin(rel, tid.block, ReadMode::Normal)?;
    let mut p = pin.write();
    let i = slot_index(&p, tid.slot)?;
    if let Some(c) = check_xmax(st, page::item(&p, i).expect("checked"), xid) {
        return Ok(c);
    }
    set_xmax_next(
        page::item_mut(&mut p, i).expect("checked"),
        xid,
        Tid::INVALID,
    );
    let (_, end) = st.wal().insert(&mut |redo| {
        let mut d = Vec::with_capacity(10);
        d.extend_from_slice(&tid.slot.to_le_bytes());
        d.extend_from_slice(&xid.0.to_le_bytes());
        Record {
            rmgr: RM_HEAP,
            info: HEAP_DELETE,
            xid,
            flags: 0,
            blocks: vec![st.block_ref(rel.id, tid.block, &p, redo, false, d)],
            main_data: vec![],
        }
    })?;
    page::set_lsn(&mut p, end);
    pin.mark_dirty();
    Ok(WriteCheck::Done(tid))
}

/// Replaces the version at `old` with a new version holding `data`, for `xid`, if nobody else
/// holds the row. The new version links back to `old`.
///
/// # Errors
/// 54000 for oversized rows; I/O and corruption errors.
pub fn update(st: &Storage, rel: &Relation, old: Tid, xid: Xid, data: &[u8]) -> Result<WriteCheck> {
    let tuple = build_tuple(xid, old, data);
    if tuple.len() > MAX_TUPLE_SIZE {
        return Err(Error::user(
            walnut_common::SqlState("54000"),
            format!(
                "row is too big: size {}, maximum size {}",
                tuple.len(),
                MAX_TUPLE_SIZE
            ),
        ));
    }
    // Same page if it fits (updates may use the space fillfactor keeps free).
    {
        let pin = st.pool.pin(rel, old.block, ReadMode::Normal)?;
        let mut p = pin.write();
        let i = slot_index(&p, old.slot)?;
        if let Some(c) = check_xmax(st, page::item(&p, i).expect("checked"), xid) {
            return Ok(c);
        }
        if page::fits(&p, tuple.len()) {
            let new_slot = page::append_item(&mut p, &tuple) as u16 + 1;
            let new = Tid {
                block: old.block,
                slot: new_slot,
            };
            set_xmax_next(page::item_mut(&mut p, i).expect("checked"), xid, new);
            let (_, end) = st.wal().insert(&mut |redo| {
                let mut d = Vec::with_capacity(18 + tuple.len());
                d.extend_from_slice(&old.slot.to_le_bytes());
                d.extend_from_slice(&xid.0.to_le_bytes());
                d.extend_from_slice(&new.to_bytes());
                d.extend_from_slice(&new_slot.to_le_bytes());
                d.extend_from_slice(&tuple);
                Record {
                    rmgr: RM_HEAP,
                    info: HEAP_UPDATE,
                    xid,
                    flags: 0,
                    blocks: vec![st.block_ref(rel.id, old.block, &p, redo, false, d)],
                    main_data: vec![],
                }
            })?;
            page::set_lsn(&mut p, end);
            pin.mark_dirty();
            return Ok(WriteCheck::Done(new));
        }
    }
    loop {
        let tpin = target_page(st, rel, tuple.len(), 0, Some(old.block))?;
        let opin = st.pool.pin(rel, old.block, ReadMode::Normal)?;
        if tpin.tag.block == old.block {
            continue;
        }
        // Latch both pages in block order so two updaters never deadlock on latches.
        let (mut tp, mut op);
        if tpin.tag.block < old.block {
            tp = tpin.write();
            op = opin.write();
        } else {
            op = opin.write();
            tp = tpin.write();
        }
        let i = slot_index(&op, old.slot)?;
        if let Some(c) = check_xmax(st, page::item(&op, i).expect("checked"), xid) {
            return Ok(c);
        }
        let will_init = page::is_new(&tp);
        if will_init {
            page::init(&mut tp, PageKind::Heap, 0);
        }
        if !page::fits(&tp, tuple.len()) {
            drop((tp, op));
            skip_full_page(rel, tpin.tag.block);
            continue;
        }
        let new_slot = page::append_item(&mut tp, &tuple) as u16 + 1;
        let new = Tid {
            block: tpin.tag.block,
            slot: new_slot,
        };
        set_xmax_next(page::item_mut(&mut op, i).expect("checked"), xid, new);
        let (_, end) = st.wal().insert(&mut |redo| {
            let mut d0 = Vec::with_capacity(16);
            d0.extend_from_slice(&old.slot.to_le_bytes());
            d0.extend_from_slice(&xid.0.to_le_bytes());
            d0.extend_from_slice(&new.to_bytes());
            let mut d1 = Vec::with_capacity(2 + tuple.len());
            d1.extend_from_slice(&new_slot.to_le_bytes());
            d1.extend_from_slice(&tuple);
            Record {
                rmgr: RM_HEAP,
                info: HEAP_UPDATE,
                xid,
                flags: 0,
                blocks: vec![
                    st.block_ref(rel.id, old.block, &op, redo, false, d0),
                    st.block_ref(rel.id, new.block, &tp, redo, will_init, d1),
                ],
                main_data: vec![],
            }
        })?;
        page::set_lsn(&mut op, end);
        page::set_lsn(&mut tp, end);
        opin.mark_dirty();
        tpin.mark_dirty();
        return Ok(WriteCheck::Done(new));
    }
}

/// Calls `visit` with every version on `block` visible to `snap` (TID and row bytes). The page
/// latch is released before `visit` runs.
///
/// # Errors
/// I/O and corruption errors, and `visit`'s.
pub fn scan_block(
    st: &Storage,
    rel: &Relation,
    block: BlockNumber,
    snap: &Snapshot,
    out: &mut Vec<(Tid, Vec<u8>)>,
) -> Result<()> {
    let pin = st.pool.pin(rel, block, ReadMode::Normal)?;
    let p = pin.read();
    if page::is_new(&p) || page::kind(&p) != Some(PageKind::Heap) {
        return Ok(());
    }
    for i in 0..page::slot_count(&p) {
        let Some(item) = page::item(&p, i) else {
            continue;
        };
        if item.len() < TUPLE_HEADER_SIZE {
            return Err(Error::corruption(format!(
                "heap tuple ({},{}) is truncated",
                block.0,
                i + 1
            )));
        }
        let xmin = Xid(u64::from_le_bytes(item[0..8].try_into().expect("8")));
        if !st.xact.visible(snap, xmin) {
            continue;
        }
        let xmax = header_xmax(item);
        if xmax.is_valid() && st.xact.visible(snap, xmax) {
            continue;
        }
        out.push((
            Tid {
                block,
                slot: i as u16 + 1,
            },
            item[TUPLE_HEADER_SIZE..].to_vec(),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Redo

fn rd_u16(d: &[u8], at: usize) -> Result<u16> {
    d.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or_else(|| Error::corruption("heap WAL record is truncated"))
}

fn rd_u64(d: &[u8], at: usize) -> Result<u64> {
    d.get(at..at + 8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
        .ok_or_else(|| Error::corruption("heap WAL record is truncated"))
}

fn redo_add(p: &mut PageBuf, slot: u16, tuple: &[u8]) -> Result<()> {
    if slot as usize != page::slot_count(p) + 1 || !page::fits(p, tuple.len()) {
        return Err(Error::corruption(format!(
            "heap redo: slot {slot} does not follow {} on the page",
            page::slot_count(p)
        )));
    }
    page::add_item(p, slot as usize - 1, tuple);
    Ok(())
}

fn redo_set_xmax(p: &mut PageBuf, slot: u16, xmax: Xid, next: Tid) -> Result<()> {
    let i = slot_index(p, slot)?;
    let item = page::item_mut(p, i).expect("checked");
    if item.len() < TUPLE_HEADER_SIZE {
        return Err(Error::corruption("heap redo: tuple is truncated"));
    }
    set_xmax_next(item, xmax, next);
    Ok(())
}

/// Applies the change of block `block_id` of a heap record to page `p` (already initialized if
/// `will_init`).
///
/// # Errors
/// Corruption if the record does not fit the page.
pub fn redo_block(
    info: u8,
    block_id: usize,
    nblocks: usize,
    data: &[u8],
    p: &mut PageBuf,
) -> Result<()> {
    match (info, block_id) {
        (HEAP_INSERT, 0) => redo_add(p, rd_u16(data, 0)?, &data[2..]),
        (HEAP_DELETE, 0) => redo_set_xmax(p, rd_u16(data, 0)?, Xid(rd_u64(data, 2)?), Tid::INVALID),
        (HEAP_UPDATE, 0) => {
            let next = Tid::from_bytes(data.get(10..16).unwrap_or(&[]))
                .ok_or_else(|| Error::corruption("heap update record is truncated"))?;
            redo_set_xmax(p, rd_u16(data, 0)?, Xid(rd_u64(data, 2)?), next)?;
            if nblocks == 1 {
                redo_add(p, rd_u16(data, 16)?, &data[18..])?;
            }
            Ok(())
        }
        (HEAP_UPDATE, 1) => redo_add(p, rd_u16(data, 0)?, &data[2..]),
        _ => Err(Error::corruption(format!(
            "unknown heap record info {info:#x} block {block_id}"
        ))),
    }
}

/// The page kind a heap record initializes.
pub fn init_page(p: &mut PageBuf) {
    page::init(p, PageKind::Heap, 0);
}
