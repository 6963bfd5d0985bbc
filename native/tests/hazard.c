/*
 * Description: the driver's ordering of accesses across streams (hazard.c).
 *
 *   1. The rule, decided and noted: RAW, WAW and WAR need an edge from the
 *      other stream, read after read none; an edge already implied by a wait
 *      (directly, or through the stream waited for) is skipped; edges to one
 *      stream combine; an edge another edge of the call implies is dropped;
 *      a manual access is noted but waits for nothing; an exact point is
 *      offered; ordering-only waits (no mark) imply nothing.
 *   2. Reads of closed streams fold into one read of the fold point.
 *   3. pto_hazards_launch on a device: the edge it queues holds the later
 *      launch behind a latched writer; it declines (nothing queued) for an
 *      edge from a held or closed stream.
 *   4. A write after 1,000 reads on 1,000 streams: one edge per reader,
 *      none dropped, and the next write on the same stream needs none.
 *   6. pto_stream_launch_ordered: the device's attached table and the
 *      kernel's declared accesses; a stream on its own tensors queues the
 *      launch alone; a crossing launch gets its edge (the launch behind a
 *      latched writer); refused without a table attached or accesses
 *      declared; one table per device; accesses declared once; the record a
 *      stream keeps names its table (another table refuses the stream until
 *      it registers there).
 *   5. A table of points (a graph capture's, pto_hazards_decide): edges
 *      decided, taken and noted in one call, nothing queued; an edge waits
 *      for the access's own point, so it orders after what that access's
 *      stream waited for before it, not after; a mark stands for a point
 *      recorded now; too little room changes nothing; an ordinary table
 *      refuses the call.
 */
#include "helpers.h"

#define X 0x10000ull /* allocations: the rule needs only their addresses */
#define Y 0x20000ull

static pto_hz_edge edges[2048];

static int order(pto_hazards *hz, pto_stream *s, pto_devptr addr, uint32_t flags)
{
    pto_hz_access a = {addr, flags, 0};
    return t_check(pto_hazards_order(hz, pto_stream_id(s), &a, 1, edges, 2048));
}

static void note(pto_hazards *hz, pto_stream *s, pto_devptr addr, uint32_t flags, uint64_t pos)
{
    pto_hz_access a = {addr, flags, 0};
    t_check(pto_hazards_note(hz, pto_stream_id(s), &a, 1, pos));
}

/* Queue the edges order() returned (from the sources' tails) at token *tok. */
static void queue(pto_hazards *hz, pto_stream *s, int n, uint64_t *tok)
{
    for (int i = 0; i < n; i++)
        t_check(pto_hazards_queue_edge(hz, pto_stream_id(s), edges[i].src, (*tok)++));
}

static void rule(pto_device *dev)
{
    pto_hazards *hz;
    pto_stream *s[6];
    uint64_t tok = 1, counts[2];
    t_check(pto_hazards_create(dev, &hz));
    for (int i = 0; i < 6; i++) {
        t_check(pto_stream_create(dev, 0, &s[i]));
        t_check(pto_hazards_stream(hz, s[i]));
    }
    t_assert(pto_hazards_stream(hz, s[0]) < 0, "a stream registered twice is refused");
    uint32_t id1 = pto_stream_id(s[1]), id2 = pto_stream_id(s[2]);

    /* RAW: s2 reads what s1 wrote. */
    t_assert(order(hz, s[1], X, PTO_HZ_WRITE) == 0, "a first write waits for nothing");
    note(hz, s[1], X, PTO_HZ_WRITE, tok++);
    int n = order(hz, s[2], X, PTO_HZ_READ);
    t_assert(n == 1 && edges[0].src == id1 && edges[0].pos == 1 && !edges[0].exact, "RAW: one edge from s1");
    queue(hz, s[2], n, &tok);
    note(hz, s[2], X, PTO_HZ_READ, tok++);
    t_assert(order(hz, s[2], X, PTO_HZ_READ) == 0, "the edge queued implies the next read's");
    /* Read after read: none. */
    t_assert(order(hz, s[3], X, PTO_HZ_READ) == 1, "s3's read waits for s1's write");
    queue(hz, s[3], 1, &tok);
    note(hz, s[3], X, PTO_HZ_READ, tok++);
    /* WAR + WAW on s4: s1's write, the reads of s2 and s3; s2 and s3 waited for s1: it is dropped. */
    n = order(hz, s[4], X, PTO_HZ_WRITE);
    t_assert(n == 2 && edges[0].src == id2 && edges[1].src == pto_stream_id(s[3]),
             "WAR: edges from the readers s2 and s3, the writer's implied by them (got %d)", n);
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 2 && counts[1] == 2, "2 inferred, 2 skipped so far (got %llu, %llu)",
             (unsigned long long)counts[0], (unsigned long long)counts[1]);
    queue(hz, s[4], n, &tok);
    note(hz, s[4], X, PTO_HZ_WRITE, tok++);
    /* A writer on s1 again: only s4 (whose clock covers everything before). */
    n = order(hz, s[1], X, PTO_HZ_WRITE);
    t_assert(n == 1 && edges[0].src == pto_stream_id(s[4]), "WAW after the WAR: one edge from s4");

    /* Transitive: s5 waits for a mark of s4 (which waited for s2 and s3); a write of s5 after
     * s2's read needs no edge. */
    uint64_t mpos = tok++;
    pto_hz_mark *m = pto_hazards_mark(hz, pto_stream_id(s[4]), mpos);
    t_assert(m, "a mark");
    pto_hazards_waited(hz, pto_stream_id(s[5]), m);
    pto_hz_mark_release(m);
    t_assert(pto_hazards_ordered(hz, pto_stream_id(s[5]), id2, 3), "s5 is ordered after s2's read");
    t_assert(pto_hazards_ordered(hz, pto_stream_id(s[5]), pto_stream_id(s[4]), mpos - 1), "and s4's work");
    t_assert(!pto_hazards_ordered(hz, pto_stream_id(s[5]), pto_stream_id(s[4]), mpos), "not s4's later work");

    /* Manual: noted, waits for nothing; the next automatic access orders after it. */
    pto_hz_access a = {Y, PTO_HZ_WRITE | PTO_HZ_MANUAL, 0};
    t_assert(t_check(pto_hazards_order(hz, id1, &a, 1, edges, 4)) == 0, "a manual write waits for nothing");
    t_check(pto_hazards_note(hz, id1, &a, 1, tok++));
    a.flags = PTO_HZ_WRITE | PTO_HZ_MANUAL;
    t_assert(t_check(pto_hazards_order(hz, id2, &a, 1, edges, 4)) == 0, "nor a manual write after it");
    t_assert(order(hz, s[3], Y, PTO_HZ_READ) == 1 && edges[0].src == id1, "an automatic read after it waits");

    /* Exact: a write with a point right after it offers that point; forget starts afresh. */
    pto_hazards_forget(hz, Y);
    t_assert(order(hz, s[3], Y, PTO_HZ_READ) == 0, "a forgotten allocation has no accesses");
    t_check(pto_hazards_written(hz, id1, Y, 100, 101));
    t_assert(order(hz, s[2], Y, PTO_HZ_READ) == 1 && edges[0].exact == 101 && edges[0].pos == 100,
             "the exact point is offered");
    note(hz, s[1], Y, PTO_HZ_READ, 102); /* a later read on s1: the point still covers a read's RAW */
    t_assert(order(hz, s[2], Y, PTO_HZ_READ) == 1 && edges[0].exact == 101, "a read still may use it");
    t_assert(order(hz, s[2], Y, PTO_HZ_WRITE) == 1 && !edges[0].exact && edges[0].pos == 102,
             "a write after the read there waits for the tail");

    /* An edge too small for the buffer: the count, then the edges. */
    pto_hz_access b = {X, PTO_HZ_WRITE, 0};
    t_assert(pto_hazards_order(hz, id2, &b, 1, edges, 0) == 1, "the count of edges needed");

    pto_hazards_destroy(hz);
    for (int i = 0; i < 6; i++) {
        t_check(pto_stream_synchronize(s[i], 10000000));
        pto_stream_destroy(s[i]);
    }
}

static void fold(pto_device *dev)
{
    pto_hazards *hz;
    pto_stream *fp, *w, *r[8];
    uint64_t sizes[2];
    t_check(pto_hazards_create(dev, &hz));
    t_check(pto_stream_create(dev, 0, &fp));
    t_check(pto_stream_create(dev, 0, &w));
    t_check(pto_hazards_stream(hz, fp));
    t_check(pto_hazards_stream(hz, w));
    pto_hazards_set_fold(hz, pto_stream_id(fp));
    uint64_t tok = 1;
    note(hz, w, X, PTO_HZ_WRITE, tok++);
    for (int i = 0; i < 8; i++) {
        t_check(pto_stream_create(dev, 0, &r[i]));
        t_check(pto_hazards_stream(hz, r[i]));
        note(hz, r[i], X, PTO_HZ_READ, tok++);
        uint32_t id = pto_stream_id(r[i]);
        pto_hazards_stream_closed(hz, id, tok++); /* the fold point's wait for it */
        t_check(pto_stream_synchronize(r[i], 10000000));
        pto_hazards_stream_gone(hz, id);
        pto_stream_destroy(r[i]);
    }
    pto_hazards_sizes(hz, X, pto_stream_id(w), sizes);
    t_assert(sizes[0] <= 5, "closed readers fold: %llu reads kept", (unsigned long long)sizes[0]);
    int n = order(hz, w, X, PTO_HZ_WRITE);
    t_assert(n >= 1 && n <= 5, "a write waits for the fold point and the unfolded reads (%d)", n);
    int found = 0;
    for (int i = 0; i < n; i++)
        found |= edges[i].src == pto_stream_id(fp);
    t_assert(found, "one edge is the fold point's");
    pto_hazards_destroy(hz);
    pto_stream_destroy(fp);
    pto_stream_destroy(w);
}

static void launch(pto_device *dev)
{
    pto_hazards *hz;
    pto_stream *s1, *s2;
    pto_kernel *noop;
    pto_latch *latch;
    pto_devptr buf;
    t_check(pto_hazards_create(dev, &hz));
    t_check(pto_stream_create(dev, 0, &s1));
    t_check(pto_stream_create(dev, 0, &s2));
    t_check(pto_stream_set_overflow(s1, 1));
    t_check(pto_stream_set_overflow(s2, 1));
    t_check(pto_hazards_stream(hz, s1));
    t_check(pto_hazards_stream(hz, s2));
    t_check(pto_kernel_builtin(dev, "noop", &noop));
    t_check(pto_mem_alloc(dev, 4096, s1, &buf));
    t_check(pto_latch_create(dev, 0, &latch));
    uint64_t args[1] = {buf};
    uint8_t wr[1] = {PTO_HZ_WRITE}, rd[1] = {PTO_HZ_READ};

    t_check(pto_stream_latch_wait(s1, latch, 1));
    t_assert(t_check(pto_hazards_launch(hz, s1, noop, 1, args, 1, wr, 2, 3)) == 0, "the write: no edge");
    int rc = t_check(pto_hazards_launch(hz, s2, noop, 1, args, 1, rd, 4, 5));
    t_assert(rc == 0, "the read and its edge went into the rings (rc %d)", rc);
    uint64_t counts[2];
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 1, "one inferred edge");
    /* Held behind the latched writer: nothing of s2 completes (a wrong order would, at once). */
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    t_assert(pto_stream_completed(s2) == 0, "the read ran before the write it waits for");
    /* A held source: declined, nothing queued. */
    pto_hazards_set_held(hz, pto_stream_id(s1), 1);
    uint64_t accepted = pto_stream_accepted(s1);
    t_assert(pto_hazards_launch(hz, s1, noop, 1, args, 1, wr, 6, 7) == PTO_HZ_DECLINED,
             "declined: the write's edge would go to s1, which is held");
    t_assert(pto_stream_accepted(s1) == accepted, "nothing queued when declined");
    pto_hazards_set_held(hz, pto_stream_id(s1), 0);
    pto_latch_release(latch);
    t_check(pto_stream_synchronize(s1, 10000000));
    t_check(pto_stream_synchronize(s2, 10000000));
    t_assert(pto_hazards_launch(hz, s1, noop, 1, args, 1, wr, 8, 9) == 0, "the write after the read (WAR)");
    t_check(pto_stream_synchronize(s1, 10000000));
    /* A closed source: declined too (the caller waits for its final point). */
    pto_hazards_stream_closed(hz, pto_stream_id(s1), 10);
    accepted = pto_stream_accepted(s2);
    t_assert(pto_hazards_launch(hz, s2, noop, 1, args, 1, rd, 10, 11) == PTO_HZ_DECLINED, "declined: closed");
    t_assert(pto_stream_accepted(s2) == accepted, "nothing queued when declined");
    pto_completion recs[64];
    while (pto_cq_drain(dev, recs, 64) > 0)
        ;
    pto_hazards_destroy(hz);
    t_check(pto_stream_free(s1, buf, 12));
    t_check(pto_stream_synchronize(s1, 10000000));
    pto_latch_destroy(latch);
    pto_kernel_unload(noop);
    pto_stream_destroy(s1);
    pto_stream_destroy(s2);
}

/*
 * A write after reads on several streams through pto_hazards_launch: the
 * writer's clock takes the readers and what their clocks hold, in one merge
 * (two sorted runs when each reader's clock holds one stream; a sort when
 * they hold more).  And a stream rewriting what it wrote last needs no edge.
 */
static void launch_many(pto_device *dev)
{
    enum { R = 5 };
    pto_hazards *hz;
    pto_stream *a, *b, *w, *r[R];
    pto_kernel *noop;
    pto_devptr buf, other;
    t_check(pto_hazards_create(dev, &hz));
    pto_stream **all[] = {&a, &b, &w, &r[0], &r[1], &r[2], &r[3], &r[4]};
    for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        t_check(pto_stream_create(dev, 0, all[i]));
        t_check(pto_stream_set_overflow(*all[i], 1));
        t_check(pto_hazards_stream(hz, *all[i]));
    }
    t_check(pto_kernel_builtin(dev, "noop", &noop));
    t_check(pto_mem_alloc(dev, 4096, a, &buf));
    t_check(pto_mem_alloc(dev, 4096, b, &other));
    uint8_t wr[1] = {PTO_HZ_WRITE}, rd[1] = {PTO_HZ_READ}, rd2[2] = {PTO_HZ_READ, PTO_HZ_READ};
    uint64_t args[1] = {buf}, both[2] = {buf, other}, tok = 2, counts[2];
    t_check(pto_hazards_launch(hz, a, noop, 1, args, 1, wr, tok, tok + 1));
    tok += 2;
    t_check(pto_hazards_launch(hz, a, noop, 1, args, 1, wr, tok, tok + 1));
    tok += 2;
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 0, "a stream rewriting what it wrote last: no edge");
    uint64_t before = counts[0];
    for (unsigned i = 0; i < R; i++) { /* each reader's clock: a's write (one stream) */
        t_check(pto_hazards_launch(hz, r[i], noop, 1, args, 1, rd, tok, tok + 1));
        tok += 2;
    }
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == before + R, "one edge per reader (%llu)", (unsigned long long)(counts[0] - before));
    t_check(pto_hazards_launch(hz, w, noop, 1, args, 1, wr, tok, tok + 1));
    uint64_t wpos = tok;
    tok += 2;
    for (unsigned i = 0; i < R; i++)
        t_assert(pto_hazards_ordered(hz, pto_stream_id(w), pto_stream_id(r[i]), wpos - 1),
                 "the write waits for reader %u", i);
    t_assert(pto_hazards_ordered(hz, pto_stream_id(w), pto_stream_id(a), 3), "and, through them, a's write");
    /* Readers whose clocks hold two streams (a and b): the merge sorts. */
    t_check(pto_hazards_launch(hz, b, noop, 1, &other, 1, wr, tok, tok + 1));
    tok += 2;
    for (unsigned i = 0; i < R; i++) {
        t_check(pto_hazards_launch(hz, r[i], noop, 1, both, 2, rd2, tok, tok + 1));
        tok += 2;
    }
    t_check(pto_hazards_launch(hz, a, noop, 1, args, 1, wr, tok, tok + 1));
    wpos = tok;
    for (unsigned i = 0; i < R; i++)
        t_assert(pto_hazards_ordered(hz, pto_stream_id(a), pto_stream_id(r[i]), wpos - 1),
                 "a's write waits for reader %u", i);
    t_assert(pto_hazards_ordered(hz, pto_stream_id(a), pto_stream_id(b), 0), "and, through them, b's write");
    for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        t_check(pto_stream_synchronize(*all[i], 10000000));
    pto_completion recs[64];
    while (pto_cq_drain(dev, recs, 64) > 0)
        ;
    pto_hazards_destroy(hz);
    t_check(pto_stream_free(a, buf, 0));
    t_check(pto_stream_free(b, other, 0));
    for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        t_check(pto_stream_synchronize(*all[i], 10000000));
    pto_kernel_unload(noop);
    for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pto_stream_destroy(*all[i]);
}

static void many_readers(pto_device *dev)
{
    enum { M = 1000 };
    pto_hazards *hz;
    pto_stream *w, **r = t_calloc(M, sizeof(*r));
    t_check(pto_hazards_create(dev, &hz));
    t_check(pto_stream_create(dev, 0, &w));
    t_check(pto_hazards_stream(hz, w));
    uint64_t tok = 1;
    note(hz, w, X, PTO_HZ_WRITE, tok++);
    for (int i = 0; i < M; i++) {
        t_check(pto_stream_create(dev, 0, &r[i]));
        t_check(pto_hazards_stream(hz, r[i]));
        t_assert(order(hz, r[i], X, PTO_HZ_READ) == 1, "each reader waits for the write");
        queue(hz, r[i], 1, &tok);
        note(hz, r[i], X, PTO_HZ_READ, tok++);
    }
    int n = order(hz, w, X, PTO_HZ_WRITE);
    t_assert(n == M, "a write after %d reads on %d streams: one edge each (got %d)", M, M, n);
    queue(hz, w, n, &tok);
    note(hz, w, X, PTO_HZ_WRITE, tok++);
    t_assert(order(hz, w, X, PTO_HZ_WRITE) == 0, "the next write on the same stream: none");
    pto_hazards_destroy(hz);
    t_check(pto_stream_synchronize(w, 30000000));
    pto_stream_destroy(w);
    for (int i = 0; i < M; i++) {
        t_check(pto_stream_synchronize(r[i], 30000000));
        pto_stream_destroy(r[i]);
    }
    free(r);
}

/* pto_hazards_decide of one access at pos, on table hz (a table of points). */
static int decide(pto_hazards *hz, pto_stream *s, pto_devptr addr, uint32_t flags, uint64_t pos)
{
    pto_hz_access a = {addr, flags, 0};
    return t_check(pto_hazards_decide(hz, pto_stream_id(s), &a, 1, pos, edges, 2048));
}

static void points(pto_device *dev)
{
    pto_hazards *hz, *plain;
    pto_stream *s[4];
    uint64_t counts[2];
    t_check(pto_hazards_create_points(dev, &hz));
    for (int i = 0; i < 4; i++) {
        t_check(pto_stream_create(dev, 0, &s[i]));
        t_check(pto_hazards_stream(hz, s[i]));
    }
    uint32_t id0 = pto_stream_id(s[0]), id1 = pto_stream_id(s[1]), id2 = pto_stream_id(s[2]);
    uint64_t accepted = pto_stream_accepted(s[0]);

    /* s2 reads Y at 1; s1 writes X at 2, then waits for s2 (a mark of a point recorded after 2). */
    t_assert(decide(hz, s[2], Y, PTO_HZ_READ, 1) == 0, "a first read waits for nothing");
    t_assert(decide(hz, s[1], X, PTO_HZ_WRITE, 2) == 0, "a first write waits for nothing");
    pto_hz_mark *m = pto_hazards_mark(hz, id2, 3);
    t_assert(m, "a mark");
    pto_hazards_waited(hz, id1, m);
    pto_hz_mark_release(m);
    t_assert(decide(hz, s[1], X, PTO_HZ_READ, 3) == 0, "s1's own read of X: stream order");
    /* RAW: s0 reads X; the edge is for the write at 2 (its point: what s1 waited for before it). */
    t_assert(decide(hz, s[0], X, PTO_HZ_READ, 4) == 1 && edges[0].src == id1 && edges[0].pos == 2 &&
                 !edges[0].exact, "RAW: one edge, for s1's write at 2");
    t_assert(pto_hazards_ordered(hz, id0, id1, 2) && !pto_hazards_ordered(hz, id0, id1, 3),
             "s0 is ordered after s1's write, not after s1's later read");
    t_assert(!pto_hazards_ordered(hz, id0, id2, 1), "nor after s2's read: s1 waited for it after the write");
    /* So s0's write of Y still needs its edge for s2's read (a tail edge would have implied it). */
    t_assert(decide(hz, s[0], Y, PTO_HZ_WRITE, 5) == 1 && edges[0].src == id2 && edges[0].pos == 1,
             "WAR: s2's read still needs its edge");
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 2 && counts[1] == 0, "2 edges taken, none skipped (got %llu, %llu)",
             (unsigned long long)counts[0], (unsigned long long)counts[1]);
    /* Taken: the same read again on s0 needs none; s3 reading X after a mark of s0 needs none either. */
    t_assert(decide(hz, s[0], X, PTO_HZ_READ, 6) == 0, "the edge taken implies the next read's");
    m = pto_hazards_mark(hz, id0, 7);
    pto_hazards_waited(hz, pto_stream_id(s[3]), m);
    pto_hz_mark_release(m);
    t_assert(decide(hz, s[3], X, PTO_HZ_READ, 7) == 0, "implied through s0's point (transitive)");
    pto_hazards_counts(hz, counts);
    t_assert(counts[1] == 2, "two skipped (got %llu)", (unsigned long long)counts[1]);
    /* Too little room: the count, nothing changed (a second call with room gets the same edges). */
    pto_hz_access w = {X, PTO_HZ_WRITE, 0};
    t_assert(pto_hazards_decide(hz, id2, &w, 1, 8, edges, 1) == 2, "two edges needed (s1, s3)");
    t_assert(pto_hazards_decide(hz, id2, &w, 1, 8, edges, 0) == 2, "still two: nothing was taken");
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 2 && counts[1] == 2, "none counted");
    /* A write after s1's write and read (one edge, at 3), s0's read at 6 and s3's at 7: s3's read
     * came after a point of s0 later than 6, so s0's edge is implied by s3's and dropped. */
    int n = t_check(pto_hazards_decide(hz, id2, &w, 1, 8, edges, 2048));
    t_assert(n == 2 && edges[0].src == id1 && edges[0].pos == 3 && edges[1].src == pto_stream_id(s[3]),
             "WAR after three reads: s0's edge dropped, s3's implies it (got %d)", n);
    t_assert(pto_stream_accepted(s[0]) == accepted, "nothing was queued");
    /* An ordinary table refuses the decide-only call. */
    t_check(pto_hazards_create(dev, &plain));
    t_check(pto_hazards_stream(plain, s[0]));
    t_assert(pto_hazards_decide(plain, id0, &w, 1, 1, edges, 4) == -PTO_EINVAL, "refused: not a table of points");
    pto_hazards_destroy(plain);
    pto_hazards_destroy(hz);
    for (int i = 0; i < 4; i++)
        pto_stream_destroy(s[i]);
}

static void launch_ordered(pto_device *dev)
{
    pto_hazards *hz, *other, *points;
    pto_stream *s1, *s2;
    pto_kernel *noop;
    pto_latch *latch;
    pto_devptr buf;
    t_check(pto_hazards_create(dev, &hz));
    t_check(pto_hazards_create(dev, &other));
    t_check(pto_hazards_create_points(dev, &points));
    t_check(pto_stream_create(dev, 0, &s1));
    t_check(pto_stream_create(dev, 0, &s2));
    t_check(pto_hazards_stream(hz, s1));
    t_check(pto_hazards_stream(hz, s2));
    t_check(pto_kernel_builtin(dev, "noop", &noop));
    t_check(pto_mem_alloc(dev, 4096, s1, &buf));
    t_check(pto_latch_create(dev, 0, &latch));
    uint64_t args[1] = {buf};
    uint8_t inout[1] = {PTO_HZ_READ | PTO_HZ_WRITE}, rd[1] = {PTO_HZ_READ}, bad[1] = {PTO_HZ_MANUAL};

    t_assert(pto_stream_launch_ordered(s1, noop, 1, args, 1, 2) == -PTO_EINVAL, "refused: no table attached");
    t_check(pto_hazards_attach(hz));
    t_check(pto_hazards_attach(hz)); /* the same again changes nothing */
    t_assert(pto_hazards_attach(other) == -PTO_EINVAL, "refused: another table is attached");
    t_assert(pto_hazards_attach(points) == -PTO_EINVAL, "refused: a table of points");
    t_assert(pto_stream_launch_ordered(s1, noop, 1, args, 1, 2) == -PTO_EINVAL, "refused: no accesses declared");
    t_assert(pto_kernel_set_arg_access(noop, bad, 1) == -PTO_EINVAL, "refused: not a read or a write");
    t_check(pto_kernel_set_arg_access(noop, inout, 1));
    t_check(pto_kernel_set_arg_access(noop, inout, 1));
    t_assert(pto_kernel_set_arg_access(noop, rd, 1) == -PTO_EINVAL, "refused: declared differently before");

    /* One stream on its own tensor: the launches alone, no edge. */
    uint64_t accepted = pto_stream_accepted(s1);
    for (uint64_t tok = 2; tok <= 20; tok += 2)
        t_assert(t_check(pto_stream_launch_ordered(s1, noop, 1, args, 1, tok)) == 0, "a launch on s1");
    t_assert(pto_stream_accepted(s1) == accepted + 10, "ten commands, one per launch");
    uint64_t counts[2];
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 0 && counts[1] == 0, "no edge inferred or skipped on one stream");
    /* Crossing: the launch on s2 waits for s1's last write, held behind a latch. */
    t_check(pto_stream_latch_wait(s1, latch, 22));
    t_check(pto_stream_launch_ordered(s1, noop, 1, args, 1, 24));
    t_assert(t_check(pto_stream_launch_ordered(s2, noop, 1, args, 1, 26)) == 0, "the crossing launch");
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 1, "one inferred edge (%llu)", (unsigned long long)counts[0]);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    t_assert(pto_stream_completed(s2) == 0, "the crossing launch ran before the write it waits for");
    pto_latch_release(latch);
    t_check(pto_stream_synchronize(s1, 10000000));
    t_check(pto_stream_synchronize(s2, 10000000));
    /* Back on s2 alone: no edge again (s2 wrote it last). */
    t_assert(t_check(pto_stream_launch_ordered(s2, noop, 1, args, 1, 28)) == 0, "s2 again");
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 1, "no new edge");
    t_check(pto_stream_synchronize(s2, 10000000));
    pto_completion recs[64];
    while (pto_cq_drain(dev, recs, 64) > 0)
        ;
    pto_hazards_destroy(hz);
    t_assert(pto_stream_launch_ordered(s1, noop, 1, args, 1, 30) == -PTO_EINVAL, "refused: the table is gone");
    t_check(pto_hazards_attach(other)); /* the device takes another once the first is destroyed */
    /* s1 kept the first table's record of it: another table does not take it for its own. */
    t_assert(pto_stream_launch_ordered(s1, noop, 1, args, 1, 30) == -PTO_EINVAL,
             "refused: s1 is not a stream of the table attached now");
    t_check(pto_hazards_stream(other, s1));
    t_assert(t_check(pto_stream_launch_ordered(s1, noop, 1, args, 1, 30)) == 0, "s1 on the new table");
    pto_hazards_counts(other, counts);
    t_assert(counts[0] == 0 && counts[1] == 0, "the new table starts afresh: no edge");
    t_check(pto_stream_synchronize(s1, 10000000));
    while (pto_cq_drain(dev, recs, 64) > 0)
        ;
    pto_hazards_destroy(other);
    pto_hazards_destroy(points);
    t_check(pto_stream_free(s1, buf, 0));
    t_check(pto_stream_synchronize(s1, 10000000));
    pto_latch_destroy(latch);
    pto_kernel_unload(noop);
    pto_stream_destroy(s1);
    pto_stream_destroy(s2);
}

int main(void)
{
    pto_device *dev = t_open_device(1u << 20, 4096);
    rule(dev);
    fold(dev);
    launch(dev);
    launch_many(dev);
    many_readers(dev);
    points(dev);
    launch_ordered(dev);
    pto_device_close(dev);
    printf("hazards: rule, fold, launch, launch after many reads, 1000 readers, points, ordered launch\n");
    return T_EXIT_PASS;
}
