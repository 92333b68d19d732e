//! Log output: the process's log lines (and its own `error:` lines) go to stderr through a bounded
//! queue and one writer thread, so that a stderr nobody reads cannot stop the process.
//!
//! Owns [`LogOutput`], the writer the `tracing` subscriber writes into, and the thread that drains
//! it into stderr, the lines queued so far in one write (a busy host logs a line per event: a write
//! and a wake-up per line were a tenth of its CPU). A line that does not fit in the queue (stderr
//! is a full pipe whose reader does not read, and the queue filled up) is dropped and counted; a
//! line stderr refuses (a closed pipe: EPIPE) is dropped and counted too. The count is reported in
//! one line once stderr takes lines again, and at exit. It never blocks the thread that logs, never
//! panics on a write error, and never holds up exit for longer than the deadline given to
//! [`flush_at_exit`].

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Lines waiting for the writer thread at most.
const QUEUE_LINES: usize = 8192;

/// Bytes waiting for the writer thread at most (all lines together).
const QUEUE_BYTES: usize = 4 << 20;

/// The most bytes the writer thread writes at once.
const WRITE_AT_MOST: usize = 64 << 10;

/// How long the writer thread lets lines gather when they come faster than one per this long
/// (see `Counters::write_lines`): a line reaches stderr at most this much later. At 2 ms a host
/// handling 1,000 events/s, one line each, woke this thread for every other line (0.58 context
/// switches per event); at 10 ms, 0.17.
const GATHER: Duration = Duration::from_millis(10);

/// How long [`flush_at_exit`] waits for the lines still queued to be written.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(1);

/// The process's log output, once installed (see [`LogOutput::install_stderr`]).
static INSTALLED: OnceLock<LogOutput> = OnceLock::new();

enum Message {
    Line(Vec<u8>),
    /// Write everything queued before this, then answer.
    Flush(SyncSender<()>),
}

/// A lossy, non-blocking line writer in front of stderr (or any writer): cheap to clone, every
/// clone feeds the same queue and thread.
#[derive(Clone)]
pub struct LogOutput {
    queue: SyncSender<Message>,
    queued_bytes: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
}

impl LogOutput {
    /// The log output on stderr, installed as the one [`write_line`] and [`flush_at_exit`] use.
    pub fn install_stderr() -> Self {
        INSTALLED.get_or_init(|| Self::spawn(io::stderr())).clone()
    }

    /// A log output writing into `out` from its own thread. Without a thread (the system
    /// refused one), every line is dropped and counted: logging still never blocks.
    pub fn spawn<W: Write + Send + 'static>(out: W) -> Self {
        let (queue, lines) = sync_channel(QUEUE_LINES);
        let output = Self {
            queue,
            queued_bytes: Arc::default(),
            dropped: Arc::default(),
        };
        let writer = output.clone_counters();
        let _ = std::thread::Builder::new()
            .name("outbox-log".into())
            .spawn(move || writer.write_lines(out, lines));
        output
    }

    /// Queue one line (with its newline) without waiting; dropped and counted when the queue
    /// is full.
    pub fn send(&self, line: &[u8]) {
        let len = line.len();
        let queued = self.queued_bytes.fetch_add(len, Ordering::Relaxed);
        if queued.saturating_add(len) > QUEUE_BYTES {
            self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.queue.try_send(Message::Line(line.to_vec())).is_err() {
            self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lines dropped so far (queue full, or refused by the output).
    #[cfg(test)]
    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Wait until every line queued so far is written (and the dropped count reported), for at
    /// most `within`. `false` when the output did not take them in time.
    pub fn flush(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let (done, answer) = sync_channel(1);
        let mut flush = Message::Flush(done);
        loop {
            match self.queue.try_send(flush) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    if Instant::now() >= deadline {
                        return false;
                    }
                    flush = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        answer
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }

    /// The counters shared with the writer thread (the thread holds no sender, so the queue
    /// closes when the last [`LogOutput`] goes).
    fn clone_counters(&self) -> Counters {
        Counters {
            queued_bytes: self.queued_bytes.clone(),
            dropped: self.dropped.clone(),
        }
    }
}

/// Lines taken from the queue and not written yet.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    lines: u64,
}

/// What the writer thread shares with the senders.
struct Counters {
    queued_bytes: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
}

impl Counters {
    /// The writer thread: write the lines queued so far in one write (at most [`WRITE_AT_MOST`]
    /// bytes each), ignoring (and counting) what the output refuses, and report drops once the
    /// output takes lines again. When lines come faster than one per [`GATHER`], it sleeps that
    /// long after each write, so that the next lines gather in the queue instead of each one
    /// waking this thread.
    fn write_lines<W: Write>(self, mut out: W, lines: Receiver<Message>) {
        let mut reported = 0;
        let mut batch = Batch::default();
        let mut last_wake: Option<Instant> = None;
        while let Ok(first) = lines.recv() {
            let mut next = Some(first);
            while let Some(message) = next {
                match message {
                    Message::Line(line) => {
                        self.queued_bytes.fetch_sub(line.len(), Ordering::Relaxed);
                        batch.bytes.extend_from_slice(&line);
                        batch.lines += 1;
                        if batch.bytes.len() >= WRITE_AT_MOST {
                            reported = self.write_batch(&mut out, &mut batch, reported);
                        }
                    }
                    Message::Flush(done) => {
                        reported = self.write_batch(&mut out, &mut batch, reported);
                        reported = self.report_drops(&mut out, reported);
                        let _ = out.flush();
                        let _ = done.try_send(());
                    }
                }
                next = lines.try_recv().ok();
            }
            reported = self.write_batch(&mut out, &mut batch, reported);
            let now = Instant::now();
            if last_wake.is_some_and(|at| now.duration_since(at) < GATHER) {
                std::thread::sleep(GATHER);
            }
            last_wake = Some(now);
        }
    }

    /// Write `batch` (after the drops report, if any) and empty it; a write the output refuses
    /// counts the batch's lines as dropped. The new total of drops reported.
    fn write_batch<W: Write>(&self, out: &mut W, batch: &mut Batch, reported: u64) -> u64 {
        if batch.lines == 0 {
            return reported;
        }
        let reported = self.report_drops(out, reported);
        if out.write_all(&batch.bytes).is_err() {
            self.dropped.fetch_add(batch.lines, Ordering::Relaxed);
        }
        batch.bytes.clear();
        batch.lines = 0;
        reported
    }

    /// Write how many lines were dropped since the last report, if any; the new total reported.
    fn report_drops<W: Write>(&self, out: &mut W, reported: u64) -> u64 {
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped == reported {
            return reported;
        }
        let note = format!(
            "warning: {} log lines dropped: stderr did not take them ({dropped} since start)\n",
            dropped - reported
        );
        match out.write_all(note.as_bytes()) {
            Ok(()) => dropped,
            Err(_) => reported,
        }
    }
}

/// One log line being written: `tracing` writes each formatted event in one `write_all`.
pub struct LogLine<'a> {
    output: &'a LogOutput,
}

impl Write for LogLine<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.send(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogOutput {
    type Writer = LogLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine { output: self }
    }
}

/// Write one line to stderr after what was logged before it, like `eprintln!` but never
/// blocking or panicking: through the installed log output, or straight to stderr (errors
/// ignored) when none is installed.
pub fn write_line(line: std::fmt::Arguments<'_>) {
    let text = format!("{line}\n");
    match INSTALLED.get() {
        Some(output) => output.send(text.as_bytes()),
        None => {
            let _ = io::stderr().write_all(text.as_bytes());
        }
    }
}

/// Before the process exits: write what is still queued, for at most `within`.
pub fn flush_at_exit(within: Duration) {
    if let Some(output) = INSTALLED.get() {
        output.flush(within);
    }
}

/// Print one line to stderr like `eprintln!`, through the log output (see [`write_line`]):
/// never blocks on a full pipe, never panics on a closed one.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::log_output::write_line(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that never returns from a write until the test ends: a pipe nobody reads.
    struct Stuck(std::sync::Mutex<std::sync::mpsc::Receiver<()>>);

    impl Write for Stuck {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            let _ = self.0.lock().map(|r| r.recv());
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A writer whose reader went away.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn logging_into_an_output_that_never_takes_a_line_neither_blocks_nor_grows() {
        let (_release, stuck) = std::sync::mpsc::channel();
        let output = LogOutput::spawn(Stuck(std::sync::Mutex::new(stuck)));
        let lines = QUEUE_LINES * 3;
        let started = Instant::now();
        for i in 0..lines {
            output.send(format!("line {i}\n").as_bytes());
        }
        // Not a timing claim: a blocked send would never return at all.
        assert!(started.elapsed() < Duration::from_secs(30));
        // The queue holds at most its bound and the stuck writer at most one write's worth of
        // lines (each at least "line 0\n"); the rest is counted.
        let in_the_stuck_write = WRITE_AT_MOST / "line 0\n".len() + 1;
        assert!(output.dropped() >= (lines - QUEUE_LINES - in_the_stuck_write) as u64);
        assert!(!output.flush(Duration::from_millis(100)));
    }

    #[test]
    fn a_line_larger_than_the_queue_is_dropped_and_counted() {
        let (_release, stuck) = std::sync::mpsc::channel();
        let output = LogOutput::spawn(Stuck(std::sync::Mutex::new(stuck)));
        output.send(&vec![b'x'; QUEUE_BYTES + 1]);
        assert_eq!(output.dropped(), 1);
    }

    #[test]
    fn a_closed_output_counts_its_lines_as_dropped_without_panicking() {
        let output = LogOutput::spawn(Closed);
        for _ in 0..10 {
            output.send(b"line\n");
        }
        assert!(output.flush(Duration::from_secs(10)));
        assert_eq!(output.dropped(), 10);
    }

    #[test]
    fn lines_that_come_together_leave_in_few_writes_complete_and_in_order() {
        #[derive(Clone, Default)]
        struct Writes(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);
        impl Write for Writes {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().push(buf.to_vec());
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let writes = Writes::default();
        let output = LogOutput::spawn(writes.clone());
        let lines = 5000;
        for i in 0..lines {
            output.send(format!("line {i}\n").as_bytes());
        }
        assert!(output.flush(Duration::from_secs(10)));
        let writes = writes.0.lock().unwrap();
        let text = String::from_utf8(writes.concat()).unwrap();
        let expected: String = (0..lines).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, expected);
        // One write per line was a wake-up and a system call per line.
        assert!(
            writes.len() * 10 < lines,
            "{} writes for {lines} lines",
            writes.len()
        );
        assert_eq!(output.dropped(), 0);
    }

    #[test]
    fn lines_are_written_in_order_and_drops_are_reported_once_the_output_takes_lines() {
        #[derive(Clone, Default)]
        struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let seen = Shared::default();
        let output = LogOutput::spawn(seen.clone());
        output.send(b"one\n");
        assert!(output.flush(Duration::from_secs(10)));
        output.dropped.fetch_add(2, Ordering::Relaxed);
        output.send(b"two\n");
        assert!(output.flush(Duration::from_secs(10)));
        let text = String::from_utf8(seen.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "one\nwarning: 2 log lines dropped: stderr did not take them (2 since start)\ntwo\n"
        );
    }
}
