//! A small seeded generator for property tests (xorshift; no dependency), and the seed
//! every failure names: `BACKSTOP_FUZZ_SEED` replays one, else the clock picks it.
//!
//! ```
//! use backstop_testkit::gen::Gen;
//! let mut g = Gen::new(7);
//! let pick = *g.pick(&[1, 2, 3]);
//! assert!((1..=3).contains(&pick));
//! assert!(g.below(10) < 10);
//! ```

/// The seed of this run: `BACKSTOP_FUZZ_SEED`, else one from the clock.
pub fn seed() -> u64 {
    std::env::var("BACKSTOP_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

/// A deterministic generator: the same seed gives the same sequence.
pub struct Gen(u64);

impl Gen {
    /// A generator from `seed` (any value; zero is moved off the fixed point).
    pub fn new(seed: u64) -> Gen {
        Gen(seed | 1)
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.bits() % n.max(1)
    }

    /// One of `from` (which must not be empty).
    pub fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len() as u64) as usize]
    }

    /// True `pct` times in a hundred.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}
