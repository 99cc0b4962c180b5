//! Reads submitted through one io_uring instance (Linux 5.6+, `IORING_OP_READ`), for
//! `io_method = io_uring` (PostgreSQL 18's `method_io_uring.c`): a batch of reads goes to the
//! kernel with one `io_uring_enter`, and the caller waits for all of them.
//!
//! The only unsafe code is the submission: the kernel writes into each request's buffer until
//! its completion is reaped, so [`ReadRing::read_all`] borrows every buffer mutably for the
//! whole call and does not return before every submitted read has completed. If waiting for
//! completions fails in a way that cannot be retried, it aborts the process: returning would
//! free buffers the kernel may still write into.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// One read: fill `buf` from the file `fd` at byte `offset`.
pub struct ReadReq<'a> {
    /// The open file.
    pub fd: BorrowedFd<'a>,
    /// Where the bytes go (aligned to [`crate::DIRECT_IO_ALIGN`] for an O_DIRECT file, as its
    /// length and `offset`).
    pub buf: &'a mut [u8],
    /// File offset, bytes.
    pub offset: u64,
}

/// An io_uring instance used for batches of reads.
pub struct ReadRing {
    ring: io_uring::IoUring,
}

impl std::fmt::Debug for ReadRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadRing").finish_non_exhaustive()
    }
}

impl ReadRing {
    /// Sets up a ring of `entries` submission slots (rounded up to a power of two by the
    /// kernel).
    ///
    /// # Errors
    /// The error of `io_uring_setup(2)`: EPERM where io_uring is disabled
    /// (`kernel.io_uring_disabled`, a seccomp filter), ENOSYS on kernels without it, ENOMEM.
    pub fn new(entries: u32) -> io::Result<ReadRing> {
        Ok(ReadRing {
            ring: io_uring::IoUring::new(entries.max(1))?,
        })
    }

    /// Submits every request and waits for all of them; returns each one's result in order:
    /// the bytes read (fewer than asked only at the end of the file; the rest of the buffer is
    /// left as it was), or the OS error. Requests beyond the ring's size go in later batches.
    pub fn read_all(&mut self, reqs: &mut [ReadReq<'_>]) -> Vec<io::Result<usize>> {
        let mut out: Vec<Option<io::Result<usize>>> = (0..reqs.len()).map(|_| None).collect();
        let cap = self.ring.params().sq_entries().max(1) as usize;
        let (mut base, total) = (0, reqs.len());
        while base < total {
            let batch = &mut reqs[base..(base + cap).min(total)];
            self.submit_batch(batch, base, &mut out);
            base += batch.len();
        }
        out.into_iter()
            .map(|r| r.expect("every submitted read completed"))
            .collect()
    }

    /// Pushes `batch` (indexes `base..`), submits, and reaps until every read completed.
    fn submit_batch(
        &mut self,
        batch: &mut [ReadReq<'_>],
        base: usize,
        out: &mut [Option<io::Result<usize>>],
    ) {
        let mut pushed = 0;
        {
            let mut sq = self.ring.submission();
            for (i, r) in batch.iter_mut().enumerate() {
                let len = u32::try_from(r.buf.len()).unwrap_or(u32::MAX);
                let entry = io_uring::opcode::Read::new(
                    io_uring::types::Fd(r.fd.as_raw_fd()),
                    r.buf.as_mut_ptr(),
                    len,
                )
                .offset(r.offset)
                .build()
                .user_data((base + i) as u64);
                // SAFETY: the buffer is borrowed mutably from the caller for the whole of
                // `read_all`, which reaps this entry's completion before it returns (or aborts
                // the process), so the kernel never writes into freed or aliased memory; the
                // descriptor is borrowed for as long and stays open.
                if unsafe { sq.push(&entry) }.is_err() {
                    break; // the batch is at most the ring's size: cannot happen
                }
                pushed += 1;
            }
        }
        for r in &mut out[base + pushed..base + batch.len()] {
            *r = Some(Err(io::Error::other("io_uring submission queue full")));
        }
        let mut reaped = 0;
        while reaped < pushed {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) => {
                    eprintln!("FATAL: io_uring_enter failed with reads in flight: {e}");
                    std::process::abort();
                }
            }
            for cqe in self.ring.completion() {
                let i = cqe.user_data() as usize;
                let res = cqe.result();
                out[i] = Some(if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(res as usize)
                });
                reaped += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OpenMode, RealVfs, Vfs};
    use std::os::fd::AsFd;

    #[test]
    fn a_batch_of_reads_returns_each_files_bytes() {
        let mut ring = match ReadRing::new(4) {
            Ok(r) => r,
            Err(e) => {
                // A kernel that refuses io_uring: nothing to test here (the server refuses
                // io_method = io_uring at start on such a kernel).
                eprintln!("io_uring_setup refused: {e}");
                return;
            }
        };
        let dir = std::env::temp_dir().join(format!("walnut-uring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = RealVfs
            .open(
                &dir.join("f"),
                OpenMode {
                    create: true,
                    ..Default::default()
                },
            )
            .unwrap();
        let data: Vec<u8> = (0..10 * 4096).map(|i| (i / 4096) as u8).collect();
        f.write_at(&data, 0).unwrap();
        let file = std::fs::File::open(dir.join("f")).unwrap();
        // Six reads through a ring of four: two batches; one runs past the end of the file.
        let mut bufs: Vec<Vec<u8>> = (0..6).map(|_| vec![0xEE; 4096]).collect();
        let offsets = [
            0u64,
            4096 * 9,
            4096 * 3,
            4096 * 10,
            4096 * 5,
            4096 * 9 + 2048,
        ];
        let mut reqs: Vec<ReadReq<'_>> = bufs
            .iter_mut()
            .zip(offsets)
            .map(|(b, offset)| ReadReq {
                fd: file.as_fd(),
                buf: b,
                offset,
            })
            .collect();
        let res = ring.read_all(&mut reqs);
        drop(reqs);
        let n: Vec<usize> = res.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(n, vec![4096, 4096, 4096, 0, 4096, 2048]);
        for (b, off) in bufs.iter().zip(offsets).take(5) {
            if off < 10 * 4096 {
                assert!(b.iter().all(|&x| x == (off / 4096) as u8), "offset {off}");
            }
        }
        assert!(
            bufs[3].iter().all(|&x| x == 0xEE),
            "nothing read past the end"
        );
        assert!(bufs[5][..2048].iter().all(|&x| x == 9));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
