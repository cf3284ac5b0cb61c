//! Reading newline-delimited requests with a hard length cap.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What the next line of input was.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line, without its newline (a final line without newline counts too).
    Complete(Vec<u8>),
    /// A line longer than the cap; it was consumed and discarded. Holds its length.
    TooLong(usize),
    /// End of input.
    Eof,
}

/// Splits a byte stream into lines, never buffering more than `max` bytes of one.
///
/// The part of a line read so far lives here, not in the future of
/// [`LineReader::next_line`], so a caller may race that future against others in
/// `select!` and drop it: the bytes it had consumed are kept for the next call.
#[derive(Debug)]
pub struct LineReader {
    max: usize,
    line: Vec<u8>,
    discarded: usize,
}

impl LineReader {
    /// A reader for lines of at most `max` bytes (without the newline).
    pub fn new(max: usize) -> Self {
        LineReader { max, line: Vec::new(), discarded: 0 }
    }

    /// Reads the next line.
    ///
    /// # Cancel safety
    /// Safe, given a cancel-safe `fill_buf` (tokio's `BufReader` is): the only await is
    /// `fill_buf`, and what is consumed after it is moved into `self` before the next one.
    pub async fn next_line<R: AsyncBufRead + Unpin>(&mut self, reader: &mut R) -> std::io::Result<Line> {
        loop {
            let available = reader.fill_buf().await?;
            if available.is_empty() {
                let line = std::mem::take(&mut self.line);
                let discarded = std::mem::take(&mut self.discarded);
                return Ok(match (discarded, line.is_empty()) {
                    (0, true) => Line::Eof,
                    (0, false) => Line::Complete(line),
                    (n, _) => Line::TooLong(n),
                });
            }
            let (chunk, found) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (&available[..i], Some(i + 1)),
                None => (available, None),
            };
            if self.discarded == 0 && self.line.len() + chunk.len() <= self.max {
                self.line.extend_from_slice(chunk);
            } else {
                self.discarded = self.discarded.max(self.line.len()) + chunk.len();
                self.line = Vec::new();
            }
            let consumed = found.unwrap_or(available.len());
            reader.consume(consumed);
            if found.is_some() {
                let line = std::mem::take(&mut self.line);
                let discarded = std::mem::take(&mut self.discarded);
                return Ok(if discarded > 0 { Line::TooLong(discarded) } else { Line::Complete(line) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncWriteExt, BufReader};

    #[tokio::test]
    async fn splits_and_caps_lines() {
        let input = b"abc\n0123456789ABCDEF\nxy\nlast".to_vec();
        // A tiny buffer forces lines to span several fill_buf calls.
        let mut r = BufReader::with_capacity(4, &input[..]);
        let mut lines = LineReader::new(8);
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::Complete(b"abc".to_vec()));
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::TooLong(16));
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::Complete(b"xy".to_vec()));
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::Complete(b"last".to_vec()));
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::Eof);
    }

    #[tokio::test]
    async fn exact_limit_is_accepted() {
        let input = b"12345678\n123456789\n".to_vec();
        let mut r = BufReader::with_capacity(3, &input[..]);
        let mut lines = LineReader::new(8);
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::Complete(b"12345678".to_vec()));
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::TooLong(9));
    }

    /// The daemon races `next_line` against "a request finished" and drops it when that
    /// wins. A line that arrived in pieces must survive that: before this reader kept its
    /// state, the first half was lost and the second half answered INVALID_JSON.
    #[tokio::test]
    async fn a_dropped_call_keeps_the_half_line_it_read() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut r = BufReader::new(rx);
        let mut lines = LineReader::new(64);
        tx.write_all(b"{\"half\":").await.unwrap();
        // The first half is consumed, then the call waits for more and is dropped.
        let pending = tokio::time::timeout(std::time::Duration::from_millis(20), lines.next_line(&mut r)).await;
        assert!(pending.is_err(), "no newline yet, so no line");
        tx.write_all(b"1}\nnext\n").await.unwrap();
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::Complete(b"{\"half\":1}".to_vec()));
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::Complete(b"next".to_vec()));
    }

    #[tokio::test]
    async fn a_dropped_call_keeps_counting_an_oversized_line() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut r = BufReader::with_capacity(4, rx);
        let mut lines = LineReader::new(4);
        tx.write_all(b"0123456").await.unwrap();
        let pending = tokio::time::timeout(std::time::Duration::from_millis(20), lines.next_line(&mut r)).await;
        assert!(pending.is_err());
        tx.write_all(b"89\nok\n").await.unwrap();
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::TooLong(9));
        assert_eq!(lines.next_line(&mut r).await.unwrap(), Line::Complete(b"ok".to_vec()));
    }
}
