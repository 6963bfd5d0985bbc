/*
 * peer.c - several devices in one process: device counts, the registry of
 * open devices, peer copies, and waits on another device's events.
 *
 * Phase: all of them, for what crosses a device boundary; everything that
 * stays on one device lives where it always did.
 *
 * The registry
 * ------------
 * Every open device is registered here under a serial number that is never
 * reused (pti_peer_register at open, pti_peer_unregister at close).  A
 * command of one device never holds a pointer to another: a peer copy names
 * the other device by serial and pins it (peer_pins, under peers_lock) for
 * as long as it touches that device's memory.  Closing a device unregisters
 * it first, so a peer copy that runs later finds it gone and fails with
 * -PTO_ECLOSED, and then waits for the pins of copies already running
 * (memmoves: bounded, never a latch) before its memory is unmapped.
 *
 * Cross-device waits
 * ------------------
 * An event node (event.c) is a heap object of its own, refcounted, so a wait
 * of device B on a node of device A keeps the node alive whatever happens to
 * A.  What B needs is a wake-up: B's wait is held by B's scheduler, and the
 * completion of A's record runs on A's threads under A's sched_lock, where
 * taking B's sched_lock could deadlock (B may be doing the same towards A).
 * So the node counts the waits of other devices (peer_waits, under A's
 * sched_lock: pti_peer_watch takes it before the wait is queued), and a
 * record completion that finds waits bumps a generation and signals the
 * notifier, a thread of the process that holds no device lock and kicks
 * every registered device's scheduler (pti_sched_kick).  Counting under A's
 * sched_lock makes the hand-off exact: either the completion sees the count
 * and notifies, or the wait was counted after the node was done and B's
 * scheduler sees done when it first looks.  Kicking every device is cheap (an
 * atomic increment each, a signal only for a sleeping scheduler) and spares
 * the node a list of waiters that could name a device closed meanwhile.
 *
 * Failures cross as on one device: a wait on a node whose recorded work
 * failed is its stream's first failure (-PTO_EDEP, exec.c) and the stream's
 * later commands fail as its dependents.  Its cause is the wait's own token,
 * as A's tokens mean nothing to B's host.  A record canceled because its
 * device is closing completes its node with -PTO_ECLOSED, and so do the
 * reserved nodes no record ever filled (pto_event_reserve); a wait of
 * another device on either, or on a recording its device canceled
 * (pto_device_cancel, which a host closing a device calls first), fails
 * with that typed error instead of waiting forever.
 *
 * The notifier starts with the first cross-device wait and is joined when
 * the last registered device closes.  A forked child inherits no thread:
 * the registry starts again empty there (pthread_atfork).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static pthread_mutex_t peers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pins_cv = PTHREAD_COND_INITIALIZER;   /* unregister waits for pins */
static pthread_cond_t notify_cv = PTHREAD_COND_INITIALIZER; /* the notifier sleeps here */
static pto_device **peers;       /* registered devices, by serial (ascending) */
static size_t n_peers, cap_peers;
static uint32_t next_serial;
static uint64_t notify_gen;      /* bumped by pti_peer_notify */
static bool notifier_on;
static uint64_t notifier_id;     /* a notifier whose id differs from this one exits */
static pthread_t notifier;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void after_fork_child(void)
{
    /* No thread survives a fork: forget the parent's devices and notifier. */
    pthread_mutex_init(&peers_lock, NULL);
    pthread_cond_init(&pins_cv, NULL);
    pthread_cond_init(&notify_cv, NULL);
    n_peers = 0;
    notifier_on = false;
    notifier_id++;
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}

int pto_device_count(const char *platform)
{
    if (!platform)
        return pti_error(PTO_EINVAL, "pto_device_count: NULL platform");
    const char *name;
    const struct pto_platform_ops *ops = pti_platform_find(platform, &name);
    if (!ops)
        return -PTO_ENOTSUP;
    return ops->device_count();
}

/* ---- the registry ------------------------------------------------------------- */

int pti_peer_register(pto_device *dev)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&peers_lock);
    if (n_peers == cap_peers) {
        size_t ncap = cap_peers ? cap_peers * 2 : 8;
        pto_device **np = realloc(peers, ncap * sizeof(*np));
        if (!np) {
            pthread_mutex_unlock(&peers_lock);
            return pti_error(PTO_ENOMEM, "pto_device_open: out of host memory");
        }
        peers = np;
        cap_peers = ncap;
    }
    dev->peer_serial = ++next_serial;
    dev->peer_pins = 0;
    peers[n_peers++] = dev;
    pthread_mutex_unlock(&peers_lock);
    return 0;
}

void pti_peer_unregister(pto_device *dev)
{
    pthread_mutex_lock(&peers_lock);
    for (size_t i = 0; i < n_peers; i++) {
        if (peers[i] == dev) {
            memmove(&peers[i], &peers[i + 1], (n_peers - i - 1) * sizeof(*peers));
            n_peers--;
            break;
        }
    }
    while (dev->peer_pins > 0)
        pthread_cond_wait(&pins_cv, &peers_lock);
    bool join = false;
    pthread_t t;
    if (n_peers == 0 && notifier_on) {
        /* The last device: the notifier has nobody left to kick. */
        notifier_on = false;
        notifier_id++;
        t = notifier;
        join = true;
        pthread_cond_broadcast(&notify_cv);
    }
    pthread_mutex_unlock(&peers_lock);
    if (join)
        pthread_join(t, NULL);
}

static uint64_t serial_key(const void *v, size_t i)
{
    return ((pto_device *const *)v)[i]->peer_serial;
}

/* The registered device with this serial, pinned; NULL if it is closed (peers_lock not held). */
static pto_device *pin(uint32_t serial)
{
    pthread_mutex_lock(&peers_lock);
    size_t i = pti_bound(peers, n_peers, serial_key, serial, false);
    pto_device *dev = i < n_peers && peers[i]->peer_serial == serial ? peers[i] : NULL;
    if (dev)
        dev->peer_pins++;
    pthread_mutex_unlock(&peers_lock);
    return dev;
}

static void unpin(pto_device *dev)
{
    pthread_mutex_lock(&peers_lock);
    if (--dev->peer_pins == 0)
        pthread_cond_broadcast(&pins_cv);
    pthread_mutex_unlock(&peers_lock);
}

/* ---- peer copies ------------------------------------------------------------ */

static int check_device(pto_stream *s, pto_device *peer, const char *fn)
{
    if (!peer)
        return pti_error(PTO_EINVAL, "%s: NULL device", fn);
    if (peer->ops != s->dev->ops)
        return pti_error(PTO_ENOTSUP, "%s: devices of platforms '%s' and '%s' cannot copy to each "
                         "other; stage the data through the host", fn, s->dev->platform, peer->platform);
    if (atomic_load_explicit(&peer->closing, memory_order_acquire))
        return pti_error(PTO_ECLOSED, "%s: device %u is closing", fn, peer->cfg.device_id);
    return 0;
}

static int check_range(pto_device *dev, const char *fn, const char *side, uint64_t addr, uint64_t n)
{
    if (n == 0 || pti_mem_in_arena(dev, addr, n))
        return 0;
    return pti_error(PTO_EINVAL, "%s: %s range 0x%llx+%llu lies outside device %u's arena", fn, side,
                     (unsigned long long)addr, (unsigned long long)n, dev->cfg.device_id);
}

int pto_stream_copy_peer(pto_stream *s, pto_device *dst_dev, pto_devptr dst, pto_device *src_dev,
                         pto_devptr src, uint64_t nbytes, uint64_t token)
{
    const char *fn = "pto_stream_copy_peer";
    if (!s)
        return pti_error(PTO_EINVAL, "%s: NULL stream", fn);
    int rc;
    if ((rc = check_device(s, dst_dev, fn)) || (rc = check_device(s, src_dev, fn)))
        return rc;
    if (dst_dev != s->dev && src_dev != s->dev)
        return pti_error(PTO_EINVAL, "%s: neither side lies on the stream's device", fn);
    if ((rc = check_range(dst_dev, fn, "dst", dst, nbytes)) ||
        (rc = check_range(src_dev, fn, "src", src, nbytes)))
        return rc;
    bool peer_dst = dst_dev != s->dev;
    pto_device *peer = peer_dst ? dst_dev : src_dev;
    struct pto_cmd *cmd;
    if ((rc = pti_slot_begin(s, fn, 0, false, &cmd, NULL)))
        return rc;
    cmd->u.copy.dst = dst;
    cmd->u.copy.src = src;
    cmd->u.copy.n = nbytes;
    cmd->u.copy.peer = peer->peer_serial;
    cmd->u.copy.peer_dst = peer_dst;
    return pti_slot_commit(s, cmd, PTO_CMD_PEER, token);
}

int pti_peer_copy(pto_device *dev, const struct pto_cmd *cmd, char *msg, size_t n)
{
    uint64_t nbytes = cmd->u.copy.n;
    pto_device *peer = pin(cmd->u.copy.peer);
    if (!peer) {
        pti_msgf(msg, n, "peer copy: the other device was closed before the copy ran");
        return -PTO_ECLOSED;
    }
    bool peer_dst = cmd->u.copy.peer_dst;
    pto_device *dst_dev = peer_dst ? peer : dev, *src_dev = peer_dst ? dev : peer;
    int rc = pti_mem_check_range(dst_dev, cmd->u.copy.dst, nbytes, msg, n);
    if (!rc)
        rc = pti_mem_check_range(src_dev, cmd->u.copy.src, nbytes, msg, n);
    if (!rc)
        memmove((void *)(uintptr_t)cmd->u.copy.dst, (const void *)(uintptr_t)cmd->u.copy.src, nbytes);
    unpin(peer);
    return rc;
}

/* ---- the notifier ----------------------------------------------------------- */

static void *notifier_main(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    uint64_t served = 0;
    pthread_mutex_lock(&peers_lock);
    while (id == notifier_id) {
        if (served == notify_gen) {
            pthread_cond_wait(&notify_cv, &peers_lock);
            continue;
        }
        served = notify_gen;
        /*
         * Kick every device, a batch at a time: pinned, so that none closes
         * while it is kicked, and kicked without peers_lock, as kicks take
         * sched_locks (see internal.h).  The array may change meanwhile; the
         * serials (ascending) say where the next batch starts.  A device
         * registered since needs no kick: its waits came after the notify.
         */
        uint32_t after = 0;
        for (;;) {
            pto_device *batch[32];
            size_t k = 0;
            for (size_t i = pti_bound(peers, n_peers, serial_key, after, true); i < n_peers && k < 32; i++) {
                batch[k++] = peers[i];
                peers[i]->peer_pins++;
            }
            if (k == 0)
                break;
            after = batch[k - 1]->peer_serial;
            pthread_mutex_unlock(&peers_lock);
            for (size_t i = 0; i < k; i++)
                pti_sched_kick(batch[i], false);
            pthread_mutex_lock(&peers_lock);
            for (size_t i = 0; i < k; i++)
                batch[i]->peer_pins--;
            pthread_cond_broadcast(&pins_cv);
        }
    }
    pthread_mutex_unlock(&peers_lock);
    return NULL;
}

int pti_peer_watch(pto_device *owner, struct pto_event_node *node)
{
    pthread_mutex_lock(&peers_lock);
    int rc = 0;
    if (!notifier_on) {
        uint64_t id = ++notifier_id;
        if (pthread_create(&notifier, NULL, notifier_main, (void *)(uintptr_t)id) == 0)
            notifier_on = true;
        else
            rc = pti_error(PTO_ENOMEM, "pto_stream_wait_event: cannot start the peer notifier thread");
    }
    pthread_mutex_unlock(&peers_lock);
    if (rc)
        return rc;
    pthread_mutex_lock(&owner->sched_lock);
    node->peer_waits++;
    pthread_mutex_unlock(&owner->sched_lock);
    return 0;
}

void pti_peer_notify(void)
{
    pthread_mutex_lock(&peers_lock);
    notify_gen++;
    pthread_cond_signal(&notify_cv);
    pthread_mutex_unlock(&peers_lock);
}

int32_t pti_peer_wait_status(const struct pto_event_node *n, char *msg, size_t len)
{
    if (n->status == 0)
        return 0;
    if (n->status == -PTO_ECLOSED || n->status == -PTO_ECANCELED) {
        /* Its device dropped the recorded work (closing cancels it first): it never comes. */
        pti_msgf(msg, len, "waits on event %llu of another device, which was closed (or canceled the "
                 "work) before the event completed: %s", (unsigned long long)n->event_id, n->msg);
        return -PTO_ECLOSED;
    }
    pti_msgf(msg, len, "waits on event %llu of another device, recorded after failed token %llu "
             "there: %s", (unsigned long long)n->event_id, (unsigned long long)n->cause, n->msg);
    return -PTO_EDEP;
}

void pti_peer_complete(pto_device *dev, struct pto_event_node *n)
{
    if (n->status == -PTO_ECANCELED && atomic_load_explicit(&dev->closing, memory_order_acquire)) {
        n->status = -PTO_ECLOSED;
        pti_msgf(n->msg, sizeof(n->msg), "device %u was closed", dev->cfg.device_id);
    }
    /* Release pairs with the acquire loads of done in event.c and exec.c; then the wake-up. */
    atomic_store_explicit(&n->done, 1, memory_order_release);
    pti_peer_notify();
}

/* ---- reserved events ---------------------------------------------------------- */

int pto_event_reserve(pto_event *e)
{
    if (!e)
        return pti_error(PTO_EINVAL, "pto_event_reserve: NULL event");
    struct pto_event_node *node = pti_event_node_new(e->id);
    if (!node)
        return pti_error(PTO_ENOMEM, "pto_event_reserve: out of host memory");
    pthread_mutex_lock(&e->dev->obj_lock);
    struct pto_event_node *old = NULL;
    if (e->reserved) {
        old = node; /* reserved already: nothing changes */
    } else {
        old = e->cur;
        e->cur = node; /* the event's reference */
        e->reserved = true;
    }
    pthread_mutex_unlock(&e->dev->obj_lock);
    pti_event_node_unref(old);
    return 0;
}

struct pto_event_node *pti_event_take_reserved(pto_event *e)
{
    struct pto_event_node *node = NULL;
    pthread_mutex_lock(&e->dev->obj_lock);
    if (e->reserved) {
        e->reserved = false;
        node = e->cur;
        pti_event_node_ref(node);
    }
    pthread_mutex_unlock(&e->dev->obj_lock);
    return node;
}

/* Complete e's reserved node, if any, with status (sched_lock held). */
static void abandon_locked(pto_device *dev, pto_event *e, int32_t status, const char *msg)
{
    struct pto_event_node *node = pti_event_take_reserved(e);
    if (!node)
        return;
    node->status = status;
    node->cause = 0;
    node->time_ns = pto_now_ns();
    pti_strlcpy(node->msg, msg, sizeof(node->msg));
    if (node->peer_waits) {
        pti_peer_complete(dev, node);
    } else {
        atomic_store_explicit(&node->done, 1, memory_order_release);
    }
    pti_event_node_unref(node);
    /* Waits of this device and host waits on it may move on. */
    if (dev->host_waiters)
        pthread_cond_broadcast(&dev->host_cv);
    pti_sched_kick(dev, true);
}

void pti_event_abandon(pto_event *e, int32_t status, const char *msg)
{
    pto_device *dev = e->dev;
    pthread_mutex_lock(&dev->sched_lock);
    abandon_locked(dev, e, status, msg);
    pthread_mutex_unlock(&dev->sched_lock);
}

void pti_events_abandon_all(pto_device *dev)
{
    char msg[PTI_MSG_LEN];
    pti_msgf(msg, sizeof(msg), "device %u was closed before the event was recorded", dev->cfg.device_id);
    pthread_mutex_lock(&dev->sched_lock);
    /* obj_lock nests inside sched_lock; the list does not change: the host is closing the device. */
    for (struct pto_link *l = dev->events.next; l != &dev->events; l = l->next)
        abandon_locked(dev, PTI_CONTAINER(l, pto_event, link), -PTO_ECLOSED, msg);
    pthread_mutex_unlock(&dev->sched_lock);
}
