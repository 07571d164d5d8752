//! The log's writer: requests hand their lines over and go on; one thread writes what
//! has gathered for a moment ([`GATHER`]) in one `write`.
//!
//! A queue that wakes its writer for every line (as `tracing-appender`'s does) costs
//! the process two context switches per line when lines come one at a time: at one
//! gateway call in flight they were half of the process's switches, and the writer
//! thread a tenth of its CPU. Here the writer is woken once for the first line after a
//! quiet spell, sleeps [`GATHER`] while more come, and writes them together.
//!
//! Nothing is dropped: past [`MAX_PENDING`] bytes waiting, loggers wait for the writer.
//! Dropping the [`Guard`] writes what is left and stops the thread.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the writer waits, once woken, for more lines to write with the first.
pub const GATHER: Duration = Duration::from_millis(5);

/// Bytes waiting at most; loggers past it wait until they are written.
const MAX_PENDING: usize = 8 << 20;

/// The writer's buffer is let go past this once written.
const KEPT_CAPACITY: usize = 1 << 20;

#[derive(Default)]
struct State {
    pending: Vec<u8>,
    stopping: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// The first line of a batch, or the stop: the writer's wake-up.
    arrived: Condvar,
    /// A batch taken: room for loggers that waited.
    taken: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; were it, the bytes are still whole lines.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A handle loggers write to (cheap to clone: one per line).
#[derive(Clone)]
pub struct Gathered(Arc<Shared>);

/// Writes what is left and stops the writer thread when dropped.
pub struct Guard {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

/// A writer of `out` on a thread named `name`, and the guard that ends it.
pub fn gathered(
    name: &str,
    out: impl Write + Send + 'static,
) -> std::io::Result<(Gathered, Guard)> {
    let shared = Arc::new(Shared::default());
    let writer = std::thread::Builder::new().name(name.to_owned()).spawn({
        let shared = shared.clone();
        move || write_batches(&shared, out)
    })?;
    Ok((
        Gathered(shared.clone()),
        Guard {
            shared,
            writer: Some(writer),
        },
    ))
}

/// The writer thread: waits for a first line, gathers, writes, until stopped with
/// nothing left.
fn write_batches(shared: &Shared, mut out: impl Write) {
    let mut batch = Vec::new();
    loop {
        let mut state = shared.state();
        while state.pending.is_empty() && !state.stopping {
            state = shared
                .arrived
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if !state.stopping {
            drop(state);
            std::thread::sleep(GATHER);
            state = shared.state();
        }
        std::mem::swap(&mut batch, &mut state.pending);
        let stopping = state.stopping;
        drop(state);
        shared.taken.notify_all();
        if !batch.is_empty() {
            // Nowhere to report a log that cannot be written: stderr is the report.
            drop(out.write_all(&batch).and_then(|()| out.flush()));
            batch.clear();
            // A burst's room is not kept for the quiet after it.
            if batch.capacity() > KEPT_CAPACITY {
                batch = Vec::new();
            }
        }
        if stopping && shared.state().pending.is_empty() {
            return;
        }
    }
}

impl Write for Gathered {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut state = self.0.state();
        while state.pending.len() >= MAX_PENDING && !state.stopping {
            state = self
                .0
                .taken
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let first = state.pending.is_empty();
        state.pending.extend_from_slice(buf);
        drop(state);
        if first {
            self.0.arrived.notify_one();
        }
        Ok(buf.len())
    }

    /// Lines are written within [`GATHER`]; a logger does not wait for them.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.state().stopping = true;
        self.shared.arrived.notify_one();
        if let Some(writer) = self.writer.take() {
            // A writer that panicked has nothing more to write.
            drop(writer.join());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A sink that keeps what it is given and counts its writes, each taking `pause`.
    #[derive(Clone, Default)]
    struct Sink {
        bytes: Arc<Mutex<Vec<u8>>>,
        writes: Arc<AtomicUsize>,
        largest: Arc<AtomicUsize>,
        pause: Duration,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(self.pause);
            self.writes.fetch_add(1, Ordering::Relaxed);
            self.largest.fetch_max(buf.len(), Ordering::Relaxed);
            self.bytes.lock().expect("sink").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(sink: &Sink) -> Vec<String> {
        String::from_utf8(sink.bytes.lock().expect("sink").clone())
            .expect("utf-8")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_line_is_written_in_order_and_whole_by_the_time_the_guard_is_dropped() {
        let sink = Sink::default();
        let (writer, guard) = gathered("test-log", sink.clone()).expect("thread");
        let loggers: Vec<_> = (0..4)
            .map(|logger| {
                let mut writer = writer.clone();
                std::thread::spawn(move || {
                    for n in 0..2_000 {
                        writer
                            .write_all(format!("{logger} {n} {}\n", "x".repeat(n % 300)).as_bytes())
                            .expect("written");
                    }
                })
            })
            .collect();
        for logger in loggers {
            logger.join().expect("logger");
        }
        drop(guard);
        let written = lines(&sink);
        assert_eq!(written.len(), 8_000);
        for logger in 0..4 {
            let ns: Vec<usize> = written
                .iter()
                .filter_map(|line| {
                    let mut parts = line.split(' ');
                    (parts.next() == Some(&logger.to_string())).then(|| {
                        let n: usize = parts.next().and_then(|n| n.parse().ok()).expect("n");
                        assert_eq!(parts.next().map(str::len), Some(n % 300), "{line}");
                        n
                    })
                })
                .collect();
            assert_eq!(ns, (0..2_000).collect::<Vec<_>>(), "logger {logger}");
        }
        assert!(
            sink.writes.load(Ordering::Relaxed) < 8_000,
            "lines are written together"
        );
    }

    #[test]
    fn lines_are_written_without_a_stop_and_one_at_a_time_ones_in_few_writes() {
        let sink = Sink::default();
        let (mut writer, _guard) = gathered("test-log", sink.clone()).expect("thread");
        writer.write_all(b"first\n").expect("written");
        // Written by the thread, not by the guard's drop.
        while lines(&sink).is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(lines(&sink), ["first"]);
        // A burst gathers: its lines reach the sink in far fewer writes than lines.
        let before = sink.writes.load(Ordering::Relaxed);
        for n in 0..100 {
            writer
                .write_all(format!("{n}\n").as_bytes())
                .expect("written");
        }
        while lines(&sink).len() < 101 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(sink.writes.load(Ordering::Relaxed) - before < 100);
    }

    #[test]
    fn loggers_wait_for_a_slow_sink_rather_than_lose_lines() {
        let sink = Sink {
            pause: Duration::from_millis(20),
            ..Sink::default()
        };
        let (mut writer, guard) = gathered("test-log", sink.clone()).expect("thread");
        let line: Vec<u8> = vec![b'y'; 1 << 20];
        // Three times the bound: the logger waits for the slow sink's writes.
        let count = 3 * MAX_PENDING / line.len();
        for _ in 0..count {
            writer.write_all(&line).expect("written");
        }
        drop(guard);
        assert_eq!(sink.bytes.lock().expect("sink").len(), count * line.len());
        // The loggers waited: no batch held more than the bound and the line past it.
        assert!(sink.largest.load(Ordering::Relaxed) <= MAX_PENDING + line.len());
    }
}
