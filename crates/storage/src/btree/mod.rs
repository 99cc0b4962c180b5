//! A unique B-tree over memcomparable keys (walnut_common::value::encode_key), mapping each key
//! to the TID of the newest heap version of its row. After Lehman & Yao (1981) as PostgreSQL's
//! nbtree uses it (`src/backend/access/nbtree/README`): every page has a high key and a right
//! link; internal pages' first item has an empty "minus infinity" key.
//!
//! Concurrency, simplified for v0: each index has a structure lock (`Relation::tree_lock`).
//! Searches, inserts that fit and TID updates hold it shared and latch one page at a time
//! (shared for internal pages, exclusive for the leaf they change). A split takes it exclusively,
//! so no search ever sees a half-split tree, and logs every page it changes in **one** WAL record
//! of full-page images flagged `RECORD_MULTI_BLOCK_ATOMIC`: a crash can never leave a split
//! half-done, and redo (serial or per block) restores the pages together.
//!
//! Page layout: the common slotted page (crate::page) with kind B-tree and a 16-byte trailer:
//! ```text
//! special+0  u32 right link (u32::MAX = rightmost)
//! special+4  u32 left link  (u32::MAX = leftmost)
//! special+8  u16 level      (0 = leaf)
//! special+10 u16 flags      (0)
//! special+12 u32 reserved
//! ```
//! Line pointer 0 holds the high key (empty on the rightmost page); items follow in key order.
//! Item: u16 key length, key bytes, then a 6-byte TID (leaf) or a u32 child block (internal).
//! Block 0 is the meta page: kind B-tree meta, at offset 24: u32 root block, u32 root level.
//!
//! WAL records (resource manager [`RM_BTREE`]):
//! - `INSERT`: block 0 = leaf; data = u16 line-pointer index, item.
//! - `SET_TID`: block 0 = leaf; data = u16 line-pointer index, 6-byte TID.
//! - `SMO`: full-page images of every page a split changed (and new pages, `will_init`).
//! - `NEWPAGE`: full-page image of one page written by an index build.
//! - `DELETE`: block 0 = leaf; data = u16 count, then that many u16 line-pointer indexes
//!   (ascending, none 0): the entries VACUUM removed ([`bulk_delete`]), after which the later
//!   entries shift down and the page is compacted (`page::delete_items`).
//!
//! Invariants, asserted (on in release builds) where this module writes a page, at O(1) cost
//! around the changed slot: after a leaf or parent insert, the new key sorts strictly between
//! its neighbours and below the page's high key; a split cuts between two items (both halves
//! non-empty), every key of the left half stays below its new high key (the separator) and
//! every key of the right half below the old high key, the halves link to each other and to
//! the old right sibling, and keep the level of the page split; a parent is one level above
//! its children; a TID written into a leaf is valid and reads back. What these rest on is read
//! from pages (from disk), so it is checked first with a corruption error instead: levels
//! along the descent, the key against the leaf's high key, the split page's items in order
//! below its high key, the right sibling's left link, the parent's downlink to the split page
//! (XX002), and malformed or missing items (XX001). Redo checks its records the same way.
//!
//! Files: this one holds the page format and its accessors, the descent, lookups, inserts that
//! fit, TID updates, range scans and redo; `split.rs` the split of a full page (a structure
//! modification) and the checks and assertions around it; `build.rs` the bulk build of a new
//! index; `tests.rs` the unit tests.

use crate::aio::IndexReadAhead;
use crate::bufpool::ReadMode;
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::Relation;
use crate::Storage;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use walnut_common::{BlockNumber, Error, RelFileId, Result, SqlState, Tid, Xid, BLCKSZ};
use walnut_wal::{Record, RmgrId};

mod build;
mod split;
#[cfg(test)]
mod tests;

pub use build::{build, SortedEntries, BUILD_BATCH_PAGES};
use split::split;

/// B-tree resource manager id.
pub const RM_BTREE: RmgrId = RmgrId(3);
/// Leaf insert.
pub const BTREE_INSERT: u8 = 0x00;
/// TID replacement in a leaf item.
pub const BTREE_SET_TID: u8 = 0x10;
/// Split (structure modification), all images.
pub const BTREE_SMO: u8 = 0x20;
/// Page written by an index build, image.
pub const BTREE_NEWPAGE: u8 = 0x30;
/// Entries removed by VACUUM.
pub const BTREE_DELETE: u8 = 0x40;

const SPECIAL_SIZE: usize = page::BTREE_SPECIAL_SIZE;
const NONE: u32 = u32::MAX;
/// Longest key, bytes (PostgreSQL's limit is about a third of a page).
pub const MAX_KEY_SIZE: usize = 2000;
/// Leaf fill during builds, percent (PostgreSQL's default B-tree fillfactor is 90).
const BUILD_FILL: usize = 90;
/// Most levels a descent follows (and so the highest root level plus one).
const MAX_DEPTH: usize = 64;
/// Largest item: u16 key length, key, TID (a leaf's; a downlink's 4-byte block is smaller).
const MAX_ITEM_SIZE: usize = 2 + MAX_KEY_SIZE + Tid::SIZE;

// The trailer: right link, left link, level, flags, reserved.
const _: () = assert!(4 + 4 + 2 + 2 + 4 == SPECIAL_SIZE);
// Key lengths are u16 item fields; downlinks are no larger than leaf items.
const _: () = assert!(MAX_KEY_SIZE <= u16::MAX as usize);
const _: () = assert!(4 <= Tid::SIZE);
// A page holding one item and a high key has room for one more item of the largest size, so
// a full page has at least two items to split between, and splitting (then retrying) ends.
const _: () = assert!(
    page::PAGE_HEADER_SIZE
        + SPECIAL_SIZE
        + 3 * page::LINE_POINTER_SIZE
        + (2 + MAX_KEY_SIZE)
        + 2 * MAX_ITEM_SIZE
        <= BLCKSZ
);
const _: () = assert!(BUILD_FILL > 0 && BUILD_FILL <= 100);
// The meta page's root block and level lie below its (empty) line-pointer array's end.
const _: () = assert!(page::PAGE_HEADER_SIZE + 8 <= BLCKSZ);

fn special(p: &PageBuf) -> usize {
    page::special_offset(p)
}
/// Right sibling, or `None` on the rightmost page.
pub fn right_link(p: &PageBuf) -> Option<BlockNumber> {
    let s = special(p);
    let v = u32::from_le_bytes(p[s..s + 4].try_into().expect("4"));
    (v != NONE).then_some(BlockNumber(v))
}
/// Left sibling, or `None` on the leftmost page.
pub fn left_link(p: &PageBuf) -> Option<BlockNumber> {
    let s = special(p);
    let v = u32::from_le_bytes(p[s + 4..s + 8].try_into().expect("4"));
    (v != NONE).then_some(BlockNumber(v))
}
/// Level (0 = leaf).
pub fn level(p: &PageBuf) -> u16 {
    let s = special(p);
    u16::from_le_bytes([p[s + 8], p[s + 9]])
}
fn set_links(p: &mut PageBuf, right: Option<BlockNumber>, left: Option<BlockNumber>) {
    let s = special(p);
    p[s..s + 4].copy_from_slice(&right.map_or(NONE, |b| b.0).to_le_bytes());
    p[s + 4..s + 8].copy_from_slice(&left.map_or(NONE, |b| b.0).to_le_bytes());
}
fn init_node(p: &mut PageBuf, lvl: u16) {
    page::init(p, PageKind::BTree, SPECIAL_SIZE);
    let s = special(p);
    p[s + 8..s + 10].copy_from_slice(&lvl.to_le_bytes());
    set_links(p, None, None);
}

/// Splits an item into (key, value bytes).
///
/// # Errors
/// Corruption if malformed.
pub fn parse_item(item: &[u8]) -> Result<(&[u8], &[u8])> {
    let len = item
        .get(..2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
        .ok_or_else(|| Error::corruption("B-tree item is truncated"))?;
    let key = item
        .get(2..2 + len)
        .ok_or_else(|| Error::corruption("B-tree item key is truncated"))?;
    Ok((key, &item[2 + len..]))
}

fn make_item(key: &[u8], val: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(2 + key.len() + val.len());
    v.extend_from_slice(&(key.len() as u16).to_le_bytes());
    v.extend_from_slice(key);
    v.extend_from_slice(val);
    v
}

/// High key of a page (empty on the rightmost page: +infinity).
pub fn high_key(p: &PageBuf) -> Result<&[u8]> {
    Ok(parse_item(
        page::item(p, 0).ok_or_else(|| Error::corruption("B-tree page has no high key"))?,
    )?
    .0)
}

fn key_at(p: &PageBuf, i: usize) -> Result<&[u8]> {
    Ok(parse_item(
        page::item(p, i)
            .ok_or_else(|| Error::corruption(format!("B-tree line pointer {i} is unused")))?,
    )?
    .0)
}

fn child_at(p: &PageBuf, i: usize) -> Result<BlockNumber> {
    let (_, v) =
        parse_item(page::item(p, i).ok_or_else(|| Error::corruption("B-tree item missing"))?)?;
    Ok(BlockNumber(u32::from_le_bytes(v.try_into().map_err(
        |_| Error::corruption("B-tree downlink is malformed"),
    )?)))
}

fn tid_at(p: &PageBuf, i: usize) -> Result<Tid> {
    let (_, v) =
        parse_item(page::item(p, i).ok_or_else(|| Error::corruption("B-tree item missing"))?)?;
    Tid::from_bytes(v).ok_or_else(|| Error::corruption("B-tree leaf TID is malformed"))
}

/// A corruption error about index `rel` (XX002): its pages disagree with each other.
fn index_corrupted(rel: RelFileId, block: BlockNumber, what: impl std::fmt::Display) -> Error {
    Error::new(
        walnut_common::ErrorKind::Corruption,
        SqlState::INDEX_CORRUPTED,
        format!("block {} of index base/{}: {what}", block.0, rel.0),
    )
}

/// The data items (line pointers 1..) of a page read from disk, copied.
///
/// # Errors
/// Corruption (XX001) if a line pointer is unused.
fn data_items(p: &PageBuf) -> Result<Vec<Vec<u8>>> {
    (1..page::slot_count(p))
        .map(|i| {
            page::item(p, i)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| Error::corruption(format!("B-tree line pointer {i} is unused")))
        })
        .collect()
}

/// Checks, before inserting `key` at line pointer `pos` of page `p` (read from disk), that it
/// will sort strictly between its neighbours-to-be and below the page's high key. O(1).
///
/// # Errors
/// Index corruption (XX002) if not; corruption (XX001) if a neighbour is malformed.
fn check_insert_position(
    rel: RelFileId,
    block: BlockNumber,
    p: &PageBuf,
    pos: usize,
    key: &[u8],
) -> Result<()> {
    let n = page::slot_count(p);
    if pos == 0 || pos > n {
        return Err(Error::corruption(format!(
            "B-tree insert at line pointer {pos} of {n}"
        )));
    }
    if pos > 1 && key_at(p, pos - 1)? >= key {
        return Err(index_corrupted(
            rel,
            block,
            "the key to insert is not above its left neighbour",
        ));
    }
    if pos < n && key_at(p, pos)? <= key {
        return Err(index_corrupted(
            rel,
            block,
            "the key to insert is not below its right neighbour",
        ));
    }
    let high = high_key(p)?;
    if !high.is_empty() && key >= high {
        return Err(index_corrupted(
            rel,
            block,
            "the key to insert is not below the page's high key",
        ));
    }
    Ok(())
}

/// Asserts, after an insert at line pointer `pos` that [`check_insert_position`] allowed, that
/// the key there sorts strictly between its neighbours and below the high key. O(1).
fn assert_in_order_at(p: &PageBuf, pos: usize) {
    let n = page::slot_count(p);
    assert!(pos >= 1 && pos < n, "B-tree item {pos} of {n}");
    let key = key_at(p, pos).expect("the item just inserted parses");
    if pos > 1 {
        let left = key_at(p, pos - 1).expect("checked before the insert");
        assert!(
            left < key,
            "B-tree key at {pos} not above its left neighbour"
        );
    }
    if pos + 1 < n {
        let right = key_at(p, pos + 1).expect("checked before the insert");
        assert!(
            key < right,
            "B-tree key at {pos} not below its right neighbour"
        );
    }
    let high = high_key(p).expect("checked before the insert");
    assert!(
        high.is_empty() || key < high,
        "B-tree key at {pos} not below the high key"
    );
}

/// Index of the first data item (>= 1) whose key is >= `key` (n if none).
fn lower_bound(p: &PageBuf, key: &[u8]) -> Result<usize> {
    let (mut lo, mut hi) = (1, page::slot_count(p));
    while lo < hi {
        let mid = (lo + hi) / 2;
        if key_at(p, mid)? < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Child to follow in an internal page: the last item whose key is <= `key`.
fn choose_child(p: &PageBuf, key: &[u8]) -> Result<(usize, BlockNumber)> {
    let n = page::slot_count(p);
    let (mut lo, mut hi) = (1, n);
    // find first item with key > `key`; answer is the one before (items[1] is -inf).
    while lo < hi {
        let mid = (lo + hi) / 2;
        if mid == 1 || key_at(p, mid)? <= key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let i = lo - 1;
    if i < 1 {
        return Err(Error::corruption("B-tree internal page has no items"));
    }
    Ok((i, child_at(p, i)?))
}

fn root(st: &Storage, rel: &Relation) -> Result<BlockNumber> {
    let r = rel.btree_root.load(Ordering::Acquire);
    if r != NONE {
        return Ok(BlockNumber(r));
    }
    let pin = st.pool.pin(rel, BlockNumber(0), ReadMode::Normal)?;
    let p = pin.read();
    if page::kind(&p) != Some(PageKind::BTreeMeta) {
        return Err(Error::new(
            walnut_common::ErrorKind::Corruption,
            SqlState::INDEX_CORRUPTED,
            format!("index base/{} has no meta page", rel.id.0),
        ));
    }
    let root = u32::from_le_bytes(p[24..28].try_into().expect("4"));
    rel.btree_root.store(root, Ordering::Release);
    Ok(BlockNumber(root))
}

/// Descends to the leaf that would hold `key`, returning its block and the path of internal
/// blocks (root first).
fn descend(st: &Storage, rel: &Relation, key: &[u8]) -> Result<(BlockNumber, Vec<BlockNumber>)> {
    let mut block = root(st, rel)?;
    let mut path = Vec::new();
    let mut parent_level: Option<u16> = None;
    for _ in 0..MAX_DEPTH {
        let pin = st.pool.pin(rel, block, ReadMode::Normal)?;
        let p = pin.read();
        if page::kind(&p) != Some(PageKind::BTree) {
            return Err(Error::new(
                walnut_common::ErrorKind::Corruption,
                SqlState::INDEX_CORRUPTED,
                format!(
                    "block {} of index base/{} is not a B-tree page",
                    block.0, rel.id.0
                ),
            ));
        }
        let lvl = level(&p);
        if let Some(pl) = parent_level {
            if pl == 0 || lvl != pl - 1 {
                return Err(index_corrupted(
                    rel.id,
                    block,
                    format_args!("a page of level {lvl} below a page of level {pl}"),
                ));
            }
        }
        if lvl == 0 {
            return Ok((block, path));
        }
        path.push(block);
        parent_level = Some(lvl);
        block = choose_child(&p, key)?.1;
    }
    Err(Error::corruption(format!(
        "B-tree is deeper than {MAX_DEPTH} levels"
    )))
}

/// Looks up `key`; returns the TID stored for it.
///
/// # Errors
/// Corruption and I/O errors.
pub fn get(st: &Storage, rel: &Relation, key: &[u8]) -> Result<Option<Tid>> {
    let _t = rel.tree_lock.read();
    let (leaf, _) = descend(st, rel, key)?;
    let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
    let p = pin.read();
    let i = lower_bound(&p, key)?;
    if i < page::slot_count(&p) && key_at(&p, i)? == key {
        return Ok(Some(tid_at(&p, i)?));
    }
    Ok(None)
}

/// What the caller's uniqueness check decided about an existing entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// The existing row is dead: point the entry at the new tuple.
    Replace,
    /// The existing row's writer is running: wait for it, then retry.
    Wait(Xid),
    /// A live row has the key: unique violation.
    Duplicate,
}

/// Result of [`insert_unique`].
#[derive(Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Inserted (or an entry for a dead row was repointed); the old TID it pointed at, if any.
    Done(Option<Tid>),
    /// Wait for this transaction, then call again.
    Wait(Xid),
}

/// Inserts `key -> tid`. If the key exists, `check(Some(existing_tid))` decides; if not,
/// `check(None)` is told so before the entry goes in (its answer is not used). It runs under
/// the leaf latch, so it must only touch heap pages.
///
/// # Errors
/// 23505 on a live duplicate (message names `index_name`); 54000 for oversized keys;
/// corruption and I/O errors.
pub fn insert_unique(
    st: &Storage,
    rel: &Relation,
    xid: Xid,
    key: &[u8],
    tid: Tid,
    check: &mut dyn FnMut(Option<Tid>) -> Result<Existing>,
    index_name: &str,
) -> Result<InsertOutcome> {
    if key.len() > MAX_KEY_SIZE {
        return Err(Error::user(
            SqlState::PROGRAM_LIMIT_EXCEEDED,
            format!(
                "index row size {} exceeds maximum {MAX_KEY_SIZE} for index \"{index_name}\"",
                key.len()
            ),
        ));
    }
    let item = make_item(key, &tid.to_bytes());
    loop {
        {
            let _t = rel.tree_lock.read();
            let (leaf, _) = descend(st, rel, key)?;
            let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
            let mut p = pin.write();
            let i = lower_bound(&p, key)?;
            if i < page::slot_count(&p) && key_at(&p, i)? == key {
                let old = tid_at(&p, i)?;
                match check(Some(old))? {
                    Existing::Wait(x) => return Ok(InsertOutcome::Wait(x)),
                    Existing::Duplicate => {
                        return Err(Error::user(
                            SqlState::UNIQUE_VIOLATION,
                            format!(
                                "duplicate key value violates unique constraint \"{index_name}\""
                            ),
                        ));
                    }
                    Existing::Replace => {
                        set_tid_locked(st, rel, &pin, &mut p, i, tid, xid)?;
                        return Ok(InsertOutcome::Done(Some(old)));
                    }
                }
            }
            if page::fits(&p, item.len()) {
                check(None)?;
                check_insert_position(rel.id, leaf, &p, i, key)?;
                page::add_item(&mut p, i, &item);
                assert_in_order_at(&p, i);
                let end = st.log_change(&[&pin], &mut |redo| {
                    let mut d = Vec::with_capacity(2 + item.len());
                    d.extend_from_slice(&(i as u16).to_le_bytes());
                    d.extend_from_slice(&item);
                    Record {
                        rmgr: RM_BTREE,
                        info: BTREE_INSERT,
                        xid,
                        flags: 0,
                        blocks: vec![st.block_ref(rel.id, leaf, &p, redo, false, d)],
                        main_data: vec![],
                    }
                })?;
                page::set_lsn(&mut p, end);
                return Ok(InsertOutcome::Done(None));
            }
        }
        split(st, rel, key, item.len(), xid)?;
    }
}

fn set_tid_locked(
    st: &Storage,
    rel: &Relation,
    pin: &crate::bufpool::Pinned<'_>,
    p: &mut PageBuf,
    i: usize,
    tid: Tid,
    xid: Xid,
) -> Result<()> {
    assert!(tid.is_valid(), "B-tree entry set to an invalid TID");
    assert!(i >= 1, "B-tree TID written into the high key");
    assert_eq!(level(p), 0, "B-tree TID written into an internal page");
    let item = page::item_mut(p, i).ok_or_else(|| Error::corruption("B-tree item missing"))?;
    let n = item.len();
    if n < Tid::SIZE + 2 {
        return Err(Error::corruption("B-tree leaf item is truncated"));
    }
    item[n - Tid::SIZE..].copy_from_slice(&tid.to_bytes());
    assert_eq!(
        tid_at(p, i).expect("written"),
        tid,
        "B-tree entry's TID read back"
    );
    let leaf = pin.tag.block;
    let end = st.log_change(&[pin], &mut |redo| {
        let mut d = Vec::with_capacity(8);
        d.extend_from_slice(&(i as u16).to_le_bytes());
        d.extend_from_slice(&tid.to_bytes());
        Record {
            rmgr: RM_BTREE,
            info: BTREE_SET_TID,
            xid,
            flags: 0,
            blocks: vec![st.block_ref(rel.id, leaf, p, redo, false, d)],
            main_data: vec![],
        }
    })?;
    page::set_lsn(p, end);
    Ok(())
}

/// Points the entry for `key` at `tid` (an UPDATE made a new newest version).
///
/// # Errors
/// Corruption if the key is missing; I/O errors.
pub fn set_tid(st: &Storage, rel: &Relation, xid: Xid, key: &[u8], tid: Tid) -> Result<()> {
    let _t = rel.tree_lock.read();
    let (leaf, _) = descend(st, rel, key)?;
    let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
    let mut p = pin.write();
    let i = lower_bound(&p, key)?;
    if i >= page::slot_count(&p) || key_at(&p, i)? != key {
        return Err(Error::new(
            walnut_common::ErrorKind::Corruption,
            SqlState::INDEX_CORRUPTED,
            format!("key missing from index base/{}", rel.id.0),
        ));
    }
    set_tid_locked(st, rel, &pin, &mut p, i, tid, xid)?;
    Ok(())
}

/// Removes every leaf entry of index `rel` whose TID `dead` selects, and returns the TIDs of
/// the entries removed (VACUUM's index pass, PostgreSQL's `btbulkdelete`). Walks the leaves
/// left to right along their right links, one leaf at a time under its exclusive latch and the
/// structure lock held shared, and logs a `DELETE` record for each leaf it changes. A split
/// meanwhile only moves entries right, onto a page the walk has still to visit. Emptied leaves
/// stay in the tree (PostgreSQL deletes them; walnut does not yet). `check` runs before each
/// leaf (cancellation).
///
/// The caller must make sure no new entry can name a TID `dead` selects: VACUUM passes the
/// dead line pointers of its heap, which no insert points an entry at.
///
/// # Errors
/// Corruption and I/O errors; the WAL insert's; `check`'s.
pub fn bulk_delete(
    st: &Storage,
    rel: &Relation,
    dead: &dyn Fn(Tid) -> bool,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<Vec<Tid>> {
    let mut removed = Vec::new();
    let mut next = None;
    loop {
        check()?;
        // Room for the record (with a full-page image) before the page changes: a full disk
        // fails the VACUUM with 53100.
        st.wal().check_space(2 * BLCKSZ as u64)?;
        let _t = rel.tree_lock.read();
        let leaf = match next {
            Some(b) => b,
            None => descend(st, rel, &[])?.0,
        };
        let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
        let mut p = pin.write();
        if page::kind(&p) != Some(PageKind::BTree) || level(&p) != 0 {
            return Err(index_corrupted(
                rel.id,
                leaf,
                "a leaf that is not a leaf page",
            ));
        }
        let mut idxs = Vec::new();
        for i in 1..page::slot_count(&p) {
            let t = tid_at(&p, i)?;
            if dead(t) {
                idxs.push(i);
                removed.push(t);
            }
        }
        if !idxs.is_empty() {
            page::delete_items(&mut p, &idxs);
            let end = st.log_change(&[&pin], &mut |redo| {
                let mut d = Vec::with_capacity(2 + 2 * idxs.len());
                d.extend_from_slice(&(idxs.len() as u16).to_le_bytes());
                for &i in &idxs {
                    d.extend_from_slice(&(i as u16).to_le_bytes());
                }
                Record {
                    rmgr: RM_BTREE,
                    info: BTREE_DELETE,
                    xid: Xid::INVALID,
                    flags: 0,
                    blocks: vec![st.block_ref(rel.id, leaf, &p, redo, false, d)],
                    main_data: vec![],
                }
            })?;
            page::set_lsn(&mut p, end);
        }
        match right_link(&p) {
            Some(b) => next = Some(b),
            None => return Ok(removed),
        }
    }
}

/// Redo of a `DELETE` record: the line pointers it names (ascending, none the high key, all on
/// the page) are removed as [`bulk_delete`] removed them.
fn redo_delete(data: &[u8], p: &mut PageBuf) -> Result<()> {
    let n = data
        .get(..2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
        .ok_or_else(|| Error::corruption("B-tree delete record is truncated"))?;
    if data.len() != 2 + 2 * n {
        return Err(Error::corruption(format!(
            "B-tree delete record of {} bytes for {n} entries",
            data.len()
        )));
    }
    let idxs: Vec<usize> = data[2..]
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
        .collect();
    let slots = page::slot_count(p);
    if idxs.first().is_some_and(|&i| i == 0)
        || idxs.last().is_some_and(|&i| i >= slots)
        || !idxs.windows(2).all(|w| w[0] < w[1])
        || (0..slots).any(|i| page::item(p, i).is_none())
    {
        return Err(Error::corruption(format!(
            "B-tree delete record names line pointers {idxs:?} of a page with {slots}"
        )));
    }
    page::delete_items(p, &idxs);
    Ok(())
}

/// Calls `visit(key, tid)` for entries with keys in (`lo`, `hi`) in key order. Bounds are
/// encoded key prefixes: `Included(k)` of a prefix includes every key starting with it. The
/// structure lock is not held while `visit` runs. With `io_direct = data` and I/O workers, a
/// leaf of more than one entry has the heap blocks of its TIDs and the next leaf read ahead
/// ([`IndexReadAhead`]); a point lookup reads nothing ahead.
///
/// # Errors
/// Corruption and I/O errors, and `visit`'s. `visit` returns false to stop.
pub fn range(
    st: &Storage,
    rel: &Relation,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    visit: &mut dyn FnMut(&[u8], Tid) -> Result<bool>,
) -> Result<()> {
    let mut start: Bound<Vec<u8>> = match lo {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    let in_hi = |k: &[u8]| match hi {
        Bound::Unbounded => true,
        Bound::Included(h) => k <= h || k.starts_with(h),
        Bound::Excluded(h) => k < h && !k.starts_with(h),
    };
    // Created at the first leaf with more than one entry: a point lookup reads nothing ahead.
    let mut ahead: Option<IndexReadAhead> = None;
    loop {
        let mut batch: Vec<(Vec<u8>, Tid)> = Vec::new();
        let more;
        let next_leaf;
        {
            let _t = rel.tree_lock.read();
            let seek: &[u8] = match &start {
                Bound::Included(k) | Bound::Excluded(k) => k,
                Bound::Unbounded => &[],
            };
            let (leaf, _) = descend(st, rel, seek)?;
            let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
            let p = pin.read();
            let mut i = lower_bound(&p, seek)?;
            let n = page::slot_count(&p);
            let mut stop = false;
            while i < n {
                let k = key_at(&p, i)?;
                i += 1;
                if let Bound::Excluded(s) = &start {
                    if k == s.as_slice() || k.starts_with(s) {
                        continue;
                    }
                }
                if !in_hi(k) {
                    stop = true;
                    break;
                }
                batch.push((k.to_vec(), tid_at(&p, i - 1)?));
            }
            next_leaf = if stop { None } else { right_link(&p) };
            more = next_leaf.is_some();
            if more && batch.is_empty() {
                // Empty leaf: continue from its high key.
                start = Bound::Included(high_key(&p)?.to_vec());
                continue;
            }
        }
        if ahead.is_none() && batch.len() > 1 {
            ahead = Some(IndexReadAhead::new(st, || index_heap(st, rel)));
        }
        if let Some(a) = ahead.as_mut().filter(|a| a.active()) {
            let index = st.smgr.open_if_cached(rel.id);
            a.leaf(index, batch.iter().map(|(_, t)| t.block.0), next_leaf);
        }
        for (i, (k, t)) in batch.iter().enumerate() {
            if let Some(a) = ahead.as_mut() {
                a.before(i);
            }
            if !visit(k, *t)? {
                return Ok(());
            }
        }
        if !more {
            return Ok(());
        }
        match batch.last() {
            Some((k, _)) => start = Bound::Excluded(k.clone()),
            None => return Ok(()),
        }
    }
}

/// The heap relation `rel` (a B-tree) indexes, from the catalog (cached in
/// `Relation::index_heap`); `None` if no table in the catalog names it (an index being built).
fn index_heap(st: &Storage, rel: &Relation) -> Option<Arc<Relation>> {
    let id = match rel.index_heap.get() {
        Some(id) => *id,
        None => {
            let id = st
                .catalog
                .all()
                .iter()
                .find(|t| t.index == Some(rel.id))?
                .relfile;
            *rel.index_heap.get_or_init(|| id)
        }
    };
    st.smgr.open(id).ok()
}

/// Redo of a B-tree record's block without an image.
///
/// # Errors
/// Corruption if the record does not fit the page.
pub fn redo_block(info: u8, data: &[u8], p: &mut PageBuf) -> Result<()> {
    if info == BTREE_DELETE {
        if page::kind(p) != Some(PageKind::BTree) || level(p) != 0 {
            return Err(Error::corruption(
                "B-tree delete record for a page that is not a leaf",
            ));
        }
        return redo_delete(data, p);
    }
    let pos = data
        .get(..2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
        .ok_or_else(|| Error::corruption("B-tree record is truncated"))?;
    if page::kind(p) != Some(PageKind::BTree) || level(p) != 0 {
        return Err(Error::corruption(format!(
            "B-tree record {info:#x} for a page that is not a leaf"
        )));
    }
    if pos == 0 {
        return Err(Error::corruption(format!(
            "B-tree record {info:#x} writes the high key"
        )));
    }
    match info {
        BTREE_INSERT => {
            let item = &data[2..];
            let (key, tid) = parse_item(item)?;
            if tid.len() != Tid::SIZE || pos > page::slot_count(p) || !page::fits(p, item.len()) {
                return Err(Error::corruption(
                    "B-tree insert redo does not fit the page",
                ));
            }
            // The key's place on the page (restored to its state before the record).
            let n = page::slot_count(p);
            let high = high_key(p)?;
            if (pos > 1 && key_at(p, pos - 1)? >= key)
                || (pos < n && key_at(p, pos)? <= key)
                || (!high.is_empty() && key >= high)
            {
                return Err(Error::corruption(format!(
                    "B-tree insert redo at line pointer {pos} is out of key order"
                )));
            }
            page::add_item(p, pos, item);
            Ok(())
        }
        BTREE_SET_TID => {
            let item = page::item_mut(p, pos)
                .ok_or_else(|| Error::corruption("B-tree set-tid redo: no such item"))?;
            let n = item.len();
            let tid = data
                .get(2..8)
                .ok_or_else(|| Error::corruption("B-tree record is truncated"))?;
            if n < 8 {
                return Err(Error::corruption("B-tree item is truncated"));
            }
            item[n - 6..].copy_from_slice(tid);
            Ok(())
        }
        _ => Err(Error::corruption(format!(
            "B-tree record {info:#x} without a page image"
        ))),
    }
}
