//! Bounding spheres: a corrected Ritter's algorithm over a group of
//! members (a leaf's points, or a node's child spheres), compared with the
//! group's centroid, the smaller sphere kept.
//!
//! The seed's Algorithm 6 is followed with its listing's defects fixed
//! (DESIGN.md lists them): the reductions return the index of the farthest
//! member, child spheres count with their radius, the centre moves by half
//! the excess along a unit vector before the radius grows, and the radius
//! is finally set from the stored centre by [`stored_radius`], so that every
//! point below lies inside whatever the rounding.

use crate::distance::{d2, stored_radius};
use crate::points::Coordinate;

/// Ritter passes at most: each moves the sphere to take in the farthest
/// member; a handful usually suffice.
const RITTER_PASSES_MAX: usize = 16;

/// One member of a group: its centre, radius (0 for a point) and weight
/// (points below it, for the centroid).
pub struct Member<'a, T> {
    pub centre: &'a [T],
    pub radius: f64,
    pub weight: f64,
}

/// Writes into `centre` the centre of a sphere enclosing every member and
/// returns its stored radius. `scratch` holds a second centre (`dims` long).
pub fn enclose<'a, T: Coordinate>(
    count: usize,
    member: impl Fn(usize) -> Member<'a, T>,
    centre: &mut [f64],
    scratch: &mut [f64],
) -> f64 {
    assert!(count > 0, "a sphere needs at least one member");
    let ritter_reach = ritter(count, &member, centre);
    centroid(count, &member, scratch);
    let centroid_reach = reach(count, &member, scratch);
    if centroid_reach < ritter_reach {
        centre.copy_from_slice(scratch);
        stored_radius(centroid_reach)
    } else {
        stored_radius(ritter_reach)
    }
}

/// How far the members reach from `centre`: the largest computed distance
/// to a member's centre plus its radius.
fn reach<'a, T: Coordinate>(count: usize, member: &impl Fn(usize) -> Member<'a, T>, centre: &[f64]) -> f64 {
    (0..count)
        .map(|i| far_end(&member(i), centre))
        .fold(0.0, f64::max)
}

fn far_end<T: Coordinate>(member: &Member<'_, T>, centre: &[f64]) -> f64 {
    d2(member.centre, centre).sqrt() + member.radius
}

/// The member reaching farthest from `centre`, and how far.
fn farthest<'a, T: Coordinate>(
    count: usize,
    member: &impl Fn(usize) -> Member<'a, T>,
    centre: &[f64],
) -> (usize, f64) {
    let mut best = (0, f64::NEG_INFINITY);
    for i in 0..count {
        let end = far_end(&member(i), centre);
        if end > best.1 {
            best = (i, end);
        }
    }
    best
}

/// Ritter's sphere; returns how far the members reach from it.
fn ritter<'a, T: Coordinate>(
    count: usize,
    member: &impl Fn(usize) -> Member<'a, T>,
    centre: &mut [f64],
) -> f64 {
    let widen = |target: &mut [f64], source: &[T]| {
        for (t, s) in target.iter_mut().zip(source) {
            *t = s.to_f64();
        }
    };
    // Two far-apart members a and b.
    widen(centre, member(0).centre);
    let (a, _) = farthest(count, member, centre);
    let ma = member(a);
    widen(centre, ma.centre);
    let (b, _) = farthest(count, member, centre);
    let mb = member(b);
    let between = d2(ma.centre, mb.centre).sqrt();
    let mut radius;
    if between + mb.radius <= ma.radius {
        radius = ma.radius; // a holds b; the centre is a's already
    } else if between + ma.radius <= mb.radius {
        widen(centre, mb.centre);
        radius = mb.radius;
    } else {
        // The midpoint of the far ends of a and b, along the line through them.
        radius = (between + ma.radius + mb.radius) / 2.0;
        let along = (radius - ma.radius) / between;
        for (j, c) in centre.iter_mut().enumerate() {
            let (xa, xb) = (ma.centre[j].to_f64(), mb.centre[j].to_f64());
            *c = xa + (xb - xa) * along;
        }
    }
    for _ in 0..RITTER_PASSES_MAX {
        let (f, end) = farthest(count, member, centre);
        if end <= radius {
            break;
        }
        let mf = member(f);
        let gap = d2(mf.centre, centre).sqrt();
        if gap > 0.0 {
            // Move the centre half the excess toward f (with the old
            // radius), then grow the radius by that half.
            let step = (end - radius) / 2.0 / gap;
            for (j, c) in centre.iter_mut().enumerate() {
                *c += (mf.centre[j].to_f64() - *c) * step;
            }
            radius = (radius + end) / 2.0;
        } else {
            radius = end;
        }
    }
    reach(count, member, centre)
}

/// The members' weighted mean.
fn centroid<'a, T: Coordinate>(count: usize, member: &impl Fn(usize) -> Member<'a, T>, centre: &mut [f64]) {
    centre.fill(0.0);
    let mut total = 0.0;
    for i in 0..count {
        let m = member(i);
        for (c, x) in centre.iter_mut().zip(m.centre) {
            *c += x.to_f64() * m.weight;
        }
        total += m.weight;
    }
    for c in centre.iter_mut() {
        *c /= total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points<'a>(coordinates: &'a [f64], dims: usize) -> impl Fn(usize) -> Member<'a, f64> + 'a {
        move |i| Member {
            centre: &coordinates[i * dims..(i + 1) * dims],
            radius: 0.0,
            weight: 1.0,
        }
    }

    #[test]
    fn encloses_every_point_of_a_skewed_group() {
        let coordinates: Vec<f64> = (0..200)
            .map(|i| ((i * 37) % 101) as f64 * if i % 2 == 0 { 1.0 } else { 0.01 })
            .collect();
        let (mut centre, mut scratch) = ([0.0; 2], [0.0; 2]);
        let radius = enclose(100, points(&coordinates, 2), &mut centre, &mut scratch);
        for p in coordinates.chunks(2) {
            assert!(d2(p, &centre).sqrt() <= radius);
        }
    }

    #[test]
    fn child_spheres_count_with_their_radius() {
        let centres = [0.0, 0.0, 10.0, 0.0];
        let radii = [5.0, 1.0];
        let member = |i: usize| Member {
            centre: &centres[i * 2..i * 2 + 2],
            radius: radii[i],
            weight: 1.0,
        };
        let (mut centre, mut scratch) = ([0.0; 2], [0.0; 2]);
        let radius = enclose(2, member, &mut centre, &mut scratch);
        for i in 0..2 {
            assert!(d2(&centres[i * 2..i * 2 + 2], &centre).sqrt() + radii[i] <= radius);
        }
        assert!(radius < 8.1, "the sphere spanning both is 8 wide, got {radius}");
    }

    #[test]
    fn identical_points_give_a_point_sphere() {
        let coordinates = [3.0f64; 12];
        let (mut centre, mut scratch) = ([0.0; 3], [0.0; 3]);
        let radius = enclose(4, points(&coordinates, 3), &mut centre, &mut scratch);
        assert_eq!(centre, [3.0; 3]);
        assert!(radius > 0.0 && radius < 1e-100);
    }
}
