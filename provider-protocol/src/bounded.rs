//! Reading what comes from outside without letting it grow memory without bound: files cut at
//! a size limit, and lines (from provider plugins, docker-machine, stdin) cut at a length limit.
//!
//! Every reader here says what it cut, so the caller can report it: a file over its limit is an
//! error naming the file and the limit ([`FileTooLarge`]); a line over its limit is returned
//! as [`Line::Cut`], with its first `limit` bytes, as soon as the limit is passed. Callers name
//! the plugin or command in their own messages.

use std::io::{self, Read};
use std::path::Path;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest line accepted from a provider plugin or from docker-machine: 1 MiB. A protocol
/// answer is a few hundred bytes; a docker-machine log line rarely a few kilobytes.
pub const MAX_LINE: usize = 1 << 20;

/// The largest config, state or workload file read: 128 MiB (a config of 100,000 runners is
/// about 35 MB).
pub const MAX_DATA_FILE: u64 = 128 << 20;

/// The largest small system file read (zone files, `/etc/timezone`, a saved id): 4 MiB (the
/// largest TZif file is a few kilobytes).
pub const MAX_SMALL_FILE: u64 = 4 << 20;

/// A file larger than the limit its reader sets.
#[derive(Debug, thiserror::Error)]
#[error("{} is larger than {limit} bytes, the most drover reads from such a file; check the path (a device such as /dev/zero never ends)", .path)]
pub struct FileTooLarge {
    /// The file as given.
    pub path: String,
    /// The limit in bytes.
    pub limit: u64,
}

/// Reads at most `limit` bytes of `path`: the whole file, or an error of kind
/// [`io::ErrorKind::FileTooLarge`] wrapping a [`FileTooLarge`] when there is more (a device
/// such as `/dev/zero` never ends, so its size cannot be trusted from metadata).
pub fn read_file(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            FileTooLarge {
                path: path.display().to_string(),
                limit,
            },
        ));
    }
    Ok(bytes)
}

/// [`read_file`] as UTF-8 text (an invalid UTF-8 file is an [`io::ErrorKind::InvalidData`]
/// error).
pub fn read_file_string(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_file(path, limit)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A config, state or workload file as text, at most [`MAX_DATA_FILE`] bytes.
pub fn read_data_file(path: &Path) -> io::Result<String> {
    read_file_string(path, MAX_DATA_FILE)
}

/// One line read by [`read_line`], without its line ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// The whole line.
    Complete(String),
    /// The first `limit` bytes of a longer line (invalid UTF-8 replaced). The rest of the line
    /// is still unread: end the stream, or drop the rest with [`skip_line`].
    Cut(String),
}

impl Line {
    /// The text kept, whole or cut.
    pub fn text(&self) -> &str {
        match self {
            Line::Complete(s) | Line::Cut(s) => s,
        }
    }
}

/// Reads the next line of `reader`, keeping at most `limit` bytes of it: a longer line
/// returns [`Line::Cut`] as soon as the limit is passed, so an endless line costs `limit`
/// bytes of memory and is noticed at once. `None` at the end of the stream. A trailing `\r` is
/// removed, as `AsyncBufReadExt::lines` does.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> io::Result<Option<Line>> {
    let mut kept: Vec<u8> = Vec::new();
    let mut seen_any = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            if !seen_any {
                return Ok(None);
            }
            break;
        }
        seen_any = true;
        let newline = available.iter().position(|&b| b == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        let room = limit.saturating_sub(kept.len());
        // A `\r` before the newline is a line ending, not content.
        let content = match newline {
            Some(_) => chunk.strip_suffix(b"\r").unwrap_or(chunk).len(),
            None => chunk.len(),
        };
        if content > room {
            kept.extend_from_slice(&chunk[..room]);
            reader.consume(room);
            return Ok(Some(Line::Cut(text(kept))));
        }
        kept.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            break;
        }
    }
    if kept.last() == Some(&b'\r') {
        kept.pop();
    }
    Ok(Some(Line::Complete(text(kept))))
}

/// Discards the rest of the current line (through its newline) and returns how many bytes
/// were dropped; never holds more than the reader's buffer.
pub async fn skip_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> io::Result<u64> {
    let mut dropped = 0u64;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(dropped);
        }
        match available.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(dropped + i as u64);
            }
            None => {
                let n = available.len();
                reader.consume(n);
                dropped += n as u64;
            }
        }
    }
}

fn text(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], limit: usize) -> Vec<Line> {
        let mut reader = tokio::io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Ok(Some(l)) = read_line(&mut reader, limit).await {
            if matches!(l, Line::Cut(_)) {
                let dropped = skip_line(&mut reader).await.unwrap_or(0);
                out.push(Line::Cut(format!("{} +{dropped}", l.text())));
            } else {
                out.push(l);
            }
        }
        out
    }

    #[tokio::test]
    async fn cuts_long_lines_and_keeps_the_rest() {
        let got = lines(b"short\r\nabcdefghij\n\nlast", 5).await;
        assert_eq!(
            got,
            vec![
                Line::Complete("short".into()),
                Line::Cut("abcde +5".into()),
                Line::Complete(String::new()),
                Line::Complete("last".into()),
            ]
        );
    }

    #[tokio::test]
    async fn an_endless_line_is_cut_at_the_limit() {
        // 64 MiB of zeros and no newline: memory stays at the limit.
        let zero = tokio::io::AsyncReadExt::take(tokio::io::repeat(0), 64 << 20);
        let mut reader = tokio::io::BufReader::new(zero);
        let got = read_line(&mut reader, 1024).await.ok().flatten();
        match got {
            Some(Line::Cut(kept)) => {
                assert_eq!(kept.len(), 1024);
                let dropped = skip_line(&mut reader).await.unwrap_or(0);
                assert_eq!(dropped, (64 << 20) - 1024);
            }
            other => panic!("expected a cut line, got {other:?}"),
        }
    }

    #[test]
    fn a_device_that_never_ends_is_refused() {
        let err = read_file(Path::new("/dev/zero"), 1000).err();
        let err = err.map(|e| (e.kind(), e.to_string()));
        assert!(
            matches!(&err, Some((io::ErrorKind::FileTooLarge, m)) if m.contains("/dev/zero is larger than 1000 bytes")),
            "{err:?}"
        );
    }
}
