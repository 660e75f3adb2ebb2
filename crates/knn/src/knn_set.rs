//! The k nearest points found so far for one query.

/// The best `k` candidates seen, ordered by (squared distance, row): a
/// sorted array, since k is small and most candidates are refused by one
/// comparison with the k-th.
#[derive(Debug, Clone)]
pub struct KnnSet {
    k: usize,
    /// (canonical squared distance, row), ascending; at most `k`.
    best: Vec<(f64, u32)>,
}

impl KnnSet {
    /// An empty set for `k ≥ 1` neighbours.
    pub fn new(k: usize) -> KnnSet {
        assert!(k >= 1, "a kNN set needs k >= 1");
        KnnSet {
            k,
            best: Vec::with_capacity(k + 1),
        }
    }

    /// The k it holds at most.
    pub fn capacity(&self) -> usize {
        self.k
    }

    /// Empties the set for the next query, keeping its memory.
    pub fn clear(&mut self) {
        self.best.clear();
    }

    /// Whether `k` candidates are held.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.best.len() == self.k
    }

    /// The k-th squared distance, or infinity until `k` are held.
    #[inline]
    pub fn kth(&self) -> f64 {
        if self.is_full() {
            self.best[self.k - 1].0
        } else {
            f64::INFINITY
        }
    }

    /// Offers a candidate; returns whether it entered the set. The new
    /// entry moves down from the end (most that enter land near the k-th).
    #[inline]
    pub fn insert(&mut self, d2: f64, row: u32) -> bool {
        let before = |a: (f64, u32), b: (f64, u32)| a.0 < b.0 || (a.0 == b.0 && a.1 < b.1);
        let entry = (d2, row);
        if self.is_full() {
            if !before(entry, self.best[self.k - 1]) {
                return false;
            }
            self.best.pop();
        }
        self.best.push(entry);
        let mut at = self.best.len() - 1;
        while at > 0 && before(entry, self.best[at - 1]) {
            self.best[at] = self.best[at - 1];
            at -= 1;
        }
        debug_assert!(at == 0 || self.best[at - 1] != entry, "row {row} offered twice");
        self.best[at] = entry;
        true
    }

    /// Writes the set into one row of the answer: distances (square roots)
    /// and rows, nearest first.
    pub fn write(&self, distances: &mut [f64], indices: &mut [i64]) {
        assert!(self.is_full(), "a search ended with fewer than k neighbours");
        for ((&(d2, row), distance), index) in self.best.iter().zip(distances).zip(indices) {
            *distance = d2.sqrt();
            *index = i64::from(row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KnnSet;

    #[test]
    fn keeps_the_k_smallest_with_ties_by_row() {
        let mut set = KnnSet::new(3);
        assert_eq!(set.kth(), f64::INFINITY);
        for (d2, row) in [(5.0, 9), (1.0, 4), (5.0, 2), (7.0, 1), (1.0, 8)] {
            set.insert(d2, row);
        }
        assert!(set.is_full());
        assert_eq!(set.kth(), 5.0);
        assert!(!set.insert(5.0, 3), "a tie with a larger row stays out");
        assert!(set.insert(5.0, 1), "a tie with a smaller row enters");
        let (mut distances, mut indices) = ([0.0; 3], [0i64; 3]);
        set.write(&mut distances, &mut indices);
        assert_eq!(indices, [4, 8, 1]);
        assert_eq!(distances, [1.0, 1.0, 5f64.sqrt()]);
    }
}
