//! Newline-delimited framing with a size cap, shared by the socket server and the stdio transport.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What `read_line` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// `line` holds a whole line (with its newline, unless the stream ended without one).
    Complete,
    /// The line outgrew the limit; what was read of it is dropped, and the stream is useless.
    TooLong,
    /// The stream ended with nothing pending.
    End,
}

/// Appends the bytes up to and including the next newline to `line`. Cancel-safe: bytes
/// already taken stay in `line`, so a caller that clears it after each line loses nothing.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Line> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if line.is_empty() {
                Line::End
            } else {
                Line::Complete
            });
        }
        let (taken, done) = match available.iter().position(|&byte| byte == b'\n') {
            Some(newline) => (newline + 1, true),
            None => (available.len(), false),
        };
        if line.len() + taken > limit + 1 {
            reader.consume(taken);
            line.clear();
            return Ok(Line::TooLong);
        }
        line.extend_from_slice(&available[..taken]);
        reader.consume(taken);
        if done {
            return Ok(Line::Complete);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_lines_and_refuses_long_ones() {
        let mut input: &[u8] = b"one\ntwo-is-long\nthree";
        let mut reader = tokio::io::BufReader::new(&mut input);
        let mut line = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut line, 8).await.ok(),
            Some(Line::Complete)
        );
        assert_eq!(line, b"one\n");
        line.clear();
        assert_eq!(
            read_line(&mut reader, &mut line, 8).await.ok(),
            Some(Line::TooLong)
        );
        line.clear();
        assert_eq!(
            read_line(&mut reader, &mut line, 8).await.ok(),
            Some(Line::Complete)
        );
        assert_eq!(line, b"three");
        line.clear();
        assert_eq!(
            read_line(&mut reader, &mut line, 8).await.ok(),
            Some(Line::End)
        );
    }
}
