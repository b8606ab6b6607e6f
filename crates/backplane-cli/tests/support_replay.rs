//! `bench --input-shapes` reports the support queries its plans asked the backends and those
//! answered from a kept answer: with the default backends (CpuAcc, CpuRef) a second shape of
//! BERT-tiny replays the answers that hold at every shape.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{backplane, text};

/// The counts of the `support queries:` line: asked, replayed, kept.
fn support_counts(out: &str) -> (u64, u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("support queries: "))
        .unwrap_or_else(|| panic!("no support queries line: {out}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 3, "{line}");
    (numbers[0], numbers[1], numbers[2])
}

fn bench(shapes: &[&str]) -> (u64, u64, u64) {
    let mut args = vec!["bench", "testdata/dynamic/bert_tiny.onnx"];
    for s in shapes {
        args.extend(["--input-shapes", s]);
    }
    args.extend(["--warmup", "0", "--iterations", "1", "--quiet"]);
    let o = backplane(&args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    support_counts(&out)
}

#[test]
fn bench_reports_support_answers_replayed_across_shapes() {
    let (asked_one, replayed_one, kept) = bench(&["input_ids=1x7"]);
    assert!(asked_one > 0 && kept > 0, "{asked_one} asked, {kept} kept");
    assert_eq!(replayed_one, 0, "one plan has nothing to replay");
    let (asked_three, replayed_three, kept_three) =
        bench(&["input_ids=1x7", "input_ids=1x16", "input_ids=1x33"]);
    assert_eq!(kept_three, kept, "the same layers' answers are kept");
    // The two later plans replay every kept answer and ask only the per-shape ones.
    assert!(
        replayed_three >= 2 * kept,
        "{replayed_three} replayed, {kept} kept"
    );
    assert!(
        asked_three < 3 * asked_one,
        "{asked_three} asked for three plans, {asked_one} for one"
    );
}
