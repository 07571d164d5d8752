//! The process's recent warning and error log lines, kept in memory for the support bundle:
//! when a pool never fills, the reason was usually logged, and whoever helps needs those
//! lines without access to the pod's log. A ring, so memory stays bounded however much
//! is logged; lines are cut at a length, so one huge record cannot take the whole ring.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};

/// Lines kept: the newest, older ones dropped as new ones arrive.
pub const MAX_LINES: usize = 1000;
/// Bytes kept of one line.
pub const MAX_LINE_BYTES: usize = 4096;

static RING: OnceLock<Mutex<VecDeque<String>>> = OnceLock::new();

fn ring() -> &'static Mutex<VecDeque<String>> {
    RING.get_or_init(|| Mutex::new(VecDeque::with_capacity(MAX_LINES)))
}

/// The kept lines, oldest first.
pub fn lines() -> Vec<String> {
    ring()
        .lock()
        .map(|ring| ring.iter().cloned().collect())
        .unwrap_or_default()
}

fn push(line: &str) {
    let mut end = line.len().min(MAX_LINE_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    if let Ok(mut ring) = ring().lock() {
        if ring.len() == MAX_LINES {
            ring.pop_front();
        }
        ring.push_back(line[..end].to_owned());
    }
}

/// The log layer's writer: the fmt layer writes each record in one call, which becomes one
/// line of the ring.
pub struct RingWriter;

impl std::io::Write for RingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let line = text.trim_end();
        if !line.is_empty() {
            push(line);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_lines_each_cut_to_its_length() {
        let long = "é".repeat(MAX_LINE_BYTES);
        RingWriter.write_all(long.as_bytes()).unwrap();
        for n in 0..MAX_LINES {
            RingWriter
                .write_all(format!("WARN line {n}\n").as_bytes())
                .unwrap();
        }
        let kept = lines();
        assert_eq!(kept.len(), MAX_LINES);
        assert_eq!(kept.last().map(String::as_str), Some("WARN line 999"));
        assert!(!kept.iter().any(|line| line.starts_with('é')));
        push(&long);
        assert!(lines().last().unwrap().len() <= MAX_LINE_BYTES);
    }
}
