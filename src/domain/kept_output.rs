//! A task's kept `stdout.txt` and `stderr.txt` (docs/data.md, "Output that outlives its
//! node"): bounded to the first and last parts of each, with a line saying how much was cut
//! between them, and gzip-compressed when that saves anything.

use std::io::Write;

/// Below this, gzip saves too little to be worth it.
const COMPRESS_FROM: usize = 512;

/// One kept file: bounded, perhaps compressed.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptFile {
    pub name: &'static str,
    /// Its length on the node.
    pub len: u64,
    /// Whether its middle was cut (then `data` holds its first and last parts, and a line
    /// saying how much is missing between them).
    pub cut: bool,
    pub gzip: bool,
    pub data: Vec<u8>,
}

/// `bytes` (a file of `len`) within the bound, and whether it was cut.
pub fn bounded(bytes: Vec<u8>, len: u64, each_end: u64) -> (Vec<u8>, bool) {
    if (bytes.len() as u64) <= 2 * each_end {
        return (bytes, false);
    }
    let end = each_end as usize;
    let tail = &bytes[bytes.len() - end..];
    (joined(&bytes[..end], len, tail), true)
}

/// A file's first part, the line that says what is cut, and its last part.
pub fn joined(head: &[u8], len: u64, tail: &[u8]) -> Vec<u8> {
    [head, marker(len, head.len()).as_bytes(), tail].concat()
}

/// The line between a kept file's first and last `each_end` bytes.
fn marker(len: u64, each_end: usize) -> String {
    let cut = len.saturating_sub(2 * each_end as u64);
    format!("\n[batchpool: {cut} bytes cut here; the first and last {each_end} bytes of this file are kept]\n")
}

/// What of a kept file (as [`plain`] gives it; `len` bytes on the node, `cut` or not) comes
/// after the file's first `offset` bytes: from the middle that was cut, the line that says so
/// and the last part.
pub fn after(kept: &[u8], len: u64, cut: bool, offset: u64) -> &[u8] {
    if offset >= len {
        return &[];
    }
    if !cut {
        return kept.get(offset as usize..).unwrap_or_default();
    }
    // The first part is as long as the last, and the line between them says how long.
    let each_end = (0..=kept.len()).filter_map(|line| {
        let end = kept.len().checked_sub(line)? / 2;
        let marker = marker(len, end);
        (marker.len() == line && kept[end..].starts_with(marker.as_bytes())).then_some(end)
    });
    let Some(end) = each_end.take(512).next() else {
        return kept;
    };
    if offset < end as u64 {
        return &kept[offset as usize..];
    }
    let tail_from = len.saturating_sub(end as u64);
    if offset >= tail_from {
        return &kept[kept.len() - (len - offset) as usize..];
    }
    &kept[end..]
}

pub fn compressed(name: &'static str, len: u64, data: Vec<u8>, cut: bool) -> KeptFile {
    if data.len() >= COMPRESS_FROM {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if let Ok(small) = gz.write_all(&data).and_then(|()| gz.finish()) {
            if small.len() < data.len() {
                return KeptFile {
                    name,
                    len,
                    cut,
                    gzip: true,
                    data: small,
                };
            }
        }
    }
    KeptFile {
        name,
        len,
        cut,
        gzip: false,
        data,
    }
}

/// The bytes of a kept file as the task left them (its cut marked).
pub fn plain(gzip: bool, data: &[u8]) -> std::io::Result<Vec<u8>> {
    if !gzip {
        return Ok(data.to_vec());
    }
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(data), &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_comes_after_an_offset_of_a_cut_file_is_its_last_part() {
        let file: Vec<u8> = (0..100u8).collect();
        let (kept, cut) = bounded(file.clone(), 100, 10);
        assert!(cut);
        assert_eq!(after(&kept, 100, cut, 0), &kept[..]);
        assert_eq!(after(&kept, 100, cut, 4), &kept[4..]);
        assert_eq!(after(&kept, 100, cut, 95), &file[95..], "in the last part");
        assert_eq!(after(&kept, 100, cut, 90), &file[90..]);
        let middle = after(&kept, 100, cut, 50);
        assert!(
            middle.starts_with(b"\n[batchpool: 80 bytes cut"),
            "{middle:?}"
        );
        assert!(middle.ends_with(&file[90..]));
        assert_eq!(after(&kept, 100, cut, 100), b"");
        let (whole, cut) = bounded(file.clone(), 100, 50);
        assert_eq!(after(&whole, 100, cut, 60), &file[60..]);
    }
    use crate::domain::agent::Captured;

    #[test]
    fn a_long_file_keeps_its_ends_and_says_what_was_cut() {
        let file: Vec<u8> = (0..100u8).collect();
        let (kept, cut) = bounded(file.clone(), 100, 10);
        assert!(cut);
        let text = String::from_utf8_lossy(&kept[10..kept.len() - 10]).into_owned();
        assert_eq!(
            text,
            "\n[batchpool: 80 bytes cut here; the first and last 10 bytes of this file are kept]\n"
        );
        assert_eq!(
            (&kept[..10], &kept[kept.len() - 10..]),
            (&file[..10], &file[90..])
        );
        assert_eq!(bounded(file.clone(), 100, 50), (file, false));
    }

    #[test]
    fn kept_files_read_back_as_they_were() {
        let text = "line\n".repeat(1000).into_bytes();
        let k = compressed("stdout.txt", 5000, text.clone(), false);
        assert!(k.gzip && k.data.len() < 200, "{}", k.data.len());
        assert_eq!(plain(k.gzip, &k.data).unwrap(), text);
        let small = compressed("stderr.txt", 3, b"ab\n".to_vec(), false);
        assert!(!small.gzip);
        assert_eq!(Captured::of(b"ab\n").bytes().unwrap(), b"ab\n");
    }
}
