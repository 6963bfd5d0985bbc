/*
 * Description: a drained completion record means its command completed.
 * The driver moves the stream's head before it pushes the record, so a host
 * that refills a full ring on each drained record (the runtime's backlog)
 * finds the room that record stands for.  A host polling the queue sees a
 * record within nanoseconds of the push: every record it drains must find
 * pto_stream_completed at its command and the ring empty again.
 */
#include "helpers.h"

int main(int argc, char **argv)
{
    double seconds = t_duration(argc, argv, 1.0);
    pto_device *dev = t_open_device(1u << 20, 1);
    pto_stream *s;
    pto_kernel *noop;
    pto_completion rec;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_kernel_builtin(dev, "noop", &noop));
    uint64_t end = t_now_ns() + (uint64_t)(seconds * 1e9), n = 0;
    while (t_now_ns() < end) {
        uint64_t token = ++n;
        t_check(pto_stream_launch(s, noop, 1, NULL, 0, token));
        while (t_check(pto_cq_drain(dev, &rec, 1)) == 0)
            ;
        t_assert(rec.token == token, "drained token %llu, want %llu", (unsigned long long)rec.token,
                 (unsigned long long)token);
        t_assert(pto_stream_completed(s) == n, "record %llu drained, stream completed %llu",
                 (unsigned long long)n, (unsigned long long)pto_stream_completed(s));
        t_assert(pto_stream_space_left(s) == 1, "record %llu drained, ring still full",
                 (unsigned long long)n);
    }
    printf("%llu records\n", (unsigned long long)n);
    pto_kernel_unload(noop);
    pto_device_close(dev);
    return T_EXIT_PASS;
}
