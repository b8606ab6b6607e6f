//! What a run of the kit found: per suite and op, how many cases the backend claimed, passed
//! and failed (with the worst error and a case that reproduces it), and how many it refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The backend ran (part of) the case and the outputs matched.
    Passed,
    /// The backend ran (part of) the case and something went wrong.
    Failed {
        /// What went wrong.
        why: String,
        /// The largest |got - expected| over the outputs, when values were compared.
        worst: Option<f64>,
    },
    /// The backend declined the case (with this reason); nothing of it ran there.
    Refused(String),
    /// The case could not be set up (test data the kit cannot read): not counted.
    Skipped(String),
}

/// The tally for one op of one suite.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpTally {
    /// Cases the backend took on (passed + failed).
    pub claimed: usize,
    /// Cases that matched.
    pub passed: usize,
    /// Cases that did not.
    pub failed: usize,
    /// Cases the backend declined.
    pub refused: usize,
    /// The largest error among the failed cases.
    pub worst: Option<f64>,
    /// The first failing case and why (its name reproduces it: a seed for random cases).
    pub first_failure: Option<(String, String)>,
    /// One refusal reason, as an example.
    pub refusal: Option<String>,
}

/// Everything one run found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The backend under test.
    pub backend: String,
    /// (suite, op) → tally.
    pub ops: BTreeMap<(String, String), OpTally>,
    /// Every failure: (suite, case, why).
    pub failures: Vec<(String, String, String)>,
    /// Suites that did not run, with the reason (e.g. no ONNX node tests found).
    pub skipped_suites: Vec<(String, String)>,
}

impl Report {
    /// A report for `backend` with nothing in it yet.
    pub fn new(backend: &str) -> Report {
        Report {
            backend: backend.to_string(),
            ..Report::default()
        }
    }

    /// Record the outcome of case `case` of `op` in `suite`.
    pub fn record(&mut self, suite: &str, op: &str, case: &str, outcome: Outcome) {
        if matches!(outcome, Outcome::Skipped(_)) {
            return;
        }
        let tally = self
            .ops
            .entry((suite.to_string(), op.to_string()))
            .or_default();
        match outcome {
            Outcome::Passed => {
                tally.claimed += 1;
                tally.passed += 1;
            }
            Outcome::Failed { why, worst } => {
                tally.claimed += 1;
                tally.failed += 1;
                if let Some(w) = worst {
                    if tally.worst.is_none_or(|t| w > t || w.is_nan()) {
                        tally.worst = Some(w);
                    }
                }
                if tally.first_failure.is_none() {
                    tally.first_failure = Some((case.to_string(), why.clone()));
                }
                self.failures
                    .push((suite.to_string(), case.to_string(), why));
            }
            Outcome::Refused(reason) => {
                tally.refused += 1;
                if tally.refusal.is_none() {
                    tally.refusal = Some(reason);
                }
            }
            Outcome::Skipped(_) => {}
        }
    }

    /// Cases passed and failed over every suite.
    pub fn totals(&self) -> (usize, usize) {
        self.ops
            .values()
            .fold((0, 0), |(p, f), t| (p + t.passed, f + t.failed))
    }

    /// True when nothing failed.
    pub fn ok(&self) -> bool {
        self.totals().1 == 0
    }

    /// A table per suite (op, claimed, passed, failed with the worst error, refused), the
    /// failures, and the summary line `N passed, M failed`.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let mut suite = "";
        for ((su, op), t) in &self.ops {
            if su != suite {
                suite = su;
                let _ = writeln!(
                    s,
                    "\n{su}\n  {:<28} {:>7} {:>6} {:>6} {:>7}  worst error / refusal",
                    "op", "claimed", "passed", "failed", "refused"
                );
            }
            let note = match (&t.worst, &t.refusal) {
                (Some(w), _) => format!("{w:.3e}"),
                (None, Some(r)) if t.claimed == 0 => first_line(r, 60),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "  {op:<28} {:>7} {:>6} {:>6} {:>7}  {note}",
                t.claimed, t.passed, t.failed, t.refused
            );
        }
        for (su, why) in &self.skipped_suites {
            let _ = writeln!(s, "\n{su}: not run: {why}");
        }
        if !self.failures.is_empty() {
            let _ = writeln!(s, "\nfailures:");
            for (su, case, why) in &self.failures {
                let _ = writeln!(s, "  {su} {case}: {}", first_line(why, 300));
            }
        }
        let (p, f) = self.totals();
        let _ = writeln!(s, "\nbackend-test {}: {p} passed, {f} failed", self.backend);
        s
    }

    /// The report as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let (p, f) = self.totals();
        serde_json::json!({
            "backend": self.backend,
            "passed": p,
            "failed": f,
            "ops": self.ops.iter().map(|((su, op), t)| serde_json::json!({
                "suite": su,
                "op": op,
                "claimed": t.claimed,
                "passed": t.passed,
                "failed": t.failed,
                "refused": t.refused,
                "worst_error": t.worst,
                "first_failure": t.first_failure.as_ref().map(|(c, w)| serde_json::json!({"case": c, "why": w})),
                "refusal": t.refusal,
            })).collect::<Vec<_>>(),
            "failures": self.failures.iter().map(|(su, c, w)| serde_json::json!({"suite": su, "case": c, "why": w})).collect::<Vec<_>>(),
            "skipped_suites": self.skipped_suites.iter().map(|(su, w)| serde_json::json!({"suite": su, "why": w})).collect::<Vec<_>>(),
        })
    }
}

/// The first line of `s`, cut to `max` characters.
fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > max {
        format!("{}...", line.chars().take(max).collect::<String>())
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_count_claims_failures_and_refusals() {
        let mut r = Report::new("X");
        r.record("s", "Add", "a", Outcome::Passed);
        r.record(
            "s",
            "Add",
            "b",
            Outcome::Failed {
                why: "off".into(),
                worst: Some(0.5),
            },
        );
        r.record(
            "s",
            "Add",
            "c",
            Outcome::Failed {
                why: "more".into(),
                worst: Some(2.0),
            },
        );
        r.record("s", "Mul", "d", Outcome::Refused("no Mul".into()));
        r.record("s", "Mul", "e", Outcome::Skipped("bad data".into()));
        let add = &r.ops[&("s".to_string(), "Add".to_string())];
        assert_eq!((add.claimed, add.passed, add.failed), (3, 1, 2));
        assert_eq!(add.worst, Some(2.0));
        assert_eq!(add.first_failure.as_ref().map(|f| f.0.as_str()), Some("b"));
        let mul = &r.ops[&("s".to_string(), "Mul".to_string())];
        assert_eq!((mul.claimed, mul.refused), (0, 1));
        assert_eq!(r.totals(), (1, 2));
        assert!(!r.ok());
        let text = r.to_text();
        assert!(
            text.ends_with("backend-test X: 1 passed, 2 failed\n"),
            "{text}"
        );
        assert!(text.contains("no Mul"), "{text}");
        assert_eq!(r.to_json()["failed"], 2);
    }
}
