/*
 * Description: the idle spinner is CPU-aware (engines.c, pti_cpu_spare_at).
 *
 *   1. On the CPU of the host thread that last submitted or waited
 *      (dev->host_cpu, noted by pti_host_note_cpu) no CPU is ever spare,
 *      however idle the machine looks, and the refusal is counted
 *      (pto_device_stats.idle_host_cpu).
 *   2. On another CPU, with the machine's runnable threads (the caller and
 *      a busy host included) filling its CPUs exactly, a CPU is spare: the
 *      host runs beside the caller; one more runnable thread and none is.  With the host's CPU unknown, one CPU
 *      is still left for a waking host: not spare.
 *
 * The machine's runnable count is the device's cached sample (set here,
 * fresh, before each question), so the answers do not depend on the load.
 */
#include <sched.h>
#include <stdatomic.h>

#include "helpers.h"
#include "internal.h"

/* Make the device's cached load sample say `n` runnable threads, fresh for the next question. */
static void set_runnable(pto_device *dev, int n)
{
    atomic_store(&dev->runnable, n);
    atomic_store(&dev->runnable_ns, pto_now_ns());
}

int main(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 2) {
        printf("skip: on one CPU nothing ever spins (the one-CPU rule comes first)\n");
        return T_EXIT_SKIP;
    }
    pto_device_config cfg;
    pto_device *dev = NULL;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.copy_engines = 1;
    cfg.spin_us = 0; /* every device thread sleeps at once: none is awake to count against the host */
    t_check(pto_device_open("sim", &cfg, &dev));
    /* Wait (state, not time) for every device thread to be asleep. */
    for (int i = 0; i < 100000 && atomic_load(&dev->asleep) < dev->n_dev_threads; i++)
        t_pause_us(100);
    t_assert(atomic_load(&dev->asleep) == dev->n_dev_threads, "device threads asleep (%u of %u)",
             atomic_load(&dev->asleep), dev->n_dev_threads);
    int m = (int)dev->machine_cpus;

    /* Host's CPU unknown: one CPU left for a waking host, as before. */
    t_assert(atomic_load(&dev->host_cpu) == -1, "no host CPU noted before any host thread");
    set_runnable(dev, m - 1);
    t_assert(pti_cpu_spare_at(dev, 1), "unknown host CPU, a CPU free: spare");
    set_runnable(dev, m);
    t_assert(!pti_cpu_spare_at(dev, 1), "unknown host CPU, every CPU busy: none left for a waking host");

    /* The host noted on this thread's CPU. */
    pti_host_note_cpu(dev);
    int host = atomic_load(&dev->host_cpu);
    t_assert(host >= 0, "host CPU noted (%d)", host);
    int other = host == 0 ? 1 : 0;
    pto_device_stats st0, st1;
    t_check(pto_device_get_stats(dev, &st0));
    set_runnable(dev, 1);
    t_assert(!pti_cpu_spare_at(dev, host), "on the host's CPU: never spare, even on an idle machine");
    t_check(pto_device_get_stats(dev, &st1));
    t_assert(st1.idle_host_cpu == st0.idle_host_cpu + 1, "the refusal counted (%llu -> %llu)",
             (unsigned long long)st0.idle_host_cpu, (unsigned long long)st1.idle_host_cpu);
    set_runnable(dev, m);
    t_assert(pti_cpu_spare_at(dev, other), "on another CPU, the caller and a busy host among the runnable: spare");
    set_runnable(dev, m + 1);
    t_assert(!pti_cpu_spare_at(dev, other), "a third runnable thread: the machine is full");
    t_check(pto_device_get_stats(dev, &st0));
    t_assert(st0.idle_host_cpu == st1.idle_host_cpu, "refusals elsewhere are not the host CPU's");

    pto_device_close(dev);
    printf("ok\n");
    return T_EXIT_PASS;
}
