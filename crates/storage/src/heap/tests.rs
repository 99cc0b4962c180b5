use super::*;
use crate::StorageConfig;
use std::path::Path;
use std::sync::Arc;

fn heap_page(tuples: &[&[u8]]) -> Box<PageBuf> {
    let mut p: Box<PageBuf> = Box::new([0u8; BLCKSZ]);
    page::init(&mut p, PageKind::Heap, 0);
    for t in tuples {
        page::append_item(&mut p, t);
    }
    p
}

fn tuple(xmin: u64) -> Vec<u8> {
    build_tuple(Xid(xmin), None, b"row data")
}

#[test]
fn a_tuple_header_has_a_prev_field_only_when_built_with_one() {
    let older = Tid {
        block: BlockNumber(7),
        slot: 3,
    };
    for (prev, size, want) in [
        (None, 20, Tid::INVALID),
        (Some(Tid::INVALID), 26, Tid::INVALID),
        (Some(older), 26, older),
    ] {
        let t = build_tuple(Xid(5), prev, b"row");
        assert_eq!(t.len(), size + 3, "{prev:?}");
        let v = parse_version(&t).unwrap();
        assert_eq!(
            (v.xmin, v.xmax, v.prev, v.next, v.data.as_slice()),
            (Xid(5), Xid::INVALID, want, Tid::INVALID, &b"row"[..])
        );
        assert_eq!(v.flags & HEAP_HAS_PREV != 0, prev.is_some());
        // The documented byte positions: xmin at 0 and xmax at 6 (48 bits each), next at 12,
        // flags at 18, prev at 20, then the row.
        assert_eq!(&t[0..12], &[5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&t[12..18], &Tid::INVALID.to_bytes());
        assert_eq!(
            u16::from_le_bytes([t[18], t[19]]),
            if prev.is_some() { HEAP_HAS_PREV } else { 0 }
        );
        if prev.is_some() {
            assert_eq!(&t[20..26], &want.to_bytes());
        }
        assert_eq!(&t[size..], b"row");
        // A stamp leaves the prev field and the row where they were.
        let mut stamped = t.clone();
        set_xmax_next(&mut stamped, Xid(9), older, true);
        let s = parse_version(&stamped).unwrap();
        assert_eq!((s.xmax, s.next, s.prev), (Xid(9), older, want));
        assert_eq!((s.data, s.flags & !HEAP_HOT_UPDATED), (v.data, v.flags));
        // A header cut short is corruption, with or without the field: in a tuple, on a
        // page, and in an INSERT record.
        for cut in TUPLE_HEADER_SIZE - 1..size {
            assert!(!has_whole_header(&t[..cut]), "{cut}");
            assert_corrupt(parse_version(&t[..cut]), "a truncated header");
            let mut p = heap_page(&[&t]);
            set_item_len(&mut p, 1, cut as u16);
            assert_corrupt(tuple_index(&p, 1), "a truncated tuple on a page");
            let mut insert = 1u16.to_le_bytes().to_vec();
            insert.extend_from_slice(&t[..cut]);
            let mut p = heap_page(&[]);
            assert_corrupt(
                redo_block(HEAP_INSERT, 0, 1, &insert, &mut p),
                "a truncated insert",
            );
        }
        assert!(has_whole_header(&t[..size]));
    }
    // The largest xid a header holds reads back whole, in both fields.
    let mut t = build_tuple(Xid::MAX_STORED, None, b"row");
    set_xmax_next(&mut t, Xid::MAX_STORED, older, false);
    let v = parse_version(&t).unwrap();
    assert_eq!(
        (v.xmin, v.xmax, v.next),
        (Xid::MAX_STORED, Xid::MAX_STORED, older)
    );
    // Redo of a LINK to a version without the field is corruption, not a write past it.
    let mut p = heap_page(&[&tuple(5)]);
    let mut link = 1u16.to_le_bytes().to_vec();
    link.extend_from_slice(&older.to_bytes());
    assert_corrupt(
        redo_block(HEAP_LINK, 0, 1, &link, &mut p),
        "a link without a field",
    );
    let mut p = heap_page(&[&build_tuple(Xid(5), Some(Tid::INVALID), b"row")]);
    redo_block(HEAP_LINK, 0, 1, &link, &mut p).unwrap();
    assert_eq!(
        parse_version(page::item(&p, 0).unwrap()).unwrap().prev,
        older
    );
}

/// Sets line pointer `slot`'s length field, as damage on disk would.
fn set_item_len(p: &mut PageBuf, slot: u16, len: u16) {
    let at = page::PAGE_HEADER_SIZE + (slot as usize - 1) * page::LINE_POINTER_SIZE + 2;
    p[at..at + 2].copy_from_slice(&len.to_le_bytes());
}

fn assert_corrupt<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    let e = r.expect_err(what);
    assert_eq!(e.sqlstate.0, "XX001", "{what}: {e}");
}

// The assertions fire when a write would break a heap invariant.

#[test]
#[should_panic(expected = "tuple with an invalid xmin")]
fn a_tuple_without_an_xmin_panics() {
    build_tuple(Xid::INVALID, None, b"row");
}

#[test]
#[should_panic(expected = "does not fit a tuple header")]
fn an_xid_past_48_bits_panics() {
    build_tuple(Xid(Xid::MAX_STORED.0 + 1), None, b"row");
}

#[test]
#[should_panic(expected = "stamp of a truncated tuple")]
fn stamping_a_truncated_tuple_panics() {
    set_xmax_next(
        &mut [0u8; TUPLE_HEADER_SIZE - 1],
        Xid(7),
        Tid::INVALID,
        false,
    );
}

#[test]
#[should_panic(expected = "new version's slot 3 is outside the page's 2 line pointers")]
fn a_new_version_outside_the_line_pointers_panics() {
    let (a, b) = (tuple(5), tuple(6));
    let p = heap_page(&[&a, &b]);
    assert_placed(&p, 2, &b); // where the WAL record would say: holds
    assert_placed(&p, 3, &a); // a slot the page does not have
}

#[test]
#[should_panic(expected = "new version's prev link after update")]
fn an_update_whose_new_version_does_not_link_back_panics() {
    let old = Tid {
        block: BlockNumber(0),
        slot: 1,
    };
    let new = Tid {
        block: BlockNumber(0),
        slot: 2,
    };
    let mut old_item = tuple(5);
    set_xmax_next(&mut old_item, Xid(9), new, false);
    let linked = build_tuple(Xid(9), Some(old), b"new row");
    assert_update_links(&old_item, &linked, old, new, Xid(9)); // holds
    let unlinked = build_tuple(Xid(9), Some(Tid::INVALID), b"new row");
    assert_update_links(&old_item, &unlinked, old, new, Xid(9));
}

// Pages from disk and records from the WAL are checked with corruption errors.

#[test]
fn a_damaged_tuple_or_page_is_a_corruption_error() {
    let t = tuple(5);
    let p = heap_page(&[&t]);
    assert_eq!(tuple_index(&p, 1).unwrap(), 0);
    assert_corrupt(tuple_index(&p, 0), "slot 0");
    assert_corrupt(tuple_index(&p, 2), "a slot past the line pointers");
    let mut short = heap_page(&[&t]);
    set_item_len(&mut short, 1, 10);
    assert_corrupt(tuple_index(&short, 1), "a tuple shorter than its header");
    let mut btree: Box<PageBuf> = Box::new([0u8; BLCKSZ]);
    page::init(&mut btree, PageKind::BTree, page::BTREE_SPECIAL_SIZE);
    page::append_item(&mut btree, &t);
    assert_corrupt(tuple_index(&btree, 1), "a B-tree page");
    assert_corrupt(tuple_index(&[0u8; BLCKSZ], 1), "a new page");
}

#[test]
fn redo_of_a_record_that_does_not_fit_its_page_is_a_corruption_error() {
    let t = tuple(5);
    let insert = |slot: u16, tuple: &[u8]| {
        let mut d = slot.to_le_bytes().to_vec();
        d.extend_from_slice(tuple);
        d
    };
    let delete = |slot: u16, xmax: u64| {
        let mut d = slot.to_le_bytes().to_vec();
        d.extend_from_slice(&xmax.to_le_bytes());
        d
    };
    let update_same_page = |new_tid_slot: u16, new_slot: u16| {
        let mut d = delete(1, 9);
        d.extend_from_slice(
            &Tid {
                block: BlockNumber(0),
                slot: new_tid_slot,
            }
            .to_bytes(),
        );
        d.extend_from_slice(&new_slot.to_le_bytes());
        d.extend_from_slice(&t);
        d
    };
    // Each applies cleanly to a heap page holding one tuple...
    redo_block(HEAP_INSERT, 0, 1, &insert(2, &t), &mut heap_page(&[&t])).unwrap();
    redo_block(HEAP_DELETE, 0, 1, &delete(1, 9), &mut heap_page(&[&t])).unwrap();
    redo_block(
        HEAP_UPDATE,
        0,
        1,
        &update_same_page(2, 2),
        &mut heap_page(&[&t]),
    )
    .unwrap();
    // ... and each damage is XX001, never a panic.
    let mut btree: Box<PageBuf> = Box::new([0u8; BLCKSZ]);
    page::init(&mut btree, PageKind::BTree, page::BTREE_SPECIAL_SIZE);
    let mut short = heap_page(&[&t]);
    set_item_len(&mut short, 1, 12);
    let vacuum = |slots: &[u16]| {
        let mut d = (slots.len() as u16).to_le_bytes().to_vec();
        for s in slots {
            d.extend_from_slice(&s.to_le_bytes());
        }
        d
    };
    // A page whose slot 2 is a dead line pointer, VACUUM's.
    let with_dead = || {
        let mut p = heap_page(&[&t, &t, &t]);
        page::set_dead(&mut p, 1);
        page::compact(&mut p);
        p
    };
    let mut p = with_dead();
    redo_block(HEAP_VACUUM, 0, 1, &vacuum(&[2]), &mut p).unwrap();
    assert!(page::is_unused(&p, 1) && page::item(&p, 2).is_some());
    // FREEZE: slot 1's xmin frozen, slot 3's xmin and xmax marked aborted, slot 4's xmax marked
    // aborted.
    let freeze = |entries: &[(u16, u8)]| {
        let mut d = (entries.len() as u16).to_le_bytes().to_vec();
        for (s, bits) in entries {
            d.extend_from_slice(&s.to_le_bytes());
            d.push(*bits);
        }
        d
    };
    let mut stamped = t.clone();
    let next = Tid {
        block: BlockNumber(0),
        slot: 1,
    };
    set_xmax_next(&mut stamped, Xid(9), next, false);
    // Slot 4: the same, but its aborted update was a same-page one.
    let mut hot_stamped = stamped.clone();
    set_header_flag(&mut hot_stamped, HEAP_HOT_UPDATED, true);
    let mut p = heap_page(&[&t, &t, &stamped, &hot_stamped]);
    redo_block(
        HEAP_FREEZE,
        0,
        1,
        &freeze(&[
            (1, FREEZE_XMIN_COMMITTED),
            (3, FREEZE_XMIN_ABORTED | FREEZE_XMAX_ABORTED),
            (4, FREEZE_XMAX_ABORTED),
        ]),
        &mut p,
    )
    .unwrap();
    let v = |i: usize| parse_version(page::item(&p, i).unwrap()).unwrap();
    assert_eq!((v(0).xmin, v(0).xmax), (Xid::FROZEN, Xid::INVALID));
    assert_eq!(
        v(1).xmin,
        parse_version(&t).unwrap().xmin,
        "slot 2 untouched"
    );
    // An aborted `xmax` becomes `Xid::ABORTED` (never empty again: `update`), and `next` goes
    // with it; a same-page update's flag too.
    assert_eq!(
        (v(2).xmin, v(2).xmax, v(2).next),
        (Xid::ABORTED, Xid::ABORTED, Tid::INVALID)
    );
    assert_eq!(
        (v(3).xmax, v(3).next, v(3).flags),
        (Xid::ABORTED, Tid::INVALID, 0)
    );
    assert_eq!(v(2).data, parse_version(&t).unwrap().data);
    let cases: [(&str, u8, Vec<u8>, Box<PageBuf>); 17] = [
        (
            "freeze of a missing slot",
            HEAP_FREEZE,
            freeze(&[(4, FREEZE_XMIN_COMMITTED)]),
            heap_page(&[&t]),
        ),
        (
            "freeze with no change",
            HEAP_FREEZE,
            freeze(&[(1, 0)]),
            heap_page(&[&t]),
        ),
        (
            "freeze of an xmin both ways",
            HEAP_FREEZE,
            freeze(&[(1, FREEZE_XMIN_COMMITTED | FREEZE_XMIN_ABORTED)]),
            heap_page(&[&t]),
        ),
        (
            "freeze with an unknown bit",
            HEAP_FREEZE,
            freeze(&[(1, 0x40)]),
            heap_page(&[&t]),
        ),
        (
            "a truncated freeze",
            HEAP_FREEZE,
            freeze(&[(1, FREEZE_XMIN_COMMITTED)])[..4].to_vec(),
            heap_page(&[&t]),
        ),
        (
            "insert onto a B-tree page",
            HEAP_INSERT,
            insert(1, &t),
            btree,
        ),
        (
            "insert of a tuple shorter than its header",
            HEAP_INSERT,
            insert(2, &t[..TUPLE_HEADER_SIZE - 1]),
            heap_page(&[&t]),
        ),
        (
            "insert at a slot that is not next",
            HEAP_INSERT,
            insert(5, &t),
            heap_page(&[&t]),
        ),
        (
            "insert with no slot",
            HEAP_INSERT,
            vec![1],
            heap_page(&[&t]),
        ),
        (
            "delete of a truncated tuple",
            HEAP_DELETE,
            delete(1, 9),
            short,
        ),
        (
            "delete with an invalid xmax",
            HEAP_DELETE,
            delete(1, 0),
            heap_page(&[&t]),
        ),
        (
            "delete of a missing slot",
            HEAP_DELETE,
            delete(3, 9),
            heap_page(&[&t]),
        ),
        (
            "update whose new TID is not its new slot",
            HEAP_UPDATE,
            update_same_page(3, 2),
            heap_page(&[&t]),
        ),
        (
            "vacuum of a live tuple",
            HEAP_VACUUM,
            vacuum(&[1]),
            with_dead(),
        ),
        (
            "vacuum of a slot twice",
            HEAP_VACUUM,
            vacuum(&[2, 2]),
            with_dead(),
        ),
        (
            "vacuum of a missing slot",
            HEAP_VACUUM,
            vacuum(&[7]),
            with_dead(),
        ),
        ("a truncated vacuum", HEAP_VACUUM, vec![1, 0], with_dead()),
    ];
    for (what, info, data, mut p) in cases {
        assert_corrupt(redo_block(info, 0, 1, &data, &mut p), what);
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

/// A new data directory at `dir` with a new relation holding rows "row a" and "row b" on block
/// 0, inserted by one transaction (left running): (storage, relation file, relation, xid, TID
/// of a, TID of b).
fn two_rows(
    dir: &Path,
) -> (
    Arc<Storage>,
    walnut_common::RelFileId,
    Arc<Relation>,
    Xid,
    Tid,
    Tid,
) {
    Storage::initdb(Arc::new(walnut_io::RealVfs), dir).unwrap();
    let st = open(dir);
    let id = st.create_relation().unwrap();
    let rel = st.smgr.open(id).unwrap();
    let xid = st.xact.assign_xid();
    let a = insert(&st, &rel, xid, None, b"row a", 100).unwrap();
    let b = insert(&st, &rel, xid, None, b"row b", 100).unwrap();
    (st, id, rel, xid, a, b)
}

/// A version inserted without a `prev` field (a table without an index) is never given a link:
/// `relink_prev` refuses it and `clear_prev` finds nothing to clear. Every row has the same size
/// limit, that of a tuple with the field, so a row that could be inserted can be updated.
#[test]
fn a_version_without_a_prev_field_is_never_linked_and_every_row_has_one_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (st, _, rel, xid, a, b) = two_rows(dir.path());
    assert_eq!(fetch(&st, &rel, a).unwrap().flags & HEAP_HAS_PREV, 0);
    assert_corrupt(
        relink_prev(&st, &rel, a, b, xid),
        "relinking a version without the field",
    );
    assert!(!clear_prev(&st, &rel, a, b).unwrap());
    assert_eq!(fetch(&st, &rel, a).unwrap().prev, Tid::INVALID);
    let too_big = |r: Result<()>| {
        let e = r.expect_err("over the limit");
        assert_eq!(e.sqlstate.0, "54000", "{e}");
    };
    let largest = vec![7u8; MAX_TUPLE_SIZE - TUPLE_HEADER_SIZE - PREV_FIELD_SIZE];
    let over = vec![7u8; largest.len() + 1];
    let big = insert(&st, &rel, xid, None, &largest, 100).unwrap();
    assert_eq!(fetch(&st, &rel, big).unwrap().data, largest);
    assert!(matches!(
        update(&st, &rel, big, xid, &largest, None).unwrap(),
        WriteCheck::Done(_)
    ));
    too_big(insert(&st, &rel, xid, None, &over, 100).map(drop));
    too_big(insert(&st, &rel, xid, Some(Tid::INVALID), &over, 100).map(drop));
    too_big(update(&st, &rel, b, xid, &over, None).map(drop));
    let mut bulk = BulkInsert::new(&st, rel.clone(), xid, 100, false);
    too_big(bulk.add(&st, &over));
    bulk.add(&st, &largest).unwrap();
    bulk.finish(&st).unwrap();
    st.shutdown().unwrap();
}

/// A tuple cut short on disk (with a valid checksum: a bug of an older version, or damage
/// the checksum missed) makes every write of that row fail with XX001; other rows work.
#[test]
fn a_tuple_damaged_on_disk_is_a_corruption_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (st, id, rel, _, a, b) = two_rows(dir.path());
    assert_eq!((a.block, b.block), (BlockNumber(0), BlockNumber(0)));
    st.shutdown().unwrap();
    drop((rel, st));

    let path = dir.path().join("base").join(id.0.to_string());
    let mut file = std::fs::read(&path).unwrap();
    let p: &mut PageBuf = (&mut file[..BLCKSZ]).try_into().unwrap();
    set_item_len(p, a.slot, 12);
    page::set_checksum(p);
    std::fs::write(&path, &file).unwrap();

    let st = open(dir.path());
    let rel = st.smgr.open(id).unwrap();
    let xid = st.xact.assign_xid();
    assert_corrupt(fetch(&st, &rel, a), "fetch");
    assert_corrupt(delete(&st, &rel, a, xid), "delete");
    assert_corrupt(update(&st, &rel, a, xid, b"row a2", None), "update");
    assert_eq!(fetch(&st, &rel, b).unwrap().data, b"row b");
    assert!(matches!(
        update(&st, &rel, b, xid, b"row b2", None).unwrap(),
        WriteCheck::Done(_)
    ));
    st.shutdown().unwrap();
}

/// An update is heap-only only if the entry the caller read leads to the version it updates
/// (and nobody has stamped that version): an entry naming another version (one an aborted
/// update or insert moved it to) gives an ordinary update, which the caller follows by moving
/// the entry.
#[test]
fn an_update_is_heap_only_only_when_the_entry_leads_to_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let (st, _, rel, xid, a, b) = two_rows(dir.path());
    // The entry names another version: not heap-only.
    let a2 = match update(&st, &rel, a, xid, b"row a2", Some(b)).unwrap() {
        WriteCheck::Done(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(a2.block, a.block);
    assert_eq!(fetch(&st, &rel, a2).unwrap().flags, HEAP_HAS_PREV);
    // The entry names the version (the root of a chain that leads to it): heap-only.
    let xid2 = st.xact.assign_xid();
    let b2 = match update(&st, &rel, b, xid2, b"row b2", Some(b)).unwrap() {
        WriteCheck::HeapOnly(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        fetch(&st, &rel, b2).unwrap().flags,
        HEAP_ONLY_TUPLE | HEAP_HAS_PREV
    );
    assert_eq!(fetch(&st, &rel, b).unwrap().flags, HEAP_HOT_UPDATED);
    let xid3 = st.xact.assign_xid();
    assert!(matches!(
        update(&st, &rel, b2, xid3, b"row b3", Some(b)).unwrap(),
        WriteCheck::HeapOnly(_)
    ));
    // No entry (no index): never heap-only.
    let xid4 = st.xact.assign_xid();
    assert!(matches!(
        update(&st, &rel, a2, xid4, b"row a3", None).unwrap(),
        WriteCheck::Done(_)
    ));
    st.shutdown().unwrap();
}

/// Each change to a heap page marks the page dirty before its WAL record is inserted
/// ([`Storage::log_change`]): a checkpoint that fixes its redo point just before the insert,
/// after the record's position would have been reserved in the other order, lists the page
/// among those to write. Marked after the insert instead, a page that was clean would be
/// missed, and redo from that checkpoint's redo point would skip the change. The hook runs
/// between the two steps and reads the checkpoint's list; the page is clean before each change
/// (a checkpoint wrote it).
#[test]
fn a_change_marks_its_page_dirty_before_its_wal_record_is_inserted() {
    use std::cell::Cell;
    use std::rc::Rc;
    let dir = tempfile::tempdir().unwrap();
    let (st, id, rel, xid, a, b) = two_rows(dir.path());
    let listed = {
        let st = st.clone();
        move || {
            st.pool
                .checkpoint_snapshot()
                .iter()
                .any(|(_, t)| t.rel == id && t.block == BlockNumber(0))
        }
    };
    let clean = || {
        st.checkpoint_now(crate::control::DbState::InProduction)
            .unwrap();
        assert!(!listed(), "block 0 is clean after a checkpoint");
    };
    let checked = Rc::new(Cell::new(0));
    crate::BEFORE_LOG_INSERT.with(|h| {
        let (checked, listed) = (checked.clone(), listed.clone());
        *h.borrow_mut() = Some(Box::new(move || {
            assert!(
                listed(),
                "a changed page is not dirty before its WAL insert"
            );
            checked.set(checked.get() + 1);
        }));
    });
    clean();
    insert(&st, &rel, xid, None, b"row c", 100).unwrap();
    clean();
    assert!(matches!(
        update(&st, &rel, b, xid, b"row b2", None).unwrap(),
        WriteCheck::HeapOnly(_) | WriteCheck::Done(_)
    ));
    clean();
    assert!(matches!(
        delete(&st, &rel, a, xid).unwrap(),
        WriteCheck::Done(_)
    ));
    crate::BEFORE_LOG_INSERT.with(|h| *h.borrow_mut() = None);
    assert_eq!(checked.get(), 3, "the hook ran once per change");
    st.shutdown().unwrap();
}
