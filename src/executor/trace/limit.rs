//! The output cap (`output_limit`): the one place that decides how much of a job's log is
//! kept. The executor's trace applies it when its sink does not ([`super::Trace`], for
//! `drover exec-job`), and the GitLab log buffer applies it to what is sent to GitLab
//! ([`crate::gitlab::LogBuffer`]), as upstream's `helpers/trace` buffer does.
//!
//! As upstream's: a write that reaches the limit, even exactly, is cut at the last whole
//! UTF-8 character that fits and followed by a bold-yellow notice; nothing is kept after it.
//! The bytes counted include the notice. This module is a leaf: it imports nothing from the
//! crate.

/// The notice written once the log reaches `limit` bytes (bold yellow, as upstream).
pub fn limit_notice(limit: usize) -> String {
    format!(
        "\n\x1b[33;1mJob's log exceeded limit of {limit} bytes.\nJob execution will continue but no more output will be collected.\x1b[0;m\n"
    )
}

/// How many bytes of `data` fit in `room` bytes of log without cutting a UTF-8 character:
/// `room`, less up to 4 bytes while the kept part ends in an incomplete or invalid sequence.
pub fn limit_cut(data: &[u8], room: usize) -> usize {
    let mut cut = room.min(data.len());
    for _ in 0..4 {
        if cut == 0 || !ends_badly(&data[..cut]) {
            break;
        }
        cut -= 1;
    }
    cut
}

/// Whether the last character of `p` (not empty) is not a whole, valid UTF-8 character.
fn ends_badly(p: &[u8]) -> bool {
    let last = p.len() - 1;
    if p[last] < 0x80 {
        return false;
    }
    let mut start = last;
    while start > 0 && last - start < 3 && (p[start] & 0xc0) == 0x80 {
        start -= 1;
    }
    match std::str::from_utf8(&p[start..]) {
        Ok(s) => s.chars().count() != 1,
        Err(_) => true,
    }
}

/// A log's output cap: passes writes through until `limit` bytes, then the cut and the
/// notice, then nothing.
#[derive(Debug, Clone)]
pub struct OutputCap {
    limit: usize,
    written: usize,
    reached: bool,
}

impl OutputCap {
    /// A cap of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        OutputCap {
            limit,
            written: 0,
            reached: false,
        }
    }

    /// Hands `out` what of `data` the log keeps: all of it while below the limit; at the
    /// limit, the part that fits (whole characters) and the notice; after it, nothing.
    pub fn pass(&mut self, data: &[u8], out: &mut dyn FnMut(&[u8])) {
        if self.reached || data.is_empty() {
            return;
        }
        let room = self.limit.saturating_sub(self.written);
        if data.len() < room {
            self.written += data.len();
            return out(data);
        }
        let cut = limit_cut(data, room);
        if cut > 0 {
            out(&data[..cut]);
        }
        let notice = limit_notice(self.limit);
        out(notice.as_bytes());
        self.written += cut + notice.len();
        self.reached = true;
    }

    /// Bytes kept so far, the notice included.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Whether the limit was reached (the notice is written).
    pub fn reached(&self) -> bool {
        self.reached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(cap: &mut OutputCap, writes: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for w in writes {
            cap.pass(w, &mut |p| out.extend_from_slice(p));
        }
        out
    }

    #[test]
    fn below_the_limit_everything_passes() {
        let mut cap = OutputCap::new(10);
        assert_eq!(kept(&mut cap, &[b"0123", b"4567"]), b"01234567");
        assert!(!cap.reached());
        assert_eq!(cap.written(), 8);
    }

    #[test]
    fn reaching_the_limit_exactly_writes_the_notice_once() {
        let mut cap = OutputCap::new(10);
        let out = kept(&mut cap, &[b"01234", b"56789"]);
        assert_eq!(out, format!("0123456789{}", limit_notice(10)).as_bytes());
        assert!(cap.reached());
        assert_eq!(cap.written(), out.len());
        assert!(kept(&mut cap, &[b"more"]).is_empty());
        assert_eq!(cap.written(), out.len());
    }

    #[test]
    fn the_cut_never_splits_a_character() {
        assert_eq!(limit_cut("ǲǲǲ".as_bytes(), 5), 4);
        assert_eq!(limit_cut("─".as_bytes(), 2), 0);
        assert_eq!(limit_cut("🐤🐤".as_bytes(), 7), 4);
        assert_eq!(limit_cut(b"abc", 2), 2);
    }
}
