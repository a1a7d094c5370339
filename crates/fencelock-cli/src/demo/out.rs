//! The demo's printer: plain text in a pipe or a file, colours only on a terminal.

use std::io::{IsTerminal, Write};

use fencelock::{VoteOutcome, Votes};

/// How a piece of text is shown on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tone {
    /// What went right (green).
    Good,
    /// What went wrong, or what fencelock refused (red).
    Bad,
    /// Another client's hold, a warning (yellow).
    Warn,
    /// Side remarks (dim).
    Dim,
    /// Titles (bold).
    Strong,
}

/// Writes the story to stdout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    color: bool,
}

impl Out {
    /// Colours when stdout is a terminal, unless `NO_COLOR` is set or the terminal is dumb.
    pub(crate) fn new() -> Out {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        Out {
            color: std::io::stdout().is_terminal() && !no_color && !dumb,
        }
    }

    /// `text` in `tone` (unchanged without colours).
    pub(crate) fn paint(&self, tone: Tone, text: impl AsRef<str>) -> String {
        let text = text.as_ref();
        if !self.color {
            return text.to_owned();
        }
        let code = match tone {
            Tone::Good => "32",
            Tone::Bad => "31",
            Tone::Warn => "33",
            Tone::Dim => "2",
            Tone::Strong => "1",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    /// One raw line. A closed stdout (`fencelock demo | head`) must not turn into a panic, so
    /// write errors are ignored: the demo then runs on and still stops its nodes.
    pub(crate) fn raw(&self, text: impl AsRef<str>) {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", text.as_ref());
        let _ = stdout.flush();
    }

    /// A scene's title, after a blank line.
    pub(crate) fn scene(&self, number: u32, title: &str) {
        self.raw("");
        self.raw(self.paint(Tone::Strong, format!("Scene {number}. {title}")));
    }

    /// One indented line of a scene.
    pub(crate) fn line(&self, text: impl AsRef<str>) {
        self.raw(format!("  {}", text.as_ref()));
    }

    /// One step of a scene that made a round of requests: who did what, the per-node answers,
    /// and what came of it, in aligned columns.
    pub(crate) fn step(&self, label: &str, votes: &Votes, verdict: impl AsRef<str>) {
        self.line(format!(
            "{label:<24}{}  {}",
            self.votes(votes),
            verdict.as_ref()
        ));
    }

    /// The scene's lesson.
    pub(crate) fn lesson(&self, text: &str) {
        self.raw(format!("  {} {text}", self.paint(Tone::Strong, "Lesson:")));
    }

    /// The per-node answers of one round, one short word per node in node order:
    /// `[ok ok held down -]`.
    pub(crate) fn votes(&self, votes: &Votes) -> String {
        let words: Vec<String> = votes
            .iter()
            .map(|vote| {
                let (word, tone) = vote_word(&vote.outcome);
                self.paint(tone, word)
            })
            .collect();
        format!("[{}]", words.join(" "))
    }
}

/// The word and tone for one node's answer.
fn vote_word(outcome: &VoteOutcome) -> (&'static str, Tone) {
    match outcome {
        VoteOutcome::Granted => ("ok", Tone::Good),
        VoteOutcome::HeldByOther => ("held", Tone::Warn),
        VoteOutcome::NotHeld => ("gone", Tone::Warn),
        VoteOutcome::TimedOut => ("slow", Tone::Bad),
        VoteOutcome::Failed(_) => ("down", Tone::Bad),
        VoteOutcome::Excluded(_) => ("excluded", Tone::Bad),
        // Pending: the round was decided before this node answered.
        _ => ("-", Tone::Dim),
    }
}

/// Durations are written the one way the whole command writes them.
pub(crate) use crate::cli::human;

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock::NodeVote;
    use std::time::Duration;

    #[test]
    fn votes_are_one_word_per_node_in_order() {
        let vote = |outcome| NodeVote::new("redis://127.0.0.1:1", outcome, Duration::ZERO);
        let votes = Votes::from(vec![
            vote(VoteOutcome::Granted),
            vote(VoteOutcome::HeldByOther),
            vote(VoteOutcome::Failed("refused".into())),
            vote(VoteOutcome::Pending),
        ]);
        let out = Out { color: false };
        assert_eq!(out.votes(&votes), "[ok held down -]");
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(human(Duration::from_micros(420)), "0.4 ms");
        assert_eq!(human(Duration::from_millis(120)), "120 ms");
        assert_eq!(human(Duration::from_millis(1020)), "1.02 s");
    }

    #[test]
    fn no_colour_codes_without_a_terminal() {
        let out = Out { color: false };
        assert_eq!(out.paint(Tone::Bad, "x"), "x");
        let out = Out { color: true };
        assert_eq!(out.paint(Tone::Bad, "x"), "\x1b[31mx\x1b[0m");
    }
}
