//! Heap tables: tuple versions on slotted pages, with WAL.
//!
//! Tuple layout (all little-endian):
//! ```text
//!  0  u48  xmin        inserting transaction (the low 48 bits of the Xid: [`Xid::MAX_STORED`])
//!  6  u48  xmax        deleting/updating transaction, 0 if none
//! 12  u32  next.block  the newer version that replaced this one (set with xmax by UPDATE)
//! 16  u16  next.slot
//! 18  u16  flags       HEAP_ONLY_TUPLE 0x0001, HEAP_HOT_UPDATED 0x0002 (same-page updates),
//!                      HEAP_HAS_PREV 0x0004 (the prev field follows)
//! 20  u32  prev.block  the older version this one replaced (INVALID if none); only with
//! 24  u16  prev.slot   HEAP_HAS_PREV
//! 20 or 26  row data   walnut_common::value::encode_row
//! ```
//! A version has its `prev` field unless it was inserted into a table without an index: no
//! reader follows `prev` there (reads scan every version), and nothing ever links such a
//! version to another, so its header is 20 bytes instead of 26 (a pgbench_history row is
//! 47 bytes, not 53). Updates always write the field, in every table.
//! Versions are chained both ways: the primary-key index entry leads to the newest version
//! (naming it, or the root of its same-page chain, below), readers walk `prev` back from there
//! to the first version visible to them, and updaters follow `next` forward to
//! the newest committed version (PostgreSQL's `t_ctid`) under read committed.
//!
//! **Same-page updates** (PostgreSQL's heap-only tuples, HOT; DESIGN.md, "Same-page updates").
//! An update of a table with an index whose new version fits on the old version's page marks
//! the new version `HEAP_ONLY_TUPLE` and the old one `HEAP_HOT_UPDATED`, and leaves the index
//! entry where it was: on the chain's root, the oldest version on the page that an entry
//! names. A lookup ([`chain_head`]) goes from the root forward along `next` links that stay on
//! the page to the newest version, under one latch, then walks `prev` back as before. When
//! pruning removes a root whose row still has versions on the page, the root's line pointer
//! becomes a redirect to the first of them.
//!
//! WAL records (resource manager [`RM_HEAP`]):
//! - `INSERT`: block 0 = target page (`will_init` if the page was new); data = u16 slot, tuple.
//! - `UPDATE`: block 0 = old page; data = u16 old slot, u64 xmax, 6-byte new TID, then, when
//!   the new version is on the same page, u16 new slot and the tuple. Otherwise block 1 = new
//!   page, data = u16 new slot, tuple.
//! - `DELETE`: block 0; data = u16 slot, u64 xmax.
//! - `LINK`: block 0; data = u16 slot, 6-byte TID: the version's new `prev` ([`relink_prev`]).
//! - `PRUNE`: block 0; data = u16 n_dead, u16 n_unused, then the slots made dead and the slots
//!   made unused (u16 each), then u16 n_redirect and n_redirect pairs of u16 slots (a root
//!   made, or moved as, a redirect; the slot it now names: absent in older records), after
//!   which the page is compacted; main data = the distinct
//!   `xmax`es of the versions removed (u64 each, ascending; none if only aborted inserts): a
//!   hot standby's queries that do not see all of them conflict with it. (Not just the largest,
//!   as PostgreSQL's `snapshotConflictHorizon`: snapshots here are commit sequence numbers,
//!   and xid order is not commit order.)
//! - `VACUUM`: block 0; data = u16 n, then n slots (u16 each), dead line pointers made unused,
//!   after which the page is compacted ([`vacuum_page`]). No conflict on a hot standby: the
//!   `PRUNE` that made them dead had it.
//! - `FREEZE`: block 0; data = u16 n, then n times u16 slot and u8 what (`FREEZE_*` bits:
//!   `xmin` made `Xid::FROZEN` or `Xid::ABORTED`, `xmax` made `Xid::FROZEN`, or `Xid::ABORTED`
//!   with `next` and `HEAP_HOT_UPDATED` cleared); main data = the distinct xids frozen as committed (u64 each, ascending): a hot
//!   standby's queries that do not see all of them conflict with it, as with `PRUNE`
//!   ([`freeze_page`]; PostgreSQL's `heap_freeze_execute_prepared`).
//!
//! **Pruning** (PostgreSQL's `heap_page_prune`; DESIGN.md, "Pruning"). A version no snapshot
//! can see any more is removed from its page when the page is found full: by an update of a
//! row on it, or by an insert or a moved update looking for room; or when a read finds the
//! page nearly full with a prune hint whose transaction ended ([`worth_pruning_on_read`]). Against the visibility
//! horizon `h` ([`crate::xact::XactManager::horizon`]):
//! - first, same-page chains from their roots ([`plan_hot_chains`]): a root whose row still has
//!   versions on the page becomes a redirect to the first of them;
//! - replaced (`xmax` committed with CSN <= `h`, `next` set): its line pointer becomes unused,
//!   free for a new version. Nothing reaches it any more: the index leads to a newer version,
//!   and a reader walks `prev` only from a version whose `xmin` it cannot see, while the
//!   version that replaced it has `xmin` = this `xmax`, which everyone sees;
//! - heap-only and inserted by an aborted transaction: unused (no entry names it, and no
//!   lookup goes past an aborted updater);
//! - deleted (`xmax` committed with CSN <= `h`, no `next`), or inserted by an aborted
//!   transaction and replacing nothing (no `prev`): its line pointer becomes dead. The index
//!   entry may still point at it, and reads it as the end of a chain with nothing visible;
//!   VACUUM removes both (`crate::vacuum`);
//! - anything else stays, including a version of an aborted update to another page (or a new
//!   root) that replaced another: the index may point at it, and its `prev` leads to the live
//!   version.
//!
//! The page is then compacted. A new version takes the first unused line pointer, else a new
//! one: its slot is in its WAL record either way.
//!
//! Assertions (on in release builds) guard what this module writes: a valid, already assigned
//! xid and a valid TID for every write, a tuple that fits the page, a new version at a slot
//! the page has (the slot its WAL record names, where redo puts it), and after an
//! update the links both ways (`old.next = new`, `new.prev = old`, `old.xmax = new.xmin = xid`),
//! read back from the page. Tuples read from a page and records read from the WAL are checked
//! with corruption errors instead (XX001): a page that is not a heap page, a line pointer that
//! does not exist, a tuple shorter than its header.

use crate::bufpool::{Pinned, ReadMode};
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::Relation;
use crate::xact::{Snapshot, XidStatus};
use crate::Storage;
use std::sync::atomic::Ordering;
use walnut_common::{BlockNumber, Error, Result, Tid, Xid, BLCKSZ};
use walnut_wal::{Record, RmgrId};

mod bulk;
pub use bulk::{BulkInsert, BULK_BATCH_PAGES_MAX, HEAP_NEWPAGES};

/// Tuple flag (header offset 18): a heap-only version, which a same-page update placed; no
/// index entry names it: lookups reach it from its chain's root (PostgreSQL's
/// `HEAP_ONLY_TUPLE`).
pub const HEAP_ONLY_TUPLE: u16 = 0x0001;
/// Tuple flag: replaced by a heap-only version on the same page, which its `next` names
/// (PostgreSQL's `HEAP_HOT_UPDATED`).
pub const HEAP_HOT_UPDATED: u16 = 0x0002;
/// Tuple flag: the header has a `prev` field (bytes 20..26), and the row data starts at 26
/// instead of 20. Set when the version is built, never changed: a version without the field
/// can never be linked ([`relink_prev`] refuses it).
pub const HEAP_HAS_PREV: u16 = 0x0004;

/// Heap resource manager id.
pub const RM_HEAP: RmgrId = RmgrId(2);
/// Record types.
pub const HEAP_INSERT: u8 = 0x00;
/// UPDATE record.
pub const HEAP_UPDATE: u8 = 0x10;
/// DELETE record.
pub const HEAP_DELETE: u8 = 0x20;
/// PRUNE record (removal of versions no snapshot can see; see the module documentation).
pub const HEAP_PRUNE: u8 = 0x40;
/// LINK record: a new version's `prev` link set to another version ([`relink_prev`]).
pub const HEAP_LINK: u8 = 0x50;
/// VACUUM record: dead line pointers made unused ([`vacuum_page`]).
pub const HEAP_VACUUM: u8 = 0x60;
/// FREEZE record: xids of a page's versions replaced by `Xid::FROZEN` or `Xid::ABORTED`
/// ([`freeze_page`]).
pub const HEAP_FREEZE: u8 = 0x70;

/// A `FREEZE` entry's bits: `xmin` becomes `Xid::FROZEN` (committed, visible to all).
pub const FREEZE_XMIN_COMMITTED: u8 = 0x01;
/// `xmin` becomes `Xid::ABORTED` (its inserter aborted).
pub const FREEZE_XMIN_ABORTED: u8 = 0x02;
/// `xmax` becomes `Xid::FROZEN` (its deleter committed, visible to all).
pub const FREEZE_XMAX_COMMITTED: u8 = 0x04;
/// `xmax` becomes `Xid::ABORTED` (its deleter or updater aborted), and `next` and
/// `HEAP_HOT_UPDATED` are cleared (never an empty `xmax`: [`update`] reads that as unstamped).
pub const FREEZE_XMAX_ABORTED: u8 = 0x08;
const FREEZE_ALL: u8 =
    FREEZE_XMIN_COMMITTED | FREEZE_XMIN_ABORTED | FREEZE_XMAX_COMMITTED | FREEZE_XMAX_ABORTED;

/// Pages an insert takes from the free-space map and finds fuller than their entries said
/// before it extends the relation instead.
const FSM_TRIES: usize = 4;

/// Tuple header size without the optional `prev` field, bytes: `xmin`, `xmax`, `next`, flags.
pub const TUPLE_HEADER_SIZE: usize = 20;
/// Size of a header's `xmin` and `xmax`, bytes: an Xid's low 48 bits ([`Xid::MAX_STORED`]).
const XID_FIELD_SIZE: usize = 6;
/// Header offsets, bytes.
const XMIN_AT: usize = 0;
const XMAX_AT: usize = XMIN_AT + XID_FIELD_SIZE;
const NEXT_AT: usize = XMAX_AT + XID_FIELD_SIZE;
const FLAGS_AT: usize = NEXT_AT + Tid::SIZE;
const PREV_AT: usize = TUPLE_HEADER_SIZE;
/// Size of the optional `prev` field (`HEAP_HAS_PREV`), bytes.
pub const PREV_FIELD_SIZE: usize = Tid::SIZE;
/// Largest tuple (header + data) a page can hold, bytes.
pub const MAX_TUPLE_SIZE: usize = BLCKSZ - page::PAGE_HEADER_SIZE - page::LINE_POINTER_SIZE;

// An empty page (heap pages have no trailer) holds one tuple of the largest size.
const _: () = assert!(page::PAGE_HEADER_SIZE + page::LINE_POINTER_SIZE + MAX_TUPLE_SIZE <= BLCKSZ);
const _: () = assert!(TUPLE_HEADER_SIZE < MAX_TUPLE_SIZE);
// Item lengths are u16 line-pointer fields.
const _: () = assert!(MAX_TUPLE_SIZE <= u16::MAX as usize);
// The header: xmin, xmax, next, flags; then prev if HEAP_HAS_PREV.
const _: () = assert!(FLAGS_AT + 2 == TUPLE_HEADER_SIZE);
const _: () = assert!(Xid::MAX_STORED.0 < 1 << (8 * XID_FIELD_SIZE));
// UPDATE's block 0 data: u16 old slot, u64 xmax, new TID, then (same page) u16 new slot at 16.
const _: () = assert!(2 + 8 + Tid::SIZE == 16);

/// A decoded tuple header plus its row bytes.
#[derive(Clone, Debug)]
pub struct Version {
    /// Inserting transaction.
    pub xmin: Xid,
    /// Deleting/updating transaction (INVALID if none).
    pub xmax: Xid,
    /// Older version (INVALID if none; always INVALID for a tuple without a `prev` field).
    pub prev: Tid,
    /// Newer version.
    pub next: Tid,
    /// `HEAP_ONLY_TUPLE`, `HEAP_HOT_UPDATED` and `HEAP_HAS_PREV` bits.
    pub flags: u16,
    /// encode_row bytes.
    pub data: Vec<u8>,
}

fn rd_tid(b: &[u8]) -> Tid {
    Tid::from_bytes(b).unwrap_or(Tid::INVALID)
}

/// Parses a tuple item.
///
/// # Errors
/// Corruption if shorter than its header ([`has_whole_header`]).
pub fn parse_version(item: &[u8]) -> Result<Version> {
    if !has_whole_header(item) {
        return Err(Error::corruption(format!(
            "heap tuple of {} bytes is shorter than its header",
            item.len()
        )));
    }
    Ok(Version {
        xmin: header_xmin(item),
        xmax: header_xmax(item),
        prev: header_prev(item),
        next: header_next(item),
        flags: header_flags(item),
        data: item[header_size(item)..].to_vec(),
    })
}

/// Appends a tuple header to `out`: `xmin`, no `xmax`, no `next`, and a `prev` field holding
/// `prev` (`HEAP_HAS_PREV`) unless `prev` is `None` (20 or 26 bytes).
pub fn put_tuple_header(out: &mut Vec<u8>, xmin: Xid, prev: Option<Tid>) {
    assert!(xmin.is_valid(), "tuple with an invalid xmin");
    assert!(
        prev.is_none_or(|t| t.is_valid() || t == Tid::INVALID),
        "tuple with a malformed prev link {prev:?}"
    );
    out.extend_from_slice(&xid_field(xmin));
    out.extend_from_slice(&xid_field(Xid::INVALID));
    out.extend_from_slice(&Tid::INVALID.to_bytes());
    let flags = if prev.is_some() { HEAP_HAS_PREV } else { 0 };
    out.extend_from_slice(&flags.to_le_bytes());
    if let Some(prev) = prev {
        out.extend_from_slice(&prev.to_bytes());
    }
}

/// Builds a tuple item: a header as [`put_tuple_header`] writes it, then `data`.
pub fn build_tuple(xmin: Xid, prev: Option<Tid>, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(TUPLE_HEADER_SIZE + PREV_FIELD_SIZE + data.len());
    put_tuple_header(&mut t, xmin, prev);
    t.extend_from_slice(data);
    assert_eq!(t.len(), header_size(&t) + data.len(), "tuple size");
    t
}

/// Checks that a row of `data_len` bytes of `encode_row` data fits a page as a tuple with a
/// `prev` field, whether or not the tuple being written has one: every insert and update
/// applies the same limit, so a row that could be inserted can always be updated.
///
/// # Errors
/// 54000 (`program_limit_exceeded`, PostgreSQL's "row is too big") if not.
pub fn check_row_size(data_len: usize) -> Result<()> {
    let size = TUPLE_HEADER_SIZE + PREV_FIELD_SIZE + data_len;
    if size > MAX_TUPLE_SIZE {
        return Err(Error::user(
            walnut_common::SqlState::PROGRAM_LIMIT_EXCEEDED,
            format!("row is too big: size {size}, maximum size {MAX_TUPLE_SIZE}"),
        ));
    }
    Ok(())
}

/// Header size of a tuple, bytes: 20, or 26 with a `prev` field. The caller checked that
/// `item` holds the fixed part ([`TUPLE_HEADER_SIZE`]).
fn header_size(item: &[u8]) -> usize {
    if header_flags(item) & HEAP_HAS_PREV != 0 {
        TUPLE_HEADER_SIZE + PREV_FIELD_SIZE
    } else {
        TUPLE_HEADER_SIZE
    }
}

/// Whether `item` is long enough for its header (with the `prev` field its flags name): the
/// check every reader of an item from a page or a WAL record makes before the `header_*`
/// functions.
pub fn has_whole_header(item: &[u8]) -> bool {
    item.len() >= TUPLE_HEADER_SIZE && item.len() >= header_size(item)
}

/// The `prev` field of a tuple that has one.
fn prev_field(item: &mut [u8]) -> Option<&mut [u8]> {
    (header_flags(item) & HEAP_HAS_PREV != 0).then(|| &mut item[PREV_AT..PREV_AT + PREV_FIELD_SIZE])
}

/// The 6 bytes a header stores for `x`: its low 48 bits, little-endian. Every xid a tuple
/// holds is at most [`Xid::MAX_STORED`] (`XactManager::try_assign_xid` hands out no more),
/// which this checks.
fn xid_field(x: Xid) -> [u8; XID_FIELD_SIZE] {
    assert!(
        x <= Xid::MAX_STORED,
        "xid {} does not fit a tuple header",
        x.0
    );
    x.0.to_le_bytes()[..XID_FIELD_SIZE]
        .try_into()
        .expect("6 bytes")
}

fn read_xid(item: &[u8], at: usize) -> Xid {
    let mut b = [0u8; 8];
    b[..XID_FIELD_SIZE].copy_from_slice(&item[at..at + XID_FIELD_SIZE]);
    Xid(u64::from_le_bytes(b))
}

fn header_xmax(item: &[u8]) -> Xid {
    read_xid(item, XMAX_AT)
}

fn header_xmin(item: &[u8]) -> Xid {
    read_xid(item, XMIN_AT)
}

fn header_prev(item: &[u8]) -> Tid {
    if header_flags(item) & HEAP_HAS_PREV != 0 {
        rd_tid(&item[PREV_AT..PREV_AT + PREV_FIELD_SIZE])
    } else {
        Tid::INVALID
    }
}

fn header_next(item: &[u8]) -> Tid {
    rd_tid(&item[NEXT_AT..NEXT_AT + Tid::SIZE])
}

fn header_flags(item: &[u8]) -> u16 {
    u16::from_le_bytes([item[FLAGS_AT], item[FLAGS_AT + 1]])
}

fn set_header_flag(item: &mut [u8], bit: u16, on: bool) {
    assert_ne!(
        bit, HEAP_HAS_PREV,
        "a tuple's prev field is never added or removed"
    );
    let f = header_flags(item);
    let f = if on { f | bit } else { f & !bit };
    item[FLAGS_AT..FLAGS_AT + 2].copy_from_slice(&f.to_le_bytes());
}

/// Stamps a version's xmax and next link, and `HEAP_HOT_UPDATED` as `hot` says (a same-page
/// update of an indexed table sets it; a delete, or an update that moves the row, clears what
/// an aborted same-page update left). The caller checked the item's length (a tuple it built,
/// or [`tuple_index`] on a page).
fn set_xmax_next(item: &mut [u8], xmax: Xid, next: Tid, hot: bool) {
    assert!(has_whole_header(item), "stamp of a truncated tuple");
    assert!(xmax.is_valid(), "stamp of an invalid xmax");
    assert!(
        !hot || next.is_valid(),
        "a same-page update without a next link"
    );
    item[XMAX_AT..NEXT_AT].copy_from_slice(&xid_field(xmax));
    item[NEXT_AT..FLAGS_AT].copy_from_slice(&next.to_bytes());
    set_header_flag(item, HEAP_HOT_UPDATED, hot);
}

/// Line-pointer index of the tuple at `slot` of a page read from disk (or restored by redo),
/// checked: a heap page, a line pointer in use, a tuple at least as long as its header.
///
/// # Errors
/// Corruption (XX001) if not.
fn tuple_index(p: &PageBuf, slot: u16) -> Result<usize> {
    if page::kind(p) != Some(PageKind::Heap) {
        return Err(Error::corruption(format!(
            "heap line pointer {slot} is on a page of kind {:?}, not a heap page",
            page::kind(p)
        )));
    }
    let i = slot as usize;
    let Some(item) = (i > 0).then(|| page::item(p, i - 1)).flatten() else {
        return Err(Error::corruption(format!(
            "heap line pointer {slot} does not exist"
        )));
    };
    if !has_whole_header(item) {
        return Err(Error::corruption(format!(
            "heap tuple at line pointer {slot} is {} bytes, shorter than its header",
            item.len()
        )));
    }
    Ok(i - 1)
}

/// What a slot holds, for readers that may meet a pruned version.
enum Slot {
    /// A tuple at this line-pointer index.
    Tuple(usize),
    /// A dead line pointer: a version removed by pruning, which no snapshot saw any more.
    Dead,
    /// A redirect: a chain's root that pruning removed; the line-pointer index its row's
    /// versions on the page go on from.
    Redirect(usize),
}

/// Like [`tuple_index`], but a dead line pointer is [`Slot::Dead`] and a redirect
/// [`Slot::Redirect`] instead of an error.
///
/// # Errors
/// Corruption (XX001) as [`tuple_index`].
fn slot_state(p: &PageBuf, slot: u16) -> Result<Slot> {
    if slot > 0 && page::kind(p) == Some(PageKind::Heap) {
        if page::is_dead(p, slot as usize - 1) {
            return Ok(Slot::Dead);
        }
        if let Some(t) = page::redirect_target(p, slot as usize - 1) {
            return Ok(Slot::Redirect(t));
        }
    }
    tuple_index(p, slot).map(Slot::Tuple)
}

/// Whether an xid aborted, by `st`'s status store: what [`hot_head`] and [`hot_successor`] ask.
fn aborted_in(st: &Storage) -> impl Fn(Xid) -> bool + '_ {
    move |x| st.xact.status(x) == XidStatus::Aborted
}

/// The next member of a same-page update chain after the tuple at line-pointer index `i` of
/// page `p` (block `block`): the version its `next` names, if the tuple is `HEAP_HOT_UPDATED`,
/// its updater did not abort (`aborted` says), and that slot holds a heap-only version whose
/// `xmin` is the tuple's `xmax` (one freeze pass freezes both alike) and whose `prev` names the
/// tuple (PostgreSQL's `priorXmax` check: a slot pruning freed and a later version reused is
/// not followed).
fn hot_successor(
    p: &PageBuf,
    block: BlockNumber,
    i: usize,
    aborted: &dyn Fn(Xid) -> bool,
) -> Option<usize> {
    let item = page::item(p, i)?;
    let next = header_next(item);
    if header_flags(item) & HEAP_HOT_UPDATED == 0 || next.block != block {
        return None;
    }
    let xmax = header_xmax(item);
    if aborted(xmax) {
        return None;
    }
    let Ok(Slot::Tuple(j)) = slot_state(p, next.slot) else {
        return None;
    };
    let n = page::item(p, j)?;
    let me = Tid {
        block,
        slot: i as u16 + 1,
    };
    (header_flags(n) & HEAP_ONLY_TUPLE != 0 && header_xmin(n) == xmax && header_prev(n) == me)
        .then_some(j)
}

/// The line-pointer index of the newest version of the same-page chain that an index entry
/// naming `slot` of heap page `p` (block `block`) reaches: through a redirect, then forward
/// along same-page update links ([`hot_successor`]); `None` if the slot is a dead line
/// pointer (PostgreSQL's `heap_hot_search_buffer`, walking the other way: walnut's readers
/// then walk `prev` back from the newest version).
///
/// # Errors
/// Corruption (XX001) if the slot holds no tuple, or a redirect names none.
pub fn hot_head(
    p: &PageBuf,
    block: BlockNumber,
    slot: u16,
    aborted: &dyn Fn(Xid) -> bool,
) -> Result<Option<usize>> {
    let mut i = match slot_state(p, slot)? {
        Slot::Dead => return Ok(None),
        Slot::Tuple(i) => i,
        Slot::Redirect(t) => match slot_state(p, t as u16 + 1)? {
            Slot::Tuple(i) => i,
            _ => {
                return Err(Error::corruption(format!(
                    "heap line pointer {slot} redirects to {}, which holds no tuple",
                    t + 1
                )))
            }
        },
    };
    for _ in 0..page::slot_count(p) {
        match hot_successor(p, block, i, aborted) {
            Some(j) => i = j,
            None => return Ok(Some(i)),
        }
    }
    Err(Error::corruption(format!(
        "same-page update chain from heap line pointer {slot} does not end"
    )))
}

/// A write names a transaction that exists: valid and already assigned.
fn assert_writer(st: &Storage, xid: Xid) {
    assert!(
        xid.is_valid() && xid < st.xact.next_xid(),
        "heap write by xid {} that was never assigned (next xid {})",
        xid.0,
        st.xact.next_xid().0
    );
}

/// A new version was placed on `p` at `slot`, the slot its WAL record names and where redo
/// puts it. Holds `tuple`.
fn assert_placed(p: &PageBuf, slot: u16, tuple: &[u8]) {
    assert!(
        slot >= 1 && slot as usize <= page::slot_count(p),
        "new version's slot {slot} is outside the page's {} line pointers",
        page::slot_count(p)
    );
    assert_eq!(
        page::item(p, slot as usize - 1).map(<[u8]>::len),
        Some(tuple.len()),
        "new version at slot {slot} has not the tuple's length"
    );
}

/// After an update: the old version's xmax and next link name the new version, whose xmin and
/// prev link name the old one (read back from the pages written).
fn assert_update_links(old_item: &[u8], new_item: &[u8], old: Tid, new: Tid, xid: Xid) {
    assert_ne!(old, new, "update replaced a version with itself");
    assert_eq!(
        header_xmax(old_item),
        xid,
        "old version's xmax after update"
    );
    assert_eq!(
        header_next(old_item),
        new,
        "old version's next link after update"
    );
    assert_eq!(
        header_xmin(new_item),
        xid,
        "new version's xmin after update"
    );
    assert_eq!(
        header_prev(new_item),
        old,
        "new version's prev link after update"
    );
}

/// Outcome of trying to write (update/delete) a row version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteCheck {
    /// Written; for an update, the new version's TID.
    Done(Tid),
    /// Updated with a heap-only version, at this TID on the old version's page: the index
    /// entry stays where it is ([`update`]).
    HeapOnly(Tid),
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
            let next = header_next(item);
            Some(if next.is_valid() {
                WriteCheck::Updated(next)
            } else {
                WriteCheck::Deleted
            })
        }
    }
}

/// The tuples of heap page `p`, block `block`: (index, bytes) for each line pointer that holds
/// one, in slot order, or a corruption error for an item too short for a tuple header (the one
/// check every reader of a page's tuples makes).
fn tuples(p: &PageBuf, block: BlockNumber) -> impl Iterator<Item = Result<(usize, &[u8])>> + '_ {
    (0..page::slot_count(p)).filter_map(move |i| {
        let item = page::item(p, i)?;
        Some(if !has_whole_header(item) {
            Err(Error::corruption(format!(
                "heap tuple ({},{}) is truncated",
                block.0,
                i + 1
            )))
        } else {
            Ok((i, item))
        })
    })
}

/// A page found full (the caller recorded its room in the free-space map while it held the
/// latch, so that a VACUUM's later record is not overwritten by an older figure): point the
/// relation's insert hint past the end (if it still names that page), so the next insert looks
/// in the map, then extends the relation.
fn skip_full_page(rel: &Relation, block: BlockNumber) {
    let _ = rel.insert_hint.compare_exchange(
        block.0,
        rel.insert_end(),
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
}

/// True if `block`, whose exclusive latch the caller holds, is where a VACUUM is cutting an
/// empty tail off (its step 6 lowers `insert_limit` before it latches each page to check it is
/// empty), so nothing may be placed on it; the caller looks elsewhere. Read under the latch:
/// if the VACUUM latched the page first, the lowered limit is visible now; if not, it finds
/// what the caller places and keeps the page.
fn past_a_cut(rel: &Relation, block: BlockNumber) -> bool {
    block.0 >= rel.insert_end()
}

/// The corruption error for a page of a heap relation that is neither new nor a heap page.
fn not_a_heap_page(rel: &Relation, block: BlockNumber, p: &PageBuf) -> Error {
    Error::corruption(format!(
        "block {} of relation base/{} is a page of kind {:?}, not a heap page",
        block.0,
        rel.id.0,
        page::kind(p)
    ))
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
    if hint.0 < rel.insert_end() && Some(hint) != avoid {
        let pin = st.pool.pin(rel, hint, ReadMode::Normal)?;
        let room = |p: &PageBuf| page::free_space(p) >= len + page::LINE_POINTER_SIZE + reserve;
        let (ok, heap) = {
            let p = pin.read();
            let heap = page::kind(&p) == Some(PageKind::Heap);
            (page::is_new(&p) || (heap && room(&p)), heap)
        };
        if ok {
            return Ok(pin);
        }
        if heap {
            // Full: what no snapshot needs any more may make room.
            let mut p = pin.write();
            if page::kind(&p) == Some(PageKind::Heap)
                && prune(st, rel, &pin, &mut p)? > 0
                && room(&p)
            {
                drop(p);
                return Ok(pin);
            }
            rel.fsm.record(hint, page::free_space(&p));
        }
    }
    // A page VACUUM left room on, before a new one (PostgreSQL's `RelationGetBufferForTuple`:
    // `GetPageWithFreeSpace`, then `RecordAndGetPageWithFreeSpace` for each page that turns out
    // to be fuller than its entry said).
    let need = len + page::LINE_POINTER_SIZE + reserve;
    for _ in 0..FSM_TRIES {
        let Some(block) = rel.fsm.search(need, avoid) else {
            break;
        };
        if block.0 >= rel.insert_end() {
            rel.fsm.record(block, 0);
            continue;
        }
        let pin = st.pool.pin(rel, block, ReadMode::Normal)?;
        {
            let p = pin.read();
            let free = match page::kind(&p) {
                _ if page::is_new(&p) => BLCKSZ,
                Some(PageKind::Heap) => page::free_space(&p),
                _ => 0,
            };
            if free < need {
                rel.fsm.record(block, free);
                continue;
            }
        }
        rel.insert_hint.store(block.0, Ordering::Release);
        return Ok(pin);
    }
    let _ext = rel.extend_lock.lock();
    let cur = BlockNumber(rel.insert_hint.load(Ordering::Acquire));
    if cur != hint && cur.0 < rel.insert_end() && Some(cur) != avoid {
        return st.pool.pin(rel, cur, ReadMode::Normal);
    }
    let next = BlockNumber(rel.nblocks.load(Ordering::Acquire));
    let pin = pin_new_block(st, rel, next)?;
    let block = st.smgr.extend(rel)?;
    assert_eq!(
        block, next,
        "extension under extend_lock allocated another block"
    );
    rel.insert_hint.store(block.0, Ordering::Release);
    Ok(pin)
}

/// Pins block `block` of `rel`, the next one an extension allocates (the caller holds
/// `extend_lock`, and `block` is `nblocks`), as a new page. A block a VACUUM cut off may still
/// be cached, holding the empty page it had (a read in flight during the cut, or a write-out
/// that put the page back: storage DESIGN.md, "VACUUM", step 6); it is zeroed, so that the
/// block's first record initializes it and redo, which sees the cut, needs nothing from the
/// file. Done before the extension: no insert chooses a block at or past `nblocks`, so none can
/// have placed a version there.
///
/// # Errors
/// As [`BufferPool::pin`](crate::bufpool::BufferPool::pin).
pub(crate) fn pin_new_block<'a>(
    st: &'a Storage,
    rel: &Relation,
    block: BlockNumber,
) -> Result<Pinned<'a>> {
    debug_assert!(rel.extend_lock.is_locked());
    let pin = st.pool.pin(rel, block, ReadMode::Zero)?;
    {
        let mut p = pin.write();
        if !page::is_new(&p) {
            p.fill(0);
        }
    }
    Ok(pin)
}

/// Inserts a new tuple for transaction `xid`. Returns its TID. `prev` is the older version it
/// links to (`Tid::INVALID` for none), or `None` for a version without a `prev` field, which
/// nothing can link later: a table without an index ([`put_tuple_header`]).
///
/// # Errors
/// 54000 if the row is larger than a page; I/O errors.
pub fn insert(
    st: &Storage,
    rel: &Relation,
    xid: Xid,
    prev: Option<Tid>,
    data: &[u8],
    fillfactor: u8,
) -> Result<Tid> {
    check_row_size(data.len())?;
    let tuple = build_tuple(xid, prev, data);
    assert_writer(st, xid);
    let reserve = BLCKSZ * (100 - fillfactor.clamp(10, 100) as usize) / 100;
    loop {
        let pin = target_page(st, rel, tuple.len(), reserve, None)?;
        let mut p = pin.write();
        if past_a_cut(rel, pin.tag.block) {
            continue;
        }
        let will_init = page::is_new(&p);
        if will_init {
            page::init(&mut p, PageKind::Heap, 0);
        } else if page::kind(&p) != Some(PageKind::Heap) {
            return Err(not_a_heap_page(rel, pin.tag.block, &p));
        }
        let need = tuple.len() + page::LINE_POINTER_SIZE + if will_init { 0 } else { reserve };
        if page::free_space(&p) < need
            && !(!will_init && prune(st, rel, &pin, &mut p)? > 0 && page::free_space(&p) >= need)
        {
            rel.fsm.record(pin.tag.block, page::free_space(&p));
            drop(p);
            // Someone filled it: point the hint past the end so the next try looks elsewhere.
            skip_full_page(rel, pin.tag.block);
            continue;
        }
        let slot = page::place_item(&mut p, &tuple) as u16 + 1;
        assert_placed(&p, slot, &tuple);
        let block = pin.tag.block;
        let end = st.log_change(&[&pin], &mut |redo| {
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
        return Ok(Tid { block, slot });
    }
}

/// Reads the version at `tid` (no visibility check).
///
/// # Errors
/// Corruption if `tid` does not exist; I/O errors.
pub fn fetch(st: &Storage, rel: &Relation, tid: Tid) -> Result<Version> {
    check_in_range(rel, tid)?;
    fetch_live(st, rel, tid)?.ok_or_else(|| {
        Error::corruption(format!(
            "TID ({},{}) of relation base/{} is a dead line pointer or a redirect",
            tid.block.0, tid.slot, rel.id.0
        ))
    })
}

/// Reads the version at `tid` (no visibility check), or `None` if pruning removed it and left a
/// dead line pointer or a redirect (see the module documentation): for a walk back along
/// `prev`, a chain's end with nothing visible. An index entry's TID goes through
/// [`chain_head`] instead.
///
/// # Errors
/// Corruption if `tid` does not exist; I/O errors.
pub fn fetch_live(st: &Storage, rel: &Relation, tid: Tid) -> Result<Option<Version>> {
    check_in_range(rel, tid)?;
    let pin = st.pool.pin(rel, tid.block, ReadMode::Normal)?;
    let p = pin.read();
    match slot_state(&p, tid.slot)? {
        Slot::Dead | Slot::Redirect(_) => Ok(None),
        Slot::Tuple(i) => parse_version(page::item(&p, i).expect("checked")).map(Some),
    }
}

fn check_in_range(rel: &Relation, tid: Tid) -> Result<()> {
    if tid.block.0 >= rel.nblocks.load(Ordering::Acquire) {
        return Err(Error::corruption(format!(
            "TID ({},{}) is beyond the end of relation base/{}",
            tid.block.0, tid.slot, rel.id.0
        )));
    }
    Ok(())
}

/// The newest version, with its TID, of the chain an index entry naming `tid` reaches on that
/// page ([`hot_head`]: through a redirect and same-page update links, under the page's shared
/// latch), or `None` if `tid` is a dead line pointer (a chain pruning ended). Readers, the
/// uniqueness check and inserts start every index lookup here, then walk `prev` back.
///
/// # Errors
/// Corruption if `tid` names no tuple, dead line pointer or redirect; I/O errors.
pub fn chain_head(st: &Storage, rel: &Relation, tid: Tid) -> Result<Option<(Tid, Version)>> {
    check_in_range(rel, tid)?;
    let pin = st.pool.pin(rel, tid.block, ReadMode::Normal)?;
    let mut p = pin.read();
    if worth_pruning_on_read(st, rel, &pin, &p) {
        drop(p);
        prune_on_read(st, rel, &pin)?;
        p = pin.read();
    }
    let aborted = aborted_in(st);
    let Some(i) = hot_head(&p, tid.block, tid.slot, &aborted)? else {
        return Ok(None);
    };
    let head = Tid {
        block: tid.block,
        slot: i as u16 + 1,
    };
    Ok(Some((
        head,
        parse_version(page::item(&p, i).expect("checked"))?,
    )))
}

/// The version that `v`, at `tid`, links to with `prev`, with its TID, for a walk back along a
/// chain; `None` where the chain ends: no `prev`, a dead line pointer, or a link that VACUUM
/// cleared since the walk read `v` (DESIGN.md, "VACUUM"). VACUUM clears a link before it frees
/// the slot the link named, so the slot may hold another row's version, or nothing, by the time
/// the walk reads it. What the walk read is the version `v` replaced if that version's `next`
/// names `tid` (the common case: an update's chain, no second read); otherwise it is checked
/// against `v`'s link, read again after it: the same link means VACUUM had not cleared it yet,
/// so the version read was the one it named.
///
/// # Errors
/// Corruption if `v`'s `prev` names no tuple and `v` still links to it; I/O errors.
pub fn prev_version(
    st: &Storage,
    rel: &Relation,
    tid: Tid,
    v: &Version,
) -> Result<Option<(Tid, Version)>> {
    let prev = v.prev;
    if !prev.is_valid() {
        return Ok(None);
    }
    let got = fetch_live(st, rel, prev);
    // A heap-only version's `prev` is the version it replaced on its page, which pruning keeps
    // while anyone walks back to it: the walk goes on from `v` only if `v`'s `xmin` is not
    // visible to it (or aborted, read after `v` was found as its chain's head with that
    // update still running, or reached from a version its own transaction went on to write),
    // so the replaced version's `xmax` is not committed at or below the horizon. (Its `next`
    // may name another version by now: `v`'s update aborted and a later one replaced it; and
    // pruning removes `v` itself at once if its transaction aborted without stamping it, so
    // the general recheck below, which reads `v` again, would find its slot freed.)
    if v.flags & HEAP_ONLY_TUPLE != 0 && prev.block == tid.block {
        return Ok(got?.map(|p| (prev, p)));
    }
    match &got {
        Ok(Some(p)) if p.next == tid => return Ok(got?.map(|p| (prev, p))),
        Ok(None) => return Ok(None),
        Err(e) if e.kind != walnut_common::ErrorKind::Corruption => return got.map(|_| None),
        _ => {}
    }
    // `v` itself may be gone by now (pruned after VACUUM cleared its link): then so is the
    // link. Anything but a corruption error is an error.
    let still = match fetch_live(st, rel, tid) {
        Ok(Some(again)) => again.prev == prev,
        Ok(None) => false,
        Err(e) if e.kind == walnut_common::ErrorKind::Corruption => false,
        Err(e) => return Err(e),
    };
    if !still {
        return Ok(None);
    }
    Ok(got?.map(|p| (prev, p)))
}

/// Walks the version chain that an index entry naming `head` reaches ([`chain_head`]) back to
/// the version visible to `snap`. Returns it with its TID, or `None` if no version is visible
/// or the visible one is deleted.
///
/// # Errors
/// Corruption and I/O errors.
pub fn visible_version(
    st: &Storage,
    rel: &Relation,
    head: Tid,
    snap: &Snapshot,
) -> Result<Option<(Tid, Version)>> {
    let Some((mut tid, mut v)) = chain_head(st, rel, head)? else {
        return Ok(None);
    };
    for _ in 0..1_000_000 {
        if st.xact.visible(snap, v.xmin) {
            if v.xmax.is_valid() && st.xact.visible(snap, v.xmax) {
                return Ok(None);
            }
            return Ok(Some((tid, v)));
        }
        match prev_version(st, rel, tid, &v)? {
            Some((t, p)) => (tid, v) = (t, p),
            None => return Ok(None),
        }
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
    assert_writer(st, xid);
    assert!(tid.is_valid(), "delete of an invalid TID");
    let pin = st.pool.pin(rel, tid.block, ReadMode::Normal)?;
    let mut p = pin.write();
    let i = tuple_index(&p, tid.slot)?;
    if let Some(c) = check_xmax(st, page::item(&p, i).expect("checked"), xid) {
        return Ok(c);
    }
    set_xmax_next(
        page::item_mut(&mut p, i).expect("checked"),
        xid,
        Tid::INVALID,
        false,
    );
    note_prunable(&pin, xid);
    let item = page::item(&p, i).expect("checked");
    assert_eq!(header_xmax(item), xid, "xmax after delete");
    assert!(!header_next(item).is_valid(), "next link after delete");
    let end = st.log_change(&[&pin], &mut |redo| {
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
    Ok(WriteCheck::Done(tid))
}

/// Replaces the version at `old` with a new version holding `data`, for `xid`, if nobody else
/// holds the row. The new version links back to `old`. If it fits on `old`'s page it goes
/// there. `entry` is what the row's index entry named when the caller read it, after its xid
/// was assigned (`None`: no index, or the update changes the key): if it leads to `old`
/// ([`hot_head`]) and nobody has stamped `old` since (`xmax` empty), the new version is
/// heap-only, the entry stays on the chain's root, and the update returns `HeapOnly(new)`: the
/// caller does not move the entry (module documentation, "Same-page updates"). Otherwise it
/// returns `Done(new)` and the caller moves the entry to `new`.
///
/// Every move of a live row's entry stamps the row's newest version first (an update of it,
/// or a delete before an insert of its key), and a stamp is never taken back (an aborted one
/// is frozen as `Xid::ABORTED`), so the entry cannot have moved between the caller's read and
/// this check if `xmax` is still empty.
///
/// # Errors
/// 54000 for oversized rows; I/O and corruption errors.
pub fn update(
    st: &Storage,
    rel: &Relation,
    old: Tid,
    xid: Xid,
    data: &[u8],
    entry: Option<Tid>,
) -> Result<WriteCheck> {
    assert_writer(st, xid);
    assert!(old.is_valid(), "update of an invalid TID");
    check_row_size(data.len())?;
    let mut tuple = build_tuple(xid, Some(old), data);
    // Same page if it fits (updates may use the space fillfactor keeps free).
    {
        let pin = st.pool.pin(rel, old.block, ReadMode::Normal)?;
        let mut p = pin.write();
        let i = tuple_index(&p, old.slot)?;
        if let Some(c) = check_xmax(st, page::item(&p, i).expect("checked"), xid) {
            return Ok(c);
        }
        // The version being replaced is visible to us, so pruning keeps it, at its index.
        if !page::fits(&p, tuple.len()) && prune(st, rel, &pin, &mut p)? > 0 {
            assert_eq!(
                tuple_index(&p, old.slot).ok(),
                Some(i),
                "pruning moved a live version"
            );
        }
        if page::fits(&p, tuple.len()) {
            let unstamped = !header_xmax(page::item(&p, i).expect("checked")).is_valid();
            let aborted = aborted_in(st);
            let hot = unstamped
                && entry.is_some_and(|e| {
                    e.block == old.block
                        && matches!(hot_head(&p, e.block, e.slot, &aborted), Ok(Some(h)) if h == i)
                });
            set_header_flag(&mut tuple, HEAP_ONLY_TUPLE, hot);
            let new_slot = page::place_item(&mut p, &tuple) as u16 + 1;
            assert_placed(&p, new_slot, &tuple);
            let new = Tid {
                block: old.block,
                slot: new_slot,
            };
            set_xmax_next(page::item_mut(&mut p, i).expect("checked"), xid, new, hot);
            note_prunable(&pin, xid);
            assert_update_links(
                page::item(&p, i).expect("checked"),
                page::item(&p, new_slot as usize - 1).expect("appended"),
                old,
                new,
                xid,
            );
            let end = st.log_change(&[&pin], &mut |redo| {
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
            return Ok(if hot {
                WriteCheck::HeapOnly(new)
            } else {
                WriteCheck::Done(new)
            });
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
        if past_a_cut(rel, tpin.tag.block) {
            continue;
        }
        let i = tuple_index(&op, old.slot)?;
        if let Some(c) = check_xmax(st, page::item(&op, i).expect("checked"), xid) {
            return Ok(c);
        }
        let will_init = page::is_new(&tp);
        if will_init {
            page::init(&mut tp, PageKind::Heap, 0);
        } else if page::kind(&tp) != Some(PageKind::Heap) {
            return Err(not_a_heap_page(rel, tpin.tag.block, &tp));
        }
        if !page::fits(&tp, tuple.len())
            && !(prune(st, rel, &tpin, &mut tp)? > 0 && page::fits(&tp, tuple.len()))
        {
            rel.fsm.record(tpin.tag.block, page::free_space(&tp));
            drop((tp, op));
            skip_full_page(rel, tpin.tag.block);
            continue;
        }
        let new_slot = page::place_item(&mut tp, &tuple) as u16 + 1;
        assert_placed(&tp, new_slot, &tuple);
        let new = Tid {
            block: tpin.tag.block,
            slot: new_slot,
        };
        // Two pages: the WAL record names the new page as block 1.
        assert_ne!(new.block, old.block, "two-page update onto one page");
        set_xmax_next(
            page::item_mut(&mut op, i).expect("checked"),
            xid,
            new,
            false,
        );
        note_prunable(&opin, xid);
        assert_update_links(
            page::item(&op, i).expect("checked"),
            page::item(&tp, new_slot as usize - 1).expect("appended"),
            old,
            new,
            xid,
        );
        let end = st.log_change(&[&opin, &tpin], &mut |redo| {
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
        return Ok(WriteCheck::Done(new));
    }
}

/// Pruning's counters since start-up.
#[derive(Debug, Default)]
pub struct PruneStats {
    /// `PRUNE` records logged (pages pruned).
    pub records: std::sync::atomic::AtomicU64,
    /// Versions removed (line pointers made dead or unused).
    pub versions: std::sync::atomic::AtomicU64,
    /// Of the pages pruned, those a reader pruned (a seq scan's or an index lookup's read,
    /// not a write that needed room).
    pub on_read: std::sync::atomic::AtomicU64,
}

/// What pruning a page removes: line-pointer indexes (0-based) to mark dead and unused, and
/// the `xmax`es of the versions removed (a standby's conflicts; ascending, distinct).
#[derive(Debug, Default, PartialEq, Eq)]
struct PrunePlan {
    dead: Vec<u16>,
    unused: Vec<u16>,
    /// (root, target) line-pointer indexes: a root made, or moved as, a redirect.
    redirects: Vec<(u16, u16)>,
    conflicts: Vec<Xid>,
}

/// Decides what pruning `p` at horizon `horizon` (a CSN) removes (module documentation). In a
/// table without an index (`unindexed`, which VACUUM knows) nothing follows `prev` links, so
/// an aborted version goes even when it replaced another.
fn plan_prune(
    st: &Storage,
    p: &PageBuf,
    block: BlockNumber,
    horizon: u64,
    unindexed: bool,
) -> PrunePlan {
    let mut plan = PrunePlan::default();
    let n = page::slot_count(p);
    // Same-page chains first, from their roots: the line pointer an index entry names stays
    // (a redirect) while its row has versions on the page (DESIGN.md, "Same-page updates").
    // Always, even if the caller found no index: one may have been added since it looked (the
    // flags exist only in tables with one).
    let mut in_chain = vec![false; n];
    plan_hot_chains(st, p, block, horizon, &mut plan, &mut in_chain);
    for i in 0..n {
        if in_chain[i] {
            continue;
        }
        let Some(item) = page::item(p, i).filter(|it| has_whole_header(it)) else {
            continue;
        };
        let heap_only = header_flags(item) & HEAP_ONLY_TUPLE != 0;
        match st.xact.status(header_xmin(item)) {
            XidStatus::Aborted => {
                // A heap-only version of an aborted update that its transaction did not go on
                // to change: no entry names it, no chain walk goes past an aborted updater
                // ([`hot_successor`]), and no version links to it. Once its transaction
                // stamped it (a delete, or another update), a version that transaction
                // inserted or placed elsewhere may link to it with `prev`, and an entry may
                // name that version: it stays, as other aborted versions that replaced one do.
                if heap_only && !header_xmax(item).is_valid() {
                    plan.unused.push(i as u16);
                } else if unindexed || !header_prev(item).is_valid() {
                    plan.dead.push(i as u16);
                }
                continue;
            }
            XidStatus::InProgress => continue,
            XidStatus::Committed(_) => {}
        }
        let xmax = header_xmax(item);
        if !xmax.is_valid() {
            continue;
        }
        if let XidStatus::Committed(csn) = st.xact.status(xmax) {
            if csn <= horizon {
                if header_next(item).is_valid() {
                    plan.unused.push(i as u16);
                } else {
                    plan.dead.push(i as u16);
                }
                plan.conflicts.push(xmax);
            }
        }
    }
    plan.conflicts.sort_unstable();
    plan.conflicts.dedup();
    plan
}

/// [`plan_prune`]'s first part: for each root of a same-page chain on `p` (a version replaced by
/// a heap-only one, or a redirect), the chain's members that are removable (replaced or
/// deleted by a transaction committed at or below `horizon`; always a prefix of the chain).
/// If some member stays, the root becomes (or stays) a redirect to the first that does and
/// the removable heap-only members become unused. If none stays, the row left the page (the
/// last member was replaced by an update that moved it, which pointed the index entry at the
/// new version): all become unused; or it was deleted: the root becomes dead (the entry names
/// it until VACUUM), and so does the last member (a later insert of the key may link to it
/// with `prev`, which VACUUM clears), the others unused. Marks every member decided here in
/// `in_chain`, so that the per-tuple rules skip them.
fn plan_hot_chains(
    st: &Storage,
    p: &PageBuf,
    block: BlockNumber,
    horizon: u64,
    plan: &mut PrunePlan,
    in_chain: &mut [bool],
) {
    let aborted = aborted_in(st);
    let removable = |i: usize| {
        let xmax = header_xmax(page::item(p, i).expect("a chain member"));
        match st.xact.status(xmax) {
            XidStatus::Committed(csn) if xmax.is_valid() && csn <= horizon => Some(xmax),
            _ => None,
        }
    };
    for r in 0..page::slot_count(p) {
        let start = match page::redirect_target(p, r) {
            Some(t) => t,
            None => match page::item(p, r) {
                Some(it)
                    if has_whole_header(it)
                        && header_flags(it) & HEAP_ONLY_TUPLE == 0
                        && hot_successor(p, block, r, &aborted).is_some() =>
                {
                    r
                }
                _ => continue,
            },
        };
        if page::item(p, start).is_none_or(|it| !has_whole_header(it)) {
            continue; // a redirect to no tuple: `verify` reports it; leave it be
        }
        let mut members = vec![start];
        while let Some(j) = hot_successor(p, block, *members.last().expect("one"), &aborted) {
            if members.len() > page::slot_count(p) {
                break; // a cycle: not ours to decide
            }
            members.push(j);
        }
        let gone: Vec<Xid> = members.iter().map_while(|&m| removable(m)).collect();
        for &m in &members {
            in_chain[m] = true;
        }
        in_chain[r] = true;
        if gone.is_empty() {
            continue;
        }
        plan.conflicts.extend_from_slice(&gone);
        let heap_only = |m: usize| m != r;
        if let Some(&keep) = members.get(gone.len()) {
            if page::redirect_target(p, r) != Some(keep) {
                plan.redirects.push((r as u16, keep as u16));
            }
            plan.unused.extend(
                members[..gone.len()]
                    .iter()
                    .filter(|&&m| heap_only(m))
                    .map(|&m| m as u16),
            );
            continue;
        }
        let last = *members.last().expect("one");
        let deleted = !header_next(page::item(p, last).expect("a member")).is_valid();
        if deleted {
            plan.dead.push(r as u16);
        } else {
            plan.unused.push(r as u16);
        }
        for &m in &members {
            if !heap_only(m) {
                continue;
            }
            if deleted && m == last {
                plan.dead.push(m as u16);
            } else {
                plan.unused.push(m as u16);
            }
        }
    }
}

/// Marks the plan's line pointers and compacts the page (shared by [`prune`] and redo, so both
/// leave the same bytes): redirects first, then dead, then unused.
fn apply_prune(p: &mut PageBuf, dead: &[u16], unused: &[u16], redirects: &[(u16, u16)]) {
    for &(i, t) in redirects {
        page::set_redirect(p, i as usize, t as usize);
    }
    for &i in dead {
        page::set_dead(p, i as usize);
    }
    for &i in unused {
        page::set_unused(p, i as usize);
    }
    page::compact(p);
}

/// Prunes heap page `p` of `rel`, pinned as `pin` and exclusively latched by the caller: removes
/// the versions no snapshot can see any more, compacts the page and logs a `PRUNE` record
/// (module documentation; PostgreSQL's `heap_page_prune_and_freeze`). Does nothing on a hot
/// standby (replay prunes there), to the catalog (its cache reads it with snapshots of its
/// own), or when nothing is removable. Returns the bytes of item space freed.
///
/// # Errors
/// Corruption if `p` is not a heap page; the WAL insert's errors (as for any page change).
pub fn prune(st: &Storage, rel: &Relation, pin: &Pinned<'_>, p: &mut PageBuf) -> Result<usize> {
    Ok(prune_counted(st, rel, pin, p, false)?.0)
}

/// [`prune`], returning the bytes freed and the versions removed; `unindexed` as
/// [`plan_prune`].
fn prune_counted(
    st: &Storage,
    rel: &Relation,
    pin: &Pinned<'_>,
    p: &mut PageBuf,
    unindexed: bool,
) -> Result<(usize, usize)> {
    if rel.id == walnut_common::RelFileId::CATALOG || st.in_recovery() || page::is_new(p) {
        return Ok((0, 0));
    }
    if page::kind(p) != Some(PageKind::Heap) {
        return Err(not_a_heap_page(rel, pin.tag.block, p));
    }
    let horizon = st.xact.horizon();
    let plan = plan_prune(st, p, pin.tag.block, horizon, unindexed);
    if plan.dead.is_empty() && plan.unused.is_empty() && plan.redirects.is_empty() {
        pin.set_prune_xid(next_prune_xid(st, p, horizon));
        return Ok((0, 0));
    }
    // The record (with a full-page image, and its xids) must find room in the WAL before the
    // page changes: on a full disk pruning is skipped, and the statement that wanted room
    // fails (53100) where it checks for its own records, or extends the relation.
    if !has_room_for(st, &plan.conflicts) {
        // No reader retries on every read while the disk is full; the next stamp sets it.
        pin.set_prune_xid(0);
        return Ok((0, 0));
    }
    // Roots that become redirects are versions removed whole, as the unused ones are.
    let roots = plan
        .redirects
        .iter()
        .filter(|&&(r, _)| page::item(p, r as usize).is_some())
        .count();
    let before = page::free_space(p);
    apply_prune(p, &plan.dead, &plan.unused, &plan.redirects);
    let freed = page::free_space(p) - before;
    pin.set_prune_xid(next_prune_xid(st, p, horizon));
    let mut d = Vec::with_capacity(
        6 + 2 * (plan.dead.len() + plan.unused.len()) + 4 * plan.redirects.len(),
    );
    d.extend_from_slice(&(plan.dead.len() as u16).to_le_bytes());
    d.extend_from_slice(&(plan.unused.len() as u16).to_le_bytes());
    for &i in plan.dead.iter().chain(&plan.unused) {
        d.extend_from_slice(&(i + 1).to_le_bytes());
    }
    d.extend_from_slice(&(plan.redirects.len() as u16).to_le_bytes());
    for &(r, t) in &plan.redirects {
        d.extend_from_slice(&(r + 1).to_le_bytes());
        d.extend_from_slice(&(t + 1).to_le_bytes());
    }
    log_with_conflicts(st, rel, pin, p, HEAP_PRUNE, &d, &plan.conflicts)?;
    st.prune_stats.records.fetch_add(1, Ordering::Relaxed);
    st.table_stats
        .pruned(rel.id, (plan.unused.len() + roots) as u64);
    let removed = plan.dead.len() + plan.unused.len() + roots;
    st.prune_stats
        .versions
        .fetch_add(removed as u64, Ordering::Relaxed);
    Ok((freed, removed))
}

/// Pages are pruned on a read (a seq scan's, an index lookup's) when less than this much room
/// is left on them, bytes (PostgreSQL's `heap_page_prune_opt`: `BLCKSZ / 10`, or the
/// fillfactor's reserve if larger; walnut does not consult the fillfactor here).
pub const PRUNE_ON_READ_BELOW: usize = BLCKSZ / 10;

/// Notes on the page's prune hint that `xid` stamped an `xmax` on it (PostgreSQL's
/// `PageSetPrunable`): the hint keeps the oldest such xid. Under the page's exclusive latch.
fn note_prunable(pin: &Pinned<'_>, xid: Xid) {
    let cur = pin.prune_xid();
    if cur == 0 || xid.0 < cur {
        pin.set_prune_xid(xid.0);
    }
}

/// The prune hint a page keeps after pruning at `horizon`: the oldest `xmax` left on it that
/// a later prune could act on (its transaction in progress, or committed after `horizon`), or
/// 0 if none is (PostgreSQL's `heap_prune_record_prunable`). An aborted `xmax` never makes
/// its version removable, so it sets no hint.
fn next_prune_xid(st: &Storage, p: &PageBuf, horizon: u64) -> u64 {
    let mut oldest = 0u64;
    for i in 0..page::slot_count(p) {
        let Some(item) = page::item(p, i).filter(|it| has_whole_header(it)) else {
            continue;
        };
        let xmax = header_xmax(item);
        if !xmax.is_valid() || xmax == Xid::ABORTED {
            continue;
        }
        let pending = match st.xact.status(xmax) {
            XidStatus::InProgress => true,
            XidStatus::Committed(csn) => csn > horizon,
            XidStatus::Aborted => false,
        };
        if pending && (oldest == 0 || xmax.0 < oldest) {
            oldest = xmax.0;
        }
    }
    oldest
}

/// Whether a reader holding page `p` (pinned as `pin`, latched shared) should prune it
/// before it reads ([`prune_on_read`]): it has less than [`PRUNE_ON_READ_BELOW`] bytes of
/// room, and its prune hint names a transaction that has ended, committed at or below a
/// recent horizon (`XactManager::recent_horizon`) or aborted. Cheap: an atomic load in the
/// common case (no hint), a status lookup otherwise. PostgreSQL's `heap_page_prune_opt`
/// tests (`PageIsPrunable` and the free-space test).
fn worth_pruning_on_read(st: &Storage, rel: &Relation, pin: &Pinned<'_>, p: &PageBuf) -> bool {
    page::free_space(p) < PRUNE_ON_READ_BELOW
        && rel.id != walnut_common::RelFileId::CATALOG
        && hint_ended(st, pin)
}

/// Whether the page's prune hint names a transaction that has ended: aborted, or committed at
/// or below a recent horizon. False without a hint.
fn hint_ended(st: &Storage, pin: &Pinned<'_>) -> bool {
    let x = pin.prune_xid();
    if x == 0 {
        return false;
    }
    match st.xact.status(Xid(x)) {
        XidStatus::InProgress => false,
        XidStatus::Aborted => true,
        XidStatus::Committed(csn) => csn <= st.xact.recent_horizon(),
    }
}

/// Prunes the page of `pin` for a reader that found it worth it ([`worth_pruning_on_read`])
/// and let its shared latch go: only if the exclusive latch is free now (a reader never
/// waits for it: PostgreSQL's `ConditionalLockBuffer`; no cleanup lock is needed, as pruning
/// keeps every version a pinned reader may hold a TID of), and only if the page still has too
/// little room and a hint that has ended (another reader may have pruned it meanwhile).
/// Returns whether it pruned.
///
/// # Errors
/// As [`prune`].
fn prune_on_read(st: &Storage, rel: &Relation, pin: &Pinned<'_>) -> Result<bool> {
    let Some(mut p) = pin.try_write() else {
        return Ok(false);
    };
    if page::free_space(&p) >= PRUNE_ON_READ_BELOW || !hint_ended(st, pin) {
        return Ok(false);
    }
    let freed = prune(st, rel, pin, &mut p)?;
    if freed > 0 {
        st.prune_stats.on_read.fetch_add(1, Ordering::Relaxed);
    }
    Ok(freed > 0)
}

/// Sets the `prev` link of the version at `tid`, which transaction `xid` inserted and which no
/// index entry names yet, to `prev`, and logs it (`LINK`). An insert chooses its new version's
/// `prev` from the index entry it read before inserting; the uniqueness check may then find
/// another version at the head of the key's chain (a concurrent update replaced the one it
/// read, and its transaction then deleted the row), which the entry is about to be pointed
/// away from: the new version must link to that one, or its `prev` would name a version that
/// pruning may remove and whose slot it may reuse (DESIGN.md, "Pruning").
///
/// # Errors
/// Corruption if `tid` holds no version of `xid`, or one without a `prev` field; I/O errors;
/// the WAL insert's.
pub fn relink_prev(st: &Storage, rel: &Relation, tid: Tid, prev: Tid, xid: Xid) -> Result<()> {
    assert_writer(st, xid);
    let pin = st.pool.pin(rel, tid.block, ReadMode::Normal)?;
    let mut p = pin.write();
    let i = tuple_index(&p, tid.slot)?;
    let item = page::item_mut(&mut p, i).expect("checked");
    if header_xmin(item) != xid {
        return Err(Error::corruption(format!(
            "relinking ({},{}) of transaction {}, which holds a version of transaction {}",
            tid.block.0,
            tid.slot,
            xid.0,
            header_xmin(item).0
        )));
    }
    prev_field(item)
        .ok_or_else(|| {
            Error::corruption(format!(
                "relinking ({},{}), a version without a prev field",
                tid.block.0, tid.slot
            ))
        })?
        .copy_from_slice(&prev.to_bytes());
    let end = st.log_change(&[&pin], &mut |redo| {
        let mut d = Vec::with_capacity(2 + Tid::SIZE);
        d.extend_from_slice(&tid.slot.to_le_bytes());
        d.extend_from_slice(&prev.to_bytes());
        Record {
            rmgr: RM_HEAP,
            info: HEAP_LINK,
            xid,
            flags: 0,
            blocks: vec![st.block_ref(rel.id, tid.block, &p, redo, false, d)],
            main_data: vec![],
        }
    })?;
    page::set_lsn(&mut p, end);
    Ok(())
}

/// Prunes block `block` of `rel` now, whether or not it is full ([`prune`] under the page's
/// exclusive latch). Returns the bytes of item space freed.
///
/// # Errors
/// I/O errors reading the page; as [`prune`].
pub fn prune_block(st: &Storage, rel: &Relation, block: BlockNumber) -> Result<usize> {
    let pin = st.pool.pin(rel, block, ReadMode::Normal)?;
    let mut p = pin.write();
    prune(st, rel, &pin, &mut p)
}

/// What VACUUM's first pass found on a heap page ([`vacuum_scan_page`]).
#[derive(Debug, Default)]
pub struct PageScan {
    /// Versions pruning removed now.
    pub removed: usize,
    /// Slots (1-based) of the page's dead line pointers, after pruning.
    pub dead: Vec<u16>,
    /// Versions left that some snapshot may see: live, or inserted or deleted by a
    /// transaction in progress.
    pub live: u64,
    /// Versions deleted or replaced by a committed transaction that a snapshot still sees
    /// (PostgreSQL's "dead but not yet removable").
    pub recently_dead: u64,
    /// Versions whose `xmin` or `xmax` was frozen now.
    pub frozen: u64,
    /// The oldest normal xid a version on the page still names after freezing (`None`: none
    /// does).
    pub oldest_xid: Option<Xid>,
}

/// Whether the WAL has room for a `PRUNE` or `FREEZE` record naming `conflicts` (with a
/// full-page image): checked before the page changes, so that on a full disk the page is left
/// as it is.
fn has_room_for(st: &Storage, conflicts: &[Xid]) -> bool {
    st.wal()
        .check_space(2 * BLCKSZ as u64 + 8 * conflicts.len() as u64)
        .is_ok()
}

/// Logs the change just made to page `p` of `rel` (pinned as `pin`, exclusively latched) as a
/// `PRUNE` or `FREEZE` record (`info`): block 0's data `data`, main data the xids `conflicts`
/// (a standby's snapshot conflicts: [`snapshot_conflicts`]); sets the page LSN and marks it
/// dirty.
///
/// # Errors
/// The WAL insert's.
fn log_with_conflicts(
    st: &Storage,
    rel: &Relation,
    pin: &Pinned<'_>,
    p: &mut PageBuf,
    info: u8,
    data: &[u8],
    conflicts: &[Xid],
) -> Result<()> {
    let block = pin.tag.block;
    let end = st.log_change(&[&pin], &mut |redo| Record {
        rmgr: RM_HEAP,
        info,
        xid: Xid::INVALID,
        flags: 0,
        blocks: vec![st.block_ref(rel.id, block, p, redo, false, data.to_vec())],
        main_data: conflicts.iter().flat_map(|x| x.0.to_le_bytes()).collect(),
    })?;
    page::set_lsn(p, end);
    Ok(())
}

/// What freezing a page changes: (line-pointer index, `FREEZE_*` bits), the xids frozen as
/// committed (ascending, distinct), and the oldest normal xid left.
#[derive(Debug, Default, PartialEq, Eq)]
struct FreezePlan {
    items: Vec<(u16, u8)>,
    conflicts: Vec<Xid>,
    oldest: Option<Xid>,
}

/// Decides what freezing `p` changes (DESIGN.md, "Freezing"; PostgreSQL's
/// `heap_prepare_freeze_tuple`): an xid below `limit` whose commit is visible to every
/// snapshot (CSN at or below `horizon`) becomes `Xid::FROZEN`; one that aborted becomes
/// `Xid::ABORTED` (`xmin`, and `xmax`, whose `next` is then cleared). Anything else stays, and the
/// oldest such xid is reported.
fn plan_freeze(st: &Storage, p: &PageBuf, horizon: u64, limit: Xid) -> FreezePlan {
    let mut plan = FreezePlan::default();
    let normal = |x: Xid| x >= Xid::FIRST_NORMAL;
    for i in 0..page::slot_count(p) {
        let Some(item) = page::item(p, i).filter(|it| has_whole_header(it)) else {
            continue;
        };
        let mut bits = 0;
        let keep = |x: Xid, plan: &mut FreezePlan| {
            plan.oldest = Some(plan.oldest.map_or(x, |o| o.min(x)));
        };
        let xmin = header_xmin(item);
        if normal(xmin) {
            match st.xact.status(xmin) {
                XidStatus::Committed(csn) if csn <= horizon && xmin < limit => {
                    bits |= FREEZE_XMIN_COMMITTED;
                    plan.conflicts.push(xmin);
                }
                XidStatus::Aborted if xmin < limit => bits |= FREEZE_XMIN_ABORTED,
                _ => keep(xmin, &mut plan),
            }
        }
        let xmax = header_xmax(item);
        if normal(xmax) {
            match st.xact.status(xmax) {
                XidStatus::Committed(csn) if csn <= horizon && xmax < limit => {
                    bits |= FREEZE_XMAX_COMMITTED;
                    plan.conflicts.push(xmax);
                }
                XidStatus::Aborted if xmax < limit => bits |= FREEZE_XMAX_ABORTED,
                _ => keep(xmax, &mut plan),
            }
        }
        if bits != 0 {
            plan.items.push((i as u16, bits));
        }
    }
    plan.conflicts.sort_unstable();
    plan.conflicts.dedup();
    plan
}

/// Applies freeze entries to `p` (shared by [`freeze_page`] and redo, so both leave the same
/// bytes). The caller checked every index names a tuple.
fn apply_freeze(p: &mut PageBuf, items: &[(u16, u8)]) {
    for &(i, bits) in items {
        let item = page::item_mut(p, i as usize).expect("checked");
        if bits & FREEZE_XMIN_COMMITTED != 0 {
            item[XMIN_AT..XMAX_AT].copy_from_slice(&xid_field(Xid::FROZEN));
        }
        if bits & FREEZE_XMIN_ABORTED != 0 {
            item[XMIN_AT..XMAX_AT].copy_from_slice(&xid_field(Xid::ABORTED));
        }
        if bits & FREEZE_XMAX_COMMITTED != 0 {
            item[XMAX_AT..NEXT_AT].copy_from_slice(&xid_field(Xid::FROZEN));
        }
        if bits & FREEZE_XMAX_ABORTED != 0 {
            // `Xid::ABORTED`, not empty: an empty `xmax` tells [`update`] that nobody stamped
            // the version since the caller read its index entry.
            item[XMAX_AT..NEXT_AT].copy_from_slice(&xid_field(Xid::ABORTED));
            item[NEXT_AT..FLAGS_AT].copy_from_slice(&Tid::INVALID.to_bytes());
            set_header_flag(item, HEAP_HOT_UPDATED, false);
        }
    }
}

/// Freezes heap page `p` of `rel`, pinned as `pin` and exclusively latched by the caller
/// ([`plan_freeze`] with xids below `limit`), and logs a `FREEZE` record if anything changed.
/// Returns (versions changed, the oldest normal xid left on the page). On a full WAL disk it
/// changes nothing, and reports the oldest xid as if nothing could be frozen.
///
/// # Errors
/// Corruption if `p` is not a heap page; the WAL insert's.
fn freeze_page(
    st: &Storage,
    rel: &Relation,
    pin: &Pinned<'_>,
    p: &mut PageBuf,
    limit: Xid,
) -> Result<(u64, Option<Xid>)> {
    if page::kind(p) != Some(PageKind::Heap) {
        return Err(not_a_heap_page(rel, pin.tag.block, p));
    }
    let plan = plan_freeze(st, p, st.xact.horizon(), limit);
    if plan.items.is_empty() {
        return Ok((0, plan.oldest));
    }
    if !has_room_for(st, &plan.conflicts) {
        // Nothing frozen: the oldest xid is what the page had.
        return Ok((
            0,
            plan_freeze(st, p, st.xact.horizon(), Xid::FIRST_NORMAL).oldest,
        ));
    }
    apply_freeze(p, &plan.items);
    let mut d = Vec::with_capacity(2 + 3 * plan.items.len());
    d.extend_from_slice(&(plan.items.len() as u16).to_le_bytes());
    for &(i, bits) in &plan.items {
        d.extend_from_slice(&(i + 1).to_le_bytes());
        d.push(bits);
    }
    log_with_conflicts(st, rel, pin, p, HEAP_FREEZE, &d, &plan.conflicts)?;
    Ok((plan.items.len() as u64, plan.oldest))
}

/// Redo of a `FREEZE` record: the same changes as [`freeze_page`].
fn redo_freeze(p: &mut PageBuf, data: &[u8]) -> Result<()> {
    let n = rd_u16(data, 0)? as usize;
    if data.len() != 2 + 3 * n {
        return Err(Error::corruption("heap freeze record is malformed"));
    }
    let mut items = Vec::with_capacity(n);
    for e in data[2..].chunks_exact(3) {
        let slot = u16::from_le_bytes([e[0], e[1]]);
        let i = tuple_index(p, slot)?;
        let bits = e[2];
        if bits == 0
            || bits & !FREEZE_ALL != 0
            || bits & (FREEZE_XMIN_COMMITTED | FREEZE_XMIN_ABORTED)
                == (FREEZE_XMIN_COMMITTED | FREEZE_XMIN_ABORTED)
            || bits & (FREEZE_XMAX_COMMITTED | FREEZE_XMAX_ABORTED)
                == (FREEZE_XMAX_COMMITTED | FREEZE_XMAX_ABORTED)
        {
            return Err(Error::corruption(format!(
                "heap freeze record: invalid bits {bits:#x} for slot {slot}"
            )));
        }
        items.push((i as u16, bits));
    }
    apply_freeze(p, &items);
    Ok(())
}

/// VACUUM's first pass over block `block` of `rel` (PostgreSQL's `lazy_scan_prune`): prunes it
/// ([`prune`]; of a table without an index if `unindexed`, where aborted versions go whatever
/// they replaced), freezes the xids below `freeze_limit` that it can ([`freeze_page`]), then
/// lists its dead line pointers and counts what stays, all under the page's exclusive latch.
/// A new page yields nothing.
///
/// # Errors
/// Corruption if the page is not a heap page or a tuple is truncated; I/O errors; as
/// [`prune`].
pub fn vacuum_scan_page(
    st: &Storage,
    rel: &Relation,
    block: BlockNumber,
    unindexed: bool,
    freeze_limit: Xid,
) -> Result<PageScan> {
    let pin = st.pool.pin(rel, block, ReadMode::Normal)?;
    let mut p = pin.write();
    let mut scan = PageScan::default();
    if page::is_new(&p) {
        rel.fsm.record(block, BLCKSZ);
        return Ok(scan);
    }
    scan.removed = prune_counted(st, rel, &pin, &mut p, unindexed)?.1;
    (scan.frozen, scan.oldest_xid) = freeze_page(st, rel, &pin, &mut p, freeze_limit)?;
    rel.fsm.record(block, page::free_space(&p));
    scan.dead = (0..page::slot_count(&p))
        .filter(|&i| page::is_dead(&p, i))
        .map(|i| i as u16 + 1)
        .collect();
    for t in tuples(&p, block) {
        let (_, item) = t?;
        let xmax = header_xmax(item);
        let deleted = xmax.is_valid() && matches!(st.xact.status(xmax), XidStatus::Committed(_));
        if deleted {
            scan.recently_dead += 1;
        } else if st.xact.status(header_xmin(item)) != XidStatus::Aborted {
            scan.live += 1;
        }
    }
    Ok(scan)
}

/// Collects into `out` the (TID, `prev`) of every version on block `block` whose `prev`
/// `want` selects, under the page's shared latch (VACUUM: the versions that still link to a
/// dead line pointer it is about to make unused).
///
/// # Errors
/// Corruption if the page is not a heap page or a tuple is truncated; I/O errors.
pub fn prev_links(
    st: &Storage,
    rel: &Relation,
    block: BlockNumber,
    want: &dyn Fn(Tid) -> bool,
    out: &mut Vec<(Tid, Tid)>,
) -> Result<()> {
    let pin = st.pool.pin(rel, block, ReadMode::Normal)?;
    let p = pin.read();
    if page::is_new(&p) {
        return Ok(());
    }
    if page::kind(&p) != Some(PageKind::Heap) {
        return Err(not_a_heap_page(rel, block, &p));
    }
    for t in tuples(&p, block) {
        let (i, item) = t?;
        let prev = header_prev(item);
        if prev.is_valid() && want(prev) {
            let tid = Tid {
                block,
                slot: i as u16 + 1,
            };
            out.push((tid, prev));
        }
    }
    Ok(())
}

/// Sets the `prev` of the version at `tid` to none if it still names `expect`, and logs it
/// (`LINK`, without an xid). VACUUM does this before the dead line pointer `expect` names
/// becomes unused, and a later insert may reuse its slot for another row. A slot that holds
/// no version any more (pruned meanwhile) is left alone. Returns whether it changed the page.
///
/// # Errors
/// 53100 if the WAL has no room for the record (nothing changed); I/O errors; the WAL
/// insert's.
pub fn clear_prev(st: &Storage, rel: &Relation, tid: Tid, expect: Tid) -> Result<bool> {
    st.wal().check_space(2 * BLCKSZ as u64)?;
    let pin = st.pool.pin(rel, tid.block, ReadMode::Normal)?;
    let mut p = pin.write();
    let Ok(Slot::Tuple(i)) = slot_state(&p, tid.slot) else {
        return Ok(false);
    };
    let item = page::item_mut(&mut p, i).expect("checked");
    // A version without a prev field has no link to clear (`expect` is a valid TID).
    let Some(field) = prev_field(item).filter(|f| rd_tid(f) == expect) else {
        return Ok(false);
    };
    field.copy_from_slice(&Tid::INVALID.to_bytes());
    let end = st.log_change(&[&pin], &mut |redo| {
        let mut d = Vec::with_capacity(2 + Tid::SIZE);
        d.extend_from_slice(&tid.slot.to_le_bytes());
        d.extend_from_slice(&Tid::INVALID.to_bytes());
        Record {
            rmgr: RM_HEAP,
            info: HEAP_LINK,
            xid: Xid::INVALID,
            flags: 0,
            blocks: vec![st.block_ref(rel.id, tid.block, &p, redo, false, d)],
            main_data: vec![],
        }
    })?;
    page::set_lsn(&mut p, end);
    Ok(true)
}

/// VACUUM's last heap step on block `block` of `rel` (PostgreSQL's `lazy_vacuum_heap_page`):
/// marks its dead line pointers `slots` (1-based) unused, compacts the page (unused line
/// pointers at the end of the array go) and logs `VACUUM`. The caller has removed every index
/// entry that named them and cleared every `prev` that did: nothing leads to them any more,
/// and their slots may be reused.
///
/// # Errors
/// Corruption if a slot is not a dead line pointer; 53100 if the WAL has no room for the
/// record (nothing changed); I/O errors; the WAL insert's.
pub fn vacuum_page(st: &Storage, rel: &Relation, block: BlockNumber, slots: &[u16]) -> Result<()> {
    if slots.is_empty() {
        return Ok(());
    }
    st.wal()
        .check_space(2 * BLCKSZ as u64 + 2 * slots.len() as u64)?;
    let pin = st.pool.pin(rel, block, ReadMode::Normal)?;
    let mut p = pin.write();
    apply_vacuum(&mut p, slots)?;
    rel.fsm.record(block, page::free_space(&p));
    let end = st.log_change(&[&pin], &mut |redo| {
        let mut d = Vec::with_capacity(2 + 2 * slots.len());
        d.extend_from_slice(&(slots.len() as u16).to_le_bytes());
        for s in slots {
            d.extend_from_slice(&s.to_le_bytes());
        }
        Record {
            rmgr: RM_HEAP,
            info: HEAP_VACUUM,
            xid: Xid::INVALID,
            flags: 0,
            blocks: vec![st.block_ref(rel.id, block, &p, redo, false, d)],
            main_data: vec![],
        }
    })?;
    page::set_lsn(&mut p, end);
    Ok(())
}

/// Makes dead line pointers `slots` (1-based, distinct) of heap page `p` unused and compacts
/// it; checks first, so that a failure changes nothing ([`vacuum_page`] and its redo).
fn apply_vacuum(p: &mut PageBuf, slots: &[u16]) -> Result<()> {
    if page::kind(p) != Some(PageKind::Heap) {
        return Err(Error::corruption(
            "heap vacuum of a page that is not a heap page",
        ));
    }
    for (k, &s) in slots.iter().enumerate() {
        if s == 0 || !page::is_dead(p, s as usize - 1) || slots[..k].contains(&s) {
            return Err(Error::corruption(format!(
                "heap vacuum of slot {s}, which is not a dead line pointer (or named twice)"
            )));
        }
    }
    for &s in slots {
        page::set_dead_unused(p, s as usize - 1);
    }
    page::compact(p);
    Ok(())
}

/// The xids whose commits a `PRUNE` or `FREEZE` record makes every snapshot see (its main
/// data: the `xmax`es of the versions a prune removes, empty when it removes only aborted
/// inserts; the xids a freeze replaced with `Xid::FROZEN`), or `None` for another record. A hot
/// standby's queries that do not see them all conflict with it.
///
/// # Errors
/// Corruption if the main data is not a whole number of u64s.
pub fn snapshot_conflicts(r: &Record) -> Result<Option<Vec<Xid>>> {
    if r.rmgr != RM_HEAP || (r.info != HEAP_PRUNE && r.info != HEAP_FREEZE) {
        return Ok(None);
    }
    if !r.main_data.len().is_multiple_of(8) {
        return Err(Error::corruption(format!(
            "heap {} record's main data of {} bytes is not a list of xids",
            if r.info == HEAP_PRUNE {
                "prune"
            } else {
                "freeze"
            },
            r.main_data.len()
        )));
    }
    Ok(Some(
        r.main_data
            .chunks_exact(8)
            .map(|b| Xid(u64::from_le_bytes(b.try_into().expect("8"))))
            .collect(),
    ))
}

/// Collects every version on `block` visible to `snap` (TID and row bytes) into `out`.
///
/// # Errors
/// I/O and corruption errors.
pub fn scan_block(
    st: &Storage,
    rel: &Relation,
    block: BlockNumber,
    snap: &Snapshot,
    out: &mut Vec<(Tid, Vec<u8>)>,
) -> Result<()> {
    visit_block(st, rel, block, snap, &mut |tid, row| {
        out.push((tid, row.to_vec()));
        Ok(())
    })
}

/// Calls `visit` with every version on `block` visible to `snap` (TID and row bytes), under
/// the page's shared latch: `visit` must not touch other pages.
///
/// # Errors
/// I/O and corruption errors, and `visit`'s.
pub fn visit_block(
    st: &Storage,
    rel: &Relation,
    block: BlockNumber,
    snap: &Snapshot,
    visit: &mut dyn FnMut(Tid, &[u8]) -> Result<()>,
) -> Result<()> {
    let pin = st.pool.pin(rel, block, ReadMode::Normal)?;
    let mut p = pin.read();
    if page::is_new(&p) || page::kind(&p) != Some(PageKind::Heap) {
        return Ok(());
    }
    if worth_pruning_on_read(st, rel, &pin, &p) {
        drop(p);
        prune_on_read(st, rel, &pin)?;
        p = pin.read();
    }
    let mut last_xmin: Option<(Xid, bool)> = None;
    for t in tuples(&p, block) {
        let (i, item) = t?;
        let xmin = header_xmin(item);
        // The tuples of a page mostly share their xmin (a bulk load's page has one): ask the
        // transaction status once per run of equal xmins.
        let seen = match last_xmin {
            Some((x, v)) if x == xmin => v,
            _ => {
                let v = st.xact.visible(snap, xmin);
                last_xmin = Some((xmin, v));
                v
            }
        };
        if !seen {
            continue;
        }
        let xmax = header_xmax(item);
        if xmax.is_valid() && st.xact.visible(snap, xmax) {
            continue;
        }
        let tid = Tid {
            block,
            slot: i as u16 + 1,
        };
        visit(tid, &item[header_size(item)..])?;
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
    if page::kind(p) != Some(PageKind::Heap) {
        return Err(Error::corruption(format!(
            "heap redo: adding slot {slot} to a page of kind {:?}",
            page::kind(p)
        )));
    }
    if !has_whole_header(tuple) || tuple.len() > MAX_TUPLE_SIZE {
        return Err(Error::corruption(format!(
            "heap redo: a tuple of {} bytes",
            tuple.len()
        )));
    }
    let n = page::slot_count(p);
    let reuse = slot >= 1 && page::is_unused(p, slot as usize - 1);
    if !(reuse || slot as usize == n + 1) || !page::fits(p, tuple.len()) {
        return Err(Error::corruption(format!(
            "heap redo: slot {slot} is neither unused nor the next of {n} on the page, or the tuple does not fit",
        )));
    }
    page::put_item(p, slot as usize - 1, tuple);
    Ok(())
}

fn redo_set_xmax(p: &mut PageBuf, slot: u16, xmax: Xid, next: Tid, hot: bool) -> Result<()> {
    if !xmax.is_valid() || xmax > Xid::MAX_STORED || (hot && !next.is_valid()) {
        return Err(Error::corruption(format!(
            "heap redo: an invalid xmax or next link for slot {slot}"
        )));
    }
    let i = tuple_index(p, slot)?;
    set_xmax_next(page::item_mut(p, i).expect("checked"), xmax, next, hot);
    Ok(())
}

/// Redo of a `PRUNE` record: the same marks and compaction as [`prune`].
fn redo_prune(p: &mut PageBuf, data: &[u8]) -> Result<()> {
    let (nd, nu) = (rd_u16(data, 0)? as usize, rd_u16(data, 2)? as usize);
    // Each slot names a tuple or a redirect on the page, once; a redirect's target a tuple.
    let tuple_or_redirect = |slot: u16| match slot_state(p, slot)? {
        Slot::Tuple(_) | Slot::Redirect(_) if slot > 0 => Ok(slot as usize - 1),
        _ => Err(Error::corruption(format!(
            "heap prune record names slot {slot}, which holds no tuple and is no redirect"
        ))),
    };
    let mut slots = Vec::with_capacity(nd + nu);
    for k in 0..nd + nu {
        let slot = rd_u16(data, 4 + 2 * k)?;
        let i = tuple_or_redirect(slot)?;
        if slots.contains(&(i as u16)) {
            return Err(Error::corruption(format!(
                "heap prune record names slot {slot} twice"
            )));
        }
        slots.push(i as u16);
    }
    let at = 4 + 2 * (nd + nu);
    let nr = if data.len() == at {
        0
    } else {
        rd_u16(data, at)? as usize
    };
    let mut redirects = Vec::with_capacity(nr);
    for k in 0..nr {
        let r = tuple_or_redirect(rd_u16(data, at + 2 + 4 * k)?)?;
        let t = tuple_index(p, rd_u16(data, at + 4 + 4 * k)?)?;
        if slots.contains(&(r as u16)) || slots.contains(&(t as u16)) || r == t {
            return Err(Error::corruption(format!(
                "heap prune record redirects slot {} to {}, one of them named twice",
                r + 1,
                t + 1
            )));
        }
        redirects.push((r as u16, t as u16));
    }
    // Roots distinct, and no target is a root (it must still hold its tuple when redirected to).
    for (k, &(r, _)) in redirects.iter().enumerate() {
        if redirects[..k].iter().any(|&(r2, _)| r2 == r) || redirects.iter().any(|&(_, t)| t == r) {
            return Err(Error::corruption(format!(
                "heap prune record redirects slot {} twice, or to a slot it redirects",
                r + 1
            )));
        }
    }
    if data.len() != at && data.len() != at + 2 + 4 * nr {
        return Err(Error::corruption("heap prune record has trailing bytes"));
    }
    apply_prune(p, &slots[..nd], &slots[nd..], &redirects);
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
        (HEAP_DELETE, 0) => redo_set_xmax(
            p,
            rd_u16(data, 0)?,
            Xid(rd_u64(data, 2)?),
            Tid::INVALID,
            false,
        ),
        (HEAP_UPDATE, 0) => {
            let next = Tid::from_bytes(data.get(10..16).unwrap_or(&[]))
                .ok_or_else(|| Error::corruption("heap update record is truncated"))?;
            if nblocks == 1 {
                // The new version is on this page: at the slot the record's new TID names.
                let new_slot = rd_u16(data, 16)?;
                if next.slot != new_slot {
                    return Err(Error::corruption(format!(
                        "heap update record: new TID slot {} but new slot {new_slot}",
                        next.slot
                    )));
                }
                // A heap-only new version is a same-page update's: the old one is then
                // `HEAP_HOT_UPDATED` (the flag is in the tuple the record carries).
                let tuple = &data[18..];
                let hot = has_whole_header(tuple) && header_flags(tuple) & HEAP_ONLY_TUPLE != 0;
                redo_set_xmax(p, rd_u16(data, 0)?, Xid(rd_u64(data, 2)?), next, hot)?;
                redo_add(p, new_slot, tuple)?;
            } else {
                redo_set_xmax(p, rd_u16(data, 0)?, Xid(rd_u64(data, 2)?), next, false)?;
            }
            Ok(())
        }
        (HEAP_UPDATE, 1) => redo_add(p, rd_u16(data, 0)?, &data[2..]),
        (HEAP_PRUNE, 0) => redo_prune(p, data),
        (HEAP_FREEZE, 0) => redo_freeze(p, data),
        (HEAP_VACUUM, 0) => {
            let n = rd_u16(data, 0)? as usize;
            if data.len() != 2 + 2 * n {
                return Err(Error::corruption("heap vacuum record is malformed"));
            }
            let slots: Vec<u16> = data[2..]
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
            apply_vacuum(p, &slots)
        }
        (HEAP_LINK, 0) => {
            let i = tuple_index(p, rd_u16(data, 0)?)?;
            let prev = data
                .get(2..2 + Tid::SIZE)
                .filter(|_| data.len() == 2 + Tid::SIZE)
                .and_then(Tid::from_bytes)
                .ok_or_else(|| Error::corruption("heap link record is malformed"))?;
            prev_field(page::item_mut(p, i).expect("checked"))
                .ok_or_else(|| {
                    Error::corruption("heap link record names a version without a prev field")
                })?
                .copy_from_slice(&prev.to_bytes());
            Ok(())
        }
        _ => Err(Error::corruption(format!(
            "unknown heap record info {info:#x} block {block_id}"
        ))),
    }
}

/// The page kind a heap record initializes.
pub fn init_page(p: &mut PageBuf) {
    page::init(p, PageKind::Heap, 0);
}

#[cfg(test)]
mod tests;
