//! Decoding a model file while it is read, one chunk at a time, so that the file's bytes and
//! the decoded message are never both whole in memory: a model of 600 MB read whole and then
//! decoded peaks at twice its size before a single weight is imported.

use prost::bytes::Buf;
use std::io::Read;

/// Bytes read per chunk.
const CHUNK: usize = 1 << 20;

/// A [`Buf`] over the first `len` bytes of a reader, holding one chunk of them at a time.
///
/// A read error, or a reader that ends before `len` bytes, ends the buffer early (the decoder
/// then fails or sees a prefix) and is kept in [`ChunkedReader::error`], which the caller checks
/// before trusting what was decoded.
pub(crate) struct ChunkedReader<R> {
    reader: R,
    /// The current chunk; `chunk[pos..]` is not consumed yet.
    chunk: Vec<u8>,
    pos: usize,
    /// Bytes not consumed yet, those of the current chunk included.
    remaining: usize,
    /// Why the buffer ended before `len` bytes.
    error: Option<std::io::Error>,
}

impl<R: Read> ChunkedReader<R> {
    /// A buffer over the first `len` bytes of `reader`.
    pub(crate) fn new(reader: R, len: usize) -> Self {
        let mut r = ChunkedReader {
            reader,
            chunk: Vec::new(),
            pos: 0,
            remaining: len,
            error: None,
        };
        r.refill();
        r
    }

    /// The error that ended the buffer early, if any.
    pub(crate) fn take_error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }

    /// Whether the reader holds more than the `len` bytes (the file grew while it was read).
    pub(crate) fn has_more(&mut self) -> std::io::Result<bool> {
        let mut probe = [0u8; 1];
        loop {
            match self.reader.read(&mut probe) {
                Ok(n) => return Ok(n > 0),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Replace the consumed chunk by the next one.
    fn refill(&mut self) {
        self.pos = 0;
        self.chunk.clear();
        let want = self.remaining.min(CHUNK);
        if want == 0 {
            return;
        }
        if self.chunk.try_reserve_exact(want).is_err() {
            self.fail(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate {want} bytes to read the file"),
            ));
            return;
        }
        match (&mut self.reader)
            .take(want as u64)
            .read_to_end(&mut self.chunk)
        {
            Ok(n) if n == want => {}
            Ok(n) => {
                // What was read is still served; the decoder will see the end early.
                self.remaining = n;
                self.error = Some(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file is shorter than its size said: it changed while it was read",
                ));
            }
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        self.chunk.clear();
        self.remaining = 0;
        self.error = Some(e);
    }
}

impl<R: Read> Buf for ChunkedReader<R> {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.chunk.get(self.pos..).unwrap_or(&[])
    }

    fn advance(&mut self, cnt: usize) {
        let mut cnt = cnt.min(self.remaining);
        while cnt > 0 {
            let here = self.chunk.len().saturating_sub(self.pos);
            let step = cnt.min(here);
            self.pos += step;
            self.remaining -= step;
            cnt -= step;
            if self.pos >= self.chunk.len() {
                if self.remaining == 0 {
                    break;
                }
                self.refill();
                if self.chunk.is_empty() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `step` bytes per read, then fails after `fail_at`.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
        fail_at: Option<usize>,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.fail_at.is_some_and(|f| self.at >= f) {
                return Err(std::io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.step).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn serves_every_byte_across_chunks_with_skips() {
        let d = data(3 * CHUNK + 17);
        let reader = Trickle {
            data: d.clone(),
            at: 0,
            step: 1000,
            fail_at: None,
        };
        let mut b = ChunkedReader::new(reader, d.len());
        let mut got = Vec::new();
        // Read 5, skip 2*CHUNK-3 (across two chunk ends), then copy the rest.
        got.extend_from_slice(&b.copy_to_bytes(5));
        b.advance(2 * CHUNK - 3);
        let rest = b.remaining();
        got.extend_from_slice(&b.copy_to_bytes(rest));
        let mut want = d[..5].to_vec();
        want.extend_from_slice(&d[5 + 2 * CHUNK - 3..]);
        assert_eq!(got, want);
        assert_eq!(b.remaining(), 0);
        assert!(b.take_error().is_none());
        assert!(!b.has_more().unwrap());
    }

    #[test]
    fn a_short_or_failing_reader_ends_early_with_an_error() {
        let d = data(CHUNK + 10);
        let short = Trickle {
            data: d[..CHUNK + 4].to_vec(),
            at: 0,
            step: usize::MAX,
            fail_at: None,
        };
        let mut b = ChunkedReader::new(short, d.len());
        let n = b.remaining();
        b.advance(n);
        assert_eq!(b.remaining(), 0);
        let e = b.take_error().expect("short read reported");
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);

        let failing = Trickle {
            data: d.clone(),
            at: 0,
            step: usize::MAX,
            fail_at: Some(CHUNK),
        };
        let mut b = ChunkedReader::new(failing, d.len());
        b.advance(CHUNK);
        assert_eq!(b.remaining(), 0);
        assert!(b.chunk().is_empty());
        assert!(b.take_error().is_some());
    }

    #[test]
    fn a_longer_reader_is_noticed() {
        let d = data(100);
        let reader = Trickle {
            data: d,
            at: 0,
            step: usize::MAX,
            fail_at: None,
        };
        let mut b = ChunkedReader::new(reader, 60);
        b.advance(60);
        assert!(b.has_more().unwrap());
    }
}
