//! Long series cut for drawing: the smallest and the largest value of each bucket kept, so
//! a spike (or a dip) stays in sight.

/// At most `max` of `points`, in order: when there are more, they are cut into `max / 2`
/// buckets of consecutive points and each bucket keeps its smallest and largest y (once
/// when they are the same point), so a spike stays in the plot.
pub fn downsample(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    keep(points.len(), max, |i| points[i].1)
        .into_iter()
        .map(|i| points[i])
        .collect()
}

/// The indices [`downsample`] keeps of `n` points whose y is `y(i)`, in order.
pub fn keep(n: usize, max: usize, y: impl Fn(usize) -> f64) -> Vec<usize> {
    let max = max.max(2);
    if n <= max {
        return (0..n).collect();
    }
    let buckets = max / 2;
    let mut out = Vec::with_capacity(buckets * 2);
    for b in 0..buckets {
        let (start, end) = (b * n / buckets, (b + 1) * n / buckets);
        let (mut lo, mut hi) = (start, start);
        for i in start..end {
            if y(i) < y(lo) {
                lo = i;
            }
            if y(i) > y(hi) {
                hi = i;
            }
        }
        out.push(lo.min(hi));
        if lo != hi {
            out.push(lo.max(hi));
        }
    }
    out
}
