//! Reading the figures out of what a child printed: the last JSON line, or the result row
//! under perftest's `#bytes` header.

use crate::error::BenchError;
use serde_json::Value;

/// The last line of `s` that is JSON.
pub(crate) fn last_json(s: &str) -> Result<Value, BenchError> {
    s.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| BenchError::NoJson(s.to_owned()))
}

/// For `ok_or_else`: a figure missing from a child's output ([`BenchError::Output`]).
pub(crate) fn missing(what: &'static str) -> impl FnOnce() -> BenchError {
    move || BenchError::Output(what.into())
}

/// The numbers of the row under perftest's (or `softrdma perf`'s) `#bytes` header.
pub(crate) fn perftest_row(out: &str) -> Result<Vec<f64>, BenchError> {
    let mut lines = out.lines().skip_while(|l| !l.contains("#bytes"));
    lines.next();
    lines
        .find(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .filter(|v: &Vec<f64>| v.len() >= 4)
        .ok_or_else(|| BenchError::Output(format!("no result row in: {out}")))
}
