/*
 * fastorder.c - the common case of automatic ordering, compiled (pypto_async._fastorder).
 *
 * Hazards.order (pypto_async/runtime/_hazards.py) runs for every launch or
 * copy whose DeviceTensors cross streams.  Its rule, and every case this file
 * declines, live in Python (Hazards._order_general); this file is the common
 * case of the same rule, on the same Python objects, without the
 * interpreter's cost per step.
 *
 * order(hz, stream, accesses, label, offset, fuse) is Hazards.order.  In
 * the common case it decides the edges and accounts them (tokens, clocks,
 * counters), notes the accesses, then queues the edges through
 * hz._queue_edge (one driver call each): all of them, or all but the last
 * with fuse, whose source stream it returns for the launch's own driver call
 * (the edge's token is the one before the launch's).  Otherwise it returns
 * None.  What it declines it hands to hz._order_declined (the general path)
 * on state it has not touched.
 *
 * It declines whatever the general path handles better: a manual region
 * open anywhere (``with w.manual_deps():``, which is task-local), a tensor's
 * first use on the stream (its join), an exact event to wait for, a stream
 * holding work on the host (its FIFO), a closed source stream or one without
 * its hazard event yet, a trace marking inferred waits, a tensor given
 * twice, more than MAX_SRC streams to wait for, or an object of an
 * unexpected type.
 *
 * One difference in what it writes: a write it notes makes the stream the
 * tensor's home and leaves no writer record (None), where the general path
 * keeps one; while a tensor has a home, its last write is the home's last
 * data command, which is where leaving the home reads it.
 *
 * The objects' attributes are __slots__, read and written at the offsets
 * their member descriptors give (setup() takes them once): the same storage
 * Python's attribute access uses.  Replaced values are released only once
 * everything is written (freeing one may run code: a Stream's __del__).
 * Called with the worker's lock held, on the submitting thread; it holds no
 * state of its own between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#define MAX_SRC 4  /* streams one call may wait for here; more go to the general path */
#define MAX_ACC 16 /* accesses one call may have here */

/* The slots read here, by class. */
enum {
    T_STREAMS, T_MANUAL, T_HOME, T_WRITER, T_READERS, T_READHOME, T_NSLOTS
};
enum {
    S_ID, S_LAST, S_CLOCK, S_FIFO, S_CLOSED, S_HZ_EVENT, S_PTR, S_NSLOTS
};
enum {
    H_FAST, H_SKIPPED, H_INFERRED, H_RECORDER, H_QUEUE, H_NSLOTS
};
enum {
    Q_NEXT_TOKEN, Q_NSLOTS
};

static const char *const tensor_names[T_NSLOTS] = {"_streams", "_manual", "_home", "_writer", "_readers",
                                                   "_readhome"};
static const char *const stream_names[S_NSLOTS] = {"_id", "_last", "_clock", "_fifo", "_closed", "_hz_event",
                                                   "_ptr"};
static const char *const hazards_names[H_NSLOTS] = {"fast", "skipped", "inferred", "recorder", "queue"};
static const char *const queue_names[Q_NSLOTS] = {"next_token"};

static PyTypeObject *tensor_type, *stream_type, *hazards_type, *queue_type, *access_type, *recorder_type;
static PyObject *regions; /* _hazards._regions: [manual regions open in any task or thread] */
static Py_ssize_t tensor_off[T_NSLOTS], stream_off[S_NSLOTS], hazards_off[H_NSLOTS], queue_off[Q_NSLOTS];
static Py_ssize_t access_writes_off, recorder_tags_off;
static PyObject *str_queue_edge, *str_order_declined, *zero;

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))
#define TS(t, i) SLOT(t, tensor_off[i])
#define SS(s, i) SLOT(s, stream_off[i])
#define HS(h, i) SLOT(h, hazards_off[i])

/* Replace a slot's value; the old one is released by the caller (it may run code when freed). */
static PyObject *swap_slot(PyObject *o, Py_ssize_t off, PyObject *value)
{
    PyObject **p = (PyObject **)((char *)o + off);
    PyObject *old = *p;
    Py_INCREF(value);
    *p = value;
    return old;
}

static int offsets(PyTypeObject *type, const char *const *names, Py_ssize_t *out, int n)
{
    for (int i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)type, names[i]);
        if (!d)
            return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            out[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ attribute", type->tp_name, names[i]);
            return -1;
        }
    }
    return 0;
}

static PyObject *setup(PyObject *self, PyObject *args)
{
    PyTypeObject *t, *s, *h, *q, *a, *rec;
    PyObject *r;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!", &PyType_Type, &t, &PyType_Type, &s, &PyType_Type, &h,
                          &PyType_Type, &q, &PyType_Type, &a, &PyType_Type, &rec, &PyList_Type, &r))
        return NULL;
    if (PyList_GET_SIZE(r) != 1) {
        PyErr_SetString(PyExc_ValueError, "setup: regions must be a list of one int");
        return NULL;
    }
    Py_ssize_t toff[T_NSLOTS], soff[S_NSLOTS], hoff[H_NSLOTS], qoff[Q_NSLOTS], aoff, roff;
    static const char *const access_names[1] = {"writes"}, *const recorder_names[1] = {"graph_tags"};
    if (offsets(t, tensor_names, toff, T_NSLOTS) || offsets(s, stream_names, soff, S_NSLOTS) ||
        offsets(h, hazards_names, hoff, H_NSLOTS) || offsets(q, queue_names, qoff, Q_NSLOTS) ||
        offsets(a, access_names, &aoff, 1) || offsets(rec, recorder_names, &roff, 1))
        return NULL; /* nothing replaced */
    memcpy(tensor_off, toff, sizeof(toff));
    memcpy(stream_off, soff, sizeof(soff));
    memcpy(hazards_off, hoff, sizeof(hoff));
    memcpy(queue_off, qoff, sizeof(qoff));
    access_writes_off = aoff;
    recorder_tags_off = roff;
    Py_INCREF(t);
    Py_INCREF(s);
    Py_INCREF(h);
    Py_INCREF(q);
    Py_XSETREF(tensor_type, t);
    Py_XSETREF(stream_type, s);
    Py_XSETREF(hazards_type, h);
    Py_XSETREF(queue_type, q);
    Py_INCREF(a);
    Py_XSETREF(access_type, a);
    Py_INCREF(rec);
    Py_XSETREF(recorder_type, rec);
    Py_INCREF(r);
    Py_XSETREF(regions, r);
    Py_RETURN_NONE;
}

/* An int slot or item as a C integer; -1 with no error set means "not a small int" (decline). */
static int as_i64(PyObject *v, long long *out)
{
    if (!v || !PyLong_CheckExact(v))
        return -1;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static int is_stream(PyObject *s)
{
    return s && PyObject_TypeCheck(s, stream_type);
}

/* stream._clock.get(src._id, 0) as a C integer; -2 on an error, -3 to decline. */
static long long clock_of(PyObject *clock, PyObject *src_id)
{
    PyObject *v = PyDict_GetItemWithError(clock, src_id);
    if (!v)
        return PyErr_Occurred() ? -2 : 0;
    long long x;
    return as_i64(v, &x) ? -3 : x;
}

struct src {
    PyObject *stream; /* borrowed: held by the state it was read from, which is unchanged until commit */
    long long pos;
};

struct plan {
    struct src src[MAX_SRC];
    int n;
    long long skipped;
};

/* One more access to wait for (an edge from src past pos); 0, or 1 to decline. */
static int need(struct plan *pl, PyObject *src, long long pos)
{
    for (int i = 0; i < pl->n; i++) {
        if (pl->src[i].stream == src) { /* one wait per stream and call: the latest of its accesses */
            pl->skipped++;
            if (pos > pl->src[i].pos)
                pl->src[i].pos = pos;
            return 0;
        }
    }
    if (pl->n == MAX_SRC)
        return 1;
    pl->src[pl->n].stream = src;
    pl->src[pl->n].pos = pos;
    pl->n++;
    return 0;
}

/* The access at (src, pos) before this call: implied by the clock (skipped), or needed. 0, 1 decline, -1 error. */
static int earlier(struct plan *pl, PyObject *clock, PyObject *src, long long pos)
{
    if (!is_stream(src) || !SS(src, S_ID)) /* (every stream that reaches the plan has its id) */
        return 1;
    long long c = clock_of(clock, SS(src, S_ID));
    if (c == -2)
        return -1;
    if (c == -3)
        return 1;
    if (c > pos) {
        pl->skipped++; /* implied by a wait queued on the stream already */
        return 0;
    }
    return need(pl, src, pos);
}

/* Leaving a home stream: what commit() must write (a read keeps a writer record at the home's tail). */
struct leave {
    PyObject *tensor; /* borrowed (the accesses list holds it) */
    PyObject *writer; /* new reference, or NULL: the writer record to store (reads only) */
};

static PyObject *make_record(PyObject *stream, long long pos, PyObject *what, PyObject *exact)
{
    PyObject *p = PyLong_FromLongLong(pos);
    if (!p)
        return NULL;
    PyObject *r = PyTuple_Pack(4, stream, p, what, exact);
    Py_DECREF(p);
    return r;
}

/* The edges decided: their sources and tokens (new references), in the order they must be queued. */
struct edges {
    int n;
    PyObject *src[MAX_SRC];
    PyObject *tok[MAX_SRC];
};

/* Decide and account one call's edges, note its accesses: 0 done, 1 declined (nothing changed), -1 error. */
static int decide(PyObject *hz, PyObject *stream, PyObject *accesses, long long offset, struct edges *ed)
{
    long long inferred, skipped;
    if (!tensor_type || !Py_IS_TYPE(hz, hazards_type) || !is_stream(stream) || !PyList_CheckExact(accesses))
        return 1;
    long long open_regions;
    if (PyList_GET_SIZE(regions) != 1 || as_i64(PyList_GET_ITEM(regions, 0), &open_regions) || open_regions)
        return 1; /* whether this task is in one is the general path's question */
    if (as_i64(HS(hz, H_INFERRED), &inferred) || as_i64(HS(hz, H_SKIPPED), &skipped))
        return 1;
    PyObject *q = HS(hz, H_QUEUE), *recorder = HS(hz, H_RECORDER);
    if (!q || !Py_IS_TYPE(q, queue_type) || HS(hz, H_FAST) != Py_True || !recorder)
        return 1;
    /* A trace that marks inferred waits keeps their tokens: Python's. */
    if (recorder != Py_None &&
        (!Py_IS_TYPE(recorder, recorder_type) || SLOT(recorder, recorder_tags_off) != Py_None))
        return 1;
    PyObject *clock = SS(stream, S_CLOCK), *fifo = SS(stream, S_FIFO);
    if (!clock || !PyDict_CheckExact(clock) || !SS(stream, S_ID) || !fifo || PyObject_Length(fifo) != 0) {
        PyErr_Clear();
        return 1;
    }
    Py_ssize_t n = PyList_GET_SIZE(accesses);
    if (n > MAX_ACC)
        return 1;
    PyObject *tensors[MAX_ACC];
    char writes[MAX_ACC];
    struct leave leave[MAX_ACC];
    int nleave = 0;
    struct plan pl = {.n = 0, .skipped = 0};
    PyObject *record = NULL, *v;
    PyObject *old[7 * MAX_ACC + 3]; /* values replaced, released at the end */
    int nold = 0;
    long long pruned = 0, tok;
    int status = 1; /* declined, unless the decision below completes */
    ed->n = 0;

    /* -- decide: read only ----------------------------------------------------------------- */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *acc = PyList_GET_ITEM(accesses, i);
        Py_ssize_t len = PyTuple_CheckExact(acc) ? PyTuple_GET_SIZE(acc) : 0;
        if (len != 2 && len != 4)
            goto out;
        PyObject *t = PyTuple_GET_ITEM(acc, 0);
        if (!Py_IS_TYPE(t, tensor_type))
            goto out;
        for (Py_ssize_t j = 0; j < i; j++)
            if (tensors[j] == t) /* a tensor given twice: the general path combines its accesses */
                goto out;
        tensors[i] = t;
        PyObject *streams = TS(t, T_STREAMS), *manual = TS(t, T_MANUAL);
        if (!streams || !PyAnySet_CheckExact(streams) || !manual)
            goto out;
        int known = PySet_Contains(streams, stream);
        if (known < 0)
            goto error;
        if (!known) /* its first use here: the join is the general path's */
            goto out;
        PyObject *w; /* (tensor, Access) from the bind step, or a copy's (tensor, name, reads, writes) */
        if (len == 2) {
            PyObject *a = PyTuple_GET_ITEM(acc, 1);
            if (!Py_IS_TYPE(a, access_type))
                goto out;
            w = SLOT(a, access_writes_off);
        } else {
            w = PyTuple_GET_ITEM(acc, 3);
        }
        if (w != Py_True && w != Py_False)
            goto out;
        int wr = w == Py_True;
        writes[i] = (char)wr;
        if (manual == Py_True)
            continue;
        if (manual != Py_False)
            goto out;
        PyObject *home = TS(t, T_HOME), *writer = TS(t, T_WRITER);
        if (!home || !writer || (writer != Py_None && !(PyTuple_CheckExact(writer) &&
                                                        PyTuple_GET_SIZE(writer) == 4)))
            goto out;
        if (home != Py_None) {
            if (home == stream)
                continue;
            if (!is_stream(home))
                goto out;
            long long pos, wpos;
            if (as_i64(SS(home, S_LAST), &pos))
                goto out;
            /* Leaving the home stream: its accesses, summed up as a write at its last data command. */
            PyObject *exact = Py_None;
            if (writer != Py_None) {
                if (as_i64(PyTuple_GET_ITEM(writer, 1), &wpos))
                    goto out;
                if (wpos == pos)
                    exact = PyTuple_GET_ITEM(writer, 3);
            }
            int rc = earlier(&pl, clock, home, pos);
            if (rc < 0)
                goto error;
            if (rc)
                goto out;
            if (exact != Py_None) {
                /* An exact point: used only if the edge is needed, and then it is the general path's. */
                for (int k = 0; k < pl.n; k++)
                    if (pl.src[k].stream == home)
                        goto out;
            }
            leave[nleave].tensor = t;
            leave[nleave].writer = NULL;
            if (!wr) {
                leave[nleave].writer = make_record(home, pos, writer != Py_None ? PyTuple_GET_ITEM(writer, 2)
                                                                                : Py_None, exact);
                if (!leave[nleave].writer)
                    goto error;
            }
            nleave++;
            continue;
        }
        if (writer != Py_None && PyTuple_GET_ITEM(writer, 0) != stream) { /* RAW, or WAW */
            long long wpos;
            if (as_i64(PyTuple_GET_ITEM(writer, 1), &wpos))
                goto out;
            PyObject *wsrc = PyTuple_GET_ITEM(writer, 0);
            int rc = earlier(&pl, clock, wsrc, wpos);
            if (rc < 0)
                goto error;
            if (rc)
                goto out;
            if (PyTuple_GET_ITEM(writer, 3) != Py_None)
                for (int k = 0; k < pl.n; k++)
                    if (pl.src[k].stream == wsrc)
                        goto out;
        }
        PyObject *readers = TS(t, T_READERS);
        if (!readers)
            goto out;
        if (wr && readers != Py_None) { /* WAR */
            if (!PyDict_CheckExact(readers))
                goto out;
            PyObject *rhome = TS(t, T_READHOME), *key, *r;
            Py_ssize_t it = 0;
            if (!rhome)
                goto out;
            while (PyDict_Next(readers, &it, &key, &r)) {
                if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 4)
                    goto out;
                PyObject *src = PyTuple_GET_ITEM(r, 0);
                if (src == stream)
                    continue;
                long long pos;
                if (src == rhome) { /* reads there went unnoted: its last data command */
                    if (!is_stream(src) || as_i64(SS(src, S_LAST), &pos))
                        goto out;
                } else if (as_i64(PyTuple_GET_ITEM(r, 1), &pos)) {
                    goto out;
                }
                int rc = earlier(&pl, clock, src, pos);
                if (rc < 0)
                    goto error;
                if (rc)
                    goto out;
            }
        }
    }
    /* Drop the waits another one implies: a stream that waited for that access itself (_prune). */
    if (pl.n > 1) {
        char dropped[MAX_SRC] = {0};
        for (int a = 0; a < pl.n; a++) {
            for (int b = 0; b < pl.n; b++) {
                if (b == a || dropped[b])
                    continue;
                PyObject *bclock = SS(pl.src[b].stream, S_CLOCK);
                if (!bclock || !PyDict_CheckExact(bclock))
                    goto out;
                long long c = clock_of(bclock, SS(pl.src[a].stream, S_ID));
                if (c == -2)
                    goto error;
                if (c == -3)
                    goto out;
                if (c > pl.src[a].pos) {
                    dropped[a] = 1;
                    pruned++;
                    break;
                }
            }
        }
        int k = 0;
        for (int a = 0; a < pl.n; a++)
            if (!dropped[a])
                pl.src[k++] = pl.src[a];
        pl.n = k;
    }
    /* The edges left are one driver call each: both streams without host work, the source open. */
    for (int k = 0; k < pl.n; k++) {
        PyObject *src = pl.src[k].stream, *sfifo = SS(src, S_FIFO);
        if (SS(src, S_CLOSED) != Py_False || !sfifo || !SS(src, S_HZ_EVENT) || SS(src, S_HZ_EVENT) == Py_None ||
            !SS(src, S_CLOCK) || !PyDict_CheckExact(SS(src, S_CLOCK)) || !SS(src, S_PTR))
            goto out;
        Py_ssize_t busy = PyObject_Length(sfifo);
        if (busy != 0) {
            PyErr_Clear();
            goto out;
        }
    }
    if (as_i64(SLOT(q, queue_off[Q_NEXT_TOKEN]), &tok))
        goto out;

    /* -- commit: every check passed ----------------------------------------------------------- */
    status = -1; /* from here, only an error stops it (and leaves what was done) */
    PyObject *me = SS(stream, S_ID);
    for (int k = 0; k < pl.n; k++) {
        PyObject *src = pl.src[k].stream, *skey, *sval;
        PyObject *sclock = SS(src, S_CLOCK);
        Py_ssize_t it = 0;
        while (PyDict_Next(sclock, &it, &skey, &sval)) { /* _merge: what src had waited for */
            if (skey == me || PyObject_RichCompareBool(skey, me, Py_EQ) == 1)
                continue;
            PyObject *mine = PyDict_GetItemWithError(clock, skey);
            if (!mine && PyErr_Occurred())
                goto fail;
            int above = PyObject_RichCompareBool(sval, mine ? mine : zero, Py_GT);
            if (above < 0 || (above && PyDict_SetItem(clock, skey, sval) < 0))
                goto fail;
        }
        PyObject *etok = PyLong_FromLongLong(tok + k); /* the newest token: above anything in the clock */
        if (!etok)
            goto fail;
        Py_INCREF(src);
        ed->src[k] = src;
        ed->tok[k] = etok;
        ed->n = k + 1;
        if (PyDict_SetItem(clock, SS(src, S_ID), etok) < 0)
            goto fail;
    }
    if (pl.n) {
        if (!(v = PyLong_FromLongLong(tok + pl.n)))
            goto fail;
        old[nold++] = swap_slot(q, queue_off[Q_NEXT_TOKEN], v);
        Py_DECREF(v);
        if (!(v = PyLong_FromLongLong(inferred + pl.n)))
            goto fail;
        old[nold++] = swap_slot(hz, hazards_off[H_INFERRED], v);
        Py_DECREF(v);
    }
    if (pl.skipped + pruned) {
        if (!(v = PyLong_FromLongLong(skipped + pl.skipped + pruned)))
            goto fail;
        old[nold++] = swap_slot(hz, hazards_off[H_SKIPPED], v);
        Py_DECREF(v);
    }
    for (int k = 0; k < nleave; k++) { /* the homes left */
        PyObject *t = leave[k].tensor;
        old[nold++] = swap_slot(t, tensor_off[T_HOME], Py_None);
        if (leave[k].writer) {
            old[nold++] = swap_slot(t, tensor_off[T_WRITER], leave[k].writer);
            Py_CLEAR(leave[k].writer);
            old[nold++] = swap_slot(t, tensor_off[T_READERS], Py_None);
        }
    }
    nleave = 0;
    /*
     * Note the accesses, at the token of the command that touches the tensors.  A write makes
     * the stream the tensor's home and keeps no record: while it has a home, its last write is
     * the home's last data command (the homes left above read it there), and a record made here
     * would carry nothing more (no exact point, no call site).  A read's record serves them all.
     */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = tensors[i];
        if (TS(t, T_MANUAL) == Py_True) {
            /* nothing to track: nothing to do here again */
            old[nold++] = swap_slot(t, tensor_off[T_HOME], stream);
        } else if (writes[i]) {
            old[nold++] = swap_slot(t, tensor_off[T_WRITER], Py_None);
            old[nold++] = swap_slot(t, tensor_off[T_READERS], Py_None);
            old[nold++] = swap_slot(t, tensor_off[T_READHOME], Py_None);
            old[nold++] = swap_slot(t, tensor_off[T_HOME], stream);
        } else if (TS(t, T_HOME) != stream) {
            if (!record && !(record = make_record(stream, tok + pl.n + offset, Py_None, Py_None)))
                goto fail;
            PyObject *readers = TS(t, T_READERS);
            if (readers == Py_None) {
                PyObject *d = PyDict_New();
                if (!d || PyDict_SetItem(d, stream, record) < 0) {
                    Py_XDECREF(d);
                    goto fail;
                }
                old[nold++] = swap_slot(t, tensor_off[T_READERS], d);
                Py_DECREF(d);
            } else {
                PyObject *prev = PyDict_GetItemWithError(readers, stream); /* released at the end, not here */
                if (!prev && PyErr_Occurred())
                    goto fail;
                Py_XINCREF(prev);
                old[nold++] = prev;
                if (PyDict_SetItem(readers, stream, record) < 0)
                    goto fail;
            }
        }
    }
    status = 0;
fail:
    Py_XDECREF(record);
    /* Only now release what was replaced: freeing it may run code (a Stream's __del__). */
    for (int k = 0; k < nold; k++)
        Py_XDECREF(old[k]);
out:
    for (int k = 0; k < nleave; k++)
        Py_XDECREF(leave[k].writer);
    if (status == 1)
        PyErr_Clear(); /* (a declining check may leave one: an odd object's length) */
    return status;
error: /* deciding failed: nothing was changed */
    status = -1;
    goto out;
}

static PyObject *order(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "order(hz, stream, accesses, label, offset, fuse) takes 6 arguments");
        return NULL;
    }
    PyObject *hz = args[0], *stream = args[1], *accesses = args[2], *label = args[3], *off = args[4];
    long long offset;
    struct edges ed;
    int status = as_i64(off, &offset) ? 1 : decide(hz, stream, accesses, offset, &ed);
    if (status == 1) /* declined: the general path, on state nobody touched */
        return PyObject_CallMethodObjArgs(hz, str_order_declined, stream, accesses, label, off, NULL);
    PyObject *result = NULL;
    if (status == 0) {
        int fuse = PyObject_IsTrue(args[5]);
        int queued = fuse > 0 && ed.n ? ed.n - 1 : ed.n; /* all but the one left to the launch */
        int k = 0;
        for (; fuse >= 0 && k < queued; k++) {
            PyObject *r = PyObject_CallMethodObjArgs(hz, str_queue_edge, stream, ed.src[k], ed.tok[k], NULL);
            if (!r)
                break;
            Py_DECREF(r);
        }
        if (fuse >= 0 && k == queued) {
            result = k < ed.n ? ed.src[k] : Py_None;
            Py_INCREF(result);
        }
    }
    for (int k = 0; k < ed.n; k++) {
        Py_DECREF(ed.src[k]);
        Py_DECREF(ed.tok[k]);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(DeviceTensor, Stream, Hazards, CommandQueue, Access, TraceRecorder, regions): the slot offsets."},
    {"order", (PyCFunction)(void (*)(void))order, METH_FASTCALL,
     "order(hz, stream, accesses, label, offset, fuse): Hazards.order, its common case compiled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pypto_async._fastorder",
    .m_doc = "The common case of automatic ordering, compiled (see Hazards.order).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__fastorder(void)
{
    str_queue_edge = PyUnicode_InternFromString("_queue_edge");
    str_order_declined = PyUnicode_InternFromString("_order_declined");
    zero = PyLong_FromLong(0);
    if (!str_queue_edge || !str_order_declined || !zero)
        return NULL;
    return PyModule_Create(&module);
}
