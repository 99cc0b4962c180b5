//! The WAL record decoder on arbitrary bytes: it must return a record or a corruption error,
//! never panic, and a record it accepts must encode back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use walnut_common::Lsn;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    // The first 8 bytes choose the position the decoder expects (8-aligned, as records are).
    let lsn = Lsn(u64::from_le_bytes(data[..8].try_into().unwrap()) & !7);
    let bytes = &data[8..];
    if let Ok(rec) = walnut_wal::decode_record(lsn, bytes) {
        let again = walnut_wal::encode_record(lsn, &rec.record);
        // Compare the record itself; the padding after total_len is not part of it.
        let n = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(
            &again[..n],
            &bytes[..n],
            "an accepted record must re-encode to its bytes"
        );
    }
});
