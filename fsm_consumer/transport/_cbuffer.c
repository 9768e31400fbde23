/* The buffer a frame body is received into (transport/_framing.py), without writing it first.

   bytearray(n) zeroes its n bytes while the thread holds the interpreter lock; for a Fetch answer of a
   few MB in a process whose heap is still growing, that memset is also where the kernel maps and zeroes
   every page (~2 ms per 4 MB frame, the application thread kept waiting). Every byte of the body is
   written by a receive before the frame is handed out (FrameReader hands out only whole bodies), so
   nothing need be written first: the pages are then touched by recv_into, outside the lock. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *uninitialized(PyObject *self, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "negative size"); return NULL; }
    return PyByteArray_FromStringAndSize(NULL, n);  /* NULL: allocated, not initialised */
}

static PyMethodDef methods[] = {
    {"uninitialized", (PyCFunction)uninitialized, METH_O, NULL},
    {NULL},
};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_cbuffer", NULL, -1, methods};
PyMODINIT_FUNC PyInit__cbuffer(void) { return PyModule_Create(&mod); }
