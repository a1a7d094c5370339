//! The library's warnings during a run: what a user would read in the client's log (an evicting
//! node, a failover judged as a loss), captured on the run's thread so a scenario can check
//! that a warning came, and came once.

use std::cell::RefCell;
use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};

thread_local! {
    static WARNINGS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Keeps warnings and errors, as `LEVEL target: message field=value...`.
struct Keep;

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for Keep {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        let mut line = Line(format!("{} {}:", meta.level(), meta.target()));
        event.record(&mut line);
        WARNINGS.with(|w| w.borrow_mut().push(line.0));
    }
}

/// Captures this thread's warnings (and errors) until the guard is dropped, starting empty.
pub fn capture() -> tracing::subscriber::DefaultGuard {
    WARNINGS.with(|w| w.borrow_mut().clear());
    let subscriber =
        tracing_subscriber::registry().with(Keep.with_filter(LevelFilter::from_level(Level::WARN)));
    tracing::subscriber::set_default(subscriber)
}

/// The warnings captured on this thread so far.
pub fn warnings() -> Vec<String> {
    WARNINGS.with(|w| w.borrow().clone())
}
