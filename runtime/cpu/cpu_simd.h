/* VP_SIMD: a hot kernel loop compiled twice, for AVX2 with FMA and for the baseline
 * x86-64, the loader picking the version the CPU runs (GCC's target_clones; one plain
 * version elsewhere).
 *
 * Keeps true: both versions give the same bits.  The kernels are built with
 * -ffp-contract=off (ISO C mode's default too), so the FMA version fuses only the
 * fmaf calls the source writes, which are correctly rounded on either; vector lanes
 * compute each element's operations in source order, and the compiler reassociates no
 * sum (a loop that sums keeps its own fixed lanes, as k_train_norm.c's do). */
#ifndef VP_CPU_SIMD_H
#define VP_CPU_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 11 && !defined(__clang__) && defined(__linux__)
/* x86-64-v3: AVX2 and FMA in one version ("avx2,fma" would be two) */
#define VP_SIMD __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VP_SIMD
#endif

#endif
