//! The loop the generated-network sweeps share ([`crate::quant_sweeps`],
//! [`crate::block_sweeps`]): draw `cases` cases of each family from a seed, run each, and
//! record it under a name that says how to draw it again.

use crate::report::{Outcome, Report};
use crate::sweeps::Rng;

/// A generated case: its one-line description for the report.
pub trait Generated {
    /// What the case is (shapes, types, options), shown after its name.
    fn about(&self) -> &str;
}

/// A family's generator: a case from the random stream, or why none fits these draws.
pub type Generator<C> = fn(&mut Rng) -> Result<C, String>;

/// Run `cases` cases of every family of `families` into `report` under `suite`; each case's
/// seed mixes `seed`, the family and the case index with `salt` (so two suites draw different
/// cases from one `--seed`), and a generator's refusal is recorded as skipped.
pub fn run_families<C: Generated>(
    suite: &str,
    families: &[(&str, Generator<C>)],
    salt: u64,
    seed: u64,
    cases: usize,
    report: &mut Report,
    mut run_case: impl FnMut(&C) -> Outcome,
) {
    for (fi, (family, generate)) in families.iter().enumerate() {
        for i in 0..cases {
            let case_seed = seed
                .wrapping_mul(salt)
                .wrapping_add((fi * 100_000 + i) as u64);
            let name = format!("{family} #{i} (--seed {seed}; case seed {case_seed})");
            match generate(&mut Rng::new(case_seed)) {
                Ok(case) => {
                    let name = format!("{name}: {}", case.about());
                    let outcome = run_case(&case);
                    report.record(suite, family, &name, outcome);
                }
                Err(e) => report.record(suite, family, &name, Outcome::Skipped(e)),
            }
        }
    }
}
