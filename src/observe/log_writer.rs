//! The log's writer thread: lines are handed over on a bounded queue and
//! written by a thread of their own, so a slow `write(2)` never holds a
//! review (see `telemetry`).
//!
//! Why not tracing-appender's: its thread blocks on the queue, so every
//! line after a pause wakes it (a futex wake on the review's thread) and
//! is written alone, and its channel spins and yields before it blocks. At
//! one keep-alive connection, one review at a time (an API server with
//! little traffic), that thread took 16 % of the core's time for some
//! 4,200 lines a second (`perf record`, docs/performance.md). This one
//! polls instead while lines keep coming: it sleeps [`POLL`], takes
//! everything queued, writes it in one buffered write, and only after
//! [`QUIET_POLLS`] empty polls in a row blocks until the next line (one
//! wake per quiet spell). A review never waits on it but when the queue
//! is full, and then it waits for room: no line is ever dropped (the
//! decision log is an audit trail).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the thread sleeps between two looks at the queue while lines
/// come: a line reaches the log at most this late.
pub const POLL: Duration = Duration::from_millis(5);

/// Empty looks in a row (a second of quiet) before the thread blocks
/// until the next line instead of polling.
pub const QUIET_POLLS: u32 = 200;

/// The handle every logging thread writes through: a line is one write.
#[derive(Clone)]
pub struct LogWriter {
    lines: SyncSender<Vec<u8>>,
}

/// How long dropping the guard waits for the queue to be written out: a
/// stderr that never drains (a reader that stopped) must not hold the
/// process's exit forever.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Keeps the thread; dropping it writes out what is queued and stops it.
pub struct WriterGuard {
    lines: SyncSender<Vec<u8>>,
    stop: Arc<AtomicBool>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

/// A writer thread named `name` writing into `out`, with room for
/// `capacity` lines.
///
/// # Panics
///
/// If the thread cannot be spawned (the process is out of threads at
/// start): logging is set up first, before any work.
pub fn spawn<W: Write + Send + 'static>(
    name: &str,
    out: W,
    capacity: usize,
) -> (LogWriter, WriterGuard) {
    let (lines, queue) = sync_channel(capacity.max(1));
    let stop = Arc::new(AtomicBool::new(false));
    let (finished, done) = sync_channel(1);
    let thread = std::thread::Builder::new()
        .name(name.to_string())
        .spawn({
            let stop = stop.clone();
            move || {
                write_lines(&queue, out, &stop);
                let _ = finished.send(());
            }
        })
        .expect("the log writer thread starts");
    (
        LogWriter {
            lines: lines.clone(),
        },
        WriterGuard {
            lines,
            stop,
            done,
            thread: Some(thread),
        },
    )
}

/// The thread: take what is queued, write it, flush; sleep while lines
/// come, block once quiet; once stopped, write out the rest.
///
/// The stop is read before the queue is drained, so every line sent
/// before the guard was dropped is seen by that drain; the guard's empty
/// line (no real line is empty) wakes a thread blocked on a quiet queue
/// and, being behind every line sent before it, stops it as well.
fn write_lines(queue: &Receiver<Vec<u8>>, mut out: impl Write, stop: &AtomicBool) {
    let mut quiet = 0u32;
    let mut received: Option<Vec<u8>> = None;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let mut wrote = false;
        let mut ended = false;
        let mut next = received.take().map_or_else(|| queue.try_recv(), Ok);
        loop {
            match next {
                Ok(line) if line.is_empty() => ended = true,
                Ok(line) => {
                    // A write error (a closed stderr) loses the line; there
                    // is nowhere else to say so.
                    let _ = out.write_all(&line);
                    wrote = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    ended = true;
                    break;
                }
            }
            next = queue.try_recv();
        }
        if wrote {
            let _ = out.flush();
            quiet = 0;
        }
        if ended || stopping {
            let _ = out.flush();
            return;
        }
        if quiet >= QUIET_POLLS {
            // Quiet: wait for the next line (or the guard's empty one)
            // without polling; it is written, and flushed, by the drain
            // above.
            match queue.recv() {
                Ok(line) => {
                    received = Some(line);
                    quiet = 0;
                    continue;
                }
                Err(_) => {
                    let _ = out.flush();
                    return;
                }
            }
        }
        quiet += 1;
        std::thread::sleep(POLL);
    }
}

/// An output whose writes wait out `WouldBlock` instead of failing:
/// stderr may be a pipe that something else sharing it (a supervisor, a
/// runtime's shim, a shell) has set non-blocking, and `write_all` would
/// take its `EAGAIN` as an error and lose the line. A refused write is
/// tried again after [`RETRY`]: a full pipe delays lines, and then the
/// queue fills and the logging threads wait, as with a blocking pipe.
pub struct Patient<W>(pub W);

/// How long a write refused with `WouldBlock` waits before it is tried
/// again.
pub const RETRY: Duration = Duration::from_millis(1);

impl<W: Write> Patient<W> {
    /// `call` on the output, tried again after [`RETRY`] while it would
    /// block.
    fn waiting<T>(&mut self, call: impl Fn(&mut W) -> std::io::Result<T>) -> std::io::Result<T> {
        loop {
            match call(&mut self.0) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(RETRY),
                done => return done,
            }
        }
    }
}

impl<W: Write> Write for Patient<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.waiting(|out| out.write(bytes))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.waiting(W::flush)
    }
}

impl LogWriter {
    /// Hands a whole line over, without a copy. Blocks only while the
    /// queue is full: no line is dropped. An empty line is not sent (the
    /// guard's empty line is what stops the thread).
    fn send(&self, line: Vec<u8>) -> std::io::Result<()> {
        if line.is_empty() {
            return Ok(());
        }
        self.lines
            .send(line)
            .map_err(|_| std::io::Error::other("the log writer has stopped"))
    }

    /// [`send`](Self::send), for a line written without `tracing`.
    pub fn send_line(&self, line: Vec<u8>) {
        // The writer stopped (the process is ending): nowhere to write.
        let _ = self.send(line);
    }
}

impl Write for LogWriter {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        self.send(line.to_vec())?;
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes a thread blocked on a quiet queue (then the queue is
        // empty, so there is room); a full queue means it is not blocked
        // and will see the stop.
        let _ = self.lines.try_send(Vec::new());
        // Bounded: a stderr that never drains leaves the thread behind.
        if self.done.recv_timeout(SHUTDOWN_WAIT).is_ok()
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// What the thread wrote, and how many writes it took.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<(Vec<u8>, usize)>>, Duration);

    impl Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(self.1);
            let mut sink = self.0.lock().unwrap();
            sink.0.extend_from_slice(bytes);
            sink.1 += 1;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_is_written_in_order_by_the_time_the_guard_is_dropped() {
        let sink = Sink::default();
        let (writer, guard) = spawn("test-log", sink.clone(), 8);
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let mut writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        writer.write_all(format!("{t} {i}\n").as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        drop(guard);
        let text = String::from_utf8(sink.0.lock().unwrap().0.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2000);
        // Each logging thread's lines come out in the order it wrote them.
        for t in 0..4 {
            let own: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| l.starts_with(&format!("{t} ")))
                .collect();
            let expected: Vec<String> = (0..500).map(|i| format!("{t} {i}")).collect();
            assert_eq!(own, expected);
        }
    }

    #[test]
    fn a_full_queue_makes_the_writer_wait_and_loses_nothing() {
        // A slow output (a full pipe) and room for two lines: the
        // logging thread waits for room instead of dropping.
        let sink = Sink(Arc::default(), Duration::from_millis(2));
        let (mut writer, guard) = spawn("test-log", sink.clone(), 2);
        for i in 0..50 {
            writer.write_all(format!("{i}\n").as_bytes()).unwrap();
        }
        drop(guard);
        let text = String::from_utf8(sink.0.lock().unwrap().0.clone()).unwrap();
        let expected: String = (0..50).map(|i| format!("{i}\n")).collect();
        assert_eq!(text, expected);
    }

    #[test]
    fn a_line_after_a_quiet_spell_is_flushed_without_waiting_for_the_next() {
        // Buffered as in production (a BufWriter over stderr).
        let sink = Sink::default();
        let (mut writer, guard) = spawn(
            "test-log",
            std::io::BufWriter::with_capacity(64 * 1024, sink.clone()),
            4,
        );
        std::thread::sleep(POLL * (QUIET_POLLS + 20));
        writer.write_all(b"after the quiet\n").unwrap();
        let mut waited = Duration::ZERO;
        while sink.0.lock().unwrap().0.is_empty() && waited < Duration::from_secs(2) {
            std::thread::sleep(POLL);
            waited += POLL;
        }
        assert_eq!(sink.0.lock().unwrap().0, b"after the quiet\n");
        drop(guard);
    }

    /// A non-blocking pipe that is full every other time it is written.
    struct Refusing(Sink, bool);

    impl Write for Refusing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.1 = !self.1;
            if self.1 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            // Part of it, as a pipe with little room takes.
            let part = bytes.len().min(7);
            self.0.write(&bytes[..part])
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_non_blocking_output_that_refuses_writes_loses_no_line() {
        let sink = Sink::default();
        let out = std::io::BufWriter::with_capacity(64, Patient(Refusing(sink.clone(), false)));
        let (mut writer, guard) = spawn("test-log", out, 4);
        for i in 0..200 {
            writer.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        drop(guard);
        let text = String::from_utf8(sink.0.lock().unwrap().0.clone()).unwrap();
        let expected: String = (0..200).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, expected);
    }

    #[test]
    fn a_quiet_writer_blocks_and_still_stops_when_dropped() {
        let sink = Sink::default();
        let (mut writer, guard) = spawn("test-log", sink.clone(), 4);
        writer.write_all(b"first\n").unwrap();
        // Long enough for the thread to go quiet and block.
        std::thread::sleep(POLL * (QUIET_POLLS + 20));
        writer.write_all(b"after the quiet\n").unwrap();
        drop(guard);
        let text = String::from_utf8(sink.0.lock().unwrap().0.clone()).unwrap();
        assert_eq!(text, "first\nafter the quiet\n");
    }
}
