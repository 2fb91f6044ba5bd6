"""_lib.py — the ctypes declarations of include/shardc.h and the library's loading.

The binding is over the public header only: every structure below mirrors
one of include/shardc.h field for field (the header is the contract; a
change there is a change here). The library is found, in order, at
$SHARDC_LIBRARY (a path to libshardc.so: the build tree's, for the tests),
then in the installed package (shardc/lib/libshardc.so, where the wheel puts
it next to its communicator modules in shardc/lib/shardc/). It is loaded
once per process, RTLD_GLOBAL so that the MPI and NCCL modules it dlopens on
first use resolve its functions.
"""
import ctypes
import os

c_char_p = ctypes.c_char_p
c_int32 = ctypes.c_int32
c_int64 = ctypes.c_int64
c_double = ctypes.c_double
c_bool = ctypes.c_bool
c_void_p = ctypes.c_void_p
POINTER = ctypes.POINTER

# shardc_status.h, in order.
STATUS_NAMES = ("ok", "io", "parse", "invalid", "unsupported", "limit", "nomem", "usage")
SC_OK, SC_ERR_IO, SC_ERR_PARSE, SC_ERR_INVALID, SC_ERR_UNSUPPORTED, SC_ERR_LIMIT, \
    SC_ERR_NOMEM, SC_ERR_USAGE = range(8)


class ModelOpts(ctypes.Structure):
    _fields_ = [("no_weights", c_bool), ("quiet", c_bool)]


class ModelInfo(ctypes.Structure):
    _fields_ = [("nodes", c_int64), ("nodes_before_fold", c_int64), ("params", c_int64),
                ("param_bytes", c_int64), ("flops", c_double),
                ("largest_activation_bytes", c_int64), ("blocks", c_int32)]


class DimBinding(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_int64)]


class ParallelOpts(ctypes.Structure):
    _fields_ = [("mesh", c_char_p), ("microbatches", c_int32), ("ranks_per_node", c_int64),
                ("stage_boundaries", c_char_p), ("sequence_parallel", c_bool),
                ("no_vocab_parallel", c_bool), ("plan_file", c_char_p), ("plan_json", c_char_p),
                ("cluster", c_char_p), ("expert_tensor_parallel", c_bool),
                ("reduce_dtype", c_char_p)]


class CompileSettings(ctypes.Structure):
    _fields_ = [("dims", POINTER(DimBinding)), ("n_dims", c_int32), ("parallel", ParallelOpts),
                ("target", ctypes.c_int), ("gpu_archs", c_char_p), ("no_fuse", c_bool),
                ("quiet", c_bool)]


class HostTensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int32), ("rank", c_int32),
                ("dims", c_int64 * 8), ("data", c_void_p)]


class RunOpts(ctypes.Structure):
    _fields_ = [("comm", c_char_p), ("threads", ctypes.c_int)]


class TrainingSettings(ctypes.Structure):
    _fields_ = [("dims", POINTER(DimBinding)), ("n_dims", c_int32), ("loss", c_char_p),
                ("logits", c_char_p), ("ignore_index", c_int64), ("optimizer", c_char_p),
                ("momentum", c_double), ("weight_decay", c_double), ("beta1", c_double),
                ("beta2", c_double), ("eps", c_double), ("nesterov", c_bool),
                ("clip_grad_norm", c_double), ("freeze", POINTER(c_char_p)),
                ("n_freeze", c_int32), ("threads", ctypes.c_int), ("precision", c_char_p),
                ("parallel", ParallelOpts), ("comm", c_char_p),
                ("recompute", c_char_p),
                ("aux_loss_names", POINTER(c_char_p)), ("aux_loss_coefs", POINTER(c_double)),
                ("n_aux_losses", c_int32)]


def _find():
    env = os.environ.get("SHARDC_LIBRARY")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libshardc.so")
    if os.path.exists(here):
        return here
    raise ImportError("shardc: libshardc.so not found: install the package (pip install .) "
                      "or set SHARDC_LIBRARY to the build tree's libshardc.so")


def _declare(lib):
    S = ctypes.c_int  # sc_status
    sigs = {
        "sc_status_name": (c_char_p, [ctypes.c_int]),
        "sc_model_load": (S, [c_char_p, POINTER(ModelOpts), POINTER(c_void_p)]),
        "sc_model_bind_dim": (S, [c_void_p, c_char_p, c_int64]),
        "sc_model_prepare": (S, [c_void_p]),
        "sc_model_stats": (S, [c_void_p, POINTER(ModelInfo)]),
        "sc_model_error": (c_char_p, [c_void_p]),
        "sc_model_free": (None, [c_void_p]),
        "sc_plan_json": (S, [c_char_p, POINTER(DimBinding), c_int32, POINTER(ParallelOpts),
                             POINTER(c_void_p), POINTER(c_void_p)]),
        "sc_plan_report_json": (S, [c_char_p, POINTER(DimBinding), c_int32,
                                    POINTER(ParallelOpts), POINTER(c_void_p),
                                    POINTER(c_void_p)]),
        "sc_string_free": (None, [c_void_p]),
        "sc_compile": (S, [c_char_p, POINTER(CompileSettings), POINTER(c_void_p)]),
        "sc_executable_save": (S, [c_void_p, c_char_p]),
        "sc_executable_load": (S, [c_char_p, POINTER(c_void_p)]),
        "sc_executable_n_inputs": (c_int32, [c_void_p]),
        "sc_executable_n_outputs": (c_int32, [c_void_p]),
        "sc_executable_input": (S, [c_void_p, c_int32, POINTER(HostTensor)]),
        "sc_executable_output": (S, [c_void_p, c_int32, POINTER(HostTensor)]),
        "sc_executable_n_ranks": (c_int64, [c_void_p]),
        "sc_executable_n_stages": (c_int32, [c_void_p]),
        "sc_executable_run": (S, [c_void_p, POINTER(RunOpts), POINTER(HostTensor), c_int32,
                                  POINTER(HostTensor), c_int32]),
        "sc_host_tensors_free": (None, [POINTER(HostTensor), c_int32]),
        "sc_executable_error": (c_char_p, [c_void_p]),
        "sc_executable_free": (None, [c_void_p]),
        "sc_training_settings_init": (None, [POINTER(TrainingSettings), c_char_p]),
        "sc_training_plan_json": (S, [c_char_p, POINTER(TrainingSettings), POINTER(c_void_p),
                                      POINTER(c_void_p), POINTER(c_void_p)]),
        "sc_training_create": (S, [c_char_p, POINTER(TrainingSettings), POINTER(c_void_p)]),
        "sc_training_step": (S, [c_void_p, POINTER(HostTensor), c_int32, c_double,
                                 POINTER(c_double), POINTER(c_double)]),
        "sc_training_steps_done": (c_int64, [c_void_p]),
        "sc_learning_rate": (c_double, [c_char_p, c_double, c_double, c_int64, c_int64,
                                        c_int64]),
        "sc_training_tensor": (S, [c_void_p, c_char_p, POINTER(HostTensor)]),
        "sc_training_error": (c_char_p, [c_void_p]),
        "sc_training_save": (S, [c_void_p, c_char_p]),
        "sc_training_resume": (S, [c_void_p, c_char_p]),
        "sc_training_save_bundle": (S, [c_void_p, c_char_p]),
        "sc_training_bundle_write": (S, [c_char_p, POINTER(TrainingSettings), c_char_p,
                                         POINTER(c_void_p)]),
        "sc_training_load": (S, [c_char_p, ctypes.c_int, POINTER(c_void_p)]),
        "sc_export_checkpoint": (S, [c_char_p, c_char_p, c_char_p, POINTER(c_void_p)]),
        "sc_training_free": (None, [c_void_p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


path = _find()
lib = _declare(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
