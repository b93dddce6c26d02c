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
    let cut = len.saturating_sub((head.len() + tail.len()) as u64);
    let marker = format!(
        "\n[batchpool: {cut} bytes cut here; the first and last {} bytes of this file are kept]\n",
        head.len()
    );
    [head, marker.as_bytes(), tail].concat()
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
