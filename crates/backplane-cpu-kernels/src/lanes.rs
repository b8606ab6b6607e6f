//! Masks of the first lanes of 16-lane vectors (AVX-512's `__mmask16` is a `u16`), for
//! loads and stores that must not touch values past a row's end.

/// The mask of the first `n` lanes of one vector (all 16 when `n` ≥ 16).
#[inline(always)]
pub(crate) const fn first16(n: usize) -> u16 {
    if n >= 16 {
        0xffff
    } else {
        ((1u32 << n) - 1) as u16
    }
}

/// The masks of `C` consecutive vectors covering the first `n` values.
#[inline(always)]
pub(crate) fn first16_each<const C: usize>(n: usize) -> [u16; C] {
    let mut masks = [0u16; C];
    for (j, m) in masks.iter_mut().enumerate() {
        *m = first16(n.saturating_sub(16 * j));
    }
    masks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_cover_the_first_values() {
        assert_eq!(first16(0), 0);
        assert_eq!(first16(1), 1);
        assert_eq!(first16(15), 0x7fff);
        assert_eq!(first16(16), 0xffff);
        assert_eq!(first16(40), 0xffff);
        assert_eq!(first16_each::<2>(17), [0xffff, 1]);
        assert_eq!(first16_each::<2>(5), [0x1f, 0]);
        assert_eq!(first16_each::<3>(32), [0xffff, 0xffff, 0]);
    }
}
