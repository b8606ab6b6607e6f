#!/usr/bin/env bash
# The real-GPU check: GpuAcc on a machine with a GPU (and CpuAcc on that machine's CPU, whose
# AVX-512 paths this machine may lack). Not part of CI; what it prints is what docs/gpu.md cites.
#
#   BP=target/release/backplane OUT=/tmp/gpu_device scripts/bench/gpu_device.sh
#
# Optional: TESTS_DIR (prebuilt test executables to run here, e.g. CpuAcc's against-CpuRef
# tests built with `cargo test --release --no-run`), NODE_TESTS (the ONNX node tests' folder),
# MODELS (where to write the generated models; needs torch, torchvision, transformers, onnx and
# onnxruntime in PY's environment), ONLY (the real architectures to export and time),
# ITER (timed executions per round, default 20), TILES (the layouts the A/B times, default
# "auto 16 64 splitk direct"), PROFILE_TILES (the layouts profiled per layer, default auto),
# CPU=0 (skip the CpuAcc steps at the end), PROFILES (where the profiles go, default OUT), THREADS (CpuAcc and ORT threads, default
# every core), TILES_ITER (timed executions per tiles layout and round, default 10),
# BUDGET (seconds for the whole script, default 900), KIT_GPU_S (the GpuAcc kit's limit, default 120),
# EXPORT_S (the model export's limit, default 300), SUBMITS (the submit_every values the submit
# A/B times, default "0 8 32"), STEPS (which steps run, in this order: default
# "tiles submit f16 strict kit compare profiles cpu", where cpu means cpukit scaling cpucompare;
# models are always made). BP_OLD (an earlier build: the scaling step alternates it with BP),
# SCALING_MODELS, SCALING_ITER. Step int8 (not in the default STEPS): INT8_TFLITE, INT8_ORT,
# INT8_THREADS (default 1,4), INT8_ROUNDS (3), INT8_ITER (20), INT8_S (its limit, 240 s).
# F16_ITER (timed executions per f16/f32 model and round, default 20; the f16 models come from
# scripts/bench/to_f16.py; GpuAcc's f16 kernel tests, backends/gpu/tests/half.rs, belong in
# TESTS_DIR, run with BACKPLANE_REQUIRE_GPU_F16=1 so a missing SHADER_F16 fails). Every step has a time limit
# within what is left of BUDGET, so one slow step cannot eat the rest; the steps run in the
# order of what matters most when device time is short.
set -u
BP=${BP:-target/release/backplane}
OUT=${OUT:-/tmp/gpu_device}
MODELS=${MODELS:-$OUT/models}
PY=${PY:-python3}
ONLY=${ONLY:-resnet50,efficientnet_b0,vit_b_16,squeezenet1_1,shufflenet_v2_x1_0,densenet121,regnet_y_400mf,mobilenet_v3_large,deeplabv3_resnet50,bert_base,distilbert,gpt2}
STEPS=" ${STEPS:-tiles submit f16 strict kit compare profiles cpu} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
ITER=${ITER:-20}
THREADS=${THREADS:-$(nproc)}
mkdir -p "$OUT" "$MODELS/old"
END=$(($(date +%s) + ${BUDGET:-900}))
step() { echo; echo "=== $* ($(date +%T), $((END - $(date +%s))) s left)"; }
lim() {  # lim MAX: MAX seconds, or what is left of BUDGET if less (at least 5)
  local left=$((END - $(date +%s)))
  [ "$left" -lt "$1" ] && set -- "$left"
  [ "$1" -lt 5 ] && set -- 5
  echo "$1"
}

step machine
nproc
grep -m1 'model name' /proc/cpuinfo
echo "AVX-512: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
timeout 60 "$BP" backends 2>&1 | head -40

kit() {  # kit BACKEND FILE [extra args]: the backend test kit, the summary here, all in FILE
  local backend=$1 file=$2
  shift 2
  timeout "$(lim "$KIT_S")" "$BP" backend-test "$backend" ${NODE_TESTS:+--node-tests "$NODE_TESTS"} "$@" >"$file" 2>&1
  echo "exit $?"
  # the summary, and every table row whose "failed" column is not 0
  grep -E "^backend-test|^onnx node tests|seed|[[:space:]][0-9]+[[:space:]]+[0-9]+[[:space:]]+[1-9][0-9]*[[:space:]]+[0-9]+" "$file" | head -60
}
step "models"
timeout "$(lim 60)" "$PY" scripts/bench/make_models.py "$MODELS/old" 2>&1 | tail -3
if [ "$ONLY" != none ]; then  # ONLY=none: no real architectures (steps on the older models only)
  timeout "$(lim "${EXPORT_S:-300}")" "$PY" scripts/bench/make_real_models.py "$MODELS" --only "$ONLY" 2>&1 | grep -E "wrote|FAILED"
fi
# float16 versions of resnet18 and bert_tiny (f32 at their borders, f16 inside) for GpuAcc's
# f16 kernels, timed beside the f32 ones below.
for m in resnet18 bert_tiny; do
  [ -f "$MODELS/old/$m.onnx" ] || continue
  timeout "$(lim 60)" "$PY" scripts/bench/to_f16.py "$MODELS/old/$m.onnx" "$MODELS/old/${m}_f16.onnx" 2>&1 | tail -2
done
for m in "$MODELS"/*.onnx "$MODELS"/old/*.onnx; do
  [ -f "$m" ] || continue
  echo "-- $(basename "$m"): $(timeout "$(lim 30)" "$BP" inspect "$m" --backends GpuAcc,CpuAcc 2>&1 | grep -E "^copies per execution|^backends:" | tr '\n' ' ')"
done

if want tiles; then
step "GpuAcc per tiles layout (tiles=auto|16|64|splitk|direct; alternating rounds, A/B in one run)"
# Each model with each layout forced, round after round, so the layouts share the machine's
# state; the chooser (tiles=auto) should be at least as fast as the best forced layout.
TILES_ITER=${TILES_ITER:-10}
for m in resnet50 bert_base vit_b_16 old/resnet18 old/bert_tiny; do
  [ -f "$MODELS/$m.onnx" ] || continue
  for round in 1 2; do
    for t in ${TILES:-auto 16 64 splitk direct}; do
      echo "-- $m round $round tiles=$t: $(timeout "$(lim 40)" "$BP" bench "$MODELS/$m.onnx" \
        --backends GpuAcc,CpuAcc --backend-option "GpuAcc:tiles=$t" --generate random \
        --iterations "$TILES_ITER" --warmup 3 --quiet 2>&1 | grep -E "^latency")"
    done
  done
done

fi

if want submit; then
step "GpuAcc submits every N layers (submit_every=${SUBMITS:-0 8 32}; alternating rounds, A/B in one run)"
# 0: one submit per run of GPU layers (the GPU waits for the whole recording); N: the GPU
# starts after the first N layers while the host records the rest.
for m in old/mobilenet_v2 efficientnet_b0 old/bert_tiny old/digits resnet50 bert_base; do
  [ -f "$MODELS/$m.onnx" ] || continue
  for round in 1 2; do
    for n in ${SUBMITS:-0 8 32}; do
      echo "-- $m round $round submit_every=$n: $(timeout "$(lim 40)" "$BP" bench "$MODELS/$m.onnx" \
        --backends GpuAcc,CpuAcc --backend-option "GpuAcc:submit_every=$n" --generate random \
        --iterations "${TILES_ITER:-10}" --warmup 3 --quiet 2>&1 | grep -E "^latency")"
    done
  done
done
fi

if want f16; then
step "GpuAcc f16 against f32 (resnet18, bert_tiny; alternating rounds, A/B in one run)"
# Correctness first: the f16 model on GpuAcc against the f32 one on CpuAcc, on the same
# generated input; --rtol 0 --atol 0 makes the comparison print its worst difference.
for m in resnet18 bert_tiny; do
  [ -f "$MODELS/old/${m}_f16.onnx" ] || continue
  rm -rf "$OUT/want_$m"
  timeout "$(lim 30)" "$BP" run "$MODELS/old/$m.onnx" --backends CpuAcc --generate random \
    --output-dir "$OUT/want_$m" >/dev/null 2>&1
  echo "-- $m f16 vs f32: $(timeout "$(lim 30)" "$BP" run "$MODELS/old/${m}_f16.onnx" \
    --backends GpuAcc,CpuAcc --generate random --compare "$OUT/want_$m" --rtol 0 --atol 0 2>&1 |
    grep -E "worst|every output" | head -2 | tr '\n' ' ')"
done
F16_ITER=${F16_ITER:-20}
for round in 1 2; do
  for m in resnet18 resnet18_f16 bert_tiny bert_tiny_f16; do
    [ -f "$MODELS/old/$m.onnx" ] || continue
    echo "-- $m round $round: $(timeout "$(lim 40)" "$BP" bench "$MODELS/old/$m.onnx" \
      --backends GpuAcc,CpuAcc --generate random --iterations "$F16_ITER" --warmup 3 --quiet 2>&1 |
      grep -E "^latency")"
  done
done
fi

if want int8; then
step "int8 against f32, LiteRT and ONNX Runtime on this CPU; CpuAcc's best tier against isa=avx2"
# INT8_TFLITE / INT8_ORT: folders for bench_int8_aims.py's --tflite-dir / --ort-dir (space-separated).
# The same binary runs as "best" (the CPU's widest int8 and f32 kernels) and as "avx2"
# (`--backend-option CpuAcc:isa=avx2`), in the same shuffled rounds.
printf '#!/bin/sh\nexec "%s" "$@" --backend-option CpuAcc:isa=avx2\n' "$(realpath "$BP")" >"$OUT/bp_avx2"
chmod +x "$OUT/bp_avx2"
args=()
for d in ${INT8_TFLITE:-}; do args+=(--tflite-dir "$d"); done
for d in ${INT8_ORT:-}; do args+=(--ort-dir "$d"); done
TFLITE_PY=${TFLITE_PY:-$PY} BENCH_PY=${BENCH_PY:-$PY} timeout "$(lim "${INT8_S:-240}")" "$PY" scripts/bench_int8_aims.py \
  --binary "best=$BP" --binary "avx2=$OUT/bp_avx2" "${args[@]}" --threads "${INT8_THREADS:-1,4}" \
  --rounds "${INT8_ROUNDS:-3}" --iterations "${INT8_ITER:-20}" 2>&1 | tail -60
rm -f "$OUT/bp_avx2"
fi

if want strict; then
step "GpuAcc,CpuAcc against CpuRef at rtol 1e-4 / atol 1e-5 (the benchmark models, one generated input)"
for m in old/mobilenet_v2 old/resnet18 old/bert_tiny; do
  [ -f "$MODELS/$m.onnx" ] || continue
  want_dir="$OUT/cpuref_$(basename "$m")"
  rm -rf "$want_dir"
  timeout "$(lim 60)" "$BP" run "$MODELS/$m.onnx" --backends CpuRef --generate random --output-dir "$want_dir" >/dev/null 2>&1
  echo "-- $m: $(timeout "$(lim 30)" "$BP" run "$MODELS/$m.onnx" --backends GpuAcc,CpuAcc --generate random \
    --compare "$want_dir" --rtol 1e-4 --atol 1e-5 2>&1 | grep -E "^backends:|every output|differ|worst" | head -3 | tr '\n' ' ')"
  rm -rf "$want_dir"
done
fi

if want kit; then
step "backend-test GpuAcc"
KIT_S=${KIT_GPU_S:-120} kit GpuAcc "$OUT/kit_gpuacc.txt"
fi

if want compare; then
step "GpuAcc,CpuAcc and CpuAcc,CpuRef (bp2) against ONNX Runtime (CPU, $THREADS threads), one run"
timeout "$(lim "${COMPARE_S:-400}")" "$PY" scripts/bench/compare.py --suite all --models "$MODELS" --old-models "$MODELS/old" --backplane "$BP" \
  --backends GpuAcc,CpuAcc --also-backends CpuAcc,CpuRef --threads "$THREADS" --iterations "$ITER" --rounds 2 \
  --markdown "$OUT/gpu_vs_ort.md" --json "$OUT/gpu_vs_ort.json" 2>&1 | grep -vE "round [0-9]/" | tail -40
fi

if want profiles; then
step "GpuAcc per-layer profiles (tiles=${PROFILE_TILES:-auto})"
for m in resnet50 bert_base vit_b_16; do
  [ -f "$MODELS/$m.onnx" ] || continue
  for t in ${PROFILE_TILES:-auto}; do
    echo "-- $m tiles=$t"
    timeout "$(lim 30)" "$BP" bench "$MODELS/$m.onnx" --backends GpuAcc,CpuAcc --generate random \
      --iterations 5 --warmup 2 --quiet --backend-option "GpuAcc:tiles=$t" \
      --profile "${PROFILES:-$OUT}/profile_${m}_$t.json" 2>&1 | grep -vE "^ +[0-9.]+%.*\((Fused|Conv|Gemm|MatMul)" |
      cut -c1-300 | tail -14
  done
done
fi
if [ -n "${TESTS_DIR:-}" ]; then
  step "prebuilt tests on this CPU ($TESTS_DIR)"
  for t in "$TESTS_DIR"/*; do
    echo "-- $(basename "$t")"
    BACKPLANE_REQUIRE_GPU_ADAPTER=1 BACKPLANE_REQUIRE_GPU_F16=1 \
      timeout "$(lim 30)" "$t" --test-threads "$THREADS" 2>&1 | grep -E "^test result|FAILED|panicked|failures:" | head -20
  done
fi

if [ "${CPU:-1}" = 0 ]; then step "done (CPU=0: the CpuAcc steps skipped)"; exit 0; fi
want cpu && STEPS="$STEPS cpukit scaling cpucompare "

if want cpukit; then
step "backend-test CpuAcc"
KIT_S=90 kit CpuAcc "$OUT/kit_cpuacc.txt"
fi

if want scaling; then
step "CpuAcc thread scaling (${SCALING_MODELS:-old/resnet18 resnet50 densenet121}; ${BP_OLD:+against BP_OLD, }alternating rounds)"
# Each model at 1, 2, 4, 8 and every core; with BP_OLD (an earlier build) the two binaries
# alternate, so the work split's change is measured on the same host in the same minutes.
for m in ${SCALING_MODELS:-old/resnet18 resnet50 densenet121}; do
  [ -f "$MODELS/$m.onnx" ] || continue
  for t in 1 2 4 8 "$THREADS"; do
    for b in "$BP" ${BP_OLD:-}; do
      echo "-- $m threads=$t $([ "$b" = "$BP" ] && echo new || echo old): $(timeout "$(lim 30)" "$b" bench \
        "$MODELS/$m.onnx" --generate random --iterations "${SCALING_ITER:-20}" --warmup 3 --quiet \
        --backend-option "CpuAcc:threads=$t" 2>&1 | grep -E "^latency" | sed 's/latency over [0-9]* executions\?: //')"
    done
  done
done
fi

if ! want cpucompare; then step done; exit 0; fi
step "CpuAcc,CpuRef against ONNX Runtime (CPU, 1 and $THREADS threads)"
timeout "$(lim 400)" "$PY" scripts/bench/compare.py --suite all --models "$MODELS" --old-models "$MODELS/old" --backplane "$BP" \
  --threads "1,$THREADS" --iterations "$ITER" --rounds 2 \
  --markdown "$OUT/cpu_vs_ort.md" 2>&1 | grep -vE "round [0-9]/" | tail -40

step done
