//! Splits of full B-tree pages (structure modifications): the split of a leaf and, recursively,
//! of the parents its new downlink does not fit in, up to a new root; every page changed is
//! logged in one `BTREE_SMO` record of full-page images flagged `RECORD_MULTI_BLOCK_ATOMIC`.
//! The items of a page to split (read from disk) are checked with corruption errors first, the
//! halves built from them asserted on after (see the module docs of `btree`).

use super::{
    assert_in_order_at, check_insert_position, choose_child, data_items, descend, high_key,
    index_corrupted, init_node, key_at, left_link, level, make_item, parse_item, right_link,
    set_links, BTREE_SMO, MAX_DEPTH, RM_BTREE,
};
use crate::bufpool::ReadMode;
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::Relation;
use crate::Storage;
use std::sync::atomic::Ordering;
use walnut_common::{BlockNumber, Error, RelFileId, Result, Xid};
use walnut_wal::{BlockRef, Record, RECORD_MULTI_BLOCK_ATOMIC};

/// Splits the leaf that `key` descends to (and ancestors as needed), logging all changed pages
/// in one atomic record.
pub(super) fn split(st: &Storage, rel: &Relation, key: &[u8], need: usize, xid: Xid) -> Result<()> {
    let _t = rel.tree_lock.write();
    let (leaf, path) = descend(st, rel, key)?;
    {
        let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
        if page::fits(&pin.read(), need) {
            return Ok(()); // someone split it already
        }
    }
    let pin = st.pool.pin(rel, leaf, ReadMode::Normal)?;
    let img = page::boxed_copy(&pin.read());
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
        let c = page::boxed_copy(&pin.read());
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
        let mut r: Box<PageBuf> = page::zeroed();
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
pub(super) fn split_halves(
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
    let mut left: Box<PageBuf> = page::zeroed();
    init_node(&mut left, lvl);
    set_links(&mut left, Some(right_block), left_link(page_img));
    page::add_item(&mut left, 0, &make_item(sep, &[]));
    for (j, it) in items[..cut].iter().enumerate() {
        page::add_item(&mut left, j + 1, it);
    }
    let mut right: Box<PageBuf> = page::zeroed();
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
pub(super) fn check_split_items(
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
pub(super) fn assert_split_halves(
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
    let pin_refs: Vec<_> = pins.iter().collect();
    let end = st.log_change(&pin_refs, &mut |_redo| Record {
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
                image_lz4: false,
                image: Some(img.to_vec()),
                data: vec![],
            })
            .collect(),
        main_data: vec![],
    })?;
    for g in guards.iter_mut() {
        page::set_lsn(g, end);
    }
    if let Some(r) = new_root {
        rel.btree_root.store(r.0, Ordering::Release);
    }
    Ok(())
}
