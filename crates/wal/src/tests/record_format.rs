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
