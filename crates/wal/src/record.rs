//! The on-disk record format (see DESIGN.md, "Record format").
//!
//! ```text
//! 0   u32 total_len      header + blocks + main data, excluding alignment padding
//! 4   u32 crc            crc32c(bytes[8..total_len]) continued over bytes[0..4]
//! 8   u64 lsn            the record's own start LSN
//! 16  u64 xid
//! 24  u8  rmgr
//! 25  u8  info
//! 26  u8  block count
//! 27  u8  flags
//! 28  u32 main_data_len
//! 32  per block: u32 rel, u32 block, u8 flags (bit0 will_init, bit1 has_image, bit2
//!     image_lz4), u8 0, u16 data_len, [u16 image_len if image_lz4], [image: BLCKSZ bytes, or
//!     image_len bytes of LZ4 if image_lz4], data
//!     main data
//!     zero padding to a multiple of 8
//! ```
//!
//! Encoding is split in two so that the insert path can build the bytes before it knows the
//! record's LSN: [`encode_body`] writes everything with lsn = 0 and crc = 0, and [`seal`]
//! stamps the LSN and the CRC once space has been reserved (PostgreSQL's `XLogInsertRecord`
//! likewise finishes the header CRC only after `ReserveXLogInsertLocation` fills in `xl_prev`).

use crate::{BlockRef, DecodedRecord, Record, RmgrId, WalCompression};
use walnut_common::{BlockNumber, Error, Lsn, RelFileId, Result, Xid, BLCKSZ};

/// Size of the fixed record header, bytes.
pub const RECORD_HEADER_LEN: usize = 32;
/// Size of a block reference header, bytes.
pub const BLOCK_HEADER_LEN: usize = 12;
/// Largest `total_len` the reader accepts (1 GiB); anything longer is treated as garbage.
pub const MAX_RECORD_LEN: usize = 1 << 30;
/// Every record starts at a multiple of this, bytes.
pub const RECORD_ALIGN: u64 = 8;

const BLOCK_WILL_INIT: u8 = 0x01;
const BLOCK_HAS_IMAGE: u8 = 0x02;
const BLOCK_IMAGE_LZ4: u8 = 0x04;
/// An image is stored compressed only if that saves at least this many bytes (the `u16`
/// length it adds, and a margin not worth a decompression).
const MIN_COMPRESSION_SAVING: usize = 64;

const _: () = assert!(RECORD_HEADER_LEN % 8 == 0);
const _: () = assert!(BLCKSZ <= u32::MAX as usize);

/// Rounds `n` up to the record alignment.
#[inline]
pub const fn align8(n: u64) -> u64 {
    (n + (RECORD_ALIGN - 1)) & !(RECORD_ALIGN - 1)
}

/// Exact length of `rec` without padding (`total_len`), bytes, with its images stored whole:
/// the encoding's length with `wal_compression = off`, and an upper bound of it otherwise.
///
/// # Panics
/// If the record breaks the format's limits (more than 255 blocks, per-block data over
/// 65535 bytes, an image that is not exactly `BLCKSZ` or, kept compressed, over 65535 bytes,
/// or a total over 1 GiB): these are bugs
/// in the caller, not conditions to handle.
pub fn record_len(rec: &Record) -> usize {
    assert!(
        rec.blocks.len() <= u8::MAX as usize,
        "a WAL record holds at most 255 block references"
    );
    let mut len = RECORD_HEADER_LEN + rec.main_data.len();
    for b in &rec.blocks {
        assert!(
            b.data.len() <= u16::MAX as usize,
            "per-block WAL data is limited to 65535 bytes"
        );
        len += BLOCK_HEADER_LEN + b.data.len();
        match &b.image {
            // Kept compressed by a reader (`BlockRef::image_lz4`): its length and its bytes.
            Some(img) if b.image_lz4 => {
                assert!(
                    img.len() <= u16::MAX as usize,
                    "a compressed image fits a u16 length"
                );
                len += 2 + img.len();
            }
            Some(img) => {
                assert_eq!(
                    img.len(),
                    BLCKSZ,
                    "a full-page image is exactly BLCKSZ bytes"
                );
                len += BLCKSZ;
            }
            None => {}
        }
    }
    assert!(
        len <= MAX_RECORD_LEN,
        "WAL record of {len} bytes exceeds the 1 GiB limit"
    );
    len
}

/// Writes `rec` into `out` (cleared first) with lsn = 0 and crc = 0, padded to 8 bytes, with
/// each full-page image compressed as `compression` says when that saves at least
/// [`MIN_COMPRESSION_SAVING`] bytes (PostgreSQL's `XLogCompressBackupBlock`). [`seal`] must be
/// called before the bytes are used.
///
/// # Panics
/// As [`record_len`].
pub fn encode_body(rec: &Record, out: &mut Vec<u8>, compression: WalCompression) {
    let bound = record_len(rec);
    out.clear();
    out.reserve(align8(bound as u64) as usize);
    out.extend_from_slice(&0u32.to_le_bytes()); // total_len, set below
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&rec.xid.0.to_le_bytes());
    out.push(rec.rmgr.0);
    out.push(rec.info);
    out.push(rec.blocks.len() as u8);
    out.push(rec.flags);
    out.extend_from_slice(&(rec.main_data.len() as u32).to_le_bytes());
    for b in &rec.blocks {
        out.extend_from_slice(&b.rel.0.to_le_bytes());
        out.extend_from_slice(&b.block.0.to_le_bytes());
        let mut flags = 0u8;
        if b.will_init {
            flags |= BLOCK_WILL_INIT;
        }
        if b.image.is_some() {
            flags |= BLOCK_HAS_IMAGE;
        }
        let flags_at = out.len();
        out.push(flags);
        out.push(0);
        out.extend_from_slice(&(b.data.len() as u16).to_le_bytes());
        if let (Some(img), true) = (&b.image, b.image_lz4) {
            // Already compressed (a decoded record's, inserted again).
            out.extend_from_slice(&(img.len() as u16).to_le_bytes());
            out.extend_from_slice(img);
            out[flags_at] |= BLOCK_IMAGE_LZ4;
        } else if let Some(img) = &b.image {
            if compression == WalCompression::Off || !put_lz4_image(img, out) {
                out.extend_from_slice(img);
            } else {
                out[flags_at] |= BLOCK_IMAGE_LZ4;
            }
        }
        out.extend_from_slice(&b.data);
    }
    out.extend_from_slice(&rec.main_data);
    let total_len = out.len();
    assert!(total_len <= bound, "an encoding never exceeds record_len");
    out[0..4].copy_from_slice(&(total_len as u32).to_le_bytes());
    out.resize(align8(total_len as u64) as usize, 0);
}

/// Appends `u16 image_len` and the LZ4 block of `img` to `out`, if that is at least
/// [`MIN_COMPRESSION_SAVING`] bytes shorter than `img`; otherwise leaves `out` as it was and
/// returns false.
fn put_lz4_image(img: &[u8], out: &mut Vec<u8>) -> bool {
    let at = out.len();
    let room = lz4_flex::block::get_maximum_output_size(img.len());
    out.resize(at + 2 + room, 0);
    let n = match lz4_flex::block::compress_into(img, &mut out[at + 2..]) {
        Ok(n) if n + 2 + MIN_COMPRESSION_SAVING <= img.len() => n,
        _ => {
            out.truncate(at);
            return false;
        }
    };
    out[at..at + 2].copy_from_slice(&(n as u16).to_le_bytes());
    out.truncate(at + 2 + n);
    true
}

/// Stamps the record's start `lsn` into bytes produced by [`encode_body`] and computes the CRC.
pub fn seal(buf: &mut [u8], lsn: u64) {
    let total_len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    buf[8..16].copy_from_slice(&lsn.to_le_bytes());
    let crc = record_crc(&buf[..total_len]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// crc32c over bytes [8..total_len) followed by [0..4) (the CRC field itself excluded).
fn record_crc(rec: &[u8]) -> u32 {
    let crc = walnut_common::crc32c(&rec[8..]);
    walnut_common::crc32c_append(crc, &rec[0..4])
}

/// Encodes a record at `lsn` into its on-disk bytes (header, blocks, main data, padding to 8),
/// with its images stored whole.
pub fn encode_record(lsn: Lsn, rec: &Record) -> Vec<u8> {
    encode_record_with(lsn, rec, WalCompression::Off)
}

/// [`encode_record`] with images compressed as `compression` says.
pub fn encode_record_with(lsn: Lsn, rec: &Record, compression: WalCompression) -> Vec<u8> {
    let mut out = Vec::new();
    encode_body(rec, &mut out, compression);
    seal(&mut out, lsn.0);
    out
}

/// Reads little-endian fields from a byte slice without ever panicking.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(Error::corruption(format!(
                "WAL record field of {n} bytes at offset {} overruns record length {}",
                self.pos,
                self.bytes.len()
            ))),
        }
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Validates the fixed header fields that can be checked before the body is read: returns
/// `total_len` if it is sane and the header's LSN is `lsn`. Used by the reader to decide how
/// many bytes to fetch.
pub fn check_header(lsn: u64, hdr: &[u8]) -> Result<usize> {
    let mut c = Cursor { bytes: hdr, pos: 0 };
    let total_len = c.u32()? as usize;
    let _crc = c.u32()?;
    let rec_lsn = c.u64()?;
    if total_len == 0 {
        return Err(Error::corruption(format!(
            "zero-length WAL record at {}",
            Lsn(lsn)
        )));
    }
    if !(RECORD_HEADER_LEN..=MAX_RECORD_LEN).contains(&total_len) {
        return Err(Error::corruption(format!(
            "invalid WAL record length {total_len} at {}",
            Lsn(lsn)
        )));
    }
    if rec_lsn != lsn {
        return Err(Error::corruption(format!(
            "WAL record at {} carries LSN {} (stale or misplaced)",
            Lsn(lsn),
            Lsn(rec_lsn)
        )));
    }
    Ok(total_len)
}

/// Decodes one record from `bytes` expected at `lsn`. `bytes` may be longer than the record.
///
/// # Errors
/// A corruption error for a bad CRC, a wrong LSN in the header, or malformed lengths.
pub fn decode_record(lsn: Lsn, bytes: &[u8]) -> Result<DecodedRecord> {
    decode_record_with(lsn, bytes, false)
}

/// [`decode_record`]; with `keep_lz4`, LZ4-compressed full-page images stay compressed
/// (`BlockRef::image_lz4`), for redo to decompress into the page (`BlockRef::restore_image`),
/// and an image that does not decompress is found only then.
///
/// # Errors
/// As [`decode_record`].
pub fn decode_record_with(lsn: Lsn, bytes: &[u8], keep_lz4: bool) -> Result<DecodedRecord> {
    let total_len = check_header(lsn.0, bytes)?;
    let Some(body) = bytes.get(..total_len) else {
        return Err(Error::corruption(format!(
            "WAL record at {lsn} is truncated: {} of {total_len} bytes",
            bytes.len()
        )));
    };
    let stored_crc = u32::from_le_bytes(body[4..8].try_into().expect("4 bytes"));
    let crc = record_crc(body);
    if crc != stored_crc {
        return Err(Error::corruption(format!(
            "incorrect WAL record checksum at {lsn}: expected {stored_crc:08X}, computed {crc:08X}"
        )));
    }
    let mut c = Cursor {
        bytes: body,
        pos: 16,
    };
    let xid = Xid(c.u64()?);
    let rmgr = RmgrId(c.u8()?);
    let info = c.u8()?;
    let nblocks = c.u8()?;
    let flags = c.u8()?;
    let main_len = c.u32()? as usize;
    let mut blocks = Vec::with_capacity(nblocks as usize);
    for _ in 0..nblocks {
        let rel = RelFileId(c.u32()?);
        let block = BlockNumber(c.u32()?);
        let bflags = c.u8()?;
        let reserved = c.u8()?;
        let known = BLOCK_WILL_INIT | BLOCK_HAS_IMAGE | BLOCK_IMAGE_LZ4;
        let lz4 = bflags & BLOCK_IMAGE_LZ4 != 0;
        if bflags & !known != 0 || reserved != 0 || (lz4 && bflags & BLOCK_HAS_IMAGE == 0) {
            return Err(Error::corruption(format!(
                "invalid block reference flags in WAL record at {lsn}"
            )));
        }
        let data_len = c.u16()? as usize;
        let image = if lz4 && keep_lz4 {
            let len = c.u16()? as usize;
            Some(c.take(len)?.to_vec())
        } else if lz4 {
            let len = c.u16()? as usize;
            let mut page = vec![0u8; BLCKSZ];
            match lz4_flex::block::decompress_into(c.take(len)?, &mut page) {
                Ok(BLCKSZ) => Some(page),
                // PostgreSQL's RestoreBlockImage: "invalid compressed image at %X/%X, block %d".
                _ => {
                    return Err(Error::corruption(format!(
                        "invalid compressed image at {lsn}, block {}",
                        blocks.len()
                    )))
                }
            }
        } else if bflags & BLOCK_HAS_IMAGE != 0 {
            Some(c.take(BLCKSZ)?.to_vec())
        } else {
            None
        };
        let data = c.take(data_len)?.to_vec();
        blocks.push(BlockRef {
            rel,
            block,
            will_init: bflags & BLOCK_WILL_INIT != 0,
            image,
            image_lz4: lz4 && keep_lz4,
            data,
        });
    }
    let main_data = c.take(main_len)?.to_vec();
    if c.pos != total_len {
        return Err(Error::corruption(format!(
            "WAL record at {lsn} has {} trailing bytes",
            total_len - c.pos
        )));
    }
    Ok(DecodedRecord {
        lsn,
        end_lsn: Lsn(lsn.0 + align8(total_len as u64)),
        record: Record {
            rmgr,
            info,
            xid,
            flags,
            blocks,
            main_data,
        },
    })
}
