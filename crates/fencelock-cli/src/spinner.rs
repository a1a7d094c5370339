//! A one-line spinner on stderr while waiting for a lock, only when stderr is a terminal: in a
//! pipe or a log file it would be noise.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

const FRAMES: &[char] = &['|', '/', '-', '\\'];
const TICK: Duration = Duration::from_millis(120);

/// A running spinner; [`Spinner::stop`] clears its line.
#[derive(Debug)]
pub(crate) struct Spinner {
    text: watch::Sender<String>,
    task: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts a spinner showing `text`, or a silent stand-in when stderr is not a terminal.
    pub(crate) fn start(text: impl Into<String>) -> Spinner {
        let (tx, rx) = watch::channel(text.into());
        let task = std::io::stderr()
            .is_terminal()
            .then(|| tokio::spawn(spin(rx)));
        Spinner { text: tx, task }
    }

    /// Changes the text.
    pub(crate) fn set(&self, text: impl Into<String>) {
        self.text.send_replace(text.into());
    }

    /// Stops the spinner and clears its line.
    pub(crate) async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
            let mut err = std::io::stderr().lock();
            // Erase the line: carriage return, then clear to its end.
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

async fn spin(rx: watch::Receiver<String>) {
    let started = Instant::now();
    let mut frame = 0usize;
    loop {
        {
            let text = rx.borrow().clone();
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[2K{} {text} ({}s)",
                FRAMES[frame % FRAMES.len()],
                started.elapsed().as_secs()
            );
            let _ = err.flush();
        }
        frame += 1;
        tokio::time::sleep(TICK).await;
    }
}
