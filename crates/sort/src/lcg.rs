//! The 128-bit linear congruential generator of gensort 1.5.
//!
//! `X(n+1) = A * X(n) + C mod 2^128` with `X(0) = 0`. Record `i` is made from
//! `X(i+1)` onwards. Because one step is an affine map, `n` steps compose into
//! one affine map `x -> a_n * x + c_n`, computed by repeated squaring in
//! `O(log n)`; that is what lets generation start at any record (`-b`) and lets
//! every thread generate its own block independently.

/// Multiplier of the generator.
pub const MULTIPLIER: u128 = 0x2360_ED05_1FC6_5DA4_4385_DF64_9FCC_F645;
/// Increment of the generator; its top 80 bits spell "JimGrayRIP".
pub const INCREMENT: u128 = 0x4A69_6D47_7261_7952_4950_2020_2020_2001;

/// One step of the generator.
#[inline(always)]
pub fn next(x: u128) -> u128 {
    x.wrapping_mul(MULTIPLIER).wrapping_add(INCREMENT)
}

/// The affine map `x -> multiplier * x + increment` (mod 2^128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Affine {
    multiplier: u128,
    increment: u128,
}

impl Affine {
    const IDENTITY: Affine = Affine {
        multiplier: 1,
        increment: 0,
    };

    /// `self` applied after `inner`.
    fn after(self, inner: Affine) -> Affine {
        Affine {
            multiplier: self.multiplier.wrapping_mul(inner.multiplier),
            increment: self
                .multiplier
                .wrapping_mul(inner.increment)
                .wrapping_add(self.increment),
        }
    }
}

/// `X(steps)`: the generator's value after `steps` steps from `X(0) = 0`.
pub fn skip_ahead(steps: u128) -> u128 {
    let mut result = Affine::IDENTITY;
    let mut power = Affine {
        multiplier: MULTIPLIER,
        increment: INCREMENT,
    };
    let mut remaining = steps;
    while remaining != 0 {
        if remaining & 1 == 1 {
            result = power.after(result);
        }
        power = power.after(power);
        remaining >>= 1;
    }
    result.increment
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_ahead_matches_stepping() {
        let mut x = 0u128;
        for steps in 0..1000u128 {
            assert_eq!(skip_ahead(steps), x, "steps = {steps}");
            x = next(x);
        }
    }

    #[test]
    fn skip_ahead_composes() {
        // X(a + b) reached by skipping a, then stepping b times.
        let mut x = skip_ahead(1 << 40);
        for _ in 0..17 {
            x = next(x);
        }
        assert_eq!(x, skip_ahead((1 << 40) + 17));
    }

    #[test]
    fn first_value_spells_the_dedication() {
        assert_eq!(&skip_ahead(1).to_be_bytes()[..10], b"JimGrayRIP");
    }
}
