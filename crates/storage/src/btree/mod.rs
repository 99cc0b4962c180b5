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

use crate::bufpool::ReadMode;
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::Relation;
use crate::Storage;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use walnut_common::{BlockNumber, Error, RelFileId, Result, SqlState, Tid, Xid, BLCKSZ};
use walnut_wal::{BlockRef, Record, RmgrId, RECORD_MULTI_BLOCK_ATOMIC};

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

/// Inserts `key -> tid`. If the key exists, `check(existing_tid)` decides (it runs under the
/// leaf latch, so it must only read heap pages).
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
    check: &mut dyn FnMut(Tid) -> Result<Existing>,
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
                match check(old)? {
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
                        set_tid_locked(st, rel, leaf, &mut p, i, tid, xid)?;
                        pin.mark_dirty();
                        return Ok(InsertOutcome::Done(Some(old)));
                    }
                }
            }
            if page::fits(&p, item.len()) {
                check_insert_position(rel.id, leaf, &p, i, key)?;
                page::add_item(&mut p, i, &item);
                assert_in_order_at(&p, i);
                let (_, end) = st.wal().insert(&mut |redo| {
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
                pin.mark_dirty();
                return Ok(InsertOutcome::Done(None));
            }
        }
        split(st, rel, key, item.len(), xid)?;
    }
}

fn set_tid_locked(
    st: &Storage,
    rel: &Relation,
    leaf: BlockNumber,
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
    let (_, end) = st.wal().insert(&mut |redo| {
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
    set_tid_locked(st, rel, leaf, &mut p, i, tid, xid)?;
    pin.mark_dirty();
    Ok(())
}

/// Calls `visit(key, tid)` for entries with keys in (`lo`, `hi`) in key order. Bounds are
/// encoded key prefixes: `Included(k)` of a prefix includes every key starting with it. The
/// structure lock is not held while `visit` runs.
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
    loop {
        let mut batch: Vec<(Vec<u8>, Tid)> = Vec::new();
        let more;
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
            more = !stop && right_link(&p).is_some();
            if more && batch.is_empty() {
                // Empty leaf: continue from its high key.
                start = Bound::Included(high_key(&p)?.to_vec());
                continue;
            }
        }
        for (k, t) in &batch {
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

/// Splits the leaf that `key` descends to (and ancestors as needed), logging all changed pages
/// in one atomic record.
fn split(st: &Storage, rel: &Relation, key: &[u8], need: usize, xid: Xid) -> Result<()> {
    let _t = rel.tree_lock.write();
    let (leaf, path) = descend(st, rel, key)?;
    {
        let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
        if page::fits(&pin.read(), need) {
            return Ok(()); // someone split it already
        }
    }
    let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
    let img: Box<PageBuf> = {
        let p = pin.read();
        let mut c: Box<PageBuf> = vec![0u8; BLCKSZ]
            .into_boxed_slice()
            .try_into()
            .expect("BLCKSZ");
        c.copy_from_slice(&p[..]);
        c
    };
    drop(pin);
    let items = data_items(&img)?;
    split_node(st, rel, xid, Vec::new(), leaf, &img, items, &path, None)
}

/// Splits page `block` (a leaf, or an internal page whose item list `items` already includes
/// the new downlink), inserting the downlink to the new right page into the parent, recursively.
///
/// The items (from disk) are checked in order below the page's high key first, O(n) like the
/// copy itself: a split is rare and off the hot path. The pages built are then asserted on.
#[allow(clippy::too_many_arguments)]
fn split_node(
    st: &Storage,
    rel: &Relation,
    xid: Xid,
    mut pages: Vec<(BlockNumber, Box<PageBuf>, bool)>,
    block: BlockNumber,
    page_img: &PageBuf,
    items: Vec<Vec<u8>>,
    path: &[BlockNumber],
    mut new_root: Option<BlockNumber>,
) -> Result<()> {
    let load = |b: BlockNumber| -> Result<Box<PageBuf>> {
        let pin = st.pool.pin(rel, b, ReadMode::Normal)?;
        let p = pin.read();
        let mut c: Box<PageBuf> = vec![0u8; BLCKSZ]
            .into_boxed_slice()
            .try_into()
            .expect("BLCKSZ");
        c.copy_from_slice(&p[..]);
        Ok(c)
    };
    let alloc = || -> Result<BlockNumber> {
        let _e = rel.extend_lock.lock();
        st.smgr.extend(rel)
    };
    let lvl = level(page_img);
    if items.len() < 2 {
        return Err(Error::corruption(format!(
            "B-tree page {} of base/{} is full with fewer than two items",
            block.0, rel.id.0
        )));
    }
    check_split_items(rel.id, block, &items, high_key(page_img)?)?;
    let cut = (items.len() / 2).clamp(1, items.len() - 1);
    assert!(
        1 <= cut && cut < items.len(),
        "split point {cut} leaves a half of {} items empty",
        items.len()
    );
    let old_right = right_link(page_img);
    // The right sibling, whose left link changes: it must link back to this page.
    let right_sibling = match old_right {
        Some(rb) => {
            let rp = load(rb)?;
            if page::kind(&rp) != Some(PageKind::BTree)
                || left_link(&rp) != Some(block)
                || level(&rp) != lvl
            {
                return Err(index_corrupted(
                    rel.id,
                    rb,
                    format_args!(
                        "right sibling of block {} does not link back to it at level {lvl}",
                        block.0
                    ),
                ));
            }
            Some((rb, rp))
        }
        None => None,
    };
    let right_block = alloc()?;
    assert!(
        right_block != block && Some(right_block) != old_right && right_block != BlockNumber(0),
        "split allocated block {} that is in use",
        right_block.0
    );
    let sep = parse_item(&items[cut])?.0.to_vec();
    let (left, right) = split_halves(page_img, &items, cut, block, right_block)?;
    assert_split_halves(
        &left,
        &right,
        block,
        right_block,
        old_right,
        lvl,
        cut,
        items.len(),
    );
    if let Some((rb, mut rp)) = right_sibling {
        let rr = right_link(&rp);
        set_links(&mut rp, rr, Some(right_block));
        pages.push((rb, rp, false));
    }
    pages.push((block, left, false));
    pages.push((right_block, right, true));
    let downlink = make_item(&sep, &right_block.0.to_le_bytes());
    if path.is_empty() {
        assert!(
            usize::from(lvl) + 1 < MAX_DEPTH,
            "a new root at level {} is deeper than a descent goes",
            lvl + 1
        );
        let root_block = alloc()?;
        let mut r: Box<PageBuf> = vec![0u8; BLCKSZ]
            .into_boxed_slice()
            .try_into()
            .expect("BLCKSZ");
        init_node(&mut r, lvl + 1);
        page::add_item(&mut r, 0, &make_item(&[], &[]));
        page::add_item(&mut r, 1, &make_item(&[], &block.0.to_le_bytes()));
        page::add_item(&mut r, 2, &downlink);
        pages.push((root_block, r, true));
        let mut meta = load(BlockNumber(0))?;
        meta[24..28].copy_from_slice(&root_block.0.to_le_bytes());
        meta[28..32].copy_from_slice(&(lvl as u32 + 1).to_le_bytes());
        pages.push((BlockNumber(0), meta, false));
        new_root = Some(root_block);
        return finish_smo(st, rel, xid, pages, new_root);
    }
    let parent = path[path.len() - 1];
    let mut pp = load(parent)?;
    // `descend` checked the levels along `path` under this same exclusive structure lock.
    assert_eq!(
        usize::from(level(&pp)),
        usize::from(lvl) + 1,
        "parent {} is not one level above its child {}",
        parent.0,
        block.0
    );
    let (ci, child) = choose_child(&pp, &sep)?;
    if child != block {
        return Err(index_corrupted(
            rel.id,
            parent,
            format_args!(
                "the separator of split block {} leads to block {}",
                block.0, child.0
            ),
        ));
    }
    if page::fits(&pp, downlink.len()) {
        check_insert_position(rel.id, parent, &pp, ci + 1, &sep)?;
        page::add_item(&mut pp, ci + 1, &downlink);
        assert_in_order_at(&pp, ci + 1);
        pages.push((parent, pp, false));
        return finish_smo(st, rel, xid, pages, new_root);
    }
    let mut big = data_items(&pp)?;
    big.insert(ci, downlink);
    split_node(
        st,
        rel,
        xid,
        pages,
        parent,
        &pp,
        big,
        &path[..path.len() - 1],
        new_root,
    )
}

/// Builds the two halves of a split of page `block` (image `page_img`, its data items `items`)
/// at item `cut`: the left half keeps the block and gets the separator (`items[cut]`'s key) as
/// its high key; the right half, new at `right_block`, keeps the old high key and right link.
///
/// # Errors
/// Corruption if an item is malformed.
fn split_halves(
    page_img: &PageBuf,
    items: &[Vec<u8>],
    cut: usize,
    block: BlockNumber,
    right_block: BlockNumber,
) -> Result<(Box<PageBuf>, Box<PageBuf>)> {
    let lvl = level(page_img);
    let old_high =
        page::item(page_img, 0).ok_or_else(|| Error::corruption("B-tree page has no high key"))?;
    let sep = parse_item(&items[cut])?.0;
    let mut left: Box<PageBuf> = vec![0u8; BLCKSZ]
        .into_boxed_slice()
        .try_into()
        .expect("BLCKSZ");
    init_node(&mut left, lvl);
    set_links(&mut left, Some(right_block), left_link(page_img));
    page::add_item(&mut left, 0, &make_item(sep, &[]));
    for (j, it) in items[..cut].iter().enumerate() {
        page::add_item(&mut left, j + 1, it);
    }
    let mut right: Box<PageBuf> = vec![0u8; BLCKSZ]
        .into_boxed_slice()
        .try_into()
        .expect("BLCKSZ");
    init_node(&mut right, lvl);
    set_links(&mut right, right_link(page_img), Some(block));
    page::add_item(&mut right, 0, old_high);
    for (j, it) in items[cut..].iter().enumerate() {
        // The first downlink of an internal page has key -infinity.
        let it = if lvl > 0 && j == 0 {
            make_item(&[], parse_item(it)?.1)
        } else {
            it.clone()
        };
        page::add_item(&mut right, j + 1, &it);
    }
    Ok((left, right))
}

/// Checks the items of a page about to split (read from disk; for an internal page, with the
/// new downlink added): every one parses, keys strictly ascend, and stay below the high key
/// `high` (empty: +infinity). O(n).
///
/// # Errors
/// Index corruption (XX002) if out of order; corruption (XX001) if malformed.
fn check_split_items(
    rel: RelFileId,
    block: BlockNumber,
    items: &[Vec<u8>],
    high: &[u8],
) -> Result<()> {
    let mut prev: Option<&[u8]> = None;
    for it in items {
        let (k, _) = parse_item(it)?;
        if prev.is_some_and(|p| p >= k) {
            return Err(index_corrupted(
                rel,
                block,
                "keys out of order on a page to split",
            ));
        }
        prev = Some(k);
    }
    if !high.is_empty() && prev.is_some_and(|p| p >= high) {
        return Err(index_corrupted(
            rel,
            block,
            "a key at or above the high key on a page to split",
        ));
    }
    Ok(())
}

/// Asserts the two halves of a split of `block` (into `left`, which keeps the block, and
/// `right`, new at `right_block`) just built from `total` checked items cut at `cut`. O(1).
#[allow(clippy::too_many_arguments)]
fn assert_split_halves(
    left: &PageBuf,
    right: &PageBuf,
    block: BlockNumber,
    right_block: BlockNumber,
    old_right: Option<BlockNumber>,
    lvl: u16,
    cut: usize,
    total: usize,
) {
    // Both halves non-empty, every item in one of them.
    let right_n = total - cut;
    assert!(cut >= 1 && right_n >= 1, "a split's half is empty");
    assert_eq!(page::slot_count(left), cut + 1, "left half's items");
    assert_eq!(page::slot_count(right), right_n + 1, "right half's items");
    // The left half's high key, the separator, is above all its keys (they ascend: checked).
    let sep = high_key(left).expect("built");
    assert!(!sep.is_empty(), "a split's left half has no high key");
    assert!(
        key_at(left, cut).expect("built") < sep,
        "a split's left half has a key at or above its high key"
    );
    // The right half holds the keys from the separator up, below the old high key.
    let right_high = high_key(right).expect("built");
    let right_last = key_at(right, right_n).expect("built");
    assert!(
        right_high.is_empty() || right_last < right_high,
        "a split's right half has a key at or above its high key"
    );
    // (An internal right half's only item may be its minus-infinity first downlink.)
    assert!(
        sep <= right_last || (lvl > 0 && right_n == 1),
        "a split's right half has a key below the separator"
    );
    if lvl == 0 {
        assert_eq!(
            key_at(right, 1).expect("built"),
            sep,
            "a leaf split's separator is not the right half's first key"
        );
    } else {
        assert!(
            key_at(right, 1).expect("built").is_empty(),
            "an internal right half's first downlink is not minus infinity"
        );
    }
    // Links: left <-> right <-> the old right sibling; the level is kept.
    assert_eq!(
        right_link(left),
        Some(right_block),
        "left half's right link"
    );
    assert_eq!(left_link(right), Some(block), "right half's left link");
    assert_eq!(right_link(right), old_right, "right half's right link");
    assert_eq!(
        (level(left), level(right)),
        (lvl, lvl),
        "split halves' levels"
    );
}

/// Writes the working copies into the buffer pool and logs them in one atomic record.
fn finish_smo(
    st: &Storage,
    rel: &Relation,
    xid: Xid,
    pages: Vec<(BlockNumber, Box<PageBuf>, bool)>,
    new_root: Option<BlockNumber>,
) -> Result<()> {
    let pins: Vec<_> = pages
        .iter()
        .map(|(b, _, is_new)| {
            st.pool.pin(
                rel,
                *b,
                if *is_new {
                    ReadMode::Zero
                } else {
                    ReadMode::Normal
                },
            )
        })
        .collect::<Result<_>>()?;
    let mut guards: Vec<_> = pins.iter().map(|p| p.write()).collect();
    for (g, (_, img, _)) in guards.iter_mut().zip(&pages) {
        g.copy_from_slice(&img[..]);
    }
    let (_, end) = st.wal().insert(&mut |_redo| Record {
        rmgr: RM_BTREE,
        info: BTREE_SMO,
        xid,
        flags: RECORD_MULTI_BLOCK_ATOMIC,
        blocks: pages
            .iter()
            .map(|(b, img, is_new)| BlockRef {
                rel: rel.id,
                block: *b,
                will_init: *is_new,
                image: Some(img.to_vec()),
                data: vec![],
            })
            .collect(),
        main_data: vec![],
    })?;
    for (g, pin) in guards.iter_mut().zip(&pins) {
        page::set_lsn(g, end);
        pin.mark_dirty();
    }
    if let Some(r) = new_root {
        rel.btree_root.store(r.0, Ordering::Release);
    }
    Ok(())
}

/// Builds an index from `entries` sorted by key with no duplicates (checked by the caller):
/// meta page, packed leaves, internal levels. Every page is logged as a full-page image.
///
/// # Errors
/// I/O errors.
pub fn build(st: &Storage, rel: &Relation, xid: Xid, entries: &[(Vec<u8>, Tid)]) -> Result<()> {
    let limit = (BLCKSZ - page::PAGE_HEADER_SIZE - SPECIAL_SIZE) * BUILD_FILL / 100;
    let alloc = || -> Result<BlockNumber> {
        let _e = rel.extend_lock.lock();
        st.smgr.extend(rel)
    };
    assert!(
        entries.windows(2).all(|w| w[0].0 < w[1].0),
        "index build from entries not strictly ascending"
    );
    assert!(
        entries.iter().all(|(_, t)| t.is_valid()),
        "index build from an invalid TID"
    );
    // Keys come from the table's rows: too long is the user's error, not a bug. (Splits rely
    // on items of at most MAX_ITEM_SIZE bytes.)
    if let Some((k, _)) = entries.iter().find(|(k, _)| k.len() > MAX_KEY_SIZE) {
        return Err(Error::user(
            SqlState::PROGRAM_LIMIT_EXCEEDED,
            format!(
                "index row size {} exceeds maximum {MAX_KEY_SIZE} for an index",
                k.len()
            ),
        ));
    }
    // The meta page is block 0.
    let meta_block = alloc()?;
    assert_eq!(
        meta_block,
        BlockNumber(0),
        "index build into a non-empty relation"
    );
    // Level by level: (first key, block) of each page built.
    let mut level_items: Vec<(Vec<u8>, Vec<u8>)> = entries
        .iter()
        .map(|(k, t)| (k.clone(), t.to_bytes().to_vec()))
        .collect();
    let mut lvl = 0u16;
    loop {
        // Group items into pages.
        let mut groups: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new()];
        let mut used = 0;
        for it in level_items {
            let sz = 2 + it.0.len() + it.1.len() + page::LINE_POINTER_SIZE;
            if used + sz > limit && !groups.last().expect("group").is_empty() {
                groups.push(Vec::new());
                used = 0;
            }
            used += sz;
            groups.last_mut().expect("group").push(it);
        }
        let blocks: Vec<BlockNumber> = groups.iter().map(|_| alloc()).collect::<Result<_>>()?;
        let mut next_level = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            let mut p: Box<PageBuf> = vec![0u8; BLCKSZ]
                .into_boxed_slice()
                .try_into()
                .expect("BLCKSZ");
            init_node(&mut p, lvl);
            set_links(
                &mut p,
                blocks.get(gi + 1).copied(),
                gi.checked_sub(1).map(|i| blocks[i]),
            );
            let high = groups
                .get(gi + 1)
                .map(|n| n[0].0.clone())
                .unwrap_or_default();
            page::add_item(&mut p, 0, &make_item(&high, &[]));
            for (j, (k, v)) in g.iter().enumerate() {
                let k: &[u8] = if lvl > 0 && j == 0 { &[] } else { k };
                page::add_item(&mut p, j + 1, &make_item(k, v));
            }
            write_new_page(st, rel, xid, blocks[gi], &p)?;
            next_level.push((
                g.first().map(|x| x.0.clone()).unwrap_or_default(),
                blocks[gi].0.to_le_bytes().to_vec(),
            ));
        }
        if blocks.len() == 1 {
            let mut m: Box<PageBuf> = vec![0u8; BLCKSZ]
                .into_boxed_slice()
                .try_into()
                .expect("BLCKSZ");
            page::init(&mut m, PageKind::BTreeMeta, 0);
            m[24..28].copy_from_slice(&blocks[0].0.to_le_bytes());
            m[28..32].copy_from_slice(&(lvl as u32).to_le_bytes());
            write_new_page(st, rel, xid, meta_block, &m)?;
            rel.btree_root.store(blocks[0].0, Ordering::Release);
            return Ok(());
        }
        level_items = next_level;
        lvl += 1;
    }
}

fn write_new_page(
    st: &Storage,
    rel: &Relation,
    xid: Xid,
    block: BlockNumber,
    img: &PageBuf,
) -> Result<()> {
    let pin = st.pool.pin(rel, block, ReadMode::Zero)?;
    let mut p = pin.write();
    p.copy_from_slice(img);
    let (_, end) = st.wal().insert(&mut |_redo| Record {
        rmgr: RM_BTREE,
        info: BTREE_NEWPAGE,
        xid,
        flags: 0,
        blocks: vec![BlockRef {
            rel: rel.id,
            block,
            will_init: true,
            image: Some(img.to_vec()),
            data: vec![],
        }],
        main_data: vec![],
    })?;
    page::set_lsn(&mut p, end);
    pin.mark_dirty();
    Ok(())
}

/// Redo of a B-tree record's block without an image.
///
/// # Errors
/// Corruption if the record does not fit the page.
pub fn redo_block(info: u8, data: &[u8], p: &mut PageBuf) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StorageConfig;
    use std::path::Path;
    use std::sync::Arc;

    const REL: RelFileId = RelFileId(16384);

    fn tid(i: usize) -> Tid {
        Tid {
            block: BlockNumber(0),
            slot: i as u16 + 1,
        }
    }

    /// A page of `lvl` with high key `high` and items with `keys` (in the order given, so a
    /// test can build one that is out of order). Internal items' values are downlinks.
    fn node(lvl: u16, high: &[u8], keys: &[&[u8]]) -> Box<PageBuf> {
        let mut p: Box<PageBuf> = Box::new([0u8; BLCKSZ]);
        init_node(&mut p, lvl);
        page::add_item(&mut p, 0, &make_item(high, &[]));
        for (j, k) in keys.iter().enumerate() {
            let item = if lvl == 0 {
                make_item(k, &tid(j).to_bytes())
            } else {
                make_item(k, &(10 + j as u32).to_le_bytes())
            };
            page::add_item(&mut p, j + 1, &item);
        }
        p
    }

    fn leaf(high: &[u8], keys: &[&[u8]]) -> Box<PageBuf> {
        node(0, high, keys)
    }

    fn assert_sqlstate<T: std::fmt::Debug>(r: Result<T>, sqlstate: &str, what: &str) {
        let e = r.expect_err(what);
        assert_eq!(e.sqlstate.0, sqlstate, "{what}: {e}");
    }

    // The assertions fire when a write would break an invariant of the tree.

    #[test]
    #[should_panic(expected = "B-tree key at 2 not above its left neighbour")]
    fn an_insert_out_of_key_order_panics() {
        assert_in_order_at(&leaf(b"", &[b"a", b"b", b"c"]), 2); // holds
        assert_in_order_at(&leaf(b"", &[b"b", b"a"]), 2);
    }

    #[test]
    #[should_panic(expected = "B-tree key at 2 not below the high key")]
    fn an_insert_at_or_above_the_high_key_panics() {
        assert_in_order_at(&leaf(b"m", &[b"a", b"b"]), 2); // holds
        assert_in_order_at(&leaf(b"m", &[b"a", b"m"]), 2);
    }

    fn halves(img: &PageBuf, cut: usize) -> (Box<PageBuf>, Box<PageBuf>, usize) {
        let items = data_items(img).unwrap();
        let (l, r) = split_halves(img, &items, cut, BlockNumber(5), BlockNumber(9)).unwrap();
        (l, r, items.len())
    }

    #[test]
    fn the_halves_of_a_split_pass_their_assertions() {
        let mut img = leaf(b"q", &[b"a", b"c", b"e", b"g", b"i"]);
        set_links(&mut img, Some(BlockNumber(7)), Some(BlockNumber(3)));
        for cut in 1..5 {
            let (l, r, n) = halves(&img, cut);
            assert_split_halves(
                &l,
                &r,
                BlockNumber(5),
                BlockNumber(9),
                Some(BlockNumber(7)),
                0,
                cut,
                n,
            );
            assert_eq!(left_link(&l), Some(BlockNumber(3)));
        }
        // An internal page, down to a right half of only its minus-infinity downlink.
        let img = node(1, b"", &[b"", b"c", b"e"]);
        for cut in 1..3 {
            let (l, r, n) = halves(&img, cut);
            assert_split_halves(&l, &r, BlockNumber(5), BlockNumber(9), None, 1, cut, n);
        }
    }

    #[test]
    #[should_panic(expected = "right half's left link")]
    fn a_split_whose_right_half_does_not_link_back_panics() {
        let (l, mut r, n) = halves(&leaf(b"", &[b"a", b"c", b"e", b"g"]), 2);
        set_links(&mut r, None, Some(BlockNumber(8)));
        assert_split_halves(&l, &r, BlockNumber(5), BlockNumber(9), None, 0, 2, n);
    }

    #[test]
    #[should_panic(expected = "left half's items")]
    fn a_split_that_loses_an_item_panics() {
        let (l, r, n) = halves(&leaf(b"", &[b"a", b"c", b"e", b"g"]), 2);
        assert_split_halves(&l, &r, BlockNumber(5), BlockNumber(9), None, 0, 1, n);
    }

    #[test]
    #[should_panic(expected = "a split's left half has a key at or above its high key")]
    fn a_split_of_unchecked_items_out_of_order_panics() {
        // What check_split_items keeps from splitting: the left half's "d" above the separator.
        let (l, r, n) = halves(&leaf(b"", &[b"a", b"d", b"b", b"c"]), 2);
        assert_split_halves(&l, &r, BlockNumber(5), BlockNumber(9), None, 0, 2, n);
    }

    // Pages read from disk and records from the WAL are checked with corruption errors.

    #[test]
    fn damaged_pages_are_corruption_errors() {
        let items = |keys: &[&[u8]]| data_items(&leaf(b"", keys)).unwrap();
        check_split_items(REL, BlockNumber(1), &items(&[b"a", b"b", b"c"]), b"d").unwrap();
        assert_sqlstate(
            check_split_items(REL, BlockNumber(1), &items(&[b"a", b"c", b"b"]), b""),
            "XX002",
            "keys out of order",
        );
        assert_sqlstate(
            check_split_items(REL, BlockNumber(1), &items(&[b"a", b"a"]), b""),
            "XX002",
            "a duplicate key",
        );
        assert_sqlstate(
            check_split_items(REL, BlockNumber(1), &items(&[b"a", b"c"]), b"c"),
            "XX002",
            "a key at the high key",
        );
        assert_sqlstate(
            check_split_items(REL, BlockNumber(1), &[vec![200, 0, b'a']], b""),
            "XX001",
            "a key longer than its item",
        );

        let p = leaf(b"m", &[b"b", b"d"]);
        check_insert_position(REL, BlockNumber(1), &p, 2, b"c").unwrap();
        check_insert_position(REL, BlockNumber(1), &p, 3, b"e").unwrap();
        for (pos, key, sqlstate) in [
            (3, &b"m"[..], "XX002"),
            (3, b"x", "XX002"),
            (2, b"a", "XX002"),
            (1, b"c", "XX002"),
            (0, b"a", "XX001"),
            (4, b"e", "XX001"),
        ] {
            assert_sqlstate(
                check_insert_position(REL, BlockNumber(1), &p, pos, key),
                sqlstate,
                &format!("{key:?} at {pos}"),
            );
        }

        let mut unused = leaf(b"", &[b"a", b"b"]);
        unused[page::PAGE_HEADER_SIZE + 4..page::PAGE_HEADER_SIZE + 6].fill(0);
        assert_sqlstate(data_items(&unused), "XX001", "an unused line pointer");
    }

    #[test]
    fn redo_of_a_record_that_does_not_fit_its_page_is_a_corruption_error() {
        let insert = |pos: u16, key: &[u8]| {
            let mut d = pos.to_le_bytes().to_vec();
            d.extend_from_slice(&make_item(key, &tid(9).to_bytes()));
            d
        };
        let set_tid = |pos: u16| {
            let mut d = pos.to_le_bytes().to_vec();
            d.extend_from_slice(&tid(9).to_bytes());
            d
        };
        let page = || leaf(b"m", &[b"b", b"d"]);
        redo_block(BTREE_INSERT, &insert(2, b"c"), &mut page()).unwrap();
        redo_block(BTREE_SET_TID, &set_tid(2), &mut page()).unwrap();
        let cases: [(&str, u8, Vec<u8>, Box<PageBuf>); 8] = [
            ("insert out of order", BTREE_INSERT, insert(1, b"c"), page()),
            (
                "insert at the high key",
                BTREE_INSERT,
                insert(3, b"m"),
                page(),
            ),
            (
                "insert over the high key",
                BTREE_INSERT,
                insert(0, b"a"),
                page(),
            ),
            (
                "insert past the items",
                BTREE_INSERT,
                insert(5, b"x"),
                page(),
            ),
            (
                "insert into an internal page",
                BTREE_INSERT,
                insert(2, b"c"),
                node(1, b"", &[b"", b"d"]),
            ),
            ("insert into a heap page", BTREE_INSERT, insert(1, b"c"), {
                let mut p: Box<PageBuf> = Box::new([0u8; BLCKSZ]);
                page::init(&mut p, PageKind::Heap, 0);
                p
            }),
            ("set-tid of the high key", BTREE_SET_TID, set_tid(0), page()),
            ("set-tid past the items", BTREE_SET_TID, set_tid(3), page()),
        ];
        for (what, info, data, mut p) in cases {
            assert_sqlstate(redo_block(info, &data, &mut p), "XX001", what);
        }
    }

    fn open(dir: &Path) -> Arc<Storage> {
        let config = StorageConfig {
            shared_buffers_pages: 64,
            checkpoint_timeout_s: 3600,
            ..Default::default()
        };
        Storage::open(Arc::new(walnut_io::RealVfs), dir, config).unwrap()
    }

    /// An index of `n` keys `key00000`...; then `damage` is applied to its file (every page's
    /// checksum is fixed afterwards) and the directory reopened.
    fn damaged_index(
        dir: &Path,
        n: usize,
        damage: impl FnOnce(&mut [u8]),
    ) -> (Arc<Storage>, Arc<Relation>) {
        Storage::initdb(Arc::new(walnut_io::RealVfs), dir).unwrap();
        let st = open(dir);
        let id = st.create_relation().unwrap();
        let rel = st.smgr.open(id).unwrap();
        let xid = st.xact.assign_xid();
        let entries: Vec<(Vec<u8>, Tid)> = (0..n)
            .map(|i| (format!("key{i:05}").into_bytes(), tid(i % 100)))
            .collect();
        build(&st, &rel, xid, &entries).unwrap();
        st.shutdown().unwrap();
        drop((rel, st));
        let path = dir.join("base").join(id.0.to_string());
        let mut file = std::fs::read(&path).unwrap();
        damage(&mut file);
        for chunk in file.chunks_exact_mut(BLCKSZ) {
            page::set_checksum(chunk.try_into().unwrap());
        }
        std::fs::write(&path, &file).unwrap();
        let st = open(dir);
        let rel = st.smgr.open(id).unwrap();
        (st, rel)
    }

    /// A leaf with an unused line pointer (valid checksum): inserts until it must split end in
    /// XX001, not a panic.
    #[test]
    fn a_leaf_damaged_on_disk_is_a_corruption_error_when_it_splits() {
        let dir = tempfile::tempdir().unwrap();
        // One leaf, the root (block 1); line pointer 1 (its first key) unused.
        let (st, rel) = damaged_index(dir.path(), 300, |f| {
            let at = BLCKSZ + page::PAGE_HEADER_SIZE + page::LINE_POINTER_SIZE;
            f[at..at + 2].fill(0);
        });
        let xid = st.xact.assign_xid();
        let mut r = Ok(InsertOutcome::Done(None));
        for i in 0..20 {
            let key = format!("z{i:02}{}", "x".repeat(1000)).into_bytes();
            r = insert_unique(
                &st,
                &rel,
                xid,
                &key,
                tid(1),
                &mut |_| Ok(Existing::Duplicate),
                "t_pkey",
            );
            if r.is_err() {
                break;
            }
        }
        assert_sqlstate(r, "XX001", "a split of the damaged leaf");
        st.shutdown().unwrap();
    }

    /// A leaf that claims to be an internal page below the root: lookups through it are XX002.
    #[test]
    fn a_level_out_of_line_on_disk_is_an_index_corruption_error() {
        let dir = tempfile::tempdir().unwrap();
        // Leaves at blocks 1.., the root above them; block 1's level set to 1.
        let (st, rel) = damaged_index(dir.path(), 1000, |f| {
            let at = 2 * BLCKSZ - SPECIAL_SIZE + 8;
            f[at..at + 2].copy_from_slice(&1u16.to_le_bytes());
        });
        assert_eq!(get(&st, &rel, b"key00999").unwrap(), Some(tid(99)));
        assert_sqlstate(
            get(&st, &rel, b"key00000"),
            "XX002",
            "a lookup through block 1",
        );
        st.shutdown().unwrap();
    }
}
