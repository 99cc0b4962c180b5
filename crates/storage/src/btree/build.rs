//! The bulk build of a new index from sorted entries: packed leaves, internal levels above them,
//! the meta page last; each page logged as one `BTREE_NEWPAGE` full-page image.

use super::{
    init_node, make_item, set_links, BTREE_NEWPAGE, BUILD_FILL, MAX_KEY_SIZE, RM_BTREE,
    SPECIAL_SIZE,
};
use crate::bufpool::ReadMode;
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::Relation;
use crate::Storage;
use std::sync::atomic::Ordering;
use walnut_common::{BlockNumber, Error, Result, SqlState, Tid, Xid, BLCKSZ};
use walnut_wal::{BlockRef, Record};

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
