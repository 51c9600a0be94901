//! Statistics over repeated runs, shared by `compare` and `loss`.

/// The median of `v` (the upper one of an even count); `None` when empty.
pub(crate) fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}
