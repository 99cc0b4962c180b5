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

use crate::bufpool::ReadMode;
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::Relation;
use crate::Storage;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use walnut_common::{BlockNumber, Error, Result, SqlState, Tid, Xid, BLCKSZ};
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

const SPECIAL_SIZE: usize = 16;
const NONE: u32 = u32::MAX;
/// Longest key, bytes (PostgreSQL's limit is about a third of a page).
pub const MAX_KEY_SIZE: usize = 2000;
/// Leaf fill during builds, percent (PostgreSQL's default B-tree fillfactor is 90).
const BUILD_FILL: usize = 90;

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
    for _ in 0..64 {
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
        if level(&p) == 0 {
            return Ok((block, path));
        }
        path.push(block);
        block = choose_child(&p, key)?.1;
    }
    Err(Error::corruption("B-tree is deeper than 64 levels"))
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
            SqlState("54000"),
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
                page::add_item(&mut p, i, &item);
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
    let item = page::item_mut(p, i).ok_or_else(|| Error::corruption("B-tree item missing"))?;
    let n = item.len();
    if n < Tid::SIZE + 2 {
        return Err(Error::corruption("B-tree leaf item is truncated"));
    }
    item[n - Tid::SIZE..].copy_from_slice(&tid.to_bytes());
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
    let n = page::slot_count(&img);
    let items: Vec<Vec<u8>> = (1..n)
        .map(|i| page::item(&img, i).expect("item").to_vec())
        .collect();
    split_node(st, rel, xid, Vec::new(), leaf, &img, items, &path, None)
}

/// Splits page `block` (a leaf, or an internal page whose item list `items` already includes
/// the new downlink), inserting the downlink to the new right page into the parent, recursively.
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
    let cut = (items.len() / 2).clamp(1, items.len() - 1);
    let old_high = page::item(page_img, 0).expect("high key").to_vec();
    let old_right = right_link(page_img);
    let right_block = alloc()?;
    let sep = parse_item(&items[cut])?.0.to_vec();
    let mut left: Box<PageBuf> = vec![0u8; BLCKSZ]
        .into_boxed_slice()
        .try_into()
        .expect("BLCKSZ");
    init_node(&mut left, lvl);
    set_links(&mut left, Some(right_block), left_link(page_img));
    page::add_item(&mut left, 0, &make_item(&sep, &[]));
    for (j, it) in items[..cut].iter().enumerate() {
        page::add_item(&mut left, j + 1, it);
    }
    let mut right: Box<PageBuf> = vec![0u8; BLCKSZ]
        .into_boxed_slice()
        .try_into()
        .expect("BLCKSZ");
    init_node(&mut right, lvl);
    set_links(&mut right, old_right, Some(block));
    page::add_item(&mut right, 0, &old_high);
    for (j, it) in items[cut..].iter().enumerate() {
        // The first downlink of an internal page has key -infinity.
        let it = if lvl > 0 && j == 0 {
            make_item(&[], parse_item(it)?.1)
        } else {
            it.clone()
        };
        page::add_item(&mut right, j + 1, &it);
    }
    if let Some(rb) = old_right {
        let mut rp = load(rb)?;
        let rr = right_link(&rp);
        set_links(&mut rp, rr, Some(right_block));
        pages.push((rb, rp, false));
    }
    pages.push((block, left, false));
    pages.push((right_block, right, true));
    let downlink = make_item(&sep, &right_block.0.to_le_bytes());
    if path.is_empty() {
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
    let (ci, _) = choose_child(&pp, &sep)?;
    if page::fits(&pp, downlink.len()) {
        page::add_item(&mut pp, ci + 1, &downlink);
        pages.push((parent, pp, false));
        return finish_smo(st, rel, xid, pages, new_root);
    }
    let n = page::slot_count(&pp);
    let mut big: Vec<Vec<u8>> = (1..n)
        .map(|i| page::item(&pp, i).expect("item").to_vec())
        .collect();
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
    match info {
        BTREE_INSERT => {
            if pos > page::slot_count(p) || !page::fits(p, data.len() - 2) {
                return Err(Error::corruption(
                    "B-tree insert redo does not fit the page",
                ));
            }
            page::add_item(p, pos, &data[2..]);
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
