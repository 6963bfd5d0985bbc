/*
 * pto_gemm.h - the matrix multiplies generated kernels call for pl.matmul.
 *
 *   pto_gemm_f32   C[M x N] (+)= A[M x K] @ B[K x N] in float: a
 *                  register-blocked micro-kernel (PTO_MR rows x PTO_NR
 *                  columns of C in vector registers) over panels of B packed
 *                  PTO_KC rows at a time, plus a plain loop for the edges
 *   pto_gemm_f64   the same in double, in i-k-j order (the j loop vectorises)
 *   pto_gemm_mx_f32  pl.matmul_mx: A and B (FP8 values held as float) each
 *                  times its block scale (SA[M x K/32], SB[K/32 x N], the
 *                  scales' values), exact, then pto_gemm_f32
 *
 * All matrices are row-major with leading dimensions lda/ldb/ldc (elements,
 * not bytes).  accumulate != 0 adds to C; 0 overwrites it.  The code
 * generator includes this header only into kernels that multiply.
 *
 * Kernels are built with -ffp-contract=off, so element-wise code rounds as
 * numpy does; pto_gemm_f32 alone turns contraction to FMA back on, because a
 * GEMM is compared to BLAS, which fuses too.
 */
#ifndef PTO_GEMM_H
#define PTO_GEMM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __AVX512F__
#define PTO_MR 8
#else
#define PTO_MR 4
#endif
#define PTO_NR 32
#define PTO_KC 256
typedef float pto_v16f __attribute__((vector_size(64)));

/* C[MR x NR] (+)= A[MR x kc] @ Bp[kc x NR]; Bp is packed (row k at Bp + k*NR). */
__attribute__((optimize("fp-contract=fast")))
static inline void pto_gemm_f32_micro(int64_t kc, const float *restrict A, int64_t lda,
                                      const float *restrict Bp, float *restrict C, int64_t ldc, int acc)
{
    pto_v16f c0[PTO_MR], c1[PTO_MR];
    for (int r = 0; r < PTO_MR; r++) {
        if (acc) {
            memcpy(&c0[r], C + r * ldc, 64);
            memcpy(&c1[r], C + r * ldc + 16, 64);
        } else {
            c0[r] = (pto_v16f){0};
            c1[r] = (pto_v16f){0};
        }
    }
    for (int64_t k = 0; k < kc; k++) {
        pto_v16f b0, b1;
        memcpy(&b0, Bp + k * PTO_NR, 64);
        memcpy(&b1, Bp + k * PTO_NR + 16, 64);
        for (int r = 0; r < PTO_MR; r++) {
            float a = A[r * lda + k];
            c0[r] += a * b0;
            c1[r] += a * b1;
        }
    }
    for (int r = 0; r < PTO_MR; r++) {
        memcpy(C + r * ldc, &c0[r], 64);
        memcpy(C + r * ldc + 16, &c1[r], 64);
    }
}

/* C[M x N] (+)= A[M x K] @ B[K x N] in float. */
__attribute__((optimize("fp-contract=fast"), unused))
static void pto_gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    _Alignas(64) float Bp[PTO_KC * PTO_NR];
    int64_t n_full = N - N % PTO_NR, m_full = M - M % PTO_MR;
    for (int64_t j0 = 0; j0 < n_full; j0 += PTO_NR) {
        for (int64_t p0 = 0; p0 < K; p0 += PTO_KC) {
            int64_t kc = K - p0 < PTO_KC ? K - p0 : PTO_KC;
            for (int64_t k = 0; k < kc; k++)
                memcpy(Bp + k * PTO_NR, B + (p0 + k) * ldb + j0, PTO_NR * sizeof(float));
            int acc = accumulate || p0 > 0;
            for (int64_t i0 = 0; i0 < m_full; i0 += PTO_MR)
                pto_gemm_f32_micro(kc, A + i0 * lda + p0, lda, Bp, C + i0 * ldc + j0, ldc, acc);
            for (int64_t i = m_full; i < M; i++) {
                for (int64_t j = 0; j < PTO_NR; j++) {
                    float s = acc ? C[i * ldc + j0 + j] : 0.0f;
                    for (int64_t k = 0; k < kc; k++)
                        s += A[i * lda + p0 + k] * Bp[k * PTO_NR + j];
                    C[i * ldc + j0 + j] = s;
                }
            }
        }
    }
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = n_full; j < N; j++) {
            float s = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += A[i * lda + k] * B[k * ldb + j];
            C[i * ldc + j] = s;
        }
    }
}

/* C[M x N] (+)= A[M x K] @ B[K x N] in double. */
__attribute__((unused))
static void pto_gemm_f64(int64_t M, int64_t N, int64_t K, const double *A, int64_t lda,
                         const double *B, int64_t ldb, double *restrict C, int64_t ldc, int accumulate)
{
    for (int64_t i = 0; i < M; i++) {
        if (!accumulate)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = 0.0;
        for (int64_t k = 0; k < K; k++) {
            double a = A[i * lda + k];
            const double *restrict b = B + k * ldb;
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] += a * b[j];
        }
    }
}

/* C (+)= (A * SA per 32-block of K) @ (B * SB per 32-block of K), in float.  A
 * scale is a power of two and an FP8 value has 4 significant bits, so every
 * scaled element and every product is exact; only the sums round. */
__attribute__((unused))
static void pto_gemm_mx_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *SA,
                            int64_t ldsa, const float *B, int64_t ldb, const float *SB, int64_t ldsb, float *C,
                            int64_t ldc, int accumulate)
{
    float *a = (float *)malloc((size_t)(M * K) * sizeof *a), *b = (float *)malloc((size_t)(K * N) * sizeof *b);
    if (a == NULL || b == NULL)
        abort();
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            a[i * K + k] = A[i * lda + k] * SA[i * ldsa + k / 32];
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++)
            b[k * N + j] = B[k * ldb + j] * SB[(k / 32) * ldsb + j];
    pto_gemm_f32(M, N, K, a, K, b, N, C, ldc, accumulate);
    free(a);
    free(b);
}

#endif /* PTO_GEMM_H */
