//! A 256-entry byte table applied to a run of bytes, `y[i] = table[x[i]]`: the quantized
//! layers' elementwise functions (an int8 sigmoid, SiLU, hard-swish) and per-constant tables.
//!
//! With AVX-512 VBMI (the AVX-512 tier on a CPU that has it) sixty-four bytes take four
//! instructions: two `vpermi2b` look each byte up in the table's lower and upper halves
//! (index bits 0-6, each half two 64-byte registers), and the index's top bit picks between
//! them (`vpmovb2m`, a masked blend). Elsewhere a plain loop.

/// `y[i] = table[x[i]]` for `i < min(x.len(), y.len())`.
pub fn apply(table: &[u8; 256], x: &[u8], y: &mut [u8]) {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &mut y[..n]);
    #[cfg(target_arch = "x86_64")]
    if crate::isa::kernels().avx512vbmi {
        // SAFETY: AVX-512F, BW and VBMI are present (the tier says so); `x` and `y` hold `n`
        // bytes each.
        unsafe { apply_vbmi(table, x.as_ptr(), y.as_mut_ptr(), n) };
        return;
    }
    apply_portable(table, x, y);
}

/// The plain loop (other tiers, and the tests' reference).
pub fn apply_portable(table: &[u8; 256], x: &[u8], y: &mut [u8]) {
    for (o, &b) in y.iter_mut().zip(x) {
        *o = table[usize::from(b)];
    }
}

/// Safety: AVX-512F, BW and VBMI present; `x` readable and `y` writable for `n` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn apply_vbmi(table: &[u8; 256], x: *const u8, y: *mut u8, n: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the table holds 256 bytes: four 64-byte vectors.
    let [t0, t1, t2, t3] =
        std::array::from_fn(|q| unsafe { _mm512_loadu_si512(table.as_ptr().add(64 * q).cast()) });
    let look = |idx: __m512i| {
        let lo = _mm512_permutex2var_epi8(t0, idx, t1);
        let hi = _mm512_permutex2var_epi8(t2, idx, t3);
        _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi)
    };
    let mut i = 0;
    while i + 64 <= n {
        // SAFETY: bytes i .. i + 64 lie within the `n` of `x` and `y`.
        unsafe {
            let v = look(_mm512_loadu_si512(x.add(i).cast()));
            _mm512_storeu_si512(y.add(i).cast(), v);
        }
        i += 64;
    }
    if i < n {
        let m: __mmask64 = (1u64 << (n - i)) - 1;
        // SAFETY: only the `n − i` bytes past `i` are read and written (the mask).
        unsafe {
            let v = look(_mm512_maskz_loadu_epi8(m, x.add(i).cast()));
            _mm512_mask_storeu_epi8(y.add(i).cast(), m, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_apply_like_the_plain_loop() {
        let mut s = 12345u32;
        let mut next = || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 24) as u8
        };
        let table: [u8; 256] = std::array::from_fn(|_| next());
        for n in [0usize, 1, 2, 63, 64, 65, 127, 128, 1000, 4099] {
            let x: Vec<u8> = (0..n)
                .map(|i| {
                    if i % 7 == 0 {
                        255 - (i % 3) as u8
                    } else {
                        next()
                    }
                })
                .collect();
            let mut want = vec![0u8; n];
            apply_portable(&table, &x, &mut want);
            let mut got = vec![0x5au8; n + 3];
            apply(&table, &x, &mut got[..n]);
            assert_eq!(got[..n], want, "length {n}");
            assert_eq!(got[n..], [0x5a; 3], "wrote past the run");
        }
        // Every byte value once.
        let x: Vec<u8> = (0..=255).collect();
        let mut got = vec![0u8; 256];
        apply(&table, &x, &mut got);
        assert_eq!(got[..], table[..]);
        eprintln!("byte tables: VBMI {}", crate::isa::kernels().avx512vbmi);
    }
}
