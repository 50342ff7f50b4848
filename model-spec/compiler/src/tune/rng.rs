//! The search's random numbers: splitmix64 over a counter, so a run is
//! reproducible from its seed on every platform and with every dependency
//! version (no external RNG whose stream could change under us).

use crate::zoo::splitmix64;

#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// A generator for stream `stream` of this seed (one per task), so that
    /// one task's draws do not shift when another task draws more.
    pub fn fork(seed: u64, stream: u64) -> Rng {
        Rng::new(splitmix64(seed ^ splitmix64(stream)))
    }

    pub fn next_u64(&mut self) -> u64 {
        let out = splitmix64(self.state);
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        out
    }

    /// Uniform in `0..n` (`n > 0`; 0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `[0, 1)`.
    #[cfg(test)]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_in_range() {
        let a: Vec<u64> = (0..4).map(|_| Rng::fork(7, 1).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Rng::fork(7, 1).next_u64(), Rng::fork(7, 2).next_u64());
        let mut r = Rng::new(3);
        let mut seen = [0usize; 5];
        for _ in 0..1000 {
            seen[r.below(5)] += 1;
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert!(seen.iter().all(|&c| c > 150), "{seen:?}");
        assert_eq!(r.below(0), 0);
    }
}
