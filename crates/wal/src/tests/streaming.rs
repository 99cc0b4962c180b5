//! A standby's WAL: what a walreceiver writes with `ReceivedWal` (in arbitrary pieces, as
//! XLogData messages cut it) reads back through a streaming-mode reader record for record, and
//! the reader never returns a record that ends past the receiver's flush position.

use super::*;
use crate::receive::ReceivedWal;

/// The primary's WAL bytes `[from, to)`, read from its segment files.
fn primary_bytes(dir: &Path, from: u64, to: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = from;
    while pos < to {
        let segno = segment_of(pos);
        let f = vfs()
            .open(&dir.join(segment_file_name(1, segno)), OpenMode::default())
            .unwrap();
        let off = pos % WAL_SEGMENT_SIZE;
        let n = (to - pos).min(WAL_SEGMENT_SIZE - off) as usize;
        let mut buf = vec![0u8; n];
        f.read_exact_at(&mut buf, off).unwrap();
        out.extend_from_slice(&buf);
        pos += n as u64;
    }
    out
}

#[test]
fn streamed_wal_replays_record_for_record_and_never_past_the_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 4 << 20, 1);
    let wal = create_open(vfs(), &cfg);
    let start = wal.insert_lsn();
    // Enough records, some with page images, to cross a segment boundary.
    let mut ends = Vec::new();
    for seq in 0..5000 {
        let (_, end) = wal
            .insert(&mut |_| tagged_record(1, seq, seq % 2 == 0))
            .unwrap();
        ends.push(end);
    }
    let end = wal.insert_lsn();
    wal.flush(end).unwrap();
    assert!(
        segment_of(end.0) > segment_of(start.0),
        "the test must cross a segment"
    );
    let (expected, _) = read_all(vfs(), cfg.dir.clone(), start);
    let bytes = primary_bytes(&cfg.dir, start.0, end.0);

    // The standby: its WAL directory holds nothing yet; the receiver writes pieces of
    // pseudo-random sizes, flushing after some; replay reads after each flush.
    let sdir = tmp.path().join("standby_wal");
    vfs().create_dir_all(&sdir).unwrap();
    let mut recv = ReceivedWal::new(vfs(), sdir.clone(), 1, start).unwrap();
    let mut reader: Option<WalReader> = None;
    let mut got = Vec::new();
    let mut pos = 0usize;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while pos < bytes.len() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = ((x % 40_000) as usize + 1).min(bytes.len() - pos);
        recv.write(Lsn(start.0 + pos as u64), &bytes[pos..pos + n])
            .unwrap();
        pos += n;
        if x % 3 != 0 && pos < bytes.len() {
            continue;
        }
        let flush = recv.flush();
        // More arrives, written but not yet flushed: replay must not read it.
        let k = ((x >> 20) % 30_000) as usize;
        let k = k.min(bytes.len() - pos);
        recv.write(Lsn(start.0 + pos as u64), &bytes[pos..pos + k])
            .unwrap();
        pos += k;
        let r = reader.get_or_insert_with(|| WalReader::open(vfs(), sdir.clone(), start).unwrap());
        r.set_limit(flush);
        while let Some(rec) = r.next_record().unwrap() {
            assert!(
                rec.end_lsn <= flush,
                "a record past the flush position was returned"
            );
            got.push(rec);
        }
        // Everything that ends by the flush position was returned.
        let whole = ends.iter().filter(|&&e| e <= flush).count();
        assert_eq!(got.len(), whole, "records ending by {flush}");
    }
    assert_eq!(got.len(), expected.len());
    for (a, b) in got.iter().zip(&expected) {
        assert_eq!((a.lsn, a.end_lsn), (b.lsn, b.end_lsn));
        assert_eq!(tag_of(&a.record), tag_of(&b.record));
    }
    // A resend from an earlier position (the primary restarts from a segment's start) is
    // accepted; a gap is refused.
    recv.write(start, &bytes[..100]).unwrap();
    assert!(recv.write(Lsn(end.0 + 8), &[0; 8]).is_err());
}

/// A standby that follows its primary onto timeline 2 renames its copy of the segment it
/// resumes in, and later ones, as the primary renamed its own; segments it creates from then
/// on carry timeline 2; earlier ones keep timeline 1's name.
#[test]
fn a_receiver_on_a_new_timeline_names_segments_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("standby_wal");
    vfs().create_dir_all(&dir).unwrap();
    for segno in 0..2 {
        std::fs::write(dir.join(segment_file_name(1, segno)), b"").unwrap();
    }
    let start = Lsn(WAL_SEGMENT_SIZE + 4096);
    let mut recv = ReceivedWal::new(vfs(), dir.clone(), 2, start).unwrap();
    recv.write(start, &[1; 64]).unwrap();
    // Into segment 2, which the receiver creates.
    let end = Lsn(2 * WAL_SEGMENT_SIZE + 4096);
    recv.write(Lsn(start.0 + 64), &vec![2; (end.0 - start.0 - 64) as usize])
        .unwrap();
    recv.flush();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "000000010000000000000000",
            "000000020000000000000001",
            "000000020000000000000002"
        ]
    );
}
