//! Figures of rounds: a bench's cells run several times, interleaved, and reported as
//! the median of the rounds with their range, so that one round spoilt by a neighbour
//! moves neither.

/// The median of `values` (the upper one of an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// `low–high` of `values`, to `decimals` places.
pub fn range(values: &[f64], decimals: usize) -> String {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{low:.decimals$}–{high:.decimals$}")
}
