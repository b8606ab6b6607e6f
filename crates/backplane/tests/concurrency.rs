//! One runtime shared by many threads: concurrent executions of the same network give the
//! same results as sequential ones, while other networks are loaded and unloaded beside them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::{npy, BackendId, ImportOptions, OptimizerOptions, Runtime, Tensor};
use std::sync::Arc;
use support::repo;

fn load(rt: &Runtime, model: &str, dims: &[(&str, usize)]) -> backplane::NetworkId {
    let mut options = ImportOptions::default();
    for (k, v) in dims {
        options.dim_values.insert((*k).into(), *v);
    }
    let network = backplane::load_onnx(&repo().join(model), &options).unwrap();
    let opt = rt
        .optimize(
            &network,
            &OptimizerOptions::new(vec![BackendId::new("CpuRef").unwrap()]),
        )
        .unwrap();
    rt.load_network(opt).unwrap()
}

#[test]
fn eight_threads_two_networks_and_a_load_unload_loop() {
    let rt = Arc::new(backplane::RuntimeBuilder::new().build().unwrap());
    let digits = load(&rt, "models/digits/model.onnx", &[("batch", 1)]);
    let convnet = load(&rt, "testdata/e2e/convnet.onnx", &[]);
    let samples: Vec<Tensor> = (0..5)
        .map(|k| {
            npy::read_file(&repo().join(format!("models/digits/samples/digit_{k}.npy"))).unwrap()
        })
        .collect();
    let x = npy::read_file(&repo().join("testdata/e2e/input_x.npy")).unwrap();
    // Sequential results first: the reference every concurrent run must equal bit for bit.
    let expected_digits: Vec<Tensor> = samples
        .iter()
        .map(|s| rt.execute(digits, &[("input", s)]).unwrap().remove(0).1)
        .collect();
    let expected_convnet = rt.execute(convnet, &[("x", &x)]).unwrap();

    let samples = Arc::new(samples);
    let expected_digits = Arc::new(expected_digits);
    let expected_convnet = Arc::new(expected_convnet);
    let x = Arc::new(x);
    let mut workers = Vec::new();
    for t in 0..8 {
        let (rt, samples, ed, ec, x) = (
            rt.clone(),
            samples.clone(),
            expected_digits.clone(),
            expected_convnet.clone(),
            x.clone(),
        );
        workers.push(std::thread::spawn(move || {
            for i in 0..200 {
                if (t + i) % 4 == 0 {
                    let out = rt.execute(convnet, &[("x", &x)]).unwrap();
                    assert_eq!(out, *ec, "thread {t} iteration {i}: convnet differs");
                } else {
                    let k = (t * 7 + i) % samples.len();
                    let out = rt.execute(digits, &[("input", &samples[k])]).unwrap();
                    assert_eq!(out[0].1, ed[k], "thread {t} iteration {i}: digits differs");
                }
            }
        }));
    }
    // Beside them, load and unload a third network over and over.
    let churn = {
        let rt = rt.clone();
        let sample = samples[0].clone();
        std::thread::spawn(move || {
            for _ in 0..20 {
                let id = load(&rt, "models/digits/model.onnx", &[("batch", 1)]);
                rt.execute(id, &[("input", &sample)]).unwrap();
                rt.unload_network(id).unwrap();
            }
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    churn.join().unwrap();
    assert_eq!(rt.loaded_networks(), vec![digits, convnet]);
}

#[test]
fn a_failed_execution_does_not_poison_later_ones() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let digits = load(&rt, "models/digits/model.onnx", &[("batch", 1)]);
    let good = npy::read_file(&repo().join("models/digits/samples/digit_1.npy")).unwrap();
    let before = rt.execute(digits, &[("input", &good)]).unwrap();
    // Non-finite inputs are computed, not rejected: NaN propagates to the output.
    let nan = Tensor::from_vec(vec![1, 1, 8, 8], vec![f32::NAN; 64]).unwrap();
    let out = rt.execute(digits, &[("input", &nan)]).unwrap();
    assert!(out[0]
        .1
        .as_slice::<f32>()
        .unwrap()
        .iter()
        .all(|v| v.is_nan()));
    let inf = Tensor::from_vec(vec![1, 1, 8, 8], vec![f32::INFINITY; 64]).unwrap();
    rt.execute(digits, &[("input", &inf)]).unwrap();
    let bad = Tensor::from_vec(vec![2, 1, 8, 8], vec![0.0f32; 128]).unwrap();
    assert!(rt.execute(digits, &[("input", &bad)]).is_err());
    assert_eq!(rt.execute(digits, &[("input", &good)]).unwrap(), before);
}
