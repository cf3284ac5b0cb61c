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

/// Reads the next line, never buffering more than `max` bytes of it.
pub async fn next_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut discarded = 0usize;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
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
        if discarded == 0 && line.len() + chunk.len() <= max {
            line.extend_from_slice(chunk);
        } else {
            discarded = discarded.max(line.len()) + chunk.len();
            line = Vec::new();
        }
        let consumed = found.unwrap_or(available.len());
        reader.consume(consumed);
        if found.is_some() {
            return Ok(if discarded > 0 { Line::TooLong(discarded) } else { Line::Complete(line) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn splits_and_caps_lines() {
        let input = b"abc\n0123456789ABCDEF\nxy\nlast".to_vec();
        // A tiny buffer forces lines to span several fill_buf calls.
        let mut r = BufReader::with_capacity(4, &input[..]);
        assert_eq!(next_line(&mut r, 8).await.unwrap(), Line::Complete(b"abc".to_vec()));
        assert_eq!(next_line(&mut r, 8).await.unwrap(), Line::TooLong(16));
        assert_eq!(next_line(&mut r, 8).await.unwrap(), Line::Complete(b"xy".to_vec()));
        assert_eq!(next_line(&mut r, 8).await.unwrap(), Line::Complete(b"last".to_vec()));
        assert_eq!(next_line(&mut r, 8).await.unwrap(), Line::Eof);
    }

    #[tokio::test]
    async fn exact_limit_is_accepted() {
        let input = b"12345678\n123456789\n".to_vec();
        let mut r = BufReader::with_capacity(3, &input[..]);
        assert_eq!(next_line(&mut r, 8).await.unwrap(), Line::Complete(b"12345678".to_vec()));
        assert_eq!(next_line(&mut r, 8).await.unwrap(), Line::TooLong(9));
    }
}
