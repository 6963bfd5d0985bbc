/*
 * Description: closing a device with work queued neither hangs nor leaks.
 * Several streams are held by latches without a timeout, with copies,
 * launches, event records/waits, stream-ordered frees and undrained
 * completion records queued behind them; one stream is mid-spin on the
 * cores.  pto_device_close must cancel, join and release everything (the
 * sanitizer builds check the leaks, run.sh's timeout the hang).
 */
#include "helpers.h"

int main(void)
{
    for (int round = 0; round < 5; round++) {
        pto_device *dev = t_open_device(8u << 20, 64);
        pto_stream *s[4];
        pto_event *e;
        pto_latch *l;
        pto_kernel *spin, *add;
        static unsigned char host[1 << 16];
        uint64_t tok = 1;

        t_check(pto_kernel_builtin(dev, "spin", &spin));
        t_check(pto_kernel_builtin(dev, "add_f32", &add));
        t_check(pto_event_create(dev, &e));
        t_check(pto_latch_create(dev, 0, &l));
        for (int i = 0; i < 4; i++)
            t_check(pto_stream_create(dev, i, &s[i]));
        /* Stream 0 runs a spin now: close must wait for it, not cancel it mid-block. */
        uint64_t us[1] = {2000};
        t_check(pto_stream_launch(s[0], spin, 2, us, 1, tok++));
        for (int i = 1; i < 4; i++) {
            pto_devptr a;
            t_check(pto_mem_alloc(dev, sizeof(host), s[i], &a));
            t_check(pto_stream_latch_wait(s[i], l, tok++));
            t_check(pto_stream_copy_h2d(s[i], a, host, sizeof(host), tok++));
            uint64_t args[4] = {a, a, a, sizeof(host) / 4};
            t_check(pto_stream_launch(s[i], add, 3, args, 4, tok++));
            t_check(pto_stream_record(s[i], e, tok++));
            t_check(pto_stream_wait_event(s[(i % 3) + 1], e, tok++));
            t_check(pto_stream_free(s[i], a, tok++));
            t_check(pto_stream_notify(s[i], tok++));
        }
        if (round % 2)
            pto_stream_destroy(s[3]);     /* destroyed with work still queued */
        if (round == 4)
            pto_event_destroy(e);
        pto_device_close(dev);            /* latch never released by us */
    }
    return T_EXIT_PASS;
}
