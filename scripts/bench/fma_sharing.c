/* Do this machine's two vCPUs share one physical core's FMA units right now?
 *
 * Build and run (one process per vCPU at once, then one alone):
 *   gcc -O2 -mavx512f -mfma scripts/bench/fma_sharing.c -o /tmp/fma_sharing
 *   (taskset -c 0 /tmp/fma_sharing > /tmp/a.txt &); taskset -c 1 /tmp/fma_sharing; cat /tmp/a.txt
 *   taskset -c 1 /tmp/fma_sharing
 * Each run times 24 independent chains of 512-bit FMAs (no loads) and prints GFLOP/s. When
 * the two at once each get about half of the one alone, the vCPUs are hyperthreads of one
 * core and compute-bound layers cannot gain from a second thread; when each keeps about
 * the figure alone, they are separate cores. Hosts move vCPUs between these states. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const long steps = 20000000;
    __m512 acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps(i * 0.001f);
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.0001f);
    double t = now();
    for (long n = 0; n < steps; n++) {
#define F(i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
        F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11)
        F(12) F(13) F(14) F(15) F(16) F(17) F(18) F(19) F(20) F(21) F(22) F(23)
        __asm__ volatile("" : : "v"(acc[0]), "v"(acc[12]));
    }
    t = now() - t;
    float sum = 0;
    for (int i = 0; i < 24; i++) sum += _mm512_reduce_add_ps(acc[i]);
    printf("512-bit FMA: %.1f GFLOP/s (checksum %g)\n", steps * 24.0 * 32.0 / t / 1e9, sum);
    return 0;
}
