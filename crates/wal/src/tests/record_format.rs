//! The record format: encoding round-trips, and decoding truncated, damaged or arbitrary bytes
//! fails cleanly.

use super::*;
use proptest::prelude::*;

fn arb_block() -> impl Strategy<Value = BlockRef> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<bool>(),
        proptest::option::of(any::<u8>()),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(rel, block, will_init, img, data)| BlockRef {
            rel: RelFileId(rel),
            block: BlockNumber(block),
            will_init,
            image_lz4: false,
            image: img.map(|b| (0..BLCKSZ).map(|i| b.wrapping_add(i as u8)).collect()),
            data,
        })
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        any::<u8>(),
        any::<u8>(),
        any::<u64>(),
        any::<u8>(),
        proptest::collection::vec(arb_block(), 0..4),
        proptest::collection::vec(any::<u8>(), 0..500),
    )
        .prop_map(|(rmgr, info, xid, flags, blocks, main_data)| Record {
            rmgr: RmgrId(rmgr),
            info,
            xid: Xid(xid),
            flags,
            blocks,
            main_data,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn record_round_trip(rec in arb_record(), lsn in (1u64..1 << 40).prop_map(|l| l * 8)) {
        let bytes = encode_record(Lsn(lsn), &rec);
        prop_assert_eq!(bytes.len() % 8, 0);
        prop_assert_eq!(bytes.len() as u64, align8(record_len(&rec) as u64));
        let d = decode_record(Lsn(lsn), &bytes).unwrap();
        prop_assert_eq!(d.lsn, Lsn(lsn));
        prop_assert_eq!(d.end_lsn, Lsn(lsn + bytes.len() as u64));
        prop_assert_eq!(&d.record, &rec);
        // The same bytes at another position are stale.
        prop_assert!(decode_record(Lsn(lsn + 8), &bytes).is_err());
    }

    #[test]
    fn decode_truncated_or_flipped_never_panics(rec in arb_record(), cut in any::<prop::sample::Index>(),
                                                flip in any::<prop::sample::Index>(), bit in 0u8..8) {
        let bytes = encode_record(Lsn(8), &rec);
        let total = record_len(&rec);
        let cut = cut.index(total);
        prop_assert!(decode_record(Lsn(8), &bytes[..cut]).is_err());
        let mut flipped = bytes.clone();
        let at = flip.index(total);
        flipped[at] ^= 1 << bit;
        prop_assert!(decode_record(Lsn(8), &flipped).is_err());
    }

    #[test]
    fn decode_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2000), lsn in any::<u64>()) {
        let _ = decode_record(Lsn(lsn), &bytes);
        // Garbage with a plausible header: the right lsn and a small length.
        let mut b = bytes.clone();
        if b.len() >= 16 {
            let len = (b.len() as u32).max(32);
            b[0..4].copy_from_slice(&len.to_le_bytes());
            b[8..16].copy_from_slice(&lsn.to_le_bytes());
            let _ = decode_record(Lsn(lsn), &b);
        }
    }
}

#[test]
fn zero_header_is_end_of_wal() {
    assert!(decode_record(Lsn(8), &[0u8; 64]).is_err());
    assert!(decode_record(Lsn(8), &[]).is_err());
}

/// A page that compresses as pgbench's do: short distinct fields among runs of blanks.
fn compressible_page(seed: u32) -> Vec<u8> {
    let mut p = vec![b' '; BLCKSZ];
    for (i, chunk) in p.chunks_mut(100).enumerate() {
        chunk[..4].copy_from_slice(&(seed.wrapping_mul(31) + i as u32).to_le_bytes());
    }
    p
}

fn one_image_record(image: Vec<u8>) -> Record {
    Record {
        rmgr: RmgrId(7),
        info: 1,
        xid: Xid(42),
        flags: 0,
        blocks: vec![BlockRef {
            rel: RelFileId(3),
            block: BlockNumber(9),
            will_init: false,
            image_lz4: false,
            image: Some(image),
            data: vec![1, 2, 3],
        }],
        main_data: vec![4, 5],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn record_round_trip_with_lz4(rec in arb_record(), lsn in (1u64..1 << 40).prop_map(|l| l * 8)) {
        let bytes = encode_record_with(Lsn(lsn), &rec, WalCompression::Lz4);
        prop_assert_eq!(bytes.len() % 8, 0);
        prop_assert!(bytes.len() as u64 <= align8(record_len(&rec) as u64));
        let d = decode_record(Lsn(lsn), &bytes).unwrap();
        prop_assert_eq!(d.end_lsn, Lsn(lsn + bytes.len() as u64));
        prop_assert_eq!(&d.record, &rec);
    }

    #[test]
    fn decode_of_damaged_lz4_records_never_panics(rec in arb_record(), cut in any::<prop::sample::Index>(),
                                                  flip in any::<prop::sample::Index>(), bit in 0u8..8) {
        let bytes = encode_record_with(Lsn(8), &rec, WalCompression::Lz4);
        let total = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
        prop_assert!(decode_record(Lsn(8), &bytes[..cut.index(total)]).is_err());
        let mut flipped = bytes.clone();
        let at = flip.index(total);
        flipped[at] ^= 1 << bit;
        prop_assert!(decode_record(Lsn(8), &flipped).is_err());
        // The same damage past the length field under a recomputed CRC: an error or some
        // record, never a panic.
        if at >= 4 {
            crate::record::seal(&mut flipped, 8);
            let _ = decode_record(Lsn(8), &flipped);
        }
    }
}

#[test]
fn compressible_images_are_stored_compressed_and_random_ones_whole() {
    let rec = one_image_record(compressible_page(5));
    let bytes = encode_record_with(Lsn(8), &rec, WalCompression::Lz4);
    assert!(
        bytes.len() < record_len(&rec) / 4,
        "{} bytes for a compressible page",
        bytes.len()
    );
    assert_eq!(
        bytes[RECORD_HEADER_LEN + 8],
        0x02 | 0x04,
        "has_image | image_lz4"
    );
    assert_eq!(decode_record(Lsn(8), &bytes).unwrap().record, rec);
    // Off stores it whole.
    let whole = encode_record_with(Lsn(8), &rec, WalCompression::Off);
    assert_eq!(whole.len() as u64, align8(record_len(&rec) as u64));
    assert_eq!(whole[RECORD_HEADER_LEN + 8], 0x02);

    // Bytes LZ4 cannot shrink are stored whole even with lz4.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let random: Vec<u8> = (0..BLCKSZ)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let rec = one_image_record(random);
    let bytes = encode_record_with(Lsn(8), &rec, WalCompression::Lz4);
    assert_eq!(bytes.len() as u64, align8(record_len(&rec) as u64));
    assert_eq!(bytes[RECORD_HEADER_LEN + 8], 0x02);
    assert_eq!(decode_record(Lsn(8), &bytes).unwrap().record, rec);
}

/// Replaces the compressed image of a one-block record with `payload` (its length fields
/// and CRC made right), so that only the decompression can object.
fn with_payload(rec: &Record, payload: &[u8]) -> Vec<u8> {
    let bytes = encode_record_with(Lsn(8), rec, WalCompression::Lz4);
    let at = RECORD_HEADER_LEN + BLOCK_HEADER_LEN;
    let old = u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()) as usize;
    let total = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&bytes[at + 2 + old..total]);
    let n = out.len() as u32;
    out[0..4].copy_from_slice(&n.to_le_bytes());
    out.resize(align8(n as u64) as usize, 0);
    crate::record::seal(&mut out, 8);
    out
}

#[test]
fn a_compressed_image_that_does_not_make_a_page_is_corruption() {
    let rec = one_image_record(compressible_page(1));
    // A valid LZ4 block of half a page, and one cut short: each passes the CRC.
    let half = lz4_flex::block::compress(&compressible_page(2)[..BLCKSZ / 2]);
    let full = lz4_flex::block::compress(&compressible_page(2));
    for payload in [&half[..], &full[..full.len() - 3], &[0xFF; 40][..]] {
        let e = decode_record(Lsn(8), &with_payload(&rec, payload)).unwrap_err();
        assert_eq!(e.kind, walnut_common::ErrorKind::Corruption, "{e}");
        assert!(e.to_string().contains("invalid compressed image"), "{e}");
    }
    // The right payload decodes: the test's surgery itself is sound.
    let good = with_payload(&rec, &lz4_flex::block::compress(&compressible_page(1)));
    assert_eq!(decode_record(Lsn(8), &good).unwrap().record, rec);
}

/// A reader that defers decompression gets the image compressed (`image_lz4`); restoring it
/// gives the page, a record inserted from it encodes the same bytes again, and an image that
/// does not make a page is corruption when restored (as `decode_record` finds it when it
/// decompresses).
#[test]
fn a_deferred_image_restores_the_page_reencodes_the_same_and_refuses_a_bad_image() {
    let rec = one_image_record(compressible_page(3));
    let bytes = encode_record_with(Lsn(8), &rec, WalCompression::Lz4);
    let d = crate::decode_record_with(Lsn(8), &bytes, true).unwrap();
    let b = &d.record.blocks[0];
    assert!(b.image_lz4);
    assert!(b.image.as_ref().unwrap().len() < BLCKSZ / 4);
    let mut page = vec![0u8; BLCKSZ];
    assert!(b.restore_image(&mut page).unwrap());
    assert_eq!(page, compressible_page(3));
    assert_eq!(
        encode_record_with(Lsn(8), &d.record, WalCompression::Off),
        bytes
    );
    // Without an image: false, the page untouched; an image kept whole restores too.
    let mut none = rec.clone();
    none.blocks[0].image = None;
    assert!(!none.blocks[0].restore_image(&mut page).unwrap());
    let mut whole = vec![0u8; BLCKSZ];
    assert!(rec.blocks[0].restore_image(&mut whole).unwrap());
    assert_eq!(whole, compressible_page(3));
    // A half page's LZ4 block passes the CRC and decodes, deferred; restoring refuses it.
    let half = lz4_flex::block::compress(&compressible_page(2)[..BLCKSZ / 2]);
    let d = crate::decode_record_with(Lsn(8), &with_payload(&rec, &half), true).unwrap();
    let e = d.record.blocks[0].restore_image(&mut page).unwrap_err();
    assert_eq!(e.kind, walnut_common::ErrorKind::Corruption, "{e}");
    assert!(e.to_string().contains("invalid compressed image"), "{e}");
}

#[test]
fn an_lz4_flag_without_an_image_is_corruption() {
    let mut rec = one_image_record(compressible_page(1));
    rec.blocks[0].image = None;
    let mut bytes = encode_record(Lsn(8), &rec);
    bytes[RECORD_HEADER_LEN + 8] = 0x04;
    crate::record::seal(&mut bytes, 8);
    let e = decode_record(Lsn(8), &bytes).unwrap_err();
    assert!(
        e.to_string().contains("invalid block reference flags"),
        "{e}"
    );
}
