//! Hilbert keys: points ordered along a Hilbert curve, so that points close
//! in the order are close in space (the Hilbert build packs leaves in this
//! order; the k-means build orders each group's members by it).

/// Key words: 256 bits, the curve's first levels in every dimension.
const KEY_WORDS: usize = 4;

/// The most bits a key holds: what construction uses.
pub const KEY_BITS: usize = KEY_WORDS * 64;

/// A point's position along the curve (most significant word first).
pub type Key = [u64; KEY_WORDS];

/// The Hilbert key of each of `count` items of `dims` coordinates, read by
/// `coordinate(item, dim)`, over the items' bounding box, at `key_bits`
/// (at most [`KEY_BITS`]) shared out to the coordinates, 1 to 32 each:
/// the cost of a key is linear in its bits.
pub fn keys(
    count: usize,
    dims: usize,
    key_bits: usize,
    coordinate: impl Fn(usize, usize) -> f64,
) -> Vec<Key> {
    let bits = (key_bits.min(KEY_BITS) / dims).clamp(1, 32) as u32;
    let mut low = vec![f64::INFINITY; dims];
    let mut high = vec![f64::NEG_INFINITY; dims];
    for item in 0..count {
        for dim in 0..dims {
            let x = coordinate(item, dim);
            low[dim] = low[dim].min(x);
            high[dim] = high[dim].max(x);
        }
    }
    let cells = f64::from(bits).exp2();
    let top = (1u64 << bits) - 1;
    let mut axes = vec![0u32; dims];
    (0..count)
        .map(|item| {
            for dim in 0..dims {
                let span = high[dim] - low[dim];
                axes[dim] = if span > 0.0 {
                    let cell = ((coordinate(item, dim) - low[dim]) / span * cells).floor();
                    (cell as u64).min(top) as u32
                } else {
                    0
                };
            }
            key_of(&mut axes, bits)
        })
        .collect()
}

/// Item indices `0..count` in key order (ties by index).
pub fn order(keys: &[Key]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| keys[a as usize].cmp(&keys[b as usize]).then(a.cmp(&b)));
    order
}

/// Turns cell coordinates into their Hilbert index (Skilling's transform
/// from axes to the "transposed" index, then the index's bits interleaved
/// from the most significant, cut at [`KEY_BITS`]).
fn key_of(axes: &mut [u32], bits: u32) -> Key {
    let n = axes.len();
    let top = 1u32 << (bits - 1);
    // Undo the excess work of the recursive definition, level by level.
    let mut q = top;
    while q > 1 {
        let p = q - 1;
        for i in 0..n {
            if axes[i] & q != 0 {
                axes[0] ^= p;
            } else {
                let t = (axes[0] ^ axes[i]) & p;
                axes[0] ^= t;
                axes[i] ^= t;
            }
        }
        q >>= 1;
    }
    // Gray-code the result.
    for i in 1..n {
        axes[i] ^= axes[i - 1];
    }
    let mut t = 0;
    let mut q = top;
    while q > 1 {
        if axes[n - 1] & q != 0 {
            t ^= q - 1;
        }
        q >>= 1;
    }
    for axis in axes.iter_mut() {
        *axis ^= t;
    }
    // Interleave: bit `level` of every axis in turn, most significant first.
    let mut key = [0u64; KEY_WORDS];
    let mut at = 0;
    'levels: for level in (0..bits).rev() {
        for &axis in axes.iter() {
            if at == KEY_BITS {
                break 'levels;
            }
            if (axis >> level) & 1 != 0 {
                key[at / 64] |= 1 << (63 - at % 64);
            }
            at += 1;
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Order 2 in 2-d: consecutive keys are neighbouring cells (the
    /// defining property of the curve), and every cell appears once.
    #[test]
    fn consecutive_cells_are_adjacent() {
        for (dims, bits) in [(2usize, 3u32), (3, 2), (4, 2)] {
            let side = 1u32 << bits;
            let cells = side.pow(dims as u32);
            let mut by_key: Vec<(Key, Vec<u32>)> = (0..cells)
                .map(|cell| {
                    let axes: Vec<u32> = (0..dims).map(|d| (cell / side.pow(d as u32)) % side).collect();
                    (key_of(&mut axes.clone(), bits), axes)
                })
                .collect();
            by_key.sort();
            for pair in by_key.windows(2) {
                assert_ne!(pair[0].0, pair[1].0, "two cells share a key");
                let steps: u32 = pair[0]
                    .1
                    .iter()
                    .zip(&pair[1].1)
                    .map(|(a, b)| a.abs_diff(*b))
                    .sum();
                assert_eq!(
                    steps, 1,
                    "cells {:?} and {:?} are consecutive but not adjacent",
                    pair[0].1, pair[1].1
                );
            }
        }
    }

    #[test]
    fn keys_order_a_line_of_points_along_it() {
        let keys = keys(5, 1, KEY_BITS, |item, _| [4.0, 0.0, 3.0, 1.0, 2.0][item]);
        assert_eq!(order(&keys), [1, 3, 4, 2, 0]);
    }
}
