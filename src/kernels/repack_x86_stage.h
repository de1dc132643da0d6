/*
 * The staging of interleaved blocks for the batched matmul (prefill), written
 * once for the x86 levels: a group's blocks unpacked to each row's quants, as
 * the batched kernels unpack the same rows in the file's layout, value for
 * value (docs/engine.md §2.5). Part of repack_x86.h, which includes it after
 * the block unpacking it uses (x8_quants, x8k_scales_mins, x86_quants).
 */
#ifndef PKV_KERNEL_REPACK_X86_STAGE_H
#define PKV_KERNEL_REPACK_X86_STAGE_H

/* Blocks b0..b0+nb-1 of group grp as the batched matmul stages them:
 * row r's unsigned quants at u + r * u_stride + 32 (b - b0), its scale at
 * dw[r * dw_stride + b - b0]. The 8 quant vectors of a block are an 8 x 8
 * matrix of 4-byte groups (vector q, lane r); transposed, vector r is row
 * r's 32 quants. */
static inline void x8_stage(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb, uint8_t *u,
                            size_t u_stride, float *dw, size_t dw_stride) {
    const uint64_t bb = pkv_x8_block_bytes(type);
    const int64_t span = pkv_x8_span_blocks(type, grp->nb);
    const uint8_t *blk = NULL;
    int64_t left = 0; /* blocks of the group that lie on from blk, to its span's end */
    for (int64_t b = 0; b < nb; b++, blk += bb, left--) {
        if (left == 0) {
            blk = (const uint8_t *)grp->data + pkv_x8_block_offset(type, grp->nb, grp->n_groups, grp->g, b0 + b);
            left = span - (b0 + b) % span;
        }
        __m256i q[8];
        switch (type) {
        case PKV_TYPE_Q4_0: x8_quants(PKV_TYPE_Q4_0, blk, q); break;
        case PKV_TYPE_Q5_0: x8_quants(PKV_TYPE_Q5_0, blk, q); break;
        default: x8_quants(PKV_TYPE_Q8_0, blk, q); break;
        }
        __m256 r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_castsi256_ps(q[i]);
        transpose8x8_ps(r);
        for (int i = 0; i < 8; i++) _mm256_storeu_ps((float *)(u + i * u_stride + 32 * b), r[i]);
        float d[X8_ROWS];
        _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk)));
        for (int i = 0; i < X8_ROWS; i++) dw[i * dw_stride + b] = d[i];
    }
}

/* 8 vectors of 8 int32 (vector i: the 8 rows' value i) transposed: vector
 * r holds row r's values 0..7. */
static inline void transpose8x8_epi32(__m256i v[8]) {
    __m256 f[8];
    for (int i = 0; i < 8; i++) f[i] = _mm256_castsi256_ps(v[i]);
    transpose8x8_ps(f);
    for (int i = 0; i < 8; i++) v[i] = _mm256_castps_si256(f[i]);
}

/* Super-blocks b0..b0+nb-1 of an interleaved Q4_K or Q6_K group grp as
 * stage_kquant (simd_x86.h) unpacks the same rows from the file's layout,
 * value for value: the quants of a pair (Q4_K) or of a 32-element block
 * (Q6_K) and the scales transposed from lanes (rows) to rows. */
static inline void x8_stage_kquant(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb, kquant_stage *st,
                                   bool pair_scales) {
    const __m256i low = _mm256_set1_epi8(15), lo16 = _mm256_set1_epi32(0xffff);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk =
            (const uint8_t *)grp->data + pkv_x8_block_offset(type, grp->nb, grp->n_groups, grp->g, b0 + b);
        float d[X8_ROWS], dmin[X8_ROWS];
        _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk)));
        if (type == PKV_TYPE_Q4_K)
            _mm256_storeu_ps(dmin, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 2 * X8_ROWS))));
        for (int r = 0; r < X8_ROWS; r++) st->d[r][b] = d[r], st->dmin[r][b] = type == PKV_TYPE_Q4_K ? dmin[r] : 0.0f;
        __m256i q[8];
        if (type == PKV_TYPE_Q4_K) {
            for (int p = 0; p < 4; p++) { /* row r's 32 bytes: the file's qs[32p..32p+31] */
                for (int c = 0; c < 8; c++) q[c] = load256(blk + 16 * X8_ROWS + 256 * p + 32 * c);
                transpose8x8_epi32(q);
                for (int r = 0; r < X8_ROWS; r++) {
                    uint8_t *u = st->u[r] + QK_K * b + 64 * p;
                    _mm256_storeu_si256((__m256i *)u, _mm256_and_si256(q[r], low));
                    _mm256_storeu_si256((__m256i *)(u + 32), _mm256_and_si256(_mm256_srli_epi16(q[r], 4), low));
                }
            }
            __m256i sc[8], m[8];
            for (int j = 0; j < 8; j++) {
                x8k_scales_mins(blk, j, &sc[j], &m[j]);
                if (pair_scales) sc[j] = _mm256_or_si256(sc[j], _mm256_slli_epi32(sc[j], 16));
                m[j] = _mm256_or_si256(m[j], _mm256_slli_epi32(m[j], 16));
            }
            transpose8x8_epi32(sc);
            transpose8x8_epi32(m);
            for (int r = 0; r < X8_ROWS; r++) {
                _mm256_storeu_si256((__m256i *)st->sc[r][b], sc[r]);
                _mm256_storeu_si256((__m256i *)st->pair[r][b], m[r]);
            }
            continue;
        }
        for (int j = 0; j < 8; j++) { /* Q6_K: row r's elements 32j..32j+31 */
            x86_quants(blk, j, q);
            transpose8x8_epi32(q);
            for (int r = 0; r < X8_ROWS; r++) _mm256_storeu_si256((__m256i *)(st->u[r] + QK_K * b + 32 * j), q[r]);
        }
        __m256i sc[2][8], pr[8];
        for (int i = 0; i < 16; i++)
            sc[i >> 3][i & 7] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 * X8_ROWS + 8 * i)));
        for (int i = 0; i < 8; i++)
            pr[i] = _mm256_or_si256(_mm256_and_si256(sc[(2 * i) >> 3][(2 * i) & 7], lo16),
                                    _mm256_slli_epi32(sc[(2 * i + 1) >> 3][(2 * i + 1) & 7], 16));
        for (int h = 0; h < 2; h++) {
            if (pair_scales)
                for (int i = 0; i < 8; i++)
                    sc[h][i] = _mm256_or_si256(_mm256_and_si256(sc[h][i], lo16), _mm256_slli_epi32(sc[h][i], 16));
            transpose8x8_epi32(sc[h]);
        }
        transpose8x8_epi32(pr);
        for (int r = 0; r < X8_ROWS; r++) {
            _mm256_storeu_si256((__m256i *)st->sc[r][b], sc[0][r]);
            _mm256_storeu_si256((__m256i *)(st->sc[r][b] + 8), sc[1][r]);
            _mm256_storeu_si256((__m256i *)st->pair[r][b], pr[r]);
        }
    }
}

#endif
