"""Triton's launcher build path without a GPU: triton.runtime.build.compile_module_from_src, which Triton's NVIDIA
driver calls for every kernel launcher (gcc, the image's Python headers, the module kept in Triton's cache), on a
trivial C extension; the module is loaded and called. Prints one JSON line."""
import json

from triton.runtime.build import compile_module_from_src

SOURCE = r"""
#include <Python.h>

static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}

static PyMethodDef methods[] = {{"add", add, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "trainstack_launcher_check", NULL, -1, methods};

PyMODINIT_FUNC PyInit_trainstack_launcher_check(void) { return PyModule_Create(&module); }
"""

module = compile_module_from_src(SOURCE, "trainstack_launcher_check")
print(json.dumps({"add": module.add(2, 3), "module": module.__file__}))
