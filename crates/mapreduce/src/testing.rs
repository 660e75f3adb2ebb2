//! What the unit tests share.

/// The next number of a linear congruential generator (Knuth's MMIX
/// constants), its high 31 bits: deterministic test data without a
/// dependency.
pub fn lcg(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}
