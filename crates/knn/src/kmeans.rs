//! Grouping by k-means: the k-means build's rule for which points share a
//! leaf and which nodes share a parent.
//!
//! A group may hold at most `cap` items. A set of more is cut in two by
//! balanced 2-means bisection (a bisecting k-means): Lloyd's algorithm
//! with k = 2 on a sample, seeded by k-means++, then the cut at a multiple
//! of `cap` in the order of the items' projections on the line between
//! the centres (a hyperplane across it), or across the widest axis when
//! that cut is nearly as good by the k-means objective (see
//! [`AXIS_MARGIN`]); each side again, until every set fits a group. Every
//! group is full except the last of the whole set: raw clusters are not
//! leaf-sized, and a cut into full groups loses less than clusters cut
//! into partial ones (at 10^6 points and 100 Gaussian clusters of sigma
//! 640 in 2 dimensions, Lloyd's clusters of up to 64 at once cut into
//! leaves along the Hilbert curve filled them to 70% and PSB visited
//! 1.9 times the nodes of the Hilbert build; bisection fills them and
//! visits 0.9 times). Within a group items keep their Hilbert order.
//!
//! The first cuts run one after the other; the [`PARTS`] sets they leave
//! are cut on every thread, each with its own random stream drawn from the
//! seed and its place, so the groups do not depend on the thread count.

use spillway_core::{Interrupt, Result};

use crate::distance::d2;
use crate::hilbert;
use crate::parallel;
use crate::points::Coordinate;

/// Items a cut's 2-means iterates on: the direction of a cut needs many
/// (in 64 dimensions, cuts by 2-means on 96 items gave leaves that PSB
/// visited 10% more of than cuts on 1024).
const SAMPLE: usize = 1024;

/// The sets the first cuts leave, each then cut on whichever thread is
/// free: a fixed number, so that the random streams, and the groups, do not
/// depend on the thread count; enough that uneven sets balance out.
const PARTS: usize = 32;

/// How much smaller the sum of squares of a 2-means cut must be than that
/// of the cut across the widest axis for the 2-means cut to be taken.
/// Lloyd's algorithm from a random seeding settles on oblique cuts of a
/// box of evenly spread points, nearly as good by the objective as the
/// cut across its longest axis, but groups cut so overlap where cuts
/// across axes tile the box (at 10^6 uniform points in 16 dimensions,
/// PSB visited 1.08 times the nodes of the Hilbert build with 2-means
/// cuts alone, 0.92 times choosing the smaller sum, 0.86 with a margin of
/// 3%). On clustered data 2-means cuts win by far more than the margin.
const AXIS_MARGIN: f64 = 0.03;

/// How the grouping runs.
pub struct Settings<'i> {
    pub seed: u64,
    pub iterations: usize,
    pub threads: usize,
    pub interrupt: &'i Interrupt,
}

/// Groups `items` (row-major, `dims` each) into groups of at most `cap`.
pub fn groups<T: Coordinate>(
    items: &[T],
    dims: usize,
    cap: usize,
    settings: &Settings<'_>,
) -> Result<Vec<Vec<u32>>> {
    let count = items.len() / dims;
    let keys = hilbert::keys(count, dims, hilbert::KEY_BITS, |i, j| {
        items[i * dims + j].to_f64()
    });
    let mut grouping = Grouping {
        items,
        dims,
        cap,
        settings,
        rng: settings.seed,
    };
    let mut parts = vec![hilbert::order(&keys)];
    while parts.len() < PARTS && parts.iter().any(|p| p.len() > cap) {
        let mut next = Vec::with_capacity(2 * parts.len());
        for part in parts {
            if part.len() <= cap {
                next.push(part);
            } else {
                let (near, far) = grouping.cut(part)?;
                next.extend([near, far]);
            }
        }
        parts = next;
    }
    let mut outs: Vec<Vec<Vec<u32>>> = vec![Vec::new(); parts.len()];
    parallel::for_each(
        parts.into_iter().zip(outs.iter_mut()).enumerate(),
        settings.threads,
        settings.interrupt,
        || (),
        |(), (at, (part, out))| {
            let mut grouping = Grouping {
                items,
                dims,
                cap,
                settings,
                rng: settings.seed ^ (at as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
            };
            grouping.bisect(part, out)
        },
    )?;
    Ok(outs.concat())
}

struct Grouping<'a, 's, T> {
    items: &'a [T],
    dims: usize,
    cap: usize,
    settings: &'s Settings<'s>,
    rng: u64,
}

impl<T: Coordinate> Grouping<'_, '_, T> {
    fn item(&self, i: u32) -> &[T] {
        let at = i as usize * self.dims;
        &self.items[at..at + self.dims]
    }

    /// Appends the groups of `members` (in Hilbert order) to `out`.
    fn bisect(&mut self, members: Vec<u32>, out: &mut Vec<Vec<u32>>) -> Result<()> {
        if members.len() <= self.cap {
            out.push(members);
            return Ok(());
        }
        let (near, far) = self.cut(members)?;
        self.bisect(near, out)?;
        self.bisect(far, out)
    }

    /// Cuts `members` (more than `cap`, in Hilbert order) in two, the first
    /// of half their groups (rounded down) full, each in Hilbert order.
    fn cut(&mut self, members: Vec<u32>) -> Result<(Vec<u32>, Vec<u32>)> {
        self.settings.interrupt.check()?;
        let len = members.len();
        debug_assert!(len > self.cap);
        let first = (len.div_ceil(self.cap) / 2) * self.cap;
        let direction = self.direction(&members, first as f64 / len as f64)?;
        let side: Vec<f64> = members.iter().map(|&i| dot(self.item(i), &direction)).collect();
        let mut rank: Vec<u32> = (0..len as u32).collect();
        rank.select_nth_unstable_by(first, |&a, &b| {
            side[a as usize].total_cmp(&side[b as usize]).then(a.cmp(&b))
        });
        let mut in_near = vec![false; len];
        for &at in &rank[..first] {
            in_near[at as usize] = true;
        }
        let (mut near, mut far) = (Vec::with_capacity(first), Vec::with_capacity(len - first));
        for (&i, &is_near) in members.iter().zip(&in_near) {
            if is_near {
                near.push(i);
            } else {
                far.push(i);
            }
        }
        Ok((near, far))
    }

    /// The direction across which `members` are cut, the first `share`
    /// of them (in the order of their dot product with it) on the near
    /// side: the line between two centres by Lloyd's algorithm, unless the
    /// cut across the axis of the widest spread leaves a sum of squares
    /// (the k-means objective) within [`AXIS_MARGIN`] of its cut's.
    fn direction(&mut self, members: &[u32], share: f64) -> Result<Vec<f64>> {
        let fitted = self.sample(members);
        let dims = self.dims;
        let centres = self.lloyd(&fitted)?;
        let means: Vec<f64> = (0..dims).map(|j| centres[dims + j] - centres[j]).collect();
        // Judged on another sample: on the one it was fitted to, the 2-means
        // cut looks better than it is.
        let judged = self.sample(members);
        let mut widest = (0, f64::NEG_INFINITY);
        for j in 0..dims {
            let (lo, hi) = judged
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &i| {
                    let x = self.item(i)[j].to_f64();
                    (lo.min(x), hi.max(x))
                });
            if hi - lo > widest.1 {
                widest = (j, hi - lo);
            }
        }
        let mut axis = vec![0.0; dims];
        axis[widest.0] = 1.0;
        let near = ((share * judged.len() as f64).round() as usize).clamp(1, judged.len() - 1);
        let by_axis = self.cut_cost(&judged, &axis, near);
        let by_means = self.cut_cost(&judged, &means, near);
        Ok(if by_means > by_axis * (1.0 - AXIS_MARGIN) {
            axis
        } else {
            means
        })
    }

    /// At most [`SAMPLE`] of `members`, drawn at random.
    fn sample(&mut self, members: &[u32]) -> Vec<u32> {
        if members.len() > SAMPLE {
            (0..SAMPLE)
                .map(|_| members[self.next_below(members.len())])
                .collect()
        } else {
            members.to_vec()
        }
    }

    /// The sum of squared distances to their side's mean of `sample` cut
    /// across `direction`, the `near` lowest on one side.
    fn cut_cost(&self, sample: &[u32], direction: &[f64], near: usize) -> f64 {
        let mut order: Vec<(f64, u32)> = sample
            .iter()
            .map(|&i| (dot(self.item(i), direction), i))
            .collect();
        order.select_nth_unstable_by(near, |a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (low, high) = order.split_at(near);
        [low, high]
            .iter()
            .map(|side| {
                (0..self.dims)
                    .map(|j| {
                        let (sum, squares) = side.iter().fold((0.0, 0.0), |(sum, squares), &(_, i)| {
                            let x = self.item(i)[j].to_f64();
                            (sum + x, squares + x * x)
                        });
                        squares - sum * sum / side.len() as f64
                    })
                    .sum::<f64>()
            })
            .sum()
    }

    /// Lloyd's algorithm with k = 2 on `sample`, from a k-means++ seeding.
    fn lloyd(&mut self, sample: &[u32]) -> Result<Vec<f64>> {
        let mut centres = self.seed_centres(sample, 2);
        let mut assigned = vec![u32::MAX; sample.len()];
        for _ in 0..self.settings.iterations {
            self.settings.interrupt.check()?;
            let mut changed = 0;
            for (slot, &i) in assigned.iter_mut().zip(sample) {
                let nearest = nearest(self.item(i), &centres);
                changed += usize::from(*slot != nearest);
                *slot = nearest;
            }
            self.update_centres(sample, &assigned, &mut centres);
            if changed * 1000 <= sample.len() {
                break;
            }
        }
        Ok(centres)
    }

    /// k-means++: each next centre drawn with probability proportional to
    /// its squared distance from the nearest centre so far.
    fn seed_centres(&mut self, sample: &[u32], k: usize) -> Vec<f64> {
        let dims = self.dims;
        let mut centres = Vec::with_capacity(k * dims);
        let first = sample[self.next_below(sample.len())];
        centres.extend(self.item(first).iter().map(|x| x.to_f64()));
        let mut nearest_d2: Vec<f64> = sample
            .iter()
            .map(|&i| d2(self.item(i), &centres[..dims]))
            .collect();
        while centres.len() < k * dims {
            let total: f64 = nearest_d2.iter().sum();
            let pick = if total > 0.0 {
                let mut target = self.next_unit() * total;
                nearest_d2.iter().position(|&w| {
                    target -= w;
                    target < 0.0
                })
            } else {
                None
            }
            .unwrap_or_else(|| self.next_below(sample.len()));
            let at = centres.len();
            centres.extend(self.item(sample[pick]).iter().map(|x| x.to_f64()));
            for (w, &i) in nearest_d2.iter_mut().zip(sample) {
                *w = w.min(d2(self.item(i), &centres[at..at + dims]));
            }
        }
        centres
    }

    /// Moves each centre to its members' mean; an empty cluster takes the
    /// sample item farthest from its centre.
    fn update_centres(&self, sample: &[u32], assigned: &[u32], centres: &mut [f64]) {
        let dims = self.dims;
        let k = centres.len() / dims;
        let mut sums = vec![0.0; k * dims];
        let mut counts = vec![0usize; k];
        for (&i, &c) in sample.iter().zip(assigned) {
            let c = c as usize;
            counts[c] += 1;
            for (s, x) in sums[c * dims..(c + 1) * dims].iter_mut().zip(self.item(i)) {
                *s += x.to_f64();
            }
        }
        for c in 0..k {
            if counts[c] > 0 {
                for (centre, sum) in centres[c * dims..(c + 1) * dims]
                    .iter_mut()
                    .zip(&sums[c * dims..])
                {
                    *centre = sum / counts[c] as f64;
                }
            }
        }
        for c in (0..k).filter(|&c| counts[c] == 0) {
            let farthest = sample
                .iter()
                .zip(assigned)
                .map(|(&i, &a)| {
                    (
                        d2(self.item(i), &centres[a as usize * dims..(a as usize + 1) * dims]),
                        i,
                    )
                })
                .fold(
                    (f64::NEG_INFINITY, 0),
                    |best, next| if next.0 > best.0 { next } else { best },
                )
                .1;
            for (centre, x) in centres[c * dims..(c + 1) * dims]
                .iter_mut()
                .zip(self.item(farthest))
            {
                *centre = x.to_f64();
            }
        }
    }

    /// SplitMix64.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next_below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    fn next_unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn dot<T: Coordinate>(item: &[T], direction: &[f64]) -> f64 {
    item.iter().zip(direction).map(|(x, w)| x.to_f64() * w).sum()
}

/// The nearest of `centres` (row-major) to `item`, the first on ties.
fn nearest<T: Coordinate>(item: &[T], centres: &[f64]) -> u32 {
    let mut best = (0, f64::INFINITY);
    for (c, centre) in centres.chunks_exact(item.len()).enumerate() {
        let distance = d2(item, centre);
        if distance < best.1 {
            best = (c as u32, distance);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(interrupt: &Interrupt, threads: usize) -> Settings<'_> {
        Settings {
            seed: 7,
            iterations: 10,
            threads,
            interrupt,
        }
    }

    #[test]
    fn groups_cover_every_item_once_and_all_but_the_last_are_full() {
        let items: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 1013) as f32).collect();
        let interrupt = Interrupt::new();
        for cap in [1, 7, 64, 5000] {
            let groups = groups(&items, 2, cap, &settings(&interrupt, 2)).unwrap();
            let mut seen: Vec<u32> = groups.iter().flatten().copied().collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..2500).collect::<Vec<u32>>());
            let (last, full) = groups.split_last().unwrap();
            assert!(full.iter().all(|g| g.len() == cap), "cap {cap}");
            assert!(!last.is_empty() && last.len() <= cap);
            assert_eq!(groups.len(), 2500usize.div_ceil(cap));
        }
    }

    #[test]
    fn separated_clusters_never_share_a_group() {
        // Two blobs far apart, 40 points each, cap 20: no group mixes them.
        let items: Vec<f64> = (0..80)
            .flat_map(|i| [if i < 40 { 0.0 } else { 1e6 } + (i % 7) as f64, (i % 5) as f64])
            .collect();
        let interrupt = Interrupt::new();
        let groups = groups(&items, 2, 20, &settings(&interrupt, 1)).unwrap();
        assert_eq!(groups.len(), 4);
        for group in &groups {
            assert!(
                group.iter().all(|&i| i < 40) || group.iter().all(|&i| i >= 40),
                "{group:?}"
            );
        }
    }

    #[test]
    fn evenly_spread_items_are_cut_across_an_axis() {
        // Uniform in the unit cube of 8 dimensions, 16 groups: cut straight
        // across axes, the groups' bounding boxes tile the cube; a 2-means
        // cut from a random seeding may run across a diagonal, and boxes
        // cut so overlap.
        let (dims, count, cap) = (8, 8192, 512);
        let mut state = 11u64;
        let items: Vec<f64> = (0..dims * count)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect();
        let interrupt = Interrupt::new();
        let groups = groups(&items, dims, cap, &settings(&interrupt, 2)).unwrap();
        assert_eq!(groups.len(), count / cap);
        let volumes: f64 = groups
            .iter()
            .map(|group| {
                (0..dims)
                    .map(|j| {
                        let values = group.iter().map(|&i| items[i as usize * dims + j]);
                        values.clone().fold(f64::NEG_INFINITY, f64::max)
                            - values.fold(f64::INFINITY, f64::min)
                    })
                    .product::<f64>()
            })
            .sum();
        assert!(volumes < 1.05, "the groups' boxes fill {volumes} cubes");
    }

    #[test]
    fn identical_items_and_any_thread_count_give_the_same_groups() {
        let same = vec![1.5f64; 3 * 100];
        let interrupt = Interrupt::new();
        assert_eq!(groups(&same, 3, 8, &settings(&interrupt, 1)).unwrap().len(), 13);
        let items: Vec<f64> = (0..30_000u64).map(|i| ((i * 104_729) % 10_007) as f64).collect();
        let one = groups(&items, 3, 16, &settings(&interrupt, 1)).unwrap();
        assert_eq!(one, groups(&items, 3, 16, &settings(&interrupt, 2)).unwrap());
        assert_eq!(one, groups(&items, 3, 16, &settings(&interrupt, 3)).unwrap());
    }
}
