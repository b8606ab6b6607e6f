//! `backplane-fuzz [import|pipeline|budget|all] [--seconds N] [--seed S]`: fuzz for a bounded time
//! and print the totals; exits 1 if any input panicked.

use backplane_fuzz::{fuzz, load_corpus, Target};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut targets = vec![Target::Import, Target::Pipeline, Target::Budget];
    let mut seconds = 10.0f64;
    let mut seed = 1u64;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "import" => targets = vec![Target::Import],
            "pipeline" => targets = vec![Target::Pipeline],
            "budget" => targets = vec![Target::Budget],
            "all" => {}
            "--seconds" => {
                i += 1;
                seconds = args.get(i).and_then(|s| s.parse().ok()).unwrap_or(seconds);
            }
            "--seed" => {
                i += 1;
                seed = args.get(i).and_then(|s| s.parse().ok()).unwrap_or(seed);
            }
            other => {
                eprintln!("usage: backplane-fuzz [import|pipeline|budget|all] [--seconds N] [--seed S] (unknown '{other}')");
                return ExitCode::from(2);
            }
        }
        i += 1;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let corpus = load_corpus(&[repo.join("models"), repo.join("testdata")]);
    println!("corpus: {} model files", corpus.len());
    let mut failed = false;
    for target in targets {
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let s = fuzz(target, &corpus, seed, u64::MAX, deadline);
        println!(
            "{target:?}: {} executions, {} ok, {} rejected with typed errors, {} panics",
            s.executions,
            s.ok,
            s.rejected,
            s.panics.len()
        );
        for (n, msg) in s.panics.iter().take(10) {
            println!("  panic at execution {n}: {msg}");
        }
        failed |= !s.panics.is_empty();
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
