/*
 * Description: pto_stream_cancel_tokens races the device and never half-runs
 * a command.  Four streams take launches of axpy_f32 (y += 1.0 * ones, so
 * each run adds exactly 1 to y), each canceled right after it is queued, or
 * not, at random, while the scheduler and cores run the earlier ones.  A
 * launch withdrawn (cancel returned 1) must not run and must complete
 * -PTO_ECANCELED; every other one must run fully and succeed.  At the end
 * y holds exactly the launches that ran, and every record is accounted for.
 */
#include "helpers.h"

#define STREAMS 4
#define ROUNDS 400
#define N 256

int main(void)
{
    pto_device *dev = t_open_device(8u << 20, 64);
    pto_stream *s[STREAMS];
    pto_kernel *axpy;
    pto_devptr x[STREAMS], y[STREAMS];
    static float ones[N], zeros[N], got[N];
    uint64_t ran[STREAMS] = {0}, withdrawn = 0, tok = 1, rng = 0x9e3779b97f4a7c15ull;
    static unsigned char cancel_of[STREAMS * ROUNDS + 2]; /* by token: the held launch, then the race */

    for (int i = 0; i < N; i++)
        ones[i] = 1.0f;
    t_check(pto_kernel_builtin(dev, "axpy_f32", &axpy));
    for (int i = 0; i < STREAMS; i++) {
        t_check(pto_stream_create(dev, 0, &s[i]));
        t_check(pto_stream_set_overflow(s[i], 1));
        t_check(pto_mem_alloc(dev, sizeof(ones), s[i], &x[i]));
        t_check(pto_mem_alloc(dev, sizeof(ones), s[i], &y[i]));
        t_check(pto_stream_copy_h2d(s[i], x[i], ones, sizeof(ones), 0));
        t_check(pto_stream_copy_h2d(s[i], y[i], zeros, sizeof(zeros), 0));
    }
    /* Deterministic first: behind a latch, a launch in the ring has not started, and is withdrawn. */
    pto_latch *l;
    t_check(pto_latch_create(dev, 0, &l));
    t_check(pto_stream_latch_wait(s[0], l, 0));
    uint64_t held_args[4] = {0, x[0], y[0], N}; /* alpha 0: harmless even if it ran */
    uint64_t held_tok = tok++;
    t_check(pto_stream_launch(s[0], axpy, 1, held_args, 4, held_tok));
    t_assert(pto_stream_cancel_tokens(s[0], held_tok, held_tok) == 1, "a held launch was not withdrawn");
    cancel_of[held_tok] = 1;
    withdrawn++;
    pto_latch_release(l);
    pto_latch_destroy(l);
    uint32_t one_bits;
    float one = 1.0f;
    memcpy(&one_bits, &one, 4);
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < STREAMS; i++) {
            uint64_t args[4] = {one_bits, x[i], y[i], N};
            uint64_t t = tok++;
            t_check(pto_stream_launch(s[i], axpy, 2, args, 4, t));
            if (t_rand(&rng) % 2) {
                int c = t_check(pto_stream_cancel_tokens(s[i], t, t));
                t_assert(c == 0 || c == 1, "cancel returned %d", c);
                cancel_of[t] = (unsigned char)c;
                withdrawn += (uint64_t)c;
                if (!c)
                    ran[i]++;
            } else {
                ran[i]++;
            }
        }
    }
    t_check(pto_device_synchronize(dev, -1));
    uint64_t records = 0, canceled = 0;
    pto_completion c[64];
    int n;
    while ((n = pto_cq_drain(dev, c, 64)) > 0) {
        for (int k = 0; k < n; k++) {
            records++;
            if (cancel_of[c[k].token])
                t_assert(c[k].status == -PTO_ECANCELED, "withdrawn token %llu completed %d",
                         (unsigned long long)c[k].token, c[k].status);
            else
                t_assert(c[k].status == 0, "token %llu completed %d (%s)", (unsigned long long)c[k].token,
                         c[k].status, c[k].message);
            canceled += c[k].status == -PTO_ECANCELED;
        }
    }
    t_assert(records == tok - 1, "%llu records for %llu launches", (unsigned long long)records,
             (unsigned long long)(tok - 1));
    t_assert(canceled == withdrawn, "%llu canceled records, %llu withdrawn", (unsigned long long)canceled,
             (unsigned long long)withdrawn);
    for (int i = 0; i < STREAMS; i++) {
        t_check(pto_stream_copy_d2h(s[i], got, y[i], sizeof(got), 0));
        t_check(pto_stream_synchronize(s[i], -1));
        for (int k = 0; k < N; k++)
            t_assert(got[k] == (float)ran[i], "stream %d: y[%d] = %g, %llu launches ran", i, k, got[k],
                     (unsigned long long)ran[i]);
        t_check(pto_stream_free(s[i], x[i], 0));
        t_check(pto_stream_free(s[i], y[i], 0));
    }
    t_check(pto_device_synchronize(dev, -1));
    printf("cancel_race: %llu of %d withdrawn\n", (unsigned long long)withdrawn, STREAMS * ROUNDS);
    pto_device_close(dev);
    return T_EXIT_PASS;
}
