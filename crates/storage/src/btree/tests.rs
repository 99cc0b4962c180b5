use super::split::{assert_split_halves, check_split_items, split_halves};
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
    let delete = |idxs: &[u16]| {
        let mut d = (idxs.len() as u16).to_le_bytes().to_vec();
        for i in idxs {
            d.extend_from_slice(&i.to_le_bytes());
        }
        d
    };
    let page = || leaf(b"m", &[b"b", b"d"]);
    redo_block(BTREE_INSERT, &insert(2, b"c"), &mut page()).unwrap();
    redo_block(BTREE_SET_TID, &set_tid(2), &mut page()).unwrap();
    let mut p = page();
    redo_block(BTREE_DELETE, &delete(&[1]), &mut p).unwrap();
    assert_eq!(
        key_at(&p, 1).unwrap(),
        b"d",
        "the entry after the deleted one moves down"
    );
    assert_eq!(page::slot_count(&p), 2);
    let mut truncated = delete(&[1, 2]);
    truncated.pop();
    // A leaf (say restored from an image) with an unused line pointer: not a B-tree page.
    let mut holed = page();
    page::set_unused(&mut holed, 2);
    let cases: [(&str, u8, Vec<u8>, Box<PageBuf>); 14] = [
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
        (
            "delete of the high key",
            BTREE_DELETE,
            delete(&[0, 1]),
            page(),
        ),
        ("delete past the items", BTREE_DELETE, delete(&[3]), page()),
        ("delete out of order", BTREE_DELETE, delete(&[2, 1]), page()),
        ("a truncated delete", BTREE_DELETE, truncated, page()),
        (
            "delete on a leaf with a hole",
            BTREE_DELETE,
            delete(&[1]),
            holed,
        ),
        (
            "delete on an internal page",
            BTREE_DELETE,
            delete(&[1]),
            node(1, b"", &[b"", b"d"]),
        ),
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
