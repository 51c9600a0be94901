//! The figures of `compare`'s table as they come in, each said on stderr as it does so that
//! a long run shows where it is.

use crate::error::BenchError;

/// One figure of the table.
pub(super) struct Figure {
    /// What was measured, as the table names it.
    pub(super) what: String,
    /// Microseconds for latency, bytes per second for bandwidth, messages per second for rate.
    pub(super) value: Option<f64>,
    /// What the value is.
    pub(super) kind: Kind,
    /// Why the value is missing (the error's start).
    pub(super) note: String,
}

/// What a figure measures, which says how it prints and what it is a ratio to.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// Latency.
    Lat,
    /// Bandwidth.
    Bw,
    /// Message rate.
    Rate,
    /// A size in KiB.
    Size,
}

/// The table's figures, in the order they were measured.
#[derive(Default)]
pub(super) struct Figures(pub(super) Vec<Figure>);

impl Figures {
    /// Adds a figure, or a skipped one with the error's start as its note.
    pub(super) fn add(&mut self, what: &str, kind: Kind, r: Result<f64, BenchError>) {
        let (value, note) = match r {
            Ok(v) => (Some(v), String::new()),
            Err(e) => (None, e.to_string().chars().take(120).collect()),
        };
        eprintln!(
            "  {what}: {}",
            value.map_or(format!("skipped ({note})"), |v| format!("{v:.3}"))
        );
        self.0.push(Figure {
            what: what.into(),
            value,
            kind,
            note,
        });
    }
}
