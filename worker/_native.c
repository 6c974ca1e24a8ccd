/*
 * The mirror loop's inner copy in C: stamp and produce runs of fetched records without a Python
 * object per record.
 *
 * Why: at 100 B records the Python loop spent about two thirds of its time in per-record work
 * around librdkafka (the loop's bytecode, produce()'s argument and header conversion, the urep
 * stamp, and confluent-kafka's delivery-report state, which it allocates for every record and
 * serves under the GIL even when the record has no callback). Here a record costs one
 * rd_kafka_producev() call; only the last record of a run carries a delivery callback, exactly as
 * in worker.copyloop.CopyLoop._mirror_py, whose semantics this file must keep.
 *
 * How it reaches librdkafka: confluent-kafka links its own copy of librdkafka, and the producer's
 * rd_kafka_t lives in its Handle object. init() resolves the few functions used here from that
 * very copy: dlopen with RTLD_NOLOAD of confluent-kafka's own extension module (cimpl), already
 * loaded, whose dlsym lookups search its own dependencies, i.e. the librdkafka it links. It checks
 * the Message layout read below against a Message built from Python, and is_producer() checks a
 * Handle's rk by asking librdkafka for that handle's name (it must be the worker's client id).
 * worker/native.py accepts only the confluent-kafka versions whose layouts were reviewed; any
 * mismatch leaves the worker on the Python loop (worker.native.load raises Unavailable).
 *
 * References: everything kept across a call into Python (the route cache, the current and next
 * routes, the messages) is held with a reference of its own, so a callback that changes the
 * routes dict or the list cannot free what this loop still reads.
 *
 * What this file never does: serve callbacks (rd_kafka_poll), block, or handle any record that
 * needs a decision (errors, unknown partitions, records that already carry a urep header, a full
 * queue). It returns to Python in front of such a record with the run still open, and Python
 * handles that one record (worker.copyloop.CopyLoop.mirror). The producer it drives is
 * worker.destination.Destination.native_target, rebound whenever the producer is replaced.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* librdkafka's ABI, as declared in rdkafka.h (stable since 0.11): opaque handles, the
 * rd_kafka_producev() argument tags and the flags and codes used here. */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef int rd_kafka_resp_err_t;

enum {
        VTYPE_END       = 0,
        VTYPE_TOPIC     = 1,
        VTYPE_PARTITION = 3,
        VTYPE_VALUE     = 4,
        VTYPE_KEY       = 5,
        VTYPE_OPAQUE    = 6,
        VTYPE_MSGFLAGS  = 7,
        VTYPE_TIMESTAMP = 8,
        VTYPE_HEADERS   = 10,
};
#define MSG_F_COPY 0x2
#define TYPE_PRODUCER 0
#define TIMESTAMP_NOT_AVAILABLE 0

static rd_kafka_resp_err_t (*rk_producev)(rd_kafka_t *rk, ...);
static rd_kafka_headers_t *(*rk_headers_new)(size_t initial_count);
static rd_kafka_headers_t *(*rk_headers_copy)(const rd_kafka_headers_t *src);
static void (*rk_headers_destroy)(rd_kafka_headers_t *hdrs);
static rd_kafka_resp_err_t (*rk_header_add)(rd_kafka_headers_t *hdrs, const char *name, ssize_t name_size,
                                            const void *value, ssize_t value_size);
static rd_kafka_resp_err_t (*rk_header_get_last)(const rd_kafka_headers_t *hdrs, const char *name,
                                                 const void **valuep, size_t *sizep);
static int (*rk_type)(const rd_kafka_t *rk);
static const char *(*rk_name)(const rd_kafka_t *rk);
static void *(*rk_opaque)(const rd_kafka_t *rk);

/* confluent-kafka's extension module, opened by init() (RTLD_NOLOAD) and kept open while the
 * functions above, resolved through it, may be called: a dlsym on a closed handle is undefined. */
static void *cimpl_lib;

/* confluent-kafka's objects, as laid out in its confluent_kafka.h; init() checks them. */
typedef struct {
        PyObject_HEAD rd_kafka_t *rk;
} CflHandle;

typedef struct {
        PyObject_HEAD PyObject *topic;
        PyObject *value;
        PyObject *key;
        PyObject *headers;            /* the Python list, once headers() converted them */
        rd_kafka_headers_t *c_headers; /* the consumed headers, until then */
        PyObject *error;
        int32_t partition;
        int64_t offset;
        int32_t leader_epoch;
        int64_t timestamp;
        int tstype;
} CflMessage;

/* confluent-kafka's per-record delivery state (Producer.c: struct Producer_msgstate). Its
 * delivery-report callback calls dr_cb with (err, msg), then drops the reference and frees the
 * struct with free(); a record produced without one gets no Python call at all. */
struct cfl_msgstate {
        void *self;
        PyObject *dr_cb;
};

static PyTypeObject *message_type; /* confluent_kafka.Message */
static PyTypeObject *producer_type; /* confluent_kafka.Producer */
static PyObject *partial_type;      /* functools.partial */
static PyObject *str_report_run;
static char stamp_name[64];          /* the provenance header's name: "urep" */
static Py_ssize_t stamp_name_len;

#define STAMP_FIXED 14 /* u8 version | i64 offset | i32 partition | u8 origin length */
#define STAMP_VERSION 2 /* common/provenance.py: ... origin alias | u8 source length | source alias */

/* One route: where a source partition's records go, and its acquisition. `route` is a reference
 * of the holder's own (route_set/route_clear): destination and acks live as long as it does. */
typedef struct {
        PyObject *route;
        const char *destination;
        PyObject *acks;
        int32_t partition;
} Route;

static void route_clear(Route *r) {
        Py_CLEAR(r->route);
}

static void route_set(Route *dst, const Route *src) {
        PyObject *old = dst->route;
        Py_XINCREF(src->route);
        *dst = *src;
        Py_XDECREF(old);
}

/* Whether this file may copy the record, and where it goes. Returns 1 with *out filled (a reference
 * of out's own), 0 when the record is for Python, -1 on a Python error. `cache` holds the last route
 * and *cache_topic its topic (references of their own): runs are long. */
static int classify(PyObject *obj, PyObject *routes, Route *cache, PyObject **cache_topic, Route *out) {
        CflMessage *msg;
        PyObject *key, *pnum, *route;
        const void *value;
        size_t size;

        if (Py_TYPE(obj) != message_type)
                return 0;
        msg = (CflMessage *)obj;
        if ((msg->error && msg->error != Py_None) || !msg->topic || msg->headers)
                return 0; /* errors, and headers Python already converted, take the Python path */
        if ((msg->value && !PyBytes_CheckExact(msg->value)) || (msg->key && !PyBytes_CheckExact(msg->key)))
                return 0;
        if (msg->c_headers && rk_header_get_last(msg->c_headers, stamp_name, &value, &size) == 0)
                return 0; /* already stamped by an earlier hop: loop prevention decides in Python */
        if (cache->route && msg->partition == cache->partition && *cache_topic &&
            (msg->topic == *cache_topic || PyUnicode_Compare(msg->topic, *cache_topic) == 0)) {
                route_set(out, cache);
                return 1;
        }
        if (PyErr_Occurred())
                return -1;
        pnum = PyLong_FromLong(msg->partition);
        if (!pnum)
                return -1;
        key = PyTuple_Pack(2, msg->topic, pnum);
        Py_DECREF(pnum);
        if (!key)
                return -1;
        route = PyDict_GetItemWithError(routes, key);
        Py_DECREF(key);
        if (!route)
                return PyErr_Occurred() ? -1 : 0;
        if (!PyTuple_CheckExact(route) || PyTuple_GET_SIZE(route) != 4 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(route, 0)) || !PyLong_Check(PyTuple_GET_ITEM(route, 3))) {
                PyErr_SetString(PyExc_TypeError, "a route must be (destination, acks, topic, partition)");
                return -1;
        }
        {
                Route found;
                found.route       = route;
                found.destination = PyUnicode_AsUTF8(PyTuple_GET_ITEM(route, 0));
                if (!found.destination)
                        return -1;
                found.acks      = PyTuple_GET_ITEM(route, 1);
                found.partition = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(route, 3));
                if (found.partition == -1 && PyErr_Occurred())
                        return -1;
                if (found.partition != msg->partition)
                        return 0; /* not a same-partition route: only Python knows what to do */
                route_set(out, &found);
                route_set(cache, &found);
                Py_INCREF(msg->topic);
                Py_XSETREF(*cache_topic, msg->topic);
        }
        return 1;
}

static void put_be64(unsigned char *p, uint64_t v) {
        for (int i = 7; i >= 0; i--, v >>= 8)
                p[i] = (unsigned char)v;
}

static void put_be32(unsigned char *p, uint32_t v) {
        for (int i = 3; i >= 0; i--, v >>= 8)
                p[i] = (unsigned char)v;
}

PyDoc_STRVAR(mirror_doc,
"mirror(producer, messages, start, routes, alias) -> (next, err, produced, fetched_bytes, run_first, run_count, run_bytes)\n\n"
"Produce messages[start:] to their routes until a record Python must handle. Only the last\n"
"record of each run carries a callback, partial(acks.report_run, first, through, count, bytes),\n"
"booked with acks.sent_run(through, count, bytes). Stops at messages[next] when it is not\n"
"for this loop (err 0) or its produce failed (err: librdkafka's code); the run still open\n"
"then (run_count records from run_first, run_bytes bytes, same partition as messages[next])\n"
"is for Python to close.");

static PyObject *mirror(PyObject *module, PyObject *args) {
        PyObject *producer, *messages, *routes, *alias, *result = NULL;
        CflMessage *msg = NULL; /* the record being copied, held */
        Py_ssize_t start, n, i;
        rd_kafka_t *rk;
        Route cache = {0}, cur = {0}, nxt = {0};
        PyObject *cache_topic = NULL;
        int have_next;
        long long produced = 0, fetched = 0, run_first = 0, run_count = 0, run_bytes = 0;
        unsigned char stamp[STAMP_FIXED + 255 + 1 + 255];
        size_t stamp_len;
        Py_ssize_t alias_len;
        rd_kafka_resp_err_t err = 0;

        if (!rk_producev) {
                PyErr_SetString(PyExc_RuntimeError, "worker._native is not initialised");
                return NULL;
        }
        if (!PyArg_ParseTuple(args, "OO!nO!O!", &producer, &PyList_Type, &messages, &start, &PyDict_Type, &routes,
                              &PyBytes_Type, &alias))
                return NULL;
        if (Py_TYPE(producer) != producer_type) {
                PyErr_SetString(PyExc_TypeError, "producer must be a confluent_kafka.Producer");
                return NULL;
        }
        rk = ((CflHandle *)producer)->rk;
        if (!rk) {
                PyErr_SetString(PyExc_RuntimeError, "the producer is closed");
                return NULL;
        }
        alias_len = PyBytes_GET_SIZE(alias);
        if (alias_len > 255) {
                PyErr_SetString(PyExc_ValueError, "origin alias longer than 255 bytes");
                return NULL;
        }
        /* Records copied here start on the source cluster: origin and this hop's source are both `alias`. */
        stamp[0]  = STAMP_VERSION;
        stamp[13] = (unsigned char)alias_len;
        memcpy(stamp + STAMP_FIXED, PyBytes_AS_STRING(alias), (size_t)alias_len);
        stamp[STAMP_FIXED + alias_len] = (unsigned char)alias_len;
        memcpy(stamp + STAMP_FIXED + alias_len + 1, PyBytes_AS_STRING(alias), (size_t)alias_len);
        stamp_len = STAMP_FIXED + 2 * (size_t)alias_len + 1;

        /* Held across the calls into Python below (partial(), sent_run()): the list, the record
         * being copied and the producer, whose rd_kafka_t this loop produces to. The list's length
         * is read again after each such call. */
        Py_INCREF(messages);
        Py_INCREF(producer);
        n = PyList_GET_SIZE(messages);
        i = start;
        if (i < 0 || i >= n)
                goto done;
        switch (classify(PyList_GET_ITEM(messages, i), routes, &cache, &cache_topic, &cur)) {
        case -1:
                goto fail;
        case 0:
                goto done;
        }
        for (;;) {
                const char *value = NULL, *key = NULL;
                Py_ssize_t value_len = 0, key_len = 0;
                rd_kafka_headers_t *headers;
                struct cfl_msgstate *state = NULL;
                int close_run;

                n = PyList_GET_SIZE(messages);
                if (i >= n)
                        goto done; /* the list shrank under a callback: Python takes over */
                Py_INCREF(PyList_GET_ITEM(messages, i));
                Py_XSETREF(msg, (CflMessage *)PyList_GET_ITEM(messages, i));
                have_next = 0;
                if (i + 1 < n) {
                        have_next = classify(PyList_GET_ITEM(messages, i + 1), routes, &cache, &cache_topic, &nxt);
                        if (have_next < 0)
                                goto fail;
                }
                /* The run ends where the next record belongs to another partition or is Python's. */
                close_run = !have_next || nxt.route != cur.route;

                if (msg->value) {
                        value     = PyBytes_AS_STRING(msg->value);
                        value_len = PyBytes_GET_SIZE(msg->value);
                }
                if (msg->key) {
                        key     = PyBytes_AS_STRING(msg->key);
                        key_len = PyBytes_GET_SIZE(msg->key);
                }
                put_be64(stamp + 1, (uint64_t)msg->offset);
                put_be32(stamp + 9, (uint32_t)cur.partition);
                headers = msg->c_headers ? rk_headers_copy(msg->c_headers) : rk_headers_new(1);
                if (!headers) {
                        PyErr_NoMemory();
                        goto fail;
                }
                rk_header_add(headers, stamp_name, stamp_name_len, stamp, (ssize_t)stamp_len);

                if (!run_count)
                        run_first = msg->offset;
                run_count += 1;
                run_bytes += value_len + key_len;
                if (close_run) {
                        PyObject *report = PyObject_GetAttr(cur.acks, str_report_run);
                        PyObject *cb;
                        if (!report) {
                                rk_headers_destroy(headers);
                                goto fail;
                        }
                        cb = PyObject_CallFunction(partial_type, "OLLLL", report, run_first, (long long)msg->offset,
                                                   run_count, run_bytes);
                        Py_DECREF(report);
                        if (!cb) {
                                rk_headers_destroy(headers);
                                goto fail;
                        }
                        state = calloc(1, sizeof(*state));
                        if (!state) {
                                Py_DECREF(cb);
                                rk_headers_destroy(headers);
                                PyErr_NoMemory();
                                goto fail;
                        }
                        state->self  = producer;
                        state->dr_cb = cb; /* the reference goes to confluent-kafka's report */
                }
                err = rk_producev(rk, VTYPE_MSGFLAGS, MSG_F_COPY, VTYPE_TOPIC, cur.destination, VTYPE_PARTITION,
                                  cur.partition, VTYPE_KEY, key, (size_t)key_len, VTYPE_VALUE, value,
                                  (size_t)value_len, VTYPE_OPAQUE, (void *)state, VTYPE_TIMESTAMP,
                                  (int64_t)(msg->tstype != TIMESTAMP_NOT_AVAILABLE ? msg->timestamp : 0),
                                  VTYPE_HEADERS, headers, VTYPE_END);
                if (err) {
                        /* Not queued: nothing was taken over. Python handles this record, and the
                         * records before it in the run, which are queued but not yet covered. */
                        rk_headers_destroy(headers);
                        if (state) {
                                Py_DECREF(state->dr_cb);
                                free(state);
                        }
                        run_count -= 1;
                        run_bytes -= value_len + key_len;
                        goto done;
                }
                produced += 1;
                if (close_run) {
                        PyObject *r = PyObject_CallMethod(cur.acks, "sent_run", "LLL", (long long)msg->offset,
                                                          run_count, run_bytes);
                        if (!r)
                                goto fail; /* cannot happen short of memory; the report still comes */
                        Py_DECREF(r);
                        fetched += run_bytes;
                        run_count = run_bytes = 0;
                }
                i += 1;
                if (!have_next)
                        goto done;
                route_set(&cur, &nxt);
        }
done:
        result = Py_BuildValue("(niLLLLL)", i, (int)err, produced, fetched, run_first, run_count, run_bytes);
fail:
        route_clear(&cur);
        route_clear(&nxt);
        route_clear(&cache);
        Py_XDECREF(cache_topic);
        Py_XDECREF(msg);
        Py_DECREF(producer);
        Py_DECREF(messages);
        return result;
}

PyDoc_STRVAR(init_doc,
"init(extension_path, message_type, producer_type, sample, header_name)\n\n"
"Resolve librdkafka's functions through confluent-kafka's own extension module (already loaded:\n"
"RTLD_NOLOAD), i.e. from the librdkafka it links, and check the layout of\n"
"`sample`, a Message(topic='layout', partition=7, offset=1234567890123, key=b'k', value=b'vv',\n"
"timestamp=(1, 987654321012)). Raises RuntimeError on any mismatch.");

static PyObject *init(PyObject *module, PyObject *args) {
        const char *path, *name;
        Py_ssize_t name_len;
        PyObject *mtype, *ptype, *sample, *functools;
        void *lib;
        CflMessage *m;

        if (!PyArg_ParseTuple(args, "sO!O!Os#", &path, &PyType_Type, &mtype, &PyType_Type, &ptype, &sample, &name,
                              &name_len))
                return NULL;
        if (name_len <= 0 || (size_t)name_len >= sizeof(stamp_name)) {
                PyErr_SetString(PyExc_ValueError, "bad header name");
                return NULL;
        }
        rk_producev = NULL; /* uninitialised until every check below passed */
        lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        if (!lib) {
                PyErr_Format(PyExc_RuntimeError, "confluent-kafka's extension is not loaded from %s: %s", path,
                             dlerror());
                return NULL;
        }
        /* RTLD_NOLOAD took a reference of its own: kept in cimpl_lib (the previous one, from an
         * earlier init, released) once every check passed, released on the way out otherwise. */
#define RESOLVE(var, sym)                                                                       \
        do {                                                                                    \
                *(void **)(&var) = dlsym(lib, sym);                                             \
                if (!var) {                                                                     \
                        PyErr_Format(PyExc_RuntimeError, "librdkafka has no %s", sym);          \
                        goto fail;                                                              \
                }                                                                               \
        } while (0)
        RESOLVE(rk_headers_new, "rd_kafka_headers_new");
        RESOLVE(rk_headers_copy, "rd_kafka_headers_copy");
        RESOLVE(rk_headers_destroy, "rd_kafka_headers_destroy");
        RESOLVE(rk_header_add, "rd_kafka_header_add");
        RESOLVE(rk_header_get_last, "rd_kafka_header_get_last");
        RESOLVE(rk_type, "rd_kafka_type");
        RESOLVE(rk_name, "rd_kafka_name");
        RESOLVE(rk_opaque, "rd_kafka_opaque");
        if (Py_TYPE(sample) != (PyTypeObject *)mtype) {
                PyErr_SetString(PyExc_RuntimeError, "sample is not a Message");
                goto fail;
        }
        m = (CflMessage *)sample;
        if (!m->topic || !PyUnicode_Check(m->topic) || PyUnicode_CompareWithASCIIString(m->topic, "layout") != 0 ||
            !m->key || !PyBytes_Check(m->key) || PyBytes_GET_SIZE(m->key) != 1 || !m->value ||
            !PyBytes_Check(m->value) || PyBytes_GET_SIZE(m->value) != 2 || m->headers || m->c_headers ||
            (m->error && m->error != Py_None) || m->partition != 7 || m->offset != 1234567890123LL ||
            m->timestamp != 987654321012LL || m->tstype != 1) {
                PyErr_SetString(PyExc_RuntimeError,
                                "confluent_kafka.Message is not laid out as worker/_native.c expects");
                goto fail;
        }
        functools = PyImport_ImportModule("functools");
        if (!functools)
                goto fail;
        Py_XDECREF(partial_type);
        partial_type = PyObject_GetAttrString(functools, "partial");
        Py_DECREF(functools);
        if (!partial_type)
                goto fail;
        Py_XDECREF(message_type);
        Py_XDECREF(producer_type);
        Py_INCREF(mtype);
        Py_INCREF(ptype);
        message_type  = (PyTypeObject *)mtype;
        producer_type = (PyTypeObject *)ptype;
        memcpy(stamp_name, name, (size_t)name_len);
        stamp_name[name_len] = '\0';
        stamp_name_len       = name_len;
        RESOLVE(rk_producev, "rd_kafka_producev"); /* last: it is the "initialised" flag */
#undef RESOLVE
        if (cimpl_lib)
                dlclose(cimpl_lib);
        cimpl_lib = lib;
        Py_RETURN_NONE;
fail:
        rk_producev = NULL;
        dlclose(lib); /* nothing resolved through it is called: rk_producev is the gate */
        return NULL;
}

/* Whether n bytes at p can be read, without reading them here: the kernel copies them into a
 * pipe and answers EFAULT for an unmapped address, where a plain read would crash the worker. */
static int readable(const void *p, size_t n) {
        int fds[2], ok;
        char sink[64];

        if (!p || ((uintptr_t)p % sizeof(void *)) != 0 || n > sizeof(sink))
                return 0;
        if (pipe(fds) != 0)
                return 0;
        do
                ok = (size_t)write(fds[1], p, n) == n;
        while (!ok && errno == EINTR);
        close(fds[0]);
        close(fds[1]);
        return ok;
}

PyDoc_STRVAR(is_producer_doc,
"is_producer(obj, client_id) -> whether obj is a live confluent_kafka.Producer this file can drive.\n\n"
"Its Handle's rk is used only once validated: a readable, aligned address whose librdkafka\n"
"opaque is obj itself (confluent-kafka sets the Handle as the opaque), a producer, named\n"
"`client_id#producer-N`: reading the right field of the right object is proven by librdkafka\n"
"naming the client the worker configured.");

static PyObject *is_producer(PyObject *module, PyObject *args) {
        PyObject *obj;
        const char *client_id, *name;
        Py_ssize_t id_len;
        rd_kafka_t *rk;
        static const char suffix[] = "#producer-";

        if (!PyArg_ParseTuple(args, "Os#", &obj, &client_id, &id_len))
                return NULL;
        if (!rk_producev || Py_TYPE(obj) != producer_type)
                Py_RETURN_FALSE;
        rk = ((CflHandle *)obj)->rk;
        /* Validated before any librdkafka call dereferences it: an address the kernel can read,
         * then one whose opaque points back at this very Handle. */
        if (!readable(rk, sizeof(void *)) || rk_opaque(rk) != (void *)obj || rk_type(rk) != TYPE_PRODUCER)
                Py_RETURN_FALSE;
        name = rk_name(rk);
        return PyBool_FromLong(name && strncmp(name, client_id, (size_t)id_len) == 0 &&
                               strncmp(name + id_len, suffix, sizeof(suffix) - 1) == 0);
}

PyDoc_STRVAR(probe_doc,
"probe(message, header_name) -> (topic, value, key, headers, has_c_headers, c_header, error, partition,\n"
"offset, timestamp, tstype): every field of a Message as mirror() reads it, for the start-up self-test\n"
"(worker/selftest.py), which compares them with the Message's own accessors. c_header is the last\n"
"value of header_name in the consumed headers, read through librdkafka, or None.");

static PyObject *probe(PyObject *module, PyObject *args) {
        PyObject *obj, *c_header;
        const char *name;
        CflMessage *m;
        const void *value = NULL;
        size_t size       = 0;

        if (!PyArg_ParseTuple(args, "Os", &obj, &name))
                return NULL;
        if (!rk_producev) {
                PyErr_SetString(PyExc_RuntimeError, "worker._native is not initialised");
                return NULL;
        }
        if (Py_TYPE(obj) != message_type) {
                PyErr_SetString(PyExc_TypeError, "not a confluent_kafka.Message");
                return NULL;
        }
        m = (CflMessage *)obj;
        if (m->c_headers && rk_header_get_last(m->c_headers, name, &value, &size) == 0)
                c_header = PyBytes_FromStringAndSize(value ? (const char *)value : "", (Py_ssize_t)size);
        else {
                c_header = Py_None;
                Py_INCREF(c_header);
        }
        if (!c_header)
                return NULL;
        return Py_BuildValue("(OOOOiNOiLLi)", m->topic ? m->topic : Py_None, m->value ? m->value : Py_None,
                             m->key ? m->key : Py_None, m->headers ? m->headers : Py_None, m->c_headers != NULL,
                             c_header, m->error ? m->error : Py_None, (int)m->partition, (long long)m->offset,
                             (long long)m->timestamp, m->tstype);
}

static PyMethodDef methods[] = {
    {"init", init, METH_VARARGS, init_doc},
    {"mirror", mirror, METH_VARARGS, mirror_doc},
    {"is_producer", is_producer, METH_VARARGS, is_producer_doc},
    {"probe", probe, METH_VARARGS, probe_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "worker._native",
    "The mirror loop's inner copy in C (see worker/native.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
        PyObject *module = PyModule_Create(&module_def);
        if (!module)
                return NULL;
        str_report_run = PyUnicode_InternFromString("report_run");
        if (!str_report_run) {
                Py_DECREF(module);
                return NULL;
        }
        return module;
}
